//! What every application run records, whichever system runs it (1Pipe in [`crate::onepipe`],
//! the direct-messaging baselines in [`crate::direct`]): the applications of a run behind one
//! interface (`AppSet`: the key-value store's, TPC-C's, the replicated service's or the hash
//! table's processes), what they committed and their checker, latency by kind, throughput, and
//! the report.

mod hashtable;
pub(crate) use hashtable::ht_set;

use crate::config::{AppSpec, SimConfig};
use crate::metrics::{NsHistogram, Summary};
use onepipe_apps::kv::check::{unfinished_from_logs, KvChecker};
use onepipe_apps::kv::workload::TxnGen;
use onepipe_apps::kv::{Committed, KvConfig, KvStats, TxnApp, TxnKind};
use onepipe_apps::repl::lincheck::{self, MaybeOp};
use onepipe_apps::repl::paxos::PaxosStats;
use onepipe_apps::repl::{CmdGen, ReplApp, ReplConfig, ReplDone, ReplStats, ReplicaLog};
use onepipe_apps::tpcc::check::TpccChecker;
use onepipe_apps::tpcc::db::TpccLayout;
use onepipe_apps::tpcc::gen::{TpccWorkload, TxnGen as TpccGen};
use onepipe_apps::tpcc::{TpccApp, TpccCommitted, TpccConfig, TpccStats, TpccTxnKind};
use onepipe_proto::app::{AppNode, DynAppNode};
use onepipe_proto::rng::Rng;
use onepipe_proto::Node;
use onepipe_proto::{Instant, ProcId};
use std::collections::HashMap;

/// The applications of a run, one per process, and what they committed: what a driver needs.
pub(crate) trait AppSet {
    /// Processes.
    fn len(&self) -> usize;
    /// Process `p`'s application, as the node a driver runs.
    fn node(&mut self, p: usize) -> &mut DynAppNode;
    /// Process `p`'s next timer.
    fn poll_timeout(&self, p: usize) -> Option<Instant>;
    /// Takes what process `p` committed since the last call into the run's records; `trace`
    /// sees each (transaction, return time).
    fn collect(&mut self, p: usize, trace: &mut dyn FnMut(u64, u64));
    /// Process `p` has no work open.
    fn proc_idle(&self, p: usize) -> bool;
    /// The processes with work open, for `ONEPIPE_SIM_TRACE`.
    fn describe(&self) -> String {
        busy((0..self.len()).map(|p| self.proc_idle(p)))
    }
    /// The report of `system`: `check`, the system states a serialization order the checker
    /// replays (`skew_ns`: how far the initiators' clocks may disagree; `failed`: processes
    /// declared failed, with their failure timestamps).
    fn report(
        &self,
        system: &str,
        check: bool,
        skew_ns: u64,
        failed: &HashMap<u32, u64>,
    ) -> AppReport;
    /// The run's history as JSON (`--history`) in Jepsen's form (`onepipe_apps::history`), for
    /// the applications that have one.
    fn history_json(&self) -> Option<String>;
}

/// The key-value store's processes (any system's) and their records.
pub(crate) struct KvSet {
    pub(crate) procs: Vec<AppNode<Box<dyn TxnApp>>>,
    rec: TxnRecorder,
}

impl KvSet {
    /// `procs` of a run of `cfg`.
    pub(crate) fn new(cfg: &SimConfig, procs: Vec<Box<dyn TxnApp>>) -> KvSet {
        KvSet {
            procs: procs.into_iter().map(AppNode::new).collect(),
            rec: TxnRecorder::new(cfg),
        }
    }
}

impl AppSet for KvSet {
    fn len(&self) -> usize {
        self.procs.len()
    }
    fn node(&mut self, p: usize) -> &mut DynAppNode {
        &mut self.procs[p]
    }
    fn poll_timeout(&self, p: usize) -> Option<Instant> {
        self.procs.get(p)?.poll_timeout()
    }
    fn collect(&mut self, p: usize, trace: &mut dyn FnMut(u64, u64)) {
        while let Some(c) = self.procs[p].get_mut().poll_committed() {
            trace(c.txn, c.return_ns);
            self.rec.record(c);
        }
    }
    fn proc_idle(&self, p: usize) -> bool {
        self.procs[p].get_ref().idle()
    }
    fn report(
        &self,
        system: &str,
        check: bool,
        skew_ns: u64,
        _failed: &HashMap<u32, u64>,
    ) -> AppReport {
        // What took effect is what the servers applied: a writer an initiator gave up (a server
        // failed), a failed initiator's, one still open at the end — each at its timestamp with
        // the writes that were applied; a scattering §5.2 recalled or discarded takes no place.
        let unfinished = unfinished_from_logs(
            self.rec.committed(),
            self.procs
                .iter()
                .map(AppNode::get_ref)
                .flat_map(|p| p.applied()),
        );
        let stats = self.procs.iter().map(AppNode::get_ref).map(|p| p.stats());
        self.rec.report(system, stats, &unfinished, check, skew_ns)
    }
    fn history_json(&self) -> Option<String> {
        let unfinished = unfinished_from_logs(
            self.rec.committed(),
            self.procs
                .iter()
                .map(AppNode::get_ref)
                .flat_map(|p| p.applied()),
        );
        Some(self.rec.history_json(&unfinished))
    }
}

/// `p3, p7 busy` for the processes not idle.
fn busy(idle: impl Iterator<Item = bool>) -> String {
    let open: Vec<String> = idle
        .enumerate()
        .filter(|(_, i)| !i)
        .map(|(p, _)| format!("p{p}"))
        .collect();
    format!("{} with work open: {open:?}", open.len())
}

/// TPC-C's processes (any system's), their checker, latency by kind and throughput.
pub(crate) struct TpccSet {
    pub(crate) procs: Vec<AppNode<Box<dyn TpccApp>>>,
    checker: TpccChecker,
    /// New-Order, Payment.
    latency: [NsHistogram; 2],
    committed_in_period: u64,
    stop_ns: u64,
    duration_ns: u64,
}

impl TpccSet {
    /// `procs` of a run of `cfg` running `workload`.
    pub(crate) fn new(
        cfg: &SimConfig,
        workload: &TpccWorkload,
        procs: Vec<Box<dyn TpccApp>>,
    ) -> TpccSet {
        let layout =
            TpccLayout::for_procs(procs.len() as u32, onepipe_apps::tpcc::db::REPLICAS_DEFAULT);
        TpccSet {
            procs: procs.into_iter().map(AppNode::new).collect(),
            checker: TpccChecker::new(workload.scale, workload.seed, layout),
            latency: Default::default(),
            committed_in_period: 0,
            stop_ns: cfg.net.clock_epoch_ns + cfg.workload.duration_ns,
            duration_ns: cfg.workload.duration_ns,
        }
    }

    fn record(&mut self, c: TpccCommitted) {
        let k = match c.input.kind() {
            TpccTxnKind::NewOrder => 0,
            TpccTxnKind::Payment => 1,
        };
        self.latency[k].record(c.return_ns.saturating_sub(c.call_ns));
        self.committed_in_period += u64::from(c.return_ns <= self.stop_ns);
        self.checker.on_commit(c);
    }

    /// The initiators' `open` transactions completed by the replicas' logs: the answers a
    /// failed initiator never heard, and what was applied that no initiator reports
    /// ([`onepipe_apps::tpcc::check::complete_from_logs`]).
    fn completed(&self, open: Vec<TpccCommitted>) -> Vec<TpccCommitted> {
        onepipe_apps::tpcc::check::complete_from_logs(
            open,
            self.checker.committed().iter(),
            self.procs.iter().map(|p| p.get_ref().applied()),
        )
    }
}

impl AppSet for TpccSet {
    fn len(&self) -> usize {
        self.procs.len()
    }
    fn node(&mut self, p: usize) -> &mut DynAppNode {
        &mut self.procs[p]
    }
    fn poll_timeout(&self, p: usize) -> Option<Instant> {
        self.procs.get(p)?.poll_timeout()
    }
    fn collect(&mut self, p: usize, trace: &mut dyn FnMut(u64, u64)) {
        while let Some(c) = self.procs[p].get_mut().poll_committed() {
            trace(c.txn, c.return_ns);
            self.record(c);
        }
    }
    fn proc_idle(&self, p: usize) -> bool {
        self.procs[p].get_ref().idle()
    }
    fn report(
        &self,
        system: &str,
        check: bool,
        skew_ns: u64,
        failed: &HashMap<u32, u64>,
    ) -> AppReport {
        let mut s = TpccStats::default();
        self.procs
            .iter()
            .map(AppNode::get_ref)
            .for_each(|p| s += p.stats());
        // As for the store: a failed initiator's transactions stamped at or above its failure
        // timestamp were discarded everywhere. Only live replicas' states are compared.
        let open: Vec<TpccCommitted> = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .flat_map(|p| p.unfinished())
            .filter(|u| failed.get(&u.client).is_none_or(|&f| u.key < f))
            .collect();
        let unfinished = self.completed(open);
        // Replicas are compared only once every live process is idle: mid-run, a 2PL primary
        // has executed a part in place that may still abort, a backup lags its primary, a
        // 1Pipe replica has not yet been delivered what its siblings have.
        let live = |p: &usize| !failed.contains_key(&(*p as u32));
        let settled = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .enumerate()
            .filter(|(p, _)| live(p))
            .all(|(_, a)| a.idle());
        let replicas: Vec<(u32, &onepipe_apps::tpcc::db::Shard)> = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .enumerate()
            .filter(|(p, _)| settled && live(p))
            .filter_map(|(_, a)| a.shard())
            .collect();
        let v = if check {
            self.checker.verdict_with(&unfinished, &replicas, skew_ns)
        } else {
            Default::default()
        };
        let checks = if check {
            tpcc_checks(&v, settled)
        } else {
            Checks::new()
        };
        let secs = self.duration_ns.max(1) as f64 / 1e9;
        let txns_per_s = self.committed_in_period as f64 / secs;
        AppReport {
            checks,
            app: "tpcc".into(),
            system: system.into(),
            committed: s.committed(),
            committed_new_order: s.committed_new_order,
            committed_payment: s.committed_payment,
            txns_per_s,
            txns_per_s_per_proc: txns_per_s / self.procs.len().max(1) as f64,
            latency_ns_new_order: self.latency[0].summary(),
            latency_ns_payment: self.latency[1].summary(),
            tpcc_stats: s,
            checked: check,
            checked_transactions: v.checks.transactions,
            checked_reads: v.checks.fields,
            violations: v.violations,
            violation_samples: v.samples.iter().map(|x| x.to_string()).collect(),
            ..AppReport::default()
        }
    }
    fn history_json(&self) -> Option<String> {
        // Every transaction still open: those of a failed initiator stamped at or above its
        // failure timestamp took no effect, which an `info` operation allows.
        let open: Vec<TpccCommitted> = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .flat_map(|p| p.unfinished())
            .collect();
        Some(self.checker.history_json(&self.completed(open)))
    }
}

/// TPC-C's verdict as the report's checks: the replay against the reference (`tpcc-replay`:
/// results and real time), the dependency-graph checker on the history of key accesses
/// (`dependency-graph`), and the end-of-run checks — replica agreement with the reference's
/// rows and clause 3.3.2 — which need every live process idle: a run that did not `settle`
/// leaves them unchecked, and says so.
pub fn tpcc_checks(v: &onepipe_apps::tpcc::check::TpccVerdict, settled: bool) -> Checks {
    let c = &v.checks;
    let kind = |ks: &[&str]| {
        ks.iter()
            .map(|k| v.by_kind.get(k).copied().unwrap_or(0))
            .sum()
    };
    let mut replay = CheckRecord::ran(
        kind(&[
            "result",
            "missing-shard",
            "unexpected-shard",
            "real-time",
            "duplicate",
        ]),
        [
            ("transactions", c.transactions),
            ("unfinished", c.unfinished),
            ("result_fields", c.fields),
        ],
    );
    for (why, n) in &c.left_out {
        replay.counts.insert(format!("left out: {why}"), *n);
    }
    let why = "the run did not settle: live processes still had work open at the end";
    let mut replicas = CheckRecord::ran(
        kind(&["replicas-diverge", "state-mismatch"]),
        [
            ("shards", c.shards_compared),
            ("replicas", c.replicas_compared),
            ("rows", c.rows_compared),
            ("digests", c.digests_compared),
        ],
    );
    let mut consistency = CheckRecord::ran(kind(&["consistency"]), []);
    for (name, n) in &c.conditions {
        consistency.counts.insert((*name).to_string(), *n);
    }
    if !settled {
        replicas = CheckRecord::not_run(why);
        consistency = CheckRecord::not_run(why);
    } else if c.conditions.is_empty() {
        consistency = CheckRecord::not_run("no rows to evaluate them on");
    }
    Checks::from([
        ("tpcc-replay".to_string(), replay),
        ("dependency-graph".to_string(), graph_check(&v.graph)),
        ("replica-agreement".to_string(), replicas),
        ("consistency-3.3.2".to_string(), consistency),
    ])
}

/// The replicated key-value service's processes (any scheme's) and what they completed.
pub(crate) struct ReplSet {
    pub(crate) procs: Vec<AppNode<Box<dyn ReplApp>>>,
    done: Vec<ReplDone>,
    latency: [NsHistogram; 2],
    in_period: u64,
    stop_ns: u64,
    duration_ns: u64,
}

impl ReplSet {
    /// `procs` of a run of `cfg`.
    pub(crate) fn new(cfg: &SimConfig, procs: Vec<Box<dyn ReplApp>>) -> ReplSet {
        ReplSet {
            procs: procs.into_iter().map(AppNode::new).collect(),
            done: Vec::new(),
            latency: Default::default(),
            in_period: 0,
            stop_ns: cfg.net.clock_epoch_ns + cfg.workload.duration_ns,
            duration_ns: cfg.workload.duration_ns,
        }
    }
}

impl ReplSet {
    /// The checks of the run into report `r`: linearizability (`skew_ns`: how far the clients'
    /// clocks may disagree), the logs of the replicas not `failed`, the dependency graph.
    fn check(&self, r: &mut AppReport, skew_ns: u64, failed: &HashMap<u32, u64>) {
        // Writes still open (a client that failed, or a run that did not drain) may or may not
        // have taken effect.
        let maybe: Vec<MaybeOp> = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .flat_map(|p| p.open_writes())
            .collect();
        let v = lincheck::check(&self.done, &maybe, skew_ns, LIN_BUDGET);
        let g = lincheck::graph_verdict(&self.done, &maybe, skew_ns);
        // Logs of the replicas still alive.
        let logs: Vec<ReplicaLog> = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .filter_map(|p| p.replica_log())
            .filter(|l| !failed.contains_key(&l.replica))
            .collect();
        // Durability is promised while a majority of the replicas survives: a write is
        // acknowledged once a majority holds it (MultiPaxos), so losing a majority may lose it.
        let replicas = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .filter(|p| p.replica_log().is_some())
            .count();
        let durable = logs.len() > replicas / 2;
        let acknowledged = self
            .done
            .iter()
            .filter(|d| durable && d.cmd.is_write())
            .map(|d| (d.client, d.id));
        let log_violations = lincheck::check_logs(&logs, acknowledged);
        r.checked_transactions = v.ops;
        r.checked_reads = v.keys;
        r.violations = v.violations + v.undecided + log_violations.len() as u64 + g.anomalies;
        r.checks.insert(
            "linearizability".into(),
            CheckRecord::ran(
                v.violations + v.undecided,
                [
                    ("operations", v.ops),
                    ("keys", v.keys),
                    ("open_writes", maybe.len() as u64),
                    ("undecided_keys", v.undecided),
                ],
            ),
        );
        r.checks.insert(
            "replica-logs".into(),
            CheckRecord::ran(log_violations.len() as u64, [("logs", logs.len() as u64)]),
        );
        r.checks.insert("dependency-graph".into(), graph_check(&g));
        r.violation_samples = v
            .samples
            .iter()
            .cloned()
            .chain(log_violations)
            .chain(g.samples.iter().map(|x| format!("dependency graph: {x}")))
            .take(8)
            .collect();
        if v.undecided > 0 {
            r.violation_samples.push(format!(
                "{} keys undecided within the search budget",
                v.undecided
            ));
        }
    }

    /// The MultiPaxos counters summed over the processes, if they run MultiPaxos.
    fn paxos_stats(&self) -> Option<PaxosStats> {
        let mut all = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .filter_map(|p| p.paxos_stats())
            .peekable();
        all.peek()?;
        let mut sum = PaxosStats::default();
        all.for_each(|s| sum += &s);
        Some(sum)
    }
}

/// Search steps the linearizability checker may take per key before it calls the key
/// undecided.
const LIN_BUDGET: u64 = 2_000_000;

impl AppSet for ReplSet {
    fn len(&self) -> usize {
        self.procs.len()
    }
    fn node(&mut self, p: usize) -> &mut DynAppNode {
        &mut self.procs[p]
    }
    fn poll_timeout(&self, p: usize) -> Option<Instant> {
        self.procs.get(p)?.poll_timeout()
    }
    fn collect(&mut self, p: usize, trace: &mut dyn FnMut(u64, u64)) {
        while let Some(d) = self.procs[p].get_mut().poll_done() {
            trace((u64::from(d.client) << 40) | d.id, d.return_ns);
            self.latency[usize::from(d.cmd.is_write())]
                .record(d.return_ns.saturating_sub(d.call_ns));
            if d.return_ns <= self.stop_ns {
                self.in_period += 1;
            }
            self.done.push(d);
        }
    }
    fn proc_idle(&self, p: usize) -> bool {
        self.procs[p].get_ref().idle()
    }
    fn describe(&self) -> String {
        let mut s = busy((0..self.len()).map(|p| self.proc_idle(p)));
        for (p, proc) in self.procs.iter().map(AppNode::get_ref).enumerate() {
            let state = proc.debug_state();
            if !state.is_empty() {
                s.push_str(&format!("\n    p{p}: {state}"));
            }
        }
        s
    }
    fn report(
        &self,
        system: &str,
        check: bool,
        skew_ns: u64,
        failed: &HashMap<u32, u64>,
    ) -> AppReport {
        let mut stats = ReplStats::default();
        for p in self.procs.iter().map(AppNode::get_ref) {
            stats += p.stats();
        }
        let secs = self.duration_ns.max(1) as f64 / 1e9;
        let clients = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .filter(|p| p.replica_log().is_none())
            .count()
            .max(1);
        let mut r = AppReport {
            app: "replkv".into(),
            system: system.into(),
            committed: self.done.len() as u64,
            committed_ro: stats.gets,
            committed_wo: stats.puts + stats.cas,
            txns_per_s: self.in_period as f64 / secs,
            txns_per_s_per_proc: self.in_period as f64 / secs / clients as f64,
            ops_per_s: self.in_period as f64 / secs,
            latency_ns_ro: self.latency[0].summary(),
            latency_ns_wo: self.latency[1].summary(),
            checked: check,
            repl_stats: stats,
            paxos: self.paxos_stats(),
            ..AppReport::default()
        };
        if check {
            self.check(&mut r, skew_ns, failed);
        }
        r
    }
    fn history_json(&self) -> Option<String> {
        let maybe: Vec<MaybeOp> = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .flat_map(|p| p.open_writes())
            .collect();
        Some(lincheck::history_json(&self.done, &maybe))
    }
}

/// The replicated service's processes of a run of `cfg` (its `AppSpec::ReplKv`), each built by
/// `make` from its settings, its command generator and a seed.
pub(crate) fn repl_set(
    cfg: &SimConfig,
    procs: u32,
    make: impl Fn(ReplConfig, CmdGen, u64) -> Box<dyn ReplApp>,
) -> Option<ReplSet> {
    let Some(AppSpec::ReplKv {
        workload,
        window,
        replicas,
        disk,
        suspect_ns,
        ..
    }) = &cfg.workload.app
    else {
        return None;
    };
    let mut seeds = Rng::new(cfg.seed ^ 0x2E91);
    let apps = (0..procs)
        .map(|p| {
            let client_window = if p >= *replicas { *window } else { 0 };
            let mut rc =
                ReplConfig::new(ProcId(p), *replicas, procs, workload.clone(), client_window);
            rc.start = Instant(cfg.net.clock_epoch_ns);
            rc.stop = Instant(cfg.net.clock_epoch_ns + cfg.workload.duration_ns);
            rc.disk = *disk;
            // A loss or failure is suspected after several disk writes' worth of silence, not
            // when writes merely queue at a disk.
            rc.suspect_ns =
                suspect_ns.unwrap_or(rc.suspect_ns.max(10 * (disk.write_ns + disk.jitter_ns)));
            rc.retain = usize::MAX;
            let gen = CmdGen::new(workload.clone(), p, seeds.next_u64());
            make(rc, gen, seeds.next_u64())
        })
        .collect();
    Some(ReplSet::new(cfg, apps))
}

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
    /// The store processes' counters, summed (kv).
    pub stats: KvStats,
    /// TPC-C: New-Orders and Payments committed (a rolled-back New-Order counts: it completed).
    pub committed_new_order: u64,
    /// See `committed_new_order`.
    pub committed_payment: u64,
    /// TPC-C: latency of New-Order and of Payment.
    pub latency_ns_new_order: Summary,
    /// See `latency_ns_new_order`.
    pub latency_ns_payment: Summary,
    /// TPC-C processes' counters, summed.
    pub tpcc_stats: TpccStats,
    /// The system states a serialization order and the checker replayed it.
    pub checked: bool,
    /// Transactions and reads (TPC-C: result fields) the checker replayed, and what it found.
    pub checked_transactions: u64,
    /// See `checked_transactions`.
    pub checked_reads: u64,
    /// See `checked_transactions`.
    pub violations: u64,
    /// The replicated service's counters, summed (replkv).
    pub repl_stats: ReplStats,
    /// MultiPaxos's counters (replkv by `--system paxos`), summed over the processes: only a
    /// leader decides instances, so without a leader change they are the leader's.
    pub paxos: Option<PaxosStats>,
    /// The hash table: lookups and inserts completed per second per client while issuing.
    pub lookups_per_s_per_client: f64,
    /// See `lookups_per_s_per_client`.
    pub inserts_per_s_per_client: f64,
    /// The hash table's counters, summed.
    pub ht_stats: onepipe_apps::hashtable::HtStats,
    /// The first few violations.
    pub violation_samples: Vec<String>,
    /// Every check the run states, by name: whether it ran, what it counted, what it found.
    pub checks: Checks,
}

impl AppReport {
    /// The checks that apply to this run but could not run, with why: a run with any is
    /// unchecked by them (a failure unless allowed: `--allow-unchecked`).
    pub fn unchecked(&self) -> Vec<(&str, &str)> {
        self.checks
            .iter()
            .filter(|(_, c)| !c.ran)
            .map(|(n, c)| {
                (
                    n.as_str(),
                    c.why_not.as_deref().unwrap_or("no reason given"),
                )
            })
            .collect()
    }

    /// `; unchecked: names (why)` for a run whose applicable checks did not all run, else empty.
    pub fn unchecked_note(&self) -> String {
        let not = self.unchecked();
        if not.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = not.iter().map(|(n, why)| format!("{n} ({why})")).collect();
        format!(
            "; unchecked: {} (--allow-unchecked accepts it)",
            parts.join(", ")
        )
    }

    /// `checked`, `unchecked: names` or `n/a` (a system that states no order to check), for a
    /// CSV row.
    pub fn checked_label(&self) -> String {
        if !self.checked {
            return "n/a".into();
        }
        let not: Vec<&str> = self.unchecked().iter().map(|(n, _)| *n).collect();
        if not.is_empty() {
            "checked".into()
        } else {
            format!("unchecked: {}", not.join(" "))
        }
    }
}

/// The checks of a report, by name (`order-replay`, `dependency-graph`, …).
pub type Checks = std::collections::BTreeMap<String, CheckRecord>;

/// One check a report states.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CheckRecord {
    /// It ran. When it did not, `why_not` says why and the run is unchecked by it.
    pub ran: bool,
    /// See `ran`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
    /// What it looked at, by name (transactions, reads, edges, operations left out…).
    pub counts: std::collections::BTreeMap<String, u64>,
    /// What it found.
    pub violations: u64,
}

impl CheckRecord {
    /// A check that ran, with its counts.
    pub fn ran<'a>(violations: u64, counts: impl IntoIterator<Item = (&'a str, u64)>) -> Self {
        CheckRecord {
            ran: true,
            why_not: None,
            counts: counts
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            violations,
        }
    }

    /// A check that could not run, and why.
    pub fn not_run(why: impl Into<String>) -> Self {
        CheckRecord {
            why_not: Some(why.into()),
            ..Default::default()
        }
    }
}

/// The dependency-graph checker's verdict as a check of a report.
pub fn graph_check(g: &onepipe_apps::depgraph::GraphVerdict) -> CheckRecord {
    CheckRecord::ran(
        g.anomalies,
        [
            ("ok", g.ok),
            ("info", g.info),
            ("failed", g.failed),
            ("reads", g.reads),
            ("ww_edges", g.edges[0]),
            ("wr_edges", g.edges[1]),
            ("rw_edges", g.edges[2]),
            ("rt_edges", g.edges[3]),
        ],
    )
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
            stop_ns: cfg.net.clock_epoch_ns + cfg.workload.duration_ns,
            duration_ns: cfg.workload.duration_ns,
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
        let (v, g) = if check {
            (
                self.checker.verdict_with(unfinished, skew_ns),
                self.checker.graph_verdict(unfinished, skew_ns),
            )
        } else {
            Default::default()
        };
        // A system that states no serialization order (NonTX) has nothing to check against: no
        // checks, and `checked: false` says so.
        let mut checks = Checks::new();
        if check {
            let counts = [
                ("transactions", v.transactions),
                ("reads", v.reads),
                ("unfinished_writers", unfinished.len() as u64),
            ];
            checks.insert(
                "order-replay".into(),
                CheckRecord::ran(v.violations, counts),
            );
            checks.insert("dependency-graph".into(), graph_check(&g));
        }
        let samples = v.samples.iter().map(|x| x.to_string());
        let graph_samples = g.samples.iter().map(|x| format!("dependency graph: {x}"));
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
            violations: v.violations + g.anomalies,
            violation_samples: samples.chain(graph_samples).collect(),
            checks,
            ..AppReport::default()
        }
    }

    /// The transactions recorded as committed.
    pub(crate) fn committed(&self) -> impl Iterator<Item = &Committed> {
        self.checker.committed().iter()
    }

    /// The run's history in Jepsen's form (`--history`), with `unfinished` of unknown outcome.
    pub(crate) fn history_json(&self, unfinished: &[Committed]) -> String {
        self.checker.history_json(unfinished)
    }
}

/// How far two initiators' clocks may disagree, for the checker's real-time order: twenty
/// standard deviations of the clock skew, and a microsecond.
pub fn realtime_skew_ns(cfg: &SimConfig) -> u64 {
    // A clock step (`--clock-step`) moves a clock that far at once.
    let step = cfg
        .faults
        .clock_steps
        .iter()
        .map(|s| s.2.unsigned_abs())
        .max()
        .unwrap_or(0);
    (20.0 * cfg.net.clock_skew_ns) as u64 + 1_000 + step
}

/// TPC-C's processes of a run of `cfg` (its `AppSpec::Tpcc`), each built by `make` from its
/// configuration and generator: seeded from the run's seed, issuing from local time 0 (the
/// clocks' epoch) for `cfg.duration_ns`.
pub(crate) fn tpcc_set(
    cfg: &SimConfig,
    procs: u32,
    make: impl Fn(TpccConfig, TpccGen) -> Box<dyn TpccApp>,
) -> Option<TpccSet> {
    let Some(AppSpec::Tpcc { workload, window }) = &cfg.workload.app else {
        return None;
    };
    let mut seeds = Rng::new(cfg.seed ^ 0x7CC);
    let apps = (0..procs)
        .map(|p| {
            let mut tc = TpccConfig::new(ProcId(p), procs, workload.clone(), *window);
            tc.start = Instant(cfg.net.clock_epoch_ns);
            tc.stop = Instant(cfg.net.clock_epoch_ns + cfg.workload.duration_ns);
            // The answers a failed initiator never heard come from its replicas' logs
            // (`TpccSet::completed`).
            tc.log_applied = true;
            let gen = TpccGen::new(workload.clone(), tc.home_warehouse(), seeds.next_u64());
            make(tc, gen)
        })
        .collect();
    Some(TpccSet::new(cfg, workload, apps))
}

/// The configuration of each of `procs` processes of `spec` (every process serves and
/// initiates), with its transaction generator: seeded from the run's seed, issuing from local
/// time 0 (the clocks' epoch) for `cfg.duration_ns`.
pub(crate) fn kv_processes(cfg: &SimConfig, procs: u32) -> Vec<(KvConfig, TxnGen)> {
    let Some(AppSpec::Kv { workload, window }) = &cfg.workload.app else {
        return Vec::new();
    };
    let zipf = workload.zipf();
    let mut seeds = Rng::new(cfg.seed ^ 0xA995);
    (0..procs)
        .map(|p| {
            let mut kc = KvConfig::new(ProcId(p), procs, workload.clone(), *window);
            // Local clocks read about true time plus the epoch.
            kc.start = Instant(cfg.net.clock_epoch_ns);
            kc.stop = Instant(cfg.net.clock_epoch_ns + cfg.workload.duration_ns);
            // The checker learns what took effect from the servers (`KvSet::report`).
            kc.log_applied = true;
            (kc, TxnGen::new(workload.clone(), zipf, seeds.next_u64()))
        })
        .collect()
}
