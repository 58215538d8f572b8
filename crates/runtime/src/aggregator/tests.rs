use super::*;
use crate::cluster::LocalLayout;
use onepipe_proto::failure::{CtrlMsg, MgmtDest};
use onepipe_proto::wire::Beacon;

fn cluster() -> Cluster {
    Cluster::generate(&LocalLayout {
        hosts: 4,
        ..LocalLayout::default()
    })
    .unwrap()
}

#[test]
fn a_tor_has_its_processes_then_its_parent_as_peers() {
    let c = cluster();
    let tor = Aggregator::new(&c, "tor-1", Instant(0)).unwrap();
    assert_eq!(
        tor.peers(),
        [
            Peer::Process(2),
            Peer::Process(3),
            Peer::Parent("spine-0".into())
        ]
    );
    let spine = Aggregator::new(&c, "spine-0", Instant(0)).unwrap();
    assert_eq!(
        spine.peers(),
        [Peer::Child("tor-0".into()), Peer::Child("tor-1".into())]
    );
    assert!(Aggregator::new(&c, "tor-9", Instant(0)).is_err());
}

fn data(src: u32, dst: u32) -> Packet {
    use onepipe_proto::ids::Psn;
    use onepipe_proto::wire::{flags, DataHeader, DataPacket};
    Packet::Data(DataPacket {
        header: DataHeader {
            flags: flags::END_OF_MESSAGE,
            frag: 0,
            ts: Timestamp::new(5),
            barrier: Timestamp::new(5),
            commit: Timestamp::new(5),
            psn: Psn(1),
            src: ProcId(src),
            dst: ProcId(dst),
        },
        payload: bytes::Bytes::from_static(b"x"),
    })
}

/// docs/SECURITY.md, BCP 38: a packet naming a sender that does not live behind its port
/// is dropped and counted; the same packet on the right port goes on.
#[test]
fn a_packet_in_another_processs_name_is_dropped_at_the_first_hop() {
    let c = cluster();
    // tor-0: port 0 is p0, port 1 is p1, port 2 the parent (spine-0).
    let mut tor = Aggregator::new(&c, "tor-0", Instant(0)).unwrap();
    let forwarded = |tor: &mut Aggregator, port: u32, packet: Packet| {
        tor.handle(
            Instant(1),
            Input::Packet {
                port: PortId(port),
                packet,
            },
        );
        std::iter::from_fn(|| tor.poll_output())
            .filter(|o| {
                matches!(
                    o,
                    Output::Send {
                        packet: Packet::Data(_),
                        ..
                    }
                )
            })
            .count()
    };
    // p1 speaking as p0; a process below speaking as p2 (who lives above); the parent
    // speaking as p0 (who lives below).
    assert_eq!(forwarded(&mut tor, 1, data(0, 3)), 0);
    assert_eq!(forwarded(&mut tor, 0, data(2, 3)), 0);
    assert_eq!(forwarded(&mut tor, 2, data(0, 1)), 0);
    assert_eq!(tor.spoofed_dropped(), 3);
    // Each in its own name, from where it lives.
    assert_eq!(forwarded(&mut tor, 0, data(0, 3)), 1);
    assert_eq!(forwarded(&mut tor, 2, data(2, 1)), 1);
    assert_eq!(tor.spoofed_dropped(), 3);
}

fn beacon(b: u64) -> Packet {
    Packet::Beacon(Beacon {
        from: NodeId(0),
        barrier: Timestamp::new(b),
        commit: Timestamp::new(b),
        demand: false,
    })
}

/// Runs the aggregator's timers up to `until`, collecting the barriers it sends per port.
fn run_until(a: &mut Aggregator, until: u64) -> Vec<(PortId, u64)> {
    let mut sent = Vec::new();
    while let Some(t) = a.poll_timeout() {
        if t.as_nanos() > until {
            break;
        }
        a.handle(t, Input::Timeout);
        while let Some(o) = a.poll_output() {
            match o {
                Output::Send {
                    port,
                    packet: Packet::Beacon(b),
                } => sent.push((port, b.barrier.raw())),
                Output::Send { packet, .. } => panic!("only beacons: {packet:?}"),
                // No input falls silent in this test.
                Output::Mgmt { .. } => {}
            }
        }
    }
    sent
}

/// §5.2 Detect and Resume on a split aggregator: a silent process and a silent parent are
/// reported as the controller's graph links, by the graph nodes they enter, and Resume
/// removes each from the right half's commit minimum.
#[test]
fn silent_inputs_are_reported_on_the_aggregators_ports_and_resume_removes_them_5_2() {
    let mut c = cluster();
    c.link_timeout_ns = 5_000_000; // 5 beacon intervals
    let mut tor = Aggregator::new(&c, "tor-1", Instant(0)).unwrap();
    let mut reported = Vec::new();
    for ms in 1..=20u64 {
        let now = Instant(ms * 1_000_000);
        // p2 (port 0) keeps beaconing; p3 (port 1) stops after 1 ms; the spine (port 2)
        // stops after 8 ms. (A link that never spoke is not timed out: it may be late to
        // start, §4.2.)
        let mut inputs = vec![PortId(0)];
        if ms <= 1 {
            inputs.push(PortId(1));
        }
        if ms <= 8 {
            inputs.push(PortId(2));
        }
        for port in inputs {
            tor.handle(
                now,
                Input::Packet {
                    port,
                    packet: beacon(ms * 1_000),
                },
            );
        }
        while let Some(t) = tor.poll_timeout().filter(|&t| t <= now) {
            tor.handle(t, Input::Timeout);
        }
        while let Some(o) = tor.poll_output() {
            if let Output::Mgmt {
                to: MgmtDest::Controller,
                msg: Mgmt::Ctrl(CtrlMsg::LinkDown { reporter, link, .. }),
            } = o
            {
                reported.push((reporter, link));
            }
        }
    }
    let live = LiveTopology::of(&c).unwrap();
    let index = c.aggregator_index("tor-1").unwrap();
    let p3 = live.input_link(index, AggHalf::Up, PortId(1)).unwrap();
    let parent = live.input_link(index, AggHalf::Down, PortId(1)).unwrap();
    let head = |l| live.link_head(l).unwrap();
    assert_eq!(
        reported,
        [(head(p3), p3), (head(parent), parent)],
        "p3, then the parent"
    );
    assert_ne!(head(p3), head(parent), "the up half, then the down half");
    assert_eq!(tor.input_half(PortId(1)), Some((AggHalf::Up, PortId(1))));
    assert_eq!(tor.input_half(PortId(2)), Some((AggHalf::Down, PortId(1))));
    assert_eq!(tor.input_half(PortId(3)), None);
    let resume = CtrlMsg::Resume {
        round: 1,
        dead_links: vec![p3, parent],
    };
    tor.handle(Instant(21_000_000), Input::Mgmt(Mgmt::Ctrl(resume)));
    assert_eq!(tor.commit_inputs_removed(), 2);
}

/// §3.1, Fig. 3: what a tor sends down is the min of its own processes' barriers (through
/// the loopback) and what comes down from the spine; what it sends up is its processes' min.
#[test]
fn a_split_tor_climbs_its_processes_minimum_and_descends_the_spines_eq_4_1() {
    let c = cluster();
    let mut tor = Aggregator::new(&c, "tor-0", Instant(0)).unwrap();
    tor.handle(
        Instant(1),
        Input::Packet {
            port: PortId(0),
            packet: beacon(5_000),
        },
    );
    tor.handle(
        Instant(1),
        Input::Packet {
            port: PortId(1),
            packet: beacon(7_000),
        },
    );
    // Within one beacon interval: the up half's beacon goes to the spine (port 2) with the
    // processes' minimum.
    let sent = run_until(&mut tor, 2_000_000);
    assert!(sent.contains(&(PortId(2), 5_000)), "{sent:?}");
    assert!(
        sent.iter().all(|(p, _)| *p == PortId(2)),
        "nothing goes down before the spine speaks: {sent:?}"
    );
    // The spine says 4,000: the processes hear min(5,000 via loopback, 4,000).
    tor.handle(
        Instant(2_000_001),
        Input::Packet {
            port: PortId(2),
            packet: beacon(4_000),
        },
    );
    let sent = run_until(&mut tor, 4_000_000);
    for p in [PortId(0), PortId(1)] {
        assert!(sent.contains(&(p, 4_000)), "{sent:?}");
    }
    assert_eq!(tor.barrier(), Some(Timestamp::new(4_000)));
    // A port with no peer is dropped and counted.
    tor.handle(
        Instant(4_000_001),
        Input::Packet {
            port: PortId(9),
            packet: beacon(1),
        },
    );
    assert_eq!(tor.stats().dropped, 1);
}
