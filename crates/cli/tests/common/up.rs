//! `onepipe up` running in the background, for tests that act on a live cluster while it runs.
// A test harness: it waits on processes and reads their output with threads and the clock.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(120);

fn onepipe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_onepipe"))
}

/// `up` running in the background, its output read line by line.
pub struct Running {
    /// The `onepipe up` process.
    pub child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Running {
    /// Starts `onepipe up` on four hosts at 500 sends/s with `extra` flags, its report to `json`.
    pub fn start(json: &Path, extra: &[&str]) -> Running {
        let mut child = onepipe()
            .args(["up", "--hosts", "4", "--rate", "500", "--deadline", "100s"])
            .args(extra)
            .arg("--json")
            .arg(json)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one contains `needle`.
    pub fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !self.seen.iter().any(|l| l.contains(needle)) {
            assert!(
                Instant::now() < deadline,
                "no '{needle}' in {:#?}",
                self.seen
            );
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) => self.seen.push(l),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("ended before '{needle}': {:#?}", self.seen)
                }
            }
        }
    }

    /// The table `up` prints: (name, pid, address) of every process.
    pub fn table(&self) -> Vec<(String, u32, SocketAddr)> {
        self.seen
            .iter()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                match w[..] {
                    [name, "pid", pid, "tcp" | "udp", addr] => {
                        Some((name.to_string(), pid.parse().ok()?, addr.parse().ok()?))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Waits for the exit; returns the code and every line.
    pub fn finish(mut self) -> (i32, String) {
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("up did not end: {:#?}", self.seen);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The reader threads end with the pipes.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        (status.code().unwrap_or(-1), self.seen.join("\n"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether process `pid` runs (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    // /proc/PID exists until the process is reaped; a zombie counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            != Some("Z")
    })
}
