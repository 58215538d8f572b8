//! The controller: registration, process ids, addresses and health of a live cluster (1Pipe
//! §6.1: "when lib1pipe initializes, it registers to the controller"), and the network
//! controller of reliable failure handling (§5.2).
//!
//! It holds the cluster file, accepts members over TCP ([`crate::control`]), gives each process
//! an id and each member the address to bind, and once every member of the file has bound its
//! socket, sends everyone the cluster with all addresses filled in — from which each member
//! builds its own port table. Afterwards it keeps each member's last counters and time seen,
//! answers `Status`, and tells everyone when a member leaves or its connection is lost
//! (`Down`: a hint, which endpoints surface as [`crate::endpoint::Event::ProcessFailed`] with
//! reason `lost`; it repairs nothing).
//!
//! ## Failure handling (§5.2)
//!
//! The procedure is `onepipe_proto::failure::Controller`, the same sans-IO state machine the
//! simulator drives, over the cluster's routing graph ([`crate::failure::LiveTopology`]):
//!
//! * **Detect**: aggregators and endpoints send `Ctrl { LinkDown }` when an input falls silent
//!   for the cluster's link timeout, with the last commit barrier it carried — the failure
//!   timestamp comes from these reports, never from a lost TCP connection. A report must be
//!   about the sender's own input, a completion in its own name, a forwarded recall from itself:
//!   anything else is counted as malformed and refused.
//! * **Determine / Broadcast**: the state machine's timer runs on this controller's monotonic
//!   clock (ns since it started), polled by the accept loop every few milliseconds; its
//!   `Failure` messages go to the correct processes, and `Declared` to every member.
//! * **Recall** between processes is relayed through here (`Ctrl { to: Some(h) }`).
//! * **Resume** goes to every correct process and, once per round, to every aggregator, which
//!   stops waiting for the dead inputs' commit barriers.
//!
//! A cluster whose shape has no routing graph runs without it (the reason is logged and kept
//! for `failure_handling`), as before this existed.
//!
//! What it is not: replicated. Its state lives in this process's memory; if it dies, later
//! failures cannot be repaired (the paper replicates it with Paxos or Raft — a standby that
//! takes over is built separately; [`Controller::failure_rounds`] and the procedure's state are
//! what it would have to take over).

use crate::cluster::Cluster;
use crate::control::{
    parse_line, read_line, write_line, FromController, JoinAs, Member, MemberStatus, ToController,
};
use crate::failure::{LiveTopology, WireCtrl};
use onepipe_proto::failure::{
    Controller as Procedure, ControllerConfig, CtrlDest, CtrlMsg, CtrlOut,
};
use onepipe_proto::ids::{NodeId, ProcId};
use onepipe_proto::time::Instant as ProtoInstant;
use std::collections::BTreeMap;
use std::io::{self, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often blocked threads look at the stop flag.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Most connections open at once; more are closed on accept (counted as malformed).
pub const CONNECTIONS_MAX: usize = 4096;

/// A running controller. Stops (and joins its threads) on [`Controller::stop`] or drop.
pub struct Controller {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<State>>,
    accept: Option<JoinHandle<()>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Waiting,
    Joined,
    Bound,
    Left,
    Lost,
}

impl SlotState {
    fn name(self) -> &'static str {
        match self {
            SlotState::Waiting => "waiting",
            SlotState::Joined => "joined",
            SlotState::Bound => "bound",
            SlotState::Left => "left",
            SlotState::Lost => "lost",
        }
    }
}

#[derive(Debug)]
struct Slot {
    state: SlotState,
    addr: Option<SocketAddr>,
    last_seen: Option<Instant>,
    counters: BTreeMap<String, u64>,
    conn: Option<u64>,
}

struct Conn {
    writer: TcpStream,
    peer: SocketAddr,
    member: Option<Member>,
}

/// One round of the failure procedure, as the controller saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureRound {
    /// The round number.
    pub round: u32,
    /// Milliseconds since the controller started, when Determine declared them.
    pub declared_ms: u64,
    /// The processes declared failed, with their failure timestamps (raw ns).
    pub failed: Vec<(u32, u64)>,
    /// When the round resumed, if it has.
    pub resumed_ms: Option<u64>,
}

/// The §5.2 procedure and what it needs.
struct Failure {
    live: LiveTopology,
    procedure: Procedure,
    epoch: Instant,
    rounds: Vec<FailureRound>,
}

/// Rounds remembered for [`Controller::failure_rounds`]; older ones are forgotten.
const FAILURE_ROUNDS_MAX: usize = 1024;

struct State {
    cluster: Cluster,
    /// The failure procedure, or why this cluster has none.
    failure: Result<Failure, String>,
    slots: BTreeMap<Member, Slot>,
    conns: BTreeMap<u64, Conn>,
    next_conn: u64,
    ready: bool,
    malformed: u64,
    log: bool,
    handlers: Vec<JoinHandle<()>>,
}

impl Controller {
    /// Listens on `listen` (port 0: any free port) and serves `cluster`. With `log`, joins,
    /// departures and refusals are written to standard error.
    ///
    /// # Errors
    /// An invalid cluster (`InvalidInput`), or the address cannot be bound.
    pub fn start(cluster: Cluster, listen: SocketAddr, log: bool) -> io::Result<Controller> {
        cluster
            .validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let mut slots = BTreeMap::new();
        for a in &cluster.aggregators {
            slots.insert(Member::Aggregator(a.name.clone()), Slot::new());
        }
        for p in &cluster.processes {
            slots.insert(Member::Process(p.id), Slot::new());
        }
        let failure = failure_procedure(&cluster);
        if let (Err(why), true) = (&failure, log) {
            eprintln!("onepipe controller: no failure handling (§5.2) for this cluster: {why}");
        }
        let state = Arc::new(Mutex::new(State {
            failure,
            cluster,
            slots,
            conns: BTreeMap::new(),
            next_conn: 0,
            ready: false,
            malformed: 0,
            log,
            handlers: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::Builder::new()
                .name("onepipe-controller".into())
                .spawn(move || accept_loop(listener, state, stop))?
        };
        Ok(Controller {
            addr,
            stop,
            state,
            accept: Some(accept),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The cluster it serves (addresses as in the file).
    pub fn cluster(&self) -> Cluster {
        self.state.lock().expect("controller state").cluster.clone()
    }

    /// Whether every member has bound and been sent the cluster.
    pub fn ready(&self) -> bool {
        self.state.lock().expect("controller state").ready
    }

    /// Every member's status, and how many malformed control lines arrived.
    pub fn status(&self) -> (Vec<MemberStatus>, u64) {
        let st = self.state.lock().expect("controller state");
        (st.status(), st.malformed)
    }

    /// The failure procedure's rounds so far (§5.2): who was declared failed, with which
    /// failure timestamp, and when each round resumed.
    pub fn failure_rounds(&self) -> Vec<FailureRound> {
        let st = self.state.lock().expect("controller state");
        st.failure
            .as_ref()
            .map(|f| f.rounds.clone())
            .unwrap_or_default()
    }

    /// Whether this cluster has failure handling (§5.2), or why not.
    ///
    /// # Errors
    /// The cluster's shape has no routing graph ([`LiveTopology::of`]).
    pub fn failure_handling(&self) -> Result<(), String> {
        let st = self.state.lock().expect("controller state");
        st.failure.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// Stops accepting, closes every connection and joins the threads.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let handlers = std::mem::take(&mut self.state.lock().expect("controller state").handlers);
        for h in handlers {
            let _ = h.join();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Slot {
    fn new() -> Slot {
        Slot {
            state: SlotState::Waiting,
            addr: None,
            last_seen: None,
            counters: BTreeMap::new(),
            conn: None,
        }
    }
}

/// The §5.2 procedure for `cluster`, settling for half a link timeout: every neighbour of a
/// failed component times it out after the same silence, so their reports arrive within a few
/// beacon intervals (and scheduling delays) of one another.
fn failure_procedure(cluster: &Cluster) -> Result<Failure, String> {
    let live = LiveTopology::of(cluster)?;
    let cfg = ControllerConfig {
        procs_of_host: (0..cluster.procs()).map(|p| vec![ProcId(p)]).collect(),
        settle_ns: (cluster.link_timeout_ns / 2).max(20 * cluster.beacon_interval_ns),
    };
    Ok(Failure {
        procedure: Procedure::new(cfg, live.topology().clone()),
        live,
        epoch: Instant::now(),
        rounds: Vec::new(),
    })
}

fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        // The failure procedure's timer: Determine once every report has had time to arrive.
        state.lock().expect("controller state").on_tick();
        match listener.accept() {
            Ok((stream, peer)) => {
                let mut st = state.lock().expect("controller state");
                if st.conns.len() >= CONNECTIONS_MAX {
                    st.malformed += 1;
                    continue;
                }
                let Ok(writer) = stream.try_clone() else {
                    continue;
                };
                let _ = writer.set_write_timeout(Some(Duration::from_secs(1)));
                let id = st.next_conn;
                st.next_conn += 1;
                st.conns.insert(
                    id,
                    Conn {
                        writer,
                        peer,
                        member: None,
                    },
                );
                let (state2, stop2) = (state.clone(), stop.clone());
                let spawned = std::thread::Builder::new()
                    .name("onepipe-controller-conn".into())
                    .spawn(move || serve(stream, id, state2, stop2));
                st.handlers.retain(|h| !h.is_finished());
                match spawned {
                    Ok(h) => st.handlers.push(h),
                    Err(_) => {
                        st.conns.remove(&id);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(POLL_INTERVAL / 5)
            }
            Err(_) => std::thread::sleep(POLL_INTERVAL / 5),
        }
    }
}

/// Serves one connection until it closes or the controller stops.
fn serve(stream: TcpStream, id: u64, state: Arc<Mutex<State>>, stop: Arc<AtomicBool>) {
    let _ = stream.set_read_timeout(Some(POLL_INTERVAL));
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let closed_cleanly = loop {
        if stop.load(Ordering::SeqCst) {
            break true;
        }
        match read_line(&mut reader, &mut buf) {
            Ok(false) => break false,
            Ok(true) => {
                // A read timeout may have split a line: keep the start until its newline.
                pending.extend_from_slice(&buf);
                if pending.last() != Some(&b'\n') {
                    continue;
                }
                let line = std::mem::take(&mut pending);
                let mut st = state.lock().expect("controller state");
                match parse_line::<ToController>(&line) {
                    Ok(msg) => st.on_message(id, msg),
                    Err(e) => {
                        st.malformed += 1;
                        st.reply(
                            id,
                            &FromController::Error {
                                message: format!("not a control message: {e}"),
                            },
                        );
                    }
                }
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                pending.extend_from_slice(&buf);
                if pending.len() > crate::control::LINE_LEN_MAX {
                    state.lock().expect("controller state").malformed += 1;
                    break false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                // A line too long: garbage, not a member.
                state.lock().expect("controller state").malformed += 1;
                break false;
            }
            // Reset or failed: the member is gone.
            Err(_) => break false,
        }
    };
    let mut st = state.lock().expect("controller state");
    st.on_closed(id, closed_cleanly);
}

impl State {
    fn status(&self) -> Vec<MemberStatus> {
        let now = Instant::now();
        self.slots
            .iter()
            .map(|(m, s)| MemberStatus {
                member: m.clone(),
                state: s.state.name().to_string(),
                addr: s.addr,
                last_seen_ms: s
                    .last_seen
                    .map(|t| now.saturating_duration_since(t).as_millis() as u64),
                counters: s.counters.clone(),
            })
            .collect()
    }

    fn reply(&mut self, id: u64, msg: &FromController) {
        if let Some(c) = self.conns.get_mut(&id) {
            let _ = write_line(&mut c.writer, msg);
        }
    }

    fn log(&self, what: std::fmt::Arguments<'_>) {
        if self.log {
            eprintln!("onepipe controller: {what}");
        }
    }

    fn on_message(&mut self, id: u64, msg: ToController) {
        if let Some(m) = self.conns.get(&id).and_then(|c| c.member.clone()) {
            if let Some(s) = self.slots.get_mut(&m) {
                s.last_seen = Some(Instant::now());
            }
        }
        match msg {
            ToController::Join { member } => self.on_join(id, member),
            ToController::Bound { addr } => self.on_bound(id, addr),
            ToController::Health { counters } => {
                if let Some(m) = self.conns.get(&id).and_then(|c| c.member.clone()) {
                    if let Some(s) = self.slots.get_mut(&m) {
                        s.counters = counters;
                    }
                }
            }
            ToController::Leave => {
                if let Some(m) = self.conns.get_mut(&id).and_then(|c| c.member.take()) {
                    self.depart(&m, SlotState::Left);
                }
            }
            ToController::Status => {
                let msg = FromController::Status {
                    members: self.status(),
                    malformed: self.malformed,
                };
                self.reply(id, &msg);
            }
            ToController::Ctrl { to, msg } => self.on_ctrl(id, to, msg),
        }
    }

    /// A §5.2 control message from a member: to the procedure, or relayed to a process.
    fn on_ctrl(&mut self, id: u64, to: Option<u32>, wire: WireCtrl) {
        let Some(member) = self.conns.get(&id).and_then(|c| c.member.clone()) else {
            self.malformed += 1;
            return self.refuse(id, "Ctrl before Join".into());
        };
        let agg = match &member {
            Member::Aggregator(name) => self.cluster.aggregator_index(name),
            Member::Process(_) => None,
        };
        let procs = self.cluster.procs();
        let Ok(f) = self.failure.as_mut() else {
            let why = self.failure.as_ref().err().cloned().unwrap_or_default();
            return self.refuse(id, format!("no failure handling in this cluster: {why}"));
        };
        // Distrust the wire: a member speaks for its own nodes only.
        let live = &f.live;
        let own = |n: NodeId| match &member {
            Member::Process(p) => n == NodeId(*p),
            Member::Aggregator(_) => agg.is_some_and(|a| live.nodes_of(a).contains(&n)),
        };
        let msg = CtrlMsg::from(wire.clone());
        let allowed = match (to, &msg) {
            (None, CtrlMsg::LinkDown { reporter, .. }) => own(*reporter),
            (None, CtrlMsg::Completed { host, .. }) => own(*host),
            (Some(h), CtrlMsg::Recall { from, .. } | CtrlMsg::RecallAck { from, .. }) => {
                own(*from) && h < procs
            }
            _ => false,
        };
        if !allowed {
            self.malformed += 1;
            return self.refuse(id, format!("{member} may not send {wire:?}"));
        }
        if let Some(h) = to {
            return self.send_to(&Member::Process(h), &FromController::Ctrl { msg: wire });
        }
        let now = ProtoInstant(f.epoch.elapsed().as_nanos() as u64);
        f.procedure.on_message(now, msg);
        self.drain_failure();
    }

    /// Runs the procedure's timer if it is due.
    fn on_tick(&mut self) {
        let Ok(f) = self.failure.as_mut() else {
            return;
        };
        let now = ProtoInstant(f.epoch.elapsed().as_nanos() as u64);
        if f.procedure.poll_timeout().is_some_and(|t| t <= now) {
            f.procedure.on_timeout(now);
            self.drain_failure();
        }
    }

    /// Carries out what the procedure decided: messages to members, declarations, resumptions.
    fn drain_failure(&mut self) {
        let Ok(f) = self.failure.as_mut() else {
            return;
        };
        let outs: Vec<CtrlOut> = std::iter::from_fn(|| f.procedure.poll_output()).collect();
        let ms = f.epoch.elapsed().as_millis() as u64;
        for o in outs {
            match o {
                CtrlOut::Send {
                    to: CtrlDest::Node(n),
                    msg,
                } => self.send_ctrl(n, &msg),
                // The procedure does not write to itself.
                CtrlOut::Send {
                    to: CtrlDest::Controller,
                    ..
                } => {}
                CtrlOut::Declared { round, hosts, .. } => {
                    let failed: Vec<(u32, u64)> =
                        hosts.iter().map(|(h, ts)| (h.0, ts.raw())).collect();
                    let names: Vec<String> = failed
                        .iter()
                        .map(|(p, ts)| format!("p{p} at ts {ts}"))
                        .collect();
                    self.log(format_args!(
                        "round {round}: declared failed {}",
                        names.join(", ")
                    ));
                    if let Ok(f) = self.failure.as_mut() {
                        if f.rounds.len() < FAILURE_ROUNDS_MAX {
                            f.rounds.push(FailureRound {
                                round,
                                declared_ms: ms,
                                failed: failed.clone(),
                                resumed_ms: None,
                            });
                        }
                    }
                    self.broadcast(&FromController::Declared { round, failed });
                }
                CtrlOut::Resumed { round } => {
                    self.log(format_args!("round {round}: resumed"));
                    if let Ok(f) = self.failure.as_mut() {
                        if let Some(r) = f.rounds.iter_mut().find(|r| r.round == round) {
                            r.resumed_ms = Some(ms);
                        }
                    }
                }
            }
        }
    }

    /// Sends a procedure message to graph node `n`: a process, or the aggregator it belongs to
    /// (once per message: an aggregator's halves share one connection, and a `Resume` names
    /// every dead link, so only the one to its first node goes).
    fn send_ctrl(&mut self, n: NodeId, msg: &CtrlMsg) {
        let Ok(f) = self.failure.as_ref() else {
            return;
        };
        let member = if n.0 < self.cluster.procs() {
            Member::Process(n.0)
        } else {
            let Some(a) = f.live.aggregator_of(n) else {
                return;
            };
            if f.live.nodes_of(a).first() != Some(&n) {
                return;
            }
            Member::Aggregator(self.cluster.aggregators[a].name.clone())
        };
        let line = FromController::Ctrl {
            msg: WireCtrl::from(msg),
        };
        self.send_to(&member, &line);
    }

    /// Writes to `member` if it is connected (a member that is gone misses it: it has failed).
    fn send_to(&mut self, member: &Member, msg: &FromController) {
        if let Some(c) = self.slots.get(member).and_then(|s| s.conn) {
            self.reply(c, msg);
        }
    }

    fn broadcast(&mut self, msg: &FromController) {
        let ids: Vec<u64> = self.slots.values().filter_map(|s| s.conn).collect();
        for c in ids {
            self.reply(c, msg);
        }
    }

    fn refuse(&mut self, id: u64, message: String) {
        self.log(format_args!("refused: {message}"));
        self.reply(id, &FromController::Error { message });
    }

    fn on_join(&mut self, id: u64, want: JoinAs) {
        if self.conns.get(&id).is_some_and(|c| c.member.is_some()) {
            return self.refuse(id, "this connection has already joined".into());
        }
        let member = match want {
            JoinAs::Aggregator(name) => Member::Aggregator(name),
            JoinAs::Process(Some(p)) => Member::Process(p),
            JoinAs::Process(None) => {
                let free = self.slots.iter().find(|(m, s)| {
                    matches!(m, Member::Process(_)) && s.state == SlotState::Waiting
                });
                match free {
                    Some((m, _)) => m.clone(),
                    None => return self.refuse(id, "every process id is taken".into()),
                }
            }
        };
        let Some(slot) = self.slots.get_mut(&member) else {
            return self.refuse(id, format!("{member} is not in the cluster file"));
        };
        if slot.state != SlotState::Waiting {
            let state = slot.state.name();
            return self.refuse(id, format!("{member} has already joined (state: {state})"));
        }
        slot.state = SlotState::Joined;
        slot.conn = Some(id);
        slot.last_seen = Some(Instant::now());
        let bind = match &member {
            Member::Aggregator(name) => self.cluster.aggregator(name).map(|a| a.addr),
            Member::Process(p) => self.cluster.process(*p).map(|p| p.addr),
        }
        .expect("slots are the cluster's members");
        if let Some(c) = self.conns.get_mut(&id) {
            c.member = Some(member.clone());
        }
        self.log(format_args!("{member} joined"));
        self.reply(id, &FromController::Welcome { member, bind });
    }

    fn on_bound(&mut self, id: u64, mut addr: SocketAddr) {
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        let Some(member) = conn.member.clone() else {
            return self.refuse(id, "Bound before Join".into());
        };
        // A member bound to a wildcard address is reached at the address it connected from.
        if addr.ip().is_unspecified() {
            addr.set_ip(conn.peer.ip());
        }
        let slot = self
            .slots
            .get_mut(&member)
            .expect("joined members have slots");
        if slot.state != SlotState::Joined {
            return self.refuse(id, format!("{member} is not waiting to bind"));
        }
        slot.state = SlotState::Bound;
        slot.addr = Some(addr);
        self.log(format_args!("{member} bound {addr}"));
        if self.ready {
            // A late member (only one that never joined before can be): it gets the cluster
            // as it is.
            let msg = FromController::Ready {
                cluster: Box::new(self.resolved()),
            };
            return self.reply(id, &msg);
        }
        if self.slots.values().all(|s| s.state == SlotState::Bound) {
            self.ready = true;
            let msg = FromController::Ready {
                cluster: Box::new(self.resolved()),
            };
            let ids: Vec<u64> = self.slots.values().filter_map(|s| s.conn).collect();
            for c in ids {
                self.reply(c, &msg);
            }
            self.log(format_args!(
                "cluster ready: {} aggregators, {} processes",
                self.cluster.aggregators.len(),
                self.cluster.processes.len()
            ));
        }
    }

    /// The cluster with every bound member's address.
    fn resolved(&self) -> Cluster {
        let mut c = self.cluster.clone();
        for a in &mut c.aggregators {
            if let Some(addr) = self.slots[&Member::Aggregator(a.name.clone())].addr {
                a.addr = addr;
            }
        }
        for p in &mut c.processes {
            if let Some(addr) = self.slots[&Member::Process(p.id)].addr {
                p.addr = addr;
            }
        }
        c
    }

    fn depart(&mut self, member: &Member, how: SlotState) {
        let slot = self.slots.get_mut(member).expect("members have slots");
        slot.state = how;
        slot.conn = None;
        let reason = how.name().to_string();
        self.log(format_args!("{member} {reason}"));
        let msg = FromController::Down {
            member: member.clone(),
            reason,
        };
        let ids: Vec<u64> = self.slots.values().filter_map(|s| s.conn).collect();
        for c in ids {
            self.reply(c, &msg);
        }
    }

    fn on_closed(&mut self, id: u64, controller_stopping: bool) {
        let Some(conn) = self.conns.remove(&id) else {
            return;
        };
        if let (Some(m), false) = (conn.member, controller_stopping) {
            self.depart(&m, SlotState::Lost);
        }
    }
}
