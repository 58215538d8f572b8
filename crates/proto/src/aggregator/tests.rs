use super::*;
use crate::ids::NodeId;
use crate::switch::SwitchMode;
use crate::wire::Beacon;

/// A switch as the live runtime configures one: 1 ms beacons, chip mode, phased by depth.
fn cfg(node: u32, depth: u64, inputs: usize, outputs: usize) -> SwitchConfig {
    let mut cfg = SwitchConfig::new(NodeId(node), SwitchMode::Chip, inputs, outputs);
    cfg.beacon_interval_ns = 1_000_000;
    cfg.beacon_phase_ns = depth * 200_000;
    cfg.beacon_min_gap_ns = 100_000;
    cfg.link_timeout_intervals = 1_000;
    cfg.report_retry_intervals = 0;
    cfg
}

/// `tor-0` of four processes under two tors and a spine: port 0 is p0, port 1 is p1, port 2
/// the parent; p2 and p3 live above.
fn tor0() -> Aggregator {
    let mut down = ProcessRouter::with_ids(8);
    down.set(ProcId(0), PortId(0));
    down.set(ProcId(1), PortId(1));
    let mut up = ProcessRouter::with_ids(8);
    for p in 0..4 {
        up.set(ProcId(p), PortId(if p < 2 { 0 } else { 1 }));
    }
    Aggregator::split(
        cfg(4, 1, 2, 2),
        Arc::new(up),
        cfg(5, 3, 2, 2),
        Arc::new(down),
        4,
        Instant(0),
    )
}

fn data(src: u32, dst: u32) -> Packet {
    use crate::ids::Psn;
    use crate::wire::{flags, DataHeader, DataPacket};
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

/// Feeds `packet` on `port`; the data packets that come out: their port and barrier.
fn data_out(tor: &mut Aggregator, port: u32, packet: Packet) -> Vec<(PortId, Option<u64>)> {
    tor.handle(
        Instant(1),
        Input::Packet {
            port: PortId(port),
            packet,
        },
    );
    std::iter::from_fn(|| tor.poll_output())
        .filter_map(|o| match o {
            Output::Send {
                port,
                packet: Packet::Data(d),
            } => Some((port, d.header.barrier().map(|b| b.raw()))),
            _ => None,
        })
        .collect()
}

/// docs/SECURITY.md, BCP 38: a packet naming a sender that does not live behind its port
/// is dropped and counted; the same packet on the right port goes on.
#[test]
fn a_packet_in_another_processs_name_is_dropped_at_the_first_hop() {
    let mut tor = tor0();
    let forwarded =
        |tor: &mut Aggregator, port: u32, packet: Packet| data_out(tor, port, packet).len();
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

/// §3.1, Fig. 3: what a tor sends down is the min of its own processes' barriers (through
/// the loopback) and what comes down from the spine; what it sends up is its processes' min.
#[test]
fn a_split_tor_climbs_its_processes_minimum_and_descends_the_spines_eq_4_1() {
    let mut tor = tor0();
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

/// The root is one switch whose ports are its peers below, port for port; a packet from below
/// in its own name goes down to its destination's port.
#[test]
fn a_root_is_one_node_with_its_peers_below_on_both_sides() {
    let mut r = ProcessRouter::with_ids(4);
    for p in 0..4 {
        r.set(ProcId(p), PortId(p / 2));
    }
    let mut spine = Aggregator::root(cfg(8, 2, 2, 2), Arc::new(r), 4, Instant(0));
    assert_eq!(spine.input_half(PortId(1)), Some((Half::Up, PortId(1))));
    assert_eq!(spine.input_half(PortId(2)), None);
    spine.handle(
        Instant(1),
        Input::Packet {
            port: PortId(0),
            packet: data(1, 3),
        },
    );
    let out: Vec<PortId> = std::iter::from_fn(|| spine.poll_output())
        .filter_map(|o| match o {
            Output::Send {
                port,
                packet: Packet::Data(_),
            } => Some(port),
            _ => None,
        })
        .collect();
    assert_eq!(out, [PortId(1)]);
    assert_eq!(spine.spoofed_dropped(), 0);
}

/// §5.2 rejoin: a process that came back under a new id is reached the way its host is, from
/// above (the parent's port) and from beside it (through the loopback); before it rejoined
/// the id led nowhere.
#[test]
fn a_rejoined_processs_new_id_is_routed_as_its_host_5_2() {
    let mut tor = tor0();
    let sent_to = |tor: &mut Aggregator, port: u32, packet: Packet| -> Vec<PortId> {
        data_out(tor, port, packet)
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    };
    assert_eq!(sent_to(&mut tor, 2, data(2, 5)), []);
    assert!(tor.rejoined(ProcId(1), &[ProcId(5)]));
    assert_eq!(sent_to(&mut tor, 2, data(2, 5)), [PortId(1)]);
    assert_eq!(sent_to(&mut tor, 0, data(0, 5)), [PortId(1)]);
    assert!(
        !tor.rejoined(ProcId(1), &[ProcId(8)]),
        "an id beyond the routers' room is refused"
    );
}

/// Eq. 4.1 on the data path: a data packet leaves with the minimum over the half's inputs, not
/// the barrier its sender wrote, so nothing behind a slower input is overtaken.
#[test]
fn forwarded_data_carries_the_minimum_over_inputs_not_its_senders_barrier_eq_4_1() {
    let mut tor = tor0();
    let mut stamped = data(0, 3);
    if let Packet::Data(d) = &mut stamped {
        d.header.flags |= crate::wire::flags::BARRIER_VALID;
    }
    // p1 says 3; p0's data says 5 on its way up to p3.
    assert_eq!(data_out(&mut tor, 1, beacon(3)), []);
    assert_eq!(data_out(&mut tor, 0, stamped), [(PortId(2), Some(3))]);
}

/// Each input port's barrier gaps are its half's: the parent's port is the down half's input 1,
/// and a loopback is no port of the aggregator.
#[test]
fn each_input_port_keeps_its_own_barrier_gaps_in_its_half_4_2() {
    let mut tor = tor0();
    for (at, port) in [(10, 0), (40, 0), (20, 2), (90, 2), (100, 2)] {
        tor.handle(
            Instant(at),
            Input::Packet {
                port: PortId(port),
                packet: beacon(at),
            },
        );
    }
    let gaps = |p: u32| tor.input_gaps(PortId(p)).map(|g| (g.gap_max_ns, g.last));
    assert_eq!(gaps(0), Some((30, Some(Instant(40)))));
    assert_eq!(gaps(1), Some((0, None)), "p1 never spoke");
    assert_eq!(gaps(2), Some((70, Some(Instant(100)))));
    assert_eq!(gaps(3), None, "not an input");
}
