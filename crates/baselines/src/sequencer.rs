//! Fixed-sequencer total order: the [`Sequencer`] role and the [`SeqEndpoint`] of each process.
//!
//! The classic centralised design 1Pipe is compared with in §7.2 / Fig. 8: a sequencer on a host
//! (its NIC and CPU, as in Kalia et al.'s RDMA sequencer \[57\]) or on a programmable switch (as
//! in Eris \[51\]). Senders send each message to the sequencer ([`Body::Submit`]); it stamps a
//! global sequence number and forwards a unicast copy to every destination
//! ([`Body::Ordered`]); receivers deliver in sequence order. One implementation serves both
//! placements — [`SequencerConfig::placement`] only tells the driver where it runs and what to
//! charge (see [`SequencerPlacement`]).
//!
//! **Messages to a subset.** A receiver gets only the messages addressed to it, so the global
//! number alone cannot reveal a gap. The sequencer therefore keeps a counter per destination and
//! stamps each copy with a per-receiver sequence number `rseq` as well: receivers deliver in
//! `rseq` order (which is `gseq` order), and a jump in `rseq` is a loss.
//!
//! **Loss.**
//! * Sequencer → receiver: a receiver with a gap waits `nack_timeout_ns`, then NACKs the
//!   sequencer with the missing `rseq`s and the `gseq` range they lie in, and repeats every
//!   timeout until the gap closes. The sequencer keeps the last `history_len_max` messages and
//!   retransmits from there. A NACK reaching below the history is answered with a
//!   [`Body::Lost`] marker: the receiver skips those numbers and reports
//!   [`BaseEvent::Lost`] — it never stalls for ever, and the order of what it does deliver is
//!   unaffected. A lost *last* message is noticed through [`Body::SeqSync`]: when the stream to
//!   a receiver goes idle for a sync interval, the sequencer tells it how many messages it should
//!   have had, and repeats that every interval until the receiver acknowledges having them all
//!   ([`Body::SyncAck`]) or `sync_repeats` syncs went unanswered.
//! * Sender → sequencer: best effort. The sequencer keeps each sender's messages in FIFO order
//!   (the network may reorder them) and drops duplicates; a gap still open after
//!   `upstream_gap_timeout_ns` is skipped, and the sender hears [`Body::SubmitLost`] →
//!   [`BaseEvent::SendFailed`]. Such a message is delivered by nobody, so receivers still agree.
//!   A sender's *last* message lost on the way is lost silently (nothing reveals it).
//!
//! What it is not: fault-tolerant. A failed sequencer stops everything, as in the paper's
//! comparison; no failover or epoch change is modelled.

use crate::common::{
    answer_nack, dests_in_group, earliest, gap_nacks, validate_send, BaseEvent, BaseSendError,
    BaseStats, Endpoint, GapTimer, History, Refused, SeqBuffer, Timers, PORT,
};
use crate::dests::Dests;
use crate::packet::{BasePacket, Body, OrderEntry, ORDER_BATCH_LEN_MAX, PAYLOAD_LEN_MAX};
use bytes::Bytes;
use onepipe_proto::ids::ProcId;
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::Instant;
use std::collections::VecDeque;

/// Where the sequencer runs. The role behaves identically; the driver decides what it costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SequencerPlacement {
    /// On a host, behind its NIC (\[57\]): the driver charges the host's CPU per packet received
    /// and per copy sent, like any endpoint.
    #[default]
    Host,
    /// On a programmable switch (\[51\]): the driver charges
    /// [`SequencerConfig::switch_packet_ns`] per packet the sequencer takes in and treats the
    /// unicast copies as line-rate replication.
    Switch,
}

/// Static configuration of the [`Sequencer`].
#[derive(Clone, Debug)]
pub struct SequencerConfig {
    /// The sequencer's own process id: endpoints address it. Must lie outside `0..procs`.
    pub id: ProcId,
    /// Endpoints are processes `0..procs`.
    pub procs: u32,
    /// Host or switch (for the driver; see [`SequencerPlacement`]).
    pub placement: SequencerPlacement,
    /// Processing time per packet in the switch placement, for the driver to charge (the role
    /// never reads it). Default 0.1 µs: a programmable switch sequences at line rate, but its
    /// stateful ALU serialises one packet per pipeline pass.
    pub switch_packet_ns: u64,
    /// Ordered messages kept for retransmission. Default 65,536.
    pub history_len_max: usize,
    /// Per-sender reorder window of messages waiting for an earlier one. Default 1,024.
    pub upstream_window: u64,
    /// How long a gap in a sender's messages may stay open before it is skipped. Default 100 µs.
    pub upstream_gap_timeout_ns: u64,
    /// Largest count accepted in a NACK. Keep it at least the endpoints' `reorder_window`
    /// (receivers cap NACKs at their window). Default 65,536.
    pub nack_count_max: u64,
    /// A receiver idle this long gets a [`Body::SeqSync`]. Default 20 µs.
    pub sync_interval_ns: u64,
    /// Most syncs an idle receiver gets (each an interval apart) while it does not acknowledge
    /// them. Default 32; 0 disables syncs.
    pub sync_repeats: u8,
    /// PLATO's sequencing (`crate::plato`): send each destination the order alone, `k` places
    /// per [`Body::OrderBatch`], instead of a copy of every message; senders send the messages
    /// themselves. `None` (the default): the classic copies ([`Body::Ordered`]).
    pub order_batch: Option<OrderBatchConfig>,
}

/// PLATO's sequencing packets (§4: "the sequencer can send out an ordered list of multiple
/// received data messages in every sequencing message"; `k` is the paper's trade-off
/// parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderBatchConfig {
    /// Places per sequencing packet (the paper's k: 10 and 20 in its figures); at most
    /// [`ORDER_BATCH_LEN_MAX`].
    pub k: usize,
    /// A destination's partial batch is sent this long after its first place was stamped
    /// (the paper has no such flush: at a low rate the last messages would wait for ever).
    pub flush_ns: u64,
}

impl OrderBatchConfig {
    /// k = 10 (PLATO's Figs. 8–11), a partial batch flushed after 20 µs (the sequencer's sync
    /// interval: data-centre round trips are a few microseconds).
    pub const PAPER_K10: OrderBatchConfig = OrderBatchConfig {
        k: 10,
        flush_ns: 20_000,
    };
}

impl SequencerConfig {
    /// Defaults for a sequencer with process id `procs` (just past the endpoints) on a host.
    pub fn new(procs: u32) -> SequencerConfig {
        SequencerConfig {
            id: ProcId(procs),
            procs,
            placement: SequencerPlacement::Host,
            switch_packet_ns: 100,
            history_len_max: 1 << 16,
            upstream_window: 1 << 10,
            upstream_gap_timeout_ns: 100_000,
            nack_count_max: 1 << 16,
            sync_interval_ns: 20_000,
            sync_repeats: 32,
            order_batch: None,
        }
    }
}

/// A message kept for retransmission.
#[derive(Clone, Debug)]
struct Stamped {
    origin: ProcId,
    msg_id: u64,
    dests: Dests,
    payload: Bytes,
}

/// What the sequencer tracks per destination.
#[derive(Clone, Copy, Debug, Default)]
struct DestState {
    /// Next per-receiver sequence number.
    rseq_next: u64,
    /// Global number of the last message sent to it.
    gseq_last: u64,
    /// Something was sent to it since the last sync tick.
    busy: bool,
    /// Syncs still to send once it is idle (0 once it acknowledged everything sent to it).
    syncs_left: u8,
}

/// The fixed sequencer. See the module docs.
#[derive(Debug)]
pub struct Sequencer {
    cfg: SequencerConfig,
    next_gseq: u64,
    history: History<Stamped>,
    /// Per sender: messages waiting for an earlier one, keyed by `msg_id`.
    upstream: Vec<SeqBuffer<(Dests, Bytes)>>,
    upstream_timers: Timers,
    dests: Vec<DestState>,
    /// PLATO: per destination, the places stamped and not yet sent in a batch.
    batches: Vec<Vec<OrderEntry>>,
    batch_timers: Timers,
    /// Destinations with `syncs_left > 0`.
    syncs_pending: usize,
    sync_at: Option<Instant>,
    out: VecDeque<Output<BasePacket, BaseEvent>>,
    stats: BaseStats,
}

impl Sequencer {
    /// A sequencer.
    ///
    /// # Panics
    /// On an inconsistent configuration (its id inside the group, a zero limit or interval).
    pub fn new(cfg: SequencerConfig) -> Sequencer {
        assert!(cfg.id.0 >= cfg.procs, "the sequencer is not an endpoint");
        assert!(cfg.procs > 0 && cfg.history_len_max > 0 && cfg.upstream_window > 0);
        assert!(cfg.sync_interval_ns > 0 && cfg.upstream_gap_timeout_ns > 0);
        assert!(cfg.nack_count_max > 0 && cfg.nack_count_max <= u64::from(u32::MAX));
        if let Some(b) = cfg.order_batch {
            assert!(b.k > 0 && b.k <= ORDER_BATCH_LEN_MAX && b.flush_ns > 0);
        }
        let n = cfg.procs as usize;
        Sequencer {
            next_gseq: 0,
            history: History::new(cfg.history_len_max),
            upstream: (0..n)
                .map(|_| SeqBuffer::new(cfg.upstream_window))
                .collect(),
            upstream_timers: Timers::new(n),
            dests: vec![DestState::default(); n],
            batches: vec![Vec::new(); n],
            batch_timers: Timers::new(n),
            syncs_pending: 0,
            sync_at: None,
            out: VecDeque::new(),
            stats: BaseStats::default(),
            cfg,
        }
    }

    /// The configuration (the driver reads the placement and per-packet cost here).
    pub fn config(&self) -> &SequencerConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &BaseStats {
        &self.stats
    }

    /// Messages ordered so far (the next global sequence number).
    pub fn ordered(&self) -> u64 {
        self.next_gseq
    }

    /// Messages ordered for destination `dst` so far (its next per-receiver sequence number).
    pub fn ordered_for(&self, dst: ProcId) -> u64 {
        self.dests.get(dst.index()).map_or(0, |d| d.rseq_next)
    }

    /// True when the sequencer owes nothing: no sender's message waits for an earlier one and
    /// no tail sync is still to be sent. A driver waiting for quiescence checks this.
    pub fn is_idle(&self) -> bool {
        self.syncs_pending == 0
            && self.upstream.iter().all(SeqBuffer::is_empty)
            && self.batches.iter().all(Vec::is_empty)
    }

    fn send_packet(&mut self, dst: ProcId, body: Body) {
        self.stats.packets_sent += 1;
        self.out.push_back(Output::Send {
            port: PORT,
            packet: BasePacket {
                src: self.cfg.id,
                dst,
                body,
            },
        });
    }

    fn ignore_packet(&self, p: &BasePacket) -> bool {
        p.dst != self.cfg.id || p.src.0 >= self.cfg.procs || !p.body.plausible()
    }

    fn on_packet(&mut self, now: Instant, p: BasePacket) {
        if self.ignore_packet(&p) {
            self.stats.dropped_invalid += 1;
            return;
        }
        match p.body {
            Body::Submit {
                msg_id,
                dests,
                payload,
            } => self.on_submit(now, p.src, msg_id, dests, payload),
            Body::Nack {
                seq,
                count,
                index_lo,
                index_hi,
            } => self.on_nack(p.src, seq, u64::from(count), index_lo, index_hi),
            Body::SyncAck { rseq_next } => self.on_sync_ack(p.src, rseq_next),
            _ => self.stats.dropped_invalid += 1,
        }
    }

    /// A receiver has everything below `rseq_next`: if that is all it was sent, stop syncing it.
    fn on_sync_ack(&mut self, dst: ProcId, rseq_next: u64) {
        let d = &mut self.dests[dst.index()];
        if rseq_next > d.rseq_next {
            self.stats.dropped_invalid += 1;
        } else if rseq_next == d.rseq_next && d.syncs_left > 0 {
            d.syncs_left = 0;
            self.syncs_pending -= 1;
        }
    }

    fn on_submit(&mut self, now: Instant, src: ProcId, msg_id: u64, dests: Dests, payload: Bytes) {
        if dests.is_empty(self.cfg.procs) || !dests_in_group(&dests, self.cfg.procs) {
            self.stats.dropped_invalid += 1;
            return;
        }
        let buf = &self.upstream[src.index()];
        if msg_id >= buf.next() && msg_id - buf.next() >= buf.window() {
            // A message this far ahead means the sender's older gap will not close in time:
            // slide the window forward now rather than refuse the sender for ever.
            self.skip_upstream_below(now, src, msg_id - (buf.window() - 1));
        }
        match self.upstream[src.index()].insert(msg_id, (dests, payload)) {
            Ok(()) => {}
            Err(Refused::Duplicate) => self.stats.dropped_duplicate += 1,
            Err(Refused::Window) => unreachable!("the window was slid to fit"),
        }
        self.drain_upstream(now, src);
    }

    /// Stamps `src`'s messages that are next in its FIFO order, and (dis)arms its gap timer.
    fn drain_upstream(&mut self, now: Instant, src: ProcId) {
        while let Some((msg_id, (dests, payload))) = self.upstream[src.index()].pop() {
            self.stamp(now, src, msg_id, dests, payload);
        }
        if self.upstream[src.index()].is_empty() {
            self.upstream_timers.clear(src.0);
        } else if !self.upstream_timers.is_set(src.0) {
            self.upstream_timers
                .set(src.0, now + self.cfg.upstream_gap_timeout_ns);
        }
    }

    /// Gives the message the next global number and sends a copy to each destination (or, for
    /// PLATO, adds its place to each destination's batch).
    fn stamp(&mut self, now: Instant, origin: ProcId, msg_id: u64, dests: Dests, payload: Bytes) {
        let gseq = self.next_gseq;
        self.next_gseq += 1;
        self.stats.stamped += 1;
        for dst in dests.iter(self.cfg.procs) {
            let d = &mut self.dests[dst.index()];
            let rseq = d.rseq_next;
            d.rseq_next += 1;
            d.gseq_last = gseq;
            d.busy = true;
            if d.syncs_left == 0 && self.cfg.sync_repeats > 0 {
                self.syncs_pending += 1;
            }
            d.syncs_left = self.cfg.sync_repeats;
            match self.cfg.order_batch {
                None => self.send_packet(
                    dst,
                    Body::Ordered {
                        gseq,
                        rseq,
                        origin,
                        payload: payload.clone(),
                    },
                ),
                Some(b) => self.add_to_batch(
                    now,
                    b,
                    dst,
                    OrderEntry {
                        gseq,
                        origin,
                        msg_id,
                    },
                ),
            }
        }
        self.history.push(
            gseq,
            Stamped {
                origin,
                msg_id,
                dests,
                payload,
            },
        );
        if self.syncs_pending > 0 && self.sync_at.is_none() {
            self.sync_at = Some(now + self.cfg.sync_interval_ns);
        }
    }

    /// PLATO: one more place for `dst`; a full batch leaves at once, a first one arms the flush.
    fn add_to_batch(&mut self, now: Instant, b: OrderBatchConfig, dst: ProcId, e: OrderEntry) {
        let batch = &mut self.batches[dst.index()];
        batch.push(e);
        if batch.len() >= b.k {
            self.flush_batch(dst);
        } else if batch.len() == 1 {
            self.batch_timers.set(dst.0, now + b.flush_ns);
        }
    }

    /// Sends `dst` its batch of places (§4's sequencing packet).
    fn flush_batch(&mut self, dst: ProcId) {
        self.batch_timers.clear(dst.0);
        let entries = std::mem::take(&mut self.batches[dst.index()]);
        if entries.is_empty() {
            return;
        }
        let d = &mut self.dests[dst.index()];
        d.busy = true;
        let rseq = d.rseq_next - entries.len() as u64;
        self.send_packet(dst, Body::OrderBatch { rseq, entries });
    }

    /// A receiver's NACK: retransmit from history, or mark what fell out of it as lost.
    fn on_nack(&mut self, dst: ProcId, seq: u64, count: u64, lo: u64, hi: u64) {
        let sent = self.dests[dst.index()].rseq_next;
        let consistent = count <= self.cfg.nack_count_max
            && seq.checked_add(count).is_some_and(|end| end <= sent)
            && hi <= self.next_gseq;
        let answer = consistent
            .then(|| answer_nack(&self.history, count, lo, hi, |e| e.dests.contains(dst)))
            .flatten();
        let Some(answer) = answer else {
            self.stats.dropped_invalid += 1;
            return;
        };
        if answer.lost > 0 {
            self.stats.lost_markers_sent += 1;
            self.send_packet(
                dst,
                Body::Lost {
                    seq,
                    count: answer.lost as u32,
                },
            );
        }
        for (i, (gseq, e)) in answer.found.into_iter().enumerate() {
            self.stats.retransmitted += 1;
            let rseq = seq + answer.lost + i as u64;
            let body = match self.cfg.order_batch {
                None => Body::Ordered {
                    gseq,
                    rseq,
                    origin: e.origin,
                    payload: e.payload,
                },
                Some(_) => Body::Resend {
                    gseq,
                    rseq,
                    origin: e.origin,
                    msg_id: e.msg_id,
                    payload: e.payload,
                },
            };
            self.send_packet(dst, body);
        }
    }

    fn on_timeout(&mut self, now: Instant) {
        while let Some(s) = self.upstream_timers.pop_due(now) {
            self.skip_upstream_gap(now, ProcId(s));
        }
        while let Some(d) = self.batch_timers.pop_due(now) {
            self.flush_batch(ProcId(d));
        }
        if self.sync_at.is_some_and(|t| t <= now) {
            self.sync_tick(now);
        }
    }

    /// A sender's gap stayed open too long: give up on the missing messages (they are delivered
    /// by nobody) and tell the sender.
    fn skip_upstream_gap(&mut self, now: Instant, src: ProcId) {
        if let Some(first) = self.upstream[src.index()].first() {
            self.skip_upstream_below(now, src, first);
        }
    }

    /// Gives up on every message of `src` below `target` that has not arrived, stamping those
    /// that have in order, and tells the sender which were skipped.
    fn skip_upstream_below(&mut self, now: Instant, src: ProcId, target: u64) {
        while self.upstream[src.index()].next() < target {
            let buf = &mut self.upstream[src.index()];
            let missing_from = buf.next();
            let until = buf.first().map_or(target, |f| f.min(target));
            let skipped = buf.skip_to(until);
            if skipped > 0 {
                self.stats.lost_markers_sent += 1;
                self.send_packet(
                    src,
                    Body::SubmitLost {
                        msg_id: missing_from,
                        count: u32::try_from(skipped).unwrap_or(u32::MAX),
                    },
                );
            }
            self.drain_upstream(now, src);
        }
    }

    /// Syncs every destination that has gone a whole interval without a message.
    fn sync_tick(&mut self, now: Instant) {
        for i in 0..self.dests.len() {
            let d = self.dests[i];
            // A destination with places still to be batched is not idle: its sync waits.
            if d.syncs_left > 0 && !d.busy && self.batches[i].is_empty() {
                self.dests[i].syncs_left -= 1;
                if self.dests[i].syncs_left == 0 {
                    self.syncs_pending -= 1;
                }
                self.stats.heartbeats_sent += 1;
                self.send_packet(
                    ProcId(i as u32),
                    Body::SeqSync {
                        rseq_next: d.rseq_next,
                        gseq_last: d.gseq_last,
                    },
                );
            }
            self.dests[i].busy = false;
        }
        self.sync_at = (self.syncs_pending > 0).then(|| now + self.cfg.sync_interval_ns);
    }

    fn invariants(&self) {
        debug_assert_eq!(
            self.syncs_pending,
            self.dests.iter().filter(|d| d.syncs_left > 0).count()
        );
        debug_assert!(self.syncs_pending == 0 || self.sync_at.is_some());
        debug_assert!(self.dests.iter().all(|d| d.rseq_next <= self.next_gseq));
    }
}

impl Node for Sequencer {
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
        if cfg!(debug_assertions) {
            self.invariants();
        }
    }

    fn poll_output(&mut self) -> Option<Output<BasePacket, BaseEvent>> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        earliest(
            earliest(self.upstream_timers.next(), self.sync_at),
            self.batch_timers.next(),
        )
    }
}

/// Static configuration of a [`SeqEndpoint`].
#[derive(Clone, Debug)]
pub struct SeqEndpointConfig {
    /// This endpoint's process, in `0..procs`.
    pub id: ProcId,
    /// The group: processes `0..procs`.
    pub procs: u32,
    /// The sequencer's process id.
    pub sequencer: ProcId,
    /// Reorder window: messages more than this far past the next expected one are dropped (and
    /// NACKed later). Default 65,536.
    pub reorder_window: u64,
    /// A gap open this long is NACKed, and again every this long. Default 20 µs.
    pub nack_timeout_ns: u64,
    /// Most outputs waiting to be drained; `send` beyond it is [`BaseSendError::Full`].
    /// Default 65,536.
    pub send_queue_len_max: usize,
    /// Largest payload. Default [`PAYLOAD_LEN_MAX`].
    pub payload_len_max: usize,
}

impl SeqEndpointConfig {
    /// Defaults for endpoint `id` of `procs`, with the sequencer at process id `procs`.
    pub fn new(id: ProcId, procs: u32) -> SeqEndpointConfig {
        SeqEndpointConfig {
            id,
            procs,
            sequencer: ProcId(procs),
            reorder_window: 1 << 16,
            nack_timeout_ns: 20_000,
            send_queue_len_max: 1 << 16,
            payload_len_max: PAYLOAD_LEN_MAX,
        }
    }
}

/// A received message waiting for its turn, or a number given up on.
#[derive(Clone, Debug)]
enum Slot {
    Msg {
        gseq: u64,
        origin: ProcId,
        payload: Bytes,
    },
    Lost,
}

/// A process's endpoint in the fixed-sequencer protocol: submits its sends to the sequencer and
/// delivers what the sequencer forwards, in sequence order. See the module docs.
#[derive(Debug)]
pub struct SeqEndpoint {
    cfg: SeqEndpointConfig,
    next_msg_id: u64,
    /// Keyed by per-receiver sequence number.
    rx: SeqBuffer<Slot>,
    /// Global number of the last message delivered.
    last_gseq: Option<u64>,
    /// From the latest sync: (rseq_next, gseq_last + 1).
    tail: Option<(u64, u64)>,
    /// When the stream's gaps are NACKed.
    gap_timer: GapTimer,
    out: VecDeque<Output<BasePacket, BaseEvent>>,
    stats: BaseStats,
}

impl SeqEndpoint {
    /// An endpoint.
    ///
    /// # Panics
    /// On an inconsistent configuration.
    pub fn new(cfg: SeqEndpointConfig) -> SeqEndpoint {
        assert!(cfg.id.0 < cfg.procs, "endpoint outside the group");
        assert!(
            cfg.sequencer.0 >= cfg.procs,
            "the sequencer is not an endpoint"
        );
        assert!(cfg.nack_timeout_ns > 0 && cfg.send_queue_len_max > 0);
        assert!(cfg.payload_len_max <= PAYLOAD_LEN_MAX);
        assert!(cfg.reorder_window > 0 && cfg.reorder_window <= u64::from(u32::MAX));
        SeqEndpoint {
            rx: SeqBuffer::new(cfg.reorder_window),
            next_msg_id: 0,
            last_gseq: None,
            tail: None,
            gap_timer: GapTimer::default(),
            out: VecDeque::new(),
            stats: BaseStats::default(),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SeqEndpointConfig {
        &self.cfg
    }

    /// Messages delivered or given up on: the next per-receiver sequence number expected.
    pub fn received_through(&self) -> u64 {
        self.rx.next()
    }

    /// True when nothing is buffered past a gap and no gap is known (nothing to repair). A
    /// driver waiting for quiescence checks this.
    pub fn is_idle(&self) -> bool {
        !self.has_gap()
    }

    fn event(&mut self, e: BaseEvent) {
        self.out.push_back(Output::Event(e));
    }

    fn ignore_packet(&self, p: &BasePacket) -> bool {
        p.dst != self.cfg.id || p.src != self.cfg.sequencer || !p.body.plausible()
    }

    fn on_packet(&mut self, now: Instant, p: BasePacket) {
        if self.ignore_packet(&p) {
            self.stats.dropped_invalid += 1;
            return;
        }
        match p.body {
            Body::Ordered {
                gseq,
                rseq,
                origin,
                payload,
            } if origin.0 < self.cfg.procs => {
                let slot = Slot::Msg {
                    gseq,
                    origin,
                    payload,
                };
                match self.rx.insert(rseq, slot) {
                    Ok(()) => {}
                    Err(Refused::Duplicate) => self.stats.dropped_duplicate += 1,
                    Err(Refused::Window) => self.stats.dropped_full += 1,
                }
            }
            Body::Lost { seq, count } => {
                self.rx.fill(seq, u64::from(count), || Slot::Lost);
            }
            Body::SeqSync {
                rseq_next,
                gseq_last,
            } => {
                if self.tail.is_none_or(|(t, _)| rseq_next > t) {
                    self.tail = Some((rseq_next, gseq_last.saturating_add(1)));
                }
                self.deliver_ready();
                if self.rx.next() >= rseq_next {
                    // Everything the sync announces is here: tell the sequencer to stop. (With
                    // a gap, the NACKs repair it and the next sync is acknowledged.)
                    self.stats.packets_sent += 1;
                    self.out.push_back(Output::Send {
                        port: PORT,
                        packet: BasePacket {
                            src: self.cfg.id,
                            dst: self.cfg.sequencer,
                            body: Body::SyncAck {
                                rseq_next: self.rx.next(),
                            },
                        },
                    });
                }
            }
            Body::SubmitLost { msg_id, count } if msg_id < self.next_msg_id => {
                self.stats.send_failed += u64::from(count);
                self.event(BaseEvent::SendFailed {
                    src: self.cfg.id,
                    first_send: msg_id,
                    count: u64::from(count),
                });
            }
            _ => self.stats.dropped_invalid += 1,
        }
        self.deliver_ready();
        self.arm_nack(now);
    }

    fn deliver_ready(&mut self) {
        while let Some((_, slot)) = self.rx.pop() {
            match slot {
                Slot::Msg {
                    gseq,
                    origin,
                    payload,
                } => {
                    if self.last_gseq.is_some_and(|g| g >= gseq) {
                        // The sequencer contradicted itself: never deliver out of order.
                        self.stats.dropped_invalid += 1;
                        continue;
                    }
                    self.last_gseq = Some(gseq);
                    self.stats.delivered += 1;
                    self.event(BaseEvent::Deliver {
                        dst: self.cfg.id,
                        src: origin,
                        seq_or_ts: gseq,
                        payload,
                    });
                }
                Slot::Lost => {
                    self.stats.lost += 1;
                    self.event(BaseEvent::Lost {
                        dst: self.cfg.id,
                        src: None,
                        count: 1,
                    });
                }
            }
        }
        if self.tail.is_some_and(|(t, _)| t <= self.rx.next()) {
            self.tail = None;
        }
    }

    fn has_gap(&self) -> bool {
        !self.rx.is_empty() || self.tail.is_some()
    }

    fn arm_nack(&mut self, now: Instant) {
        let (gap, next) = (self.has_gap(), self.rx.next());
        self.gap_timer.arm(now, gap, next, self.cfg.nack_timeout_ns);
    }

    fn on_timeout(&mut self, now: Instant) {
        if !self.gap_timer.fire(now, self.rx.next()) {
            // Not due, or progress since arming: time the current gap afresh.
            self.arm_nack(now);
            return;
        }
        let nacks = gap_nacks(&self.rx, self.last_gseq, self.tail, |s| match s {
            Slot::Msg { gseq, .. } => Some(*gseq),
            Slot::Lost => None,
        });
        for n in nacks {
            self.stats.nacks_sent += 1;
            self.stats.packets_sent += 1;
            self.out.push_back(Output::Send {
                port: PORT,
                packet: BasePacket {
                    src: self.cfg.id,
                    dst: self.cfg.sequencer,
                    body: Body::Nack {
                        seq: n.seq,
                        count: n.count as u32,
                        index_lo: n.lo,
                        index_hi: n.hi,
                    },
                },
            });
        }
        self.arm_nack(now);
    }
}

impl Node for SeqEndpoint {
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
        debug_assert_eq!(self.has_gap(), self.gap_timer.at().is_some());
    }

    fn poll_output(&mut self) -> Option<Output<BasePacket, BaseEvent>> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.gap_timer.at()
    }
}

impl Endpoint for SeqEndpoint {
    fn id(&self) -> ProcId {
        self.cfg.id
    }

    fn send(&mut self, _now: Instant, payload: Bytes, dests: Dests) -> Result<(), BaseSendError> {
        validate_send(self.cfg.procs, self.cfg.payload_len_max, &payload, &dests)?;
        if self.out.len() >= self.cfg.send_queue_len_max {
            return Err(BaseSendError::Full);
        }
        let msg_id = self.next_msg_id;
        self.next_msg_id += 1;
        self.stats.sends += 1;
        self.stats.packets_sent += 1;
        self.out.push_back(Output::Send {
            port: PORT,
            packet: BasePacket {
                src: self.cfg.id,
                dst: self.cfg.sequencer,
                body: Body::Submit {
                    msg_id,
                    dests,
                    payload,
                },
            },
        });
        Ok(())
    }

    fn stats(&self) -> &BaseStats {
        &self.stats
    }
}
