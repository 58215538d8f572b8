//! [`Endpoint`]: the 1Pipe library API (Table 1) for one process of a live cluster.
//!
//! | Table 1 (§2.1) | here |
//! | --- | --- |
//! | `onepipe_init()` | [`Endpoint::join`] |
//! | `onepipe_exit()` | [`Endpoint::leave`] (or drop) |
//! | `onepipe_unreliable_send(vec[<dst, msg>])` | [`Endpoint::send_unreliable`]; [`Endpoint::send_unreliable_timeout`] waits for room |
//! | `TS, src, msg = onepipe_unreliable_recv()` | [`Endpoint::best_effort`]: [`Inbox::recv`] (blocking, with a deadline), [`Inbox::try_recv`], [`Inbox::poll`] (a batch into a handler), `Inbox::recv_async` with the `tokio` feature; both services in one timestamp order: [`Endpoint::recv_merged`] |
//! | `onepipe_reliable_send(vec[<dst, msg>])` | [`Endpoint::send_reliable`]; [`Endpoint::send_reliable_timeout`] waits for room |
//! | `TS, src, msg = onepipe_reliable_recv()` | [`Endpoint::reliable`]: the same four |
//! | (§2.2.2: a reply that needs no place in the order) | [`Endpoint::send_plain`] (and `_timeout`, `broadcast_plain`); received from [`Endpoint::plain`] on arrival, outside both orders |
//! | `onepipe_send_fail_callback(func(TS, dst, msg))` | [`Event::SendFailed`] from [`Endpoint::next_event`] |
//! | `onepipe_proc_fail_callback(func(proc, TS))` | [`Event::ProcessFailed`] from [`Endpoint::next_event`] |
//! | `TS = onepipe_get_timestamp()` | [`Endpoint::timestamp`] |
//!
//! ## Threads and queues (§6.1)
//!
//! Joining registers with the controller, binds a UDP socket and starts one **I/O thread**,
//! lib1pipe's polling thread: it runs the host role (`onepipe_proto::host::Host`) in a
//! [`Driver`] — beacons, receive, acknowledgements, retransmission, reordering — and a small
//! control thread keeps the controller connection (health, failure notices).
//!
//! * **Sending** runs on the calling thread: the role sits behind a mutex, `send_*` stamps the
//!   scattering and queues its packets there and then (so the timestamp or the error comes back
//!   at once), and wakes the I/O thread only if it was not already due to look. A full send
//!   buffer is [`SendError::Full`] (§6.1: "if the send buffer is full, the send API returns
//!   fail") — best effort holds at most `unacked_bytes_max` bytes of unacknowledged messages
//!   (§6.1 flow control: at overload, senders wait instead of filling the queues on the way),
//!   reliable at most `send_buffer_bytes_max` bytes. `send_*_timeout` waits for room instead:
//!   it sleeps until the I/O thread has handled acknowledgements or loss reports, and tries
//!   again, so no application spins on `Full`.
//! * **Receiving**: the I/O thread puts each delivered message in one of three bounded queues
//!   (best effort, reliable, plain), which application threads drain. The role is told how
//!   many best-effort and plain messages their queues have room for (`Host::set_room`,
//!   `Host::set_plain_room`) and accepts no more: one that arrives beyond that is refused
//!   before it is acknowledged and NAKed to its sender (`BufferFull`) by the role itself, so the
//!   sender learns of it through its own [`Event::SendFailed`], as a full receive buffer does in
//!   §4.1. Plain messages have a queue of their own, not a place in the best-effort one: that
//!   queue holds one total order (what [`Endpoint::recv_merged`] and a checker read), which a
//!   message delivered on arrival would break. Batches
//!   (`Inbox::poll`) take many messages under one lock. When the
//!   reliable queue is full the role stops delivering to this process: its reorder buffer fills,
//!   its receive window closes and senders wait (§6.1 flow control) — nothing is lost.
//! * **Events** go to a third bounded queue; when it is full, further events are dropped and
//!   counted ([`EndpointStats::events_dropped`]).
//!
//! ## Failures (§5.2)
//!
//! The control thread carries the failure procedure's messages between the controller and the
//! host role ([`crate::failure`]): when the aggregator above falls silent for the cluster's link
//! timeout the role reports it (Detect, with its last commit barrier); the controller's
//! `Failure`, `Recall` and `Resume` go to the role (`Input::Mgmt`), which discards, recalls and
//! resumes, and raises [`Event::ProcessFailed`] (Callback, with the failure timestamp),
//! [`Event::Recalled`] for this process's aborted scatterings, and [`Event::ReliableAborted`]
//! for queued ones that can no longer be sent. Control messages the role sends wait in a
//! bounded queue for the control thread.
//!
//! Every queue is bounded by [`JoinOptions`]; nothing grows without limit.
//!
//! ## Logs
//!
//! Through `tracing` (target `onepipe_runtime::endpoint`), never per message: `error` when the
//! I/O thread stops on an error, `warn` when the controller connection is lost or the
//! controller declares this process failed, `info` when it re-registered after a failover,
//! `debug` for joining and the controller's notices of other members.
//!
//! ## Example
//!
//! Two processes of a one-rack cluster (in one program here; normally each is its own OS
//! process, and `onepipe controller` and `onepipe agg` are daemons) each broadcast a message;
//! both deliver the two in the same order.
//!
//! ```
//! use onepipe_runtime::cluster::LocalLayout;
//! use onepipe_runtime::endpoint::{Endpoint, JoinOptions};
//! use onepipe_runtime::LocalCluster;
//! use onepipe_proto::ProcId;
//! use std::time::Duration;
//!
//! let local = LocalCluster::start(&LocalLayout { hosts: 2, layers: 1, ..LocalLayout::default() }).unwrap();
//! let controller = local.controller_addr();
//! // The options carry the cluster's process certificate (every cluster is authenticated
//! // unless its file says `auth = "off"`: docs/SECURITY.md).
//! let opts: JoinOptions = local.join_options();
//! // Joining waits until every process of the cluster has joined: join the two concurrently.
//! let other = { let o = opts.clone(); std::thread::spawn(move || Endpoint::join(controller, o)) };
//! let a = Endpoint::join(controller, opts).unwrap();
//! let b = other.join().unwrap().unwrap();
//!
//! let everyone = |msg: &'static str| [(ProcId(0), msg.into()), (ProcId(1), msg.into())];
//! a.send_unreliable(&everyone("from a")).unwrap();
//! b.send_unreliable(&everyone("from b")).unwrap();
//! let order = |e: &Endpoint| -> Vec<_> {
//!     (0..2).map(|_| e.best_effort().recv(Duration::from_secs(30)).unwrap().payload).collect()
//! };
//! assert_eq!(order(&a), order(&b), "one total order");
//! a.leave();
//! b.leave();
//! local.stop();
//! ```

mod control_thread;
mod events;
mod inbox;

use crate::auth::{KeyInbox, LinkAuth, LinkPorts};
use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::config::DriverConfig;
use crate::control::{ControlClient, FromController, JoinAs, JoinError, Member, ToController};
use crate::driver::Driver;
use crate::failure::{LiveTopology, WireCtrl, WireRelay};
use crate::keys::member_ix;
use crate::ports::PortTable;
use crate::queue::{BoundedQueue, PopError};
use crate::stats::DriverStats;
use crate::sys::{bind_udp, Waker};
use crate::tls::Credentials;
use crate::unordered::UnorderedHost;
use bytes::Bytes;
pub use control_thread::CONTROL_HISTORY_LEN_MAX;
use control_thread::{control_loop, ControlLink};
use events::CallbackInner;
pub use events::{
    Callback, Event, FailReason, FailureCallbacks, Message, RecvError, SendError, SendHandle, View,
};
pub use inbox::Inbox;
use onepipe_proto::failure::{CtrlMsg, Mgmt, MgmtDest, RelayMsg};
use onepipe_proto::host::{Host, HostEvent, HostStats, UPLINK};
use onepipe_proto::ids::{NodeId, ProcId};
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::reliable::ReliableStats;
use onepipe_proto::time::{Instant, Timestamp};
use onepipe_proto::wire::{NakReason, Packet};
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;
use tracing::{debug, error, info, warn};

/// How an endpoint joins and how big its queues are.
#[derive(Clone, Debug)]
pub struct JoinOptions {
    /// Join as this process id; `None`: the lowest id nobody has taken.
    pub proc: Option<u32>,
    /// Most delivered messages waiting for the application, per service (best effort,
    /// reliable, plain).
    pub recv_queue_len_max: usize,
    /// Most events waiting for the application.
    pub event_queue_len_max: usize,
    /// Report each reliable scattering's timestamp as [`Event::ReliableSent`] once it leaves
    /// the send buffer.
    pub report_reliable_sent: bool,
    /// Whether a failure notification's [`Callback`] holds the §5.2 round until the
    /// application drops it ([`FailureCallbacks::Held`]) or holds nothing
    /// ([`FailureCallbacks::Automatic`], the default: an application that does not read its
    /// events is never declared failed for it).
    pub failure_callbacks: FailureCallbacks,
    /// How long to wait for the controller and for the rest of the cluster to join.
    pub join_timeout: Duration,
    /// This process died and was started again with its memory lost (`JoinOptions::proc` names
    /// it): its role starts frozen (`Host::restarted`), asks the controller to recover once it
    /// is declared failed, and rejoins as a new process ([`Event::Rejoined`]; §5.2).
    pub restarted: bool,
    /// The transport's settings.
    pub driver: DriverConfig,
    /// The control channel's TLS identity: the cluster's CA, this process's certificate (named
    /// after its id, `p3`, or [`crate::tls::ANY_PROCESS`]) and key. Required when the cluster
    /// protects itself (`auth` on: docs/SECURITY.md); [`crate::LocalCluster::join_options`]
    /// fills it in.
    pub credentials: Option<Credentials>,
}

impl Default for JoinOptions {
    fn default() -> Self {
        JoinOptions {
            proc: None,
            recv_queue_len_max: 1 << 16,
            event_queue_len_max: 1 << 12,
            report_reliable_sent: false,
            failure_callbacks: FailureCallbacks::Automatic,
            join_timeout: Duration::from_secs(60),
            restarted: false,
            // A machine may run a whole cluster: block rather than spin between datagrams.
            driver: DriverConfig {
                spin_ns: 0,
                ..DriverConfig::default()
            },
            credentials: None,
        }
    }
}

/// An endpoint's counters.
#[derive(Clone, Debug, Default)]
pub struct EndpointStats {
    /// The host role's counters.
    pub host: HostStats,
    /// The reliable sender's counters.
    pub reliable: ReliableStats,
    /// The transport's counters (as of the I/O thread's last report, every few ms).
    pub driver: DriverStats,
    /// Best-effort and plain messages the role refused (and NAKed) for want of room: the
    /// application's queue was full, or its reorder buffer (`host.dropped_full`).
    pub recv_refused_full: u64,
    /// Events dropped because the event queue was full.
    pub events_dropped: u64,
    /// §5.2 control messages dropped because the queue to the control thread was full.
    pub control_dropped: u64,
}

/// The role an endpoint runs: the 1Pipe host, or the unordered baseline.
#[derive(Debug)]
enum Role {
    Ordered(Box<Host>),
    Unordered(Box<UnorderedHost>),
}

impl Role {
    /// The room process `me` has left for best-effort (`plain` false) or plain messages.
    fn room(&self, me: ProcId, plain: bool) -> usize {
        match (self, plain) {
            (Role::Ordered(h), false) => h.room(me).unwrap_or(0),
            (Role::Ordered(h), true) => h.plain_room(me).unwrap_or(0),
            (Role::Unordered(h), false) => h.room(),
            (Role::Unordered(h), true) => h.plain_room(),
        }
    }

    /// Gives process `me` room for `room` more best-effort (`plain` false) or plain messages.
    fn set_room(&mut self, now: Instant, me: ProcId, plain: bool, room: usize) {
        match (self, plain) {
            (Role::Ordered(h), false) => {
                h.set_room(now, me, room);
            }
            (Role::Ordered(h), true) => {
                h.set_plain_room(me, room);
            }
            (Role::Unordered(h), false) => h.set_room(room),
            (Role::Unordered(h), true) => h.set_plain_room(room),
        }
    }
}

/// What the I/O thread and application threads share under one lock.
#[derive(Debug)]
struct Core {
    role: Role,
    /// NAKs for messages the application had no room for.
    extra: VecDeque<Output<Packet, HostEvent>>,
    /// The scattering being sent, collected from the caller's iterator (kept: no allocation
    /// per send once it has grown).
    scratch: Vec<(ProcId, Bytes)>,
}

/// One message of a scattering: where it goes and what it says. A send takes any iterator of
/// these — `(ProcId, B)` with `B: Into<Bytes>` (`&str`, `String`, `Vec<u8>`, `Bytes`…), or
/// `&(ProcId, Bytes)`, so a slice or an array of pairs works too.
///
/// ```no_run
/// # fn f(e: &onepipe_runtime::endpoint::Endpoint) {
/// use onepipe_proto::ProcId;
/// // Different messages to different processes, one timestamp.
/// e.send_unreliable([(ProcId(1), "x = 1"), (ProcId(2), "y = 2")]).unwrap();
/// // The same message to every member but this one.
/// let me = e.proc();
/// e.send_reliable(e.view().members.into_iter().filter(|&p| p != me).map(|p| (p, "hi"))).unwrap();
/// # }
/// ```
pub trait Outgoing {
    /// The destination and the payload.
    fn into_message(self) -> (ProcId, Bytes);
}

impl<B: Into<Bytes>> Outgoing for (ProcId, B) {
    fn into_message(self) -> (ProcId, Bytes) {
        (self.0, self.1.into())
    }
}

impl Outgoing for &(ProcId, Bytes) {
    fn into_message(self) -> (ProcId, Bytes) {
        (self.0, self.1.clone())
    }
}

struct Shared {
    /// The process id it joined as (its member name at the controller).
    proc: ProcId,
    /// Its process id now: `proc`, or the one it rejoined as (§5.2).
    current: AtomicU32,
    core: Mutex<Core>,
    /// Another thread changed the role (a send, a control message, a NAK) and its outputs
    /// wait for the I/O thread: set under the core lock by whoever changed it, cleared under
    /// it when the I/O thread takes the role's outputs. Set, the I/O thread needs no new
    /// wake-up.
    dirty: AtomicBool,
    clock: Clock,
    waker: OnceLock<Waker>,
    /// This `Shared`, for the callback handles it gives out.
    me: OnceLock<std::sync::Weak<Shared>>,
    /// Failure notifications the event queue had no room for, in order: never dropped (one
    /// per failed process at most), moved to the queue as it drains.
    held_events: Mutex<VecDeque<Event>>,
    be: BoundedQueue<Message>,
    rel: BoundedQueue<Message>,
    /// Plain messages ([`Endpoint::send_plain`]), in arrival order.
    plain: BoundedQueue<Message>,
    events: BoundedQueue<Event>,
    stop: AtomicBool,
    /// Reliable delivery is paused because the reliable queue is full.
    rel_paused: AtomicBool,
    /// The role's best-effort room is half used or less ([`Shared::grant_room`]): a
    /// best-effort pop that half empties the queue wakes the I/O thread to give more.
    be_starved: AtomicBool,
    /// `be_starved` for the plain queue.
    plain_starved: AtomicBool,
    report_reliable_sent: bool,
    /// Failure notifications hold their round ([`FailureCallbacks::Held`]).
    callbacks_held: bool,
    driver_stats: Mutex<DriverStats>,
    events_dropped: AtomicU64,
    /// The role's best-effort and commit barriers as of the I/O thread's last drain (raw
    /// timestamps; [`NO_BARRIER`] before the first): everything below them is in the queues.
    published: [AtomicU64; 2],
    /// §5.2 control messages from the role, waiting for the control thread (bounded by
    /// [`CONTROL_OUT_LEN_MAX`]).
    control_out: Mutex<VecDeque<ToController>>,
    control_dropped: AtomicU64,
    /// Sends waiting for room in the send buffer (`send_*_timeout`): the I/O thread bumps the
    /// generation and wakes them after each turn of its loop while `room_waiters` is not 0 —
    /// a turn is when acknowledgements and loss reports free the window.
    room: Mutex<u64>,
    room_ready: Condvar,
    room_waiters: AtomicUsize,
    /// [`Endpoint::activity`]: bumped whenever something an application may act on happens
    /// (a message queued, an event queued, a barrier published, the endpoint stopping);
    /// [`Endpoint::wait_activity`] sleeps on `activity_ready` while `activity_waiters` counts it.
    activity: AtomicU64,
    activity_lock: Mutex<()>,
    activity_ready: Condvar,
    activity_waiters: AtomicUsize,
    /// Membership as the controller last said ([`Endpoint::view`]), and what it said about
    /// departures: the current process of each slot (rejoins give new ids), and the processes
    /// whose slot said it was leaving (their §5.2 event says `Left`, not `Failed`).
    members: Mutex<Membership>,
    /// With [`Endpoint::leave`]: a timestamp above everything this process sent, once every
    /// send was resolved; the control thread gives it to the controller.
    leave_last: Mutex<Option<u64>>,
    /// [`Endpoint::kill`]: stop without telling the controller.
    vanish: AtomicBool,
    /// Held failure notifications not yet taken by the application
    /// ([`Shared::complete_untaken`]).
    untaken: Mutex<Vec<std::sync::Weak<CallbackInner>>>,
    /// The cluster's `callback_timeout` (0: as long as it takes).
    callback_timeout: Duration,
}

/// What [`Shared::members`] keeps.
#[derive(Default)]
struct Membership {
    view: View,
    /// slot (the id a process first joined as) → its current process id.
    current: BTreeMap<u32, u32>,
    /// Current process ids of slots the controller said left.
    left: std::collections::BTreeSet<u32>,
    /// Every process of every view so far.
    ever: std::collections::BTreeSet<u32>,
}

/// How long [`Endpoint::leave`] waits for this process's sends to be acknowledged before it
/// leaves anyway (the others then treat it as failed at the commit barrier its aggregator saw).
pub const LEAVE_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Most §5.2 control messages waiting for the control thread; more are dropped and counted
/// (a round sends a few per process).
pub const CONTROL_OUT_LEN_MAX: usize = 4096;

/// A published barrier that has not arrived yet.
const NO_BARRIER: u64 = u64::MAX;

/// Senders waiting for room in the send buffer are woken once it is at most this full
/// ([`Host::send_buffer_use`]).
const ROOM_WAKE_USE: f64 = 0.5;

/// Most messages [`Inbox::poll`] sets room aside for at once (more are taken,
/// the buffer grows).
const POLL_BATCH_LEN: usize = 256;

/// One process of a live cluster. See the module docs.
pub struct Endpoint {
    proc: ProcId,
    cluster: Arc<Cluster>,
    shared: Arc<Shared>,
    io: Option<JoinHandle<io::Result<()>>>,
    control: Option<JoinHandle<()>>,
}

// An application shares one endpoint between its threads (send on one, receive on others).
const _: () = {
    const fn shared_between_threads<T: Send + Sync>() {}
    shared_between_threads::<Endpoint>();
};

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("proc", &self.proc)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Joins the cluster whose controller listens at `controller` (Table 1 `onepipe_init`):
    /// registers, binds the UDP address the cluster file gives this process, waits until every
    /// member of the cluster has joined, and starts the I/O thread. See the module docs for an
    /// example.
    ///
    /// # Errors
    /// The controller cannot be reached or refuses (an id taken, none free), the socket cannot
    /// be bound, or the cluster is not complete within [`JoinOptions::join_timeout`].
    pub fn join(controller: SocketAddr, opts: JoinOptions) -> Result<Endpoint, JoinError> {
        Endpoint::join_any(&[controller], opts)
    }

    /// Joins the cluster whose controllers (a leader and standbys, docs/CONTROLLER-HA.md)
    /// listen at `controllers`: like [`Endpoint::join`], with whichever leads. When the control
    /// connection is lost later, the control thread re-registers with whichever leads then (same
    /// process id, same UDP address: the data path never stops) and re-sends its §5.2 reports.
    ///
    /// # Errors
    /// As [`Endpoint::join`]; `controllers` must not be empty.
    pub fn join_any(controllers: &[SocketAddr], opts: JoinOptions) -> Result<Endpoint, JoinError> {
        let (mut control, member, bind) = ControlClient::join_leader(
            controllers,
            JoinAs::Process(opts.proc),
            opts.join_timeout,
            opts.credentials.as_ref(),
        )?;
        let Member::Process(id) = member else {
            return Err(JoinError::Protocol(format!("joined as {member}")));
        };
        let socket = bind_udp(bind, &opts.driver)?;
        let addr = socket.local_addr()?;
        let cluster = control.bound_and_wait(addr, opts.join_timeout, &AtomicBool::new(false))?;
        // A free slot of a running cluster: this process starts as a restarted one does and
        // rejoins as a new process (§4.2 addition of links, §5.2 rejoin).
        let joins_running = control.joins_running_cluster() && !opts.restarted;
        let restarted = opts.restarted || joins_running;
        let spec = cluster
            .process(id)
            .ok_or_else(|| JoinError::Protocol(format!("p{id} is not in the cluster")))?;
        let uplink = cluster
            .aggregator(&spec.aggregator)
            .ok_or_else(|| JoinError::Protocol(format!("no aggregator {}", spec.aggregator)))?
            .addr;
        let clock = Clock::of(cluster.clock);
        let me = ProcId(id);
        let roles = cluster.roles();
        // Datagrams as long as the path to the aggregator carries (or the file says).
        let driver_cfg = cluster
            .driver_config(&opts.driver, &[uplink])
            .map_err(JoinError::Transport)?;
        // Senders up to `proc_ids_max`: processes that rejoin get fresh ids (§5.2).
        let ids = cluster.proc_ids_max();
        let mut host_cfg = roles.host_config(NodeId(id), vec![me], ids, &driver_cfg);
        // §5.2 Detect: a silent aggregator is reported as this process's input link.
        host_cfg.input_link = LiveTopology::of(&cluster).ok().and_then(|t| t.downlink(id));
        // §5.2: a failure round completes here once the application's callbacks are done
        // (`Held`), or at once (`Automatic`).
        host_cfg.callbacks_held = opts.failure_callbacks == FailureCallbacks::Held;
        let role = if !cluster.ordered {
            Role::Unordered(Box::new(UnorderedHost::new(
                me,
                cluster.procs(),
                host_cfg.mtu_payload,
                clock.now(),
            )))
        } else if restarted {
            Role::Ordered(Box::new(Host::restarted(host_cfg, clock.now())))
        } else {
            Role::Ordered(Box::new(Host::new(host_cfg, clock.now())))
        };
        let shared = Arc::new(Shared {
            proc: me,
            current: AtomicU32::new(me.0),
            core: Mutex::new(Core {
                role,
                extra: VecDeque::new(),
                scratch: Vec::new(),
            }),
            dirty: AtomicBool::new(false),
            clock,
            waker: OnceLock::new(),
            me: OnceLock::new(),
            held_events: Mutex::new(VecDeque::new()),
            be: BoundedQueue::new(opts.recv_queue_len_max.max(1)),
            rel: BoundedQueue::new(opts.recv_queue_len_max.max(1)),
            plain: BoundedQueue::new(opts.recv_queue_len_max.max(1)),
            events: BoundedQueue::new(opts.event_queue_len_max.max(1)),
            stop: AtomicBool::new(false),
            rel_paused: AtomicBool::new(false),
            be_starved: AtomicBool::new(false),
            plain_starved: AtomicBool::new(false),
            report_reliable_sent: opts.report_reliable_sent,
            callbacks_held: opts.failure_callbacks == FailureCallbacks::Held,
            driver_stats: Mutex::new(DriverStats::default()),
            events_dropped: AtomicU64::new(0),
            published: [AtomicU64::new(NO_BARRIER), AtomicU64::new(NO_BARRIER)],
            control_out: Mutex::new(VecDeque::new()),
            control_dropped: AtomicU64::new(0),
            room: Mutex::new(0),
            room_ready: Condvar::new(),
            room_waiters: AtomicUsize::new(0),
            activity: AtomicU64::new(0),
            activity_lock: Mutex::new(()),
            activity_ready: Condvar::new(),
            activity_waiters: AtomicUsize::new(0),
            members: Mutex::new(Membership {
                // Every process has joined when a cluster of all its processes is ready; the
                // controller's first view says who did (a process that joins a running
                // cluster learns it from there).
                view: match restarted || cluster.start_with.is_some() {
                    true => View::default(),
                    false => View {
                        epoch: 0,
                        members: (0..cluster.procs()).map(ProcId).collect(),
                        joined: (0..cluster.procs()).map(ProcId).collect(),
                        left: Vec::new(),
                        failed: Vec::new(),
                    },
                },
                ever: match restarted || cluster.start_with.is_some() {
                    true => Default::default(),
                    false => (0..cluster.procs()).collect(),
                },
                ..Membership::default()
            }),
            leave_last: Mutex::new(None),
            vanish: AtomicBool::new(false),
            untaken: Mutex::new(Vec::new()),
            callback_timeout: Duration::from_nanos(cluster.callback_timeout_ns),
        });
        let ports = PortTable::new().with_link(UPLINK, uplink);
        let mut driver = Driver::new(
            {
                // The role accepts no more best-effort messages than the queue holds.
                shared.grant_room(true);
                CoreNode::new(shared.clone())
            },
            socket,
            ports,
            clock,
            driver_cfg,
        )?;
        // Datagrams sealed with the keys of this process's one link (docs/SECURITY.md).
        let keys = match cluster.auth_mode() {
            mode if mode.seals() => {
                let inbox = KeyInbox::new();
                let me = member_ix(&cluster, &Member::Process(id));
                let agg = member_ix(&cluster, &Member::Aggregator(spec.aggregator.clone()));
                let (Some(me), Some(peer)) = (me, agg) else {
                    return Err(JoinError::Protocol("no member number".into()));
                };
                let links = [LinkPorts {
                    peer,
                    out: UPLINK,
                    input: UPLINK,
                }];
                let mut auth = LinkAuth::new(mode, me, &links, inbox.clone());
                for update in control.take_keys() {
                    auth.apply(clock.now(), update);
                }
                driver.set_auth(auth)?;
                Some(inbox)
            }
            _ => None,
        };
        let _ = shared.waker.set(driver.waker());
        let _ = shared.me.set(Arc::downgrade(&shared));
        debug!(proc = id, %addr, "joined");
        let io = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("onepipe-io-p{id}"))
                .spawn(move || io_loop(driver, shared))?
        };
        let control = {
            let shared = shared.clone();
            let link = ControlLink {
                controllers: controllers.to_vec(),
                addr,
                history: VecDeque::new(),
                tls: opts.credentials.clone(),
                keys,
            };
            std::thread::Builder::new()
                .name(format!("onepipe-ctl-p{id}"))
                .spawn(move || control_loop(control, link, shared))?
        };
        let endpoint = Endpoint {
            proc: me,
            cluster: Arc::new(cluster),
            shared,
            io: Some(io),
            control: Some(control),
        };
        if !opts.restarted {
            // Returns once it is a member, in the controller's view (a process that joins a
            // running cluster: once it rejoined under its new id).
            let deadline = deadline(opts.join_timeout);
            loop {
                let p = endpoint.proc();
                if (p != me || !joins_running) && endpoint.view().contains(p) {
                    break;
                }
                if std::time::Instant::now() >= deadline {
                    return Err(JoinError::Timeout);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Ok(endpoint)
    }

    /// This endpoint's process id: the one it joined as, or, once it rejoined after being
    /// declared failed, its new one ([`Event::Rejoined`]; §5.2 "joins 1Pipe as a new
    /// process").
    pub fn proc(&self) -> ProcId {
        self.shared.current()
    }

    /// The cluster, with every member's address.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The live processes of the group, in id order: [`Endpoint::view`]'s members.
    pub fn processes(&self) -> impl Iterator<Item = ProcId> + '_ {
        self.view().members.into_iter()
    }

    /// The group's membership view: the live processes and an epoch that counts changes,
    /// updated when a process leaves, fails or joins ([`Event::ViewChanged`] announces each).
    pub fn view(&self) -> View {
        self.shared.lock_members().view.clone()
    }

    /// Sends `payload` to every member of the current view (this process included) with the
    /// best-effort service: [`Endpoint::send_unreliable`] of one scattering.
    ///
    /// # Errors
    /// As [`Endpoint::send_unreliable`].
    pub fn broadcast_unreliable(&self, payload: impl Into<Bytes>) -> Result<Timestamp, SendError> {
        let payload = payload.into();
        self.send_unreliable(self.processes().map(|p| (p, payload.clone())))
    }

    /// Sends `payload` to every member of the current view (this process included) with the
    /// reliable service: [`Endpoint::send_reliable`] of one scattering.
    ///
    /// # Errors
    /// As [`Endpoint::send_reliable`].
    pub fn broadcast_reliable(&self, payload: impl Into<Bytes>) -> Result<SendHandle, SendError> {
        let payload = payload.into();
        self.send_reliable(self.processes().map(|p| (p, payload.clone())))
    }

    /// Sends `payload` to every member of the current view (this process included) as plain
    /// messages: [`Endpoint::send_plain`] of one scattering.
    ///
    /// # Errors
    /// As [`Endpoint::send_plain`].
    pub fn broadcast_plain(&self, payload: impl Into<Bytes>) -> Result<Timestamp, SendError> {
        let payload = payload.into();
        self.send_plain(self.processes().map(|p| (p, payload.clone())))
    }

    /// Sends a scattering with the best-effort service (Table 1 `onepipe_unreliable_send`):
    /// every message gets the returned timestamp, and every receiver delivers it in timestamp
    /// order with everything else (§2.1). A message that cannot be delivered is reported by
    /// [`Event::SendFailed`].
    ///
    /// ```no_run
    /// # fn f(e: &onepipe_runtime::endpoint::Endpoint) {
    /// use onepipe_proto::ProcId;
    /// // Different messages to different processes, one timestamp.
    /// let ts = e.send_unreliable(&[(ProcId(1), "x = 1".into()), (ProcId(2), "y = 2".into())]);
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`SendError::Full`] when `unacked_bytes_max` bytes of messages await acknowledgement
    /// (§6.1 flow control: retry once some are acknowledged); the others as named. Nothing was
    /// sent then.
    pub fn send_unreliable<I>(&self, scattering: I) -> Result<Timestamp, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        self.command_with(scattering, |role, now, me, scattering| match role {
            Role::Ordered(h) => h.send(now, me, scattering).map_err(SendError::from),
            Role::Unordered(h) => h.send(now, me, scattering).map_err(SendError::from),
        })
    }

    /// Sends a scattering with the reliable service (Table 1 `onepipe_reliable_send`, §5.1):
    /// delivered exactly once at every destination, all or nothing, in timestamp order among
    /// reliable messages, unless a process fails. It waits in the send buffer until every
    /// destination's window has room, then is stamped: [`Event::ReliableSent`] says when (with
    /// [`JoinOptions::report_reliable_sent`]).
    ///
    /// # Errors
    /// [`SendError::Full`] when the send buffer cannot take it; [`SendError::Unsupported`] when
    /// the cluster runs with ordering off.
    pub fn send_reliable<I>(&self, scattering: I) -> Result<SendHandle, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        self.command_with(scattering, |role, now, me, scattering| match role {
            Role::Ordered(h) => h
                .send_reliable(now, me, scattering)
                .map(SendHandle)
                .map_err(SendError::from),
            Role::Unordered(_) => Err(SendError::Unsupported),
        })
    }

    /// [`Endpoint::send_unreliable`], waiting up to `timeout` for room when the send buffer
    /// is full (§6.1 flow control) instead of returning [`SendError::Full`] at once: the call
    /// sleeps until the I/O thread has handled acknowledgements or loss reports, then tries
    /// again — no spinning. `Duration::ZERO` tries once.
    ///
    /// # Errors
    /// [`SendError::Full`] if there was still no room after `timeout`; the others as
    /// [`Endpoint::send_unreliable`].
    pub fn send_unreliable_timeout<I>(
        &self,
        scattering: I,
        timeout: Duration,
    ) -> Result<Timestamp, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        let scattering: Vec<(ProcId, Bytes)> =
            scattering.into_iter().map(Outgoing::into_message).collect();
        self.retry_while_full(timeout, || self.send_unreliable(&scattering))
    }

    /// [`Endpoint::send_reliable`], waiting up to `timeout` for room in the send buffer as
    /// [`Endpoint::send_unreliable_timeout`] does.
    ///
    /// # Errors
    /// [`SendError::Full`] if there was still no room after `timeout`; the others as
    /// [`Endpoint::send_reliable`].
    pub fn send_reliable_timeout<I>(
        &self,
        scattering: I,
        timeout: Duration,
    ) -> Result<SendHandle, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        let scattering: Vec<(ProcId, Bytes)> =
            scattering.into_iter().map(Outgoing::into_message).collect();
        self.retry_while_full(timeout, || self.send_reliable(&scattering))
    }

    /// Sends a scattering of *plain* messages: best effort, outside the total order (§2.2.2:
    /// "the response message does not need to be ordered by 1Pipe" — a reply, an
    /// acknowledgement, a completion). Each receiver hands it to the application as soon as it
    /// arrives ([`Endpoint::plain`]), without waiting for the barrier to pass it and without
    /// ever dropping it as late; it is in neither service's total order, and nothing is
    /// promised about where it falls among other deliveries.
    ///
    /// It travels with everything else — the same socket, the same aggregators, packed into
    /// the same datagrams and authenticated alike — as data packets flagged `PLAIN`, and is a
    /// best-effort message in every other way: it is acknowledged, counts against the same
    /// window (`SendError::Full`), and a message that is not delivered is reported as
    /// [`Event::SendFailed`] as a best-effort one is (`Lost` after the loss timeout or when the
    /// receiver's window gives up on it, `BufferFull` when the receiving application has no
    /// room, `Incomplete` when a fragment is missing as the barrier passes its timestamp; it
    /// may have been delivered if only its acknowledgement was lost). The returned timestamp
    /// is this endpoint's timestamp when it was sent, which the receiver sees as
    /// [`Message::ts`]: it orders nothing.
    ///
    /// ```no_run
    /// # fn f(e: &onepipe_runtime::endpoint::Endpoint, m: onepipe_runtime::endpoint::Message) {
    /// // Answer a request delivered in the total order, outside it.
    /// e.send_plain([(m.src, "done")]).unwrap();
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Endpoint::send_unreliable`]. Nothing was sent then.
    pub fn send_plain<I>(&self, scattering: I) -> Result<Timestamp, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        self.command_with(scattering, |role, now, me, scattering| match role {
            Role::Ordered(h) => h.send_plain(now, me, scattering).map_err(SendError::from),
            Role::Unordered(h) => h.send_plain(now, me, scattering).map_err(SendError::from),
        })
    }

    /// [`Endpoint::send_plain`], waiting up to `timeout` for room in a full send buffer as
    /// [`Endpoint::send_unreliable_timeout`] does.
    ///
    /// # Errors
    /// [`SendError::Full`] if there was still no room after `timeout`; the others as
    /// [`Endpoint::send_plain`].
    pub fn send_plain_timeout<I>(
        &self,
        scattering: I,
        timeout: Duration,
    ) -> Result<Timestamp, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        let scattering: Vec<(ProcId, Bytes)> =
            scattering.into_iter().map(Outgoing::into_message).collect();
        self.retry_while_full(timeout, || self.send_plain(&scattering))
    }

    /// Runs `send` until it is not refused for a full buffer, or `timeout` passes; between
    /// tries it sleeps until the I/O thread has taken a turn.
    fn retry_while_full<R>(
        &self,
        timeout: Duration,
        mut send: impl FnMut() -> Result<R, SendError>,
    ) -> Result<R, SendError> {
        // The common case — room — costs a send and nothing more.
        match send() {
            Err(SendError::Full) if !timeout.is_zero() => {}
            r => return r,
        }
        let until = deadline(timeout);
        let sh = &self.shared;
        // Counted as waiting before the next try, so no turn between a refusal and the wait
        // can pass unseen.
        sh.room_waiters.fetch_add(1, Ordering::SeqCst);
        let result = loop {
            let seen = *sh.room.lock().unwrap_or_else(|e| e.into_inner());
            match send() {
                Err(SendError::Full) => {}
                r => break r,
            }
            let mut generation = sh.room.lock().unwrap_or_else(|e| e.into_inner());
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break Err(SendError::Full);
            }
            if *generation == seen {
                generation = sh
                    .room_ready
                    .wait_timeout(generation, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            drop(generation);
        };
        sh.room_waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Runs an application command on the role and wakes the I/O thread if it has new output
    /// to drain and was not already told.
    /// [`Endpoint::command`] with the scattering collected into the core's scratch vector
    /// under the lock.
    fn command_with<I, R>(
        &self,
        scattering: I,
        f: impl FnOnce(&mut Role, Instant, ProcId, &[(ProcId, Bytes)]) -> Result<R, SendError>,
    ) -> Result<R, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        self.command(|core, now, me| {
            let Core { role, scratch, .. } = core;
            scratch.clear();
            scratch.extend(scattering.into_iter().map(Outgoing::into_message));
            let r = f(role, now, me, scratch);
            // Payloads are not kept alive past the send.
            scratch.clear();
            r
        })
    }

    fn command<R>(
        &self,
        f: impl FnOnce(&mut Core, Instant, ProcId) -> Result<R, SendError>,
    ) -> Result<R, SendError> {
        if self.shared.stop.load(Ordering::SeqCst) {
            return Err(SendError::Closed);
        }
        let mut core = self.shared.lock();
        let r = f(&mut core, self.shared.clock.now(), self.shared.current())?;
        let was_dirty = self.shared.dirty.swap(true, Ordering::SeqCst);
        drop(core);
        if !was_dirty {
            self.shared.wake();
        }
        Ok(r)
    }

    /// The next message of either service, in one order across both: (timestamp, sender),
    /// best effort first at a tie. The two services are two total orders, one per queue
    /// (docs/LIVE.md); this merges them for an application that wants one stream. A message is
    /// taken only once the other service's barrier has passed it (nothing lower can come
    /// there any more), so every message waits for the reliable service's commit barrier: the
    /// merged stream is as slow as the reliable one. Waits at most `timeout` (checking every
    /// 0.2 ms). Take messages from the merged stream or from the per-service receives, not
    /// from both.
    ///
    /// # Errors
    /// [`RecvError::Timeout`] if none could be taken in time; [`RecvError::Closed`] once the
    /// endpoint has left and both queues are empty.
    pub fn recv_merged(&self, timeout: Duration) -> Result<Message, RecvError> {
        let until = deadline(timeout);
        loop {
            match self.try_recv_merged() {
                Err(RecvError::Empty) => {}
                r => return r,
            }
            if std::time::Instant::now() >= until {
                return Err(RecvError::Timeout);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// [`Endpoint::recv_merged`] without waiting.
    ///
    /// # Errors
    /// [`RecvError::Empty`] if no message can be taken yet; [`RecvError::Closed`] as
    /// [`Endpoint::recv_merged`].
    pub fn try_recv_merged(&self) -> Result<Message, RecvError> {
        let key = |m: &Message| (m.ts, m.src);
        let be = self.shared.be.peek(key);
        let rel = self.shared.rel.peek(key);
        // Everything of a service below its published barrier is in its queue already.
        let passed = |k: usize, ts: Timestamp| self.shared.published(k).is_some_and(|b| b > ts);
        let take_be = match (be, rel) {
            (Err(()), Err(())) => return Err(RecvError::Closed),
            (Ok(Some(a)), Ok(Some(b))) => a <= b,
            // The other queue is closed and empty: nothing more comes there.
            (Ok(Some(_)), Err(())) => true,
            (Err(()), Ok(Some(_))) => false,
            (Ok(Some(a)), _) => match passed(1, a.0) {
                true => true,
                false => return Err(RecvError::Empty),
            },
            (_, Ok(Some(b))) => match passed(0, b.0) {
                true => false,
                false => return Err(RecvError::Empty),
            },
            _ => return Err(RecvError::Empty),
        };
        match take_be {
            true => self.best_effort().try_recv(),
            false => self.reliable().try_recv(),
        }
    }

    /// The next event, waiting as long as it takes.
    ///
    /// ```no_run
    /// # fn f(e: &onepipe_runtime::endpoint::Endpoint) {
    /// use onepipe_runtime::endpoint::Event;
    /// while let Ok(event) = e.next_event() {
    ///     match event {
    ///         Event::SendFailed { dst, ts, reason } => eprintln!("message {ts} to {dst}: {reason:?}"),
    ///         Event::ProcessFailed { proc, .. } => eprintln!("{proc} failed"),
    ///         _ => {}
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`RecvError::Closed`] once the endpoint has left and the queue is empty.
    pub fn next_event(&self) -> Result<Event, RecvError> {
        self.took(self.shared.events.pop(true, None))
    }

    /// An event the application takes: a held failure notification starts its callback
    /// clock now.
    fn took(&self, e: Result<Event, PopError>) -> Result<Event, RecvError> {
        let e = e?;
        self.shared.took(&e);
        Ok(e)
    }

    /// The next event if one is waiting.
    ///
    /// # Errors
    /// [`RecvError::Empty`] if none is; [`RecvError::Closed`] as [`Endpoint::next_event`].
    pub fn try_next_event(&self) -> Result<Event, RecvError> {
        self.took(self.shared.events.pop(false, None))
    }

    /// The next event, waiting at most `timeout`.
    ///
    /// # Errors
    /// [`RecvError::Timeout`] if none came; [`RecvError::Closed`] as [`Endpoint::next_event`].
    pub fn next_event_timeout(&self, timeout: Duration) -> Result<Event, RecvError> {
        self.took(self.shared.events.pop(false, Some(deadline(timeout))))
    }

    /// A count that goes up whenever something an application may act on happens: a message
    /// queued on any of the three inboxes, an event queued, a barrier published
    /// ([`Endpoint::barrier`], [`Endpoint::commit_barrier`]), the endpoint stopping. Read it
    /// before looking at the inboxes, then [`Endpoint::wait_activity`] with it: a loop over
    /// several inboxes sleeps without polling and misses nothing.
    ///
    /// ```no_run
    /// # fn f(ep: &onepipe_runtime::endpoint::Endpoint) {
    /// use std::time::Duration;
    /// loop {
    ///     let seen = ep.activity();
    ///     let mut busy = false;
    ///     busy |= ep.best_effort().poll(256, |m| { /* ... */ }) > 0;
    ///     busy |= ep.plain().poll(256, |m| { /* ... */ }) > 0;
    ///     if !busy {
    ///         ep.wait_activity(seen, Duration::from_millis(10));
    ///     }
    /// }
    /// # }
    /// ```
    pub fn activity(&self) -> u64 {
        self.shared.activity.load(Ordering::SeqCst)
    }

    /// Sleeps until [`Endpoint::activity`] differs from `seen`, or `timeout` passes, or the
    /// endpoint stops. Returns whether the count moved (or the endpoint stopped).
    pub fn wait_activity(&self, seen: u64, timeout: Duration) -> bool {
        let sh = &self.shared;
        let moved = || sh.activity.load(Ordering::SeqCst) != seen || sh.stop.load(Ordering::SeqCst);
        if moved() {
            return true;
        }
        let until = std::time::Instant::now() + timeout;
        sh.activity_waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = sh.activity_lock.lock().unwrap_or_else(|e| e.into_inner());
        let result = loop {
            if moved() {
                break true;
            }
            let now = std::time::Instant::now();
            if now >= until {
                break false;
            }
            g = sh
                .activity_ready
                .wait_timeout(g, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(g);
        sh.activity_waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// This endpoint's current timestamp (Table 1 `onepipe_get_timestamp`): never below any
    /// timestamp it issued or delivered before.
    pub fn timestamp(&self) -> Timestamp {
        let now = self.shared.clock.now();
        match &mut self.shared.lock().role {
            Role::Ordered(h) => h.timestamp(now),
            Role::Unordered(h) => h.timestamp(now),
        }
    }

    /// The best-effort barrier: every best-effort message with a lower timestamp has been
    /// delivered into this endpoint's queue (or dropped and reported) — read the queue empty
    /// and you have them all. Plain messages ([`Endpoint::send_plain`]) are outside it: one
    /// with a lower timestamp may still come. `None` before the first barrier arrives, and always with
    /// ordering off.
    pub fn barrier(&self) -> Option<Timestamp> {
        self.shared.published(0)
    }

    /// The commit barrier (§5.1): every reliable message with a lower timestamp has been
    /// delivered into this endpoint's queue.
    pub fn commit_barrier(&self) -> Option<Timestamp> {
        self.shared.published(1)
    }

    /// §5.2: this process's failure timestamp once the controller declared it failed. From
    /// then on the role is frozen — sends are refused (`SendError::Failed` naming this
    /// process), what it had in flight is recalled, reliable delivery stops — as the
    /// simulator's hosts are (`RelayMsg::Failed`). `None` while it is correct.
    pub fn declared_failed(&self) -> Option<Timestamp> {
        match &self.shared.lock().role {
            Role::Ordered(h) => h.own_failure(),
            Role::Unordered(_) => None,
        }
    }

    /// Messages this endpoint sent that are not yet acknowledged, NAKed or reported lost, and
    /// reliable scatterings still queued.
    pub fn pending_sends(&self) -> usize {
        match &self.shared.lock().role {
            Role::Ordered(h) => h.unresolved_sends(),
            Role::Unordered(_) => 0,
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> EndpointStats {
        self.shared.stats()
    }

    /// Leaves the cluster (Table 1 `onepipe_exit`), gracefully: waits until every message it
    /// sent is acknowledged (at most [`LEAVE_FLUSH_TIMEOUT`]), stops the I/O thread, tells the
    /// controller, and returns the final counters. The controller takes it out at once — its
    /// aggregator removes its link, one §5.2 round declares it — so every other process gets
    /// one [`Event::ProcessFailed`] with [`FailReason::Left`] and a new view, and delivery
    /// stalls no longer than that round. Messages delivered but not yet read are dropped with
    /// the endpoint: read them first. Dropping an endpoint leaves too, without waiting for its
    /// sends: the others then take it out at the commit barrier its aggregator saw.
    pub fn leave(mut self) -> EndpointStats {
        let deadline = std::time::Instant::now() + LEAVE_FLUSH_TIMEOUT;
        while self.pending_sends() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if self.pending_sends() == 0 && self.declared_failed().is_none() {
            let last = self.timestamp().raw();
            *self
                .shared
                .leave_last
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(last);
        }
        self.shutdown();
        self.shared.stats()
    }

    /// Stops this endpoint as a crash would, for fault drills and tests: no flush and no word
    /// to the controller (its connection just closes). The others' aggregator times its link
    /// out (§4.2) and the controller declares it failed (§5.2): they get
    /// [`Event::ProcessFailed`] with [`FailReason::Failed`].
    pub fn kill(mut self) -> EndpointStats {
        self.shared.vanish.store(true, Ordering::SeqCst);
        self.shutdown();
        self.shared.stats()
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
        if let Some(t) = self.io.take() {
            let _ = t.join();
        }
        if let Some(t) = self.control.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn deadline(timeout: Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365))
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The I/O thread took a turn: senders waiting for room try again once the send buffer is
    /// at most half full (acknowledgements came in: room for a burst of sends, not one send
    /// per turn), or the endpoint stops.
    fn room_turned(&self) {
        if self.room_waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        let room = self.stop.load(Ordering::SeqCst)
            || match &self.lock().role {
                Role::Ordered(h) => h.send_buffer_use() <= ROOM_WAKE_USE,
                Role::Unordered(_) => true,
            };
        if room {
            *self.room.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            self.room_ready.notify_all();
        }
    }

    /// Something an application may act on happened ([`Endpoint::wait_activity`]). The count
    /// goes up before the waiters are looked at, and a waiter registers before it reads the
    /// count, so no wake-up is lost.
    fn bump_activity(&self) {
        self.activity.fetch_add(1, Ordering::SeqCst);
        if self.activity_waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.activity_lock.lock().unwrap_or_else(|e| e.into_inner());
            self.activity_ready.notify_all();
        }
    }

    fn wake(&self) {
        if let Some(w) = self.waker.get() {
            // Only fails if the eventfd is gone, i.e. the I/O thread has ended.
            let _ = w.wake();
        }
    }

    fn stats(&self) -> EndpointStats {
        let (host, reliable) = match &self.lock().role {
            Role::Ordered(h) => (h.stats().clone(), h.reliable_stats().clone()),
            Role::Unordered(h) => (h.stats().clone(), ReliableStats::default()),
        };
        EndpointStats {
            recv_refused_full: host.dropped_full,
            host,
            reliable,
            driver: self
                .driver_stats
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            events_dropped: self.events_dropped.load(Ordering::Relaxed),
            control_dropped: self.control_dropped.load(Ordering::Relaxed),
        }
    }

    /// Queues a management message of the role for the control thread. Of the relays, §5.2
    /// controller forwarding travels ([`WireRelay`]); receiver recovery's do not yet, and are
    /// counted in `control_dropped`.
    fn send_mgmt(&self, to: MgmtDest, msg: Mgmt) {
        let to = match to {
            MgmtDest::Controller => None,
            MgmtDest::Node(n) => Some(n.0),
        };
        let line = match msg {
            Mgmt::Ctrl(msg) => ToController::Ctrl {
                to,
                msg: WireCtrl::from(&msg),
            },
            // Every relay goes to the controller (a host addresses no peer directly).
            Mgmt::Relay(r) if to.is_none() => ToController::Relay {
                msg: WireRelay::of(&r),
            },
            Mgmt::Relay(_) => {
                self.control_dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        self.push_control(line);
    }

    /// Queues a line for the control thread.
    fn push_control(&self, line: ToController) {
        let mut q = self.control_out.lock().unwrap_or_else(|e| e.into_inner());
        if q.len() >= CONTROL_OUT_LEN_MAX {
            self.control_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push_back(line);
    }

    /// A §5.2 message from the controller (or relayed from another process) for the role.
    fn on_control(&self, msg: CtrlMsg) {
        self.on_mgmt(Mgmt::Ctrl(msg));
    }

    /// A management message for the role (a control message, or a relay).
    fn on_mgmt(&self, msg: Mgmt) {
        let now = self.clock.now();
        let mut core = self.lock();
        if let Role::Ordered(h) = &mut core.role {
            h.handle(now, Input::Mgmt(msg));
            // §5.2 rejoin: the role now runs a new process.
            if let Some(&p) = h.config().procs.first() {
                self.current.store(p.0, Ordering::SeqCst);
            }
            let was_dirty = self.dirty.swap(true, Ordering::SeqCst);
            drop(core);
            if !was_dirty {
                self.wake();
            }
        }
    }

    fn lock_members(&self) -> MutexGuard<'_, Membership> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The controller's view: adopted, and announced if it is new.
    fn on_view(&self, view: View) {
        let mut m = self.lock_members();
        if m.view.epoch == view.epoch && m.view.members == view.members {
            return;
        }
        m.ever.extend(view.members.iter().map(|p| p.0));
        m.view = view.clone();
        drop(m);
        self.push_event(Event::ViewChanged(view));
    }

    /// The controller says slot `slot`'s process left (`true`) or was lost: the current
    /// process of the slot.
    fn slot_down(&self, slot: u32, left: bool) -> ProcId {
        let mut m = self.lock_members();
        let p = m.current.get(&slot).copied().unwrap_or(slot);
        if left {
            m.left.insert(p);
        }
        ProcId(p)
    }

    /// Slot `slot` runs the processes `procs` now (a rejoin).
    fn slot_rejoined(&self, slot: u32, procs: &[u32]) {
        if let Some(&p) = procs.first() {
            self.lock_members().current.insert(slot, p);
        }
    }

    /// The process id it runs as now (see [`Endpoint::proc`]).
    fn current(&self) -> ProcId {
        ProcId(self.current.load(Ordering::SeqCst))
    }

    fn published(&self, k: usize) -> Option<Timestamp> {
        let raw = self.published[k].load(Ordering::Acquire);
        (raw != NO_BARRIER).then(|| Timestamp::new(raw))
    }

    /// Publishes the role's barriers. Called by the I/O thread right after a drain: deliveries
    /// come only from the I/O thread's own mutations, so everything below these barriers is in
    /// the queues. Not the commit barrier while reliable delivery is paused or overflowing: the
    /// role's commit barrier then runs ahead of what it has delivered.
    fn publish(&self, overflow_empty: bool) {
        let (be, commit) = match &self.lock().role {
            Role::Ordered(h) => (h.released(), h.commit_barrier()),
            Role::Unordered(_) => (None, None),
        };
        let mut moved = false;
        if let Some(b) = be {
            let raw = b.timestamp().raw();
            moved |= self.published[0].swap(raw, Ordering::AcqRel) != raw;
        }
        let reliable_flowing = overflow_empty && !self.rel_paused.load(Ordering::Relaxed);
        if let (Some(c), true) = (commit, reliable_flowing) {
            let raw = c.timestamp().raw();
            moved |= self.published[1].swap(raw, Ordering::AcqRel) != raw;
        }
        if moved {
            self.bump_activity();
        }
    }

    /// Queues an event for the application. A full queue drops it and counts it, except a
    /// failure notification, which waits in `held_events` (in order) until there is room.
    fn push_event(&self, e: Event) {
        self.queue_event(e);
        self.bump_activity();
    }

    fn queue_event(&self, e: Event) {
        let mut held = self.held_events.lock().unwrap_or_else(|e| e.into_inner());
        let failure = matches!(e, Event::ProcessFailed { .. });
        if !held.is_empty() && failure {
            held.push_back(e);
            return;
        }
        if let Err(e) = self.events.try_push(e) {
            if failure {
                held.push_back(e);
            } else {
                self.events_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Moves held failure notifications into the event queue while it has room.
    fn release_held_events(&self) {
        let mut held = self.held_events.lock().unwrap_or_else(|e| e.into_inner());
        let mut any = false;
        while let Some(e) = held.pop_front() {
            if let Err(e) = self.events.try_push(e) {
                held.push_front(e);
                break;
            }
            any = true;
        }
        drop(held);
        if any {
            self.bump_activity();
        }
    }

    /// The callback handle for failure round `round`: one completion per round, shared by its
    /// notifications. `pending` keeps a clone until the turn ends, so the application cannot
    /// complete the round before it has seen every notification of it.
    fn callback(&self, round: u32, pending: &mut Pending) -> Callback {
        if let Some(c) = pending.callbacks.iter().find(|c| c.round() == Some(round)) {
            return c.clone();
        }
        let inner = Arc::new(CallbackInner {
            round,
            shared: self.me.get().cloned().unwrap_or_default(),
            taken: AtomicBool::new(false),
            done: AtomicBool::new(false),
            queued: std::time::Instant::now(),
        });
        self.untaken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&inner));
        let c = Callback(Some(inner));
        pending.callbacks.push(c.clone());
        c
    }

    /// The application took event `e`: a failure notification that holds its round starts
    /// the round's callback clock at the controller now (issue 35), not when it was queued.
    fn took(&self, e: &Event) {
        let Event::ProcessFailed {
            callback: Callback(Some(inner)),
            ..
        } = e
        else {
            return;
        };
        if inner.taken.swap(true, Ordering::SeqCst) {
            return;
        }
        self.push_control(ToController::Ctrl {
            to: None,
            msg: WireCtrl::CallbackTaken {
                round: inner.round,
                host: self.proc.0,
            },
        });
    }

    /// Held notifications nobody took within half the cluster's callback timeout complete
    /// their round by themselves: a process is never declared failed because its event queue
    /// was not read (the application gets the notification later, holding nothing).
    fn complete_untaken(&self) {
        let half = self.callback_timeout / 2;
        let mut untaken = self.untaken.lock().unwrap_or_else(|e| e.into_inner());
        untaken.retain(|w| {
            let Some(c) = w.upgrade() else {
                return false;
            };
            if c.taken.load(Ordering::SeqCst) || c.done.load(Ordering::SeqCst) {
                return false;
            }
            if !half.is_zero() && c.queued.elapsed() >= half {
                c.complete();
                return false;
            }
            true
        });
    }

    /// §5.2: this process's callbacks for `round` are done (the last handle was dropped).
    fn complete_callbacks(&self, round: u32) {
        let now = self.clock.now();
        let mut core = self.lock();
        if let Role::Ordered(h) = &mut core.role {
            h.complete_callbacks(now, round);
        }
        drop(core);
        self.dirty.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// What the I/O thread does with each event of the role. Deliveries wait in `pending`
    /// for [`Shared::flush_deliveries`] at the end of the turn (one lock and one wake-up per
    /// batch instead of per message).
    fn on_event(&self, e: HostEvent, pending: &mut Pending) {
        match e {
            HostEvent::Deliver(d) => {
                let m = Message::of(d, true);
                if m.reliable {
                    pending.rel.push_back(m);
                } else {
                    pending.be.push_back(m);
                }
            }
            // Outside both orders, in a queue of its own: the application has it at the end
            // of this turn, whatever the barriers.
            HostEvent::DeliverPlain(d) => pending.plain.push_back(Message::of(d, false)),
            HostEvent::SendFailed {
                dst, ts, reason, ..
            } => self.push_event(Event::SendFailed { dst, ts, reason }),
            HostEvent::ProcFailed { proc, ts, round } => {
                let callback = match self.callbacks_held {
                    true => self.callback(round, pending),
                    false => Callback::default(),
                };
                let m = self.lock_members();
                // A free slot taken out when the cluster started was never a member: no news
                // (its callback, if held, completes with this turn).
                if !m.ever.contains(&proc.0) {
                    return;
                }
                let reason = match m.left.contains(&proc.0) {
                    true => FailReason::Left,
                    false => FailReason::Failed,
                };
                drop(m);
                self.push_event(Event::ProcessFailed {
                    proc,
                    ts,
                    reason,
                    callback,
                });
            }
            HostEvent::Recalled { ts, .. } => self.push_event(Event::Recalled { ts }),
            HostEvent::ReliableAborted { handle, .. } => self.push_event(Event::ReliableAborted {
                handle: SendHandle(handle),
            }),
            HostEvent::ReliableSent { handle, ts, .. } => {
                if self.report_reliable_sent {
                    self.push_event(Event::ReliableSent {
                        handle: SendHandle(handle),
                        ts,
                    });
                }
            }
        }
    }

    /// Moves the turn's deliveries into the application's queues. The role never delivers
    /// more best-effort messages than the queue has room for ([`Shared::grant_room`]: it
    /// refuses and NAKs arrivals beyond that itself, §4.1). Reliable ones the queue cannot
    /// take stay in `pending.rel` and reliable delivery pauses (the role holds the rest back,
    /// §6.1) until the application makes room.
    fn flush_deliveries(&self, pending: &mut Pending) {
        let any = !(pending.be.is_empty() && pending.plain.is_empty() && pending.rel.is_empty());
        self.be.push_many(&mut pending.be);
        debug_assert!(pending.be.is_empty(), "the role delivered beyond its room");
        self.plain.push_many(&mut pending.plain);
        debug_assert!(
            pending.plain.is_empty(),
            "the role delivered beyond its room"
        );
        self.rel.push_many(&mut pending.rel);
        if !pending.rel.is_empty() && !self.rel_paused.load(Ordering::Relaxed) {
            self.set_reliable_paused(true);
        }
        if any {
            self.bump_activity();
        }
    }

    /// Tells the role how many best-effort and plain messages the application's queues have
    /// room for (`Host::set_room`, `Host::set_plain_room`), once what it was given last is
    /// half used and the application has read since: the role accepts no more than that, and
    /// refuses what arrives beyond it with a `BufferFull` NAK before acknowledging it. Called
    /// by the I/O thread with no deliveries pending. Returns whether the role has new outputs.
    fn grant_room(&self, force: bool) -> bool {
        let now = self.clock.now();
        let me = self.current();
        let mut core = self.lock();
        let mut granted = false;
        for (plain, queue, starved) in [
            (false, &self.be, &self.be_starved),
            (true, &self.plain, &self.plain_starved),
        ] {
            let len_max = queue.len_max();
            let free = len_max.saturating_sub(queue.len());
            let room = core.role.room(me, plain);
            let low = room <= len_max / 2;
            starved.store(low, Ordering::Relaxed);
            if !(force || low && free > room) {
                continue;
            }
            core.role.set_room(now, me, plain, free);
            starved.store(free <= len_max / 2, Ordering::Relaxed);
            granted = true;
        }
        if granted {
            self.dirty.store(true, Ordering::SeqCst);
        }
        granted
    }

    fn set_reliable_paused(&self, paused: bool) {
        self.rel_paused.store(paused, Ordering::Relaxed);
        let now = self.clock.now();
        let me = self.current();
        let mut core = self.lock();
        if let Role::Ordered(h) = &mut core.role {
            h.set_paused(now, me, paused);
        }
        self.dirty.store(true, Ordering::SeqCst);
    }
}

/// Deliveries of the current turn, waiting for [`Shared::flush_deliveries`]; reliable ones
/// stay while the application's queue is full (delivery is paused then).
#[derive(Default)]
struct Pending {
    be: VecDeque<Message>,
    rel: VecDeque<Message>,
    plain: VecDeque<Message>,
    /// Callback handles made this turn (see [`Shared::callback`]), dropped at its end.
    callbacks: Vec<Callback>,
}

/// The role as the driver sees it. Each input takes the lock once: the role handles it, and
/// its outputs and timer are taken out under the same lock, for the driver to drain without
/// locking again. Outputs that other threads cause (sends, control messages, NAKs) are taken
/// when [`Shared::dirty`] says there are some.
struct CoreNode {
    shared: Arc<Shared>,
    taken: Taken,
}

/// What [`CoreNode`] took out of the role under the lock: its outputs, and its timer.
#[derive(Default)]
struct Taken {
    outputs: VecDeque<Output<Packet, HostEvent>>,
    /// Management messages, for the control thread ([`CoreNode::forward_mgmt`]).
    mgmt: Vec<(MgmtDest, Mgmt)>,
    timeout: Option<Instant>,
}

impl Taken {
    /// Takes the role's outputs and reads its timer (`core` is the locked core); the role has
    /// nothing left waiting, so `dirty` is cleared.
    fn take(&mut self, core: &mut Core, dirty: &AtomicBool) {
        let Core { role, extra, .. } = core;
        match role {
            Role::Ordered(h) => {
                while let Some(o) = h.poll_output() {
                    match o {
                        Output::Send { port, packet } => {
                            self.outputs.push_back(Output::Send { port, packet })
                        }
                        Output::Event(e) => self.outputs.push_back(Output::Event(e)),
                        Output::Mgmt { to, msg } => self.mgmt.push((to, msg)),
                    }
                }
                self.timeout = h.poll_timeout();
            }
            Role::Unordered(h) => {
                while let Some(o) = h.poll_output() {
                    self.outputs.push_back(o);
                }
                self.timeout = h.poll_timeout();
            }
        }
        self.outputs.extend(extra.drain(..));
        dirty.store(false, Ordering::SeqCst);
    }
}

impl CoreNode {
    fn new(shared: Arc<Shared>) -> CoreNode {
        let mut taken = Taken::default();
        taken.take(&mut shared.lock(), &shared.dirty);
        let mut node = CoreNode { shared, taken };
        node.forward_mgmt();
        node
    }

    /// Hands the role's management messages to the control thread, in the role's order (the
    /// core's lock is not held).
    fn forward_mgmt(&mut self) {
        for (to, msg) in self.taken.mgmt.drain(..) {
            self.shared.send_mgmt(to, msg);
        }
    }
}

impl Node for CoreNode {
    type Packet = Packet;
    type Event = HostEvent;
    type Mgmt = std::convert::Infallible;

    fn handle(&mut self, now: Instant, input: Input<Packet>) {
        let mut core = self.shared.lock();
        match &mut core.role {
            Role::Ordered(h) => h.handle(now, input.widen()),
            Role::Unordered(h) => h.handle(now, input),
        }
        self.taken.take(&mut core, &self.shared.dirty);
        drop(core);
        if !self.taken.mgmt.is_empty() {
            self.forward_mgmt();
        }
    }

    fn poll_output(&mut self) -> Option<Output<Packet, HostEvent>> {
        if self.taken.outputs.is_empty() && self.shared.dirty.load(Ordering::SeqCst) {
            self.taken.take(&mut self.shared.lock(), &self.shared.dirty);
            if !self.taken.mgmt.is_empty() {
                self.forward_mgmt();
            }
        }
        self.taken.outputs.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.taken.timeout
    }
}

/// The I/O thread: lib1pipe's polling thread (§6.1).
fn io_loop(mut driver: Driver<CoreNode>, shared: Arc<Shared>) -> io::Result<()> {
    let mut pending = Pending::default();
    let mut last_stats = std::time::Instant::now();
    let result = loop {
        if shared.stop.load(Ordering::SeqCst) {
            break Ok(());
        }
        let mut sink = |e| shared.on_event(e, &mut pending);
        let more = match driver.turn_once(&mut sink) {
            Ok(more) => more,
            Err(e) => break Err(e),
        };
        // Drain what application threads queued since the last turn (sends, NAKs).
        driver.with_node(|_, _| (), &mut sink);
        // The turn's deliveries go to the application's queues in one batch — before the
        // barriers are published, and before the loop waits.
        shared.flush_deliveries(&mut pending);
        // Best-effort room for the role, once the application has read.
        if shared.grant_room(false) {
            driver.with_node(|_, _| (), &mut |e| shared.on_event(e, &mut pending));
            shared.flush_deliveries(&mut pending);
        }
        // Reliable delivery resumes once the application has made room.
        if pending.rel.is_empty()
            && shared.rel_paused.load(Ordering::Relaxed)
            && shared.rel.len() <= shared.rel.len_max() / 2
        {
            shared.set_reliable_paused(false);
            driver.with_node(|_, _| (), &mut |e| shared.on_event(e, &mut pending));
            shared.flush_deliveries(&mut pending);
        }
        shared.publish(pending.rel.is_empty());
        shared.room_turned();
        // The turn's failure notifications are all queued: the application's callbacks may
        // complete their rounds now (dropped outside every lock).
        pending.callbacks.clear();
        shared.release_held_events();
        if last_stats.elapsed() >= Duration::from_millis(20) {
            last_stats = std::time::Instant::now();
            *shared
                .driver_stats
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = driver.stats();
        }
        if !more {
            if let Err(e) = driver.wait_for_work(Duration::from_millis(50)) {
                break Err(e);
            }
        }
    };
    let _ = driver.flush();
    *shared
        .driver_stats
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = driver.stats();
    // Wake whoever waits: the queues say Closed once drained, and senders waiting for room
    // find the endpoint closed.
    shared.stop.store(true, Ordering::SeqCst);
    shared.room_turned();
    shared.bump_activity();
    shared.be.close();
    shared.rel.close();
    shared.plain.close();
    shared.events.close();
    if let Err(e) = &result {
        error!(proc = shared.proc.0, "I/O thread stopped: {e}");
    }
    result
}
