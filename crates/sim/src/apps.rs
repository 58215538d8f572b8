//! What every application run records, whichever system runs it (1Pipe in [`crate::onepipe`],
//! the direct-messaging baselines in [`crate::direct`]): the committed transactions and their
//! checker, latency by kind, throughput, and the report.

use crate::config::{AppSpec, SimConfig};
use crate::metrics::{NsHistogram, Summary};
use onepipe_apps::kv::check::KvChecker;
use onepipe_apps::kv::workload::TxnGen;
use onepipe_apps::kv::{Committed, KvConfig, KvStats, TxnKind};
use onepipe_proto::rng::Rng;
use onepipe_proto::{Instant, ProcId};

/// What an application run reports (`Report::app`).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AppReport {
    /// The application (`kv`) and the system that ran it (`1pipe`, `nontx`).
    pub app: String,
    /// See `app`.
    pub system: String,
    /// Transactions committed, and by kind.
    pub committed: u64,
    /// See `committed`.
    pub committed_ro: u64,
    /// See `committed`.
    pub committed_wo: u64,
    /// See `committed`.
    pub committed_rw: u64,
    /// Transactions per second committed while the initiators were issuing, all processes.
    pub txns_per_s: f64,
    /// The same per process.
    pub txns_per_s_per_proc: f64,
    /// Key-value operations per second (a transaction of k operations counts k).
    pub ops_per_s: f64,
    /// Transaction latency (first send to last reply, the initiator's clock), by kind.
    pub latency_ns_ro: Summary,
    /// See `latency_ns_ro`.
    pub latency_ns_wo: Summary,
    /// See `latency_ns_ro`.
    pub latency_ns_rw: Summary,
    /// The processes' counters, summed.
    pub stats: KvStats,
    /// The system states a serialization order and the checker replayed it.
    pub checked: bool,
    /// Transactions and reads the checker replayed, and what it found.
    pub checked_transactions: u64,
    /// See `checked_transactions`.
    pub checked_reads: u64,
    /// See `checked_transactions`.
    pub violations: u64,
    /// The first few violations.
    pub violation_samples: Vec<String>,
}

/// Records committed transactions: latency by kind, throughput while issuing, the checker.
pub(crate) struct TxnRecorder {
    checker: KvChecker,
    latency: [NsHistogram; 3],
    committed_in_period: u64,
    ops_in_period: u64,
    /// The initiators stop issuing at this local time.
    stop_ns: u64,
    duration_ns: u64,
}

impl TxnRecorder {
    pub(crate) fn new(cfg: &SimConfig) -> TxnRecorder {
        TxnRecorder {
            checker: KvChecker::new(),
            latency: Default::default(),
            committed_in_period: 0,
            ops_in_period: 0,
            stop_ns: cfg.clock_epoch_ns + cfg.duration_ns,
            duration_ns: cfg.duration_ns,
        }
    }

    pub(crate) fn record(&mut self, c: Committed) {
        let k = match c.kind {
            TxnKind::ReadOnly => 0,
            TxnKind::WriteOnly => 1,
            TxnKind::ReadWrite => 2,
        };
        self.latency[k].record(c.return_ns.saturating_sub(c.call_ns));
        if c.return_ns <= self.stop_ns {
            self.committed_in_period += 1;
            self.ops_in_period += (c.reads.len() + c.writes.len()) as u64;
        }
        self.checker.on_commit(c);
    }

    /// The report of `system` over processes with counters `stats`, and the transactions still
    /// open whose writes are bound to apply (`TxnApp::unfinished`); `check`: the system states a
    /// serialization order (`skew_ns`: how far the initiators' clocks may disagree).
    pub(crate) fn report<'a>(
        &self,
        system: &str,
        stats: impl Iterator<Item = &'a KvStats>,
        unfinished: &[Committed],
        check: bool,
        skew_ns: u64,
    ) -> AppReport {
        let (mut s, mut procs) = (KvStats::default(), 0usize);
        for q in stats {
            procs += 1;
            s += q;
        }
        let v = if check {
            self.checker.verdict_with(unfinished, skew_ns)
        } else {
            Default::default()
        };
        let secs = self.duration_ns.max(1) as f64 / 1e9;
        let txns_per_s = self.committed_in_period as f64 / secs;
        AppReport {
            app: "kv".into(),
            system: system.into(),
            committed: s.committed_ro + s.committed_wo + s.committed_rw,
            committed_ro: s.committed_ro,
            committed_wo: s.committed_wo,
            committed_rw: s.committed_rw,
            txns_per_s,
            txns_per_s_per_proc: txns_per_s / procs.max(1) as f64,
            ops_per_s: self.ops_in_period as f64 / secs,
            latency_ns_ro: self.latency[0].summary(),
            latency_ns_wo: self.latency[1].summary(),
            latency_ns_rw: self.latency[2].summary(),
            stats: s,
            checked: check,
            checked_transactions: v.transactions,
            checked_reads: v.reads,
            violations: v.violations,
            violation_samples: v.samples.iter().map(|x| x.to_string()).collect(),
        }
    }

    /// The run's single-key operations as JSON (`--history`).
    pub(crate) fn history_json(&self) -> String {
        self.checker.history_json()
    }
}

/// How far two initiators' clocks may disagree, for the checker's real-time order: twenty
/// standard deviations of the clock skew, and a microsecond.
pub(crate) fn realtime_skew_ns(cfg: &SimConfig) -> u64 {
    (20.0 * cfg.clock_skew_ns) as u64 + 1_000
}

/// The configuration of each of `procs` processes of `spec` (every process serves and
/// initiates), with its transaction generator: seeded from the run's seed, issuing from local
/// time 0 (the clocks' epoch) for `cfg.duration_ns`.
pub(crate) fn kv_processes(cfg: &SimConfig, procs: u32) -> Vec<(KvConfig, TxnGen)> {
    let Some(AppSpec::Kv { workload, window }) = &cfg.app else {
        return Vec::new();
    };
    let zipf = workload.zipf();
    let mut seeds = Rng::new(cfg.seed ^ 0xA995);
    (0..procs)
        .map(|p| {
            let mut kc = KvConfig::new(ProcId(p), procs, workload.clone(), *window);
            // Local clocks read about true time plus the epoch.
            kc.start = Instant(cfg.clock_epoch_ns);
            kc.stop = Instant(cfg.clock_epoch_ns + cfg.duration_ns);
            (kc, TxnGen::new(workload.clone(), zipf, seeds.next_u64()))
        })
        .collect()
}
