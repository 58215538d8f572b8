//! A private etcd for `onepipe up --etcd`: Debian's `etcd` binary on loopback, on ports the
//! kernel just gave out (a stale etcd on a fixed port would make the new one exit while health
//! checks pass against the old), with a temporary data directory. Killed and removed on drop.
//!
//! It is protected as an etcd elsewhere should be (docs/CONTROLLER-HA.md): clients reach it
//! over TLS only and must show a certificate its CA signed (`--client-cert-auth`), and its
//! authentication is on, with user `root` (etcd enables authentication only with one) and user
//! [`USER`], whose role may read and write the run's keys (`/onepipe/<key>/`) and nothing else.
//! The CA, etcd's certificate, the controllers' client certificate and the passwords are made
//! fresh for each run, in its directory (keys and passwords readable by their owner only).
//!
//! Readiness is etcd's `/health` over plain HTTP/1.0 on its metrics port, so `up` needs no
//! HTTP client of its own; turning authentication on goes through the controllers' etcd client
//! (the `etcd` feature).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long etcd may take to answer `/health` (it is ready in about a second; the machine may
/// be busy).
const READY_MAX: Duration = Duration::from_secs(60);

/// The etcd user the controllers log in as.
pub const USER: &str = "onepipe";

/// The files of a private etcd's directory: its CA, its server certificate and key, the
/// controllers' client certificate and key, and the passwords.
const CA: &str = "ca.crt";
const SERVER_CERT: &str = "server.crt";
const SERVER_KEY: &str = "server.key";
const CLIENT_CERT: &str = "client.crt";
const CLIENT_KEY: &str = "client.key";
const USER_PASSWORD: &str = "onepipe.password";
const ROOT_PASSWORD: &str = "root.password";

/// An etcd server on loopback.
pub struct Etcd {
    child: Child,
    dir: PathBuf,
    /// Its client URL, `https://127.0.0.1:PORT`.
    pub url: String,
}

impl Etcd {
    /// Starts etcd with its data and keys under `dir` (created; removed on drop), waits until
    /// it is healthy and turns its authentication on for cluster key `cluster_key`.
    ///
    /// # Errors
    /// The binary is missing (the message says how to install it), the keys could not be made
    /// or written, etcd exited or did not become healthy in time (with the end of its log), or
    /// it refused a step of turning authentication on.
    pub fn start(dir: PathBuf, cluster_key: &str) -> Result<Etcd, String> {
        Etcd::check_binary()?;
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        write_keys(&dir)?;
        let etcd = Etcd::spawn(dir)?;
        etcd.enable_auth(cluster_key)?;
        Ok(etcd)
    }

    /// The flags that give a controller this etcd's TLS files and user (`onepipe controller
    /// --etcd-ca ..`), for a private etcd started in `dir`.
    pub fn controller_flags(dir: &Path) -> Vec<String> {
        let at = |f: &str| dir.join(f).display().to_string();
        vec![
            "--etcd-ca".into(),
            at(CA),
            "--etcd-cert".into(),
            at(CLIENT_CERT),
            "--etcd-key".into(),
            at(CLIENT_KEY),
            "--etcd-user".into(),
            USER.into(),
            "--etcd-password-file".into(),
            at(USER_PASSWORD),
        ]
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
        let (client, peer, metrics) = (free_port()?, free_port()?, free_port()?);
        let log = std::fs::File::create(dir.join("etcd.log"))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let url = format!("https://127.0.0.1:{client}");
        // Peers stay plain: there is one member, and its peer port is on loopback.
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .args(["--name", "onepipe-up", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &url])
            .args(["--advertise-client-urls", &url])
            .arg("--cert-file")
            .arg(dir.join(SERVER_CERT))
            .arg("--key-file")
            .arg(dir.join(SERVER_KEY))
            .arg("--trusted-ca-file")
            .arg(dir.join(CA))
            .arg("--client-cert-auth")
            .args([
                "--listen-metrics-urls",
                &format!("http://127.0.0.1:{metrics}"),
            ])
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
        etcd.wait_ready(metrics)?;
        Ok(etcd)
    }

    /// Users `root` and [`USER`] with fresh passwords (written beside the keys), and the role
    /// that lets [`USER`] read and write `/onepipe/<cluster_key>/`; then authentication on.
    #[cfg(feature = "etcd")]
    fn enable_auth(&self, cluster_key: &str) -> Result<(), String> {
        use onepipe_ctrlstore::etcd::{EtcdOptions, EtcdTls};
        let read = |f: &str| {
            let p = self.dir.join(f);
            std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
        };
        let options = EtcdOptions {
            tls: Some(EtcdTls {
                ca_pem: read(CA)?,
                cert_pem: read(CLIENT_CERT)?,
                key_pem: read(CLIENT_KEY)?,
                domain: None,
            }),
            user: None,
        };
        let store = onepipe_ctrlstore::EtcdStore::connect_with(
            std::slice::from_ref(&self.url),
            cluster_key,
            &options,
        )
        .map_err(|e| e.to_string())?;
        let (root, user) = (read(ROOT_PASSWORD)?, read(USER_PASSWORD)?);
        store
            .enable_auth(root.trim_end(), USER, user.trim_end())
            .map_err(|e| format!("turning authentication on: {e}"))
    }

    #[cfg(not(feature = "etcd"))]
    fn enable_auth(&self, _cluster_key: &str) -> Result<(), String> {
        Err("this onepipe was built without etcd support".into())
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

/// A fresh CA, etcd's certificate (IP name 127.0.0.1, DNS name localhost), the controllers'
/// client certificate and the two passwords, into `dir`; keys and passwords mode 0600.
fn write_keys(dir: &Path) -> Result<(), String> {
    use onepipe_runtime::auth::{write_private, ClusterSecret};
    let pki = onepipe_runtime::tls::Pki::generate()?;
    // rcgen takes a name that parses as an IP address as an IP name: what a client checks when
    // it dials https://127.0.0.1.
    let server = pki.issue_pem(&["127.0.0.1", "localhost"])?;
    // Its common name is no etcd user: with `--client-cert-auth`, etcd would take a request
    // without a token as from the user named in the certificate. Here only the password logs
    // in.
    let client = pki.issue_pem(&["onepipe-etcd-client"])?;
    let password = || {
        ClusterSecret::generate()
            .map(|s| s.to_hex())
            .map_err(|e| format!("no randomness for a password: {e}"))
    };
    let public = [
        (CA, pki.ca_pem().to_owned()),
        (SERVER_CERT, server.0),
        (CLIENT_CERT, client.0),
    ];
    let private = [
        (SERVER_KEY, server.1),
        (CLIENT_KEY, client.1),
        (USER_PASSWORD, password()? + "\n"),
        (ROOT_PASSWORD, password()? + "\n"),
    ];
    for (name, text) in public {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    for (name, text) in private {
        let p = dir.join(name);
        write_private(&p, text.as_bytes()).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}
