//! The sender side of reliable 1Pipe (§5.1, §6.1): the send buffer with its credit queue,
//! per-destination windows with DCTCP congestion control, retransmission, and the commit barrier.
//!
//! The [`crate::host::Host`] owns one [`ReliableSender`] and does the framing; this module keeps
//! the state and the rules (docs/RELIABLE.md):
//!
//! * **Send buffer and credits** (§6.1): scatterings wait in FIFO order. Only the head of the
//!   queue acquires *credits* — window room at each of its destinations — and keeps what it
//!   acquired while it waits for the rest, so a large scattering cannot starve behind small ones.
//!   When it holds credits everywhere it is stamped and sent. The bytes of queued and in-flight
//!   messages are bounded by `send_buffer_bytes_max`; beyond that `enqueue` refuses.
//! * **Windows**: per (local sender, destination) pair, packets in flight ≤ min(cwnd, rwnd,
//!   [`WINDOW_MAX`]), and the PSNs from the oldest unacknowledged one to the newest sent span at
//!   most `WINDOW_MAX` — except that an empty window always admits one message, so no message is
//!   too large for a shrunken window. `WINDOW_MAX` equals the receiver's SACK width, so a
//!   receiver never sees a reliable PSN beyond its window (a gap there is never given up on).
//!   The span limit matters when packets above a lost one are acknowledged selectively: they
//!   leave the window, but the receiver's window cannot move past the hole.
//! * **DCTCP** (§6.1 "DCTCP-style congestion control"): once per window of data, `alpha ← (1 −
//!   g)·alpha + g·F` with `F` the fraction of ECN-echoed packets; `cwnd ← cwnd·(1 − alpha/2)` if
//!   any were marked, else `cwnd + 1`.
//! * **Retransmission**: on timeout and on `dupack_threshold` ACKs that do not advance the
//!   cumulative PSN (by default the first one: a NAK). A retransmission keeps its timestamp and
//!   PSNs; receivers discard duplicates. The timeout is estimated per (sender, destination) pair
//!   as in TCP (RFC 6298: `srtt + 4·rttvar`, samples only from messages sent once — Karn; a pair
//!   without a sample yet uses the host-wide estimate every pair feeds), between `rto_ns` and
//!   `rto_max_ns`, and backs off exponentially per message and per pair. A fixed timeout is not
//!   enough: at saturation, host queues make the RTT hundreds of µs, and a short fixed timeout
//!   retransmits most messages spuriously.
//! * **Commit barrier** (§5.1): the timestamp of the oldest unacknowledged reliable message, or —
//!   if none — the host's current timestamp. Everything below it has been ACKed by every
//!   receiver, and every future reliable message is stamped at or above it.

use crate::ack::SACK_BITS;
use crate::ids::{ProcId, Psn};
use crate::time::{Instant, Timestamp};
use bytes::Bytes;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

/// Most packets in flight per (sender, receiver) pair: the receiver's SACK width.
pub const WINDOW_MAX: u32 = SACK_BITS;

/// Configuration of the reliable send path.
#[derive(Clone, Debug)]
pub struct ReliableConfig {
    /// Bytes of payload the send buffer holds, queued and in flight together; beyond it
    /// `send_reliable` fails with `SendError::Full` (§6.1: "if the send buffer is full, the send
    /// API returns fail").
    pub send_buffer_bytes_max: usize,
    /// Initial congestion window per destination, in packets.
    pub window_init: u32,
    /// Retransmission timeout before the first RTT sample (RFC 6298's initial RTO, scaled to a
    /// data center): conservative, because a host that starts under load has no estimate yet.
    pub rto_init_ns: u64,
    /// Floor of the estimated retransmission timeout.
    pub rto_ns: u64,
    /// Largest retransmission timeout after back-off.
    pub rto_max_ns: u64,
    /// ACKs that do not advance the cumulative PSN (with a gap above it) before a fast
    /// retransmission. The default, 1, retransmits on the first ACK that shows a gap, as an
    /// RDMA NIC's NAK does: 1Pipe's links are FIFO (§3: the barrier relies on it), so a gap in
    /// a pair's PSNs is a loss, not a reordering, and a sparse pair — a few messages in flight —
    /// may never see three duplicate ACKs, leaving the loss to the timeout while the commit
    /// barrier of every receiver waits (Fig. 15b at 10⁻⁴: 57% of lossless throughput with 3, 99%
    /// with 1; docs/BENCHMARKS.md).
    pub dupack_threshold: u32,
    /// DCTCP gain `g` as a power of two: `g = 2^-dctcp_g_shift` (DCTCP's 1/16 is 4).
    pub dctcp_g_shift: u32,
    /// §5.2 "Controller Forwarding": after this many timed-out retransmissions of one message,
    /// every further one is also handed to the controller to relay over the management network
    /// ([`Transmit::forward`]); 0 never (the default: a driver without a relay channel).
    pub forward_after_retransmits: u32,
}

impl Default for ReliableConfig {
    fn default() -> ReliableConfig {
        ReliableConfig {
            send_buffer_bytes_max: 64 << 20,
            window_init: 32,
            rto_init_ns: 200_000,
            rto_ns: 25_000,
            rto_max_ns: 1_000_000,
            dupack_threshold: 1,
            dctcp_g_shift: 4,
            forward_after_retransmits: 0,
        }
    }
}

/// Why [`ReliableSender::enqueue`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferFull;

/// Counters of the reliable sender; never reset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReliableStats {
    /// Scatterings recalled because a receiver failed before acknowledging (§5.2).
    pub recalled: u64,
    /// Messages retransmitted (each retransmission of a message counts once).
    pub retransmits: u64,
    /// Of which triggered by duplicate ACKs rather than a timeout.
    pub fast_retransmits: u64,
    /// Windows in which DCTCP saw ECN marks and cut the window.
    pub window_cuts: u64,
    /// Scatterings refused because the send buffer was full.
    pub refused_full: u64,
    /// Retransmissions also handed to the controller to forward (§5.2).
    pub forwarded: u64,
}

/// The reliable sender's windows at one moment, summed over its (sender, destination) pairs
/// (a pair exists once its sender first sent to its destination).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReliableWindow {
    /// (Sender, destination) pairs.
    pub pairs: u32,
    /// Packets in flight: sent, neither acknowledged nor recalled.
    pub in_flight_packets: u64,
    /// The pairs' windows: each min(cwnd, rwnd, [`WINDOW_MAX`]) packets.
    pub limit_packets: u64,
    /// Messages sent and not yet acknowledged.
    pub unacked_messages: u64,
    /// Payload bytes held, queued and in flight.
    pub buffered_bytes: u64,
    /// Their limit, `send_buffer_bytes_max`.
    pub buffer_limit_bytes: u64,
}

/// A reliable message in flight, awaiting its ACK.
#[derive(Debug)]
struct InFlight {
    first: Psn,
    frags: u32,
    ts: Timestamp,
    payload: Bytes,
    acked: bool,
    rto_ns: u64,
    sent_at: Instant,
    retransmitted: bool,
    /// Timed-out retransmissions so far (§5.2 forwarding counts them).
    timeouts: u32,
}

/// Send state of one (local sender, destination) pair.
#[derive(Debug)]
struct Pair {
    src: ProcId,
    dst: ProcId,
    next_psn: Psn,
    /// Packets in flight plus credits the queue head holds here.
    used: u32,
    /// Of `used`, the packets in flight (sent, neither acknowledged nor recalled).
    in_flight: u32,
    cwnd: f64,
    alpha: f64,
    /// The receiver's advertised window.
    rwnd: u32,
    /// DCTCP observation window: ends when the cumulative PSN passes `win_end`.
    win_end: Psn,
    win_acked: u32,
    win_marked: u32,
    /// Last cumulative PSN acknowledged, and ACKs since that did not advance it.
    cum: Psn,
    dupacks: u32,
    /// This pair's RTT estimate (see [`Rtt`]).
    rtt: Rtt,
    /// Messages in PSN order; acknowledged ones leave from the front.
    msgs: VecDeque<InFlight>,
}

/// An RTT estimator (RFC 6298). The reliable sender keeps one per (sender, destination) pair:
/// the RTT is mostly queueing at the two hosts, and a hot receiver's queue holds ACKs far
/// longer than a lightly loaded one's, so one estimate shared by every pair is dragged down by
/// the light pairs and times the hot ones out spuriously (issue 37: 50,352 of 206,659 reliable
/// messages retransmitted with no loss at N = 128 in Fig. 14). A host-wide estimate, fed by
/// every pair's samples, seeds a pair that has none yet, so a new pair starts with a realistic
/// timeout instead of the floor.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rtt {
    /// Smoothed RTT and its variation, ns; `srtt == 0` before the first sample.
    srtt: u64,
    rttvar: u64,
    /// RFC 6298 §5.5: timeouts double the timeout for everything sent after them, until a
    /// valid sample arrives. Without it, at overload most messages time out spuriously, are
    /// never sampled (Karn), and their retransmissions deepen the queues: a collapse.
    pub(crate) backoff: u32,
}

impl Rtt {
    /// RFC 6298 §2: one RTT sample.
    pub(crate) fn sample(&mut self, rtt: u64) {
        if self.srtt == 0 {
            self.srtt = rtt.max(1);
            self.rttvar = rtt / 2;
        } else {
            let err = self.srtt.abs_diff(rtt);
            self.rttvar = (3 * self.rttvar + err) / 4;
            self.srtt = (7 * self.srtt + rtt) / 8;
        }
        self.backoff = 0;
    }

    /// The retransmission timeout: `init` before the first sample, `srtt + 4·rttvar` after,
    /// never below `floor`, doubled per back-off, never above `ceiling` (or `floor`, if larger).
    pub(crate) fn rto(&self, init: u64, floor: u64, ceiling: u64) -> u64 {
        debug_assert!(
            self.srtt > 0 || self.rttvar == 0,
            "no variation before a sample"
        );
        let base = if self.srtt == 0 {
            init.max(floor)
        } else {
            (self.srtt + 4 * self.rttvar).max(floor)
        };
        (base << self.backoff.min(20)).min(ceiling.max(floor))
    }
}

/// What one ACK newly acknowledged of a pair's messages ([`Pair::mark_acked`]).
struct Acked {
    /// Messages.
    msgs: usize,
    /// Their packets.
    frags: u32,
    /// Their payload bytes.
    bytes: usize,
    /// The longest wait of a message sent only once (Karn), if any.
    rtt: Option<u64>,
}

impl Pair {
    /// Marks acknowledged every message whose packets are all below `cum` or selectively
    /// acknowledged in `sack`, and frees their window.
    fn mark_acked(&mut self, now: Instant, cum: Psn, sack: u64) -> Acked {
        let received = |q: Psn| {
            let d = q.0.wrapping_sub(cum.0) as i32;
            d < 0 || (d >= 1 && d as u32 <= SACK_BITS && sack & (1 << (d - 1)) != 0)
        };
        let mut acked = Acked {
            msgs: 0,
            frags: 0,
            bytes: 0,
            rtt: None,
        };
        for m in self.msgs.iter_mut() {
            if m.first.0.wrapping_sub(cum.0) as i32 > SACK_BITS as i32 {
                break;
            }
            if !m.acked && (0..m.frags).all(|f| received(Psn(m.first.0.wrapping_add(f)))) {
                m.acked = true;
                acked.msgs += 1;
                acked.frags += m.frags;
                acked.bytes += m.payload.len();
                self.used -= m.frags;
                self.in_flight -= m.frags;
                if !m.retransmitted {
                    let r = now.saturating_since(m.sent_at);
                    acked.rtt = Some(acked.rtt.map_or(r, |x: u64| x.max(r)));
                }
            }
        }
        acked
    }

    /// The oldest unacknowledged message, marked retransmitted, to send again at once (after
    /// `dupack_threshold` duplicate ACKs).
    fn fast_retransmit(&mut self) -> Option<Transmit> {
        let m = self.msgs.iter_mut().find(|m| !m.acked)?;
        m.retransmitted = true;
        Some(Transmit {
            src: self.src,
            dst: self.dst,
            first: m.first,
            ts: m.ts,
            payload: m.payload.clone(),
            forward: false,
        })
    }

    /// DCTCP (§6.1): `newly` packets acknowledged up to `cum`, `ecn` of them marked. Per window
    /// of data, the marked fraction is folded into alpha with gain `g`, and the window is cut
    /// (returns true) or grows by one packet.
    fn fold_window(&mut self, cum: Psn, newly: u32, ecn: u8, g: f64) -> bool {
        self.win_acked += newly;
        self.win_marked += ecn as u32;
        if self.win_end.0.wrapping_sub(cum.0) as i32 > 0 {
            return false;
        }
        let mut cut = false;
        if self.win_acked > 0 {
            let f = (self.win_marked.min(self.win_acked)) as f64 / self.win_acked as f64;
            self.alpha = (1.0 - g) * self.alpha + g * f;
            if self.win_marked > 0 {
                self.cwnd = (self.cwnd * (1.0 - self.alpha / 2.0)).max(1.0);
                cut = true;
            } else {
                self.cwnd = (self.cwnd + 1.0).min(WINDOW_MAX as f64);
            }
        }
        self.win_acked = 0;
        self.win_marked = 0;
        self.win_end = self.next_psn;
        debug_assert!(self.cwnd >= 1.0 && self.cwnd <= WINDOW_MAX as f64);
        cut
    }

    fn window(&self) -> u32 {
        (self.cwnd as u32)
            .clamp(1, WINDOW_MAX)
            .min(self.rwnd.max(1))
    }

    /// Whether `frags` more packets may acquire credits. Two limits: packets in flight (the
    /// window), and the *span* of PSNs from the oldest unacknowledged one to the last that will
    /// have been sent, which must stay within the receiver's SACK window — otherwise packets
    /// acknowledged selectively above a hole free credits, later PSNs land beyond the receiver's
    /// window, and a §5.2 Recall of such a PSN cannot be recorded there, leaving a hole its
    /// cumulative ACK never passes (VOPR seed 127).
    fn fits(&self, frags: u32) -> bool {
        if self.used == 0 {
            return true;
        }
        let oldest = self.msgs.front().map_or(self.next_psn, |m| m.first);
        let held = self.used - self.in_flight;
        let span = self.next_psn.0.wrapping_sub(oldest.0) + held + frags;
        self.used + frags <= self.window() && span <= WINDOW_MAX
    }

    fn find(&self, first: Psn) -> Option<usize> {
        let front = self.msgs.front()?.first;
        let target = first.0.wrapping_sub(front.0);
        let i = self
            .msgs
            .partition_point(|m| m.first.0.wrapping_sub(front.0) < target);
        (i < self.msgs.len() && self.msgs[i].first == first).then_some(i)
    }
}

/// A scattering waiting in the send buffer.
#[derive(Debug)]
pub struct Queued {
    /// The handle `enqueue` returned.
    pub handle: u64,
    /// The local sender.
    pub src: ProcId,
    /// (destination, payload, pair index or `None` for a destination on this host).
    items: Vec<(ProcId, Bytes, Option<u32>)>,
    /// How many leading `items` hold their credits.
    acquired: usize,
    bytes: usize,
}

impl Queued {
    /// The messages: (destination, payload, true if the destination is remote).
    pub fn messages(&self) -> impl Iterator<Item = (ProcId, &Bytes, bool)> + '_ {
        self.items.iter().map(|(d, b, p)| (*d, b, p.is_some()))
    }
}

/// A message to (re)send: the host frames it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Local sender.
    pub src: ProcId,
    /// Destination.
    pub dst: ProcId,
    /// First PSN (reliable space of the pair).
    pub first: Psn,
    /// Timestamp, as first stamped.
    pub ts: Timestamp,
    /// The whole message.
    pub payload: Bytes,
    /// §5.2: the path to the receiver seems broken (`forward_after_retransmits` timeouts in a
    /// row): hand the message to the controller as well.
    pub forward: bool,
}

const NIL: u32 = u32::MAX;

/// The reliable sender of one host. See the module docs.
#[derive(Debug)]
pub struct ReliableSender {
    cfg: ReliableConfig,
    mtu_payload: usize,
    senders: Vec<ProcId>,
    destinations: u32,
    /// Pair index per `sender slot * destinations + dst`, `NIL` until first used.
    pair_of: Vec<u32>,
    pairs: Vec<Pair>,
    queue: VecDeque<Queued>,
    bytes: usize,
    /// Messages sent and not yet acknowledged.
    unacked: usize,
    /// Stamped messages in stamping (= timestamp) order: (ts, pair, first PSN).
    order: VecDeque<(Timestamp, u32, Psn)>,
    /// The host-wide RTT estimate: every pair's samples, seeding pairs with none ([`Rtt`]). Its
    /// back-off is unused: a pair backs off on its own timeouts.
    rtt: Rtt,
    /// Retransmission deadlines: (deadline, pair, first PSN); stale entries are skipped.
    timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    next_handle: u64,
    /// §5.2 Recall: per round, the lowest timestamp of a scattering being recalled; the commit
    /// barrier stays below it until every receiver has discarded it.
    recall_holds: BTreeMap<u32, Timestamp>,
    stats: ReliableStats,
}

/// What [`ReliableSender::fail`] took out of the send buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recalled {
    /// Scatterings to abort: (local sender, timestamp).
    pub groups: Vec<(ProcId, Timestamp)>,
    /// Their messages to correct receivers that were never acknowledged: (sender, receiver,
    /// first PSN, packets).
    pub unacked: Vec<(ProcId, ProcId, Psn, u32)>,
}

impl ReliableSender {
    /// A sender for local `senders` to processes `0..destinations`, fragmenting at
    /// `mtu_payload`.
    pub fn new(
        cfg: ReliableConfig,
        senders: Vec<ProcId>,
        destinations: u32,
        mtu_payload: usize,
    ) -> ReliableSender {
        ReliableSender {
            pair_of: Vec::new(),
            pairs: Vec::new(),
            queue: VecDeque::new(),
            bytes: 0,
            unacked: 0,
            order: VecDeque::new(),
            rtt: Rtt::default(),
            timers: BinaryHeap::new(),
            next_handle: 0,
            recall_holds: BTreeMap::new(),
            stats: ReliableStats::default(),
            cfg,
            mtu_payload,
            senders,
            destinations,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ReliableConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &ReliableStats {
        &self.stats
    }

    /// Payload bytes held (queued and in flight).
    pub fn buffered_bytes(&self) -> usize {
        self.bytes
    }

    /// The windows now, summed over the pairs (linear in them: for metrics, not the data
    /// path).
    pub fn window(&self) -> ReliableWindow {
        ReliableWindow {
            pairs: self.pairs.len() as u32,
            in_flight_packets: self.pairs.iter().map(|p| p.in_flight as u64).sum(),
            limit_packets: self.pairs.iter().map(|p| p.window() as u64).sum(),
            unacked_messages: self.unacked as u64,
            buffered_bytes: self.bytes as u64,
            buffer_limit_bytes: self.cfg.send_buffer_bytes_max as u64,
        }
    }

    /// Scatterings waiting for credits.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Messages sent and not yet acknowledged.
    pub fn unacked(&self) -> usize {
        self.unacked
    }

    /// Nothing queued, nothing unacknowledged, no recall under way.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.unacked == 0 && self.recall_holds.is_empty()
    }

    /// Recall rounds under way.
    pub fn recalls_pending(&self) -> usize {
        self.recall_holds.len()
    }

    /// The unacknowledged messages, oldest first per pair: (sender, receiver, first PSN,
    /// timestamp). For diagnostics (the simulator's trace of a run that did not drain).
    pub fn unacked_messages(&self) -> Vec<(ProcId, ProcId, Psn, Timestamp)> {
        self.pairs
            .iter()
            .flat_map(|p| {
                p.msgs
                    .iter()
                    .filter(|m| !m.acked)
                    .map(move |m| (p.src, p.dst, m.first, m.ts))
            })
            .collect()
    }

    /// Packets a message of `len` bytes takes.
    pub fn frags(&self, len: usize) -> u32 {
        len.div_ceil(self.mtu_payload).max(1) as u32
    }

    fn pair(&mut self, src: ProcId, dst: ProcId) -> Option<u32> {
        let slot = self.senders.iter().position(|&p| p == src)?;
        if dst.0 >= self.destinations {
            return None;
        }
        if self.pair_of.is_empty() {
            self.pair_of = vec![NIL; self.senders.len() * self.destinations as usize];
        }
        let k = slot * self.destinations as usize + dst.index();
        if self.pair_of[k] == NIL {
            self.pair_of[k] = self.pairs.len() as u32;
            self.pairs.push(Pair {
                src,
                dst,
                next_psn: Psn(0),
                used: 0,
                in_flight: 0,
                cwnd: self.cfg.window_init.clamp(1, WINDOW_MAX) as f64,
                alpha: 0.0,
                rwnd: WINDOW_MAX,
                win_end: Psn(0),
                win_acked: 0,
                win_marked: 0,
                cum: Psn(0),
                dupacks: 0,
                rtt: Rtt::default(),
                msgs: VecDeque::new(),
            });
        }
        Some(self.pair_of[k])
    }

    fn lookup(&self, src: ProcId, dst: ProcId) -> Option<u32> {
        let slot = self.senders.iter().position(|&p| p == src)?;
        if dst.0 >= self.destinations || self.pair_of.is_empty() {
            return None;
        }
        let i = self.pair_of[slot * self.destinations as usize + dst.index()];
        (i != NIL).then_some(i)
    }

    /// Queues a scattering of local `src`; `is_remote(dst)` says which destinations need the
    /// network. Callers validate the scattering (non-empty, known destinations, sizes) first.
    pub fn enqueue(
        &mut self,
        src: ProcId,
        scattering: &[(ProcId, Bytes)],
        is_remote: impl Fn(ProcId) -> bool,
    ) -> Result<u64, BufferFull> {
        let bytes: usize = scattering.iter().map(|(_, b)| b.len()).sum();
        if self.bytes + bytes > self.cfg.send_buffer_bytes_max {
            self.stats.refused_full += 1;
            return Err(BufferFull);
        }
        let mut items = Vec::with_capacity(scattering.len());
        for (dst, payload) in scattering {
            let pair = if is_remote(*dst) {
                Some(self.pair(src, *dst).ok_or(BufferFull)?)
            } else {
                None
            };
            items.push((*dst, payload.clone(), pair));
        }
        self.bytes += bytes;
        let handle = self.next_handle;
        self.next_handle += 1;
        self.queue.push_back(Queued {
            handle,
            src,
            items,
            acquired: 0,
            bytes,
        });
        Ok(handle)
    }

    /// The head scattering acquires what credits it can; once it holds all of them it is
    /// removed and returned, to be stamped and sent (every remote message then goes through
    /// [`ReliableSender::sent`]).
    pub fn pop_ready(&mut self) -> Option<Queued> {
        let head = self.queue.front_mut()?;
        while head.acquired < head.items.len() {
            let (_, payload, pair) = &head.items[head.acquired];
            if let Some(p) = *pair {
                let frags = payload.len().div_ceil(self.mtu_payload).max(1) as u32;
                let pair = &mut self.pairs[p as usize];
                if !pair.fits(frags) {
                    return None;
                }
                pair.used += frags;
            }
            head.acquired += 1;
        }
        let q = self.queue.pop_front().expect("head exists");
        // Local messages leave the buffer at once; remote ones when acknowledged.
        let local: usize = q
            .items
            .iter()
            .filter(|i| i.2.is_none())
            .map(|i| i.1.len())
            .sum();
        self.bytes -= local;
        debug_assert!(q.bytes >= local);
        Some(q)
    }

    /// Records remote message `dst` of a scattering popped by `pop_ready`, stamped `ts` at
    /// `now`; returns its first PSN. Credits were acquired by `pop_ready`.
    pub fn sent(
        &mut self,
        now: Instant,
        src: ProcId,
        dst: ProcId,
        ts: Timestamp,
        payload: Bytes,
    ) -> Psn {
        let p = self.lookup(src, dst).expect("pair created by enqueue");
        let frags = self.frags(payload.len());
        let rto = self.rto_of(p);
        let pair = &mut self.pairs[p as usize];
        let first = pair.next_psn;
        pair.next_psn = Psn(first.0.wrapping_add(frags));
        pair.in_flight += frags;
        debug_assert!(pair.in_flight <= pair.used);
        pair.msgs.push_back(InFlight {
            first,
            frags,
            ts,
            payload,
            acked: false,
            rto_ns: rto,
            sent_at: now,
            retransmitted: false,
            timeouts: 0,
        });
        self.order.push_back((ts, p, first));
        self.unacked += 1;
        self.timers.push(Reverse((now + rto, p, first.0)));
        first
    }

    /// Applies an ACK from `dst` to local `src`; messages to retransmit at once (fast
    /// retransmission) are passed to `retransmit`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_ack(
        &mut self,
        now: Instant,
        src: ProcId,
        dst: ProcId,
        cum: Psn,
        sack: u64,
        ecn: u8,
        rwnd: u8,
        mut retransmit: impl FnMut(Transmit),
    ) {
        let Some(p) = self.lookup(src, dst) else {
            return;
        };
        let g = 1.0 / (1u64 << self.cfg.dctcp_g_shift.min(16)) as f64;
        let threshold = self.cfg.dupack_threshold.max(1);
        let pair = &mut self.pairs[p as usize];
        // An ACK from before the last one (reordered) says nothing new about the window.
        let advance = cum.0.wrapping_sub(pair.cum.0) as i32;
        if advance < 0 {
            return;
        }
        // The receiver cannot acknowledge what was never sent.
        if cum.0.wrapping_sub(pair.next_psn.0) as i32 > 0 {
            return;
        }
        pair.rwnd = rwnd as u32;
        let acked = pair.mark_acked(now, cum, sack);
        self.unacked -= acked.msgs;
        self.bytes -= acked.bytes;
        let (newly, rtt) = (acked.frags, acked.rtt);
        // Karn: only a message sent once gives an unambiguous sample. Of those this ACK covers,
        // the oldest waited longest for it: a delayed or cumulative ACK must not make the RTT
        // look shorter than what a message can wait for its acknowledgement.
        if let Some(rtt) = rtt {
            pair.rtt.sample(rtt);
            self.rtt.sample(rtt);
        }
        while pair.msgs.front().is_some_and(|m| m.acked) {
            pair.msgs.pop_front();
        }
        if pair.fold_window(cum, newly, ecn, g) {
            self.stats.window_cuts += 1;
        }
        if advance > 0 {
            pair.cum = cum;
            pair.dupacks = 0;
        } else if sack != 0 {
            pair.dupacks += 1;
            if pair.dupacks == threshold {
                if let Some(t) = pair.fast_retransmit() {
                    self.stats.retransmits += 1;
                    self.stats.fast_retransmits += 1;
                    retransmit(t);
                }
            }
        }
    }

    /// Prefetch hint (see [`crate::prefetch`]): the fields every host input reads (the
    /// retransmission timers and the commit barrier's order).
    #[inline(always)]
    pub fn prefetch(&self) {
        crate::prefetch::prefetch(&self.timers);
        crate::prefetch::prefetch(&self.order);
    }

    /// The earliest retransmission deadline (possibly of a message acknowledged since).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Retransmits unacknowledged messages whose deadline has passed, oldest deadline first,
    /// backing each one's timeout off: at most `max` of them (0: every one). Returns whether
    /// more are due (call again; a message acknowledged meanwhile is skipped then).
    pub fn expire(
        &mut self,
        now: Instant,
        max: usize,
        mut retransmit: impl FnMut(Transmit),
    ) -> bool {
        let mut budget = if max == 0 { usize::MAX } else { max };
        while let Some(&Reverse((deadline, p, first))) = self.timers.peek() {
            if deadline > now {
                break;
            }
            if budget == 0 {
                return true;
            }
            self.timers.pop();
            let rto_max = self.cfg.rto_max_ns;
            let pair = &mut self.pairs[p as usize];
            let Some(i) = pair.find(Psn(first)) else {
                continue;
            };
            let m = &mut pair.msgs[i];
            if m.acked {
                continue;
            }
            m.retransmitted = true;
            m.timeouts = m.timeouts.saturating_add(1);
            m.rto_ns = (m.rto_ns * 2).min(rto_max.max(m.rto_ns));
            pair.rtt.backoff = pair.rtt.backoff.saturating_add(1);
            self.timers.push(Reverse((now + m.rto_ns, p, first)));
            self.stats.retransmits += 1;
            let after = self.cfg.forward_after_retransmits;
            let forward = after > 0 && m.timeouts >= after;
            self.stats.forwarded += forward as u64;
            retransmit(Transmit {
                src: pair.src,
                dst: pair.dst,
                first: m.first,
                ts: m.ts,
                payload: m.payload.clone(),
                forward,
            });
            budget -= 1;
        }
        false
    }

    /// §5.2 Recall, at the sender: every stamped scattering with a message that a failed
    /// process (`is_failed`) has not acknowledged is aborted — all its unacknowledged messages
    /// leave the buffer, and the commit barrier is held below the oldest of them (round `round`)
    /// until [`ReliableSender::release_recall`]. Messages to failed processes that *were*
    /// acknowledged stay (2PC delivers them: §5.2 appendix). Returns what was aborted.
    pub fn fail(&mut self, round: u32, is_failed: impl Fn(ProcId) -> bool) -> Recalled {
        let mut groups = BTreeSet::new();
        for pair in self.pairs.iter().filter(|p| is_failed(p.dst)) {
            for m in pair.msgs.iter().filter(|m| !m.acked) {
                groups.insert((pair.src, m.ts));
            }
        }
        let mut out = Recalled::default();
        if groups.is_empty() {
            return out;
        }
        for pair in self.pairs.iter_mut() {
            let failed = is_failed(pair.dst);
            let mut kept = VecDeque::with_capacity(pair.msgs.len());
            for m in pair.msgs.drain(..) {
                if m.acked || !groups.contains(&(pair.src, m.ts)) {
                    kept.push_back(m);
                    continue;
                }
                self.unacked -= 1;
                self.bytes -= m.payload.len();
                pair.used -= m.frags;
                pair.in_flight -= m.frags;
                if !failed {
                    out.unacked.push((pair.src, pair.dst, m.first, m.frags));
                }
            }
            while kept.front().is_some_and(|m| m.acked) {
                kept.pop_front();
            }
            pair.msgs = kept;
        }
        let oldest = groups.iter().map(|g| g.1).min().expect("not empty");
        let hold = self.recall_holds.entry(round).or_insert(oldest);
        *hold = hold.min_wrapping(oldest);
        self.stats.recalled += groups.len() as u64;
        out.groups = groups.into_iter().collect();
        out
    }

    /// §5.2 Resume changed the routes: every unacknowledged message goes again now, with the
    /// back-off reset — any copy sent before may have died with the failed component, and a
    /// timeout backed off during the outage would stall the commit barrier for as long again.
    /// (Receivers drop the duplicates.)
    pub fn rearm_after_reroute(&mut self, now: Instant) {
        for p in 0..self.pairs.len() {
            self.pairs[p].rtt.backoff = 0;
            let base = self.rto_of(p as u32);
            let pair = &mut self.pairs[p];
            for m in pair.msgs.iter_mut().filter(|m| !m.acked) {
                m.rto_ns = base;
                self.timers.push(Reverse((now, p as u32, m.first.0)));
            }
        }
    }

    /// The retransmission timeout of a message sent now on pair `p`: its own estimate, or the
    /// host's while it has no sample yet; either way backed off by the pair's timeouts.
    fn rto_of(&self, p: u32) -> u64 {
        let own = self.pairs[p as usize].rtt;
        let est = if own.srtt == 0 {
            Rtt {
                backoff: own.backoff,
                ..self.rtt
            }
        } else {
            own
        };
        est.rto(self.cfg.rto_init_ns, self.cfg.rto_ns, self.cfg.rto_max_ns)
    }

    /// §5.2: this host's own processes were declared failed. Everything they have in flight is
    /// at or above their failure timestamp (which is their commit barrier: below it, everything
    /// was acknowledged) and is discarded by every receiver, so the send buffer is emptied:
    /// returns the stamped scatterings `(sender, timestamp)` and the queued ones, which will
    /// never be sent.
    pub fn abandon(&mut self) -> (Vec<(ProcId, Timestamp)>, Vec<Queued>) {
        let mut groups = BTreeSet::new();
        for pair in self.pairs.iter_mut() {
            for m in pair.msgs.drain(..).filter(|m| !m.acked) {
                groups.insert((pair.src, m.ts));
                self.unacked -= 1;
                self.bytes -= m.payload.len();
                pair.used -= m.frags;
                pair.in_flight -= m.frags;
            }
        }
        self.order.clear();
        self.timers.clear();
        let queued: Vec<Queued> = self.queue.drain(..).collect();
        for q in &queued {
            for (_, payload, pair) in q.items.iter().take(q.acquired) {
                if let Some(p) = *pair {
                    self.pairs[p as usize].used -= self.frags(payload.len());
                }
            }
            self.bytes -= q.bytes;
        }
        debug_assert_eq!(self.unacked, 0);
        (groups.into_iter().collect(), queued)
    }

    /// Every receiver discarded what round `round` recalled: the commit barrier may pass it.
    pub fn release_recall(&mut self, round: u32) {
        self.recall_holds.remove(&round);
    }

    /// Gives back the credits and bytes of a scattering [`ReliableSender::pop_ready`] returned
    /// but that will not be sent (a destination failed: §5.2).
    pub fn abort(&mut self, q: Queued) {
        for (_, payload, pair) in &q.items {
            if let Some(p) = *pair {
                let frags = self.frags(payload.len());
                self.pairs[p as usize].used -= frags;
                self.bytes -= payload.len();
            }
        }
    }

    /// The commit barrier (§5.1) given the host's current timestamp `now_ts`: every reliable
    /// message below it is acknowledged by all its receivers, and every future one will be
    /// stamped at or above it.
    pub fn commit(&mut self, now_ts: Timestamp) -> Timestamp {
        while let Some(&(_, p, first)) = self.order.front() {
            let pair = &self.pairs[p as usize];
            match pair.find(first) {
                Some(i) if !pair.msgs[i].acked => break,
                _ => {
                    self.order.pop_front();
                }
            }
        }
        let c = match self.order.front() {
            Some(&(ts, _, _)) => ts.min_wrapping(now_ts),
            None => now_ts,
        };
        self.recall_holds
            .values()
            .fold(c, |c, &h| c.min_wrapping(h))
    }
}

#[cfg(test)]
mod tests;
