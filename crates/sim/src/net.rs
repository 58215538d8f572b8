//! What both simulator engines (1Pipe's `world` and the baselines' `baseline::world`) model
//! the same way: bursty link loss and the workload's Poisson send times. A step toward one
//! engine for every protocol (issue 23): each piece moves here once, pinned by the trace hashes.

use crate::config::SimConfig;
use crate::queue::SimTime;
use onepipe_proto::rng::Rng;

/// Bursty loss on one link (`--loss-rate`, `--loss-burst`): a packet is lost while a burst is
/// under way, or starts one with probability `loss_rate`; a burst loses `loss_burst` packets in
/// a row. Draws from `rng` only when no burst is under way.
pub(crate) fn lose_bursty(burst_left: &mut u32, rng: &mut Rng, cfg: &SimConfig) -> bool {
    if *burst_left > 0 {
        *burst_left -= 1;
        return true;
    }
    if rng.chance(cfg.loss_rate) {
        *burst_left = cfg.loss_burst - 1;
        return true;
    }
    false
}

/// The time to a process's next send: exponential with mean `1 / rate_per_s` (a Poisson
/// process), at least 1 ns.
pub(crate) fn poisson_gap(rng: &mut Rng, rate_per_s: f64) -> SimTime {
    let mean = 1e9 / rate_per_s;
    (rng.exponential(mean).round() as SimTime).max(1)
}
