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
mod io_thread;
mod join;
mod optimistic;
mod recv;
mod send;
#[cfg(test)]
mod tests;

use crate::auth::{KeyInbox, LinkAuth, LinkPorts};
use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::config::DriverConfig;
use crate::control::{ControlClient, FromController, JoinAs, JoinError, Member, ToController};
use crate::driver::Driver;
use crate::failure::{WireCtrl, WireRelay};
use crate::keys::member_ix;
use crate::ports::PortTable;
use crate::queue::{BoundedQueue, PopError};
use crate::stats::{DriverStats, LinkBarriers, Telemetry, TelemetrySnapshot};
use crate::sys::{bind_udp, Waker};
use crate::tls::Credentials;
use bytes::Bytes;
pub use control_thread::CONTROL_HISTORY_LEN_MAX;
use events::CallbackInner;
pub use events::{
    Callback, Event, FailReason, FailureCallbacks, Message, RecvError, SendError, SendHandle, View,
};
pub use inbox::Inbox;
use onepipe_baselines::unordered::UnorderedHost;
use onepipe_proto::failure::{CtrlMsg, Mgmt, MgmtDest, RelayMsg};
use onepipe_proto::gaps::BarrierGaps;
use onepipe_proto::host::{Host, HostEvent, HostStats, UPLINK};
use onepipe_proto::ids::{NodeId, ProcId};
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::reliable::{ReliableStats, ReliableWindow};
use onepipe_proto::time::{Instant, Timestamp};
use onepipe_proto::wire::{NakReason, Packet};
pub use optimistic::Optimistic;
pub use send::Outgoing;
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
    /// Optimistic delivery, both services (PLATO's hooks on 1Pipe,
    /// [`Endpoint::recv_optimistic`], docs/PLATO.md): Δ and its adaptation. `None` (the
    /// default): off. Ignored on an unordered cluster.
    pub optimistic: Option<onepipe_proto::optimistic::OptConfig>,
    /// Where to publish this process's counters and barriers for a metrics endpoint the
    /// application serves (`onepipe node --metrics` does: docs/LIVE.md, "Metrics and
    /// status"). The control thread copies them in every
    /// [`crate::aggregator::TELEMETRY_INTERVAL`], and says the endpoint's address
    /// ([`Telemetry::metrics_addr`]) to the controller with every health report, so that
    /// `onepipe status` can find it. `None` (the default): nothing is published.
    pub telemetry: Option<Arc<Telemetry>>,
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
            optimistic: None,
            telemetry: None,
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
    /// Messages the role holds for reordering now (`Host::reorder_len`).
    pub reorder_len: u64,
    /// The most one of its reorder buffers ever held (`Host::reorder_len_peak`).
    pub reorder_len_peak: u64,
    /// The reliable sender's windows now (`Host::reliable_send_window`).
    pub reliable_window: ReliableWindow,
    /// When barriers arrived on the uplink (`Host::uplink_gaps`).
    pub uplink_gaps: BarrierGaps,
}

impl EndpointStats {
    /// The counters by name: the role's, the reliable sender's and the transport's (what the
    /// endpoint reports to the controller in `Health`, and what a metrics endpoint serves),
    /// with a few levels among them (`reorder_len`, `reliable_window_*`).
    pub fn counters(&self) -> std::collections::BTreeMap<String, u64> {
        let (h, r, w) = (&self.host, &self.reliable, &self.reliable_window);
        let mut m = self.driver.counters();
        m.extend(
            [
                ("messages_sent", h.messages_sent),
                ("plain_sent", h.plain_sent),
                ("data_packets_sent", h.packets_sent),
                ("beacons_sent", h.beacons_sent),
                ("beacons_fast", h.beacons_fast),
                ("delivered", h.delivered),
                ("delivered_plain", h.delivered_plain),
                ("delivered_reliable", h.delivered_reliable),
                ("dropped_late", h.dropped_late),
                ("dropped_incomplete", h.dropped_incomplete),
                ("dropped_full", h.dropped_full),
                ("dropped_invalid", h.dropped_invalid),
                ("dropped_duplicate", h.dropped_duplicate),
                ("naks_sent", h.naks_sent),
                ("send_failed", h.send_failed),
                ("acks_sent", h.acks_sent),
                ("acks_received", h.acks_received),
                ("lost", h.lost),
                ("uplink_failures", h.uplink_failures),
                ("forwarded", h.forwarded),
                ("rejoined", h.rejoined),
                ("retransmits", r.retransmits),
                ("fast_retransmits", r.fast_retransmits),
                ("window_cuts", r.window_cuts),
                ("recalled", r.recalled),
                ("reliable_refused_full", r.refused_full),
                ("recv_refused_full", self.recv_refused_full),
                ("events_dropped", self.events_dropped),
                ("control_dropped", self.control_dropped),
                ("reorder_len", self.reorder_len),
                ("reorder_len_peak", self.reorder_len_peak),
                ("reorder_holds", h.reorder_holds),
                ("reorder_hold_ns", h.reorder_hold_ns),
                ("reorder_hold_ns_max", h.reorder_hold_ns_max),
                ("reliable_window_pairs", u64::from(w.pairs)),
                ("reliable_window_in_flight_packets", w.in_flight_packets),
                ("reliable_window_limit_packets", w.limit_packets),
                ("reliable_window_unacked_messages", w.unacked_messages),
                ("reliable_window_buffered_bytes", w.buffered_bytes),
                ("reliable_window_buffer_limit_bytes", w.buffer_limit_bytes),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
        );
        m
    }
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
    /// Optimistic hooks ([`Endpoint::recv_optimistic`]); with optimistic delivery off, never
    /// written.
    opt: BoundedQueue<Optimistic>,
    /// Optimistic delivery is on: the best-effort room also leaves room in `opt`.
    optimistic: bool,
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
        let mut stats = EndpointStats::default();
        match &self.lock().role {
            Role::Ordered(h) => {
                stats.host = h.stats().clone();
                stats.reliable = h.reliable_stats().clone();
                stats.reorder_len = h.reorder_len() as u64;
                stats.reorder_len_peak = h.reorder_len_peak() as u64;
                stats.reliable_window = h.reliable_send_window();
                stats.uplink_gaps = h.uplink_gaps();
            }
            Role::Unordered(h) => stats.host = h.stats().clone(),
        }
        stats.recv_refused_full = stats.host.dropped_full;
        stats.driver = self
            .driver_stats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        stats.events_dropped = self.events_dropped.load(Ordering::Relaxed);
        stats.control_dropped = self.control_dropped.load(Ordering::Relaxed);
        stats
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
            msg: WireCtrl::from(&CtrlMsg::CallbackTaken {
                round: inner.round,
                host: NodeId(self.proc.0),
            }),
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
}
