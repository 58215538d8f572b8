//! What `onepipe up` makes of a run: it reads every process's records and counters, feeds them
//! to the simulator's checker in the order things happened, sums up the transport, and prints
//! the summary and writes the JSON report. The orchestration that produced the records is
//! [`super`]'s.

mod feed;
mod hooks;
mod print;

use super::{nodes, Role, Run};
use crate::live::records::NodeRecords;
use crate::live::{KillTarget, UpArgs};
use feed::Feed;
use onepipe_proto::Timestamp;
use onepipe_runtime::clock::monotonic_ns;
use onepipe_runtime::cluster::Cluster;
use onepipe_sim::check::Checker;
use onepipe_sim::metrics::Summary;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

pub(super) use print::finish;

/// The report of `onepipe up --json`: the keys of `onepipe sim` where they apply. Its groups
/// are written flat, a key each, in the order of their fields.
#[derive(Debug, Serialize)]
pub struct UpReport {
    /// Always `live`.
    pub mode: &'static str,
    /// Ordering on (false: `--unordered`).
    pub ordered: bool,
    /// `chip` or `host` (`--aggregator-mode`).
    pub aggregator_mode: String,
    /// `be` or `reliable`.
    pub service: &'static str,
    /// The workload's name.
    pub workload: &'static str,
    /// Hosts.
    pub hosts: u32,
    /// Endpoint processes.
    pub procs: u32,
    /// Aggregator layers.
    pub layers: u8,
    /// Aggregator processes.
    pub aggregators: usize,
    /// Payload bytes per message.
    pub msg_size: usize,
    /// Sends per second per process asked for.
    pub rate_per_proc: f64,
    /// Sending time, seconds.
    pub duration_s: f64,
    /// T_beacon, ns.
    pub beacon_interval_ns: u64,
    /// Messages sent (one per destination of each scattering).
    pub sent: u64,
    /// Scatterings sent.
    pub scatterings: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Of which reliable.
    pub delivered_reliable: u64,
    /// What the checkers found.
    #[serde(flatten)]
    pub checks: ChecksReport,
    /// The endpoints' counters, summed.
    #[serde(flatten)]
    pub sums: EndpointSums,
    /// Optimistic delivery (`--optimistic-delta`): its hooks, checked; its violations are in
    /// `violations` too.
    pub optimistic: Option<hooks::HooksReport>,
    /// Messages delivered per second, all receivers together: `delivered` over
    /// `delivery_span_s`.
    pub throughput_msgs_per_s: f64,
    /// From the start of sending to the last delivery, or the sending time if longer, s.
    pub delivery_span_s: f64,
    /// Send call → application receive, ns.
    pub latency_ns: Summary,
    /// The transport, summed over every process.
    #[serde(flatten)]
    pub transport: TransportReport,
    /// How the run was protected, and what was refused (docs/SECURITY.md).
    pub auth: AuthSummary,
    /// §5.2 controller forwarding: packets the controllers relayed (data and ACKs).
    pub forwarded_by_controller: u64,
    /// Packets the aggregators dropped for `--blackhole` test faults.
    pub blackholed: u64,
    /// Packets the aggregators dropped at `--cut` uplinks.
    pub cut_dropped: u64,
    /// Per process: its counters (aggregators and endpoints).
    pub counters: BTreeMap<String, BTreeMap<String, u64>>,
    /// The injected failures and what §5.2 made of them.
    #[serde(flatten)]
    pub failures: FailuresReport,
    /// Wall-clock seconds for the whole command.
    pub wall_s: f64,
}

/// What the checkers found (a group of [`UpReport`]'s keys).
#[derive(Debug, Serialize)]
pub struct ChecksReport {
    /// Checker violations (0 when the checkers did not run).
    pub violations: u64,
    /// The first violations, described.
    pub violation_samples: Vec<String>,
    /// Whether the checkers ran (always when ordered; with `--unordered`, only with `--check`).
    pub checked: bool,
    /// Deliveries the checkers examined.
    pub checked_deliveries: u64,
    /// Reliable messages not delivered everywhere (must be 0).
    pub undelivered_reliable: u64,
    /// Every endpoint drained before its limit.
    pub drained: bool,
    /// Messages neither delivered nor reported when a drain limit ended the run.
    pub undrained: u64,
    /// The first of them: sender, scattering, timestamp, destinations still open.
    pub undrained_samples: Vec<String>,
    /// Messages whose causal dependencies went unchecked (ToTo and all-ack with `--kill`): a
    /// killed sender's messages are rebuilt from what the survivors delivered, and what it had
    /// delivered before it sent them died with it, so the causal check sees them following
    /// only their sender's earlier messages. Order, agreement and all-or-none judge them fully.
    pub causal_unchecked: u64,
}

/// The endpoints' counters, summed over every process (a group of [`UpReport`]'s keys).
#[derive(Debug, Default, Serialize)]
pub struct EndpointSums {
    /// Packets dropped because they arrived below the barrier (§4.1).
    pub dropped_late: u64,
    /// Send-failed notifications.
    pub send_failed: u64,
    /// Of which reported lost after the acknowledgement timeout.
    pub lost_reported: u64,
    /// Reliable retransmissions.
    pub retransmits: u64,
    /// Sends refused with `SendError::Full` (and retried).
    pub sends_refused_full: u64,
    /// Best-effort deliveries refused because the application's queue was full (NAKed).
    pub recv_refused_full: u64,
}

/// The transport's counters, summed over every process (a group of [`UpReport`]'s keys).
#[derive(Debug, Serialize)]
pub struct TransportReport {
    /// UDP datagrams sent by every process.
    pub datagrams_sent: u64,
    /// 1Pipe packets in them.
    pub packets_sent: u64,
    /// Packets per datagram (coalescing).
    pub packets_per_datagram: f64,
    /// UDP datagrams sent per second, all processes together, over `delivery_span_s`.
    pub datagrams_per_s: f64,
    /// The largest datagram any process used (UDP payload bytes; `--datagram-len-max`).
    pub datagram_len_max: u64,
    /// Some process sent with UDP GSO (several datagrams per send).
    pub gso: bool,
    /// Some process received with UDP GRO.
    pub gro: bool,
    /// Sends of several datagrams at once (UDP GSO), all processes.
    pub gso_sends: u64,
    /// Receives of several datagrams at once (UDP GRO), all processes.
    pub gro_receives: u64,
    /// Datagrams the kernel dropped at a full socket receive buffer (`SO_RXQ_OVFL`), all
    /// processes: where datagrams went that nobody received.
    pub datagrams_dropped_rcvbuf: u64,
    /// CPU seconds each process used (user and system), by name: `p0`, `tor-0`, `controller`.
    pub cpu_s: BTreeMap<String, f64>,
    /// Their sum.
    pub cpu_s_total: f64,
    /// Datagrams from unknown addresses or malformed, dropped by any process.
    pub garbage_dropped: u64,
    /// Control lines the controller could not read.
    pub controller_malformed: u64,
}

/// The injected failures, and what §5.2 failure handling made of them (a group of [`UpReport`]'s keys).
#[derive(Debug, Serialize)]
pub struct FailuresReport {
    /// Members killed with `--kill`.
    pub kills: Vec<KillReport>,
    /// Whether the controller was killed with no standby (later failures are not repaired).
    pub controller_killed: bool,
    /// The controllers that led, in order (with --etcd, a standby that took over follows).
    pub leaders: Vec<String>,
    /// §5.2 rounds: which controller declared and which resumed each.
    pub rounds: Vec<RoundReport>,
    /// §5.2 Callback: for each failed process (`p3`), the failure timestamp each correct
    /// process was told (`p0` → ts). Restricted failure atomicity needs one value everywhere.
    pub failure_callbacks: BTreeMap<String, BTreeMap<String, u64>>,
    /// §5.2: processes the controller declared failed, with their failure timestamps.
    pub declared_failed: Vec<DeclaredReport>,
    /// §5.2 "the controller notifies process of its own failure": the processes still running
    /// that were told and froze (no more sends, reliable delivery stopped), with the failure
    /// timestamp their role holds.
    pub frozen: BTreeMap<String, u64>,
    /// §5.2 "joins 1Pipe as a new process": endpoints that came back (`--restart`) and rejoined.
    pub rejoined: Vec<RejoinReport>,
    /// Messages the rejoined processes delivered (all of them, under their new ids).
    pub rejoined_delivered: u64,
    /// Longest time, in ms, a correct process delivered nothing after the first kill (while
    /// the workload was sending); 0 without kills.
    pub stall_ms: f64,
    /// The longest time any process delivered nothing while every process was sending (from
    /// 50 ms after the start to the end of sending), ms: what a stalled barrier would show
    /// (a key rotation must not, docs/SECURITY.md).
    pub delivery_gap_ms: f64,
    /// The correct process that stalled longest.
    pub stall_proc: Option<u32>,
    /// Per correct process: messages it delivered after the last kill.
    pub delivered_after_kills: BTreeMap<String, u64>,
}

/// One `--kill`.
#[derive(Debug, Serialize)]
pub struct KillReport {
    /// `proc:3@2s`, `agg:tor-0@3s`, `controller@4s`.
    pub what: String,
    /// Seconds after sending started, when it was killed (`None`: it never was).
    pub at_s: Option<f64>,
    /// Its process id.
    pub pid: u32,
}

/// One endpoint that rejoined as a new process (§5.2).
#[derive(Debug, Serialize)]
pub struct RejoinReport {
    /// Its process id before it failed (its slot: `p3`).
    pub proc: u32,
    /// Its new process id.
    pub as_proc: u32,
    /// Messages it sent under the new id.
    pub sent: u64,
    /// Messages it delivered under the new id.
    pub delivered: u64,
}

/// One process the controller declared failed (§5.2 Determine).
#[derive(Debug, Serialize)]
pub struct DeclaredReport {
    /// The process.
    pub proc: u32,
    /// Its failure timestamp (raw ns).
    pub failure_ts: u64,
    /// The controller's round.
    pub round: u32,
    /// Seconds after sending started, when `up` heard of it.
    pub at_s: f64,
}

/// One §5.2 round, by controller.
#[derive(Debug, Serialize)]
pub struct RoundReport {
    /// The round.
    pub round: u32,
    /// The controller that declared it first.
    pub declared_by: String,
    /// The controller that resumed it (`None`: it never did).
    pub resumed_by: Option<String>,
}

/// The counters (numbers) of a JSON object, by name.
fn counters_of(v: &serde_json::Value) -> BTreeMap<String, u64> {
    v.as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_u64().map(|v| (k.clone(), v)))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads every node's records and counters, runs the checkers, and sums up.
pub(super) fn report(
    args: &UpArgs,
    cluster: &Cluster,
    run: &Run<'_>,
    started: Instant,
) -> Result<UpReport, String> {
    let n = cluster.procs();
    let mut checker = Checker::new(n, 1, 0, fifo(args, run));
    let killed = killed_procs(run);
    let gone = |p: u32| killed.contains(&p) || run.declared.contains_key(&p);
    let Nodes {
        all,
        ids,
        rejoined,
        frozen,
        mut counters,
        sums,
    } = read_nodes(run, n, &gone, &killed, &mut checker)?;
    daemon_counters(run, &mut counters);
    let mut feed = Feed::new(n, &all, &ids);
    let drained = nodes(&run.roles).all(|i| run.heard[i].gone || run.heard[i].done == Some(true));
    let checked = !args.unordered || args.check;
    let mut checks = if args.protocol.baseline() {
        base_checks(args, run, n, &mut feed, &all, &killed, drained)?
    } else {
        feed.send_rebuilt(&mut checker, args.work.workload, &all, &ids, &killed);
        feed.run(&mut checker, &all);
        declare_failed(run, &killed, &ids, &mut checker);
        checker.finish(monotonic_ns(), args.work.seed, drained);
        ChecksReport::of(&checker, checked, drained)
    };
    let optimistic = hooks::check(&all, drained, monotonic_ns());
    if let Some(o) = &optimistic {
        checks.violations += o.violations;
        checks
            .violation_samples
            .extend(o.violation_samples.iter().cloned());
    }
    let duration_s = args.work.duration as f64 / 1e9;
    // Deliveries go on after sending stops (queues drain): divide by the time they took, or an
    // overloaded run that queues seconds of messages would count them as throughput.
    let last_delivery_s = feed.last_delivery_ns.saturating_sub(run.t0) as f64 / 1e9;
    let delivery_span_s = duration_s.max(last_delivery_s);
    let malformed = controller_stat(run, "malformed");
    let transport = TransportReport::of(&counters, delivery_span_s, malformed);
    let failures = FailuresReport::of(args, run, &all, &gone, rejoined, frozen);
    Ok(UpReport {
        mode: "live",
        ordered: !args.unordered,
        aggregator_mode: cluster.aggregator_mode.to_string(),
        service: args.work.service.name(),
        workload: args.work.workload.name(),
        hosts: args.layout.hosts,
        procs: n,
        layers: args.layout.layers,
        aggregators: cluster.aggregators.len(),
        msg_size: args.work.msg_size,
        rate_per_proc: args.work.rate,
        duration_s,
        beacon_interval_ns: cluster.beacon_interval_ns,
        sent: feed.sent,
        scatterings: feed.scatterings,
        delivered: feed.delivered,
        delivered_reliable: feed.delivered_reliable,
        checks,
        sums,
        optimistic,
        throughput_msgs_per_s: feed.delivered as f64 / delivery_span_s,
        delivery_span_s,
        latency_ns: feed.latency.summary(),
        transport,
        auth: AuthSummary::of(&cluster.auth_mode().to_string(), &counters),
        forwarded_by_controller: controller_stat(run, "forwarded"),
        blackholed: aggregator_stat(run, "blackholed"),
        cut_dropped: aggregator_stat(run, "cut_dropped"),
        counters,
        failures,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// Whether every link of the run kept its order, so that a late packet is a violation.
fn fifo(args: &UpArgs, run: &Run<'_>) -> bool {
    // Every link of a live cluster is FIFO (UDP between two sockets on one machine keeps its
    // order; coalescing keeps each port's order), so a packet that arrives below its
    // receiver's barrier means a barrier lied (`lower-bound`) — unless a member died, or an
    // aggregator timed out an input that was only slow and took it back (§4.2): then late
    // packets are that link's, and expected.
    let links_removed = aggregator_stat(run, "links_removed");
    // A packet forwarded by the controller (§5.2) arrives beside the data path, not in its
    // order: its receiver's best-effort barrier may be past it.
    !args.unordered
        && args.kill.is_empty()
        && args.blackhole.is_empty()
        && args.cut.is_empty()
        && links_removed == 0
}

/// The endpoints `--kill` killed.
fn killed_procs(run: &Run<'_>) -> BTreeSet<u32> {
    run.kills
        .iter()
        .filter(|k| k.fired.is_some())
        .filter_map(|k| match k.kill.target {
            KillTarget::Proc(p) => Some(p),
            _ => None,
        })
        .collect()
}

/// What the endpoints recorded, read back by [`read_nodes`].
struct Nodes {
    /// Each slot's records (`None`: a process that failed and left none).
    all: Vec<Option<NodeRecords>>,
    /// Each slot's process id at the end (its own, or the one it rejoined as).
    ids: Vec<u32>,
    /// The slots that rejoined as new processes (§5.2).
    rejoined: Vec<RejoinReport>,
    /// The processes still running that were told they were declared failed, and froze.
    frozen: BTreeMap<String, u64>,
    /// Each endpoint's counters, by name (`p3`).
    counters: BTreeMap<String, BTreeMap<String, u64>>,
    /// Their sums.
    sums: EndpointSums,
}

/// Reads every endpoint's records and summary; tells `checker` of the rejoined processes
/// that crashed before (`killed`) and of the recalled scatterings. A process that is `gone`
/// may have left nothing.
fn read_nodes(
    run: &Run<'_>,
    n: u32,
    gone: &dyn Fn(u32) -> bool,
    killed: &BTreeSet<u32>,
    checker: &mut Checker,
) -> Result<Nodes, String> {
    let mut all: Vec<Option<NodeRecords>> = Vec::with_capacity(n as usize);
    let mut counters: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let sum = |c: &BTreeMap<String, u64>, k: &str| c.get(k).copied().unwrap_or(0);
    let mut sums = EndpointSums::default();
    let mut frozen = BTreeMap::new();
    // Each slot's process id at the end (its own, or the one it rejoined as), and the rejoins.
    let mut ids: Vec<u32> = Vec::with_capacity(n as usize);
    let mut rejoined: Vec<RejoinReport> = Vec::new();
    for p in 0..n {
        let (recs, summary) = match read_node(run, p) {
            Ok(r) => r,
            // A killed or cut-off process may have left nothing (or half a file): expected.
            Err(_) if gone(p) => {
                all.push(None);
                ids.push(p);
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut c = counters_of(&summary);
        let driver = counters_of(&summary["driver"]);
        sums.dropped_late += sum(&c, "dropped_late");
        sums.send_failed += sum(&c, "send_failed");
        sums.lost_reported += sum(&c, "lost");
        sums.retransmits += sum(&c, "retransmits");
        sums.sends_refused_full += sum(&c, "sends_refused_full");
        sums.recv_refused_full += sum(&c, "recv_refused_full");
        if let Some(ts) = summary["frozen_ts"].as_u64() {
            frozen.insert(format!("p{p}"), ts);
        }
        // §5.2: an endpoint that rejoined runs as a new process from then on; every record
        // names the process it was made as. A restarted one (`--restart`) lost its old
        // process's records with its memory: that process crashed. One that was only declared
        // failed (paused, cut off) and rejoined recorded both.
        let id = summary["proc"].as_u64().map_or(p, |v| v as u32);
        if id != p {
            if killed.contains(&p) {
                checker.on_crash(0, p);
            }
            rejoined.push(RejoinReport {
                proc: p,
                as_proc: id,
                sent: recs.sends.iter().filter(|s| s.proc == id).count() as u64,
                delivered: recs.deliveries.iter().filter(|d| d.dst == id).count() as u64,
            });
        }
        ids.push(id);
        // §5.2 Recall: these scatterings must be delivered nowhere.
        for ts in summary["recalled"].as_array().into_iter().flatten() {
            if let Some(ts) = ts.as_u64() {
                checker.on_recalled(id, Timestamp::new(ts));
            }
        }
        c.extend(driver);
        counters.insert(format!("p{p}"), c);
        all.push(Some(recs));
    }
    Ok(Nodes {
        all,
        ids,
        rejoined,
        frozen,
        counters,
        sums,
    })
}

/// Endpoint `p`'s records (`p<N>.rec`) and its summary (`p<N>.json`).
fn read_node(run: &Run<'_>, p: u32) -> Result<(NodeRecords, serde_json::Value), String> {
    let path = run.dir.join(format!("p{p}.rec"));
    NodeRecords::read(&path)
        .map_err(|e| format!("p{p}: {e}"))
        .and_then(|recs| {
            let summary: serde_json::Value = std::fs::read_to_string(path.with_extension("json"))
                .ok()
                .and_then(|s| serde_json::from_str(&s).ok())
                .ok_or_else(|| format!("p{p}: no summary"))?;
            Ok((recs, summary))
        })
}

/// Adds the aggregators' and the controllers' counters, from the `stats` line each said.
fn daemon_counters(run: &Run<'_>, counters: &mut BTreeMap<String, BTreeMap<String, u64>>) {
    for (i, role) in run.roles.iter().enumerate() {
        if let (Role::Aggregator(name), Some(stats)) = (role, &run.heard[i].stats) {
            counters.insert(name.clone(), counters_of(&stats["counters"]));
        }
        if let (Role::Controller(c), Some(stats)) = (role, &run.heard[i].stats) {
            let name = match run.etcd {
                Some(_) => format!("controller-{c}"),
                None => "controller".to_string(),
            };
            counters.insert(name, counters_of(stats));
        }
    }
}

/// Counter `k`, summed over the controllers.
fn controller_stat(run: &Run<'_>, k: &str) -> u64 {
    (0..run.roles.len())
        .filter(|&i| matches!(run.roles[i], Role::Controller(_)))
        .filter_map(|i| run.heard[i].stats.as_ref())
        .filter_map(|s| s[k].as_u64())
        .sum()
}

/// Counter `k`, summed over the aggregators.
fn aggregator_stat(run: &Run<'_>, k: &str) -> u64 {
    (0..run.roles.len())
        .filter(|&i| matches!(run.roles[i], Role::Aggregator(_)))
        .filter_map(|i| run.heard[i].stats.as_ref())
        .map(|s| s["counters"][k].as_u64().unwrap_or(0))
        .sum()
}

/// Tells `checker` of the failed processes (§5.2): the declared processes are excused as
/// receivers and checked as senders against their failure timestamps; a killed one never
/// declared (no controller) promises nothing.
fn declare_failed(run: &Run<'_>, killed: &BTreeSet<u32>, ids: &[u32], checker: &mut Checker) {
    for (&p, &(_, ts, _)) in &run.declared {
        checker.on_declared(&[p], Timestamp::new(ts));
    }
    for &p in killed {
        // A restarted one crashed before it rejoined (above).
        if ids.get(p as usize).is_none_or(|&id| id == p) {
            checker.on_crash(0, p);
        }
        if let Some(&(_, ts, _)) = run.declared.get(&p) {
            checker.on_declared(&[p], Timestamp::new(ts));
        }
    }
}

/// The checks of a PLATO run (`--protocol plato|plato-fixed`): the baselines' checker, held
/// to what the sequencer ordered for each receiver (process 0 records it: a submit lost on the
/// way is delivered by nobody, as the simulator's sequencer runs are judged).
fn base_checks(
    args: &UpArgs,
    run: &Run<'_>,
    n: u32,
    feed: &mut Feed,
    all: &[Option<NodeRecords>],
    killed: &BTreeSet<u32>,
    drained: bool,
) -> Result<ChecksReport, String> {
    let rules = onepipe_sim::baseline::check::LossRules {
        lost_is_exact: true,
    };
    let mut checker = onepipe_sim::baseline::check::BaseChecker::new(n, rules);
    for &p in killed {
        checker.on_crash(p);
    }
    // ToTo's agreed multicast is causal too (its Fig. 2): checked from what each sender had
    // delivered when it sent.
    let mut causal = args
        .protocol
        .toto()
        .then(|| onepipe_sim::baseline::causal::CausalCheck::new(n));
    let rebuilt = feed.run_base(&mut checker, causal.as_mut(), all, killed);
    let ordered: Option<Vec<u64>> = match args.protocol.plato() {
        true => {
            let (_, p0) = read_node(run, 0)?;
            p0["ordered_for"]
                .as_array()
                .map(|a| a.iter().map(|v| v.as_u64().unwrap_or(0)).collect())
                .filter(|o: &Vec<u64>| o.len() == n as usize)
        }
        false => None,
    };
    checker.finish(monotonic_ns(), args.work.seed, drained, ordered.as_deref());
    let mut samples: Vec<String> = checker.violations().iter().map(|v| v.to_string()).collect();
    let (causal_violations, causal_checked) = causal.as_ref().map_or((0, 0), |c| {
        samples.extend(c.samples().iter().cloned());
        (c.violations(), c.checked())
    });
    Ok(ChecksReport {
        violations: checker.violation_count() + causal_violations,
        violation_samples: samples,
        checked: true,
        checked_deliveries: checker.deliveries_checked().max(causal_checked),
        undelivered_reliable: 0,
        drained,
        undrained: checker.undrained(),
        undrained_samples: Vec::new(),
        causal_unchecked: if causal.is_some() { rebuilt } else { 0 },
    })
}

impl ChecksReport {
    /// What `checker` found, once finished; its violations count only if the checkers ran
    /// (`checked`).
    fn of(checker: &Checker, checked: bool, drained: bool) -> ChecksReport {
        ChecksReport {
            violations: if checked {
                checker.violation_count()
            } else {
                0
            },
            violation_samples: if checked {
                checker.violations().iter().map(|v| v.to_string()).collect()
            } else {
                Vec::new()
            },
            checked,
            checked_deliveries: if checked {
                checker.deliveries_checked()
            } else {
                0
            },
            undelivered_reliable: checker.undelivered_reliable(),
            drained,
            undrained: checker.undrained(),
            undrained_samples: checker.undrained_samples().to_vec(),
            causal_unchecked: 0,
        }
    }
}

impl FailuresReport {
    /// The kills, the controllers' §5.2 rounds and what the processes were told, the rejoins,
    /// and the stalls.
    fn of(
        args: &UpArgs,
        run: &Run<'_>,
        all: &[Option<NodeRecords>],
        gone: &dyn Fn(u32) -> bool,
        rejoined: Vec<RejoinReport>,
        frozen: BTreeMap<String, u64>,
    ) -> FailuresReport {
        let stall = stall(args, run, all, gone);
        FailuresReport {
            kills: run
                .kills
                .iter()
                .map(|k| KillReport {
                    what: k.kill.to_string(),
                    at_s: k
                        .fired
                        .map(|(at, _)| at.saturating_sub(run.t0) as f64 / 1e9),
                    pid: k.fired.map_or(0, |(_, pid)| pid),
                })
                .collect(),
            controller_killed: run.etcd.is_none()
                && run
                    .kills
                    .iter()
                    .any(|k| k.fired.is_some() && k.kill.target == KillTarget::Controller),
            leaders: run.leaders.clone(),
            rounds: run
                .rounds
                .iter()
                .map(|(&round, (by, resumed_by))| RoundReport {
                    round,
                    declared_by: by.clone(),
                    resumed_by: resumed_by.clone(),
                })
                .collect(),
            failure_callbacks: run.callbacks.clone(),
            declared_failed: run
                .declared
                .iter()
                .map(|(&proc, &(round, failure_ts, at))| DeclaredReport {
                    proc,
                    failure_ts,
                    round,
                    at_s: at.saturating_sub(run.t0) as f64 / 1e9,
                })
                .collect(),
            frozen,
            rejoined_delivered: rejoined.iter().map(|r| r.delivered).sum(),
            rejoined,
            stall_ms: stall.0,
            delivery_gap_ms: delivery_gap(args, run, all),
            stall_proc: stall.1,
            delivered_after_kills: stall.2,
        }
    }
}

/// The run's protection, summed over every process (docs/SECURITY.md).
#[derive(Debug, Serialize)]
pub struct AuthSummary {
    /// `on`, `encrypt` or `off` (`--auth`).
    pub mode: String,
    /// Datagrams (GSO segments) sealed, all processes.
    pub sealed: u64,
    /// Datagrams opened: tag verified and counter fresh.
    pub opened: u64,
    /// Datagrams refused, by reason (`short`, `bad_header`, `unknown_link`, `wrong_link`,
    /// `unknown_epoch`, `bad_tag`, `replay`), all processes.
    pub refused: BTreeMap<String, u64>,
    /// Their sum.
    pub refused_total: u64,
    /// Datagrams not sent for want of a key.
    pub no_key: u64,
    /// Datagrams that arrived behind a higher counter on their link (reordering), all
    /// processes, and the deepest (what the replay window's span must cover).
    pub reordered: u64,
    /// See `reordered`.
    pub reorder_depth_max: u64,
    /// Key epochs the controllers began and activated (rotations).
    pub key_rotations: u64,
    /// Key epochs activated.
    pub key_activations: u64,
    /// Control connections refused at the TLS handshake.
    pub controller_tls_refused: u64,
    /// Packets the aggregators dropped for naming a sender that does not live behind their
    /// port (reverse-path filtering).
    pub spoofed_src: u64,
}

impl AuthSummary {
    fn of(mode: &str, counters: &BTreeMap<String, BTreeMap<String, u64>>) -> AuthSummary {
        let total = |k: &str| -> u64 { counters.values().filter_map(|c| c.get(k)).sum() };
        let refused: BTreeMap<String, u64> = onepipe_runtime::auth::REFUSAL_REASONS
            .iter()
            .map(|r| (r.to_string(), total(&format!("auth_{r}"))))
            .collect();
        AuthSummary {
            mode: mode.to_string(),
            sealed: total("auth_sealed"),
            opened: total("auth_ok"),
            refused_total: refused.values().sum(),
            refused,
            no_key: total("auth_no_key"),
            reordered: total("auth_reordered"),
            reorder_depth_max: counters
                .values()
                .filter_map(|c| c.get("auth_reorder_depth_max").copied())
                .max()
                .unwrap_or(0),
            key_rotations: total("key_rotations"),
            key_activations: total("key_activations"),
            controller_tls_refused: total("tls_refused"),
            spoofed_src: total("spoofed_src"),
        }
    }
}

impl TransportReport {
    /// The transport's counters in `counters`, summed over every process; rates over
    /// `delivery_span_s`.
    fn of(
        counters: &BTreeMap<String, BTreeMap<String, u64>>,
        delivery_span_s: f64,
        controller_malformed: u64,
    ) -> TransportReport {
        let total = |k: &str| -> u64 { counters.values().filter_map(|c| c.get(k)).sum() };
        let any = |k: &str| counters.values().any(|c| c.get(k).is_some_and(|&v| v > 0));
        let cpu_s: BTreeMap<String, f64> = counters
            .iter()
            .filter_map(|(name, c)| Some((name.clone(), *c.get("cpu_ns")? as f64 / 1e9)))
            .collect();
        let (datagrams, packets) = (total("datagrams_sent"), total("packets_sent"));
        TransportReport {
            datagrams_sent: datagrams,
            packets_sent: packets,
            packets_per_datagram: if datagrams == 0 {
                0.0
            } else {
                packets as f64 / datagrams as f64
            },
            datagrams_per_s: datagrams as f64 / delivery_span_s,
            datagram_len_max: counters
                .values()
                .filter_map(|c| c.get("datagram_len_max").copied())
                .max()
                .unwrap_or(0),
            gso: any("gso"),
            gro: any("gro"),
            gso_sends: total("gso_sends"),
            gro_receives: total("gro_receives"),
            datagrams_dropped_rcvbuf: total("datagrams_dropped_rcvbuf"),
            cpu_s_total: cpu_s.values().sum(),
            cpu_s,
            garbage_dropped: total("unknown_source") + total("decode_errors"),
            controller_malformed,
        }
    }
}

/// The stall after the kills: the longest time (ms) a correct process delivered nothing
/// between the first kill and the end of sending, which process, and how many messages each
/// correct process delivered after the last kill.
fn stall(
    args: &UpArgs,
    run: &Run<'_>,
    all: &[Option<NodeRecords>],
    gone: &dyn Fn(u32) -> bool,
) -> (f64, Option<u32>, BTreeMap<String, u64>) {
    let fired: Vec<u64> = run
        .kills
        .iter()
        .filter_map(|k| k.fired.map(|f| f.0))
        .collect();
    let (Some(&first), Some(&last)) = (fired.iter().min(), fired.iter().max()) else {
        return (0.0, None, BTreeMap::new());
    };
    let end = run.t0 + args.work.duration;
    let (mut worst, mut worst_proc) = (0u64, None);
    let mut after = BTreeMap::new();
    for (p, recs) in all.iter().enumerate() {
        let (Some(recs), false) = (recs, gone(p as u32)) else {
            continue;
        };
        let mut times: Vec<u64> = recs.deliveries.iter().map(|d| d.recv_ns).collect();
        times.sort_unstable();
        let mut prev = first;
        let mut gap = 0;
        for &t in times.iter().filter(|&&t| t > first) {
            gap = gap.max(t - prev);
            prev = t;
            if t >= end {
                break;
            }
        }
        if prev < end {
            gap = gap.max(end - prev);
        }
        if gap > worst {
            (worst, worst_proc) = (gap, Some(p as u32));
        }
        after.insert(
            format!("p{p}"),
            times.iter().filter(|&&t| t > last).count() as u64,
        );
    }
    (worst as f64 / 1e6, worst_proc, after)
}

/// The longest time (ms) any process with records delivered nothing between 50 ms after
/// sending started and the end of sending.
fn delivery_gap(args: &UpArgs, run: &Run<'_>, all: &[Option<NodeRecords>]) -> f64 {
    let (from, end) = (run.t0 + 50_000_000, run.t0 + args.work.duration);
    let mut worst = 0;
    for recs in all.iter().flatten() {
        let mut times: Vec<u64> = recs
            .deliveries
            .iter()
            .map(|d| d.recv_ns)
            .filter(|&t| t > from && t < end)
            .collect();
        times.sort_unstable();
        let mut prev = from;
        for t in times {
            worst = worst.max(t - prev);
            prev = t;
        }
    }
    worst as f64 / 1e6
}
