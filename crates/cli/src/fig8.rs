//! `onepipe bench fig8`: the scalability comparison of the paper's Fig. 8 (§7.2).
//!
//! All-to-all broadcast of 64 B messages among N = 1 … 512 processes, for 1Pipe (best effort
//! and reliable) and the classic designs (fixed sequencer on a host or a switch, token, Lamport
//! timestamps, ISIS agreed order), each on the same simulated network with the same link and CPU models.
//!
//! * **Throughput at saturation.** Offered load well above what any protocol sustains
//!   (`--load`, 16 M messages/s per process); what cannot be taken is refused (host send
//!   queues, the sequencer's input, the token's queue), so delivered throughput levels off at
//!   the protocol's capacity. Queues take a while to fill (a host queues 64 broadcasts of N
//!   packets each), so the figure is the steady-state rate: the same run for D and for 2·D of
//!   sending (the first D of both is identical, the simulator being deterministic), and the
//!   deliveries between D and 2·D over D. D is 3× the time to fill the send queues, since
//!   the receivers' CPU queues fill behind them (2.46 ms at k = 8), and at least 1 ms, several
//!   best-effort ACK delays. These runs stop when sending stops (no drain).
//! * **Latency at a fixed load.** At saturation, latency is the admission queue's length — a
//!   property of the model's queue bound, not of the protocol. The latency plot therefore gives
//!   every process the same demand at every N (`--latency-load`, 1 M messages/s: a fifth of
//!   1Pipe's capacity), as the paper's Fig. 8b does implicitly (§7.2: "The latency soars when
//!   throughput of sequencer saturates"), and drains the run so every message sent is timed.
//!
//! **Layout**, as the paper's testbed (§7.1) where a fat tree allows: N ≤ 8 processes on N
//! hosts in one rack ("With less or equal to 8 servers, they collocate in one rack"); N = 16,
//! 32, 64 on a k = 4 fat tree (16 hosts; 1, 2, 4 processes per host); N = 128, 256, 512 on a
//! k = 8 fat tree (128 hosts; 1, 2, 4 per host). The testbed gives each process its own cores.
//! Every protocol has the same CPU model: one simulated CPU per host serves all its processes
//! (1Pipe's host role; the baselines' processes of a host share a core), and the per-packet
//! costs are divided among the host's processes (`NetworkConfig::pool_host_cpu`: send ⌊50 / pph⌋
//! ns, receive ⌈50 / pph⌉ ns with the sum exact, deliver ⌈20 / pph⌉ ns) — the same capacity
//! per process at every N. The host-placed sequencer keeps a core of its own at one core's
//! cost (50 ns per packet in and out).

use crate::cli::parse_duration;
use crate::plot::{line_chart, Chart, Series};
use clap::Args;
use onepipe_baselines::Protocol;
use onepipe_sim::baseline::{run_baseline, BaselineConfig};
use onepipe_sim::metrics::Summary;
use onepipe_sim::{
    run, NetworkConfig, Service, SimConfig, TopologySpec, WorkloadConfig, WorkloadKind,
};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Flags of `bench fig8`.
#[derive(Args, Debug)]
pub struct Fig8Args {
    /// Directory for fig8.csv, fig8-throughput.png and fig8-latency.png (created if missing).
    #[arg(long, default_value = "fig8")]
    pub out: PathBuf,
    /// A small version (N = 1, 4, 16, short runs) that runs in the test suite.
    #[arg(long)]
    pub quick: bool,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Offered load of the saturation runs, messages per second per process (a broadcast to N
    /// processes is N messages).
    #[arg(long, default_value_t = 16e6)]
    pub load: f64,
    /// Demand of the fixed-load latency runs, messages per second per process.
    #[arg(long, default_value_t = 1e6)]
    pub latency_load: f64,
    /// Simulations run in parallel (each is deterministic; the results do not depend on it).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Sending time of the latency runs at N = 1 (shorter at larger N, at least 200 µs).
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    pub latency_duration: u64,
    /// Longest a receiver delays a best-effort ACK in the 1Pipe runs (`sim --ack-delay-be`;
    /// default the simulator's).
    #[arg(long, value_parser = parse_duration)]
    pub ack_delay_be: Option<u64>,
    /// Only these lines, comma-separated (default all): onepipe-be, onepipe-r, sequencer,
    /// sequencer-switch, token, lamport, isis.
    #[arg(long, value_delimiter = ',', value_parser = parse_protocol)]
    pub protocols: Vec<String>,
    /// Only these process counts, comma-separated (default 1, 2, 4, … 512; `--quick`: 1, 4, 16).
    /// Each must be 1 … 8, or a multiple of 16 up to 64 (k = 4), or of 128 up to 512 (k = 8)
    /// with at most 4 processes per host.
    #[arg(long, value_delimiter = ',', value_parser = parse_procs)]
    pub procs: Vec<u32>,
}

/// The process counts of the full plot.
pub const PROCS: [u32; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
/// The process counts of `--quick`.
pub const PROCS_QUICK: [u32; 3] = [1, 4, 16];

/// One line of the plot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line {
    Onepipe(Service),
    Base(Protocol),
}

const LINES: [(&str, Line); 7] = [
    ("onepipe-be", Line::Onepipe(Service::BestEffort)),
    ("onepipe-r", Line::Onepipe(Service::Reliable)),
    ("sequencer", Line::Base(Protocol::Sequencer)),
    ("sequencer-switch", Line::Base(Protocol::SequencerSwitch)),
    ("token", Line::Base(Protocol::Token)),
    ("lamport", Line::Base(Protocol::Lamport)),
    ("isis", Line::Base(Protocol::Isis)),
];

/// Whether `layout` can place `n` processes, or why not.
pub(crate) fn check_procs(n: u32) -> Result<u32, String> {
    let ok = match n {
        1..=8 => true,
        9..=64 => n.is_multiple_of(16),
        65..=512 => n.is_multiple_of(128),
        _ => false,
    };
    if ok {
        Ok(n)
    } else {
        Err(format!(
            "{n} processes cannot be laid out (1 … 8 in a rack; 16, 32, 48, 64 on a k = 4 fat \
             tree; 128, 256, 384, 512 on a k = 8 fat tree)"
        ))
    }
}

/// One value of `--procs`.
pub(crate) fn parse_procs(v: &str) -> Result<u32, String> {
    let n: u32 = v
        .trim()
        .parse()
        .map_err(|_| format!("{v:?} is not a process count"))?;
    check_procs(n)
}

/// The index into `LINES` of the line named `v`, or why there is none.
fn line_index(v: &str) -> Result<usize, String> {
    LINES.iter().position(|(l, _)| *l == v).ok_or_else(|| {
        let known: Vec<&str> = LINES.iter().map(|(l, _)| *l).collect();
        format!("unknown protocol {v:?} (one of {})", known.join(", "))
    })
}

/// One value of `--protocols`: a line of the figure.
fn parse_protocol(v: &str) -> Result<String, String> {
    line_index(v).map(|_| v.to_string())
}

/// The indices into `LINES` that `--protocols` selects.
fn selected_lines(names: &[String]) -> Result<Vec<usize>, String> {
    if names.is_empty() {
        return Ok((0..LINES.len()).collect());
    }
    let mut out = Vec::new();
    for name in names {
        let i = line_index(name).map_err(|e| format!("--protocols: {e}"))?;
        if !out.contains(&i) {
            out.push(i);
        }
    }
    Ok(out)
}

/// The network for N processes and the processes per host (module docs).
pub fn layout(n: u32) -> (TopologySpec, u32) {
    let k = match n {
        0..=8 => return (TopologySpec::Rack { hosts: n.max(1) }, 1),
        9..=64 => 4,
        _ => 8,
    };
    let hosts = k * k * k / 4;
    assert!(
        n.is_multiple_of(hosts),
        "{n} processes do not spread evenly over {hosts} hosts"
    );
    (TopologySpec::FatTree { k }, n / hosts)
}

/// Hosts of the layout for N processes.
fn hosts(n: u32) -> u32 {
    n / layout(n).1
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Saturation, sending for D (no drain).
    SatShort,
    /// Saturation, sending for 2·D (no drain).
    SatLong,
    /// The fixed load, drained.
    FixedLoad,
}

const KINDS: [Kind; 3] = [Kind::SatShort, Kind::SatLong, Kind::FixedLoad];

#[derive(Clone, Copy, Debug)]
struct Job {
    line: usize,
    n: u32,
    kind: Kind,
}

#[derive(Clone, Debug)]
struct Outcome {
    throughput: f64,
    latency: Summary,
    refused: u64,
    drained: bool,
    events: u64,
    wall_s: f64,
}

/// Simulated sending time of one run (module docs).
fn duration_ns(a: &Fig8Args, n: u32, kind: Kind) -> u64 {
    // A host queues 64 broadcasts, each a packet to every other host at 50 ns: the send
    // queues fill in about twice that (sends and the receives between them). The receivers'
    // CPU queues fill behind them, so wait 3× as long, and never less than 1 ms: several
    // times the best-effort ACK delay (200 µs), whose batches would otherwise span the window.
    let warmup = (6 * 64 * u64::from(hosts(n)) * 50).max(1_000_000);
    match (a.quick, kind) {
        (true, Kind::SatShort) => 50_000,
        (true, Kind::SatLong) => 100_000,
        (true, Kind::FixedLoad) => 100_000,
        (false, Kind::SatShort) => warmup,
        (false, Kind::SatLong) => 2 * warmup,
        (false, Kind::FixedLoad) => (a.latency_duration / u64::from(n)).max(200_000),
    }
}

fn config(a: &Fig8Args, job: Job) -> (SimConfig, Option<BaselineConfig>) {
    let (topology, pph) = layout(job.n);
    let fixed = job.kind == Kind::FixedLoad;
    let load = if fixed { a.latency_load } else { a.load };
    let mut cfg = SimConfig {
        seed: a.seed,
        net: NetworkConfig {
            topology,
            procs_per_host: pph,
            ..Default::default()
        },
        workload: WorkloadConfig {
            workload: WorkloadKind::AllToAll,
            msg_size: 64,
            // A broadcast is N messages: N × rate = the load per process.
            rate_per_proc: load / f64::from(job.n),
            duration_ns: duration_ns(a, job.n, job.kind),
            // Saturation runs stop with the sending: their figure is the rate while sending.
            drain_ns: if fixed { 10_000_000 } else { 0 },
            ..Default::default()
        },
        ..SimConfig::default()
    };
    if let Some(d) = a.ack_delay_be {
        cfg.protocol.ack_delay_be_ns = d;
    }
    match LINES[job.line].1 {
        Line::Onepipe(service) => {
            cfg.workload.service = service;
            // One simulated CPU serves the host's pph processes at pph cores' speed.
            cfg.net.pool_host_cpu();
            (cfg, None)
        }
        Line::Base(p) => {
            let mut base = BaselineConfig::new(p);
            // The host-placed sequencer keeps a core of its own at one core's speed: its cost
            // is fixed before the hosts' CPUs are pooled.
            let (seq_in, seq_out) = base.seq_host_costs(&cfg);
            assert_eq!(
                seq_in, seq_out,
                "the sequencer's default costs are alike in and out"
            );
            base.seq_host_packet_ns = Some(seq_in);
            // The processes of a host share one CPU at pph cores' speed, as 1Pipe's do.
            cfg.net.pool_host_cpu();
            if p == Protocol::Token && fixed {
                // Draining takes up to a rotation: every holder sends a batch of N copies.
                let n = u64::from(job.n);
                let rotation = n * n * base.token_batch_max as u64 * cfg.net.host_send_ns;
                cfg.workload.drain_ns = cfg.workload.drain_ns.max(2 * rotation);
            }
            (cfg, Some(base))
        }
    }
}

fn run_job(a: &Fig8Args, job: Job) -> Result<Outcome, String> {
    let (cfg, base) = config(a, job);
    let name = LINES[job.line].0;
    let fail = |e: String| format!("{name}, {} processes, seed {}: {e}", job.n, cfg.seed);
    let o = match base {
        None => {
            let r = run(&cfg, &mut |_| {}).map_err(|e| fail(e.to_string()))?;
            if r.violations > 0 {
                return Err(fail(format!("violations {:?}", r.violation_samples)));
            }
            Outcome {
                throughput: r.throughput_msgs_per_s_per_proc,
                latency: r.latency_ns,
                refused: r.sends_rejected + r.sends_refused_full,
                drained: r.drained,
                events: r.events,
                wall_s: r.wall_s,
            }
        }
        Some(base) => {
            let r = run_baseline(&cfg, &base, &mut |_| {}).map_err(|e| fail(e.to_string()))?;
            if r.violations > 0 {
                return Err(fail(format!("violations {:?}", r.violation_samples)));
            }
            Outcome {
                throughput: r.throughput_msgs_per_s_per_proc,
                latency: r.latency_ns,
                refused: r.sends_rejected + r.sends_refused_full,
                drained: r.drained,
                events: r.events,
                wall_s: r.wall_s,
            }
        }
    };
    Ok(o)
}

/// Runs every job on `a.jobs` threads, largest first, with a progress bar.
fn run_all(a: &Fig8Args, jobs: &[Job]) -> Result<Vec<Outcome>, String> {
    let bar = indicatif::ProgressBar::new(jobs.len() as u64);
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} fig8 [{bar:40}] {pos}/{len} points ({elapsed}, ~{eta} left) {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    // Largest first, so the last jobs to finish are short ones.
    order.sort_by_key(|&i| {
        let j = jobs[i];
        std::cmp::Reverse((j.n, j.kind == Kind::SatLong, j.line == 4))
    });
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Outcome, String>>>> = Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|s| {
        for _ in 0..a.jobs.max(1) {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = order.get(k) else { break };
                let job = jobs[i];
                bar.set_message(format!("{} N={}", LINES[job.line].0, job.n));
                let r = run_job(a, job);
                results.lock().expect("no worker panicked")[i] = Some(r);
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    results
        .into_inner()
        .expect("no worker panicked")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

/// One row of fig8.csv.
struct Row {
    line: usize,
    n: u32,
    /// Steady-state delivered messages per second per process at saturation.
    throughput: f64,
    sat: Outcome,
    fixed: Outcome,
}

/// `bench fig8`.
pub fn fig8(a: &Fig8Args) -> Result<(), String> {
    let lines = selected_lines(&a.protocols)?;
    for &n in &a.procs {
        check_procs(n).map_err(|e| format!("--procs: {e}"))?;
    }
    let mut procs: Vec<u32> = match (a.procs.is_empty(), a.quick) {
        (false, _) => a.procs.clone(),
        (true, true) => PROCS_QUICK.to_vec(),
        (true, false) => PROCS.to_vec(),
    };
    procs.sort_unstable();
    procs.dedup();
    let procs = &procs[..];
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("--out: cannot create {}: {e}", a.out.display()))?;
    let mut jobs = Vec::new();
    for &line in &lines {
        for &n in procs {
            for kind in KINDS {
                jobs.push(Job { line, n, kind });
            }
        }
    }
    let started = std::time::Instant::now();
    let outcomes = run_all(a, &jobs)?;
    let rows: Vec<Row> = jobs
        .chunks(KINDS.len())
        .zip(outcomes.chunks(KINDS.len()))
        .map(|(j, o)| {
            let d1 = duration_ns(a, j[0].n, Kind::SatShort) as f64;
            let d2 = duration_ns(a, j[0].n, Kind::SatLong) as f64;
            // Deliveries in (D, 2·D]: the long run's count less the short run's.
            let throughput = ((o[1].throughput * d2 - o[0].throughput * d1) / (d2 - d1)).max(0.0);
            Row {
                line: j[0].line,
                n: j[0].n,
                throughput,
                sat: o[1].clone(),
                fixed: o[2].clone(),
            }
        })
        .collect();
    write_csv(a, &a.out.join("fig8.csv"), &rows)?;
    print_table(a, &rows);
    let events: u64 = outcomes.iter().map(|o| o.events).sum();
    let sim_wall: f64 = outcomes.iter().map(|o| o.wall_s).sum();
    println!(
        "# {} simulations, {:.1} M events, {:.0} s of simulation on {} thread(s), {:.0} s wall",
        jobs.len(),
        events as f64 / 1e6,
        sim_wall,
        a.jobs.max(1),
        started.elapsed().as_secs_f64()
    );
    match crate::plot::load_font() {
        Some(font) => {
            plot(
                &a.out.join("fig8-throughput.png"),
                &rows,
                font,
                Plot::Throughput,
            )?;
            plot(&a.out.join("fig8-latency.png"), &rows, font, Plot::Latency)?;
            println!(
                "# wrote {}, fig8-throughput.png, fig8-latency.png",
                a.out.join("fig8.csv").display()
            );
        }
        None => {
            eprintln!(
                "onepipe bench fig8: no TrueType font found (install fonts-dejavu-core or set \
                 ONEPIPE_FONT to a .ttf file): plots skipped, fig8.csv written"
            );
        }
    }
    Ok(())
}

fn write_csv(a: &Fig8Args, path: &Path, rows: &[Row]) -> Result<(), String> {
    let mut f = std::fs::File::create(path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    w("protocol,processes,hosts,procs_per_host,throughput_msgs_per_s_per_proc,offered_msgs_per_s_per_proc,sends_refused,latency_p50_ns,latency_p99_ns,latency_mean_ns,latency_load_msgs_per_s_per_proc,latency_load_throughput_msgs_per_s_per_proc,drained".into())?;
    for r in rows {
        let pph = layout(r.n).1;
        w(format!(
            "{},{},{},{pph},{:.0},{:.0},{},{},{},{:.0},{:.0},{:.0},{}",
            LINES[r.line].0,
            r.n,
            hosts(r.n),
            r.throughput,
            a.load,
            r.sat.refused,
            r.fixed.latency.p50,
            r.fixed.latency.p99,
            r.fixed.latency.mean,
            a.latency_load,
            r.fixed.throughput,
            r.fixed.drained
        ))?;
    }
    Ok(())
}

fn fmt_rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else {
        format!("{:.1} k", x / 1e3)
    }
}

fn fmt_us(ns: u64) -> String {
    let us = ns as f64 / 1e3;
    if us >= 100.0 {
        format!("{us:.0}")
    } else {
        format!("{us:.1}")
    }
}

/// The table of docs/BENCHMARKS.md, as markdown.
fn print_table(a: &Fig8Args, rows: &[Row]) {
    println!(
        "| protocol | N | throughput per process at saturation (msgs/s) | latency p50 / p99 at {} msgs/s per process (µs) |",
        fmt_rate(a.latency_load)
    );
    println!("| --- | --- | --- | --- |");
    for r in rows {
        let mark = if r.fixed.drained { "" } else { " (undrained)" };
        println!(
            "| {} | {} | {} | {} / {}{mark} |",
            LINES[r.line].0,
            r.n,
            fmt_rate(r.throughput),
            fmt_us(r.fixed.latency.p50),
            fmt_us(r.fixed.latency.p99),
        );
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Plot {
    Throughput,
    Latency,
}

fn plot(path: &Path, rows: &[Row], font: &'static str, what: Plot) -> Result<(), String> {
    let value = |r: &Row| match what {
        Plot::Throughput => r.throughput,
        Plot::Latency => r.fixed.latency.p50 as f64 / 1e3,
    };
    let series: Vec<Series> = LINES
        .iter()
        .enumerate()
        // Lines not selected by --protocols have no rows.
        .filter(|(i, _)| rows.iter().any(|r| r.line == *i))
        .map(|(i, (name, _))| Series {
            name: (*name).to_string(),
            points: rows
                .iter()
                .filter(|r| r.line == i)
                .map(|r| (f64::from(r.n), value(r)))
                .collect(),
        })
        .collect();
    let (caption, y_desc) = match what {
        Plot::Throughput => (
            "Fig. 8a: throughput per process at saturation (steady state)",
            "delivered messages/s per process",
        ),
        Plot::Latency => (
            "Fig. 8b: latency at a fixed load per process (median)",
            "send-to-delivery latency p50 (µs)",
        ),
    };
    let chart = Chart {
        caption,
        x_desc: "processes (all-to-all broadcast of 64 B messages)",
        y_desc,
        log_x: true,
        log_y: true,
        legend_upper: what == Plot::Latency,
    };
    line_chart(path, &chart, &series, font)
}
