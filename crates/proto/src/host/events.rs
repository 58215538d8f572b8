//! What a host reports upward ([`HostEvent`], [`Delivery`]), why it refuses a send
//! ([`SendError`]), and the counters it keeps ([`HostStats`]).

use crate::ids::{ProcId, Psn};
use crate::reorder::OrderKey;
use crate::time::{Instant, Timestamp};
use crate::wire::NakReason;
use bytes::Bytes;
use std::collections::BTreeMap;

#[cfg(doc)]
use crate::host::Host;

/// A message delivered to a local process: in total order ([`HostEvent::Deliver`]), or on
/// arrival outside it ([`HostEvent::DeliverPlain`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The receiving (local) process.
    pub dst: ProcId,
    /// The sending process.
    pub src: ProcId,
    /// The message timestamp.
    pub ts: Timestamp,
    /// PSN of the message's first packet, per (src, dst).
    pub psn: Psn,
    /// The message.
    pub payload: Bytes,
    /// The barrier that released it (`ts < barrier`): the commit barrier for a reliable message.
    /// For a plain message, which no barrier releases, the best-effort barrier this host had
    /// released when it arrived (0 before the first): it may be at or below `ts`.
    pub barrier: Timestamp,
    /// Sent with the reliable service (`onepipe_reliable_recv`), else best effort.
    pub reliable: bool,
    /// Local instant the (last fragment of the) message arrived.
    pub arrived: Instant,
    /// The host's timestamp when it delivered (§4.1 causality: `ts < now_ts`; a plain message
    /// promises no such thing).
    pub now_ts: Timestamp,
}

/// What a host reports upward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostEvent {
    /// A message is delivered (`onepipe_unreliable_recv`), in the total order of its service.
    Deliver(Delivery),
    /// A plain message ([`Host::send_plain`], §2.2.2) is delivered on arrival: it has no place
    /// in the total order, and nothing about its position among other deliveries is promised.
    DeliverPlain(Delivery),
    /// A message sent by a local process was dropped by its receiver
    /// (`onepipe_send_fail_callback(TS, dst, msg)`; §2.1, §4.1).
    SendFailed {
        /// The local sender.
        src: ProcId,
        /// The receiver that dropped it.
        dst: ProcId,
        /// Its timestamp.
        ts: Timestamp,
        /// PSN of its first packet.
        psn: Psn,
        /// Why.
        reason: NakReason,
    },
    /// §5.2 Callback (`onepipe_proc_fail_callback`): process `proc` failed at `ts`. Reliable
    /// messages it sent below `ts` are delivered everywhere; those at or above it, nowhere
    /// (`ts` is a commit barrier, which releases what is strictly below it). With
    /// `HostConfig::callbacks_held`, the round waits for [`Host::complete_callbacks`].
    ProcFailed {
        /// The failed process.
        proc: ProcId,
        /// Its failure timestamp.
        ts: Timestamp,
        /// The failure round that announced it.
        round: u32,
    },
    /// §5.2 Recall: the reliable scattering `src` stamped `ts` was aborted because a receiver
    /// failed before acknowledging it; no correct receiver delivers it (the send-failed callback
    /// for a recalled scattering).
    Recalled {
        /// The local sender.
        src: ProcId,
        /// Its timestamp.
        ts: Timestamp,
    },
    /// A queued reliable scattering was dropped before it was stamped: a destination failed.
    ReliableAborted {
        /// The handle [`Host::send_reliable`] returned.
        handle: u64,
        /// The local sender.
        src: ProcId,
    },
    /// Optimistic delivery (`HostConfig::optimistic`; PLATO's `optdeliver`): a best-effort
    /// message reported on arrival, before the barrier passes it; the application may use it
    /// from `usable_at` on (Tm = arrival + Δ). A [`HostEvent::Revoke`] may take it back; a
    /// [`HostEvent::Confirm`] makes it final. `delivery.barrier` and `delivery.now_ts` are 0:
    /// no barrier released it, and nothing causal is promised about it.
    OptDeliver {
        /// The message.
        delivery: Delivery,
        /// Tm.
        usable_at: Instant,
    },
    /// PLATO's `revoke`: the optimistic delivery of `key` to `dst` is taken back (the barrier
    /// put another message first: it comes again, in its place; or §5.2 discarded it: it never
    /// comes).
    Revoke {
        /// The receiving local process.
        dst: ProcId,
        /// The message.
        key: OrderKey,
        /// Of the reliable service (its PSNs are a space of their own).
        reliable: bool,
        /// At or after Tm: the application may have used it (a rollback).
        rollback: bool,
    },
    /// PLATO's `confirm`: the optimistic delivery of `key` to `dst` is final; its
    /// [`HostEvent::Deliver`] follows at once.
    Confirm {
        /// The receiving local process.
        dst: ProcId,
        /// The message.
        key: OrderKey,
        /// Of the reliable service.
        reliable: bool,
    },
    /// A reliable scattering left the send buffer: it was stamped `ts` and sent.
    ReliableSent {
        /// The handle [`Host::send_reliable`] returned.
        handle: u64,
        /// The local sender.
        src: ProcId,
        /// Its timestamp.
        ts: Timestamp,
    },
}

/// Why [`Host::send`] refused a scattering. Nothing was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The scattering has no messages.
    Empty,
    /// The sending process does not live on this host.
    NotLocal(ProcId),
    /// A destination is outside `0..senders_max`.
    UnknownDestination(ProcId),
    /// The send buffer is full (§6.1: "if the send buffer is full, the send API returns fail"):
    /// `inflight_max` unacknowledged best-effort messages, or `send_buffer_bytes_max` bytes of
    /// reliable ones.
    Full,
    /// A destination process has failed (§5.2): reliable scatterings to it are refused. Or the
    /// sending process itself: its host was told it failed, and sends nothing more.
    Failed(ProcId),
    /// A message is longer than `message_len_max` (for reliable messages: than one window of
    /// packets), or a reliable scattering is larger than the whole send buffer.
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl core::fmt::Display for SendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SendError::Empty => write!(f, "empty scattering"),
            SendError::NotLocal(p) => write!(f, "process {p} does not live on this host"),
            SendError::UnknownDestination(p) => write!(f, "unknown destination process {p}"),
            SendError::Failed(p) => write!(f, "destination process {p} has failed"),
            SendError::Full => write!(f, "send buffer full: too many unacknowledged messages"),
            SendError::TooLarge { len, max } => {
                write!(f, "message of {len} bytes exceeds the {max}-byte limit")
            }
        }
    }
}

impl std::error::Error for SendError {}

/// Counters a host keeps; never reset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Messages sent in the total order, best effort or reliable (one per destination of a
    /// scattering); plain ones are counted in `plain_sent`.
    pub messages_sent: u64,
    /// Plain messages sent ([`Host::send_plain`]; one per destination).
    pub plain_sent: u64,
    /// Data packets sent on the uplink.
    pub packets_sent: u64,
    /// Beacons sent.
    pub beacons_sent: u64,
    /// Of which at the fast interval (`HostConfig::beacon_fast_interval_ns`).
    pub beacons_fast: u64,
    /// Best-effort messages delivered to local processes in the total order.
    pub delivered: u64,
    /// Plain messages delivered to local processes, on arrival.
    pub delivered_plain: u64,
    /// Packets dropped because they arrived below the barrier (§4.1).
    pub dropped_late: u64,
    /// `dropped_late` by sender, for the senders that had one. Bounded by `senders_max`: a
    /// packet from a sender outside it is dropped as invalid before its lateness is looked at.
    pub dropped_late_by_sender: BTreeMap<ProcId, u64>,
    /// Messages delivered from a reorder buffer (both services, and §5.2 settling).
    pub reorder_holds: u64,
    /// Their time in the buffer summed, ns: from arrival (the message whole) to delivery.
    pub reorder_hold_ns: u64,
    /// The longest of those times, ns.
    pub reorder_hold_ns_max: u64,
    /// Messages dropped because a fragment never came before the barrier passed them.
    pub dropped_incomplete: u64,
    /// Messages dropped because a reorder or reassembly buffer was full.
    pub dropped_full: u64,
    /// Packets dropped as malformed, misaddressed or duplicate.
    pub dropped_invalid: u64,
    /// NAKs sent.
    pub naks_sent: u64,
    /// Send-failed notifications raised.
    pub send_failed: u64,
    /// Packets dropped as duplicates of ones already received.
    pub dropped_duplicate: u64,
    /// ACKs sent (one per (sender, receiver, service) acknowledged, batched or not).
    pub acks_sent: u64,
    /// Packets that carried them: `Ack`s and `AckBatch`es.
    pub ack_packets_sent: u64,
    /// ACKs received (each entry of a batch counts).
    pub acks_received: u64,
    /// Messages reported lost after the retransmission timeout.
    pub lost: u64,
    /// Reliable messages delivered to local processes.
    pub delivered_reliable: u64,
    /// Times the first-hop switch fell silent for `uplink_timeout_intervals` (§4.2).
    pub uplink_failures: u64,
    /// §5.2 `Completed` messages sent again because the controller had not answered.
    pub ctrl_resent: u64,
    /// §5.2 forwarding: messages handed to the controller, and packets it relayed here.
    pub forwarded: u64,
    /// Of which arrived here.
    pub forwarded_in: u64,
    /// §5.2 Receiver Recovery: 1 once this host, declared failed, settled its receive buffer.
    pub recovered: u64,
    /// Reliable messages it delivered from its buffer when it settled (also in
    /// `delivered_reliable`), and the ones it discarded.
    pub settled_delivered: u64,
    /// See `settled_delivered`.
    pub settled_discarded: u64,
    /// §5.2: times this host rejoined as new processes (its incarnation).
    pub rejoined: u64,
    /// §5.2: other hosts' rejoins it heard of (`RelayMsg::PeerJoined`).
    pub peers_joined: u64,
}

impl HostStats {
    /// A message that arrived at `arrived` left a reorder buffer at `now`: its hold is counted
    /// (zero if the clock stepped back meanwhile).
    #[inline]
    pub(crate) fn held(&mut self, arrived: Instant, now: Instant) {
        let ns = now.saturating_since(arrived);
        self.reorder_holds += 1;
        self.reorder_hold_ns = self.reorder_hold_ns.saturating_add(ns);
        self.reorder_hold_ns_max = self.reorder_hold_ns_max.max(ns);
    }

    /// A packet from `src` arrived below the barrier (§4.1) and was dropped.
    pub(crate) fn late(&mut self, src: ProcId) {
        self.dropped_late += 1;
        *self.dropped_late_by_sender.entry(src).or_insert(0) += 1;
    }
}
