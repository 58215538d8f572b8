//! End to end on a rack (§4.1, §4.2, §6.2); best effort (§2.1, §6.1), plain messages (§2.2.2)
//! and the reliable service (§5.1, §6.1).

use super::*;

// ---------------------------------------------------------------------------------------------
// End to end: a rack (§4.1, §4.2, §6.2).
// ---------------------------------------------------------------------------------------------

/// One planned scattering: (global time, host, src, [(dst, payload)]).
type Planned = (u64, usize, u32, Vec<(u32, Bytes)>);

/// A fixed plan of 30 scatterings from every process, two at a time, to varying destination
/// sets; every seventh carries 9000-byte messages (three fragments at the default MTU). Each
/// payload starts with `<index>:` so a delivery names its scattering.
fn rack_plan(layout: &[&[u32]]) -> Vec<Planned> {
    let procs: u32 = layout.iter().map(|h| h.len() as u32).sum();
    (0..30u32)
        .map(|i| {
            let host = (i as usize * 7 + i as usize / 4) % layout.len();
            let src = layout[host][(i as usize / 3) % layout[host].len()];
            let mut dsts: Vec<u32> = (0..procs)
                .filter(|&d| d != src && (i * 11 + 5) >> d & 1 == 1)
                .collect();
            if dsts.is_empty() {
                dsts.push((src + 1) % procs);
            }
            let len = if i % 7 == 3 { 9_000 } else { 16 };
            let msgs = dsts
                .into_iter()
                .map(|d| {
                    let mut m = format!("{i}:{src}->{d}:").into_bytes();
                    m.extend_from_slice(&patterned(len, i as u8));
                    (d, Bytes::from(m))
                })
                .collect();
            (100 + 350 * u64::from(i / 2), host, src, msgs)
        })
        .collect()
}

fn scattering_of(d: &Delivery) -> u32 {
    let end = d
        .payload
        .iter()
        .position(|&c| c == b':')
        .expect("planned payload");
    std::str::from_utf8(&d.payload[..end])
        .unwrap()
        .parse()
        .unwrap()
}

fn run_rack_scenario(mode: SwitchMode) {
    let layout: &[&[u32]] = &[&[0], &[1, 2], &[3]];
    let mut rack = Rack::new(layout, 0, &[0, 130, 270], mode);
    let plan = rack_plan(layout);
    // Per destination: (ts, src, plan index, payload), in the order 1Pipe must deliver them.
    let mut expected: Vec<Vec<(Timestamp, u32, usize, Bytes)>> = vec![Vec::new(); 4];
    for (i, (when, host, src, msgs)) in plan.iter().enumerate() {
        rack.run_until(*when);
        let ts = rack.send(*host, *src, msgs);
        for (dst, payload) in msgs {
            expected[*dst as usize].push((ts, *src, i, payload.clone()));
        }
    }
    let last = plan.last().expect("a plan").0;
    rack.run_until(last + 10 * INTERVAL_NS);
    for (dst, exp) in expected.iter_mut().enumerate() {
        exp.sort_by_key(|e| (e.0, e.1, e.2));
        let want: Vec<(u64, u32, Bytes)> =
            exp.iter().map(|e| (e.0.raw(), e.1, e.3.clone())).collect();
        assert_eq!(
            summary(&rack.delivered_to(dst as u32)),
            want,
            "{mode}: process {dst}"
        );
    }
    // Agreement: any two processes see the scatterings they share in the same relative order.
    for a in 0..4u32 {
        for b in a + 1..4 {
            let seq_a: Vec<u32> = rack.delivered_to(a).iter().map(scattering_of).collect();
            let seq_b: Vec<u32> = rack.delivered_to(b).iter().map(scattering_of).collect();
            let common_a: Vec<u32> = seq_a
                .iter()
                .copied()
                .filter(|s| seq_b.contains(s))
                .collect();
            let common_b: Vec<u32> = seq_b
                .iter()
                .copied()
                .filter(|s| seq_a.contains(s))
                .collect();
            assert_eq!(common_a, common_b, "{mode}: processes {a} and {b} disagree");
        }
    }
    rack.assert_ordered_and_causal();
    for (i, h) in rack.hosts.iter().enumerate() {
        let s = h.stats();
        assert_eq!(
            (
                s.dropped_late,
                s.dropped_incomplete,
                s.dropped_full,
                s.dropped_invalid
            ),
            (0, 0, 0, 0),
            "{mode}: host {i} dropped something: {s:?}"
        );
        assert_eq!(h.reorder_len(), 0, "{mode}: host {i} still holds messages");
        assert!(rack.failed[i].is_empty(), "{mode}: {:?}", rack.failed[i]);
    }
    assert_eq!(rack.switch.stats().dropped, 0);
}

#[test]
fn rack_of_three_hosts_delivers_every_message_once_in_one_agreed_order_4_1() {
    run_rack_scenario(SwitchMode::Chip);
}

#[test]
fn rack_under_a_switch_cpu_delivers_in_one_agreed_order_by_beacons_alone_6_2_2() {
    run_rack_scenario(SwitchMode::Cpu);
}

// ---------------------------------------------------------------------------------------------
// §2.1, §6.1: best effort — acknowledgements, flow control and the loss timeout.
// ---------------------------------------------------------------------------------------------

/// Delivers every data packet `tx` emitted to `rx` at `now`, lets `rx`'s acknowledgement timer
/// fire, and returns `rx`'s ACKs (not yet fed back).
fn acks_for(rx: &mut Host, now: u64, tx_out: &[Out<Host>]) -> Vec<Packet> {
    for (_, pk) in sent(tx_out) {
        if matches!(pk, Packet::Data(_)) {
            feed(rx, now, UPLINK, pk);
        }
    }
    // Every timer up to the (best-effort) acknowledgement delay (beacons fire in between).
    let until = now + rx.config().ack_delay_ns.max(rx.config().ack_delay_be_ns);
    let mut acks = Vec::new();
    while let Some(t) = rx.poll_timeout().filter(|t| t.as_nanos() <= until) {
        let out = tick(rx, t.as_nanos());
        acks.extend(
            sent(&out)
                .into_iter()
                .map(|(_, pk)| pk)
                .filter(|pk| matches!(pk, Packet::Ack(_))),
        );
    }
    acks
}

/// §6.1 flow control for best effort: the window counts bytes of messages not yet
/// acknowledged — acknowledged ones free it at once — and an empty window takes a message of
/// any size.
#[test]
fn best_effort_window_counts_unacknowledged_bytes_only_6_1() {
    use onepipe_proto::host::SendError;
    use onepipe_proto::wire::DATA_HEADER_LEN;
    let wire = (DATA_HEADER_LEN + 10) as u64;
    let mut cfg = host_config(0, &[0], 2);
    cfg.unacked_bytes_max = 3 * wire;
    let mut tx = Host::new(cfg, at(1_000));
    let mut rx = Host::new(host_config(1, &[1], 2), at(1_000));
    let ten = Bytes::from(vec![7u8; 10]);
    let mut out = Vec::new();
    for k in 0..3 {
        tx.send(at(1_000 + k), p(0), &[(p(1), ten.clone())])
            .unwrap();
        out.extend(drain(&mut tx));
    }
    assert_eq!(
        tx.send(at(1_010), p(0), &[(p(1), ten.clone())]),
        Err(SendError::Full),
        "three messages fill the window"
    );
    // A message to itself never leaves the host: the window does not count it.
    tx.send(at(1_011), p(0), &[(p(0), ten.clone())]).unwrap();
    drain(&mut tx);
    // The receiver acknowledges all three: the window is empty again at once, long before the
    // loss timeout would have dropped their records.
    for ack in acks_for(&mut rx, 2_000, &out) {
        feed(&mut tx, 3_000, UPLINK, ack);
    }
    assert_eq!(tx.unresolved_sends(), 0);
    // Larger than the whole window, but nothing is unacknowledged: it goes...
    let big = Bytes::from(vec![1u8; 1_000]);
    tx.send(at(3_001), p(0), &[(p(1), big)]).unwrap();
    drain(&mut tx);
    // ...and nothing more fits until it is acknowledged.
    assert_eq!(
        tx.send(at(3_002), p(0), &[(p(1), ten)]),
        Err(SendError::Full)
    );
}

/// Sends one message from `tx` to `rx` at `send_ns` and feeds its acknowledgement back at
/// `ack_ns`; returns the send failures `tx` raised meanwhile.
fn round_trip(tx: &mut Host, rx: &mut Host, send_ns: u64, ack_ns: u64) -> Vec<HostEvent> {
    tx.send(at(send_ns), p(0), &[(p(1), bytes("ping"))])
        .unwrap();
    let out = drain(tx);
    let acks = acks_for(rx, send_ns + 10, &out);
    assert!(!acks.is_empty());
    let mut failed = failures(&tick(tx, ack_ns - 1));
    for ack in acks {
        failed.extend(failures(&feed(tx, ack_ns, UPLINK, ack)));
    }
    failed
}

/// §2.1 loss detection: with `rto_max_ns` above `rto_ns` the loss timeout follows the measured
/// acknowledgement delay (RFC 6298), so acknowledgements that take longer than `rto_ns` — a
/// queue, not a loss — are not reported as losses, while a message that is never acknowledged
/// still is. With the default (`rto_max_ns == rto_ns`) the timeout stays fixed.
#[test]
fn best_effort_loss_timeout_adapts_to_the_acknowledgement_delay_2_1() {
    const RTO_NS: u64 = 1_000_000;
    const ACK_DELAY_NS: u64 = 5_000_000;
    for adaptive in [true, false] {
        let mut cfg = host_config(0, &[0], 2);
        cfg.rto_ns = RTO_NS;
        if adaptive {
            cfg.rto_max_ns = 100 * RTO_NS;
        }
        let mut tx = Host::new(cfg, at(1_000));
        let mut rx = Host::new(host_config(1, &[1], 2), at(1_000));
        let lost: Vec<usize> = (0..8)
            .map(|k| {
                let t0 = 1_000_000 + k * 10 * ACK_DELAY_NS;
                round_trip(&mut tx, &mut rx, t0, t0 + ACK_DELAY_NS).len()
            })
            .collect();
        if adaptive {
            // Before any sample the timeout is the floor, doubled by each timeout (RFC 6298
            // §5.5: 1, 2, 4 ms): those messages are reported (possibly lost, which §2.1
            // allows); the first acknowledged in time teaches the estimator, and none after.
            assert_eq!(lost, [1, 1, 1, 0, 0, 0, 0, 0]);
        } else {
            assert_eq!(
                lost, [1; 8],
                "a fixed 1 ms timeout reports every 5 ms ACK as a loss"
            );
        }
        // A message never acknowledged is reported, adaptive or not.
        let t0 = 1_000_000_000;
        tx.send(at(t0), p(0), &[(p(1), bytes("into the void"))])
            .unwrap();
        drain(&mut tx);
        let mut reported = Vec::new();
        let mut now = t0;
        while reported.is_empty() {
            now = tx.poll_timeout().unwrap().as_nanos().max(now + 1);
            assert!(now < t0 + 200 * RTO_NS, "the loss was never reported");
            reported.extend(failures(&tick(&mut tx, now)));
        }
        assert!(matches!(
            reported[0],
            HostEvent::SendFailed {
                reason: NakReason::Lost,
                ..
            }
        ));
        if adaptive {
            assert!(
                now > t0 + ACK_DELAY_NS,
                "the timeout grew past the ACK delay"
            );
        } else {
            assert!(now <= t0 + RTO_NS + INTERVAL_NS, "fixed: at rto_ns ({now})");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// §2.2.2: plain messages — best effort outside the total order, delivered on arrival.
// ---------------------------------------------------------------------------------------------

fn plain_deliveries(outputs: &[Out<Host>]) -> Vec<Delivery> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Event(HostEvent::DeliverPlain(d)) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

/// A plain message (one fragment flagged `PLAIN`) whose barrier field is not valid.
fn plain_message(src: u32, dst: u32, ts: u64, psn: u32, payload: &[u8]) -> Packet {
    fragment(
        src,
        dst,
        ts,
        psn,
        0,
        flags::END_OF_MESSAGE | flags::PLAIN,
        payload,
    )
}

/// §2.2.2: "the response message does not need to be ordered by 1Pipe". A plain message is
/// delivered the moment it arrives — above the barrier, while an ordered message sent before
/// it waits for the barrier, and below it, where an ordered one would be late — and the
/// ordered ones keep their order around it: the barrier is untouched by plain deliveries.
#[test]
fn a_plain_message_is_delivered_on_arrival_whatever_the_barrier_2_2_2() {
    let mut rx = Host::new(host_config(1, &[0], 4), at(1_000));
    assert!(deliveries(&feed(&mut rx, 1_000, UPLINK, beacon(9, 100))).is_empty());
    // An ordered message above the barrier waits; a plain one sent after it does not.
    assert!(feed(&mut rx, 1_000, UPLINK, message(1, 0, 200, 0, b"ordered")).is_empty());
    let out = feed(
        &mut rx,
        1_000,
        UPLINK,
        plain_message(1, 0, 300, 1, b"reply"),
    );
    assert!(deliveries(&out).is_empty(), "the ordered one still waits");
    let got = plain_deliveries(&out);
    assert_eq!(summary(&got), vec![(300, 1, bytes("reply"))]);
    assert_eq!(
        got[0].barrier,
        t(100),
        "delivered with the barrier below it"
    );
    assert!(!got[0].reliable);
    assert_eq!(rx.reorder_len(), 1, "only the ordered one is buffered");
    assert_eq!(
        rx.barrier(),
        Some(Barrier(t(100))),
        "and the barrier did not move"
    );
    // The barrier passes both: the ordered one is delivered, the plain one not again.
    let out = feed(&mut rx, 1_000, UPLINK, beacon(9, 400));
    assert_eq!(summary(&deliveries(&out)), vec![(200, 1, bytes("ordered"))]);
    assert!(plain_deliveries(&out).is_empty());
    // Below the barrier: an ordered message is late and NAKed, a plain one delivered.
    let out = feed(
        &mut rx,
        1_000,
        UPLINK,
        plain_message(2, 0, 50, 0, b"old reply"),
    );
    assert_eq!(
        summary(&plain_deliveries(&out)),
        vec![(50, 2, bytes("old reply"))]
    );
    assert!(sent(&out).is_empty(), "no NAK");
    let out = feed(&mut rx, 1_000, UPLINK, message(2, 0, 60, 1, b"late"));
    assert_eq!(
        sent(&out),
        vec![(UPLINK, nak(NakReason::Late, 0, 2, 1, 60))]
    );
    let s = rx.stats();
    assert_eq!((s.delivered, s.delivered_plain, s.dropped_late), (1, 2, 1));
}

/// The sender's side: `send_plain` stamps a message with the host's timestamp and sends it
/// flagged `PLAIN`, in the pair's best-effort PSN space — so the receiver's acknowledgements
/// cover ordered and plain messages alike — and the receiver's window treats it as any other
/// best-effort packet: acknowledged, and a duplicate dropped and acknowledged again.
#[test]
fn a_plain_message_shares_the_best_effort_psns_and_acknowledgements_2_1_2_2_2() {
    let mut tx = Host::new(host_config(0, &[0], 2), at(1_000));
    let mut rx = Host::new(host_config(1, &[1], 2), at(1_000));
    let a = tx.send(at(1_000), p(0), &[(p(1), bytes("a"))]).unwrap();
    let b = tx
        .send_plain(at(1_001), p(0), &[(p(1), bytes("b"))])
        .unwrap();
    let c = tx.send(at(1_002), p(0), &[(p(1), bytes("c"))]).unwrap();
    assert!(a < b && b < c, "one timestamp counter for both");
    let out = drain(&mut tx);
    let data = data_of(&sent(&out));
    let psns: Vec<(u32, bool)> = data
        .iter()
        .map(|d| (d.header.psn.0, d.header.plain()))
        .collect();
    assert_eq!(psns, vec![(0, false), (1, true), (2, false)]);
    assert!(data.iter().all(|d| !d.header.reliable()));
    assert_eq!((tx.stats().messages_sent, tx.stats().plain_sent), (2, 1));
    assert_eq!(
        tx.unresolved_sends(),
        3,
        "all three tracked until acknowledged"
    );
    let acks = acks_for(&mut rx, 2_000, &out);
    // Each packet's barrier field (this host config stamps barriers on data) raised the
    // barrier to its timestamp: `a` is below `c`'s and delivered in order, `c` waits.
    assert_eq!((rx.stats().delivered_plain, rx.stats().delivered), (1, 1));
    for ack in acks {
        feed(&mut tx, 3_000, UPLINK, ack);
    }
    assert_eq!(
        tx.unresolved_sends(),
        0,
        "one ACK covers ordered and plain alike"
    );
    // The plain packet again (network duplication): dropped, acknowledged again.
    let again = feed(&mut rx, 4_000, UPLINK, Packet::Data(data[1].clone()));
    assert!(plain_deliveries(&again).is_empty());
    assert_eq!(rx.stats().dropped_duplicate, 1);
    assert_eq!(rx.stats().delivered_plain, 1);
}

/// §2.1: "detects lost packets via end-to-end ACK, but does not retransmit them" — a plain
/// message is reported lost as an ordered best-effort one is: never acknowledged, it is
/// reported `Lost` when its loss timeout passes; a plain message the receiving application
/// has no room for is refused before it is acknowledged and NAKed `BufferFull` (§4.1).
#[test]
fn a_lost_or_refused_plain_message_is_reported_to_its_sender_2_1_4_1() {
    let mut cfg = host_config(0, &[0], 2);
    cfg.rto_ns = 1_000_000;
    let mut tx = Host::new(cfg, at(1_000));
    let mut rx = Host::new(host_config(1, &[1], 2), at(1_000));
    // Lost: the network drops it.
    let lost_ts = tx
        .send_plain(at(1_000), p(0), &[(p(1), bytes("into the void"))])
        .unwrap();
    drain(&mut tx);
    let mut reported = Vec::new();
    let mut now = 1_000;
    while reported.is_empty() {
        now = tx.poll_timeout().unwrap().as_nanos().max(now + 1);
        assert!(now < 10_000_000, "the loss was never reported");
        reported.extend(failures(&tick(&mut tx, now)));
    }
    assert_eq!(
        reported,
        vec![HostEvent::SendFailed {
            src: p(0),
            dst: p(1),
            ts: lost_ts,
            psn: Psn(0),
            reason: NakReason::Lost,
        }]
    );
    // Refused: room for one more plain message at the receiver, two arrive.
    assert!(rx.set_plain_room(p(1), 1));
    tx.send_plain(at(now), p(0), &[(p(1), bytes("fits"))])
        .unwrap();
    let refused_ts = tx
        .send_plain(at(now + 1), p(0), &[(p(1), bytes("no room"))])
        .unwrap();
    let up = sent(&drain(&mut tx));
    let first = feed(&mut rx, now + 10, UPLINK, up[0].1.clone());
    assert_eq!(
        summary(&plain_deliveries(&first)),
        vec![(refused_ts.raw() - 1, 0, bytes("fits"))]
    );
    assert_eq!(rx.plain_room(p(1)), Some(0));
    let second = feed(&mut rx, now + 11, UPLINK, up[1].1.clone());
    assert!(plain_deliveries(&second).is_empty());
    let expected = nak(NakReason::BufferFull, 1, 0, 2, refused_ts.raw());
    assert_eq!(sent(&second), vec![(UPLINK, expected.clone())]);
    assert_eq!(rx.stats().dropped_full, 1);
    assert_eq!(
        failures(&feed(&mut tx, now + 20, UPLINK, expected)),
        vec![HostEvent::SendFailed {
            src: p(0),
            dst: p(1),
            ts: refused_ts,
            psn: Psn(2),
            reason: NakReason::BufferFull,
        }]
    );
}

/// A multi-fragment plain message is reassembled and delivered whole on its last fragment;
/// one whose fragment never comes is given up when the barrier passes its timestamp, with an
/// `Incomplete` NAK, as an ordered one is (§6.1) — the sender hears of it.
#[test]
fn a_plain_message_is_reassembled_and_an_incomplete_one_is_nacked_6_1() {
    let mut rx = Host::new(host_config(1, &[1], 2), at(1_000));
    let fl = flags::PLAIN;
    let out = feed(&mut rx, 1_000, UPLINK, fragment(0, 1, 500, 0, 0, fl, b"ab"));
    assert!(plain_deliveries(&out).is_empty());
    let last = fl | flags::END_OF_MESSAGE;
    let out = feed(
        &mut rx,
        1_000,
        UPLINK,
        fragment(0, 1, 500, 1, 1, last, b"cd"),
    );
    assert_eq!(
        summary(&plain_deliveries(&out)),
        vec![(500, 0, bytes("abcd"))]
    );
    // Fragment 0 of another comes, fragment 1 never does.
    feed(&mut rx, 1_000, UPLINK, fragment(0, 1, 600, 2, 0, fl, b"ef"));
    assert_eq!(rx.partial_len(), 1);
    let out = feed(&mut rx, 1_000, UPLINK, beacon(9, 700));
    assert_eq!(
        sent(&out),
        vec![(UPLINK, nak(NakReason::Incomplete, 1, 0, 2, 600))]
    );
    assert_eq!(rx.partial_len(), 0);
    assert_eq!(rx.stats().dropped_incomplete, 1);
}

// ---------------------------------------------------------------------------------------------
// §5.1, §6.1: reliable service — flow control, the send buffer and the commit barrier.
// ---------------------------------------------------------------------------------------------

/// §6.1: a receiver that stops reading fills its buffer, then the sender's window, then the
/// sender's send buffer — and the caller gets `SendError::Full`, with every buffer bounded. When
/// the receiver reads again, every accepted message is delivered exactly once, in order.
#[test]
fn a_receiver_that_stops_reading_fills_the_window_then_the_send_buffer_6_1() {
    use onepipe_proto::host::SendError;
    const BUFFER_BYTES: usize = 20_000;
    const RECEIVER_SLOTS: usize = 16;
    let mut rack = Rack::new(&[&[0], &[1]], 10_000, &[0, 0], SwitchMode::Chip);
    // Rebuild both hosts with small buffers (same ids and clocks as the rack made them).
    for h in 0..2 {
        let mut cfg = rack.hosts[h].config().clone();
        cfg.reliable.send_buffer_bytes_max = BUFFER_BYTES;
        cfg.reorder_len_max = RECEIVER_SLOTS;
        rack.hosts[h] = Host::new(cfg, rack.local(h));
    }
    rack.run_until(20_000);
    let now = rack.local(1);
    assert!(rack.hosts[1].set_paused(now, p(1), true));
    let msg = Bytes::from(vec![9u8; 100]);
    let mut accepted = 0usize;
    let mut peak_unacked = 0;
    let full = loop {
        let now = rack.local(0);
        match rack.hosts[0].send_reliable(now, p(0), &[(p(1), msg.clone())]) {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
        rack.drain_host(0);
        peak_unacked = peak_unacked.max(rack.hosts[0].reliable_pending().1);
        let next = rack.now + 2_000;
        rack.run_until(next);
        assert!(accepted < 10_000, "the send buffer never filled");
    };
    assert_eq!(full, SendError::Full);
    // The receiver's buffer is full (acknowledged, undelivered), its advertised window closed:
    // the sender keeps one probe in flight and queues the rest, up to its send buffer.
    assert_eq!(rack.hosts[1].reorder_len(), RECEIVER_SLOTS);
    assert!(rack.hosts[0].send_buffer_bytes() <= BUFFER_BYTES);
    assert!(rack.hosts[0].send_buffer_bytes() + msg.len() > BUFFER_BYTES);
    let (queued, unacked) = rack.hosts[0].reliable_pending();
    assert_eq!(
        unacked, 1,
        "one probe while the receiver's window is closed"
    );
    assert!(peak_unacked >= 1);
    assert_eq!(accepted, RECEIVER_SLOTS + unacked + queued);
    assert!(rack.delivered_to(1).is_empty());
    // The receiver reads again: everything accepted arrives, once, in order.
    let now = rack.local(1);
    rack.hosts[1].set_paused(now, p(1), false);
    rack.drain_host(1);
    let end = rack.now + 50_000_000;
    rack.run_until(end);
    let got = rack.delivered_to(1);
    assert_eq!(got.len(), accepted);
    assert!(got.iter().all(|d| d.reliable && d.src == p(0)));
    rack.assert_ordered_and_causal();
    assert_eq!(rack.hosts[0].reliable_pending(), (0, 0));
    assert_eq!(rack.hosts[0].send_buffer_bytes(), 0);
}

/// §5.1: a reliable scattering is delivered only once every receiver acknowledged it — the
/// commit barrier waits for the slowest ACK — and best-effort traffic keeps its own order.
#[test]
fn reliable_scattering_waits_for_every_ack_then_is_delivered_everywhere_5_1() {
    let mut rack = Rack::new(&[&[0], &[1], &[2]], 10_000, &[0, 0, 0], SwitchMode::Chip);
    rack.run_until(15_000);
    let now = rack.local(0);
    rack.hosts[0]
        .send_reliable(now, p(0), &[(p(1), bytes("a")), (p(2), bytes("b"))])
        .expect("room");
    rack.drain_host(0);
    rack.send(1, 1, &[(2, bytes("be"))]);
    // Hold every ACK to p0 back: nothing reliable may be delivered.
    let mut held = Vec::new();
    for _ in 0..200 {
        let next = rack.now + 100;
        rack.run_until(next);
        let acks: Vec<_> = rack
            .in_flight
            .iter()
            .filter(
                |(_, (d, _, pk))| matches!((d, pk), (Dest::Host(0), Packet::Ack(a)) if a.reliable),
            )
            .map(|(k, _)| *k)
            .collect();
        for k in acks {
            held.push(rack.in_flight.remove(&k).expect("present"));
        }
    }
    assert!(!held.is_empty(), "the receivers acknowledged");
    assert!(rack.delivered.iter().flatten().all(|d| !d.reliable));
    assert_eq!(
        rack.delivered_to(2).len(),
        1,
        "best effort is not held back"
    );
    // Release the ACKs: both receivers deliver it.
    for v in held {
        rack.schedule(v.0, v.1, v.2);
    }
    let end = rack.now + 200_000;
    rack.run_until(end);
    for (dst, payload) in [(1, "a"), (2, "b")] {
        let rel: Vec<_> = rack
            .delivered_to(dst)
            .into_iter()
            .filter(|d| d.reliable)
            .collect();
        assert_eq!(rel.len(), 1, "p{dst}");
        assert_eq!(rel[0].payload, bytes(payload));
    }
    rack.assert_ordered_and_causal();
}

/// §6.1 retransmission, paced: when the timers of many unacknowledged messages fire together
/// (an overloaded host whose ACKs wait behind its own input queue), one input resends at most
/// `retransmit_burst_max` of them, oldest deadline first, and the following packets resend the
/// rest — not a timer due at once, which a driver would run ahead of those packets. Resent in
/// one go, 800 messages with their §5.2 forwarded copies kept a host from its beacons for
/// 80 µs and its switch took it for dead (VOPR seed 17).
#[test]
fn a_burst_of_retransmissions_is_paced_over_the_following_inputs_6_1() {
    let mut cfg = host_config(0, &[0], 200);
    cfg.retransmit_burst_max = 64;
    let mut h = Host::new(cfg, at(500));
    let scattering: Vec<_> = (1..=150).map(|d| (p(d), bytes("m"))).collect();
    h.send_reliable(at(1_000), p(0), &scattering).expect("room");
    let first = data_of(&sent(&drain(&mut h)));
    assert_eq!(first.len(), 150, "every destination has window room");
    // Past the initial RTO every message is due at once.
    let now = 300_000;
    let resent = |out: &[Out<Host>]| {
        data_of(&sent(out))
            .into_iter()
            .filter(|d| d.header.reliable())
            .map(|d| d.header.dst.0)
            .collect::<Vec<_>>()
    };
    let burst = resent(&tick(&mut h, now));
    assert_eq!(burst.len(), 64);
    let next = h.poll_timeout().expect("a beacon timer at least");
    assert!(
        next > at(now),
        "no timer due at once for the backlog: {next:?}"
    );
    // The next packets take the rest up, 64 at a time.
    let mut all = burst;
    for k in 1..=3u64 {
        let more = resent(&feed(&mut h, now + k, UPLINK, beacon(100, 1_000)));
        assert_eq!(more.len(), [64, 22, 0][k as usize - 1], "input {k}");
        all.extend(more);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=150).collect::<Vec<_>>(), "each message once");
    assert_eq!(h.reliable_stats().retransmits, 150);
}
