//! `onepipe bench replication`: the replicated key-value service's writes (§2.2.2, §7.3.4) by
//! 1-RTT replication on 1Pipe, by MultiPaxos with batching and pipelining and by a primary-backup
//! chain (Ceph's OSD scheme), 3 replicas, 4 KB values, each replica writing each entry to a
//! disk before it answers.
//!
//! * **a — write latency and throughput against clients** (1 … 16 clients, one write in flight
//!   each): an idle system first (1 client: §7.3.4's "160 ± 54 µs → 58 ± 28 µs"), then loaded.
//! * **b — throughput against the packet loss rate** at `--at` clients.
//! * **c — in memory** (no disk): write latency against clients, where the round trips are all
//!   there is to save.
//!
//! The network is one rack (3 replicas and the clients, a process per host) with the
//! simulator's default links and CPU costs. Every run is checked — linearizability of every
//! operation, the replicas' logs, no acknowledged write lost — and a violation fails the bench.

use crate::cli::parse_duration;
use crate::plot::{line_chart, Chart, Series};
use clap::Args;
use onepipe_apps::repl::{DiskModel, ReplWorkload};
use onepipe_sim::apps::AppReport;
use onepipe_sim::direct::{run_direct, DirectSystem};
use onepipe_sim::{
    run, AppSpec, FaultConfig, NetworkConfig, SimConfig, TopologySpec, WorkloadConfig,
};
use std::io::Write;
use std::path::PathBuf;

/// Flags of `bench replication`.
#[derive(Args, Debug)]
pub struct ReplicationArgs {
    /// Directory for replication.csv and its plots (created if missing).
    #[arg(long, default_value = "replication")]
    pub out: PathBuf,
    /// A small version (fewer points, short runs) for the test suite.
    #[arg(long)]
    pub quick: bool,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulations run in parallel (the results do not depend on it).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// How long the clients issue writes in each run.
    #[arg(long, default_value = "20ms", value_parser = parse_duration)]
    pub duration: u64,
    /// Each replica's disk write (§7.3.4's SSD, 4 KB).
    #[arg(long, default_value = "40us", value_parser = parse_duration)]
    pub disk: u64,
    /// Uniform jitter added to each disk write.
    #[arg(long, default_value = "20us", value_parser = parse_duration)]
    pub disk_jitter: u64,
    /// Bytes of each written value.
    #[arg(long, default_value_t = 4096)]
    pub value_size: u32,
    /// Panel a's client counts, comma-separated (default 1, 2, 4, 8, 16; `--quick`: 1, 4).
    #[arg(long, value_delimiter = ',')]
    pub clients: Vec<u32>,
    /// Clients of panel b (default 8; `--quick`: 4).
    #[arg(long)]
    pub at: Option<u32>,
    /// Panel b's loss rates, comma-separated (default 0, 0.0001, 0.001, 0.01; `--quick`: 0,
    /// 0.001).
    #[arg(long, value_delimiter = ',')]
    pub loss: Vec<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum System {
    OneRtt,
    Paxos,
    Chain,
}

const SYSTEMS: [System; 3] = [System::OneRtt, System::Paxos, System::Chain];

impl System {
    fn name(self) -> &'static str {
        match self {
            System::OneRtt => "1pipe-1rtt",
            System::Paxos => "paxos",
            System::Chain => "chain",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Point {
    panel: char,
    system: System,
    clients: u32,
    loss: f64,
}

fn points(a: &ReplicationArgs) -> Vec<Point> {
    let clients = match (a.clients.is_empty(), a.quick) {
        (false, _) => a.clients.clone(),
        (true, true) => vec![1, 4],
        (true, false) => vec![1, 2, 4, 8, 16],
    };
    let at = a.at.unwrap_or(if a.quick { 4 } else { 8 });
    let losses = match (a.loss.is_empty(), a.quick) {
        (false, _) => a.loss.clone(),
        (true, true) => vec![0.0, 0.001],
        (true, false) => vec![0.0, 0.0001, 0.001, 0.01],
    };
    let mut v = Vec::new();
    for system in SYSTEMS {
        for &c in &clients {
            v.push(Point {
                panel: 'a',
                system,
                clients: c,
                loss: 0.0,
            });
        }
        for &loss in &losses {
            v.push(Point {
                panel: 'b',
                system,
                clients: at,
                loss,
            });
        }
        for &c in &clients {
            v.push(Point {
                panel: 'c',
                system,
                clients: c,
                loss: 0.0,
            });
        }
    }
    v
}

fn config(a: &ReplicationArgs, p: &Point) -> SimConfig {
    SimConfig {
        seed: a.seed,
        net: NetworkConfig {
            topology: TopologySpec::Rack {
                hosts: 3 + p.clients,
            },
            ..Default::default()
        },
        faults: FaultConfig {
            loss_rate: p.loss,
            ..Default::default()
        },
        workload: WorkloadConfig {
            duration_ns: if a.quick { 2_000_000 } else { a.duration },
            drain_ns: 20_000_000,
            app: Some(AppSpec::ReplKv {
                workload: ReplWorkload {
                    keys: 1_000,
                    read_ratio: 0.0,
                    cas_ratio: 0.1,
                    value_size: a.value_size,
                },
                window: 1,
                replicas: 3,
                disk: if p.panel == 'c' {
                    DiskModel::default()
                } else {
                    DiskModel {
                        write_ns: a.disk,
                        jitter_ns: a.disk_jitter,
                    }
                },
                suspect_ns: None,
                paxos: onepipe_sim::PaxosSpec::default(),
            }),
            ..Default::default()
        },
        ..SimConfig::default()
    }
}

type PointResult = Result<(AppReport, bool), String>;

fn run_point(a: &ReplicationArgs, p: &Point) -> PointResult {
    let cfg = config(a, p);
    let fail = |e: String| {
        format!(
            "{} {}, {} clients, loss {}, seed {}: {e}",
            p.panel,
            p.system.name(),
            p.clients,
            p.loss,
            cfg.seed
        )
    };
    let direct = match p.system {
        System::OneRtt => None,
        System::Paxos => Some(DirectSystem::Paxos),
        System::Chain => Some(DirectSystem::Chain),
    };
    match direct {
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

/// `bench replication`.
pub fn replication(a: &ReplicationArgs) -> Result<(), String> {
    let pts = points(a);
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("--out: cannot create {}: {e}", a.out.display()))?;
    let started = std::time::Instant::now();
    let results = crate::sweep::run_points(
        "replication",
        &pts,
        a.jobs,
        |p| u64::from(p.clients),
        |p| {
            format!(
                "{} {} {} clients loss {}",
                p.panel,
                p.system.name(),
                p.clients,
                p.loss
            )
        },
        |p| run_point(a, p),
    );
    let out = results.into_iter().collect::<Result<Vec<_>, String>>()?;
    write_csv(a, &pts, &out)?;
    println!("| panel | system | clients | loss | writes/s | write p50 / mean / p99 (µs) | recoveries | checked ops | violations |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (p, (r, _)) in pts.iter().zip(&out) {
        let l = &r.latency_ns_wo;
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.1} / {:.1} / {:.1} | {} | {} | {} |",
            p.panel,
            p.system.name(),
            p.clients,
            p.loss,
            r.ops_per_s,
            l.p50 as f64 / 1e3,
            l.mean / 1e3,
            l.p99 as f64 / 1e3,
            r.repl_stats.recoveries,
            r.checked_transactions,
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
        .filter(|(_, (r, drained))| r.violations > 0 || !drained)
        .map(|(p, (r, drained))| {
            format!(
                "{} {} {} clients loss {}: {} violation(s){}, first {:?}",
                p.panel,
                p.system.name(),
                p.clients,
                p.loss,
                r.violations,
                if *drained { "" } else { ", did not drain" },
                r.violation_samples.first()
            )
        })
        .collect();
    crate::sweep::finish(
        "replication",
        &a.out.join("replication.csv"),
        "replication-a-latency.png, replication-a-throughput.png, replication-b.png, \
         replication-c.png",
        |font| plots(a, &pts, &out, font),
        &failing,
        a.seed,
    )
}

fn write_csv(a: &ReplicationArgs, pts: &[Point], out: &[(AppReport, bool)]) -> Result<(), String> {
    let path = a.out.join("replication.csv");
    let mut f = std::fs::File::create(&path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    w("panel,system,clients,loss,disk_ns,disk_jitter_ns,value_size,writes,writes_per_s,write_p50_ns,write_mean_ns,write_p99_ns,recoveries,resent,checked,checked_ops,violations,drained".into())?;
    for (p, (r, drained)) in pts.iter().zip(out) {
        let l = &r.latency_ns_wo;
        w(format!(
            "{},{},{},{},{},{},{},{},{:.0},{},{:.0},{},{},{},{},{},{},{}",
            p.panel,
            p.system.name(),
            p.clients,
            p.loss,
            if p.panel == 'c' { 0 } else { a.disk },
            if p.panel == 'c' { 0 } else { a.disk_jitter },
            a.value_size,
            r.committed_wo,
            r.ops_per_s,
            l.p50,
            l.mean,
            l.p99,
            r.repl_stats.recoveries,
            r.repl_stats.resent,
            r.checked_label(),
            r.checked_transactions,
            r.violations,
            drained
        ))?;
    }
    Ok(())
}

fn plots(
    a: &ReplicationArgs,
    pts: &[Point],
    out: &[(AppReport, bool)],
    font: &'static str,
) -> Result<(), String> {
    let line =
        |panel: char, system: System, xy: &dyn Fn(&Point, &AppReport) -> (f64, f64)| Series {
            name: system.name().to_string(),
            points: pts
                .iter()
                .zip(out)
                .filter(|(p, _)| p.panel == panel && p.system == system)
                .map(|(p, (r, _))| xy(p, r))
                .collect(),
        };
    let lines = |panel, xy: &dyn Fn(&Point, &AppReport) -> (f64, f64)| -> Vec<Series> {
        SYSTEMS
            .iter()
            .map(|&s| line(panel, s, xy))
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    line_chart(
        &a.out.join("replication-a-latency.png"),
        &Chart {
            caption: "Replicated writes (3 replicas, 4 KB, a disk each): latency",
            x_desc: "clients (one write in flight each)",
            y_desc: "write latency p50 (µs)",
            log_x: true,
            log_y: false,
            legend_upper: true,
        },
        &lines('a', &|p, r| {
            (f64::from(p.clients), r.latency_ns_wo.p50 as f64 / 1e3)
        }),
        font,
    )?;
    line_chart(
        &a.out.join("replication-a-throughput.png"),
        &Chart {
            caption: "Replicated writes (3 replicas, 4 KB, a disk each): throughput",
            x_desc: "clients (one write in flight each)",
            y_desc: "writes/s",
            log_x: true,
            log_y: false,
            legend_upper: true,
        },
        &lines('a', &|p, r| (f64::from(p.clients), r.ops_per_s)),
        font,
    )?;
    line_chart(
        &a.out.join("replication-b.png"),
        &Chart {
            caption: "Replicated writes against packet loss",
            x_desc: "loss rate (%)",
            y_desc: "writes/s",
            log_x: false,
            log_y: false,
            legend_upper: true,
        },
        &lines('b', &|p, r| (p.loss * 100.0, r.ops_per_s)),
        font,
    )?;
    line_chart(
        &a.out.join("replication-c.png"),
        &Chart {
            caption: "Replicated writes in memory (3 replicas, no disk): latency",
            x_desc: "clients (one write in flight each)",
            y_desc: "write latency p50 (µs)",
            log_x: true,
            log_y: false,
            legend_upper: true,
        },
        &lines('c', &|p, r| {
            (f64::from(p.clients), r.latency_ns_wo.p50 as f64 / 1e3)
        }),
        font,
    )
}
