//! The swarm's fixed seeds (issue 5: "about 20 fixed seeds run in `cargo test`"): each draws a
//! network, workload and fault mix (loss, bursts, targeted loss, duplication, reordering, skew,
//! host crashes) and must pass every checker and drain. A failure names the seed; `onepipe vopr
//! --seeds 1 --seed S --duration 300us` replays it (the test runs 300 µs of sending per seed, the
//! command 10 ms by default).

use onepipe_sim::vopr::{run_seed, Verdict};

#[test]
fn twenty_fixed_seeds_pass_safety_and_liveness() {
    let mut crashes = 0;
    let mut lossy = 0;
    for seed in 1..=20u64 {
        let o = run_seed(seed, 300_000);
        assert_eq!(
            o.verdict,
            Verdict::Ok,
            "seed {seed} ({}; faults {:?}): {:#?}",
            o.scenario,
            o.faults,
            o.detail
        );
        assert!(o.checked_deliveries > 0, "seed {seed}: nothing checked");
        crashes += o.faults.host_crashes;
        lossy += (o.packets_lost > 0) as u32;
    }
    // The seeds really exercise the faults.
    assert!(
        crashes > 0 && lossy > 0,
        "crashes {crashes}, lossy runs {lossy}"
    );
}
