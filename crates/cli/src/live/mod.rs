//! The live cluster's subcommands: `onepipe up` (a whole local cluster in one command),
//! `onepipe controller`, `onepipe agg`, `onepipe node` (the daemons it starts, each with a
//! `GET /metrics` endpoint), `onepipe status` (a running cluster in one table) and `onepipe
//! topology` (a cluster file). The protocol, transport and daemons' cores live in
//! `onepipe-runtime`; this module is their command lines, the workload, and the orchestration.

mod app_node;
pub mod baseline;
mod daemons;
pub(crate) mod etcd;
mod metrics;
mod node;
mod records;
mod status;
mod supervise;
mod up;

use clap::{Args, ValueEnum};
use onepipe_runtime::cluster::parse_duration_ns;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Exit code when a process of the cluster failed or the run missed its deadline.
pub const EXIT_RUNTIME: i32 = 3;
/// Exit code after Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: i32 = 130;

fn duration(s: &str) -> Result<u64, String> {
    parse_duration_ns(s)
}

/// `--metrics`: where a daemon serves `GET /metrics`, or `None` (`off`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsAddr(pub Option<SocketAddr>);

fn metrics_addr(s: &str) -> Result<MetricsAddr, String> {
    metrics::metrics_flag(s).map(MetricsAddr)
}

/// `--datagram-len-max`: bytes, or `None` for the route MTU's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatagramLen(pub Option<usize>);

fn datagram_len(s: &str) -> Result<DatagramLen, String> {
    if s == "auto" {
        return Ok(DatagramLen(None));
    }
    s.parse()
        .map(|n| DatagramLen(Some(n)))
        .map_err(|_| format!("'{s}': expected auto or a number of bytes"))
}

/// Traffic pattern of a live workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// Every process broadcasts to every process (itself included).
    AllToAll,
    /// Scatterings to --scatter-k distinct random processes.
    Scatter,
    /// Process p sends to process (p + n/2) mod n.
    OneToOne,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::AllToAll => "all-to-all",
            Workload::Scatter => "scatter",
            Workload::OneToOne => "one-to-one",
        }
    }
}

/// Delivery service of a live workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Service {
    /// Best effort (§4): losses reported to the sender, never retransmitted.
    Be,
    /// Reliable (§5.1): retransmission and the commit barrier.
    Reliable,
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::Be => "be",
            Service::Reliable => "reliable",
        }
    }
}

/// The workload flags shared by `up` and `node`.
#[derive(Args, Clone, Debug)]
pub struct WorkloadArgs {
    /// Traffic pattern.
    #[arg(long, value_enum, default_value = "all-to-all")]
    pub workload: Workload,
    /// Delivery service (Table 1: unreliable or reliable send).
    #[arg(long, value_enum, default_value = "be")]
    pub service: Service,
    /// Message size in bytes (at least 16: the scattering id and send time).
    #[arg(long, default_value_t = 64)]
    pub msg_size: usize,
    /// Sends per second per process (a broadcast or scattering counts as one), evenly paced;
    /// a rate above what the machine sustains runs at saturation.
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// How long processes send.
    #[arg(long, default_value = "3s", value_parser = duration)]
    pub duration: u64,
    /// Destinations per scattering (scatter workload).
    #[arg(long, default_value_t = 4)]
    pub scatter_k: u32,
    /// Seed of the scatter workload's destination choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Optimistic delivery (PLATO's hooks on 1Pipe, docs/PLATO.md; both services):
    /// a message is also handed over on arrival when it came more than this Δ after the
    /// previous one, revoked if the barrier's order contradicts it, confirmed when the barrier
    /// passes it. Every hook is recorded and checked (0: off).
    #[arg(long, default_value = "0ns", value_parser = duration)]
    pub optimistic_delta: u64,
    /// With --optimistic-delta: adapt Δ (PLATO §5).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub optimistic_adaptive: bool,
}

impl WorkloadArgs {
    /// Checks the flags; the message names the flag.
    pub fn check(&self) -> Result<(), String> {
        if self.msg_size < records::PAYLOAD_HEADER_LEN {
            return Err(format!(
                "--msg-size: must be at least {} bytes (the scattering id and send time)",
                records::PAYLOAD_HEADER_LEN
            ));
        }
        if self.msg_size > 1 << 20 {
            return Err("--msg-size: at most 1 MiB".into());
        }
        if !(self.rate > 0.0 && self.rate.is_finite()) {
            return Err("--rate: must be a positive number of sends per second".into());
        }
        if self.duration == 0 {
            return Err("--duration: must be positive".into());
        }
        if self.scatter_k == 0 {
            return Err("--scatter-k: must be at least 1".into());
        }
        Ok(())
    }
}

/// The shape of a generated local cluster (`onepipe up`, `onepipe topology`).
#[derive(Args, Debug)]
pub struct LayoutArgs {
    /// Hosts (each with --procs-per-host endpoint processes).
    #[arg(long, default_value_t = 4)]
    pub hosts: u32,
    /// Endpoint processes per host.
    #[arg(long, default_value_t = 1)]
    pub procs_per_host: u32,
    /// Aggregator layers. 1: every process under tor-0; 2: racks of --rack-size hosts under
    /// tor-N, joined by spine-0; 3: edge, aggregation and core, racks grouped --pod-racks to
    /// a pod under agg-N and the pods joined by core-0 (with --hosts 16 --rack-size 2, a k = 4
    /// fat tree's pods, each with one aggregation switch: aggregators form a tree).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=3))]
    pub layers: u8,
    /// Hosts per rack (two and three layers).
    #[arg(long, default_value_t = 2)]
    pub rack_size: u32,
    /// Racks per pod (three layers).
    #[arg(long, default_value_t = 2)]
    pub pod_racks: u32,
}

impl LayoutArgs {
    /// The layout, with the controller at `controller`.
    pub fn local(&self, controller: SocketAddr) -> onepipe_runtime::cluster::LocalLayout {
        onepipe_runtime::cluster::LocalLayout {
            hosts: self.hosts,
            procs_per_host: self.procs_per_host,
            layers: self.layers,
            rack_size: self.rack_size,
            pod_racks: self.pod_racks,
            controller,
            start_with: None,
        }
    }

    /// How the aggregators are laid out, in words.
    pub fn describe(&self) -> String {
        match self.layers {
            1 => "one rack under tor-0".to_string(),
            2 => format!("racks of {} under tor-N joined by spine-0", self.rack_size),
            _ => format!(
                "racks of {} under tor-N, {} to a pod under agg-N, joined by core-0",
                self.rack_size, self.pod_racks
            ),
        }
    }
}

/// `onepipe up`: a local cluster in one command.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// The cluster's shape.
    #[command(flatten)]
    pub layout: LayoutArgs,
    /// Run the identical transport with ordering switched off (the baseline): no beacons, no
    /// reordering, delivery on arrival. Best effort only.
    #[arg(long)]
    pub unordered: bool,
    /// The total-order protocol.
    #[command(flatten)]
    pub protocol: baseline::ProtocolArgs,
    /// Run the checkers on the unordered baseline too (ordered runs are always checked). The
    /// baseline delivers on arrival and reports no losses, so under load they report order,
    /// agreement and barrier violations and unreported losses, and the run exits 1: what the
    /// checkers catch when ordering is missing.
    #[arg(long)]
    pub check: bool,
    /// Beacon interval (§4.2).
    #[arg(long, default_value = "1ms", value_parser = duration)]
    pub beacon_interval: u64,
    /// While someone waits for the barrier (a host sent, or holds messages for reordering),
    /// every host also beacons at this shorter interval, for one beacon interval after the
    /// need was last announced (chip mode; `0s`: never, the paper's fixed interval).
    #[arg(long, default_value = "200us", value_parser = duration)]
    pub fast_beacon_interval: u64,
    /// How much later each layer of aggregators beacons within an interval [default: a fifth
    /// of the interval].
    #[arg(long, value_parser = duration)]
    pub aggregator_phase: Option<u64>,
    /// How aggregators aggregate barriers: `chip` (§6.2.1: barriers ride on data, a wave of
    /// beacons is forwarded as it arrives) or `host` (§6.2.3 host representatives: beacons
    /// only, on a timer phased by depth).
    #[arg(long, default_value = "chip")]
    pub aggregator_mode: onepipe_runtime::roles::AggregatorMode,
    /// UDP payload bytes per datagram: `auto` (the route MTU's: 65,507 on loopback) or
    /// 1472..=65507 (1,472 is an Ethernet LAN's: with GSO, many such datagrams per send).
    #[arg(long, default_value = "auto", value_parser = datagram_len)]
    pub datagram_len_max: DatagramLen,
    /// Never send several datagrams per system call (UDP GSO), even where the kernel can.
    #[arg(long)]
    pub no_gso: bool,
    /// Never ask the kernel to hand over several datagrams as one buffer (UDP GRO).
    #[arg(long)]
    pub no_gro: bool,
    /// The workload.
    #[command(flatten)]
    pub work: WorkloadArgs,
    /// An application instead of the synthetic workload: `--app kv` runs the transactional
    /// store on every process (docs/APPS.md), with the application's flags.
    #[command(flatten)]
    pub app: crate::sim_app::AppArgs,
    /// With --app: idle turns an application loop takes, yielding the CPU between them, before
    /// it sleeps until the endpoint has something for it (0: it sleeps at once). Spinning
    /// answers a reply sooner and costs CPU while idle (Aeron's yielding idle strategy); on a
    /// machine with fewer cores than processes it takes CPU from the others.
    #[arg(long, default_value_t = 0)]
    pub app_spin: u32,
    /// Longest wait, after sending stops, for everything to be delivered.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub drain: u64,
    /// Hard deadline for the whole run [default: duration + drain + 60s]; past it everything
    /// is killed.
    #[arg(long, value_parser = duration)]
    pub deadline: Option<u64>,
    /// Write the report as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Keep the run's directory (cluster file, per-process records) and print where it is.
    #[arg(long)]
    pub keep: bool,
    /// Kill a member with SIGKILL this long after sending starts (repeatable): `proc:N@2s`
    /// (endpoint process N), `agg:NAME@3s` (aggregator NAME, e.g. tor-0), `controller@4s`.
    /// The controller runs the §5.2 failure procedure: it declares the processes cut off
    /// (a dead process, or a dead aggregator's single-homed rack) failed at the last commit
    /// barrier their neighbours saw, and the others go on delivering. The checkers run over
    /// the survivors with the failed processes declared (restricted failure atomicity); the
    /// summary reports the longest delivery stall after the first kill. `controller` kills
    /// the leading controller: without --etcd there is no standby, and later failures cannot
    /// be repaired; with --etcd the standby takes over. `WHAT@detected` fires as soon as the
    /// leading controller has logged a §5.2 Detect report (the middle of a failure round:
    /// after detection, before Resume).
    #[arg(long = "kill", value_name = "WHAT@TIME", value_parser = parse_kill)]
    pub kill: Vec<Kill>,
    /// Start a killed endpoint again this long after sending starts, with its memory lost
    /// (repeatable): `proc:N@4s` after a `--kill proc:N@…` before it. It joins as pN, is
    /// declared failed if it was not yet, recovers, and rejoins as a new process (§5.2 "joins
    /// 1Pipe as a new process"), which the others then send to; it sends until the end of
    /// --duration. The report names its new id (`rejoined`) and what it delivered.
    #[arg(long = "restart", value_name = "proc:N@TIME", value_parser = parse_restart)]
    pub restart: Vec<Restart>,
    /// Run two controllers, a leader and a standby, over etcd (needs a build with
    /// `--features etcd`): the §5.2 procedure's log and the election live in etcd, and when
    /// the leader dies the standby replays the log and finishes any open round. Without a
    /// URL, a private etcd is started on loopback (Debian's `etcd`: apt-get install -y
    /// etcd-server) with a temporary data directory, removed at exit; with one, that etcd is
    /// used (under a key of this run's own).
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "")]
    pub etcd: Option<String>,
    /// Test fault for §5.2 controller forwarding (the simulator's `--blackhole`): from TIME
    /// after sending starts, process A's first-hop aggregator drops A's data, ACKs and NAKs to
    /// process B, passing their barriers on as beacons (no link falls silent, nothing is
    /// declared failed). A's reliable messages to B then go by the controller after
    /// --forward-after retransmissions. Repeatable.
    #[arg(long, value_name = "A>B@TIME", value_parser = parse_blackhole)]
    pub blackhole: Vec<Blackhole>,
    /// Test fault (the simulator's `--cut host-N`, one direction): from TIME after sending
    /// starts, everything process N sends is dropped at its first-hop aggregator; what is sent
    /// to it still arrives. Its input falls silent there: after the link timeout the controller
    /// declares it failed and tells it (it freezes). Meanwhile its reliable messages time out
    /// and go by the controller (--forward-after). Repeatable.
    #[arg(long, value_name = "proc:N@TIME", value_parser = parse_cut)]
    pub cut: Vec<Restart>,
    /// An operator's bad day: pause endpoint N from T1 to T2 after sending starts (SIGSTOP,
    /// then SIGCONT), e.g. `--pause proc:2@2s..6s`. Paused past the link timeout it is
    /// declared failed (§5.2) and the others go on; continued, it learns so, recovers and
    /// rejoins as a new process. Every record names the process it was made as, so what it
    /// delivered before and after is checked under the right id. Repeatable.
    #[arg(long, value_name = "proc:N@T1..T2", value_parser = parse_pause)]
    pub pause: Vec<Pause>,
    /// §5.2 controller forwarding: a reliable message unacknowledged after this many
    /// retransmissions also goes by the controller (the cluster file's `forward_after`) [default:
    /// 1 with --blackhole or --cut, else 0: off].
    #[arg(long, value_name = "N")]
    pub forward_after: Option<u32>,
    /// How the run is protected (docs/SECURITY.md): `on` (every datagram authenticated, the
    /// control channel on TLS with certificates made for this run), `encrypt` (datagram
    /// payloads encrypted too) or `off` (nothing protected: the side-by-side cost figure).
    #[arg(long, default_value = "on", value_parser = auth_mode)]
    pub auth: onepipe_runtime::auth::AuthMode,
    /// A new key epoch this often (every member installs it, then the controller switches
    /// everyone; nothing stalls) [default: the cluster file's 1h].
    #[arg(long, value_parser = duration)]
    pub rotate_keys_every: Option<u64>,
    /// Run the cluster this file describes (its addresses, settings and keys; docs/DEPLOY.md)
    /// instead of writing a loopback one: the flags that shape a generated cluster
    /// (`--layers`, `--beacon-interval`, `--auth`, `--datagram-len-max`, …) do not apply, and
    /// `--hosts` × `--procs-per-host` must be its number of processes.
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,
    /// Start every member through this command prefix (split at spaces; `{member}` becomes
    /// `controller`, the aggregator's name or `pN`, `{host}` becomes `hN` for a process on
    /// host N and the member's name otherwise), e.g. `--spawn 'ip netns exec ns-{host}'`
    /// (scripts/netns-cluster.sh). The prefix must keep the member's standard input and
    /// output connected to `up` (`ip netns exec` execs it; `ssh HOST` forwards them), and
    /// the run directory must be at the same path for every member.
    #[arg(long, value_name = "PREFIX")]
    pub spawn: Option<String>,
}

fn auth_mode(s: &str) -> Result<onepipe_runtime::auth::AuthMode, String> {
    s.parse()
}

/// `--blackhole A>B@TIME`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blackhole {
    /// The sending process.
    pub from: u32,
    /// The receiving process.
    pub to: u32,
    /// When, after sending starts (ns).
    pub at_ns: u64,
}

impl std::fmt::Display for Blackhole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = onepipe_runtime::cluster::format_duration(self.at_ns);
        write!(f, "{}>{}@{at}", self.from, self.to)
    }
}

fn parse_blackhole(s: &str) -> Result<Blackhole, String> {
    let (pair, at) = s
        .split_once('@')
        .ok_or("expected A>B@TIME, e.g. 1>2@1s (process numbers)")?;
    let (a, b) = pair
        .split_once('>')
        .ok_or("expected A>B@TIME, e.g. 1>2@1s (process numbers)")?;
    let num = |x: &str| {
        x.parse::<u32>()
            .map_err(|_| format!("'{x}' is not a process number"))
    };
    let (from, to) = (num(a)?, num(b)?);
    if from == to {
        return Err(format!("{from}>{to}: a process does not black-hole itself"));
    }
    Ok(Blackhole {
        from,
        to,
        at_ns: parse_duration_ns(at)?,
    })
}

/// `--restart proc:N@TIME` (and `--cut proc:N@TIME`: endpoint N's uplink from TIME on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restart {
    /// The endpoint process.
    pub proc: u32,
    /// When, after sending starts (ns).
    pub at_ns: u64,
}

impl std::fmt::Display for Restart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = onepipe_runtime::cluster::format_duration(self.at_ns);
        write!(f, "proc:{}@{at}", self.proc)
    }
}

/// `--pause proc:N@T1..T2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pause {
    /// The endpoint process.
    pub proc: u32,
    /// When it stops and when it continues, after sending starts (ns).
    pub from_ns: u64,
    /// See `from_ns`.
    pub to_ns: u64,
}

impl std::fmt::Display for Pause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use onepipe_runtime::cluster::format_duration as d;
        write!(
            f,
            "proc:{}@{}..{}",
            self.proc,
            d(self.from_ns),
            d(self.to_ns)
        )
    }
}

fn parse_pause(s: &str) -> Result<Pause, String> {
    let bad = || format!("'{s}': expected proc:N@T1..T2, e.g. proc:2@2s..6s");
    let (what, at) = s.split_once('@').ok_or_else(bad)?;
    let n = what.strip_prefix("proc:").ok_or_else(bad)?;
    let (from, to) = at.split_once("..").ok_or_else(bad)?;
    let pause = Pause {
        proc: n
            .parse()
            .map_err(|_| format!("'{n}' is not a process number"))?,
        from_ns: parse_duration_ns(from)?,
        to_ns: parse_duration_ns(to)?,
    };
    if pause.to_ns <= pause.from_ns {
        return Err(format!("'{s}': the pause must end after it starts"));
    }
    Ok(pause)
}

fn parse_cut(s: &str) -> Result<Restart, String> {
    parse_restart(s).map_err(|e| e.replace("only endpoints restart", "only an endpoint's uplink"))
}

fn parse_restart(s: &str) -> Result<Restart, String> {
    let (what, at) = s
        .split_once('@')
        .ok_or("expected proc:N@TIME, e.g. proc:3@4s")?;
    let n = what.strip_prefix("proc:").ok_or(format!(
        "'{what}': expected proc:N (only endpoints restart)"
    ))?;
    Ok(Restart {
        proc: n
            .parse()
            .map_err(|_| format!("'{n}' is not a process number"))?,
        at_ns: parse_duration_ns(at)?,
    })
}

/// A member `onepipe up --kill` kills.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KillTarget {
    /// Endpoint process N.
    Proc(u32),
    /// The aggregator of that name.
    Agg(String),
    /// The controller.
    Controller,
}

/// `--kill WHAT@TIME`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kill {
    /// Whom.
    pub target: KillTarget,
    /// When, after sending starts (ns); `None`: when the leading controller first logs a
    /// Detect report (`@detected`).
    pub at_ns: Option<u64>,
}

impl std::fmt::Display for Kill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = self
            .at_ns
            .map_or("detected".into(), onepipe_runtime::cluster::format_duration);
        match &self.target {
            KillTarget::Proc(p) => write!(f, "proc:{p}@{at}"),
            KillTarget::Agg(name) => write!(f, "agg:{name}@{at}"),
            KillTarget::Controller => write!(f, "controller@{at}"),
        }
    }
}

fn parse_kill(s: &str) -> Result<Kill, String> {
    let (what, at) = s
        .split_once('@')
        .ok_or("expected WHAT@TIME: proc:N@2s, agg:NAME@3s or controller@4s")?;
    let at_ns = match at {
        "detected" => None,
        at => Some(parse_duration_ns(at)?),
    };
    let target = match what.split_once(':') {
        Some(("proc", n)) => KillTarget::Proc(
            n.parse()
                .map_err(|_| format!("'{n}' is not a process number"))?,
        ),
        Some(("agg", name)) if !name.is_empty() => KillTarget::Agg(name.to_string()),
        None if what == "controller" => KillTarget::Controller,
        _ => return Err(format!("'{what}': expected proc:N, agg:NAME or controller")),
    };
    Ok(Kill { target, at_ns })
}

/// `onepipe controller`.
#[derive(Args, Debug)]
pub struct ControllerArgs {
    /// The cluster file.
    #[arg(long)]
    pub config: PathBuf,
    /// Listen here instead of the file's `controller` address (port 0: any free port).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Started by `onepipe up`: exit when standard input closes or the parent dies.
    #[arg(long, hide = true)]
    pub supervised: bool,
    /// Log only warnings and errors on standard error (no joins and departures); `RUST_LOG`,
    /// when set, decides instead.
    #[arg(long)]
    pub quiet: bool,
    /// Keep the §5.2 procedure's log and the leader election in etcd at these endpoints
    /// (`http://127.0.0.1:2379`, comma-separated; needs a build with `--features etcd`). Run
    /// two or more controllers with the same cluster file and key: one leads, the others are
    /// standbys that turn members away (`Standby`) until the leader's lease ends, then one
    /// replays the log and finishes any open round. A deposed leader exits.
    #[arg(long, value_name = "URL[,URL..]", value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// The cluster's name in etcd (keys under /onepipe/NAME/); one per cluster.
    #[arg(long, value_name = "NAME", default_value = "onepipe")]
    pub cluster_key: String,
    /// Reach etcd over TLS (`https://` endpoints), trusting this CA certificate (PEM) for
    /// etcd's; with --etcd-cert and --etcd-key, the client certificate etcd's
    /// `--client-cert-auth` asks for.
    #[arg(long, value_name = "FILE", requires_all = ["etcd", "etcd_cert", "etcd_key"])]
    pub etcd_ca: Option<PathBuf>,
    /// This controller's client certificate for etcd (PEM; with --etcd-ca and --etcd-key).
    #[arg(long, value_name = "FILE", requires_all = ["etcd", "etcd_ca", "etcd_key"])]
    pub etcd_cert: Option<PathBuf>,
    /// The key of --etcd-cert (PEM; with --etcd-ca and --etcd-cert).
    #[arg(long, value_name = "FILE", requires_all = ["etcd", "etcd_ca", "etcd_cert"])]
    pub etcd_key: Option<PathBuf>,
    /// Log in to etcd as this user (an etcd with authentication on; its role must allow
    /// reading and writing /onepipe/NAME/); the password is in --etcd-password-file.
    #[arg(long, value_name = "NAME", requires_all = ["etcd", "etcd_password_file"])]
    pub etcd_user: Option<String>,
    /// The file holding --etcd-user's password (its first line), so the password is never on
    /// a command line.
    #[arg(long, value_name = "FILE", requires_all = ["etcd", "etcd_user"])]
    pub etcd_password_file: Option<PathBuf>,
    /// This controller's name in the election [default: controller-PID].
    #[arg(long)]
    pub name: Option<String>,
    /// The leader's lease: how long a dead leader holds up its standby (etcd rounds it up to
    /// a whole second, at least 1.5 election timeouts).
    #[arg(long, default_value = "2s", value_parser = duration)]
    pub lease_ttl: u64,
    /// The directory of this controller's keys, if not the cluster file's `[auth] pki`:
    /// `ca.crt`, `controller.crt`, `controller.key` and the cluster secret `secret`.
    #[arg(long, value_name = "DIR")]
    pub pki: Option<PathBuf>,
    /// Serve `GET /metrics` (Prometheus text format, docs/LIVE.md "Metrics and status") on
    /// this address (port 0: any free port), or `off`. The address bound is said after the
    /// daemon's first line (`... metrics ADDR`) and to the controller.
    #[arg(long, value_name = "ADDR|off", default_value = "127.0.0.1:0", value_parser = metrics_addr)]
    pub metrics: MetricsAddr,
}

/// `onepipe agg`.
#[derive(Args, Debug)]
pub struct AggArgs {
    /// The cluster file.
    #[arg(long)]
    pub config: PathBuf,
    /// Which aggregator of the file this is.
    #[arg(long)]
    pub id: String,
    /// The directory of this aggregator's keys, if not the cluster file's `[auth] pki`:
    /// `ca.crt`, `ID.crt` and `ID.key`.
    #[arg(long, value_name = "DIR")]
    pub pki: Option<PathBuf>,
    /// The controllers' addresses (a leader and standbys, comma-separated), if not the
    /// file's.
    #[arg(long, value_name = "ADDR[,ADDR..]", value_delimiter = ',')]
    pub controller: Vec<SocketAddr>,
    /// Serve `GET /metrics` (Prometheus text format, docs/LIVE.md "Metrics and status") on
    /// this address (port 0: any free port), or `off`. The address bound is said after the
    /// daemon's first line (`... metrics ADDR`) and to the controller.
    #[arg(long, value_name = "ADDR|off", default_value = "127.0.0.1:0", value_parser = metrics_addr)]
    pub metrics: MetricsAddr,
    /// Started by `onepipe up`: exit when standard input closes or the parent dies.
    #[arg(long, hide = true)]
    pub supervised: bool,
}

/// `onepipe node`.
#[derive(Args, Clone, Debug)]
pub struct NodeArgs {
    /// The controllers' addresses: a leader and its standbys, comma-separated (joins whichever
    /// leads; re-registers with the new leader after a failover).
    #[arg(
        long,
        value_name = "ADDR[,ADDR..]",
        value_delimiter = ',',
        required = true
    )]
    pub controller: Vec<SocketAddr>,
    /// Join as this process id [default: the lowest free one].
    #[arg(long)]
    pub proc: Option<u32>,
    /// The cluster's keys for this process (docs/SECURITY.md): a directory with `ca.crt` and
    /// `pN.crt`/`pN.key` (N the --proc), or `process.crt`/`process.key` (any id). Without it,
    /// the process joins without TLS, which only a cluster with `auth = "off"` accepts.
    #[arg(long, value_name = "DIR")]
    pub pki: Option<PathBuf>,
    /// This process was killed and starts again with its memory lost (`onepipe up
    /// --restart`): it joins as --proc, is declared failed, recovers and rejoins as a new
    /// process (§5.2), then sends until the end of --duration after `start`.
    #[arg(long, requires = "proc")]
    pub restarted: bool,
    /// The workload.
    #[command(flatten)]
    pub work: WorkloadArgs,
    /// The total-order protocol.
    #[command(flatten)]
    pub protocol: baseline::ProtocolArgs,
    /// Longest wait, after sending stops, for everything to be delivered.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub drain: u64,
    /// Write every send, delivery and failure here (binary records), and a summary beside it
    /// (same name, `.json`); with --app, the transactions (same name, `.kv.json`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// An application instead of the synthetic workload (docs/APPS.md).
    #[command(flatten)]
    pub app: crate::sim_app::AppArgs,
    /// With --app: idle turns an application loop takes, yielding the CPU between them, before
    /// it sleeps until the endpoint has something for it (0: it sleeps at once). Spinning
    /// answers a reply sooner and costs CPU while idle (Aeron's yielding idle strategy); on a
    /// machine with fewer cores than processes it takes CPU from the others.
    #[arg(long, default_value_t = 0)]
    pub app_spin: u32,
    /// Serve `GET /metrics` (Prometheus text format, docs/LIVE.md "Metrics and status") on
    /// this address (port 0: any free port), or `off`. The address bound is said after the
    /// daemon's first line (`... metrics ADDR`) and to the controller.
    #[arg(long, value_name = "ADDR|off", default_value = "127.0.0.1:0", value_parser = metrics_addr)]
    pub metrics: MetricsAddr,
    /// Started by `onepipe up`: wait for `start`, `drain` and `stop` on standard input; exit
    /// when it closes or the parent dies.
    #[arg(long, hide = true)]
    pub supervised: bool,
}

/// `onepipe topology`.
#[derive(Args, Debug)]
pub struct TopologyArgs {
    /// The cluster's shape.
    #[command(flatten)]
    pub layout: LayoutArgs,
    /// The controller's address.
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub controller: SocketAddr,
    /// Beacon interval (§4.2).
    #[arg(long, default_value = "1ms", value_parser = duration)]
    pub beacon_interval: u64,
    /// Make the cluster's keys in this directory (created; docs/SECURITY.md): a CA
    /// (`ca.crt`, `ca.key`), a certificate and key for the controller, every aggregator and
    /// every process (`NAME.crt`, `NAME.key`), `process` (any process id) and `operator`
    /// (status only), and the cluster secret (`secret`); the file's `[auth]` section names the
    /// directory as given. Without it the file has no `[auth]` section, which the daemons
    /// refuse until one is written (or `auth = "off"`).
    #[arg(long, value_name = "DIR")]
    pub pki: Option<PathBuf>,
    /// Write `auth = "off"`: nothing protected (when --pki is not given).
    #[arg(long, conflicts_with = "pki")]
    pub no_auth: bool,
}

/// `onepipe up`.
pub fn up(args: &UpArgs) -> i32 {
    up::run(args)
}

/// `onepipe controller`.
pub fn controller(args: &ControllerArgs) -> i32 {
    daemons::controller(args)
}

/// `onepipe agg`.
pub fn agg(args: &AggArgs) -> i32 {
    daemons::agg(args)
}

/// The TLS identity `onepipe node --pki DIR` names: `pN` with --proc N, else `process`.
fn node_credentials(args: &NodeArgs) -> Result<Option<onepipe_runtime::tls::Credentials>, String> {
    let Some(dir) = &args.pki else {
        return Ok(None);
    };
    let name = match args.proc {
        Some(p) => format!("p{p}"),
        None => onepipe_runtime::tls::ANY_PROCESS.to_string(),
    };
    onepipe_runtime::tls::Credentials::load(dir, &name).map(Some)
}

/// `onepipe node`.
pub fn node(args: &NodeArgs) -> i32 {
    let metrics = match daemons::serve_telemetry(args.metrics.0) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("onepipe node: --metrics: {e}");
            return EXIT_RUNTIME;
        }
    };
    if args.app.app.is_some() {
        return app_node::run(args, &metrics);
    }
    node::run(args, &metrics)
}

/// The endpoint's telemetry, when it serves metrics ([`JoinOptions::telemetry`]).
///
/// [`JoinOptions::telemetry`]: onepipe_runtime::endpoint::JoinOptions::telemetry
fn node_telemetry(
    metrics: &daemons::NodeMetrics,
) -> Option<std::sync::Arc<onepipe_runtime::stats::Telemetry>> {
    metrics.1.as_ref().map(|_| metrics.0.clone())
}

/// `onepipe status`.
pub fn status(args: &StatusArgs) -> i32 {
    status::run(args)
}

pub use status::StatusArgs;

/// `onepipe topology`.
pub fn topology(args: &TopologyArgs) -> i32 {
    daemons::topology(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kills_parse_at_a_time_or_at_detection_and_print_back() {
        let k = parse_kill("proc:3@1s").unwrap();
        assert_eq!(k.target, KillTarget::Proc(3));
        assert_eq!(k.at_ns, Some(1_000_000_000));
        let k = parse_kill("controller@detected").unwrap();
        assert_eq!((k.target.clone(), k.at_ns), (KillTarget::Controller, None));
        assert_eq!(k.to_string(), "controller@detected");
        assert_eq!(parse_kill(&k.to_string()).unwrap(), k);
        assert!(parse_kill("controller@soon").is_err());
    }

    #[test]
    fn blackholes_parse_and_print_back_and_errors_say_what_is_wrong() {
        let b = parse_blackhole("1>6@1s").unwrap();
        assert_eq!((b.from, b.to, b.at_ns), (1, 6, 1_000_000_000));
        assert_eq!(parse_blackhole(&b.to_string()).unwrap(), b);
        assert!(parse_blackhole("1>1@1s").unwrap_err().contains("itself"));
        assert!(parse_blackhole("1>x@1s").unwrap_err().contains("'x'"));
        assert!(parse_blackhole("1-2@1s").unwrap_err().contains("A>B@TIME"));
        assert!(parse_blackhole("1>2").unwrap_err().contains("A>B@TIME"));
    }

    #[test]
    fn restarts_name_an_endpoint_and_a_time() {
        let r = parse_restart("proc:3@4s").unwrap();
        assert_eq!((r.proc, r.at_ns), (3, 4_000_000_000));
        assert_eq!(parse_restart(&r.to_string()).unwrap(), r);
        assert!(parse_restart("agg:tor-0@1s")
            .unwrap_err()
            .contains("only endpoints"));
        assert!(parse_restart("proc:x@1s").unwrap_err().contains("'x'"));
        assert!(parse_restart("proc:3").is_err());
    }
}
