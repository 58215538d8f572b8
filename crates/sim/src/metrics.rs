//! Latency histograms and their JSON summary.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Mean and percentiles of a distribution, ns.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest sample.
    pub max: u64,
}

/// A histogram of nanosecond values from 1 ns to 100 s at 3 significant digits.
#[derive(Debug, Clone)]
pub struct NsHistogram(Histogram<u64>);

impl Default for NsHistogram {
    fn default() -> Self {
        NsHistogram(Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds"))
    }
}

impl NsHistogram {
    /// Adds one sample (clamped into range).
    pub fn record(&mut self, ns: u64) {
        self.0.saturating_record(ns.max(1));
    }

    /// The summary.
    pub fn summary(&self) -> Summary {
        if self.0.is_empty() {
            return Summary::default();
        }
        Summary {
            count: self.0.len(),
            mean: self.0.mean(),
            p50: self.0.value_at_quantile(0.5),
            p99: self.0.value_at_quantile(0.99),
            max: self.0.max(),
        }
    }
}

/// A word-at-a-time multiplicative hash over a stream of u64 words: the run's trace hash.
#[derive(Clone, Copy, Debug)]
pub struct TraceHash(u64);

impl Default for TraceHash {
    fn default() -> Self {
        TraceHash(0xcbf2_9ce4_8422_2325)
    }
}

impl TraceHash {
    /// Mixes in one word.
    #[inline]
    pub fn add(&mut self, x: u64) {
        self.0 = (self.0 ^ x)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }

    /// The hash so far.
    pub fn value(&self) -> u64 {
        self.0
    }
}
