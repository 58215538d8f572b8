//! The host's part in the §5.2 failure rounds the controller runs for other hosts' failures:
//! which rounds are open, the recalls each waits for, the application's callbacks, and the
//! `Completed` reports no `Resume` has answered yet. Bookkeeping only: the host discards,
//! recalls and sends, and asks this part what is due; calls go one way (host → rounds).
//!
//! A round opens with its Broadcast. It completes here once every recall it made is
//! acknowledged by its targets and the application's callbacks are done (with
//! `HostConfig::callbacks_held`); the host then reports `Completed`, and again, backing off,
//! until a `Resume` of that round or a later one answers (the controller may have been down).

use crate::ids::{NodeId, ProcId};
use crate::time::{Instant, Timestamp};
use std::collections::{BTreeMap, BTreeSet};

/// Most §5.2 rounds each table remembers; beyond it the oldest is forgotten (rounds resume in
/// order, so a later `Resume` answers it anyway).
const ROUNDS_MAX: usize = 64;

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Rounds {
    /// Recalls under way: (round, hosts yet to acknowledge).
    recalls: Vec<(u32, BTreeSet<NodeId>)>,
    /// Rounds announced and not completed here.
    open: BTreeSet<u32>,
    /// Rounds whose callbacks the application has not finished.
    callbacks: BTreeSet<u32>,
    /// Rounds completed here and not resumed: round → (when to send `Completed` again, the
    /// wait after that).
    awaited: BTreeMap<u32, (Instant, u64)>,
    /// Recalls reported to the controller (`RelayMsg::Recalled`) by round, reported again with
    /// each `Completed` sent again until Resume.
    recalled: BTreeMap<u32, Vec<(ProcId, Timestamp)>>,
}

impl Rounds {
    /// Round `round`'s Broadcast arrived: it is open until it completes.
    pub(crate) fn open(&mut self, round: u32) {
        self.open.insert(round);
    }

    /// Hosts not in `correct` failed: they will never acknowledge an earlier recall.
    pub(crate) fn only_correct(&mut self, correct: &[NodeId]) {
        for r in &mut self.recalls {
            r.1.retain(|h| correct.contains(h));
        }
    }

    /// Round `round` recalled scatterings at `targets`; it waits for their acknowledgements.
    pub(crate) fn recall(&mut self, round: u32, targets: BTreeSet<NodeId>) {
        self.recalls.push((round, targets));
    }

    /// `from` acknowledged round `round`'s recall.
    pub(crate) fn recall_acked(&mut self, round: u32, from: NodeId) {
        if let Some(r) = self.recalls.iter_mut().find(|r| r.0 == round) {
            r.1.remove(&from);
        }
    }

    /// Round `round`'s recalls, reported to the controller for the failed receivers.
    pub(crate) fn record_recalled(&mut self, round: u32, groups: Vec<(ProcId, Timestamp)>) {
        self.recalled.insert(round, groups);
        if self.recalled.len() > ROUNDS_MAX {
            self.recalled.pop_first();
        }
    }

    /// What round `round` recalled, if reported.
    pub(crate) fn recalled(&self, round: u32) -> Option<&Vec<(ProcId, Timestamp)>> {
        self.recalled.get(&round)
    }

    /// Round `round` waits for the application's callbacks.
    pub(crate) fn hold_callbacks(&mut self, round: u32) {
        self.callbacks.insert(round);
        if self.callbacks.len() > ROUNDS_MAX {
            self.callbacks.pop_first();
        }
    }

    /// The application finished round `round`'s callbacks; false if it was not waiting.
    pub(crate) fn callbacks_done(&mut self, round: u32) -> bool {
        self.callbacks.remove(&round)
    }

    /// The rounds whose recalls every target acknowledged (for the sender to release), and the
    /// rounds that complete now — nothing pending — in order: the caller reports each
    /// `Completed`, which goes again `retry_ns` later (0: never) until resumed.
    pub(crate) fn finish(&mut self, now: Instant, retry_ns: u64) -> (Vec<u32>, Vec<u32>) {
        let mut released = Vec::new();
        self.recalls.retain(|(round, waiting)| {
            if waiting.is_empty() {
                released.push(*round);
            }
            !waiting.is_empty()
        });
        let done: Vec<u32> = self
            .open
            .iter()
            .copied()
            .filter(|r| !self.recalls.iter().any(|(x, _)| x == r))
            .filter(|r| !self.callbacks.contains(r))
            .collect();
        for &round in &done {
            self.open.remove(&round);
            if retry_ns > 0 {
                self.awaited.insert(round, (now + retry_ns, retry_ns));
                if self.awaited.len() > ROUNDS_MAX {
                    self.awaited.pop_first();
                }
            }
        }
        debug_assert!(done.iter().all(|r| !self.open.contains(r)));
        (released, done)
    }

    /// Resume of `round`: rounds resume in order, so it answers every round up to it.
    pub(crate) fn resumed(&mut self, round: u32) {
        self.awaited.retain(|&r, _| r > round);
        self.callbacks.retain(|&r| r > round);
        self.recalled.retain(|&r, _| r > round);
    }

    /// The completed rounds whose `Completed` is due again at `now`, waiting twice as long
    /// (up to `retry_max_ns`) for the next time.
    pub(crate) fn due_again(&mut self, now: Instant, retry_max_ns: u64) -> Vec<u32> {
        let mut due_rounds = Vec::new();
        for (&round, (due, wait)) in self.awaited.iter_mut() {
            if *due > now {
                continue;
            }
            *wait = (*wait * 2).min(retry_max_ns.max(*wait));
            *due = now + *wait;
            due_rounds.push(round);
        }
        due_rounds
    }

    /// When a `Completed` is due again next.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.awaited.values().map(|r| r.0).min()
    }

    /// Debug builds: a round is open or awaiting its Resume, never both; only open rounds wait
    /// for callbacks; the tables are bounded.
    pub(crate) fn check(&self) {
        debug_assert!(self.open.iter().all(|r| !self.awaited.contains_key(r)));
        debug_assert!(self.callbacks.iter().all(|r| self.open.contains(r)));
        debug_assert!(self.awaited.len() <= ROUNDS_MAX && self.callbacks.len() <= ROUNDS_MAX);
        debug_assert!(self.recalls.iter().all(|(r, _)| self.open.contains(r)));
    }

    /// Rounds announced and not completed.
    pub(crate) fn open_len(&self) -> usize {
        self.open.len()
    }

    /// Rounds waiting for the application's callbacks.
    pub(crate) fn callbacks_len(&self) -> usize {
        self.callbacks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_completes_once_its_recall_is_acknowledged_and_its_callbacks_are_done() {
        let mut r = Rounds::default();
        r.open(3);
        r.recall(3, [NodeId(1), NodeId(2)].into());
        r.hold_callbacks(3);
        assert_eq!(r.finish(Instant(0), 10), (vec![], vec![]));
        r.recall_acked(3, NodeId(1));
        r.only_correct(&[NodeId(0), NodeId(1)]);
        assert_eq!(
            r.finish(Instant(0), 10),
            (vec![3], vec![]),
            "recall released"
        );
        assert!(r.callbacks_done(3));
        assert!(!r.callbacks_done(3));
        assert_eq!(r.finish(Instant(5), 10), (vec![], vec![3]));
        assert_eq!(r.open_len(), 0);
        assert_eq!(r.next_due(), Some(Instant(15)));
        assert_eq!(r.due_again(Instant(15), 25), vec![3]);
        assert_eq!(r.next_due(), Some(Instant(35)));
        assert_eq!(r.due_again(Instant(35), 25), vec![3]);
        assert_eq!(r.next_due(), Some(Instant(60)), "backed off to the maximum");
        r.resumed(4);
        assert_eq!(r.next_due(), None);
    }
}
