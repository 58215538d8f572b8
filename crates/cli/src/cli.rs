//! Argument parsing and the `sim` subcommand.

use clap::{Args, Parser, Subcommand, ValueEnum};
use onepipe_proto::switch::SwitchMode;
use onepipe_sim::config::PacketKind;
use onepipe_sim::queue::QueueKind;
use onepipe_sim::{
    run, Fabric, FaultConfig, NetworkConfig, ProtocolConfig, Report, Service, SimConfig,
    TopologySpec, WorkloadConfig, WorkloadKind,
};
use std::path::PathBuf;

/// Exit code for a run whose checkers found a violation.
pub const EXIT_VIOLATION: i32 = 1;
/// Exit code for bad flags or an impossible configuration.
pub const EXIT_USAGE: i32 = 2;

#[derive(Parser, Debug)]
#[command(
    name = "onepipe",
    version,
    about = "Scalable total-order communication for clusters (1Pipe).",
    long_about = "Scalable total-order communication for clusters: an implementation of 1Pipe \
                  (SIGCOMM 2021). `onepipe sim` runs the protocol in a deterministic simulated \
                  data center and checks total order, causality and barrier safety on every run."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run 1Pipe (best effort, reliable or both) in a deterministic data-center simulation and
    /// check it.
    ///
    /// `--protocol sequencer|sequencer-switch|token|lamport|isis` runs a baseline of the paper's
    /// Fig. 8 on the same network instead (docs/BASELINES.md); `--protocol toto|allack` runs
    /// ToTo or all-ack (docs/TOTO.md).
    ///
    /// Durations take a unit: ns, us (or µs), ms, s — e.g. `--beacon-interval 3us`.
    /// Exit codes: 0 ok, 1 a checker found a violation, 2 bad flags or configuration.
    Sim(Box<SimArgs>),
    /// Run a simulator experiment of docs/BENCHMARKS.md and write its CSV.
    #[command(subcommand)]
    Bench(crate::bench::Bench),
    /// Print an analytic model: `model paxos` gives MultiPaxos's optimal batch size and window
    /// for a bandwidth, latency, replica count and request size (the seed paper's §III).
    #[command(subcommand)]
    Model(crate::model::Model),
    /// Run the fault-injecting swarm: each seed draws a network, workload and faults (loss,
    /// bursts, targeted loss, duplication, reordering, skew, host crashes), checks safety with
    /// every checker and liveness by draining. Exit codes: 0 ok, 1 correctness, 3 liveness,
    /// 4 crash (the first failing seed's); each failure prints its replay command.
    Vopr(crate::vopr::VoprArgs),
    /// Run a local cluster in one command: controller, aggregators and endpoints as separate
    /// processes on 127.0.0.1, a workload, every delivery checked; `--kill` kills members on
    /// purpose to exercise failure handling (§5.2). Exit codes: 0 ok, 1 a checker found a
    /// violation, 2 bad flags, 3 a process failed unexpectedly or the deadline passed, 130
    /// Ctrl-C.
    Up(Box<crate::live::UpArgs>),
    /// Run the controller of a live cluster (registration, process ids, addresses, health, §5.2
    /// failure handling); with --etcd, one of a leader and standbys.
    Controller(crate::live::ControllerArgs),
    /// Run one barrier aggregator of a live cluster (host-representative mode, §6.2.3).
    Agg(crate::live::AggArgs),
    /// Run one workload endpoint of a live cluster (what `up` starts).
    Node(Box<crate::live::NodeArgs>),
    /// Print a cluster file for a local cluster (racks under tor-N, joined by spine-0).
    Topology(crate::live::TopologyArgs),
    /// Show a running cluster: the controller's members, every daemon's metrics (barrier lag,
    /// deliveries, datagrams, drops, failures) in one table; --watch refreshes with rates,
    /// --json prints JSON. Exit code 3 when no controller answers.
    Status(crate::live::StatusArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Topo {
    /// k-ary fat tree (k³/4 hosts); set --k.
    FatTree,
    /// One rack; set --hosts.
    Rack,
    /// Leaves joined by spines; set --hosts, --rack-size, --spines.
    LeafSpine,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FabricArg {
    /// The topology's multi-rooted Clos: each switch half a switch role, data by ECMP.
    Clos,
    /// A tree of the live runtime's aggregators (one role per aggregator, as `onepipe up`
    /// runs them), laid out as `onepipe up --layers` lays out a cluster: --topology rack or
    /// leaf-spine gives the hosts (--hosts) and racks (--rack-size); --layers; chip or host
    /// --switch; one process per host.
    Tree,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Workload {
    /// Every process broadcasts to every process (Fig. 8).
    AllToAll,
    /// Scatterings to --scatter-k random processes.
    Scatter,
    /// Process p sends to process (p + n/2) mod n.
    OneToOne,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    /// Programmable chip: per-packet barrier rewrite (§6.2.1).
    Chip,
    /// Switch CPU: periodic beacons after a processing delay (§6.2.2).
    Cpu,
    /// Host representative: CPU mode plus a switch↔host hop (§6.2.3).
    Host,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Kind {
    /// Data packets.
    Data,
    /// End-to-end ACKs.
    Ack,
    /// NAKs.
    Nak,
    /// Beacons.
    Beacon,
    /// Packets carrying commit barriers: beacons, and data packets in chip mode (§5.1).
    Commit,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Svc {
    /// Best effort (§4): late or lost messages are reported to the sender, not retransmitted.
    Be,
    /// Reliable (§5.1): ACKs, retransmission and the commit barrier; exactly-once,
    /// all-or-nothing scatterings.
    Reliable,
    /// Each scattering picks best effort or reliable at random (seeded).
    Mixed,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Queue {
    /// Monotone radix heap (default, fastest).
    Radix,
    /// Implicit 4-ary heap.
    #[value(name = "4ary")]
    Quaternary,
    /// std BinaryHeap (reference).
    Binary,
}

#[derive(Args, Debug)]
struct SimArgs {
    /// Network topology.
    #[arg(long, value_enum, default_value = "fat-tree")]
    topology: Topo,
    /// Fat-tree arity (even): k³/4 hosts.
    #[arg(long, default_value_t = 4)]
    k: u32,
    /// Hosts (rack and leaf-spine).
    #[arg(long, default_value_t = 8)]
    hosts: u32,
    /// Hosts per leaf (leaf-spine).
    #[arg(long, default_value_t = 4)]
    rack_size: u32,
    /// Spine switches (leaf-spine).
    #[arg(long, default_value_t = 2)]
    spines: u32,
    /// What carries the packets (docs/ARCHITECTURE.md, "Two fabrics").
    #[arg(long, value_enum, default_value = "clos")]
    fabric: FabricArg,
    /// Layers of aggregators with --fabric tree: 1 (one aggregator), 2 (racks under a spine)
    /// or 3 (racks in pods of two under a core).
    #[arg(long, default_value_t = 2)]
    layers: u8,
    /// Processes per host.
    #[arg(long, default_value_t = 1)]
    procs_per_host: u32,
    /// Switch incarnation (§6.2).
    #[arg(long = "switch", value_enum, default_value = "chip")]
    switch_mode: Mode,
    /// Beacon interval (§4.2).
    #[arg(long, default_value = "3us", value_parser = parse_duration)]
    beacon_interval: u64,
    /// Chip mode: least time between change-triggered beacons on one link [default: an eighth of the beacon interval].
    #[arg(long, value_parser = parse_duration)]
    beacon_min_gap: Option<u64>,
    /// Chip mode: demand beacons — while someone waits for the barrier, hosts also beacon at
    /// this shorter interval, for one beacon interval after the last demand (issue 37; the
    /// live default is 200 µs under 1 ms beacons). 0s: off.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    fast_beacon_interval: u64,
    /// Mean absolute clock offset after synchronisation (§7.1: 0.3 µs).
    #[arg(long, default_value = "0.3us", value_parser = parse_duration_f64)]
    clock_skew: f64,
    /// Clock drift bound, in ppm.
    #[arg(long, default_value_t = 0.1)]
    clock_drift_ppm: f64,
    /// Clock synchronisation interval (§7.1: PTP every 125 ms).
    #[arg(long, default_value = "125ms", value_parser = parse_duration)]
    clock_sync_interval: u64,
    /// Local clock reading at time zero (e.g. 281474976ms to start near the 48-bit wrap).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    clock_epoch: u64,
    /// Traffic pattern.
    #[arg(long, value_enum, default_value = "all-to-all")]
    workload: Workload,
    /// Delivery service the workload uses (Table 1: unreliable or reliable send).
    #[arg(long, value_enum, default_value = "be")]
    service: Svc,
    /// Floor of the reliable retransmission timeout; above it the timeout is estimated from
    /// the RTT (RFC 6298) and backs off exponentially.
    #[arg(long, default_value = "25us", value_parser = parse_duration)]
    rto: u64,
    /// Ceiling of the reliable retransmission timeout (the estimate and its back-off stop here).
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    rto_max: u64,
    /// Duplicate ACKs that make a reliable sender retransmit at once (1: on the first ACK that
    /// reports a gap, as an RDMA NIC's NAK does: the default).
    #[arg(long, default_value_t = 1)]
    dupack_threshold: u32,
    /// Longest a receiver delays a best-effort ACK (§2.1: best-effort ACKs only spare the
    /// sender a loss report at its 1 ms timeout, so they may wait and share a packet; reliable
    /// ACKs go within 2 µs, and one joining a waiting batch takes the batch with it). At most
    /// a quarter of the loss timeout (250us).
    #[arg(long, default_value = "200us", value_parser = parse_duration)]
    ack_delay_be: u64,
    /// Longest best-effort loss timeout: above the 1 ms floor the timeout adapts to the
    /// measured ACK delay (RFC 6298, as the live runtime's does), so messages held in queues at
    /// overload are not reported lost. The default, 1ms, keeps it fixed.
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    loss_timeout_max: u64,
    /// Crash host H at time T (true time), e.g. `--crash-host 3@200us`; repeatable. Switches
    /// remove its link after --link-timeout beacon intervals (§4.2); with the reliable service
    /// the controller's procedure (§5.2) then fails its processes.
    #[arg(long, value_parser = parse_crash)]
    crash_host: Vec<(u32, u64)>,
    /// Host H leaves gracefully at time T, e.g. `--leave-host 1@0us`; repeatable. It sends
    /// nothing new, waits until its sends are resolved (at most 2 ms), stops and tells the
    /// controller, which takes it out at once (no link timeout). `--restart-host H@T2` later
    /// joins it again as new processes.
    #[arg(long, value_parser = parse_crash)]
    leave_host: Vec<(u32, u64)>,
    /// Restart crashed (or departed) host H at time T with its state lost, e.g.
    /// `--restart-host 3@1ms` after `--crash-host 3@200us`: declared failed, it rejoins as new
    /// processes (§5.2).
    #[arg(long, value_parser = parse_crash)]
    restart_host: Vec<(u32, u64)>,
    /// Cut every link of a host (`host-3@1ms`: a host link failure) or of a physical switch
    /// (`tor-1@1ms`, `agg-0@..`, `core-0@..`, `leaf-0@..`, `spine-0@..`), one physical link
    /// between two of them (`agg-0/core-0@1ms`) or one direction of it (`agg-3>tor-3@1ms`),
    /// from a time on; repeatable. A cut may heal (`host-3@1ms..2ms`): a host declared failed
    /// meanwhile then runs §5.2 receiver recovery and rejoins as new processes.
    #[arg(long, value_parser = parse_cut)]
    cut: Vec<(String, u64, Option<u64>)>,
    /// Step host H's clock by a signed amount at time T (true time), e.g. `--clock-step
    /// 3@1ms:+20us` or `3@1ms:-5us`; repeatable. Its timestamps stay non-decreasing (§2.1).
    #[arg(long, value_parser = parse_clock_step)]
    clock_step: Vec<(u32, u64, i64)>,
    /// Take the controller down from T1 to T2 (true time), e.g. `--controller-down
    /// 700us..900us`; repeatable. Messages to it meanwhile are lost; it recovers with its state
    /// and hosts and switches re-send what it missed (§5.2).
    #[arg(long, value_parser = parse_interval)]
    controller_down: Vec<(u64, u64)>,
    /// Black-hole the route from host A to host B at time T (true time), e.g. `--blackhole
    /// 3>12@1ms`: A's first-hop switch drops A's data, ACKs and NAKs to B from then on without
    /// any link going silent, so only §5.2 controller forwarding gets them through; repeatable.
    #[arg(long, value_parser = parse_blackhole)]
    blackhole: Vec<(u32, u32, u64)>,
    /// §5.2 forwarding: hand a reliable message to the controller after this many timed-out
    /// retransmissions (0: never).
    #[arg(long, default_value_t = 4)]
    forward_after: u32,
    /// Beacon intervals of silence after which a switch removes an input link (§4.2; 0 never).
    #[arg(long, default_value_t = 10)]
    link_timeout: u32,
    /// One-way delay of the management network carrying the controller's messages (§5.2).
    #[arg(long, default_value = "3us", value_parser = parse_duration)]
    ctrl_delay: u64,
    /// How long the controller waits after the first failure report before it determines who
    /// failed, so every neighbour of the failure has reported (§5.2).
    #[arg(long, default_value = "6us", value_parser = parse_duration)]
    failure_settle: u64,
    /// Each host's reliable send buffer in bytes of payload; reliable sends beyond it are
    /// refused with SendError::Full.
    #[arg(long, default_value_t = 65_536)]
    send_buffer: usize,
    /// Switch queue depth in bytes above which data packets are ECN-marked (DCTCP's K, §6.1).
    #[arg(long, default_value_t = 100_000)]
    ecn_threshold: u64,
    /// Destinations per scattering (scatter workload).
    #[arg(long, default_value_t = 4)]
    scatter_k: u32,
    /// Message size in bytes (at least 16).
    #[arg(long, default_value_t = 64)]
    msg_size: usize,
    /// Sends per second per process (a broadcast or scattering counts as one), Poisson.
    #[arg(long, default_value_t = 10_000.0)]
    rate: f64,
    /// How long processes send.
    #[arg(long, default_value = "2ms", value_parser = parse_duration)]
    duration: u64,
    /// Longest settling time after sending stops; the run ends as soon as every message has
    /// been delivered or reported lost.
    #[arg(long, default_value = "10ms", value_parser = parse_duration)]
    drain: u64,
    /// Probability a packet is held back on a link and overtaken (non-FIFO links).
    #[arg(long, default_value_t = 0.0)]
    reorder_prob: f64,
    /// Largest extra delay of a held-back packet.
    #[arg(long, default_value = "5us", value_parser = parse_duration)]
    reorder_delay: u64,
    /// Probability that a packet starts a loss event on its link (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Packets one loss event drops on its link (bursty loss).
    #[arg(long, default_value_t = 1)]
    loss_burst: u32,
    /// Only lose packets of this kind [default: any].
    #[arg(long, value_enum)]
    loss_kind: Option<Kind>,
    /// Probability that a packet is duplicated on its link (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Optimistic delivery of best-effort messages (PLATO's pipeline on 1Pipe, docs/PLATO.md):
    /// a message is also delivered on arrival when it came more than this Δ after the previous
    /// one, revoked if the barrier's order contradicts it, confirmed when the barrier passes it
    /// [default: 0, off].
    #[arg(long, default_value = "0ns", value_parser = parse_duration)]
    optimistic_delta: u64,
    /// With --optimistic-delta: adapt Δ (PLATO §5).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    optimistic_adaptive: bool,
    /// Receiver overload: a core with this many packets waiting drops the next one, as a full
    /// kernel receive buffer does [default: 0, unbounded].
    #[arg(long, default_value_t = 0)]
    recv_queue: u32,
    /// Receiver stalls: each core is descheduled for --recv-stall at random times this far
    /// apart on average (Poisson) [default: never].
    #[arg(long, default_value = "0ns", value_parser = parse_duration)]
    recv_stall_every: u64,
    /// How long one receiver stall lasts.
    #[arg(long, default_value = "0ns", value_parser = parse_duration)]
    recv_stall: u64,
    /// Seed of the run: the same seed gives the same trace hash.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Turn the checkers off (faster; metrics only).
    #[arg(long)]
    no_check: bool,
    /// Link bandwidth in Gbit/s.
    #[arg(long, default_value_t = 100.0)]
    link_gbps: f64,
    /// Per-link latency (propagation plus switch pipeline).
    #[arg(long, default_value = "500ns", value_parser = parse_duration)]
    link_delay: u64,
    /// Host CPU time to send one packet.
    #[arg(long, default_value = "50ns", value_parser = parse_duration)]
    host_send_cost: u64,
    /// Host CPU time to receive one packet.
    #[arg(long, default_value = "50ns", value_parser = parse_duration)]
    host_recv_cost: u64,
    /// Host CPU time to deliver one message.
    #[arg(long, default_value = "20ns", value_parser = parse_duration)]
    host_deliver_cost: u64,
    /// Switch CPU beacon processing delay (cpu mode).
    #[arg(long, default_value = "2us", value_parser = parse_duration)]
    switch_cpu_delay: u64,
    /// Host-representative processing delay (host mode).
    #[arg(long, default_value = "500ns", value_parser = parse_duration)]
    rep_delay: u64,
    /// Switch ↔ representative round trip (host mode).
    #[arg(long, default_value = "2us", value_parser = parse_duration)]
    rep_rtt: u64,
    /// Largest payload per packet; longer messages are fragmented.
    #[arg(long, default_value_t = 4060)]
    mtu: usize,
    /// Event queue implementation.
    #[arg(long, value_enum, default_value = "radix")]
    queue: Queue,
    /// Write the report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    baseline: crate::sim_baseline::BaselineArgs,
    #[command(flatten)]
    app: crate::sim_app::AppArgs,
}

/// Parses `3us`, `1.5ms`, `200ns`, `2s` (also `µs`) into nanoseconds.
pub fn parse_duration_f64(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == '-' || c == '+'))
        .ok_or_else(|| format!("'{s}' needs a unit: ns, us, ms or s (e.g. 3us)"))?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{num}' is not a number (in '{s}')"))?;
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => {
            return Err(format!(
                "unknown unit '{unit}' in '{s}': use ns, us, ms or s"
            ))
        }
    };
    let ns = v * scale;
    if !(0.0..=1e15).contains(&ns) || !ns.is_finite() {
        return Err(format!("'{s}' is out of range (0 to 1e6 s)"));
    }
    Ok(ns)
}

/// Parses `NAME@TIME` or `NAME@TIME..HEAL` for `--cut`.
fn parse_cut(s: &str) -> Result<(String, u64, Option<u64>), String> {
    let (n, t) = s
        .split_once('@')
        .ok_or_else(|| format!("'{s}' should be NAME@TIME, e.g. tor-1@200us"))?;
    if n.trim().is_empty() {
        return Err(format!("'{s}' names no host or switch"));
    }
    let (t, heal) = match t.split_once("..") {
        Some((t, h)) => (t, Some(parse_duration(h)?)),
        None => (t, None),
    };
    Ok((n.trim().to_string(), parse_duration(t)?, heal))
}

/// Parses `H@TIME:±STEP` for `--clock-step`.
fn parse_clock_step(s: &str) -> Result<(u32, u64, i64), String> {
    let usage = || format!("'{s}' should be HOST@TIME:±STEP, e.g. 3@1ms:+20us");
    let (at, step) = s.split_once(':').ok_or_else(usage)?;
    let (h, t) = parse_crash(at).map_err(|_| usage())?;
    let step = step.trim();
    let (sign, amount) = match step.as_bytes().first() {
        Some(b'+') => (1, &step[1..]),
        Some(b'-') => (-1, &step[1..]),
        _ => return Err(usage()),
    };
    let ns = i64::try_from(parse_duration(amount)?).map_err(|_| usage())?;
    Ok((h, t, sign * ns))
}

/// Parses `A>B@TIME` for `--blackhole`.
fn parse_blackhole(s: &str) -> Result<(u32, u32, u64), String> {
    let usage = || format!("'{s}' should be FROM>TO@TIME (host numbers), e.g. 3>12@1ms");
    let (pair, t) = s.split_once('@').ok_or_else(usage)?;
    let (a, b) = pair.split_once('>').ok_or_else(usage)?;
    let a = a.trim().parse().map_err(|_| usage())?;
    let b = b.trim().parse().map_err(|_| usage())?;
    Ok((a, b, parse_duration(t)?))
}

/// Parses `FROM..TO` (two true times with units) for `--controller-down`.
fn parse_interval(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("'{s}' should be FROM..TO, e.g. 700us..900us"))?;
    Ok((parse_duration(a)?, parse_duration(b)?))
}

/// Parses `H@TIME` (a host and a true time with a unit) for `--crash-host`.
fn parse_crash(s: &str) -> Result<(u32, u64), String> {
    let (h, t) = s
        .split_once('@')
        .ok_or_else(|| format!("'{s}' should be HOST@TIME, e.g. 3@200us"))?;
    let h = h
        .trim()
        .parse()
        .map_err(|_| format!("'{h}' is not a host number (in '{s}')"))?;
    Ok((h, parse_duration(t)?))
}

/// Like [`parse_duration_f64`], rounded to whole nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    parse_duration_f64(s).map(|ns| ns.round() as u64)
}

impl SimArgs {
    /// The simulator's configuration these flags ask for.
    fn config(&self) -> SimConfig {
        SimConfig {
            seed: self.seed,
            check: !self.no_check,
            net: self.net_config(),
            faults: self.fault_config(),
            workload: self.workload_config(),
            protocol: self.protocol_config(),
        }
    }

    /// The network these flags ask for.
    fn net_config(&self) -> NetworkConfig {
        NetworkConfig {
            topology: self.topology_spec(),
            fabric: match self.fabric {
                FabricArg::Clos => Fabric::Clos,
                FabricArg::Tree => Fabric::Tree {
                    layers: self.layers,
                },
            },
            procs_per_host: self.procs_per_host,
            switch_mode: self.switch_mode.into(),
            beacon_interval_ns: self.beacon_interval,
            beacon_min_gap_ns: self.beacon_min_gap,
            fast_beacon_interval_ns: self.fast_beacon_interval,
            clock_skew_ns: self.clock_skew,
            clock_drift_ppm: self.clock_drift_ppm,
            clock_sync_interval_ns: self.clock_sync_interval,
            clock_epoch_ns: self.clock_epoch,
            ctrl_delay_ns: self.ctrl_delay,
            ecn_threshold_bytes: self.ecn_threshold,
            link_gbps: self.link_gbps,
            link_delay_ns: self.link_delay,
            host_links: Vec::new(),
            host_send_ns: self.host_send_cost,
            host_recv_ns: self.host_recv_cost,
            host_deliver_ns: self.host_deliver_cost,
            switch_cpu_delay_ns: self.switch_cpu_delay,
            rep_proc_delay_ns: self.rep_delay,
            rep_rtt_ns: self.rep_rtt,
            mtu_payload: self.mtu,
            queue: self.queue.into(),
        }
    }

    /// The faults these flags ask for.
    fn fault_config(&self) -> FaultConfig {
        FaultConfig {
            reorder_prob: self.reorder_prob,
            reorder_delay_ns: self.reorder_delay,
            loss_rate: self.loss,
            loss_burst: self.loss_burst,
            dup_rate: self.dup,
            loss_kind: self.loss_kind.map(PacketKind::from),
            crashes: self.crash_host.clone(),
            leaves: self.leave_host.clone(),
            restarts: self.restart_host.clone(),
            cuts: self.cut.iter().map(|c| (c.0.clone(), c.1)).collect(),
            heals: self
                .cut
                .iter()
                .filter_map(|c| Some((c.0.clone(), c.2?)))
                .collect(),
            clock_steps: self.clock_step.clone(),
            controller_down: self.controller_down.clone(),
            blackholes: self.blackhole.clone(),
            recv_queue_len_max: self.recv_queue,
            recv_stall_every_ns: self.recv_stall_every,
            recv_stall_ns: self.recv_stall,
        }
    }

    /// The workload these flags ask for.
    fn workload_config(&self) -> WorkloadConfig {
        WorkloadConfig {
            workload: self.workload_kind(),
            msg_size: self.msg_size,
            rate_per_proc: self.rate,
            periodic: false,
            duration_ns: self.duration,
            drain_ns: self.drain,
            service: self.service.into(),
            app: None,
            keep_history: false,
            rate_steps: Vec::new(),
        }
    }

    /// The protocol settings these flags ask for.
    fn protocol_config(&self) -> ProtocolConfig {
        ProtocolConfig {
            rto_ns: self.rto,
            rto_max_ns: self.rto_max,
            dupack_threshold: self.dupack_threshold,
            ack_delay_be_ns: self.ack_delay_be,
            loss_timeout_max_ns: self.loss_timeout_max,
            forward_after: self.forward_after,
            link_timeout_intervals: self.link_timeout,
            failure_settle_ns: self.failure_settle,
            send_buffer_bytes: self.send_buffer,
            proc_ids_spare: None,
            deliver_burst_max: ProtocolConfig::default().deliver_burst_max,
            retransmit_burst_max: ProtocolConfig::default().retransmit_burst_max,
            optimistic_delta_ns: self.optimistic_delta,
            optimistic_adaptive: self.optimistic_adaptive,
        }
    }

    /// `--topology` with its sizes.
    fn topology_spec(&self) -> TopologySpec {
        match self.topology {
            Topo::FatTree => TopologySpec::FatTree { k: self.k },
            Topo::Rack => TopologySpec::Rack { hosts: self.hosts },
            Topo::LeafSpine => TopologySpec::LeafSpine {
                hosts: self.hosts,
                rack_size: self.rack_size,
                spines: self.spines,
            },
        }
    }

    /// `--workload` with its fan-out.
    fn workload_kind(&self) -> WorkloadKind {
        match self.workload {
            Workload::AllToAll => WorkloadKind::AllToAll,
            Workload::Scatter => WorkloadKind::Scatter { k: self.scatter_k },
            Workload::OneToOne => WorkloadKind::OneToOne,
        }
    }
}

impl From<Mode> for SwitchMode {
    fn from(m: Mode) -> SwitchMode {
        match m {
            Mode::Chip => SwitchMode::Chip,
            Mode::Cpu => SwitchMode::Cpu,
            Mode::Host => SwitchMode::Host,
        }
    }
}

impl From<Kind> for PacketKind {
    fn from(k: Kind) -> PacketKind {
        match k {
            Kind::Data => PacketKind::Data,
            Kind::Ack => PacketKind::Ack,
            Kind::Nak => PacketKind::Nak,
            Kind::Beacon => PacketKind::Beacon,
            Kind::Commit => PacketKind::Commit,
        }
    }
}

impl From<Svc> for Service {
    fn from(s: Svc) -> Service {
        match s {
            Svc::Be => Service::BestEffort,
            Svc::Reliable => Service::Reliable,
            Svc::Mixed => Service::Mixed,
        }
    }
}

impl From<Queue> for QueueKind {
    fn from(q: Queue) -> QueueKind {
        match q {
            Queue::Radix => QueueKind::Radix,
            Queue::Quaternary => QueueKind::Quaternary,
            Queue::Binary => QueueKind::Binary,
        }
    }
}

/// Sends `tracing` events (the daemons' and the runtime's logs) to standard error, filtered by
/// `RUST_LOG` (`debug`, `onepipe_runtime::controller=debug,warn`, …), else by `default`. The
/// children of `onepipe up` inherit the environment and run this too. What a command prints as
/// its answer (help, usage errors, reports) does not go through here.
fn init_logs(default: &str) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Runs the command line; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    init_logs(match &cli.command {
        Command::Controller(a) if a.quiet => "warn",
        _ => "info",
    });
    if matches!(
        cli.command,
        Command::Sim(_) | Command::Vopr(_) | Command::Bench(_)
    ) {
        // The simulator's heap on 2 MiB pages (see the module); returns only if not re-executed.
        crate::hugepages::reexec_with_huge_pages();
    }
    match cli.command {
        Command::Sim(args) => sim(&args),
        Command::Vopr(a) => crate::vopr::vopr(&a),
        Command::Model(m) => crate::model::model(&m),
        Command::Up(a) => crate::live::up(&a),
        Command::Controller(a) => crate::live::controller(&a),
        Command::Agg(a) => crate::live::agg(&a),
        Command::Node(a) => crate::live::node(&a),
        Command::Topology(a) => crate::live::topology(&a),
        Command::Status(a) => crate::live::status(&a),
        Command::Bench(b) => {
            let result = match &b {
                crate::bench::Bench::Loss(a) => crate::bench::loss(a),
                crate::bench::Bench::Throughput(a) => crate::bench::throughput(a),
                crate::bench::Bench::Fig8(a) => crate::fig8::fig8(a),
                crate::bench::Bench::Fig14(a) => crate::fig14::fig14(a),
                crate::bench::Bench::Fig15(a) => crate::fig15::fig15(a),
                crate::bench::Bench::Replication(a) => crate::replication::replication(a),
                crate::bench::Bench::Etcd(a) => crate::etcd_bench::etcd(a),
                crate::bench::Bench::Paxos(a) => crate::paxos::paxos(a),
                crate::bench::Bench::Fig16(a) => crate::fig16::fig16(a),
                crate::bench::Bench::Plato(a) => crate::bench_plato::plato(a),
                crate::bench::Bench::Toto(a) => crate::bench_toto::toto(a),
            };
            match result {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("onepipe bench: {e}");
                    EXIT_VIOLATION
                }
            }
        }
    }
}

/// `onepipe sim`: runs the simulation (or a baseline's, or an application on direct messages)
/// and prints it; the exit code.
fn sim(args: &SimArgs) -> i32 {
    let mut cfg = args.config();
    if args.app.app.is_some()
        && args
            .baseline
            .protocol
            .is_some_and(|p| p.baseline().is_some())
    {
        eprintln!("onepipe sim: --app runs on 1Pipe or --system's baselines, not with --protocol");
        return EXIT_USAGE;
    }
    match args.baseline.protocol {
        Some(crate::sim_baseline::Proto::OnepipeBe) => cfg.workload.service = Service::BestEffort,
        Some(crate::sim_baseline::Proto::OnepipeR) => cfg.workload.service = Service::Reliable,
        Some(p) => {
            let base = args.baseline.config(p.baseline().expect("a baseline"));
            return crate::sim_baseline::sim(&cfg, &base, args.quiet, args.json.as_deref());
        }
        None => {}
    }
    match args.app.spec() {
        Ok(spec) => cfg.workload.app = spec,
        Err(e) => {
            eprintln!("onepipe sim: {e}");
            return EXIT_USAGE;
        }
    }
    cfg.workload.keep_history = args.app.history.is_some();
    if cfg.workload.app.is_some() && args.app.system != crate::sim_app::System::Onepipe {
        let (json, history) = (args.json.as_deref(), args.app.history.as_deref());
        let allow = args.app.allow_unchecked;
        return crate::sim_app::sim_direct(&cfg, args.app.system, json, history, allow);
    }
    if let Err(e) = cfg.validate() {
        eprintln!("onepipe sim: {e}");
        return EXIT_USAGE;
    }
    let report = match run_with_bar(&cfg, args.quiet) {
        Ok(r) => r,
        Err(code) => return code,
    };
    print_summary(&report);
    if let Some(a) = &report.app {
        crate::sim_app::print_app_summary(a);
    }
    if let Err(code) = write_outputs(args, &report) {
        return code;
    }
    let app_violations = report.app.as_ref().map_or(0, |a| a.violations);
    if report.violations + app_violations > 0 {
        eprintln!(
            "onepipe sim: {} violation(s) with seed {} — replay with --seed {}",
            report.violations + app_violations,
            report.seed,
            report.seed
        );
        let app_samples = report.app.iter().flat_map(|a| &a.violation_samples);
        for v in report.violation_samples.iter().chain(app_samples) {
            eprintln!("  {v}");
        }
        return EXIT_VIOLATION;
    }
    match &report.app {
        Some(a) => crate::sim_app::unchecked_status(a, report.seed, args.app.allow_unchecked),
        None => 0,
    }
}

/// Runs the simulation, with a progress bar on standard error unless `quiet` (shown once a
/// run takes a while); the exit code if it cannot run (said on standard error).
fn run_with_bar(cfg: &SimConfig, quiet: bool) -> Result<Report, i32> {
    let bar = (!quiet).then(|| {
        let bar = indicatif::ProgressBar::new(1000);
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} simulating [{bar:40}] {percent}% ({elapsed} elapsed, ~{eta} left)",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        // Only runs that take a while show the bar.
        bar.set_position(0);
        bar
    });
    let started = std::time::Instant::now();
    let mut progress = |f: f64| {
        if let Some(b) = &bar {
            if started.elapsed().as_secs_f64() > 2.0 {
                b.set_position((f * 1000.0) as u64);
            }
        }
    };
    let report = match run(cfg, &mut progress) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("onepipe sim: {e}");
            return Err(EXIT_USAGE);
        }
    };
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(report)
}

/// Writes `--history` and `--json`; the exit code if one cannot be written (said on standard
/// error).
fn write_outputs(args: &SimArgs, report: &Report) -> Result<(), i32> {
    if let (Some(path), Some(h)) = (&args.app.history, &report.app_history) {
        if let Err(e) = std::fs::write(path, h) {
            eprintln!(
                "onepipe sim: --history: cannot write {}: {e}",
                path.display()
            );
            return Err(EXIT_USAGE);
        }
    }
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(report).expect("report serializes");
        if let Err(e) = std::fs::write(path, json + "\n") {
            eprintln!("onepipe sim: --json: cannot write {}: {e}", path.display());
            return Err(EXIT_USAGE);
        }
    }
    Ok(())
}

pub(crate) fn us(ns: f64) -> String {
    format!("{:.2} µs", ns / 1e3)
}

/// Prints the summary of a run.
fn print_summary(r: &Report) {
    println!("onepipe sim — seed {}", r.seed);
    println!(
        "  network     {} ({} processes), switch mode {}, service {}",
        r.topology, r.procs, r.switch_mode, r.service
    );
    println!(
        "  messages    {} sent in {} scatterings, {} delivered, {} dropped late, {} send-failed",
        r.sent, r.scatterings, r.delivered, r.dropped_late, r.send_failed
    );
    if r.packets_lost + r.packets_duplicated + r.recv_overflow > 0 {
        println!(
            "  faults      {} packets lost, {} duplicated, {} dropped at full receive queues ({} receiver stalls); {} duplicates dropped, {} messages reported lost",
            r.packets_lost, r.packets_duplicated, r.recv_overflow, r.recv_stalls, r.dropped_duplicate, r.lost_reported
        );
    }
    println!(
        "  throughput  {:.0} msgs/s per process",
        r.throughput_msgs_per_s_per_proc
    );
    println!(
        "  latency     mean {}  p50 {}  p99 {}",
        us(r.latency_ns.mean),
        us(r.latency_ns.p50 as f64),
        us(r.latency_ns.p99 as f64)
    );
    if let Some(o) = &r.optimistic {
        crate::sim_baseline::print_optimistic(o);
    }
    if r.delivered_reliable > 0 {
        print_reliable(r);
    }
    println!(
        "  reorder     mean {}  p50 {}  p99 {}   buffer max {}",
        us(r.reorder_delay_ns.mean),
        us(r.reorder_delay_ns.p50 as f64),
        us(r.reorder_delay_ns.p99 as f64),
        r.reorder_buffer_len_max
    );
    println!(
        "  beacons     {:.4}% of link capacity, {:.2}% of bytes sent{}",
        r.beacon_bandwidth_share * 100.0,
        r.beacon_byte_share * 100.0,
        match r.nic_keepalives {
            0 => String::new(),
            n => format!("; {n} NIC keep-alives while host CPUs were busy"),
        }
    );
    println!(
        "  host CPUs   busy {:.0}% on average, {:.0}% the busiest, while issuing",
        100.0 * r.cpu_busy.mean,
        100.0 * r.cpu_busy.max
    );
    print_failures(r);
    print_tail(&Tail {
        drained: r.drained,
        undrained: r.undrained,
        checked: r.checked,
        violations: r.violations,
        checked_deliveries: r.checked_deliveries,
        events: r.events,
        wall_s: r.wall_s,
        events_per_wall_s: r.events_per_wall_s,
        trace_hash: &r.trace_hash,
    });
}

/// The reliable service's lines: latency by service, and deliveries and retransmits.
fn print_reliable(r: &Report) {
    for (name, l) in [
        ("best effort", &r.latency_ns_be),
        ("reliable", &r.latency_ns_reliable),
    ] {
        if l.count > 0 {
            println!(
                "    {name:<11} p50 {}  p99 {}",
                us(l.p50 as f64),
                us(l.p99 as f64)
            );
        }
    }
    println!(
        "  reliable    {} delivered, {} retransmits ({} fast), {} ECN marks, {} refused (buffer full)",
        r.delivered_reliable, r.retransmits, r.fast_retransmits, r.ecn_marked, r.sends_refused_full
    );
}

/// The failures' lines: links removed (§4.2), each §5.2 round, the recovery, and the
/// receivers that recovered or rejoined.
fn print_failures(r: &Report) {
    if r.links_removed > 0 {
        println!(
            "  failures    {} input link(s) removed by switch timeouts (§4.2)",
            r.links_removed
        );
    }
    for f in &r.failure_rounds {
        let hosts: Vec<String> = f
            .hosts
            .iter()
            .map(|(h, ts)| format!("host-{h} at ts {ts}"))
            .collect();
        let resumed = match f.resumed_ns {
            Some(t) => format!("resumed at {}", us(t as f64)),
            None => "not resumed".to_string(),
        };
        println!(
            "  §5.2 round {}  declared at {}: {}; {resumed}",
            f.round,
            us(f.declared_ns as f64),
            if hosts.is_empty() {
                "no process failed".to_string()
            } else {
                hosts.join(", ")
            }
        );
    }
    if !r.failure_rounds.is_empty() {
        println!(
            "  recovery    {} recalled, {} process-failed callbacks, {} control messages ({} lost to a controller outage, {} re-sent); stall (Fig. 10) best effort {}, commit {}",
            r.recalled,
            r.proc_failed_callbacks,
            r.ctrl_messages,
            r.ctrl_lost,
            r.ctrl_resent,
            us(r.stall_ns_be),
            us(r.stall_ns_reliable)
        );
    }
    if r.recovered > 0 {
        println!(
            "  receivers   {} recovered (settling delivered {} buffered reliable messages, discarded {}); {} rejoined as new processes ({} restarted after a crash), which then received {} messages and sent {} delivered",
            r.recovered,
            r.settled_delivered,
            r.settled_discarded,
            r.rejoined,
            r.restarts,
            r.rejoined_delivered_to,
            r.rejoined_delivered_from
        );
    }
}

/// The last lines every simulation summary prints: drain, checks, engine.
pub(crate) struct Tail<'a> {
    pub drained: bool,
    pub undrained: u64,
    pub checked: bool,
    pub violations: u64,
    pub checked_deliveries: u64,
    pub events: u64,
    pub wall_s: f64,
    pub events_per_wall_s: f64,
    pub trace_hash: &'a str,
}

/// Prints a [`Tail`].
pub(crate) fn print_tail(r: &Tail<'_>) {
    if !r.drained {
        println!(
            "  drain       limit reached with {} message(s) still on their way (not judged as losses; raise --drain)",
            r.undrained
        );
    }
    let checks = if r.checked {
        format!(
            "{} violations in {} checked deliveries",
            r.violations, r.checked_deliveries
        )
    } else {
        "off (--no-check)".to_string()
    };
    println!("  checks      {checks}");
    println!(
        "  engine      {} events in {:.2} s wall ({:.2} M events/s), trace {}",
        r.events,
        r.wall_s,
        r.events_per_wall_s / 1e6,
        r.trace_hash
    );
}
