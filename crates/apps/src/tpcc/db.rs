//! The TPC-C database in memory: its rows, how rows are placed on shards and shards on
//! processes, and a [`Shard`] that executes its part of a transaction deterministically.
//!
//! **Placement.** The warehouses are partitioned into [`TpccLayout::shards`] shards by a hash
//! of each row's key ([`TpccLayout::shard_of`]), so that with many shards the load spreads:
//!
//! * the warehouse row of `w` → one shard;
//! * district (`w`, `d`) with its customers, orders, new-orders, order lines and the history rows
//!   of the payments made at it → one shard;
//! * stock (`w`, `i`) → one shard, by `w` and `i`: a New-Order's lines spread;
//! * the item table is read-only and every shard has it (computed from the seed:
//!   [`super::gen::item_price`]), so every shard can tell a New-Order with an unused item and
//!   rolls it back alike.
//!
//! Each shard is kept by [`TpccLayout::replicas`] replicas. Process `p` is replica
//! `p / shards` of shard `p % shards` when `p < shards × replicas`; the processes above only
//! initiate ([`placement`]).
//!
//! **Execution.** A shard executes the part of a transaction on the rows it holds — its
//! presence is its ownership — in the order it is handed transactions. Since New-Order and
//! Payment are independent transactions, what a part does depends on the input and that shard's
//! rows only: the parts executed on shards add up to what the whole transaction does on one
//! unsharded database (a `Shard` that holds every row, [`Shard::full`]; the checker's model is
//! apart: [`super::reference`]).
//!
//! **For the baselines** (2PL, OCC): [`Shard::access`] names the rows a part reads and writes,
//! at [`RowKey`] granularity — what they lock and version — and [`Shard::execute_undoable`] with
//! [`Shard::undo`] executes in place and takes it back (2PL executes before it knows the
//! outcome; OCC's execution phase changes nothing).

use super::gen::{self, TpccScale, C_DATA_LEN_MAX};
use super::{
    Cents, Credit, CustomerSelector, NewOrderDistrict, NewOrderInput, NewOrderPart, PartResult,
    PaymentCustomer, PaymentInput, PaymentPart, Rate, TxnInput,
};
use onepipe_proto::ProcId;
use std::collections::BTreeMap;

/// Replicas per shard by default (§7.3.2: "3 replicas").
pub const REPLICAS_DEFAULT: u32 = 3;

/// SplitMix64's finalizer: a good 64-bit mix (consecutive inputs land far apart).
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A row's key, for placement — and the unit the baselines lock and version
/// ([`Shard::access`]): a district's key covers the rows kept with it (its customers, orders,
/// new-orders, order lines and history).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowKey {
    /// The warehouse row of `w`.
    Warehouse(u32),
    /// District (`w`, `d`) and everything kept with it.
    District(u32, u32),
    /// Stock (`w`, `i`).
    Stock(u32, u32),
}

/// How a transaction's part touches a row ([`Shard::access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Access {
    /// It only reads it.
    Read,
    /// It writes it (and may read it).
    Write,
}

/// What a process is in the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Replica `replica` of shard `shard` (and an initiator).
    Replica {
        /// The shard.
        shard: u32,
        /// Which of its replicas, from 0.
        replica: u32,
    },
    /// Only an initiator: it keeps no rows.
    Initiator,
}

/// Process `p`'s place among `shards` shards of `replicas` replicas each: replica
/// `p / shards` of shard `p % shards` when `p < shards × replicas`, else an initiator only.
pub fn placement(p: ProcId, shards: u32, replicas: u32) -> Placement {
    if u64::from(p.0) < u64::from(shards) * u64::from(replicas) {
        Placement::Replica {
            shard: p.0 % shards,
            replica: p.0 / shards,
        }
    } else {
        Placement::Initiator
    }
}

/// How the database is sharded and replicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TpccLayout {
    /// Shards, `0..shards`.
    pub shards: u32,
    /// Replicas per shard.
    pub replicas: u32,
}

impl TpccLayout {
    /// `shards` shards of `replicas` replicas each (both at least 1).
    pub fn new(shards: u32, replicas: u32) -> TpccLayout {
        assert!(shards >= 1 && replicas >= 1, "{shards} shards × {replicas}");
        TpccLayout { shards, replicas }
    }

    /// The layout of `procs` processes (the driver's): `procs / replicas` shards, at least 1,
    /// with `replicas` capped at `procs` so every replica is a process.
    pub fn for_procs(procs: u32, replicas: u32) -> TpccLayout {
        let replicas = replicas.clamp(1, procs.max(1));
        TpccLayout::new((procs / replicas).max(1), replicas)
    }

    /// Process `p`'s place ([`placement`]).
    pub fn placement(&self, p: ProcId) -> Placement {
        placement(p, self.shards, self.replicas)
    }

    /// The shard process `p` keeps, if any.
    pub fn shard_of_proc(&self, p: ProcId) -> Option<u32> {
        match self.placement(p) {
            Placement::Replica { shard, .. } => Some(shard),
            Placement::Initiator => None,
        }
    }

    /// The replicas of `shard`, replica 0 first.
    pub fn replicas_of(&self, shard: u32) -> impl Iterator<Item = ProcId> {
        let shards = self.shards;
        (0..self.replicas).map(move |r| ProcId(r * shards + shard))
    }

    /// The shard that holds `row`: a hash of its key.
    pub fn shard_of(&self, row: RowKey) -> u32 {
        let key = match row {
            RowKey::Warehouse(w) => 1 << 60 | u64::from(w),
            RowKey::District(w, d) => 2 << 60 | u64::from(w) << 8 | u64::from(d & 0xFF),
            RowKey::Stock(w, i) => 3 << 60 | u64::from(w) << 24 | u64::from(i & 0xFF_FFFF),
        };
        (mix64(key) % u64::from(self.shards)) as u32
    }

    /// The shards `input` touches, ascending: a rolled-back New-Order's too (every shard tells
    /// the rollback itself).
    pub fn shards_of(&self, input: &TxnInput) -> Vec<u32> {
        let mut s: Vec<u32> = match input {
            TxnInput::NewOrder(t) => [
                self.shard_of(RowKey::Warehouse(t.w_id)),
                self.shard_of(RowKey::District(t.w_id, t.d_id)),
            ]
            .into_iter()
            .chain(
                t.lines
                    .iter()
                    .map(|l| self.shard_of(RowKey::Stock(l.supply_w_id, l.i_id))),
            )
            .collect(),
            TxnInput::Payment(t) => vec![
                self.shard_of(RowKey::Warehouse(t.w_id)),
                self.shard_of(RowKey::District(t.w_id, t.d_id)),
                self.shard_of(RowKey::District(t.c_w_id, t.c_d_id)),
            ],
        };
        s.sort_unstable();
        s.dedup();
        s
    }
}

/// A warehouse row (the columns the two transactions use).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Warehouse {
    /// `W_TAX`.
    pub w_tax: Rate,
    /// `W_YTD`.
    pub w_ytd: Cents,
}

/// A customer row (`C_ID` is its place in the district, from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Customer {
    /// `C_FIRST`, as a random sort key: the by-last-name choice orders by it.
    pub c_first: u64,
    /// `C_LAST`, as its syllable code ([`gen::last_name`]).
    pub c_last: u16,
    /// `C_CREDIT`.
    pub c_credit: Credit,
    /// `C_DISCOUNT`.
    pub c_discount: Rate,
    /// `C_BALANCE`.
    pub c_balance: Cents,
    /// `C_YTD_PAYMENT`.
    pub c_ytd_payment: Cents,
    /// `C_PAYMENT_CNT`.
    pub c_payment_cnt: u32,
    /// `C_DATA`, as a hash of its content (a bad-credit payment prefixes it).
    pub c_data: u64,
    /// `C_DATA`'s length, at most [`C_DATA_LEN_MAX`].
    pub c_data_len: u16,
}

/// An order row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    /// `O_ID`.
    pub o_id: u32,
    /// `O_C_ID`.
    pub c_id: u32,
    /// `O_OL_CNT`.
    pub ol_cnt: u8,
    /// `O_ALL_LOCAL`.
    pub all_local: bool,
}

/// An order-line row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderLine {
    /// `OL_O_ID`.
    pub o_id: u32,
    /// `OL_NUMBER`, from 1.
    pub number: u8,
    /// `OL_I_ID`.
    pub i_id: u32,
    /// `OL_SUPPLY_W_ID`.
    pub supply_w_id: u32,
    /// `OL_QUANTITY`.
    pub quantity: u8,
    /// `OL_AMOUNT` (cents) = `OL_QUANTITY × I_PRICE`.
    pub amount: u32,
}

/// A history row, kept with the district the payment was made at (`H_W_ID`, `H_D_ID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct History {
    /// `H_C_ID`, as the payment named the customer (the customer's shard resolves a last name;
    /// this one may not hold that district).
    pub customer: CustomerSelector,
    /// `H_C_W_ID`.
    pub c_w_id: u32,
    /// `H_C_D_ID`.
    pub c_d_id: u32,
    /// `H_AMOUNT` (cents).
    pub amount: u32,
}

/// A stock row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stock {
    /// `S_QUANTITY`.
    pub s_quantity: u16,
    /// `S_YTD`.
    pub s_ytd: u32,
    /// `S_ORDER_CNT`.
    pub s_order_cnt: u32,
    /// `S_REMOTE_CNT`.
    pub s_remote_cnt: u32,
}

impl Stock {
    /// Clause 2.4.2.2: `S_QUANTITY` drops by the quantity if that leaves 10 or more, else drops
    /// by it and gains 91; `S_YTD` grows by it, `S_ORDER_CNT` by 1, `S_REMOTE_CNT` by 1 for a
    /// remote line.
    pub fn take(&mut self, quantity: u8, remote: bool) {
        let q = u16::from(quantity);
        self.s_quantity = if self.s_quantity >= q.saturating_add(10) {
            self.s_quantity - q
        } else {
            self.s_quantity.wrapping_sub(q).wrapping_add(91)
        };
        self.s_ytd = self.s_ytd.wrapping_add(u32::from(quantity));
        self.s_order_cnt = self.s_order_cnt.wrapping_add(1);
        if remote {
            self.s_remote_cnt = self.s_remote_cnt.wrapping_add(1);
        }
    }
}

/// A district with the rows kept with it: its customers, orders, new-orders, order lines and
/// the history of payments made at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct District {
    d_tax: Rate,
    d_ytd: Cents,
    d_next_o_id: u32,
    /// By `C_ID − 1`.
    customers: Vec<Customer>,
    /// (`C_LAST`, `C_FIRST`, `C_ID`) of every customer, sorted: the by-last-name index.
    by_last: Vec<(u16, u64, u32)>,
    orders: Vec<Order>,
    /// `NO_O_ID` of the NEW-ORDER rows (no Delivery transaction removes them).
    new_orders: Vec<u32>,
    order_lines: Vec<OrderLine>,
    history: Vec<History>,
}

impl District {
    /// A district as loaded, with `customers` (by `C_ID − 1`) and no orders.
    pub fn new(d_tax: Rate, d_ytd: Cents, customers: Vec<Customer>) -> District {
        let mut by_last: Vec<(u16, u64, u32)> = customers
            .iter()
            .zip(1u32..)
            .map(|(c, id)| (c.c_last, c.c_first, id))
            .collect();
        by_last.sort_unstable();
        District {
            d_tax,
            d_ytd,
            d_next_o_id: 1,
            customers,
            by_last,
            orders: Vec::new(),
            new_orders: Vec::new(),
            order_lines: Vec::new(),
            history: Vec::new(),
        }
    }

    /// `D_TAX`.
    pub fn d_tax(&self) -> Rate {
        self.d_tax
    }
    /// `D_YTD`.
    pub fn d_ytd(&self) -> Cents {
        self.d_ytd
    }
    /// `D_NEXT_O_ID`.
    pub fn d_next_o_id(&self) -> u32 {
        self.d_next_o_id
    }
    /// Customer `c_id` (from 1).
    pub fn customer(&self, c_id: u32) -> Option<&Customer> {
        self.customers.get(c_id.checked_sub(1)? as usize)
    }
    /// The customers, by `C_ID − 1`.
    pub fn customers(&self) -> &[Customer] {
        &self.customers
    }
    /// The orders, by `O_ID`.
    pub fn orders(&self) -> &[Order] {
        &self.orders
    }
    /// `NO_O_ID` of the NEW-ORDER rows.
    pub fn new_orders(&self) -> &[u32] {
        &self.new_orders
    }
    /// The order lines, by (`OL_O_ID`, `OL_NUMBER`).
    pub fn order_lines(&self) -> &[OrderLine] {
        &self.order_lines
    }
    /// The history rows of payments made at this district, in order.
    pub fn history(&self) -> &[History] {
        &self.history
    }

    /// Clause 2.5.2.2: the customer of last name `code` at position ⌈n/2⌉ of the `n` that have
    /// it, sorted by `C_FIRST` (ties, which random 64-bit keys make unlikely, by `C_ID`).
    pub fn by_last_name(&self, code: u16) -> Option<u32> {
        let from = self.by_last.partition_point(|e| e.0 < code);
        let to = self.by_last.partition_point(|e| e.0 <= code);
        let n = to - from;
        (n > 0).then(|| self.by_last[from + n.div_ceil(2) - 1].2)
    }

    /// The customer `selector` names (clause 2.5.2.2), if the district has one by that name.
    /// Only `C_LAST` and `C_FIRST` decide, and no transaction changes them.
    fn resolve(&self, selector: CustomerSelector) -> Option<u32> {
        match selector {
            CustomerSelector::Id(id) => Some(id).filter(|&id| self.customer(id).is_some()),
            CustomerSelector::LastName(code) => self.by_last_name(code),
        }
    }

    /// What New-Order and Payment may change here, as it is — with customer `c_id`'s row, if
    /// given — for [`District::restore`].
    fn mark(&self, c_id: Option<u32>) -> DistrictMark {
        DistrictMark {
            d_ytd: self.d_ytd,
            d_next_o_id: self.d_next_o_id,
            orders: self.orders.len(),
            new_orders: self.new_orders.len(),
            order_lines: self.order_lines.len(),
            history: self.history.len(),
            customer: c_id.and_then(|id| Some((id, *self.customer(id)?))),
        }
    }

    /// Back to `m`. Orders, new-orders, order lines and history are only ever appended to, so
    /// cutting them to their marked lengths undoes what was executed since — provided nothing
    /// else touched the district in between (the caller holds it locked).
    fn restore(&mut self, m: DistrictMark) {
        debug_assert!(self.orders.len() >= m.orders && self.history.len() >= m.history);
        self.d_ytd = m.d_ytd;
        self.d_next_o_id = m.d_next_o_id;
        self.orders.truncate(m.orders);
        self.new_orders.truncate(m.new_orders);
        self.order_lines.truncate(m.order_lines);
        self.history.truncate(m.history);
        if let Some((id, c)) = m.customer {
            self.customers[(id - 1) as usize] = c;
        }
    }

    /// The district's part of New-Order `t` (clause 2.4.2.2): takes `D_NEXT_O_ID` and inserts
    /// the order, its new-order and order lines — unless rolled back; reads the customer.
    fn new_order(&mut self, t: &NewOrderInput, rolled_back: bool, price: impl Fn(u32) -> Cents) {
        let o_id = self.d_next_o_id;
        if rolled_back {
            return;
        }
        self.d_next_o_id = o_id.wrapping_add(1);
        self.orders.push(Order {
            o_id,
            c_id: t.c_id,
            ol_cnt: t.lines.len() as u8,
            all_local: t.lines.iter().all(|l| l.supply_w_id == t.w_id),
        });
        self.new_orders.push(o_id);
        for (n, l) in t.lines.iter().enumerate() {
            self.order_lines.push(OrderLine {
                o_id,
                number: n as u8 + 1,
                i_id: l.i_id,
                supply_w_id: l.supply_w_id,
                quantity: l.quantity,
                amount: (Cents::from(l.quantity) * price(l.i_id)) as u32,
            });
        }
    }

    /// What New-Order `t` read here, `o_id` being the order's number.
    fn new_order_read(&self, t: &NewOrderInput, o_id: u32) -> NewOrderDistrict {
        let c = self.customer(t.c_id);
        NewOrderDistrict {
            d_tax: self.d_tax,
            o_id,
            c_discount: c.map_or(0, |c| c.c_discount),
            c_last: c.map_or(0, |c| c.c_last),
            c_credit: c.map_or(Credit::Good, |c| c.c_credit),
        }
    }

    /// The home district's part of Payment `t`: `D_YTD` grows, a history row is inserted.
    fn payment_home(&mut self, t: &PaymentInput) -> Cents {
        self.d_ytd = self.d_ytd.wrapping_add(Cents::from(t.amount));
        self.history.push(History {
            customer: t.customer,
            c_w_id: t.c_w_id,
            c_d_id: t.c_d_id,
            amount: t.amount,
        });
        self.d_ytd
    }

    /// The customer's part of Payment `t` (clause 2.5.2.2): resolves the customer, updates its
    /// balance, year-to-date payment and count, and for bad credit prefixes `C_DATA` with
    /// `C_ID C_D_ID C_W_ID D_ID W_ID H_AMOUNT` (kept as a hash and a length).
    fn payment_customer(&mut self, t: &PaymentInput) -> PaymentCustomer {
        let Some(c_id) = self.resolve(t.customer) else {
            return PaymentCustomer {
                c_id: 0,
                c_balance: 0,
                c_credit: Credit::Good,
            };
        };
        let c = &mut self.customers[(c_id - 1) as usize];
        let amount = Cents::from(t.amount);
        c.c_balance = c.c_balance.wrapping_sub(amount);
        c.c_ytd_payment = c.c_ytd_payment.wrapping_add(amount);
        c.c_payment_cnt = c.c_payment_cnt.wrapping_add(1);
        if c.c_credit == Credit::Bad {
            let fields = [c_id, t.c_d_id, t.c_w_id, t.d_id, t.w_id, t.amount];
            let mut h = c.c_data;
            let mut len = 0u32;
            for f in fields {
                h = mix64(h.rotate_left(7) ^ u64::from(f));
                len += decimal_len(f) + 1;
            }
            c.c_data = h;
            c.c_data_len = (u32::from(c.c_data_len) + len).min(u32::from(C_DATA_LEN_MAX)) as u16;
        }
        PaymentCustomer {
            c_id,
            c_balance: c.c_balance,
            c_credit: c.c_credit,
        }
    }
}

/// A district's changeable state, marked before a part executes ([`Undo`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct DistrictMark {
    d_ytd: Cents,
    d_next_o_id: u32,
    orders: usize,
    new_orders: usize,
    order_lines: usize,
    history: usize,
    /// The customer a Payment updates, as it was.
    customer: Option<(u32, Customer)>,
}

/// What restores the rows one part's execution wrote ([`Shard::execute_undoable`],
/// [`Shard::undo`]): their earlier values (a district's appended rows as marked lengths).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Undo {
    warehouses: Vec<(u32, Warehouse)>,
    districts: Vec<((u32, u32), DistrictMark)>,
    stock: Vec<(u64, Stock)>,
}

impl Undo {
    /// It restores nothing: the part wrote nothing.
    pub fn is_empty(&self) -> bool {
        self.warehouses.is_empty() && self.districts.is_empty() && self.stock.is_empty()
    }
}

/// Digits of `x` in decimal.
fn decimal_len(x: u32) -> u32 {
    x.checked_ilog10().map_or(1, |l| l + 1)
}

/// The rows of one shard (or, unsharded, of the whole database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    scale: TpccScale,
    seed: u64,
    warehouses: BTreeMap<u32, Warehouse>,
    districts: BTreeMap<(u32, u32), District>,
    /// By key `w << 32 | i`, sorted.
    stock: Vec<(u64, Stock)>,
}

/// The stock table's key of (`w`, `i`).
fn stock_key(w: u32, i: u32) -> u64 {
    u64::from(w) << 32 | u64::from(i)
}

impl Shard {
    /// Shard `shard` of `layout`, as loaded from population seed `seed`: only its rows.
    pub fn populate(scale: &TpccScale, seed: u64, layout: &TpccLayout, shard: u32) -> Shard {
        assert!(shard < layout.shards, "shard {shard} of {}", layout.shards);
        Shard::build(scale, seed, |row| layout.shard_of(row) == shard)
    }

    /// The whole database as loaded from `seed`, unsharded (the population the checker's
    /// reference reads as data).
    pub fn full(scale: &TpccScale, seed: u64) -> Shard {
        Shard::build(scale, seed, |_| true)
    }

    fn build(scale: &TpccScale, seed: u64, keep: impl Fn(RowKey) -> bool) -> Shard {
        if let Err(e) = scale.validate() {
            panic!("{e}");
        }
        let mut s = Shard {
            scale: *scale,
            seed,
            warehouses: BTreeMap::new(),
            districts: BTreeMap::new(),
            stock: Vec::new(),
        };
        for w in 1..=scale.warehouses {
            if keep(RowKey::Warehouse(w)) {
                s.warehouses.insert(w, gen::warehouse(seed, scale, w));
            }
            for d in 1..=scale.districts_per_warehouse {
                if keep(RowKey::District(w, d)) {
                    s.districts.insert((w, d), gen::district(seed, scale, w, d));
                }
            }
            for i in 1..=scale.items {
                if keep(RowKey::Stock(w, i)) {
                    s.stock.push((stock_key(w, i), gen::stock(seed, w, i)));
                }
            }
        }
        debug_assert!(s.stock.windows(2).all(|p| p[0].0 < p[1].0));
        s
    }

    /// Its scale.
    pub fn scale(&self) -> &TpccScale {
        &self.scale
    }

    /// `I_PRICE` of item `i`, `None` for an unused number (every shard has the item table).
    pub fn item_price(&self, i: u32) -> Option<Cents> {
        gen::item_price(self.seed, self.scale.items, i)
    }

    /// The warehouse rows it holds, by `W_ID`.
    pub fn warehouses(&self) -> impl Iterator<Item = (u32, &Warehouse)> {
        self.warehouses.iter().map(|(&w, r)| (w, r))
    }

    /// The districts it holds, by (`W_ID`, `D_ID`).
    pub fn districts(&self) -> impl Iterator<Item = ((u32, u32), &District)> {
        self.districts.iter().map(|(&k, d)| (k, d))
    }

    /// District (`w`, `d`), if it holds it.
    pub fn district(&self, w: u32, d: u32) -> Option<&District> {
        self.districts.get(&(w, d))
    }

    /// The stock rows it holds, by (`W_ID`, `I_ID`).
    pub fn stock(&self) -> impl Iterator<Item = ((u32, u32), &Stock)> {
        self.stock
            .iter()
            .map(|(k, s)| (((k >> 32) as u32, *k as u32), s))
    }

    /// Stock row (`w`, `i`), if it holds it.
    pub fn stock_row(&self, w: u32, i: u32) -> Option<&Stock> {
        let k = stock_key(w, i);
        let at = self.stock.binary_search_by_key(&k, |e| e.0).ok()?;
        Some(&self.stock[at].1)
    }

    fn stock_mut(&mut self, w: u32, i: u32) -> Option<&mut Stock> {
        let k = stock_key(w, i);
        let at = self.stock.binary_search_by_key(&k, |e| e.0).ok()?;
        Some(&mut self.stock[at].1)
    }

    /// Executes its part of `input` on the rows it holds and says what it read and decided.
    /// Deterministic: the same rows and the same sequence of inputs give the same results and
    /// rows. `input` is assumed valid for the scale ([`TxnInput::is_valid`]); if not, rows it
    /// names that do not exist are simply not there.
    pub fn execute(&mut self, input: &TxnInput) -> PartResult {
        match input {
            TxnInput::NewOrder(t) => PartResult::NewOrder(self.new_order(t)),
            TxnInput::Payment(t) => PartResult::Payment(self.payment(t)),
        }
    }

    /// The rows held here that `input`'s part reads or writes, ascending by key, each once —
    /// exactly what [`Shard::execute`] reads or changes, so that parts with no row in common,
    /// or only rows both read, commute (what the baselines lock and version, §7.3.2):
    ///
    /// * New-Order: the warehouse row read (`W_TAX`); the district written (`D_NEXT_O_ID`, the
    ///   order, its new-order and lines; the customer read) — only read if an unused item rolls
    ///   the transaction back (clause 2.4.2.3); each line's stock row written, unless rolled
    ///   back. The item table is read-only: not a row here.
    /// * Payment: the warehouse row (`W_YTD`), the home district (`D_YTD`, history) and the
    ///   customer's district (the customer) written.
    pub fn access(&self, input: &TxnInput) -> Vec<(RowKey, Access)> {
        let mut rows = Vec::new();
        let mut add = |shard: &Shard, row: RowKey, a: Access| {
            if shard.holds(row) {
                rows.push((row, a));
            }
        };
        match input {
            TxnInput::NewOrder(t) => {
                let rolled_back = t.lines.iter().any(|l| self.item_price(l.i_id).is_none());
                add(self, RowKey::Warehouse(t.w_id), Access::Read);
                let district = if rolled_back {
                    Access::Read
                } else {
                    Access::Write
                };
                add(self, RowKey::District(t.w_id, t.d_id), district);
                if !rolled_back {
                    for l in &t.lines {
                        add(self, RowKey::Stock(l.supply_w_id, l.i_id), Access::Write);
                    }
                }
            }
            TxnInput::Payment(t) => {
                add(self, RowKey::Warehouse(t.w_id), Access::Write);
                add(self, RowKey::District(t.w_id, t.d_id), Access::Write);
                add(self, RowKey::District(t.c_w_id, t.c_d_id), Access::Write);
            }
        }
        // A row named twice (a repeated item, a local payment's district) is taken once, as
        // written if either writes it.
        rows.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        rows.dedup_by_key(|r| r.0);
        rows
    }

    /// Whether it holds `row`.
    pub fn holds(&self, row: RowKey) -> bool {
        match row {
            RowKey::Warehouse(w) => self.warehouses.contains_key(&w),
            RowKey::District(w, d) => self.districts.contains_key(&(w, d)),
            RowKey::Stock(w, i) => self.stock_row(w, i).is_some(),
        }
    }

    /// [`Shard::execute`], with what restores the rows it wrote ([`Shard::undo`]): for a
    /// protocol that executes in place before it knows whether the transaction commits.
    pub fn execute_undoable(&mut self, input: &TxnInput) -> (PartResult, Undo) {
        let mut undo = Undo::default();
        for (row, a) in self.access(input) {
            if a == Access::Read {
                continue;
            }
            match row {
                RowKey::Warehouse(w) => {
                    undo.warehouses
                        .extend(self.warehouses.get(&w).map(|r| (w, *r)));
                }
                RowKey::District(w, d) => {
                    let c_id = match input {
                        TxnInput::Payment(t) if (t.c_w_id, t.c_d_id) == (w, d) => Some(t.customer),
                        _ => None,
                    };
                    if let Some(r) = self.districts.get(&(w, d)) {
                        let mark = r.mark(c_id.and_then(|c| r.resolve(c)));
                        undo.districts.push(((w, d), mark));
                    }
                }
                RowKey::Stock(w, i) => {
                    undo.stock
                        .extend(self.stock_row(w, i).map(|s| (stock_key(w, i), *s)));
                }
            }
        }
        (self.execute(input), undo)
    }

    /// Restores the rows `undo` saved, undoing the part that [`Shard::execute_undoable`]
    /// returned it with. Correct only if no other part wrote those rows in between (under the
    /// baselines, the part holds them locked).
    pub fn undo(&mut self, undo: Undo) {
        for (w, r) in undo.warehouses {
            self.warehouses.insert(w, r);
        }
        for (k, m) in undo.districts {
            if let Some(d) = self.districts.get_mut(&k) {
                d.restore(m);
            }
        }
        for (k, s) in undo.stock {
            if let Ok(at) = self.stock.binary_search_by_key(&k, |e| e.0) {
                self.stock[at].1 = s;
            }
        }
    }

    /// New-Order (clause 2.4.2.2) on the rows held here.
    fn new_order(&mut self, t: &NewOrderInput) -> NewOrderPart {
        // Clause 2.4.2.3: an unused item number rolls the whole transaction back. Every shard
        // has the item table, so every shard tells alike and changes nothing.
        let rolled_back = t.lines.iter().any(|l| self.item_price(l.i_id).is_none());
        let w_tax = self.warehouses.get(&t.w_id).map(|w| w.w_tax);
        let (seed, items) = (self.seed, self.scale.items);
        let price = move |i| gen::item_price(seed, items, i).unwrap_or(0);
        let district = self.districts.get_mut(&(t.w_id, t.d_id)).map(|d| {
            let o_id = d.d_next_o_id;
            d.new_order(t, rolled_back, price);
            d.new_order_read(t, o_id)
        });
        let mut stock = Vec::new();
        if !rolled_back {
            for (n, l) in t.lines.iter().enumerate() {
                if let Some(s) = self.stock_mut(l.supply_w_id, l.i_id) {
                    s.take(l.quantity, l.supply_w_id != t.w_id);
                    stock.push((n as u8, s.s_quantity));
                }
            }
        }
        NewOrderPart {
            rolled_back,
            w_tax,
            district,
            stock,
        }
    }

    /// Payment (clause 2.5.2.2) on the rows held here.
    fn payment(&mut self, t: &PaymentInput) -> PaymentPart {
        let w_ytd = self.warehouses.get_mut(&t.w_id).map(|w| {
            w.w_ytd = w.w_ytd.wrapping_add(Cents::from(t.amount));
            w.w_ytd
        });
        let d_ytd = self
            .districts
            .get_mut(&(t.w_id, t.d_id))
            .map(|d| d.payment_home(t));
        let customer = self
            .districts
            .get_mut(&(t.c_w_id, t.c_d_id))
            .map(|d| d.payment_customer(t));
        PaymentPart {
            w_ytd,
            d_ytd,
            customer,
        }
    }

    /// A hash of all its rows (the item table excepted: it never changes): replicas of one shard
    /// that went through the same transactions have the same digest. The checker's reference
    /// computes the same formula over its own rows (`reference::Rows::digest`): a change here
    /// must be made there too.
    pub fn digest(&self) -> u64 {
        self.digest_where(|_| true)
    }

    /// The digest the rows of shard `shard` of `layout` would have, taken from this shard's rows
    /// (an unsharded `Shard` holds every row): equal to that shard's [`Shard::digest`] when their
    /// rows are equal.
    pub fn digest_of(&self, layout: &TpccLayout, shard: u32) -> u64 {
        self.digest_where(|row| layout.shard_of(row) == shard)
    }

    fn digest_where(&self, keep: impl Fn(RowKey) -> bool) -> u64 {
        let mut h = Fold(0x7C_C0DE);
        for (&w, r) in self
            .warehouses
            .iter()
            .filter(|e| keep(RowKey::Warehouse(*e.0)))
        {
            h.add(&[1, w.into(), r.w_tax.into(), r.w_ytd as u64]);
        }
        for (&(w, d), r) in self
            .districts
            .iter()
            .filter(|e| keep(RowKey::District(e.0 .0, e.0 .1)))
        {
            h.district(w, d, r);
        }
        for &(k, s) in self
            .stock
            .iter()
            .filter(|e| keep(RowKey::Stock((e.0 >> 32) as u32, e.0 as u32)))
        {
            h.add(&[
                3,
                k,
                s.s_quantity.into(),
                s.s_ytd.into(),
                s.s_order_cnt.into(),
                s.s_remote_cnt.into(),
            ]);
        }
        h.0
    }

    /// A digest of one row's state (`0` if not held): for tests of what a part changes.
    #[cfg(test)]
    pub(crate) fn digest_row(&self, row: RowKey) -> u64 {
        if self.holds(row) {
            self.digest_where(|r| r == row)
        } else {
            0
        }
    }

    /// Changes `W_YTD` of `w` by `delta`: a corruption for tests of the checker.
    #[cfg(test)]
    pub(crate) fn corrupt_w_ytd(&mut self, w: u32, delta: Cents) {
        if let Some(r) = self.warehouses.get_mut(&w) {
            r.w_ytd += delta;
        }
    }

    /// Stock row (`w`, `i`) to corrupt, for tests of the checker.
    #[cfg(test)]
    pub(crate) fn corrupt_stock(&mut self, w: u32, i: u32) -> Option<&mut Stock> {
        self.stock_mut(w, i)
    }

    /// Customer `c` of district (`w`, `d`) to corrupt, for tests of the checker.
    #[cfg(test)]
    pub(crate) fn corrupt_customer(&mut self, w: u32, d: u32, c: u32) -> Option<&mut Customer> {
        let district = self.districts.get_mut(&(w, d))?;
        district.customers.get_mut(c.checked_sub(1)? as usize)
    }
}

/// A running digest.
struct Fold(u64);

impl Fold {
    fn add(&mut self, xs: &[u64]) {
        for &x in xs {
            self.0 = mix64(self.0.rotate_left(23) ^ x);
        }
    }

    fn district(&mut self, w: u32, d: u32, r: &District) {
        self.add(&[2, w.into(), d.into(), r.d_tax.into(), r.d_ytd as u64]);
        self.add(&[r.d_next_o_id.into()]);
        for c in &r.customers {
            self.add(&[
                c.c_first,
                c.c_last.into(),
                (c.c_credit == Credit::Bad).into(),
                c.c_discount.into(),
                c.c_balance as u64,
                c.c_ytd_payment as u64,
                c.c_payment_cnt.into(),
                c.c_data,
                c.c_data_len.into(),
            ]);
        }
        self.add(&[
            r.orders.len() as u64,
            r.order_lines.len() as u64,
            r.history.len() as u64,
        ]);
        for o in &r.orders {
            self.add(&[
                o.o_id.into(),
                o.c_id.into(),
                o.ol_cnt.into(),
                o.all_local.into(),
            ]);
        }
        self.add(&[r.new_orders.len() as u64]);
        for &n in &r.new_orders {
            self.add(&[n.into()]);
        }
        for l in &r.order_lines {
            self.add(&[
                l.o_id.into(),
                l.number.into(),
                l.i_id.into(),
                l.supply_w_id.into(),
                l.quantity.into(),
                l.amount.into(),
            ]);
        }
        for h in &r.history {
            let (by_name, c) = match h.customer {
                CustomerSelector::Id(c) => (0, c),
                CustomerSelector::LastName(n) => (1, u32::from(n)),
            };
            self.add(&[
                by_name,
                c.into(),
                h.c_w_id.into(),
                h.c_d_id.into(),
                h.amount.into(),
            ]);
        }
    }
}
