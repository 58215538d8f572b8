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

mod codec;
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

    // ----- client -----

    fn client_dsts(c: &Client) -> Vec<u32> {
        ids_of(c.members)
            .filter(|m| !c.failed.contains(m))
            .collect()
    }

    fn fill_window(&mut self) {
        let now = self.now;
        if now < self.cfg.start || now >= self.cfg.stop {
            return;
        }
        let pad = self.cfg.workload.value_size;
        let window = self.cfg.window as usize;
        loop {
            let Some(c) = self.client.as_mut() else {
                return;
            };
            if c.writes.len() + c.reads.len() >= window {
                return;
            }
            let cmd = c.gen.next_cmd();
            let id = c.next_id;
            c.next_id += 1;
            if let Cmd::Get(key) = cmd {
                c.reads.insert(
                    id,
                    PendingRead {
                        key,
                        call: now,
                        sent: now,
                        ts: None,
                        tries: 0,
                    },
                );
                self.send_read(id);
            } else {
                let seq = c.next_seq;
                c.next_seq += 1;
                c.writes.insert(
                    seq,
                    PendingWrite {
                        id,
                        cmd,
                        call: now,
                        sent: now,
                        ts: None,
                        acks: BTreeMap::new(),
                        asked: 0,
                    },
                );
                let epoch = c.epoch;
                let dsts = Self::client_dsts(c);
                c.commit_told = c.commit;
                let m = Msg::Entry {
                    epoch,
                    seq,
                    id,
                    cmd,
                    pad,
                    commit: c.commit,
                };
                self.send(seq, dsts.into_iter(), &m);
            }
        }
    }

    /// Sends read `rid` to the next replica in turn.
    fn send_read(&mut self, rid: u64) {
        let me = self.cfg.me.0;
        let Some(c) = self.client.as_mut() else {
            return;
        };
        let dsts = Self::client_dsts(c);
        let Some(r) = c.reads.get_mut(&rid) else {
            return;
        };
        // Asked again after `suspect_ns` even if no replica is left to ask now.
        r.sent = self.now;
        if dsts.is_empty() {
            return;
        }
        let dst = dsts[(me as usize + rid as usize + r.tries as usize) % dsts.len()];
        r.tries += 1;
        r.sent = self.now;
        r.ts = None;
        let key = r.key;
        self.send(READ_TAG | rid, [dst].into_iter(), &Msg::Read { rid, key });
    }

    /// Sends every pending write again, in sequence order, in the current view.
    fn resend_writes(&mut self) {
        let pad = self.cfg.workload.value_size;
        let Some(c) = self.client.as_mut() else {
            return;
        };
        let dsts = Self::client_dsts(c);
        let epoch = c.epoch;
        let commit = c.commit;
        if !c.writes.is_empty() {
            c.commit_told = commit;
        }
        let mut msgs = Vec::new();
        for (&seq, w) in c.writes.iter_mut() {
            w.acks.clear();
            w.asked = 0;
            w.sent = self.now;
            w.ts = None;
            msgs.push((
                seq,
                Msg::Entry {
                    epoch,
                    seq,
                    id: w.id,
                    cmd: w.cmd,
                    pad,
                    commit,
                },
            ));
        }
        self.stats.resent += msgs.len() as u64;
        for (seq, m) in msgs {
            self.send(seq, dsts.iter().copied(), &m);
        }
    }

    fn request_recovery(&mut self) {
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let replicas = self.cfg.replicas;
        let Some(c) = self.client.as_mut() else {
            return;
        };
        if c.recover_sent.is_some_and(|t| now.0 < t.0 + suspect) {
            return;
        }
        c.recover_sent = Some(now);
        let epoch = c.epoch;
        let dsts: Vec<u32> = (0..replicas).filter(|r| !c.failed.contains(r)).collect();
        self.send(OTHER_TAG, dsts.into_iter(), &Msg::Recover { epoch });
    }

    /// Tells the replicas a commit point none of this input's entries carried, alone (an
    /// unordered [`Msg::Commit`]): called at the end of every input, after the window was
    /// filled, so a commit point rides on the entries sent in the same input as the Ack that
    /// advanced it and goes alone otherwise — a read parked at some replica never waits for a
    /// write this client may not send.
    fn tell_commit(&mut self) {
        let Some(c) = self.client.as_mut() else {
            return;
        };
        if c.commit <= c.commit_told {
            return;
        }
        c.commit_told = c.commit;
        let m = Msg::Commit {
            epoch: c.epoch,
            upto: c.commit,
        };
        let dsts = Self::client_dsts(c);
        self.send(OTHER_TAG, dsts.into_iter(), &m);
    }

    fn finish(&mut self, id: u64, cmd: Cmd, output: Option<Val>, call: Instant) {
        let now = self.now;
        let me = self.cfg.me.0;
        let Some(c) = self.client.as_mut() else {
            return;
        };
        c.gen.observe(&cmd, output);
        c.done.push_back(ReplDone {
            client: me,
            id,
            cmd,
            output,
            call_ns: call.0,
            return_ns: now.0,
        });
        match cmd {
            Cmd::Get(_) => self.stats.gets += 1,
            Cmd::Put(..) => self.stats.puts += 1,
            Cmd::Cas { .. } => self.stats.cas += 1,
        }
    }

    fn client_msg(&mut self, src: ProcId, m: Msg) {
        let Some(c) = self.client.as_mut() else {
            return;
        };
        match m {
            Msg::Ack {
                epoch,
                seq,
                pos,
                checksum,
                output,
                ..
            } => {
                if epoch != c.epoch {
                    return;
                }
                let Some(w) = c.writes.get_mut(&seq) else {
                    return;
                };
                w.acks.insert(src.0, (pos, checksum, output));
                let members: Vec<u32> = ids_of(c.members).collect();
                if !members.iter().all(|m| w.acks.contains_key(m)) {
                    return;
                }
                // §2.2.2: replicated when every replica's checksum agrees.
                let first = w.acks.get(&members[0]).copied();
                let agree = members
                    .iter()
                    .all(|m| w.acks.get(m).map(|a| (a.0, a.1)) == first.map(|a| (a.0, a.1)));
                if !agree {
                    self.request_recovery();
                    return;
                }
                let Some(w) = c.writes.remove(&seq) else {
                    return;
                };
                // The replicas hear of it on this client's next entries, or alone at the end
                // of this input ([`OneRttProcess::tell_commit`]).
                c.commit = c.commit.max(pos + 1);
                self.finish(w.id, w.cmd, output, w.call);
                self.fill_window();
            }
            Msg::Reject { epoch, .. } => {
                if epoch == c.epoch {
                    self.request_recovery();
                }
            }
            Msg::ReadReply { rid, ok, value } => {
                if !c.reads.contains_key(&rid) {
                    return;
                }
                if ok {
                    if let Some(r) = c.reads.remove(&rid) {
                        self.finish(rid, Cmd::Get(r.key), value, r.call);
                        self.fill_window();
                    }
                } else {
                    self.send_read(rid);
                }
            }
            Msg::View {
                epoch,
                members,
                next_seq,
            } => {
                if epoch <= c.epoch {
                    return;
                }
                c.epoch = epoch;
                c.members = members;
                c.recover_sent = None;
                // Entries below `next_seq` are in the log (answered again as duplicates); the
                // rest were removed and are appended anew, from `next_seq` on.
                let first = c.writes.keys().next().copied().unwrap_or(c.next_seq);
                if next_seq > c.next_seq || next_seq < first {
                    self.stats.malformed += 1;
                }
                self.resend_writes();
                let rids: Vec<u64> = self
                    .client
                    .as_ref()
                    .map(|c| c.reads.keys().copied().collect())
                    .unwrap_or_default();
                for rid in rids {
                    self.send_read(rid);
                }
            }
            _ => self.stats.malformed += 1,
        }
    }

    // ----- replica -----

    fn end(r: &Replica) -> u64 {
        r.log_start + r.log.len() as u64
    }

    fn last_checksum(r: &Replica) -> u64 {
        r.log.back().map_or(r.base_checksum, |e| e.checksum)
    }

    fn view_for(r: &Replica, client: u32) -> Msg {
        Msg::View {
            epoch: r.epoch,
            members: r.members,
            next_seq: r.next_seq.get(&client).copied().unwrap_or(0),
        }
    }

    fn replica_msg(&mut self, src: ProcId, ts: u64, payload: &[u8], m: Msg) {
        let me = self.cfg.me.0;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        match m {
            Msg::Entry {
                epoch,
                seq,
                id,
                cmd,
                pad,
                commit,
            } => {
                let e = WireEntry {
                    ts,
                    client: src.0,
                    seq,
                    id,
                    cmd,
                    pad,
                };
                self.on_entry(src, payload, epoch, commit, e);
            }
            Msg::AckAgain { epoch, seq } => {
                if !self.takes_client_msg(src, epoch) {
                    return;
                }
                let Some(r) = self.replica.as_ref() else {
                    return;
                };
                let expected = r.next_seq.get(&src.0).copied().unwrap_or(0);
                if seq < expected {
                    self.ack_again(src, seq);
                } else {
                    // Not in the log: it was lost (or rejected), as 1Pipe delivers the entry,
                    // stamped earlier, before this request.
                    let m = Msg::Reject {
                        epoch,
                        seq,
                        expected,
                    };
                    self.send(OTHER_TAG, [src.0].into_iter(), &m);
                }
            }
            Msg::Commit { epoch, upto } => {
                if epoch == r.epoch && r.frozen_since.is_none() {
                    self.advance_commit(upto);
                }
            }
            Msg::Read { rid, key } => {
                r.clients.insert(src.0);
                if r.frozen_since.is_some() || r.members & (1 << me) == 0 {
                    let m = Msg::ReadReply {
                        rid,
                        ok: false,
                        value: None,
                    };
                    self.send(OTHER_TAG, [src.0].into_iter(), &m);
                    return;
                }
                // Evaluated at its timestamp: after every entry delivered before it.
                let p = Parked {
                    pos: Self::end(r),
                    client: src,
                    rid,
                    value: r.spec.get(key),
                };
                if r.commit >= p.pos {
                    self.answer_read(p, true);
                } else {
                    r.parked.push_back(p);
                }
            }
            Msg::Recover { epoch } => {
                if epoch < r.epoch {
                    let v = Self::view_for(r, src.0);
                    self.send(OTHER_TAG, [src.0].into_iter(), &v);
                } else if epoch == r.epoch {
                    self.want_recovery();
                }
            }
            Msg::Prepare { epoch, ballot } => self.on_prepare(src, epoch, ballot),
            Msg::Promise {
                epoch,
                ballot,
                accepted,
                commit,
                tail,
            } => self.on_promise(src.0, epoch, ballot, accepted, commit, tail),
            Msg::Accept { ballot, value } => self.on_accept(src, ballot, value),
            Msg::Accepted { epoch, ballot } => self.on_accepted(src.0, epoch, ballot),
            Msg::Decide { value } => self.install(value),
            _ => self.stats.malformed += 1,
        }
    }

    /// Whether this replica takes a client's `Entry` or `AckAgain` of epoch `epoch`: only in its
    /// own epoch, not frozen for a recovery, and as a member of the view. A client behind by an
    /// epoch is sent the current view instead.
    fn takes_client_msg(&mut self, src: ProcId, epoch: u64) -> bool {
        let me = self.cfg.me.0;
        let Some(r) = self.replica.as_ref() else {
            return false;
        };
        if epoch < r.epoch {
            let v = Self::view_for(r, src.0);
            self.send(OTHER_TAG, [src.0].into_iter(), &v);
            return false;
        }
        epoch == r.epoch && r.frozen_since.is_none() && r.members & (1 << me) != 0
    }

    /// An entry `e` of epoch `epoch` from its client `src` (`payload` as delivered), carrying
    /// the client's commit point `commit`.
    fn on_entry(&mut self, src: ProcId, payload: &[u8], epoch: u64, commit: u64, e: WireEntry) {
        let now = self.now;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if epoch == r.epoch + 1 && r.early.len() < EARLY_MAX {
            // The next epoch's, before this replica installed it: held, then taken in the
            // order 1Pipe delivered them.
            r.early.push((src, e.ts, Bytes::copy_from_slice(payload)));
            return;
        }
        if !self.takes_client_msg(src, epoch) {
            return;
        }
        // §2.2.2, piggybacked: the client's commit point, true whatever becomes of this entry
        // (it holds only positions every replica of the view acknowledged, this one included,
        // before the entry was sent), taken as the notice is: in this epoch, not frozen.
        self.advance_commit(commit);
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        r.clients.insert(src.0);
        let seq = e.seq;
        let expected = r.next_seq.get(&src.0).copied().unwrap_or(0);
        if seq < expected {
            self.stats.duplicates += 1;
            self.ack_again(src, seq);
            return;
        }
        if seq > expected {
            // §2.2.2: "the replica rejects messages with non-consecutive sequence numbers".
            self.stats.rejected += 1;
            let m = Msg::Reject {
                epoch,
                seq,
                expected,
            };
            self.send(OTHER_TAG, [src.0].into_iter(), &m);
            return;
        }
        let (pos, checksum, output) = Self::append(r, e, now);
        self.stats.appended += 1;
        let ack = Msg::Ack {
            epoch,
            members: r.members,
            seq,
            pos,
            checksum,
            output,
        };
        if r.disk.enabled() {
            let at = r.disk.write(now);
            r.acks_due.push_back((at, src, ack));
        } else {
            self.send(OTHER_TAG, [src.0].into_iter(), &ack);
        }
    }

    /// Answers `client`'s entry `seq`, in the log, again: its position, checksum and output.
    fn ack_again(&mut self, client: ProcId, seq: u64) {
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let Some(&pos) = r.index.get(&(client.0, seq)) else {
            return;
        };
        let e = &r.log[(pos - r.log_start) as usize];
        let a = Msg::Ack {
            epoch: r.epoch,
            members: r.members,
            seq,
            pos,
            checksum: e.checksum,
            output: e.output,
        };
        // Not before the original's Ack, which may still wait for its disk write (answers go
        // out in completion order).
        if let Some(&(at, ..)) = r.acks_due.back() {
            r.acks_due.push_back((at, client, a));
        } else {
            self.send(OTHER_TAG, [client.0].into_iter(), &a);
        }
    }

    /// Appends `e` to `r`'s log; its position, the checksum after it and its output.
    fn append(r: &mut Replica, e: WireEntry, now: Instant) -> (u64, u64, Option<Val>) {
        let pos = Self::end(r);
        let checksum = chain(Self::last_checksum(r), e.ts, e.client, e.seq);
        let output = r.spec.apply(&e.cmd);
        r.next_seq.insert(e.client, e.seq + 1);
        r.index.insert((e.client, e.seq), pos);
        r.log.push_back(LogEntry {
            e,
            checksum,
            output,
            at: now,
        });
        (pos, checksum, output)
    }

    fn answer_read(&mut self, p: Parked, ok: bool) {
        let m = Msg::ReadReply {
            rid: p.rid,
            ok,
            value: if ok { p.value } else { None },
        };
        self.send(OTHER_TAG, [p.client.0].into_iter(), &m);
    }

    /// Every position below `upto` is committed.
    fn advance_commit(&mut self, upto: u64) {
        let retain = self.cfg.retain;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let upto = upto.min(Self::end(r));
        if upto <= r.commit {
            return;
        }
        for p in r.commit..upto {
            let e = &r.log[(p - r.log_start) as usize].e;
            r.committed_writes.push((e.client, e.id));
            r.committed_cmds.push(e.cmd);
        }
        r.commit = upto;
        let mut ready = Vec::new();
        while r.parked.front().is_some_and(|p| p.pos <= upto) {
            ready.extend(r.parked.pop_front());
        }
        // Keep `retain` committed entries; fold older ones into the base state.
        while r.log.len() > retain && r.log_start < r.commit {
            let Some(e) = r.log.pop_front() else { break };
            r.base.apply(&e.e.cmd);
            r.base_checksum = e.checksum;
            r.index.remove(&(e.e.client, e.e.seq));
            r.log_start += 1;
        }
        for p in ready {
            self.answer_read(p, true);
        }
    }

    /// A loss or a failure is suspected: the coordinator starts a recovery at once, the others
    /// stand by in rank order — unless a recovery is under way (this replica leads one, or took
    /// a ballot of the next epoch): whether its coordinator fell silent is the watchdog's to
    /// judge. A standby that fired while its coordinator's answers were on their way would
    /// pre-empt a round about to finish.
    fn want_recovery(&mut self) {
        let me = self.cfg.me.0;
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if r.coord.is_some() || r.frozen_since.is_some() {
            return;
        }
        let rank = ids_of(r.members)
            .filter(|m| !r.failed.contains(m))
            .position(|m| m == me);
        let Some(rank) = rank else {
            return;
        };
        if rank == 0 {
            self.start_recovery();
        } else if r.want.is_none_or(|(_, e)| e != r.epoch) {
            r.want = Some((Instant(now.0 + (rank as u64 + 1) * suspect), r.epoch));
        }
    }

    fn start_recovery(&mut self) {
        let me = self.cfg.me.0;
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let round = (r.promised >> 8).max(r.coord.as_ref().map_or(0, |c| c.ballot >> 8)) + 1;
        let ballot = (round << 8) | u64::from(me);
        let epoch = r.epoch + 1;
        r.want = None;
        r.coord = Some(Coord {
            ballot,
            epoch,
            promises: BTreeMap::new(),
            proposed: None,
            deadline: Instant(now.0 + round_wait_ns(suspect, ballot)),
            tries: 0,
        });
        let dsts: Vec<u32> = ids_of(r.members)
            .filter(|m| !r.failed.contains(m))
            .collect();
        self.send(OTHER_TAG, dsts.into_iter(), &Msg::Prepare { epoch, ballot });
    }

    fn on_prepare(&mut self, src: ProcId, epoch: u64, ballot: u64) {
        let now = self.now;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if epoch == r.epoch {
            // Already installed: hand the coordinator the value.
            if let Some(v) = r.last_value.clone().filter(|v| v.epoch == epoch) {
                self.send(OTHER_TAG, [src.0].into_iter(), &Msg::Decide { value: v });
            }
            return;
        }
        if epoch > r.epoch + 1 {
            // The sender installed this replica's next epoch, whose Decide it missed: a
            // Prepare of that epoch asks the sender for the value (answered as above), rather
            // than waiting for the watchdog — by then the sender's epoch may have moved on
            // without this replica, which could never rejoin.
            let m = Msg::Prepare {
                epoch: r.epoch + 1,
                ballot: r.promised,
            };
            self.send(OTHER_TAG, [src.0].into_iter(), &m);
            return;
        }
        if epoch != r.epoch + 1 || ballot < r.promised {
            return;
        }
        Self::follow(r, ballot, now);
        let tail = r
            .log
            .iter()
            .skip((r.commit - r.log_start) as usize)
            .map(|e| e.e)
            .collect();
        let m = Msg::Promise {
            epoch,
            ballot,
            accepted: r.accepted.clone(),
            commit: r.commit,
            tail,
        };
        self.send(OTHER_TAG, [src.0].into_iter(), &m);
    }

    /// This replica takes `ballot` of the next epoch (a Prepare or an Accept): that ballot's
    /// coordinator is at work. A standby stands down, and a coordinator of a lower ballot —
    /// which can no longer win — steps down: coordinators that each start a higher round when
    /// their own is pre-empted decide nothing. The watchdog still starts a round if the
    /// coordinator falls silent.
    fn follow(r: &mut Replica, ballot: u64, now: Instant) {
        r.promised = ballot;
        r.frozen_since = Some(now);
        r.want = None;
        if r.coord.as_ref().is_some_and(|c| c.ballot < ballot) {
            r.coord = None;
        }
    }

    fn on_promise(
        &mut self,
        src: u32,
        epoch: u64,
        ballot: u64,
        accepted: Option<(u64, Value)>,
        commit: u64,
        tail: Vec<WireEntry>,
    ) {
        let Some(c) = self.replica.as_mut().and_then(|r| r.coord.as_mut()) else {
            return;
        };
        if c.ballot != ballot || c.epoch != epoch || c.proposed.is_some() {
            return;
        }
        c.promises.insert(src, (accepted, commit, tail));
        self.maybe_propose();
    }

    /// Phase 1 is over once every live member promised, a majority at least. A member is left
    /// out of the view only once 1Pipe declared it failed (§2.1 `onepipe_proc_fail_callback`:
    /// recovery goes on once "the correct replicas reach a quorum"), never for its silence:
    /// a replica left out does not rejoin (that needs a state transfer), so a view shrunk by a
    /// lost Promise tolerates one crash fewer — with three replicas, none (vopr --apps seed
    /// 101234). Silence costs no failover time: 1Pipe delivers nothing past a crashed host
    /// until it declares it failed. Phase 2 then has a deadline of its own ([`round_wait_ns`]
    /// from now), and its own tries: a round that had to fit both phases, four message delays,
    /// into one `suspect_ns` never finished where 1Pipe's delivery takes a quarter of it (a
    /// host whose clock stepped back holds every barrier).
    fn maybe_propose(&mut self) {
        let majority = self.majority();
        let (now, suspect) = (self.now, self.cfg.suspect_ns);
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let live: Vec<u32> = ids_of(r.members)
            .filter(|m| !r.failed.contains(m))
            .collect();
        let Some(c) = r.coord.as_mut() else { return };
        let all = live.iter().all(|m| c.promises.contains_key(m));
        if c.proposed.is_some() || !all || c.promises.len() < majority {
            return;
        }
        let adopted = c
            .promises
            .values()
            .filter_map(|p| p.0.clone())
            .max_by_key(|(b, _)| *b)
            .map(|(_, v)| v);
        let value = adopted.unwrap_or_else(|| {
            // Below the highest commit point every member keeps its own log (committed entries
            // are identical everywhere); after it, only what every answering replica holds.
            let keep = c.promises.values().map(|p| p.1).max().unwrap_or(0);
            let beyond = |(commit, tail): (u64, &Vec<WireEntry>)| -> Vec<WireEntry> {
                tail.iter()
                    .skip(keep.saturating_sub(commit) as usize)
                    .copied()
                    .collect()
            };
            let tails: Vec<Vec<WireEntry>> =
                c.promises.values().map(|p| beyond((p.1, &p.2))).collect();
            let sets: Vec<HashSet<(u64, u32, u64)>> = tails
                .iter()
                .map(|t| t.iter().map(|e| (e.ts, e.client, e.seq)).collect())
                .collect();
            let entries = tails
                .first()
                .map(|t| {
                    t.iter()
                        .filter(|e| sets.iter().all(|s| s.contains(&(e.ts, e.client, e.seq))))
                        .copied()
                        .collect()
                })
                .unwrap_or_default();
            Value {
                epoch: c.epoch,
                members: mask_of(c.promises.keys().copied()),
                keep,
                entries,
            }
        });
        let ballot = c.ballot;
        let dsts: Vec<u32> = ids_of(value.members).collect();
        c.proposed = Some((value.clone(), BTreeSet::new()));
        c.deadline = Instant(now.0 + round_wait_ns(suspect, ballot));
        c.tries = 0;
        self.send(OTHER_TAG, dsts.into_iter(), &Msg::Accept { ballot, value });
    }

    fn on_accept(&mut self, src: ProcId, ballot: u64, value: Value) {
        let now = self.now;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if value.epoch != r.epoch + 1 || ballot < r.promised {
            return;
        }
        Self::follow(r, ballot, now);
        let epoch = value.epoch;
        r.accepted = Some((ballot, value));
        self.send(
            OTHER_TAG,
            [src.0].into_iter(),
            &Msg::Accepted { epoch, ballot },
        );
    }

    fn on_accepted(&mut self, src: u32, epoch: u64, ballot: u64) {
        let majority = self.majority();
        let Some(c) = self.replica.as_mut().and_then(|r| r.coord.as_mut()) else {
            return;
        };
        if c.ballot != ballot || c.epoch != epoch {
            return;
        }
        let Some((value, acc)) = c.proposed.as_mut() else {
            return;
        };
        acc.insert(src);
        if acc.len() < majority {
            return;
        }
        // Chosen: accepted by a majority of the replicas.
        let value = value.clone();
        if let Some(r) = self.replica.as_mut() {
            r.coord = None;
        }
        self.stats.recoveries_led += 1;
        let dsts: Vec<u32> = ids_of(value.members).collect();
        self.send(OTHER_TAG, dsts.into_iter(), &Msg::Decide { value });
    }

    /// Installs the decided `value`: the new view and log.
    fn install(&mut self, value: Value) {
        let now = self.now;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if value.epoch != r.epoch + 1 {
            return;
        }
        let end = Self::end(r);
        if value.keep < r.log_start || value.keep > end {
            // This replica lacks entries below the kept point: it cannot take part (a state
            // transfer would be needed); it stays out of the view.
            self.stats.malformed += 1;
            return;
        }
        // Truncate at `keep`, remembering where each client's removed entries started.
        while Self::end(r) > value.keep {
            let Some(e) = r.log.pop_back() else { break };
            r.index.remove(&(e.e.client, e.e.seq));
            r.next_seq.insert(e.e.client, e.e.seq);
        }
        for e in &value.entries {
            Self::append(r, *e, now);
        }
        // Replay: the state and every output after the removals.
        r.spec = r.base.clone();
        for e in r.log.iter_mut() {
            e.output = r.spec.apply(&e.e.cmd);
        }
        let epoch = value.epoch;
        r.epoch = epoch;
        r.members = value.members;
        r.frozen_since = None;
        r.promised = 0;
        r.accepted = None;
        r.want = None;
        r.coord = None;
        r.last_value = Some(value);
        self.stats.recoveries += 1;
        let parked: Vec<Parked> = r.parked.drain(..).collect();
        let views: Vec<(u32, Msg)> = r
            .clients
            .iter()
            .map(|&c| (c, Self::view_for(r, c)))
            .collect();
        let early = std::mem::take(&mut r.early);
        let end = Self::end(r);
        self.advance_commit(end);
        for p in parked {
            self.answer_read(p, false);
        }
        for (c, v) in views {
            self.send(OTHER_TAG, [c].into_iter(), &v);
        }
        for (src, ts, payload) in early {
            if let Some(m) = decode(&payload) {
                self.replica_msg(src, ts, &payload, m);
            }
        }
    }

    fn replica_timeout(&mut self) {
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let me = self.cfg.me.0;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let mut due = Vec::new();
        while r.acks_due.front().is_some_and(|(t, ..)| *t <= now) {
            due.extend(r.acks_due.pop_front());
        }
        for (_, dst, m) in due {
            self.send(OTHER_TAG, [dst.0].into_iter(), &m);
        }
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let live: Vec<u32> = ids_of(r.members)
            .filter(|m| !r.failed.contains(m))
            .collect();
        if r.coord.as_ref().is_some_and(|c| now >= c.deadline) {
            return self.coord_deadline(live);
        }
        if let Some((at, epoch)) = r.want {
            if now >= at {
                r.want = None;
                if epoch == r.epoch {
                    self.start_recovery();
                }
                return;
            }
        }
        // Every `suspect_ns` while something is open: frozen for long (the coordinator is
        // silent), or an entry uncommitted for long (a lost commit notice, a client that died):
        // start or stand by for a recovery.
        if !Self::watching(r) || now < r.next_check {
            return;
        }
        r.next_check = Instant(now.0 + suspect);
        let Some(rank) = ids_of(r.members).position(|m| m == me) else {
            return;
        };
        let stuck = r
            .frozen_since
            .is_some_and(|t| now.0 >= t.0 + (rank as u64 + 2) * round_wait_ns(suspect, r.promised));
        let stale = r
            .log
            .get((r.commit - r.log_start) as usize)
            .is_some_and(|e| now.0 >= e.at.0 + 2 * suspect);
        if stuck && r.coord.is_none() {
            self.start_recovery();
        } else if stale && r.frozen_since.is_none() {
            self.want_recovery();
        }
    }

    /// The coordinator's deadline passed: it asks again those that have not answered (a
    /// message either way may have been lost, or be late), proposes once those are declared
    /// failed, or — having asked [`PREPARE_TRIES`] times more — starts a new round, which asks
    /// everyone again (a member that promised a higher ballot answers only a higher one).
    fn coord_deadline(&mut self, live: Vec<u32>) {
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let majority = self.majority();
        let Some(c) = self.replica.as_mut().and_then(|r| r.coord.as_mut()) else {
            return;
        };
        let (msg, missing): (Msg, Vec<u32>) = match &c.proposed {
            None => {
                let missing = live
                    .into_iter()
                    .filter(|m| !c.promises.contains_key(m))
                    .collect();
                let m = Msg::Prepare {
                    epoch: c.epoch,
                    ballot: c.ballot,
                };
                (m, missing)
            }
            Some((value, acc)) => {
                let missing = ids_of(value.members).filter(|m| !acc.contains(m)).collect();
                let m = Msg::Accept {
                    ballot: c.ballot,
                    value: value.clone(),
                };
                (m, missing)
            }
        };
        if !missing.is_empty() && c.tries < PREPARE_TRIES {
            c.tries += 1;
            c.deadline = Instant(now.0 + round_wait_ns(suspect, c.ballot));
            self.send(OTHER_TAG, missing.into_iter(), &msg);
        } else if c.proposed.is_none() && missing.is_empty() && c.promises.len() >= majority {
            self.maybe_propose();
        } else {
            self.start_recovery();
        }
    }

    /// The replica has something open its watchdog looks after.
    fn watching(r: &Replica) -> bool {
        r.frozen_since.is_some() || r.commit < Self::end(r)
    }

    fn client_timeout(&mut self) {
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let Some(c) = self.client.as_mut() else {
            return;
        };
        // §2.2.2: "in the case of packet loss, the client simply retransmits". A write whose
        // Acks are missing after `suspect_ns` asks the replicas that have not answered, in this
        // epoch, for their Ack again ([`Msg::AckAgain`]): one that holds the entry answers as
        // for a duplicate, with the position and checksum it gave the original; one that lacks
        // it (the entry was lost: 1Pipe would have delivered it first, it was stamped earlier)
        // rejects it, and the client asks for a recovery at once. Before, a missing Ack always
        // asked for a recovery, which ends in a new epoch in which every Entry and every Ack
        // must get through once more: where 1Pipe loses about a fifth of the messages on a long
        // path (1% bursty loss per link), a write to five replicas rarely did, and its client
        // asked for recoveries for ever (vopr --apps seed 105817: 54 epochs by the end of the
        // drain, its write missing some replica's Ack or Entry in each). Not the entry itself:
        // a replica lacking it would append the copy at a later timestamp than the others, and
        // a recovery, keeping only the entries every replica holds with the same timestamp,
        // would drop it and keep the client's later entries — a gap no resend fills. A lost
        // request is made again at the next timeout; once the tries are spent, or every
        // replica answered and the checksums disagree, the client asks for a recovery.
        let dsts = Self::client_dsts(c);
        let epoch = c.epoch;
        let mut again = Vec::new();
        let mut recover = false;
        for (&seq, w) in c.writes.iter_mut() {
            if now.0 < w.sent.0 + suspect {
                continue;
            }
            w.sent = now;
            let missing: Vec<u32> = dsts
                .iter()
                .copied()
                .filter(|d| !w.acks.contains_key(d))
                .collect();
            if missing.is_empty() || w.asked >= ACK_TRIES {
                recover = true;
                continue;
            }
            w.asked += 1;
            again.push((missing, Msg::AckAgain { epoch, seq }));
        }
        let stale_reads: Vec<u64> = c
            .reads
            .iter()
            .filter(|(_, r)| now.0 >= r.sent.0 + suspect)
            .map(|(&id, _)| id)
            .collect();
        if recover {
            for w in c.writes.values_mut() {
                w.sent = now;
            }
            self.request_recovery();
        }
        for (missing, m) in again {
            self.send(OTHER_TAG, missing.into_iter(), &m);
        }
        for rid in stale_reads {
            self.send_read(rid);
        }
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
