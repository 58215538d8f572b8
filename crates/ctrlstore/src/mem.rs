//! [`MemStore`]: the embedded, in-memory [`ControllerStore`] — the default, and the model the
//! etcd store is tested against.
//!
//! Several controllers of one process share one `MemStore` (it is a cheap `Clone` of an `Arc`)
//! and get the same semantics as from etcd: one leader at a time, by a lease that ends unless
//! kept alive, and fenced writes. Its clock is either the process's monotonic clock or a manual
//! one that tests advance by hand ([`MemStore::manual`], [`MemStore::advance`]), so lease expiry
//! in tests is deterministic. It is not durable: it dies with the process, so it gives
//! failover between threads, not between machines.

use crate::store::{ControllerStore, Leadership, Op, StoreError, LOG_ENTRIES_MAX};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

const ENDPOINT: &str = "memory";

/// How long a waiting campaign sleeps between looks at the lease (real time).
const CAMPAIGN_POLL: Duration = Duration::from_millis(5);

/// An in-memory controller store; clones share the state.
#[derive(Clone, Debug)]
pub struct MemStore {
    shared: Arc<(Mutex<State>, Condvar)>,
}

#[derive(Debug)]
enum Clock {
    Real(std::time::Instant),
    Manual(Duration),
}

#[derive(Debug)]
struct Holder {
    candidate: String,
    lease: i64,
    fence: i64,
    expires: Duration,
}

#[derive(Debug)]
struct State {
    clock: Clock,
    leader: Option<Holder>,
    /// The last fence handed out: fences only grow.
    fence: i64,
    lease: i64,
    log: Vec<Vec<u8>>,
    meta: BTreeMap<String, Vec<u8>>,
}

impl MemStore {
    /// A store whose leases run on the process's monotonic clock.
    pub fn new() -> MemStore {
        MemStore::with_clock(Clock::Real(std::time::Instant::now()))
    }

    /// A store whose leases run on a manual clock, starting at zero: only
    /// [`MemStore::advance`] moves it.
    pub fn manual() -> MemStore {
        MemStore::with_clock(Clock::Manual(Duration::ZERO))
    }

    fn with_clock(clock: Clock) -> MemStore {
        let state = State {
            clock,
            leader: None,
            fence: 0,
            lease: 0,
            log: Vec::new(),
            meta: BTreeMap::new(),
        };
        MemStore {
            shared: Arc::new((Mutex::new(state), Condvar::new())),
        }
    }

    /// Moves a manual clock forward by `d` (leases may expire), and wakes waiting campaigns.
    ///
    /// # Panics
    /// On a store made by [`MemStore::new`].
    pub fn advance(&self, d: Duration) {
        let mut s = self.state();
        match &mut s.clock {
            Clock::Manual(t) => *t += d,
            Clock::Real(_) => panic!("advance on a real-clock MemStore"),
        }
        s.expire();
        drop(s);
        self.shared.1.notify_all();
    }

    /// Entries in the log.
    pub fn log_len(&self) -> u64 {
        self.state().log.len() as u64
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state consistent (every mutation is a
        // single assignment or push), so a poisoned lock is still usable.
        self.shared.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state, with an ended lease already dropped.
    fn current(&self) -> MutexGuard<'_, State> {
        let mut s = self.state();
        s.expire();
        s
    }
}

impl Default for MemStore {
    fn default() -> MemStore {
        MemStore::new()
    }
}

impl State {
    fn now(&self) -> Duration {
        match self.clock {
            Clock::Real(start) => start.elapsed(),
            Clock::Manual(t) => t,
        }
    }

    fn expire(&mut self) {
        let now = self.now();
        if self.leader.as_ref().is_some_and(|h| h.expires <= now) {
            self.leader = None;
        }
    }

    fn holds(&self, l: &Leadership) -> bool {
        self.leader.as_ref().is_some_and(|h| h.fence == l.fence)
    }

    fn fenced(&self, l: &Leadership, op: Op) -> Result<(), StoreError> {
        if self.holds(l) {
            Ok(())
        } else {
            Err(StoreError::NotLeader {
                op,
                endpoint: ENDPOINT.into(),
            })
        }
    }
}

impl ControllerStore for MemStore {
    fn campaign(
        &self,
        candidate: &str,
        lease_ttl: Duration,
        wait_max: Duration,
    ) -> Result<Leadership, StoreError> {
        let started = std::time::Instant::now();
        let mut s = self.current();
        loop {
            if s.leader.is_none() {
                s.fence += 1;
                s.lease += 1;
                let expires = s.now() + lease_ttl;
                let holder = Holder {
                    candidate: candidate.to_owned(),
                    lease: s.lease,
                    fence: s.fence,
                    expires,
                };
                let won = Leadership {
                    candidate: holder.candidate.clone(),
                    lease: holder.lease,
                    fence: holder.fence,
                    lease_ttl,
                };
                s.leader = Some(holder);
                return Ok(won);
            }
            let waited = started.elapsed();
            if waited >= wait_max {
                return Err(StoreError::CampaignTimedOut {
                    endpoint: ENDPOINT.into(),
                    holder: s.leader.as_ref().map(|h| h.candidate.clone()),
                });
            }
            let nap = CAMPAIGN_POLL.min(wait_max - waited);
            s = self
                .shared
                .1
                .wait_timeout(s, nap)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            s.expire();
        }
    }

    fn keep_alive(&self, leadership: &Leadership) -> Result<(), StoreError> {
        let mut s = self.current();
        s.fenced(leadership, Op::KeepAlive)?;
        let expires = s.now() + leadership.lease_ttl;
        if let Some(h) = s.leader.as_mut() {
            h.expires = expires;
        }
        Ok(())
    }

    fn is_leader(&self, leadership: &Leadership) -> Result<bool, StoreError> {
        Ok(self.current().holds(leadership))
    }

    fn leader(&self) -> Result<Option<String>, StoreError> {
        Ok(self.current().leader.as_ref().map(|h| h.candidate.clone()))
    }

    fn resign(&self, leadership: Leadership) -> Result<(), StoreError> {
        let mut s = self.current();
        if s.holds(&leadership) {
            s.leader = None;
            drop(s);
            self.shared.1.notify_all();
        }
        Ok(())
    }

    fn append(&self, leadership: &Leadership, entry: &[u8]) -> Result<u64, StoreError> {
        let mut s = self.current();
        s.fenced(leadership, Op::Append)?;
        let index = s.log.len() as u64;
        if index >= LOG_ENTRIES_MAX {
            return Err(StoreError::LogFull {
                endpoint: ENDPOINT.into(),
            });
        }
        s.log.push(entry.to_vec());
        Ok(index)
    }

    fn load(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        Ok(self.state().log.clone())
    }

    fn put_meta(&self, leadership: &Leadership, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let mut s = self.current();
        s.fenced(leadership, Op::PutMeta)?;
        s.meta.insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.state().meta.get(key).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(2);

    #[test]
    fn one_leader_at_a_time() {
        let store = MemStore::manual();
        let a = store.campaign("a", TTL, Duration::ZERO).unwrap();
        let err = store.campaign("b", TTL, Duration::ZERO).unwrap_err();
        assert_eq!(
            err,
            StoreError::CampaignTimedOut {
                endpoint: "memory".into(),
                holder: Some("a".into())
            }
        );
        assert!(store.is_leader(&a).unwrap());
        assert_eq!(store.leader().unwrap().as_deref(), Some("a"));
    }

    #[test]
    fn a_kept_alive_lease_does_not_expire() {
        let store = MemStore::manual();
        let a = store.campaign("a", TTL, Duration::ZERO).unwrap();
        for _ in 0..10 {
            store.advance(TTL / 2);
            store.keep_alive(&a).unwrap();
        }
        assert!(store.is_leader(&a).unwrap());
        assert_eq!(store.append(&a, b"x").unwrap(), 0);
    }

    #[test]
    fn a_standby_takes_over_when_the_lease_expires() {
        let store = MemStore::manual();
        let a = store.campaign("a", TTL, Duration::ZERO).unwrap();
        store.append(&a, b"1").unwrap();
        store.advance(TTL);
        assert!(!store.is_leader(&a).unwrap());
        let b = store.campaign("b", TTL, Duration::ZERO).unwrap();
        assert!(b.fence > a.fence, "fences only grow");
        assert_eq!(store.append(&b, b"2").unwrap(), 1);
        assert_eq!(store.load().unwrap(), vec![b"1".to_vec(), b"2".to_vec()]);
    }

    #[test]
    fn a_deposed_leader_cannot_write() {
        let store = MemStore::manual();
        let a = store.campaign("a", TTL, Duration::ZERO).unwrap();
        store.advance(TTL);
        let b = store.campaign("b", TTL, Duration::ZERO).unwrap();
        let fenced = StoreError::NotLeader {
            op: Op::Append,
            endpoint: "memory".into(),
        };
        assert_eq!(store.append(&a, b"late").unwrap_err(), fenced);
        assert!(store.put_meta(&a, "k", b"v").unwrap_err().is_not_leader());
        assert!(store.keep_alive(&a).unwrap_err().is_not_leader());
        // Resigning a leadership one no longer holds leaves the current leader alone.
        store.resign(a).unwrap();
        assert!(store.is_leader(&b).unwrap());
        assert!(store.load().unwrap().is_empty());
    }

    #[test]
    fn even_the_same_candidate_reelected_fences_its_old_leadership() {
        let store = MemStore::manual();
        let old = store.campaign("a", TTL, Duration::ZERO).unwrap();
        store.advance(TTL);
        let new = store.campaign("a", TTL, Duration::ZERO).unwrap();
        assert!(store.append(&old, b"x").unwrap_err().is_not_leader());
        assert_eq!(store.append(&new, b"x").unwrap(), 0);
    }

    #[test]
    fn resign_hands_over_at_once_and_wakes_a_waiting_campaign() {
        let store = MemStore::new();
        let a = store
            .campaign("a", Duration::from_secs(3_600), Duration::ZERO)
            .unwrap();
        let standby = store.clone();
        let waiter = std::thread::spawn(move || {
            standby.campaign("b", Duration::from_secs(3_600), Duration::from_secs(600))
        });
        store.resign(a).unwrap();
        let b = waiter.join().unwrap().unwrap();
        assert!(store.is_leader(&b).unwrap());
    }

    #[test]
    fn of_many_concurrent_candidates_exactly_one_wins() {
        let store = MemStore::manual();
        let winners: Vec<_> = (0..8)
            .map(|i| {
                let s = store.clone();
                std::thread::spawn(move || s.campaign(&format!("c{i}"), TTL, Duration::ZERO).ok())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(winners.len(), 1);
        assert_eq!(store.leader().unwrap(), Some(winners[0].candidate.clone()));
    }

    #[test]
    fn meta_is_fenced_and_readable_by_anyone() {
        let store = MemStore::manual();
        let a = store.campaign("a", TTL, Duration::ZERO).unwrap();
        store.put_meta(&a, "cluster", b"toml").unwrap();
        assert_eq!(store.get_meta("cluster").unwrap(), Some(b"toml".to_vec()));
        assert_eq!(store.get_meta("other").unwrap(), None);
    }
}
