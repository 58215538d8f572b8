//! `onepipe bench fig14`: the transactional key-value store of §7.3.1 (the paper's Fig. 14), on
//! 1Pipe and on the non-transactional upper bound (NonTX; FaRM's OCC is still to come).
//!
//! * **a — throughput against processes** (8 … 512), half the transactions read-only, 2
//!   operations each, keys uniform or YCSB's Zipf; transactions per second per process, at
//!   saturation: each process keeps `--window` transactions in flight.
//! * **b — latency against the write share** at `--at` processes (YCSB keys), each operation a
//!   write with that probability (a transaction is read-only when none is); a light load
//!   (4 in flight per process); the median of each kind.
//! * **c — key-value operations per second against operations per transaction** at `--at`
//!   processes, 95% of the transactions read-only, uniform and YCSB keys, at saturation.
//!
//! The layout of N processes and the CPU model are Fig. 8's (`bench fig8`): a rack up to 8,
//! fat trees of k = 4 and 8 above, each process a core's worth of CPU, pooled per host for
//! every system alike ([`app_config`]). Every 1Pipe run
//! is checked (1Pipe's checkers and the store's: serializable in timestamp order, real time);
//! a violation fails the bench.

use crate::cli::parse_duration;
use crate::fig8::{layout, parse_procs};
use crate::plot::{line_chart, Chart, Series};
use clap::Args;
use onepipe_apps::kv::workload::{KeyDist, KvWorkload};
use onepipe_sim::apps::AppReport;
use onepipe_sim::direct::{run_direct, DirectSystem};
use onepipe_sim::{run, AppSpec, NetworkConfig, SimConfig, WorkloadConfig};
use std::io::Write;
use std::path::PathBuf;

/// Flags of `bench fig14`.
#[derive(Args, Debug)]
pub struct Fig14Args {
    /// Directory for fig14.csv and fig14a/b/c.png (created if missing).
    #[arg(long, default_value = "fig14")]
    pub out: PathBuf,
    /// Accept points in which an application check that applies could not run (their CSV rows
    /// say `unchecked: …`); without it such a point fails the bench.
    #[arg(long)]
    pub allow_unchecked: bool,
    /// A small version (8 and 16 processes, short runs, fewer points) for the test suite.
    #[arg(long)]
    pub quick: bool,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulations run in parallel (the results do not depend on it).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Transactions each process keeps in flight in the saturation runs (a and c).
    #[arg(long, default_value_t = 64)]
    pub window: u32,
    /// How long the initiators issue transactions in each run.
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    pub duration: u64,
    /// Panel a's process counts, comma-separated (default 8, 16, 32, 64, 128, 256, 512;
    /// `--quick`: 8, 16).
    #[arg(long, value_delimiter = ',', value_parser = parse_procs)]
    pub procs: Vec<u32>,
    /// Processes of panels b and c (default 512; `--quick`: 16).
    #[arg(long, value_parser = parse_procs)]
    pub at: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum System {
    Onepipe,
    Farm,
    NonTx,
}

/// The systems every panel compares.
const SYSTEMS: [System; 3] = [System::Onepipe, System::Farm, System::NonTx];

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Onepipe => "1pipe",
            System::Farm => "farm",
            System::NonTx => "nontx",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Point {
    panel: char,
    system: System,
    zipf: bool,
    n: u32,
    ops: u32,
    write_share: f64,
    read_only_share: Option<f64>,
    window: u32,
}

/// The points of the three panels.
fn points(a: &Fig14Args) -> Vec<Point> {
    let procs: Vec<u32> = match (a.procs.is_empty(), a.quick) {
        (false, _) => a.procs.clone(),
        (true, true) => vec![8, 16],
        (true, false) => vec![8, 16, 32, 64, 128, 256, 512],
    };
    let at = a.at.unwrap_or(if a.quick { 16 } else { 512 });
    let shares: &[f64] = if a.quick {
        &[0.25, 0.75]
    } else {
        &[0.05, 0.25, 0.5, 0.75, 0.95]
    };
    let sizes: &[u32] = if a.quick { &[1, 4] } else { &[1, 2, 4, 8, 16] };
    let mut v = Vec::new();
    let base = |panel, system, zipf, n| Point {
        panel,
        system,
        zipf,
        n,
        ops: 2,
        write_share: 0.5,
        read_only_share: Some(0.5),
        window: a.window,
    };
    for system in SYSTEMS {
        for zipf in [false, true] {
            for &n in &procs {
                v.push(base('a', system, zipf, n));
            }
            for &ops in sizes {
                v.push(Point {
                    ops,
                    read_only_share: Some(0.95),
                    ..base('c', system, zipf, at)
                });
            }
        }
        for &write_share in shares {
            v.push(Point {
                write_share,
                read_only_share: None,
                window: 4,
                ..base('b', system, true, at)
            });
        }
    }
    v
}

fn config(a: &Fig14Args, p: &Point) -> SimConfig {
    let workload = KvWorkload {
        dist: if p.zipf {
            KeyDist::Zipf { theta: 0.99 }
        } else {
            KeyDist::Uniform
        },
        ops_per_txn: p.ops,
        write_share: p.write_share,
        read_only_share: p.read_only_share,
        ..KvWorkload::default()
    };
    let duration = if a.quick { 200_000 } else { a.duration };
    let app = AppSpec::Kv {
        workload,
        window: p.window,
    };
    app_config(p.n, duration, a.seed, app)
}

/// The simulation of an application figure's point: `n` processes laid out as Fig. 8 lays
/// them out, running `app` for `duration` (ns) with `seed`, on the CPU model of every system
/// (1Pipe and the baselines on direct messages alike): one simulated CPU per host serves its
/// processes at their cores' speed ([`NetworkConfig::pool_host_cpu`]).
pub(crate) fn app_config(n: u32, duration: u64, seed: u64, app: AppSpec) -> SimConfig {
    let (topology, pph) = layout(n);
    let mut cfg = SimConfig {
        seed,
        net: NetworkConfig {
            topology,
            procs_per_host: pph,
            ..Default::default()
        },
        workload: WorkloadConfig {
            duration_ns: duration,
            // A run ends as soon as it settles; the limit only bounds one that does not. 2PL and
            // OCC at 1% loss wait on retransmissions behind lock queues: 64 processes settle in
            // 10-100 ms (fig15 b), so 10 ms left them unchecked.
            drain_ns: 100_000_000,
            app: Some(app),
            ..Default::default()
        },
        ..SimConfig::default()
    };
    cfg.net.pool_host_cpu();
    cfg
}

/// A point's application report and whether its run drained, or why it failed.
type PointResult = Result<(AppReport, bool), String>;

fn run_point(a: &Fig14Args, p: &Point) -> PointResult {
    let cfg = config(a, p);
    let fail = |e: String| {
        format!(
            "{} {}, {} processes, seed {}: {e}",
            p.panel,
            p.system.name(),
            p.n,
            cfg.seed
        )
    };
    match p.system {
        System::Onepipe => {
            let r = run(&cfg, &mut |_| {}).map_err(|e| fail(e.to_string()))?;
            let mut app = r.app.expect("an application run");
            // 1Pipe's own violations count with the store's; the bench fails after writing.
            app.violations += r.violations;
            app.violation_samples.extend(r.violation_samples);
            Ok((app, r.drained))
        }
        System::Farm | System::NonTx => {
            let direct = if p.system == System::Farm {
                DirectSystem::Farm
            } else {
                DirectSystem::NonTx
            };
            let r = run_direct(&cfg, direct, &mut |_| {}).map_err(|e| fail(e.to_string()))?;
            Ok((r.app, r.drained))
        }
    }
}

/// `bench fig14`.
pub fn fig14(a: &Fig14Args) -> Result<(), String> {
    let pts = points(a);
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("--out: cannot create {}: {e}", a.out.display()))?;
    let started = std::time::Instant::now();
    let results = crate::sweep::run_points(
        "fig14",
        &pts,
        a.jobs,
        |p| u64::from(p.n * p.window),
        |p| format!("{} {} N={}", p.panel, p.system.name(), p.n),
        |p| run_point(a, p),
    );
    let out = results.into_iter().collect::<Result<Vec<_>, String>>()?;
    write_csv(a, &pts, &out)?;
    print_table(&pts, &out);
    println!(
        "# {} simulations, {:.0} s wall on {} thread(s)",
        pts.len(),
        started.elapsed().as_secs_f64(),
        a.jobs.max(1)
    );
    let failing: Vec<String> = pts
        .iter()
        .zip(&out)
        .filter(|(_, (r, _))| r.violations > 0 || (!a.allow_unchecked && !r.unchecked().is_empty()))
        .map(|(p, (r, _))| {
            format!(
                "{} {} N={} ops={} write share {}: {} violation(s), first {:?}",
                p.panel,
                p.system.name(),
                p.n,
                p.ops,
                p.write_share,
                r.violations,
                r.violation_samples.first()
            ) + &r.unchecked_note()
        })
        .collect();
    crate::sweep::finish(
        "fig14",
        &a.out.join("fig14.csv"),
        "fig14a.png, fig14b.png, fig14c.png",
        |font| plots(a, &pts, &out, font),
        &failing,
        a.seed,
    )
}

fn write_csv(a: &Fig14Args, pts: &[Point], out: &[(AppReport, bool)]) -> Result<(), String> {
    let path = a.out.join("fig14.csv");
    let mut f = std::fs::File::create(&path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    w("panel,system,keys,processes,ops_per_txn,write_share,read_only_share,window,committed,txns_per_s_per_proc,ops_per_s,latency_ro_p50_ns,latency_wo_p50_ns,latency_rw_p50_ns,latency_ro_p99_ns,latency_wo_p99_ns,latency_rw_p99_ns,checked,violations,drained".into())?;
    for (p, (r, drained)) in pts.iter().zip(out) {
        w(format!(
            "{},{},{},{},{},{},{},{},{},{:.0},{:.0},{},{},{},{},{},{},{},{},{}",
            p.panel,
            p.system.name(),
            if p.zipf { "ycsb" } else { "uniform" },
            p.n,
            p.ops,
            p.write_share,
            p.read_only_share
                .map_or("none".to_string(), |x| x.to_string()),
            p.window,
            r.committed,
            r.txns_per_s_per_proc,
            r.ops_per_s,
            r.latency_ns_ro.p50,
            r.latency_ns_wo.p50,
            r.latency_ns_rw.p50,
            r.latency_ns_ro.p99,
            r.latency_ns_wo.p99,
            r.latency_ns_rw.p99,
            r.checked_label(),
            r.violations,
            drained
        ))?;
    }
    Ok(())
}

fn print_table(pts: &[Point], out: &[(AppReport, bool)]) {
    println!("| panel | system | keys | N | ops | write share | txn/s per proc | KV ops/s | p50 RO / WO / RW (µs) |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (p, (r, _)) in pts.iter().zip(out) {
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.2} M | {:.1} M | {:.1} / {:.1} / {:.1} |",
            p.panel,
            p.system.name(),
            if p.zipf { "ycsb" } else { "uniform" },
            p.n,
            p.ops,
            p.write_share,
            r.txns_per_s_per_proc / 1e6,
            r.ops_per_s / 1e6,
            r.latency_ns_ro.p50 as f64 / 1e3,
            r.latency_ns_wo.p50 as f64 / 1e3,
            r.latency_ns_rw.p50 as f64 / 1e3,
        );
    }
}

/// The line of `system` (with YCSB keys if `zipf`) in panel `panel`: `y` of each point's
/// report against `x` of the point.
fn line(
    pts: &[Point],
    out: &[(AppReport, bool)],
    (panel, system, zipf): (char, System, bool),
    x: &dyn Fn(&Point) -> f64,
    y: &dyn Fn(&AppReport) -> f64,
) -> Series {
    Series {
        name: format!(
            "{} {}",
            system.name(),
            if zipf { "YCSB" } else { "uniform" }
        ),
        points: pts
            .iter()
            .zip(out)
            .filter(|(p, _)| p.panel == panel && p.system == system && p.zipf == zipf)
            .map(|(p, (r, _))| (x(p), y(r)))
            .collect(),
    }
}

/// Panel b's lines: each system's median latency by kind of transaction, against the write
/// share.
fn panel_b_lines(pts: &[Point], out: &[(AppReport, bool)]) -> Vec<Series> {
    let mut b_lines = Vec::new();
    for system in SYSTEMS {
        for (kind, pick) in [
            (
                "RO",
                (|r: &AppReport| r.latency_ns_ro.p50) as fn(&AppReport) -> u64,
            ),
            ("WO", |r: &AppReport| r.latency_ns_wo.p50),
            ("WR", |r: &AppReport| r.latency_ns_rw.p50),
        ] {
            b_lines.push(Series {
                name: format!("{} {kind}", system.name()),
                points: pts
                    .iter()
                    .zip(out)
                    .filter(|(p, _)| p.panel == 'b' && p.system == system)
                    .map(|(p, (r, _))| (p.write_share * 100.0, pick(r) as f64 / 1e3))
                    .filter(|&(_, y)| y > 0.0)
                    .collect(),
            });
        }
    }
    b_lines
}

/// Draws the figure's three panels, `fig14a.png` to `fig14c.png`.
fn plots(
    a: &Fig14Args,
    pts: &[Point],
    out: &[(AppReport, bool)],
    font: &'static str,
) -> Result<(), String> {
    let mut a_lines = Vec::new();
    let mut c_lines = Vec::new();
    for system in SYSTEMS {
        for zipf in [false, true] {
            let panel_a = ('a', system, zipf);
            a_lines.push(line(pts, out, panel_a, &|p| f64::from(p.n), &|r| {
                r.txns_per_s_per_proc
            }));
            let panel_c = ('c', system, zipf);
            c_lines.push(line(pts, out, panel_c, &|p| f64::from(p.ops), &|r| {
                r.ops_per_s
            }));
        }
    }
    line_chart(
        &a.out.join("fig14a.png"),
        &Chart {
            caption: "Fig. 14a: transactions/s per process (50% read-only, 2 ops)",
            x_desc: "processes",
            y_desc: "transactions/s per process",
            log_x: true,
            log_y: true,
            legend_upper: false,
        },
        &a_lines,
        font,
    )?;
    let b_lines = panel_b_lines(pts, out);
    line_chart(
        &a.out.join("fig14b.png"),
        &Chart {
            caption: "Fig. 14b: transaction latency (median, YCSB keys)",
            x_desc: "write share of operations (%)",
            y_desc: "latency p50 (µs)",
            log_x: false,
            log_y: true,
            legend_upper: true,
        },
        &b_lines,
        font,
    )?;
    line_chart(
        &a.out.join("fig14c.png"),
        &Chart {
            caption: "Fig. 14c: key-value operations/s (95% read-only transactions)",
            x_desc: "operations per transaction",
            y_desc: "KV operations/s (all processes)",
            log_x: true,
            log_y: true,
            legend_upper: false,
        },
        &c_lines,
        font,
    )
}
