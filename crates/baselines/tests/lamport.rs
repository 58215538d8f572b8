//! Lamport timestamps ([63]) with per-interval clock exchange (1Pipe §7.2, Fig. 8): scripted
//! scenarios on one endpoint, then randomized runs on the harness network over 20 seeds.

mod harness;

use bytes::Bytes;
use harness::{Net, NetConfig, Workload, SEEDS};
use onepipe_baselines::lamport::{LamportConfig, LamportEndpoint};
use onepipe_baselines::packet::Opcode;
use onepipe_baselines::{BaseEvent, BaseNode, BasePacket, Body, Dests, Endpoint, PORT};
use onepipe_proto::{Input, Instant, Node, Output, ProcId};

const PROCS: u32 = 5;

fn group(procs: u32, tweak: impl Fn(&mut LamportConfig)) -> Vec<BaseNode> {
    (0..procs)
        .map(|i| {
            let mut cfg = LamportConfig::new(ProcId(i), procs);
            tweak(&mut cfg);
            BaseNode::Lamport(LamportEndpoint::new(cfg))
        })
        .collect()
}

fn drain<N: Node<Mgmt = std::convert::Infallible>>(n: &mut N) -> Vec<Output<N::Packet, N::Event>> {
    std::iter::from_fn(|| n.poll_output()).collect()
}

fn delivered(outs: &[Output<BasePacket, BaseEvent>]) -> Vec<(u64, ProcId)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Event(BaseEvent::Deliver { seq_or_ts, src, .. }) => Some((*seq_or_ts, *src)),
            _ => None,
        })
        .collect()
}

fn stamped(src: u32, ts: u64, cseq: u64) -> Input<BasePacket> {
    Input::Packet {
        port: PORT,
        packet: BasePacket {
            src: ProcId(src),
            dst: ProcId(0),
            body: Body::Stamped {
                ts,
                cseq,
                index: cseq,
                payload: Bytes::new(),
            },
        },
    }
}

fn clock(src: u32, ts: u64, cseq_next: u64) -> Input<BasePacket> {
    Input::Packet {
        port: PORT,
        packet: BasePacket {
            src: ProcId(src),
            dst: ProcId(0),
            body: Body::Clock {
                ts,
                cseq_next,
                index_next: cseq_next,
            },
        },
    }
}

#[test]
fn delivery_waits_for_a_timestamp_at_least_as_large_from_every_process_63() {
    let mut e = LamportEndpoint::new(LamportConfig::new(ProcId(0), 3));
    e.handle(Instant(0), stamped(1, 5, 0));
    assert!(delivered(&drain(&mut e)).is_empty());
    assert_eq!(e.clock(), 5, "receiving raises the clock");
    e.handle(Instant(1), clock(2, 4, 0));
    assert!(
        delivered(&drain(&mut e)).is_empty(),
        "process 2 might still send ts 5"
    );
    e.handle(Instant(2), clock(2, 5, 0));
    assert_eq!(delivered(&drain(&mut e)), vec![(5, ProcId(1))]);
}

#[test]
fn a_clock_counts_only_once_its_channel_is_complete_fifo() {
    let mut e = LamportEndpoint::new(LamportConfig::new(ProcId(0), 3));
    e.handle(Instant(0), stamped(2, 3, 0));
    e.handle(Instant(0), clock(2, 9, 1));
    // Process 1's clock overtook its message (ts 2) on the reordering network.
    e.handle(Instant(1), clock(1, 9, 1));
    assert!(
        delivered(&drain(&mut e)).is_empty(),
        "1's ts-2 message is still on the way"
    );
    e.handle(Instant(2), stamped(1, 2, 0));
    assert_eq!(
        delivered(&drain(&mut e)),
        vec![(2, ProcId(1)), (3, ProcId(2))]
    );
}

#[test]
fn heartbeats_go_out_per_interval_not_per_message() {
    let mut cfg = LamportConfig::new(ProcId(0), 4);
    cfg.heartbeat_repeats = 0;
    let mut e = LamportEndpoint::new(cfg);
    for _ in 0..10 {
        e.send(Instant(0), Bytes::new(), Dests::all()).unwrap();
    }
    let outs = drain(&mut e);
    assert_eq!(
        outs.iter()
            .filter(|o| matches!(o, Output::Send { .. }))
            .count(),
        30,
        "10 messages × 3 others, no clocks yet"
    );
    let tick = e.poll_timeout().unwrap();
    assert_eq!(tick, Instant(10_000));
    e.handle(tick, Input::Timeout);
    let clocks = drain(&mut e)
        .into_iter()
        .filter(|o| {
            matches!(
                o,
                Output::Send {
                    packet: BasePacket {
                        body: Body::Clock {
                            ts: 10,
                            cseq_next: 10,
                            ..
                        },
                        ..
                    },
                    ..
                }
            )
        })
        .count();
    assert_eq!(clocks, 3, "one clock per other process per interval");
}

#[test]
fn channel_gap_is_nacked_to_the_sender() {
    let mut e = LamportEndpoint::new(LamportConfig::new(ProcId(0), 2));
    e.handle(Instant(0), stamped(1, 7, 2));
    drain(&mut e);
    let nack = (0..4)
        .find_map(|_| {
            let t = e.poll_timeout()?;
            e.handle(t, Input::Timeout);
            drain(&mut e).into_iter().find_map(|o| match o {
                Output::Send {
                    packet:
                        BasePacket {
                            body: b @ Body::Nack { .. },
                            dst,
                            ..
                        },
                    ..
                } => Some((dst, b)),
                _ => None,
            })
        })
        .expect("a NACK within a few timeouts");
    assert_eq!(
        nack,
        (
            ProcId(1),
            Body::Nack {
                seq: 0,
                count: 2,
                index_lo: 0,
                index_hi: 2
            }
        )
    );
}

// --- Randomized runs -----------------------------------------------------------------------

const UNTIL_NS: u64 = 5_000_000;

fn run(nodes: Vec<BaseNode>, net: NetConfig, load: Workload, seed: u64) -> Net {
    let mut n = Net::new(nodes, PROCS, net, load, seed);
    n.run_until(UNTIL_NS);
    n
}

#[test]
fn total_order_all_to_all_under_reordering_20_seeds() {
    for seed in SEEDS {
        let n = run(
            group(PROCS, |_| {}),
            NetConfig::reordering(),
            Workload::broadcast(40),
            seed,
        );
        n.check_order();
        n.check_complete();
    }
}

#[test]
fn fifo_channels_survive_reordering_loss_and_duplication_20_seeds() {
    let (mut retx, mut pulls) = (0, 0);
    for seed in SEEDS {
        let n = run(
            group(PROCS, |_| {}),
            NetConfig::lossy(0.03, 0.02),
            Workload::broadcast(40),
            seed,
        );
        n.check_order();
        n.check_complete();
        for node in &n.nodes {
            retx += node.stats().retransmitted;
            pulls += node.stats().nacks_sent;
        }
    }
    assert!(retx > 0 && pulls > 0, "NACK repair was exercised");
}

#[test]
fn subsets_are_ordered_20_seeds() {
    for seed in SEEDS {
        let n = run(
            group(PROCS, |_| {}),
            NetConfig::lossy(0.02, 0.01),
            Workload::subsets(40),
            seed,
        );
        n.check_order();
        n.check_complete();
    }
}

#[test]
fn lost_clocks_are_pulled_20_seeds() {
    // Only clocks are lost, and heavily, with no repeats: delivery must still finish.
    for seed in SEEDS {
        let mut cfg = NetConfig::lossy(0.3, 0.0);
        cfg.faulty = Some(vec![Opcode::Clock]);
        let n = run(
            group(PROCS, |c| c.heartbeat_repeats = 0),
            cfg,
            Workload::broadcast(20),
            seed,
        );
        n.check_order();
        n.check_complete();
    }
}

#[test]
fn small_history_gives_up_with_lost_markers_and_nobody_stalls_20_seeds() {
    let mut lost = 0;
    for seed in SEEDS {
        let mut cfg = NetConfig::lossy(0.1, 0.0);
        cfg.faulty = Some(vec![Opcode::Stamped]);
        let n = run(
            group(PROCS, |c| c.history_len_max = 2),
            cfg,
            Workload::broadcast(40),
            seed,
        );
        n.check_order();
        let total = u64::from(PROCS) * 40;
        for i in 0..PROCS as usize {
            assert_eq!(
                n.delivered[i].len() as u64 + n.lost[i],
                total,
                "seed {seed}: {i} stalled"
            );
        }
        lost += n.lost.iter().sum::<u64>();
    }
    assert!(lost > 0, "the Lost marker was exercised");
}

#[test]
fn same_seed_same_trace() {
    let a = run(
        group(PROCS, |_| {}),
        NetConfig::lossy(0.03, 0.02),
        Workload::subsets(30),
        11,
    );
    let b = run(
        group(PROCS, |_| {}),
        NetConfig::lossy(0.03, 0.02),
        Workload::subsets(30),
        11,
    );
    assert_eq!(a.trace, b.trace);
}
