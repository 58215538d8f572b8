//! `onepipe node --app kv|tpcc|replkv`: one process of an application on a live cluster, through the
//! public [`Endpoint`] API and [`AppHost`] — the same `KvProcess` (the transactional store,
//! §7.3.1), `TpccProcess` (TPC-C, §7.3.2), `OneRttProcess` (1-RTT replication, §2.2.2) or, with
//! `--system paxos`, `PaxosProcess` (MultiPaxos with batching and pipelining) the simulator runs. Every process serves its part
//! (its keys; its shard's replica) and initiates transactions from `start` for `--duration`; it
//! serves until told to stop, since the others' transactions still need it.
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
//! The records (`--out` with extension `kv.json` or `tpcc.json`): the transactions this process
//! committed, those still open whose writes are bound to apply, its counters, and (TPC-C) its
//! replica's digest.

use super::supervise;
use super::NodeArgs;
use crate::sim_app::{AppArgs, System};
use onepipe_apps::kv::workload::TxnGen;
use onepipe_apps::kv::{AppliedWrite, Committed, KvConfig, KvProcess, KvStats, TxnApp};
use onepipe_apps::repl::lincheck::MaybeOp;
use onepipe_apps::repl::onertt::OneRttProcess;
use onepipe_apps::repl::paxos::{PaxosConfig, PaxosProcess, PaxosStats};
use onepipe_apps::repl::{CmdGen, ReplApp, ReplConfig, ReplDone, ReplStats, ReplicaLog};
use onepipe_apps::tpcc::onepipe::AppliedTxn;
use onepipe_apps::tpcc::{TpccApp, TpccCommitted, TpccConfig, TpccProcess, TpccStats};
use onepipe_apps::{App, AppInput, AppSend};
use onepipe_proto::rng::Rng;
use onepipe_proto::Instant;
use onepipe_runtime::apphost::AppHost;
use onepipe_runtime::clock::monotonic_ns;
use onepipe_runtime::endpoint::{Endpoint, JoinOptions};
use onepipe_sim::config::AppSpec;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::time::Duration;
use tracing::error;

/// What one process of a live TPC-C run writes for `up`.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct TpccRecords {
    /// The process.
    pub proc: u32,
    /// The transactions it committed.
    pub committed: Vec<TpccCommitted>,
    /// Its stamped transactions still open at the end (their effects apply).
    pub unfinished: Vec<TpccCommitted>,
    /// Its counters.
    pub stats: TpccStats,
    /// Its replica: (shard, `Shard::digest`).
    pub shard: Option<(u32, u64)>,
    /// Sends the endpoint refused for a full buffer.
    pub refused_full: u64,
    /// What its replica applied, in order: a dead initiator's transactions are placed from these.
    #[serde(default)]
    pub applied: Vec<AppliedTxn>,
}

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
    /// The writes its server applied: a dead initiator's writes are known from these.
    #[serde(default)]
    pub applied: Vec<AppliedWrite>,
}

/// What a process of the replicated key-value service writes at the end (`replkv.json`).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct ReplRecords {
    /// The process.
    pub proc: u32,
    /// The operations it completed as a client.
    pub done: Vec<ReplDone>,
    /// Its writes still open: they may or may not have taken effect.
    pub open: Vec<MaybeOp>,
    /// Its counters.
    pub stats: ReplStats,
    /// Its log, if it is a replica.
    pub log: Option<ReplicaLog>,
    /// Sends refused for a full buffer.
    pub refused_full: u64,
    /// Its MultiPaxos counters, on `--system paxos`.
    #[serde(default)]
    pub paxos: Option<PaxosStats>,
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// What a node needs of its application beside [`App`].
trait NodeApp: App {
    /// No transaction open, nothing waiting.
    fn idle(&self) -> bool;
    /// Takes what it committed since the last call into its records.
    fn collect(&mut self);
    /// Transactions committed so far.
    fn committed(&self) -> usize;
    /// Its records as JSON, and the extension of their file.
    fn records(&self, me: u32, refused_full: u64) -> (serde_json::Result<String>, &'static str);
}

/// The store's process and what it committed.
struct KvNode(KvProcess, Vec<Committed>);

/// TPC-C's process and what it committed.
struct TpccNode(TpccProcess, Vec<TpccCommitted>);

/// A replicated service's process (1-RTT or MultiPaxos) and what it completed.
struct ReplNode(Box<dyn ReplApp>, Vec<ReplDone>);

/// `App` for a node: its process's.
macro_rules! node_app {
    ($node:ty) => {
        impl App for $node {
            fn handle(&mut self, now: Instant, input: AppInput<'_>) {
                self.0.handle(now, input);
            }
            fn poll_send(&mut self) -> Option<AppSend> {
                self.0.poll_send()
            }
            fn poll_timeout(&self) -> Option<Instant> {
                self.0.poll_timeout()
            }
        }
    };
}

node_app!(KvNode);
node_app!(TpccNode);
node_app!(ReplNode);

impl NodeApp for ReplNode {
    fn idle(&self) -> bool {
        ReplApp::idle(&*self.0)
    }
    fn collect(&mut self) {
        while let Some(d) = self.0.poll_done() {
            self.1.push(d);
        }
    }
    fn committed(&self) -> usize {
        self.1.len()
    }
    fn records(&self, me: u32, refused_full: u64) -> (serde_json::Result<String>, &'static str) {
        let recs = ReplRecords {
            proc: me,
            done: self.1.clone(),
            open: self.0.open_writes(),
            stats: ReplApp::stats(&*self.0).clone(),
            log: self.0.replica_log(),
            refused_full,
            paxos: self.0.paxos_stats(),
        };
        (serde_json::to_string(&recs), "replkv.json")
    }
}

impl NodeApp for KvNode {
    fn idle(&self) -> bool {
        TxnApp::idle(&self.0)
    }
    fn collect(&mut self) {
        while let Some(c) = TxnApp::poll_committed(&mut self.0) {
            self.1.push(c);
        }
    }
    fn committed(&self) -> usize {
        self.1.len()
    }
    fn records(&self, me: u32, refused_full: u64) -> (serde_json::Result<String>, &'static str) {
        let recs = KvRecords {
            proc: me,
            committed: self.1.clone(),
            unfinished: self.0.unfinished(),
            stats: TxnApp::stats(&self.0).clone(),
            refused_full,
            applied: self.0.applied().to_vec(),
        };
        (serde_json::to_string(&recs), "kv.json")
    }
}

impl NodeApp for TpccNode {
    fn idle(&self) -> bool {
        TpccApp::idle(&self.0)
    }
    fn collect(&mut self) {
        while let Some(c) = TpccApp::poll_committed(&mut self.0) {
            self.1.push(c);
        }
    }
    fn committed(&self) -> usize {
        self.1.len()
    }
    fn records(&self, me: u32, refused_full: u64) -> (serde_json::Result<String>, &'static str) {
        let recs = TpccRecords {
            proc: me,
            committed: self.1.clone(),
            unfinished: self.0.unfinished(),
            stats: TpccApp::stats(&self.0).clone(),
            shard: self.0.shard().map(|(s, sh)| (s, sh.digest())),
            refused_full,
            applied: self.0.applied().to_vec(),
        };
        (serde_json::to_string(&recs), "tpcc.json")
    }
}

/// The process's application: the workload's seed and this process pick its transactions.
fn application(
    app: &AppArgs,
    seed: u64,
    me: u32,
    procs: u32,
    t0: u64,
    duration: u64,
) -> Box<dyn NodeApp> {
    let (start, stop) = (Instant(t0), Instant(t0 + duration));
    match app.spec() {
        Ok(Some(AppSpec::Kv { workload, window })) => {
            let mut cfg = KvConfig::new(onepipe_proto::ProcId(me), procs, workload.clone(), window);
            cfg.start = start;
            cfg.stop = stop;
            cfg.log_applied = true;
            let zipf = workload.zipf();
            let seed = Rng::new(seed ^ 0xA995).fork(u64::from(me)).next_u64();
            let p = KvProcess::new(cfg, TxnGen::new(workload, zipf, seed));
            Box::new(KvNode(p, Vec::new()))
        }
        Ok(Some(AppSpec::Tpcc { workload, window })) => {
            let mut cfg =
                TpccConfig::new(onepipe_proto::ProcId(me), procs, workload.clone(), window);
            cfg.start = start;
            cfg.stop = stop;
            cfg.log_applied = true;
            let seed = Rng::new(seed ^ 0x7CC).fork(u64::from(me)).next_u64();
            let gen = onepipe_apps::tpcc::gen::TxnGen::new(workload, cfg.home_warehouse(), seed);
            Box::new(TpccNode(TpccProcess::new(cfg, gen), Vec::new()))
        }
        Ok(Some(AppSpec::ReplKv {
            workload,
            window,
            replicas,
            disk,
            paxos,
            ..
        })) => {
            let me_id = onepipe_proto::ProcId(me);
            let window = if me >= replicas { window } else { 0 };
            let mut cfg = ReplConfig::new(me_id, replicas, procs, workload.clone(), window);
            cfg.start = start;
            cfg.stop = stop;
            cfg.disk = disk;
            // A live loopback round trip is tens of microseconds; a scheduling hiccup is
            // milliseconds.
            cfg.suspect_ns = 20_000_000;
            let mut seeds = Rng::new(seed ^ 0x2E91).fork(u64::from(me));
            let gen = CmdGen::new(workload, me, seeds.next_u64());
            let process: Box<dyn ReplApp> = match app.system {
                System::Paxos => {
                    let mut pc = PaxosConfig::new(cfg);
                    pc.wnd = paxos.wnd;
                    pc.bsz = paxos.bsz;
                    pc.delta_b_ns = paxos.delta_b_ns;
                    // The same scale as `suspect_ns`: a heartbeat every 2 ms, an election
                    // after 10 ms of silence, well before a client gives up on the leader.
                    pc.heartbeat_ns = 2_000_000;
                    pc.election_timeout_ns = 10_000_000;
                    Box::new(PaxosProcess::new(pc, gen))
                }
                _ => Box::new(OneRttProcess::new(cfg, gen, seeds.next_u64())),
            };
            Box::new(ReplNode(process, Vec::new()))
        }
        _ => unreachable!("checked before joining"),
    }
}

/// Runs the node; the exit code.
pub fn run(args: &NodeArgs, metrics: &super::daemons::NodeMetrics) -> i32 {
    if let Err(code) = check_app(args) {
        return code;
    }
    let (stop, orders) = supervise::install(args.supervised);
    let ep = match join(args, metrics) {
        Ok(ep) => ep,
        Err(code) => return code,
    };
    let me = ep.proc().0;
    let addr = ep.cluster().process(me).map(|p| p.addr);
    say(&format!(
        "ready {me} {}{}",
        addr.map_or("?".into(), |a| a.to_string()),
        super::daemons::metrics_suffix(metrics.1.as_ref())
    ));
    // The start order, or at once when alone.
    let t0 = match &orders {
        Some(o) => match wait_start(o, &stop) {
            Ok(t) => t,
            Err(code) => return code,
        },
        None => monotonic_ns() + 10_000_000,
    };
    let procs = ep.cluster().procs();
    let duration = args.work.duration;
    let app = application(&args.app, args.work.seed, me, procs, t0, duration);
    let mut host = AppHost::new(&ep, app);
    if let Err(code) = serve(args, me, &mut host, t0, orders.as_ref(), &stop) {
        return code;
    }
    drop(host);
    ep.leave();
    0
}

/// `--app` names an application a live node runs, on a system it runs on; the exit code if
/// not (said on standard error).
fn check_app(args: &NodeArgs) -> Result<(), i32> {
    match args.app.spec() {
        Err(e) => {
            eprintln!("onepipe node: {e}");
            Err(crate::cli::EXIT_USAGE)
        }
        Ok(Some(AppSpec::HashTable { .. })) => {
            eprintln!("onepipe node: --app hashtable runs in the simulator only");
            Err(crate::cli::EXIT_USAGE)
        }
        Ok(spec) => {
            let replkv = matches!(spec, Some(AppSpec::ReplKv { .. }));
            let live = match args.app.system {
                System::Onepipe => true,
                System::Paxos => replkv,
                _ => false,
            };
            if !live {
                eprintln!("onepipe node: --system: live, an application runs on 1pipe (and replkv on paxos too)");
                return Err(crate::cli::EXIT_USAGE);
            }
            Ok(())
        }
    }
}

/// Joins the cluster as `args` say; the exit code if it cannot (said on standard error or in
/// the log).
fn join(args: &NodeArgs, metrics: &super::daemons::NodeMetrics) -> Result<Endpoint, i32> {
    let opts = JoinOptions {
        telemetry: super::node_telemetry(metrics),
        proc: args.proc,
        report_reliable_sent: true,
        event_queue_len_max: 1 << 20,
        credentials: match super::node_credentials(args) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("onepipe node: --pki: {e}");
                return Err(crate::cli::EXIT_USAGE);
            }
        },
        ..JoinOptions::default()
    };
    Endpoint::join_any(&args.controller, opts).map_err(|e| {
        error!("cannot join: {e}");
        super::EXIT_RUNTIME
    })
}

/// Waits for `up`'s start order; its time, or the exit code (0: told to stop first).
fn wait_start(orders: &Receiver<String>, stop: &AtomicBool) -> Result<u64, i32> {
    loop {
        if stop.load(Ordering::SeqCst) {
            return Err(0);
        }
        match orders.recv_timeout(Duration::from_millis(20)) {
            Ok(line) => match line.strip_prefix("start ").map(|t| t.trim().parse::<u64>()) {
                Some(Ok(t)) => return Ok(t),
                _ if line.trim() == "stop" => return Err(0),
                _ => {
                    error!("expected 'start <t0>', got '{line}'");
                    return Err(super::EXIT_RUNTIME);
                }
            },
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => return Err(0),
        }
    }
}

/// Runs the application from `t0`: issues for `--duration`, says `sent` when its issuing
/// ended, writes the records when `up` orders the drain (alone: at the drain limit), and
/// serves the others until told to stop; the exit code if the records cannot be written.
fn serve(
    args: &NodeArgs,
    me: u32,
    host: &mut AppHost<'_, Box<dyn NodeApp>>,
    t0: u64,
    orders: Option<&Receiver<String>>,
    stop: &AtomicBool,
) -> Result<(), i32> {
    let duration = args.work.duration;
    let mut said_sent = false;
    let mut records_written = false;
    let mut drain_ordered = false;
    let give_up = t0 + duration + args.drain;
    let mut idle = 0u32;
    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let seen = host.activity();
        let busy = host.turn();
        host.app_mut().collect();
        let now = monotonic_ns();
        let issued = now >= t0 + duration && host.app().idle();
        if !said_sent && (issued || now >= give_up) {
            said_sent = true;
            match &orders {
                Some(_) => say(&format!("sent 0 {}", host.app().committed())),
                // Alone: report, and serve the others until the drain limit.
                None => say(&format!(
                    "p{me}: {} transactions committed",
                    host.app().committed()
                )),
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
            if let Err(e) = write_records(args, me, host) {
                error!("{e}");
                return Err(super::EXIT_RUNTIME);
            }
            say(&format!("done {finished}"));
        }
        if busy {
            idle = 0;
        } else if idle < args.app_spin {
            idle += 1;
            std::thread::yield_now();
        } else {
            // Sleeps until the endpoint has something, the application's timer is due, or
            // the supervisor's orders are due a look.
            host.wait(seen, Duration::from_millis(5));
        }
    }
    Ok(())
}

fn write_records(
    args: &NodeArgs,
    me: u32,
    host: &AppHost<'_, Box<dyn NodeApp>>,
) -> Result<(), String> {
    let Some(path) = &args.out else {
        return Ok(());
    };
    let (text, ext) = host.app().records(me, host.stats().refused_full);
    let text = text.map_err(|e| e.to_string())?;
    let path = path.with_extension(ext);
    std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
