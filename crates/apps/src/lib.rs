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
//! An application implements [`App`] (feed one input with [`App::handle`], drain
//! [`App::poll_send`] until `None`, re-arm from [`App::poll_timeout`]); the simulator and the
//! runtime drive it as an `onepipe_proto::app::AppNode`, a `Node` like every protocol role.

pub mod depgraph;
pub mod hashtable;
pub mod history;
pub mod kv;
pub mod repl;
pub mod tpcc;
mod wire;

pub use onepipe_proto::app::{App, AppInput, AppSend};

/// The unit tests' allocator: it counts what one decode allocates, for the codecs' property
/// tests under random and mutated input (docs/TESTING.md).
#[cfg(test)]
#[global_allocator]
static ALLOC: onepipe_testalloc::CountingAlloc = onepipe_testalloc::CountingAlloc;
