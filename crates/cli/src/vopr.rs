//! `onepipe vopr`: the fault-injecting swarm over the simulator (`onepipe_sim::vopr`).

use crate::cli::parse_duration;
use clap::Args;
use onepipe_sim::vopr::{run_plato_seed, run_seed_with, Outcome, Verdict};

/// The flag that replays a seed in the same mode.
fn mode_flag(a: &VoprArgs) -> &'static str {
    if a.apps {
        " --apps"
    } else if a.plato {
        " --plato"
    } else {
        ""
    }
}

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
    #[arg(long, conflicts_with = "plato")]
    pub apps: bool,
    /// Run PLATO instead (docs/PLATO.md): each seed draws the swarm's network, workload and
    /// link faults (loss, duplication, reordering, skew), PLATO or its fixed sequencer, k, the
    /// batch flush and Δ; the baselines' order checker and PLATO's hooks checker judge it. Part
    /// of what a seed replays.
    #[arg(long)]
    pub plato: bool,
}

/// What the seeds came to, summed: verdicts, and the faults they drew and what those did.
#[derive(Default)]
struct Tally {
    ok: u64,
    correctness: u64,
    liveness: u64,
    crash: u64,
    checked: u64,
    lost: u64,
    duplicated: u64,
    crashes: u64,
    links_removed: u64,
    host_link_cuts: u64,
    switch_cuts: u64,
    link_cuts: u64,
    rounds: u64,
    declared: u64,
    recalled: u64,
    clock_steps: u64,
    stepped_runs: u64,
    ctrl_downs: u64,
    ctrl_lost: u64,
    forwarded: u64,
    forwarding_runs: u64,
    heals: u64,
    restarts: u64,
    recovered: u64,
    rejoined: u64,
    rejoined_traffic: u64,
    lossy: u64,
    dupy: u64,
    reordering: u64,
    targeted: u64,
    leaves: u64,
    joins_after_leave: u64,
}

impl Tally {
    /// Adds seed outcome `o`.
    fn add(&mut self, o: &Outcome) {
        self.checked += o.checked_deliveries;
        self.lost += o.packets_lost;
        self.duplicated += o.packets_duplicated;
        self.links_removed += o.links_removed;
        self.crashes += o.faults.host_crashes as u64;
        self.host_link_cuts += o.faults.host_link_cuts as u64;
        self.switch_cuts += o.faults.switch_cuts as u64;
        self.link_cuts += o.faults.link_cuts as u64;
        self.rounds += o.failure_rounds;
        self.declared += o.hosts_declared;
        self.recalled += o.recalled;
        self.clock_steps += o.faults.clock_steps as u64;
        self.stepped_runs += (o.faults.clock_steps > 0) as u64;
        self.ctrl_downs += o.faults.controller_downs as u64;
        self.ctrl_lost += o.ctrl_lost;
        self.forwarded += o.forwarded;
        self.forwarding_runs += (o.forwarded > 0) as u64;
        self.heals += o.faults.heals as u64;
        self.restarts += o.faults.restarts as u64;
        self.leaves += o.faults.leaves as u64;
        self.joins_after_leave += o.faults.rejoins_after_leave as u64;
        self.recovered += o.recovered;
        self.rejoined += o.rejoined;
        self.rejoined_traffic += o.rejoined_traffic;
        self.lossy += (o.faults.loss > 0.0) as u64;
        self.dupy += (o.faults.dup > 0.0) as u64;
        self.reordering += (o.faults.reorder > 0.0) as u64;
        self.targeted += o.faults.loss_kind.is_some() as u64;
        match o.verdict {
            Verdict::Ok => self.ok += 1,
            Verdict::Correctness => self.correctness += 1,
            Verdict::Liveness => self.liveness += 1,
            Verdict::Crash => self.crash += 1,
        }
    }

    /// The summary lines.
    fn print(&self, a: &VoprArgs) {
        let Tally {
            ok,
            correctness,
            liveness,
            crash,
            checked,
            lost,
            duplicated,
            crashes,
            links_removed,
            host_link_cuts,
            switch_cuts,
            link_cuts,
            rounds,
            declared,
            recalled,
            clock_steps,
            stepped_runs,
            ctrl_downs,
            ctrl_lost,
            forwarded,
            forwarding_runs,
            heals,
            restarts,
            recovered,
            rejoined,
            rejoined_traffic,
            lossy,
            dupy,
            reordering,
            targeted,
            leaves,
            joins_after_leave,
        } = self;
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
    }
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
    let mut t = Tally::default();
    let mut first_failure: Option<Verdict> = None;
    for seed in a.seed..a.seed.saturating_add(a.seeds) {
        let o = if a.plato {
            run_plato_seed(seed, a.duration)
        } else {
            run_seed_with(seed, a.duration, a.apps)
        };
        t.add(&o);
        if o.verdict != Verdict::Ok {
            first_failure.get_or_insert(o.verdict);
            println!(
                "seed {seed}: {:?} — {} — faults {:?} — replay: onepipe vopr --seeds 1 --seed {seed} --duration {}ns{}",
                o.verdict, o.scenario, o.faults, a.duration, mode_flag(a)
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
    t.print(a);
    first_failure.map_or(0, Verdict::exit_code)
}
