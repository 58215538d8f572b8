//! Optimistic delivery with revoke and confirm: PLATO's receiver pipeline (Balakrishnan,
//! Birman and Phanishayee, "PLATO: Predictive Latency-Aware Total Ordering", §4.1) and its
//! adaptive Δ (§5, Fig. 11).
//!
//! A receiver learns the final total order some time after a message arrives (from a sequencer's
//! ordering packets, or from 1Pipe's barrier). Meanwhile [`Pipeline`] predicts: if a message
//! arrived more than Δ after the previous one, other receivers almost certainly saw the two in
//! the same order, so it is handed to the application at once ([`OptEvent::Deliver`], the
//! paper's `optdeliver`), tagged with `usable_at` = arrival + Δ (the paper's Tm). Two arrivals
//! within Δ of each other are *suspected*: held back until the final order names them. When the
//! order contradicts a delivery the pipeline takes it back ([`OptEvent::Revoke`], `revoke`);
//! when the order reaches a delivered message it is final ([`OptEvent::Confirm`], `confirm`).
//! A revoke before `usable_at` costs the application nothing (it has not used the message yet);
//! one at or after it is a *rollback*, the paper's metric.
//!
//! The pipeline is the paper's: a *pending* queue (held back: suspected, or stuck behind a
//! suspected one), a *suspicious* queue (delivered, order not yet known) and a *sequencing*
//! queue (order known, message not yet here). What the application sees at any moment is every
//! confirmed message in the final order, then the suspicious queue in its order.
//!
//! Where the paper is silent, this module decides (see also `docs/PLATO.md`):
//! * **An arrival whose order is already known** (§4.1 "optdeliver-ed and immediately
//!   confirm-ed"): if it is next in the order it is, and what was delivered ahead of it is
//!   revoked (it all comes later in the order, as in §4.1's first sequencing action); if an
//!   earlier message in the order is still missing it is held as suspected, since confirming
//!   it would skip that one.
//! * **Revoking the previous arrival** moves it to the *tail* of pending (§4.1 says head; the
//!   two differ only when sequencing has already moved earlier arrivals there, and the tail keeps
//!   pending in arrival order).
//! * **A message that will never be sequenced** (its sender's submission was lost at the
//!   sequencer): the driver removes it ([`Pipeline::remove`]), which revokes it if delivered.
//! * **Bounds.** At most `len_max` messages arrived and unconfirmed, and `len_max` places
//!   known ahead of their message; beyond that [`Pipeline::arrive`] (unless the message is next
//!   in the order) and [`Pipeline::sequence`] refuse, and the driver offers again later. Δ stays within `[delta_min_ns, delta_max_ns]`.
//!
//! What it is not: a transport. It holds keys, not payloads, reads no clock (`now` is an
//! argument) and never learns the order by itself.

use crate::time::Instant;
use std::collections::VecDeque;

/// Static configuration of a [`Pipeline`].
#[derive(Clone, Debug, PartialEq)]
pub struct OptConfig {
    /// Δ at the start (and for ever when `adaptive` is off), ns.
    pub delta_ns: u64,
    /// Adapt Δ as §5 describes (Fig. 11).
    pub adaptive: bool,
    /// Smallest Δ adaptation may reach, ns.
    pub delta_min_ns: u64,
    /// Largest Δ adaptation may reach, ns.
    pub delta_max_ns: u64,
    /// The moving window of the rollback fraction (§5: 1 s), ns.
    pub window_ns: u64,
    /// Rollback fraction above which a rollback grows Δ, below which Δ shrinks (§5: 0.01).
    pub rollback_fraction_max: f64,
    /// Δ shrinks at most this often (§5: every 100 ms) ...
    pub shrink_every_ns: u64,
    /// ... or every this many arrivals, whichever comes first (§5: 1,000).
    pub shrink_every_arrivals: u32,
    /// Most messages held back or delivered unconfirmed, and most places in the order known
    /// before their message arrived (each bound on its own).
    pub len_max: usize,
}

impl OptConfig {
    /// §5's adaptive scheme starting from `delta_ns`, bounded to `[delta_ns / 100, delta_ns ×
    /// 100]` (at least 1 ns), with 4,096 messages in flight at most.
    pub fn adaptive(delta_ns: u64) -> OptConfig {
        OptConfig {
            delta_ns,
            adaptive: true,
            delta_min_ns: (delta_ns / 100).max(1),
            delta_max_ns: delta_ns.saturating_mul(100).max(1),
            window_ns: 1_000_000_000,
            rollback_fraction_max: 0.01,
            shrink_every_ns: 100_000_000,
            shrink_every_arrivals: 1_000,
            len_max: 4_096,
        }
    }

    /// A fixed Δ (§4.1, Figs. 8–10).
    pub fn fixed(delta_ns: u64) -> OptConfig {
        OptConfig {
            adaptive: false,
            ..OptConfig::adaptive(delta_ns)
        }
    }

    /// Checks the limits; the error names the field.
    ///
    /// # Errors
    /// A bound that cannot hold (min above max, Δ outside them, a zero window or limit).
    pub fn validate(&self) -> Result<(), String> {
        if self.delta_min_ns == 0 || self.delta_min_ns > self.delta_max_ns {
            return Err(format!(
                "delta bounds: need 0 < min ({}) <= max ({})",
                self.delta_min_ns, self.delta_max_ns
            ));
        }
        if self.delta_ns < self.delta_min_ns || self.delta_ns > self.delta_max_ns {
            return Err(format!(
                "delta_ns {} lies outside [{}, {}]",
                self.delta_ns, self.delta_min_ns, self.delta_max_ns
            ));
        }
        if self.window_ns < WINDOW_BUCKETS || self.shrink_every_ns == 0 {
            return Err("window_ns and shrink_every_ns must be positive".into());
        }
        if self.shrink_every_arrivals == 0 || self.len_max == 0 {
            return Err("shrink_every_arrivals and len_max must be positive".into());
        }
        if !(0.0..1.0).contains(&self.rollback_fraction_max) {
            return Err("rollback_fraction_max must lie in [0, 1)".into());
        }
        Ok(())
    }
}

/// What the pipeline tells the application (§4.1's three hooks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptEvent<K> {
    /// `optdeliver`: the message may be used from `usable_at` on (Tm = arrival + Δ; the arrival
    /// instant when its order was already known).
    Deliver {
        /// The message.
        key: K,
        /// Tm.
        usable_at: Instant,
    },
    /// `revoke`: a delivered message is taken back; it will be delivered again later (or never,
    /// if the driver removed it).
    Revoke {
        /// The message.
        key: K,
        /// The revoke came at or after Tm: the application may have used it (a rollback).
        rollback: bool,
    },
    /// `confirm`: the message is final, in the total order (confirms come in that order).
    Confirm {
        /// The message.
        key: K,
    },
}

/// Counters; never reset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OptStats {
    /// Messages that arrived.
    pub arrived: u64,
    /// `optdeliver`s (a message revoked and delivered again counts twice).
    pub delivered: u64,
    /// Revokes before Tm (free for the application).
    pub revoked_early: u64,
    /// Revokes at or after Tm: rollbacks.
    pub rollbacks: u64,
    /// Confirms.
    pub confirmed: u64,
    /// Arrivals suspected (within Δ of the previous one).
    pub suspected: u64,
    /// Arrivals refused because the queues were full.
    pub refused_full: u64,
    /// Times Δ grew, and shrank.
    pub delta_grown: u64,
    /// Times Δ shrank.
    pub delta_shrunk: u64,
}

/// Buckets of the moving rollback fraction.
const WINDOW_BUCKETS: u64 = 10;

/// A held-back message.
#[derive(Clone, Copy, Debug)]
struct Held<K> {
    key: K,
    suspected: bool,
}

/// A delivered, unconfirmed message.
#[derive(Clone, Copy, Debug)]
struct Delivered<K> {
    key: K,
    usable_at: Instant,
}

/// §5's moving fraction of rollbacks and the Δ it steers.
#[derive(Clone, Debug)]
struct Delta {
    now_ns: u64,
    /// Per bucket of `window_ns / 10`: (bucket number, arrivals, rollbacks).
    buckets: [(u64, u64, u64); WINDOW_BUCKETS as usize],
    last_shrink: Instant,
    arrivals_since_shrink: u32,
}

/// PLATO's receiver pipeline over message keys `K`. See the module docs.
#[derive(Clone, Debug)]
pub struct Pipeline<K> {
    cfg: OptConfig,
    pending: VecDeque<Held<K>>,
    suspicious: VecDeque<Delivered<K>>,
    seqq: VecDeque<K>,
    /// The previous arrival and when it came.
    last: Option<(K, Instant)>,
    delta: Delta,
    out: VecDeque<OptEvent<K>>,
    stats: OptStats,
}

impl<K: Copy + Eq + core::fmt::Debug> Pipeline<K> {
    /// An empty pipeline.
    ///
    /// # Panics
    /// On a configuration [`OptConfig::validate`] refuses.
    pub fn new(cfg: OptConfig) -> Pipeline<K> {
        if let Err(e) = cfg.validate() {
            panic!("optimistic pipeline: {e}");
        }
        Pipeline {
            delta: Delta {
                now_ns: cfg.delta_ns,
                buckets: [(u64::MAX, 0, 0); WINDOW_BUCKETS as usize],
                last_shrink: Instant::ZERO,
                arrivals_since_shrink: 0,
            },
            cfg,
            pending: VecDeque::new(),
            suspicious: VecDeque::new(),
            seqq: VecDeque::new(),
            last: None,
            out: VecDeque::new(),
            stats: OptStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &OptConfig {
        &self.cfg
    }

    /// Δ now, ns.
    pub fn delta_ns(&self) -> u64 {
        self.delta.now_ns
    }

    /// Counters.
    pub fn stats(&self) -> &OptStats {
        &self.stats
    }

    /// Messages that arrived and are not confirmed (held back, or delivered unconfirmed).
    pub fn arrived_len(&self) -> usize {
        self.pending.len() + self.suspicious.len()
    }

    /// Places in the order known before their message arrived.
    pub fn sequenced_len(&self) -> usize {
        self.seqq.len()
    }

    /// True when nothing waits: every arrival confirmed, every known order matched.
    pub fn is_empty(&self) -> bool {
        self.arrived_len() == 0 && self.seqq.is_empty()
    }

    /// The next event for the application, in the order they happened.
    pub fn poll(&mut self) -> Option<OptEvent<K>> {
        self.out.pop_front()
    }

    /// Message `key` arrived at `now` (§4.1, "when a data packet is received"). Returns `false`
    /// if `len_max` messages are already held or delivered unconfirmed and `key` is not the
    /// next in the order: nothing changed, and the driver offers it again once it is.
    pub fn arrive(&mut self, now: Instant, key: K) -> bool {
        debug_assert!(
            !self.pending.iter().any(|h| h.key == key)
                && !self.suspicious.iter().any(|d| d.key == key),
            "{key:?} arrived twice"
        );
        if self.arrived_len() >= self.cfg.len_max && self.seqq.front() != Some(&key) {
            self.stats.refused_full += 1;
            return false;
        }
        self.stats.arrived += 1;
        self.count_arrival(now);
        let previous = self.last.replace((key, now));
        if self.seqq.contains(&key) {
            // Its place is already known: held until the order reaches it (at once if it is
            // next, and then, as when a held message is sequenced, whatever was delivered
            // ahead of it is revoked).
            self.pending.push_back(Held {
                key,
                suspected: true,
            });
            self.match_sequenced(now);
        } else if previous.is_some_and(|(_, at)| now.0.saturating_sub(at.0) < self.delta.now_ns) {
            self.on_close_arrival(now, key, previous.map(|(k, _)| k));
        } else if self.pending.is_empty() {
            let usable_at = now + self.delta.now_ns;
            self.deliver(now, key, usable_at);
        } else {
            self.pending.push_back(Held {
                key,
                suspected: false,
            });
        }
        self.invariants();
        true
    }

    /// `key` is the next message in the final total order (§4.1, "when a sequencing packet is
    /// received", one descriptor). Returns `false` if the queues are full: nothing changed, and
    /// the driver offers the descriptor again later (after arrivals matched some).
    pub fn sequence(&mut self, now: Instant, key: K) -> bool {
        debug_assert!(!self.seqq.contains(&key), "{key:?} sequenced twice");
        if self.seqq.len() >= self.cfg.len_max {
            self.stats.refused_full += 1;
            return false;
        }
        self.seqq.push_back(key);
        self.match_sequenced(now);
        self.invariants();
        true
    }

    /// Takes `key` out of the pipeline for good (it will never be sequenced): revoked if it was
    /// delivered. Returns whether it was here. Held messages behind it may be delivered.
    pub fn remove(&mut self, now: Instant, key: K) -> bool {
        let found = if let Some(i) = self.suspicious.iter().position(|d| d.key == key) {
            let d = self.suspicious.remove(i).expect("found");
            self.revoke(now, d);
            true
        } else if let Some(i) = self.pending.iter().position(|h| h.key == key) {
            self.pending.remove(i);
            true
        } else {
            false
        };
        self.release_pending(now);
        self.invariants();
        found
    }

    /// True if `key` arrived and is not confirmed (held back, or delivered unconfirmed).
    pub fn arrived(&self, key: K) -> bool {
        self.pending.iter().any(|h| h.key == key) || self.suspicious.iter().any(|d| d.key == key)
    }

    /// True if `key` is anywhere in the pipeline.
    pub fn holds(&self, key: K) -> bool {
        self.pending.iter().any(|h| h.key == key)
            || self.suspicious.iter().any(|d| d.key == key)
            || self.seqq.contains(&key)
    }

    /// The arrival came within Δ of the previous one: both are suspected (§4.1, the three
    /// possibilities for the previous packet).
    fn on_close_arrival(&mut self, now: Instant, key: K, previous: Option<K>) {
        self.stats.suspected += 1;
        if let Some(prev) = previous {
            if let Some(h) = self.pending.iter_mut().find(|h| h.key == prev) {
                h.suspected = true;
            } else if self.suspicious.back().is_some_and(|d| d.key == prev) {
                let d = self.suspicious.pop_back().expect("checked");
                self.revoke(now, d);
                self.pending.push_back(Held {
                    key: prev,
                    suspected: true,
                });
            }
            // Otherwise it is already confirmed: nothing to do.
        }
        self.pending.push_back(Held {
            key,
            suspected: true,
        });
    }

    /// Matches the head of the sequencing queue against the pipeline for as long as it is here
    /// (§4.1's two actions), then delivers what is no longer held back.
    fn match_sequenced(&mut self, now: Instant) {
        while let Some(&key) = self.seqq.front() {
            if let Some(i) = self.pending.iter().position(|h| h.key == key) {
                // 1. Held back: deliver and confirm it; everything delivered was delivered ahead
                //    of it, wrongly: revoke all of it.
                self.pending.remove(i);
                let wrong: Vec<_> = self.suspicious.drain(..).collect();
                self.hold_again(now, wrong);
                self.deliver(now, key, now);
                self.confirm(key);
            } else if let Some(i) = self.suspicious.iter().position(|d| d.key == key) {
                // 2. Delivered: confirm it; what was delivered ahead of it is revoked.
                let wrong: Vec<_> = self.suspicious.drain(..i).collect();
                self.suspicious.pop_front();
                self.hold_again(now, wrong);
                self.confirm(key);
            } else {
                return; // Not here yet: the rest of the order waits for it.
            }
            self.seqq.pop_front();
            self.release_pending(now);
        }
    }

    /// Revokes `wrong` (delivered, in their delivery order) and puts them back at the head of
    /// pending, suspected, in the same order.
    fn hold_again(&mut self, now: Instant, wrong: Vec<Delivered<K>>) {
        for d in wrong.iter().rev() {
            self.pending.push_front(Held {
                key: d.key,
                suspected: true,
            });
        }
        for d in wrong {
            self.revoke(now, d);
        }
    }

    /// Delivers the head of pending while it is not suspected.
    fn release_pending(&mut self, now: Instant) {
        while self.pending.front().is_some_and(|h| !h.suspected) {
            let h = self.pending.pop_front().expect("checked");
            let usable_at = now + self.delta.now_ns;
            self.deliver(now, h.key, usable_at);
        }
    }

    fn deliver(&mut self, now: Instant, key: K, usable_at: Instant) {
        debug_assert!(usable_at >= now);
        self.stats.delivered += 1;
        self.out.push_back(OptEvent::Deliver { key, usable_at });
        if usable_at > now {
            self.suspicious.push_back(Delivered { key, usable_at });
        }
    }

    fn confirm(&mut self, key: K) {
        debug_assert!(!self.suspicious.iter().any(|d| d.key == key));
        self.stats.confirmed += 1;
        self.out.push_back(OptEvent::Confirm { key });
    }

    fn revoke(&mut self, now: Instant, d: Delivered<K>) {
        let rollback = now >= d.usable_at;
        self.out.push_back(OptEvent::Revoke {
            key: d.key,
            rollback,
        });
        if rollback {
            self.stats.rollbacks += 1;
            self.on_rollback(now);
        } else {
            self.stats.revoked_early += 1;
        }
    }

    /// §5: "multiply the current value of Δ by 1.5 when a rollback occurs and the current
    /// 1-second moving fraction of rollbacks is more than 0.01".
    fn on_rollback(&mut self, now: Instant) {
        let b = self.bucket(now);
        b.2 += 1;
        if self.cfg.adaptive && self.rollback_fraction(now) > self.cfg.rollback_fraction_max {
            let grown = self.delta.now_ns.saturating_mul(3) / 2;
            self.delta.now_ns = grown.clamp(self.cfg.delta_min_ns, self.cfg.delta_max_ns);
            self.stats.delta_grown += 1;
        }
    }

    /// §5: "multiply Δ by .9 every 100 milliseconds or 1000 packets, whichever occurs first, if
    /// the moving fraction of rollbacks is less than 0.01".
    fn count_arrival(&mut self, now: Instant) {
        self.bucket(now).1 += 1;
        if !self.cfg.adaptive {
            return;
        }
        self.delta.arrivals_since_shrink += 1;
        let due = self.delta.arrivals_since_shrink >= self.cfg.shrink_every_arrivals
            || now.0.saturating_sub(self.delta.last_shrink.0) >= self.cfg.shrink_every_ns;
        if due {
            self.delta.arrivals_since_shrink = 0;
            self.delta.last_shrink = now;
            if self.rollback_fraction(now) < self.cfg.rollback_fraction_max {
                let shrunk = self.delta.now_ns * 9 / 10;
                self.delta.now_ns = shrunk.clamp(self.cfg.delta_min_ns, self.cfg.delta_max_ns);
                self.stats.delta_shrunk += 1;
            }
        }
    }

    /// The bucket `now` falls in, emptied if it last held an older period.
    fn bucket(&mut self, now: Instant) -> &mut (u64, u64, u64) {
        let width = self.cfg.window_ns / WINDOW_BUCKETS;
        let n = now.0 / width;
        let b = &mut self.delta.buckets[(n % WINDOW_BUCKETS) as usize];
        if b.0 != n {
            *b = (n, 0, 0);
        }
        b
    }

    /// Rollbacks over arrivals in the buckets of the last window (0 with no arrivals).
    pub fn rollback_fraction(&self, now: Instant) -> f64 {
        let width = self.cfg.window_ns / WINDOW_BUCKETS;
        let n = now.0 / width;
        let (arrivals, rollbacks) = self
            .delta
            .buckets
            .iter()
            .filter(|b| b.0 != u64::MAX && b.0 <= n && n - b.0 < WINDOW_BUCKETS)
            .fold((0u64, 0u64), |(a, r), b| (a + b.1, r + b.2));
        if arrivals == 0 {
            0.0
        } else {
            rollbacks as f64 / arrivals as f64
        }
    }

    fn invariants(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        debug_assert!(
            self.arrived_len() <= self.cfg.len_max && self.seqq.len() <= self.cfg.len_max
        );
        debug_assert!(self.pending.front().is_none_or(|h| h.suspected));
        debug_assert!(
            self.seqq
                .front()
                .is_none_or(|k| !self.pending.iter().any(|h| h.key == *k)
                    && !self.suspicious.iter().any(|d| d.key == *k)),
            "the head of the order is here but was not matched"
        );
        debug_assert!((self.cfg.delta_min_ns..=self.cfg.delta_max_ns).contains(&self.delta.now_ns));
    }
}

impl<K: Copy + Ord + core::fmt::Debug> Pipeline<K> {
    /// [`Pipeline::arrive`] for a driver whose final order is the keys' order (1Pipe's
    /// `(ts, src, psn)`): an arrival that comes before a delivered, unconfirmed message in that
    /// order proves the delivery wrong at once, without waiting for the order to say so. That
    /// message and those delivered after it are revoked and held again (most of the time before
    /// their Tm: no rollback); then the message arrives as usual.
    pub fn arrive_ordered(&mut self, now: Instant, key: K) -> bool {
        if let Some(i) = self.suspicious.iter().position(|d| key < d.key) {
            let wrong: Vec<_> = self.suspicious.drain(i..).collect();
            self.hold_again(now, wrong);
        }
        self.arrive(now, key)
    }
}

#[cfg(test)]
mod tests;
