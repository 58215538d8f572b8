//! The failure procedure's side of the controller (§5.2): control messages and relays from
//! members into the procedure, its timer, and what it decides carried out — messages to
//! members, declared rounds, rejoins, resumptions.

use super::*;
use onepipe_ctrlstore::{HaEvent, HaOutput};
use onepipe_proto::time::Timestamp;
use onepipe_proto::{drive, Input, Node};

/// The §5.2 procedure for `cluster`, settling for half a link timeout: every neighbour of a
/// failed component times it out after the same silence, so their reports arrive within a few
/// beacon intervals (and scheduling delays) of one another.
pub(super) fn failure_procedure(cluster: &Cluster) -> Result<Failure, String> {
    let live = cluster.graph()?;
    let cfg = ControllerConfig {
        procs_of_host: (0..cluster.procs()).map(|p| vec![ProcId(p)]).collect(),
        settle_ns: (cluster.link_timeout_ns / 2).max(20 * cluster.beacon_interval_ns),
        callback_timeout_ns: cluster.callback_timeout_ns,
    };
    Ok(Failure {
        procedure: None,
        cfg,
        live,
        epoch: Instant::now(),
        rounds: Vec::new(),
        detected: 0,
        rejoined: Vec::new(),
    })
}

impl State {
    /// A §5.2 control message from a member: to the procedure, or relayed to a process.
    pub(super) fn on_ctrl(&mut self, id: u64, to: Option<u32>, wire: WireCtrl) {
        let Some(member) = self.conns.get(&id).and_then(|c| c.member.clone()) else {
            self.malformed += 1;
            return self.refuse(id, "Ctrl before Join".into());
        };
        let agg = match &member {
            Member::Aggregator(name) => self.cluster.aggregator_index(name),
            Member::Process(_) => None,
        };
        let procs = self.cluster.procs();
        let Ok(f) = self.failure.as_mut() else {
            let why = self.failure.as_ref().err().cloned().unwrap_or_default();
            return self.refuse(id, format!("no failure handling in this cluster: {why}"));
        };
        // Distrust the wire: a member speaks for its own nodes only.
        let live = &f.live;
        let own = |n: NodeId| match &member {
            Member::Process(p) => n == NodeId(*p),
            Member::Aggregator(_) => agg.is_some_and(|a| live.nodes_of(a).contains(&n)),
        };
        let msg = CtrlMsg::from(wire.clone());
        let allowed = match (to, &msg) {
            (None, CtrlMsg::LinkDown { reporter, .. }) => own(*reporter),
            (None, CtrlMsg::Completed { host, .. } | CtrlMsg::CallbackTaken { host, .. }) => {
                own(*host)
            }
            (Some(h), CtrlMsg::Recall { from, .. } | CtrlMsg::RecallAck { from, .. }) => {
                own(*from) && h < procs
            }
            _ => false,
        };
        if !allowed {
            self.malformed += 1;
            return self.refuse(id, format!("{member} may not send {wire:?}"));
        }
        if let Some(h) = to {
            return self.send_to(&Member::Process(h), &FromController::Ctrl { msg: wire });
        }
        let now = f.now();
        let report = matches!(msg, CtrlMsg::LinkDown { .. });
        let Some(ha) = f.procedure.as_mut() else {
            return self.refuse(id, "this controller does not lead".into());
        };
        // Logged before it is applied: an input the store refuses is not applied, and a
        // controller that cannot log cannot lead (its last output says so: `drain_failure`).
        ha.handle(now, Input::Mgmt(Mgmt::Ctrl(msg)));
        if self.drain_failure() && report {
            if let Ok(f) = self.failure.as_mut() {
                f.detected += 1;
            }
        }
    }

    /// §5.2 controller forwarding: a process hands over packets its data path could not
    /// deliver; the procedure relays them to the receiver (not to or from a failed process).
    pub(super) fn on_relay(&mut self, id: u64, wire: WireRelay) {
        let Some(member) = self.conns.get(&id).and_then(|c| c.member.clone()) else {
            self.malformed += 1;
            return self.refuse(id, "Relay before Join".into());
        };
        let msg = match wire.into_relay() {
            Ok(msg) => msg,
            Err(e) => {
                self.malformed += 1;
                return self.refuse(id, format!("a bad relay from {member}: {e}"));
            }
        };
        let Ok(f) = self.failure.as_mut() else {
            return self.refuse(id, "no failure handling in this cluster".into());
        };
        // Distrust the wire: a member relays in its own name only, and only what it may send.
        let live = &f.live;
        let allowed = match (&member, &msg) {
            (Member::Process(p), RelayMsg::Forward { from, .. }) => *from == NodeId(*p),
            (Member::Process(p), RelayMsg::RecoverRequest { host } | RelayMsg::Rejoin { host }) => {
                *host == NodeId(*p)
            }
            (Member::Process(_), RelayMsg::Recalled { .. }) => true,
            (Member::Aggregator(name), RelayMsg::Admitted { link, .. }) => {
                let agg = self.cluster.aggregator_index(name);
                live.link_head(*link)
                    .is_some_and(|n| agg.is_some_and(|a| live.nodes_of(a).contains(&n)))
            }
            _ => false,
        };
        if !allowed {
            self.malformed += 1;
            return self.refuse(id, format!("{member} may not relay {msg:?}"));
        }
        if matches!(msg, RelayMsg::Forward { .. }) && !self.cluster.forwarding() {
            return self.refuse(id, "forwarding is off (forward_after = 0)".into());
        }
        let now = f.now();
        let Some(ha) = f.procedure.as_mut() else {
            return self.refuse(id, "this controller does not lead".into());
        };
        // Recovery's relays are logged before they are applied, as control messages are.
        ha.handle(now, Input::Mgmt(Mgmt::Relay(msg)));
        self.drain_failure();
    }

    /// Runs the procedure's timer and the key schedule's if they are due.
    pub(super) fn on_tick(&mut self) {
        let now = self.now_ns();
        if let Some(km) = self.keys.as_mut() {
            let (due, activation) = km.tick(now);
            if !activation.is_empty() {
                debug!(epoch = km.active().0, "key epoch activated");
            }
            self.send_keys(activation);
            if due && self.ready {
                self.rotate_keys(None);
            }
        }
        let Ok(f) = self.failure.as_mut() else {
            return;
        };
        let now = f.now();
        let Some(ha) = f.procedure.as_mut() else {
            return;
        };
        if ha.poll_timeout().is_some_and(|t| t <= now) {
            ha.handle(now, Input::Timeout);
            self.drain_failure();
        }
    }

    /// Carries out what the procedure decided: messages to members, declarations, resumptions;
    /// and a store's refusal, the procedure's last output, deposes this controller. False when
    /// it did (the input was not applied) or no procedure runs here.
    pub(super) fn drain_failure(&mut self) -> bool {
        let Some(ha) = self
            .failure
            .as_mut()
            .ok()
            .and_then(|f| f.procedure.as_mut())
        else {
            return false;
        };
        // Taken out first: carrying them out needs `self`, and deposing ends the procedure.
        let mut outs: Vec<HaOutput> = Vec::new();
        drive::turn(ha, None, |o| outs.push(o));
        let ms = self
            .failure
            .as_ref()
            .map_or(0, |f| f.epoch.elapsed().as_millis() as u64);
        for o in outs {
            match o {
                Output::Mgmt {
                    to: MgmtDest::Node(n),
                    msg: Mgmt::Ctrl(msg),
                } => self.send_ctrl(n, &msg),
                // `Failed`'s live form is `Declared`, sent to every member and again after a
                // takeover: one path, not two.
                Output::Mgmt {
                    msg: Mgmt::Relay(RelayMsg::Failed { .. }),
                    ..
                } => {}
                // Relays go to a process (forwarded packets, recovery's answers), or to the
                // aggregator at the head of a link (`Admit`).
                Output::Mgmt {
                    to: MgmtDest::Node(n),
                    msg: Mgmt::Relay(r),
                } => {
                    let msg = FromController::Relay {
                        msg: WireRelay::of(&r),
                    };
                    if let Some(member) = self.member_of(n) {
                        self.send_to(&member, &msg);
                    }
                }
                Output::Mgmt { .. } => {}
                Output::Event(HaEvent::Ctrl(CtrlEvent::Declared { round, hosts, .. })) => {
                    self.on_declared(round, &hosts, ms)
                }
                Output::Event(HaEvent::Ctrl(CtrlEvent::Joined { host, procs, .. })) => {
                    self.on_rejoined(host, &procs)
                }
                Output::Event(HaEvent::Ctrl(CtrlEvent::Resumed { round })) => {
                    self.on_resumed(round, ms)
                }
                Output::Event(HaEvent::Ctrl(_)) => {}
                Output::Event(HaEvent::Deposed(e)) => {
                    self.depose(format!("the store refused an input: {e}"));
                    return false;
                }
                Output::Send { packet, .. } => match packet {},
            }
        }
        true
    }

    /// Determine declared `hosts` failed in round `round` (`ms` after the controller
    /// started): the round is remembered, every member hears `Declared`, every process the
    /// view without them.
    fn on_declared(&mut self, round: u32, hosts: &[(NodeId, Timestamp)], ms: u64) {
        let failed: Vec<(u32, u64)> = hosts.iter().map(|(h, ts)| (h.0, ts.raw())).collect();
        let names: Vec<String> = failed
            .iter()
            .map(|(p, ts)| format!("p{p} at ts {ts}"))
            .collect();
        info!(round, "declared failed {}", names.join(", "));
        if let Ok(f) = self.failure.as_mut() {
            // A takeover declares an open round again: one entry per round.
            let known = f.rounds.iter().any(|r| r.round == round);
            if !known && f.rounds.len() < FAILURE_ROUNDS_MAX {
                f.rounds.push(FailureRound {
                    round,
                    declared_ms: ms,
                    failed: failed.clone(),
                    resumed_ms: None,
                });
            }
        }
        // A process declared failed keeps its keys while it is connected: §5.2 lets
        // it recover and rejoin as a new process, which needs its links. Its keys
        // are retired when it leaves or is lost (`depart`), or starts again.
        let (left, gone) = self.departures(hosts);
        let msg = FromController::Declared { round, failed };
        self.send_to_each(|_| true, &msg);
        self.send_view(Vec::new(), left, gone);
    }

    /// The view without the declared `hosts`: those whose process said it was leaving left;
    /// the others failed. (A host's processes are its current incarnation's.)
    fn departures(&self, hosts: &[(NodeId, Timestamp)]) -> (Vec<u32>, Vec<u32>) {
        let (mut left, mut gone) = (Vec::new(), Vec::new());
        if let Some(ha) = self
            .failure
            .as_ref()
            .ok()
            .and_then(|f| f.procedure.as_ref())
        {
            for (h, _) in hosts {
                let said = self
                    .slots
                    .get(&Member::Process(h.0))
                    .is_some_and(|s| s.state == SlotState::Left);
                // Only members of the view announced change it: a free slot taken
                // out at the start (even one a joiner took meanwhile) never was.
                let procs = ha
                    .controller()
                    .procs_of(*h)
                    .iter()
                    .map(|p| p.0)
                    .filter(|p| self.announced.contains(p));
                match said {
                    true => left.extend(procs),
                    false => gone.extend(procs),
                }
            }
        }
        (left, gone)
    }

    /// §5.2 rejoin: process `host` is the new processes `procs`; the aggregators
    /// route to them as to it.
    fn on_rejoined(&mut self, host: NodeId, procs: &[ProcId]) {
        let procs: Vec<u32> = procs.iter().map(|p| p.0).collect();
        info!("p{} rejoined as {procs:?}", host.0);
        if let Ok(f) = self.failure.as_mut() {
            f.rejoined.push((host.0, procs.clone()));
        }
        let msg = FromController::Joined {
            host: host.0,
            procs: procs.clone(),
        };
        self.send_to_each(|_| true, &msg);
        self.send_view(procs, Vec::new(), Vec::new());
    }

    /// Round `round` resumed, `ms` after the controller started.
    fn on_resumed(&mut self, round: u32, ms: u64) {
        info!(round, "resumed");
        if let Ok(f) = self.failure.as_mut() {
            if let Some(r) = f.rounds.iter_mut().find(|r| r.round == round) {
                r.resumed_ms = Some(ms);
            }
        }
    }

    /// The member graph node `n` stands for: a process, or the aggregator it belongs to.
    fn member_of(&self, n: NodeId) -> Option<Member> {
        if n.0 < self.cluster.procs() {
            return Some(Member::Process(n.0));
        }
        let a = self.failure.as_ref().ok()?.live.aggregator_of(n)?;
        Some(Member::Aggregator(self.cluster.aggregators[a].name.clone()))
    }

    /// Sends a procedure message to graph node `n`: a process, or the aggregator it belongs to
    /// (once per message: an aggregator's halves share one connection, and a `Resume` names
    /// every dead link, so only the one to its first node goes).
    fn send_ctrl(&mut self, n: NodeId, msg: &CtrlMsg) {
        let Ok(f) = self.failure.as_ref() else {
            return;
        };
        let first_node = |a| f.live.nodes_of(a).first() == Some(&n);
        if n.0 >= self.cluster.procs() && !f.live.aggregator_of(n).is_some_and(first_node) {
            return;
        }
        let Some(member) = self.member_of(n) else {
            return;
        };
        let line = FromController::Ctrl {
            msg: WireCtrl::from(msg),
        };
        self.send_to(&member, &line);
    }

    /// A process left on purpose (issue 35): the failure procedure takes it out at once — its
    /// uplink aggregator removes its link and reports its commit register, and the next round
    /// declares it — instead of waiting for the link to time out.
    pub(super) fn departed(&mut self, p: u32, last: Option<u64>) {
        if !self.ready {
            return;
        }
        let Ok(f) = self.failure.as_mut() else {
            return;
        };
        let now = f.now();
        let Some(ha) = f.procedure.as_mut() else {
            return;
        };
        let msg = CtrlMsg::Departed {
            host: NodeId(p),
            last: last.map(onepipe_proto::Timestamp::new),
        };
        ha.handle(now, Input::Mgmt(Mgmt::Ctrl(msg)));
        self.drain_failure();
    }

    /// Whether host slot `p`'s process was declared failed (or its slot was free at the start).
    pub(super) fn host_failed(&self, p: u32) -> bool {
        self.failure
            .as_ref()
            .ok()
            .and_then(|f| f.procedure.as_ref())
            .is_some_and(|ha| ha.controller().is_failed(NodeId(p)))
    }
}
