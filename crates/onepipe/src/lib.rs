//! # onepipe
//!
//! Scalable total-order communication for clusters: an implementation of 1Pipe (Li et al.,
//! SIGCOMM 2021). Any process can send a message, or a *scattering* — different messages to
//! different processes, all at one timestamp — and every process delivers what it receives in
//! one total order that respects causality.
//!
//! * [`Endpoint`] is the library API (Table 1 of the paper) for one process of a live cluster:
//!   join, send best effort or reliable, receive, timestamps, failure notifications. See
//!   [`runtime::endpoint`] for how it works and a complete example, and `onepipe up` for a
//!   local cluster in one command.
//! * [`proto`] is the protocol core (sans-IO state machines), [`runtime`] the UDP runtime,
//!   daemons' cores and cluster files, [`apps`] the applications. The deterministic simulator
//!   that checks the protocol is a tool, not part of the library: the `onepipe-sim` crate.
//!
//! **Features.** `tokio`: receive in async code — `e.best_effort().recv_async()`,
//! `e.reliable().recv_async()` and `next_event_async` are futures that the endpoint's I/O thread
//! wakes when it queues a delivery or an event (no polling, no thread blocked; any executor).
//! `etcd`: a standby controller over etcd in the runtime's controller core.
//!
//! This crate is the library only: it pulls in no command-line, plotting or progress-bar
//! crates. The `onepipe` command (`onepipe sim`, `onepipe up`, the daemons) is the
//! `onepipe-cli` crate.
//!
//! Three processes (here in one program; normally each is its own OS process, and the
//! controller and aggregators are daemons): they join one after another, broadcast, scatter,
//! and one leaves while the others watch their event loop. The whole program, with its output,
//! is `examples/newcomer.rs` (`cargo run -p onepipe --example newcomer`).
//!
//! ```
//! use onepipe::{cluster::LocalLayout, Endpoint, Event, FailReason, LocalCluster};
//! use std::time::Duration;
//! let wait = Duration::from_secs(30);
//!
//! // A controller and an aggregator on threads, with room for three processes; the cluster
//! // starts with the first, and the others join it while it runs (each `join` returns once the
//! // process is in the group's view).
//! let layout = LocalLayout { hosts: 3, layers: 1, start_with: Some(1), ..LocalLayout::default() };
//! let local = LocalCluster::start(&layout).unwrap();
//! let join = || Endpoint::join(local.controller_addr(), local.join_options()).unwrap();
//! let (a, b, c) = (join(), join(), join());
//!
//! // A reliable broadcast to the view, and a scattering: a different message to each of two
//! // processes, at one timestamp.
//! while a.view().members.len() < 3 { std::thread::sleep(Duration::from_millis(5)); }
//! a.broadcast_reliable("hello").unwrap();
//! c.send_reliable(&[(a.proc(), "to a".into()), (b.proc(), "to b".into())]).unwrap();
//! for e in [&a, &b] {
//!     let first = e.reliable().recv(wait).unwrap();
//!     let second = e.reliable().recv(wait).unwrap();
//!     println!("{}: {:?} then {:?}", e.proc(), first.payload, second.payload);
//! }
//!
//! // c leaves; a's event loop hears of it once, and sees the new view.
//! let gone = c.proc();
//! c.leave();
//! loop {
//!     match a.next_event_timeout(wait).unwrap() {
//!         Event::ProcessFailed { proc, reason: FailReason::Left, .. } if proc == gone => {}
//!         Event::ViewChanged(view) if view.left.contains(&gone) => break,
//!         _ => {}
//!     }
//! }
//! assert_eq!(a.view().members.len(), 2);
//! a.leave();
//! b.leave();
//! ```
//!
//! **Limits and timeouts**, with their defaults and where to change them: a best-effort
//! message is at most 1 MiB and a reliable one 259,840 bytes on loopback (89,600 bytes in
//! 1,472-byte datagrams); a reliable scattering at most the 4 MiB send buffer
//! (`SendError::TooLarge` names both numbers). `JoinOptions::join_timeout` (60 s) bounds
//! `join`; `Endpoint::leave` waits at most `LEAVE_FLUSH_TIMEOUT` (5 s) for its sends. The
//! cluster file sets `loss_timeout` (50 ms: a best-effort message unacknowledged this long is
//! reported lost), `link_timeout` (1 s: a silent process or aggregator is taken for failed) and
//! `callback_timeout` (2 s: how long a held failure callback may be held, from when the
//! application takes it). `JoinOptions::recv_queue_len_max` (65,536 messages per service) and
//! `event_queue_len_max` (4,096) bound the queues. docs/LIVE.md has the details.
//!
//! The same in async code, with the `tokio` feature:
//!
#![cfg_attr(feature = "tokio", doc = "```")]
#![cfg_attr(not(feature = "tokio"), doc = "```ignore")]
//! use onepipe::{cluster::LocalLayout, Endpoint, JoinOptions, LocalCluster, ProcId};
//!
//! let local = LocalCluster::start(&LocalLayout { hosts: 1, layers: 1, ..LocalLayout::default() }).unwrap();
//! let me = Endpoint::join(local.controller_addr(), local.join_options()).unwrap();
//! let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
//! let m = rt.block_on(async {
//!     me.send_unreliable(&[(ProcId(0), "hello".into())]).unwrap();
//!     me.best_effort().recv_async().await.unwrap()
//! });
//! assert_eq!(&m.payload[..], b"hello");
//! me.leave();
//! ```

pub mod kv;

pub use onepipe_apps as apps;
pub use onepipe_proto as proto;
pub use onepipe_runtime as runtime;

pub use bytes::Bytes;
pub use onepipe_proto::wire::NakReason;
pub use onepipe_proto::{ProcId, Timestamp};
pub use onepipe_runtime::cluster;
pub use onepipe_runtime::endpoint::{
    Endpoint, EndpointStats, Event, FailReason, FailureCallbacks, Inbox, JoinOptions, Message,
    RecvError, SendError, SendHandle, View, LEAVE_FLUSH_TIMEOUT,
};
pub use onepipe_runtime::{Cluster, JoinError, LocalCluster};
