//! ToTo(n, φ) and all-ack over the causal layer (`onepipe_baselines::toto`): the rules the
//! planted bugs break (φ's range, only sources delivered, causal delivery), then randomized runs
//! on the harness network over 20 seeds, with reordering, loss of every packet kind and
//! duplication. The other rules, the paper's Table 1 and a proptest over interleavings are unit
//! tests beside the code.

mod harness;

use bytes::Bytes;
use harness::{Net, NetConfig, Workload, SEEDS};
use onepipe_baselines::toto::causal::{CausalConfig, CausalLayer, CausalMsg};
use onepipe_baselines::toto::dag::Dag;
use onepipe_baselines::toto::toto::{self as rules, check_phi, default_phi, future, PhiError};
use onepipe_baselines::toto::{allack, Rule, TotoConfig, TotoEndpoint};
use onepipe_baselines::{BaseNode, BasePacket, BaseStats, Body};
use onepipe_proto::{Instant, ProcId};

#[test]
fn phi_must_lie_in_half_n_to_n_4_2() {
    assert_eq!(check_phi(3, 8), Err(PhiError { phi: 3, n: 8 }));
    assert_eq!(check_phi(4, 8), Ok(()));
    assert_eq!(check_phi(7, 8), Ok(()));
    assert!(check_phi(8, 8).is_err());
    assert!(check_phi(1, 3).is_err());
    assert_eq!(check_phi(2, 3), Ok(()));
    let e = TotoEndpoint::new(TotoConfig::new(ProcId(0), 8, Rule::Toto { phi: 3 }))
        .expect_err("φ = 3 < 8/2");
    let text = e.to_string();
    assert!(text.contains("phi = 3") && text.contains("n = 8"), "{text}");
    assert_eq!(default_phi(8), 4);
    assert_eq!(default_phi(5), 3);
    assert!(TotoEndpoint::new(TotoConfig::new(ProcId(0), 8, Rule::Toto { phi: 4 })).is_ok());
}

/// Machines 0 and 1 each sent a candidate among n = 4; then machines 0, 2 and 3, in turn,
/// send a message following only `m_{0,1}`.
fn m0_wins_on_three_machines() -> Dag {
    let mut dag = Dag::new(4, 64);
    let mut add = |origin: u32, seq: u64, vt: [u64; 4], agreed: bool| {
        dag.add(CausalMsg {
            origin: ProcId(origin),
            seq,
            vt: vt.to_vec().into(),
            agreed,
            payload: Bytes::new(),
        })
    };
    add(0, 1, [1, 0, 0, 0], true);
    add(1, 1, [0, 1, 0, 0], true);
    add(0, 2, [2, 0, 0, 0], false);
    add(2, 1, [1, 0, 1, 0], false);
    add(3, 1, [1, 0, 0, 1], false);
    dag
}

#[test]
fn only_the_sources_are_delivered_once_the_rest_lose_for_good_4_2() {
    // m_{0,1} wins on three entries > φ = 2 and (DEL) 2(a) holds with NVT = 3; m_{1,1} is
    // beaten for good, so no source, and waits for the next set.
    let dag = m0_wins_on_three_machines();
    let rows = rules::table(&dag);
    assert!(future(&rows[0].vt, &rows[1].vt, 2).is_only_one());
    assert_eq!(rules::sources(&rows, 2), vec![0]);
    assert_eq!(rules::decide(&dag, 2), Some(vec![(ProcId(0), 1)]));
}

/// §5.2, Fig. 4: machine 0 of n = 4 sent the candidate `m_{0,1}`, machines 1 and 2 a message
/// following it; machine 3 crashed having sent nothing. With φ = 3 (and all-ack) nothing can
/// be delivered while 3 is silent: (DEL) 2(a) needs NVT > 3, 2(b) needs NTail = 4. Crash(3)
/// puts 3 in Tail with ∞ in every VT, and (DEL) 2(b) delivers.
#[test]
fn crash_puts_q_in_every_tail_and_del_proceeds_5_2() {
    let mut dag = Dag::new(4, 64);
    for (origin, vt, agreed) in [
        (0, [1, 0, 0, 0], true),
        (1, [1, 1, 0, 0], false),
        (2, [1, 0, 1, 0], false),
    ] {
        dag.add(CausalMsg {
            origin: ProcId(origin),
            seq: 1,
            vt: vt.to_vec().into(),
            agreed,
            payload: Bytes::new(),
        });
    }
    assert_eq!(rules::decide(&dag, 3), None);
    assert_eq!(allack::decide(&dag), None);
    dag.crash(ProcId(3));
    assert!(dag.tail().contains(&ProcId(3)), "Tail_p includes Defunc_p");
    let rows = rules::table(&dag);
    assert!(rows.iter().all(|r| r.vt[3] == rules::Vt::Inf), "{rows:?}");
    assert_eq!(rules::decide(&dag, 3), Some(vec![(ProcId(0), 1)]));
    assert_eq!(allack::decide(&dag), Some(vec![(ProcId(0), 1)]));
}

fn layer(id: u32, procs: u32) -> CausalLayer {
    CausalLayer::new(CausalConfig::new(ProcId(id), procs))
}

/// What `l` sends to `dst` (everything else it sends is dropped).
fn packets_to(l: &mut CausalLayer, dst: u32) -> Vec<BasePacket> {
    std::iter::from_fn(|| l.poll_packet())
        .filter(|p| p.dst == ProcId(dst))
        .collect()
}

fn delivered(l: &mut CausalLayer) -> Vec<(ProcId, u64)> {
    std::iter::from_fn(|| l.poll_deliver())
        .map(|m| (m.origin, m.seq))
        .collect()
}

const ROOM: &dyn Fn(ProcId) -> usize = &|_| usize::MAX;

#[test]
fn a_message_waits_for_its_causal_predecessor_2_1() {
    let t = Instant(0);
    let mut stats = BaseStats::default();
    let (mut l0, mut l1, mut l2) = (layer(0, 3), layer(1, 3), layer(2, 3));
    l0.send(t, true, Bytes::from_static(b"x"));
    let out: Vec<BasePacket> = std::iter::from_fn(|| l0.poll_packet()).collect();
    let to = |d: u32| out.iter().find(|p| p.dst == ProcId(d)).unwrap().clone();
    l1.on_packet(t, to(1), &mut stats, ROOM);
    assert_eq!(delivered(&mut l1), vec![(ProcId(0), 1)]);
    l1.send(t, true, Bytes::from_static(b"y"));
    let from1 = packets_to(&mut l1, 2);
    // m_{1,1} ACKs m_{0,1}: machine 2 holds it until m_{0,1} is there.
    assert!(matches!(&from1[0].body, Body::Causal { acks, .. } if acks.len() == 1));
    l2.on_packet(t, from1[0].clone(), &mut stats, ROOM);
    assert_eq!(delivered(&mut l2), vec![]);
    l2.on_packet(t, to(2), &mut stats, ROOM);
    assert_eq!(delivered(&mut l2), vec![(ProcId(0), 1), (ProcId(1), 1)]);
}

const PROCS: u32 = 5;
const UNTIL_NS: u64 = 20_000_000;

fn group(procs: u32, rule: Rule) -> Vec<BaseNode> {
    (0..procs)
        .map(|i| {
            let mut cfg = TotoConfig::new(ProcId(i), procs, rule);
            // The harness never retries a refused send: room for every message of a run.
            cfg.causal.unstable_len_max = 128;
            let e = TotoEndpoint::new(cfg).expect("φ in range");
            BaseNode::Toto(e)
        })
        .collect()
}

fn rules() -> [Rule; 3] {
    [Rule::Toto { phi: 3 }, Rule::Toto { phi: 4 }, Rule::AllAck]
}

fn run(rule: Rule, net: NetConfig, seed: u64) -> Net {
    let mut n = Net::new(
        group(PROCS, rule),
        PROCS,
        net,
        Workload::broadcast(30),
        seed,
    );
    n.run_until(UNTIL_NS);
    n
}

#[test]
fn toto_and_all_ack_order_all_to_all_under_reordering_20_seeds() {
    for rule in rules() {
        for seed in SEEDS {
            let n = run(rule, NetConfig::reordering(), seed);
            n.check_order();
            n.check_complete();
            assert!(
                n.nodes.iter().all(BaseNode::is_idle),
                "{rule:?} seed {seed}"
            );
        }
    }
}

#[test]
fn every_packet_kind_lost_or_duplicated_is_repaired_20_seeds() {
    let (mut retx, mut asks) = (0, 0);
    for rule in rules() {
        for seed in SEEDS {
            let n = run(rule, NetConfig::lossy(0.03, 0.02), seed);
            n.check_order();
            n.check_complete();
            for node in &n.nodes {
                retx += node.stats().retransmitted;
                asks += node.stats().nacks_sent;
            }
        }
    }
    assert!(retx > 0 && asks > 0, "both repairs were exercised");
}
