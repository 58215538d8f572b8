//! Controller failover in the live runtime (issue 5, docs/CONTROLLER-HA.md): `onepipe up
//! --etcd` starts a private etcd on loopback and two controllers, a leader and a standby. A
//! process is killed; as soon as the leader has logged the §5.2 Detect report (the middle of
//! the round: after detection, before Resume) the leader is killed too. The standby takes over
//! when the lease ends, replays the log, the members re-register with it, and the round
//! completes: the failed process is declared with one failure timestamp everywhere, the
//! survivors resume delivering, and the checkers pass. The private etcd takes clients over TLS
//! with client certificates only, and its authentication is on: the controllers log in as a
//! user whose role covers the run's keys.
//!
//! Needs the `etcd` feature (`protoc` to build) and Debian's `etcd` binary
//! (`apt-get install -y etcd-server protobuf-compiler`; scripts/test.sh installs both).
//! Nothing asserts speed; the deadline is generous (the machine is shared).
#![cfg(feature = "etcd")]
#![allow(clippy::disallowed_methods)]

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

/// A scratch directory, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn killing_the_leader_controller_during_a_round_the_standby_completes_it_5_2() {
    let dir = TempDir(std::env::temp_dir().join(format!("onepipe-etcd-up-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let json = dir.0.join("up.json");
    let out = Command::new(env!("CARGO_BIN_EXE_onepipe"))
        .args(["up", "--etcd", "--hosts", "4", "--procs-per-host", "2"])
        .args(["--service", "reliable", "--msg-size", "64", "--rate", "300"])
        // Sending outlasts detection (1 s), the lease (2 s) and the round, so the survivors are
        // seen delivering after the takeover.
        .args(["--duration", "7s", "--deadline", "200s"])
        .args(["--kill", "proc:3@1s", "--kill", "controller@detected"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["violations"].as_u64(), Some(0), "{text}");
    assert_eq!(r["drained"].as_bool(), Some(true), "{text}");
    assert_eq!(r["undelivered_reliable"].as_u64(), Some(0), "{text}");
    // Both kills fired; the leader died after it logged the Detect report.
    let kills = r["kills"].as_array().unwrap();
    assert!(kills.iter().all(|k| k["at_s"].as_f64().is_some()), "{text}");
    // Either controller may win the first election; the other took over.
    let leaders = names(&r["leaders"]);
    assert_eq!(leaders.len(), 2, "{text}");
    assert_ne!(leaders[0], leaders[1], "{text}");
    assert!(!r["controller_killed"].as_bool().unwrap(), "{text}");
    // One round, finished by the standby; p3 declared, with one timestamp everywhere.
    let rounds = r["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 1, "{text}");
    assert_eq!(
        rounds[0]["resumed_by"].as_str(),
        Some(leaders[1].as_str()),
        "{text}"
    );
    let declared = r["declared_failed"].as_array().unwrap();
    assert_eq!(declared.len(), 1, "{text}");
    assert_eq!(declared[0]["proc"].as_u64(), Some(3), "{text}");
    let ts = declared[0]["failure_ts"].as_u64().unwrap();
    assert!(ts > 0, "{text}");
    let told = r["failure_callbacks"]["p3"].as_object().expect("callbacks");
    let survivors = [0, 1, 2, 4, 5, 6, 7].map(|p| format!("p{p}"));
    for p in &survivors {
        assert_eq!(told.get(p).and_then(Value::as_u64), Some(ts), "{p}: {text}");
        let after = r["delivered_after_kills"][p].as_u64().unwrap();
        assert!(
            after > 0,
            "{p} delivered nothing after the takeover: {text}"
        );
    }
    assert!(text.contains("took over"), "{text}");
    // The private etcd was TLS-only with client certificates, and the controllers logged in.
    assert!(text.contains("etcd at https://127.0.0.1:"), "{text}");
    assert!(
        text.contains("TLS with client certificates, user onepipe"),
        "{text}"
    );
}

/// `bench etcd`: three etcd members on loopback under the replicated service's load; every
/// operation's history is linearizable by the same checker as `up --app replkv` (docs/
/// REPLICATION.md), and the summary says how many ran.
#[test]
fn bench_etcd_runs_the_replicated_service_load_and_checks_it() {
    let dir =
        TempDir(std::env::temp_dir().join(format!("onepipe-etcd-bench-t-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let json = dir.0.join("etcd.json");
    let out = Command::new(env!("CARGO_BIN_EXE_onepipe"))
        .args([
            "bench",
            "etcd",
            "--members",
            "3",
            "--clients",
            "2",
            "--duration",
            "1s",
            "--keys",
            "50",
        ])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["violations"], 0, "{text}");
    assert_eq!(r["undecided"], 0, "{text}");
    assert!(r["ops"].as_u64().unwrap() > 50, "{text}");
}
