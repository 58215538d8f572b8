//! [`AppHost`]: runs a sans-IO application ([`onepipe_proto::app::App`]) on a live [`Endpoint`] — the
//! live counterpart of the simulator's application driver (`onepipe_sim::onepipe::apps`).
//!
//! The application is held as an [`AppNode`] and driven by the loop every role is driven by
//! ([`onepipe_proto::drive::turn_in`]): each input is handed in, then the sends it asked for
//! are carried out (step 5) before the next input, each answered as soon as it is known.
//!
//! One [`AppHost::turn`] takes everything the endpoint has for the application and feeds it in:
//!
//! 1. **Reliable deliveries and the commit barrier.** The commit barrier is read *before* the
//!    reliable queue is emptied: every reliable message below it was in the queue then, so once
//!    the queue has been read the application may be told `CommitReleased` with it (read after,
//!    a message queued in between would come after its own barrier).
//! 2. Best-effort deliveries, then plain ones ([`Endpoint::plain`]: messages the application
//!    sent unordered, delivered on arrival), each as `AppInput::Deliver` with `reliable` false —
//!    what the simulator hands an application for a plain arrival.
//! 3. Events, read after the deliveries but handed over first (a reply can only be queued after
//!    the request it answers was stamped, so the stamp is known when the reply is read):
//!    `SendFailed` (a best-effort loss, §2.1 `onepipe_send_fail_callback`), `ProcessFailed`
//!    with [`FailReason::Failed`] (the §5.2 callback, with the failure timestamp; the round's
//!    callback handle is released once the application has taken it), `ReliableSent` (the stamp of a reliable send: `Sent`), `ReliableAborted` (`Refused`).
//! 4. The application's timer, when due.
//! 5. Its sends, after each input (and once more at the end of the turn, for what the
//!    application asked for between turns, [`AppHost::app_mut`]): best effort is stamped at
//!    once (`Sent`); reliable waits for `ReliableSent`;
//!    an unordered one ([`onepipe_proto::app::AppSend::ordered`] false, best effort whatever
//!    `reliable` says) goes by [`Endpoint::send_plain`] and is `Sent` at once with the
//!    endpoint's timestamp; a refused send (a full buffer, a failed destination) is `Refused`.
//!    A plain message that is lost is a `SendFailed`, as a best-effort one is.
//!
//! The endpoint must be joined with [`crate::endpoint::JoinOptions::report_reliable_sent`]
//! when the application sends reliably, or it never hears its reliable sends' timestamps.
//! Local time is `CLOCK_MONOTONIC` ([`crate::clock::monotonic_ns`]).

use crate::clock::monotonic_ns;
use crate::endpoint::{Endpoint, Event, FailReason, Message, SendError, SendHandle};
use onepipe_proto::app::{App, AppIo, AppNode, AppSend};
use onepipe_proto::{drive, Input, Instant, Node, Timestamp};
use std::collections::HashMap;
use std::time::Duration;

/// Messages taken from a queue per poll.
const POLL_LEN: usize = 4096;

/// What an [`AppHost`] counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppHostStats {
    /// Messages handed to the application, by service.
    pub delivered_be: u64,
    /// See `delivered_be`.
    pub delivered_reliable: u64,
    /// Plain messages handed to the application (delivered on arrival).
    pub delivered_plain: u64,
    /// Unordered sends the application asked for, sent plain.
    pub sent_plain: u64,
    /// Sends the endpoint refused (`Refused` to the application), by why.
    pub refused_full: u64,
    /// See `refused_full`.
    pub refused_other: u64,
    /// Best-effort losses reported.
    pub send_failed: u64,
    /// Failed processes reported (§5.2 callbacks).
    pub proc_failed: u64,
}

/// An application on an endpoint.
pub struct AppHost<'e, A: App> {
    ep: &'e Endpoint,
    app: AppNode<A>,
    /// Reliable sends not yet stamped: handle → the application's tag.
    tags: HashMap<SendHandle, u64>,
    released: Option<Timestamp>,
    stats: AppHostStats,
}

impl<'e, A: App> AppHost<'e, A> {
    /// `app` on `ep`.
    pub fn new(ep: &'e Endpoint, app: A) -> AppHost<'e, A> {
        AppHost {
            ep,
            app: AppNode::new(app),
            tags: HashMap::new(),
            released: None,
            stats: AppHostStats::default(),
        }
    }

    /// The application.
    pub fn app(&self) -> &A {
        self.app.get_ref()
    }

    /// The application, to act on it between turns (then [`AppHost::turn`] carries out what it
    /// asked for).
    pub fn app_mut(&mut self) -> &mut A {
        self.app.get_mut()
    }

    /// Hands the application the time now, as its timer's input whether or not that is due
    /// (an application's clock moves with its inputs), then carries out what it sends: before
    /// a command given through [`AppHost::app_mut`] that reads the application's clock.
    pub fn tell_time(&mut self) {
        self.feed(Some(Input::Timeout));
    }

    /// The counters.
    pub fn stats(&self) -> &AppHostStats {
        &self.stats
    }

    /// Reliable sends still waiting for their stamp.
    pub fn unstamped(&self) -> usize {
        self.tags.len()
    }

    /// The application back.
    pub fn into_app(self) -> A {
        self.app.into_inner()
    }

    fn now() -> Instant {
        Instant(monotonic_ns())
    }

    /// Hands the application `input` (`None`: nothing, only what it asked for since), then
    /// carries out its sends. Returns whether it sent anything.
    fn feed(&mut self, input: Option<Input<AppIo>>) -> bool {
        let input = input.map(|i| (Self::now(), i));
        let t = drive::turn_in(
            self,
            |h| &mut h.app,
            input,
            |h, o| {
                h.send(AppSend::from_output(o));
            },
        );
        t.outputs > 0
    }

    fn deliver(&mut self, m: Message) {
        let input = AppIo::Deliver {
            src: m.src,
            ts: m.ts,
            reliable: m.reliable,
            payload: m.payload,
        };
        self.feed(Some(input.input()));
    }

    /// One turn (the module's steps 1–5). Returns whether anything happened.
    pub fn turn(&mut self) -> bool {
        // 1. The barrier first, then the queue it covers; then best effort.
        let barrier = self.ep.commit_barrier();
        let mut reliable = Vec::new();
        while self.ep.reliable().poll(POLL_LEN, |m| reliable.push(m)) == POLL_LEN {}
        let mut be = Vec::new();
        self.ep.best_effort().poll(POLL_LEN, |m| be.push(m));
        let mut plain = Vec::new();
        self.ep.plain().poll(POLL_LEN, |m| plain.push(m));
        // 3. The events, taken after the deliveries and handed over before them: a reply to
        // a reliable send can only have been queued after the send was stamped, so its
        // `ReliableSent` is among these — the application knows the timestamp it answers.
        let mut busy = !reliable.is_empty() || !be.is_empty() || !plain.is_empty();
        while let Ok(e) = self.ep.try_next_event() {
            busy = true;
            self.event(e);
        }
        self.stats.delivered_reliable += reliable.len() as u64;
        for m in reliable {
            self.deliver(m);
        }
        if let Some(b) = barrier.filter(|&b| self.released.is_none_or(|r| r < b)) {
            self.released = Some(b);
            self.feed(Some(AppIo::CommitReleased { ts: b }.input()));
            busy = true;
        }
        // 2. Best effort.
        self.stats.delivered_be += be.len() as u64;
        for m in be {
            self.deliver(m);
        }
        self.stats.delivered_plain += plain.len() as u64;
        for m in plain {
            debug_assert!(!m.ordered && !m.reliable);
            self.deliver(m);
        }
        // 4. The timer.
        if self.app.poll_timeout().is_some_and(|t| t <= Self::now()) {
            self.feed(Some(Input::Timeout));
            busy = true;
        }
        // 5. What the application asked for between turns.
        busy | self.feed(None)
    }

    fn event(&mut self, e: Event) {
        let input = match e {
            Event::SendFailed { dst, ts, .. } => {
                self.stats.send_failed += 1;
                AppIo::SendFailed { dst, ts }
            }
            Event::ProcessFailed {
                proc,
                ts,
                reason: FailReason::Failed,
                callback,
            } => {
                self.stats.proc_failed += 1;
                self.feed(Some(AppIo::ProcFailed { proc, ts }.input()));
                // §5.2: the application has acted on it; the round may resume here.
                drop(callback);
                return;
            }
            Event::ReliableSent { handle, ts } => match self.tags.remove(&handle) {
                Some(tag) => AppIo::Sent { tag, ts },
                None => return,
            },
            Event::ReliableAborted { handle } => match self.tags.remove(&handle) {
                Some(tag) => AppIo::Refused { tag },
                None => return,
            },
            _ => return,
        };
        self.feed(Some(input.input()));
    }

    /// Carries out one send of the application's, and answers it at once when its stamp or
    /// refusal is known (the loop in [`AppHost::feed`] then drains what the answer produced).
    fn send(&mut self, s: AppSend) {
        // An unordered send is best effort whatever `reliable` says (`AppSend::ordered`).
        let answer = if !s.ordered {
            self.stats.sent_plain += 1;
            match self.ep.send_plain(&s.parts) {
                Ok(ts) => Some(AppIo::Sent { tag: s.tag, ts }),
                Err(e) => Some(self.refused(s.tag, &e)),
            }
        } else if s.reliable {
            match self.ep.send_reliable(&s.parts) {
                Ok(handle) => {
                    self.tags.insert(handle, s.tag);
                    None
                }
                Err(e) => Some(self.refused(s.tag, &e)),
            }
        } else {
            match self.ep.send_unreliable(&s.parts) {
                Ok(ts) => Some(AppIo::Sent { tag: s.tag, ts }),
                Err(e) => Some(self.refused(s.tag, &e)),
            }
        };
        if let Some(answer) = answer {
            self.app.handle(Self::now(), answer.input());
        }
    }

    fn refused(&mut self, tag: u64, e: &SendError) -> AppIo {
        match e {
            SendError::Full => self.stats.refused_full += 1,
            _ => self.stats.refused_other += 1,
        }
        AppIo::Refused { tag }
    }

    /// Turns until `done(app)` holds or `timeout` passes; between idle turns it sleeps until
    /// the endpoint has something for the application, its timer is due, or `idle_max` passes
    /// ([`AppHost::wait`]). Returns whether `done` held.
    pub fn run_until(
        &mut self,
        timeout: Duration,
        idle_max: Duration,
        mut done: impl FnMut(&A) -> bool,
    ) -> bool {
        let until = monotonic_ns().saturating_add(timeout.as_nanos() as u64);
        loop {
            if done(self.app.get_ref()) {
                return true;
            }
            let now = monotonic_ns();
            if now >= until {
                return false;
            }
            let seen = self.activity();
            if !self.turn() {
                self.wait(seen, idle_max.min(Duration::from_nanos(until - now)));
            }
        }
    }

    /// The endpoint's activity count ([`Endpoint::activity`]): read it before
    /// [`AppHost::turn`], and give it to [`AppHost::wait`] when the turn did nothing.
    pub fn activity(&self) -> u64 {
        self.ep.activity()
    }

    /// Sleeps, without polling, until the endpoint has something for the application since
    /// `seen` (a message, an event, a barrier: [`Endpoint::wait_activity`]), the application's
    /// timer is due, or `max` passes.
    pub fn wait(&self, seen: u64, max: Duration) {
        let mut wait = max;
        if let Some(t) = self.app.poll_timeout() {
            wait = wait.min(Duration::from_nanos(t.saturating_since(Self::now())));
        }
        if !wait.is_zero() {
            self.ep.wait_activity(seen, wait);
        }
    }
}
