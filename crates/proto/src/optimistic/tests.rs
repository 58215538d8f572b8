//! The pipeline against PLATO §4.1 (Fig. 7's walk-through) and §5 (adaptive Δ), and a property
//! test: whatever the arrival order and timing, confirms come in the final order, nothing
//! confirmed is revoked, and the application's view is always a prefix of confirms followed by
//! the delivered, unconfirmed messages.

use super::*;
use proptest::prelude::*;

use OptEvent::{Confirm, Deliver, Revoke};

fn drain(p: &mut Pipeline<char>) -> Vec<OptEvent<char>> {
    std::iter::from_fn(|| p.poll()).collect()
}

fn t(ns: u64) -> Instant {
    Instant(ns)
}

#[test]
fn fig_7_walkthrough_close_arrival_revokes_previous_and_sequencing_confirms_4_1() {
    let mut p = Pipeline::new(OptConfig::fixed(10));
    for (at, k) in [(0, 'A'), (100, 'E'), (200, 'B'), (300, 'D')] {
        assert!(p.arrive(t(at), k));
    }
    // C within Δ of D: D is revoked before its Tm (no rollback), both are held.
    assert!(p.arrive(t(305), 'C'));
    assert_eq!(
        drain(&mut p),
        vec![
            Deliver {
                key: 'A',
                usable_at: t(10)
            },
            Deliver {
                key: 'E',
                usable_at: t(110)
            },
            Deliver {
                key: 'B',
                usable_at: t(210)
            },
            Deliver {
                key: 'D',
                usable_at: t(310)
            },
            Revoke {
                key: 'D',
                rollback: false
            },
        ]
    );
    // The sequencer's order is A B C D: E was delivered ahead of B, wrongly, and after its Tm.
    for k in ['A', 'B', 'C', 'D'] {
        assert!(p.sequence(t(400), k));
    }
    assert_eq!(
        drain(&mut p),
        vec![
            Confirm { key: 'A' },
            Revoke {
                key: 'E',
                rollback: true
            },
            Confirm { key: 'B' },
            Deliver {
                key: 'C',
                usable_at: t(400)
            },
            Confirm { key: 'C' },
            Deliver {
                key: 'D',
                usable_at: t(400)
            },
            Confirm { key: 'D' },
        ]
    );
    assert_eq!(p.arrived_len(), 1, "E is held, suspected");
    assert!(p.sequence(t(500), 'E'));
    assert_eq!(
        drain(&mut p),
        vec![
            Deliver {
                key: 'E',
                usable_at: t(500)
            },
            Confirm { key: 'E' }
        ]
    );
    assert!(p.is_empty());
    let s = p.stats();
    assert_eq!((s.rollbacks, s.revoked_early, s.confirmed), (1, 1, 5));
}

#[test]
fn arrival_already_sequenced_is_delivered_and_confirmed_at_once_4_1() {
    let mut p = Pipeline::new(OptConfig::fixed(10));
    assert!(p.sequence(t(0), 'A'));
    assert!(p.sequence(t(0), 'B'));
    assert!(drain(&mut p).is_empty());
    // B's place is known but A is missing: held.
    assert!(p.arrive(t(50), 'B'));
    assert!(drain(&mut p).is_empty());
    assert!(p.arrive(t(100), 'A'));
    assert_eq!(
        drain(&mut p),
        vec![
            Deliver {
                key: 'A',
                usable_at: t(100)
            },
            Confirm { key: 'A' },
            Deliver {
                key: 'B',
                usable_at: t(100)
            },
            Confirm { key: 'B' },
        ]
    );
    assert!(p.is_empty());
}

#[test]
fn arrival_behind_held_messages_waits_even_when_not_suspected_4_1() {
    let mut p = Pipeline::new(OptConfig::fixed(10));
    p.arrive(t(0), 'A');
    p.arrive(t(5), 'B'); // A revoked (early), both held
    p.arrive(t(100), 'C'); // far from B, but stuck behind them
    drain(&mut p);
    p.sequence(t(200), 'B');
    p.sequence(t(200), 'A');
    // Once A and B are sequenced, C is no longer held back: delivered, not confirmed.
    assert_eq!(
        drain(&mut p),
        vec![
            Deliver {
                key: 'B',
                usable_at: t(200)
            },
            Confirm { key: 'B' },
            Deliver {
                key: 'A',
                usable_at: t(200)
            },
            Confirm { key: 'A' },
            Deliver {
                key: 'C',
                usable_at: t(210)
            },
        ]
    );
}

#[test]
fn removing_a_message_never_sequenced_revokes_it_and_releases_those_behind() {
    let mut p = Pipeline::new(OptConfig::fixed(10));
    p.arrive(t(0), 'X');
    p.arrive(t(100), 'A');
    drain(&mut p);
    assert!(p.remove(t(300), 'X'));
    assert!(!p.remove(t(300), 'X'));
    assert_eq!(
        drain(&mut p),
        vec![Revoke {
            key: 'X',
            rollback: true
        }]
    );
    p.arrive(t(400), 'B');
    p.arrive(t(401), 'C'); // B revoked, both held
    drain(&mut p);
    assert!(p.remove(t(402), 'B'));
    assert!(drain(&mut p).is_empty(), "C is still suspected");
    p.sequence(t(500), 'A');
    p.sequence(t(500), 'C');
    assert_eq!(
        drain(&mut p),
        vec![
            Confirm { key: 'A' },
            Deliver {
                key: 'C',
                usable_at: t(500)
            },
            Confirm { key: 'C' },
        ]
    );
}

#[test]
fn an_arrival_before_delivered_ones_in_key_order_revokes_them_at_once() {
    let mut p = Pipeline::new(OptConfig::fixed(10));
    p.arrive_ordered(t(0), 'A');
    p.arrive_ordered(t(100), 'D');
    p.arrive_ordered(t(200), 'E');
    drain(&mut p);
    // C comes before D and E in the order: both are taken back now, E before its Tm (D's
    // passed when E came, more than Δ later); the order would have said so only at 300.
    assert!(p.arrive_ordered(t(205), 'C'));
    assert_eq!(
        drain(&mut p),
        vec![
            Revoke {
                key: 'D',
                rollback: true
            },
            Revoke {
                key: 'E',
                rollback: false
            },
        ]
    );
    for k in ['A', 'C', 'D', 'E'] {
        p.sequence(t(300), k);
    }
    let confirms: Vec<char> = drain(&mut p)
        .into_iter()
        .filter_map(|e| match e {
            Confirm { key } => Some(key),
            _ => None,
        })
        .collect();
    assert_eq!(confirms, ['A', 'C', 'D', 'E']);
    assert_eq!(p.stats().rollbacks, 1);
}

#[test]
fn full_pipeline_refuses_arrivals_but_not_the_next_in_order() {
    let cfg = OptConfig {
        len_max: 2,
        ..OptConfig::fixed(10)
    };
    let mut p = Pipeline::new(cfg);
    assert!(p.arrive(t(0), 'A'));
    assert!(p.arrive(t(100), 'B'));
    assert!(!p.arrive(t(200), 'C'));
    assert!(p.sequence(t(300), 'Z'));
    assert!(p.sequence(t(300), 'Y'));
    assert!(!p.sequence(t(300), 'X'), "two places known ahead already");
    assert!(p.arrive(t(400), 'Z'), "the next in order is always taken");
    assert_eq!(p.stats().refused_full, 2);
}

#[test]
fn delta_grows_by_half_on_a_rollback_above_one_percent_5() {
    let mut p = Pipeline::new(OptConfig::adaptive(1_000));
    // Two arrivals far apart, both delivered; the order puts the second first, after both Tms:
    // one rollback in two arrivals (50%), so Δ grows.
    p.arrive(t(0), 'A');
    p.arrive(t(10_000), 'B');
    p.sequence(t(20_000), 'B');
    assert_eq!(p.stats().rollbacks, 1);
    assert_eq!(p.delta_ns(), 1_500);
    assert!(p.rollback_fraction(t(20_000)) > 0.01);
}

#[test]
fn delta_shrinks_by_a_tenth_every_1000_arrivals_without_rollbacks_5() {
    let mut p = Pipeline::new(OptConfig::adaptive(1_000));
    let mut n = 0u32;
    for i in 0..2_000u32 {
        let at = t(u64::from(i) * 5_000);
        p.arrive(at, i);
        p.sequence(at, i);
        n += 1;
    }
    assert_eq!(n, 2_000);
    // 2,000 arrivals 5 µs apart: 10 ms in all, so the 1,000-arrival rule fires, twice.
    assert_eq!(p.stats().delta_shrunk, 2);
    assert_eq!(p.delta_ns(), 810);
}

#[test]
fn delta_shrinks_every_100_ms_at_low_rates_and_stays_in_bounds_5() {
    let mut p = Pipeline::new(OptConfig::adaptive(1_000));
    for i in 0..1_000u32 {
        let at = t(u64::from(i) * 100_000_000);
        p.arrive(at, i);
        p.sequence(at, i);
    }
    assert_eq!(p.delta_ns(), 10, "clamped at delta_min_ns");
}

#[test]
fn fixed_delta_never_moves() {
    let mut p = Pipeline::new(OptConfig::fixed(1_000));
    p.arrive(t(0), 'A');
    p.arrive(t(10_000), 'B');
    p.sequence(t(20_000), 'B');
    assert_eq!(p.stats().rollbacks, 1);
    assert_eq!(p.delta_ns(), 1_000);
}

#[test]
fn config_errors_name_the_bad_bound() {
    let bad = OptConfig {
        delta_min_ns: 5,
        delta_max_ns: 4,
        ..OptConfig::fixed(5)
    };
    assert!(bad.validate().unwrap_err().contains("min (5)"));
    let outside = OptConfig {
        delta_ns: 1,
        delta_min_ns: 2,
        ..OptConfig::fixed(5)
    };
    assert!(outside.validate().unwrap_err().contains("delta_ns 1"));
}

/// What the application sees, rebuilt from the events alone: confirmed messages in order, then
/// the delivered, unconfirmed ones in delivery order.
#[derive(Default)]
struct View {
    confirmed: Vec<u8>,
    tentative: Vec<u8>,
}

impl View {
    fn apply(&mut self, e: OptEvent<u8>) {
        match e {
            Deliver { key, .. } => {
                assert!(
                    !self.confirmed.contains(&key),
                    "{key} delivered after its confirm"
                );
                assert!(!self.tentative.contains(&key), "{key} delivered twice");
                self.tentative.push(key);
            }
            Revoke { key, .. } => {
                assert!(
                    !self.confirmed.contains(&key),
                    "{key} revoked after its confirm"
                );
                let i = self.tentative.iter().position(|k| *k == key);
                self.tentative
                    .remove(i.expect("revoke of a message not delivered"));
            }
            Confirm { key } => {
                // Confirmed in order: it must be the first tentative message.
                assert_eq!(
                    self.tentative.first(),
                    Some(&key),
                    "confirm out of view order"
                );
                self.tentative.remove(0);
                self.confirmed.push(key);
            }
        }
    }
}

proptest! {
    /// Any arrival order and timing, the order revealed in any interleaving: the confirms are
    /// exactly the order, each is preceded by a delivery that was not revoked, and every message
    /// ends confirmed.
    #[test]
    fn confirms_are_the_final_order_whatever_the_arrivals(
        order in Just((0u8..24).collect::<Vec<_>>()).prop_shuffle(),
        arrival in Just((0u8..24).collect::<Vec<_>>()).prop_shuffle(),
        gaps in proptest::collection::vec(0u64..40, 24),
        seq_after in proptest::collection::vec(0usize..4, 24),
        adaptive in any::<bool>(),
    ) {
        let cfg = OptConfig { adaptive, len_max: 8, ..OptConfig::fixed(20) };
        let mut p = Pipeline::new(cfg);
        let mut view = View::default();
        let (mut now, mut next_seq) = (0u64, 0usize);
        let mut waiting: Vec<u8> = Vec::new();
        for (i, &k) in arrival.iter().enumerate() {
            now += gaps[i];
            waiting.push(k);
            waiting.retain(|&w| !p.arrive(Instant(now), w));
            for _ in 0..seq_after[i] {
                if next_seq < order.len() && p.sequence(Instant(now), order[next_seq]) {
                    next_seq += 1;
                }
                waiting.retain(|&w| !p.arrive(Instant(now), w));
            }
            while let Some(e) = p.poll() { view.apply(e); }
        }
        // A correct pipeline takes every place within a few rounds; a stuck one fails here.
        let mut rounds = 0;
        while next_seq < order.len() {
            rounds += 1;
            prop_assert!(rounds < 1_000, "the order stopped being taken at {}", next_seq);
            now += 1;
            if p.sequence(Instant(now), order[next_seq]) { next_seq += 1; }
            waiting.retain(|&w| !p.arrive(Instant(now), w));
            while let Some(e) = p.poll() { view.apply(e); }
        }
        prop_assert!(waiting.is_empty());
        prop_assert_eq!(&view.confirmed, &order);
        prop_assert!(view.tentative.is_empty());
        prop_assert!(p.is_empty());
    }
}
