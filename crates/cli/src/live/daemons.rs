//! `onepipe controller`, `onepipe agg` and `onepipe topology`: thin command lines over the
//! runtime's controller and aggregator. Each daemon prints one line when it is up (`listening
//! ADDR`, `ready ADDR`, followed by `metrics ADDR` while it serves `GET /metrics`: see
//! `super::metrics`) and one `stats {json}` line when it stops, on standard output, for
//! `onepipe up` and for scripts. Their log goes to standard error through `tracing` (see
//! `crate::cli::init_logs`); a bad command line or cluster file is a plain error message and
//! exit code 2, as for every command.

use super::metrics::{self, Sample, Server};
use super::supervise;
use super::{AggArgs, ControllerArgs, TopologyArgs};
use crate::cli::EXIT_USAGE;
use onepipe_proto::ids::ProcId;
use onepipe_runtime::aggregator::{run_aggregator, AggregatorFaults, Fault, TELEMETRY_INTERVAL};
use onepipe_runtime::auth::ClusterSecret;
use onepipe_runtime::cluster::{AuthConfig, Cluster};
use onepipe_runtime::controller::{Controller, ControllerSecurity, HaOptions, NO_AUTH_SECTION};
use onepipe_runtime::stats::{Telemetry, TelemetrySnapshot};
use onepipe_runtime::tls::{Credentials, Pki, ANY_PROCESS, CONTROLLER, OPERATOR};
use onepipe_runtime::DriverConfig;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{error, warn};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Reads a cluster file for a daemon: it must say how it is protected (docs/SECURITY.md);
/// `pki` overrides the file's key directory.
fn load(path: &std::path::Path, who: &str, pki: Option<&PathBuf>) -> Result<Cluster, i32> {
    let mut cluster = Cluster::load(path).map_err(|e| {
        eprintln!("onepipe {who}: {}: {e}", path.display());
        EXIT_USAGE
    })?;
    let Some(auth) = cluster.auth.as_mut() else {
        eprintln!("onepipe {who}: {}: {NO_AUTH_SECTION}", path.display());
        return Err(EXIT_USAGE);
    };
    if let Some(dir) = pki {
        auth.pki = Some(dir.clone());
    }
    Ok(cluster)
}

pub fn controller(args: &ControllerArgs) -> i32 {
    let cluster = match load(&args.config, "controller", args.pki.as_ref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let ha = match ha_options(args) {
        Ok(ha) => ha,
        Err(code) => return code,
    };
    let (stop, _orders) = supervise::install(args.supervised);
    let listen = args.listen.unwrap_or(cluster.controller);
    let security = match ControllerSecurity::load(&cluster) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("onepipe controller: {}: {e}", args.config.display());
            return EXIT_USAGE;
        }
    };
    let controller = match Controller::start_secured(cluster, listen, ha.clone(), security) {
        Ok(c) => c,
        Err(e) => {
            error!("cannot listen on {listen}: {e}");
            return super::EXIT_RUNTIME;
        }
    };
    let board: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let server = {
        let board = board.clone();
        let source = Box::new(move || board.lock().unwrap_or_else(|e| e.into_inner()).clone());
        match args.metrics.0.map(|bind| Server::start(bind, source)) {
            None => None,
            Some(Ok(s)) => Some(s),
            Some(Err(e)) => {
                error!("--metrics: cannot listen: {e}");
                controller.stop();
                return super::EXIT_RUNTIME;
            }
        }
    };
    controller.set_metrics_addr(server.as_ref().map(Server::addr));
    say(&format!(
        "listening {}{}",
        controller.addr(),
        metrics_suffix(server.as_ref())
    ));
    if let Err(why) = controller.failure_handling() {
        say(&format!("event no-failure-handling {why}"));
    }
    if let Err(code) = say_events(&controller, &ha.name, &stop, &board) {
        controller.stop();
        return code;
    }
    say_stats(controller);
    0
}

/// Says leadership and §5.2 rounds as they happen (`up` reads them: if this process is
/// killed later, what it decided is not lost with it) until told to stop; the exit code if
/// the controller was deposed (the caller stops it and exits).
fn say_events(
    controller: &Controller,
    name: &str,
    stop: &AtomicBool,
    board: &Mutex<Vec<Sample>>,
) -> Result<(), i32> {
    let (mut leading, mut detected, mut declared, mut resumed) = (false, 0, 0, 0);
    let mut published = std::time::Instant::now();
    *board.lock().unwrap_or_else(|e| e.into_inner()) = controller_samples(controller);
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        if published.elapsed() >= TELEMETRY_INTERVAL {
            published = std::time::Instant::now();
            *board.lock().unwrap_or_else(|e| e.into_inner()) = controller_samples(controller);
        }
        if let Some(why) = controller.deposed() {
            say(&format!("event deposed {why}"));
            error!(controller = %name, "deposed, exiting: {why}");
            return Err(super::EXIT_RUNTIME);
        }
        if !leading && controller.leading() {
            leading = true;
            say(&format!("event leader {}", name));
        }
        let d = controller.detected();
        if d > detected {
            detected = d;
            say(&format!("event detected {d}"));
        }
        let rounds = controller.failure_rounds();
        for r in rounds.iter().skip(declared) {
            let failed: Vec<String> = r.failed.iter().map(|(p, ts)| format!("{p}:{ts}")).collect();
            say(&format!("event declared {} {}", r.round, failed.join(" ")));
        }
        declared = rounds.len();
        for r in rounds
            .iter()
            .filter(|r| r.resumed_ms.is_some())
            .skip(resumed)
        {
            say(&format!("event resumed {}", r.round));
        }
        resumed = rounds.iter().filter(|r| r.resumed_ms.is_some()).count();
    }
    Ok(())
}

/// ` metrics ADDR` after a daemon's first line, when it serves metrics.
pub(super) fn metrics_suffix(server: Option<&Server>) -> String {
    server.map_or(String::new(), |s| format!(" metrics {}", s.addr()))
}

/// The controller's metrics: its members by state and when each was last heard, the §5.2
/// rounds, and its counters.
fn controller_samples(controller: &Controller) -> Vec<Sample> {
    let (members, malformed) = controller.status();
    let rounds = controller.failure_rounds();
    let resumed = rounds.iter().filter(|r| r.resumed_ms.is_some()).count();
    let (tls_refused, keys) = controller.auth_stats();
    let counters: BTreeMap<String, u64> = [
        ("controller_malformed_lines", malformed),
        ("controller_forwarded", controller.forwarded()),
        ("controller_tls_refused", tls_refused),
        ("key_rotations", keys.rotations),
        ("failure_detected", controller.detected()),
        ("failure_rounds_declared", rounds.len() as u64),
        ("failure_rounds_resumed", resumed as u64),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let mut states: BTreeMap<&str, u64> = BTreeMap::new();
    for m in &members {
        *states.entry(m.state.as_str()).or_default() += 1;
    }
    let mut out = metrics::samples(&TelemetrySnapshot {
        counters,
        ..TelemetrySnapshot::default()
    });
    out.extend(states.into_iter().map(|(state, n)| {
        Sample::gauge(
            "controller_members",
            "Members of the cluster file, by state",
            n as f64,
        )
        .label("state", state)
    }));
    out.extend(members.iter().filter_map(|m| {
        let ms = m.last_seen_ms?;
        Some(
            Sample::gauge(
                "member_last_heard_seconds",
                "Time since the controller last heard from a member",
                ms as f64 / 1e3,
            )
            .label("member", &m.member.to_string()),
        )
    }));
    out.push(Sample::gauge(
        "controller_leading",
        "1 while this controller leads",
        u64::from(controller.leading()) as f64,
    ));
    out
}

/// Stops the controller and says its counters (the `stats` line).
fn say_stats(controller: Controller) {
    let (members, malformed) = controller.status();
    let forwarded = controller.forwarded();
    let (tls_refused, keys) = controller.auth_stats();
    controller.stop();
    let lost = members.iter().filter(|m| m.state == "lost").count();
    say(&format!(
        "stats {}",
        json!({
            "malformed": malformed,
            "forwarded": forwarded,
            "tls_refused": tls_refused,
            "key_rotations": keys.rotations,
            "key_activations": keys.activations,
            "key_install_timeouts": keys.install_timeouts,
            "members": members.len(),
            "lost": lost,
            "cpu_ns": onepipe_runtime::process_cpu_ns(),
        })
    ));
}

/// The election and store `args` ask for: etcd with `--etcd`, else a private in-memory store.
fn ha_options(args: &ControllerArgs) -> Result<HaOptions, i32> {
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| format!("controller-{}", std::process::id()));
    if args.etcd.is_empty() {
        return Ok(HaOptions {
            name,
            ..HaOptions::solo()
        });
    }
    #[cfg(feature = "etcd")]
    {
        let options = etcd_options(args)?;
        match onepipe_runtime::controller::etcd_store(&args.etcd, &args.cluster_key, &options) {
            Ok(store) => Ok(HaOptions {
                store,
                name,
                lease_ttl: Duration::from_nanos(args.lease_ttl),
            }),
            Err(e) => {
                error!("--etcd: {e}");
                Err(super::EXIT_RUNTIME)
            }
        }
    }
    #[cfg(not(feature = "etcd"))]
    {
        eprintln!(
            "onepipe controller: --etcd: this onepipe was built without etcd support; \
             rebuild with `cargo build --features etcd` (needs protoc: apt-get install -y protobuf-compiler)"
        );
        Err(EXIT_USAGE)
    }
}

/// The TLS files and the user `args` name, read (`--etcd-ca`, `--etcd-cert`, `--etcd-key`,
/// `--etcd-user`, `--etcd-password-file`); an error names the flag and the file.
#[cfg(feature = "etcd")]
fn etcd_options(args: &ControllerArgs) -> Result<onepipe_ctrlstore::etcd::EtcdOptions, i32> {
    use onepipe_ctrlstore::etcd::{EtcdOptions, EtcdTls};
    // A file read whole; an error names its flag and the file. `pem`: a marker it must hold.
    let read = |flag: &str, path: &Path, pem: &str| {
        let fail = |why: String| {
            eprintln!("onepipe controller: --{flag} {}: {why}", path.display());
            EXIT_USAGE
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        if !text.contains(pem) {
            return Err(fail(format!(
                "no `{pem}` in it: not a PEM file of that kind"
            )));
        }
        Ok(text)
    };
    // clap asks for all three TLS files or none, and for a user with its password file.
    let tls = match (&args.etcd_ca, &args.etcd_cert, &args.etcd_key) {
        (Some(ca), Some(cert), Some(key)) => Some(EtcdTls {
            ca_pem: read("etcd-ca", ca, "-----BEGIN CERTIFICATE-----")?,
            cert_pem: read("etcd-cert", cert, "-----BEGIN CERTIFICATE-----")?,
            key_pem: read("etcd-key", key, "PRIVATE KEY-----")?,
            domain: None,
        }),
        _ => None,
    };
    let scheme = if tls.is_some() { "http://" } else { "https://" };
    if let Some(url) = args.etcd.iter().find(|u| u.starts_with(scheme)) {
        eprintln!(
            "onepipe controller: --etcd {url}: {}",
            if tls.is_some() {
                "with --etcd-ca, etcd is reached over TLS: give https:// endpoints"
            } else {
                "an https:// endpoint needs --etcd-ca, --etcd-cert and --etcd-key"
            }
        );
        return Err(EXIT_USAGE);
    }
    let user = match (&args.etcd_user, &args.etcd_password_file) {
        (Some(name), Some(file)) => {
            let text = read("etcd-password-file", file, "")?;
            let password = text.lines().next().unwrap_or("").to_owned();
            if password.is_empty() {
                eprintln!(
                    "onepipe controller: --etcd-password-file {}: its first line, the \
                     password, is empty",
                    file.display()
                );
                return Err(EXIT_USAGE);
            }
            Some((name.clone(), password))
        }
        _ => None,
    };
    Ok(EtcdOptions { tls, user })
}

pub fn agg(args: &AggArgs) -> i32 {
    let cluster = match load(&args.config, "agg", args.pki.as_ref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if cluster.aggregator(&args.id).is_none() {
        let names: Vec<_> = cluster
            .aggregators
            .iter()
            .map(|a| a.name.as_str())
            .collect();
        eprintln!(
            "onepipe agg: --id: no aggregator '{}' in {} (it has {names:?})",
            args.id,
            args.config.display()
        );
        return EXIT_USAGE;
    }
    let (stop, orders) = supervise::install(args.supervised);
    let faults = Arc::new(AggregatorFaults::default());
    if let Some(orders) = orders {
        // `onepipe up --blackhole` writes `blackhole A B` here.
        if let Err(e) = follow_orders(orders, faults.clone()) {
            error!("cannot start the orders thread: {e}");
            return super::EXIT_RUNTIME;
        }
    }
    let controllers = if args.controller.is_empty() {
        vec![cluster.controller]
    } else {
        args.controller.clone()
    };
    let cfg = DriverConfig {
        spin_ns: 0,
        ..DriverConfig::default()
    };
    let tls = match member_credentials(&cluster, &args.id) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("onepipe agg: {}: {e}", args.config.display());
            return EXIT_USAGE;
        }
    };
    let (telemetry, server) = match serve_telemetry(args.metrics.0) {
        Ok(t) => t,
        Err(e) => {
            error!("--metrics: cannot listen: {e}");
            return super::EXIT_RUNTIME;
        }
    };
    let result = run_aggregator(
        &controllers,
        &args.id,
        &cfg,
        tls.as_ref(),
        &stop,
        &faults,
        &mut |addr| {
            say(&format!("ready {addr}{}", metrics_suffix(server.as_ref())));
        },
        &telemetry,
    );
    match result {
        Ok(report) => {
            let mut counters = report.counters();
            counters.insert("cpu_ns".into(), onepipe_runtime::process_cpu_ns());
            say(&format!(
                "stats {}",
                json!({ "name": report.name, "addr": report.addr.to_string(), "counters": counters })
            ));
            0
        }
        // Stopped before the cluster was ready is a normal end too.
        Err(onepipe_runtime::JoinError::Timeout) if stop.load(Ordering::SeqCst) => 0,
        Err(e) => {
            error!(aggregator = %args.id, "{e}");
            super::EXIT_RUNTIME
        }
    }
}

/// A daemon's metrics: the hand-over point its loop publishes into, and the endpoint serving
/// them (`None` with `--metrics off`).
pub(super) type NodeMetrics = (Arc<Telemetry>, Option<Server>);

/// The hand-over point for a daemon's metrics, and the endpoint serving them on `bind` (none
/// when `None`).
pub(super) fn serve_telemetry(bind: Option<SocketAddr>) -> std::io::Result<NodeMetrics> {
    let Some(bind) = bind else {
        return Ok((Arc::new(Telemetry::new(None)), None));
    };
    // Bound first: the address goes into the telemetry the daemon reports to the controller.
    let listener = std::net::TcpListener::bind(bind)?;
    let telemetry = Arc::new(Telemetry::new(Some(listener.local_addr()?)));
    let t = telemetry.clone();
    let server = Server::on(listener, Box::new(move || metrics::samples(&t.latest())))?;
    Ok((telemetry, Some(server)))
}

/// Starts the thread that reads `up`'s orders (`blackhole A B`, `cut A`) and adds each
/// fault to `faults`.
fn follow_orders(
    orders: Receiver<String>,
    faults: Arc<AggregatorFaults>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("orders".into())
        .spawn(move || {
            for line in orders {
                let words: Vec<&str> = line.split_whitespace().collect();
                // `up` also says start, drain and stop to every child: not for us.
                let fault = match words[..] {
                    ["blackhole", a, b] => match (a.parse(), b.parse()) {
                        (Ok(a), Ok(b)) => Some(Fault::Blackhole {
                            from: ProcId(a),
                            to: ProcId(b),
                        }),
                        _ => None,
                    },
                    ["cut", a] => a.parse().ok().map(|a| Fault::Cut { from: ProcId(a) }),
                    _ => continue,
                };
                match fault {
                    Some(f) => faults.add(f),
                    None => warn!("bad order: {line}"),
                }
            }
        })
}

/// A member's TLS identity from the cluster's key directory (`None` without auth).
fn member_credentials(cluster: &Cluster, name: &str) -> Result<Option<Credentials>, String> {
    let Some(auth) = cluster.auth.as_ref().filter(|a| a.mode.seals()) else {
        return Ok(None);
    };
    let dir = auth.pki.as_ref().ok_or(
        "auth is on but [auth] names no pki directory: `onepipe topology --pki DIR` writes one",
    )?;
    Credentials::load(dir, name).map(Some)
}

/// Writes a CA, every member's certificate and the cluster secret into `dir`.
pub(super) fn write_pki(dir: &Path, cluster: &Cluster) -> Result<(), String> {
    let pki = Pki::generate()?;
    let mut names: Vec<String> = [CONTROLLER, OPERATOR, ANY_PROCESS]
        .iter()
        .map(|s| s.to_string())
        .collect();
    names.extend(cluster.aggregators.iter().map(|a| a.name.clone()));
    names.extend(cluster.processes.iter().map(|p| format!("p{}", p.id)));
    pki.write_dir(dir, &names)?;
    let secret = ClusterSecret::generate().map_err(|e| e.to_string())?;
    secret
        .save(&dir.join("secret"))
        .map_err(|e| format!("{}: {e}", dir.join("secret").display()))
}

pub fn topology(args: &TopologyArgs) -> i32 {
    let layout = args.layout.local(args.controller);
    match Cluster::generate(&layout) {
        Ok(mut c) => {
            c.beacon_interval_ns = args.beacon_interval;
            c.aggregator_phase_ns = c.aggregator_phase_ns.min(args.beacon_interval / 5);
            if let Err(e) = c.validate() {
                eprintln!("onepipe topology: {e}");
                return EXIT_USAGE;
            }
            if let Some(dir) = &args.pki {
                if let Err(e) = write_pki(dir, &c) {
                    eprintln!("onepipe topology: --pki: {e}");
                    return super::EXIT_RUNTIME;
                }
                c.auth = Some(AuthConfig::on(Some(dir.clone())));
            } else if args.no_auth {
                c.auth = Some(AuthConfig::off());
            }
            print!("{}", c.to_toml());
            0
        }
        Err(e) => {
            eprintln!("onepipe topology: --{}: {}", e.field, e.message);
            EXIT_USAGE
        }
    }
}
