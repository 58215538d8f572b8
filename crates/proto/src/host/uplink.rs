//! The host's side of its uplink (§4.2): whether its first-hop switch is alive, what the host
//! last told it, and when the next beacon is due. The host calls in; this part sends nothing
//! itself — it says when a beacon is wanted and when the switch just fell silent.

use crate::time::{next_tick, Instant, Timestamp};
use crate::wire::Packet;

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Uplink {
    interval_ns: u64,
    /// Beacon times in a row without a word from the switch before it is taken for dead; 0
    /// never.
    timeout_intervals: u32,
    /// Heard from the first-hop switch since the last beacon time.
    heard: bool,
    /// Beacon times in a row it was silent.
    silent: u32,
    /// The first-hop switch spoke at least once: silence before that is a network still
    /// starting, not a failure (see [`Uplink::watch`]).
    spoke: bool,
    /// Sent anything on the uplink since the last beacon time: if not, the beacon goes even if
    /// it tells nothing new — a keep-alive, like a switch's (§4.2), so the first-hop switch
    /// does not take an idle host whose barrier stands still (its clock stepped back) for dead.
    active: bool,
    /// The barrier the last packet sent on the uplink carried, if it carried one.
    last_barrier: Option<Timestamp>,
    /// Likewise for the commit barrier.
    last_commit: Option<Timestamp>,
    next_beacon: Instant,
    /// The barrier of the last beacon: beacons never go backwards.
    last_beacon_barrier: Timestamp,
    /// The fast beacon grid ([`crate::host::HostConfig::beacon_fast_interval_ns`]; 0: none)
    /// and its next tick.
    fast_interval_ns: u64,
    next_fast: Instant,
    /// Whether the last beacon sent asked for demand ([`crate::wire::Beacon::demand`]).
    last_demand: bool,
}

impl Uplink {
    /// At local time `now`, with beacons every `interval_ns`.
    pub(crate) fn new(now: Instant, interval_ns: u64, timeout_intervals: u32) -> Uplink {
        Uplink {
            interval_ns,
            timeout_intervals,
            heard: false,
            silent: 0,
            spoke: false,
            active: false,
            last_barrier: None,
            last_commit: None,
            next_beacon: next_tick(now, interval_ns, 0),
            last_beacon_barrier: now.timestamp(),
            fast_interval_ns: 0,
            next_fast: now,
            last_demand: false,
        }
    }

    /// Beacons also at the ticks of `interval_ns` when asked ([`Uplink::next_fast_beacon`]).
    pub(crate) fn with_fast(mut self, now: Instant, interval_ns: u64) -> Uplink {
        self.fast_interval_ns = interval_ns;
        if interval_ns > 0 {
            self.next_fast = next_tick(now, interval_ns, 0);
        }
        self
    }

    /// The next fast beacon tick, if there is a fast grid.
    pub(crate) fn next_fast_beacon(&self) -> Option<Instant> {
        (self.fast_interval_ns > 0).then_some(self.next_fast)
    }

    /// A fast beacon at `now`: the barrier it carries — the latest fast tick that has passed,
    /// never below the last beacon's (valid for the reason [`Uplink::beacon_barrier`] gives).
    /// Schedules the next fast tick.
    pub(crate) fn fast_barrier(&mut self, now: Instant) -> Timestamp {
        let interval = self.fast_interval_ns;
        debug_assert!(interval > 0, "no fast grid");
        self.next_fast = next_tick(now, interval, 0);
        (self.next_fast - interval)
            .timestamp()
            .max_wrapping(self.last_beacon_barrier)
    }

    /// Whether a beacon with `barrier` and `commit` tells the switch something new (a fast
    /// beacon goes only then: it is never a keep-alive).
    pub(crate) fn tells_news(&self, barrier: Timestamp, commit: Timestamp) -> bool {
        self.last_barrier.is_none_or(|last| last < barrier)
            || self.last_commit.is_none_or(|last| last < commit)
    }

    /// A fast beacon went out with `barrier`: later beacons never go below it.
    pub(crate) fn fast_beaconed(&mut self, barrier: Timestamp) {
        debug_assert_eq!(
            barrier.max_wrapping(self.last_beacon_barrier),
            barrier,
            "beacons never go backwards"
        );
        self.last_beacon_barrier = barrier;
    }

    /// The highest barrier and commit barrier told on the uplink so far (by data or beacon):
    /// a beacon never tells less.
    pub(crate) fn told(&self) -> (Option<Timestamp>, Option<Timestamp>) {
        (self.last_barrier, self.last_commit)
    }

    /// Whether the last beacon sent asked for demand.
    pub(crate) fn last_demand(&self) -> bool {
        self.last_demand
    }

    /// Fast beacons are wanted from now on: the next fast tick is now (a host's demand is
    /// announced at once, not at the next tick).
    pub(crate) fn fast_now(&mut self, now: Instant) {
        if self.fast_interval_ns > 0 {
            self.next_fast = self.next_fast.min(now);
        }
    }

    /// No fast beacons wanted now: the next fast tick is taken from `now` when they are again.
    pub(crate) fn idle_fast(&mut self, now: Instant) {
        if self.fast_interval_ns > 0 && self.next_fast < now {
            self.next_fast = next_tick(now, self.fast_interval_ns, 0);
        }
    }

    /// A packet arrived from the switch.
    pub(crate) fn heard(&mut self) {
        self.heard = true;
        self.spoke = true;
        self.silent = 0;
    }

    /// The switch is known to speak (a host that rejoined asked because it heard it): silence
    /// counts from now on.
    pub(crate) fn assume_spoke(&mut self) {
        self.spoke = true;
    }

    /// It spoke, and within the last beacon interval.
    pub(crate) fn hears_switch(&self) -> bool {
        self.spoke && self.silent == 0
    }

    /// False once the switch has been silent for the timeout; true again as soon as anything
    /// arrives from it.
    pub(crate) fn alive(&self) -> bool {
        self.timeout_intervals == 0 || self.silent < self.timeout_intervals
    }

    /// `packet` goes out on the uplink: what it tells the switch.
    pub(crate) fn sent(&mut self, packet: &Packet) {
        self.active = true;
        match packet {
            Packet::Data(d) => {
                if let Some(b) = d.header.barrier() {
                    self.last_barrier = Some(b);
                }
                if let Some(c) = d.header.commit() {
                    self.last_commit = Some(c);
                }
            }
            Packet::Beacon(b) => {
                self.last_barrier = Some(b.barrier);
                self.last_commit = Some(b.commit);
                self.last_demand = b.demand;
            }
            Packet::Nak(_) | Packet::Ack(_) | Packet::AckBatch(_) => {}
        }
    }

    /// When the next beacon is due.
    pub(crate) fn next_beacon(&self) -> Instant {
        self.next_beacon
    }

    /// §4.2: at a beacon time, one more interval of silence, unless the switch spoke. Returns
    /// true exactly when it has now been silent for the timeout: it is taken for dead. Only
    /// once the switch has spoken: in switch-CPU mode with a large clock skew the first-hop
    /// switch's synchronized beacon phase (one hop per layer above it) can exceed the timeout,
    /// and a host that reported it dead at start-up got its healthy rack declared failed at the
    /// next real failure (VOPR seed 59).
    pub(crate) fn watch(&mut self) -> bool {
        let timeout = self.timeout_intervals;
        if timeout == 0 || !self.spoke || std::mem::take(&mut self.heard) {
            return false;
        }
        self.silent = self.silent.saturating_add(1);
        self.silent == timeout
    }

    /// The barrier a beacon at `now` carries: the latest beacon time that has passed (the one
    /// due, or a later one if the timer fired late — a busy CPU — so a late beacon still
    /// reports everything it can), never below the last beacon's. It is the synchronized beacon
    /// time itself, not the clock reading a little after it: every host of a wave then reports
    /// the same value, so a switch's minimum moves once per wave. It is a valid barrier: every
    /// later timestamp is at least the clock, which is past the beacon time.
    pub(crate) fn beacon_barrier(&self, now: Instant) -> Timestamp {
        let interval = self.interval_ns;
        let latest_tick = self.next_beacon.max(next_tick(now, interval, 0) - interval);
        latest_tick
            .timestamp()
            .max_wrapping(self.last_beacon_barrier)
    }

    /// Whether a beacon with `barrier` and `commit` is wanted this beacon time: it tells the
    /// switch something new, or beacons always go (`always`), or nothing else went out since
    /// the last beacon time (a keep-alive). Starts the next interval's activity count.
    pub(crate) fn wants_beacon(
        &mut self,
        barrier: Timestamp,
        commit: Timestamp,
        always: bool,
    ) -> bool {
        let stale = self.last_barrier.is_none_or(|last| last < barrier)
            || self.last_commit.is_none_or(|last| last < commit);
        let keep_alive = !std::mem::take(&mut self.active);
        stale || always || keep_alive
    }

    /// The beacon with `barrier` went out: it is not activity of the next interval.
    pub(crate) fn beaconed(&mut self, barrier: Timestamp) {
        self.fast_beaconed(barrier);
        self.active = false;
    }

    /// The beacon time at `now` is done: the next one is the next tick.
    pub(crate) fn schedule(&mut self, now: Instant) {
        self.next_beacon = next_tick(now, self.interval_ns, 0);
    }

    /// The clock stepped back (a sync correction, or an injected step): the next beacon time,
    /// computed from the clock before the step, may be many intervals ahead of it, and waiting
    /// for it would leave the uplink silent until then — long enough for the first-hop switch
    /// to take this host for dead (VOPR seed 433: a 49 µs step back). Beacons resume on the
    /// stepped clock's schedule; they carry the last barrier until the clock passes it
    /// (`beacon_barrier` keeps it monotone), which is still a valid barrier: every later
    /// timestamp is at least the host's counter, which is past it.
    pub(crate) fn follow_clock_step_back(&mut self, now: Instant) {
        let next = next_tick(now, self.interval_ns, 0);
        if self.next_beacon > next {
            self.next_beacon = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_is_dead_after_the_timeout_only_once_it_spoke() {
        let mut u = Uplink::new(Instant(0), 10, 3);
        assert!(
            !(0..10).any(|_| u.watch()),
            "never spoke: starting, not dead"
        );
        u.heard();
        assert!(u.hears_switch());
        assert!(!u.watch(), "it spoke this interval");
        assert_eq!([u.watch(), u.watch(), u.watch()], [false, false, true]);
        assert!(!u.alive() && !u.hears_switch());
        assert!(!u.watch(), "reported once");
        u.heard();
        assert!(u.alive());
    }

    #[test]
    fn beacons_carry_the_latest_tick_and_never_go_back() {
        let mut u = Uplink::new(Instant(5), 10, 0);
        assert_eq!(u.next_beacon(), Instant(10));
        // Fired late, at 37: the latest tick passed is 30.
        let b = u.beacon_barrier(Instant(37));
        assert_eq!(b, Timestamp::new(30));
        assert!(u.wants_beacon(b, b, false), "nothing told yet");
        u.beaconed(b);
        u.schedule(Instant(37));
        assert_eq!(u.next_beacon(), Instant(40));
        // The clock steps back to 12: beacons follow it, with the last barrier.
        u.follow_clock_step_back(Instant(12));
        assert_eq!(u.next_beacon(), Instant(20));
        assert_eq!(u.beacon_barrier(Instant(20)), Timestamp::new(30));
    }
}
