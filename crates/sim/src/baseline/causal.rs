//! The causal-order check of a ToTo or all-ack run (the agreed multicast service of the ToTo
//! paper, Fig. 2: "if m' follows m, all machines that deliver m and m' deliver m before m'"),
//! written from what the run recorded, apart from the protocol code.
//!
//! At each send the check notes what the sender had delivered by then (per sender, the latest
//! message) and its own previous send: the messages the new one causally follows (§2.1's
//! `receive_q(m) → send_q(m')` and `send_q(m) → send_q(m')`). At each delivery it checks the
//! receiver had already delivered every one of them. What it sees is application deliveries
//! only, so it checks the causal order those create (the protocol's own heartbeats are
//! invisible to it): a sound check, not a complete one.

/// Most violations kept with their details (all are counted).
const SAMPLES_MAX: usize = 16;

/// The check of one run. See the module docs.
#[derive(Debug)]
pub struct CausalCheck {
    procs: usize,
    /// `seen[r * procs + s]`: the latest message of `s` process `r` delivered (its workload
    /// sequence number + 1; 0: none).
    seen: Vec<u64>,
    /// Per sender, per message (by workload sequence number): what it follows, in the same
    /// form as `seen`'s rows.
    deps: Vec<Vec<Box<[u64]>>>,
    checked: u64,
    violations: u64,
    samples: Vec<String>,
}

impl CausalCheck {
    /// A check for processes `0..procs`.
    pub fn new(procs: u32) -> CausalCheck {
        let n = procs as usize;
        CausalCheck {
            procs: n,
            seen: vec![0; n * n],
            deps: vec![Vec::new(); n],
            checked: 0,
            violations: 0,
            samples: Vec::new(),
        }
    }

    /// Process `src` sent its message number `seq` (from 0, in send order).
    pub fn on_send(&mut self, src: u32, seq: u64) {
        let s = src as usize;
        assert_eq!(
            self.deps[s].len() as u64,
            seq,
            "sends are numbered in order"
        );
        let mut deps: Box<[u64]> = self.seen[s * self.procs..(s + 1) * self.procs].into();
        // Its own previous send precedes it (§2.1, rule 2).
        deps[s] = deps[s].max(seq);
        self.deps[s].push(deps);
    }

    /// Process `dst` delivered message `seq` of `src` at true time `t`.
    pub fn on_deliver(&mut self, t: u64, dst: u32, src: u32, seq: u64) {
        let (d, s) = (dst as usize, src as usize);
        let Some(deps) = self.deps[s].get(seq as usize) else {
            // Never sent: the phantom check of the order checker reports it.
            return;
        };
        self.checked += 1;
        let row = &mut self.seen[d * self.procs..(d + 1) * self.procs];
        if let Some(q) = (0..self.procs).find(|&q| row[q] < deps[q]) {
            self.violations += 1;
            if self.samples.len() < SAMPLES_MAX {
                self.samples.push(format!(
                    "[causal] at {t} ns: p{d} delivered ({s}, {seq}) before ({q}, {}), which it follows",
                    deps[q] - 1
                ));
            }
        }
        row[s] = row[s].max(seq + 1);
    }

    /// Deliveries checked.
    pub fn checked(&self) -> u64 {
        self.checked
    }

    /// Violations found.
    pub fn violations(&self) -> u64 {
        self.violations
    }

    /// The first violations, described.
    pub fn samples(&self) -> &[String] {
        &self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_before_a_message_its_sender_had_delivered_is_caught() {
        let mut c = CausalCheck::new(3);
        c.on_send(0, 0);
        c.on_deliver(10, 1, 0, 0);
        c.on_send(1, 0); // follows (0, 0)
        c.on_deliver(20, 2, 1, 0);
        assert_eq!(c.violations(), 1);
        assert!(c.samples()[0].contains("p2 delivered (1, 0) before (0, 0)"));
        c.on_deliver(30, 2, 0, 0);
        c.on_deliver(40, 0, 0, 0);
        c.on_deliver(50, 0, 1, 0);
        assert_eq!((c.violations(), c.checked()), (1, 5));
    }

    /// ToTo (φ = ⌈n/2⌉ and φ = n − 1) and all-ack on the simulator over 20 seeds, with loss,
    /// duplication and reordering: every checker passes, the causal check saw every delivery,
    /// the run drains, and a seed replays to the same trace.
    #[test]
    fn toto_and_all_ack_pass_the_checkers_with_faults_20_seeds() {
        use crate::baseline::{run_baseline, BaselineConfig};
        use crate::{NetworkConfig, SimConfig, TopologySpec, WorkloadConfig};
        use onepipe_baselines::Protocol;
        let mut bases = vec![
            BaselineConfig::new(Protocol::Toto),
            BaselineConfig::new(Protocol::AllAck),
        ];
        bases.push(BaselineConfig {
            toto_phi: Some(4),
            ..BaselineConfig::new(Protocol::Toto)
        });
        for seed in 1..=20u64 {
            let mut cfg = SimConfig {
                seed,
                net: NetworkConfig {
                    topology: TopologySpec::Rack { hosts: 5 },
                    ..Default::default()
                },
                workload: WorkloadConfig {
                    duration_ns: 1_000_000,
                    drain_ns: 20_000_000,
                    rate_per_proc: 50_000.0,
                    ..Default::default()
                },
                ..SimConfig::default()
            };
            cfg.faults.loss_rate = 0.02;
            cfg.faults.dup_rate = 0.01;
            cfg.faults.reorder_prob = 0.05;
            let base = &bases[seed as usize % bases.len()];
            let r = run_baseline(&cfg, base, &mut |_| {}).expect("valid configuration");
            let what = format!("{} φ {:?} seed {seed}", r.protocol, base.toto_phi);
            assert_eq!(r.violations, 0, "{what}: {:#?}", r.violation_samples);
            assert!(
                r.drained && r.delivered == r.sent && r.sent > 0,
                "{what}: {r:?}"
            );
            assert_eq!(r.causal_checked, Some(r.delivered), "{what}");
            if seed <= 3 {
                let again = run_baseline(&cfg, base, &mut |_| {}).expect("valid");
                assert_eq!(again.trace_hash, r.trace_hash, "{what}: not deterministic");
            }
        }
    }

    #[test]
    fn a_senders_own_earlier_message_comes_first() {
        let mut c = CausalCheck::new(2);
        c.on_send(0, 0);
        c.on_send(0, 1);
        c.on_deliver(1, 1, 0, 1);
        assert_eq!(c.violations(), 1);
    }
}
