//! `onepipe up`: a whole local cluster in one command.
//!
//! It writes a cluster file (two layers by default: racks of `--rack-size` hosts under `tor-N`,
//! joined by `spine-0`) — or takes the operator's with `--cluster` (`given`) —, starts the
//! controller, every aggregator and every endpoint as separate OS processes of this same binary
//! on 127.0.0.1 (or behind `--spawn`'s command prefix, e.g. in a network namespace of their own:
//! scripts/netns-cluster.sh), runs the workload on every endpoint at once,
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
mod argv;
mod events;
mod faults;
mod flags;
mod given;
mod report;

use super::supervise::{self, Child, ChildLine};
use super::{Blackhole, Kill, Pause, Restart, UpArgs, EXIT_INTERRUPTED, EXIT_RUNTIME};
use crate::cli::EXIT_USAGE;
use argv::agg_argv;
use flags::{
    check_args, check_blackholes, check_kills, check_restarts, cluster, paxos_live, protect,
    start_etcd,
};
use onepipe_proto::Timestamp;
use onepipe_runtime::clock::monotonic_ns;
use onepipe_runtime::cluster::{format_duration, Cluster};
use report::{finish, report};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
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
    /// The cluster file every daemon is given.
    config: PathBuf,
    /// The key directory, when the cluster is protected.
    pki: Option<PathBuf>,
    /// Each process's host (`hN`, for `--spawn`'s `{host}`), by process id.
    host_of: Vec<String>,
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

/// Runs `onepipe up`; the exit code.
pub fn run(args: &UpArgs) -> i32 {
    if let Err(code) = check_args(args) {
        return code;
    }
    let started = Instant::now();
    let (mut cluster, exe, given) = match prepare(args) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let dir = match make_dir(args, &mut cluster) {
        Ok(dir) => dir,
        Err(code) => return code,
    };
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
    let deadline = started + Duration::from_nanos(deadline_ns);
    let config = given.unwrap_or_else(|| dir.join("cluster.toml"));
    let mut run = Run::new(args, exe, dir.clone(), &stop, deadline, etcd, &cluster);
    run.config = config;
    let outcome = run.execute(&cluster);
    let clean = run.shutdown();
    let code = conclude(args, &cluster, &run, started, outcome, clean);
    drop(run);
    if args.keep {
        eprintln!("onepipe up: run directory kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    code
}

/// The cluster the flags describe (or `--cluster`'s file, and its path), with every flag about
/// its members checked against it, and this executable (the children run it); the exit code if
/// one is refused (said on standard error).
fn prepare(args: &UpArgs) -> Result<(Cluster, PathBuf, Option<PathBuf>), i32> {
    let (cluster, given) = match &args.cluster {
        Some(file) => given::load(args, file).map(|(c, path)| (c, Some(path))),
        None => cluster(args).map(|c| (c, None)),
    }
    .map_err(|e| {
        eprintln!("onepipe up: {e}");
        EXIT_USAGE
    })?;
    let exe = std::env::current_exe().map_err(|e| {
        eprintln!("onepipe up: cannot find my own executable: {e}");
        EXIT_RUNTIME
    })?;
    // Every check of the flags before the run directory exists: a refused flag leaves nothing
    // behind (161 directories, with their private keys, had piled up in /tmp from the tests of
    // refused flags).
    if let Err(e) = check_kills(args, &cluster) {
        eprintln!("onepipe up: --kill: {e}");
        return Err(EXIT_USAGE);
    }
    if let Err(e) = check_blackholes(args, &cluster) {
        eprintln!("onepipe up: {e}");
        return Err(EXIT_USAGE);
    }
    if let Err(e) = check_restarts(args, &cluster) {
        eprintln!("onepipe up: --restart: {e}");
        return Err(EXIT_USAGE);
    }
    Ok((cluster, exe, given))
}

/// The run directory, with the run's protection (`protect`) and its cluster file written in
/// it (with `--cluster`, only the directory: the file and its keys are the operator's); the
/// exit code if it cannot be (said on standard error, nothing left behind).
fn make_dir(args: &UpArgs, cluster: &mut Cluster) -> Result<PathBuf, i32> {
    let dir = std::env::temp_dir().join(format!(
        "onepipe-up-{}-{}",
        std::process::id(),
        monotonic_ns() % 1_000_000_000
    ));
    if let Err(e) = std::fs::create_dir_all(&dir)
        .map_err(|e| e.to_string())
        .and_then(|_| match args.cluster {
            Some(_) => Ok(()),
            None => protect(args, cluster, &dir).and_then(|_| {
                std::fs::write(dir.join("cluster.toml"), cluster.to_toml())
                    .map_err(|e| e.to_string())
            }),
        })
    {
        eprintln!("onepipe up: cannot write {}: {e}", dir.display());
        let _ = std::fs::remove_dir_all(&dir);
        return Err(EXIT_RUNTIME);
    }
    Ok(dir)
}

/// Checks and prints what the run came to, or says why it ended early; the exit code.
fn conclude(
    args: &UpArgs,
    cluster: &Cluster,
    run: &Run<'_>,
    started: Instant,
    outcome: Result<(), Abort>,
    clean: bool,
) -> i32 {
    match outcome {
        Ok(()) if args.app.app.is_some() => app_report::app_finish(args, cluster, run)
            .unwrap_or_else(|e| {
                eprintln!("onepipe up: {e}");
                EXIT_RUNTIME
            }),
        Ok(()) => match report(args, cluster, run, started) {
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
    }
}

impl<'a> Run<'a> {
    /// The run before anything started: `--kill`s in time order, each timed fault not yet
    /// fired, each process's first-hop aggregator.
    fn new(
        args: &'a UpArgs,
        exe: PathBuf,
        dir: PathBuf,
        stop: &'a AtomicBool,
        deadline: Instant,
        etcd: Option<(String, String)>,
        cluster: &Cluster,
    ) -> Run<'a> {
        let mut kills: Vec<Planned> = args
            .kill
            .iter()
            .map(|k| Planned {
                kill: k.clone(),
                fired: None,
            })
            .collect();
        kills.sort_by_key(|p| p.kill.at_ns);
        let (tx, lines) = std::sync::mpsc::channel();
        Run {
            args,
            exe,
            config: dir.join("cluster.toml"),
            pki: cluster
                .auth
                .as_ref()
                .filter(|a| a.mode.seals())
                .and_then(|a| a.pki.clone()),
            host_of: cluster
                .processes
                .iter()
                .map(|p| format!("h{}", p.host))
                .collect(),
            dir,
            stop,
            deadline,
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
        }
    }
}

impl Run<'_> {
    fn spawn(&mut self, role: Role, args: &[String]) -> Result<(), Abort> {
        let name = match &role {
            Role::Controller(c) if self.etcd.is_some() => format!("controller-{c}"),
            Role::Controller(_) => "controller".to_string(),
            Role::Aggregator(n) => n.clone(),
            Role::Node(p) => format!("p{p}"),
        };
        let host = match &role {
            Role::Node(p) => self.host_of.get(*p as usize).cloned(),
            _ => None,
        };
        let host = host.unwrap_or_else(|| name.clone());
        let mut cmd = given::command(self.args.spawn.as_deref(), &name, &host, &self.exe);
        cmd.args(args);
        let index = self.children.len();
        let child = Child::spawn(&name, cmd, index, self.tx.clone())
            .map_err(|e| Abort::Failed(format!("cannot start {name}: {e}")))?;
        self.children.push(child);
        self.roles.push(role);
        self.heard.push(Heard::default());
        Ok(())
    }

    /// Starts the controllers, the aggregators and the endpoints, runs the workload on every
    /// endpoint at once, and drains it.
    fn execute(&mut self, cluster: &Cluster) -> Result<(), Abort> {
        let config = self.config.display().to_string();
        self.print_cluster(cluster);
        let controller = self.start_controllers(&config)?;
        self.start_members(cluster, &config, controller)?;
        let t0 = monotonic_ns() + 100_000_000;
        self.t0 = t0;
        self.print_workload();
        self.tell_nodes(&format!("start {t0}"));
        self.send_and_drain()
    }

    /// The first line: the cluster's shape, its beacons, ordering and protection.
    fn print_cluster(&self, cluster: &Cluster) {
        let a = self.args;
        let shape = match &a.cluster {
            Some(_) => format!("cluster file {}", self.config.display()),
            None => a.layout.describe(),
        };
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
            } else if a.protocol.plato() {
                "unordered transport (PLATO: process 0 is also the sequencer)"
            } else if a.protocol.toto() {
                "unordered transport (ToTo/all-ack: causal layer and ordering in every process)"
            } else if paxos_live(a) {
                "unordered (MultiPaxos needs no timestamps)"
            } else {
                "ordered"
            },
            match cluster.auth_mode() {
                onepipe_runtime::auth::AuthMode::Off => "auth off (nothing protected)".to_string(),
                mode => format!(
                    "auth {mode} (datagrams sealed per link, control on TLS; keys in {})",
                    self.pki.as_deref().unwrap_or(&self.dir).display()
                ),
            },
        );
    }

    /// How many controllers run: two with `--etcd` (a leader and a standby), else one.
    fn controller_count(&self) -> usize {
        if self.etcd.is_some() {
            2
        } else {
            1
        }
    }

    /// Starts the controllers and waits until they listen and one leads; their addresses
    /// (comma-separated).
    fn start_controllers(&mut self, config: &str) -> Result<String, Abort> {
        let controllers = self.controller_count();
        for c in 0..controllers {
            let argv = self.controller_argv(c, config);
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
        Ok(controller.join(","))
    }

    /// Starts every aggregator and every endpoint, waits until each has joined, and lists
    /// them all.
    fn start_members(
        &mut self,
        cluster: &Cluster,
        config: &str,
        controller: String,
    ) -> Result<(), Abort> {
        for agg in &cluster.aggregators {
            self.spawn(
                Role::Aggregator(agg.name.clone()),
                &agg_argv(config, &agg.name, &controller),
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
        let controllers = self.controller_count();
        for (i, c) in self.children.iter().enumerate() {
            let proto = if i < controllers { "tcp" } else { "udp" };
            println!(
                "  {:<12} pid {:<8} {proto} {}",
                c.name,
                c.pid(),
                self.heard[i].addr.as_deref().unwrap_or("?")
            );
        }
        Ok(())
    }

    /// The line that says what the endpoints run, and for how long.
    fn print_workload(&self) {
        let (a, w) = (self.args, &self.args.work);
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
    }

    /// Once the endpoints started: waits until every one finished sending, orders the drain to
    /// the largest timestamp any sent, waits until every one drained, and gives the declared
    /// processes still running a while to finish.
    fn send_and_drain(&mut self) -> Result<(), Abort> {
        let (a, w) = (self.args, &self.args.work);
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
