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
//! * **Controller forwarding** (`forward_after > 0` in the cluster file): a process's `Relay`
//!   line (packets its data path could not deliver, in its own name) goes to the procedure
//!   ([`HaController::on_relay`], a forward not logged), which relays it to the receiving process.
//! * **Receiver recovery**: a process told it failed (or started again, `JoinOptions::restarted`:
//!   a lost slot may join again once the cluster runs, on its old address) asks to recover,
//!   settles and asks to rejoin (`Relay` lines, logged); the `Admit`s go to the aggregators at
//!   the heads of the dead links and their `Admitted` come back; on `Joined` every member hears
//!   `FromController::Joined` (aggregators route the new id as the old one).
//!
//! Every tree a cluster file describes has a routing graph ([`Cluster::graph`](crate::cluster::Cluster::graph)); should one
//! not, the cluster runs without the procedure (the reason is logged and kept for
//! `failure_handling`).
//!
//! ## High availability (docs/CONTROLLER-HA.md)
//!
//! The procedure runs through [`onepipe_ctrlstore::HaController`] over a
//! [`ControllerStore`]: every input is logged before it is applied, so a standby that wins the
//! store's election replays the log and finishes an open round. By default
//! ([`Controller::start`]) the store is a private [`MemStore`] this controller leads at once —
//! nothing changes for a single controller. With [`Controller::start_ha`] (e.g. an etcd store
//! shared by several controllers) the controller:
//!
//! * **campaigns** while it listens; as a **standby** it answers every connection with one
//!   `Standby` line and closes it (members try the next address of their list);
//! * on **winning**, recovers the log ([`HaController::recover`]) and re-sends what may be
//!   outstanding; messages for members that have not re-registered yet wait for them
//!   (bounded, [`PENDING_LEN_MAX`]);
//! * keeps its lease alive every third of its time to live, on a thread of its own;
//! * when **deposed** (fenced, or the store unreachable for a whole lease, or an input the
//!   store refused) it stops sending at once, closes every connection and reports it
//!   ([`Controller::deposed`]): the daemon exits, a supervisor may start it again as a standby.
//!
//! Registration state is not stored: members whose control connection drops re-register with
//! whichever controller leads (`Rejoin`: same member, same bound address) and re-send their
//! §5.2 reports; the log fingerprints the cluster file, so both controllers must serve the
//! same one.
//!
//! ## Logs
//!
//! Through `tracing` (target `onepipe_runtime::controller`; what is shown is the subscriber's
//! choice, e.g. `RUST_LOG` for the `onepipe` command): `info` for leadership, members joining,
//! rejoining and leaving, the cluster becoming ready and §5.2 rounds declared and resumed;
//! `warn` for refusals, lost members, a store that fails and being deposed; `debug` for each
//! member's bound address. Nothing is logged per message or per health report.

mod conn;
mod keys;
mod leader;
mod registration;
mod rounds;
mod view;

use crate::auth::{ClusterSecret, Epoch};
use crate::cluster::Cluster;
use crate::control::{
    parse_line, read_line, write_line, FromController, JoinAs, Member, MemberStatus, ToController,
};
use crate::failure::{LiveTopology, WireCtrl, WireRelay};
use crate::keys::{KeyMaster, KeySend};
use crate::tls::{Channel, ChannelWriter, Credentials};
use conn::accept_loop;
use onepipe_ctrlstore::{ControllerStore, HaController, Leadership, MemStore, StoreError};
use onepipe_proto::failure::{ControllerConfig, CtrlEvent, CtrlMsg, Mgmt, MgmtDest, RelayMsg};
use onepipe_proto::ids::{NodeId, ProcId};
use onepipe_proto::time::Instant as ProtoInstant;
use onepipe_proto::Output;
use rounds::failure_procedure;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{self, BufReader};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tracing::{debug, info, warn};

/// How often blocked threads look at the stop flag.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Most connections open at once; more are closed on accept (counted as malformed).
pub const CONNECTIONS_MAX: usize = 4096;

/// Most messages waiting for one member that is not connected (after a takeover, until it
/// re-registers); more are dropped.
pub const PENDING_LEN_MAX: usize = 1024;

/// How often a standby runs for leader.
const CAMPAIGN_INTERVAL: Duration = Duration::from_millis(100);

/// The procedure's log, through a shared store.
type Procedure = HaController<Arc<dyn ControllerStore>>;

/// How a controller takes part in leader election (docs/CONTROLLER-HA.md).
#[derive(Clone)]
pub struct HaOptions {
    /// Where the procedure's log and the election live.
    pub store: Arc<dyn ControllerStore>,
    /// This controller's name in the election.
    pub name: String,
    /// The lease's time to live: how long a dead leader holds up a standby.
    pub lease_ttl: Duration,
}

impl HaOptions {
    /// A controller alone: a private in-memory store, which it leads at once.
    pub fn solo() -> HaOptions {
        HaOptions {
            store: Arc::new(MemStore::new()),
            name: "controller".into(),
            lease_ttl: Duration::from_secs(10),
        }
    }
}

impl std::fmt::Debug for HaOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HaOptions")
            .field("name", &self.name)
            .field("lease_ttl", &self.lease_ttl)
            .finish_non_exhaustive()
    }
}

/// What a controller of a protected cluster holds (docs/SECURITY.md): its TLS identity and
/// the cluster secret every link key comes from.
#[derive(Clone, Debug)]
pub struct ControllerSecurity {
    /// The controller's certificate (named [`crate::tls::CONTROLLER`]), key and the CA.
    pub credentials: Credentials,
    /// The cluster secret.
    pub secret: ClusterSecret,
}

impl ControllerSecurity {
    /// What `cluster`'s `[auth]` section asks for: `None` when nothing is protected, else the
    /// controller's files from its `pki` directory (`ca.crt`, `controller.crt`,
    /// `controller.key`, `secret`).
    ///
    /// # Errors
    /// The cluster says nothing about auth, or names no directory, or a file is missing: the
    /// message says what to do.
    pub fn load(cluster: &Cluster) -> Result<Option<ControllerSecurity>, String> {
        let Some(auth) = &cluster.auth else {
            return Err(NO_AUTH_SECTION.into());
        };
        if !auth.mode.seals() {
            return Ok(None);
        }
        let dir = auth.pki.as_ref().ok_or_else(|| {
            "auth is on but [auth] names no pki directory: `onepipe topology --pki DIR` writes one".to_string()
        })?;
        Ok(Some(ControllerSecurity {
            credentials: Credentials::load(dir, crate::tls::CONTROLLER)?,
            secret: ClusterSecret::load(&dir.join("secret"))?,
        }))
    }
}

/// Why a daemon refuses a cluster file without an `[auth]` section.
pub const NO_AUTH_SECTION: &str = "the cluster file says nothing about auth: make keys with `onepipe topology --pki DIR` (it writes the [auth] section), or write `auth = \"off\"` to run with nothing protected (docs/SECURITY.md)";

/// Connects to etcd at `endpoints` for the cluster named `cluster_key` (keys under
/// `/onepipe/<cluster_key>/`), with TLS and a user as `options` say.
///
/// # Errors
/// etcd cannot be reached, or refused the user.
#[cfg(feature = "etcd")]
pub fn etcd_store(
    endpoints: &[String],
    cluster_key: &str,
    options: &onepipe_ctrlstore::etcd::EtcdOptions,
) -> Result<Arc<dyn ControllerStore>, StoreError> {
    Ok(Arc::new(onepipe_ctrlstore::EtcdStore::connect_with(
        endpoints,
        cluster_key,
        options,
    )?))
}

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
    /// The process that took this slot joins a running cluster as a new process (§5.2
    /// rejoin): the slot was free when the cluster started, or its process left or was lost.
    rejoin: bool,
    last_seen: Option<Instant>,
    counters: BTreeMap<String, u64>,
    /// The member's management HTTP endpoint, from its last `Health`.
    metrics: Option<SocketAddr>,
    conn: Option<u64>,
}

struct Conn {
    writer: ChannelWriter,
    /// The TLS connection, whose certificate says whom the peer may act as; `None` when the
    /// cluster runs without auth (anyone may be anyone).
    identity: Option<Channel>,
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
    cfg: ControllerConfig,
    /// The procedure, once this controller leads.
    procedure: Option<Procedure>,
    epoch: Instant,
    rounds: Vec<FailureRound>,
    /// Detect reports (`LinkDown`) this controller logged.
    detected: u64,
    /// §5.2 rejoins: (old process, its new process ids), in order.
    rejoined: Vec<(u32, Vec<u32>)>,
}

impl Failure {
    fn now(&self) -> ProtoInstant {
        ProtoInstant(self.epoch.elapsed().as_nanos() as u64)
    }
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
    handlers: Vec<JoinHandle<()>>,
    /// This controller's name in the election.
    name: String,
    /// Serving members: false while standby, and again once deposed.
    leading: bool,
    /// Why this controller stopped leading, once it has.
    deposed: Option<String>,
    /// Messages for members not connected (after a takeover, until they re-register).
    pending: BTreeMap<Member, VecDeque<FromController>>,
    /// Whether a leader that stops gives up its lease (not when it plays dead).
    resign_on_stop: bool,
    /// The TLS side of every connection, when the cluster protects its control channel.
    tls: Option<Arc<rustls::ServerConfig>>,
    /// The cluster secret, until leading makes it the key schedule's.
    secret: Option<ClusterSecret>,
    /// The data path's key schedule, while leading a protected cluster.
    keys: Option<KeyMaster>,
    /// The store and leadership new key epochs are recorded in before they are handed out.
    store: Option<(Arc<dyn ControllerStore>, Leadership)>,
    /// When this controller started: the key schedule's time base.
    started: Instant,
    /// Connections refused at the TLS handshake (also in `malformed`).
    tls_refused: u64,
    /// The membership view's epoch: membership changes announced so far.
    view_epoch: u64,
    /// The members of the view last announced.
    announced: BTreeSet<u32>,
    /// The management HTTP endpoint serving this controller's metrics, if any (said in
    /// `Status` replies).
    metrics: Option<SocketAddr>,
}

/// The store's metadata key holding the highest key epoch handed out.
pub const KEY_EPOCH_KEY: &str = "key_epoch";

impl Controller {
    /// Listens on `listen` (port 0: any free port) and serves `cluster`. Joins, departures and
    /// refusals are logged (see the module docs).
    ///
    /// # Errors
    /// An invalid cluster (`InvalidInput`), or the address cannot be bound.
    pub fn start(cluster: Cluster, listen: SocketAddr) -> io::Result<Controller> {
        Controller::start_ha(cluster, listen, HaOptions::solo())
    }

    /// Listens on `listen` and campaigns in `ha`'s store; serves `cluster` once it leads (a
    /// standby turns connections away with `Standby`). See the module docs.
    ///
    /// # Errors
    /// An invalid cluster (`InvalidInput`), or the address cannot be bound.
    pub fn start_ha(cluster: Cluster, listen: SocketAddr, ha: HaOptions) -> io::Result<Controller> {
        let security = match &cluster.auth {
            None => None,
            Some(_) => ControllerSecurity::load(&cluster)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
        };
        Controller::start_secured(cluster, listen, ha, security)
    }

    /// [`Controller::start_ha`] with the TLS identity and cluster secret given (`None`: the
    /// cluster must not ask for auth).
    ///
    /// # Errors
    /// An invalid cluster, auth asked for without `security` (or given without being asked
    /// for), unusable credentials (`InvalidInput`), or the address cannot be bound.
    pub fn start_secured(
        cluster: Cluster,
        listen: SocketAddr,
        ha: HaOptions,
        security: Option<ControllerSecurity>,
    ) -> io::Result<Controller> {
        let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        cluster.validate().map_err(|e| invalid(e.to_string()))?;
        if cluster.auth_mode().seals() != security.is_some() {
            return Err(invalid(format!(
                "the cluster's auth is \"{}\" but the controller was {} credentials",
                cluster.auth_mode(),
                if security.is_some() {
                    "given"
                } else {
                    "not given"
                }
            )));
        }
        let tls = match &security {
            Some(s) => Some(s.credentials.server_config().map_err(invalid)?),
            None => None,
        };
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
        if let Err(why) = &failure {
            warn!("no failure handling (§5.2) for this cluster: {why}");
        }
        let state = Arc::new(Mutex::new(State {
            failure,
            cluster,
            slots,
            conns: BTreeMap::new(),
            next_conn: 0,
            ready: false,
            malformed: 0,
            handlers: Vec::new(),
            name: ha.name.clone(),
            leading: false,
            deposed: None,
            pending: BTreeMap::new(),
            resign_on_stop: true,
            tls,
            secret: security.map(|s| s.secret),
            keys: None,
            store: None,
            started: Instant::now(),
            tls_refused: 0,
            view_epoch: 0,
            announced: BTreeSet::new(),
            metrics: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::Builder::new()
                .name("onepipe-controller".into())
                .spawn(move || accept_loop(listener, state, stop, ha))?
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

    /// Says that this controller's metrics are served at `addr` (its `Status` replies tell
    /// `onepipe status` where to scrape).
    pub fn set_metrics_addr(&self, addr: Option<SocketAddr>) {
        self.state.lock().expect("controller state").metrics = addr;
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

    /// Whether this controller leads (serves members).
    pub fn leading(&self) -> bool {
        self.state.lock().expect("controller state").leading
    }

    /// Connections refused at the TLS handshake (a stranger, a plain client, another CA), and
    /// the key schedule's counters (zero without auth, or before leading).
    pub fn auth_stats(&self) -> (u64, crate::keys::KeyStats) {
        let st = self.state.lock().expect("controller state");
        let keys = st.keys.as_ref().map(KeyMaster::stats).unwrap_or_default();
        (st.tls_refused, keys)
    }

    /// The key epoch senders use now, while leading a protected cluster.
    pub fn key_epoch(&self) -> Option<Epoch> {
        let st = self.state.lock().expect("controller state");
        st.keys.as_ref().map(KeyMaster::active)
    }

    /// Why this controller stopped leading, once it has (it serves nobody any more).
    pub fn deposed(&self) -> Option<String> {
        self.state.lock().expect("controller state").deposed.clone()
    }

    /// §5.2 rejoins this controller admitted while leading: (old process, new process ids).
    pub fn rejoined(&self) -> Vec<(u32, Vec<u32>)> {
        let st = self.state.lock().expect("controller state");
        st.failure
            .as_ref()
            .map_or(Vec::new(), |f| f.rejoined.clone())
    }

    /// Packets this controller relayed for §5.2 controller forwarding while leading.
    pub fn forwarded(&self) -> u64 {
        let st = self.state.lock().expect("controller state");
        st.failure
            .as_ref()
            .ok()
            .and_then(|f| f.procedure.as_ref())
            .map_or(0, |ha| ha.controller().forwarded())
    }

    /// Detect reports (`LinkDown`, §5.2) this controller logged while leading.
    pub fn detected(&self) -> u64 {
        let st = self.state.lock().expect("controller state");
        st.failure.as_ref().map_or(0, |f| f.detected)
    }

    /// Whether this cluster has failure handling (§5.2), or why not.
    ///
    /// # Errors
    /// The cluster's shape has no routing graph ([`Cluster::graph`](crate::cluster::Cluster::graph)).
    pub fn failure_handling(&self) -> Result<(), String> {
        let st = self.state.lock().expect("controller state");
        st.failure.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// Stops accepting, closes every connection and joins the threads; a leader resigns, so a
    /// standby takes over at once.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// Stops as if the process had died: like [`Controller::stop`], but a leader does not
    /// resign — a standby waits for the lease to end (tests of failover).
    pub fn stop_without_resigning(mut self) {
        self.state.lock().expect("controller state").resign_on_stop = false;
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
            rejoin: false,
            last_seen: None,
            counters: BTreeMap::new(),
            metrics: None,
            conn: None,
        }
    }
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
                metrics: s.metrics,
            })
            .collect()
    }

    fn reply(&mut self, id: u64, msg: &FromController) {
        if let Some(c) = self.conns.get_mut(&id) {
            let _ = write_line(&mut c.writer, msg);
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
            ToController::Health { counters, metrics } => {
                if let Some(m) = self.conns.get(&id).and_then(|c| c.member.clone()) {
                    if let Some(s) = self.slots.get_mut(&m) {
                        s.counters = counters;
                        s.metrics = metrics;
                    }
                }
            }
            ToController::Leave { last } => {
                if let Some(m) = self.conns.get_mut(&id).and_then(|c| c.member.take()) {
                    self.depart(&m, SlotState::Left);
                    if let Member::Process(p) = m {
                        self.departed(p, last);
                    }
                }
            }
            ToController::Status => {
                let msg = FromController::Status {
                    members: self.status(),
                    malformed: self.malformed,
                    metrics: self.metrics,
                };
                self.reply(id, &msg);
            }
            ToController::Ctrl { to, msg } => self.on_ctrl(id, to, msg),
            ToController::Relay { msg } => self.on_relay(id, msg),
            ToController::Rejoin { member, addr } => self.on_rejoin(id, member, addr),
            ToController::KeysInstalled { epoch } => self.on_keys_installed(id, epoch),
        }
    }

    /// Whether connection `id`'s certificate lets it act as `member` (any connection may, when
    /// the cluster runs without auth).
    fn may_act_as(&self, id: u64, member: &Member) -> bool {
        let Some(conn) = self.conns.get(&id) else {
            return false;
        };
        let Some(channel) = &conn.identity else {
            return true;
        };
        channel.peer_may_act_as(&member.to_string())
            || (matches!(member, Member::Process(_))
                && channel.peer_may_act_as(crate::tls::ANY_PROCESS))
    }

    /// Writes to `member` if it is connected; keeps it for a member that is not (yet), unless
    /// it left (after a takeover, members re-register one by one; a member that is gone for
    /// good misses it: it has failed).
    fn send_to(&mut self, member: &Member, msg: &FromController) {
        let Some(slot) = self.slots.get(member) else {
            return;
        };
        match slot.conn {
            Some(c) => self.reply(c, msg),
            None if slot.state != SlotState::Left => {
                let q = self.pending.entry(member.clone()).or_default();
                if q.len() < PENDING_LEN_MAX {
                    q.push_back(msg.clone());
                }
            }
            None => {}
        }
    }

    fn refuse(&mut self, id: u64, message: String) {
        warn!("refused: {message}");
        self.reply(id, &FromController::Error { message });
    }

    /// [`State::send_to`] every member `pick` chooses.
    fn send_to_each(&mut self, pick: fn(&Member) -> bool, msg: &FromController) {
        let members: Vec<Member> = self.slots.keys().filter(|m| pick(m)).cloned().collect();
        for m in members {
            self.send_to(&m, msg);
        }
    }

    fn on_closed(&mut self, id: u64, controller_stopping: bool) {
        let Some(conn) = self.conns.remove(&id) else {
            return;
        };
        // A deposed controller closed every connection itself: nobody departed.
        if self.deposed.is_some() {
            return;
        }
        if let (Some(m), false) = (conn.member, controller_stopping) {
            self.depart(&m, SlotState::Lost);
        }
    }
}
