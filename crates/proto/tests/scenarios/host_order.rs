//! The host: timestamps (§2.1, §4.1), delivery below the barrier (§4.1), fragmentation (§6.1),
//! several processes per host (§2.1, §6.1) and host beacons (§4.2).

use super::*;

// ---------------------------------------------------------------------------------------------
// §2.1, §4.1: message timestamps.
// ---------------------------------------------------------------------------------------------

#[test]
fn timestamps_never_decrease_when_the_clock_steps_back_2_1() {
    let mut h = Host::new(host_config(0, &[0], 2), at(10_000));
    let a = h.send(at(10_000), p(0), &[(p(1), bytes("a"))]).unwrap();
    assert_eq!(a, t(10_000));
    // Clock synchronisation steps the clock back 6 µs.
    let b = h.send(at(4_000), p(0), &[(p(1), bytes("b"))]).unwrap();
    assert!(b >= a, "timestamp went backwards: {a:?} then {b:?}");
    let mut out = drain(&mut h);
    // Inputs handled while the clock is behind do not lower it either.
    assert!(tick(&mut h, 3_000).is_empty());
    assert!(feed(&mut h, 3_500, UPLINK, beacon(9, 2_000)).is_empty());
    let c = h.send(at(5_000), p(0), &[(p(1), bytes("c"))]).unwrap();
    assert!(c >= b);
    // Once the clock passes the old high-water mark, timestamps follow it again.
    let d = h.send(at(12_000), p(0), &[(p(1), bytes("d"))]).unwrap();
    assert_eq!(d, t(12_000));
    out.extend(drain(&mut h));
    let stamped: Vec<Timestamp> = data_of(&sent(&out)).iter().map(|pk| pk.header.ts).collect();
    assert_eq!(
        stamped,
        vec![a, b, c, d],
        "packets carry the returned timestamps"
    );
    assert!(stamped.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn all_messages_of_a_scattering_carry_one_timestamp_2_1() {
    let mut cfg = host_config(0, &[0], 4);
    cfg.mtu_payload = 8;
    cfg.message_len_max = 1_024;
    let mut h = Host::new(cfg, at(777));
    let scattering = [
        (p(1), patterned(20, 1)), // three fragments
        (p(2), bytes("x")),
        (p(3), Bytes::new()), // an empty message is still one packet
    ];
    let ts = h.send(at(777), p(0), &scattering).unwrap();
    assert_eq!(ts, t(777));
    let packets = data_of(&sent(&drain(&mut h)));
    assert_eq!(packets.len(), 5);
    for pk in &packets {
        assert_eq!(pk.header.ts, ts, "§2.1: one timestamp per scattering");
        assert_eq!(
            pk.header.barrier, ts,
            "§4.1: the barrier field starts at the timestamp"
        );
        assert_ne!(pk.header.flags & flags::BARRIER_VALID, 0);
        assert_eq!(pk.header.src, p(0));
    }
    let dsts: Vec<u32> = packets.iter().map(|pk| pk.header.dst.0).collect();
    assert_eq!(dsts, vec![1, 1, 1, 2, 3]);
    assert_eq!(h.stats().messages_sent, 3);
    assert_eq!(h.stats().packets_sent, 5);
}

/// The brief asked for `timestamp()` strictly above every issued timestamp; `Host::timestamp`
/// documents "never below any timestamp issued before", and two scatterings sent at one clock
/// reading share a timestamp (the reorder key's PSN keeps their send order). This checks `>=`.
#[test]
fn get_timestamp_is_never_below_an_issued_timestamp_2_1() {
    let mut h = Host::new(host_config(0, &[0], 2), at(5_000));
    let mut issued = Vec::new();
    for now in [5_000, 5_000, 9_000, 2_000, 9_500, 1] {
        issued.push(h.send(at(now), p(0), &[(p(1), bytes("m"))]).unwrap());
        for probe in [0, now, now.saturating_sub(1_000)] {
            let got = h.timestamp(at(probe));
            assert!(
                issued.iter().all(|&i| got >= i),
                "{got:?} below one of {issued:?}"
            );
        }
    }
    assert_eq!(
        issued[0], issued[1],
        "same clock reading, same timestamp (non-decreasing)"
    );
    assert_eq!(
        h.timestamp(at(20_000)),
        t(20_000),
        "and it follows the clock forward"
    );
}

// ---------------------------------------------------------------------------------------------
// §4.1: delivery below the barrier.
// ---------------------------------------------------------------------------------------------

#[test]
fn receiver_delivers_below_barrier_in_timestamp_then_sender_order_4_1() {
    let mut rx = Host::new(host_config(1, &[0], 4), at(1_000));
    for pk in [
        message(3, 0, 200, 0, b"c"),
        message(1, 0, 300, 1, b"d"), // out of order for sender 1
        message(2, 0, 100, 0, b"a"),
        message(1, 0, 200, 0, b"b"),
    ] {
        let out = feed(&mut rx, 1_000, UPLINK, pk);
        assert!(
            out.is_empty(),
            "nothing is delivered before a barrier arrives"
        );
    }
    assert_eq!(rx.reorder_len(), 4);
    let got = deliveries(&feed(&mut rx, 1_000, UPLINK, beacon(9, 300)));
    assert_eq!(
        summary(&got),
        vec![
            (100, 2, bytes("a")),
            (200, 1, bytes("b")), // tie at 200 broken by sender id
            (200, 3, bytes("c")),
        ]
    );
    assert!(got.iter().all(|d| d.barrier == t(300) && d.dst == p(0)));
    assert_eq!(rx.reorder_len(), 1, "ts 300 sits exactly at the barrier");
    let got = deliveries(&feed(&mut rx, 1_000, UPLINK, beacon(9, 301)));
    assert_eq!(summary(&got), vec![(300, 1, bytes("d"))]);
    assert_eq!(rx.stats().delivered, 4);
}

#[test]
fn message_at_exactly_the_barrier_waits_until_the_barrier_passes_it_4_1() {
    let mut rx = Host::new(host_config(1, &[0], 2), at(1_000));
    assert!(feed(&mut rx, 1_000, UPLINK, message(1, 0, 500, 0, b"m")).is_empty());
    assert!(deliveries(&feed(&mut rx, 1_000, UPLINK, beacon(9, 500))).is_empty());
    assert_eq!(rx.barrier(), Some(Barrier(t(500))));
    // A reordered, older beacon neither delivers nor lowers the barrier.
    assert!(deliveries(&feed(&mut rx, 1_000, UPLINK, beacon(9, 499))).is_empty());
    assert_eq!(rx.barrier(), Some(Barrier(t(500))));
    let got = deliveries(&feed(&mut rx, 1_000, UPLINK, beacon(9, 501)));
    assert_eq!(summary(&got), vec![(500, 1, bytes("m"))]);
    assert_eq!(got[0].barrier, t(501));
}

#[test]
fn a_best_effort_barrier_releasing_a_burst_delivers_it_over_several_inputs_4_1_4_2() {
    // A hot server's requests wait for the barrier; when it passes them all, one input must not
    // deliver them all (its beacons would wait behind the burst past the link timeout).
    let mut cfg = host_config(1, &[0], 2);
    cfg.deliver_burst_max = 16;
    let mut rx = Host::new(cfg, at(1_000));
    for i in 0..50u32 {
        let out = feed(
            &mut rx,
            1_000,
            UPLINK,
            message(1, 0, 100 + u64::from(i), i, b"r"),
        );
        assert!(deliveries(&out).is_empty(), "nothing below the barrier yet");
    }
    let first = deliveries(&feed(&mut rx, 1_000, UPLINK, beacon(9, 500)));
    assert_eq!(first.len(), 16, "one burst per input");
    // Released up to the first message held back, not to the barrier.
    assert!(first.iter().all(|d| d.barrier == t(116)), "{first:?}");
    let mut total = first.len();
    let mut inputs = 1;
    while total < 50 {
        let got = deliveries(&feed(&mut rx, 1_001 + inputs, UPLINK, beacon(9, 500)));
        assert!(got.len() <= 16);
        total += got.len();
        inputs += 1;
    }
    assert_eq!(
        (total, inputs),
        (50, 4),
        "the rest with the next inputs, in order"
    );
}

#[test]
fn sends_at_the_instant_of_a_burst_share_its_budget_4_2() {
    // An application that sends while it handles a burst's deliveries does so at that input's
    // instant; each send looks for deliveries again, and must not start a burst of its own (a
    // hot server delivered 6,977 messages in one simulated input, past its link timeout).
    let mut cfg = host_config(1, &[0], 2);
    cfg.deliver_burst_max = 16;
    let mut rx = Host::new(cfg, at(1_000));
    for i in 0..50u32 {
        feed(
            &mut rx,
            1_000,
            UPLINK,
            message(1, 0, 100 + u64::from(i), i, b"r"),
        );
    }
    let first = deliveries(&feed(&mut rx, 1_000, UPLINK, beacon(9, 500)));
    assert_eq!(first.len(), 16);
    for _ in 0..3 {
        rx.send(at(1_000), p(0), &[(p(1), bytes("reply"))]).unwrap();
        assert!(
            deliveries(&drain(&mut rx)).is_empty(),
            "the instant's budget is spent"
        );
    }
    rx.send(at(1_001), p(0), &[(p(1), bytes("later"))]).unwrap();
    assert_eq!(
        deliveries(&drain(&mut rx)).len(),
        16,
        "a later instant has a budget of its own"
    );
}

#[test]
fn a_keepalive_repeats_what_the_uplink_was_told_and_changes_nothing_4_2() {
    let mut h = Host::new(host_config(0, &[0], 2), at(0));
    assert_eq!(h.keepalive_beacon(), None, "nothing told yet");
    let out = tick(&mut h, 3_000);
    let told = match &sent(&out)[..] {
        [(_, Packet::Beacon(b))] => *b,
        other => panic!("one beacon at the first beacon time: {other:?}"),
    };
    let ka = h.keepalive_beacon().expect("told once");
    assert_eq!(
        (ka.barrier, ka.commit, ka.demand),
        (told.barrier, told.commit, false)
    );
    assert_eq!(ka.from, told.from);
    // A data packet tells a higher barrier: the keep-alive follows it, never above it.
    h.send(at(7_000), p(0), &[(p(1), bytes("x"))]).unwrap();
    let data = data_of(&sent(&drain(&mut h)));
    let ka = h.keepalive_beacon().expect("told");
    assert_eq!(Some(ka.barrier), data[0].header.barrier());
    assert!(drain(&mut h).is_empty(), "asking for one sends nothing");
}

#[test]
fn late_packet_below_barrier_is_dropped_and_nacked_4_1() {
    let mut tx = Host::new(host_config(0, &[0], 2), at(400));
    let mut rx = Host::new(host_config(1, &[1], 2), at(1_000));
    let on_time = tx.send(at(400), p(0), &[(p(1), bytes("on time"))]).unwrap();
    let late = tx.send(at(450), p(0), &[(p(1), bytes("late"))]).unwrap();
    let up = sent(&drain(&mut tx));
    assert_eq!(up.len(), 2);
    // The first arrives before the barrier passes it, the second after.
    assert!(feed(&mut rx, 1_000, UPLINK, up[0].1.clone()).is_empty());
    let got = deliveries(&feed(&mut rx, 1_000, UPLINK, beacon(9, 500)));
    assert_eq!(summary(&got), vec![(on_time.raw(), 0, bytes("on time"))]);
    let out = feed(&mut rx, 1_000, UPLINK, up[1].1.clone());
    assert!(
        deliveries(&out).is_empty(),
        "a late packet is never delivered"
    );
    let expected_nak = nak(NakReason::Late, 1, 0, 1, late.raw());
    assert_eq!(sent(&out), vec![(UPLINK, expected_nak.clone())]);
    assert_eq!(rx.stats().dropped_late, 1);
    assert_eq!(rx.stats().naks_sent, 1);
    assert_eq!(rx.reorder_len(), 0, "nor buffered");
    // onepipe_send_fail_callback(TS, dst, msg): the NAK raises SendFailed at the sender.
    let out = feed(&mut tx, 1_100, UPLINK, expected_nak);
    assert_eq!(
        failures(&out),
        vec![HostEvent::SendFailed {
            src: p(0),
            dst: p(1),
            ts: late,
            psn: Psn(1),
            reason: NakReason::Late,
        }]
    );
    assert_eq!(tx.stats().send_failed, 1);
}

#[test]
fn fragments_of_one_late_message_raise_one_nak_4_1() {
    let mut rx = Host::new(host_config(1, &[1], 2), at(1_000));
    feed(&mut rx, 1_000, UPLINK, beacon(9, 900));
    let mut naks = Vec::new();
    for frag in 0..3u16 {
        let fl = if frag == 2 { flags::END_OF_MESSAGE } else { 0 };
        let out = feed(
            &mut rx,
            1_000,
            UPLINK,
            fragment(0, 1, 800, 7 + u32::from(frag), frag, fl, b"f"),
        );
        naks.extend(sent(&out));
    }
    assert_eq!(
        naks,
        vec![(UPLINK, nak(NakReason::Late, 1, 0, 7, 800))],
        "one NAK, first PSN"
    );
    assert_eq!(rx.stats().dropped_late, 3);
}

#[test]
fn delivery_is_causal_and_the_next_send_is_stamped_above_it_4_1() {
    // Host 2's clock runs 600 ns ahead: its message carries a timestamp from host 0's future.
    let mut rack = Rack::new(&[&[0], &[1], &[2]], 0, &[0, 0, 600], SwitchMode::Chip);
    rack.run_until(100);
    let ts = rack.send(2, 2, &[(0, bytes("from the future")), (1, bytes("to one"))]);
    assert_eq!(ts, t(700));
    while rack.delivered[0].is_empty() {
        assert!(rack.step(10_000), "never delivered");
    }
    let d = rack.delivered[0][0].clone();
    assert_eq!(d.ts, ts);
    assert!(d.now_ts > d.ts, "§4.1 causality: {d:?}");
    assert!(
        rack.local(0) > at(700),
        "the barrier waited for host 0's own clock to pass 700"
    );
    // Right after delivering T, host 0's next send is stamped above T — even if its clock now
    // steps back below T.
    let next = rack.hosts[0]
        .send(at(50), p(0), &[(p(1), bytes("reply"))])
        .unwrap();
    assert!(
        next > d.ts,
        "next send {next:?} not above delivered {:?}",
        d.ts
    );
    rack.drain_host(0);
    rack.run_until(10_000);
    rack.assert_ordered_and_causal();
    assert_eq!(
        summary(&rack.delivered_to(1)),
        vec![(700, 2, bytes("to one")), (next.raw(), 0, bytes("reply")),]
    );
}

// ---------------------------------------------------------------------------------------------
// §6.1: fragmentation and reassembly.
// ---------------------------------------------------------------------------------------------

#[test]
fn long_message_is_fragmented_with_consecutive_psns_6_1() {
    let mut cfg = host_config(0, &[0], 3);
    cfg.mtu_payload = 100;
    let mut tx = Host::new(cfg, at(1_000));
    let long = patterned(350, 7);
    tx.send(
        at(1_000),
        p(0),
        &[(p(1), long.clone()), (p(2), patterned(50, 1))],
    )
    .unwrap();
    tx.send(at(1_001), p(0), &[(p(1), bytes("short"))]).unwrap();
    let packets = data_of(&sent(&drain(&mut tx)));
    let to_one: Vec<&DataPacket> = packets.iter().filter(|d| d.header.dst == p(1)).collect();
    assert_eq!(to_one.len(), 5);
    for (i, d) in to_one[..4].iter().enumerate() {
        assert_eq!(d.header.psn, Psn(i as u32), "consecutive PSNs");
        assert_eq!(d.header.frag, i as u16);
        assert_eq!(
            d.header.end_of_message(),
            i == 3,
            "END_OF_MESSAGE on the last only"
        );
        let lo = i * 100;
        assert_eq!(d.payload, long.slice(lo..(lo + 100).min(350)));
    }
    // The next message to the same receiver continues the PSN sequence.
    assert_eq!(to_one[4].header.psn, Psn(4));
    assert_eq!(to_one[4].header.frag, 0);
    assert!(to_one[4].header.end_of_message());
    // PSNs are per (src, dst) pair.
    let to_two: Vec<&DataPacket> = packets.iter().filter(|d| d.header.dst == p(2)).collect();
    assert_eq!(to_two.len(), 1);
    assert_eq!(to_two[0].header.psn, Psn(0));
}

#[test]
fn fragments_are_reassembled_byte_for_byte_even_in_reverse_order_6_1() {
    let mut cfg = host_config(0, &[0], 2);
    cfg.mtu_payload = 100;
    let mut tx = Host::new(cfg, at(1_000));
    let first = patterned(350, 3);
    let second = patterned(201, 9);
    let ts0 = tx.send(at(1_000), p(0), &[(p(1), first.clone())]).unwrap();
    let ts1 = tx.send(at(1_001), p(0), &[(p(1), second.clone())]).unwrap();
    let mut packets = sent(&drain(&mut tx));
    assert_eq!(packets.len(), 4 + 3);
    packets.reverse();
    let mut rx = Host::new(host_config(1, &[1], 2), at(2_000));
    for (_, mut pk) in packets {
        // As if forwarded before the switch knew a barrier: only the beacon below releases them.
        if let Packet::Data(d) = &mut pk {
            d.header.flags &= !flags::BARRIER_VALID;
        }
        assert!(deliveries(&feed(&mut rx, 2_000, UPLINK, pk)).is_empty());
    }
    let got = deliveries(&feed(&mut rx, 2_000, UPLINK, beacon(9, 1_002)));
    assert_eq!(
        summary(&got),
        vec![(ts0.raw(), 0, first), (ts1.raw(), 0, second)]
    );
    assert_eq!((got[0].psn, got[1].psn), (Psn(0), Psn(4)));
    assert_eq!(rx.stats().dropped_invalid, 0);
}

#[test]
fn partial_message_passed_by_the_barrier_is_dropped_with_an_incomplete_nak_6_1() {
    let mut cfg = host_config(0, &[0], 2);
    cfg.mtu_payload = 100;
    let mut tx = Host::new(cfg, at(1_000));
    let ts = tx
        .send(at(1_000), p(0), &[(p(1), patterned(350, 5))])
        .unwrap();
    let packets = sent(&drain(&mut tx));
    let mut rx = Host::new(host_config(1, &[1], 2), at(2_000));
    for i in [0, 1, 3] {
        assert!(feed(&mut rx, 2_000, UPLINK, packets[i].1.clone()).is_empty());
    }
    let out = feed(&mut rx, 2_000, UPLINK, beacon(9, 1_001));
    assert!(deliveries(&out).is_empty());
    let incomplete = nak(NakReason::Incomplete, 1, 0, 0, ts.raw());
    assert_eq!(sent(&out), vec![(UPLINK, incomplete.clone())]);
    assert_eq!(rx.stats().dropped_incomplete, 1);
    // The straggler is late now; its message was NAKed already, so no second NAK.
    let out = feed(&mut rx, 2_000, UPLINK, packets[2].1.clone());
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(rx.stats().dropped_late, 1);
    let out = feed(&mut tx, 2_100, UPLINK, incomplete);
    assert_eq!(
        failures(&out),
        vec![HostEvent::SendFailed {
            src: p(0),
            dst: p(1),
            ts,
            psn: Psn(0),
            reason: NakReason::Incomplete,
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// §2.1, §6.1: several processes per host.
// ---------------------------------------------------------------------------------------------

#[test]
fn message_between_local_processes_never_leaves_the_host_and_keeps_total_order_6_1() {
    let mut rack = Rack::new(&[&[0, 1], &[2]], 0, &[0, 0], SwitchMode::Chip);
    rack.run_until(100);
    rack.send(1, 2, &[(1, bytes("remote 100"))]);
    rack.run_until(200);
    let local_ts = rack.send(0, 0, &[(1, bytes("local 200"))]);
    assert!(
        rack.uplink.iter().all(|(_, h, _)| *h != 0),
        "a local message left the host: {:?}",
        rack.uplink
    );
    rack.send(1, 2, &[(1, bytes("remote 200"))]);
    rack.run_until(5_000);
    assert_eq!(local_ts, t(200));
    assert_eq!(
        summary(&rack.delivered_to(1)),
        vec![
            (100, 2, bytes("remote 100")),
            (200, 0, bytes("local 200")), // tie with remote 200: lower sender first
            (200, 2, bytes("remote 200")),
        ]
    );
    assert!(!rack
        .uplink
        .iter()
        .any(|(_, h, pk)| *h == 0 && matches!(pk, Packet::Data(_))));
    assert_eq!(rack.hosts[0].stats().messages_sent, 1);
    assert_eq!(rack.hosts[0].stats().packets_sent, 0);
    rack.assert_ordered_and_causal();
}

// ---------------------------------------------------------------------------------------------
// §4.2: host beacons.
// ---------------------------------------------------------------------------------------------

#[test]
fn idle_host_beacons_at_synchronized_times_carrying_the_beacon_time_4_2() {
    // Two hosts with the same clock, started at different instants, agree on beacon times.
    let mut a = Host::new(host_config(0, &[0], 2), at(1_234));
    let mut b = Host::new(host_config(1, &[1], 2), at(1_999));
    assert_eq!(a.poll_timeout(), Some(at(2_000)));
    assert_eq!(b.poll_timeout(), Some(at(2_000)));
    assert_eq!(sent(&tick(&mut a, 2_000)), vec![(UPLINK, beacon(0, 2_000))]);
    assert_eq!(sent(&tick(&mut b, 2_000)), vec![(UPLINK, beacon(1, 2_000))]);
    assert_eq!(a.poll_timeout(), Some(at(3_000)));
    // A timer that fires early does nothing.
    assert!(tick(&mut a, 2_500).is_empty());
    assert_eq!(a.poll_timeout(), Some(at(3_000)));
    // A timer that fires late still reports the beacon time, not the clock reading.
    assert_eq!(sent(&tick(&mut b, 3_040)), vec![(UPLINK, beacon(1, 3_000))]);
    assert_eq!(b.poll_timeout(), Some(at(4_000)));
    assert_eq!(a.stats().beacons_sent, 1);
    assert_eq!(b.stats().beacons_sent, 2);
}

#[test]
fn data_carrying_a_barrier_past_the_beacon_time_suppresses_the_beacon_4_2() {
    let mut h = Host::new(host_config(0, &[0], 2), at(0));
    // Sent at the beacon time, before the timer is handled: the data's barrier (1000) already
    // tells the switch everything the beacon would.
    h.send(at(1_000), p(0), &[(p(1), bytes("busy"))]).unwrap();
    drain(&mut h);
    assert!(sent(&tick(&mut h, 1_000)).is_empty());
    // Sent after the previous beacon time but before this one: its barrier 1500 is below 2000.
    h.send(at(1_500), p(0), &[(p(1), bytes("earlier"))])
        .unwrap();
    drain(&mut h);
    assert_eq!(sent(&tick(&mut h, 2_000)), vec![(UPLINK, beacon(0, 2_000))]);
    // A late timer: data at 3010 carried barrier 3010 >= beacon time 3000.
    h.send(at(3_010), p(0), &[(p(1), bytes("late timer"))])
        .unwrap();
    drain(&mut h);
    assert!(sent(&tick(&mut h, 3_020)).is_empty());
    // Idle again.
    assert_eq!(sent(&tick(&mut h, 4_000)), vec![(UPLINK, beacon(0, 4_000))]);
    assert_eq!(h.stats().beacons_sent, 2);
}

#[test]
fn beacon_always_sends_a_beacon_every_interval_6_2_2() {
    let mut cfg = host_config(0, &[0], 2);
    cfg.beacon_always = true;
    let mut h = Host::new(cfg, at(0));
    for k in 1..=4u64 {
        h.send(at(k * 1_000), p(0), &[(p(1), bytes("busy"))])
            .unwrap();
        drain(&mut h);
        assert_eq!(
            sent(&tick(&mut h, k * 1_000)),
            vec![(UPLINK, beacon(0, k * 1_000))]
        );
    }
    assert_eq!(h.stats().beacons_sent, 4);
}

/// The beacons among `outputs`: (barrier, demand).
fn beacon_flags<E, M>(outputs: &[Output<Packet, E, M>]) -> Vec<(u64, bool)> {
    sent(outputs)
        .into_iter()
        .filter_map(|(_, pk)| match pk {
            Packet::Beacon(b) => Some((b.barrier.raw(), b.demand)),
            _ => None,
        })
        .collect()
}

/// Every beacon `h` sends from now until `until` (ns), firing its timer when due.
fn beacons_until(h: &mut Host, until: u64) -> Vec<(u64, bool)> {
    let mut out = Vec::new();
    while let Some(due) = h.poll_timeout().filter(|d| *d < at(until)) {
        out.extend(beacon_flags(&tick(h, due.0)));
    }
    out
}

/// Issue 37: a host that has just sent, or holds a message for reordering, announces its need
/// at once (a beacon with `demand`, never below what its data already told the link), then
/// beacons at the fast interval's ticks while the need lasts — for `beacon_fast_hold_ns`
/// after a send, until the held message is delivered — and then only at the regular times.
#[test]
fn a_host_that_sent_or_waits_asks_for_demand_and_beacons_fast_then_falls_back_4_2() {
    let mut cfg = host_config(0, &[0], 2);
    cfg.beacon_fast_interval_ns = 100;
    cfg.beacon_fast_hold_ns = 500;
    let mut h = Host::new(cfg, at(0));
    // Idle: the regular schedule only, no demand.
    assert_eq!(h.poll_timeout(), Some(at(1_000)));
    assert_eq!(beacon_flags(&tick(&mut h, 1_000)), [(1_000, false)]);
    // A send at 1050: its data carries barrier 1050; the announcement repeats it, with demand.
    h.send(at(1_050), p(0), &[(p(1), bytes("m"))]).unwrap();
    drain(&mut h);
    let due = h.poll_timeout().unwrap();
    assert!(due <= at(1_050), "the announcement is due at once: {due:?}");
    assert_eq!(beacon_flags(&tick(&mut h, 1_050)), [(1_050, true)]);
    // Then every fast tick until the hold ends at 1550, then the regular time without demand.
    let fast = beacons_until(&mut h, 2_000);
    assert_eq!(fast, [1_100, 1_200, 1_300, 1_400, 1_500].map(|b| (b, true)));
    assert_eq!(h.poll_timeout(), Some(at(2_000)));
    assert_eq!(beacon_flags(&tick(&mut h, 2_000)), [(2_000, false)]);
    assert_eq!(h.stats().beacons_fast, 6);
    // A message held for the barrier (its timestamp 2500 above the barrier): announced at
    // once, then fast beacons until a barrier delivers it.
    let out = h_handle(&mut h, 2_010, message(1, 0, 2_500, 0, b"held"));
    assert_eq!(beacon_flags(&out), [(2_000, true)]);
    assert_eq!(beacons_until(&mut h, 2_150), [(2_100, true)]);
    let out = h_handle(&mut h, 2_150, beacon(9, 2_600));
    assert_eq!(deliveries(&out).len(), 1);
    assert_eq!(
        h.poll_timeout(),
        Some(at(3_000)),
        "nothing held, nothing sent: regular"
    );
    assert_eq!(beacon_flags(&tick(&mut h, 3_000)), [(3_000, false)]);
}

/// Hands `h` a packet on its uplink at `now` (ns) and drains it.
fn h_handle(h: &mut Host, now: u64, packet: Packet) -> Vec<Out<Host>> {
    h.handle(
        at(now),
        Input::Packet {
            port: UPLINK,
            packet,
        },
    );
    drain(h)
}

/// Issue 37: an idle host whose switch says someone waits ([`Beacon::demand`]) beacons at the
/// fast interval for the hold after the last such beacon, without asking for demand itself
/// (its own flag says only its own need, so no demand echoes for ever); with fast beacons off
/// it ignores the flag.
#[test]
fn an_idle_host_told_of_demand_beacons_fast_for_the_hold_without_echoing_it_4_2() {
    let demand = |barrier: u64| {
        Packet::Beacon(Beacon {
            from: NodeId(9),
            barrier: t(barrier),
            commit: t(barrier),
            demand: true,
        })
    };
    let mut cfg = host_config(0, &[0], 2);
    cfg.beacon_fast_interval_ns = 100;
    cfg.beacon_fast_hold_ns = 500;
    let mut h = Host::new(cfg.clone(), at(0));
    assert_eq!(beacon_flags(&tick(&mut h, 1_000)), [(1_000, false)]);
    // Told at 1020: a beacon at once (its barrier, the latest tick, is news), then the ticks.
    let out = h_handle(&mut h, 1_020, demand(900));
    assert!(beacon_flags(&out).is_empty(), "1000 was already told");
    let fast = beacons_until(&mut h, 2_000);
    assert_eq!(
        fast,
        [1_100, 1_200, 1_300, 1_400, 1_500].map(|b| (b, false))
    );
    assert_eq!(beacon_flags(&tick(&mut h, 2_000)), [(2_000, false)]);
    // Off: the flag changes nothing.
    cfg.beacon_fast_interval_ns = 0;
    let mut off = Host::new(cfg, at(0));
    assert_eq!(beacon_flags(&tick(&mut off, 1_000)), [(1_000, false)]);
    h_handle(&mut off, 1_020, demand(900));
    assert_eq!(off.poll_timeout(), Some(at(2_000)));
}

#[test]
fn without_barriers_on_data_a_busy_uplink_still_gets_beacons_6_2_2() {
    let mut cfg = host_config(0, &[0], 2);
    cfg.barrier_on_data = false;
    let mut h = Host::new(cfg, at(0));
    h.send(at(1_000), p(0), &[(p(1), bytes("busy"))]).unwrap();
    let up = data_of(&sent(&drain(&mut h)));
    assert_eq!(up[0].header.barrier(), None, "BARRIER_VALID clear");
    assert_eq!(sent(&tick(&mut h, 1_000)), vec![(UPLINK, beacon(0, 1_000))]);
}
