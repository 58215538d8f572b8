//! The baseline protocols of the paper's scalability comparison (§7.2, Fig. 8) — fixed
//! sequencer on a host or a switch, token, Lamport timestamps, from `onepipe-baselines`, and
//! ToTo with its all-ack baseline — run on
//! the same simulated data center as 1Pipe: same topology and ECMP routing, same links and
//! faults, same host CPU costs, same clocks and workloads (see [`protocol`] for how
//! it places and charges each role), under their own checkers ([`check`]; ToTo and all-ack
//! also [`causal`]).
//!
//! ```
//! use onepipe_baselines::Protocol;
//! use onepipe_sim::baseline::{run_baseline, BaselineConfig};
//! use onepipe_sim::{NetworkConfig, SimConfig, TopologySpec, WorkloadConfig};
//! let cfg = SimConfig {
//!     net: NetworkConfig {
//!         topology: TopologySpec::Rack { hosts: 4 },
//!         ..Default::default()
//!     },
//!     workload: WorkloadConfig {
//!         duration_ns: 100_000,
//!         ..Default::default()
//!     },
//!     ..SimConfig::default()
//! };
//! let report = run_baseline(&cfg, &BaselineConfig::new(Protocol::Lamport), &mut |_| {}).unwrap();
//! assert_eq!(report.violations, 0);
//! assert!(report.drained && report.delivered == report.sent);
//! ```

pub mod causal;
pub mod check;
pub mod config;
pub mod protocol;

pub use config::BaselineConfig;

use crate::config::{ConfigError, SimConfig};
use crate::metrics::Summary;
use crate::queue::{EventQueue, QuaternaryHeap, QueueKind, RadixHeap, StdBinaryHeap};
use protocol::{BaseWorld, Ev};
use serde::Serialize;

/// The outcome of a baseline run (the JSON of `onepipe sim --protocol … --json`). Keys shared
/// with the 1Pipe report mean the same.
#[derive(Clone, Debug, Serialize)]
pub struct BaseReport {
    /// The seed.
    pub seed: u64,
    /// The protocol (`--protocol` name).
    pub protocol: String,
    /// The topology, in words.
    pub topology: String,
    /// Hosts.
    pub hosts: u32,
    /// Processes (the sequencer excluded).
    pub procs: u32,
    /// Where the sequencer runs, if the protocol has one.
    pub sequencer_node: Option<String>,
    /// The sequencer's busy share of the run (its CPU or pipeline), if any.
    pub sequencer_busy_share: Option<f64>,
    /// The Lamport clock exchange interval, ns (Lamport only).
    pub heartbeat_interval_ns: Option<u64>,
    /// Messages sent (one per destination of each send).
    pub sent: u64,
    /// Sends accepted (a broadcast counts once).
    pub scatterings: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Checker violations (0 when checks are off).
    pub violations: u64,
    /// The first violations, described.
    pub violation_samples: Vec<String>,
    /// Whether the checkers ran.
    pub checked: bool,
    /// Deliveries the checkers examined.
    pub checked_deliveries: u64,
    /// Deliveries the causal-order check examined (ToTo and all-ack, checks on); `None`:
    /// unchecked (the protocol promises no causal order, or checks are off).
    pub causal_checked: Option<u64>,
    /// Messages receivers gave up on (`Lost`).
    pub lost_reported: u64,
    /// Sends reported lost before being ordered (`SendFailed`).
    pub send_failed: u64,
    /// Messages delivered by nobody and never reported (the sequencer's best-effort upstream:
    /// a lost `SubmitLost`, or a sender's tail lost on the way). Checks on, drained runs.
    pub unordered_unreported: u64,
    /// Sends refused because a core's send queue or the sequencer's input was full.
    pub sends_rejected: u64,
    /// Sends the protocol refused (the token's queue was full).
    pub sends_refused_full: u64,
    /// Whether everything sent was delivered or reported before the drain limit.
    pub drained: bool,
    /// Messages still on their way when the drain limit ended the run (checks on).
    pub undrained: u64,
    /// Messages delivered during the sending period, per second per process.
    pub throughput_msgs_per_s_per_proc: f64,
    /// Send → deliver latency (true time), ns.
    pub latency_ns: Summary,
    /// Packets put on links.
    pub packets: u64,
    /// Packets between processes of one host (no network).
    pub local_packets: u64,
    /// Heartbeat and sync bytes over the capacity of all links during the run.
    pub heartbeat_bandwidth_share: f64,
    /// Packets the non-FIFO option held back.
    pub reordered_packets: u64,
    /// Packets the loss model dropped.
    pub packets_lost: u64,
    /// Packets the duplication model copied.
    pub packets_duplicated: u64,
    /// Packets dropped at full receive queues (`--recv-queue`).
    pub recv_overflow: u64,
    /// Receiver stalls (`--recv-stall-every`).
    pub recv_stalls: u64,
    /// Duplicates the roles recognised and dropped.
    pub dropped_duplicate: u64,
    /// Packets the roles dropped as invalid.
    pub dropped_invalid: u64,
    /// NACKs sent.
    pub nacks: u64,
    /// Messages retransmitted in answer to NACKs.
    pub retransmits: u64,
    /// Heartbeats (Lamport clocks, sequencer syncs) sent.
    pub heartbeats: u64,
    /// Token transfers (first transmissions).
    pub token_passes: u64,
    /// Token retransmissions.
    pub token_retransmits: u64,
    /// Events processed.
    pub events: u64,
    /// Events per wall-clock second.
    pub events_per_wall_s: f64,
    /// Wall-clock seconds.
    pub wall_s: f64,
    /// Simulated nanoseconds (sending plus the drain actually needed).
    pub simulated_ns: u64,
    /// PLATO's optimistic delivery (`--protocol plato` only).
    pub optimistic: Option<OptReport>,
    /// What arrived where ([`BaselineConfig::log_arrivals`] only).
    #[serde(skip)]
    pub arrivals: Option<ArrivalLog>,
    /// ToTo and all-ack (`None` otherwise): how many deliveries during the sending period had
    /// each pair of §6's index of latency τ and DAG width ω, summed over the machines, at index
    /// `τ · (procs + 1) + ω` (`TotoEndpoint::latency_index`). The drain is left out: there the
    /// last messages wait for machines that stopped sending.
    #[serde(skip)]
    pub toto_index: Option<Vec<u64>>,
    /// Every delivery and rollback, in the order they happened
    /// ([`BaselineConfig::log_deliveries`] only).
    #[serde(skip)]
    pub deliveries: Option<Vec<DeliverySample>>,
    /// Hash of every send, delivery and loss report, in order.
    pub trace_hash: String,
}

pub use crate::optcheck::OptReport;

/// The arrivals of a run with [`BaselineConfig::log_arrivals`].
#[derive(Clone, Debug, Default)]
pub struct ArrivalLog {
    /// Per process, PLATO's direct copies (`Early` packets) in the order its core took them
    /// in: (sender, the sender's message id). Dropped copies are not in it; resent ones
    /// neither.
    pub early: Vec<Vec<(u32, u64)>>,
    /// Packets every core (the sequencer's too) took in; with
    /// [`BaseReport::recv_overflow`], the packets that arrived at receive queues.
    pub packets_taken_in: u64,
}

/// One delivery or rollback of a run with [`BaselineConfig::log_deliveries`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliverySample {
    /// When, true time, ns: a delivery's (PLATO: when it became usable, the earlier of Tm and
    /// the confirm), or a rollback's.
    pub at_ns: u64,
    /// Send → delivery (PLATO: send → usable), ns; `None` for a rollback.
    pub latency_ns: Option<u64>,
    /// PLATO: the receiver's Δ then, ns.
    pub delta_ns: Option<u64>,
}

/// Builds and runs a baseline simulation: `base.protocol` on the network, workload and faults
/// of `cfg`. `progress` is called now and then with the fraction done.
pub fn run_baseline(
    cfg: &SimConfig,
    base: &BaselineConfig,
    progress: &mut dyn FnMut(f64),
) -> Result<BaseReport, ConfigError> {
    base.validate(cfg)?;
    match cfg.net.queue {
        QueueKind::Radix => run_with(cfg, base, RadixHeap::new(), progress),
        QueueKind::Quaternary => run_with(cfg, base, QuaternaryHeap::new(), progress),
        QueueKind::Binary => run_with(cfg, base, StdBinaryHeap::new(), progress),
    }
}

/// How often a draining run checks for quiescence (the check scans every role).
const DRAIN_STEP_NS: u64 = 20_000;

fn run_with<Q: EventQueue<Ev>>(
    cfg: &SimConfig,
    base: &BaselineConfig,
    queue: Q,
    progress: &mut dyn FnMut(f64),
) -> Result<BaseReport, ConfigError> {
    let started = std::time::Instant::now();
    let mut world =
        BaseWorld::new(cfg.clone(), base.clone(), queue).map_err(|message| ConfigError {
            flag: "--topology",
            message,
        })?;
    let (drained, toto_index) = drive(&mut world, cfg, progress);
    let end = world.now();
    let ordered = world.ordered_per_receiver();
    if let Some(c) = world.proto.checker.as_mut() {
        c.finish(end, cfg.seed, drained, ordered.as_deref());
    }
    if let Some(o) = world.proto.opt.as_mut() {
        o.finish(end, drained, |_| true);
    }
    let wall_s = started.elapsed().as_secs_f64();
    let mut r = report(&world, cfg, base, drained, wall_s);
    r.toto_index = toto_index;
    Ok(r)
}

/// Runs `world` for the sending period, then drains it (until quiescent or the drain limit);
/// returns whether it drained, and ToTo's (τ, ω) counts at the end of the sending period
/// ([`BaseReport::toto_index`]).
fn drive<Q: EventQueue<Ev>>(
    world: &mut BaseWorld<Q>,
    cfg: &SimConfig,
    progress: &mut dyn FnMut(f64),
) -> (bool, Option<Vec<u64>>) {
    let limit = cfg.workload.duration_ns + cfg.workload.drain_ns;
    let mut report_progress = |t: u64| progress(t as f64 / cfg.workload.duration_ns.max(1) as f64);
    world.run_until(cfg.workload.duration_ns, &mut report_progress);
    let toto_index = world.toto_index();
    while world.now() < limit && !world.quiescent() {
        let next = (world.now() + DRAIN_STEP_NS).min(limit);
        world.run_until(next, &mut report_progress);
    }
    (world.quiescent(), toto_index)
}

/// The roles' counters, summed.
fn role_totals<Q: EventQueue<Ev>>(world: &BaseWorld<Q>) -> onepipe_baselines::BaseStats {
    let mut totals = onepipe_baselines::BaseStats::default();
    for r in world.roles() {
        let s = r.stats();
        totals.dropped_duplicate += s.dropped_duplicate;
        totals.dropped_invalid += s.dropped_invalid;
        totals.nacks_sent += s.nacks_sent;
        totals.retransmitted += s.retransmitted;
        totals.heartbeats_sent += s.heartbeats_sent;
        totals.token_passes += s.token_passes;
        totals.token_retransmits += s.token_retransmits;
    }
    totals
}

/// The report of the finished run of `base` on `world` (configured by `cfg`), `drained` or
/// not, that took `wall_s` wall-clock seconds.
fn report<Q: EventQueue<Ev>>(
    world: &BaseWorld<Q>,
    cfg: &SimConfig,
    base: &BaselineConfig,
    drained: bool,
    wall_s: f64,
) -> BaseReport {
    let end = world.now();
    let totals = role_totals(world);
    let topo = world.topology();
    let capacity_bytes = topo.links().len() as f64 * cfg.net.link_gbps / 8.0 * end as f64;
    let (s, net) = (&world.proto.stats, &world.net);
    let (violations, violation_samples, checked_deliveries, undrained, unordered_unreported) =
        checker_totals(world);
    let optimistic = opt_report(world);
    let lamport = base.protocol == onepipe_baselines::Protocol::Lamport;
    BaseReport {
        seed: cfg.seed,
        protocol: base.protocol.name().to_string(),
        topology: topo.describe(),
        hosts: topo.hosts(),
        procs: world.procs(),
        sequencer_node: world.sequencer_node(),
        sequencer_busy_share: world
            .sequencer_busy_ns()
            .map(|b| b as f64 / end.max(1) as f64),
        heartbeat_interval_ns: lamport.then(|| world.heartbeat_interval_ns()),
        sent: s.messages_sent,
        scatterings: s.scatterings,
        delivered: s.delivered,
        violations,
        violation_samples,
        checked: cfg.check,
        checked_deliveries,
        causal_checked: world
            .proto
            .causal
            .as_ref()
            .map(causal::CausalCheck::checked),
        lost_reported: s.lost_reported,
        send_failed: s.send_failed,
        unordered_unreported,
        sends_rejected: net.sends_rejected,
        sends_refused_full: s.sends_refused_full,
        drained,
        undrained,
        throughput_msgs_per_s_per_proc: s.delivered_in_period as f64
            / f64::from(world.procs())
            / (cfg.workload.duration_ns as f64 / 1e9),
        latency_ns: world.proto.latency.summary(),
        packets: net.packets,
        local_packets: s.local_packets,
        heartbeat_bandwidth_share: net.background_bytes as f64 / capacity_bytes.max(1.0),
        reordered_packets: net.reordered_packets,
        packets_lost: net.packets_lost,
        packets_duplicated: net.packets_duplicated,
        recv_overflow: net.recv_overflow,
        recv_stalls: net.recv_stalls,
        dropped_duplicate: totals.dropped_duplicate,
        dropped_invalid: totals.dropped_invalid,
        nacks: totals.nacks_sent,
        retransmits: totals.retransmitted,
        heartbeats: totals.heartbeats_sent,
        token_passes: totals.token_passes,
        token_retransmits: totals.token_retransmits,
        events: net.events,
        events_per_wall_s: net.events as f64 / wall_s.max(1e-9),
        wall_s,
        simulated_ns: end,
        optimistic,
        arrivals: world.proto.arrivals.clone(),
        toto_index: None,
        deliveries: world.proto.deliveries.clone(),
        trace_hash: format!("{:016x}", world.proto.trace.value()),
    }
}

/// The checkers' verdicts: violations (both checkers), their first samples, deliveries checked,
/// messages undrained, and messages delivered by nobody and never reported.
fn checker_totals<Q: EventQueue<Ev>>(world: &BaseWorld<Q>) -> (u64, Vec<String>, u64, u64, u64) {
    let (mut violations, mut samples, checked, undrained, unreported) = match &world.proto.checker {
        Some(c) => (
            c.violation_count(),
            c.violations()
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>(),
            c.deliveries_checked(),
            c.undrained(),
            c.unordered_unreported(),
        ),
        None => (0, Vec::new(), 0, 0, 0),
    };
    if let Some(o) = &world.proto.opt {
        let (n, more) = o.violations();
        violations += n;
        samples.extend(more);
    }
    if let Some(c) = &world.proto.causal {
        violations += c.violations();
        samples.extend(c.samples().iter().cloned());
    }
    (violations, samples, checked, undrained, unreported)
}

/// The optimistic-delivery part of a PLATO run's report.
fn opt_report<Q: EventQueue<Ev>>(world: &BaseWorld<Q>) -> Option<OptReport> {
    let deltas: Vec<u64> = world
        .roles()
        .iter()
        .filter_map(|r| match r {
            onepipe_baselines::BaseNode::Plato(e) => e.delta_ns(),
            _ => None,
        })
        .collect();
    world.proto.opt.as_ref().map(|o| o.report(&deltas))
}
