//! The switch: chip mode (§4.1 Eq. 4.1, §4.2, §6.2.1) and the switch CPU (§6.2.2).

use super::*;

// ---------------------------------------------------------------------------------------------
// §4.1 Eq. 4.1, §4.2, §6.2.1: the switch in chip mode.
// ---------------------------------------------------------------------------------------------

fn chip_switch(ports: usize) -> Switch {
    Switch::new(
        switch_config(SwitchMode::Chip, ports, ports),
        Some(identity_router(ports as u32)),
        at(0),
    )
}

#[test]
fn output_barrier_is_min_over_input_registers_eq_4_1() {
    let mut sw = chip_switch(3);
    assert!(feed(&mut sw, 100, PortId(0), beacon(0, 500)).is_empty());
    assert!(feed(&mut sw, 100, PortId(1), beacon(1, 300)).is_empty());
    assert_eq!(sw.barrier(), None, "input 2 has not reported");
    let out = feed(&mut sw, 100, PortId(2), beacon(2, 400));
    assert_eq!(sw.barrier(), Some(t(300)));
    assert_eq!(
        beacons_sent(&out),
        vec![(PortId(0), 300), (PortId(1), 300), (PortId(2), 300)]
    );
    let out = feed(&mut sw, 600, PortId(1), beacon(1, 700));
    assert_eq!(sw.barrier(), Some(t(400)), "min(500, 700, 400)");
    assert_eq!(beacons_sent(&out).len(), 3);
    assert!(beacons_sent(&out).iter().all(|&(_, b)| b == 400));
    // A reordered, older beacon and an older data barrier change nothing.
    assert!(feed(&mut sw, 700, PortId(0), beacon(0, 200)).is_empty());
    assert_eq!(sw.register(PortId(0)), Some(t(500)));
    let out = feed(
        &mut sw,
        700,
        PortId(2),
        fragment(
            2,
            0,
            100,
            0,
            0,
            flags::END_OF_MESSAGE | flags::BARRIER_VALID,
            b"",
        ),
    );
    assert_eq!(sw.register(PortId(2)), Some(t(400)));
    assert_eq!(sw.barrier(), Some(t(400)), "never backwards");
    assert_eq!(data_of(&sent(&out))[0].header.barrier, t(400));
    // The switch names itself in its beacons.
    let Packet::Beacon(b) = &sent(&feed(&mut sw, 1_500, PortId(2), beacon(2, 900)))[0].1 else {
        panic!("expected a beacon");
    };
    assert_eq!(b.from, SWITCH_NODE);
    assert_eq!(b.barrier, t(500));
}

#[test]
fn nothing_is_known_until_every_input_has_reported_eq_4_1() {
    let mut sw = chip_switch(3);
    let valid = flags::END_OF_MESSAGE | flags::BARRIER_VALID;
    let out = sent(&feed(
        &mut sw,
        100,
        PortId(0),
        fragment(0, 1, 500, 0, 0, valid, b"x"),
    ));
    let fwd = data_of(&out);
    assert_eq!(out[0].0, PortId(1));
    assert_eq!(
        fwd[0].header.barrier(),
        None,
        "forwarded with BARRIER_VALID cleared"
    );
    assert_eq!(sw.register(PortId(0)), Some(t(500)));
    assert!(feed(&mut sw, 100, PortId(1), beacon(1, 600)).is_empty());
    assert_eq!(sw.barrier(), None);
    let out = sent(&feed(
        &mut sw,
        100,
        PortId(2),
        fragment(2, 0, 450, 0, 0, valid, b"y"),
    ));
    assert_eq!(sw.barrier(), Some(t(450)));
    assert_eq!(data_of(&out)[0].header.barrier(), Some(t(450)));
}

#[test]
fn forwarded_data_carries_the_output_barrier_4_1() {
    let mut sw = chip_switch(2);
    feed(&mut sw, 100, PortId(0), beacon(0, 300));
    feed(&mut sw, 100, PortId(1), beacon(1, 400));
    assert_eq!(sw.barrier(), Some(t(300)));
    let valid = flags::END_OF_MESSAGE | flags::BARRIER_VALID;
    let Packet::Data(inbound) = fragment(0, 1, 900, 42, 0, valid, b"payload") else {
        unreachable!()
    };
    let out = sent(&feed(
        &mut sw,
        900,
        PortId(0),
        Packet::Data(inbound.clone()),
    ));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, PortId(1));
    let fwd = &data_of(&out)[0];
    assert_eq!(sw.register(PortId(0)), Some(t(900)));
    assert_eq!(sw.barrier(), Some(t(400)));
    assert_eq!(
        fwd.header.barrier,
        t(400),
        "barrier field rewritten to B_new"
    );
    // §5.1: the commit barrier is stamped alongside (the data packet carried none here).
    assert_eq!(fwd.header.flags, valid | flags::COMMIT_VALID);
    assert_eq!(fwd.header.commit(), sw.commit_barrier());
    let mut unchanged = fwd.clone();
    unchanged.header.barrier = inbound.header.barrier;
    unchanged.header.commit = inbound.header.commit;
    unchanged.header.flags = inbound.header.flags;
    assert_eq!(unchanged, inbound, "nothing but the barriers change");
    // A packet without a valid barrier leaves the register alone but leaves with B_new.
    let mut no_barrier = fragment(1, 0, 950, 0, 0, flags::END_OF_MESSAGE, b"");
    if let Packet::Data(d) = &mut no_barrier {
        d.header.barrier = t(5);
    }
    let fwd = data_of(&sent(&feed(&mut sw, 950, PortId(1), no_barrier)));
    assert_eq!(sw.register(PortId(1)), Some(t(400)));
    assert_eq!(fwd[0].header.barrier(), Some(t(400)));
    assert_eq!(
        fwd[0].header.flags,
        flags::END_OF_MESSAGE | flags::BARRIER_VALID | flags::COMMIT_VALID
    );
    assert_eq!(sw.stats().forwarded, 2);
}

#[test]
fn beacon_advancing_the_barrier_goes_out_at_once_and_a_second_within_min_gap_is_deferred_4_2() {
    let mut cfg = switch_config(SwitchMode::Chip, 2, 2);
    cfg.beacon_interval_ns = 3_000;
    cfg.beacon_min_gap_ns = 375;
    let mut sw = Switch::new(cfg, Some(identity_router(2)), at(0));
    assert!(feed(&mut sw, 1_000, PortId(0), beacon(0, 500)).is_empty());
    let out = feed(&mut sw, 1_000, PortId(1), beacon(1, 600));
    assert_eq!(
        beacons_sent(&out),
        vec![(PortId(0), 500), (PortId(1), 500)],
        "promptly"
    );
    assert_eq!(sw.poll_timeout(), Some(at(3_000)), "nothing deferred");
    // A second change 100 ns later is deferred until the gap has passed...
    assert!(feed(&mut sw, 1_100, PortId(0), beacon(0, 800)).is_empty());
    assert_eq!(sw.barrier(), Some(t(600)));
    assert_eq!(sw.poll_timeout(), Some(at(1_375)));
    // ...and a third coalesces with it.
    assert!(feed(&mut sw, 1_200, PortId(1), beacon(1, 900)).is_empty());
    assert_eq!(sw.barrier(), Some(t(800)));
    assert_eq!(sw.poll_timeout(), Some(at(1_375)));
    // Output 1 learns 800 from a data packet meanwhile, so only output 0 still needs a beacon.
    let fwd = sent(&feed(&mut sw, 1_250, PortId(0), message(0, 1, 850, 0, b"")));
    assert_eq!(
        (fwd[0].0, data_of(&fwd)[0].header.barrier),
        (PortId(1), t(800))
    );
    assert!(tick(&mut sw, 1_300).is_empty(), "not due yet");
    assert_eq!(beacons_sent(&tick(&mut sw, 1_375)), vec![(PortId(0), 800)]);
    assert_eq!(sw.poll_timeout(), Some(at(3_000)));
    assert_eq!(sw.stats().beacons_sent, 3);
}

#[test]
fn at_each_beacon_time_only_output_links_with_a_stale_barrier_get_a_beacon_4_2() {
    let mut sw = chip_switch(2);
    // Hosts in chip mode stamp both barriers on data (§5.1); a beacon carries both, so a switch
    // beacons once it knows both.
    let valid = flags::END_OF_MESSAGE | flags::BARRIER_VALID | flags::COMMIT_VALID;
    // Barriers arrive on data only, so no change-triggered beacon is sent.
    let out = sent(&feed(
        &mut sw,
        100,
        PortId(0),
        fragment(0, 1, 300, 0, 0, valid, b""),
    ));
    assert_eq!(data_of(&out)[0].header.barrier(), None);
    let out = sent(&feed(
        &mut sw,
        200,
        PortId(1),
        fragment(1, 0, 400, 0, 0, valid, b""),
    ));
    assert_eq!(data_of(&out)[0].header.barrier(), Some(t(300)));
    assert_eq!(sw.poll_timeout(), Some(at(INTERVAL_NS)));
    // Output 0 carried 300 already; output 1 never carried a barrier.
    assert_eq!(
        beacons_sent(&tick(&mut sw, INTERVAL_NS)),
        vec![(PortId(1), 300)]
    );
    assert_eq!(sw.poll_timeout(), Some(at(2 * INTERVAL_NS)));
    // Nothing moved: the next beacon time sends nothing.
    assert!(tick(&mut sw, 2 * INTERVAL_NS).is_empty());
}

// ---------------------------------------------------------------------------------------------
// §6.2.2: the switch CPU.
// ---------------------------------------------------------------------------------------------

fn cpu_switch(inputs: usize, outputs: usize, delay_ns: u64) -> Switch {
    let mut cfg = switch_config(SwitchMode::Cpu, inputs, outputs);
    cfg.beacon_delay_ns = delay_ns;
    Switch::new(cfg, Some(identity_router(outputs as u32)), at(0))
}

#[test]
fn cpu_switch_forwards_data_unchanged_6_2_2() {
    let mut sw = cpu_switch(2, 2, 0);
    feed(&mut sw, 50, PortId(0), beacon(0, 10));
    feed(&mut sw, 50, PortId(1), beacon(1, 10));
    for pk in [
        fragment(
            0,
            1,
            777,
            3,
            0,
            flags::END_OF_MESSAGE | flags::BARRIER_VALID,
            b"abc",
        ),
        fragment(1, 0, 778, 9, 2, 0, b"def"),
    ] {
        let out = sent(&feed(&mut sw, 100, PortId(0), pk.clone()));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].1, pk, "the chip forwards data untouched");
    }
    assert_eq!(
        sw.register(PortId(0)),
        None,
        "data barriers never reach the CPU"
    );
    assert_eq!(sw.barrier(), None, "beacons wait for the CPU's beacon time");
}

#[test]
fn cpu_switch_applies_a_beacon_only_after_its_processing_delay_6_2_2() {
    let mut sw = cpu_switch(2, 3, 300);
    assert!(feed(&mut sw, 100, PortId(0), beacon(0, 500)).is_empty());
    assert!(feed(&mut sw, 100, PortId(1), beacon(1, 600)).is_empty());
    assert!(feed(&mut sw, 800, PortId(0), beacon(0, 900)).is_empty()); // reaches the CPU at 1100
    assert_eq!(sw.register(PortId(0)), None, "not before the beacon time");
    assert_eq!(sw.poll_timeout(), Some(at(1_000)));
    let out = tick(&mut sw, 1_000);
    assert_eq!(
        sw.register(PortId(0)),
        Some(t(500)),
        "the 900 is still being processed"
    );
    assert_eq!(sw.register(PortId(1)), Some(t(600)));
    assert_eq!(
        beacons_sent(&out),
        vec![(PortId(0), 500), (PortId(1), 500), (PortId(2), 500)],
        "every output link"
    );
    // Busy or idle makes no difference: output 0 carries data, and still gets the beacon.
    assert_eq!(
        sent(&feed(
            &mut sw,
            1_500,
            PortId(1),
            message(1, 0, 950, 0, b"busy")
        ))
        .len(),
        1
    );
    let out = tick(&mut sw, 2_000);
    assert_eq!(sw.register(PortId(0)), Some(t(900)));
    assert_eq!(
        beacons_sent(&out),
        vec![(PortId(0), 600), (PortId(1), 600), (PortId(2), 600)]
    );
    // `send_beacons` documents "every output link that would learn something": with no change,
    // the next beacon time sends nothing.
    assert!(tick(&mut sw, 3_000).is_empty());
}
