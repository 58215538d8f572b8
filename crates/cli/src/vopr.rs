//! `onepipe vopr`: the fault-injecting swarm over the simulator (`onepipe_sim::vopr`).
//!
//! Each seed is an independent deterministic simulation, so the seeds run on `--jobs` threads
//! (all the machine's cores by default). The threads take seeds from a shared counter; the main
//! thread puts what they find back in seed order ([`InOrder`]) before it prints or counts
//! anything, so stdout is the same whatever `--jobs` — but for the last line, the rates, which
//! holds wall time. While it runs, a progress line goes to stderr if stderr is a terminal.
//!
//! This module is not the swarm: what a seed draws and how it is judged is `onepipe_sim::vopr`.

use crate::cli::parse_duration;
use clap::Args;
use onepipe_sim::vopr::{
    run_baseline_seed, run_seed_with, run_tree_seed, BaselineDraw, Outcome, Verdict,
};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Most threads `--jobs` takes.
const JOBS_MAX: u32 = 1024;

/// Outcomes a thread may finish ahead of the lowest seed not yet handled, per job: a thread
/// that took a seed further ahead waits before running it, so the reorder buffer holds fewer
/// than this many times `--jobs` outcomes. Seeds' times vary widely (in `--seeds 40` one seed
/// is a third of the work): scheduled on their measured times, 2 threads can reach 1.81× one
/// with 4 per job and 1.90× with 8; an outcome is about a kilobyte.
const AHEAD_PER_JOB_MAX: u64 = 8;

/// Most redraws of the progress line a second.
const PROGRESS_HZ: u8 = 4;

/// The flag that replays a seed in the same mode.
fn mode_flag(a: &VoprArgs) -> &'static str {
    if a.apps {
        " --apps"
    } else if a.plato {
        " --plato"
    } else if a.toto {
        " --toto"
    } else if a.tree {
        " --tree"
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
    #[arg(long, conflicts_with_all = ["plato", "toto", "tree"])]
    pub apps: bool,
    /// Run PLATO instead (docs/PLATO.md): each seed draws the swarm's network, workload and
    /// link faults (loss, duplication, reordering, skew), PLATO or its fixed sequencer, k, the
    /// batch flush and Δ; the baselines' order checker and PLATO's hooks checker judge it. Part
    /// of what a seed replays.
    #[arg(long, conflicts_with_all = ["toto", "tree"])]
    pub plato: bool,
    /// Run ToTo instead (docs/TOTO.md): each seed draws the swarm's network and link faults
    /// (loss, duplication, reordering, skew), all-to-all sends at 2,000–10,000/s per process, ToTo with φ from ⌈n/2⌉ to n − 1
    /// or all-ack, and the heartbeat interval; the baselines' order checker and the causal-order
    /// check judge it. Part of what a seed replays.
    #[arg(long, conflicts_with = "tree")]
    pub toto: bool,
    /// Run 1Pipe on the simulator's tree fabric instead (docs/ARCHITECTURE.md): each seed
    /// draws a tree of the live runtime's aggregators (1–3 layers, 2–12 hosts, chip or host
    /// mode), the swarm's traffic and the faults that make sense on a tree (loss, duplication,
    /// reordering, skew and clock steps, host crashes and restarts, cuts and heals, controller
    /// outages, leaves); 1Pipe's checkers judge it. Part of what a seed replays.
    #[arg(long)]
    pub tree: bool,
    /// Seeds run at once, each on a thread of its own (default: the machine's cores, as
    /// `std::thread::available_parallelism` counts them); 1 runs them one after another on the
    /// main thread. The output is in seed order and the same whatever the number, but for the
    /// last line (the rates).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=JOBS_MAX as i64))]
    pub jobs: Option<u32>,
}

impl VoprArgs {
    /// The seeds to run.
    fn seed_range(&self) -> Range<u64> {
        self.seed..self.seed.saturating_add(self.seeds)
    }

    /// Threads to run seeds on: `--jobs`, or the machine's cores; no more than seeds.
    fn jobs(&self) -> usize {
        let cores = || std::thread::available_parallelism().map_or(1, |n| n.get());
        let jobs = self.jobs.map_or_else(cores, |j| j as usize);
        let seeds = usize::try_from(self.seeds).unwrap_or(usize::MAX);
        jobs.clamp(1, seeds.clamp(1, JOBS_MAX as usize))
    }
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

/// The rates line, last of the tally: the one line that differs between runs of the same seeds.
fn print_rates(t: &Tally, seeds: u64, wall: Duration, jobs: usize) {
    let hours = wall.as_secs_f64().max(1e-9) / 3600.0;
    println!(
        "  rates: {:.1} s wall, {:.0} seeds/hour, {:.0} checked deliveries/hour (--jobs {jobs})",
        wall.as_secs_f64(),
        seeds as f64 / hours,
        t.checked as f64 / hours
    );
}

/// The progress line on stderr: seeds done of all, failures, seeds an hour and the time left,
/// redrawn at most [`PROGRESS_HZ`] times a second; hidden when stderr is not a terminal, so a
/// log gets nothing per seed.
fn progress_bar(seeds: u64) -> indicatif::ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        indicatif::ProgressDrawTarget::stderr_with_hz(PROGRESS_HZ)
    } else {
        indicatif::ProgressDrawTarget::hidden()
    };
    let bar = indicatif::ProgressBar::with_draw_target(Some(seeds), target);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "vopr {pos}/{len} seeds, {msg}, {elapsed} elapsed, ~{eta} left",
        )
        .expect("valid template"),
    );
    bar.set_message("0 failed");
    bar
}

/// Prints what seed `o` found: its failure and replay command, or with `--verbose` its line.
fn print_outcome(a: &VoprArgs, o: &Outcome) {
    let seed = o.seed;
    if o.verdict != Verdict::Ok {
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
    let jobs = a.jobs();
    let seeds = a.seed_range();
    let count = seeds.end - seeds.start;
    let bar = progress_bar(count);
    let start = Instant::now();
    let mut t = Tally::default();
    let mut first_failure: Option<Verdict> = None;
    let run = |seed| {
        let o = if a.plato {
            run_baseline_seed(seed, a.duration, BaselineDraw::Plato)
        } else if a.toto {
            run_baseline_seed(seed, a.duration, BaselineDraw::Toto)
        } else if a.tree {
            run_tree_seed(seed, a.duration)
        } else {
            run_seed_with(seed, a.duration, a.apps)
        };
        assert_eq!(o.seed, seed);
        o
    };
    in_seed_order(seeds, jobs, run, |o: Outcome| {
        t.add(&o);
        if o.verdict != Verdict::Ok {
            first_failure.get_or_insert(o.verdict);
        }
        if o.verdict != Verdict::Ok || a.verbose {
            bar.suspend(|| print_outcome(a, &o));
        }
        let failures = t.correctness + t.liveness + t.crash;
        let hours = start.elapsed().as_secs_f64().max(1e-9) / 3600.0;
        let done = bar.position() + 1;
        bar.set_message(format!(
            "{failures} failed, {:.0} seeds/hour",
            done as f64 / hours
        ));
        bar.set_position(done);
    });
    bar.finish_and_clear();
    t.print(a);
    print_rates(&t, count, start.elapsed(), jobs);
    first_failure.map_or(0, Verdict::exit_code)
}

/// Results that finished out of order, handed on in order: a reorder buffer keyed by seed.
struct InOrder<T> {
    /// The next seed to hand on.
    next: u64,
    /// Finished seeds above `next`, fewer than `ahead_max`.
    ahead: BTreeMap<u64, T>,
    /// See `ahead`.
    ahead_max: u64,
}

impl<T> InOrder<T> {
    /// An empty buffer whose first seed is `first`.
    fn new(first: u64, ahead_max: u64) -> InOrder<T> {
        assert!(ahead_max > 0);
        InOrder {
            next: first,
            ahead: BTreeMap::new(),
            ahead_max,
        }
    }

    /// Takes seed `seed`'s result. A seed handed on or held already is a bug (it ran twice),
    /// and so is one `ahead_max` or more seeds ahead of `next` (no thread runs it so early).
    fn push(&mut self, seed: u64, t: T) {
        assert!(seed >= self.next, "seed {seed} ran twice");
        assert!(
            seed - self.next < self.ahead_max,
            "seed {seed} ran too early"
        );
        let held = self.ahead.insert(seed, t);
        assert!(held.is_none(), "seed {seed} ran twice");
    }

    /// The next seed's result, once it has come.
    fn pop(&mut self) -> Option<T> {
        let t = self.ahead.remove(&self.next)?;
        self.next += 1;
        Some(t)
    }
}

/// What the threads of [`in_seed_order`] share.
struct Shared<'a, F> {
    /// Runs one seed.
    run: &'a F,
    /// The next seed to take.
    next: AtomicU64,
    /// The end of the seeds.
    end: u64,
    /// The lowest seed not handed on yet; a thread waits on `handed_moved` while the seed it
    /// took is `ahead_max` or more above it.
    handed: Mutex<u64>,
    /// See `handed`.
    handed_moved: Condvar,
    /// See `handed`.
    ahead_max: u64,
    /// A thread panicked: the others stop, so the panic ends the run instead of a wait.
    stop: AtomicBool,
}

/// Sets `stop` when a thread of [`in_seed_order`] unwinds, the main one too (a failed print),
/// and wakes the threads that wait.
struct StopOnPanic<'s, 'a, F>(&'s Shared<'a, F>);

impl<F> Drop for StopOnPanic<'_, '_, F> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Under the lock, so a thread between its check of `stop` and its wait still wakes.
            let handed = self.0.handed.lock().unwrap_or_else(PoisonError::into_inner);
            self.0.stop.store(true, Ordering::SeqCst);
            drop(handed);
            self.0.handed_moved.notify_all();
        }
    }
}

/// One thread of [`in_seed_order`]: takes seeds until none is left, sends each result on.
fn worker<T, F: Fn(u64) -> T>(sh: &Shared<'_, F>, results: mpsc::Sender<(u64, T)>) {
    let _stop = StopOnPanic(sh);
    let take = |n: u64| (n < sh.end).then(|| n + 1);
    while let Ok(seed) = sh
        .next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
    {
        let mut handed = sh.handed.lock().unwrap_or_else(PoisonError::into_inner);
        while seed - *handed >= sh.ahead_max && !sh.stop.load(Ordering::SeqCst) {
            handed = sh
                .handed_moved
                .wait(handed)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(handed);
        if sh.stop.load(Ordering::SeqCst) || results.send((seed, (sh.run)(seed))).is_err() {
            return;
        }
    }
}

/// Runs `run` on every seed of `seeds` on `jobs` threads (1: on this thread) and hands each
/// result to `each` in seed order, whatever order they finish in. The threads take the next
/// seed from a shared counter, so no seed runs twice; one that took a seed
/// [`AHEAD_PER_JOB_MAX`] × `jobs` or more above the lowest not handed on waits before running
/// it, so the reorder buffer stays that small.
fn in_seed_order<T: Send, F: Fn(u64) -> T + Sync>(
    seeds: Range<u64>,
    jobs: usize,
    run: F,
    mut each: impl FnMut(T),
) {
    if jobs <= 1 {
        seeds.for_each(|seed| each(run(seed)));
        return;
    }
    let ahead_max = AHEAD_PER_JOB_MAX * jobs as u64;
    let sh = Shared {
        run: &run,
        next: AtomicU64::new(seeds.start),
        end: seeds.end,
        handed: Mutex::new(seeds.start),
        handed_moved: Condvar::new(),
        ahead_max,
        stop: AtomicBool::new(false),
    };
    let mut buf = InOrder::new(seeds.start, ahead_max);
    std::thread::scope(|s| {
        let _stop = StopOnPanic(&sh);
        let (tx, rx) = mpsc::channel();
        for _ in 0..jobs {
            let tx = tx.clone();
            s.spawn(|| worker(&sh, tx));
        }
        drop(tx);
        // Ends when every thread has returned (or one panicked: the scope then panics too).
        for (seed, t) in rx {
            buf.push(seed, t);
            let next = buf.next;
            while let Some(t) = buf.pop() {
                each(t);
            }
            if buf.next != next {
                *sh.handed.lock().unwrap_or_else(PoisonError::into_inner) = buf.next;
                sh.handed_moved.notify_all();
            }
        }
    });
    assert_eq!(buf.next, seeds.end, "every seed handed on");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// Every order of `0..n`, by Heap's algorithm.
    fn permutations(n: u64) -> Vec<Vec<u64>> {
        fn heap(k: usize, v: &mut Vec<u64>, out: &mut Vec<Vec<u64>>) {
            if k <= 1 {
                out.push(v.clone());
                return;
            }
            for i in 0..k {
                heap(k - 1, v, out);
                v.swap(if k.is_multiple_of(2) { i } else { 0 }, k - 1);
            }
        }
        let mut out = Vec::new();
        heap(n as usize, &mut (0..n).collect(), &mut out);
        out
    }

    #[test]
    fn the_reorder_buffer_hands_on_every_arrival_order_in_seed_order() {
        let orders = permutations(6);
        assert_eq!(orders.len(), 720);
        for order in orders {
            let mut buf = InOrder::new(100, 6);
            let mut handed = Vec::new();
            for &seed in &order {
                buf.push(100 + seed, 100 + seed);
                while let Some(s) = buf.pop() {
                    handed.push(s);
                }
            }
            assert_eq!(handed, (100..106).collect::<Vec<_>>(), "{order:?}");
        }
    }

    #[test]
    #[should_panic(expected = "ran twice")]
    fn the_reorder_buffer_refuses_a_seed_twice() {
        let mut buf = InOrder::new(0, 4);
        buf.push(2, ());
        buf.push(2, ());
    }

    /// Seeds finish out of order (the early ones slowest) on 3 threads: each runs once, all are
    /// handed on in seed order, and the first failure in seed order comes first — seed 13's,
    /// though seed 17 failed sooner.
    #[test]
    fn seeds_on_threads_are_handed_on_in_seed_order_each_run_once() {
        let runs: Vec<AtomicU32> = (0..50).map(|_| AtomicU32::new(0)).collect();
        let run = |seed: u64| {
            runs[seed as usize].fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis((50 - seed) % 7));
            match seed {
                13 => Verdict::Correctness,
                17 => Verdict::Liveness,
                _ => Verdict::Ok,
            }
        };
        let mut handed = Vec::new();
        let mut first_failure = None;
        in_seed_order(10..50, 3, run, |v| {
            handed.push(v);
            if v != Verdict::Ok {
                first_failure.get_or_insert(v);
            }
        });
        assert_eq!(handed.len(), 40);
        assert_eq!(handed[3], Verdict::Correctness);
        assert_eq!(handed[7], Verdict::Liveness);
        assert_eq!(first_failure, Some(Verdict::Correctness));
        for (seed, n) in runs.iter().enumerate() {
            assert_eq!(
                n.load(Ordering::SeqCst),
                u32::from(seed >= 10),
                "seed {seed}"
            );
        }
    }

    /// While the first seed runs, no thread starts one `AHEAD_PER_JOB_MAX` × jobs seeds past it.
    #[test]
    fn threads_wait_rather_than_run_far_ahead_of_the_lowest_seed() {
        let first_done = AtomicBool::new(false);
        let ahead_max_seen = AtomicU64::new(0);
        let run = |seed: u64| {
            if seed == 0 {
                std::thread::sleep(Duration::from_millis(200));
                first_done.store(true, Ordering::SeqCst);
            } else if !first_done.load(Ordering::SeqCst) {
                ahead_max_seen.fetch_max(seed, Ordering::SeqCst);
            }
            seed
        };
        let mut handed = Vec::new();
        in_seed_order(0..100, 2, run, |s| handed.push(s));
        assert_eq!(handed, (0..100).collect::<Vec<_>>());
        let seen = ahead_max_seen.load(Ordering::SeqCst);
        assert!(seen > 0 && seen < 2 * AHEAD_PER_JOB_MAX, "{seen}");
    }

    /// A panic on a thread, or in what the main thread does with a result, ends the run with
    /// that panic: no thread is left waiting.
    #[test]
    fn a_panic_on_any_thread_ends_the_run() {
        let on_worker = std::panic::catch_unwind(|| {
            in_seed_order(0..100, 2, |s| assert_ne!(s, 3), |_| {});
        });
        assert!(on_worker.is_err());
        let on_main = std::panic::catch_unwind(|| {
            in_seed_order(0..100, 2, |s| s, |s| assert_ne!(s, 1));
        });
        assert!(on_main.is_err());
    }
}
