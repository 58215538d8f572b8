//! The live cluster's protection over real sockets (docs/SECURITY.md): a controller with a
//! cluster secret the test knows, aggregators and endpoints on threads. A process that left
//! kept its keys; once the controller has rotated to a new epoch without it and the grace has
//! passed, a datagram sealed with those keys — from its own address, with a fresh counter, in
//! every way what it would have sent — opens nowhere.
#![allow(clippy::disallowed_methods)]

use onepipe_proto::ids::NodeId;
use onepipe_proto::time::{Instant, Timestamp};
use onepipe_proto::wire::{Beacon, Packet};
use onepipe_runtime::aggregator::AggregatorDaemon;
use onepipe_runtime::auth::{
    AuthMode, ClusterSecret, KeyInbox, KeyUpdate, LinkAuth, LinkPorts, HEADER_LEN, TAG_LEN,
};
use onepipe_runtime::cluster::{AuthConfig, Cluster, LocalLayout};
use onepipe_runtime::control::Member;
use onepipe_runtime::controller::{Controller, ControllerSecurity, HaOptions};
use onepipe_runtime::endpoint::{Endpoint, JoinOptions};
use onepipe_runtime::keys::{link_keys, member_ix};
use onepipe_runtime::tls::{Pki, CONTROLLER};
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn a_departed_processs_keys_open_nothing_after_the_next_rotation() {
    let mut cluster = Cluster::generate(&LocalLayout {
        hosts: 2,
        layers: 1,
        controller: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..LocalLayout::default()
    })
    .unwrap();
    let mut auth = AuthConfig::on(None);
    auth.grace_ns = 100_000_000;
    cluster.auth = Some(auth);
    let pki = Pki::generate().unwrap();
    let secret = ClusterSecret::generate().unwrap();
    let security = ControllerSecurity {
        credentials: pki.issue(&[CONTROLLER]).unwrap(),
        secret: secret.clone(),
    };
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let controller =
        Controller::start_secured(cluster.clone(), any, HaOptions::solo(), Some(security)).unwrap();
    let tor = AggregatorDaemon::start(
        controller.addr(),
        "tor-0",
        Default::default(),
        pki.issue(&["tor-0"]).ok(),
    )
    .unwrap();
    let addr = controller.addr();
    let joins: Vec<_> = (0..2)
        .map(|p| {
            let opts = JoinOptions {
                proc: Some(p),
                credentials: pki.issue(&[&format!("p{p}")]).ok(),
                ..JoinOptions::default()
            };
            std::thread::spawn(move || Endpoint::join(addr, opts))
        })
        .collect();
    let eps: Vec<Endpoint> = joins
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    let resolved = eps[0].cluster().clone();
    let p1_addr = resolved.process(1).unwrap().addr;
    let tor_addr = resolved.aggregator("tor-0").unwrap().addr;
    let old = controller
        .key_epoch()
        .expect("a protected cluster has an epoch");
    // p1 leaves, keeping (in this test's hands) its keys of `old`.
    let mut p1_keys = LinkAuth::new(
        AuthMode::On,
        member_ix(&resolved, &Member::Process(1)).unwrap(),
        &[LinkPorts {
            peer: member_ix(&resolved, &Member::Aggregator("tor-0".into())).unwrap(),
            out: onepipe_proto::ids::PortId(0),
            input: onepipe_proto::ids::PortId(0),
        }],
        KeyInbox::new(),
    );
    p1_keys.apply(
        Instant(0),
        KeyUpdate::Install {
            epoch: old,
            keys: link_keys(&secret, &resolved, &Member::Process(1), old),
            activate: true,
        },
    );
    let mut it = eps.into_iter();
    let (p0, p1) = (it.next().unwrap(), it.next().unwrap());
    p1.leave();
    let deadline = std::time::Instant::now() + PATIENCE;
    while controller.key_epoch() == Some(old) {
        assert!(
            std::time::Instant::now() < deadline,
            "no rotation after p1 left"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The new epoch is active at tor-0 once every member installed it; then the grace.
    std::thread::sleep(Duration::from_millis(600));
    // A beacon from p1's own address, sealed with its old key: what it would have sent.
    let socket = UdpSocket::bind(p1_addr).expect("p1's address is free again");
    const SENT: u64 = 20;
    let port = onepipe_proto::ids::PortId(0);
    // Counters far above any p1 used: only the epoch can refuse these.
    let mut scratch = vec![0u8; HEADER_LEN + 8 + TAG_LEN];
    for _ in 0..100_000 {
        p1_keys.seal(port, &mut scratch).unwrap();
    }
    for _ in 0..SENT {
        let ts = Timestamp::new(onepipe_runtime::clock::monotonic_ns() + 100_000_000);
        let mut d = vec![0u8; HEADER_LEN];
        Packet::Beacon(Beacon {
            from: NodeId(1),
            barrier: ts,
            commit: ts,
            demand: false,
        })
        .encode(&mut d);
        d.extend_from_slice(&[0; TAG_LEN]);
        p1_keys.seal(port, &mut d).unwrap();
        socket.send_to(&d, tor_addr).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    p0.leave();
    let report = tor.stop().unwrap();
    let auth = &report.driver.auth;
    assert!(
        auth.unknown_epoch >= SENT,
        "every datagram sealed with the departed process's keys is refused: {auth:?}"
    );
    assert_eq!((auth.bad_tag, auth.replay), (0, 0), "{auth:?}");
    controller.stop();
}
