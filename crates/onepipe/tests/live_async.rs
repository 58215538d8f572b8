//! The `tokio` feature on loopback: async receive through `onepipe::Endpoint` in a tokio
//! runtime, for both services and for events, against a local cluster (a controller and an
//! aggregator on threads, endpoints in this process, UDP on 127.0.0.1 only).
//!
//! `cargo test -p onepipe --features tokio --test live_async`
#![cfg(feature = "tokio")]
// A test spawns threads (joining blocks until the whole cluster has joined).
#![allow(clippy::disallowed_methods)]

use onepipe::{cluster::LocalLayout, Bytes, Endpoint, LocalCluster, ProcId};
use std::time::Duration;

/// Generous: a loaded machine may take a while to run a wave of beacons.
const WAIT: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Two endpoints of a one-rack cluster (joined concurrently: joining waits for everyone).
fn pair(local: &LocalCluster) -> (Endpoint, Endpoint) {
    let controller = local.controller_addr();
    let opts = local.join_options();
    let other = {
        let opts = opts.clone();
        std::thread::spawn(move || Endpoint::join(controller, opts))
    };
    let a = Endpoint::join(controller, opts).unwrap();
    let b = other.join().unwrap().unwrap();
    if a.proc() == ProcId(0) {
        (a, b)
    } else {
        (b, a)
    }
}

/// Both endpoints broadcast with both services; each receives through the async calls — the
/// receives wait before anything is sent, so only the I/O thread's wake-up can finish them — and
/// both deliver one total order per service.
#[test]
fn async_receives_are_woken_by_deliveries_and_keep_the_total_order_2_1() {
    let local = LocalCluster::start(&LocalLayout {
        hosts: 2,
        layers: 1,
        ..LocalLayout::default()
    })
    .unwrap();
    let (a, b) = pair(&local);
    let rt = runtime();
    const N: usize = 20;
    let (order_a, order_b) = rt.block_on(async {
        let everyone = |m: String| [(ProcId(0), m.clone()), (ProcId(1), m)];
        // Start waiting first: the futures must be woken, not find the messages there.
        let (ra, rb) = (recv_all(&a, 2 * N), recv_all(&b, 2 * N));
        let send = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            for k in 0..N {
                a.send_unreliable(everyone(format!("a{k}"))).unwrap();
                b.send_unreliable(everyone(format!("b{k}"))).unwrap();
                a.send_reliable(everyone(format!("A{k}"))).unwrap();
                b.send_reliable(everyone(format!("B{k}"))).unwrap();
            }
        };
        let both = async {
            let ((oa, ob), ()) = futures_join(futures_join(ra, rb), send).await;
            (oa, ob)
        };
        tokio::time::timeout(WAIT, both)
            .await
            .expect("every message delivered within the wait")
    });
    assert_eq!(order_a, order_b, "one total order per service");
    assert_eq!(order_a.0.len(), 2 * N);
    assert_eq!(order_a.1.len(), 2 * N);
    a.leave();
    b.leave();
    local.stop();
}

/// Receives `n` best-effort then `n` reliable messages through the async calls.
async fn recv_all(e: &Endpoint, n: usize) -> (Vec<Bytes>, Vec<Bytes>) {
    let mut be = Vec::new();
    for _ in 0..n {
        be.push(e.best_effort().recv_async().await.unwrap().payload);
    }
    let mut rel = Vec::new();
    for _ in 0..n {
        rel.push(e.reliable().recv_async().await.unwrap().payload);
    }
    (be, rel)
}

/// Polls two futures concurrently to completion on the current task (tokio's `join!` without
/// its macros feature).
async fn futures_join<A: std::future::Future, B: std::future::Future>(
    a: A,
    b: B,
) -> (A::Output, B::Output) {
    use std::pin::pin;
    use std::task::Poll;
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut ra, mut rb) = (None, None);
    std::future::poll_fn(|cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            Poll::Ready((ra.take().unwrap(), rb.take().unwrap()))
        } else {
            Poll::Pending
        }
    })
    .await
}
