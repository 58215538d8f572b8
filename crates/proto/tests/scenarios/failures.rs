//! Handling failures (§4.2, §5.2).

use super::*;

// ---------------------------------------------------------------------------------------------
// §4.2: handling failures.
// ---------------------------------------------------------------------------------------------

/// §4.2 "Handling failures": an input link silent for 10 beacon intervals is removed and the
/// barrier resumes; when it speaks again it is added back, and the output barrier, which never
/// moves backwards, waits for it ("Addition of new hosts and links").
#[test]
fn a_silent_input_link_is_removed_and_the_barrier_resumes_then_it_is_added_back_4_2() {
    let mut cfg = switch_config(SwitchMode::Chip, 2, 2);
    cfg.link_timeout_intervals = 10;
    let mut sw = Switch::new(cfg, Some(identity_router(2)), at(0));
    // Both inputs beacon for a while, then input 1 falls silent at 5 µs.
    let mut t_ns = 100;
    while t_ns < 5_000 {
        feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
        feed(&mut sw, t_ns, PortId(1), beacon(1, t_ns));
        tick(&mut sw, t_ns + 900);
        t_ns += INTERVAL_NS;
    }
    let stalled = sw.barrier().expect("both inputs reported");
    while t_ns < 14_000 {
        feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
        tick(&mut sw, t_ns + 900);
        t_ns += INTERVAL_NS;
        assert!(
            !sw.link_removed(PortId(1)) || t_ns > 14_000,
            "removed too early at {t_ns}"
        );
    }
    assert_eq!(
        sw.barrier(),
        Some(stalled),
        "a silent input holds the barrier"
    );
    // Input 0 keeps the output links alive with keep-alive beacons even while stalled.
    let out = tick(&mut sw, t_ns + 900);
    while t_ns < 17_000 {
        feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
        tick(&mut sw, t_ns + 900);
        t_ns += INTERVAL_NS;
    }
    let _ = out;
    assert!(
        sw.link_removed(PortId(1)),
        "10 silent intervals remove the link"
    );
    assert_eq!(sw.stats().links_removed, 1);
    let resumed = sw.barrier().expect("barrier");
    assert!(
        resumed > stalled,
        "the barrier resumes without the dead link"
    );
    // Input 1 comes back with an old barrier: added back, and the output does not move back.
    feed(&mut sw, t_ns, PortId(1), beacon(1, 4_000));
    assert!(!sw.link_removed(PortId(1)));
    assert_eq!(sw.stats().links_added, 1);
    assert_eq!(sw.barrier(), Some(resumed));
    feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns + 5_000));
    assert_eq!(
        sw.barrier(),
        Some(resumed),
        "suspended until the new link passes B_new"
    );
    feed(&mut sw, t_ns, PortId(1), beacon(1, t_ns + 4_000));
    assert_eq!(sw.barrier(), Some(t(t_ns + 4_000)));
}

/// §4.2: a stalled switch keeps its output links alive — an output that carried nothing during
/// an interval gets a beacon with the unchanged barrier — so the next switch does not remove a
/// healthy link because the barrier stopped moving.
#[test]
fn a_stalled_switch_sends_keep_alive_beacons_on_idle_outputs_4_2() {
    let mut cfg = switch_config(SwitchMode::Chip, 1, 2);
    cfg.link_timeout_intervals = 10;
    let mut sw = Switch::new(cfg, Some(identity_router(2)), at(0));
    feed(&mut sw, 100, PortId(0), beacon(0, 100));
    let first = beacons_sent(&tick(&mut sw, 1_000));
    assert!(first.is_empty(), "the change already went out at once");
    // No input moves: every tick re-sends the unchanged barrier on both outputs.
    for k in 2..5u64 {
        let b = beacons_sent(&tick(&mut sw, k * INTERVAL_NS));
        assert_eq!(b, vec![(PortId(0), 100), (PortId(1), 100)], "tick {k}");
        feed(&mut sw, k * INTERVAL_NS + 1, PortId(0), beacon(0, 100));
    }
}

/// §4.2: hosts detect a dead first-hop switch — silence for 10 beacon intervals — and notice
/// when it speaks again.
#[test]
fn a_host_detects_a_silent_first_hop_switch_4_2() {
    let mut h = Host::new(host_config(0, &[0], 2), at(500));
    for k in 1..=5u64 {
        feed(
            &mut h,
            k * INTERVAL_NS - 10,
            UPLINK,
            beacon(100, k * INTERVAL_NS - 100),
        );
        tick(&mut h, k * INTERVAL_NS);
    }
    assert!(h.uplink_alive());
    for k in 6..=14u64 {
        tick(&mut h, k * INTERVAL_NS);
        assert!(h.uplink_alive(), "only {} silent intervals at {k}", k - 5);
    }
    tick(&mut h, 15 * INTERVAL_NS);
    assert!(!h.uplink_alive(), "10 silent intervals");
    assert_eq!(h.stats().uplink_failures, 1);
    feed(
        &mut h,
        15 * INTERVAL_NS + 10,
        UPLINK,
        beacon(100, 14 * INTERVAL_NS),
    );
    assert!(h.uplink_alive());
}

/// §4.2: detection is a timeout on a link that was alive. A first-hop switch that has not spoken
/// yet — its synchronized beacon phase (one hop per layer above it, plus skew slack) can exceed
/// 10 intervals at start-up — is not reported dead; once it spoke, its silence counts.
#[test]
fn silence_before_the_first_hop_switch_ever_spoke_is_not_a_failure_4_2() {
    let mut h = Host::new(host_config(0, &[0], 2), at(500));
    for k in 1..=20u64 {
        tick(&mut h, k * INTERVAL_NS);
        assert!(h.uplink_alive(), "silent since start-up, at interval {k}");
    }
    assert_eq!(h.stats().uplink_failures, 0);
    feed(
        &mut h,
        20 * INTERVAL_NS + 10,
        UPLINK,
        beacon(100, 20 * INTERVAL_NS),
    );
    for k in 21..=31u64 {
        tick(&mut h, k * INTERVAL_NS);
    }
    assert!(!h.uplink_alive(), "10 silent intervals after it spoke");
}

/// §4.2 at a switch: an input that never spoke is not removed (it is starting, not dead).
#[test]
fn a_switch_input_that_never_spoke_is_not_removed_4_2() {
    let mut cfg = switch_config(SwitchMode::Chip, 2, 2);
    cfg.link_timeout_intervals = 10;
    let mut sw = Switch::new(cfg, Some(identity_router(2)), at(0));
    let mut t_ns = 100;
    while t_ns < 20 * INTERVAL_NS {
        feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
        tick(&mut sw, t_ns + 900);
        t_ns += INTERVAL_NS;
    }
    assert!(!sw.link_removed(PortId(1)));
    assert_eq!(sw.stats().links_removed, 0);
}

/// §5.2 Detect: a switch reports a silent input to the controller with its last commit barrier,
/// and the controller takes the failure timestamp from such reports — so the commit barrier
/// must not pass the reported value afterwards, even if the link speaks again (a slow host, not
/// a dead one). Its best-effort barrier is added back (§4.2); its commit barrier stays frozen
/// until the controller's Resume removes it.
#[test]
fn a_link_reported_dead_never_raises_the_commit_barrier_again_5_2() {
    let mut cfg = switch_config(SwitchMode::Chip, 2, 2);
    cfg.link_timeout_intervals = 10;
    cfg.input_links = vec![LinkId(10), LinkId(11)];
    let mut sw = Switch::new(cfg, Some(identity_router(2)), at(0));
    let mut t_ns = 100;
    while t_ns < 5_000 {
        feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
        feed(&mut sw, t_ns, PortId(1), beacon(1, t_ns));
        tick(&mut sw, t_ns + 900);
        t_ns += INTERVAL_NS;
    }
    let mut reported = None;
    while reported.is_none() {
        feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
        for o in tick(&mut sw, t_ns + 900) {
            if let Some((link, last_commit)) = link_down(&o) {
                assert_eq!(link, LinkId(11));
                reported = last_commit;
            }
        }
        t_ns += INTERVAL_NS;
        assert!(t_ns < 100_000, "never reported");
    }
    let reported = reported.expect("input 1 had a commit barrier");
    // The slow input speaks again, far ahead: best effort moves on, the commit barrier does not
    // pass what was reported.
    feed(&mut sw, t_ns, PortId(1), beacon(1, t_ns + 50_000));
    feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns + 60_000));
    assert!(!sw.link_removed(PortId(1)));
    assert_eq!(sw.barrier(), Some(t(t_ns + 50_000)));
    assert!(
        sw.commit_barrier().is_some_and(|c| c <= reported),
        "commit {:?} passed the reported {reported}",
        sw.commit_barrier()
    );
    // Resume removes it from the commit minimum: the commit barrier follows input 0 alone.
    resume(&mut sw, t_ns, vec![LinkId(11)]);
    assert_eq!(sw.commit_barrier(), Some(t(t_ns + 60_000)));
    assert!(sw.commit_input_removed(PortId(1)));
    // A Resume for links that do not enter it changes nothing, and is counted.
    resume(&mut sw, t_ns, vec![LinkId(12)]);
    assert!(!sw.commit_input_removed(PortId(0)));
}

/// §5.2 rejoin with §4.2's "addition of … links": a link the controller takes back
/// (`Admit` with `apply`) bounds the best-effort output from that moment, not only once it
/// speaks again — whether it timed out after speaking or never spoke (the uplink of a switch
/// whose only host left before its first beacon, removed by Resume). The controller hands the
/// rejoining host a floor at the largest output the switches answered, and the host's first
/// messages carry it: an output that ran on with its other inputs while the host's first
/// beacons were still on their way up would pass the floor, and those messages would arrive
/// below a barrier their receivers had passed (VOPR seed 103959: a healed core switch whose
/// link from the rejoining host's side had been silent since that host left).
#[test]
fn a_timed_out_link_taken_back_holds_the_best_effort_output_until_it_passes_it_5_2() {
    for spoke_before in [true, false] {
        let mut cfg = switch_config(SwitchMode::Chip, 2, 2);
        cfg.link_timeout_intervals = 10;
        cfg.input_links = vec![LinkId(10), LinkId(11)];
        let mut sw = Switch::new(cfg, Some(identity_router(2)), at(0));
        let mut t_ns = 100;
        // Input 1 speaks for a while (or never), then is timed out (or removed by Resume).
        while t_ns < 5_000 {
            feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
            if spoke_before {
                feed(&mut sw, t_ns, PortId(1), beacon(1, t_ns));
            }
            tick(&mut sw, t_ns + 900);
            t_ns += INTERVAL_NS;
        }
        while !sw.link_removed(PortId(1)) {
            feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
            tick(&mut sw, t_ns + 900);
            t_ns += INTERVAL_NS;
            if !spoke_before {
                resume(&mut sw, t_ns, vec![LinkId(11)]);
            }
            assert!(t_ns < 100_000, "input 1 never removed");
        }
        resume(&mut sw, t_ns, vec![LinkId(11)]);
        for _ in 0..5 {
            feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
            tick(&mut sw, t_ns + 900);
            t_ns += INTERVAL_NS;
        }
        // The rejoin takes it back: the answer's output is the floor.
        sw.handle(
            at(t_ns),
            Input::Mgmt(Mgmt::Relay(RelayMsg::Admit {
                link: LinkId(11),
                apply: true,
            })),
        );
        let floor = drain(&mut sw)
            .iter()
            .find_map(|o| match o {
                Output::Mgmt {
                    msg: Mgmt::Relay(RelayMsg::Admitted { barrier, .. }),
                    ..
                } => *barrier,
                _ => None,
            })
            .expect("answered with the output");
        assert_eq!(sw.barrier(), Some(floor));
        // Input 0 runs on while input 1's first beacon is on its way: the output holds, and the
        // link is not timed out again meanwhile.
        for _ in 0..5 {
            feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
            tick(&mut sw, t_ns + 900);
            t_ns += INTERVAL_NS;
            assert_eq!(
                sw.barrier(),
                Some(floor),
                "the output passed the floor (input 1 spoke before: {spoke_before})"
            );
        }
        assert!(
            !sw.link_removed(PortId(1)),
            "taken back, not timed out again"
        );
        // The host stamps at or above the floor: its barriers release the output.
        feed(&mut sw, t_ns, PortId(1), beacon(1, floor.raw() + 2_000));
        assert_eq!(sw.barrier(), Some(t(floor.raw() + 2_000)));
    }
}

/// The (link, last commit) of a switch's §5.2 `LinkDown` report, if `o` is one.
fn link_down(o: &Out<Switch>) -> Option<(LinkId, Option<Timestamp>)> {
    match o {
        Output::Mgmt {
            to: MgmtDest::Controller,
            msg: Mgmt::Ctrl(CtrlMsg::LinkDown {
                link, last_commit, ..
            }),
        } => Some((*link, *last_commit)),
        _ => None,
    }
}

/// The controller's §5.2 Resume for `dead_links`, handed to switch `sw`.
fn resume(sw: &mut Switch, now: u64, dead_links: Vec<LinkId>) -> Vec<Out<Switch>> {
    let msg = CtrlMsg::Resume {
        round: 1,
        dead_links,
    };
    sw.handle(at(now), Input::Mgmt(Mgmt::Ctrl(msg)));
    drain(sw)
}

fn completed_sent(outputs: &[Out<Host>]) -> Vec<u32> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Mgmt {
                to: MgmtDest::Controller,
                msg: Mgmt::Ctrl(CtrlMsg::Completed { round, .. }),
            } => Some(*round),
            _ => None,
        })
        .collect()
}

/// §5.2 with a controller that may crash and lose messages: a host re-sends `Completed` until
/// the round's `Resume` answers it, waiting twice as long each time; a duplicate Broadcast is
/// answered at once.
#[test]
fn completed_is_sent_again_until_the_round_resumes_5_2() {
    let mut h = Host::new(host_config(0, &[0], 2), at(0));
    let failure = CtrlMsg::Failure {
        round: 1,
        failed: vec![(p(1), t(50))],
        correct: vec![NodeId(0)],
    };
    assert_eq!(
        completed_sent(&control(&mut h, 100, failure.clone())),
        vec![1]
    );
    let retry = h.config().ctrl_retry_ns;
    assert_eq!(
        completed_sent(&tick(&mut h, 100 + retry - 1)),
        Vec::<u32>::new()
    );
    assert_eq!(completed_sent(&tick(&mut h, 100 + retry)), vec![1]);
    assert_eq!(
        completed_sent(&tick(&mut h, 100 + 2 * retry)),
        Vec::<u32>::new()
    );
    assert_eq!(
        completed_sent(&tick(&mut h, 100 + 3 * retry)),
        vec![1],
        "backed off"
    );
    // The controller, recovered, broadcasts again: answered at once.
    assert_eq!(
        completed_sent(&control(&mut h, 100 + 3 * retry + 10, failure)),
        vec![1]
    );
    assert_eq!(h.stats().ctrl_resent, 2);
    // Resume answers it: no more.
    control(
        &mut h,
        100 + 3 * retry + 20,
        CtrlMsg::Resume {
            round: 1,
            dead_links: vec![],
        },
    );
    for k in 4..40 {
        assert_eq!(
            completed_sent(&tick(&mut h, 100 + k * retry)),
            Vec::<u32>::new()
        );
    }
}

/// §5.2 Recall names the scatterings it aborts by (sender, timestamp): one stamped after the
/// recall never takes a recalled timestamp, even while the host's clock is behind it (stepped
/// back, its counter waiting), or receivers and recovering hosts would take it for an aborted
/// one — discarded where the Recall arrives after it, delivered elsewhere. VOPR seed 13051:
/// host 2's clock stepped back 42.6 µs, host 8 crashed, and eight all-to-all scatterings host
/// 2 sent after recalling its timestamp T were stamped T and delivered everywhere.
#[test]
fn a_scattering_sent_after_a_recall_is_stamped_above_the_recalled_ones_5_2() {
    let mut h = Host::new(host_config(0, &[0], 3), at(10_000));
    h.send_reliable(at(10_000), p(0), &[(p(1), bytes("a")), (p(2), bytes("b"))])
        .expect("room");
    let first = data_of(&sent(&drain(&mut h)));
    assert_eq!(first.len(), 2);
    let recalled = first[0].header.ts;
    assert_eq!(recalled, t(10_000));
    // The clock steps back 6 µs, and p2, which never acknowledged, is declared failed.
    let failure = CtrlMsg::Failure {
        round: 1,
        failed: vec![(p(2), t(9_000))],
        correct: vec![NodeId(0), NodeId(1)],
    };
    let out = control(&mut h, 4_000, failure);
    let recall_event = |o: &Out<Host>| matches!(o, Output::Event(HostEvent::Recalled { src, ts }) if *src == p(0) && *ts == recalled);
    assert!(out.iter().any(recall_event), "{out:?}");
    h.send_reliable(at(5_000), p(0), &[(p(1), bytes("c"))])
        .expect("room");
    let next = data_of(&sent(&drain(&mut h)));
    assert_eq!(next.len(), 1);
    assert!(
        next[0].header.ts > recalled,
        "stamped {:?}, at or below the recalled {recalled:?}",
        next[0].header.ts
    );
    assert!(h.timestamp(at(5_000)) > recalled);
}

/// §5.2 Detect with a controller that may have lost the report: a switch reports a dead input
/// again, with the same (frozen) last commit barrier, until Resume removes it.
#[test]
fn a_dead_input_is_reported_again_until_resume_5_2() {
    let mut cfg = switch_config(SwitchMode::Chip, 2, 2);
    cfg.link_timeout_intervals = 10;
    let retry = cfg.report_retry_intervals as u64;
    cfg.input_links = vec![LinkId(10), LinkId(11)];
    let mut sw = Switch::new(cfg, Some(identity_router(2)), at(0));
    let reports = |outs: Vec<Out<Switch>>| -> Vec<Option<Timestamp>> {
        outs.iter()
            .filter_map(link_down)
            .map(|(link, last_commit)| {
                assert_eq!(link, LinkId(11));
                last_commit
            })
            .collect()
    };
    let mut t_ns = 100;
    let mut seen = Vec::new();
    while t_ns < 5_000 + (10 + 2 * retry + 1) * INTERVAL_NS {
        feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
        if t_ns < 5_000 {
            feed(&mut sw, t_ns, PortId(1), beacon(1, t_ns));
        }
        seen.extend(reports(tick(&mut sw, t_ns + 900)));
        t_ns += INTERVAL_NS;
    }
    assert_eq!(seen.len(), 3, "first report and two retries: {seen:?}");
    assert!(seen.iter().all(|c| c.is_some() && *c == seen[0]));
    assert_eq!(sw.stats().reports_resent, 2);
    resume(&mut sw, t_ns, vec![LinkId(11)]);
    for _ in 0..3 * retry {
        feed(&mut sw, t_ns, PortId(0), beacon(0, t_ns));
        assert!(reports(tick(&mut sw, t_ns + 900)).is_empty());
        t_ns += INTERVAL_NS;
    }
}

/// §2.1/§4.2 under a clock step back by many beacon intervals: the host keeps beaconing on the
/// stepped clock's schedule (so its first-hop switch does not take it for dead), the barrier it
/// reports never moves back, and its timestamps stay above everything before the step.
#[test]
fn a_clock_step_back_keeps_the_host_beaconing_and_its_barrier_monotone_2_1() {
    let mut h = Host::new(host_config(0, &[0], 2), at(500));
    let mut last = 0;
    for k in 20..=30u64 {
        for (_, b) in beacons_sent(&tick(&mut h, k * INTERVAL_NS)) {
            assert!(b >= last);
            last = b;
        }
    }
    let before = h.timestamp(at(30 * INTERVAL_NS + 10));
    // The clock steps back 15 intervals. A packet from the switch arrives on the stepped clock.
    let back = 15 * INTERVAL_NS;
    feed(
        &mut h,
        30 * INTERVAL_NS + 100 - back,
        UPLINK,
        beacon(100, 1_000),
    );
    let mut sent = 0;
    for k in 31..=36u64 {
        for (_, b) in beacons_sent(&tick(&mut h, k * INTERVAL_NS - back)) {
            assert!(b >= last, "barrier moved back from {last} to {b}");
            last = b;
            sent += 1;
        }
    }
    assert!(
        sent >= 5,
        "the host fell silent after the step: {sent} beacons"
    );
    assert!(h.timestamp(at(36 * INTERVAL_NS - back)) >= before);
}

/// §2.1 causality with a clock behind the barrier (stepped back, or this host's link removed as
/// silent so its beacons no longer bound the barrier): after delivering a message, the host
/// stamps its next one above it, whatever its clock says.
#[test]
fn a_host_behind_the_barrier_stamps_above_what_it_delivered_2_1() {
    let mut h = Host::new(host_config(1, &[1], 2), at(1_000));
    feed(
        &mut h,
        1_000,
        UPLINK,
        message(0, 1, 50_000, 0, b"far ahead"),
    );
    let out = feed(&mut h, 1_010, UPLINK, beacon(100, 60_000));
    let delivered: Vec<u64> = out
        .iter()
        .filter_map(|o| match o {
            Output::Event(HostEvent::Deliver(d)) => Some(d.ts.raw()),
            _ => None,
        })
        .collect();
    assert_eq!(delivered, vec![50_000]);
    assert!(
        h.timestamp(at(1_020)) > t(50_000),
        "stamped below a delivered message"
    );
}

/// §5.2 Receiver Recovery at a host: told it failed while cut off (its switch silent for an
/// interval), it freezes reliable delivery (a commit barrier heard afterwards releases
/// nothing); when it hears its switch again it asks the controller, and the answer settles its
/// buffer — delivered in timestamp order except what the correct receivers discard: messages
/// of a failed sender at or above its failure timestamp, and recalled scatterings. Then it
/// asks to rejoin.
#[test]
fn a_host_told_it_failed_freezes_then_settles_its_buffer_as_the_controller_says_5_2() {
    let mut h = Host::new(host_config(0, &[0, 1], 8), at(1_000));
    let rel = flags::END_OF_MESSAGE | flags::RELIABLE;
    for (src, ts, psn) in [(2, 100, 0), (3, 110, 0), (4, 120, 0), (2, 130, 1)] {
        let out = feed(
            &mut h,
            1_000,
            UPLINK,
            fragment(src, 0, ts, psn, 0, rel, b"m"),
        );
        assert!(deliveries(&out).is_empty());
    }
    // Not failed yet: a commit barrier releases what is below it.
    let out = feed(&mut h, 1_100, UPLINK, beacon(9, 105));
    assert_eq!(summary(&deliveries(&out)), vec![(100, 2, bytes("m"))]);
    // Cut off: a beacon interval passes without a word from the switch.
    tick(&mut h, 2 * INTERVAL_NS);
    tick(&mut h, 3 * INTERVAL_NS);
    let out = relay(&mut h, 3_100, RelayMsg::Failed { ts: t(90) });
    assert!(relays(&out).is_empty(), "it does not hear its switch yet");
    assert_eq!(
        h.send(at(3_150), p(1), &[(p(2), bytes("x"))]),
        Err(onepipe_proto::host::SendError::Failed(p(1))),
        "a failed host sends nothing more, best effort included"
    );
    // Frozen: this barrier passes everything buffered, and releases none of it. Hearing its
    // switch again, the host asks to recover.
    let out = feed(&mut h, 3_300, UPLINK, beacon(9, 1_000));
    assert!(deliveries(&out).is_empty());
    assert_eq!(
        relays(&out),
        vec![(
            MgmtDest::Controller,
            RelayMsg::RecoverRequest { host: NodeId(0) }
        )]
    );
    h.handle(at(3_450), Input::Notice(Notice::LinkUp));
    assert!(relays(&drain(&mut h)).is_empty(), "asked once");
    let out = relay(
        &mut h,
        3_500,
        RelayMsg::Settle {
            failed: vec![(p(0), t(90)), (p(1), t(90)), (p(3), t(105))],
            recalled: vec![(p(4), t(120))],
        },
    );
    let got = deliveries(&out);
    assert_eq!(summary(&got), vec![(130, 2, bytes("m"))]);
    assert!(got
        .iter()
        .all(|d| d.reliable && d.ts < d.barrier && d.ts < d.now_ts));
    assert!(h.settled());
    assert_eq!(
        (
            h.stats().recovered,
            h.stats().settled_delivered,
            h.stats().settled_discarded
        ),
        (1, 1, 2)
    );
    // It asks to rejoin from its next timer, due at once: after the deliveries above, which
    // a driver runs first (admitted while still delivering, it would be timed out again).
    assert!(relays(&out).is_empty(), "not ahead of its deliveries");
    assert_eq!(h.poll_timeout(), Some(at(3_500)));
    assert_eq!(
        relays(&tick(&mut h, 3_500)),
        vec![(MgmtDest::Controller, RelayMsg::Rejoin { host: NodeId(0) })],
        "settled, it asks to rejoin as a new process"
    );
    // Settled once; later data is not buffered.
    relay(
        &mut h,
        3_600,
        RelayMsg::Settle {
            failed: vec![],
            recalled: vec![],
        },
    );
    let out = feed(&mut h, 3_700, UPLINK, fragment(2, 0, 140, 2, 0, rel, b"m"));
    assert!(deliveries(&out).is_empty() && deliveries(&drain(&mut h)).is_empty());
}

/// §5.2 "After delivering buffered messages, the recovered process needs to join 1Pipe as a new
/// process": a settled host that the controller answers `Joined` starts over as the new
/// processes — fresh ids, fresh buffers and sequence spaces — stamping at or above the floor,
/// refusing to send to processes declared failed (its own old ones included) and sending as
/// its old ids no more; it receives and delivers for its new processes in total order.
#[test]
fn a_settled_host_rejoins_as_new_processes_above_the_floor_5_2() {
    let mut h = Host::new(host_config(0, &[0, 1], 8), at(1_000));
    feed(&mut h, 1_000, UPLINK, beacon(9, 500));
    let out = relay(&mut h, 1_100, RelayMsg::Failed { ts: t(90) });
    assert!(matches!(
        relays(&out)[..],
        [(_, RelayMsg::RecoverRequest { .. })]
    ));
    // Not settled: a `Joined` now is garbage.
    let joined = |floor: u64| RelayMsg::Joined {
        procs: vec![p(5), p(6)],
        floor: t(floor),
        failed: vec![(p(0), t(90)), (p(1), t(90)), (p(3), t(200))],
    };
    relay(&mut h, 1_150, joined(50_000));
    assert_eq!(h.config().procs, vec![p(0), p(1)]);
    let out = relay(
        &mut h,
        1_200,
        RelayMsg::Settle {
            failed: vec![(p(0), t(90)), (p(1), t(90))],
            recalled: vec![],
        },
    );
    assert!(relays(&out).is_empty(), "it asks from its next timer");
    let out = tick(&mut h, 1_200);
    assert!(matches!(relays(&out)[..], [(_, RelayMsg::Rejoin { .. })]));
    // Unanswered, it asks again.
    let out = tick(&mut h, 60_000);
    assert!(matches!(relays(&out)[..], [(_, RelayMsg::Rejoin { .. })]));
    relay(&mut h, 61_000, joined(80_000));
    assert_eq!(h.config().procs, vec![p(5), p(6)]);
    assert_eq!(h.stats().rejoined, 1);
    assert!(h.own_failure().is_none() && !h.settled());
    assert!(
        h.timestamp(at(61_100)) >= t(80_000),
        "stamps at or above the floor"
    );
    assert_eq!(
        h.send(at(61_200), p(0), &[(p(2), bytes("x"))]),
        Err(onepipe_proto::host::SendError::NotLocal(p(0)))
    );
    assert_eq!(
        h.send_reliable(at(61_200), p(5), &[(p(3), bytes("x"))]),
        Err(onepipe_proto::host::SendError::Failed(p(3)))
    );
    let ts = h.send(at(61_300), p(5), &[(p(2), bytes("hi"))]).unwrap();
    assert!(ts >= t(80_000));
    // Messages to the new processes are delivered in order below the barrier.
    feed(&mut h, 61_400, UPLINK, message(2, 6, 81_000, 0, b"a"));
    feed(&mut h, 61_400, UPLINK, message(4, 6, 80_500, 0, b"b"));
    let out = feed(&mut h, 61_500, UPLINK, beacon(9, 82_000));
    assert_eq!(
        summary(&deliveries(&out)),
        vec![(80_500, 4, bytes("b")), (81_000, 2, bytes("a"))]
    );
    // No more asking.
    assert!(relays(&tick(&mut h, 2_000_000)).is_empty());
}

/// §5.2 "resumes delivery after all non-fail processes finish their callback functions": with
/// `callbacks_held`, a host raises the callbacks of a round and reports it `Completed` only
/// once the application said they are done (`Host::complete_callbacks`); a duplicate Broadcast
/// meanwhile does not complete it, and completing twice changes nothing.
#[test]
fn a_round_completes_only_once_the_callbacks_are_done_5_2() {
    let mut cfg = host_config(0, &[0], 3);
    cfg.callbacks_held = true;
    let mut h = Host::new(cfg, at(0));
    let failure = CtrlMsg::Failure {
        round: 4,
        failed: vec![(p(1), t(50)), (p(2), t(50))],
        correct: vec![NodeId(0)],
    };
    let out = control(&mut h, 100, failure.clone());
    let raised: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Output::Event(e @ HostEvent::ProcFailed { .. }) => Some(e.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        raised,
        vec![
            HostEvent::ProcFailed {
                proc: p(1),
                ts: t(50),
                round: 4
            },
            HostEvent::ProcFailed {
                proc: p(2),
                ts: t(50),
                round: 4
            },
        ]
    );
    assert!(completed_sent(&out).is_empty(), "callbacks still running");
    assert_eq!(h.callbacks_waiting(), 1);
    assert!(completed_sent(&control(&mut h, 200, failure)).is_empty());
    h.complete_callbacks(at(300), 4);
    assert_eq!(completed_sent(&drain(&mut h)), vec![4]);
    h.complete_callbacks(at(310), 4);
    assert!(completed_sent(&drain(&mut h)).is_empty());
    assert_eq!(h.callbacks_waiting(), 0);
}
