//! Global checkers for the baseline protocols: every send, delivery and loss report of a run
//! against what a total-order broadcast promises. A violation is recorded with the true time and
//! enough detail to find it; the run's seed replays it.
//!
//! What is checked (the key is the protocol's order key `(seq_or_ts, src)`, BASELINES.md):
//! * `order` — each receiver delivers in strictly increasing key order. A duplicate delivery
//!   has the same key as the first one (see `key`), so it breaks strictness too.
//! * `key` — a message has the same `seq_or_ts` at every receiver that delivers it. With
//!   `order`, that is agreement: two receivers deliver the messages they both deliver in the
//!   same relative order.
//! * `agreement` — the same, checked independently of the keys: the delivery logs of up to four
//!   receivers, each filtered to what both delivered, must be equal pairwise.
//! * `fifo` — a receiver delivers each sender's messages in the order they were sent.
//! * `phantom` — a delivery matches a send to that receiver; a message reported
//!   `SendFailed` (lost before being ordered) is delivered by nobody.
//! * `loss` — with the run drained, each receiver delivered exactly what was addressed to it,
//!   less what it reported `Lost` and what was lost before being ordered (`SendFailed`). With
//!   no loss, that is exactly-once delivery. Two protocol rules refine it:
//!   - the sequencer's upstream is best effort, and so is its report (`SubmitLost` is sent once,
//!     and a sender's last messages lost on the way have nothing to reveal them): a message the
//!     sequencer never ordered is delivered by nobody, reported or not. For the sequencer each
//!     receiver is therefore held to what the sequencer ordered for it (delivered + `Lost` =
//!     ordered), and messages delivered by nobody without a report are counted
//!     ([`BaseChecker::unordered_unreported`]), not judged;
//!   - the token's receivers report a lost global number even when it was a filler for another
//!     destination, so for the token the `Lost` reports are an upper bound.
//! * with crashed processes (ToTo's §5, [`BaseChecker::on_crash`]), `loss` becomes, per
//!   message with the run drained: a survivor's message is delivered by every survivor
//!   (`progress`: the group goes on after the membership change), and a crashed process's
//!   message by every survivor or by none (`virtual synchrony`, §5.1). What a crashed process
//!   delivered is held to `order`, `key`, `fifo` and `agreement` like the rest, not to `loss`.

use std::sync::Arc;

/// Destinations of one send.
#[derive(Clone, Debug)]
pub enum Dsts {
    /// Every process.
    All,
    /// These processes, sorted.
    List(Arc<[u32]>),
}

impl Dsts {
    fn contains(&self, p: u32) -> bool {
        match self {
            Dsts::All => true,
            Dsts::List(l) => l.binary_search(&p).is_ok(),
        }
    }
}

/// One checker violation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// True time, ns.
    pub t: u64,
    /// Which property: `order`, `key`, `agreement`, `fifo`, `phantom`, `loss`.
    pub kind: &'static str,
    /// What happened.
    pub detail: String,
}

impl core::fmt::Display for Violation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "[{}] at {} ns: {}", self.kind, self.t, self.detail)
    }
}

/// How a protocol accounts for what it loses (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LossRules {
    /// Each `Lost` report stands for exactly one message addressed to the receiver (sequencer,
    /// Lamport); otherwise it may stand for a message to someone else (token fillers).
    pub lost_is_exact: bool,
}

#[derive(Clone, Debug)]
struct Msg {
    dsts: Dsts,
    key: Option<u64>,
    deliveries: u32,
    /// Deliveries at processes that never crash.
    survivor_deliveries: u32,
    failed: bool,
}

/// Most violations kept with their details (all are counted).
const VIOLATIONS_KEPT_MAX: usize = 16;
/// Receivers whose full delivery logs are kept for the `agreement` check.
const LOGGED_RECEIVERS_MAX: usize = 4;

/// The checker of one baseline run.
#[derive(Debug)]
pub struct BaseChecker {
    procs: u32,
    rules: LossRules,
    /// Per sender, its sends in order (the workload's sequence number is the index).
    msgs: Vec<Vec<Msg>>,
    /// Per receiver, the key of its last delivery.
    last_key: Vec<Option<(u64, u32)>>,
    /// `procs × procs`: the next sequence number receiver `r` may deliver from sender `s` is
    /// above `last_seq[r * procs + s] - 1` (0: nothing yet; otherwise seq + 1).
    last_seq: Vec<u64>,
    delivered_at: Vec<u64>,
    lost_at: Vec<u64>,
    /// Receivers whose logs are kept, and their logs of (sender, seq).
    logged: Vec<u32>,
    logs: Vec<Vec<(u32, u64)>>,
    deliveries: u64,
    unordered_unreported: u64,
    violation_count: u64,
    violations: Vec<Violation>,
    undrained: u64,
    /// Per process, whether it crashes in the run.
    crashed: Vec<bool>,
}

impl BaseChecker {
    /// A checker for processes `0..procs`.
    pub fn new(procs: u32, rules: LossRules) -> BaseChecker {
        let n = procs as usize;
        let mut logged: Vec<u32> = [0, 1, procs / 2, procs.saturating_sub(1)]
            .into_iter()
            .filter(|&p| p < procs)
            .collect();
        logged.sort_unstable();
        logged.dedup();
        logged.truncate(LOGGED_RECEIVERS_MAX);
        BaseChecker {
            procs,
            rules,
            msgs: vec![Vec::new(); n],
            last_key: vec![None; n],
            last_seq: vec![0; n * n],
            delivered_at: vec![0; n],
            lost_at: vec![0; n],
            logs: vec![Vec::new(); logged.len()],
            logged,
            deliveries: 0,
            unordered_unreported: 0,
            violation_count: 0,
            violations: Vec::new(),
            undrained: 0,
            crashed: vec![false; n],
        }
    }

    /// Process `p` crashes at some point of the run (see the module docs).
    pub fn on_crash(&mut self, p: u32) {
        self.crashed[p as usize] = true;
    }

    fn violate(&mut self, t: u64, kind: &'static str, detail: String) {
        self.violation_count += 1;
        if self.violations.len() < VIOLATIONS_KEPT_MAX {
            self.violations.push(Violation { t, kind, detail });
        }
    }

    /// Violations found (all of them counted).
    pub fn violation_count(&self) -> u64 {
        self.violation_count
    }

    /// The first violations, in detail.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Deliveries examined.
    pub fn deliveries_checked(&self) -> u64 {
        self.deliveries
    }

    /// Messages delivered by nobody and never reported lost before ordering (sequencer:
    /// upstream losses whose report was lost, or a sender's tail). Counted at `finish`.
    pub fn unordered_unreported(&self) -> u64 {
        self.unordered_unreported
    }

    /// Messages neither delivered nor accounted for when an undrained run ended (not judged).
    pub fn undrained(&self) -> u64 {
        self.undrained
    }

    /// Sender `src` sent its message number `seq` (the next one) to `dsts`.
    pub fn on_send(&mut self, src: u32, seq: u64, dsts: Dsts) {
        let sent = &mut self.msgs[src as usize];
        assert_eq!(sent.len() as u64, seq, "the workload numbers sends from 0");
        sent.push(Msg {
            dsts,
            key: None,
            deliveries: 0,
            survivor_deliveries: 0,
            failed: false,
        });
    }

    /// Receiver `dst` delivered sender `src`'s message `seq` with order key `seq_or_ts`.
    pub fn on_deliver(&mut self, t: u64, dst: u32, src: u32, seq: u64, seq_or_ts: u64) {
        self.deliveries += 1;
        let n = self.procs;
        let Some(m) = (src < n && dst < n)
            .then(|| self.msgs[src as usize].get_mut(seq as usize))
            .flatten()
        else {
            self.violate(
                t,
                "phantom",
                format!("process {dst} delivered ({src}, #{seq}), which was never sent"),
            );
            return;
        };
        if !m.dsts.contains(dst) || m.failed {
            let why = if m.failed {
                "reported lost before ordering"
            } else {
                "not addressed to it"
            };
            self.violate(
                t,
                "phantom",
                format!("process {dst} delivered ({src}, #{seq}), {why}"),
            );
            return;
        }
        m.deliveries += 1;
        if !self.crashed[dst as usize] {
            m.survivor_deliveries += 1;
        }
        match m.key {
            None => m.key = Some(seq_or_ts),
            Some(k) if k != seq_or_ts => {
                self.violate(
                    t,
                    "key",
                    format!(
                        "process {dst} delivered ({src}, #{seq}) with key {seq_or_ts}, another receiver with {k}"
                    ),
                );
            }
            Some(_) => {}
        }
        let key = (seq_or_ts, src);
        if let Some(last) = self.last_key[dst as usize] {
            if key <= last {
                self.violate(
                    t,
                    "order",
                    format!(
                        "process {dst} delivered ({src}, #{seq}) with key {key:?} after key {last:?}"
                    ),
                );
            }
        }
        self.last_key[dst as usize] = Some(key);
        let slot = &mut self.last_seq[dst as usize * n as usize + src as usize];
        if seq < *slot {
            let prev = *slot - 1;
            self.violate(
                t,
                "fifo",
                format!("process {dst} delivered ({src}, #{seq}) after ({src}, #{prev})"),
            );
        } else {
            *slot = seq + 1;
        }
        self.delivered_at[dst as usize] += 1;
        if let Ok(i) = self.logged.binary_search(&dst) {
            self.logs[i].push((src, seq));
        }
    }

    /// Receiver `dst` gave up on `count` messages.
    pub fn on_lost(&mut self, dst: u32, count: u64) {
        self.lost_at[dst as usize] += count;
    }

    /// Sender `src`'s sends `first .. first + count` were lost before being ordered.
    pub fn on_send_failed(&mut self, t: u64, src: u32, first: u64, count: u64) {
        for seq in first..first.saturating_add(count) {
            let Some(m) = self.msgs[src as usize].get_mut(seq as usize) else {
                self.violate(
                    t,
                    "phantom",
                    format!("send-failed report for ({src}, #{seq}), which was never sent"),
                );
                return;
            };
            m.failed = true;
            if m.deliveries > 0 {
                let d = m.deliveries;
                self.violate(
                    t,
                    "phantom",
                    format!(
                        "({src}, #{seq}) reported lost before ordering, yet delivered {d} time(s)"
                    ),
                );
            }
        }
    }

    /// The end of the run: the `agreement` and (for a drained run) `loss` checks. `ordered`:
    /// for the sequencer, how many messages it ordered for each receiver.
    pub fn finish(&mut self, t: u64, seed: u64, drained: bool, ordered: Option<&[u64]>) {
        self.check_agreement(t);
        let expected = self.expected_per_receiver();
        self.unordered_unreported = self
            .msgs
            .iter()
            .flatten()
            .filter(|m| !m.failed && m.deliveries == 0)
            .count() as u64;
        if self.crashed.iter().any(|&c| c) {
            self.finish_with_crashes(t, seed, drained);
            return;
        }
        if !drained {
            self.undrained = expected
                .iter()
                .zip(&self.delivered_at)
                .zip(&self.lost_at)
                .map(|((&e, &d), &l)| e.saturating_sub(d + l))
                .sum();
            return;
        }
        for r in 0..self.procs as usize {
            let (want, got, lost) = (expected[r], self.delivered_at[r], self.lost_at[r]);
            let ok = match ordered {
                Some(o) => o[r] <= want && got + lost == o[r],
                None if self.rules.lost_is_exact => got + lost == want,
                None => got <= want && got + lost >= want,
            };
            if !ok {
                let of = ordered.map_or(String::new(), |o| format!(" ({} ordered)", o[r]));
                self.violate(
                    t,
                    "loss",
                    format!(
                        "seed {seed}: process {r} delivered {got} of {want} messages addressed to it{of}, reported {lost} lost"
                    ),
                );
            }
        }
    }

    /// `finish`'s `loss` check when processes crashed (module docs): per message, a
    /// survivor's is delivered at every survivor, a crashed process's at every survivor or
    /// none. Undrained: the deliveries still owed to survivors.
    fn finish_with_crashes(&mut self, t: u64, seed: u64, drained: bool) {
        let survivors = self.crashed.iter().filter(|&&c| !c).count() as u32;
        let mut owed = 0u64;
        let mut bad: Vec<String> = Vec::new();
        for (src, sent) in self.msgs.iter().enumerate() {
            for (seq, m) in sent.iter().enumerate().filter(|(_, m)| !m.failed) {
                let (got, all_dsts) = (m.survivor_deliveries, matches!(m.dsts, Dsts::All));
                if got == survivors || !all_dsts || (self.crashed[src] && got == 0) {
                    continue;
                }
                owed += u64::from(survivors - got);
                let what = if self.crashed[src] {
                    "a crashed process's message delivered by some survivors only (virtual synchrony)"
                } else {
                    "a survivor's message not delivered by every survivor (progress)"
                };
                bad.push(format!(
                    "seed {seed}: ({src}, #{seq}) delivered by {got} of {survivors} survivors: {what}"
                ));
            }
        }
        if !drained {
            self.undrained = owed;
            return;
        }
        for detail in bad {
            self.violate(t, "loss", detail);
        }
    }

    /// Per receiver: messages addressed to it that were not reported lost before ordering.
    fn expected_per_receiver(&self) -> Vec<u64> {
        let mut out = vec![0u64; self.procs as usize];
        let mut all = 0u64;
        for m in self.msgs.iter().flatten().filter(|m| !m.failed) {
            match &m.dsts {
                Dsts::All => all += 1,
                Dsts::List(l) => {
                    for &d in l.iter() {
                        out[d as usize] += 1;
                    }
                }
            }
        }
        for o in &mut out {
            *o += all;
        }
        out
    }

    /// The logged receivers' deliveries, pairwise, filtered to what both delivered, must be in
    /// the same order.
    fn check_agreement(&mut self, t: u64) {
        for a in 0..self.logs.len() {
            for b in a + 1..self.logs.len() {
                if let Some(detail) =
                    first_disagreement(&self.logs[a], &self.logs[b], self.logged[a], self.logged[b])
                {
                    self.violate(t, "agreement", detail);
                }
            }
        }
    }
}

/// Where two delivery logs, each filtered to the messages both contain, first differ.
fn first_disagreement(a: &[(u32, u64)], b: &[(u32, u64)], pa: u32, pb: u32) -> Option<String> {
    let in_a: std::collections::BTreeSet<(u32, u64)> = a.iter().copied().collect();
    let in_b: std::collections::BTreeSet<(u32, u64)> = b.iter().copied().collect();
    let fa = a.iter().filter(|m| in_b.contains(m));
    let fb = b.iter().filter(|m| in_a.contains(m));
    for (i, (x, y)) in fa.zip(fb).enumerate() {
        if x != y {
            return Some(format!(
                "processes {pa} and {pb} disagree at their common delivery #{i}: {x:?} vs {y:?}"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXACT: LossRules = LossRules {
        lost_is_exact: true,
    };

    fn two_sends() -> BaseChecker {
        let mut c = BaseChecker::new(2, EXACT);
        c.on_send(0, 0, Dsts::All);
        c.on_send(1, 0, Dsts::All);
        c
    }

    #[test]
    fn clean_run_passes() {
        let mut c = two_sends();
        for r in 0..2 {
            c.on_deliver(1, r, 0, 0, 5);
            c.on_deliver(2, r, 1, 0, 6);
        }
        c.finish(3, 1, true, None);
        assert_eq!(c.violation_count(), 0, "{:?}", c.violations());
    }

    #[test]
    fn duplicate_breaks_order() {
        let mut c = two_sends();
        c.on_deliver(1, 0, 0, 0, 5);
        c.on_deliver(2, 0, 0, 0, 5);
        assert_eq!(c.violations()[0].kind, "order");
    }

    #[test]
    fn receivers_disagreeing_on_a_key_or_order_are_caught() {
        let mut c = two_sends();
        c.on_deliver(1, 0, 0, 0, 5);
        c.on_deliver(1, 0, 1, 0, 6);
        c.on_deliver(1, 1, 1, 0, 6);
        c.on_deliver(1, 1, 0, 0, 7);
        assert!(c.violations().iter().any(|v| v.kind == "key"));
        c.finish(2, 1, true, None);
        assert!(c.violations().iter().any(|v| v.kind == "agreement"));
    }

    #[test]
    fn missing_delivery_without_report_is_a_loss_violation() {
        let mut c = two_sends();
        c.on_deliver(1, 0, 0, 0, 5);
        c.on_deliver(1, 0, 1, 0, 6);
        c.on_deliver(1, 1, 0, 0, 5);
        c.finish(2, 1, true, None);
        assert_eq!(c.violations()[0].kind, "loss");
        // Reported lost: accounted for.
        let mut c = two_sends();
        c.on_deliver(1, 0, 0, 0, 5);
        c.on_deliver(1, 0, 1, 0, 6);
        c.on_deliver(1, 1, 0, 0, 5);
        c.on_lost(1, 1);
        c.finish(2, 1, true, None);
        assert_eq!(c.violation_count(), 0, "{:?}", c.violations());
    }

    #[test]
    fn phantom_and_send_failed_delivery_are_caught() {
        let mut c = two_sends();
        c.on_deliver(1, 0, 0, 3, 5);
        assert_eq!(c.violations()[0].kind, "phantom");
        let mut c = two_sends();
        c.on_deliver(1, 0, 0, 0, 5);
        c.on_send_failed(2, 0, 0, 1);
        assert_eq!(c.violations()[0].kind, "phantom");
    }

    #[test]
    fn sequencer_receivers_are_held_to_what_was_ordered_for_them() {
        let mut c = BaseChecker::new(1, EXACT);
        c.on_send(0, 0, Dsts::All);
        c.on_send(0, 1, Dsts::All);
        c.on_deliver(1, 0, 0, 1, 0);
        // Message #0 never reached the sequencer and nobody was told: not judged, counted.
        c.finish(2, 1, true, Some(&[1]));
        assert_eq!(c.violation_count(), 0);
        assert_eq!(c.unordered_unreported(), 1);
        // Ordered twice but delivered once, with no report: a violation.
        let mut c = BaseChecker::new(1, EXACT);
        c.on_send(0, 0, Dsts::All);
        c.on_send(0, 1, Dsts::All);
        c.on_deliver(1, 0, 0, 1, 0);
        c.finish(2, 1, true, Some(&[2]));
        assert_eq!(c.violation_count(), 1);
    }

    #[test]
    fn with_a_crash_survivors_deliver_survivors_messages_and_all_or_none_of_the_crashed() {
        // Process 2 of 3 crashes: its message #0 reached every survivor, #1 none, #2 one only
        // (virtual synchrony broken); survivor 1's message #0 missed survivor 0 (progress).
        let mut c = BaseChecker::new(3, EXACT);
        c.on_crash(2);
        for seq in 0..3 {
            c.on_send(2, seq, Dsts::All);
        }
        c.on_send(1, 0, Dsts::All);
        c.on_send(0, 0, Dsts::All);
        for r in 0..2 {
            c.on_deliver(1, r, 2, 0, 1);
            c.on_deliver(2, r, 0, 0, 2);
        }
        c.on_deliver(3, 1, 1, 0, 3);
        c.on_deliver(3, 1, 2, 2, 4);
        c.finish(4, 9, true, None);
        let loss: Vec<&Violation> = c.violations().iter().filter(|v| v.kind == "loss").collect();
        assert_eq!(loss.len(), 2, "{:?}", c.violations());
        assert!(loss[0].detail.contains("(1, #0)") && loss[0].detail.contains("progress"));
        assert!(loss[1].detail.contains("(2, #2)") && loss[1].detail.contains("virtual"));
    }

    #[test]
    fn fifo_per_sender_is_checked() {
        let mut c = BaseChecker::new(2, EXACT);
        c.on_send(0, 0, Dsts::All);
        c.on_send(0, 1, Dsts::All);
        c.on_deliver(1, 1, 0, 1, 5);
        c.on_deliver(1, 1, 0, 0, 6);
        assert!(c.violations().iter().any(|v| v.kind == "fifo"));
    }
}
