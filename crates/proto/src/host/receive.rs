//! The host's receive path (§4.1, §5.1, §2.1): arrivals from the downlink, the barriers they
//! carry, buffering and delivery below the barrier (best effort) or the commit barrier
//! (reliable), late drops and refusals with their NAKs, and end-to-end acknowledgements both
//! ways.
//!
//! Its state is each local process's receive windows and reorder buffers ([`LocalProc`]), the
//! partially reassembled messages, the barriers and what has been released below them, the
//! delayed ACKs owed and the senders' trackers the arriving ACKs and NAKs resolve.

use super::optimistic::OptState;
use super::*;

/// One message waiting in a reorder buffer.
#[derive(Debug)]
pub(super) struct Buffered {
    pub(super) payload: Bytes,
    pub(super) arrived: Instant,
}

/// Per local process state.
#[derive(Debug)]
pub(super) struct LocalProc {
    pub(super) id: ProcId,
    /// Next PSN per destination, indexed by destination process id.
    pub(super) next_psn: PeerVec<Psn>,
    /// What arrived from each sender, indexed by sender process id.
    pub(super) recv: PeerVec<RecvWindow>,
    pub(super) reorder: ReorderBuffer<Buffered>,
    /// The reliable counterparts, allocated when the first reliable packet arrives.
    pub(super) rel: Option<Box<ReliableRecv>>,
    /// The application stopped reading reliable messages (a test hook: they stay buffered).
    pub(super) paused: bool,
    /// Best-effort messages the application has room for ([`Host::set_room`]); `usize::MAX`
    /// unbounded.
    pub(super) room: usize,
    /// Plain messages the application has room for ([`Host::set_plain_room`]); `usize::MAX`
    /// unbounded.
    pub(super) plain_room: usize,
    /// Optimistic best-effort delivery (`HostConfig::optimistic`); the reliable one is in
    /// `rel`.
    pub(super) opt: Option<Box<OptState>>,
}

impl LocalProc {
    /// Local process `id`, with nothing received yet.
    ///
    /// # Panics
    /// `id` is outside `cfg.senders_max`.
    pub(super) fn new(id: ProcId, cfg: &HostConfig) -> LocalProc {
        assert!(id.0 < cfg.senders_max, "process {id} outside senders_max");
        let (recv, reorder) = receive_state(cfg);
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
            plain_room: usize::MAX,
            opt: cfg.optimistic.as_ref().map(|o| OptState::new(o, false)),
        }
    }
}

/// Index of the best-effort service in [`DeliverBurst::left`].
const BEST_EFFORT: usize = 0;
/// Index of the reliable service in [`DeliverBurst::left`].
const RELIABLE: usize = 1;

/// `HostConfig::deliver_burst_max`'s budget for one instant ([`Host::burst_left`]).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct DeliverBurst {
    /// The instant the budget is for.
    pub(super) at: Option<Instant>,
    /// Deliveries left then, best effort and reliable.
    pub(super) left: [u32; 2],
}

/// Receive state of one local process for the reliable service.
#[derive(Debug)]
pub(super) struct ReliableRecv {
    pub(super) recv: PeerVec<RecvWindow>,
    pub(super) reorder: ReorderBuffer<Buffered>,
    /// Optimistic reliable delivery (`HostConfig::optimistic`).
    pub(super) opt: Option<Box<OptState>>,
}

impl ReliableRecv {
    /// The reliable receive state of a local process, made when its first reliable packet
    /// arrives.
    pub(super) fn new(cfg: &HostConfig) -> Box<ReliableRecv> {
        let (recv, reorder) = receive_state(cfg);
        let opt = cfg.optimistic.as_ref().map(|o| OptState::new(o, true));
        Box::new(ReliableRecv { recv, reorder, opt })
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

impl Host {
    pub(super) fn on_packet(&mut self, now: Instant, packet: Packet) {
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
                if barrier.is_some() || commit.is_some() {
                    self.uplink_gaps.heard(now);
                }
                self.on_data(now, d);
                if let Some(b) = barrier {
                    self.raise_barrier(b);
                }
                if let Some(c) = commit {
                    self.raise_commit(c);
                }
            }
            Packet::Beacon(b) => {
                self.uplink_gaps.heard(now);
                self.raise_barrier(b.barrier);
                self.raise_commit(b.commit);
                if b.demand {
                    self.demand_until = now + self.cfg.beacon_fast_hold_ns;
                }
            }
            Packet::Nak(n) => self.on_nak(n),
            Packet::Ack(a) => self.on_ack(now, a),
            Packet::AckBatch(b) => self.on_ack_batch(now, b),
        }
        self.deliver_ready(now);
    }

    /// §4.1: buffer an arriving fragment, or drop and NAK it if it is below the barrier.
    pub(super) fn on_data(&mut self, now: Instant, d: DataPacket) {
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
        if h.plain() {
            self.on_plain_data(now, dst_idx, remote, d, first_psn);
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
            self.stats.late(h.src);
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
        let payload = self.procs[dst_idx]
            .opt
            .is_some()
            .then(|| item.payload.clone());
        match self.procs[dst_idx].reorder.insert(key, item) {
            Ok(()) => {
                let lp = &mut self.procs[dst_idx];
                if let (Some(o), Some(p)) = (lp.opt.as_mut(), payload) {
                    o.on_arrival(now, lp.id, key, p, &mut self.outputs);
                }
            }
            Err(InsertError::Full) => {
                self.stats.dropped_full += 1;
                self.nak(h.dst, h.src, first_psn, h.ts, NakReason::BufferFull);
            }
            Err(InsertError::Duplicate | InsertError::UnknownSender) => {
                self.stats.dropped_invalid += 1;
            }
        }
    }

    /// §2.2.2 plain messages: a best-effort fragment in every way — duplicates dropped and
    /// acknowledged again, refused with a `BufferFull` NAK before it is acknowledged when the
    /// application has no room ([`Host::set_plain_room`]), recorded and acknowledged otherwise,
    /// reassembled with the others — except that no barrier holds it and none makes it late:
    /// once whole it is delivered ([`HostEvent::DeliverPlain`]), whatever the barrier is.
    fn on_plain_data(
        &mut self,
        now: Instant,
        dst_idx: usize,
        remote: bool,
        d: DataPacket,
        first_psn: Psn,
    ) {
        let h = d.header;
        debug_assert!(h.plain() && !h.reliable(), "the decoder refuses both");
        if remote && self.procs[dst_idx].recv[h.src.index()].contains(h.psn) {
            self.stats.dropped_duplicate += 1;
            self.schedule_ack(now, h.src, dst_idx, false);
            return;
        }
        if self.procs[dst_idx].plain_room == 0 {
            self.refuse_plain(h, first_psn);
            return;
        }
        if remote {
            self.record_best_effort(now, dst_idx, h.src, h.dst, h.psn);
        }
        let Some((key, item)) = self.whole_message(now, h, first_psn, d.payload) else {
            return;
        };
        // The room may have gone to other messages while this one's fragments came: the NAK
        // is authoritative at the sender, as for a full reorder buffer.
        if self.procs[dst_idx].plain_room == 0 {
            self.refuse_plain(h, first_psn);
            return;
        }
        let barrier = self.be_released.unwrap_or(Timestamp::new(0));
        let now_ts = self.timestamp(now);
        let lp = &mut self.procs[dst_idx];
        if lp.plain_room != usize::MAX {
            lp.plain_room -= 1;
        }
        self.stats.delivered_plain += 1;
        let d = best_effort_delivery(lp.id, key, item, barrier, now_ts);
        self.outputs
            .push_back(Output::Event(HostEvent::DeliverPlain(d)));
    }

    /// A plain message the application has no room for: dropped, and its sender told
    /// (§4.1's full receive buffer).
    fn refuse_plain(&mut self, h: DataHeader, first_psn: Psn) {
        self.stats.dropped_full += 1;
        self.partials.remove(&(h.src, h.dst, first_psn, false));
        self.nak(h.dst, h.src, first_psn, h.ts, NakReason::BufferFull);
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
        let lp = &mut self.procs[dst_idx];
        let rel = lp.rel.as_mut().expect("created above");
        let payload = rel.opt.is_some().then(|| item.payload.clone());
        match rel.reorder.insert(key, item) {
            Ok(()) => {
                if let (Some(o), Some(p)) = (rel.opt.as_mut(), payload) {
                    o.on_arrival(now, lp.id, key, p, &mut self.outputs);
                }
            }
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
    pub(super) fn timestamp_past(&mut self, now: Instant, barrier: Timestamp) -> Timestamp {
        let ts = self.timestamp(now);
        if ts < barrier {
            self.clock_ts = barrier;
        }
        self.clock_ts
    }

    /// Delivers, per local process, everything strictly below the barrier (§4.1), and gives up on
    /// partial messages the barrier has passed.
    pub(super) fn deliver_ready(&mut self, now: Instant) {
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
            let mut budget = self.burst_left(now, RELIABLE);
            self.deliver_backlog = false;
            for lp in &mut self.procs {
                let Some(rel) = lp.rel.as_mut().filter(|_| !lp.paused) else {
                    continue;
                };
                let first = self.outputs.len();
                let mut last: Option<Timestamp> = None;
                loop {
                    let cut = budget == 0 && rel.reorder.peek().is_none_or(|k| Some(k.ts) != last);
                    if cut {
                        // More below the barrier: at the next input (§4.2: the host's beacons
                        // must not wait behind a burst). What this process got was released
                        // only up to the first message it did not get.
                        if let Some(next) = rel.reorder.peek().filter(|k| k.ts < commit) {
                            self.deliver_backlog = true;
                            for o in self.outputs.range_mut(first..) {
                                if let Output::Event(HostEvent::Deliver(d)) = o {
                                    d.barrier = next.ts;
                                }
                            }
                        }
                        break;
                    }
                    let Some((key, item)) = rel.reorder.pop_below(commit) else {
                        break;
                    };
                    debug_assert!(key.ts < commit, "§5.1: delivered at or above the commit");
                    budget = budget.saturating_sub(1);
                    last = Some(key.ts);
                    self.stats.delivered_reliable += 1;
                    self.stats.held(item.arrived, now);
                    let d = Delivery {
                        dst: lp.id,
                        src: key.src,
                        ts: key.ts,
                        psn: key.psn,
                        payload: item.payload,
                        barrier: commit,
                        reliable: true,
                        arrived: item.arrived,
                        now_ts,
                    };
                    if let Some(o) = rel.opt.as_mut() {
                        o.on_delivery(now, lp.id, &d, &mut self.outputs);
                    }
                    self.outputs.push_back(Output::Event(HostEvent::Deliver(d)));
                }
            }
            self.burst.left[RELIABLE] = budget;
            if !self.deliver_backlog {
                self.commit_released = Some(commit);
            }
        }
    }

    /// What `HostConfig::deliver_burst_max` still allows service `service` to deliver at
    /// `now`. The budget is per instant, not per call: an application that sends while it
    /// handles one input's deliveries calls [`Host::send`] at that input's time, and each send
    /// looks for deliveries again — with a fresh budget each, a hot server delivered 6,977
    /// messages in one simulated input (35 µs of CPU, past its link timeout: Fig. 14 c at 512
    /// processes had 89 hosts declared failed).
    fn burst_left(&mut self, now: Instant, service: usize) -> u32 {
        if self.burst.at != Some(now) {
            let max = match self.cfg.deliver_burst_max {
                0 => u32::MAX,
                n => n,
            };
            self.burst = DeliverBurst {
                at: Some(now),
                left: [max; 2],
            };
        }
        self.burst.left[service]
    }

    /// §4.1: per local process, everything strictly below the best-effort barrier.
    fn deliver_best_effort(&mut self, now: Instant) {
        let Some(barrier) = self.barrier else {
            return;
        };
        let now_ts = self.timestamp_past(now, barrier);
        let mut held = false;
        // As for reliable messages (`deliver_burst_max`): a barrier that releases thousands at
        // once (a hot server's requests) must not keep the host past its link timeout, or its
        // ToR takes it for dead (§4.2) — the rest go at the next input.
        let mut budget = self.burst_left(now, BEST_EFFORT);
        for lp in &mut self.procs {
            let first = self.outputs.len();
            let mut last: Option<Timestamp> = None;
            loop {
                // A burst is cut only between two timestamps, so the first message held back is
                // above everything delivered (a barrier is strict).
                let cut = budget == 0 && lp.reorder.peek().is_none_or(|k| Some(k.ts) != last);
                if lp.room == 0 || cut {
                    // Held for the next input: what this process got now was released only up
                    // to the first message it did not get, and its deliveries say so.
                    if let Some(next) = lp.reorder.peek().filter(|k| k.ts < barrier) {
                        held = true;
                        // (Out of room within one timestamp, the barrier cannot say it.)
                        let above = Some(next.ts) != last;
                        for o in self.outputs.range_mut(first..).filter(|_| above) {
                            if let Output::Event(HostEvent::Deliver(d)) = o {
                                d.barrier = next.ts;
                            }
                        }
                    }
                    break;
                }
                let Some((key, item)) = lp.reorder.pop_below(barrier) else {
                    break;
                };
                debug_assert!(key.ts < barrier, "§4.1: delivered at or above the barrier");
                budget = budget.saturating_sub(1);
                last = Some(key.ts);
                if lp.room != usize::MAX {
                    lp.room -= 1;
                }
                self.stats.delivered += 1;
                self.stats.held(item.arrived, now);
                let d = best_effort_delivery(lp.id, key, item, barrier, now_ts);
                if let Some(o) = lp.opt.as_mut() {
                    o.on_delivery(now, lp.id, &d, &mut self.outputs);
                }
                self.outputs.push_back(Output::Event(HostEvent::Deliver(d)));
            }
        }
        self.burst.left[BEST_EFFORT] = budget;
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
    pub(super) fn window(
        &mut self,
        src: ProcId,
        dst_idx: usize,
        reliable: bool,
    ) -> &mut RecvWindow {
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
    pub(super) fn schedule_ack(
        &mut self,
        now: Instant,
        src: ProcId,
        dst_idx: usize,
        reliable: bool,
    ) {
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
        if unacked >= ack_every || owed >= self.cfg.ack_batch_len_max {
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
    /// `ack_batch_len_max` entries. An owed ACK whose window was acknowledged since (through
    /// the §5.2 relay) is skipped.
    pub(super) fn send_acks_to(&mut self, peer: usize) {
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
            if acks.len() == self.cfg.ack_batch_len_max {
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
        debug_assert!((1..=self.cfg.ack_batch_len_max).contains(&acks.len()));
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
    pub(super) fn make_ack(&mut self, src: ProcId, dst_idx: usize, reliable: bool) -> Ack {
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

    pub(super) fn on_ack(&mut self, now: Instant, a: Ack) {
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
    pub(super) fn report_send_failed(
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
}

/// The delivery to local process `dst` of the best-effort (or plain) message `key`, with the
/// barrier released and the host's timestamp at the time.
fn best_effort_delivery(
    dst: ProcId,
    key: OrderKey,
    item: Buffered,
    barrier: Timestamp,
    now_ts: Timestamp,
) -> Delivery {
    Delivery {
        dst,
        src: key.src,
        ts: key.ts,
        psn: key.psn,
        payload: item.payload,
        barrier,
        reliable: false,
        arrived: item.arrived,
        now_ts,
    }
}
