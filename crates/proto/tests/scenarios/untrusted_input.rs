//! Distrusting the wire (STYLE §7), and the 48-bit timestamp wrap (§6.1, PAWS).

use super::*;

// ---------------------------------------------------------------------------------------------
// STYLE §7: distrust the wire.
// ---------------------------------------------------------------------------------------------

/// Feeds `pk` on `port` and checks it was dropped as invalid and produced nothing.
fn assert_host_drops(h: &mut Host, port: PortId, pk: Packet) {
    let before = h.stats().dropped_invalid;
    let out = feed(h, 1_000, port, pk.clone());
    assert!(out.is_empty(), "{pk:?} produced {out:?}");
    assert_eq!(h.stats().dropped_invalid, before + 1, "{pk:?} not counted");
}

#[test]
fn host_drops_and_counts_garbage_without_panicking_7() {
    let mut cfg = host_config(0, &[0, 1], 4);
    cfg.mtu_payload = 100;
    cfg.message_len_max = 400; // at most 4 fragments
    let mut h = Host::new(cfg, at(1_000));
    // Misaddressed and unknown senders.
    assert_host_drops(
        &mut h,
        UPLINK,
        message(2, 3, 500, 0, b"dst on another host"),
    );
    assert_host_drops(&mut h, UPLINK, message(2, 999, 500, 0, b"dst out of range"));
    assert_host_drops(&mut h, UPLINK, message(4, 0, 500, 0, b"src == senders_max"));
    assert_host_drops(&mut h, UPLINK, message(u32::MAX, 0, 500, 0, b"src way out"));
    // The wrong port.
    assert_host_drops(&mut h, PortId(1), message(2, 0, 500, 0, b"wrong port"));
    assert_host_drops(&mut h, PortId(7), beacon(9, 10_000));
    assert_eq!(h.barrier(), None, "a beacon on a wrong port is ignored");
    // Duplicates (same sender, same PSN) are dropped before anything else and counted apart:
    // the network duplicating a packet is not malformed input.
    let dups = h.stats().dropped_duplicate;
    assert!(feed(&mut h, 1_000, UPLINK, message(2, 0, 500, 0, b"once")).is_empty());
    assert!(feed(&mut h, 1_000, UPLINK, message(2, 0, 500, 0, b"once")).is_empty());
    assert!(feed(&mut h, 1_000, UPLINK, fragment(2, 1, 500, 10, 0, 0, b"f0")).is_empty());
    assert!(feed(&mut h, 1_000, UPLINK, fragment(2, 1, 500, 10, 0, 0, b"f0")).is_empty());
    assert_eq!(h.stats().dropped_duplicate, dups + 2);
    // Inconsistent fragment headers of message psn 10: another timestamp; past the last.
    assert_host_drops(&mut h, UPLINK, fragment(2, 1, 501, 11, 1, 0, b"f1"));
    assert!(feed(
        &mut h,
        1_000,
        UPLINK,
        fragment(2, 1, 500, 12, 2, flags::END_OF_MESSAGE, b"f2")
    )
    .is_empty());
    assert_host_drops(&mut h, UPLINK, fragment(2, 1, 500, 13, 3, 0, b"f3"));
    // END_OF_MESSAGE below a fragment already held (message psn 20).
    assert!(feed(&mut h, 1_000, UPLINK, fragment(3, 0, 500, 22, 2, 0, b"g2")).is_empty());
    assert_host_drops(
        &mut h,
        UPLINK,
        fragment(3, 0, 500, 21, 1, flags::END_OF_MESSAGE, b"g1"),
    );
    // NAKs for processes not on this host, or from processes that do not exist.
    assert_host_drops(&mut h, UPLINK, nak(NakReason::Late, 2, 3, 0, 500));
    assert_host_drops(&mut h, UPLINK, nak(NakReason::Late, 2, 77, 0, 500));
    assert_host_drops(&mut h, UPLINK, nak(NakReason::Late, 9, 0, 0, 500));
    assert_eq!(h.stats().send_failed, 0);
    // The one valid message is delivered exactly once; the two partial ones are given up.
    let out = feed(&mut h, 1_000, UPLINK, beacon(9, 600));
    assert_eq!(summary(&deliveries(&out)), vec![(500, 2, bytes("once"))]);
    assert_eq!(h.stats().dropped_incomplete, 2);
    assert_eq!(h.reorder_len(), 0);
}

/// A fragment whose index exceeds what `message_len_max` allows is dropped as invalid, and should
/// leave no trace: no NAK when the barrier passes its timestamp, no reassembly slot held.
#[test]
fn invalid_fragment_index_leaves_no_partial_behind_7() {
    let mut cfg = host_config(0, &[0], 2);
    cfg.mtu_payload = 100;
    cfg.message_len_max = 400; // at most 4 fragments
    let garbage = fragment(1, 0, 500, 9, 9, 0, b"frag 9 of at most 4");
    // No NAK for a message that was never accepted.
    let mut h = Host::new(cfg.clone(), at(1_000));
    assert_host_drops(&mut h, UPLINK, garbage.clone());
    let out = feed(&mut h, 1_000, UPLINK, beacon(9, 600));
    assert!(out.is_empty(), "spurious NAK: {out:?}");
    assert_eq!(h.stats().dropped_incomplete, 0);
    // No reassembly slot taken from legitimate messages.
    cfg.reassembly_len_max = 1;
    let mut h = Host::new(cfg, at(1_000));
    assert_host_drops(&mut h, UPLINK, garbage);
    let out = feed(&mut h, 1_000, UPLINK, fragment(1, 0, 510, 20, 0, 0, b"a"));
    assert!(
        out.is_empty(),
        "the rejected fragment holds the only slot: {out:?}"
    );
    feed(
        &mut h,
        1_000,
        UPLINK,
        fragment(1, 0, 510, 21, 1, flags::END_OF_MESSAGE, b"b"),
    );
    let got = deliveries(&feed(&mut h, 1_000, UPLINK, beacon(9, 600)));
    assert_eq!(summary(&got), vec![(510, 1, bytes("ab"))]);
}

#[test]
fn switch_drops_and_counts_garbage_without_panicking_7() {
    // Process 2 routes to a port that does not exist; processes 3.. are unroutable.
    let router: Arc<dyn Router> = Arc::new(ProcRouter {
        port_of: vec![PortId(0), PortId(1), PortId(5)],
    });
    for mode in [SwitchMode::Chip, SwitchMode::Cpu, SwitchMode::Host] {
        let mut sw = Switch::new(switch_config(mode, 2, 2), Some(router.clone()), at(0));
        let garbage = [
            (PortId(2), message(0, 1, 500, 0, b"input port out of range")),
            (PortId(9), beacon(0, 500)),
            (PortId(u32::MAX), nak(NakReason::Late, 0, 1, 0, 5)),
            (PortId(0), message(0, 7, 500, 0, b"unroutable")),
            (
                PortId(0),
                message(0, 2, 500, 0, b"routed to a missing port"),
            ),
            (PortId(1), nak(NakReason::Late, 1, 9, 0, 500)),
        ];
        for (i, (port, pk)) in garbage.into_iter().enumerate() {
            let out = feed(&mut sw, 100, port, pk.clone());
            assert!(out.is_empty(), "{mode}: {pk:?} produced {out:?}");
            assert_eq!(
                sw.stats().dropped,
                i as u64 + 1,
                "{mode}: {pk:?} not counted"
            );
        }
        assert_eq!(sw.stats().forwarded, 0);
        assert_eq!(
            sw.stats().beacons_received,
            0,
            "{mode}: a beacon on a bad port counted"
        );
        assert_eq!(sw.register(PortId(1)), None);
        assert_eq!(sw.register(PortId(9)), None);
    }
    // No router at all (a live aggregator daemon): data and NAKs are dropped.
    let mut sw = Switch::new(switch_config(SwitchMode::Cpu, 1, 1), None, at(0));
    assert!(feed(&mut sw, 10, PortId(0), message(0, 0, 5, 0, b"")).is_empty());
    assert!(feed(&mut sw, 10, PortId(0), nak(NakReason::Late, 0, 0, 0, 5)).is_empty());
    assert_eq!(sw.stats().dropped, 2);
    // A CPU that is behind drops beacons beyond `pending_max`.
    let mut cfg = switch_config(SwitchMode::Cpu, 1, 1);
    cfg.pending_max = 2;
    let mut sw = Switch::new(cfg, None, at(0));
    for b in [10, 20, 30] {
        assert!(feed(&mut sw, 10, PortId(0), beacon(0, b)).is_empty());
    }
    assert_eq!(sw.stats().dropped, 1);
    assert_eq!(
        beacons_sent(&tick(&mut sw, INTERVAL_NS)),
        vec![(PortId(0), 20)]
    );
}

/// Clock reading the fuzz scenarios start at; packet timestamps are shaped around it.
const FUZZ_BASE_NS: u64 = 1_000_000;

fn put(b: &mut [u8], offset: usize, v: &[u8]) {
    b[offset..offset + v.len()].copy_from_slice(v);
}

fn u48(ns: u64) -> [u8; 6] {
    let x = (ns & TIMESTAMP_MASK).to_be_bytes();
    [x[2], x[3], x[4], x[5], x[6], x[7]]
}

/// Wire bytes for `Packet::decode`: pure noise, or random bytes under a header shaped so that it
/// usually decodes and addresses small process ids and timestamps near the host's clock.
fn wire_bytes() -> impl Strategy<Value = Vec<u8>> {
    (
        0u8..5,
        proptest::collection::vec(any::<u8>(), 0..80),
        (0u32..5, 0u32..3, 0u16..3, 0u8..8, 0u32..4),
        (0u64..8_000, 0u64..8_000),
    )
        .prop_map(|(kind, mut b, (src, dst, frag, fl, psn), (ts, bar))| {
            let ts = FUZZ_BASE_NS + ts - 4_000;
            let bar = FUZZ_BASE_NS + bar - 4_000;
            match kind {
                1 => {
                    b.resize(b.len().max(36), 0);
                    b[0] = 1;
                    b[1] = fl;
                    put(&mut b, 2, &frag.to_be_bytes());
                    put(&mut b, 4, &u48(ts));
                    put(&mut b, 10, &u48(bar));
                    put(&mut b, 22, &(psn + u32::from(frag)).to_be_bytes());
                    put(&mut b, 26, &src.to_be_bytes());
                    put(&mut b, 30, &dst.to_be_bytes());
                    let len = (b.len() - 36) as u16;
                    put(&mut b, 34, &len.to_be_bytes());
                }
                2 => {
                    b.resize(b.len().max(20), 0);
                    put(&mut b, 0, &[2, 0, 0, 0]);
                    put(&mut b, 8, &u48(bar));
                }
                3 => {
                    b.resize(b.len().max(24), 0);
                    put(&mut b, 0, &[3, 1 + fl % 3]);
                    put(&mut b, 4, &src.to_be_bytes());
                    put(&mut b, 8, &dst.to_be_bytes());
                    put(&mut b, 12, &psn.to_be_bytes());
                    put(&mut b, 16, &u48(ts));
                }
                4 => b.insert(0, 1 + fl % 3), // a valid opcode over noise
                _ => {}
            }
            b
        })
}

/// One fuzz step: (what, wire bytes, clock step in ns, possibly negative).
fn fuzz_ops() -> impl Strategy<Value = Vec<(u8, Vec<u8>, i64)>> {
    proptest::collection::vec((0u8..12, wire_bytes(), -500i64..2_000), 1..80)
}

fn fuzz_host() -> Host {
    let mut cfg = host_config(0, &[0, 1], 4);
    cfg.mtu_payload = 16;
    cfg.message_len_max = 64;
    cfg.reorder_len_max = 8;
    cfg.reassembly_len_max = 4;
    Host::new(cfg, at(FUZZ_BASE_NS))
}

fn fuzz_switch(mode: SwitchMode) -> Switch {
    let router: Arc<dyn Router> = Arc::new(ProcRouter {
        port_of: vec![PortId(0), PortId(1), PortId(5)],
    });
    let mut cfg = switch_config(mode, 2, 2);
    cfg.beacon_delay_ns = 300;
    cfg.pending_max = 8;
    Switch::new(cfg, Some(router), at(FUZZ_BASE_NS))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// STYLE §7 and §4.1: any sequence of decoded packets, timeouts, sends and clock steps leaves
    /// the host standing, its barrier never moves backwards, and it only delivers what the
    /// barrier admits to its own processes.
    #[test]
    fn host_survives_arbitrary_packets_and_its_barrier_never_moves_back_7(ops in fuzz_ops()) {
        let mut h = fuzz_host();
        let mut now = FUZZ_BASE_NS;
        for (what, raw, dt) in ops {
            now = now.saturating_add_signed(dt);
            let before = h.barrier();
            match what {
                0..=7 => {
                    let Ok((packet, _)) = Packet::decode(&raw) else { continue };
                    let port = if what == 7 { PortId(1) } else { UPLINK };
                    h.handle(at(now), Input::Packet { port, packet });
                }
                8 | 9 => h.handle(at(now), Input::Timeout),
                10 => {
                    let dst = p(u32::from(raw.first().copied().unwrap_or(0) % 5));
                    let _ = h.send(at(now), p(0), &[(dst, Bytes::from(raw))]);
                }
                _ => {
                    now = now.max(h.poll_timeout().expect("hosts always have a beacon timer").as_nanos());
                    h.handle(at(now), Input::Timeout);
                }
            }
            let after = h.barrier();
            if let Some(b) = before {
                prop_assert!(after.is_some_and(|a| a >= b), "barrier {before:?} -> {after:?}");
            }
            for o in drain(&mut h) {
                match o {
                    Output::Send { port, .. } => prop_assert_eq!(port, UPLINK),
                    Output::Event(HostEvent::Deliver(d)) => {
                        prop_assert!(d.dst == p(0) || d.dst == p(1));
                        prop_assert!(d.ts < d.barrier);
                        let released = if d.reliable { h.commit_barrier() } else { after };
                        prop_assert!(released.is_some_and(|a| a.admits(d.ts)));
                    }
                    Output::Event(HostEvent::SendFailed { src, .. })
                    | Output::Event(HostEvent::ReliableSent { src, .. }) => {
                        prop_assert!(src == p(0) || src == p(1));
                    }
                    Output::Event(e) => prop_assert!(false, "unexpected {:?}", e),
                    // No controller talks to it: only its own failure detection reports.
                    Output::Mgmt { msg, .. } => {
                        prop_assert!(
                            matches!(msg, Mgmt::Ctrl(CtrlMsg::LinkDown { .. })),
                            "{:?}",
                            msg
                        );
                    }
                }
            }
        }
    }

    /// Per-peer state made lazily (`HostConfig::senders_stored`, for ids kept for §5.2 rejoins)
    /// changes memory, never an answer: a host that stores nothing up front and one that stores
    /// every sender at once, fed the same arbitrary inputs, produce the same outputs.
    #[test]
    fn per_peer_state_made_on_first_use_changes_no_output(ops in fuzz_ops(), stored in 0u32..4) {
        let mut full = fuzz_host();
        let mut lazy = {
            let mut cfg = full.config().clone();
            cfg.senders_stored = stored;
            Host::new(cfg, at(FUZZ_BASE_NS))
        };
        let mut now = FUZZ_BASE_NS;
        for (what, raw, dt) in ops {
            now = now.saturating_add_signed(dt);
            for h in [&mut full, &mut lazy] {
                match what {
                    0..=7 => {
                        let Ok((packet, _)) = Packet::decode(&raw) else { continue };
                        h.handle(at(now), Input::Packet { port: UPLINK, packet });
                    }
                    8 | 9 => h.handle(at(now), Input::Timeout),
                    _ => {
                        let dst = p(u32::from(raw.first().copied().unwrap_or(0) % 5));
                        let _ = h.send(at(now), p(0), &[(dst, Bytes::from(raw.clone()))]);
                    }
                }
            }
            prop_assert_eq!(drain(&mut full), drain(&mut lazy));
            prop_assert_eq!(full.barrier(), lazy.barrier());
            prop_assert_eq!(full.poll_timeout(), lazy.poll_timeout());
        }
        prop_assert_eq!(full.stats(), lazy.stats());
    }

    /// STYLE §7 and Eq. 4.1: the same for a switch in any mode; its output barrier never moves
    /// backwards (the switch also asserts this itself).
    #[test]
    fn switch_survives_arbitrary_packets_and_its_barrier_never_moves_back_7(
        ops in fuzz_ops(),
        mode in prop_oneof![Just(SwitchMode::Chip), Just(SwitchMode::Cpu), Just(SwitchMode::Host)],
    ) {
        let mut sw = fuzz_switch(mode);
        let mut now = FUZZ_BASE_NS;
        for (what, raw, dt) in ops {
            now = now.saturating_add_signed(dt);
            let before = sw.barrier();
            if what < 9 {
                let Ok((packet, _)) = Packet::decode(&raw) else { continue };
                sw.handle(at(now), Input::Packet { port: PortId(u32::from(what % 3)), packet });
            } else {
                if what == 11 {
                    now = now.max(sw.poll_timeout().expect("switches always have a timer").as_nanos());
                }
                sw.handle(at(now), Input::Timeout);
            }
            let after = sw.barrier();
            if let Some(b) = before {
                prop_assert!(after.is_some_and(|a| a >= b), "barrier {before:?} -> {after:?}");
            }
            for o in drain(&mut sw) {
                match o {
                    Output::Send { port, .. } => {
                        prop_assert!(port.index() < 2, "sent on a port that does not exist");
                    }
                    Output::Mgmt { .. } => {}
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// §6.1: the 48-bit timestamp wraps (PAWS).
// ---------------------------------------------------------------------------------------------

#[test]
fn messages_across_the_2_pow_48_wrap_are_delivered_in_order_6_1_paws() {
    let wrap: u64 = 1 << 48;
    let start = wrap - 1_000_000; // 1 ms before the wrap
    let mut rack = Rack::new(&[&[0], &[1], &[2]], start, &[0, 0, 0], SwitchMode::Chip);
    let mut sent_ts = Vec::new();
    for k in 0..12u64 {
        // 800 µs .. 1.35 ms after the start: straddles the wrap at 1 ms.
        rack.run_until(start + 800_000 + k * 50_000);
        let h = (k % 3) as usize;
        let others: Vec<(u32, Bytes)> = (0..3u32)
            .filter(|&d| d as usize != h)
            .map(|d| (d, bytes(&format!("m{k}"))))
            .collect();
        sent_ts.push(rack.send(h, h as u32, &others));
    }
    rack.run_until(start + 1_400_000);
    assert!(
        sent_ts.iter().any(|ts| ts.raw() > wrap - 300_000),
        "some before the wrap"
    );
    assert!(
        sent_ts.iter().any(|ts| ts.raw() < 400_000),
        "some after the wrap"
    );
    assert!(
        sent_ts.windows(2).all(|w| w[0] < w[1]),
        "wrap-safe order: {sent_ts:?}"
    );
    for dst in 0..3u32 {
        let got: Vec<String> = rack
            .delivered_to(dst)
            .iter()
            .map(|d| String::from_utf8(d.payload.to_vec()).unwrap())
            .collect();
        let expected: Vec<String> = (0..12u64)
            .filter(|k| k % 3 != u64::from(dst))
            .map(|k| format!("m{k}"))
            .collect();
        assert_eq!(got, expected, "process {dst}");
    }
    rack.assert_ordered_and_causal();
    for h in &rack.hosts {
        assert_eq!(h.stats().dropped_late, 0);
        assert_eq!(h.reorder_len(), 0);
    }
}
