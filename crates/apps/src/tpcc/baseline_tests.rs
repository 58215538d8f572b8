//! The baselines of Fig. 15 — 2PL ([`super::lock`]) and OCC ([`super::occ`]), each with 2PC and
//! primary-backup replication — on a small network model: every message arrives once, after a
//! random delay, in order between each pair of processes (links are FIFO); every process's
//! clock is the true time. Twelve processes (4 shards × 3 replicas) run a few thousand
//! transactions; the checker replays them in their stamped order and compares every result,
//! real time, clause 3.3.2's conditions, and every replica's final state. Also: wait-die on a
//! lock table, the undo and access sets the baselines lean on, the codec, garbage, and planted
//! flaws (a write lock taken shared, a prepare that does not validate) that the checker catches.

use super::check::{TpccChecker, TpccVerdict};
use super::codec::tests::{input, result};
use super::db::{Access, RowKey, Shard, TpccLayout};
use super::gen::{TpccScale, TpccWorkload, TxnGen};
use super::lock::{LockPrimary, LockTable, Outcome, TpccLockProcess};
use super::occ::OccPrimary;
use super::twopc::{decode, encode, Msg, Primary, TwoPcProcess, MSG_LEN_MAX, ROWS_MAX};
use super::*;
use crate::kv::txn_id;
use crate::AppInput;
use bytes::Bytes;
use onepipe_proto::rng::Rng;
use onepipe_proto::{Instant, ProcId, Timestamp};
use onepipe_testalloc::fuzz::{self, ensure, Bound};
use proptest::prelude::*;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// A message on its way: (arrival, seq, src, dst, payload).
type InFlight = (u64, u64, u32, u32, Bytes);

/// Processes of one protocol on the network model.
struct Net<P: Primary> {
    procs: Vec<TwoPcProcess<P>>,
    /// A min-heap.
    due: BinaryHeap<Reverse<InFlight>>,
    /// Per (src, dst), the last arrival: a later message does not overtake it.
    last: BTreeMap<(u32, u32), u64>,
    timers: BTreeSet<(u64, u32)>,
    seq: u64,
    rng: Rng,
    checker: TpccChecker,
    committed: Vec<TpccCommitted>,
    /// Messages delivered.
    delivered: u64,
}

const PROCS: u32 = 12;

fn workload(warehouses: u32, seed: u64) -> TpccWorkload {
    TpccWorkload {
        scale: TpccScale {
            warehouses,
            ..TpccScale::small()
        },
        seed,
        ..TpccWorkload::default()
    }
}

impl<P: Primary> Net<P> {
    /// Twelve processes running `w` with `window` transactions each in flight until `stop_ns`,
    /// a primary's flaw planted by `flaw`.
    fn new(
        w: &TpccWorkload,
        window: u32,
        stop_ns: u64,
        seed: u64,
        flaw: impl Fn(&mut P),
    ) -> Net<P> {
        let procs = (0..PROCS)
            .map(|p| {
                let mut cfg = TpccConfig::new(ProcId(p), PROCS, w.clone(), window);
                cfg.stop = Instant(stop_ns);
                let gen = TxnGen::new(w.clone(), cfg.home_warehouse(), seed ^ u64::from(p) << 32);
                let mut proc = TwoPcProcess::<P>::new(cfg, gen);
                if let Some(primary) = proc.primary_mut() {
                    flaw(primary);
                }
                proc
            })
            .collect();
        let layout = TpccLayout::for_procs(PROCS, 3);
        assert_eq!((layout.shards, layout.replicas), (4, 3));
        Net {
            procs,
            due: BinaryHeap::new(),
            last: BTreeMap::new(),
            timers: BTreeSet::new(),
            seq: 0,
            rng: Rng::new(seed),
            checker: TpccChecker::new(w.scale, w.seed, layout),
            committed: Vec::new(),
            delivered: 0,
        }
    }

    fn turn(&mut self, now: u64, p: u32, input: AppInput<'_>) {
        let app = &mut self.procs[p as usize];
        app.handle(Instant(now), input);
        let mut sends = Vec::new();
        while let Some(s) = app.poll_send() {
            assert!(!s.reliable, "direct messages only");
            sends.extend(s.parts);
        }
        while let Some(c) = app.poll_committed() {
            self.committed.push(c.clone());
            self.checker.on_commit(c);
        }
        if let Some(t) = app.poll_timeout() {
            self.timers.insert((t.as_nanos().max(now), p));
        }
        for (dst, b) in sends {
            let delay = 1_000 + self.rng.below(3_000);
            let last = self.last.entry((p, dst.0)).or_default();
            let at = (now + delay).max(*last + 1);
            *last = at;
            self.seq += 1;
            self.due.push(Reverse((at, self.seq, p, dst.0, b)));
        }
    }

    /// Runs until no message is in flight and no timer is due: every transaction finished.
    fn run(&mut self) {
        for p in 0..PROCS {
            self.turn(0, p, AppInput::Timeout);
        }
        loop {
            let next_msg = self.due.peek().map(|r| r.0 .0);
            let next_timer = self.timers.first().map(|t| t.0);
            let now = match (next_msg, next_timer) {
                (Some(m), t) if t.is_none_or(|t| m <= t) => {
                    let Reverse((at, _, src, dst, b)) = self.due.pop().expect("peeked");
                    let input = AppInput::Deliver {
                        src: ProcId(src),
                        ts: Timestamp::new(at),
                        reliable: false,
                        payload: &b,
                    };
                    self.delivered += 1;
                    self.turn(at, dst, input);
                    at
                }
                (_, Some(t)) => {
                    let (_, p) = self.timers.pop_first().expect("peeked");
                    self.turn(t, p, AppInput::Timeout);
                    t
                }
                (Some(_), None) => unreachable!("a message is due when no timer is"),
                (None, None) => return,
            };
            assert!(now < 1_000_000_000, "the run does not end");
        }
    }

    /// The checker's verdict on the history and on every replica's final state.
    fn verdict(&self) -> TpccVerdict {
        let unfinished: Vec<TpccCommitted> =
            self.procs.iter().flat_map(|p| p.unfinished()).collect();
        assert!(unfinished.is_empty(), "a drained run leaves nothing open");
        let replicas: Vec<(u32, &Shard)> = self.procs.iter().filter_map(|p| p.shard()).collect();
        assert_eq!(replicas.len(), PROCS as usize);
        self.checker.verdict_with(&[], &replicas, 0)
    }

    fn stats(&self) -> TpccStats {
        let mut s = TpccStats::default();
        self.procs.iter().for_each(|p| s += p.stats());
        s
    }

    /// Every process idle: no transaction in flight, no lock held or waited for, no part open
    /// at a primary or a backup.
    fn assert_drained(&self, what: &str) {
        for (i, p) in self.procs.iter().enumerate() {
            assert_eq!(
                (p.inflight(), p.open()),
                (0, (0, 0)),
                "{what}: process {i} left state"
            );
            assert!(p.idle(), "{what}: process {i}");
        }
    }

    /// The counters a correct run keeps at 0.
    fn assert_clean(&self, what: &str) {
        let s = self.stats();
        assert_eq!((s.malformed, s.result_mismatches), (0, 0), "{what}: {s:?}");
    }

    /// Each shard's replicas ended identical (also in the verdict; said here directly).
    fn replicas_agree(&self) -> bool {
        let mut digests: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        for (s, shard) in self.procs.iter().filter_map(|p| p.shard()) {
            digests.entry(s).or_default().insert(shard.digest());
        }
        digests.values().all(|d| d.len() == 1)
    }
}

fn kinds(v: &TpccVerdict) -> BTreeSet<&'static str> {
    v.by_kind.keys().copied().collect()
}

/// A run of `P` on `warehouses` warehouses: checked clean, drained; its network and verdict.
fn clean_run<P: Primary>(warehouses: u32, stop_ns: u64, seed: u64) -> (Net<P>, TpccVerdict) {
    let what = format!("{:?} seed {seed}, {warehouses} warehouses", P::PROTOCOL);
    let mut net = Net::<P>::new(&workload(warehouses, seed), 2, stop_ns, seed, |_| {});
    net.run();
    let v = net.verdict();
    assert_eq!(v.violations, 0, "{what}: {:?}", v.samples);
    assert_eq!(v.checks.shards_compared, 4, "{what}");
    assert_eq!(v.checks.transactions, net.stats().committed(), "{what}");
    let g = &v.graph;
    assert_eq!(g.ok, v.checks.transactions, "{what}: {g:?}");
    assert!(
        g.reads > 0 && g.edges.iter().all(|&e| e > 0),
        "{what}: {g:?}"
    );
    net.assert_clean(&what);
    net.assert_drained(&what);
    assert!(net.replicas_agree(), "{what}");
    (net, v)
}

// --- Runs ----------------------------------------------------------------------------------

#[test]
fn lock_transactions_commit_and_replay_in_lock_order_7_3_2() {
    let (net, v) = clean_run::<LockPrimary>(4, 10_000_000, 1);
    let s = net.stats();
    assert!(v.checks.transactions > 3_000, "{v:?}");
    assert!(
        s.committed_new_order > 1_200 && s.committed_payment > 1_200 && s.rolled_back > 0,
        "{s:?}"
    );
    super::tests::assert_conditions_cover(&v.checks, &workload(4, 1).scale);
    // Four warehouses, twelve terminals: the warehouse rows are contended already.
    assert!(s.lock_waits > 0, "{s:?}");
    assert_eq!((s.lock_conflicts, s.validation_failures), (0, 0));
}

#[test]
fn occ_transactions_commit_and_replay_in_validation_order_7_3_2() {
    let (net, v) = clean_run::<OccPrimary>(4, 10_000_000, 2);
    let s = net.stats();
    assert!(v.checks.transactions > 1_800, "{v:?}");
    assert!(
        s.committed_new_order > 700 && s.committed_payment > 700 && s.rolled_back > 0,
        "{s:?}"
    );
    assert_eq!((s.lock_waits, s.lock_dies), (0, 0), "OCC never waits");
}

/// One warehouse: every Payment writes its row, every New-Order reads it — the hot spot of
/// §7.3.2 ("each Payment TXN updates its corresponding warehouse entry and each New-Order reads
/// it"). Both protocols still commit and check, but abort and wait a lot.
#[test]
fn one_hot_warehouse_aborts_and_waits_yet_checks_7_3_2() {
    let (lock, lv) = clean_run::<LockPrimary>(1, 2_000_000, 3);
    let s = lock.stats();
    assert!(lv.checks.transactions > 100, "{lv:?}");
    assert!(
        s.lock_waits > 100 && s.lock_dies > 500 && s.aborts > 400,
        "2PL: {s:?}"
    );
    assert!(
        s.aborts > 2 * lv.checks.transactions,
        "more aborts than commits: {s:?}"
    );
    assert!(
        lock.committed.iter().any(|c| c.attempts > 3),
        "a transaction retried several times"
    );
    // Aborted once issuing stopped: given up, not tried again, and the run still drained
    // (clean_run asserts it) with every commit checked.
    assert!(s.given_up > 0, "2PL: {s:?}");
    let (occ, ov) = clean_run::<OccPrimary>(1, 2_000_000, 3);
    let s = occ.stats();
    assert!(s.given_up > 0, "OCC: {s:?}");
    assert!(ov.checks.transactions > 70, "{ov:?}");
    assert!(
        s.validation_failures > 50
            && s.lock_conflicts > 300
            && s.aborts > 2 * ov.checks.transactions,
        "OCC: {s:?}"
    );
}

#[test]
fn the_same_seed_gives_the_same_run() {
    fn run<P: Primary>(seed: u64) -> (Vec<TpccCommitted>, Vec<u64>, u64) {
        let mut net = Net::<P>::new(&workload(2, seed), 2, 1_000_000, seed, |_| {});
        net.run();
        let digests = net
            .procs
            .iter()
            .filter_map(|p| p.shard().map(|s| s.1.digest()))
            .collect();
        (net.committed, digests, net.delivered)
    }
    let a = run::<LockPrimary>(9);
    assert!(a.0.len() > 100);
    assert_eq!(a, run::<LockPrimary>(9));
    assert_ne!(a.0, run::<LockPrimary>(10).0);
    let b = run::<OccPrimary>(9);
    assert!(b.0.len() > 100);
    assert_eq!(b, run::<OccPrimary>(9));
    assert_ne!(b.0, run::<OccPrimary>(10).0);
}

// --- Flaws the checker must catch ----------------------------------------------------------

/// 2PL with a warehouse row's write lock taken shared: concurrent Payments update `W_YTD` in
/// place together, an abort's undo wipes another's update, and results disagree with any
/// serial order. The checker says so.
#[test]
fn a_shared_lock_for_a_write_is_caught() {
    let mut net = Net::<LockPrimary>::new(&workload(1, 4), 2, 600_000, 4, |p| {
        p.flaw_shared_warehouse = true;
    });
    net.run();
    let v = net.verdict();
    let k = kinds(&v);
    assert!(v.violations > 0, "nothing caught");
    assert!(
        k.contains("result") && (k.contains("state-mismatch") || k.contains("consistency")),
        "{k:?}: {:?}",
        v.samples
    );
    assert!(v
        .samples
        .iter()
        .any(|x| matches!(x, check::TpccViolation::Result { field, .. } if field == "w_ytd")));
}

/// OCC whose prepare does not validate versions: a transaction commits what it executed on
/// rows another changed since — a lost update in its results. The replay, the dependency-graph
/// checker and the commit's re-execution say so.
#[test]
fn a_prepare_that_does_not_validate_is_caught() {
    let mut net = Net::<OccPrimary>::new(&workload(1, 5), 2, 600_000, 5, |p| {
        p.flaw_unvalidated = true;
    });
    net.run();
    let v = net.verdict();
    assert!(kinds(&v).contains("result"), "{:?}", v.samples);
    // The history alone shows it too: two transactions read one version and both wrote after
    // it (a lost update), with no order stated or replayed.
    assert!(v.graph.anomalies > 0, "{:?}", v.graph);
    assert!(net.stats().result_mismatches > 0, "{:?}", net.stats());
    // The state itself is right: the commit re-executes on the locked rows.
    assert!(net.replicas_agree());
}

// --- Wait-die --------------------------------------------------------------------------------

#[test]
fn wait_die_the_older_waits_the_younger_dies() {
    let mut t = LockTable::default();
    let w = RowKey::Warehouse(1);
    let (old, mid, young) = ((1, 1), (2, 1), (3, 1));
    let prio = |o: (u64, u32)| (o.0 * 100, o.0);
    // A middle-aged writer holds the row.
    assert_eq!(
        t.request(w, mid, Access::Write, prio(mid)),
        Outcome::Granted
    );
    // Younger: dies. Older: waits.
    assert_eq!(
        t.request(w, young, Access::Read, prio(young)),
        Outcome::Dies
    );
    assert_eq!(t.request(w, old, Access::Read, prio(old)), Outcome::Waits);
    // A reader younger than the queued one dies even though readers share: it would wait
    // behind an older transaction.
    let (oldest, between) = ((0, 9), (1, 2));
    assert_eq!(
        t.request(w, between, Access::Read, (150, 1)),
        Outcome::Dies,
        "not older than every waiter"
    );
    assert_eq!(t.request(w, oldest, Access::Write, (0, 0)), Outcome::Waits);
    // The writer releases: the front waiter (the older reader) is granted; the oldest
    // (a writer) waits behind it, FIFO.
    let mut granted = Vec::new();
    t.release(w, mid, &mut granted);
    assert_eq!(granted, vec![old]);
    granted.clear();
    t.release(w, old, &mut granted);
    assert_eq!(granted, vec![oldest]);
    granted.clear();
    t.release(w, oldest, &mut granted);
    assert!(granted.is_empty() && t.is_empty(), "freed entirely");
}

#[test]
fn readers_share_and_a_cancelled_waiter_lets_the_next_in() {
    let mut t = LockTable::default();
    let d = RowKey::District(1, 1);
    let (a, b, c, x) = ((1, 1), (2, 1), (3, 1), (4, 1));
    assert_eq!(t.request(d, c, Access::Read, (30, 3)), Outcome::Granted);
    assert_eq!(
        t.request(d, x, Access::Read, (40, 4)),
        Outcome::Granted,
        "readers share"
    );
    // An older writer waits for both readers; an even older reader queues behind it.
    assert_eq!(t.request(d, b, Access::Write, (20, 2)), Outcome::Waits);
    assert_eq!(t.request(d, a, Access::Read, (10, 1)), Outcome::Waits);
    // The writer gives up (its attempt aborted): the reader behind it joins the readers.
    let mut granted = Vec::new();
    t.cancel(d, b, &mut granted);
    assert_eq!(granted, vec![a]);
    for o in [a, c, x] {
        granted.clear();
        t.release(d, o, &mut granted);
        assert!(granted.is_empty());
    }
    assert_eq!(t.len(), 0);
}

// --- What the baselines ask of the database ------------------------------------------------

fn some_txns(w: &TpccWorkload, n: usize, seed: u64) -> Vec<TxnInput> {
    let mut gens: Vec<TxnGen> = (1..=w.scale.warehouses)
        .map(|h| TxnGen::new(w.clone(), h, seed ^ u64::from(h) << 20))
        .collect();
    let k = gens.len();
    (0..n).map(|i| gens[i % k].next_txn()).collect()
}

/// Every row an input names, whether or not a shard holds it.
fn named_rows(input: &TxnInput) -> Vec<RowKey> {
    match input {
        TxnInput::NewOrder(t) => [RowKey::Warehouse(t.w_id), RowKey::District(t.w_id, t.d_id)]
            .into_iter()
            .chain(t.lines.iter().map(|l| RowKey::Stock(l.supply_w_id, l.i_id)))
            .collect(),
        TxnInput::Payment(t) => vec![
            RowKey::Warehouse(t.w_id),
            RowKey::District(t.w_id, t.d_id),
            RowKey::District(t.c_w_id, t.c_d_id),
        ],
    }
}

#[test]
fn an_undone_part_leaves_its_rows_as_they_were() {
    let w = TpccWorkload {
        rollback_share: 0.2,
        ..workload(4, 6)
    };
    let layout = TpccLayout::new(3, 1);
    for s in 0..3 {
        let mut shard = Shard::populate(&w.scale, w.seed, &layout, s);
        for (i, t) in some_txns(&w, 400, u64::from(s)).iter().enumerate() {
            let rows = named_rows(t);
            let row_digests =
                |shard: &Shard| -> Vec<u64> { rows.iter().map(|&r| shard.digest_row(r)).collect() };
            let before = row_digests(&shard);
            let whole = (i % 100 == 0).then(|| shard.digest());
            let (r, undo) = shard.execute_undoable(t);
            let writes = shard.access(t).iter().any(|a| a.1 == Access::Write);
            assert_eq!(undo.is_empty(), !writes, "txn {i}: undo for what it writes");
            shard.undo(undo);
            assert_eq!(row_digests(&shard), before, "txn {i} shard {s}: undone");
            if let Some(d) = whole {
                assert_eq!(shard.digest(), d, "txn {i} shard {s}: undone");
            }
            // Then for real, so that the state moves on: the same execution.
            assert_eq!(shard.execute(t), r, "txn {i} shard {s}");
        }
    }
}

#[test]
fn a_part_changes_only_the_rows_its_access_set_writes() {
    let w = TpccWorkload {
        rollback_share: 0.2,
        ..workload(4, 7)
    };
    let layout = TpccLayout::new(3, 1);
    let mut shard = Shard::populate(&w.scale, w.seed, &layout, 1);
    for (i, t) in some_txns(&w, 1500, 3).iter().enumerate() {
        let access = shard.access(t);
        assert!(access.len() <= ROWS_MAX);
        assert!(
            access.windows(2).all(|p| p[0].0 < p[1].0),
            "ascending, once each"
        );
        assert!(access.iter().all(|a| shard.holds(a.0)));
        let rows = named_rows(t);
        let before: Vec<u64> = rows.iter().map(|&r| shard.digest_row(r)).collect();
        shard.execute(t);
        for (r, b) in rows.iter().zip(before) {
            let written = access.contains(&(*r, Access::Write));
            if !written {
                assert_eq!(
                    shard.digest_row(*r),
                    b,
                    "txn {i}: {r:?} changed, not written"
                );
            }
        }
    }
}

// --- Messages --------------------------------------------------------------------------------

fn msg() -> impl Strategy<Value = Msg> {
    let versions = || proptest::collection::vec(any::<u64>(), 0..=ROWS_MAX);
    prop_oneof![
        (any::<u64>(), input()).prop_map(|(prio_ns, input)| Msg::Lock { prio_ns, input }),
        input().prop_map(|input| Msg::Execute { input }),
        (result(), versions()).prop_map(|(result, versions)| Msg::Executed { result, versions }),
        (input(), versions()).prop_map(|(input, versions)| Msg::Prepare { input, versions }),
        (any::<u64>(), any::<bool>(), proptest::option::of(result()))
            .prop_map(|(stamp, yes, result)| Msg::Vote { stamp, yes, result }),
        any::<u64>().prop_map(|key| Msg::Commit { key }),
        proptest::option::of(result()).prop_map(|result| Msg::CommitAck { result }),
        Just(Msg::Abort),
        input().prop_map(|input| Msg::Replicate { input }),
        Just(Msg::Replicated),
        Just(Msg::Apply),
        Just(Msg::Discard),
    ]
}

proptest! {
    #[test]
    fn messages_round_trip(txn in any::<u64>(), attempt in any::<u32>(), m in msg()) {
        let b = encode((txn, attempt), &m);
        prop_assert!(b.len() <= MSG_LEN_MAX);
        prop_assert_eq!(decode(&b), Some(((txn, attempt), m)));
        // Neither TPC-C on 1Pipe's codec nor the baselines' mistakes the other's messages.
        prop_assert_eq!(codec::decode_request(&b), None);
        prop_assert_eq!(codec::decode_reply(&b), None);
    }

    #[test]
    fn truncated_or_extended_messages_are_refused(
        m in msg(),
        cut in 1usize..60,
        extra in any::<u8>(),
    ) {
        let b = encode((7, 1), &m);
        let c = cut.min(b.len());
        prop_assert_eq!(decode(&b[..b.len() - c]), None);
        let mut longer = b.to_vec();
        longer.push(extra);
        prop_assert_eq!(decode(&longer), None);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_a_header_never_panic(
        kind in 20u8..=33,
        bytes in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut b = vec![kind];
        b.extend_from_slice(&[0; 12]);
        b.extend_from_slice(&bytes);
        let _ = decode(&b);
    }

    #[test]
    fn tpcc_requests_and_replies_are_not_baseline_messages(
        txn in any::<u64>(),
        i in input(),
        r in result(),
    ) {
        prop_assert_eq!(decode(&codec::encode_request(txn, &i)), None);
        prop_assert_eq!(decode(&codec::encode_reply(txn, 1, 2, &r)), None);
    }
}

/// A message allocates a New-Order input's lines (at most [`LINES_MAX`], the count checked
/// first), or a New-Order part's stock lines (as many), and its versions: at most
/// [`ROWS_MAX`], collected one by one into a `Vec` that doubles from 4 — while it moves, its old
/// block too. Never both lines and stock lines.
const TWOPC_BOUND: Bound = {
    let lines = LINES_MAX * size_of::<OrderLineInput>();
    let versions = ROWS_MAX.next_power_of_two() * 8 * 3 / 2;
    Bound::constant(lines + versions)
};

#[test]
fn twopc_decode_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder(
        "tpcc::twopc::decode",
        TWOPC_BOUND,
        |rng| {
            let owner = (rng.interesting(), rng.u32());
            let m = fuzz::draw(rng, msg());
            let b = encode(owner, &m).to_vec();
            ((owner, m), b)
        },
        decode,
        |bytes, got, valid| match (got, valid) {
            (got, Some(want)) => ensure(got.as_ref() == Some(want), || "no round trip".into()),
            (Some((owner, m)), None) => ensure(encode(*owner, m) == bytes, || {
                "does not re-encode to its bytes".into()
            }),
            (None, None) => Ok(()),
        },
    );
}

#[test]
fn lying_counts_and_booleans_are_refused() {
    let m = Msg::Vote {
        stamp: 5,
        yes: true,
        result: None,
    };
    let mut b = encode((1, 1), &m).to_vec();
    // Header 13, stamp 8: the yes byte at 21, the presence byte last.
    b[21] = 2;
    assert_eq!(decode(&b), None);
    let mut b = encode((1, 1), &m).to_vec();
    *b.last_mut().unwrap() = 1;
    assert_eq!(decode(&b), None, "a result announced and missing");
    let p = Msg::Executed {
        result: PartResult::Payment(PaymentPart::default()),
        versions: vec![],
    };
    let mut b = encode((1, 1), &p).to_vec();
    *b.last_mut().unwrap() = ROWS_MAX as u8 + 1;
    b.resize(b.len() + 8 * (ROWS_MAX + 1), 0);
    assert_eq!(decode(&b), None, "more versions than a part has rows");
}

// --- Garbage ---------------------------------------------------------------------------------

fn deliver<P: Primary>(p: &mut TwoPcProcess<P>, src: u32, payload: &[u8]) -> Vec<(ProcId, Msg)> {
    let input = AppInput::Deliver {
        src: ProcId(src),
        ts: Timestamp::new(100),
        reliable: false,
        payload,
    };
    p.handle(Instant(1), input);
    std::iter::from_fn(|| p.poll_send())
        .flat_map(|s| s.parts)
        .map(|(d, b)| (d, decode(&b).expect("well-formed").1))
        .collect()
}

/// A lone process of the 2PL baseline (window 0: it initiates nothing).
fn lone<P: Primary>(me: u32) -> TwoPcProcess<P> {
    let w = workload(4, 1);
    let cfg = TpccConfig::new(ProcId(me), PROCS, w.clone(), 0);
    TwoPcProcess::<P>::new(cfg, TxnGen::new(w, 1, 1))
}

#[test]
fn garbage_is_dropped_and_counted() {
    let layout = TpccLayout::for_procs(PROCS, 3);
    let w = workload(4, 1);
    let mut g = TxnGen::new(w.clone(), 1, 2);
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
        TxnInput::Payment(p) => p.w_id = 99,
    }
    let of5 = txn_id(ProcId(5), 1);
    let lock = |input: &TxnInput| {
        encode(
            (of5, 1),
            &Msg::Lock {
                prio_ns: 1,
                input: input.clone(),
            },
        )
    };
    let mut p = lone::<LockPrimary>(0);
    let cases: Vec<(u32, Bytes)> = vec![
        (5, Bytes::new()),
        (5, Bytes::from_static(&[LOCK_TAG, 1, 2])),
        // Another initiator's transaction.
        (6, lock(&mine)),
        (5, lock(&invalid)),
        (5, lock(&elsewhere)),
        // OCC's execution, to a 2PL primary.
        (
            5,
            encode(
                (of5, 1),
                &Msg::Execute {
                    input: mine.clone(),
                },
            ),
        ),
        // A backup's message, to a primary; a commit of nothing.
        (4, encode((of5, 1), &Msg::Apply)),
        (5, encode((of5, 1), &Msg::Commit { key: 9 })),
    ];
    for (src, b) in &cases {
        assert!(deliver(&mut p, *src, b).is_empty(), "{b:?}");
    }
    assert_eq!(p.stats().malformed, cases.len() as u64);
    // An answer to a transaction this process does not have: stale.
    let vote = Msg::Vote {
        stamp: 1,
        yes: true,
        result: None,
    };
    deliver(&mut p, 1, &encode((txn_id(ProcId(0), 3), 1), &vote));
    assert_eq!(p.stats().stale_replies, 1);
    // The well-formed request is served: replicated to the backups (4, 8), or voted at once.
    let out = deliver(&mut p, 5, &lock(&mine));
    assert!(!out.is_empty());
    assert!(out.iter().all(|(d, m)| matches!(
        (d.0, m),
        (4 | 8, Msg::Replicate { .. }) | (5, Msg::Vote { yes: true, .. })
    )));
    assert_eq!(p.open().1, 1);
    // A backup takes only its primary's messages.
    let mut b = lone::<OccPrimary>(4);
    let rep = encode((of5, 1), &Msg::Replicate { input: mine });
    assert!(deliver(&mut b, 1, &rep).is_empty());
    assert!(deliver(&mut b, 0, &encode((of5, 1), &Msg::Discard)).is_empty());
    assert_eq!(b.stats().malformed, 2);
    let out = deliver(&mut b, 0, &rep);
    assert_eq!(out, vec![(ProcId(0), Msg::Replicated)]);
    assert_eq!(b.open(), (0, 1));
    deliver(&mut b, 0, &encode((of5, 1), &Msg::Apply));
    assert_eq!((b.open(), b.stats().parts_applied), ((0, 0), 1));
}

/// The kind byte of a 2PL lock request.
const LOCK_TAG: u8 = 21;

#[test]
fn occ_prepare_votes_no_on_a_changed_version_or_a_locked_row() {
    let layout = TpccLayout::for_procs(PROCS, 3);
    let w = workload(4, 1);
    let mut g = TxnGen::new(w, 1, 3);
    // A payment at warehouse 1: it writes the warehouse row, wherever that lives.
    let pay = (0..)
        .map(|_| g.next_txn())
        .find(|t| matches!(t, TxnInput::Payment(p) if p.w_id == 1))
        .unwrap();
    let home = layout.shard_of(RowKey::Warehouse(1));
    let mut p = lone::<OccPrimary>(home);
    let (a, b) = (txn_id(ProcId(5), 1), txn_id(ProcId(6), 1));
    let exec = Msg::Execute { input: pay.clone() };
    let versions = |out: &[(ProcId, Msg)]| match &out[0].1 {
        Msg::Executed { versions, .. } => versions.clone(),
        m => panic!("{m:?}"),
    };
    let va = versions(&deliver(&mut p, 5, &encode((a, 1), &exec)));
    let vb = versions(&deliver(&mut p, 6, &encode((b, 1), &exec)));
    assert_eq!(va, vb);
    assert_eq!(p.open(), (0, 0), "execution locks nothing");
    let prepare = |versions: Vec<u64>| Msg::Prepare {
        input: pay.clone(),
        versions,
    };
    // A prepares: locked and validated, replicated to the two backups.
    let out = deliver(&mut p, 5, &encode((a, 1), &prepare(va.clone())));
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|(_, m)| matches!(m, Msg::Replicate { .. })));
    // B finds the rows locked: no, without waiting.
    let out = deliver(&mut p, 6, &encode((b, 1), &prepare(vb.clone())));
    assert!(matches!(
        out[..],
        [(ProcId(6), Msg::Vote { yes: false, .. })]
    ));
    assert_eq!(p.stats().lock_conflicts, 1);
    // A's backups acknowledge; A votes yes, commits: versions move.
    let backups: Vec<u32> = layout.replicas_of(home).skip(1).map(|q| q.0).collect();
    for &q in &backups {
        let out = deliver(&mut p, q, &encode((a, 1), &Msg::Replicated));
        if q == backups[1] {
            assert!(matches!(
                out[..],
                [(ProcId(5), Msg::Vote { yes: true, .. })]
            ));
        }
    }
    let out = deliver(&mut p, 5, &encode((a, 1), &Msg::Commit { key: 7 }));
    assert_eq!(out.len(), 3, "two applies and the acknowledgement");
    assert_eq!(p.open(), (0, 0));
    // B tries again with what it executed before A committed: a version changed.
    let out = deliver(&mut p, 6, &encode((b, 2), &prepare(vb)));
    assert!(matches!(
        out[..],
        [(ProcId(6), Msg::Vote { yes: false, .. })]
    ));
    assert_eq!(p.stats().validation_failures, 1);
    assert_eq!(p.open(), (0, 0), "a no vote keeps nothing");
}

#[test]
fn a_commit_raises_the_primarys_stamps_above_its_key() {
    // The Lamport rule of the serialization order: a step after a commit at key k is stamped
    // above k, even if the message carrying it was taken in earlier by the clock.
    let layout = TpccLayout::for_procs(PROCS, 3);
    let mut g = TxnGen::new(workload(4, 1), 1, 4);
    let (t, s) = (0..)
        .map(|_| g.next_txn())
        .find_map(|t| match &t {
            TxnInput::NewOrder(o) if o.lines.iter().all(|l| l.i_id <= 2000) => {
                let s = layout.shard_of(RowKey::District(o.w_id, o.d_id));
                Some((t, s))
            }
            _ => None,
        })
        .unwrap();
    let mut p = lone::<LockPrimary>(s);
    let (a, b) = ((txn_id(ProcId(5), 1), 1), (txn_id(ProcId(6), 1), 1));
    let lock = |prio_ns| Msg::Lock {
        prio_ns,
        input: t.clone(),
    };
    let vote_of = |out: &[(ProcId, Msg)]| {
        out.iter().find_map(|(_, m)| match m {
            Msg::Vote {
                stamp, yes: true, ..
            } => Some(*stamp),
            _ => None,
        })
    };
    let ack_all = |p: &mut TpccLockProcess, o: (u64, u32), out: Vec<(ProcId, Msg)>| {
        let mut stamp = vote_of(&out);
        for (d, m) in out {
            if matches!(m, Msg::Replicate { .. }) {
                stamp = stamp.or(vote_of(&deliver(p, d.0, &encode(o, &Msg::Replicated))));
            }
        }
        stamp.expect("a yes vote")
    };
    let out = deliver(&mut p, 5, &encode(a, &lock(10)));
    let sa = ack_all(&mut p, a, out);
    // B is younger and conflicts (the same district): it dies at once.
    let out = deliver(&mut p, 6, &encode(b, &lock(20)));
    assert!(matches!(out[..], [(_, Msg::Vote { yes: false, .. })]));
    assert_eq!(p.stats().lock_dies, 1);
    deliver(&mut p, 5, &encode(a, &Msg::Commit { key: 1_000_000 }));
    let b2 = (b.0, 2);
    let out = deliver(&mut p, 6, &encode(b2, &lock(20)));
    let sb = ack_all(&mut p, b2, out);
    assert!(sa < 1_000_000 && sb > 1_000_000, "{sa} {sb}");
}
