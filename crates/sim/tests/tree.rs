//! The tree fabric (`--fabric tree`): the simulator running the live runtime's aggregator role
//! (`onepipe_proto::aggregator::Aggregator`) on a tree laid out as `onepipe up --layers` lays
//! out a local cluster. Clean best-effort and reliable runs deliver everything; a crashed host
//! is declared by §5.2 from the aggregators' reports and the survivors pass every checker; a
//! lossy run passes; one seed is one trace. A failure prints the seed.

use onepipe_proto::switch::SwitchMode;
use onepipe_sim::{
    run, Fabric, NetworkConfig, Service, SimConfig, TopologySpec, WorkloadConfig, WorkloadKind,
};

/// All-to-all traffic on `hosts` hosts in racks of 4 under `layers` layers of aggregators.
fn cfg(seed: u64, layers: u8, service: Service) -> SimConfig {
    SimConfig {
        seed,
        net: NetworkConfig {
            topology: TopologySpec::LeafSpine {
                hosts: 8,
                rack_size: 2,
                spines: 1,
            },
            fabric: Fabric::Tree { layers },
            ..Default::default()
        },
        workload: WorkloadConfig {
            service,
            workload: WorkloadKind::AllToAll,
            rate_per_proc: 50_000.0,
            duration_ns: 1_500_000,
            ..Default::default()
        },
        ..SimConfig::default()
    }
}

/// Runs `cfg`; it must pass every checker, check something, and drain.
fn run_ok(cfg: &SimConfig) -> onepipe_sim::Report {
    let r = run(cfg, &mut |_| {}).expect("valid configuration");
    assert_eq!(
        r.violations, 0,
        "seed {}: {:#?}",
        cfg.seed, r.violation_samples
    );
    assert!(r.checked && r.checked_deliveries > 0, "seed {}", cfg.seed);
    assert!(
        r.drained,
        "seed {}: did not drain ({} left)",
        cfg.seed, r.undrained
    );
    r
}

#[test]
fn a_clean_tree_delivers_every_message_best_effort_and_reliable() {
    for layers in [1, 2, 3] {
        let r = run_ok(&cfg(1, layers, Service::BestEffort));
        assert!(r.sent > 0, "{layers} layers");
        assert_eq!(r.delivered, r.sent, "{layers} layers: best effort, no loss");
        assert!(r.topology.contains("tree"), "{}", r.topology);
    }
    let r = run_ok(&cfg(2, 2, Service::Reliable));
    assert_eq!(r.delivered_reliable, r.sent);
    assert_eq!(r.undelivered_reliable, 0);
    assert!(r.failure_rounds.is_empty(), "{:?}", r.failure_rounds);
}

#[test]
fn a_crashed_host_is_declared_from_the_aggregators_reports_and_the_rest_resume_5_2() {
    for seed in 1..=2 {
        let mut c = cfg(seed, 2, Service::Reliable);
        c.faults.crashes = vec![(3, 700_000)];
        let r = run_ok(&c);
        let hosts: Vec<u32> = r
            .failure_rounds
            .iter()
            .flat_map(|f| f.hosts.iter().map(|h| h.0))
            .collect();
        assert_eq!(hosts, [3], "seed {seed}");
        assert!(
            r.failure_rounds.iter().all(|f| f.resumed_ns.is_some()),
            "seed {seed}: {:?}",
            r.failure_rounds
        );
        assert_eq!(r.undelivered_reliable, 0, "seed {seed}");
    }
}

/// A host that left and restarts rejoins as new processes (§5.2 rejoin): the controller's
/// `Admit` reaches each half of the path it names (VOPR `--tree` seed 2045), and the rejoined
/// host's link cut later is a failure like any other.
#[test]
fn a_host_that_left_rejoins_through_both_halves_and_fails_again_5_2() {
    let mut c = cfg(3, 2, Service::Reliable);
    c.workload.duration_ns = 5_000_000;
    c.faults.leaves = vec![(2, 19_900)];
    c.faults.restarts = vec![(2, 2_500_000)];
    let r = run_ok(&c);
    assert_eq!(r.rejoined, 1);
    assert!(r.rejoined_delivered_to > 0 && r.rejoined_delivered_from > 0);
    c.faults.cuts = vec![("host-2".into(), 3_200_000)];
    let r = run_ok(&c);
    assert_eq!(r.rejoined, 1);
    assert_eq!(r.undelivered_reliable, 0);
}

#[test]
fn a_lossy_tree_passes_the_checkers_and_reliable_delivers_everything() {
    let mut c = cfg(3, 2, Service::Reliable);
    c.faults.loss_rate = 0.01;
    let r = run_ok(&c);
    assert!(r.packets_lost > 0);
    assert_eq!(r.undelivered_reliable, 0);
}

#[test]
fn one_seed_is_one_trace_on_the_tree() {
    let mut c = cfg(4, 3, Service::Reliable);
    c.net.switch_mode = SwitchMode::Host;
    c.net.clock_skew_ns = 1_000.0;
    let a = run_ok(&c);
    let b = run_ok(&c);
    assert_eq!(a.trace_hash, b.trace_hash);
    c.seed = 5;
    assert_ne!(run_ok(&c).trace_hash, a.trace_hash);
}

#[test]
fn a_tree_refuses_what_it_cannot_run() {
    let flag = |c: &SimConfig| c.validate().unwrap_err().flag;
    let mut c = cfg(1, 2, Service::BestEffort);
    c.net.switch_mode = SwitchMode::Cpu;
    assert_eq!(flag(&c), "--switch");
    let mut c = cfg(1, 2, Service::BestEffort);
    c.net.procs_per_host = 2;
    assert_eq!(flag(&c), "--procs-per-host");
    let mut c = cfg(1, 4, Service::BestEffort);
    assert_eq!(flag(&c), "--layers");
    c.net.fabric = Fabric::Tree { layers: 2 };
    c.net.topology = TopologySpec::FatTree { k: 4 };
    assert_eq!(flag(&c), "--fabric");
    let mut c = cfg(1, 2, Service::BestEffort);
    c.faults.blackholes = vec![(1, 2, 0)];
    assert_eq!(flag(&c), "--blackhole");
}

/// The first seeds of `onepipe vopr --tree`, 300 µs of sending each: every one passes, and a
/// seed is a pure function of itself.
#[test]
fn the_first_tree_swarm_seeds_pass() {
    use onepipe_sim::vopr::{run_tree_seed, tree_scenario, Verdict};
    for seed in 1..=12 {
        let o = run_tree_seed(seed, 300_000);
        assert_eq!(o.verdict, Verdict::Ok, "seed {seed}: {o:?}");
        assert!(o.scenario.contains("as a tree of"), "{}", o.scenario);
    }
    let (a, fa) = tree_scenario(7, 300_000);
    let (b, fb) = tree_scenario(7, 300_000);
    assert_eq!(format!("{a:?}{fa:?}"), format!("{b:?}{fb:?}"));
}
