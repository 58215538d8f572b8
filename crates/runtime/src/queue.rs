//! A bounded multi-producer, multi-consumer queue between the endpoint's I/O thread and
//! application threads: `try_push` never blocks (a full queue is the caller's to handle), `pop`
//! blocks, polls or waits with a deadline, and `close` wakes every waiter.
//!
//! A mutex around a `VecDeque` with a condition variable: the I/O thread pushes a whole batch of
//! deliveries per loop turn and an application thread takes them one by one, so the lock is
//! short and seldom contended. The condition variable is signalled only when someone waits.
//!
//! With the `tokio` feature, [`BoundedQueue::pop_async`] waits as a future instead: every push
//! and the close also signal a `tokio::sync::Notify`, which wakes a waiting task (in any
//! executor) — no task polls an empty queue more than once per push.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// Why `pop` returned nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PopError {
    /// Nothing queued (non-blocking pop).
    Empty,
    /// The deadline passed.
    Timeout,
    /// Closed and drained.
    Closed,
}

#[derive(Debug)]
struct Inner<T> {
    items: VecDeque<T>,
    closed: bool,
    waiters: usize,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct BoundedQueue<T> {
    inner: Mutex<Inner<T>>,
    ready: Condvar,
    /// Wakes tasks waiting in [`BoundedQueue::pop_async`].
    #[cfg(feature = "tokio")]
    ready_async: tokio::sync::Notify,
    len_max: usize,
}

impl<T> BoundedQueue<T> {
    /// A queue of at most `len_max` items (at least 1).
    pub fn new(len_max: usize) -> BoundedQueue<T> {
        assert!(len_max > 0, "a queue holds at least one item");
        BoundedQueue {
            inner: Mutex::new(Inner {
                items: VecDeque::new(),
                closed: false,
                waiters: 0,
            }),
            ready: Condvar::new(),
            #[cfg(feature = "tokio")]
            ready_async: tokio::sync::Notify::new(),
            len_max,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        // A panic while holding this lock leaves a consistent VecDeque: keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The most items it holds.
    pub fn len_max(&self) -> usize {
        self.len_max
    }

    /// Items queued now.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// `f` of the oldest item, if there is one; `Err(())` once closed and drained.
    pub fn peek<K>(&self, f: impl FnOnce(&T) -> K) -> Result<Option<K>, ()> {
        let q = self.lock();
        match q.items.front() {
            Some(item) => Ok(Some(f(item))),
            None if q.closed => Err(()),
            None => Ok(None),
        }
    }

    /// Queues `item`, or gives it back if the queue is full or closed.
    pub fn try_push(&self, item: T) -> Result<(), T> {
        let mut q = self.lock();
        if q.closed || q.items.len() >= self.len_max {
            return Err(item);
        }
        q.items.push_back(item);
        let wake = q.waiters > 0;
        drop(q);
        if wake {
            self.ready.notify_one();
        }
        // One task per item; with none waiting, the permit makes the next one look again.
        #[cfg(feature = "tokio")]
        self.ready_async.notify_one();
        Ok(())
    }

    /// Takes the oldest item: at once (`deadline` `None` and `block` false), waiting for one
    /// (`block` true) or until `deadline`.
    pub fn pop(&self, block: bool, deadline: Option<Instant>) -> Result<T, PopError> {
        let mut q = self.lock();
        loop {
            if let Some(item) = q.items.pop_front() {
                return Ok(item);
            }
            if q.closed {
                return Err(PopError::Closed);
            }
            if !block && deadline.is_none() {
                return Err(PopError::Empty);
            }
            q.waiters += 1;
            q = match deadline {
                None => self.ready.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        q.waiters -= 1;
                        return Err(PopError::Timeout);
                    }
                    self.ready
                        .wait_timeout(q, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
            q.waiters -= 1;
        }
    }

    /// Takes the oldest item, waiting for one as a future (`Closed` once closed and drained).
    /// The future registers for a wake-up before it looks at the queue, so a push between the
    /// two is never missed; it is cancel-safe (dropped, it takes nothing, and a wake-up it was
    /// given passes to another waiting task).
    /// Moves as many of `items` as fit (from the front, in order) into the queue under one
    /// lock, waking a waiting reader once; what does not fit stays in `items`. Returns how many
    /// moved (none once closed).
    pub fn push_many(&self, items: &mut VecDeque<T>) -> usize {
        if items.is_empty() {
            return 0;
        }
        let mut q = self.lock();
        if q.closed {
            return 0;
        }
        let n = items
            .len()
            .min(self.len_max - q.items.len().min(self.len_max));
        q.items.extend(items.drain(..n));
        let wake = q.waiters > 0 && n > 0;
        drop(q);
        if wake {
            self.ready.notify_all();
        }
        #[cfg(feature = "tokio")]
        if n > 0 {
            self.ready_async.notify_one();
        }
        n
    }

    /// Moves up to `limit` items into `out` under one lock, waiting as [`BoundedQueue::pop`]
    /// does for the first (`block`, `deadline`); the rest only if they are already there.
    /// Returns how many were moved (at least 1 on success).
    pub fn pop_many(
        &self,
        out: &mut Vec<T>,
        limit: usize,
        block: bool,
        deadline: Option<Instant>,
    ) -> Result<usize, PopError> {
        if limit == 0 {
            return Ok(0);
        }
        let first = self.pop(block, deadline)?;
        out.push(first);
        let mut q = self.lock();
        let more = q.items.len().min(limit - 1);
        out.extend(q.items.drain(..more));
        Ok(1 + more)
    }

    #[cfg(feature = "tokio")]
    pub async fn pop_async(&self) -> Result<T, PopError> {
        loop {
            let notified = self.ready_async.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            match self.pop(false, None) {
                Err(PopError::Empty) => notified.await,
                r => return r,
            }
        }
    }

    /// No more pushes; waiters take what is left, then get `Closed`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
        #[cfg(feature = "tokio")]
        self.ready_async.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_full_queue_refuses_and_a_closed_one_drains_then_says_so() {
        let q = BoundedQueue::new(2);
        assert_eq!(q.try_push(1), Ok(()));
        assert_eq!(q.try_push(2), Ok(()));
        assert_eq!(q.try_push(3), Err(3));
        assert_eq!(q.pop(false, None), Ok(1));
        q.close();
        assert_eq!(q.try_push(4), Err(4));
        assert_eq!(q.pop(true, None), Ok(2));
        assert_eq!(q.pop(true, None), Err(PopError::Closed));
    }

    /// A waiting `pop_async` is polled again only when something was pushed (or the queue
    /// closed): it never busy-polls an empty queue.
    #[test]
    fn push_many_moves_what_fits_in_order_and_leaves_the_rest() {
        let q = BoundedQueue::new(3);
        q.try_push(0).unwrap();
        let mut items: VecDeque<i32> = (1..6).collect();
        assert_eq!(q.push_many(&mut items), 2);
        assert_eq!(items, [3, 4, 5]);
        let mut out = Vec::new();
        assert_eq!(q.pop_many(&mut out, 10, false, None), Ok(3));
        assert_eq!(out, [0, 1, 2]);
        q.close();
        assert_eq!(q.push_many(&mut items), 0, "closed");
        assert_eq!(items.len(), 3);
    }

    #[test]
    fn pop_many_takes_what_is_there_up_to_the_limit_and_waits_only_for_the_first() {
        let q = BoundedQueue::new(8);
        let mut out = Vec::new();
        assert_eq!(q.pop_many(&mut out, 4, false, None), Err(PopError::Empty));
        for i in 0..6 {
            q.try_push(i).unwrap();
        }
        assert_eq!(q.pop_many(&mut out, 4, false, None), Ok(4));
        assert_eq!(q.pop_many(&mut out, 4, true, None), Ok(2));
        assert_eq!(out, [0, 1, 2, 3, 4, 5]);
        assert_eq!(q.pop_many(&mut out, 0, true, None), Ok(0), "nothing asked");
        let soon = Instant::now() + Duration::from_millis(5);
        assert_eq!(
            q.pop_many(&mut out, 4, false, Some(soon)),
            Err(PopError::Timeout)
        );
        q.close();
        assert_eq!(q.pop_many(&mut out, 4, true, None), Err(PopError::Closed));
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn an_async_pop_sleeps_until_a_push_or_the_close_wakes_it() {
        use std::future::Future;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::{Context, Poll, Wake, Waker};
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let wakes = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let q: BoundedQueue<u32> = BoundedQueue::new(4);
        let woken = || wakes.0.load(Ordering::SeqCst);

        let mut pop = std::pin::pin!(q.pop_async());
        assert_eq!(pop.as_mut().poll(&mut cx), Poll::Pending);
        assert_eq!(pop.as_mut().poll(&mut cx), Poll::Pending);
        assert_eq!(woken(), 0, "an empty queue wakes nobody");
        q.try_push(7).unwrap();
        assert_eq!(woken(), 1, "a push wakes the waiting task");
        assert_eq!(pop.as_mut().poll(&mut cx), Poll::Ready(Ok(7)));

        // An item already queued is taken at once; the close wakes a waiter, which then sees
        // `Closed` once the queue is drained.
        q.try_push(8).unwrap();
        let mut pop = std::pin::pin!(q.pop_async());
        assert_eq!(pop.as_mut().poll(&mut cx), Poll::Ready(Ok(8)));
        let mut pop = std::pin::pin!(q.pop_async());
        assert_eq!(pop.as_mut().poll(&mut cx), Poll::Pending);
        let before = woken();
        q.close();
        assert_eq!(woken(), before + 1, "the close wakes the waiting task");
        assert_eq!(
            pop.as_mut().poll(&mut cx),
            Poll::Ready(Err(PopError::Closed))
        );
    }

    #[test]
    fn waiting_pops_time_out_or_are_woken() {
        let q = Arc::new(BoundedQueue::new(4));
        let soon = Instant::now() + Duration::from_millis(10);
        assert_eq!(q.pop(false, Some(soon)), Err(PopError::Timeout));
        assert_eq!(q.pop(false, None), Err(PopError::Empty));
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.pop(true, None));
        std::thread::sleep(Duration::from_millis(20));
        q.try_push(7).unwrap();
        assert_eq!(t.join().unwrap(), Ok(7));
    }
}
