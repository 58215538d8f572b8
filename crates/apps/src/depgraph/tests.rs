//! The dependency-graph checker on small histories with one known anomaly each (Adya's and
//! Elle's examples), and on clean ones that must stay clean.

use super::*;
use crate::history::{self, Operation};
use Mop::{Read as R, Write as W};

/// `(client, call, outcome, micro-operations)`.
type Op = (u32, u64, Option<(OpType, u64)>, Vec<Mop>);

/// Operations as a history.
fn hist(ops: &[Op]) -> Vec<HistOp> {
    let ops: Vec<Operation> = ops
        .iter()
        .map(|(client, call, outcome, mops)| Operation {
            client: *client,
            call_ns: *call,
            outcome: *outcome,
            mops: mops.clone(),
        })
        .collect();
    history::build(&ops)
}

fn ok(t: u64) -> Option<(OpType, u64)> {
    Some((OpType::Ok, t))
}

const SER: Options = Options {
    realtime: false,
    skew_ns: 0,
};
const STRICT: Options = Options {
    realtime: true,
    skew_ns: 0,
};

fn names(v: &GraphVerdict) -> Vec<String> {
    v.samples
        .iter()
        .map(|s| s.split(':').next().unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_serial_history_has_no_anomaly_and_its_edges_are_counted() {
    let h = hist(&[
        (0, 0, ok(10), vec![R(1, None), W(1, 100)]),
        (1, 20, ok(30), vec![R(1, Some(100)), W(1, 101), W(2, 101)]),
        (2, 40, ok(50), vec![R(2, Some(101)), R(1, Some(101))]),
        (0, 60, ok(70), vec![W(2, 102)]),
    ]);
    for opts in [SER, STRICT] {
        let v = check(&h, opts);
        assert_eq!(v.anomalies, 0, "{:?}", v.samples);
        assert_eq!((v.ok, v.info, v.failed), (4, 0, 0));
        assert_eq!(v.reads, 4);
        assert!(
            v.edges[WR as usize] >= 3 && v.edges[WW as usize] == 1,
            "{v:?}"
        );
    }
    assert!(check(&h, STRICT).edges[RT as usize] > 0);
}

#[test]
fn a_read_modify_write_from_nothing_is_not_a_cycle_with_itself() {
    let h = hist(&[
        (0, 0, ok(10), vec![R(1, None), W(1, 100)]),
        (1, 20, ok(30), vec![R(1, Some(100)), W(1, 101)]),
    ]);
    assert_eq!(check(&h, STRICT).anomalies, 0);
}

#[test]
fn lost_update_is_a_cycle_of_two_anti_dependencies() {
    let h = hist(&[
        (0, 0, ok(10), vec![W(1, 100)]),
        (1, 20, ok(40), vec![R(1, Some(100)), W(1, 101)]),
        (2, 20, ok(40), vec![R(1, Some(100)), W(1, 102)]),
    ]);
    let v = check(&h, SER);
    assert_eq!(v.anomalies, 1, "{:?}", v.samples);
    assert_eq!(names(&v), ["G2 cycle"]);
}

#[test]
fn write_skew_is_g2() {
    let h = hist(&[
        (0, 0, ok(10), vec![R(1, None), W(2, 100)]),
        (1, 0, ok(10), vec![R(2, None), W(1, 101)]),
    ]);
    let v = check(&h, SER);
    assert_eq!(names(&v), ["G2 cycle"], "{:?}", v.samples);
}

#[test]
fn read_skew_is_g_single() {
    let h = hist(&[
        (0, 0, ok(10), vec![W(1, 100), W(2, 100)]),
        (
            1,
            20,
            ok(30),
            vec![R(1, Some(100)), R(2, Some(100)), W(1, 101), W(2, 101)],
        ),
        (2, 20, ok(30), vec![R(1, Some(100)), R(2, Some(101))]),
    ]);
    let v = check(&h, SER);
    assert_eq!(names(&v), ["G-single cycle"], "{:?}", v.samples);
}

#[test]
fn circular_information_flow_is_g1c() {
    let h = hist(&[
        (0, 0, ok(10), vec![R(2, Some(201)), W(1, 100)]),
        (1, 0, ok(10), vec![R(1, Some(100)), W(2, 201)]),
    ]);
    let v = check(&h, SER);
    assert_eq!(names(&v), ["G1c cycle"], "{:?}", v.samples);
}

#[test]
fn a_stale_read_is_an_anomaly_only_in_real_time_and_within_the_skew_it_is_none() {
    let h = hist(&[
        (0, 0, ok(10), vec![W(1, 100)]),
        (1, 20, ok(30), vec![W(1, 101)]),
        (2, 40, ok(50), vec![R(1, Some(100))]),
    ]);
    assert_eq!(check(&h, SER).anomalies, 0);
    let v = check(&h, STRICT);
    assert_eq!(names(&v), ["G-single-realtime cycle"], "{:?}", v.samples);
    let lax = Options {
        realtime: true,
        skew_ns: 15,
    };
    assert_eq!(check(&h, lax).anomalies, 0);
}

#[test]
fn reading_nothing_after_a_write_returned_is_a_real_time_anomaly() {
    let h = hist(&[
        (0, 0, ok(10), vec![W(1, 100)]),
        (1, 20, ok(30), vec![R(1, None)]),
    ]);
    assert_eq!(check(&h, SER).anomalies, 0);
    assert_eq!(names(&check(&h, STRICT)), ["G-single-realtime cycle"]);
}

#[test]
fn bad_reads_are_named() {
    let h = hist(&[
        (0, 0, Some((OpType::Fail, 10)), vec![W(1, 100)]),
        (1, 20, ok(30), vec![R(1, Some(100))]),
        (2, 20, ok(30), vec![R(2, Some(77))]),
        (3, 20, ok(30), vec![W(3, 5), R(3, Some(6))]),
        (4, 20, ok(30), vec![R(4, Some(9)), W(4, 9)]),
    ]);
    let v = check(&h, SER);
    assert_eq!(v.failed, 1);
    let mut n = names(&v);
    n.sort();
    assert_eq!(
        n,
        [
            "G1a (aborted read)",
            "future-read",
            "garbage-read",
            "internal"
        ],
        "{:?}",
        v.samples
    );
}

#[test]
fn a_write_of_unknown_outcome_may_be_read_and_a_duplicate_value_is_named() {
    let h = hist(&[
        (0, 0, None, vec![W(1, 100)]),
        (1, 20, ok(30), vec![R(1, Some(100))]),
    ]);
    let v = check(&h, STRICT);
    assert_eq!((v.anomalies, v.info, v.ok), (0, 1, 1), "{:?}", v.samples);
    let h = hist(&[
        (0, 0, ok(10), vec![W(1, 100)]),
        (1, 0, ok(10), vec![W(1, 100)]),
    ]);
    assert_eq!(names(&check(&h, SER)), ["duplicate-write"]);
}

#[test]
fn a_history_out_of_order_is_malformed_not_a_panic() {
    let mut h = hist(&[(0, 0, ok(10), vec![W(1, 100)])]);
    h.swap(0, 1);
    let v = check(&h, STRICT);
    assert!(
        names(&v).iter().all(|n| n == "malformed"),
        "{:?}",
        v.samples
    );
    assert!(v.anomalies >= 1);
}
