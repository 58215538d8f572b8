//! The driver's clock: `CLOCK_MONOTONIC` mapped to `onepipe_proto::time::Instant`.
//!
//! Every process on one machine reads the same `CLOCK_MONOTONIC`, so drivers whose clocks share
//! an epoch share a time base — which is what 1Pipe's timestamps need (§4.1: a receiver delivers
//! `T` only after every sender's clock has passed `T`). [`Clock::monotonic`] (epoch 0: nanoseconds
//! since boot) gives every process on a machine the same readings without coordination;
//! [`Clock::starting_now`] gives small numbers for one process's drivers. Across machines the
//! clocks must be synchronised (PTP or chrony); poor synchronisation delays delivery, it never
//! disorders it.
//!
//! What it is not: a clock model. The simulator adds offsets and drift; here time is what the
//! kernel says.

use nix::time::{clock_gettime, ClockId};
use onepipe_proto::time::Instant;

/// Reads `CLOCK_MONOTONIC` as nanoseconds since an epoch. `Copy`: hand the same clock to every
/// driver (and role constructor) that must share a time base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    epoch_ns: u64,
}

impl Clock {
    /// Nanoseconds since boot: the same readings in every process on this machine.
    pub fn monotonic() -> Clock {
        Clock { epoch_ns: 0 }
    }

    /// Zero now: readings are nanoseconds since this call.
    pub fn starting_now() -> Clock {
        Clock {
            epoch_ns: monotonic_ns(),
        }
    }

    /// Zero at `epoch_ns` nanoseconds of `CLOCK_MONOTONIC` (for example a value one process
    /// chose and passed to the others it starts).
    pub fn with_epoch(epoch_ns: u64) -> Clock {
        Clock { epoch_ns }
    }

    /// The epoch, in `CLOCK_MONOTONIC` nanoseconds.
    pub fn epoch_ns(&self) -> u64 {
        self.epoch_ns
    }

    /// The current reading.
    pub fn now(&self) -> Instant {
        Instant(monotonic_ns().saturating_sub(self.epoch_ns))
    }

    /// The `CLOCK_MONOTONIC` reading (nanoseconds) at which this clock reads `t`.
    pub fn to_monotonic_ns(&self, t: Instant) -> u64 {
        t.as_nanos().saturating_add(self.epoch_ns)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC exists on every Linux; a failure here is an environment bug, not input.
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is readable");
    (ts.tv_sec() as u64) * 1_000_000_000 + ts.tv_nsec() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_with_one_epoch_share_a_time_base() {
        let a = Clock::starting_now();
        let b = Clock::with_epoch(a.epoch_ns());
        let (ta, tb) = (a.now(), b.now());
        assert!(tb >= ta, "b was read after a");
        assert!(tb.as_nanos() - ta.as_nanos() < 1_000_000_000);
        assert_eq!(a.to_monotonic_ns(Instant(5)), a.epoch_ns() + 5);
    }

    #[test]
    fn monotonic_readings_never_decrease() {
        let c = Clock::monotonic();
        let mut last = c.now();
        for _ in 0..1000 {
            let t = c.now();
            assert!(t >= last);
            last = t;
        }
    }
}
