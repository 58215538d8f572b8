//! What `onepipe up` makes of a run: it reads every process's records and counters, feeds them
//! to the simulator's checker in the order things happened, sums up the transport, and prints
//! the summary and writes the JSON report. The orchestration that produced the records is
//! [`super`]'s.

use super::{nodes, Role, Run};
use crate::cli::{EXIT_USAGE, EXIT_VIOLATION};
use crate::live::records::NodeRecords;
use crate::live::{KillTarget, UpArgs, Workload};
use onepipe_proto::host::Delivery;
use onepipe_proto::wire::NakReason;
use onepipe_proto::{Instant as ProtoInstant, ProcId, Psn, Timestamp};
use onepipe_runtime::clock::monotonic_ns;
use onepipe_runtime::cluster::Cluster;
use onepipe_sim::check::{Checker, Dsts};
use onepipe_sim::metrics::{NsHistogram, Summary};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

/// The report of `onepipe up --json`: the keys of `onepipe sim` where they apply.
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
    /// Messages delivered per second, all receivers together: `delivered` over
    /// `delivery_span_s`.
    pub throughput_msgs_per_s: f64,
    /// From the start of sending to the last delivery, or the sending time if longer, s.
    pub delivery_span_s: f64,
    /// Send call → application receive, ns.
    pub latency_ns: Summary,
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
    /// Wall-clock seconds for the whole command.
    pub wall_s: f64,
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

fn nak_reason(r: u8) -> NakReason {
    match r {
        1 => NakReason::Late,
        2 => NakReason::Incomplete,
        3 => NakReason::BufferFull,
        _ => NakReason::Lost,
    }
}

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
    // Every link of a live cluster is FIFO (UDP between two sockets on one machine keeps its
    // order; coalescing keeps each port's order), so a packet that arrives below its
    // receiver's barrier means a barrier lied (`lower-bound`) — unless a member died, or an
    // aggregator timed out an input that was only slow and took it back (§4.2): then late
    // packets are that link's, and expected.
    let links_removed: u64 = (0..run.roles.len())
        .filter(|&i| matches!(run.roles[i], Role::Aggregator(_)))
        .filter_map(|i| run.heard[i].stats.as_ref())
        .map(|s| s["counters"]["links_removed"].as_u64().unwrap_or(0))
        .sum();
    // A packet forwarded by the controller (§5.2) arrives beside the data path, not in its
    // order: its receiver's best-effort barrier may be past it.
    let fifo = !args.unordered
        && args.kill.is_empty()
        && args.blackhole.is_empty()
        && args.cut.is_empty()
        && links_removed == 0;
    let mut checker = Checker::new(n, 1, 0, fifo);
    let mut all: Vec<Option<NodeRecords>> = Vec::with_capacity(n as usize);
    let mut counters: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let sum = |c: &BTreeMap<String, u64>, k: &str| c.get(k).copied().unwrap_or(0);
    let (mut dropped_late, mut send_failed, mut lost, mut retransmits) = (0, 0, 0, 0);
    let (mut refused, mut recv_refused) = (0, 0);
    let mut frozen = BTreeMap::new();
    // Each slot's process id at the end (its own, or the one it rejoined as), and the rejoins.
    let mut ids: Vec<u32> = Vec::with_capacity(n as usize);
    let mut rejoined: Vec<RejoinReport> = Vec::new();
    let killed: BTreeSet<u32> = run
        .kills
        .iter()
        .filter(|k| k.fired.is_some())
        .filter_map(|k| match k.kill.target {
            KillTarget::Proc(p) => Some(p),
            _ => None,
        })
        .collect();
    let gone = |p: u32| killed.contains(&p) || run.declared.contains_key(&p);
    for p in 0..n {
        let path = run.dir.join(format!("p{p}.rec"));
        let read = NodeRecords::read(&path)
            .map_err(|e| format!("p{p}: {e}"))
            .and_then(|recs| {
                let summary: serde_json::Value =
                    std::fs::read_to_string(path.with_extension("json"))
                        .ok()
                        .and_then(|s| serde_json::from_str(&s).ok())
                        .ok_or_else(|| format!("p{p}: no summary"))?;
                Ok((recs, summary))
            });
        let (recs, summary) = match read {
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
        dropped_late += sum(&c, "dropped_late");
        send_failed += sum(&c, "send_failed");
        lost += sum(&c, "lost");
        retransmits += sum(&c, "retransmits");
        refused += sum(&c, "sends_refused_full");
        recv_refused += sum(&c, "recv_refused_full");
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
    let transport = Transport::of(&counters);
    let controller_stat = |k: &str| -> u64 {
        (0..run.roles.len())
            .filter(|&i| matches!(run.roles[i], Role::Controller(_)))
            .filter_map(|i| run.heard[i].stats.as_ref())
            .filter_map(|s| s[k].as_u64())
            .sum()
    };
    let controller_malformed = controller_stat("malformed");
    let forwarded_by_controller = controller_stat("forwarded");
    let aggregator_stat = |k: &str| -> u64 {
        (0..run.roles.len())
            .filter(|&i| matches!(run.roles[i], Role::Aggregator(_)))
            .filter_map(|i| run.heard[i].stats.as_ref())
            .map(|s| s["counters"][k].as_u64().unwrap_or(0))
            .sum()
    };
    let blackholed = aggregator_stat("blackholed");
    let cut_dropped = aggregator_stat("cut_dropped");
    let mut feed = Feed::new(n, &all, &ids);
    // A sender that left no records: its scatterings as the others delivered them (all-to-all
    // knows every destination; otherwise those that delivered are all that is known).
    for ((src, seq), (ts, reliable, receivers)) in rebuilt_sends(&all, &ids, &killed) {
        let dsts = match args.work.workload {
            Workload::AllToAll => Dsts::All(n),
            _ => Dsts::List(receivers.into_iter().collect()),
        };
        feed.scatterings += 1;
        feed.sent += match &dsts {
            Dsts::All(n) => u64::from(*n),
            Dsts::List(v) => v.len() as u64,
        };
        checker.on_send(0, src, src, seq, Timestamp::new(ts), dsts, reliable);
    }
    feed.run(&mut checker, &all);
    let Feed {
        sent,
        scatterings,
        delivered,
        delivered_reliable,
        last_delivery_ns,
        latency,
        ..
    } = feed;
    // §5.2: the declared processes are excused as receivers and checked as senders against
    // their failure timestamps; a killed one never declared (no controller) promises nothing.
    for (&p, &(_, ts, _)) in &run.declared {
        checker.on_declared(&[p], Timestamp::new(ts));
    }
    for &p in &killed {
        // A restarted one crashed before it rejoined (above).
        if ids.get(p as usize).is_none_or(|&id| id == p) {
            checker.on_crash(0, p);
        }
        if let Some(&(_, ts, _)) = run.declared.get(&p) {
            checker.on_declared(&[p], Timestamp::new(ts));
        }
    }
    let stall = stall(args, run, &all, &gone);
    let drained = nodes(&run.roles).all(|i| run.heard[i].gone || run.heard[i].done == Some(true));
    checker.finish(monotonic_ns(), args.work.seed, drained);
    let checked = !args.unordered || args.check;
    let duration_s = args.work.duration as f64 / 1e9;
    // Deliveries go on after sending stops (queues drain): divide by the time they took, or an
    // overloaded run that queues seconds of messages would count them as throughput.
    let delivery_span_s = duration_s.max(last_delivery_ns.saturating_sub(run.t0) as f64 / 1e9);
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
        sent,
        scatterings,
        delivered,
        delivered_reliable,
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
        dropped_late,
        send_failed,
        lost_reported: lost,
        retransmits,
        sends_refused_full: refused,
        recv_refused_full: recv_refused,
        frozen,
        rejoined_delivered: rejoined.iter().map(|r| r.delivered).sum(),
        rejoined,
        throughput_msgs_per_s: delivered as f64 / delivery_span_s,
        delivery_span_s,
        latency_ns: latency.summary(),
        datagrams_sent: transport.datagrams,
        packets_sent: transport.packets,
        packets_per_datagram: if transport.datagrams == 0 {
            0.0
        } else {
            transport.packets as f64 / transport.datagrams as f64
        },
        datagrams_per_s: transport.datagrams as f64 / delivery_span_s,
        datagram_len_max: transport.datagram_len_max,
        gso: transport.gso,
        gro: transport.gro,
        gso_sends: transport.gso_sends,
        gro_receives: transport.gro_receives,
        datagrams_dropped_rcvbuf: transport.dropped_rcvbuf,
        cpu_s: transport.cpu_s,
        cpu_s_total: transport.cpu_s_total,
        garbage_dropped: transport.garbage,
        controller_malformed,
        auth: AuthSummary::of(&run.args.auth.to_string(), &counters),
        forwarded_by_controller,
        blackholed,
        cut_dropped,
        counters,
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
        failure_callbacks: run.callbacks.clone(),
        rounds: run
            .rounds
            .iter()
            .map(|(&round, (by, resumed_by))| RoundReport {
                round,
                declared_by: by.clone(),
                resumed_by: resumed_by.clone(),
            })
            .collect(),
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
        stall_ms: stall.0,
        delivery_gap_ms: delivery_gap(args, run, &all),
        stall_proc: stall.1,
        delivered_after_kills: stall.2,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// The transport's counters of a run, summed over every process.
struct Transport {
    datagrams: u64,
    packets: u64,
    datagram_len_max: u64,
    gso: bool,
    gro: bool,
    gso_sends: u64,
    gro_receives: u64,
    dropped_rcvbuf: u64,
    garbage: u64,
    cpu_s: BTreeMap<String, f64>,
    cpu_s_total: f64,
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
        let refused: BTreeMap<String, u64> = [
            "short",
            "bad_header",
            "unknown_link",
            "wrong_link",
            "unknown_epoch",
            "bad_tag",
            "replay",
        ]
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

impl Transport {
    fn of(counters: &BTreeMap<String, BTreeMap<String, u64>>) -> Transport {
        let total = |k: &str| -> u64 { counters.values().filter_map(|c| c.get(k)).sum() };
        let any = |k: &str| counters.values().any(|c| c.get(k).is_some_and(|&v| v > 0));
        let cpu_s: BTreeMap<String, f64> = counters
            .iter()
            .filter_map(|(name, c)| Some((name.clone(), *c.get("cpu_ns")? as f64 / 1e9)))
            .collect();
        Transport {
            datagrams: total("datagrams_sent"),
            packets: total("packets_sent"),
            datagram_len_max: counters
                .values()
                .filter_map(|c| c.get("datagram_len_max").copied())
                .max()
                .unwrap_or(0),
            gso: any("gso"),
            gro: any("gro"),
            gso_sends: total("gso_sends"),
            gro_receives: total("gro_receives"),
            dropped_rcvbuf: total("datagrams_dropped_rcvbuf"),
            garbage: total("unknown_source") + total("decode_errors"),
            cpu_s_total: cpu_s.values().sum(),
            cpu_s,
        }
    }
}

/// What one process recorded, by kind, for [`Feed`]'s merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Rec {
    /// A slot's endpoint rejoined as a new process (index into `Feed::joins`): before the
    /// first record it made as that process.
    Join,
    /// A delivery (index into `deliveries`). At equal times deliveries go first: `recv_ns`
    /// is read after the application received the message and `send_ns` before the send call
    /// stamps, so a delivery at or before a send's time happened before its stamp.
    Delivery,
    Send,
    Failure,
}

/// Feeds every process's records to the checker in the order they happened — all processes
/// on one machine read one clock (`CLOCK_MONOTONIC`), and every record carries its time — so
/// the rules that relate a process's sends to what it delivered before (§2.1 causality: a
/// host never stamps at or below what it already delivered) run as they do in the simulator.
/// Sums up as it goes.
struct Feed {
    procs: u32,
    /// Each recorded slot's process id (see `report`).
    ids: Vec<u32>,
    /// (time, kind, slot, index into that slot's records of that kind).
    order: Vec<(u64, Rec, u32, u32)>,
    /// (slot, the process it rejoined as).
    joins: Vec<(u32, u32)>,
    sent: u64,
    scatterings: u64,
    delivered: u64,
    delivered_reliable: u64,
    last_delivery_ns: u64,
    latency: NsHistogram,
}

impl Feed {
    fn new(procs: u32, all: &[Option<NodeRecords>], ids: &[u32]) -> Feed {
        let len = all
            .iter()
            .flatten()
            .map(|r| r.sends.len() + r.deliveries.len() + r.failures.len())
            .sum();
        let mut order = Vec::with_capacity(len);
        let mut joins = Vec::new();
        for (p, recs) in all.iter().enumerate() {
            let Some(recs) = recs else { continue };
            let p = p as u32;
            // The slot's process changed (§5.2 rejoin): the checker hears it just before the
            // first record the new process made.
            let id = ids.get(p as usize).copied().unwrap_or(p);
            if id != p {
                let first = recs
                    .sends
                    .iter()
                    .filter(|s| s.proc == id)
                    .map(|s| s.send_ns)
                    .chain(
                        recs.deliveries
                            .iter()
                            .filter(|d| d.dst == id)
                            .map(|d| d.recv_ns),
                    )
                    .min()
                    .unwrap_or(u64::MAX);
                order.push((first, Rec::Join, p, joins.len() as u32));
                joins.push((p, id));
            }
            let at = |i: usize| i as u32;
            order.extend(
                recs.sends
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (s.send_ns, Rec::Send, p, at(i))),
            );
            order.extend(
                recs.deliveries
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (d.recv_ns, Rec::Delivery, p, at(i))),
            );
            order.extend(
                recs.failures
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (f.at_ns, Rec::Failure, p, at(i))),
            );
        }
        // Stable: one process's deliveries of one service at one instant keep their order.
        order.sort_by_key(|&(t, kind, _, _)| (t, kind));
        Feed {
            procs,
            ids: ids.to_vec(),
            order,
            joins,
            sent: 0,
            scatterings: 0,
            delivered: 0,
            delivered_reliable: 0,
            last_delivery_ns: 0,
            latency: NsHistogram::default(),
        }
    }

    fn run(&mut self, checker: &mut Checker, all: &[Option<NodeRecords>]) {
        let n = self.procs;
        // Each slot's process as the feed goes (its own until it rejoined).
        let mut current: Vec<u32> = (0..self.ids.len() as u32).collect();
        for &(t, kind, slot, i) in &self.order {
            let recs = all[slot as usize]
                .as_ref()
                .expect("only recorded processes are fed");
            match kind {
                Rec::Join => {
                    let (slot, id) = self.joins[i as usize];
                    checker.on_joined(t, slot, &[id]);
                    current[slot as usize] = id;
                }
                Rec::Send => {
                    let s = &recs.sends[i as usize];
                    let p = s.proc;
                    let dsts = match &s.dsts {
                        None => Dsts::All(n),
                        Some(v) => Dsts::List(v.clone()),
                    };
                    self.scatterings += 1;
                    self.sent += s.dsts.as_ref().map_or(u64::from(n), |v| v.len() as u64);
                    let ts = Timestamp::new(s.ts);
                    checker.on_send(t, slot, p, s.seq, ts, dsts, s.reliable);
                }
                Rec::Delivery => {
                    let d = &recs.deliveries[i as usize];
                    let p = d.dst;
                    self.delivered += 1;
                    self.delivered_reliable += u64::from(d.reliable);
                    self.last_delivery_ns = self.last_delivery_ns.max(t);
                    self.latency.record(d.latency_ns);
                    let barrier = Timestamp::new(d.barrier);
                    let before = checker.on_released(t, p, d.reliable, barrier);
                    let delivery = Delivery {
                        dst: ProcId(p),
                        src: ProcId(d.src),
                        ts: Timestamp::new(d.ts),
                        psn: Psn(d.psn),
                        payload: bytes::Bytes::new(),
                        barrier,
                        reliable: d.reliable,
                        arrived: ProtoInstant(t),
                        now_ts: Timestamp::new(d.delivered_ts),
                    };
                    checker.on_deliver(t, slot, &delivery, d.seq, before);
                }
                Rec::Failure => {
                    let f = &recs.failures[i as usize];
                    let p = current[slot as usize];
                    let reason = nak_reason(f.reason);
                    checker.on_send_failed(t, p, f.dst, Timestamp::new(f.ts), reason);
                }
            }
        }
    }
}

/// Scatterings of senders that left no records, rebuilt from the deliveries of the others:
/// (sender, seq) → (timestamp, reliable, receivers that delivered it).
#[allow(clippy::type_complexity)]
fn rebuilt_sends(
    all: &[Option<NodeRecords>],
    ids: &[u32],
    killed: &BTreeSet<u32>,
) -> BTreeMap<(u32, u64), (u64, bool, BTreeSet<u32>)> {
    // Senders whose records are in: each recorded slot's processes — its process now, and its
    // first one unless it was killed (a restarted slot lost its old process's records with its
    // memory: those sends are rebuilt like a dead one's).
    let mut recorded: BTreeSet<u32> = BTreeSet::new();
    for (q, (r, &id)) in all.iter().zip(ids).enumerate() {
        let Some(r) = r else { continue };
        recorded.insert(id);
        if !killed.contains(&(q as u32)) {
            recorded.insert(q as u32);
        }
        recorded.extend(r.sends.iter().map(|s| s.proc));
    }
    let mut rebuilt: BTreeMap<(u32, u64), (u64, bool, BTreeSet<u32>)> = BTreeMap::new();
    for recs in all {
        for d in recs.iter().flat_map(|r| &r.deliveries) {
            if !recorded.contains(&d.src) {
                rebuilt
                    .entry((d.src, d.seq))
                    .or_insert_with(|| (d.ts, d.reliable, BTreeSet::new()))
                    .2
                    .insert(d.dst);
            }
        }
    }
    rebuilt
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

fn us(ns: f64) -> String {
    format!("{:.1} µs", ns / 1e3)
}

pub(super) fn finish(args: &UpArgs, r: &UpReport) -> i32 {
    println!(
        "  messages    {} sent in {} scatterings, {} delivered ({} reliable), {} dropped late, {} send-failed ({} lost)",
        r.sent, r.scatterings, r.delivered, r.delivered_reliable, r.dropped_late, r.send_failed, r.lost_reported
    );
    println!(
        "  throughput  {:.0} msgs/s delivered (all receivers), {} sends refused (buffer full)",
        r.throughput_msgs_per_s, r.sends_refused_full
    );
    println!(
        "  latency     mean {}  p50 {}  p99 {}  max {}",
        us(r.latency_ns.mean),
        us(r.latency_ns.p50 as f64),
        us(r.latency_ns.p99 as f64),
        us(r.latency_ns.max as f64)
    );
    if r.service == "reliable" {
        println!(
            "  reliable    {} retransmits, {} undelivered",
            r.retransmits, r.undelivered_reliable
        );
    }
    let offload = match (r.gso, r.gro) {
        (true, true) => format!(
            ", GSO ({} sends) and GRO ({} receives)",
            r.gso_sends, r.gro_receives
        ),
        (true, false) => format!(", GSO ({} sends)", r.gso_sends),
        (false, true) => format!(", GRO on ({} receives)", r.gro_receives),
        (false, false) => String::new(),
    };
    println!(
        "  transport   {} datagrams ({:.0}/s) of up to {} B{offload}, {:.1} packets per datagram",
        r.datagrams_sent, r.datagrams_per_s, r.datagram_len_max, r.packets_per_datagram
    );
    println!(
        "  dropped     {} datagrams at full receive buffers (kernel), {} garbage datagrams",
        r.datagrams_dropped_rcvbuf, r.garbage_dropped
    );
    let a = &r.auth;
    if a.mode != "off" {
        let reasons: Vec<String> = a
            .refused
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(k, n)| format!("{n} {}", k.replace('_', " ")))
            .collect();
        let reasons = match reasons.is_empty() {
            true => String::new(),
            false => format!(" ({})", reasons.join(", ")),
        };
        println!(
            "  auth        {}: {} datagrams sealed, {} opened, {} refused{reasons}; {} key epochs activated; {} TLS handshakes refused",
            a.mode, a.sealed, a.opened, a.refused_total, a.key_activations, a.controller_tls_refused
        );
    }
    let busiest: Vec<String> = {
        let mut v: Vec<(&String, &f64)> = r.cpu_s.iter().collect();
        v.sort_by(|a, b| b.1.total_cmp(a.1));
        v.iter()
            .take(4)
            .map(|(n, s)| format!("{n} {s:.2}"))
            .collect()
    };
    println!(
        "  cpu         {:.2} s in all ({:.2} cores over the {:.1} s of traffic); busiest: {}",
        r.cpu_s_total,
        r.cpu_s_total / r.delivery_span_s.max(1e-9),
        r.delivery_span_s,
        busiest.join(", ")
    );
    if !r.drained {
        println!(
            "  drain       limit reached with {} message(s) neither delivered nor reported lost",
            r.undrained
        );
    }
    let checks = if r.checked {
        format!(
            "{} violations in {} checked deliveries",
            r.violations, r.checked_deliveries
        )
    } else {
        "off (--unordered: delivery order is the baseline's; --check runs them)".to_string()
    };
    if !r.kills.is_empty() {
        let declared: Vec<String> = r
            .declared_failed
            .iter()
            .map(|d| {
                format!(
                    "p{} at ts {} (round {}, {:.2} s)",
                    d.proc, d.failure_ts, d.round, d.at_s
                )
            })
            .collect();
        println!(
            "  failures    declared failed: {}{}",
            if declared.is_empty() {
                "none".to_string()
            } else {
                declared.join(", ")
            },
            if r.controller_killed {
                " (the controller was killed: no failure after it was repaired)"
            } else {
                ""
            }
        );
        if r.leaders.len() > 1 {
            println!("  controllers led by {}", r.leaders.join(", then "));
        }
        for round in &r.rounds {
            println!(
                "  round {}     declared by {}, resumed by {}",
                round.round,
                round.declared_by,
                round
                    .resumed_by
                    .as_deref()
                    .unwrap_or("nobody (not resumed)")
            );
        }
        let after: Vec<String> = r
            .delivered_after_kills
            .iter()
            .map(|(p, k)| format!("{p} {k}"))
            .collect();
        println!(
            "  stall       longest delivery gap of a correct process after the first kill: {:.1} ms{}; delivered after the last kill: {}",
            r.stall_ms,
            r.stall_proc.map_or(String::new(), |p| format!(" (p{p})")),
            after.join(", ")
        );
    }
    for j in &r.rejoined {
        println!(
            "  rejoined    p{} as p{} (§5.2: recovered, a new process): sent {}, delivered {}",
            j.proc, j.as_proc, j.sent, j.delivered
        );
    }
    if !args.blackhole.is_empty() || !args.cut.is_empty() || r.forwarded_by_controller > 0 {
        println!(
            "  forwarding  {} packets black-holed and {} dropped at cut uplinks by aggregators, {} relayed by the controller (§5.2)",
            r.blackholed, r.cut_dropped, r.forwarded_by_controller
        );
    }
    println!("  checks      {checks}");
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(r).expect("report serializes");
        if let Err(e) = std::fs::write(path, json + "\n") {
            eprintln!("onepipe up: --json: cannot write {}: {e}", path.display());
            return EXIT_USAGE;
        }
    }
    let mut code = 0;
    if r.violations > 0 || r.undelivered_reliable > 0 {
        eprintln!("onepipe up: {} violation(s):", r.violations);
        for v in &r.violation_samples {
            eprintln!("  {v}");
        }
        code = EXIT_VIOLATION;
    }
    if !r.drained {
        // Liveness: every message is delivered or reported lost to its sender (§2.1); a run
        // whose drain limit passed first has not shown that, so it fails.
        eprintln!(
            "onepipe up: not drained within --drain: {} message(s) neither delivered nor reported lost{}",
            r.undrained,
            if r.undrained_samples.is_empty() { "" } else { ", e.g.:" }
        );
        for u in &r.undrained_samples {
            eprintln!("  {u}");
        }
        code = EXIT_VIOLATION;
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::records::{DeliveryRec, SendRec};

    fn send(seq: u64, ts: u64, send_ns: u64) -> SendRec {
        SendRec {
            proc: 0,
            seq,
            ts,
            send_ns,
            reliable: false,
            dsts: None,
        }
    }

    fn delivery(src: u32, dst: u32, ts: u64, barrier: u64, recv_ns: u64) -> DeliveryRec {
        DeliveryRec {
            src,
            dst,
            seq: 0,
            ts,
            barrier,
            delivered_ts: barrier + 1,
            recv_ns,
            latency_ns: 1,
            reliable: false,
            psn: 0,
        }
    }

    /// Two processes; p1 broadcasts ts 10 at time 1, which both deliver at time 5 (barrier
    /// 20); p0 then sends `p0_ts` at time `p0_at`. The violations' kinds.
    fn kinds_of(p0_ts: u64, p0_at: u64) -> Vec<&'static str> {
        let all = vec![
            Some(NodeRecords {
                sends: vec![send(0, p0_ts, p0_at)],
                deliveries: vec![delivery(1, 0, 10, 20, 5)],
                failures: Vec::new(),
            }),
            Some(NodeRecords {
                sends: vec![SendRec {
                    proc: 1,
                    ..send(0, 10, 1)
                }],
                deliveries: vec![delivery(1, 1, 10, 20, 5)],
                failures: Vec::new(),
            }),
        ];
        let mut checker = Checker::new(2, 1, 0, true);
        Feed::new(2, &all, &[0, 1]).run(&mut checker, &all);
        checker.violations().iter().map(|v| v.kind).collect()
    }

    /// §2.1 causality, live: records are fed in time order, so a send stamped at or below a
    /// timestamp its process had already delivered is caught — and one made before that
    /// delivery is not.
    #[test]
    fn a_send_stamped_below_what_its_process_delivered_before_is_a_causality_violation() {
        assert_eq!(kinds_of(9, 6), ["causality"], "sent after delivering ts 10");
        assert_eq!(kinds_of(10, 6), ["causality"], "at it is not above it");
        assert_eq!(
            kinds_of(9, 4),
            Vec::<&str>::new(),
            "sent before the delivery"
        );
        // Equal times: the delivery was taken before the send call read the clock.
        assert_eq!(kinds_of(9, 5), ["causality"]);
    }
}
