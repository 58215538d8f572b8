//! §5.2 controller forwarding, receiver recovery and rejoin: the relay side of the
//! [`Controller`] (the relay messages are [`RelayMsg`]).

use super::*;

impl Controller {
    /// §5.2 "the recovered process needs to join 1Pipe as a new process". A settled host asks
    /// ([`RelayMsg::Rejoin`]); once no round is open the controller asks the switches at the
    /// head of every link it knows dead or left out of the commit minimum whether it is alive
    /// again ([`RelayMsg::Admit`] without `apply`). With those left out, the host must reach
    /// every correct host and be reached by each, both ways (as in Determine), or it stays out
    /// (it asks again). Then the switches take back what the host needs — its uplink, and the
    /// links out of switches only it reaches — with §4.2's rule for added links (the output
    /// waits until the link passes it), answering with their outputs; the host's new
    /// processes stamp at or above the largest ([`RelayMsg::Joined`]). Every correct receiver's
    /// barriers are bounded by one of those outputs (its chain from the host passes the last
    /// link taken back), so nothing the new processes send lies below a barrier a receiver has
    /// passed, and from then on the host's own barriers bound them.
    pub(super) fn on_rejoin(&mut self, host: NodeId) {
        let busy = !self.rounds.is_empty() || self.determine_at.is_some();
        let Some(r) = self.relay.as_mut() else {
            return;
        };
        let failed = self.failed.get(host.index()).copied().unwrap_or(false);
        if !failed || !r.settled.contains(&host) || busy {
            r.dropped += 1;
            return;
        }
        if r.join
            .as_ref()
            .is_some_and(|j| j.host != host || j.applying)
        {
            return; // another host first, or taking links back: it will answer
        }
        let procs = self.cfg.procs_of_host[host.index()].len() as u32;
        if r.next_proc.saturating_add(procs) > r.proc_ids_max {
            r.dropped += 1;
            return; // no ids left: it stays out
        }
        // Every link the controller knows dead or removed whose head is a switch: the host's
        // recovery may have revived any of them (a ToR silent while its only host was cut off,
        // and the links above it).
        let hosts = self.topo.hosts();
        let links = self.topo.links();
        let probe: BTreeSet<LinkId> = self
            .reports
            .keys()
            .chain(&self.removed)
            .copied()
            .chain([self.topo.uplink(host.0)])
            .filter(|l| links[l.index()].to.0 >= hosts)
            .collect();
        for &l in &probe {
            r.out.push_back((
                MgmtDest::Node(links[l.index()].to),
                RelayMsg::Admit {
                    link: l,
                    apply: false,
                },
            ));
        }
        r.join = Some(Join {
            host,
            applying: false,
            awaiting: probe,
            alive: BTreeSet::new(),
            revived: BTreeSet::new(),
            removed: BTreeSet::new(),
            floor: None,
        });
        self.join_step();
    }

    /// A switch answered [`RelayMsg::Admit`] for `link`; `high` is the larger of its outputs.
    pub(super) fn on_admitted(&mut self, link: LinkId, alive: bool, high: Option<Timestamp>) {
        let Some(j) = self.relay.as_mut().and_then(|r| r.join.as_mut()) else {
            return;
        };
        if !j.awaiting.remove(&link) {
            return; // an answer to an earlier, abandoned attempt
        }
        if j.applying {
            if let Some(h) = high {
                j.floor = Some(j.floor.map_or(h, |f| f.max_wrapping(h)));
            }
        } else if alive {
            j.alive.insert(link);
        }
        self.join_step();
    }

    /// The network once `host` is back, with the links found `alive` again: those, and its
    /// own downlink (it asked because it hears its switch again), are no longer dead — except
    /// the uplinks of other hosts still failed (each comes back with its own host). Returns the
    /// revived links, the links still dead and the hosts still failed; `None` if the host would
    /// not reach every correct host both ways (`connected_hosts_among`).
    pub(super) fn rejoin_view(
        &self,
        host: NodeId,
        alive: &BTreeSet<LinkId>,
    ) -> Option<(BTreeSet<LinkId>, BTreeSet<LinkId>, Vec<bool>)> {
        let hosts = self.topo.hosts();
        let revived: BTreeSet<LinkId> = alive
            .iter()
            .copied()
            .filter(|l| {
                let from = self.topo.links()[l.index()].from;
                from == host || from.0 >= hosts || !self.failed[from.index()]
            })
            .chain([self.topo.downlink(host.0)])
            .collect();
        let mut reports = self.reports.clone();
        for l in &revived {
            reports.remove(l);
        }
        let dead: BTreeSet<LinkId> = reports.keys().copied().collect();
        let mut failed = self.failed.clone();
        failed[host.index()] = false;
        let candidates: Vec<bool> = failed.iter().map(|f| !f).collect();
        let correct = connected_hosts_among(&self.topo, &dead, &candidates);
        let keeps_everyone = (0..hosts as usize).all(|h| failed[h] || correct[h]);
        keeps_everyone.then_some((revived, dead, failed))
    }

    /// Moves the rejoin on once every switch asked has answered: decides, then takes links
    /// back, then admits the host.
    pub(super) fn join_step(&mut self) {
        let Some(j) = self.relay.as_ref().and_then(|r| r.join.as_ref()) else {
            return;
        };
        if !j.awaiting.is_empty() {
            return;
        }
        let host = j.host;
        if j.applying {
            self.finish_join();
            return;
        }
        let alive = j.alive.clone();
        let Some((revived, dead, failed)) = self.rejoin_view(host, &alive) else {
            // Still cut off somewhere: it asks again later.
            if let Some(r) = self.relay.as_mut() {
                r.join = None;
            }
            return;
        };
        let hosts = self.topo.hosts();
        let r = self.relay.as_mut().expect("checked above");
        let removed: BTreeSet<LinkId> = with_orphaned(&self.topo, dead, &failed)
            .into_iter()
            .collect();
        let up = self.topo.uplink(host.0);
        let take_back: BTreeSet<LinkId> = self
            .removed
            .iter()
            .chain(self.reports.keys())
            .copied()
            .filter(|l| !removed.contains(l))
            .chain([up])
            // A host's downlink has no switch at its head: nothing to take back.
            .filter(|l| self.topo.links()[l.index()].to.0 >= hosts)
            .collect();
        let links = self.topo.links();
        for &l in &take_back {
            r.out.push_back((
                MgmtDest::Node(links[l.index()].to),
                RelayMsg::Admit {
                    link: l,
                    apply: true,
                },
            ));
        }
        // The host's own first-hop switch's outputs bound its barriers from the first packet:
        // they go into the floor too (asked through one of its inputs, changing nothing).
        let tor_down = links[self.topo.downlink(host.0).index()].from;
        let mut awaiting = take_back;
        if let Some(&l) = self.topo.node(tor_down).inputs.first() {
            if awaiting.insert(l) {
                r.out.push_back((
                    MgmtDest::Node(tor_down),
                    RelayMsg::Admit {
                        link: l,
                        apply: false,
                    },
                ));
            }
        }
        let j = r.join.as_mut().expect("checked above");
        j.applying = true;
        j.awaiting = awaiting;
        j.removed = removed;
        j.revived = revived;
    }

    /// Every switch took its links back: the host's processes rejoin as new processes.
    pub(super) fn finish_join(&mut self) {
        let r = self.relay.as_mut().expect("a join runs with the relay on");
        let j = r.join.take().expect("called with a join");
        let h = j.host.index();
        let n = self.cfg.procs_of_host[h].len() as u32;
        let procs: Vec<ProcId> = (r.next_proc..r.next_proc + n).map(ProcId).collect();
        r.next_proc += n;
        r.joined += 1;
        for &p in &procs {
            if r.host_of_proc.len() <= p.index() {
                r.host_of_proc.resize(p.index() + 1, u32::MAX);
            }
            r.host_of_proc[p.index()] = h as u32;
        }
        r.settled.remove(&j.host);
        r.unresponsive.remove(&j.host);
        let failed: Vec<(ProcId, Timestamp)> =
            r.failed_procs.iter().map(|(&p, &t)| (p, t)).collect();
        let floor = j.floor.unwrap_or_default();
        r.out.push_back((
            MgmtDest::Node(j.host),
            RelayMsg::Joined {
                procs: procs.clone(),
                floor,
                failed,
            },
        ));
        for o in (0..self.failed.len()).filter(|&o| o != h && !self.failed[o]) {
            r.out.push_back((
                MgmtDest::Node(NodeId(o as u32)),
                RelayMsg::PeerJoined {
                    host: j.host,
                    procs: procs.clone(),
                    floor,
                },
            ));
        }
        self.failed[h] = false;
        self.late.remove(&j.host);
        self.departed.remove(&j.host);
        self.cfg.procs_of_host[h] = procs.clone();
        // Reports that came in meanwhile stay (their Determine is due).
        for l in &j.revived {
            self.reports.remove(l);
        }
        self.removed = j.removed;
        self.outputs.push_back(CtrlOut::Event(CtrlEvent::Joined {
            host: j.host,
            procs,
            dead_links: self.removed.iter().copied().collect(),
        }));
    }

    /// Packets relayed so far (§5.2 forwarding).
    pub fn forwarded(&self) -> u64 {
        self.relay.as_ref().map_or(0, |r| r.forwarded)
    }

    /// §5.2 "Controller Forwarding": relays `Forward` to the host of the packets' addressee. A
    /// relay to a host declared failed is dropped: the sender learns of the failure from the
    /// Broadcast, which recalls what the receiver never acknowledged. §5.2 Receiver Recovery:
    /// records `Recalled`, and answers `RecoverRequest` with `Settle` once no round is open.
    pub(super) fn on_relay_msg(&mut self, _now: Instant, msg: RelayMsg) {
        let failed = &self.failed;
        let Some(r) = self.relay.as_mut() else {
            return;
        };
        match msg {
            RelayMsg::Failed { .. }
            | RelayMsg::Settle { .. }
            | RelayMsg::Admit { .. }
            | RelayMsg::Joined { .. }
            | RelayMsg::PeerJoined { .. } => r.dropped += 1,
            RelayMsg::Rejoin { host } => {
                self.on_rejoin(host);
                return;
            }
            RelayMsg::Admitted {
                link,
                alive,
                barrier,
                commit,
            } => {
                let high = match (barrier, commit) {
                    (Some(b), Some(c)) => Some(b.max_wrapping(c)),
                    (b, c) => b.or(c),
                };
                self.on_admitted(link, alive, high);
                return;
            }
            RelayMsg::Recalled { groups } => r.recalled.extend(groups),
            // A host that restarted after a crash asks before it is declared failed (its
            // buffers are gone; its old processes must be): answered once it is.
            RelayMsg::RecoverRequest { host } => {
                if host.index() >= failed.len() {
                    r.dropped += 1;
                    return;
                }
                r.recovering.insert(host);
            }
            RelayMsg::Forward { from, packets } => {
                let dst = packets
                    .first()
                    .and_then(|p| p.endpoints())
                    .map(|(_, to)| to);
                let host = dst.and_then(|p| r.host_of_proc.get(p.index()).copied());
                let Some(host) = host.filter(|&h| (h as usize) < failed.len()) else {
                    r.dropped += 1;
                    return;
                };
                // Nothing goes to a failed host, and nothing from one: its messages at or above
                // its failure timestamp are discarded everywhere, and below it were committed.
                let from_failed = failed.get(from.index()).copied().unwrap_or(true);
                if failed[host as usize] || from_failed || r.out.len() >= RELAY_QUEUE_MAX {
                    r.dropped += 1;
                    return;
                }
                r.forwarded += packets.len() as u64;
                r.out.push_back((
                    MgmtDest::Node(NodeId(host)),
                    RelayMsg::Forward { from, packets },
                ));
            }
        }
        self.answer_recovering();
    }

    /// §5.2: "if controller also cannot deliver the message, R will be announced as failed" —
    /// the management network could not deliver a relay to `host` (it does not answer): it is
    /// failed at the next Determine (with the failure timestamp its neighbours report).
    pub(super) fn on_unreachable(&mut self, now: Instant, host: NodeId) {
        if self.is_failed_host(host) {
            return;
        }
        let Some(r) = self.relay.as_mut() else {
            return;
        };
        if r.unresponsive.insert(host) && self.determine_at.is_none() {
            self.determine_at = Some(now + self.cfg.settle_ns);
        }
    }

    /// The next relay to send (§5.2 forwarding and recovery).
    pub(super) fn pop_relay(&mut self) -> Option<(MgmtDest, RelayMsg)> {
        self.relay.as_mut()?.out.pop_front()
    }
}
