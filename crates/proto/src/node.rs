//! The one driving contract every role implements (DESIGN.md §3).
//!
//! A role is a sans-IO state machine. Its driver — the simulator or the UDP runtime — runs one
//! loop, always in this order:
//!
//! 1. a mutation: `handle(now, input)`, or an application command such as
//!    [`crate::host::Host::send`];
//! 2. drain [`Node::poll_output`] until it returns `None`;
//! 3. read [`Node::poll_timeout`] and arm a timer for it, replacing any earlier one.
//!
//! `now` is the node's local clock reading. Drivers pass readings that normally increase, but
//! clock synchronisation may step a clock backwards; roles tolerate that (the host keeps its
//! timestamps non-decreasing regardless). A role never blocks, never reads a clock and never
//! panics on packet content: malformed or stale input is dropped and counted.

use crate::ids::PortId;
use crate::time::Instant;

/// An input to a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<P> {
    /// A packet arrived on the given input port.
    Packet {
        /// The input port it arrived on.
        port: PortId,
        /// The packet.
        packet: P,
    },
    /// The instant last returned by [`Node::poll_timeout`] has been reached.
    Timeout,
}

/// An output of a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<P, E> {
    /// Transmit `packet` on the given output port.
    Send {
        /// The output port.
        port: PortId,
        /// The packet.
        packet: P,
    },
    /// Report something upward (a delivery, a failure notification, ...).
    Event(E),
}

/// A sans-IO protocol role.
pub trait Node {
    /// The role's packet type.
    type Packet;
    /// What the role reports upward.
    type Event;

    /// Feeds one input seen at local time `now`.
    fn handle(&mut self, now: Instant, input: Input<Self::Packet>);

    /// Drains outputs produced by the last mutation; call until `None`.
    fn poll_output(&mut self) -> Option<Output<Self::Packet, Self::Event>>;

    /// The earliest local instant at which `handle(now, Input::Timeout)` is due, if any.
    fn poll_timeout(&self) -> Option<Instant>;
}
