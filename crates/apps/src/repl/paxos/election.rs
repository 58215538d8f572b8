//! Leader change (\[SS\] §II-A, Phase 1): a follower that stopped hearing the leader runs for a
//! higher ballot; replicas promise it and report their slots; with a majority it catches up,
//! re-proposes what may have been chosen, and leads.

use super::*;

impl PaxosProcess {
    /// When a follower starts Phase 1: `election_timeout_ns` after it last heard the leader,
    /// staggered by its rank among the replicas after the leader not known failed, so the
    /// first of them runs alone.
    pub(super) fn election_deadline(&self, heard: Instant) -> Instant {
        let n = self.replicas();
        let leader = self.owner(self.promised);
        let mut rank = 0;
        for k in 1..n {
            let r = (leader + k) % n;
            if r == self.me {
                break;
            }
            rank += u64::from(!self.failed[r as usize]);
        }
        let timeout = self.cfg.election_timeout_ns;
        heard + timeout + rank * (timeout / 2)
    }

    /// \[SS\] §II-A Phase 1 with a ballot above every one seen.
    pub(super) fn start_phase1(&mut self) {
        self.note_active();
        let n = u64::from(self.replicas());
        let ballot = (self.promised / n + 1) * n + u64::from(self.me);
        assert!(ballot > self.promised && self.owner(ballot) == self.me);
        self.role = Role::Candidate(Candidate {
            ballot,
            started: self.now,
            promised_by: 0,
            best: BTreeMap::new(),
            max_commit: self.commit,
            source: self.me,
        });
        self.paxos.phase1_runs += 1;
        self.phase1_streak = self.phase1_streak.saturating_add(1);
        let from = self.commit;
        self.multicast(self.all_replicas(), Msg::Prepare { ballot, from });
    }

    /// Phase 1b: promise, and report every slot from the candidate's or its own decided prefix.
    pub(super) fn on_prepare(&mut self, src: u32, ballot: u64, from: u64) {
        if ballot < self.promised {
            let promised = self.promised;
            self.send(src, Msg::Reject { ballot: promised });
            return;
        }
        self.hear(ballot);
        let slots: Vec<(u64, u64, Batch)> = (self.log.range(from.max(self.commit)..))
            .map(|(&i, s)| {
                (
                    i,
                    if s.decided { DECIDED } else { s.ballot },
                    s.batch.clone(),
                )
            })
            .collect();
        let commit = self.commit;
        self.send(
            src,
            Msg::Promise {
                ballot,
                commit,
                slots,
            },
        );
    }

    pub(super) fn on_promise(
        &mut self,
        src: u32,
        ballot: u64,
        commit: u64,
        slots: Vec<(u64, u64, Batch)>,
    ) {
        let Role::Candidate(c) = &mut self.role else {
            return;
        };
        if c.ballot != ballot || c.promised_by & (1 << src) != 0 {
            return;
        }
        c.promised_by |= 1 << src;
        // An acceptor holds nothing `ACCEPT_AHEAD_MAX` past its decided prefix.
        let bound = commit.saturating_add(ACCEPT_AHEAD_MAX);
        for (instance, b, batch) in slots.into_iter().filter(|s| s.0 < bound) {
            let best = c.best.entry(instance).or_insert((b, batch.clone()));
            if b > best.0 {
                *best = (b, batch);
            }
        }
        if commit > c.max_commit {
            c.max_commit = commit;
            c.source = src;
        }
        self.try_lead();
    }

    /// With a majority of promises and caught up with the most advanced decided prefix among
    /// them, lead: re-propose the highest-ballot value of each later instance, no-ops in gaps.
    pub(super) fn try_lead(&mut self) {
        let majority = self.majority();
        let Role::Candidate(c) = &self.role else {
            return;
        };
        if (c.promised_by.count_ones() as usize) < majority {
            return;
        }
        if self.commit < c.max_commit {
            let source = c.source;
            self.fetch(source);
            return;
        }
        let Role::Candidate(c) =
            std::mem::replace(&mut self.role, Role::Follower { heard: self.now })
        else {
            unreachable!()
        };
        let start = self.commit;
        let end = c
            .best
            .range(start..)
            .next_back()
            .map_or(start, |(&i, _)| i + 1);
        self.role = Role::Leader(Leading {
            ballot: c.ballot,
            next: start,
            active: BTreeMap::new(),
            sent_commit: start,
            broadcast_at: self.now,
            active_since: self.now,
        });
        self.paxos.phase1_won += 1;
        self.phase1_streak = 0;
        self.stats.recoveries_led += 1;
        // The previous leader's window bounded these, not this one's WND. \[SS\] §II-A: Phase 2
        // is for instances whose value is not chosen yet, so an instance this replica knows
        // decided is not proposed again. It can know one past its decided prefix: as the
        // previous leader it decided an instance while an earlier one was still open, stepped
        // down, and now leads again (seed 708). Proposed again — with the same value, which its
        // own promise reported `DECIDED` — it would sit in the window after the decided prefix
        // passed it. Followers that lack it fetch it.
        let mut best = c.best;
        for instance in start..end {
            if self.log.get(&instance).is_some_and(|s| s.decided) {
                continue;
            }
            let batch = best
                .remove(&instance)
                .map_or_else(|| Batch::from([]), |b| b.1);
            self.propose(instance, batch);
        }
        // New instances start past the skipped ones, and past any it learned decided beyond
        // the promises' reports (its ballot was superseded while it caught up).
        self.leave_decided_behind();
    }

    pub(super) fn on_reject(&mut self, ballot: u64) {
        if ballot <= self.promised {
            return;
        }
        self.promised = ballot;
        if !matches!(self.role, Role::Follower { .. }) {
            self.step_down();
        }
    }
}
