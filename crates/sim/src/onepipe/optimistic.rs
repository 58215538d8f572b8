//! Optimistic delivery in a 1Pipe run (`--optimistic-delta`): the hosts' `OptDeliver`,
//! `Revoke` and `Confirm` events into the optimistic latency, the revoke counts and the hooks'
//! checker ([`crate::optcheck`]), the same as PLATO's in the baselines' runs.

use crate::metrics::NsHistogram;
use crate::optcheck::{OptChecker, OptReport};
use crate::queue::SimTime;
use onepipe_proto::host::{Delivery, HostEvent};
use onepipe_proto::reorder::OrderKey;
use onepipe_proto::Instant;
use std::collections::BTreeMap;

/// An optimistic delivery not yet confirmed or revoked: the workload's sequence number, when
/// it was issued, and Tm, all in true time.
#[derive(Clone, Copy, Debug)]
struct Tentative {
    seq: u64,
    issued: u64,
    usable_at: u64,
}

/// A message at a receiver: (receiver, sender, timestamp, PSN).
type At = (u32, u32, u64, u32);

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
}

/// The workload's (sequence number, issue time) at the head of a payload.
fn header(payload: &[u8]) -> (u64, u64) {
    let word = |i: usize| {
        payload.get(i..i + 8).map_or(u64::MAX, |b| {
            u64::from_be_bytes(b.try_into().expect("8 bytes"))
        })
    };
    (word(0), word(8))
}

/// A message's place in 1Pipe's total order, packed high to low: timestamp, sender, then the
/// sender's sequence number (what PSNs break ties by: send order).
fn place(ts: u64, src: u32, seq: u64) -> u128 {
    u128::from(ts) << 64 | u128::from(src) << 32 | u128::from(seq as u32)
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
        }
    }

    /// `optdeliver` of `d` at true time `cursor`; the host's clock read `local` then.
    fn on_opt_deliver(&mut self, cursor: SimTime, local: Instant, d: &Delivery, usable: Instant) {
        let (seq, issued) = header(&d.payload);
        let usable_at = cursor + usable.0.saturating_sub(local.0);
        let at = (d.dst.0, d.src.0, d.ts.raw(), d.psn.0);
        self.tentative.insert(
            at,
            Tentative {
                seq,
                issued,
                usable_at,
            },
        );
        self.delivered += 1;
        if let Some(c) = self.checker.as_mut() {
            c.on_opt_deliver(cursor, d.dst.0, (d.src.0, seq), usable_at);
        }
    }

    fn take(&mut self, dst: u32, key: OrderKey) -> Tentative {
        let at = (dst, key.src.0, key.ts.raw(), key.psn.0);
        self.tentative
            .remove(&at)
            .unwrap_or_else(|| panic!("a hook for {at:?}, never delivered"))
    }

    /// One of the hosts' hooks (`OptDeliver`, `Revoke`, `Confirm`) at true time `cursor`; the
    /// host's clock read `local` then.
    pub fn on_hook(&mut self, cursor: SimTime, local: Instant, e: HostEvent) {
        match e {
            HostEvent::OptDeliver {
                delivery,
                usable_at,
            } => self.on_opt_deliver(cursor, local, &delivery, usable_at),
            HostEvent::Revoke { dst, key, .. } => self.on_revoke(cursor, dst.0, key),
            HostEvent::Confirm { dst, key } => self.on_confirm(cursor, dst.0, key),
            other => unreachable!("not an optimistic hook: {other:?}"),
        }
    }

    /// `revoke` of `key` at `dst`, at true time `cursor`.
    fn on_revoke(&mut self, cursor: SimTime, dst: u32, key: OrderKey) {
        let t = self.take(dst, key);
        if cursor >= t.usable_at {
            self.rollbacks += 1;
        } else {
            self.revokes_early += 1;
        }
        if let Some(c) = self.checker.as_mut() {
            c.on_revoke(cursor, dst, (key.src.0, t.seq));
        }
    }

    /// `confirm` of `key` at `dst`, at true time `cursor`: the earlier of Tm and now is when the
    /// application could use it for good.
    fn on_confirm(&mut self, cursor: SimTime, dst: u32, key: OrderKey) {
        let t = self.take(dst, key);
        self.latency
            .record(t.usable_at.min(cursor).saturating_sub(t.issued));
        if let Some(c) = self.checker.as_mut() {
            c.on_confirm(cursor, dst, (key.src.0, t.seq));
        }
    }

    /// A best-effort delivery at the barrier (`Deliver`), at true time `cursor`.
    pub fn on_deliver(&mut self, cursor: SimTime, d: &Delivery) {
        if d.reliable {
            return; // optimistic delivery is best effort's only
        }
        let (seq, _) = header(&d.payload);
        if let Some(c) = self.checker.as_mut() {
            c.on_deliver(
                cursor,
                d.dst.0,
                (d.src.0, seq),
                place(d.ts.raw(), d.src.0, seq),
            );
        }
    }

    /// The checker's end-of-run judgement.
    pub fn finish(&mut self, end: SimTime, drained: bool) {
        if let Some(c) = self.checker.as_mut() {
            c.finish(end, drained);
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
        }
    }

    /// The checker's violations, if it ran.
    pub fn violations(&self) -> (u64, Vec<String>) {
        self.checker.as_ref().map_or((0, Vec::new()), |c| {
            let samples = c.violations().iter().map(|v| v.to_string()).collect();
            (c.violation_count(), samples)
        })
    }
}
