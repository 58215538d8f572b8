//! The database's execution: placement of rows and replicas, New-Order and Payment by the
//! clauses, and a sharded database answering as the unsharded one.

use super::*;

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
