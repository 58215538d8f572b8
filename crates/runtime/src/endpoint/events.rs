//! What an endpoint hands its application: delivered messages, events (failure notifications
//! with their callback handles, send failures, rejoins), and the errors of its calls.

use super::*;

/// A delivered message: `TS, src, msg` of Table 1, and how it was released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Its timestamp (one per scattering).
    pub ts: Timestamp,
    /// The sending process.
    pub src: ProcId,
    /// The receiving process: this endpoint's id when the message was delivered (after a
    /// rejoin, §5.2, what was delivered before it names the old id).
    pub dst: ProcId,
    /// The message.
    pub payload: Bytes,
    /// Sent with the reliable service.
    pub reliable: bool,
    /// In its service's total order; false for a plain message ([`Endpoint::send_plain`]),
    /// delivered on arrival ([`Endpoint::plain`]) with no place in any order.
    pub ordered: bool,
    /// The barrier that released it (`ts < barrier`; the commit barrier if reliable). A plain
    /// message is released by none: this is the best-effort barrier this endpoint had passed
    /// when it arrived, which may be at or below `ts` — it arrived before the barrier did.
    pub barrier: Timestamp,
    /// This endpoint's timestamp when it was delivered (§4.1 causality: `ts < delivered_ts`;
    /// not promised for a plain message).
    pub delivered_ts: Timestamp,
    /// PSN of its first packet, per (sender, receiver) and service (plain messages are in the
    /// best-effort space).
    pub psn: u32,
}

impl Message {
    /// The message of a role's delivery; `ordered` false for a plain one.
    pub(super) fn of(d: onepipe_proto::host::Delivery, ordered: bool) -> Message {
        Message {
            ts: d.ts,
            src: d.src,
            dst: d.dst,
            payload: d.payload,
            reliable: d.reliable,
            ordered,
            barrier: d.barrier,
            delivered_ts: d.now_ts,
            psn: d.psn.0,
        }
    }
}

/// A notification (Table 1's callbacks, as an event stream).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A best-effort message this process sent was dropped by its receiver or is presumed lost
    /// (`onepipe_send_fail_callback(TS, dst, msg)`).
    SendFailed {
        /// The receiver.
        dst: ProcId,
        /// The message's timestamp.
        ts: Timestamp,
        /// Why.
        reason: NakReason,
    },
    /// A process failed (`onepipe_proc_fail_callback(proc, TS)`); `reason` says how it is
    /// known and what `ts` is ([`FailReason`]).
    ProcessFailed {
        /// The process.
        proc: ProcId,
        /// The failure timestamp (`Failed`, `Declared`), or this endpoint's timestamp when it
        /// heard (`Left`, `Lost`).
        ts: Timestamp,
        /// How it is known.
        reason: FailReason,
        /// §5.2's callback handle. With [`FailureCallbacks::Held`] delivery resumes "after all
        /// non-fail processes finish their callback functions": drop this (or call
        /// [`Callback::done`]) once the application has acted on the failure; until then this
        /// process holds the round's Resume, and held past the cluster's `callback_timeout`
        /// this process is declared failed itself. With [`FailureCallbacks::Automatic`] (the
        /// default) it holds nothing. (Only `FailReason::Failed` ever holds anything.)
        callback: Callback,
    },
    /// §5.2 Recall: a reliable scattering this process sent, stamped `ts`, was aborted because
    /// one of its receivers failed before acknowledging it; no correct receiver delivers it
    /// (the send-failed callback for the whole scattering).
    Recalled {
        /// Its timestamp.
        ts: Timestamp,
    },
    /// §5.2 "the recovered process needs to join 1Pipe as a new process": the process that was
    /// `old` came back as `procs` (new ids; `old` stays failed). When `old` is this endpoint's
    /// own first id, it is now `procs[0]` ([`Endpoint::proc`]).
    Rejoined {
        /// The failed process id.
        old: ProcId,
        /// Its new ids.
        procs: Vec<ProcId>,
    },
    /// A reliable scattering still queued (not stamped) was dropped: a destination failed.
    ReliableAborted {
        /// What [`Endpoint::send_reliable`] returned.
        handle: SendHandle,
    },
    /// The controller saw an aggregator's connection end (a hint: its neighbours time it out
    /// and the controller declares the processes it cut off, §5.2).
    AggregatorFailed {
        /// Its name.
        name: String,
    },
    /// A reliable scattering left the send buffer stamped `ts` (with
    /// [`JoinOptions::report_reliable_sent`]).
    ReliableSent {
        /// What [`Endpoint::send_reliable`] returned.
        handle: SendHandle,
        /// Its timestamp.
        ts: Timestamp,
    },
    /// The control connection was lost and this endpoint re-registered with whichever
    /// controller leads now (a failover, docs/CONTROLLER-HA.md); its data path never stopped.
    ControllerChanged,
    /// The group's membership changed ([`crate::endpoint::Endpoint::view`] returns it from now
    /// on): a process left, failed, or joined. Every process sees the same views in the same
    /// order (the controller numbers them).
    ViewChanged(View),
}

/// Who is in the group: the live processes of the cluster, as the controller last said.
/// [`crate::endpoint::Endpoint::view`] returns the current one; [`Event::ViewChanged`]
/// announces each new one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// Counts membership changes: every process that joined, rejoined, left or failed since
    /// the cluster became ready advances it by one. Views with the same epoch are the same.
    pub epoch: u64,
    /// The live processes, in id order: what a broadcast goes to.
    pub members: Vec<ProcId>,
    /// New in this view (every member, in the first one).
    pub joined: Vec<ProcId>,
    /// Left on purpose ([`crate::endpoint::Endpoint::leave`]) since the view before.
    pub left: Vec<ProcId>,
    /// Declared failed (§5.2) since the view before.
    pub failed: Vec<ProcId>,
}

impl View {
    /// Whether `p` is a member.
    pub fn contains(&self, p: ProcId) -> bool {
        self.members.binary_search(&p).is_ok()
    }
}

/// The handle of a §5.2 failure callback ([`Event::ProcessFailed`]): the round completes at
/// this process when every handle of the round is dropped or [`Callback::done`]. Clones share
/// the completion. Two handles are equal if they are of the same round.
#[derive(Clone, Default)]
pub struct Callback(pub(super) Option<Arc<CallbackInner>>);

pub(super) struct CallbackInner {
    pub(super) round: u32,
    pub(super) shared: std::sync::Weak<Shared>,
    /// The application took a notification holding it: the controller was told, and its
    /// callback clock runs from then (issue 35).
    pub(super) taken: AtomicBool,
    /// The round was completed here (by the last handle's drop, or by itself when nobody took
    /// a notification in time): once only.
    pub(super) done: AtomicBool,
    /// When its first notification was queued.
    pub(super) queued: std::time::Instant,
}

impl CallbackInner {
    /// Completes the round at this process, once.
    pub(super) fn complete(&self) {
        if self.done.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(shared) = self.shared.upgrade() {
            shared.complete_callbacks(self.round);
        }
    }
}

impl Callback {
    /// The callback is done (the same as dropping it).
    pub fn done(self) {}

    /// The failure round it belongs to; `None` for a notification that holds nothing.
    pub fn round(&self) -> Option<u32> {
        self.0.as_ref().map(|c| c.round)
    }
}

impl Drop for CallbackInner {
    fn drop(&mut self) {
        self.complete();
    }
}

impl std::fmt::Debug for Callback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.round() {
            Some(r) => write!(f, "Callback(round {r})"),
            None => f.write_str("Callback(none)"),
        }
    }
}

impl PartialEq for Callback {
    fn eq(&self, other: &Callback) -> bool {
        self.round() == other.round()
    }
}

impl Eq for Callback {}

/// What a §5.2 failure notification ([`Event::ProcessFailed`] with [`FailReason::Failed`])
/// holds: [`crate::endpoint::JoinOptions::failure_callbacks`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureCallbacks {
    /// The round completes at this process as soon as the notification is queued: delivery
    /// from the others resumes without waiting for the application, and the [`Callback`] the
    /// event carries holds nothing. An application that reads its events late, or never, is
    /// never declared failed for it, and keeps its process id.
    #[default]
    Automatic,
    /// §5.2 to the letter ("resumes delivery after all non-fail processes finish their callback
    /// functions"): the round completes at this process only once the application has dropped
    /// every [`Callback`] of it, so it can act on a failure before anything after it is
    /// delivered. The cluster's `callback_timeout` (2 s by default) runs from when the
    /// application *takes* the notification (`next_event` and its forms; the controller is
    /// told): one that holds its callback longer than that holds every other process's reliable
    /// delivery until then, and is then declared failed itself. A notification nobody takes
    /// within half the timeout completes its round by itself — a process is never declared
    /// failed because its event queue was not read — and reaches the application later
    /// holding nothing.
    Held,
}

/// Why [`Event::ProcessFailed`] was raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailReason {
    /// The controller declared it failed (§5.2 Callback); `ts` is its failure timestamp: its
    /// reliable messages below `ts` are delivered here, those at or above are not, and delivery
    /// from the rest goes on once every correct process has done the same.
    Failed,
    /// This process itself was declared failed: it is cut off from the others (§5.2); `ts` is
    /// its failure timestamp.
    Declared,
    /// The process left on purpose ([`crate::endpoint::Endpoint::leave`]) and the
    /// controller took it out (§5.2, without a timeout); `ts` is its failure timestamp, as for
    /// `Failed`. One such event per departure.
    Left,
    /// The controller lost the process's connection without a leave (a hint only).
    Lost,
}

impl FailReason {
    /// `failed`, `declared`, `left` or `lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailReason::Failed => "failed",
            FailReason::Declared => "declared",
            FailReason::Left => "left",
            FailReason::Lost => "lost",
        }
    }

    /// Whether the controller declared it (§5.2): `ts` is then a failure timestamp. `Lost` is
    /// a hint from the control connections.
    pub fn is_declared(self) -> bool {
        matches!(
            self,
            FailReason::Failed | FailReason::Declared | FailReason::Left
        )
    }
}

impl std::fmt::Display for FailReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Names a reliable scattering until [`Event::ReliableSent`] gives its timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SendHandle(pub u64);

/// Why a send was refused. Nothing was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// The scattering has no messages.
    Empty,
    /// A destination is not a process of the cluster.
    UnknownDestination(ProcId),
    /// The send buffer is full: retry after some messages are acknowledged (§6.1).
    Full,
    /// A message (or a reliable scattering) is larger than the limit.
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A destination process has failed (§5.2): reliable scatterings to it are refused.
    Failed(ProcId),
    /// The cluster runs with ordering off, which has no reliable service.
    Unsupported,
    /// The endpoint has left, or its I/O thread stopped.
    Closed,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Empty => write!(f, "empty scattering"),
            SendError::UnknownDestination(p) => write!(f, "unknown destination process {p}"),
            SendError::Full => write!(f, "send buffer full"),
            SendError::TooLarge { len, max } => {
                write!(f, "{len} bytes exceed the {max}-byte limit")
            }
            SendError::Unsupported => write!(f, "no reliable service with ordering off"),
            SendError::Closed => write!(f, "the endpoint is closed"),
            SendError::Failed(p) => write!(f, "destination process {p} has failed"),
        }
    }
}

impl std::error::Error for SendError {}

impl From<onepipe_proto::host::SendError> for SendError {
    fn from(e: onepipe_proto::host::SendError) -> SendError {
        use onepipe_proto::host::SendError as P;
        match e {
            P::Empty => SendError::Empty,
            P::UnknownDestination(p) => SendError::UnknownDestination(p),
            P::Full => SendError::Full,
            P::TooLarge { len, max } => SendError::TooLarge { len, max },
            P::Failed(p) => SendError::Failed(p),
            // The endpoint always sends as its own process.
            P::NotLocal(_) => unreachable!("an endpoint sends as itself"),
        }
    }
}

/// Why a receive returned no message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecvError {
    /// Nothing was waiting (`try_recv_*`, `try_next_event`).
    Empty,
    /// Nothing came before the timeout.
    Timeout,
    /// The endpoint has left, or its I/O thread stopped, and everything delivered was read.
    Closed,
}

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecvError::Empty => "nothing to receive",
            RecvError::Timeout => "timed out",
            RecvError::Closed => "the endpoint is closed",
        })
    }
}

impl std::error::Error for RecvError {}

impl From<PopError> for RecvError {
    fn from(e: PopError) -> RecvError {
        match e {
            PopError::Empty => RecvError::Empty,
            PopError::Timeout => RecvError::Timeout,
            PopError::Closed => RecvError::Closed,
        }
    }
}
