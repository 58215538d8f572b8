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
//! Every tree a cluster file describes has a routing graph ([`LiveTopology::of`]); should one
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

use crate::auth::{ClusterSecret, Epoch};
use crate::cluster::Cluster;
use crate::control::{
    parse_line, read_line, write_line, FromController, JoinAs, Member, MemberStatus, ToController,
};
use crate::failure::{LiveTopology, WireCtrl, WireRelay};
use crate::keys::{KeyMaster, KeySend};
use crate::tls::{Channel, ChannelWriter, Credentials};
use onepipe_ctrlstore::{ControllerStore, HaController, Leadership, MemStore, StoreError};
use onepipe_proto::failure::{
    ControllerConfig, CtrlEvent, CtrlMsg, CtrlOutput, Mgmt, MgmtDest, RelayMsg,
};
use onepipe_proto::ids::{NodeId, ProcId};
use onepipe_proto::time::Instant as ProtoInstant;
use onepipe_proto::Output;
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
    /// The cluster's shape has no routing graph ([`LiveTopology::of`]).
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
        callback_timeout_ns: cluster.callback_timeout_ns,
    };
    Ok(Failure {
        procedure: None,
        cfg,
        live,
        epoch: Instant::now(),
        rounds: Vec::new(),
        detected: 0,
        rejoined: Vec::new(),
    })
}

fn accept_loop(
    listener: TcpListener,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    ha: HaOptions,
) {
    let tls = state.lock().expect("controller state").tls.clone();
    let Some(leadership) = campaign(&listener, &stop, &ha, &tls) else {
        return;
    };
    {
        let mut st = state.lock().expect("controller state");
        if let Err(why) = st.lead(ha.store.clone(), leadership.clone()) {
            return st.depose(format!("cannot take over: {why}"));
        }
        let (state2, stop2, store) = (state.clone(), stop.clone(), ha.store.clone());
        match std::thread::Builder::new()
            .name("onepipe-controller-lease".into())
            .spawn(move || lease_loop(store, leadership, state2, stop2))
        {
            Ok(h) => st.handlers.push(h),
            Err(e) => return st.depose(format!("cannot start the lease thread: {e}")),
        }
    }
    while !stop.load(Ordering::SeqCst) {
        // The failure procedure's timer: Determine once every report has had time to arrive.
        {
            let mut st = state.lock().expect("controller state");
            if st.deposed.is_some() {
                return;
            }
            st.on_tick();
        }
        match listener.accept() {
            Ok((stream, peer)) => {
                let mut st = state.lock().expect("controller state");
                st.handlers.retain(|h| !h.is_finished());
                // Connections open or still in their handshake.
                if st.handlers.len() >= CONNECTIONS_MAX {
                    st.malformed += 1;
                    continue;
                }
                let id = st.next_conn;
                st.next_conn += 1;
                let (state2, stop2, tls) = (state.clone(), stop.clone(), st.tls.clone());
                // The TLS handshake happens on the connection's own thread: a slow or silent
                // client never holds up the accept loop.
                let spawned = std::thread::Builder::new()
                    .name("onepipe-controller-conn".into())
                    .spawn(move || serve(stream, peer, tls, id, state2, stop2));
                if let Ok(h) = spawned {
                    st.handlers.push(h);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(POLL_INTERVAL / 5)
            }
            Err(_) => std::thread::sleep(POLL_INTERVAL / 5),
        }
    }
}

/// Runs for leader every [`CAMPAIGN_INTERVAL`] until it wins (`None`: stopped first). Meanwhile
/// every connection is told `Standby` and closed.
fn campaign(
    listener: &TcpListener,
    stop: &AtomicBool,
    ha: &HaOptions,
    tls: &Option<Arc<rustls::ServerConfig>>,
) -> Option<Leadership> {
    let mut said = String::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        let holder = match ha.store.campaign(&ha.name, ha.lease_ttl, Duration::ZERO) {
            Ok(l) => return Some(l),
            Err(StoreError::CampaignTimedOut { holder, .. }) => holder,
            Err(e) => {
                let why = e.to_string();
                if why != said {
                    warn!(controller = %ha.name, "campaign: {why}");
                    said = why;
                }
                None
            }
        };
        if let (Some(h), false) = (&holder, said == format!("standby {holder:?}")) {
            said = format!("standby {holder:?}");
            info!(controller = %ha.name, "standby: {h} leads");
        }
        let until = Instant::now() + CAMPAIGN_INTERVAL;
        while Instant::now() < until {
            turn_away(listener, &holder, tls);
            std::thread::sleep(POLL_INTERVAL / 5);
        }
    }
}

/// A standby's answer to every connection: one `Standby` line (over TLS when the cluster has
/// it, on a short-lived thread of its own), then the connection closes.
fn turn_away(
    listener: &TcpListener,
    leader: &Option<String>,
    tls: &Option<Arc<rustls::ServerConfig>>,
) {
    while let Ok((stream, _)) = listener.accept() {
        let msg = FromController::Standby {
            leader: leader.clone(),
        };
        let tls = tls.clone();
        let _ = std::thread::Builder::new()
            .name("onepipe-controller-standby".into())
            .spawn(move || {
                let _ = stream.set_nonblocking(false);
                let Ok(channel) = open_channel(stream, tls) else {
                    return;
                };
                if let Ok(mut w) = channel.writer() {
                    let _ = w.set_write_timeout(Some(POLL_INTERVAL));
                    let _ = write_line(&mut w, &msg);
                    let _ = w.shutdown(Shutdown::Write);
                }
            });
    }
}

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A new connection as a [`Channel`]: the TLS handshake when the cluster has TLS.
fn open_channel(stream: TcpStream, tls: Option<Arc<rustls::ServerConfig>>) -> io::Result<Channel> {
    match tls {
        Some(cfg) => Channel::server(stream, cfg, HANDSHAKE_TIMEOUT),
        None => Ok(Channel::plain(stream)),
    }
}

/// Renews the lease every third of its time to live; deposes the controller when the store
/// says it no longer leads, or has not answered for a whole lease. Resigns when the controller
/// stops, so a standby need not wait for the lease to end.
fn lease_loop(
    store: Arc<dyn ControllerStore>,
    leadership: Leadership,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
) {
    let ttl = leadership.lease_ttl;
    let mut last_ok = Instant::now();
    let mut next = last_ok + ttl / 3;
    while !stop.load(Ordering::SeqCst) {
        if state.lock().expect("controller state").deposed.is_some() {
            return;
        }
        if Instant::now() < next {
            std::thread::sleep(POLL_INTERVAL / 5);
            continue;
        }
        match store.keep_alive(&leadership) {
            Ok(()) => {
                last_ok = Instant::now();
                next = last_ok + ttl / 3;
            }
            Err(e) if e.is_not_leader() || last_ok.elapsed() >= ttl => {
                let mut st = state.lock().expect("controller state");
                return st.depose(format!("lease: {e}"));
            }
            // Unavailable: try again soon, until the lease would have ended.
            Err(_) => next = Instant::now() + POLL_INTERVAL,
        }
    }
    if state.lock().expect("controller state").resign_on_stop {
        let _ = store.resign(leadership);
    }
}

/// Serves one connection until it closes or the controller stops: the TLS handshake first
/// (a client that fails it is counted and dropped), then one line at a time.
fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    id: u64,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
) {
    let _ = stream.set_nonblocking(false);
    let tls_on = tls.is_some();
    let channel = match open_channel(stream, tls) {
        Ok(c) => c,
        Err(e) => {
            let mut st = state.lock().expect("controller state");
            st.malformed += 1;
            st.tls_refused += 1;
            return debug!(%peer, "refused a connection: {e}");
        }
    };
    let (Ok(writer), Ok(reader)) = (channel.writer(), channel.reader()) else {
        return;
    };
    let _ = writer.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = reader.set_read_timeout(Some(POLL_INTERVAL));
    {
        let mut st = state.lock().expect("controller state");
        if st.deposed.is_some() {
            return;
        }
        st.conns.insert(
            id,
            Conn {
                writer,
                identity: tls_on.then_some(channel),
                peer,
                member: None,
            },
        );
    }
    let mut reader = BufReader::new(reader);
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

    /// Nanoseconds since this controller started: the key schedule's clock.
    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Starts the key schedule on taking the lead: the first epoch is above every epoch this
    /// cluster's controllers recorded in the store, and above the Unix time in seconds (a
    /// controller without a shared store starts above whatever one before it handed out).
    fn start_keys(
        &mut self,
        store: &Arc<dyn ControllerStore>,
        leadership: &Leadership,
    ) -> Result<(), String> {
        let Some(secret) = self.secret.clone() else {
            return Ok(());
        };
        let stored = store
            .get_meta(KEY_EPOCH_KEY)
            .map_err(|e| format!("reading the key epoch: {e}"))?
            .and_then(|v| <[u8; 4]>::try_from(v.as_slice()).ok())
            .map_or(0, u32::from_be_bytes);
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX - 1));
        let first = Epoch(stored.saturating_add(1).max(unix));
        store
            .put_meta(leadership, KEY_EPOCH_KEY, &first.0.to_be_bytes())
            .map_err(|e| format!("recording the key epoch: {e}"))?;
        let auth = self
            .cluster
            .auth
            .clone()
            .unwrap_or_else(crate::cluster::AuthConfig::off);
        let now = self.now_ns();
        let mut km = KeyMaster::new(secret, first, auth.rotate_every_ns, auth.grace_ns, now);
        if stored > 0 {
            // A takeover: members keep the old leader's keys until the first rotation.
            km.rotate_by(now + crate::keys::INSTALL_TIMEOUT_NS);
        }
        self.keys = Some(km);
        self.store = Some((store.clone(), leadership.clone()));
        Ok(())
    }

    /// Begins a key rotation (on the timer, a removal, or `restarted` registering again): the
    /// new epoch is recorded in the store before any of its keys goes out.
    fn rotate_keys(&mut self, restarted: Option<&Member>) {
        let Some(km) = self.keys.as_ref() else {
            return;
        };
        let epoch = km.next_epoch();
        if let Some((store, leadership)) = &self.store {
            if let Err(e) = store.put_meta(leadership, KEY_EPOCH_KEY, &epoch.0.to_be_bytes()) {
                return self.depose(format!("the store refused a key epoch: {e}"));
            }
        }
        let live: BTreeSet<Member> = self
            .slots
            .iter()
            .filter(|(_, s)| s.conn.is_some() && s.state == SlotState::Bound)
            .map(|(m, _)| m.clone())
            .collect();
        let now = self.now_ns();
        let km = self.keys.as_mut().expect("checked above");
        let sends = km.rotate(&self.cluster, epoch, &live, restarted, now);
        debug!(epoch = epoch.0, members = sends.len(), "key rotation begun");
        self.send_keys(sends);
    }

    fn send_keys(&mut self, sends: Vec<KeySend>) {
        for (member, msg) in sends {
            self.send_to(&member, &msg);
        }
    }

    fn on_keys_installed(&mut self, id: u64, epoch: Epoch) {
        let Some(member) = self.conns.get(&id).and_then(|c| c.member.clone()) else {
            return;
        };
        let now = self.now_ns();
        if let Some(km) = self.keys.as_mut() {
            let sends = km.installed(&member, epoch, now);
            if !sends.is_empty() {
                debug!(epoch = epoch.0, "key epoch activated");
            }
            self.send_keys(sends);
        }
    }

    /// A member's keys before it is told the cluster is ready: a member that held keys before
    /// (a restart) gets a new epoch only, anyone else the current one.
    fn keys_for_new_member(&mut self, member: &Member) {
        let Some(km) = self.keys.as_mut() else {
            return;
        };
        if km.holds(member) {
            return self.rotate_keys(Some(member));
        }
        let msgs = km.admit(&self.cluster, member);
        for m in msgs {
            self.send_to(member, &m);
        }
    }

    /// Starts leading with `leadership`: recovers the procedure's log (re-queuing what may be
    /// outstanding), and marks the processes it declared failed as lost (they do not rejoin).
    fn lead(
        &mut self,
        store: Arc<dyn ControllerStore>,
        leadership: Leadership,
    ) -> Result<(), onepipe_ctrlstore::HaError> {
        let (keys_store, keys_leadership) = (store.clone(), leadership.clone());
        if let Ok(f) = self.failure.as_mut() {
            let topo = f.live.topology().clone();
            // §5.2's relay channel is always on live: forwarding (when `forward_after` asks
            // for it) and receiver recovery, rejoining processes taking ids up to twice the
            // cluster's.
            let relay = Some(self.cluster.proc_ids_max());
            let ha =
                Procedure::recover_with(store, leadership, f.cfg.clone(), topo, f.now(), relay)?;
            let failed: Vec<NodeId> = ha.controller().failed_hosts().collect();
            // Above every epoch the predecessor announced (it counted one per declaration of a
            // member and one per rejoin; the log holds every declaration and rejoin).
            self.view_epoch = failed.len() as u64 + 2 * ha.controller().rejoined();
            let stats = ha.stats();
            f.procedure = Some(ha);
            for h in failed {
                if let Some(s) = self.slots.get_mut(&Member::Process(h.0)) {
                    s.state = SlotState::Lost;
                }
            }
            if stats.replayed > 0 {
                info!(
                    controller = %self.name,
                    "took over: replayed {} log entries, re-sending {}",
                    stats.replayed,
                    stats.resent
                );
            }
        }
        if let Err(why) = self.start_keys(&keys_store, &keys_leadership) {
            self.depose(why);
            return Ok(());
        }
        self.leading = true;
        info!("{} leads", self.name);
        self.drain_failure();
        Ok(())
    }

    /// Stops leading at once: nothing more is sent, every connection closes.
    fn depose(&mut self, why: String) {
        if self.deposed.is_some() {
            return;
        }
        warn!(controller = %self.name, "deposed: {why}");
        self.leading = false;
        self.deposed = Some(why);
        if let Ok(f) = self.failure.as_mut() {
            f.procedure = None;
        }
        for c in self.conns.values() {
            let _ = c.writer.shutdown(Shutdown::Both);
        }
    }

    /// A member registers again after its control connection was lost (a failover): same
    /// member, same bound address. Its data path never stopped, so the cluster was ready.
    fn on_rejoin(&mut self, id: u64, member: Member, mut addr: SocketAddr) {
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        if conn.member.is_some() {
            return self.refuse(id, "this connection has already joined".into());
        }
        if addr.ip().is_unspecified() {
            addr.set_ip(conn.peer.ip());
        }
        if !self.may_act_as(id, &member) {
            self.malformed += 1;
            return self.refuse(id, format!("the certificate does not name {member}"));
        }
        let declared = match (&member, &self.failure) {
            (Member::Process(p), Ok(f)) => f
                .procedure
                .as_ref()
                .is_some_and(|ha| ha.controller().is_failed(NodeId(*p))),
            _ => false,
        };
        let Some(slot) = self.slots.get_mut(&member) else {
            return self.refuse(id, format!("{member} is not in the cluster file"));
        };
        if slot.state == SlotState::Left || declared {
            let state = if declared { "declared failed" } else { "left" };
            return self.refuse(id, format!("{member} may not rejoin ({state})"));
        }
        let old = slot.conn.replace(id);
        slot.state = SlotState::Bound;
        slot.addr = Some(addr);
        slot.last_seen = Some(Instant::now());
        if let Some(old) = old.and_then(|o| self.conns.get_mut(&o)) {
            old.member = None;
        }
        if let Some(c) = self.conns.get_mut(&id) {
            c.member = Some(member.clone());
        }
        self.ready = true;
        if let Some(km) = self.keys.as_mut() {
            // It kept the keys the controller before this one gave it.
            km.adopt(&member);
        }
        info!("{member} rejoined at {addr}");
        self.reply(
            id,
            &FromController::Welcome {
                member: member.clone(),
                bind: addr,
            },
        );
        self.flush_pending(&member);
    }

    /// Sends `member` what waited for it.
    fn flush_pending(&mut self, member: &Member) {
        for msg in self.pending.remove(member).unwrap_or_default() {
            self.send_to(member, &msg);
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
            (None, CtrlMsg::Completed { host, .. } | CtrlMsg::CallbackTaken { host, .. }) => {
                own(*host)
            }
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
        let now = f.now();
        let report = matches!(msg, CtrlMsg::LinkDown { .. });
        let Some(ha) = f.procedure.as_mut() else {
            return self.refuse(id, "this controller does not lead".into());
        };
        // Logged before it is applied: an input the store refuses is not applied, and a
        // controller that cannot log cannot lead.
        match ha.on_message(now, msg) {
            Ok(()) => {
                f.detected += u64::from(report);
                self.drain_failure();
            }
            Err(e) => self.depose(format!("the store refused an input: {e}")),
        }
    }

    /// §5.2 controller forwarding: a process hands over packets its data path could not
    /// deliver; the procedure relays them to the receiver (not to or from a failed process).
    fn on_relay(&mut self, id: u64, wire: WireRelay) {
        let Some(member) = self.conns.get(&id).and_then(|c| c.member.clone()) else {
            self.malformed += 1;
            return self.refuse(id, "Relay before Join".into());
        };
        let msg = match wire.into_relay() {
            Ok(msg) => msg,
            Err(e) => {
                self.malformed += 1;
                return self.refuse(id, format!("a bad relay from {member}: {e}"));
            }
        };
        let Ok(f) = self.failure.as_mut() else {
            return self.refuse(id, "no failure handling in this cluster".into());
        };
        // Distrust the wire: a member relays in its own name only, and only what it may send.
        let live = &f.live;
        let allowed = match (&member, &msg) {
            (Member::Process(p), RelayMsg::Forward { from, .. }) => *from == NodeId(*p),
            (Member::Process(p), RelayMsg::RecoverRequest { host } | RelayMsg::Rejoin { host }) => {
                *host == NodeId(*p)
            }
            (Member::Process(_), RelayMsg::Recalled { .. }) => true,
            (Member::Aggregator(name), RelayMsg::Admitted { link, .. }) => {
                let agg = self.cluster.aggregator_index(name);
                live.link_head(*link)
                    .is_some_and(|n| agg.is_some_and(|a| live.nodes_of(a).contains(&n)))
            }
            _ => false,
        };
        if !allowed {
            self.malformed += 1;
            return self.refuse(id, format!("{member} may not relay {msg:?}"));
        }
        if matches!(msg, RelayMsg::Forward { .. }) && !self.cluster.forwarding() {
            return self.refuse(id, "forwarding is off (forward_after = 0)".into());
        }
        let now = f.now();
        let Some(ha) = f.procedure.as_mut() else {
            return self.refuse(id, "this controller does not lead".into());
        };
        // Recovery's relays are logged before they are applied, as control messages are.
        match ha.on_relay(now, msg) {
            Ok(()) => self.drain_failure(),
            Err(e) => self.depose(format!("the store refused a relay: {e}")),
        }
    }

    /// Runs the procedure's timer and the key schedule's if they are due.
    fn on_tick(&mut self) {
        let now = self.now_ns();
        if let Some(km) = self.keys.as_mut() {
            let (due, activation) = km.tick(now);
            if !activation.is_empty() {
                debug!(epoch = km.active().0, "key epoch activated");
            }
            self.send_keys(activation);
            if due && self.ready {
                self.rotate_keys(None);
            }
        }
        let Ok(f) = self.failure.as_mut() else {
            return;
        };
        let now = f.now();
        let Some(ha) = f.procedure.as_mut() else {
            return;
        };
        if ha.poll_timeout().is_some_and(|t| t <= now) {
            match ha.on_timeout(now) {
                Ok(()) => self.drain_failure(),
                Err(e) => self.depose(format!("the store refused a timeout: {e}")),
            }
        }
    }

    /// Carries out what the procedure decided: messages to members, declarations, resumptions.
    fn drain_failure(&mut self) {
        let Some(ha) = self
            .failure
            .as_mut()
            .ok()
            .and_then(|f| f.procedure.as_mut())
        else {
            return;
        };
        let outs: Vec<CtrlOutput> = std::iter::from_fn(|| ha.poll_output()).collect();
        let ms = self
            .failure
            .as_ref()
            .map_or(0, |f| f.epoch.elapsed().as_millis() as u64);
        for o in outs {
            match o {
                Output::Mgmt {
                    to: MgmtDest::Node(n),
                    msg: Mgmt::Ctrl(msg),
                } => self.send_ctrl(n, &msg),
                // `Failed`'s live form is `Declared`, sent to every member and again after a
                // takeover: one path, not two.
                Output::Mgmt {
                    msg: Mgmt::Relay(RelayMsg::Failed { .. }),
                    ..
                } => {}
                // Relays go to a process (forwarded packets, recovery's answers), or to the
                // aggregator at the head of a link (`Admit`).
                Output::Mgmt {
                    to: MgmtDest::Node(n),
                    msg: Mgmt::Relay(r),
                } => {
                    let msg = FromController::Relay {
                        msg: WireRelay::of(&r),
                    };
                    if let Some(member) = self.member_of(n) {
                        self.send_to(&member, &msg);
                    }
                }
                Output::Mgmt { .. } => {}
                Output::Event(CtrlEvent::Declared { round, hosts, .. }) => {
                    let failed: Vec<(u32, u64)> =
                        hosts.iter().map(|(h, ts)| (h.0, ts.raw())).collect();
                    let names: Vec<String> = failed
                        .iter()
                        .map(|(p, ts)| format!("p{p} at ts {ts}"))
                        .collect();
                    info!(round, "declared failed {}", names.join(", "));
                    if let Ok(f) = self.failure.as_mut() {
                        // A takeover declares an open round again: one entry per round.
                        let known = f.rounds.iter().any(|r| r.round == round);
                        if !known && f.rounds.len() < FAILURE_ROUNDS_MAX {
                            f.rounds.push(FailureRound {
                                round,
                                declared_ms: ms,
                                failed: failed.clone(),
                                resumed_ms: None,
                            });
                        }
                    }
                    // A process declared failed keeps its keys while it is connected: §5.2 lets
                    // it recover and rejoin as a new process, which needs its links. Its keys
                    // are retired when it leaves or is lost (`depart`), or starts again.
                    // The view without them: those whose process said it was leaving left;
                    // the others failed. (A host's processes are its current incarnation's.)
                    let (mut left, mut gone) = (Vec::new(), Vec::new());
                    if let Some(ha) = self
                        .failure
                        .as_ref()
                        .ok()
                        .and_then(|f| f.procedure.as_ref())
                    {
                        for (h, _) in &hosts {
                            let said = self
                                .slots
                                .get(&Member::Process(h.0))
                                .is_some_and(|s| s.state == SlotState::Left);
                            // Only members of the view announced change it: a free slot taken
                            // out at the start (even one a joiner took meanwhile) never was.
                            let procs = ha
                                .controller()
                                .procs_of(*h)
                                .iter()
                                .map(|p| p.0)
                                .filter(|p| self.announced.contains(p));
                            match said {
                                true => left.extend(procs),
                                false => gone.extend(procs),
                            }
                        }
                    }
                    let msg = FromController::Declared { round, failed };
                    self.send_to_each(|_| true, &msg);
                    self.send_view(Vec::new(), left, gone);
                }
                // §5.2 rejoin: process `host` is the new processes `procs`; the aggregators
                // route to them as to it.
                Output::Event(CtrlEvent::Joined { host, procs, .. }) => {
                    let procs: Vec<u32> = procs.iter().map(|p| p.0).collect();
                    info!("p{} rejoined as {procs:?}", host.0);
                    if let Ok(f) = self.failure.as_mut() {
                        f.rejoined.push((host.0, procs.clone()));
                    }
                    let msg = FromController::Joined {
                        host: host.0,
                        procs: procs.clone(),
                    };
                    self.send_to_each(|_| true, &msg);
                    self.send_view(procs, Vec::new(), Vec::new());
                }
                Output::Event(CtrlEvent::Resumed { round }) => {
                    info!(round, "resumed");
                    if let Ok(f) = self.failure.as_mut() {
                        if let Some(r) = f.rounds.iter_mut().find(|r| r.round == round) {
                            r.resumed_ms = Some(ms);
                        }
                    }
                }
                Output::Event(_) => {}
            }
        }
    }

    /// The member graph node `n` stands for: a process, or the aggregator it belongs to.
    fn member_of(&self, n: NodeId) -> Option<Member> {
        if n.0 < self.cluster.procs() {
            return Some(Member::Process(n.0));
        }
        let a = self.failure.as_ref().ok()?.live.aggregator_of(n)?;
        Some(Member::Aggregator(self.cluster.aggregators[a].name.clone()))
    }

    /// Sends a procedure message to graph node `n`: a process, or the aggregator it belongs to
    /// (once per message: an aggregator's halves share one connection, and a `Resume` names
    /// every dead link, so only the one to its first node goes).
    fn send_ctrl(&mut self, n: NodeId, msg: &CtrlMsg) {
        let Ok(f) = self.failure.as_ref() else {
            return;
        };
        let first_node = |a| f.live.nodes_of(a).first() == Some(&n);
        if n.0 >= self.cluster.procs() && !f.live.aggregator_of(n).is_some_and(first_node) {
            return;
        }
        let Some(member) = self.member_of(n) else {
            return;
        };
        let line = FromController::Ctrl {
            msg: WireCtrl::from(msg),
        };
        self.send_to(&member, &line);
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

    fn on_join(&mut self, id: u64, want: JoinAs) {
        if self.conns.get(&id).is_some_and(|c| c.member.is_some()) {
            return self.refuse(id, "this connection has already joined".into());
        }
        let member = match want {
            JoinAs::Aggregator(name) => Member::Aggregator(name),
            JoinAs::Process(Some(p)) => Member::Process(p),
            JoinAs::Process(None) => {
                // The lowest free id this connection's certificate lets it take: one nobody
                // joined as, or — once the cluster runs — one whose process left or was lost
                // and was declared failed (its slot is free for a new process).
                let free_slot = |m: &Member, s: &Slot| {
                    let Member::Process(p) = m else {
                        return false;
                    };
                    s.state == SlotState::Waiting
                        || self.ready
                            && matches!(s.state, SlotState::Left | SlotState::Lost)
                            && self.host_failed(*p)
                };
                let free = self
                    .slots
                    .iter()
                    .find(|(m, s)| free_slot(m, s) && self.may_act_as(id, m));
                let any_free = self.slots.iter().any(|(m, s)| free_slot(m, s));
                match free {
                    Some((m, _)) => m.clone(),
                    None if any_free => {
                        self.malformed += 1;
                        return self.refuse(id, "the certificate names no free process id".into());
                    }
                    None => return self.refuse(id, "every process id is taken".into()),
                }
            }
        };
        if !self.may_act_as(id, &member) {
            self.malformed += 1;
            return self.refuse(id, format!("the certificate does not name {member}"));
        }
        let Some(slot) = self.slots.get_mut(&member) else {
            return self.refuse(id, format!("{member} is not in the cluster file"));
        };
        // A process that died (or left) may start again once the cluster runs: with its memory
        // lost it recovers and rejoins as a new process (§5.2), on the address it had, which
        // its aggregator still sends to.
        let restart = matches!(member, Member::Process(_))
            && self.ready
            && matches!(slot.state, SlotState::Lost | SlotState::Left);
        if slot.state != SlotState::Waiting && !restart {
            let state = slot.state.name();
            return self.refuse(id, format!("{member} has already joined (state: {state})"));
        }
        slot.state = SlotState::Joined;
        slot.conn = Some(id);
        slot.last_seen = Some(Instant::now());
        // A slot that was free when the cluster started, or whose process is gone: the new
        // process joins the running cluster (§4.2 addition of links, §5.2 rejoin).
        slot.rejoin = matches!(member, Member::Process(_)) && (restart || self.ready);
        let file_addr = match &member {
            Member::Aggregator(name) => self.cluster.aggregator(name).map(|a| a.addr),
            Member::Process(p) => self.cluster.process(*p).map(|p| p.addr),
        };
        let bind = match &member {
            Member::Process(_) if restart => slot.addr.or(file_addr),
            _ => file_addr,
        }
        .expect("slots are the cluster's members");
        if let Some(c) = self.conns.get_mut(&id) {
            c.member = Some(member.clone());
        }
        if restart {
            // What waited for the dead incarnation means nothing to the new one.
            self.pending.remove(&member);
            info!("{member} joined again (restarted)");
        } else {
            info!("{member} joined");
        }
        self.reply(
            id,
            &FromController::Welcome {
                member: member.clone(),
                bind,
            },
        );
        self.flush_pending(&member);
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
        let rejoin = slot.rejoin;
        debug!("{member} bound {addr}");
        if self.ready {
            // A late member (a restart, or one that joins the running cluster): its keys, then
            // the cluster as it is; the aggregators learn where it is.
            self.keys_for_new_member(&member);
            let msg = FromController::Ready {
                cluster: Box::new(self.resolved()),
                rejoin,
            };
            self.reply(id, &msg);
            if matches!(member, Member::Process(_)) {
                let moved = FromController::Address {
                    member: member.clone(),
                    addr,
                };
                self.send_to_each(|m| matches!(m, Member::Aggregator(_)), &moved);
                let (epoch, members) = self.view();
                let view = FromController::View {
                    epoch,
                    members,
                    joined: Vec::new(),
                    left: Vec::new(),
                    failed: Vec::new(),
                };
                self.reply(id, &view);
            }
            return;
        }
        if !self.startable() {
            // Everyone waiting hears how far the cluster is (a join that times out says it).
            let count = |aggs: bool| {
                self.slots
                    .iter()
                    .filter(|(m, _)| matches!(m, Member::Aggregator(_)) == aggs)
                    .filter(|(_, s)| s.state == SlotState::Bound)
                    .count() as u32
            };
            let msg = FromController::Waiting {
                processes: count(false),
                of_processes: self.cluster.start_with.unwrap_or(self.cluster.procs()),
                aggregators: count(true),
                of_aggregators: self.cluster.aggregators.len() as u32,
            };
            let bound: Vec<u64> = self
                .slots
                .values()
                .filter(|s| s.state == SlotState::Bound)
                .filter_map(|s| s.conn)
                .collect();
            for c in bound {
                self.reply(c, &msg);
            }
            return;
        }
        self.start_cluster();
    }

    /// Every member needed has bound: the cluster starts. Everyone connected gets its keys and
    /// `Ready`; the free process slots leave the barriers; the processes get the first view.
    fn start_cluster(&mut self) {
        self.ready = true;
        let msg = FromController::Ready {
            cluster: Box::new(self.resolved()),
            rejoin: false,
        };
        let members: Vec<Member> = self
            .slots
            .iter()
            .filter(|(_, s)| s.conn.is_some())
            .map(|(m, _)| m.clone())
            .collect();
        for m in members {
            self.keys_for_new_member(&m);
            self.send_to(&m, &msg);
        }
        // Process ids nobody bound are free: their links leave the barriers now (one §5.2
        // round, as if they had left at once), and processes that join later take them.
        let vacant: Vec<u32> = self
            .slots
            .iter()
            .filter_map(|(m, s)| match m {
                Member::Process(p) if s.state != SlotState::Bound => Some(*p),
                _ => None,
            })
            .collect();
        let now_ts = crate::clock::Clock::of(self.cluster.clock)
            .now()
            .timestamp()
            .raw();
        for p in vacant {
            if let Some(s) = self.slots.get_mut(&Member::Process(p)) {
                s.rejoin = true;
            }
            self.departed(p, Some(now_ts));
        }
        let (_, everyone) = self.view();
        self.send_view_now(everyone, Vec::new(), Vec::new());
        info!(
            "cluster ready: {} aggregators, {} processes",
            self.cluster.aggregators.len(),
            self.cluster.processes.len()
        );
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
        // A member that left said so; one that is lost may have failed.
        if how == SlotState::Lost {
            warn!("{member} {reason}");
        } else {
            info!("{member} {reason}");
        }
        let msg = FromController::Down {
            member: member.clone(),
            reason,
        };
        let ids: Vec<u64> = self.slots.values().filter_map(|s| s.conn).collect();
        for c in ids {
            self.reply(c, &msg);
        }
        if self.keys.as_mut().is_some_and(|km| km.removed(member)) {
            self.rotate_keys(None);
        }
    }

    /// A process left on purpose (issue 35): the failure procedure takes it out at once — its
    /// uplink aggregator removes its link and reports its commit register, and the next round
    /// declares it — instead of waiting for the link to time out.
    fn departed(&mut self, p: u32, last: Option<u64>) {
        if !self.ready {
            return;
        }
        let Ok(f) = self.failure.as_mut() else {
            return;
        };
        let now = f.now();
        let Some(ha) = f.procedure.as_mut() else {
            return;
        };
        let msg = CtrlMsg::Departed {
            host: NodeId(p),
            last: last.map(onepipe_proto::Timestamp::new),
        };
        match ha.on_message(now, msg) {
            Ok(()) => self.drain_failure(),
            Err(e) => self.depose(format!("the store refused an input: {e}")),
        }
    }

    /// The membership view: every process slot's current process, unless declared failed.
    /// Its epoch counts changes — each declaration and each rejoin of a host — so a standby
    /// that replayed the log numbers views as its predecessor did.
    fn view(&self) -> (u64, Vec<u32>) {
        let procs = self.cluster.procs();
        let Some(ctrl) = self
            .failure
            .as_ref()
            .ok()
            .and_then(|f| f.procedure.as_ref())
            .map(|ha| ha.controller())
        else {
            return (0, (0..procs).collect());
        };
        // A slot's process is a member once it bound — but one that joins the running cluster
        // only once it has rejoined under its new id.
        let bound = |h: u32| {
            self.slots.get(&Member::Process(h)).is_some_and(|s| {
                s.addr.is_some() && !(s.rejoin && ctrl.procs_of(NodeId(h)) == [ProcId(h)])
            })
        };
        let mut members: Vec<u32> = (0..procs)
            .filter(|&h| bound(h) && !ctrl.is_failed(NodeId(h)))
            .flat_map(|h| ctrl.procs_of(NodeId(h)).iter().map(|p| p.0))
            .collect();
        members.sort_unstable();
        (self.view_epoch, members)
    }

    /// Whether host slot `p`'s process was declared failed (or its slot was free at the start).
    fn host_failed(&self, p: u32) -> bool {
        self.failure
            .as_ref()
            .ok()
            .and_then(|f| f.procedure.as_ref())
            .is_some_and(|ha| ha.controller().is_failed(NodeId(p)))
    }

    /// Whether the cluster can start: every aggregator bound, and every process — or
    /// `start_with` of them.
    fn startable(&self) -> bool {
        let aggs = self
            .slots
            .iter()
            .filter(|(m, _)| matches!(m, Member::Aggregator(_)))
            .all(|(_, s)| s.state == SlotState::Bound);
        let procs = self
            .slots
            .iter()
            .filter(|(m, s)| matches!(m, Member::Process(_)) && s.state == SlotState::Bound)
            .count() as u32;
        aggs && procs >= self.cluster.start_with.unwrap_or(self.cluster.procs())
    }

    /// Sends the view to every process (`joined`, `left`, `failed`: what changed; each
    /// change advances the epoch).
    fn send_view(&mut self, joined: Vec<u32>, left: Vec<u32>, failed: Vec<u32>) {
        let changes = (joined.len() + left.len() + failed.len()) as u64;
        if changes == 0 {
            return;
        }
        self.view_epoch += changes;
        self.send_view_now(joined, left, failed);
    }

    /// Sends the current view to every process, its epoch unchanged.
    fn send_view_now(&mut self, joined: Vec<u32>, left: Vec<u32>, failed: Vec<u32>) {
        let (epoch, members) = self.view();
        self.announced = members.iter().copied().collect();
        let msg = FromController::View {
            epoch,
            members,
            joined,
            left,
            failed,
        };
        self.send_to_each(|m| matches!(m, Member::Process(_)), &msg);
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
