//! The transactional key-value store (§7.3.1) on onepipe's public API: three server processes
//! and a client, here threads of one program on a local cluster (normally each is its own OS
//! process, joined to `onepipe controller` and `onepipe agg` daemons).
//!
//! ```text
//! cargo run --release -p onepipe --example kv
//! ```
//!
//! The client writes three accounts in one transaction, moves money between two of them in a
//! second (reads and writes of different keys, one scattering), and reads all three back: each
//! transaction's timestamp is its place in the one serialization order. Then it shows the typed
//! errors: an empty transaction and an oversized value are refused before anything is sent.
// An application spawns threads: the rule against it is for the sans-IO protocol crates.
#![allow(clippy::disallowed_methods)]

use onepipe::cluster::LocalLayout;
use onepipe::kv::{KvClient, KvError, KvServer};
use onepipe::{Endpoint, JoinOptions, LocalCluster, ProcId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const SERVERS: u32 = 3;

fn join(controller: std::net::SocketAddr, base: &JoinOptions, p: u32) -> Endpoint {
    let opts = JoinOptions {
        proc: Some(p),
        // The store learns its reliable sends' timestamps from these events.
        report_reliable_sent: true,
        ..base.clone()
    };
    Endpoint::join(controller, opts).expect("join the cluster")
}

fn balance(v: Option<&onepipe::Bytes>) -> u64 {
    v.map_or(0, |b| String::from_utf8_lossy(b).parse().unwrap_or(0))
}

fn main() -> Result<(), KvError> {
    let local = LocalCluster::start(&LocalLayout {
        hosts: SERVERS + 1,
        layers: 1,
        ..LocalLayout::default()
    })
    .expect("start a local cluster");
    let controller = local.controller_addr();
    let base = local.join_options();
    let stop = Arc::new(AtomicBool::new(false));
    let servers: Vec<_> = (0..SERVERS)
        .map(|p| {
            let (stop, base) = (stop.clone(), base.clone());
            std::thread::spawn(move || {
                let ep = join(controller, &base, p);
                let stats = KvServer::serve(&ep, SERVERS, &stop).expect("a server of the store");
                ep.leave();
                stats
            })
        })
        .collect();
    let ep = join(controller, &base, SERVERS);
    assert_eq!(ep.proc(), ProcId(SERVERS));
    let mut kv = KvClient::new(&ep, SERVERS)?;

    let w = kv.begin().put(1, "100").put(2, "50").put(3, "0").commit()?;
    println!("opened accounts 1, 2, 3 at {}", w.ts);
    let r = kv.begin().get(1).get(2).commit()?;
    let (a, b) = (balance(r.get(1)), balance(r.get(2)));
    let moved = kv
        .begin()
        .put(1, (a - 30).to_string())
        .put(2, (b + 30).to_string())
        .commit()?;
    println!(
        "moved 30 from account 1 to 2 at {} (read at {})",
        moved.ts, r.ts
    );
    let all = kv.begin().get(1).get(2).get(3).get(4).commit()?;
    for (k, v) in &all.reads {
        println!(
            "  account {k}: {:?}",
            v.as_ref().map(|b| String::from_utf8_lossy(b).into_owned())
        );
    }
    assert_eq!(
        balance(all.get(1)) + balance(all.get(2)),
        150,
        "money is conserved"
    );
    assert!(
        w.ts < r.ts && r.ts < moved.ts && moved.ts < all.ts,
        "one order"
    );

    let empty = kv.begin().commit();
    println!("an empty transaction: {}", empty.unwrap_err());
    let big = kv.begin().put(5, vec![0u8; 1 << 17]).commit();
    println!("a 128 KiB value: {}", big.unwrap_err());

    drop(kv);
    stop.store(true, Ordering::SeqCst);
    for s in servers {
        let stats = s.join().expect("server thread");
        println!(
            "server: {} reads, {} writes applied",
            stats.reads, stats.writes
        );
    }
    ep.leave();
    local.stop();
    Ok(())
}
