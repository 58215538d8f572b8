//! `onepipe node --app kv`: one process of the transactional store (§7.3.1) on a live cluster,
//! through the public [`Endpoint`] API and [`AppHost`] — the same `KvProcess` the simulator
//! runs. Every process serves the keys that hash to it and initiates transactions from `start`
//! for `--duration`; it serves until told to stop, since the others' transactions still need it.
//!
//! Under `onepipe up` the handshake is the workload node's (`node.rs`), with these meanings:
//!
//! ```text
//! node → up   ready <proc> <udp addr>
//! up → node   start <t0>             (CLOCK_MONOTONIC ns: when to start issuing)
//! node → up   sent 0 <committed>     (issuing ended and every own transaction finished)
//! up → node   drain <M>              (everyone's issuing ended: write the records)
//! node → up   done <finished>        (records written; false: transactions left open)
//! up → node   stop                   (or end of input: leave and exit)
//! ```
//!
//! The records (`--out` with extension `kv.json`): the transactions this process committed,
//! those still open whose writes are bound to apply (`TxnApp::unfinished`), and its counters.

use super::supervise;
use super::NodeArgs;
use crate::sim_app::AppArgs;
use onepipe_apps::kv::workload::TxnGen;
use onepipe_apps::kv::{Committed, KvConfig, KvProcess, KvStats, TxnApp};
use onepipe_proto::rng::Rng;
use onepipe_proto::Instant;
use onepipe_runtime::apphost::AppHost;
use onepipe_runtime::clock::monotonic_ns;
use onepipe_runtime::endpoint::{Endpoint, JoinOptions};
use onepipe_sim::config::AppSpec;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tracing::error;

/// What one process of a live store run writes for `up`.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct KvRecords {
    /// The process.
    pub proc: u32,
    /// The transactions it committed.
    pub committed: Vec<Committed>,
    /// Its stamped reliable transactions still open at the end (their writes apply).
    pub unfinished: Vec<Committed>,
    /// Its counters.
    pub stats: KvStats,
    /// Sends the endpoint refused for a full buffer.
    pub refused_full: u64,
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The process's store: every process of the cluster serves; the workload's seed and this
/// process pick its transactions.
fn store(app: &AppArgs, seed: u64, me: u32, procs: u32, t0: u64, duration: u64) -> KvProcess {
    let Ok(Some(AppSpec::Kv { workload, window })) = app.spec() else {
        unreachable!("checked before joining")
    };
    let mut cfg = KvConfig::new(onepipe_proto::ProcId(me), procs, workload.clone(), window);
    cfg.start = Instant(t0);
    cfg.stop = Instant(t0 + duration);
    let zipf = workload.zipf();
    let seed = Rng::new(seed ^ 0xA995).fork(u64::from(me)).next_u64();
    KvProcess::new(cfg, TxnGen::new(workload, zipf, seed))
}

/// Runs the node; the exit code.
pub fn run(args: &NodeArgs) -> i32 {
    if let Err(e) = args.app.spec() {
        eprintln!("onepipe node: {e}");
        return crate::cli::EXIT_USAGE;
    }
    let (stop, orders) = supervise::install(args.supervised);
    let opts = JoinOptions {
        proc: args.proc,
        report_reliable_sent: true,
        event_queue_len_max: 1 << 20,
        ..JoinOptions::default()
    };
    let ep = match Endpoint::join_any(&args.controller, opts) {
        Ok(ep) => ep,
        Err(e) => {
            error!("cannot join: {e}");
            return super::EXIT_RUNTIME;
        }
    };
    let me = ep.proc().0;
    let addr = ep.cluster().process(me).map(|p| p.addr);
    say(&format!(
        "ready {me} {}",
        addr.map_or("?".into(), |a| a.to_string())
    ));
    // The start order, or at once when alone.
    let t0 = match &orders {
        Some(o) => loop {
            if stop.load(Ordering::SeqCst) {
                return 0;
            }
            match o.recv_timeout(Duration::from_millis(20)) {
                Ok(line) => match line.strip_prefix("start ").map(|t| t.trim().parse::<u64>()) {
                    Some(Ok(t)) => break t,
                    _ if line.trim() == "stop" => return 0,
                    _ => {
                        error!("expected 'start <t0>', got '{line}'");
                        return super::EXIT_RUNTIME;
                    }
                },
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => return 0,
            }
        },
        None => monotonic_ns() + 10_000_000,
    };
    let procs = ep.cluster().procs();
    let duration = args.work.duration;
    let kv = store(&args.app, args.work.seed, me, procs, t0, duration);
    let mut host = AppHost::new(&ep, kv);
    let mut committed = Vec::new();
    let mut said_sent = false;
    let mut records_written = false;
    let mut drain_ordered = false;
    let give_up = t0 + duration + args.drain;
    let mut idle = 0u32;
    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let busy = host.turn();
        while let Some(c) = host.app_mut().poll_committed() {
            committed.push(c);
        }
        let now = monotonic_ns();
        let issued = now >= t0 + duration && host.app().idle();
        if !said_sent && (issued || now >= give_up) {
            said_sent = true;
            match &orders {
                Some(_) => say(&format!("sent 0 {}", committed.len())),
                // Alone: report, and serve the others until the drain limit.
                None => print_alone(me, host.app().stats(), committed.len()),
            }
        }
        if orders.is_none() && now >= give_up {
            break;
        }
        if let Some(o) = &orders {
            match o.try_recv() {
                Ok(line) if line.starts_with("drain") => drain_ordered = true,
                Ok(line) if line.trim() == "stop" => break,
                Ok(_) | Err(std::sync::mpsc::TryRecvError::Empty) => {}
                Err(std::sync::mpsc::TryRecvError::Disconnected) => break,
            }
        }
        // Everyone's issuing ended; this process's own last transactions (issued while its
        // clock still read before the stop) finish first, or the drain limit passes.
        let finished = host.app().idle();
        if drain_ordered && !records_written && (finished || now >= give_up) {
            records_written = true;
            if let Err(e) = write_records(args, me, &host, &committed) {
                error!("{e}");
                return super::EXIT_RUNTIME;
            }
            say(&format!("done {finished}"));
        }
        if busy {
            idle = 0;
        } else {
            idle += 1;
            if idle > 64 {
                std::thread::sleep(Duration::from_micros(50));
            } else {
                std::thread::yield_now();
            }
        }
    }
    drop(host);
    ep.leave();
    0
}

fn write_records(
    args: &NodeArgs,
    me: u32,
    host: &AppHost<'_, KvProcess>,
    committed: &[Committed],
) -> Result<(), String> {
    let Some(path) = &args.out else {
        return Ok(());
    };
    let recs = KvRecords {
        proc: me,
        committed: committed.to_vec(),
        unfinished: host.app().unfinished(),
        stats: host.app().stats().clone(),
        refused_full: host.stats().refused_full,
    };
    let path = path.with_extension("kv.json");
    let text = serde_json::to_string(&recs).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn print_alone(me: u32, s: &KvStats, committed: usize) {
    say(&format!(
        "p{me}: {committed} transactions committed ({} read-only, {} write-only, {} read-write), {} read-only retries",
        s.committed_ro, s.committed_wo, s.committed_rw, s.ro_retries
    ));
}
