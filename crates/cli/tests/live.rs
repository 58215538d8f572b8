//! End-to-end tests of the live cluster: they run the real `onepipe` binary, which starts a
//! controller, aggregators and endpoints as separate OS processes on 127.0.0.1.
//!
//! * `onepipe up` (best effort, reliable, unordered) passes the simulator's checkers: one total
//!   order, causality, nothing lost unreported, every reliable message delivered.
//! * Garbage datagrams sent to every daemon's port are counted and dropped, and every message
//!   is still delivered, in order.
//! * Killing one endpoint does not crash the others; Ctrl-C stops everything and leaves no
//!   process behind.
//! * `--kill` (§5.2): a dead process and a dead rack aggregator are declared failed, the rest
//!   keep delivering, and restricted failure atomicity holds (reliable and best effort).
//! * Cluster files: `onepipe topology` writes one that parses; an error names field and line;
//!   `up --cluster` runs a given one, each member behind `--spawn`'s prefix.
//!
//! Runs are short (about a second of sending at a modest rate) and every wait has a generous
//! deadline: the machine is shared and has two cores. Nothing asserts speed.
#![allow(clippy::disallowed_methods)]

mod common;

use common::up::{alive, Running};
use common::TempDir;
use serde_json::Value;
use std::io::Write;
use std::net::{TcpStream, UdpSocket};
use std::process::Command;
use std::time::Duration;

fn onepipe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_onepipe"))
}

/// `onepipe up` with a small cluster and `extra` flags (which replace the defaults they name),
/// to completion; returns the exit code, the output, and the JSON report if there
/// is one.
fn up(test: &str, extra: &[&str]) -> (i32, String, Option<Value>) {
    let dir = TempDir::new(test);
    let json = dir.path("up.json");
    let defaults = [
        ("--hosts", "4"),
        ("--procs-per-host", "1"),
        ("--msg-size", "64"),
        ("--rate", "500"),
        ("--duration", "1s"),
        ("--deadline", "100s"),
    ];
    let mut args = vec!["up"];
    for (flag, value) in defaults {
        if !extra.contains(&flag) {
            args.extend([flag, value]);
        }
    }
    let out = onepipe()
        .args(args)
        .args(extra)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report = std::fs::read_to_string(&json)
        .ok()
        .map(|s| serde_json::from_str(&s).unwrap());
    (out.status.code().unwrap_or(-1), text, report)
}

fn u(r: &Value, k: &str) -> u64 {
    r[k].as_u64().unwrap_or_else(|| panic!("{k} in {r}"))
}

/// A run that passed: no violation, and drained — every message delivered or reported lost
/// before the drain limit (an undrained run skips the loss checks, so the counts below would
/// prove nothing).
fn assert_clean(r: &Value, out: &str) {
    assert_eq!(u(r, "violations"), 0, "{out}");
    assert_eq!(r["drained"].as_bool(), Some(true), "{out}");
    assert_eq!(u(r, "undrained"), 0, "{out}");
}

/// The issue's acceptance run, short: two layers, all-to-all, best effort; every delivery
/// checked for total order, causality and barrier safety, every message delivered.
#[test]
fn up_runs_a_two_layer_cluster_whose_deliveries_pass_the_checkers() {
    let (code, out, r) = up("be", &["--workload", "all-to-all"]);
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert!(u(&r, "delivered") > 0);
    assert!(r["checked"].as_bool().unwrap() && r["ordered"].as_bool().unwrap());
    assert_eq!(u(&r, "aggregators"), 3, "tor-0, tor-1, spine-0");
    // Same keys as `onepipe sim` where they apply, plus the live throughput.
    for k in [
        "delivered",
        "violations",
        "latency_ns",
        "undelivered_reliable",
        "dropped_late",
        "throughput_msgs_per_s",
    ] {
        assert!(r.get(k).is_some(), "{k}");
    }
    assert!(r["latency_ns"]["p50"].as_u64().unwrap() > 0);
    assert!(
        out.contains("spine-0") && out.contains("checks      0 violations"),
        "{out}"
    );
}

/// §5.1: with the reliable service every message reaches every destination.
///
/// With optimistic delivery on (issue 39): every reliable message is also handed over on
/// arrival, and its hooks are checked — confirmed in the commit barrier's order, nothing left.
#[test]
fn up_with_the_reliable_service_delivers_every_message() {
    let flags = [
        "--service",
        "reliable",
        "--layers",
        "1",
        "--optimistic-delta",
        "50us",
    ];
    let (code, out, r) = up("reliable", &flags);
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert_eq!(u(&r, "undelivered_reliable"), 0);
    assert!(u(&r, "delivered_reliable") > 0);
    assert_eq!(u(&r, "delivered"), u(&r, "sent"), "{out}");
    let o = &r["optimistic"];
    assert!(u(o, "delivered") >= u(&r, "delivered"), "{out}");
    assert_eq!(u(o, "violations"), 0, "{out}");
}

fn procs(v: &Value) -> Vec<u64> {
    let mut p: Vec<u64> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["proc"].as_u64().unwrap())
        .collect();
    p.sort_unstable();
    p
}

/// §5.2 in the live cluster (the issue's acceptance run, shorter): a process dies, then its
/// rack's aggregator. The controller declares the single-homed rack failed (p0..p3, §5.2: "if
/// a ToR switch fails ... all processes in the rack fail") at the last commit barrier the
/// spine had from it; the other rack resumes and keeps delivering; restricted failure
/// atomicity holds over the survivors, and the stall is reported.
#[test]
fn up_kill_a_process_and_its_tor_declares_the_rack_failed_and_the_rest_deliver_5_2() {
    let (code, out, r) = up(
        "kill-reliable",
        &[
            "--procs-per-host",
            "2",
            "--service",
            "reliable",
            "--duration",
            "4s",
            "--kill",
            "proc:3@1s",
            "--kill",
            "agg:tor-0@1500ms",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert_eq!(u(&r, "undelivered_reliable"), 0, "{out}");
    assert_eq!(procs(&r["declared_failed"]), [0, 1, 2, 3], "{out}");
    for d in r["declared_failed"].as_array().unwrap() {
        assert!(d["failure_ts"].as_u64().unwrap() > 0, "{d}");
    }
    // §5.2: the processes cut off with tor-0 but alive were told and froze, at the failure
    // timestamp the others were given.
    for d in r["declared_failed"].as_array().unwrap() {
        let p = d["proc"].as_u64().unwrap();
        if p < 3 {
            assert_eq!(r["frozen"][format!("p{p}")], d["failure_ts"], "p{p}: {r}");
        }
    }
    let kills = r["kills"].as_array().unwrap();
    assert_eq!(kills.len(), 2);
    assert!(kills.iter().all(|k| k["at_s"].as_f64().is_some()), "{r}");
    for p in 4..8 {
        let after = r["delivered_after_kills"][format!("p{p}")]
            .as_u64()
            .unwrap();
        assert!(after > 0, "p{p} delivered nothing after the kills: {out}");
    }
    assert!(r["stall_ms"].as_f64().unwrap() > 0.0, "{r}");
    assert!(
        out.contains("declared failed p0") && out.contains("resumed") && out.contains("stall"),
        "{out}"
    );
}

/// §5.2 Receiver Recovery, live (the issue's acceptance run, shorter): p3 is killed, declared
/// failed, started again with its memory lost, recovers and rejoins as a new process; the
/// others send to its new id and it delivers; every delivery is checked, with the old p3
/// crashed and the new one a correct process from its rejoin on. The restart comes well after
/// the declaration (link timeout 1 s, settling 0.5 s): the new process never hears the
/// `Declared` broadcast, so only its own restarted state makes it recover.
#[test]
fn up_restart_a_killed_process_rejoins_as_a_new_one_and_delivers_5_2() {
    let (code, out, r) = up(
        "restart",
        &[
            "--procs-per-host",
            "2",
            "--service",
            "reliable",
            "--duration",
            "6s",
            "--kill",
            "proc:3@1s",
            "--restart",
            "proc:3@4s",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert_eq!(u(&r, "undelivered_reliable"), 0, "{out}");
    assert_eq!(procs(&r["declared_failed"]), [3], "{out}");
    let rejoined = r["rejoined"].as_array().unwrap();
    assert_eq!(rejoined.len(), 1, "{out}");
    assert_eq!(rejoined[0]["proc"], 3);
    assert!(
        rejoined[0]["as_proc"].as_u64().unwrap() >= 8,
        "a new id above the cluster's: {r}"
    );
    assert!(rejoined[0]["sent"].as_u64().unwrap() > 0, "{out}");
    assert!(u(&r, "rejoined_delivered") > 0, "{out}");
}

/// Issue 35, an operator's bad day: p2 is paused (SIGSTOP) for 4 s mid-run, past the link
/// timeout. It is declared failed and the others go on; continued (SIGCONT), it learns so,
/// recovers and rejoins as a new process, which sends and delivers to the end. The run ends
/// clean and drained: every delivery is checked under the id it was made as (before, they
/// were all charged to the new id — 287,235 "phantom" violations in the issue's run).
#[test]
fn up_a_paused_process_is_declared_rejoins_and_every_record_keeps_its_id_5_2() {
    let (code, out, r) = up(
        "pause",
        &[
            "--service",
            "reliable",
            "--rate",
            "2000",
            "--duration",
            "7s",
            "--pause",
            "proc:2@1s..5s",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert_eq!(u(&r, "undelivered_reliable"), 0, "{out}");
    assert_eq!(procs(&r["declared_failed"]), [2], "{out}");
    let rejoined = r["rejoined"].as_array().unwrap();
    assert_eq!(rejoined.len(), 1, "{out}");
    assert_eq!(rejoined[0]["proc"], 2);
    assert!(rejoined[0]["as_proc"].as_u64().unwrap() >= 4, "{r}");
    assert!(rejoined[0]["sent"].as_u64().unwrap() > 0, "{out}");
    assert!(rejoined[0]["delivered"].as_u64().unwrap() > 0, "{out}");
}

/// Three aggregator layers (edge, aggregation, core): killing an aggregation-layer daemon cuts
/// off its pod (tor-0 and tor-1 with p0..p3); the controller reasons over the three-layer graph,
/// declares the pod failed, and the other pod goes on delivering, every delivery checked.
#[test]
fn up_three_layers_kill_an_aggregation_daemon_declares_its_pod_failed_5_2() {
    let (code, out, r) = up(
        "kill-agg-3layers",
        &[
            "--layers",
            "3",
            "--hosts",
            "8",
            "--service",
            "reliable",
            "--duration",
            "3s",
            "--kill",
            "agg:agg-0@1s",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert_eq!(u(&r, "layers"), 3, "{r}");
    assert_eq!(u(&r, "aggregators"), 7, "4 tors, 2 aggs and the core: {r}");
    assert_eq!(procs(&r["declared_failed"]), [0, 1, 2, 3], "{out}");
    for p in 4..8 {
        let after = r["delivered_after_kills"][format!("p{p}")]
            .as_u64()
            .unwrap();
        assert!(after > 0, "p{p} delivered nothing after the kill: {out}");
    }
}

/// §5.2 "Controller Forwarding", live: p1's first-hop aggregator black-holes what p1 sends p2
/// (its barriers still pass, so nothing is detected); p1's reliable messages to p2 go by the
/// controller after a retransmission, p2's ACKs come back the same way, and every message is
/// delivered everywhere in one order.
#[test]
fn up_black_holed_pair_is_served_by_controller_forwarding_5_2() {
    let (code, out, r) = up(
        "blackhole",
        &[
            "--service",
            "reliable",
            "--rate",
            "200",
            "--duration",
            "3s",
            "--blackhole",
            "1>2@1s",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert_eq!(u(&r, "undelivered_reliable"), 0, "{out}");
    assert!(u(&r, "blackholed") > 0, "nothing was black-holed: {out}");
    assert!(
        u(&r, "forwarded_by_controller") > 0,
        "nothing was forwarded: {out}"
    );
    assert!(r["declared_failed"].as_array().unwrap().is_empty(), "{out}");
    assert!(out.contains("relayed by the controller"), "{out}");
}

/// §5.2 with one direction of a host's uplink cut (the issue's acceptance run): what p1 sends
/// is dropped at tor-0, what is sent to it still arrives. Until tor-0 times the input out, p1's
/// reliable messages go by the controller; then p1 is declared failed and told (it freezes),
/// and the others go on; every delivery is checked.
#[test]
fn up_cut_uplink_forwards_by_the_controller_then_declares_the_host_5_2() {
    let (code, out, r) = up(
        "cut",
        &[
            "--service",
            "reliable",
            "--rate",
            "200",
            "--duration",
            "4s",
            "--cut",
            "proc:1@1s",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert!(u(&r, "cut_dropped") > 0, "{out}");
    assert!(
        u(&r, "forwarded_by_controller") > 0,
        "nothing was forwarded: {out}"
    );
    assert_eq!(procs(&r["declared_failed"]), [1], "{out}");
    assert!(
        r["frozen"]["p1"].as_u64().is_some(),
        "p1 was told and froze: {r}"
    );
    for p in [0, 2, 3] {
        let after = r["delivered_after_kills"][format!("p{p}")].as_u64();
        assert!(after.is_none_or(|n| n > 0), "p{p} stalled: {out}");
    }
}

/// §4.2 and §5.2 with the best-effort service: a dead process's link is removed after the
/// link timeout, the controller declares it, and the others go on.
///
/// With optimistic delivery on (issue 39, PLATO's hooks on 1Pipe): every hook of every
/// survivor is checked too — what was handed over from the killed process before it died is
/// confirmed or revoked, nothing is left tentative, and the confirms are the final order.
#[test]
fn up_best_effort_survives_a_killed_process_4_2() {
    let (code, out, r) = up(
        "kill-be",
        &[
            "--duration",
            "3s",
            "--kill",
            "proc:1@1s",
            "--optimistic-delta",
            "50us",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    let o = &r["optimistic"];
    assert!(u(o, "delivered") > 0, "{out}");
    assert_eq!(u(o, "violations"), 0, "{out}");
    assert!(out.contains("optimistic  "), "{out}");
    assert_eq!(procs(&r["declared_failed"]), [1], "{out}");
    for p in [0, 2, 3] {
        let after = r["delivered_after_kills"][format!("p{p}")]
            .as_u64()
            .unwrap();
        assert!(after > 0, "p{p} delivered nothing after the kill: {out}");
    }
}

/// Issue 39: PLATO on the live transport — process 0 also the sequencer, every other packet a
/// plain message — judged by the baselines' checker (one total order, agreement, FIFO, nothing
/// lost unreported) and its hooks by the optimistic checker.
#[test]
fn up_protocol_plato_delivers_one_checked_order_with_checked_hooks() {
    let (code, out, r) = up("plato", &["--protocol", "plato", "--duration", "1s"]);
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert_eq!(u(&r, "delivered"), u(&r, "sent"), "{out}");
    assert!(u(&r, "checked_deliveries") > 0, "{out}");
    let o = &r["optimistic"];
    assert!(u(o, "delivered") > 0, "{out}");
    assert_eq!(u(o, "violations"), 0, "{out}");
}

/// Issue 40: ToTo on the live transport, each packet a plain message, with a process killed
/// mid-load: the survivors suspect it, agree it crashed and go on (§5); judged by the
/// baselines' checker (one total order, agreement, a survivor's message at every survivor, a
/// killed one's at all or none) and the causal check.
#[test]
fn up_protocol_toto_survives_a_killed_process_5() {
    let (code, out, r) = up(
        "toto-kill",
        &[
            "--protocol",
            "toto",
            "--duration",
            "2s",
            "--kill",
            "proc:2@700ms",
            "--toto-suspect",
            "200ms",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert!(u(&r, "checked_deliveries") > 0, "{out}");
    // What the killed process had delivered died with it: its messages' causal order is
    // reported unchecked, never counted as checked.
    assert!(u(&r, "causal_unchecked") > 0, "{out}");
    assert!(out.contains("causal order unchecked for the"), "{out}");
    for p in [0, 1, 3] {
        let after = r["delivered_after_kills"][format!("p{p}")]
            .as_u64()
            .unwrap();
        assert!(after > 0, "p{p} delivered nothing after the kill: {out}");
    }
}

/// With the controller killed there is no standby: a later failure is not repaired (nobody is
/// declared), but best effort still resumes by link removal (§4.2), and `up` says so.
#[test]
fn up_kill_the_controller_then_a_process_best_effort_goes_on_unrepaired() {
    let (code, out, r) = up(
        "kill-controller",
        &[
            "--duration",
            "2s",
            "--kill",
            "controller@300ms",
            "--kill",
            "proc:1@600ms",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert_clean(&r, &out);
    assert!(r["controller_killed"].as_bool().unwrap());
    assert!(r["declared_failed"].as_array().unwrap().is_empty(), "{out}");
    assert!(out.contains("no standby controller"), "{out}");
    for p in [0, 2, 3] {
        let after = r["delivered_after_kills"][format!("p{p}")]
            .as_u64()
            .unwrap();
        assert!(after > 0, "p{p} delivered nothing after the kills: {out}");
    }
}

/// The baseline: the same processes and transport with ordering off; not checked for order.
#[test]
fn up_unordered_runs_the_baseline_and_refuses_the_reliable_service() {
    let (code, out, r) = up(
        "unordered",
        &["--unordered", "--workload", "scatter", "--scatter-k", "2"],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("report");
    assert!(!r["checked"].as_bool().unwrap() && !r["ordered"].as_bool().unwrap());
    assert_eq!(r["drained"].as_bool(), Some(true), "{out}");
    assert!(u(&r, "delivered") > 0);
    let out = onepipe()
        .args(["up", "--unordered", "--service", "reliable"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--unordered"));
}

/// The checkers can fail: run over the unordered baseline under load (`--check`), they find
/// what ordering prevents — a receiver delivering out of timestamp order, below a barrier it
/// had passed — and the run exits 1, naming them.
#[test]
fn up_unordered_check_reports_order_violations_under_load() {
    let (code, out, r) = up(
        "unordered-check",
        &["--unordered", "--check", "--rate", "40000"],
    );
    assert_eq!(code, 1, "{out}");
    let r = r.expect("report");
    assert!(r["checked"].as_bool().unwrap() && !r["ordered"].as_bool().unwrap());
    assert!(u(&r, "violations") > 0, "{out}");
    assert!(u(&r, "checked_deliveries") > 0, "{out}");
    let samples: Vec<&str> = r["violation_samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        samples
            .iter()
            .any(|v| v.contains("] order:") || v.contains("] barrier:")),
        "{samples:#?}"
    );
    assert!(out.contains("violation(s):"), "{out}");
}

#[test]
fn bad_flags_name_the_flag() {
    for (flags, needle) in [
        (&["--msg-size", "8"][..], "--msg-size"),
        (&["--rate", "0"][..], "--rate"),
        (&["--hosts", "0"][..], "--hosts"),
        (&["--aggregator-phase", "2ms"][..], "--aggregator-phase"),
        (&["--kill", "proc:99@1s"][..], "--kill"),
        (&["--kill", "agg:tor-9@1s"][..], "--kill"),
        (&["--kill", "proc:1@9s"][..], "--kill"),
        (&["--kill", "router@1s"][..], "--kill"),
        (&["--kill", "proc:1"][..], "--kill"),
        (&["--restart", "proc:1@2s"][..], "--restart"),
        (
            &["--kill", "proc:1@2s", "--restart", "proc:1@1s"][..],
            "--restart",
        ),
        (&["--restart", "agg:tor-0@2s"][..], "--restart"),
        (&["--cut", "proc:9@1s"][..], "--cut"),
        (&["--blackhole", "1>9@1s"][..], "--blackhole"),
        (&["--blackhole", "1>1@1s"][..], "--blackhole"),
        (&["--layers", "4"][..], "--layers"),
        (
            &["--protocol", "plato", "--service", "reliable"][..],
            "--protocol plato",
        ),
        (&["--protocol", "plato", "--plato-k", "0"][..], "--plato-k"),
        (
            &["--protocol", "plato", "--kill", "proc:1@1s"][..],
            "--protocol plato",
        ),
        (&["--protocol", "toto", "--toto-phi", "1"][..], "--toto-phi"),
        (
            &["--protocol", "toto", "--pause", "proc:1@1s..2s"][..],
            "--protocol toto",
        ),
        (
            &["--protocol", "allack", "--toto-suspect", "1ms"][..],
            "--toto-suspect",
        ),
    ] {
        let out = onepipe().arg("up").args(flags).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{flags:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{flags:?}: {err}");
    }
}

/// Distrust the wire: datagrams from a stranger to every aggregator and endpoint, and junk on
/// the controller's TCP port, are counted and dropped; every message is still delivered once,
/// in order.
#[test]
fn garbage_sent_to_every_daemon_is_counted_and_dropped_and_deliveries_are_unchanged() {
    let dir = TempDir::new("garbage");
    // Reliable: best effort may report a message "possibly lost" when a busy machine delays
    // its ACKs past the loss timeout (it happened once beside a build), which says nothing about
    // garbage; the reliable service delivers everything or reports a failed destination.
    let mut run = Running::start(
        &dir.path("up.json"),
        &["--duration", "2s", "--service", "reliable"],
    );
    run.wait_for("running");
    let table = run.table();
    assert_eq!(
        table.len(),
        8,
        "controller, 3 aggregators, 4 endpoints: {table:?}"
    );
    const EACH: u64 = 20;
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut junk = vec![0xFFu8; 100];
    junk.extend_from_slice(&[0x01, 0x00, 0x00]);
    for (name, _, addr) in &table {
        if name == "controller" {
            // A bad TLS hello, and plain text (the controller requires TLS): two refusals.
            for junk in [&b"\x16\x03\x01 hello?\n"[..], b"not json either\n"] {
                let mut c = TcpStream::connect(addr).unwrap();
                c.write_all(junk).unwrap();
                let _ = c.flush();
            }
            continue;
        }
        for i in 0..EACH {
            let datagram: &[u8] = match i % 3 {
                0 => &junk,
                1 => &[],
                _ => &[0x01; 36],
            };
            stranger.send_to(datagram, addr).unwrap();
        }
    }
    let (code, out) = run.finish();
    assert_eq!(code, 0, "{out}");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path("up.json")).unwrap()).unwrap();
    assert_clean(&r, &out);
    assert_eq!(
        u(&r, "delivered"),
        u(&r, "sent"),
        "every message delivered: {out}"
    );
    assert_eq!(u(&r, "send_failed"), 0, "{out}");
    for (name, _, _) in table.iter().filter(|(n, _, _)| n != "controller") {
        let c = &r["counters"][name];
        assert_eq!(c["unknown_source"].as_u64(), Some(EACH), "{name}: {c}");
    }
    assert_eq!(u(&r, "garbage_dropped"), 7 * EACH);
    assert!(u(&r, "controller_malformed") >= 2, "{r}");
}

/// Killing one endpoint does not crash the others: they keep running (the controller tells
/// them it is lost), and when `up` stops them they exit cleanly. No process is left.
#[test]
fn killing_one_endpoint_leaves_the_others_running() {
    let dir = TempDir::new("kill");
    let mut run = Running::start(&dir.path("up.json"), &["--duration", "30s"]);
    run.wait_for("running");
    let table = run.table();
    let (_, victim, _) = table.iter().find(|(n, _, _)| n == "p2").unwrap().clone();
    std::thread::sleep(Duration::from_millis(300));
    let status = Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let (code, out) = run.finish();
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains(
            "p2 exited unexpectedly (killed by signal 9); 7 of the 7 other processes kept running"
        ),
        "{out}"
    );
    assert!(out.contains("the controller reports p2 lost"), "{out}");
    assert!(out.contains("every other process exited cleanly"), "{out}");
    for (name, pid, _) in &table {
        assert!(!alive(*pid), "{name} (pid {pid}) is still running");
    }
}

/// Ctrl-C (SIGINT to `up`) stops the whole cluster and leaves no process behind.
#[test]
fn ctrl_c_stops_everything_and_leaves_no_process_behind() {
    let dir = TempDir::new("sigint");
    let mut run = Running::start(
        &dir.path("up.json"),
        &["--duration", "60s", "--service", "reliable"],
    );
    run.wait_for("running");
    let table = run.table();
    std::thread::sleep(Duration::from_millis(300));
    let up = run.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &up])
        .status()
        .unwrap()
        .success());
    let (code, out) = run.finish();
    assert_eq!(code, 130, "{out}");
    assert!(out.contains("interrupted"), "{out}");
    for (name, pid, _) in &table {
        assert!(!alive(*pid), "{name} (pid {pid}) is still running");
    }
}

#[test]
fn topology_writes_a_cluster_file_that_parses() {
    let out = onepipe()
        .args([
            "topology",
            "--hosts",
            "5",
            "--procs-per-host",
            "2",
            "--layers",
            "2",
            "--rack-size",
            "2",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let c = onepipe_runtime::Cluster::parse(&text).unwrap();
    assert_eq!(c.procs(), 10);
    let names: Vec<_> = c.aggregators.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["tor-0", "tor-1", "tor-2", "spine-0"]);
    let one = onepipe()
        .args(["topology", "--layers", "1"])
        .output()
        .unwrap();
    let c = onepipe_runtime::Cluster::parse(&String::from_utf8(one.stdout).unwrap()).unwrap();
    assert_eq!(c.aggregators.len(), 1);
}

/// docs/DEPLOY.md: `up --cluster FILE --spawn PREFIX` runs the operator's file (its keys from
/// `topology --pki`) with every member behind the prefix, checked as any `up` run; a file whose
/// process count the flags contradict is refused before anything starts.
#[test]
fn up_runs_a_given_cluster_file_with_each_member_behind_the_spawn_prefix() {
    let dir = TempDir::new("given-file");
    let file = dir.path("cluster.toml");
    let topology = onepipe()
        .current_dir(&dir.0)
        .args(["topology", "--hosts", "2", "--layers", "1"])
        .args(["--controller", "127.0.0.1:0", "--pki", "pki"])
        .output()
        .unwrap();
    assert!(topology.status.success());
    std::fs::write(&file, topology.stdout).unwrap();
    let given = ["--cluster", file.to_str().unwrap(), "--hosts", "2"];
    let spawn = ["--spawn", "env ONEPIPE_MEMBER={member} ONEPIPE_HOST={host}"];
    let (code, out, report) = up("given", &[&given[..], &spawn[..]].concat());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("cluster file"), "{out}");
    let r = report.expect("a report");
    assert_clean(&r, &out);
    assert!(u(&r, "delivered") > 0, "{out}");
    let (code, out, _) = up("given-refused", &["--cluster", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("--cluster") && out.contains("2 processes"),
        "{out}"
    );
}

/// docs/SECURITY.md: a hand-started cluster refuses to start without keys unless its file says
/// `auth = "off"`; `topology --pki` writes the keys and the section, `--no-auth` the opt-out.
#[test]
fn a_cluster_file_without_keys_is_refused_unless_it_says_auth_off() {
    let dir = TempDir::new("noauth");
    let bare = onepipe()
        .args(["topology", "--hosts", "2"])
        .output()
        .unwrap();
    std::fs::write(dir.path("bare.toml"), &bare.stdout).unwrap();
    for args in [
        vec!["controller", "--listen", "127.0.0.1:0"],
        vec!["agg", "--id", "tor-0"],
    ] {
        let out = onepipe()
            .args(&args)
            .arg("--config")
            .arg(dir.path("bare.toml"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("says nothing about auth")
                && err.contains("--pki")
                && err.contains("auth = \"off\""),
            "{err}"
        );
    }
    let off = onepipe()
        .args(["topology", "--hosts", "2", "--no-auth"])
        .output()
        .unwrap();
    let c = onepipe_runtime::Cluster::parse(&String::from_utf8(off.stdout).unwrap()).unwrap();
    assert_eq!(c.auth_mode(), onepipe_runtime::auth::AuthMode::Off);
    let pki = dir.path("pki");
    let keyed = onepipe()
        .args(["topology", "--hosts", "2", "--pki"])
        .arg(&pki)
        .output()
        .unwrap();
    assert!(keyed.status.success());
    let c = onepipe_runtime::Cluster::parse(&String::from_utf8(keyed.stdout).unwrap()).unwrap();
    assert_eq!(c.auth_mode(), onepipe_runtime::auth::AuthMode::On);
    for f in [
        "ca.crt",
        "secret",
        "controller.key",
        "tor-0.crt",
        "p1.key",
        "process.crt",
    ] {
        assert!(pki.join(f).exists(), "{f}");
    }
}

/// A cluster file error names the field and the line, and the daemon exits 2.
#[test]
fn a_bad_cluster_file_is_refused_naming_field_and_line() {
    let dir = TempDir::new("badfile");
    let good = String::from_utf8(
        onepipe()
            .args(["topology", "--hosts", "4"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bad = good.replacen("aggregator = \"tor-1\"", "aggregator = \"tor-7\"", 1);
    let line = bad.lines().position(|l| l.contains("tor-7")).unwrap() + 1;
    std::fs::write(dir.path("c.toml"), bad).unwrap();
    for args in [
        vec!["controller", "--listen", "127.0.0.1:0"],
        vec!["agg", "--id", "tor-0"],
    ] {
        let out = onepipe()
            .args(&args)
            .arg("--config")
            .arg(dir.path("c.toml"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("line {line}: process.aggregator")),
            "{err}"
        );
    }
}

/// §7.3.1 live: the transactional store on four processes under two layers of aggregators
/// (`up --app kv`); every committed transaction replays in timestamp order with every read
/// right, none is left open, and `--history` holds the run's operations.
#[test]
fn up_app_kv_runs_the_store_and_its_checker_passes_with_a_history() {
    let dir = TempDir::new("kv-history");
    let history = dir.path("h.json");
    let h = history.to_str().unwrap();
    let (code, out, r) = up(
        "kv",
        &[
            "--app",
            "kv",
            "--window",
            "8",
            "--keys",
            "500",
            "--drain",
            "5s",
            "--history",
            h,
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("a report");
    assert_eq!(u(&r, "violations"), 0, "{out}");
    assert_eq!(u(&r, "open"), 0, "{out}");
    let committed = u(&r, "committed");
    assert!(committed > 200, "{out}");
    assert_eq!(u(&r, "checked_transactions"), committed, "{out}");
    // The history in Jepsen's form: an invoke and a completion per transaction, micro-operations
    // as ["r", k, v] / ["w", k, v]; read back and checked from the text alone.
    let text = std::fs::read_to_string(&history).unwrap();
    let ops: Vec<Value> = serde_json::from_str(&text).unwrap();
    for k in ["index", "type", "process", "time", "f", "value"] {
        assert!(ops[0].get(k).is_some(), "{k} in {}", ops[0]);
    }
    assert_eq!(ops.len() as u64, 2 * committed, "{} records", ops.len());
    let mops = |f: &str| {
        ops.iter()
            .any(|o| o["value"].as_array().unwrap().iter().any(|m| m[0] == f))
    };
    assert!(mops("r") && mops("w"));
    let h = onepipe_apps::history::from_json(&text).unwrap();
    let opts = onepipe_apps::depgraph::Options {
        realtime: true,
        skew_ns: 0,
    };
    let v = onepipe_apps::depgraph::check(&h, opts);
    assert_eq!((v.anomalies, v.ok), (0, committed), "{:?}", v.samples);
    assert!(v.edges[1] > 0, "nothing was read from a write: {v:?}");
    let graph = &r["checks"]["dependency-graph"];
    assert_eq!(graph["ran"], true, "{out}");
    assert_eq!(graph["counts"]["ok"].as_u64(), Some(committed), "{out}");
}

#[test]
fn up_app_kv_refuses_what_it_does_not_support_naming_the_flag() {
    for (flags, expect) in [
        (&["--system", "farm"][..], "--system"),
        (&["--unordered"][..], "--unordered"),
        (&["--ops-per-txn", "0"][..], "--app kv"),
    ] {
        let out = onepipe()
            .args(["up", "--app", "kv"])
            .args(flags)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(expect), "{flags:?}: {err}");
    }
}

/// §7.3.2 live: TPC-C New-Order and Payment on six processes (2 shards × 3 replicas), each
/// transaction one reliable scattering; the replay against the reference and every replica's
/// digest pass. Live replicas report digests, not rows: clause 3.3.2 is evaluated on the
/// reference's rows, whose digest each replica's equals, and the report says so.
#[test]
fn up_app_tpcc_passes_its_checker_with_replicas_agreeing() {
    let dir = TempDir::new("tpcc-history");
    let history = dir.path("h.json");
    let (code, out, r) = up(
        "tpcc",
        &[
            "--history",
            history.to_str().unwrap(),
            "--app",
            "tpcc",
            "--hosts",
            "6",
            "--window",
            "4",
            "--items",
            "5000",
            "--customers",
            "300",
            "--drain",
            "5s",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("a report");
    assert_eq!(u(&r, "violations"), 0, "{out}");
    assert_eq!(u(&r, "open"), 0, "{out}");
    assert!(u(&r, "committed") > 50, "{out}");
    assert_eq!(u(&r, "shards_compared"), 2, "{out}");
    assert_eq!(u(&r, "checked_transactions"), u(&r, "committed"), "{out}");
    let checks = &r["checks"];
    assert_eq!(checks["tpcc-replay"]["ran"], true, "{checks}");
    assert_eq!(
        checks["replica-agreement"]["counts"]["digests"], 6,
        "{checks}"
    );
    let consistency = &checks["consistency-3.3.2"];
    assert_eq!(consistency["ran"], true, "{checks}");
    assert!(consistency["counts"]["3.3.2.1 W_YTD = sum(D_YTD)"].as_u64() > Some(0));
    let left_out =
        "left out: replica rows not reported (digests only): conditions over the reference's rows";
    assert_eq!(checks["tpcc-replay"]["counts"][left_out], 6, "{checks}");
    // The key accesses in Jepsen's form, read back and checked from the text alone.
    let committed = u(&r, "committed");
    let text = std::fs::read_to_string(&history).unwrap();
    let h = onepipe_apps::history::from_json(&text).unwrap();
    assert_eq!(h.len() as u64, 2 * committed, "{} records", h.len());
    let opts = onepipe_apps::depgraph::Options {
        realtime: true,
        skew_ns: 0,
    };
    let v = onepipe_apps::depgraph::check(&h, opts);
    assert_eq!((v.anomalies, v.ok), (0, committed), "{:?}", v.samples);
    assert!(v.edges[0] > 0 && v.edges[1] > 0, "{v:?}");
    let graph = &checks["dependency-graph"];
    assert_eq!(graph["ran"], true, "{checks}");
    assert_eq!(graph["counts"]["ok"].as_u64(), Some(committed), "{checks}");
}

/// §7.3.1 and §5.2 live: a store process (server and initiator) killed mid-run. The controller
/// declares it failed; the others abandon what needed its keys and go on; every transaction that
/// committed still checks — the dead initiator's writes known from the servers' logs, the reads
/// of what only its own server logged left out (counted).
#[test]
fn up_app_kv_survives_a_killed_process_and_its_checker_passes_5_2() {
    let (code, out, r) = up(
        "kv-kill",
        &[
            "--app",
            "kv",
            "--procs-per-host",
            "2",
            "--window",
            "8",
            "--keys",
            "2000",
            "--duration",
            "3s",
            "--kill",
            "proc:3@1s",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("a report");
    assert_eq!(u(&r, "violations"), 0, "{out}");
    assert!(u(&r, "committed") > 200, "{out}");
    assert_eq!(r["failed_procs"], serde_json::json!([3]), "{out}");
    assert!(out.contains("declared failed p3"), "{out}");
}

/// §7.3.2 and §5.2 live: a TPC-C process (a replica and an initiator) killed mid-run; its shard
/// goes on with the live replicas, its own transactions are placed from the replicas' logs, and
/// the replay, the live replicas' digests and clause 3.3.2 (on the reference's rows) pass.
#[test]
fn up_app_tpcc_survives_a_killed_replica_and_its_checker_passes_5_2() {
    let (code, out, r) = up(
        "tpcc-kill",
        &[
            "--app",
            "tpcc",
            "--hosts",
            "6",
            "--procs-per-host",
            "2",
            "--window",
            "4",
            "--items",
            "5000",
            "--customers",
            "300",
            "--duration",
            "3s",
            "--kill",
            "proc:4@1s",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let r = r.expect("a report");
    assert_eq!(u(&r, "violations"), 0, "{out}");
    assert!(u(&r, "committed") > 100, "{out}");
    assert_eq!(r["failed_procs"], serde_json::json!([4]), "{out}");
    assert_eq!(u(&r, "shards_compared"), 4, "{out}");
    // The history alone checks too: the dead initiator's transactions are `info`, with the
    // values the replicas that applied them answered (their logs), not guessed.
    let graph = &r["checks"]["dependency-graph"];
    assert_eq!(graph["ran"], true, "{out}");
    assert_eq!(graph["violations"], 0, "{out}");
    assert_eq!(
        graph["counts"]["ok"].as_u64(),
        Some(u(&r, "committed")),
        "{out}"
    );
}

/// One `up --app replkv` run of 3 s on six processes (3 replicas, 3 clients) with `extra`
/// flags, checked: exit 0, no violation, nothing undecided, the history complete. With kills
/// (at 1 s or later) the service must have gone on: operations returned more than 2 s after
/// the first was called (a service that stopped at the kill spans about 1 s). Returns the
/// report.
fn replkv_run(name: &str, extra: &[&str], killed: bool) -> Value {
    let dir = TempDir::new(&format!("{name}-history"));
    let history = dir.path("h.json");
    let mut flags = vec![
        "--app",
        "replkv",
        "--hosts",
        "6",
        "--keys",
        "200",
        "--duration",
        "3s",
        "--drain",
        "5s",
        "--history",
        history.to_str().unwrap(),
    ];
    flags.extend(extra);
    let (code, out, r) = up(name, &flags);
    assert_eq!(code, 0, "{name}: {out}");
    let r = r.expect("a report");
    assert_eq!(u(&r, "violations"), 0, "{name}: {out}");
    assert_eq!(u(&r, "undecided"), 0, "{name}: {out}");
    let committed = u(&r, "committed");
    // Not a speed check: enough operations that keys meet and the checker has work.
    assert!(committed > 20, "{name}: {out}");
    assert!(u(&r, "checked_ops") >= committed, "{name}: {out}");
    if !killed {
        assert_eq!(u(&r, "open"), 0, "{name}: {out}");
    }
    // Jepsen's form: an invoke and a completion per operation (open writes as info), read back
    // and checked from the text alone by the dependency-graph checker.
    let text = std::fs::read_to_string(&history).unwrap();
    let h = onepipe_apps::history::from_json(&text).unwrap();
    let open = u(&r, "open");
    assert_eq!(h.len() as u64, 2 * (committed + open), "{name}");
    let opts = onepipe_apps::depgraph::Options {
        realtime: true,
        skew_ns: 0,
    };
    let g = onepipe_apps::depgraph::check(&h, opts);
    assert_eq!(
        (g.anomalies, g.ok, g.info),
        (0, committed, open),
        "{name}: {:?}",
        g.samples
    );
    if killed {
        // A failed client's writes placed from the logs are called "at 0": not a time seen.
        let first_call = h.iter().map(|o| o.time).filter(|&t| t > 0).min().unwrap();
        let last_return = h
            .iter()
            .filter(|o| o.kind == onepipe_apps::history::OpType::Ok)
            .map(|o| o.time)
            .max()
            .unwrap();
        assert!(
            last_return - first_call > 2_000_000_000,
            "{name}: no operation returned after the kill: {out}"
        );
    }
    r
}

/// §2.2.2 live: the replicated key-value service by 1-RTT replication on six processes (3
/// replicas, 3 clients) — every operation linearizable, the replicas' logs identical, `--history`
/// written; then with a replica killed (the survivors recover into a view of two) and with a
/// client killed (its committed writes placed from the replicas' logs).
#[test]
fn up_app_replkv_is_linearizable_with_and_without_a_kill_2_2_2() {
    for (name, kill) in [
        ("replkv", None),
        ("replkv-kill-replica", Some("proc:1@1s")),
        ("replkv-kill-client", Some("proc:4@1s")),
    ] {
        let extra: Vec<&str> = kill.map_or(vec![], |k| vec!["--kill", k]);
        let r = replkv_run(name, &extra, kill.is_some());
        if kill.is_some() {
            assert!(r["stats"]["recoveries"].as_u64() > Some(0), "{name}: {r}");
        }
    }
}

/// The same service on MultiPaxos with batching and pipelining (`--system paxos`, on the
/// unordered transport): its history is linearizable and its replicas' logs agree; then with
/// the leader killed (a follower wins Phase 1 and the service goes on) and a client killed
/// (its committed writes placed from the logs).
#[test]
fn up_app_replkv_on_paxos_survives_a_leader_and_a_client_kill_2_2_2() {
    for (name, kills) in [
        ("replkv-paxos", &[][..]),
        (
            "replkv-paxos-kill-leader-and-client",
            &["--kill", "proc:0@1s", "--kill", "proc:4@2s"][..],
        ),
    ] {
        let mut extra = vec!["--system", "paxos"];
        extra.extend(kills);
        let r = replkv_run(name, &extra, !kills.is_empty());
        assert_eq!(r["system"], "paxos", "{name}: {r}");
        assert!(
            r["paxos"]["instances_decided"].as_u64() > Some(0),
            "{name}: {r}"
        );
        if !kills.is_empty() {
            assert!(r["paxos"]["phase1_won"].as_u64() > Some(0), "{name}: {r}");
        }
    }
}
