//! MultiPaxos with batching and pipelining, serving the replicated key-value service on direct
//! messages — the scheme of Santos and Schiper, "Tuning Paxos for high-throughput with batching
//! and pipelining" (`../shared/papers/paxos-batching-pipelining.txt`, cited below as \[SS\]).
//!
//! * **Normal case** (\[SS\] §II-A): replica 0 starts as the leader with ballot 0, which no other
//!   replica can own, so it skips Phase 1. Clients send requests to the leader; it queues them,
//!   packs them into batches and runs Phase 2 for up to WND instances at once (\[SS\] §II-B/C),
//!   under Fig. 6's policy (\[SS\] §IV-A, see `PaxosProcess::try_propose`). An instance is
//!   decided when a strict majority of the replicas accepted it (`PaxosProcess::majority`).
//!   Every replica executes decided instances in instance order; the leader replies. Reads go
//!   through the log like writes, so every operation is linearizable without leases.
//! * **Followers learn** the decided prefix from a `commit` carried by every Accept and by the
//!   leader's Decide (its heartbeat, and sent at once when the leader has nothing to propose). A
//!   follower counts its accepted value at an instance as decided only if it accepted it in the
//!   leader's ballot; otherwise it fetches the decided value (Fetch, answered by Learn).
//! * **Leader change**: a follower that has heard nothing from the leader for
//!   `election_timeout_ns` (or is told it failed) runs Phase 1 with a higher ballot
//!   (`round · replicas + id`), the replicas after the failed leader staggered by rank. On a
//!   majority of promises it catches up to the most advanced promiser's decided prefix, then
//!   re-proposes the highest-ballot value of each later instance it does not know decided and
//!   fills gaps with no-ops.
//! * **Exactly once**: a table per client of the outputs of its executed requests, pruned below
//!   the client's `acked` point (carried in each request, so every replica prunes alike), makes
//!   a resent request a duplicate that is answered, not applied again.
//!
//! What this is not: replicas are crash-stop (no restart, no state transfer: a replica more
//! than `retain` instances behind cannot catch up by Fetch), only Phase 2b waits for the disk
//! (promises are not made durable), and the membership is fixed.
//!
//! Call order, as every [`App`]: `handle`, drain `poll_send`, re-arm from `poll_timeout`.
//!
//! The code: this file holds the settings, the types, the dispatch of inputs and the invariants;
//! the client is in `client.rs`, the leader's Phase 2 in `leader.rs`, the acceptor and learner
//! in `acceptor.rs`, the leader change (Phase 1) in `election.rs`, the wire format in
//! `codec.rs`.

use super::MAX_VALUE_SIZE;
use super::{Cmd, CmdGen, Disk, ReplApp, ReplConfig, ReplDone, ReplStats, ReplicaLog, Val};
use crate::wire::Reader;
use crate::{App, AppInput, AppSend};
use bytes::{BufMut, Bytes, BytesMut};
use onepipe_proto::{Instant, ProcId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use codec::{decode, encode, Msg};

/// The largest WND: instances a leader keeps in Phase 2 at once.
pub const WND_MAX: u32 = 1_024;
/// The largest BSZ, bytes.
pub const BSZ_MAX: u32 = 1 << 20;
/// The most replicas (acknowledgements are a bit set).
pub const REPLICAS_MAX: u32 = 64;
/// Requests a leader holds waiting for a batch; more are refused (the client resends).
pub const QUEUE_LEN_MAX: usize = 16_384;
/// The span of ids a client may have between its oldest operation in flight and its next one:
/// it bounds each client's entry in the replicas' client table.
pub const CLIENT_ID_SPAN_MAX: u64 = 4_096;
/// Requests in one batch (the count is a `u16` on the wire).
const BATCH_REQUESTS_MAX: usize = 4_096;
/// An acceptor accepts nothing this many instances past its decided prefix: it bounds its log
/// beyond the prefix, and so a promise.
const ACCEPT_AHEAD_MAX: u64 = 4_096;
/// Instances one Fetch asks for.
const FETCH_INSTANCES_MAX: u64 = 64;
/// Phase 2b answers waiting for the disk.
const DISK_QUEUE_LEN_MAX: usize = 8_192;
/// The largest ballot: larger ones on the wire are malformed, so rounds never overflow.
const BALLOT_MAX: u64 = 1 << 62;
/// The ballot a promise reports for a decided slot: above every real ballot, so a new leader
/// always picks the decided value.
const DECIDED: u64 = u64::MAX;

const _: () = assert!(WND_MAX as u64 <= ACCEPT_AHEAD_MAX);
const _: () = assert!(FETCH_INSTANCES_MAX <= ACCEPT_AHEAD_MAX);
const _: () = assert!(BATCH_REQUESTS_MAX <= u16::MAX as usize);
const _: () = assert!(ACCEPT_AHEAD_MAX <= u16::MAX as u64);
const _: () = assert!(REPLICAS_MAX <= u64::BITS);
const _: () = assert!(BALLOT_MAX < DECIDED / 2);

/// The settings of a Paxos process: the service's, and Fig. 6's (\[SS\] §IV-A).
///
/// The defaults suit the simulated data center (100 Gbit/s links, a few µs round trip): a
/// 32 KiB batch takes about 2.6 µs to send to one replica, about one round trip, so with a
/// window of 8 the leader keeps the links busy (§III's `w = f(S_batch)`) while a batch with its
/// largest request (8 KiB) still fits a 64 KB datagram. Δ_B is one round trip: the paper's
/// 10 ms is a WAN figure and would only add latency at low load here. A heartbeat every 20 µs
/// and an election after 100 µs of silence (5 heartbeats) find a failed leader well before a
/// client's `suspect_ns` (200 µs).
#[derive(Clone, Debug, PartialEq)]
pub struct PaxosConfig {
    /// The service's settings.
    pub repl: ReplConfig,
    /// WND: the most instances in Phase 2 at once (strict, \[SS\] §IV-A).
    pub wnd: u32,
    /// BSZ: the batch size, bytes (indicative: one larger request forms a batch alone).
    pub bsz: u32,
    /// Δ_B: a batch is proposed when its oldest request has waited this long, ns.
    pub delta_b_ns: u64,
    /// The leader sends a Decide to followers it has sent nothing for this long, ns.
    pub heartbeat_ns: u64,
    /// A follower that has heard nothing from the leader for this long starts Phase 1, ns.
    pub election_timeout_ns: u64,
    /// The leader's reply carries the request's padding back, as \[SS\] §IV-B's echo service
    /// answers with the request's bytes (`S_ans = S_req`); otherwise a reply is its output only.
    pub echo: bool,
}

impl PaxosConfig {
    /// `repl` with the default WND, BSZ, Δ_B and timeouts (see [`PaxosConfig`]).
    pub fn new(repl: ReplConfig) -> PaxosConfig {
        PaxosConfig {
            repl,
            wnd: 8,
            bsz: 32 << 10,
            delta_b_ns: 5_000,
            heartbeat_ns: 20_000,
            election_timeout_ns: 100_000,
            echo: false,
        }
    }

    /// Checks the settings, naming the bad one.
    pub fn validate(&self) -> Result<(), String> {
        let r = &self.repl;
        if r.replicas == 0 || r.replicas > REPLICAS_MAX || r.procs < r.replicas {
            return Err(format!(
                "replicas must be 1..={REPLICAS_MAX} and at most procs"
            ));
        }
        if r.me.0 >= r.procs {
            return Err(format!("process {} is not one of {}", r.me.0, r.procs));
        }
        if u64::from(r.window) > CLIENT_ID_SPAN_MAX {
            return Err(format!("window must be at most {CLIENT_ID_SPAN_MAX}"));
        }
        if self.wnd == 0 || self.wnd > WND_MAX {
            return Err(format!("wnd must be 1..={WND_MAX}"));
        }
        if self.bsz == 0 || self.bsz > BSZ_MAX {
            return Err(format!("bsz must be 1..={BSZ_MAX} bytes"));
        }
        if self.heartbeat_ns == 0 || self.election_timeout_ns <= self.heartbeat_ns {
            return Err("the election timeout must exceed a non-zero heartbeat".into());
        }
        r.workload.validate()
    }
}

/// Counters of a Paxos process, beyond [`ReplStats`]. Of those, a Paxos process counts: `gets`,
/// `puts`, `cas` (a client's completions), `appended` (requests a replica executed),
/// `duplicates` (requests not applied again: executed already, or queued already), `recoveries`
/// (higher ballots a replica followed), `recoveries_led` (Phase 1 runs won), `resent` (a
/// client's resends) and `malformed`; `rejected` stays 0 (see `refused`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaxosStats {
    /// Instances this process decided as leader, and the requests they carried (no-ops carry
    /// none): their ratio is the mean batch (\[SS\] §IV-B).
    pub instances_decided: u64,
    /// See `instances_decided`.
    pub requests_decided: u64,
    /// The time integral of the active instances while leading (ns · instances), and the time
    /// led (ns), as of the last change: their ratio is the mean number of active instances.
    pub active_ns_sum: u64,
    /// See `active_ns_sum`.
    pub leading_ns: u64,
    /// The most instances active at once.
    pub active_max: u64,
    /// Phase 1 runs started, and won.
    pub phase1_runs: u64,
    /// See `phase1_runs`.
    pub phase1_won: u64,
    /// Times this replica stepped down (it heard a higher ballot while leading or a candidate).
    pub step_downs: u64,
    /// Requests refused because the leader's queue was full.
    pub refused: u64,
    /// Requests answered with a redirect.
    pub redirects: u64,
    /// Accepts sent again (no majority after two heartbeats).
    pub retransmits: u64,
    /// Fetches sent, and decided instances learned from a Learn.
    pub fetches: u64,
    /// See `fetches`.
    pub learned: u64,
    /// Accepts or Learns dropped: too far past the decided prefix, or the disk queue full.
    pub ahead_dropped: u64,
}

impl core::ops::AddAssign<&PaxosStats> for PaxosStats {
    /// Sums the counters of several processes (each leader counts its own instances);
    /// `active_max` is the largest.
    fn add_assign(&mut self, o: &PaxosStats) {
        self.instances_decided += o.instances_decided;
        self.requests_decided += o.requests_decided;
        self.active_ns_sum += o.active_ns_sum;
        self.leading_ns += o.leading_ns;
        self.active_max = self.active_max.max(o.active_max);
        self.phase1_runs += o.phase1_runs;
        self.phase1_won += o.phase1_won;
        self.step_downs += o.step_downs;
        self.refused += o.refused;
        self.redirects += o.redirects;
        self.retransmits += o.retransmits;
        self.fetches += o.fetches;
        self.learned += o.learned;
        self.ahead_dropped += o.ahead_dropped;
    }
}

impl PaxosStats {
    /// The mean number of active instances while leading.
    pub fn active_mean(&self) -> f64 {
        self.active_ns_sum as f64 / self.leading_ns.max(1) as f64
    }
    /// The mean requests per decided instance.
    pub fn batch_mean(&self) -> f64 {
        self.requests_decided as f64 / self.instances_decided.max(1) as f64
    }
}

/// A client's request, as it travels alone and inside a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Request {
    client: u32,
    id: u64,
    /// Every id of this client below this one has completed (its oldest in flight).
    acked: u64,
    cmd: Cmd,
    /// Bytes of value padding (a write's value size).
    pad: u32,
}

/// Bytes of a request without its padding and command: client, id, acked, padding length.
const REQUEST_FIXED_LEN: usize = 4 + 8 + 8 + 4;
/// The shortest command (a get): kind and key.
const CMD_LEN_MIN: usize = 1 + 8;

impl Request {
    /// Its size in a batch, bytes (Fig. 6's `|r|`).
    fn wire_len(&self) -> usize {
        let cmd = match self.cmd {
            Cmd::Get(_) => CMD_LEN_MIN,
            Cmd::Put(..) => 1 + 16,
            Cmd::Cas { .. } => 1 + 8 + 1 + 16,
        };
        REQUEST_FIXED_LEN + cmd + self.pad as usize
    }
}

/// Bytes a put with a value of `value_size` takes in a batch (Fig. 6's `|r|`; \[SS\] §III's
/// `S_req` without the network's framing).
pub fn put_len(value_size: u32) -> u32 {
    let r = Request {
        client: 0,
        id: 0,
        acked: 0,
        cmd: Cmd::Put(0, 0),
        pad: value_size,
    };
    r.wire_len() as u32
}

/// Bytes of the leader's reply to a put, carrying `pad` bytes back (`S_ans` without framing).
pub fn put_reply_len(pad: u32) -> u32 {
    let reply = Msg::Reply {
        id: 0,
        output: None,
        pad,
    };
    encode(&reply).len() as u32
}

/// Bytes of a Phase 2b message (`S_ack` without framing).
pub fn accepted_len() -> u32 {
    encode(&Msg::Accepted {
        ballot: 0,
        instance: 0,
    })
    .len() as u32
}

/// An instance's value: requests in order (empty: a no-op).
type Batch = Arc<[Request]>;

/// An acceptor's slot: the value it accepted at an instance.
#[derive(Clone, Debug)]
struct Slot {
    /// The ballot it was accepted in (meaningless once learned by a Learn).
    ballot: u64,
    batch: Batch,
    /// Known decided.
    decided: bool,
    /// Its Phase 2b was sent (after the disk write).
    acked: bool,
}

/// A leader's instance in Phase 2.
#[derive(Clone, Debug)]
struct Active {
    batch: Batch,
    /// Replicas that accepted it (bit per replica).
    acks: u64,
    /// When its Accept was last sent.
    sent: Instant,
}

/// A request waiting at the leader for a batch.
#[derive(Clone, Copy, Debug)]
struct Queued {
    req: Request,
    /// Fig. 6's `r.ts`: when the leader received it.
    arrived: Instant,
}

/// The leader's state (\[SS\] §II-A: Phase 2 only, from `next` on).
#[derive(Clone, Debug)]
struct Leading {
    ballot: u64,
    /// The next instance to start.
    next: u64,
    /// Fig. 6's active instances (`w` is their count).
    active: BTreeMap<u64, Active>,
    /// The decided prefix the followers were last told.
    sent_commit: u64,
    /// When something last went to every follower.
    broadcast_at: Instant,
    /// When `active` last changed size (for the time average).
    active_since: Instant,
}

/// A candidate's state in Phase 1.
#[derive(Clone, Debug)]
struct Candidate {
    ballot: u64,
    started: Instant,
    /// Replicas that promised (bit per replica).
    promised_by: u64,
    /// The highest-ballot value reported per instance.
    best: BTreeMap<u64, (u64, Batch)>,
    /// The most advanced decided prefix reported, and who reported it.
    max_commit: u64,
    source: u32,
}

/// A replica's role: its phase, with the data each phase owns.
#[derive(Clone, Debug)]
enum Role {
    /// Following the owner of the promised ballot; `heard` is when it last heard from it.
    Follower {
        heard: Instant,
    },
    Candidate(Candidate),
    Leader(Leading),
}

/// What a replica remembers of a client's executed requests.
#[derive(Clone, Debug, Default)]
struct ClientRecord {
    /// Every id below this completed at the client (its latest `acked`).
    low: u64,
    /// Outputs of the executed ids from `low` on.
    outputs: BTreeMap<u64, Option<Val>>,
}

/// A client's operation in flight.
#[derive(Clone, Copy, Debug)]
struct ClientOp {
    cmd: Cmd,
    call: Instant,
    sent: Instant,
    /// Redirects followed since the last timeout.
    redirects: u32,
}

/// The client's closed loop.
#[derive(Clone, Debug)]
struct Client {
    gen: CmdGen,
    ops: BTreeMap<u64, ClientOp>,
    next_id: u64,
    /// The replica it believes leads, and when that one last answered.
    leader: u32,
    leader_heard: Instant,
    started: bool,
    done: VecDeque<ReplDone>,
}

/// A process of the Paxos-replicated service: a replica (`me < replicas`), a client
/// (`window > 0`), or both.
#[derive(Clone, Debug)]
pub struct PaxosProcess {
    cfg: PaxosConfig,
    me: u32,
    now: Instant,
    /// It has had its first input (see `boot`).
    booted: bool,
    client: Client,
    // The acceptor (every replica): \[SS\] §II-A, every node plays every role.
    promised: u64,
    log: BTreeMap<u64, Slot>,
    /// The decided prefix, which is also the execution point: instances below it are executed.
    commit: u64,
    role: Role,
    queue: VecDeque<Queued>,
    /// Requests queued or proposed by this leader and not executed yet.
    pending: BTreeSet<(u32, u64)>,
    failed: Vec<bool>,
    tick_at: Instant,
    last_fetch: Option<Instant>,
    /// Phase 1 runs started in a row without a leader established since (this replica's, or
    /// another's heard through its Accepts or Decides): a candidate waits `election_timeout_ns`
    /// doubled per run in a row (up to 64×) before it tries again, so a round whose messages a
    /// lossy link delays (the transport's retransmission timeout doubles too) can finish.
    phase1_streak: u32,
    disk: Disk,
    /// Phase 2b answers waiting for the disk: (write done, leader, ballot, instance).
    disk_queue: VecDeque<(Instant, u32, u64, u64)>,
    // The state machine and what the checks read.
    machine: super::KvMachine,
    table: BTreeMap<u32, ClientRecord>,
    writes: u64,
    checksum: u64,
    /// The last `retain` executed writes: (client, id, checksum after).
    entries: VecDeque<(u32, u64, u64)>,
    /// Every executed write (grows with the run: fine for simulated runs, read by the checks).
    committed_writes: Vec<(u32, u64)>,
    /// Their commands, in the same order (a checker places a dead client's writes from them).
    committed_cmds: Vec<Cmd>,
    /// Every executed request with its command, reads included (the tests' sequential check).
    #[cfg(test)]
    executed: Vec<(u32, u64, Cmd)>,
    loopback: VecDeque<Msg>,
    out: VecDeque<AppSend>,
    tag: u64,
    stats: ReplStats,
    paxos: PaxosStats,
}

/// SplitMix64's finalizer: the running checksum's mixer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl PaxosProcess {
    /// A process of `cfg`; `gen` draws its commands if it is a client.
    ///
    /// # Panics
    /// If `cfg` does not validate ([`PaxosConfig::validate`]).
    pub fn new(cfg: PaxosConfig, gen: CmdGen) -> PaxosProcess {
        if let Err(e) = cfg.validate() {
            panic!("invalid Paxos settings: {e}");
        }
        let me = cfg.repl.me.0;
        let role = if me == 0 {
            Role::Leader(Leading {
                ballot: 0,
                next: 0,
                active: BTreeMap::new(),
                sent_commit: 0,
                broadcast_at: Instant(0),
                active_since: Instant(0),
            })
        } else {
            Role::Follower { heard: Instant(0) }
        };
        PaxosProcess {
            client: Client {
                gen,
                ops: BTreeMap::new(),
                next_id: 0,
                leader: 0,
                leader_heard: Instant(0),
                started: false,
                done: VecDeque::new(),
            },
            me,
            now: Instant(0),
            booted: false,
            promised: 0,
            log: BTreeMap::new(),
            commit: 0,
            role,
            queue: VecDeque::new(),
            pending: BTreeSet::new(),
            failed: vec![false; cfg.repl.procs as usize],
            tick_at: Instant(0),
            last_fetch: None,
            phase1_streak: 0,
            disk: Disk::new(cfg.repl.disk, 0x5eed ^ u64::from(me)),
            disk_queue: VecDeque::new(),
            machine: super::KvMachine::default(),
            table: BTreeMap::new(),
            writes: 0,
            checksum: 0,
            entries: VecDeque::new(),
            committed_writes: Vec::new(),
            committed_cmds: Vec::new(),
            #[cfg(test)]
            executed: Vec::new(),
            loopback: VecDeque::new(),
            out: VecDeque::new(),
            tag: 0,
            stats: ReplStats::default(),
            paxos: PaxosStats::default(),
            cfg,
        }
    }

    /// Its Paxos counters.
    pub fn paxos_stats(&self) -> &PaxosStats {
        &self.paxos
    }

    /// The padding of `r`'s reply: the request's own with [`PaxosConfig::echo`], else none.
    fn reply_pad(&self, r: &Request) -> u32 {
        if self.cfg.echo {
            r.pad
        } else {
            0
        }
    }

    /// The quorum of both phases: a strict majority of the replicas (\[SS\] §II-A, n ≥ 2f + 1).
    fn majority(&self) -> usize {
        self.cfg.repl.replicas as usize / 2 + 1
    }

    fn is_replica(&self) -> bool {
        self.cfg.repl.is_replica()
    }

    fn replicas(&self) -> u32 {
        self.cfg.repl.replicas
    }

    /// The owner of a ballot: ballots are `round · replicas + id`.
    fn owner(&self, ballot: u64) -> u32 {
        (ballot % u64::from(self.replicas())) as u32
    }

    fn send(&mut self, dst: u32, msg: Msg) {
        if dst == self.me {
            self.loopback.push_back(msg);
            return;
        }
        self.tag += 1;
        // Best effort and unordered: Paxos needs neither a place in 1Pipe's order nor its
        // reliable service, since it resends what matters itself (the leader's Accepts, the
        // clients' requests, a follower's Fetch). The simulator's direct transport carries
        // every message alike; live, this is the unordered transport's plain datagram.
        self.out.push_back(AppSend {
            tag: self.tag,
            reliable: false,
            ordered: false,
            parts: vec![(ProcId(dst), encode(&msg))],
        });
    }

    /// Sends `msg` to the replicas in `to` (bit set), encoded once; to itself by the loopback.
    fn multicast(&mut self, to: u64, msg: Msg) {
        let bytes = encode(&msg);
        let parts: Vec<(ProcId, Bytes)> = (0..self.replicas())
            .filter(|&r| r != self.me && to & (1 << r) != 0)
            .map(|r| (ProcId(r), bytes.clone()))
            .collect();
        if self.is_replica() && to & (1 << self.me) != 0 {
            self.loopback.push_back(msg);
        }
        if !parts.is_empty() {
            self.tag += 1;
            self.out.push_back(AppSend {
                tag: self.tag,
                reliable: false,
                ordered: false,
                parts,
            });
        }
    }

    fn all_replicas(&self) -> u64 {
        u64::MAX >> (64 - self.replicas())
    }

    /// Runs what the last input made due: the messages to itself, the client's window, Fig. 6.
    fn settle(&mut self) {
        loop {
            while let Some(msg) = self.loopback.pop_front() {
                self.on_msg(self.me, msg);
            }
            self.fill_window();
            self.try_propose();
            if self.loopback.is_empty() {
                break;
            }
        }
        self.send_decide_if_idle();
    }

    fn on_msg(&mut self, src: u32, msg: Msg) {
        let replica_msg = !matches!(
            msg,
            Msg::Request(_) | Msg::Reply { .. } | Msg::Redirect { .. }
        );
        let from_replica = src < self.replicas();
        let owned = match msg {
            Msg::Accept { ballot, .. } | Msg::Decide { ballot, .. } => self.owner(ballot) == src,
            Msg::Prepare { ballot, .. } => self.owner(ballot) == src,
            _ => true,
        };
        let ok = match &msg {
            Msg::Request(_) => self.is_replica(),
            Msg::Reply { .. } | Msg::Redirect { .. } => self.cfg.repl.window > 0 && from_replica,
            _ => replica_msg && self.is_replica() && from_replica && owned,
        };
        if !ok {
            self.stats.malformed += 1;
            return;
        }
        match msg {
            Msg::Request(r) => self.on_request(src, r),
            Msg::Reply { id, output, .. } => self.on_reply(src, id, output),
            Msg::Redirect { id, leader } => self.on_redirect(src, id, leader),
            Msg::Accept {
                ballot,
                instance,
                commit,
                batch,
            } => self.on_accept(src, ballot, instance, commit, batch),
            Msg::Accepted { ballot, instance } => self.on_accepted(src, ballot, instance),
            Msg::Decide { ballot, commit } => self.on_decide(src, ballot, commit),
            Msg::Prepare { ballot, from } => self.on_prepare(src, ballot, from),
            Msg::Promise {
                ballot,
                commit,
                slots,
            } => self.on_promise(src, ballot, commit, slots),
            Msg::Reject { ballot } => self.on_reject(ballot),
            Msg::Fetch { from } => self.on_fetch(src, from),
            Msg::Learn { instance, batch } => self.on_learn(instance, batch),
        }
    }

    fn on_proc_failed(&mut self, proc: u32) {
        let Some(f) = self.failed.get_mut(proc as usize) else {
            return;
        };
        *f = true;
        if self.cfg.repl.window > 0 && self.client.leader == proc {
            self.next_leader_guess();
        }
        if self.is_replica() && proc == self.owner(self.promised) {
            if let Role::Follower { heard } = &mut self.role {
                // As if the election timeout had just passed: only the rank's stagger is left.
                *heard = self.now - self.cfg.election_timeout_ns;
                self.tick_at = self.tick_at.min(self.now);
            }
        }
    }

    /// A replica's periodic work (every `heartbeat_ns`).
    fn replica_tick(&mut self) {
        self.tick_at = self.now + self.cfg.heartbeat_ns;
        match &self.role {
            Role::Leader(_) => self.leader_tick(),
            Role::Follower { heard } => {
                if self.election_deadline(*heard) <= self.now {
                    self.start_phase1();
                }
            }
            Role::Candidate(c) => {
                let backoff = self.phase1_streak.saturating_sub(1).min(6);
                if c.started + (self.cfg.election_timeout_ns << backoff) <= self.now {
                    self.start_phase1();
                } else {
                    self.try_lead();
                }
            }
        }
    }

    /// The first input, at `now`: a follower counts the leader's silence, and the leader its
    /// time leading, from its start rather than from the clock's zero (a simulated clock starts
    /// at its epoch, seconds in: else every follower would run Phase 1 at once).
    fn boot(&mut self, now: Instant) {
        self.booted = true;
        match &mut self.role {
            Role::Follower { heard } => *heard = now,
            Role::Leader(l) => l.active_since = now,
            Role::Candidate(_) => {}
        }
    }

    #[cfg(debug_assertions)]
    fn invariants(&self) {
        assert!(self.queue.len() <= QUEUE_LEN_MAX);
        assert!(self.disk_queue.len() <= DISK_QUEUE_LEN_MAX);
        assert!(
            self.loopback.is_empty(),
            "the loopback drains within handle"
        );
        if let Some((&last, _)) = self.log.last_key_value() {
            assert!(
                last < self.commit + ACCEPT_AHEAD_MAX,
                "log past the accept bound"
            );
        }
        assert!(!self.log.get(&self.commit).is_some_and(|s| s.decided));
        match &self.role {
            Role::Leader(l) => {
                assert!(
                    self.promised == l.ballot,
                    "a leader promised its own ballot"
                );
                assert!(l.next >= self.commit);
                assert!(
                    self.log.range(l.next..).all(|(_, s)| !s.decided),
                    "a leader starts new instances past every one it knows decided"
                );
                assert!(
                    (l.active.keys()).all(|i| !self.log.get(i).is_some_and(|s| s.decided)),
                    "a leader's window holds no instance it knows decided"
                );
                assert!(
                    l.active.keys().all(|&i| i >= self.commit && i < l.next),
                    "commit {} next {} active {:?}",
                    self.commit,
                    l.next,
                    l.active.keys().collect::<Vec<_>>()
                );
            }
            Role::Candidate(c) => assert!(self.promised == c.ballot),
            Role::Follower { .. } => assert!(self.pending.is_empty() && self.queue.is_empty()),
        }
    }
}

impl App for PaxosProcess {
    fn handle(&mut self, now: Instant, input: AppInput<'_>) {
        if !self.booted {
            self.boot(now);
        }
        self.now = self.now.max(now);
        match input {
            AppInput::Deliver { src, payload, .. } => match decode(payload) {
                Some(msg) if src.0 < self.cfg.repl.procs => self.on_msg(src.0, msg),
                _ => self.stats.malformed += 1,
            },
            AppInput::ProcFailed { proc, .. } => self.on_proc_failed(proc.0),
            AppInput::Timeout => {
                if self.cfg.repl.window > 0 && !self.client.started {
                    self.client.started = self.now >= self.cfg.repl.start;
                }
                self.client_timeout();
                if self.is_replica() {
                    self.disk_done();
                    if self.tick_at <= self.now {
                        self.replica_tick();
                    }
                }
            }
            _ => {}
        }
        self.settle();
        #[cfg(debug_assertions)]
        if self.is_replica() {
            self.invariants();
        }
    }

    fn poll_send(&mut self) -> Option<AppSend> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let c = &self.client;
        let client = self.cfg.repl.window > 0;
        let start = (client && !c.started).then_some(self.cfg.repl.start);
        let suspect = c
            .ops
            .values()
            .map(|op| op.sent + self.cfg.repl.suspect_ns)
            .min();
        let replica = self.is_replica().then(|| {
            let disk = self.disk_queue.front().map(|d| d.0);
            [Some(self.tick_at), disk, self.batch_deadline()]
        });
        (start.into_iter().chain(suspect))
            .chain(replica.into_iter().flatten().flatten())
            .min()
    }
}

impl ReplApp for PaxosProcess {
    fn poll_done(&mut self) -> Option<ReplDone> {
        self.client.done.pop_front()
    }
    fn stats(&self) -> &ReplStats {
        &self.stats
    }
    fn idle(&self) -> bool {
        let leading = match &self.role {
            Role::Leader(l) => !l.active.is_empty() || !self.queue.is_empty(),
            _ => false,
        };
        self.client.ops.is_empty() && !leading
    }
    fn paxos_stats(&self) -> Option<PaxosStats> {
        Some(self.paxos.clone())
    }
    fn open_writes(&self) -> Vec<super::lincheck::MaybeOp> {
        self.client
            .ops
            .iter()
            .filter(|(_, o)| o.cmd.is_write())
            .map(|(&id, o)| super::lincheck::MaybeOp {
                client: self.me,
                id,
                cmd: o.cmd,
                call_ns: o.call.0,
            })
            .collect()
    }
    /// Its positions are the executed writes only (reads change nothing); `commit` is their
    /// count.
    fn replica_log(&self) -> Option<ReplicaLog> {
        self.is_replica().then(|| ReplicaLog {
            replica: self.me,
            start: self.writes - self.entries.len() as u64,
            commit: self.writes,
            entries: self.entries.iter().copied().collect(),
            committed_writes: self.committed_writes.clone(),
            committed_cmds: self.committed_cmds.clone(),
        })
    }
}

mod acceptor;
mod client;
mod codec;
mod election;
mod leader;
#[cfg(test)]
mod tests;
