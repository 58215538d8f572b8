//! End-to-end ACKs sent per host pair (§2.1; §6.1: the host's polling thread generates them).

use super::*;

// ---------------------------------------------------------------------------------------------
// §2.1 end-to-end ACKs, sent per host pair (§6.1: the host's polling thread generates them).
// ---------------------------------------------------------------------------------------------

/// `procs` processes, `pph` per host, numbered host by host.
fn host_of(procs: u32, pph: u32) -> Arc<[u32]> {
    (0..procs).map(|q| q / pph).collect()
}

fn batched_config(node: u32, procs: &[u32], senders_max: u32, pph: u32) -> HostConfig {
    let mut cfg = host_config(node, procs, senders_max);
    cfg.host_of = Some(host_of(senders_max, pph));
    cfg
}

/// The ACKs in `packets`, one `Vec` per packet: (from, to, cumulative PSN, reliable).
fn acks_per_packet(packets: &[(PortId, Packet)]) -> Vec<Vec<(u32, u32, u32, bool)>> {
    let entry = |a: &Ack| (a.from.0, a.to.0, a.cum_psn.0, a.reliable);
    packets
        .iter()
        .filter_map(|(_, pk)| match pk {
            Packet::Ack(a) => Some(vec![entry(a)]),
            Packet::AckBatch(b) => Some(b.acks().iter().map(entry).collect()),
            _ => None,
        })
        .collect()
}

/// Host A (processes 0, 1) sends one message from each to each of host B's (2, 3); B owes
/// four best-effort ACKs to host A and sends them as one batch when the first is
/// `ack_delay_be_ns` old.
#[test]
fn acks_owed_to_one_host_go_in_one_batch_when_the_first_is_due_2_1_6_1() {
    let mut a = Host::new(batched_config(0, &[0, 1], 4, 2), at(0));
    let mut b = Host::new(batched_config(1, &[2, 3], 4, 2), at(0));
    let delay = HostConfig::new(NodeId(0), vec![p(0)], 1).ack_delay_be_ns;
    for src in [0, 1] {
        a.send(at(100), p(src), &[(p(2), bytes("x")), (p(3), bytes("y"))])
            .unwrap();
    }
    let up = sent(&drain(&mut a));
    assert_eq!(data_of(&up).len(), 4);
    assert_eq!(a.unresolved_sends(), 4);
    // The four arrive 0, 100, 200 and 300 ns apart: one batch, due `delay` after the first.
    for (i, (_, pk)) in up.iter().enumerate() {
        let out = feed(&mut b, 1_000 + 100 * i as u64, UPLINK, pk.clone());
        assert!(acks_per_packet(&sent(&out)).is_empty(), "delayed");
    }
    assert_eq!(b.acks_pending(), 4);
    assert!(b.poll_timeout().unwrap() <= at(1_000 + delay));
    assert!(
        acks_per_packet(&sent(&tick(&mut b, 1_000 + delay / 2))).is_empty(),
        "best-effort ACKs wait the whole delay"
    );
    let up_b = sent(&tick(&mut b, 1_000 + delay));
    assert_eq!(
        acks_per_packet(&up_b),
        vec![vec![
            (2, 0, 1, false),
            (3, 0, 1, false),
            (2, 1, 1, false),
            (3, 1, 1, false)
        ]],
        "one packet for the host pair, every ACK in it"
    );
    assert_eq!(b.acks_pending(), 0);
    assert_eq!((b.stats().acks_sent, b.stats().ack_packets_sent), (4, 1));
    // The sending host applies each entry to its sender: nothing is left to time out.
    let batch = up_b
        .into_iter()
        .find(|(_, pk)| matches!(pk, Packet::AckBatch(_)))
        .expect("a batch")
        .1;
    let out = feed(&mut a, 5_000 + delay, UPLINK, batch);
    assert!(failures(&out).is_empty());
    assert_eq!(a.unresolved_sends(), 0, "every entry resolved its message");
    assert_eq!(a.stats().acks_received, 4);
    assert!(failures(&tick(&mut a, 2_000_000)).is_empty(), "no timeout");
}

/// Without `host_of` every process is a host of its own: B's four ACKs go in one batch per
/// sending process (two receivers each), not one for the pair of hosts.
#[test]
fn without_a_host_table_acks_are_batched_per_remote_process_2_1() {
    let mut b = Host::new(host_config(1, &[2, 3], 4), at(0));
    for (i, (src, dst)) in [(0, 2), (0, 3), (1, 2), (1, 3)].into_iter().enumerate() {
        feed(
            &mut b,
            1_000 + i as u64,
            UPLINK,
            message(src, dst, 500, 0, b"m"),
        );
    }
    let delay = HostConfig::new(NodeId(0), vec![p(0)], 1).ack_delay_be_ns;
    let acks = acks_per_packet(&sent(&tick(&mut b, 1_010 + delay)));
    assert_eq!(
        acks,
        vec![
            vec![(2, 0, 1, false), (3, 0, 1, false)],
            vec![(2, 1, 1, false), (3, 1, 1, false)]
        ]
    );
}

/// §2.1 and §5.1: best-effort ACKs may wait long (they only spare the sender a loss report at
/// its timeout), reliable ones may not (the sender's commit barrier waits for them). B owes
/// host A two best-effort ACKs; a reliable packet from A arrives later: the whole batch goes
/// `ack_delay_ns` after the reliable packet, not `ack_delay_be_ns` after the first, and nothing
/// is sent again when the best-effort delay runs out.
#[test]
fn a_reliable_ack_pulls_a_waiting_best_effort_batch_forward_2_1_5_1() {
    let mut b = Host::new(batched_config(1, &[2, 3], 4, 2), at(0));
    let cfg = HostConfig::new(NodeId(0), vec![p(0)], 1);
    let (delay, delay_be) = (cfg.ack_delay_ns, cfg.ack_delay_be_ns);
    assert!(
        delay * 10 < delay_be,
        "the scenario needs the delays far apart"
    );
    feed(&mut b, 1_000, UPLINK, message(0, 2, 500, 0, b"m"));
    feed(&mut b, 1_100, UPLINK, message(1, 3, 500, 0, b"m"));
    // Best effort alone: due after the long delay.
    assert_eq!(b.acks_pending(), 2);
    assert!(acks_per_packet(&sent(&tick(&mut b, 1_000 + delay_be / 2))).is_empty());
    let r_at = 1_000 + delay_be / 2 + 100;
    let rel = flags::END_OF_MESSAGE | flags::RELIABLE;
    let out = feed(&mut b, r_at, UPLINK, fragment(1, 2, 600, 0, 0, rel, b"r"));
    assert!(acks_per_packet(&sent(&out)).is_empty(), "delayed");
    assert_eq!(b.acks_pending(), 3);
    assert!(b.poll_timeout().unwrap() <= at(r_at + delay));
    assert!(acks_per_packet(&sent(&tick(&mut b, r_at + delay / 4))).is_empty());
    let acks = acks_per_packet(&sent(&tick(&mut b, r_at + delay)));
    assert_eq!(
        acks,
        vec![vec![(2, 0, 1, false), (3, 1, 1, false), (2, 1, 1, true)]],
        "one packet: the best-effort ACKs go with the reliable one"
    );
    assert_eq!(b.acks_pending(), 0);
    // The best-effort due time that was pulled forward leaves nothing behind.
    let late = sent(&tick(&mut b, 1_000 + delay_be + 1));
    assert!(acks_per_packet(&late).is_empty(), "nothing owed twice");
    assert_eq!((b.stats().acks_sent, b.stats().ack_packets_sent), (3, 1));
}

/// §2.1: best effort "detects lost packets via end-to-end ACK": with its ACKs delayed the
/// longest allowed, a delivered message is still acknowledged before the sender's loss timeout
/// (never reported lost), and a lost one is reported at the timeout, not later. A sends two
/// messages to host B; the first is lost on the way.
#[test]
fn a_delayed_best_effort_ack_beats_the_loss_timeout_and_a_loss_is_still_reported_2_1() {
    let mut cfg_a = batched_config(0, &[0, 1], 4, 2);
    let mut cfg_b = batched_config(1, &[2, 3], 4, 2);
    let delay_be = cfg_a.rto_ns / ACK_DELAY_BE_RTO_DIVISOR_MIN;
    cfg_a.ack_delay_be_ns = delay_be;
    cfg_b.ack_delay_be_ns = delay_be;
    let (rto, b_ack_delay) = (cfg_a.rto_ns, cfg_b.ack_delay_ns);
    let mut a = Host::new(cfg_a, at(0));
    let mut b = Host::new(cfg_b, at(0));
    a.send(at(100), p(0), &[(p(2), bytes("lost"))]).unwrap();
    a.send(at(200), p(1), &[(p(3), bytes("kept"))]).unwrap();
    let up = sent(&drain(&mut a));
    assert_eq!(data_of(&up).len(), 2);
    // Only the second arrives; B owes one ACK and holds it for the whole best-effort delay.
    let (_, kept) = up
        .iter()
        .find(|(_, pk)| matches!(pk, Packet::Data(d) if d.header.src == p(1)))
        .expect("the second message")
        .clone();
    feed(&mut b, 1_000, UPLINK, kept);
    assert_eq!(b.acks_pending(), 1);
    // (A wakeup sends batches due within half the reliable delay with it: compare against a
    // tick a whole reliable delay before.)
    let early = 1_000 + delay_be - b_ack_delay;
    assert!(acks_per_packet(&sent(&tick(&mut b, early))).is_empty());
    let ack = sent(&tick(&mut b, 1_000 + delay_be))
        .into_iter()
        .find(|(_, pk)| matches!(pk, Packet::Ack(_) | Packet::AckBatch(_)))
        .expect("the ACK goes when its delay runs out")
        .1;
    // It arrives well inside the sender's timeout: that message resolves, the other waits.
    assert!(1_000 + delay_be + 1_000 < 200 + rto);
    assert!(failures(&feed(&mut a, 1_000 + delay_be + 1_000, UPLINK, ack)).is_empty());
    assert_eq!(a.unresolved_sends(), 1);
    // The lost message is reported at its timeout, and only it.
    assert!(a.poll_timeout().unwrap() <= at(100 + rto));
    assert!(failures(&tick(&mut a, 100 + rto - 1)).is_empty());
    let lost = failures(&tick(&mut a, 100 + rto));
    assert!(
        matches!(
            lost.as_slice(),
            [HostEvent::SendFailed { src, dst, reason: NakReason::Lost, .. }]
                if *src == p(0) && *dst == p(2)
        ),
        "{lost:?}"
    );
    assert_eq!(a.unresolved_sends(), 0);
    assert!(
        failures(&tick(&mut a, 200 + rto + 1)).is_empty(),
        "no false report"
    );
}

/// §2.1: a best-effort ACK must reach its sender before the sender's loss timeout, so a host
/// refuses a best-effort ACK delay above a quarter of the timeout.
#[test]
#[should_panic(expected = "ack_delay_be_ns")]
fn a_best_effort_ack_delay_near_the_loss_timeout_is_refused_2_1() {
    let mut cfg = host_config(0, &[0], 1);
    cfg.ack_delay_be_ns = cfg.rto_ns / 2;
    Host::new(cfg, at(0));
}

/// `ack_every` packets from one sender send that sender's host its ACKs at once — every ACK
/// owed to that host, not only the full window's.
#[test]
fn ack_every_sends_the_whole_batch_of_that_host_at_once_2_1() {
    let mut b = Host::new(batched_config(1, &[2, 3], 4, 2), at(0));
    let every = u32::from(HostConfig::new(NodeId(0), vec![p(0)], 1).ack_every);
    feed(&mut b, 1_000, UPLINK, message(1, 3, 500, 0, b"m"));
    for psn in 0..every - 1 {
        let out = feed(&mut b, 1_001, UPLINK, message(0, 2, 500, psn, b"m"));
        assert!(acks_per_packet(&sent(&out)).is_empty());
    }
    let out = feed(&mut b, 1_002, UPLINK, message(0, 2, 500, every - 1, b"m"));
    assert_eq!(
        acks_per_packet(&sent(&out)),
        vec![vec![(3, 1, 1, false), (2, 0, every, false)]]
    );
    assert_eq!(b.acks_pending(), 0);
}

/// A host owed by more processes of one host than a batch holds sends the batch as soon as it
/// is full; the MTU bound holds whatever the fan-in.
#[test]
fn a_full_batch_goes_at_once_and_fits_the_mtu_2_1() {
    let n = ACK_BATCH_LEN_MAX as u32;
    // Processes 0..n on host 0, process n on host 1.
    let table: Arc<[u32]> = (0..=n).map(|q| u32::from(q == n)).collect();
    let mut cfg = host_config(1, &[n], n + 1);
    cfg.host_of = Some(table);
    let mut b = Host::new(cfg, at(0));
    for src in 0..n - 1 {
        let out = feed(&mut b, 1_000, UPLINK, message(src, n, 500, 0, b"m"));
        assert!(acks_per_packet(&sent(&out)).is_empty());
    }
    let out = sent(&feed(
        &mut b,
        1_000,
        UPLINK,
        message(n - 1, n, 500, 0, b"m"),
    ));
    let acks = acks_per_packet(&out);
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].len(), ACK_BATCH_LEN_MAX);
    assert!(out.iter().all(|(_, pk)| pk.encoded_len() <= 1_472));
    assert_eq!(b.acks_pending(), 0);
}

/// A batch is taken entry by entry: an entry for a process this host does not have, or from a
/// process outside the id space, is dropped and counted; the others still apply.
#[test]
fn a_batch_entry_for_an_unknown_process_is_dropped_the_others_apply_2_1() {
    let mut a = Host::new(batched_config(0, &[0, 1], 4, 2), at(0));
    a.send(at(100), p(0), &[(p(2), bytes("x"))]).unwrap();
    drain(&mut a);
    assert_eq!(a.unresolved_sends(), 1);
    let ack = |from: u32, to: u32| Ack {
        from: p(from),
        to: p(to),
        cum_psn: Psn(1),
        sack: 0,
        reliable: false,
        ecn: 0,
        rwnd: 64,
    };
    let batch = AckBatch::new(vec![ack(3, 2), ack(2, 0), ack(99, 1)]).unwrap();
    let out = feed(&mut a, 1_000, UPLINK, Packet::AckBatch(batch));
    assert!(failures(&out).is_empty());
    assert_eq!(a.unresolved_sends(), 0);
    assert_eq!(a.stats().acks_received, 1);
    assert_eq!(a.stats().dropped_invalid, 2);
}

/// §4.1 with a full application queue: told how much room the application has
/// (`Host::set_room`), the host accepts no more best-effort messages than that — the next is
/// refused with a `BufferFull` NAK before it is acknowledged, by the role itself — and delivers
/// what it accepted. Given room again, it accepts again.
#[test]
fn a_host_out_of_room_refuses_before_acknowledging_4_1() {
    let mut h = Host::new(host_config(0, &[0], 4), at(0));
    assert!(h.set_room(at(0), p(0), 2));
    assert!(!h.set_room(at(0), p(3), 2), "not a local process");
    drain(&mut h);
    let refused = |out: &[Out<Host>]| -> Vec<(u32, NakReason)> {
        sent(out)
            .into_iter()
            .filter_map(|(_, pk)| match pk {
                Packet::Nak(n) => Some((n.to.0, n.reason)),
                _ => None,
            })
            .collect()
    };
    let mut naks = Vec::new();
    for (src, ts) in [(1, 100), (2, 110), (3, 120)] {
        naks.extend(refused(&feed(
            &mut h,
            10,
            UPLINK,
            message(src, 0, ts, 0, b"m"),
        )));
    }
    assert_eq!(naks, vec![(3, NakReason::BufferFull)]);
    assert_eq!(h.stats().dropped_full, 1);
    let out = feed(&mut h, 20, UPLINK, beacon(9, 1_000));
    assert_eq!(
        summary(&deliveries(&out)),
        vec![(100, 1, bytes("m")), (110, 2, bytes("m"))]
    );
    assert_eq!(h.room(p(0)), Some(0));
    assert_eq!(h.released(), h.barrier(), "nothing held back");
    // Out of room: refused at once.
    let out = feed(&mut h, 30, UPLINK, message(3, 0, 1_100, 1, b"n"));
    assert_eq!(refused(&out), vec![(3, NakReason::BufferFull)]);
    // The application read: room again.
    h.set_room(at(40), p(0), 5);
    drain(&mut h);
    let out = feed(&mut h, 50, UPLINK, message(3, 0, 1_200, 2, b"o"));
    assert!(refused(&out).is_empty());
    let out = feed(&mut h, 60, UPLINK, beacon(9, 2_000));
    assert_eq!(summary(&deliveries(&out)), vec![(1_200, 3, bytes("o"))]);
    assert_eq!(h.room(p(0)), Some(4));
}
