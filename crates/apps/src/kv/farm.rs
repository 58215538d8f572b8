//! The FaRM-like store: §7.3.1's transactional baseline (FaRM, the paper's \[34\], non-replicated
//! and non-durable, as the paper ran it). The same operations, keys, values, servers and closed
//! loop as [`super::KvProcess`], on plain messages — no timestamps, no ordering — with optimistic
//! concurrency control:
//!
//! * **Read-only**: one round trip reading each key's value, lock bit and version; a key found
//!   locked aborts the attempt. Reads at **one server** are atomic there, so such a transaction
//!   is done in 1 RTT, as the paper says. Reads at **several servers** are validated in a second
//!   round trip (each version unchanged, no lock): without it, a writer that commits between the
//!   two reads makes the transaction see half of it — the paper's 1-RTT figure does not survive
//!   the checker (the planted bug `farm-ro-unvalidated` shows it).
//! * **Read-write**: read (1 RTT), lock the written keys — the lock message carries the new values
//!   and, for a key also read, the version read; a key locked by another transaction or at
//!   another version fails it — (1 RTT), validate the keys only read (1 RTT), commit: apply,
//!   bump the versions and unlock (1 RTT): 4 round trips.
//! * **Write-only**: lock, commit: 2 round trips (blind writes need no version; the paper counts
//!   3, its FaRM reads first).
//!
//! A failed lock or validation aborts the attempt: the locks taken are released and the
//! transaction is tried again, whole, after a randomized exponential backoff. Locks are taken
//! without waiting (a conflict fails at once), so there is no deadlock.
//!
//! **Serialization order, for the checker.** A server stamps each answer with its clock (the
//! `now` it is handed; the simulator's direct-messaging driver gives the baselines exact clocks,
//! and live processes on one machine share one) made strictly increasing per server. A transaction's place is the latest stamp of
//! its reads (read-only) or of its locks (writing): at that instant every value it read was
//! current and unlocked (validation proves it unchanged until later) and every key it writes was
//! locked by it, so no other transaction can have observed or written them in between. The
//! protocol never reads the stamps; only [`super::check::KvChecker`] orders the replay by them.
//!
//! The network is assumed lossless (the simulator refuses `--loss` for the baselines): a lost
//! message would leave locks held.

use super::codec::Reader;
use super::workload::TxnGen;
use super::{
    server_of, txn_id, writes_of, Committed, Key, KvConfig, KvStats, Op, TxnApp, TxnKind, Value,
};
use crate::{App, AppInput, AppSend};
use bytes::{BufMut, Bytes, BytesMut};
use onepipe_proto::{Instant, ProcId};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// The first backoff after an abort (ns); it doubles per attempt up to 64×, randomized ×[1, 2).
pub const BACKOFF_BASE_NS: u64 = 2_000;

/// A lock expecting any version (a blind write).
const ANY_VERSION: u64 = u64::MAX;

const READ: u8 = 11;
const READ_REPLY: u8 = 12;
const LOCK: u8 = 13;
const LOCK_REPLY: u8 = 14;
const VALIDATE: u8 = 15;
const VALIDATE_REPLY: u8 = 16;
const COMMIT: u8 = 17;
const COMMIT_REPLY: u8 = 18;
const ABORT: u8 = 19;

/// A transaction attempt: (transaction id, attempt number). Locks are held by attempts.
type Owner = (u64, u32);

/// The messages, big-endian, bounds-checked: a malformed one decodes to `None`.
///
/// Every message starts with its kind `u8`, the transaction `u64` and the attempt `u32`. Then:
/// read — count `u16`, keys `u64`; read reply — stamp `u64`, count `u16`, per key the key, a
/// presence byte (then writer `u64`, length `u32`), version `u64`, locked byte, then the values'
/// bytes; lock — count `u16`, per key the key, the expected version (`u64::MAX`: any), writer,
/// length, then the values' bytes; validate — count, per key the key and version; lock, validate
/// and commit replies — stamp `u64`, ok byte; commit and abort — nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Msg {
    Read(Vec<Key>),
    ReadReply {
        stamp: u64,
        entries: Vec<ReadEntry>,
    },
    Lock(Vec<(Key, u64, Value)>),
    Validate(Vec<(Key, u64)>),
    /// A lock, validate or commit reply.
    Reply {
        kind: u8,
        stamp: u64,
        ok: bool,
    },
    Commit,
    Abort,
}

/// What a read returns for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReadEntry {
    key: Key,
    value: Option<Value>,
    version: u64,
    locked: bool,
}

fn encode(owner: Owner, msg: &Msg) -> Bytes {
    let mut b = BytesMut::with_capacity(32);
    let kind = match msg {
        Msg::Read(_) => READ,
        Msg::ReadReply { .. } => READ_REPLY,
        Msg::Lock(_) => LOCK,
        Msg::Validate(_) => VALIDATE,
        Msg::Reply { kind, .. } => *kind,
        Msg::Commit => COMMIT,
        Msg::Abort => ABORT,
    };
    b.put_u8(kind);
    b.put_u64(owner.0);
    b.put_u32(owner.1);
    let count =
        |n: usize| u16::try_from(n).unwrap_or_else(|_| panic!("{n} keys in one FaRM message"));
    let mut values = 0usize;
    match msg {
        Msg::Read(keys) => {
            b.put_u16(count(keys.len()));
            keys.iter().for_each(|&k| b.put_u64(k));
        }
        Msg::ReadReply { stamp, entries } => {
            b.put_u64(*stamp);
            b.put_u16(count(entries.len()));
            for e in entries {
                b.put_u64(e.key);
                match e.value {
                    None => b.put_u8(0),
                    Some(v) => {
                        b.put_u8(1);
                        b.put_u64(v.writer);
                        b.put_u32(v.len);
                        values += v.len as usize;
                    }
                }
                b.put_u64(e.version);
                b.put_u8(u8::from(e.locked));
            }
        }
        Msg::Lock(writes) => {
            b.put_u16(count(writes.len()));
            for &(k, expect, v) in writes {
                b.put_u64(k);
                b.put_u64(expect);
                b.put_u64(v.writer);
                b.put_u32(v.len);
                values += v.len as usize;
            }
        }
        Msg::Validate(keys) => {
            b.put_u16(count(keys.len()));
            for &(k, version) in keys {
                b.put_u64(k);
                b.put_u64(version);
            }
        }
        Msg::Reply { stamp, ok, .. } => {
            b.put_u64(*stamp);
            b.put_u8(u8::from(*ok));
        }
        Msg::Commit | Msg::Abort => {}
    }
    b.resize(b.len() + values, 0);
    b.freeze()
}

fn decode(payload: &[u8]) -> Option<(Owner, Msg)> {
    let mut r = Reader::new(payload);
    let kind = r.u8()?;
    let owner = (r.u64()?, r.u32()?);
    let mut values = 0u64;
    let msg = match kind {
        READ => {
            let n = r.count(8)?;
            Msg::Read((0..n).map(|_| r.u64()).collect::<Option<_>>()?)
        }
        READ_REPLY => {
            let stamp = r.u64()?;
            let n = r.count(18)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let key = r.u64()?;
                let value = if r.bool()? {
                    let v = r.value()?;
                    values += u64::from(v.len);
                    Some(v)
                } else {
                    None
                };
                let version = r.u64()?;
                let locked = r.bool()?;
                entries.push(ReadEntry {
                    key,
                    value,
                    version,
                    locked,
                });
            }
            Msg::ReadReply { stamp, entries }
        }
        LOCK => {
            let n = r.count(28)?;
            let mut writes = Vec::with_capacity(n);
            for _ in 0..n {
                let (k, expect) = (r.u64()?, r.u64()?);
                let v = r.value()?;
                values += u64::from(v.len);
                writes.push((k, expect, v));
            }
            Msg::Lock(writes)
        }
        VALIDATE => {
            let n = r.count(16)?;
            let keys = (0..n)
                .map(|_| Some((r.u64()?, r.u64()?)))
                .collect::<Option<_>>()?;
            Msg::Validate(keys)
        }
        LOCK_REPLY | VALIDATE_REPLY | COMMIT_REPLY => Msg::Reply {
            kind,
            stamp: r.u64()?,
            ok: r.bool()?,
        },
        COMMIT => Msg::Commit,
        ABORT => Msg::Abort,
        _ => return None,
    };
    r.finish_with(values)?;
    Some((owner, msg))
}

/// One key at a server.
#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    value: Option<Value>,
    version: u64,
    lock: Option<Owner>,
}

/// A server's part of the store.
#[derive(Debug, Default)]
struct Server {
    store: HashMap<Key, Entry>,
    /// The writes each lock holder will apply at its commit.
    staged: HashMap<Owner, Vec<(Key, Value)>>,
    /// The last stamp given: stamps strictly increase.
    last_stamp: u64,
}

impl Server {
    fn stamp(&mut self, clock: u64) -> u64 {
        self.last_stamp = clock.max(self.last_stamp + 1);
        self.last_stamp
    }

    fn entry(&self, k: Key) -> Entry {
        self.store.get(&k).copied().unwrap_or_default()
    }

    /// Free for `owner`: unlocked, or locked by it.
    fn free_for(&self, k: Key, owner: Owner) -> bool {
        self.entry(k).lock.is_none_or(|o| o == owner)
    }

    /// Handles one request; the reply to send, if any.
    fn handle(&mut self, clock: u64, owner: Owner, msg: Msg, stats: &mut KvStats) -> Option<Msg> {
        let stamp = self.stamp(clock);
        match msg {
            Msg::Read(keys) => {
                stats.reads += keys.len() as u64;
                let entries = keys
                    .into_iter()
                    .map(|key| {
                        let e = self.entry(key);
                        ReadEntry {
                            key,
                            value: e.value,
                            version: e.version,
                            locked: e.lock.is_some(),
                        }
                    })
                    .collect();
                Some(Msg::ReadReply { stamp, entries })
            }
            Msg::Lock(writes) => {
                let ok = writes.iter().all(|&(k, expect, _)| {
                    self.free_for(k, owner)
                        && (expect == ANY_VERSION || self.entry(k).version == expect)
                });
                if ok {
                    for &(k, _, _) in &writes {
                        self.store.entry(k).or_default().lock = Some(owner);
                    }
                    let staged = writes.into_iter().map(|(k, _, v)| (k, v)).collect();
                    self.staged.insert(owner, staged);
                }
                Some(Msg::Reply {
                    kind: LOCK_REPLY,
                    stamp,
                    ok,
                })
            }
            Msg::Validate(keys) => {
                let ok = keys.iter().all(|&(k, version)| {
                    self.free_for(k, owner) && self.entry(k).version == version
                });
                Some(Msg::Reply {
                    kind: VALIDATE_REPLY,
                    stamp,
                    ok,
                })
            }
            Msg::Commit => {
                for (k, v) in self.staged.remove(&owner).unwrap_or_default() {
                    let e = self.store.entry(k).or_default();
                    if e.lock == Some(owner) {
                        e.value = Some(v);
                        e.version += 1;
                        e.lock = None;
                        stats.writes += 1;
                    }
                }
                Some(Msg::Reply {
                    kind: COMMIT_REPLY,
                    stamp,
                    ok: true,
                })
            }
            Msg::Abort => {
                for (k, _) in self.staged.remove(&owner).unwrap_or_default() {
                    if let Some(e) = self.store.get_mut(&k) {
                        if e.lock == Some(owner) {
                            e.lock = None;
                        }
                    }
                }
                None
            }
            Msg::ReadReply { .. } | Msg::Reply { .. } => {
                stats.malformed += 1;
                None
            }
        }
    }
}

/// Where an attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Read,
    Lock,
    Validate,
    Commit,
    /// Aborted, waiting to be tried again.
    Backoff,
}

/// An initiator's transaction in flight.
#[derive(Debug)]
struct Txn {
    ops: Vec<Op>,
    kind: TxnKind,
    call: Instant,
    attempt: u32,
    phase: Phase,
    /// Servers that have not answered the current phase.
    waiting: Vec<u32>,
    /// What the reads returned: value and version, by key.
    reads: BTreeMap<Key, (Option<Value>, u64)>,
    /// Servers holding this attempt's locks.
    locked: Vec<u32>,
    /// The current phase failed at some server.
    failed: bool,
    /// The transaction's place: the latest stamp of its reads or of its locks.
    place: u64,
}

/// A process of the FaRM-like store: server and initiator.
#[derive(Debug)]
pub struct FarmProcess {
    cfg: KvConfig,
    gen: TxnGen,
    server: Server,
    txns: BTreeMap<u64, Txn>,
    /// Aborted transactions by the instant they are tried again.
    backoff: BTreeSet<(Instant, u64)>,
    seq: u64,
    started: bool,
    out: VecDeque<AppSend>,
    committed: VecDeque<Committed>,
    now: Instant,
    stats: KvStats,
}

impl FarmProcess {
    /// A store process; `gen` draws its transactions.
    pub fn new(cfg: KvConfig, gen: TxnGen) -> FarmProcess {
        FarmProcess {
            cfg,
            gen,
            server: Server::default(),
            txns: BTreeMap::new(),
            backoff: BTreeSet::new(),
            seq: 0,
            started: false,
            out: VecDeque::new(),
            committed: VecDeque::new(),
            now: Instant(0),
            stats: KvStats::default(),
        }
    }

    fn fill_window(&mut self) {
        while self.started && self.now < self.cfg.stop && (self.txns.len() as u32) < self.cfg.window
        {
            let txn = txn_id(self.cfg.me, self.seq);
            self.seq += 1;
            let ops = self.gen.next(txn);
            let kind = TxnKind::of(&ops);
            self.txns.insert(
                txn,
                Txn {
                    ops,
                    kind,
                    call: self.now,
                    attempt: 0,
                    phase: Phase::Backoff,
                    waiting: Vec::new(),
                    reads: BTreeMap::new(),
                    locked: Vec::new(),
                    failed: false,
                    place: 0,
                },
            );
            self.start_attempt(txn);
        }
    }

    fn send(&mut self, to: u32, owner: Owner, msg: &Msg) {
        self.out.push_back(AppSend {
            tag: owner.0,
            reliable: false,
            ordered: true,
            parts: vec![(ProcId(to), encode(owner, msg))],
        });
    }

    /// Sends one message per server, built from the keys of `items` there; the servers become
    /// the ones the transaction waits for.
    fn scatter<T: Copy>(
        &mut self,
        txn: u64,
        phase: Phase,
        items: &[(Key, T)],
        msg: impl Fn(Vec<(Key, T)>) -> Msg,
    ) {
        let mut by_server: BTreeMap<u32, Vec<(Key, T)>> = BTreeMap::new();
        for &(k, x) in items {
            by_server
                .entry(server_of(k, self.cfg.servers))
                .or_default()
                .push((k, x));
        }
        let t = self.txns.get_mut(&txn).expect("in flight");
        let owner = (txn, t.attempt);
        t.phase = phase;
        t.failed = false;
        t.waiting = by_server.keys().copied().collect();
        for (s, items) in by_server {
            self.send(s, owner, &msg(items));
        }
    }

    fn start_attempt(&mut self, txn: u64) {
        let t = self.txns.get_mut(&txn).expect("in flight");
        t.attempt += 1;
        t.reads.clear();
        t.locked.clear();
        t.place = 0;
        let gets: Vec<(Key, ())> = t
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::Get(k) => Some((*k, ())),
                Op::Put(..) => None,
            })
            .collect();
        if gets.is_empty() {
            self.lock(txn);
        } else {
            self.scatter(txn, Phase::Read, &gets, |keys| {
                Msg::Read(keys.into_iter().map(|(k, ())| k).collect())
            });
        }
    }

    fn lock(&mut self, txn: u64) {
        let t = &self.txns[&txn];
        let writes: Vec<(Key, (u64, Value))> = writes_of(&t.ops)
            .into_iter()
            .map(|(k, v)| (k, (t.reads.get(&k).map_or(ANY_VERSION, |r| r.1), v)))
            .collect();
        self.scatter(txn, Phase::Lock, &writes, |w| {
            Msg::Lock(w.into_iter().map(|(k, (e, v))| (k, e, v)).collect())
        });
    }

    /// Validates the keys only read, or goes on if there are none.
    fn validate(&mut self, txn: u64) {
        let t = &self.txns[&txn];
        let written: BTreeSet<Key> = writes_of(&t.ops).into_iter().map(|w| w.0).collect();
        let keys: Vec<(Key, u64)> = t
            .reads
            .iter()
            .filter(|(k, _)| !written.contains(k))
            .map(|(&k, &(_, version))| (k, version))
            .collect();
        if keys.is_empty() {
            self.after_validation(txn);
        } else {
            self.scatter(txn, Phase::Validate, &keys, Msg::Validate);
        }
    }

    fn after_validation(&mut self, txn: u64) {
        let t = self.txns.get_mut(&txn).expect("in flight");
        if t.kind == TxnKind::ReadOnly {
            self.complete(txn);
            return;
        }
        let owner = (txn, t.attempt);
        t.phase = Phase::Commit;
        t.failed = false;
        t.waiting = t.locked.clone();
        for s in t.locked.clone() {
            self.send(s, owner, &Msg::Commit);
        }
    }

    fn abort(&mut self, txn: u64) {
        self.stats.aborts += 1;
        let t = self.txns.get_mut(&txn).expect("in flight");
        let owner = (txn, t.attempt);
        t.phase = Phase::Backoff;
        let locked = std::mem::take(&mut t.locked);
        // Randomized so that conflicting initiators do not retry in lockstep.
        let spread = 1000 + mix(txn ^ u64::from(t.attempt) << 48) % 1000;
        let wait = BACKOFF_BASE_NS << (t.attempt - 1).min(6);
        let at = Instant(self.now.as_nanos() + wait * spread / 1000);
        self.backoff.insert((at, txn));
        for s in locked {
            self.send(s, owner, &Msg::Abort);
        }
    }

    fn complete(&mut self, txn: u64) {
        let t = self.txns.remove(&txn).expect("in flight");
        match t.kind {
            TxnKind::ReadOnly => self.stats.committed_ro += 1,
            TxnKind::WriteOnly => self.stats.committed_wo += 1,
            TxnKind::ReadWrite => self.stats.committed_rw += 1,
        }
        let reads = t
            .ops
            .iter()
            .filter_map(|o| match *o {
                Op::Get(k) => Some((k, t.reads.get(&k).and_then(|r| r.0))),
                Op::Put(..) => None,
            })
            .collect();
        self.committed.push_back(Committed {
            txn,
            client: self.cfg.me.0,
            kind: t.kind,
            ts: t.place,
            reads,
            writes: writes_of(&t.ops),
            call_ns: t.call.as_nanos(),
            return_ns: self.now.as_nanos(),
            attempts: t.attempt,
        });
    }

    /// A reply from server `src` to attempt `owner`.
    fn on_reply(&mut self, src: u32, owner: Owner, msg: Msg) {
        let Some(t) = self.txns.get_mut(&owner.0).filter(|t| t.attempt == owner.1) else {
            self.stats.stale_replies += 1;
            return;
        };
        let Some(i) = t.waiting.iter().position(|&s| s == src) else {
            self.stats.stale_replies += 1;
            return;
        };
        let expected = match t.phase {
            Phase::Read => READ_REPLY,
            Phase::Lock => LOCK_REPLY,
            Phase::Validate => VALIDATE_REPLY,
            Phase::Commit => COMMIT_REPLY,
            Phase::Backoff => 0,
        };
        match msg {
            Msg::ReadReply { stamp, entries } if expected == READ_REPLY => {
                t.place = t.place.max(stamp);
                for e in entries {
                    t.failed |= e.locked;
                    t.reads.insert(e.key, (e.value, e.version));
                }
            }
            Msg::Reply { kind, stamp, ok } if kind == expected => {
                t.failed |= !ok;
                if kind == LOCK_REPLY {
                    if ok {
                        t.locked.push(src);
                    }
                    // A writing transaction's place is its last lock (every read came before).
                    t.place = t.place.max(stamp);
                }
            }
            _ => {
                self.stats.malformed += 1;
                return;
            }
        }
        t.waiting.swap_remove(i);
        if !t.waiting.is_empty() {
            return;
        }
        let (phase, failed, kind) = (t.phase, t.failed, t.kind);
        match phase {
            _ if failed => self.abort(owner.0),
            Phase::Read if kind == TxnKind::ReadOnly => {
                let servers: BTreeSet<u32> = t
                    .reads
                    .keys()
                    .map(|&k| server_of(k, self.cfg.servers))
                    .collect();
                if servers.len() == 1 {
                    self.complete(owner.0);
                } else {
                    self.validate(owner.0);
                }
            }
            Phase::Read => self.lock(owner.0),
            Phase::Lock => self.validate(owner.0),
            Phase::Validate => self.after_validation(owner.0),
            Phase::Commit => self.complete(owner.0),
            Phase::Backoff => {}
        }
    }
}

/// SplitMix64's finalizer: a well-spread hash.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl App for FarmProcess {
    fn handle(&mut self, now: Instant, input: AppInput<'_>) {
        self.now = self.now.max(now);
        match input {
            AppInput::Deliver { src, payload, .. } => match decode(payload) {
                Some((owner, msg @ (Msg::ReadReply { .. } | Msg::Reply { .. }))) => {
                    self.on_reply(src.0, owner, msg);
                }
                Some((owner, msg)) => {
                    let clock = self.now.as_nanos();
                    if let Some(reply) = self.server.handle(clock, owner, msg, &mut self.stats) {
                        self.send(src.0, owner, &reply);
                    }
                }
                None => self.stats.malformed += 1,
            },
            AppInput::Timeout => {
                if now >= self.cfg.start && self.cfg.window > 0 {
                    self.started = true;
                }
                while let Some(&(at, txn)) = self.backoff.first() {
                    if at > self.now {
                        break;
                    }
                    self.backoff.pop_first();
                    self.start_attempt(txn);
                }
            }
            _ => {}
        }
        self.fill_window();
    }

    fn poll_send(&mut self) -> Option<AppSend> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let start = (!self.started && self.cfg.window > 0).then_some(self.cfg.start);
        let retry = self.backoff.first().map(|b| b.0);
        start.into_iter().chain(retry).min()
    }
}

impl TxnApp for FarmProcess {
    fn poll_committed(&mut self) -> Option<Committed> {
        self.committed.pop_front()
    }
    fn stats(&self) -> &KvStats {
        &self.stats
    }
    fn idle(&self) -> bool {
        self.txns.is_empty()
    }
}

#[cfg(test)]
mod tests;
