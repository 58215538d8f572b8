//! `onepipe bench fig15`: TPC-C New-Order and Payment as independent transactions (§7.3.2, the
//! paper's Fig. 15), on 1Pipe and on the baselines on direct messages.
//!
//! * **a — throughput against processes** (8 … 512): TPC-C transactions per second, all
//!   processes, each keeping `--window` transactions in flight; `--warehouses` (4) over
//!   `procs / 3` shards of 3 replicas.
//! * **b — throughput against the packet loss rate** at `--at` (64) processes, with the reliable
//!   service's default loss recovery (a retransmission on the first ACK that shows a gap, as an
//!   RDMA NIC's NAK, and a per-pair RTT estimate: a loss holds every receiver's commit barrier
//!   until it is repaired).
//!
//! The layout of N processes and the CPU model are Fig. 8's and Fig. 14's (`fig14::app_config`).
//! Every 1Pipe run is checked — 1Pipe's checkers, and TPC-C's: every committed transaction's
//! results replayed in timestamp order on an unsharded model, real time, the specification's
//! consistency conditions (clause 3.3.2) and replica agreement — and a violation fails the bench.
//! The non-transactional baseline runs the same processes on plain messages (no order, no
//! checker): the upper bound.

use crate::cli::parse_duration;
use crate::fig14::app_config;
use crate::fig8::parse_procs;
use crate::plot::{line_chart, Chart, Series};
use clap::Args;
use onepipe_apps::tpcc::gen::TpccWorkload;
use onepipe_sim::apps::AppReport;
use onepipe_sim::direct::{run_direct, DirectSystem};
use onepipe_sim::{run, AppSpec};
use std::io::Write;
use std::path::PathBuf;

/// Flags of `bench fig15`.
#[derive(Args, Debug)]
pub struct Fig15Args {
    /// Directory for fig15.csv, fig15a.png and fig15b.png (created if missing).
    #[arg(long, default_value = "fig15")]
    pub out: PathBuf,
    /// Accept points in which an application check that applies could not run (their CSV rows
    /// say `unchecked: …`); without it such a point fails the bench.
    #[arg(long)]
    pub allow_unchecked: bool,
    /// A small version (8 and 16 processes, a small database, short runs) for the test suite.
    #[arg(long)]
    pub quick: bool,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulations run in parallel (the results do not depend on it).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Transactions each process keeps in flight.
    #[arg(long, default_value_t = 16)]
    pub window: u32,
    /// How long the initiators issue transactions in each run.
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    pub duration: u64,
    /// Panel a's process counts, comma-separated (default 8, 16, 32, 64, 128, 256, 512;
    /// `--quick`: 8, 16).
    #[arg(long, value_delimiter = ',', value_parser = parse_procs)]
    pub procs: Vec<u32>,
    /// Processes of panel b (default 64; `--quick`: 16).
    #[arg(long, value_parser = parse_procs)]
    pub at: Option<u32>,
    /// Panel b's loss rates, comma-separated (default 0, 0.0001, 0.001, 0.01; `--quick`: 0,
    /// 0.001).
    #[arg(long, value_delimiter = ',')]
    pub loss: Vec<f64>,
    /// Warehouses.
    #[arg(long, default_value_t = 4)]
    pub warehouses: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum System {
    Onepipe,
    Lock,
    Occ,
    NonTx,
}

/// The systems the panels compare.
const SYSTEMS: [System; 4] = [System::Onepipe, System::Lock, System::Occ, System::NonTx];

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Onepipe => "1pipe",
            System::Lock => "2pl",
            System::Occ => "occ",
            System::NonTx => "nontx",
        }
    }

    /// On direct messages, which.
    fn direct(self) -> Option<DirectSystem> {
        match self {
            System::Onepipe => None,
            System::Lock => Some(DirectSystem::Lock),
            System::Occ => Some(DirectSystem::Occ),
            System::NonTx => Some(DirectSystem::NonTx),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Point {
    panel: char,
    system: System,
    n: u32,
    loss: f64,
}

fn points(a: &Fig15Args) -> Vec<Point> {
    let procs: Vec<u32> = match (a.procs.is_empty(), a.quick) {
        (false, _) => a.procs.clone(),
        (true, true) => vec![8, 16],
        (true, false) => vec![8, 16, 32, 64, 128, 256, 512],
    };
    let at = a.at.unwrap_or(if a.quick { 16 } else { 64 });
    let losses: Vec<f64> = match (a.loss.is_empty(), a.quick) {
        (false, _) => a.loss.clone(),
        (true, true) => vec![0.0, 0.001],
        (true, false) => vec![0.0, 0.0001, 0.001, 0.01],
    };
    let mut v = Vec::new();
    for system in SYSTEMS {
        for &n in &procs {
            v.push(Point {
                panel: 'a',
                system,
                n,
                loss: 0.0,
            });
        }
        for &loss in &losses {
            v.push(Point {
                panel: 'b',
                system,
                n: at,
                loss,
            });
        }
    }
    v
}

/// A point's application report and whether its run drained, or why it failed.
type PointResult = Result<(AppReport, bool), String>;

fn run_point(a: &Fig15Args, p: &Point) -> PointResult {
    let mut workload = TpccWorkload::default();
    workload.scale.warehouses = a.warehouses;
    if a.quick {
        workload.scale.items = 10_000;
        workload.scale.customers_per_district = 300;
    }
    let app = AppSpec::Tpcc {
        workload,
        window: a.window,
    };
    // A loss stalls the commit barrier for a retransmission: panel b runs long enough to see
    // many.
    let duration = match (a.quick, p.panel) {
        (true, 'a') => 200_000,
        (true, _) => 1_000_000,
        (false, 'a') => a.duration,
        (false, _) => a.duration.max(3_000_000),
    };
    let mut cfg = app_config(p.n, duration, a.seed, app);
    cfg.faults.loss_rate = p.loss;
    let fail = |e: String| {
        format!(
            "{} {}, {} processes, loss {}, seed {}: {e}",
            p.panel,
            p.system.name(),
            p.n,
            p.loss,
            cfg.seed
        )
    };
    match p.system.direct() {
        None => {
            let r = run(&cfg, &mut |_| {}).map_err(|e| fail(e.to_string()))?;
            let mut app = r.app.expect("an application run");
            app.violations += r.violations;
            app.violation_samples.extend(r.violation_samples);
            Ok((app, r.drained))
        }
        Some(d) => {
            let r = run_direct(&cfg, d, &mut |_| {}).map_err(|e| fail(e.to_string()))?;
            Ok((r.app, r.drained))
        }
    }
}

/// `bench fig15`.
pub fn fig15(a: &Fig15Args) -> Result<(), String> {
    let pts = points(a);
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("--out: cannot create {}: {e}", a.out.display()))?;
    let started = std::time::Instant::now();
    let results = crate::sweep::run_points(
        "fig15",
        &pts,
        a.jobs,
        |p| u64::from(p.n),
        |p| format!("{} {} N={} loss {}", p.panel, p.system.name(), p.n, p.loss),
        |p| run_point(a, p),
    );
    let out = results.into_iter().collect::<Result<Vec<_>, String>>()?;
    write_csv(a, &pts, &out)?;
    println!("| panel | system | N | loss | txn/s (all) | txn/s per proc | New-Order p50 / p99 (µs) | checked | violations |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (p, (r, _)) in pts.iter().zip(&out) {
        println!(
            "| {} | {} | {} | {} | {:.2} M | {:.0} k | {:.1} / {:.1} | {} | {} |",
            p.panel,
            p.system.name(),
            p.n,
            p.loss,
            r.txns_per_s / 1e6,
            r.txns_per_s_per_proc / 1e3,
            r.latency_ns_new_order.p50 as f64 / 1e3,
            r.latency_ns_new_order.p99 as f64 / 1e3,
            r.checked_label(),
            r.violations
        );
    }
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
                "{} {} N={} loss {}: {} violation(s), first {:?}",
                p.panel,
                p.system.name(),
                p.n,
                p.loss,
                r.violations,
                r.violation_samples.first()
            ) + &r.unchecked_note()
        })
        .collect();
    crate::sweep::finish(
        "fig15",
        &a.out.join("fig15.csv"),
        "fig15a.png, fig15b.png",
        |font| plots(a, &pts, &out, font),
        &failing,
        a.seed,
    )
}

fn write_csv(a: &Fig15Args, pts: &[Point], out: &[(AppReport, bool)]) -> Result<(), String> {
    let path = a.out.join("fig15.csv");
    let mut f = std::fs::File::create(&path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    w("panel,system,processes,loss,window,warehouses,committed,new_order,payment,rolled_back,txns_per_s,txns_per_s_per_proc,new_order_p50_ns,new_order_p99_ns,payment_p50_ns,payment_p99_ns,checked,violations,drained".into())?;
    for (p, (r, drained)) in pts.iter().zip(out) {
        w(format!(
            "{},{},{},{},{},{},{},{},{},{},{:.0},{:.0},{},{},{},{},{},{},{}",
            p.panel,
            p.system.name(),
            p.n,
            p.loss,
            a.window,
            a.warehouses,
            r.committed,
            r.committed_new_order,
            r.committed_payment,
            r.tpcc_stats.rolled_back,
            r.txns_per_s,
            r.txns_per_s_per_proc,
            r.latency_ns_new_order.p50,
            r.latency_ns_new_order.p99,
            r.latency_ns_payment.p50,
            r.latency_ns_payment.p99,
            r.checked_label(),
            r.violations,
            drained
        ))?;
    }
    Ok(())
}

fn plots(
    a: &Fig15Args,
    pts: &[Point],
    out: &[(AppReport, bool)],
    font: &'static str,
) -> Result<(), String> {
    let line = |panel: char, system: System, x: &dyn Fn(&Point) -> f64| Series {
        name: system.name().to_string(),
        points: pts
            .iter()
            .zip(out)
            .filter(|(p, _)| p.panel == panel && p.system == system)
            .map(|(p, (r, _))| (x(p), r.txns_per_s))
            .collect(),
    };
    let a_lines: Vec<Series> = SYSTEMS
        .iter()
        .map(|&s| line('a', s, &|p| f64::from(p.n)))
        .filter(|s| !s.points.is_empty())
        .collect();
    line_chart(
        &a.out.join("fig15a.png"),
        &Chart {
            caption: "Fig. 15a: TPC-C New-Order + Payment, transactions/s",
            x_desc: "processes",
            y_desc: "transactions/s (all processes)",
            log_x: true,
            log_y: true,
            legend_upper: false,
        },
        &a_lines,
        font,
    )?;
    let b_lines: Vec<Series> = SYSTEMS
        .iter()
        .map(|&s| line('b', s, &|p| p.loss * 100.0))
        .filter(|s| !s.points.is_empty())
        .collect();
    line_chart(
        &a.out.join("fig15b.png"),
        &Chart {
            caption: "Fig. 15b: TPC-C transactions/s against packet loss",
            x_desc: "loss rate (%)",
            y_desc: "transactions/s (all processes)",
            log_x: false,
            log_y: false,
            legend_upper: true,
        },
        &b_lines,
        font,
    )
}
