//! End-to-end tests of the `onepipe` command: they run the real binary and read its JSON report.

mod common;
use common::{describe, onepipe, TempDir};
use serde_json::Value;
use std::path::Path;
use std::process::Output;

/// The acceptance command of the issue (without `--json` and `--quiet`, which the helpers add).
const ACCEPTANCE: &[&str] = &[
    "--topology",
    "fat-tree",
    "--k",
    "4",
    "--procs-per-host",
    "1",
    "--switch",
    "chip",
    "--beacon-interval",
    "3us",
    "--clock-skew",
    "0.3us",
    "--workload",
    "all-to-all",
    "--rate",
    "10000",
    "--duration",
    "5ms",
    "--seed",
    "1",
];

/// The acceptance configuration, short (1 ms), without the flags the tests vary.
const SMALL_BASE: &[&str] = &[
    "--topology",
    "fat-tree",
    "--k",
    "4",
    "--procs-per-host",
    "1",
    "--beacon-interval",
    "3us",
    "--clock-skew",
    "0.3us",
    "--rate",
    "10000",
    "--duration",
    "1ms",
];

/// The short acceptance configuration plus `extra`; `--switch chip`, `--workload all-to-all` and
/// `--seed 1` unless `extra` sets them.
fn small<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = SMALL_BASE.to_vec();
    for (flag, default) in [
        ("--switch", "chip"),
        ("--workload", "all-to-all"),
        ("--seed", "1"),
    ] {
        if !extra.contains(&flag) {
            v.extend_from_slice(&[flag, default]);
        }
    }
    v.extend_from_slice(extra);
    v
}

/// Runs `onepipe sim --quiet --json FILE ARGS...`, expects exit 0 and returns the report.
fn sim_json_at(json: &Path, args: &[&str]) -> (Value, Output) {
    let json_s = json.to_str().expect("utf-8 temp path");
    let mut full = vec!["sim", "--quiet", "--json", json_s];
    full.extend_from_slice(args);
    let out = onepipe(&full);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&full, &out));
    let text = std::fs::read_to_string(json)
        .unwrap_or_else(|e| panic!("read {}: {e}\n{}", json.display(), describe(&full, &out)));
    let report: Value = serde_json::from_str(&text).expect("report is JSON");
    (report, out)
}

/// Like [`sim_json_at`], in a fresh temp dir named after `test`.
fn sim_json(test: &str, args: &[&str]) -> Value {
    let dir = TempDir::new(test);
    sim_json_at(&dir.path("report.json"), args).0
}

fn u(r: &Value, key: &str) -> u64 {
    r[key]
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` is not an unsigned integer in {r:#}"))
}

fn f(r: &Value, key: &str) -> f64 {
    r[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is not a number in {r:#}"))
}

fn mean(r: &Value, key: &str) -> f64 {
    f(&r[key], "mean")
}

fn hash(r: &Value) -> String {
    r["trace_hash"]
        .as_str()
        .unwrap_or_else(|| panic!("`trace_hash` is not a string in {r:#}"))
        .to_string()
}

/// A run with FIFO links and no failures: checked, no violations, everything delivered.
fn assert_clean(r: &Value, what: &str) {
    assert_eq!(u(r, "violations"), 0, "{what}: violations in {r:#}");
    assert_eq!(r["checked"], Value::Bool(true), "{what}: checkers off");
    assert!(u(r, "delivered") > 0, "{what}: nothing delivered in {r:#}");
    assert_eq!(
        u(r, "checked_deliveries"),
        u(r, "delivered"),
        "{what}: not every delivery was checked"
    );
    assert_eq!(
        u(r, "delivered"),
        u(r, "sent"),
        "{what}: lossless FIFO run lost messages: {r:#}"
    );
    assert_eq!(u(r, "dropped_late"), 0, "{what}: {r:#}");
    assert_eq!(u(r, "dropped_incomplete"), 0, "{what}: {r:#}");
    assert_eq!(u(r, "send_failed"), 0, "{what}: {r:#}");
}

fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = base.to_vec();
    v.extend_from_slice(extra);
    v
}

// 1. The acceptance command.
#[test]
fn acceptance_command_is_clean_and_reproducible() {
    let dir = TempDir::new("acceptance");
    let (a, out_a) = sim_json_at(&dir.path("a.json"), ACCEPTANCE);
    let (b, _) = sim_json_at(&dir.path("b.json"), ACCEPTANCE);

    assert_eq!(u(&a, "violations"), 0, "{a:#}");
    assert!(u(&a, "delivered") > 0, "{a:#}");
    let reorder = mean(&a, "reorder_delay_ns");
    assert!(
        (1000.0..=4000.0).contains(&reorder),
        "chip-mode mean reorder delay {reorder} ns is outside 1–4 µs"
    );
    assert_eq!(hash(&a), hash(&b), "same seed, different trace");
    assert_eq!(u(&a, "events"), u(&b, "events"));
    assert_eq!(u(&a, "delivered"), u(&b, "delivered"));

    // The printed summary agrees with the JSON.
    let stdout = String::from_utf8_lossy(&out_a.stdout);
    assert!(stdout.contains("seed 1"), "{stdout}");
    assert!(stdout.contains(&format!("trace {}", hash(&a))), "{stdout}");
    assert!(stdout.contains("0 violations"), "{stdout}");
}

// 2. The report's shape.
#[test]
fn json_report_has_the_documented_fields() {
    let r = sim_json("fields", &small(&[]));
    for key in [
        "seed",
        "sent",
        "delivered",
        "violations",
        "dropped_late",
        "throughput_msgs_per_s_per_proc",
        "latency_ns",
        "reorder_delay_ns",
        "beacon_bandwidth_share",
        "events",
        "events_per_wall_s",
        "trace_hash",
    ] {
        assert!(r.get(key).is_some(), "missing `{key}` in {r:#}");
    }
    for key in [
        "seed",
        "sent",
        "delivered",
        "violations",
        "dropped_late",
        "events",
    ] {
        u(&r, key);
    }
    for key in [
        "throughput_msgs_per_s_per_proc",
        "beacon_bandwidth_share",
        "events_per_wall_s",
    ] {
        let v = f(&r, key);
        assert!(v.is_finite() && v > 0.0, "`{key}` = {v}");
    }
    for summary in ["latency_ns", "reorder_delay_ns"] {
        for stat in ["mean", "p50", "p99"] {
            let v = r[summary][stat]
                .as_f64()
                .unwrap_or_else(|| panic!("`{summary}.{stat}` missing or not a number in {r:#}"));
            assert!(v.is_finite() && v >= 0.0, "`{summary}.{stat}` = {v}");
        }
        assert!(
            f(&r[summary], "p50") <= f(&r[summary], "p99"),
            "`{summary}`: p50 > p99"
        );
    }
    assert_eq!(u(&r, "seed"), 1);
    assert!(u(&r, "delivered") <= u(&r, "sent"));
    assert!(u(&r, "events") > 0);
    let share = f(&r, "beacon_bandwidth_share");
    assert!(share < 1.0, "beacons use {share} of all link capacity");
    // A clean FIFO run delivers everything: throughput is delivered / procs / duration.
    let expected = u(&r, "delivered") as f64 / u(&r, "procs") as f64 / 1e-3;
    let got = f(&r, "throughput_msgs_per_s_per_proc");
    assert!(
        (got - expected).abs() <= 1e-6 * expected,
        "{got} vs {expected}"
    );
    let h = hash(&r);
    assert!(
        !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()),
        "trace_hash {h:?} is not hex"
    );
}

// 3. Non-FIFO links.
#[test]
fn reordering_links_drop_late_packets_but_keep_order() {
    let r = sim_json("reorder", &small(&["--reorder-prob", "0.05"]));
    assert_eq!(u(&r, "violations"), 0, "{r:#}");
    assert!(u(&r, "dropped_late") > 0, "no late drops: {r:#}");
    assert!(
        u(&r, "reordered_packets") > 0,
        "no packet was held back: {r:#}"
    );
    assert!(u(&r, "delivered") > 0, "{r:#}");
    assert!(u(&r, "delivered") < u(&r, "sent"), "{r:#}");
}

// 4. Switch incarnations.
#[test]
fn cpu_and_host_switches_reorder_slower_than_chip() {
    let delay = |mode: &str| {
        let r = sim_json(&format!("switch-{mode}"), &small(&["--switch", mode]));
        assert_clean(&r, mode);
        assert_eq!(r["switch_mode"].as_str(), Some(mode), "{r:#}");
        mean(&r, "reorder_delay_ns")
    };
    let (chip, cpu, host) = (delay("chip"), delay("cpu"), delay("host"));
    assert!(cpu > chip, "cpu {cpu} ns <= chip {chip} ns");
    assert!(host > chip, "host {host} ns <= chip {chip} ns");
    assert!(host > cpu, "host {host} ns <= cpu {cpu} ns");
}

// 5. Seeds.
#[test]
fn different_seeds_give_different_traces() {
    let mut hashes = Vec::new();
    for seed in ["1", "2", "3"] {
        let r = sim_json(&format!("seed-{seed}"), &small(&["--seed", seed]));
        assert_eq!(u(&r, "seed").to_string(), seed);
        assert_clean(&r, &format!("seed {seed}"));
        hashes.push(hash(&r));
    }
    assert_ne!(hashes[0], hashes[1]);
    assert_ne!(hashes[0], hashes[2]);
    assert_ne!(hashes[1], hashes[2]);
}

// 6. Bad flags.
#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let dir = TempDir::new("bad-flags");
    let json = dir.path("never.json");
    let json_s = json.to_str().expect("utf-8 temp path");
    // (arguments, what the first line of stderr must mention, whether the whole error is one line)
    let cases: &[(&[&str], &[&str], bool)] = &[
        (&["--k", "3"], &["--k"], true),
        (&["--msg-size", "4"], &["--msg-size"], true),
        (&["--rate", "0"], &["--rate"], true),
        (&["--reorder-prob", "2"], &["--reorder-prob"], true),
        (&["--rto-max", "10us"], &["--rto-max"], true),
        (&["--dupack-threshold", "0"], &["--dupack-threshold"], true),
        (
            &["--beacon-interval", "3"],
            &["--beacon-interval", "unit"],
            false,
        ),
        (&["--topology", "mesh"], &["--topology", "mesh"], false),
        (
            &[
                "--scatter-k",
                "99",
                "--workload",
                "scatter",
                "--topology",
                "rack",
                "--hosts",
                "4",
            ],
            &["--scatter-k"],
            true,
        ),
        (&["--procs-per-host", "0"], &["--procs-per-host"], true),
        // §2.1: a best-effort ACK delayed past a quarter of the loss timeout could arrive after
        // the sender reported a delivered message lost.
        (&["--ack-delay-be", "300us"], &["--ack-delay-be"], true),
        // An adaptive loss timeout never goes below the fixed one.
        (
            &["--loss-timeout-max", "500us"],
            &["--loss-timeout-max"],
            true,
        ),
        (&["--bogus"], &["--bogus"], false),
        // A few more of the same kind.
        (&["--topology", "rack", "--hosts", "0"], &["--hosts"], true),
        (&["--mtu", "0"], &["--mtu"], true),
        // Fault model.
        (&["--loss", "2"], &["--loss"], true),
        (&["--loss-burst", "0"], &["--loss-burst"], true),
        (&["--dup", "1.5"], &["--dup"], true),
        (&["--loss-kind", "everything"], &["--loss-kind"], false),
        // 65,536 processes: more senders than a receiver can order.
        (&["--k", "64"], &["--k", "senders"], true),
        (
            &["--topology", "rack", "--hosts", "65536"],
            &["--hosts", "senders"],
            true,
        ),
        (
            &["--procs-per-host", "64", "--k", "32"],
            &["--procs-per-host", "senders"],
            true,
        ),
        // 54,000 hosts × 54,000 processes of per-sender state: refused, not an out-of-memory.
        (&["--k", "60"], &["--k", "GiB"], true),
        (&["--duration", "0us"], &["--duration"], true),
        (&["--beacon-interval", "0us"], &["--beacon-interval"], true),
        (
            &["--beacon-interval", "3xs"],
            &["--beacon-interval", "unit"],
            false,
        ),
        (&["--rate", "inf"], &["--rate"], true),
        (&["--reorder-prob", "NaN"], &["--reorder-prob"], true),
        (&["--clock-skew=-1us"], &["--clock-skew"], false),
        (&["--switch", "fpga"], &["--switch", "fpga"], false),
        (&["--queue", "fibonacci"], &["--queue"], false),
        (&["--workload", "gossip"], &["--workload"], false),
        (
            &["--topology", "leaf-spine", "--spines", "0"],
            &["--spines"],
            true,
        ),
        (&["--clock-step", "3@1ms"], &["--clock-step"], false),
        (
            &["--clock-step", "99@1ms:+5us"],
            &["--clock-step", "99"],
            true,
        ),
        (
            &["--controller-down", "900us..700us"],
            &["--controller-down"],
            true,
        ),
        (
            &["--controller-down", "700us"],
            &["--controller-down"],
            false,
        ),
    ];
    for (args, needles, one_line) in cases {
        let mut full = vec!["sim", "--quiet", "--duration", "100us", "--json", json_s];
        // A later `--duration` would be a clap "used multiple times" error; drop the default one.
        if args.contains(&"--duration") {
            full.drain(2..4);
        }
        full.extend_from_slice(args);
        let out = onepipe(&full);
        let ctx = describe(&full, &out);
        assert_eq!(out.status.code(), Some(2), "{ctx}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().next().unwrap_or_default();
        for needle in *needles {
            assert!(
                first.contains(needle),
                "first error line does not mention {needle:?}\n{ctx}"
            );
        }
        if *one_line {
            assert_eq!(stderr.trim_end().lines().count(), 1, "{ctx}");
        }
        assert!(
            out.stdout.is_empty(),
            "a refused run printed a summary\n{ctx}"
        );
        assert!(!json.exists(), "a refused run wrote a report\n{ctx}");
    }
}

#[test]
fn unwritable_json_path_exits_2_naming_json() {
    let dir = TempDir::new("bad-json");
    let json = dir.path("no-such-dir").join("r.json");
    let args = [
        "sim",
        "--quiet",
        "--topology",
        "rack",
        "--hosts",
        "2",
        "--duration",
        "100us",
        "--json",
        json.to_str().expect("utf-8 temp path"),
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--json"),
        "{}",
        describe(&args, &out)
    );
}

// 7. Help.
#[test]
fn help_exits_0_and_lists_sim_and_its_flags() {
    let out = onepipe(&["--help"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        describe(&["--help"], &out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sim"), "{text}");

    let out = onepipe(&["sim", "--help"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        describe(&["sim", "--help"], &out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--topology",
        "--k",
        "--hosts",
        "--procs-per-host",
        "--switch",
        "--beacon-interval",
        "--clock-skew",
        "--workload",
        "--scatter-k",
        "--msg-size",
        "--rate",
        "--duration",
        "--reorder-prob",
        "--ack-delay-be",
        "--seed",
        "--json",
        "--quiet",
    ] {
        assert!(
            text.contains(flag),
            "`sim --help` does not mention {flag}\n{text}"
        );
    }
    for value in ["fat-tree", "leaf-spine", "rack", "chip", "cpu", "host"] {
        assert!(
            text.contains(value),
            "`sim --help` does not mention {value}"
        );
    }

    let out = onepipe(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("onepipe"));
}

// 8. Coverage of topologies, workloads and options.
#[test]
fn every_topology_runs_clean() {
    let cases: &[(&str, &[&str], u64)] = &[
        ("rack", &["--topology", "rack", "--hosts", "5"], 5),
        (
            "leaf-spine",
            &[
                "--topology",
                "leaf-spine",
                "--hosts",
                "10",
                "--rack-size",
                "4",
                "--spines",
                "2",
            ],
            10,
        ),
        ("fat-tree-2", &["--topology", "fat-tree", "--k", "2"], 2),
        ("fat-tree-4", &["--topology", "fat-tree", "--k", "4"], 16),
    ];
    for (name, args, hosts) in cases {
        let r = sim_json(name, &with(&["--duration", "1ms"], args));
        assert_clean(&r, name);
        assert_eq!(u(&r, "hosts"), *hosts, "{name}: {r:#}");
        assert_eq!(u(&r, "procs"), *hosts, "{name}: {r:#}");
        // All-to-all: every scattering goes to every process.
        assert_eq!(u(&r, "sent"), u(&r, "scatterings") * hosts, "{name}: {r:#}");
    }
}

#[test]
fn every_workload_runs_clean() {
    let cases: &[(&str, &[&str], u64)] = &[
        ("all-to-all", &["--workload", "all-to-all"], 16),
        ("scatter", &["--workload", "scatter", "--scatter-k", "3"], 3),
        ("one-to-one", &["--workload", "one-to-one"], 1),
    ];
    for (name, args, per_scattering) in cases {
        let r = sim_json(name, &small(args));
        assert_clean(&r, name);
        assert!(u(&r, "scatterings") > 0, "{name}: {r:#}");
        assert_eq!(
            u(&r, "sent"),
            u(&r, "scatterings") * per_scattering,
            "{name}: {r:#}"
        );
    }
}

#[test]
fn several_processes_per_host_run_clean() {
    let r = sim_json(
        "procs-per-host",
        &[
            "--topology",
            "fat-tree",
            "--k",
            "4",
            "--procs-per-host",
            "3",
            "--duration",
            "1ms",
        ],
    );
    assert_clean(&r, "--procs-per-host 3");
    assert_eq!(u(&r, "hosts"), 16);
    assert_eq!(u(&r, "procs"), 48);
}

#[test]
fn fragmented_messages_run_clean() {
    let r = sim_json(
        "fragments",
        &small(&["--msg-size", "10000", "--mtu", "1000"]),
    );
    assert_clean(&r, "--msg-size 10000 --mtu 1000");
    // Ten fragments per message: many more events than the unfragmented run.
    let plain = sim_json("fragments-plain", &small(&[]));
    assert_eq!(u(&r, "sent"), u(&plain, "sent"));
    assert!(u(&r, "events") > u(&plain, "events"), "{r:#}\n{plain:#}");
}

#[test]
fn queue_kinds_give_the_same_trace() {
    let mut hashes = Vec::new();
    for queue in ["radix", "4ary", "binary"] {
        let r = sim_json(&format!("queue-{queue}"), &small(&["--queue", queue]));
        assert_clean(&r, queue);
        hashes.push((queue, hash(&r), u(&r, "events")));
    }
    for (queue, h, events) in &hashes[1..] {
        assert_eq!(h, &hashes[0].1, "--queue {queue} vs radix");
        assert_eq!(events, &hashes[0].2, "--queue {queue} vs radix");
    }
}

#[test]
fn clock_epoch_near_the_48_bit_wrap_runs_clean() {
    // 2^48 ns = 281474976.710656 ms. `281474976ms` starts 0.71 ms before the wrap, so a 1 ms run
    // crosses it; `281474975ms` starts 1.71 ms before, so a 2 ms run crosses it while sending.
    // (`281474975us` is only 281 s — nowhere near the wrap — but must run clean too.)
    let cases: &[(&str, &[&str])] = &[
        (
            "epoch-0.7ms",
            &["--clock-epoch", "281474976ms", "--duration", "1ms"],
        ),
        (
            "epoch-1.7ms",
            &["--clock-epoch", "281474975ms", "--duration", "2ms"],
        ),
        (
            "epoch-281s",
            &["--clock-epoch", "281474975us", "--duration", "1ms"],
        ),
        (
            "epoch-0.7ms-cpu",
            &[
                "--clock-epoch",
                "281474976ms",
                "--duration",
                "1ms",
                "--switch",
                "cpu",
            ],
        ),
        (
            "epoch-0.7ms-host",
            &[
                "--clock-epoch",
                "281474976ms",
                "--duration",
                "1ms",
                "--switch",
                "host",
            ],
        ),
    ];
    for (name, args) in cases {
        let r = sim_json(name, &with(&["--topology", "fat-tree", "--k", "4"], args));
        assert_clean(&r, name);
        let reorder = mean(&r, "reorder_delay_ns");
        assert!(
            reorder < 100_000.0,
            "{name}: mean reorder delay {reorder} ns"
        );
    }
    // Across the wrap with non-FIFO links: late drops, but no order violation.
    let r = sim_json(
        "epoch-reorder",
        &[
            "--clock-epoch",
            "281474976ms",
            "--duration",
            "1ms",
            "--reorder-prob",
            "0.05",
        ],
    );
    assert_eq!(u(&r, "violations"), 0, "{r:#}");
    assert!(u(&r, "delivered") > 0, "{r:#}");
}

#[test]
fn no_check_turns_the_checkers_off() {
    let r = sim_json("no-check", &small(&["--no-check"]));
    assert_eq!(r["checked"], Value::Bool(false), "{r:#}");
    assert_eq!(u(&r, "violations"), 0);
    assert_eq!(u(&r, "checked_deliveries"), 0);
    assert!(u(&r, "delivered") > 0);
    // Checking observes the run; it does not change it.
    let checked = sim_json("no-check-checked", &small(&[]));
    assert_eq!(hash(&r), hash(&checked));
}

// Reliable service (issue 3).

/// The swarm's newer fault types from the command line: clock steps and a controller outage in
/// the middle of a §5.2 round — every checker passes, the round resumes, messages to the down
/// controller were lost and re-sent.
#[test]
fn clock_steps_and_a_controller_outage_from_the_command_line_5_2() {
    let args = [
        "--service",
        "reliable",
        "--procs-per-host",
        "2",
        "--rate",
        "50000",
        "--duration",
        "1500us",
        "--crash-host",
        "5@700us",
        "--controller-down",
        "720us..800us",
        "--clock-step",
        "3@400us:+40us",
        "--clock-step",
        "7@500us:-30us",
    ];
    let r = sim_json("faults-2", &args);
    assert_eq!(u(&r, "violations"), 0, "{r:#}");
    assert!(r["drained"].as_bool().expect("drained is a bool"));
    assert!(u(&r, "ctrl_lost") > 0 && u(&r, "ctrl_resent") > 0, "{r:#}");
    let rounds = r["failure_rounds"].as_array().expect("rounds");
    assert!(!rounds.is_empty() && rounds.iter().all(|f| !f["resumed_ns"].is_null()));
}

/// The acceptance command: reliable scatterings with 0.1% loss on a k=4 fat tree.
#[test]
fn reliable_acceptance_command_repairs_every_loss() {
    let args = [
        "--topology",
        "fat-tree",
        "--k",
        "4",
        "--procs-per-host",
        "2",
        "--service",
        "reliable",
        "--loss",
        "1e-3",
        "--workload",
        "scatter",
        "--duration",
        "5ms",
        "--seed",
        "3",
    ];
    let r = sim_json("reliable", &args);
    assert_eq!(u(&r, "violations"), 0, "{r:#}");
    assert_eq!(u(&r, "undelivered_reliable"), 0);
    assert!(u(&r, "retransmits") > 0);
    assert!(u(&r, "acks") > 0);
    assert_eq!(u(&r, "delivered"), u(&r, "sent"));
    assert_eq!(r["service"], "reliable");
    for key in ["latency_ns_be", "latency_ns_reliable"] {
        assert!(r[key]["p50"].as_u64().is_some(), "missing `{key}` in {r:#}");
    }
}

#[test]
fn mixed_service_reports_both_latencies() {
    let r = sim_json("mixed", &small(&["--service", "mixed", "--dup", "0.01"]));
    assert_clean(&r, "mixed");
    assert!(u(&r["latency_ns_be"], "count") > 0 && u(&r["latency_ns_reliable"], "count") > 0);
    assert!(u(&r, "delivered_reliable") > 0);
}

/// `onepipe bench loss --quick` and `bench throughput --quick` run and write their CSVs, so the
/// documented benchmark commands cannot rot.
#[test]
fn bench_commands_write_their_csv() {
    let dir = TempDir::new("bench");
    for (bench, rows) in [("loss", 12), ("throughput", 2)] {
        let csv = dir.path(&format!("{bench}.csv"));
        let args = ["bench", bench, "--quick", "--out", csv.to_str().unwrap()];
        let out = onepipe(&args);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
        let text = std::fs::read_to_string(&csv).expect("csv written");
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), rows + 1, "{text}");
        assert!(lines[0].starts_with("service,"));
        assert!(lines[1..].iter().any(|l| l.starts_with("reliable,")));
    }
}

// The swarm (issue 5).

#[test]
fn vopr_runs_seeds_and_replays_one() {
    let args = [
        "vopr",
        "--seeds",
        "5",
        "--seed",
        "11",
        "--duration",
        "300us",
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("5 ok, 0 correctness, 0 liveness, 0 crash"),
        "{text}"
    );
    assert!(text.contains("checked_deliveries"), "{text}");
    assert!(text.contains("host crashes"), "{text}");
    let args = ["vopr", "--seeds", "0"];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seeds"));
}

/// `onepipe model paxos` prints the seed paper's §III model: the cluster's optimal batch for one
/// instance at a time (~46 KiB), Eq. 1's throughput; a bad replica count is refused by name.
#[test]
fn model_paxos_prints_the_optimal_batch_and_refuses_an_even_group() {
    let args = ["model", "paxos", "--setting", "cluster"];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("optimal batch, WND = 1 (Eq. 5)  45.9 KiB"),
        "{text}"
    );
    assert!(text.contains("max throughput (Eq. 1)"), "{text}");
    let args = ["model", "paxos", "--replicas", "4"];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("replicas"));
}
