//! # onepipe-runtime
//!
//! The UDP transport of the live runtime: it drives any sans-IO role of `onepipe-proto` (a
//! 1Pipe host endpoint, a host-representative aggregator, later the baselines) over a real UDP
//! socket. The roles are unchanged: the driver does for them what the simulator does — feed
//! inputs with the time, drain outputs, re-arm the timer — with sockets and a monotonic clock
//! in place of links and a clock model.
//!
//! ## Design
//!
//! * **One [`Driver`] per role, one socket per driver.** The socket is non-blocking, with large
//!   buffers ([`bind_udp`], `socket2`). A [`PortTable`] maps each output port of the role to a
//!   next hop's address, and each peer's address to the input port its datagrams arrive on;
//!   datagrams from anyone else are counted and dropped.
//! * **Batched system calls.** `recvmmsg` (through `nix`) fills preallocated slots;
//!   `sendmmsg` (through `rustix`) sends a batch of datagrams to different peers in one call.
//! * **Coalescing** ([`coalesce`]): a datagram costs microseconds of kernel time whatever its
//!   size, so packets to one next hop are packed back to back into one datagram and flushed
//!   when the next would not fit, when the oldest has waited `flush_delay_ns`, or at once when
//!   the loop is idle (the batching policy of paxos-batching-pipelining §IV-A).
//! * **The loop** ([`driver`]): receive a batch, feed each packet to the role and drain its
//!   outputs, fire its timer when due, flush, send; then spin briefly and block in `epoll`
//!   until the socket is readable, the role's timer or a flush deadline is due, or a [`Waker`]
//!   fires. Application commands run through [`Driver::with_node`].
//! * **Time** ([`Clock`]): `CLOCK_MONOTONIC` in nanoseconds since an epoch; drivers sharing an
//!   epoch share a time base, and [`Clock::monotonic`] shares it across processes.
//! * **Never panic on the network**: malformed datagrams, unknown senders and refused sends are
//!   counted in [`DriverStats`].
//!
//! On top of the transport, the live cluster:
//!
//! * [`cluster`]: the cluster file (TOML) — processes, aggregators and their links, controller,
//!   beacon interval, clock;
//! * [`controller`] and [`control`]: registration, process ids, addresses and health over TCP,
//!   and the network controller of reliable failure handling (§5.2) on the same connections;
//! * [`failure`]: what the §5.2 procedure needs live — the cluster's routing graph and the map
//!   from the members' ports to its links, and the control messages as JSON;
//! * [`aggregator`]: an aggregator daemon, the up and down halves of one node of the aggregator
//!   tree (`onepipe_proto::aggregator`) on one socket, placed from the cluster file;
//! * [`faults`]: the test faults a driver applies in front of its role (cut uplinks, black
//!   holes);
//! * [`endpoint`]: [`Endpoint`], the library API of Table 1 (re-exported as
//!   `onepipe::Endpoint`), one I/O thread per endpoint and bounded queues to the application;
//! * the same transport with ordering switched off, the baseline: the endpoint runs
//!   `onepipe_baselines::unordered::UnorderedHost` in place of the 1Pipe host;
//! * [`LocalCluster`]: a controller and aggregators on threads, for examples and tests.
//!
//! The crate has no `unsafe` code.
//!
//! ## Example
//!
//! One host with one process under one aggregator, on loopback, in one thread. The process
//! sends itself a message; it is delivered once a wave of beacons has gone up to the
//! aggregator and come back with a barrier above its timestamp (1Pipe §4.1).
//!
//! ```
//! use onepipe_proto::host::{Host, HostEvent, UPLINK};
//! use onepipe_proto::ids::{NodeId, PortId, ProcId};
//! use onepipe_proto::switch::Switch;
//! use onepipe_runtime::{bind_udp, Clock, Driver, DriverConfig, LiveRoles, PortTable, ProcessRouter};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! let cfg = DriverConfig::default();
//! let roles = LiveRoles { beacon_interval_ns: 200_000, aggregator_phase_ns: 50_000, ..LiveRoles::default() };
//! let clock = Clock::starting_now();
//! let lo = "127.0.0.1:0".parse().unwrap();
//! let (host_socket, agg_socket) = (bind_udp(lo, &cfg).unwrap(), bind_udp(lo, &cfg).unwrap());
//! let (host_addr, agg_addr) = (host_socket.local_addr().unwrap(), agg_socket.local_addr().unwrap());
//!
//! let host = Host::new(roles.host_config(NodeId(0), vec![ProcId(0)], 1, &cfg), clock.now());
//! let mut host = Driver::new(host, host_socket, PortTable::new().with_link(UPLINK, agg_addr), clock, cfg.clone()).unwrap();
//! let mut router = ProcessRouter::new();
//! router.set(ProcId(0), PortId(0));
//! let agg = Switch::new(roles.switch_config(NodeId(1), 1, 1, 1), Some(Arc::new(router)), clock.now());
//! let mut agg = Driver::new(agg, agg_socket, PortTable::new().with_link(PortId(0), host_addr), clock, cfg).unwrap();
//!
//! host.with_node(|h, now| h.send(now, ProcId(0), &[(ProcId(0), "hello".into())]), &mut |_| {}).unwrap();
//! let mut delivered = Vec::new();
//! let give_up = clock.now() + 10_000_000_000;
//! while delivered.is_empty() && clock.now() < give_up {
//!     host.run_once(Duration::from_micros(100), &mut |e| {
//!         if let HostEvent::Deliver(d) = e { delivered.push(d.payload) }
//!     }).unwrap();
//!     agg.run_once(Duration::from_micros(100), &mut |_| {}).unwrap();
//! }
//! assert_eq!(delivered, vec!["hello"]);
//! assert_eq!(host.stats().decode_errors, 0);
//! ```
#![warn(missing_docs)]
// This is an I/O crate: reading the OS clock, opening sockets and spawning threads (the bench)
// is its job. clippy.toml forbids them for the sans-IO protocol crates only.
#![allow(clippy::disallowed_methods)]

pub mod aggregator;
pub mod apphost;
pub mod auth;
pub mod bench;
pub mod clock;
pub mod cluster;
pub mod coalesce;
pub mod config;
pub mod control;
pub mod controller;
pub mod driver;
pub mod endpoint;
pub mod failure;
pub mod faults;
pub mod keys;
pub mod local;
pub mod ports;
mod queue;
pub mod roles;
pub mod stats;
mod sys;
pub mod tls;

pub use aggregator::{AggregatorDaemon, AggregatorReport};
pub use clock::{Clock, ClockSource};
pub use cluster::{Cluster, ClusterError, LocalLayout};
pub use coalesce::{CoalesceStats, FlushReason};
pub use config::{CoalesceConfig, ConfigError, DriverConfig};
pub use control::JoinError;
pub use controller::Controller;
pub use driver::Driver;
pub use endpoint::{
    Endpoint, EndpointStats, Event, FailReason, FailureCallbacks, JoinOptions, Message, RecvError,
    SendError, SendHandle,
};
pub use local::LocalCluster;
pub use onepipe_proto::aggregator::ProcessRouter;
pub use ports::PortTable;
pub use roles::LiveRoles;
pub use stats::DriverStats;
pub use sys::{bind_udp, path_payload_max, process_cpu_ns, SocketFeatures, Waker};
