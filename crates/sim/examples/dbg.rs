//! debug
use onepipe_sim::queue::RadixHeap;
use onepipe_sim::world::World;
use onepipe_sim::*;
fn main() {
    let cfg = SimConfig {
        topology: TopologySpec::Rack { hosts: 2 },
        clock_skew_ns: 0.0,
        clock_drift_ppm: 0.0,
        rate_per_proc: 20000.0,
        duration_ns: 100_000,
        beacon_interval_ns: 30_000,
        ..Default::default()
    };
    let mut w = World::new(cfg, RadixHeap::new()).unwrap();
    for step in 40..46 {
        w.run_until(step * 500, &mut |_| {});
        for h in w.hosts() {
            println!("t={} {:?} {:?}", step * 500, h.barrier(), h.stats());
        }
    }
}
