//! TPC-C's inputs and initial population, drawn as the specification (v5.11) says, from seeds
//! only (`onepipe_proto::rng::Rng`; no ambient randomness).
//!
//! * NURand (clause 2.1.6) with its per-run constants ([`NuRandC`]), the load constant of
//!   `C_LAST` apart from the run's as clause 2.1.6.1 asks.
//! * New-Order inputs (clause 2.4.1) and Payment inputs (clause 2.5.1), mixed 45:43 by default
//!   (the ratio of the specification's minimum mix, clause 5.2.3, between these two).
//! * The population (clause 4.3.3.1): each row drawn from its own generator, seeded by the
//!   population seed and the row's key, so a shard builds its rows without drawing anyone
//!   else's, and every process draws the same rows.
//!
//! What it is not: the other three transactions, terminals, keying and think times.

use super::db::{Customer, District, Stock, Warehouse};
use super::{
    Cents, Credit, CustomerSelector, NewOrderInput, OrderLineInput, PaymentInput, Rate, TxnInput,
    LAST_NAMES, LINES_MAX, LINES_MIN,
};
use onepipe_proto::rng::Rng;
use serde::Serialize;

/// The syllables of `C_LAST` (clause 4.3.2.3).
pub const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// The last name of code `code` (`0..1000`): its three digits' syllables (clause 4.3.2.3: 371
/// is `PRICALLYOUGHT`). Codes above 999 take their last three digits.
pub fn last_name(code: u16) -> String {
    let c = usize::from(code % LAST_NAMES);
    [c / 100, c / 10 % 10, c % 10]
        .iter()
        .map(|&d| SYLLABLES[d])
        .collect()
}

/// `D_YTD` as loaded: 30,000.00 (clause 4.3.3.1).
pub const D_YTD_INITIAL: Cents = 3_000_000;
/// `C_BALANCE` as loaded: −10.00.
pub const C_BALANCE_INITIAL: Cents = -1_000;
/// `C_YTD_PAYMENT` as loaded: 10.00.
pub const C_YTD_PAYMENT_INITIAL: Cents = 1_000;
/// `C_DATA`'s longest (clause 2.5.2.2: truncated to 500 characters).
pub const C_DATA_LEN_MAX: u16 = 500;

/// The database's size. The specification's scale is the number of warehouses; the other three
/// are its constants (clause 1.2), changeable here to make small databases for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TpccScale {
    /// Warehouses (the paper: 4, §7.3.2).
    pub warehouses: u32,
    /// Districts per warehouse (10).
    pub districts_per_warehouse: u32,
    /// Customers per district (3000).
    pub customers_per_district: u32,
    /// Items (100 000).
    pub items: u32,
}

impl Default for TpccScale {
    /// The specification's constants and the paper's 4 warehouses.
    fn default() -> Self {
        TpccScale {
            warehouses: 4,
            districts_per_warehouse: 10,
            customers_per_district: 3000,
            items: 100_000,
        }
    }
}

impl TpccScale {
    /// A small database for tests: 4 warehouses of 10 districts of 1100 customers (more than
    /// 1000, so that some last names repeat and the by-name choice has a middle to take), 2000
    /// items.
    pub fn small() -> TpccScale {
        TpccScale {
            warehouses: 4,
            districts_per_warehouse: 10,
            customers_per_district: 1100,
            items: 2000,
        }
    }

    /// Whether the scale fits the rows' fields: at least one of each, at most 255 districts, at
    /// most 2^24 − 2 items (an unused item number must exist) and 2^31 customers.
    pub fn validate(&self) -> Result<(), String> {
        let ok = self.warehouses >= 1
            && (1..=255).contains(&self.districts_per_warehouse)
            && (1..=1 << 31).contains(&self.customers_per_district)
            && (1..(1 << 24) - 1).contains(&self.items);
        if ok {
            Ok(())
        } else {
            Err(format!("a TPC-C scale out of range: {self:?}"))
        }
    }

    /// `W_YTD` as loaded: 30,000.00 per district (the specification's 300,000.00 with 10), so
    /// that `W_YTD = sum(D_YTD)` holds from the start (clause 3.3.2.1).
    pub fn w_ytd_initial(&self) -> Cents {
        D_YTD_INITIAL * Cents::from(self.districts_per_warehouse)
    }

    /// An item number no item has: a New-Order with it rolls back (clause 2.4.1.5).
    pub fn unused_item(&self) -> u32 {
        self.items + 1
    }

    /// The highest last-name code the run draws: 999, or fewer when a district has fewer than
    /// 1000 customers (then only the first `customers_per_district` codes exist).
    fn last_name_max(&self) -> u32 {
        (u32::from(LAST_NAMES) - 1).min(self.customers_per_district - 1)
    }
}

/// `random(x, y)`: uniform in `x..=y` (clause 2.1.5).
pub fn uniform(rng: &mut Rng, x: u32, y: u32) -> u32 {
    debug_assert!(x <= y);
    x + rng.below(u64::from(y - x) + 1) as u32
}

/// `NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y − x + 1)) + x` (clause
/// 2.1.6), with the run's constant `c` for `A`.
pub fn nurand(rng: &mut Rng, a: u32, x: u32, y: u32, c: u32) -> u32 {
    debug_assert!(x <= y);
    let r = uniform(rng, 0, a) | uniform(rng, x, y);
    ((u64::from(r) + u64::from(c)) % (u64::from(y - x) + 1)) as u32 + x
}

/// NURand's constants `C`, one per `A` (clause 2.1.6): one set for the load, another for the
/// run, the same for every terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NuRandC {
    /// For `C_LAST` (`A = 255`).
    pub c_last: u32,
    /// For `C_ID` (`A = 1023`).
    pub c_id: u32,
    /// For `OL_I_ID` (`A = 8191`).
    pub ol_i_id: u32,
}

impl NuRandC {
    /// The load's constants, from the population seed.
    pub fn load(seed: u64) -> NuRandC {
        let mut rng = Rng::new(seed ^ 0x10AD_C0DE);
        NuRandC {
            c_last: uniform(&mut rng, 0, 255),
            c_id: uniform(&mut rng, 0, 1023),
            ol_i_id: uniform(&mut rng, 0, 8191),
        }
    }

    /// The run's constants, from the population seed: `C_LAST`'s differs from the load's by a
    /// value in 65..=119 other than 96 and 112 (clause 2.1.6.1); the others are drawn afresh.
    pub fn run(seed: u64) -> NuRandC {
        let load = NuRandC::load(seed);
        let mut rng = Rng::new(seed ^ 0x2B_C0DE);
        let c_last = loop {
            let c = uniform(&mut rng, 0, 255);
            let delta = c.abs_diff(load.c_last);
            if (65..=119).contains(&delta) && delta != 96 && delta != 112 {
                break c;
            }
        };
        NuRandC {
            c_last,
            c_id: uniform(&mut rng, 0, 1023),
            ol_i_id: uniform(&mut rng, 0, 8191),
        }
    }
}

/// A TPC-C workload: the database and the transaction mix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TpccWorkload {
    /// The database's size.
    pub scale: TpccScale,
    /// The population's seed (the checker builds its model from it), also the NURand constants'.
    pub seed: u64,
    /// New-Orders : Payments (the specification's 45 : 43).
    pub new_order_weight: u32,
    /// See `new_order_weight`.
    pub payment_weight: u32,
    /// Share of order lines supplied by a remote warehouse (0.01, clause 2.4.1.5).
    pub remote_line_share: f64,
    /// Share of New-Orders rolled back by an unused item on the last line (0.01).
    pub rollback_share: f64,
    /// Share of Payments by a customer of a remote warehouse (0.15, clause 2.5.1.2).
    pub remote_payment_share: f64,
    /// Share of Payments that name the customer by last name (0.60).
    pub by_last_name_share: f64,
}

impl Default for TpccWorkload {
    fn default() -> Self {
        TpccWorkload {
            scale: TpccScale::default(),
            seed: 1,
            new_order_weight: 45,
            payment_weight: 43,
            remote_line_share: 0.01,
            rollback_share: 0.01,
            remote_payment_share: 0.15,
            by_last_name_share: 0.60,
        }
    }
}

/// One terminal's transactions: its home warehouse is fixed (clause 2.4.1.1, 2.5.1.1), the rest
/// is drawn.
#[derive(Debug, Clone)]
pub struct TxnGen {
    w: TpccWorkload,
    c: NuRandC,
    home_w: u32,
    rng: Rng,
}

impl TxnGen {
    /// The transactions of a terminal at warehouse `home_w` (1-based), drawn from `seed`.
    pub fn new(w: TpccWorkload, home_w: u32, seed: u64) -> TxnGen {
        assert!(
            (1..=w.scale.warehouses).contains(&home_w),
            "home warehouse {home_w} of {}",
            w.scale.warehouses
        );
        assert!(
            w.new_order_weight + w.payment_weight > 0,
            "an empty transaction mix"
        );
        TxnGen {
            c: NuRandC::run(w.seed),
            w,
            home_w,
            rng: Rng::new(seed),
        }
    }

    /// Its home warehouse.
    pub fn home_warehouse(&self) -> u32 {
        self.home_w
    }

    /// The next transaction, by the mix.
    pub fn next_txn(&mut self) -> TxnInput {
        let total = u64::from(self.w.new_order_weight + self.w.payment_weight);
        if self.rng.below(total) < u64::from(self.w.new_order_weight) {
            TxnInput::NewOrder(self.new_order())
        } else {
            TxnInput::Payment(self.payment())
        }
    }

    /// A warehouse other than the home one, uniform (callers check there is one).
    fn remote_warehouse(&mut self) -> u32 {
        let n = self.w.scale.warehouses;
        debug_assert!(n > 1);
        let w = uniform(&mut self.rng, 1, n - 1);
        if w >= self.home_w {
            w + 1
        } else {
            w
        }
    }

    /// A New-Order's input (clause 2.4.1).
    pub fn new_order(&mut self) -> NewOrderInput {
        let s = self.w.scale;
        let d_id = uniform(&mut self.rng, 1, s.districts_per_warehouse);
        let c_id = nurand(
            &mut self.rng,
            1023,
            1,
            s.customers_per_district,
            self.c.c_id,
        );
        let ol_cnt = uniform(&mut self.rng, LINES_MIN as u32, LINES_MAX as u32) as usize;
        let rollback = self.rng.chance(self.w.rollback_share);
        let lines = (0..ol_cnt)
            .map(|n| {
                let i_id = if rollback && n == ol_cnt - 1 {
                    s.unused_item()
                } else {
                    nurand(&mut self.rng, 8191, 1, s.items, self.c.ol_i_id)
                };
                let remote = s.warehouses > 1 && self.rng.chance(self.w.remote_line_share);
                let supply_w_id = if remote {
                    self.remote_warehouse()
                } else {
                    self.home_w
                };
                OrderLineInput {
                    i_id,
                    supply_w_id,
                    quantity: uniform(&mut self.rng, 1, 10) as u8,
                }
            })
            .collect();
        NewOrderInput {
            w_id: self.home_w,
            d_id,
            c_id,
            lines,
        }
    }

    /// A Payment's input (clause 2.5.1). With one warehouse, a "remote" customer is of the home
    /// warehouse, in a uniform district.
    pub fn payment(&mut self) -> PaymentInput {
        let s = self.w.scale;
        let d_id = uniform(&mut self.rng, 1, s.districts_per_warehouse);
        let (c_w_id, c_d_id) = if self.rng.chance(self.w.remote_payment_share) {
            let w = if s.warehouses > 1 {
                self.remote_warehouse()
            } else {
                self.home_w
            };
            (w, uniform(&mut self.rng, 1, s.districts_per_warehouse))
        } else {
            (self.home_w, d_id)
        };
        let customer = if self.rng.chance(self.w.by_last_name_share) {
            let code = nurand(&mut self.rng, 255, 0, s.last_name_max(), self.c.c_last);
            CustomerSelector::LastName(code as u16)
        } else {
            let c_id = nurand(
                &mut self.rng,
                1023,
                1,
                s.customers_per_district,
                self.c.c_id,
            );
            CustomerSelector::Id(c_id)
        };
        PaymentInput {
            w_id: self.home_w,
            d_id,
            c_w_id,
            c_d_id,
            customer,
            amount: uniform(&mut self.rng, 100, 500_000),
        }
    }
}

// --- Population (clause 4.3.3.1) ------------------------------------------------------------

/// The generator of one row: the population seed, the table and the row's key.
fn row_rng(seed: u64, table: u64, a: u32, b: u32, c: u32) -> Rng {
    let mut h = super::db::mix64(seed ^ table.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for k in [a, b, c] {
        h = super::db::mix64(h ^ u64::from(k));
    }
    Rng::new(h)
}

/// A rate uniform in `0..=max` (in 1/10 000).
fn rate(rng: &mut Rng, max: u32) -> Rate {
    uniform(rng, 0, max) as Rate
}

/// Warehouse `w`: `W_TAX` in 0.0000..=0.2000, `W_YTD` 30,000.00 per district.
pub fn warehouse(seed: u64, scale: &TpccScale, w: u32) -> Warehouse {
    let mut rng = row_rng(seed, 1, w, 0, 0);
    Warehouse {
        w_tax: rate(&mut rng, 2000),
        w_ytd: scale.w_ytd_initial(),
    }
}

/// Customer `c` of district (`w`, `d`): `C_LAST` by `c − 1` for the first 1000, else
/// NURand(255, 0, 999) with the load's constant; 10% `BC`; `C_DISCOUNT` in 0.0000..=0.5000;
/// `C_DATA` 300..=500 characters.
pub fn customer(seed: u64, load: &NuRandC, w: u32, d: u32, c: u32) -> Customer {
    let mut rng = row_rng(seed, 3, w, d, c);
    let c_last = if c <= u32::from(LAST_NAMES) {
        (c - 1) as u16
    } else {
        nurand(&mut rng, 255, 0, 999, load.c_last) as u16
    };
    Customer {
        c_first: rng.next_u64(),
        c_last,
        c_credit: if rng.below(10) == 0 {
            Credit::Bad
        } else {
            Credit::Good
        },
        c_discount: rate(&mut rng, 5000),
        c_balance: C_BALANCE_INITIAL,
        c_ytd_payment: C_YTD_PAYMENT_INITIAL,
        c_payment_cnt: 1,
        c_data: rng.next_u64(),
        c_data_len: uniform(&mut rng, 300, u32::from(C_DATA_LEN_MAX)) as u16,
    }
}

/// District (`w`, `d`) with its customers: `D_TAX` in 0.0000..=0.2000, `D_YTD` 30,000.00,
/// no orders yet (`D_NEXT_O_ID` = 1: see the module docs of [`super`]).
pub fn district(seed: u64, scale: &TpccScale, w: u32, d: u32) -> District {
    let mut rng = row_rng(seed, 2, w, d, 0);
    let load = NuRandC::load(seed);
    let customers = (1..=scale.customers_per_district)
        .map(|c| customer(seed, &load, w, d, c))
        .collect();
    District::new(rate(&mut rng, 2000), D_YTD_INITIAL, customers)
}

/// Stock row (`w`, `i`): `S_QUANTITY` in 10..=100, counters 0.
pub fn stock(seed: u64, w: u32, i: u32) -> Stock {
    let mut rng = row_rng(seed, 4, w, i, 0);
    Stock {
        s_quantity: uniform(&mut rng, 10, 100) as u16,
        s_ytd: 0,
        s_order_cnt: 0,
        s_remote_cnt: 0,
    }
}

/// `I_PRICE` of item `i` (1-based, of `items`) in 1.00..=100.00, or `None` for an unused item
/// number. The item table is read-only and every shard has it: computed, not stored.
pub fn item_price(seed: u64, items: u32, i: u32) -> Option<Cents> {
    if i == 0 || i > items {
        return None;
    }
    let mut rng = row_rng(seed, 5, i, 0, 0);
    Some(Cents::from(uniform(&mut rng, 100, 10_000)))
}
