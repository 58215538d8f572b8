//! The checker against histories run without a network, correct and corrupted (each mutation
//! must be caught), and the checker's own checks, each against its corruption.

use super::*;

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

/// §5.2: an initiator that fails leaves its stamped transactions open, bound to take effect,
/// with answers it never heard. Two of its Payments of one warehouse in a row write `W_YTD`
/// twice where nobody reads the first write: the history cannot infer both, and the next read
/// of `W_YTD` is garbage — unless the answers come from the replicas that applied them.
#[test]
fn a_failed_initiator_s_unheard_answers_come_from_the_replicas_logs_5_2() {
    let d = direct(200, None);
    let payment_of = |c: &TpccCommitted| match &c.input {
        TxnInput::Payment(p) => Some(p.w_id),
        TxnInput::NewOrder(_) => None,
    };
    // Two Payments of one warehouse with no other between them, and a third after.
    let (i, j) = (0..d.history.len())
        .find_map(|i| {
            let w = payment_of(&d.history[i])?;
            let mut next =
                (i + 1..d.history.len()).filter(|&k| payment_of(&d.history[k]) == Some(w));
            let j = next.next()?;
            next.next().map(|_| (i, j))
        })
        .expect("Payments of one warehouse");
    let mut committed = d.history.clone();
    let open: Vec<TpccCommitted> = [j, i]
        .iter()
        .map(|&k| {
            let mut u = committed.remove(k);
            u.results.clear();
            u.return_ns = u64::MAX;
            u
        })
        .collect();
    let mut c = TpccChecker::new(d.w.scale, d.w.seed, TpccLayout::new(3, 2));
    for x in committed {
        c.on_commit(x);
    }
    let rs: Vec<(u32, &Shard)> = d.replicas.iter().map(|(s, r)| (*s, r)).collect();
    let unheard = c.verdict_with(&open, &rs, 0);
    assert!(
        unheard
            .by_kind
            .get("dependency-graph")
            .is_some_and(|&n| n > 0),
        "{:?}",
        unheard.samples
    );
    // The replicas' logs: each shard's answer to each of the two.
    let logs: Vec<Vec<onepipe::AppliedTxn>> = [i, j]
        .iter()
        .flat_map(|&k| {
            let h = &d.history[k];
            h.results.iter().map(move |(shard, r)| {
                vec![onepipe::AppliedTxn {
                    txn: h.txn,
                    client: h.client,
                    ts: h.key,
                    input: h.input.clone(),
                    answer: Some((*shard, r.clone())),
                }]
            })
        })
        .collect();
    let completed =
        check::complete_from_logs(open, c.committed().iter(), logs.iter().map(Vec::as_slice));
    assert_eq!(completed.len(), 2);
    let v = c.verdict_with(&completed, &rs, 0);
    assert_eq!(
        (v.violations, v.checks.unfinished),
        (0, 2),
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
