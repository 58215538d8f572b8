//! The control plane of a simulated 1Pipe run: relays and control messages to hosts (§5.2's
//! failure handling at the host), the management network's delay and outages, the controller's
//! outputs, and rerouting around dead links.

use super::*;

impl<Q: EventQueue<Ev>> World<Q> {
    /// Hands relay `msg` to host `h`, and follows its §5.2 recovery: settled (its processes
    /// are held to the correct receivers), rejoined (new processes take its workload slots).
    pub(super) fn host_relay(&mut self, t: SimTime, h: u32, local: Instant, msg: RelayMsg) {
        let hi = h as usize;
        if let RelayMsg::PeerJoined { host, procs, .. } = &msg {
            let procs = procs.iter().map(|p| p.0).collect();
            self.proto.known.insert((h, host.0), procs);
        }
        let before = self.proto.hosts[hi].host.stats().clone();
        let input = Input::Mgmt(Mgmt::Relay(msg));
        self.proto.hosts[hi].host.handle(local, input);
        let after = self.proto.hosts[hi].host.stats();
        let (settled, joined) = (
            after.recovered > before.recovered,
            after.rejoined > before.rejoined,
        );
        if self.proto.hosts[hi].host.own_failure().is_some() {
            if let Some(c) = self.proto.checker.as_mut() {
                c.on_frozen(h);
            }
        }
        // A host that restarted lost its buffer with its processes: they failed for good
        // (Appendix: "If R fails permanently, atomicity is violated"), and are not held to the
        // correct receivers as recovered ones are.
        if settled && t < self.proto.hosts[hi].restart_at {
            if let Some(c) = self.proto.checker.as_mut() {
                c.on_recovered(h);
            }
        }
        if joined {
            let procs: Vec<u32> = self.proto.hosts[hi]
                .host
                .config()
                .procs
                .iter()
                .map(|p| p.0)
                .collect();
            if self.proto.trace_ctrl {
                eprintln!("[{t}] host {h} rejoined as {procs:?}");
            }
            for &p in &procs {
                if let Some(slot) = self.proto.router.host_of.get(p as usize) {
                    slot.store(h, std::sync::atomic::Ordering::Relaxed);
                }
                self.proto.trace.add(0x101E ^ (p as u64) << 32 ^ h as u64);
            }
            self.tree_rejoined(h, &procs);
            self.proto.remapped = true;
            self.proto.stats.rejoined += 1;
            if let Some(c) = self.proto.checker.as_mut() {
                c.on_joined(t, h, &procs);
            }
        }
    }

    /// Hands control message `msg` to host `h` (with a trace of recalls under
    /// `ONEPIPE_SIM_TRACE`).
    pub(super) fn host_control(&mut self, t: SimTime, h: u32, local: Instant, msg: CtrlMsg) {
        let hi = h as usize;
        let probe: Vec<(ProcId, ProcId)> = match &msg {
            CtrlMsg::Recall { unacked, .. } if self.proto.trace_ctrl => unacked
                .iter()
                .filter(|u| self.proto.router.host_of(u.1) == Some(h))
                .map(|u| (u.0, u.1))
                .collect(),
            _ => Vec::new(),
        };
        let before: Vec<_> = probe
            .iter()
            .map(|&(s, d)| self.proto.hosts[hi].host.reliable_window(s, d))
            .collect();
        let input = Input::Mgmt(Mgmt::Ctrl(msg));
        self.proto.hosts[hi].host.handle(local, input);
        for (i, &(s, d)) in probe.iter().enumerate() {
            eprintln!(
                "[{t}] recall at host {h}: {s:?}->{d:?} window {:?} -> {:?}",
                before[i],
                self.proto.hosts[hi].host.reliable_window(s, d)
            );
        }
    }

    /// Sends a control message or a relay on the management network (`ctrl_delay_ns`).
    pub(super) fn send_mgmt(&mut self, t: SimTime, to: MgmtDest, msg: Mgmt) {
        if self.proto.trace_ctrl {
            eprintln!("[{t}] ctrl -> {to:?}: {msg:?}");
        }
        self.proto.stats.ctrl_messages += 1;
        self.proto.ctrl_in_flight += 1;
        let i = self.proto.ctrl_msgs.insert((to, msg));
        self.queue.push(
            t + self.cfg.net.ctrl_delay_ns,
            Ev::Proto(OnePipeEv::Ctrl { msg: i }),
        );
    }

    pub(super) fn on_ctrl(&mut self, t: SimTime, i: u32) {
        let to = self.proto.ctrl_msgs.get(i).0;
        match to {
            MgmtDest::Controller => {
                let (_, msg) = self.proto.ctrl_msgs.take(i);
                self.proto.ctrl_in_flight -= 1;
                if self.controller_down_until(t).is_some() {
                    // Lost, as with a crashed process; the senders' timers send it again.
                    self.proto.stats.ctrl_lost += 1;
                    if self.proto.trace_ctrl {
                        eprintln!("[{t}] lost (controller down): {msg:?}");
                    }
                    return;
                }
                self.proto.controller.handle(Instant(t), Input::Mgmt(msg));
                self.drain_controller(t);
            }
            MgmtDest::Node(n) if n.0 < self.topo.hosts() => {
                let relay = matches!(self.proto.ctrl_msgs.get(i).1, Mgmt::Relay(_));
                if relay && self.proto.hosts[n.index()].crashed(t) {
                    // §5.2: "if controller also cannot deliver the message, R will be announced
                    // as failed" — the management network reports the relay undeliverable.
                    self.proto.stats.relays_undeliverable += 1;
                    if self.controller_down_until(t).is_none() {
                        self.proto
                            .controller
                            .handle(Instant(t), Input::Notice(Notice::Unreachable(n)));
                        self.drain_controller(t);
                    }
                }
                self.input(t, n.0, CoreInput::Proto(OnePipeInput::Ctrl(i)));
            }
            MgmtDest::Node(n) => {
                let (_, msg) = self.proto.ctrl_msgs.take(i);
                self.proto.ctrl_in_flight -= 1;
                match self.proto.tree {
                    Some(_) => self.tree_ctrl(t, n, msg),
                    None => self.switch_handle(t, n.0, Input::Mgmt(msg)),
                }
            }
        }
    }

    /// If the controller is down at true time `t` (`--controller-down`), when it recovers.
    pub(super) fn controller_down_until(&self, t: SimTime) -> Option<SimTime> {
        self.cfg
            .faults
            .controller_down
            .iter()
            .filter(|&&(from, to)| from <= t && t < to)
            .map(|&(_, to)| to)
            .max()
    }

    /// Carries out what the controller decided (the controller runs on true time: it is one
    /// node, its clock is the reference).
    pub(super) fn drain_controller(&mut self, t: SimTime) {
        let turn = drive::turn_in(
            self,
            |w| &mut w.proto.controller,
            None,
            |w, o| w.controller_output(t, o),
        );
        let next = turn.timeout;
        if next != self.proto.ctrl_armed {
            self.proto.ctrl_armed = next;
            if let Some(at) = next {
                self.queue
                    .push(at.as_nanos().max(t), Ev::Proto(OnePipeEv::CtrlTimer));
            }
        }
    }

    /// One output of the controller at `t`: a management message to carry, or a round's news.
    fn controller_output(
        &mut self,
        t: SimTime,
        o: Output<std::convert::Infallible, CtrlEvent, Mgmt>,
    ) {
        match o {
            Output::Mgmt { to, msg } => {
                if let Mgmt::Ctrl(CtrlMsg::Resume { round, dead_links }) = &msg {
                    // Routing around the dead links takes effect with the round's Resume
                    // (computed once per round, not once per addressee).
                    if *round > self.proto.rerouted_round {
                        self.proto.rerouted_round = *round;
                        self.reroute(dead_links);
                    }
                }
                self.send_mgmt(t, to, msg);
            }
            Output::Event(CtrlEvent::Declared { round, hosts, .. }) => {
                if self.proto.trace_ctrl {
                    eprintln!("[{t}] declared round {round}: {hosts:?}");
                }
                for &(h, ts) in &hosts {
                    self.proto
                        .trace
                        .add(0xDEC1 ^ (h.0 as u64) << 32 ^ round as u64);
                    self.proto.trace.add(ts.raw());
                    if let Some(c) = self.proto.checker.as_mut() {
                        let procs: Vec<u32> = self
                            .proto
                            .controller
                            .procs_of(h)
                            .iter()
                            .map(|p| p.0)
                            .collect();
                        c.on_declared(&procs, ts);
                    }
                }
                self.proto.failure_rounds.push(FailureRound {
                    round,
                    hosts: hosts.iter().map(|&(h, ts)| (h.0, ts.raw())).collect(),
                    declared_ns: t,
                    resumed_ns: None,
                });
            }
            Output::Event(CtrlEvent::Joined {
                host, dead_links, ..
            }) => {
                if self.proto.trace_ctrl {
                    eprintln!("[{t}] controller admitted host {host:?}; removed {dead_links:?}");
                }
                // Routes follow the links taken back.
                self.reroute(&dead_links);
            }
            Output::Event(CtrlEvent::Resumed { round }) => {
                match self
                    .proto
                    .failure_rounds
                    .iter_mut()
                    .find(|r| r.round == round)
                {
                    Some(r) => r.resumed_ns = Some(t),
                    None => self.proto.failure_rounds.push(FailureRound {
                        round,
                        declared_ns: t,
                        resumed_ns: Some(t),
                        ..FailureRound::default()
                    }),
                }
            }
            Output::Event(_) => {}
        }
    }

    /// §5.2 Resume: packets route around the dead links from now on.
    pub(super) fn reroute(&mut self, dead_links: &[onepipe_proto::LinkId]) {
        let dead: std::collections::BTreeSet<_> = dead_links.iter().copied().collect();
        let reach = reach_table(&self.topo, &dead);
        *self.proto.router.detour.write().expect("never poisoned") = Some(Detour { reach, dead });
        // Routes remembered for the prefetch are stale now.
        self.proto.route_next.set(None);
        self.proto.route_cur = None;
        self.proto
            .router
            .detouring
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
