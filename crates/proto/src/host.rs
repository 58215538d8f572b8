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
//! Plain messages (§2.2.2: a reply that "does not need to be ordered by 1Pipe") go beside
//! the ordered ones: [`Host::send_plain`] sends best-effort fragments flagged
//! [`crate::wire::flags::PLAIN`] on the same uplink, which the receiving host delivers the moment
//! they are whole ([`HostEvent::DeliverPlain`]), bypassing the reorder buffer and the barrier.
//! They share the best-effort PSN space, window, acknowledgements and loss reports, so a lost
//! plain message is reported exactly as a lost ordered one is; their barrier fields describe
//! their link as any data packet's do, so the barrier and beacons are unchanged by them.
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
mod optimistic;
mod reassembly;
mod receive;
mod recovery;
mod rounds;
mod send;
mod uplink;

use crate::ack::{AckBatcher, AckOwed, RecvWindow, SendTracker};
use crate::failure::{CtrlMsg, Mgmt, MgmtDest, RelayMsg};
use crate::gaps::BarrierGaps;
use crate::ids::{NodeId, PortId, ProcId, Psn};
use crate::node::{Input, Node, Notice, Output};
use crate::peers::PeerVec;
use crate::reliable::{ReliableSender, ReliableStats, ReliableWindow, Rtt, Transmit, WINDOW_MAX};
use crate::reorder::{InsertError, OrderKey, ReorderBuffer};
use crate::time::{Barrier, Instant, Timestamp};
use crate::wire::{flags, Ack, AckBatch, Beacon, DataHeader, DataPacket, Nak, NakReason, Packet};
use bytes::Bytes;
use lifecycle::Lifecycle;
use reassembly::{Reassembly, Refused};
use receive::{LocalProc, ReliableRecv};
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
    /// What `deliver_burst_max` still allows at the current instant.
    burst: receive::DeliverBurst,
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
    /// When barriers arrived on the uplink (beacons and barrier-carrying data), for metrics.
    uplink_gaps: BarrierGaps,
    /// Fast beacons are wanted until then at least (`HostConfig::beacon_fast_hold_ns` after
    /// the last ordered send).
    fast_until: Instant,
    /// The first-hop switch asked for fast beacons until then ([`Beacon::demand`]).
    demand_until: Instant,
    /// Fast beacons were wanted after the last input (to see them start).
    fast_on: bool,
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
        cfg.assert_consistent();
        let (ack_peers, ack_peers_stored) = cfg.ack_peers();
        let procs = cfg
            .procs
            .iter()
            .map(|&id| LocalProc::new(id, &cfg))
            .collect();
        let uplink = Uplink::new(now, cfg.beacon_interval_ns, cfg.uplink_timeout_intervals)
            .with_fast(now, cfg.beacon_fast_interval_ns);
        Host {
            procs,
            clock_ts: now.timestamp(),
            barrier: None,
            commit: None,
            commit_released: None,
            be_released: None,
            deliver_backlog: false,
            burst: receive::DeliverBurst::default(),
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
            uplink_gaps: BarrierGaps::default(),
            fast_until: now,
            demand_until: now,
            fast_on: false,
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

    /// This host with the counters kept across a restart (a driver's bookkeeping: they are
    /// never reset); set-up before the first input, by value.
    pub fn with_stats(mut self, stats: HostStats) -> Host {
        self.stats = stats;
        self
    }

    /// Whether this host restarted after a crash and has not yet heard that it was declared
    /// failed (see [`Host::restarted`]).
    pub fn restart_silent(&self) -> bool {
        self.life.silent()
    }

    /// Δ of each local process's optimistic pipeline now (`HostConfig::optimistic`), ns.
    pub fn optimistic_delta_ns(&self) -> impl Iterator<Item = u64> + '_ {
        self.procs
            .iter()
            .filter_map(|lp| lp.opt.as_ref().map(|o| o.delta_ns()))
    }

    /// Messages the optimistic pipelines of the local processes hold (arrived, and neither
    /// confirmed nor discarded), both services: 0 once everything was delivered.
    pub fn optimistic_held(&self) -> usize {
        self.procs
            .iter()
            .flat_map(|lp| {
                [
                    lp.opt.as_ref(),
                    lp.rel.as_ref().and_then(|r| r.opt.as_ref()),
                ]
            })
            .flatten()
            .map(|o| o.held())
            .sum()
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

    /// The reliable sender's windows now, summed over its (sender, destination) pairs.
    pub fn reliable_send_window(&self) -> ReliableWindow {
        self.sender.window()
    }

    /// When barriers arrived on the uplink (beacons and barrier-carrying data).
    pub fn uplink_gaps(&self) -> BarrierGaps {
        self.uplink_gaps
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

    /// The application has room for `room` more plain messages to local process `p`
    /// ([`Host::send_plain`]; `usize::MAX`, the default: no bound): the host delivers at most
    /// that many before the next call, and refuses a plain message beyond it with a
    /// `BufferFull` NAK before acknowledging it, as [`Host::set_room`] does for ordered ones.
    /// Plain messages are never held, so there is nothing to deliver now. Returns false if `p`
    /// is not local.
    pub fn set_plain_room(&mut self, p: ProcId, room: usize) -> bool {
        let Some(i) = self.local_index(p) else {
            return false;
        };
        self.procs[i].plain_room = room;
        true
    }

    /// The plain room `p` has left ([`Host::set_plain_room`]); `None` if `p` is not local.
    pub fn plain_room(&self, p: ProcId) -> Option<usize> {
        Some(self.procs[self.local_index(p)?].plain_room)
    }

    /// The best-effort barrier below which everything has been delivered: the barrier, unless
    /// messages below it are held for want of room ([`Host::set_room`]) or left for the next
    /// inputs by `deliver_burst_max`.
    pub fn released(&self) -> Option<Barrier> {
        self.be_released.map(Barrier)
    }

    /// The host's current timestamp (`onepipe_get_timestamp`) as of local time `now`: never
    /// below any timestamp issued before, whatever the clock did.
    pub fn timestamp(&mut self, now: Instant) -> Timestamp {
        self.clock_ts = self.clock_ts.max_wrapping(now.timestamp());
        // §2.1 causality: what is stamped now goes above everything this host released to its
        // processes (a delivery is strictly below its barrier, and the counter was raised to
        // the barrier before it).
        debug_assert!(
            self.be_released.is_none_or(|b| self.clock_ts >= b)
                && self.commit_released.is_none_or(|c| self.clock_ts >= c),
            "host {}: stamping {:?} below a released barrier ({:?}, commit {:?})",
            self.cfg.node,
            self.clock_ts,
            self.be_released,
            self.commit_released
        );
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
            self.fast_beacon_tick(now);
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
            let demand = self.local_need(now);
            self.send_beacon(barrier, commit, demand);
            self.uplink.beaconed(barrier);
        }
        self.uplink.schedule(now);
    }

    /// Issue 37: between the regular beacon times, a host that waits for a barrier or has just
    /// sent (`HostConfig::beacon_fast_interval_ns`) beacons at the fast grid's ticks when the
    /// beacon tells its switch something new: the barrier then rises within a fast interval
    /// instead of a regular one. The regular ticks keep the keep-alive and the silence count.
    fn fast_beacon_tick(&mut self, now: Instant) {
        if self.uplink.next_fast_beacon().is_none_or(|t| t > now) {
            return;
        }
        if !self.wants_fast(now) {
            self.uplink.idle_fast(now);
            return;
        }
        self.timestamp(now);
        // Never below what the link was already told (a data packet may have carried more
        // than the latest fast tick): barriers on a link never go backwards (§4.1).
        let (told_b, told_c) = self.uplink.told();
        let mut barrier = self.uplink.fast_barrier(now);
        if let Some(b) = told_b {
            barrier = barrier.max_wrapping(b);
        }
        let c = self.sender.commit(self.clock_ts).min_wrapping(barrier);
        let mut commit = self.commit_sent.max_wrapping(c);
        if let Some(tc) = told_c {
            commit = commit.max_wrapping(tc);
        }
        let demand = self.local_need(now);
        let news = self.uplink.tells_news(barrier, commit) || demand && !self.uplink.last_demand();
        if news && !self.life.silent() {
            self.commit_sent = commit;
            self.stats.beacons_fast += 1;
            self.send_beacon(barrier, commit, demand);
            self.uplink.fast_beaconed(barrier);
        }
    }

    /// Sends a beacon up and counts it.
    /// A keep-alive beacon for the NIC to send while this host's CPU is busy with one long
    /// input (§7.1: the testbed dedicates a core to each NIC's beacons, so a host whose
    /// application is busy still beacons). It repeats the barrier and commit barrier the uplink
    /// was last told and tells nothing new, so it is valid at any time after the packets that
    /// told them: a lower bound already on the link stays one (§4.1). Its only effect is that
    /// the first-hop switch hears the link (§4.2), and does not take a busy host for dead.
    /// `None` before anything was told, or for a restarted host that must stay silent.
    /// Changes nothing in the host.
    pub fn keepalive_beacon(&self) -> Option<Beacon> {
        if self.life.silent() {
            return None;
        }
        match self.uplink.told() {
            (Some(barrier), Some(commit)) => Some(Beacon {
                from: self.cfg.node,
                barrier,
                commit,
                demand: false,
            }),
            _ => None,
        }
    }

    /// The NIC received a packet from the first-hop switch that waits for the CPU: the switch
    /// is alive. §4.2's silence count is about what reaches the host, not what its CPU got to:
    /// a driver that runs the beacon timer ahead of queued packets (so beacons are not starved)
    /// calls this for each packet it queues, or a busy host takes its switch for dead and
    /// reports its own link (Fig. 14 c at 512 processes, 16 operations: 112 hosts declared).
    pub fn uplink_heard(&mut self) {
        self.uplink.heard();
    }

    fn send_beacon(&mut self, barrier: Timestamp, commit: Timestamp, demand: bool) {
        self.stats.beacons_sent += 1;
        self.send_uplink(Packet::Beacon(Beacon {
            from: self.cfg.node,
            barrier,
            commit,
            demand,
        }));
    }

    /// Whether fast beacons are wanted at `now`: this host needs the barrier to rise
    /// ([`Host::local_need`]), or its switch said someone else does ([`Beacon::demand`]).
    fn wants_fast(&self, now: Instant) -> bool {
        self.cfg.beacon_fast_interval_ns > 0 && (now < self.demand_until || self.local_need(now))
    }

    /// Whether this host needs the barrier to rise at `now` (what its beacons' demand flag
    /// says): it sent an ordered message within the hold, or waits for a barrier — it holds
    /// messages for reordering, or messages not yet acknowledged. Never with fast beacons off.
    fn local_need(&self, now: Instant) -> bool {
        self.cfg.beacon_fast_interval_ns > 0
            && (now < self.fast_until || self.sender.unacked() > 0 || self.holds_ordered())
    }

    /// After an input: when fast beacons start to be wanted, or this host's need is not yet
    /// announced, a fast beacon goes at once (the demand travels up the tree and down to every
    /// host within one crossing instead of waiting for the next tick).
    fn follow_demand(&mut self, now: Instant) {
        if self.cfg.beacon_fast_interval_ns == 0 {
            return;
        }
        let want = self.wants_fast(now);
        let rising = want && !self.fast_on;
        self.fast_on = want;
        if rising || (self.local_need(now) && !self.uplink.last_demand()) {
            self.uplink.fast_now(now);
            self.fast_beacon_tick(now);
        }
    }

    /// Some local process holds received messages that wait for a barrier.
    fn holds_ordered(&self) -> bool {
        self.procs
            .iter()
            .any(|p| !p.reorder.is_empty() || p.rel.as_ref().is_some_and(|r| !r.reorder.is_empty()))
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
            Input::Notice(Notice::LinkUp) => self.recover(now),
            // The controller's notices.
            Input::Notice(Notice::Recovered | Notice::Unreachable(_)) => {}
        }
        self.follow_demand(now);
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
        if let Some(fast) = self.uplink.next_fast_beacon() {
            if self.wants_fast(fast) {
                t = t.min(fast);
            }
        }
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
