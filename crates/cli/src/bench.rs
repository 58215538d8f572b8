//! `onepipe bench`: the simulator experiments behind docs/BENCHMARKS.md, each writing a CSV.

use clap::{Args, Subcommand};
use onepipe_sim::{
    run, FaultConfig, NetworkConfig, Report, Service, SimConfig, TopologySpec, WorkloadConfig,
    WorkloadKind,
};
use std::io::Write;
use std::path::PathBuf;

/// The experiments.
#[derive(Subcommand, Debug)]
pub enum Bench {
    /// Latency of both services against the packet loss rate, 1e-8 … 1e-3 (Fig. 9b): a k=4 fat
    /// tree, scatterings to 4 processes, loss on every link.
    Loss(LossArgs),
    /// Throughput of best effort and reliable at saturation on the Fig. 8 workload (all-to-all
    /// broadcast of 64 B messages on a k=4 fat tree).
    Throughput(ThroughputArgs),
    /// The scalability comparison of Fig. 8: all-to-all broadcast of 64 B messages among 1 …
    /// 512 processes on fat trees, for 1Pipe (best effort and reliable) and the baselines
    /// (sequencer on a host or a switch, token, Lamport, ISIS); writes fig8.csv and the two plots.
    Fig8(crate::fig8::Fig8Args),
    /// The transactional key-value store of Fig. 14 (§7.3.1): transactions/s against processes,
    /// latency against the write share, KV operations/s against operations per transaction, on
    /// 1Pipe, the FaRM-like OCC baseline and the non-transactional upper bound; writes
    /// fig14.csv and three plots.
    Fig14(crate::fig14::Fig14Args),
    /// TPC-C New-Order and Payment of Fig. 15 (§7.3.2): transactions/s against processes and
    /// against packet loss, on 1Pipe and the baselines; writes fig15.csv and two plots.
    Fig15(crate::fig15::Fig15Args),
    /// Replicated writes (§2.2.2, §7.3.4): latency and throughput against clients and against
    /// packet loss, by 1-RTT replication on 1Pipe, MultiPaxos with batching and pipelining and a
    /// primary-backup chain, 3 replicas with a disk each; writes replication.csv and three plots.
    Replication(crate::replication::ReplicationArgs),
    /// Live, on loopback: the replicated service's put/get load against an etcd cluster (needs
    /// the `etcd` feature and Debian's etcd): latency p50/p99, throughput, and the same
    /// linearizability check; compare with `onepipe up --app replkv`.
    Etcd(crate::etcd_bench::EtcdArgs),
    /// MultiPaxos with batching and pipelining (Santos & Schiper §IV, Figs. 8–15) on the
    /// Emulab WAN and the LAN cluster: batching alone, pipelining alone, both, scalability with
    /// the clients, large requests, each beside the §III model; writes paxos.csv and ten plots.
    Paxos(crate::paxos::PaxosBenchArgs),
    /// The replicated remote hash table of Fig. 16 (§7.3.3): per-client insert and lookup
    /// throughput on 1Pipe (no fence; replicas written by scattering, any replica serving
    /// lookups) and on plain one-sided verbs (a fence; leader-follower), with 1 and 3 replicas,
    /// and lookups against replicas; writes fig16.csv and two plots.
    Fig16(crate::fig16::Fig16Args),
    /// PLATO's Figs. 8 and 10 (§5): optimistic delivery against the fixed sequencer with the
    /// same k on the paper's Emulab 3-switch setting (4 hosts, ~100 µs one-way): latency and
    /// rollbacks against Δ at 400 and 1,600 packets/s, and against the rate at Δ = 160 µs;
    /// writes plato.csv and two plots.
    Plato(crate::bench_plato::PlatoArgs),
    /// ToTo's §6 (Figs. 5–6, Tables 2–5): the index of latency τ of ToTo(8, φ) against
    /// all-ack at 50–200 messages/s, periodic and Poisson, on a 10 Mb/s rack and a data-centre
    /// rack, the paper's Eq. 1–2 model against measurement, and ToTo beside 1Pipe, Lamport
    /// and ISIS; writes toto.csv, toto-tau.csv and two plots.
    Toto(crate::bench_toto::TotoArgs),
}

/// Flags of `bench loss`.
#[derive(Args, Debug)]
pub struct LossArgs {
    /// Where to write the CSV.
    #[arg(long, default_value = "loss-sweep.csv")]
    pub out: PathBuf,
    /// A short version (0.5 ms of sending per point) for the test suite.
    #[arg(long)]
    pub quick: bool,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Flags of `bench throughput`.
#[derive(Args, Debug)]
pub struct ThroughputArgs {
    /// Where to write the CSV.
    #[arg(long, default_value = "throughput.csv")]
    pub out: PathBuf,
    /// A short version for the test suite.
    #[arg(long)]
    pub quick: bool,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// The loss rates of Fig. 9b.
pub const LOSS_RATES: [f64; 6] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3];

fn service_name(s: Service) -> &'static str {
    match s {
        Service::BestEffort => "be",
        Service::Reliable => "reliable",
        Service::Mixed => "mixed",
    }
}

/// Runs one point; a checker violation is an error (a benchmark of a broken run means nothing).
fn point(cfg: &SimConfig) -> Result<Report, String> {
    let r = run(cfg, &mut |_| {}).map_err(|e| e.to_string())?;
    if r.violations > 0 {
        return Err(format!(
            "seed {}: {} violation(s): {:?}",
            cfg.seed, r.violations, r.violation_samples
        ));
    }
    Ok(r)
}

fn write_csv(path: &PathBuf, header: &str, rows: &[String]) -> Result<(), String> {
    let mut f = std::fs::File::create(path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))?;
    writeln!(f, "{header}").map_err(|e| e.to_string())?;
    for r in rows {
        writeln!(f, "{r}").map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `bench loss`.
pub fn loss(a: &LossArgs) -> Result<(), String> {
    let header = "service,loss_rate,sent,delivered,latency_mean_ns,latency_p50_ns,latency_p99_ns,latency_max_ns,packets_lost,retransmits,lost_reported";
    println!("{header}");
    let mut rows = Vec::new();
    for &loss in &LOSS_RATES {
        for service in [Service::BestEffort, Service::Reliable] {
            let cfg = SimConfig {
                seed: a.seed,
                net: NetworkConfig {
                    topology: TopologySpec::FatTree { k: 4 },
                    procs_per_host: 2,
                    ..Default::default()
                },
                faults: FaultConfig {
                    loss_rate: loss,
                    ..Default::default()
                },
                workload: WorkloadConfig {
                    workload: WorkloadKind::Scatter { k: 4 },
                    rate_per_proc: 50_000.0,
                    duration_ns: if a.quick { 500_000 } else { 20_000_000 },
                    drain_ns: 50_000_000,
                    service,
                    ..Default::default()
                },
                ..SimConfig::default()
            };
            let r = point(&cfg)?;
            let l = if service == Service::Reliable {
                r.latency_ns_reliable
            } else {
                r.latency_ns_be
            };
            let row = format!(
                "{},{loss:e},{},{},{:.0},{},{},{},{},{},{}",
                service_name(service),
                r.sent,
                r.delivered,
                l.mean,
                l.p50,
                l.p99,
                l.max,
                r.packets_lost,
                r.retransmits,
                r.lost_reported
            );
            println!("{row}");
            rows.push(row);
        }
    }
    write_csv(&a.out, header, &rows)
}

/// `bench throughput`.
pub fn throughput(a: &ThroughputArgs) -> Result<(), String> {
    let header = "service,offered_per_proc,throughput_per_proc,latency_p50_ns,latency_p99_ns,retransmits,sends_refused";
    println!("{header}");
    let mut rows = Vec::new();
    let mut best = [0.0f64; 2];
    let rates: &[f64] = if a.quick {
        &[1_000_000.0]
    } else {
        &[250_000.0, 500_000.0, 1_000_000.0, 2_000_000.0]
    };
    for &rate in rates {
        for (i, service) in [Service::BestEffort, Service::Reliable]
            .into_iter()
            .enumerate()
        {
            let cfg = SimConfig {
                seed: a.seed,
                net: NetworkConfig {
                    topology: TopologySpec::FatTree { k: 4 },
                    ..Default::default()
                },
                workload: WorkloadConfig {
                    workload: WorkloadKind::AllToAll,
                    rate_per_proc: rate,
                    duration_ns: if a.quick { 200_000 } else { 2_000_000 },
                    drain_ns: 50_000_000,
                    service,
                    ..Default::default()
                },
                ..SimConfig::default()
            };
            let r = point(&cfg)?;
            best[i] = best[i].max(r.throughput_msgs_per_s_per_proc);
            let row = format!(
                "{},{rate:.0},{:.0},{},{},{},{}",
                service_name(service),
                r.throughput_msgs_per_s_per_proc,
                r.latency_ns.p50,
                r.latency_ns.p99,
                r.retransmits,
                r.sends_rejected + r.sends_refused_full
            );
            println!("{row}");
            rows.push(row);
        }
    }
    println!(
        "# peak: best effort {:.0}, reliable {:.0} msgs/s per process: reliable/best effort = {:.2}",
        best[0],
        best[1],
        best[1] / best[0].max(1.0)
    );
    write_csv(&a.out, header, &rows)
}
