//! `onepipe up --app kv|tpcc`: what the application's processes recorded, checked and
//! summarized — the transactions committed, per second and by kind, latency p50/p99 by kind, and
//! the checker's verdict. The store: every committed transaction replayed in timestamp order,
//! every read checked, and real time; `--history FILE` writes the run's history in Jepsen's form.
//! TPC-C: every committed transaction's results replayed in timestamp order on an unsharded
//! model, real time, every replica's digest against its siblings' and the model's, and clause
//! 3.3.2's conditions.

use super::super::app_node::{KvRecords, ReplRecords, TpccRecords};
use super::super::KillTarget;
use super::super::UpArgs;
use super::Run;
use crate::cli::EXIT_VIOLATION;
use onepipe_apps::depgraph::GraphVerdict;
use onepipe_apps::kv::check::{unfinished_from_logs, KvChecker, KvVerdict};
use onepipe_apps::kv::{Committed, KvStats, TxnKind};
use onepipe_apps::repl::lincheck;
use onepipe_apps::repl::paxos::PaxosStats;
use onepipe_apps::repl::{ReplDone, ReplStats, ReplicaLog};
use onepipe_apps::tpcc::check::{unfinished_from_logs as tpcc_unfinished_from_logs, TpccChecker};
use onepipe_apps::tpcc::db::{TpccLayout, REPLICAS_DEFAULT};
use onepipe_apps::tpcc::{TpccStats, TpccTxnKind};
use onepipe_runtime::cluster::Cluster;
use onepipe_sim::metrics::{NsHistogram, Summary};
use onepipe_sim::AppSpec;
use serde_json::json;
use std::collections::BTreeSet;

/// Checks and prints the run; the exit code.
pub(super) fn app_finish(args: &UpArgs, cluster: &Cluster, run: &Run<'_>) -> Result<i32, String> {
    match args.app.spec()? {
        Some(AppSpec::Tpcc { workload, .. }) => tpcc_finish(args, cluster, run, &workload),
        Some(AppSpec::ReplKv { replicas, .. }) => replkv_finish(args, cluster, run, replicas),
        _ => kv_finish(args, cluster, run),
    }
}

/// The processes that died or were declared failed (§5.2): their records may be missing.
fn failed(run: &Run<'_>) -> BTreeSet<u32> {
    let killed = run.kills.iter().filter_map(|k| match k.kill.target {
        KillTarget::Proc(p) if k.fired.is_some() => Some(p),
        _ => None,
    });
    run.declared.keys().copied().chain(killed).collect()
}

/// The records of every process, from files `p<N>.<ext>`; a process that failed may have none.
fn read_records<R: serde::de::DeserializeOwned>(
    cluster: &Cluster,
    run: &Run<'_>,
    ext: &str,
) -> Result<Vec<R>, String> {
    let failed = failed(run);
    let mut all = Vec::new();
    let mut missing = Vec::new();
    for p in &cluster.processes {
        let path = run.dir.join(format!("p{}.{ext}", p.id));
        let Ok(text) = std::fs::read_to_string(&path) else {
            if !failed.contains(&p.id) {
                missing.push(p.id);
            }
            continue;
        };
        all.push(
            serde_json::from_str(&text)
                .map_err(|e| format!("{}: not a record of the run: {e}", path.display()))?,
        );
    }
    if !missing.is_empty() {
        return Err(format!(
            "no records from process(es) {missing:?}: their transactions cannot be checked"
        ));
    }
    Ok(all)
}

/// `--app tpcc`.
fn tpcc_finish(
    args: &UpArgs,
    cluster: &Cluster,
    run: &Run<'_>,
    workload: &onepipe_apps::tpcc::gen::TpccWorkload,
) -> Result<i32, String> {
    let procs = cluster.procs();
    let layout = TpccLayout::for_procs(procs, REPLICAS_DEFAULT);
    let mut checker = TpccChecker::new(workload.scale, workload.seed, layout);
    let failed = failed(run);
    let mut digests = Vec::new();
    let (mut stats, mut refused_full, mut reported_open) = (TpccStats::default(), 0, 0usize);
    let mut logs = Vec::new();
    for r in read_records::<TpccRecords>(cluster, run, "tpcc.json")? {
        stats += &r.stats;
        refused_full += r.refused_full;
        reported_open += r.unfinished.len();
        digests.extend(r.shard);
        logs.push(r.applied);
        r.committed.into_iter().for_each(|c| checker.on_commit(c));
    }
    // What took effect is what the replicas applied (as for the store): a dead or abandoning
    // initiator's transactions in their place, a recalled scattering nowhere.
    let unfinished =
        tpcc_unfinished_from_logs(checker.committed().iter(), logs.iter().map(Vec::as_slice));
    let duration = args.work.duration;
    let (summaries, in_period) = latencies::<2, _>(checker.committed(), run.t0 + duration, |c| {
        let k = usize::from(c.input.kind() == TpccTxnKind::Payment);
        (k, c.call_ns, c.return_ns)
    });
    let v = checker.verdict_with_digests(&unfinished, &digests, 0);
    let per_s = in_period as f64 / (duration as f64 / 1e9);
    println!(
        "  app tpcc on 1pipe  {} transactions committed ({} New-Order, {} of them rolled back; {} Payment): {:.0}/s, {:.0}/s per process; {} shards × {} replicas",
        checker.len(),
        stats.committed_new_order,
        stats.rolled_back,
        stats.committed_payment,
        per_s,
        per_s / f64::from(procs.max(1)),
        layout.shards,
        layout.replicas
    );
    print_latency(&["New-Order", "Payment"], &summaries);
    println!(
        "  app checker {} transactions replayed in timestamp order ({} still open), {} result fields, {} replica digests over {} shards, {} consistency conditions: {} violation(s); {} recalled, {} replies resent, {} sends refused (buffer full)",
        v.checks.transactions, v.checks.unfinished, v.checks.fields, digests.len(), v.checks.shards_compared, v.checks.conditions_evaluated(), v.violations, stats.recalled, stats.replies_resent, refused_full
    );
    print_graph("the key accesses alone", &v.graph);
    for s in &v.samples {
        eprintln!("  {s}");
    }
    write_history(args, "TPC-C's key accesses", unfinished.len(), || {
        checker.history_json(&unfinished)
    })?;
    let open = if failed.is_empty() { reported_open } else { 0 };
    let report = json!({
        "app": "tpcc",
        "system": "1pipe",
        "procs": procs,
        "committed": checker.len(),
        "txns_per_s": per_s,
        "latency_ns_new_order": summaries[0],
        "latency_ns_payment": summaries[1],
        "stats": stats,
        "open": unfinished.len(),
        "checked_transactions": v.checks.transactions,
        "checked_fields": v.checks.fields,
        "shards_compared": v.checks.shards_compared,
        "checks": onepipe_sim::apps::tpcc_checks(&v, true),
        "violations": v.violations,
        "violation_samples": v.samples.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        "failed_procs": failed,
    });
    conclude(args, &report, v.violations, open)
}

/// `--app replkv`: every completed operation checked for linearizability per key (with the
/// writes still open as maybe-taken-effect), the surviving replicas' logs against each other,
/// and no acknowledged write lost.
fn replkv_finish(
    args: &UpArgs,
    cluster: &Cluster,
    run: &Run<'_>,
    replicas: u32,
) -> Result<i32, String> {
    let failed = failed(run);
    let procs = cluster.procs();
    let ReplRun {
        stats,
        refused_full,
        paxos,
        done,
        mut open,
        logs,
    } = ReplRun::read(cluster, run, &failed)?;
    place_failed_writes(&failed, &done, &mut open, &logs);
    let duration = args.work.duration;
    let (summaries, in_period) = latencies::<2, _>(&done, run.t0 + duration, |d| {
        (usize::from(d.cmd.is_write()), d.call_ns, d.return_ns)
    });
    let (v, g, log_violations) = replkv_check(&done, &open, &logs, replicas);
    let violations = v.violations + v.undecided + log_violations.len() as u64 + g.anomalies;
    let per_s = in_period as f64 / (duration as f64 / 1e9);
    let (system, scheme) = match paxos {
        Some(_) => ("paxos", "MultiPaxos with batching and pipelining"),
        None => ("1pipe", "1-RTT replication"),
    };
    println!(
        "  app replkv on {system} ({scheme}, {replicas} replicas)  {} operations ({} get, {} put, {} cas): {:.0}/s",
        done.len(),
        stats.gets,
        stats.puts,
        stats.cas,
        per_s
    );
    print_latency(&["get", "write"], &summaries);
    println!(
        "  app checker {} operations over {} keys checked for linearizability ({} writes left open), {} replica logs compared: {} violation(s), {} undecided; {} recoveries, {} entries rejected for a gap, {} resent, {} sends refused (buffer full)",
        v.ops, v.keys, open.len(), logs.len(), v.violations + log_violations.len() as u64, v.undecided, stats.recoveries, stats.rejected, stats.resent, refused_full
    );
    if let Some(p) = &paxos {
        print_paxos(p, stats.resent);
    }
    println!(
        "  app graph   the history alone: {} ok, {} of unknown outcome, {} reads; {} wr, {} ww, {} rw, {} rt edges: {} anomal{}",
        g.ok, g.info, g.reads, g.edges[1], g.edges[0], g.edges[2], g.edges[3], g.anomalies,
        if g.anomalies == 1 { "y" } else { "ies" }
    );
    for s in v.samples.iter().chain(&log_violations) {
        eprintln!("  {s}");
    }
    for s in &g.samples {
        eprintln!("  dependency graph: {s}");
    }
    write_replkv_history(args, &done, &open)?;
    let report = json!({
        "app": "replkv",
        "system": system,
        "paxos": paxos,
        "procs": procs,
        "replicas": replicas,
        "committed": done.len(),
        "ops_per_s": per_s,
        "latency_ns_get": summaries[0],
        "latency_ns_write": summaries[1],
        "stats": stats,
        "open": open.len(),
        "checked_ops": v.ops,
        "checked_keys": v.keys,
        "undecided": v.undecided,
        "violations": violations,
        "violation_samples": v.samples.iter().chain(&log_violations).collect::<Vec<_>>(),
        "failed_procs": failed,
    });
    let left_open = if failed.is_empty() { open.len() } else { 0 };
    conclude(args, &report, violations, left_open)
}

/// What the processes of a replicated key-value run recorded, together.
struct ReplRun {
    stats: ReplStats,
    refused_full: u64,
    /// The MultiPaxos counters (`--system paxos`).
    paxos: Option<PaxosStats>,
    /// The operations completed, in call order.
    done: Vec<ReplDone>,
    /// The writes still open.
    open: Vec<lincheck::MaybeOp>,
    /// The logs of the replicas that did not fail.
    logs: Vec<ReplicaLog>,
}

impl ReplRun {
    /// Reads every process's records; `failed`: the processes that failed (their logs are
    /// left out).
    fn read(cluster: &Cluster, run: &Run<'_>, failed: &BTreeSet<u32>) -> Result<ReplRun, String> {
        let (mut stats, mut refused_full) = (ReplStats::default(), 0);
        let mut paxos: Option<PaxosStats> = None;
        let (mut done, mut open, mut logs) = (Vec::new(), Vec::new(), Vec::new());
        for r in read_records::<ReplRecords>(cluster, run, "replkv.json")? {
            stats += &r.stats;
            refused_full += r.refused_full;
            if let Some(p) = &r.paxos {
                *paxos.get_or_insert_with(PaxosStats::default) += p;
            }
            done.extend(r.done);
            open.extend(r.open);
            logs.extend(r.log.filter(|_| !failed.contains(&r.proc)));
        }
        done.sort_by_key(|d| (d.call_ns, d.client, d.id));
        Ok(ReplRun {
            stats,
            refused_full,
            paxos,
            done,
            open,
            logs,
        })
    }
}

/// Adds to `open` the writes of `failed` clients that the replicas committed (in `logs`) and
/// that no record names.
fn place_failed_writes(
    failed: &BTreeSet<u32>,
    done: &[ReplDone],
    open: &mut Vec<lincheck::MaybeOp>,
    logs: &[ReplicaLog],
) {
    // A failed client's records died with it: the writes of it the replicas committed took
    // effect, at a time the checker may place anywhere before their first reader (an open
    // write called at 0). Its reads are unknown and constrain nothing.
    let known: BTreeSet<(u32, u64)> = done
        .iter()
        .map(|d| (d.client, d.id))
        .chain(open.iter().map(|o| (o.client, o.id)))
        .collect();
    let mut placed = BTreeSet::new();
    for l in logs {
        for (&(client, id), &cmd) in l.committed_writes.iter().zip(&l.committed_cmds) {
            if failed.contains(&client)
                && !known.contains(&(client, id))
                && placed.insert((client, id))
            {
                open.push(lincheck::MaybeOp {
                    client,
                    id,
                    cmd,
                    call_ns: 0,
                });
            }
        }
    }
}

/// The replicated service's checks: linearizability per key, the dependency graph of the
/// history, and the replicas' logs against each other and against the acknowledged writes.
fn replkv_check(
    done: &[ReplDone],
    open: &[lincheck::MaybeOp],
    logs: &[ReplicaLog],
    replicas: u32,
) -> (lincheck::LinVerdict, GraphVerdict, Vec<String>) {
    // One machine, one CLOCK_MONOTONIC: the clients' times agree.
    let v = lincheck::check(done, open, 0, 2_000_000);
    let g = lincheck::graph_verdict(done, open, 0);
    // Durability is promised while a majority of the replicas survives (as in the simulator).
    let durable = logs.len() > replicas as usize / 2;
    let acknowledged = done
        .iter()
        .filter(|d| durable && d.cmd.is_write())
        .map(|d| (d.client, d.id));
    let log_violations = lincheck::check_logs(logs, acknowledged);
    (v, g, log_violations)
}

/// MultiPaxos's line: instances and batches, Phase 1 runs, and resends (`resent`: the
/// clients').
fn print_paxos(p: &PaxosStats, resent: u64) {
    println!(
        "  app paxos   {} instances decided carrying {} requests (mean batch {:.1}), {} Phase 1 runs ({} won), {} accepts resent, {} resends by clients",
        p.instances_decided, p.requests_decided, p.batch_mean(), p.phase1_runs, p.phase1_won, p.retransmits, resent
    );
}

/// `--history` of a replkv run: writes every operation, the open writes as info, and says so.
fn write_replkv_history(
    args: &UpArgs,
    done: &[ReplDone],
    open: &[lincheck::MaybeOp],
) -> Result<(), String> {
    if let Some(path) = &args.app.history {
        std::fs::write(path, lincheck::history_json(done, open))
            .map_err(|e| format!("--history: cannot write {}: {e}", path.display()))?;
        println!(
            "  history     {} (Jepsen's form: every operation, {} open writes as info)",
            path.display(),
            open.len()
        );
    }
    Ok(())
}

/// `--app kv`.
fn kv_finish(args: &UpArgs, cluster: &Cluster, run: &Run<'_>) -> Result<i32, String> {
    let failed = failed(run);
    let procs = cluster.procs();
    let KvRun {
        checker,
        stats,
        refused_full,
        reported_open,
        unfinished,
        from_dead,
        unplaceable,
    } = kv_read(cluster, run, &failed)?;
    let duration = args.work.duration;
    let (summaries, in_period) = latencies::<3, _>(checker.committed(), run.t0 + duration, |c| {
        let k = match c.kind {
            TxnKind::ReadOnly => 0,
            TxnKind::WriteOnly => 1,
            TxnKind::ReadWrite => 2,
        };
        (k, c.call_ns, c.return_ns)
    });
    // One machine, one CLOCK_MONOTONIC: the initiators' times agree.
    let v = checker.verdict_with(&unfinished, 0);
    let g = checker.graph_verdict(&unfinished, 0);
    let secs = duration as f64 / 1e9;
    let per_s = in_period as f64 / secs;
    println!(
        "  app kv on 1pipe  {} transactions committed ({} read-only, {} write-only, {} read-write): {:.0}/s, {:.0}/s per process",
        checker.len(),
        stats.committed_ro,
        stats.committed_wo,
        stats.committed_rw,
        per_s,
        per_s / f64::from(procs.max(1))
    );
    print_latency(&["read-only", "write-only", "read-write"], &summaries);
    println!(
        "  app checker {} transactions and {} reads replayed in timestamp order ({} still open, {} of them failed processes' writes the servers applied; {} reads of a failed server's unlogged writes left out): {} violation(s); {} read-only retries, {} replies resent, {} abandoned (a server failed), {} sends refused (buffer full)",
        v.transactions, v.reads, unfinished.len(), from_dead, unplaceable, v.violations, stats.ro_retries, stats.replies_resent, stats.abandoned, refused_full
    );
    for s in &v.samples {
        eprintln!("  {s}");
    }
    print_graph("the history alone", &g);
    for s in &g.samples {
        eprintln!("  dependency graph: {s}");
    }
    write_history(args, "every transaction", unfinished.len(), || {
        checker.history_json(&unfinished)
    })?;
    let checks = kv_checks(&v, &g, unfinished.len(), unplaceable);
    let report = json!({
        "app": "kv",
        "system": "1pipe",
        "procs": procs,
        "committed": checker.len(),
        "txns_per_s": per_s,
        "latency_ns_ro": summaries[0],
        "latency_ns_wo": summaries[1],
        "latency_ns_rw": summaries[2],
        "stats": stats,
        "open": unfinished.len(),
        "checked_transactions": v.transactions,
        "checked_reads": v.reads,
        "violations": v.violations + g.anomalies,
        "violation_samples": v.samples.iter().map(|s| s.to_string())
            .chain(g.samples.iter().map(|s| format!("dependency graph: {s}")))
            .collect::<Vec<_>>(),
        "failed_procs": failed,
        "from_failed": from_dead,
        "reads_left_out": unplaceable,
        "checks": checks,
    });
    // With a failure, transactions left open are expected (abandoned, or the dead's own).
    let open = if failed.is_empty() { reported_open } else { 0 };
    conclude(args, &report, v.violations, open)
}

/// What the processes of a store run recorded, placed for the checker (see [`kv_read`]).
struct KvRun {
    /// Every committed transaction (less the reads that cannot be placed).
    checker: KvChecker,
    stats: KvStats,
    refused_full: u64,
    /// Transactions the processes reported still open.
    reported_open: usize,
    /// The writers that took effect and never returned.
    unfinished: Vec<Committed>,
    /// Of which failed processes' own.
    from_dead: usize,
    /// Committed reads left out: of a failed server's writes that no one reports.
    unplaceable: u64,
}

/// Reads every process's records of a store run and hands the committed transactions to the
/// checker; `failed`: the processes that failed.
fn kv_read(cluster: &Cluster, run: &Run<'_>, failed: &BTreeSet<u32>) -> Result<KvRun, String> {
    let mut checker = KvChecker::new();
    let mut stats = KvStats::default();
    let mut refused_full = 0;
    let procs = cluster.procs();
    // What the servers applied is what took effect: a transaction of which some write was
    // applied but that no initiator reports committed (its initiator died, or gave it up when a
    // server failed) is a writer that never returned, in its place; a scattering recalled
    // (§5.2) is in no log and takes no place.
    let mut committed = Vec::new();
    let mut applied = Vec::new();
    let mut reported_open = 0usize;
    for recs in read_records::<KvRecords>(cluster, run, "kv.json")? {
        stats += &recs.stats;
        refused_full += recs.refused_full;
        reported_open += recs.unfinished.len();
        committed.extend(recs.committed);
        applied.extend(recs.applied);
    }
    let unfinished = unfinished_from_logs(committed.iter(), applied.iter());
    let known: BTreeSet<(u64, u64)> = committed
        .iter()
        .chain(&unfinished)
        .flat_map(|c| c.writes.iter().map(|&(k, v)| (k, v.writer)))
        .collect();
    let from_dead = unfinished
        .iter()
        .filter(|c| failed.contains(&c.client))
        .count();
    // A failed server's log died with it: a committed read of a value it applied for a writer
    // no one reports cannot be placed. It is left out (counted); the rest is checked.
    let mut unplaceable = 0u64;
    for mut c in committed {
        c.reads.retain(|&(k, v)| {
            let lost = v.is_some_and(|v| {
                !known.contains(&(k, v.writer))
                    && failed.contains(&onepipe_apps::kv::server_of(k, procs))
            });
            unplaceable += u64::from(lost);
            !lost
        });
        checker.on_commit(c);
    }
    Ok(KvRun {
        checker,
        stats,
        refused_full,
        reported_open,
        unfinished,
        from_dead,
        unplaceable,
    })
}

/// The store's checks for the report: the replay in timestamp order, with its counts, and the
/// dependency graph.
fn kv_checks(
    v: &KvVerdict,
    g: &GraphVerdict,
    unfinished: usize,
    unplaceable: u64,
) -> serde_json::Value {
    json!({
        "order-replay": {
            "ran": true,
            "counts": {
                "transactions": v.transactions,
                "reads": v.reads,
                "unfinished_writers": unfinished,
                "reads_left_out_unplaceable": unplaceable,
            },
            "violations": v.violations,
        },
        "dependency-graph": onepipe_sim::apps::graph_check(g),
    })
}

/// Writes `report` to `--json`; the exit code: 1 on a violation, 3 if transactions were left
/// open (nothing failed: every one must finish by the drain limit), else 0.
fn conclude(
    args: &UpArgs,
    report: &serde_json::Value,
    violations: u64,
    open: usize,
) -> Result<i32, String> {
    if let Some(path) = &args.json {
        std::fs::write(path, format!("{report:#}\n"))
            .map_err(|e| format!("--json: cannot write {}: {e}", path.display()))?;
    }
    if violations > 0 {
        return Ok(EXIT_VIOLATION);
    }
    // Checks that apply but could not run: a failure unless allowed (the report names them).
    let not_run: Vec<String> = report["checks"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, c)| c["ran"] == false)
        .map(|(n, c)| {
            format!(
                "{n} ({})",
                c["why_not"].as_str().unwrap_or("no reason given")
            )
        })
        .collect();
    if !not_run.is_empty() {
        eprintln!(
            "onepipe up: checks that did not run: {}",
            not_run.join(", ")
        );
        if !args.app.allow_unchecked {
            eprintln!("onepipe up: an unchecked run fails; give --allow-unchecked to accept it");
            return Ok(EXIT_VIOLATION);
        }
    }
    if open > 0 {
        eprintln!(
            "onepipe up: {open} transaction(s) still open at the drain limit (replies never came)"
        );
        return Ok(super::EXIT_RUNTIME);
    }
    Ok(0)
}

/// The latency of `ops` by kind — `of` gives each its kind's index, call time and return
/// time — and how many returned by `end_ns` (within the sending time).
fn latencies<const K: usize, T>(
    ops: impl IntoIterator<Item = T>,
    end_ns: u64,
    of: impl Fn(T) -> (usize, u64, u64),
) -> (Vec<Summary>, u64) {
    let mut latency: [NsHistogram; K] = std::array::from_fn(|_| NsHistogram::default());
    let mut in_period = 0u64;
    for op in ops {
        let (k, call_ns, return_ns) = of(op);
        latency[k].record(return_ns.saturating_sub(call_ns));
        in_period += u64::from(return_ns <= end_ns);
    }
    (
        latency.iter().map(NsHistogram::summary).collect(),
        in_period,
    )
}

/// The dependency graph's line: `what` it was built from, its operations and edges, and the
/// anomalies found.
fn print_graph(what: &str, g: &GraphVerdict) {
    println!(
        "  app graph   {what}: {} ok, {} of unknown outcome, {} reads; {} ww, {} wr, {} rw, {} rt edges: {} anomal{}",
        g.ok, g.info, g.reads, g.edges[0], g.edges[1], g.edges[2], g.edges[3], g.anomalies,
        if g.anomalies == 1 { "y" } else { "ies" }
    );
}

/// One line per kind with samples: its latency p50 and p99.
fn print_latency(names: &[&str], summaries: &[Summary]) {
    for (name, l) in names.iter().zip(summaries) {
        if l.count > 0 {
            println!(
                "  {name:<11} latency p50 {:.1} µs  p99 {:.1} µs",
                l.p50 as f64 / 1e3,
                l.p99 as f64 / 1e3
            );
        }
    }
}

/// `--history`: writes the run's history (`json`, Jepsen's form) and says so.
fn write_history(
    args: &UpArgs,
    what: &str,
    unknown: usize,
    json: impl FnOnce() -> String,
) -> Result<(), String> {
    let Some(path) = &args.app.history else {
        return Ok(());
    };
    std::fs::write(path, json())
        .map_err(|e| format!("--history: cannot write {}: {e}", path.display()))?;
    println!(
        "  history     {} (Jepsen's form: {what}, {unknown} of unknown outcome as info)",
        path.display()
    );
    Ok(())
}
