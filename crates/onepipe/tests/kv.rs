//! `onepipe::kv` on loopback: servers and clients of the transactional store as endpoints of a
//! local cluster (a controller and an aggregator on threads, UDP on 127.0.0.1 only).
// A test spawns threads (joining blocks until the whole cluster has joined).
#![allow(clippy::disallowed_methods)]

use onepipe::cluster::LocalLayout;
use onepipe::kv::{KvClient, KvError, KvServer};
use onepipe::{Endpoint, JoinOptions, LocalCluster};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn join(controller: std::net::SocketAddr, base: &JoinOptions, p: u32) -> Endpoint {
    let opts = JoinOptions {
        proc: Some(p),
        report_reliable_sent: true,
        ..base.clone()
    };
    Endpoint::join(controller, opts).unwrap()
}

/// Two servers and two clients: each client's transactions commit in one order with the
/// other's, values come back byte for byte, and bad transactions are refused by type.
#[test]
fn clients_commit_in_one_order_and_bad_transactions_are_refused() {
    let local = LocalCluster::start(&LocalLayout {
        hosts: 4,
        layers: 1,
        ..LocalLayout::default()
    })
    .unwrap();
    let controller = local.controller_addr();
    let base = local.join_options();
    let stop = Arc::new(AtomicBool::new(false));
    let servers: Vec<_> = (0..2)
        .map(|p| {
            let (stop, base) = (stop.clone(), base.clone());
            std::thread::spawn(move || {
                let ep = join(controller, &base, p);
                assert_eq!(
                    KvServer::serve(&ep, 5, &stop).unwrap_err(),
                    KvError::NoSuchServer {
                        server: 4,
                        procs: 4
                    },
                    "wrong server count is refused"
                );
                let stats = KvServer::serve(&ep, 2, &stop).unwrap();
                ep.leave();
                stats
            })
        })
        .collect();
    let other_base = base.clone();
    let other = std::thread::spawn(move || {
        let base = other_base;
        let ep = join(controller, &base, 3);
        let mut kv = KvClient::new(&ep, 2).unwrap();
        let mut stamps = Vec::new();
        for i in 0..20u64 {
            let r = kv.begin().put(100 + i, format!("b{i}")).commit().unwrap();
            stamps.push(r.ts);
        }
        ep.leave();
        stamps
    });
    let ep = join(controller, &base, 2);
    assert_eq!(
        KvClient::new(&ep, 5).err(),
        Some(KvError::NoSuchServer {
            server: 4,
            procs: 4
        })
    );
    assert_eq!(
        KvClient::new(&ep, 3).err(),
        Some(KvError::ClientIsServer { proc: 2 })
    );
    let mut kv = KvClient::new(&ep, 2)
        .unwrap()
        .with_value_max(10)
        .with_timeout(Duration::from_secs(60));
    assert_eq!(kv.begin().commit(), Err(KvError::Empty));
    assert_eq!(
        kv.begin().get(1).put(7, vec![1u8; 11]).commit(),
        Err(KvError::ValueTooLarge {
            key: 7,
            len: 11,
            max: 10
        })
    );
    let w = kv
        .begin()
        .put(1, "x")
        .put(2, "")
        .put(3, "zz")
        .commit()
        .unwrap();
    let r = kv.begin().get(3).get(1).get(2).get(4).commit().unwrap();
    assert!(w.ts < r.ts);
    let got: Vec<Option<&[u8]>> = r.reads.iter().map(|x| x.1.as_deref()).collect();
    assert_eq!(
        got,
        [Some(&b"zz"[..]), Some(&b"x"[..]), Some(&b""[..]), None]
    );
    let mid = kv.begin().get(110).commit().unwrap();
    let theirs = other.join().unwrap();
    // What the other client wrote at 110 is there exactly if it was stamped below the read.
    let expect = (theirs[10] < mid.ts).then(|| onepipe::Bytes::from("b10"));
    assert_eq!(mid.get(110), expect.as_ref());
    stop.store(true, Ordering::SeqCst);
    for s in servers {
        assert!(s.join().unwrap().writes > 0);
    }
    ep.leave();
    local.stop();
}
