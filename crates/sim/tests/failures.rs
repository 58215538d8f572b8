//! Scripted failure scenarios for reliable 1Pipe (§5.2): a host crash, a host-link cut, a ToR
//! switch, a core switch and a core link, each under all-to-all reliable traffic on a k=4 fat
//! tree. Every run must pass every checker (restricted failure atomicity, nothing above a
//! failure timestamp, reliable-loss for the correct receivers) and drain, with the controller
//! declaring exactly the disconnected hosts. A failure prints the seed.

use onepipe_sim::{run, Service, SimConfig, TopologySpec, WorkloadKind};

fn cfg(seed: u64) -> SimConfig {
    SimConfig {
        topology: TopologySpec::FatTree { k: 4 },
        procs_per_host: 2,
        service: Service::Reliable,
        workload: WorkloadKind::AllToAll,
        rate_per_proc: 50_000.0,
        duration_ns: 1_500_000,
        seed,
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
        c.crashes = vec![(5, 700_000)];
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
        c.cuts = vec![("host-9".into(), 600_000)];
        let (hosts, _) = run_ok(&c);
        assert_eq!(hosts, vec![9], "seed {seed}");
    }
}

#[test]
fn a_tor_failure_fails_its_single_homed_rack_5_2() {
    for seed in 1..=3 {
        let mut c = cfg(seed);
        c.cuts = vec![("tor-3".into(), 800_000)];
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
        c.cuts = vec![(cut.into(), 500_000)];
        let (hosts, r) = run_ok(&c);
        assert!(hosts.is_empty(), "seed {seed} {cut}: {hosts:?}");
        assert!(!r.failure_rounds.is_empty(), "seed {seed} {cut}: no round");
        assert_eq!(r.recalled, 0, "seed {seed} {cut}");
    }
}

#[test]
fn a_mixed_service_run_survives_a_crash_in_both_services() {
    let mut c = cfg(7);
    c.service = Service::Mixed;
    c.crashes = vec![(2, 900_000)];
    let (hosts, _) = run_ok(&c);
    assert_eq!(hosts, vec![2]);
}

#[test]
fn the_same_failure_replays_to_the_same_trace() {
    let mut c = cfg(11);
    c.crashes = vec![(4, 700_000)];
    let a = run(&c, &mut |_| {}).unwrap();
    let b = run(&c, &mut |_| {}).unwrap();
    assert_eq!(a.trace_hash, b.trace_hash, "seed {}", c.seed);
}
