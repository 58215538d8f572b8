use super::*;
use proptest::prelude::*;
use std::collections::BTreeSet;

const A: MemberIx = MemberIx(0);
const B: MemberIx = MemberIx(7);
const C: MemberIx = MemberIx(9);
const PORT_B: PortId = PortId(0);
const PORT_C: PortId = PortId(1);

fn secret() -> ClusterSecret {
    ClusterSecret::from_bytes([42; SECRET_LEN])
}

fn keys_of(me: MemberIx, peers: &[MemberIx], epoch: Epoch) -> Vec<LinkKey> {
    let s = secret();
    peers
        .iter()
        .flat_map(|&p| {
            [LinkId { from: me, to: p }, LinkId { from: p, to: me }].map(|link| LinkKey {
                link,
                key: s.link_key(link, epoch),
            })
        })
        .collect()
}

/// Member `me` with links to `peers` (peer i on ports i, both ways), holding epoch 1.
fn member(mode: AuthMode, me: MemberIx, peers: &[MemberIx]) -> LinkAuth {
    let links: Vec<LinkPorts> = peers
        .iter()
        .enumerate()
        .map(|(i, &peer)| LinkPorts {
            peer,
            out: PortId(i as u32),
            input: PortId(i as u32),
        })
        .collect();
    let mut m = LinkAuth::new(mode, me, &links, KeyInbox::new());
    m.apply(
        Instant(0),
        KeyUpdate::Install {
            epoch: Epoch(1),
            keys: keys_of(me, peers, Epoch(1)),
            activate: true,
        },
    );
    m
}

/// A sealed datagram of `body` from `from` on `port`.
fn sealed(from: &mut LinkAuth, port: PortId, body: &[u8]) -> Vec<u8> {
    let mut d = vec![0u8; HEADER_LEN];
    d.extend_from_slice(body);
    d.extend_from_slice(&[0; TAG_LEN]);
    from.seal(port, &mut d).expect("a key is held");
    d
}

fn at(ns: u64) -> Instant {
    Instant(ns)
}

#[test]
fn link_keys_differ_per_direction_and_epoch_and_are_pinned() {
    let s = secret();
    let ab = LinkId { from: A, to: B };
    let k = s.link_key(ab, Epoch(1));
    assert_eq!(k, s.link_key(ab, Epoch(1)), "deterministic");
    assert_ne!(
        k,
        s.link_key(ab.reverse(), Epoch(1)),
        "each direction its own key"
    );
    assert_ne!(k, s.link_key(ab, Epoch(2)), "each epoch its own key");
    assert_ne!(
        k,
        ClusterSecret::from_bytes([43; SECRET_LEN]).link_key(ab, Epoch(1))
    );
    // Pinned: a change of the derivation (salt, info layout, hash) is a wire change. The value
    // was computed apart, with Python's hmac and hashlib (RFC 5869 by hand).
    assert_eq!(to_hex(&k.0), to_hex(&pinned_key()));
}

fn pinned_key() -> [u8; KEY_LEN] {
    let mut k = [0u8; KEY_LEN];
    from_hex("dbfe558733571fe5d5ec9985b4b22868", &mut k).unwrap();
    k
}

#[test]
fn secrets_round_trip_as_hex_and_never_print() {
    let s = ClusterSecret::generate().unwrap();
    assert_eq!(
        ClusterSecret::from_hex(&format!(" {}\n", s.to_hex())),
        Ok(s.clone())
    );
    assert!(!format!("{s:?}").contains(&s.to_hex()[..8]));
    assert!(ClusterSecret::from_hex("abc").is_err());
    assert!(ClusterSecret::from_hex(&"zz".repeat(SECRET_LEN)).is_err());
    let k = KeyMaterial([0xab; KEY_LEN]);
    let json = serde_json::to_string(&k).unwrap();
    assert_eq!(json, format!("\"{}\"", "ab".repeat(KEY_LEN)));
    assert_eq!(serde_json::from_str::<KeyMaterial>(&json).unwrap(), k);
    assert!(serde_json::from_str::<KeyMaterial>("\"00\"").is_err());
}

#[test]
fn a_sealed_datagram_opens_on_its_link_in_both_modes() {
    for mode in [AuthMode::On, AuthMode::Encrypt] {
        let mut a = member(mode, A, &[B]);
        let mut b = member(mode, B, &[A]);
        let body = b"beacon and data and acks".to_vec();
        let mut d = sealed(&mut a, PORT_B, &body);
        assert_eq!(d.len(), body.len() + OVERHEAD);
        assert_eq!(
            &d[HEADER_LEN..HEADER_LEN + body.len()] == body.as_slice(),
            mode == AuthMode::On,
            "{mode}: the body is in clear only when not encrypting"
        );
        let range = b.open(at(1), PortId(0), &mut d).unwrap();
        assert_eq!(&d[range], body.as_slice());
        assert_eq!((b.stats().ok, b.stats().refused()), (1, 0));
    }
}

#[test]
fn every_single_byte_change_is_refused_and_counted() {
    for mode in [AuthMode::On, AuthMode::Encrypt] {
        let mut a = member(mode, A, &[B]);
        let mut b = member(mode, B, &[A]);
        let d = sealed(&mut a, PORT_B, b"0123456789abcdef");
        for i in 0..d.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut forged = d.clone();
                forged[i] ^= flip;
                let r = b.open(at(1), PortId(0), &mut forged);
                assert!(r.is_err(), "{mode}: byte {i} ^ {flip:#x} was accepted");
            }
        }
        // The genuine one still opens: no refusal moved the window.
        assert!(b.open(at(1), PortId(0), &mut d.clone()).is_ok());
        assert_eq!(b.stats().ok, 1);
        assert_eq!(b.stats().refused(), d.len() as u64 * 3);
    }
}

#[test]
fn a_tag_check_guards_every_datagram_whatever_it_carries() {
    // A datagram's body is never looked at before its tag verifies: a forged body of any
    // packet type (here: a body with a valid tag of another key) is refused as a bad tag.
    let mut a = member(AuthMode::On, A, &[B]);
    let mut b = member(AuthMode::On, B, &[A]);
    let mut forger = LinkAuth::new(
        AuthMode::On,
        A,
        &[LinkPorts {
            peer: B,
            out: PortId(0),
            input: PortId(0),
        }],
        KeyInbox::new(),
    );
    let other = ClusterSecret::from_bytes([1; SECRET_LEN]);
    forger.apply(
        at(0),
        KeyUpdate::Install {
            epoch: Epoch(1),
            keys: vec![LinkKey {
                link: LinkId { from: A, to: B },
                key: other.link_key(LinkId { from: A, to: B }, Epoch(1)),
            }],
            activate: true,
        },
    );
    for body in [
        &b"\x01data"[..],
        b"\x02beacon",
        b"\x03nak",
        b"\x04ack",
        b"\x05batch",
    ] {
        let mut d = sealed(&mut forger, PORT_B, body);
        assert_eq!(b.open(at(1), PortId(0), &mut d), Err(AuthFailure::BadTag));
    }
    assert_eq!(b.stats().bad_tag, 5);
    let mut d = sealed(&mut a, PORT_B, b"\x02genuine");
    assert!(b.open(at(1), PortId(0), &mut d).is_ok());
}

#[test]
fn a_replayed_datagram_is_refused_after_its_tag_verifies() {
    let mut a = member(AuthMode::On, A, &[B]);
    let mut b = member(AuthMode::On, B, &[A]);
    let d = sealed(&mut a, PORT_B, b"once");
    assert!(b.open(at(1), PortId(0), &mut d.clone()).is_ok());
    assert_eq!(
        b.open(at(2), PortId(0), &mut d.clone()),
        Err(AuthFailure::Replay)
    );
    assert_eq!((b.stats().replay, b.stats().bad_tag), (1, 0));
}

#[test]
fn a_forged_datagram_never_moves_the_replay_window() {
    // RFC 6479 §2 / IPsec: update the window only after the integrity check. A forger that
    // could move it would make the genuine datagram with the same counter a "replay".
    let mut a = member(AuthMode::On, A, &[B]);
    let mut b = member(AuthMode::On, B, &[A]);
    let genuine = sealed(&mut a, PORT_B, b"genuine");
    let mut forged = genuine.clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    assert_eq!(
        b.open(at(1), PortId(0), &mut forged),
        Err(AuthFailure::BadTag)
    );
    // A forged counter far ahead must not push the genuine one out of the window either.
    let mut ahead = genuine.clone();
    ahead[12..20].copy_from_slice(&(1u64 << 40).to_be_bytes());
    assert_eq!(
        b.open(at(1), PortId(0), &mut ahead),
        Err(AuthFailure::BadTag)
    );
    assert_eq!(b.open(at(2), PortId(0), &mut genuine.clone()), Ok(20..27));
}

#[test]
fn links_are_told_apart_by_key_peer_and_port() {
    let mut a = member(AuthMode::On, A, &[B, C]);
    let mut b = member(AuthMode::On, B, &[A]);
    let mut c = member(AuthMode::On, C, &[A]);
    // A datagram for C delivered to B: not B's link.
    let mut to_c = sealed(&mut a, PORT_C, b"for c");
    assert_eq!(
        b.open(at(1), PortId(0), &mut to_c.clone()),
        Err(AuthFailure::UnknownLink)
    );
    assert!(c.open(at(1), PortId(0), &mut to_c).is_ok());
    // From A's address but on another input port of the receiver: the wrong link.
    let mut a2 = member(AuthMode::On, A, &[B]);
    let mut d = sealed(&mut a2, PORT_B, b"x");
    let mut b2 = LinkAuth::new(
        AuthMode::On,
        B,
        &[LinkPorts {
            peer: A,
            out: PortId(0),
            input: PortId(3),
        }],
        KeyInbox::new(),
    );
    b2.apply(
        at(0),
        KeyUpdate::Install {
            epoch: Epoch(1),
            keys: keys_of(B, &[A], Epoch(1)),
            activate: true,
        },
    );
    assert_eq!(
        b2.open(at(1), PortId(0), &mut d.clone()),
        Err(AuthFailure::WrongLink)
    );
    assert!(b2.open(at(1), PortId(3), &mut d).is_ok());
    // Unsealed, short, or of the other mode.
    assert_eq!(
        b.open(at(1), PortId(0), &mut [1u8; 10]),
        Err(AuthFailure::Short)
    );
    assert_eq!(
        b.open(at(1), PortId(0), &mut [1u8; 64]),
        Err(AuthFailure::BadHeader)
    );
    let mut e = member(AuthMode::Encrypt, A, &[B]);
    let mut enc = sealed(&mut e, PORT_B, b"y");
    assert_eq!(
        b.open(at(1), PortId(0), &mut enc),
        Err(AuthFailure::BadHeader)
    );
}

#[test]
fn nothing_is_sealed_without_a_key() {
    let mut m = LinkAuth::new(
        AuthMode::On,
        A,
        &[LinkPorts {
            peer: B,
            out: PortId(0),
            input: PortId(0),
        }],
        KeyInbox::new(),
    );
    let mut d = vec![0u8; OVERHEAD + 4];
    assert!(m.seal(PortId(0), &mut d).is_err());
    assert!(m.seal(PortId(5), &mut d).is_err());
    assert_eq!(m.stats().no_key, 2);
}

/// A rotation as the controller runs it: install everywhere, then activate.
fn rotate(members: &mut [&mut LinkAuth], peers: &[(MemberIx, Vec<MemberIx>)], e: Epoch, now: u64) {
    for (m, (me, p)) in members.iter_mut().zip(peers) {
        m.apply(
            at(now),
            KeyUpdate::Install {
                epoch: e,
                keys: keys_of(*me, p, e),
                activate: false,
            },
        );
    }
    for m in members.iter_mut() {
        m.apply(
            at(now),
            KeyUpdate::Activate {
                epoch: e,
                grace_ns: 1_000,
            },
        );
    }
}

#[test]
fn a_rotation_accepts_both_epochs_during_the_switch_then_retires_the_old_one() {
    let mut a = member(AuthMode::On, A, &[B]);
    let mut b = member(AuthMode::On, B, &[A]);
    let old = sealed(&mut a, PORT_B, b"sealed before the switch");
    // Installed at b, not yet at a's sending side: a still sends epoch 1, b accepts it.
    b.apply(
        at(10),
        KeyUpdate::Install {
            epoch: Epoch(2),
            keys: keys_of(B, &[A], Epoch(2)),
            activate: false,
        },
    );
    a.apply(
        at(10),
        KeyUpdate::Install {
            epoch: Epoch(2),
            keys: keys_of(A, &[B], Epoch(2)),
            activate: false,
        },
    );
    a.apply(
        at(11),
        KeyUpdate::Activate {
            epoch: Epoch(2),
            grace_ns: 1_000,
        },
    );
    // a switched first: b, not yet activated, already accepts epoch 2 (installed).
    let new = sealed(&mut a, PORT_B, b"sealed after");
    assert_eq!(read_header(&new).unwrap().epoch, Epoch(2));
    assert!(b.open(at(12), PortId(0), &mut new.clone()).is_ok());
    b.apply(
        at(20),
        KeyUpdate::Activate {
            epoch: Epoch(2),
            grace_ns: 1_000,
        },
    );
    // Within the grace the old epoch's datagram (delayed in flight) is accepted ...
    assert!(b.open(at(500), PortId(0), &mut old.clone()).is_ok());
    // ... and after it, the old epoch is refused for good.
    let mut late = old.clone();
    late[12..20].copy_from_slice(&5u64.to_be_bytes()); // a fresh counter: not a replay
    assert_eq!(
        b.open(at(1_020), PortId(0), &mut late),
        Err(AuthFailure::UnknownEpoch)
    );
    assert_eq!(b.stats().unknown_epoch, 1);
}

#[test]
fn a_removed_members_old_keys_are_refused_after_the_next_rotation() {
    // C is removed: A and B rotate to epoch 2 without it. C's keys of epoch 1 (it kept them)
    // open nothing once the grace has passed.
    let mut a = member(AuthMode::On, A, &[B, C]);
    let mut b = member(AuthMode::On, B, &[A]);
    let mut c = member(AuthMode::On, C, &[A]);
    let before = sealed(&mut c, PortId(0), b"while a member");
    assert!(a.open(at(1), PORT_C, &mut before.clone()).is_ok());
    rotate(
        &mut [&mut a, &mut b],
        &[(A, vec![B]), (B, vec![A])],
        Epoch(2),
        100,
    );
    let after = sealed(&mut c, PortId(0), b"after removal");
    assert_eq!(
        a.open(at(100 + 1_000), PORT_C, &mut after.clone()),
        Err(AuthFailure::UnknownEpoch)
    );
    // A and B go on in the new epoch.
    let mut ab = sealed(&mut a, PORT_B, b"go on");
    assert!(b.open(at(2_000), PortId(0), &mut ab).is_ok());
}

#[test]
fn a_superseded_next_epoch_is_replaced_and_an_older_one_never_installed() {
    let mut b = member(AuthMode::On, B, &[A]);
    for e in [3, 2, 5] {
        b.apply(
            at(1),
            KeyUpdate::Install {
                epoch: Epoch(e),
                keys: keys_of(B, &[A], Epoch(e)),
                activate: false,
            },
        );
    }
    let epochs: Vec<Epoch> = b.ins[&A].epochs().collect();
    assert_eq!(epochs, vec![Epoch(1), Epoch(5)]);
    // Activating an epoch never installed changes nothing.
    b.apply(
        at(2),
        KeyUpdate::Activate {
            epoch: Epoch(4),
            grace_ns: 0,
        },
    );
    assert_eq!(b.stats().epoch, 1);
}

#[test]
fn updates_left_in_the_inbox_apply_in_order_at_the_next_poll() {
    let inbox = KeyInbox::new();
    let mut m = LinkAuth::new(
        AuthMode::On,
        A,
        &[LinkPorts {
            peer: B,
            out: PortId(0),
            input: PortId(0),
        }],
        inbox.clone(),
    );
    inbox.push(KeyUpdate::Install {
        epoch: Epoch(4),
        keys: keys_of(A, &[B], Epoch(4)),
        activate: false,
    });
    inbox.push(KeyUpdate::Activate {
        epoch: Epoch(4),
        grace_ns: 0,
    });
    m.poll_updates(at(1));
    assert_eq!((m.stats().epoch, m.stats().epochs_installed), (4, 1));
    assert!(inbox.take().is_empty());
}

#[test]
fn the_replay_window_takes_each_counter_once_within_its_span() {
    let mut w = ReplayWindow::default();
    assert_eq!(w.top(), None);
    assert_eq!(w.mark(5), Ok(()));
    assert_eq!(w.top(), Some(5));
    assert_eq!(w.mark(5), Err(Replay::Duplicate));
    assert_eq!(w.mark(3), Ok(()), "reordered within the window");
    assert_eq!(w.mark(3000), Ok(()));
    assert_eq!(
        w.mark(3000 - REPLAY_WINDOW_BITS as u64),
        Err(Replay::TooOld)
    );
    assert_eq!(w.mark(3001 - REPLAY_WINDOW_BITS as u64), Ok(()));
    assert_eq!(w.mark(5), Err(Replay::TooOld));
    assert_eq!(w.mark(u64::MAX), Ok(()));
    assert_eq!(w.mark(u64::MAX), Err(Replay::Duplicate));
}

proptest! {
    /// The window against a model that remembers everything: it accepts a counter exactly
    /// when the model has not seen it and it is within the span below the highest seen.
    #[test]
    fn replay_window_agrees_with_a_model_that_remembers_everything(
        steps in proptest::collection::vec((0u64..6_000, any::<bool>()), 1..400)
    ) {
        let mut w = ReplayWindow::default();
        let mut seen = BTreeSet::new();
        let mut top: Option<u64> = None;
        for (c, jump) in steps {
            let c = if jump { c * 7 } else { c };
            let expect = match top {
                Some(t) if c <= t && t - c >= REPLAY_WINDOW_BITS as u64 => Err(Replay::TooOld),
                _ if seen.contains(&c) => Err(Replay::Duplicate),
                _ => Ok(()),
            };
            prop_assert_eq!(w.mark(c), expect, "counter {}", c);
            if expect.is_ok() {
                seen.insert(c);
                top = Some(top.map_or(c, |t| t.max(c)));
            }
        }
    }

    /// Nothing from the network panics the opener, and nothing random is accepted.
    #[test]
    fn random_datagrams_are_refused_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), kind in any::<bool>()) {
        let mut b = member(AuthMode::On, B, &[A]);
        let mut d = bytes;
        if kind && d.len() >= HEADER_LEN {
            // A plausible header: right kind, link and epoch; only the tag is wrong.
            write_header(&mut d[..HEADER_LEN], KIND_AUTH, LinkId { from: A, to: B }, Epoch(1), 9);
        }
        prop_assert!(b.open(at(1), PortId(0), &mut d).is_err());
    }
}

#[test]
fn datagrams_that_arrive_out_of_order_open_and_are_counted() {
    let mut a = member(AuthMode::On, A, &[B]);
    let mut b = member(AuthMode::On, B, &[A]);
    let d: Vec<Vec<u8>> = (0..4).map(|i| sealed(&mut a, PORT_B, &[i; 8])).collect();
    for i in [0, 3, 1, 2] {
        assert!(b.open(at(1), PortId(0), &mut d[i].clone()).is_ok());
    }
    assert_eq!((b.stats().reordered, b.stats().reorder_depth_max), (2, 2));
}

/// Every refusal reason is a counter of `AuthStats::counters`, and `refused` sums exactly them.
#[test]
fn refusal_reasons_name_the_counters_refused_sums() {
    let names: Vec<&str> = AuthStats::default()
        .counters()
        .iter()
        .map(|(k, _)| *k)
        .collect();
    for r in REFUSAL_REASONS {
        assert!(names.contains(&format!("auth_{r}").as_str()), "{r}");
    }
    let mut s = AuthStats::default();
    for (i, f) in [
        AuthFailure::Short,
        AuthFailure::BadHeader,
        AuthFailure::UnknownLink,
        AuthFailure::WrongLink,
        AuthFailure::UnknownEpoch,
        AuthFailure::BadTag,
        AuthFailure::Replay,
    ]
    .into_iter()
    .enumerate()
    {
        s.count(f);
        assert_eq!(s.refused(), i as u64 + 1);
    }
    assert_eq!(REFUSAL_REASONS.len(), 7);
}
