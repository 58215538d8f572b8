//! `onepipe model paxos`: the analytic model of MultiPaxos with batching and pipelining
//! (`onepipe_baselines::paxos_model`, the seed paper's §III) for a network and workload: the
//! maximum request throughput (Eq. 1), the batch size with which one instance at a time fills the
//! leader's link (Eq. 5, `g(1)`), and per batch size the instance's timing and the window that
//! keeps the link full (Eqs. 3–4, Tables II and III).

use crate::cli::parse_duration;
use clap::{Args, Subcommand};
use onepipe_baselines::paxos_model::PaxosNet;

/// The models `onepipe model` prints.
#[derive(Subcommand, Debug)]
pub enum Model {
    /// MultiPaxos with batching and pipelining: optimal batch size and window (the seed paper's
    /// §III; its settings: `--setting emulab` or `cluster`).
    Paxos(PaxosArgs),
}

/// A network for the Paxos model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Setting {
    /// The paper's Emulab WAN: 9.59 Mbit/s, 150 ms one way.
    Emulab,
    /// The paper's LAN cluster: 940 Mbit/s, 0.2 ms one way.
    Cluster,
}

/// Flags of `model paxos`.
#[derive(Args, Debug)]
pub struct PaxosArgs {
    /// Start from one of the paper's settings (the other flags override it).
    #[arg(long, value_enum, default_value = "cluster")]
    pub setting: Setting,
    /// Link bandwidth, Mbit/s.
    #[arg(long)]
    pub bandwidth_mbps: Option<f64>,
    /// One-way latency (a duration: `150ms`, `200us`).
    #[arg(long, value_parser = parse_duration)]
    pub latency: Option<u64>,
    /// Replicas (odd, at least 3).
    #[arg(long)]
    pub replicas: Option<u32>,
    /// Request size, bytes.
    #[arg(long)]
    pub request: Option<f64>,
    /// Phase 2b (ack) size, bytes.
    #[arg(long)]
    pub ack: Option<f64>,
    /// Answer size, bytes.
    #[arg(long)]
    pub answer: Option<f64>,
    /// Batch sizes to tabulate, KiB (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1.0, 8.0, 32.0, 64.0, 128.0])]
    pub batches_kib: Vec<f64>,
}

/// `onepipe model …`; the exit code.
pub fn model(m: &Model) -> i32 {
    match m {
        Model::Paxos(a) => paxos(a),
    }
}

fn paxos(a: &PaxosArgs) -> i32 {
    let mut net = match a.setting {
        Setting::Emulab => PaxosNet::emulab(),
        Setting::Cluster => PaxosNet::cluster(),
    };
    if let Some(b) = a.bandwidth_mbps {
        net.bandwidth = b * 1e6 / 8.0;
    }
    if let Some(l) = a.latency {
        net.latency = l as f64 / 1e9;
    }
    if let Some(n) = a.replicas {
        net.replicas = n;
    }
    net.request = a.request.unwrap_or(net.request);
    net.ack = a.ack.unwrap_or(net.ack);
    net.answer = a.answer.unwrap_or(net.answer);
    if let Err(e) = net.validate() {
        eprintln!("onepipe model paxos: {e}");
        return crate::cli::EXIT_USAGE;
    }
    if let Some(b) = a.batches_kib.iter().find(|b| !(b.is_finite() && **b > 0.0)) {
        eprintln!("onepipe model paxos: --batches-kib: {b} is not a positive size");
        return crate::cli::EXIT_USAGE;
    }
    println!(
        "MultiPaxos, {} replicas, {:.2} Mbit/s, {} one way; requests {} B, acks {} B, answers {} B",
        net.replicas,
        net.bandwidth * 8.0 / 1e6,
        ms(net.latency),
        net.request,
        net.ack,
        net.answer
    );
    println!(
        "  max throughput (Eq. 1)      {:.0} requests/s (the leader's outgoing link full)",
        net.max_throughput()
    );
    let best = net.batch_for(1);
    println!(
        "  optimal batch, WND = 1 (Eq. 5)  {:.1} KiB ({:.0} requests), τ_dec {}",
        best / 1024.0,
        (best / net.request).floor(),
        ms(net.tau_dec(best))
    );
    println!("| batch (KiB) | τ_all | τ_idle | τ_dec | w = f(S_batch) (Eq. 4) |");
    println!("| --- | --- | --- | --- | --- |");
    for &kib in &a.batches_kib {
        let b = kib * 1024.0;
        println!(
            "| {kib} | {} | {} | {} | ⌈{:.2}⌉ = {} |",
            ms(net.tau_all(b)),
            ms(net.tau_idle(b)),
            ms(net.tau_dec(b)),
            net.w_exact(b),
            net.w(b)
        );
    }
    0
}

fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}
