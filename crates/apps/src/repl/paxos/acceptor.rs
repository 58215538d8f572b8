//! The acceptor and learner every replica is (\[SS\] §II-A: every node plays every role): it
//! accepts the leader's proposals (Phase 2b, after the disk), learns the decided prefix from
//! Accepts and Decides or fetches what it missed, and executes decided instances in order.

use super::*;

impl PaxosProcess {
    /// A message of `ballot` from its owner, at least the promised ballot: promise it, step down
    /// if leading or running for a lower one, and count the leader as heard.
    pub(super) fn hear(&mut self, ballot: u64) {
        debug_assert!(ballot >= self.promised);
        let mine = match &self.role {
            Role::Leader(l) => Some(l.ballot),
            Role::Candidate(c) => Some(c.ballot),
            Role::Follower { .. } => None,
        };
        if ballot > self.promised && mine.is_none() {
            self.stats.recoveries += 1; // A new leader (or candidate) is followed.
        }
        self.promised = ballot;
        match mine {
            Some(b) if b < ballot => self.step_down(),
            Some(_) => {}
            None => self.role = Role::Follower { heard: self.now },
        }
    }

    pub(super) fn step_down(&mut self) {
        self.note_active();
        self.paxos.step_downs += 1;
        self.role = Role::Follower { heard: self.now };
        self.queue.clear();
        self.pending.clear();
    }

    /// Phase 2a at an acceptor (\[SS\] §II-A).
    pub(super) fn on_accept(
        &mut self,
        src: u32,
        ballot: u64,
        instance: u64,
        commit: u64,
        batch: Batch,
    ) {
        if ballot < self.promised {
            let promised = self.promised;
            self.send(src, Msg::Reject { ballot: promised });
            return;
        }
        self.hear(ballot);
        self.phase1_streak = 0;
        let slot = self.log.get(&instance);
        if instance < self.commit || slot.is_some_and(|s| s.decided) {
            // Decided: the value cannot differ, so accepting it again changes nothing.
            self.send(src, Msg::Accepted { ballot, instance });
        } else if instance >= self.commit + ACCEPT_AHEAD_MAX {
            self.paxos.ahead_dropped += 1;
        } else if let Some(s) = slot.filter(|s| s.ballot == ballot) {
            // A resent Accept: answer again unless the disk write is still pending.
            if s.acked {
                self.send(src, Msg::Accepted { ballot, instance });
            }
        } else if self.disk.enabled() && self.disk_queue.len() >= DISK_QUEUE_LEN_MAX {
            self.paxos.ahead_dropped += 1;
        } else {
            let slot = Slot {
                ballot,
                batch,
                decided: false,
                acked: false,
            };
            self.log.insert(instance, slot);
            // §II-C: the value must be on stable storage before the acceptor answers.
            let done = self.disk.write(self.now);
            self.disk_queue.push_back((done, src, ballot, instance));
            self.disk_done();
        }
        self.learn_commit(src, ballot, commit);
    }

    /// Sends the Phase 2b answers whose disk writes completed (at once without a disk).
    pub(super) fn disk_done(&mut self) {
        while let Some(&(done, leader, ballot, instance)) = self.disk_queue.front() {
            if done > self.now {
                break;
            }
            self.disk_queue.pop_front();
            if let Some(s) = self.log.get_mut(&instance).filter(|s| s.ballot == ballot) {
                s.acked = true;
                self.send(leader, Msg::Accepted { ballot, instance });
            }
        }
    }

    pub(super) fn on_decide(&mut self, src: u32, ballot: u64, commit: u64) {
        if ballot < self.promised {
            let promised = self.promised;
            self.send(src, Msg::Reject { ballot: promised });
            return;
        }
        self.hear(ballot);
        self.phase1_streak = 0;
        self.learn_commit(src, ballot, commit);
    }

    /// The leader of `ballot` decided every instance below `commit`: a value accepted in
    /// `ballot` is the one it decided; any other is fetched.
    fn learn_commit(&mut self, leader: u32, ballot: u64, commit: u64) {
        if commit <= self.commit {
            return;
        }
        for (_, s) in self.log.range_mut(self.commit..commit) {
            if s.ballot == ballot {
                s.decided = true;
            }
        }
        self.advance();
        if self.commit < commit {
            self.fetch(leader);
        }
    }

    /// Asks `from` for the decided instances it lacks, at most once per heartbeat.
    pub(super) fn fetch(&mut self, from: u32) {
        let due = self
            .last_fetch
            .is_none_or(|t| t + self.cfg.heartbeat_ns <= self.now);
        if due && from != self.me {
            self.last_fetch = Some(self.now);
            self.paxos.fetches += 1;
            let commit = self.commit;
            self.send(from, Msg::Fetch { from: commit });
        }
    }

    pub(super) fn on_fetch(&mut self, src: u32, from: u64) {
        let end = self.commit.min(from.saturating_add(FETCH_INSTANCES_MAX));
        if end <= from {
            return;
        }
        let learns: Vec<Msg> = (self.log.range(from..end))
            .filter(|(_, s)| s.decided)
            .map(|(&instance, s)| Msg::Learn {
                instance,
                batch: s.batch.clone(),
            })
            .collect();
        for learn in learns {
            self.send(src, learn);
        }
    }

    pub(super) fn on_learn(&mut self, instance: u64, batch: Batch) {
        if instance < self.commit || instance >= self.commit + ACCEPT_AHEAD_MAX {
            return;
        }
        self.paxos.learned += 1;
        let s = self.log.entry(instance).or_insert(Slot {
            ballot: 0,
            batch: batch.clone(),
            decided: true,
            acked: false,
        });
        s.batch = batch;
        s.decided = true;
        self.advance();
        self.try_lead();
    }

    /// Executes the decided prefix in instance order, then forgets what is `retain` behind it.
    pub(super) fn advance(&mut self) {
        while let Some(s) = self.log.get(&self.commit).filter(|s| s.decided) {
            let batch = s.batch.clone();
            batch.iter().for_each(|r| self.execute(r));
            self.commit += 1;
        }
        self.leave_decided_behind();
        let keep_from = self.commit.saturating_sub(self.cfg.repl.retain as u64);
        while self
            .log
            .first_key_value()
            .is_some_and(|(&i, _)| i < keep_from)
        {
            self.log.pop_first();
        }
    }

    /// Decided is decided: a leader's window holds no instance it knows decided, and it starts
    /// new instances past every one. It may learn one it has in flight (a `Learn` answering
    /// the `Fetch` it sent as a candidate, arriving after it took over), or, its ballot
    /// superseded unawares, one past its window that a newer leader decided (such a leader's
    /// Accepts are refused: its proposals there are harmless, but they must not be made).
    pub(super) fn leave_decided_behind(&mut self) {
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        let (commit, log) = (self.commit, &self.log);
        let known = |i: &u64| *i < commit || log.get(i).is_some_and(|s| s.decided);
        l.active.retain(|i, _| !known(i));
        let decided_end = (log.range(l.next..).rev())
            .find(|(_, s)| s.decided)
            .map_or(commit, |(&i, _)| i + 1);
        l.next = l.next.max(decided_end);
    }

    /// Applies one request of the log, once per (client, id); the leader replies.
    fn execute(&mut self, r: &Request) {
        let rec = self.table.entry(r.client).or_default();
        let output = if r.id < rec.low || rec.outputs.contains_key(&r.id) {
            self.stats.duplicates += 1;
            rec.outputs.get(&r.id).copied()
        } else {
            let output = self.machine.apply(&r.cmd);
            rec.outputs.insert(r.id, output);
            self.stats.appended += 1;
            #[cfg(test)]
            self.executed.push((r.client, r.id, r.cmd));
            if r.cmd.is_write() {
                self.record_write(r.client, r.id, r.cmd);
            }
            Some(output)
        };
        let rec = self.table.get_mut(&r.client).expect("just inserted");
        if r.acked > rec.low {
            rec.low = r.acked;
            rec.outputs = rec.outputs.split_off(&r.acked);
        }
        self.pending.remove(&(r.client, r.id));
        if let (Role::Leader(_), Some(output)) = (&self.role, output) {
            let pad = self.reply_pad(r);
            self.send(
                r.client,
                Msg::Reply {
                    id: r.id,
                    output,
                    pad,
                },
            );
        }
    }

    fn record_write(&mut self, client: u32, id: u64, cmd: Cmd) {
        self.writes += 1;
        self.checksum = mix(self.checksum ^ mix((u64::from(client) << 48) ^ id));
        self.entries.push_back((client, id, self.checksum));
        if self.entries.len() > self.cfg.repl.retain.max(1) {
            self.entries.pop_front();
        }
        self.committed_writes.push((client, id));
        self.committed_cmds.push(cmd);
    }
}
