//! `onepipe up`: a whole local cluster in one command.
//!
//! It writes a cluster file (two layers by default: racks of `--rack-size` hosts under `tor-N`,
//! joined by `spine-0`), starts the controller, every aggregator and every endpoint as separate
//! OS processes of this same binary on 127.0.0.1, runs the workload on every endpoint at once,
//! collects every send, delivery and failure, runs the simulator's checkers over them, prints a
//! summary and (with `--json`) a report, and stops everything.
//!
//! Shutdown is clean on success, on error and on Ctrl-C: endpoints are told to stop, then the
//! aggregators and the controller; whatever has not exited within a grace period is killed. The
//! children run in process groups of their own (Ctrl-C reaches only `up`), die with `up`
//! (`PR_SET_PDEATHSIG`), and stop when their standard input closes; a hard deadline bounds
//! the whole run.
//!
//! `--kill WHAT@TIME` kills members with SIGKILL while the workload runs (§5.2 failure
//! handling): their exit is expected, their missing records are not an error (a dead sender's
//! scatterings are rebuilt from what the others delivered), the processes the controller
//! declares failed are excused as receivers and checked as senders against their failure
//! timestamps (`Checker::on_declared`), recalled scatterings must be delivered nowhere
//! (`Checker::on_recalled`), and the summary reports the longest delivery stall of the correct
//! processes after the first kill.

mod app_report;
mod report;

use super::supervise::{self, Child, ChildLine};
use super::{
    Blackhole, Kill, KillTarget, Pause, Restart, Service, UpArgs, EXIT_INTERRUPTED, EXIT_RUNTIME,
};
use crate::cli::EXIT_USAGE;
use onepipe_proto::Timestamp;
use onepipe_runtime::clock::monotonic_ns;
use onepipe_runtime::cluster::{format_duration, AuthConfig, Cluster};
use report::{finish, report};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long `up` waits, after the others drained, for a declared process that still runs to
/// write its report.
const DECLARED_LINGER: Duration = Duration::from_secs(5);

/// What a child is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Role {
    /// The controller (with --etcd, the first or second of two).
    Controller(usize),
    Aggregator(String),
    Node(u32),
}

/// What we heard from a child.
#[derive(Debug, Default)]
struct Heard {
    addr: Option<String>,
    sent: Option<(u64, u64)>,
    done: Option<bool>,
    stats: Option<serde_json::Value>,
    closed: bool,
    /// Killed on purpose, or (a node) declared failed: nobody waits for it any more.
    gone: bool,
    /// A node the controller declared failed (§5.2). Unless it was also killed it still runs
    /// (frozen, or rejoined under a new id) and writes its report: `up` lingers for it a while.
    declared: bool,
    /// A controller that said it leads.
    leads: bool,
}

/// A `--kill` and what became of it.
struct Planned {
    kill: Kill,
    /// When it fired (monotonic ns), and the victim's pid.
    fired: Option<(u64, u32)>,
}

/// A process the controller declared failed: (round, failure ts, when `up` heard, mono ns).
type Declared = (u32, u64, u64);

/// Why the run ended early.
enum Abort {
    Interrupted,
    Failed(String),
}

struct Run<'a> {
    args: &'a UpArgs,
    exe: PathBuf,
    dir: PathBuf,
    stop: &'a AtomicBool,
    deadline: Instant,
    children: Vec<Child>,
    roles: Vec<Role>,
    heard: Vec<Heard>,
    lines: Receiver<ChildLine>,
    tx: std::sync::mpsc::Sender<ChildLine>,
    /// Children whose exit is expected now.
    stopping: bool,
    /// `--kill`s, in time order.
    kills: Vec<Planned>,
    /// `--blackhole`s, and whether each was ordered yet.
    blackholes: Vec<(Blackhole, bool)>,
    /// `--restart`s, and whether each was started yet.
    restarts: Vec<(Restart, bool)>,
    /// `--cut`s, and whether each was ordered yet.
    cuts: Vec<(Restart, bool)>,
    /// `--pause`s: how far each went (0: not yet, 1: stopped, 2: continued).
    pauses: Vec<(Pause, u8)>,
    /// §5.2: (slot, new id) of each endpoint that said it rejoined.
    rejoined: BTreeMap<u32, u32>,
    /// When sending starts (monotonic ns; 0 before it is set).
    t0: u64,
    /// §5.2: processes the controller declared failed.
    declared: BTreeMap<u32, Declared>,
    /// The controllers' addresses, for endpoints (comma-separated).
    controllers: String,
    /// Each process's first-hop aggregator, by process id.
    aggregator_of: Vec<String>,
    /// News some child reported (printed once each).
    said: BTreeSet<String>,
    /// With --etcd: etcd's URL and this run's key there.
    etcd: Option<(String, String)>,
    /// The leading controller (child index), once one said so.
    leader: Option<usize>,
    /// Every controller that led, in order.
    leaders: Vec<String>,
    /// Round → (declared by, resumed by).
    rounds: BTreeMap<u32, (String, Option<String>)>,
    /// Failed process → (told process → failure timestamp), from the §5.2 callbacks.
    callbacks: BTreeMap<String, BTreeMap<String, u64>>,
}

pub fn run(args: &UpArgs) -> i32 {
    if let Err(e) = args.work.check() {
        eprintln!("onepipe up: {e}");
        return EXIT_USAGE;
    }
    if let Err(e) = check_app(args) {
        eprintln!("onepipe up: {e}");
        return EXIT_USAGE;
    }
    if args.unordered && args.work.service == Service::Reliable {
        eprintln!("onepipe up: --unordered runs best effort only (the baseline has no reliable service); drop --service reliable");
        return EXIT_USAGE;
    }
    let started = Instant::now();
    let cluster = match cluster(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("onepipe up: {e}");
            return EXIT_USAGE;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("onepipe up: cannot find my own executable: {e}");
            return EXIT_RUNTIME;
        }
    };
    // Every check of the flags before the run directory exists: a refused flag leaves nothing
    // behind (161 directories, with their private keys, had piled up in /tmp from the tests of
    // refused flags).
    if let Err(e) = check_kills(args, &cluster) {
        eprintln!("onepipe up: --kill: {e}");
        return EXIT_USAGE;
    }
    if let Err(e) = check_blackholes(args, &cluster) {
        eprintln!("onepipe up: {e}");
        return EXIT_USAGE;
    }
    if let Err(e) = check_restarts(args, &cluster) {
        eprintln!("onepipe up: --restart: {e}");
        return EXIT_USAGE;
    }
    let dir = std::env::temp_dir().join(format!(
        "onepipe-up-{}-{}",
        std::process::id(),
        monotonic_ns() % 1_000_000_000
    ));
    let mut cluster = cluster;
    if let Err(e) = std::fs::create_dir_all(&dir)
        .map_err(|e| e.to_string())
        .and_then(|_| protect(args, &mut cluster, &dir))
        .and_then(|_| {
            std::fs::write(dir.join("cluster.toml"), cluster.to_toml()).map_err(|e| e.to_string())
        })
    {
        eprintln!("onepipe up: cannot write {}: {e}", dir.display());
        let _ = std::fs::remove_dir_all(&dir);
        return EXIT_RUNTIME;
    }
    let mut kills: Vec<Planned> = args
        .kill
        .iter()
        .map(|k| Planned {
            kill: k.clone(),
            fired: None,
        })
        .collect();
    kills.sort_by_key(|p| p.kill.at_ns);
    // The private etcd lives (and its directory with it) until every child has stopped.
    let (etcd, _private_etcd) = match start_etcd(args, &dir) {
        Ok(e) => e,
        Err((code, e)) => {
            eprintln!("onepipe up: --etcd: {e}");
            let _ = std::fs::remove_dir_all(&dir);
            return code;
        }
    };
    let (stop, _) = supervise::install(false);
    let deadline_ns = args
        .deadline
        .unwrap_or(args.work.duration + args.drain + 60_000_000_000);
    let (tx, lines) = std::sync::mpsc::channel();
    let mut run = Run {
        args,
        exe,
        dir: dir.clone(),
        stop: &stop,
        deadline: started + Duration::from_nanos(deadline_ns),
        children: Vec::new(),
        roles: Vec::new(),
        heard: Vec::new(),
        lines,
        tx,
        stopping: false,
        kills,
        blackholes: args.blackhole.iter().map(|&b| (b, false)).collect(),
        restarts: args.restart.iter().map(|&r| (r, false)).collect(),
        cuts: args.cut.iter().map(|&c| (c, false)).collect(),
        pauses: args.pause.iter().map(|&p| (p, 0)).collect(),
        rejoined: BTreeMap::new(),
        t0: 0,
        declared: BTreeMap::new(),
        controllers: String::new(),
        aggregator_of: cluster
            .processes
            .iter()
            .map(|p| p.aggregator.clone())
            .collect(),
        said: BTreeSet::new(),
        etcd,
        leader: None,
        leaders: Vec::new(),
        rounds: BTreeMap::new(),
        callbacks: BTreeMap::new(),
    };
    let outcome = run.execute(&cluster);
    let clean = run.shutdown();
    let code = match outcome {
        Ok(()) if args.app.app.is_some() => app_report::app_finish(args, &cluster, &run)
            .unwrap_or_else(|e| {
                eprintln!("onepipe up: {e}");
                EXIT_RUNTIME
            }),
        Ok(()) => match report(args, &cluster, &run, started) {
            Ok(r) => finish(args, &r),
            Err(e) => {
                eprintln!("onepipe up: {e}");
                EXIT_RUNTIME
            }
        },
        Err(Abort::Interrupted) => {
            eprintln!("onepipe up: interrupted; every process stopped");
            EXIT_INTERRUPTED
        }
        Err(Abort::Failed(e)) => {
            eprintln!("onepipe up: {e}");
            eprintln!(
                "onepipe up: {}",
                if clean {
                    "every other process exited cleanly when told to stop"
                } else {
                    "some processes had to be killed"
                }
            );
            EXIT_RUNTIME
        }
    };
    drop(run);
    if args.keep {
        eprintln!("onepipe up: run directory kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    code
}

/// `--app`: its flags are valid, and it runs with what it supports (1Pipe, no injected faults
/// yet).
fn check_app(args: &UpArgs) -> Result<(), String> {
    if args.app.app.is_none() {
        return Ok(());
    }
    if let Some(onepipe_sim::AppSpec::ReplKv { replicas, .. }) = args.app.spec()? {
        let procs = args.layout.hosts * args.layout.procs_per_host;
        if procs <= replicas {
            return Err(format!(
                "--replicas: {replicas} replicas leave no client among {procs} processes (the processes after the replicas are the clients)"
            ));
        }
    }
    if args.app.app == Some(crate::sim_app::AppName::Hashtable) {
        return Err("--app hashtable: in the simulator only (onepipe sim --app hashtable)".into());
    }
    if args.app.system != crate::sim_app::System::Onepipe && !paxos_live(args) {
        return Err("--system: live, the applications run on 1Pipe, and replkv on paxos too (the other baselines run in the simulator: onepipe sim --app kv|tpcc|replkv --system …)".into());
    }
    let unsupported = [
        (args.unordered, "--unordered"),
        (!args.restart.is_empty(), "--restart"),
        (!args.cut.is_empty(), "--cut"),
        (!args.blackhole.is_empty(), "--blackhole"),
    ];
    match unsupported.iter().find(|u| u.0) {
        Some((_, flag)) => Err(format!(
            "{flag}: not with this --app yet (its live checker has no accounting for it)"
        )),
        None => Ok(()),
    }
}

/// `--app replkv --system paxos`: MultiPaxos on the unordered transport (the same sockets,
/// datagrams and aggregators, with 1Pipe's ordering off), as a baseline needs no timestamps.
fn paxos_live(args: &UpArgs) -> bool {
    args.app.app == Some(crate::sim_app::AppName::Replkv)
        && args.app.system == crate::sim_app::System::Paxos
}

/// With `--etcd`: the URL and this run's key, and the private etcd if `up` started one.
#[allow(clippy::type_complexity)]
fn start_etcd(
    args: &UpArgs,
    dir: &std::path::Path,
) -> Result<(Option<(String, String)>, Option<super::etcd::Etcd>), (i32, String)> {
    let Some(url) = &args.etcd else {
        return Ok((None, None));
    };
    if !cfg!(feature = "etcd") {
        return Err((
            EXIT_USAGE,
            "this onepipe was built without etcd support; rebuild with `cargo build --features \
             etcd` (needs protoc: apt-get install -y protobuf-compiler)"
                .into(),
        ));
    }
    if !url.is_empty() {
        // Someone else's etcd: a key of this run's own, so no earlier log is replayed.
        let key = format!("up-{}-{}", std::process::id(), monotonic_ns());
        return Ok((Some((url.clone(), key)), None));
    }
    // The controllers reach it with the TLS files and user of `Etcd::controller_flags`.
    let key = "onepipe";
    let etcd = super::etcd::Etcd::start(dir.join("etcd"), key).map_err(|e| (EXIT_RUNTIME, e))?;
    println!(
        "onepipe up: etcd at {} (private, removed at exit; TLS with client certificates, user {})",
        etcd.url,
        super::etcd::USER
    );
    Ok((Some((etcd.url.clone(), key.into())), Some(etcd)))
}

/// Every `--kill` names a member of the cluster and falls within the sending time.
fn check_kills(args: &UpArgs, cluster: &Cluster) -> Result<(), String> {
    for p in &args.pause {
        if p.proc >= cluster.procs() {
            return Err(format!(
                "--pause {p}: there are {} processes",
                cluster.procs()
            ));
        }
    }
    for k in &args.kill {
        match &k.target {
            KillTarget::Proc(p) if *p >= cluster.procs() => {
                return Err(format!("{k}: there are {} processes", cluster.procs()))
            }
            KillTarget::Agg(name) if cluster.aggregator(name).is_none() => {
                let names: Vec<&str> = cluster
                    .aggregators
                    .iter()
                    .map(|a| a.name.as_str())
                    .collect();
                return Err(format!("{k}: no aggregator '{name}' (there are {names:?})"));
            }
            _ => {}
        }
        if k.at_ns.is_some_and(|at| at >= args.work.duration) {
            return Err(format!(
                "{k}: must be within --duration ({})",
                format_duration(args.work.duration)
            ));
        }
    }
    if args.unordered && !args.kill.is_empty() {
        return Err("the unordered baseline has no failure handling".into());
    }
    Ok(())
}

/// Every `--restart` follows a `--kill` of the same endpoint and falls within the sending
/// time.
fn check_restarts(args: &UpArgs, cluster: &Cluster) -> Result<(), String> {
    for r in &args.restart {
        if r.proc >= cluster.procs() {
            return Err(format!("{r}: there are {} processes", cluster.procs()));
        }
        let killed_before = args.kill.iter().any(|k| {
            k.target == KillTarget::Proc(r.proc) && k.at_ns.is_some_and(|at| at < r.at_ns)
        });
        if !killed_before {
            return Err(format!(
                "{r}: needs a --kill proc:{}@TIME before it",
                r.proc
            ));
        }
        if r.at_ns >= args.work.duration {
            return Err(format!(
                "{r}: must be within --duration ({})",
                format_duration(args.work.duration)
            ));
        }
    }
    if args
        .restart
        .iter()
        .enumerate()
        .any(|(i, r)| args.restart[..i].iter().any(|q| q.proc == r.proc))
    {
        return Err("one restart per process".into());
    }
    Ok(())
}

/// Every `--blackhole` and `--cut` names processes of the cluster and falls within the sending
/// time.
fn check_blackholes(args: &UpArgs, cluster: &Cluster) -> Result<(), String> {
    let blackholes = args
        .blackhole
        .iter()
        .map(|b| (format!("--blackhole {b}"), b.from.max(b.to), b.at_ns));
    let cuts = args
        .cut
        .iter()
        .map(|c| (format!("--cut {c}"), c.proc, c.at_ns));
    for (what, proc, at_ns) in blackholes.chain(cuts) {
        if proc >= cluster.procs() {
            return Err(format!("{what}: there are {} processes", cluster.procs()));
        }
        if at_ns >= args.work.duration {
            return Err(format!(
                "{what}: must be within --duration ({})",
                format_duration(args.work.duration)
            ));
        }
    }
    if args.unordered && !(args.blackhole.is_empty() && args.cut.is_empty()) {
        return Err("the unordered baseline has no failure handling".into());
    }
    Ok(())
}

/// The run's protection (docs/SECURITY.md): with `--auth on` or `encrypt`, a CA, every
/// member's certificate and a cluster secret of this run's own in `dir/pki` (removed with the
/// directory at the end); with `--auth off`, nothing.
fn protect(args: &UpArgs, cluster: &mut Cluster, dir: &std::path::Path) -> Result<(), String> {
    if !args.auth.seals() {
        cluster.auth = Some(AuthConfig::off());
        return Ok(());
    }
    let pki = dir.join("pki");
    super::daemons::write_pki(&pki, cluster)?;
    let mut auth = AuthConfig::on(Some(pki));
    auth.mode = args.auth;
    if let Some(every) = args.rotate_keys_every {
        auth.rotate_every_ns = every;
    }
    cluster.auth = Some(auth);
    Ok(())
}

fn cluster(args: &UpArgs) -> Result<Cluster, String> {
    let layout = args
        .layout
        .local(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let mut c = Cluster::generate(&layout).map_err(|e| format!("--{}: {}", e.field, e.message))?;
    c.beacon_interval_ns = args.beacon_interval;
    c.fast_beacon_interval_ns = args.fast_beacon_interval;
    c.aggregator_phase_ns = args.aggregator_phase.unwrap_or(args.beacon_interval / 5);
    c.aggregator_mode = args.aggregator_mode;
    c.ordered = !args.unordered && !paxos_live(args);
    c.datagram_len_max = args.datagram_len_max.0;
    c.gso = !args.no_gso;
    c.gro = !args.no_gro;
    let faults = !args.blackhole.is_empty() || !args.cut.is_empty();
    c.forward_after = args.forward_after.unwrap_or(u32::from(faults));
    c.validate().map_err(|e| match e.field.as_str() {
        "beacon_interval" => format!("--beacon-interval: {}", e.message),
        "fast_beacon_interval" => format!("--fast-beacon-interval: {}", e.message),
        "aggregator_phase" => format!("--aggregator-phase: {}", e.message),
        "datagram_len_max" => format!("--datagram-len-max: {}", e.message),
        _ => e.to_string(),
    })?;
    Ok(c)
}

impl Run<'_> {
    fn spawn(&mut self, role: Role, args: &[String]) -> Result<(), Abort> {
        let name = match &role {
            Role::Controller(c) if self.etcd.is_some() => format!("controller-{c}"),
            Role::Controller(_) => "controller".to_string(),
            Role::Aggregator(n) => n.clone(),
            Role::Node(p) => format!("p{p}"),
        };
        let mut cmd = Command::new(&self.exe);
        cmd.args(args);
        let index = self.children.len();
        let child = Child::spawn(&name, cmd, index, self.tx.clone())
            .map_err(|e| Abort::Failed(format!("cannot start {name}: {e}")))?;
        self.children.push(child);
        self.roles.push(role);
        self.heard.push(Heard::default());
        Ok(())
    }

    /// Fires the timed `--kill`s that are due.
    fn fire_kills(&mut self) {
        if self.t0 == 0 {
            return;
        }
        let now = monotonic_ns();
        for k in 0..self.kills.len() {
            let due = self.kills[k]
                .kill
                .at_ns
                .is_some_and(|at| now >= self.t0 + at);
            if self.kills[k].fired.is_none() && due {
                self.fire(k);
            }
        }
        for k in 0..self.blackholes.len() {
            let (b, ordered) = self.blackholes[k];
            if !ordered && now >= self.t0 + b.at_ns {
                self.blackholes[k].1 = true;
                self.order_blackhole(b, now);
            }
        }
        for k in 0..self.cuts.len() {
            let (c, ordered) = self.cuts[k];
            if !ordered && now >= self.t0 + c.at_ns {
                self.cuts[k].1 = true;
                self.order_cut(c, now);
            }
        }
        for k in 0..self.pauses.len() {
            let (p, done) = self.pauses[k];
            let step = match done {
                0 if now >= self.t0 + p.from_ns => Some(rustix::process::Signal::STOP),
                1 if now >= self.t0 + p.to_ns => Some(rustix::process::Signal::CONT),
                _ => None,
            };
            if let Some(sig) = step {
                self.pauses[k].1 += 1;
                self.signal_node(p.proc, sig, now);
            }
        }
        for k in 0..self.restarts.len() {
            let (r, started) = self.restarts[k];
            if !started && now >= self.t0 + r.at_ns {
                self.restarts[k].1 = true;
                self.start_again(r, now);
            }
        }
    }

    /// `--restart proc:N`: a new endpoint process for pN, memory lost; `start` goes to it
    /// once it says `ready` (see `on_line`).
    fn start_again(&mut self, r: Restart, now: u64) {
        let mut argv = self.node_argv(r.proc);
        argv.push("--restarted".into());
        println!(
            "  restart     {r} at {:.2} s: p{} starts again, its memory lost",
            now.saturating_sub(self.t0) as f64 / 1e9,
            r.proc
        );
        if let Err(Abort::Failed(e)) = self.spawn(Role::Node(r.proc), &argv) {
            println!("  restart     {r}: {e}");
        }
    }

    /// The command line of endpoint `p`'s `onepipe node`.
    fn node_argv(&self, p: u32) -> Vec<String> {
        let (a, w) = (self.args, &self.args.work);
        let out = self.dir.join(format!("p{p}.rec")).display().to_string();
        strings(&[
            "node",
            "--controller",
            &self.controllers,
            "--proc",
            &p.to_string(),
            "--workload",
            w.workload.name(),
            "--service",
            w.service.name(),
            "--msg-size",
            &w.msg_size.to_string(),
            "--rate",
            &w.rate.to_string(),
            "--duration",
            &format!("{}ns", w.duration),
            "--scatter-k",
            &w.scatter_k.to_string(),
            "--seed",
            &w.seed.to_string(),
            "--drain",
            &format!("{}ns", a.drain),
            "--out",
            &out,
            "--app-spin",
            &a.app_spin.to_string(),
            "--supervised",
        ])
        .into_iter()
        .chain(self.pki_argv())
        .chain(self.app_argv())
        .collect()
    }

    /// `--pki DIR` for a node, when the run is protected.
    fn pki_argv(&self) -> Vec<String> {
        match self.args.auth.seals() {
            true => strings(&["--pki", &self.dir.join("pki").display().to_string()]),
            false => Vec::new(),
        }
    }

    /// The application's flags, passed on to every node.
    fn app_argv(&self) -> Vec<String> {
        let a = &self.args.app;
        match a.app {
            None => return Vec::new(),
            Some(crate::sim_app::AppName::Tpcc) => {
                return strings(&[
                    "--app",
                    "tpcc",
                    "--window",
                    &a.window.to_string(),
                    "--warehouses",
                    &a.warehouses.to_string(),
                    "--items",
                    &a.items.to_string(),
                    "--customers",
                    &a.customers.to_string(),
                ])
            }
            Some(crate::sim_app::AppName::Replkv) => {
                return strings(&[
                    "--app",
                    "replkv",
                    "--window",
                    &a.window.to_string(),
                    "--keys",
                    &a.keys.unwrap_or(1_000).to_string(),
                    "--replicas",
                    &a.replicas.unwrap_or(3).to_string(),
                    "--read-share",
                    &a.read_share.to_string(),
                    "--cas-share",
                    &a.cas_share.to_string(),
                    "--value-size",
                    &a.value_size.to_string(),
                    "--disk",
                    &format!("{}ns", a.disk),
                    "--disk-jitter",
                    &format!("{}ns", a.disk_jitter),
                    "--system",
                    if paxos_live(self.args) {
                        "paxos"
                    } else {
                        "1pipe"
                    },
                    "--wnd",
                    &a.wnd.to_string(),
                    "--bsz",
                    &a.bsz.to_string(),
                    "--delta-b",
                    &format!("{}ns", a.delta_b),
                ])
            }
            Some(crate::sim_app::AppName::Kv) => {}
            Some(crate::sim_app::AppName::Hashtable) => unreachable!("refused by check_app"),
        }
        let mut v = strings(&[
            "--app",
            "kv",
            "--window",
            &a.window.to_string(),
            "--keys",
            &a.keys.unwrap_or(1_000_000).to_string(),
            "--key-dist",
            match a.key_dist {
                crate::sim_app::Dist::Uniform => "uniform",
                crate::sim_app::Dist::Zipf => "zipf",
            },
            "--ops-per-txn",
            &a.ops_per_txn.to_string(),
            "--read-only-share",
            &a.read_only_share
                .0
                .map_or("none".to_string(), |x| x.to_string()),
            "--write-share",
            &a.write_share.to_string(),
            "--value-max",
            &a.value_max.to_string(),
        ]);
        if let Some(y) = &a.ycsb {
            v.extend(strings(&["--ycsb", y]));
        }
        v
    }

    /// `--blackhole A>B`: orders A's first-hop aggregator to black-hole A's packets to B.
    fn order_blackhole(&mut self, b: Blackhole, now: u64) {
        let line = format!("blackhole {} {}", b.from, b.to);
        let what = format!("p{}'s data, ACKs and NAKs to p{}", b.from, b.to);
        self.order_fault(b.from, &line, &format!("blackhole   {b}"), &what, now);
    }

    /// `--cut proc:N`: orders pN's first-hop aggregator to drop everything pN sends.
    fn order_cut(&mut self, c: Restart, now: u64) {
        let line = format!("cut {}", c.proc);
        let what = format!("everything p{} sends (its uplink, one direction)", c.proc);
        self.order_fault(c.proc, &line, &format!("cut         {c}"), &what, now);
    }

    /// Sends `sig` (`--pause`: SIGSTOP, then SIGCONT) to endpoint `proc`, and says so.
    fn signal_node(&mut self, proc: u32, sig: rustix::process::Signal, now: u64) {
        let Some(i) = self.roles.iter().position(|r| *r == Role::Node(proc)) else {
            return;
        };
        let pid = self.children[i].pid();
        let name = if sig == rustix::process::Signal::STOP {
            "SIGSTOP"
        } else {
            "SIGCONT"
        };
        let sent = rustix::process::Pid::from_raw(pid as i32)
            .map(|p| rustix::process::kill_process(p, sig));
        let how = match sent {
            Some(Ok(())) => String::new(),
            Some(Err(e)) => format!(" (failed: {e})"),
            None => " (no pid)".into(),
        };
        println!(
            "  pause       p{proc} at {:.2} s: {name} (pid {pid}){how}",
            now.saturating_sub(self.t0) as f64 / 1e9
        );
    }

    /// Writes test fault `line` to process `proc`'s first-hop aggregator and says so.
    fn order_fault(&mut self, proc: u32, line: &str, label: &str, what: &str, now: u64) {
        let Some(agg) = self.aggregator_of.get(proc as usize).cloned() else {
            return;
        };
        let role = Role::Aggregator(agg.clone());
        let Some(i) = self.roles.iter().position(|r| *r == role) else {
            return;
        };
        self.children[i].send(line);
        println!(
            "  {label} at {:.2} s: {agg} drops {what}",
            now.saturating_sub(self.t0) as f64 / 1e9
        );
    }

    /// Kill `k`: SIGKILL, and its victim's exit is expected from now on. `controller` is the
    /// leading one.
    fn fire(&mut self, k: usize) {
        let now = monotonic_ns();
        let i = match &self.kills[k].kill.target {
            KillTarget::Proc(p) => self.roles.iter().position(|r| *r == Role::Node(*p)),
            KillTarget::Agg(name) => {
                let role = Role::Aggregator(name.clone());
                self.roles.iter().position(|r| *r == role)
            }
            KillTarget::Controller => self.leader.or(Some(0)),
        };
        let Some(i) = i else {
            return;
        };
        let pid = self.children[i].pid();
        self.children[i].kill();
        self.heard[i].gone = true;
        self.kills[k].fired = Some((now, pid));
        println!(
            "  kill        {} at {:.2} s: SIGKILL {} (pid {pid})",
            self.kills[k].kill,
            now.saturating_sub(self.t0) as f64 / 1e9,
            self.children[i].name
        );
        if matches!(self.roles[i], Role::Controller(_)) {
            self.on_controller_lost(i);
        }
    }

    /// Controller `i` is gone. With a standby (--etcd), it takes over once the dead leader's
    /// lease ends: it replays the §5.2 log and finishes any open round, and the members
    /// re-register with it. With none, the cluster runs on but a later failure cannot be
    /// repaired (its survivors stall).
    fn on_controller_lost(&mut self, i: usize) {
        if self.leader == Some(i) {
            self.leader = None;
        }
        let standby = (0..self.roles.len()).find(|&j| {
            matches!(self.roles[j], Role::Controller(_)) && !self.heard[j].gone && j != i
        });
        match standby {
            Some(j) => println!(
                "  controller  {} killed: standby {} takes over when its lease ends; the \
                 members re-register with it, the processes keep running",
                self.children[i].name, self.children[j].name
            ),
            None => println!(
                "  controller  killed: there is no standby controller, so failures from now on \
                 cannot be repaired (delivery would stall); the processes keep running"
            ),
        }
    }

    fn execute(&mut self, cluster: &Cluster) -> Result<(), Abort> {
        let a = self.args;
        let config = self.dir.join("cluster.toml").display().to_string();
        let shape = a.layout.describe();
        println!(
            "onepipe up: {} hosts × {} process(es), {shape} ({} {} aggregators), {} beacons{}, {}, {}",
            a.layout.hosts,
            a.layout.procs_per_host,
            cluster.aggregators.len(),
            cluster.aggregator_mode,
            format_duration(cluster.beacon_interval_ns),
            match cluster.roles().fast_beacons() {
                0 => String::new(),
                f => format!(" ({} while someone waits)", format_duration(f)),
            },
            if a.unordered {
                "UNORDERED (baseline)"
            } else if paxos_live(a) {
                "unordered (MultiPaxos needs no timestamps)"
            } else {
                "ordered"
            },
            match cluster.auth_mode() {
                onepipe_runtime::auth::AuthMode::Off => "auth off (nothing protected)".to_string(),
                mode => format!(
                    "auth {mode} (datagrams sealed per link, control on TLS; keys in {})",
                    self.dir.join("pki").display()
                ),
            },
        );
        let controllers = if self.etcd.is_some() { 2 } else { 1 };
        for c in 0..controllers {
            let mut argv = strings(&[
                "controller",
                "--config",
                &config,
                "--listen",
                "127.0.0.1:0",
                "--supervised",
                "--quiet",
            ]);
            if let Some((url, key)) = &self.etcd {
                let name = format!("controller-{c}");
                argv.extend(strings(&[
                    "--etcd",
                    url,
                    "--cluster-key",
                    key,
                    "--name",
                    &name,
                ]));
                if a.etcd.as_deref() == Some("") {
                    // The private etcd start_etcd started: TLS, client certificates, a user.
                    argv.extend(super::etcd::Etcd::controller_flags(&self.dir.join("etcd")));
                }
            }
            self.spawn(Role::Controller(c), &argv)?;
        }
        self.wait_until(
            "the controllers to listen and one to lead",
            Duration::from_secs(30),
            |h, r| {
                let mut c = (0..r.len()).filter(|&i| matches!(r[i], Role::Controller(_)));
                c.clone().all(|i| h[i].addr.is_some()) && c.any(|i| h[i].leads)
            },
        )?;
        let controller: Vec<String> = (0..controllers)
            .map(|i| self.heard[i].addr.clone().expect("listening"))
            .collect();
        let controller = controller.join(",");
        let w = &a.work;
        for agg in &cluster.aggregators {
            self.spawn(
                Role::Aggregator(agg.name.clone()),
                &strings(&[
                    "agg",
                    "--config",
                    &config,
                    "--id",
                    &agg.name,
                    "--controller",
                    &controller,
                    "--supervised",
                ]),
            )?;
        }
        self.controllers = controller;
        for p in &cluster.processes {
            let argv = self.node_argv(p.id);
            self.spawn(Role::Node(p.id), &argv)?;
        }
        self.wait_until("every member to join", Duration::from_secs(60), |h, _| {
            h.iter().all(|h| h.addr.is_some())
        })?;
        for (i, c) in self.children.iter().enumerate() {
            let proto = if i < controllers { "tcp" } else { "udp" };
            println!(
                "  {:<12} pid {:<8} {proto} {}",
                c.name,
                c.pid(),
                self.heard[i].addr.as_deref().unwrap_or("?")
            );
        }
        let t0 = monotonic_ns() + 100_000_000;
        self.t0 = t0;
        if a.app.app.is_some() {
            println!(
                "running --app {}, {} transactions in flight per process, for {}",
                match a.app.app {
                    Some(crate::sim_app::AppName::Tpcc) => "tpcc",
                    Some(crate::sim_app::AppName::Replkv) => "replkv",
                    _ => "kv",
                },
                a.app.window,
                format_duration(w.duration)
            );
        } else {
            println!(
                "running {} ({} service), {} B messages, {}/s per process, for {}",
                w.workload.name(),
                w.service.name(),
                w.msg_size,
                w.rate,
                format_duration(w.duration)
            );
        }
        self.tell_nodes(&format!("start {t0}"));
        let send_wait = Duration::from_nanos(w.duration + a.drain) + Duration::from_secs(30);
        self.wait_until("every endpoint to finish sending", send_wait, |h, r| {
            nodes(r).all(|i| h[i].gone || h[i].sent.is_some())
        })?;
        let max_ts = nodes(&self.roles)
            .filter(|&i| !self.heard[i].gone)
            .filter_map(|i| self.heard[i].sent.map(|s| Timestamp::new(s.0)))
            .max()
            .unwrap_or(Timestamp::new(0));
        self.tell_nodes(&format!("drain {}", max_ts.raw()));
        let drain_wait = Duration::from_nanos(a.drain) + Duration::from_secs(30);
        self.wait_until("every endpoint to drain", drain_wait, |h, r| {
            nodes(r).all(|i| h[i].gone || h[i].done.is_some())
        })?;
        // A declared process still running finishes on its own clock (it waited to rejoin
        // until the end of the run): its report and records count too, so `up` gives it a
        // while before the stop, and stops it anyway after that.
        self.linger(DECLARED_LINGER, |h, r| {
            nodes(r).all(|i| !h[i].declared || h[i].done.is_some() || h[i].closed)
        });
        Ok(())
    }

    /// Handles children's output until `done` holds or `limit` passes; never fails.
    fn linger(&mut self, limit: Duration, done: impl Fn(&[Heard], &[Role]) -> bool) {
        let until = (Instant::now() + limit).min(self.deadline);
        while !done(&self.heard, &self.roles) && Instant::now() < until {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(20)) {
                self.on_line(line);
            }
        }
    }

    fn tell_nodes(&mut self, line: &str) {
        for i in nodes(&self.roles).collect::<Vec<_>>() {
            if self.children[i].exited().is_none() {
                self.children[i].send(line);
            }
        }
    }

    fn on_line(&mut self, line: ChildLine) {
        let (i, text) = match line {
            ChildLine::Closed(i) => {
                self.heard[i].closed = true;
                return;
            }
            ChildLine::Line(i, t) => (i, t),
        };
        let mut words = text.split_whitespace();
        let h = &mut self.heard[i];
        match (words.next(), &self.roles[i]) {
            (Some("listening"), Role::Controller(_)) => {
                h.addr = words.next().map(str::to_string);
                // Without an election a controller leads from the start.
                h.leads |= self.etcd.is_none();
            }
            (Some("ready"), Role::Aggregator(_)) => h.addr = words.next().map(str::to_string),
            (Some("ready"), Role::Node(_)) => {
                h.addr = words.nth(1).map(str::to_string);
                // A restarted endpoint (`--restart`) joins a run already going.
                if self.t0 != 0 {
                    let t0 = self.t0;
                    self.children[i].send(&format!("start {t0}"));
                }
            }
            (Some("sent"), Role::Node(_)) => {
                let v: Vec<u64> = words.filter_map(|w| w.parse().ok()).collect();
                if let [ts, n] = v[..] {
                    h.sent = Some((ts, n));
                }
            }
            (Some("done"), Role::Node(_)) => h.done = Some(words.next() == Some("true")),
            (Some("stats"), _) => {
                let json = text.trim_start_matches("stats").trim();
                h.stats = serde_json::from_str(json).ok();
            }
            (Some("event"), role) => {
                let role = role.clone();
                let rest: Vec<&str> = words.collect();
                self.on_event(i, &role, &rest);
            }
            _ => println!("  {}: {text}", self.children[i].name),
        }
    }

    /// An `event` line from child `i`.
    fn on_event(&mut self, i: usize, role: &Role, rest: &[&str]) {
        let name = self.children[i].name.clone();
        match (role, rest) {
            // Processes leaving when told to stop are timed out like failed ones: not news.
            (Role::Controller(_), ["declared" | "resumed" | "leader" | "detected", ..])
                if self.stopping => {}
            (Role::Controller(_), ["leader", who]) => {
                self.heard[i].leads = true;
                self.leader = Some(i);
                let again = if self.leaders.is_empty() {
                    ""
                } else {
                    " (took over: replayed the §5.2 log)"
                };
                self.leaders.push(who.to_string());
                println!("  {name}  leads{again}");
            }
            (Role::Controller(_), ["detected", _]) => {
                if self.leader == Some(i) {
                    // The middle of a round: a Detect report is logged, Resume is to come.
                    for k in 0..self.kills.len() {
                        if self.kills[k].fired.is_none() && self.kills[k].kill.at_ns.is_none() {
                            self.fire(k);
                        }
                    }
                }
            }
            (Role::Controller(_), ["deposed", why @ ..]) => {
                println!("  {name}  deposed: {}", why.join(" "));
            }
            (Role::Controller(_), ["declared", round, failed @ ..]) => {
                let round: u32 = round.parse().unwrap_or(0);
                if let Some((by, _)) = self.rounds.get(&round) {
                    if *by != name {
                        println!("  {name}  round {round}: declared again after the takeover");
                    }
                    return;
                }
                self.rounds.insert(round, (name.clone(), None));
                let now = monotonic_ns();
                let mut said = Vec::new();
                for f in failed {
                    let Some((p, ts)) = f.split_once(':') else {
                        continue;
                    };
                    let (Ok(p), Ok(ts)) = (p.parse::<u32>(), ts.parse::<u64>()) else {
                        continue;
                    };
                    self.declared.entry(p).or_insert((round, ts, now));
                    if let Some(j) = self.roles.iter().position(|r| *r == Role::Node(p)) {
                        self.heard[j].gone = true;
                        self.heard[j].declared = true;
                    }
                    said.push(format!("p{p} (failure ts {ts})"));
                }
                println!(
                    "  {name}  round {round}: declared failed {}",
                    said.join(", ")
                );
            }
            (Role::Controller(_), ["resumed", round]) => {
                let round: u32 = round.parse().unwrap_or(0);
                if let Some((_, by @ None)) = self.rounds.get_mut(&round) {
                    *by = Some(name.clone());
                    println!("  {name}  round {round}: every correct process completed; resumed");
                }
            }
            (Role::Node(slot), ["rejoined-as", new]) => {
                if let Ok(new) = new.parse::<u32>() {
                    self.rejoined.insert(*slot, new);
                    let at = monotonic_ns().saturating_sub(self.t0) as f64 / 1e9;
                    println!("  {name}  rejoined as p{new} at {at:.2} s (§5.2: a new process)");
                }
            }
            // Every survivor hears of a rejoin: said once, by the rejoined process above.
            (_, ["rejoined", ..]) => {}
            (Role::Node(_), ["controller-changed"]) => {
                if self.said.insert(format!("{name} rejoined")) {
                    println!("  {name}: re-registered with the leading controller");
                }
            }
            // Every survivor hears the same news: say each once.
            (_, ["process-failed", p, "lost"]) => {
                if self.said.insert(format!("{p} lost")) {
                    println!("  {name}: the controller reports p{p} lost")
                }
            }
            (_, ["process-failed", p, how @ ("failed" | "left"), ts]) => {
                if let Ok(t) = ts.parse::<u64>() {
                    let told = self.callbacks.entry(format!("p{p}")).or_default();
                    told.insert(name.clone(), t);
                }
                if self.said.insert(format!("{p} failed")) {
                    println!("  {name}: p{p} {how} at ts {ts} (§5.2 callback)");
                }
            }
            (_, ["aggregator-failed", agg]) => {
                if self.said.insert(format!("{agg} failed")) {
                    println!("  {name}: the controller reports {agg} lost");
                }
            }
            (_, ["process-failed", _, "declared", _]) => {
                println!("  {name}: told it was declared failed (cut off from the others)")
            }
            _ => println!("  {name}: {}", rest.join(" ")),
        }
    }

    /// Handles children's output until `done` holds, a child dies, Ctrl-C, or the deadline.
    fn wait_until(
        &mut self,
        what: &str,
        limit: Duration,
        done: impl Fn(&[Heard], &[Role]) -> bool,
    ) -> Result<(), Abort> {
        let until = (Instant::now() + limit).min(self.deadline);
        loop {
            if done(&self.heard, &self.roles) {
                return Ok(());
            }
            if self.stop.load(Ordering::SeqCst) {
                return Err(Abort::Interrupted);
            }
            self.fire_kills();
            let dead = (0..self.children.len())
                .find(|&i| !self.heard[i].gone && self.children[i].exited().is_some());
            if let Some(dead) = dead {
                return Err(self.died(dead));
            }
            if Instant::now() >= until {
                return Err(Abort::Failed(format!(
                    "gave up waiting for {what} after {:.1} s",
                    limit.as_secs_f64()
                )));
            }
            match self.lines.recv_timeout(Duration::from_millis(20)) {
                Ok(line) => self.on_line(line),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {}
            }
        }
    }

    /// A child exited while it should be running: say so, and check for a moment that the
    /// others keep running (they must not crash; a death `--kill` did not plan is an error).
    fn died(&mut self, dead: usize) -> Abort {
        let status = self.children[dead]
            .exited()
            .map(supervise::describe)
            .unwrap_or_default();
        let name = self.children[dead].name.clone();
        let grace = Instant::now() + Duration::from_secs(1);
        while Instant::now() < grace {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(20)) {
                self.on_line(line);
            }
        }
        let others = self.children.len() - 1;
        let running = (0..self.children.len())
            .filter(|&i| i != dead && self.children[i].exited().is_none())
            .count();
        Abort::Failed(format!(
            "{name} exited unexpectedly ({status}); {running} of the {others} other processes kept running"
        ))
    }

    /// Stops everyone: endpoints first (so they leave), then aggregators, then the controller.
    /// Returns true if every one exited with status 0 when asked, none had to be killed.
    fn shutdown(&mut self) -> bool {
        self.stopping = true;
        let mut clean = true;
        let order: Vec<Vec<usize>> = vec![
            nodes(&self.roles).collect(),
            (0..self.roles.len())
                .filter(|&i| matches!(self.roles[i], Role::Aggregator(_)))
                .collect(),
            (0..self.roles.len())
                .filter(|&i| matches!(self.roles[i], Role::Controller(_)))
                .collect(),
        ];
        for group in order {
            for &i in &group {
                if self.children[i].exited().is_none() {
                    self.children[i].send("stop");
                    self.children[i].close_stdin();
                }
            }
            for &i in &group {
                let was_dead = self.children[i].exited().is_some();
                let (status, killed) = self.children[i].finish(Duration::from_secs(5));
                if !was_dead && (killed || status.is_none_or(|s| !s.success())) {
                    clean = false;
                }
            }
        }
        // The last lines (stats) may still be in the pipe.
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until && !self.heard.iter().all(|h| h.closed) {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(10)) {
                self.on_line(line);
            }
        }
        while let Ok(line) = self.lines.try_recv() {
            self.on_line(line);
        }
        clean
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn nodes(roles: &[Role]) -> impl Iterator<Item = usize> + '_ {
    (0..roles.len()).filter(|&i| matches!(roles[i], Role::Node(_)))
}
