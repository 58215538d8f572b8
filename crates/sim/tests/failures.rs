//! Scripted failure scenarios for reliable 1Pipe (§5.2): a host crash, a host-link cut, a ToR
//! switch, a core switch and a core link, each under all-to-all reliable traffic on a k=4 fat
//! tree. Every run must pass every checker (restricted failure atomicity, nothing above a
//! failure timestamp, reliable-loss for the correct receivers) and drain, with the controller
//! declaring exactly the disconnected hosts. A failure prints the seed.

use onepipe_sim::{
    run, FaultConfig, NetworkConfig, Service, SimConfig, TopologySpec, WorkloadConfig, WorkloadKind,
};

fn cfg(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        net: NetworkConfig {
            topology: TopologySpec::FatTree { k: 4 },
            procs_per_host: 2,
            ..Default::default()
        },
        workload: WorkloadConfig {
            service: Service::Reliable,
            workload: WorkloadKind::AllToAll,
            rate_per_proc: 50_000.0,
            duration_ns: 1_500_000,
            ..Default::default()
        },
        ..SimConfig::default()
    }
}

/// Runs `cfg` and checks it; returns the hosts declared failed, sorted.
fn run_ok(cfg: &SimConfig) -> (Vec<u32>, onepipe_sim::Report) {
    let r = run(cfg, &mut |_| {}).expect("valid configuration");
    assert_eq!(
        r.violations, 0,
        "seed {}: {:#?}",
        cfg.seed, r.violation_samples
    );
    assert!(
        r.drained,
        "seed {}: did not drain ({} left)",
        cfg.seed, r.undrained
    );
    assert_eq!(r.undelivered_reliable, 0, "seed {}", cfg.seed);
    assert!(
        r.failure_rounds.iter().all(|f| f.resumed_ns.is_some()),
        "seed {}: a round never resumed: {:?}",
        cfg.seed,
        r.failure_rounds
    );
    let mut hosts: Vec<u32> = r
        .failure_rounds
        .iter()
        .flat_map(|f| f.hosts.iter().map(|h| h.0))
        .collect();
    hosts.sort_unstable();
    (hosts, r)
}

#[test]
fn a_crashed_host_is_failed_recalled_and_the_rest_resume_5_2() {
    for seed in 1..=4 {
        let mut c = cfg(seed);
        c.faults.crashes = vec![(5, 700_000)];
        let (hosts, r) = run_ok(&c);
        assert_eq!(hosts, vec![5], "seed {seed}");
        assert!(r.recalled > 0, "seed {seed}: nothing was recalled");
        // Every correct host hears of both failed processes (one callback per failed process
        // per host).
        assert_eq!(r.proc_failed_callbacks, 15 * 2, "seed {seed}");
        assert!(r.stall_ns_reliable > 0.0);
    }
}

#[test]
fn a_cut_host_link_fails_the_host_5_2() {
    for seed in 1..=3 {
        let mut c = cfg(seed);
        c.faults.cuts = vec![("host-9".into(), 600_000)];
        let (hosts, _) = run_ok(&c);
        assert_eq!(hosts, vec![9], "seed {seed}");
    }
}

#[test]
fn a_tor_failure_fails_its_single_homed_rack_5_2() {
    for seed in 1..=3 {
        let mut c = cfg(seed);
        c.faults.cuts = vec![("tor-3".into(), 800_000)];
        let (hosts, _) = run_ok(&c);
        assert_eq!(hosts, vec![6, 7], "seed {seed}");
    }
}

#[test]
fn core_switch_and_link_failures_fail_nobody_and_traffic_routes_around_5_2() {
    for (seed, cut) in [
        (1, "core-0"),
        (2, "agg-1/core-2"),
        (3, "agg-2"),
        (4, "tor-0/agg-1"),
    ] {
        let mut c = cfg(seed);
        c.faults.cuts = vec![(cut.into(), 500_000)];
        let (hosts, r) = run_ok(&c);
        assert!(hosts.is_empty(), "seed {seed} {cut}: {hosts:?}");
        assert!(!r.failure_rounds.is_empty(), "seed {seed} {cut}: no round");
        assert_eq!(r.recalled, 0, "seed {seed} {cut}");
    }
}

#[test]
fn a_mixed_service_run_survives_a_crash_in_both_services() {
    let mut c = cfg(7);
    c.workload.service = Service::Mixed;
    c.faults.crashes = vec![(2, 900_000)];
    let (hosts, _) = run_ok(&c);
    assert_eq!(hosts, vec![2]);
}

#[test]
fn the_same_failure_replays_to_the_same_trace() {
    let mut c = cfg(11);
    c.faults.crashes = vec![(4, 700_000)];
    let a = run(&c, &mut |_| {}).unwrap();
    let b = run(&c, &mut |_| {}).unwrap();
    assert_eq!(a.trace_hash, b.trace_hash, "seed {}", c.seed);
}

/// §5.2 with the controller crashing in the middle of a round: the Broadcast has gone out, and
/// the hosts' `Completed` reach a controller that is down and are lost. It recovers with its
/// state (§6.1: a highly available store), broadcasts the open round again, the hosts answer,
/// and the round resumes — late, but consistently.
#[test]
fn a_controller_crash_in_the_middle_of_a_round_still_resumes_it_5_2() {
    for seed in 1..=3 {
        let mut c = cfg(seed);
        c.faults.crashes = vec![(5, 700_000)];
        c.faults.controller_down = vec![(745_000, 900_000)];
        let (hosts, r) = run_ok(&c);
        assert_eq!(hosts, vec![5], "seed {seed}");
        assert!(
            r.ctrl_lost > 0,
            "seed {seed}: nothing reached the down controller"
        );
        let round = &r.failure_rounds[0];
        assert!(round.declared_ns < 745_000, "seed {seed}: {round:?}");
        assert!(
            round.resumed_ns.is_some_and(|t| t >= 900_000),
            "seed {seed}: {round:?}"
        );
    }
}

/// §5.2 Detect with the controller down when the failure is detected: the reports are lost,
/// switches send them again until a Resume answers, and the round runs after recovery.
#[test]
fn failure_reports_lost_to_a_down_controller_are_sent_again_5_2() {
    for seed in 1..=3 {
        let mut c = cfg(seed);
        c.faults.crashes = vec![(5, 700_000)];
        c.faults.controller_down = vec![(720_000, 800_000)];
        let (hosts, r) = run_ok(&c);
        assert_eq!(hosts, vec![5], "seed {seed}");
        assert!(r.ctrl_lost > 0 && r.ctrl_resent > 0, "seed {seed}");
        assert!(r.failure_rounds[0].declared_ns > 800_000, "seed {seed}");
    }
}

/// §2.1 under clock steps: hosts' clocks jump forward and back by tens of µs mid-run, with a
/// crash and the reliable and best-effort services mixed. Timestamps stay non-decreasing per
/// host (the `causality` checker: every timestamp a host issues is above what it delivered),
/// every order and atomicity checker passes, the run drains, and it replays exactly.
#[test]
fn clock_steps_forward_and_back_keep_order_causality_and_atomicity_2_1() {
    for seed in 1..=3 {
        let mut c = cfg(seed);
        c.workload.service = onepipe_sim::Service::Mixed;
        c.faults.crashes = vec![(2, 900_000)];
        c.faults.clock_steps = vec![
            (3, 400_000, 40_000),
            (7, 500_000, -30_000),
            (3, 800_000, -45_000),
            (12, 1_000_000, 5_000),
        ];
        let (hosts, r) = run_ok(&c);
        assert_eq!(hosts, vec![2], "seed {seed}");
        assert!(r.checked_deliveries > 10_000, "seed {seed}");
        let again = run(&c, &mut |_| {}).unwrap();
        assert_eq!(r.trace_hash, again.trace_hash, "seed {seed}");
        c.faults.clock_steps.clear();
        let unstepped = run(&c, &mut |_| {}).unwrap();
        assert_ne!(
            r.trace_hash, unstepped.trace_hash,
            "seed {seed}: the steps did nothing"
        );
    }
}

/// §5.2 "Controller Forwarding": the route from host 1 to host 9 black-holes (their data and
/// ACKs vanish at host 1's ToR; no link falls silent, so nothing is reported and nobody fails).
/// Reliable delivery stalls until the senders hand their retransmissions to the controller,
/// which relays them over the management network and relays the ACKs back: every checker
/// passes, everything is delivered, nobody is declared failed. Without forwarding the same run
/// cannot drain.
#[test]
fn a_black_holed_route_is_bridged_by_controller_forwarding_5_2() {
    for seed in 1..=2 {
        let mut c = cfg(seed);
        c.faults.blackholes = vec![(1, 9, 500_000)];
        let (hosts, r) = run_ok(&c);
        assert!(hosts.is_empty(), "seed {seed}: {hosts:?}");
        assert!(r.packets_blackholed > 0, "seed {seed}: nothing black-holed");
        assert!(r.forwarded > 0, "seed {seed}: nothing forwarded");
        c.protocol.forward_after = 0;
        let r = run(&c, &mut |_| {}).unwrap();
        assert!(
            !r.drained || r.violations > 0 || r.undelivered_reliable > 0,
            "seed {seed}: drained without forwarding"
        );
    }
}

/// §5.2 Receiver Recovery: host 9's link is cut at 600 µs, the controller declares it failed
/// (it freezes its reliable delivery), and the link heals at 1 ms. The host then asks the
/// controller for the failure notifications and the undeliverable recalls, and settles its
/// buffer: the checker requires each of its processes to have delivered exactly the reliable
/// messages to it that are not aborted and that a correct destination delivered. Its buffer
/// holds messages it must not deliver — its own processes' at or above its failure timestamp,
/// and scatterings recalled because its acknowledgement never got out — so settling by
/// delivering the whole buffer fails this test.
#[test]
fn a_healed_host_recovers_and_delivers_consistently_with_the_correct_receivers_5_2() {
    for seed in 1..=3 {
        let mut c = cfg(seed);
        c.faults.cuts = vec![("host-9".into(), 600_000)];
        c.faults.heals = vec![("host-9".into(), 1_000_000)];
        let (hosts, r) = run_ok(&c);
        assert_eq!(hosts, vec![9], "seed {seed}");
        assert_eq!(r.recovered, 1, "seed {seed}: host 9 did not recover");
        assert!(
            r.settled_delivered > 0 && r.settled_discarded > 0,
            "seed {seed}: settled {} delivered, {} discarded: the test no longer tells a settle \
             that delivers its whole buffer from a correct one",
            r.settled_delivered,
            r.settled_discarded
        );
    }
}

#[test]
fn a_heal_of_something_never_cut_or_before_its_cut_is_refused() {
    let mut c = cfg(1);
    c.faults.cuts = vec![("tor-3".into(), 600_000)];
    c.faults.heals = vec![("tor-2".into(), 1_000_000)];
    assert!(run(&c, &mut |_| {}).is_err());
    c.faults.cuts = vec![("host-9".into(), 600_000)];
    c.faults.heals = vec![("host-9".into(), 500_000)];
    assert!(run(&c, &mut |_| {}).is_err());
}

/// §5.2 Receiver Recovery among other failures, both services: host 14 is cut at 300 µs and
/// heals at 1.4 ms while host 5 crashes at 400 µs (a failed sender the recovered host must
/// discard above its failure timestamp). Seed 9 once had host 14 send best-effort messages
/// after the heal into a network that no longer waited for it (late drops below every
/// barrier): a host told it failed sends nothing more.
#[test]
fn a_healed_host_recovers_among_other_failures_in_both_services_5_2() {
    for seed in [9, 2] {
        let mut c = cfg(seed);
        c.workload.service = Service::Mixed;
        c.faults.cuts = vec![("host-14".into(), 300_000)];
        c.faults.heals = vec![("host-14".into(), 1_400_000)];
        c.faults.crashes = vec![(5, 400_000)];
        let (hosts, r) = run_ok(&c);
        assert_eq!(hosts, vec![5, 14], "seed {seed}");
        assert_eq!(r.recovered, 1, "seed {seed}");
    }
}

/// §5.2 Receiver Recovery with the controller down while the correct hosts recall (640–660 µs,
/// host 9 declared at ≈ 639 µs): the recall reports sent meanwhile are lost, and the recovered
/// host would deliver recalled messages. Hosts report their recalls again with every
/// `Completed`, so the controller has them all before it resumes the round and answers.
#[test]
fn recall_reports_lost_to_a_down_controller_reach_it_before_recovery_5_2() {
    for seed in 1..=3 {
        let mut c = cfg(seed);
        c.faults.cuts = vec![("host-9".into(), 600_000)];
        c.faults.heals = vec![("host-9".into(), 1_000_000)];
        c.faults.controller_down = vec![(640_000, 660_000)];
        let (hosts, r) = run_ok(&c);
        assert_eq!(hosts, vec![9], "seed {seed}");
        assert_eq!(r.recovered, 1, "seed {seed}");
    }
}

/// §5.2 Determine: correct hosts must reach one another both ways, and a failure timestamp
/// needs a cut — VOPR seed 1806, made deterministic. With `agg-0` failed, pod 0 reaches
/// `tor-3` only through `agg-3`; then `agg-3-down → tor-3-down` falls silent for 40 µs (one
/// direction only; in seed 1806 a run of beacon losses), long enough for `tor-3-down` to report
/// it. Pod 0 and `tor-3`'s hosts each still reach pod 2, but not each other. The controller used
/// to count everyone correct and resume, removing the link from `tor-3-down`'s commit minimum
/// while pod 0's unacknowledged messages to `tor-3` were in flight: `tor-3`'s hosts delivered
/// past them and dropped every copy (reliable-loss; the run never drains). Now the smaller side
/// — hosts 6 and 7 — is declared failed. Their commit barriers still reach pods 1–3 over live
/// links, so no report bounds what those receivers deliver of them: a failure timestamp taken
/// from `tor-3-down`'s report lies below messages of theirs that pods 2 and 3 delivered
/// (`failure-atomicity`). Their ToR isolates their uplinks on the controller's request
/// (`CtrlMsg::Isolate`) and the failure timestamps come from there. They hear their switch, so
/// they recover at once and, once the link is back, rejoin as new processes.
#[test]
fn correct_hosts_reach_one_another_and_a_failed_host_s_live_uplink_is_isolated_5_2() {
    for seed in 1..=3 {
        let mut c = cfg(seed);
        c.net.switch_mode = onepipe_proto::switch::SwitchMode::Cpu;
        c.faults.cuts = vec![("agg-0".into(), 400_000), ("agg-3>tor-3".into(), 800_000)];
        c.faults.heals = vec![("agg-3>tor-3".into(), 840_000)];
        let (hosts, r) = run_ok(&c);
        assert_eq!(hosts, vec![6, 7], "seed {seed}");
        assert!(r.recalled > 0, "seed {seed}: nothing was recalled");
        assert_eq!(r.rejoined, 2, "seed {seed}: hosts 6 and 7 did not rejoin");
    }
}

/// §5.2 Receiver Recovery, to the end: "After delivering buffered messages, the recovered
/// process needs to join 1Pipe as a new process." Host 9 is cut at 600 µs and declared failed;
/// its link heals at 900 µs; it settles its buffer, then rejoins: the controller asks the
/// switches which links are alive again, its ToR takes its uplink back (§4.2: the output waits
/// until the new link passes it), and its two processes come back as fresh ids (32 and 33)
/// whose timestamps start above every barrier a receiver may have passed. Traffic goes on to
/// and from the new processes, in total order with everyone else, in both services; every
/// checker passes (the old ids are failed processes, the new ones fresh), and the run replays
/// to the same trace.
#[test]
fn a_healed_host_rejoins_as_new_processes_and_sends_and_receives_in_total_order_5_2() {
    for (seed, service) in [
        (1, Service::Reliable),
        (2, Service::Mixed),
        (3, Service::Reliable),
    ] {
        let mut c = cfg(seed);
        c.workload.service = service;
        c.workload.duration_ns = 2_000_000;
        c.faults.cuts = vec![("host-9".into(), 600_000)];
        c.faults.heals = vec![("host-9".into(), 900_000)];
        let (hosts, r) = run_ok(&c);
        assert_eq!(hosts, vec![9], "seed {seed}");
        assert_eq!((r.recovered, r.rejoined), (1, 1), "seed {seed}");
        assert!(
            r.rejoined_delivered_to > 1_000 && r.rejoined_delivered_from > 1_000,
            "seed {seed}: to the new processes {}, from them {}",
            r.rejoined_delivered_to,
            r.rejoined_delivered_from
        );
        let again = run(&c, &mut |_| {}).unwrap();
        assert_eq!(r.trace_hash, again.trace_hash, "seed {seed}");
    }
}
/// §4.2 with §5.2: a long round (the controller down from 640 µs to 1.4 ms) holds every commit
/// barrier while four processes per host keep sending; its Resume releases thousands of
/// buffered reliable messages at each host at once. Delivered in one input they kept a host
/// from its beacons for longer than the link timeout, its switch took it for dead, and live
/// hosts were declared failed one after another (VOPR seed 442 at `0cd1881`: seven hosts, and
/// best-effort messages they sent before hearing it arrived late — `lower-bound`). A host now
/// delivers at most `deliver_burst_max` per input and continues at once, beacons between; only
/// host 9, cut off, fails. Without the limit the same run declares live hosts failed.
#[test]
fn a_commit_barrier_jump_after_a_long_round_does_not_starve_beacons_4_2_5_2() {
    let mut c = cfg(1);
    c.net.procs_per_host = 4;
    c.protocol.send_buffer_bytes = 256 << 10;
    c.workload.rate_per_proc = 100_000.0;
    c.workload.duration_ns = 2_000_000;
    c.faults.cuts = vec![("host-9".into(), 600_000)];
    c.faults.controller_down = vec![(640_000, 1_400_000)];
    let (hosts, _) = run_ok(&c);
    assert_eq!(hosts, vec![9]);
    c.protocol.deliver_burst_max = 0;
    let r = run(&c, &mut |_| {}).unwrap();
    let declared: usize = r.failure_rounds.iter().map(|f| f.hosts.len()).sum();
    assert!(
        declared > 1,
        "without the limit only host 9 failed: the test no longer starves anyone"
    );
}

/// A crashed host restarts with its state lost (`--restart-host`), before or after the
/// controller declares it: it says nothing on the data network until it hears it was declared
/// (so its switch times its link out and its old processes fail at the last commit barrier
/// they sent), settles an empty buffer and rejoins as new processes, which then send and
/// receive in total order. Its old processes lost what they had acknowledged — "if R fails
/// permanently, atomicity is violated" for them — and are checked as crashed ones; every
/// checker passes.
#[test]
fn a_crashed_host_restarts_empty_and_rejoins_as_new_processes_5_2() {
    for (seed, restart) in [(1, 800_000), (2, 610_000), (3, 1_200_000)] {
        let mut c = cfg(seed);
        c.workload.service = Service::Mixed;
        c.workload.duration_ns = 2_000_000;
        c.faults.crashes = vec![(5, 600_000)];
        c.faults.restarts = vec![(5, restart)];
        let (hosts, r) = run_ok(&c);
        assert_eq!(hosts, vec![5], "seed {seed}");
        assert_eq!((r.restarts, r.rejoined), (1, 1), "seed {seed}");
        assert_eq!(r.settled_delivered, 0, "seed {seed}: its buffer was lost");
        assert!(
            r.rejoined_delivered_to > 1_000 && r.rejoined_delivered_from > 1_000,
            "seed {seed}: to {}, from {}",
            r.rejoined_delivered_to,
            r.rejoined_delivered_from
        );
    }
}

/// Issue 35: the two-process wedge and its relatives. One host leaves gracefully — before any
/// traffic (at 0, before its first beacon reaches its switch) or mid-run — on every size from
/// 2 to 4 hosts, one layer (a rack) and two (racks of 1 and 2 under one spine), on both
/// services: the controller takes it out without a link timeout (exactly it),
/// every run drains and passes every checker, and the survivors keep delivering after it.
#[test]
fn a_host_that_leaves_is_taken_out_at_every_size_before_and_after_traffic() {
    let mut runs = 0;
    for hosts in 2..=4u32 {
        let topologies = [
            TopologySpec::Rack { hosts },
            TopologySpec::LeafSpine {
                hosts,
                rack_size: 1,
                spines: 1,
            },
            TopologySpec::LeafSpine {
                hosts,
                rack_size: 2,
                spines: 1,
            },
        ];
        for topology in topologies {
            for leave_at in [0, 400_000] {
                for service in [Service::Reliable, Service::BestEffort] {
                    let seed = 100 + runs;
                    let c = SimConfig {
                        seed,
                        net: NetworkConfig {
                            topology,
                            procs_per_host: 1,
                            ..Default::default()
                        },
                        faults: FaultConfig {
                            leaves: vec![(hosts - 1, leave_at)],
                            ..Default::default()
                        },
                        workload: WorkloadConfig {
                            service,
                            workload: WorkloadKind::AllToAll,
                            rate_per_proc: 50_000.0,
                            duration_ns: 1_000_000,
                            ..Default::default()
                        },
                        ..SimConfig::default()
                    };
                    let what = format!("seed {seed}: {topology:?} leave at {leave_at} {service:?}");
                    let (declared, r) = run_ok(&c);
                    assert_eq!(declared, vec![hosts - 1], "{what}");
                    // Declared without waiting for a link timeout (10 beacon intervals of
                    // 3 µs): a few management-network hops after the leave. (A switch left
                    // without hosts falls silent afterwards, and its links' timeouts may
                    // bring a later round that declares nobody.)
                    let first = &r.failure_rounds[0];
                    assert_eq!(first.hosts.len(), 1, "{what}");
                    let &[(h, departed)] = r.departed.as_slice() else {
                        panic!("{what}: departed {:?}", r.departed)
                    };
                    assert_eq!(h, hosts - 1, "{what}");
                    assert!(departed >= leave_at, "{what}");
                    assert!(first.declared_ns < departed + 20_000, "{what}: {first:?}");
                    // Survivors deliver what they sent after the leave: well over what one
                    // host sends before 400 µs.
                    assert!(
                        r.delivered > 20 * u64::from(hosts - 1),
                        "{what}: {}",
                        r.delivered
                    );
                    runs += 1;
                }
            }
        }
    }
    assert_eq!(runs, 36);
}
