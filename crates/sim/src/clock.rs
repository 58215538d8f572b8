//! Per-node clock model (§7.1): offset, drift and periodic synchronisation with residual error.
//!
//! Each node's local clock reads `epoch + t + offset_k + drift * (t - sync_k)` at true time `t`
//! in sync period `k` (periods of `sync_interval_ns`, starting at true time 0). At every period
//! boundary the clock is re-synchronised: a fresh residual offset is drawn from a Laplace
//! distribution whose mean absolute value is `skew_ns` (PTP in the paper's testbed: 0.3 µs mean,
//! 1.0 µs at p95; a Laplace with scale 0.3 µs has p95 of |x| = 0.9 µs). The step at a boundary may
//! be backwards; protocol roles must cope, and the host's timestamps stay non-decreasing anyway.
//!
//! Injected faults (`--clock-step`, drawn by `onepipe vopr`): at a given true time a clock steps
//! by a fixed amount, forward or backward, and stays stepped (a bad sync, an operator setting
//! the time). Roles must cope as with the sync steps: the host's timestamps stay non-decreasing.
//!
//! Everything is a pure function of (seed, node, period, steps), so a clock can be read in any
//! order.

use onepipe_proto::rng::Rng;
use onepipe_proto::Instant;

/// Parameters shared by every clock of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClockParams {
    /// Mean absolute residual offset after a sync, ns.
    pub skew_ns: f64,
    /// Largest drift rate, parts per million (each node draws uniformly in ±drift_ppm).
    pub drift_ppm: f64,
    /// Time between synchronisations, ns.
    pub sync_interval_ns: u64,
    /// Local clocks read about this much at true time 0 (keeps readings positive; set near 2^48
    /// to exercise timestamp wrap-around).
    pub epoch_ns: u64,
}

/// One node's clock.
#[derive(Clone, Debug)]
pub struct Clock {
    params: ClockParams,
    seed: u64,
    drift: f64,
    /// Cached (period, offset) of the last period read.
    period: u64,
    offset: f64,
    /// Injected steps: (true time, signed ns), sorted by time; each applies from its time on.
    steps: Vec<(u64, i64)>,
}

impl Clock {
    /// The clock of node `node` in a run seeded `seed`.
    pub fn new(params: ClockParams, seed: u64, node: u32) -> Clock {
        let seed = seed ^ (node as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut rng = Rng::new(seed);
        let drift = (rng.unit_f64() * 2.0 - 1.0) * params.drift_ppm * 1e-6;
        let mut c = Clock {
            params,
            seed,
            drift,
            period: 0,
            offset: 0.0,
            steps: Vec::new(),
        };
        c.offset = c.offset_of(0);
        c
    }

    /// The same clock, stepped by `ns` at each true time `at` of `steps` (`--clock-step`).
    pub fn with_steps(mut self, mut steps: Vec<(u64, i64)>) -> Clock {
        steps.sort_by_key(|s| s.0);
        self.steps = steps;
        self
    }

    /// The sum of the steps taken by true time `t`.
    #[inline]
    fn stepped(&self, t: u64) -> f64 {
        self.steps
            .iter()
            .take_while(|s| s.0 <= t)
            .map(|s| s.1 as f64)
            .sum()
    }

    fn offset_of(&self, period: u64) -> f64 {
        if self.params.skew_ns <= 0.0 {
            return 0.0;
        }
        let mut rng = Rng::new(self.seed ^ period.wrapping_mul(0xD605_7A3B_0F2C_5E1D));
        rng.laplace(self.params.skew_ns)
    }

    fn period_of(&self, t: u64) -> u64 {
        t / self.params.sync_interval_ns.max(1)
    }

    fn enter(&mut self, period: u64) {
        if period != self.period {
            self.period = period;
            self.offset = self.offset_of(period);
        }
    }

    /// The local reading at true time `t`.
    #[inline]
    pub fn local(&mut self, t: u64) -> Instant {
        // Fast path: still in the cached sync period (no division).
        let start = self.period * self.params.sync_interval_ns;
        if t < start || t - start >= self.params.sync_interval_ns {
            self.enter(self.period_of(t));
        }
        let start = self.period * self.params.sync_interval_ns;
        let since_sync = (t - start) as f64;
        let mut v = (self.params.epoch_ns + t) as f64 + self.offset + self.drift * since_sync;
        if !self.steps.is_empty() {
            v += self.stepped(t);
        }
        Instant(v.max(0.0) as u64)
    }

    /// The earliest true time `>= now` at which the local reading is `>= target`, or the next
    /// sync boundary or injected step if the reading does not get there before it (the caller
    /// re-asks then).
    pub fn true_time_of(&mut self, target: Instant, now: u64) -> u64 {
        if self.local(now) >= target {
            return now;
        }
        let k = self.period_of(now);
        let start = k * self.params.sync_interval_ns;
        let mut boundary = start.saturating_add(self.params.sync_interval_ns);
        if let Some(&(at, _)) = self.steps.iter().find(|s| s.0 > now) {
            boundary = boundary.min(at);
        }
        let stepped = self.stepped(now);
        // Solve epoch + t + offset + stepped + drift * (t - start) = target for t.
        let t = (target.0 as f64 - self.params.epoch_ns as f64 - self.offset - stepped
            + self.drift * start as f64)
            / (1.0 + self.drift);
        let mut t = (t.max(now as f64).ceil() as u64).max(now);
        // Float rounding: step forward until the reading is really there.
        while t < boundary && self.local(t) < target {
            t += 1;
        }
        t.min(boundary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(skew: f64, drift: f64) -> ClockParams {
        ClockParams {
            skew_ns: skew,
            drift_ppm: drift,
            sync_interval_ns: 1_000_000,
            epoch_ns: 1_000_000_000,
        }
    }

    #[test]
    fn skew_statistics_match_7_1() {
        let mut abs = Vec::new();
        for node in 0..4000 {
            let mut c = Clock::new(params(300.0, 0.0), 7, node);
            abs.push((c.local(0).0 as f64 - 1e9).abs());
        }
        abs.sort_by(f64::total_cmp);
        let mean = abs.iter().sum::<f64>() / abs.len() as f64;
        let p95 = abs[abs.len() * 95 / 100];
        assert!((250.0..350.0).contains(&mean), "mean {mean}");
        assert!((700.0..1100.0).contains(&p95), "p95 {p95}");
    }

    #[test]
    fn true_time_of_inverts_local_with_drift() {
        let mut c = Clock::new(params(300.0, 50.0), 3, 1);
        for target in [1_000_000_500u64, 1_000_123_456, 1_000_900_000] {
            let t = c.true_time_of(Instant(target), 0);
            assert!(c.local(t) >= Instant(target));
            assert!(t == 0 || c.local(t - 1) < Instant(target));
        }
    }

    #[test]
    fn injected_steps_move_the_reading_and_timers_re_ask_at_a_step() {
        let plain = Clock::new(params(0.0, 0.0), 5, 2);
        let mut c = plain
            .clone()
            .with_steps(vec![(2_000, 30_000), (1_000, -5_000)]);
        let mut p = plain;
        assert_eq!(c.local(999), p.local(999));
        assert_eq!(c.local(1_000).0, p.local(1_000).0 - 5_000, "stepped back");
        assert_eq!(c.local(2_000).0, p.local(2_000).0 + 25_000, "then forward");
        // A target the clock reaches only by stepping forward: the timer fires at the step.
        let target = Instant(p.local(2_000).0 + 10_000);
        assert_eq!(c.true_time_of(target, 1_500), 2_000);
        assert!(c.local(2_000) >= target);
        // Before the backward step: wake at the step, then re-ask.
        let target = Instant(p.local(1_200).0);
        assert_eq!(c.true_time_of(target, 500), 1_000);
        let t = c.true_time_of(target, 1_000);
        assert!(c.local(t) >= target && c.local(t - 1) < target);
    }

    #[test]
    fn same_seed_same_clock() {
        let mut a = Clock::new(params(300.0, 10.0), 5, 9);
        let mut b = Clock::new(params(300.0, 10.0), 5, 9);
        for t in (0..5_000_000).step_by(333_333) {
            assert_eq!(a.local(t), b.local(t));
        }
    }
}
