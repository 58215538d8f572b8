//! A bounded multi-producer, multi-consumer queue between the endpoint's I/O thread and
//! application threads: `try_push` never blocks (a full queue is the caller's to handle), `pop`
//! blocks, polls or waits with a deadline, and `close` wakes every waiter.
//!
//! A mutex around a `VecDeque` with a condition variable: the I/O thread pushes a whole batch of
//! deliveries per loop turn and an application thread takes them one by one, so the lock is
//! short and seldom contended. The condition variable is signalled only when someone waits.

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

    /// No more pushes; waiters take what is left, then get `Closed`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
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
