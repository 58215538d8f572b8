//! Time newtypes: local clock instants, 48-bit message timestamps and barriers.
//!
//! An [`Instant`] is a node's *local* monotonic-ish clock reading in nanoseconds (the simulator
//! hands each node its own reading from a clock model; the UDP runtime reads `CLOCK_MONOTONIC`).
//! It is a plain `u64` and never wraps in practice.
//!
//! A [`Timestamp`] is what travels on the wire: the low 48 bits of a host's clock (1Pipe §6.1: "A
//! timestamp is a 48-bit integer, indicating the number of nanoseconds passed on the host"). 48 bits
//! of nanoseconds wrap every ~78 hours, so timestamps are compared the way TCP compares sequence
//! numbers under PAWS (§6.1, RFC 7323): `a < b` iff `(b - a) mod 2^48` lies in `(0, 2^47)`. This is a
//! total order on any set of timestamps spanning less than 2^47 ns (~39 hours), which every buffer
//! and window in onepipe does by a wide margin.
//!
//! A [`Barrier`] is a timestamp with a promise attached (§4.1): every *future* packet on the link it
//! came from carries a message timestamp `>=` it. A receiver therefore delivers messages whose
//! timestamp is strictly below its barrier.

use core::cmp::Ordering;
use core::fmt;
use core::ops::{Add, Sub};

/// Number of bits of a wire timestamp (1Pipe §6.1).
pub const TIMESTAMP_BITS: u32 = 48;
/// Mask selecting the low 48 bits.
pub const TIMESTAMP_MASK: u64 = (1 << TIMESTAMP_BITS) - 1;
/// Half the timestamp space: the largest distance at which comparison is still meaningful.
pub const TIMESTAMP_HALF: u64 = 1 << (TIMESTAMP_BITS - 1);

/// The beacon interval every role and the simulator default to: 3 µs, the paper's (§7.1: "We
/// choose beacon interval to be 3 µs"). The live runtime's own default is longer (a datagram costs µs of
/// kernel time there): `onepipe_runtime::roles`.
pub const BEACON_INTERVAL_NS_DEFAULT: u64 = 3_000;

/// A node's local clock reading, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(pub u64);

impl Instant {
    /// The zero instant.
    pub const ZERO: Instant = Instant(0);

    /// Nanoseconds since the clock's origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self - earlier`, or zero if `earlier` is later (a clock that stepped backwards).
    pub fn saturating_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// The wire timestamp of this instant: its low 48 bits.
    pub const fn timestamp(self) -> Timestamp {
        Timestamp::new(self.0)
    }
}

impl Add<u64> for Instant {
    type Output = Instant;
    fn add(self, ns: u64) -> Instant {
        Instant(self.0 + ns)
    }
}

impl Sub<u64> for Instant {
    type Output = Instant;
    fn sub(self, ns: u64) -> Instant {
        Instant(self.0.saturating_sub(ns))
    }
}

/// A 48-bit message timestamp with wrap-safe ordering.
///
/// ```
/// use onepipe_proto::time::{Timestamp, TIMESTAMP_MASK};
/// let before_wrap = Timestamp::new(TIMESTAMP_MASK - 5);
/// let after_wrap = Timestamp::new(3);
/// assert!(before_wrap < after_wrap);
/// assert_eq!(after_wrap.distance_from(before_wrap), 9);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// Wraps `ns` into the 48-bit timestamp space.
    pub const fn new(ns: u64) -> Timestamp {
        Timestamp(ns & TIMESTAMP_MASK)
    }

    /// The raw 48-bit value.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// Signed distance `self - earlier` in the wrapped space, in `(-2^47, 2^47]`.
    pub const fn signed_distance(self, earlier: Timestamp) -> i64 {
        let diff = self.0.wrapping_sub(earlier.0) & TIMESTAMP_MASK;
        // Sign-extend the 48-bit difference.
        ((diff << (64 - TIMESTAMP_BITS)) as i64) >> (64 - TIMESTAMP_BITS)
    }

    /// `self - earlier` in nanoseconds when `self >= earlier`, else zero.
    pub const fn distance_from(self, earlier: Timestamp) -> u64 {
        let d = self.signed_distance(earlier);
        if d > 0 {
            d as u64
        } else {
            0
        }
    }

    /// The timestamp `ns` nanoseconds later (wrapping).
    pub const fn plus(self, ns: u64) -> Timestamp {
        Timestamp::new(self.0.wrapping_add(ns))
    }

    /// The later of two timestamps under wrap-safe ordering.
    pub fn max_wrapping(self, other: Timestamp) -> Timestamp {
        if other > self {
            other
        } else {
            self
        }
    }

    /// The earlier of two timestamps under wrap-safe ordering.
    pub fn min_wrapping(self, other: Timestamp) -> Timestamp {
        if other < self {
            other
        } else {
            self
        }
    }
}

impl Ord for Timestamp {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        self.signed_distance(*other).cmp(&0)
    }
}

impl PartialOrd for Timestamp {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }

    #[inline]
    fn lt(&self, other: &Self) -> bool {
        self.signed_distance(*other) < 0
    }

    #[inline]
    fn ge(&self, other: &Self) -> bool {
        self.signed_distance(*other) >= 0
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T{}", self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A barrier timestamp (1Pipe §4.1): a lower bound on every future message timestamp from the
/// link or node it describes. Messages with a timestamp strictly below it may be delivered.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Barrier(pub Timestamp);

impl Barrier {
    /// The barrier as a timestamp.
    pub const fn timestamp(self) -> Timestamp {
        self.0
    }

    /// True if a message stamped `ts` lies strictly below this barrier and may be delivered.
    pub fn admits(self, ts: Timestamp) -> bool {
        ts < self.0
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "B{}", self.0 .0)
    }
}

/// The first instant strictly after `now` that is congruent to `phase` modulo `interval`: the
/// synchronized beacon times of §4.2 (every node — host or switch — derives them from its own
/// synchronized clock).
pub fn next_tick(now: Instant, interval: u64, phase: u64) -> Instant {
    debug_assert!(interval > 0);
    let phase = phase % interval;
    let n = now.as_nanos();
    let k = if n < phase {
        0
    } else {
        (n - phase) / interval + 1
    };
    Instant(k * interval + phase)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordering_across_the_wrap_6_1_paws() {
        let a = Timestamp::new(TIMESTAMP_MASK);
        let b = Timestamp::new(0);
        assert!(a < b);
        assert_eq!(b.signed_distance(a), 1);
        assert_eq!(a.signed_distance(b), -1);
        assert_eq!(a.max_wrapping(b), b);
        assert_eq!(a.min_wrapping(b), a);
    }

    #[test]
    fn instant_timestamp_keeps_low_48_bits() {
        let i = Instant((7 << 48) | 12345);
        assert_eq!(i.timestamp().raw(), 12345);
    }

    #[test]
    fn barrier_admits_strictly_below() {
        let b = Barrier(Timestamp::new(100));
        assert!(b.admits(Timestamp::new(99)));
        assert!(!b.admits(Timestamp::new(100)));
        assert!(!b.admits(Timestamp::new(101)));
    }

    proptest! {
        #[test]
        fn comparison_agrees_with_integers_within_half_space(base in 0u64..u64::MAX / 2,
                                                             d in 0u64..TIMESTAMP_HALF) {
            let a = Timestamp::new(base);
            let b = Timestamp::new(base + d);
            prop_assert!(a <= b);
            prop_assert_eq!(a == b, d == 0);
            prop_assert_eq!(b.distance_from(a), d);
            prop_assert_eq!(a.plus(d), b);
        }

        #[test]
        fn ordering_is_antisymmetric(x in any::<u64>(), y in any::<u64>()) {
            let a = Timestamp::new(x);
            let b = Timestamp::new(y);
            prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
        }
    }
}
