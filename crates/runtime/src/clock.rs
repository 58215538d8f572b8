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
//! `CLOCK_MONOTONIC` counts from boot, so it is shared by the processes of one machine only.
//! A cluster that spans machines reads [`Clock::realtime`] instead — `CLOCK_REALTIME`, which
//! chrony or a PTP daemon keeps in step across machines. It may be stepped backwards by a
//! correction; the host role keeps its timestamps non-decreasing regardless (§4.1), and a clock
//! that runs behind only delays what others deliver (their barriers wait for its beacons).
//!
//! What it is not: a clock model. The simulator adds offsets and drift; here time is what the
//! kernel says.

use nix::time::{clock_gettime, ClockId};
use onepipe_proto::time::Instant;

/// Which kernel clock a [`Clock`] reads (`clock = "monotonic"` or `"realtime"` in a cluster file).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ClockSource {
    /// `CLOCK_MONOTONIC`: never steps, shared by every process of one machine.
    #[default]
    Monotonic,
    /// `CLOCK_REALTIME`: synchronised across machines by chrony or PTP; may step.
    Realtime,
}

/// Reads a kernel clock as nanoseconds since an epoch. `Copy`: hand the same clock to every
/// driver (and role constructor) that must share a time base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    epoch_ns: u64,
    source: ClockSource,
}

impl Clock {
    /// Nanoseconds since boot: the same readings in every process on this machine.
    pub fn monotonic() -> Clock {
        Clock {
            epoch_ns: 0,
            source: ClockSource::Monotonic,
        }
    }

    /// Nanoseconds since 1970 by `CLOCK_REALTIME`: the same readings on every machine whose
    /// clock chrony or PTP keeps synchronised.
    pub fn realtime() -> Clock {
        Clock {
            epoch_ns: 0,
            source: ClockSource::Realtime,
        }
    }

    /// Epoch 0 of the given source: [`Clock::monotonic`] or [`Clock::realtime`].
    pub fn of(source: ClockSource) -> Clock {
        match source {
            ClockSource::Monotonic => Clock::monotonic(),
            ClockSource::Realtime => Clock::realtime(),
        }
    }

    /// Zero now: readings are nanoseconds of `CLOCK_MONOTONIC` since this call.
    pub fn starting_now() -> Clock {
        Clock {
            epoch_ns: monotonic_ns(),
            source: ClockSource::Monotonic,
        }
    }

    /// Zero at `epoch_ns` nanoseconds of `CLOCK_MONOTONIC` (for example a value one process
    /// chose and passed to the others it starts).
    pub fn with_epoch(epoch_ns: u64) -> Clock {
        Clock {
            epoch_ns,
            source: ClockSource::Monotonic,
        }
    }

    /// The kernel clock this one reads.
    pub fn source(&self) -> ClockSource {
        self.source
    }

    /// The epoch, in `CLOCK_MONOTONIC` nanoseconds.
    pub fn epoch_ns(&self) -> u64 {
        self.epoch_ns
    }

    /// The current reading.
    pub fn now(&self) -> Instant {
        let raw = match self.source {
            ClockSource::Monotonic => monotonic_ns(),
            ClockSource::Realtime => realtime_ns(),
        };
        Instant(raw.saturating_sub(self.epoch_ns))
    }

    /// The `CLOCK_MONOTONIC` reading (nanoseconds) at which this clock reads `t` (for a
    /// realtime clock: by the current offset between the two kernel clocks).
    pub fn to_monotonic_ns(&self, t: Instant) -> u64 {
        let raw = t.as_nanos().saturating_add(self.epoch_ns);
        match self.source {
            ClockSource::Monotonic => raw,
            ClockSource::Realtime => {
                let (mono, real) = (monotonic_ns(), realtime_ns());
                (raw.saturating_add(mono)).saturating_sub(real)
            }
        }
    }
}

/// `CLOCK_REALTIME` in nanoseconds since 1970.
pub fn realtime_ns() -> u64 {
    let ts = clock_gettime(ClockId::CLOCK_REALTIME).expect("CLOCK_REALTIME is readable");
    (ts.tv_sec() as u64) * 1_000_000_000 + ts.tv_nsec() as u64
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
    fn a_realtime_deadline_maps_to_the_same_moment_on_the_monotonic_clock() {
        let c = Clock::realtime();
        assert_eq!(c.source(), ClockSource::Realtime);
        let t = c.now() + 5_000_000;
        let mono = c.to_monotonic_ns(t);
        let expected = monotonic_ns() + 5_000_000;
        assert!(
            mono.abs_diff(expected) < 1_000_000_000,
            "{mono} vs {expected}"
        );
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
