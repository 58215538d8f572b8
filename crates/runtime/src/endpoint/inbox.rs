//! [`Inbox`]: one service's deliveries at an endpoint — [`Endpoint::best_effort`],
//! [`Endpoint::reliable`] and [`Endpoint::plain`]. Per service, four ways to take messages: blocking with a deadline
//! ([`Inbox::recv`]), non-blocking ([`Inbox::try_recv`]), a batch into a handler
//! ([`Inbox::poll`], Aeron's `poll(handler, limit)`), and a future ([`Inbox::recv_async`],
//! with the `tokio` feature). [`Endpoint::recv_merged`] merges the two services into one
//! timestamp order.

use super::*;

/// One service's delivered messages at an [`Endpoint`] (Table 1's `onepipe_unreliable_recv`
/// and `onepipe_reliable_recv`), in that service's total order — or, for
/// [`Endpoint::plain`], in the order they arrived. Cheap: borrow one whenever needed
/// (`e.reliable().recv(d)`).
#[derive(Clone, Copy)]
pub struct Inbox<'a> {
    ep: &'a Endpoint,
    service: Service,
}

/// Which queue an [`Inbox`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Service {
    BestEffort,
    Reliable,
    Plain,
}

impl std::fmt::Debug for Inbox<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let service = match self.service {
            Service::BestEffort => "best effort",
            Service::Reliable => "reliable",
            Service::Plain => "plain",
        };
        write!(f, "Inbox({service} of {})", self.ep.proc())
    }
}

impl Endpoint {
    /// The best-effort service's deliveries (§4.1): [`Inbox::recv`], [`Inbox::try_recv`],
    /// [`Inbox::poll`], and `Inbox::recv_async` with the `tokio` feature.
    pub fn best_effort(&self) -> Inbox<'_> {
        Inbox {
            ep: self,
            service: Service::BestEffort,
        }
    }

    /// The reliable service's deliveries (§5.1), as [`Endpoint::best_effort`].
    pub fn reliable(&self) -> Inbox<'_> {
        Inbox {
            ep: self,
            service: Service::Reliable,
        }
    }

    /// Plain messages ([`Endpoint::send_plain`], §2.2.2), as [`Endpoint::best_effort`]: each
    /// is queued the moment it arrives, before any barrier passes it, in the order they
    /// arrived ([`Message::ordered`] is false). A queue of its own, bounded like the others:
    /// a plain message the application has no room for is refused and its sender told
    /// (`SendFailed` with `BufferFull`).
    pub fn plain(&self) -> Inbox<'_> {
        Inbox {
            ep: self,
            service: Service::Plain,
        }
    }
}

impl Inbox<'_> {
    fn queue(&self) -> &BoundedQueue<Message> {
        match self.service {
            Service::BestEffort => &self.ep.shared.be,
            Service::Reliable => &self.ep.shared.rel,
            Service::Plain => &self.ep.shared.plain,
        }
    }

    /// After a pop made room: the I/O thread is woken when the role's room ran low (best
    /// effort, plain) or delivery paused for want of it (reliable) and the queue is half
    /// empty.
    fn after_pop<T>(&self, r: Result<T, PopError>) -> Result<T, RecvError> {
        let sh = &self.ep.shared;
        let waiting = match self.service {
            Service::BestEffort => sh.be_starved.load(Ordering::Relaxed),
            Service::Reliable => sh.rel_paused.load(Ordering::Relaxed),
            Service::Plain => sh.plain_starved.load(Ordering::Relaxed),
        };
        let q = self.queue();
        if waiting && q.len() <= q.len_max() / 2 {
            sh.wake();
        }
        Ok(r?)
    }

    /// The next message, waiting at most `timeout` (`Duration::MAX`: as long as it takes).
    ///
    /// # Errors
    /// [`RecvError::Timeout`] if none came; [`RecvError::Closed`] once the endpoint has left
    /// and the queue is empty.
    pub fn recv(&self, timeout: Duration) -> Result<Message, RecvError> {
        let until = (timeout != Duration::MAX).then(|| deadline(timeout));
        self.after_pop(self.queue().pop(until.is_none(), until))
    }

    /// The next message if one is waiting.
    ///
    /// # Errors
    /// [`RecvError::Empty`] if none is; [`RecvError::Closed`] as [`Inbox::recv`].
    pub fn try_recv(&self) -> Result<Message, RecvError> {
        self.after_pop(self.queue().pop(false, None))
    }

    /// Calls `handler` with each of up to `limit` messages already delivered, in order, and
    /// returns how many (0: none was waiting). Never blocks; the batch is taken under one lock
    /// and the handler runs outside the endpoint's locks, so it may send. To wait for the first
    /// of a batch, [`Inbox::recv`] it and poll for the rest.
    ///
    /// ```no_run
    /// # fn f(e: &onepipe_runtime::endpoint::Endpoint) {
    /// use std::time::Duration;
    /// while let Ok(first) = e.reliable().recv(Duration::from_millis(10)) {
    ///     let mut apply = |m: onepipe_runtime::endpoint::Message| { /* in order */ };
    ///     apply(first);
    ///     e.reliable().poll(255, apply);
    /// }
    /// # }
    /// ```
    pub fn poll(&self, limit: usize, handler: impl FnMut(Message)) -> usize {
        let mut batch = Vec::with_capacity(limit.min(POLL_BATCH_LEN));
        let n = self
            .after_pop(self.queue().pop_many(&mut batch, limit, false, None))
            .unwrap_or(0);
        batch.into_iter().for_each(handler);
        n
    }

    /// The next message, as a future (with the `tokio` feature). It waits without polling — the
    /// I/O thread wakes it when it queues a message — in any executor; it is cancel-safe
    /// (dropped before it completes, it takes nothing).
    ///
    /// ```
    /// # use onepipe_runtime::cluster::LocalLayout;
    /// # use onepipe_runtime::endpoint::{Endpoint, JoinOptions};
    /// # use onepipe_runtime::LocalCluster;
    /// use onepipe_proto::ProcId;
    /// use std::time::Duration;
    ///
    /// let local = LocalCluster::start(&LocalLayout { hosts: 1, layers: 1, ..LocalLayout::default() }).unwrap();
    /// let e = Endpoint::join(local.controller_addr(), local.join_options()).unwrap();
    /// let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    /// rt.block_on(async {
    ///     e.send_unreliable([(ProcId(0), "to myself")]).unwrap();
    ///     let m = tokio::time::timeout(Duration::from_secs(30), e.best_effort().recv_async())
    ///         .await
    ///         .expect("delivered within 30 s")
    ///         .unwrap();
    ///     assert_eq!(&m.payload[..], b"to myself");
    /// });
    /// e.leave();
    /// local.stop();
    /// ```
    ///
    /// # Errors
    /// [`RecvError::Closed`] once the endpoint has left and the queue is empty.
    #[cfg(feature = "tokio")]
    pub async fn recv_async(&self) -> Result<Message, RecvError> {
        let r = self.queue().pop_async().await;
        self.after_pop(r)
    }
}
