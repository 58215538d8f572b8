//! The checks of `onepipe up`'s flags, made before anything starts (a refused flag leaves
//! nothing behind), and what they describe: the cluster, its protection and its etcd.

use super::super::{KillTarget, Service, UpArgs, EXIT_RUNTIME};
use crate::cli::EXIT_USAGE;
use onepipe_runtime::clock::monotonic_ns;
use onepipe_runtime::cluster::{format_duration, AuthConfig, Cluster};

/// The flags that need no cluster: the workload's, `--app`'s, and `--unordered` with its
/// service; the exit code if one is refused (said on standard error).
pub(super) fn check_args(args: &UpArgs) -> Result<(), i32> {
    if let Err(e) = args.work.check() {
        eprintln!("onepipe up: {e}");
        return Err(EXIT_USAGE);
    }
    if let Err(e) = check_app(args) {
        eprintln!("onepipe up: {e}");
        return Err(EXIT_USAGE);
    }
    if args.unordered && args.work.service == Service::Reliable {
        eprintln!("onepipe up: --unordered runs best effort only (the baseline has no reliable service); drop --service reliable");
        return Err(EXIT_USAGE);
    }
    if let Err(e) = check_protocol(args) {
        eprintln!("onepipe up: {e}");
        return Err(EXIT_USAGE);
    }
    Ok(())
}

/// `--protocol plato|plato-fixed|toto|allack`: its flags, and what it runs with (best effort,
/// the synthetic all-to-all workload, no injected faults but killed processes for ToTo and
/// all-ack: PLATO has no failure handling, and ToTo's §5 has no joins).
fn check_protocol(args: &UpArgs) -> Result<(), String> {
    let p = &args.protocol;
    p.check()?;
    if !p.baseline() {
        return Ok(());
    }
    p.check_phi(args.layout.hosts * args.layout.procs_per_host)?;
    let flag = p.protocol.name();
    let refused = [
        (args.work.service == Service::Reliable, "--service reliable"),
        (args.unordered, "--unordered"),
        (args.app.app.is_some(), "--app"),
        (args.work.optimistic_delta > 0, "--optimistic-delta"),
        (
            args.work.workload != super::super::Workload::AllToAll,
            "--workload",
        ),
        (!args.kill.is_empty() && !p.toto(), "--kill"),
        (
            args.kill
                .iter()
                .any(|k| !matches!(k.target, KillTarget::Proc(_)))
                || args.kill.iter().any(|k| k.at_ns.is_none()),
            "--kill other than proc:N@TIME",
        ),
        (!args.restart.is_empty(), "--restart"),
        (!args.pause.is_empty(), "--pause"),
        (!args.cut.is_empty(), "--cut"),
        (!args.blackhole.is_empty(), "--blackhole"),
    ];
    let why = match p.toto() {
        true => "ToTo and all-ack run best-effort all-to-all broadcasts; a killed process is agreed crashed (§5), but nobody joins, so a paused or restarted one could not come back",
        false => "PLATO runs best-effort all-to-all broadcasts and has no failure handling; --plato-delta is its Δ",
    };
    match refused.iter().find(|r| r.0) {
        Some((_, what)) => Err(format!("--protocol {flag}: not with {what} ({why})")),
        None => Ok(()),
    }
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
pub(super) fn paxos_live(args: &UpArgs) -> bool {
    args.app.app == Some(crate::sim_app::AppName::Replkv)
        && args.app.system == crate::sim_app::System::Paxos
}

/// With `--etcd`: the URL and this run's key, and the private etcd if `up` started one.
#[allow(clippy::type_complexity)]
pub(super) fn start_etcd(
    args: &UpArgs,
    dir: &std::path::Path,
) -> Result<(Option<(String, String)>, Option<super::super::etcd::Etcd>), (i32, String)> {
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
    let etcd =
        super::super::etcd::Etcd::start(dir.join("etcd"), key).map_err(|e| (EXIT_RUNTIME, e))?;
    println!(
        "onepipe up: etcd at {} (private, removed at exit; TLS with client certificates, user {})",
        etcd.url,
        super::super::etcd::USER
    );
    Ok((Some((etcd.url.clone(), key.into())), Some(etcd)))
}

/// Every `--kill` names a member of the cluster and falls within the sending time.
pub(super) fn check_kills(args: &UpArgs, cluster: &Cluster) -> Result<(), String> {
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
pub(super) fn check_restarts(args: &UpArgs, cluster: &Cluster) -> Result<(), String> {
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
pub(super) fn check_blackholes(args: &UpArgs, cluster: &Cluster) -> Result<(), String> {
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
pub(super) fn protect(
    args: &UpArgs,
    cluster: &mut Cluster,
    dir: &std::path::Path,
) -> Result<(), String> {
    if !args.auth.seals() {
        cluster.auth = Some(AuthConfig::off());
        return Ok(());
    }
    let pki = dir.join("pki");
    super::super::daemons::write_pki(&pki, cluster)?;
    let mut auth = AuthConfig::on(Some(pki));
    auth.mode = args.auth;
    if let Some(every) = args.rotate_keys_every {
        auth.rotate_every_ns = every;
    }
    cluster.auth = Some(auth);
    Ok(())
}

pub(super) fn cluster(args: &UpArgs) -> Result<Cluster, String> {
    let layout = args
        .layout
        .local(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let mut c = Cluster::generate(&layout).map_err(|e| format!("--{}: {}", e.field, e.message))?;
    c.beacon_interval_ns = args.beacon_interval;
    c.fast_beacon_interval_ns = args.fast_beacon_interval;
    c.aggregator_phase_ns = args.aggregator_phase.unwrap_or(args.beacon_interval / 5);
    c.aggregator_mode = args.aggregator_mode;
    c.ordered = !args.unordered && !paxos_live(args) && !args.protocol.baseline();
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
