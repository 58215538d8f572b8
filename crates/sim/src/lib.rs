//! # onepipe-sim
//!
//! A deterministic simulator of a data-center network running the sans-IO 1Pipe roles of
//! `onepipe-proto`: fat trees of thousands of hosts, µs links, clock skew, non-FIFO links, a
//! host CPU model, workloads, global checkers and metrics. Same seed, same trace hash.
//!
//! ```
//! use onepipe_sim::{run, NetworkConfig, SimConfig, TopologySpec, WorkloadConfig};
//! let cfg = SimConfig {
//!     net: NetworkConfig {
//!         topology: TopologySpec::Rack { hosts: 4 },
//!         ..Default::default()
//!     },
//!     workload: WorkloadConfig {
//!         duration_ns: 200_000,
//!         ..Default::default()
//!     },
//!     ..SimConfig::default()
//! };
//! let report = run(&cfg, &mut |_| {}).unwrap();
//! assert_eq!(report.violations, 0);
//! assert!(report.delivered > 0);
//! ```
#![allow(clippy::disallowed_methods)] // wall-clock time is measured here, for events per second.

pub mod apps;
pub mod baseline;
pub mod check;
pub mod clock;
pub mod config;
pub mod direct;
pub mod engine;
pub mod metrics;
pub mod onepipe;
pub mod optcheck;
pub mod optimistic;
pub mod queue;
pub mod slab;
pub mod vopr;

pub use config::{
    AppSpec, ConfigError, Fabric, FaultConfig, HostLinks, LinkSpec, NetworkConfig, PaxosSpec,
    ProtocolConfig, RateStep, Service, SimConfig, TopologySpec, WorkloadConfig, WorkloadKind,
};

use metrics::Summary;
use onepipe::{Ev, World};
use queue::SimTime;
use queue::{EventQueue, QuaternaryHeap, QueueKind, RadixHeap, StdBinaryHeap};
use serde::Serialize;

/// The outcome of a run (the JSON of `onepipe sim --json`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The topology, in words.
    pub topology: String,
    /// Hosts.
    pub hosts: u32,
    /// Processes.
    pub procs: u32,
    /// Switch incarnation.
    pub switch_mode: String,
    /// Service the workload used: `be`, `reliable` or `mixed`.
    pub service: String,
    /// Messages sent (one per destination of each scattering).
    pub sent: u64,
    /// Scatterings sent.
    pub scatterings: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Of which reliable.
    pub delivered_reliable: u64,
    /// Reliable messages not delivered everywhere with no failure to excuse it (drained runs
    /// with checks on; must be 0).
    pub undelivered_reliable: u64,
    /// Reliable messages retransmitted (timeouts and fast retransmissions).
    pub retransmits: u64,
    /// Of which fast retransmissions (duplicate ACKs).
    pub fast_retransmits: u64,
    /// Data packets switch queues marked ECN (§6.1).
    pub ecn_marked: u64,
    /// DCTCP window reductions.
    pub window_cuts: u64,
    /// Reliable sends refused with `SendError::Full` (send buffer full).
    pub sends_refused_full: u64,
    /// Checker violations (0 when checks are off).
    pub violations: u64,
    /// The first violations, described.
    pub violation_samples: Vec<String>,
    /// Whether the checkers ran.
    pub checked: bool,
    /// Deliveries the checkers examined.
    pub checked_deliveries: u64,
    /// Packets dropped because they arrived below the barrier (§4.1).
    pub dropped_late: u64,
    /// Messages dropped as incomplete (a fragment late or missing).
    pub dropped_incomplete: u64,
    /// Send-failed notifications delivered to senders.
    pub send_failed: u64,
    /// Input links switches removed after a timeout (§4.2; `--crash-host`).
    pub links_removed: u64,
    /// Keep-alive beacons hosts' NICs sent while their CPUs were busy past a beacon time
    /// (`OnePipeStats::nic_keepalives`).
    pub nic_keepalives: u64,
    /// Sends refused because a host CPU was hopelessly backlogged.
    pub sends_rejected: u64,
    /// How busy the hosts' CPUs were while the processes issued (`0..duration`).
    pub cpu_busy: engine::CpuBusy,
    /// Whether everything sent was delivered or reported before the drain limit.
    pub drained: bool,
    /// Messages still on their way when the drain limit ended the run (checks on; those are not
    /// judged as losses).
    pub undrained: u64,
    /// Of those, the ones sent 5 ms or more before the end (`check::STALE_NS`): stuck, not on
    /// their way.
    pub undrained_stale: u64,
    /// The first of them: sender, scattering, timestamp, destinations left.
    pub undrained_samples: Vec<String>,
    /// Messages delivered during the sending period, per second per process.
    pub throughput_msgs_per_s_per_proc: f64,
    /// Send → deliver latency (true time), ns.
    pub latency_ns: Summary,
    /// The same for best-effort messages.
    pub latency_ns_be: Summary,
    /// The same for reliable messages.
    pub latency_ns_reliable: Summary,
    /// Arrive → deliver delay at the receiver, ns.
    pub reorder_delay_ns: Summary,
    /// Beacon bytes over the capacity of all links during the run.
    pub beacon_bandwidth_share: f64,
    /// Beacon bytes over all bytes sent on links.
    pub beacon_byte_share: f64,
    /// The largest reorder buffer any process had.
    pub reorder_buffer_len_max: usize,
    /// Packets the non-FIFO option held back.
    pub reordered_packets: u64,
    /// Packets the loss model dropped (`--loss`).
    pub packets_lost: u64,
    /// Packets the duplication model copied (`--dup`).
    pub packets_duplicated: u64,
    /// Packets dropped on cut links (`--cut`).
    pub packets_cut: u64,
    /// Packets dropped at full receive queues (`--recv-queue`).
    pub recv_overflow: u64,
    /// Receiver stalls (`--recv-stall-every`).
    pub recv_stalls: u64,
    /// Duplicates receivers recognised and dropped.
    pub dropped_duplicate: u64,
    /// End-to-end ACKs sent (one per (sender, receiver, service) acknowledged).
    pub acks: u64,
    /// Packets that carried them: an ACK alone, or the ACKs one host owed another in one batch
    /// (§6.1).
    pub ack_packets: u64,
    /// Messages their senders reported lost after the retransmission timeout.
    pub lost_reported: u64,
    /// Events processed.
    pub events: u64,
    /// Events per wall-clock second.
    pub events_per_wall_s: f64,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// Simulated nanoseconds (sending plus the drain actually needed).
    pub simulated_ns: u64,
    /// Optimistic delivery (`--optimistic-delta`), when on.
    pub optimistic: Option<optcheck::OptReport>,
    /// Hash of every send, delivery and failure, in order.
    pub trace_hash: String,
    /// §5.2 rounds the controller ran: hosts declared failed with their failure timestamps,
    /// when declared and when resumed.
    pub failure_rounds: Vec<onepipe::FailureRound>,
    /// Reliable scatterings recalled because a receiver failed (§5.2).
    pub recalled: u64,
    /// Process-failed callbacks raised, over all hosts.
    pub proc_failed_callbacks: u64,
    /// Control messages on the management network.
    pub ctrl_messages: u64,
    /// Control messages lost because the controller was down (`--controller-down`).
    pub ctrl_lost: u64,
    /// `Completed` and `LinkDown` messages hosts and switches sent again, unanswered (§5.2).
    pub ctrl_resent: u64,
    /// Sends not made because a destination had failed.
    pub sends_to_failed: u64,
    /// §5.2 controller forwarding: reliable messages hosts handed to the controller.
    pub forwarded: u64,
    /// Packets dropped by route black holes (`--blackhole`).
    pub packets_blackholed: u64,
    /// §5.2 receiver recovery: hosts declared failed that settled their receive buffer after
    /// their link healed, and the buffered reliable messages they delivered and discarded.
    pub recovered: u64,
    /// See `recovered`.
    pub settled_delivered: u64,
    /// See `recovered`.
    pub settled_discarded: u64,
    /// §5.2: hosts that rejoined as new processes after recovering.
    pub rejoined: u64,
    /// Hosts restarted after a crash (`--restart-host`).
    pub restarts: u64,
    /// Hosts that left gracefully (`--leave-host`): (host, true time it departed — once its
    /// sends were resolved — in ns).
    pub departed: Vec<(u32, u64)>,
    /// Messages delivered to rejoined processes, and from them (anywhere).
    pub rejoined_delivered_to: u64,
    /// See `rejoined_delivered_to`.
    pub rejoined_delivered_from: u64,
    /// Fig. 10: the longest best-effort barrier stall after the first fault, mean over correct
    /// hosts, ns (0 without faults).
    pub stall_ns_be: f64,
    /// The same for the commit barrier.
    pub stall_ns_reliable: f64,
    /// `--app`: the application's transactions, latency and checker verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<onepipe::AppReport>,
    /// `--app`: the run's history in Jepsen's form (what `--history` writes); not in the report.
    #[serde(skip)]
    pub app_history: Option<String>,
}

/// Builds and runs the configured simulation. `progress` is called now and then with the
/// fraction done.
pub fn run(cfg: &SimConfig, progress: &mut dyn FnMut(f64)) -> Result<Report, ConfigError> {
    cfg.validate()?;
    match cfg.net.queue {
        QueueKind::Radix => run_with(cfg, RadixHeap::new(), progress),
        QueueKind::Quaternary => run_with(cfg, QuaternaryHeap::new(), progress),
        QueueKind::Binary => run_with(cfg, StdBinaryHeap::new(), progress),
    }
}

fn run_with<Q: EventQueue<Ev>>(
    cfg: &SimConfig,
    queue: Q,
    progress: &mut dyn FnMut(f64),
) -> Result<Report, ConfigError> {
    let started = std::time::Instant::now();
    let mut world = World::new(cfg.clone(), queue).map_err(|message| {
        match message.strip_prefix("--cut: ") {
            Some(m) => ConfigError {
                flag: "--cut",
                message: m.to_string(),
            },
            None => ConfigError {
                flag: "--topology",
                message,
            },
        }
    })?;
    let (cpu_busy, drained) = drive(&mut world, cfg, progress);
    let end = world.now();
    let recovered: Vec<u32> = world
        .hosts()
        .enumerate()
        .filter(|(_, h)| h.stats().recovered > 0)
        .map(|(i, _)| i as u32)
        .collect();
    if let Some(c) = world.proto.checker.as_mut() {
        c.finish(end, cfg.seed, drained);
    }
    // A host declared failed, crashed, restarted or gone stops delivering for good: what it
    // delivered optimistically is left unconfirmed by design, so leftovers are judged at the
    // other hosts' processes only (there, §5.2's discards revoke what never comes).
    let out: std::collections::BTreeSet<u32> = world
        .proto
        .failure_rounds
        .iter()
        .flat_map(|r| r.hosts.iter().map(|&(h, _)| h))
        .chain(cfg.faults.crashes.iter().map(|&(h, _)| h))
        .chain(cfg.faults.restarts.iter().map(|&(h, _)| h))
        .chain(cfg.faults.leaves.iter().map(|&(h, _)| h))
        .collect();
    let host_of = |p: u32| world.proto.host_of(onepipe_proto::ProcId(p));
    let judged: Vec<u32> = (0..world.proto.proc_ids_max())
        .filter(|&p| host_of(p).is_some_and(|h| !out.contains(&h)))
        .collect();
    let held: u64 = world
        .hosts()
        .enumerate()
        .filter(|(h, _)| !out.contains(&(*h as u32)))
        .map(|(_, host)| host.optimistic_held() as u64)
        .sum();
    if let Some(o) = world.proto.opt.as_mut() {
        o.held_end = Some(held);
        o.finish(end, drained, |view| {
            judged
                .binary_search(&(view & !optcheck::reliable_view(0)))
                .is_ok()
        });
    }
    let ran = Ran {
        cpu_busy,
        drained,
        recovered: recovered.len() as u64,
        wall_s: started.elapsed().as_secs_f64(),
    };
    Ok(report(&world, cfg, ran))
}

/// Runs `world` for the sending period, then drains it: on until everything sent has been
/// delivered or reported, or the drain limit. Returns how busy the hosts' CPUs were while the
/// processes issued, and whether the run drained.
fn drive<Q: EventQueue<Ev>>(
    world: &mut World<Q>,
    cfg: &SimConfig,
    progress: &mut dyn FnMut(f64),
) -> (engine::CpuBusy, bool) {
    let limit = cfg.workload.duration_ns + cfg.workload.drain_ns;
    let mut report_progress =
        |t: SimTime| progress(t as f64 / cfg.workload.duration_ns.max(1) as f64);
    world.run_until(cfg.workload.duration_ns, &mut report_progress);
    let cpu_busy = world.cpu_busy_share(cfg.workload.duration_ns);
    // Drain: run on until everything sent has been delivered or reported, or the limit.
    let step = (cfg.net.beacon_interval_ns * 4).max(1_000);
    while world.now() < limit && !world.quiescent() {
        let next = (world.now() + step).min(limit);
        world.run_until(next, &mut report_progress);
    }
    let drained = world.quiescent();
    if !drained {
        world.trace_state();
    }
    (cpu_busy, drained)
}

/// What a run measured beside its world: CPU busy shares, whether it drained, hosts that
/// recovered (§5.2) and the wall-clock time it took.
struct Ran {
    cpu_busy: engine::CpuBusy,
    drained: bool,
    recovered: u64,
    wall_s: f64,
}

/// Counters summed over the hosts.
#[derive(Default)]
struct HostTotals {
    dropped_late: u64,
    dropped_incomplete: u64,
    reorder_max: usize,
    dropped_duplicate: u64,
    acks: u64,
    lost_reported: u64,
    ack_packets: u64,
    retransmits: u64,
    fast_retransmits: u64,
    window_cuts: u64,
}

impl HostTotals {
    /// The totals over `world`'s hosts (the largest reorder buffer for `reorder_max`).
    fn of<Q: EventQueue<Ev>>(world: &World<Q>) -> HostTotals {
        let mut t = HostTotals::default();
        for h in world.hosts() {
            let rs = h.reliable_stats();
            t.retransmits += rs.retransmits;
            t.fast_retransmits += rs.fast_retransmits;
            t.window_cuts += rs.window_cuts;
            let st = h.stats();
            t.dropped_late += st.dropped_late;
            t.dropped_incomplete += st.dropped_incomplete;
            t.dropped_duplicate += st.dropped_duplicate;
            t.acks += st.acks_sent;
            t.ack_packets += st.ack_packets_sent;
            t.lost_reported += st.lost;
            t.reorder_max = t.reorder_max.max(h.reorder_len_peak());
        }
        t
    }
}

/// The report of the run of `cfg` on `world`, finished: what was sent and delivered, how fast
/// and at what cost, then (`fault_report`) what the checkers and §5.2 found.
fn report<Q: EventQueue<Ev>>(world: &World<Q>, cfg: &SimConfig, ran: Ran) -> Report {
    let end = world.now();
    let topo = world.topology();
    let link_count = topo.links().len() as f64;
    let capacity_bytes = link_count * cfg.net.link_gbps / 8.0 * end as f64;
    let t = HostTotals::of(world);
    let (s, net) = (&world.proto.stats, &world.net);
    Report {
        seed: cfg.seed,
        topology: topo.describe(),
        hosts: topo.hosts(),
        procs: world.procs(),
        switch_mode: cfg.net.switch_mode.to_string(),
        service: match cfg.workload.service {
            Service::BestEffort => "be",
            Service::Reliable => "reliable",
            Service::Mixed => "mixed",
        }
        .to_string(),
        sent: s.messages_sent,
        scatterings: s.scatterings,
        delivered: s.delivered,
        delivered_reliable: s.delivered_reliable,
        retransmits: t.retransmits,
        fast_retransmits: t.fast_retransmits,
        ecn_marked: s.ecn_marked,
        window_cuts: t.window_cuts,
        sends_refused_full: s.sends_refused_full,
        dropped_late: t.dropped_late,
        dropped_incomplete: t.dropped_incomplete,
        nic_keepalives: s.nic_keepalives,
        sends_rejected: net.sends_rejected,
        cpu_busy: ran.cpu_busy,
        drained: ran.drained,
        throughput_msgs_per_s_per_proc: s.delivered_in_period as f64
            / world.procs() as f64
            / (cfg.workload.duration_ns as f64 / 1e9),
        latency_ns: world.proto.latency.summary(),
        latency_ns_be: world.proto.latency_be.summary(),
        latency_ns_reliable: world.proto.latency_reliable.summary(),
        reorder_delay_ns: world.proto.reorder_delay.summary(),
        beacon_bandwidth_share: net.background_bytes as f64 / capacity_bytes,
        beacon_byte_share: net.background_bytes as f64 / (net.link_bytes.max(1)) as f64,
        reorder_buffer_len_max: t.reorder_max,
        reordered_packets: net.reordered_packets,
        packets_lost: net.packets_lost,
        packets_duplicated: net.packets_duplicated,
        packets_cut: net.packets_cut,
        recv_overflow: net.recv_overflow,
        recv_stalls: net.recv_stalls,
        dropped_duplicate: t.dropped_duplicate,
        acks: t.acks,
        ack_packets: t.ack_packets,
        lost_reported: t.lost_reported,
        events: net.events,
        events_per_wall_s: net.events as f64 / ran.wall_s.max(1e-9),
        wall_s: ran.wall_s,
        simulated_ns: end,
        trace_hash: format!("{:016x}", world.proto.trace.value()),
        app: world.app_report(),
        app_history: cfg
            .workload
            .keep_history
            .then(|| world.app_history_json())
            .flatten(),
        ..fault_report(world, cfg, ran.recovered)
    }
}

/// The report's fields on faults: the checkers' verdict (with what did not drain) and §5.2's
/// failure handling, `recovered` hosts among them; the other fields are left default.
fn fault_report<Q: EventQueue<Ev>>(world: &World<Q>, cfg: &SimConfig, recovered: u64) -> Report {
    let s = &world.proto.stats;
    let checker = world.proto.checker.as_ref();
    let (mut violations, mut violation_samples, checked_deliveries) = match checker {
        Some(c) => (
            c.violation_count(),
            c.violations()
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>(),
            c.deliveries_checked(),
        ),
        None => (0, Vec::new(), 0),
    };
    let optimistic = world.proto.opt.as_ref().map(|o| {
        let (n, samples) = o.violations();
        violations += n;
        violation_samples.extend(samples);
        let deltas: Vec<u64> = world
            .hosts()
            .flat_map(|h| h.optimistic_delta_ns())
            .collect();
        o.report(&deltas)
    });
    Report {
        undelivered_reliable: checker.map_or(0, |c| c.undelivered_reliable()),
        violations,
        violation_samples,
        checked: cfg.check,
        checked_deliveries,
        undrained: checker.map_or(0, |c| c.undrained()),
        undrained_stale: checker.map_or(0, |c| c.undrained_stale()),
        undrained_samples: checker.map_or_else(Vec::new, |c| c.undrained_samples().to_vec()),
        send_failed: s.send_failed,
        links_removed: world
            .switches()
            .map(|w| w.stats().links_removed)
            .sum::<u64>()
            + world
                .aggregators()
                .map(|a| a.stats().links_removed)
                .sum::<u64>(),
        failure_rounds: world.proto.failure_rounds.clone(),
        recalled: s.recalled,
        proc_failed_callbacks: s.proc_failed_callbacks,
        ctrl_messages: s.ctrl_messages,
        ctrl_lost: s.ctrl_lost,
        ctrl_resent: world.hosts().map(|h| h.stats().ctrl_resent).sum::<u64>()
            + world
                .switches()
                .map(|w| w.stats().reports_resent)
                .sum::<u64>(),
        sends_to_failed: s.sends_to_failed,
        forwarded: world.hosts().map(|h| h.stats().forwarded).sum(),
        packets_blackholed: s.packets_blackholed,
        recovered,
        rejoined: s.rejoined,
        restarts: s.restarts,
        departed: s.departed.clone(),
        rejoined_delivered_to: s.rejoined_delivered_to,
        rejoined_delivered_from: s.rejoined_delivered_from,
        settled_delivered: world.hosts().map(|h| h.stats().settled_delivered).sum(),
        settled_discarded: world.hosts().map(|h| h.stats().settled_discarded).sum(),
        stall_ns_be: world.stall_ns().map_or(0.0, |s| s.0),
        stall_ns_reliable: world.stall_ns().map_or(0.0, |s| s.1),
        optimistic,
        ..Report::default()
    }
}
