//! Every baseline, built with its default knobs by `BaseNode::group`, orders correctly from a
//! group of one to a group of 16 under reordering, loss and duplication.

mod harness;

use harness::{Net, NetConfig, Workload};
use onepipe_baselines::{BaseNode, Protocol};

#[test]
fn default_groups_of_1_to_16_order_under_loss() {
    for protocol in Protocol::ALL {
        for (procs, seed) in [(1, 1), (2, 2), (3, 3), (8, 4), (16, 5)] {
            let lossless = procs == 1 || protocol == Protocol::Sequencer;
            let net = if lossless {
                NetConfig::reordering()
            } else {
                NetConfig::lossy(0.02, 0.01)
            };
            let mut n = Net::new(
                BaseNode::group(protocol, procs),
                procs,
                net,
                Workload::broadcast(12),
                seed,
            );
            n.run_until(5_000_000);
            n.check_order();
            let best_effort_upstream = matches!(
                protocol,
                Protocol::SequencerSwitch | Protocol::Plato | Protocol::PlatoFixed
            );
            if best_effort_upstream {
                // Upstream loss is best effort: delivered by all or by none.
                n.check_all_or_none();
            } else {
                n.check_complete();
            }
            if protocol == Protocol::Plato {
                n.check_hooks(true);
            }
            assert!(n.max_token_holders <= 1);
        }
    }
}
