//! The loop of [`crate::node`]'s contract, written once for every driver.
//!
//! A driver — the simulator's engine, the UDP runtime, a role that wraps a role — gives a
//! [`Node`] its input and carries out what comes back. The order is fixed (node.rs: "the
//! loop"): the mutation, then every output drained in order, then the deadline read for the
//! timer. These functions are that loop; a driver supplies only the *sink*, the per-output
//! work (routing a packet to its link, charging a CPU, queueing a management message), and
//! re-arms its timer with the deadline they return. No driver writes its own `poll_output`
//! loop (`onepipe-lint` fails the suite on one).
//!
//! Two forms, for where the node lives:
//!
//! * [`turn`] — a node held apart from the sink's state (a field beside the sink, a local).
//! * [`turn_in`] and [`drain_in`] — a node inside the driver's own state `C` (the simulator's
//!   `self.proto.switches[si]`, whose sink needs `&mut self`): an accessor finds the node in
//!   `C` for each call into it, and the sink is given `&mut C` with each output, so neither
//!   borrow outlives its call.
//!
//! [`drain_in`] is step 2 alone, for a driver that reads the deadline itself: the simulator's
//! engine re-arms every role through its `Protocol`, whose deadline for a host also folds in
//! its applications' timers.
//!
//! With [`turn_in`] and [`drain_in`] the sink may answer an output with an input to the same
//! node: an application's send ([`crate::app::AppNode`]) is answered with its timestamp before
//! the application is asked for its next one, as the simulator and the application host do.
//! The loop goes on draining, so what the answer produced comes out in the same turn. The node
//! may be a trait object (`N: ?Sized`): the simulator holds a run's applications, of one type
//! per run, behind [`crate::app::DynAppNode`].
//!
//! The functions are generic and inlined: on the simulator's hot path they cost what the
//! hand-written loop did (no boxing, no allocation). They are not a scheduler: which input comes
//! next, and when, is the driver's.

use crate::node::{Input, Node, Output};
use crate::time::Instant;

/// An input of node `N`, with the local time it is seen at.
pub type Timed<N> = (Instant, Input<<N as Node>::Packet, <N as Node>::Mgmt>);

/// An output of node `N`.
pub type NodeOutput<N> = Output<<N as Node>::Packet, <N as Node>::Event, <N as Node>::Mgmt>;

/// What one turn of the loop did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// How many outputs the sink was given.
    pub outputs: usize,
    /// The node's [`Node::poll_timeout`] after them: the deadline to arm its timer for,
    /// replacing any earlier one.
    pub timeout: Option<Instant>,
}

/// One turn of the loop on a node held apart from the sink: `handle(now, input)` when there is
/// an input (without one, the outputs of a mutation made otherwise, e.g. an application
/// command), every output to `sink` in order, then the deadline.
#[inline]
pub fn turn<N: Node + ?Sized>(
    node: &mut N,
    input: Option<Timed<N>>,
    mut sink: impl FnMut(NodeOutput<N>),
) -> Turn {
    if let Some((now, input)) = input {
        node.handle(now, input);
    }
    let mut outputs = 0;
    while let Some(o) = node.poll_output() {
        outputs += 1;
        sink(o);
    }
    Turn {
        outputs,
        timeout: node.poll_timeout(),
    }
}

/// [`turn`] for a node inside the driver's state `ctx`: `node` finds it there for each call,
/// and `sink` is given `ctx` with each output.
#[inline]
pub fn turn_in<C, N: Node + ?Sized>(
    ctx: &mut C,
    node: impl Fn(&mut C) -> &mut N,
    input: Option<Timed<N>>,
    sink: impl FnMut(&mut C, NodeOutput<N>),
) -> Turn {
    if let Some((now, input)) = input {
        node(ctx).handle(now, input);
    }
    let outputs = drain_in(ctx, &node, sink);
    Turn {
        outputs,
        timeout: node(ctx).poll_timeout(),
    }
}

/// Step 2 alone for a node inside `ctx`: every output to `sink` in order. Returns how many.
/// The caller reads the deadline and re-arms.
#[inline]
pub fn drain_in<C, N: Node + ?Sized>(
    ctx: &mut C,
    node: impl Fn(&mut C) -> &mut N,
    mut sink: impl FnMut(&mut C, NodeOutput<N>),
) -> usize {
    let mut outputs = 0;
    while let Some(o) = node(ctx).poll_output() {
        outputs += 1;
        sink(ctx, o);
    }
    outputs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::PortId;

    /// A node that echoes each packet twice and wants a timeout 10 after its last input.
    #[derive(Default)]
    struct Echo {
        out: std::collections::VecDeque<u32>,
        last: Option<Instant>,
    }

    impl Node for Echo {
        type Packet = u32;
        type Event = ();
        type Mgmt = std::convert::Infallible;

        fn handle(&mut self, now: Instant, input: Input<u32>) {
            self.last = Some(now);
            if let Input::Packet { packet, .. } = input {
                self.out.extend([packet, packet + 1]);
            }
        }

        fn poll_output(&mut self) -> Option<Output<u32, ()>> {
            let packet = self.out.pop_front()?;
            Some(Output::Send {
                port: PortId(0),
                packet,
            })
        }

        fn poll_timeout(&self) -> Option<Instant> {
            self.last.map(|t| Instant(t.0 + 10))
        }
    }

    fn packet(p: u32) -> Input<u32> {
        Input::Packet {
            port: PortId(0),
            packet: p,
        }
    }

    fn sent(o: Output<u32, ()>) -> u32 {
        match o {
            Output::Send { packet, .. } => packet,
            Output::Event(()) => unreachable!("Echo reports nothing"),
        }
    }

    #[test]
    fn turn_handles_drains_in_order_then_reads_the_deadline() {
        let mut n = Echo::default();
        let mut got = Vec::new();
        let t = turn(&mut n, Some((Instant(5), packet(7))), |o| got.push(sent(o)));
        assert_eq!(got, [7, 8]);
        assert_eq!(
            t,
            Turn {
                outputs: 2,
                timeout: Some(Instant(15))
            }
        );
        let t = turn(&mut n, None, |_| unreachable!("nothing left"));
        assert_eq!(t.outputs, 0);
        assert_eq!(t.timeout, Some(Instant(15)), "no input, no new deadline");
    }

    #[test]
    fn turn_in_reaches_the_node_inside_the_sinks_state() {
        struct Driver {
            nodes: Vec<Echo>,
            wire: Vec<u32>,
        }
        let mut d = Driver {
            nodes: vec![Echo::default(), Echo::default()],
            wire: Vec::new(),
        };
        let t = turn_in(
            &mut d,
            |d| &mut d.nodes[1],
            Some((Instant(1), packet(3))),
            |d, o| d.wire.push(sent(o)),
        );
        assert_eq!((t.outputs, t.timeout), (2, Some(Instant(11))));
        assert_eq!(d.wire, [3, 4]);
        d.nodes[0].handle(Instant(2), packet(9));
        let n = drain_in(&mut d, |d| &mut d.nodes[0], |d, o| d.wire.push(sent(o)));
        assert_eq!(n, 2);
        assert_eq!(d.wire, [3, 4, 9, 10]);
    }
}
