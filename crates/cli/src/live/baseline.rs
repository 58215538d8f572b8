//! `onepipe up --protocol plato|plato-fixed|toto|allack`: the baselines' roles on the live
//! transport, one driver for all of them.
//!
//! The cluster runs unordered (no beacons, no barrier): each baseline packet is one plain
//! message ([`Endpoint::send_plain`]) carrying the baselines' wire encoding, so the datagrams,
//! coalescing, keys and sealing are the same as every live run's. Every process runs one role
//! ([`LiveRole`]):
//!
//! * `plato`, `plato-fixed`: a [`PlatoEndpoint`] (optimistic with `plato`, delivering only at
//!   the order with `plato-fixed`; docs/PLATO.md); process 0 runs the [`Sequencer`] too, at
//!   baseline id `procs` — PLATO's sequencer is a machine of its own, here it shares process
//!   0's socket and thread (said in the report).
//! * `toto`, `allack`: a [`TotoEndpoint`] (ToTo(n, φ) or all-ack over the causal layer;
//!   docs/TOTO.md). A killed process is suspected after `--toto-suspect` of silence and
//!   agreed crashed (§5); the others go on.
//!
//! A packet is believed only if its claimed sender is the authenticated sender of the plain
//! message that carried it (the sequencer's packets come from process 0); anything else, and
//! anything that does not decode, is counted and dropped. The roles repair loss themselves
//! (NACKs, resends): a plain message the transport could not take is dropped and counted.

use super::node::{say, Exit};
use super::records::{self, DeliveryRec, FailureRec, HookKind, HookRec, NodeRecords, SendRec};
use super::NodeArgs;
use bytes::Bytes;
use clap::{Args, ValueEnum};
use onepipe_baselines::common::{BaseEvent, Endpoint as BaseEndpoint};
use onepipe_baselines::dests::Dests;
use onepipe_baselines::packet::BasePacket;
use onepipe_baselines::plato::{PlatoConfig, PlatoEndpoint};
use onepipe_baselines::sequencer::{OrderBatchConfig, Sequencer, SequencerConfig};
use onepipe_baselines::toto::{toto::default_phi, Rule, TotoConfig, TotoEndpoint};
use onepipe_proto::drive;
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::optimistic::OptConfig;
use onepipe_proto::{Instant, ProcId};
use onepipe_runtime::clock::monotonic_ns;
use onepipe_runtime::endpoint::{Endpoint, Message};
use serde_json::json;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// The total-order protocol of a live run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LiveProtocol {
    /// 1Pipe (the default).
    #[default]
    #[value(name = "1pipe")]
    OnePipe,
    /// PLATO: optimistic delivery with revoke and confirm over a fixed sequencer that sends the
    /// order --plato-k places per packet.
    Plato,
    /// PLATO's data path delivering only when the order arrives: its fixed-sequencer baseline.
    PlatoFixed,
    /// ToTo(n, φ): agreed multicast with early delivery over a causal layer (docs/TOTO.md).
    Toto,
    /// All-ack on the same causal layer: deliver once every machine was heard from.
    #[value(name = "allack")]
    AllAck,
}

impl LiveProtocol {
    /// Its name, as the flag takes it.
    pub fn name(self) -> &'static str {
        match self {
            LiveProtocol::OnePipe => "1pipe",
            LiveProtocol::Plato => "plato",
            LiveProtocol::PlatoFixed => "plato-fixed",
            LiveProtocol::Toto => "toto",
            LiveProtocol::AllAck => "allack",
        }
    }
}

/// The protocol flags shared by `up` and `node`.
#[derive(Args, Clone, Debug)]
pub struct ProtocolArgs {
    /// Total-order protocol. The baselines (`plato`, `plato-fixed`, `toto`, `allack`) run on
    /// the unordered transport, best effort, all-to-all; with `plato*` process 0 is also the
    /// sequencer (docs/PLATO.md, docs/TOTO.md).
    #[arg(long, value_enum, default_value = "1pipe")]
    pub protocol: LiveProtocol,
    /// PLATO: places per sequencing packet, PLATO's k.
    #[arg(long, default_value_t = 10)]
    pub plato_k: usize,
    /// PLATO: a partial sequencing batch leaves this long after its first place.
    #[arg(long, default_value = "100us", value_parser = super::duration)]
    pub plato_flush: u64,
    /// PLATO: Δ, the arrival gap below which two messages are suspected of disorder (the start
    /// value when adaptive).
    #[arg(long, default_value = "50us", value_parser = super::duration)]
    pub plato_delta: u64,
    /// PLATO: adapt Δ (PLATO §5).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub plato_adaptive: bool,
    /// ToTo: the threshold φ, n/2 ≤ φ < n (default ⌈n/2⌉, the fastest).
    #[arg(long)]
    pub toto_phi: Option<u32>,
    /// ToTo, all-ack: silence after delivering something before a machine sends a heartbeat
    /// (the paper has none; without it delivery waits for others to speak).
    #[arg(long, default_value = "200us", value_parser = super::duration)]
    pub toto_heartbeat: u64,
    /// ToTo, all-ack: wait before a missing message is asked for, and before an own message is
    /// sent again to a machine that has not shown it delivered (doubling while nothing changes).
    #[arg(long, default_value = "2ms", value_parser = super::duration)]
    pub toto_retry: u64,
    /// ToTo, all-ack: silence of a machine, while someone waits on it, before it is suspected
    /// and agreed crashed (§5.1). A machine paused longer is excluded for good.
    #[arg(long, default_value = "500ms", value_parser = super::duration)]
    pub toto_suspect: u64,
}

impl ProtocolArgs {
    /// A baseline on the unordered transport (not 1Pipe).
    pub fn baseline(&self) -> bool {
        self.protocol != LiveProtocol::OnePipe
    }

    /// PLATO or its fixed sequencer.
    pub fn plato(&self) -> bool {
        matches!(
            self.protocol,
            LiveProtocol::Plato | LiveProtocol::PlatoFixed
        )
    }

    /// ToTo or all-ack.
    pub fn toto(&self) -> bool {
        matches!(self.protocol, LiveProtocol::Toto | LiveProtocol::AllAck)
    }

    /// Checks the flags; the message names the flag.
    pub fn check(&self) -> Result<(), String> {
        let k_max = onepipe_baselines::packet::ORDER_BATCH_LEN_MAX;
        if self.plato_k == 0 || self.plato_k > k_max {
            return Err(format!("--plato-k: must be 1 to {k_max}"));
        }
        if self.plato_flush == 0 || self.plato_delta == 0 {
            return Err("--plato-flush, --plato-delta: must be positive".into());
        }
        if self.toto_heartbeat == 0 || self.toto_retry == 0 {
            return Err("--toto-heartbeat, --toto-retry: must be positive".into());
        }
        let floor =
            onepipe_baselines::toto::member::suspect_floor_ns(self.toto_heartbeat, self.toto_retry);
        if self.toto_suspect < floor {
            return Err(format!(
                "--toto-suspect: must be at least 4 × the longer of --toto-heartbeat and --toto-retry ({floor} ns), or live machines are suspected"
            ));
        }
        Ok(())
    }

    /// Checks φ against a group of `procs`; the message names the flag.
    pub fn check_phi(&self, procs: u32) -> Result<(), String> {
        match (self.protocol, self.toto_phi) {
            (LiveProtocol::Toto, Some(phi)) => onepipe_baselines::toto::toto::check_phi(phi, procs)
                .map_err(|e| format!("--toto-phi: {e}")),
            _ => Ok(()),
        }
    }

    /// The command-line flags that give a node these settings.
    pub fn argv(&self) -> Vec<String> {
        let mut v: Vec<(&str, String)> = vec![
            ("--protocol", self.protocol.name().to_string()),
            ("--plato-k", self.plato_k.to_string()),
            ("--plato-flush", format!("{}ns", self.plato_flush)),
            ("--plato-delta", format!("{}ns", self.plato_delta)),
            ("--plato-adaptive", self.plato_adaptive.to_string()),
            ("--toto-heartbeat", format!("{}ns", self.toto_heartbeat)),
            ("--toto-retry", format!("{}ns", self.toto_retry)),
            ("--toto-suspect", format!("{}ns", self.toto_suspect)),
        ];
        if let Some(phi) = self.toto_phi {
            v.push(("--toto-phi", phi.to_string()));
        }
        v.into_iter()
            .flat_map(|(k, v)| [k.to_string(), v])
            .collect()
    }
}

/// A missing message or order gap is NACKed after this long: a loopback round trip between
/// processes that share two cores is tens to hundreds of microseconds, not the simulator's few.
const NACK_TIMEOUT_NS: u64 = 1_000_000;

/// The sequencer repeats its order stream's tail this often while there is news (the
/// simulator's 20 µs would be a plain message per receiver every 20 µs).
const SYNC_INTERVAL_NS: u64 = 1_000_000;

/// Drained: nothing came and nothing was delivered for this long after sending stopped, and
/// the role has nothing in flight ([`LiveRole::settled`]).
const QUIET_NS: u64 = 300_000_000;

/// Most messages taken from the inbox per turn.
const BATCH_LEN: usize = 256;

/// What the live driver needs of a baseline role beyond the baselines' `Endpoint`.
pub(super) trait LiveRole: BaseEndpoint {
    /// Nothing pending, unacknowledged or under repair: once quiet too, the run is drained
    /// here.
    fn settled(&self) -> bool;
}

impl LiveRole for PlatoEndpoint {
    fn settled(&self) -> bool {
        // What PLATO still waits for (an order, a copy) is repaired by NACKs, which are
        // traffic: quiet is enough.
        true
    }
}

impl LiveRole for TotoEndpoint {
    fn settled(&self) -> bool {
        self.is_idle()
    }
}

/// One process of a live baseline run.
struct BaseNode<R: LiveRole> {
    ep: Endpoint,
    me: u32,
    procs: u32,
    role: R,
    /// PLATO, on process 0: the sequencer (baseline id `procs`).
    sequencer: Option<Sequencer>,
    /// Packets between the two roles of process 0, which never leave it.
    local: VecDeque<BasePacket>,
    recs: NodeRecords,
    /// (sender, its message id) → the workload's sequence number, of messages handed over
    /// optimistically and not yet confirmed or revoked.
    names: BTreeMap<(u32, u64), u64>,
    next_seq: u64,
    /// Counters for the summary.
    invalid: u64,
    refused: u64,
    transport_refused: u64,
    lost: u64,
    malformed: u64,
    /// When something last came in or was delivered (monotonic ns).
    last_activity_ns: u64,
    scratch: Vec<u8>,
}

fn now() -> Instant {
    Instant(monotonic_ns())
}

/// PLATO's endpoint, and on process 0 its sequencer.
fn plato_roles(args: &NodeArgs, me: u32, procs: u32) -> (PlatoEndpoint, Option<Sequencer>) {
    let p = &args.protocol;
    let mut pc = PlatoConfig::new(ProcId(me), procs);
    pc.opt = (p.protocol == LiveProtocol::Plato).then(|| match p.plato_adaptive {
        true => OptConfig::adaptive(p.plato_delta),
        false => OptConfig::fixed(p.plato_delta),
    });
    pc.nack_timeout_ns = NACK_TIMEOUT_NS;
    pc.orphan_timeout_ns = pc.orphan_timeout_ns.max(100 * p.plato_flush);
    let sequencer = (me == 0).then(|| {
        let mut sc = SequencerConfig::new(procs);
        sc.sync_interval_ns = SYNC_INTERVAL_NS;
        sc.order_batch = Some(OrderBatchConfig {
            k: p.plato_k,
            flush_ns: p.plato_flush,
        });
        Sequencer::new(sc)
    });
    (PlatoEndpoint::new(pc), sequencer)
}

/// ToTo's or all-ack's machine `me`.
fn toto_role(args: &NodeArgs, me: u32, procs: u32) -> Result<TotoEndpoint, Exit> {
    let p = &args.protocol;
    let rule = match p.protocol {
        LiveProtocol::AllAck => Rule::AllAck,
        _ => Rule::Toto {
            phi: p.toto_phi.unwrap_or_else(|| default_phi(procs)),
        },
    };
    let mut tc = TotoConfig::new(ProcId(me), procs, rule);
    tc.causal.idle_ns = p.toto_heartbeat;
    tc.causal.retry_ns = p.toto_retry;
    tc.member.suspect_ns = p.toto_suspect;
    TotoEndpoint::new(tc).map_err(|e| Exit::Failed(format!("--toto-phi: {e}")))
}

impl<R: LiveRole> BaseNode<R> {
    fn new(ep: Endpoint, role: R, sequencer: Option<Sequencer>) -> BaseNode<R> {
        let (me, procs) = (ep.proc().0, ep.cluster().procs());
        BaseNode {
            role,
            sequencer,
            local: VecDeque::new(),
            recs: NodeRecords::default(),
            names: BTreeMap::new(),
            next_seq: 0,
            invalid: 0,
            refused: 0,
            transport_refused: 0,
            lost: 0,
            malformed: 0,
            last_activity_ns: monotonic_ns(),
            scratch: Vec::new(),
            ep,
            me,
            procs,
        }
    }

    /// Sends the workload's next broadcast.
    fn send(&mut self, msg_size: usize) {
        let t = monotonic_ns();
        let seq = self.next_seq;
        let payload = records::payload(seq, t, msg_size);
        match self.role.send(Instant(t), payload, Dests::all()) {
            Ok(()) => {
                self.next_seq += 1;
                self.recs.sends.push(SendRec {
                    proc: self.me,
                    seq,
                    ts: 0,
                    send_ns: t,
                    reliable: false,
                    dsts: None,
                });
            }
            Err(_) => self.refused += 1,
        }
    }

    /// One turn: what came in, what is due, what the roles want sent. Whether anything came.
    fn turn(&mut self) -> bool {
        let mut batch: Vec<Message> = Vec::with_capacity(BATCH_LEN);
        self.ep.plain().poll(BATCH_LEN, |m| batch.push(m));
        let came = !batch.is_empty();
        for m in batch {
            self.on_message(m);
        }
        let t = now();
        if self.role.poll_timeout().is_some_and(|d| d <= t) {
            self.role.handle(t, Input::Timeout);
        }
        if let Some(s) = self.sequencer.as_mut() {
            if s.poll_timeout().is_some_and(|d| d <= t) {
                s.handle(t, Input::Timeout);
            }
        }
        self.drain();
        if came {
            self.last_activity_ns = monotonic_ns();
        }
        came
    }

    /// A plain message: one baseline packet, believed only from its claimed sender.
    fn on_message(&mut self, m: Message) {
        let Ok((p, used)) = BasePacket::decode_bytes(&m.payload) else {
            self.invalid += 1;
            return;
        };
        let claimed = match p.src.0 {
            s if s == self.procs => 0,
            s => s,
        };
        if used != m.payload.len() || claimed != m.src.0 {
            self.invalid += 1;
            return;
        }
        self.route(p);
    }

    /// Hands `p` to the role it is for.
    fn route(&mut self, p: BasePacket) {
        let t = now();
        let input = |packet| Input::Packet {
            port: onepipe_baselines::common::PORT,
            packet,
        };
        if p.dst.0 == self.me {
            self.role.handle(t, input(p));
        } else if let (true, Some(s)) = (p.dst.0 == self.procs, self.sequencer.as_mut()) {
            s.handle(t, input(p));
        } else {
            self.invalid += 1;
        }
    }

    fn sequencer(&mut self) -> &mut Sequencer {
        self.sequencer.as_mut().expect("drained only where it runs")
    }

    /// Sends and records what the roles put out, until both are quiet.
    fn drain(&mut self) {
        loop {
            let mut any = drive::drain_in(self, |n| &mut n.role, BaseNode::output);
            if self.sequencer.is_some() {
                any += drive::drain_in(self, Self::sequencer, BaseNode::output);
            }
            while let Some(p) = self.local.pop_front() {
                any += 1;
                self.route(p);
            }
            if any == 0 {
                return;
            }
        }
    }

    fn output(&mut self, o: Output<BasePacket, BaseEvent>) {
        match o {
            Output::Send { packet, .. } => {
                let host = match packet.dst.0 {
                    d if d == self.procs => 0,
                    d => d,
                };
                if host == self.me {
                    self.local.push_back(packet);
                    return;
                }
                self.scratch.clear();
                packet.encode(&mut self.scratch);
                let bytes = Bytes::copy_from_slice(&self.scratch);
                if self.ep.send_plain([(ProcId(host), bytes)]).is_err() {
                    // The roles repair it (NACK, resend) like a loss on the wire.
                    self.transport_refused += 1;
                }
            }
            Output::Event(e) => self.on_event(e),
            Output::Mgmt { .. } => {}
        }
    }

    fn on_event(&mut self, e: BaseEvent) {
        let t = monotonic_ns();
        self.last_activity_ns = t;
        let hook = |kind, src: ProcId, seq| HookRec {
            kind,
            src: src.0,
            dst: self.me,
            seq,
            at_ns: t,
            usable_ns: 0,
            sent_ns: 0,
            reliable: false,
            rollback: false,
        };
        match e {
            BaseEvent::Deliver {
                src,
                seq_or_ts,
                payload,
                ..
            } => self.delivered(t, src, seq_or_ts, &payload),
            BaseEvent::OptDeliver {
                src,
                msg_id,
                usable_at,
                payload,
                ..
            } => {
                let (seq, sent_ns) = records::read_payload(&payload).unwrap_or((u64::MAX, 0));
                self.names.insert((src.0, msg_id), seq);
                self.recs.hooks.push(HookRec {
                    usable_ns: usable_at.0,
                    sent_ns,
                    ..hook(HookKind::Deliver, src, seq)
                });
            }
            BaseEvent::Revoke {
                src,
                msg_id,
                rollback,
                ..
            } => {
                let seq = self.names.remove(&(src.0, msg_id)).unwrap_or(u64::MAX);
                self.recs.hooks.push(HookRec {
                    rollback,
                    ..hook(HookKind::Revoke, src, seq)
                });
            }
            BaseEvent::Confirm { src, msg_id, .. } => {
                let seq = self.names.remove(&(src.0, msg_id)).unwrap_or(u64::MAX);
                self.recs.hooks.push(hook(HookKind::Confirm, src, seq));
            }
            BaseEvent::Lost { count, .. } => {
                self.lost += count;
                self.recs.failures.push(FailureRec {
                    dst: self.me,
                    ts: count,
                    reason: LOST_REASON,
                    at_ns: t,
                });
            }
            // A send refused later (the sequencer's queue): never ordered, delivered nowhere.
            _ => {}
        }
    }

    /// A final delivery at `t` of `src`'s message at place `gseq`.
    fn delivered(&mut self, t: u64, src: ProcId, gseq: u64, payload: &[u8]) {
        let Some((seq, sent_ns)) = records::read_payload(payload) else {
            self.malformed += 1;
            return;
        };
        self.recs.deliveries.push(DeliveryRec {
            src: src.0,
            dst: self.me,
            seq,
            ts: gseq,
            barrier: 0,
            delivered_ts: 0,
            recv_ns: t,
            latency_ns: t.saturating_sub(sent_ns),
            reliable: false,
            psn: 0,
        });
    }

    /// Waits for something to do, at most until the roles' next timer, `until` and 1 ms.
    fn idle(&self, seen: u64, until: u64) {
        let t = monotonic_ns();
        let next = [
            self.role.poll_timeout(),
            self.sequencer.as_ref().and_then(Node::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .map(|d| d.0.saturating_sub(t))
        .min()
        .unwrap_or(u64::MAX)
        .min(1_000_000)
        .min(until.saturating_sub(t));
        if next > 0 {
            self.ep.wait_activity(seen, Duration::from_nanos(next));
        }
    }

    /// Writes the records and a summary beside them.
    fn write(&mut self, args: &NodeArgs) -> Result<(), Exit> {
        let Some(path) = &args.out else {
            return Ok(());
        };
        let recs = std::mem::take(&mut self.recs);
        recs.write(path)
            .map_err(|e| Exit::Failed(format!("cannot write {}: {e}", path.display())))?;
        let st = self.ep.stats();
        let r = self.role.stats();
        let summary = json!({
            "proc": self.me,
            "sends_refused_full": self.refused,
            "recv_refused_full": st.recv_refused_full,
            "malformed_payloads": self.malformed,
            "invalid_packets": self.invalid,
            "transport_refused": self.transport_refused,
            "lost": self.lost,
            "nacks": r.nacks_sent,
            "retransmits": self.sequencer.as_ref().map_or(0, |s| s.stats().retransmitted),
            "delivered_plain": st.host.delivered_plain,
            // The sequencer's count of messages it ordered for each receiver (process 0).
            "ordered_for": self.sequencer.as_ref().map(|s| {
                (0..self.procs).map(|p| s.ordered_for(ProcId(p))).collect::<Vec<u64>>()
            }),
            "driver": st.driver.counters(),
            "cpu_ns": onepipe_runtime::process_cpu_ns(),
        });
        let json_path = path.with_extension("json");
        std::fs::write(&json_path, summary.to_string())
            .map_err(|e| Exit::Failed(format!("cannot write {}: {e}", json_path.display())))
    }
}

/// `FailureRec::reason` of a PLATO `Lost` report (`ts` holds the count): no `NakReason` has it.
pub const LOST_REASON: u8 = u8::MAX;

/// Where a live PLATO node is in its run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Sending until the end of --duration.
    Sending,
    /// Sent; waiting for `up`'s `drain` order.
    Sent,
    /// Waiting for quiet, or the drain limit (monotonic ns).
    Draining(u64),
    /// Records written; serving the others until `stop`.
    Done,
}

/// A node of a live baseline run: joined, waits for `start`, sends, drains, writes its
/// records, and serves the others (with PLATO, process 0 is their sequencer) until `stop`.
pub(super) fn run_node(
    args: &NodeArgs,
    ep: Endpoint,
    stop: &AtomicBool,
    orders: Option<&Receiver<String>>,
) -> Result<(), Exit> {
    let (me, procs) = (ep.proc().0, ep.cluster().procs());
    if args.protocol.plato() {
        let (role, sequencer) = plato_roles(args, me, procs);
        run(args, BaseNode::new(ep, role, sequencer), stop, orders)
    } else {
        let role = toto_role(args, me, procs)?;
        run(args, BaseNode::new(ep, role, None), stop, orders)
    }
}

/// Drives `n` through its run, then leaves the cluster.
fn run<R: LiveRole>(
    args: &NodeArgs,
    mut n: BaseNode<R>,
    stop: &AtomicBool,
    orders: Option<&Receiver<String>>,
) -> Result<(), Exit> {
    let r = drive(args, &mut n, stop, orders);
    let BaseNode { ep, .. } = n;
    ep.leave();
    r
}

/// [`run_node`]'s loop.
fn drive<R: LiveRole>(
    args: &NodeArgs,
    n: &mut BaseNode<R>,
    stop: &AtomicBool,
    orders: Option<&Receiver<String>>,
) -> Result<(), Exit> {
    let t0 = super::node::expect_order(orders, stop, "start")?
        .unwrap_or_else(|| monotonic_ns() + 10_000_000);
    let end = t0 + args.work.duration;
    let interval = (1e9 / args.work.rate).max(1.0) as u64;
    let mut next_send = t0;
    let mut phase = Phase::Sending;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Err(Exit::Stopped);
        }
        let seen = n.ep.activity();
        let t = monotonic_ns();
        while phase == Phase::Sending && next_send <= t && next_send < end {
            n.send(args.work.msg_size);
            next_send += interval;
        }
        let came = n.turn();
        phase = match phase {
            Phase::Sending if t >= end => match orders {
                Some(_) => {
                    say(&format!("sent 0 {}", n.recs.sends.len()));
                    Phase::Sent
                }
                None => Phase::Draining(t + args.drain),
            },
            Phase::Sent => match orders.and_then(|o| o.try_recv().ok()) {
                Some(line) if line.starts_with("drain") => Phase::Draining(t + args.drain),
                Some(line) if line.trim() == "stop" => return Err(Exit::Stopped),
                _ => Phase::Sent,
            },
            Phase::Draining(limit) => {
                let quiet = t.saturating_sub(n.last_activity_ns) >= QUIET_NS && n.role.settled();
                if quiet || t >= limit {
                    n.write(args)?;
                    say(&format!("done {quiet}"));
                    if orders.is_none() {
                        return Ok(());
                    }
                    Phase::Done
                } else {
                    phase
                }
            }
            Phase::Done => match orders.and_then(|o| o.try_recv().ok()) {
                Some(line) if line.trim() == "stop" => return Ok(()),
                _ => Phase::Done,
            },
            p => p,
        };
        if !came {
            let until = match phase {
                Phase::Sending => next_send,
                _ => u64::MAX,
            };
            n.idle(seen, until);
        }
    }
}
