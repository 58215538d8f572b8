//! Applications on a plain network, on the simulation engine ([`crate::engine`]): the baselines of
//! the applications (§7.3: the non-transactional store and TPC-C, the FaRM-like store, TPC-C's
//! 2PL and OCC).
//!
//! **Processes and cores.** The processes of a host share one core — one FIFO of inputs, one
//! busy time — as a 1Pipe host's processes share its host role's, with the 1Pipe host's costs:
//! `host_recv_ns` + `host_deliver_ns` per message taken in, `host_send_ns` per message sent.
//! The benches give that core `procs_per_host` cores' speed
//! ([`NetworkConfig::pool_host_cpu`](crate::config::NetworkConfig::pool_host_cpu), for 1Pipe
//! alike): a core's capacity per process, as each process has its own threads in the paper's
//! testbed (§7.1), pooled so a busy process (a hot key's server) may use what its
//! neighbours leave. [`DirectReport::cpu_busy`] says how busy the cores were.
//!
//! **Messages** go straight to their destination — no timestamps, no barriers — over the same
//! topology, ECMP routing and links; switches are plain forwarders; a message between processes
//! of one host skips the network (still a send and a receive on its core). On a lossy network
//! (`--loss`, `--dup`, `--reorder-prob`) they ride a reliable transport ([`Transport`]).
//! The processes' clocks are exact: the baselines order nothing by them, and the times they
//! report (latency; the FaRM-like store's serialization stamps) are true time.
//!
//! A host crash (`--crash-host`) stops its processes for good: what reaches them is dropped
//! unacknowledged, their timers die, and the transport abandons its pairs with them (a
//! connection to a dead peer). Nobody is told: a baseline finds its dead peers by its own
//! timeouts (MultiPaxos's heartbeat). Restarts, clock steps and the controller's faults are
//! 1Pipe's and do not apply here.

use crate::apps::{ht_set, kv_processes, repl_set, tpcc_set, AppReport, AppSet, KvSet};
use crate::config::{AppSpec, ConfigError, SimConfig};
use crate::engine::{self, Core, CoreInput, Costs, Engine, Protocol, RoleSt, Seeds};
use crate::metrics::TraceHash;
use crate::queue::{EventQueue, QuaternaryHeap, QueueKind, RadixHeap, SimTime, StdBinaryHeap};
use bytes::Bytes;
use onepipe_apps::hashtable::HtMode;
use onepipe_apps::kv::farm::FarmProcess;
use onepipe_apps::kv::nontx::NonTxProcess;
use onepipe_apps::kv::TxnApp;
use onepipe_apps::repl::chain::ChainProcess;
use onepipe_apps::repl::paxos::{PaxosConfig, PaxosProcess};
use onepipe_apps::repl::ReplApp;
use onepipe_apps::tpcc::{TpccApp, TpccLockProcess, TpccOccProcess, TpccProcess};
use onepipe_proto::app::{AppIo, AppSend};
use onepipe_proto::{drive, Input};
use onepipe_proto::{Instant, ProcId, Timestamp};
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::Arc;

/// The systems that run on direct messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectSystem {
    /// The non-transactional store: the upper bound (Fig. 14's NonTX).
    NonTx,
    /// The FaRM-like store: OCC with locking, validation and two-phase commit (Fig. 14's FaRM).
    Farm,
    /// TPC-C with two-phase locking, two-phase commit and primary-backup replication (Fig. 15).
    Lock,
    /// TPC-C with OCC, two-phase commit and primary-backup replication (Fig. 15).
    Occ,
    /// The replicated key-value service by primary-backup in a chain (Ceph's OSDs, §7.3.4).
    Chain,
    /// The replicated key-value service by MultiPaxos with batching and pipelining.
    Paxos,
    /// The hash table on plain one-sided verbs (§7.3.3's baseline): a fence between writing a
    /// pair and swinging the bucket head, leader-follower replication, lookups at the leader.
    Rdma,
}

impl DirectSystem {
    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DirectSystem::NonTx => "nontx",
            DirectSystem::Farm => "farm",
            DirectSystem::Lock => "2pl",
            DirectSystem::Occ => "occ",
            DirectSystem::Chain => "chain",
            DirectSystem::Paxos => "paxos",
            DirectSystem::Rdma => "rdma",
        }
    }

    /// It states a serialization order the checker can replay.
    pub fn checked(self) -> bool {
        match self {
            DirectSystem::NonTx => false,
            DirectSystem::Farm
            | DirectSystem::Lock
            | DirectSystem::Occ
            | DirectSystem::Chain
            | DirectSystem::Paxos
            | DirectSystem::Rdma => true,
        }
    }

    /// The application it runs (`kv`, `tpcc`), `None` for both.
    fn app(self) -> Option<&'static str> {
        match self {
            DirectSystem::NonTx => None,
            DirectSystem::Farm => Some("kv"),
            DirectSystem::Lock | DirectSystem::Occ => Some("tpcc"),
            DirectSystem::Chain | DirectSystem::Paxos => Some("replkv"),
            DirectSystem::Rdma => Some("hashtable"),
        }
    }
}

/// Bytes a message takes on a link beyond its payload: Ethernet, IP and UDP, then its source and
/// destination.
pub const MESSAGE_OVERHEAD_LEN: usize = onepipe_proto::wire::FRAMING_LEN + 8;

/// A message on the wire.
#[derive(Clone, Debug)]
pub struct DirectPacket {
    src: u32,
    dst: u32,
    /// What the sender was told its send's timestamp was (its clock at the send).
    ts: u64,
    /// With the transport ([`Transport`]): the message's number on its (sender, receiver) pair,
    /// or for an acknowledgement the next number the receiver expects.
    seq: u32,
    /// An acknowledgement of the transport (no payload).
    ack: bool,
    payload: Bytes,
}

/// An event of the direct-messaging protocol.
#[derive(Clone, Copy, Debug)]
pub enum DirectEv {
    /// The transport's retransmission timer of the pair (sender, receiver).
    Rto {
        /// The sender.
        src: u32,
        /// The receiver.
        dst: u32,
    },
}

/// On a lossy network (`--loss`, `--dup`, `--reorder-prob`), the baselines' messages go over a
/// reliable transport, as RDMA's reliable connections carry FaRM's (the NIC's work: no CPU is
/// charged for it): per (sender, receiver) pair, numbered messages delivered once and in order
/// (early ones held), cumulative acknowledgements for every data packet, and retransmission of
/// the oldest unacknowledged message `--rto` after it was sent, the timeout doubling per timeout
/// in a row (as TCP's, so a congested path is not flooded with copies). On a lossless network
/// nothing is lost, reordered or duplicated, and the transport is left out (no acknowledgement
/// traffic).
#[derive(Default)]
pub struct Transport {
    pairs: HashMap<(u32, u32), Pair>,
    rto_ns: u64,
    /// Messages sent again.
    pub retransmits: u64,
    /// Acknowledgements sent.
    pub acks: u64,
    /// Copies dropped (duplicates, or early ones already held).
    pub duplicates: u64,
}

/// One (sender, receiver) pair's transport state, both ends.
#[derive(Default)]
struct Pair {
    next_seq: u32,
    /// Sender: unacknowledged messages by number: (stamp, payload, last sent).
    unacked: BTreeMap<u32, (u64, Bytes, SimTime)>,
    timer: bool,
    /// Timeouts in a row since the acknowledgement last moved.
    backoff: u32,
    /// Receiver: the next number to deliver, and early arrivals.
    expected: u32,
    early: BTreeMap<u32, (u64, Bytes)>,
}

/// An event of a direct-messaging run.
pub type Ev = engine::Ev<DirectEv>;

/// A simulated data center running applications on direct messages.
pub type DirectWorld<Q> = Engine<Direct, Q>;

/// The state of a direct-messaging run: each process's application, the metrics.
pub struct Direct {
    system: DirectSystem,
    procs: u32,
    pph: u32,
    apps: Box<dyn AppSet>,
    route_seed: u64,
    transport: Option<Transport>,
    trace: TraceHash,
    messages: u64,
    /// Per host: when it crashed (`--crash-host`), if it does.
    crash_at: Vec<Option<SimTime>>,
}

impl Direct {
    /// Process `proc`'s host has crashed by `t`.
    fn dead(&self, proc: u32, t: SimTime) -> bool {
        self.crash_at
            .get((proc / self.pph) as usize)
            .copied()
            .flatten()
            .is_some_and(|at| t >= at)
    }
}

impl Protocol for Direct {
    type Packet = DirectPacket;
    type Ev = DirectEv;
    type Input = Infallible;

    fn wire_len(p: &DirectPacket) -> usize {
        MESSAGE_OVERHEAD_LEN + p.payload.len()
    }
    fn background(_: &DirectPacket) -> bool {
        false
    }
    fn counted(_: &DirectPacket) -> bool {
        true
    }
    fn lossy(&self, _: &SimConfig, _: &DirectPacket) -> bool {
        true
    }
    fn procs(&self) -> u32 {
        self.procs
    }
    fn senders(&self) -> u32 {
        0
    }
    fn sender(&self, proc: u32) -> u32 {
        proc
    }
    fn poll_timeout(&self, role: u32) -> Option<Instant> {
        self.apps.poll_timeout(role as usize)
    }
    fn down(&self, role: u32, t: SimTime) -> bool {
        self.dead(role, t)
    }
    fn arrive<Q: EventQueue<Ev>>(e: &mut DirectWorld<Q>, t: SimTime, link: u32, slot: u32) {
        let to = e.links[link as usize].to;
        if to < e.topo.hosts() {
            if e.proto.transport.is_some() {
                e.transport_arrive(t, slot);
                return;
            }
            let dst = e.packets.get(slot).dst;
            e.input(t, dst, CoreInput::Packet(slot));
            return;
        }
        let out = e.next_link(to, slot);
        e.put_on_link(out, slot, t);
    }
    fn process<Q: EventQueue<Ev>>(
        e: &mut DirectWorld<Q>,
        t: SimTime,
        role: u32,
        input: CoreInput<Infallible>,
    ) {
        e.app_process(t, role, input);
    }
    fn event<Q: EventQueue<Ev>>(e: &mut DirectWorld<Q>, t: SimTime, x: DirectEv) {
        match x {
            DirectEv::Rto { src, dst } => e.on_rto(t, src, dst),
        }
    }
}

impl<Q: EventQueue<Ev>> DirectWorld<Q> {
    /// Builds the network and `system`'s processes for `cfg` (valid, with an application).
    pub fn new(cfg: SimConfig, system: DirectSystem, queue: Q) -> Result<DirectWorld<Q>, String> {
        let topo = Arc::new(cfg.net.topology.build()?);
        let pph = cfg.net.procs_per_host;
        let procs = topo.hosts() * pph;
        let seeds = Seeds::new(cfg.seed);
        let costs = Costs {
            recv_ns: cfg.net.host_recv_ns,
            send_ns: cfg.net.host_send_ns,
            deliver_ns: cfg.net.host_deliver_ns,
        };
        // The baselines read no clock for ordering: their processes' clocks are exact, so times
        // they report (latency, the serialization stamps of the FaRM-like store) are true time.
        let clock_params = crate::clock::ClockParams {
            skew_ns: 0.0,
            drift_ppm: 0.0,
            ..engine::clock_params(&cfg)
        };
        // Process p is role p on its host's core, p / pph. The applications send by themselves
        // (no workload sends queue at the cores): the send limit is the 1Pipe host's, unused.
        let roles = (0..procs)
            .map(|p| {
                let clock = crate::clock::Clock::new(clock_params, seeds.clock, p / pph);
                RoleSt::new(clock, Some(p / pph))
            })
            .collect();
        let cpus = (0..topo.hosts())
            .map(|_| Core::new(costs, engine::HOST_QUEUE_SEND_MAX, false))
            .collect();
        let apps = direct_apps(&cfg, system, procs)?;
        let links = engine::build_links(&cfg, &topo);
        let proto = Direct {
            system,
            procs,
            pph,
            apps,
            route_seed: seeds.route,
            transport: (cfg.faults.loss_rate > 0.0
                || cfg.faults.dup_rate > 0.0
                || cfg.faults.reorder_prob > 0.0)
                .then(|| Transport {
                    rto_ns: cfg.protocol.rto_ns,
                    ..Transport::default()
                }),
            trace: TraceHash::default(),
            messages: 0,
            crash_at: {
                let mut at = vec![None; topo.hosts() as usize];
                for &(h, t) in &cfg.faults.crashes {
                    if let Some(a) = at.get_mut(h as usize) {
                        *a = Some(a.map_or(t, |x: SimTime| x.min(t)));
                    }
                }
                at
            },
        };
        Ok(Engine::assemble(
            cfg, topo, queue, seeds, proto, roles, cpus, links,
        ))
    }

    /// The output link at switch node `n` for the packet in `slot`.
    fn next_link(&self, n: u32, slot: u32) -> u32 {
        let p = self.packets.get(slot);
        let (sh, dh) = (p.src / self.proto.pph, p.dst / self.proto.pph);
        self.ecmp_link(n, sh, dh, self.proto.route_seed)
    }

    /// One input at process `p`'s core: the application takes it, then its sends go out, each
    /// charged and answered with its stamp before the next is asked for.
    fn app_process(&mut self, t: SimTime, p: u32, input: CoreInput<Infallible>) {
        let local = self.local(p, t);
        let costs = self.core(p).costs;
        let mut cursor = t;
        let input = match input {
            CoreInput::Packet(slot) => {
                cursor += costs.recv_ns + costs.deliver_ns;
                let m = self.take_packet(slot);
                // Plain messages carry no order: `ts` is what the sender was told at its send
                // (its exact clock then).
                let deliver = AppIo::Deliver {
                    src: ProcId(m.src),
                    ts: Timestamp::new(m.ts),
                    reliable: true,
                    payload: m.payload,
                };
                Some(deliver.input())
            }
            CoreInput::Timeout => Some(Input::Timeout),
            CoreInput::Send { .. } => None,
            CoreInput::Proto(x) => match x {},
        };
        if let Some(input) = input {
            self.proto.apps.node(p as usize).handle(local, input);
        }
        drive::drain_in(
            self,
            |e| e.proto.apps.node(p as usize),
            |e, o| {
                let s = AppSend::from_output(o);
                for (dst, payload) in s.parts {
                    cursor += costs.send_ns;
                    e.send_message(cursor, p, dst.0, local.as_nanos(), payload);
                }
                let sent = AppIo::Sent {
                    tag: s.tag,
                    ts: Timestamp::new(local.as_nanos()),
                };
                e.proto.apps.node(p as usize).handle(local, sent.input());
            },
        );
        let trace = &mut self.proto.trace;
        self.proto.apps.collect(p as usize, &mut |txn, ret| {
            trace.add(txn);
            trace.add(ret);
        });
        let c = self.core(p);
        c.busy_ns += cursor - t;
        c.free = cursor;
        self.rearm(p);
    }

    fn send_message(&mut self, at: SimTime, src: u32, dst: u32, ts: u64, payload: Bytes) {
        if dst >= self.proto.procs {
            // The application addressed no process: its bug, counted as a lost message.
            self.net.packets_lost += 1;
            return;
        }
        self.proto.messages += 1;
        let pph = self.proto.pph;
        let local = src / pph == dst / pph;
        let seq = match self.proto.transport.as_mut() {
            Some(tr) if !local => {
                let rto = tr.rto_ns;
                let pair = tr.pairs.entry((src, dst)).or_default();
                let seq = pair.next_seq;
                pair.next_seq += 1;
                pair.unacked.insert(seq, (ts, payload.clone(), at));
                if !pair.timer {
                    pair.timer = true;
                    let ev = Ev::Proto(DirectEv::Rto { src, dst });
                    self.queue.push(at + rto, ev);
                }
                seq
            }
            _ => 0,
        };
        let slot = self.new_packet(DirectPacket {
            src,
            dst,
            ts,
            seq,
            ack: false,
            payload,
        });
        if local {
            self.queue.push(at, Ev::Local { role: dst, slot });
        } else {
            self.put_on_link(self.topo.uplink(src / pph).0, slot, at);
        }
    }

    /// With the transport: the packet in `slot` reached its host. An acknowledgement frees what
    /// it covers; a message is delivered if it is the next of its pair (then the early ones it
    /// frees), held if early, dropped if a copy; the receiver's NIC acknowledges every message.
    fn transport_arrive(&mut self, t: SimTime, slot: u32) {
        let p = self.take_packet(slot);
        if self.proto.dead(p.dst, t) {
            return; // a dead host acknowledges nothing
        }
        let tr = self.proto.transport.as_mut().expect("the transport");
        if p.ack {
            if let Some(pair) = tr.pairs.get_mut(&(p.dst, p.src)) {
                let before = pair.unacked.len();
                pair.unacked = pair.unacked.split_off(&p.seq);
                if pair.unacked.len() < before {
                    pair.backoff = 0;
                }
            }
            return;
        }
        let pair = tr.pairs.entry((p.src, p.dst)).or_default();
        let mut deliver = Vec::new();
        if p.seq == pair.expected {
            deliver.push((p.ts, p.payload));
            pair.expected += 1;
            while let Some((ts, payload)) = pair.early.remove(&pair.expected) {
                deliver.push((ts, payload));
                pair.expected += 1;
            }
        } else if p.seq > pair.expected && !pair.early.contains_key(&p.seq) {
            pair.early.insert(p.seq, (p.ts, p.payload));
        } else {
            tr.duplicates += 1;
        }
        let expected = pair.expected;
        tr.acks += 1;
        for (ts, payload) in deliver {
            let slot = self.new_packet(DirectPacket {
                src: p.src,
                dst: p.dst,
                ts,
                seq: 0,
                ack: false,
                payload,
            });
            self.input(t, p.dst, CoreInput::Packet(slot));
        }
        let ack = self.new_packet(DirectPacket {
            src: p.dst,
            dst: p.src,
            ts: 0,
            seq: expected,
            ack: true,
            payload: Bytes::new(),
        });
        self.put_on_link(self.topo.uplink(p.dst / self.proto.pph).0, ack, t);
    }

    /// The transport's timer of pair (`src`, `dst`): if the oldest unacknowledged message has
    /// waited its timeout (`--rto`, doubled per timeout in a row, reset when an acknowledgement
    /// moves), it is sent again — only it: the receiver holds what came after it, and the
    /// cumulative acknowledgement then moves to the next hole. The timer re-arms while anything
    /// is unacknowledged.
    fn on_rto(&mut self, t: SimTime, src: u32, dst: u32) {
        let gone = self.proto.dead(src, t) || self.proto.dead(dst, t);
        let Some(tr) = self.proto.transport.as_mut() else {
            return;
        };
        if gone {
            // A connection with a dead host: abandoned, its timer not re-armed.
            tr.pairs.remove(&(src, dst));
            return;
        }
        let rto = tr.rto_ns;
        let Some(pair) = tr.pairs.get_mut(&(src, dst)) else {
            return;
        };
        pair.timer = false;
        let wait = rto << pair.backoff.min(10);
        let Some((&seq, oldest)) = pair.unacked.iter_mut().next() else {
            return;
        };
        let again = (oldest.2 + wait <= t).then(|| {
            oldest.2 = t;
            (seq, oldest.0, oldest.1.clone())
        });
        if again.is_some() {
            pair.backoff += 1;
        }
        let at = oldest.2 + (rto << pair.backoff.min(10));
        pair.timer = true;
        self.queue
            .push(at.max(t + 1), Ev::Proto(DirectEv::Rto { src, dst }));
        let Some((seq, ts, payload)) = again else {
            return;
        };
        tr.retransmits += 1;
        let slot = self.new_packet(DirectPacket {
            src,
            dst,
            ts,
            seq,
            ack: false,
            payload,
        });
        self.put_on_link(self.topo.uplink(src / self.proto.pph).0, slot, t);
    }

    /// True when no message is on its way and no live process's application has work open.
    pub fn quiescent(&self) -> bool {
        let now = self.now;
        self.live == 0
            && (0..self.proto.procs)
                .all(|p| self.proto.dead(p, now) || self.proto.apps.proc_idle(p as usize))
    }

    /// The processes whose host crashed by now, with when.
    fn crashed(&self) -> HashMap<u32, u64> {
        (0..self.proto.procs)
            .filter(|&p| self.proto.dead(p, self.now))
            .map(|p| {
                (
                    p,
                    self.proto.crash_at[(p / self.proto.pph) as usize].unwrap_or(0),
                )
            })
            .collect()
    }
}

/// `system`'s processes for the application of `cfg`.
fn direct_apps(
    cfg: &SimConfig,
    system: DirectSystem,
    procs: u32,
) -> Result<Box<dyn AppSet>, String> {
    if let Some(AppSpec::ReplKv { paxos, .. }) = &cfg.workload.app {
        let paxos = *paxos;
        let set = repl_set(cfg, procs, |c, g, seed| -> Box<dyn ReplApp> {
            match system {
                DirectSystem::Chain => Box::new(ChainProcess::new(c, g, seed)),
                DirectSystem::Paxos => {
                    let mut pc = PaxosConfig::new(c);
                    pc.wnd = paxos.wnd;
                    pc.bsz = paxos.bsz;
                    pc.delta_b_ns = paxos.delta_b_ns;
                    pc.heartbeat_ns = paxos.heartbeat_ns;
                    pc.election_timeout_ns = paxos.election_timeout_ns;
                    pc.echo = paxos.echo;
                    Box::new(PaxosProcess::new(pc, g))
                }
                _ => unreachable!("refused by run_direct"),
            }
        })
        .expect("a replkv run");
        return Ok(Box::new(set));
    }
    if let Some(set) = ht_set(cfg, procs, HtMode::Rdma) {
        return Ok(Box::new(set));
    }
    if let Some(AppSpec::Tpcc { .. }) = &cfg.workload.app {
        let make = |c, g| -> Box<dyn TpccApp> {
            match system {
                // 1Pipe's TPC-C process on plain messages: the same work, nothing ordered.
                DirectSystem::NonTx => Box::new(TpccProcess::new(c, g)),
                DirectSystem::Lock => Box::new(TpccLockProcess::new(c, g)),
                DirectSystem::Occ => Box::new(TpccOccProcess::new(c, g)),
                _ => unreachable!("refused by run_direct"),
            }
        };
        let set = tpcc_set(cfg, procs, make).expect("a TPC-C run");
        return Ok(Box::new(set));
    }
    let kv = kv_processes(cfg, procs)
        .into_iter()
        .map(|(kc, gen)| match system {
            DirectSystem::NonTx => Box::new(NonTxProcess::new(kc, gen)) as Box<dyn TxnApp>,
            DirectSystem::Farm => Box::new(FarmProcess::new(kc, gen)),
            _ => unreachable!("refused by run_direct"),
        })
        .collect();
    Ok(Box::new(KvSet::new(cfg, kv)))
}

/// The outcome of a direct-messaging run (`onepipe sim --app kv --system nontx --json`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct DirectReport {
    /// The seed.
    pub seed: u64,
    /// The topology, in words.
    pub topology: String,
    /// Processes.
    pub procs: u32,
    /// Messages sent (by the applications; retransmissions and acknowledgements not counted).
    pub messages: u64,
    /// On a lossy network, the transport's retransmissions, acknowledgements and dropped copies.
    pub retransmits: u64,
    /// See `retransmits`.
    pub acks: u64,
    /// See `retransmits`.
    pub duplicates: u64,
    /// The run drained (every transaction finished).
    pub drained: bool,
    /// How busy the hosts' cores were while the processes issued (`0..duration`).
    pub cpu_busy: engine::CpuBusy,
    /// The application's figures.
    pub app: AppReport,
    /// Events processed, and per wall second.
    pub events: u64,
    /// See `events`.
    pub events_per_wall_s: f64,
    /// Wall time of the run.
    pub wall_s: f64,
    /// Hash of every commit (transaction and time), in order.
    pub trace_hash: String,
    /// The run's history in Jepsen's form (`--history`); not in the report.
    #[serde(skip)]
    pub app_history: Option<String>,
}

/// Runs `system` on the network, workload and application of `cfg` (`cfg.app` must be set).
pub fn run_direct(
    cfg: &SimConfig,
    system: DirectSystem,
    progress: &mut dyn FnMut(f64),
) -> Result<DirectReport, ConfigError> {
    cfg.validate()?;
    if cfg.workload.app.is_none() {
        return Err(ConfigError {
            flag: "--system",
            message: format!("{} runs an application: give --app", system.name()),
        });
    }
    let app = cfg.workload.app.as_ref().map_or("", AppSpec::name);
    let needs_own = app == "replkv" || app == "hashtable";
    if system.app().is_some_and(|a| a != app) || needs_own && system.app().is_none() {
        return Err(ConfigError {
            flag: "--system",
            message: format!(
                "{} runs --app {}; the baselines of kv are farm and nontx, of tpcc 2pl, occ and \
                 nontx, of replkv chain and paxos, of hashtable rdma",
                system.name(),
                system.app().unwrap_or("kv or tpcc")
            ),
        });
    }
    match cfg.net.queue {
        QueueKind::Radix => run_with(cfg, system, RadixHeap::new(), progress),
        QueueKind::Quaternary => run_with(cfg, system, QuaternaryHeap::new(), progress),
        QueueKind::Binary => run_with(cfg, system, StdBinaryHeap::new(), progress),
    }
}

fn run_with<Q: EventQueue<Ev>>(
    cfg: &SimConfig,
    system: DirectSystem,
    queue: Q,
    progress: &mut dyn FnMut(f64),
) -> Result<DirectReport, ConfigError> {
    let started = std::time::Instant::now();
    let mut world =
        DirectWorld::new(cfg.clone(), system, queue).map_err(|message| ConfigError {
            flag: "--topology",
            message,
        })?;
    let limit = cfg.workload.duration_ns + cfg.workload.drain_ns;
    let mut report_progress = |t: u64| progress(t as f64 / cfg.workload.duration_ns.max(1) as f64);
    world.run_until(cfg.workload.duration_ns, &mut report_progress);
    let cpu_busy = world.cpu_busy_share(cfg.workload.duration_ns);
    // Quiescence is checked about every 20 µs, at a step no round period divides: a
    // heartbeat every 20 µs (MultiPaxos's leader) in flight at every check would otherwise keep
    // an idle run from ever counting as drained.
    const DRAIN_STEP_NS: u64 = 20_000 + 1_337;
    while world.now() < limit && !world.quiescent() {
        let next = (world.now() + DRAIN_STEP_NS).min(limit);
        world.run_until(next, &mut report_progress);
    }
    let wall_s = started.elapsed().as_secs_f64();
    let p = &world.proto;
    Ok(DirectReport {
        seed: cfg.seed,
        topology: world.topology().describe(),
        procs: p.procs,
        messages: p.messages,
        retransmits: p.transport.as_ref().map_or(0, |t| t.retransmits),
        acks: p.transport.as_ref().map_or(0, |t| t.acks),
        duplicates: p.transport.as_ref().map_or(0, |t| t.duplicates),
        drained: world.quiescent(),
        cpu_busy,
        app: p.apps.report(
            p.system.name(),
            p.system.checked(),
            crate::apps::realtime_skew_ns(cfg),
            &world.crashed(),
        ),
        events: world.net.events,
        events_per_wall_s: world.net.events as f64 / wall_s.max(1e-9),
        wall_s,
        trace_hash: format!("{:016x}", p.trace.value()),
        app_history: cfg
            .workload
            .keep_history
            .then(|| p.apps.history_json())
            .flatten(),
    })
}
