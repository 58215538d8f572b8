//! What an endpoint builds and does without a controller or sockets: the role it runs, what it
//! does when declared failed, and which management messages reach the control thread. The live
//! cluster tests (`cli --test live`, `runtime --test failure`) show the same end to end; these
//! are the cheap checks of each decision.

use super::control_thread::on_declared;
use super::*;
use crate::cluster::LocalLayout;

/// A four-process cluster file, as `onepipe up` generates it.
fn cluster() -> Cluster {
    Cluster::generate(&LocalLayout::default()).expect("the default layout is a cluster")
}

/// The role process 0 runs, and the state its threads would share.
fn endpoint(cluster: &Cluster, opts: &JoinOptions, restarted: bool) -> Shared {
    let clock = Clock::monotonic();
    let me = ProcId(0);
    let role = Role::of(cluster, opts, me, restarted, &opts.driver, clock);
    Shared::new(me, role, clock, opts, cluster, restarted)
}

/// `f` of the 1Pipe host the endpoint runs; panics on the unordered baseline.
fn host<R>(shared: &Shared, f: impl FnOnce(&Host) -> R) -> R {
    match &shared.lock().role {
        Role::Ordered(h) => f(h),
        Role::Unordered(_) => panic!("an ordered cluster runs the unordered baseline"),
    }
}

#[test]
fn an_ordered_cluster_runs_the_1pipe_host_and_an_unordered_one_the_baseline_4_1() {
    let mut c = cluster();
    let opts = JoinOptions::default();
    assert!(c.ordered, "clusters order by default");
    let shared = endpoint(&c, &opts, false);
    assert!(
        !host(&shared, Host::restart_silent),
        "a fresh process starts correct"
    );
    c.ordered = false;
    let shared = endpoint(&c, &opts, false);
    assert!(matches!(shared.lock().role, Role::Unordered(_)));
}

#[test]
fn a_restarted_process_starts_silent_until_it_hears_it_was_declared_5_2() {
    let c = cluster();
    let opts = JoinOptions {
        restarted: true,
        ..JoinOptions::default()
    };
    let shared = endpoint(&c, &opts, true);
    assert!(
        host(&shared, Host::restart_silent),
        "§5.2 receiver recovery: a restarted process has lost its state and must rejoin"
    );
}

#[test]
fn failure_callbacks_hold_the_round_only_when_the_application_asks_5_2() {
    let c = cluster();
    for (callbacks, held) in [
        (FailureCallbacks::Automatic, false),
        (FailureCallbacks::Held, true),
    ] {
        let opts = JoinOptions {
            failure_callbacks: callbacks,
            ..JoinOptions::default()
        };
        let shared = endpoint(&c, &opts, false);
        assert_eq!(
            host(&shared, |h| h.config().callbacks_held),
            held,
            "{callbacks:?}"
        );
    }
}

#[test]
fn a_process_the_controller_declares_failed_freezes_5_2() {
    let c = cluster();
    let shared = endpoint(&c, &JoinOptions::default(), false);
    assert_eq!(host(&shared, Host::own_failure), None);
    on_declared(&[(1, 500), (0, 700)], &shared);
    assert_eq!(
        host(&shared, Host::own_failure),
        Some(Timestamp::new(700)),
        "its own declaration freezes the role at its failure timestamp"
    );
}

#[test]
fn a_forwarded_relay_goes_to_the_control_thread_and_a_relay_to_a_peer_is_counted_5_2() {
    let c = cluster();
    let shared = endpoint(&c, &JoinOptions::default(), false);
    let forward = || {
        Mgmt::Relay(RelayMsg::Forward {
            from: NodeId(0),
            packets: Vec::new(),
        })
    };
    shared.send_mgmt(MgmtDest::Controller, forward());
    let lines: Vec<ToController> = shared.control_out.lock().unwrap().drain(..).collect();
    assert!(
        matches!(lines.as_slice(), [ToController::Relay { .. }]),
        "§5.2 controller forwarding: the relay goes to the controller"
    );
    shared.send_mgmt(MgmtDest::Node(NodeId(1)), forward());
    assert!(shared.control_out.lock().unwrap().is_empty());
    assert_eq!(shared.control_dropped.load(Ordering::Relaxed), 1);
}
