//! End-to-end acknowledgement state, per (sender, receiver) process pair.
//!
//! Best-effort 1Pipe "detects lost packets via end-to-end ACK, but does not retransmit them"
//! (§2.1): the receiver acknowledges what arrives ([`RecvWindow`]), the sender remembers what it
//! sent until it is acknowledged, NAKed or times out ([`SendTracker`]), and a timeout becomes a
//! send-failed notification. The reliable service (§5.1, docs/RELIABLE.md) builds on the same
//! state and adds retransmission.
//!
//! Receivers delay their ACKs and send those owed to the processes of one host together
//! ([`AckBatcher`]): one `AckBatch` packet per host pair rather than one `Ack` per process pair,
//! as the per-host polling thread of §6.1 that generates a host's ACKs naturally can.
//!
//! PSNs are 32-bit and wrap; every comparison here is by signed distance, like timestamps.

use crate::ids::{ProcId, Psn};
use crate::peers::PeerVec;
use crate::time::{Instant, Timestamp};
use std::collections::VecDeque;

const _: () = assert!(core::mem::size_of::<RecvWindow>() == 16);

/// Width of the selective-acknowledgement window above the cumulative PSN.
pub const SACK_BITS: u32 = 64;

/// Most given-up PSNs one arrival reports (see [`RecvWindow::record_with`]).
pub const GIVEN_UP_REPORTED_MAX: u32 = 2 * SACK_BITS;

/// How many reports past the last ACK's give-up count a sender follows one by one (a bitmap);
/// beyond them it assumes it missed some (see [`SendTracker::on_ack`]).
const GIVEN_UP_FOLLOWED: u32 = 32;

/// Most one window slide adds to the give-up count (mod 256). A larger slide counts as this
/// many: enough for its sender to see that it cannot have had every report, and a third of
/// 256, so that the counts of up to three such slides between two ACKs the sender receives
/// (85, 170, 255) never add up to a multiple of 256, which would look like no give-up at all.
/// (Slides of other sizes with several ACKs lost can still add up so: the count is 8 bits.)
const GIVEN_UP_COUNTED_MAX: u32 = 85;

const _: () = assert!(GIVEN_UP_FOLLOWED < GIVEN_UP_COUNTED_MAX && GIVEN_UP_COUNTED_MAX < 256);

/// `a - b` as a signed distance in the wrapped PSN space.
#[inline]
fn psn_distance(a: Psn, b: Psn) -> i32 {
    a.0.wrapping_sub(b.0) as i32
}

/// What a receiver has seen of one sender: every PSN below `cum` arrived (or was given up on),
/// and bit `i` of `sack` says PSN `cum + 1 + i` arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvWindow {
    cum: Psn,
    sack: u64,
    /// Packets recorded since the last ACK went out (16 bits keep the window at 16 bytes:
    /// every host holds one per sender).
    pub unacked: u16,
    /// An ACK is scheduled.
    pub ack_pending: bool,
    /// Reliable windows: ECN-marked packets recorded since the last ACK (saturating; echoed for
    /// DCTCP). Best-effort windows: PSNs given up on so far, mod 256, echoed in every ACK so a
    /// sender that missed a given-up NAK notices (see [`SendTracker::on_ack`]).
    pub ecn: u8,
}

impl RecvWindow {
    /// Records the arrival of `psn`; returns `false` if it is a duplicate (already recorded, or
    /// below the window). A PSN more than [`SACK_BITS`] ahead slides the window: the PSNs it
    /// passes without their having arrived are given up on — see [`RecvWindow::record_with`].
    pub fn record(&mut self, psn: Psn) -> bool {
        self.record_with(psn, &mut |_, _| {})
    }

    /// [`RecvWindow::record`], passing every PSN the window gives up on to `given_up`, with its
    /// give-up number (the running count, mod 256, this give-up brings it to); at most
    /// [`GIVEN_UP_REPORTED_MAX`] per call (a far larger leap is garbage or a long outage: the
    /// rest are counted, not reported, and their senders notice the gap in the numbers). The cumulative ACK then covers those PSNs although they
    /// never arrived, so the receiver must tell their senders (a best-effort NAK), or the losses
    /// would go unreported.
    pub fn record_with(&mut self, psn: Psn, given_up: &mut impl FnMut(Psn, u8)) -> bool {
        let d = psn_distance(psn, self.cum);
        if d < 0 {
            return false;
        }
        if d == 0 {
            // In order: advance over it and over every selectively acknowledged successor.
            self.cum = self.cum.next();
            while self.sack & 1 == 1 {
                self.sack >>= 1;
                self.cum = self.cum.next();
            }
            self.sack >>= 1;
            return true;
        }
        if d as u32 > SACK_BITS {
            let slide = d as u32 - SACK_BITS;
            let received = |j: u32| (1..=SACK_BITS).contains(&j) && self.sack & (1 << (j - 1)) != 0;
            let mut n = self.ecn;
            for j in 0..slide.min(GIVEN_UP_REPORTED_MAX) {
                if !received(j) {
                    n = n.wrapping_add(1);
                    given_up(Psn(self.cum.0.wrapping_add(j)), n);
                }
            }
            // Counted whole (beyond the reported ones too, up to `GIVEN_UP_COUNTED_MAX`): a gap
            // in the numbers is what tells a sender it missed a report. Counted whole without
            // the cap, a slide of 256 looked like none, and one of 128 to 255 like a count
            // going backwards: either way the sender resolved the lost messages through the
            // cumulative PSN without reporting them (seen live at overload, bursts of hundreds
            // of packets lost in a full socket buffer).
            let gave_up = (0..slide.min(SACK_BITS + 1))
                .filter(|&j| !received(j))
                .count() as u32
                + slide.saturating_sub(SACK_BITS + 1);
            self.ecn = self
                .ecn
                .wrapping_add(gave_up.min(GIVEN_UP_COUNTED_MAX) as u8);
            // The new cumulative PSN may itself have arrived (old bit `slide - 1`).
            let cum_arrived = received(slide);
            self.sack = if slide >= 64 { 0 } else { self.sack >> slide };
            self.cum = Psn(self.cum.0.wrapping_add(slide));
            if cum_arrived {
                self.cum = self.cum.next();
                while self.sack & 1 == 1 {
                    self.sack >>= 1;
                    self.cum = self.cum.next();
                }
                self.sack >>= 1;
            }
            return self.record_with(psn, given_up);
        }
        let bit = 1u64 << (d - 1);
        if self.sack & bit != 0 {
            return false;
        }
        self.sack |= bit;
        true
    }

    /// True if `psn` is more than [`SACK_BITS`] ahead of the cumulative PSN: recording it would
    /// slide the window. Reliable senders never get that far ahead (their window is at most
    /// `SACK_BITS` packets), so a reliable receiver drops such a packet instead.
    pub fn beyond(&self, psn: Psn) -> bool {
        psn_distance(psn, self.cum) > SACK_BITS as i32
    }

    /// True if `psn` was recorded already (or given up on: below the window).
    pub fn contains(&self, psn: Psn) -> bool {
        let d = psn_distance(psn, self.cum);
        d < 0 || (d >= 1 && d as u32 <= SACK_BITS && self.sack & (1 << (d - 1)) != 0)
    }

    /// The acknowledgement to send: (cumulative PSN, SACK bitmap).
    pub fn ack(&self) -> (Psn, u64) {
        (self.cum, self.sack)
    }
}

/// End of a list.
const NIL: u32 = u32::MAX;

/// A delayed ACK: local receiver `dst_idx` owes remote sender `src` an acknowledgement of its
/// packets in one service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckOwed {
    /// The remote sending process (the ACK's addressee).
    pub src: ProcId,
    /// Index of the local receiving process.
    pub dst_idx: u32,
    /// The reliable service's window (else best effort's).
    pub reliable: bool,
}

/// The delayed ACKs of one peer host: a list through [`AckBatcher`]'s slab.
#[derive(Clone, Copy, Debug)]
struct PeerAcks {
    head: u32,
    tail: u32,
    len: u32,
    /// When the peer's batch is due (meaningful while the list is not empty).
    due: Instant,
}

#[derive(Clone, Copy, Debug)]
struct OwedSlot {
    owed: AckOwed,
    next: u32,
}

/// Delayed ACKs grouped by the host they go to, so that one packet carries every ACK a host owes
/// another (§2.1 end-to-end ACKs, sent by the per-host polling thread of §6.1).
///
/// The delay rule is per peer host: a peer's batch is due at the earliest of its ACKs' own due
/// times. ACKs come in two delay classes: reliable ACKs are prompt (they hold back the sender's
/// commit barrier, §5.1), best-effort ACKs may wait far longer (they serve only loss reporting
/// at the sender's timeout, §2.1). A later ACK joins the batch and goes with it, earlier than
/// its own delay would send it, never later; a reliable ACK joining a batch scheduled for the
/// long best-effort delay pulls the batch's due time forward. The caller sends a batch early
/// (`take`) when an ACK must go at once (`ack_every` packets) or the batch is full. Bounded: a
/// peer's list never holds more than the caller lets it (it takes the batch at
/// [`crate::wire::ACK_BATCH_LEN_MAX`]), so the slab holds at most that per peer.
///
/// Schedules: one `(due, peer)` queue per delay class. Each class's delay is fixed, so each
/// queue is filled in due order and its front is its earliest deadline; the next deadline is
/// the earlier front. A peer's current due time is recorded in the peer; an entry is live only
/// while it names that time, so entries left behind when a batch went early or was pulled
/// forward are stale and skipped. Each queue holds at most one entry per batch started (or
/// pulled forward) within its class's delay, so its length is bounded by the packets that
/// arrive in one delay; it reuses its storage (no allocation once warm).
///
/// Layout: per peer 16 bytes (an intrusive list and its due time) and one shared slab, as
/// [`SendTracker`]: a host of a thousand-host network keeps a thousand peers.
#[derive(Debug)]
pub struct AckBatcher {
    peers: PeerVec<PeerAcks>,
    slots: Vec<OwedSlot>,
    free: Vec<u32>,
    /// (due, peer) in scheduling order, per delay class (index `AckOwed::reliable as usize`).
    /// An entry is stale once its peer's due time differs or it has nothing owed.
    due: [VecDeque<(Instant, u32)>; 2],
    len: usize,
}

impl AckBatcher {
    /// A batcher for peer hosts `0..peers`.
    pub fn new(peers: usize) -> AckBatcher {
        Self::with_peers_stored(peers, peers)
    }

    /// As [`AckBatcher::new`], with the records of peers `0..peers_stored` made at once and the
    /// others' when first owed an ACK (see [`PeerVec`]).
    pub fn with_peers_stored(peers: usize, peers_stored: usize) -> AckBatcher {
        assert!(peers < NIL as usize);
        let empty = PeerAcks {
            head: NIL,
            tail: NIL,
            len: 0,
            due: Instant(0),
        };
        AckBatcher {
            peers: PeerVec::new(empty, peers, peers_stored),
            slots: Vec::new(),
            free: Vec::new(),
            due: [VecDeque::new(), VecDeque::new()],
            len: 0,
        }
    }

    /// ACKs owed, over all peers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if no ACK is owed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// ACKs owed to `peer`.
    pub fn owed_to(&self, peer: usize) -> usize {
        self.peers[peer].len as usize
    }

    /// Records that `owed` goes to `peer`, due by `due` (now plus the delay of its class,
    /// `owed.reliable`): the peer's batch is then due at the earlier of its due time so far and
    /// `due`. Returns how many ACKs `peer` is owed now.
    pub fn push(&mut self, peer: usize, due: Instant, owed: AckOwed) -> usize {
        let class = usize::from(owed.reliable);
        let slot = OwedSlot { owed, next: NIL };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        let p = &mut self.peers[peer];
        let mut pulled_forward = false;
        if p.head == NIL {
            debug_assert_eq!(p.len, 0);
            *p = PeerAcks {
                head: i,
                tail: i,
                len: 1,
                due,
            };
            self.due[class].push_back((due, peer as u32));
        } else {
            self.slots[p.tail as usize].next = i;
            p.tail = i;
            p.len += 1;
            if due < p.due {
                // A prompt ACK joins a batch scheduled for a longer delay: the batch goes with
                // it, and the entry in the other schedule goes stale.
                p.due = due;
                self.due[class].push_back((due, peer as u32));
                pulled_forward = true;
            }
        }
        let len = p.len as usize;
        self.len += 1;
        if pulled_forward {
            self.drop_stale();
        }
        len
    }

    /// Takes every ACK owed to `peer`, in the order they were owed, into `out`.
    pub fn take(&mut self, peer: usize, out: &mut Vec<AckOwed>) {
        let p = &mut self.peers[peer];
        let mut i = p.head;
        self.len -= p.len as usize;
        *p = PeerAcks {
            head: NIL,
            tail: NIL,
            len: 0,
            due: Instant(0),
        };
        while i != NIL {
            let s = self.slots[i as usize];
            out.push(s.owed);
            self.free.push(i);
            i = s.next;
        }
        self.drop_stale();
    }

    /// The next peer whose batch is due by `horizon`, removed from the schedule (take its ACKs
    /// with [`AckBatcher::take`]); `None` if none is.
    pub fn pop_due(&mut self, horizon: Instant) -> Option<usize> {
        self.drop_stale();
        let class = self.earliest_class()?;
        let (due, peer) = self.due[class][0];
        if due > horizon {
            return None;
        }
        self.due[class].pop_front();
        self.drop_stale();
        Some(peer as usize)
    }

    /// Prefetch hint (see [`crate::prefetch`]): the record of `peer`, which an ACK owed to it
    /// will update.
    #[inline(always)]
    pub fn prefetch_peer(&self, peer: usize) {
        if let Some(p) = self.peers.get(peer) {
            crate::prefetch::prefetch(p);
        }
    }

    /// The delay class whose schedule's front is due first (fronts must be live).
    fn earliest_class(&self) -> Option<usize> {
        match (self.due[0].front(), self.due[1].front()) {
            (None, None) => None,
            (Some(_), None) => Some(0),
            (None, Some(_)) => Some(1),
            (Some(b), Some(r)) => Some(usize::from(r.0 < b.0)),
        }
    }

    /// Prefetch hint (see [`crate::prefetch`]): `Records` loads the schedule's front, `Peers` the
    /// record of the peer it names.
    #[inline(always)]
    pub fn prefetch(&self, stage: crate::prefetch::Stage) {
        use crate::prefetch::{prefetch, Stage};
        match stage {
            Stage::Fields => prefetch(&self.peers),
            Stage::Records => {
                if let Some(c) = self.earliest_class() {
                    prefetch(&self.due[c][0]);
                }
            }
            Stage::Peers | Stage::Entries => {
                if let Some(p) = self
                    .earliest_class()
                    .and_then(|c| self.peers.get(self.due[c][0].1 as usize))
                {
                    prefetch(p);
                }
            }
        }
    }

    /// When the earliest batch is due: the earlier of the two schedules' fronts, both live
    /// (every mutation drops stale fronts).
    pub fn next_due(&self) -> Option<Instant> {
        self.earliest_class().map(|c| self.due[c][0].0)
    }

    /// Pops schedule entries of batches that went early or were pulled forward, so that both
    /// fronts are real deadlines.
    fn drop_stale(&mut self) {
        for schedule in &mut self.due {
            while let Some(&(due, peer)) = schedule.front() {
                let p = &self.peers[peer as usize];
                if p.head != NIL && p.due == due {
                    break;
                }
                schedule.pop_front();
            }
        }
    }

    /// Checks the schedules against the peers (tests; linear in the schedules' length): every
    /// peer owed anything has a live entry at its due time, and the fronts are live.
    #[cfg(test)]
    fn check_schedules(&self) {
        for (peer, p) in self.peers.stored().iter().enumerate() {
            if p.head == NIL {
                continue;
            }
            let live = self
                .due
                .iter()
                .flatten()
                .any(|&(due, q)| q as usize == peer && due == p.due);
            assert!(live, "peer {peer} is owed ACKs but not scheduled");
        }
        for schedule in &self.due {
            if let Some(&(due, peer)) = schedule.front() {
                let p = &self.peers[peer as usize];
                assert!(p.head != NIL && p.due == due, "a stale front");
            }
        }
        let owed: usize = self.peers.stored().iter().map(|p| p.len as usize).sum();
        assert_eq!(owed, self.len);
    }
}

/// One message awaiting its acknowledgement, linked into its pair's list (PSN order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InFlight {
    first: Psn,
    frags: u32,
    /// Bytes it occupies on the wire (payload and packet headers), for the byte window.
    bytes: u32,
    ts: Timestamp,
    /// Acknowledged, NAKed or timed out: nothing more to report.
    resolved: bool,
    next: u32,
}

/// A message the sender gave up on: no acknowledgement within the timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    /// The local sender.
    pub src: ProcId,
    /// The destination.
    pub dst: ProcId,
    /// The message's first PSN.
    pub psn: Psn,
    /// Its timestamp.
    pub ts: Timestamp,
}

/// Why [`SendTracker::track`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackerFull;

/// Most records whose room an empty [`SendTracker`] keeps.
const TRACKER_RETAINED: usize = 64;

/// The sender's record of unacknowledged messages, bounded by `len_max`.
///
/// Layout: per (local sender slot, destination) an intrusive list through one slab, so a pair
/// costs 8 bytes and a lookup is an index — a simulator of a thousand hosts each sending to a
/// thousand destinations depends on that (docs/BENCHMARKS.md).
#[derive(Debug)]
pub struct SendTracker {
    senders: Vec<ProcId>,
    destinations: usize,
    /// (head, tail) per `dst * senders + sender slot`: destination-major, so the lists of
    /// destinations above those stored at once cost nothing until sent to ([`PeerVec`]).
    lists: PeerVec<(u32, u32)>,
    /// Per list: which give-up reports (best-effort `Lost` NAKs, numbered mod 256) arrived —
    /// every number up to `.0` is accounted for, bit `i` of `.1` is number `.0 + 1 + i` — so an
    /// ACK's give-up count can be checked against exactly the reports received.
    given_up_seen: PeerVec<(u8, u32)>,
    slots: Vec<InFlight>,
    free: Vec<u32>,
    /// (deadline, sender slot, destination, first PSN) in send order.
    deadlines: VecDeque<(Instant, u32, ProcId, Psn)>,
    unresolved: usize,
    /// The wire bytes of the unresolved messages.
    unresolved_bytes: u64,
    len_max: usize,
}

impl SendTracker {
    /// Prefetch hint for an acknowledgement from `dst` to local sender `src` (see
    /// [`crate::prefetch`]): `Records` loads the sender table, `Peers` the pair's list entries.
    #[inline(always)]
    pub fn prefetch(&self, stage: crate::prefetch::Stage, src: ProcId, dst: ProcId) {
        use crate::prefetch::{prefetch, Stage};
        match stage {
            Stage::Fields => prefetch(&self.lists),
            Stage::Records => {
                if let Some(s) = self.senders.first() {
                    prefetch(s);
                }
            }
            Stage::Peers | Stage::Entries => {
                if let Some(li) = self.list_index(src, dst) {
                    prefetch(&self.lists[li]);
                    prefetch(&self.given_up_seen[li]);
                }
            }
        }
    }

    /// A tracker for local `senders` sending to processes `0..destinations`, holding at most
    /// `len_max` messages (acknowledged ones included until their deadline passes).
    pub fn new(senders: Vec<ProcId>, destinations: u32, len_max: usize) -> SendTracker {
        Self::with_destinations_stored(senders, destinations, destinations, len_max)
    }

    /// As [`SendTracker::new`], with the records of destinations `0..destinations_stored` made
    /// at once and the others' when first sent to (see [`PeerVec`]).
    pub fn with_destinations_stored(
        senders: Vec<ProcId>,
        destinations: u32,
        destinations_stored: u32,
        len_max: usize,
    ) -> SendTracker {
        assert!(len_max < NIL as usize);
        let len = senders.len() * destinations as usize;
        let stored = senders.len() * destinations_stored.min(destinations) as usize;
        SendTracker {
            lists: PeerVec::new((NIL, NIL), len, stored),
            given_up_seen: PeerVec::new((0, 0), len, stored),
            senders,
            destinations: destinations as usize,
            slots: Vec::new(),
            free: Vec::new(),
            deadlines: VecDeque::new(),
            unresolved: 0,
            unresolved_bytes: 0,
            len_max,
        }
    }

    /// Messages tracked (the bound `len_max` applies to this).
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    /// True if nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }

    /// The most messages it tracks at once.
    pub fn len_max(&self) -> usize {
        self.len_max
    }

    /// Room for `n` more messages?
    pub fn has_room(&self, n: usize) -> bool {
        self.deadlines.len() + n <= self.len_max
    }

    /// Messages sent and not yet acknowledged, NAKed or expired.
    pub fn unresolved(&self) -> usize {
        self.unresolved
    }

    /// The wire bytes of the messages [`SendTracker::unresolved`] counts (what `track` was
    /// told each occupies).
    pub fn unresolved_bytes(&self) -> u64 {
        self.unresolved_bytes
    }

    /// Marks a record resolved: it is no longer unacknowledged.
    #[inline]
    fn settle(unresolved: &mut usize, unresolved_bytes: &mut u64, m: &mut InFlight) {
        debug_assert!(!m.resolved);
        m.resolved = true;
        *unresolved -= 1;
        *unresolved_bytes -= u64::from(m.bytes);
    }

    fn list_index(&self, src: ProcId, dst: ProcId) -> Option<usize> {
        self.list_at(self.sender_slot(src)?, dst)
    }

    /// The list of sender slot `slot` to `dst` (destination-major).
    fn list_at(&self, slot: usize, dst: ProcId) -> Option<usize> {
        (dst.index() < self.destinations).then(|| dst.index() * self.senders.len() + slot)
    }

    /// The local sender's slot (its place in `senders`).
    fn sender_slot(&self, src: ProcId) -> Option<usize> {
        self.senders.iter().position(|&p| p == src)
    }

    /// Remembers a message of `frags` packets from `first`, `bytes` long on the wire, due by
    /// `deadline`.
    #[allow(clippy::too_many_arguments)]
    pub fn track(
        &mut self,
        deadline: Instant,
        src: ProcId,
        dst: ProcId,
        first: Psn,
        frags: u32,
        bytes: u32,
        ts: Timestamp,
    ) -> Result<(), TrackerFull> {
        if !self.has_room(1) {
            return Err(TrackerFull);
        }
        let Some((slot, li)) = self
            .sender_slot(src)
            .and_then(|slot| Some((slot, self.list_at(slot, dst)?)))
        else {
            return Err(TrackerFull);
        };
        let m = InFlight {
            first,
            frags,
            bytes,
            ts,
            resolved: false,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = m;
                i
            }
            None => {
                self.slots.push(m);
                (self.slots.len() - 1) as u32
            }
        };
        let (head, tail) = self.lists[li];
        if head == NIL {
            self.lists[li] = (i, i);
        } else {
            self.slots[tail as usize].next = i;
            self.lists[li].1 = i;
        }
        self.unresolved += 1;
        self.unresolved_bytes += u64::from(bytes);
        self.deadlines
            .push_back((deadline, slot as u32, dst, first));
        Ok(())
    }

    /// Applies an ACK from `dst` to local sender `src`.
    ///
    /// `given_up` is the receiver's count of PSNs its window gave up on (mod 256). If any of
    /// the give-ups up to it was not reported to this sender ([`SendTracker::note_given_up`]), a
    /// report was lost and the cumulative PSN may cover packets that never arrived: every message
    /// this ACK resolves through the cumulative PSN alone is then passed to `possibly_lost` —
    /// over-reporting, which best effort's "possibly lost" callback allows, rather than missing a
    /// loss.
    ///
    /// Returns the timestamp of the newest message the ACK resolved (an RTT sample for the
    /// sender: a message's timestamp is its send time), if it resolved any.
    pub fn on_ack(
        &mut self,
        src: ProcId,
        dst: ProcId,
        cum: Psn,
        sack: u64,
        given_up: u8,
        mut possibly_lost: impl FnMut(Expired),
    ) -> Option<Timestamp> {
        let slot = self.sender_slot(src)?;
        let li = self.list_at(slot, dst)?;
        let mut newest: Option<Timestamp> = None;
        let (base, bits) = self.given_up_seen[li];
        // Any change of the count is news (a receiver adds at most `GIVEN_UP_COUNTED_MAX` per
        // slide and acknowledges at once after one). Read as a signed step, a jump of 128 or
        // more looked like an old count and hid the losses.
        let ahead = given_up.wrapping_sub(base);
        let missed = if ahead > 0 {
            let n = u32::from(ahead);
            let all = if n >= 32 { u32::MAX } else { (1u32 << n) - 1 };
            let missed = n > GIVEN_UP_FOLLOWED || bits & all != all;
            // Everything up to the ACK's count is accounted for now, reported or not.
            self.given_up_seen[li] = (given_up, if n >= 32 { 0 } else { bits >> n });
            missed
        } else {
            false
        };
        let received = |p: Psn| {
            let d = psn_distance(p, cum);
            d < 0 || (d >= 1 && d as u32 <= SACK_BITS && sack & (1 << (d - 1)) != 0)
        };
        let sacked = |p: Psn| {
            let d = psn_distance(p, cum);
            d >= 1 && d as u32 <= SACK_BITS && sack & (1 << (d - 1)) != 0
        };
        // The offset from `cum` of the highest PSN received: bit `i` of `sack` is `cum + 1 + i`.
        let highest = (SACK_BITS - sack.leading_zeros()) as i32;
        let mut i = self.lists[li].0;
        while i != NIL {
            let m = &mut self.slots[i as usize];
            if !m.resolved && (0..m.frags).all(|f| received(Psn(m.first.0.wrapping_add(f)))) {
                Self::settle(&mut self.unresolved, &mut self.unresolved_bytes, m);
                newest = Some(newest.map_or(m.ts, |n| n.max_wrapping(m.ts)));
                if missed && !(0..m.frags).all(|f| sacked(Psn(m.first.0.wrapping_add(f)))) {
                    possibly_lost(Expired {
                        src: self.senders[slot],
                        dst,
                        psn: m.first,
                        ts: m.ts,
                    });
                }
            }
            // Past the highest PSN the ACK reports received nothing can be acknowledged: stop
            // there, not at the end of the SACK window — with a full window of messages in
            // flight to one receiver, that walked 64 records per ACK (a cache miss each).
            if psn_distance(m.first, cum) >= highest {
                break;
            }
            i = m.next;
        }
        self.pop_resolved(li);
        newest
    }

    /// Notes give-up report number `seq` (a best-effort `Lost` NAK) from `dst` to `src`.
    /// Duplicates and reports older than the last ACK's count change nothing.
    pub fn note_given_up(&mut self, src: ProcId, dst: ProcId, seq: u8) {
        let Some(li) = self.list_index(src, dst) else {
            return;
        };
        let (mut base, mut bits) = self.given_up_seen[li];
        let d = seq.wrapping_sub(base) as i8;
        if d <= 0 {
            return;
        }
        if d as u32 > 32 {
            // Far ahead of what is accounted for: the window cannot say; leave it to the ACK
            // count, which will find the gap below.
            return;
        }
        bits |= 1 << (d - 1);
        while bits & 1 == 1 {
            bits >>= 1;
            base = base.wrapping_add(1);
        }
        self.given_up_seen[li] = (base, bits);
    }

    /// Resolves the unresolved message of `src` to `dst` that contains packet `psn` (a receiver
    /// gave up on that packet); returns the message's first PSN and timestamp, or `None` if no
    /// unresolved message holds it (acknowledged, reported already, or unknown).
    pub fn resolve_containing(
        &mut self,
        src: ProcId,
        dst: ProcId,
        psn: Psn,
    ) -> Option<(Psn, Timestamp)> {
        let li = self.list_index(src, dst)?;
        let mut i = self.lists[li].0;
        let mut found = None;
        while i != NIL {
            let m = &mut self.slots[i as usize];
            // A list is in PSN order (`track` is called in send order): a message that starts
            // past `psn` and every one after it cannot hold it. Without this stop a give-up
            // report for a packet whose record already expired — the common case under overload,
            // when reports arrive after the timeout — walked the whole list, thousands of records
            // per report (docs/BENCHMARKS.md, live cluster).
            if psn_distance(m.first, psn) > 0 {
                break;
            }
            let off = psn.0.wrapping_sub(m.first.0);
            if !m.resolved && off < m.frags {
                Self::settle(&mut self.unresolved, &mut self.unresolved_bytes, m);
                found = Some((m.first, m.ts));
                break;
            }
            i = m.next;
        }
        self.pop_resolved(li);
        found
    }

    /// Marks message `first` from `src` to `dst` resolved (a NAK reported it). Returns whether
    /// it was being tracked unresolved.
    pub fn resolve(&mut self, src: ProcId, dst: ProcId, first: Psn) -> bool {
        let Some(li) = self.list_index(src, dst) else {
            return false;
        };
        let found = self.resolve_in(li, first).is_some();
        self.pop_resolved(li);
        found
    }

    /// Resolves the unresolved message `first` of list `li`, returning its timestamp.
    fn resolve_in(&mut self, li: usize, first: Psn) -> Option<Timestamp> {
        let mut i = self.lists[li].0;
        while i != NIL {
            let m = &mut self.slots[i as usize];
            // PSN order, as in `resolve_containing`: past `first`, it is not here.
            if psn_distance(m.first, first) > 0 {
                break;
            }
            if m.first == first && !m.resolved {
                Self::settle(&mut self.unresolved, &mut self.unresolved_bytes, m);
                return Some(m.ts);
            }
            i = m.next;
        }
        None
    }

    /// Pops resolved messages off the front of a list.
    fn pop_resolved(&mut self, li: usize) {
        let (mut head, tail) = self.lists[li];
        while head != NIL && self.slots[head as usize].resolved {
            self.free.push(head);
            let next = self.slots[head as usize].next;
            if head == tail {
                head = NIL;
                self.lists[li] = (NIL, NIL);
                break;
            }
            head = next;
        }
        if head != NIL {
            self.lists[li].0 = head;
        }
    }

    /// The earliest deadline still pending.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.front().map(|d| d.0)
    }

    /// Drops every record whose deadline has passed; each still unresolved is returned.
    pub fn expire(&mut self, now: Instant, mut expired: impl FnMut(Expired)) {
        while let Some(&(deadline, slot, dst, first)) = self.deadlines.front() {
            if deadline > now {
                break;
            }
            self.deadlines.pop_front();
            let li = dst.index() * self.senders.len() + slot as usize;
            if let Some(ts) = self.resolve_in(li, first) {
                expired(Expired {
                    src: self.senders[slot as usize],
                    dst,
                    psn: first,
                    ts,
                });
            }
            self.pop_resolved(li);
        }
        if self.deadlines.is_empty() && self.slots.capacity() > TRACKER_RETAINED {
            // Every record is gone, so every list is empty: the room a burst of sends (a
            // scattering to a thousand processes) needed goes back to the allocator rather than
            // stay with this host for good.
            debug_assert_eq!(self.free.len(), self.slots.len());
            self.slots = Vec::new();
            self.free = Vec::new();
            self.deadlines = VecDeque::new();
        }
    }
}

#[cfg(test)]
mod tests;
