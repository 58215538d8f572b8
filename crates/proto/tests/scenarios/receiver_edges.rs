//! A receiving host, hand-fed: the reliable service's duplicates (§5.1), §5.2 Discard, and the
//! optimistic pipelines' hooks (issue 39) — each at the point where a wrong state would otherwise
//! reach an application.

use super::*;
use onepipe_proto::optimistic::OptConfig;
use onepipe_proto::reorder::OrderKey;

/// One whole reliable message from `src` to `dst`; its barrier fields do not move the receiver's
/// barriers (only beacons do, here).
fn reliable(src: u32, dst: u32, ts: u64, psn: u32, payload: &str) -> Packet {
    let fl = flags::END_OF_MESSAGE | flags::RELIABLE;
    fragment(src, dst, ts, psn, 0, fl, payload.as_bytes())
}

/// A host for process 1 (of 3 senders) fed by its first-hop switch on `UPLINK`.
fn receiver(optimistic: Option<OptConfig>) -> Host {
    let mut cfg = host_config(1, &[1], 3);
    cfg.optimistic = optimistic;
    Host::new(cfg, at(0))
}

/// The (ts, payload) of each reliable delivery.
fn reliable_got(outputs: &[Out<Host>]) -> Vec<(u64, Bytes)> {
    deliveries(outputs)
        .iter()
        .filter(|d| d.reliable)
        .map(|d| (d.ts.raw(), d.payload.clone()))
        .collect()
}

/// The host's events in order, by kind and timestamp: `("opt", ts)`, `("confirm", ts)`,
/// `("deliver", ts)`, `("revoke", ts)`.
fn hooks(outputs: &[Out<Host>]) -> Vec<(&'static str, u64)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Event(HostEvent::OptDeliver { delivery, .. }) => {
                Some(("opt", delivery.ts.raw()))
            }
            Output::Event(HostEvent::Confirm { key, .. }) => Some(("confirm", key.ts.raw())),
            Output::Event(HostEvent::Deliver(d)) => Some(("deliver", d.ts.raw())),
            Output::Event(HostEvent::Revoke { key, .. }) => Some(("revoke", key.ts.raw())),
            _ => None,
        })
        .collect()
}

/// §5.1: a reliable packet that arrives twice (the sender resent it because an ACK was lost) is
/// recorded once: it is acknowledged again, counted a duplicate, and delivered once when the
/// commit barrier passes it.
#[test]
fn a_reliable_message_that_arrives_twice_is_delivered_once_5_1() {
    let mut h = receiver(None);
    feed(&mut h, 10, UPLINK, reliable(0, 1, 50, 0, "m"));
    feed(&mut h, 20, UPLINK, reliable(0, 1, 50, 0, "m"));
    assert_eq!(
        h.stats().dropped_duplicate,
        1,
        "the second copy is a duplicate"
    );
    let out = feed(&mut h, 30, UPLINK, beacon(SWITCH_NODE.0, 100));
    assert_eq!(reliable_got(&out), vec![(50, bytes("m"))]);
    let later = feed(&mut h, 40, UPLINK, beacon(SWITCH_NODE.0, 200));
    assert!(
        reliable_got(&later).is_empty(),
        "nothing is delivered again"
    );
}

/// §5.2 Discard: once the controller says p0 failed at F = 50, the receiver drops what it holds
/// from p0 at or above F — F itself too, since our commit barrier releases messages strictly
/// below it (recovery.rs) — and delivers the rest when the commit barrier passes.
#[test]
fn discard_drops_a_failed_senders_messages_at_and_above_its_failure_timestamp_5_2() {
    let mut h = receiver(None);
    for (psn, ts, m) in [(0, 40, "below"), (1, 50, "at"), (2, 60, "above")] {
        feed(&mut h, 10 + ts, UPLINK, reliable(0, 1, ts, psn, m));
    }
    let failure = CtrlMsg::Failure {
        round: 1,
        failed: vec![(p(0), t(50))],
        correct: vec![NodeId(1)],
    };
    let mut out = control(&mut h, 100, failure);
    out.extend(feed(&mut h, 110, UPLINK, beacon(SWITCH_NODE.0, 1_000)));
    assert_eq!(reliable_got(&out), vec![(40, bytes("below"))]);
}

/// Issue 39: with optimistic delivery, a best-effort message is reported on arrival, and the
/// barrier that delivers it sequences it in the same turn — its `Confirm` just before its
/// `Deliver` — so the application's view never runs behind the total order.
#[test]
fn the_barrier_confirms_each_message_just_before_it_delivers_it_in_the_same_turn() {
    let mut h = receiver(Some(OptConfig::fixed(1)));
    let arrival = feed(&mut h, 10, UPLINK, message(0, 1, 50, 0, b"m"));
    assert_eq!(hooks(&arrival), vec![("opt", 50)]);
    let out = feed(&mut h, 20, UPLINK, beacon(SWITCH_NODE.0, 100));
    assert_eq!(hooks(&out), vec![("confirm", 50), ("deliver", 50)]);
    assert_eq!(h.optimistic_held(), 0);
}

/// Issue 39 and §5.2: a reliable message delivered optimistically and then discarded (its sender
/// failed below it) is revoked, and the pipeline lets go of it: it will never come.
#[test]
fn a_discarded_reliable_message_delivered_optimistically_is_revoked_5_2() {
    let mut h = receiver(Some(OptConfig::fixed(1)));
    let arrival = feed(&mut h, 10, UPLINK, reliable(0, 1, 60, 0, "m"));
    assert_eq!(hooks(&arrival), vec![("opt", 60)]);
    let failure = CtrlMsg::Failure {
        round: 1,
        failed: vec![(p(0), t(50))],
        correct: vec![NodeId(1)],
    };
    let out = control(&mut h, 100, failure);
    assert_eq!(hooks(&out), vec![("revoke", 60)]);
    let key = OrderKey {
        ts: t(60),
        src: p(0),
        psn: Psn(0),
    };
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Event(HostEvent::Revoke { key: k, reliable: true, .. }) if *k == key
    )));
    assert_eq!(
        h.optimistic_held(),
        0,
        "nothing is held for a message that never comes"
    );
}
