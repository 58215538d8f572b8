//! The transactional key-value store on 1Pipe (§7.3.1, with §2.2.3's distributed atomic
//! operations).
//!
//! Every process is a server for the keys that hash to it and an initiator of transactions. A
//! transaction is a set of independent reads and writes (2 by default): the initiator groups them
//! by server and sends them as **one scattering**, so every server sees the transaction at one
//! timestamp, and each server applies what it receives in timestamp order — the transactions are
//! serializable in timestamp order, with no locks and no aborts.
//!
//! * **Read-only** transactions go by **best-effort** 1Pipe (§7.3.1). A loss is reported to the
//!   initiator (`SendFailed`), which sends the transaction again at a new timestamp; nothing of it
//!   was applied anywhere, so a retry is safe.
//! * **Read-write and write-only** transactions go by **reliable** 1Pipe: delivered unless a
//!   process fails, all or nothing (§5.1).
//!
//! **Mind the two barriers.** Best-effort messages are delivered as the best-effort barrier
//! passes them, reliable ones only as the (slower) commit barrier does: a read-only request
//! stamped T can reach its server before a write stamped below T. A server therefore holds a
//! read-only request until its host's released commit barrier has passed T — then every write
//! below T has been applied — and answers it from the versions below T (a write stamped above T
//! may already be applied: the store keeps, per key, the versions later reads can still ask for).
//! A read inside a read-write transaction needs no wait: it is delivered in order with the
//! writes.
//!
//! Replies go back unordered (§2.2.2: "the response message does not need to be ordered by
//! 1Pipe"; the transaction took its place in the order at its request), best effort. A driver
//! that sends them ordered (live, today) reports a lost one to the server, which sends it again;
//! servers keep the replies they sent for [`KvConfig::reply_keep_ns`] (longer than any loss
//! report takes), so memory stays bounded. The simulator never loses an unordered message; a
//! driver that loses one without a report leaves its initiator waiting (no initiator timeout).
//!
//! Each run states its serialization order — the (timestamp, initiator) of each committed
//! transaction — and [`check::KvChecker`] replays the committed transactions in that order on a
//! model, checking every value read, and that the order respects real time.

pub mod check;
pub mod codec;
pub mod farm;
pub mod nontx;
pub mod workload;

use crate::{App, AppInput, AppSend};
use bytes::Bytes;
use onepipe_proto::{Instant, ProcId, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use workload::TxnGen;

/// A key.
pub type Key = u64;

/// A value as the store keeps it: the transaction that wrote it and its length. The bytes on the
/// wire are that long; only the identity and the size matter to the store and its checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Value {
    /// The writing transaction's id.
    pub writer: u64,
    /// Its length in bytes.
    pub len: u32,
}

/// One operation of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read a key.
    Get(Key),
    /// Write a value to a key.
    Put(Key, Value),
}

impl Op {
    /// The key it touches.
    pub fn key(&self) -> Key {
        match *self {
            Op::Get(k) | Op::Put(k, _) => k,
        }
    }
}

/// A transaction's kind, by its operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxnKind {
    /// Only reads: best effort.
    ReadOnly,
    /// Only writes: reliable.
    WriteOnly,
    /// Both: reliable.
    ReadWrite,
}

impl TxnKind {
    /// The kind of a transaction with operations `ops`.
    pub fn of(ops: &[Op]) -> TxnKind {
        let writes = ops.iter().filter(|o| matches!(o, Op::Put(..))).count();
        match writes {
            0 => TxnKind::ReadOnly,
            w if w == ops.len() => TxnKind::WriteOnly,
            _ => TxnKind::ReadWrite,
        }
    }
}

/// A transaction id: its initiator in the top 24 bits, the initiator's count below.
pub fn txn_id(initiator: ProcId, seq: u64) -> u64 {
    u64::from(initiator.0) << 40 | (seq & ((1 << 40) - 1))
}

/// The server of `key` among `servers` processes (a hash, so hot Zipf ranks spread).
pub fn server_of(key: Key, servers: u32) -> u32 {
    // SplitMix64's finalizer: consecutive keys land far apart.
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % u64::from(servers.max(1))) as u32
}

/// A transaction that committed, as its initiator saw it: what [`check::KvChecker`] replays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    /// Its id.
    pub txn: u64,
    /// Its initiator.
    pub client: u32,
    /// Its kind.
    pub kind: TxnKind,
    /// Its timestamp (raw ns): with `client`, its place in the serialization order.
    pub ts: u64,
    /// What each read returned (`None`: never written).
    pub reads: Vec<(Key, Option<Value>)>,
    /// What it wrote.
    pub writes: Vec<(Key, Value)>,
    /// When the initiator first sent it, and when its last reply came (the initiator's local
    /// time, ns).
    pub call_ns: u64,
    /// See `call_ns`.
    pub return_ns: u64,
    /// Sends it took (a read-only transaction is sent again after a loss).
    pub attempts: u32,
}

/// A transaction-running application process, as a driver sees it beside [`App`]: what it
/// committed, its counters, and whether it has work open (a run drains until none has).
pub trait TxnApp: App {
    /// The next transaction it committed since the last call.
    fn poll_committed(&mut self) -> Option<Committed>;
    /// Its counters.
    fn stats(&self) -> &KvStats;
    /// No transaction in flight, nothing waiting.
    fn idle(&self) -> bool;
    /// Transactions still open whose writes are bound to be applied (stamped reliable ones: 1Pipe
    /// delivers them unless a process fails), as unfinished records — no reads, never returned —
    /// for the checker at the end of a run that did not drain.
    fn unfinished(&self) -> Vec<Committed> {
        Vec::new()
    }
    /// The writes its server applied, in order, if it logs them ([`KvConfig::log_applied`]).
    fn applied(&self) -> &[AppliedWrite] {
        &[]
    }
}

/// The writes among `ops`.
fn writes_of(ops: &[Op]) -> Vec<(Key, Value)> {
    ops.iter()
        .filter_map(|o| match *o {
            Op::Put(k, v) => Some((k, v)),
            Op::Get(_) => None,
        })
        .collect()
}

/// The store's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct KvConfig {
    /// This process.
    pub me: ProcId,
    /// The server processes, `0..servers` (every process of the group serves).
    pub servers: u32,
    /// Transactions an initiator keeps in flight (a closed loop); 0 makes a pure server.
    pub window: u32,
    /// The workload.
    pub workload: workload::KvWorkload,
    /// When the initiator starts (local time).
    pub start: Instant,
    /// It issues no new transaction from then on (local time).
    pub stop: Instant,
    /// How long a server keeps a reply it sent, for a loss report to ask it again.
    pub reply_keep_ns: u64,
    /// Before a refused send (a full send buffer) is tried again.
    pub retry_ns: u64,
    /// Servers keep the values' bytes and replies carry them back (an application that wants
    /// its values, `onepipe::kv`). Off, values travel as zeros of their length and servers keep
    /// only their identity and size (the simulator's workloads).
    pub keep_values: bool,
    /// The server logs every write it applies ([`KvProcess::applied`]): a checker then knows the
    /// writes of an initiator that died before it could say what it committed (the live cluster
    /// under `--kill`). Off in the simulator, which knows them anyway.
    pub log_applied: bool,
}

/// A write a server applied ([`KvConfig::log_applied`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedWrite {
    /// The writing transaction.
    pub txn: u64,
    /// Its initiator.
    pub client: u32,
    /// Its timestamp (raw).
    pub ts: u64,
    /// The key.
    pub key: Key,
    /// The value written.
    pub value: Value,
}

impl KvConfig {
    /// A process of a group of `servers`, running `workload` from 0 on, `window` transactions in
    /// flight.
    pub fn new(me: ProcId, servers: u32, workload: workload::KvWorkload, window: u32) -> KvConfig {
        KvConfig {
            me,
            servers,
            window,
            workload,
            start: Instant(0),
            stop: Instant(u64::MAX),
            reply_keep_ns: 50_000_000,
            retry_ns: 20_000,
            keep_values: false,
            log_applied: false,
        }
    }
}

/// What a store process counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvStats {
    /// Transactions committed, by kind.
    pub committed_ro: u64,
    /// See `committed_ro`.
    pub committed_wo: u64,
    /// See `committed_ro`.
    pub committed_rw: u64,
    /// Read-only transactions sent again after a loss.
    pub ro_retries: u64,
    /// Attempts aborted by a lock or version conflict and tried again (the FaRM baseline).
    pub aborts: u64,
    /// Sends refused (full send buffer, failed destination) and tried again later.
    pub refused: u64,
    /// Transactions given up because a server they need failed.
    pub abandoned: u64,
    /// Operations a server applied: reads and writes.
    pub reads: u64,
    /// See `reads`.
    pub writes: u64,
    /// Read-only requests that waited for the commit barrier.
    pub ro_waited: u64,
    /// Replies sent again after a loss.
    pub replies_resent: u64,
    /// Messages dropped as malformed (or a put sent by best effort).
    pub malformed: u64,
    /// Replies to no transaction in flight (a retried attempt's, or a duplicate).
    pub stale_replies: u64,
}

impl std::ops::AddAssign<&KvStats> for KvStats {
    fn add_assign(&mut self, q: &KvStats) {
        let KvStats {
            committed_ro,
            committed_wo,
            committed_rw,
            ro_retries,
            aborts,
            refused,
            abandoned,
            reads,
            writes,
            ro_waited,
            replies_resent,
            malformed,
            stale_replies,
        } = q;
        self.committed_ro += committed_ro;
        self.committed_wo += committed_wo;
        self.committed_rw += committed_rw;
        self.ro_retries += ro_retries;
        self.aborts += aborts;
        self.refused += refused;
        self.abandoned += abandoned;
        self.reads += reads;
        self.writes += writes;
        self.ro_waited += ro_waited;
        self.replies_resent += replies_resent;
        self.malformed += malformed;
        self.stale_replies += stale_replies;
    }
}

/// A transaction's place in the serialization order: (timestamp, initiator, transaction id).
/// 1Pipe orders messages by (timestamp, sender); one sender may stamp several transactions with
/// one timestamp (all it sends in one turn), and delivers them in the order it sent them, which
/// is the order of their ids.
type Place = (Timestamp, ProcId, u64);

/// Tags of the server's reply sends have this bit; the initiator's are transaction ids.
const REPLY_TAG: u64 = 1 << 63;

/// One process's part of the store: the keys it serves.
#[derive(Debug, Default)]
struct Server {
    /// Per key, its versions oldest first.
    versions: HashMap<Key, Vec<(Place, Value)>>,
    /// With `keep_values`: each version's bytes, by (key, writer).
    data: HashMap<(Key, u64), Bytes>,
    /// With `log_applied`: every write applied, in order.
    applied: Vec<AppliedWrite>,
    /// Read-only requests waiting for the commit barrier, by their place.
    waiting: BTreeMap<Place, codec::Request>,
    /// The released commit barrier.
    released: Option<Timestamp>,
    /// The last best-effort request's timestamp: later ones are above it.
    last_be: Option<Timestamp>,
    /// Replies sent, by tag: (sent at, addressee, bytes, timestamp once known).
    replies: BTreeMap<u64, (Instant, ProcId, Bytes, Option<Timestamp>)>,
    /// Reply tags by (timestamp, addressee), for a loss report (which names no more).
    reply_by_ts: HashMap<(Timestamp, ProcId), Vec<u64>>,
    /// Replies the host refused (a full send queue), to send again from the instant given.
    deferred: VecDeque<(Instant, ProcId, Bytes)>,
    next_reply: u64,
}

/// An initiator's transaction in flight.
#[derive(Debug)]
struct Inflight {
    ops: Vec<Op>,
    kind: TxnKind,
    /// The servers that have not answered the current attempt.
    waiting: Vec<u32>,
    reads: Vec<(Key, Option<Value>)>,
    ts: Option<Timestamp>,
    call: Instant,
    attempts: u32,
    /// Waiting to be sent again (after a refusal) from this instant.
    retry_at: Option<Instant>,
    /// Submitted by the application ([`KvProcess::submit`]): its outcome is reported.
    submitted: bool,
    /// A submitted transaction's put values, in the order of its puts.
    data: Vec<Bytes>,
    /// A submitted transaction's read values, as the replies carried them.
    read_data: Vec<(Key, Option<Bytes>)>,
}

impl Inflight {
    /// Transaction `ops`, called at `call`, not yet sent.
    fn new(ops: Vec<Op>, call: Instant, submitted: bool, data: Vec<Bytes>) -> Inflight {
        Inflight {
            kind: TxnKind::of(&ops),
            ops,
            waiting: Vec::new(),
            reads: Vec::new(),
            ts: None,
            call,
            attempts: 0,
            retry_at: None,
            submitted,
            data,
            read_data: Vec::new(),
        }
    }
}

/// An operation of a transaction an application submits ([`KvProcess::submit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOp {
    /// Read a key.
    Get(Key),
    /// Write these bytes to a key.
    Put(Key, Bytes),
}

/// What became of a submitted transaction ([`KvProcess::poll_outcome`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It committed at timestamp `ts`; `reads` in the order of its gets (`None`: never
    /// written).
    Committed {
        /// The transaction.
        txn: u64,
        /// Its timestamp: its place in the serialization order.
        ts: Timestamp,
        /// What its gets read.
        reads: Vec<(Key, Option<Bytes>)>,
    },
    /// A server it needs failed (§2.2.3): it never completes. A writing transaction's parts at
    /// the correct servers may still have been applied (§5.2 restricted atomicity).
    Abandoned {
        /// The transaction.
        txn: u64,
    },
}

/// A process of the transactional store: server and initiator (§7.3.1).
#[derive(Debug)]
pub struct KvProcess {
    cfg: KvConfig,
    gen: TxnGen,
    server: Server,
    inflight: BTreeMap<u64, Inflight>,
    /// Stamped reliable transactions abandoned because a server failed, as unfinished records
    /// (their other parts apply).
    abandoned_writers: Vec<Committed>,
    /// Transactions in flight by their current timestamp (for a loss report).
    by_ts: HashMap<Timestamp, Vec<u64>>,
    seq: u64,
    started: bool,
    failed: Vec<ProcId>,
    /// The window is filled again then at the latest: every transaction one input drew was
    /// abandoned at once (each touched a failed server), so drawing on would spin at one instant.
    refill_at: Option<Instant>,
    out: VecDeque<AppSend>,
    committed: VecDeque<Committed>,
    outcomes: VecDeque<Outcome>,
    now: Instant,
    stats: KvStats,
}

impl KvProcess {
    /// A store process; `gen` draws its transactions (from the run's seed and this process).
    pub fn new(cfg: KvConfig, gen: TxnGen) -> KvProcess {
        KvProcess {
            cfg,
            gen,
            server: Server::default(),
            inflight: BTreeMap::new(),
            by_ts: HashMap::new(),
            abandoned_writers: Vec::new(),
            seq: 0,
            started: false,
            failed: Vec::new(),
            refill_at: None,
            out: VecDeque::new(),
            committed: VecDeque::new(),
            outcomes: VecDeque::new(),
            now: Instant(0),
            stats: KvStats::default(),
        }
    }

    /// Its counters.
    pub fn stats(&self) -> &KvStats {
        &self.stats
    }

    /// Starts a transaction the application asks for (beside the workload's, if any): one
    /// scattering, read-only by best effort, the others reliable, as every transaction. Its
    /// [`Outcome`] comes from [`KvProcess::poll_outcome`]. The caller checks the operations
    /// (`onepipe::kv::KvClient` does): at least one, at most [`codec::OPS_MAX`] per server,
    /// values at most [`codec::VALUE_LEN_MAX`] bytes.
    pub fn submit(&mut self, ops: Vec<ClientOp>) -> u64 {
        let txn = txn_id(self.cfg.me, self.seq);
        self.seq += 1;
        let mut data = Vec::new();
        let ops: Vec<Op> = ops
            .into_iter()
            .map(|o| match o {
                ClientOp::Get(k) => Op::Get(k),
                ClientOp::Put(k, bytes) => {
                    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
                    data.push(bytes);
                    Op::Put(k, Value { writer: txn, len })
                }
            })
            .collect();
        let t = Inflight::new(ops, self.now, true, data);
        self.inflight.insert(txn, t);
        self.send_txn(txn);
        txn
    }

    /// The writes its server applied, in order (with [`KvConfig::log_applied`]).
    pub fn applied(&self) -> &[AppliedWrite] {
        &self.server.applied
    }

    /// The outcome of a submitted transaction, as each becomes known.
    pub fn poll_outcome(&mut self) -> Option<Outcome> {
        self.outcomes.pop_front()
    }

    /// The next transaction it committed since the last call (for the checker and metrics).
    pub fn poll_committed(&mut self) -> Option<Committed> {
        self.committed.pop_front()
    }

    /// Transactions in flight.
    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    /// Read-only requests waiting at its server for the commit barrier.
    pub fn waiting_reads(&self) -> usize {
        self.server.waiting.len()
    }

    /// Keys its server holds.
    pub fn keys(&self) -> usize {
        self.server.versions.len()
    }

    /// Versions its server keeps, over all keys (bounded: see the module docs).
    pub fn versions(&self) -> usize {
        self.server.versions.values().map(Vec::len).sum()
    }

    // --- Initiator -------------------------------------------------------------------------

    fn fill_window(&mut self) {
        if self.refill_at.is_some_and(|t| t > self.now) {
            return;
        }
        self.refill_at = None;
        let mut drawn = 0u32;
        while self.started
            && self.now < self.cfg.stop
            && (self.inflight.len() as u32) < self.cfg.window
        {
            // §2.2.3: a transaction that touches a failed server is abandoned as it is drawn.
            // When a window's worth of draws in one input found no transaction that avoids the
            // failed servers, try again a retry interval later instead of drawing for ever at
            // this instant (16 uniform operations over 8 servers with 3 failed: 0.05% succeed).
            if drawn == self.cfg.window {
                self.refill_at = Some(Instant(self.now.as_nanos() + self.cfg.retry_ns));
                return;
            }
            drawn += 1;
            let txn = txn_id(self.cfg.me, self.seq);
            self.seq += 1;
            let ops = self.gen.next(txn);
            let t = Inflight::new(ops, self.now, false, Vec::new());
            self.inflight.insert(txn, t);
            self.send_txn(txn);
        }
    }

    /// Transaction `t` (`txn`) will never complete: a submitted one's application hears so.
    fn abandon(&mut self, txn: u64, t: &Inflight) {
        self.stats.abandoned += 1;
        if t.submitted {
            self.outcomes.push_back(Outcome::Abandoned { txn });
        }
    }

    /// Sends transaction `txn` (again): one scattering, a part per server.
    fn send_txn(&mut self, txn: u64) {
        let servers = self.cfg.servers;
        let Some(t) = self.inflight.get_mut(&txn) else {
            return;
        };
        let mut parts: BTreeMap<u32, (Vec<Op>, Vec<Bytes>)> = BTreeMap::new();
        let mut data = t.data.iter();
        for op in &t.ops {
            let part = parts.entry(server_of(op.key(), servers)).or_default();
            part.0.push(*op);
            if let (Op::Put(..), Some(d)) = (op, data.next()) {
                part.1.push(d.clone());
            }
        }
        if parts.keys().any(|s| self.failed.contains(&ProcId(*s))) {
            // §2.2.3: a failed server's objects cannot be accessed any more.
            let t = self.inflight.remove(&txn).expect("in flight");
            self.abandon(txn, &t);
            return;
        }
        if let Some(ts) = t.ts.take() {
            forget(&mut self.by_ts, ts, txn);
        }
        t.attempts += 1;
        t.retry_at = None;
        t.reads.clear();
        t.read_data.clear();
        t.waiting = parts.keys().copied().collect();
        let reliable = t.kind != TxnKind::ReadOnly;
        let parts = parts
            .into_iter()
            .map(|(s, (ops, data))| (ProcId(s), codec::encode_request_data(txn, &ops, &data)))
            .collect();
        self.out.push_back(AppSend {
            tag: txn,
            reliable,
            ordered: true,
            parts,
        });
    }

    fn on_reply(&mut self, src: ProcId, payload: &[u8]) {
        let Some(r) = codec::decode_reply(payload) else {
            self.stats.malformed += 1;
            return;
        };
        let Some(t) = self.inflight.get_mut(&r.txn) else {
            self.stats.stale_replies += 1;
            return;
        };
        let current = t.ts.map(|ts| ts.raw()) == Some(r.req_ts);
        let Some(i) = t
            .waiting
            .iter()
            .position(|&s| s == src.0)
            .filter(|_| current)
        else {
            self.stats.stale_replies += 1;
            return;
        };
        t.waiting.swap_remove(i);
        if t.submitted {
            let data = r.read_data(payload);
            let values = data.into_iter().map(|d| d.map(Bytes::copy_from_slice));
            t.read_data.extend(r.reads.iter().map(|x| x.0).zip(values));
        }
        t.reads.extend(r.reads);
        if t.waiting.is_empty() {
            self.commit(r.txn);
        }
    }

    fn commit(&mut self, txn: u64) {
        let t = self.inflight.remove(&txn).expect("a transaction in flight");
        let ts = t.ts.expect("a reply answers a stamped send");
        forget(&mut self.by_ts, ts, txn);
        match t.kind {
            TxnKind::ReadOnly => self.stats.committed_ro += 1,
            TxnKind::WriteOnly => self.stats.committed_wo += 1,
            TxnKind::ReadWrite => self.stats.committed_rw += 1,
        }
        if t.submitted {
            let mut got: HashMap<Key, Option<Bytes>> = t.read_data.iter().cloned().collect();
            let reads = t
                .ops
                .iter()
                .filter_map(|o| match *o {
                    Op::Get(k) => Some((k, got.remove(&k).flatten())),
                    Op::Put(..) => None,
                })
                .collect();
            self.outcomes
                .push_back(Outcome::Committed { txn, ts, reads });
        }
        let mut reads = t.reads;
        reads.sort_unstable_by_key(|r| r.0);
        self.committed.push_back(Committed {
            txn,
            client: self.cfg.me.0,
            kind: t.kind,
            ts: ts.raw(),
            reads,
            writes: writes_of(&t.ops),
            call_ns: t.call.as_nanos(),
            return_ns: self.now.as_nanos(),
            attempts: t.attempts,
        });
        self.fill_window();
    }

    /// A request of ours to `dst` stamped `ts` was lost: the read-only transactions of that
    /// timestamp still waiting for `dst` go again at a new timestamp.
    fn on_request_lost(&mut self, dst: ProcId, ts: Timestamp) {
        let Some(txns) = self.by_ts.get(&ts) else {
            return;
        };
        let lost: Vec<u64> = txns
            .iter()
            .copied()
            .filter(|txn| {
                self.inflight
                    .get(txn)
                    .is_some_and(|t| t.kind == TxnKind::ReadOnly && t.waiting.contains(&dst.0))
            })
            .collect();
        for txn in lost {
            self.stats.ro_retries += 1;
            self.send_txn(txn);
        }
    }

    /// Transaction `txn` (`t`, stamped `ts`) as an unfinished record: its writes, no reads,
    /// never returned.
    fn unfinished_record(&self, txn: u64, t: &Inflight, ts: Timestamp) -> Committed {
        Committed {
            txn,
            client: self.cfg.me.0,
            kind: t.kind,
            ts: ts.raw(),
            reads: Vec::new(),
            writes: writes_of(&t.ops),
            call_ns: t.call.as_nanos(),
            return_ns: u64::MAX,
            attempts: t.attempts,
        }
    }

    // --- Server ----------------------------------------------------------------------------

    fn on_request(&mut self, src: ProcId, ts: Timestamp, reliable: bool, payload: &[u8]) {
        let Some(req) = codec::decode_request(payload) else {
            self.stats.malformed += 1;
            return;
        };
        if reliable {
            let data: Vec<Bytes> = if self.cfg.keep_values {
                let puts = req.put_data(payload).into_iter();
                puts.map(Bytes::copy_from_slice).collect()
            } else {
                Vec::new()
            };
            self.apply(src, ts, &req, &data);
            return;
        }
        if req.ops.iter().any(|o| matches!(o, Op::Put(..))) {
            // Writes go reliable: a best-effort write could be lost at one server only.
            self.stats.malformed += 1;
            return;
        }
        self.server.last_be = Some(ts);
        if self.server.released.is_some_and(|b| ts < b) {
            self.apply(src, ts, &req, &[]);
        } else {
            self.stats.ro_waited += 1;
            self.server.waiting.insert((ts, src, req.txn), req);
        }
    }

    /// Applies `req` (from `src`, stamped `ts`; `data`: its put values' bytes, with
    /// `keep_values`): reads see the versions below its place, then the writes become versions;
    /// then the reply.
    fn apply(&mut self, src: ProcId, ts: Timestamp, req: &codec::Request, data: &[Bytes]) {
        let at = (ts, src, req.txn);
        let mut reads = Vec::new();
        for op in &req.ops {
            if let Op::Get(k) = *op {
                let v = self.server.versions.get(&k).and_then(|vs| {
                    let i = vs.partition_point(|(vt, _)| *vt < at);
                    i.checked_sub(1).map(|i| vs[i].1)
                });
                reads.push((k, v));
                self.stats.reads += 1;
            }
        }
        let read_data: Vec<Bytes> = if self.cfg.keep_values {
            let present = reads.iter().filter_map(|&(k, v)| Some((k, v?)));
            let zeros = |v: Value| Bytes::from(vec![0; v.len as usize]);
            let data = &self.server.data;
            present
                .map(|(k, v)| {
                    data.get(&(k, v.writer))
                        .cloned()
                        .unwrap_or_else(|| zeros(v))
                })
                .collect()
        } else {
            Vec::new()
        };
        let floor = self.version_floor();
        let mut data = data.iter();
        let server = &mut self.server;
        for op in &req.ops {
            if let Op::Put(k, v) = *op {
                let vs = server.versions.entry(k).or_default();
                debug_assert!(vs.last().is_none_or(|l| l.0 < at), "writes apply in order");
                vs.push((at, v));
                if let Some(d) = data.next() {
                    server.data.insert((k, v.writer), d.clone());
                }
                if self.cfg.log_applied {
                    server.applied.push(AppliedWrite {
                        txn: req.txn,
                        client: src.0,
                        ts: ts.raw(),
                        key: k,
                        value: v,
                    });
                }
                // Keep the newest version below the floor and what is above it.
                let keep_from = vs.partition_point(|(vt, _)| vt.0 < floor).saturating_sub(1);
                for (_, old) in vs.drain(..keep_from) {
                    server.data.remove(&(k, old.writer));
                }
                self.stats.writes += 1;
            }
        }
        let reply = codec::encode_reply_data(req.txn, ts.raw(), &reads, &read_data);
        self.send_reply(src, reply);
    }

    /// Sends a reply (kept until a loss report could no longer come), unordered: the request
    /// took the transaction's place in the order.
    fn send_reply(&mut self, dst: ProcId, bytes: Bytes) {
        let tag = REPLY_TAG | self.server.next_reply;
        self.server.next_reply += 1;
        self.server
            .replies
            .insert(tag, (self.now, dst, bytes.clone(), None));
        self.out.push_back(AppSend {
            tag,
            reliable: false,
            ordered: false,
            parts: vec![(dst, bytes)],
        });
    }

    /// No read still to come asks below this timestamp: the oldest waiting read-only request,
    /// else the last best-effort one (later ones come in order above it). Reliable requests read
    /// the newest version.
    fn version_floor(&self) -> Timestamp {
        let waiting = self.server.waiting.keys().next().map(|k| k.0);
        match (waiting, self.server.last_be) {
            (Some(w), _) => w,
            (None, Some(b)) => b,
            (None, None) => Timestamp::new(0),
        }
    }

    fn on_released(&mut self, b: Timestamp) {
        if self.server.released.is_some_and(|r| r >= b) {
            return;
        }
        self.server.released = Some(b);
        while let Some(entry) = self.server.waiting.first_entry() {
            if entry.key().0 >= b {
                break;
            }
            let ((ts, src, _), req) = entry.remove_entry();
            self.apply(src, ts, &req, &[]);
        }
    }

    fn forget_old_replies(&mut self) {
        let keep = self.cfg.reply_keep_ns;
        while let Some(e) = self.server.replies.first_entry() {
            if self.now.as_nanos().saturating_sub(e.get().0.as_nanos()) < keep {
                break;
            }
            let (tag, (_, dst, _, ts)) = e.remove_entry();
            if let Some(ts) = ts {
                if let Some(tags) = self.server.reply_by_ts.get_mut(&(ts, dst)) {
                    tags.retain(|&t| t != tag);
                    if tags.is_empty() {
                        self.server.reply_by_ts.remove(&(ts, dst));
                    }
                }
            }
        }
    }

    /// Our send tagged `tag` was stamped `ts`: a reply is indexed by its timestamp (for a loss
    /// report), a request's transaction takes its timestamp.
    fn on_sent(&mut self, tag: u64, ts: Timestamp) {
        if tag & REPLY_TAG != 0 {
            if let Some(r) = self.server.replies.get_mut(&tag) {
                r.3 = Some(ts);
                self.server
                    .reply_by_ts
                    .entry((ts, r.1))
                    .or_default()
                    .push(tag);
            }
        } else if let Some(t) = self.inflight.get_mut(&tag) {
            t.ts = Some(ts);
            self.by_ts.entry(ts).or_default().push(tag);
        }
    }

    /// The host refused our send tagged `tag` (its queue full): a reply goes out later, a
    /// request's transaction is retried later.
    fn on_refused(&mut self, now: Instant, tag: u64) {
        if tag & REPLY_TAG != 0 {
            // The transaction is applied here: its initiator must hear of it, later.
            if let Some((_, dst, bytes, _)) = self.server.replies.remove(&tag) {
                self.stats.refused += 1;
                let at = Instant(now.as_nanos() + self.cfg.retry_ns);
                self.server.deferred.push_back((at, dst, bytes));
            }
        } else {
            self.stats.refused += 1;
            if let Some(t) = self.inflight.get_mut(&tag) {
                t.retry_at = Some(Instant(now.as_nanos() + self.cfg.retry_ns));
            }
        }
    }

    /// `proc` failed: the transactions waiting on it are abandoned, and a stamped writer among
    /// them is kept as unfinished.
    fn on_proc_failed(&mut self, proc: ProcId) {
        if !self.failed.contains(&proc) {
            self.failed.push(proc);
        }
        let stuck: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, t)| t.waiting.contains(&proc.0))
            .map(|(&txn, _)| txn)
            .collect();
        for txn in stuck {
            if let Some(t) = self.inflight.remove(&txn) {
                if let Some(ts) = t.ts {
                    forget(&mut self.by_ts, ts, txn);
                    // Stamped and reliable: the correct servers apply their parts (§5.2
                    // restricted atomicity), so others may read its writes.
                    if t.kind != TxnKind::ReadOnly {
                        let u = self.unfinished_record(txn, &t, ts);
                        self.abandoned_writers.push(u);
                    }
                }
                self.abandon(txn, &t);
            }
        }
    }

    /// The timer: the run starts, transactions due are sent again, deferred replies go out.
    fn on_timeout(&mut self, now: Instant) {
        if !self.started && now >= self.cfg.start && self.cfg.window > 0 {
            self.started = true;
        }
        let due: Vec<u64> = self
            .inflight
            .iter()
            .filter(|(_, t)| t.retry_at.is_some_and(|r| r <= now))
            .map(|(&txn, _)| txn)
            .collect();
        for txn in due {
            self.send_txn(txn);
        }
        while self.server.deferred.front().is_some_and(|d| d.0 <= now) {
            let (_, dst, bytes) = self.server.deferred.pop_front().expect("a reply");
            self.send_reply(dst, bytes);
        }
    }

    /// A message of ours to `dst` stamped `ts` was lost: if replies, each of that timestamp to
    /// `dst` goes again (the report names no more; a reply twice is a stale reply to its
    /// initiator).
    fn on_reply_lost(&mut self, dst: ProcId, ts: Timestamp) {
        let Some(tags) = self.server.reply_by_ts.remove(&(ts, dst)) else {
            return;
        };
        for tag in tags {
            let Some((_, dst, bytes, _)) = self.server.replies.remove(&tag) else {
                continue;
            };
            self.stats.replies_resent += 1;
            self.send_reply(dst, bytes);
        }
    }
}

impl TxnApp for KvProcess {
    fn poll_committed(&mut self) -> Option<Committed> {
        self.committed.pop_front()
    }
    fn stats(&self) -> &KvStats {
        &self.stats
    }
    fn idle(&self) -> bool {
        self.inflight.is_empty()
            && self.server.waiting.is_empty()
            && self.server.deferred.is_empty()
    }

    fn applied(&self) -> &[AppliedWrite] {
        &self.server.applied
    }

    fn unfinished(&self) -> Vec<Committed> {
        let open = self.inflight.iter().filter_map(|(&txn, t)| {
            let ts = t.ts.filter(|_| t.kind != TxnKind::ReadOnly)?;
            Some(self.unfinished_record(txn, t, ts))
        });
        self.abandoned_writers.iter().cloned().chain(open).collect()
    }
}

/// Removes `txn` from the transactions of timestamp `ts`.
fn forget(by_ts: &mut HashMap<Timestamp, Vec<u64>>, ts: Timestamp, txn: u64) {
    if let Some(v) = by_ts.get_mut(&ts) {
        v.retain(|&t| t != txn);
        if v.is_empty() {
            by_ts.remove(&ts);
        }
    }
}

impl App for KvProcess {
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
            AppInput::SendFailed { dst, ts } => {
                // The report names the addressee and the timestamp only: a reply and a request of
                // one turn to one process share them, so both are sent again.
                self.on_reply_lost(dst, ts);
                self.on_request_lost(dst, ts);
            }
            AppInput::Refused { tag } => self.on_refused(now, tag),
            AppInput::CommitReleased { ts } => self.on_released(ts),
            AppInput::ProcFailed { proc, .. } => self.on_proc_failed(proc),
            AppInput::Timeout => self.on_timeout(now),
        }
        self.forget_old_replies();
        self.fill_window();
    }

    fn poll_send(&mut self) -> Option<AppSend> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let start = (!self.started && self.cfg.window > 0).then_some(self.cfg.start);
        let retry = self.inflight.values().filter_map(|t| t.retry_at).min();
        let deferred = self.server.deferred.front().map(|d| d.0);
        start
            .into_iter()
            .chain(retry)
            .chain(deferred)
            .chain(self.refill_at)
            .min()
    }
}

#[cfg(test)]
mod tests;
