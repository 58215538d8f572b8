//! TPC-C's tests: the generator's distributions (clauses 2.1.6, 2.4.1, 2.5.1, 4.3.3), the
//! database's execution (sharded as unsharded), the checker against corrupted histories and
//! states (each mutation must be caught), and [`TpccProcess`] against a small model of 1Pipe's
//! services:
//!
//! one global clock stamps every send (all a process sends in one turn alike, as a host does);
//! reliable scatterings are delivered to every destination `rel_lag` after their timestamp, in
//! (timestamp, sender, send order) order; the released commit barrier (`now − rel_lag`) is
//! reported as it moves; best-effort replies arrive `be_lag` after their timestamp and may be
//! lost, the loss reported to the sender; the host may refuse a send. A crashed process gets
//! nothing more and sends nothing more; every live process hears `ProcFailed` `detect_ns` later,
//! and from then on a send to it is refused. Restricted atomicity, two ways: messages to a
//! crashed process are dropped and the rest of their scattering is delivered, or (`recall`) a
//! live sender's scattering with a crashed destination is recalled — delivered nowhere — as
//! 1Pipe's §5.2 Recall does for one the failed receiver never acknowledged.

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

fn workload(scale: TpccScale, seed: u64) -> TpccWorkload {
    TpccWorkload {
        scale,
        seed,
        ..TpccWorkload::default()
    }
}

/// `n` draws of `f`, the share that satisfy `p`.
fn share<T>(n: usize, mut f: impl FnMut() -> T, p: impl Fn(&T) -> bool) -> f64 {
    (0..n).filter(|_| p(&f())).count() as f64 / n as f64
}

// --- Generator ------------------------------------------------------------------------------

#[test]
fn nurand_stays_in_range_and_is_skewed_2_1_6() {
    let mut rng = Rng::new(1);
    let mut counts = vec![0u32; 3001];
    for _ in 0..300_000 {
        let c = nurand(&mut rng, 1023, 1, 3000, 259);
        assert!((1..=3000).contains(&c), "{c}");
        counts[c as usize] += 1;
    }
    // Uniform would give 100 each; NURand's OR makes some ids several times as frequent.
    let max = *counts.iter().max().unwrap();
    assert!(
        max > 300,
        "the most frequent id drawn {max} times of 300 000"
    );
    for _ in 0..10_000 {
        let i = nurand(&mut rng, 8191, 1, 2000, 7000);
        assert!((1..=2000).contains(&i));
        assert!(nurand(&mut rng, 255, 0, 999, 200) <= 999);
    }
}

#[test]
fn the_run_constant_of_c_last_is_apart_from_the_load_one_2_1_6_1() {
    for seed in 0..300 {
        let (load, run) = (NuRandC::load(seed), NuRandC::run(seed));
        let delta = load.c_last.abs_diff(run.c_last);
        assert!(
            (65..=119).contains(&delta) && delta != 96 && delta != 112,
            "seed {seed}: {load:?} {run:?}"
        );
        assert!(run.c_id <= 1023 && run.ol_i_id <= 8191);
    }
}

#[test]
fn last_names_are_three_syllables_4_3_2_3() {
    assert_eq!(last_name(371), "PRICALLYOUGHT");
    assert_eq!(last_name(0), "BARBARBAR");
    assert_eq!(last_name(999), "EINGEINGEING");
    assert_eq!(last_name(40), "BARPRESBAR");
}

#[test]
fn new_orders_follow_2_4_1() {
    let w = workload(TpccScale::small(), 3);
    let mut g = TxnGen::new(w.clone(), 2, 11);
    let orders: Vec<NewOrderInput> = (0..20_000).map(|_| g.new_order()).collect();
    let lines: Vec<&OrderLineInput> = orders.iter().flat_map(|o| &o.lines).collect();
    let remote = lines.iter().filter(|l| l.supply_w_id != 2).count() as f64 / lines.len() as f64;
    assert!((0.007..0.013).contains(&remote), "{remote} remote lines");
    let rolled = orders
        .iter()
        .filter(|o| o.lines.iter().any(|l| l.i_id > w.scale.items))
        .count() as f64
        / orders.len() as f64;
    assert!((0.006..0.014).contains(&rolled), "{rolled} rolled back");
    let mean = lines.len() as f64 / orders.len() as f64;
    assert!((9.8..10.2).contains(&mean), "{mean} lines per order");
    for o in &orders {
        assert!(TxnInput::NewOrder(o.clone()).is_valid(&w.scale), "{o:?}");
        assert_eq!(o.w_id, 2);
        // Only the last line carries the unused item.
        let n = o.lines.len();
        assert!(o.lines[..n - 1].iter().all(|l| l.i_id <= w.scale.items));
        assert!(o.lines.iter().all(|l| (1..=10).contains(&l.quantity)));
    }
    let districts: BTreeSet<u32> = orders.iter().map(|o| o.d_id).collect();
    assert_eq!(districts.len(), 10);
}

#[test]
fn payments_follow_2_5_1() {
    let w = workload(TpccScale::small(), 3);
    let mut g = TxnGen::new(w.clone(), 3, 12);
    let ps: Vec<PaymentInput> = (0..20_000).map(|_| g.payment()).collect();
    let n = ps.len() as f64;
    let remote = ps.iter().filter(|p| p.c_w_id != p.w_id).count() as f64 / n;
    assert!((0.135..0.165).contains(&remote), "{remote} remote payments");
    let by_name = ps
        .iter()
        .filter(|p| matches!(p.customer, CustomerSelector::LastName(_)))
        .count() as f64
        / n;
    assert!((0.58..0.62).contains(&by_name), "{by_name} by last name");
    for p in &ps {
        assert!(TxnInput::Payment(*p).is_valid(&w.scale), "{p:?}");
        if p.c_w_id == p.w_id {
            assert_eq!(
                p.c_d_id, p.d_id,
                "a local payment's customer is of its district"
            );
        }
    }
    let cents: Vec<u32> = ps.iter().map(|p| p.amount).collect();
    assert!(cents.iter().all(|c| (100..=500_000).contains(c)));
    let mean = cents.iter().map(|&c| f64::from(c)).sum::<f64>() / n;
    assert!((240_000.0..260_000.0).contains(&mean), "{mean}");
}

#[test]
fn one_warehouse_has_no_remote_lines_or_payments() {
    let scale = TpccScale {
        warehouses: 1,
        ..TpccScale::small()
    };
    let mut g = TxnGen::new(workload(scale, 1), 1, 5);
    for _ in 0..5_000 {
        match g.next_txn() {
            TxnInput::NewOrder(o) => assert!(o.lines.iter().all(|l| l.supply_w_id == 1)),
            TxnInput::Payment(p) => assert_eq!(p.c_w_id, 1),
        }
    }
}

#[test]
fn the_mix_is_45_to_43() {
    let mut g = TxnGen::new(workload(TpccScale::small(), 1), 1, 9);
    let no = share(
        50_000,
        || g.next_txn(),
        |t| t.kind() == TpccTxnKind::NewOrder,
    );
    assert!(
        (0.50..0.522).contains(&no),
        "{no} New-Orders (45/88 = 0.511)"
    );
    let mut only = TxnGen::new(
        TpccWorkload {
            payment_weight: 0,
            ..workload(TpccScale::small(), 1)
        },
        1,
        9,
    );
    assert!((0..100).all(|_| only.next_txn().kind() == TpccTxnKind::NewOrder));
}

#[test]
fn the_population_follows_4_3_3_1_and_is_deterministic() {
    let scale = TpccScale::small();
    let db = Shard::full(&scale, 7);
    assert_eq!(db.digest(), Shard::full(&scale, 7).digest());
    assert_ne!(db.digest(), Shard::full(&scale, 8).digest());
    for (_, w) in db.warehouses() {
        assert!(w.w_tax <= 2000);
        assert_eq!(w.w_ytd, 30_000_000, "300,000.00 for 10 districts");
    }
    let mut bad = 0;
    let mut customers = 0;
    for (_, d) in db.districts() {
        assert!(d.d_tax() <= 2000);
        assert_eq!((d.d_ytd(), d.d_next_o_id()), (3_000_000, 1));
        for (i, c) in d.customers().iter().enumerate() {
            if i < 1000 {
                assert_eq!(usize::from(c.c_last), i, "the first 1000 by their id − 1");
            }
            assert!(c.c_last < 1000 && c.c_discount <= 5000);
            assert_eq!(
                (c.c_balance, c.c_ytd_payment, c.c_payment_cnt),
                (-1000, 1000, 1)
            );
            assert!((300..=500).contains(&c.c_data_len));
            bad += usize::from(c.c_credit == Credit::Bad);
            customers += 1;
        }
    }
    let bad = bad as f64 / customers as f64;
    assert!((0.09..0.11).contains(&bad), "{bad} bad credit");
    assert_eq!(db.stock().count(), 4 * 2000);
    for (_, s) in db.stock() {
        assert!((10..=100).contains(&s.s_quantity));
        assert_eq!((s.s_ytd, s.s_order_cnt, s.s_remote_cnt), (0, 0, 0));
    }
    for i in 1..=scale.items {
        let p = db.item_price(i).unwrap();
        assert!((100..=10_000).contains(&p));
    }
    assert_eq!(db.item_price(0), None);
    assert_eq!(db.item_price(scale.unused_item()), None);
}

// --- Database -------------------------------------------------------------------------------

#[test]
fn process_p_is_replica_p_div_shards_of_shard_p_mod_shards() {
    assert_eq!(
        placement(ProcId(6), 4, 3),
        Placement::Replica {
            shard: 2,
            replica: 1
        }
    );
    assert_eq!(placement(ProcId(12), 4, 3), Placement::Initiator);
    let l = TpccLayout::for_procs(512, 3);
    assert_eq!((l.shards, l.replicas), (170, 3));
    assert_eq!(l.placement(ProcId(510)), Placement::Initiator);
    for s in 0..l.shards {
        for p in l.replicas_of(s) {
            assert_eq!(l.shard_of_proc(p), Some(s));
        }
    }
    let tiny = TpccLayout::for_procs(2, 3);
    assert_eq!(
        (tiny.shards, tiny.replicas),
        (1, 2),
        "every replica is a process"
    );
}

#[test]
fn rows_spread_over_many_shards() {
    let scale = TpccScale::default();
    let layout = TpccLayout::new(170, 3);
    let mut stock = vec![0u32; 170];
    for w in 1..=scale.warehouses {
        for i in 1..=scale.items {
            stock[layout.shard_of(db::RowKey::Stock(w, i)) as usize] += 1;
        }
    }
    let mean = 400_000 / 170;
    assert!(
        stock
            .iter()
            .all(|&n| n > mean * 9 / 10 && n < mean * 11 / 10),
        "{:?}",
        (stock.iter().min(), stock.iter().max())
    );
    let districts: BTreeSet<u32> = (1..=4)
        .flat_map(|w| (1..=10).map(move |d| (w, d)))
        .map(|(w, d)| layout.shard_of(db::RowKey::District(w, d)))
        .collect();
    assert!(
        districts.len() > 30,
        "40 districts on {} shards",
        districts.len()
    );
}

#[test]
fn stock_quantity_drops_or_is_refilled_by_91_2_4_2_2() {
    let mut s = Stock {
        s_quantity: 20,
        s_ytd: 0,
        s_order_cnt: 0,
        s_remote_cnt: 0,
    };
    s.take(10, false);
    assert_eq!(s.s_quantity, 10, "exactly 10 left: no refill");
    s.take(1, true);
    assert_eq!(s.s_quantity, 9 + 91);
    assert_eq!((s.s_ytd, s.s_order_cnt, s.s_remote_cnt), (11, 2, 1));
}

fn customer(c_last: u16, c_first: u64) -> Customer {
    let mut c = gen::customer(1, &NuRandC::load(1), 1, 1, 1);
    c.c_last = c_last;
    c.c_first = c_first;
    c
}

#[test]
fn by_last_name_takes_the_middle_by_first_name_2_5_2_2() {
    // Customers 1..=6: three named 7 with first names 30, 10, 20; two named 8; one named 9.
    let cs = vec![
        customer(7, 30),
        customer(7, 10),
        customer(8, 5),
        customer(7, 20),
        customer(8, 1),
        customer(9, 1),
    ];
    let d = District::new(0, 0, cs);
    // Sorted by first name: 2 (10), 4 (20), 1 (30); position ⌈3/2⌉ = 2.
    assert_eq!(d.by_last_name(7), Some(4));
    // 5 (1), 3 (5); position ⌈2/2⌉ = 1.
    assert_eq!(d.by_last_name(8), Some(5));
    assert_eq!(d.by_last_name(9), Some(6));
    assert_eq!(d.by_last_name(10), None);
}

#[test]
fn a_rolled_back_new_order_changes_nothing_2_4_2_3() {
    let scale = TpccScale::small();
    let mut db = Shard::full(&scale, 2);
    let before = db.digest();
    let mut lines = vec![
        OrderLineInput {
            i_id: 5,
            supply_w_id: 1,
            quantity: 3
        };
        5
    ];
    lines[4].i_id = scale.unused_item();
    let t = TxnInput::NewOrder(NewOrderInput {
        w_id: 1,
        d_id: 2,
        c_id: 3,
        lines,
    });
    let PartResult::NewOrder(p) = db.execute(&t) else {
        panic!("a New-Order's result");
    };
    assert!(p.rolled_back && p.stock.is_empty());
    assert_eq!(p.district.map(|d| d.o_id), Some(1));
    assert_eq!(db.digest(), before);
    let (_, found) = consistency(&Rows::from_shard(&db), &Population::load(&scale, 2));
    assert!(found.is_empty(), "{found:?}");
}

/// What shard `shard` of `layout` should answer for `input`, given the whole transaction's
/// result `full` on an unsharded database: the fields of the rows that shard holds. (The
/// implementation against itself, sharded and not; the checker has its own, from the reference.)
fn expected_part(
    full: &PartResult,
    input: &TxnInput,
    layout: &TpccLayout,
    shard: u32,
) -> PartResult {
    let here = |row: db::RowKey| layout.shard_of(row) == shard;
    match (full, input) {
        (PartResult::NewOrder(p), TxnInput::NewOrder(t)) => PartResult::NewOrder(NewOrderPart {
            rolled_back: p.rolled_back,
            w_tax: p.w_tax.filter(|_| here(db::RowKey::Warehouse(t.w_id))),
            district: p
                .district
                .filter(|_| here(db::RowKey::District(t.w_id, t.d_id))),
            stock: p
                .stock
                .iter()
                .filter(|(n, _)| {
                    t.lines
                        .get(usize::from(*n))
                        .is_some_and(|l| here(db::RowKey::Stock(l.supply_w_id, l.i_id)))
                })
                .copied()
                .collect(),
        }),
        (PartResult::Payment(p), TxnInput::Payment(t)) => PartResult::Payment(PaymentPart {
            w_ytd: p.w_ytd.filter(|_| here(db::RowKey::Warehouse(t.w_id))),
            d_ytd: p
                .d_ytd
                .filter(|_| here(db::RowKey::District(t.w_id, t.d_id))),
            customer: p
                .customer
                .filter(|_| here(db::RowKey::District(t.c_w_id, t.c_d_id))),
        }),
        _ => unreachable!("a {full:?} result for a {:?} input", input.kind()),
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

#[test]
fn sharded_execution_gives_the_unsharded_results_and_rows() {
    let w = workload(TpccScale::small(), 4);
    let layout = TpccLayout::new(5, 1);
    let mut model = Shard::full(&w.scale, w.seed);
    let mut shards: Vec<Shard> = (0..5)
        .map(|s| Shard::populate(&w.scale, w.seed, &layout, s))
        .collect();
    for (i, t) in txns(&w, 3000, 1).iter().enumerate() {
        let full = model.execute(t);
        let touched = layout.shards_of(t);
        for (s, shard) in shards.iter_mut().enumerate() {
            let s = s as u32;
            if touched.contains(&s) {
                let got = shard.execute(t);
                assert_eq!(
                    got,
                    expected_part(&full, t, &layout, s),
                    "txn {i} shard {s}"
                );
            } else if i % 50 == 0 {
                // `shards_of` misses no shard: one it leaves out has nothing to do.
                let mut copy = shard.clone();
                copy.execute(t);
                assert_eq!(copy.digest(), shard.digest(), "txn {i} shard {s}");
            }
        }
    }
    for (s, shard) in shards.iter().enumerate() {
        assert_eq!(
            shard.digest(),
            model.digest_of(&layout, s as u32),
            "shard {s}"
        );
    }
    let mut all = Rows::default();
    shards.iter().for_each(|s| all.extend(Rows::from_shard(s)));
    let (checks, found) = consistency(&all, &Population::load(&w.scale, w.seed));
    assert!(found.is_empty(), "{found:?}");
    assert_conditions_cover(&checks, &w.scale);
    let orders: usize = model.districts().map(|(_, d)| d.orders().len()).sum();
    assert!(orders > 1000, "{orders} orders");
}

// --- Checker --------------------------------------------------------------------------------

/// A history run without a network: `n` transactions in order, each executed on every replica
/// of every shard it touches (but `skip`: (transaction, replica process) is skipped there); the
/// results are replica 0's. Keys are 10 apart; each returns before the next is called.
struct Direct {
    checker: TpccChecker,
    replicas: Vec<(u32, Shard)>,
    history: Vec<TpccCommitted>,
    w: TpccWorkload,
}

fn direct(n: usize, skip: Option<(usize, u32)>) -> Direct {
    let w = workload(TpccScale::small(), 5);
    let layout = TpccLayout::new(3, 2);
    let mut replicas: Vec<(u32, Shard)> = (0..6)
        .map(|p| {
            let s = layout.shard_of_proc(ProcId(p)).unwrap();
            (s, Shard::populate(&w.scale, w.seed, &layout, s))
        })
        .collect();
    let mut history = Vec::new();
    for (i, t) in txns(&w, n, 2).into_iter().enumerate() {
        let mut results = Vec::new();
        for s in layout.shards_of(&t) {
            for p in layout.replicas_of(s) {
                if skip == Some((i, p.0)) {
                    continue;
                }
                let r = replicas[p.index()].1.execute(&t);
                if p.0 == s {
                    results.push((s, r));
                }
            }
        }
        let i = i as u64;
        history.push(TpccCommitted {
            txn: i,
            client: 0,
            key: i * 10,
            seq: 0,
            input: t,
            results,
            call_ns: i * 10,
            return_ns: i * 10 + 5,
            attempts: 1,
        });
    }
    let mut checker = TpccChecker::new(w.scale, w.seed, layout);
    for c in &history {
        checker.on_commit(c.clone());
    }
    Direct {
        checker,
        replicas,
        history,
        w,
    }
}

impl Direct {
    fn verdict(&self) -> check::TpccVerdict {
        let rs: Vec<(u32, &Shard)> = self.replicas.iter().map(|(s, r)| (*s, r)).collect();
        self.checker.verdict_with(&[], &rs, 0)
    }

    fn with_history(&self, history: Vec<TpccCommitted>) -> check::TpccVerdict {
        let mut c = TpccChecker::new(self.w.scale, self.w.seed, TpccLayout::new(3, 2));
        for h in history {
            c.on_commit(h);
        }
        let rs: Vec<(u32, &Shard)> = self.replicas.iter().map(|(s, r)| (*s, r)).collect();
        c.verdict_with(&[], &rs, 0)
    }
}

fn kinds(v: &check::TpccVerdict) -> BTreeSet<&'static str> {
    v.by_kind.keys().copied().collect()
}

#[test]
fn a_correct_history_passes_every_check() {
    let d = direct(800, None);
    let v = d.verdict();
    assert_eq!(v.violations, 0, "{:?}", v.samples);
    let c = &v.checks;
    assert_eq!(
        (c.transactions, c.shards_compared, c.replicas_compared),
        (800, 3, 6)
    );
    assert!(c.fields > 5000 && c.rows_compared > 2 * 50_000, "{c:?}");
    assert_conditions_cover(c, &d.w.scale);
    assert!(c.left_out.is_empty(), "{c:?}");
}

#[test]
fn a_replica_that_skipped_a_transaction_is_caught() {
    // Process 4 is replica 1 of shard 1; it skips one transaction that touches shard 1.
    let layout = TpccLayout::new(3, 2);
    let probe = direct(100, None);
    let i = probe
        .history
        .iter()
        .position(|c| {
            layout.shards_of(&c.input).contains(&1) && c.input.kind() == TpccTxnKind::Payment
        })
        .unwrap();
    let d = direct(100, Some((i, 4)));
    let v = d.verdict();
    let k = kinds(&v);
    assert!(
        k.contains("replicas-diverge") && k.contains("state-mismatch"),
        "{k:?}"
    );
    // The initiator heard replica 0: the replay itself is fine.
    assert!(!k.contains("result"), "{k:?}");
}

#[test]
fn a_history_missing_a_transaction_is_caught_by_the_replay() {
    let d = direct(300, None);
    let mut h = d.history.clone();
    // Drop a payment: the replicas applied it, the history does not say so.
    let i = h
        .iter()
        .position(|c| c.input.kind() == TpccTxnKind::Payment)
        .unwrap();
    h.remove(i);
    let k = kinds(&d.with_history(h));
    assert!(
        k.contains("result") && k.contains("state-mismatch"),
        "{k:?}"
    );
}

#[test]
fn a_wrong_by_last_name_choice_is_caught_by_the_replay() {
    let d = direct(600, None);
    let model = Shard::full(&d.w.scale, d.w.seed);
    let mut h = d.history.clone();
    // A by-name payment whose name several customers of the district share: answer with
    // another of them than the middle one.
    let (i, shard, other) = h
        .iter()
        .enumerate()
        .find_map(|(i, c)| {
            let TxnInput::Payment(p) = &c.input else {
                return None;
            };
            let CustomerSelector::LastName(code) = p.customer else {
                return None;
            };
            let dist = model.district(p.c_w_id, p.c_d_id)?;
            let middle = dist.by_last_name(code)?;
            let other = (1u32..)
                .zip(dist.customers())
                .find(|(id, cu)| cu.c_last == code && *id != middle)?
                .0;
            let (shard, _) = c
                .results
                .iter()
                .find(|(_, r)| matches!(r, PartResult::Payment(p) if p.customer.is_some()))?;
            Some((i, *shard, other))
        })
        .expect("a by-name payment of a shared last name");
    for (s, r) in &mut h[i].results {
        if let (true, PartResult::Payment(p)) = (*s == shard, r) {
            p.customer.as_mut().unwrap().c_id = other;
        }
    }
    let v = d.with_history(h);
    assert!(
        v.samples.iter().any(|s| matches!(
            s,
            TpccViolation::Result { field, got: Some(g), .. } if field == "c_id" && *g == i64::from(other)
        )),
        "{:?}",
        v.samples
    );
}

#[test]
fn w_ytd_off_by_one_is_caught_by_the_consistency_check_3_3_2_1() {
    let mut d = direct(300, None);
    let layout = TpccLayout::new(3, 2);
    let s = layout.shard_of(db::RowKey::Warehouse(2));
    for (shard, r) in &mut d.replicas {
        if *shard == s {
            r.corrupt_w_ytd(2, 1);
        }
    }
    let v = d.verdict();
    let conditions: BTreeSet<&str> = v
        .samples
        .iter()
        .filter_map(|x| match x {
            TpccViolation::Consistency {
                condition, w_id: 2, ..
            } => Some(&condition[..7]),
            _ => None,
        })
        .collect();
    assert_eq!(
        conditions,
        BTreeSet::from(["3.3.2.1", "3.3.2.8"]),
        "{:?}",
        v.samples
    );
}

#[test]
fn an_order_that_disagrees_with_the_results_is_caught() {
    let d = direct(300, None);
    let mut h = d.history.clone();
    // Two payments at one warehouse, their places swapped: each W_YTD read is then wrong.
    let pays: Vec<usize> = h
        .iter()
        .enumerate()
        .filter(|(_, c)| matches!(&c.input, TxnInput::Payment(p) if p.w_id == 1))
        .map(|(i, _)| i)
        .collect();
    let (a, b) = (pays[0], pays[1]);
    let (ka, kb) = (h[a].key, h[b].key);
    h[a].key = kb;
    h[b].key = ka;
    let v = d.with_history(h);
    assert!(
        v.samples
            .iter()
            .any(|s| matches!(s, TpccViolation::Result { field, .. } if field == "w_ytd")),
        "{:?}",
        v.samples
    );
    assert!(kinds(&v).contains("real-time"), "{:?}", v.samples);
}

#[test]
fn duplicates_and_missing_or_unexpected_shards_are_caught() {
    let d = direct(50, None);
    let mut h = d.history.clone();
    h.push(h[3].clone());
    let cut = h[5].results.pop().unwrap();
    let stray = (0..3u32)
        .find(|s| !h[6].results.iter().any(|r| r.0 == *s))
        .map(|s| (s, cut.1.clone()));
    if let Some(r) = stray {
        h[6].results.push(r);
    }
    let k = kinds(&d.with_history(h));
    assert!(
        k.contains("duplicate") && k.contains("missing-shard"),
        "{k:?}"
    );
}

#[test]
fn an_unfinished_transaction_takes_effect_in_its_place() {
    let d = direct(200, None);
    let mut h = d.history.clone();
    let u = h.remove(50);
    let mut u = u.clone();
    u.results.clear();
    u.return_ns = u64::MAX;
    let mut c = TpccChecker::new(d.w.scale, d.w.seed, TpccLayout::new(3, 2));
    for x in h {
        c.on_commit(x);
    }
    let rs: Vec<(u32, &Shard)> = d.replicas.iter().map(|(s, r)| (*s, r)).collect();
    let v = c.verdict_with(&[u], &rs, 0);
    assert_eq!(
        (v.violations, v.checks.unfinished),
        (0, 1),
        "{:?}",
        v.samples
    );
}

// --- The checker's own checks: each must catch its corruption -------------------------------

/// The final rows of one replica of every shard of `d` (processes 0..3 are replica 0 of shards
/// 0..3), read as data.
fn direct_state(d: &Direct) -> Rows {
    let mut state = Rows::default();
    for (_, r) in &d.replicas[..3] {
        state.extend(Rows::from_shard(r));
    }
    state
}

fn violated(found: &[TpccViolation]) -> BTreeSet<&'static str> {
    found
        .iter()
        .filter_map(|x| match x {
            TpccViolation::Consistency { condition, .. } => Some(*condition),
            _ => None,
        })
        .collect()
}

type Corruption = Box<dyn Fn(&mut Rows)>;

/// Each condition, fed a final state corrupted the way it guards against (in either direction),
/// reports exactly the conditions that corruption breaks.
#[test]
fn each_consistency_condition_catches_its_corruption_3_3_2() {
    use condition::*;
    let d = direct(400, None);
    let initial = Population::load(&d.w.scale, d.w.seed);
    let state = direct_state(&d);
    let (checks, found) = consistency(&state, &initial);
    assert!(found.is_empty(), "{found:?}");
    assert_conditions_cover(&checks, &d.w.scale);
    // Targets: a district with payments, an order between two others, a customer paid by id,
    // an order line and the stock row that supplied it.
    let (w, dd) = *state.history.keys().next().unwrap();
    let o = *state
        .orders
        .keys()
        .find(|&&(w, d, o)| o > 1 && state.orders.contains_key(&(w, d, o + 1)))
        .unwrap();
    let (c, h) = state
        .history
        .iter()
        .flat_map(|(k, hs)| hs.iter().enumerate().map(move |(i, h)| (k, i, h)))
        .find_map(|(k, i, h)| match h.customer {
            CustomerSelector::Id(c) => Some(((h.c_w_id, h.c_d_id, c), (*k, i))),
            CustomerSelector::LastName(_) => None,
        })
        .unwrap();
    let next = state.districts[&(o.0, o.1)].d_next_o_id;
    let (&line, l) = state.order_lines.iter().next().unwrap();
    let st = (l.supply_w_id, l.i_id);
    let cases: Vec<(&str, Corruption, Vec<&str>)> = vec![
        (
            "W_YTD + 1",
            Box::new(move |r| r.warehouses.get_mut(&w).unwrap().w_ytd += 1),
            vec![W_YTD_SUM_D_YTD, W_YTD_HISTORY],
        ),
        (
            "W_YTD - 1",
            Box::new(move |r| r.warehouses.get_mut(&w).unwrap().w_ytd -= 1),
            vec![W_YTD_SUM_D_YTD, W_YTD_HISTORY],
        ),
        (
            "D_YTD + 1",
            Box::new(move |r| r.districts.get_mut(&(w, dd)).unwrap().d_ytd += 1),
            vec![W_YTD_SUM_D_YTD, D_YTD_HISTORY],
        ),
        (
            "D_YTD - 1",
            Box::new(move |r| r.districts.get_mut(&(w, dd)).unwrap().d_ytd -= 1),
            vec![W_YTD_SUM_D_YTD, D_YTD_HISTORY],
        ),
        (
            "D_NEXT_O_ID + 1",
            Box::new(move |r| r.districts.get_mut(&(w, dd)).unwrap().d_next_o_id += 1),
            vec![NEXT_O_ID_MAX_O_ID, NEXT_O_ID_MAX_NO_O_ID],
        ),
        (
            "a NEW-ORDER row between two removed",
            Box::new(move |r| assert!(r.new_orders.remove(&o))),
            vec![
                NEW_ORDER_CONTIGUOUS,
                CARRIER_NULL_IFF_NEW_ORDER,
                ORDERS_MINUS_NEW_ORDERS,
            ],
        ),
        (
            "a NEW-ORDER row added above",
            Box::new(move |r| assert!(r.new_orders.insert((o.0, o.1, next)))),
            vec![
                NEXT_O_ID_MAX_NO_O_ID,
                CARRIER_NULL_IFF_NEW_ORDER,
                ORDERS_MINUS_NEW_ORDERS,
            ],
        ),
        (
            "O_OL_CNT + 1",
            Box::new(move |r| r.orders.get_mut(&o).unwrap().ol_cnt += 1),
            vec![OL_CNT_SUM, OL_CNT_PER_ORDER],
        ),
        (
            "O_OL_CNT - 1",
            Box::new(move |r| r.orders.get_mut(&o).unwrap().ol_cnt -= 1),
            vec![OL_CNT_SUM, OL_CNT_PER_ORDER],
        ),
        (
            "C_BALANCE + 1",
            Box::new(move |r| r.customers.get_mut(&c).unwrap().c_balance += 1),
            vec![C_BALANCE_HISTORY, C_BALANCE_PLUS_YTD],
        ),
        (
            "C_BALANCE - 1",
            Box::new(move |r| r.customers.get_mut(&c).unwrap().c_balance -= 1),
            vec![C_BALANCE_HISTORY, C_BALANCE_PLUS_YTD],
        ),
        (
            "C_YTD_PAYMENT + 1",
            Box::new(move |r| r.customers.get_mut(&c).unwrap().c_ytd_payment += 1),
            vec![C_BALANCE_PLUS_YTD],
        ),
        (
            "C_YTD_PAYMENT - 1",
            Box::new(move |r| r.customers.get_mut(&c).unwrap().c_ytd_payment -= 1),
            vec![C_BALANCE_PLUS_YTD],
        ),
        (
            "C_PAYMENT_CNT + 1",
            Box::new(move |r| r.customers.get_mut(&c).unwrap().c_payment_cnt += 1),
            vec![C_PAYMENT_CNT_HISTORY],
        ),
        (
            "C_PAYMENT_CNT - 1",
            Box::new(move |r| r.customers.get_mut(&c).unwrap().c_payment_cnt -= 1),
            vec![C_PAYMENT_CNT_HISTORY],
        ),
        (
            "H_AMOUNT + 1",
            Box::new(move |r| r.history.get_mut(&h.0).unwrap()[h.1].amount += 1),
            vec![W_YTD_HISTORY, D_YTD_HISTORY, C_BALANCE_HISTORY],
        ),
        (
            "OL_AMOUNT + 1",
            Box::new(move |r| r.order_lines.get_mut(&line).unwrap().amount += 1),
            vec![OL_AMOUNT],
        ),
        (
            "OL_AMOUNT - 1",
            Box::new(move |r| r.order_lines.get_mut(&line).unwrap().amount -= 1),
            vec![OL_AMOUNT],
        ),
        (
            "S_YTD + 1",
            Box::new(move |r| r.stock.get_mut(&st).unwrap().s_ytd += 1),
            vec![S_YTD],
        ),
        (
            "S_ORDER_CNT - 1",
            Box::new(move |r| r.stock.get_mut(&st).unwrap().s_order_cnt -= 1),
            vec![S_ORDER_CNT],
        ),
        (
            "S_REMOTE_CNT + 1",
            Box::new(move |r| r.stock.get_mut(&st).unwrap().s_remote_cnt += 1),
            vec![S_REMOTE_CNT],
        ),
    ];
    for (what, corrupt, want) in cases {
        let mut s = state.clone();
        corrupt(&mut s);
        let (_, found) = consistency(&s, &initial);
        let want: BTreeSet<&str> = want.into_iter().collect();
        assert_eq!(violated(&found), want, "{what}: {found:?}");
    }
}

/// The corruption of one field of a shard's answer: `true` if `part` has `field`.
fn corrupt_field(part: &mut PartResult, field: &str) -> bool {
    match (part, field) {
        (PartResult::NewOrder(p), "rolled_back") => p.rolled_back = !p.rolled_back,
        (PartResult::NewOrder(p), "w_tax") if p.w_tax.is_some() => *p.w_tax.as_mut().unwrap() += 1,
        (PartResult::NewOrder(p), "s_quantity") if !p.stock.is_empty() => p.stock[0].1 += 1,
        (PartResult::NewOrder(p), f) if p.district.is_some() => {
            let d = p.district.as_mut().unwrap();
            match f {
                "d_tax" => d.d_tax += 1,
                "o_id" => d.o_id += 1,
                "c_discount" => d.c_discount += 1,
                "c_last" => d.c_last += 1,
                "c_credit" if d.c_credit == Credit::Good => d.c_credit = Credit::Bad,
                _ => return false,
            }
        }
        (PartResult::Payment(p), "w_ytd") if p.w_ytd.is_some() => *p.w_ytd.as_mut().unwrap() -= 1,
        (PartResult::Payment(p), "d_ytd") if p.d_ytd.is_some() => *p.d_ytd.as_mut().unwrap() += 1,
        (PartResult::Payment(p), f) if p.customer.is_some() => {
            let c = p.customer.as_mut().unwrap();
            match f {
                "c_id" => c.c_id += 1,
                "c_balance" => c.c_balance += 1,
                "c_credit" if c.c_credit == Credit::Good => c.c_credit = Credit::Bad,
                _ => return false,
            }
        }
        _ => return false,
    }
    true
}

/// Every field of every kind of answer is compared with the reference's: one corrupted field
/// is one `result` violation naming it, and the rest of the run stays clean — but for the
/// dependency-graph checker, which sees a corrupted value of a row the history shows.
#[test]
fn every_result_field_is_compared_with_the_reference() {
    let d = direct(200, None);
    let fields = [
        "rolled_back",
        "w_tax",
        "s_quantity",
        "d_tax",
        "o_id",
        "c_discount",
        "c_last",
        "c_credit",
        "w_ytd",
        "d_ytd",
        "c_id",
        "c_balance",
    ];
    for field in fields {
        let mut h = d.history.clone();
        let hit = h
            .iter_mut()
            .find_map(|c| {
                let txn = c.txn;
                c.results
                    .iter_mut()
                    .find_map(|(_, r)| corrupt_field(r, field).then_some(txn))
            })
            .unwrap_or_else(|| panic!("no answer has {field}"));
        let v = d.with_history(h);
        // The fields the history of key accesses shows are seen by the dependency-graph
        // checker too (a value read or written that breaks the row's chain of versions).
        let in_history = ["o_id", "w_ytd", "d_ytd", "c_balance"].contains(&field);
        assert_eq!(
            v.graph.anomalies > 0,
            in_history,
            "{field}: {:?}",
            v.samples
        );
        assert_eq!(
            v.violations - v.graph.anomalies,
            1,
            "{field}: {:?}",
            v.samples
        );
        assert!(
            matches!(&v.samples[0], TpccViolation::Result { txn, field: f, .. } if *txn == hit && f.starts_with(field)),
            "{field}: {:?}",
            v.samples
        );
    }
}

/// A replica's row that no condition reads (`S_QUANTITY`, `C_DATA`) corrupted alike in every
/// replica of its shard: only the row-by-row comparison with the reference sees it.
#[test]
fn a_corrupted_row_no_condition_reads_is_caught_by_the_row_comparison() {
    let layout = TpccLayout::new(3, 2);
    let d0 = direct(200, None);
    type Hit = Box<dyn Fn(&mut Shard) -> bool>;
    let cases: Vec<(&str, db::RowKey, Hit)> = vec![
        (
            "STOCK",
            db::RowKey::Stock(1, 7),
            Box::new(|r| r.corrupt_stock(1, 7).map(|s| s.s_quantity += 1).is_some()),
        ),
        (
            "CUSTOMER",
            db::RowKey::District(2, 3),
            Box::new(|r| r.corrupt_customer(2, 3, 9).map(|c| c.c_data ^= 1).is_some()),
        ),
        (
            "CUSTOMER",
            db::RowKey::District(2, 3),
            Box::new(|r| {
                r.corrupt_customer(2, 3, 9)
                    .map(|c| c.c_data_len -= 1)
                    .is_some()
            }),
        ),
    ];
    for (table, row, corrupt) in cases {
        let mut d = direct(200, None);
        let shard = layout.shard_of(row);
        let mut hits = 0;
        for (s, r) in &mut d.replicas {
            if *s == shard {
                assert!(corrupt(r));
                hits += 1;
            }
        }
        assert_eq!(hits, 2);
        let v = d.verdict();
        assert_eq!(
            kinds(&v),
            BTreeSet::from(["state-mismatch"]),
            "{table}: {:?}",
            v.samples
        );
        assert_eq!(v.violations, 2, "one per replica: {:?}", v.samples);
        for x in &v.samples {
            assert!(
                matches!(x, TpccViolation::StateMismatch { shard: s, detail } if *s == shard && detail.contains("1 row(s) differ") && detail.contains(table)),
                "{x}"
            );
        }
    }
    assert_eq!(d0.verdict().violations, 0);
}

/// The live runtime's replicas report digests only: a correct run's equal the reference's
/// digests of its own rows; one off is a mismatch, and replicas that disagree diverge.
#[test]
fn replica_digests_are_compared_with_the_reference_s_own() {
    let d = direct(300, None);
    let digests: Vec<(u32, u64)> = d.replicas.iter().map(|(s, r)| (*s, r.digest())).collect();
    let v = d.checker.verdict_with_digests(&[], &digests, 0);
    assert_eq!(v.violations, 0, "{:?}", v.samples);
    let c = &v.checks;
    assert_eq!(
        (c.shards_compared, c.digests_compared, c.replicas_compared),
        (3, 6, 0)
    );
    assert_eq!(c.left_out.get(left_out::DIGESTS_ONLY), Some(&6), "{c:?}");
    assert_conditions_cover(c, &d.w.scale);
    let mut off = digests.clone();
    off[4].1 ^= 1;
    let v = d.checker.verdict_with_digests(&[], &off, 0);
    assert_eq!(
        kinds(&v),
        BTreeSet::from(["state-mismatch", "replicas-diverge"]),
        "{:?}",
        v.samples
    );
}

/// What the checker leaves out, it says, with why.
#[test]
fn the_checker_counts_what_it_left_out() {
    let d = direct(50, None);
    let v = d.checker.verdict(0);
    assert_eq!(v.violations, 0, "{:?}", v.samples);
    assert_eq!(v.checks.transactions, 50);
    assert_eq!(v.checks.left_out.get(left_out::NO_STATE), Some(&1));
    assert_eq!(
        (v.checks.replicas_compared, v.checks.conditions_evaluated()),
        (0, 0)
    );
    let mut h = d.history.clone();
    h.push(h[3].clone());
    let i = h.iter().position(|c| c.results.len() < 3).unwrap();
    let stray = (0..3u32)
        .find(|s| !h[i].results.iter().any(|r| r.0 == *s))
        .unwrap();
    let answer = h[i].results[0].1.clone();
    h[i].results.push((stray, answer));
    let v = d.with_history(h);
    assert_eq!(v.checks.transactions, 50);
    assert_eq!(v.checks.left_out.get(left_out::DUPLICATE), Some(&1));
    assert_eq!(v.checks.left_out.get(left_out::UNTOUCHED_SHARD), Some(&1));
}

// --- TpccProcess on a model of 1Pipe --------------------------------------------------------

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Due {
    /// A part of scattering `scatter`.
    Deliver {
        reliable: bool,
        ts: u64,
        src: u32,
        dst: u32,
        scatter: u64,
        payload: Bytes,
    },
    Lost {
        src: u32,
        dst: u32,
        ts: u64,
    },
    Timer {
        p: u32,
    },
    /// Moves the clock (and so the commit barrier) past a recalled scattering.
    Tick,
    Crash {
        p: u32,
    },
    /// Every live process hears that `p` failed at `ts`.
    Failed {
        p: u32,
        ts: u64,
    },
}

struct Model {
    procs: Vec<TpccProcess>,
    /// Min-heap of (time, sender, seq, what): at one time, by sender, then in send order.
    due: BinaryHeap<Reverse<(u64, u32, u64, Due)>>,
    seq: u64,
    now: u64,
    clock: u64,
    be_lag: u64,
    rel_lag: u64,
    detect_ns: u64,
    loss: f64,
    refuse: f64,
    /// Recall a live sender's scattering with a crashed destination (else deliver the rest).
    recall: bool,
    /// Deliveries to this process come late by up to 20 µs: out of order (a broken 1Pipe).
    misorder: Option<u32>,
    rng: Rng,
    /// Crash time of each crashed process.
    crashed: BTreeMap<u32, u64>,
    /// Processes whose failure was reported: sends to them are refused.
    reported: BTreeSet<u32>,
    /// Reliable scatterings: destinations, and whether recalled once decided.
    scatters: BTreeMap<u64, (u32, Vec<u32>, Option<bool>)>,
    checker: TpccChecker,
    committed: Vec<TpccCommitted>,
}

impl Model {
    fn new(layout: TpccLayout, procs: u32, window: u32, stop: u64, seed: u64) -> Model {
        let w = workload(TpccScale::small(), seed);
        Model::build(layout, procs, window, stop, seed, w, |_| {})
    }

    /// Processes running `w`, their configuration tweaked by `tweak`.
    fn build(
        layout: TpccLayout,
        procs: u32,
        window: u32,
        stop: u64,
        seed: u64,
        w: TpccWorkload,
        tweak: impl Fn(&mut TpccConfig),
    ) -> Model {
        let procs = (0..procs)
            .map(|p| {
                let mut cfg = TpccConfig::new(ProcId(p), procs, w.clone(), window);
                cfg.layout = layout;
                cfg.stop = Instant(stop);
                tweak(&mut cfg);
                let gen = TxnGen::new(w.clone(), cfg.home_warehouse(), seed ^ u64::from(p) << 32);
                TpccProcess::new(cfg, gen)
            })
            .collect();
        Model {
            procs,
            due: BinaryHeap::new(),
            seq: 0,
            now: 0,
            clock: 0,
            be_lag: 3_000,
            rel_lag: 9_000,
            detect_ns: 20_000,
            loss: 0.0,
            refuse: 0.0,
            recall: false,
            misorder: None,
            rng: Rng::new(seed),
            crashed: BTreeMap::new(),
            reported: BTreeSet::new(),
            scatters: BTreeMap::new(),
            checker: TpccChecker::new(w.scale, w.seed, layout),
            committed: Vec::new(),
        }
    }

    fn push(&mut self, at: u64, src: u32, d: Due) {
        self.seq += 1;
        self.due.push(Reverse((at, src, self.seq, d)));
    }

    fn alive(&self, p: u32) -> bool {
        !self.crashed.contains_key(&p)
    }

    fn crash_at(&mut self, p: u32, at: u64) {
        self.push(at, p, Due::Crash { p });
    }

    fn handle(&mut self, p: u32, input: AppInput<'_>) {
        if self.alive(p) {
            self.procs[p as usize].handle(Instant(self.now), input);
            self.drain(p);
        }
    }

    /// Drains process `p`'s sends: stamps each, schedules its parts.
    fn drain(&mut self, p: u32) {
        while let Some(s) = self.procs[p as usize].poll_send() {
            self.clock = self.clock.max(self.now);
            let ts = self.clock;
            let now = Instant(self.now);
            let to_failed = s.parts.iter().any(|(d, _)| self.reported.contains(&d.0));
            if (s.reliable && to_failed) || self.rng.chance(self.refuse) {
                self.procs[p as usize].handle(now, AppInput::Refused { tag: s.tag });
                continue;
            }
            let sent = AppInput::Sent {
                tag: s.tag,
                ts: Timestamp::new(ts),
            };
            self.procs[p as usize].handle(now, sent);
            self.seq += 1;
            let scatter = self.seq;
            if s.reliable {
                let dsts = s.parts.iter().map(|(d, _)| d.0).collect();
                self.scatters.insert(scatter, (p, dsts, None));
            }
            for (dst, payload) in s.parts {
                if !s.reliable && self.rng.chance(self.loss) {
                    let lost = Due::Lost {
                        src: p,
                        dst: dst.0,
                        ts,
                    };
                    self.push(ts + 2 * self.be_lag, p, lost);
                    continue;
                }
                let mut at = ts
                    + if s.reliable {
                        self.rel_lag
                    } else {
                        self.be_lag
                    };
                if self.misorder == Some(dst.0) {
                    at += self.rng.below(20_000);
                }
                let d = Due::Deliver {
                    reliable: s.reliable,
                    ts,
                    src: p,
                    dst: dst.0,
                    scatter,
                    payload,
                };
                self.push(at, p, d);
            }
        }
        while let Some(c) = self.procs[p as usize].poll_committed() {
            self.committed.push(c.clone());
            self.checker.on_commit(c);
        }
        if let Some(t) = self.procs[p as usize].poll_timeout() {
            self.push(t.as_nanos().max(self.now), p, Due::Timer { p });
        }
    }

    /// Whether reliable scattering `scatter` is recalled: decided when its parts fall due.
    fn recalled(&mut self, scatter: u64, at: u64) -> bool {
        let crashed = &self.crashed;
        let recall = self.recall;
        let Some((src, dsts, decided)) = self.scatters.get_mut(&scatter) else {
            return false;
        };
        let is_dead = |p: &u32| crashed.get(p).is_some_and(|&t| t <= at);
        if let Some(r) = *decided {
            return r;
        }
        let r = recall && !is_dead(src) && dsts.iter().any(is_dead);
        *decided = Some(r);
        if r {
            // The barrier must move past it for its sender to notice.
            self.push(at + 1, 0, Due::Tick);
        }
        r
    }

    fn run(&mut self) {
        for p in 0..self.procs.len() as u32 {
            self.handle(p, AppInput::Timeout);
        }
        let mut released = 0;
        while let Some(Reverse((at, _, _, d))) = self.due.pop() {
            self.now = at;
            // The commit barrier: every reliable message stamped below now − rel_lag is in.
            let b = at.saturating_sub(self.rel_lag);
            if b > released && self.misorder.is_none() {
                released = b;
                for p in 0..self.procs.len() as u32 {
                    let ts = Timestamp::new(b);
                    self.handle(p, AppInput::CommitReleased { ts });
                }
            }
            self.step(at, d);
        }
    }

    fn step(&mut self, at: u64, d: Due) {
        match d {
            Due::Deliver {
                reliable,
                ts,
                src,
                dst,
                scatter,
                payload,
            } => {
                if reliable && self.recalled(scatter, at) {
                    return;
                }
                let input = AppInput::Deliver {
                    src: ProcId(src),
                    ts: Timestamp::new(ts),
                    reliable,
                    payload: &payload,
                };
                self.handle(dst, input);
            }
            Due::Timer { p } => self.handle(p, AppInput::Timeout),
            Due::Lost { src, dst, ts } => {
                let input = AppInput::SendFailed {
                    dst: ProcId(dst),
                    ts: Timestamp::new(ts),
                };
                self.handle(src, input);
            }
            Due::Tick => {}
            Due::Crash { p } => {
                self.crashed.insert(p, at);
                self.push(at + self.detect_ns, p, Due::Failed { p, ts: at });
            }
            Due::Failed { p, ts } => {
                self.reported.insert(p);
                for q in 0..self.procs.len() as u32 {
                    let input = AppInput::ProcFailed {
                        proc: ProcId(p),
                        ts: Timestamp::new(ts),
                    };
                    self.handle(q, input);
                }
            }
        }
    }

    /// The checker's verdict with the final state of every live replica and the unfinished
    /// transactions of every process (a crashed one's were stamped before its crash).
    fn verdict(&self) -> check::TpccVerdict {
        let unfinished: Vec<TpccCommitted> =
            self.procs.iter().flat_map(|p| p.unfinished()).collect();
        let live: Vec<(u32, &Shard)> = self
            .procs
            .iter()
            .enumerate()
            .filter(|(p, _)| self.alive(*p as u32))
            .filter_map(|(_, p)| p.shard())
            .collect();
        self.checker.verdict_with(&unfinished, &live, 0)
    }

    fn stats(&self) -> TpccStats {
        let mut s = TpccStats::default();
        for p in &self.procs {
            s += p.stats();
        }
        s
    }

    /// The counters that must stay 0 in a run of a correct 1Pipe.
    fn assert_clean(&self, seed: u64) {
        let s = self.stats();
        let bad = (
            s.result_mismatches,
            s.reordered,
            s.malformed,
            s.late_receipts,
        );
        assert_eq!(bad, (0, 0, 0, 0), "seed {seed}: {s:?}");
    }

    fn live_idle(&self) -> bool {
        self.procs
            .iter()
            .enumerate()
            .all(|(p, q)| !self.alive(p as u32) || q.idle())
    }
}

fn twelve(stop: u64, seed: u64) -> Model {
    Model::new(TpccLayout::new(4, 3), 12, 2, stop, seed)
}

#[test]
fn transactions_commit_and_replay_in_timestamp_order_7_3_2() {
    let mut m = twelve(1_500_000, 1);
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 1: {:?}", v.samples);
    assert!(v.checks.transactions > 2_000, "{v:?}");
    assert_eq!(v.checks.shards_compared, 4);
    assert_conditions_cover(&v.checks, &TpccScale::small());
    let s = m.stats();
    assert!(
        s.committed_new_order > 800 && s.committed_payment > 800,
        "{s:?}"
    );
    assert_eq!(s.committed(), v.checks.transactions);
    // The dependency-graph checker saw every transaction, and dependencies of every kind.
    let g = &v.graph;
    assert_eq!(
        (g.ok, g.info, g.anomalies),
        (v.checks.transactions, 0, 0),
        "{g:?}"
    );
    assert!(g.reads > 1_000 && g.edges.iter().all(|&e| e > 100), "{g:?}");
    m.assert_clean(1);
    assert!(m.live_idle());
    // Every replica of every shard applied the same parts.
    let digests: BTreeMap<u32, BTreeSet<u64>> =
        m.procs.iter().fold(BTreeMap::new(), |mut acc, p| {
            if let Some((s, shard)) = p.shard() {
                acc.entry(s).or_default().insert(shard.digest());
            }
            acc
        });
    assert!(digests.values().all(|d| d.len() == 1), "{digests:?}");
}

#[test]
fn rolled_back_new_orders_commit_with_no_effect_2_4_2_3() {
    let w = TpccWorkload {
        rollback_share: 0.3,
        payment_weight: 0,
        ..workload(TpccScale::small(), 2)
    };
    let mut m = Model::build(TpccLayout::new(4, 3), 12, 2, 600_000, 2, w, |_| {});
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 2: {:?}", v.samples);
    m.assert_clean(2);
    let s = m.stats();
    assert!(s.rolled_back > 100, "{s:?}");
    let rolled: Vec<&TpccCommitted> = m
        .committed
        .iter()
        .filter(|c| {
            c.results
                .iter()
                .all(|(_, r)| matches!(r, PartResult::NewOrder(p) if p.rolled_back))
        })
        .collect();
    assert_eq!(rolled.len() as u64, s.rolled_back);
}

#[test]
fn lost_replies_are_sent_again_2_1() {
    let mut m = twelve(800_000, 3);
    m.loss = 0.05;
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 3: {:?}", v.samples);
    m.assert_clean(3);
    let s = m.stats();
    assert!(s.replies_resent > 50, "{s:?}");
    assert!(m.live_idle(), "seed 3: every transaction finished");
}

#[test]
fn refused_sends_are_sent_again() {
    let mut m = twelve(800_000, 4);
    m.refuse = 0.1;
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 4: {:?}", v.samples);
    m.assert_clean(4);
    let s = m.stats();
    assert!(s.refused > 200 && v.checks.transactions > 500, "{s:?}");
    assert!(
        m.live_idle(),
        "seed 4: every transaction and reply went out"
    );
}

#[test]
fn a_replica_crash_leaves_the_live_replicas_agreeing_5_2() {
    let mut m = twelve(1_000_000, 5);
    // Process 5: replica 1 of shard 1, and an initiator.
    m.crash_at(5, 400_000);
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 5: {:?}", v.samples);
    m.assert_clean(5);
    assert_eq!(
        v.checks.shards_compared, 4,
        "shard 1 still has two live replicas"
    );
    let s = m.stats();
    assert_eq!(s.failed, 0);
    assert!(v.checks.transactions > 1_000, "{v:?}");
    // Transactions kept committing after the crash.
    let late = m.committed.iter().filter(|c| c.call_ns > 500_000).count();
    assert!(late > 300, "{late} committed after the crash");
    assert!(m.live_idle());
    let live = &m.procs[1];
    assert_eq!(
        live.failed().get(&ProcId(5)),
        Some(&Timestamp::new(400_000)),
        "the replicas of shard 1 agree on the failure timestamp"
    );
}

#[test]
fn recalled_scatterings_are_sent_again_5_2() {
    let mut m = twelve(1_000_000, 6);
    m.recall = true;
    m.crash_at(9, 300_000);
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 6: {:?}", v.samples);
    m.assert_clean(6);
    let s = m.stats();
    assert!(s.recalled > 0, "{s:?}");
    assert_eq!(s.failed, 0);
    assert!(m.live_idle());
    let again = m.committed.iter().filter(|c| c.attempts > 1).count();
    assert!(
        again > 0,
        "recalled transactions committed at their second attempt"
    );
}

#[test]
fn a_shard_with_no_live_replica_fails_its_transactions_5_2() {
    let mut m = twelve(800_000, 7);
    for p in [1, 5, 9] {
        m.crash_at(p, 300_000);
    }
    m.run();
    let v = m.verdict();
    assert_eq!(v.violations, 0, "seed 7: {:?}", v.samples);
    m.assert_clean(7);
    assert_eq!(v.checks.shards_compared, 3);
    let s = m.stats();
    assert!(s.failed > 0, "{s:?}");
    assert!(
        v.checks.unfinished > 0,
        "delivered but never committed: {v:?}"
    );
    let out = &v.checks.left_out;
    assert_eq!(
        out.get(left_out::SHARD_WITHOUT_REPLICA),
        Some(&1),
        "{out:?}"
    );
    assert!(out.contains_key(left_out::CUSTOMER_PARTIAL), "{out:?}");
    assert!(m.live_idle());
}

#[test]
fn a_broken_total_order_is_caught() {
    // Deliveries to process 6 (replica 1 of shard 2) come out of timestamp order: its replica
    // diverges from the other two, and the checker says so.
    let mut m = twelve(400_000, 8);
    m.misorder = Some(6);
    m.run();
    let v = m.verdict();
    let s = m.stats();
    assert!(s.reordered > 0, "{s:?}");
    assert!(v.violations > 0, "seed 8: nothing caught");
    let k = kinds(&v);
    assert!(
        k.contains("replicas-diverge") || k.contains("result"),
        "{k:?}"
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let run = |seed| {
        let mut m = twelve(300_000, seed);
        m.loss = 0.02;
        m.run();
        let digests: Vec<u64> = m
            .procs
            .iter()
            .filter_map(|p| p.shard().map(|s| s.1.digest()))
            .collect();
        (m.committed, digests)
    };
    let a = run(9);
    assert!(a.0.len() > 200);
    assert_eq!(a, run(9));
    assert_ne!(a.0, run(10).0);
}

#[test]
fn garbage_is_dropped_and_counted() {
    let w = workload(TpccScale::small(), 1);
    let mut cfg = TpccConfig::new(ProcId(0), 12, w.clone(), 0);
    cfg.layout = TpccLayout::new(4, 3);
    let mut p = TpccProcess::new(cfg, TxnGen::new(w.clone(), 1, 1));
    let mut g = TxnGen::new(w, 1, 2);
    let layout = TpccLayout::new(4, 3);
    let mine = (0..)
        .map(|_| g.next_txn())
        .find(|t| layout.shards_of(t).contains(&0))
        .unwrap();
    let elsewhere = (0..)
        .map(|_| g.next_txn())
        .find(|t| !layout.shards_of(t).contains(&0))
        .unwrap();
    let mut invalid = mine.clone();
    match &mut invalid {
        TxnInput::NewOrder(o) => o.w_id = 99,
        TxnInput::Payment(pay) => pay.w_id = 99,
    }
    let ok = codec::encode_request(1, &mine);
    let reply = codec::encode_reply(1, 5, 3, &PartResult::Payment(PaymentPart::default()));
    let invalid = codec::encode_request(2, &invalid);
    let elsewhere = codec::encode_request(3, &elsewhere);
    let cases: [(&[u8], bool, u32); 7] = [
        (&[3, 0, 1, 2], true, 4),
        (&[], true, 4),
        (&ok, false, 4),
        (&invalid, true, 4),
        (&elsewhere, true, 4),
        // A reply naming shard 3 from process 4, a replica of shard 0.
        (&reply, false, 4),
        (&[4, 1], false, 4),
    ];
    for (payload, reliable, src) in cases {
        let input = AppInput::Deliver {
            src: ProcId(src),
            ts: Timestamp::new(5),
            reliable,
            payload,
        };
        p.handle(Instant(1), input);
    }
    assert_eq!(p.stats().malformed, 7);
    assert!(p.poll_send().is_none());
    // The well-formed request is applied and answered.
    let input = AppInput::Deliver {
        src: ProcId(4),
        ts: Timestamp::new(6),
        reliable: true,
        payload: &ok,
    };
    p.handle(Instant(2), input);
    let s = p.poll_send().unwrap();
    assert!(!s.reliable && s.parts.len() == 1 && s.parts[0].0 == ProcId(4));
    let r = codec::decode_reply(&s.parts[0].1).unwrap();
    assert_eq!((r.txn, r.req_ts, r.shard), (1, 6, 0));
}

#[test]
fn replies_are_kept_for_a_bounded_time() {
    let w = workload(TpccScale::small(), 11);
    let mut m = Model::build(TpccLayout::new(4, 3), 12, 2, 400_000, 11, w, |c| {
        c.reply_keep_ns = 50_000;
    });
    m.run();
    // The run drained long after the last reply: at most the last 50 µs' replies are kept.
    let kept: usize = m.procs.iter().map(|p| p.replies_kept()).sum();
    let applied = m.stats().parts_applied as usize;
    assert!(kept * 4 < applied, "{kept} kept of {applied}");
}

#[test]
fn a_process_told_it_failed_gives_up_and_keeps_what_it_sent_below_its_failure_5_2() {
    let w = workload(TpccScale::small(), 1);
    let mut cfg = TpccConfig::new(ProcId(0), 12, w.clone(), 2);
    cfg.layout = TpccLayout::new(4, 3);
    let mut p = TpccProcess::new(cfg, TxnGen::new(w, 1, 3));
    p.handle(Instant(0), AppInput::Timeout);
    let tags: Vec<u64> = std::iter::from_fn(|| p.poll_send())
        .map(|s| s.tag)
        .collect();
    assert_eq!(tags.len(), 2);
    for (tag, ts) in tags.iter().zip([10, 20]) {
        let ts = Timestamp::new(ts);
        p.handle(Instant(1), AppInput::Sent { tag: *tag, ts });
    }
    let failed = AppInput::ProcFailed {
        proc: ProcId(0),
        ts: Timestamp::new(15),
    };
    p.handle(Instant(2), failed);
    assert!(p.idle() && p.shard().is_none() && p.poll_send().is_none());
    let u = p.unfinished();
    assert_eq!(
        u.len(),
        1,
        "only the one stamped below its failure takes effect"
    );
    assert_eq!(
        (u[0].txn, u[0].key, u[0].return_ns),
        (tags[0], 10, u64::MAX)
    );
    p.handle(Instant(1_000_000), AppInput::Timeout);
    assert!(p.poll_send().is_none(), "it issues no more");
    assert_eq!(p.stats().failed, 2);
}
