//! [`TpccProcess`]: TPC-C on 1Pipe (§7.3.2). Every process may be a replica of one shard
//! ([`super::db::placement`]) and is an initiator with a closed loop of `window` transactions in
//! flight.
//!
//! * **Initiator.** A transaction is one reliable scattering (§5.1) of one request to every live
//!   replica of every shard it touches, plus a copy to the initiator itself (the receipt: see
//!   below). The transaction commits when every live replica addressed has answered, replicas of
//!   one shard alike (if not, [`TpccStats::result_mismatches`] counts it: replicas diverged). Its
//!   place in the serialization order is the timestamp [`AppInput::Sent`] reports.
//! * **Replica.** Applies each delivered request's part to its [`Shard`] in delivery order —
//!   1Pipe delivers reliable messages in (timestamp, sender) order, the same at every replica —
//!   and answers the initiator by best effort. A lost reply is reported (`SendFailed`) and sent
//!   again; a refused one is deferred and sent again; replies are kept for
//!   [`TpccConfig::reply_keep_ns`], so memory stays bounded.
//!
//! **Failures** (§5.2). On `ProcFailed { proc, ts }` every process records `proc` with its
//! failure timestamp — the replicas of its shard all see the same one, and restricted failure
//! atomicity has delivered them the same messages below it: they agree on what the shard
//! applied. Initiators stop addressing `proc` and stop waiting for its replies; replicas stop
//! answering it. A scattering the host refused (no timestamp: delivered nowhere) is sent again to
//! the live replicas after [`TpccConfig::retry_ns`]. A stamped scattering may still be recalled
//! (a failed receiver never acknowledged it: delivered nowhere) and the application is not told;
//! hence the receipt: once the initiator's released commit barrier (`CommitReleased`) has passed
//! the timestamp, every reliable message below it has been delivered to the initiator, so a
//! receipt not delivered by then means the scattering was recalled, and it is sent again. A
//! transaction touching a shard with no live replica fails: counted in [`TpccStats::failed`],
//! not committed (if it was delivered, its parts at the live shards took effect: it is reported
//! by [`TpccApp::unfinished`]).

use super::codec;
use super::db::{Placement, Shard, TpccLayout, REPLICAS_DEFAULT};
use super::gen::{TpccWorkload, TxnGen};
use super::{PartResult, TpccApp, TpccCommitted, TpccStats, TpccTxnKind, TxnInput};
use crate::kv::txn_id;
use crate::{App, AppInput, AppSend};
use bytes::Bytes;
use onepipe_proto::{Instant, ProcId, Timestamp};
use std::collections::{BTreeMap, VecDeque};

/// Tags of replies have this bit; the initiator's are transaction ids.
const REPLY_TAG: u64 = 1 << 63;

/// A TPC-C process's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct TpccConfig {
    /// This process.
    pub me: ProcId,
    /// Shards and replicas.
    pub layout: TpccLayout,
    /// The database and the mix.
    pub workload: TpccWorkload,
    /// Transactions it keeps in flight as an initiator (a closed loop); 0: a pure replica.
    pub window: u32,
    /// When the initiator starts (local time).
    pub start: Instant,
    /// It issues no new transaction from then on (local time).
    pub stop: Instant,
    /// How long a replica keeps a reply it sent, for a loss report to ask it again.
    pub reply_keep_ns: u64,
    /// Before a refused send is tried again (and before issuing again after a transaction
    /// failed for want of a live replica).
    pub retry_ns: u64,
    /// The replica logs every transaction it applies ([`TpccProcess::applied`]): a checker then
    /// places the transactions of an initiator that died before it said what it committed (the
    /// live cluster under `--kill`), and takes the answers a failed initiator never heard (the
    /// simulator).
    pub log_applied: bool,
}

/// A transaction a replica applied ([`TpccConfig::log_applied`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AppliedTxn {
    /// The transaction.
    pub txn: u64,
    /// Its initiator.
    pub client: u32,
    /// Its timestamp (raw).
    pub ts: u64,
    /// Its inputs.
    pub input: TxnInput,
    /// The replica's shard, and what its part answered: the values the history of key
    /// accesses ([`super::history`]) takes for a transaction whose initiator never heard them.
    #[serde(default)]
    pub answer: Option<(u32, super::PartResult)>,
}

impl TpccConfig {
    /// Process `me` of `procs`, running `workload` from 0 on with `window` transactions in
    /// flight: `procs / 3` shards of 3 replicas ([`TpccLayout::for_procs`]).
    pub fn new(me: ProcId, procs: u32, workload: TpccWorkload, window: u32) -> TpccConfig {
        TpccConfig {
            me,
            layout: TpccLayout::for_procs(procs, REPLICAS_DEFAULT),
            workload,
            window,
            start: Instant(0),
            stop: Instant(u64::MAX),
            reply_keep_ns: 50_000_000,
            retry_ns: 20_000,
            log_applied: false,
        }
    }

    /// The home warehouse of its terminal: processes take the warehouses in turn.
    pub fn home_warehouse(&self) -> u32 {
        self.me.0 % self.workload.scale.warehouses + 1
    }
}

/// Where an initiator's transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Handed to the host, no timestamp yet.
    Sending,
    /// Refused by the host: to be sent again from this instant.
    Retry {
        /// When.
        at: Instant,
    },
    /// Stamped `ts`, the `seq`-th scattering this process's host stamped; `receipt`: its copy
    /// to the initiator was delivered (so every live replica is delivered its part too).
    Stamped {
        /// Its timestamp.
        ts: Timestamp,
        /// Its place among this process's stamped scatterings.
        seq: u64,
        /// Whether the initiator's copy came.
        receipt: bool,
    },
}

/// An initiator's transaction in flight.
#[derive(Debug)]
struct Inflight {
    input: TxnInput,
    phase: Phase,
    /// The replicas addressed by the current attempt that have not answered (and are alive).
    waiting: Vec<ProcId>,
    /// The answer of each shard heard from so far.
    results: BTreeMap<u32, PartResult>,
    /// Replicas of each shard that answered the current attempt.
    replied: BTreeMap<u32, u32>,
    /// A shard it touches has no live replica: it cannot commit.
    doomed: bool,
    call: Instant,
    attempts: u32,
}

/// A replica: its shard, and the replies it keeps.
#[derive(Debug)]
struct Replica {
    id: u32,
    shard: Shard,
    /// The (timestamp, sender) of the last request applied.
    last: Option<(Timestamp, ProcId)>,
    /// Replies sent, by tag: (sent at, addressee, bytes, timestamp once known).
    replies: BTreeMap<u64, (Instant, ProcId, Bytes, Option<Timestamp>)>,
    /// Reply tags by (timestamp, addressee), for a loss report (which names no more).
    reply_by_ts: BTreeMap<(Timestamp, ProcId), Vec<u64>>,
    /// Replies the host refused, to send again from the instant given.
    deferred: VecDeque<(Instant, ProcId, Bytes)>,
    next_reply: u64,
    /// With `log_applied`: what it applied, in order.
    applied: Vec<AppliedTxn>,
}

/// A process of TPC-C on 1Pipe: replica and initiator (§7.3.2).
#[derive(Debug)]
pub struct TpccProcess {
    cfg: TpccConfig,
    gen: TxnGen,
    replica: Option<Replica>,
    inflight: BTreeMap<u64, Inflight>,
    /// Failed processes and their failure timestamps (§5.2).
    failed: BTreeMap<ProcId, Timestamp>,
    /// Delivered transactions that could not commit (a shard lost every replica): their live
    /// parts took effect.
    abandoned: Vec<TpccCommitted>,
    seq: u64,
    /// Scatterings stamped so far (the tie-break among equal timestamps).
    stamped: u64,
    started: bool,
    /// No new transaction before this instant (one failed for want of a live replica).
    pause_until: Option<Instant>,
    out: VecDeque<AppSend>,
    committed: VecDeque<TpccCommitted>,
    now: Instant,
    stats: TpccStats,
}

impl TpccProcess {
    /// A process; `gen` draws its transactions (its home warehouse: see
    /// [`TpccConfig::home_warehouse`]). A replica loads its shard from the workload's seed.
    pub fn new(cfg: TpccConfig, gen: TxnGen) -> TpccProcess {
        let replica = match cfg.layout.placement(cfg.me) {
            Placement::Replica { shard, .. } => Some(Replica {
                id: shard,
                shard: Shard::populate(&cfg.workload.scale, cfg.workload.seed, &cfg.layout, shard),
                last: None,
                replies: BTreeMap::new(),
                reply_by_ts: BTreeMap::new(),
                deferred: VecDeque::new(),
                next_reply: 0,
                applied: Vec::new(),
            }),
            Placement::Initiator => None,
        };
        assert!(
            replica.is_some() || cfg.window > 0,
            "a process that neither keeps a shard nor initiates"
        );
        TpccProcess {
            cfg,
            gen,
            replica,
            inflight: BTreeMap::new(),
            failed: BTreeMap::new(),
            abandoned: Vec::new(),
            seq: 0,
            stamped: 0,
            started: false,
            pause_until: None,
            out: VecDeque::new(),
            committed: VecDeque::new(),
            now: Instant(0),
            stats: TpccStats::default(),
        }
    }

    /// What its replica applied, in order (with [`TpccConfig::log_applied`]).
    pub fn applied(&self) -> &[AppliedTxn] {
        self.replica.as_ref().map_or(&[], |r| &r.applied)
    }

    /// Its settings.
    pub fn config(&self) -> &TpccConfig {
        &self.cfg
    }

    /// Transactions in flight.
    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    /// The failed processes it was told of, with their failure timestamps.
    pub fn failed(&self) -> &BTreeMap<ProcId, Timestamp> {
        &self.failed
    }

    /// Replies its replica keeps for loss reports (bounded by [`TpccConfig::reply_keep_ns`]).
    pub fn replies_kept(&self) -> usize {
        self.replica.as_ref().map_or(0, |r| r.replies.len())
    }

    fn is_failed(&self, p: ProcId) -> bool {
        self.failed.contains_key(&p)
    }

    /// What holds after every input (checked in debug builds; O(transactions in flight)).
    fn invariants(&self) {
        assert!(self.inflight.len() <= self.cfg.window as usize);
        for (txn, t) in &self.inflight {
            assert!(t.attempts >= 1, "{txn:#x} was sent");
            assert!(
                t.waiting.iter().all(|p| !self.is_failed(*p)),
                "{txn:#x} waits for a failed process"
            );
            assert!(
                t.results.keys().all(|s| *s < self.cfg.layout.shards),
                "{txn:#x}"
            );
            if let Phase::Stamped { seq, .. } = t.phase {
                assert!(seq >= 1 && seq <= self.stamped, "{txn:#x}");
            }
        }
        if let Some(r) = &self.replica {
            assert!(r.deferred.iter().all(|d| !self.is_failed(d.1)));
            assert!(r.replies.len() as u64 <= r.next_reply);
        }
    }

    // --- Initiator -------------------------------------------------------------------------

    fn issuing(&self) -> bool {
        self.started
            && self.now < self.cfg.stop
            && self.pause_until.is_none_or(|p| self.now >= p)
            && !self.is_failed(self.cfg.me)
    }

    fn fill_window(&mut self) {
        // At most a window of new transactions per input, even if each fails at once.
        for _ in 0..self.cfg.window {
            if !self.issuing() || self.inflight.len() as u32 >= self.cfg.window {
                return;
            }
            let txn = txn_id(self.cfg.me, self.seq);
            self.seq += 1;
            let input = self.gen.next_txn();
            debug_assert!(input.is_valid(&self.cfg.workload.scale), "{input:?}");
            self.inflight.insert(
                txn,
                Inflight {
                    input,
                    phase: Phase::Sending,
                    waiting: Vec::new(),
                    results: BTreeMap::new(),
                    replied: BTreeMap::new(),
                    doomed: false,
                    call: self.now,
                    attempts: 0,
                },
            );
            self.send_txn(txn);
        }
    }

    /// Sends transaction `txn` (again): one reliable scattering of its request to every live
    /// replica of every shard it touches, and to this process (the receipt).
    fn send_txn(&mut self, txn: u64) {
        let layout = self.cfg.layout;
        let me = self.cfg.me;
        let Some(t) = self.inflight.get(&txn) else {
            return;
        };
        let mut dsts = Vec::new();
        for s in layout.shards_of(&t.input) {
            let live: Vec<ProcId> = layout
                .replicas_of(s)
                .filter(|p| !self.failed.contains_key(p))
                .collect();
            if live.is_empty() {
                // Never sent: nothing of it took effect anywhere.
                self.inflight.remove(&txn);
                self.stats.failed += 1;
                self.pause_until = Some(self.now + self.cfg.retry_ns);
                return;
            }
            dsts.extend(live);
        }
        let bytes = codec::encode_request(txn, &t.input);
        let Some(t) = self.inflight.get_mut(&txn) else {
            return;
        };
        t.waiting = dsts.clone();
        t.results.clear();
        t.replied.clear();
        t.attempts += 1;
        t.phase = Phase::Sending;
        if !dsts.contains(&me) {
            dsts.push(me);
        }
        dsts.sort_unstable();
        self.out.push_back(AppSend {
            tag: txn,
            reliable: true,
            ordered: true,
            parts: dsts.into_iter().map(|d| (d, bytes.clone())).collect(),
        });
    }

    fn on_reply(&mut self, src: ProcId, payload: &[u8]) {
        let Some(r) = codec::decode_reply(payload) else {
            self.stats.malformed += 1;
            return;
        };
        if self.cfg.layout.shard_of_proc(src) != Some(r.shard) {
            self.stats.malformed += 1;
            return;
        }
        let Some(t) = self.inflight.get_mut(&r.txn) else {
            self.stats.stale_replies += 1;
            return;
        };
        let current = matches!(t.phase, Phase::Stamped { ts, .. } if ts.raw() == r.req_ts);
        let Some(i) = t.waiting.iter().position(|&p| p == src).filter(|_| current) else {
            self.stats.stale_replies += 1;
            return;
        };
        t.waiting.swap_remove(i);
        *t.replied.entry(r.shard).or_default() += 1;
        match t.results.get(&r.shard) {
            Some(first) if *first != r.result => self.stats.result_mismatches += 1,
            Some(_) => {}
            None => {
                t.results.insert(r.shard, r.result);
            }
        }
        self.settle(r.txn);
    }

    /// This process's copy of its own transaction `txn`, stamped `ts`, was delivered: the
    /// scattering was not recalled, every live replica gets its part.
    fn on_receipt(&mut self, txn: u64, ts: Timestamp) {
        let Some(t) = self.inflight.get_mut(&txn) else {
            return;
        };
        let seq = match t.phase {
            Phase::Stamped { ts: sent, seq, .. } if sent == ts => seq,
            // The receipt came before the host said it stamped the scattering.
            Phase::Sending => {
                self.stamped += 1;
                self.stamped
            }
            Phase::Stamped { .. } | Phase::Retry { .. } => {
                // A receipt of an attempt this process judged recalled and sent again.
                self.stats.late_receipts += 1;
                return;
            }
        };
        t.phase = Phase::Stamped {
            ts,
            seq,
            receipt: true,
        };
        self.settle(txn);
    }

    /// Commits `txn`, or gives it up, if its fate is known.
    fn settle(&mut self, txn: u64) {
        let Some(t) = self.inflight.get(&txn) else {
            return;
        };
        match t.phase {
            Phase::Stamped { receipt: true, .. } if t.doomed => {
                // Delivered, so its parts at live shards took effect; it cannot commit.
                let mut u = self.record(txn, t);
                u.return_ns = u64::MAX;
                self.abandoned.push(u);
                self.inflight.remove(&txn);
                self.stats.failed += 1;
            }
            Phase::Stamped { .. } if !t.doomed && self.answered(t) => {
                let c = self.record(txn, t);
                self.inflight.remove(&txn);
                self.commit(c);
            }
            Phase::Retry { .. } if t.doomed => {
                // Never delivered anywhere.
                self.inflight.remove(&txn);
                self.stats.failed += 1;
            }
            _ => {}
        }
    }

    /// Every shard the transaction touches has answered from a majority of its replicas (all
    /// its live ones, if fewer are left). Replicas of a shard apply the same messages in the same
    /// order, so a majority's answer is the shard's; the client of Eris (the paper's \[51\])
    /// waits for no more, and a reply lost on the way does not hold the transaction up (the
    /// replica sends it again when it hears of the loss, to no avail then: it is a stale reply).
    fn answered(&self, t: &Inflight) -> bool {
        let majority = self.cfg.layout.replicas / 2 + 1;
        self.cfg.layout.shards_of(&t.input).into_iter().all(|s| {
            let live = self
                .cfg
                .layout
                .replicas_of(s)
                .filter(|p| !self.failed.contains_key(p))
                .count() as u32;
            t.replied.get(&s).copied().unwrap_or(0) >= live.min(majority)
        })
    }

    /// Stamped transaction `txn` as a record (its results so far, returned now).
    fn record(&self, txn: u64, t: &Inflight) -> TpccCommitted {
        let (key, seq) = match t.phase {
            Phase::Stamped { ts, seq, .. } => (ts.raw(), seq),
            Phase::Sending | Phase::Retry { .. } => unreachable!("a record of a stamped one"),
        };
        TpccCommitted {
            txn,
            client: self.cfg.me.0,
            key,
            seq,
            input: t.input.clone(),
            results: t.results.iter().map(|(&s, r)| (s, r.clone())).collect(),
            call_ns: t.call.as_nanos(),
            return_ns: self.now.as_nanos(),
            attempts: t.attempts,
        }
    }

    fn commit(&mut self, c: TpccCommitted) {
        match c.input.kind() {
            TpccTxnKind::NewOrder => {
                self.stats.committed_new_order += 1;
                let rolled_back = c
                    .results
                    .iter()
                    .any(|(_, r)| matches!(r, PartResult::NewOrder(p) if p.rolled_back));
                if rolled_back {
                    self.stats.rolled_back += 1;
                }
            }
            TpccTxnKind::Payment => self.stats.committed_payment += 1,
        }
        self.committed.push_back(c);
    }

    /// The released commit barrier passed `b`: a stamped transaction below it whose receipt
    /// did not come was recalled (§5.2) — delivered nowhere — and goes again.
    fn on_released(&mut self, b: Timestamp) {
        let recalled: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, t)| matches!(t.phase, Phase::Stamped { ts, receipt: false, .. } if ts < b))
            .map(|(&txn, _)| txn)
            .collect();
        for txn in recalled {
            self.stats.recalled += 1;
            let doomed = self.inflight.get(&txn).is_some_and(|t| t.doomed);
            if doomed {
                self.inflight.remove(&txn);
                self.stats.failed += 1;
            } else {
                self.send_txn(txn);
            }
        }
    }

    fn on_proc_failed(&mut self, proc: ProcId, ts: Timestamp) {
        self.failed.entry(proc).or_insert(ts);
        if proc == self.cfg.me {
            self.on_own_failure(ts);
            return;
        }
        let layout = self.cfg.layout;
        let failed = &self.failed;
        let mut touched = Vec::new();
        for (&txn, t) in self.inflight.iter_mut() {
            t.waiting.retain(|&p| p != proc);
            t.doomed = t.doomed
                || layout
                    .shards_of(&t.input)
                    .into_iter()
                    .any(|s| layout.replicas_of(s).all(|p| failed.contains_key(&p)));
            touched.push(txn);
        }
        for txn in touched {
            self.settle(txn);
        }
        if let Some(r) = self.replica.as_mut() {
            // Its replies will never be asked for again, nor could they be delivered.
            let before = r.deferred.len();
            r.deferred.retain(|d| d.1 != proc);
            let kept: Vec<u64> = r
                .replies
                .iter()
                .filter(|(_, e)| e.1 == proc)
                .map(|(&tag, _)| tag)
                .collect();
            for tag in &kept {
                r.replies.remove(tag);
            }
            r.reply_by_ts.retain(|k, _| k.1 != proc);
            self.stats.replies_dropped += (before - r.deferred.len() + kept.len()) as u64;
        }
    }

    /// This process was declared failed at `ts` (its host lost touch, §5.2): what it sent below
    /// `ts` is delivered everywhere, what it sent at or above it nowhere, and it hears no more.
    /// It gives up its transactions — the stamped ones below `ts` as unfinished records, they
    /// take effect — issues no more, and its shard no longer counts as live.
    fn on_own_failure(&mut self, ts: Timestamp) {
        let open = std::mem::take(&mut self.inflight);
        for (txn, t) in open {
            self.stats.failed += 1;
            if matches!(t.phase, Phase::Stamped { ts: sent, .. } if sent < ts) {
                let mut u = self.record(txn, &t);
                u.return_ns = u64::MAX;
                self.abandoned.push(u);
            }
        }
        if let Some(r) = self.replica.as_mut() {
            self.stats.replies_dropped += r.deferred.len() as u64;
            r.deferred.clear();
            r.replies.clear();
            r.reply_by_ts.clear();
        }
    }

    // --- Replica ---------------------------------------------------------------------------

    fn on_request(&mut self, src: ProcId, ts: Timestamp, reliable: bool, payload: &[u8]) {
        let Some(req) = codec::decode_request(payload) else {
            self.stats.malformed += 1;
            return;
        };
        if !reliable || !req.input.is_valid(&self.cfg.workload.scale) {
            self.stats.malformed += 1;
            return;
        }
        let mut used = false;
        let layout = self.cfg.layout;
        if let Some(r) = self
            .replica
            .as_mut()
            .filter(|r| layout.shards_of(&req.input).contains(&r.id))
        {
            used = true;
            if r.last.is_some_and(|l| (ts, src) < l) {
                self.stats.reordered += 1;
            }
            r.last = Some((ts, src));
            let result = r.shard.execute(&req.input);
            if self.cfg.log_applied {
                r.applied.push(AppliedTxn {
                    txn: req.txn,
                    client: src.0,
                    ts: ts.raw(),
                    input: req.input.clone(),
                    answer: Some((r.id, result.clone())),
                });
            }
            self.stats.parts_applied += 1;
            let bytes = codec::encode_reply(req.txn, ts.raw(), r.id, &result);
            if self.failed.contains_key(&src) {
                self.stats.replies_dropped += 1;
            } else {
                self.send_reply(src, bytes);
            }
        }
        if src == self.cfg.me {
            used = true;
            self.on_receipt(req.txn, ts);
        }
        if !used {
            // Addressed to a process that keeps nothing of it.
            self.stats.malformed += 1;
        }
    }

    /// Sends a reply (kept until a loss report could no longer come).
    fn send_reply(&mut self, dst: ProcId, bytes: Bytes) {
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let tag = REPLY_TAG | r.next_reply;
        r.next_reply += 1;
        r.replies.insert(tag, (self.now, dst, bytes.clone(), None));
        self.out.push_back(AppSend {
            tag,
            reliable: false,
            ordered: true,
            parts: vec![(dst, bytes)],
        });
    }

    fn forget_old_replies(&mut self) {
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let keep = self.cfg.reply_keep_ns;
        while let Some(e) = r.replies.first_entry() {
            if self.now.saturating_since(e.get().0) < keep {
                break;
            }
            let (tag, (_, dst, _, ts)) = e.remove_entry();
            if let Some(ts) = ts {
                if let Some(tags) = r.reply_by_ts.get_mut(&(ts, dst)) {
                    tags.retain(|&t| t != tag);
                    if tags.is_empty() {
                        r.reply_by_ts.remove(&(ts, dst));
                    }
                }
            }
        }
    }

    /// A reply of ours to `dst` stamped `ts` was lost: each reply of that timestamp to `dst`
    /// goes again (the report names no more; a reply twice is a stale reply to its initiator).
    fn on_reply_lost(&mut self, dst: ProcId, ts: Timestamp) {
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let Some(tags) = r.reply_by_ts.remove(&(ts, dst)) else {
            return;
        };
        let lost: Vec<(ProcId, Bytes)> = tags
            .into_iter()
            .filter_map(|tag| r.replies.remove(&tag).map(|e| (e.1, e.2)))
            .collect();
        for (dst, bytes) in lost {
            self.stats.replies_resent += 1;
            self.send_reply(dst, bytes);
        }
    }

    fn on_sent(&mut self, tag: u64, ts: Timestamp) {
        if tag & REPLY_TAG != 0 {
            if let Some(r) = self.replica.as_mut() {
                if let Some(e) = r.replies.get_mut(&tag) {
                    e.3 = Some(ts);
                    r.reply_by_ts.entry((ts, e.1)).or_default().push(tag);
                }
            }
            return;
        }
        if let Some(t) = self.inflight.get_mut(&tag) {
            if t.phase == Phase::Sending {
                self.stamped += 1;
                t.phase = Phase::Stamped {
                    ts,
                    seq: self.stamped,
                    receipt: false,
                };
            }
        }
        self.settle(tag);
    }

    fn on_refused(&mut self, tag: u64, now: Instant) {
        self.stats.refused += 1;
        let at = now + self.cfg.retry_ns;
        if tag & REPLY_TAG != 0 {
            // The part is applied here: its initiator must hear of it, later.
            if let Some(r) = self.replica.as_mut() {
                if let Some((_, dst, bytes, _)) = r.replies.remove(&tag) {
                    r.deferred.push_back((at, dst, bytes));
                }
            }
            return;
        }
        if let Some(t) = self.inflight.get_mut(&tag) {
            if t.phase == Phase::Sending {
                t.phase = Phase::Retry { at };
            }
        }
        self.settle(tag);
    }

    fn on_timeout(&mut self, now: Instant) {
        if !self.started && now >= self.cfg.start && self.cfg.window > 0 {
            self.started = true;
        }
        if self.pause_until.is_some_and(|p| now >= p) {
            self.pause_until = None;
        }
        let due: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, t)| matches!(t.phase, Phase::Retry { at } if at <= now))
            .map(|(&txn, _)| txn)
            .collect();
        for txn in due {
            self.send_txn(txn);
        }
        while let Some(r) = self.replica.as_mut() {
            if r.deferred.front().is_none_or(|d| d.0 > now) {
                break;
            }
            let Some((_, dst, bytes)) = r.deferred.pop_front() else {
                break;
            };
            if self.failed.contains_key(&dst) {
                self.stats.replies_dropped += 1;
            } else {
                self.send_reply(dst, bytes);
            }
        }
    }
}

impl TpccApp for TpccProcess {
    fn poll_committed(&mut self) -> Option<TpccCommitted> {
        self.committed.pop_front()
    }

    fn stats(&self) -> &TpccStats {
        &self.stats
    }

    fn idle(&self) -> bool {
        self.inflight.is_empty() && self.replica.as_ref().is_none_or(|r| r.deferred.is_empty())
    }

    /// The transactions given up after delivery (a shard lost every replica, or this process was
    /// declared failed), and those stamped and still open. (A stamped one whose receipt has not
    /// come may yet turn out recalled; a run drained until [`TpccApp::idle`] has none open.)
    fn unfinished(&self) -> Vec<TpccCommitted> {
        let open = self.inflight.iter().filter_map(|(&txn, t)| {
            if !matches!(t.phase, Phase::Stamped { .. }) {
                return None;
            }
            let mut u = self.record(txn, t);
            u.return_ns = u64::MAX;
            Some(u)
        });
        self.abandoned.iter().cloned().chain(open).collect()
    }

    fn shard(&self) -> Option<(u32, &Shard)> {
        if self.is_failed(self.cfg.me) {
            return None;
        }
        self.replica.as_ref().map(|r| (r.id, &r.shard))
    }

    fn applied(&self) -> &[AppliedTxn] {
        TpccProcess::applied(self)
    }
}

impl App for TpccProcess {
    fn handle(&mut self, now: Instant, input: AppInput<'_>) {
        self.now = self.now.max(now);
        match input {
            AppInput::Deliver {
                src,
                ts,
                reliable,
                payload,
            } => {
                if codec::is_request(payload) {
                    self.on_request(src, ts, reliable, payload);
                } else {
                    self.on_reply(src, payload);
                }
            }
            AppInput::Sent { tag, ts } => self.on_sent(tag, ts),
            // Requests go reliable: a loss report concerns a reply.
            AppInput::SendFailed { dst, ts } => self.on_reply_lost(dst, ts),
            AppInput::Refused { tag } => self.on_refused(tag, now),
            AppInput::CommitReleased { ts } => self.on_released(ts),
            AppInput::ProcFailed { proc, ts } => self.on_proc_failed(proc, ts),
            AppInput::Timeout => self.on_timeout(now),
        }
        self.forget_old_replies();
        self.fill_window();
        if cfg!(debug_assertions) {
            self.invariants();
        }
    }

    fn poll_send(&mut self) -> Option<AppSend> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let start = (!self.started && self.cfg.window > 0).then_some(self.cfg.start);
        let retry = self
            .inflight
            .values()
            .filter_map(|t| match t.phase {
                Phase::Retry { at } => Some(at),
                _ => None,
            })
            .min();
        let deferred = self
            .replica
            .as_ref()
            .and_then(|r| r.deferred.front().map(|d| d.0));
        start
            .into_iter()
            .chain(retry)
            .chain(deferred)
            .chain(self.pause_until)
            .min()
    }
}
