//! The FaRM-like store on a small network model: every message arrives after a random delay, in
//! order between each pair of processes (links are FIFO); a server's clock is the true time.

use super::*;
use crate::kv::check::KvChecker;
use crate::kv::workload::{KeyDist, KvWorkload};
use onepipe_proto::rng::Rng;
use onepipe_proto::Timestamp;
use onepipe_testalloc::fuzz::{self, ensure, Bound};
use proptest::prelude::*;
use std::collections::BinaryHeap;

/// A message on its way: (arrival, seq, src, dst, payload).
type InFlight = (u64, u64, u32, u32, Vec<u8>);

struct Net {
    procs: Vec<FarmProcess>,
    /// A min-heap.
    due: BinaryHeap<std::cmp::Reverse<InFlight>>,
    /// Per (src, dst), the last arrival: a later message does not overtake it.
    last: HashMap<(u32, u32), u64>,
    timers: BTreeSet<(u64, u32)>,
    seq: u64,
    rng: Rng,
    checker: KvChecker,
}

impl Net {
    fn new(n: u32, w: &KvWorkload, window: u32, seed: u64) -> Net {
        let zipf = w.zipf();
        let procs = (0..n)
            .map(|p| {
                let mut cfg = KvConfig::new(ProcId(p), n, w.clone(), window);
                cfg.stop = Instant(2_000_000);
                FarmProcess::new(cfg, TxnGen::new(w.clone(), zipf, seed ^ u64::from(p) << 32))
            })
            .collect();
        Net {
            procs,
            due: BinaryHeap::new(),
            last: HashMap::new(),
            timers: BTreeSet::new(),
            seq: 0,
            rng: Rng::new(seed),
            checker: KvChecker::new(),
        }
    }

    fn turn(&mut self, now: u64, p: u32, input: AppInput<'_>) {
        let app = &mut self.procs[p as usize];
        app.handle(Instant(now), input);
        let mut sends = Vec::new();
        while let Some(s) = app.poll_send() {
            sends.extend(s.parts);
        }
        while let Some(c) = app.poll_committed() {
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
            self.due
                .push(std::cmp::Reverse((at, self.seq, p, dst.0, b.to_vec())));
        }
    }

    /// Runs until every transaction is done; the time it ended.
    fn run(&mut self) -> u64 {
        for p in 0..self.procs.len() as u32 {
            self.turn(0, p, AppInput::Timeout);
        }
        let mut now = 0;
        loop {
            let next_msg = self.due.peek().map(|r| r.0 .0);
            let next_timer = self.timers.first().map(|t| t.0);
            match (next_msg, next_timer) {
                (Some(m), t) if t.is_none_or(|t| m <= t) => {
                    let std::cmp::Reverse((at, _, src, dst, b)) = self.due.pop().expect("peeked");
                    now = at;
                    let input = AppInput::Deliver {
                        src: ProcId(src),
                        ts: Timestamp::new(at),
                        reliable: false,
                        payload: &b,
                    };
                    self.turn(at, dst, input);
                }
                (Some(_), None) => unreachable!("a message is due when no timer is"),
                (_, Some(t)) => {
                    let (_, p) = self.timers.pop_first().expect("peeked");
                    now = t;
                    self.turn(t, p, AppInput::Timeout);
                }
                (None, None) => return now,
            }
            assert!(now < 100_000_000, "the run does not end");
        }
    }

    fn stats(&self) -> KvStats {
        let mut s = KvStats::default();
        self.procs.iter().for_each(|p| s += p.stats());
        s
    }
}

fn workload(keys: u64, ro: f64, write: f64) -> KvWorkload {
    KvWorkload {
        keys,
        dist: KeyDist::Uniform,
        ops_per_txn: 3,
        read_only_share: Some(ro),
        write_share: write,
        value_len_max: 64,
    }
}

#[test]
fn uncontended_transactions_commit_and_check() {
    let mut net = Net::new(6, &workload(100_000, 0.5, 0.5), 4, 1);
    net.run();
    let s = net.stats();
    let v = net.checker.verdict(0);
    assert_eq!(v.violations, 0, "{:?}", v.samples);
    assert!(
        s.committed_ro > 300 && s.committed_wo > 100 && s.committed_rw > 100,
        "{s:?}"
    );
    assert!(net.procs.iter().all(TxnApp::idle));
}

/// Ten keys, many writers: aborts and retries, yet every committed transaction checks.
#[test]
fn contended_transactions_abort_retry_and_check() {
    for seed in 0..4 {
        let mut net = Net::new(6, &workload(10, 0.5, 0.5), 4, seed);
        net.run();
        let s = net.stats();
        let v = net.checker.verdict(0);
        assert_eq!(v.violations, 0, "seed {seed}: {:?}", v.samples);
        assert!(s.aborts > 50, "seed {seed}: {s:?}");
        assert!(
            s.committed_ro + s.committed_wo + s.committed_rw > 200,
            "seed {seed}: {s:?}"
        );
        assert!(
            net.procs.iter().all(|p| p.server.staged.is_empty()),
            "seed {seed}: locks left"
        );
    }
}

#[test]
fn a_read_of_a_locked_key_aborts_the_attempt() {
    let mut s = Server::default();
    let mut stats = KvStats::default();
    let v = Value { writer: 9, len: 1 };
    let lock = s.handle(10, (1, 1), Msg::Lock(vec![(5, ANY_VERSION, v)]), &mut stats);
    assert!(matches!(lock, Some(Msg::Reply { ok: true, .. })));
    let Some(Msg::ReadReply { entries, .. }) = s.handle(11, (2, 1), Msg::Read(vec![5]), &mut stats)
    else {
        panic!("a read is answered")
    };
    assert!(entries[0].locked);
    // Another attempt cannot lock it, nor validate it.
    let other = s.handle(12, (2, 1), Msg::Lock(vec![(5, ANY_VERSION, v)]), &mut stats);
    assert!(matches!(other, Some(Msg::Reply { ok: false, .. })));
    let val = s.handle(13, (2, 1), Msg::Validate(vec![(5, 0)]), &mut stats);
    assert!(matches!(val, Some(Msg::Reply { ok: false, .. })));
    // Commit applies and unlocks; the version moves.
    s.handle(14, (1, 1), Msg::Commit, &mut stats);
    let e = s.entry(5);
    assert_eq!((e.value, e.version, e.lock), (Some(v), 1, None));
    // Stamps strictly increase even when the clock does not.
    assert!(s.stamp(3) > 14);
}

fn msg() -> impl Strategy<Value = Msg> {
    let value = (any::<u64>(), 0u32..100).prop_map(|(writer, len)| Value { writer, len });
    let entry = (
        any::<u64>(),
        proptest::option::of(value.clone()),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|(key, value, version, locked)| ReadEntry {
            key,
            value,
            version,
            locked,
        });
    prop_oneof![
        proptest::collection::vec(any::<u64>(), 0..8).prop_map(Msg::Read),
        (any::<u64>(), proptest::collection::vec(entry, 0..8))
            .prop_map(|(stamp, entries)| Msg::ReadReply { stamp, entries }),
        proptest::collection::vec((any::<u64>(), any::<u64>(), value), 0..8).prop_map(Msg::Lock),
        proptest::collection::vec((any::<u64>(), any::<u64>()), 0..8).prop_map(Msg::Validate),
        (
            prop_oneof![Just(LOCK_REPLY), Just(VALIDATE_REPLY), Just(COMMIT_REPLY)],
            any::<u64>(),
            any::<bool>()
        )
            .prop_map(|(kind, stamp, ok)| Msg::Reply { kind, stamp, ok }),
        Just(Msg::Commit),
        Just(Msg::Abort),
    ]
}

/// A message allocates one list: a read's keys or a validate's (key, version) pairs collected
/// one by one into a `Vec` (8 bytes per 8 on the wire, 16 per 16; at most twice the items
/// while growing, and the old block while it moves: 3 bytes per input byte, 4 items' worth at
/// least), or a read reply's entries or a lock's writes allocated at once for a count checked
/// at 18 and 28 bytes an item.
fn farm_bound() -> Bound {
    let per_byte = [
        3,
        size_of::<ReadEntry>().div_ceil(18),
        size_of::<(Key, u64, Value)>().div_ceil(28),
    ];
    let per_byte = per_byte.into_iter().max().expect("three");
    Bound::new(per_byte, 1, 4 * 16)
}

#[test]
fn farm_decode_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder(
        "kv::farm::decode",
        farm_bound(),
        |rng| {
            let owner = (rng.interesting(), rng.u32());
            let m = fuzz::draw(rng, msg());
            let b = encode(owner, &m).to_vec();
            ((owner, m), b)
        },
        decode,
        // The values' bytes are opaque (a decoded message holds their lengths only), so a
        // decoded one re-encodes to its length and decodes to itself.
        |bytes, got, valid| match (got, valid) {
            (got, Some(want)) => ensure(got.as_ref() == Some(want), || "no round trip".into()),
            (Some((owner, m)), None) => {
                let again = encode(*owner, m);
                ensure(
                    again.len() == bytes.len() && decode(&again).as_ref() == got.as_ref(),
                    || "does not re-encode to itself".into(),
                )
            }
            (None, None) => Ok(()),
        },
    );
}

proptest! {
    #[test]
    fn messages_round_trip(txn in any::<u64>(), attempt in any::<u32>(), m in msg()) {
        let b = encode((txn, attempt), &m);
        prop_assert_eq!(decode(&b), Some(((txn, attempt), m)));
        let mut longer = b.to_vec();
        longer.push(0);
        prop_assert_eq!(decode(&longer), None);
        prop_assert_eq!(decode(&b[..b.len() - 1]), None);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode(&bytes);
    }
}
