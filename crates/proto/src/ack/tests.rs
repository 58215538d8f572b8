use super::*;
use proptest::prelude::*;

#[test]
fn in_order_arrivals_advance_the_cumulative_psn() {
    let mut w = RecvWindow::default();
    for p in 0..5 {
        assert!(w.record(Psn(p)));
    }
    assert_eq!(w.ack(), (Psn(5), 0));
    assert!(!w.record(Psn(3)), "below the window is a duplicate");
}

#[test]
fn a_gap_is_selectively_acknowledged_and_closed_later() {
    let mut w = RecvWindow::default();
    assert!(w.record(Psn(0)));
    assert!(w.record(Psn(2)));
    assert!(w.record(Psn(3)));
    assert_eq!(w.ack(), (Psn(1), 0b11));
    assert!(
        !w.record(Psn(2)),
        "a selectively acknowledged PSN again is a duplicate"
    );
    assert!(w.record(Psn(1)));
    assert_eq!(w.ack(), (Psn(4), 0));
}

#[test]
fn a_slide_reports_exactly_the_psns_that_never_arrived() {
    let mut w = RecvWindow::default();
    for p in [0u32, 1, 3, 4, 66] {
        assert!(w.record(Psn(p)));
    }
    // PSN 2 is missing; 70 is more than 64 ahead of it: the window slides past 2..=5.
    let mut gave_up = Vec::new();
    assert!(w.record_with(Psn(70), &mut |p, n| gave_up.push((p.0, n))));
    assert_eq!(gave_up, vec![(2, 1), (5, 2)]);
    // 3 and 4 had arrived and 5 was given up: the window starts at 6 now, nothing lost twice.
    assert!(w.contains(Psn(4)) && w.contains(Psn(5)) && !w.contains(Psn(6)));
    assert!(w.contains(Psn(66)) && w.contains(Psn(70)));
}

#[test]
fn far_ahead_slides_the_window_and_gives_up_on_the_gap() {
    let mut w = RecvWindow::default();
    assert!(w.record(Psn(100)));
    let (cum, sack) = w.ack();
    assert_eq!(cum, Psn(100 - SACK_BITS));
    assert_eq!(sack, 1 << 63);
    assert!(!w.record(Psn(0)), "given up on");
}

#[test]
fn psns_wrap() {
    let mut w = RecvWindow {
        cum: Psn(u32::MAX),
        ..RecvWindow::default()
    };
    assert!(w.record(Psn(u32::MAX)));
    assert!(w.record(Psn(0)));
    assert_eq!(w.ack(), (Psn(1), 0));
}

#[test]
fn tracker_resolves_on_ack_nak_or_timeout() {
    let mut t = SendTracker::new(vec![ProcId(0)], 4, 10);
    let (a, b) = (ProcId(0), ProcId(1));
    t.track(Instant(100), a, b, Psn(0), 1, 100, Timestamp::new(5))
        .unwrap();
    t.track(Instant(110), a, b, Psn(1), 2, 100, Timestamp::new(6))
        .unwrap();
    t.track(Instant(120), a, b, Psn(3), 1, 100, Timestamp::new(7))
        .unwrap();
    // PSN 0 and 3 arrive (3 selectively); the two-fragment message is missing PSN 2.
    assert_eq!(t.unresolved_bytes(), 300);
    t.on_ack(a, b, Psn(2), 0b1, 0, |_| panic!("nothing missed"));
    assert_eq!(t.unresolved(), 1);
    assert_eq!(
        t.unresolved_bytes(),
        100,
        "acknowledged bytes leave the window"
    );
    let mut lost = Vec::new();
    t.expire(Instant(1000), |e| lost.push(e));
    assert_eq!(
        lost,
        vec![Expired {
            src: a,
            dst: b,
            psn: Psn(1),
            ts: Timestamp::new(6)
        }]
    );
    assert!(t.is_empty());
    assert_eq!(t.unresolved_bytes(), 0);
    t.track(Instant(2000), a, b, Psn(4), 1, 100, Timestamp::new(8))
        .unwrap();
    assert!(t.resolve(a, b, Psn(4)));
    assert!(!t.resolve(a, b, Psn(4)));
    t.expire(Instant(3000), |_| panic!("resolved by a NAK"));
}

/// §2.1: every loss is reported to the sender, also when a burst of hundreds of packets is
/// lost and the receiver's give-up reports are lost with it: the ACK's give-up count tells
/// the sender it missed reports, so the messages the ACK covers without their having
/// arrived are reported possibly lost.
#[test]
fn a_burst_of_losses_with_its_reports_lost_is_still_reported_2_1() {
    for burst in [40u32, 127, 128, 200, 255, 256, 300, 600] {
        let (a, b) = (ProcId(0), ProcId(1));
        let mut t = SendTracker::new(vec![a], 2, 10_000);
        let mut w = RecvWindow::default();
        for k in 0..=burst + 1 {
            t.track(
                Instant(1),
                a,
                b,
                Psn(k),
                1,
                100,
                Timestamp::new(u64::from(k) + 1),
            )
            .unwrap();
        }
        // PSN 0 arrives, the burst 1..=burst is lost, then PSN burst+1 arrives; every
        // give-up report (NAK) is lost too.
        assert!(w.record(Psn(0)));
        let mut reports = 0;
        assert!(w.record_with(Psn(burst + 1), &mut |_, _| reports += 1));
        assert_eq!(reports > 0, burst > SACK_BITS, "a slide beyond the window");
        let (cum, sack) = w.ack();
        let mut lost = Vec::new();
        t.on_ack(a, b, cum, sack, w.ecn, |e| lost.push(e.psn.0));
        // The window kept the last SACK_BITS PSNs before the arrival: those of the burst
        // are still unresolved (their records time out if nothing else comes); every one
        // the ACK resolved without its arrival is reported — and, the sender unable to
        // tell, PSN 0 too (over-reporting, which §2.1's "possibly lost" allows).
        let covered: Vec<u32> = (1..=burst).filter(|&p| p < cum.0).collect();
        let expected: Vec<u32> = if covered.is_empty() {
            Vec::new()
        } else {
            std::iter::once(0).chain(covered).collect()
        };
        assert_eq!(lost, expected, "burst {burst}");
    }
}

#[test]
fn tracker_is_bounded() {
    let mut t = SendTracker::new(vec![ProcId(0)], 4, 2);
    let (a, b) = (ProcId(0), ProcId(1));
    t.track(Instant(1), a, b, Psn(0), 1, 100, Timestamp::new(1))
        .unwrap();
    t.track(Instant(1), a, b, Psn(1), 1, 100, Timestamp::new(1))
        .unwrap();
    assert_eq!(
        t.track(Instant(1), a, b, Psn(2), 1, 100, Timestamp::new(1)),
        Err(TrackerFull)
    );
    t.on_ack(a, b, Psn(2), 0, 0, |_| panic!("nothing missed"));
    assert!(
        !t.has_room(1),
        "acknowledged records count until their deadline"
    );
    t.expire(Instant(1), |_| panic!("acknowledged"));
    assert!(t.has_room(2));
}

fn owed(src: u32, dst_idx: u32) -> AckOwed {
    AckOwed {
        src: ProcId(src),
        dst_idx,
        reliable: false,
    }
}

#[test]
fn acks_owed_to_one_host_go_together_when_the_first_is_due() {
    let mut b = AckBatcher::new(4);
    assert_eq!(b.push(2, Instant(100), owed(8, 0)), 1);
    assert_eq!(b.push(3, Instant(110), owed(12, 0)), 1);
    // Owed to peer 2 later: joins its batch, due at 100 rather than 150.
    assert_eq!(b.push(2, Instant(150), owed(9, 1)), 2);
    assert_eq!(b.next_due(), Some(Instant(100)));
    assert_eq!(b.pop_due(Instant(99)), None);
    assert_eq!(b.pop_due(Instant(100)), Some(2));
    let mut out = Vec::new();
    b.take(2, &mut out);
    assert_eq!(out, vec![owed(8, 0), owed(9, 1)]);
    assert_eq!((b.len(), b.owed_to(2), b.owed_to(3)), (1, 0, 1));
    assert_eq!(b.next_due(), Some(Instant(110)));
}

#[test]
fn a_batch_taken_early_leaves_no_deadline_behind() {
    let mut b = AckBatcher::new(2);
    b.push(1, Instant(100), owed(4, 0));
    let mut out = Vec::new();
    b.take(1, &mut out);
    assert_eq!(b.next_due(), None, "the early batch's deadline is gone");
    // Owed again: a new deadline of its own, not the stale one.
    b.push(1, Instant(300), owed(5, 0));
    assert_eq!(b.pop_due(Instant(200)), None);
    assert_eq!(b.pop_due(Instant(300)), Some(1));
    out.clear();
    b.take(1, &mut out);
    assert_eq!(out, vec![owed(5, 0)]);
    assert!(b.is_empty());
}

/// A tracker of messages from process 0 to 1 of `frags` fragments each, PSNs from `start`,
/// timestamps 1, 2, …; and its model: (first PSN, fragments, timestamp, resolved).
fn tracked_from(start: u32, frags: &[u32]) -> (SendTracker, Vec<(u32, u32, Timestamp, bool)>) {
    let (a, b) = (ProcId(0), ProcId(1));
    let mut t = SendTracker::new(vec![a], 2, 1000);
    let mut model = Vec::new();
    let mut psn = start;
    for (k, &f) in frags.iter().enumerate() {
        let ts = Timestamp::new(k as u64 + 1);
        t.track(Instant(1), a, b, Psn(psn), f, 100, ts).unwrap();
        model.push((psn, f, ts, false));
        psn = psn.wrapping_add(f);
    }
    (t, model)
}

/// A burst of sends to many destinations leaves no room behind once its records expired:
/// a thousand hosts that each sent one scattering do not each keep a thousand slots.
#[test]
fn an_emptied_tracker_gives_its_room_back() {
    let src = ProcId(0);
    let mut t = SendTracker::new(vec![src], 500, 1000);
    for d in 1..500 {
        t.track(
            Instant(10),
            src,
            ProcId(d),
            Psn(0),
            1,
            100,
            Timestamp::new(1),
        )
        .unwrap();
    }
    for d in 1..250 {
        t.on_ack(src, ProcId(d), Psn(1), 0, 0, |_| {});
    }
    let mut expired = 0;
    t.expire(Instant(10), |_| expired += 1);
    assert_eq!(expired, 250, "the unacknowledged half is reported");
    assert!(t.is_empty());
    assert!(t.slots.capacity() <= TRACKER_RETAINED);
    assert!(t.deadlines.capacity() <= TRACKER_RETAINED);
    // And it works as before afterwards.
    t.track(
        Instant(20),
        src,
        ProcId(3),
        Psn(1),
        1,
        100,
        Timestamp::new(2),
    )
    .unwrap();
    assert_eq!(t.unresolved(), 1);
}

fn owed_reliable(src: u32, dst_idx: u32) -> AckOwed {
    AckOwed {
        reliable: true,
        ..owed(src, dst_idx)
    }
}

/// Best-effort ACKs wait the long delay (§2.1: they serve only loss reporting), reliable
/// ones the short delay (§5.1: they hold back the commit barrier).
const BE_DELAY: u64 = 200_000;
const R_DELAY: u64 = 2_000;

#[test]
fn a_lone_best_effort_ack_waits_the_long_delay_2_1() {
    let mut b = AckBatcher::new(2);
    b.push(1, Instant(1_000 + BE_DELAY), owed(4, 0));
    b.check_schedules();
    assert_eq!(b.next_due(), Some(Instant(1_000 + BE_DELAY)));
    assert_eq!(b.pop_due(Instant(1_000 + R_DELAY)), None);
    assert_eq!(b.pop_due(Instant(BE_DELAY)), None);
    assert_eq!(b.pop_due(Instant(1_000 + BE_DELAY)), Some(1));
    let mut out = Vec::new();
    b.take(1, &mut out);
    assert_eq!(out, vec![owed(4, 0)]);
    assert!(b.is_empty());
    assert_eq!(b.next_due(), None);
}

#[test]
fn a_reliable_ack_pulls_a_best_effort_batch_forward_5_1() {
    let mut b = AckBatcher::new(3);
    b.push(1, Instant(1_000 + BE_DELAY), owed(4, 0));
    b.push(2, Instant(1_500 + BE_DELAY), owed(8, 0));
    // A reliable ACK owed to peer 1 at 3 µs: peer 1's whole batch is due at 5 µs.
    assert_eq!(b.push(1, Instant(3_000 + R_DELAY), owed_reliable(5, 1)), 2);
    b.check_schedules();
    assert_eq!(b.next_due(), Some(Instant(3_000 + R_DELAY)));
    // Another best-effort ACK joins without pushing it back.
    assert_eq!(b.push(1, Instant(4_000 + BE_DELAY), owed(6, 0)), 3);
    assert_eq!(b.next_due(), Some(Instant(3_000 + R_DELAY)));
    assert_eq!(b.pop_due(Instant(3_000 + R_DELAY - 1)), None);
    assert_eq!(b.pop_due(Instant(3_000 + R_DELAY)), Some(1));
    let mut out = Vec::new();
    b.take(1, &mut out);
    assert_eq!(out, vec![owed(4, 0), owed_reliable(5, 1), owed(6, 0)]);
    b.check_schedules();
    // Peer 1's best-effort entry at 201 µs is stale now: only peer 2 is due next.
    assert_eq!(b.next_due(), Some(Instant(1_500 + BE_DELAY)));
    assert_eq!(b.pop_due(Instant(u64::MAX)), Some(2));
    out.clear();
    b.take(2, &mut out);
    assert_eq!(out, vec![owed(8, 0)]);
    assert_eq!(b.pop_due(Instant(u64::MAX)), None, "nothing owed twice");
    assert!(b.is_empty());
}

#[test]
fn next_due_is_the_earlier_front_of_the_two_schedules() {
    let mut b = AckBatcher::new(4);
    // Best effort first (due 201 µs), then a reliable batch for another peer (due 12 µs):
    // the reliable schedule's front is earlier although it was pushed later.
    b.push(0, Instant(1_000 + BE_DELAY), owed(0, 0));
    assert_eq!(b.next_due(), Some(Instant(1_000 + BE_DELAY)));
    b.push(1, Instant(10_000 + R_DELAY), owed_reliable(1, 0));
    assert_eq!(b.next_due(), Some(Instant(10_000 + R_DELAY)));
    // A reliable batch's later best-effort ACK changes nothing.
    b.push(1, Instant(11_000 + BE_DELAY), owed(1, 1));
    assert_eq!(b.next_due(), Some(Instant(10_000 + R_DELAY)));
    b.check_schedules();
    let mut order = Vec::new();
    let mut out = Vec::new();
    while let Some(p) = b.pop_due(Instant(u64::MAX)) {
        order.push(p);
        b.take(p, &mut out);
    }
    assert_eq!(order, vec![1, 0]);
    assert_eq!(out.len(), 3);
    // A reliable batch taken early leaves the best-effort front in charge again.
    b.push(2, Instant(20_000 + BE_DELAY), owed(2, 0));
    b.push(3, Instant(21_000 + R_DELAY), owed_reliable(3, 0));
    assert_eq!(b.next_due(), Some(Instant(21_000 + R_DELAY)));
    out.clear();
    b.take(3, &mut out);
    assert_eq!(b.next_due(), Some(Instant(20_000 + BE_DELAY)));
    b.check_schedules();
}

proptest! {
    /// Whatever the order of owing and taking, and whichever delay class each ACK is in,
    /// every ACK owed is taken exactly once, by its peer, never after the earliest due time
    /// in its batch (a reliable ACK pulls its batch forward), and the schedules always hold
    /// every batch's due time.
    #[test]
    fn every_owed_ack_is_taken_once_by_its_peer(
        ops in proptest::collection::vec((0usize..5, 0u8..3), 1..200),
    ) {
        let mut b = AckBatcher::new(5);
        let mut owed_by_peer = vec![Vec::new(); 5];
        let mut taken_by_peer = vec![Vec::new(); 5];
        // The earliest due time of each peer's batch, as the model sees it.
        let mut batch_due: Vec<Option<Instant>> = vec![None; 5];
        let mut out = Vec::new();
        for (t, &(peer, op)) in ops.iter().enumerate() {
            let now = Instant(t as u64 * 10);
            while let Some(p) = b.pop_due(now) {
                let due = batch_due[p].take().expect("a batch is due only if owed");
                prop_assert!(due <= now, "a batch went before it was due");
                out.clear();
                b.take(p, &mut out);
                taken_by_peer[p].extend(out.iter().copied());
            }
            for (p, due) in batch_due.iter().enumerate() {
                if let Some(due) = due {
                    prop_assert!(*due > now, "peer {} overdue", p);
                }
            }
            if op == 2 {
                out.clear();
                b.take(peer, &mut out);
                batch_due[peer] = None;
                taken_by_peer[peer].extend(out.iter().copied());
            } else {
                let reliable = op == 1;
                let o = AckOwed { reliable, ..owed(t as u32, peer as u32) };
                owed_by_peer[peer].push(o);
                let due = now + if reliable { 25 } else { 400 };
                b.push(peer, due, o);
                let d = batch_due[peer].get_or_insert(due);
                *d = (*d).min(due);
            }
            b.check_schedules();
            prop_assert_eq!(b.next_due(), batch_due.iter().flatten().min().copied());
        }
        for (p, taken) in taken_by_peer.iter_mut().enumerate() {
            out.clear();
            b.take(p, &mut out);
            taken.extend(out.iter().copied());
        }
        prop_assert!(b.is_empty());
        prop_assert_eq!(b.next_due(), None);
        prop_assert_eq!(owed_by_peer, taken_by_peer);
    }

    /// `resolve_containing` and `resolve` find exactly what a search of every tracked
    /// message finds — also for PSNs older than the oldest record or newer than the newest,
    /// where the PSN-ordered walk stops early — whatever the fragment counts, and across
    /// the PSN wrap.
    #[test]
    fn resolving_by_psn_matches_an_exhaustive_search(
        start in prop_oneof![Just(0u32), Just(u32::MAX - 20), 0u32..1000],
        frags in proptest::collection::vec(1u32..4, 1..40),
        queries in proptest::collection::vec((-10i32..130, proptest::bool::ANY), 1..60),
    ) {
        let (a, b) = (ProcId(0), ProcId(1));
        let (mut t, mut model) = tracked_from(start, &frags);
        for (off, containing) in queries {
            let q = Psn(start.wrapping_add(off as u32));
            if containing {
                let want = model.iter_mut().find(|m| {
                    !m.3 && q.0.wrapping_sub(m.0) < m.1
                });
                let want = want.map(|m| {
                    m.3 = true;
                    (Psn(m.0), m.2)
                });
                prop_assert_eq!(t.resolve_containing(a, b, q), want);
            } else {
                let want = model.iter_mut().find(|m| !m.3 && m.0 == q.0);
                let want = want.map(|m| m.3 = true).is_some();
                prop_assert_eq!(t.resolve(a, b, q), want);
            }
            let unresolved = model.iter().filter(|m| !m.3).count();
            prop_assert_eq!(t.unresolved(), unresolved);
            prop_assert_eq!(t.unresolved_bytes(), 100 * unresolved as u64);
        }
    }

    /// An ACK resolves exactly the messages all of whose packets it reports received
    /// (below the cumulative PSN or selectively acknowledged), however far the SACK bits
    /// reach, and reports the newest of them.
    #[test]
    fn acks_resolve_exactly_the_messages_they_cover(
        start in prop_oneof![Just(0u32), Just(u32::MAX - 30), 0u32..1000],
        frags in proptest::collection::vec(1u32..4, 1..60),
        acks in proptest::collection::vec((0u32..120, proptest::num::u64::ANY), 1..20),
    ) {
        let (a, b) = (ProcId(0), ProcId(1));
        let (mut t, mut model) = tracked_from(start, &frags);
        for (off, sack) in acks {
            let cum = start.wrapping_add(off);
            let got = |p: u32| {
                let d = p.wrapping_sub(cum) as i32;
                d < 0 || (1..=64).contains(&d) && sack & (1 << (d - 1)) != 0
            };
            let mut newest = None;
            for m in model.iter_mut().filter(|m| !m.3) {
                if (0..m.1).all(|f| got(m.0.wrapping_add(f))) {
                    m.3 = true;
                    newest = Some(m.2);
                }
            }
            let r = t.on_ack(a, b, Psn(cum), sack, 0, |_| panic!("no give-ups"));
            prop_assert_eq!(r, newest);
            prop_assert_eq!(t.unresolved(), model.iter().filter(|m| !m.3).count());
        }
    }

    /// Whatever the arrival order and duplication, each PSN is recorded as new exactly
    /// once, and the cumulative PSN ends past every PSN when all arrived (no window slide).
    #[test]
    fn each_psn_is_new_exactly_once(order in proptest::collection::vec(0u32..40, 1..200)) {
        let mut w = RecvWindow::default();
        let mut seen = std::collections::BTreeSet::new();
        for p in &order {
            prop_assert_eq!(w.record(Psn(*p)), seen.insert(*p));
        }
        let all: Vec<u32> = (0..40).collect();
        for p in &all {
            w.record(Psn(*p));
        }
        prop_assert_eq!(w.ack(), (Psn(40), 0));
    }
}
