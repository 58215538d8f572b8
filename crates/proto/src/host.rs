//! The 1Pipe host endpoint (§4, §6.1): timestamps, scattering send, fragmentation, reorder and
//! delivery below the barrier, late drops with NAKs, and beacons on an idle uplink.
//!
//! One `Host` serves every process on one host: they share the host's timestamp counter
//! (§2.1: "each host maintains a monotonically increasing timestamp") and its barrier (the
//! first-hop switch aggregates the whole network for it), and each has its own reorder buffer and
//! delivers independently. In the UDP runtime a host usually carries one process.
//!
//! Reliable 1Pipe (§5.1) runs beside best effort in the same host: [`Host::send_reliable`] queues
//! a scattering in the send buffer ([`crate::reliable`]: credits, windows, DCTCP, retransmission);
//! reliable fragments have their own PSN space per pair, their own receive windows and reorder
//! buffers, and are released by the *commit* barrier, which the host advertises as the timestamp
//! of its oldest unacknowledged reliable message (or its clock, if none) on data packets and
//! beacons. Receivers discard duplicates before anything else and acknowledge them again.
//!
//! Best-effort losses are reported to the sender (§2.1: "detects lost packets via end-to-end ACK,
//! but does not retransmit them"): a late packet is NAKed by its receiver; receivers acknowledge
//! what arrives, and a message left unacknowledged for `rto_ns` is reported as `Lost` (it may
//! have been delivered if only its acknowledgements were lost — the callback means "possibly
//! lost", as in the paper).
//!
//! Failure handling: the host reports a silent uplink to the controller itself (§4.2, a
//! [`CtrlMsg::LinkDown`] for [`HostConfig::input_link`]); the §5.2 procedure reaches it on the
//! management network ([`Input::Mgmt`]): control messages (discard, recall, callback, resume)
//! and relays (frozen when declared failed, receiver recovery and settling, then rejoining as
//! new processes above the controller's floor).
//!
//! Driving: see [`crate::node`] for the call order. Application commands are [`Host::send`] and
//! the accessors; everything the host reports comes out of [`Node::poll_output`]: packets,
//! [`HostEvent`]s, and management messages ([`Output::Mgmt`], relays of an input ahead of its
//! control messages).

mod config;
mod events;
mod lifecycle;
mod reassembly;
mod rounds;
mod uplink;

use crate::ack::{AckBatcher, AckOwed, RecvWindow, SendTracker};
use crate::failure::{CtrlMsg, Mgmt, MgmtDest, RelayMsg};
use crate::ids::{NodeId, PortId, ProcId, Psn};
use crate::node::{Input, Node, Output};
use crate::peers::PeerVec;
use crate::reliable::{ReliableSender, ReliableStats, Rtt, Transmit, WINDOW_MAX};
use crate::reorder::{InsertError, OrderKey, ReorderBuffer};
use crate::time::{Barrier, Instant, Timestamp};
use crate::wire::{
    flags, Ack, AckBatch, Beacon, DataHeader, DataPacket, Nak, NakReason, Packet, ACK_BATCH_LEN_MAX,
};
use bytes::Bytes;
use lifecycle::Lifecycle;
use reassembly::{Reassembly, Refused};
use rounds::Rounds;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use uplink::Uplink;

/// The host's only network port: uplink out, downlink in.
pub const UPLINK: PortId = PortId(0);

pub use config::{
    HostConfig, ACK_DELAY_BE_RTO_DIVISOR_MIN, CTRL_RETRY_MAX_NS, RETRANSMIT_BURST_MAX,
};
pub use events::{Delivery, HostEvent, HostStats, SendError};

/// Most relay outputs queued before the driver drains them; beyond it the newest are dropped
/// (the retransmission timer forwards again).
const RELAY_OUT_MAX: usize = 1 << 12;

/// Most outputs whose room a drained host keeps for the next input (see `poll_output`).
const OUTPUTS_RETAINED: usize = 64;

/// One message waiting in a reorder buffer.
#[derive(Debug)]
struct Buffered {
    payload: Bytes,
    arrived: Instant,
}

/// Per local process state.
#[derive(Debug)]
struct LocalProc {
    id: ProcId,
    /// Next PSN per destination, indexed by destination process id.
    next_psn: PeerVec<Psn>,
    /// What arrived from each sender, indexed by sender process id.
    recv: PeerVec<RecvWindow>,
    reorder: ReorderBuffer<Buffered>,
    /// The reliable counterparts, allocated when the first reliable packet arrives.
    rel: Option<Box<ReliableRecv>>,
    /// The application stopped reading reliable messages (a test hook: they stay buffered).
    paused: bool,
    /// Best-effort messages the application has room for ([`Host::set_room`]); `usize::MAX`
    /// unbounded.
    room: usize,
}

/// Receive state of one local process for the reliable service.
#[derive(Debug)]
struct ReliableRecv {
    recv: PeerVec<RecvWindow>,
    reorder: ReorderBuffer<Buffered>,
}

impl ReliableRecv {
    /// The reliable receive state of a local process, made when its first reliable packet
    /// arrives.
    fn new(cfg: &HostConfig) -> Box<ReliableRecv> {
        let (recv, reorder) = receive_state(cfg);
        Box::new(ReliableRecv { recv, reorder })
    }
}

/// A local process's receive windows and reorder buffer for one service, empty.
fn receive_state(cfg: &HostConfig) -> (PeerVec<RecvWindow>, ReorderBuffer<Buffered>) {
    let (senders, stored) = (cfg.senders_max as usize, cfg.senders_stored as usize);
    (
        PeerVec::new(RecvWindow::default(), senders, stored),
        ReorderBuffer::with_senders_stored(
            cfg.senders_max,
            cfg.senders_stored,
            cfg.reorder_len_max,
        ),
    )
}

/// How many recently NAKed messages are remembered, so that the fragments of one late message
/// raise one NAK rather than one each.
const RECENT_NAKS_MAX: usize = 64;

/// The 1Pipe host endpoint. See the module docs.
#[derive(Debug)]
pub struct Host {
    cfg: HostConfig,
    procs: Vec<LocalProc>,
    /// The host's timestamp counter: the largest timestamp issued or clock value seen. Never
    /// decreases, even when the clock steps backwards (§2.1, §4.1).
    clock_ts: Timestamp,
    /// Everything below this has been delivered; arrivals below it are late (§4.1).
    barrier: Option<Timestamp>,
    /// The commit barrier from the network: reliable messages below it are delivered (§5.1).
    commit: Option<Timestamp>,
    /// The commit barrier below which every reliable message has been delivered: `commit`,
    /// unless `deliver_burst_max` left some for the next input (`deliver_backlog`).
    commit_released: Option<Timestamp>,
    /// The best-effort barrier below which every message has been delivered: `barrier`,
    /// unless some are held for want of room ([`Host::set_room`]).
    be_released: Option<Timestamp>,
    deliver_backlog: bool,
    /// Retransmissions due but left for the next inputs by `retransmit_burst_max`: packets
    /// continue them, and the timer from the instant held here (see `retransmit_due`).
    retransmit_backlog: Option<Instant>,
    /// Partially reassembled messages by (src, dst, first PSN, reliable).
    partials: Reassembly,
    /// Best-effort messages sent to other hosts, until acknowledged, NAKed or timed out.
    tracker: SendTracker,
    /// Best-effort acknowledgement delays, for the loss timeout (`rto_max_ns`).
    be_rtt: Rtt,
    /// The reliable send path.
    sender: ReliableSender,
    /// A reliable message was received here: the reliable reorder buffers exist.
    reliable_seen: bool,
    /// The highest commit barrier advertised on the uplink (kept monotone).
    commit_sent: Timestamp,
    /// Delayed ACKs, grouped by the host they go to (`HostConfig::host_of`).
    acks: AckBatcher,
    /// Scratch for the ACKs of one batch (kept to avoid an allocation per batch).
    acks_scratch: Vec<AckOwed>,
    /// Reused buffer of the ACKs `send_acks_to` builds (no allocation for a lone ACK).
    acks_out: Vec<Ack>,
    recent_naks: VecDeque<(ProcId, ProcId, Psn)>,
    /// The first-hop switch's liveness and the beacon schedule (§4.2).
    uplink: Uplink,
    outputs: VecDeque<Output<Packet, HostEvent, Mgmt>>,
    /// §5.2 relay channel: given out ahead of `outputs` (see `Node::poll_output`).
    relays: VecDeque<(MgmtDest, RelayMsg)>,
    /// §5.2: failed processes and their failure timestamps, as the controller announced.
    failed: BTreeMap<ProcId, Timestamp>,
    /// §5.2: where this host stands in its own failure procedure (declared, recovering,
    /// settled, restarted); see `lifecycle`.
    life: Lifecycle,
    /// §5.2: the failure rounds it takes part in (see `rounds`).
    rounds: Rounds,
    stats: HostStats,
}

impl Host {
    /// A host at local time `now`.
    ///
    /// # Panics
    /// On an inconsistent configuration (no processes, a process id outside `senders_max`, a
    /// zero beacon interval or MTU): those are programming errors of the caller.
    pub fn new(cfg: HostConfig, now: Instant) -> Host {
        assert!(!cfg.procs.is_empty(), "a host needs at least one process");
        assert!(
            cfg.beacon_interval_ns > 0,
            "beacon interval must be positive"
        );
        assert!(cfg.mtu_payload > 0 && cfg.mtu_payload <= crate::wire::PAYLOAD_LEN_MAX);
        assert!(cfg.message_len_max.div_ceil(cfg.mtu_payload) <= u16::MAX as usize + 1);
        assert!(
            cfg.host_of
                .as_ref()
                .is_none_or(|t| t.len() >= cfg.senders_max as usize),
            "host_of names the host of every process"
        );
        // §2.1: a best-effort ACK must reach its sender before the sender gives up on it.
        assert!(
            cfg.ack_delay_be_ns <= cfg.rto_ns / ACK_DELAY_BE_RTO_DIVISOR_MIN,
            "ack_delay_be_ns ({}) must be at most rto_ns / {ACK_DELAY_BE_RTO_DIVISOR_MIN} ({})",
            cfg.ack_delay_be_ns,
            cfg.rto_ns / ACK_DELAY_BE_RTO_DIVISOR_MIN
        );
        // The ACK batches by peer host: made at once for the hosts of the processes stored at once.
        let ack_peers = |ids: usize| match &cfg.host_of {
            Some(t) => t[..ids.min(t.len())]
                .iter()
                .map(|&h| h as usize + 1)
                .max()
                .unwrap_or(0),
            None => ids,
        };
        let (ack_peers, ack_peers_stored) = (
            ack_peers(cfg.senders_max as usize),
            ack_peers(cfg.senders_stored as usize),
        );
        let procs = cfg
            .procs
            .iter()
            .map(|&id| {
                assert!(id.0 < cfg.senders_max, "process {id} outside senders_max");
                let (recv, reorder) = receive_state(&cfg);
                LocalProc {
                    id,
                    next_psn: PeerVec::new(
                        Psn(0),
                        cfg.senders_max as usize,
                        cfg.senders_stored as usize,
                    ),
                    recv,
                    reorder,
                    rel: None,
                    paused: false,
                    room: usize::MAX,
                }
            })
            .collect();
        let uplink = Uplink::new(now, cfg.beacon_interval_ns, cfg.uplink_timeout_intervals);
        Host {
            procs,
            clock_ts: now.timestamp(),
            barrier: None,
            commit: None,
            commit_released: None,
            be_released: None,
            deliver_backlog: false,
            retransmit_backlog: None,
            partials: Reassembly::new(
                cfg.reassembly_len_max,
                cfg.message_len_max.div_ceil(cfg.mtu_payload),
            ),
            tracker: SendTracker::with_destinations_stored(
                cfg.procs.clone(),
                cfg.senders_max,
                cfg.senders_stored,
                cfg.inflight_max,
            ),
            be_rtt: Rtt::default(),
            sender: ReliableSender::new(
                cfg.reliable.clone(),
                cfg.procs.clone(),
                cfg.senders_max,
                cfg.mtu_payload,
            ),
            reliable_seen: false,
            commit_sent: now.timestamp(),
            acks: AckBatcher::with_peers_stored(ack_peers, ack_peers_stored),
            acks_scratch: Vec::new(),
            acks_out: Vec::new(),
            recent_naks: VecDeque::with_capacity(RECENT_NAKS_MAX),
            uplink,
            outputs: VecDeque::new(),
            relays: VecDeque::new(),
            life: Lifecycle::Correct { recover: false },
            failed: BTreeMap::new(),
            rounds: Rounds::default(),
            stats: HostStats::default(),
            cfg,
        }
    }

    /// A host that restarted after a crash with its state lost: its processes `cfg.procs`
    /// failed with it — a receive buffer gone, acknowledgements it can no longer honour — and
    /// it can only come back as new processes (§5.2: "the recovered process needs to join
    /// 1Pipe as a new process"; the Appendix: "If R fails permanently, atomicity is violated"
    /// for what it had acknowledged). It asks the controller at once
    /// ([`RelayMsg::RecoverRequest`], answered once it is declared failed and no round is open)
    /// and says nothing on the data network until it knows it was declared — not even a beacon:
    /// its switch must time its link out, so that the controller declares its old processes
    /// at the last commit barrier they sent. Then it settles (nothing to deliver) and rejoins.
    /// Drain [`Node::poll_output`] afterwards.
    pub fn restarted(cfg: HostConfig, now: Instant) -> Host {
        let mut h = Host::new(cfg, now);
        // Failed, at a timestamp the controller will tell: refuses sends, buffers nothing.
        h.life = Lifecycle::Restarted;
        h.ask_recovery();
        h
    }

    /// Puts back counters kept across a restart (a driver's bookkeeping: they are never reset).
    pub fn restore_stats(&mut self, stats: HostStats) {
        self.stats = stats;
    }

    /// Whether this host restarted after a crash and has not yet heard that it was declared
    /// failed (see [`Host::restarted`]).
    pub fn restart_silent(&self) -> bool {
        self.life.silent()
    }

    /// The configuration.
    pub fn config(&self) -> &HostConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &HostStats {
        &self.stats
    }

    /// The barrier below which everything has been delivered, once one has arrived.
    pub fn barrier(&self) -> Option<Barrier> {
        self.barrier.map(Barrier)
    }

    /// False once the first-hop switch has been silent for `uplink_timeout_intervals` beacon
    /// intervals (§4.2); true again as soon as anything arrives from it.
    pub fn uplink_alive(&self) -> bool {
        self.uplink.alive()
    }

    /// The commit barrier received from the network (§5.1), once one has arrived.
    pub fn commit_barrier(&self) -> Option<Barrier> {
        self.commit.map(Barrier)
    }

    /// The commit barrier below which every reliable message buffered here has been delivered:
    /// the commit barrier, or an earlier one while `deliver_burst_max` holds a backlog.
    pub fn commit_released(&self) -> Option<Barrier> {
        self.commit_released.map(Barrier)
    }

    /// Counters of the reliable sender.
    pub fn reliable_stats(&self) -> &ReliableStats {
        self.sender.stats()
    }

    /// Reliable scatterings queued and messages unacknowledged: (queued, unacked).
    pub fn reliable_pending(&self) -> (usize, usize) {
        (self.sender.queued(), self.sender.unacked())
    }

    /// The reliable messages sent and not acknowledged: (sender, receiver, first PSN,
    /// timestamp). For diagnostics.
    pub fn reliable_unacked(&self) -> Vec<(ProcId, ProcId, Psn, Timestamp)> {
        self.sender.unacked_messages()
    }

    /// Local process `dst`'s reliable receive window for sender `src`: (cumulative PSN, SACK
    /// bitmap), if it has one. For diagnostics.
    pub fn reliable_window(&self, src: ProcId, dst: ProcId) -> Option<(Psn, u64)> {
        let i = self.local_index(dst)?;
        let rel = self.procs[i].rel.as_ref()?;
        rel.recv.get(src.index()).map(|w| w.ack())
    }

    /// Payload bytes the reliable send buffer holds.
    pub fn send_buffer_bytes(&self) -> usize {
        self.sender.buffered_bytes()
    }

    /// Stops (`true`) or resumes delivering reliable messages to local process `p` — what a
    /// receiver that stops reading looks like to the protocol: its messages stay in the reorder
    /// buffer, which fills, after which it refuses and stops acknowledging new ones. Returns
    /// false if `p` is not local.
    pub fn set_paused(&mut self, now: Instant, p: ProcId, paused: bool) -> bool {
        let Some(i) = self.local_index(p) else {
            return false;
        };
        self.procs[i].paused = paused;
        self.deliver_ready(now);
        true
    }

    /// The application has room for `room` more best-effort messages to local process `p`
    /// (a full receive queue; §4.1: a receiver that cannot take a message drops it and its
    /// sender hears of it): the host accepts no more best-effort messages to `p` than that —
    /// an arrival while `room` messages wait for the barrier is refused with a `BufferFull` NAK
    /// before it is acknowledged — and delivers at most `room` before the next call
    /// (`usize::MAX`, the default: no bound). Were it ever out of room with messages below the
    /// barrier, it would hold them (delivered later, in order), and [`Host::released`] stays
    /// below them meanwhile. Returns false if `p` is not local. Drain [`Node::poll_output`]
    /// afterwards.
    pub fn set_room(&mut self, now: Instant, p: ProcId, room: usize) -> bool {
        let Some(i) = self.local_index(p) else {
            return false;
        };
        self.procs[i].room = room;
        self.deliver_ready(now);
        true
    }

    /// The best-effort room `p` has left ([`Host::set_room`]); `None` if `p` is not local.
    pub fn room(&self, p: ProcId) -> Option<usize> {
        Some(self.procs[self.local_index(p)?].room)
    }

    /// The best-effort barrier below which everything has been delivered: the barrier, unless
    /// messages below it are held for want of room ([`Host::set_room`]).
    pub fn released(&self) -> Option<Barrier> {
        self.be_released.map(Barrier)
    }

    /// The host's current timestamp (`onepipe_get_timestamp`) as of local time `now`: never
    /// below any timestamp issued before, whatever the clock did.
    pub fn timestamp(&mut self, now: Instant) -> Timestamp {
        self.clock_ts = self.clock_ts.max_wrapping(now.timestamp());
        self.clock_ts
    }

    /// Performance hint for a driver that knows one of this host's next inputs — `packet`, or a
    /// timeout if `None`: starts loading the state that handling it reads, to the depth of
    /// `stage` (see [`crate::prefetch`]). Changes nothing; any packet is fine (a bad one
    /// prefetches little).
    #[inline]
    pub fn prefetch(&self, stage: crate::prefetch::Stage, packet: Option<&Packet>) {
        use crate::prefetch::{prefetch, Stage};
        match stage {
            Stage::Fields => {
                prefetch(&self.procs);
                prefetch(&self.barrier);
                prefetch(&self.stats);
                prefetch(&self.outputs);
                prefetch(&self.acks);
                self.tracker.prefetch(stage, ProcId(0), ProcId(0));
                // What every input reads besides: the configuration, the timer sources
                // `poll_timeout` consults, the clock and uplink state (the compiler lays the
                // fields out, so each is named).
                prefetch(&self.cfg.beacon_interval_ns);
                prefetch(&self.cfg.host_of);
                self.sender.prefetch();
                prefetch(&self.relays);
                prefetch(&self.rounds);
                prefetch(&self.life);
                prefetch(&self.uplink);
                prefetch(&self.clock_ts);
                prefetch(&self.commit);
            }
            Stage::Records => {
                for lp in self.procs.iter().take(4) {
                    prefetch(lp);
                }
                self.acks.prefetch(stage);
                match packet {
                    Some(Packet::Ack(a)) => self.tracker.prefetch(stage, a.to, a.from),
                    Some(Packet::AckBatch(b)) => {
                        self.tracker.prefetch(stage, b.first().to, b.first().from)
                    }
                    _ => {}
                }
            }
            Stage::Peers => {
                // Delivery: the smallest buffered message's heap entry, whatever the input.
                for lp in self.procs.iter().take(4) {
                    lp.reorder.prefetch_front();
                }
                // The batch of delayed ACKs due next.
                self.acks.prefetch(stage);
                if let Some(p) = packet {
                    self.prefetch_peer(p);
                }
            }
            Stage::Entries => {}
        }
    }

    /// The per-peer part of [`Host::prefetch`] for `packet`.
    #[inline]
    fn prefetch_peer(&self, packet: &Packet) {
        use crate::prefetch::{prefetch, Stage};
        match packet {
            Packet::Data(d) => {
                let (src, dst) = (d.header.src, d.header.dst);
                if let Some(lp) = self.procs.iter().find(|lp| lp.id == dst) {
                    let (recv, reorder) = match (d.header.reliable(), &lp.rel) {
                        (true, Some(rel)) => (&rel.recv, &rel.reorder),
                        _ => (&lp.recv, &lp.reorder),
                    };
                    if let Some(w) = recv.get(src.index()) {
                        prefetch(w);
                    }
                    reorder.prefetch_sender(src);
                }
                // The ACK it will be owed joins its host's batch (`ack_peer`, without its
                // indexing: the packet is not validated yet).
                let peer = match &self.cfg.host_of {
                    Some(t) => t.get(src.index()).map(|&h| h as usize),
                    None => Some(src.index()),
                };
                if let Some(peer) = peer {
                    self.acks.prefetch_peer(peer);
                }
            }
            Packet::Ack(a) if !a.reliable => self.tracker.prefetch(Stage::Peers, a.to, a.from),
            Packet::AckBatch(b) => {
                for a in b.acks().iter().take(4).filter(|a| !a.reliable) {
                    self.tracker.prefetch(Stage::Peers, a.to, a.from);
                }
            }
            _ => {}
        }
    }

    /// Messages buffered for reordering, over all local processes.
    pub fn reorder_len(&self) -> usize {
        self.procs
            .iter()
            .map(|p| p.reorder.len() + p.rel.as_ref().map_or(0, |r| r.reorder.len()))
            .sum()
    }

    /// Messages sent to other hosts and not yet acknowledged, NAKed or reported lost.
    pub fn unresolved_sends(&self) -> usize {
        self.tracker.unresolved()
            + self.sender.queued()
            + self.sender.unacked()
            + self.sender.recalls_pending()
    }

    /// How full the send buffer is (§6.1): the largest fraction in use of its limits — the
    /// best-effort window (`unacked_bytes_max`), the acknowledgement tracker (`inflight_max`)
    /// and the reliable send buffer (`send_buffer_bytes_max`). Sends are refused with
    /// `SendError::Full` as it nears 1; a driver that makes refused senders wait for room can
    /// wake them once it has fallen back (the live runtime waits for half).
    pub fn send_buffer_use(&self) -> f64 {
        let part = |used: f64, max: f64| if max > 0.0 { used / max } else { 0.0 };
        let window = part(
            self.tracker.unresolved_bytes() as f64,
            self.cfg.unacked_bytes_max as f64,
        );
        let tracked = part(self.tracker.len() as f64, self.tracker.len_max() as f64);
        let reliable = part(
            self.sender.buffered_bytes() as f64,
            self.sender.config().send_buffer_bytes_max as f64,
        );
        window.max(tracked).max(reliable)
    }

    /// Whether the controller announced process `p` failed (§5.2), and when.
    pub fn failure_of(&self, p: ProcId) -> Option<Timestamp> {
        self.failed.get(&p).copied()
    }

    /// How many processes the controller announced failed (§5.2).
    pub fn failures_known(&self) -> usize {
        self.failed.len()
    }

    /// Failure rounds announced here and not completed yet (§5.2).
    pub fn failure_rounds_open(&self) -> usize {
        self.rounds.open_len()
    }

    /// ACKs scheduled and not yet sent.
    pub fn acks_pending(&self) -> usize {
        self.acks.len()
    }

    /// Messages partially reassembled.
    pub fn partial_len(&self) -> usize {
        self.partials.len()
    }

    /// The largest reorder buffer length any local process reached.
    pub fn reorder_len_peak(&self) -> usize {
        self.procs
            .iter()
            .map(|p| {
                let rel = p.rel.as_ref().map_or(0, |r| r.reorder.len_peak());
                p.reorder.len_peak().max(rel)
            })
            .max()
            .unwrap_or(0)
    }

    /// Sends a scattering from local process `src`: every message gets one timestamp (§2.1),
    /// which is returned. Messages to processes on this host skip the network but are still
    /// delivered in total order. Drain [`Node::poll_output`] afterwards.
    pub fn send(
        &mut self,
        now: Instant,
        src: ProcId,
        scattering: &[(ProcId, Bytes)],
    ) -> Result<Timestamp, SendError> {
        let src_idx = self.local_index(src).ok_or(SendError::NotLocal(src))?;
        // §5.2: a host told it failed sends nothing more as its old processes — once its link
        // came back their messages would enter a network that stopped waiting for them, below
        // every barrier; it comes back only as new processes (`ask_rejoin`).
        if self.life.failed() {
            return Err(SendError::Failed(src));
        }
        if scattering.is_empty() {
            return Err(SendError::Empty);
        }
        for (dst, msg) in scattering {
            if dst.0 >= self.cfg.senders_max {
                return Err(SendError::UnknownDestination(*dst));
            }
            if msg.len() > self.cfg.message_len_max {
                return Err(SendError::TooLarge {
                    len: msg.len(),
                    max: self.cfg.message_len_max,
                });
            }
        }
        let (mut remote, mut bytes) = (0, 0u64);
        for (dst, msg) in scattering {
            if self.local_index(*dst).is_none() {
                remote += 1;
                bytes += self.wire_len(msg.len());
            }
        }
        if !self.tracker.has_room(remote) {
            return Err(SendError::Full);
        }
        // §6.1 flow control: the window of unacknowledged bytes (an empty window takes any
        // scattering, however large).
        let unacked = self.tracker.unresolved_bytes();
        if unacked > 0 && unacked.saturating_add(bytes) > self.cfg.unacked_bytes_max {
            return Err(SendError::Full);
        }
        // §4.1: one non-decreasing timestamp for the whole scattering; the barrier field starts
        // equal to it.
        let ts = self.timestamp(now);
        for (dst, msg) in scattering {
            let psn = self.procs[src_idx].next_psn[dst.index()];
            let frags = self.sender.frags(msg.len());
            self.procs[src_idx].next_psn[dst.index()] = Psn(psn.0.wrapping_add(frags));
            self.stats.messages_sent += 1;
            if self.local_index(*dst).is_none() {
                let deadline = now + self.loss_timeout_ns();
                let bytes = u32::try_from(self.wire_len(msg.len())).unwrap_or(u32::MAX);
                self.tracker
                    .track(deadline, src, *dst, psn, frags, bytes, ts)
                    .expect("room checked above");
            }
            self.emit_message(now, src, *dst, psn, ts, msg, false);
        }
        self.deliver_ready(now);
        self.invariants();
        Ok(ts)
    }

    /// Queues a reliable scattering from local process `src` (Table 1 `onepipe_reliable_send`,
    /// §5.1). It is stamped and sent once every message fits its destination's window (§6.1);
    /// [`HostEvent::ReliableSent`] then reports its timestamp. Delivery is all-or-nothing and
    /// exactly once, in total order among reliable messages, unless a process fails. Returns
    /// the scattering's handle; `Err(SendError::Full)` if the send buffer cannot take it
    /// (nothing is queued then). Drain [`Node::poll_output`] afterwards.
    pub fn send_reliable(
        &mut self,
        now: Instant,
        src: ProcId,
        scattering: &[(ProcId, Bytes)],
    ) -> Result<u64, SendError> {
        self.local_index(src).ok_or(SendError::NotLocal(src))?;
        if self.life.failed() {
            return Err(SendError::Failed(src));
        }
        if scattering.is_empty() {
            return Err(SendError::Empty);
        }
        // A reliable message must fit one window, so that receivers never see a PSN beyond
        // their acknowledgement window (reliable.rs).
        let max = self
            .cfg
            .message_len_max
            .min(WINDOW_MAX as usize * self.cfg.mtu_payload);
        for (dst, msg) in scattering {
            if dst.0 >= self.cfg.senders_max {
                return Err(SendError::UnknownDestination(*dst));
            }
            if self.failed.contains_key(dst) {
                return Err(SendError::Failed(*dst));
            }
            if msg.len() > max {
                return Err(SendError::TooLarge {
                    len: msg.len(),
                    max,
                });
            }
        }
        // A scattering larger than the whole send buffer could never be queued: say so, rather
        // than `Full` for ever.
        let total: usize = scattering.iter().map(|(_, m)| m.len()).sum();
        let buffer = self.cfg.reliable.send_buffer_bytes_max;
        if total > buffer {
            return Err(SendError::TooLarge {
                len: total,
                max: buffer,
            });
        }
        let procs = &self.procs;
        let handle = self
            .sender
            .enqueue(src, scattering, |d| procs.iter().all(|lp| lp.id != d))
            .map_err(|_| SendError::Full)?;
        self.pump(now);
        self.deliver_ready(now);
        self.invariants();
        Ok(handle)
    }

    /// Stamps and sends every reliable scattering at the head of the send buffer that holds its
    /// credits (§6.1: "attached with the current timestamp and sent out").
    fn pump(&mut self, now: Instant) {
        while let Some(q) = self.sender.pop_ready() {
            // A destination failed while it waited (§5.2): never stamped, never sent.
            if !self.failed.is_empty() && q.messages().any(|(d, _, _)| self.failed.contains_key(&d))
            {
                self.outputs
                    .push_back(Output::Event(HostEvent::ReliableAborted {
                        handle: q.handle,
                        src: q.src,
                    }));
                self.sender.abort(q);
                continue;
            }
            let ts = self.timestamp(now);
            self.outputs
                .push_back(Output::Event(HostEvent::ReliableSent {
                    handle: q.handle,
                    src: q.src,
                    ts,
                }));
            for (dst, msg, remote) in q.messages() {
                self.stats.messages_sent += 1;
                if remote {
                    let psn = self.sender.sent(now, q.src, dst, ts, msg.clone());
                    self.emit_message(now, q.src, dst, psn, ts, msg, true);
                } else {
                    // Local: no network, no ACK; a PSN from the best-effort space only orders
                    // it among equal timestamps.
                    let si = self.local_index(q.src).expect("validated at enqueue");
                    let psn = self.procs[si].next_psn[dst.index()];
                    let frags = self.sender.frags(msg.len());
                    self.procs[si].next_psn[dst.index()] = Psn(psn.0.wrapping_add(frags));
                    self.emit_message(now, q.src, dst, psn, ts, msg, true);
                }
            }
        }
    }

    /// Retransmits a reliable message: same timestamp, same PSNs, current barriers. §5.2: if
    /// the path seems broken, the controller gets a copy to forward.
    fn retransmit(&mut self, now: Instant, t: Transmit) {
        if t.forward && self.relays.len() < RELAY_OUT_MAX {
            self.stats.forwarded += 1;
            let frags = self.sender.frags(t.payload.len());
            let packets = (0..frags)
                .map(|f| {
                    let lo = f as usize * self.cfg.mtu_payload;
                    let hi = (lo + self.cfg.mtu_payload).min(t.payload.len());
                    let mut fl = flags::RELIABLE;
                    if f + 1 == frags {
                        fl |= flags::END_OF_MESSAGE;
                    }
                    // No barriers: a relayed packet passes no switch, and barriers are
                    // aggregated hop by hop.
                    Packet::Data(DataPacket {
                        header: DataHeader {
                            flags: fl,
                            frag: f as u16,
                            ts: t.ts,
                            barrier: Timestamp::new(0),
                            commit: Timestamp::new(0),
                            psn: Psn(t.first.0.wrapping_add(f)),
                            src: t.src,
                            dst: t.dst,
                        },
                        payload: t.payload.slice(lo..hi),
                    })
                })
                .collect();
            self.relays.push_back((
                MgmtDest::Controller,
                RelayMsg::Forward {
                    from: self.cfg.node,
                    packets,
                },
            ));
        }
        self.emit_message(now, t.src, t.dst, t.first, t.ts, &t.payload, true);
    }

    /// §5.2: the controller declared this host's processes failed at `ts`. Whatever they have
    /// in flight is at or above `ts` and discarded everywhere: the send buffer is emptied (each
    /// scattering raised as [`HostEvent::Recalled`] or [`HostEvent::ReliableAborted`]) and later
    /// sends — reliable and best-effort — are refused (`SendError::Failed` naming the sender), so
    /// a host cut off but alive stops retransmitting and forwarding.
    /// Reliable delivery freezes at once: whatever is buffered waits for [`Host::recover`]'s
    /// settling (a commit barrier heard from now on — say over a healed link — no longer
    /// speaks for this host's processes: the correct hosts may recall what sits below it), and
    /// reliable data arriving from now on is dropped unacknowledged.
    fn on_own_failure(&mut self, ts: Timestamp) {
        // §5.2 "If a process recovers from failure, e.g., the network link or switch
        // recovers": a host that hears its first-hop switch (declared failed all the same —
        // a false suspicion, or a partition elsewhere) recovers at once; one cut off does when
        // it hears it again (`on_packet`), or when its driver says so (`recover`).
        let hears_switch = self.uplink.hears_switch();
        match self.life.declared(ts, hears_switch) {
            None => return,
            Some(true) => self.ask_recovery(),
            Some(false) => {}
        }
        let (groups, queued) = self.sender.abandon();
        for (src, ts) in groups {
            self.outputs
                .push_back(Output::Event(HostEvent::Recalled { src, ts }));
        }
        for q in queued {
            self.outputs
                .push_back(Output::Event(HostEvent::ReliableAborted {
                    handle: q.handle,
                    src: q.src,
                }));
        }
    }

    /// This host's failure timestamp, if the controller told it that it failed (§5.2).
    pub fn own_failure(&self) -> Option<Timestamp> {
        self.life.own_failure()
    }

    /// §5.2 Receiver Recovery: the driver saw this host's link come back. A host told it failed
    /// asks the controller (once) for the failure notifications and the undeliverable recalls;
    /// the answer ([`RelayMsg::Settle`]) settles its buffer. A host not told it failed asks
    /// when it is told (its link came back before the controller declared it). Drain
    /// [`Node::poll_output`] afterwards.
    pub fn recover(&mut self, now: Instant) {
        self.timestamp(now);
        if self.life.recover() {
            self.ask_recovery();
        }
    }

    /// §5.2: asks the controller for the failure notifications and recalls since its failure
    /// (once: `Lifecycle` decides when).
    fn ask_recovery(&mut self) {
        self.relays.push_back((
            MgmtDest::Controller,
            RelayMsg::RecoverRequest {
                host: self.cfg.node,
            },
        ));
    }

    /// §5.2: the application's callbacks for failure round `round` are done (with
    /// `HostConfig::callbacks_held`): the host reports the round `Completed` once its recalls
    /// are acknowledged too. Completing a round twice, or one it never raised, changes nothing.
    /// Drain [`Node::poll_output`] afterwards.
    pub fn complete_callbacks(&mut self, now: Instant, round: u32) {
        if self.rounds.callbacks_done(round) {
            self.finish_recalls(now);
        }
    }

    /// §5.2 rounds whose callbacks the application has not completed
    /// ([`Host::complete_callbacks`]).
    pub fn callbacks_waiting(&self) -> usize {
        self.rounds.callbacks_len()
    }

    /// Whether this host, declared failed, has settled its receive buffer (§5.2).
    pub fn settled(&self) -> bool {
        self.life.settled()
    }

    /// §5.2: a settled host asks to rejoin as a new process, again (backed off like
    /// `Completed`) until [`RelayMsg::Joined`] answers — the controller answers only once no
    /// round is open and the host is reachable both ways again.
    fn ask_rejoin(&mut self, now: Instant) {
        if !self
            .life
            .rejoin_asked(now, self.cfg.ctrl_retry_ns, CTRL_RETRY_MAX_NS)
        {
            return;
        }
        if self.relays.len() < RELAY_OUT_MAX {
            self.relays.push_back((
                MgmtDest::Controller,
                RelayMsg::Rejoin {
                    host: self.cfg.node,
                },
            ));
        }
    }

    /// §5.2 "the recovered process needs to join 1Pipe as a new process": the host starts over
    /// as the processes `procs` — fresh ids with fresh sequence spaces and buffers, nothing
    /// carried over but its counters and its timestamp counter, raised to `floor` (the
    /// controller's bound on every barrier a receiver may have passed; see
    /// `Controller::on_rejoin`) — knowing the processes declared failed so far. Answers a
    /// settled host only.
    fn on_joined(
        &mut self,
        now: Instant,
        procs: Vec<ProcId>,
        floor: Timestamp,
        failed: &[(ProcId, Timestamp)],
    ) {
        let fits = procs.len() == self.cfg.procs.len()
            && procs.iter().all(|p| p.0 < self.cfg.senders_max)
            && procs.windows(2).all(|w| w[0] < w[1]);
        if !self.life.settled() || !fits {
            self.stats.dropped_invalid += 1;
            return;
        }
        let mut cfg = self.cfg.clone();
        cfg.procs = procs;
        let stats = std::mem::take(&mut self.stats);
        let outputs = std::mem::take(&mut self.outputs);
        let relays = std::mem::take(&mut self.relays);
        let counter = self.clock_ts.max_wrapping(floor);
        *self = Host::new(cfg, now);
        self.stats = stats;
        self.stats.rejoined += 1;
        self.outputs = outputs;
        self.relays = relays;
        self.clock_ts = self.clock_ts.max_wrapping(counter);
        self.commit_sent = self.commit_sent.max_wrapping(self.clock_ts);
        for &(p, ts) in failed {
            if p.0 < self.cfg.senders_max && self.local_index(p).is_none() {
                self.failed.insert(p, ts);
            }
        }
        // It hears its switch (it asked because it did): silence counts from now on.
        self.uplink.assume_spoke();
    }

    /// §5.2 Receiver Recovery, "the process needs to consistently deliver or discard messages in
    /// the receive buffer": every buffered reliable message was acknowledged by this host before
    /// it froze. It is delivered — in timestamp order, as the correct receivers deliver it —
    /// unless it is discarded there too: its sender failed at or below its timestamp (this
    /// host's own processes included, at its own failure timestamp), or its scattering was
    /// recalled (a receiver, perhaps this one, never got its acknowledgement through). The
    /// host then stops as these processes: it rejoins only as new ones (`ask_rejoin`).
    fn settle(
        &mut self,
        now: Instant,
        failed: &[(ProcId, Timestamp)],
        recalled: &[(ProcId, Timestamp)],
    ) {
        // Answered, so declared: a restarted host whose `Failed` was lost speaks again, and
        // learns its failure timestamp here.
        let own = failed
            .iter()
            .find(|(p, _)| self.local_index(*p).is_some())
            .map(|&(_, ts)| ts);
        if !self.life.settle(now, own) {
            self.stats.dropped_invalid += 1;
            return;
        }
        self.stats.recovered += 1;
        // §5.2 "After delivering buffered messages, the recovered process needs to join 1Pipe
        // as a new process": it asks from its next timer, due at once — after the deliveries
        // below, which a driver's CPU runs first. Asked from here, the request went ahead of
        // them: a host settling thousands of messages was admitted while still delivering,
        // and its first-hop switch, which takes the link back expecting to hear the host,
        // timed it out again (VOPR seed 17: declared again 25 µs after it was admitted).
        // (`Lifecycle::settle` made it due now.)
        let mut failed_at: BTreeMap<ProcId, Timestamp> = failed.iter().copied().collect();
        for (&p, &t) in &self.failed {
            failed_at.entry(p).or_insert(t);
        }
        let recalled: BTreeSet<(ProcId, Timestamp)> = recalled.iter().copied().collect();
        let mut settled = Vec::new();
        for lp in &mut self.procs {
            let Some(rel) = lp.rel.as_mut() else {
                continue;
            };
            while let Some(key) = rel.reorder.peek() {
                let (key, item) = rel
                    .reorder
                    .pop_below(key.ts.plus(1))
                    .expect("the smallest key is below its own timestamp plus one");
                let gone = failed_at.get(&key.src).is_some_and(|&f| key.ts >= f)
                    || recalled.contains(&(key.src, key.ts));
                if gone {
                    self.stats.settled_discarded += 1;
                } else {
                    settled.push((lp.id, key, item));
                }
            }
        }
        self.partials.retain(|id, _| !id.3);
        let Some(bound) = settled
            .iter()
            .map(|s| s.1.ts)
            .reduce(|a, b| a.max_wrapping(b))
        else {
            return;
        };
        let bound = bound.plus(1);
        let now_ts = self.timestamp_past(now, bound);
        for (dst, key, item) in settled {
            self.stats.delivered_reliable += 1;
            self.stats.settled_delivered += 1;
            self.outputs
                .push_back(Output::Event(HostEvent::Deliver(Delivery {
                    dst,
                    src: key.src,
                    ts: key.ts,
                    psn: key.psn,
                    payload: item.payload,
                    barrier: bound,
                    reliable: true,
                    arrived: item.arrived,
                    now_ts,
                })));
        }
    }

    /// A relay (§5.2 forwarding and receiver recovery). "Controller Forwarding": packets the
    /// controller relayed over the management network. Data is taken as an arrival (its barrier
    /// fields ignored: it passed no switch) and acknowledged at once back through the
    /// controller; ACKs are taken as ACKs.
    fn on_relay(&mut self, now: Instant, msg: RelayMsg) {
        self.timestamp(now);
        match msg {
            RelayMsg::Failed { ts } => self.on_own_failure(ts),
            RelayMsg::Settle { failed, recalled } => self.settle(now, &failed, &recalled),
            RelayMsg::Joined {
                procs,
                floor,
                failed,
            } => self.on_joined(now, procs, floor, &failed),
            // §5.2 rejoin elsewhere: nothing this host stamps from now on is below the floor
            // (timestamps only ever move forward, so raising the counter is always allowed).
            RelayMsg::PeerJoined { floor, .. } => {
                self.clock_ts = self.clock_ts.max_wrapping(floor);
                self.stats.peers_joined += 1;
            }
            RelayMsg::Recalled { .. }
            | RelayMsg::RecoverRequest { .. }
            | RelayMsg::Rejoin { .. }
            | RelayMsg::Admit { .. }
            | RelayMsg::Admitted { .. } => {
                self.stats.dropped_invalid += 1;
            }
            RelayMsg::Forward { packets, .. } => {
                let mut acks: Vec<(ProcId, usize)> = Vec::new();
                for p in packets {
                    self.stats.forwarded_in += 1;
                    match p {
                        Packet::Data(mut d) if d.header.reliable() => {
                            d.header.flags &= !(flags::BARRIER_VALID | flags::COMMIT_VALID);
                            let (src, dst) = (d.header.src, d.header.dst);
                            self.on_data(now, d);
                            let remote =
                                self.local_index(src).is_none() && src.0 < self.cfg.senders_max;
                            if let Some(i) = self.local_index(dst).filter(|_| remote) {
                                if self.procs[i].rel.is_some() && !acks.contains(&(src, i)) {
                                    acks.push((src, i));
                                }
                            }
                        }
                        Packet::Ack(a) if a.reliable => self.on_ack(now, a),
                        _ => self.stats.dropped_invalid += 1,
                    }
                }
                if !acks.is_empty() && self.relays.len() < RELAY_OUT_MAX && !self.life.failed() {
                    let packets = acks
                        .into_iter()
                        .map(|(src, i)| Packet::Ack(self.make_ack(src, i, true)))
                        .collect();
                    self.relays.push_back((
                        MgmtDest::Controller,
                        RelayMsg::Forward {
                            from: self.cfg.node,
                            packets,
                        },
                    ));
                }
            }
        }
        self.deliver_ready(now);
        self.invariants();
    }

    /// The bytes a message of `len` occupies on the wire: its payload and one data header per
    /// fragment (what the best-effort window counts).
    fn wire_len(&self, len: usize) -> u64 {
        let frags = u64::from(self.sender.frags(len));
        len as u64 + frags * crate::wire::DATA_HEADER_LEN as u64
    }

    /// Fragments one message and sends it up (or delivers it here, for a local destination).
    #[allow(clippy::too_many_arguments)]
    fn emit_message(
        &mut self,
        now: Instant,
        src: ProcId,
        dst: ProcId,
        psn: Psn,
        ts: Timestamp,
        msg: &Bytes,
        reliable: bool,
    ) {
        let frags = self.sender.frags(msg.len());
        let local = self.local_index(dst).is_some();
        // What the packet advertises: the host's timestamp is its best-effort barrier (every later
        // best-effort message is stamped at or above it), and the commit barrier (§5.1).
        let barrier = self.clock_ts;
        let commit = self.commit_now();
        let mut base = if reliable { flags::RELIABLE } else { 0 };
        if self.cfg.barrier_on_data {
            base |= flags::BARRIER_VALID | flags::COMMIT_VALID;
        }
        for frag in 0..frags {
            let lo = frag as usize * self.cfg.mtu_payload;
            let hi = (lo + self.cfg.mtu_payload).min(msg.len());
            let mut fl = base;
            if frag + 1 == frags {
                fl |= flags::END_OF_MESSAGE;
            }
            let packet = DataPacket {
                header: DataHeader {
                    flags: fl,
                    frag: frag as u16,
                    ts,
                    barrier,
                    commit,
                    psn: Psn(psn.0.wrapping_add(frag)),
                    src,
                    dst,
                },
                payload: msg.slice(lo..hi),
            };
            if local {
                self.on_data(now, packet);
            } else {
                self.stats.packets_sent += 1;
                self.send_uplink(Packet::Data(packet));
            }
        }
    }

    /// The commit barrier this host advertises now: monotone, and never above what
    /// [`ReliableSender::commit`] allows.
    fn commit_now(&mut self) -> Timestamp {
        let c = self.sender.commit(self.clock_ts);
        self.commit_sent = self.commit_sent.max_wrapping(c);
        self.commit_sent
    }

    fn local_index(&self, p: ProcId) -> Option<usize> {
        self.procs.iter().position(|lp| lp.id == p)
    }

    fn send_uplink(&mut self, packet: Packet) {
        if self.life.silent() {
            return;
        }
        self.uplink.sent(&packet);
        self.outputs.push_back(Output::Send {
            port: UPLINK,
            packet,
        });
    }

    fn on_packet(&mut self, now: Instant, packet: Packet) {
        self.uplink.heard();
        if self.life.silent() {
            self.stats.dropped_invalid += 1;
            return;
        }
        // §5.2 Receiver Recovery: told it failed, and its switch speaks to it again.
        if matches!(self.life, Lifecycle::Failed { asked: false, .. }) {
            self.recover(now);
        }
        match packet {
            Packet::Data(d) => {
                let barrier = d.header.barrier();
                let commit = d.header.commit();
                self.on_data(now, d);
                if let Some(b) = barrier {
                    self.raise_barrier(b);
                }
                if let Some(c) = commit {
                    self.raise_commit(c);
                }
            }
            Packet::Beacon(b) => {
                self.raise_barrier(b.barrier);
                self.raise_commit(b.commit);
            }
            Packet::Nak(n) => self.on_nak(n),
            Packet::Ack(a) => self.on_ack(now, a),
            Packet::AckBatch(b) => self.on_ack_batch(now, b),
        }
        self.deliver_ready(now);
    }

    /// §4.1: buffer an arriving fragment, or drop and NAK it if it is below the barrier.
    fn on_data(&mut self, now: Instant, d: DataPacket) {
        let h = d.header;
        let Some(dst_idx) = self.local_index(h.dst) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        if h.src.0 >= self.cfg.senders_max {
            self.stats.dropped_invalid += 1;
            return;
        }
        let first_psn = Psn(h.psn.0.wrapping_sub(h.frag as u32));
        let remote = self.local_index(h.src).is_none();
        if h.reliable() {
            self.on_reliable_data(now, dst_idx, remote, d, first_psn);
            return;
        }
        // §2.1: acknowledge what arrives. A duplicate (network duplication) is acknowledged again
        // — an earlier ACK may have been lost — but goes no further: it must neither be delivered
        // twice nor NAKed as late when the original was delivered.
        if remote && self.procs[dst_idx].recv[h.src.index()].contains(h.psn) {
            self.stats.dropped_duplicate += 1;
            self.schedule_ack(now, h.src, dst_idx, false);
            return;
        }
        // A late or refused packet is NAKed and *not* recorded: were the NAK lost, an ACK
        // covering the packet would tell the sender it arrived. Unrecorded, it times out and
        // is reported lost instead.
        if self.barrier.is_some_and(|b| h.ts < b) {
            self.stats.dropped_late += 1;
            self.partials.remove(&(h.src, h.dst, first_psn, false));
            self.nak(h.dst, h.src, first_psn, h.ts, NakReason::Late);
            return;
        }
        // No room in the buffer, or none in the application (`set_room`): refused before it
        // is acknowledged.
        let lp = &self.procs[dst_idx];
        if lp.reorder.len() >= self.cfg.reorder_len_max.min(lp.room) {
            self.stats.dropped_full += 1;
            self.nak(h.dst, h.src, first_psn, h.ts, NakReason::BufferFull);
            return;
        }
        if remote {
            self.record_best_effort(now, dst_idx, h.src, h.dst, h.psn);
        }
        let Some((key, item)) = self.whole_message(now, h, first_psn, d.payload) else {
            return;
        };
        match self.procs[dst_idx].reorder.insert(key, item) {
            Ok(()) => {}
            Err(InsertError::Full) => {
                self.stats.dropped_full += 1;
                self.nak(h.dst, h.src, first_psn, h.ts, NakReason::BufferFull);
            }
            Err(InsertError::Duplicate | InsertError::UnknownSender) => {
                self.stats.dropped_invalid += 1;
            }
        }
    }

    /// §2.1 best effort: records the arrival of packet `psn` from remote `src` to local `dst`
    /// and schedules its ACK. Packets the receive window slid past without their arriving are
    /// reported lost to the sender (§2.1: best effort reports losses to the sender), each
    /// give-up numbered — not deduplicated like other NAKs: each happens once, and a missing
    /// number makes the sender over-report — followed at once by an ACK of its own (the next
    /// ACK covers them), so that each slide's count reaches the sender
    /// (`ack::SendTracker::on_ack`).
    fn record_best_effort(
        &mut self,
        now: Instant,
        dst_idx: usize,
        src: ProcId,
        dst: ProcId,
        psn: Psn,
    ) {
        let mut given_up = Vec::new();
        self.procs[dst_idx].recv[src.index()].record_with(psn, &mut |p, n| given_up.push((p, n)));
        let gave_up = !given_up.is_empty();
        for (p, n) in given_up {
            self.stats.naks_sent += 1;
            self.outputs.push_back(Output::Send {
                port: UPLINK,
                packet: Packet::Nak(Nak {
                    reason: NakReason::Lost,
                    from: dst,
                    to: src,
                    psn: p,
                    ts: Timestamp::new(0),
                    reliable: false,
                    seq: n,
                }),
            });
        }
        self.schedule_ack(now, src, dst_idx, false);
        if gave_up {
            let peer = self.ack_peer(src);
            self.send_acks_to(peer);
        }
    }

    /// §5.1 receive path: discard duplicates (and acknowledge them again), refuse what the
    /// buffer cannot hold (unrecorded, so the sender retransmits), buffer the rest until the
    /// commit barrier passes it. Never NAKed as late: a reliable packet below the commit barrier
    /// was acknowledged before the barrier could pass it, so it is a duplicate.
    fn on_reliable_data(
        &mut self,
        now: Instant,
        dst_idx: usize,
        remote: bool,
        d: DataPacket,
        first_psn: Psn,
    ) {
        let h = d.header;
        // §5.2 Discard also covers what is still on its way: nothing from a failed process at or
        // above its failure timestamp is buffered (see `on_failure`).
        if !self.failed.is_empty() && self.failed.get(&h.src).is_some_and(|&t| h.ts >= t) {
            self.stats.dropped_invalid += 1;
            return;
        }
        // §5.2: a host told it failed buffers nothing more (its buffer is settled as it stood).
        if self.life.failed() {
            self.stats.dropped_invalid += 1;
            return;
        }
        self.reliable_seen = true;
        let rel = self.procs[dst_idx]
            .rel
            .get_or_insert_with(|| ReliableRecv::new(&self.cfg));
        // A duplicate — recorded already, or below the commit barrier, which cannot pass a
        // message before its receiver acknowledged it — is dropped and acknowledged again (the
        // first ACK may have been lost).
        let duplicate = (remote && rel.recv[h.src.index()].contains(h.psn))
            || self.commit.is_some_and(|c| h.ts < c);
        if duplicate {
            self.stats.dropped_duplicate += 1;
            if remote {
                self.schedule_ack(now, h.src, dst_idx, true);
            }
            return;
        }
        if remote && rel.recv[h.src.index()].beyond(h.psn) {
            self.stats.dropped_invalid += 1;
            return;
        }
        let rel = self.procs[dst_idx].rel.as_mut().expect("created above");
        if rel.reorder.len() >= self.cfg.reorder_len_max {
            self.stats.dropped_full += 1;
            self.nak_reliable(h.dst, h.src, first_psn, h.ts);
            return;
        }
        if remote {
            let w = &mut rel.recv[h.src.index()];
            w.record(h.psn);
            if h.flags & flags::ECN != 0 {
                w.ecn = w.ecn.saturating_add(1);
            }
            self.schedule_ack(now, h.src, dst_idx, true);
        }
        let Some((key, item)) = self.whole_message(now, h, first_psn, d.payload) else {
            return;
        };
        let rel = self.procs[dst_idx].rel.as_mut().expect("created above");
        match rel.reorder.insert(key, item) {
            Ok(()) => {}
            // Recorded already: the retransmission's duplicate check will absorb a resend, so
            // only a bug lands here.
            Err(_) => self.stats.dropped_invalid += 1,
        }
    }

    /// A reliable message was refused (buffer full): tell the sender, which retransmits it on
    /// its timer. Not remembered in `recent_naks`: every refusal is news.
    fn nak_reliable(&mut self, from: ProcId, to: ProcId, psn: Psn, ts: Timestamp) {
        if self.local_index(to).is_some() {
            return; // a local message is never refused: see `on_reliable_data`
        }
        self.stats.naks_sent += 1;
        self.outputs.push_back(Output::Send {
            port: UPLINK,
            packet: Packet::Nak(Nak {
                reason: NakReason::BufferFull,
                from,
                to,
                psn,
                ts,
                reliable: true,
                seq: 0,
            }),
        });
    }

    /// The reorder-buffer entry for a fragment: at once for a single-fragment message, else once
    /// reassembly completes it.
    fn whole_message(
        &mut self,
        now: Instant,
        h: DataHeader,
        first_psn: Psn,
        payload: Bytes,
    ) -> Option<(OrderKey, Buffered)> {
        let payload = if h.frag == 0 && h.end_of_message() {
            payload
        } else {
            self.reassemble(h, first_psn, payload)?
        };
        let key = OrderKey {
            ts: h.ts,
            src: h.src,
            psn: first_psn,
        };
        Some((
            key,
            Buffered {
                payload,
                arrived: now,
            },
        ))
    }

    /// Adds a fragment to its partial message; returns the whole payload once complete. A
    /// fragment that would start one more partial message than `reassembly_len_max` is
    /// refused and NAKed.
    fn reassemble(&mut self, h: DataHeader, first_psn: Psn, payload: Bytes) -> Option<Bytes> {
        match self.partials.add(&h, first_psn, payload) {
            Ok(whole) => whole,
            Err(Refused::Invalid) => {
                self.stats.dropped_invalid += 1;
                None
            }
            Err(Refused::Full) => {
                self.stats.dropped_full += 1;
                if h.reliable() {
                    self.nak_reliable(h.dst, h.src, first_psn, h.ts);
                } else {
                    self.nak(h.dst, h.src, first_psn, h.ts, NakReason::BufferFull);
                }
                None
            }
        }
    }

    fn raise_commit(&mut self, c: Timestamp) {
        // §5.2: a host told it failed is frozen (see `on_own_failure`).
        if self.life.failed() {
            return;
        }
        self.commit = Some(match self.commit {
            Some(cur) => cur.max_wrapping(c),
            None => c,
        });
    }

    fn raise_barrier(&mut self, b: Timestamp) {
        // Barriers from the network only ever move the host's barrier forward; an older one
        // (reordered beacon) carries no new information.
        self.barrier = Some(match self.barrier {
            Some(cur) => cur.max_wrapping(b),
            None => b,
        });
    }

    /// The host's timestamp, raised to at least `barrier` before anything below it is delivered:
    /// §2.1 causality — a message sent after a delivery is stamped above it. Normally the
    /// barrier is already below the host's timestamp (this host's own beacons bound it), but a
    /// host whose clock stepped back, or whose link a switch removed as silent (§4.2), can
    /// receive a barrier above its clock (VOPR seeds 615, 714, 1523 with clock steps).
    fn timestamp_past(&mut self, now: Instant, barrier: Timestamp) -> Timestamp {
        let ts = self.timestamp(now);
        if ts < barrier {
            self.clock_ts = barrier;
        }
        self.clock_ts
    }

    /// Delivers, per local process, everything strictly below the barrier (§4.1), and gives up on
    /// partial messages the barrier has passed.
    fn deliver_ready(&mut self, now: Instant) {
        if self.reliable_seen {
            self.deliver_reliable(now);
        }
        self.deliver_best_effort(now);
    }

    /// §5.1: per local process that reads, everything strictly below the commit barrier.
    #[inline(never)]
    fn deliver_reliable(&mut self, now: Instant) {
        // §5.2: a host told it failed delivers only what settling allows (see Host::settle).
        if self.life.failed() {
            return;
        }
        if let Some(commit) = self.commit {
            let now_ts = self.timestamp_past(now, commit);
            let mut budget = match self.cfg.deliver_burst_max {
                0 => u32::MAX,
                n => n,
            };
            self.deliver_backlog = false;
            for lp in &mut self.procs {
                let Some(rel) = lp.rel.as_mut().filter(|_| !lp.paused) else {
                    continue;
                };
                loop {
                    if budget == 0 {
                        // More below the barrier: at the next input (§4.2: the host's beacons
                        // must not wait behind a burst).
                        self.deliver_backlog |= rel.reorder.peek().is_some_and(|k| k.ts < commit);
                        break;
                    }
                    let Some((key, item)) = rel.reorder.pop_below(commit) else {
                        break;
                    };
                    budget -= 1;
                    self.stats.delivered_reliable += 1;
                    self.outputs
                        .push_back(Output::Event(HostEvent::Deliver(Delivery {
                            dst: lp.id,
                            src: key.src,
                            ts: key.ts,
                            psn: key.psn,
                            payload: item.payload,
                            barrier: commit,
                            reliable: true,
                            arrived: item.arrived,
                            now_ts,
                        })));
                }
            }
            if !self.deliver_backlog {
                self.commit_released = Some(commit);
            }
        }
    }

    /// §4.1: per local process, everything strictly below the best-effort barrier.
    fn deliver_best_effort(&mut self, now: Instant) {
        let Some(barrier) = self.barrier else {
            return;
        };
        let now_ts = self.timestamp_past(now, barrier);
        let mut held = false;
        for lp in &mut self.procs {
            loop {
                if lp.room == 0 {
                    held |= lp.reorder.peek().is_some_and(|k| k.ts < barrier);
                    break;
                }
                let Some((key, item)) = lp.reorder.pop_below(barrier) else {
                    break;
                };
                if lp.room != usize::MAX {
                    lp.room -= 1;
                }
                self.stats.delivered += 1;
                self.outputs
                    .push_back(Output::Event(HostEvent::Deliver(Delivery {
                        dst: lp.id,
                        src: key.src,
                        ts: key.ts,
                        psn: key.psn,
                        payload: item.payload,
                        barrier,
                        reliable: false,
                        arrived: item.arrived,
                        now_ts,
                    })));
            }
        }
        if !held {
            self.be_released = Some(barrier);
        }
        // Best-effort partials the barrier passed are given up on. (A reliable partial cannot
        // fall below the commit barrier: its fragments are acknowledged before it can pass.)
        for ((src, dst, psn, _), ts) in self.partials.take_stale_best_effort(barrier) {
            self.stats.dropped_incomplete += 1;
            self.nak(dst, src, psn, ts, NakReason::Incomplete);
        }
    }

    /// Tells `to` that the message `psn` it sent to local process `from` was dropped.
    fn nak(&mut self, from: ProcId, to: ProcId, psn: Psn, ts: Timestamp, reason: NakReason) {
        let id = (from, to, psn);
        if self.recent_naks.contains(&id) {
            return;
        }
        if self.recent_naks.len() == RECENT_NAKS_MAX {
            self.recent_naks.pop_front();
        }
        self.recent_naks.push_back(id);
        let nak = Nak {
            reason,
            from,
            to,
            psn,
            ts,
            reliable: false,
            seq: 0,
        };
        if self.local_index(to).is_some() {
            self.on_nak(nak);
        } else {
            self.stats.naks_sent += 1;
            // A NAK leaving the host is a packet on the uplink like any other.
            self.outputs.push_back(Output::Send {
                port: UPLINK,
                packet: Packet::Nak(nak),
            });
        }
    }

    /// Acknowledgement state for `src`'s packets at local receiver `dst_idx`, in one service.
    fn window(&mut self, src: ProcId, dst_idx: usize, reliable: bool) -> &mut RecvWindow {
        let lp = &mut self.procs[dst_idx];
        if reliable {
            &mut lp.rel.as_mut().expect("a reliable packet arrived").recv[src.index()]
        } else {
            &mut lp.recv[src.index()]
        }
    }

    /// §2.1: `src`'s packet arrived at local receiver `dst_idx`; owe it an ACK. The ACKs owed
    /// to one host go together (`HostConfig::host_of`): when the earliest of them is due — a
    /// reliable ACK `ack_delay_ns` after it was owed, a best-effort one `ack_delay_be_ns` after
    /// — or at once when one window reaches `ack_every` packets or the batch is full.
    fn schedule_ack(&mut self, now: Instant, src: ProcId, dst_idx: usize, reliable: bool) {
        let ack_every = self.cfg.ack_every;
        let peer = self.ack_peer(src);
        let w = self.window(src, dst_idx, reliable);
        w.unacked = w.unacked.saturating_add(1);
        let unacked = w.unacked;
        let was_pending = std::mem::replace(&mut w.ack_pending, true);
        let mut owed = self.acks.owed_to(peer);
        if !was_pending {
            let ack = AckOwed {
                src,
                dst_idx: dst_idx as u32,
                reliable,
            };
            let delay = if reliable {
                self.cfg.ack_delay_ns
            } else {
                self.cfg.ack_delay_be_ns
            };
            owed = self.acks.push(peer, now + delay, ack);
        }
        if unacked >= ack_every || owed >= ACK_BATCH_LEN_MAX {
            self.send_acks_to(peer);
        }
    }

    /// The host (ACK batch) that `p`'s ACKs go with.
    fn ack_peer(&self, p: ProcId) -> usize {
        match &self.cfg.host_of {
            Some(t) => t[p.index()] as usize,
            None => p.index(),
        }
    }

    /// Sends every ACK owed to `peer`: one `Ack`, or `AckBatch`es of at most
    /// `ACK_BATCH_LEN_MAX` entries. An owed ACK whose window was acknowledged since (through
    /// the §5.2 relay) is skipped.
    fn send_acks_to(&mut self, peer: usize) {
        let mut owed = std::mem::take(&mut self.acks_scratch);
        let mut acks = std::mem::take(&mut self.acks_out);
        owed.clear();
        acks.clear();
        self.acks.take(peer, &mut owed);
        for o in owed.iter() {
            let (src, dst_idx) = (o.src, o.dst_idx as usize);
            if !self.window(src, dst_idx, o.reliable).ack_pending {
                continue;
            }
            acks.push(self.make_ack(src, dst_idx, o.reliable));
            if acks.len() == ACK_BATCH_LEN_MAX {
                self.send_ack_packet(&mut acks);
            }
        }
        if !acks.is_empty() {
            self.send_ack_packet(&mut acks);
        }
        self.acks_scratch = owed;
        self.acks_out = acks;
    }

    /// One ACK alone, or several in a batch (which takes `acks`'s buffer); empties `acks`.
    fn send_ack_packet(&mut self, acks: &mut Vec<Ack>) {
        debug_assert!((1..=ACK_BATCH_LEN_MAX).contains(&acks.len()));
        self.stats.ack_packets_sent += 1;
        let packet = if acks.len() == 1 {
            Packet::Ack(acks.pop().expect("one ACK"))
        } else {
            let batch = std::mem::take(acks);
            Packet::AckBatch(AckBatch::new(batch).expect("at most ACK_BATCH_LEN_MAX ACKs"))
        };
        self.send_uplink(packet);
    }

    /// The ACK for `src`'s packets at local receiver `dst_idx`, now; counts it as sent.
    fn make_ack(&mut self, src: ProcId, dst_idx: usize, reliable: bool) -> Ack {
        let rwnd = match &self.procs[dst_idx].rel {
            Some(rel) if reliable => {
                let free = self.cfg.reorder_len_max.saturating_sub(rel.reorder.len());
                free.min(WINDOW_MAX as usize) as u8
            }
            _ => WINDOW_MAX as u8,
        };
        let from = self.procs[dst_idx].id;
        let w = self.window(src, dst_idx, reliable);
        w.unacked = 0;
        w.ack_pending = false;
        // Reliable: the ECN echo since the last ACK. Best effort: the running given-up count.
        let ecn = if reliable {
            std::mem::take(&mut w.ecn)
        } else {
            w.ecn
        };
        let (cum_psn, sack) = w.ack();
        let ack = Ack {
            from,
            to: src,
            cum_psn,
            sack,
            reliable,
            ecn,
            rwnd,
        };
        self.stats.acks_sent += 1;
        ack
    }

    fn on_ack(&mut self, now: Instant, a: Ack) {
        if self.apply_ack(now, a) {
            // Credits came back: the head of the send buffer may go now.
            self.pump(now);
        }
    }

    /// §6.1: each ACK of a batch is taken as if it had come alone; the send buffer is pumped
    /// once, after all of them.
    fn on_ack_batch(&mut self, now: Instant, b: AckBatch) {
        let mut reliable = false;
        for a in b.into_acks() {
            reliable |= self.apply_ack(now, a);
        }
        if reliable {
            self.pump(now);
        }
    }

    /// Applies one ACK to the sender's state; returns whether it was a valid reliable one (the
    /// caller pumps the send buffer then).
    fn apply_ack(&mut self, now: Instant, a: Ack) -> bool {
        if self.local_index(a.to).is_none() || a.from.0 >= self.cfg.senders_max {
            self.stats.dropped_invalid += 1;
            return false;
        }
        self.stats.acks_received += 1;
        if !a.reliable {
            let mut possibly_lost = Vec::new();
            let newest = self
                .tracker
                .on_ack(a.to, a.from, a.cum_psn, a.sack, a.ecn, |e| {
                    possibly_lost.push(e)
                });
            // RFC 6298 §2: a message's timestamp is when it was sent (no retransmission makes
            // the sample ambiguous). A timestamp ahead of the clock (stepped back) is no sample.
            if let Some(rtt) = newest.map(|ts| now.timestamp().signed_distance(ts)) {
                if rtt > 0 {
                    self.be_rtt.sample(rtt as u64);
                }
            }
            for e in possibly_lost {
                self.stats.lost += 1;
                self.report_send_failed(e.src, e.dst, e.ts, e.psn, NakReason::Lost);
            }
            return false;
        }
        let mut resend = Vec::new();
        self.sender
            .on_ack(now, a.to, a.from, a.cum_psn, a.sack, a.ecn, a.rwnd, |t| {
                resend.push(t)
            });
        for t in resend {
            self.retransmit(now, t);
        }
        true
    }

    fn on_nak(&mut self, n: Nak) {
        if self.local_index(n.to).is_none() || n.from.0 >= self.cfg.senders_max {
            self.stats.dropped_invalid += 1;
            return;
        }
        if n.reliable {
            // The receiver refused it (buffer full) and did not record it: the retransmission
            // timer resends it. Reliable messages are never reported failed while both ends live.
            return;
        }
        if n.reason == NakReason::Lost {
            // The receiver's window gave up on packet `psn`, of a message still tracked here (or
            // not: acknowledged, or reported already — then nothing is news).
            self.tracker.note_given_up(n.to, n.from, n.seq);
            if let Some((first, ts)) = self.tracker.resolve_containing(n.to, n.from, n.psn) {
                self.stats.lost += 1;
                self.report_send_failed(n.to, n.from, ts, first, NakReason::Lost);
            }
            return;
        }
        // The NAK is authoritative (the receiver dropped the message), even if an ACK already
        // covered the PSN: resolve the record so the timeout does not report it again.
        self.tracker.resolve(n.to, n.from, n.psn);
        self.report_send_failed(n.to, n.from, n.ts, n.psn, n.reason);
    }

    /// Raises `onepipe_send_fail_callback` for a message of local process `src`.
    fn report_send_failed(
        &mut self,
        src: ProcId,
        dst: ProcId,
        ts: Timestamp,
        psn: Psn,
        reason: NakReason,
    ) {
        self.stats.send_failed += 1;
        self.outputs.push_back(Output::Event(HostEvent::SendFailed {
            src,
            dst,
            ts,
            psn,
            reason,
        }));
    }

    fn on_timeout(&mut self, now: Instant) {
        if self.life.rejoin_due().is_some_and(|due| due <= now) {
            self.ask_rejoin(now);
        }
        self.resend_completed(now);
        self.send_due_acks(now);
        self.expire_sends(now);
        if self.retransmit_backlog.is_none_or(|from| from <= now) {
            self.retransmit_due(now, true);
        }
        self.beacon_tick(now);
    }

    /// §5.2 with a controller that may crash and recover: a `Completed` not answered by its
    /// round's `Resume` in time goes again, with back-off (the controller ignores duplicates).
    fn resend_completed(&mut self, now: Instant) {
        for round in self.rounds.due_again(now, CTRL_RETRY_MAX_NS) {
            self.stats.ctrl_resent += 1;
            self.report_completed(round);
        }
    }

    /// §5.2 Completed for `round` to the controller, preceded by this host's recall report for
    /// it, if any: that report may have been lost (the controller down), so it goes again with
    /// every Completed.
    fn report_completed(&mut self, round: u32) {
        if let Some(groups) = self.rounds.recalled(round) {
            if self.relays.len() < RELAY_OUT_MAX {
                self.relays.push_back((
                    MgmtDest::Controller,
                    RelayMsg::Recalled {
                        groups: groups.clone(),
                    },
                ));
            }
        }
        self.outputs.push_back(Output::Mgmt {
            to: MgmtDest::Controller,
            msg: Mgmt::Ctrl(CtrlMsg::Completed {
                round,
                host: self.cfg.node,
            }),
        });
    }

    /// Reliable messages whose retransmission timer fired go again.
    fn retransmit_due(&mut self, now: Instant, timer: bool) {
        if self.sender.next_deadline().is_none_or(|d| d > now) {
            self.retransmit_backlog = None;
            return;
        }
        let mut resend = Vec::new();
        let max = self.cfg.retransmit_burst_max as usize;
        let more = self.sender.expire(now, max, |t| resend.push(t));
        // A backlog goes on with the next packets. The timer takes it up only after the RTO
        // floor: it runs ahead of queued packets, and a chain of timers each resending a burst
        // would keep the host from the ACKs (and its switch's beacons) that end the backlog.
        self.retransmit_backlog = match (more, self.retransmit_backlog) {
            (false, _) => None,
            (true, Some(from)) if !timer => Some(from),
            (true, _) => Some(now + self.cfg.reliable.rto_ns),
        };
        for t in resend {
            self.retransmit(now, t);
        }
        self.pump(now);
    }

    /// Delayed ACKs due now, and those due within the next half delay with them: one wakeup
    /// sends the batches of every such host rather than one per timer.
    fn send_due_acks(&mut self, now: Instant) {
        let horizon = now + self.cfg.ack_delay_ns / 2;
        while let Some(peer) = self.acks.pop_due(horizon) {
            self.send_acks_to(peer);
        }
    }

    /// The best-effort loss timeout now: `rto_ns`, or the RFC 6298 estimate up to
    /// `rto_max_ns`.
    fn loss_timeout_ns(&self) -> u64 {
        let floor = self.cfg.rto_ns;
        self.be_rtt.rto(floor, floor, self.cfg.rto_max_ns)
    }

    /// §2.1: messages unacknowledged for the loss timeout are reported lost.
    fn expire_sends(&mut self, now: Instant) {
        let mut lost = Vec::new();
        self.tracker.expire(now, |e| lost.push(e));
        // RFC 6298 §5.5: each timeout doubles the timeout of what is sent next, until a sample
        // arrives — else at the onset of overload every message would time out before its
        // acknowledgement could teach the estimator the new delay.
        self.be_rtt.backoff = self
            .be_rtt
            .backoff
            .saturating_add(lost.len().min(32) as u32);
        for e in lost {
            self.stats.lost += 1;
            self.report_send_failed(e.src, e.dst, e.ts, e.psn, NakReason::Lost);
        }
    }

    /// §4.2: at synchronized beacon times, an idle uplink gets a beacon. "Idle" is taken
    /// precisely: no packet has gone up since the beacon time carrying a barrier at least as high,
    /// so the first-hop switch would learn something from the beacon. A busy uplink's data packets
    /// carry the barrier themselves (programmable-chip mode); with `beacon_always` (switch CPU and
    /// representative modes, whose switches read no barriers from data) every tick sends one.
    fn beacon_tick(&mut self, now: Instant) {
        if now < self.uplink.next_beacon() {
            return;
        }
        if self.uplink.watch() {
            self.report_uplink_down();
        }
        self.timestamp(now);
        let barrier = self.uplink.beacon_barrier(now);
        // §5.1: the commit barrier rides on the same beacons; the oldest unacknowledged reliable
        // message holds it back.
        let c = self.sender.commit(self.clock_ts).min_wrapping(barrier);
        self.commit_sent = self.commit_sent.max_wrapping(c);
        let commit = self.commit_sent;
        if self
            .uplink
            .wants_beacon(barrier, commit, self.cfg.beacon_always)
        {
            self.stats.beacons_sent += 1;
            self.send_uplink(Packet::Beacon(Beacon {
                from: self.cfg.node,
                barrier,
                commit,
            }));
            self.uplink.beaconed(barrier);
        }
        self.uplink.schedule(now);
    }

    /// §4.2: the first-hop switch said nothing for `uplink_timeout_intervals` beacon times: it
    /// is taken for dead (it would send keep-alive beacons if it were alive). Reported by
    /// [`Host::uplink_alive`], counted, and — §5.2 Detect — sent to the controller as this
    /// host's input link, with the last commit barrier the switch gave.
    fn report_uplink_down(&mut self) {
        self.stats.uplink_failures += 1;
        if let Some(link) = self.cfg.input_link {
            self.outputs.push_back(Output::Mgmt {
                to: MgmtDest::Controller,
                msg: Mgmt::Ctrl(CtrlMsg::LinkDown {
                    reporter: self.cfg.node,
                    link,
                    last_commit: self.commit,
                }),
            });
        }
    }

    /// Handles a control message from the controller or another host (§5.2).
    fn on_control(&mut self, now: Instant, msg: CtrlMsg) {
        self.timestamp(now);
        match msg {
            CtrlMsg::Failure {
                round,
                failed,
                correct,
            } => self.on_failure(now, round, &failed, &correct),
            CtrlMsg::Recall {
                round,
                from,
                groups,
                unacked,
            } => self.on_recall(now, round, from, &groups, &unacked),
            CtrlMsg::RecallAck { round, from } => {
                self.rounds.recall_acked(round, from);
                self.finish_recalls(now);
            }
            // Routes changed: what died with the failed component goes again. Rounds resume in
            // order: this answers every `Completed` up to `round`.
            CtrlMsg::Resume { round, .. } => {
                self.rounds.resumed(round);
                self.sender.rearm_after_reroute(now);
                self.retransmit_due(now, false);
            }
            // Addressed to the controller, or to a switch.
            CtrlMsg::LinkDown { .. } | CtrlMsg::Completed { .. } | CtrlMsg::Isolate { .. } => {
                self.stats.dropped_invalid += 1;
            }
        }
        self.deliver_ready(now);
        self.invariants();
    }

    /// §5.2 Broadcast received: Discard, Recall, Callback, then Completed (once the recall is
    /// acknowledged).
    fn on_failure(
        &mut self,
        now: Instant,
        round: u32,
        failed: &[(ProcId, Timestamp)],
        correct: &[NodeId],
    ) {
        let mut news = Vec::new();
        for &(p, ts) in failed {
            if p.0 < self.cfg.senders_max && !self.failed.contains_key(&p) {
                self.failed.insert(p, ts);
                news.push((p, ts));
            }
        }
        // Discard: buffered messages from a failed process at or above its failure timestamp.
        // The paper's commit barrier T releases messages "below or equal to T"; ours releases
        // messages strictly below it (the commit barrier is the timestamp of the oldest
        // unacknowledged message, which may itself be unacknowledged somewhere), so the failure
        // timestamp F — a commit barrier — commits exactly the messages below F, and one stamped
        // F may be missing at some receiver: it is discarded (VOPR seeds 67, 75, 127).
        let gone = |src: ProcId, ts: Timestamp, f: &BTreeMap<ProcId, Timestamp>| {
            f.get(&src).is_some_and(|&t| ts >= t)
        };
        let f = &self.failed;
        for lp in &mut self.procs {
            if let Some(rel) = lp.rel.as_mut() {
                rel.reorder.retain(|k| !gone(k.src, k.ts, f));
            }
        }
        self.partials.retain(|id, ts| !(id.3 && gone(id.0, ts, f)));
        // Hosts failed now will never answer an earlier recall.
        self.rounds.only_correct(correct);
        self.recall(round, correct);
        // Callback: with `callbacks_held`, Completed waits for the application's.
        if self.cfg.callbacks_held && !news.is_empty() && !self.life.failed() {
            self.rounds.hold_callbacks(round);
        }
        for (proc, ts) in news {
            self.outputs
                .push_back(Output::Event(HostEvent::ProcFailed { proc, ts, round }));
        }
        self.rounds.open(round);
        self.finish_recalls(now);
        // Credits to failed processes came back: the head of the send buffer may go (or be
        // aborted) now.
        self.pump(now);
    }

    /// §5.2 Recall: the scatterings a failed process never acknowledged are aborted — dropped
    /// here, raised as [`HostEvent::Recalled`], and recalled at every other `correct` host
    /// (round `round` waits for their `RecallAck`s); where the relay channel is in use, the
    /// controller records them for the failed receivers' recovery.
    fn recall(&mut self, round: u32, correct: &[NodeId]) {
        let f = &self.failed;
        let recalled = self.sender.fail(round, |d| f.contains_key(&d));
        if recalled.groups.is_empty() {
            return;
        }
        self.discard_groups(&recalled.groups);
        let targets: BTreeSet<NodeId> = correct
            .iter()
            .copied()
            .filter(|&h| h != self.cfg.node)
            .collect();
        for &t in &targets {
            self.outputs.push_back(Output::Mgmt {
                to: MgmtDest::Node(t),
                msg: Mgmt::Ctrl(CtrlMsg::Recall {
                    round,
                    from: self.cfg.node,
                    groups: recalled.groups.clone(),
                    unacked: recalled.unacked.clone(),
                }),
            });
        }
        for &(src, ts) in &recalled.groups {
            self.outputs
                .push_back(Output::Event(HostEvent::Recalled { src, ts }));
        }
        // §5.2 "undeliverable recall messages": the failed receivers cannot hear the recall;
        // the controller records it for their recovery. Sent before `Completed`, which waits
        // for the RecallAcks. Only where the relay channel is in use.
        if self.cfg.reliable.forward_after_retransmits > 0 && self.relays.len() < RELAY_OUT_MAX {
            self.relays.push_back((
                MgmtDest::Controller,
                RelayMsg::Recalled {
                    groups: recalled.groups.clone(),
                },
            ));
            self.rounds.record_recalled(round, recalled.groups.clone());
        }
        self.rounds.recall(round, targets);
    }

    /// Removes the messages of aborted scatterings from every local reliable buffer.
    fn discard_groups(&mut self, groups: &[(ProcId, Timestamp)]) {
        for lp in &mut self.procs {
            if let Some(rel) = lp.rel.as_mut() {
                rel.reorder
                    .retain(|k| groups.binary_search(&(k.src, k.ts)).is_err());
            }
        }
        self.partials
            .retain(|id, ts| !(id.3 && groups.binary_search(&(id.0, ts)).is_ok()));
    }

    /// §5.2 Recall at a receiver: discard, record the never-acknowledged packets as received
    /// (so the window moves on and late copies are duplicates), answer.
    fn on_recall(
        &mut self,
        now: Instant,
        round: u32,
        from: NodeId,
        groups: &[(ProcId, Timestamp)],
        unacked: &[(ProcId, ProcId, Psn, u32)],
    ) {
        let mut groups = groups.to_vec();
        groups.sort_unstable();
        self.discard_groups(&groups);
        for &(src, dst, first, frags) in unacked {
            let Some(dst_idx) = self.local_index(dst) else {
                continue;
            };
            if src.0 >= self.cfg.senders_max || frags > WINDOW_MAX {
                continue;
            }
            self.reliable_seen = true;
            let rel = self.procs[dst_idx]
                .rel
                .get_or_insert_with(|| ReliableRecv::new(&self.cfg));
            let w = &mut rel.recv[src.index()];
            for f in 0..frags {
                let psn = Psn(first.0.wrapping_add(f));
                if !w.beyond(psn) {
                    w.record(psn);
                }
            }
            self.schedule_ack(now, src, dst_idx, true);
        }
        self.outputs.push_back(Output::Mgmt {
            to: MgmtDest::Node(from),
            msg: Mgmt::Ctrl(CtrlMsg::RecallAck {
                round,
                from: self.cfg.node,
            }),
        });
    }

    /// Releases recalls every target answered, and completes rounds with nothing pending.
    fn finish_recalls(&mut self, now: Instant) {
        let (released, done) = self.rounds.finish(now, self.cfg.ctrl_retry_ns);
        for round in released {
            self.sender.release_recall(round);
        }
        for round in done {
            self.report_completed(round);
        }
    }

    /// Checks internal invariants (debug builds only).
    fn invariants(&self) {
        if cfg!(debug_assertions) {
            self.rounds.check();
            // §5.2: declared failed, it sent nothing more, and abandoned what it had in flight.
            if self.life.failed() {
                debug_assert_eq!(self.sender.unacked(), 0, "a failed host holds no messages");
                debug_assert_eq!(self.sender.queued(), 0, "a failed host queues no sends");
            }
            if let (Some(c), Some(r)) = (self.commit, self.commit_released) {
                debug_assert_eq!(c.max_wrapping(r), c, "released above the commit barrier");
            }
            debug_assert!(self.partials.len() <= self.cfg.reassembly_len_max);
            debug_assert!(self.recent_naks.len() <= RECENT_NAKS_MAX);
            for lp in &self.procs {
                debug_assert!(lp.reorder.len() <= self.cfg.reorder_len_max);
            }
        }
    }
}

impl Node for Host {
    type Packet = Packet;
    type Event = HostEvent;
    type Mgmt = Mgmt;

    fn handle(&mut self, now: Instant, input: Input<Packet, Mgmt>) {
        match input {
            Input::Packet { port, packet } => {
                self.timestamp(now);
                self.uplink.follow_clock_step_back(now);
                if port != UPLINK {
                    self.stats.dropped_invalid += 1;
                } else {
                    self.on_packet(now, packet);
                    if self.retransmit_backlog.is_some() {
                        self.retransmit_due(now, false);
                    }
                }
            }
            Input::Timeout => {
                self.timestamp(now);
                self.uplink.follow_clock_step_back(now);
                self.on_timeout(now);
            }
            Input::Mgmt(Mgmt::Ctrl(msg)) => self.on_control(now, msg),
            Input::Mgmt(Mgmt::Relay(msg)) => self.on_relay(now, msg),
        }
        self.invariants();
    }

    /// Relays first: a `Recalled` report must reach the controller before the `Completed` of
    /// its round, which the same input may produce (a host whose recall has no correct target
    /// left completes at once), or the controller may resume the round and answer a recovering
    /// host without it.
    fn poll_output(&mut self) -> Option<Output<Packet, HostEvent, Mgmt>> {
        if let Some((to, msg)) = self.relays.pop_front() {
            return Some(Output::Mgmt {
                to,
                msg: Mgmt::Relay(msg),
            });
        }
        let out = self.outputs.pop_front();
        if out.is_none() && self.outputs.capacity() > OUTPUTS_RETAINED {
            // A scattering to many processes queued one packet each; keeping that capacity
            // would hold it in every host that ever sent one (100 MB at 1,024 hosts).
            self.outputs = VecDeque::new();
        }
        out
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.uplink.next_beacon();
        if let Some(due) = self.acks.next_due() {
            t = t.min(due);
        }
        if let Some(deadline) = self.tracker.next_deadline() {
            t = t.min(deadline);
        }
        // A retransmission backlog goes with the next packets, not an immediate timer (see
        // `HostConfig::retransmit_burst_max`); the timer takes it up from `from` at the latest.
        match self.retransmit_backlog {
            Some(from) => t = t.min(from),
            None => {
                if let Some(deadline) = self.sender.next_deadline() {
                    t = t.min(deadline);
                }
            }
        }
        if let Some(due) = self.rounds.next_due() {
            t = t.min(due);
        }
        if let Some(due) = self.life.rejoin_due() {
            t = t.min(due);
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scattering to many processes queues one output per packet; once drained, the host
    /// keeps no more than `OUTPUTS_RETAINED` of that room (1,024 hosts would otherwise hold
    /// 100 MB between them, docs/BENCHMARKS.md).
    #[test]
    fn a_drained_host_gives_back_the_room_of_a_large_scattering() {
        let cfg = HostConfig::new(NodeId(0), vec![ProcId(0)], 400);
        let mut h = Host::new(cfg, Instant(1_000));
        let scattering: Vec<(ProcId, Bytes)> = (1..400)
            .map(|d| (ProcId(d), Bytes::from_static(b"x")))
            .collect();
        h.send(Instant(1_000), ProcId(0), &scattering).unwrap();
        let mut sends = 0;
        while let Some(out) = h.poll_output() {
            sends += usize::from(matches!(out, Output::Send { .. }));
        }
        assert_eq!(sends, 399);
        assert!(h.outputs.capacity() <= OUTPUTS_RETAINED);
    }
}
