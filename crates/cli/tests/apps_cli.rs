//! End-to-end tests of `onepipe sim --app kv` and `onepipe bench fig14 --quick`: they run the real
//! binary and read what it writes.

mod common;
use common::{describe, onepipe, TempDir};
use serde_json::Value;

#[test]
fn sim_app_kv_reports_the_transactions_and_writes_the_history_7_3_1() {
    let dir = TempDir::new("kv");
    let (json, hist) = (dir.0.join("r.json"), dir.0.join("h.json"));
    let args = [
        "sim",
        "--app",
        "kv",
        "--topology",
        "rack",
        "--hosts",
        "4",
        "--keys",
        "100",
        "--duration",
        "300us",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
        "--history",
        hist.to_str().unwrap(),
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let app = &r["app"];
    assert_eq!(app["system"], "1pipe");
    assert!(app["committed"].as_u64().unwrap() > 50, "{app}");
    assert_eq!(app["violations"], 0);
    assert_eq!(app["checked"], true);
    let h: Value = serde_json::from_str(&std::fs::read_to_string(&hist).unwrap()).unwrap();
    let op = &h.as_array().expect("one JSON array")[0];
    for key in ["client", "op", "key", "value", "output", "call", "return"] {
        assert!(op.get(key).is_some(), "no {key} in {op}");
    }
}

#[test]
fn sim_app_kv_on_the_non_transactional_baseline() {
    let args = [
        "sim",
        "--app",
        "kv",
        "--system",
        "nontx",
        "--topology",
        "rack",
        "--hosts",
        "4",
        "--duration",
        "300us",
        "--quiet",
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("nontx states no serialization order"),
        "{stdout}"
    );
}

/// `sim --app replkv` on each system: every run's checkers pass and the summary says so.
#[test]
fn sim_app_replkv_runs_checked_on_each_system() {
    for system in ["1pipe", "paxos", "chain"] {
        let args = [
            "sim",
            "--app",
            "replkv",
            "--system",
            system,
            "--duration",
            "300us",
            "--keys",
            "50",
        ];
        let out = onepipe(&args);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("checked for linearizability") && stdout.contains(": 0 violation(s)"),
            "{stdout}"
        );
    }
}

/// `sim --app hashtable` on 1Pipe and on the fenced baseline, replicated: every run checked
/// (linearizability, chains, replicas) and clean, and the summary says so (§7.3.3).
#[test]
fn sim_app_hashtable_runs_checked_on_both_systems_7_3_3() {
    for system in ["1pipe", "rdma"] {
        let args = [
            "sim",
            "--app",
            "hashtable",
            "--system",
            system,
            "--servers",
            "4",
            "--replicas",
            "3",
            "--clients",
            "4",
            "--keys",
            "100",
            "--buckets",
            "8",
            "--duration",
            "300us",
            "--quiet",
        ];
        let out = onepipe(&args);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("app hashtable on {system}"))
                && stdout.contains("chains and replicas compared")
                && stdout.contains(": 0 violation(s)"),
            "{stdout}"
        );
    }
}

#[test]
fn bad_application_flags_are_refused_by_name() {
    for (args, flag) in [
        (&["sim", "--app", "kv", "--ycsb", "z"][..], "--ycsb"),
        (
            &["sim", "--app", "kv", "--write-share", "1.5"][..],
            "write share",
        ),
        (&["sim", "--app", "kv", "--window", "0"][..], "--window"),
        (
            &["sim", "--app", "kv", "--protocol", "token"][..],
            "--protocol",
        ),
        (
            &["sim", "--app", "tpcc", "--system", "farm"][..],
            "--system",
        ),
        (
            &["sim", "--app", "replkv", "--system", "nontx"][..],
            "--system",
        ),
        (
            &["sim", "--app", "replkv", "--replicas", "0"][..],
            "--replicas",
        ),
        (
            &["sim", "--app", "replkv", "--replicas", "16"][..],
            "--replicas",
        ),
        (
            &["sim", "--app", "replkv", "--value-size", "9000"][..],
            "over the limit",
        ),
        (
            &["sim", "--app", "replkv", "--read-share", "2"][..],
            "read ratio",
        ),
        (
            &["sim", "--app", "replkv", "--system", "paxos", "--wnd", "0"][..],
            "--wnd",
        ),
        // 16 servers and 16 clients do not fit the default 16 hosts.
        (
            &["sim", "--app", "hashtable"][..],
            "servers × replicas + clients",
        ),
        (
            &["sim", "--app", "hashtable", "--replicas", "9"][..],
            "9 replicas",
        ),
        (
            &["sim", "--app", "hashtable", "--insert-share", "2"][..],
            "insert share",
        ),
        (
            &[
                "sim",
                "--app",
                "hashtable",
                "--keys",
                "10",
                "--preload",
                "20",
            ][..],
            "preload 20",
        ),
        (
            &[
                "sim",
                "--app",
                "hashtable",
                "--servers",
                "4",
                "--clients",
                "4",
                "--system",
                "paxos",
            ][..],
            "--system",
        ),
        (&["sim", "--app", "kv", "--system", "rdma"][..], "--system"),
    ] {
        let out = onepipe(args);
        assert_eq!(out.status.code(), Some(2), "{}", describe(args, &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag} not named: {err}");
    }
}

#[test]
fn bench_fig14_quick_writes_the_csv_and_the_plots() {
    let dir = TempDir::new("fig14");
    let out_dir = dir.0.join("out");
    let args = [
        "bench",
        "fig14",
        "--quick",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let csv = std::fs::read_to_string(out_dir.join("fig14.csv")).expect("fig14.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // a: 3 systems × 2 key distributions × N = 8, 16; b: 3 × 2 write shares; c: 3 × 2 × 2 sizes.
    assert_eq!(rows.len(), 12 + 6 + 12, "{csv}");
    for r in &rows {
        let thr: f64 = r[col("txns_per_s_per_proc")].parse().unwrap();
        assert!(thr > 0.0, "{r:?}");
        assert_eq!(r[col("violations")], "0", "{r:?}");
        // 1Pipe and FaRM state a serialization order; NonTX does not.
        let checked = r[col("system")] != "nontx";
        assert_eq!(r[col("checked")], checked.to_string(), "{r:?}");
    }
    if font() {
        for png in ["fig14a.png", "fig14b.png", "fig14c.png"] {
            let bytes = std::fs::read(out_dir.join(png)).expect(png);
            assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
        }
    }
}

fn font() -> bool {
    std::env::var("ONEPIPE_FONT").is_ok()
        || std::path::Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists()
}

/// §7.3.2: TPC-C on 1Pipe in the simulator, checked; and on plain messages, not.
#[test]
fn sim_app_tpcc_reports_and_checks_7_3_2() {
    for (system, checked) in [("1pipe", true), ("nontx", false)] {
        let args = [
            "sim",
            "--app",
            "tpcc",
            "--system",
            system,
            "--topology",
            "rack",
            "--hosts",
            "6",
            "--duration",
            "300us",
            "--items",
            "5000",
            "--customers",
            "300",
            "--quiet",
        ];
        let out = onepipe(&args);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("app tpcc on"), "{stdout}");
        assert_eq!(stdout.contains("0 violation(s)"), checked, "{stdout}");
    }
    let args = ["sim", "--app", "tpcc", "--system", "farm", "--quiet"];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
    let args = ["sim", "--app", "tpcc", "--warehouses", "0"];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--app tpcc"));
}

#[test]
fn bench_fig15_quick_writes_the_csv_and_the_plots() {
    let dir = TempDir::new("fig15");
    let out_dir = dir.0.join("out");
    let args = [
        "bench",
        "fig15",
        "--quick",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let csv = std::fs::read_to_string(out_dir.join("fig15.csv")).expect("fig15.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.len() >= 6, "{csv}");
    for r in &rows {
        assert_eq!(r[col("violations")], "0", "{r:?}");
        assert_eq!(
            r[col("checked")],
            (r[col("system")] != "nontx").to_string(),
            "{r:?}"
        );
        if r[col("panel")] == "a" {
            let thr: f64 = r[col("txns_per_s")].parse().unwrap();
            assert!(thr > 0.0, "{r:?}");
        }
    }
    if font() {
        for png in ["fig15a.png", "fig15b.png"] {
            let bytes = std::fs::read(out_dir.join(png)).expect(png);
            assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
        }
    }
}

/// `bench replication --quick`: every point checked and clean; with the disk, a 1-RTT write of
/// an idle system takes less than half a primary-backup chain's (§7.3.4), and in memory it
/// beats MultiPaxos's two round trips.
#[test]
fn bench_replication_quick_writes_the_csv_and_the_plots() {
    let dir = TempDir::new("replication");
    let out_dir = dir.0.join("out");
    let args = [
        "bench",
        "replication",
        "--quick",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let csv = std::fs::read_to_string(out_dir.join("replication.csv")).expect("replication.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 18, "{csv}");
    for r in &rows {
        assert_eq!(r[col("violations")], "0", "{r:?}");
        assert_eq!(r[col("drained")], "true", "{r:?}");
    }
    let p50 = |panel: &str, system: &str| -> f64 {
        let r = rows
            .iter()
            .find(|r| r[0] == panel && r[1] == system && r[col("clients")] == "1")
            .expect("a row");
        r[col("write_p50_ns")].parse().unwrap()
    };
    assert!(p50("a", "1pipe-1rtt") < 0.5 * p50("a", "chain"), "{csv}");
    assert!(p50("c", "1pipe-1rtt") < p50("c", "paxos"), "{csv}");
    if font() {
        for png in [
            "replication-a-latency.png",
            "replication-a-throughput.png",
            "replication-b.png",
            "replication-c.png",
        ] {
            let bytes = std::fs::read(out_dir.join(png)).expect(png);
            assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
        }
    }
}

/// `bench fig16 --quick`: every point checked and clean, and the paper's shapes, loosely
/// (§7.3.3, Fig. 16): 1Pipe inserts faster than the fenced baseline, by more with 3 replicas;
/// 1Pipe lookups within 30% of the baseline's without replicas; and where the servers are the
/// bottleneck, 1Pipe's lookups scale with replicas while leader-follower's do not.
#[test]
fn bench_fig16_quick_writes_the_csv_and_the_plots_7_3_3() {
    let dir = TempDir::new("fig16");
    let out_dir = dir.0.join("out");
    let args = [
        "bench",
        "fig16",
        "--quick",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let csv = std::fs::read_to_string(out_dir.join("fig16.csv")).expect("fig16.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 12, "{csv}");
    for r in &rows {
        assert_eq!(r[col("violations")], "0", "{r:?}");
        assert_eq!(r[col("drained")], "true", "{r:?}");
        assert!(r[col("checked_ops")].parse::<u64>().unwrap() > 0, "{r:?}");
    }
    let thr = |panel: &str, system: &str, replicas: &str| -> f64 {
        let r = rows
            .iter()
            .find(|r| {
                r[col("panel")] == panel
                    && r[col("system")] == system
                    && r[col("replicas")] == replicas
            })
            .expect("a row");
        r[col("ops_per_s_per_client")].parse().unwrap()
    };
    let insert = |r| thr("a", "1pipe", r) / thr("a", "rdma", r);
    assert!(insert("1") > 1.0, "{csv}");
    assert!(insert("3") > insert("1"), "{csv}");
    let lookup = thr("b", "1pipe", "1") / thr("b", "rdma", "1");
    assert!((0.7..1.3).contains(&lookup), "{csv}");
    assert!(thr("c", "1pipe", "3") > thr("c", "rdma", "3"), "{csv}");
    assert!(
        thr("c", "1pipe", "3") > 1.5 * thr("c", "1pipe", "1"),
        "{csv}"
    );
    if font() {
        for png in ["fig16.png", "fig16c.png"] {
            let bytes = std::fs::read(out_dir.join(png)).expect(png);
            assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
        }
    }
}
