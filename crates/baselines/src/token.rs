//! Token-ring total order (\[86\], Rajagopalan and McKinley): the [`TokenEndpoint`].
//!
//! A token circulates among all processes of the group in ring order (`p → p + 1 mod procs`).
//! Only the holder sends: it stamps up to `batch_max` queued messages with consecutive global
//! sequence numbers taken from the token, then passes the token on ([`Body::TokenPass`]).
//! Receivers deliver in global sequence order. Throughput is bounded by one sender at a time
//! (§7.2: "Token has low throughput because only one process may send at any time").
//!
//! **Every member sees every number.** A holder sends each message to its destinations and a
//! header-only *filler* ([`Body::TokenData`] with `addressed = false`) to everyone else, so a
//! gap in the global sequence at any member is a loss, whatever the destination sets. (This is
//! what ring multicast protocols do: members receive everything and filter.)
//!
//! **Token loss.** A token transfer is acknowledged ([`Body::TokenAck`]) and retransmitted every
//! `token_rto_ns` until it is. Each transfer carries a pass counter one above the previous, and a
//! member accepts a token only with a pass above any it has seen, so a retransmitted token is
//! recognised as a duplicate and there is never more than one. This assumes members do not fail:
//! a crashed member stops the ring (no regeneration or membership change is modelled).
//!
//! **Data loss.** The receiver NACKs the original sender, who keeps its last `history_len_max`
//! messages. Finding the sender of a number never seen works through holdings: each message
//! carries the start of its holding and the previous non-empty holding (holder and start), and the
//! token carries the last non-empty holding. Since holdings number their messages consecutively,
//! the number just below any received message (or below the token's next number) belongs either
//! to that message's holding or to the previous one — so every gap has an attributable end, and
//! each retransmission reveals the holding before it. What fell out of a holder's history comes
//! back as [`Body::TokenLost`] and is reported as [`BaseEvent::Lost`]; a gap nobody can
//! attribute any more (older than every history) is given up on the same way.
//!
//! The token never stops circulating, even when nobody sends (`idle_hold_ns` slows it down): a
//! driver waiting for quiescence must not wait for [`crate::packet::PacketClass::Token`] packets.

use crate::common::{
    earliest, validate_send, BaseEvent, BaseSendError, BaseStats, Endpoint, History, Refused,
    SeqBuffer, NACKS_PER_ROUND_MAX, PORT,
};
use crate::dests::Dests;
use crate::packet::{BasePacket, Body, Holding, PAYLOAD_LEN_MAX};
use bytes::Bytes;
use onepipe_proto::ids::ProcId;
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::Instant;
use std::collections::VecDeque;

/// Static configuration of a [`TokenEndpoint`].
#[derive(Clone, Debug)]
pub struct TokenConfig {
    /// This endpoint's process, in `0..procs`; process 0 starts with the token.
    pub id: ProcId,
    /// The ring: processes `0..procs` in id order.
    pub procs: u32,
    /// Most messages a holder stamps per holding. Default 16.
    pub batch_max: usize,
    /// Most messages queued waiting for the token; more is [`BaseSendError::Full`].
    /// Default 65,536.
    pub send_queue_len_max: usize,
    /// A holder with nothing to send keeps the token this long before passing it, to keep an
    /// idle ring from spinning. Default 0 (pass at once, lowest latency).
    pub idle_hold_ns: u64,
    /// An unacknowledged token transfer is retransmitted after this long. Default 50 µs.
    pub token_rto_ns: u64,
    /// Own messages kept for retransmission (and as many holdings' metadata). Default 65,536.
    pub history_len_max: usize,
    /// Reorder window over global sequence numbers. Default 65,536.
    pub reorder_window: u64,
    /// A gap open this long is NACKed, and again every this long. Default 20 µs.
    pub nack_timeout_ns: u64,
    /// Largest payload. Default [`PAYLOAD_LEN_MAX`].
    pub payload_len_max: usize,
}

impl TokenConfig {
    /// Defaults for endpoint `id` of a ring of `procs`.
    pub fn new(id: ProcId, procs: u32) -> TokenConfig {
        TokenConfig {
            id,
            procs,
            batch_max: 16,
            send_queue_len_max: 1 << 16,
            idle_hold_ns: 0,
            token_rto_ns: 50_000,
            history_len_max: 1 << 16,
            reorder_window: 1 << 16,
            nack_timeout_ns: 20_000,
            payload_len_max: PAYLOAD_LEN_MAX,
        }
    }
}

/// The token's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Token {
    seq: u64,
    pass: u64,
    last: Option<Holding>,
}

/// Who sent a global sequence number: its holder, its holding's start and the holding before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Attr {
    holder: ProcId,
    start: u64,
    prev: Option<Holding>,
}

#[derive(Clone, Debug)]
enum Slot {
    /// A message (`Some` payload) or a filler (`None`).
    Msg { attr: Attr, payload: Option<Bytes> },
    /// Given up on; `attr` if the holder said which holding it belonged to.
    Lost { attr: Option<Attr> },
}

impl Slot {
    fn attr(&self) -> Option<Attr> {
        match self {
            Slot::Msg { attr, .. } => Some(*attr),
            Slot::Lost { attr } => *attr,
        }
    }
}

/// An own message kept for retransmission.
#[derive(Clone, Debug)]
struct Sent {
    dests: Dests,
    payload: Bytes,
}

/// An own holding: where it ended and the holding before it.
#[derive(Clone, Copy, Debug)]
struct HoldingMeta {
    end: u64,
    prev: Option<Holding>,
}

/// What a receiver does about one gap.
#[derive(Clone, Copy, Debug)]
enum GapAction {
    Nack { to: ProcId, from: u64, end: u64 },
    GiveUp { from: u64, end: u64 },
}

/// A process's endpoint in the token protocol. See the module docs.
#[derive(Debug)]
pub struct TokenEndpoint {
    cfg: TokenConfig,
    pending: VecDeque<(Dests, Bytes)>,
    token: Option<Token>,
    hold_until: Option<Instant>,
    /// Highest transfer number accepted.
    last_pass_seen: u64,
    /// The token as last passed, until acknowledged, and when to retransmit it.
    unacked: Option<(Token, Instant)>,
    history: History<Sent>,
    holdings: History<HoldingMeta>,
    /// Every own holding that ended at or below this has been forgotten.
    forgotten_below: u64,
    /// Keyed by global sequence number.
    rx: SeqBuffer<Slot>,
    /// From the last token seen: its next number and the last non-empty holding.
    tail: Option<(u64, Holding)>,
    nack_at: Option<Instant>,
    /// The next expected number when the NACK timer was armed: a gap is NACKed only if nothing
    /// was released for a whole timeout, so a gap that closed and a younger one that opened
    /// since are not NACKed early.
    nack_armed_next: u64,
    /// Packets to itself, handled before the mutation returns.
    loopback: VecDeque<BasePacket>,
    out: VecDeque<Output<BasePacket, BaseEvent>>,
    stats: BaseStats,
}

impl TokenEndpoint {
    /// An endpoint. Process 0 starts with the token and passes it at its first timeout.
    ///
    /// # Panics
    /// On an inconsistent configuration.
    pub fn new(cfg: TokenConfig) -> TokenEndpoint {
        assert!(cfg.id.0 < cfg.procs, "endpoint outside the ring");
        assert!(cfg.batch_max > 0 && cfg.send_queue_len_max > 0);
        assert!(cfg.token_rto_ns > 0 && cfg.nack_timeout_ns > 0);
        assert!(cfg.history_len_max > 0 && cfg.payload_len_max <= PAYLOAD_LEN_MAX);
        assert!(cfg.reorder_window > 0 && cfg.reorder_window <= u64::from(u32::MAX));
        let first = cfg.id.0 == 0;
        TokenEndpoint {
            pending: VecDeque::new(),
            token: first.then_some(Token {
                seq: 0,
                pass: 0,
                last: None,
            }),
            hold_until: first.then_some(Instant::ZERO),
            last_pass_seen: 0,
            unacked: None,
            history: History::new(cfg.history_len_max),
            holdings: History::new(cfg.history_len_max),
            forgotten_below: 0,
            rx: SeqBuffer::new(cfg.reorder_window),
            tail: None,
            nack_at: None,
            nack_armed_next: 0,
            loopback: VecDeque::new(),
            out: VecDeque::new(),
            stats: BaseStats::default(),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TokenConfig {
        &self.cfg
    }

    /// True while this endpoint holds the token.
    pub fn holds_token(&self) -> bool {
        self.token.is_some()
    }

    /// Messages queued waiting for the token.
    pub fn queued(&self) -> usize {
        self.pending.len()
    }

    /// Global sequence numbers delivered, skipped as fillers or given up on so far.
    pub fn received_through(&self) -> u64 {
        self.rx.next()
    }

    /// True when no message waits for the token, nothing is buffered past a gap and no gap is
    /// known. The token itself may still be here or on its way: it circulates for ever, so a
    /// driver waiting for quiescence checks this and ignores token packets.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty() && !self.has_gap()
    }

    fn successor(&self) -> ProcId {
        ProcId((self.cfg.id.0 + 1) % self.cfg.procs)
    }

    fn predecessor(&self) -> ProcId {
        ProcId((self.cfg.id.0 + self.cfg.procs - 1) % self.cfg.procs)
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

    fn event(&mut self, e: BaseEvent) {
        self.out.push_back(Output::Event(e));
    }

    // --- The token ---------------------------------------------------------------------------

    /// The token has arrived (or the idle hold ended with work queued): send, then pass.
    fn use_token(&mut self, now: Instant) {
        debug_assert!(self.token.is_some());
        if !self.pending.is_empty() {
            self.send_batch();
            self.pass_token(now);
        } else if self.hold_until.is_none() {
            if self.cfg.idle_hold_ns == 0 {
                self.pass_token(now);
            } else {
                self.hold_until = Some(now + self.cfg.idle_hold_ns);
            }
        }
    }

    /// Stamps up to `batch_max` queued messages with the token's next numbers.
    fn send_batch(&mut self) {
        let mut t = self.token.take().expect("sending without the token");
        let start = t.seq;
        let prev = t.last;
        let k = self.cfg.batch_max.min(self.pending.len());
        assert!(k > 0, "an empty holding stamps nothing");
        for _ in 0..k {
            let (dests, payload) = self.pending.pop_front().expect("k <= queued");
            let gseq = t.seq;
            t.seq += 1;
            for q in 0..self.cfg.procs {
                let q = ProcId(q);
                let addressed = dests.contains(q);
                let payload = if addressed {
                    payload.clone()
                } else {
                    Bytes::new()
                };
                self.emit(
                    q,
                    Body::TokenData {
                        gseq,
                        holding_start: start,
                        prev,
                        addressed,
                        payload,
                    },
                );
            }
            self.history.push(gseq, Sent { dests, payload });
            self.stats.stamped += 1;
        }
        let meta = HoldingMeta { end: t.seq, prev };
        if let Some((_, forgotten)) = self.holdings.push(start, meta) {
            self.forgotten_below = self.forgotten_below.max(forgotten.end);
        }
        t.last = Some(Holding {
            holder: self.cfg.id,
            start,
        });
        self.token = Some(t);
    }

    fn pass_token(&mut self, now: Instant) {
        self.hold_until = None;
        if self.cfg.procs == 1 {
            // A ring of one: the token stays; `send` uses it directly.
            return;
        }
        let mut t = self.token.take().expect("passing without the token");
        t.pass += 1;
        self.stats.token_passes += 1;
        self.send_token(t);
        self.unacked = Some((t, now + self.cfg.token_rto_ns));
    }

    fn send_token(&mut self, t: Token) {
        let next = self.successor();
        self.emit(
            next,
            Body::TokenPass {
                seq: t.seq,
                pass: t.pass,
                last: t.last,
            },
        );
    }

    fn on_token_pass(&mut self, now: Instant, src: ProcId, t: Token) {
        // A token behind our own last holding would make us stamp numbers twice.
        let behind = self.holdings.last().is_some_and(|(_, m)| t.seq < m.end);
        if src != self.predecessor() || t.last.is_some_and(|h| h.start >= t.seq) || behind {
            self.stats.dropped_invalid += 1;
            return;
        }
        // Acknowledge every copy: the acknowledgement of the first may have been lost.
        self.emit(src, Body::TokenAck { pass: t.pass });
        if t.pass <= self.last_pass_seen {
            self.stats.dropped_duplicate += 1;
            return;
        }
        if self.token.is_some() {
            // A second token cannot exist while passes increase; refuse rather than fork.
            self.stats.dropped_invalid += 1;
            return;
        }
        self.last_pass_seen = t.pass;
        // A newer token proves our own last transfer arrived.
        self.unacked = None;
        if let Some(h) = t.last {
            if self.tail.is_none_or(|(s, _)| t.seq > s) && t.seq > self.rx.next() {
                self.tail = Some((t.seq, h));
            }
        }
        self.token = Some(t);
        self.use_token(now);
    }

    fn on_token_ack(&mut self, pass: u64) {
        if self.unacked.is_some_and(|(t, _)| t.pass == pass) {
            self.unacked = None;
        } else {
            self.stats.dropped_duplicate += 1;
        }
    }

    // --- Receiving ---------------------------------------------------------------------------

    fn on_token_data(&mut self, gseq: u64, attr: Attr, payload: Option<Bytes>) {
        let valid = attr.start <= gseq
            && attr
                .prev
                .is_none_or(|p| p.start < attr.start && p.holder.0 < self.cfg.procs);
        if !valid {
            self.stats.dropped_invalid += 1;
            return;
        }
        match self.rx.insert(gseq, Slot::Msg { attr, payload }) {
            Ok(()) => {}
            Err(Refused::Duplicate) => self.stats.dropped_duplicate += 1,
            Err(Refused::Window) => self.stats.dropped_full += 1,
        }
    }

    fn on_token_lost(&mut self, gseq: u64, count: u32, attr: Attr) {
        if attr.start > gseq || attr.prev.is_some_and(|p| p.start >= attr.start) {
            self.stats.dropped_invalid += 1;
            return;
        }
        self.rx
            .fill(gseq, u64::from(count), || Slot::Lost { attr: Some(attr) });
    }

    fn deliver_ready(&mut self) {
        while let Some((gseq, slot)) = self.rx.pop() {
            match slot {
                Slot::Msg {
                    attr,
                    payload: Some(payload),
                } => {
                    self.stats.delivered += 1;
                    self.event(BaseEvent::Deliver {
                        dst: self.cfg.id,
                        src: attr.holder,
                        seq_or_ts: gseq,
                        payload,
                    });
                }
                Slot::Msg { payload: None, .. } => {} // A filler: not for us.
                Slot::Lost { attr } => {
                    self.stats.lost += 1;
                    self.event(BaseEvent::Lost {
                        dst: self.cfg.id,
                        src: attr.map(|a| a.holder),
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
        if !self.has_gap() {
            self.nack_at = None;
        } else if self.nack_at.is_none() {
            self.nack_at = Some(now + self.cfg.nack_timeout_ns);
            self.nack_armed_next = self.rx.next();
        }
    }

    /// What to do about each gap: NACK the holder its right end attributes it to, or give up on
    /// it when nothing can attribute it any more.
    fn gap_actions(&self) -> Vec<GapAction> {
        let mut actions = Vec::new();
        let mut expected = self.rx.next();
        let window = self.rx.window();
        for (k, slot) in self.rx.iter() {
            if actions.len() == NACKS_PER_ROUND_MAX {
                return actions;
            }
            if k > expected {
                actions.push(match slot.attr() {
                    // k - 1 is in k's holding.
                    Some(a) if a.start < k => GapAction::Nack {
                        to: a.holder,
                        from: expected.max(a.start),
                        end: k,
                    },
                    // k starts its holding: k - 1 is in the previous one.
                    Some(Attr { prev: Some(p), .. }) => GapAction::Nack {
                        to: p.holder,
                        from: expected.max(p.start),
                        end: k,
                    },
                    _ => GapAction::GiveUp {
                        from: expected,
                        end: k,
                    },
                });
            }
            expected = k + 1;
        }
        if let Some((t, h)) = self.tail {
            if t > expected && actions.len() < NACKS_PER_ROUND_MAX {
                let from = expected.max(h.start);
                actions.push(GapAction::Nack {
                    to: h.holder,
                    from,
                    end: t.min(from.saturating_add(window)),
                });
            }
        }
        actions
    }

    fn on_nack_timeout(&mut self, now: Instant) {
        self.nack_at = None;
        if self.rx.next() != self.nack_armed_next {
            // Progress since arming: the gap being timed closed; time the current one afresh.
            self.arm_nack(now);
            return;
        }
        for a in self.gap_actions() {
            match a {
                GapAction::Nack { to, from, end } => {
                    self.stats.nacks_sent += 1;
                    self.emit(
                        to,
                        Body::Nack {
                            seq: from,
                            count: (end - from) as u32,
                            index_lo: from,
                            index_hi: end,
                        },
                    );
                }
                GapAction::GiveUp { from, end } => {
                    self.rx.fill(from, end - from, || Slot::Lost { attr: None });
                }
            }
        }
        self.deliver_ready();
        self.arm_nack(now);
    }

    // --- Serving NACKs -----------------------------------------------------------------------

    /// Retransmits own messages `seq .. seq + count` to `r`, or says they are lost.
    fn on_nack(&mut self, r: ProcId, seq: u64, count: u64) {
        let Some(end) = seq.checked_add(count).filter(|_| count > 0) else {
            self.stats.dropped_invalid += 1;
            return;
        };
        if count > self.cfg.reorder_window {
            self.stats.dropped_invalid += 1;
            return;
        }
        match self.holdings.at_or_below(seq).copied() {
            Some((start, meta)) if seq < meta.end => {
                if end > meta.end {
                    self.stats.dropped_invalid += 1;
                    return;
                }
                let found: Vec<(u64, Sent)> = self.history.range(seq, end).cloned().collect();
                let lost = count - found.len() as u64;
                debug_assert!(found.first().is_none_or(|(g, _)| *g == seq + lost));
                if lost > 0 {
                    self.stats.lost_markers_sent += 1;
                    self.emit(
                        r,
                        Body::TokenLost {
                            gseq: seq,
                            count: lost as u32,
                            holding_start: start,
                            prev: meta.prev,
                        },
                    );
                }
                for (gseq, sent) in found {
                    self.stats.retransmitted += 1;
                    let addressed = sent.dests.contains(r);
                    self.emit(
                        r,
                        Body::TokenData {
                            gseq,
                            holding_start: start,
                            prev: meta.prev,
                            addressed,
                            payload: if addressed {
                                sent.payload
                            } else {
                                Bytes::new()
                            },
                        },
                    );
                }
            }
            _ if seq < self.forgotten_below => {
                // Ours once, but even the holding is forgotten: lost, origin unknown.
                self.stats.lost_markers_sent += 1;
                self.emit(
                    r,
                    Body::TokenLost {
                        gseq: seq,
                        count: count as u32,
                        holding_start: seq,
                        prev: None,
                    },
                );
            }
            _ => self.stats.dropped_invalid += 1,
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
            Body::TokenPass { seq, pass, last } => {
                self.on_token_pass(now, src, Token { seq, pass, last })
            }
            Body::TokenAck { pass } if src == self.successor() => self.on_token_ack(pass),
            Body::TokenData {
                gseq,
                holding_start,
                prev,
                addressed,
                payload,
            } => {
                let attr = Attr {
                    holder: src,
                    start: holding_start,
                    prev,
                };
                self.on_token_data(gseq, attr, addressed.then_some(payload));
            }
            Body::TokenLost {
                gseq,
                count,
                holding_start,
                prev,
            } => {
                let attr = Attr {
                    holder: src,
                    start: holding_start,
                    prev,
                };
                self.on_token_lost(gseq, count, attr);
            }
            Body::Nack { seq, count, .. } => self.on_nack(src, seq, u64::from(count)),
            _ => self.stats.dropped_invalid += 1,
        }
        self.deliver_ready();
        self.arm_nack(now);
    }

    fn on_timeout(&mut self, now: Instant) {
        if self.hold_until.is_some_and(|t| t <= now) {
            self.hold_until = None;
            if !self.pending.is_empty() {
                self.send_batch();
            }
            self.pass_token(now);
        }
        if let Some((t, at)) = self.unacked {
            if at <= now {
                self.stats.token_retransmits += 1;
                self.send_token(t);
                self.unacked = Some((t, now + self.cfg.token_rto_ns));
            }
        }
        if self.nack_at.is_some_and(|t| t <= now) {
            self.on_nack_timeout(now);
        }
    }

    /// Handles packets the endpoint sent itself (its own messages, fillers excluded).
    fn flush_loopback(&mut self, now: Instant) {
        while let Some(p) = self.loopback.pop_front() {
            self.on_packet(now, p);
        }
    }

    fn after_mutation(&mut self, now: Instant) {
        self.flush_loopback(now);
        if cfg!(debug_assertions) {
            self.invariants();
        }
    }

    fn invariants(&self) {
        debug_assert!(self.loopback.is_empty());
        debug_assert_eq!(self.has_gap(), self.nack_at.is_some());
        debug_assert!(self.hold_until.is_none() || self.token.is_some());
        debug_assert!(self.token.is_none() || self.unacked.is_none());
        debug_assert!(self.pending.len() <= self.cfg.send_queue_len_max);
        debug_assert!(
            self.cfg.procs == 1
                || self.token.is_none()
                || self.hold_until.is_some()
                || !self.pending.is_empty(),
            "a token held without a reason"
        );
    }
}

impl Node for TokenEndpoint {
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
        let t = earliest(self.hold_until, self.unacked.map(|(_, at)| at));
        earliest(t, self.nack_at)
    }
}

impl Endpoint for TokenEndpoint {
    fn id(&self) -> ProcId {
        self.cfg.id
    }

    fn send(&mut self, now: Instant, payload: Bytes, dests: Dests) -> Result<(), BaseSendError> {
        validate_send(self.cfg.procs, self.cfg.payload_len_max, &payload, &dests)?;
        if self.pending.len() >= self.cfg.send_queue_len_max {
            return Err(BaseSendError::Full);
        }
        self.pending.push_back((dests, payload));
        self.stats.sends += 1;
        if self.token.is_some() {
            // Held idle (or a ring of one): use it now rather than at the end of the hold.
            self.hold_until = None;
            self.send_batch();
            self.pass_token(now);
        }
        self.after_mutation(now);
        Ok(())
    }

    fn stats(&self) -> &BaseStats {
        &self.stats
    }
}
