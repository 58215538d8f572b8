//! A private etcd for `onepipe up --etcd`: Debian's `etcd` binary on loopback, on ports the
//! kernel just gave out (a stale etcd on a fixed port would make the new one exit while health
//! checks pass against the old), with a temporary data directory. Killed and removed on drop.
//!
//! Readiness is etcd's `/health` over plain HTTP/1.0, so `up` needs no etcd client of its own
//! (the controllers have one, behind the `etcd` feature).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long etcd may take to answer `/health` (it is ready in about a second; the machine may
/// be busy).
const READY_MAX: Duration = Duration::from_secs(60);

/// An etcd server on loopback.
pub struct Etcd {
    child: Child,
    dir: PathBuf,
    /// Its client URL, `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Etcd {
    /// Starts etcd with its data under `dir` (created; removed on drop) and waits until it is
    /// healthy.
    ///
    /// # Errors
    /// The binary is missing (the message says how to install it), or etcd exited or did not
    /// become healthy in time (with the end of its log).
    pub fn start(dir: PathBuf) -> Result<Etcd, String> {
        Etcd::check_binary()?;
        Etcd::spawn(dir)
    }

    /// The etcd binary runs, or how to install it.
    fn check_binary() -> Result<(), String> {
        match Command::new("etcd").arg("--version").output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => return Err(format!("`etcd --version` failed: {}", o.status)),
            Err(e) => {
                return Err(format!(
                    "the etcd binary is missing ({e}): install it with \
                     `apt-get install -y etcd-server`, or pass --etcd URL of a running one"
                ))
            }
        }
        Ok(())
    }

    fn spawn(dir: PathBuf) -> Result<Etcd, String> {
        let (client, peer) = (free_port()?, free_port()?);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let log = std::fs::File::create(dir.join("etcd.log"))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "onepipe-up", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &url])
            .args(["--advertise-client-urls", &url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("onepipe-up={peer_url}")])
            // Short elections: the controllers' leases can then be short (etcd's minimum lease
            // is 1.5 election timeouts, rounded up to a second).
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start etcd: {e}"))?;
        let mut etcd = Etcd { child, dir, url };
        etcd.wait_ready(client)?;
        Ok(etcd)
    }

    fn wait_ready(&mut self, port: u16) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(10).collect();
                return Err(format!(
                    "etcd exited ({status}) before it was ready; its last lines:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
            if healthy(port) {
                return Ok(());
            }
            if started.elapsed() > READY_MAX {
                return Err(format!("etcd at {} not healthy after 60 s", self.url));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[cfg(feature = "etcd")]
/// A cluster of etcd members on loopback (`bench etcd`): each with its own ports and data
/// directory under `dir`; killed and removed on drop.
pub struct EtcdCluster {
    members: Vec<Child>,
    dir: PathBuf,
    /// The members' client URLs.
    pub urls: Vec<String>,
}

#[cfg(feature = "etcd")]
impl EtcdCluster {
    /// Starts `n` members under `dir` and waits until every one is healthy.
    ///
    /// # Errors
    /// As [`Etcd::start`].
    pub fn start(dir: PathBuf, n: usize) -> Result<EtcdCluster, String> {
        Etcd::check_binary()?;
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let ports: Vec<(u16, u16)> = (0..n)
            .map(|_| Ok((free_port()?, free_port()?)))
            .collect::<Result<_, String>>()?;
        let initial = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = EtcdCluster {
            members: Vec::new(),
            dir: dir.clone(),
            urls: Vec::new(),
        };
        for (i, (client, peer)) in ports.iter().enumerate() {
            let log = std::fs::File::create(dir.join(format!("m{i}.log")))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            let url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let child = Command::new("etcd")
                .args(["--name", &format!("m{i}"), "--data-dir"])
                .arg(dir.join(format!("m{i}.data")))
                .args(["--listen-client-urls", &url])
                .args(["--advertise-client-urls", &url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .map_err(|e| format!("cannot start etcd: {e}"))?;
            c.members.push(child);
            c.urls.push(url);
        }
        let started = Instant::now();
        for (i, (client, _)) in ports.iter().enumerate() {
            while !healthy(*client) {
                if let Ok(Some(status)) = c.members[i].try_wait() {
                    return Err(format!("etcd member m{i} exited ({status}); see its log"));
                }
                if started.elapsed() > READY_MAX {
                    return Err(format!("etcd member m{i} not healthy after 60 s"));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(c)
    }
}

#[cfg(feature = "etcd")]
impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            let _ = m.kill();
            let _ = m.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether etcd on `port` answers `/health` with `"health":"true"`.
fn healthy(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body.contains("\"health\":\"true\"")
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}
