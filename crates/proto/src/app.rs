//! The application contract: what the ordering layer hands an application process
//! ([`AppInput`]), what it asks to send ([`AppSend`]), and the sans-IO [`App`] role itself.
//!
//! It lives here, beside [`crate::node::Node`], so that every driver — the simulator's hosts and
//! the live runtime's application host — drives applications without depending on the
//! applications crate (`onepipe-apps` re-exports these). The driving contract mirrors `Node`'s:
//! feed one input with [`App::handle`], drain [`App::poll_send`] until `None`, re-arm from
//! [`App::poll_timeout`].

use bytes::Bytes;

use crate::{Instant, ProcId, Timestamp};

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
