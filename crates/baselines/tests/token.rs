//! Token ring ([86]; 1Pipe §7.2, Fig. 8): scripted scenarios on single endpoints, then
//! randomized runs on the harness network over 20 seeds, with token and data loss.

mod harness;

use bytes::Bytes;
use harness::{Net, NetConfig, Workload, SEEDS};
use onepipe_baselines::packet::Opcode;
use onepipe_baselines::token::{TokenConfig, TokenEndpoint};
use onepipe_baselines::{
    BaseEvent, BaseNode, BasePacket, BaseSendError, Body, Dests, Endpoint, Holding, Protocol, PORT,
};
use onepipe_proto::{Input, Instant, Node, Output, ProcId};

const PROCS: u32 = 5;

fn group(procs: u32, tweak: impl Fn(&mut TokenConfig)) -> Vec<BaseNode> {
    (0..procs)
        .map(|i| {
            let mut cfg = TokenConfig::new(ProcId(i), procs);
            tweak(&mut cfg);
            BaseNode::Token(TokenEndpoint::new(cfg))
        })
        .collect()
}

fn drain<N: Node<Mgmt = std::convert::Infallible>>(n: &mut N) -> Vec<Output<N::Packet, N::Event>> {
    std::iter::from_fn(|| n.poll_output()).collect()
}

fn sent(outs: &[Output<BasePacket, BaseEvent>]) -> Vec<BasePacket> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Send { packet, .. } => Some(packet.clone()),
            _ => None,
        })
        .collect()
}

fn pkt(src: u32, dst: u32, body: Body) -> Input<BasePacket> {
    Input::Packet {
        port: PORT,
        packet: BasePacket {
            src: ProcId(src),
            dst: ProcId(dst),
            body,
        },
    }
}

#[test]
fn holder_stamps_at_most_batch_max_per_holding_then_passes() {
    let mut cfg = TokenConfig::new(ProcId(0), 3);
    cfg.batch_max = 4;
    let mut e = TokenEndpoint::new(cfg);
    assert!(e.holds_token(), "process 0 starts with the token");
    // The first send uses the idle token at once: one message, then the token moves on.
    e.send(Instant(0), Bytes::from_static(b"m0"), Dests::all())
        .unwrap();
    let first = sent(&drain(&mut e));
    assert_eq!(
        first
            .iter()
            .filter(|p| p.opcode() == Opcode::TokenData)
            .count(),
        2
    );
    assert!(first.iter().any(|p| matches!(
        p.body,
        Body::TokenPass {
            seq: 1,
            pass: 1,
            ..
        }
    )));
    assert!(!e.holds_token());
    for i in 1..10 {
        e.send(Instant(1), Bytes::from(vec![i]), Dests::all())
            .unwrap();
    }
    assert_eq!(e.queued(), 9);
    // The token comes back round: exactly batch_max messages, then a pass.
    let token = Body::TokenPass {
        seq: 7,
        pass: 3,
        last: Some(Holding {
            holder: ProcId(2),
            start: 5,
        }),
    };
    e.handle(Instant(10), pkt(2, 0, token));
    let out = sent(&drain(&mut e));
    let gseqs: Vec<u64> = out
        .iter()
        .filter_map(|p| match p.body {
            Body::TokenData {
                gseq,
                holding_start: 7,
                prev:
                    Some(Holding {
                        holder: ProcId(2),
                        start: 5,
                    }),
                ..
            } => Some(gseq),
            _ => None,
        })
        .collect();
    assert_eq!(
        gseqs,
        vec![7, 7, 8, 8, 9, 9, 10, 10],
        "4 messages × 2 other members"
    );
    assert!(out
        .iter()
        .any(|p| matches!(p.body, Body::TokenAck { pass: 3 })));
    assert!(out.iter().any(|p| matches!(
        p.body,
        Body::TokenPass {
            seq: 11,
            pass: 4,
            last: Some(Holding {
                holder: ProcId(0),
                start: 7
            })
        }
    )));
    assert_eq!(e.queued(), 5);
}

#[test]
fn unacknowledged_token_is_retransmitted_and_duplicate_is_acked_not_used() {
    let mut a = TokenEndpoint::new(TokenConfig::new(ProcId(0), 2));
    a.handle(Instant(0), Input::Timeout);
    let pass = sent(&drain(&mut a));
    assert!(matches!(
        pass[..],
        [BasePacket {
            body: Body::TokenPass { pass: 1, .. },
            ..
        }]
    ));
    let rto = a.poll_timeout().expect("waiting for the ack");
    a.handle(rto, Input::Timeout);
    let again = sent(&drain(&mut a));
    assert_eq!(again, pass, "the same transfer, retransmitted");
    assert_eq!(a.stats().token_retransmits, 1);

    let mut b = TokenEndpoint::new(TokenConfig::new(ProcId(1), 2));
    let mut cfg_hold = TokenConfig::new(ProcId(1), 2);
    cfg_hold.idle_hold_ns = 1_000;
    let mut held = TokenEndpoint::new(cfg_hold);
    for e in [&mut b, &mut held] {
        e.handle(
            Instant(5),
            Input::Packet {
                port: PORT,
                packet: pass[0].clone(),
            },
        );
        drain(e);
        // The retransmitted copy: acknowledged again, but not a second token.
        e.handle(
            Instant(6),
            Input::Packet {
                port: PORT,
                packet: pass[0].clone(),
            },
        );
        let out = sent(&drain(e));
        assert!(matches!(
            out[..],
            [BasePacket {
                body: Body::TokenAck { pass: 1 },
                ..
            }]
        ));
        assert_eq!(e.stats().dropped_duplicate, 1);
    }
    assert!(held.holds_token(), "held idle for idle_hold_ns");
    assert!(!b.holds_token(), "passed at once with no idle hold");
}

#[test]
fn gap_is_nacked_to_the_holder_the_holding_chain_names() {
    let mut e = TokenEndpoint::new(TokenConfig::new(ProcId(3), PROCS));
    // gseq 6 from holder 2 whose holding starts at 6; the previous holding was 1's from 4.
    let data = Body::TokenData {
        gseq: 6,
        holding_start: 6,
        prev: Some(Holding {
            holder: ProcId(1),
            start: 4,
        }),
        addressed: true,
        payload: Bytes::new(),
    };
    e.handle(Instant(0), pkt(2, 3, data));
    let due = e.poll_timeout().unwrap();
    e.handle(due, Input::Timeout);
    let nacks = sent(&drain(&mut e));
    // 0..4 is not attributable yet; 4..6 belongs to holder 1.
    assert_eq!(nacks.len(), 1);
    assert_eq!(nacks[0].dst, ProcId(1));
    assert_eq!(
        nacks[0].body,
        Body::Nack {
            seq: 4,
            count: 2,
            index_lo: 4,
            index_hi: 6
        }
    );
}

#[test]
fn ring_of_one_delivers_at_once() {
    let mut e = TokenEndpoint::new(TokenConfig::new(ProcId(0), 1));
    e.handle(Instant(0), Input::Timeout);
    for i in 0..3u8 {
        e.send(Instant(1), Bytes::from(vec![i]), Dests::all())
            .unwrap();
    }
    let outs = drain(&mut e);
    let delivered: Vec<u64> = outs
        .iter()
        .filter_map(|o| match o {
            Output::Event(BaseEvent::Deliver { seq_or_ts, .. }) => Some(*seq_or_ts),
            _ => None,
        })
        .collect();
    assert_eq!(delivered, vec![0, 1, 2]);
    assert!(sent(&outs).is_empty(), "nothing to send to anyone");
}

#[test]
fn full_queue_is_a_typed_error() {
    let mut cfg = TokenConfig::new(ProcId(1), 3);
    cfg.send_queue_len_max = 2;
    let mut e = TokenEndpoint::new(cfg);
    let now = Instant(0);
    e.send(now, Bytes::new(), Dests::all()).unwrap();
    e.send(now, Bytes::new(), Dests::all()).unwrap();
    assert_eq!(
        e.send(now, Bytes::new(), Dests::all()),
        Err(BaseSendError::Full)
    );
}

// --- Randomized runs -----------------------------------------------------------------------

const UNTIL_NS: u64 = 5_000_000;

fn run(nodes: Vec<BaseNode>, net: NetConfig, load: Workload, seed: u64) -> Net {
    let mut n = Net::new(nodes, PROCS, net, load, seed);
    n.run_until(UNTIL_NS);
    assert!(n.max_token_holders <= 1, "seed {seed}: two tokens");
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
fn token_and_data_loss_are_repaired_20_seeds() {
    let (mut retx, mut nacks) = (0, 0);
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
            retx += node.stats().token_retransmits;
            nacks += node.stats().nacks_sent;
        }
    }
    assert!(
        retx > 0 && nacks > 0,
        "token retransmission and NACKs were exercised"
    );
}

#[test]
fn subsets_are_ordered_through_fillers_20_seeds() {
    for seed in SEEDS {
        let mut cfg = NetConfig::lossy(0.03, 0.01);
        cfg.faulty = Some(vec![Opcode::TokenData, Opcode::Nack, Opcode::TokenLost]);
        let n = run(
            group(PROCS, |c| c.batch_max = 3),
            cfg,
            Workload::subsets(40),
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
        cfg.faulty = Some(vec![Opcode::TokenData]);
        let n = run(
            group(PROCS, |c| c.history_len_max = 2),
            cfg,
            Workload::broadcast(40),
            seed,
        );
        n.check_order();
        let total = PROCS as u64 * 40;
        for (i, node) in n.nodes.iter().enumerate() {
            let BaseNode::Token(e) = node else {
                unreachable!()
            };
            assert_eq!(
                e.received_through(),
                total,
                "seed {seed}: member {i} stalled"
            );
            assert_eq!(n.delivered[i].len() as u64 + n.lost[i], total);
        }
        lost += n.lost.iter().sum::<u64>();
    }
    assert!(lost > 0, "the TokenLost marker was exercised");
}

#[test]
fn same_seed_same_trace() {
    let a = run(
        group(PROCS, |_| {}),
        NetConfig::lossy(0.03, 0.02),
        Workload::subsets(30),
        3,
    );
    let b = run(
        group(PROCS, |_| {}),
        NetConfig::lossy(0.03, 0.02),
        Workload::subsets(30),
        3,
    );
    assert_eq!(a.trace, b.trace);
    let default = BaseNode::group(Protocol::Token, PROCS);
    let c = run(
        default,
        NetConfig::lossy(0.03, 0.02),
        Workload::subsets(30),
        3,
    );
    assert_eq!(a.trace, c.trace, "BaseNode::group builds the same defaults");
}
