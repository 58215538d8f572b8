//! Registration: members joining (and joining again after a restart or a failover), binding
//! their addresses, the cluster starting once every member needed has bound, and departures.

use super::*;

impl State {
    /// Connection `id` joins as `want`: a slot, and the address to bind (`Welcome`), or a refusal.
    pub(super) fn on_join(&mut self, id: u64, want: JoinAs) {
        if self.conns.get(&id).is_some_and(|c| c.member.is_some()) {
            return self.refuse(id, "this connection has already joined".into());
        }
        let member = match want {
            JoinAs::Aggregator(name) => Member::Aggregator(name),
            JoinAs::Process(Some(p)) => Member::Process(p),
            JoinAs::Process(None) => match self.free_process(id) {
                Some(m) => m,
                None => return,
            },
        };
        if !self.may_act_as(id, &member) {
            self.malformed += 1;
            return self.refuse(id, format!("the certificate does not name {member}"));
        }
        let Some(slot) = self.slots.get_mut(&member) else {
            return self.refuse(id, format!("{member} is not in the cluster file"));
        };
        // A process that died (or left) may start again once the cluster runs: with its memory
        // lost it recovers and rejoins as a new process (§5.2), on the address it had, which
        // its aggregator still sends to.
        let restart = matches!(member, Member::Process(_))
            && self.ready
            && matches!(slot.state, SlotState::Lost | SlotState::Left);
        if slot.state != SlotState::Waiting && !restart {
            let state = slot.state.name();
            return self.refuse(id, format!("{member} has already joined (state: {state})"));
        }
        slot.state = SlotState::Joined;
        slot.conn = Some(id);
        slot.last_seen = Some(Instant::now());
        // A slot that was free when the cluster started, or whose process is gone: the new
        // process joins the running cluster (§4.2 addition of links, §5.2 rejoin).
        slot.rejoin = matches!(member, Member::Process(_)) && (restart || self.ready);
        let file_addr = match &member {
            Member::Aggregator(name) => self.cluster.aggregator(name).map(|a| a.addr),
            Member::Process(p) => self.cluster.process(*p).map(|p| p.addr),
        };
        let bind = match &member {
            Member::Process(_) if restart => slot.addr.or(file_addr),
            _ => file_addr,
        }
        .expect("slots are the cluster's members");
        if let Some(c) = self.conns.get_mut(&id) {
            c.member = Some(member.clone());
        }
        if restart {
            // What waited for the dead incarnation means nothing to the new one.
            self.pending.remove(&member);
            info!("{member} joined again (restarted)");
        } else {
            info!("{member} joined");
        }
        self.reply(
            id,
            &FromController::Welcome {
                member: member.clone(),
                bind,
            },
        );
        self.flush_pending(&member);
    }

    /// The lowest free process id connection `id` may take; `None` when there is none (the
    /// join is refused, and counted when only the certificate stood in the way).
    fn free_process(&mut self, id: u64) -> Option<Member> {
        // The lowest free id this connection's certificate lets it take: one nobody
        // joined as, or — once the cluster runs — one whose process left or was lost
        // and was declared failed (its slot is free for a new process).
        let free_slot = |m: &Member, s: &Slot| {
            let Member::Process(p) = m else {
                return false;
            };
            s.state == SlotState::Waiting
                || self.ready
                    && matches!(s.state, SlotState::Left | SlotState::Lost)
                    && self.host_failed(*p)
        };
        let free = self
            .slots
            .iter()
            .find(|(m, s)| free_slot(m, s) && self.may_act_as(id, m));
        let any_free = self.slots.iter().any(|(m, s)| free_slot(m, s));
        match free {
            Some((m, _)) => Some(m.clone()),
            None if any_free => {
                self.malformed += 1;
                self.refuse(id, "the certificate names no free process id".into());
                None
            }
            None => {
                self.refuse(id, "every process id is taken".into());
                None
            }
        }
    }

    /// A member registers again after its control connection was lost (a failover): same
    /// member, same bound address. Its data path never stopped, so the cluster was ready.
    pub(super) fn on_rejoin(&mut self, id: u64, member: Member, mut addr: SocketAddr) {
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        if conn.member.is_some() {
            return self.refuse(id, "this connection has already joined".into());
        }
        if addr.ip().is_unspecified() {
            addr.set_ip(conn.peer.ip());
        }
        if !self.may_act_as(id, &member) {
            self.malformed += 1;
            return self.refuse(id, format!("the certificate does not name {member}"));
        }
        let declared = match (&member, &self.failure) {
            (Member::Process(p), Ok(f)) => f
                .procedure
                .as_ref()
                .is_some_and(|ha| ha.controller().is_failed(NodeId(*p))),
            _ => false,
        };
        let Some(slot) = self.slots.get_mut(&member) else {
            return self.refuse(id, format!("{member} is not in the cluster file"));
        };
        if slot.state == SlotState::Left || declared {
            let state = if declared { "declared failed" } else { "left" };
            return self.refuse(id, format!("{member} may not rejoin ({state})"));
        }
        let old = slot.conn.replace(id);
        slot.state = SlotState::Bound;
        slot.addr = Some(addr);
        slot.last_seen = Some(Instant::now());
        if let Some(old) = old.and_then(|o| self.conns.get_mut(&o)) {
            old.member = None;
        }
        if let Some(c) = self.conns.get_mut(&id) {
            c.member = Some(member.clone());
        }
        self.ready = true;
        if let Some(km) = self.keys.as_mut() {
            // It kept the keys the controller before this one gave it.
            km.adopt(&member);
        }
        info!("{member} rejoined at {addr}");
        self.reply(
            id,
            &FromController::Welcome {
                member: member.clone(),
                bind: addr,
            },
        );
        self.flush_pending(&member);
    }

    /// Sends `member` what waited for it.
    fn flush_pending(&mut self, member: &Member) {
        for msg in self.pending.remove(member).unwrap_or_default() {
            self.send_to(member, &msg);
        }
    }

    /// Connection `id`'s member bound `addr`: a late member gets the running cluster; otherwise
    /// the cluster starts once every member needed has bound (until then, those bound hear how
    /// far it is).
    pub(super) fn on_bound(&mut self, id: u64, mut addr: SocketAddr) {
        let Some(conn) = self.conns.get(&id) else {
            return;
        };
        let Some(member) = conn.member.clone() else {
            return self.refuse(id, "Bound before Join".into());
        };
        // A member bound to a wildcard address is reached at the address it connected from.
        if addr.ip().is_unspecified() {
            addr.set_ip(conn.peer.ip());
        }
        let slot = self
            .slots
            .get_mut(&member)
            .expect("joined members have slots");
        if slot.state != SlotState::Joined {
            return self.refuse(id, format!("{member} is not waiting to bind"));
        }
        slot.state = SlotState::Bound;
        slot.addr = Some(addr);
        let rejoin = slot.rejoin;
        debug!("{member} bound {addr}");
        if self.ready {
            // A late member (a restart, or one that joins the running cluster): its keys, then
            // the cluster as it is; the aggregators learn where it is.
            self.keys_for_new_member(&member);
            let msg = FromController::Ready {
                cluster: Box::new(self.resolved()),
                rejoin,
            };
            self.reply(id, &msg);
            if matches!(member, Member::Process(_)) {
                let moved = FromController::Address {
                    member: member.clone(),
                    addr,
                };
                self.send_to_each(|m| matches!(m, Member::Aggregator(_)), &moved);
                let (epoch, members) = self.view();
                let view = FromController::View {
                    epoch,
                    members,
                    joined: Vec::new(),
                    left: Vec::new(),
                    failed: Vec::new(),
                };
                self.reply(id, &view);
            }
            return;
        }
        if !self.startable() {
            // Everyone waiting hears how far the cluster is (a join that times out says it).
            let count = |aggs: bool| {
                self.slots
                    .iter()
                    .filter(|(m, _)| matches!(m, Member::Aggregator(_)) == aggs)
                    .filter(|(_, s)| s.state == SlotState::Bound)
                    .count() as u32
            };
            let msg = FromController::Waiting {
                processes: count(false),
                of_processes: self.cluster.start_with.unwrap_or(self.cluster.procs()),
                aggregators: count(true),
                of_aggregators: self.cluster.aggregators.len() as u32,
            };
            let bound: Vec<u64> = self
                .slots
                .values()
                .filter(|s| s.state == SlotState::Bound)
                .filter_map(|s| s.conn)
                .collect();
            for c in bound {
                self.reply(c, &msg);
            }
            return;
        }
        self.start_cluster();
    }

    /// Every member needed has bound: the cluster starts. Everyone connected gets its keys and
    /// `Ready`; the free process slots leave the barriers; the processes get the first view.
    fn start_cluster(&mut self) {
        self.ready = true;
        let msg = FromController::Ready {
            cluster: Box::new(self.resolved()),
            rejoin: false,
        };
        let members: Vec<Member> = self
            .slots
            .iter()
            .filter(|(_, s)| s.conn.is_some())
            .map(|(m, _)| m.clone())
            .collect();
        for m in members {
            self.keys_for_new_member(&m);
            self.send_to(&m, &msg);
        }
        // Process ids nobody bound are free: their links leave the barriers now (one §5.2
        // round, as if they had left at once), and processes that join later take them.
        let vacant: Vec<u32> = self
            .slots
            .iter()
            .filter_map(|(m, s)| match m {
                Member::Process(p) if s.state != SlotState::Bound => Some(*p),
                _ => None,
            })
            .collect();
        let now_ts = crate::clock::Clock::of(self.cluster.clock)
            .now()
            .timestamp()
            .raw();
        for p in vacant {
            if let Some(s) = self.slots.get_mut(&Member::Process(p)) {
                s.rejoin = true;
            }
            self.departed(p, Some(now_ts));
        }
        let (_, everyone) = self.view();
        self.send_view_now(everyone, Vec::new(), Vec::new());
        info!(
            "cluster ready: {} aggregators, {} processes",
            self.cluster.aggregators.len(),
            self.cluster.processes.len()
        );
    }

    /// The cluster with every bound member's address.
    fn resolved(&self) -> Cluster {
        let mut c = self.cluster.clone();
        for a in &mut c.aggregators {
            if let Some(addr) = self.slots[&Member::Aggregator(a.name.clone())].addr {
                a.addr = addr;
            }
        }
        for p in &mut c.processes {
            if let Some(addr) = self.slots[&Member::Process(p.id)].addr {
                p.addr = addr;
            }
        }
        c
    }

    /// `member` left or was lost (`how`): everyone connected hears `Down`, and its keys are
    /// retired.
    pub(super) fn depart(&mut self, member: &Member, how: SlotState) {
        let slot = self.slots.get_mut(member).expect("members have slots");
        slot.state = how;
        slot.conn = None;
        let reason = how.name().to_string();
        // A member that left said so; one that is lost may have failed.
        if how == SlotState::Lost {
            warn!("{member} {reason}");
        } else {
            info!("{member} {reason}");
        }
        let msg = FromController::Down {
            member: member.clone(),
            reason,
        };
        let ids: Vec<u64> = self.slots.values().filter_map(|s| s.conn).collect();
        for c in ids {
            self.reply(c, &msg);
        }
        if self.keys.as_mut().is_some_and(|km| km.removed(member)) {
            self.rotate_keys(None);
        }
    }

    /// Whether the cluster can start: every aggregator bound, and every process — or
    /// `start_with` of them.
    fn startable(&self) -> bool {
        let aggs = self
            .slots
            .iter()
            .filter(|(m, _)| matches!(m, Member::Aggregator(_)))
            .all(|(_, s)| s.state == SlotState::Bound);
        let procs = self
            .slots
            .iter()
            .filter(|(m, s)| matches!(m, Member::Process(_)) && s.state == SlotState::Bound)
            .count() as u32;
        aggs && procs >= self.cluster.start_with.unwrap_or(self.cluster.procs())
    }
}
