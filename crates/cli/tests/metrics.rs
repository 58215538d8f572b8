//! Live metrics and `onepipe status`, end to end: a controller, one aggregator and two
//! endpoints started by hand as separate processes (as a user would on real machines, with the
//! cluster's keys), a short workload driven through the endpoints' supervised orders, then,
//! once it has drained and the cluster is quiet:
//!
//! * every daemon serves `GET /metrics`, and said where in its first line;
//! * `onepipe status --json` names the same members, each with the metrics address it
//!   reported to the controller, and the same numbers: its scrape equals ours for the counters
//!   a quiet cluster no longer moves, and so do the `Health` counters the controller holds;
//! * junk on a metrics port (a malformed request, a stranger's connection) is answered or
//!   dropped and leaves every daemon running.
#![allow(clippy::disallowed_methods)]

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(60);

fn onepipe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_onepipe"))
}

/// A daemon started by the test: its standard input (closing it stops the daemon) and its
/// standard output, line by line.
struct Daemon {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Daemon {
    fn start(name: &str, args: &[&str]) -> Daemon {
        let mut child = onepipe()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Daemon {
            name: name.into(),
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// The next line starting with `word`, split into words.
    fn expect(&self, word: &str) -> Vec<String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("{}: no '{word}' line: {e}", self.name));
            if line.starts_with(word) {
                return line.split_whitespace().map(str::to_string).collect();
            }
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address after `metrics` in a daemon's first line.
fn metrics_addr(words: &[String]) -> SocketAddr {
    let i = words
        .iter()
        .position(|w| w == "metrics")
        .expect("a metrics address");
    words[i + 1].parse().unwrap()
}

/// `GET path` on `addr`: the whole answer.
fn get(addr: SocketAddr, request: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(request).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out
}

/// A scrape, by series.
fn scrape(addr: SocketAddr) -> BTreeMap<String, f64> {
    let answer = get(addr, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    assert!(body.contains("# HELP onepipe_"), "{body}");
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Series a quiet cluster no longer moves (beacons, and the datagrams carrying them, go on).
const QUIET: [&str; 6] = [
    "onepipe_delivered_messages_total{service=\"best_effort\"}",
    "onepipe_messages_sent_total",
    "onepipe_late_dropped_packets_total",
    "onepipe_naks_sent_total",
    "onepipe_send_failed_total",
    "onepipe_unknown_source_datagrams_total",
];

#[test]
fn every_daemon_serves_metrics_and_status_shows_the_same_members_and_numbers() {
    let dir = std::env::temp_dir().join(format!("onepipe-metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (pki, config) = (dir.join("pki"), dir.join("cluster.toml"));
    let pki_s = pki.display().to_string();
    let out = onepipe()
        .args(["topology", "--hosts", "2", "--layers", "1", "--pki", &pki_s])
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(&config, &out.stdout).unwrap();
    let config_s = config.display().to_string();

    let controller = Daemon::start(
        "controller",
        &[
            "controller",
            "--config",
            &config_s,
            "--listen",
            "127.0.0.1:0",
            "--supervised",
            "--quiet",
        ],
    );
    let words = controller.expect("listening");
    let control = words[1].clone();
    let mut metrics = BTreeMap::from([("controller".to_string(), metrics_addr(&words))]);
    let agg = Daemon::start(
        "tor-0",
        &[
            "agg",
            "--config",
            &config_s,
            "--id",
            "tor-0",
            "--controller",
            &control,
            "--supervised",
        ],
    );
    let mut nodes: Vec<Daemon> = (0..2)
        .map(|p| {
            let p = p.to_string();
            Daemon::start(
                &format!("p{p}"),
                &[
                    "node",
                    "--controller",
                    &control,
                    "--proc",
                    &p,
                    "--pki",
                    &pki_s,
                    "--rate",
                    "200",
                    "--duration",
                    "1s",
                    "--msg-size",
                    "64",
                    "--supervised",
                ],
            )
        })
        .collect();
    metrics.insert("tor-0".into(), metrics_addr(&agg.expect("ready")));
    for n in &nodes {
        metrics.insert(n.name.clone(), metrics_addr(&n.expect("ready")));
    }

    // The workload: start together, then drain past the largest timestamp anyone sent.
    let t0 = onepipe_runtime::clock::monotonic_ns() + 300_000_000;
    let mut max_ts = 0u64;
    for n in &mut nodes {
        n.say(&format!("start {t0}"));
    }
    for n in &nodes {
        max_ts = max_ts.max(n.expect("sent")[1].parse().unwrap());
    }
    for n in &mut nodes {
        n.say(&format!("drain {max_ts}"));
    }
    for n in &nodes {
        assert_eq!(n.expect("done")[1], "true", "{} drained", n.name);
    }
    // Quiet: every daemon has published (every 200 ms) and reported its health (every 1 s)
    // since the last message moved.
    std::thread::sleep(Duration::from_millis(2500));

    let scrapes: BTreeMap<String, BTreeMap<String, f64>> = metrics
        .iter()
        .map(|(name, &addr)| (name.clone(), scrape(addr)))
        .collect();
    let status = onepipe()
        .args([
            "status",
            "--controller",
            &control,
            "--pki",
            &pki_s,
            "--json",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let report: Value = serde_json::from_str(&text).unwrap();
    // The table names the same numbers' columns.
    let table = onepipe()
        .args(["status", "--controller", &control, "--pki", &pki_s])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    for column in ["HOLD_MAX", "BARRIER LAG", "LARGEST GAP"] {
        assert!(table.contains(column), "no {column} in:\n{table}");
    }

    // The same members, each with the metrics address it printed.
    let members = report["members"].as_array().unwrap();
    let names: Vec<&str> = members
        .iter()
        .map(|m| m["member"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tor-0", "p0", "p1"], "{report}");
    assert_eq!(
        report["controller_metrics"].as_str().unwrap(),
        metrics["controller"].to_string()
    );
    for m in members {
        let name = m["member"].as_str().unwrap();
        assert_eq!(m["state"], "bound", "{m}");
        assert_eq!(
            m["metrics_addr"].as_str().unwrap(),
            metrics[name].to_string()
        );
        assert!(m["scrape_error"].is_null(), "{m}");
        // Its scrape and ours agree on every counter a quiet cluster no longer moves.
        let ours = &scrapes[name];
        for series in QUIET.iter().filter(|s| ours.contains_key(**s)) {
            assert_eq!(
                m["metrics"][series].as_f64(),
                Some(ours[*series]),
                "{name} {series}"
            );
        }
        // And so do the counters the controller holds (its last `Health` from the member).
        let health = &m["counters"];
        for (counter, series) in [
            ("delivered", QUIET[0]),
            ("messages_sent", QUIET[1]),
            ("dropped_late", QUIET[2]),
            ("naks_sent", QUIET[3]),
            ("forwarded", "onepipe_forwarded_total"),
        ] {
            if let Some(v) = health[counter].as_u64() {
                assert_eq!(
                    Some(v as f64),
                    ours.get(series).copied(),
                    "{name} {counter}"
                );
            }
        }
    }
    for p in ["p0", "p1"] {
        let ours = &scrapes[p];
        assert!(ours[QUIET[0]] > 0.0, "{p} delivered: {ours:?}");
        for series in [
            "onepipe_link_barrier_lag_seconds{link=\"0\"}",
            "onepipe_link_beacon_gap_seconds{link=\"0\"}",
            "onepipe_link_beacon_gap_seconds_max{link=\"0\"}",
            "onepipe_reorder_messages",
            "onepipe_reorder_messages_peak",
            "onepipe_reorder_holds_total",
            "onepipe_reorder_hold_seconds_total",
            "onepipe_reorder_hold_seconds_max",
            "onepipe_reliable_window_in_flight_packets",
            "onepipe_reliable_window_limit_packets",
            "onepipe_reliable_window_buffer_limit_bytes",
        ] {
            assert!(ours.contains_key(series), "{p}: no {series} in {ours:?}");
        }
        // Every message delivered waited in the reorder buffer; drained, none waits now.
        let reliable = "onepipe_delivered_messages_total{service=\"reliable\"}";
        let delivered = ours[QUIET[0]] + ours.get(reliable).copied().unwrap_or(0.0);
        assert_eq!(ours["onepipe_reorder_holds_total"], delivered, "{p}");
        assert!(ours["onepipe_reorder_hold_seconds_total"] > 0.0, "{p}");
        assert_eq!(ours["onepipe_reorder_messages"], 0.0, "{p}");
        assert!(ours["onepipe_reorder_messages_peak"] >= 1.0, "{p}");
        // Beacons came on the uplink, more than one.
        assert!(
            ours["onepipe_link_beacon_gap_seconds_max{link=\"0\"}"] > 0.0,
            "{p}"
        );
        // Late drops by sender add up to the late drops (none, in a fault-free run).
        let by_sender: f64 = ours
            .iter()
            .filter(|(k, _)| k.starts_with("onepipe_late_dropped_packets_by_sender_total{"))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(by_sender, ours[QUIET[2]], "{p}");
        // And status shows the same families in the member's scrape, and picks out the
        // largest hold and each link's largest gap between barrier updates.
        let m = members.iter().find(|m| m["member"] == *p).unwrap();
        assert_eq!(
            m["reorder_hold_max_seconds"].as_f64(),
            Some(ours["onepipe_reorder_hold_seconds_max"]),
            "{p}"
        );
        // (Beacons still flow in a drained cluster, so the gap is read from status's own
        // scrape, not ours.)
        let gap = m["links"][0]["gap_max_seconds"].as_f64();
        assert!(gap.is_some_and(|g| g > 0.0), "{p}: {m}");
        assert_eq!(
            gap,
            m["metrics"]["onepipe_link_beacon_gap_seconds_max{link=\"0\"}"].as_f64(),
            "{p}: {m}"
        );
        for series in [
            "onepipe_reorder_holds_total",
            "onepipe_reorder_messages_peak",
        ] {
            assert_eq!(
                m["metrics"][series].as_f64(),
                Some(ours[series]),
                "{p} {series}"
            );
        }
    }
    // The root aggregator's two input links, each with its barrier and its gaps.
    for link in 0..2 {
        for family in ["link_barrier_lag_seconds", "link_beacon_gap_seconds_max"] {
            let series = format!("onepipe_{family}{{link=\"{link}\"}}");
            assert!(scrapes["tor-0"].contains_key(&series), "tor-0: no {series}");
        }
    }
    assert_eq!(
        scrapes["controller"]["onepipe_controller_members{state=\"bound\"}"],
        3.0
    );

    // Junk on every metrics port: answered or dropped, and every daemon keeps running.
    for &addr in metrics.values() {
        let bad = get(addr, b"\x16\x03\x01 hello?\r\n\r\n");
        assert!(bad.starts_with("HTTP/1.1 400"), "{bad}");
        assert!(get(addr, b"GET /admin HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        drop(TcpStream::connect(addr).unwrap());
        let mut idle = TcpStream::connect(addr).unwrap();
        idle.write_all(b"GET /met").unwrap();
        drop(idle);
        assert!(!scrape(addr).is_empty());
    }
    let mut all = vec![controller, agg];
    all.append(&mut nodes);
    for d in &mut all {
        assert!(d.running(), "{} stopped", d.name);
    }
    // The table names every member too.
    let table = onepipe()
        .args(["status", "--controller", &control, "--pki", &pki_s])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    for name in ["tor-0", "p0", "p1", "BARRIER LAG"] {
        assert!(table.contains(name), "{table}");
    }
    // Nodes first (they leave), then the aggregator and the controller.
    all.reverse();
    drop(all);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `onepipe status` with nobody to ask says so and exits non-zero.
#[test]
fn status_without_a_controller_names_it_and_fails() {
    let out = onepipe()
        .args(["status", "--controller", "127.0.0.1:9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("controller 127.0.0.1:9"), "{err}");
}
