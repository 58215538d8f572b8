//! TPC-C's tests: the generator's distributions (clauses 2.1.6, 2.4.1, 2.5.1, 4.3.3), the
//! database's execution (sharded as unsharded), the checker against corrupted histories and
//! states (each mutation must be caught), and [`TpccProcess`] against a small model of 1Pipe's
//! services — in `tests/generator.rs`, `tests/database.rs`, `tests/checker.rs` and
//! `tests/model.rs`. The helpers they share are here.

use super::check::{condition, consistency, left_out, TpccChecker, TpccChecks, TpccViolation};
use super::db::{placement, Customer, District, Placement, Shard, Stock, TpccLayout};
use super::gen::{self, last_name, nurand, NuRandC, TpccScale, TpccWorkload, TxnGen};
use super::reference::{Population, Rows};
use super::*;
use crate::AppInput;
use bytes::Bytes;
use onepipe_proto::rng::Rng;
use onepipe_proto::{Instant, ProcId, Timestamp};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

mod checker;
mod database;
mod generator;
mod model;

fn workload(scale: TpccScale, seed: u64) -> TpccWorkload {
    TpccWorkload {
        scale,
        seed,
        ..TpccWorkload::default()
    }
}

/// Every consistency condition was evaluated on every row it concerns, nothing left out: per
/// district, per warehouse, per customer, per stock row, and on some orders and lines.
pub(super) fn assert_conditions_cover(c: &TpccChecks, scale: &TpccScale) {
    let districts = u64::from(scale.warehouses * scale.districts_per_warehouse);
    let customers = districts * u64::from(scale.customers_per_district);
    let stock = u64::from(scale.warehouses * scale.items);
    let per = [
        (condition::W_YTD_SUM_D_YTD, u64::from(scale.warehouses)),
        (condition::W_YTD_HISTORY, u64::from(scale.warehouses)),
        (condition::NEXT_O_ID_MAX_O_ID, districts),
        (condition::NEXT_O_ID_MAX_NO_O_ID, districts),
        (condition::NEW_ORDER_CONTIGUOUS, districts),
        (condition::OL_CNT_SUM, districts),
        (condition::CARRIER_NULL_IFF_NEW_ORDER, districts),
        (condition::ORDERS_MINUS_NEW_ORDERS, districts),
        (condition::D_YTD_HISTORY, districts),
        (condition::C_BALANCE_HISTORY, customers),
        (condition::C_BALANCE_PLUS_YTD, customers),
        (condition::C_PAYMENT_CNT_HISTORY, customers),
        (condition::S_YTD, stock),
        (condition::S_ORDER_CNT, stock),
        (condition::S_REMOTE_CNT, stock),
    ];
    for (name, n) in per {
        assert_eq!(c.conditions.get(name), Some(&n), "{name}: {c:?}");
    }
    for name in [condition::OL_CNT_PER_ORDER, condition::OL_AMOUNT] {
        assert!(
            c.conditions.get(name).is_some_and(|&n| n > 0),
            "{name}: {c:?}"
        );
    }
    assert_eq!(
        c.conditions.len(),
        per.len() + 2,
        "{:?}",
        c.conditions.keys()
    );
    for why in [
        left_out::WAREHOUSE_PARTIAL,
        left_out::CUSTOMER_PARTIAL,
        left_out::STOCK_PARTIAL,
        left_out::SHARD_WITHOUT_REPLICA,
        left_out::NO_STATE,
    ] {
        assert!(!c.left_out.contains_key(why), "{why}: {c:?}");
    }
}

/// `n` transactions of terminals at every warehouse.
fn txns(w: &TpccWorkload, n: usize, seed: u64) -> Vec<TxnInput> {
    let mut gens: Vec<TxnGen> = (1..=w.scale.warehouses)
        .map(|h| TxnGen::new(w.clone(), h, seed ^ u64::from(h) << 20))
        .collect();
    let k = gens.len();
    (0..n).map(|i| gens[i % k].next_txn()).collect()
}

/// The kinds of violation `v` found.
fn kinds(v: &check::TpccVerdict) -> BTreeSet<&'static str> {
    v.by_kind.keys().copied().collect()
}
