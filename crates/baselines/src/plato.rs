//! PLATO: optimistic delivery over a fixed sequencer (Balakrishnan, Birman and Phanishayee,
//! "PLATO: Predictive Latency-Aware Total Ordering", §4), and the fixed-sequencer protocol it
//! is measured against with the same sequencing overhead.
//!
//! **The data path (§4).** A sender sends each message straight to its destinations
//! ([`Body::Early`]) and to the sequencer ([`Body::Submit`]). The sequencer numbers what it
//! receives, per-sender FIFO, and tells each destination the order alone, `k` places per
//! sequencing packet ([`Body::OrderBatch`]; [`crate::sequencer::OrderBatchConfig`]). With
//! [`PlatoConfig::opt`] set, a destination runs PLATO's receiver pipeline
//! ([`onepipe_proto::optimistic::Pipeline`], §4.1, with §5's adaptive Δ) and reports its three
//! hooks: [`BaseEvent::OptDeliver`] (`optdeliver`), [`BaseEvent::Revoke`] (`revoke`) and
//! [`BaseEvent::Confirm`] (`confirm`, immediately followed by the [`BaseEvent::Deliver`] that
//! gives the message's place in the total order). Without it, the destination delivers each
//! message when the order reaches it: the fixed sequencer of the paper's Figs. 8–10, which
//! pays the same one sequencing packet per `k` messages.
//!
//! **Loss.** The sequencer's streams are the fixed sequencer's ([`crate::sequencer`]): a gap in
//! the per-receiver numbers is NACKed, answered from the sequencer's history ([`Body::Resend`],
//! which carries the message too) or with a [`Body::Lost`] marker, and an idle stream is
//! synced. A lost direct copy is fetched the same way: when the order reaches a message whose
//! copy has not come within a NACK timeout, the destination NACKs that one place. A direct copy
//! the order never names (the sequencer skipped its submission, or the destination's place for
//! it was lost) is dropped — revoked if it was delivered — once a later message of the same
//! sender is confirmed (the order is per-sender FIFO) or after [`PlatoConfig::orphan_timeout_ns`].
//!
//! **Decisions the paper leaves open** (also in `docs/PLATO.md`): a partial sequencing batch
//! leaves `flush_ns` after its first place; a lost sequencing packet is repaired like any gap in
//! the sequencer's stream; direct copies are not held back for per-sender FIFO (a same-sender
//! reordering is a disorder like any other, caught by Δ or revoked by the order; the confirmed
//! order is per-sender FIFO); Δ's initial value and bounds are [`OptConfig`]'s.
//!
//! What it is not: fault-tolerant (a failed sequencer stops the group, as in the paper).

use crate::common::{
    earliest, gap_nacks, validate_send, BaseEvent, BaseSendError, BaseStats, Endpoint, GapTimer,
    Refused, SeqBuffer, NACKS_PER_ROUND_MAX, NACK_BACKOFF_MAX, PORT,
};
use crate::dests::Dests;
use crate::packet::{BasePacket, Body, OrderEntry, PAYLOAD_LEN_MAX};
use bytes::Bytes;
use onepipe_proto::ids::ProcId;
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::optimistic::{OptConfig, OptEvent, OptStats, Pipeline};
use onepipe_proto::time::Instant;
use std::collections::{BTreeMap, VecDeque};

/// A message: its sender and the sender's send counter.
pub type MsgKey = (ProcId, u64);

/// Static configuration of a [`PlatoEndpoint`].
#[derive(Clone, Debug)]
pub struct PlatoConfig {
    /// This endpoint's process, in `0..procs`.
    pub id: ProcId,
    /// The group: processes `0..procs`.
    pub procs: u32,
    /// The sequencer's process id.
    pub sequencer: ProcId,
    /// PLATO's optimistic delivery; `None`: deliver when the order reaches a message (the
    /// fixed sequencer with batched order). Default: §5's adaptive Δ from 100 µs.
    pub opt: Option<OptConfig>,
    /// Places past the next expected one kept while a gap is repaired. Default 65,536.
    pub reorder_window: u64,
    /// A gap, or a place whose message has not come, is NACKed after this long, and again
    /// every this long. Default 20 µs.
    pub nack_timeout_ns: u64,
    /// Direct copies held before their place in the order is known or reached (more are
    /// dropped and fetched from the sequencer when the order reaches them), and places taken
    /// from the stream whose message is not yet delivered. Default 4,096.
    pub early_len_max: usize,
    /// A direct copy the order has not named after this long is dropped. Default 100 ms.
    pub orphan_timeout_ns: u64,
    /// Most outputs waiting to be drained; `send` beyond it is [`BaseSendError::Full`].
    /// Default 65,536.
    pub send_queue_len_max: usize,
    /// Largest payload. Default [`PAYLOAD_LEN_MAX`].
    pub payload_len_max: usize,
}

impl PlatoConfig {
    /// Defaults for endpoint `id` of `procs`, with the sequencer at process id `procs`.
    pub fn new(id: ProcId, procs: u32) -> PlatoConfig {
        PlatoConfig {
            id,
            procs,
            sequencer: ProcId(procs),
            opt: Some(OptConfig::adaptive(100_000)),
            reorder_window: 1 << 16,
            nack_timeout_ns: 20_000,
            early_len_max: 4_096,
            orphan_timeout_ns: 100_000_000,
            send_queue_len_max: 1 << 16,
            payload_len_max: PAYLOAD_LEN_MAX,
        }
    }
}

/// A place in the order, received and not yet taken.
#[derive(Clone, Debug)]
enum Slot {
    Place {
        gseq: u64,
        key: MsgKey,
        /// Present when the place came in a [`Body::Resend`].
        payload: Option<Bytes>,
    },
    Lost,
}

/// A place taken from the stream, whose message is not yet delivered (or confirmed).
#[derive(Clone, Copy, Debug)]
struct Place {
    rseq: u64,
    gseq: u64,
    key: MsgKey,
    /// When the place was taken, or its message last asked for.
    asked_at: Instant,
    /// How many times its message was asked for: each wait is twice the one before (up to
    /// 64 NACK timeouts), so a sequencer slow to answer is not asked ever faster.
    asks: u32,
}

impl Place {
    /// When its message, if still missing, is next asked for.
    fn ask_due(&self, nack_timeout_ns: u64) -> Instant {
        self.asked_at + (nack_timeout_ns << self.asks.min(NACK_BACKOFF_MAX))
    }
}

/// A message that came straight from its sender (or in a resend).
#[derive(Clone, Debug)]
struct Received {
    payload: Bytes,
    arrived: Instant,
    /// Given to the pipeline (which may have refused it when full).
    in_pipeline: bool,
}

/// A process's endpoint in PLATO (or, without `opt`, the batched fixed sequencer). See the
/// module docs.
#[derive(Debug)]
pub struct PlatoEndpoint {
    cfg: PlatoConfig,
    next_msg_id: u64,
    /// Keyed by per-receiver sequence number.
    rx: SeqBuffer<Slot>,
    /// Places taken from `rx`, in order, whose message is not yet delivered.
    ordered: VecDeque<Place>,
    copies: BTreeMap<MsgKey, Received>,
    /// Per sender: one past the send counter of its last message delivered here.
    done_below: Vec<u64>,
    pipeline: Option<Pipeline<MsgKey>>,
    last_gseq: Option<u64>,
    /// From the latest sync: (rseq_next, gseq_last + 1).
    tail: Option<(u64, u64)>,
    /// The stream's gap timer (a gap in `rx`, or an announced tail).
    /// When the stream's gaps are NACKed.
    gap_timer: GapTimer,
    /// When the earliest place whose message is missing is due to be asked for.
    copy_nack_at: Option<Instant>,
    orphan_at: Option<Instant>,
    /// Copies dropped from the pipeline since its events were last drained.
    dropped_in_queue: Vec<MsgKey>,
    /// Queued deliveries of dropped copies, skipped with the revoke that follows each.
    suppressed: Vec<MsgKey>,
    out: VecDeque<Output<BasePacket, BaseEvent>>,
    stats: BaseStats,
}

impl PlatoEndpoint {
    /// An endpoint.
    ///
    /// # Panics
    /// On an inconsistent configuration.
    pub fn new(cfg: PlatoConfig) -> PlatoEndpoint {
        assert!(cfg.id.0 < cfg.procs, "endpoint outside the group");
        assert!(
            cfg.sequencer.0 >= cfg.procs,
            "the sequencer is not an endpoint"
        );
        assert!(cfg.nack_timeout_ns > 0 && cfg.orphan_timeout_ns > 0);
        assert!(cfg.send_queue_len_max > 0 && cfg.early_len_max > 0);
        assert!(cfg.payload_len_max <= PAYLOAD_LEN_MAX);
        assert!(cfg.reorder_window > 0 && cfg.reorder_window <= u64::from(u32::MAX));
        PlatoEndpoint {
            rx: SeqBuffer::new(cfg.reorder_window),
            next_msg_id: 0,
            ordered: VecDeque::new(),
            copies: BTreeMap::new(),
            done_below: vec![0; cfg.procs as usize],
            pipeline: cfg.opt.clone().map(Pipeline::new),
            last_gseq: None,
            tail: None,
            gap_timer: GapTimer::default(),
            copy_nack_at: None,
            orphan_at: None,
            dropped_in_queue: Vec::new(),
            suppressed: Vec::new(),
            out: VecDeque::new(),
            stats: BaseStats::default(),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PlatoConfig {
        &self.cfg
    }

    /// The pipeline's counters (rollbacks, revokes, Δ's moves), when optimistic.
    pub fn opt_stats(&self) -> Option<&OptStats> {
        self.pipeline.as_ref().map(Pipeline::stats)
    }

    /// Δ now, ns, when optimistic.
    pub fn delta_ns(&self) -> Option<u64> {
        self.pipeline.as_ref().map(Pipeline::delta_ns)
    }

    /// Places taken in or given up on: the next per-receiver sequence number expected.
    pub fn received_through(&self) -> u64 {
        self.rx.next()
    }

    /// True when nothing is buffered, awaited or being repaired. A driver waiting for
    /// quiescence checks this.
    pub fn is_idle(&self) -> bool {
        !self.has_gap() && self.ordered.is_empty() && self.copies.is_empty()
    }

    fn event(&mut self, e: BaseEvent) {
        self.out.push_back(Output::Event(e));
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
        let from_member = p.src.0 < self.cfg.procs;
        let from_sequencer = p.src == self.cfg.sequencer;
        p.dst != self.cfg.id
            || !p.body.plausible()
            || !(from_sequencer || from_member && matches!(p.body, Body::Early { .. }))
    }

    fn on_packet(&mut self, now: Instant, p: BasePacket) {
        if self.ignore_packet(&p) {
            self.stats.dropped_invalid += 1;
            return;
        }
        match p.body {
            Body::Early { msg_id, payload } => self.on_early(now, (p.src, msg_id), payload),
            Body::OrderBatch { rseq, entries } => self.on_order_batch(rseq, entries),
            Body::Resend {
                gseq,
                rseq,
                origin,
                msg_id,
                payload,
            } if origin.0 < self.cfg.procs => {
                self.on_resend(now, rseq, gseq, (origin, msg_id), payload)
            }
            Body::Lost { seq, count } => {
                self.rx.fill(seq, u64::from(count), || Slot::Lost);
            }
            Body::SeqSync {
                rseq_next,
                gseq_last,
            } => self.on_sync(now, rseq_next, gseq_last),
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
        self.advance(now);
    }

    /// A message straight from its sender (§4.1, "when a data packet is received").
    fn on_early(&mut self, now: Instant, key: MsgKey, payload: Bytes) {
        if key.1 < self.done_below[key.0.index()] || self.copies.contains_key(&key) {
            self.stats.dropped_duplicate += 1;
            return;
        }
        if self.copies.len() >= self.cfg.early_len_max {
            // Fetched from the sequencer when the order reaches it.
            self.stats.dropped_full += 1;
            return;
        }
        self.keep_copy(now, key, payload);
    }

    fn keep_copy(&mut self, now: Instant, key: MsgKey, payload: Bytes) {
        self.copies.insert(
            key,
            Received {
                payload,
                arrived: now,
                in_pipeline: false,
            },
        );
        if self.orphan_at.is_none() {
            self.orphan_at = Some(now + self.cfg.orphan_timeout_ns);
        }
        self.offer(now, key);
    }

    /// Hands an arrived message to the pipeline, if optimistic and not done yet.
    fn offer(&mut self, now: Instant, key: MsgKey) {
        let (Some(p), Some(c)) = (self.pipeline.as_mut(), self.copies.get_mut(&key)) else {
            return;
        };
        debug_assert!(c.in_pipeline || !p.arrived(key));
        if !c.in_pipeline && p.arrive(now, key) {
            c.in_pipeline = true;
        }
    }

    fn on_order_batch(&mut self, rseq: u64, entries: Vec<OrderEntry>) {
        for (i, e) in entries.into_iter().enumerate() {
            if e.origin.0 >= self.cfg.procs {
                self.stats.dropped_invalid += 1;
                continue;
            }
            let slot = Slot::Place {
                gseq: e.gseq,
                key: (e.origin, e.msg_id),
                payload: None,
            };
            self.insert_slot(rseq.saturating_add(i as u64), slot);
        }
    }

    fn on_resend(&mut self, now: Instant, rseq: u64, gseq: u64, key: MsgKey, payload: Bytes) {
        if rseq >= self.rx.next() {
            let slot = Slot::Place {
                gseq,
                key,
                payload: Some(payload),
            };
            self.insert_slot(rseq, slot);
        } else if self.ordered.iter().any(|p| p.key == key) && !self.copies.contains_key(&key) {
            // Its place was taken without its message: this is the message.
            self.keep_copy(now, key, payload);
        } else {
            self.stats.dropped_duplicate += 1;
        }
    }

    fn insert_slot(&mut self, rseq: u64, slot: Slot) {
        match self.rx.insert(rseq, slot) {
            Ok(()) => {}
            Err(Refused::Duplicate) => self.stats.dropped_duplicate += 1,
            Err(Refused::Window) => self.stats.dropped_full += 1,
        }
    }

    fn on_sync(&mut self, now: Instant, rseq_next: u64, gseq_last: u64) {
        if self.tail.is_none_or(|(t, _)| rseq_next > t) {
            self.tail = Some((rseq_next, gseq_last.saturating_add(1)));
        }
        self.advance(now);
        if self.rx.next() >= rseq_next {
            let next = self.rx.next();
            self.send_packet(self.cfg.sequencer, Body::SyncAck { rseq_next: next });
        }
    }

    /// Takes places from the stream and delivers (or confirms) what it can, until nothing moves.
    fn advance(&mut self, now: Instant) {
        loop {
            let took = self.take_places(now);
            let delivered = match self.pipeline {
                None => self.deliver_in_order(now),
                Some(_) => self.drain_pipeline(now),
            };
            if !took && !delivered {
                break;
            }
        }
        if self.tail.is_some_and(|(t, _)| t <= self.rx.next()) {
            self.tail = None;
        }
        self.arm_nack(now);
    }

    /// Moves the next places from `rx` to `ordered` (and into the pipeline's sequencing queue).
    fn take_places(&mut self, now: Instant) -> bool {
        let mut took = false;
        while self.ordered.len() < self.cfg.early_len_max
            && self
                .pipeline
                .as_ref()
                .is_none_or(|p| p.sequenced_len() < p.config().len_max)
        {
            let Some((rseq, slot)) = self.rx.pop() else {
                break;
            };
            took = true;
            let Slot::Place { gseq, key, payload } = slot else {
                self.stats.lost += 1;
                self.event(BaseEvent::Lost {
                    dst: self.cfg.id,
                    src: None,
                    count: 1,
                });
                continue;
            };
            if self.last_gseq.is_some_and(|g| g >= gseq) || key.1 < self.done_below[key.0.index()] {
                // The sequencer contradicted itself: never deliver out of order.
                self.stats.dropped_invalid += 1;
                continue;
            }
            self.last_gseq = Some(gseq);
            self.ordered.push_back(Place {
                rseq,
                gseq,
                key,
                asked_at: now,
                asks: 0,
            });
            if let Some(p) = self.pipeline.as_mut() {
                let taken = p.sequence(now, key);
                debug_assert!(taken, "room was checked");
            }
            match payload {
                Some(pl) if !self.copies.contains_key(&key) => self.keep_copy(now, key, pl),
                _ => self.offer(now, key),
            }
        }
        took
    }

    /// Fixed sequencer: delivers the ordered messages whose copy is here.
    fn deliver_in_order(&mut self, now: Instant) -> bool {
        let mut any = false;
        while let Some(place) = self.ordered.front().copied() {
            let Some(c) = self.copies.remove(&place.key) else {
                break;
            };
            self.ordered.pop_front();
            self.deliver(place, c.payload);
            self.drop_passed(now, place.key);
            any = true;
        }
        any
    }

    /// PLATO: reports the pipeline's hooks; a confirm is the delivery in the total order.
    fn drain_pipeline(&mut self, now: Instant) -> bool {
        let mut any = false;
        // Copies passed by a confirm are dropped once the events already queued are out (a
        // queued delivery of one of them still needs its payload).
        let mut passed = Vec::new();
        while let Some(e) = self.pipeline.as_mut().and_then(Pipeline::poll) {
            any = true;
            let dst = self.cfg.id;
            match e {
                OptEvent::Deliver { key, usable_at } => {
                    let Some(c) = self.copies.get(&key) else {
                        debug_assert!(self.dropped_in_queue.contains(&key));
                        self.suppressed.push(key);
                        continue;
                    };
                    let payload = c.payload.clone();
                    self.event(BaseEvent::OptDeliver {
                        dst,
                        src: key.0,
                        msg_id: key.1,
                        usable_at,
                        payload,
                    });
                }
                OptEvent::Revoke { key, rollback } => {
                    if let Some(i) = self.suppressed.iter().position(|k| *k == key) {
                        self.suppressed.swap_remove(i);
                        continue;
                    }
                    self.event(BaseEvent::Revoke {
                        dst,
                        src: key.0,
                        msg_id: key.1,
                        rollback,
                    })
                }
                OptEvent::Confirm { key } => {
                    let place = self.ordered.pop_front().expect("confirmed in order");
                    assert_eq!(place.key, key, "the pipeline confirms in the order given");
                    let c = self
                        .copies
                        .remove(&key)
                        .expect("a confirmed message is here");
                    self.event(BaseEvent::Confirm {
                        dst,
                        src: key.0,
                        msg_id: key.1,
                    });
                    self.deliver(place, c.payload);
                    passed.push(key);
                }
            }
        }
        debug_assert!(
            self.suppressed.is_empty(),
            "every suppressed delivery is revoked"
        );
        self.dropped_in_queue.clear();
        for key in passed {
            self.drop_passed(now, key);
        }
        // The next place's message may have been refused by a full pipeline: offer it again
        // (the next in order is always taken).
        if let Some(key) = self.ordered.front().map(|p| p.key) {
            let before = self.pipeline.as_ref().map(|p| p.stats().arrived);
            self.offer(now, key);
            any |= before != self.pipeline.as_ref().map(|p| p.stats().arrived);
        }
        any
    }

    fn deliver(&mut self, place: Place, payload: Bytes) {
        let (src, msg_id) = place.key;
        self.done_below[src.index()] = msg_id + 1;
        self.stats.delivered += 1;
        self.event(BaseEvent::Deliver {
            dst: self.cfg.id,
            src,
            seq_or_ts: place.gseq,
            payload,
        });
    }

    /// Copies of `key`'s sender below it will never be ordered here (the order is per-sender
    /// FIFO): drop them, revoking any delivered.
    fn drop_passed(&mut self, now: Instant, key: MsgKey) {
        let stale: Vec<MsgKey> = self
            .copies
            .range((key.0, 0)..key)
            .map(|(k, _)| *k)
            .collect();
        for k in stale {
            self.drop_copy(now, k);
        }
    }

    fn drop_copy(&mut self, now: Instant, key: MsgKey) {
        if let Some(c) = self.copies.remove(&key) {
            if let Some(p) = self.pipeline.as_mut() {
                let removed = c.in_pipeline && p.remove(now, key);
                debug_assert_eq!(removed, c.in_pipeline);
                if removed {
                    // A delivery of it may already be queued (released when an earlier copy
                    // was dropped): its revoke follows, and neither reaches the application.
                    self.dropped_in_queue.push(key);
                }
            }
        }
    }

    /// True while the stream needs repair: a gap in it, or an announced tail not yet here.
    fn has_gap(&self) -> bool {
        !self.rx.is_empty() || self.tail.is_some()
    }

    /// When the first place whose message is missing is due to be asked for.
    fn copy_due(&self) -> Option<Instant> {
        self.ordered
            .iter()
            .filter(|p| !self.copies.contains_key(&p.key))
            .map(|p| p.ask_due(self.cfg.nack_timeout_ns))
            .min()
    }

    fn arm_nack(&mut self, now: Instant) {
        let (gap, next) = (self.has_gap(), self.rx.next());
        self.gap_timer.arm(now, gap, next, self.cfg.nack_timeout_ns);
        self.copy_nack_at = self.copy_due();
    }

    fn on_timeout(&mut self, now: Instant) {
        if self.orphan_at.is_some_and(|t| t <= now) {
            self.drop_orphans(now);
        }
        if self.gap_timer.fire(now, self.rx.next()) {
            self.send_gap_nacks();
        }
        if self.copy_nack_at.is_some_and(|t| t <= now) {
            self.ask_for_copies(now);
        }
        self.advance(now);
    }

    /// NACKs the places whose message has not come for a NACK timeout (a lost direct copy):
    /// the sequencer answers with a [`Body::Resend`]. At most [`NACKS_PER_ROUND_MAX`] a round,
    /// and each place's waits double (a loaded sequencer's answers come late; asking again at
    /// a fixed pace turned that into a storm that kept it saturated: `vopr --plato` seed 356).
    fn ask_for_copies(&mut self, now: Instant) {
        let timeout = self.cfg.nack_timeout_ns;
        let mut asked = Vec::new();
        for p in self.ordered.iter_mut() {
            if asked.len() >= NACKS_PER_ROUND_MAX {
                break;
            }
            if p.ask_due(timeout) <= now && !self.copies.contains_key(&p.key) {
                p.asked_at = now;
                p.asks += 1;
                asked.push((p.rseq, p.gseq));
            }
        }
        for (rseq, gseq) in asked {
            self.stats.nacks_sent += 1;
            let body = Body::Nack {
                seq: rseq,
                count: 1,
                index_lo: gseq,
                index_hi: gseq + 1,
            };
            self.send_packet(self.cfg.sequencer, body);
        }
    }

    fn send_gap_nacks(&mut self) {
        let below = self.ordered.back().map(|p| p.gseq).or(self.last_gseq);
        let nacks = gap_nacks(&self.rx, below, self.tail, |s| match s {
            Slot::Place { gseq, .. } => Some(*gseq),
            Slot::Lost => None,
        });
        for n in nacks {
            self.stats.nacks_sent += 1;
            let body = Body::Nack {
                seq: n.seq,
                count: n.count as u32,
                index_lo: n.lo,
                index_hi: n.hi,
            };
            self.send_packet(self.cfg.sequencer, body);
        }
    }

    /// Drops direct copies the order has not named for `orphan_timeout_ns`.
    fn drop_orphans(&mut self, now: Instant) {
        let timeout = self.cfg.orphan_timeout_ns;
        let placed: std::collections::BTreeSet<MsgKey> =
            self.ordered.iter().map(|p| p.key).collect();
        let orphans: Vec<MsgKey> = self
            .copies
            .iter()
            .filter(|(k, c)| c.arrived + timeout <= now && !placed.contains(k))
            .map(|(k, _)| *k)
            .collect();
        for k in orphans {
            self.drop_copy(now, k);
        }
        // Placed copies are no orphans, however long they wait for the ones before them: the
        // next sweep is due for the oldest copy the order has not named.
        self.orphan_at = self
            .copies
            .iter()
            .filter(|(k, _)| !placed.contains(k))
            .map(|(_, c)| c.arrived + timeout)
            .min();
    }
}

impl Node for PlatoEndpoint {
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
        debug_assert!(self.copies.len() <= self.cfg.early_len_max + self.ordered.len());
    }

    fn poll_output(&mut self) -> Option<Output<BasePacket, BaseEvent>> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        earliest(
            earliest(self.gap_timer.at(), self.orphan_at),
            self.copy_nack_at,
        )
    }
}

impl Endpoint for PlatoEndpoint {
    fn id(&self) -> ProcId {
        self.cfg.id
    }

    /// Sends the message to the sequencer and straight to every destination (§4).
    /// The sender's own copy, when it is a destination, arrives at once, without a packet.
    fn send(&mut self, now: Instant, payload: Bytes, dests: Dests) -> Result<(), BaseSendError> {
        validate_send(self.cfg.procs, self.cfg.payload_len_max, &payload, &dests)?;
        if self.out.len() >= self.cfg.send_queue_len_max {
            return Err(BaseSendError::Full);
        }
        let msg_id = self.next_msg_id;
        self.next_msg_id += 1;
        self.stats.sends += 1;
        let me = self.cfg.id;
        for dst in dests.iter(self.cfg.procs).filter(|d| *d != me) {
            let body = Body::Early {
                msg_id,
                payload: payload.clone(),
            };
            self.send_packet(dst, body);
        }
        if dests.contains(me) {
            self.on_early(now, (me, msg_id), payload.clone());
            self.advance(now);
        }
        let submit = Body::Submit {
            msg_id,
            dests,
            payload,
        };
        self.send_packet(self.cfg.sequencer, submit);
        Ok(())
    }

    fn stats(&self) -> &BaseStats {
        &self.stats
    }
}
