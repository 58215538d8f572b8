//! The baseline protocols of Fig. 8 (fixed sequencer on a host or a switch, token, Lamport, ISIS) in
//! the simulator, under their checkers (`onepipe_sim::baseline::check`: total order per
//! receiver, agreement, FIFO, no phantom or duplicate, and with the run drained, exactly-once
//! delivery less what the protocol reported lost): fixed seeds per protocol with and without
//! faults, targeted loss per packet class, determinism. A failure message carries the seed;
//! `onepipe sim --protocol P --seed S` with the same flags replays it.

use onepipe_baselines::Protocol;
use onepipe_sim::baseline::{run_baseline, BaseReport, BaselineConfig};
use onepipe_sim::config::PacketKind;
use onepipe_sim::{
    FaultConfig, NetworkConfig, RateStep, SimConfig, TopologySpec, WorkloadConfig, WorkloadKind,
};

fn small(topology: TopologySpec, seed: u64) -> SimConfig {
    SimConfig {
        seed,
        net: NetworkConfig {
            topology,
            ..Default::default()
        },
        workload: WorkloadConfig {
            duration_ns: 300_000,
            drain_ns: 20_000_000,
            rate_per_proc: 50_000.0,
            ..Default::default()
        },
        ..SimConfig::default()
    }
}

fn run_ok(cfg: &SimConfig, base: &BaselineConfig) -> BaseReport {
    let name = base.protocol.name();
    let r = run_baseline(cfg, base, &mut |_| {})
        .unwrap_or_else(|e| panic!("{name} seed {}: {e}", cfg.seed));
    assert_eq!(
        r.violations, 0,
        "{name} seed {} ({cfg:?}): violations {:#?}",
        cfg.seed, r.violation_samples
    );
    assert!(r.drained, "{name} seed {}: not drained: {r:?}", cfg.seed);
    assert!(
        r.delivered > 0,
        "{name} seed {}: nothing delivered",
        cfg.seed
    );
    assert_eq!(r.checked_deliveries, r.delivered);
    r
}

/// Seed `seed`'s configuration: a mix of topology, processes per host, workload, clock skew
/// and faults — none, non-FIFO links, loss of any packet, or loss with duplication and
/// reordering (up to 5% loss).
fn mixed(seed: u64) -> SimConfig {
    let topologies = [
        TopologySpec::FatTree { k: 4 },
        TopologySpec::Rack { hosts: 5 },
        TopologySpec::LeafSpine {
            hosts: 9,
            rack_size: 4,
            spines: 2,
        },
        TopologySpec::FatTree { k: 2 },
    ];
    let workloads = [
        WorkloadKind::AllToAll,
        WorkloadKind::Scatter { k: 3 },
        WorkloadKind::OneToOne,
    ];
    let i = seed as usize;
    let mut cfg = small(topologies[i % 4], seed);
    cfg.workload.workload = workloads[(i / 4) % 3];
    cfg.net.procs_per_host = 1 + (i % 3 == 1) as u32;
    cfg.net.clock_skew_ns = [0.0, 300.0, 1000.0][(i / 2) % 3];
    match (i / 3) % 4 {
        0 => {}
        1 => cfg.faults.reorder_prob = 0.05,
        2 => cfg.faults.loss_rate = 0.01,
        _ => {
            cfg.faults.loss_rate = 0.05;
            cfg.faults.dup_rate = 0.01;
            cfg.faults.reorder_prob = 0.02;
        }
    }
    cfg
}

/// Runs `protocol` on 32 mixed seeds; without loss, every message must reach every destination
/// exactly once; with it, at least one seed must have exercised the repair path.
fn fixed_seeds(protocol: Protocol) {
    let base = BaselineConfig::new(protocol);
    let mut repaired = 0;
    for seed in 1..=32u64 {
        let cfg = mixed(seed);
        let r = run_ok(&cfg, &base);
        if cfg.faults.loss_rate == 0.0 {
            assert_eq!(
                (r.delivered, r.lost_reported, r.send_failed),
                (r.sent, 0, 0),
                "{} seed {seed}: a loss-free run must deliver everything exactly once",
                protocol.name()
            );
        } else {
            assert!(
                r.packets_lost > 0,
                "seed {seed}: the loss model lost nothing"
            );
            repaired += r.retransmits + r.token_retransmits;
        }
    }
    assert!(
        repaired > 0,
        "{}: no retransmission in any lossy seed",
        protocol.name()
    );
}

#[test]
fn sequencer_on_a_host_passes_the_checkers_on_32_seeds() {
    fixed_seeds(Protocol::Sequencer);
}

#[test]
fn sequencer_on_a_switch_passes_the_checkers_on_32_seeds() {
    fixed_seeds(Protocol::SequencerSwitch);
}

#[test]
fn token_passes_the_checkers_on_32_seeds() {
    fixed_seeds(Protocol::Token);
}

#[test]
fn lamport_passes_the_checkers_on_32_seeds() {
    fixed_seeds(Protocol::Lamport);
}

#[test]
fn isis_passes_the_checkers_on_32_seeds() {
    fixed_seeds(Protocol::Isis);
}

/// Loss aimed at one packet class at a time (`--loss-kind`): data, repair (nak), heartbeats
/// and syncs (beacon), the token (ack). Each protocol survives each, 10%.
#[test]
fn targeted_loss_of_each_class_is_survived() {
    let kinds = [
        PacketKind::Data,
        PacketKind::Nak,
        PacketKind::Beacon,
        PacketKind::Ack,
    ];
    for protocol in Protocol::ALL {
        for (i, kind) in kinds.into_iter().enumerate() {
            let mut cfg = small(TopologySpec::FatTree { k: 4 }, 100 + i as u64);
            cfg.faults.loss_rate = 0.1;
            cfg.faults.loss_kind = Some(kind);
            run_ok(&cfg, &BaselineConfig::new(protocol));
        }
    }
}

/// Bursts of loss (8 packets per event) on every link.
#[test]
fn bursty_loss_is_survived() {
    for protocol in Protocol::ALL {
        let mut cfg = small(TopologySpec::FatTree { k: 4 }, 31);
        cfg.faults.loss_rate = 0.002;
        cfg.faults.loss_burst = 8;
        let r = run_ok(&cfg, &BaselineConfig::new(protocol));
        assert!(r.packets_lost >= 8);
    }
}

#[test]
fn same_seed_same_trace_hash_different_seed_different_hash() {
    for protocol in Protocol::ALL {
        let base = BaselineConfig::new(protocol);
        let mut cfg = mixed(11); // loss, duplication and reordering
        cfg.net.topology = TopologySpec::FatTree { k: 4 };
        if matches!(protocol, Protocol::Toto | Protocol::AllAck) {
            // They multicast every message to every machine.
            cfg.workload.workload = WorkloadKind::AllToAll;
        }
        let a = run_ok(&cfg, &base);
        let b = run_ok(&cfg, &base);
        assert_eq!(
            (&a.trace_hash, a.delivered, a.events),
            (&b.trace_hash, b.delivered, b.events),
            "{}",
            protocol.name()
        );
        let c = run_ok(&SimConfig { seed: 12, ..cfg }, &base);
        assert_ne!(a.trace_hash, c.trace_hash, "{}", protocol.name());
    }
}

/// Fig. 8's mechanism for the sequencer: every copy costs it a send, so it saturates at
/// 1 / ((procs + 1) × cost) orderings per second and refuses what it cannot take; a switch
/// sequencer is far faster but still a single point every message crosses.
#[test]
fn a_saturated_sequencer_bounds_throughput_and_refuses_the_rest() {
    let mut cfg = small(TopologySpec::FatTree { k: 4 }, 5);
    cfg.workload.rate_per_proc = 1_000_000.0;
    cfg.workload.duration_ns = 100_000;
    let host = run_ok(&cfg, &BaselineConfig::new(Protocol::Sequencer));
    // 16 processes: (1 + 16) × 50 ns per broadcast, 1.18 M broadcasts/s, each delivered once
    // per process.
    let ceiling = 1e9 / (17.0 * 50.0);
    assert!(
        host.throughput_msgs_per_s_per_proc < ceiling * 1.01
            && host.throughput_msgs_per_s_per_proc > ceiling * 0.8,
        "{host:?}"
    );
    assert!(host.sends_rejected > 0 && host.sequencer_busy_share.unwrap() > 0.5);
    let switch = run_ok(&cfg, &BaselineConfig::new(Protocol::SequencerSwitch));
    assert!(switch.throughput_msgs_per_s_per_proc > 2.0 * host.throughput_msgs_per_s_per_proc);
}

/// The token protocol refuses sends beyond one holding's worth per process and delivers the
/// rest in one total order; the token keeps circulating but the run still drains.
#[test]
fn token_at_saturation_refuses_and_drains() {
    let mut cfg = small(TopologySpec::FatTree { k: 2 }, 9);
    cfg.net.procs_per_host = 4;
    cfg.workload.rate_per_proc = 2_000_000.0;
    cfg.workload.duration_ns = 50_000;
    let r = run_ok(&cfg, &BaselineConfig::new(Protocol::Token));
    assert!(r.sends_refused_full > 0);
    assert_eq!(r.delivered, r.sent);
    assert!(r.token_passes > 8);
}

/// Lamport heartbeats: the automatic interval keeps their cost at half of each host's CPU at
/// most (§7.2) — `max(beacon interval, 2 × pph × (procs − 1) × (send + receive))`, the host's
/// processes sharing its core; with the benches' pooled CPU, half of a core per process.
#[test]
fn lamport_heartbeat_interval_scales_with_the_group() {
    let mut cfg = small(TopologySpec::FatTree { k: 4 }, 3);
    cfg.net.procs_per_host = 4;
    cfg.workload.duration_ns = 100_000;
    let auto = BaselineConfig::new(Protocol::Lamport);
    // 64 processes, four on each core at one core's costs: 2 × 4 × 63 × 100 ns.
    assert_eq!(auto.heartbeat_interval(&cfg, 64), 50_400);
    // Pooled (25 ns a packet in and out): 2 × 4 × 63 × 25 ns = 12.6 µs > 3 µs.
    cfg.net.pool_host_cpu();
    let r = run_ok(&cfg, &auto);
    assert_eq!(r.heartbeat_interval_ns, Some(12_600));
    let fixed = BaselineConfig {
        lamport_heartbeat_interval_ns: Some(50_000),
        ..BaselineConfig::new(Protocol::Lamport)
    };
    let slow = run_ok(&cfg, &fixed);
    assert!(slow.latency_ns.p50 > r.latency_ns.p50);
}

#[test]
fn bad_baseline_knobs_name_their_flag() {
    let cfg = small(TopologySpec::FatTree { k: 4 }, 1);
    let bad = BaselineConfig {
        token_batch_max: 0,
        ..BaselineConfig::new(Protocol::Token)
    };
    let e = run_baseline(&cfg, &bad, &mut |_| {}).unwrap_err();
    assert_eq!(e.flag, "--token-batch");
    let crash = SimConfig {
        faults: FaultConfig {
            crashes: vec![(1, 10_000)],
            ..cfg.faults.clone()
        },
        ..cfg.clone()
    };
    let e = run_baseline(&crash, &BaselineConfig::new(Protocol::Token), &mut |_| {}).unwrap_err();
    assert_eq!(e.flag, "--crash-host");
    let commit = SimConfig {
        faults: FaultConfig {
            loss_rate: 0.1,
            loss_kind: Some(PacketKind::Commit),
            ..cfg.faults
        },
        ..cfg
    };
    let e = run_baseline(
        &commit,
        &BaselineConfig::new(Protocol::Lamport),
        &mut |_| {},
    )
    .unwrap_err();
    assert_eq!(e.flag, "--loss-kind");
}

/// PLATO §3's receiver loss: a bounded receive queue at a core that stalls now and then drops
/// packets; PLATO and its fixed sequencer repair them and stay correct, every seed the same
/// way twice.
#[test]
fn receiver_overload_drops_packets_and_plato_repairs_them() {
    for protocol in [Protocol::Plato, Protocol::PlatoFixed] {
        for seed in 1..4 {
            let mut cfg = small(TopologySpec::Rack { hosts: 4 }, seed);
            cfg.net.host_recv_ns = 2_000;
            cfg.faults.recv_queue_len_max = 8;
            cfg.faults.recv_stall_every_ns = 200_000;
            cfg.faults.recv_stall_ns = 50_000;
            let base = BaselineConfig::new(protocol);
            let r = run_ok(&cfg, &base);
            assert!(r.recv_overflow > 0 && r.recv_stalls > 0, "{r:?}");
            let again = run_ok(&cfg, &base);
            assert_eq!(r.trace_hash, again.trace_hash);
            assert_eq!(r.recv_overflow, again.recv_overflow);
        }
    }
}

/// The opt-in logs and rate steps change nothing when off or trivial: logging arrivals and
/// deliveries leaves the trace hash as it is, and so does a step to the rate processes already
/// have (the stepped send schedule draws the same gaps).
#[test]
fn logs_and_trivial_rate_steps_leave_the_run_unchanged() {
    for protocol in [Protocol::Plato, Protocol::PlatoFixed] {
        let cfg = small(TopologySpec::Rack { hosts: 4 }, 3);
        let base = BaselineConfig::new(protocol);
        let plain = run_ok(&cfg, &base);
        assert!(plain.arrivals.is_none() && plain.deliveries.is_none());
        let logged = BaselineConfig {
            log_arrivals: true,
            log_deliveries: true,
            ..base.clone()
        };
        let r = run_ok(&cfg, &logged);
        assert_eq!(
            r.trace_hash, plain.trace_hash,
            "{protocol:?}: logging moved the run"
        );
        let mut stepped = cfg.clone();
        stepped.workload.rate_steps = vec![RateStep {
            from_ns: 0,
            procs: 0..4,
            rate_per_proc: cfg.workload.rate_per_proc,
        }];
        let s = run_ok(&stepped, &base);
        assert_eq!(
            s.trace_hash, plain.trace_hash,
            "{protocol:?}: a same-rate step moved the run"
        );
    }
}

/// Rate steps do what they say: processes 2 and 3 are silent, then send at 4× the others'
/// rate for a third of the run, then are silent again; the arrival log sees each sender's
/// messages at every receiver, and the delivery log holds every confirmed delivery and
/// rollback, with the receiver's Δ.
#[test]
fn rate_steps_and_logs_record_what_they_say() {
    let mut cfg = small(TopologySpec::Rack { hosts: 4 }, 5);
    cfg.workload.duration_ns = 3_000_000;
    cfg.workload.rate_per_proc = 20_000.0;
    let third = cfg.workload.duration_ns / 3;
    let step = |from_ns, rate_per_proc| RateStep {
        from_ns,
        procs: 2..4,
        rate_per_proc,
    };
    cfg.workload.rate_steps = vec![step(0, 0.0), step(third, 80_000.0), step(2 * third, 0.0)];
    let base = BaselineConfig {
        log_arrivals: true,
        log_deliveries: true,
        ..BaselineConfig::new(Protocol::Plato)
    };
    let r = run_ok(&cfg, &base);
    let arrivals = r.arrivals.as_ref().expect("arrivals logged");
    assert_eq!(arrivals.early.len(), 4);
    assert!(arrivals.packets_taken_in >= r.delivered);
    // At the next process (a sender's own copy travels in no packet).
    let count = |src: u32| {
        let at = &arrivals.early[(src as usize + 1) % 4];
        at.iter().filter(|a| a.0 == src).count() as f64
    };
    // Poisson counts: 60 expected for processes 0 and 1, 80 for 2 and 3; within ±40%.
    for (src, expected) in [(0, 60.0), (1, 60.0), (2, 80.0), (3, 80.0)] {
        let n = count(src);
        assert!(
            (n - expected).abs() < 0.4 * expected,
            "process {src}: {n} messages, expected about {expected}"
        );
    }
    let opt = r.optimistic.as_ref().expect("a PLATO run");
    let log = r.deliveries.as_ref().expect("deliveries logged");
    let rollbacks = log.iter().filter(|d| d.latency_ns.is_none()).count() as u64;
    assert_eq!(rollbacks, opt.rollbacks);
    assert_eq!(log.len() as u64 - rollbacks, opt.latency_ns.count);
    assert!(log.iter().all(|d| d.delta_ns.is_some()));
    let mut bad = cfg.clone();
    bad.workload.rate_steps = vec![
        step(0, 1.0),
        RateStep {
            procs: 3..5,
            ..step(0, 1.0)
        },
    ];
    let e = run_baseline(&bad, &base, &mut |_| {}).unwrap_err();
    assert_eq!(e.flag, "--rate");
}

/// ToTo's §5 on 8 machines (one per host of a rack), all-to-all for 14 ms with 1% loss:
/// `crashed` hosts crash mid-load, at 1 ms. The survivors suspect them (after 5 ms of
/// silence; those crashed together may take a second round), agree on their cut and go on: the checkers pass (order, keys, agreement, FIFO, causal order), a crashed host's
/// message is delivered by every survivor or by none, every survivor's message — those sent
/// after the membership change too — by every survivor, and the run drains.
fn crash_run(protocol: Protocol, crashed: &[u32], seed: u64) -> BaseReport {
    let mut cfg = small(TopologySpec::Rack { hosts: 8 }, seed);
    cfg.workload.duration_ns = 14_000_000;
    cfg.workload.rate_per_proc = 20_000.0;
    cfg.faults.loss_rate = 0.01;
    cfg.faults.crashes = crashed.iter().map(|&h| (h, 1_000_000)).collect();
    let base = BaselineConfig {
        log_deliveries: true,
        ..BaselineConfig::new(protocol)
    };
    let r = run_ok(&cfg, &base);
    let what = format!("{} seed {seed} crashed {crashed:?}", r.protocol);
    assert_eq!(r.causal_checked, Some(r.delivered), "{what}");
    // Messages sent after the membership change (done by about 12 ms) are delivered, most at
    // the usual latency: the group goes on.
    let late: Vec<u64> = r
        .deliveries
        .as_ref()
        .expect("logged")
        .iter()
        .filter(|d| d.at_ns > 13_000_000)
        .filter_map(|d| d.latency_ns)
        .collect();
    let slow = late.iter().filter(|&&l| l > 1_000_000).count();
    assert!(
        late.len() > 100 && slow * 10 < late.len(),
        "{what}: {} deliveries after 13 ms, {slow} of them over 1 ms late",
        late.len()
    );
    r
}

#[test]
fn toto_survivors_go_on_after_one_of_8_crashes_5_2() {
    for seed in 1..=3 {
        crash_run(Protocol::Toto, &[3], seed);
    }
}

#[test]
fn toto_and_all_ack_survivors_go_on_after_3_of_8_crash_5_2() {
    for seed in 1..=2 {
        crash_run(Protocol::Toto, &[1, 4, 6], seed);
    }
    crash_run(Protocol::AllAck, &[0, 5, 7], 3);
}

/// Two crashes 2 ms apart among 16 machines with 10% loss of repair packets (statuses, NACKs,
/// flushes): while the group stalls on the first crash its machines fall quiet, and a
/// survivor's silence during the change must count from the change's start, or a live machine
/// whose flush was lost is suspected and excluded (and the run never drains).
#[test]
fn a_second_crash_under_repair_loss_excludes_no_live_machine_5_1() {
    let mut cfg = small(TopologySpec::FatTree { k: 4 }, 22);
    cfg.workload.duration_ns = 10_000_000;
    cfg.workload.rate_per_proc = 30_000.0;
    cfg.faults.loss_rate = 0.1;
    cfg.faults.loss_kind = Some(PacketKind::Nak);
    cfg.faults.dup_rate = 0.01;
    cfg.faults.crashes = vec![(0, 600_000), (7, 2_600_000)];
    let r = run_ok(&cfg, &BaselineConfig::new(Protocol::Toto));
    assert_eq!(r.causal_checked, Some(r.delivered));
}
