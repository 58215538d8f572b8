//! Receiving beyond one inbox: both services merged into one order, events, and waiting for
//! activity on any of them.

use super::*;

impl Endpoint {
    /// The next message of either service, in one order across both: (timestamp, sender),
    /// best effort first at a tie. The two services are two total orders, one per queue
    /// (docs/LIVE.md); this merges them for an application that wants one stream. A message is
    /// taken only once the other service's barrier has passed it (nothing lower can come
    /// there any more), so every message waits for the reliable service's commit barrier: the
    /// merged stream is as slow as the reliable one. Waits at most `timeout` (checking every
    /// 0.2 ms). Take messages from the merged stream or from the per-service receives, not
    /// from both.
    ///
    /// # Errors
    /// [`RecvError::Timeout`] if none could be taken in time; [`RecvError::Closed`] once the
    /// endpoint has left and both queues are empty.
    pub fn recv_merged(&self, timeout: Duration) -> Result<Message, RecvError> {
        let until = deadline(timeout);
        loop {
            match self.try_recv_merged() {
                Err(RecvError::Empty) => {}
                r => return r,
            }
            if std::time::Instant::now() >= until {
                return Err(RecvError::Timeout);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// [`Endpoint::recv_merged`] without waiting.
    ///
    /// # Errors
    /// [`RecvError::Empty`] if no message can be taken yet; [`RecvError::Closed`] as
    /// [`Endpoint::recv_merged`].
    pub fn try_recv_merged(&self) -> Result<Message, RecvError> {
        let key = |m: &Message| (m.ts, m.src);
        let be = self.shared.be.peek(key);
        let rel = self.shared.rel.peek(key);
        // Everything of a service below its published barrier is in its queue already.
        let passed = |k: usize, ts: Timestamp| self.shared.published(k).is_some_and(|b| b > ts);
        let take_be = match (be, rel) {
            (Err(()), Err(())) => return Err(RecvError::Closed),
            (Ok(Some(a)), Ok(Some(b))) => a <= b,
            // The other queue is closed and empty: nothing more comes there.
            (Ok(Some(_)), Err(())) => true,
            (Err(()), Ok(Some(_))) => false,
            (Ok(Some(a)), _) => match passed(1, a.0) {
                true => true,
                false => return Err(RecvError::Empty),
            },
            (_, Ok(Some(b))) => match passed(0, b.0) {
                true => false,
                false => return Err(RecvError::Empty),
            },
            _ => return Err(RecvError::Empty),
        };
        match take_be {
            true => self.best_effort().try_recv(),
            false => self.reliable().try_recv(),
        }
    }

    /// The next event, waiting as long as it takes.
    ///
    /// ```no_run
    /// # fn f(e: &onepipe_runtime::endpoint::Endpoint) {
    /// use onepipe_runtime::endpoint::Event;
    /// while let Ok(event) = e.next_event() {
    ///     match event {
    ///         Event::SendFailed { dst, ts, reason } => eprintln!("message {ts} to {dst}: {reason:?}"),
    ///         Event::ProcessFailed { proc, .. } => eprintln!("{proc} failed"),
    ///         _ => {}
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`RecvError::Closed`] once the endpoint has left and the queue is empty.
    pub fn next_event(&self) -> Result<Event, RecvError> {
        self.took(self.shared.events.pop(true, None))
    }

    /// An event the application takes: a held failure notification starts its callback
    /// clock now.
    fn took(&self, e: Result<Event, PopError>) -> Result<Event, RecvError> {
        let e = e?;
        self.shared.took(&e);
        Ok(e)
    }

    /// The next event if one is waiting.
    ///
    /// # Errors
    /// [`RecvError::Empty`] if none is; [`RecvError::Closed`] as [`Endpoint::next_event`].
    pub fn try_next_event(&self) -> Result<Event, RecvError> {
        self.took(self.shared.events.pop(false, None))
    }

    /// The next event, waiting at most `timeout`.
    ///
    /// # Errors
    /// [`RecvError::Timeout`] if none came; [`RecvError::Closed`] as [`Endpoint::next_event`].
    pub fn next_event_timeout(&self, timeout: Duration) -> Result<Event, RecvError> {
        self.took(self.shared.events.pop(false, Some(deadline(timeout))))
    }

    /// A count that goes up whenever something an application may act on happens: a message
    /// queued on any of the three inboxes, an event queued, a barrier published
    /// ([`Endpoint::barrier`], [`Endpoint::commit_barrier`]), the endpoint stopping. Read it
    /// before looking at the inboxes, then [`Endpoint::wait_activity`] with it: a loop over
    /// several inboxes sleeps without polling and misses nothing.
    ///
    /// ```no_run
    /// # fn f(ep: &onepipe_runtime::endpoint::Endpoint) {
    /// use std::time::Duration;
    /// loop {
    ///     let seen = ep.activity();
    ///     let mut busy = false;
    ///     busy |= ep.best_effort().poll(256, |m| { /* ... */ }) > 0;
    ///     busy |= ep.plain().poll(256, |m| { /* ... */ }) > 0;
    ///     if !busy {
    ///         ep.wait_activity(seen, Duration::from_millis(10));
    ///     }
    /// }
    /// # }
    /// ```
    pub fn activity(&self) -> u64 {
        self.shared.activity.load(Ordering::SeqCst)
    }

    /// Sleeps until [`Endpoint::activity`] differs from `seen`, or `timeout` passes, or the
    /// endpoint stops. Returns whether the count moved (or the endpoint stopped).
    pub fn wait_activity(&self, seen: u64, timeout: Duration) -> bool {
        let sh = &self.shared;
        let moved = || sh.activity.load(Ordering::SeqCst) != seen || sh.stop.load(Ordering::SeqCst);
        if moved() {
            return true;
        }
        let until = std::time::Instant::now() + timeout;
        sh.activity_waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = sh.activity_lock.lock().unwrap_or_else(|e| e.into_inner());
        let result = loop {
            if moved() {
                break true;
            }
            let now = std::time::Instant::now();
            if now >= until {
                break false;
            }
            g = sh
                .activity_ready
                .wait_timeout(g, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        drop(g);
        sh.activity_waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }
}
