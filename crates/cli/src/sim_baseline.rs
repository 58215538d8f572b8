//! `onepipe sim --protocol …`: which total-order protocol a simulation runs — 1Pipe best effort
//! or reliable, or one of the classic designs of the paper's scalability comparison (§7.2,
//! Fig. 8) — and, for the latter, the knobs they add and their summary.

use crate::cli::us;
use clap::{Args, ValueEnum};
use onepipe_baselines::Protocol;
use onepipe_sim::baseline::{run_baseline, BaseReport, BaselineConfig};
use onepipe_sim::SimConfig;
use std::path::Path;

/// The protocols `onepipe sim` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Proto {
    /// 1Pipe, best effort (§4): the same as `--service be`.
    #[value(name = "onepipe-be")]
    OnepipeBe,
    /// 1Pipe, reliable (§5.1): the same as `--service reliable`.
    #[value(name = "onepipe-r")]
    OnepipeR,
    /// Fixed sequencer on a host with its NIC (1Pipe's reference 57).
    Sequencer,
    /// Fixed sequencer on a programmable switch (1Pipe's reference 51).
    SequencerSwitch,
    /// Token ring (1Pipe's reference 86).
    Token,
    /// Lamport timestamps with clocks exchanged per interval (1Pipe's reference 63).
    Lamport,
    /// ISIS agreed order: receivers propose, the sender agrees on the largest (1Pipe's reference 17).
    Isis,
    /// PLATO: optimistic delivery with revoke and confirm over a fixed sequencer that sends
    /// the order --plato-k places per packet (docs/PLATO.md).
    Plato,
    /// PLATO's data path delivering only when the order arrives: its fixed-sequencer baseline
    /// with the same overhead.
    PlatoFixed,
    /// ToTo(n, φ): agreed multicast with early delivery over a causal layer (docs/TOTO.md);
    /// all-to-all only.
    Toto,
    /// All-ack over the same causal layer: deliver once every machine has spoken
    /// (docs/TOTO.md); all-to-all only.
    Allack,
}

impl Proto {
    /// The baseline this names, if it is not 1Pipe.
    pub fn baseline(self) -> Option<Protocol> {
        match self {
            Proto::OnepipeBe | Proto::OnepipeR => None,
            Proto::Sequencer => Some(Protocol::Sequencer),
            Proto::SequencerSwitch => Some(Protocol::SequencerSwitch),
            Proto::Token => Some(Protocol::Token),
            Proto::Lamport => Some(Protocol::Lamport),
            Proto::Isis => Some(Protocol::Isis),
            Proto::Plato => Some(Protocol::Plato),
            Proto::PlatoFixed => Some(Protocol::PlatoFixed),
            Proto::Toto => Some(Protocol::Toto),
            Proto::Allack => Some(Protocol::AllAck),
        }
    }
}

/// A duration, or `auto` (`None`): the value of `--lamport-heartbeat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoDuration(pub Option<u64>);

/// Parses `auto` or a duration.
fn parse_auto_duration(s: &str) -> Result<AutoDuration, String> {
    if s.trim() == "auto" {
        Ok(AutoDuration(None))
    } else {
        crate::cli::parse_duration(s).map(|ns| AutoDuration(Some(ns)))
    }
}

/// The flags that choose the protocol and tune the baselines (docs/BASELINES.md).
#[derive(Args, Debug)]
pub struct BaselineArgs {
    /// Total-order protocol: 1Pipe (onepipe-be, onepipe-r: the same as --service be|reliable)
    /// or a baseline of the paper's Fig. 8 [default: 1Pipe with --service].
    #[arg(long, value_enum, conflicts_with = "service")]
    pub protocol: Option<Proto>,
    /// Host-placed sequencer: its cost per packet in and out, the reciprocal of its NIC message
    /// rate [default: --host-recv-cost in, --host-send-cost out].
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub seq_host_cost: Option<u64>,
    /// Switch-placed sequencer: pipeline time per packet it takes in (copies leave at line
    /// rate).
    #[arg(long, default_value = "100ns", value_parser = crate::cli::parse_duration)]
    pub seq_switch_cost: u64,
    /// Packets waiting at the sequencer's input beyond which processes' sends are refused
    /// (lossless backpressure).
    #[arg(long, default_value_t = 64)]
    pub seq_queue: u32,
    /// Lamport clock exchange interval; auto = the beacon interval, or longer so heartbeats
    /// take at most half of each process's CPU: max(beacon interval, 2 × (procs − 1) ×
    /// (send + receive cost)).
    #[arg(long, default_value = "auto", value_parser = parse_auto_duration)]
    pub lamport_heartbeat: AutoDuration,
    /// Token: most messages per holding; a process queues at most this many waiting for the
    /// token (more sends are refused).
    #[arg(long, default_value_t = 16)]
    pub token_batch: usize,
    /// PLATO (and plato-fixed): places per sequencing packet, PLATO's k.
    #[arg(long, default_value_t = 10)]
    pub plato_k: usize,
    /// PLATO: a partial sequencing batch leaves this long after its first place.
    #[arg(long, default_value = "20us", value_parser = crate::cli::parse_duration)]
    pub plato_flush: u64,
    /// PLATO: Δ, the arrival gap below which two messages are suspected of disorder (the
    /// start value when adaptive).
    #[arg(long, default_value = "2us", value_parser = crate::cli::parse_duration)]
    pub plato_delta: u64,
    /// PLATO: adapt Δ (PLATO §5: ×1.5 on a rollback above 1% rollbacks, ×0.9 every 100 ms or
    /// 1,000 packets below it).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub plato_adaptive: bool,
    /// ToTo: the threshold φ, n/2 <= φ < n [default: ⌈n/2⌉, the paper's n/2].
    #[arg(long)]
    pub toto_phi: Option<u32>,
    /// ToTo and all-ack: silence after delivering an agreed message before a heartbeat (the
    /// paper has none; docs/TOTO.md).
    #[arg(long, default_value = "20us", value_parser = crate::cli::parse_duration)]
    pub toto_heartbeat: u64,
    /// ToTo and all-ack: silence of a machine, while another waits on it, before it is
    /// suspected and agreed crashed (§5.1) [default: 5 ms, and at least 4 heartbeats and 4
    /// causal retries].
    #[arg(long, value_parser = crate::cli::parse_duration)]
    pub toto_suspect: Option<u64>,
}

impl BaselineArgs {
    /// The baseline configuration for `protocol`.
    pub fn config(&self, protocol: Protocol) -> BaselineConfig {
        BaselineConfig {
            seq_host_packet_ns: self.seq_host_cost,
            seq_switch_packet_ns: self.seq_switch_cost,
            seq_queue_len_max: self.seq_queue,
            lamport_heartbeat_interval_ns: self.lamport_heartbeat.0,
            token_batch_max: self.token_batch,
            token_queue_len_max: self.token_batch,
            plato_k: self.plato_k,
            plato_flush_ns: self.plato_flush,
            plato_delta_ns: self.plato_delta,
            plato_adaptive: self.plato_adaptive,
            toto_phi: self.toto_phi,
            toto_heartbeat_ns: self.toto_heartbeat,
            toto_suspect_ns: self.toto_suspect,
            ..BaselineConfig::new(protocol)
        }
    }
}

/// Runs a baseline simulation and prints it; returns the exit code.
pub fn sim(cfg: &SimConfig, base: &BaselineConfig, quiet: bool, json: Option<&Path>) -> i32 {
    if let Err(e) = base.validate(cfg) {
        eprintln!("onepipe sim: {e}");
        return crate::cli::EXIT_USAGE;
    }
    let bar = (!quiet).then(|| {
        let bar = indicatif::ProgressBar::new(1000);
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} simulating [{bar:40}] {percent}% ({elapsed} elapsed, ~{eta} left)",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar
    });
    let started = std::time::Instant::now();
    let mut progress = |f: f64| {
        if let Some(b) = &bar {
            if started.elapsed().as_secs_f64() > 2.0 {
                b.set_position((f.min(1.0) * 1000.0) as u64);
            }
        }
    };
    let report = match run_baseline(cfg, base, &mut progress) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("onepipe sim: {e}");
            return crate::cli::EXIT_USAGE;
        }
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    print_summary(&report);
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&report).expect("report serializes");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("onepipe sim: --json: cannot write {}: {e}", path.display());
            return crate::cli::EXIT_USAGE;
        }
    }
    if report.violations > 0 {
        eprintln!(
            "onepipe sim: {} violation(s) with seed {} — replay with --seed {}",
            report.violations, report.seed, report.seed
        );
        for v in &report.violation_samples {
            eprintln!("  {v}");
        }
        return crate::cli::EXIT_VIOLATION;
    }
    0
}

fn print_summary(r: &BaseReport) {
    println!("onepipe sim — protocol {}, seed {}", r.protocol, r.seed);
    println!("  network     {} ({} processes)", r.topology, r.procs);
    if let Some(node) = &r.sequencer_node {
        println!(
            "  sequencer   on {node}, busy {:.1}% of the run",
            r.sequencer_busy_share.unwrap_or(0.0) * 100.0
        );
    }
    if let Some(hb) = r.heartbeat_interval_ns {
        println!(
            "  heartbeats  every {}, {:.3}% of link capacity",
            us(hb as f64),
            r.heartbeat_bandwidth_share * 100.0
        );
    }
    println!(
        "  messages    {} sent in {} sends, {} delivered; {} sends refused",
        r.sent,
        r.scatterings,
        r.delivered,
        r.sends_rejected + r.sends_refused_full
    );
    if r.packets_lost + r.packets_duplicated + r.reordered_packets + r.recv_overflow > 0 {
        println!(
            "  faults      {} packets lost, {} duplicated, {} reordered, {} dropped at full receive queues ({} receiver stalls); {} NACKs, {} retransmits, {} token retransmits",
            r.packets_lost, r.packets_duplicated, r.reordered_packets, r.recv_overflow, r.recv_stalls, r.nacks, r.retransmits, r.token_retransmits
        );
        println!(
            "  losses      {} given up by receivers, {} sends failed before ordering, {} lost unreported before ordering",
            r.lost_reported, r.send_failed, r.unordered_unreported
        );
    }
    println!(
        "  throughput  {:.0} msgs/s per process",
        r.throughput_msgs_per_s_per_proc
    );
    println!(
        "  latency     mean {}  p50 {}  p99 {}",
        us(r.latency_ns.mean),
        us(r.latency_ns.p50 as f64),
        us(r.latency_ns.p99 as f64)
    );
    if let Some(o) = &r.optimistic {
        print_optimistic(o);
    }
    if let Some(n) = r.causal_checked {
        println!("  causal      {n} deliveries checked against what their senders had delivered");
    }
    crate::cli::print_tail(&crate::cli::Tail {
        drained: r.drained,
        undrained: r.undrained,
        checked: r.checked,
        violations: r.violations,
        checked_deliveries: r.checked_deliveries,
        events: r.events,
        wall_s: r.wall_s,
        events_per_wall_s: r.events_per_wall_s,
        trace_hash: &r.trace_hash,
    });
}

/// The summary's line on optimistic delivery (PLATO, or 1Pipe with `--optimistic-delta`).
pub(crate) fn print_optimistic(o: &onepipe_sim::optcheck::OptReport) {
    println!(
        "  optimistic  p50 {}  p99 {} to usable; {} deliveries, {} revoked before Tm, {} rollbacks ({:.3}%); Δ ends at {}{}",
        us(o.latency_ns.p50 as f64),
        us(o.latency_ns.p99 as f64),
        o.delivered,
        o.revokes_early,
        o.rollbacks,
        o.rollback_fraction * 100.0,
        us(o.delta_ns_end),
        match o.unjudged_end {
            None => "; hooks unchecked (checks off)".to_string(),
            Some(0) => String::new(),
            Some(n) => format!(
                "; what {n} view(s) held at the end unchecked (not drained, or the process left)"
            ),
        }
    );
}
