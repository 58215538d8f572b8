use super::*;
use crate::wire::Beacon;
use proptest::prelude::*;

fn ts() -> impl Strategy<Value = Timestamp> {
    any::<u64>().prop_map(Timestamp::new)
}

fn pairs() -> impl Strategy<Value = Vec<(ProcId, Timestamp)>> {
    prop::collection::vec((any::<u32>().prop_map(ProcId), ts()), 0..6)
}

fn procs() -> impl Strategy<Value = Vec<ProcId>> {
    prop::collection::vec(any::<u32>().prop_map(ProcId), 0..6)
}

fn ctrl_msg() -> impl Strategy<Value = CtrlMsg> {
    let ids = || prop::collection::vec(any::<u32>(), 0..6);
    prop_oneof![
        (any::<u32>(), any::<u32>(), prop::option::of(ts())).prop_map(|(r, l, c)| {
            CtrlMsg::LinkDown {
                reporter: NodeId(r),
                link: LinkId(l),
                last_commit: c,
            }
        }),
        (any::<u32>(), pairs(), ids()).prop_map(|(round, failed, c)| CtrlMsg::Failure {
            round,
            failed,
            correct: c.into_iter().map(NodeId).collect(),
        }),
        (
            any::<u32>(),
            any::<u32>(),
            pairs(),
            prop::collection::vec(any::<(u32, u32, u32, u32)>(), 0..6)
        )
            .prop_map(|(round, from, groups, u)| CtrlMsg::Recall {
                round,
                from: NodeId(from),
                groups,
                unacked: u
                    .into_iter()
                    .map(|(s, d, p, f)| (ProcId(s), ProcId(d), Psn(p), f))
                    .collect(),
            }),
        (any::<u32>(), any::<u32>()).prop_map(|(round, from)| CtrlMsg::RecallAck {
            round,
            from: NodeId(from)
        }),
        (any::<u32>(), any::<u32>()).prop_map(|(round, host)| CtrlMsg::Completed {
            round,
            host: NodeId(host)
        }),
        (any::<u32>(), ids()).prop_map(|(round, l)| CtrlMsg::Resume {
            round,
            dead_links: l.into_iter().map(LinkId).collect(),
        }),
        any::<u32>().prop_map(|l| CtrlMsg::Isolate { link: LinkId(l) }),
        (any::<u32>(), prop::option::of(ts())).prop_map(|(h, last)| CtrlMsg::Departed {
            host: NodeId(h),
            last
        }),
        any::<u32>().prop_map(|l| CtrlMsg::Depart { link: LinkId(l) }),
        (any::<u32>(), any::<u32>()).prop_map(|(round, host)| CtrlMsg::CallbackTaken {
            round,
            host: NodeId(host)
        }),
    ]
}

fn beacon() -> impl Strategy<Value = Packet> {
    (any::<u32>(), ts(), ts(), any::<bool>()).prop_map(|(from, barrier, commit, demand)| {
        Packet::Beacon(Beacon {
            from: NodeId(from),
            barrier,
            commit,
            demand,
        })
    })
}

fn relay_msg() -> impl Strategy<Value = RelayMsg> {
    let opt = || prop::option::of(ts());
    prop_oneof![
        pairs().prop_map(|groups| RelayMsg::Recalled { groups }),
        any::<u32>().prop_map(|h| RelayMsg::RecoverRequest { host: NodeId(h) }),
        any::<u32>().prop_map(|h| RelayMsg::Rejoin { host: NodeId(h) }),
        (any::<u32>(), any::<bool>(), opt(), opt()).prop_map(|(l, alive, barrier, commit)| {
            RelayMsg::Admitted {
                link: LinkId(l),
                alive,
                barrier,
                commit,
            }
        }),
        (any::<u32>(), prop::collection::vec(beacon(), 0..4)).prop_map(|(from, packets)| {
            RelayMsg::Forward {
                from: NodeId(from),
                packets,
            }
        }),
        ts().prop_map(|ts| RelayMsg::Failed { ts }),
        (pairs(), pairs()).prop_map(|(failed, recalled)| RelayMsg::Settle { failed, recalled }),
        (any::<u32>(), any::<bool>()).prop_map(|(l, apply)| RelayMsg::Admit {
            link: LinkId(l),
            apply
        }),
        (procs(), ts(), pairs()).prop_map(|(procs, floor, failed)| RelayMsg::Joined {
            procs,
            floor,
            failed
        }),
        (any::<u32>(), procs(), ts()).prop_map(|(h, procs, floor)| RelayMsg::PeerJoined {
            host: NodeId(h),
            procs,
            floor
        }),
    ]
}

/// A decoder that says only whether its input is a message.
type Decode = fn(&[u8]) -> Result<(), DecodeError>;

proptest! {
    #[test]
    fn every_message_and_relay_round_trips_5_2(c in ctrl_msg(), r in relay_msg()) {
        prop_assert_eq!(decode_ctrl(&encode_ctrl(&c)), Ok(c));
        prop_assert_eq!(decode_relay(&encode_relay(&r)), Ok(r));
    }

    #[test]
    fn every_proper_prefix_and_any_extension_is_refused(c in ctrl_msg(), r in relay_msg()) {
        let decoders: [(Vec<u8>, Decode); 2] = [
            (encode_ctrl(&c), |b| decode_ctrl(b).map(drop)),
            (encode_relay(&r), |b| decode_relay(b).map(drop)),
        ];
        for (bytes, decode) in decoders {
            for n in 0..bytes.len() {
                prop_assert!(decode(&bytes[..n]).is_err());
            }
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert_eq!(decode(&longer), Err(DecodeError::Trailing(1)));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_what_decodes_is_canonical(
        bytes in prop::collection::vec(any::<u8>(), 0..64)
    ) {
        if let Ok(c) = decode_ctrl(&bytes) {
            prop_assert_eq!(encode_ctrl(&c), bytes.clone());
        }
        if let Ok(r) = decode_relay(&bytes) {
            prop_assert_eq!(encode_relay(&r), bytes);
        }
    }
}

#[test]
fn malformed_messages_are_typed_errors() {
    let good = encode_ctrl(&CtrlMsg::LinkDown {
        reporter: NodeId(1),
        link: LinkId(2),
        last_commit: Some(Timestamp::new(3)),
    });
    let mut bad = good.clone();
    bad[0] = 11;
    assert_eq!(decode_ctrl(&bad), Err(DecodeError::Tag(11)));
    let mut bad = good.clone();
    bad[9] = 2;
    assert_eq!(decode_ctrl(&bad), Err(DecodeError::Flag(2)));
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 1] = 0xff; // the top byte of the 48-bit timestamp
    assert_eq!(
        decode_ctrl(&bad),
        Err(DecodeError::Timestamp(0xff00_0000_0000_0003))
    );
    // A count far beyond the bytes left allocates nothing.
    let mut huge = vec![6];
    huge.extend_from_slice(&1u32.to_le_bytes());
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(decode_ctrl(&huge), Err(DecodeError::Truncated));
}

#[test]
fn a_forward_carries_at_most_its_limit_of_exactly_framed_well_formed_packets_5_2() {
    let beacon = Packet::Beacon(Beacon {
        from: NodeId(1),
        barrier: Timestamp::new(2),
        commit: Timestamp::new(3),
        demand: false,
    });
    let forward = |packets: Vec<Packet>| {
        encode_relay(&RelayMsg::Forward {
            from: NodeId(7),
            packets,
        })
    };
    let good = forward(vec![beacon.clone(); 2]);
    // tag, from, count, then per packet its length and bytes.
    let second = 1 + 4 + 4 + (4 + BEACON_LEN);
    let mut bad = good.clone();
    bad[second + 4] = 0xee; // its opcode
    assert!(matches!(
        decode_relay(&bad),
        Err(DecodeError::Packet(1, PacketError::Malformed(_)))
    ));
    // A packet stated one byte longer than it decodes from.
    let mut bad = good[..second].to_vec();
    bad.extend_from_slice(&(BEACON_LEN as u32 + 1).to_le_bytes());
    bad.extend_from_slice(&good[second + 4..]);
    bad.push(0);
    assert_eq!(
        decode_relay(&bad),
        Err(DecodeError::Packet(1, PacketError::Trailing(1)))
    );
    let many = forward(vec![beacon; FORWARD_PACKETS_MAX + 1]);
    assert_eq!(
        decode_relay(&many),
        Err(DecodeError::Forward(FORWARD_PACKETS_MAX + 1))
    );
    assert!(decode_relay(&many[..many.len() - 1]).is_err());
}
