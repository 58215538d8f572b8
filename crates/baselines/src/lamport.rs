//! Lamport-timestamp total order (\[63\]): the [`LamportEndpoint`].
//!
//! Every process keeps a Lamport clock `L`. A send increments it and stamps the message with it;
//! receiving a message or a clock raises `L` to at least what was seen. Messages are totally
//! ordered by `(ts, src)`. A receiver delivers a buffered message once no process can still send
//! it anything that sorts earlier: once it has seen, from *every* process, a timestamp at least the
//! message's (on a FIFO channel, everything that process sent before has then arrived, and
//! everything it sends later is stamped higher).
//!
//! **Clock exchange per interval.** Processes do not acknowledge every message. Instead, every
//! `heartbeat_interval_ns` each process whose clock moved sends it to every other process
//! ([`Body::Clock`]) — the optimization the paper applies (§7.2: "exchanges received timestamps per
//! interval rather than per message"). The interval trades latency against bandwidth: delivery
//! waits for the slowest process's next heartbeat, and each heartbeat round costs `procs - 1`
//! packets per process.
//!
//! **FIFO channels are required for correctness**: a clock from `r` promises that nothing *sent
//! before it* is still on the way. The network may reorder (ECMP across paths, the simulator's
//! reordering), so every data packet carries a per-(src, dst) channel sequence number and the
//! receiver releases a channel's packets in that order, buffering out-of-order ones. A clock is
//! applied only once every message sent before it on the channel has been released (it carries
//! the channel count `cseq_next` for this).
//!
//! **Loss.** A gap in a channel (seen from a later message or from a clock's `cseq_next`) is
//! NACKed to the sender after `nack_timeout_ns`, again every timeout while it stays open; the
//! sender keeps its last `history_len_max` messages and retransmits them, or answers
//! [`Body::Lost`] for older ones (the receiver then skips them and reports
//! [`BaseEvent::Lost`]). A lost clock is replaced by the next one; after the clock stops moving,
//! `heartbeat_repeats` more rounds are sent so an idle tail is not lost with a single packet. A
//! receiver whose oldest message has waited a NACK timeout on some process's clock pulls it with
//! [`Body::ClockRequest`].
//!
//! What it is not: fault-tolerant. A failed or partitioned process stops all delivery (everyone
//! waits for its clock), the classic weakness of receiver-side ordering (§8).

use crate::common::{
    answer_nack, earliest, gap_nacks, validate_send, BaseEvent, BaseSendError, BaseStats, Endpoint,
    History, MinTree, Refused, SeqBuffer, Timers, PORT,
};
use crate::dests::Dests;
use crate::packet::{BasePacket, Body, PAYLOAD_LEN_MAX};
use bytes::Bytes;
use onepipe_proto::ids::ProcId;
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::Instant;
use std::collections::{BTreeMap, VecDeque};

/// Static configuration of a [`LamportEndpoint`].
#[derive(Clone, Debug)]
pub struct LamportConfig {
    /// This endpoint's process, in `0..procs`.
    pub id: ProcId,
    /// The group: processes `0..procs`.
    pub procs: u32,
    /// Clock exchange interval. Default 10 µs.
    pub heartbeat_interval_ns: u64,
    /// Extra heartbeat rounds after the clock stops moving. Default 2.
    pub heartbeat_repeats: u8,
    /// A channel gap open this long is NACKed, and again every this long; a delivery that made
    /// no progress for this long (and at least two heartbeat intervals) pulls the missing
    /// clocks. Default 20 µs.
    pub nack_timeout_ns: u64,
    /// Own messages kept for retransmission. Default 65,536.
    pub history_len_max: usize,
    /// Per-channel reorder window. Default 4,096.
    pub channel_window: u64,
    /// Most messages released from their channels and waiting for the clocks; messages arriving
    /// beyond it are dropped (and NACKed later). The bound is soft by at most one channel
    /// window per sender, released in one go. Default 1,048,576.
    pub pending_len_max: usize,
    /// Most outputs waiting to be drained; `send` beyond it is [`BaseSendError::Full`].
    /// Default 1,048,576 (a broadcast queues `procs - 1` packets).
    pub send_queue_len_max: usize,
    /// Largest payload. Default [`PAYLOAD_LEN_MAX`].
    pub payload_len_max: usize,
}

impl LamportConfig {
    /// Defaults for endpoint `id` of `procs`.
    pub fn new(id: ProcId, procs: u32) -> LamportConfig {
        LamportConfig {
            id,
            procs,
            heartbeat_interval_ns: 10_000,
            heartbeat_repeats: 2,
            nack_timeout_ns: 20_000,
            history_len_max: 1 << 16,
            channel_window: 1 << 12,
            pending_len_max: 1 << 20,
            send_queue_len_max: 1 << 20,
            payload_len_max: PAYLOAD_LEN_MAX,
        }
    }
}

/// A message in a channel's reorder window, or a number given up on.
#[derive(Clone, Debug)]
enum Slot {
    Msg { ts: u64, index: u64, payload: Bytes },
    Lost,
}

/// The receive side of one channel (one sender to this process).
#[derive(Clone, Debug)]
struct Channel {
    rx: SeqBuffer<Slot>,
    /// Sender index of the last message released.
    last_index: Option<u64>,
    /// From the latest clock: (cseq_next, index_next).
    tail: Option<(u64, u64)>,
    /// The latest clock not yet applicable: (cseq_next it needs, ts).
    clock: Option<(u64, u64)>,
}

/// An own message kept for retransmission.
#[derive(Clone, Debug)]
struct Sent {
    ts: u64,
    dests: Dests,
    payload: Bytes,
}

/// A process's endpoint in the Lamport-timestamp protocol. See the module docs.
#[derive(Debug)]
pub struct LamportEndpoint {
    cfg: LamportConfig,
    /// The Lamport clock.
    clock: u64,
    next_index: u64,
    /// Per destination: next channel sequence number, and one past the last index sent to it.
    cseq_next: Vec<u64>,
    index_next: Vec<u64>,
    history: History<Sent>,
    channels: Vec<Channel>,
    /// Per process, the highest timestamp it is known to have passed (own: the clock).
    latest: MinTree,
    /// Released messages waiting for the clocks, in total order.
    pending: BTreeMap<(u64, ProcId), Bytes>,
    /// The clock value last broadcast in a heartbeat round, and rounds still to repeat.
    clock_sent: u64,
    repeats_left: u8,
    tick_at: Option<Instant>,
    /// Since when the oldest pending message has been waiting on the clocks.
    blocked_since: Option<Instant>,
    nack_timers: Timers,
    /// Per channel, its next expected number when its NACK timer was armed (see
    /// `SeqEndpoint`: only a gap with no progress for a whole timeout is NACKed).
    nack_armed_next: Vec<u64>,
    loopback: VecDeque<BasePacket>,
    out: VecDeque<Output<BasePacket, BaseEvent>>,
    stats: BaseStats,
}

impl LamportEndpoint {
    /// An endpoint.
    ///
    /// # Panics
    /// On an inconsistent configuration.
    pub fn new(cfg: LamportConfig) -> LamportEndpoint {
        assert!(cfg.id.0 < cfg.procs, "endpoint outside the group");
        assert!(cfg.heartbeat_interval_ns > 0 && cfg.nack_timeout_ns > 0);
        assert!(cfg.history_len_max > 0 && cfg.pending_len_max > 0);
        assert!(cfg.channel_window > 0 && cfg.channel_window <= u64::from(u32::MAX));
        assert!(cfg.send_queue_len_max > 0 && cfg.payload_len_max <= PAYLOAD_LEN_MAX);
        let n = cfg.procs as usize;
        let channel = Channel {
            rx: SeqBuffer::new(cfg.channel_window),
            last_index: None,
            tail: None,
            clock: None,
        };
        LamportEndpoint {
            clock: 0,
            next_index: 0,
            cseq_next: vec![0; n],
            index_next: vec![0; n],
            history: History::new(cfg.history_len_max),
            channels: vec![channel; n],
            latest: MinTree::new(n),
            pending: BTreeMap::new(),
            clock_sent: 0,
            repeats_left: 0,
            tick_at: None,
            blocked_since: None,
            nack_timers: Timers::new(n),
            nack_armed_next: vec![0; n],
            loopback: VecDeque::new(),
            out: VecDeque::new(),
            stats: BaseStats::default(),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LamportConfig {
        &self.cfg
    }

    /// The Lamport clock.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Messages released from their channels and waiting for the clocks.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The delivery horizon: every message stamped at or below it has been delivered.
    pub fn horizon(&self) -> u64 {
        self.latest.min()
    }

    /// Messages sent to `dst` so far (its channel's next sequence number).
    pub fn sent_to(&self, dst: ProcId) -> u64 {
        self.cseq_next.get(dst.index()).copied().unwrap_or(0)
    }

    /// Messages from `src` released from its channel or given up on so far (the channel's next
    /// expected sequence number). A driver compares it with the sender's
    /// [`LamportEndpoint::sent_to`] to tell a finished run from one whose tail is still missing.
    pub fn received_from(&self, src: ProcId) -> u64 {
        self.channels.get(src.index()).map_or(0, |c| c.rx.next())
    }

    /// True when nothing waits for the clocks, no channel has a gap or buffered message, and
    /// no heartbeat round is still due (the clock was sent and its repeats are done). A driver
    /// waiting for quiescence checks this. O(procs).
    pub fn is_idle(&self) -> bool {
        !self.busy()
            && self
                .channels
                .iter()
                .all(|c| c.rx.is_empty() && c.tail.is_none() && c.clock.is_none())
    }

    fn me(&self) -> usize {
        self.cfg.id.index()
    }

    fn emit(&mut self, dst: ProcId, body: Body) {
        let packet = BasePacket {
            src: self.cfg.id,
            dst,
            body,
        };
        if dst == self.cfg.id {
            self.loopback.push_back(packet);
        } else {
            self.stats.packets_sent += 1;
            self.out.push_back(Output::Send { port: PORT, packet });
        }
    }

    /// Raises the clock to at least `ts` (Lamport's receive rule).
    fn observe(&mut self, ts: u64) {
        self.clock = self.clock.max(ts);
        let me = self.me();
        self.latest.raise(me, self.clock);
    }

    fn clock_body(&self, dst: ProcId) -> Body {
        Body::Clock {
            ts: self.clock,
            cseq_next: self.cseq_next[dst.index()],
            index_next: self.index_next[dst.index()],
        }
    }

    // --- Receiving ---------------------------------------------------------------------------

    fn on_stamped(&mut self, src: ProcId, ts: u64, cseq: u64, index: u64, payload: Bytes) {
        // Own messages are never refused: nothing would reveal the gap to ourselves.
        if self.pending.len() >= self.cfg.pending_len_max && src != self.cfg.id {
            self.stats.dropped_full += 1;
            return;
        }
        self.observe(ts);
        let slot = Slot::Msg { ts, index, payload };
        match self.channels[src.index()].rx.insert(cseq, slot) {
            Ok(()) => {}
            Err(Refused::Duplicate) => self.stats.dropped_duplicate += 1,
            Err(Refused::Window) => self.stats.dropped_full += 1,
        }
    }

    fn on_clock(&mut self, src: ProcId, ts: u64, cseq_next: u64, index_next: u64) {
        self.observe(ts);
        let ch = &mut self.channels[src.index()];
        if ch.tail.is_none_or(|(c, _)| cseq_next > c) {
            ch.tail = Some((cseq_next, index_next));
        }
        if ch.clock.is_none_or(|(_, t)| ts > t) {
            ch.clock = Some((cseq_next, ts));
        }
    }

    /// Releases `src`'s channel in order into `pending`, then applies its clock if everything
    /// it covers has been released.
    fn release_channel(&mut self, now: Instant, src: ProcId) {
        let i = src.index();
        let mut latest = self.latest.get(i);
        while let Some((_, slot)) = self.channels[i].rx.pop() {
            match slot {
                Slot::Msg { ts, index, payload } => {
                    self.channels[i].last_index = Some(index);
                    latest = latest.max(ts);
                    if self.pending.insert((ts, src), payload).is_some() {
                        // Two messages from one sender with one timestamp: a broken sender.
                        self.stats.dropped_invalid += 1;
                    }
                }
                Slot::Lost => {
                    self.stats.lost += 1;
                    self.out.push_back(Output::Event(BaseEvent::Lost {
                        dst: self.cfg.id,
                        src: Some(src),
                        count: 1,
                    }));
                }
            }
        }
        let ch = &mut self.channels[i];
        let next = ch.rx.next();
        if let Some((c, ts)) = ch.clock {
            if c <= next {
                latest = latest.max(ts);
                ch.clock = None;
            }
        }
        if ch.tail.is_some_and(|(c, _)| c <= next) {
            ch.tail = None;
        }
        let gap = !ch.rx.is_empty() || ch.tail.is_some();
        if i != self.me() {
            self.latest.raise(i, latest);
        }
        if !gap {
            self.nack_timers.clear(src.0);
        } else if !self.nack_timers.is_set(src.0) {
            self.nack_timers.set(src.0, now + self.cfg.nack_timeout_ns);
            self.nack_armed_next[i] = next;
        }
    }

    /// Delivers every pending message at or below the horizon (the minimum over all processes of
    /// the highest timestamp each is known to have passed), in `(ts, src)` order.
    fn deliver_ready(&mut self, now: Instant) {
        let horizon = self.latest.min();
        let delivered_before = self.stats.delivered;
        while let Some(entry) = self.pending.first_entry() {
            if entry.key().0 > horizon {
                break;
            }
            let ((ts, src), payload) = entry.remove_entry();
            self.stats.delivered += 1;
            self.out.push_back(Output::Event(BaseEvent::Deliver {
                dst: self.cfg.id,
                src,
                seq_or_ts: ts,
                payload,
            }));
        }
        if self.pending.is_empty() {
            self.blocked_since = None;
        } else if self.blocked_since.is_none() || self.stats.delivered > delivered_before {
            // Blocked since the last progress, not since the first message arrived.
            self.blocked_since = Some(now);
        }
    }

    // --- Serving NACKs -----------------------------------------------------------------------

    fn on_nack(&mut self, r: ProcId, seq: u64, count: u64, lo: u64, hi: u64) {
        let i = r.index();
        let consistent = count <= self.cfg.channel_window
            && seq
                .checked_add(count)
                .is_some_and(|end| end <= self.cseq_next[i])
            && hi <= self.next_index;
        let answer = consistent
            .then(|| answer_nack(&self.history, count, lo, hi, |e| e.dests.contains(r)))
            .flatten();
        let Some(answer) = answer else {
            self.stats.dropped_invalid += 1;
            return;
        };
        if answer.lost > 0 {
            self.stats.lost_markers_sent += 1;
            self.emit(
                r,
                Body::Lost {
                    seq,
                    count: answer.lost as u32,
                },
            );
        }
        for (k, (index, sent)) in answer.found.into_iter().enumerate() {
            self.stats.retransmitted += 1;
            self.emit(
                r,
                Body::Stamped {
                    ts: sent.ts,
                    cseq: seq + answer.lost + k as u64,
                    index,
                    payload: sent.payload,
                },
            );
        }
    }

    fn send_channel_nacks(&mut self, now: Instant, src: ProcId) {
        let ch = &self.channels[src.index()];
        if ch.rx.next() != self.nack_armed_next[src.index()] {
            // Progress since arming: time the current gap afresh.
            self.nack_armed_next[src.index()] = ch.rx.next();
            self.nack_timers.set(src.0, now + self.cfg.nack_timeout_ns);
            return;
        }
        let nacks = gap_nacks(&ch.rx, ch.last_index, ch.tail, |s| match s {
            Slot::Msg { index, .. } => Some(*index),
            Slot::Lost => None,
        });
        for n in nacks {
            self.stats.nacks_sent += 1;
            self.emit(
                src,
                Body::Nack {
                    seq: n.seq,
                    count: n.count as u32,
                    index_lo: n.lo,
                    index_hi: n.hi,
                },
            );
        }
        let ch = &self.channels[src.index()];
        if !ch.rx.is_empty() || ch.tail.is_some() {
            self.nack_armed_next[src.index()] = ch.rx.next();
            self.nack_timers.set(src.0, now + self.cfg.nack_timeout_ns);
        }
    }

    // --- Timers ------------------------------------------------------------------------------

    /// One heartbeat round, if the clock moved or repeats are due; and pulls clocks for a
    /// delivery blocked too long.
    fn tick(&mut self, now: Instant) {
        self.tick_at = None;
        if self.clock > self.clock_sent {
            self.clock_sent = self.clock;
            self.repeats_left = self.cfg.heartbeat_repeats;
            self.heartbeat_round();
        } else if self.repeats_left > 0 {
            self.repeats_left -= 1;
            self.heartbeat_round();
        }
        // Pull only after the heartbeats had two chances to arrive on their own.
        let patience = self
            .cfg
            .nack_timeout_ns
            .max(2 * self.cfg.heartbeat_interval_ns);
        if self
            .blocked_since
            .is_some_and(|b| now.saturating_since(b) >= patience)
        {
            self.blocked_since = Some(now);
            self.pull_clocks();
        }
    }

    fn heartbeat_round(&mut self) {
        for d in 0..self.cfg.procs {
            let d = ProcId(d);
            if d != self.cfg.id {
                self.stats.heartbeats_sent += 1;
                let body = self.clock_body(d);
                self.emit(d, body);
            }
        }
    }

    /// Asks every process whose clock holds back the oldest pending message for its clock.
    fn pull_clocks(&mut self) {
        let Some((&(ts, _), _)) = self.pending.first_key_value() else {
            return;
        };
        for r in 0..self.cfg.procs {
            if r != self.cfg.id.0 && self.latest.get(r as usize) < ts {
                self.emit(ProcId(r), Body::ClockRequest);
            }
        }
    }

    fn busy(&self) -> bool {
        self.clock > self.clock_sent || self.repeats_left > 0 || !self.pending.is_empty()
    }

    fn on_timeout(&mut self, now: Instant) {
        if self.tick_at.is_some_and(|t| t <= now) {
            self.tick(now);
        }
        while let Some(src) = self.nack_timers.pop_due(now) {
            self.send_channel_nacks(now, ProcId(src));
        }
    }

    // --- Dispatch ----------------------------------------------------------------------------

    fn on_packet(&mut self, now: Instant, p: BasePacket) {
        if p.dst != self.cfg.id || p.src.0 >= self.cfg.procs || !p.body.plausible() {
            self.stats.dropped_invalid += 1;
            return;
        }
        let src = p.src;
        match p.body {
            Body::Stamped {
                ts,
                cseq,
                index,
                payload,
            } => self.on_stamped(src, ts, cseq, index, payload),
            Body::Clock {
                ts,
                cseq_next,
                index_next,
            } if src != self.cfg.id => self.on_clock(src, ts, cseq_next, index_next),
            Body::ClockRequest if src != self.cfg.id => {
                self.stats.heartbeats_sent += 1;
                let body = self.clock_body(src);
                self.emit(src, body);
            }
            Body::Nack {
                seq,
                count,
                index_lo,
                index_hi,
            } => self.on_nack(src, seq, u64::from(count), index_lo, index_hi),
            Body::Lost { seq, count } => {
                self.channels[src.index()]
                    .rx
                    .fill(seq, u64::from(count), || Slot::Lost);
            }
            _ => {
                self.stats.dropped_invalid += 1;
                return;
            }
        }
        self.release_channel(now, src);
    }

    fn after_mutation(&mut self, now: Instant) {
        while let Some(p) = self.loopback.pop_front() {
            self.on_packet(now, p);
        }
        self.deliver_ready(now);
        if self.tick_at.is_none() && self.busy() {
            self.tick_at = Some(now + self.cfg.heartbeat_interval_ns);
        }
        if cfg!(debug_assertions) {
            self.invariants();
        }
    }

    fn invariants(&self) {
        debug_assert!(self.loopback.is_empty());
        debug_assert_eq!(self.latest.get(self.me()), self.clock);
        debug_assert!(self.clock_sent <= self.clock);
        debug_assert!(!self.busy() || self.tick_at.is_some());
        debug_assert!(self
            .pending
            .first_key_value()
            .is_none_or(|(&(ts, _), _)| ts > self.latest.min()));
    }
}

impl Node for LamportEndpoint {
    type Packet = BasePacket;
    type Event = BaseEvent;
    type Mgmt = std::convert::Infallible;

    fn handle(&mut self, now: Instant, input: Input<BasePacket>) {
        match input {
            Input::Packet { port, packet } if port == PORT => self.on_packet(now, packet),
            Input::Packet { .. } => self.stats.dropped_invalid += 1,
            Input::Timeout => self.on_timeout(now),
            Input::Notice(_) => {} // no §5.2 failure handling here
        }
        self.after_mutation(now);
    }

    fn poll_output(&mut self) -> Option<Output<BasePacket, BaseEvent>> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        earliest(self.tick_at, self.nack_timers.next())
    }
}

impl Endpoint for LamportEndpoint {
    fn id(&self) -> ProcId {
        self.cfg.id
    }

    fn send(&mut self, now: Instant, payload: Bytes, dests: Dests) -> Result<(), BaseSendError> {
        validate_send(self.cfg.procs, self.cfg.payload_len_max, &payload, &dests)?;
        if self.out.len() >= self.cfg.send_queue_len_max {
            return Err(BaseSendError::Full);
        }
        // Lamport's send rule: tick, then stamp.
        let ts = self.clock + 1;
        self.observe(ts);
        let index = self.next_index;
        self.next_index += 1;
        self.stats.sends += 1;
        for d in dests.iter(self.cfg.procs) {
            let cseq = self.cseq_next[d.index()];
            self.cseq_next[d.index()] += 1;
            self.index_next[d.index()] = index + 1;
            self.emit(
                d,
                Body::Stamped {
                    ts,
                    cseq,
                    index,
                    payload: payload.clone(),
                },
            );
        }
        self.history.push(index, Sent { ts, dests, payload });
        self.after_mutation(now);
        Ok(())
    }

    fn stats(&self) -> &BaseStats {
        &self.stats
    }
}
