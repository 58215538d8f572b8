//! The checker of optimistic delivery (PLATO's three hooks: `crate::baseline` runs of
//! `--protocol plato`, and 1Pipe runs with `--optimistic-delta`): what each receiver's application saw, rebuilt from the hooks alone and
//! judged against what optimistic delivery promises. It is written from PLATO's §4.1, not from
//! the pipeline it checks (`onepipe_proto::optimistic`), and never calls it.
//!
//! The application's view at a receiver is its confirmed messages in the total order, then the
//! delivered, unconfirmed ones in delivery order. Checked:
//! * `opt-view` — a revoke names a message delivered and not yet revoked or confirmed (so
//!   nothing confirmed is ever revoked, and every revoke precedes the final delivery); a confirm
//!   names the first unconfirmed message of the view (confirms come in view order); a message
//!   is not delivered twice without a revoke between;
//! * `opt-confirm` — every final delivery (`Deliver`) of an optimistic run is the message just
//!   confirmed, and every confirm is followed by its delivery (the confirmed sequence *is* the
//!   total order, which the main checker judges);
//! * `opt-below` — no message is delivered optimistically once a message after it in the
//!   total order has been confirmed at that receiver (judged at the end, when every message's
//!   place is known);
//! * `opt-dangling` — a drained run leaves nothing delivered and neither confirmed nor revoked.
//!
//! Counted, not judged: revokes before Tm (free for the application) and after it (rollbacks,
//! PLATO's metric), from the true times of the revoke and of Tm.

use crate::baseline::check::Violation;
use crate::metrics::Summary;
use std::collections::BTreeMap;

/// What optimistic delivery did in a run (PLATO, or 1Pipe with `--optimistic-delta`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct OptReport {
    /// `optdeliver`s (a message revoked and delivered again counts twice).
    pub delivered: u64,
    /// Revokes before Tm: free for the application.
    pub revokes_early: u64,
    /// Revokes at or after Tm: rollbacks, PLATO's metric.
    pub rollbacks: u64,
    /// Rollbacks over confirmed deliveries.
    pub rollback_fraction: f64,
    /// Send → usable latency of the confirmed optimistic deliveries: the earlier of Tm and
    /// the confirm, true time.
    pub latency_ns: Summary,
    /// Δ at the end of the run, ns, averaged over the receivers.
    pub delta_ns_end: f64,
    /// Violations of the optimistic-delivery checker (`optcheck`); included in `violations`.
    pub violations: u64,
    /// Messages the optimistic pipelines of processes that stayed in still held at the end (1Pipe
    /// runs; 0 in a drained run: everything arrived was confirmed, or revoked when §5.2
    /// discarded it). `None` where not measured (PLATO).
    pub held_end: Option<u64>,
    /// Views (a receiver's, or one service's at a receiver) whose tentative deliveries at the
    /// end were not judged — the run did not drain, or the process left it (crashed, declared
    /// failed): what they still held is unchecked, not clean. `None`: the checker did not run.
    pub unjudged_end: Option<u64>,
    /// Hash of every hook (kind, receiver, message, true time), in order: pins the optimistic
    /// deliveries as `trace_hash` pins the final ones.
    pub hooks_hash: String,
}

/// A message: (sender, the workload's sequence number).
type Msg = (u32, u64);

/// Most violations kept with their details (all are counted).
const VIOLATIONS_KEPT_MAX: usize = 16;

#[derive(Clone, Debug, Default)]
struct Receiver {
    /// Delivered and unconfirmed, in delivery order, with Tm in true time.
    tentative: Vec<(Msg, u64)>,
    /// The message just confirmed, whose `Deliver` must come next.
    confirming: Option<Msg>,
    /// Place of the last final delivery.
    last_place: Option<u128>,
}

/// The view of receiver `dst`'s reliable service, where a driver delivers both services
/// optimistically (1Pipe): each service has its own total order, so its own view. A receiver's
/// best-effort view is its id.
pub const fn reliable_view(dst: u32) -> u32 {
    dst | 1 << 31
}

/// The optimistic-delivery checker of one run.
#[derive(Debug)]
pub struct OptChecker {
    /// Each view: a receiver's, or one service's at a receiver ([`reliable_view`]).
    receivers: BTreeMap<u32, Receiver>,
    /// Every optimistic delivery: (receiver, message, place of the receiver's last final
    /// delivery then), judged at the end.
    opt_log: Vec<(u32, Msg, Option<u128>)>,
    /// Each message's place in the total order, from the final deliveries.
    place_of: BTreeMap<Msg, u128>,
    /// Revokes before Tm, and at or after it.
    pub revokes_early: u64,
    /// Revokes at or after Tm: rollbacks.
    pub rollbacks: u64,
    violation_count: u64,
    violations: Vec<Violation>,
    /// Views whose leftovers [`OptChecker::finish_where`] did not judge.
    unjudged_end: u64,
}

impl OptChecker {
    /// A checker for receivers `0..procs`.
    pub fn new(procs: u32) -> OptChecker {
        OptChecker {
            receivers: (0..procs).map(|p| (p, Receiver::default())).collect(),
            opt_log: Vec::new(),
            place_of: BTreeMap::new(),
            revokes_early: 0,
            rollbacks: 0,
            violation_count: 0,
            violations: Vec::new(),
            unjudged_end: 0,
        }
    }

    /// Views whose tentative deliveries at the end were not judged (see
    /// [`OptReport::unjudged_end`]).
    pub fn unjudged_end(&self) -> u64 {
        self.unjudged_end
    }

    fn violate(&mut self, t: u64, kind: &'static str, detail: String) {
        self.violation_count += 1;
        if self.violations.len() < VIOLATIONS_KEPT_MAX {
            self.violations.push(Violation { t, kind, detail });
        }
    }

    /// Receiver `dst`'s view (processes that rejoined as new ones have ids past the first
    /// `procs`: the views are made as they come).
    fn receiver(&mut self, dst: u32) -> &mut Receiver {
        self.receivers.entry(dst).or_default()
    }

    /// Violations found so far.
    pub fn violation_count(&self) -> u64 {
        self.violation_count
    }

    /// The first violations, with details.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// `optdeliver` of `msg` at `dst` at true time `t`, usable from true time `usable_at`.
    pub fn on_opt_deliver(&mut self, t: u64, dst: u32, msg: Msg, usable_at: u64) {
        let r = self.receiver(dst);
        let twice = r.tentative.iter().any(|(m, _)| *m == msg);
        r.tentative.push((msg, usable_at));
        let last_place = r.last_place;
        self.opt_log.push((dst, msg, last_place));
        if twice {
            self.violate(t, "opt-view", format!("{dst} delivered {msg:?} twice"));
        }
    }

    /// `revoke` of `msg` at `dst` at true time `t`.
    pub fn on_revoke(&mut self, t: u64, dst: u32, msg: Msg) {
        let r = self.receiver(dst);
        match r.tentative.iter().position(|(m, _)| *m == msg) {
            Some(i) => {
                let (_, usable_at) = r.tentative.remove(i);
                if t >= usable_at {
                    self.rollbacks += 1;
                } else {
                    self.revokes_early += 1;
                }
            }
            None => self.violate(
                t,
                "opt-view",
                format!("{dst} revoked {msg:?}, which it did not hold unconfirmed"),
            ),
        }
    }

    /// `confirm` of `msg` at `dst` at true time `t`.
    pub fn on_confirm(&mut self, t: u64, dst: u32, msg: Msg) {
        let r = self.receiver(dst);
        let first = r.tentative.first().map(|(m, _)| *m);
        let pending = r.confirming.replace(msg);
        if first == Some(msg) {
            r.tentative.remove(0);
        } else {
            self.violate(
                t,
                "opt-view",
                format!("{dst} confirmed {msg:?}, but the first unconfirmed is {first:?}"),
            );
        }
        if let Some(p) = pending {
            self.violate(
                t,
                "opt-confirm",
                format!("{dst}: {p:?} confirmed, never delivered"),
            );
        }
    }

    /// A final delivery (`Deliver`) of `msg` at `dst`, at place `place` of the total order
    /// (increasing along it: a sequence number, or 1Pipe's `(ts, src, psn)` packed high to
    /// low).
    pub fn on_deliver(&mut self, t: u64, dst: u32, msg: Msg, place: u128) {
        let r = self.receiver(dst);
        let confirmed = r.confirming.take();
        r.last_place = Some(place);
        self.place_of.insert(msg, place);
        if confirmed != Some(msg) {
            self.violate(
                t,
                "opt-confirm",
                format!("{dst} delivered {msg:?} finally, but had confirmed {confirmed:?}"),
            );
        }
    }

    /// Judges what needs every message's place, and, in a drained run, what is left over.
    pub fn finish(&mut self, t: u64, drained: bool) {
        self.finish_where(t, drained, |_| true);
    }

    /// [`OptChecker::finish`], judging leftovers only in the views `judged` names (a receiver
    /// that stopped delivering for good — crashed, declared failed, gone — may hold
    /// optimistic deliveries nobody will confirm).
    pub fn finish_where(&mut self, t: u64, drained: bool, judged: impl Fn(u32) -> bool) {
        let log = std::mem::take(&mut self.opt_log);
        for (dst, msg, last_place) in log {
            let (Some(place), Some(last)) = (self.place_of.get(&msg).copied(), last_place) else {
                continue;
            };
            if place <= last {
                self.violate(
                    t,
                    "opt-below",
                    format!(
                        "{dst} delivered {msg:?} (place {place}) after confirming place {last}"
                    ),
                );
            }
        }
        let unjudged = self
            .receivers
            .keys()
            .filter(|&&dst| !drained || !judged(dst))
            .count();
        self.unjudged_end = unjudged as u64;
        if !drained {
            return;
        }
        let left: Vec<(u32, usize, Msg)> = self
            .receivers
            .iter()
            .filter(|(&dst, _)| judged(dst))
            .filter_map(|(&dst, r)| {
                r.tentative
                    .first()
                    .map(|(m, _)| (dst, r.tentative.len(), *m))
            })
            .collect();
        for (dst, n, msg) in left {
            self.violate(
                t,
                "opt-dangling",
                format!("{dst} ended with {n} unconfirmed deliveries, first {msg:?}"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_history_passes_and_counts_rollbacks_by_true_time() {
        let mut c = OptChecker::new(1);
        c.on_opt_deliver(0, 0, (1, 0), 10);
        c.on_opt_deliver(5, 0, (2, 0), 15);
        c.on_revoke(7, 0, (2, 0)); // before its Tm
        c.on_revoke(12, 0, (1, 0)); // after its Tm
        c.on_opt_deliver(20, 0, (2, 0), 20);
        c.on_confirm(20, 0, (2, 0));
        c.on_deliver(20, 0, (2, 0), 0);
        c.on_opt_deliver(21, 0, (1, 0), 21);
        c.on_confirm(21, 0, (1, 0));
        c.on_deliver(21, 0, (1, 0), 1);
        c.finish(30, true);
        assert_eq!(c.violation_count(), 0, "{:?}", c.violations());
        assert_eq!((c.revokes_early, c.rollbacks), (1, 1));
    }

    #[test]
    fn revoking_a_confirmed_message_is_caught() {
        let mut c = OptChecker::new(1);
        c.on_opt_deliver(0, 0, (1, 0), 10);
        c.on_confirm(1, 0, (1, 0));
        c.on_deliver(1, 0, (1, 0), 0);
        c.on_revoke(2, 0, (1, 0));
        assert_eq!(c.violations()[0].kind, "opt-view");
    }

    #[test]
    fn confirming_out_of_view_order_is_caught() {
        let mut c = OptChecker::new(1);
        c.on_opt_deliver(0, 0, (1, 0), 10);
        c.on_opt_deliver(1, 0, (2, 0), 11);
        c.on_confirm(2, 0, (2, 0));
        assert_eq!(c.violations()[0].kind, "opt-view");
    }

    #[test]
    fn delivery_below_a_confirmed_place_is_caught_at_the_end() {
        let mut c = OptChecker::new(2);
        c.on_opt_deliver(0, 0, (1, 0), 10);
        c.on_confirm(1, 0, (1, 0));
        c.on_deliver(1, 0, (1, 0), 5);
        // Receiver 0 now delivers (2, 0), whose place (3) another receiver reveals: below 5.
        c.on_opt_deliver(2, 0, (2, 0), 12);
        c.on_opt_deliver(0, 1, (2, 0), 10);
        c.on_confirm(1, 1, (2, 0));
        c.on_deliver(1, 1, (2, 0), 3);
        c.finish(10, false);
        assert!(c.violations().iter().any(|v| v.kind == "opt-below"));
    }

    #[test]
    fn a_final_delivery_without_its_confirm_and_leftovers_are_caught() {
        let mut c = OptChecker::new(1);
        c.on_deliver(0, 0, (1, 0), 0);
        c.on_opt_deliver(1, 0, (1, 1), 10);
        c.finish(5, true);
        let kinds: Vec<_> = c.violations().iter().map(|v| v.kind).collect();
        assert_eq!(kinds, ["opt-confirm", "opt-dangling"]);
    }
}
