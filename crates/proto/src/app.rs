//! The application contract: what the ordering layer hands an application process
//! ([`AppInput`]), what it asks to send ([`AppSend`]), the sans-IO [`App`] an application is
//! written against, and [`AppNode`], the [`Node`] every driver runs it as.
//!
//! It lives here, beside [`crate::node::Node`], so that every driver — the simulator's hosts and
//! the live runtime's application host — drives applications without depending on the
//! applications crate (`onepipe-apps` re-exports these).
//!
//! **Two faces.** An application's author implements [`App`]: typed inputs, payloads borrowed,
//! one `handle` per input, `poll_send` until `None`, `poll_timeout`. A driver never calls `App`:
//! it wraps the application in an [`AppNode`] and runs that as any other role, by the loop of
//! [`crate::drive`] (issue 38, item 1: one contract). Code inside `onepipe-apps` may call `App`
//! directly — its scripted unit tests do (`repl::chain`'s, `kv::nontx`'s), as would an
//! application composed of applications: that is the application's own code, not a driver's,
//! and `onepipe-lint` checks only the driver crates.

use bytes::Bytes;
use std::convert::Infallible;

use crate::node::{Input, Node, Output};
use crate::{Instant, PortId, ProcId, Timestamp};

/// What the ordering layer hands an application process. Exhaustive on purpose: an input added
/// here must be handled by every application (the ones in `onepipe-apps` match it in full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl AppSend {
    /// The send an [`AppNode`]'s output carries: each of its outputs is one, on [`HOST_PORT`].
    pub fn from_output(o: Output<AppIo, Infallible>) -> AppSend {
        match o {
            Output::Send {
                port,
                packet: AppIo::Send(s),
            } if port == HOST_PORT => s,
            Output::Send { port, packet } => {
                unreachable!(
                    "an AppNode outputs only sends on its host port, not {packet:?} on {port}"
                )
            }
            Output::Event(e) => match e {},
            Output::Mgmt { msg, .. } => match msg {},
        }
    }
}

/// An application process, sans-IO: what an application's author implements. Drivers run it as
/// an [`AppNode`].
pub trait App {
    /// Feeds one input seen at local time `now`. Never panics on any payload: a malformed
    /// message is dropped and counted.
    fn handle(&mut self, now: Instant, input: AppInput<'_>);
    /// The next send the application asks for; call until `None` after every input.
    fn poll_send(&mut self) -> Option<AppSend>;
    /// The earliest local instant at which `handle(now, AppInput::Timeout)` is due, if any.
    fn poll_timeout(&self) -> Option<Instant>;
}

/// `App` for a boxed application, so a driver may hold one chosen at run time
/// (`AppNode<Box<dyn TxnApp>>`).
impl<A: App + ?Sized> App for Box<A> {
    fn handle(&mut self, now: Instant, input: AppInput<'_>) {
        (**self).handle(now, input);
    }
    fn poll_send(&mut self) -> Option<AppSend> {
        (**self).poll_send()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
}

/// The one port of an [`AppNode`]: the host interface, both directions.
pub const HOST_PORT: PortId = PortId(0);

/// One packet on an [`AppNode`]'s [`HOST_PORT`]: an input of the host interface (the owned form
/// of [`AppInput`] without its timer, which is [`Input::Timeout`]), or a send the application
/// asks for (only ever an output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppIo {
    /// [`AppInput::Deliver`].
    Deliver {
        /// Its sender.
        src: ProcId,
        /// Its timestamp.
        ts: Timestamp,
        /// It came by the reliable service.
        reliable: bool,
        /// Its payload.
        payload: Bytes,
    },
    /// [`AppInput::Sent`].
    Sent {
        /// The send's tag.
        tag: u64,
        /// Its timestamp.
        ts: Timestamp,
    },
    /// [`AppInput::SendFailed`].
    SendFailed {
        /// The receiver that did not get it.
        dst: ProcId,
        /// The message's timestamp.
        ts: Timestamp,
    },
    /// [`AppInput::Refused`].
    Refused {
        /// The send's tag.
        tag: u64,
    },
    /// [`AppInput::CommitReleased`].
    CommitReleased {
        /// The barrier.
        ts: Timestamp,
    },
    /// [`AppInput::ProcFailed`].
    ProcFailed {
        /// The failed process.
        proc: ProcId,
        /// Its failure timestamp.
        ts: Timestamp,
    },
    /// What the application asks to send ([`App::poll_send`]): an output, never an input.
    Send(AppSend),
}

impl AppIo {
    /// The application's input this packet is, borrowing its payload; `None` for a
    /// [`AppIo::Send`], which is not an input.
    fn as_input(&self) -> Option<AppInput<'_>> {
        Some(match *self {
            AppIo::Deliver {
                src,
                ts,
                reliable,
                ref payload,
            } => AppInput::Deliver {
                src,
                ts,
                reliable,
                payload,
            },
            AppIo::Sent { tag, ts } => AppInput::Sent { tag, ts },
            AppIo::SendFailed { dst, ts } => AppInput::SendFailed { dst, ts },
            AppIo::Refused { tag } => AppInput::Refused { tag },
            AppIo::CommitReleased { ts } => AppInput::CommitReleased { ts },
            AppIo::ProcFailed { proc, ts } => AppInput::ProcFailed { proc, ts },
            AppIo::Send(_) => return None,
        })
    }

    /// An input on the host port, for a driver: `Input::Packet { port: HOST_PORT, packet }`.
    pub fn input(self) -> Input<AppIo> {
        Input::Packet {
            port: HOST_PORT,
            packet: self,
        }
    }
}

/// An application as a [`Node`]: what every driver holds and runs with [`crate::drive`]
/// (issue 38, item 1: one contract).
///
/// Inputs are [`AppIo`] packets on [`HOST_PORT`] and [`Input::Timeout`]; each send the
/// application asks for is an `Output::Send { port: HOST_PORT, packet: AppIo::Send(..) }`. An
/// `AppIo::Send` fed in, or a packet on another port, is dropped and counted
/// ([`AppNode::dropped`]), never a panic; a notice means nothing to an application and is
/// ignored.
///
/// `Node` has one packet type for both directions, while the host interface has different
/// things going in (deliveries, stamps, failures) and coming out (sends): [`AppIo`] holds
/// both, and the price is the `Send` input that cannot happen and must be counted. An
/// application is still written against [`App`], with typed inputs and borrowed payloads; the
/// node only converts (the payload is borrowed from the packet, never copied).
///
/// A driver may answer a send before draining the next one: feeding `AppIo::Sent` (or
/// `Refused`) for it from the sink of [`crate::drive::drain_in`] or [`crate::drive::turn_in`]
/// gives the application its send's stamp before it is asked for its next send, and the loop
/// drains what the answer produced in the same turn.
#[derive(Debug)]
pub struct AppNode<A> {
    app: A,
    dropped: u64,
}

/// What a driver holding applications of several types behind one interface calls: any
/// [`AppNode`].
pub type DynAppNode = dyn Node<Packet = AppIo, Event = Infallible, Mgmt = Infallible>;

impl<A: App> AppNode<A> {
    /// `app` as a node.
    pub fn new(app: A) -> AppNode<A> {
        AppNode { app, dropped: 0 }
    }

    /// The application, for reads (a checker's records, statistics).
    pub fn get_ref(&self) -> &A {
        &self.app
    }

    /// The application, for what is not an input of the host interface: a checker taking the
    /// records it keeps of what it committed, a library's command (`onepipe::kv`'s `submit`).
    /// A driver then drains the node ([`crate::drive`]) to carry out what the command asked.
    pub fn get_mut(&mut self) -> &mut A {
        &mut self.app
    }

    /// The application back.
    pub fn into_inner(self) -> A {
        self.app
    }

    /// Inputs dropped: `AppIo::Send` fed in, or a packet on a port other than [`HOST_PORT`].
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl<A: App> Node for AppNode<A> {
    type Packet = AppIo;
    type Event = Infallible;
    type Mgmt = Infallible;

    fn handle(&mut self, now: Instant, input: Input<AppIo>) {
        match input {
            Input::Packet { port, packet } if port == HOST_PORT => match packet.as_input() {
                Some(input) => self.app.handle(now, input),
                None => self.dropped += 1,
            },
            Input::Packet { .. } => self.dropped += 1,
            Input::Timeout => self.app.handle(now, AppInput::Timeout),
            Input::Notice(_) => {}
            Input::Mgmt(m) => match m {},
        }
    }

    fn poll_output(&mut self) -> Option<Output<AppIo, Infallible>> {
        let s = self.app.poll_send()?;
        Some(Output::Send {
            port: HOST_PORT,
            packet: AppIo::Send(s),
        })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.app.poll_timeout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drive;

    /// Records its inputs; answers every delivery with one send to its sender, and wants a
    /// timeout 5 after its last input.
    #[derive(Default)]
    struct Echo {
        seen: Vec<String>,
        out: Vec<AppSend>,
        last: Option<Instant>,
    }

    impl App for Echo {
        fn handle(&mut self, now: Instant, input: AppInput<'_>) {
            self.last = Some(now);
            self.seen.push(format!("{input:?}"));
            if let AppInput::Deliver { src, payload, .. } = input {
                self.out.push(AppSend {
                    tag: self.seen.len() as u64,
                    reliable: false,
                    ordered: true,
                    parts: vec![(src, Bytes::copy_from_slice(payload))],
                });
            }
        }
        fn poll_send(&mut self) -> Option<AppSend> {
            self.out.pop()
        }
        fn poll_timeout(&self) -> Option<Instant> {
            self.last.map(|t| Instant(t.0 + 5))
        }
    }

    fn deliver(src: u32, payload: &'static [u8]) -> Input<AppIo> {
        AppIo::Deliver {
            src: ProcId(src),
            ts: Timestamp::new(7),
            reliable: true,
            payload: Bytes::from_static(payload),
        }
        .input()
    }

    #[test]
    fn inputs_reach_the_app_and_its_sends_come_out_on_the_host_port() {
        let mut n = AppNode::new(Echo::default());
        let mut out = Vec::new();
        let t = drive::turn(&mut n, Some((Instant(1), deliver(3, b"hi"))), |o| {
            out.push(o)
        });
        assert_eq!(t.timeout, Some(Instant(6)));
        let [Output::Send {
            port: HOST_PORT,
            packet: AppIo::Send(s),
        }] = &out[..]
        else {
            panic!("one send on the host port, got {out:?}");
        };
        assert_eq!(s.parts, [(ProcId(3), Bytes::from_static(b"hi"))]);
        drive::turn(&mut n, Some((Instant(6), Input::Timeout)), |_| {
            unreachable!("a timeout sends nothing")
        });
        let seen = &n.get_ref().seen;
        assert_eq!(seen.len(), 2);
        assert!(seen[0].starts_with("Deliver") && seen[1] == "Timeout");
        assert_eq!(n.dropped(), 0);
    }

    #[test]
    fn a_send_answered_from_the_sink_is_heard_before_the_next_send() {
        struct Driver {
            node: AppNode<Echo>,
            /// Each send's tag, with how many inputs the application had heard when it came.
            wire: Vec<(u64, usize)>,
        }
        let mut d = Driver {
            node: AppNode::new(Echo::default()),
            wire: Vec::new(),
        };
        d.node.handle(Instant(1), deliver(1, b"a"));
        d.node.handle(Instant(1), deliver(2, b"b"));
        let n = drive::drain_in(
            &mut d,
            |d| &mut d.node,
            |d, o| {
                let s = AppSend::from_output(o);
                d.wire.push((s.tag, d.node.get_ref().seen.len()));
                let sent = AppIo::Sent {
                    tag: s.tag,
                    ts: Timestamp::new(9),
                };
                d.node.handle(Instant(2), sent.input());
            },
        );
        assert_eq!(n, 2);
        // The second send came after the first one's stamp was heard.
        assert_eq!(d.wire, [(2, 2), (1, 3)]);
        let seen = &d.node.get_ref().seen;
        assert!(seen[2].starts_with("Sent { tag: 2") && seen[3].starts_with("Sent { tag: 1"));
    }

    #[test]
    fn a_send_fed_in_or_a_packet_on_another_port_is_dropped_and_counted() {
        let mut n = AppNode::new(Echo::default());
        let send = AppIo::Send(AppSend {
            tag: 1,
            reliable: true,
            ordered: true,
            parts: Vec::new(),
        });
        n.handle(Instant(1), send.input());
        n.handle(
            Instant(1),
            Input::Packet {
                port: PortId(1),
                packet: AppIo::Refused { tag: 1 },
            },
        );
        n.handle(Instant(1), Input::Notice(crate::node::Notice::LinkUp));
        assert_eq!(n.dropped(), 2);
        assert!(
            n.get_ref().seen.is_empty(),
            "the application heard none of them"
        );
        assert!(n.poll_output().is_none());
    }
}
