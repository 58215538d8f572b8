use super::*;
use crate::repl::KvMachine;
use onepipe_proto::rng::Rng;
use proptest::prelude::*;

const BUDGET: u64 = 1_000_000;

fn op(client: u32, cmd: Cmd, output: Option<Val>, call_ns: u64, return_ns: u64) -> ReplDone {
    ReplDone {
        client,
        id: call_ns,
        cmd,
        output,
        call_ns,
        return_ns,
    }
}

fn put(client: u32, v: Val, call: u64, ret: u64) -> ReplDone {
    op(client, Cmd::Put(7, v), None, call, ret)
}

fn get(client: u32, out: Option<Val>, call: u64, ret: u64) -> ReplDone {
    op(client, Cmd::Get(7), out, call, ret)
}

fn cas(expect: Option<Val>, new: Val, out: Option<Val>, call: u64, ret: u64) -> ReplDone {
    op(
        1,
        Cmd::Cas {
            key: 7,
            expect,
            new,
        },
        out,
        call,
        ret,
    )
}

fn maybe_put(v: Val, call_ns: u64) -> MaybeOp {
    MaybeOp {
        client: 9,
        id: v,
        cmd: Cmd::Put(7, v),
        call_ns,
    }
}

fn violations(h: &[ReplDone], maybe: &[MaybeOp], skew_ns: u64) -> u64 {
    let v = check(h, maybe, skew_ns, BUDGET);
    assert_eq!(v.undecided, 0, "{v:?}");
    assert_eq!(v.samples.len() as u64, v.violations.min(SAMPLES_MAX as u64));
    v.violations
}

/// A linearizable history: `clients` closed-loop clients issue `per_client` operations each on
/// `keys` keys; every operation takes effect on a [`KvMachine`] at a point inside its interval.
/// Compare-and-sets expect the current value half of the time.
fn generate(seed: u64, clients: u32, per_client: u64, keys: u64) -> Vec<ReplDone> {
    let mut rng = Rng::new(seed);
    let mut slots = Vec::new();
    for client in 0..clients {
        let mut t = rng.below(20);
        for id in 0..per_client {
            let effect = t + rng.below(40);
            let ret = effect + rng.below(40);
            slots.push((effect, t, ret, client, id));
            t = ret + 1 + rng.below(10);
        }
    }
    slots.sort_unstable();
    let mut machine = KvMachine::default();
    let mut written = 0;
    let mut history = Vec::new();
    for (_, call_ns, return_ns, client, id) in slots {
        let key = rng.below(keys);
        written += 1;
        let cmd = match rng.below(3) {
            0 => Cmd::Get(key),
            1 => Cmd::Put(key, written),
            _ => Cmd::Cas {
                key,
                expect: if rng.chance(0.5) {
                    machine.get(key)
                } else {
                    Some(written - 1)
                },
                new: written,
            },
        };
        let output = machine.apply(&cmd);
        history.push(ReplDone {
            client,
            id,
            cmd,
            output,
            call_ns,
            return_ns,
        });
    }
    history
}

#[test]
fn sequential_history_passes() {
    let h = [
        get(0, None, 0, 1),
        put(0, 1, 2, 3),
        cas(Some(1), 2, Some(1), 4, 5),
        cas(Some(1), 3, Some(2), 6, 7),
        get(1, Some(2), 8, 9),
    ];
    let v = check(&h, &[], 0, BUDGET);
    assert!(v.ok(), "{v:?}");
    assert_eq!((v.keys, v.ops), (1, 5));
}

#[test]
fn overlapping_ops_pass_when_some_order_works() {
    // put 2 @10, get 2 @65, put 1 @80, get 1 @95: not the order of the calls.
    let h = [
        put(0, 1, 0, 100),
        put(1, 2, 5, 50),
        get(2, Some(2), 60, 70),
        get(2, Some(1), 90, 110),
    ];
    assert_eq!(violations(&h, &[], 0), 0);
}

#[test]
fn stale_read_is_caught() {
    let h = [put(0, 1, 0, 10), get(1, None, 20, 30)];
    assert_eq!(violations(&h, &[], 0), 1);
}

#[test]
fn lost_acknowledged_write_is_caught() {
    let h = [put(0, 1, 0, 10), put(0, 2, 20, 30), get(1, Some(1), 40, 50)];
    let v = check(&h, &[], 0, BUDGET);
    assert_eq!(v.violations, 1);
    assert_eq!(
        v.samples,
        [
            "key 7: c1#40 get = 1 [40, 50] returns the value of c0#0 put 1 [0, 10], \
          yet c0#20 put 2 [20, 30] came between them"
        ]
    );
}

#[test]
fn a_value_that_comes_back_is_caught_by_the_search() {
    // Two concurrent writes; reads see 1, then 2, then 1 again.
    let h = [
        put(0, 1, 0, 100),
        put(1, 2, 0, 100),
        get(2, Some(1), 10, 20),
        get(2, Some(2), 30, 40),
        get(2, Some(1), 50, 60),
    ];
    let v = check(&h, &[], 0, BUDGET);
    assert_eq!(v.violations, 1);
    let text = &v.samples[0];
    assert!(
        text.starts_with("key 7 (5 ops) is not linearizable: the deepest"),
        "{text}"
    );
    assert!(
        text.contains("then c2#30 get = 2 [30, 40] has returned"),
        "{text}"
    );
}

#[test]
fn two_swaps_from_one_value_are_caught() {
    let h = [
        put(0, 1, 0, 10),
        cas(Some(1), 2, Some(1), 20, 40),
        cas(Some(1), 3, Some(1), 30, 50),
    ];
    let v = check(&h, &[], 0, BUDGET);
    assert_eq!(v.violations, 1);
    assert!(
        v.samples[0].contains("both swap from 1"),
        "{}",
        v.samples[0]
    );
}

#[test]
fn repeated_values_fall_back_to_the_plain_search() {
    let h = [
        put(0, 1, 0, 10),
        put(0, 2, 20, 30),
        put(0, 1, 40, 50),
        get(1, Some(1), 60, 70),
    ];
    assert_eq!(violations(&h, &[], 0), 0);
    let h = [
        put(0, 1, 0, 10),
        put(0, 2, 20, 30),
        put(0, 2, 40, 50),
        get(1, Some(1), 60, 70),
    ];
    assert_eq!(violations(&h, &[], 0), 1);
}

#[test]
fn cas_whose_output_contradicts_is_caught() {
    // It says it swapped, yet a later read sees the old value.
    let h = [
        put(0, 1, 0, 10),
        cas(Some(1), 2, Some(1), 20, 30),
        get(2, Some(1), 40, 50),
    ];
    assert_eq!(violations(&h, &[], 0), 1);
    // It says the key was never written, after a write.
    let h = [put(0, 1, 0, 10), cas(None, 2, None, 20, 30)];
    assert_eq!(violations(&h, &[], 0), 1);
}

#[test]
fn read_of_a_value_never_written_is_caught() {
    let h = [put(0, 1, 0, 10), get(1, Some(5), 0, 20)];
    assert_eq!(violations(&h, &[], 0), 1);
}

#[test]
fn maybe_write_may_or_may_not_have_happened() {
    let before = put(0, 1, 0, 10);
    // It happened; it did not (or not yet).
    assert_eq!(
        violations(&[before, get(1, Some(2), 30, 40)], &[maybe_put(2, 20)], 0),
        0
    );
    assert_eq!(
        violations(&[before, get(1, Some(1), 30, 40)], &[maybe_put(2, 20)], 0),
        0
    );
    // It cannot be undone, nor take effect before its call.
    let undone = [before, get(1, Some(2), 30, 40), get(1, Some(1), 50, 60)];
    assert_eq!(violations(&undone, &[maybe_put(2, 20)], 0), 1);
    assert_eq!(
        violations(&[before, get(1, Some(2), 30, 40)], &[maybe_put(2, 45)], 0),
        1
    );
    // A maybe-get constrains nothing and is not counted.
    let maybe_get = MaybeOp {
        cmd: Cmd::Get(7),
        ..maybe_put(3, 0)
    };
    assert_eq!(check(&[before], &[maybe_get], 0, BUDGET).ops, 1);
}

#[test]
fn real_time_order_tolerates_skew_and_no_more() {
    // The get calls 5 ns after the put returns: with 5 ns of skew they may overlap.
    let h = [put(0, 1, 0, 10), get(1, None, 15, 20)];
    assert_eq!(violations(&h, &[], 5), 0);
    assert_eq!(violations(&h, &[], 4), 1);
}

#[test]
fn budget_exhausted_is_undecided() {
    let h = [put(0, 1, 0, 10), put(1, 2, 0, 10), get(2, Some(1), 20, 30)];
    let v = check(&h, &[], 0, 3);
    assert_eq!((v.violations, v.undecided), (0, 1));
    assert!(!v.ok());
    assert!(check(&h, &[], 0, BUDGET).ok());
}

#[test]
fn a_hundred_thousand_ops_over_a_thousand_keys_pass() {
    let h = generate(1, 16, 6_250, 1_000);
    let v = check(&h, &[], 0, BUDGET);
    assert!(v.ok(), "{v:?}");
    assert_eq!((v.keys, v.ops), (1_000, 100_000));
}

/// Makes a get (the first from `from`) read the value of a write called after it returned, at
/// its key: a violation the search must find (the value was written, so no shortcut sees it).
fn read_the_future(h: &mut [ReplDone], from: usize, skew_ns: u64) -> bool {
    for g in from..h.len() {
        let (key, after) = (h[g].cmd.key(), h[g].return_ns + skew_ns);
        let future = h.iter().find(|w| w.cmd.key() == key && w.call_ns > after);
        if let (Cmd::Get(_), Some(v)) = (h[g].cmd, future.and_then(|w| w.cmd.written())) {
            h[g].output = Some(v);
            return true;
        }
    }
    false
}

#[test]
fn thousands_of_ops_on_one_key_pass_and_a_late_violation_is_found() {
    let mut h = generate(2, 8, 1_000, 2);
    let v = check(&h, &[], 0, BUDGET);
    assert!(v.ok(), "{v:?}");
    assert!(read_the_future(&mut h, 7_000, 0));
    let v = check(&h, &[], 0, BUDGET);
    assert_eq!((v.violations, v.undecided), (1, 0), "{v:?}");
}

proptest! {
    #[test]
    fn generated_histories_pass_and_mutated_reads_fail(
        seed in any::<u64>(),
        clients in 1..6u32,
        per_client in 1..30u64,
        keys in 1..4u64,
        skew_ns in 0..20u64,
    ) {
        let mut h = generate(seed, clients, per_client, keys);
        // Some writes' outcomes are lost; some writes never happened.
        let mut maybe = Vec::new();
        for (i, d) in h.clone().iter().enumerate().rev().filter(|(i, d)| i % 5 == 0 && d.cmd.is_write()) {
            maybe.push(MaybeOp { client: d.client, id: d.id, cmd: d.cmd, call_ns: d.call_ns });
            h.remove(i);
        }
        maybe.push(MaybeOp { client: 99, id: 0, cmd: Cmd::Put(0, u64::MAX), call_ns: seed % 100 });
        let v = check(&h, &maybe, skew_ns, BUDGET);
        prop_assert!(v.ok(), "{:?}", v);
        let gets: Vec<usize> = (0..h.len()).filter(|&i| !h[i].cmd.is_write()).collect();
        if !gets.is_empty() {
            let mut never = h.clone();
            never[gets[seed as usize % gets.len()]].output = Some(u64::MAX - 1);
            let v = check(&never, &maybe, skew_ns, BUDGET);
            prop_assert_eq!((v.violations, v.undecided), (1, 0), "{:?}", v);
        }
        let from = seed as usize % h.len().max(1);
        if read_the_future(&mut h, from, skew_ns) {
            let v = check(&h, &maybe, skew_ns, BUDGET);
            prop_assert_eq!((v.violations, v.undecided), (1, 0), "{:?}", v);
        }
    }
}

proptest! {
    /// The refutations and the search's rules for unique values decide as the plain search does.
    #[test]
    fn the_unique_value_shortcuts_agree_with_the_plain_search(
        seed in any::<u64>(),
        clients in 1..5u32,
        per_client in 1..10u64,
        keys in 1..3u64,
        skew_ns in 0..20u64,
        mutate in any::<prop::sample::Index>(),
        to in any::<prop::sample::Index>(),
    ) {
        let mut h = generate(seed, clients, per_client, keys);
        let maybe: Vec<MaybeOp> = h
            .iter()
            .filter(|d| d.cmd.is_write() && d.id + 1 == per_client)
            .map(|d| MaybeOp { client: d.client, id: d.id, cmd: d.cmd, call_ns: d.call_ns })
            .collect();
        h.retain(|d| !(d.cmd.is_write() && d.id + 1 == per_client));
        // A read now returns another value written at its key, or none.
        let reads: Vec<usize> = (0..h.len()).filter(|&i| !matches!(h[i].cmd, Cmd::Put(..))).collect();
        if !reads.is_empty() {
            let r = reads[mutate.index(reads.len())];
            let key = h[r].cmd.key();
            let mut values: Vec<Option<Val>> = h.iter().chain([&h[r]]).filter(|d| d.cmd.key() == key).map(|d| d.cmd.written()).collect();
            values.push(None);
            h[r].output = values[to.index(values.len())];
        }
        let v = check(&h, &maybe, skew_ns, BUDGET);
        let ops = ops_by_key(&h, &maybe, skew_ns);
        let plain = ops
            .chunk_by(|a, b| a.cmd.key() == b.cmd.key())
            .filter(|k| matches!(check_key(k, false, BUDGET), Outcome::Violation(_)))
            .count();
        prop_assert_eq!((v.violations, v.undecided), (plain as u64, 0), "{:?}", v);
    }
}

#[test]
fn the_history_is_in_jepsens_form_and_the_graph_checker_agrees_with_the_register_checker() {
    use crate::depgraph;
    use crate::history::{self, OpType};
    let opts = depgraph::Options {
        realtime: true,
        skew_ns: 0,
    };
    // A put, a compare-and-set that swapped, a get of its value, one still open.
    let h = [
        put(0, 1, 0, 10),
        cas(Some(1), 2, Some(1), 20, 30),
        get(2, Some(2), 40, 50),
    ];
    let open = [MaybeOp {
        client: 3,
        id: 9,
        cmd: Cmd::Put(7, 3),
        call_ns: 45,
    }];
    let text = history_json(&h, &open);
    let j: serde_json::Value = serde_json::from_str(&text).expect("valid json");
    assert_eq!(j[3]["type"], "ok");
    assert_eq!(j[3]["value"], serde_json::json!([["r", 7, 1], ["w", 7, 2]]));
    let recs = history::from_json(&text).unwrap();
    let kinds: Vec<OpType> = recs.iter().map(|r| r.kind).collect();
    assert_eq!(kinds.iter().filter(|k| **k == OpType::Info).count(), 1);
    let v = depgraph::check(&recs, opts);
    assert_eq!((v.anomalies, v.ok, v.info), (0, 3, 1), "{:?}", v.samples);
    // The compare-and-set whose later read contradicts it: both checkers object.
    let bad = [
        put(0, 1, 0, 10),
        cas(Some(1), 2, Some(1), 20, 30),
        get(2, Some(1), 40, 50),
    ];
    assert_eq!(violations(&bad, &[], 0), 1);
    let recs = history::from_json(&history_json(&bad, &[])).unwrap();
    assert_eq!(depgraph::check(&recs, opts).anomalies, 1);
}

fn log(replica: u32, start: u64, commit: u64, entries: &[u64], writes: &[u64]) -> ReplicaLog {
    ReplicaLog {
        replica,
        start,
        commit,
        entries: entries.iter().map(|&p| (1, p, p * 31)).collect(),
        committed_writes: writes.iter().map(|&id| (1, id)).collect(),
        committed_cmds: Vec::new(),
    }
}

#[test]
fn identical_prefixes_pass() {
    let logs = [
        log(0, 0, 5, &[0, 1, 2, 3, 4], &[]),
        log(1, 2, 3, &[2, 3], &[]),
        log(2, 4, 5, &[4, 5, 6], &[]),
    ];
    assert_eq!(check_logs(&logs, [].into_iter()), Vec::<String>::new());
    // No shared position: nothing to compare.
    assert!(check_logs(
        &[log(0, 0, 1, &[0], &[]), log(1, 9, 9, &[9], &[])],
        [].into_iter()
    )
    .is_empty());
}

#[test]
fn diverging_checksum_is_caught() {
    let mut b = log(1, 1, 3, &[1, 2, 3], &[]);
    b.entries[1].2 ^= 1;
    let v = check_logs(&[log(0, 0, 5, &[0, 1, 2, 3, 4], &[]), b], [].into_iter());
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].starts_with("replicas 0 and 1 disagree at position 2"),
        "{}",
        v[0]
    );
}

#[test]
fn missing_acknowledged_write_is_caught() {
    let logs = [
        log(0, 0, 5, &[], &[1, 2]),
        log(1, 0, 3, &[], &[1]),
        log(2, 0, 5, &[], &[1]),
    ];
    // Write 1 is everywhere; 2 is missing from up-to-date replica 2 (replica 1 is behind); 3 is nowhere.
    let v = check_logs(&logs, [(1, 1), (1, 2), (1, 3)].into_iter());
    assert_eq!(
        v,
        [
            "acknowledged write c1#2 is missing from up-to-date replica 2 (commit 5)",
            "acknowledged write c1#3 is held by no replica"
        ]
    );
}
