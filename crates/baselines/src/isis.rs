//! ISIS agreed order (Skeen's algorithm, as ISIS's ABCAST; \[17\] Birman and Joseph; the 1Pipe
//! evaluation draft's "ISIS" line of the scalability comparison): the [`IsisEndpoint`].
//!
//! 1. **Propose.** The sender sends the message to every destination ([`Body::Propose`]).
//! 2. **Proposal.** Each destination buffers it as *undeliverable* under a proposed timestamp:
//!    one above everything it proposed or saw agreed so far (its clock `+ 1`), and answers with
//!    it ([`Body::Proposal`]).
//! 3. **Final.** Once every destination answered, the sender agrees on the largest proposal and
//!    announces it ([`Body::Final`]); each destination re-keys the message under the agreed
//!    timestamp, marks it deliverable and raises its clock to it.
//! 4. **Deliver.** A destination delivers from the front of its buffer, in `(ts, src)` order,
//!    while the front is deliverable. Nothing undeliverable can end up ahead of it: every
//!    buffered message's final timestamp is at least its proposal here, and everything this
//!    destination proposes later is above the clock, which is above every delivered timestamp.
//!
//! The order key is `(agreed ts, sender)`, the `seq_or_ts` and `src` of
//! [`BaseEvent::Deliver`]. Two refinements make it unique per message and per-sender FIFO (the
//! order checkers ask for both; plain ABCAST gives neither over subsets): proposals reach a
//! destination in send order (channel sequence numbers, FIFO over a reordering network), and
//! a sender agrees on its messages in send order, each at least one above the previous —
//! `final = max(proposals, previous final + 1)`, still at least every proposal.
//!
//! **Loss** (every packet kind may be lost, duplicated or reordered): a sender re-sends a
//! `Propose` whose proposal has not come back within its retransmission timeout (RFC 6298 over
//! the propose → proposal round trip, backing off per retry; the destination answers a
//! duplicate with the proposal it made). A destination whose front message waited too long for
//! its agreed timestamp (`retry_ns`, doubling while it stays the front) asks the sender
//! ([`Body::FinalRequest`]), and so does one that gets a sender's `Final` while an earlier
//! message of that sender is still unagreed (a sender agrees, and sends, in send order); the
//! sender answers from a bounded history of agreed timestamps, or with [`Body::Lost`] for one that fell out of it
//! (the destination then skips the message and reports [`BaseEvent::Lost`]).
//!
//! What it is not: fault-tolerant. A failed destination stops its senders' agreement, and with
//! them every destination's delivery (§8: agreement among receivers costs delay and traffic).
//! Every message costs three packets per destination (propose, proposal, final) — the price of
//! deciding the order at the receivers, which the scalability comparison shows.

use crate::common::{
    earliest, validate_send, BaseEvent, BaseSendError, BaseStats, Endpoint, History, Refused,
    SeqBuffer, PORT,
};
use crate::dests::Dests;
use crate::packet::{BasePacket, Body, PAYLOAD_LEN_MAX};
use bytes::Bytes;
use onepipe_proto::ids::ProcId;
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::Instant;
use std::collections::{BTreeMap, VecDeque};

/// Longest retransmission timeout, however far it backs off.
pub const RETRY_MAX_NS: u64 = 10_000_000;

/// Most doublings of a destination's `Propose` timeout (back-off, reset by a fresh round-trip
/// sample). More (64×) changed nothing at N = 512 in the simulator's Fig. 8 runs and left lossy
/// runs waiting out 64 timeouts in a row past their drain limit.
pub const PROPOSE_BACKOFF_MAX: u8 = 3;

/// Most doublings of a front message's wait before another `FinalRequest`: a request that
/// failed this often is repeated at a steady pace rather than ever more slowly.
pub const FINAL_BACKOFF_MAX: u8 = 3;

/// Static configuration of an [`IsisEndpoint`].
#[derive(Clone, Debug)]
pub struct IsisConfig {
    /// This endpoint's process, in `0..procs`.
    pub id: ProcId,
    /// The group: processes `0..procs`.
    pub procs: u32,
    /// Most own messages not yet agreed on; `send` beyond it is [`BaseSendError::Full`]. It
    /// bounds what waits at the destinations (the window times the group). Default 32.
    pub undecided_len_max: usize,
    /// Floor of the retransmission timeout of a `Propose`, and of the wait before a
    /// `FinalRequest`; above it both follow the measured round trips. Default 50 µs.
    pub retry_ns: u64,
    /// Own agreed timestamps kept to answer `FinalRequest`s. Default 65,536.
    pub history_len_max: usize,
    /// Per-channel reorder window of `Propose`s. Default 4,096.
    pub channel_window: u64,
    /// Most messages buffered here (proposed, not delivered) or waiting in channels; a
    /// `Propose` beyond it is dropped unanswered (its sender re-sends it). Default 1,048,576.
    pub pending_len_max: usize,
    /// Most outputs waiting to be drained; `send` beyond it is [`BaseSendError::Full`].
    /// Default 1,048,576.
    pub send_queue_len_max: usize,
    /// Largest payload. Default [`PAYLOAD_LEN_MAX`].
    pub payload_len_max: usize,
}

impl IsisConfig {
    /// Defaults for endpoint `id` of `procs`.
    pub fn new(id: ProcId, procs: u32) -> IsisConfig {
        IsisConfig {
            id,
            procs,
            undecided_len_max: 16,
            retry_ns: 50_000,
            history_len_max: 1 << 16,
            channel_window: 1 << 12,
            pending_len_max: 1 << 20,
            send_queue_len_max: 1 << 20,
            payload_len_max: PAYLOAD_LEN_MAX,
        }
    }
}

/// An own message whose proposals are still coming in.
#[derive(Clone, Debug)]
struct Undecided {
    dests: Dests,
    payload: Bytes,
    /// Proposals still missing.
    missing: u32,
    /// The largest proposal so far.
    max_ts: u64,
}

/// A `Propose` awaiting its proposal from one destination.
#[derive(Clone, Copy, Debug)]
struct Awaited {
    cseq: u64,
    msg_id: u64,
    /// When it was (last) sent.
    sent_at: Instant,
    /// A proposal behind it came first: its own was lost (or overtaken); re-send at once.
    overtaken: bool,
    /// Its round trip says nothing about the network: it (or one ahead of it in the FIFO
    /// channel) was lost or re-sent, so its answer waited for a repair (Karn's rule).
    no_sample: bool,
}

/// A message buffered at a destination, under its proposed or agreed timestamp.
#[derive(Clone, Debug)]
struct Pending {
    payload: Bytes,
    /// Agreed (deliverable), or still only proposed.
    agreed: bool,
    /// Its agreement was asked for because a later one from its sender arrived first.
    asked: bool,
}

/// RFC 6298 round-trip estimate: smoothed RTT and its variation, ns.
#[derive(Clone, Copy, Debug, Default)]
struct RttEstimate {
    srtt: Option<u64>,
    rttvar: u64,
}

impl RttEstimate {
    fn sample(&mut self, rtt: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(rtt)) / 4;
                self.srtt = Some((7 * s + rtt) / 8);
            }
        }
    }

    /// The timeout: `srtt + 4 · rttvar`, at least `floor`, backed off `tries` times (the
    /// caller caps `tries`).
    fn timeout(&self, floor: u64, tries: u8) -> u64 {
        let base = self
            .srtt
            .map_or(floor, |s| (s + 4 * self.rttvar).max(floor));
        base.saturating_mul(1 << tries.min(16))
            .min(RETRY_MAX_NS.max(floor))
    }
}

/// A process's endpoint in ISIS agreed order. See the module docs.
#[derive(Debug)]
pub struct IsisEndpoint {
    cfg: IsisConfig,
    // --- As a sender ---
    next_msg_id: u64,
    /// Own messages not agreed yet: `undecided[i]` is message `undecided_base + i`.
    undecided: VecDeque<Undecided>,
    undecided_base: u64,
    /// The previous agreed timestamp (agreement goes in send order, each above the last).
    last_final: u64,
    /// Per destination: next channel sequence number, and the `Propose`s it has not answered,
    /// in channel order.
    cseq_next: Vec<u64>,
    awaiting: Vec<VecDeque<Awaited>>,
    /// Per destination: when a proposal last came from it, and how many timeouts in a row
    /// its channel had (the back-off, reset by a fresh round-trip sample — RFC 6298 §5).
    last_answer: Vec<Instant>,
    backoff: Vec<u8>,
    /// Agreed timestamps by message id, for `FinalRequest`s.
    history: History<u64>,
    propose_rtt: RttEstimate,
    // --- As a destination ---
    /// The clock: the largest timestamp proposed here or seen agreed.
    clock: u64,
    channels: Vec<SeqBuffer<(u64, Bytes)>>,
    /// Buffered messages by (timestamp, sender, message id): proposed or agreed.
    pending: BTreeMap<(u64, ProcId, u64), Pending>,
    /// The current timestamp of each buffered message, by (sender, message id).
    by_id: BTreeMap<(ProcId, u64), u64>,
    /// Messages waiting in channels (for the `pending_len_max` bound).
    channel_len: usize,
    /// The front message when it became the front (or was last asked about), and requests
    /// made for it.
    front_since: Option<((u64, ProcId, u64), Instant, u8)>,
    tick_at: Option<Instant>,
    loopback: VecDeque<BasePacket>,
    out: VecDeque<Output<BasePacket, BaseEvent>>,
    stats: BaseStats,
}

impl IsisEndpoint {
    /// An endpoint.
    ///
    /// # Panics
    /// On an inconsistent configuration.
    pub fn new(cfg: IsisConfig) -> IsisEndpoint {
        assert!(cfg.id.0 < cfg.procs, "endpoint outside the group");
        assert!(cfg.retry_ns > 0 && cfg.undecided_len_max > 0);
        assert!(cfg.history_len_max > 0 && cfg.pending_len_max > 0);
        assert!(cfg.channel_window > 0 && cfg.channel_window <= u64::from(u32::MAX));
        assert!(cfg.send_queue_len_max > 0 && cfg.payload_len_max <= PAYLOAD_LEN_MAX);
        let n = cfg.procs as usize;
        IsisEndpoint {
            next_msg_id: 0,
            undecided: VecDeque::new(),
            undecided_base: 0,
            last_final: 0,
            cseq_next: vec![0; n],
            awaiting: vec![VecDeque::new(); n],
            last_answer: vec![Instant(0); n],
            backoff: vec![0; n],
            history: History::new(cfg.history_len_max),
            propose_rtt: RttEstimate::default(),
            clock: 0,
            channels: (0..n).map(|_| SeqBuffer::new(cfg.channel_window)).collect(),
            pending: BTreeMap::new(),
            by_id: BTreeMap::new(),
            channel_len: 0,
            front_since: None,
            tick_at: None,
            loopback: VecDeque::new(),
            out: VecDeque::new(),
            stats: BaseStats::default(),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &IsisConfig {
        &self.cfg
    }

    /// The clock: the largest timestamp proposed here or seen agreed.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Own messages not agreed on yet.
    pub fn undecided_len(&self) -> usize {
        self.undecided.len()
    }

    /// Messages buffered here, proposed or agreed, not yet delivered.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Messages sent to `dst` so far (its channel's next sequence number).
    pub fn sent_to(&self, dst: ProcId) -> u64 {
        self.cseq_next.get(dst.index()).copied().unwrap_or(0)
    }

    /// Messages from `src` taken out of its channel so far. A driver compares it with the
    /// sender's [`IsisEndpoint::sent_to`] to tell a finished run from one still in repair.
    pub fn received_from(&self, src: ProcId) -> u64 {
        self.channels.get(src.index()).map_or(0, SeqBuffer::next)
    }

    /// True when nothing is undecided, buffered or waiting in a channel. O(procs).
    pub fn is_idle(&self) -> bool {
        self.undecided.is_empty()
            && self.pending.is_empty()
            && self.channel_len == 0
            && self.awaiting.iter().all(VecDeque::is_empty)
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

    // --- As a sender -------------------------------------------------------------------------

    /// A proposal for own message `msg_id` from `r`.
    fn on_proposal(&mut self, now: Instant, r: ProcId, msg_id: u64, ts: u64) {
        self.last_answer[r.index()] = now;
        let queue = &mut self.awaiting[r.index()];
        let Some(pos) = queue.iter().position(|a| a.msg_id == msg_id) else {
            // Answered already (a re-sent `Propose` answered twice), or never asked.
            self.stats.dropped_duplicate += 1;
            return;
        };
        let a = queue.remove(pos).expect("found above");
        if !a.no_sample && pos == 0 {
            self.propose_rtt.sample(now.saturating_since(a.sent_at));
            self.backoff[r.index()] = 0;
        }
        // FIFO channels: a proposal overtaking the ones ahead of it means those were lost (or
        // reordered): re-send them at the next tick rather than after a whole timeout.
        for earlier in queue.iter_mut().take(pos) {
            earlier.overtaken = true;
            earlier.no_sample = true;
        }
        let i = (msg_id - self.undecided_base) as usize;
        let u = &mut self.undecided[i];
        u.missing -= 1;
        u.max_ts = u.max_ts.max(ts);
        self.agree_in_order();
    }

    /// Agrees on every own message whose proposals are all in, in send order (module docs).
    fn agree_in_order(&mut self) {
        while self.undecided.front().is_some_and(|u| u.missing == 0) {
            let u = self.undecided.pop_front().expect("checked above");
            let msg_id = self.undecided_base;
            self.undecided_base += 1;
            let ts = u.max_ts.max(self.last_final + 1);
            debug_assert!(ts > self.last_final && ts >= u.max_ts);
            self.last_final = ts;
            self.stats.stamped += 1;
            self.history.push(msg_id, ts);
            for d in u.dests.iter(self.cfg.procs) {
                self.emit(d, Body::Final { msg_id, ts });
            }
        }
    }

    /// A destination asks again for the agreed timestamp of `msg_id`.
    fn on_final_request(&mut self, r: ProcId, msg_id: u64) {
        if msg_id >= self.undecided_base {
            // Not agreed yet (or never sent): the answer comes when it is.
            self.stats.dropped_invalid += u64::from(msg_id >= self.next_msg_id);
            return;
        }
        match self.history.at_or_below(msg_id) {
            Some(&(id, ts)) if id == msg_id => {
                self.stats.retransmitted += 1;
                self.emit(r, Body::Final { msg_id, ts });
            }
            _ => {
                self.stats.lost_markers_sent += 1;
                self.emit(
                    r,
                    Body::Lost {
                        seq: msg_id,
                        count: 1,
                    },
                );
            }
        }
    }

    /// Re-sends each destination's oldest unanswered `Propose` once a proposal behind it came
    /// first, or once it is a timeout old and the destination has been silent as long: a
    /// destination that keeps answering is slow (its queue is long), not missing a packet — it
    /// answers in channel order and stops at a gap.
    fn resend_proposes(&mut self, now: Instant) {
        for r in 0..self.cfg.procs as usize {
            let Some(a) = self.awaiting[r].front().copied() else {
                continue;
            };
            let wait = self.propose_rtt.timeout(self.cfg.retry_ns, self.backoff[r]);
            let due = a.overtaken
                || (now.saturating_since(a.sent_at) >= wait
                    && now.saturating_since(self.last_answer[r]) >= wait);
            if r == self.cfg.id.index() || !due {
                continue;
            }
            if !a.overtaken {
                self.backoff[r] = self.backoff[r].saturating_add(1).min(PROPOSE_BACKOFF_MAX);
            }
            // Everything behind it in the channel waits for this repair: no RTT samples there.
            for q in self.awaiting[r].iter_mut() {
                q.no_sample = true;
            }
            let front = self.awaiting[r].front_mut().expect("checked above");
            front.sent_at = now;
            front.overtaken = false;
            let u = &self.undecided[(a.msg_id - self.undecided_base) as usize];
            let body = Body::Propose {
                msg_id: a.msg_id,
                cseq: a.cseq,
                payload: u.payload.clone(),
            };
            self.stats.retransmitted += 1;
            self.emit(ProcId(r as u32), body);
        }
    }

    // --- As a destination --------------------------------------------------------------------

    fn on_propose(&mut self, src: ProcId, msg_id: u64, cseq: u64, payload: Bytes) {
        let ch = &mut self.channels[src.index()];
        if cseq < ch.next() {
            // A re-sent (or duplicated) `Propose`: answer again if still undecided here.
            self.stats.dropped_duplicate += 1;
            if let Some(&ts) = self.by_id.get(&(src, msg_id)) {
                if !self.pending[&(ts, src, msg_id)].agreed {
                    self.emit(src, Body::Proposal { msg_id, ts });
                }
            }
            return;
        }
        // Own messages are never refused: nothing would re-send them.
        if src != self.cfg.id && self.pending.len() + self.channel_len >= self.cfg.pending_len_max {
            self.stats.dropped_full += 1;
            return;
        }
        match ch.insert(cseq, (msg_id, payload)) {
            Ok(()) => self.channel_len += 1,
            Err(Refused::Duplicate) => self.stats.dropped_duplicate += 1,
            Err(Refused::Window) => self.stats.dropped_full += 1,
        }
        while let Some((_, (msg_id, payload))) = self.channels[src.index()].pop() {
            self.channel_len -= 1;
            self.propose(src, msg_id, payload);
        }
    }

    /// Step 2: buffer `msg_id` undeliverable under a fresh timestamp and propose it.
    fn propose(&mut self, src: ProcId, msg_id: u64, payload: Bytes) {
        if self.by_id.contains_key(&(src, msg_id)) {
            // Two channel numbers for one message: a broken sender.
            self.stats.dropped_invalid += 1;
            return;
        }
        self.clock += 1;
        let ts = self.clock;
        let entry = Pending {
            payload,
            agreed: false,
            asked: false,
        };
        self.pending.insert((ts, src, msg_id), entry);
        self.by_id.insert((src, msg_id), ts);
        self.emit(src, Body::Proposal { msg_id, ts });
    }

    /// Step 3 at a destination: re-key under the agreed timestamp, deliverable.
    fn on_final(&mut self, src: ProcId, msg_id: u64, ts: u64) {
        let Some(&proposed) = self.by_id.get(&(src, msg_id)) else {
            // Delivered already (a re-sent `Final`), or skipped.
            self.stats.dropped_duplicate += 1;
            return;
        };
        if self.pending[&(proposed, src, msg_id)].agreed {
            self.stats.dropped_duplicate += 1;
            return;
        }
        if ts < proposed {
            // Below this destination's own proposal: not an agreement this sender could reach.
            self.stats.dropped_invalid += 1;
            return;
        }
        let mut p = self
            .pending
            .remove(&(proposed, src, msg_id))
            .expect("indexed by by_id");
        p.agreed = true;
        self.pending.insert((ts, src, msg_id), p);
        self.by_id.insert((src, msg_id), ts);
        // Everything proposed from now on sorts after it.
        self.clock = self.clock.max(ts);
        self.ask_for_overtaken_finals(src, msg_id);
    }

    /// A sender agrees in send order and sends its `Final`s in that order: one of its earlier
    /// messages still unagreed here lost its `Final` (or it was reordered) — ask for it now,
    /// once, rather than when it reaches the front.
    fn ask_for_overtaken_finals(&mut self, src: ProcId, msg_id: u64) {
        let mut ask = Vec::new();
        for (&(_, id), &ts) in self.by_id.range((src, 0)..(src, msg_id)) {
            let p = self
                .pending
                .get_mut(&(ts, src, id))
                .expect("indexed by by_id");
            if !p.agreed && !p.asked {
                p.asked = true;
                ask.push(id);
            }
        }
        for id in ask {
            self.stats.nacks_sent += 1;
            self.emit(src, Body::FinalRequest { msg_id: id });
        }
    }

    /// The sender forgot the agreed timestamp of `msg_id`: skip the message, report it.
    fn on_lost(&mut self, src: ProcId, msg_id: u64, count: u32) {
        if count != 1 {
            self.stats.dropped_invalid += 1;
            return;
        }
        let Some(ts) = self.by_id.get(&(src, msg_id)).copied() else {
            self.stats.dropped_duplicate += 1;
            return;
        };
        if self.pending[&(ts, src, msg_id)].agreed {
            // Agreed already: deliverable, nothing to skip.
            self.stats.dropped_duplicate += 1;
            return;
        }
        self.pending.remove(&(ts, src, msg_id));
        self.by_id.remove(&(src, msg_id));
        self.stats.lost += 1;
        self.out.push_back(Output::Event(BaseEvent::Lost {
            dst: self.cfg.id,
            src: Some(src),
            count: 1,
        }));
    }

    /// Step 4: deliver the front while it is agreed.
    fn deliver_ready(&mut self) {
        while let Some(entry) = self.pending.first_entry() {
            if !entry.get().agreed {
                break;
            }
            let ((ts, src, msg_id), p) = entry.remove_entry();
            self.by_id.remove(&(src, msg_id));
            self.stats.delivered += 1;
            self.out.push_back(Output::Event(BaseEvent::Deliver {
                dst: self.cfg.id,
                src,
                seq_or_ts: ts,
                payload: p.payload,
            }));
        }
    }

    /// Asks the sender of the front message for its agreed timestamp once it waited too long.
    fn request_front_final(&mut self, now: Instant) {
        let Some((&key, _)) = self.pending.first_key_value() else {
            self.front_since = None;
            return;
        };
        match self.front_since {
            Some((k, since, tries)) if k == key => {
                // Not round-trip based: the wait for an agreement includes the slowest
                // destination's, and its repairs — a heavy tail no estimate follows.
                let wait =
                    RttEstimate::default().timeout(self.cfg.retry_ns, tries.min(FINAL_BACKOFF_MAX));
                let src = key.1;
                if now.saturating_since(since) >= wait && src != self.cfg.id {
                    self.front_since = Some((key, now, tries.saturating_add(1)));
                    self.stats.nacks_sent += 1;
                    self.emit(src, Body::FinalRequest { msg_id: key.2 });
                }
            }
            _ => self.front_since = Some((key, now, 0)),
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
            Body::Propose {
                msg_id,
                cseq,
                payload,
            } => self.on_propose(src, msg_id, cseq, payload),
            Body::Proposal { msg_id, ts } if msg_id >= self.undecided_base => {
                if msg_id < self.next_msg_id {
                    self.on_proposal(now, src, msg_id, ts);
                } else {
                    self.stats.dropped_invalid += 1;
                }
            }
            Body::Proposal { .. } => self.stats.dropped_duplicate += 1,
            Body::Final { msg_id, ts } => self.on_final(src, msg_id, ts),
            Body::FinalRequest { msg_id } => self.on_final_request(src, msg_id),
            Body::Lost { seq, count } => self.on_lost(src, seq, count),
            _ => self.stats.dropped_invalid += 1,
        }
    }

    fn busy(&self) -> bool {
        !self.undecided.is_empty() || !self.pending.is_empty()
    }

    fn on_timeout(&mut self, now: Instant) {
        if self.tick_at.is_some_and(|t| t <= now) {
            self.tick_at = None;
            self.resend_proposes(now);
            self.request_front_final(now);
        }
    }

    fn after_mutation(&mut self, now: Instant) {
        while let Some(p) = self.loopback.pop_front() {
            self.on_packet(now, p);
        }
        self.deliver_ready();
        if self.tick_at.is_none() && self.busy() {
            self.tick_at = Some(now + self.cfg.retry_ns / 2);
        }
        if cfg!(debug_assertions) {
            self.invariants();
        }
    }

    fn invariants(&self) {
        debug_assert!(self.loopback.is_empty());
        debug_assert_eq!(self.pending.len(), self.by_id.len());
        debug_assert!(self.undecided.len() <= self.cfg.undecided_len_max);
        debug_assert_eq!(
            self.undecided_base + self.undecided.len() as u64,
            self.next_msg_id
        );
        debug_assert!(self
            .pending
            .first_key_value()
            .is_none_or(|(_, p)| !p.agreed));
        debug_assert!(!self.busy() || self.tick_at.is_some());
    }
}

impl Node for IsisEndpoint {
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
        earliest(self.tick_at, None)
    }
}

impl Endpoint for IsisEndpoint {
    fn id(&self) -> ProcId {
        self.cfg.id
    }

    fn send(&mut self, now: Instant, payload: Bytes, dests: Dests) -> Result<(), BaseSendError> {
        validate_send(self.cfg.procs, self.cfg.payload_len_max, &payload, &dests)?;
        if self.undecided.len() >= self.cfg.undecided_len_max
            || self.out.len() >= self.cfg.send_queue_len_max
        {
            return Err(BaseSendError::Full);
        }
        let msg_id = self.next_msg_id;
        self.next_msg_id += 1;
        self.stats.sends += 1;
        let mut count = 0;
        for d in dests.iter(self.cfg.procs) {
            let cseq = self.cseq_next[d.index()];
            self.cseq_next[d.index()] += 1;
            self.awaiting[d.index()].push_back(Awaited {
                cseq,
                msg_id,
                sent_at: now,
                overtaken: false,
                no_sample: false,
            });
            count += 1;
            self.emit(
                d,
                Body::Propose {
                    msg_id,
                    cseq,
                    payload: payload.clone(),
                },
            );
        }
        self.undecided.push_back(Undecided {
            dests,
            payload,
            missing: count,
            max_ts: 0,
        });
        self.after_mutation(now);
        Ok(())
    }

    fn stats(&self) -> &BaseStats {
        &self.stats
    }
}
