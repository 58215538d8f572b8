//! The generator's distributions (clauses 2.1.6, 2.4.1, 2.5.1) and the loaded population
//! (clause 4.3.3).

use super::*;

/// `n` draws of `f`, the share that satisfy `p`.
fn share<T>(n: usize, mut f: impl FnMut() -> T, p: impl Fn(&T) -> bool) -> f64 {
    (0..n).filter(|_| p(&f())).count() as f64 / n as f64
}

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
