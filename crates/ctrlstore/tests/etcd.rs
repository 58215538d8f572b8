//! Controller high availability on a real etcd (§5.2 procedure, §6.1 "controller state in
//! etcd"): each test starts its own `etcd` on loopback (free ports, a temporary data directory,
//! killed on drop). Without the `etcd` binary the tests fail and say how to install it. One runs
//! etcd with TLS, client-certificate authentication and users.
#![cfg(feature = "etcd")]
#![allow(clippy::disallowed_methods)] // a test harness: it spawns etcd and reads clocks

use onepipe_ctrlstore::etcd::{EtcdOptions, EtcdTls};
use onepipe_ctrlstore::{
    ControllerStore, EtcdStore, HaController, HaEvent, HaOutput, Leadership, StoreError,
};
use onepipe_proto::failure::{ControllerConfig, CtrlEvent, CtrlMsg, CtrlOutput, Mgmt, MgmtDest};
use onepipe_proto::topology::Topology;
use onepipe_proto::{Input, Instant, Node, NodeId, Output, ProcId, Timestamp};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A leader's lease. etcd raises anything below its minimum (1.5 election timeouts, rounded up
/// to a second: 1 s with the 100 ms election timeout below); 2 s leaves the leader room to
/// renew on a busy machine.
const TTL: Duration = Duration::from_secs(2);
/// How long a standby may wait for the leader's lease to end: generous, the machine is shared.
const STANDBY_WAIT: Duration = Duration::from_secs(60);

/// An etcd server on loopback, killed and its data removed on drop.
struct Etcd {
    child: Child,
    dir: PathBuf,
    url: String,
    /// How the tests reach it: plain, or TLS with the client certificate (no user).
    options: EtcdOptions,
}

/// A CA, etcd's server certificate (for 127.0.0.1 and localhost) and a client certificate, PEM.
struct TestPki {
    ca: String,
    server: (String, String),
    client: (String, String),
}

impl TestPki {
    fn generate() -> TestPki {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.distinguished_name.push(DnType::CommonName, "test CA");
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::from_params(&ca, &ca_key);
        let issue = |names: &[&str]| {
            let key = KeyPair::generate().unwrap();
            let mut p =
                CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                    .unwrap();
            p.distinguished_name.push(DnType::CommonName, names[0]);
            (
                p.signed_by(&key, &issuer).unwrap().pem(),
                key.serialize_pem(),
            )
        };
        TestPki {
            ca: ca_pem,
            // "127.0.0.1" parses as an IP address: an IP name, what the client checks.
            server: issue(&["127.0.0.1", "localhost"]),
            // Not an etcd user's name: with client-certificate auth on, etcd would take the
            // certificate's common name as the user when a request carries no token.
            client: issue(&["onepipe-test-client"]),
        }
    }

    fn client_tls(&self) -> EtcdTls {
        EtcdTls {
            ca_pem: self.ca.clone(),
            cert_pem: self.client.0.clone(),
            key_pem: self.client.1.clone(),
            domain: None,
        }
    }
}

impl Etcd {
    fn start() -> Etcd {
        Etcd::launch(None)
    }

    /// etcd serving clients on TLS only, asking each for a certificate `pki`'s CA signed.
    fn start_tls(pki: &TestPki) -> Etcd {
        Etcd::launch(Some(pki))
    }

    fn launch(pki: Option<&TestPki>) -> Etcd {
        match Command::new("etcd").arg("--version").output() {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!("`etcd --version` failed: {o:?}"),
            Err(e) => panic!(
                "the etcd binary is missing ({e}): install it with `apt-get install -y \
                 etcd-server` (scripts/test.sh does)"
            ),
        }
        // Ports the kernel just gave out are free; a stale etcd on a fixed port would make the
        // new one exit while health checks pass against the old.
        let (client, peer) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!(
            "onepipe-etcd-{}-{client}-{peer}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
        let scheme = if pki.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new("etcd");
        if let Some(pki) = pki {
            let files = [
                ("ca.crt", &pki.ca),
                ("server.crt", &pki.server.0),
                ("server.key", &pki.server.1),
            ];
            for (name, pem) in files {
                std::fs::write(dir.join(name), pem).unwrap();
            }
            cmd.arg("--cert-file")
                .arg(dir.join("server.crt"))
                .arg("--key-file")
                .arg(dir.join("server.key"))
                .arg("--trusted-ca-file")
                .arg(dir.join("ca.crt"))
                .arg("--client-cert-auth");
        }
        let child = cmd
            .args(["--name", "t", "--data-dir"])
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("t={peer_url}")])
            .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd");
        let options = EtcdOptions {
            tls: pki.map(TestPki::client_tls),
            user: None,
        };
        let mut etcd = Etcd {
            child,
            dir,
            url,
            options,
        };
        etcd.wait_ready();
        etcd
    }

    fn wait_ready(&mut self) {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
                let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
                panic!("etcd exited ({status}) before it was ready; last lines:\n{tail}");
            }
            if let Ok(store) = self.store("ready-check") {
                if store.get_meta("ready").is_ok() {
                    return;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "etcd at {} not ready after 60 s",
                self.url
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until etcd's log says `what`; fails the test with the log after 10 s.
    fn wait_for_log(&self, what: &str) {
        let started = std::time::Instant::now();
        loop {
            let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
            if log.contains(what) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "etcd never logged {what:?}:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn store(&self, cluster: &str) -> Result<EtcdStore, StoreError> {
        self.store_with(cluster, &self.options)
    }

    fn store_with(&self, cluster: &str, options: &EtcdOptions) -> Result<EtcdStore, StoreError> {
        EtcdStore::connect_with(std::slice::from_ref(&self.url), cluster, options)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A leader's heartbeat: renews the lease from its own connection every few hundred
/// milliseconds until stopped — as the live controller's timer would, so the test does not
/// depend on how fast the machine runs the steps in between.
struct Heartbeat {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    fn start(store: EtcdStore, leadership: Leadership) -> Heartbeat {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                store
                    .keep_alive(&leadership)
                    .expect("the leader renews its lease");
                std::thread::sleep(leadership.lease_ttl / 6);
            }
        });
        Heartbeat {
            stop,
            thread: Some(thread),
        }
    }

    /// The leader hangs: no more renewals.
    fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn topo() -> Arc<Topology> {
    Arc::new(Topology::leaf_spine(4, 2, 2).unwrap())
}

fn cfg(topo: &Topology) -> ControllerConfig {
    ControllerConfig {
        procs_of_host: (0..topo.hosts()).map(|h| vec![ProcId(h)]).collect(),
        settle_ns: 1_000,
        callback_timeout_ns: 0,
    }
}

fn recover(store: EtcdStore, l: Leadership, now: u64) -> HaController<EtcdStore> {
    let t = topo();
    HaController::recover(store, l, cfg(&t), t, Instant(now)).unwrap()
}

/// The controller's outputs; being deposed here is a test failure.
fn drain(c: &mut HaController<EtcdStore>) -> Vec<CtrlOutput> {
    std::iter::from_fn(|| c.poll_output())
        .map(|o: HaOutput| match o {
            Output::Event(HaEvent::Ctrl(e)) => Output::Event(e),
            Output::Event(HaEvent::Deposed(e)) => panic!("deposed: {e}"),
            Output::Mgmt { to, msg } => Output::Mgmt { to, msg },
            Output::Send { packet, .. } => match packet {},
        })
        .collect()
}

/// A control message to the controller, through `Node`.
fn message(c: &mut HaController<EtcdStore>, now: u64, msg: CtrlMsg) {
    c.handle(Instant(now), Input::Mgmt(Mgmt::Ctrl(msg)));
}

fn failure_addressees(out: &[CtrlOutput]) -> Vec<u32> {
    out.iter()
        .filter_map(|o| match o {
            Output::Mgmt {
                to: MgmtDest::Node(h),
                msg: Mgmt::Ctrl(CtrlMsg::Failure { .. }),
            } => Some(h.0),
            _ => None,
        })
        .collect()
}

fn completed(round: u32, host: u32) -> CtrlMsg {
    CtrlMsg::Completed {
        round,
        host: NodeId(host),
    }
}

/// §5.2 with a controller failover in the middle: the leader detects a host crash, determines
/// and broadcasts the Failure, collects one Completed, then stops (hung or partitioned: it never
/// renews its lease again). The standby, campaigning all along, wins once the lease ends,
/// replays the log, sends the Failure again to the hosts that had not completed, and resumes
/// the round. The old leader, still running, is fenced: its writes are refused.
#[test]
fn standby_takes_over_mid_procedure_and_resumes_the_round_5_2() {
    let etcd = Etcd::start();
    let t = topo();
    let store_a = etcd.store("fabric").unwrap();
    let lease_a = store_a.campaign("ctrl-a", TTL, Duration::ZERO).unwrap();
    let heartbeat = Heartbeat::start(etcd.store("fabric").unwrap(), lease_a.clone());
    let mut a = recover(store_a, lease_a, 0);

    // The standby campaigns from its own connection and thread, blocking until it wins.
    let store_b = etcd.store("fabric").unwrap();
    let standby = std::thread::spawn(move || {
        store_b
            .campaign("ctrl-b", TTL, STANDBY_WAIT)
            .map(|l| (store_b, l))
    });

    // Detect, Determine, Broadcast; host 0 completes. The leader's heartbeat renews its lease,
    // so the standby cannot win meanwhile.
    let up = t.uplink(1);
    message(
        &mut a,
        0,
        CtrlMsg::LinkDown {
            reporter: t.links()[up.index()].to,
            link: up,
            last_commit: Some(Timestamp::new(500)),
        },
    );
    a.handle(Instant(1_000), Input::Timeout);
    assert_eq!(failure_addressees(&drain(&mut a)), vec![0, 2, 3]);
    message(&mut a, 1_500, completed(1, 0));
    assert!(drain(&mut a).is_empty(), "Resume waits for hosts 2 and 3");
    assert_eq!(a.store().leader().unwrap().as_deref(), Some("ctrl-a"));

    // The leader hangs before Resume: no more renewals. The standby wins once the lease ends,
    // and replays.
    heartbeat.stop();
    let (store_b, lease_b) = standby.join().unwrap().expect("the standby wins");
    assert!(lease_b.fence > a.leadership().fence, "fences only grow");
    let mut b = recover(store_b, lease_b, 2_000);
    assert_eq!(b.stats().replayed, 3);
    assert_eq!(
        b.controller().failed_hosts().collect::<Vec<_>>(),
        [NodeId(1)]
    );
    let resent = drain(&mut b);
    assert!(matches!(
        resent[0],
        Output::Event(CtrlEvent::Declared { round: 1, .. })
    ));
    assert_eq!(failure_addressees(&resent), vec![2, 3]);

    // The hosts that had not completed do so (they answer a repeated Failure with Completed);
    // the standby resumes the round.
    message(&mut b, 2_100, completed(1, 2));
    message(&mut b, 2_200, completed(1, 3));
    let out = drain(&mut b);
    assert!(out.contains(&Output::Event(CtrlEvent::Resumed { round: 1 })));
    let resumes = out
        .iter()
        .filter(|o| {
            matches!(
                o,
                Output::Mgmt {
                    msg: Mgmt::Ctrl(CtrlMsg::Resume { .. }),
                    ..
                }
            )
        })
        .count();
    assert_eq!(resumes, 3 + t.switches().count());

    // Fencing: the deposed leader's input is refused (and not applied), as is a raw append,
    // a metadata write and a lease renewal.
    message(&mut a, 2_300, completed(1, 2));
    let deposed: Vec<HaOutput> = std::iter::from_fn(|| a.poll_output()).collect();
    match deposed.as_slice() {
        [Output::Event(HaEvent::Deposed(err))] => assert!(err.is_not_leader(), "{err}"),
        other => panic!("expected one Deposed, got {other:?}"),
    }
    assert_eq!(a.controller().open_rounds(), 1);
    let raw = a.store().append(a.leadership(), b"late").unwrap_err();
    assert!(raw.is_not_leader(), "{raw}");
    assert!(a
        .store()
        .put_meta(a.leadership(), "k", b"v")
        .unwrap_err()
        .is_not_leader());
    let renew = a.keep_alive().unwrap_err();
    assert!(renew.is_not_leader(), "{renew}");
    assert!(!a.is_leader().unwrap());

    // The log holds exactly the inputs of both leaders, in order.
    assert_eq!(b.store().load().unwrap().len(), 5);
    assert_eq!(b.log_len(), 5);
    assert_eq!(b.store().leader().unwrap().as_deref(), Some("ctrl-b"));
}

/// A leader that resigns hands over at once; a leader whose process is gone (its connection
/// dropped, its lease left to expire) is replaced after the lease; two clusters on one etcd
/// keep separate leaders and logs; a log longer than a page loads whole and in order.
#[test]
fn leases_prefixes_and_paged_loads_on_etcd() {
    let etcd = Etcd::start();

    // Two clusters, two leaders at once.
    let one = etcd.store("one").unwrap();
    let two = etcd.store("two").unwrap();
    let l1 = one.campaign("c1", TTL, Duration::ZERO).unwrap();
    let l2 = two.campaign("c2", TTL, Duration::ZERO).unwrap();
    for i in 0..5u8 {
        assert_eq!(one.append(&l1, &[i]).unwrap(), u64::from(i));
    }
    two.append(&l2, b"other").unwrap();
    assert_eq!(two.load().unwrap(), vec![b"other".to_vec()]);

    // Paged load: pages of two entries, still one consistent, ordered log.
    let mut paged = etcd.store("one").unwrap();
    paged.set_load_page_entries(2);
    let want: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i]).collect();
    assert_eq!(paged.load().unwrap(), want);

    // Only one leader per cluster.
    let err = paged
        .campaign("c1-standby", TTL, Duration::ZERO)
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::CampaignTimedOut { holder: Some(h), .. } if h == "c1"),
        "{err}"
    );

    // Resignation hands over without waiting for the lease.
    one.resign(l1.clone()).unwrap();
    let l1b = paged.campaign("c1-standby", TTL, Duration::ZERO).unwrap();
    assert!(one.append(&l1, b"late").unwrap_err().is_not_leader());
    assert_eq!(
        paged.append(&l1b, b"5").unwrap(),
        5,
        "the new leader counts the log"
    );

    // A leader whose process is gone: the connection closes, the lease runs out.
    drop(two);
    let standby = etcd.store("two").unwrap();
    let l2b = standby.campaign("c2-standby", TTL, STANDBY_WAIT).unwrap();
    assert!(l2b.fence > l2.fence);
    assert_eq!(standby.append(&l2b, b"next").unwrap(), 1);
    assert_eq!(standby.get_meta("missing").unwrap(), None);
    standby.put_meta(&l2b, "cluster", b"toml").unwrap();
    assert_eq!(standby.get_meta("cluster").unwrap(), Some(b"toml".to_vec()));
    assert_eq!(
        paged.get_meta("cluster").unwrap(),
        None,
        "meta is per cluster"
    );
}

/// An etcd with TLS, client-certificate authentication and users (docs/CONTROLLER-HA.md): the
/// controller's user, with the client certificate and its password, campaigns, appends and
/// loads under its cluster's prefix — and nowhere else; a connect without a client certificate,
/// with a certificate another CA signed, or with a wrong password fails, and so does a request
/// without a user.
#[test]
fn tls_client_certificates_and_a_user_guard_the_store() {
    let pki = TestPki::generate();
    let etcd = Etcd::start_tls(&pki);
    etcd.store("fabric")
        .unwrap()
        .enable_auth("root-password", "ctl", "ctl-password")
        .unwrap();
    let user = |password: &str| EtcdOptions {
        tls: Some(pki.client_tls()),
        user: Some(("ctl".into(), password.into())),
    };

    // (a) The right certificate and password: the store works.
    let store = etcd.store_with("fabric", &user("ctl-password")).unwrap();
    let l = store.campaign("c", TTL, Duration::ZERO).unwrap();
    store.keep_alive(&l).unwrap();
    assert_eq!(store.append(&l, b"one").unwrap(), 0);
    assert_eq!(store.append(&l, b"two").unwrap(), 1);
    store.put_meta(&l, "cluster", b"toml").unwrap();
    assert_eq!(store.get_meta("cluster").unwrap(), Some(b"toml".to_vec()));
    assert_eq!(
        store.load().unwrap(),
        vec![b"one".to_vec(), b"two".to_vec()]
    );
    assert_eq!(store.leader().unwrap().as_deref(), Some("c"));
    store.resign(l).unwrap();
    assert_eq!(store.leader().unwrap(), None);

    // The user's role covers its cluster's prefix only.
    let other = etcd.store_with("other", &user("ctl-password")).unwrap();
    let err = other.leader().unwrap_err();
    assert!(err.to_string().contains("permission denied"), "{err}");

    // Once auth is on, a request without a user is refused: the client certificate's name is
    // no user.
    let err = etcd.store("fabric").unwrap().leader().unwrap_err();
    assert!(err.to_string().contains("permission denied"), "{err}");

    // (b) Without a client certificate etcd refuses the TLS handshake, so authenticating fails.
    let endpoint = [etcd.url.clone()];
    let no_cert = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5))
        .with_tls(
            etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(&pki.ca)),
        )
        .with_user("ctl", "ctl-password");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let refused = rt.block_on(etcd_client::Client::connect(endpoint, Some(no_cert)));
    assert!(refused.is_err(), "connected without a client certificate");
    // A certificate another CA signed is refused too.
    let stranger = TestPki::generate();
    let mut options = user("ctl-password");
    let tls = options.tls.as_mut().unwrap();
    (tls.cert_pem, tls.key_pem) = stranger.client.clone();
    let err = etcd.store_with("fabric", &options).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    // Both were etcd's refusals, not the client's (etcd logs them just after it hangs up).
    etcd.wait_for_log("client didn't provide a certificate");
    etcd.wait_for_log("certificate signed by unknown authority");

    // (c) A wrong password.
    let err = etcd.store_with("fabric", &user("wrong")).unwrap_err();
    assert!(err.to_string().contains("authentication failed"), "{err}");
}
