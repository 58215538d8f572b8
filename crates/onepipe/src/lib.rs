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
//! * [`proto`] is the protocol core (sans-IO state machines), [`sim`] the deterministic
//!   simulator that checks it, [`runtime`] the UDP runtime, daemons' cores and cluster files.
//!
//! **Features.** `tokio`: receive in async code — `Endpoint::recv_unreliable_async`,
//! `recv_reliable_async` and `next_event_async` are futures that the endpoint's I/O thread
//! wakes when it queues a delivery or an event (no polling, no thread blocked; any executor).
//! `etcd`: a standby controller over etcd in the runtime's controller core.
//!
//! This crate is the library only: it pulls in no command-line, plotting or progress-bar
//! crates. The `onepipe` command (`onepipe sim`, `onepipe up`, the daemons) is the
//! `onepipe-cli` crate.
//!
//! ```
//! use onepipe::{cluster::LocalLayout, Endpoint, JoinOptions, LocalCluster, ProcId};
//! use std::time::Duration;
//!
//! // A controller and an aggregator on threads; one process, which joins it.
//! let local = LocalCluster::start(&LocalLayout { hosts: 1, layers: 1, ..LocalLayout::default() }).unwrap();
//! let me = Endpoint::join(local.controller_addr(), local.join_options()).unwrap();
//! let ts = me.send_unreliable(&[(ProcId(0), "hello".into())]).unwrap();
//! let m = me.recv_unreliable_timeout(Duration::from_secs(30)).unwrap();
//! assert_eq!((m.ts, m.src, &m.payload[..]), (ts, ProcId(0), &b"hello"[..]));
//! assert!(m.ts < me.timestamp(), "causality: delivered below the receiver's clock");
//! me.leave();
//! ```
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
//!     me.recv_unreliable_async().await.unwrap()
//! });
//! assert_eq!(&m.payload[..], b"hello");
//! me.leave();
//! ```

pub mod kv;

pub use onepipe_apps as apps;
pub use onepipe_proto as proto;
pub use onepipe_runtime as runtime;
pub use onepipe_sim as sim;

pub use bytes::Bytes;
pub use onepipe_proto::wire::NakReason;
pub use onepipe_proto::{ProcId, Timestamp};
pub use onepipe_runtime::cluster;
pub use onepipe_runtime::endpoint::{
    Endpoint, EndpointStats, Event, FailReason, FailureCallbacks, JoinOptions, Message, RecvError,
    SendError, SendHandle, View,
};
pub use onepipe_runtime::{Cluster, JoinError, LocalCluster};
