//! Optimistic delivery in a run — PLATO's (`--protocol plato`) or 1Pipe's
//! (`--optimistic-delta`): the roles' `optdeliver`, `revoke` and `confirm` hooks into the
//! latency to usable, the revoke counts, a hash of the hooks and their checker
//! ([`crate::optcheck`]). Both drivers feed it the same way; only how they name a message at a
//! receiver differs ([`At`]).

use crate::metrics::{NsHistogram, TraceHash};
use crate::optcheck::{OptChecker, OptReport};
use crate::queue::SimTime;
use onepipe_proto::Instant;
use std::collections::BTreeMap;

/// A message at a receiver: (receiver, sender, and the role's name for it — PLATO's send
/// counter and 0, or 1Pipe's timestamp and PSN).
pub type At = (u32, u32, u64, u32);

/// An optimistic delivery not yet confirmed or revoked: the workload's sequence number, when
/// it was issued, and Tm, all in true time.
#[derive(Clone, Copy, Debug)]
struct Tentative {
    seq: u64,
    issued: u64,
    usable_at: u64,
}

/// The workload's (sequence number, issue time) at the head of a payload.
pub fn header(payload: &[u8]) -> (u64, u64) {
    let word = |i: usize| {
        payload.get(i..i + 8).map_or(u64::MAX, |b| {
            u64::from_be_bytes(b.try_into().expect("8 bytes"))
        })
    };
    (word(0), word(8))
}

/// The optimistic side of a run.
#[derive(Debug)]
pub struct OptRun {
    /// The hooks' checker, when checks are on.
    pub checker: Option<OptChecker>,
    tentative: BTreeMap<At, Tentative>,
    latency: NsHistogram,
    delivered: u64,
    revokes_early: u64,
    rollbacks: u64,
    hooks: TraceHash,
    /// See [`OptReport::held_end`].
    pub held_end: Option<u64>,
}

impl OptRun {
    /// The optimistic side of a run over `procs` processes, checked or not.
    pub fn new(procs: u32, check: bool) -> OptRun {
        OptRun {
            checker: check.then(|| OptChecker::new(procs)),
            tentative: BTreeMap::new(),
            latency: NsHistogram::default(),
            delivered: 0,
            revokes_early: 0,
            rollbacks: 0,
            hooks: TraceHash::default(),
            held_end: None,
        }
    }

    fn hash(&mut self, kind: u64, at: At, cursor: SimTime) {
        self.hooks
            .add(kind << 60 ^ u64::from(at.0) << 32 ^ u64::from(at.1));
        self.hooks.add(at.2 ^ u64::from(at.3) << 32);
        self.hooks.add(cursor);
    }

    /// `optdeliver` of `at` (its payload `payload`) at true time `cursor`, usable from the
    /// role's instant `usable`; the role's clock read `local` then.
    pub fn on_opt_deliver(
        &mut self,
        cursor: SimTime,
        local: Instant,
        at: At,
        payload: &[u8],
        usable: Instant,
    ) {
        let (seq, issued) = header(payload);
        // Tm in true time: as far after now as the role's clock put it.
        let usable_at = cursor + usable.0.saturating_sub(local.0);
        let t = Tentative {
            seq,
            issued,
            usable_at,
        };
        self.tentative.insert(at, t);
        self.delivered += 1;
        self.hash(1, at, cursor);
        if let Some(c) = self.checker.as_mut() {
            c.on_opt_deliver(cursor, at.0, (at.1, seq), usable_at);
        }
    }

    fn take(&mut self, at: At) -> Tentative {
        self.tentative
            .remove(&at)
            .unwrap_or_else(|| panic!("a hook for {at:?}, never delivered optimistically"))
    }

    /// `revoke` of `at` at true time `cursor`; returns whether it was a rollback (at or after
    /// Tm).
    pub fn on_revoke(&mut self, cursor: SimTime, at: At) -> bool {
        let t = self.take(at);
        let rollback = cursor >= t.usable_at;
        if rollback {
            self.rollbacks += 1;
        } else {
            self.revokes_early += 1;
        }
        self.hash(2, at, cursor);
        if let Some(c) = self.checker.as_mut() {
            c.on_revoke(cursor, at.0, (at.1, t.seq));
        }
        rollback
    }

    /// `confirm` of `at` at true time `cursor`: the earlier of Tm and now is when the
    /// application could use it for good. Returns that instant and the latency to it.
    pub fn on_confirm(&mut self, cursor: SimTime, at: At) -> (SimTime, u64) {
        let t = self.take(at);
        let usable = t.usable_at.min(cursor);
        let latency_ns = usable.saturating_sub(t.issued);
        self.latency.record(latency_ns);
        self.hash(3, at, cursor);
        if let Some(c) = self.checker.as_mut() {
            c.on_confirm(cursor, at.0, (at.1, t.seq));
        }
        (usable, latency_ns)
    }

    /// A final delivery of message `seq` of `src` at `dst`, at place `place` of the total
    /// order (see [`OptChecker::on_deliver`]), at true time `cursor`.
    pub fn on_deliver(&mut self, cursor: SimTime, dst: u32, src: u32, seq: u64, place: u128) {
        if let Some(c) = self.checker.as_mut() {
            c.on_deliver(cursor, dst, (src, seq), place);
        }
    }

    /// The checker's end-of-run judgement, of leftovers only in the views `judged` names.
    pub fn finish(&mut self, end: SimTime, drained: bool, judged: impl Fn(u32) -> bool) {
        if let Some(c) = self.checker.as_mut() {
            c.finish_where(end, drained, judged);
        }
    }

    /// The report, with Δ averaged over `deltas` (every receiver's at the end).
    pub fn report(&self, deltas: &[u64]) -> OptReport {
        let latency_ns = self.latency.summary();
        OptReport {
            delivered: self.delivered,
            revokes_early: self.revokes_early,
            rollbacks: self.rollbacks,
            rollback_fraction: self.rollbacks as f64 / latency_ns.count.max(1) as f64,
            latency_ns,
            delta_ns_end: deltas.iter().sum::<u64>() as f64 / deltas.len().max(1) as f64,
            violations: self.checker.as_ref().map_or(0, OptChecker::violation_count),
            hooks_hash: format!("{:016x}", self.hooks.value()),
            held_end: self.held_end,
            unjudged_end: self.checker.as_ref().map(OptChecker::unjudged_end),
        }
    }

    /// The checker's violations and their first samples (none when it did not run).
    pub fn violations(&self) -> (u64, Vec<String>) {
        self.checker.as_ref().map_or((0, Vec::new()), |c| {
            let samples = c.violations().iter().map(|v| v.to_string()).collect();
            (c.violation_count(), samples)
        })
    }
}
