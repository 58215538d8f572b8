//! `onepipe vopr`: the fault-injecting swarm over the simulator (`onepipe_sim::vopr`).

use crate::cli::parse_duration;
use clap::Args;
use onepipe_sim::vopr::{run_seed_with, Verdict};

/// Flags of `onepipe vopr`.
#[derive(Args, Debug)]
pub struct VoprArgs {
    /// How many seeds to run, starting at --seed.
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// The first seed; with --seeds 1 it replays exactly that seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Sending time per seed (simulated); part of what a seed replays. The default, 15 ms,
    /// makes `--seeds 200` check more than 10^7 deliveries.
    #[arg(long, default_value = "15ms", value_parser = parse_duration)]
    pub duration: u64,
    /// Print every seed's line, not only failures.
    #[arg(long)]
    pub verbose: bool,
    /// Draw applications too: a third of the seeds (those with at least 4 processes) run the
    /// replicated key-value service (1-RTT replication, 3 or 5 replicas) in place of the
    /// synthetic workload, its checkers added to 1Pipe's; a quarter of the rest run the service
    /// on MultiPaxos on direct messages (the network's faults and host crashes, half of them
    /// the leader's). Part of what a seed replays.
    #[arg(long)]
    pub apps: bool,
}

/// Runs the swarm; returns the exit code: 0 all passed, otherwise that of the first failing
/// seed — 1 correctness (a checker fired), 3 liveness (a run did not drain), 4 crash (a panic).
pub fn vopr(a: &VoprArgs) -> i32 {
    if a.seeds == 0 {
        eprintln!("onepipe vopr: --seeds: must be at least 1");
        return crate::cli::EXIT_USAGE;
    }
    if a.duration < 10_000 {
        eprintln!("onepipe vopr: --duration: must be at least 10us");
        return crate::cli::EXIT_USAGE;
    }
    let (mut ok, mut correctness, mut liveness, mut crash) = (0u64, 0u64, 0u64, 0u64);
    let (mut checked, mut lost, mut duplicated, mut crashes, mut links_removed) = (0, 0, 0, 0, 0);
    let (mut host_link_cuts, mut switch_cuts, mut link_cuts) = (0u64, 0u64, 0u64);
    let (mut rounds, mut declared, mut recalled) = (0u64, 0u64, 0u64);
    let (mut clock_steps, mut stepped_runs, mut ctrl_downs, mut ctrl_lost) =
        (0u64, 0u64, 0u64, 0u64);
    let (mut forwarded, mut forwarding_runs) = (0u64, 0u64);
    let (mut heals, mut restarts, mut recovered, mut rejoined, mut rejoined_traffic) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut lossy, mut dupy, mut reordering, mut targeted) = (0, 0, 0, 0);
    let (mut leaves, mut joins_after_leave) = (0u64, 0u64);
    let mut first_failure: Option<Verdict> = None;
    for seed in a.seed..a.seed.saturating_add(a.seeds) {
        let o = run_seed_with(seed, a.duration, a.apps);
        checked += o.checked_deliveries;
        lost += o.packets_lost;
        duplicated += o.packets_duplicated;
        links_removed += o.links_removed;
        crashes += o.faults.host_crashes as u64;
        host_link_cuts += o.faults.host_link_cuts as u64;
        switch_cuts += o.faults.switch_cuts as u64;
        link_cuts += o.faults.link_cuts as u64;
        rounds += o.failure_rounds;
        declared += o.hosts_declared;
        recalled += o.recalled;
        clock_steps += o.faults.clock_steps as u64;
        stepped_runs += (o.faults.clock_steps > 0) as u64;
        ctrl_downs += o.faults.controller_downs as u64;
        ctrl_lost += o.ctrl_lost;
        forwarded += o.forwarded;
        forwarding_runs += (o.forwarded > 0) as u64;
        heals += o.faults.heals as u64;
        restarts += o.faults.restarts as u64;
        leaves += o.faults.leaves as u64;
        joins_after_leave += o.faults.rejoins_after_leave as u64;
        recovered += o.recovered;
        rejoined += o.rejoined;
        rejoined_traffic += o.rejoined_traffic;
        lossy += (o.faults.loss > 0.0) as u64;
        dupy += (o.faults.dup > 0.0) as u64;
        reordering += (o.faults.reorder > 0.0) as u64;
        targeted += o.faults.loss_kind.is_some() as u64;
        match o.verdict {
            Verdict::Ok => ok += 1,
            Verdict::Correctness => correctness += 1,
            Verdict::Liveness => liveness += 1,
            Verdict::Crash => crash += 1,
        }
        if o.verdict != Verdict::Ok {
            first_failure.get_or_insert(o.verdict);
            println!(
                "seed {seed}: {:?} — {} — faults {:?} — replay: onepipe vopr --seeds 1 --seed {seed} --duration {}ns{}",
                o.verdict, o.scenario, o.faults, a.duration, if a.apps { " --apps" } else { "" }
            );
            for d in &o.detail {
                println!("    {d}");
            }
        } else if a.verbose {
            println!(
                "seed {seed}: ok, {} checked deliveries — {} — faults {:?}",
                o.checked_deliveries, o.scenario, o.faults
            );
        }
    }
    println!(
        "onepipe vopr — seeds {}..={}: {ok} ok, {correctness} correctness, {liveness} liveness, {crash} crash",
        a.seed,
        a.seed.saturating_add(a.seeds - 1)
    );
    println!("  checked_deliveries {checked}");
    println!(
        "  faults: host crashes {crashes}, host link cuts {host_link_cuts}, switch failures {switch_cuts}, switch link cuts {link_cuts} (links removed {links_removed}; §5.2 rounds {rounds}, hosts declared failed {declared}, scatterings recalled {recalled}), lossy runs {lossy} (packets lost {lost}), targeted-loss runs {targeted}, duplicating runs {dupy} (packets duplicated {duplicated}), reordering runs {reordering}, clock steps {clock_steps} (runs {stepped_runs}), controller outages {ctrl_downs} (control messages lost {ctrl_lost}); §5.2 forwarded {forwarded} (runs {forwarding_runs})"
    );
    println!(
        "  recoveries: cuts healed {heals}, crashed hosts restarted {restarts}; §5.2 hosts recovered {recovered}, rejoined as new processes {rejoined} (their messages delivered {rejoined_traffic})"
    );
    println!(
        "  membership: hosts left gracefully {leaves}, of which joined again later {joins_after_leave}"
    );
    first_failure.map_or(0, Verdict::exit_code)
}
