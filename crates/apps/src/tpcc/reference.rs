//! TPC-C's reference for the checker: New-Order (clause 2.4) and Payment (clause 2.5) written
//! from the specification (v5.11), on a plain in-memory database of its own ([`Rows`]: ordered
//! maps of plain rows, one map per table).
//!
//! It shares no code with the implementation it judges ([`super::db`]): only the transaction
//! inputs ([`TxnInput`] and what it holds), the column types of [`super`] (`Cents`, `Rate`,
//! `Credit`) and the initial population, taken as data — [`Population::load`] reads the
//! loader's rows ([`Shard::full`], [`gen::item_price`]) into its own row structs, and
//! [`Rows::from_shard`] reads any shard's rows the same way, so the checker can compare a
//! replica's final rows with the reference's. It never calls [`Shard::execute`] or anything else
//! that executes a transaction.
//!
//! **Representation.** It keeps the columns the implementation keeps, in the implementation's
//! documented units and departures ([`super`]'s module docs): money in cents, rates (tax,
//! discount) in 1/10 000, `C_FIRST` as a 64-bit sort key, `C_DATA` as a hash and a length,
//! `H_C_ID` as the payment's customer selector, no dates, names, addresses, `I_DATA`, `S_DATA`,
//! `S_DIST_xx` or `OL_DIST_INFO`. What follows from those departures: `brand-generic`
//! (clause 2.4.2.2, from `I_DATA` and `S_DATA`) and `H_DATA` (clause 2.5.2.2, from `W_NAME` and
//! `D_NAME`) cannot be computed, and are not. The hash of `C_DATA` ([`CData`]) and the state digest
//! ([`Rows::digest`]) mirror the implementation's formulas, because they are how its state is
//! represented and reported; both are written out here, not called.
//!
//! What it is not: fast (it favours the specification's wording), sharded, or a model of
//! Delivery, Order-Status or Stock-Level.

use super::db::{District, RowKey, Shard, TpccLayout};
use super::gen::{self, TpccScale};
use super::{Cents, Credit, CustomerSelector, NewOrderInput, PaymentInput, Rate, TxnInput};
use std::collections::{BTreeMap, BTreeSet};

/// `C_DATA`'s longest (clause 2.5.2.2: "never exceeds 500 characters").
const C_DATA_LEN_MAX: i64 = 500;

/// A WAREHOUSE row (clause 1.3.1), the columns New-Order and Payment use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarehouseRow {
    /// `W_TAX`, in 1/10 000.
    pub w_tax: Rate,
    /// `W_YTD`, in cents.
    pub w_ytd: Cents,
}

/// A DISTRICT row (clause 1.3.2), its own columns (the rows kept with it are in their tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistrictRow {
    /// `D_TAX`, in 1/10 000.
    pub d_tax: Rate,
    /// `D_YTD`, in cents.
    pub d_ytd: Cents,
    /// `D_NEXT_O_ID`.
    pub d_next_o_id: u32,
}

/// `C_DATA` as the implementation represents it: a hash of its content and its length
/// (clause 2.5.2.2 keeps at most 500 characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CData {
    /// A hash standing for the content.
    pub hash: u64,
    /// Its length in characters, at most 500.
    pub len: i64,
}

impl CData {
    /// Clause 2.5.2.2: "C_ID, C_D_ID, C_W_ID, D_ID, W_ID, and H_AMOUNT, are inserted at the left
    /// of the C_DATA field by shifting the existing content of C_DATA to the right by an equal
    /// number of bytes and by discarding the bytes that are shifted out of the right side";
    /// "the content of the C_DATA field never exceeds 500 characters".
    ///
    /// The entry is the six numbers in decimal, each followed by one separator (`H_AMOUNT` in
    /// cents, the implementation's unit). The content is a hash: the old content's, then each
    /// number folded in (SplitMix64's finalizer over a rotate-xor, the implementation's
    /// representation; it stands for the characters, which no check reads).
    fn prefix(&mut self, fields: [u32; 6]) {
        let entry: String = fields.iter().map(|f| format!("{f} ")).collect();
        for f in fields {
            self.hash = splitmix64(self.hash.rotate_left(7) ^ u64::from(f));
        }
        self.len = (self.len + entry.len() as i64).min(C_DATA_LEN_MAX);
    }
}

/// A CUSTOMER row (clause 1.3.4), the columns the two transactions use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CustomerRow {
    /// `C_FIRST`, as a sort key.
    pub c_first: u64,
    /// `C_LAST`, as its syllable code (clause 4.3.2.3).
    pub c_last: u16,
    /// `C_CREDIT`.
    pub c_credit: Credit,
    /// `C_DISCOUNT`, in 1/10 000.
    pub c_discount: Rate,
    /// `C_BALANCE`, in cents.
    pub c_balance: Cents,
    /// `C_YTD_PAYMENT`, in cents.
    pub c_ytd_payment: Cents,
    /// `C_PAYMENT_CNT`.
    pub c_payment_cnt: i64,
    /// `C_DATA`.
    pub c_data: CData,
}

/// An ORDER row (clause 1.3.6), keyed by (`O_W_ID`, `O_D_ID`, `O_ID`). `O_ENTRY_D` is not kept
/// and `O_CARRIER_ID` is null in every row: no Delivery sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderRow {
    /// `O_C_ID`.
    pub c_id: u32,
    /// `O_OL_CNT`.
    pub ol_cnt: i64,
    /// `O_ALL_LOCAL`.
    pub all_local: bool,
}

/// An ORDER-LINE row (clause 1.3.8), keyed by (`OL_W_ID`, `OL_D_ID`, `OL_O_ID`, `OL_NUMBER`).
/// `OL_DELIVERY_D` is null in every row: no Delivery sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderLineRow {
    /// `OL_I_ID`.
    pub i_id: u32,
    /// `OL_SUPPLY_W_ID`.
    pub supply_w_id: u32,
    /// `OL_QUANTITY`.
    pub quantity: i64,
    /// `OL_AMOUNT`, in cents.
    pub amount: Cents,
}

/// A HISTORY row (clause 1.3.5), kept by its home district (`H_W_ID`, `H_D_ID`) in insertion
/// order (the table has no key). `H_C_ID` is the payment's selector (a departure: see the module
/// docs); `H_DATE` and `H_DATA` are not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryRow {
    /// `H_C_ID`, as the payment named the customer.
    pub customer: CustomerSelector,
    /// `H_C_W_ID`.
    pub c_w_id: u32,
    /// `H_C_D_ID`.
    pub c_d_id: u32,
    /// `H_AMOUNT`, in cents.
    pub amount: Cents,
}

/// A STOCK row (clause 1.3.9), the columns New-Order updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockRow {
    /// `S_QUANTITY`.
    pub s_quantity: i64,
    /// `S_YTD`.
    pub s_ytd: i64,
    /// `S_ORDER_CNT`.
    pub s_order_cnt: i64,
    /// `S_REMOTE_CNT`.
    pub s_remote_cnt: i64,
}

/// The tables (ITEM aside: it is read-only, [`Population::prices`]), each an ordered map from
/// its primary key to its row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rows {
    /// WAREHOUSE by `W_ID`.
    pub warehouses: BTreeMap<u32, WarehouseRow>,
    /// DISTRICT by (`D_W_ID`, `D_ID`).
    pub districts: BTreeMap<(u32, u32), DistrictRow>,
    /// CUSTOMER by (`C_W_ID`, `C_D_ID`, `C_ID`).
    pub customers: BTreeMap<(u32, u32, u32), CustomerRow>,
    /// ORDER by (`O_W_ID`, `O_D_ID`, `O_ID`).
    pub orders: BTreeMap<(u32, u32, u32), OrderRow>,
    /// NEW-ORDER: (`NO_W_ID`, `NO_D_ID`, `NO_O_ID`).
    pub new_orders: BTreeSet<(u32, u32, u32)>,
    /// ORDER-LINE by (`OL_W_ID`, `OL_D_ID`, `OL_O_ID`, `OL_NUMBER`).
    pub order_lines: BTreeMap<(u32, u32, u32, u32), OrderLineRow>,
    /// HISTORY by (`H_W_ID`, `H_D_ID`), in insertion order; a district with none is absent.
    pub history: BTreeMap<(u32, u32), Vec<HistoryRow>>,
    /// STOCK by (`S_W_ID`, `S_I_ID`).
    pub stock: BTreeMap<(u32, u32), StockRow>,
}

/// The database as loaded: its rows and the ITEM table's prices.
#[derive(Debug, Clone)]
pub struct Population {
    /// The rows as loaded.
    pub rows: Rows,
    /// `I_PRICE` of item `i` at `i − 1`, in cents.
    pub prices: Vec<Cents>,
}

/// The terminal output of a New-Order (clause 2.4.3.3), the parts the representation keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrderOutcome {
    /// Clause 2.4.2.3: an item number was not valid; the transaction was rolled back.
    pub rolled_back: bool,
    /// `W_TAX`.
    pub w_tax: Rate,
    /// `D_TAX`.
    pub d_tax: Rate,
    /// `O_ID`: `D_NEXT_O_ID` as read (on a rollback the increment is undone with the rest).
    pub o_id: u32,
    /// `C_DISCOUNT`.
    pub c_discount: Rate,
    /// `C_LAST`.
    pub c_last: u16,
    /// `C_CREDIT`.
    pub c_credit: Credit,
    /// Per order line, in input order; empty when rolled back.
    pub lines: Vec<LineOutcome>,
    /// Clause 2.4.2.2: `sum(OL_AMOUNT) × (1 − C_DISCOUNT) × (1 + W_TAX + D_TAX)`, in cents,
    /// rounded half up; `None` when rolled back.
    pub total_amount: Option<Cents>,
}

/// One order line's output (clause 2.4.3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineOutcome {
    /// `I_PRICE`.
    pub i_price: Cents,
    /// `S_QUANTITY` after the update.
    pub s_quantity: i64,
    /// `OL_AMOUNT`.
    pub ol_amount: Cents,
}

/// What a Payment's customer left (clause 2.5.3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaymentCustomerOutcome {
    /// `C_ID`, as selected.
    pub c_id: u32,
    /// `C_BALANCE` after.
    pub c_balance: Cents,
    /// `C_CREDIT`.
    pub c_credit: Credit,
}

/// The output of a Payment (clause 2.5.3.3), with the year-to-date totals it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaymentOutcome {
    /// `W_YTD` after.
    pub w_ytd: Cents,
    /// `D_YTD` after.
    pub d_ytd: Cents,
    /// The customer, `None` if no customer of the district bears the last name (possible only
    /// in databases smaller than the specification's).
    pub customer: Option<PaymentCustomerOutcome>,
}

/// What one transaction gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A New-Order's.
    NewOrder(NewOrderOutcome),
    /// A Payment's.
    Payment(PaymentOutcome),
}

/// The reference database: executes New-Order and Payment on its own [`Rows`].
#[derive(Debug, Clone)]
pub struct Reference {
    rows: Rows,
    prices: Vec<Cents>,
    /// For each (`C_W_ID`, `C_D_ID`, `C_LAST`), its customers' `C_ID`s sorted by `C_FIRST`
    /// (then `C_ID`): neither column changes, so it is built once.
    by_last: BTreeMap<(u32, u32, u16), Vec<u32>>,
}

impl Population {
    /// The database of `scale` loaded from `seed`, read as data: the loader's rows
    /// ([`Shard::full`]) and item prices ([`gen::item_price`]).
    pub fn load(scale: &TpccScale, seed: u64) -> Population {
        let prices = (1..=scale.items)
            .map(|i| gen::item_price(seed, scale.items, i).expect("every item has a price"))
            .collect();
        Population {
            rows: Rows::from_shard(&Shard::full(scale, seed)),
            prices,
        }
    }

    /// `I_PRICE` of item `i`; `None` for an unused item number.
    pub fn price(&self, i: u32) -> Option<Cents> {
        self.prices.get(i.checked_sub(1)? as usize).copied()
    }
}

impl Rows {
    /// The rows `shard` holds, read as data (a replica's state, or the loader's).
    pub fn from_shard(shard: &Shard) -> Rows {
        let mut r = Rows::default();
        for (w, row) in shard.warehouses() {
            r.warehouses.insert(
                w,
                WarehouseRow {
                    w_tax: row.w_tax,
                    w_ytd: row.w_ytd,
                },
            );
        }
        for ((w, d), dist) in shard.districts() {
            r.districts.insert(
                (w, d),
                DistrictRow {
                    d_tax: dist.d_tax(),
                    d_ytd: dist.d_ytd(),
                    d_next_o_id: dist.d_next_o_id(),
                },
            );
            r.add_customers(w, d, dist);
            r.add_orders(w, d, dist);
        }
        for ((w, i), s) in shard.stock() {
            let row = StockRow {
                s_quantity: s.s_quantity.into(),
                s_ytd: s.s_ytd.into(),
                s_order_cnt: s.s_order_cnt.into(),
                s_remote_cnt: s.s_remote_cnt.into(),
            };
            r.stock.insert((w, i), row);
        }
        r
    }

    /// The customers of district `d` of warehouse `w`, read from `dist`.
    fn add_customers(&mut self, w: u32, d: u32, dist: &District) {
        for (c, row) in (1u32..).zip(dist.customers()) {
            self.customers.insert(
                (w, d, c),
                CustomerRow {
                    c_first: row.c_first,
                    c_last: row.c_last,
                    c_credit: row.c_credit,
                    c_discount: row.c_discount,
                    c_balance: row.c_balance,
                    c_ytd_payment: row.c_ytd_payment,
                    c_payment_cnt: row.c_payment_cnt.into(),
                    c_data: CData {
                        hash: row.c_data,
                        len: row.c_data_len.into(),
                    },
                },
            );
        }
    }

    /// The orders, new orders, order lines and history of district `d` of warehouse `w`, read
    /// from `dist`.
    fn add_orders(&mut self, w: u32, d: u32, dist: &District) {
        for o in dist.orders() {
            let row = OrderRow {
                c_id: o.c_id,
                ol_cnt: o.ol_cnt.into(),
                all_local: o.all_local,
            };
            self.orders.insert((w, d, o.o_id), row);
        }
        self.new_orders
            .extend(dist.new_orders().iter().map(|&o| (w, d, o)));
        for l in dist.order_lines() {
            let row = OrderLineRow {
                i_id: l.i_id,
                supply_w_id: l.supply_w_id,
                quantity: l.quantity.into(),
                amount: l.amount.into(),
            };
            self.order_lines
                .insert((w, d, l.o_id, u32::from(l.number)), row);
        }
        let history: Vec<HistoryRow> = dist
            .history()
            .iter()
            .map(|h| HistoryRow {
                customer: h.customer,
                c_w_id: h.c_w_id,
                c_d_id: h.c_d_id,
                amount: h.amount.into(),
            })
            .collect();
        if !history.is_empty() {
            self.history.insert((w, d), history);
        }
    }

    /// Adds `other`'s rows (of other keys: shards hold disjoint rows).
    pub fn extend(&mut self, other: Rows) {
        self.warehouses.extend(other.warehouses);
        self.districts.extend(other.districts);
        self.customers.extend(other.customers);
        self.orders.extend(other.orders);
        self.new_orders.extend(other.new_orders);
        self.order_lines.extend(other.order_lines);
        self.history.extend(other.history);
        self.stock.extend(other.stock);
    }

    /// Rows in all tables (a district's history rows each count).
    pub fn len(&self) -> usize {
        self.warehouses.len()
            + self.districts.len()
            + self.customers.len()
            + self.orders.len()
            + self.new_orders.len()
            + self.order_lines.len()
            + self.history.values().map(Vec::len).sum::<usize>()
            + self.stock.len()
    }

    /// True if it holds no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows split by the shard of `layout` that holds them (the layout's placement: a
    /// district's key places the rows kept with it). Every shard of the layout has an entry.
    pub fn split(&self, layout: &TpccLayout) -> BTreeMap<u32, Rows> {
        let mut out: BTreeMap<u32, Rows> =
            (0..layout.shards).map(|s| (s, Rows::default())).collect();
        for (&w, r) in &self.warehouses {
            shard_rows(&mut out, layout, RowKey::Warehouse(w))
                .warehouses
                .insert(w, *r);
        }
        for (&(w, d), r) in &self.districts {
            shard_rows(&mut out, layout, RowKey::District(w, d))
                .districts
                .insert((w, d), *r);
        }
        for (&k, r) in &self.customers {
            shard_rows(&mut out, layout, RowKey::District(k.0, k.1))
                .customers
                .insert(k, *r);
        }
        for (&k, r) in &self.orders {
            shard_rows(&mut out, layout, RowKey::District(k.0, k.1))
                .orders
                .insert(k, *r);
        }
        for &k in &self.new_orders {
            shard_rows(&mut out, layout, RowKey::District(k.0, k.1))
                .new_orders
                .insert(k);
        }
        for (&k, r) in &self.order_lines {
            shard_rows(&mut out, layout, RowKey::District(k.0, k.1))
                .order_lines
                .insert(k, *r);
        }
        for (&k, r) in &self.history {
            shard_rows(&mut out, layout, RowKey::District(k.0, k.1))
                .history
                .insert(k, r.clone());
        }
        for (&k, r) in &self.stock {
            shard_rows(&mut out, layout, RowKey::Stock(k.0, k.1))
                .stock
                .insert(k, *r);
        }
        out
    }

    /// How `self` (what a replica holds) differs from `expected`: the rows that differ, are
    /// missing or are extra (a district's history counts as one row), and a description of the
    /// first.
    pub fn diff(&self, expected: &Rows) -> (u64, Option<String>) {
        let mut d = Diff::default();
        d.maps("WAREHOUSE", &self.warehouses, &expected.warehouses);
        d.maps("DISTRICT", &self.districts, &expected.districts);
        d.maps("CUSTOMER", &self.customers, &expected.customers);
        d.maps("ORDER", &self.orders, &expected.orders);
        let unit = |s: &BTreeSet<(u32, u32, u32)>| -> BTreeMap<(u32, u32, u32), ()> {
            s.iter().map(|&k| (k, ())).collect()
        };
        d.maps(
            "NEW-ORDER",
            &unit(&self.new_orders),
            &unit(&expected.new_orders),
        );
        d.maps("ORDER-LINE", &self.order_lines, &expected.order_lines);
        d.maps("HISTORY", &self.history, &expected.history);
        d.maps("STOCK", &self.stock, &expected.stock);
        (d.rows, d.first)
    }

    /// A digest of the rows, by the implementation's formula (`Shard::digest`, written out
    /// here from its definition, not called): the live runtime's replicas report only that, so
    /// the reference's rows of a shard must hash alike to be compared with them.
    pub fn digest(&self) -> u64 {
        let mut h = Fold(0x7C_C0DE);
        for (&w, r) in &self.warehouses {
            h.add(&[1, w.into(), r.w_tax.into(), r.w_ytd as u64]);
        }
        for (&(w, d), r) in &self.districts {
            self.digest_district(&mut h, w, d, r);
        }
        for (&(w, i), s) in &self.stock {
            h.add(&[
                3,
                u64::from(w) << 32 | u64::from(i),
                s.s_quantity as u64,
                s.s_ytd as u64,
                s.s_order_cnt as u64,
                s.s_remote_cnt as u64,
            ]);
        }
        h.0
    }

    fn digest_district(&self, h: &mut Fold, w: u32, d: u32, r: &DistrictRow) {
        h.add(&[2, w.into(), d.into(), r.d_tax.into(), r.d_ytd as u64]);
        h.add(&[r.d_next_o_id.into()]);
        let customers = self.customers.range((w, d, 0)..=(w, d, u32::MAX));
        for (_, c) in customers {
            h.add(&[
                c.c_first,
                c.c_last.into(),
                (c.c_credit == Credit::Bad).into(),
                c.c_discount.into(),
                c.c_balance as u64,
                c.c_ytd_payment as u64,
                c.c_payment_cnt as u64,
                c.c_data.hash,
                c.c_data.len as u64,
            ]);
        }
        let orders = self.orders.range((w, d, 0)..=(w, d, u32::MAX));
        let lines = self
            .order_lines
            .range((w, d, 0, 0)..=(w, d, u32::MAX, u32::MAX));
        let new_orders = self.new_orders.range((w, d, 0)..=(w, d, u32::MAX));
        let history = self.history.get(&(w, d)).map_or(&[][..], Vec::as_slice);
        h.add(&[
            orders.clone().count() as u64,
            lines.clone().count() as u64,
            history.len() as u64,
        ]);
        for (&(_, _, o), r) in orders {
            h.add(&[o.into(), r.c_id.into(), r.ol_cnt as u64, r.all_local.into()]);
        }
        h.add(&[new_orders.clone().count() as u64]);
        for &(_, _, o) in new_orders {
            h.add(&[o.into()]);
        }
        for (&(_, _, o, n), l) in lines {
            h.add(&[
                o.into(),
                n.into(),
                l.i_id.into(),
                l.supply_w_id.into(),
                l.quantity as u64,
                l.amount as u64,
            ]);
        }
        for r in history {
            let (by_name, c) = match r.customer {
                CustomerSelector::Id(c) => (0, c),
                CustomerSelector::LastName(n) => (1, u32::from(n)),
            };
            h.add(&[
                by_name,
                c.into(),
                r.c_w_id.into(),
                r.c_d_id.into(),
                r.amount as u64,
            ]);
        }
    }
}

impl Reference {
    /// A reference database starting from `population`.
    pub fn new(population: Population) -> Reference {
        let by_last = by_last_name_index(&population.rows);
        Reference {
            rows: population.rows,
            prices: population.prices,
            by_last,
        }
    }

    /// Its rows as they are.
    pub fn rows(&self) -> &Rows {
        &self.rows
    }

    /// Executes `input` to its end (commit or, for New-Order, rollback, clause 2.4.2.3): what it
    /// output. `None`, with nothing changed, if it names a warehouse, district, customer or
    /// stock row the database does not hold (an input no valid run has: clause 2.4.1, 2.5.1).
    pub fn execute(&mut self, input: &TxnInput) -> Option<Outcome> {
        match input {
            TxnInput::NewOrder(t) => self.new_order(t).map(Outcome::NewOrder),
            TxnInput::Payment(t) => self.payment(t).map(Outcome::Payment),
        }
    }

    /// Clause 2.4.2.2, New-Order. Writes are staged and applied at the end, so a rollback
    /// (clause 2.4.2.3) leaves every row as it was.
    fn new_order(&mut self, t: &NewOrderInput) -> Option<NewOrderOutcome> {
        // §2.4.2.2: "The row in the WAREHOUSE table with matching W_ID is selected and W_TAX,
        // the warehouse tax rate, is retrieved."
        let w_tax = self.rows.warehouses.get(&t.w_id)?.w_tax;
        // §2.4.2.2: the DISTRICT row: D_TAX and D_NEXT_O_ID retrieved, D_NEXT_O_ID incremented
        // by one (staged below).
        let district = *self.rows.districts.get(&(t.w_id, t.d_id))?;
        let o_id = district.d_next_o_id;
        // §2.4.2.2: the CUSTOMER row: C_DISCOUNT, C_LAST and C_CREDIT retrieved.
        let c = *self.rows.customers.get(&(t.w_id, t.d_id, t.c_id))?;
        let mut out = NewOrderOutcome {
            rolled_back: false,
            w_tax,
            d_tax: district.d_tax,
            o_id,
            c_discount: c.c_discount,
            c_last: c.c_last,
            c_credit: c.c_credit,
            lines: Vec::new(),
            total_amount: None,
        };
        let mut stock: BTreeMap<(u32, u32), StockRow> = BTreeMap::new();
        let mut lines = BTreeMap::new();
        for (number, l) in (1u32..).zip(&t.lines) {
            // §2.4.2.2: "The row in the ITEM table with matching I_ID (equals OL_I_ID) is
            // selected and I_PRICE, I_NAME, and I_DATA are retrieved. If I_ID has an unused
            // value (see Clause 2.4.1.5), a "not-found" condition is signaled, resulting in a
            // rollback of the database transaction (see Clause 2.4.2.3)."
            let Some(i_price) = self.price(l.i_id) else {
                out.rolled_back = true;
                out.lines.clear();
                return Some(out);
            };
            // §2.4.2.2: the STOCK row with S_I_ID = OL_I_ID and S_W_ID = OL_SUPPLY_W_ID (an
            // item named twice sees its first line's update).
            let key = (l.supply_w_id, l.i_id);
            let s = match stock.get(&key) {
                Some(s) => *s,
                None => *self.rows.stock.get(&key)?,
            };
            let s = take_stock(s, i64::from(l.quantity), l.supply_w_id != t.w_id);
            stock.insert(key, s);
            // §2.4.2.2: "The amount for the item in the order (OL_AMOUNT) is computed as:
            // OL_QUANTITY * I_PRICE".
            let ol_amount = i64::from(l.quantity) * i_price;
            lines.insert(
                (t.w_id, t.d_id, o_id, number),
                OrderLineRow {
                    i_id: l.i_id,
                    supply_w_id: l.supply_w_id,
                    quantity: l.quantity.into(),
                    amount: ol_amount,
                },
            );
            out.lines.push(LineOutcome {
                i_price,
                s_quantity: s.s_quantity,
                ol_amount,
            });
        }
        out.total_amount = Some(total_amount(&out));
        // Commit: the staged writes.
        self.commit_new_order(t, o_id, lines, stock)?;
        Some(out)
    }

    /// Commits New-Order `t` as order `o_id`: the staged order lines and stock rows, and the
    /// district, order and new-order rows (clause 2.4.2.2).
    fn commit_new_order(
        &mut self,
        t: &NewOrderInput,
        o_id: u32,
        lines: BTreeMap<(u32, u32, u32, u32), OrderLineRow>,
        stock: BTreeMap<(u32, u32), StockRow>,
    ) -> Option<()> {
        let d = self.rows.districts.get_mut(&(t.w_id, t.d_id))?;
        d.d_next_o_id = o_id + 1;
        // §2.4.2.2: "A new row is inserted into both the NEW-ORDER table and the ORDER table to
        // reflect the creation of the new order. O_CARRIER_ID is set to a null value. If the
        // order includes only home order-lines, then O_ALL_LOCAL is set to 1, otherwise
        // O_ALL_LOCAL is set to 0." "The number of items, O_OL_CNT, is computed to match
        // ol_cnt."
        let order = OrderRow {
            c_id: t.c_id,
            ol_cnt: t.lines.len() as i64,
            all_local: t.lines.iter().all(|l| l.supply_w_id == t.w_id),
        };
        self.rows.orders.insert((t.w_id, t.d_id, o_id), order);
        self.rows.new_orders.insert((t.w_id, t.d_id, o_id));
        // §2.4.2.2: "A new row is inserted into the ORDER-LINE table to reflect the item on the
        // order. OL_DELIVERY_D is set to a null value, OL_NUMBER is set to a unique value
        // within all the ORDER-LINE rows that have the same OL_O_ID value".
        self.rows.order_lines.extend(lines);
        self.rows.stock.extend(stock);
        Some(())
    }

    /// Clause 2.5.2.2, Payment.
    fn payment(&mut self, t: &PaymentInput) -> Option<PaymentOutcome> {
        let home = (t.w_id, t.d_id);
        let customer_district = (t.c_w_id, t.c_d_id);
        if !self.rows.warehouses.contains_key(&t.w_id)
            || !self.rows.districts.contains_key(&home)
            || !self.rows.districts.contains_key(&customer_district)
        {
            return None;
        }
        let h_amount = Cents::from(t.amount);
        // §2.5.2.2: "The row in the WAREHOUSE table with matching W_ID is selected. W_NAME,
        // W_STREET_1, ... are retrieved and W_YTD, the warehouse's year-to-date balance, is
        // increased by H_AMOUNT."
        let w = self.rows.warehouses.get_mut(&t.w_id)?;
        w.w_ytd += h_amount;
        let w_ytd = w.w_ytd;
        // §2.5.2.2: likewise the DISTRICT row: "D_YTD, the district's year-to-date balance, is
        // increased by H_AMOUNT."
        let d = self.rows.districts.get_mut(&home)?;
        d.d_ytd += h_amount;
        let d_ytd = d.d_ytd;
        let customer = self.select_customer(t).map(|c_id| self.pay(t, c_id));
        // §2.5.2.2: "H_DATA is built by concatenating W_NAME and D_NAME separated by 4 spaces"
        // — no names are kept (module docs). "A new row is inserted into the HISTORY table with
        // H_C_ID = C_ID, H_C_D_ID = C_D_ID, H_C_W_ID = C_W_ID, H_D_ID = D_ID, and H_W_ID = W_ID."
        self.rows.history.entry(home).or_default().push(HistoryRow {
            customer: t.customer,
            c_w_id: t.c_w_id,
            c_d_id: t.c_d_id,
            amount: h_amount,
        });
        Some(PaymentOutcome {
            w_ytd,
            d_ytd,
            customer,
        })
    }

    /// Clause 2.5.2.2, the customer: Case 1 by `C_ID`; Case 2 by `C_LAST`: "all rows in the
    /// CUSTOMER table with matching C_W_ID, C_D_ID and C_LAST are selected sorted by C_FIRST in
    /// ascending order. Let n be the number of rows selected. C_ID, ... are retrieved from the
    /// row at position n/2 rounded up in the sorted set of selected rows".
    fn select_customer(&self, t: &PaymentInput) -> Option<u32> {
        match t.customer {
            CustomerSelector::Id(id) => self
                .rows
                .customers
                .contains_key(&(t.c_w_id, t.c_d_id, id))
                .then_some(id),
            CustomerSelector::LastName(code) => {
                middle(self.by_last.get(&(t.c_w_id, t.c_d_id, code))?)
            }
        }
    }

    /// Clause 2.5.2.2, the selected customer's update.
    fn pay(&mut self, t: &PaymentInput, c_id: u32) -> PaymentCustomerOutcome {
        let h_amount = Cents::from(t.amount);
        let c = self
            .rows
            .customers
            .get_mut(&(t.c_w_id, t.c_d_id, c_id))
            .expect("a selected customer exists");
        // §2.5.2.2: "C_BALANCE is decreased by H_AMOUNT. C_YTD_PAYMENT is increased by
        // H_AMOUNT. C_PAYMENT_CNT is incremented by 1."
        c.c_balance -= h_amount;
        c.c_ytd_payment += h_amount;
        c.c_payment_cnt += 1;
        // §2.5.2.2: "If the value of C_CREDIT is equal to "BC", then C_DATA is also retrieved
        // from the selected customer and the following history information: C_ID, C_D_ID,
        // C_W_ID, D_ID, W_ID, and H_AMOUNT, are inserted at the left of the C_DATA field".
        if c.c_credit == Credit::Bad {
            c.c_data
                .prefix([c_id, t.c_d_id, t.c_w_id, t.d_id, t.w_id, t.amount]);
        }
        PaymentCustomerOutcome {
            c_id,
            c_balance: c.c_balance,
            c_credit: c.c_credit,
        }
    }

    /// `I_PRICE` of item `i`; `None` for an unused item number.
    fn price(&self, i: u32) -> Option<Cents> {
        self.prices.get(i.checked_sub(1)? as usize).copied()
    }
}

/// Clause 2.4.2.2, one order line's STOCK update: "If the retrieved value for S_QUANTITY
/// exceeds OL_QUANTITY by 10 or more, then S_QUANTITY is decreased by OL_QUANTITY; otherwise
/// S_QUANTITY is updated to (S_QUANTITY - OL_QUANTITY)+91. S_YTD is increased by OL_QUANTITY
/// and S_ORDER_CNT is incremented by 1. If the order-line is remote, then S_REMOTE_CNT is
/// incremented by 1."
fn take_stock(mut s: StockRow, ol_quantity: i64, remote: bool) -> StockRow {
    s.s_quantity = if s.s_quantity - ol_quantity >= 10 {
        s.s_quantity - ol_quantity
    } else {
        s.s_quantity - ol_quantity + 91
    };
    s.s_ytd += ol_quantity;
    s.s_order_cnt += 1;
    if remote {
        s.s_remote_cnt += 1;
    }
    s
}

/// Clause 2.4.2.2: "The total-amount for the complete order is computed as:
/// sum(OL_AMOUNT) * (1 - C_DISCOUNT) * (1 + W_TAX + D_TAX)". In cents with rates in 1/10 000,
/// exactly, then rounded half up to the cent (the specification displays money to the cent,
/// clause 2.4.3.3; it states no rounding).
fn total_amount(o: &NewOrderOutcome) -> Cents {
    let sum: i128 = o.lines.iter().map(|l| i128::from(l.ol_amount)).sum();
    let exact = sum
        * (10_000 - i128::from(o.c_discount))
        * (10_000 + i128::from(o.w_tax) + i128::from(o.d_tax));
    let unit = 100_000_000;
    ((exact + unit / 2).div_euclid(unit)) as Cents
}

/// The customers of each (`C_W_ID`, `C_D_ID`, `C_LAST`) of `rows`, by `C_FIRST` ascending (then
/// `C_ID`: the specification does not say how to order equal first names).
pub fn by_last_name_index(rows: &Rows) -> BTreeMap<(u32, u32, u16), Vec<u32>> {
    let mut by: BTreeMap<(u32, u32, u16), Vec<(u64, u32)>> = BTreeMap::new();
    for (&(w, d, c), row) in &rows.customers {
        by.entry((w, d, row.c_last))
            .or_default()
            .push((row.c_first, c));
    }
    by.into_iter()
        .map(|(k, mut v)| {
            v.sort_unstable();
            (k, v.into_iter().map(|(_, c)| c).collect())
        })
        .collect()
}

/// Clause 2.5.2.2: the row at position ⌈n/2⌉ (from 1) of `sorted`.
pub fn middle(sorted: &[u32]) -> Option<u32> {
    let n = sorted.len();
    (n > 0).then(|| sorted[n.div_ceil(2) - 1])
}

/// The rows of the shard of `layout` that holds `row`.
fn shard_rows<'a>(
    out: &'a mut BTreeMap<u32, Rows>,
    layout: &TpccLayout,
    row: RowKey,
) -> &'a mut Rows {
    out.entry(layout.shard_of(row)).or_default()
}

/// SplitMix64's finalizer (Steele, Lea and Flood, 2014), as the representation's hashes use it.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A running digest ([`Rows::digest`]).
struct Fold(u64);

impl Fold {
    fn add(&mut self, xs: &[u64]) {
        for &x in xs {
            self.0 = splitmix64(self.0.rotate_left(23) ^ x);
        }
    }
}

/// Differences between two sets of tables, counted, the first described.
#[derive(Default)]
struct Diff {
    rows: u64,
    first: Option<String>,
}

impl Diff {
    fn maps<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
        &mut self,
        table: &str,
        got: &BTreeMap<K, V>,
        expected: &BTreeMap<K, V>,
    ) {
        if got == expected {
            return;
        }
        let keys: BTreeSet<&K> = got.keys().chain(expected.keys()).collect();
        for k in keys {
            let (g, e) = (got.get(k), expected.get(k));
            if g != e {
                self.rows += 1;
                self.first.get_or_insert_with(|| {
                    format!("{table} {k:?}: the replica has {g:?}, the reference {e:?}")
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stock(q: i64) -> StockRow {
        StockRow {
            s_quantity: q,
            s_ytd: 0,
            s_order_cnt: 0,
            s_remote_cnt: 0,
        }
    }

    #[test]
    fn s_quantity_drops_while_ten_remain_else_gains_91_2_4_2_2() {
        assert_eq!(take_stock(stock(20), 10, false).s_quantity, 10);
        assert_eq!(take_stock(stock(19), 10, false).s_quantity, 19 - 10 + 91);
        let s = take_stock(stock(50), 3, true);
        assert_eq!((s.s_ytd, s.s_order_cnt, s.s_remote_cnt), (3, 1, 1));
        assert_eq!(take_stock(stock(50), 3, false).s_remote_cnt, 0);
    }

    #[test]
    fn total_amount_applies_discount_and_both_taxes_2_4_2_2() {
        let line = |amount| LineOutcome {
            i_price: amount,
            s_quantity: 0,
            ol_amount: amount,
        };
        let o = NewOrderOutcome {
            rolled_back: false,
            w_tax: 1000,
            d_tax: 500,
            o_id: 1,
            c_discount: 2000,
            c_last: 0,
            c_credit: Credit::Good,
            lines: vec![line(10_000), line(5_000)],
            total_amount: None,
        };
        // 150.00 × (1 − 0.20) × (1 + 0.10 + 0.05) = 138.00.
        assert_eq!(total_amount(&o), 13_800);
        // 0.01 × 0.5 × 1.0 = 0.005: rounded half up.
        let half = NewOrderOutcome {
            w_tax: 0,
            d_tax: 0,
            c_discount: 5000,
            lines: vec![line(1)],
            ..o
        };
        assert_eq!(total_amount(&half), 1);
    }

    #[test]
    fn the_middle_customer_is_at_n_over_2_rounded_up_2_5_2_2() {
        assert_eq!(middle(&[]), None);
        assert_eq!(middle(&[7]), Some(7));
        assert_eq!(middle(&[7, 8]), Some(7));
        assert_eq!(middle(&[7, 8, 9]), Some(8));
        assert_eq!(middle(&[7, 8, 9, 10]), Some(8));
    }

    #[test]
    fn c_data_grows_by_the_six_numbers_and_stops_at_500_2_5_2_2() {
        let mut c = CData { hash: 1, len: 300 };
        c.prefix([12, 3, 4, 3, 4, 500_000]);
        // "12 3 4 3 4 500000 ": 3 + 2 + 2 + 2 + 2 + 7 characters.
        assert_eq!(c.len, 318);
        assert_ne!(c.hash, 1);
        let mut full = CData { hash: 1, len: 495 };
        full.prefix([1, 1, 1, 1, 1, 100]);
        assert_eq!(full.len, 500);
    }
}
