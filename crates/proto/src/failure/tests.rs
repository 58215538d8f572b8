//! Unit tests of the §5.2 controller (`failure.rs`).

use super::*;

fn controller(topo: &Arc<Topology>) -> Controller {
    let cfg = ControllerConfig {
        procs_of_host: (0..topo.hosts()).map(|h| vec![ProcId(h)]).collect(),
        settle_ns: 1_000,
        callback_timeout_ns: 0,
    };
    Controller::new(cfg, topo.clone())
}

/// The first-hop switch of `host` reports its uplink dead at time 0, last commit
/// `last_commit`; returns the link.
fn uplink_down(c: &mut Controller, topo: &Topology, host: u32, last_commit: u64) -> LinkId {
    let up = topo.uplink(host);
    c.on_ctrl_msg(
        Instant(0),
        CtrlMsg::LinkDown {
            reporter: topo.links()[up.index()].to,
            link: up,
            last_commit: Some(ts(last_commit)),
        },
    );
    up
}

/// Every host of `hosts` reports round `round` completed at `at_ns`.
fn complete_round(
    c: &mut Controller,
    at_ns: u64,
    round: u32,
    hosts: impl IntoIterator<Item = u32>,
) {
    for h in hosts {
        c.on_ctrl_msg(
            Instant(at_ns),
            CtrlMsg::Completed {
                round,
                host: NodeId(h),
            },
        );
    }
}

fn drain(c: &mut Controller) -> Vec<CtrlOut> {
    std::iter::from_fn(|| c.pop_output()).collect()
}

fn ts(n: u64) -> Timestamp {
    Timestamp::new(n)
}

#[test]
fn a_host_crash_fails_its_processes_at_the_reported_commit_5_2() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    let up = topo.uplink(1);
    let tor = topo.links()[up.index()].to;
    c.on_ctrl_msg(
        Instant(0),
        CtrlMsg::LinkDown {
            reporter: tor,
            link: up,
            last_commit: Some(ts(500)),
        },
    );
    assert_eq!(c.poll_timeout(), Some(Instant(1_000)));
    c.on_timer(Instant(1_000));
    let out = drain(&mut c);
    assert!(out.contains(&CtrlOut::Event(CtrlEvent::Declared {
        round: 1,
        at: Instant(1_000),
        hosts: vec![(NodeId(1), ts(500))]
    })));
    let failures: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            CtrlOut::Send {
                to,
                msg: CtrlMsg::Failure { failed, .. },
            } => Some((*to, failed.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 3, "every correct host is told");
    assert!(failures
        .iter()
        .all(|(_, f)| f == &vec![(ProcId(1), ts(500))]));
    // Resume waits for every correct host.
    for h in [0, 2] {
        c.on_ctrl_msg(
            Instant(2_000),
            CtrlMsg::Completed {
                round: 1,
                host: NodeId(h),
            },
        );
        assert!(drain(&mut c).is_empty());
    }
    c.on_ctrl_msg(
        Instant(2_000),
        CtrlMsg::Completed {
            round: 1,
            host: NodeId(3),
        },
    );
    let out = drain(&mut c);
    assert!(out.contains(&CtrlOut::Event(CtrlEvent::Resumed { round: 1 })));
    assert!(out.iter().any(|o| matches!(o,
        CtrlOut::Send { msg: CtrlMsg::Resume { dead_links, .. }, .. } if dead_links == &vec![up])));
}

/// §5.2 Receiver Recovery at the controller: it records the undeliverable recalls and the
/// failure notifications, and answers a recovering host only once no round is open (every
/// correct host recalled and completed); a host never declared failed is not answered.
#[test]
fn a_recovering_host_gets_failures_and_recalls_once_no_round_is_open_5_2() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    c.enable_relay();
    let up = topo.uplink(1);
    let tor = topo.links()[up.index()].to;
    c.on_ctrl_msg(
        Instant(0),
        CtrlMsg::LinkDown {
            reporter: tor,
            link: up,
            last_commit: Some(ts(500)),
        },
    );
    c.on_timer(Instant(1_000));
    drain(&mut c);
    assert_eq!(
        c.pop_relay(),
        Some((MgmtDest::Node(NodeId(1)), RelayMsg::Failed { ts: ts(500) }))
    );
    c.on_relay_msg(
        Instant(1_100),
        RelayMsg::Recalled {
            groups: vec![(ProcId(2), ts(480))],
        },
    );
    // Asked while round 1 is open, and by a correct host: no answer yet.
    c.on_relay_msg(Instant(1_200), RelayMsg::RecoverRequest { host: NodeId(1) });
    c.on_relay_msg(Instant(1_200), RelayMsg::RecoverRequest { host: NodeId(0) });
    assert_eq!(c.pop_relay(), None);
    complete_round(&mut c, 2_000, 1, [0, 2, 3]);
    assert!(drain(&mut c).contains(&CtrlOut::Event(CtrlEvent::Resumed { round: 1 })));
    assert_eq!(
        c.pop_relay(),
        Some((
            MgmtDest::Node(NodeId(1)),
            RelayMsg::Settle {
                failed: vec![(ProcId(1), ts(500))],
                recalled: vec![(ProcId(2), ts(480))],
            }
        ))
    );
    assert_eq!(c.pop_relay(), None);
}

/// §5.2 Receiver Recovery, then "join 1Pipe as a new process": a settled host asks to
/// rejoin; the controller asks its switch whether its uplink is alive again, has the switch
/// take it back (§4.2), and answers with fresh process ids, a timestamp floor at the
/// switch's outputs, and the failures so far. A later failure of the host fails its new
/// processes.
#[test]
fn a_settled_host_rejoins_as_new_processes_once_its_links_are_back_5_2() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    c.enable_relay();
    c.set_proc_ids_max(8);
    let (up, down) = (topo.uplink(1), topo.downlink(1));
    let tor = topo.links()[up.index()].to;
    c.on_ctrl_msg(
        Instant(0),
        CtrlMsg::LinkDown {
            reporter: tor,
            link: up,
            last_commit: Some(ts(500)),
        },
    );
    c.on_ctrl_msg(
        Instant(0),
        CtrlMsg::LinkDown {
            reporter: NodeId(1),
            link: down,
            last_commit: Some(ts(400)),
        },
    );
    c.on_timer(Instant(1_000));
    complete_round(&mut c, 2_000, 1, [0, 2, 3]);
    drain(&mut c);
    // Not settled yet: no rejoin.
    c.on_relay_msg(Instant(2_100), RelayMsg::Rejoin { host: NodeId(1) });
    let relays: Vec<_> = std::iter::from_fn(|| c.pop_relay()).collect();
    assert_eq!(
        relays,
        vec![(MgmtDest::Node(NodeId(1)), RelayMsg::Failed { ts: ts(500) })]
    );
    c.on_relay_msg(Instant(2_200), RelayMsg::RecoverRequest { host: NodeId(1) });
    assert!(matches!(c.pop_relay(), Some((_, RelayMsg::Settle { .. }))));
    // Settled: the rejoin asks the ToR about the uplink (the downlink's head is the host).
    c.on_relay_msg(Instant(2_300), RelayMsg::Rejoin { host: NodeId(1) });
    let probe = RelayMsg::Admit {
        link: up,
        apply: false,
    };
    assert_eq!(c.pop_relay(), Some((MgmtDest::Node(tor), probe)));
    assert_eq!(c.pop_relay(), None);
    // Still silent: it stays out, and asks again later.
    c.on_relay_msg(
        Instant(2_400),
        RelayMsg::Admitted {
            link: up,
            alive: false,
            barrier: Some(ts(900)),
            commit: Some(ts(880)),
        },
    );
    assert_eq!(c.pop_relay(), None);
    assert!(c.is_failed(NodeId(1)));
    c.on_relay_msg(Instant(2_500), RelayMsg::Rejoin { host: NodeId(1) });
    c.pop_relay();
    c.on_relay_msg(
        Instant(2_600),
        RelayMsg::Admitted {
            link: up,
            alive: true,
            barrier: Some(ts(1_000)),
            commit: Some(ts(990)),
        },
    );
    let apply = RelayMsg::Admit {
        link: up,
        apply: true,
    };
    assert_eq!(c.pop_relay(), Some((MgmtDest::Node(tor), apply)));
    // Its first-hop switch's outputs are asked too (they bound its barriers).
    let tor_down = topo.links()[down.index()].from;
    let first_in = topo.node(tor_down).inputs[0];
    let ask = RelayMsg::Admit {
        link: first_in,
        apply: false,
    };
    assert_eq!(c.pop_relay(), Some((MgmtDest::Node(tor_down), ask)));
    assert_eq!(c.pop_relay(), None);
    for (link, b) in [(up, 1_050), (first_in, 1_070)] {
        c.on_relay_msg(
            Instant(2_700),
            RelayMsg::Admitted {
                link,
                alive: true,
                barrier: Some(ts(b)),
                commit: Some(ts(1_020)),
            },
        );
    }
    assert_eq!(
        c.pop_relay(),
        Some((
            MgmtDest::Node(NodeId(1)),
            RelayMsg::Joined {
                procs: vec![ProcId(4)],
                floor: ts(1_070),
                failed: vec![(ProcId(1), ts(500))],
            }
        ))
    );
    // Everyone else stamps nothing to the new process below the floor.
    for h in [0, 2, 3] {
        assert_eq!(
            c.pop_relay(),
            Some((
                MgmtDest::Node(NodeId(h)),
                RelayMsg::PeerJoined {
                    host: NodeId(1),
                    procs: vec![ProcId(4)],
                    floor: ts(1_070),
                }
            ))
        );
    }
    assert_eq!(
        drain(&mut c),
        vec![CtrlOut::Event(CtrlEvent::Joined {
            host: NodeId(1),
            procs: vec![ProcId(4)],
            dead_links: vec![],
        })]
    );
    assert!(!c.is_failed(NodeId(1)));
    assert_eq!((c.rejoined(), c.procs_of(NodeId(1))), (1, &[ProcId(4)][..]));
    // It fails again: its new process is the one declared.
    c.on_ctrl_msg(
        Instant(5_000),
        CtrlMsg::LinkDown {
            reporter: tor,
            link: up,
            last_commit: Some(ts(2_000)),
        },
    );
    c.on_timer(Instant(6_000));
    assert!(drain(&mut c).iter().any(|o| matches!(o,
        CtrlOut::Send { msg: CtrlMsg::Failure { failed, .. }, .. }
            if failed == &vec![(ProcId(4), ts(2_000))])));
}

/// No spare ids, no rejoin: the host stays out.
#[test]
fn a_host_rejoins_only_while_spare_ids_last_5_2() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    c.enable_relay();
    uplink_down(&mut c, &topo, 1, 500);
    c.on_timer(Instant(1_000));
    complete_round(&mut c, 2_000, 1, [0, 2, 3]);
    c.on_relay_msg(Instant(2_200), RelayMsg::RecoverRequest { host: NodeId(1) });
    while c.pop_relay().is_some() {}
    c.on_relay_msg(Instant(2_300), RelayMsg::Rejoin { host: NodeId(1) });
    assert_eq!(c.pop_relay(), None);
}

#[test]
fn a_spine_failure_fails_nobody_and_resumes_at_once() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    let spine = topo
        .nodes()
        .iter()
        .position(|n| n.name == "spine-0")
        .unwrap();
    for &l in &topo.nodes()[spine].outputs {
        let to = topo.links()[l.index()].to;
        c.on_ctrl_msg(
            Instant(0),
            CtrlMsg::LinkDown {
                reporter: to,
                link: l,
                last_commit: Some(ts(10)),
            },
        );
    }
    c.on_timer(Instant(1_000));
    let out = drain(&mut c);
    assert!(!out
        .iter()
        .any(|o| matches!(o, CtrlOut::Event(CtrlEvent::Declared { .. }))));
    assert!(out.contains(&CtrlOut::Event(CtrlEvent::Resumed { round: 1 })));
    assert_eq!(c.failed_hosts().count(), 0);
}

#[test]
fn a_tor_failure_fails_its_rack_at_the_spines_maximum() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    let leaf_up = topo
        .nodes()
        .iter()
        .position(|n| n.name == "leaf-0-up")
        .unwrap();
    // The spines report their input from leaf-0-up, one behind the other.
    let mut commit = 100;
    for &l in &topo.nodes()[leaf_up].outputs {
        let to = topo.links()[l.index()].to;
        if topo.nodes()[to.index()].name.starts_with("spine") {
            c.on_ctrl_msg(
                Instant(0),
                CtrlMsg::LinkDown {
                    reporter: to,
                    link: l,
                    last_commit: Some(ts(commit)),
                },
            );
            commit += 50;
        }
    }
    // The rack's hosts report their dead first-hop switch.
    let leaf_down = topo
        .nodes()
        .iter()
        .position(|n| n.name == "leaf-0-down")
        .unwrap();
    for &l in &topo.nodes()[leaf_down].outputs {
        let to = topo.links()[l.index()].to;
        c.on_ctrl_msg(
            Instant(0),
            CtrlMsg::LinkDown {
                reporter: to,
                link: l,
                last_commit: Some(ts(1)),
            },
        );
    }
    c.on_timer(Instant(1_000));
    let out = drain(&mut c);
    assert!(out.contains(&CtrlOut::Event(CtrlEvent::Declared {
        round: 1,
        at: Instant(1_000),
        hosts: vec![(NodeId(0), ts(150)), (NodeId(1), ts(150))]
    })));
}

/// §5.2 Resume: a ToR whose hosts all failed is disconnected too — its outputs leave the
/// commit minimum with the hosts' links, or its frozen commit barrier holds everyone's.
#[test]
fn resume_removes_the_outputs_of_a_switch_no_correct_host_reaches_5_2() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    for h in [0, 1] {
        let up = topo.uplink(h);
        c.on_ctrl_msg(
            Instant(0),
            CtrlMsg::LinkDown {
                reporter: topo.links()[up.index()].to,
                link: up,
                last_commit: Some(ts(100)),
            },
        );
    }
    c.on_timer(Instant(1_000));
    drain(&mut c);
    complete_round(&mut c, 2_000, 1, [2, 3]);
    let resumed: Vec<Vec<LinkId>> = drain(&mut c)
        .into_iter()
        .filter_map(|o| match o {
            CtrlOut::Send {
                msg: CtrlMsg::Resume { dead_links, .. },
                ..
            } => Some(dead_links),
            _ => None,
        })
        .collect();
    assert!(!resumed.is_empty(), "round 1 resumed");
    let leaf_up = topo
        .nodes()
        .iter()
        .position(|n| n.name == "leaf-0-up")
        .unwrap();
    for dead in &resumed {
        assert!(dead.contains(&topo.uplink(0)) && dead.contains(&topo.uplink(1)));
        for l in &topo.nodes()[leaf_up].outputs {
            assert!(
                dead.contains(l),
                "leaf-0-up's output {l:?} still bounds commits"
            );
        }
        // The rest of the network stays.
        assert!(!dead.contains(&topo.uplink(2)));
    }
}

/// A controller that crashed mid-round (its `Completed` messages lost) sends the round's
/// Broadcast again on recovery to the hosts it still waits for — and only to them.
#[test]
fn a_recovered_controller_broadcasts_open_rounds_again_5_2() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    uplink_down(&mut c, &topo, 1, 500);
    c.on_timer(Instant(1_000));
    drain(&mut c);
    c.on_ctrl_msg(
        Instant(2_000),
        CtrlMsg::Completed {
            round: 1,
            host: NodeId(0),
        },
    );
    assert!(drain(&mut c).is_empty());
    c.handle(Instant(9_000), Input::Notice(Notice::Recovered));
    let again: Vec<MgmtDest> = drain(&mut c)
        .into_iter()
        .map(|o| match o {
            CtrlOut::Send {
                to,
                msg: CtrlMsg::Failure { round: 1, .. },
            } => to,
            o => panic!("unexpected {o:?}"),
        })
        .collect();
    assert_eq!(
        again,
        vec![MgmtDest::Node(NodeId(2)), MgmtDest::Node(NodeId(3))]
    );
    complete_round(&mut c, 9_500, 1, [2, 3]);
    assert!(drain(&mut c).contains(&CtrlOut::Event(CtrlEvent::Resumed { round: 1 })));
}

/// The failure timestamp of a host comes from links that carry its barriers: its own
/// uplink, or a switch's output downstream of it — not a rack neighbour's uplink.
#[test]
fn a_failure_timestamp_never_comes_from_another_hosts_link_5_2() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    for (h, commit) in [(0, 500), (1, 900)] {
        let up = topo.uplink(h);
        c.on_ctrl_msg(
            Instant(0),
            CtrlMsg::LinkDown {
                reporter: topo.links()[up.index()].to,
                link: up,
                last_commit: Some(ts(commit)),
            },
        );
        let down = topo.downlink(h);
        c.on_ctrl_msg(
            Instant(0),
            CtrlMsg::LinkDown {
                reporter: NodeId(h),
                link: down,
                last_commit: Some(ts(1)),
            },
        );
    }
    c.on_timer(Instant(1_000));
    assert!(drain(&mut c).contains(&CtrlOut::Event(CtrlEvent::Declared {
        round: 1,
        at: Instant(1_000),
        hosts: vec![(NodeId(0), ts(500)), (NodeId(1), ts(900))]
    })));
}

/// The dead links of VOPR seed 1806's second round on a k=4 fat tree: `agg-0` failed
/// (its links), then `agg-3-down → tor-3-down` reported.
fn seed_1806_dead(topo: &Topology) -> BTreeSet<LinkId> {
    let named = |from: &str, to: &str| {
        let id = |n: &str| topo.nodes().iter().position(|x| x.name == n).unwrap();
        let (f, t) = (id(from), id(to));
        LinkId(
            topo.links()
                .iter()
                .position(|l| l.from.index() == f && l.to.index() == t)
                .unwrap() as u32,
        )
    };
    let mut dead: BTreeSet<LinkId> = [
        ("tor-0-up", "agg-0-up"),
        ("tor-1-up", "agg-0-up"),
        ("agg-0-up", "core-0"),
        ("agg-0-up", "core-1"),
        ("agg-0-up", "agg-0-down"),
        ("core-0", "agg-0-down"),
        ("core-1", "agg-0-down"),
        ("agg-0-down", "tor-0-down"),
        ("agg-0-down", "tor-1-down"),
    ]
    .iter()
    .map(|(f, t)| named(f, t))
    .collect();
    dead.insert(named("agg-3-down", "tor-3-down"));
    dead
}

/// §5.2 Determine: correct hosts reach one another, both ways — not merely each some
/// common host. In seed 1806's network pod 0 (hosts 0–3) and `tor-3`'s hosts (6, 7) both
/// reach everyone else, but not each other; the greedy choice keeps the larger side.
#[test]
fn correct_hosts_reach_one_another_both_ways_5_2() {
    let topo = Topology::fat_tree(4).unwrap();
    let dead = seed_1806_dead(&topo);
    let r = |a: u32, b: u32| reachable_from(&topo, NodeId(a), &dead)[b as usize];
    assert!(r(0, 4) && r(4, 0) && r(6, 4) && r(4, 6) && !r(0, 6));
    let correct = connected_hosts(&topo, &dead);
    let failed: Vec<usize> = (0..16).filter(|&h| !correct[h]).collect();
    assert_eq!(failed, vec![6, 7]);
    // Hosts the controller already failed are not candidates.
    let mut candidate = vec![true; 16];
    candidate[12] = false;
    let correct = connected_hosts_among(&topo, &dead, &candidate);
    let failed: Vec<usize> = (0..16).filter(|&h| !correct[h]).collect();
    assert_eq!(failed, vec![6, 7, 12]);
    // With nothing dead, everyone.
    assert!(connected_hosts(&topo, &BTreeSet::new()).iter().all(|&c| c));
}

/// §5.2 "Failure timestamp … from a cut in a routing graph … that separates S and all
/// receivers": hosts 6 and 7 must fail in seed 1806's network, but their commit barriers
/// still reach pods 1–3 over links nobody reported, so no report bounds what the correct
/// receivers saw of them. Determine neither declares nor resumes; it asks their ToR to
/// isolate their uplinks, and declares them at the frozen registers once reported. The
/// Resume that follows removes the uplinks with the dead links.
#[test]
fn a_failed_host_whose_commit_barrier_still_flows_is_isolated_first_5_2() {
    let topo = Arc::new(Topology::fat_tree(4).unwrap());
    let mut c = controller(&topo);
    for l in seed_1806_dead(&topo) {
        c.on_ctrl_msg(
            Instant(0),
            CtrlMsg::LinkDown {
                reporter: topo.links()[l.index()].to,
                link: l,
                last_commit: Some(ts(100)),
            },
        );
    }
    c.on_timer(Instant(1_000));
    let out = drain(&mut c);
    let tor3_up = topo.links()[topo.uplink(6).index()].to;
    assert_eq!(
        out,
        vec![
            CtrlOut::Send {
                to: MgmtDest::Node(tor3_up),
                msg: CtrlMsg::Isolate {
                    link: topo.uplink(6)
                }
            },
            CtrlOut::Send {
                to: MgmtDest::Node(tor3_up),
                msg: CtrlMsg::Isolate {
                    link: topo.uplink(7)
                }
            },
        ],
        "nothing declared, nothing resumed before the cut exists"
    );
    assert_eq!(c.isolations(), 2);
    for (h, commit) in [(6, 700), (7, 650)] {
        c.on_ctrl_msg(
            Instant(1_100),
            CtrlMsg::LinkDown {
                reporter: tor3_up,
                link: topo.uplink(h),
                last_commit: Some(ts(commit)),
            },
        );
    }
    let due = c.poll_timeout().expect("Determine runs again");
    c.on_timer(due);
    let out = drain(&mut c);
    assert!(out.contains(&CtrlOut::Event(CtrlEvent::Declared {
        round: 1,
        at: due,
        hosts: vec![(NodeId(6), ts(700)), (NodeId(7), ts(650))]
    })));
    complete_round(&mut c, 3_000, 1, (0..16).filter(|h| ![6, 7].contains(h)));
    let resumed = drain(&mut c).into_iter().find_map(|o| match o {
        CtrlOut::Send {
            msg: CtrlMsg::Resume { dead_links, .. },
            ..
        } => Some(dead_links),
        _ => None,
    });
    let dead = resumed.expect("round 1 resumed");
    assert!(dead.contains(&topo.uplink(6)) && dead.contains(&topo.uplink(7)));
}

#[test]
fn reports_that_are_not_the_reporters_input_are_ignored() {
    let topo = Arc::new(Topology::rack(3).unwrap());
    let mut c = controller(&topo);
    c.on_ctrl_msg(
        Instant(0),
        CtrlMsg::LinkDown {
            reporter: NodeId(0),
            link: topo.uplink(2),
            last_commit: None,
        },
    );
    c.on_ctrl_msg(
        Instant(0),
        CtrlMsg::LinkDown {
            reporter: NodeId(0),
            link: LinkId(9_999),
            last_commit: None,
        },
    );
    assert_eq!(c.poll_timeout(), None);
}

/// §5.2 "resumes delivery after all non-fail processes finish their callback functions",
/// bounded: a round waits for a slow host's `Completed`, and one that never answers within
/// `callback_timeout_ns` is itself taken for failed — isolated (its uplink's commit
/// register frozen and reported), declared in a round of its own — after which the first
/// round no longer waits for it and resumes.
#[test]
fn a_round_waits_for_callbacks_and_a_host_that_never_completes_is_declared_5_2() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    c.cfg.callback_timeout_ns = 10_000;
    uplink_down(&mut c, &topo, 1, 500);
    c.handle(Instant(1_000), Input::Timeout);
    drain(&mut c);
    assert_eq!(
        c.poll_timeout(),
        Some(Instant(11_000)),
        "the callback deadline"
    );
    // Hosts 0 and 2 complete in time; host 3 is slow but not too slow: still waiting.
    complete_round(&mut c, 5_000, 1, [0, 2]);
    c.handle(Instant(9_000), Input::Timeout);
    assert!(!drain(&mut c).contains(&CtrlOut::Event(CtrlEvent::Resumed { round: 1 })));
    complete_round(&mut c, 9_500, 1, [3]);
    assert!(drain(&mut c).contains(&CtrlOut::Event(CtrlEvent::Resumed { round: 1 })));
    assert_eq!(c.late_hosts().count(), 0);

    // Round 2: host 3 fails; host 2 never completes.
    uplink_down(&mut c, &topo, 3, 900);
    c.handle(Instant(20_000), Input::Timeout);
    drain(&mut c);
    complete_round(&mut c, 21_000, 2, [0]);
    let due = c.poll_timeout().expect("the callback deadline");
    assert_eq!(due, Instant(30_000));
    c.handle(due, Input::Timeout);
    assert_eq!(c.late_hosts().collect::<Vec<_>>(), vec![NodeId(2)]);
    // Determine isolates it: its ToR freezes and reports its uplink.
    let due = c.poll_timeout().expect("Determine");
    c.handle(due, Input::Timeout);
    let up2 = topo.uplink(2);
    let tor = topo.links()[up2.index()].to;
    assert!(drain(&mut c).contains(&CtrlOut::Send {
        to: MgmtDest::Node(tor),
        msg: CtrlMsg::Isolate { link: up2 },
    }));
    c.on_ctrl_msg(
        due,
        CtrlMsg::LinkDown {
            reporter: tor,
            link: up2,
            last_commit: Some(ts(950)),
        },
    );
    let due = c.poll_timeout().expect("Determine again");
    c.handle(due, Input::Timeout);
    let out = drain(&mut c);
    assert!(
        out.iter().any(
            |o| matches!(o, CtrlOut::Event(CtrlEvent::Declared { round: 3, hosts, .. })
            if hosts == &vec![(NodeId(2), ts(950))])
        ),
        "{out:?}"
    );
    assert!(c.is_failed(NodeId(2)));
    // Round 2 no longer waits for host 2: it resumes; round 3 once host 0 answers.
    assert!(
        out.contains(&CtrlOut::Event(CtrlEvent::Resumed { round: 2 })),
        "{out:?}"
    );
    complete_round(&mut c, due.as_nanos() + 100, 3, [0]);
    let out = drain(&mut c);
    assert!(
        out.contains(&CtrlOut::Event(CtrlEvent::Resumed { round: 3 })),
        "{out:?}"
    );
}

/// §5.2 callbacks, issue 35: a host's callback clock starts when its application takes the
/// notification (`CallbackTaken`), not at the Broadcast — an application that read its events
/// late still has the whole `callback_timeout_ns` for its callbacks, and is taken for failed only
/// once that has passed since it took them.
#[test]
fn the_callback_clock_restarts_when_the_application_takes_the_notification_5_2() {
    let topo = Arc::new(Topology::leaf_spine(4, 2, 2).unwrap());
    let mut c = controller(&topo);
    c.cfg.callback_timeout_ns = 10_000;
    uplink_down(&mut c, &topo, 1, 500);
    c.handle(Instant(1_000), Input::Timeout);
    drain(&mut c);
    complete_round(&mut c, 2_000, 1, [0, 2]);
    // Host 3's application takes the notification at 8 µs: its deadline is 18 µs, not 11 µs.
    c.on_ctrl_msg(
        Instant(8_000),
        CtrlMsg::CallbackTaken {
            round: 1,
            host: NodeId(3),
        },
    );
    assert_eq!(c.poll_timeout(), Some(Instant(18_000)));
    c.handle(Instant(12_000), Input::Timeout);
    drain(&mut c);
    assert_eq!(c.late_hosts().count(), 0, "still inside its callback time");
    c.handle(Instant(18_000), Input::Timeout);
    assert_eq!(c.late_hosts().collect::<Vec<_>>(), vec![NodeId(3)]);
}
