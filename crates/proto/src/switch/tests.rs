use super::*;
use crate::wire::{DataHeader, DataPacket, Nak, NakReason};
use crate::{Psn, Timestamp};
use bytes::Bytes;
use proptest::prelude::*;

/// Routes process p to output p % outputs.
#[derive(Debug)]
struct Modulo(u32);

impl Router for Modulo {
    fn route(&self, _at: NodeId, _src: ProcId, dst: ProcId) -> Option<PortId> {
        (dst.0 < 100).then_some(PortId(dst.0 % self.0))
    }
}

fn switch(mode: SwitchMode) -> Switch {
    let mut cfg = SwitchConfig::new(NodeId(9), mode, 3, 2);
    cfg.input_links = vec![LinkId(20), LinkId(21), LinkId(22)];
    Switch::new(cfg, Some(Arc::new(Modulo(2))), Instant(0))
}

/// Hands `s` a §5.2 control message at `now`.
fn ctrl(s: &mut Switch, now: u64, msg: CtrlMsg) {
    s.handle(Instant(now), Input::Mgmt(Mgmt::Ctrl(msg)));
}

fn packet(kind: u8, port_ts: u64, dst: u32, barrier_valid: bool) -> Packet {
    let ts = Timestamp::new(port_ts);
    match kind {
        0 => Packet::Beacon(Beacon {
            from: NodeId(1),
            barrier: ts,
            commit: ts,
            demand: false,
        }),
        1 => Packet::Nak(Nak {
            reason: NakReason::Late,
            from: ProcId(dst),
            to: ProcId(dst + 1),
            psn: Psn(0),
            ts,
            reliable: false,
            seq: 0,
        }),
        _ => Packet::Data(DataPacket {
            header: DataHeader {
                flags: if barrier_valid {
                    flags::BARRIER_VALID
                } else {
                    0
                } | flags::END_OF_MESSAGE,
                frag: 0,
                ts,
                barrier: ts,
                commit: ts,
                psn: Psn(0),
                src: ProcId(0),
                dst: ProcId(dst),
            },
            payload: Bytes::new(),
        }),
    }
}

/// A beacon from node 1 with best-effort barrier `b` and commit barrier `c`.
fn beacon_from_1(b: u64, c: u64) -> Packet {
    Packet::Beacon(Beacon {
        from: NodeId(1),
        barrier: Timestamp::new(b),
        commit: Timestamp::new(c),
        demand: false,
    })
}

/// §5.2 Determine's `Isolate`: the input's commit register stops rising at once and is
/// reported (the controller's failure timestamp for the host behind it), while its
/// best-effort barrier still counts; Resume then removes it from the commit minimum.
/// Beacons `s` sends now: (output, barrier, demand).
fn beacons_out(s: &mut Switch) -> Vec<(u32, u64, bool)> {
    let mut v = Vec::new();
    while let Some(o) = s.poll_output() {
        if let Output::Send {
            port,
            packet: Packet::Beacon(b),
        } = o
        {
            v.push((port.0, b.barrier.raw(), b.demand));
        }
    }
    v
}

/// Issue 37: an input's demand goes on at once on every output, whether the barrier moved
/// or not; later beacons carry it for the hold after the last demand, then not; a switch
/// with no hold neither sends early nor sets the flag.
#[test]
fn demand_goes_on_at_once_on_every_output_and_lasts_the_hold() {
    let demand_beacon = |b: u64| {
        Packet::Beacon(Beacon {
            from: NodeId(1),
            barrier: Timestamp::new(b),
            commit: Timestamp::new(b),
            demand: true,
        })
    };
    for hold in [1_000, 0] {
        let mut s = switch(SwitchMode::Chip);
        s.cfg.demand_hold_ns = hold;
        s.cfg.beacon_min_gap_ns = 0;
        let feed = |s: &mut Switch, now: u64, port: u32, packet: Packet| {
            s.handle(
                Instant(now),
                Input::Packet {
                    port: PortId(port),
                    packet,
                },
            );
            beacons_out(s)
        };
        for p in 0..3 {
            feed(&mut s, 10, p, beacon_from_1(100, 100));
        }
        // The same barrier again, with demand: nothing new but the demand.
        let out = feed(&mut s, 20, 0, demand_beacon(100));
        match hold {
            0 => assert!(out.is_empty(), "{out:?}"),
            _ => assert_eq!(out, [(0, 100, true), (1, 100, true)]),
        }
        // The barrier moves within the hold: demand on; after it: off.
        feed(&mut s, 30, 0, beacon_from_1(200, 200));
        feed(&mut s, 30, 1, beacon_from_1(200, 200));
        let out = feed(&mut s, 30, 2, beacon_from_1(200, 200));
        assert_eq!(out, [(0, 200, hold > 0), (1, 200, hold > 0)]);
        for p in 0..2 {
            feed(&mut s, 1_100, p, beacon_from_1(300, 300));
        }
        let out = feed(&mut s, 1_100, 2, beacon_from_1(300, 300));
        assert_eq!(out, [(0, 300, false), (1, 300, false)]);
    }
}

#[test]
fn an_isolated_input_freezes_its_commit_register_and_is_reported_5_2() {
    let mut s = switch(SwitchMode::Chip);
    let beacon = beacon_from_1;
    for p in 0..3 {
        s.handle(
            Instant(10),
            Input::Packet {
                port: PortId(p),
                packet: beacon(100, 90),
            },
        );
    }
    while s.poll_output().is_some() {}
    assert_eq!(s.commit_barrier(), Some(Timestamp::new(90)));
    ctrl(&mut s, 10, CtrlMsg::Isolate { link: LinkId(21) });
    ctrl(&mut s, 10, CtrlMsg::Isolate { link: LinkId(23) });
    assert_eq!(s.stats().mgmt_dropped, 1, "not one of its links");
    assert_eq!(
        s.poll_output(),
        Some(Output::Mgmt {
            to: MgmtDest::Controller,
            msg: Mgmt::Ctrl(CtrlMsg::LinkDown {
                reporter: NodeId(9),
                link: LinkId(21),
                last_commit: Some(Timestamp::new(90)),
            }),
        })
    );
    assert_eq!(s.poll_output(), None);
    for p in 0..3 {
        s.handle(
            Instant(20),
            Input::Packet {
                port: PortId(p),
                packet: beacon(200, 190),
            },
        );
    }
    assert_eq!(s.commit_register(PortId(1)), Some(Timestamp::new(90)));
    assert_eq!(
        s.commit_barrier(),
        Some(Timestamp::new(90)),
        "held by the frozen input"
    );
    assert_eq!(
        s.barrier(),
        Some(Timestamp::new(200)),
        "best effort still counts it"
    );
    let resume = CtrlMsg::Resume {
        round: 1,
        dead_links: vec![LinkId(21), LinkId(7)],
    };
    ctrl(&mut s, 20, resume);
    assert_eq!(s.commit_barrier(), Some(Timestamp::new(190)));
}

/// §4.2 "Addition of new hosts and links … suspends updates to B_new until the barrier
/// received from the new link is greater than B_new", for a link a §5.2 rejoin takes back
/// into the commit minimum: the answer says whether it is alive and gives the outputs; the
/// commit output waits for the link (its register is behind) and never moves back.
#[test]
fn a_link_taken_back_holds_the_commit_output_until_it_passes_it_4_2() {
    let mut s = switch(SwitchMode::Chip);
    let beacon = beacon_from_1;
    let feed = |s: &mut Switch, now: u64, port: u32, b: u64, c: u64| {
        s.handle(
            Instant(now),
            Input::Packet {
                port: PortId(port),
                packet: beacon(b, c),
            },
        );
        while s.poll_output().is_some() {}
    };
    for p in 0..3 {
        feed(&mut s, 10, p, 100, 90);
    }
    // Input 2 was reported and removed (§5.2); the others go on to 500.
    assert!(s.isolate_input(PortId(2)));
    assert!(s.remove_commit_input(PortId(2)));
    for p in 0..2 {
        feed(&mut s, 20, p, 500, 500);
    }
    assert_eq!(s.commit_barrier(), Some(Timestamp::new(500)));
    assert_eq!(s.admit_input(PortId(7), false), None, "no such input");
    let probe = s.admit_input(PortId(2), false);
    assert_eq!(
        probe,
        Some((true, Some(Timestamp::new(100)), Some(Timestamp::new(500)))),
        "alive; best effort still waits for it"
    );
    assert!(s.commit_input_removed(PortId(2)), "a probe changes nothing");
    let taken = s.admit_input(PortId(2), true);
    assert_eq!(taken, probe);
    assert!(!s.commit_input_removed(PortId(2)));
    for p in 0..2 {
        feed(&mut s, 30, p, 900, 900);
    }
    feed(&mut s, 30, 2, 300, 300);
    assert_eq!(
        s.commit_barrier(),
        Some(Timestamp::new(500)),
        "held, never back"
    );
    feed(&mut s, 40, 2, 700, 700);
    assert_eq!(s.commit_barrier(), Some(Timestamp::new(700)));
}

#[test]
fn forward_routed_takes_the_route_only_for_the_endpoints_it_names() {
    let mut s = switch(SwitchMode::Chip);
    // Modulo(2) routes process 5 to port 1.
    let mut p = packet(2, 100, 5, true);
    let (src, dst) = p.endpoints().unwrap();
    assert_eq!(s.route(src, dst), Some(PortId(1)));
    assert_eq!(
        s.forward_routed(PortId(0), &mut p, Some((src, dst, PortId(1)))),
        Some(PortId(1))
    );
    // A remembered answer for another pair is ignored: the switch routes itself.
    let mut q = packet(2, 100, 6, true);
    assert_eq!(
        s.forward_routed(PortId(0), &mut q, Some((src, dst, PortId(1)))),
        Some(PortId(0))
    );
    assert_eq!(s.stats().forwarded, 2);
}

proptest! {
    /// `forward` (the simulator's in-place hot path) is exactly `handle` for data and NAKs:
    /// same output port, same rewritten packet, same registers, barrier, timer and counters.
    #[test]
    fn forward_is_handle_for_data_and_naks(
        mode in prop_oneof![Just(SwitchMode::Chip), Just(SwitchMode::Cpu)],
        inputs in proptest::collection::vec(
            (0u8..3, 0u32..4, 0u64..10_000, 0u32..120, any::<bool>()), 1..60),
    ) {
        let (mut a, mut b) = (switch(mode), switch(mode));
        let mut now = 0;
        for (kind, port, ts, dst, valid) in inputs {
            now += 100;
            let p = packet(kind, ts, dst, valid);
            let port = PortId(port);
            a.handle(Instant(now), Input::Packet { port, packet: p.clone() });
            let via_handle: Vec<_> = std::iter::from_fn(|| a.poll_output()).collect();
            let via_forward = if matches!(p, Packet::Beacon(_)) {
                b.handle(Instant(now), Input::Packet { port, packet: p });
                std::iter::from_fn(|| b.poll_output()).collect()
            } else {
                let mut p = p;
                let out = b.forward(port, &mut p);
                prop_assert!(b.poll_output().is_none());
                out.map(|port| Output::Send { port, packet: p }).into_iter().collect::<Vec<_>>()
            };
            prop_assert_eq!(via_handle, via_forward);
            prop_assert_eq!(a.barrier(), b.barrier());
            prop_assert_eq!(a.poll_timeout(), b.poll_timeout());
            prop_assert_eq!(a.stats(), b.stats());
            for i in 0..3 {
                prop_assert_eq!(a.register(PortId(i)), b.register(PortId(i)));
            }
        }
    }
}
