//! Whole-network simulations with the checkers on: fixed seeds, properties over random
//! configurations, and scenarios named after the paper sections whose numbers they reproduce.
//! A failure message always carries the seed; `onepipe sim --seed S` with the same flags replays.

use onepipe_proto::switch::SwitchMode;
use onepipe_sim::{
    run, FaultConfig, NetworkConfig, ProtocolConfig, Report, Service, SimConfig, TopologySpec,
    WorkloadConfig, WorkloadKind,
};
use proptest::prelude::*;

fn small(topology: TopologySpec, seed: u64) -> SimConfig {
    SimConfig {
        seed,
        net: NetworkConfig {
            topology,
            ..Default::default()
        },
        workload: WorkloadConfig {
            duration_ns: 400_000,
            // Long enough for the last best-effort ACKs (`ack_delay_be_ns`, 200 µs): a run
            // drains only when every send is resolved, and only a drained run is judged for
            // unreported loss.
            drain_ns: 1_000_000,
            rate_per_proc: 20_000.0,
            ..Default::default()
        },
        ..SimConfig::default()
    }
}

fn run_ok(cfg: &SimConfig) -> Report {
    let r = run(cfg, &mut |_| {}).unwrap_or_else(|e| panic!("seed {}: {e}", cfg.seed));
    assert_eq!(
        r.violations, 0,
        "seed {} ({:?}): violations {:#?}",
        cfg.seed, cfg, r.violation_samples
    );
    assert!(r.delivered > 0, "seed {}: nothing delivered", cfg.seed);
    assert_eq!(r.checked_deliveries, r.delivered, "seed {}", cfg.seed);
    r
}

/// 24 fixed seeds, each a different mix of topology, switch mode, workload, processes per host,
/// clock skew and link ordering. With FIFO links nothing may be late (§4.1).
#[test]
fn fixed_seeds_pass_every_checker() {
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
    let modes = [SwitchMode::Chip, SwitchMode::Cpu, SwitchMode::Host];
    let workloads = [
        WorkloadKind::AllToAll,
        WorkloadKind::Scatter { k: 3 },
        WorkloadKind::OneToOne,
    ];
    for seed in 1..=24u64 {
        let i = seed as usize;
        let mut cfg = small(topologies[i % 4], seed);
        cfg.net.switch_mode = modes[i % 3];
        cfg.workload.workload = workloads[(i / 3) % 3];
        cfg.net.procs_per_host = 1 + (i % 2) as u32;
        cfg.net.clock_skew_ns = [0.0, 300.0, 1000.0][(i / 2) % 3];
        cfg.faults.reorder_prob = if i % 4 == 3 { 0.02 } else { 0.0 };
        let r = run_ok(&cfg);
        if cfg.faults.reorder_prob == 0.0 {
            assert_eq!(r.dropped_late, 0, "seed {seed}: late drop on FIFO links");
        }
    }
}

/// Issue 6: 20 fixed seeds per 1Pipe service under loss (random or bursty, with duplication and
/// reordering on some), on a mix of topologies, switch modes, workloads and processes per host:
/// every checker passes and every run drains, so the loss checks ran — best effort reports what
/// it lost (§2.1, `unreported-loss`), reliable delivers everything (§5.1, `reliable-loss`).
#[test]
fn lossy_fixed_seeds_pass_every_checker_in_both_services_2_1_5_1() {
    let topologies = [
        TopologySpec::FatTree { k: 4 },
        TopologySpec::Rack { hosts: 5 },
        TopologySpec::LeafSpine {
            hosts: 9,
            rack_size: 4,
            spines: 2,
        },
    ];
    let modes = [SwitchMode::Chip, SwitchMode::Cpu, SwitchMode::Host];
    let workloads = [WorkloadKind::AllToAll, WorkloadKind::Scatter { k: 3 }];
    for service in [Service::BestEffort, Service::Reliable] {
        let (mut lost, mut repaired) = (0, 0);
        for seed in 101..=120u64 {
            let i = seed as usize;
            let mut cfg = small(topologies[i % 3], seed);
            cfg.workload.service = service;
            cfg.net.switch_mode = modes[(i / 3) % 3];
            cfg.workload.workload = workloads[i % 2];
            cfg.net.procs_per_host = 1 + (i % 4 == 1) as u32;
            cfg.workload.duration_ns = 200_000;
            cfg.workload.drain_ns = 5_000_000;
            cfg.faults.loss_rate = [0.01, 0.03][i % 2];
            cfg.faults.loss_burst = 1 + i.is_multiple_of(5) as u32;
            cfg.faults.dup_rate = if i.is_multiple_of(3) { 0.01 } else { 0.0 };
            cfg.faults.reorder_prob = if i % 4 == 2 { 0.02 } else { 0.0 };
            let r = run_ok(&cfg);
            assert!(
                r.drained,
                "{service:?} seed {seed}: the loss checks must run"
            );
            assert!(r.packets_lost > 0, "{service:?} seed {seed}: nothing lost");
            lost += r.lost_reported;
            repaired += r.retransmits;
            if service == Service::Reliable {
                assert_eq!(r.undelivered_reliable, 0, "seed {seed}");
            } else {
                assert!(r.sent - r.delivered <= r.send_failed, "seed {seed}");
            }
        }
        match service {
            Service::Reliable => assert!(repaired > 0, "no retransmission in any seed"),
            _ => assert!(lost > 0, "no loss reported in any seed"),
        }
    }
}

#[test]
fn same_seed_same_trace_hash_different_seed_different_hash() {
    let cfg = small(TopologySpec::FatTree { k: 4 }, 7);
    let a = run_ok(&cfg);
    let b = run_ok(&cfg);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.delivered, b.delivered);
    let c = run_ok(&SimConfig { seed: 8, ..cfg });
    assert_ne!(a.trace_hash, c.trace_hash);
}

/// §6.2.1 and Fig. 9a: with a programmable chip and mostly idle links the reorder delay is about
/// half the beacon interval plus the clock skew (paper: 1.7–2.3 µs at a 3 µs interval).
#[test]
fn reorder_delay_is_half_the_beacon_interval_plus_skew_6_2_1() {
    let cfg = SimConfig {
        seed: 1,
        workload: WorkloadConfig {
            duration_ns: 2_000_000,
            rate_per_proc: 10_000.0,
            ..Default::default()
        },
        ..SimConfig::default()
    };
    let r = run_ok(&cfg);
    let mean = r.reorder_delay_ns.mean;
    assert!(
        (1_000.0..4_000.0).contains(&mean),
        "mean reorder delay {mean} ns"
    );
    // A longer interval raises it by about half the difference.
    let slow = run_ok(&SimConfig {
        net: NetworkConfig {
            beacon_interval_ns: 9_000,
            ..cfg.net
        },
        ..cfg
    });
    let grew = slow.reorder_delay_ns.mean - mean;
    assert!((1_500.0..6_000.0).contains(&grew), "grew by {grew} ns");
}

/// §6.2.2–6.2.3: switch CPUs add processing delay per hop, representatives an extra hop on top.
#[test]
fn switch_cpu_and_host_representatives_are_slower_than_the_chip_6_2() {
    let delay = |mode| {
        let cfg = {
            let base = small(TopologySpec::FatTree { k: 4 }, 3);
            SimConfig {
                net: NetworkConfig {
                    switch_mode: mode,
                    ..base.net
                },
                ..base
            }
        };
        run_ok(&cfg).reorder_delay_ns.mean
    };
    let (chip, cpu, host) = (
        delay(SwitchMode::Chip),
        delay(SwitchMode::Cpu),
        delay(SwitchMode::Host),
    );
    assert!(
        chip < cpu && cpu < host,
        "chip {chip} cpu {cpu} host {host}"
    );
}

/// §4.1: non-FIFO links make packets late; late packets are dropped and reported, never
/// delivered out of order.
#[test]
fn non_fifo_links_cause_late_drops_never_disorder_4_1() {
    let cfg = {
        let base = small(TopologySpec::FatTree { k: 4 }, 11);
        SimConfig {
            faults: FaultConfig {
                reorder_prob: 0.05,
                ..base.faults
            },
            ..base
        }
    };
    let r = run_ok(&cfg);
    assert!(r.dropped_late > 0);
    assert!(r.send_failed > 0, "late drops must reach their senders");
    assert!(r.reordered_packets > 0);
}

/// §4.1: clock skew slows delivery but never breaks order; clocks that step backwards at every
/// sync (large skew, frequent syncs) included.
#[test]
fn clock_steps_backwards_delay_but_never_disorder_4_1() {
    let cfg = {
        let base = small(
            TopologySpec::LeafSpine {
                hosts: 6,
                rack_size: 3,
                spines: 2,
            },
            5,
        );
        SimConfig {
            net: NetworkConfig {
                clock_skew_ns: 2_000.0,
                clock_sync_interval_ns: 20_000,
                clock_drift_ppm: 50.0,
                ..base.net
            },
            ..base
        }
    };
    run_ok(&cfg);
}

/// §6.1: 48-bit timestamps wrap every ~78 hours; comparisons are wrap-safe (PAWS).
#[test]
fn timestamps_wrap_at_48_bits_6_1() {
    let cfg = {
        let base = small(TopologySpec::FatTree { k: 4 }, 2);
        SimConfig {
            net: NetworkConfig {
                clock_epoch_ns: (1 << 48) - 200_000,
                ..base.net
            },
            ..base
        }
    };
    let r = run_ok(&cfg);
    assert_eq!(r.dropped_late, 0);
}

/// §6.1: messages larger than the MTU are fragmented and reassembled.
#[test]
fn large_messages_fragment_and_reassemble_6_1() {
    let cfg = {
        let base = small(TopologySpec::Rack { hosts: 4 }, 9);
        SimConfig {
            net: NetworkConfig {
                mtu_payload: 1_000,
                ..base.net
            },
            workload: WorkloadConfig {
                msg_size: 10_000,
                workload: WorkloadKind::Scatter { k: 2 },
                ..base.workload
            },
            ..base
        }
    };
    let r = run_ok(&cfg);
    assert_eq!(r.delivered, r.sent);
}

/// §7.2, Fig. 13b: beacons are a tiny share of link bandwidth (paper: ~0.3% at 3 µs, 100 G).
#[test]
fn beacons_are_a_small_share_of_link_bandwidth_7_2() {
    let r = run_ok(&small(TopologySpec::FatTree { k: 4 }, 4));
    assert!(r.beacon_bandwidth_share > 0.0 && r.beacon_bandwidth_share < 0.01);
}

/// With FIFO links and no loss, every message sent is delivered (best effort is "almost
/// reliable", §2.1).
#[test]
fn fifo_network_delivers_everything_2_1() {
    for seed in 30..33 {
        let r = run_ok(&small(TopologySpec::FatTree { k: 4 }, seed));
        assert_eq!(r.delivered, r.sent, "seed {seed}");
        assert_eq!(r.send_failed, 0, "seed {seed}");
    }
}

fn topology() -> impl Strategy<Value = TopologySpec> {
    prop_oneof![
        (1u32..7).prop_map(|hosts| TopologySpec::Rack { hosts }),
        (1u32..12, 1u32..5, 1u32..4).prop_map(|(hosts, rack_size, spines)| {
            TopologySpec::LeafSpine {
                hosts,
                rack_size,
                spines,
            }
        }),
        prop_oneof![Just(2u32), Just(4)].prop_map(|k| TopologySpec::FatTree { k }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Random topologies, link delays, skews, switch modes, workloads and seeds: the checkers
    /// always pass, and with FIFO links nothing is late.
    #[test]
    fn random_networks_pass_every_checker(
        topology in topology(),
        seed in any::<u64>(),
        link_delay_ns in 50u64..3_000,
        skew in 0.0f64..2_000.0,
        mode in 0usize..3,
        beacon_interval_ns in 1_000u64..20_000,
        pph in 1u32..3,
        reorder in prop_oneof![Just(0.0), 0.0f64..0.1],
        loss in prop_oneof![Just(0.0), 0.0f64..0.01],
        dup in prop_oneof![Just(0.0), 0.0f64..0.01],
        service in 0usize..3,
    ) {
        let cfg = SimConfig {
seed,
net: NetworkConfig {
topology,
link_delay_ns,
clock_skew_ns: skew,
switch_mode: [SwitchMode::Chip, SwitchMode::Cpu, SwitchMode::Host][mode],
beacon_interval_ns,
procs_per_host: pph,
..Default::default()
},
faults: FaultConfig {
reorder_prob: reorder,
loss_rate: loss,
dup_rate: dup,
..Default::default()
},
workload: WorkloadConfig {
service: [Service::BestEffort, Service::Reliable, Service::Mixed][service],
duration_ns: 200_000,
drain_ns: 5_000_000,
rate_per_proc: 20_000.0,
..Default::default()
},
..SimConfig::default()
};
        let r = run(&cfg, &mut |_| {}).unwrap();
        prop_assert_eq!(r.violations, 0, "seed {}: {:#?}", seed, r.violation_samples);
        prop_assert!(r.drained, "seed {}", seed);
        prop_assert_eq!(r.undelivered_reliable, 0, "seed {}", seed);
        if reorder == 0.0 {
            prop_assert_eq!(r.dropped_late, 0, "seed {}", seed);
        }
    }
}

/// §7.2: throughput is limited by host CPU processing — offered load beyond it is refused at the
/// sender (backpressure) and delivered throughput levels off instead of collapsing; a run drains
/// until every message is delivered, so overload is never mistaken for loss.
#[test]
fn throughput_levels_off_at_the_host_cpu_limit_7_2() {
    let at = |rate| {
        run_ok(&{
            let base = small(TopologySpec::Rack { hosts: 4 }, 21);
            SimConfig {
                workload: WorkloadConfig {
                    rate_per_proc: rate,
                    duration_ns: 300_000,
                    ..base.workload
                },
                ..base
            }
        })
    };
    let (below, over, far_over) = (at(100_000.0), at(3_000_000.0), at(10_000_000.0));
    assert_eq!(below.sends_rejected, 0);
    assert!(over.sends_rejected > 0 && far_over.sends_rejected > over.sends_rejected);
    assert!(over.throughput_msgs_per_s_per_proc > below.throughput_msgs_per_s_per_proc);
    let ratio = far_over.throughput_msgs_per_s_per_proc / over.throughput_msgs_per_s_per_proc;
    assert!(
        (0.9..1.1).contains(&ratio),
        "throughput at 3x overload / 1x: {ratio}"
    );
    assert!(over.drained && far_over.drained);
    assert_eq!(far_over.delivered, far_over.sent);
}

/// §2.1: best effort "detects lost packets via end-to-end ACK, but does not retransmit them".
/// Under random, bursty and targeted loss, duplication and reordering, every message is delivered
/// exactly once or reported to its sender (the `unreported-loss`, `duplicate` and `order`
/// checkers), and the run drains — so the loss check really ran.
#[test]
fn best_effort_losses_are_detected_by_ack_and_reported_2_1() {
    use onepipe_sim::config::PacketKind;
    let cases = [
        (41, 1e-3, 1, 0.0, None, 0.0),
        (42, 1e-2, 4, 0.0, None, 0.0),
        (43, 0.0, 1, 0.02, None, 0.0),
        (44, 0.05, 1, 0.0, Some(PacketKind::Ack), 0.0),
        (45, 0.2, 1, 0.0, Some(PacketKind::Nak), 0.05),
        (46, 0.05, 1, 0.0, Some(PacketKind::Beacon), 0.0),
        (47, 5e-3, 2, 5e-3, None, 0.02),
    ];
    for (seed, loss, burst, dup, kind, reorder) in cases {
        let cfg = {
            let base = small(TopologySpec::FatTree { k: 4 }, seed);
            SimConfig {
                faults: FaultConfig {
                    loss_rate: loss,
                    loss_burst: burst,
                    dup_rate: dup,
                    loss_kind: kind,
                    reorder_prob: reorder,
                    ..base.faults
                },
                workload: WorkloadConfig {
                    drain_ns: 5_000_000,
                    ..base.workload
                },
                ..base
            }
        };
        let r = run_ok(&cfg);
        assert!(r.drained, "seed {seed}: the loss check must run");
        assert!(r.acks > 0);
        if loss > 0.0 {
            assert!(r.packets_lost > 0, "seed {seed}");
        }
        if dup > 0.0 {
            assert!(
                r.dropped_duplicate > 0,
                "seed {seed}: duplicates reached receivers"
            );
        }
        if loss > 0.0 && matches!(kind, None | Some(PacketKind::Ack)) {
            assert!(
                r.lost_reported > 0,
                "seed {seed}: timeouts must report losses"
            );
        }
        if kind == Some(PacketKind::Beacon) {
            assert_eq!(r.delivered, r.sent, "seed {seed}: lost beacons only delay");
        }
        assert!(r.sent - r.delivered <= r.send_failed, "seed {seed}");
    }
}

/// §5.1 and §2.1: reliable 1Pipe under random, bursty and targeted loss (data, ACKs, commit
/// barriers, beacons), duplication and reordering, on every switch incarnation: every reliable
/// message is delivered exactly once at every destination, scatterings all-or-nothing, in total
/// order below the commit barrier (`reliable-loss`, `atomicity`, `order`, `barrier` checkers),
/// and the runs drain, so those checks really ran.
/// §2.1's end-to-end ACKs go per host pair (§6.1): with four processes per host, the ACKs a host
/// owes another share packets — fewer ACK packets than ACKs — in both services, and losing those
/// packets (each loses every ACK in it) still ends in reports (best effort) or retransmissions
/// (reliable), with every checker passing. With one process per host and best effort alone a
/// host owes another at most one ACK at a time: one packet per ACK.
#[test]
fn acks_owed_to_one_host_share_packets_and_survive_their_loss_6_1() {
    use onepipe_sim::config::PacketKind;
    let cases = [
        (61, 4, Service::BestEffort, 0.0),
        (62, 4, Service::Mixed, 0.0),
        (63, 4, Service::BestEffort, 0.05),
        (64, 4, Service::Reliable, 0.05),
        (65, 1, Service::BestEffort, 0.0),
    ];
    for (seed, pph, service, loss) in cases {
        let cfg = {
            let base = small(TopologySpec::FatTree { k: 4 }, seed);
            SimConfig {
                net: NetworkConfig {
                    procs_per_host: pph,
                    ..base.net
                },
                faults: FaultConfig {
                    loss_rate: loss,
                    loss_kind: Some(PacketKind::Ack),
                    ..base.faults
                },
                workload: WorkloadConfig {
                    service,
                    drain_ns: 5_000_000,
                    ..base.workload
                },
                ..base
            }
        };
        let r = run_ok(&cfg);
        assert!(r.drained, "seed {seed}: the loss check must run");
        if pph == 1 {
            assert_eq!(r.ack_packets, r.acks, "seed {seed}: nothing to batch");
            continue;
        }
        assert!(
            2 * r.ack_packets < r.acks,
            "seed {seed}: {} ACKs in {} packets",
            r.acks,
            r.ack_packets
        );
        if loss > 0.0 {
            assert!(r.packets_lost > 0, "seed {seed}");
        }
        if loss > 0.0 && service == Service::BestEffort {
            assert!(r.lost_reported > 0, "seed {seed}: lost ACKs end in reports");
        }
        if service == Service::Reliable {
            assert_eq!(r.delivered, r.sent, "seed {seed}: exactly once");
        }
    }
}

#[test]
fn reliable_delivery_survives_loss_duplication_and_reordering_5_1() {
    use onepipe_sim::config::PacketKind;
    let cases = [
        (51, 1e-3, 1, 0.0, None, 0.0, SwitchMode::Chip),
        (52, 1e-2, 4, 0.0, None, 0.0, SwitchMode::Chip),
        (53, 0.0, 1, 0.02, None, 0.0, SwitchMode::Cpu),
        (
            54,
            0.05,
            1,
            0.0,
            Some(PacketKind::Ack),
            0.0,
            SwitchMode::Chip,
        ),
        (
            55,
            0.05,
            1,
            0.0,
            Some(PacketKind::Commit),
            0.0,
            SwitchMode::Chip,
        ),
        (
            56,
            0.05,
            1,
            0.0,
            Some(PacketKind::Beacon),
            0.0,
            SwitchMode::Host,
        ),
        (
            57,
            0.02,
            1,
            0.0,
            Some(PacketKind::Data),
            0.02,
            SwitchMode::Chip,
        ),
        (58, 5e-3, 2, 5e-3, None, 0.02, SwitchMode::Cpu),
    ];
    for (seed, loss, burst, dup, kind, reorder, mode) in cases {
        for service in [Service::Reliable, Service::Mixed] {
            let cfg = {
                let base = small(TopologySpec::FatTree { k: 4 }, seed);
                SimConfig {
                    net: NetworkConfig {
                        switch_mode: mode,
                        procs_per_host: 2,
                        ..base.net
                    },
                    faults: FaultConfig {
                        loss_rate: loss,
                        loss_burst: burst,
                        dup_rate: dup,
                        loss_kind: kind,
                        reorder_prob: reorder,
                        ..base.faults
                    },
                    workload: WorkloadConfig {
                        service,
                        workload: WorkloadKind::Scatter { k: 5 },
                        drain_ns: 20_000_000,
                        ..base.workload
                    },
                    ..base
                }
            };
            let r = run_ok(&cfg);
            assert!(r.drained, "seed {seed}: the exactly-once check must run");
            assert_eq!(r.undelivered_reliable, 0, "seed {seed}");
            assert!(r.delivered_reliable > 0, "seed {seed}");
            if service == Service::Reliable {
                assert_eq!(r.delivered, r.sent, "seed {seed}: reliable loses nothing");
            }
            if loss > 0.0 && matches!(kind, None | Some(PacketKind::Data)) {
                assert!(r.retransmits > 0, "seed {seed}: losses must be repaired");
            }
            if dup > 0.0 {
                assert!(r.dropped_duplicate > 0, "seed {seed}");
            }
        }
    }
}

/// The acceptance run, fixed: scatterings over a k=4 fat tree with 0.1% loss.
#[test]
fn reliable_scatterings_with_loss_are_repaired_and_atomic_5_1() {
    let cfg = SimConfig {
        seed: 3,
        net: NetworkConfig {
            topology: TopologySpec::FatTree { k: 4 },
            procs_per_host: 2,
            ..Default::default()
        },
        faults: FaultConfig {
            loss_rate: 1e-3,
            ..Default::default()
        },
        workload: WorkloadConfig {
            service: Service::Reliable,
            workload: WorkloadKind::Scatter { k: 4 },
            duration_ns: 5_000_000,
            ..Default::default()
        },
        ..SimConfig::default()
    };
    let r = run_ok(&cfg);
    assert!(r.drained);
    assert_eq!(r.undelivered_reliable, 0);
    assert!(r.retransmits > 0);
    assert_eq!(r.delivered, r.sent);
}

/// §5.1: the Prepare phase costs about one round trip — at zero loss reliable latency exceeds
/// best effort, by less than the slowest path's few round trips. (The figures are in
/// docs/BENCHMARKS.md; this pins the shape, not the numbers.)
#[test]
fn reliable_costs_about_one_round_trip_more_than_best_effort_5_1() {
    let at = |service| {
        run_ok(&{
            let base = small(TopologySpec::FatTree { k: 4 }, 61);
            SimConfig {
                net: NetworkConfig {
                    procs_per_host: 2,
                    ..base.net
                },
                workload: WorkloadConfig {
                    service,
                    workload: WorkloadKind::Scatter { k: 4 },
                    ..base.workload
                },
                ..base
            }
        })
    };
    let (be, rel) = (at(Service::BestEffort), at(Service::Reliable));
    let (b, r) = (be.latency_ns_be.p50, rel.latency_ns_reliable.p50);
    assert!(r > b + 2_000, "reliable p50 {r} ns vs best effort {b} ns");
    assert!(r < b + 20_000, "reliable p50 {r} ns vs best effort {b} ns");
    assert_eq!(rel.retransmits, 0, "no loss, no retransmission");
}

/// §6.1: a full send buffer is refused at the sender (`SendError::Full`), never unbounded growth;
/// everything admitted is still delivered.
#[test]
fn overload_fills_the_send_buffer_and_refuses_6_1() {
    let r = run_ok(&{
        let base = small(TopologySpec::Rack { hosts: 4 }, 71);
        SimConfig {
            workload: WorkloadConfig {
                service: Service::Reliable,
                rate_per_proc: 5_000_000.0,
                duration_ns: 200_000,
                drain_ns: 20_000_000,
                ..base.workload
            },
            protocol: ProtocolConfig {
                send_buffer_bytes: 8 << 10,
                ..base.protocol
            },
            ..base
        }
    });
    assert!(r.sends_refused_full > 0);
    assert!(r.drained);
    assert_eq!(r.delivered, r.sent);
}

/// §6.1: large broadcasts queue at switch egress ports; packets above the ECN threshold are
/// marked, receivers echo the marks, senders cut their windows (DCTCP) — and nothing is lost or
/// disordered on the way.
#[test]
fn congested_switch_queues_mark_ecn_and_senders_cut_their_windows_6_1() {
    let r = run_ok(&{
        let base = small(TopologySpec::FatTree { k: 4 }, 81);
        SimConfig {
            workload: WorkloadConfig {
                service: Service::Reliable,
                msg_size: 20_000,
                rate_per_proc: 20_000.0,
                duration_ns: 300_000,
                drain_ns: 20_000_000,
                ..base.workload
            },
            protocol: ProtocolConfig {
                send_buffer_bytes: 4 << 20,
                ..base.protocol
            },
            ..base
        }
    });
    assert!(r.ecn_marked > 0, "no ECN marks");
    assert!(r.window_cuts > 0, "DCTCP never cut a window");
    assert!(r.drained);
    assert_eq!(r.delivered, r.sent);
}

/// §4.2 "Handling failures": a host crashes mid-run; its first-hop switch removes the silent link
/// after 10 beacon intervals and every barrier resumes: the others go on delivering to each
/// other, every checker passes (messages of and to the crashed host excused), and the run drains.
#[test]
fn a_crashed_host_is_removed_and_the_others_keep_delivering_4_2() {
    for (seed, mode) in [
        (91, SwitchMode::Chip),
        (92, SwitchMode::Cpu),
        (93, SwitchMode::Host),
    ] {
        let base = {
            let base = small(TopologySpec::FatTree { k: 4 }, seed);
            SimConfig {
                net: NetworkConfig {
                    switch_mode: mode,
                    ..base.net
                },
                workload: WorkloadConfig {
                    duration_ns: 600_000,
                    drain_ns: 20_000_000,
                    ..base.workload
                },
                ..base
            }
        };
        let healthy = run_ok(&base);
        let r = run_ok(&SimConfig {
            faults: FaultConfig {
                crashes: vec![(5, 200_000)],
                ..base.faults.clone()
            },
            ..base.clone()
        });
        assert!(
            r.drained,
            "seed {seed} {mode}: barriers stalled after the crash"
        );
        // 15 of 16 hosts keep delivering to each other for the rest of the run: most of what a
        // healthy run delivers, far more than the 200 µs before the crash.
        assert!(
            r.delivered * 10 > healthy.delivered * 7,
            "seed {seed} {mode}: {} of {} delivered",
            r.delivered,
            healthy.delivered
        );
        // With failure detection off, the crash stalls every barrier: nothing after it drains.
        let stuck = run(
            &SimConfig {
                check: false,
                faults: FaultConfig {
                    crashes: vec![(5, 200_000)],
                    ..base.faults.clone()
                },
                workload: WorkloadConfig {
                    drain_ns: 2_000_000,
                    ..base.workload.clone()
                },
                protocol: ProtocolConfig {
                    link_timeout_intervals: 0,
                    ..base.protocol.clone()
                },
                ..base.clone()
            },
            &mut |_| {},
        )
        .unwrap();
        assert!(
            !stuck.drained && stuck.delivered < r.delivered,
            "seed {seed} {mode}"
        );
    }
}

/// §4.2: a ToR switch fails (every link of both halves cut) and a host link fails: the switches
/// around them remove the dead links, the rest of the network resumes, and every checker passes
/// with the cut-off hosts excused.
#[test]
fn switch_and_host_link_failures_are_routed_around_4_2() {
    for (seed, cut) in [(95, "tor-1"), (96, "host-6"), (97, "core-0"), (98, "agg-2")] {
        let r = run_ok(&{
            let base = small(TopologySpec::FatTree { k: 4 }, seed);
            SimConfig {
                faults: FaultConfig {
                    cuts: vec![(cut.to_string(), 200_000)],
                    ..base.faults
                },
                workload: WorkloadConfig {
                    duration_ns: 600_000,
                    drain_ns: 20_000_000,
                    ..base.workload
                },
                ..base
            }
        });
        assert!(r.drained, "seed {seed}, {cut}: barriers stalled");
        assert!(r.links_removed > 0, "seed {seed}, {cut}: nothing removed");
        assert!(
            r.packets_cut > 0,
            "seed {seed}, {cut}: nothing crossed the cut"
        );
    }
}

/// Optimistic delivery on 1Pipe (PLATO's pipeline at the hosts, issue 39): with CPU switches the
/// barrier waits ~20 µs; at a low rate an arrival is usable Δ later, long before. Every hook is
/// checked (`optcheck`), the run drains, and the order of the final deliveries is 1Pipe's — the
/// same trace as with optimism off. Latencies are simulated time, deterministic per seed.
#[test]
fn optimistic_delivery_is_checked_and_usable_before_the_barrier() {
    for (seed, faults) in [(1, 0.0), (2, 0.01)] {
        let mut cfg = small(TopologySpec::FatTree { k: 4 }, seed);
        cfg.net.switch_mode = SwitchMode::Cpu;
        cfg.workload.duration_ns = 4_000_000;
        cfg.workload.rate_per_proc = 2_000.0;
        cfg.faults.loss_rate = faults;
        cfg.faults.reorder_prob = faults;
        let plain = run_ok(&cfg);
        cfg.protocol.optimistic_delta_ns = 1_000;
        let opt = run_ok(&cfg);
        assert!(opt.drained, "seed {seed}");
        assert_eq!(
            opt.trace_hash, plain.trace_hash,
            "seed {seed}: optimism changed the order"
        );
        let o = opt.optimistic.as_ref().expect("optimistic report");
        assert_eq!(o.violations, 0);
        assert!(o.delivered >= opt.delivered, "seed {seed}: {o:?}");
        assert!(
            o.latency_ns.p50 < plain.latency_ns.p50 / 2,
            "seed {seed}: optimistic p50 {} against the barrier's {}",
            o.latency_ns.p50,
            plain.latency_ns.p50
        );
    }
}

/// Optimistic delivery of reliable messages (issue 39): the commit barrier is their final
/// order, and a host crash makes §5.2 discard and recall what its processes sent at or above
/// their failure timestamps — each of those delivered optimistically is revoked and never comes
/// again. The checker (`optcheck`, one view per service) finds every hook consistent and nothing
/// left tentative; the final deliveries are those of the run without optimism.
#[test]
fn optimistic_reliable_delivery_revokes_what_a_crash_discards_5_2() {
    let mut cfg = small(TopologySpec::FatTree { k: 4 }, 7);
    cfg.workload.service = Service::Reliable;
    cfg.workload.rate_per_proc = 20_000.0;
    cfg.workload.duration_ns = 3_000_000;
    cfg.faults.crashes = vec![(3, 1_000_000)];
    let plain = run_ok(&cfg);
    cfg.protocol.optimistic_delta_ns = 100;
    let opt = run_ok(&cfg);
    assert!(opt.drained && opt.recalled > 0, "{opt:?}");
    assert_eq!(
        opt.trace_hash, plain.trace_hash,
        "optimism changed the order"
    );
    let o = opt.optimistic.as_ref().expect("optimistic report");
    assert_eq!(o.violations, 0);
    // Every hand-over ends confirmed or revoked, and the confirms are the final deliveries.
    assert_eq!(
        o.delivered,
        o.latency_ns.count + o.revokes_early + o.rollbacks
    );
    assert_eq!(o.latency_ns.count, opt.delivered);
    assert_eq!(
        o.held_end,
        Some(0),
        "a discarded message left in a pipeline"
    );
}
