//! The wire format: every message round trips, a cut or padded one is malformed, the order
//! flag of each kind, and the decoder never panics nor over-allocates on random and mutated
//! input (nor does a process handed garbage).

use super::*;

#[test]
fn codec_round_trips() {
    let e = WireEntry {
        ts: 5,
        client: 3,
        seq: 9,
        id: 11,
        cmd: Cmd::Cas {
            key: 1,
            expect: None,
            new: 2,
        },
        pad: 0,
    };
    let v = Value {
        epoch: 2,
        members: 0b101,
        keep: 7,
        entries: vec![e, e],
    };
    for m in [
        Msg::Entry {
            epoch: 1,
            seq: 2,
            id: 3,
            cmd: Cmd::Put(4, 5),
            pad: 10,
            commit: 6,
        },
        Msg::Commit { epoch: 1, upto: 3 },
        Msg::Read { rid: 1, key: 2 },
        Msg::Recover { epoch: 4 },
        Msg::AckAgain { epoch: 4, seq: 9 },
        Msg::Ack {
            epoch: 1,
            members: 7,
            seq: 2,
            pos: 3,
            checksum: 4,
            output: Some(5),
        },
        Msg::Reject {
            epoch: 1,
            seq: 2,
            expected: 1,
        },
        Msg::ReadReply {
            rid: 1,
            ok: true,
            value: None,
        },
        Msg::View {
            epoch: 1,
            members: 3,
            next_seq: 4,
        },
        Msg::Prepare {
            epoch: 1,
            ballot: 2,
        },
        Msg::Promise {
            epoch: 1,
            ballot: 2,
            accepted: Some((3, v.clone())),
            commit: 4,
            tail: vec![e],
        },
        Msg::Accept {
            ballot: 1,
            value: v.clone(),
        },
        Msg::Accepted {
            epoch: 1,
            ballot: 1,
        },
        Msg::Decide { value: v },
    ] {
        assert_eq!(decode(&encode(&m)), Some(m.clone()), "{m:?}");
        let b = encode(&m);
        assert_eq!(decode(&b[..b.len() - 1]), None, "{m:?} truncated");
    }
}

/// An entry carries its client's commit point between the command and the padding: it round
/// trips at any value, and an entry cut anywhere — in the commit point too — or with a byte too
/// many is malformed, never misread.
#[test]
fn an_entry_carries_the_commit_point_and_a_cut_one_is_malformed() {
    for (commit, pad, cmd) in [
        (0, 0, Cmd::Put(1, 2)),
        (u64::MAX, 3, Cmd::Put(u64::MAX, 7)),
        (
            1 << 40,
            16,
            Cmd::Cas {
                key: 4,
                expect: Some(5),
                new: 6,
            },
        ),
    ] {
        let m = Msg::Entry {
            epoch: 3,
            seq: 4,
            id: 5,
            cmd,
            pad,
            commit,
        };
        let b = encode(&m);
        assert_eq!(decode(&b), Some(m.clone()));
        // Kind, epoch, seq, id, the command, the commit point, the padding's length, its bytes.
        let cmd_len = b.len() - (1 + 3 * 8 + 8 + 4 + pad as usize);
        let at = 1 + 3 * 8 + cmd_len;
        assert_eq!(b[at..at + 8], commit.to_be_bytes(), "{m:?}");
        for cut in 0..b.len() {
            assert_eq!(decode(&b[..cut]), None, "{m:?} cut at {cut}");
        }
        let mut longer = b.to_vec();
        longer.push(0);
        assert_eq!(decode(&longer), None, "{m:?} with a byte too many");
    }
}

/// Which kinds take a place in 1Pipe's order (the module docs' table): what the receiver takes
/// at its timestamp, and the recovery round; every reply and notice goes unordered.
#[test]
fn only_entries_reads_ack_agains_and_recovery_rounds_are_ordered() {
    let v = Value {
        epoch: 1,
        members: 1,
        keep: 0,
        entries: Vec::new(),
    };
    let ordered = [
        entry(0, Cmd::Put(1, 1), 0),
        Msg::Read { rid: 1, key: 1 },
        Msg::AckAgain { epoch: 0, seq: 0 },
        Msg::Prepare {
            epoch: 1,
            ballot: 1,
        },
        Msg::Promise {
            epoch: 1,
            ballot: 1,
            accepted: None,
            commit: 0,
            tail: Vec::new(),
        },
        Msg::Accept {
            ballot: 1,
            value: v.clone(),
        },
        Msg::Accepted {
            epoch: 1,
            ballot: 1,
        },
        Msg::Decide { value: v },
    ];
    let unordered = [
        Msg::Ack {
            epoch: 0,
            members: 1,
            seq: 0,
            pos: 0,
            checksum: 0,
            output: None,
        },
        Msg::Reject {
            epoch: 0,
            seq: 1,
            expected: 0,
        },
        Msg::ReadReply {
            rid: 1,
            ok: true,
            value: None,
        },
        Msg::View {
            epoch: 1,
            members: 1,
            next_seq: 0,
        },
        Msg::Commit { epoch: 0, upto: 1 },
        Msg::Recover { epoch: 0 },
    ];
    assert!(ordered.iter().all(Msg::ordered));
    assert!(!unordered.iter().any(Msg::ordered));
}

fn fuzz_cmd(rng: &mut fuzz::Rng) -> Cmd {
    let (key, v) = (rng.interesting(), rng.interesting());
    match rng.below(3) {
        0 => Cmd::Get(key),
        1 => Cmd::Put(key, v),
        _ => Cmd::Cas {
            key,
            expect: rng.bool().then(|| rng.interesting()),
            new: v,
        },
    }
}

fn fuzz_entries(rng: &mut fuzz::Rng) -> Vec<WireEntry> {
    let n = rng.len(40);
    (0..n)
        .map(|_| WireEntry {
            ts: rng.interesting(),
            client: rng.u32(),
            seq: rng.interesting(),
            id: rng.interesting(),
            cmd: fuzz_cmd(rng),
            pad: rng.interesting() as u32,
        })
        .collect()
}

fn fuzz_value(rng: &mut fuzz::Rng) -> Value {
    Value {
        epoch: rng.interesting(),
        members: rng.interesting(),
        keep: rng.interesting(),
        entries: fuzz_entries(rng),
    }
}

/// Any message the encoder can write (an entry's padding up to 2 KiB).
fn fuzz_msg(rng: &mut fuzz::Rng) -> Msg {
    let mut x = || rng.interesting();
    let (a, b, c) = (x(), x(), x());
    match rng.below(14) {
        0 => Msg::Entry {
            epoch: a,
            seq: b,
            id: c,
            cmd: fuzz_cmd(rng),
            pad: rng.len(2048) as u32,
            commit: rng.interesting(),
        },
        1 => Msg::Commit { epoch: a, upto: b },
        2 => Msg::Read { rid: a, key: b },
        3 => Msg::Recover { epoch: a },
        4 => Msg::Ack {
            epoch: a,
            members: b,
            seq: c,
            pos: rng.interesting(),
            checksum: rng.u64(),
            output: rng.bool().then(|| rng.interesting()),
        },
        5 => Msg::Reject {
            epoch: a,
            seq: b,
            expected: c,
        },
        6 => Msg::ReadReply {
            rid: a,
            ok: rng.bool(),
            value: rng.bool().then(|| rng.interesting()),
        },
        7 => Msg::View {
            epoch: a,
            members: b,
            next_seq: c,
        },
        8 => Msg::Prepare {
            epoch: a,
            ballot: b,
        },
        9 => Msg::Promise {
            epoch: a,
            ballot: b,
            accepted: rng.bool().then(|| (rng.interesting(), fuzz_value(rng))),
            commit: c,
            tail: fuzz_entries(rng),
        },
        10 => Msg::Accept {
            ballot: a,
            value: fuzz_value(rng),
        },
        12 => Msg::AckAgain { epoch: a, seq: b },
        11 => Msg::Accepted {
            epoch: a,
            ballot: b,
        },
        _ => Msg::Decide {
            value: fuzz_value(rng),
        },
    }
}

/// A message allocates its entry lists (a promise has two), collected one by one into `Vec`s,
/// for counts checked against the bytes left at 41 bytes an entry: at most twice the entries
/// while growing, and the old block while it moves (3 × `size_of::<WireEntry>()` per 41 input
/// bytes), and at least 4 entries' room per list.
#[test]
fn decode_never_panics_nor_overallocates_on_random_and_mutated_input() {
    let entry = size_of::<WireEntry>();
    let bound = Bound::new(3 * entry, 41, 2 * 4 * entry);
    fuzz::decoder(
        "repl::onertt::decode",
        bound,
        |rng| {
            let m = fuzz_msg(rng);
            let b = encode(&m).to_vec();
            (m, b)
        },
        decode,
        // Padding is opaque (its length is kept, not its bytes): a decoded message re-encodes
        // to its length and decodes to itself.
        |bytes, got, valid| match (got, valid) {
            (got, Some(want)) => ensure(got.as_ref() == Some(want), || "no round trip".into()),
            (Some(m), None) => {
                let again = encode(m);
                ensure(
                    again.len() == bytes.len() && decode(&again).as_ref() == Some(m),
                    || "does not re-encode to itself".into(),
                )
            }
            (None, None) => Ok(()),
        },
    );
}

proptest! {
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), src in 0u32..6) {
        let mut net = Net::new(3, 2, 2, 0.0, 1);
        net.run(100_000);
        for p in 0..5 {
            net.input(p, AppInput::Deliver {
                src: ProcId(src),
                ts: Timestamp::new(200_000),
                reliable: false,
                payload: &bytes,
            });
        }
        net.run(2_000_000);
    }
}
