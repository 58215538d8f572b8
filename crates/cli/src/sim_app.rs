//! `onepipe sim --app kv`: the processes run an application (`onepipe-apps`) instead of the
//! synthetic workload — the flags that describe it, and its summary.

use crate::cli::us;
use clap::{Args, ValueEnum};
use onepipe_apps::hashtable::{HtLayout, HtWorkload};
use onepipe_apps::kv::workload::{KeyDist, KvWorkload};
use onepipe_apps::repl::{DiskModel, ReplWorkload};
use onepipe_apps::tpcc::gen::TpccWorkload;
use onepipe_sim::apps::AppReport;
use onepipe_sim::direct::{run_direct, DirectSystem};
use onepipe_sim::{AppSpec, SimConfig};
use std::path::{Path, PathBuf};

/// The applications `onepipe sim --app` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AppName {
    /// §7.3.1's transactional key-value store: every process serves the keys that hash to it and
    /// initiates transactions; read-only ones by best effort, the others by reliable 1Pipe.
    Kv,
    /// §7.3.2's independent transactions: TPC-C New-Order and Payment over a database sharded
    /// over the processes (`procs / 3` shards, 3 replicas each); each transaction is one
    /// reliable scattering to every replica of every shard it touches.
    Tpcc,
    /// A replicated linearizable key-value service (§2.2.2): processes `0..--replicas`
    /// replicate, the others are clients doing get, put and compare-and-set; on 1Pipe by 1-RTT
    /// replication.
    Replkv,
    /// §7.3.3's replicated remote hash table (Fig. 16): --servers shards of --replicas replicas
    /// (processes first), then --clients clients inserting and looking up with one-sided read,
    /// write and compare-and-swap; on 1Pipe without a fence.
    Hashtable,
}

/// The system that runs the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum System {
    /// On 1Pipe (the protocol flags apply).
    #[value(name = "1pipe")]
    Onepipe,
    /// The non-transactional store on direct messages: the upper bound (Fig. 14's NonTX).
    Nontx,
    /// The FaRM-like store on direct messages: OCC, locking, validation, two-phase commit.
    Farm,
    /// TPC-C on direct messages with two-phase locking, two-phase commit, primary-backup.
    #[value(name = "2pl")]
    Lock,
    /// TPC-C on direct messages with OCC, two-phase commit, primary-backup.
    Occ,
    /// replkv on direct messages by primary-backup in a chain, a disk write at each replica
    /// (Ceph's OSDs).
    Chain,
    /// replkv on direct messages by MultiPaxos with batching and pipelining (--wnd, --bsz,
    /// --delta-b); with `onepipe up`, live on the unordered transport.
    Paxos,
    /// hashtable on plain one-sided verbs: a fence between writing a pair and linking it,
    /// leader-follower replication, lookups at the leader.
    Rdma,
}

/// How keys are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Dist {
    /// Every key alike.
    Uniform,
    /// YCSB's Zipf, θ = 0.99 (hot keys).
    Zipf,
}

/// The flags of an application run (docs/APPS.md).
#[derive(Args, Debug, Clone)]
pub struct AppArgs {
    /// Run an application on every process instead of the synthetic workload (`--workload`,
    /// `--rate`, `--msg-size` and `--service` do not apply then).
    #[arg(long, value_enum)]
    pub app: Option<AppName>,
    /// The system that runs the application: 1pipe, or a baseline on direct messages (live,
    /// with `onepipe up`: 1pipe, and paxos for replkv).
    #[arg(long, value_enum, default_value = "1pipe")]
    pub system: System,
    /// kv: transactions each process keeps in flight (a closed loop).
    #[arg(long, default_value_t = 4)]
    pub window: u32,
    /// kv, replkv, hashtable: keys 0..N (default: kv 1,000,000; replkv and hashtable 1,000, so
    /// that operations meet on keys and the linearizability check has something to judge).
    #[arg(long)]
    pub keys: Option<u64>,
    /// kv: key distribution.
    #[arg(long, value_enum, default_value = "uniform")]
    pub key_dist: Dist,
    /// kv: operations per transaction.
    #[arg(long, default_value_t = 2)]
    pub ops_per_txn: u32,
    /// kv: share of read-only transactions (Fig. 14a: 0.5); `none`: a transaction is read-only
    /// only when all its operations were drawn reads.
    #[arg(long, default_value = "0.5", value_parser = parse_share_or_none)]
    pub read_only_share: ShareOrNone,
    /// kv: share of writes among the operations of the transactions that are not read-only.
    #[arg(long, default_value_t = 0.5)]
    pub write_share: f64,
    /// kv: longest value in bytes (Facebook ETC sizes are clamped here).
    #[arg(long, default_value_t = 4096)]
    pub value_max: u32,
    /// kv: YCSB core workload a, b or c (Zipf keys; 50%, 5% or no updates); overrides
    /// --key-dist, --read-only-share and --write-share.
    #[arg(long)]
    pub ycsb: Option<String>,
    /// tpcc: warehouses.
    #[arg(long, default_value_t = 4)]
    pub warehouses: u32,
    /// tpcc: items (the specification's 100,000; fewer makes a run start faster).
    #[arg(long, default_value_t = 100_000)]
    pub items: u32,
    /// tpcc: customers per district (the specification's 3,000).
    #[arg(long, default_value_t = 3_000)]
    pub customers: u32,
    /// replkv: replicas (processes 0..N; the processes after them are the clients; default 3).
    /// hashtable: replicas of each shard (default 1).
    #[arg(long)]
    pub replicas: Option<u32>,
    /// hashtable: shards, one server process per replica of each.
    #[arg(long, default_value_t = 16)]
    pub servers: u32,
    /// hashtable: clients (the processes after the servers).
    #[arg(long, default_value_t = 16)]
    pub clients: u32,
    /// hashtable: share of inserts among the operations (the rest are lookups).
    #[arg(long, default_value_t = 0.5)]
    pub insert_share: f64,
    /// hashtable: keys 0..N are in the table when the run starts (default: all --keys).
    #[arg(long)]
    pub preload: Option<u64>,
    /// hashtable: buckets per shard.
    #[arg(long, default_value_t = 256)]
    pub buckets: u32,
    /// replkv: share of gets among the operations.
    #[arg(long, default_value_t = 0.5)]
    pub read_share: f64,
    /// replkv: share of compare-and-sets among the writes.
    #[arg(long, default_value_t = 0.1)]
    pub cas_share: f64,
    /// replkv: bytes of each written value (§7.3.4 writes 4 KB).
    #[arg(long, default_value_t = 64)]
    pub value_size: u32,
    /// replkv: each replica writes every entry to a disk taking this long before it answers
    /// (0: no disk; §7.3.4's SSD is about 50us).
    #[arg(long, default_value = "0ns", value_parser = crate::cli::parse_duration)]
    pub disk: u64,
    /// replkv: uniform jitter added to each disk write.
    #[arg(long, default_value = "0ns", value_parser = crate::cli::parse_duration)]
    pub disk_jitter: u64,
    /// replkv on paxos: WND, the most consensus instances in Phase 2 at once (Fig. 6).
    #[arg(long, default_value_t = 8)]
    pub wnd: u32,
    /// replkv on paxos: BSZ, the batch size in bytes (Fig. 6).
    #[arg(long, default_value_t = 32 << 10)]
    pub bsz: u32,
    /// replkv on paxos: Δ_B, how long a batch waits to fill (Fig. 6).
    #[arg(long, default_value = "5us", value_parser = crate::cli::parse_duration)]
    pub delta_b: u64,
    /// Write the run's history to FILE in Jepsen's form: one JSON array of invoke and
    /// ok/fail/info records, each transaction's micro-operations as ["r", key, value] and
    /// ["w", key, value] (docs/APPS.md, "Histories").
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// Accept a run in which an application check that applies could not run (e.g. TPC-C's
    /// replica comparison when the run did not settle): without it such a run fails; with it
    /// the report says which checks did not run, and why.
    #[arg(long)]
    pub allow_unchecked: bool,
}

/// The exit status for an application report's unchecked parts: 0 if every applicable check
/// ran (or `allow`), else a failure naming each check and why it did not run.
pub fn unchecked_status(a: &AppReport, seed: u64, allow: bool) -> i32 {
    let not = a.unchecked();
    if not.is_empty() {
        return 0;
    }
    for (name, why) in &not {
        eprintln!("onepipe sim: seed {seed}: check {name} did not run: {why}");
    }
    if allow {
        eprintln!("onepipe sim: the run is unchecked by those (--allow-unchecked)");
        return 0;
    }
    eprintln!("onepipe sim: an unchecked run fails; give --allow-unchecked to accept it");
    crate::cli::EXIT_VIOLATION
}

/// A share, or `none`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShareOrNone(pub Option<f64>);

fn parse_share_or_none(s: &str) -> Result<ShareOrNone, String> {
    if s.trim() == "none" {
        return Ok(ShareOrNone(None));
    }
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a share from 0 to 1 (or none)"))?;
    Ok(ShareOrNone(Some(x)))
}

impl AppArgs {
    /// The application to run, if any; an error names the bad flag.
    pub fn spec(&self) -> Result<Option<AppSpec>, String> {
        match self.app {
            None => return Ok(None),
            Some(AppName::Tpcc) => return self.tpcc().map(Some),
            Some(AppName::Replkv) => return self.replkv().map(Some),
            Some(AppName::Hashtable) => return self.hashtable().map(Some),
            Some(AppName::Kv) => {}
        }
        let mut workload = match &self.ycsb {
            Some(name) => KvWorkload::ycsb(name).map_err(|e| format!("--ycsb: {e}"))?,
            None => KvWorkload {
                dist: match self.key_dist {
                    Dist::Uniform => KeyDist::Uniform,
                    Dist::Zipf => KeyDist::Zipf { theta: 0.99 },
                },
                read_only_share: self.read_only_share.0,
                write_share: self.write_share,
                ..KvWorkload::default()
            },
        };
        workload.keys = self.keys.unwrap_or(1_000_000);
        workload.ops_per_txn = self.ops_per_txn;
        workload.value_len_max = self.value_max;
        workload.validate().map_err(|e| format!("--app kv: {e}"))?;
        Ok(Some(AppSpec::Kv {
            workload,
            window: self.window,
        }))
    }
}

impl AppArgs {
    fn replkv(&self) -> Result<AppSpec, String> {
        let workload = ReplWorkload {
            keys: self.keys.unwrap_or(1_000),
            read_ratio: self.read_share,
            cas_ratio: self.cas_share,
            value_size: self.value_size,
        };
        workload
            .validate()
            .map_err(|e| format!("--app replkv: {e}"))?;
        Ok(AppSpec::ReplKv {
            workload,
            window: self.window,
            replicas: self.replicas.unwrap_or(3),
            disk: DiskModel {
                write_ns: self.disk,
                jitter_ns: self.disk_jitter,
            },
            suspect_ns: None,
            paxos: onepipe_sim::PaxosSpec {
                wnd: self.wnd,
                bsz: self.bsz,
                delta_b_ns: self.delta_b,
                ..onepipe_sim::PaxosSpec::default()
            },
        })
    }

    fn hashtable(&self) -> Result<AppSpec, String> {
        let keys = self.keys.unwrap_or(1_000);
        let workload = HtWorkload {
            keys,
            insert_share: self.insert_share,
            preload: self.preload.unwrap_or(keys),
            buckets: self.buckets,
        };
        let layout = HtLayout {
            servers: self.servers,
            replicas: self.replicas.unwrap_or(1),
            clients: self.clients,
        };
        let bad = |e: String| format!("--app hashtable: {e}");
        workload.validate().map_err(bad)?;
        layout.validate().map_err(bad)?;
        Ok(AppSpec::HashTable {
            workload,
            window: self.window,
            layout,
        })
    }

    fn tpcc(&self) -> Result<AppSpec, String> {
        let mut workload = TpccWorkload::default();
        workload.scale.warehouses = self.warehouses;
        workload.scale.items = self.items;
        workload.scale.customers_per_district = self.customers;
        workload
            .scale
            .validate()
            .map_err(|e| format!("--app tpcc: {e}"))?;
        Ok(AppSpec::Tpcc {
            workload,
            window: self.window,
        })
    }
}

/// `onepipe sim --app … --system nontx|farm`: the application on direct messages. Returns the exit
/// code.
pub fn sim_direct(
    cfg: &SimConfig,
    system: System,
    json: Option<&Path>,
    history: Option<&Path>,
    allow_unchecked: bool,
) -> i32 {
    let r = match run_direct(cfg, direct_system(system), &mut |_| {}) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("onepipe sim: {e}");
            return crate::cli::EXIT_USAGE;
        }
    };
    println!(
        "onepipe sim — seed {}, {} on direct messages",
        r.seed, r.app.system
    );
    println!("  network     {} ({} processes)", r.topology, r.procs);
    println!(
        "  messages    {} sent{}{}",
        r.messages,
        if r.acks > 0 {
            format!(
                " (transport: {} retransmitted, {} acknowledgements, {} copies dropped)",
                r.retransmits, r.acks, r.duplicates
            )
        } else {
            String::new()
        },
        if r.drained {
            ""
        } else {
            "; the drain limit was reached with transactions open"
        }
    );
    println!(
        "  host CPUs   busy {:.0}% on average, {:.0}% the busiest, while issuing",
        100.0 * r.cpu_busy.mean,
        100.0 * r.cpu_busy.max
    );
    println!(
        "  engine      {} events in {:.2} s wall ({:.2} M events/s), trace {}",
        r.events,
        r.wall_s,
        r.events_per_wall_s / 1e6,
        r.trace_hash
    );
    print_app_summary(&r.app);
    if let (Some(path), Some(h)) = (history, &r.app_history) {
        if let Err(e) = std::fs::write(path, h) {
            eprintln!(
                "onepipe sim: --history: cannot write {}: {e}",
                path.display()
            );
            return crate::cli::EXIT_USAGE;
        }
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&r).expect("report serializes");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("onepipe sim: --json: cannot write {}: {e}", path.display());
            return crate::cli::EXIT_USAGE;
        }
    }
    if r.app.violations > 0 {
        eprintln!(
            "onepipe sim: seed {}: the store's checker found {} violation(s): {:?}",
            r.seed, r.app.violations, r.app.violation_samples
        );
        return crate::cli::EXIT_VIOLATION;
    }
    unchecked_status(&r.app, r.seed, allow_unchecked)
}

/// The simulator's system on direct messages for `--system` (not 1pipe's).
fn direct_system(system: System) -> DirectSystem {
    match system {
        System::Onepipe => unreachable!("1pipe runs through onepipe_sim::run"),
        System::Nontx => DirectSystem::NonTx,
        System::Farm => DirectSystem::Farm,
        System::Lock => DirectSystem::Lock,
        System::Occ => DirectSystem::Occ,
        System::Chain => DirectSystem::Chain,
        System::Paxos => DirectSystem::Paxos,
        System::Rdma => DirectSystem::Rdma,
    }
}

/// Prints an application run's lines of the summary.
pub fn print_app_summary(a: &AppReport) {
    if a.app == "tpcc" {
        print_tpcc_summary(a);
        return;
    }
    if a.app == "replkv" {
        print_replkv_summary(a);
        return;
    }
    if a.app == "hashtable" {
        print_hashtable_summary(a);
        return;
    }
    println!(
        "  app {} on {}  {} transactions committed ({} read-only, {} write-only, {} read-write): {:.0}/s, {:.0}/s per process, {:.0} operations/s",
        a.app, a.system, a.committed, a.committed_ro, a.committed_wo, a.committed_rw, a.txns_per_s, a.txns_per_s_per_proc, a.ops_per_s
    );
    for (name, l) in [
        ("read-only", &a.latency_ns_ro),
        ("write-only", &a.latency_ns_wo),
        ("read-write", &a.latency_ns_rw),
    ] {
        if l.count > 0 {
            println!(
                "  {name:<11} latency p50 {}  p99 {}",
                us(l.p50 as f64),
                us(l.p99 as f64)
            );
        }
    }
    if a.checked {
        println!(
            "  app checker {} transactions and {} reads replayed in {} order: {} violation(s); {} read-only retries, {} replies resent, {} aborts",
            a.checked_transactions, a.checked_reads,
            if a.system == "1pipe" { "timestamp" } else { "commit" },
            a.violations, a.stats.ro_retries, a.stats.replies_resent, a.stats.aborts
        );
        print_checks(a);
    } else {
        println!(
            "  app checker none: {} states no serialization order",
            a.system
        );
    }
}

/// One line per check of the report besides the replay (`order-replay`, printed above): what it
/// counted and found, or why it did not run.
fn print_checks(a: &AppReport) {
    let printed = [
        "order-replay",
        "linearizability",
        "replica-logs",
        "tpcc-replay",
    ];
    for (name, c) in a
        .checks
        .iter()
        .filter(|(n, _)| !printed.contains(&n.as_str()))
    {
        if !c.ran {
            let why = c.why_not.as_deref().unwrap_or("no reason given");
            println!("  check       {name}: unchecked ({why})");
            continue;
        }
        let counts: Vec<String> = c.counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!(
            "  check       {name}: {}: {} violation(s)",
            counts.join(", "),
            c.violations
        );
    }
}

fn print_replkv_summary(a: &AppReport) {
    let r = &a.repl_stats;
    println!(
        "  app replkv on {}  {} operations ({} get, {} put, {} cas): {:.0}/s, {:.0}/s per client",
        a.system, a.committed, r.gets, r.puts, r.cas, a.ops_per_s, a.txns_per_s_per_proc
    );
    for (name, l) in [("get", &a.latency_ns_ro), ("write", &a.latency_ns_wo)] {
        if l.count > 0 {
            println!(
                "  {name:<11} latency p50 {}  p99 {}  mean {}",
                us(l.p50 as f64),
                us(l.p99 as f64),
                us(l.mean)
            );
        }
    }
    println!(
        "  app checker {} operations over {} keys checked for linearizability, replica logs compared, acknowledged writes found: {} violation(s); {} recoveries, {} entries rejected for a gap, {} resent",
        a.checked_transactions, a.checked_reads, a.violations, r.recoveries, r.rejected, r.resent
    );
    print_checks(a);
    for s in &a.violation_samples {
        eprintln!("  {s}");
    }
}

fn print_hashtable_summary(a: &AppReport) {
    let h = &a.ht_stats;
    println!(
        "  app hashtable on {}  {} inserts, {} lookups: {:.0} inserts/s and {:.0} lookups/s per client",
        a.system, h.inserts, h.lookups, a.inserts_per_s_per_client, a.lookups_per_s_per_client
    );
    for (name, l) in [("insert", &a.latency_ns_wo), ("lookup", &a.latency_ns_ro)] {
        if l.count > 0 {
            println!(
                "  {name:<11} latency p50 {}  p99 {}  mean {}",
                us(l.p50 as f64),
                us(l.p99 as f64),
                us(l.mean)
            );
        }
    }
    println!(
        "  verbs       {} head reads, {} pair reads ({:.2} per lookup), {} CAS retries, {} pairs read before written, {} verbs served, {} forwarded to followers, {} resent, {} unrepaired, {} given up",
        h.head_reads,
        h.slot_reads,
        h.slot_reads as f64 / h.lookups.max(1) as f64,
        h.cas_failed,
        h.not_written,
        h.served,
        h.replicated,
        h.resent,
        h.unrepaired,
        h.abandoned
    );
    println!(
        "  app checker {} operations over {} keys checked for linearizability (with the preload and a final lookup per key), chains and replicas compared, acknowledged inserts found: {} violation(s)",
        a.checked_transactions, a.checked_reads, a.violations
    );
    for s in &a.violation_samples {
        eprintln!("  {s}");
    }
}

fn print_tpcc_summary(a: &AppReport) {
    let t = &a.tpcc_stats;
    println!(
        "  app tpcc on {}  {} transactions committed ({} New-Order, {} of them rolled back; {} Payment): {:.0}/s, {:.0}/s per process",
        a.system, a.committed, a.committed_new_order, t.rolled_back, a.committed_payment, a.txns_per_s, a.txns_per_s_per_proc
    );
    for (name, l) in [
        ("New-Order", &a.latency_ns_new_order),
        ("Payment", &a.latency_ns_payment),
    ] {
        if l.count > 0 {
            println!(
                "  {name:<11} latency p50 {}  p99 {}",
                us(l.p50 as f64),
                us(l.p99 as f64)
            );
        }
    }
    if a.checked {
        println!(
            "  app checker {} transactions replayed in {} order against the reference, {} result fields compared: {} violation(s) in all; {} refused, {} recalled, {} replies resent",
            a.checked_transactions,
            if a.system == "1pipe" { "timestamp" } else { "commit" },
            a.checked_reads,
            a.violations,
            t.refused,
            t.recalled,
            t.replies_resent
        );
        print_checks(a);
    } else {
        println!(
            "  app checker none: {} states no serialization order",
            a.system
        );
    }
}
