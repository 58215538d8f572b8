//! ToTo(n, φ) and all-ack over the causal layer (`onepipe_baselines::toto`): randomized runs on
//! the harness network over 20 seeds, with reordering, loss of every packet kind and
//! duplication. The rules themselves, the paper's Table 1 and a proptest over interleavings are
//! unit tests beside the code.

mod harness;

use harness::{Net, NetConfig, Workload, SEEDS};
use onepipe_baselines::toto::{Rule, TotoConfig, TotoEndpoint};
use onepipe_baselines::BaseNode;
use onepipe_proto::ProcId;

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
