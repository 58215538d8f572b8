//! The one driving contract every role implements (DESIGN.md §3).
//!
//! A role is a sans-IO state machine. Its driver — the simulator or the UDP runtime — runs one
//! loop, always in this order:
//!
//! 1. a mutation: `handle(now, input)`, or an application command such as
//!    [`crate::host::Host::send`];
//! 2. drain [`Node::poll_output`] until it returns `None` (for an application, its sends);
//! 3. read [`Node::poll_timeout`] and arm a timer for it, replacing any earlier one.
//!
//! **The loop** is written once, in [`crate::drive`]: [`crate::drive::turn`] (a node held apart
//! from the driver's state) and [`crate::drive::turn_in`] (a node inside it, like the
//! simulator's switches) run the three steps and count the outputs; a driver supplies only the
//! per-output work (its *sink*) and arms its timer with the deadline they return. No driver
//! writes its own `poll_output` loop: `onepipe-lint` fails the suite on one.
//!
//! `now` is the node's local clock reading. Drivers pass readings that normally increase, but
//! clock synchronisation may step a clock backwards; roles tolerate that (the host keeps its
//! timestamps non-decreasing regardless). A role never blocks, never reads a clock and never
//! panics on packet content: malformed or stale input is dropped and counted.
//!
//! Every input and output of a role passes through this contract: data packets on its ports,
//! its timer, and — for roles with a control plane (§5.2's host, switch and controller) —
//! messages on the management network ([`Input::Mgmt`], [`Output::Mgmt`]). A role builds every
//! protocol message itself; a driver only carries them. Roles without a control plane set
//! [`Node::Mgmt`] to [`std::convert::Infallible`], and their drivers match no management arms.
//!
//! **Applications are `Node`s too.** An application is written against [`crate::app::App`]
//! (typed inputs, borrowed payloads), and driven as a [`crate::app::AppNode`]: its host
//! interface — deliveries, send stamps, refusals, losses, the released commit barrier, failed
//! processes in; the sends it asks for out — as [`crate::app::AppIo`] packets on one port,
//! [`crate::app::HOST_PORT`], its timer as [`Input::Timeout`]. Drivers run it with the same
//! loop as every role, and write no `poll_send` loop of their own either.
//!
//! What a driver must keep, and nothing more:
//!
//! * **Output order.** Outputs are carried out in the order `poll_output` gives them; on the
//!   management network, messages from one role to one addressee arrive in that order or not at
//!   all (a lost one is sent again by the role's own timers). The roles order what must be
//!   ordered: e.g. the host gives a `Recalled` relay before the `Completed` of the same round,
//!   so the controller never resumes a round and settles a recovering host without it.
//! * **One input at a time.** `handle` runs to completion and its outputs are drained before the
//!   next input; a driver that queues inputs (a busy CPU) keeps their arrival order.
//! * **Undeliverable management messages.** A driver that learns a management message could not
//!   reach a host (it is down) may tell the controller ([`Notice::Unreachable`]); otherwise it
//!   drops it silently.
//! * **Notices.** What a driver sees of a role's surroundings that is neither a packet nor a
//!   management message comes in as [`Input::Notice`]; a role with no use for one ignores it.
//! * **Time.** `Input::Timeout` is given only once the instant `poll_timeout` returned has been
//!   reached on the node's clock, and never before the mutation that armed it has been drained.
//!
//! **Direct calls.** Besides `Node`, a driver calls only these public methods that change a role,
//! each for the reason given (`onepipe-lint` reads this list and fails the suite on any other such
//! call from the simulator, the runtime, the library or the command line):
//!
//! * `send`, `send_reliable`, `send_plain`, `timestamp` — application commands (Table 1's send
//!   and get_timestamp): each returns its timestamp or a typed error at once.
//! * `set_room`, `set_plain_room`, `set_paused`, `complete_callbacks` — application commands: the
//!   room left in its inboxes, a paused reader, §5.2 "callbacks done".
//! * `forward_routed` — the simulator's data hot path: what `handle` does for a data packet,
//!   in place in its slab slot, with the route the driver already looked up.
//! * `uplink_heard` — the simulated NIC: a packet from the first-hop switch is queued behind a
//!   busy CPU, so §4.2's silence count must not call the switch dead.
//! * `get_mut` — of an [`crate::app::AppNode`], for what is not the host interface: a checker
//!   taking an application's records of what it committed (`poll_committed`, `poll_done`), and
//!   `onepipe::kv`'s client commands (`submit`, `poll_outcome`); the node is drained after.
//!
//! Set-up is construction: a role is built complete, with by-value builders where a driver adds
//! to it before its first input (`Controller::with_relay`, `Host::with_stats`), so no set-up
//! call changes a running role. Reads (`&self` methods: statistics, barriers) are not calls into the protocol and are free.

use crate::ids::{NodeId, PortId};
use crate::time::Instant;
use std::convert::Infallible;

/// Where a management-network message goes (§5.2's control plane, beside the data network).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MgmtDest {
    /// The controller.
    Controller,
    /// A host or switch.
    Node(NodeId),
}

/// An input to a role. `M` is its management-network message type ([`Node::Mgmt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<P, M = Infallible> {
    /// A packet arrived on the given input port.
    Packet {
        /// The input port it arrived on.
        port: PortId,
        /// The packet.
        packet: P,
    },
    /// The instant last returned by [`Node::poll_timeout`] has been reached.
    Timeout,
    /// A message arrived on the management network (from the controller, or from a peer).
    Mgmt(M),
    /// The driver saw something of the role's surroundings.
    Notice(Notice),
}

/// What a driver tells a role of its surroundings ([`Input::Notice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    /// §5.2 Receiver Recovery: the host's link came back (a host told it failed asks the
    /// controller to settle; see [`crate::host::Host`]'s recovery).
    LinkUp,
    /// The controller is back from an outage with its state (§5.2 with a highly available
    /// store): messages to it meanwhile were lost, so it sends its open rounds' Broadcasts again.
    Recovered,
    /// §5.2: "if controller also cannot deliver the message, R will be announced as failed" —
    /// the management network could not deliver a message to this host.
    Unreachable(NodeId),
}

/// An output of a role. `M` is its management-network message type ([`Node::Mgmt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<P, E, M = Infallible> {
    /// Transmit `packet` on the given output port.
    Send {
        /// The output port.
        port: PortId,
        /// The packet.
        packet: P,
    },
    /// Report something upward (a delivery, a failure notification, ...).
    Event(E),
    /// Send `msg` on the management network.
    Mgmt {
        /// The addressee.
        to: MgmtDest,
        /// The message.
        msg: M,
    },
}

/// A sans-IO protocol role.
pub trait Node {
    /// The role's packet type.
    type Packet;
    /// What the role reports upward.
    type Event;
    /// What it takes and gives on the management network; [`Infallible`] if nothing.
    type Mgmt;

    /// Feeds one input seen at local time `now`.
    fn handle(&mut self, now: Instant, input: Input<Self::Packet, Self::Mgmt>);

    /// Drains outputs produced by the last mutation; call until `None`.
    fn poll_output(&mut self) -> Option<Output<Self::Packet, Self::Event, Self::Mgmt>>;

    /// The earliest local instant at which `handle(now, Input::Timeout)` is due, if any.
    fn poll_timeout(&self) -> Option<Instant>;
}

impl<P> Input<P, Infallible> {
    /// The same input for a role that has a management network (an input without a management
    /// message is one for any role).
    pub fn widen<M>(self) -> Input<P, M> {
        match self {
            Input::Packet { port, packet } => Input::Packet { port, packet },
            Input::Timeout => Input::Timeout,
            Input::Notice(n) => Input::Notice(n),
        }
    }
}

impl<P, E> Output<P, E, Infallible> {
    /// The same output as one of a role that has a management network.
    pub fn widen<M>(self) -> Output<P, E, M> {
        match self {
            Output::Send { port, packet } => Output::Send { port, packet },
            Output::Event(e) => Output::Event(e),
        }
    }
}
