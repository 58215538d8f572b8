//! Recovery by consensus (§2.2.2): a single-decree Paxos round per epoch among the replicas,
//! which decides the next view and the log its members keep, and its installation. The module
//! docs of `repl::onertt` give the protocol; this is the coordinator's and the acceptors' code.

use super::*;

impl OneRttProcess {
    /// A loss or a failure is suspected: the coordinator starts a recovery at once, the others
    /// stand by in rank order — unless a recovery is under way (this replica leads one, or took
    /// a ballot of the next epoch): whether its coordinator fell silent is the watchdog's to
    /// judge. A standby that fired while its coordinator's answers were on their way would
    /// pre-empt a round about to finish.
    pub(super) fn want_recovery(&mut self) {
        let me = self.cfg.me.0;
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if r.coord.is_some() || r.frozen_since.is_some() {
            return;
        }
        let rank = ids_of(r.members)
            .filter(|m| !r.failed.contains(m))
            .position(|m| m == me);
        let Some(rank) = rank else {
            return;
        };
        if rank == 0 {
            self.start_recovery();
        } else if r.want.is_none_or(|(_, e)| e != r.epoch) {
            r.want = Some((Instant(now.0 + (rank as u64 + 1) * suspect), r.epoch));
        }
    }

    pub(super) fn start_recovery(&mut self) {
        let me = self.cfg.me.0;
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let round = (r.promised >> 8).max(r.coord.as_ref().map_or(0, |c| c.ballot >> 8)) + 1;
        let ballot = (round << 8) | u64::from(me);
        let epoch = r.epoch + 1;
        r.want = None;
        r.coord = Some(Coord {
            ballot,
            epoch,
            promises: BTreeMap::new(),
            proposed: None,
            deadline: Instant(now.0 + round_wait_ns(suspect, ballot)),
            tries: 0,
        });
        let dsts: Vec<u32> = ids_of(r.members)
            .filter(|m| !r.failed.contains(m))
            .collect();
        self.send(OTHER_TAG, dsts.into_iter(), &Msg::Prepare { epoch, ballot });
    }

    pub(super) fn on_prepare(&mut self, src: ProcId, epoch: u64, ballot: u64) {
        let now = self.now;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if epoch == r.epoch {
            // Already installed: hand the coordinator the value.
            if let Some(v) = r.last_value.clone().filter(|v| v.epoch == epoch) {
                self.send(OTHER_TAG, [src.0].into_iter(), &Msg::Decide { value: v });
            }
            return;
        }
        if epoch > r.epoch + 1 {
            // The sender installed this replica's next epoch, whose Decide it missed: a
            // Prepare of that epoch asks the sender for the value (answered as above), rather
            // than waiting for the watchdog — by then the sender's epoch may have moved on
            // without this replica, which could never rejoin.
            let m = Msg::Prepare {
                epoch: r.epoch + 1,
                ballot: r.promised,
            };
            self.send(OTHER_TAG, [src.0].into_iter(), &m);
            return;
        }
        if epoch != r.epoch + 1 || ballot < r.promised {
            return;
        }
        Self::follow(r, ballot, now);
        let tail = r
            .log
            .iter()
            .skip((r.commit - r.log_start) as usize)
            .map(|e| e.e)
            .collect();
        let m = Msg::Promise {
            epoch,
            ballot,
            accepted: r.accepted.clone(),
            commit: r.commit,
            tail,
        };
        self.send(OTHER_TAG, [src.0].into_iter(), &m);
    }

    /// This replica takes `ballot` of the next epoch (a Prepare or an Accept): that ballot's
    /// coordinator is at work. A standby stands down, and a coordinator of a lower ballot —
    /// which can no longer win — steps down: coordinators that each start a higher round when
    /// their own is pre-empted decide nothing. The watchdog still starts a round if the
    /// coordinator falls silent.
    fn follow(r: &mut Replica, ballot: u64, now: Instant) {
        r.promised = ballot;
        r.frozen_since = Some(now);
        r.want = None;
        if r.coord.as_ref().is_some_and(|c| c.ballot < ballot) {
            r.coord = None;
        }
    }

    pub(super) fn on_promise(
        &mut self,
        src: u32,
        epoch: u64,
        ballot: u64,
        accepted: Option<(u64, Value)>,
        commit: u64,
        tail: Vec<WireEntry>,
    ) {
        let Some(c) = self.replica.as_mut().and_then(|r| r.coord.as_mut()) else {
            return;
        };
        if c.ballot != ballot || c.epoch != epoch || c.proposed.is_some() {
            return;
        }
        c.promises.insert(src, (accepted, commit, tail));
        self.maybe_propose();
    }

    /// Phase 1 is over once every live member promised, a majority at least. A member is left
    /// out of the view only once 1Pipe declared it failed (§2.1 `onepipe_proc_fail_callback`:
    /// recovery goes on once "the correct replicas reach a quorum"), never for its silence:
    /// a replica left out does not rejoin (that needs a state transfer), so a view shrunk by a
    /// lost Promise tolerates one crash fewer — with three replicas, none (vopr --apps seed
    /// 101234). Silence costs no failover time: 1Pipe delivers nothing past a crashed host
    /// until it declares it failed. Phase 2 then has a deadline of its own ([`round_wait_ns`]
    /// from now), and its own tries: a round that had to fit both phases, four message delays,
    /// into one `suspect_ns` never finished where 1Pipe's delivery takes a quarter of it (a
    /// host whose clock stepped back holds every barrier).
    pub(super) fn maybe_propose(&mut self) {
        let majority = self.majority();
        let (now, suspect) = (self.now, self.cfg.suspect_ns);
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let live: Vec<u32> = ids_of(r.members)
            .filter(|m| !r.failed.contains(m))
            .collect();
        let Some(c) = r.coord.as_mut() else { return };
        let all = live.iter().all(|m| c.promises.contains_key(m));
        if c.proposed.is_some() || !all || c.promises.len() < majority {
            return;
        }
        let adopted = c
            .promises
            .values()
            .filter_map(|p| p.0.clone())
            .max_by_key(|(b, _)| *b)
            .map(|(_, v)| v);
        let value = adopted.unwrap_or_else(|| {
            // Below the highest commit point every member keeps its own log (committed entries
            // are identical everywhere); after it, only what every answering replica holds.
            let keep = c.promises.values().map(|p| p.1).max().unwrap_or(0);
            let beyond = |(commit, tail): (u64, &Vec<WireEntry>)| -> Vec<WireEntry> {
                tail.iter()
                    .skip(keep.saturating_sub(commit) as usize)
                    .copied()
                    .collect()
            };
            let tails: Vec<Vec<WireEntry>> =
                c.promises.values().map(|p| beyond((p.1, &p.2))).collect();
            let sets: Vec<HashSet<(u64, u32, u64)>> = tails
                .iter()
                .map(|t| t.iter().map(|e| (e.ts, e.client, e.seq)).collect())
                .collect();
            let entries = tails
                .first()
                .map(|t| {
                    t.iter()
                        .filter(|e| sets.iter().all(|s| s.contains(&(e.ts, e.client, e.seq))))
                        .copied()
                        .collect()
                })
                .unwrap_or_default();
            Value {
                epoch: c.epoch,
                members: mask_of(c.promises.keys().copied()),
                keep,
                entries,
            }
        });
        let ballot = c.ballot;
        let dsts: Vec<u32> = ids_of(value.members).collect();
        c.proposed = Some((value.clone(), BTreeSet::new()));
        c.deadline = Instant(now.0 + round_wait_ns(suspect, ballot));
        c.tries = 0;
        self.send(OTHER_TAG, dsts.into_iter(), &Msg::Accept { ballot, value });
    }

    pub(super) fn on_accept(&mut self, src: ProcId, ballot: u64, value: Value) {
        let now = self.now;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if value.epoch != r.epoch + 1 || ballot < r.promised {
            return;
        }
        Self::follow(r, ballot, now);
        let epoch = value.epoch;
        r.accepted = Some((ballot, value));
        self.send(
            OTHER_TAG,
            [src.0].into_iter(),
            &Msg::Accepted { epoch, ballot },
        );
    }

    pub(super) fn on_accepted(&mut self, src: u32, epoch: u64, ballot: u64) {
        let majority = self.majority();
        let Some(c) = self.replica.as_mut().and_then(|r| r.coord.as_mut()) else {
            return;
        };
        if c.ballot != ballot || c.epoch != epoch {
            return;
        }
        let Some((value, acc)) = c.proposed.as_mut() else {
            return;
        };
        acc.insert(src);
        if acc.len() < majority {
            return;
        }
        // Chosen: accepted by a majority of the replicas.
        let value = value.clone();
        if let Some(r) = self.replica.as_mut() {
            r.coord = None;
        }
        self.stats.recoveries_led += 1;
        let dsts: Vec<u32> = ids_of(value.members).collect();
        self.send(OTHER_TAG, dsts.into_iter(), &Msg::Decide { value });
    }

    /// Installs the decided `value`: the new view and log.
    pub(super) fn install(&mut self, value: Value) {
        let now = self.now;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if value.epoch != r.epoch + 1 {
            return;
        }
        let end = Self::end(r);
        if value.keep < r.log_start || value.keep > end {
            // This replica lacks entries below the kept point: it cannot take part (a state
            // transfer would be needed); it stays out of the view.
            self.stats.malformed += 1;
            return;
        }
        // Truncate at `keep`, remembering where each client's removed entries started.
        while Self::end(r) > value.keep {
            let Some(e) = r.log.pop_back() else { break };
            r.index.remove(&(e.e.client, e.e.seq));
            r.next_seq.insert(e.e.client, e.e.seq);
        }
        for e in &value.entries {
            Self::append(r, *e, now);
        }
        // Replay: the state and every output after the removals.
        r.spec = r.base.clone();
        for e in r.log.iter_mut() {
            e.output = r.spec.apply(&e.e.cmd);
        }
        let epoch = value.epoch;
        r.epoch = epoch;
        r.members = value.members;
        r.frozen_since = None;
        r.promised = 0;
        r.accepted = None;
        r.want = None;
        r.coord = None;
        r.last_value = Some(value);
        self.stats.recoveries += 1;
        let parked: Vec<Parked> = r.parked.drain(..).collect();
        let views: Vec<(u32, Msg)> = r
            .clients
            .iter()
            .map(|&c| (c, Self::view_for(r, c)))
            .collect();
        let early = std::mem::take(&mut r.early);
        let end = Self::end(r);
        self.advance_commit(end);
        for p in parked {
            self.answer_read(p, false);
        }
        for (c, v) in views {
            self.send(OTHER_TAG, [c].into_iter(), &v);
        }
        for (src, ts, payload) in early {
            if let Some(m) = decode(&payload) {
                self.replica_msg(src, ts, &payload, m);
            }
        }
    }

    /// The coordinator's deadline passed: it asks again those that have not answered (a
    /// message either way may have been lost, or be late), proposes once those are declared
    /// failed, or — having asked [`PREPARE_TRIES`] times more — starts a new round, which asks
    /// everyone again (a member that promised a higher ballot answers only a higher one).
    pub(super) fn coord_deadline(&mut self, live: Vec<u32>) {
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let majority = self.majority();
        let Some(c) = self.replica.as_mut().and_then(|r| r.coord.as_mut()) else {
            return;
        };
        let (msg, missing): (Msg, Vec<u32>) = match &c.proposed {
            None => {
                let missing = live
                    .into_iter()
                    .filter(|m| !c.promises.contains_key(m))
                    .collect();
                let m = Msg::Prepare {
                    epoch: c.epoch,
                    ballot: c.ballot,
                };
                (m, missing)
            }
            Some((value, acc)) => {
                let missing = ids_of(value.members).filter(|m| !acc.contains(m)).collect();
                let m = Msg::Accept {
                    ballot: c.ballot,
                    value: value.clone(),
                };
                (m, missing)
            }
        };
        if !missing.is_empty() && c.tries < PREPARE_TRIES {
            c.tries += 1;
            c.deadline = Instant(now.0 + round_wait_ns(suspect, c.ballot));
            self.send(OTHER_TAG, missing.into_iter(), &msg);
        } else if c.proposed.is_none() && missing.is_empty() && c.promises.len() >= majority {
            self.maybe_propose();
        } else {
            self.start_recovery();
        }
    }
}
