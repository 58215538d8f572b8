//! A replicated counter on onepipe's public API.
//!
//! Every replica broadcasts operations with the reliable service and applies every operation it
//! delivers, in delivery order. The operations do not commute — `x ← 31·x + k` — so replicas
//! agree on the final value only if they deliver the operations in one total order, which is
//! what 1Pipe promises (§2.1). No leader, no sequencer: each replica sends whenever it likes.
//!
//! ```text
//! cargo run --release -p onepipe --example counter                 # 3 replicas in this process
//! cargo run --release -p onepipe --example counter -- 5 1000       # 5 replicas, 1,000 ops each
//! ```
//!
//! Run alone, it starts a one-rack cluster on threads ([`LocalCluster`]); each replica is an
//! [`Endpoint`] as it would be in its own process. To run replicas as separate processes
//! against `onepipe controller` and `onepipe agg` daemons, call [`replica`] with the
//! controller's address in each.
// An application spawns threads: the rule against it is for the sans-IO protocol crates.
#![allow(clippy::disallowed_methods)]

use onepipe::cluster::LocalLayout;
use onepipe::{Bytes, Endpoint, JoinOptions, LocalCluster, ProcId};
use std::net::SocketAddr;
use std::time::Duration;

/// One replica: joins, sends `ops` operations, applies all `replicas × ops`, returns the final
/// value and the number of operations applied.
fn replica(controller: SocketAddr, opts: JoinOptions, replicas: u32, ops: u32) -> (u64, u32) {
    let me = Endpoint::join(controller, opts).expect("join the cluster");
    let everyone: Vec<ProcId> = me.processes().collect();
    let mut value: u64 = 0;
    let mut applied = 0;
    let mut sent = 0;
    let total = replicas * ops;
    while applied < total {
        // Send while there is something left to send. A full send buffer waits for room (a
        // little while: then the loop reads, since undelivered messages of ours may be what
        // holds the window).
        if sent < ops {
            let k = u64::from(me.proc().0) * 1_000_000 + u64::from(sent);
            let op = Bytes::copy_from_slice(&k.to_le_bytes());
            let scattering: Vec<(ProcId, Bytes)> =
                everyone.iter().map(|&p| (p, op.clone())).collect();
            match me.send_reliable_timeout(&scattering, Duration::from_millis(10)) {
                Ok(_) => sent += 1,
                Err(onepipe::SendError::Full) => {}
                Err(e) => panic!("send: {e}"),
            }
        }
        // Apply what has been delivered, in delivery order: a batch under one lock. Once
        // everything is sent, wait for the rest.
        let wait = if sent < ops {
            Duration::ZERO
        } else {
            Duration::from_secs(30)
        };
        let mut apply = |m: onepipe::Message| {
            let k = u64::from_le_bytes(m.payload[..8].try_into().expect("8-byte operation"));
            value = value.wrapping_mul(31).wrapping_add(k);
            applied += 1;
        };
        match me.reliable().recv(wait) {
            Ok(first) => {
                apply(first);
                me.reliable().poll(255, apply);
            }
            Err(onepipe::RecvError::Empty | onepipe::RecvError::Timeout) if sent < ops => {}
            Err(e) => panic!("receive: {e} after {applied} of {total} operations"),
        }
    }
    me.leave();
    (value, applied)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let replicas: u32 = args
        .next()
        .map_or(3, |a| a.parse().expect("replicas: a number"));
    let ops: u32 = args
        .next()
        .map_or(200, |a| a.parse().expect("ops: a number"));
    let local = LocalCluster::start(&LocalLayout {
        hosts: replicas,
        layers: 1,
        ..LocalLayout::default()
    })
    .expect("start a local cluster");
    let controller = local.controller_addr();
    let threads: Vec<_> = (0..replicas)
        .map(|_| {
            let opts = local.join_options();
            std::thread::spawn(move || replica(controller, opts, replicas, ops))
        })
        .collect();
    let results: Vec<(u64, u32)> = threads
        .into_iter()
        .map(|t| t.join().expect("replica thread"))
        .collect();
    for (i, (value, applied)) in results.iter().enumerate() {
        println!("replica {i}: {applied} operations applied, value {value:#018x}");
    }
    local.stop();
    assert!(
        results.windows(2).all(|w| w[0] == w[1]),
        "replicas disagree: total order broken"
    );
    println!("all {replicas} replicas agree");
}
