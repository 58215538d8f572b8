//! The causal multicast layer ToTo assumes (Transis, the paper's §2 and §2.1): every message
//! carries its origin's sequence number and piggybacked acknowledgements, a receiver delivers
//! a message only after all its causal predecessors, and a missing predecessor is recovered by
//! a negative acknowledgement and a retransmission.
//!
//! * **Messages.** Machine `p`'s `i`'th message is `m_{p,i}` (`i` from 1). It carries, as
//!   Transis's ACKs, the latest message of every machine `p` delivered since its previous
//!   message ([`CausalAck`]): its direct causal predecessors besides `m_{p,i-1}`. The receiver
//!   rebuilds the message's vector time (per machine, the latest of its messages this one
//!   follows) from the previous message of `p` and these ACKs.
//! * **Causal delivery.** A message is delivered once `m_{p,i-1}` and every message it ACKs are
//!   delivered; until then it waits in a per-origin buffer of [`CausalConfig::window`]
//!   messages beyond the last delivered one. A message beyond that window is dropped and
//!   counted (`dropped_full`): it comes again by retransmission.
//! * **Recovery.** A message known to exist (named by an ACK, by a later message of its origin,
//!   or by a status) but missing for [`CausalConfig::retry_ns`] is asked for with a
//!   [`Body::CausalNack`], every `retry_ns` while it stays missing, alternately from its origin
//!   and from the machine that revealed it (which delivered it, so holds it). Every machine keeps
//!   what it delivered until it is *stable* — delivered everywhere, as the ACKs and statuses
//!   show — and answers NACKs from that history.
//! * **Stability and the send window.** A machine learns what the others delivered from the
//!   vector times of their messages and from [`Body::CausalStatus`] packets (outside the causal
//!   graph, so they need no acknowledgement). Own messages not yet stable are at most
//!   [`CausalConfig::unstable_len_max`]; beyond that `send` is refused (`Full`). An own message
//!   some machine has not shown it delivered for a `retry_ns` is sent to it again (the newest
//!   one: its sequence number and ACKs reveal every older gap, which that machine then NACKs).
//! * **Heartbeats (not in the paper).** Transis delivers on the messages the application sends;
//!   an idle machine that sent nothing would hold up every agreed message (ToTo needs messages
//!   that *follow* a candidate). A machine that delivered an agreed message and sent nothing
//!   since for [`CausalConfig::idle_ns`] sends a heartbeat: an empty causal-only message whose
//!   ACKs are what it delivered. One that delivered only causal-only messages (or a duplicate)
//!   sends a status instead, to their origins only, so heartbeats never answer heartbeats and
//!   an idle group falls silent. (A machine whose own window is full sends a status to every
//!   machine in place of the heartbeat it owes, and the heartbeat later.)
//!
//! * **Crashed machines (§5).** The membership (`super::member`) first *freezes* a suspected
//!   machine ([`CausalLayer::freeze`]: none of its messages beyond those delivered here is
//!   delivered any more), then, once the survivors agreed on the cut, *crashes* it
//!   ([`CausalLayer::crash`]): its messages up to the cut are recovered from the survivors
//!   (NACKs go to them in turn, never to it), later ones are dropped, and stability, heartbeats
//!   and retransmissions count only the machines still in the view.

use crate::common::BaseStats;
use crate::packet::{BasePacket, Body, CausalAck, CAUSAL_ACKS_LEN_MAX};
use bytes::Bytes;
use onepipe_proto::ids::ProcId;
use onepipe_proto::time::Instant;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// How many more messages of an origin the layer above takes now.
pub type Room<'a> = &'a dyn Fn(ProcId) -> usize;

/// Most messages one NACK asks for.
pub const NACK_COUNT_MAX: u32 = 64;

/// Largest group: an ACK list names each machine at most once.
pub const PROCS_MAX: u32 = CAUSAL_ACKS_LEN_MAX as u32;

/// Static configuration of a [`CausalLayer`].
#[derive(Clone, Debug)]
pub struct CausalConfig {
    /// This machine, in `0..procs`.
    pub id: ProcId,
    /// The group: machines `0..procs`, every one a destination of every message.
    pub procs: u32,
    /// Per origin, how far beyond its last delivered message a message may arrive and wait
    /// for its predecessors. Default 256.
    pub window: u64,
    /// Most own messages not yet known delivered everywhere; at most `window`. Default 64.
    pub unstable_len_max: u64,
    /// Wait before a missing message is asked for, between asks, and before an own message
    /// is sent again to a machine that has not shown it delivered. Default 200 µs.
    pub retry_ns: u64,
    /// Silence after delivering something before a heartbeat (or status) tells the others.
    /// Default 20 µs.
    pub idle_ns: u64,
}

impl CausalConfig {
    /// Defaults for machine `id` of `procs`.
    pub fn new(id: ProcId, procs: u32) -> CausalConfig {
        CausalConfig {
            id,
            procs,
            window: 256,
            unstable_len_max: 64,
            retry_ns: 200_000,
            idle_ns: 20_000,
        }
    }
}

/// A message the causal layer delivers upward, in causal order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CausalMsg {
    /// Its origin.
    pub origin: ProcId,
    /// Its number among the origin's messages, from 1.
    pub seq: u64,
    /// Its vector time: per machine, the latest of its messages this one follows (its own
    /// entry is `seq`; 0: none).
    pub vt: Arc<[u64]>,
    /// An agreed message (or a causal-only heartbeat).
    pub agreed: bool,
    /// The application message.
    pub payload: Bytes,
}

impl CausalMsg {
    /// True if this message follows `m_{origin,seq}` in the causal order (a message follows
    /// itself, §2.1).
    pub fn follows(&self, origin: ProcId, seq: u64) -> bool {
        self.vt[origin.index()] >= seq
    }
}

/// A message as it travels: what a retransmission repeats.
#[derive(Clone, Debug)]
struct Wire {
    agreed: bool,
    acks: Arc<[CausalAck]>,
    payload: Bytes,
}

/// A message that arrived before its predecessors were delivered.
#[derive(Clone, Debug)]
struct Waiting {
    wire: Wire,
}

/// A gap: messages of one origin known to exist but missing.
#[derive(Clone, Copy, Debug)]
struct Gap {
    /// When it was first seen, or last asked for.
    since: Instant,
    /// Asks so far.
    tries: u32,
    /// A machine that delivered the latest known message of the origin.
    holder: ProcId,
}

/// What this machine owes the others once it has been idle for `idle_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owed {
    /// A heartbeat: it delivered an agreed message it has not acknowledged.
    Heartbeat,
    /// A status: it delivered only causal-only messages since its last send.
    Status,
}

/// One machine's causal layer. See the module docs.
#[derive(Debug)]
pub struct CausalLayer {
    cfg: CausalConfig,
    /// Own messages sent so far (the last own sequence number).
    sent: u64,
    /// When the newest own message was sent (or last re-sent).
    sent_at: Instant,
    /// Resends of the newest own message since it was sent or since every machine last showed
    /// progress: the next waits [`CausalLayer::backoff`] of them.
    resend_tries: u32,
    /// Per origin, its messages delivered here (the latest delivered sequence number).
    delivered: Vec<u64>,
    /// Per origin, the vector time of its latest delivered message.
    last_vt: Vec<Arc<[u64]>>,
    /// `known[r][o]`: the latest message of `o` machine `r` is known to have delivered.
    known: Vec<Vec<u64>>,
    /// Per machine `r`, `known[r][id]` when an own message was last (re)sent to it.
    resent_mark: Vec<u64>,
    /// What the last own message acknowledged (its vector time).
    acked: Vec<u64>,
    /// Per origin, messages delivered here and not yet stable (own ones included).
    history: Vec<BTreeMap<u64, Wire>>,
    /// Per machine, whether it is in the view (not crashed).
    alive: Vec<bool>,
    /// Per origin, the latest of its messages that may be delivered (`u64::MAX` unless the
    /// membership froze or crashed it).
    limit: Vec<u64>,
    /// Per origin, messages waiting for their predecessors.
    waiting: Vec<BTreeMap<u64, Waiting>>,
    /// Per origin, the latest message known to exist.
    want: Vec<u64>,
    /// Per origin, the missing messages being recovered.
    gaps: Vec<Option<Gap>>,
    /// Owed once idle, and since when.
    owed: Option<(Owed, Instant)>,
    /// Per machine, whether the next status goes to it.
    status_to: Vec<bool>,
    /// Delivered messages for the layer above, in causal order.
    up: VecDeque<CausalMsg>,
    /// Per origin, its messages in `up`.
    up_len: Vec<usize>,
    /// Packets to send.
    out: VecDeque<BasePacket>,
}

impl CausalLayer {
    /// A layer.
    ///
    /// # Panics
    /// On an inconsistent configuration.
    pub fn new(cfg: CausalConfig) -> CausalLayer {
        assert!(cfg.procs >= 1 && cfg.procs <= PROCS_MAX, "group size");
        assert!(cfg.id.0 < cfg.procs, "machine outside the group");
        assert!(cfg.window > 0 && cfg.unstable_len_max > 0);
        assert!(
            cfg.unstable_len_max <= cfg.window,
            "a window holds the unstable messages"
        );
        assert!(cfg.retry_ns > 0 && cfg.idle_ns > 0);
        let n = cfg.procs as usize;
        let zero: Arc<[u64]> = vec![0; n].into();
        CausalLayer {
            sent: 0,
            sent_at: Instant(0),
            resend_tries: 0,
            delivered: vec![0; n],
            last_vt: vec![zero; n],
            known: vec![vec![0; n]; n],
            resent_mark: vec![0; n],
            acked: vec![0; n],
            history: vec![BTreeMap::new(); n],
            alive: vec![true; n],
            limit: vec![u64::MAX; n],
            waiting: vec![BTreeMap::new(); n],
            want: vec![0; n],
            gaps: vec![None; n],
            owed: None,
            status_to: vec![false; n],
            up: VecDeque::new(),
            up_len: vec![0; n],
            out: VecDeque::new(),
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CausalConfig {
        &self.cfg
    }

    /// Own messages sent so far (heartbeats included).
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// The latest message of `origin` delivered here.
    pub fn delivered(&self, origin: ProcId) -> u64 {
        self.delivered[origin.index()]
    }

    /// Own messages not yet known delivered everywhere.
    pub fn unstable_len(&self) -> u64 {
        let me = self.cfg.id.index();
        self.sent - self.stable(me)
    }

    /// True if `send` would accept a message now.
    pub fn has_room(&self) -> bool {
        self.unstable_len() < self.cfg.unstable_len_max
    }

    /// True when nothing waits, no own message is unstable and nothing is owed. Other
    /// machines' messages may still be held for NACKs: this machine may not have heard that
    /// they are stable (a status to it was lost), and their origins repair without it.
    pub fn is_idle(&self) -> bool {
        self.owed.is_none()
            && self.waiting.iter().all(BTreeMap::is_empty)
            && self.unstable_len() == 0
    }

    /// The next delivered message, in causal order.
    pub fn poll_deliver(&mut self) -> Option<CausalMsg> {
        let m = self.up.pop_front()?;
        self.up_len[m.origin.index()] -= 1;
        Some(m)
    }

    /// The next packet to send.
    pub fn poll_packet(&mut self) -> Option<BasePacket> {
        self.out.pop_front()
    }

    /// When [`CausalLayer::on_timeout`] has something to do: a gap to ask for, an own message
    /// to send again, a heartbeat or status owed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let owed = self.owed.map(|(_, since)| since + self.cfg.idle_ns);
        let gap = self
            .gaps
            .iter()
            .flatten()
            .map(|g| g.since + self.backoff(g.tries))
            .min();
        let resend =
            (self.unstable_len() > 0).then_some(self.sent_at + self.backoff(self.resend_tries));
        [owed, gap, resend].into_iter().flatten().min()
    }

    /// Sends an own message to every other machine and delivers it here at once (it follows
    /// everything delivered here). The caller checked [`CausalLayer::has_room`].
    pub fn send(&mut self, now: Instant, agreed: bool, payload: Bytes) {
        assert!(self.has_room(), "send beyond the unstable window");
        let me = self.cfg.id;
        let acks: Arc<[CausalAck]> = (0..self.cfg.procs)
            .filter(|&o| o != me.0 && self.delivered[o as usize] > self.acked[o as usize])
            .map(|o| CausalAck {
                origin: ProcId(o),
                seq: self.delivered[o as usize],
            })
            .collect();
        self.acked.clone_from(&self.delivered);
        self.owed = None;
        self.status_to.fill(false);
        self.sent += 1;
        self.sent_at = now;
        self.resend_tries = 0;
        let seq = self.sent;
        let wire = Wire {
            agreed,
            acks,
            payload,
        };
        for d in 0..self.cfg.procs {
            if d == me.0 || !self.alive[d as usize] {
                continue;
            }
            self.resent_mark[d as usize] = self.known[d as usize][me.index()];
            self.emit(ProcId(d), me, seq, &wire);
        }
        self.want[me.index()] = seq;
        self.deliver(now, me, seq, wire);
        debug_assert_eq!(self.delivered[me.index()], self.sent);
    }

    fn emit(&mut self, dst: ProcId, origin: ProcId, seq: u64, wire: &Wire) {
        self.out.push_back(BasePacket {
            src: self.cfg.id,
            dst,
            body: Body::Causal {
                origin,
                seq,
                agreed: wire.agreed,
                acks: wire.acks.to_vec(),
                payload: wire.payload.clone(),
            },
        });
    }

    /// The latest message of `origin` every machine of the view is known to have delivered.
    fn stable(&self, origin: usize) -> u64 {
        self.known
            .iter()
            .zip(&self.alive)
            .filter(|(_, &a)| a)
            .map(|(k, _)| k[origin])
            .min()
            .unwrap_or(0)
    }

    /// True if machine `q` is in the view.
    pub fn is_alive(&self, q: ProcId) -> bool {
        self.alive[q.index()]
    }

    /// The latest own message `q` is known to have delivered.
    pub fn known_own(&self, q: ProcId) -> u64 {
        self.known[q.index()][self.cfg.id.index()]
    }

    /// §5.1, Agree: stops delivering `q`'s messages beyond those delivered here (until
    /// [`CausalLayer::crash`] sets the agreed cut); returns the latest delivered.
    pub fn freeze(&mut self, q: ProcId) -> u64 {
        assert!(q != self.cfg.id, "a machine never suspects itself");
        let o = q.index();
        self.limit[o] = self.limit[o].min(self.delivered[o]);
        self.delivered[o]
    }

    /// §5.1, end of Agree: `q` left the view; its messages up to `cut` are delivered here
    /// (recovered from the survivors if missing), later ones never. The caller froze `q`
    /// first, at or below `cut`.
    pub fn crash(&mut self, now: Instant, q: ProcId, cut: u64) {
        let o = q.index();
        assert!(
            q != self.cfg.id && self.alive[o],
            "crashing a machine twice"
        );
        assert!(self.delivered[o] <= cut, "delivered beyond the agreed cut");
        self.alive[o] = false;
        self.limit[o] = cut;
        self.waiting[o].retain(|&s, _| s <= cut);
        self.want[o] = cut.max(self.delivered[o]);
        self.gaps[o] = (self.want[o] > self.delivered[o]).then_some(Gap {
            since: now,
            tries: 0,
            holder: self.cfg.id,
        });
        for r in 0..self.cfg.procs as usize {
            self.collect_stable(r);
        }
    }

    // --- Receiving ---------------------------------------------------------------------------

    /// A packet from the network. Malformed ones are dropped and counted. `room` says how many
    /// more messages of each origin the layer above takes now (module docs of `crate::toto`):
    /// the rest wait here, undelivered, so their senders' windows fill.
    pub fn on_packet(&mut self, now: Instant, p: BasePacket, stats: &mut BaseStats, room: Room) {
        if p.dst != self.cfg.id
            || p.src.0 >= self.cfg.procs
            || p.src == self.cfg.id
            || !self.alive[p.src.index()]
            || !p.body.plausible()
        {
            stats.dropped_invalid += 1;
            return;
        }
        match p.body {
            Body::Causal {
                origin,
                seq,
                agreed,
                acks,
                payload,
            } => {
                if self.ignore_causal(origin, seq, &acks) {
                    stats.dropped_invalid += 1;
                    return;
                }
                let wire = Wire {
                    agreed,
                    acks: acks.into(),
                    payload,
                };
                self.on_causal(now, p.src, (origin, seq), wire, stats, room);
            }
            Body::CausalNack { origin, seq, count } if origin.0 < self.cfg.procs && seq > 0 => {
                self.on_nack(p.src, origin, seq, count, stats)
            }
            Body::CausalStatus { delivered } if self.acks_valid(&delivered) => {
                self.on_status(now, p.src, &delivered)
            }
            _ => stats.dropped_invalid += 1,
        }
    }

    /// True if the ACK list is not strictly ascending, names a machine outside the group, or
    /// names `exclude`.
    fn acks_invalid(&self, acks: &[CausalAck], exclude: Option<ProcId>) -> bool {
        acks.windows(2).any(|w| w[0].origin >= w[1].origin)
            || acks
                .iter()
                .any(|a| a.origin.0 >= self.cfg.procs || Some(a.origin) == exclude)
    }

    fn acks_valid(&self, acks: &[CausalAck]) -> bool {
        !self.acks_invalid(acks, None)
    }

    /// True if a `Causal` message cannot be one: unknown origin, this machine's own (it never
    /// misses its own, and a forged one would wait for ever), sequence number 0, or a bad ACK
    /// list (an origin never ACKs itself: its previous message is implied).
    fn ignore_causal(&self, origin: ProcId, seq: u64, acks: &[CausalAck]) -> bool {
        origin.0 >= self.cfg.procs
            || origin == self.cfg.id
            || seq == 0
            || self.acks_invalid(acks, Some(origin))
    }

    fn on_causal(
        &mut self,
        now: Instant,
        from: ProcId,
        (origin, seq): (ProcId, u64),
        wire: Wire,
        stats: &mut BaseStats,
        room: Room,
    ) {
        let o = origin.index();
        if !self.alive[o] && seq > self.limit[o] {
            // §5: a crashed machine's message beyond the agreed cut is delivered nowhere.
            stats.dropped_invalid += 1;
            return;
        }
        if seq <= self.delivered[o] {
            // A duplicate: its sender may not know this machine has it.
            stats.dropped_duplicate += 1;
            self.owe(now, Owed::Status, origin);
            return;
        }
        if seq - self.delivered[o] > self.cfg.window {
            stats.dropped_full += 1;
            self.reveal(now, origin, seq, from);
            return;
        }
        for a in wire.acks.iter() {
            self.reveal(now, a.origin, a.seq, from);
        }
        self.reveal(now, origin, seq - 1, from);
        if self.waiting[o].insert(seq, Waiting { wire }).is_some() {
            stats.dropped_duplicate += 1;
        }
        self.deliver_ready(now, room);
    }

    /// `m_{origin,seq}` exists, and `holder` has delivered it (or is its origin).
    fn reveal(&mut self, now: Instant, origin: ProcId, seq: u64, holder: ProcId) {
        let o = origin.index();
        let seq = seq
            .min(self.delivered[o] + self.cfg.window)
            .min(self.limit[o].max(self.delivered[o]));
        if seq <= self.want[o] || origin == self.cfg.id {
            // Known already; own messages are never missing here.
            return;
        }
        self.want[o] = seq;
        let gap = self.gaps[o].get_or_insert(Gap {
            since: now,
            tries: 0,
            holder,
        });
        gap.holder = holder;
    }

    /// Delivers every waiting message whose predecessors are all delivered (§2.1), as far as
    /// the layer above has `room`.
    pub fn deliver_ready(&mut self, now: Instant, room: Room) {
        let mut progress = true;
        while progress {
            progress = false;
            for o in 0..self.cfg.procs as usize {
                while let Some(seq) = self.deliverable(o, room) {
                    let w = self.waiting[o].remove(&seq).expect("deliverable");
                    self.deliver(now, ProcId(o as u32), seq, w.wire);
                    progress = true;
                }
            }
        }
    }

    /// The next message of origin `o`, if it waits here and every message it ACKs is
    /// delivered.
    fn deliverable(&self, o: usize, room: Room) -> Option<u64> {
        let next = self.delivered[o] + 1;
        if self.up_len[o] >= room(ProcId(o as u32)) || next > self.limit[o] {
            return None;
        }
        let w = self.waiting[o].get(&next)?;
        w.wire
            .acks
            .iter()
            .all(|a| self.delivered[a.origin.index()] >= a.seq)
            .then_some(next)
    }

    /// Delivers `m_{origin,seq}` (its predecessors are delivered): rebuild its vector time,
    /// learn what its origin had delivered, keep it until stable, pass it up.
    fn deliver(&mut self, now: Instant, origin: ProcId, seq: u64, wire: Wire) {
        let o = origin.index();
        debug_assert_eq!(seq, self.delivered[o] + 1);
        let mut vt = self.last_vt[o].to_vec();
        for a in wire.acks.iter() {
            debug_assert!(
                self.delivered[a.origin.index()] >= a.seq,
                "a predecessor missing"
            );
            let e = &mut vt[a.origin.index()];
            *e = (*e).max(a.seq);
        }
        vt[o] = seq;
        let vt: Arc<[u64]> = vt.into();
        self.last_vt[o] = vt.clone();
        self.delivered[o] = seq;
        self.want[o] = self.want[o].max(seq);
        if self.want[o] == seq {
            self.gaps[o] = None;
        }
        for (k, &v) in self.known[o].iter_mut().zip(vt.iter()) {
            *k = (*k).max(v);
        }
        let me = self.cfg.id.index();
        self.known[me][o] = seq;
        if origin != self.cfg.id {
            let kind = if wire.agreed {
                Owed::Heartbeat
            } else {
                Owed::Status
            };
            self.owe(now, kind, origin);
        }
        self.up_len[o] += 1;
        self.up.push_back(CausalMsg {
            origin,
            seq,
            vt,
            agreed: wire.agreed,
            payload: wire.payload.clone(),
        });
        self.history[o].insert(seq, wire);
        // Its vector time may make any origin's messages stable.
        for q in 0..self.cfg.procs as usize {
            self.collect_stable(q);
        }
    }

    /// Owes a heartbeat or a status from now (a heartbeat outranks a status); a status goes
    /// to `to`, among others.
    fn owe(&mut self, now: Instant, kind: Owed, to: ProcId) {
        self.status_to[to.index()] = true;
        self.owed = match self.owed {
            None => Some((kind, now)),
            Some((Owed::Status, since)) if kind == Owed::Heartbeat => Some((kind, since)),
            keep => keep,
        };
    }

    /// Forgets origin `o`'s messages every machine has delivered, and another origin's beyond
    /// `window` (its origin holds its own until they are stable, so NACKs still find them).
    fn collect_stable(&mut self, o: usize) {
        let stable = self.stable(o);
        let keep = if o == self.cfg.id.index() {
            usize::MAX
        } else {
            self.cfg.window as usize
        };
        while self.history[o]
            .first_key_value()
            .is_some_and(|(&s, _)| s <= stable || self.history[o].len() > keep)
        {
            self.history[o].pop_first();
        }
    }

    /// A NACK: answer with what this machine holds of `origin`'s `seq .. seq + count`.
    fn on_nack(
        &mut self,
        from: ProcId,
        origin: ProcId,
        seq: u64,
        count: u32,
        stats: &mut BaseStats,
    ) {
        let hi = seq.saturating_add(u64::from(count.min(NACK_COUNT_MAX)));
        let o = origin.index();
        let found: Vec<(u64, Wire)> = self.history[o]
            .range(seq..hi)
            .map(|(&s, w)| (s, w.clone()))
            .collect();
        if found.is_empty() {
            stats.dropped_duplicate += 1;
        }
        for (s, w) in found {
            stats.retransmitted += 1;
            self.emit(from, origin, s, &w);
        }
    }

    /// A status: `from` delivered these.
    fn on_status(&mut self, now: Instant, from: ProcId, delivered: &[CausalAck]) {
        let f = from.index();
        for a in delivered {
            let o = a.origin.index();
            // Never more than exists: a status cannot make a message stable before it is.
            let seq = a.seq.min(self.want[o].max(self.delivered[o]));
            self.known[f][o] = self.known[f][o].max(seq);
            self.reveal(now, a.origin, a.seq, from);
        }
        for o in 0..self.cfg.procs as usize {
            self.collect_stable(o);
        }
    }

    // --- Timers ------------------------------------------------------------------------------

    /// The timer: what is owed, NACKs for old gaps, own messages sent again. Returns true if a
    /// heartbeat is due; the caller sends it with [`CausalLayer::send`] (after checking
    /// [`CausalLayer::has_room`]).
    pub fn on_timeout(&mut self, now: Instant, stats: &mut BaseStats) -> bool {
        self.ask_for_gaps(now, stats);
        self.resend_unstable(now, stats);
        match self.owed {
            Some((Owed::Status, since)) if now >= since + self.cfg.idle_ns => {
                self.send_status(false);
                false
            }
            Some((Owed::Heartbeat, since)) if now >= since + self.cfg.idle_ns => {
                if self.has_room() {
                    stats.heartbeats_sent += 1;
                    true
                } else {
                    // The window is full of own messages: a status tells what a heartbeat
                    // would (so the others' windows, and then this one, can move), and the
                    // heartbeat is tried again after another idle time.
                    self.send_status(true);
                    self.owed = Some((Owed::Heartbeat, now));
                    false
                }
            }
            _ => false,
        }
    }

    /// NACKs each gap that has been missing for `retry_ns`, alternately from its origin and
    /// from the machine that revealed it.
    fn ask_for_gaps(&mut self, now: Instant, stats: &mut BaseStats) {
        for o in 0..self.cfg.procs as usize {
            let Some(gap) = self.gaps[o] else { continue };
            if now < gap.since + self.backoff(gap.tries) {
                continue;
            }
            let first = self.delivered[o] + 1;
            let Some(seq) = (first..=self.want[o]).find(|s| !self.waiting[o].contains_key(s))
            else {
                // Everything known is here, waiting on other origins' gaps.
                self.gaps[o] = None;
                continue;
            };
            let end = (seq..=self.want[o])
                .find(|s| self.waiting[o].contains_key(s))
                .unwrap_or(self.want[o] + 1);
            let count = (end - seq).min(u64::from(NACK_COUNT_MAX)) as u32;
            let origin = ProcId(o as u32);
            let dst = if !self.alive[o] {
                self.survivor(gap.tries)
            } else if !gap.tries.is_multiple_of(2) && gap.holder != self.cfg.id {
                gap.holder
            } else {
                origin
            };
            self.gaps[o] = Some(Gap {
                since: now,
                tries: gap.tries + 1,
                holder: gap.holder,
            });
            stats.nacks_sent += 1;
            self.out.push_back(BasePacket {
                src: self.cfg.id,
                dst,
                body: Body::CausalNack { origin, seq, count },
            });
        }
    }

    /// The `k`'th other machine of the view, in turn (a crashed machine's missing messages
    /// are asked of the survivors; one of them delivered each, §5.1's flush).
    fn survivor(&self, k: u32) -> ProcId {
        let others: Vec<u32> = (0..self.cfg.procs)
            .filter(|&r| r != self.cfg.id.0 && self.alive[r as usize])
            .collect();
        assert!(
            !others.is_empty(),
            "a crashed machine's gap with no survivor"
        );
        ProcId(others[k as usize % others.len()])
    }

    /// The wait before a retry after `tries` retries without progress: `retry_ns`, doubling
    /// with each, up to the heartbeat interval `idle_ns` — a machine that took in a duplicate
    /// or a message with nothing new to say answers within `idle_ns` (its status or
    /// heartbeat), so retrying faster than that only repeats the question. With the default
    /// `idle_ns` below `retry_ns` it is always `retry_ns`. The membership's suspicion timeout
    /// is at least 4 × both, so a retry that waits does not make a live machine look silent.
    fn backoff(&self, tries: u32) -> u64 {
        let cap = self.cfg.retry_ns.max(self.cfg.idle_ns);
        self.cfg
            .retry_ns
            .saturating_mul(1 << tries.min(32))
            .min(cap)
    }

    /// Sends the newest own message again to each machine that has not shown it delivered
    /// anything new of ours since the last send, once `retry_ns` passed.
    fn resend_unstable(&mut self, now: Instant, stats: &mut BaseStats) {
        if self.unstable_len() == 0 || now < self.sent_at + self.backoff(self.resend_tries) {
            return;
        }
        let mut resent = false;
        let me = self.cfg.id;
        let seq = self.sent;
        let wire = self.history[me.index()][&seq].clone();
        for d in 0..self.cfg.procs as usize {
            if d == me.index() || !self.alive[d] {
                continue;
            }
            let k = self.known[d][me.index()];
            if k < seq && k == self.resent_mark[d] {
                stats.retransmitted += 1;
                resent = true;
                self.emit(ProcId(d as u32), me, seq, &wire);
            }
            self.resent_mark[d] = k;
        }
        self.resend_tries = if resent { self.resend_tries + 1 } else { 0 };
        self.sent_at = now;
    }

    /// Tells what this machine delivered to the machines whose causal-only messages (or
    /// duplicates) it took in since its last message — their origins wait for it to call them
    /// stable — or, `to_all`, to every other machine.
    fn send_status(&mut self, to_all: bool) {
        // `acked` stays: the next message's ACKs are relative to the previous message, which
        // is how its receivers rebuild its vector time.
        self.owed = None;
        let delivered: Vec<CausalAck> = (0..self.cfg.procs)
            .filter(|&o| self.delivered[o as usize] > 0)
            .map(|o| CausalAck {
                origin: ProcId(o),
                seq: self.delivered[o as usize],
            })
            .collect();
        let to: Vec<u32> = (0..self.cfg.procs)
            .filter(|&d| {
                d != self.cfg.id.0
                    && self.alive[d as usize]
                    && (to_all || self.status_to[d as usize])
            })
            .collect();
        self.status_to.fill(false);
        for d in to {
            self.out.push_back(BasePacket {
                src: self.cfg.id,
                dst: ProcId(d),
                body: Body::CausalStatus {
                    delivered: delivered.clone(),
                },
            });
        }
    }

    /// Internal invariants (debug builds).
    pub fn invariants(&self) {
        let me = self.cfg.id.index();
        debug_assert_eq!(self.delivered[me], self.sent);
        debug_assert!(self.unstable_len() <= self.cfg.unstable_len_max);
        for o in 0..self.cfg.procs as usize {
            debug_assert!(self.want[o] >= self.delivered[o]);
            debug_assert!(self.waiting[o].len() as u64 <= self.cfg.window);
            debug_assert!(self.known[me][o] == self.delivered[o]);
            debug_assert!(self.delivered[o] <= self.limit[o]);
        }
    }
}
