//! Global checkers (DESIGN.md §5): every run's sends, deliveries and barriers against the
//! properties 1Pipe promises (§2.1, §4.1). A violation is recorded with the true time and enough
//! detail to find it; the run's seed replays it.
//!
//! What is checked:
//! * `order` — each receiver delivers in strictly increasing (timestamp, sender, scattering)
//!   order, the key taken from the *sender's* record, not from the receiver's claim (§4.1). A
//!   duplicate breaks strictness too.
//! * `agreement` — any two receivers deliver the scatterings they both receive in the same
//!   relative order. Checked independently of the key: the two delivery logs, each filtered to
//!   what both saw, must be equal; for every adjacent pair of processes and 32 random pairs.
//! * `causality` — a delivered timestamp is below the receiving host's timestamp at delivery, and
//!   every timestamp a host issues is above everything it delivered before (§2.1, §4.1).
//! * `phantom` / `duplicate` — a delivery matches a send to that receiver with that timestamp,
//!   at most once at each receiver (counted per receiver at the end of the run, so a duplicate
//!   at one receiver never hides a miss at another).
//! * `barrier` — delivery strictly below the barrier that released it; never below a barrier the
//!   receiver had already passed; host and switch barriers never move backwards. Drivers that
//!   see a receiver only through its deliveries (the live runtime's records) have each
//!   delivery's releasing barrier checked per receiver by [`Checker::on_released`].
//! * `lower-bound` — with FIFO links, no packet ever arrives below its receiver's barrier (§4.1:
//!   the barrier property holds "given the FIFO property of each network link"); every late drop
//!   then is a barrier that lied.
//! * `unreported-loss` — every best-effort message not delivered was reported to its sender.
//!
//! Reliable messages (§5.1) are checked the same way in their own total order (`order`,
//! `agreement`, `barrier` against the commit barrier that released them, `causality`,
//! `phantom`), and, with nothing crashed and the run drained:
//! * `reliable-loss` — every reliable message is delivered at every destination, exactly once
//!   (a duplicate breaks `order`); the count is `undelivered_reliable`;
//! * `atomicity` — each reliable scattering is delivered by all its receivers or by none.

use onepipe_proto::host::Delivery;
use onepipe_proto::rng::Rng;
use onepipe_proto::wire::NakReason;
use onepipe_proto::Timestamp;
use std::collections::{BTreeMap, HashSet};

/// Destinations of one scattering.
#[derive(Clone, Debug)]
pub enum Dsts {
    /// Every process.
    All(u32),
    /// These processes.
    List(Vec<u32>),
}

impl Dsts {
    fn len(&self) -> usize {
        match self {
            Dsts::All(n) => *n as usize,
            Dsts::List(v) => v.len(),
        }
    }

    fn contains(&self, p: u32) -> bool {
        match self {
            Dsts::All(n) => p < *n,
            Dsts::List(v) => v.contains(&p),
        }
    }
}

#[derive(Clone, Debug)]
struct SendRec {
    ts: Timestamp,
    /// When it was sent (true time, ns).
    sent_ns: u64,
    dsts: Dsts,
    delivered: u32,
    reliable: bool,
}

/// One broken property.
#[derive(Clone, Debug)]
pub struct Violation {
    /// True time, ns.
    pub time_ns: u64,
    /// Which property (see the module docs).
    pub kind: &'static str,
    /// What happened.
    pub detail: String,
}

impl core::fmt::Display for Violation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "[{} ns] {}: {}", self.time_ns, self.kind, self.detail)
    }
}

/// How many violations are kept in full; the rest are only counted.
const VIOLATIONS_KEPT: usize = 20;

/// A message neither delivered nor reported this long after it was sent, when a run ends
/// undrained, is stuck rather than on its way ([`Checker::undrained_stale`]).
pub const STALE_NS: u64 = 5_000_000;

/// The global checker of one run.
#[derive(Debug)]
pub struct Checker {
    /// Process ids are dense in `0..procs` (ids given to rejoining hosts extend it).
    procs: u32,
    /// Host of each process, and each host's processes now (§5.2: a host that rejoins runs
    /// new processes; its old ones stay failed).
    proc_host: Vec<u32>,
    host_procs: Vec<Vec<u32>>,
    fifo_links: bool,
    /// Per sender, by scattering id (reliable scatterings are recorded when stamped, so ids
    /// may arrive out of order).
    sends: Vec<Vec<Option<SendRec>>>,
    /// Per (receiver, service): the last delivered key, and the delivery log.
    last_key: [Vec<Option<(Timestamp, u32, u64)>>; 2],
    logs: [Vec<Vec<(u32, u64)>>; 2],
    undelivered_reliable: u64,
    /// Processes whose host crashed (`--crash-host`) or was cut off, or that were declared
    /// failed: their sends and receipts are excused.
    crashed: Vec<bool>,
    host_barrier: Vec<Option<Timestamp>>,
    host_max_delivered: Vec<Option<Timestamp>>,
    /// Per (service, receiver), for [`Checker::on_released`]: the barrier that released its
    /// last delivery, and the one it had passed before that.
    released: [Vec<Released>; 2],
    switch_barrier: Vec<Option<Timestamp>>,
    failed: BTreeMap<(u32, u64), u32>,
    /// §5.2: processes the controller declared failed, with their failure timestamps.
    declared: Vec<Option<Timestamp>>,
    /// §5.2: reliable scatterings recalled, as (sender, raw timestamp).
    recalled: HashSet<(u32, u64)>,
    /// §5.2 receiver recovery: declared processes whose host settled their buffer.
    recovered: Vec<bool>,
    /// Per process: how many reliable deliveries it had made when its host was told it failed
    /// (it froze then; what it delivers afterwards, it delivers settling).
    frozen_at: Vec<Option<usize>>,
    violations: Vec<Violation>,
    violation_count: u64,
    deliveries_checked: u64,
    undrained: u64,
    /// Of those, the ones sent [`STALE_NS`] or more before the end.
    undrained_stale: u64,
    /// Messages neither delivered nor reported when the run hit its drain limit, described
    /// (the first [`VIOLATIONS_KEPT`]).
    undrained_samples: Vec<String>,
}

/// A receiver's barriers as its deliveries carried them: (the one passed before, the latest).
type Released = (Option<Timestamp>, Option<Timestamp>);

/// Reliable deliveries, per message (sender, sequence number), by receivers that failed
/// (`gone`) and, of those, by receivers the controller declared failed (`declared`).
struct Excused {
    gone: std::collections::HashMap<(u32, u64), u32>,
    declared: std::collections::HashMap<(u32, u64), u32>,
}

impl Checker {
    /// A checker for `procs` processes on `hosts` hosts and `switches` switches.
    pub fn new(procs: u32, procs_per_host: u32, switches: usize, fifo_links: bool) -> Checker {
        let hosts = (procs / procs_per_host) as usize;
        Checker {
            procs,
            proc_host: (0..procs).map(|p| p / procs_per_host).collect(),
            host_procs: (0..hosts as u32)
                .map(|h| (h * procs_per_host..(h + 1) * procs_per_host).collect())
                .collect(),
            fifo_links,
            sends: vec![Vec::new(); procs as usize],
            last_key: [vec![None; procs as usize], vec![None; procs as usize]],
            logs: [
                vec![Vec::new(); procs as usize],
                vec![Vec::new(); procs as usize],
            ],
            undelivered_reliable: 0,
            crashed: vec![false; procs as usize],
            host_barrier: vec![None; hosts],
            host_max_delivered: vec![None; hosts],
            released: [
                vec![(None, None); procs as usize],
                vec![(None, None); procs as usize],
            ],
            switch_barrier: vec![None; switches],
            failed: BTreeMap::new(),
            declared: vec![None; procs as usize],
            recalled: HashSet::new(),
            recovered: vec![false; procs as usize],
            frozen_at: vec![None; procs as usize],
            violations: Vec::new(),
            violation_count: 0,
            deliveries_checked: 0,
            undrained: 0,
            undrained_stale: 0,
            undrained_samples: Vec::new(),
        }
    }

    fn violate(&mut self, time_ns: u64, kind: &'static str, detail: String) {
        self.violation_count += 1;
        if self.violations.len() < VIOLATIONS_KEPT {
            self.violations.push(Violation {
                time_ns,
                kind,
                detail,
            });
        }
    }

    /// Number of violations found.
    pub fn violation_count(&self) -> u64 {
        self.violation_count
    }

    /// The first violations, in the order found.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// Messages neither delivered nor reported lost when a run hit its drain limit.
    pub fn undrained(&self) -> u64 {
        self.undrained
    }

    /// Of [`Checker::undrained`], the messages sent [`STALE_NS`] or more before the run ended:
    /// not merely still on their way (an application that keeps sending to the end always has
    /// some of those) but stuck.
    pub fn undrained_stale(&self) -> u64 {
        self.undrained_stale
    }

    /// The first of the messages [`Checker::undrained`] counts: sender, scattering, timestamp
    /// and how many destinations neither delivered it nor reported it.
    pub fn undrained_samples(&self) -> &[String] {
        &self.undrained_samples
    }

    /// Deliveries checked so far.
    pub fn deliveries_checked(&self) -> u64 {
        self.deliveries_checked
    }

    /// Host `host` crashed at `t` (idempotent). Best effort promises nothing about the messages
    /// of a crashed sender or to a crashed receiver (§4.2); everything else is checked as before.
    pub fn on_crash(&mut self, _t: u64, host: u32) {
        for &p in &self.host_procs[host as usize] {
            self.crashed[p as usize] = true;
        }
    }

    /// §5.2: the controller declared `host` failed with failure timestamp `ts`. Its processes
    /// are excused as receivers; as a sender, its reliable scatterings at or above `ts` must be
    /// delivered nowhere and those below it everywhere correct (`ts` is a commit barrier: it
    /// commits what is strictly below it).
    ///
    /// `procs` are the processes the controller declared — not necessarily the ones the
    /// checker has for the host: a host admitted as new processes may be declared again before
    /// it hears that it joined, and then it is the new processes that failed, not the old ones
    /// (VOPR seed 442 with heals: the old ones' failure timestamp was overwritten by the new
    /// ones', and their aborted scatterings were taken for lost).
    pub fn on_declared(&mut self, procs: &[u32], ts: Timestamp) {
        self.grow(procs.iter().map(|&p| p + 1).max().unwrap_or(0));
        for &p in procs {
            self.crashed[p as usize] = true;
            self.declared[p as usize].get_or_insert(ts);
        }
    }

    /// Makes room for process ids below `n`.
    fn grow(&mut self, n: u32) {
        let n = n.max(self.procs);
        let len = n as usize;
        self.procs = n;
        self.proc_host.resize(len, u32::MAX);
        self.sends.resize(len, Vec::new());
        for k in 0..2 {
            self.last_key[k].resize(len, None);
            self.logs[k].resize(len, Vec::new());
            self.released[k].resize(len, (None, None));
        }
        self.crashed.resize(len, false);
        self.declared.resize(len, None);
        self.recovered.resize(len, false);
        self.frozen_at.resize(len, None);
    }

    /// §5.2 Receiver Recovery: declared host `host` settled its receive buffer. "1Pipe only
    /// ensures all correct receivers and recovered receivers deliver messages consistently":
    /// at the end of a drained run its processes must have delivered exactly the reliable
    /// messages to them that the correct receivers deliver (see `check_recovered`).
    pub fn on_recovered(&mut self, host: u32) {
        for &p in &self.host_procs[host as usize] {
            self.recovered[p as usize] = true;
        }
    }

    /// §5.2 "the recovered process needs to join 1Pipe as a new process": host `host` runs
    /// the fresh processes `procs` from now on — correct, with no history; its old processes
    /// stay failed (and, if it settled, held to the correct receivers). Its barrier starts
    /// afresh; its timestamps stay above everything it delivered (`causality`).
    pub fn on_joined(&mut self, _t: u64, host: u32, procs: &[u32]) {
        self.grow(procs.iter().map(|&p| p + 1).max().unwrap_or(0));
        for &p in procs {
            self.proc_host[p as usize] = host;
        }
        self.host_procs[host as usize] = procs.to_vec();
        self.host_barrier[host as usize] = None;
    }

    /// §5.2: host `host` was told it failed: its processes deliver no more reliable messages
    /// until they settle.
    pub fn on_frozen(&mut self, host: u32) {
        for &p in &self.host_procs[host as usize] {
            self.frozen_at[p as usize].get_or_insert(self.logs[1][p as usize].len());
        }
    }

    /// Host `host` restarted with its state lost (`--restart-host`): its barrier starts afresh
    /// (its processes stay crashed; they rejoin as new ones).
    pub fn on_restarted(&mut self, host: u32) {
        self.host_barrier[host as usize] = None;
    }

    /// §5.2 Recall: the reliable scattering(s) `src` stamped `ts` were aborted.
    pub fn on_recalled(&mut self, src: u32, ts: Timestamp) {
        self.recalled.insert((src, ts.raw()));
    }

    /// §5.2: each process of a recovered host delivered a reliable message iff it is one of
    /// its destinations, it was not aborted (recalled, or at or above its sender's failure
    /// timestamp), and some correct destination delivered it — in timestamp order (checked as
    /// it delivers, by `on_deliver`). What it delivered before its host was told it failed is
    /// judged as any declared receiver's: §5.2 "Limitations" — "when network partition occurs,
    /// separated receivers may deliver messages after failure timestamp" — so only the
    /// deliveries it made settling must be ones the correct receivers make; it must miss none.
    fn check_recovered(&mut self, t: u64) {
        if !self.recovered.iter().any(|&r| r) {
            return;
        }
        let logs: Vec<HashSet<(u32, u64)>> = self.logs[1]
            .iter()
            .map(|l| l.iter().copied().collect())
            .collect();
        let settled: Vec<HashSet<(u32, u64)>> = self.logs[1]
            .iter()
            .enumerate()
            .map(|(p, l)| {
                let from = self.frozen_at[p].unwrap_or(0).min(l.len());
                l[from..].iter().copied().collect()
            })
            .collect();
        let mut found = Vec::new();
        for src in 0..self.procs as usize {
            for seq in 0..self.sends[src].len() {
                let Some(rec) = &self.sends[src][seq] else {
                    continue;
                };
                if !rec.reliable {
                    continue;
                }
                let aborted = self.recalled.contains(&(src as u32, rec.ts.raw()))
                    || self.declared[src].is_some_and(|f| rec.ts >= f);
                let key = (src as u32, seq as u64);
                let dsts: Vec<u32> = (0..self.procs).filter(|&p| rec.dsts.contains(p)).collect();
                if !dsts.iter().any(|&p| self.recovered[p as usize]) {
                    continue;
                }
                let by_correct = dsts
                    .iter()
                    .any(|&p| !self.crashed_proc(p) && logs[p as usize].contains(&key));
                // With no correct destination at all (one-to-one traffic to a failed receiver),
                // a message neither recalled nor above its sender's failure timestamp was
                // acknowledged and committed: the recovered receiver delivers it (Appendix: "The
                // network path to R fails before R receives commit barrier T: deliver after R
                // recovers").
                let correct_dst = dsts.iter().any(|&p| !self.crashed_proc(p));
                for &p in &dsts {
                    if !self.recovered[p as usize] {
                        continue;
                    }
                    let delivered = logs[p as usize].contains(&key);
                    let settling = settled[p as usize].contains(&key);
                    let why = if settling && aborted {
                        "delivered it settling, but it was aborted (recalled, or at or above its sender's failure timestamp)"
                    } else if settling && !by_correct && correct_dst {
                        "delivered it settling, but no correct destination did"
                    } else if !delivered && !aborted && by_correct {
                        "never delivered it, but a correct destination did"
                    } else {
                        continue;
                    };
                    found.push(format!(
                        "recovered p{p}: reliable p{src}#{seq} ts {}: it {why}",
                        rec.ts
                    ));
                }
            }
        }
        for detail in found {
            self.violate(t, "recovery", detail);
        }
    }

    fn crashed_proc(&self, p: u32) -> bool {
        self.crashed.get(p as usize).copied().unwrap_or(false)
    }

    /// How many of `dsts` crashed or were declared failed.
    fn crashed_among(&self, dsts: &Dsts) -> usize {
        match dsts {
            Dsts::All(n) => (0..*n).filter(|&p| self.crashed_proc(p)).count(),
            Dsts::List(v) => v.iter().filter(|&&p| self.crashed_proc(p)).count(),
        }
    }

    /// Reliable messages not delivered everywhere with nothing to excuse it (drained runs).
    pub fn undelivered_reliable(&self) -> u64 {
        self.undelivered_reliable
    }

    /// Records scattering `seq` of `src`, stamped `ts` by host `host`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_send(
        &mut self,
        t: u64,
        host: u32,
        src: u32,
        seq: u64,
        ts: Timestamp,
        dsts: Dsts,
        reliable: bool,
    ) {
        if let Some(d) = self.host_max_delivered[host as usize] {
            if ts <= d {
                self.violate(
                    t,
                    "causality",
                    format!("p{src} sent ts {ts} after its host delivered ts {d}"),
                );
            }
        }
        let log = &mut self.sends[src as usize];
        if log.len() <= seq as usize {
            log.resize(seq as usize + 1, None);
        }
        debug_assert!(log[seq as usize].is_none(), "p{src}#{seq} recorded twice");
        log[seq as usize] = Some(SendRec {
            ts,
            sent_ns: t,
            dsts,
            delivered: 0,
            reliable,
        });
    }

    /// Checks a host's barrier after it handled an input: monotone.
    pub fn on_host_barrier(&mut self, t: u64, host: u32, barrier: Option<Timestamp>) {
        let slot = &mut self.host_barrier[host as usize];
        match (*slot, barrier) {
            (Some(old), Some(new)) if new < old => {
                self.violate(
                    t,
                    "barrier",
                    format!("host {host} barrier moved back from {old} to {new}"),
                );
            }
            (Some(_), None) => {
                self.violate(t, "barrier", format!("host {host} lost its barrier"));
            }
            _ => *slot = barrier,
        }
    }

    /// Checks a switch's output barrier after it handled an input: monotone.
    pub fn on_switch_barrier(&mut self, t: u64, switch: usize, barrier: Option<Timestamp>) {
        let old = self.switch_barrier[switch];
        if let (Some(old), Some(new)) = (old, barrier) {
            if new < old {
                self.violate(
                    t,
                    "barrier",
                    format!("switch {switch} barrier moved back from {old} to {new}"),
                );
                return;
            }
        }
        if barrier.is_some() {
            self.switch_barrier[switch] = barrier;
        }
    }

    /// Checks that barriers sent on one link by a switch never go backwards.
    pub fn on_link_barrier(&mut self, t: u64, link: u32, last: Timestamp, b: Timestamp) {
        if b < last {
            self.violate(
                t,
                "barrier",
                format!("link l{link} carried barrier {b} after {last}"),
            );
        }
    }

    /// For a driver that sees receivers only through their deliveries (the live runtime's
    /// records): receiver `dst` delivered, in `reliable`'s service, a message released by
    /// `barrier` (the barrier the delivery carries). Checks that the barriers a receiver's
    /// deliveries carry never move backwards, and returns the `barrier_before` to pass to
    /// [`Checker::on_deliver`]: the barrier the receiver had passed before this one.
    ///
    /// §4.1: a best-effort host delivers everything below its barrier at once, so every
    /// delivery released by a later barrier lies at or above the earlier one. A reliable host
    /// may not (`deliver_burst_max` leaves a backlog below the commit barrier for its next
    /// input; a paused process resumes below it), so for reliable deliveries only monotonicity
    /// is checked here and `None` is returned; their order is checked by `order` and
    /// `agreement`.
    pub fn on_released(
        &mut self,
        t: u64,
        dst: u32,
        reliable: bool,
        barrier: Timestamp,
    ) -> Option<Timestamp> {
        if dst >= self.procs {
            self.grow(dst + 1);
        }
        let slot = &mut self.released[usize::from(reliable)][dst as usize];
        match slot.1 {
            Some(last) if barrier < last => {
                let detail = format!(
                    "p{dst}'s {}deliveries carried barrier {barrier} after {last}",
                    if reliable { "reliable " } else { "" }
                );
                self.violate(t, "barrier", detail);
            }
            Some(last) if barrier == last => {}
            last => *slot = (last, Some(barrier)),
        }
        let before = self.released[usize::from(reliable)][dst as usize].0;
        if reliable {
            None
        } else {
            before
        }
    }

    /// Checks one delivery. `barrier_before` is the host's barrier before the input that caused
    /// it; `seq` is the scattering id read from the payload.
    pub fn on_deliver(
        &mut self,
        t: u64,
        host: u32,
        d: &Delivery,
        seq: u64,
        barrier_before: Option<Timestamp>,
    ) {
        self.deliveries_checked += 1;
        let (src, dst) = (d.src.0, d.dst.0);
        if self.proc_host.get(dst as usize) != Some(&host) || src >= self.procs {
            self.violate(t, "phantom", format!("{d:?} at host {host}"));
            return;
        }
        let Some(rec) = self.sends[src as usize]
            .get_mut(seq as usize)
            .and_then(Option::as_mut)
        else {
            self.violate(
                t,
                "phantom",
                format!("p{dst} got unknown scattering p{src}#{seq}"),
            );
            return;
        };
        if rec.ts != d.ts || !rec.dsts.contains(dst) || rec.reliable != d.reliable {
            let detail = format!(
                "p{dst} got p{src}#{seq} ts {} (reliable: {}) but it was sent with ts {} to {:?} (reliable: {})",
                d.ts, d.reliable, rec.ts, rec.dsts, rec.reliable
            );
            self.violate(t, "phantom", detail);
            return;
        }
        rec.delivered += 1;
        if d.ts >= d.barrier {
            let detail = format!(
                "p{dst} delivered p{src}#{seq} ts {} at or above its barrier {}",
                d.ts, d.barrier
            );
            self.violate(t, "barrier", detail);
        }
        if let Some(b) = barrier_before {
            if d.ts < b {
                let detail = format!(
                    "p{dst} delivered p{src}#{seq} ts {} below barrier {b} it had already passed",
                    d.ts
                );
                self.violate(t, "barrier", detail);
            }
        }
        if d.ts >= d.now_ts {
            let detail = format!(
                "p{dst} delivered ts {} while its host's timestamp was {}",
                d.ts, d.now_ts
            );
            self.violate(t, "causality", detail);
        }
        let key = (d.ts, src, seq);
        let service = d.reliable as usize;
        if let Some(last) = self.last_key[service][dst as usize] {
            if !key_lt(last, key) {
                let detail = format!(
                    "p{dst} delivered {}(ts {}, p{src}, #{seq}) after (ts {}, p{}, #{})",
                    if d.reliable { "reliable " } else { "" },
                    d.ts,
                    last.0,
                    last.1,
                    last.2
                );
                self.violate(t, "order", detail);
            }
        }
        self.last_key[service][dst as usize] = Some(key);
        self.logs[service][dst as usize].push((src, seq));
        let m = &mut self.host_max_delivered[host as usize];
        *m = Some(m.map_or(d.ts, |x| x.max_wrapping(d.ts)));
    }

    /// Records a send-failed notification at `src` for a message to `dst`.
    ///
    /// On FIFO links a late drop breaks the barrier's promise (a lower bound of what is still in
    /// flight), except for a sender declared failed at or below the message's timestamp: its
    /// input links were removed (§4.2), so no barrier bounds it any more, and §5.2 Discard
    /// drops what it stamped at or above its failure timestamp everywhere anyway. (Fig. 14 c at
    /// 512 processes: a host declared failed under overload still sent before it was told.)
    pub fn on_send_failed(&mut self, t: u64, src: u32, dst: u32, ts: Timestamp, reason: NakReason) {
        let discarded = self
            .declared
            .get(src as usize)
            .copied()
            .flatten()
            .is_some_and(|f| ts >= f);
        if self.fifo_links && reason == NakReason::Late && !discarded {
            self.violate(
                t,
                "lower-bound",
                format!("p{dst} dropped a late message from p{src} ts {ts} on FIFO links: a barrier above a message still in flight"),
            );
        }
        let _ = dst;
        *self.failed.entry((src, ts.raw())).or_default() += 1;
    }

    /// End-of-run checks: every loss reported (only if the run drained: otherwise undelivered
    /// messages may still be on their way, and are counted by [`Checker::undrained`]); pairwise
    /// agreement.
    pub fn finish(&mut self, t: u64, seed: u64, drained: bool) {
        self.check_duplicates(t);
        if !drained {
            self.count_undrained(t);
            self.check_agreement(t, seed);
            return;
        }
        self.check_recovered(t);
        let any_crash = self.crashed.iter().any(|&c| c);
        // Reliable deliveries by receivers that failed: excused, so not counted for atomicity.
        // Of those, the ones by receivers the controller declared failed are excused from
        // failure atomicity too — §5.2 "Limitations": "1Pipe only ensures all correct receivers
        // and recovered receivers deliver messages consistently. In addition, when network
        // partition occurs, separated receivers may deliver messages after failure timestamp"
        // (a receiver cut off with its rack keeps delivering what its rack commits; VOPR seed
        // 178 at 10 ms). Recovered receivers are held to the correct ones by `check_recovered`.
        let excused = self.excused_deliveries(any_crash);
        for src in 0..self.procs as usize {
            for seq in 0..self.sends[src].len() {
                let Some(rec) = &self.sends[src][seq] else {
                    continue;
                };
                if rec.reliable {
                    self.check_reliable_send(t, src, seq, any_crash, &excused);
                } else {
                    self.check_best_effort_send(t, src, seq, any_crash);
                }
            }
        }
        self.check_agreement(t, seed);
    }

    /// The reliable deliveries by receivers that failed (if `any_crash`), per message.
    fn excused_deliveries(&self, any_crash: bool) -> Excused {
        let mut excused = Excused {
            gone: std::collections::HashMap::new(),
            declared: std::collections::HashMap::new(),
        };
        if any_crash {
            for p in 0..self.procs {
                if self.crashed_proc(p) {
                    let declared = self.declared[p as usize].is_some();
                    for &k in &self.logs[1][p as usize] {
                        *excused.gone.entry(k).or_default() += 1;
                        if declared {
                            *excused.declared.entry(k).or_default() += 1;
                        }
                    }
                }
            }
        }
        excused
    }

    /// The end-of-run checks of reliable send `seq` of process `src`: failure atomicity if it was
    /// aborted, otherwise every destination still correct (`excused` the failed ones) delivered it.
    fn check_reliable_send(
        &mut self,
        t: u64,
        src: usize,
        seq: usize,
        any_crash: bool,
        excused: &Excused,
    ) {
        let Some(rec) = &self.sends[src][seq] else {
            return;
        };
        // §2.1: with no failure, a reliable message reaches every destination, and
        // a scattering all of them or none. §5.2 (restricted failure atomicity):
        // every correct destination or none; none if it was recalled or its sender
        // failed below its timestamp.
        let fail_ts = self.declared[src];
        if fail_ts.is_none() && self.crashed[src] {
            return; // crashed and never declared: nothing is promised
        }
        let aborted = self.recalled.contains(&(src as u32, rec.ts.raw()))
            || fail_ts.is_some_and(|f| rec.ts >= f);
        if aborted {
            let by_correct = rec.delivered
                - excused
                    .declared
                    .get(&(src as u32, seq as u64))
                    .copied()
                    .unwrap_or(0);
            if by_correct > 0 {
                let why = if self.recalled.contains(&(src as u32, rec.ts.raw())) {
                    "was recalled".to_string()
                } else {
                    format!(
                        "is at or above its sender's failure timestamp {}",
                        fail_ts.expect("set")
                    )
                };
                let detail = format!(
                    "reliable p{src}#{seq} ts {} {why} but {by_correct} correct destination(s) delivered it",
                    rec.ts
                );
                self.violate(t, "failure-atomicity", detail);
            }
            return;
        }
        let gone_dsts = if any_crash {
            self.crashed_among(&rec.dsts)
        } else {
            0
        };
        let delivered = rec.delivered as usize
            - excused
                .gone
                .get(&(src as u32, seq as u64))
                .copied()
                .unwrap_or(0) as usize;
        let missing = (rec.dsts.len() - gone_dsts).saturating_sub(delivered);
        if missing > 0 {
            self.undelivered_reliable += missing as u64;
            let absent: Vec<u32> = (0..self.procs)
                .filter(|&p| rec.dsts.contains(p) && !self.crashed_proc(p))
                .filter(|&p| !self.logs[1][p as usize].contains(&(src as u32, seq as u64)))
                .take(4)
                .collect();
            let detail = format!(
                "reliable p{src}#{seq} ts {}: {missing} of {} destination(s) never delivered it (e.g. {absent:?})",
                rec.ts,
                rec.dsts.len()
            );
            let partial = delivered > 0;
            self.violate(t, "reliable-loss", detail.clone());
            if partial {
                self.violate(t, "atomicity", detail);
            }
        }
    }

    /// The end-of-run check of best-effort send `seq` of process `src`: every destination that
    /// did not deliver it was reported to the sender.
    fn check_best_effort_send(&mut self, t: u64, src: usize, seq: usize, any_crash: bool) {
        let Some(rec) = &self.sends[src][seq] else {
            return;
        };
        if self.crashed_proc(src as u32) {
            return;
        }
        let key = (src as u32, rec.ts.raw());
        let failed = self.failed.get(&key).copied().unwrap_or(0);
        // A crashed receiver excuses one missing delivery (it may have delivered before
        // crashing, so this is lenient by at most one per crashed destination).
        let crashed_dsts = if any_crash {
            self.crashed_among(&rec.dsts)
        } else {
            0
        };
        let missing = rec
            .dsts
            .len()
            .saturating_sub(rec.delivered as usize)
            .saturating_sub(crashed_dsts);
        if missing > failed as usize {
            let detail = format!(
                "p{src}#{seq} ts {}: {missing} destination(s) never delivered it and the sender was told of {failed}",
                rec.ts
            );
            self.violate(t, "unreported-loss", detail);
        }
        if missing > 0 {
            let Some(f) = self.failed.get_mut(&key) else {
                return;
            };
            *f -= (missing as u32).min(*f);
        }
    }

    /// `duplicate`, per receiver: a receiver that delivers a message twice. Each extra copy is
    /// reported, taken out of its receiver's log and out of the message's delivery count, so
    /// that a duplicate at one receiver cannot make up for a miss at another in the loss and
    /// atomicity checks that follow.
    fn check_duplicates(&mut self, t: u64) {
        let mut found = Vec::new();
        for service in 0..2 {
            for dst in 0..self.logs[service].len() {
                let log = &mut self.logs[service][dst];
                let mut seen: HashSet<(u32, u64)> = HashSet::with_capacity(log.len());
                log.retain(|&k| {
                    let first = seen.insert(k);
                    if !first {
                        found.push((dst as u32, k));
                    }
                    first
                });
            }
        }
        for (dst, (src, seq)) in found {
            if let Some(rec) = self.sends[src as usize]
                .get_mut(seq as usize)
                .and_then(Option::as_mut)
            {
                rec.delivered -= 1;
            }
            self.violate(t, "duplicate", format!("p{dst} got p{src}#{seq} again"));
        }
    }

    /// A run cut short by its drain limit: counts (and describes the first of) the messages
    /// neither delivered nor reported lost, with the excuses of a drained run's loss check: a
    /// best-effort message from a process that crashed or was declared failed (nobody is left
    /// to tell), and one missing delivery per such destination.
    fn count_undrained(&mut self, t: u64) {
        let (mut unresolved, mut stale) = (0u64, 0u64);
        for (src, log) in self.sends.iter().enumerate() {
            for (seq, rec) in log.iter().enumerate() {
                let Some(rec) = rec else { continue };
                if !rec.reliable && self.crashed_proc(src as u32) {
                    continue;
                }
                let gone = self.crashed_among(&rec.dsts);
                let missing = rec
                    .dsts
                    .len()
                    .saturating_sub(rec.delivered as usize)
                    .saturating_sub(gone) as u64;
                let reported = self.failed.get(&(src as u32, rec.ts.raw())).copied();
                let open = missing.saturating_sub(u64::from(reported.unwrap_or(0)));
                if open == 0 {
                    continue;
                }
                unresolved += open;
                if rec.sent_ns.saturating_add(STALE_NS) <= t {
                    stale += open;
                }
                if self.undrained_samples.len() < VIOLATIONS_KEPT {
                    self.undrained_samples.push(format!(
                        "p{src}#{seq} ts {}{}: {open} of {} destination(s) neither delivered it nor reported it lost",
                        rec.ts,
                        if rec.reliable { " (reliable)" } else { "" },
                        rec.dsts.len()
                    ));
                }
            }
        }
        self.undrained = unresolved;
        self.undrained_stale = stale;
    }

    fn check_agreement(&mut self, t: u64, seed: u64) {
        let n = self.procs as usize;
        if n < 2 {
            return;
        }
        let mut pairs: Vec<(usize, usize)> = (0..n).map(|r| (r, (r + 1) % n)).collect();
        let mut rng = Rng::new(seed ^ 0xA6EE);
        for _ in 0..32 {
            let a = rng.below(n as u64) as usize;
            let b = rng.below(n as u64) as usize;
            if a != b {
                pairs.push((a, b));
            }
        }
        for service in 0..2 {
            for &(a, b) in &pairs {
                let logs = &self.logs[service];
                let sa: HashSet<_> = logs[a].iter().copied().collect();
                let sb: HashSet<_> = logs[b].iter().copied().collect();
                let fa = logs[a].iter().filter(|x| sb.contains(x));
                let fb = logs[b].iter().filter(|x| sa.contains(x));
                if let Some((i, (x, y))) = fa.zip(fb).enumerate().find(|(_, (x, y))| x != y) {
                    let detail = format!(
                        "p{a} and p{b} disagree at their {i}th common {}delivery: p{}#{} vs p{}#{}",
                        if service == 1 { "reliable " } else { "" },
                        x.0,
                        x.1,
                        y.0,
                        y.1
                    );
                    self.violate(t, "agreement", detail);
                }
            }
        }
    }
}

fn key_lt(a: (Timestamp, u32, u64), b: (Timestamp, u32, u64)) -> bool {
    a.0 < b.0 || (a.0 == b.0 && (a.1, a.2) < (b.1, b.2))
}

#[cfg(test)]
mod tests;
