//! The host's side of reliable failure handling (1Pipe §5.2): the procedure's messages as they
//! reach a host and what it does with them — Discard, Recall, Callback and Completed for a
//! failed peer; Freeze, Recover, Settle and Rejoin when the host itself was declared failed;
//! the Detect report for its own silent uplink.
//!
//! The state these transitions move is the host's `failed` map (who failed, at which
//! timestamp), its [`Lifecycle`] (where it stands in its own failure), its [`Rounds`] (the
//! rounds it takes part in) and its relay queue; the data path only reads them. Everything here
//! is reached through `Node::handle` (`Input::Mgmt`, and the timer) or the few commands the
//! host documents ([`Host::recover`], [`Host::complete_callbacks`]).

use super::*;

impl Host {
    /// §5.2: the controller declared this host's processes failed at `ts`. Whatever they have
    /// in flight is at or above `ts` and discarded everywhere: the send buffer is emptied (each
    /// scattering raised as [`HostEvent::Recalled`] or [`HostEvent::ReliableAborted`]) and later
    /// sends — reliable and best-effort — are refused (`SendError::Failed` naming the sender), so
    /// a host cut off but alive stops retransmitting and forwarding.
    /// Reliable delivery freezes at once: whatever is buffered waits for [`Host::recover`]'s
    /// settling (a commit barrier heard from now on — say over a healed link — no longer
    /// speaks for this host's processes: the correct hosts may recall what sits below it), and
    /// reliable data arriving from now on is dropped unacknowledged.
    fn on_own_failure(&mut self, ts: Timestamp) {
        // §5.2 "If a process recovers from failure, e.g., the network link or switch
        // recovers": a host that hears its first-hop switch (declared failed all the same —
        // a false suspicion, or a partition elsewhere) recovers at once; one cut off does when
        // it hears it again (`on_packet`), or when its driver says so (`recover`).
        let hears_switch = self.uplink.hears_switch();
        match self.life.declared(ts, hears_switch) {
            None => return,
            Some(true) => self.ask_recovery(),
            Some(false) => {}
        }
        let (groups, queued) = self.sender.abandon();
        for (src, ts) in groups {
            self.outputs
                .push_back(Output::Event(HostEvent::Recalled { src, ts }));
        }
        for q in queued {
            self.outputs
                .push_back(Output::Event(HostEvent::ReliableAborted {
                    handle: q.handle,
                    src: q.src,
                }));
        }
    }

    /// This host's failure timestamp, if the controller told it that it failed (§5.2).
    pub fn own_failure(&self) -> Option<Timestamp> {
        self.life.own_failure()
    }

    /// §5.2 Receiver Recovery: the driver saw this host's link come back. A host told it failed
    /// asks the controller (once) for the failure notifications and the undeliverable recalls;
    /// the answer ([`RelayMsg::Settle`]) settles its buffer. A host not told it failed asks
    /// when it is told (its link came back before the controller declared it). Drain
    /// [`Node::poll_output`] afterwards.
    pub(crate) fn recover(&mut self, now: Instant) {
        self.timestamp(now);
        if self.life.recover() {
            self.ask_recovery();
        }
    }

    /// §5.2: asks the controller for the failure notifications and recalls since its failure
    /// (once: `Lifecycle` decides when).
    pub(super) fn ask_recovery(&mut self) {
        self.relays.push_back((
            MgmtDest::Controller,
            RelayMsg::RecoverRequest {
                host: self.cfg.node,
            },
        ));
    }

    /// §5.2: the application's callbacks for failure round `round` are done (with
    /// `HostConfig::callbacks_held`): the host reports the round `Completed` once its recalls
    /// are acknowledged too. Completing a round twice, or one it never raised, changes nothing.
    /// Drain [`Node::poll_output`] afterwards.
    pub fn complete_callbacks(&mut self, now: Instant, round: u32) {
        if self.rounds.callbacks_done(round) {
            self.finish_recalls(now);
        }
    }

    /// §5.2 rounds whose callbacks the application has not completed
    /// ([`Host::complete_callbacks`]).
    pub fn callbacks_waiting(&self) -> usize {
        self.rounds.callbacks_len()
    }

    /// Whether this host, declared failed, has settled its receive buffer (§5.2).
    pub fn settled(&self) -> bool {
        self.life.settled()
    }

    /// §5.2: a settled host asks to rejoin as a new process, again (backed off like
    /// `Completed`) until [`RelayMsg::Joined`] answers — the controller answers only once no
    /// round is open and the host is reachable both ways again.
    pub(super) fn ask_rejoin(&mut self, now: Instant) {
        if !self
            .life
            .rejoin_asked(now, self.cfg.ctrl_retry_ns, CTRL_RETRY_MAX_NS)
        {
            return;
        }
        if self.relays.len() < RELAY_OUT_MAX {
            self.relays.push_back((
                MgmtDest::Controller,
                RelayMsg::Rejoin {
                    host: self.cfg.node,
                },
            ));
        }
    }

    /// §5.2 "the recovered process needs to join 1Pipe as a new process": the host starts over
    /// as the processes `procs` — fresh ids with fresh sequence spaces and buffers, nothing
    /// carried over but its counters and its timestamp counter, raised to `floor` (the
    /// controller's bound on every barrier a receiver may have passed; see
    /// `Controller::on_rejoin`) — knowing the processes declared failed so far. Answers a
    /// settled host only.
    fn on_joined(
        &mut self,
        now: Instant,
        procs: Vec<ProcId>,
        floor: Timestamp,
        failed: &[(ProcId, Timestamp)],
    ) {
        let fits = procs.len() == self.cfg.procs.len()
            && procs.iter().all(|p| p.0 < self.cfg.senders_max)
            && procs.windows(2).all(|w| w[0] < w[1]);
        if !self.life.settled() || !fits {
            self.stats.dropped_invalid += 1;
            return;
        }
        let mut cfg = self.cfg.clone();
        cfg.procs = procs;
        let stats = std::mem::take(&mut self.stats);
        let outputs = std::mem::take(&mut self.outputs);
        let relays = std::mem::take(&mut self.relays);
        let counter = self.clock_ts.max_wrapping(floor);
        *self = Host::new(cfg, now);
        self.stats = stats;
        self.stats.rejoined += 1;
        self.outputs = outputs;
        self.relays = relays;
        self.clock_ts = self.clock_ts.max_wrapping(counter);
        self.commit_sent = self.commit_sent.max_wrapping(self.clock_ts);
        for &(p, ts) in failed {
            if p.0 < self.cfg.senders_max && self.local_index(p).is_none() {
                self.failed.insert(p, ts);
            }
        }
        // It hears its switch (it asked because it did): silence counts from now on.
        self.uplink.assume_spoke();
    }

    /// §5.2 Receiver Recovery, "the process needs to consistently deliver or discard messages in
    /// the receive buffer": every buffered reliable message was acknowledged by this host before
    /// it froze. It is delivered — in timestamp order, as the correct receivers deliver it —
    /// unless it is discarded there too: its sender failed at or below its timestamp (this
    /// host's own processes included, at its own failure timestamp), or its scattering was
    /// recalled (a receiver, perhaps this one, never got its acknowledgement through). The
    /// host then stops as these processes: it rejoins only as new ones (`ask_rejoin`).
    pub(super) fn settle(
        &mut self,
        now: Instant,
        failed: &[(ProcId, Timestamp)],
        recalled: &[(ProcId, Timestamp)],
    ) {
        // Answered, so declared: a restarted host whose `Failed` was lost speaks again, and
        // learns its failure timestamp here.
        let own = failed
            .iter()
            .find(|(p, _)| self.local_index(*p).is_some())
            .map(|&(_, ts)| ts);
        if !self.life.settle(now, own) {
            self.stats.dropped_invalid += 1;
            return;
        }
        self.stats.recovered += 1;
        // §5.2 "After delivering buffered messages, the recovered process needs to join 1Pipe
        // as a new process": it asks from its next timer, due at once — after the deliveries
        // below, which a driver's CPU runs first. Asked from here, the request went ahead of
        // them: a host settling thousands of messages was admitted while still delivering,
        // and its first-hop switch, which takes the link back expecting to hear the host,
        // timed it out again (VOPR seed 17: declared again 25 µs after it was admitted).
        // (`Lifecycle::settle` made it due now.)
        let mut failed_at: BTreeMap<ProcId, Timestamp> = failed.iter().copied().collect();
        for (&p, &t) in &self.failed {
            failed_at.entry(p).or_insert(t);
        }
        let recalled: BTreeSet<(ProcId, Timestamp)> = recalled.iter().copied().collect();
        let mut settled = Vec::new();
        for lp in &mut self.procs {
            let Some(rel) = lp.rel.as_mut() else {
                continue;
            };
            while let Some(key) = rel.reorder.peek() {
                let (key, item) = rel
                    .reorder
                    .pop_below(key.ts.plus(1))
                    .expect("the smallest key is below its own timestamp plus one");
                let gone = failed_at.get(&key.src).is_some_and(|&f| key.ts >= f)
                    || recalled.contains(&(key.src, key.ts));
                if gone {
                    self.stats.settled_discarded += 1;
                    if let Some(o) = rel.opt.as_mut() {
                        o.on_discard(now, lp.id, key, &mut self.outputs);
                    }
                } else {
                    settled.push((lp.id, key, item));
                }
            }
        }
        self.partials.retain(|id, _| !id.3);
        let Some(bound) = settled
            .iter()
            .map(|s| s.1.ts)
            .reduce(|a, b| a.max_wrapping(b))
        else {
            return;
        };
        self.deliver_settled(now, settled, bound.plus(1));
    }

    /// Delivers what §5.2 receiver recovery settled, in order, released by `bound`.
    fn deliver_settled(
        &mut self,
        now: Instant,
        settled: Vec<(ProcId, OrderKey, super::receive::Buffered)>,
        bound: Timestamp,
    ) {
        let now_ts = self.timestamp_past(now, bound);
        for (dst, key, item) in settled {
            self.stats.delivered_reliable += 1;
            self.stats.settled_delivered += 1;
            self.stats.held(item.arrived, now);
            let d = Delivery {
                dst,
                src: key.src,
                ts: key.ts,
                psn: key.psn,
                payload: item.payload,
                barrier: bound,
                reliable: true,
                arrived: item.arrived,
                now_ts,
            };
            // Settled in order: optimistic delivery confirms each just before it.
            let opt = self.procs.iter_mut().find(|lp| lp.id == dst);
            if let Some(o) = opt.and_then(|lp| lp.rel.as_mut()?.opt.as_mut()) {
                o.on_delivery(now, dst, &d, &mut self.outputs);
            }
            self.outputs.push_back(Output::Event(HostEvent::Deliver(d)));
        }
    }

    /// A relay (§5.2 forwarding and receiver recovery). "Controller Forwarding": packets the
    /// controller relayed over the management network. Data is taken as an arrival (its barrier
    /// fields ignored: it passed no switch) and acknowledged at once back through the
    /// controller; ACKs are taken as ACKs.
    pub(super) fn on_relay(&mut self, now: Instant, msg: RelayMsg) {
        self.timestamp(now);
        match msg {
            RelayMsg::Failed { ts } => self.on_own_failure(ts),
            RelayMsg::Settle { failed, recalled } => self.settle(now, &failed, &recalled),
            RelayMsg::Joined {
                procs,
                floor,
                failed,
            } => self.on_joined(now, procs, floor, &failed),
            // §5.2 rejoin elsewhere: nothing this host stamps from now on is below the floor
            // (timestamps only ever move forward, so raising the counter is always allowed).
            RelayMsg::PeerJoined { floor, .. } => {
                self.clock_ts = self.clock_ts.max_wrapping(floor);
                self.stats.peers_joined += 1;
            }
            RelayMsg::Recalled { .. }
            | RelayMsg::RecoverRequest { .. }
            | RelayMsg::Rejoin { .. }
            | RelayMsg::Admit { .. }
            | RelayMsg::Admitted { .. } => {
                self.stats.dropped_invalid += 1;
            }
            RelayMsg::Forward { packets, .. } => {
                let mut acks: Vec<(ProcId, usize)> = Vec::new();
                for p in packets {
                    self.stats.forwarded_in += 1;
                    match p {
                        Packet::Data(mut d) if d.header.reliable() => {
                            d.header.flags &= !(flags::BARRIER_VALID | flags::COMMIT_VALID);
                            let (src, dst) = (d.header.src, d.header.dst);
                            self.on_data(now, d);
                            let remote =
                                self.local_index(src).is_none() && src.0 < self.cfg.senders_max;
                            if let Some(i) = self.local_index(dst).filter(|_| remote) {
                                if self.procs[i].rel.is_some() && !acks.contains(&(src, i)) {
                                    acks.push((src, i));
                                }
                            }
                        }
                        Packet::Ack(a) if a.reliable => self.on_ack(now, a),
                        _ => self.stats.dropped_invalid += 1,
                    }
                }
                if !acks.is_empty() && self.relays.len() < RELAY_OUT_MAX && !self.life.failed() {
                    let packets = acks
                        .into_iter()
                        .map(|(src, i)| Packet::Ack(self.make_ack(src, i, true)))
                        .collect();
                    self.relays.push_back((
                        MgmtDest::Controller,
                        RelayMsg::Forward {
                            from: self.cfg.node,
                            packets,
                        },
                    ));
                }
            }
        }
        self.deliver_ready(now);
        self.invariants();
    }

    /// §5.2 with a controller that may crash and recover: a `Completed` not answered by its
    /// round's `Resume` in time goes again, with back-off (the controller ignores duplicates).
    pub(super) fn resend_completed(&mut self, now: Instant) {
        for round in self.rounds.due_again(now, CTRL_RETRY_MAX_NS) {
            self.stats.ctrl_resent += 1;
            self.report_completed(round);
        }
    }

    /// §5.2 Completed for `round` to the controller, preceded by this host's recall report for
    /// it, if any: that report may have been lost (the controller down), so it goes again with
    /// every Completed.
    fn report_completed(&mut self, round: u32) {
        if let Some(groups) = self.rounds.recalled(round) {
            if self.relays.len() < RELAY_OUT_MAX {
                self.relays.push_back((
                    MgmtDest::Controller,
                    RelayMsg::Recalled {
                        groups: groups.clone(),
                    },
                ));
            }
        }
        self.outputs.push_back(Output::Mgmt {
            to: MgmtDest::Controller,
            msg: Mgmt::Ctrl(CtrlMsg::Completed {
                round,
                host: self.cfg.node,
            }),
        });
    }

    /// §4.2: the first-hop switch said nothing for `uplink_timeout_intervals` beacon times: it
    /// is taken for dead (it would send keep-alive beacons if it were alive). Reported by
    /// [`Host::uplink_alive`], counted, and — §5.2 Detect — sent to the controller as this
    /// host's input link, with the last commit barrier the switch gave.
    pub(super) fn report_uplink_down(&mut self) {
        self.stats.uplink_failures += 1;
        if let Some(link) = self.cfg.input_link {
            self.outputs.push_back(Output::Mgmt {
                to: MgmtDest::Controller,
                msg: Mgmt::Ctrl(CtrlMsg::LinkDown {
                    reporter: self.cfg.node,
                    link,
                    last_commit: self.commit,
                }),
            });
        }
    }

    /// Handles a control message from the controller or another host (§5.2).
    pub(super) fn on_control(&mut self, now: Instant, msg: CtrlMsg) {
        self.timestamp(now);
        match msg {
            CtrlMsg::Failure {
                round,
                failed,
                correct,
            } => self.on_failure(now, round, &failed, &correct),
            CtrlMsg::Recall {
                round,
                from,
                groups,
                unacked,
            } => self.on_recall(now, round, from, &groups, &unacked),
            CtrlMsg::RecallAck { round, from } => {
                self.rounds.recall_acked(round, from);
                self.finish_recalls(now);
            }
            // Routes changed: what died with the failed component goes again. Rounds resume in
            // order: this answers every `Completed` up to `round`.
            CtrlMsg::Resume { round, .. } => {
                self.rounds.resumed(round);
                self.sender.rearm_after_reroute(now);
                self.retransmit_due(now, false);
            }
            // Addressed to the controller, or to a switch.
            CtrlMsg::LinkDown { .. }
            | CtrlMsg::Completed { .. }
            | CtrlMsg::CallbackTaken { .. }
            | CtrlMsg::Isolate { .. }
            | CtrlMsg::Departed { .. }
            | CtrlMsg::Depart { .. } => {
                self.stats.dropped_invalid += 1;
            }
        }
        self.deliver_ready(now);
        self.invariants();
    }

    /// §5.2 Broadcast received: Discard, Recall, Callback, then Completed (once the recall is
    /// acknowledged).
    fn on_failure(
        &mut self,
        now: Instant,
        round: u32,
        failed: &[(ProcId, Timestamp)],
        correct: &[NodeId],
    ) {
        let mut news = Vec::new();
        for &(p, ts) in failed {
            if p.0 < self.cfg.senders_max && !self.failed.contains_key(&p) {
                self.failed.insert(p, ts);
                news.push((p, ts));
            }
        }
        // Discard: buffered messages from a failed process at or above its failure timestamp.
        // The paper's commit barrier T releases messages "below or equal to T"; ours releases
        // messages strictly below it (the commit barrier is the timestamp of the oldest
        // unacknowledged message, which may itself be unacknowledged somewhere), so the failure
        // timestamp F — a commit barrier — commits exactly the messages below F, and one stamped
        // F may be missing at some receiver: it is discarded (VOPR seeds 67, 75, 127).
        let gone = |src: ProcId, ts: Timestamp, f: &BTreeMap<ProcId, Timestamp>| {
            f.get(&src).is_some_and(|&t| ts >= t)
        };
        let f = self.failed.clone();
        self.discard_reliable(now, |k| gone(k.src, k.ts, &f));
        self.partials.retain(|id, ts| !(id.3 && gone(id.0, ts, &f)));
        // Hosts failed now will never answer an earlier recall.
        self.rounds.only_correct(correct);
        self.recall(now, round, correct);
        // Callback: with `callbacks_held`, Completed waits for the application's.
        if self.cfg.callbacks_held && !news.is_empty() && !self.life.failed() {
            self.rounds.hold_callbacks(round);
        }
        for (proc, ts) in news {
            self.outputs
                .push_back(Output::Event(HostEvent::ProcFailed { proc, ts, round }));
        }
        self.rounds.open(round);
        self.finish_recalls(now);
        // Credits to failed processes came back: the head of the send buffer may go (or be
        // aborted) now.
        self.pump(now);
    }

    /// §5.2 Recall: the scatterings a failed process never acknowledged are aborted — dropped
    /// here, raised as [`HostEvent::Recalled`], and recalled at every other `correct` host
    /// (round `round` waits for their `RecallAck`s); where the relay channel is in use, the
    /// controller records them for the failed receivers' recovery.
    pub(super) fn recall(&mut self, now: Instant, round: u32, correct: &[NodeId]) {
        let f = &self.failed;
        let recalled = self.sender.fail(round, |d| f.contains_key(&d));
        if recalled.groups.is_empty() {
            return;
        }
        // A recall names its scatterings by (sender, timestamp), so nothing stamped from now on
        // may share a recalled timestamp: receivers and recovering hosts would take it for an
        // aborted one (discarded where the Recall arrives after it, delivered elsewhere). The
        // counter stays at a timestamp while the clock is behind it (stepped back), so the next
        // stamps go above the newest recalled one (VOPR seed 13051).
        let newest = recalled
            .groups
            .iter()
            .fold(self.clock_ts, |t, g| t.max_wrapping(g.1.plus(1)));
        self.clock_ts = newest;
        self.discard_groups(now, &recalled.groups);
        let targets: BTreeSet<NodeId> = correct
            .iter()
            .copied()
            .filter(|&h| h != self.cfg.node)
            .collect();
        for &t in &targets {
            self.outputs.push_back(Output::Mgmt {
                to: MgmtDest::Node(t),
                msg: Mgmt::Ctrl(CtrlMsg::Recall {
                    round,
                    from: self.cfg.node,
                    groups: recalled.groups.clone(),
                    unacked: recalled.unacked.clone(),
                }),
            });
        }
        for &(src, ts) in &recalled.groups {
            self.outputs
                .push_back(Output::Event(HostEvent::Recalled { src, ts }));
        }
        // §5.2 "undeliverable recall messages": the failed receivers cannot hear the recall;
        // the controller records it for their recovery. Sent before `Completed`, which waits
        // for the RecallAcks. Only where the relay channel is in use.
        let relay = self.cfg.reliable.forward_after_retransmits > 0 || self.cfg.relay_channel;
        if relay && self.relays.len() < RELAY_OUT_MAX {
            self.relays.push_back((
                MgmtDest::Controller,
                RelayMsg::Recalled {
                    groups: recalled.groups.clone(),
                },
            ));
            self.rounds.record_recalled(round, recalled.groups.clone());
        }
        self.rounds.recall(round, targets);
    }

    /// Removes the reliable messages `gone` names from every local reliable buffer; one
    /// delivered optimistically is revoked.
    fn discard_reliable(&mut self, now: Instant, gone: impl Fn(&OrderKey) -> bool) {
        for lp in &mut self.procs {
            let Some(rel) = lp.rel.as_mut() else {
                continue;
            };
            let mut removed = Vec::new();
            rel.reorder.retain(|k| {
                let keep = !gone(k);
                if !keep && rel.opt.is_some() {
                    removed.push(*k);
                }
                keep
            });
            if let Some(o) = rel.opt.as_mut() {
                for k in removed {
                    o.on_discard(now, lp.id, k, &mut self.outputs);
                }
            }
        }
    }

    /// Removes the messages of aborted scatterings from every local reliable buffer.
    fn discard_groups(&mut self, now: Instant, groups: &[(ProcId, Timestamp)]) {
        self.discard_reliable(now, |k| groups.binary_search(&(k.src, k.ts)).is_ok());
        self.partials
            .retain(|id, ts| !(id.3 && groups.binary_search(&(id.0, ts)).is_ok()));
    }

    /// §5.2 Recall at a receiver: discard, record the never-acknowledged packets as received
    /// (so the window moves on and late copies are duplicates), answer.
    fn on_recall(
        &mut self,
        now: Instant,
        round: u32,
        from: NodeId,
        groups: &[(ProcId, Timestamp)],
        unacked: &[(ProcId, ProcId, Psn, u32)],
    ) {
        let mut groups = groups.to_vec();
        groups.sort_unstable();
        self.discard_groups(now, &groups);
        for &(src, dst, first, frags) in unacked {
            let Some(dst_idx) = self.local_index(dst) else {
                continue;
            };
            if src.0 >= self.cfg.senders_max || frags > WINDOW_MAX {
                continue;
            }
            self.reliable_seen = true;
            let rel = self.procs[dst_idx]
                .rel
                .get_or_insert_with(|| ReliableRecv::new(&self.cfg));
            let w = &mut rel.recv[src.index()];
            for f in 0..frags {
                let psn = Psn(first.0.wrapping_add(f));
                if !w.beyond(psn) {
                    w.record(psn);
                }
            }
            self.schedule_ack(now, src, dst_idx, true);
        }
        self.outputs.push_back(Output::Mgmt {
            to: MgmtDest::Node(from),
            msg: Mgmt::Ctrl(CtrlMsg::RecallAck {
                round,
                from: self.cfg.node,
            }),
        });
    }

    /// Releases recalls every target answered, and completes rounds with nothing pending.
    fn finish_recalls(&mut self, now: Instant) {
        let (released, done) = self.rounds.finish(now, self.cfg.ctrl_retry_ns);
        for round in released {
            self.sender.release_recall(round);
        }
        for round in done {
            self.report_completed(round);
        }
    }
}
