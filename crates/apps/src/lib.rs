//! # onepipe-apps
//!
//! The applications 1Pipe exists for, as sans-IO roles on top of the host interface
//! (`../shared/DESIGN.md` §6): an application consumes what the ordering layer hands it —
//! deliveries, the timestamps its sends got, loss reports, the released commit barrier — and emits
//! sends. It never touches a socket, a clock or ambient randomness, so the same code runs in the
//! simulator (on the hosts' CPU model) and live (through `onepipe::Endpoint`).
//!
//! * [`kv`] — the transactional key-value store of §7.3.1: servers that apply operations in
//!   timestamp order, initiators that send read-only transactions by best-effort 1Pipe and
//!   read-write or write-only ones by reliable 1Pipe, the workloads (uniform or YCSB Zipf keys,
//!   Facebook ETC value sizes), and a checker that replays the committed transactions in their
//!   serialization order.
//! * [`tpcc`] — TPC-C's New-Order and Payment as independent transactions (§7.3.2): a database
//!   sharded and replicated over the processes, each transaction one reliable scattering to every
//!   replica of every shard it touches (Eris's method on 1Pipe's timestamps), inputs and
//!   population as the specification draws them, and a checker that replays the committed
//!   transactions on a reference written apart from the specification, compares every replica's
//!   rows with it and checks the specification's consistency conditions.
//!
//! * [`repl`] — a replicated linearizable key-value service (§2.2.2, §7.3.3–7.3.4) on
//!   interchangeable replication schemes: 1-RTT replication on best-effort 1Pipe, and the
//!   baselines it is measured against.
//!
//! * [`hashtable`] — the replicated remote hash table of §7.3.3 (Fig. 16): chained buckets
//!   accessed with one-sided read, write and compare-and-swap, on 1Pipe without a fence between
//!   writing a pair and linking it, and the fenced, leader-follower baseline.
//!
//! * [`history`] — histories in Jepsen's form (transactions as lists of read and write
//!   micro-operations, `invoke` then `ok`/`fail`/`info`), and [`depgraph`], a checker that reads
//!   such a history alone and looks for dependency cycles (Adya's anomalies, as Elle infers them).
//!
//! The driving contract ([`App`]) mirrors `onepipe_proto::Node`'s: feed one input with
//! [`App::handle`], drain [`App::poll_send`] until `None`, re-arm from [`App::poll_timeout`].

pub mod depgraph;
pub mod hashtable;
pub mod history;
pub mod kv;
pub mod repl;
pub mod tpcc;
mod wire;

use bytes::Bytes;
use onepipe_proto::{Instant, ProcId, Timestamp};

/// The unit tests' allocator: it counts what one decode allocates, for the codecs' property
/// tests under random and mutated input (docs/TESTING.md).
#[cfg(test)]
#[global_allocator]
static ALLOC: onepipe_testalloc::CountingAlloc = onepipe_testalloc::CountingAlloc;

/// What the ordering layer hands an application process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AppInput<'a> {
    /// A message was delivered to this process: in 1Pipe's total order, or, if its sender
    /// sent it unordered ([`AppSend::ordered`] false), on arrival, with no place in the order.
    Deliver {
        /// Its sender.
        src: ProcId,
        /// Its timestamp.
        ts: Timestamp,
        /// It came by the reliable service.
        reliable: bool,
        /// Its payload.
        payload: &'a [u8],
    },
    /// Send `tag` got its timestamp: at once for best effort, when the reliable service stamped
    /// it for reliable sends.
    Sent {
        /// The tag the application gave the send ([`AppSend::tag`]).
        tag: u64,
        /// Its timestamp.
        ts: Timestamp,
    },
    /// A best-effort message this process sent at `ts` to `dst` was lost (§2.1
    /// `onepipe_send_fail_callback`).
    SendFailed {
        /// The receiver that did not get it.
        dst: ProcId,
        /// The message's timestamp.
        ts: Timestamp,
    },
    /// Send `tag` was refused or aborted before it got a timestamp (a destination failed, the
    /// send buffer was full): it will never be delivered.
    Refused {
        /// The send's tag.
        tag: u64,
    },
    /// Every reliable message below `ts` has been delivered to this process (its host's released
    /// commit barrier, §5.1).
    CommitReleased {
        /// The barrier.
        ts: Timestamp,
    },
    /// Process `proc` failed at timestamp `ts` (§5.2 `onepipe_proc_fail_callback`).
    ProcFailed {
        /// The failed process.
        proc: ProcId,
        /// Its failure timestamp.
        ts: Timestamp,
    },
    /// The instant last returned by [`App::poll_timeout`] has been reached.
    Timeout,
}

/// A send an application asks for: one message, or a scattering (different messages to
/// different processes at one timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppSend {
    /// The application's name for it, echoed in [`AppInput::Sent`] and [`AppInput::Refused`].
    pub tag: u64,
    /// By the reliable service (§5.1) rather than best effort.
    pub reliable: bool,
    /// In 1Pipe's total order. An unordered send (a reply that needs no place in the order,
    /// §2.2.2) is best effort whatever `reliable` says, and is delivered on arrival, as
    /// `AppInput::Deliver` with `reliable` false: the simulator carries it outside the hosts
    /// and never loses it; the live runtime sends it as a plain message
    /// (`Endpoint::send_plain`: flagged on the wire, delivered by the receiving endpoint
    /// without waiting for the barrier), which may be lost and is then reported as
    /// `AppInput::SendFailed`, as a best-effort one is.
    pub ordered: bool,
    /// The parts: one message per destination.
    pub parts: Vec<(ProcId, Bytes)>,
}

/// An application process, sans-IO.
pub trait App {
    /// Feeds one input seen at local time `now`. Never panics on any payload: a malformed
    /// message is dropped and counted.
    fn handle(&mut self, now: Instant, input: AppInput<'_>);
    /// The next send the application asks for; call until `None` after every input.
    fn poll_send(&mut self) -> Option<AppSend>;
    /// The earliest local instant at which `handle(now, AppInput::Timeout)` is due, if any.
    fn poll_timeout(&self) -> Option<Instant>;
}
