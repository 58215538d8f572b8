//! The leader (\[SS\] §II-A/B/C, §IV-A): it queues the clients' requests, packs them into
//! batches and runs Phase 2 for up to WND instances at once under Fig. 6's policy, counts the
//! Phase 2b answers, and tells the followers its decided prefix.

use super::*;

impl PaxosProcess {
    pub(super) fn on_request(&mut self, src: u32, r: Request) {
        let span_ok = r.id >= r.acked && r.id - r.acked < CLIENT_ID_SPAN_MAX;
        if r.client != src || !span_ok {
            self.stats.malformed += 1;
            return;
        }
        if let Role::Follower { .. } = self.role {
            let leader = self.owner(self.promised);
            let leader = (leader != self.me).then_some(leader);
            self.paxos.redirects += 1;
            self.send(src, Msg::Redirect { id: r.id, leader });
            return;
        }
        // Executed already: answer from the client table (the output is a fact of the log).
        let rec = self.table.get(&r.client);
        if rec.is_some_and(|c| r.id < c.low || c.outputs.contains_key(&r.id)) {
            self.stats.duplicates += 1;
            if let Some(&output) = rec.and_then(|c| c.outputs.get(&r.id)) {
                let pad = self.reply_pad(&r);
                self.send(
                    src,
                    Msg::Reply {
                        id: r.id,
                        output,
                        pad,
                    },
                );
            }
            return;
        }
        if self.pending.contains(&(r.client, r.id)) {
            self.stats.duplicates += 1;
            return;
        }
        if self.queue.len() >= QUEUE_LEN_MAX {
            self.paxos.refused += 1;
            return;
        }
        self.pending.insert((r.client, r.id));
        self.queue.push_back(Queued {
            req: r,
            arrived: self.now,
        });
    }

    /// \[SS\] Fig. 6, `main()` and `buildBatch()`: while fewer than WND instances are active
    /// (line 22), take requests from the queue while `size(Batch) + |r| ≤ BSZ` (line 13; the
    /// first request always, so a request larger than BSZ forms a batch alone), and start an
    /// instance when the next request does not fit (line 17), the batch reached BSZ or its
    /// oldest request has waited Δ_B (line 18). Otherwise wait: `poll_timeout` arms Δ_B.
    pub(super) fn try_propose(&mut self) {
        let (wnd, bsz) = (self.cfg.wnd as usize, self.cfg.bsz as usize);
        loop {
            let Role::Leader(l) = &self.role else {
                return;
            };
            let room = l.active.len() < wnd && l.next < self.commit + ACCEPT_AHEAD_MAX;
            if !room || self.queue.is_empty() {
                return;
            }
            let (mut n, mut size) = (0, 0);
            for q in &self.queue {
                let len = q.req.wire_len();
                if n == BATCH_REQUESTS_MAX || (n > 0 && size + len > bsz) {
                    break;
                }
                n += 1;
                size += len;
            }
            let full = n < self.queue.len() || size >= bsz;
            let expired = self.queue[0].arrived + self.cfg.delta_b_ns <= self.now;
            if !full && !expired {
                return;
            }
            let batch: Batch = self.queue.drain(..n).map(|q| q.req).collect();
            let instance = l.next;
            self.propose(instance, batch);
        }
    }

    /// When the batch being built is due by Δ_B (Fig. 6, line 18), if the window has room.
    pub(super) fn batch_deadline(&self) -> Option<Instant> {
        let Role::Leader(l) = &self.role else {
            return None;
        };
        let room = l.active.len() < self.cfg.wnd as usize;
        let oldest = self.queue.front().filter(|_| room)?;
        Some(oldest.arrived + self.cfg.delta_b_ns)
    }

    /// Starts Phase 2 of `instance` (\[SS\] §II-A): Accept to every replica, itself included.
    pub(super) fn propose(&mut self, instance: u64, batch: Batch) {
        self.note_active();
        let (now, commit, all) = (self.now, self.commit, self.all_replicas());
        let Role::Leader(l) = &mut self.role else {
            unreachable!("only a leader proposes");
        };
        assert!(instance >= commit, "instance {instance} is decided already");
        assert!(
            !self.log.get(&instance).is_some_and(|s| s.decided),
            "instance {instance} is known decided"
        );
        assert!(
            !l.active.contains_key(&instance),
            "instance {instance} proposed twice"
        );
        l.next = l.next.max(instance + 1);
        let active = Active {
            batch: batch.clone(),
            acks: 0,
            sent: now,
        };
        l.active.insert(instance, active);
        l.sent_commit = commit;
        l.broadcast_at = now;
        let ballot = l.ballot;
        self.paxos.active_max = self.paxos.active_max.max(l.active.len() as u64);
        let accept = Msg::Accept {
            ballot,
            instance,
            commit,
            batch,
        };
        self.multicast(all, accept);
    }

    /// Accounts the time since the active instances last changed (before they change).
    pub(super) fn note_active(&mut self) {
        let now = self.now;
        if let Role::Leader(l) = &mut self.role {
            let dt = now.saturating_since(l.active_since);
            self.paxos.active_ns_sum += dt * l.active.len() as u64;
            self.paxos.leading_ns += dt;
            l.active_since = now;
        }
    }

    /// Phase 2b at the leader: a strict majority decides the instance.
    pub(super) fn on_accepted(&mut self, src: u32, ballot: u64, instance: u64) {
        let majority = self.majority();
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if ballot != l.ballot {
            return;
        }
        let Some(a) = l.active.get_mut(&instance) else {
            return; // Decided already: a late or duplicated answer.
        };
        a.acks |= 1 << src;
        if (a.acks.count_ones() as usize) < majority {
            return;
        }
        self.note_active();
        let Role::Leader(l) = &mut self.role else {
            unreachable!()
        };
        let a = l.active.remove(&instance).expect("active");
        self.paxos.instances_decided += 1;
        self.paxos.requests_decided += a.batch.len() as u64;
        assert!(instance >= self.commit, "instance {instance} decided twice");
        let slot = self.log.entry(instance).or_insert(Slot {
            ballot,
            batch: a.batch.clone(),
            decided: false,
            acked: false,
        });
        debug_assert!(
            if slot.decided {
                slot.batch == a.batch
            } else {
                slot.ballot == ballot || slot.batch == a.batch
            },
            "instance {instance}: decided with another value than its slot's"
        );
        slot.ballot = ballot;
        slot.batch = a.batch;
        slot.decided = true;
        self.advance();
    }

    /// Tells the followers the decided prefix when no Accept carried it (the leader is idle).
    pub(super) fn send_decide_if_idle(&mut self) {
        let commit = self.commit;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if l.sent_commit < commit {
            l.sent_commit = commit;
            l.broadcast_at = self.now;
            let decide = Msg::Decide {
                ballot: l.ballot,
                commit,
            };
            let others = self.all_replicas() & !(1 << self.me);
            self.multicast(others, decide);
        }
    }

    /// The leader's heartbeat and retransmissions (every `heartbeat_ns`).
    pub(super) fn leader_tick(&mut self) {
        let (now, hb, commit, me) = (self.now, self.cfg.heartbeat_ns, self.commit, self.me);
        let others = self.all_replicas() & !(1 << me);
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        let ballot = l.ballot;
        let mut resend = Vec::new();
        for (&instance, a) in l.active.iter_mut() {
            if a.sent + 2 * hb <= now {
                a.sent = now;
                resend.push((instance, a.batch.clone(), others & !a.acks));
            }
        }
        let heartbeat = l.broadcast_at + hb <= now;
        if heartbeat {
            l.broadcast_at = now;
            l.sent_commit = commit;
        }
        for (instance, batch, to) in resend {
            self.paxos.retransmits += 1;
            let accept = Msg::Accept {
                ballot,
                instance,
                commit,
                batch,
            };
            self.multicast(to, accept);
        }
        if heartbeat {
            self.multicast(others, Msg::Decide { ballot, commit });
        }
    }
}
