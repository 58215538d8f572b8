//! Optimistic delivery at an endpoint (PLATO's three hooks on 1Pipe, docs/PLATO.md): with
//! [`JoinOptions::optimistic`] set, a message of either service is also handed over the moment
//! it is whole, before its barrier passes it ([`Optimistic::Deliver`]), then either confirmed
//! ([`Optimistic::Confirm`]) just before its final delivery in its service's inbox, or revoked
//! ([`Optimistic::Revoke`]) when the barrier puts another message first — in which case it is
//! handed over again, in its place — or, for a reliable message, when §5.2 discards it (its
//! sender failed, or its scattering was recalled): then it never comes.
//!
//! The final, ordered streams ([`Endpoint::best_effort`], [`Endpoint::reliable`]) are unchanged
//! and stay the truth: an application that uses optimistic deliveries rolls back what it did
//! with one that is revoked.
//!
//! Bounded like every inbox: the optimistic queue holds `4 ×`
//! [`JoinOptions::recv_queue_len_max`] hooks, and while it is fuller than that allows for the
//! best-effort room the role is granted shrinks with it (a best-effort message not read
//! optimistically is refused with a `BufferFull` NAK, as one the inbox has no room for); reliable
//! arrivals are bounded by the role's reorder buffer. Hooks the queue cannot take wait in the I/O
//! thread: normally a message's `Confirm` is in this queue before the message is in its inbox.

use super::*;

/// Hooks queued per message the best-effort room admits: its `Deliver` and `Confirm`, and a
/// revoke and a second delivery.
pub(super) const HOOKS_PER_MESSAGE: usize = 4;

/// One of PLATO's hooks (`optdeliver`, `revoke`, `confirm`), as 1Pipe's optimistic delivery
/// reports it. A message is named by its (timestamp, sender, PSN), as in [`Message`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Optimistic {
    /// `optdeliver`: the message arrived and the predictor says it is in order. It is
    /// tentative: its `barrier` and `delivered_ts` are 0 (no barrier released it).
    Deliver {
        /// The message.
        message: Message,
        /// Tm = arrival + Δ: a revoke before then is free (PLATO §4.1); after it, a use of
        /// the message is rolled back.
        usable_at: std::time::Instant,
    },
    /// `revoke`: the message handed over optimistically is taken back: it comes again, in its
    /// place — or, for a reliable message §5.2 discarded (its sender failed, or its scattering
    /// was recalled), never.
    Revoke {
        /// Its timestamp.
        ts: Timestamp,
        /// Its sender.
        src: ProcId,
        /// Its PSN (per service).
        psn: u32,
        /// Of the reliable service.
        reliable: bool,
        /// At or after Tm: the application may have used it (a rollback).
        rollback: bool,
    },
    /// `confirm`: the message handed over optimistically is final; its delivery in its
    /// service's inbox follows.
    Confirm {
        /// Its timestamp.
        ts: Timestamp,
        /// Its sender.
        src: ProcId,
        /// Its PSN (per service).
        psn: u32,
        /// Of the reliable service.
        reliable: bool,
    },
}

impl Optimistic {
    /// The hook of a role's event, if it is one; `now` is the role's clock.
    pub(super) fn of(e: HostEvent, now: Instant) -> Result<Optimistic, HostEvent> {
        Ok(match e {
            HostEvent::OptDeliver {
                delivery,
                usable_at,
            } => {
                let wait = Duration::from_nanos(usable_at.0.saturating_sub(now.0));
                Optimistic::Deliver {
                    message: Message::of(delivery, true),
                    usable_at: std::time::Instant::now() + wait,
                }
            }
            HostEvent::Revoke {
                key,
                reliable,
                rollback,
                ..
            } => Optimistic::Revoke {
                ts: key.ts,
                src: key.src,
                psn: key.psn.0,
                reliable,
                rollback,
            },
            HostEvent::Confirm { key, reliable, .. } => Optimistic::Confirm {
                ts: key.ts,
                src: key.src,
                psn: key.psn.0,
                reliable,
            },
            other => return Err(other),
        })
    }
}

impl Endpoint {
    /// The next optimistic hook, waiting at most `timeout` (`Duration::MAX`: as long as it
    /// takes). Only an endpoint joined with [`JoinOptions::optimistic`] has any.
    ///
    /// ```no_run
    /// # fn f(ep: &onepipe_runtime::endpoint::Endpoint) {
    /// use onepipe_runtime::endpoint::Optimistic;
    /// use std::time::Duration;
    /// while let Ok(hook) = ep.recv_optimistic(Duration::from_millis(10)) {
    ///     match hook {
    ///         Optimistic::Deliver { message, .. } => { /* act on it, tentatively */ }
    ///         Optimistic::Revoke { ts, src, .. } => { /* undo what was done with it */ }
    ///         Optimistic::Confirm { .. } => { /* final: nothing to undo any more */ }
    ///         _ => {}
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`RecvError::Timeout`] if none came; [`RecvError::Closed`] once the endpoint has left
    /// and the queue is empty.
    pub fn recv_optimistic(&self, timeout: Duration) -> Result<Optimistic, RecvError> {
        let until = (timeout != Duration::MAX).then(|| deadline(timeout));
        self.took_optimistic(self.shared.opt.pop(until.is_none(), until))
    }

    /// The next optimistic hook if one is waiting.
    ///
    /// # Errors
    /// [`RecvError::Empty`] if none is; [`RecvError::Closed`] as [`Endpoint::recv_optimistic`].
    pub fn try_recv_optimistic(&self) -> Result<Optimistic, RecvError> {
        self.took_optimistic(self.shared.opt.pop(false, None))
    }

    /// After a pop: the I/O thread is woken when hooks or the room wait for the queue.
    fn took_optimistic(&self, r: Result<Optimistic, PopError>) -> Result<Optimistic, RecvError> {
        let sh = &self.shared;
        let q = &sh.opt;
        if sh.be_starved.load(Ordering::Relaxed) && q.len() <= q.len_max() / 2 {
            sh.wake();
        }
        Ok(r?)
    }
}
