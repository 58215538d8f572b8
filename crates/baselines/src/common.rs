//! What every baseline shares: the port, events, send errors, counters, the [`Endpoint`] trait,
//! and the small bounded structures the protocols are built from — a sequence-number reorder
//! window (`SeqBuffer`), a bounded retransmission history (`History`) and the NACK arithmetic
//! that connects them.
//!
//! The loss-repair pattern shared by the sequencer and Lamport protocols: a *stream* from one
//! source to one receiver carries a per-receiver sequence number (consecutive over the messages
//! this receiver gets, so a gap is visible) and a source-wide index (increasing over everything
//! the source sends, so the source can find a message in its history). A receiver that sees a gap
//! NACKs the source with the missing sequence numbers and the index range they must lie in; the
//! source answers with retransmissions, or with a `Lost` marker for what fell out of its bounded
//! history. History is evicted oldest first, so the evicted part of any gap is a prefix of it.

use crate::dests::Dests;
use crate::packet::PAYLOAD_LEN_MAX;
use bytes::Bytes;
use onepipe_proto::ids::{PortId, ProcId};
use onepipe_proto::node::Node;
use onepipe_proto::time::Instant;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::packet::BasePacket;

/// The only port of every baseline role: packets leave on it and arrive on it. The driver routes
/// by the packet's destination process.
pub const PORT: PortId = PortId(0);

/// Most NACK packets a receiver sends for one stream per timeout, however many gaps it has.
pub const NACKS_PER_ROUND_MAX: usize = 16;

/// What a baseline role reports upward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BaseEvent {
    /// A message is delivered to process `dst`, in the protocol's total order: deliveries at
    /// every process are increasing in `(seq_or_ts, src)`, and a message has the same key at
    /// every process that delivers it.
    Deliver {
        /// The receiving process.
        dst: ProcId,
        /// The process that sent it.
        src: ProcId,
        /// The global sequence number (sequencer, token) or Lamport timestamp (ties broken by
        /// `src`).
        seq_or_ts: u64,
        /// The message.
        payload: Bytes,
    },
    /// Process `dst` gave up on `count` messages it will never deliver: they fell out of their
    /// source's bounded history before a retransmission was asked for. The order of everything
    /// else is unaffected.
    Lost {
        /// The receiving process.
        dst: ProcId,
        /// The original sender, when the protocol knows it (the sequencer's receivers do not).
        src: Option<ProcId>,
        /// How many messages.
        count: u64,
    },
    /// PLATO's `optdeliver` (see [`crate::plato`]): `dst` may use the message from
    /// `usable_at` on (Tm), though its place in the total order is not yet known; a
    /// [`BaseEvent::Revoke`] may take it back, a [`BaseEvent::Confirm`] makes it final.
    OptDeliver {
        /// The receiving process.
        dst: ProcId,
        /// The sender.
        src: ProcId,
        /// The sender's send counter: names the message in `Revoke` and `Confirm`.
        msg_id: u64,
        /// Tm: arrival + Δ (or now, when its place was already known).
        usable_at: Instant,
        /// The message.
        payload: Bytes,
    },
    /// PLATO's `revoke`: the optimistic delivery of `(src, msg_id)` at `dst` is taken back.
    Revoke {
        /// The receiving process.
        dst: ProcId,
        /// The sender.
        src: ProcId,
        /// The sender's send counter.
        msg_id: u64,
        /// At or after Tm: the application may have used it (PLATO's rollback).
        rollback: bool,
    },
    /// PLATO's `confirm`: the optimistic delivery of `(src, msg_id)` at `dst` is final; the
    /// [`BaseEvent::Deliver`] of it, with its place in the total order, follows at once.
    Confirm {
        /// The receiving process.
        dst: ProcId,
        /// The sender.
        src: ProcId,
        /// The sender's send counter.
        msg_id: u64,
    },
    /// Sends of process `src` were lost before being ordered and will be delivered nowhere.
    /// Sends are numbered from 0 by the order in which `send` accepted them.
    SendFailed {
        /// The sending process.
        src: ProcId,
        /// Number of the first lost send.
        first_send: u64,
        /// How many consecutive sends.
        count: u64,
    },
}

/// Why `send` refused a message. Nothing was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BaseSendError {
    /// The bounded send queue is full (`send_queue_len_max`): back-pressure, try later.
    Full,
    /// The destination set is empty.
    NoDestinations,
    /// A destination is outside the group `0..procs`.
    UnknownDestination(ProcId),
    /// The payload is longer than the configured maximum.
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The role is not an endpoint (a sequencer orders, it does not send).
    NotASender,
}

impl core::fmt::Display for BaseSendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BaseSendError::Full => write!(f, "send queue full"),
            BaseSendError::NoDestinations => write!(f, "no destinations"),
            BaseSendError::UnknownDestination(p) => write!(f, "unknown destination {p}"),
            BaseSendError::TooLarge { len, max } => {
                write!(f, "message of {len} bytes exceeds the {max}-byte limit")
            }
            BaseSendError::NotASender => write!(f, "this role does not send messages"),
        }
    }
}

impl std::error::Error for BaseSendError {}

/// Counters a role keeps; never reset. Fields a protocol has no use for stay zero.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BaseStats {
    /// Sends accepted from the application.
    pub sends: u64,
    /// Messages stamped with a place in the total order (sequencer: by it; token: by holders).
    pub stamped: u64,
    /// Packets emitted on the port (loop-back to the role itself excluded).
    pub packets_sent: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Messages given up on (reported as [`BaseEvent::Lost`]).
    pub lost: u64,
    /// Sends reported failed ([`BaseEvent::SendFailed`]).
    pub send_failed: u64,
    /// NACK packets sent.
    pub nacks_sent: u64,
    /// Messages retransmitted in answer to NACKs.
    pub retransmitted: u64,
    /// `Lost` / `TokenLost` / `SubmitLost` markers sent.
    pub lost_markers_sent: u64,
    /// Heartbeats sent: Lamport clocks, sequencer tail syncs.
    pub heartbeats_sent: u64,
    /// Token transfers started (first transmissions).
    pub token_passes: u64,
    /// Token retransmissions after a missing acknowledgement.
    pub token_retransmits: u64,
    /// Packets dropped as malformed, misaddressed, from an unknown process or inconsistent.
    pub dropped_invalid: u64,
    /// Packets dropped as duplicates of something already received.
    pub dropped_duplicate: u64,
    /// Packets dropped because a bounded buffer or window had no room (repaired by NACK later).
    pub dropped_full: u64,
}

/// An endpoint role of any baseline: one per process.
///
/// Driving follows [`onepipe_proto::node`]: after `handle` or [`Endpoint::send`], drain
/// `poll_output` until `None`, then re-arm from `poll_timeout`.
pub trait Endpoint:
    Node<Packet = BasePacket, Event = BaseEvent, Mgmt = std::convert::Infallible>
{
    /// This endpoint's process.
    fn id(&self) -> ProcId;

    /// Sends `payload` to `dests` ([`Dests::all`] broadcasts to every process, this one
    /// included). Deliveries come out as [`BaseEvent::Deliver`] in the total order.
    fn send(&mut self, now: Instant, payload: Bytes, dests: Dests) -> Result<(), BaseSendError>;

    /// Counters.
    fn stats(&self) -> &BaseStats;
}

/// Checks a send against the group size and payload limit.
pub(crate) fn validate_send(
    procs: u32,
    payload_len_max: usize,
    payload: &Bytes,
    dests: &Dests,
) -> Result<(), BaseSendError> {
    debug_assert!(payload_len_max <= PAYLOAD_LEN_MAX);
    if payload.len() > payload_len_max {
        return Err(BaseSendError::TooLarge {
            len: payload.len(),
            max: payload_len_max,
        });
    }
    if dests.is_empty(procs) {
        return Err(BaseSendError::NoDestinations);
    }
    if let Some(list) = dests.as_slice() {
        // Sorted: only the last can be out of range.
        if let Some(&p) = list.last().filter(|p| p.0 >= procs) {
            return Err(BaseSendError::UnknownDestination(p));
        }
    }
    Ok(())
}

/// True if every destination of a wire-supplied list lies inside the group.
pub(crate) fn dests_in_group(dests: &Dests, procs: u32) -> bool {
    dests
        .as_slice()
        .is_none_or(|l| l.last().is_none_or(|p| p.0 < procs))
}

/// Why a [`SeqBuffer`] refused an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Below the next expected number, or already buffered.
    Duplicate,
    /// At or beyond `next + window`.
    Window,
}

/// A reorder window over consecutive sequence numbers: items arrive in any order and leave in
/// sequence order. Holds at most `window` items (everything lies in `next .. next + window`).
#[derive(Clone, Debug)]
pub(crate) struct SeqBuffer<T> {
    next: u64,
    window: u64,
    slots: BTreeMap<u64, T>,
}

impl<T> SeqBuffer<T> {
    pub(crate) fn new(window: u64) -> SeqBuffer<T> {
        assert!(window > 0, "a reorder window must hold something");
        SeqBuffer {
            next: 0,
            window,
            slots: BTreeMap::new(),
        }
    }

    /// The next sequence number to leave.
    pub(crate) fn next(&self) -> u64 {
        self.next
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn window(&self) -> u64 {
        self.window
    }

    /// The lowest buffered sequence number.
    pub(crate) fn first(&self) -> Option<u64> {
        self.slots.keys().next().copied()
    }

    pub(crate) fn insert(&mut self, seq: u64, item: T) -> Result<(), Refused> {
        if seq < self.next || self.slots.contains_key(&seq) {
            return Err(Refused::Duplicate);
        }
        if seq - self.next >= self.window {
            return Err(Refused::Window);
        }
        self.slots.insert(seq, item);
        debug_assert!(self.slots.len() as u64 <= self.window);
        Ok(())
    }

    /// The item numbered `next`, if it is here.
    pub(crate) fn pop(&mut self) -> Option<(u64, T)> {
        let entry = self.slots.first_entry()?;
        if *entry.key() != self.next {
            debug_assert!(*entry.key() > self.next);
            return None;
        }
        self.next += 1;
        Some(entry.remove_entry())
    }

    /// Gives up on everything below `seq` that has not arrived: `next` jumps to `seq`.
    /// Returns how many numbers were skipped.
    ///
    /// # Panics
    /// If an item below `seq` is buffered (pop it first): skipping it would lose it silently.
    pub(crate) fn skip_to(&mut self, seq: u64) -> u64 {
        assert!(
            self.first().is_none_or(|f| f >= seq),
            "skipping a buffered item"
        );
        let skipped = seq.saturating_sub(self.next);
        self.next = self.next.max(seq);
        skipped
    }

    /// Fills every missing number of `from .. from + count` that lies in the window with
    /// `make()`. Returns how many were filled.
    pub(crate) fn fill(&mut self, from: u64, count: u64, mut make: impl FnMut() -> T) -> u64 {
        let lo = from.max(self.next);
        let hi = from
            .saturating_add(count)
            .min(self.next.saturating_add(self.window));
        let mut filled = 0;
        for seq in lo..hi {
            if let std::collections::btree_map::Entry::Vacant(v) = self.slots.entry(seq) {
                v.insert(make());
                filled += 1;
            }
        }
        filled
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.slots.iter().map(|(k, v)| (*k, v))
    }
}

/// Most doublings of a NACK wait: a gap, or a missing message, is asked for again after at
/// most `2^NACK_BACKOFF_MAX` NACK timeouts.
pub(crate) const NACK_BACKOFF_MAX: u32 = 6;

/// When a stream receiver NACKs its gaps. A gap is NACKed only if nothing was released for a
/// whole wait, so a gap that closed and a younger one that opened since are not NACKed early;
/// and each wait without progress is twice the one before (up to [`NACK_BACKOFF_MAX`]
/// doublings), so a loaded source whose answers come late is not asked ever faster: asking at a
/// fixed pace kept a saturated sequencer saturated with repeated resends (`vopr --plato` seed
/// 213, 16 processes at 100,000 sends/s each with bursty loss).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GapTimer {
    at: Option<Instant>,
    /// The next expected number when the timer was armed.
    armed_next: u64,
    /// NACK rounds since the last progress.
    asks: u32,
}

impl GapTimer {
    /// Arms the timer if there is a gap and it is not armed; disarms it if there is none.
    /// `next` is the receiver's next expected number.
    pub(crate) fn arm(&mut self, now: Instant, has_gap: bool, next: u64, timeout_ns: u64) {
        if !has_gap {
            self.at = None;
            self.asks = 0;
        } else if self.at.is_none() {
            if next != self.armed_next {
                self.asks = 0;
            }
            self.at = Some(now + (timeout_ns << self.asks.min(NACK_BACKOFF_MAX)));
            self.armed_next = next;
        }
    }

    /// Whether the timer is due at `now`; if so it is disarmed (re-arm it after). Returns true
    /// when the gaps should be NACKed now: nothing was released since the timer was armed.
    pub(crate) fn fire(&mut self, now: Instant, next: u64) -> bool {
        if self.at.is_none_or(|t| t > now) {
            return false;
        }
        self.at = None;
        if next != self.armed_next {
            return false;
        }
        self.asks = self.asks.saturating_add(1);
        true
    }

    /// When it is due.
    pub(crate) fn at(&self) -> Option<Instant> {
        self.at
    }
}

/// One NACK to send: sequence numbers `seq .. seq + count`, source indexes in `lo .. hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NackReq {
    pub(crate) seq: u64,
    pub(crate) count: u64,
    pub(crate) lo: u64,
    pub(crate) hi: u64,
}

/// The NACKs a stream receiver sends for its gaps (see the module docs).
///
/// `last_index` is the source index of the last message that left the buffer (the lower bound of
/// the first gap's indexes); `index_of` gives a buffered item's index (`None` for a slot marked
/// lost, whose index is unknown); `tail` is `(seq_next, index_hi)` from the source's last
/// heartbeat: everything below `seq_next` was sent, with indexes below `index_hi`.
///
/// A run of missing numbers extends across slots marked lost up to the next item with a known
/// index (or the tail), whose index bounds it from above. Counts are capped at the window.
pub(crate) fn gap_nacks<T>(
    rx: &SeqBuffer<T>,
    last_index: Option<u64>,
    tail: Option<(u64, u64)>,
    index_of: impl Fn(&T) -> Option<u64>,
) -> Vec<NackReq> {
    let mut out = Vec::new();
    let mut expected = rx.next();
    let mut lo = last_index.map_or(0, |i| i.saturating_add(1));
    let mut run: Option<u64> = None;
    for (k, item) in rx.iter() {
        if out.len() == NACKS_PER_ROUND_MAX {
            return out;
        }
        if k > expected && run.is_none() {
            run = Some(expected);
        }
        if let Some(index) = index_of(item) {
            if let Some(start) = run.take() {
                out.push(NackReq {
                    seq: start,
                    count: (k - start).min(rx.window()),
                    lo,
                    hi: index,
                });
            }
            lo = index.saturating_add(1);
        }
        expected = k + 1;
    }
    if let Some((seq_next, index_hi)) = tail {
        if seq_next > expected && run.is_none() {
            run = Some(expected);
        }
        if let Some(start) = run {
            if seq_next > start && out.len() < NACKS_PER_ROUND_MAX {
                out.push(NackReq {
                    seq: start,
                    count: (seq_next - start).min(rx.window()),
                    lo,
                    hi: index_hi.max(lo),
                });
            }
        }
    }
    out
}

/// A bounded history of what a source sent, keyed by an increasing index, for retransmission.
/// When full, the oldest entry is evicted.
#[derive(Clone, Debug)]
pub(crate) struct History<E> {
    entries: VecDeque<(u64, E)>,
    len_max: usize,
    /// Every entry with a key at or above this is still here (if it ever existed).
    complete_from: u64,
}

impl<E> History<E> {
    pub(crate) fn new(len_max: usize) -> History<E> {
        assert!(len_max > 0, "a history must hold something");
        History {
            entries: VecDeque::new(),
            len_max,
            complete_from: 0,
        }
    }

    /// Appends `entry` under `key`, which must exceed every key so far; returns the entry
    /// evicted to make room, if any.
    pub(crate) fn push(&mut self, key: u64, entry: E) -> Option<(u64, E)> {
        assert!(
            self.entries.back().is_none_or(|(k, _)| *k < key),
            "history keys must increase"
        );
        let evicted = if self.entries.len() == self.len_max {
            let e = self.entries.pop_front().expect("full history is not empty");
            self.complete_from = e.0 + 1;
            Some(e)
        } else {
            None
        };
        self.entries.push_back((key, entry));
        evicted
    }

    /// The newest entry.
    pub(crate) fn last(&self) -> Option<&(u64, E)> {
        self.entries.back()
    }

    /// Every entry with a key at or above this is still held.
    pub(crate) fn complete_from(&self) -> u64 {
        self.complete_from
    }

    /// Entries with keys in `lo .. hi`, in key order.
    pub(crate) fn range(&self, lo: u64, hi: u64) -> impl Iterator<Item = &(u64, E)> {
        let a = self.entries.partition_point(|(k, _)| *k < lo);
        let b = self.entries.partition_point(|(k, _)| *k < hi).max(a);
        self.entries.range(a..b)
    }

    /// The entry with the largest key at or below `key`.
    pub(crate) fn at_or_below(&self, key: u64) -> Option<&(u64, E)> {
        let i = self.entries.partition_point(|(k, _)| *k <= key);
        i.checked_sub(1).map(|i| &self.entries[i])
    }
}

/// The answer to a stream NACK: how many of the missing messages are lost (a prefix), and the
/// `(index, entry)` of the rest, in order.
pub(crate) struct NackAnswer<E> {
    pub(crate) lost: u64,
    pub(crate) found: Vec<(u64, E)>,
}

/// Answers a NACK for `count` missing messages whose indexes lie in `lo .. hi`, looking for
/// entries `addressed` to the receiver. `None` if the NACK is inconsistent with the history (it
/// claims more messages than exist): the caller drops it and counts it.
pub(crate) fn answer_nack<E: Clone>(
    history: &History<E>,
    count: u64,
    lo: u64,
    hi: u64,
    addressed: impl Fn(&E) -> bool,
) -> Option<NackAnswer<E>> {
    if count == 0 || lo > hi {
        return None;
    }
    let from = lo.max(history.complete_from());
    let found: Vec<(u64, E)> = history
        .range(from, hi)
        .filter(|(_, e)| addressed(e))
        .take(
            usize::try_from(count)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
        )
        .cloned()
        .collect();
    let found_len = found.len() as u64;
    if found_len > count {
        return None;
    }
    if lo >= history.complete_from() && found_len != count {
        // Nothing in the range was evicted, so all `count` must be here.
        return None;
    }
    Some(NackAnswer {
        lost: count - found_len,
        found,
    })
}

/// Minimum over a fixed set of `u64` values, each updated in O(log n): a tournament tree.
#[derive(Clone, Debug)]
pub(crate) struct MinTree {
    leaves: usize,
    tree: Vec<u64>,
}

impl MinTree {
    /// `n` values, all starting at 0.
    pub(crate) fn new(n: usize) -> MinTree {
        assert!(n > 0);
        let leaves = n.next_power_of_two();
        let mut tree = vec![u64::MAX; 2 * leaves];
        for i in 0..n {
            tree[leaves + i] = 0;
        }
        for i in (1..leaves).rev() {
            tree[i] = tree[2 * i].min(tree[2 * i + 1]);
        }
        MinTree { leaves, tree }
    }

    pub(crate) fn get(&self, i: usize) -> u64 {
        self.tree[self.leaves + i]
    }

    /// Raises value `i` to `v` if `v` is larger (values only grow).
    pub(crate) fn raise(&mut self, i: usize, v: u64) {
        let mut at = self.leaves + i;
        if self.tree[at] >= v {
            return;
        }
        self.tree[at] = v;
        while at > 1 {
            at /= 2;
            let m = self.tree[2 * at].min(self.tree[2 * at + 1]);
            if self.tree[at] == m {
                break;
            }
            self.tree[at] = m;
        }
    }

    pub(crate) fn min(&self) -> u64 {
        self.tree[1]
    }
}

/// One deadline per id, earliest first.
#[derive(Clone, Debug)]
pub(crate) struct Timers {
    at: Vec<Option<Instant>>,
    queue: BTreeSet<(Instant, u32)>,
}

impl Timers {
    pub(crate) fn new(n: usize) -> Timers {
        Timers {
            at: vec![None; n],
            queue: BTreeSet::new(),
        }
    }

    pub(crate) fn is_set(&self, id: u32) -> bool {
        self.at[id as usize].is_some()
    }

    pub(crate) fn set(&mut self, id: u32, t: Instant) {
        self.clear(id);
        self.at[id as usize] = Some(t);
        self.queue.insert((t, id));
    }

    pub(crate) fn clear(&mut self, id: u32) {
        if let Some(t) = self.at[id as usize].take() {
            self.queue.remove(&(t, id));
        }
    }

    pub(crate) fn next(&self) -> Option<Instant> {
        self.queue.first().map(|(t, _)| *t)
    }

    /// An id whose deadline is at or before `now` (its timer is cleared).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<u32> {
        let &(t, id) = self.queue.first()?;
        if t > now {
            return None;
        }
        self.clear(id);
        Some(id)
    }
}

/// The earlier of two optional instants.
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_buffer_releases_in_order_and_refuses_duplicates_and_far_items() {
        let mut b = SeqBuffer::new(4);
        assert_eq!(b.insert(1, 'b'), Ok(()));
        assert_eq!(b.pop(), None);
        assert_eq!(b.insert(1, 'x'), Err(Refused::Duplicate));
        assert_eq!(b.insert(4, 'e'), Err(Refused::Window));
        assert_eq!(b.insert(0, 'a'), Ok(()));
        assert_eq!(b.pop(), Some((0, 'a')));
        assert_eq!(b.pop(), Some((1, 'b')));
        assert_eq!(b.insert(0, 'a'), Err(Refused::Duplicate));
        assert_eq!(b.fill(0, 10, || 'L'), 4);
        assert_eq!(b.len(), 4);
    }

    #[test]
    fn gap_timer_doubles_its_wait_until_progress() {
        let t = |ns: u64| Instant::ZERO + ns;
        let t0 = t(0);
        let mut g = GapTimer::default();
        g.arm(t0, true, 5, 10);
        assert_eq!(g.at(), Some(t(10)));
        assert!(!g.fire(t(9), 5), "not due yet");
        // No progress: NACK, then each wait doubles, up to 2^NACK_BACKOFF_MAX timeouts.
        let mut now = 10;
        for asks in 1..=8u32 {
            assert!(g.fire(t(now), 5));
            g.arm(t(now), true, 5, 10);
            let wait = 10u64 << asks.min(NACK_BACKOFF_MAX);
            assert_eq!(g.at(), Some(t(now + wait)));
            now += wait;
        }
        // Progress since arming: no NACK, and the wait starts again from one timeout.
        assert!(!g.fire(t(now), 6));
        g.arm(t(now), true, 6, 10);
        assert_eq!(g.at(), Some(t(now + 10)));
        // No gap: disarmed.
        g.arm(t(now), false, 6, 10);
        assert_eq!(g.at(), None);
    }

    #[test]
    fn gap_nacks_bound_each_run_by_known_indexes() {
        let mut b: SeqBuffer<Option<u64>> = SeqBuffer::new(100);
        // Received seq 2 (index 20) and 5 (index 50); 0, 1, 3, 4 missing; last delivered index 3.
        b.insert(2, Some(20)).unwrap();
        b.insert(5, Some(50)).unwrap();
        let n = gap_nacks(&b, Some(3), Some((8, 81)), |x| *x);
        assert_eq!(
            n,
            vec![
                NackReq {
                    seq: 0,
                    count: 2,
                    lo: 4,
                    hi: 20
                },
                NackReq {
                    seq: 3,
                    count: 2,
                    lo: 21,
                    hi: 50
                },
                NackReq {
                    seq: 6,
                    count: 2,
                    lo: 51,
                    hi: 81
                },
            ]
        );
    }

    #[test]
    fn gap_run_extends_across_lost_slots() {
        let mut b: SeqBuffer<Option<u64>> = SeqBuffer::new(100);
        b.insert(1, None).unwrap();
        b.insert(3, Some(30)).unwrap();
        let n = gap_nacks(&b, None, None, |x| *x);
        assert_eq!(
            n,
            vec![NackReq {
                seq: 0,
                count: 3,
                lo: 0,
                hi: 30
            }]
        );
    }

    #[test]
    fn answer_nack_reports_evicted_prefix_as_lost() {
        let mut h = History::new(3);
        for k in 0..6u64 {
            h.push(k * 10, k % 2 == 0);
        }
        // Held: 30 (false), 40 (true), 50 (false). Entries "addressed" are the `true` ones.
        assert_eq!(h.complete_from(), 21);
        let a = answer_nack(&h, 3, 0, 60, |e| *e).unwrap();
        assert_eq!(a.lost, 2);
        assert_eq!(a.found.len(), 1);
        assert_eq!(a.found[0].0, 40);
        // Nothing evicted in range: the count must match exactly.
        assert!(answer_nack(&h, 2, 30, 60, |e| *e).is_none());
        assert_eq!(answer_nack(&h, 1, 30, 60, |e| *e).unwrap().lost, 0);
        assert_eq!(h.at_or_below(45).unwrap().0, 40);
        assert!(h.at_or_below(10).is_none());
    }

    #[test]
    fn min_tree_tracks_minimum() {
        let mut t = MinTree::new(5);
        assert_eq!(t.min(), 0);
        for i in 0..5 {
            t.raise(i, 10 + i as u64);
        }
        assert_eq!(t.min(), 10);
        t.raise(0, 100);
        assert_eq!(t.min(), 11);
        t.raise(0, 1);
        assert_eq!(t.get(0), 100);
    }

    #[test]
    fn timers_pop_in_deadline_order() {
        let mut t = Timers::new(3);
        t.set(2, Instant(5));
        t.set(0, Instant(7));
        t.set(2, Instant(9));
        assert_eq!(t.next(), Some(Instant(7)));
        assert_eq!(t.pop_due(Instant(8)), Some(0));
        assert_eq!(t.pop_due(Instant(8)), None);
        assert!(t.is_set(2));
        t.clear(2);
        assert_eq!(t.next(), None);
    }
}
