//! Failure handling for reliable 1Pipe (§5.2): the control messages and the controller.
//!
//! The procedure, as the paper lists it, and where each step lives:
//!
//! 1. **Detect** — a switch that times out an input link and a host whose first-hop switch fell
//!    silent tell the controller ([`CtrlMsg::LinkDown`], an [`Output::Mgmt`] of theirs), with
//!    the last commit barrier they had from it.
//! 2. **Determine** — [`Controller`]: after a short settling time (so that every neighbour of a
//!    failed component has reported), the processes that are disconnected in the routing graph
//!    are failed; the failure timestamp of each is the *maximum* last commit barrier reported on a
//!    dead link downstream of it (every such value was committed by it, and every correct
//!    receiver's commit barrier is bounded by one of them).
//! 3. **Broadcast** — [`CtrlMsg::Failure`] to every correct host.
//! 4. **Discard** / 5. **Recall** / 6. **Callback** — the host, on [`Input::Mgmt`]: drop
//!    buffered messages from a failed process at or above its failure timestamp (a commit
//!    barrier: it commits what is strictly below it); abort every
//!    scattering still waiting for an ACK from a failed process ([`CtrlMsg::Recall`] to the other
//!    hosts, which discard it and answer [`CtrlMsg::RecallAck`]; the commit barrier is held below
//!    it meanwhile); raise [`crate::host::HostEvent::ProcFailed`]; then [`CtrlMsg::Completed`].
//! 7. **Resume** — once every correct host completed, [`CtrlMsg::Resume`] tells every switch to
//!    stop waiting for the dead links' commit barriers (and drivers to route around them).
//!
//! A determination that finds no failed process (a core link or switch: connectivity survives)
//! resumes at once. Rounds are numbered and resume in order; a failure found while a round is
//! open starts another, and hosts newly failed are no longer waited for.
//!
//! Control messages travel on the management network, which drivers deliver reliably (the
//! simulator with a fixed delay).
//!
//! **Controller forwarding** (§5.2): a sender whose message timed out
//! `ReliableConfig::forward_after_retransmits` times hands its packets to the controller
//! ([`RelayMsg::Forward`]); the controller relays them to the receiver's host over the management
//! network, and the receiver answers with its ACK the same way. A relay the management network
//! cannot deliver (the driver calls [`Notice::Unreachable`]) makes that host unresponsive:
//! Determine counts it as failed. The relay messages are a separate type from [`CtrlMsg`]
//! (both travel as [`Mgmt`], the controller's [`Node::Mgmt`]); relaying is off unless the
//! controller was built [`Controller::with_relay`].
//!
//! **Receiver recovery** (§5.2): a host declared failed is told so ([`RelayMsg::Failed`]) and
//! freezes its reliable delivery. Correct hosts report what they recall
//! ([`RelayMsg::Recalled`]: the recall cannot reach the failed receivers). When the failed
//! host hears again it asks ([`RelayMsg::RecoverRequest`]); once no round is open the
//! controller answers with every failure and every recall recorded ([`RelayMsg::Settle`]), and
//! the host settles its buffer (`Host::recover`). A settled host then asks to rejoin
//! ([`RelayMsg::Rejoin`]); once no round is open and the switches find its links alive both ways
//! ([`RelayMsg::Admit`]), it comes back as new processes, stamping above the controller's floor
//! ([`RelayMsg::Joined`]).

use crate::ids::{LinkId, NodeId, ProcId, Psn};
use crate::node::{Input, Node, Notice, Output};
use crate::time::{Instant, Timestamp};
use crate::topology::Topology;
use crate::wire::Packet;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;

pub mod codec;
mod graph;
mod relay;

use graph::with_orphaned;
pub use graph::{connected_hosts, connected_hosts_among, reach_table, reachable_from};

/// A control-plane message (§5.2 Fig. 7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CtrlMsg {
    /// Detect: `reporter` timed out its input `link`; `last_commit` is the last commit barrier
    /// it had from it (`None` if the link never carried one).
    LinkDown {
        /// The node whose input fell silent.
        reporter: NodeId,
        /// The silent link.
        link: LinkId,
        /// Its last commit barrier.
        last_commit: Option<Timestamp>,
    },
    /// Broadcast: `failed` processes with their failure timestamps; `correct` are the hosts that
    /// take part in this round (the recall targets).
    Failure {
        /// Round number.
        round: u32,
        /// (process, failure timestamp).
        failed: Vec<(ProcId, Timestamp)>,
        /// The correct hosts.
        correct: Vec<NodeId>,
    },
    /// Recall: the scatterings `(sender, timestamp)` are aborted. `unacked` lists the messages
    /// of them the sender never saw acknowledged — (sender, receiver, first PSN, packets) — which
    /// the receiver records as received so its window moves on.
    Recall {
        /// Round number.
        round: u32,
        /// The recalling host.
        from: NodeId,
        /// Aborted scatterings.
        groups: Vec<(ProcId, Timestamp)>,
        /// Their unacknowledged messages.
        unacked: Vec<(ProcId, ProcId, Psn, u32)>,
    },
    /// The recall of `round` from the addressee is done at host `from`.
    RecallAck {
        /// Round number.
        round: u32,
        /// The host that discarded.
        from: NodeId,
    },
    /// At host `host` the application took `round`'s failure notification (its callback clock
    /// starts now, not at the Broadcast): the round waits `callback_timeout_ns` from here for
    /// its `Completed` (issue 35: an application is judged by how long it holds a callback, not
    /// by when it got round to reading its events).
    CallbackTaken {
        /// Round number.
        round: u32,
        /// The host.
        host: NodeId,
    },
    /// Host `host` discarded, recalled and ran its callbacks for `round`.
    Completed {
        /// Round number.
        round: u32,
        /// The host.
        host: NodeId,
    },
    /// Determine's request to the switch at the head of `link` (a host's uplink): freeze the
    /// link's commit register and report it as [`CtrlMsg::LinkDown`], as if it had timed out.
    /// The controller sends it for a host it must declare failed whose commit barrier still
    /// reaches correct receivers over live links: the frozen register is the cut that bounds
    /// them (see `Controller::determine`).
    Isolate {
        /// The link to freeze (its head is the addressee).
        link: LinkId,
    },
    /// A host left on its own (a graceful leave, issue 35), to the controller: it sends
    /// nothing more, and every reliable message it stamped below `last` was acknowledged by its
    /// receivers before it said so. The controller takes it out at the next Determine without
    /// waiting for a link timeout: it asks the host's uplink switch to [`CtrlMsg::Depart`] it,
    /// and declares it at the commit barrier reported — or at `last` when its link never carried
    /// one (it left before its first beacon arrived: nothing it sent reached anyone).
    Departed {
        /// The host that left.
        host: NodeId,
        /// A timestamp above everything it sent (its clock when it left), if it said.
        last: Option<Timestamp>,
    },
    /// To the switch at the head of `link`, a departed host's uplink: remove the link from the
    /// best-effort minimum at once (§4.2 removal, without the timeout: the host said it left),
    /// and freeze and report its commit register as [`CtrlMsg::Isolate`] does. Unlike a timed
    /// out link, a departed one is not taken back when a late datagram of it arrives; only
    /// `Admit` takes it back.
    Depart {
        /// The departed host's uplink (its head is the addressee).
        link: LinkId,
    },
    /// Resume: stop waiting for the commit barriers of `dead_links`, and route around them.
    Resume {
        /// Round number.
        round: u32,
        /// Every link known dead.
        dead_links: Vec<LinkId>,
    },
}

/// §5.2 messages of controller forwarding and receiver recovery, on the management network
/// beside [`CtrlMsg`] (a separate type so that drivers which do not relay are unaffected).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayMsg {
    /// "S asks controller to forward the message to R": data packets from host `from` (to the
    /// controller, then to the receiver's host), or the receiver's ACKs on the way back.
    Forward {
        /// The host that sent the packets.
        from: NodeId,
        /// The packets, all to processes of one host.
        packets: Vec<Packet>,
    },
    /// §5.2 "Receiver Recovery": "the controller notifies process of its own failure" — sent
    /// at Determine to each host declared failed (a crashed one never reads it; one cut off from
    /// the data network still does, over the management network): its processes failed at `ts`.
    Failed {
        /// Its failure timestamp.
        ts: Timestamp,
    },
    /// §5.2 "undeliverable recall messages": a correct host recalled these scatterings
    /// (sender, timestamp) because a process declared failed never acknowledged them; the
    /// recall cannot reach the failed receivers, so the controller records it for their
    /// recovery (host to controller, beside the `Recall`s to the correct hosts).
    Recalled {
        /// The aborted scatterings.
        groups: Vec<(ProcId, Timestamp)>,
    },
    /// §5.2 "Receiver Recovery": a host told it failed can hear again and asks for "host failure
    /// notifications since its failure and undeliverable recall messages" (host to controller).
    RecoverRequest {
        /// The recovering host.
        host: NodeId,
    },
    /// The controller's answer to [`RelayMsg::RecoverRequest`], sent once no failure round is
    /// open (every correct host has recalled and completed): every process declared failed so
    /// far with its failure timestamp, and every recalled scattering recorded.
    Settle {
        /// (process, failure timestamp), sorted.
        failed: Vec<(ProcId, Timestamp)>,
        /// (sender, timestamp) of the recalled scatterings, sorted.
        recalled: Vec<(ProcId, Timestamp)>,
    },
    /// §5.2 "After delivering buffered messages, the recovered process needs to join 1Pipe as a
    /// new process": a settled host asks to rejoin (host to controller, again until
    /// [`RelayMsg::Joined`] answers).
    Rejoin {
        /// The settled host.
        host: NodeId,
    },
    /// The controller to the switch at the head of `link`, while a host rejoins: is the input
    /// alive (it spoke within the link timeout)? With `apply`, §4.2 "addition of … links": it
    /// bounds both barriers again at once (no longer frozen, removed, departed or timed out —
    /// not only once it speaks), the switch's outputs waiting, never moving back, until the
    /// link's barriers pass them. Answered by
    /// [`RelayMsg::Admitted`].
    Admit {
        /// The input link.
        link: LinkId,
        /// Take it back (else only say whether it is alive).
        apply: bool,
    },
    /// A switch's answer to [`RelayMsg::Admit`]: whether the input is alive, and the switch's
    /// output barriers (best effort, commit) — after taking it back, with `apply`.
    Admitted {
        /// The input link.
        link: LinkId,
        /// It spoke within the link timeout.
        alive: bool,
        /// The switch's best-effort output barrier.
        barrier: Option<Timestamp>,
        /// The switch's commit output barrier.
        commit: Option<Timestamp>,
    },
    /// The controller's answer to [`RelayMsg::Rejoin`]: the host's processes are new processes
    /// `procs` (fresh ids: the old ones stay failed); their timestamps start at `floor` — at
    /// least every output barrier of the switches that took the host's links back, so nothing
    /// they send is below a barrier any receiver has passed; `failed` is every process declared
    /// failed so far.
    Joined {
        /// The new processes, one per old one, in order.
        procs: Vec<ProcId>,
        /// The least timestamp they may use.
        floor: Timestamp,
        /// (process, failure timestamp), sorted.
        failed: Vec<(ProcId, Timestamp)>,
    },
    /// To every other correct host when `host` rejoined as the new processes `procs`: stamp
    /// nothing to them below `floor`. The switches on the host's side may have run ahead of
    /// the others while it was cut off with them (a partition, or a clock stepped forward):
    /// their outputs, and so the new processes' barriers, can be above another host's clock,
    /// and a message stamped below a receiver's barrier would be late — or, reliable, taken for
    /// a duplicate and never acknowledged (VOPR seed 19 with heals). `floor` covers the host's
    /// own first-hop switch's outputs too.
    PeerJoined {
        /// The host that rejoined.
        host: NodeId,
        /// Its new processes.
        procs: Vec<ProcId>,
        /// The least timestamp to use for them.
        floor: Timestamp,
    },
}

pub use crate::node::MgmtDest;

/// What travels on §5.2's management network ([`crate::node::Input::Mgmt`],
/// [`crate::node::Output::Mgmt`] of the host, the switch and the controller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mgmt {
    /// The failure procedure's messages (Fig. 7).
    Ctrl(CtrlMsg),
    /// Controller forwarding and receiver recovery.
    Relay(RelayMsg),
}

/// What the controller reports upward ([`Node::Event`]): its decisions, for the driver's
/// routing and reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CtrlEvent {
    /// Determine: hosts declared failed in `round`, with their failure timestamps.
    Declared {
        /// Round number.
        round: u32,
        /// When (controller time).
        at: Instant,
        /// (host, failure timestamp).
        hosts: Vec<(NodeId, Timestamp)>,
    },
    /// Round `round` resumed.
    Resumed {
        /// Round number.
        round: u32,
    },
    /// §5.2 Receiver Recovery: host `host` rejoined as the new processes `procs`; the links
    /// the switches still leave out of the commit minimum are `dead_links` (drivers route by
    /// them from now on).
    Joined {
        /// The host.
        host: NodeId,
        /// Its new processes.
        procs: Vec<ProcId>,
        /// Every link still removed.
        dead_links: Vec<LinkId>,
    },
}

/// Everything the controller gives out ([`Node::poll_output`]).
pub type CtrlOutput = Output<Infallible, CtrlEvent, Mgmt>;

/// What the controller has to give out, in order: a control message, or an event.
#[derive(Clone, Debug, PartialEq, Eq)]
enum CtrlOut {
    /// Send `msg` to `to`.
    Send {
        /// Addressee.
        to: MgmtDest,
        /// The message.
        msg: CtrlMsg,
    },
    Event(CtrlEvent),
}

impl From<CtrlOut> for Output<Infallible, CtrlEvent, Mgmt> {
    fn from(o: CtrlOut) -> Self {
        match o {
            CtrlOut::Send { to, msg } => Output::Mgmt {
                to,
                msg: Mgmt::Ctrl(msg),
            },
            CtrlOut::Event(e) => Output::Event(e),
        }
    }
}

/// Controller configuration.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Processes of each host, by host index.
    pub procs_of_host: Vec<Vec<ProcId>>,
    /// Time from the first report to Determine, so every neighbour of a failure has reported.
    pub settle_ns: u64,
    /// §5.2 "resumes delivery after all non-fail processes finish their callback functions":
    /// how long a round waits for a host's `Completed` before that host is taken for failed
    /// itself (isolated and declared at the next Determine, after which the round no longer
    /// waits for it). 0: wait as long as it takes.
    pub callback_timeout_ns: u64,
}

#[derive(Clone, Debug)]
struct Round {
    waiting: BTreeSet<NodeId>,
    dead_links: Vec<LinkId>,
    /// The round's Broadcast, to send again after a crash (`None` when nobody failed).
    failure: Option<CtrlMsg>,
    /// When each host still waited for is taken for failed (`callback_timeout_ns` after the
    /// Broadcast, or after the host said its application took the notification).
    deadlines: BTreeMap<NodeId, Instant>,
}

/// The network controller's failure procedure (§5.2). Sans-IO: feed it messages and timeouts,
/// drain [`Node::poll_output`].
#[derive(Debug)]
pub struct Controller {
    cfg: ControllerConfig,
    topo: Arc<Topology>,
    /// Dead links as reported: link → (reporter, last commit).
    reports: BTreeMap<LinkId, (NodeId, Option<Timestamp>)>,
    /// Hosts declared failed.
    failed: Vec<bool>,
    /// Open rounds, resumed in order.
    rounds: BTreeMap<u32, Round>,
    next_round: u32,
    determine_at: Option<Instant>,
    /// Isolation requests sent (a counter, for tests and reports).
    isolations: u64,
    /// Hosts that did not complete a round within `callback_timeout_ns`: failed at the next
    /// Determine.
    late: BTreeSet<NodeId>,
    /// Hosts that left on their own ([`CtrlMsg::Departed`]), with the timestamp they gave:
    /// failed at the next Determine, after their uplink switch departs them.
    departed: BTreeMap<NodeId, Option<Timestamp>>,
    /// Links the switches leave out of the commit minimum: every `dead_links` of the Resumes
    /// sent (and of the rejoins since).
    removed: BTreeSet<LinkId>,
    outputs: VecDeque<CtrlOut>,
    /// §5.2 forwarding and recovery: on when built [`Controller::with_relay`].
    relay: Option<Box<Relay>>,
}

/// The controller's §5.2 forwarding and recovery state.
#[derive(Debug, Default)]
struct Relay {
    /// Host of each process.
    host_of_proc: Vec<u32>,
    /// Hosts a relay could not reach: failed at the next Determine.
    unresponsive: BTreeSet<NodeId>,
    /// Relays waiting to be sent.
    out: VecDeque<(MgmtDest, RelayMsg)>,
    /// Packets relayed, and relays dropped (to an unknown or failed host).
    forwarded: u64,
    dropped: u64,
    /// §5.2 recovery: failure notifications (process → failure timestamp) and undeliverable
    /// recalls, recorded for recovering receivers (never pruned: a host may ask to recover at
    /// any time after it was declared, and it rejoins as new processes, whose ids are fresh).
    failed_procs: BTreeMap<ProcId, Timestamp>,
    recalled: BTreeSet<(ProcId, Timestamp)>,
    /// Failed hosts that asked to recover while a round was open: answered when none is.
    recovering: BTreeSet<NodeId>,
    /// Failed hosts answered with `Settle`: they may rejoin.
    settled: BTreeSet<NodeId>,
    /// The rejoin under way, if any (one at a time).
    join: Option<Join>,
    /// Process ids are dense in `0..proc_ids_max`; rejoining hosts get the next free ones.
    proc_ids_max: u32,
    next_proc: u32,
    /// Hosts rejoined (a counter).
    joined: u64,
}

/// A host rejoining (§5.2 Receiver Recovery, §4.2 addition of links).
#[derive(Debug)]
struct Join {
    host: NodeId,
    /// False while asking which links are alive again; true while the switches take them back.
    applying: bool,
    /// Links whose head has not answered.
    awaiting: BTreeSet<LinkId>,
    /// Links found alive.
    alive: BTreeSet<LinkId>,
    /// Links no longer dead once it joins: the alive ones, but not the uplinks of other hosts
    /// still failed, and its own downlink.
    revived: BTreeSet<LinkId>,
    /// Links removed from the commit minimum once it joins.
    removed: BTreeSet<LinkId>,
    /// The largest output barrier the switches answered while taking links back.
    floor: Option<Timestamp>,
}

/// Most relays queued at the controller; beyond it the newest are dropped (the senders' timers
/// send them again).
pub const RELAY_QUEUE_MAX: usize = 1 << 16;

impl Controller {
    /// A controller for `topo`.
    pub fn new(cfg: ControllerConfig, topo: Arc<Topology>) -> Controller {
        let hosts = topo.hosts() as usize;
        assert_eq!(cfg.procs_of_host.len(), hosts, "procs_of_host per host");
        Controller {
            cfg,
            topo,
            reports: BTreeMap::new(),
            failed: vec![false; hosts],
            rounds: BTreeMap::new(),
            next_round: 1,
            determine_at: None,
            isolations: 0,
            late: BTreeSet::new(),
            departed: BTreeMap::new(),
            removed: BTreeSet::new(),
            outputs: VecDeque::new(),
            relay: None,
        }
    }

    /// This controller with §5.2 controller forwarding and receiver recovery on, for process ids
    /// below `proc_ids_max` (rejoining hosts get fresh ids up to it): set-up before the first
    /// input, by value, so that a driver never changes a running controller outside `Node`.
    pub fn with_relay(mut self, proc_ids_max: u32) -> Controller {
        self.enable_relay();
        self.set_proc_ids_max(proc_ids_max);
        self
    }

    /// Turns on §5.2 controller forwarding (and receiver recovery): until then relay messages
    /// ([`Mgmt::Relay`]) are ignored, and none goes out.
    pub(crate) fn enable_relay(&mut self) {
        let mut host_of_proc = Vec::new();
        for (h, procs) in self.cfg.procs_of_host.iter().enumerate() {
            for p in procs {
                if host_of_proc.len() <= p.index() {
                    host_of_proc.resize(p.index() + 1, u32::MAX);
                }
                host_of_proc[p.index()] = h as u32;
            }
        }
        let procs = host_of_proc.len() as u32;
        self.relay = Some(Box::new(Relay {
            host_of_proc,
            proc_ids_max: procs,
            next_proc: procs,
            ..Relay::default()
        }));
    }

    /// §5.2 Receiver Recovery: process ids are dense in `0..max`, and a host that rejoins gets
    /// fresh ones above every id given so far — while they last (a host asking for more than
    /// are left stays out). Without this call no id is spare and nobody rejoins. Needs
    /// [`Controller::enable_relay`] first.
    pub(crate) fn set_proc_ids_max(&mut self, max: u32) {
        if let Some(r) = self.relay.as_mut() {
            r.proc_ids_max = max.max(r.next_proc);
        }
    }

    /// Whether the relay channel is on ([`Controller::with_relay`]).
    pub fn relay_enabled(&self) -> bool {
        self.relay.is_some()
    }

    /// Hosts that rejoined as new processes so far (§5.2).
    pub fn rejoined(&self) -> u64 {
        self.relay.as_ref().map_or(0, |r| r.joined)
    }

    /// The processes host `h` runs now (its latest incarnation's).
    pub fn procs_of(&self, h: NodeId) -> &[ProcId] {
        self.cfg
            .procs_of_host
            .get(h.index())
            .map_or(&[], |p| p.as_slice())
    }

    /// Hosts declared failed so far.
    pub fn failed_hosts(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.failed
            .iter()
            .enumerate()
            .filter(|(_, f)| **f)
            .map(|(h, _)| NodeId(h as u32))
    }

    /// Whether host `h` was declared failed.
    pub fn is_failed(&self, h: NodeId) -> bool {
        self.is_failed_host(h)
    }

    /// Rounds not resumed yet.
    pub fn open_rounds(&self) -> usize {
        self.rounds.len()
    }

    /// Handles a control message addressed to the controller.
    fn on_ctrl_msg(&mut self, now: Instant, msg: CtrlMsg) {
        match msg {
            CtrlMsg::LinkDown {
                reporter,
                link,
                last_commit,
            } => {
                if link.index() >= self.topo.links().len()
                    || self.topo.links()[link.index()].to != reporter
                {
                    return; // not the reporter's input: garbage
                }
                if self.is_failed_host(reporter) || self.reports.contains_key(&link) {
                    return;
                }
                self.reports.insert(link, (reporter, last_commit));
                let from = self.topo.links()[link.index()].from;
                if self.departed.contains_key(&from) && self.topo.uplink(from.0) == link {
                    // The report a departure waits for: Determine at once.
                    self.determine_at = Some(self.determine_at.map_or(now, |t| t.min(now)));
                } else if self.determine_at.is_none() {
                    self.determine_at = Some(now + self.cfg.settle_ns);
                }
            }
            CtrlMsg::Departed { host, last } => {
                if host.0 >= self.topo.hosts() || self.is_failed_host(host) {
                    return;
                }
                self.departed.entry(host).or_insert(last);
                // Nothing to settle: the host said it left, and its uplink switch reports it
                // when asked.
                self.determine_at = Some(self.determine_at.map_or(now, |t| t.min(now)));
            }
            CtrlMsg::CallbackTaken { round, host } => {
                let timeout = self.cfg.callback_timeout_ns;
                if let Some(r) = self.rounds.get_mut(&round) {
                    if let Some(d) = r.deadlines.get_mut(&host) {
                        *d = now + timeout;
                    }
                }
            }
            CtrlMsg::Completed { round, host } => {
                if let Some(r) = self.rounds.get_mut(&round) {
                    r.waiting.remove(&host);
                    r.deadlines.remove(&host);
                }
                self.resume_ready();
            }
            _ => {}
        }
    }

    /// The controller recovers from a crash (§5.2 with §6.1's highly available state: this
    /// object is that state). Messages sent to it meanwhile were lost: hosts and switches send
    /// their `Completed` and `LinkDown` again on their own timers; here the controller sends
    /// every open round's Broadcast again to the hosts it still waits for (a host that had
    /// completed answers `Completed` at once), so an interrupted round resumes. A Determine that
    /// fell due meanwhile runs at the next `Input::Timeout`.
    fn on_recover(&mut self, now: Instant) {
        // Completions sent meanwhile were lost: each host gets its time again.
        let timeout = self.cfg.callback_timeout_ns;
        for r in self.rounds.values_mut() {
            for d in r.deadlines.values_mut() {
                *d = now + timeout;
            }
        }
        for r in self.rounds.values() {
            let Some(msg) = &r.failure else {
                continue;
            };
            for &h in &r.waiting {
                self.outputs.push_back(CtrlOut::Send {
                    to: MgmtDest::Node(h),
                    msg: msg.clone(),
                });
            }
        }
    }

    /// Runs Determine if it is due; takes the hosts a round waited for too long for failed
    /// (`callback_timeout_ns`): they are isolated and declared like any failed host.
    fn on_timer(&mut self, now: Instant) {
        let mut late = Vec::new();
        for r in self.rounds.values_mut() {
            r.deadlines.retain(|&h, t| {
                let due = *t <= now;
                if due && r.waiting.contains(&h) {
                    late.push(h);
                }
                !due
            });
        }
        for h in late {
            if !self.is_failed_host(h) && self.late.insert(h) && self.determine_at.is_none() {
                self.determine_at = Some(now + self.cfg.settle_ns);
            }
        }
        if self.determine_at.is_some_and(|t| t <= now) {
            self.determine_at = None;
            self.determine(now);
        }
    }

    /// Hosts taken for failed because they did not complete a round in time.
    pub fn late_hosts(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.late.iter().copied()
    }

    /// The next thing to send or report.
    fn pop_output(&mut self) -> Option<CtrlOut> {
        self.outputs.pop_front()
    }

    fn is_failed_host(&self, n: NodeId) -> bool {
        self.failed.get(n.index()).copied().unwrap_or(false)
    }

    /// Determine (§5.2): who is disconnected, and when it failed; then Broadcast.
    fn determine(&mut self, now: Instant) {
        // A new failure ends any rejoin under way: the host asks again once no round is open
        // (links taken back meanwhile leave the commit minimum again with this round's Resume:
        // they are still dead or orphaned in the controller's view).
        if let Some(r) = self.relay.as_mut() {
            r.join = None;
        }
        let dead: BTreeSet<LinkId> = self.reports.keys().copied().collect();
        let correct = self.correct_hosts(&dead);
        if self.isolate_unseparated(now, &dead, &correct) {
            return;
        }
        let declared = self.declare(&correct);
        let round = self.next_round;
        self.next_round += 1;
        // Hosts failed now are no longer waited for in earlier rounds.
        for r in self.rounds.values_mut() {
            r.waiting.retain(|h| !self.failed[h.index()]);
        }
        let (waiting, failure) = self.broadcast(now, round, declared);
        let dead_links = self.with_orphaned(dead);
        let timeout = self.cfg.callback_timeout_ns;
        let deadlines = match timeout {
            0 => BTreeMap::new(),
            t => waiting.iter().map(|&h| (h, now + t)).collect(),
        };
        self.rounds.insert(
            round,
            Round {
                waiting,
                dead_links,
                failure,
                deadlines,
            },
        );
        self.resume_ready();
    }

    /// Determine's candidates: the hosts not failed yet that reach one another both ways over
    /// the links not reported `dead` (`connected_hosts_among`), minus the hosts a relay could
    /// not reach and those that did not complete a round in time.
    fn correct_hosts(&self, dead: &BTreeSet<LinkId>) -> Vec<bool> {
        let candidates: Vec<bool> = self.failed.iter().map(|f| !f).collect();
        let mut correct = connected_hosts_among(&self.topo, dead, &candidates);
        if let Some(r) = &self.relay {
            for h in &r.unresponsive {
                correct[h.index()] = false;
            }
        }
        for h in self.late.iter().chain(self.departed.keys()) {
            correct[h.index()] = false;
        }
        correct
    }

    /// Marks failed every host outside `correct` that a report bounds, with its failure
    /// timestamp (`failure_ts`); one that nothing bounds yet waits for a later report.
    fn declare(&mut self, correct: &[bool]) -> Vec<(NodeId, Timestamp)> {
        let mut declared = Vec::new();
        for h in 0..self.topo.hosts() {
            if correct[h as usize] || self.failed[h as usize] {
                continue;
            }
            let Some(ts) = self.failure_ts(h, correct) else {
                continue; // nothing bounds it yet: a later report will
            };
            self.failed[h as usize] = true;
            declared.push((NodeId(h), ts));
        }
        declared
    }

    /// Broadcast (§5.2) of round `round`: the `declared` hosts' processes with their failure
    /// timestamps, to every correct host, which the round then waits for (none if nobody
    /// failed); each declared host is told (`RelayMsg::Failed`). Returns the hosts waited for
    /// and the Broadcast, to send again after a controller crash.
    fn broadcast(
        &mut self,
        now: Instant,
        round: u32,
        declared: Vec<(NodeId, Timestamp)>,
    ) -> (BTreeSet<NodeId>, Option<CtrlMsg>) {
        if declared.is_empty() {
            return (BTreeSet::new(), None);
        }
        let correct_hosts: Vec<NodeId> = (0..self.topo.hosts())
            .filter(|&h| !self.failed[h as usize])
            .map(NodeId)
            .collect();
        let failed: Vec<(ProcId, Timestamp)> = declared
            .iter()
            .flat_map(|&(h, ts)| {
                self.cfg.procs_of_host[h.index()]
                    .iter()
                    .map(move |&p| (p, ts))
            })
            .collect();
        if let Some(r) = self.relay.as_mut() {
            for &(h, ts) in &declared {
                r.out
                    .push_back((MgmtDest::Node(h), RelayMsg::Failed { ts }));
            }
            r.failed_procs.extend(failed.iter().copied());
        }
        self.outputs.push_back(CtrlOut::Event(CtrlEvent::Declared {
            round,
            at: now,
            hosts: declared,
        }));
        let msg = CtrlMsg::Failure {
            round,
            failed,
            correct: correct_hosts.clone(),
        };
        for &h in &correct_hosts {
            self.outputs.push_back(CtrlOut::Send {
                to: MgmtDest::Node(h),
                msg: msg.clone(),
            });
        }
        (correct_hosts.into_iter().collect(), Some(msg))
    }

    /// Checks the procedure's invariants (debug builds only): a round never waits for a failed
    /// host; rounds are numbered below the next; a rejoin under way is of a failed host.
    fn invariants(&self) {
        if cfg!(debug_assertions) {
            for (&n, r) in &self.rounds {
                debug_assert!(n < self.next_round, "round {n} not yet numbered");
                debug_assert!(
                    r.waiting.iter().all(|h| !self.is_failed_host(*h)),
                    "round {n} waits for a failed host"
                );
                debug_assert!(r.failure.is_some() || r.waiting.is_empty());
            }
            if let Some(r) = &self.relay {
                if let Some(j) = &r.join {
                    debug_assert!(self.is_failed_host(j.host), "a rejoining host is failed");
                }
            }
        }
    }

    /// §5.2 "Failure timestamp of P … computed as the maximum last commit timestamp reported by
    /// all neighbors of P", taken "from a cut in a routing graph … that separates S and all
    /// receivers" (Appendix). A host about to be declared failed whose commit barrier still
    /// reaches a correct host over links nobody reported has no such cut among the reports: a
    /// failure timestamp taken from the reports would lie below commit barriers that live paths
    /// already carried to correct receivers, which may have delivered its messages above it.
    /// Its uplink's switch — a neighbour of P — is asked to freeze that link's commit register
    /// and report it ([`CtrlMsg::Isolate`]): the frozen register is the cut (every path out of
    /// the host starts there). Determine waits for those reports and runs again; nothing is
    /// declared or resumed meanwhile — a Resume now would remove dead links from the commit
    /// minimum while the hosts they disconnect are still counted correct (VOPR seed 1806: a
    /// false suspicion of `agg-3-down → tor-3-down`, with `agg-0` failed, left pod 0's commit
    /// barriers no path to `tor-3`; the controller declared nobody and resumed, and `tor-3`'s
    /// hosts delivered past a message from pod 0 they had never acknowledged). Returns true if
    /// Determine must wait.
    fn isolate_unseparated(
        &mut self,
        now: Instant,
        dead: &BTreeSet<LinkId>,
        correct: &[bool],
    ) -> bool {
        let mut wait = false;
        for h in 0..self.topo.hosts() {
            if correct[h as usize] || self.failed[h as usize] {
                continue;
            }
            let reach = reachable_from(&self.topo, NodeId(h), dead);
            if !(0..self.topo.hosts()).any(|o| o != h && correct[o as usize] && reach[o as usize]) {
                continue; // the reports already cut it off
            }
            let up = self.topo.uplink(h);
            wait = true;
            self.isolations += 1;
            let msg = match self.departed.contains_key(&NodeId(h)) {
                true => CtrlMsg::Depart { link: up },
                false => CtrlMsg::Isolate { link: up },
            };
            self.outputs.push_back(CtrlOut::Send {
                to: MgmtDest::Node(self.topo.links()[up.index()].to),
                msg,
            });
        }
        if wait {
            // Asked again if the answer has not come by then (its switch may be dead too, which
            // its own neighbours' reports will show).
            self.determine_at = Some(now + 2 * self.cfg.settle_ns.max(1));
        }
        wait
    }

    /// Isolation requests sent so far ([`CtrlMsg::Isolate`]).
    pub fn isolations(&self) -> u64 {
        self.isolations
    }

    /// `dead` plus every link out of a switch that no correct host reaches any more: such a
    /// switch is disconnected too (a ToR whose hosts all failed), and Resume must remove its
    /// outputs from the commit minimum downstream, or its last commit barrier — which nothing
    /// will raise again — holds every receiver's commit barrier for good (VOPR seed 41 at 10 ms:
    /// both hosts of a rack declared failed).
    fn with_orphaned(&self, dead: BTreeSet<LinkId>) -> Vec<LinkId> {
        with_orphaned(&self.topo, dead, &self.failed)
    }

    /// The failure timestamp of host `h`: the largest last commit barrier reported by a correct
    /// neighbour on a dead link that `h`'s barriers flow through — or, for a host that left
    /// after its sends were acknowledged, at least the timestamp it gave (`CtrlMsg::Departed`).
    fn failure_ts(&self, h: u32, correct: &[bool]) -> Option<Timestamp> {
        let downstream = reachable_from(&self.topo, NodeId(h), &BTreeSet::new());
        let reported = self
            .reports
            .iter()
            .filter(|(link, (reporter, _))| {
                // Out of `h` itself or out of a switch its barriers flow through — not out of
                // another host that `h` reaches: that link carries the other host's commit
                // barrier, which says nothing of what `h` committed (VOPR seed 201 at 10 ms: a
                // ToR failure gave its first host the second host's, higher, failure timestamp).
                let from = self.topo.links()[link.index()].from;
                let carries_h =
                    from.0 == h || from.0 >= self.topo.hosts() && downstream[from.index()];
                carries_h && (reporter.0 >= self.topo.hosts() || correct[reporter.index()])
            })
            .filter_map(|(_, (_, c))| *c)
            .max();
        match self.departed.get(&NodeId(h)).copied().flatten() {
            // A host that left after every reliable message it sent was acknowledged gave a
            // timestamp above all of them: each is at every correct receiver, so all are
            // delivered, and a commit register reported below it (frozen earlier, or lagging)
            // must not discard some — a receiver cut off before the leave may already have
            // delivered them while it settled (VOPR seeds 530, 1143 and 2791: a fat tree split
            // by a cut, then its last correct host left). If its link never carried a commit
            // barrier, it sent nothing that reached anyone, and the timestamp bounds nothing.
            Some(last) => Some(reported.map_or(last, |r| r.max(last))),
            None => reported,
        }
    }

    /// Resume every leading round nobody is waiting for any more.
    fn resume_ready(&mut self) {
        while let Some(entry) = self.rounds.first_entry() {
            if !entry.get().waiting.is_empty() {
                break;
            }
            let (round, r) = entry.remove_entry();
            self.removed.extend(r.dead_links.iter().copied());
            // Switches stop waiting for the dead links; correct hosts resend what the failure
            // swallowed (routes change with Resume).
            let hosts = (0..self.topo.hosts())
                .filter(|&h| !self.failed[h as usize])
                .map(NodeId);
            for s in hosts.chain(self.topo.switches()) {
                self.outputs.push_back(CtrlOut::Send {
                    to: MgmtDest::Node(s),
                    msg: CtrlMsg::Resume {
                        round,
                        dead_links: r.dead_links.clone(),
                    },
                });
            }
            self.outputs
                .push_back(CtrlOut::Event(CtrlEvent::Resumed { round }));
        }
        self.answer_recovering();
    }

    /// §5.2 Receiver Recovery: answers the recovering hosts once no round is open — every
    /// correct host has then recalled what the failed never acknowledged (the `Recalled` relay
    /// leaves a host with its `Recall`s, before its `Completed`).
    fn answer_recovering(&mut self) {
        if !self.rounds.is_empty() {
            return;
        }
        let Some(r) = self.relay.as_mut() else {
            return;
        };
        if r.recovering.is_empty() {
            return;
        }
        let failed: Vec<(ProcId, Timestamp)> =
            r.failed_procs.iter().map(|(&p, &t)| (p, t)).collect();
        let recalled: Vec<(ProcId, Timestamp)> = r.recalled.iter().copied().collect();
        let (ready, waiting): (BTreeSet<NodeId>, BTreeSet<NodeId>) =
            std::mem::take(&mut r.recovering)
                .into_iter()
                .partition(|h| self.failed[h.index()]);
        r.recovering = waiting;
        for h in ready {
            r.settled.insert(h);
            r.out.push_back((
                MgmtDest::Node(h),
                RelayMsg::Settle {
                    failed: failed.clone(),
                    recalled: recalled.clone(),
                },
            ));
        }
    }
}

impl Node for Controller {
    /// The controller is on the management network only.
    type Packet = Infallible;
    type Event = CtrlEvent;
    type Mgmt = Mgmt;

    fn handle(&mut self, now: Instant, input: Input<Infallible, Mgmt>) {
        match input {
            Input::Packet { packet, .. } => match packet {},
            Input::Timeout => self.on_timer(now),
            Input::Mgmt(Mgmt::Ctrl(msg)) => self.on_ctrl_msg(now, msg),
            Input::Mgmt(Mgmt::Relay(msg)) => self.on_relay_msg(now, msg),
            Input::Notice(Notice::Recovered) => self.on_recover(now),
            Input::Notice(Notice::Unreachable(host)) => self.on_unreachable(now, host),
            Input::Notice(Notice::LinkUp) => {}
        }
        self.invariants();
    }

    /// The procedure's messages and events in the order decided, then the relays.
    fn poll_output(&mut self) -> Option<Output<Infallible, CtrlEvent, Mgmt>> {
        if let Some(o) = self.pop_output() {
            return Some(o.into());
        }
        let (to, msg) = self.pop_relay()?;
        Some(Output::Mgmt {
            to,
            msg: Mgmt::Relay(msg),
        })
    }

    /// When Determine is due, or a round stops waiting for callbacks.
    fn poll_timeout(&self) -> Option<Instant> {
        let deadline = self
            .rounds
            .values()
            .flat_map(|r| r.deadlines.values())
            .min()
            .copied();
        [self.determine_at, deadline].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests;
