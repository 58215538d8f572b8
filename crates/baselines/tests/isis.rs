//! ISIS agreed order (Skeen's algorithm; [17]; the 1Pipe evaluation draft's scalability
//! comparison): scripted scenarios on one endpoint, then randomized runs on the harness network
//! over 20 seeds, with reordering, loss of every packet kind and duplication.

mod harness;

use bytes::Bytes;
use harness::{Net, NetConfig, Workload, SEEDS};
use onepipe_baselines::isis::{IsisConfig, IsisEndpoint};
use onepipe_baselines::packet::Opcode;
use onepipe_baselines::{BaseEvent, BaseNode, BasePacket, Body, Dests, Endpoint, PORT};
use onepipe_proto::{Input, Instant, Node, Output, ProcId};

const PROCS: u32 = 5;

fn group(procs: u32, tweak: impl Fn(&mut IsisConfig)) -> Vec<BaseNode> {
    (0..procs)
        .map(|i| {
            let mut cfg = IsisConfig::new(ProcId(i), procs);
            // The harness never retries a refused send: room for every message of a run.
            cfg.undecided_len_max = 64;
            tweak(&mut cfg);
            BaseNode::Isis(IsisEndpoint::new(cfg))
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

fn sent(outs: &[Output<BasePacket, BaseEvent>]) -> Vec<(ProcId, Body)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Send { packet, .. } => Some((packet.dst, packet.body.clone())),
            _ => None,
        })
        .collect()
}

fn from(src: u32, body: Body) -> Input<BasePacket> {
    Input::Packet {
        port: PORT,
        packet: BasePacket {
            src: ProcId(src),
            dst: ProcId(0),
            body,
        },
    }
}

fn propose(msg_id: u64, cseq: u64) -> Body {
    Body::Propose {
        msg_id,
        cseq,
        payload: Bytes::new(),
    }
}

#[test]
fn receivers_propose_and_the_sender_agrees_on_the_largest_skeen() {
    let mut e = IsisEndpoint::new(IsisConfig::new(ProcId(0), 3));
    e.send(Instant(0), Bytes::new(), Dests::all()).unwrap();
    let out = sent(&drain(&mut e));
    assert_eq!(out.len(), 2, "a Propose to each other destination");
    assert!(out.iter().all(|(_, b)| matches!(b, Body::Propose { .. })));
    // Its own proposal went through the loopback: 1.
    e.handle(Instant(1), from(1, Body::Proposal { msg_id: 0, ts: 5 }));
    assert!(sent(&drain(&mut e)).is_empty(), "still waiting for 2");
    e.handle(Instant(2), from(2, Body::Proposal { msg_id: 0, ts: 3 }));
    let outs = drain(&mut e);
    assert_eq!(
        sent(&outs),
        vec![
            (ProcId(1), Body::Final { msg_id: 0, ts: 5 }),
            (ProcId(2), Body::Final { msg_id: 0, ts: 5 })
        ],
        "the largest proposal is agreed"
    );
    assert_eq!(delivered(&outs), vec![(5, ProcId(0))]);
    assert_eq!(e.clock(), 5, "agreeing raises the clock");
}

#[test]
fn an_agreed_message_waits_behind_a_smaller_undecided_proposal_skeen() {
    let mut e = IsisEndpoint::new(IsisConfig::new(ProcId(0), 3));
    e.handle(Instant(0), from(1, propose(0, 0)));
    assert_eq!(
        sent(&drain(&mut e)),
        vec![(ProcId(1), Body::Proposal { msg_id: 0, ts: 1 })]
    );
    e.handle(Instant(0), from(2, propose(0, 0)));
    drain(&mut e);
    e.handle(Instant(1), from(2, Body::Final { msg_id: 0, ts: 2 }));
    assert!(
        delivered(&drain(&mut e)).is_empty(),
        "1's message, proposed at 1, may still be agreed below 2"
    );
    e.handle(Instant(2), from(1, Body::Final { msg_id: 0, ts: 3 }));
    assert_eq!(
        delivered(&drain(&mut e)),
        vec![(2, ProcId(2)), (3, ProcId(1))]
    );
    // Proposals after an agreement go above it.
    e.handle(Instant(3), from(1, propose(1, 1)));
    assert_eq!(
        sent(&drain(&mut e)),
        vec![(ProcId(1), Body::Proposal { msg_id: 1, ts: 4 })]
    );
}

#[test]
fn a_sender_agrees_in_send_order_each_above_the_last_fifo() {
    let mut e = IsisEndpoint::new(IsisConfig::new(ProcId(0), 3));
    e.send(
        Instant(0),
        Bytes::new(),
        Dests::list([ProcId(1), ProcId(2)]),
    )
    .unwrap();
    e.send(Instant(0), Bytes::new(), Dests::list([ProcId(1)]))
        .unwrap();
    drain(&mut e);
    // The second message's proposals are in first, and lower than the first's.
    e.handle(Instant(1), from(1, Body::Proposal { msg_id: 1, ts: 2 }));
    assert!(
        sent(&drain(&mut e)).is_empty(),
        "agreement goes in send order"
    );
    e.handle(Instant(1), from(1, Body::Proposal { msg_id: 0, ts: 1 }));
    e.handle(Instant(2), from(2, Body::Proposal { msg_id: 0, ts: 9 }));
    assert_eq!(
        sent(&drain(&mut e)),
        vec![
            (ProcId(1), Body::Final { msg_id: 0, ts: 9 }),
            (ProcId(2), Body::Final { msg_id: 0, ts: 9 }),
            (ProcId(1), Body::Final { msg_id: 1, ts: 10 }),
        ],
        "message 1 is agreed above message 0, though its proposal was 2"
    );
}

#[test]
fn an_unanswered_propose_is_sent_again_and_answered_with_the_same_proposal() {
    let mut e = IsisEndpoint::new(IsisConfig::new(ProcId(0), 2));
    e.send(Instant(0), Bytes::new(), Dests::all()).unwrap();
    drain(&mut e);
    let resent = (0..8)
        .find_map(|_| {
            let t = e.poll_timeout()?;
            e.handle(t, Input::Timeout);
            sent(&drain(&mut e))
                .into_iter()
                .find(|(_, b)| matches!(b, Body::Propose { .. }))
        })
        .expect("a re-sent Propose within a few ticks");
    assert_eq!(resent, (ProcId(1), propose(0, 0)));
    // A destination answers a duplicate with the proposal it made.
    let mut r = IsisEndpoint::new(IsisConfig::new(ProcId(0), 2));
    r.handle(Instant(0), from(1, propose(0, 0)));
    let first = sent(&drain(&mut r));
    r.handle(Instant(5), from(1, propose(0, 0)));
    assert_eq!(sent(&drain(&mut r)), first);
    assert_eq!(Endpoint::stats(&r).dropped_duplicate, 1);
}

#[test]
fn a_front_message_without_its_agreement_asks_the_sender() {
    let mut e = IsisEndpoint::new(IsisConfig::new(ProcId(0), 2));
    e.handle(Instant(0), from(1, propose(7, 0)));
    drain(&mut e);
    let asked = (0..8)
        .find_map(|_| {
            let t = e.poll_timeout()?;
            e.handle(t, Input::Timeout);
            sent(&drain(&mut e))
                .into_iter()
                .find(|(_, b)| matches!(b, Body::FinalRequest { .. }))
        })
        .expect("a FinalRequest within a few ticks");
    assert_eq!(asked, (ProcId(1), Body::FinalRequest { msg_id: 7 }));
    // The sender forgot it: the message is skipped and reported, not waited for for ever.
    e.handle(Instant(1_000_000), from(1, Body::Lost { seq: 7, count: 1 }));
    let outs = drain(&mut e);
    assert!(outs.iter().any(|o| matches!(
        o,
        Output::Event(BaseEvent::Lost {
            src: Some(ProcId(1)),
            count: 1,
            ..
        })
    )));
    assert!(e.is_idle());
}

#[test]
fn a_final_below_the_own_proposal_is_refused() {
    let mut e = IsisEndpoint::new(IsisConfig::new(ProcId(0), 2));
    e.handle(Instant(0), from(1, propose(0, 0)));
    e.handle(Instant(0), from(1, propose(1, 1)));
    drain(&mut e);
    e.handle(Instant(1), from(1, Body::Final { msg_id: 1, ts: 1 }));
    assert!(delivered(&drain(&mut e)).is_empty());
    assert_eq!(Endpoint::stats(&e).dropped_invalid, 1);
}

// --- Randomized runs -----------------------------------------------------------------------

const UNTIL_NS: u64 = 5_000_000;

fn run(nodes: Vec<BaseNode>, net: NetConfig, load: Workload, seed: u64) -> Net {
    run_for(nodes, net, load, seed, UNTIL_NS)
}

fn run_for(nodes: Vec<BaseNode>, net: NetConfig, load: Workload, seed: u64, until: u64) -> Net {
    let mut n = Net::new(nodes, PROCS, net, load, seed);
    n.run_until(until);
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
fn every_packet_kind_lost_or_duplicated_is_repaired_20_seeds() {
    let (mut retx, mut asks) = (0, 0);
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
            asks += node.stats().nacks_sent;
        }
    }
    assert!(retx > 0 && asks > 0, "both repairs were exercised");
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
fn lost_agreements_are_asked_for_20_seeds() {
    // Only proposals and finals are lost, and heavily: delivery must still finish. A message
    // whose agreement is lost again and again waits out backed-off timeouts (up to 8 × 50 µs
    // each), so the run gets longer than the others.
    for seed in SEEDS {
        let mut cfg = NetConfig::lossy(0.3, 0.0);
        cfg.faulty = Some(vec![Opcode::Proposal, Opcode::Final]);
        let n = run_for(
            group(PROCS, |_| {}),
            cfg,
            Workload::broadcast(20),
            seed,
            4 * UNTIL_NS,
        );
        n.check_order();
        n.check_complete();
    }
}

#[test]
fn small_history_gives_up_with_lost_markers_and_nobody_stalls_20_seeds() {
    let mut lost = 0;
    for seed in SEEDS {
        let mut cfg = NetConfig::lossy(0.2, 0.0);
        cfg.faulty = Some(vec![Opcode::Final]);
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
