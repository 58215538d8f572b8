//! The first program a newcomer writes: three endpoints on a [`LocalCluster`], broadcasts on
//! both services, a scattering, an event loop, and one endpoint leaving.
//!
//! ```text
//! cargo run -p onepipe --example newcomer
//! ```
//!
//! Nothing here needs a thread to join or any knowledge of failure-callback timeouts: the
//! cluster starts with its first process (`start_with`) and the others join it while it runs,
//! one after another; failure notifications hold nothing by default
//! (`FailureCallbacks::Automatic`).
// An application may spawn threads; this one needs none, but the workspace's rule against them
// is for the sans-IO protocol crates.
#![allow(clippy::disallowed_methods)]

use onepipe::cluster::LocalLayout;
use onepipe::{Endpoint, Event, FailReason, LocalCluster, Message, ProcId, View};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(30);

/// What the run saw, for the test that runs this example.
#[derive(Debug)]
pub struct Seen {
    /// The views of the three endpoints once all had joined (equal).
    pub views: Vec<View>,
    /// Reliable messages each of the three delivered, in delivery order: (sender, text).
    pub reliable: Vec<Vec<(ProcId, String)>>,
    /// Best-effort messages each delivered.
    pub best_effort: Vec<Vec<(ProcId, String)>>,
    /// What the two that stayed heard about the one that left: (reason, their next view).
    pub departure: Vec<(FailReason, View)>,
}

/// Runs the program; panics (naming what) if anything it expects does not happen.
pub fn run() -> Seen {
    // A controller and one aggregator on threads of this process. The cluster has room for
    // three processes and starts as soon as one has joined.
    let layout = LocalLayout {
        hosts: 3,
        layers: 1,
        start_with: Some(1),
        ..LocalLayout::default()
    };
    let local = LocalCluster::start(&layout).expect("start a local cluster");
    let join = || Endpoint::join(local.controller_addr(), local.join_options()).expect("join");
    // One after another: each `join` returns once the process is in the group's view.
    let eps = [join(), join(), join()];
    let views = agree(&eps, 3);
    println!(
        "view {}: {:?} (every endpoint sees the same)",
        views[0].epoch, views[0].members
    );

    // A reliable broadcast from the first, a best-effort one from the second, and a scattering
    // from the third: a different message to each of the other two, at one timestamp.
    let [a, b, c] = &eps;
    a.broadcast_reliable("hello from a").expect("broadcast");
    b.broadcast_unreliable("hi from b").expect("broadcast");
    let ts = c
        .send_reliable(&[(a.proc(), "to a".into()), (b.proc(), "to b".into())])
        .expect("scatter");
    println!("c scattered ({ts:?})");

    // a and b get the broadcast and their part of the scattering; c the broadcast.
    let reliable: Vec<_> = eps
        .iter()
        .zip([2, 2, 1])
        .map(|(e, n)| receive(e, true, n))
        .collect();
    let best_effort: Vec<_> = eps.iter().map(|e| receive(e, false, 1)).collect();
    for (e, (r, u)) in eps.iter().zip(reliable.iter().zip(&best_effort)) {
        println!("{}: reliable {r:?}, best effort {u:?}", e.proc());
    }
    // One total order: "hello from a" and c's scattering reach a and b in the same order.
    let order = |got: &[(ProcId, String)]| -> Vec<ProcId> { got.iter().map(|m| m.0).collect() };
    assert_eq!(order(&reliable[0]), order(&reliable[1]), "one total order");

    // The third leaves; the other two each hear of it once, and see a new view.
    let [a, b, c] = eps;
    let gone = c.proc();
    c.leave();
    let departure: Vec<(FailReason, View)> = [&a, &b]
        .iter()
        .map(|e| event_loop_until_left(e, gone))
        .collect();
    for (reason, view) in &departure {
        println!("{gone} {reason}; view {}: {:?}", view.epoch, view.members);
    }
    a.leave();
    b.leave();
    local.stop();
    Seen {
        views,
        reliable,
        best_effort,
        departure,
    }
}

/// Waits until every endpoint's view has `n` members and the same epoch.
fn agree(eps: &[Endpoint], n: usize) -> Vec<View> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let views: Vec<View> = eps.iter().map(Endpoint::view).collect();
        if views.iter().all(|v| v.members.len() == n && *v == views[0]) {
            return views;
        }
        assert!(
            Instant::now() < deadline,
            "the views never agreed: {views:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `n` messages of one service at `e`: (sender, text).
fn receive(e: &Endpoint, reliable: bool, n: usize) -> Vec<(ProcId, String)> {
    (0..n)
        .map(|_| {
            let m: Message = match reliable {
                true => e.reliable().recv(PATIENCE),
                false => e.best_effort().recv(PATIENCE),
            }
            .expect("a message");
            (m.src, String::from_utf8_lossy(&m.payload).into_owned())
        })
        .collect()
}

/// An application's event loop, until it has heard that `gone` left and seen the view
/// without it.
fn event_loop_until_left(e: &Endpoint, gone: ProcId) -> (FailReason, View) {
    let (mut reason, mut view) = (None, None);
    while reason.is_none() || view.is_none() {
        match e.next_event_timeout(PATIENCE).expect("an event") {
            Event::ProcessFailed {
                proc, reason: r, ..
            } if proc == gone => reason = Some(r),
            Event::ViewChanged(v) if v.left.contains(&gone) => view = Some(v),
            // Everything else an application may hear (send failures, recalls, …).
            _ => {}
        }
    }
    (reason.unwrap(), view.unwrap())
}

fn main() {
    let seen = run();
    assert!(seen.departure.iter().all(|(r, _)| *r == FailReason::Left));
    println!("ok");
}
