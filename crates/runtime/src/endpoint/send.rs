//! Sending: the three services' scatterings ([`Outgoing`]), broadcasts to the view, and
//! waiting for room in a full send buffer (§6.1 flow control).

use super::*;

/// One message of a scattering: where it goes and what it says. A send takes any iterator of
/// these — `(ProcId, B)` with `B: Into<Bytes>` (`&str`, `String`, `Vec<u8>`, `Bytes`…), or
/// `&(ProcId, Bytes)`, so a slice or an array of pairs works too.
///
/// ```no_run
/// # fn f(e: &onepipe_runtime::endpoint::Endpoint) {
/// use onepipe_proto::ProcId;
/// // Different messages to different processes, one timestamp.
/// e.send_unreliable([(ProcId(1), "x = 1"), (ProcId(2), "y = 2")]).unwrap();
/// // The same message to every member but this one.
/// let me = e.proc();
/// e.send_reliable(e.view().members.into_iter().filter(|&p| p != me).map(|p| (p, "hi"))).unwrap();
/// # }
/// ```
pub trait Outgoing {
    /// The destination and the payload.
    fn into_message(self) -> (ProcId, Bytes);
}

impl<B: Into<Bytes>> Outgoing for (ProcId, B) {
    fn into_message(self) -> (ProcId, Bytes) {
        (self.0, self.1.into())
    }
}

impl Outgoing for &(ProcId, Bytes) {
    fn into_message(self) -> (ProcId, Bytes) {
        (self.0, self.1.clone())
    }
}

impl Endpoint {
    /// Sends `payload` to every member of the current view (this process included) with the
    /// best-effort service: [`Endpoint::send_unreliable`] of one scattering.
    ///
    /// # Errors
    /// As [`Endpoint::send_unreliable`].
    pub fn broadcast_unreliable(&self, payload: impl Into<Bytes>) -> Result<Timestamp, SendError> {
        let payload = payload.into();
        self.send_unreliable(self.processes().map(|p| (p, payload.clone())))
    }

    /// Sends `payload` to every member of the current view (this process included) with the
    /// reliable service: [`Endpoint::send_reliable`] of one scattering.
    ///
    /// # Errors
    /// As [`Endpoint::send_reliable`].
    pub fn broadcast_reliable(&self, payload: impl Into<Bytes>) -> Result<SendHandle, SendError> {
        let payload = payload.into();
        self.send_reliable(self.processes().map(|p| (p, payload.clone())))
    }

    /// Sends `payload` to every member of the current view (this process included) as plain
    /// messages: [`Endpoint::send_plain`] of one scattering.
    ///
    /// # Errors
    /// As [`Endpoint::send_plain`].
    pub fn broadcast_plain(&self, payload: impl Into<Bytes>) -> Result<Timestamp, SendError> {
        let payload = payload.into();
        self.send_plain(self.processes().map(|p| (p, payload.clone())))
    }

    /// Sends a scattering with the best-effort service (Table 1 `onepipe_unreliable_send`):
    /// every message gets the returned timestamp, and every receiver delivers it in timestamp
    /// order with everything else (§2.1). A message that cannot be delivered is reported by
    /// [`Event::SendFailed`].
    ///
    /// ```no_run
    /// # fn f(e: &onepipe_runtime::endpoint::Endpoint) {
    /// use onepipe_proto::ProcId;
    /// // Different messages to different processes, one timestamp.
    /// let ts = e.send_unreliable(&[(ProcId(1), "x = 1".into()), (ProcId(2), "y = 2".into())]);
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`SendError::Full`] when `unacked_bytes_max` bytes of messages await acknowledgement
    /// (§6.1 flow control: retry once some are acknowledged); the others as named. Nothing was
    /// sent then.
    pub fn send_unreliable<I>(&self, scattering: I) -> Result<Timestamp, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        self.command_with(scattering, |role, now, me, scattering| match role {
            Role::Ordered(h) => h.send(now, me, scattering).map_err(SendError::from),
            Role::Unordered(h) => h.send(now, me, scattering).map_err(SendError::from),
        })
    }

    /// Sends a scattering with the reliable service (Table 1 `onepipe_reliable_send`, §5.1):
    /// delivered exactly once at every destination, all or nothing, in timestamp order among
    /// reliable messages, unless a process fails. It waits in the send buffer until every
    /// destination's window has room, then is stamped: [`Event::ReliableSent`] says when (with
    /// [`JoinOptions::report_reliable_sent`]).
    ///
    /// # Errors
    /// [`SendError::Full`] when the send buffer cannot take it; [`SendError::Unsupported`] when
    /// the cluster runs with ordering off.
    pub fn send_reliable<I>(&self, scattering: I) -> Result<SendHandle, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        self.command_with(scattering, |role, now, me, scattering| match role {
            Role::Ordered(h) => h
                .send_reliable(now, me, scattering)
                .map(SendHandle)
                .map_err(SendError::from),
            Role::Unordered(_) => Err(SendError::Unsupported),
        })
    }

    /// [`Endpoint::send_unreliable`], waiting up to `timeout` for room when the send buffer
    /// is full (§6.1 flow control) instead of returning [`SendError::Full`] at once: the call
    /// sleeps until the I/O thread has handled acknowledgements or loss reports, then tries
    /// again — no spinning. `Duration::ZERO` tries once.
    ///
    /// # Errors
    /// [`SendError::Full`] if there was still no room after `timeout`; the others as
    /// [`Endpoint::send_unreliable`].
    pub fn send_unreliable_timeout<I>(
        &self,
        scattering: I,
        timeout: Duration,
    ) -> Result<Timestamp, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        let scattering: Vec<(ProcId, Bytes)> =
            scattering.into_iter().map(Outgoing::into_message).collect();
        self.retry_while_full(timeout, || self.send_unreliable(&scattering))
    }

    /// [`Endpoint::send_reliable`], waiting up to `timeout` for room in the send buffer as
    /// [`Endpoint::send_unreliable_timeout`] does.
    ///
    /// # Errors
    /// [`SendError::Full`] if there was still no room after `timeout`; the others as
    /// [`Endpoint::send_reliable`].
    pub fn send_reliable_timeout<I>(
        &self,
        scattering: I,
        timeout: Duration,
    ) -> Result<SendHandle, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        let scattering: Vec<(ProcId, Bytes)> =
            scattering.into_iter().map(Outgoing::into_message).collect();
        self.retry_while_full(timeout, || self.send_reliable(&scattering))
    }

    /// Sends a scattering of *plain* messages: best effort, outside the total order (§2.2.2:
    /// "the response message does not need to be ordered by 1Pipe" — a reply, an
    /// acknowledgement, a completion). Each receiver hands it to the application as soon as it
    /// arrives ([`Endpoint::plain`]), without waiting for the barrier to pass it and without
    /// ever dropping it as late; it is in neither service's total order, and nothing is
    /// promised about where it falls among other deliveries.
    ///
    /// It travels with everything else — the same socket, the same aggregators, packed into
    /// the same datagrams and authenticated alike — as data packets flagged `PLAIN`, and is a
    /// best-effort message in every other way: it is acknowledged, counts against the same
    /// window (`SendError::Full`), and a message that is not delivered is reported as
    /// [`Event::SendFailed`] as a best-effort one is (`Lost` after the loss timeout or when the
    /// receiver's window gives up on it, `BufferFull` when the receiving application has no
    /// room, `Incomplete` when a fragment is missing as the barrier passes its timestamp; it
    /// may have been delivered if only its acknowledgement was lost). The returned timestamp
    /// is this endpoint's timestamp when it was sent, which the receiver sees as
    /// [`Message::ts`]: it orders nothing.
    ///
    /// ```no_run
    /// # fn f(e: &onepipe_runtime::endpoint::Endpoint, m: onepipe_runtime::endpoint::Message) {
    /// // Answer a request delivered in the total order, outside it.
    /// e.send_plain([(m.src, "done")]).unwrap();
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Endpoint::send_unreliable`]. Nothing was sent then.
    pub fn send_plain<I>(&self, scattering: I) -> Result<Timestamp, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        self.command_with(scattering, |role, now, me, scattering| match role {
            Role::Ordered(h) => h.send_plain(now, me, scattering).map_err(SendError::from),
            Role::Unordered(h) => h.send_plain(now, me, scattering).map_err(SendError::from),
        })
    }

    /// [`Endpoint::send_plain`], waiting up to `timeout` for room in a full send buffer as
    /// [`Endpoint::send_unreliable_timeout`] does.
    ///
    /// # Errors
    /// [`SendError::Full`] if there was still no room after `timeout`; the others as
    /// [`Endpoint::send_plain`].
    pub fn send_plain_timeout<I>(
        &self,
        scattering: I,
        timeout: Duration,
    ) -> Result<Timestamp, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        let scattering: Vec<(ProcId, Bytes)> =
            scattering.into_iter().map(Outgoing::into_message).collect();
        self.retry_while_full(timeout, || self.send_plain(&scattering))
    }

    /// Runs `send` until it is not refused for a full buffer, or `timeout` passes; between
    /// tries it sleeps until the I/O thread has taken a turn.
    fn retry_while_full<R>(
        &self,
        timeout: Duration,
        mut send: impl FnMut() -> Result<R, SendError>,
    ) -> Result<R, SendError> {
        // The common case — room — costs a send and nothing more.
        match send() {
            Err(SendError::Full) if !timeout.is_zero() => {}
            r => return r,
        }
        let until = deadline(timeout);
        let sh = &self.shared;
        // Counted as waiting before the next try, so no turn between a refusal and the wait
        // can pass unseen.
        sh.room_waiters.fetch_add(1, Ordering::SeqCst);
        let result = loop {
            let seen = *sh.room.lock().unwrap_or_else(|e| e.into_inner());
            match send() {
                Err(SendError::Full) => {}
                r => break r,
            }
            let mut generation = sh.room.lock().unwrap_or_else(|e| e.into_inner());
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break Err(SendError::Full);
            }
            if *generation == seen {
                generation = sh
                    .room_ready
                    .wait_timeout(generation, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            drop(generation);
        };
        sh.room_waiters.fetch_sub(1, Ordering::SeqCst);
        result
    }

    /// Runs an application command on the role and wakes the I/O thread if it has new output
    /// to drain and was not already told.
    /// [`Endpoint::command`] with the scattering collected into the core's scratch vector
    /// under the lock.
    fn command_with<I, R>(
        &self,
        scattering: I,
        f: impl FnOnce(&mut Role, Instant, ProcId, &[(ProcId, Bytes)]) -> Result<R, SendError>,
    ) -> Result<R, SendError>
    where
        I: IntoIterator,
        I::Item: Outgoing,
    {
        self.command(|core, now, me| {
            let Core { role, scratch, .. } = core;
            scratch.clear();
            scratch.extend(scattering.into_iter().map(Outgoing::into_message));
            let r = f(role, now, me, scratch);
            // Payloads are not kept alive past the send.
            scratch.clear();
            r
        })
    }

    fn command<R>(
        &self,
        f: impl FnOnce(&mut Core, Instant, ProcId) -> Result<R, SendError>,
    ) -> Result<R, SendError> {
        if self.shared.stop.load(Ordering::SeqCst) {
            return Err(SendError::Closed);
        }
        let mut core = self.shared.lock();
        let r = f(&mut core, self.shared.clock.now(), self.shared.current())?;
        let was_dirty = self.shared.dirty.swap(true, Ordering::SeqCst);
        drop(core);
        if !was_dirty {
            self.shared.wake();
        }
        Ok(r)
    }
}
