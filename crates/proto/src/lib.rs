//! # onepipe-proto
//!
//! The 1Pipe protocol as sans-IO state machines: the host endpoint ([`host::Host`]), the barrier
//! aggregator that stands in for a switch ([`switch::Switch`]), the up/down pair of one node of
//! an aggregator tree ([`aggregator::Aggregator`]), the wire format ([`wire`]), the
//! routing DAG ([`topology`]) and the time and identifier newtypes they share.
//!
//! Nothing in this crate reads a clock, opens a socket, spawns a thread or draws ambient
//! randomness (clippy's `disallowed-methods` enforces it): time comes in as an argument and every
//! node owns a seeded [`rng::Rng`]. Drivers follow the call order documented in [`node`], by the
//! loop written once in [`drive`].
//!
//! Section references (§) are to Li et al., "1Pipe: Scalable Total Order Communication in Data
//! Center Networks", SIGCOMM 2021.

pub mod ack;
pub mod aggregator;
pub mod app;
pub mod byteio;
pub mod drive;
pub mod failure;
pub mod gaps;
pub mod host;
pub mod ids;
pub mod node;
pub mod optimistic;
pub mod peers;
pub mod prefetch;
pub mod reliable;
pub mod reorder;
pub mod rng;
pub mod switch;
pub mod time;
pub mod topology;
pub mod wire;

pub use drive::Turn;
pub use ids::{LinkId, NodeId, PortId, ProcId, Psn};
pub use node::{Input, Node, Notice, Output};
pub use time::{Barrier, Instant, Timestamp};
