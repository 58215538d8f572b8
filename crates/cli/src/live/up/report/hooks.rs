//! The optimistic hooks of a live run (`--optimistic-delta`): every process's recorded
//! `optdeliver`, `revoke` and `confirm` judged by the simulator's optimistic-delivery checker
//! (`onepipe_sim::optcheck`, written from PLATO §4.1, not from the role's pipeline), and summed.
//!
//! A process's hooks are replayed in the order its application took them, one view per service
//! (each service is its own total order). The endpoint queues a message's `confirm` just before
//! its final delivery, so each confirm is matched here with the receiver's next delivery of that
//! service: they must name the same message (the confirms are the final order), and in a drained
//! run every final delivery has its confirm.

use crate::live::records::{HookKind, HookRec, NodeRecords};
use onepipe_sim::metrics::{NsHistogram, Summary};
use onepipe_sim::optcheck::{reliable_view, OptChecker};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

/// What optimistic delivery did in a live run.
#[derive(Clone, Debug, Serialize)]
pub struct HooksReport {
    /// `optdeliver`s (a message revoked and handed over again counts twice).
    pub delivered: u64,
    /// Revokes before Tm: free for the application.
    pub revokes_early: u64,
    /// Revokes at or after Tm: rollbacks, PLATO's metric.
    pub rollbacks: u64,
    /// Rollbacks over confirms.
    pub rollback_fraction: f64,
    /// Send call → usable (the earlier of Tm and the confirm, as the application took them).
    pub latency_ns: Summary,
    /// Violations of the optimistic-delivery checker and of the confirm-delivery match.
    pub violations: u64,
    /// The first violations.
    pub violation_samples: Vec<String>,
}

/// Most violations of the confirm-delivery match kept with their details.
const SAMPLES_MAX: usize = 16;

/// Judges and sums the hooks of every process; `None` when none recorded any.
pub(super) fn check(
    all: &[Option<NodeRecords>],
    drained: bool,
    end_ns: u64,
) -> Option<HooksReport> {
    if all.iter().flatten().all(|r| r.hooks.is_empty()) {
        return None;
    }
    let mut r = Replay {
        checker: OptChecker::new(all.len() as u32),
        latency: NsHistogram::default(),
        delivered: 0,
        confirms: 0,
        mismatches: 0,
        samples: Vec::new(),
    };
    for recs in all.iter().flatten() {
        r.process(recs, drained);
    }
    r.checker.finish(end_ns, drained);
    let c = &r.checker;
    let mut violation_samples: Vec<String> = c.violations().iter().map(|v| v.to_string()).collect();
    violation_samples.extend(r.samples);
    Some(HooksReport {
        delivered: r.delivered,
        revokes_early: c.revokes_early,
        rollbacks: c.rollbacks,
        rollback_fraction: c.rollbacks as f64 / r.confirms.max(1) as f64,
        latency_ns: r.latency.summary(),
        violations: c.violation_count() + r.mismatches,
        violation_samples,
    })
}

/// The replay of every process's hooks.
struct Replay {
    checker: OptChecker,
    latency: NsHistogram,
    delivered: u64,
    confirms: u64,
    /// Confirms that are not the receiver's next final delivery, and final deliveries left
    /// without a confirm.
    mismatches: u64,
    samples: Vec<String>,
}

impl Replay {
    fn mismatch(&mut self, detail: String) {
        self.mismatches += 1;
        if self.samples.len() < SAMPLES_MAX {
            self.samples.push(format!("[opt-confirm] {detail}"));
        }
    }

    /// One process's hooks, against its final deliveries.
    fn process(&mut self, recs: &NodeRecords, drained: bool) {
        // Its final deliveries in order, per view (a rejoin changes the receiving id):
        // (sender, sequence number, place in 1Pipe's (ts, src) order).
        let mut finals: BTreeMap<u32, VecDeque<(u32, u64, u128)>> = BTreeMap::new();
        for d in &recs.deliveries {
            let place = u128::from(d.ts) << 32 | u128::from(d.src);
            finals
                .entry(view(d.dst, d.reliable))
                .or_default()
                .push_back((d.src, d.seq, place));
        }
        // Handed over and not yet confirmed or revoked: (usable, sent).
        let mut tentative: BTreeMap<(u32, u32, u64), (u64, u64)> = BTreeMap::new();
        for h in &recs.hooks {
            let v = view(h.dst, h.reliable);
            let (at, msg) = ((v, h.src, h.seq), (h.src, h.seq));
            match h.kind {
                HookKind::Deliver => {
                    self.delivered += 1;
                    tentative.insert(at, (h.usable_ns, h.sent_ns));
                    self.checker.on_opt_deliver(h.at_ns, v, msg, h.usable_ns);
                }
                HookKind::Revoke => {
                    tentative.remove(&at);
                    self.checker.on_revoke(h.at_ns, v, msg);
                }
                HookKind::Confirm => {
                    if let Some((usable, sent)) = tentative.remove(&at) {
                        self.latency
                            .record(usable.min(h.at_ns).saturating_sub(sent));
                    }
                    let next = finals.get_mut(&v).and_then(VecDeque::pop_front);
                    self.confirm(h, v, next);
                }
            }
        }
        let left: usize = finals.values().map(VecDeque::len).sum();
        if drained && left > 0 {
            let first = finals.iter().find(|(_, f)| !f.is_empty()).map(|(d, _)| *d);
            self.mismatch(format!(
                "{left} final deliveries without a confirm (first at receiver {first:?})"
            ));
        }
    }

    /// Confirm `h` (in view `v`), which the view's next final delivery `next` must match.
    fn confirm(&mut self, h: &HookRec, v: u32, next: Option<(u32, u64, u128)>) {
        let msg = (h.src, h.seq);
        self.confirms += 1;
        self.checker.on_confirm(h.at_ns, v, msg);
        let Some((src, seq, place)) = next else {
            return self.mismatch(format!(
                "{} confirmed {msg:?}, never delivered finally",
                h.dst
            ));
        };
        if (src, seq) != msg {
            self.mismatch(format!(
                "{} confirmed {msg:?}, but its next final delivery is {:?}",
                h.dst,
                (src, seq)
            ));
        }
        self.checker.on_deliver(h.at_ns, v, (src, seq), place);
    }
}

/// The checker's view of receiver `dst`'s service.
fn view(dst: u32, reliable: bool) -> u32 {
    match reliable {
        true => reliable_view(dst),
        false => dst,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::records::DeliveryRec;

    fn delivery(src: u32, seq: u64, ts: u64) -> DeliveryRec {
        DeliveryRec {
            src,
            dst: 0,
            seq,
            ts,
            barrier: ts + 1,
            delivered_ts: ts + 2,
            recv_ns: 100 + ts,
            latency_ns: 100,
            reliable: false,
            psn: 0,
        }
    }

    fn hook(kind: HookKind, src: u32, seq: u64, at_ns: u64) -> HookRec {
        HookRec {
            kind,
            src,
            dst: 0,
            seq,
            at_ns,
            usable_ns: at_ns + 5,
            sent_ns: 1,
            reliable: false,
            rollback: false,
        }
    }

    /// Receiver 0 finally delivers (1, 0) then (2, 0); its hooks as given.
    fn violations(hooks: Vec<HookRec>) -> (u64, Vec<String>) {
        let recs = NodeRecords {
            deliveries: vec![delivery(1, 0, 10), delivery(2, 0, 20)],
            hooks,
            ..NodeRecords::default()
        };
        let r = check(&[Some(recs)], true, 1_000).expect("hooks recorded");
        (r.violations, r.violation_samples)
    }

    #[test]
    fn hooks_that_confirm_the_final_order_pass_and_others_are_reported() {
        use HookKind::{Confirm, Deliver, Revoke};
        // Handed over out of order, revoked, handed over again, confirmed in order.
        let good = vec![
            hook(Deliver, 2, 0, 10),
            hook(Revoke, 2, 0, 11),
            hook(Deliver, 1, 0, 12),
            hook(Deliver, 2, 0, 13),
            hook(Confirm, 1, 0, 30),
            hook(Confirm, 2, 0, 40),
        ];
        assert_eq!(violations(good).0, 0);
        // Confirmed against the final order.
        let (n, samples) = violations(vec![
            hook(Deliver, 2, 0, 10),
            hook(Deliver, 1, 0, 12),
            hook(Confirm, 2, 0, 30),
            hook(Confirm, 1, 0, 40),
        ]);
        assert!(n > 0 && samples.iter().any(|s| s.contains("next final delivery")));
        // A final delivery never confirmed, and a message left tentative.
        let (n, samples) = violations(vec![hook(Deliver, 1, 0, 10), hook(Confirm, 1, 0, 30)]);
        assert!(n > 0 && samples.iter().any(|s| s.contains("without a confirm")));
        let (n, _) = violations(vec![
            hook(Deliver, 1, 0, 10),
            hook(Confirm, 1, 0, 30),
            hook(Deliver, 2, 0, 31),
        ]);
        assert!(
            n > 0,
            "(2, 0) left tentative, and delivered finally without a confirm"
        );
    }
}
