//! The counters and levels kept for live metrics (docs/LIVE.md, "Metrics and status"): how long
//! messages wait in the reorder buffer (§4.1), late drops by sender (§4.1), the gaps between
//! barrier updates on an input link (§4.2) and the reliable sender's window (§5.1, §6.1). They
//! change nothing in the protocol; these scenarios check what they count.

use super::*;
use onepipe_proto::gaps::BarrierGaps;

#[test]
fn a_held_message_counts_its_hold_from_arrival_to_delivery_4_1() {
    let mut rx = Host::new(host_config(1, &[1], 3), at(1_000));
    // No barrier yet: both are held.
    feed(&mut rx, 1_000, UPLINK, message(0, 1, 900, 0, b"a"));
    feed(&mut rx, 1_300, UPLINK, message(2, 1, 950, 0, b"b"));
    assert_eq!((rx.reorder_len(), rx.reorder_len_peak()), (2, 2));
    assert_eq!(rx.stats().reorder_holds, 0, "nothing delivered yet");
    let got = deliveries(&feed(&mut rx, 1_700, UPLINK, beacon(9, 1_000)));
    assert_eq!(got.len(), 2);
    let s = rx.stats();
    assert_eq!(s.reorder_holds, 2);
    assert_eq!(s.reorder_hold_ns, 700 + 400, "from each arrival to 1,700");
    assert_eq!(s.reorder_hold_ns_max, 700);
    assert_eq!((rx.reorder_len(), rx.reorder_len_peak()), (0, 2));
}

#[test]
fn a_late_packet_counts_against_its_sender_4_1() {
    let mut rx = Host::new(host_config(1, &[1], 4), at(1_000));
    feed(&mut rx, 1_000, UPLINK, beacon(9, 900));
    feed(&mut rx, 1_000, UPLINK, message(0, 1, 800, 0, b"late"));
    feed(&mut rx, 1_000, UPLINK, message(2, 1, 850, 0, b"late"));
    feed(&mut rx, 1_000, UPLINK, message(2, 1, 860, 1, b"late"));
    feed(&mut rx, 1_000, UPLINK, message(3, 1, 950, 0, b"on time"));
    assert_eq!(rx.stats().dropped_late, 3);
    assert_eq!(
        rx.stats().dropped_late_by_sender,
        BTreeMap::from([(p(0), 1), (p(2), 2)])
    );
    // A sender outside `senders_max` is dropped as invalid before lateness is looked at: no
    // stranger's id ever becomes a key.
    let invalid = rx.stats().dropped_invalid;
    feed(&mut rx, 1_000, UPLINK, message(70, 1, 800, 0, b"?"));
    assert_eq!(rx.stats().dropped_invalid, invalid + 1);
    assert_eq!(rx.stats().dropped_late_by_sender.len(), 2);
}

#[test]
fn the_uplink_keeps_its_largest_gap_between_barrier_updates_4_2() {
    let mut rx = Host::new(host_config(1, &[1], 2), at(0));
    assert_eq!(rx.uplink_gaps(), BarrierGaps::default());
    feed(&mut rx, 100, UPLINK, beacon(9, 50));
    feed(&mut rx, 600, UPLINK, beacon(9, 500));
    // Data without a barrier tells the link nothing; data with one does.
    feed(&mut rx, 700, UPLINK, message(0, 1, 650, 0, b"x"));
    let with_barrier = flags::END_OF_MESSAGE | flags::BARRIER_VALID;
    feed(
        &mut rx,
        800,
        UPLINK,
        fragment(0, 1, 700, 1, 0, with_barrier, b"y"),
    );
    let g = rx.uplink_gaps();
    assert_eq!((g.gap_max_ns, g.last), (500, Some(at(800))));
    assert_eq!(g.since_ns(at(2_000)), Some(1_200));
}

#[test]
fn a_switch_keeps_each_inputs_largest_gap_between_barrier_updates_4_2() {
    let mut sw = Switch::new(
        switch_config(SwitchMode::Chip, 2, 2),
        Some(identity_router(2)),
        at(0),
    );
    feed(&mut sw, 100, PortId(0), beacon(0, 50));
    feed(&mut sw, 400, PortId(0), beacon(0, 350));
    let with_barrier = flags::END_OF_MESSAGE | flags::BARRIER_VALID;
    feed(
        &mut sw,
        500,
        PortId(0),
        fragment(0, 1, 450, 0, 0, with_barrier, b"x"),
    );
    feed(
        &mut sw,
        1_500,
        PortId(0),
        message(0, 1, 460, 1, b"no barrier"),
    );
    let g = sw.input_gaps(PortId(0)).unwrap();
    assert_eq!((g.gap_max_ns, g.last), (300, Some(at(500))));
    assert_eq!(g.since_ns(at(2_000)), Some(1_500));
    assert_eq!(sw.input_gaps(PortId(1)), Some(BarrierGaps::default()));
    assert_eq!(sw.input_gaps(PortId(2)), None, "not an input");
}

#[test]
fn the_reliable_window_shows_what_is_in_flight_against_its_limits_5_1() {
    let mut h = Host::new(host_config(0, &[0], 3), at(1_000));
    assert_eq!(h.reliable_send_window().pairs, 0);
    h.send_reliable(
        at(1_000),
        p(0),
        &[(p(1), bytes("abc")), (p(2), bytes("de"))],
    )
    .unwrap();
    drain(&mut h);
    let w = h.reliable_send_window();
    let init = h.config().reliable.window_init as u64;
    assert_eq!(
        (w.pairs, w.in_flight_packets, w.unacked_messages),
        (2, 2, 2)
    );
    assert_eq!(w.limit_packets, 2 * init);
    assert_eq!(w.buffered_bytes, 5);
    assert_eq!(
        w.buffer_limit_bytes,
        h.config().reliable.send_buffer_bytes_max as u64
    );
}
