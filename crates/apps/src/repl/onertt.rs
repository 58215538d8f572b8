//! 1-RTT replication on best-effort 1Pipe (§2.2.2), serving the replicated key-value service.
//!
//! **Normal case, one round trip.** A client scatters each write (put, compare-and-set) as a log
//! entry to every replica of the current view with one best-effort scattering. 1Pipe delivers
//! the entries to every replica in timestamp order (ties broken by the sender), so replicas that
//! lose nothing append the same entries in the same order. Each (client, replica) pair numbers
//! its entries, and a replica rejects an entry that leaves a gap. A replica folds the timestamp
//! of every entry it appends into a running checksum and returns it, unordered, with the entry's
//! position and output. When every replica of the view returned the same position and checksum,
//! their logs are identical up to the entry, so the write is replicated and its output (the same
//! everywhere) is final, and the client's commit point passes it. A client missing some Acks
//! after `suspect_ns` asks those replicas alone for them again: one that holds the entry answers
//! as for a duplicate (its Ack was lost); one that lacks it rejects it, which asks for a
//! recovery.
//!
//! **Reads, at any replica, in timestamp order.** A read is a best-effort message to one replica,
//! which evaluates it at its timestamp — after every entry stamped earlier, before every entry
//! stamped later — and answers once every entry before it is committed (an uncommitted one could
//! still be removed by a recovery).
//!
//! **What takes a place in 1Pipe's order** (§2.2.2: "the response message does not need to be
//! ordered by 1Pipe"; `codec::Msg::ordered`):
//!
//! | message | | why |
//! | --- | --- | --- |
//! | `Entry` (client → view) | ordered | the log's order is the timestamp order |
//! | `Read` (client → a replica) | ordered | evaluated at its timestamp |
//! | `AckAgain` (client → silent replicas) | ordered | a replica that lacks the entry rejects it because 1Pipe would have delivered the entry, stamped earlier, first |
//! | `Prepare`, `Promise`, `Accept`, `Accepted`, `Decide` (recovery) | ordered | a Prepare in the order freezes every replica at the same point of the log; Paxos would be safe in any order, and a recovery is off the normal path |
//! | `Ack` (also to an `AckAgain`), `Reject`, `ReadReply`, `View` (replica → client) | unordered | replies: each names its epoch (a read reply its read), which the client checks |
//! | `Commit` (client → view) | unordered | a fact, taken only in its epoch, not frozen, never past the log's end |
//! | `Recover` (client → replicas) | unordered | a hint: a newer view in answer, or a recovery |
//!
//! Why nothing the client relies on is overtaken. An `Ack` counts only in the epoch the client
//! is in: one that arrives after the client took a newer `View` (in any order: both are
//! unordered, and the `View` may come from another replica) is dropped, and the write, sent
//! again in the new view, is answered again (as a duplicate if it was kept). An `Ack` of epoch
//! e + 1 cannot precede that `View`: it answers an entry the client sends only in e + 1. A write
//! whose Acks all arrived before a recovery's `View` is on every replica of its view, which
//! appended it before promising (a frozen replica appends nothing), so the recovery keeps it at
//! its position. A `Reject` or `Recover` only asks for a recovery; a `ReadReply` is final for
//! its read whichever attempt it answers (each was evaluated at a timestamp between the read's
//! call and its return). Linearizability needs no ordered reply either: a write returns only
//! after the replicas delivered it, once 1Pipe's barrier passed its timestamp — every host had
//! then promised to stamp nothing below it — so any operation called later is stamped after
//! it; the same holds for a read, delivered before it is answered.
//!
//! **Commit points ride on entries.** §2.2.2 leaves how replicas learn that an entry is committed
//! to the design (a read must wait for it: an uncommitted entry could still be removed). A
//! replica cannot tell by itself — it sees no other replica's checksum — so the client, which
//! does, tells it: every `Entry` carries the client's commit point (every position below it was
//! acknowledged with agreeing checksums), and a commit point that no entry sent in the same input
//! carried goes alone at the end of that input, as an unordered `Commit` to the view. Without a
//! loss, a client whose window refills with a write sends no notice; one whose next command is a
//! read, or whose run is over, sends it at once — no read waits for a write that may never come,
//! and an unordered notice arrives sooner than the ordered one it replaces. A replica takes a
//! commit point, carried or alone, only in the epoch it names, not while frozen for a recovery
//! (its Promise reported its commit point, and the retained log must still hold what the
//! decided value keeps), and never past its log's end. It holds only positions this replica
//! appended and acknowledged in its epoch before the client sent it (or committed at an
//! earlier recovery, which keeps every committed position in place), so it is true whatever
//! becomes of the entry that carries it, and whatever order it arrives in.
//!
//! **Loss and failure: recovery by consensus.** A rejected entry, checksums that disagree, a
//! best-effort loss report (§2.1 `onepipe_send_fail_callback`), a failed process (§5.2
//! `onepipe_proc_fail_callback`) or silence start a recovery: a single-decree Paxos round per
//! epoch among the replicas. The coordinator (the lowest live replica; the others stand by in
//! rank order) collects promises from the view's live replicas — their commit points and the
//! entries after them — and, unless some replica already accepted a value for the epoch (which
//! it must then adopt), proposes the new view: the replicas that answered — every member 1Pipe
//! has not declared failed, and a majority at least — every member's own log below the highest
//! commit point (committed entries are identical everywhere), and after it only the entries
//! every answering replica holds, in timestamp order. A live replica that stays silent is asked
//! again, in a new round if need be, never left out: it could not rejoin. Once a majority
//! accepted, it is decided and every member installs it: truncates, appends, replays its state
//! machine, and tells the clients the new view and their next sequence numbers. Clients then
//! send their pending entries again: those kept are answered again, those removed are appended
//! anew. A replica that takes a ballot follows its coordinator: it no longer stands by, a
//! coordinator of a lower ballot steps down, and its watchdog starts a round only once that
//! coordinator has been silent for long. A coordinator asks again, in either phase, those that
//! have not answered, and a recovery's waits double per round of an epoch, so a round finishes
//! even where a round trip takes longer than `suspect_ns`. A replica that missed a Decide asks
//! for it as soon as it hears a Prepare of a later epoch.
//!
//! What the paper leaves open and this design settles: an entry lost to only some replicas is
//! repaired by a recovery rather than by resending to those replicas alone (a resent copy
//! would take a later timestamp there than elsewhere, and the checksums could never agree);
//! only an Ack that may have been lost is asked for again.
//! A replica excluded from a view does not rejoin (that needs a state transfer, not built).
//!
//! The code: this file holds the types and the [`App`] entry points; the client's part is in
//! `client.rs`, the replica's normal case in `replica.rs`, the recovery round in `recovery.rs`,
//! the wire format in `codec.rs`.

mod client;
mod codec;
mod recovery;
mod replica;
#[cfg(test)]
mod tests;

use super::lincheck::MaybeOp;
use super::{
    Cmd, CmdGen, Disk, Key, KvMachine, ReplApp, ReplConfig, ReplDone, ReplStats, ReplicaLog, Val,
};
use crate::{App, AppInput, AppSend};
use bytes::Bytes;
use codec::{decode, encode, Msg, Value, WireEntry};
use onepipe_proto::{Instant, ProcId};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

/// The checksum after appending an entry stamped `ts` by `client` (its `seq`th) to a log whose
/// checksum was `prev` (§2.2.2: "adds the message timestamp to the checksum").
pub(crate) fn chain(prev: u64, ts: u64, client: u32, seq: u64) -> u64 {
    let mut h = prev ^ 0x9E37_79B9_7F4A_7C15;
    for x in [ts, u64::from(client), seq] {
        h = (h ^ x).wrapping_mul(0x100_0000_01B3).rotate_left(29);
        h ^= h >> 31;
    }
    h
}

/// A log entry a replica holds.
#[derive(Clone, Debug)]
struct LogEntry {
    e: WireEntry,
    /// The checksum after it.
    checksum: u64,
    /// Its output, evaluated on the log before it.
    output: Option<Val>,
    /// When this replica appended it (local time).
    at: Instant,
}

/// A read waiting for the entries before it to commit.
#[derive(Clone, Copy, Debug)]
struct Parked {
    pos: u64,
    client: ProcId,
    rid: u64,
    value: Option<Val>,
}

/// A replica's promise: the value it accepted (with its ballot), its commit point, and its
/// entries from there.
type Promised = (Option<(u64, Value)>, u64, Vec<WireEntry>);

/// The coordinator of a recovery.
#[derive(Debug)]
struct Coord {
    ballot: u64,
    epoch: u64,
    promises: BTreeMap<u32, Promised>,
    /// Phase 2: the value proposed and who accepted it.
    proposed: Option<(Value, BTreeSet<u32>)>,
    deadline: Instant,
    /// Times the current phase's request (Phase 1a, then 2a) was sent again to the members
    /// that had not answered.
    tries: u32,
}

/// A coordinator asks a silent member this many more times before starting a new round.
const PREPARE_TRIES: u32 = 3;

/// A recovery's waits double per round started for the same epoch, up to `2^ROUND_BACKOFF_MAX`
/// times `suspect_ns` ([`round_wait_ns`]): 16 × 200 µs is far above any round trip 1Pipe takes
/// under the swarm's faults (clocks stepped back by up to 150 µs hold every barrier), and short
/// enough that a round whose messages were all lost is tried again within a few milliseconds.
const ROUND_BACKOFF_MAX: u64 = 4;

/// How long a recovery's step waits once round `ballot >> 8` of its epoch has started (round 0:
/// none yet): `suspect_ns`, doubled per round after the first. A phase whose round trip takes
/// longer than `suspect_ns` (1Pipe delivers no faster than its slowest host's clock: one that
/// stepped back holds every barrier) then fits a later round, instead of every round being
/// abandoned, or pre-empted by a standby, with its answers on their way.
fn round_wait_ns(suspect_ns: u64, ballot: u64) -> u64 {
    suspect_ns << (ballot >> 8).saturating_sub(1).min(ROUND_BACKOFF_MAX)
}

/// The replica's part of a process.
#[derive(Debug)]
struct Replica {
    epoch: u64,
    members: u64,
    /// The state with every entry before `log_start` applied, and its checksum.
    base: KvMachine,
    base_checksum: u64,
    log_start: u64,
    log: VecDeque<LogEntry>,
    /// The state with every entry of the log applied.
    spec: KvMachine,
    commit: u64,
    next_seq: HashMap<u32, u64>,
    index: HashMap<(u32, u64), u64>,
    clients: BTreeSet<u32>,
    parked: VecDeque<Parked>,
    disk: Disk,
    /// Answers waiting for their disk write, in completion order.
    acks_due: VecDeque<(Instant, ProcId, Msg)>,
    failed: BTreeSet<u32>,
    /// Frozen for a recovery: when it last took a ballot of the next epoch (a Prepare or an
    /// Accept), from which its watchdog counts the coordinator's silence.
    frozen_since: Option<Instant>,
    promised: u64,
    accepted: Option<(u64, Value)>,
    last_value: Option<Value>,
    /// Entries of the next epoch that arrived before this replica installed it.
    early: Vec<(ProcId, u64, Bytes)>,
    coord: Option<Coord>,
    /// A recovery this replica stands by to start, and for which epoch.
    want: Option<(Instant, u64)>,
    /// The watchdog's next look ([`OneRttProcess::watching`]).
    next_check: Instant,
    committed_writes: Vec<(u32, u64)>,
    committed_cmds: Vec<Cmd>,
}

/// Entries of the next epoch a replica holds before installing it, at most.
const EARLY_MAX: usize = 65_536;

/// A write a client has in flight.
#[derive(Debug)]
struct PendingWrite {
    id: u64,
    cmd: Cmd,
    call: Instant,
    sent: Instant,
    ts: Option<u64>,
    acks: BTreeMap<u32, (u64, u64, Option<Val>)>,
    /// Times, in this epoch, the replicas whose Ack is missing were asked for it again.
    asked: u32,
}

/// A client asks the replicas whose Ack of a write is missing for it again
/// ([`Msg::AckAgain`]) this many times before asking for a recovery.
const ACK_TRIES: u32 = 2;

/// A read a client has in flight.
#[derive(Debug)]
struct PendingRead {
    key: Key,
    call: Instant,
    sent: Instant,
    ts: Option<u64>,
    tries: u32,
}

/// The client's part of a process.
#[derive(Debug)]
struct Client {
    gen: CmdGen,
    epoch: u64,
    members: u64,
    next_seq: u64,
    next_id: u64,
    writes: BTreeMap<u64, PendingWrite>,
    reads: BTreeMap<u64, PendingRead>,
    recover_sent: Option<Instant>,
    failed: BTreeSet<u32>,
    done: VecDeque<ReplDone>,
    /// Its commit point: every position below it is committed (it saw every replica's checksum
    /// agree at the position before it). Positions committed stay so, at the same place,
    /// through every recovery, so it is kept across views.
    commit: u64,
    /// The highest commit point it has told the replicas, on an entry or alone.
    commit_told: u64,
}

/// Tags: writes are their sequence number, reads their id with this bit, commit notices and
/// the rest this value.
const READ_TAG: u64 = 1 << 62;
const OTHER_TAG: u64 = 1 << 63;

/// A process of 1-RTT replication: a replica (`me < replicas`), a client (a window), or both.
#[derive(Debug)]
pub struct OneRttProcess {
    cfg: ReplConfig,
    replica: Option<Replica>,
    client: Option<Client>,
    out: VecDeque<AppSend>,
    now: Instant,
    stats: ReplStats,
}

fn mask_of(ids: impl Iterator<Item = u32>) -> u64 {
    ids.fold(0, |m, i| m | (1u64 << i))
}

fn ids_of(mask: u64) -> impl Iterator<Item = u32> {
    (0..64).filter(move |i| mask & (1u64 << i) != 0)
}

impl OneRttProcess {
    /// A process of `cfg`; `gen` draws its commands if it is a client; `seed` draws its disk's
    /// jitter.
    ///
    /// # Panics
    /// If `cfg.replicas` is 0 or over 64 (a view is a 64-bit mask).
    pub fn new(cfg: ReplConfig, gen: CmdGen, seed: u64) -> OneRttProcess {
        assert!(
            (1..=64).contains(&cfg.replicas),
            "1-RTT replication takes 1 to 64 replicas, not {}",
            cfg.replicas
        );
        let members = mask_of(0..cfg.replicas);
        let replica = cfg.is_replica().then(|| Replica {
            epoch: 0,
            members,
            base: KvMachine::default(),
            base_checksum: 0,
            log_start: 0,
            log: VecDeque::new(),
            spec: KvMachine::default(),
            commit: 0,
            next_seq: HashMap::new(),
            index: HashMap::new(),
            clients: BTreeSet::new(),
            parked: VecDeque::new(),
            disk: Disk::new(cfg.disk, seed),
            acks_due: VecDeque::new(),
            failed: BTreeSet::new(),
            frozen_since: None,
            promised: 0,
            accepted: None,
            last_value: None,
            early: Vec::new(),
            coord: None,
            want: None,
            next_check: Instant(0),
            committed_writes: Vec::new(),
            committed_cmds: Vec::new(),
        });
        let client = (cfg.window > 0).then(|| Client {
            gen,
            epoch: 0,
            members,
            next_seq: 0,
            next_id: 0,
            writes: BTreeMap::new(),
            reads: BTreeMap::new(),
            recover_sent: None,
            failed: BTreeSet::new(),
            done: VecDeque::new(),
            commit: 0,
            commit_told: 0,
        });
        OneRttProcess {
            cfg,
            replica,
            client,
            out: VecDeque::new(),
            now: Instant(0),
            stats: ReplStats::default(),
        }
    }

    fn send(&mut self, tag: u64, dsts: impl Iterator<Item = u32>, m: &Msg) {
        let bytes = encode(m);
        // Nothing to processes known failed (§5.2): they will never take it.
        let failed = |d: &u32| {
            self.client.as_ref().is_some_and(|c| c.failed.contains(d))
                || self.replica.as_ref().is_some_and(|r| r.failed.contains(d))
        };
        let parts: Vec<(ProcId, Bytes)> = dsts
            .filter(|d| !failed(d))
            .map(|d| (ProcId(d), bytes.clone()))
            .collect();
        if !parts.is_empty() {
            self.out.push_back(AppSend {
                tag,
                reliable: false,
                ordered: m.ordered(),
                parts,
            });
        }
    }

    fn majority(&self) -> usize {
        self.cfg.replicas as usize / 2 + 1
    }
}

impl App for OneRttProcess {
    fn handle(&mut self, now: Instant, input: AppInput<'_>) {
        self.now = self.now.max(now);
        match input {
            AppInput::Deliver {
                src, ts, payload, ..
            } => {
                let Some(m) = decode(payload) else {
                    self.stats.malformed += 1;
                    return;
                };
                let to_client = matches!(
                    m,
                    Msg::Ack { .. } | Msg::Reject { .. } | Msg::ReadReply { .. } | Msg::View { .. }
                );
                if to_client {
                    self.client_msg(src, m);
                } else {
                    self.replica_msg(src, ts.raw(), payload, m);
                }
            }
            AppInput::Sent { tag, ts } => {
                if let Some(c) = self.client.as_mut() {
                    if tag & OTHER_TAG != 0 {
                    } else if tag & READ_TAG != 0 {
                        if let Some(r) = c.reads.get_mut(&(tag & !READ_TAG)) {
                            r.ts = Some(ts.raw());
                        }
                    } else if let Some(w) = c.writes.get_mut(&tag) {
                        w.ts = Some(ts.raw());
                    }
                }
            }
            AppInput::SendFailed { ts, .. } => {
                // §2.1's send-failure callback: a lost entry means some replica lacks it.
                let Some(c) = self.client.as_mut() else {
                    return;
                };
                let ts = ts.raw();
                if c.writes.values().any(|w| w.ts == Some(ts)) {
                    self.request_recovery();
                } else if let Some((&rid, _)) = c.reads.iter().find(|(_, r)| r.ts == Some(ts)) {
                    self.send_read(rid);
                }
            }
            AppInput::Refused { tag } => {
                // Never stamped, so delivered nowhere. A read goes to the next replica when its
                // timer fires (not at once: a refusal can come back within the send, and a
                // replica the host already knows failed would refuse it again and again); a
                // write leaves a gap that only a recovery (a new view, then everything pending
                // sent again) closes.
                if tag & (OTHER_TAG | READ_TAG) == 0 {
                    self.request_recovery();
                }
            }
            AppInput::ProcFailed { proc, .. } => {
                if let Some(c) = self.client.as_mut() {
                    c.failed.insert(proc.0);
                }
                if let Some(r) = self.replica.as_mut() {
                    r.failed.insert(proc.0);
                    self.want_recovery();
                    // Phase 1 may have waited for that member alone.
                    self.maybe_propose();
                }
            }
            AppInput::CommitReleased { .. } => {}
            AppInput::Timeout => {
                self.replica_timeout();
                self.client_timeout();
            }
        }
        self.fill_window();
        self.tell_commit();
    }

    fn poll_send(&mut self) -> Option<AppSend> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let suspect = self.cfg.suspect_ns;
        let mut t: Option<Instant> = None;
        let mut at = |x: Instant| t = Some(t.map_or(x, |y| y.min(x)));
        if let Some(c) = &self.client {
            if self.now < self.cfg.start {
                at(self.cfg.start);
            }
            if let Some(w) = c.writes.values().map(|w| w.sent).min() {
                at(Instant(w.0 + suspect));
            }
            if let Some(r) = c.reads.values().map(|r| r.sent).min() {
                at(Instant(r.0 + suspect));
            }
        }
        if let Some(r) = &self.replica {
            if let Some((d, ..)) = r.acks_due.front() {
                at(*d);
            }
            if let Some(c) = &r.coord {
                at(c.deadline);
            }
            if let Some((w, _)) = r.want {
                at(w);
            }
            if Self::watching(r) {
                at(r.next_check);
            }
        }
        t
    }
}

impl ReplApp for OneRttProcess {
    fn poll_done(&mut self) -> Option<ReplDone> {
        self.client.as_mut()?.done.pop_front()
    }
    fn stats(&self) -> &ReplStats {
        &self.stats
    }
    fn idle(&self) -> bool {
        self.client
            .as_ref()
            .is_none_or(|c| c.writes.is_empty() && c.reads.is_empty())
    }
    fn open_writes(&self) -> Vec<MaybeOp> {
        self.client.as_ref().map_or_else(Vec::new, |c| {
            c.writes
                .values()
                .map(|w| MaybeOp {
                    client: self.cfg.me.0,
                    id: w.id,
                    cmd: w.cmd,
                    call_ns: w.call.0,
                })
                .collect()
        })
    }
    fn replica_log(&self) -> Option<ReplicaLog> {
        let r = self.replica.as_ref()?;
        Some(ReplicaLog {
            replica: self.cfg.me.0,
            start: r.log_start,
            commit: r.commit,
            entries: r
                .log
                .iter()
                .map(|e| (e.e.client, e.e.id, e.checksum))
                .collect(),
            committed_writes: r.committed_writes.clone(),
            committed_cmds: r.committed_cmds.clone(),
        })
    }
    fn debug_state(&self) -> String {
        let mut s = format!("now {}", self.now.0);
        if let Some(r) = &self.replica {
            s += &format!(
                " | replica epoch {} members {:#b} log {}..{} commit {} frozen {:?} promised {} accepted {:?} want {:?} early {} parked {} acks_due {} failed {:?}",
                r.epoch,
                r.members,
                r.log_start,
                r.log_start + r.log.len() as u64,
                r.commit,
                r.frozen_since.map(|t| t.0),
                r.promised,
                r.accepted.as_ref().map(|a| a.0),
                r.want.map(|(t, e)| (t.0, e)),
                r.early.len(),
                r.parked.len(),
                r.acks_due.len(),
                r.failed,
            );
            if let Some(c) = &r.coord {
                s += &format!(
                    " coord(ballot {} epoch {} promises {:?} proposed {:?} deadline {} tries {})",
                    c.ballot,
                    c.epoch,
                    c.promises.keys().collect::<Vec<_>>(),
                    c.proposed.as_ref().map(|p| &p.1),
                    c.deadline.0,
                    c.tries
                );
            }
        }
        if let Some(c) = &self.client {
            s += &format!(
                " | client epoch {} members {:#b} next_seq {} commit {} told {} recover_sent {:?} failed {:?}",
                c.epoch,
                c.members,
                c.next_seq,
                c.commit,
                c.commit_told,
                c.recover_sent.map(|t| t.0),
                c.failed
            );
            for (seq, w) in c.writes.iter().take(3) {
                s += &format!(
                    " write(seq {seq} id {} sent {} ts {:?} acks {:?})",
                    w.id, w.sent.0, w.ts, w.acks
                );
            }
            for (id, r) in c.reads.iter().take(3) {
                s += &format!(
                    " read(id {id} sent {} ts {:?} tries {})",
                    r.sent.0, r.ts, r.tries
                );
            }
        }
        s
    }
}
