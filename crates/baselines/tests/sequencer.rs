//! Fixed sequencer ([57] host placement, [51] switch placement; 1Pipe §7.2, Fig. 8): scripted
//! scenarios on one endpoint, then randomized runs on the harness network over 20 seeds.

mod harness;

use bytes::Bytes;
use harness::{Net, NetConfig, Workload, SEEDS};
use onepipe_baselines::packet::Opcode;
use onepipe_baselines::sequencer::{
    SeqEndpoint, SeqEndpointConfig, Sequencer, SequencerConfig, SequencerPlacement,
};
use onepipe_baselines::{BaseEvent, BaseNode, BasePacket, Body, Dests, Endpoint, Protocol, PORT};
use onepipe_proto::{Input, Instant, Node, Output, ProcId};

const PROCS: u32 = 5;
const SEQ: ProcId = ProcId(PROCS);

fn group(procs: u32, tweak: impl Fn(&mut SequencerConfig)) -> Vec<BaseNode> {
    let mut nodes: Vec<BaseNode> = (0..procs)
        .map(|i| BaseNode::SeqEndpoint(SeqEndpoint::new(SeqEndpointConfig::new(ProcId(i), procs))))
        .collect();
    let mut cfg = SequencerConfig::new(procs);
    tweak(&mut cfg);
    nodes.push(BaseNode::Sequencer(Sequencer::new(cfg)));
    nodes
}

fn drain<N: Node<Mgmt = std::convert::Infallible>>(n: &mut N) -> Vec<Output<N::Packet, N::Event>> {
    std::iter::from_fn(|| n.poll_output()).collect()
}

fn ordered(to: u32, gseq: u64, rseq: u64, origin: u32) -> Input<BasePacket> {
    Input::Packet {
        port: PORT,
        packet: BasePacket {
            src: SEQ,
            dst: ProcId(to),
            body: Body::Ordered {
                gseq,
                rseq,
                origin: ProcId(origin),
                payload: Bytes::from(vec![gseq as u8]),
            },
        },
    }
}

fn delivered_gseqs(outs: &[Output<BasePacket, BaseEvent>]) -> Vec<u64> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Event(BaseEvent::Deliver { seq_or_ts, .. }) => Some(*seq_or_ts),
            _ => None,
        })
        .collect()
}

fn endpoint(id: u32) -> SeqEndpoint {
    SeqEndpoint::new(SeqEndpointConfig::new(ProcId(id), PROCS))
}

#[test]
fn receiver_buffers_a_gap_then_nacks_it_with_the_gseq_range() {
    let mut e = endpoint(1);
    // rseq 1 (gseq 7) arrives before rseq 0: buffered, nothing delivered, a NACK timer armed.
    e.handle(Instant(0), ordered(1, 7, 1, 2));
    assert!(delivered_gseqs(&drain(&mut e)).is_empty());
    let due = e.poll_timeout().expect("a gap arms the NACK timer");
    e.handle(due, Input::Timeout);
    let outs = drain(&mut e);
    let nack = outs.iter().find_map(|o| match o {
        Output::Send { packet, .. } => Some(packet.clone()),
        _ => None,
    });
    let nack = nack.expect("a NACK after the timeout");
    assert_eq!(nack.dst, SEQ);
    assert_eq!(
        nack.body,
        Body::Nack {
            seq: 0,
            count: 1,
            index_lo: 0,
            index_hi: 7
        }
    );
    // The retransmission fills the gap: both are delivered, in order, and the timer is disarmed.
    e.handle(due + 10, ordered(1, 3, 0, 4));
    assert_eq!(delivered_gseqs(&drain(&mut e)), vec![3, 7]);
    assert_eq!(e.poll_timeout(), None);
}

#[test]
fn sync_reveals_a_lost_last_message() {
    let mut e = endpoint(0);
    e.handle(Instant(0), ordered(0, 0, 0, 1));
    assert_eq!(delivered_gseqs(&drain(&mut e)), vec![0]);
    assert_eq!(e.poll_timeout(), None, "no gap is known yet");
    let sync = BasePacket {
        src: SEQ,
        dst: ProcId(0),
        body: Body::SeqSync {
            rseq_next: 2,
            gseq_last: 9,
        },
    };
    e.handle(
        Instant(5),
        Input::Packet {
            port: PORT,
            packet: sync,
        },
    );
    let due = e.poll_timeout().expect("the sync reveals a gap");
    e.handle(due, Input::Timeout);
    let outs = drain(&mut e);
    assert!(outs.iter().any(|o| matches!(
        o,
        Output::Send {
            packet: BasePacket {
                body: Body::Nack {
                    seq: 1,
                    count: 1,
                    index_lo: 1,
                    index_hi: 10
                },
                ..
            },
            ..
        }
    )));
}

#[test]
fn lost_marker_skips_and_reports_instead_of_stalling() {
    let mut e = endpoint(0);
    e.handle(Instant(0), ordered(0, 5, 2, 1));
    let lost = BasePacket {
        src: SEQ,
        dst: ProcId(0),
        body: Body::Lost { seq: 0, count: 2 },
    };
    e.handle(
        Instant(1),
        Input::Packet {
            port: PORT,
            packet: lost,
        },
    );
    let outs = drain(&mut e);
    let lost_events = outs
        .iter()
        .filter(|o| matches!(o, Output::Event(BaseEvent::Lost { .. })))
        .count();
    assert_eq!(lost_events, 2);
    assert_eq!(delivered_gseqs(&outs), vec![5]);
    assert_eq!(e.received_through(), 3);
}

#[test]
fn sequencer_stamps_per_receiver_sequences_for_subsets() {
    let mut s = Sequencer::new(SequencerConfig::new(PROCS));
    let submit = |src: u32, msg_id: u64, dests: Dests| Input::Packet {
        port: PORT,
        packet: BasePacket {
            src: ProcId(src),
            dst: SEQ,
            body: Body::Submit {
                msg_id,
                dests,
                payload: Bytes::new(),
            },
        },
    };
    s.handle(
        Instant(0),
        submit(0, 0, Dests::list([ProcId(1), ProcId(2)])),
    );
    s.handle(Instant(0), submit(3, 0, Dests::list([ProcId(2)])));
    // Sender 0's second message arrives before its first reordered one: held for FIFO.
    s.handle(Instant(0), submit(0, 2, Dests::one(ProcId(1))));
    s.handle(Instant(0), submit(0, 1, Dests::one(ProcId(2))));
    let outs: Vec<(ProcId, u64, u64, ProcId)> = drain(&mut s)
        .into_iter()
        .filter_map(|o| match o {
            Output::Send {
                packet:
                    BasePacket {
                        dst,
                        body:
                            Body::Ordered {
                                gseq, rseq, origin, ..
                            },
                        ..
                    },
                ..
            } => Some((dst, gseq, rseq, origin)),
            _ => None,
        })
        .collect();
    let p = ProcId;
    assert_eq!(
        outs,
        vec![
            (p(1), 0, 0, p(0)),
            (p(2), 0, 0, p(0)),
            (p(2), 1, 1, p(3)),
            (p(2), 2, 2, p(0)),
            (p(1), 3, 1, p(0)),
        ]
    );
    assert_eq!(s.ordered_for(p(2)), 3);
    assert_eq!(s.ordered(), 4);
}

#[test]
fn upstream_gap_is_skipped_after_timeout_and_reported_to_the_sender() {
    let mut s = Sequencer::new(SequencerConfig::new(PROCS));
    let submit = |msg_id: u64| Input::Packet {
        port: PORT,
        packet: BasePacket {
            src: ProcId(0),
            dst: SEQ,
            body: Body::Submit {
                msg_id,
                dests: Dests::all(),
                payload: Bytes::new(),
            },
        },
    };
    s.handle(Instant(0), submit(1));
    assert!(drain(&mut s).is_empty(), "msg 1 waits for msg 0");
    let due = s.poll_timeout().unwrap();
    s.handle(due, Input::Timeout);
    let outs = drain(&mut s);
    assert!(outs.iter().any(|o| matches!(
        o,
        Output::Send {
            packet: BasePacket {
                dst: ProcId(0),
                body: Body::SubmitLost {
                    msg_id: 0,
                    count: 1
                },
                ..
            },
            ..
        }
    )));
    assert_eq!(s.ordered(), 1);
    // The lost message arriving late is a duplicate now, not a second ordering.
    s.handle(due + 1, submit(0));
    assert_eq!(s.ordered(), 1);
    assert_eq!(s.stats().dropped_duplicate, 1);
}

#[test]
fn misaddressed_and_foreign_packets_are_dropped_and_counted() {
    let mut e = endpoint(0);
    let mut bad = match ordered(1, 0, 0, 1) {
        Input::Packet { packet, .. } => packet,
        Input::Timeout | Input::Notice(_) => unreachable!(),
    };
    e.handle(
        Instant(0),
        Input::Packet {
            port: PORT,
            packet: bad.clone(),
        },
    );
    bad.dst = ProcId(0);
    bad.src = ProcId(3); // Not the sequencer.
    e.handle(
        Instant(0),
        Input::Packet {
            port: PORT,
            packet: bad,
        },
    );
    assert!(drain(&mut e).is_empty());
    assert_eq!(e.stats().dropped_invalid, 2);
}

// --- Randomized runs -----------------------------------------------------------------------

const UNTIL_NS: u64 = 5_000_000;

fn run(nodes: Vec<BaseNode>, net: NetConfig, load: Workload, seed: u64) -> Net {
    let mut n = Net::new(nodes, PROCS, net, load, seed);
    n.run_until(UNTIL_NS);
    n
}

fn sequencer(n: &Net) -> &Sequencer {
    match &n.nodes[SEQ.index()] {
        BaseNode::Sequencer(s) => s,
        _ => unreachable!(),
    }
}

/// Every receiver caught up with everything the sequencer ordered for it.
fn assert_caught_up(n: &Net) {
    for i in 0..PROCS {
        let BaseNode::SeqEndpoint(e) = &n.nodes[i as usize] else {
            unreachable!()
        };
        assert_eq!(
            e.received_through(),
            sequencer(n).ordered_for(ProcId(i)),
            "receiver {i} stalled"
        );
    }
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
        assert_eq!(n.deliveries(), (PROCS * 40 * PROCS) as usize, "seed {seed}");
    }
}

#[test]
fn switch_placement_orders_exactly_as_host_placement_51() {
    for seed in SEEDS.take(5) {
        let host = run(
            group(PROCS, |_| {}),
            NetConfig::reordering(),
            Workload::broadcast(20),
            seed,
        );
        let switch = run(
            group(PROCS, |c| c.placement = SequencerPlacement::Switch),
            NetConfig::reordering(),
            Workload::broadcast(20),
            seed,
        );
        switch.check_order();
        assert_eq!(
            host.trace, switch.trace,
            "seed {seed}: the placement is the driver's"
        );
    }
    let g = BaseNode::group(Protocol::SequencerSwitch, 2);
    assert!(
        matches!(&g[2], BaseNode::Sequencer(s) if s.config().placement == SequencerPlacement::Switch)
    );
}

#[test]
fn subsets_use_per_receiver_sequences_and_recover_loss_20_seeds() {
    let (mut retransmitted, mut synced) = (0, 0);
    for seed in SEEDS {
        // Downstream loss only: every ordered message must reach all its destinations.
        let net = NetConfig {
            faulty: Some(vec![
                Opcode::Ordered,
                Opcode::Nack,
                Opcode::Lost,
                Opcode::SeqSync,
            ]),
            ..NetConfig::lossy(0.05, 0.02)
        };
        let n = run(group(PROCS, |_| {}), net, Workload::subsets(40), seed);
        n.check_order();
        n.check_complete();
        assert_caught_up(&n);
        assert_eq!(
            n.lost.iter().sum::<u64>(),
            0,
            "seed {seed}: the history is ample"
        );
        retransmitted += sequencer(&n).stats().retransmitted;
        synced += sequencer(&n).stats().heartbeats_sent;
    }
    assert!(
        retransmitted > 0 && synced > 0,
        "NACK repair and tail syncs were exercised"
    );
}

#[test]
fn loss_everywhere_keeps_receivers_in_agreement_20_seeds() {
    let mut skipped_upstream = 0;
    for seed in SEEDS {
        let n = run(
            group(PROCS, |_| {}),
            NetConfig::lossy(0.03, 0.02),
            Workload::broadcast(40),
            seed,
        );
        n.check_order();
        // A message lost before the sequencer is delivered by nobody; after it, by everyone.
        n.check_all_or_none();
        assert_caught_up(&n);
        let delivered: std::collections::BTreeSet<_> =
            n.delivered.iter().flatten().map(|d| (d.src, d.k)).collect();
        for f in n.failed_sends() {
            assert!(
                !delivered.contains(&f),
                "seed {seed}: {f:?} reported failed but delivered"
            );
        }
        skipped_upstream += n.failed_sends().len();
    }
    assert!(skipped_upstream > 0, "upstream loss was exercised");
}

#[test]
fn nack_beyond_the_history_is_answered_lost_and_nobody_stalls_20_seeds() {
    let mut lost = 0;
    for seed in SEEDS {
        let net = NetConfig {
            faulty: Some(vec![Opcode::Ordered]),
            ..NetConfig::lossy(0.1, 0.0)
        };
        let n = run(
            group(PROCS, |c| c.history_len_max = 4),
            net,
            Workload::broadcast(40),
            seed,
        );
        n.check_order();
        assert_caught_up(&n);
        for i in 0..PROCS as usize {
            assert_eq!(
                n.delivered[i].len() as u64 + n.lost[i],
                sequencer(&n).ordered_for(ProcId(i as u32)),
                "seed {seed}: receiver {i} delivered or gave up on everything"
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
        7,
    );
    let b = run(
        group(PROCS, |_| {}),
        NetConfig::lossy(0.03, 0.02),
        Workload::subsets(30),
        7,
    );
    assert_eq!(a.trace, b.trace);
    let c = run(
        group(PROCS, |_| {}),
        NetConfig::lossy(0.03, 0.02),
        Workload::subsets(30),
        8,
    );
    assert_ne!(a.trace, c.trace);
}

#[test]
fn endpoint_send_refuses_bad_input_with_typed_errors() {
    use onepipe_baselines::BaseSendError;
    let mut e = endpoint(0);
    let now = Instant(0);
    assert_eq!(
        e.send(now, Bytes::new(), Dests::list([])),
        Err(BaseSendError::NoDestinations)
    );
    assert_eq!(
        e.send(now, Bytes::new(), Dests::one(ProcId(PROCS))),
        Err(BaseSendError::UnknownDestination(ProcId(PROCS)))
    );
    let mut cfg = SeqEndpointConfig::new(ProcId(0), PROCS);
    cfg.send_queue_len_max = 2;
    cfg.payload_len_max = 8;
    let mut e = SeqEndpoint::new(cfg);
    assert_eq!(
        e.send(now, Bytes::from(vec![0; 9]), Dests::all()),
        Err(BaseSendError::TooLarge { len: 9, max: 8 })
    );
    assert!(e.send(now, Bytes::new(), Dests::all()).is_ok());
    assert!(e.send(now, Bytes::new(), Dests::all()).is_ok());
    assert_eq!(
        e.send(now, Bytes::new(), Dests::all()),
        Err(BaseSendError::Full)
    );
    drain(&mut e);
    assert!(e.send(now, Bytes::new(), Dests::all()).is_ok());
}
