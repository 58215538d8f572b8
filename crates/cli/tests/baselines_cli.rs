//! End-to-end tests of `onepipe sim --protocol …`, `onepipe bench fig8 --quick`, `onepipe bench
//! plato --quick` and `onepipe bench toto --quick`: they run the real binary and read what it
//! writes.

mod common;
use common::{describe, onepipe, TempDir};
use serde_json::Value;

/// Runs `onepipe sim ARGS --quiet --json FILE` and returns the report.
fn sim_json(dir: &TempDir, args: &[&str]) -> Value {
    let json = dir.0.join("r.json");
    let mut full = vec!["sim"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--quiet", "--json", json.to_str().expect("utf-8 path")]);
    let out = onepipe(&full);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&full, &out));
    serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("valid json")
}

fn u(r: &Value, key: &str) -> u64 {
    r[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {r}"))
}

const SMALL: &[&str] = &["--k", "4", "--duration", "200us", "--rate", "20000"];

#[test]
fn every_protocol_runs_checked_and_drained_with_the_shared_report_keys() {
    let dir = TempDir::new("every");
    for p in [
        "onepipe-be",
        "onepipe-r",
        "sequencer",
        "sequencer-switch",
        "token",
        "lamport",
        "isis",
    ] {
        let mut args = vec!["--protocol", p];
        args.extend_from_slice(SMALL);
        let r = sim_json(&dir, &args);
        for key in [
            "seed",
            "sent",
            "delivered",
            "violations",
            "violation_samples",
            "latency_ns",
            "throughput_msgs_per_s_per_proc",
            "events",
            "trace_hash",
            "drained",
        ] {
            assert!(r.get(key).is_some(), "{p}: no `{key}` in {r}");
        }
        assert_eq!(u(&r, "violations"), 0, "{p}: {r}");
        assert_eq!(r["drained"], Value::Bool(true), "{p}: {r}");
        assert_eq!(u(&r, "delivered"), u(&r, "sent"), "{p}: {r}");
        assert!(u(&r, "delivered") > 0, "{p}");
    }
    let r = sim_json(
        &dir,
        &["--protocol", "onepipe-r", "--k", "4", "--duration", "100us"],
    );
    assert_eq!(r["service"], "reliable");
    let r = sim_json(
        &dir,
        &[
            "--protocol",
            "sequencer-switch",
            "--k",
            "4",
            "--duration",
            "100us",
        ],
    );
    assert_eq!(r["sequencer_node"], "core-0");
}

#[test]
fn baseline_runs_replay_by_seed_and_survive_loss() {
    let dir = TempDir::new("replay");
    for p in ["sequencer", "token", "lamport", "isis"] {
        let mut args = vec!["--protocol", p, "--loss", "0.01", "--seed", "7"];
        args.extend_from_slice(SMALL);
        let a = sim_json(&dir, &args);
        let b = sim_json(&dir, &args);
        assert_eq!(a["trace_hash"], b["trace_hash"], "{p}");
        assert_eq!(u(&a, "violations"), 0, "{p}: {a}");
        assert!(u(&a, "packets_lost") > 0, "{p}: {a}");
    }
}

#[test]
fn baseline_flags_are_checked_and_conflicts_refused() {
    let out = onepipe(&["sim", "--protocol", "token", "--service", "reliable"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--protocol with --service must be refused"
    );
    let out = onepipe(&[
        "sim",
        "--protocol",
        "token",
        "--token-batch",
        "0",
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token-batch"));
    let out = onepipe(&["sim", "--protocol", "paxos"]);
    assert_eq!(out.status.code(), Some(2));
    let dir = TempDir::new("flags");
    let r = sim_json(
        &dir,
        &[
            "--protocol",
            "lamport",
            "--lamport-heartbeat",
            "7us",
            "--k",
            "4",
            "--duration",
            "100us",
        ],
    );
    assert_eq!(u(&r, "heartbeat_interval_ns"), 7_000);
}

#[test]
fn bench_fig8_quick_writes_the_csv_and_the_plots() {
    let dir = TempDir::new("fig8");
    let out_dir = dir.0.join("out");
    let args = [
        "bench",
        "fig8",
        "--quick",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let csv = std::fs::read_to_string(out_dir.join("fig8.csv")).expect("fig8.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    for col in [
        "protocol",
        "processes",
        "throughput_msgs_per_s_per_proc",
        "latency_p50_ns",
        "latency_p99_ns",
    ] {
        assert!(header.contains(&col), "no column {col} in {header:?}");
    }
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // 7 protocols (ISIS among them) × N = 1, 4, 16.
    assert_eq!(rows.len(), 21, "{csv}");
    assert_eq!(rows.iter().filter(|r| r[0] == "isis").count(), 3, "{csv}");
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    for r in &rows {
        let thr: f64 = r[col("throughput_msgs_per_s_per_proc")].parse().unwrap();
        assert!(thr > 0.0, "{r:?}");
    }
    // The plots need a TrueType font at run time (docs/DEPENDENCIES.md); with one, both exist.
    let font = std::env::var("ONEPIPE_FONT").is_ok()
        || std::path::Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists();
    if font {
        for png in ["fig8-throughput.png", "fig8-latency.png"] {
            let bytes = std::fs::read(out_dir.join(png)).expect(png);
            assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
        }
    }
}

#[test]
fn bench_fig8_selects_protocols_and_process_counts() {
    let dir = TempDir::new("fig8-select");
    let out_dir = dir.0.join("out");
    let args = [
        "bench",
        "fig8",
        "--quick",
        "--protocols",
        "token,onepipe-be",
        "--procs",
        "2,4",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let csv = std::fs::read_to_string(out_dir.join("fig8.csv")).expect("fig8.csv");
    let rows: Vec<(String, String)> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].to_string(), f[1].to_string())
        })
        .collect();
    let want: Vec<(String, String)> = [("token", "2"), ("token", "4")]
        .into_iter()
        .chain([("onepipe-be", "2"), ("onepipe-be", "4")])
        .map(|(p, n)| (p.to_string(), n.to_string()))
        .collect();
    assert_eq!(rows, want, "{csv}");
}

#[test]
fn bench_fig8_rejects_bad_selections_naming_the_flag() {
    for (flag, value) in [
        ("--procs", "100"),
        ("--procs", "0"),
        ("--procs", "4096"),
        ("--procs", "x"),
        ("--protocols", "paxos"),
    ] {
        let args = [
            "bench",
            "fig8",
            "--quick",
            flag,
            value,
            "--out",
            "/nonexistent/x",
        ];
        let out = onepipe(&args);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&args, &out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}

/// `bench plato --quick`: every point of PLATO's Figs. 8 and 10 in the CSV (the fixed sequencer
/// beside each), and, at the smallest rate, PLATO's median latency below the fixed sequencer's
/// with the same k (§5: "PLATO always out-performs fixed-sequencer for the corresponding value of
/// k"): optimistic delivery does not wait for k messages to be ordered. Figs. 3, 9 and 11 are
/// checked by [`check_plato_figs_3_9_11`].
#[test]
fn bench_plato_quick_writes_figs_3_8_9_10_11_and_beats_the_fixed_sequencer_5() {
    let dir = TempDir::new("plato");
    let out_dir = dir.0.join("out");
    let args = [
        "bench",
        "plato",
        "--quick",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("fitted to the paper's 100-us one-way ping"),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(out_dir.join("plato.csv")).expect("plato.csv");
    assert!(csv.starts_with("# "), "the setting heads the CSV: {csv}");
    let mut lines = csv.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
    };
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let count = |figure: &str, protocol: &str| {
        rows.iter()
            .filter(|r| r[col("figure")] == figure && r[col("protocol")] == protocol)
            .count()
    };
    // Fig. 8: 2 rates × 2 k × 3 Δ, a fixed line per rate and k; Fig. 10: 2 k × 3 rates, both.
    assert_eq!(count("fig8", "plato"), 12, "{csv}");
    assert_eq!(count("fig8", "plato-fixed"), 4, "{csv}");
    assert_eq!(count("fig10", "plato"), 6, "{csv}");
    assert_eq!(count("fig10", "plato-fixed"), 6, "{csv}");
    assert_eq!(rows.len(), 28, "{csv}");
    let num = |r: &Vec<&str>, c: &str| -> f64 { r[col(c)].parse().unwrap() };
    for r in &rows {
        assert!(num(r, "delivered") > 0.0, "{r:?}");
        assert_eq!(num(r, "delivered"), num(r, "sent"), "drained: {r:?}");
    }
    let smallest = rows
        .iter()
        .map(|r| num(r, "rate_pkts_per_s"))
        .fold(f64::MAX, f64::min);
    for k in ["10", "20"] {
        let at = |protocol: &str| -> Vec<f64> {
            rows.iter()
                .filter(|r| r[col("protocol")] == protocol && r[col("k")] == k)
                .filter(|r| num(r, "rate_pkts_per_s") == smallest)
                .map(|r| num(r, "latency_p50_ns"))
                .collect()
        };
        let fixed = at("plato-fixed");
        assert!(!fixed.is_empty(), "k = {k}: {csv}");
        for plato in at("plato") {
            assert!(
                plato < fixed[0],
                "k = {k}: PLATO p50 {plato} ns, fixed {fixed:?}"
            );
        }
    }
    let font = std::env::var("ONEPIPE_FONT").is_ok()
        || std::path::Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists();
    check_plato_figs_3_9_11(&out_dir);
    check_plato_1pipe(&out_dir);
    if font {
        for fig in ["fig3", "fig8", "fig9", "fig10", "fig11", "1pipe"] {
            let png = format!("plato-{fig}.png");
            let bytes = std::fs::read(out_dir.join(&png)).expect(&png);
            assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
        }
    }
}

/// `bench plato --quick`'s optimistic 1Pipe on Figs. 8 and 10's axes: a row per point (2
/// rates × 3 Δ, and 3 rates), every run checked, and optimistic delivery never later than the
/// barrier's at the median.
fn check_plato_1pipe(out: &std::path::Path) {
    let (header, rows) = read_csv(&out.join("plato-1pipe.csv"));
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    assert_eq!(rows.len(), 9, "{rows:?}");
    for r in &rows {
        let (opt, barrier) = (r[col("latency_p50_ns")], r[col("barrier_latency_p50_ns")]);
        assert!(
            opt <= barrier,
            "optimistic p50 {opt} ns, barrier {barrier} ns: {r:?}"
        );
        assert!(r[col("delivered")] > 0.0);
    }
}

/// A CSV of `bench plato` without its comment lines: the header's columns and the rows.
fn read_csv(path: &std::path::Path) -> (Vec<String>, Vec<Vec<f64>>) {
    let csv = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        csv.starts_with("# "),
        "the setting heads {}",
        path.display()
    );
    let mut lines = csv.lines().filter(|l| !l.starts_with('#'));
    let header = lines
        .next()
        .expect("header")
        .split(',')
        .map(String::from)
        .collect();
    let rows = lines
        .map(|l| {
            l.split(',')
                .map(|x| x.parse().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    (header, rows)
}

/// `bench plato --quick`'s Figs. 3, 9 and 11 in `out`: Fig. 3 has a row per rate with swaps
/// and losses at the highest rate (§3: both rise with the rate); Fig. 9 has PLATO and the
/// fixed sequencer for k = 10 and 20 over the timeline, PLATO's latency below the fixed
/// sequencer's before the load step (§5); Fig. 11 has adaptive PLATO's latency, rollbacks and
/// Δ.
fn check_plato_figs_3_9_11(out: &std::path::Path) {
    let (h, rows) = read_csv(&out.join("plato-fig3.csv"));
    let col = |h: &[String], name: &str| {
        h.iter()
            .position(|c| c == name)
            .unwrap_or_else(|| panic!("no column {name} in {h:?}"))
    };
    assert_eq!(rows.len(), 3, "{rows:?}");
    let top = rows.last().expect("a row");
    assert_eq!(top[col(&h, "rate_pkts_per_s")], 4000.0);
    assert!(top[col(&h, "swaps_pct")] > 0.0, "{top:?}");
    assert!(top[col(&h, "losses_pct")] > 0.0, "{top:?}");
    let (h, rows) = read_csv(&out.join("plato-fig9.csv"));
    // 4 s of sending, a sample every 10 ms from the first 0.1-s window on.
    assert_eq!(rows.len(), 391, "{h:?}");
    for k in [10, 20] {
        let (plato, fixed) = (
            col(&h, &format!("plato_k{k}_latency_us")),
            col(&h, &format!("fixed_k{k}_latency_us")),
        );
        col(&h, &format!("plato_k{k}_rollback_fraction"));
        // Just before the step at 2 s.
        let before = rows.iter().find(|r| r[0] >= 1.99).expect("a sample at 2 s");
        assert!(
            before[plato] > 0.0 && before[plato] < before[fixed],
            "k = {k}: {before:?} ({h:?})"
        );
    }
    let (h, rows) = read_csv(&out.join("plato-fig11.csv"));
    assert_eq!(rows.len(), 391);
    let delta = col(&h, "plato_adaptive_k10_delta_us");
    assert!(rows.iter().all(|r| r[delta] > 0.0), "Δ in every sample");
    col(&h, "plato_adaptive_k10_rollback_fraction");
}

/// `bench toto --quick`: every run checked and drained; all-ack's index of latency is n = 8
/// and ToTo(8, 4)'s lies in φ + 1 ..= n (§6), ToTo beats all-ack at each load (Tables 2–3),
/// the φ sweep reaches all-ack's τ at φ = 7, and both figures are drawn.
#[test]
fn bench_toto_quick_writes_tables_2_5_and_figs_5_6_index_of_latency_6() {
    let dir = TempDir::new("toto");
    let out_dir = dir.0.join("out");
    let args = [
        "bench",
        "toto",
        "--quick",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    let out = onepipe(&args);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&args, &out));
    let csv = std::fs::read_to_string(out_dir.join("toto.csv")).expect("toto.csv");
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    // 2 networks × 2 sources × 2 loads × 2 protocols, φ = 5..7 × 2 sources, 3 others.
    assert_eq!(rows.len(), 16 + 6 + 3, "{csv}");
    let num = |r: &[&str], i: usize| r[i].parse::<f64>().unwrap_or(f64::NAN);
    for r in &rows {
        assert_eq!(r[4], r[5], "sent = delivered: {r:?}");
        match r[3] {
            "allack" | "toto(phi=7)" => assert_eq!(num(r, 9), 8.0, "{r:?}"),
            "toto(phi=4)" => {
                assert!((5.0..8.0).contains(&num(r, 9)), "{r:?}");
                assert!(num(r, 13) > 1.0, "ToTo beats all-ack: {r:?}");
            }
            _ => {}
        }
    }
    let tau = std::fs::read_to_string(out_dir.join("toto-tau.csv")).expect("toto-tau.csv");
    assert!(tau
        .lines()
        .any(|l| l.starts_with("segment,periodic,50,toto(phi=4),5,")));
    let font = std::env::var("ONEPIPE_FONT").is_ok()
        || std::path::Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists();
    if font {
        for fig in ["fig5", "fig6"] {
            let png = format!("toto-{fig}.png");
            let bytes = std::fs::read(out_dir.join(&png)).expect(&png);
            assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
        }
    }
}
