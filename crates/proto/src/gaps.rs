//! How regularly an input link brings barriers: when it last brought one and the largest gap
//! between two it brought (§4.2: a link's barrier must keep rising, or the barrier of everyone
//! below it stalls). A counter for metrics, kept by the host for its uplink and by a switch for
//! each input; it changes nothing in the protocol.
//!
//! What it is not: failure detection. A silent link is timed out by its receiver's beacon-time
//! count (§4.2), which this does not feed.

use crate::time::Instant;

/// The arrivals of barrier updates on one input link (a beacon, or a data packet carrying a
/// barrier). Two words; no allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BarrierGaps {
    /// When the last barrier update arrived; `None` before the first.
    pub last: Option<Instant>,
    /// The largest interval between two consecutive updates, ns (0 before the second). A clock
    /// that steps backwards makes that interval 0, not negative.
    pub gap_max_ns: u64,
}

impl BarrierGaps {
    /// A barrier update arrived at `now`.
    #[inline]
    pub fn heard(&mut self, now: Instant) {
        if let Some(last) = self.last {
            self.gap_max_ns = self.gap_max_ns.max(now.saturating_since(last));
        }
        self.last = Some(now);
    }

    /// Time since the last update at `now`, ns; `None` before the first.
    pub fn since_ns(&self, now: Instant) -> Option<u64> {
        self.last.map(|l| now.saturating_since(l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_gap_between_consecutive_updates_is_kept() {
        let mut g = BarrierGaps::default();
        assert_eq!(g.since_ns(Instant(5)), None);
        g.heard(Instant(100));
        assert_eq!(g.gap_max_ns, 0, "one update has no gap");
        g.heard(Instant(400));
        g.heard(Instant(500));
        assert_eq!(g.gap_max_ns, 300);
        assert_eq!(g.since_ns(Instant(1_000)), Some(500));
        // A clock stepped back: no negative gap, and the next is measured from there.
        g.heard(Instant(50));
        assert_eq!(g.gap_max_ns, 300);
        g.heard(Instant(450));
        assert_eq!(g.gap_max_ns, 400);
    }
}
