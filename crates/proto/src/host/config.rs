//! A host's static configuration ([`HostConfig`]) and the limits its defaults follow.

use crate::ids::{LinkId, NodeId, ProcId};
use crate::reliable::ReliableConfig;
use std::sync::Arc;

#[cfg(doc)]
use crate::host::Host;

/// Static configuration of a host endpoint.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// This host's node id in the routing graph (names it in beacons).
    pub node: NodeId,
    /// The processes that live on this host.
    pub procs: Vec<ProcId>,
    /// The link from its first-hop switch to it (its input in the routing graph): what its
    /// §5.2 `LinkDown` names when that switch falls silent. `None` reports nothing (a host
    /// without a controller).
    pub input_link: Option<LinkId>,
    /// Process ids are dense in `0..senders_max`; anything else from the wire is dropped.
    pub senders_max: u32,
    /// Per-peer state (receive windows, reorder lists, next PSNs, ACK-tracker records) is made
    /// at once for process ids below this, and for the others when first used
    /// ([`crate::peers::PeerVec`]): ids kept for processes that may join later cost nothing
    /// until they do. Defaults to `senders_max`; values above it count as `senders_max`.
    pub senders_stored: u32,
    /// Beacon interval T_beacon (§4.2).
    pub beacon_interval_ns: u64,
    /// Issue 37: while this host waits for a barrier (it holds undelivered messages or
    /// unacknowledged reliable ones) or has sent within `beacon_fast_hold_ns`, it also beacons
    /// at the ticks of this shorter interval (a synchronized grid of its own, so a wave of hosts
    /// reports one value), when the beacon tells its switch something new. The regular beacon
    /// times, the keep-alive and the failure detector's count of silent intervals are
    /// unchanged. 0: never (the paper's fixed interval; the simulator's default).
    pub beacon_fast_interval_ns: u64,
    /// How long after its last ordered send a host keeps beaconing at the fast interval.
    pub beacon_fast_hold_ns: u64,
    /// Send a beacon every interval even when the uplink is busy. Needed when switches do not
    /// read barriers from data packets (switch-CPU and host-representative modes, §6.2.2–6.2.3).
    pub beacon_always: bool,
    /// Stamp the barrier on data packets (programmable-chip mode, §6.2.1). When false, data
    /// packets carry no barrier and barriers travel in beacons only.
    pub barrier_on_data: bool,
    /// Largest payload of one packet; longer messages are fragmented.
    pub mtu_payload: usize,
    /// Largest message accepted by [`Host::send`].
    pub message_len_max: usize,
    /// Most messages buffered for reordering per local process.
    pub reorder_len_max: usize,
    /// Most partially reassembled messages held at once.
    pub reassembly_len_max: usize,
    /// A receiver acknowledges a reliable packet at the latest this long after it arrives…
    pub ack_delay_ns: u64,
    /// …and a best-effort packet at the latest this long after it arrives (at most
    /// `rto_ns / ACK_DELAY_BE_RTO_DIVISOR_MIN`, checked by [`Host::new`])…
    pub ack_delay_be_ns: u64,
    /// …or either at once after this many unacknowledged packets from one sender.
    pub ack_every: u16,
    /// Most ACKs in one `AckBatch` (§6.1), `2..=ACK_BATCH_LEN_MAX`: a transport that adds bytes
    /// of its own to every datagram (the live runtime's auth header and tag) sends fewer per
    /// batch, so the largest batch still fits its datagram.
    pub ack_batch_len_max: usize,
    /// The host each process lives on (any dense numbering, indexed by process id, at least
    /// `senders_max` long), so the ACKs owed to the processes of one host go in one packet
    /// (`AckBatch`, §6.1) — under the delay rule above, applied per host: the first ACK owed
    /// to a host fixes when its batch goes. `None`: every process is a host of its own (one
    /// process per host, as the UDP runtime runs), and a batch carries only the ACKs one
    /// process is owed by several local receivers or in both services.
    pub host_of: Option<Arc<[u32]>>,
    /// A sent best-effort message unacknowledged for this long is reported lost — or for
    /// longer, up to `rto_max_ns`, when acknowledgements are measured to take longer.
    pub rto_ns: u64,
    /// Above `rto_ns`, the loss timeout adapts to the measured acknowledgement delay as TCP's
    /// retransmission timeout does (RFC 6298: `srtt + 4·rttvar`, doubled after each timeout
    /// until a sample arrives), between `rto_ns` and this. A queue is then not taken for a
    /// loss: at overload, a fixed timeout shorter than the queueing delay reports every
    /// message lost although it is delivered, and frees the window (`unacked_bytes_max`) for
    /// more, deepening the queues. Equal to `rto_ns` (the default), the timeout is fixed.
    pub rto_max_ns: u64,
    /// Most best-effort messages tracked for acknowledgement at once — acknowledged ones
    /// too, until their `rto_ns` deadline passes; more sends are `SendError::Full`. A bound on
    /// the tracker's memory, and so on the send rate: `inflight_max` per `rto_ns`.
    pub inflight_max: usize,
    /// Most bytes (payload and packet headers) of best-effort messages to other hosts that may
    /// be unacknowledged at once — not yet acknowledged, NAKed or reported lost; more sends are
    /// `SendError::Full`. §6.1's end-to-end flow control for best effort: when
    /// acknowledgements lag because queues are building on the way, senders wait instead of
    /// adding to the queues, so an overloaded network stays at its capacity instead of
    /// dropping, and acknowledgements keep arriving within `rto_ns` (no losses reported for
    /// messages that were only queued). A scattering larger than the window is sent when
    /// nothing is unacknowledged.
    pub unacked_bytes_max: u64,
    /// The reliable send path (§5.1, §6.1).
    pub reliable: ReliableConfig,
    /// The first-hop switch is taken for dead after this many beacon intervals without a packet
    /// from it (§4.2; switches send keep-alive beacons on idle links); 0 never.
    pub uplink_timeout_intervals: u32,
    /// §5.2: a `Completed` the controller has not answered with the round's `Resume` within
    /// this long is sent again (the controller may have been down and lost it), the wait
    /// doubling each time up to [`CTRL_RETRY_MAX_NS`].
    pub ctrl_retry_ns: u64,
    /// §5.2 "resumes delivery after all non-fail processes finish their callback functions":
    /// with this set, the host reports a round `Completed` only once the application said its
    /// callbacks for it are done ([`Host::complete_callbacks`]); without it (the default), as
    /// soon as it raised them.
    pub callbacks_held: bool,
    /// §5.2: the driver carries relays to the controller (receiver recovery) even with
    /// controller forwarding off: the host reports its recalls (`RelayMsg::Recalled`), which a
    /// recovering receiver's settling needs. Forwarding on implies it.
    pub relay_channel: bool,
    /// Most reliable messages delivered per instant (an input and the sends an application
    /// makes while it handles it, all at that input's time); the rest follow with the next packets (its
    /// switch sends at least a keep-alive beacon every interval). Not with timeouts: a driver
    /// runs those ahead of queued packets, and a long backlog delivered on the beacon timer
    /// kept hosts from hearing their switch until they reported it dead (a swarm run). After a
    /// long §5.2 round the commit barrier jumps and releases thousands of messages at once;
    /// delivered in one go they kept the host from its beacons for longer than the link
    /// timeout, and its switch took it for dead (VOPR seed 442 at `0cd1881`: seven live hosts
    /// declared failed). The same bound holds best-effort deliveries, each service its own:
    /// a best-effort barrier that released thousands of requests at a hot key-value server
    /// kept it busy past its link timeout (`bench fig14`, YCSB at 512 processes). 0: no limit.
    pub deliver_burst_max: u32,
    /// Most reliable messages retransmitted per input when their timers fire together; the
    /// rest follow with the next packets, or from a timer one RTO floor (`reliable.rto_ns`)
    /// later if none comes. An overloaded host whose ACKs wait behind thousands of queued
    /// inputs sees hundreds of timers fire at once; resent in one go (with §5.2 forwarded
    /// copies) they kept it from its beacons for 80 µs, and its switch took it for dead (VOPR
    /// seed 17: a live host
    /// declared failed). Not continued by an immediate timer: a driver runs timers ahead of
    /// queued packets, so a chain of them would keep the host from the ACKs that end the
    /// burst. 0: no limit.
    pub retransmit_burst_max: u32,
    /// Optimistic delivery of best-effort messages (PLATO's pipeline, `crate::optimistic`): a
    /// message is also reported on arrival when the gap since the previous arrival predicts no
    /// disorder ([`HostEvent::OptDeliver`](crate::host::HostEvent::OptDeliver)), revoked if the
    /// barrier's order contradicts it, confirmed when the barrier passes it. `None` (the
    /// default): deliveries only at the barrier.
    pub optimistic: Option<crate::optimistic::OptConfig>,
}

/// `ack_delay_be_ns` is at most `rto_ns` divided by this. §2.1: best effort "detects lost
/// packets via end-to-end ACK, but does not retransmit": its ACKs serve only the sender's loss
/// report at `rto_ns`, so they may wait far longer than reliable ACKs (which hold back the
/// commit barrier, §5.1) — but an ACK must reach its sender before the timeout, or a delivered
/// message is reported lost. Delaying by at most a quarter of the timeout leaves three quarters
/// of it for the data's and the ACK's trips through the network's queues.
pub const ACK_DELAY_BE_RTO_DIVISOR_MIN: u64 = 4;

/// The default of [`HostConfig::retransmit_burst_max`]: at the simulator's CPU costs, 64
/// retransmissions with their §5.2 forwarded copies take 6.4 µs, about two beacon intervals.
pub const RETRANSMIT_BURST_MAX: u32 = 64;

/// Longest wait between two re-sent `Completed` messages (§5.2).
pub const CTRL_RETRY_MAX_NS: u64 = 1_000_000;

impl HostConfig {
    /// A configuration with the defaults used by the simulator (3 µs beacons, 4 KiB MTU).
    pub fn new(node: NodeId, procs: Vec<ProcId>, senders_max: u32) -> HostConfig {
        HostConfig {
            node,
            procs,
            input_link: None,
            senders_max,
            senders_stored: senders_max,
            beacon_interval_ns: crate::time::BEACON_INTERVAL_NS_DEFAULT,
            beacon_fast_interval_ns: 0,
            beacon_fast_hold_ns: 0,
            beacon_always: false,
            barrier_on_data: true,
            mtu_payload: 4096 - crate::wire::DATA_HEADER_LEN,
            message_len_max: 1 << 20,
            reorder_len_max: 1 << 20,
            reassembly_len_max: 4096,
            ack_delay_ns: 2_000,
            // A fifth of `rto_ns`. With one process per host and N hosts, a host pair sees a
            // packet only every few tens of µs at saturation, so a delay of µs covers about
            // one packet: an ACK packet per message, whose send and receive CPU cost was a
            // fifth of 1Pipe's throughput at N = 128 (docs/BENCHMARKS.md, Fig. 8). 200 µs
            // covers several, and still leaves 800 µs for the ACK to arrive.
            ack_delay_be_ns: 200_000,
            ack_every: 16,
            ack_batch_len_max: crate::wire::ACK_BATCH_LEN_MAX,
            host_of: None,
            rto_ns: 1_000_000,
            rto_max_ns: 1_000_000,
            inflight_max: 1 << 20,
            unacked_bytes_max: u64::MAX,
            reliable: ReliableConfig::default(),
            uplink_timeout_intervals: 10,
            ctrl_retry_ns: 50_000,
            callbacks_held: false,
            relay_channel: false,
            deliver_burst_max: 256,
            retransmit_burst_max: RETRANSMIT_BURST_MAX,
            optimistic: None,
        }
    }
}

impl HostConfig {
    /// Panics on an inconsistent configuration (no processes, a zero beacon interval or MTU, a
    /// best-effort ACK delay the loss timeout would beat): programming errors of the caller.
    pub(super) fn assert_consistent(&self) {
        assert!(!self.procs.is_empty(), "a host needs at least one process");
        assert!(
            self.beacon_interval_ns > 0,
            "beacon interval must be positive"
        );
        assert!(self.mtu_payload > 0 && self.mtu_payload <= crate::wire::PAYLOAD_LEN_MAX);
        assert!(self.message_len_max.div_ceil(self.mtu_payload) <= u16::MAX as usize + 1);
        assert!(
            (2..=crate::wire::ACK_BATCH_LEN_MAX).contains(&self.ack_batch_len_max),
            "ack_batch_len_max ({}) must be in 2..={}",
            self.ack_batch_len_max,
            crate::wire::ACK_BATCH_LEN_MAX
        );
        assert!(
            self.host_of
                .as_ref()
                .is_none_or(|t| t.len() >= self.senders_max as usize),
            "host_of names the host of every process"
        );
        // §2.1: a best-effort ACK must reach its sender before the sender gives up on it.
        assert!(
            self.ack_delay_be_ns <= self.rto_ns / ACK_DELAY_BE_RTO_DIVISOR_MIN,
            "ack_delay_be_ns ({}) must be at most rto_ns / {ACK_DELAY_BE_RTO_DIVISOR_MIN} ({})",
            self.ack_delay_be_ns,
            self.rto_ns / ACK_DELAY_BE_RTO_DIVISOR_MIN
        );
    }

    /// The ACK batcher's peer hosts: (made at once, stored at once) — the hosts of the
    /// processes stored at once (the ACKs batch by peer host).
    pub(super) fn ack_peers(&self) -> (usize, usize) {
        let peers = |ids: usize| match &self.host_of {
            Some(t) => t[..ids.min(t.len())]
                .iter()
                .map(|&h| h as usize + 1)
                .max()
                .unwrap_or(0),
            None => ids,
        };
        (
            peers(self.senders_max as usize),
            peers(self.senders_stored as usize),
        )
    }
}
