//! Distrust the wire (STYLE.md §7): the runtime's decoders of what arrives from the network,
//! fed random buffers and mutated valid encodings (`onepipe_testalloc::fuzz`;
//! `ONEPIPE_FUZZ_CASES` cases each, docs/TESTING.md):
//!
//! * [`decode_datagram`]: a received datagram (or a GRO receive of several) into packets;
//! * the control connection's lines: [`read_line`] off the stream, [`parse_line`] into a
//!   [`ToController`] (what the controller reads) or a [`FromController`] (what every member
//!   reads), and the §5.2 messages they carry, [`WireCtrl`] and [`WireRelay`] (hex of
//!   `onepipe_proto::failure::codec`'s bytes), into the proto messages they stand for;
//! * that codec itself, [`codec::decode_ctrl`] and [`codec::decode_relay`], on bytes (the
//!   controller store's log entries use it too: `crates/ctrlstore/tests/decoders.rs`).
//!
//! Every case: no panic; a valid encoding decodes back to itself; garbage is a typed error, or
//! a value that encodes to something that decodes to it again; and one decode allocates no more
//! than its bound. JSON lines are also mutated as JSON (numbers, strings, tags and lists
//! replaced, repeated or nested), so that most reach the typed deserializers rather than the
//! tokenizer's first error.

use bytes::Bytes;
use onepipe_proto::failure::{codec, CtrlMsg, RelayMsg};
use onepipe_proto::ids::{LinkId, NodeId, ProcId, Psn};
use onepipe_proto::time::Timestamp;
use onepipe_proto::wire::{
    flags, Ack, AckBatch, Beacon, DataHeader, DataPacket, Nak, NakReason, Packet, ACK_BATCH_LEN_MAX,
};
use onepipe_runtime::coalesce::{decode_datagram, DatagramDecode, FramingError, PADDING};
use onepipe_runtime::control::{
    parse_line, read_line, FromController, JoinAs, Member, MemberStatus, ToController, LINE_LEN_MAX,
};
use onepipe_runtime::failure::{WireCtrl, WireRelay};
use onepipe_runtime::{Cluster, LocalLayout};
use onepipe_testalloc::fuzz::{self, ensure, Bound, Closest, Rng};
use onepipe_testalloc::{measure, CountingAlloc};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{self, BufReader, Read};
use std::net::SocketAddr;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

// --- Packets and datagrams -------------------------------------------------------------------

fn ts(rng: &mut Rng) -> Timestamp {
    Timestamp::new(rng.interesting())
}

fn ack(rng: &mut Rng) -> Ack {
    Ack {
        from: ProcId(rng.u32()),
        to: ProcId(rng.u32()),
        cum_psn: Psn(rng.u32()),
        sack: rng.u64(),
        reliable: rng.bool(),
        ecn: rng.u8(),
        rwnd: rng.u8(),
    }
}

/// Defined data flags the encoder may write: `RELIABLE` and `PLAIN` never together (the
/// decoder refuses that pair), so of the two, `PLAIN` is dropped. No extra draw: the stream of
/// random numbers is what it was before the flag existed.
fn encodable_flags(f: u8) -> u8 {
    match f & flags::EXCLUSIVE == flags::EXCLUSIVE {
        true => f & !flags::PLAIN,
        false => f,
    }
}

/// Any packet the encoder can write (as `onepipe-proto`'s `tests/decoders.rs`), payloads up to
/// `payload_max` bytes.
fn packet(rng: &mut Rng, payload_max: usize) -> Packet {
    match rng.below(5) {
        0 => Packet::Data(DataPacket {
            header: DataHeader {
                flags: encodable_flags(rng.below(u64::from(flags::ALL) + 1) as u8),
                frag: rng.u32() as u16,
                ts: ts(rng),
                barrier: ts(rng),
                commit: ts(rng),
                psn: Psn(rng.u32()),
                src: ProcId(rng.u32()),
                dst: ProcId(rng.u32()),
            },
            payload: Bytes::from(rng.some_bytes(payload_max)),
        }),
        1 => Packet::Beacon(Beacon {
            from: NodeId(rng.u32()),
            barrier: ts(rng),
            commit: ts(rng),
            demand: false,
        }),
        2 => Packet::Nak(Nak {
            reason: *rng.pick(&[
                NakReason::Late,
                NakReason::Incomplete,
                NakReason::BufferFull,
                NakReason::Lost,
            ]),
            from: ProcId(rng.u32()),
            to: ProcId(rng.u32()),
            psn: Psn(rng.u32()),
            ts: ts(rng),
            reliable: rng.bool(),
            seq: rng.u8(),
        }),
        3 => Packet::Ack(ack(rng)),
        _ => {
            let n = 1 + rng.len((payload_max / 24).clamp(1, ACK_BATCH_LEN_MAX) - 1);
            let acks = (0..n).map(|_| ack(rng)).collect();
            Packet::AckBatch(AckBatch::new(acks).expect("1..=ACK_BATCH_LEN_MAX entries"))
        }
    }
}

fn encoded(p: &Packet) -> Vec<u8> {
    let mut b = Vec::with_capacity(p.encoded_len());
    p.encode(&mut b);
    b
}

/// A datagram as the coalescer builds it: packets back to back; with GSO segments (a segment
/// length above 0), a packet that does not fit the rest of its segment opens the next one and
/// the segment is padded with zeros to its length (the last one is not).
///
/// The test's input is the segment length (8 bytes, little-endian) and then the datagram, so
/// that mutations reach the segment length too (made 0, 1, huge).
fn datagram(rng: &mut Rng) -> ((Vec<Packet>, usize), Vec<u8>) {
    let seg = if rng.percent(40) {
        0
    } else {
        64 + rng.len(1_472 - 64)
    };
    let n = 1 + rng.len(40);
    let packets: Vec<Packet> = (0..n)
        .map(|_| packet(rng, if seg == 0 { 1_500 } else { seg - 36 }))
        .collect();
    assert!(packets.iter().all(|p| seg == 0 || p.encoded_len() <= seg));
    let mut bytes = (seg as u64).to_le_bytes().to_vec();
    let mut segment_start = 0;
    for p in &packets {
        let at = bytes.len() - 8;
        if seg > 0 && at + p.encoded_len() > segment_start + seg {
            segment_start += seg;
            bytes.resize(8 + segment_start, PADDING);
        }
        p.encode(&mut bytes);
    }
    ((packets, seg), bytes)
}

/// The segment length and the received buffer an input stands for (the buffer is made outside
/// the measured decode: the receive path owns it already).
fn received(input: &[u8]) -> (usize, Bytes) {
    match input.split_first_chunk::<8>() {
        Some((seg, rest)) => (
            u64::from_le_bytes(*seg) as usize,
            Bytes::copy_from_slice(rest),
        ),
        None => (0, Bytes::copy_from_slice(input)),
    }
}

/// Every packet of a datagram is at least 20 bytes (a beacon) and goes into the caller's `Vec`,
/// which holds at most twice its packets while growing, and its old block while it moves
/// (3 × `size_of::<Packet>()` per 20 bytes); an ACK batch also allocates its entries
/// (`size_of::<Ack>()` per 24-byte entry, at most a byte per byte); plus the first 4 packets'
/// room and the shared-buffer header of the first slice.
fn datagram_bound() -> Bound {
    let packet = size_of::<Packet>();
    Bound::new(
        3 * packet + 20 * size_of::<Ack>().div_ceil(24),
        20,
        4 * packet + 64,
    )
}

#[test]
fn decode_datagram_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder_with(
        "coalesce::decode_datagram",
        datagram_bound(),
        datagram,
        received,
        |_, (seg, d)| {
            let mut out = Vec::new();
            let r = decode_datagram(d, *seg, &mut out);
            (r, out)
        },
        |_, (_, d), (r, out), valid| {
            ensure(r.packets == out.len(), || {
                "the count is not the packets".into()
            })?;
            if let Some((packets, _)) = valid {
                let want = DatagramDecode {
                    packets: packets.len(),
                    error: None,
                };
                return ensure(*r == want && out == packets, || "no round trip".into());
            }
            for p in out {
                ensure(
                    Packet::decode(&encoded(p)).is_ok_and(|(q, _)| q == *p),
                    || format!("{p:?} does not re-encode"),
                )?;
            }
            let consistent = match r.error {
                None => r.packets > 0,
                Some(FramingError::Empty) => r.packets == 0,
                Some(FramingError::Padding { at }) => d.get(at) == Some(&PADDING),
                Some(FramingError::Packet(_)) => true,
            };
            ensure(consistent, || {
                "the error does not describe the datagram".into()
            })
        },
    );
}

// --- JSON values -----------------------------------------------------------------------------

/// A string with what JSON must escape, non-ASCII and long runs.
fn text(rng: &mut Rng) -> String {
    const PIECES: [&str; 12] = [
        "a", "tor-0", "spine-1", "\"", "\\", "\n", "\u{0}", "é", "😀", " ", "{", "p7",
    ];
    let n = rng.len(24);
    (0..n).map(|_| *rng.pick(&PIECES)).collect()
}

fn addr(rng: &mut Rng) -> SocketAddr {
    let port = rng.u32() as u16;
    if rng.bool() {
        SocketAddr::from((rng.u32().to_be_bytes(), port))
    } else {
        let ip = u128::from(rng.u64()) << 64 | u128::from(rng.u64());
        SocketAddr::from((ip.to_be_bytes(), port))
    }
}

fn list<T>(rng: &mut Rng, max: usize, mut item: impl FnMut(&mut Rng) -> T) -> Vec<T> {
    let n = rng.len(max);
    (0..n).map(|_| item(rng)).collect()
}

/// A timestamp's raw nanoseconds, 48 bits (what the proto messages hold).
fn raw_ts(rng: &mut Rng) -> u64 {
    Timestamp::new(rng.interesting()).raw()
}

fn pairs(rng: &mut Rng) -> Vec<(u32, u64)> {
    list(rng, 40, |r| (r.u32(), raw_ts(r)))
}

fn numbers(rng: &mut Rng) -> Vec<u32> {
    list(rng, 40, |r| r.interesting() as u32)
}

fn member(rng: &mut Rng) -> Member {
    match rng.bool() {
        true => Member::Aggregator(text(rng)),
        false => Member::Process(rng.u32()),
    }
}

fn counters(rng: &mut Rng) -> BTreeMap<String, u64> {
    list(rng, 16, |r| (text(r), r.interesting()))
        .into_iter()
        .collect()
}

fn opt_ts(rng: &mut Rng) -> Option<u64> {
    rng.bool().then(|| raw_ts(rng))
}

fn proc_pairs(rng: &mut Rng) -> Vec<(ProcId, Timestamp)> {
    pairs(rng)
        .into_iter()
        .map(|(p, t)| (ProcId(p), Timestamp::new(t)))
        .collect()
}

fn procs(rng: &mut Rng) -> Vec<ProcId> {
    numbers(rng).into_iter().map(ProcId).collect()
}

fn opt_stamp(rng: &mut Rng) -> Option<Timestamp> {
    opt_ts(rng).map(Timestamp::new)
}

/// Any §5.2 control message (ids any numbers: the receiver checks them).
fn ctrl_msg(rng: &mut Rng) -> CtrlMsg {
    let (round, a) = (rng.u32(), rng.u32());
    match rng.below(10) {
        0 => CtrlMsg::LinkDown {
            reporter: NodeId(round),
            link: LinkId(a),
            last_commit: opt_stamp(rng),
        },
        1 => CtrlMsg::Failure {
            round,
            failed: proc_pairs(rng),
            correct: numbers(rng).into_iter().map(NodeId).collect(),
        },
        2 => CtrlMsg::Recall {
            round,
            from: NodeId(a),
            groups: proc_pairs(rng),
            unacked: list(rng, 40, |r| {
                (ProcId(r.u32()), ProcId(r.u32()), Psn(r.u32()), r.u32())
            }),
        },
        3 => CtrlMsg::RecallAck {
            round,
            from: NodeId(a),
        },
        4 => CtrlMsg::Completed {
            round,
            host: NodeId(a),
        },
        5 => CtrlMsg::Isolate { link: LinkId(a) },
        6 => CtrlMsg::Departed {
            host: NodeId(a),
            last: opt_stamp(rng),
        },
        7 => CtrlMsg::Depart { link: LinkId(a) },
        8 => CtrlMsg::CallbackTaken {
            round,
            host: NodeId(a),
        },
        _ => CtrlMsg::Resume {
            round,
            dead_links: numbers(rng).into_iter().map(LinkId).collect(),
        },
    }
}

/// Any relay; a forward carries well-formed packets.
fn relay_msg(rng: &mut Rng) -> RelayMsg {
    let (host, t) = (NodeId(rng.u32()), Timestamp::new(raw_ts(rng)));
    match rng.below(10) {
        0 => RelayMsg::Forward {
            from: host,
            packets: list(rng, 8, |r| packet(r, 200)),
        },
        1 => RelayMsg::Failed { ts: t },
        2 => RelayMsg::Recalled {
            groups: proc_pairs(rng),
        },
        3 => RelayMsg::RecoverRequest { host },
        4 => RelayMsg::Settle {
            failed: proc_pairs(rng),
            recalled: proc_pairs(rng),
        },
        5 => RelayMsg::Rejoin { host },
        6 => RelayMsg::Admit {
            link: LinkId(host.0),
            apply: rng.bool(),
        },
        7 => RelayMsg::Admitted {
            link: LinkId(host.0),
            alive: rng.bool(),
            barrier: opt_stamp(rng),
            commit: opt_stamp(rng),
        },
        8 => RelayMsg::Joined {
            procs: procs(rng),
            floor: t,
            failed: proc_pairs(rng),
        },
        _ => RelayMsg::PeerJoined {
            host,
            procs: procs(rng),
            floor: t,
        },
    }
}

fn wire_ctrl(rng: &mut Rng) -> WireCtrl {
    WireCtrl::from(&ctrl_msg(rng))
}

fn wire_relay(rng: &mut Rng) -> WireRelay {
    WireRelay::of(&relay_msg(rng))
}

fn to_controller(rng: &mut Rng) -> ToController {
    match rng.below(8) {
        0 => ToController::Join {
            member: match rng.bool() {
                true => JoinAs::Aggregator(text(rng)),
                false => JoinAs::Process(rng.bool().then(|| rng.u32())),
            },
        },
        1 => ToController::Bound { addr: addr(rng) },
        2 => ToController::Health {
            counters: counters(rng),
            metrics: rng.bool().then(|| addr(rng)),
        },
        3 => ToController::Leave {
            last: (rng.below(2) == 0).then(|| rng.u64()),
        },
        4 => ToController::Status,
        5 => ToController::Rejoin {
            member: member(rng),
            addr: addr(rng),
        },
        6 => ToController::Ctrl {
            to: rng.bool().then(|| rng.u32()),
            msg: wire_ctrl(rng),
        },
        _ => ToController::Relay {
            msg: wire_relay(rng),
        },
    }
}

/// A small generated cluster (one to three layers).
fn cluster(rng: &mut Rng) -> Cluster {
    let layout = LocalLayout {
        hosts: 1 + rng.below(6) as u32,
        procs_per_host: 1 + rng.below(2) as u32,
        layers: 1 + rng.below(3) as u8,
        ..LocalLayout::default()
    };
    Cluster::generate(&layout).expect("a small layout generates")
}

fn from_controller(rng: &mut Rng) -> FromController {
    match rng.below(13) {
        0 => FromController::Welcome {
            member: member(rng),
            bind: addr(rng),
        },
        1 => FromController::Ready {
            cluster: Box::new(cluster(rng)),
            rejoin: rng.bool(),
        },
        2 => FromController::Down {
            member: member(rng),
            reason: text(rng),
        },
        3 => FromController::Status {
            members: list(rng, 8, |r| MemberStatus {
                member: member(r),
                state: text(r),
                addr: r.bool().then(|| addr(r)),
                last_seen_ms: r.bool().then(|| r.interesting()),
                counters: counters(r),
                metrics: r.bool().then(|| addr(r)),
            }),
            malformed: rng.interesting(),
            metrics: rng.bool().then(|| addr(rng)),
        },
        4 => FromController::Ctrl {
            msg: wire_ctrl(rng),
        },
        5 => FromController::Relay {
            msg: wire_relay(rng),
        },
        6 => FromController::Joined {
            host: rng.u32(),
            procs: numbers(rng),
        },
        7 => FromController::Declared {
            round: rng.u32(),
            failed: pairs(rng),
        },
        8 => FromController::Error { message: text(rng) },
        11 => FromController::Waiting {
            processes: rng.u32(),
            of_processes: rng.u32(),
            aggregators: rng.u32(),
            of_aggregators: rng.u32(),
        },
        10 => FromController::Address {
            member: member(rng),
            addr: addr(rng),
        },
        9 => FromController::View {
            epoch: rng.interesting(),
            members: numbers(rng),
            joined: numbers(rng),
            left: numbers(rng),
            failed: numbers(rng),
        },
        _ => FromController::Standby {
            leader: rng.bool().then(|| text(rng)),
        },
    }
}

// --- JSON mutations --------------------------------------------------------------------------

/// One lexical token of a JSON text: where it is and what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    /// A string literal, quotes included.
    Str,
    /// A number, `true`, `false` or `null`.
    Scalar,
    /// `[`, at the start of a list.
    Open,
}

/// The tokens of `text` (a rough lexer: good enough to aim mutations at values).
fn tokens(text: &[u8]) -> Vec<(usize, usize, Token)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => {
                let mut j = i + 1;
                while j < text.len() && text[j] != b'"' {
                    j += if text[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(text.len());
                out.push((i, end, Token::Str));
                i = end;
            }
            b'[' => {
                out.push((i, i + 1, Token::Open));
                i += 1;
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                let mut j = i + 1;
                while j < text.len()
                    && (text[j].is_ascii_alphanumeric() || b".+-".contains(&text[j]))
                {
                    j += 1;
                }
                out.push((i, j, Token::Scalar));
                i = j;
            }
            _ => i += 1,
        }
    }
    out
}

/// Values that break typed deserializers: out of range, the wrong type, deep nesting, escapes
/// that are not characters, the other variants' tags (those the generators do not build too).
const REPLACEMENTS: [&str; 28] = [
    "-1",
    "4294967296",
    "18446744073709551616",
    "1e999",
    "-0",
    "0.5",
    "null",
    "true",
    "\"\"",
    "[]",
    "{}",
    "[0]",
    "\"\\ud800\"",
    "\"\\u0000\"",
    "\"ctrl\"",
    "\"relay\"",
    "\"ready\"",
    "\"forward\"",
    "\"link_down\"",
    "\"resume\"",
    "\"health\"",
    "\"status\"",
    "\"keys\"",
    "\"keys_activate\"",
    "\"keys_installed\"",
    "\"00112233445566778899aabbccddeeff\"",
    "\"1.2.3.4:5\"",
    "\"[::1]:0\"",
];

/// `valid` mutated as JSON: a value replaced, a string made long, a list's first item
/// repeated many times, or a value nested deep.
fn json_mutate(rng: &mut Rng, valid: &[u8]) -> Vec<u8> {
    let toks = tokens(valid);
    let Some(&(start, end, kind)) = (!toks.is_empty()).then(|| rng.pick(&toks)) else {
        return valid.to_vec();
    };
    let with = |mid: &[u8]| [&valid[..start], mid, &valid[end..]].concat();
    match (kind, rng.below(4)) {
        (Token::Open, 0 | 1) => {
            // The list's first item, repeated: a list far longer than any real one.
            let first_end = valid[end..]
                .iter()
                .position(|&c| c == b',' || c == b']')
                .map_or(valid.len(), |p| end + p);
            let item = &valid[end..first_end];
            if item.is_empty() {
                return with(b"[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0");
            }
            let n = 1 + rng.len(2_000);
            let mut mid = b"[".to_vec();
            for _ in 0..n {
                mid.extend_from_slice(item);
                mid.push(b',');
            }
            with(&mid)
        }
        (_, 0) => {
            let depth = 1 + rng.len(300);
            let mid = ["[".repeat(depth), "]".repeat(depth)].concat();
            with(mid.as_bytes())
        }
        (Token::Str, 1) => {
            let mut s = String::from("\"");
            let n = rng.len(4_000);
            const PIECES: [&str; 5] = ["a", "\\\"", "\\u00e9", "\\n", "é"];
            for _ in 0..n {
                let piece = *rng.pick(&PIECES);
                s.push_str(piece);
            }
            s.push('"');
            with(s.as_bytes())
        }
        _ => with(rng.pick(&REPLACEMENTS).as_bytes()),
    }
}

// --- JSON decoders ---------------------------------------------------------------------------

/// What parsing one JSON line may allocate. serde buffers a whole internally tagged message
/// (`"type"`, `"kind"`) as a tree of untyped values before it knows the variant: a list item as
/// short as `0,` (2 bytes) is one 32-byte node in a `Vec` that holds at most twice its items
/// while growing and its old block while it moves (3 × 32 / 2 = 48 bytes per input byte), and
/// the typed value built from the tree beside it adds a few more (an empty string, `"",`, is a
/// 32-byte node and then a 24-byte `String`); a list nested in a list, `[[[…]]]` up to
/// serde_json's depth limit of 128, is a `Vec` with room for 4 nodes (128 bytes) per `[` and its
/// `]`. 64 bytes per input byte, plus 16 KiB for the parser's scratch, error messages and the
/// smallest trees.
///
/// That is far more than the input: an 8 MiB line ([`LINE_LEN_MAX`]) of `0,` items made a
/// reader allocate 192 MiB (24 bytes per byte; nearly twice that when the count falls just past
/// a power of two) before accepting it. `json_lines_amplify_at_most_the_json_bound` measures it.
const JSON_BOUND: Bound = Bound::new(64, 1, 16 << 10);

/// Runs a JSON decoder: each case's valid value serialized as a control line (and parsed back
/// to itself), then garbage made from it, half of it mutated as JSON ([`json_mutate`]) and
/// half as bytes ([`fuzz::Case::garbage`]).
fn json_decoder<V: Serialize + PartialEq + Debug, R: Debug>(
    name: &str,
    mut valid: impl FnMut(&mut Rng) -> V,
    mut decode: impl FnMut(&[u8]) -> R,
    mut check: impl FnMut(&[u8], &R, Option<&V>) -> Result<(), String>,
) {
    let line = |v: &V| {
        let mut b = serde_json::to_vec(v).expect("serializes");
        b.push(b'\n');
        b
    };
    let mut closest = Closest::default();
    fuzz::run(name, |case| {
        let v = valid(&mut case.rng);
        let bytes = line(&v);
        case.record(&bytes);
        let (got, usage) = measure(|| decode(&bytes));
        closest.note(JSON_BOUND, bytes.len(), usage);
        JSON_BOUND.check(bytes.len(), usage)?;
        check(&bytes, &got, Some(&v)).map_err(|e| format!("valid {v:?} as {got:?}: {e}"))?;
        drop(got);
        let garbage = if case.rng.bool() {
            let g = json_mutate(&mut case.rng, &bytes);
            case.record(&g);
            g
        } else {
            case.garbage(&bytes, &mut |rng| line(&valid(rng)))
        };
        let (got, usage) = measure(|| decode(&garbage));
        closest.note(JSON_BOUND, garbage.len(), usage);
        JSON_BOUND.check(garbage.len(), usage)?;
        check(&garbage, &got, None).map_err(|e| format!("decoded as {got:?}: {e}"))
    });
    closest.report(name, JSON_BOUND);
}

/// A line's parse: the valid one back to itself; garbage an error with a description (what an
/// `Error` reply carries), or a value that serializes to a line that parses to it again.
fn check_parse<T>(got: &Result<T, String>, valid: Option<&T>) -> Result<(), String>
where
    T: Serialize + for<'de> serde::Deserialize<'de> + PartialEq + Debug,
{
    match (got, valid) {
        (got, Some(want)) => ensure(got.as_ref() == Ok(want), || "no round trip".into()),
        (Ok(v), None) => {
            let again = serde_json::to_vec(v).map_err(|e| e.to_string())?;
            ensure(parse_line::<T>(&again).as_ref() == Ok(v), || {
                "does not parse back to itself".into()
            })
        }
        (Err(e), None) => ensure(!e.is_empty(), || "an error without a description".into()),
    }
}

#[test]
fn parse_line_to_controller_never_panics_nor_overallocates_on_random_and_mutated_input() {
    json_decoder(
        "control::parse_line::<ToController>",
        to_controller,
        parse_line::<ToController>,
        |_, got, valid| check_parse(got, valid),
    );
}

#[test]
fn parse_line_from_controller_never_panics_nor_overallocates_on_random_and_mutated_input() {
    json_decoder(
        "control::parse_line::<FromController>",
        from_controller,
        parse_line::<FromController>,
        |_, got, valid| check_parse(got, valid),
    );
}

/// A `WireCtrl` as it arrives inside a line, and the proto message it becomes: the hex must
/// be exactly one message's encoding (decoded as the line is parsed; the receiver checks the
/// ids).
#[test]
fn wire_ctrl_never_panics_nor_overallocates_on_random_and_mutated_input() {
    json_decoder(
        "failure::WireCtrl",
        wire_ctrl,
        |b| parse_line::<WireCtrl>(b).map(|w| (CtrlMsg::from(w.clone()), w)),
        |_, got, valid| match (got, valid) {
            (Ok((c, w)), Some(want)) => ensure(w == want && WireCtrl::from(c) == *want, || {
                "no round trip".into()
            }),
            (Err(_), Some(_)) => Err("a valid message was refused".into()),
            (Ok((c, w)), None) => {
                let json = serde_json::to_vec(w).map_err(|e| e.to_string())?;
                ensure(
                    parse_line::<WireCtrl>(&json).is_ok_and(|again| CtrlMsg::from(again) == *c),
                    || "the message does not survive the wire form".into(),
                )
            }
            (Err(e), None) => ensure(!e.is_empty(), || "an error without a description".into()),
        },
    );
}

/// A `WireRelay` as it arrives inside a line, and the proto relay it becomes: the hex must be
/// exactly one relay's encoding, a forward's packets each exactly one well-formed packet, at
/// most `FORWARD_PACKETS_MAX` of them.
#[test]
fn wire_relay_never_panics_nor_overallocates_on_random_and_mutated_input() {
    json_decoder(
        "failure::WireRelay",
        wire_relay,
        |b| {
            let w = parse_line::<WireRelay>(b)?;
            Ok::<_, String>((w.clone(), w.into_relay()))
        },
        |_, got, valid| match (got, valid) {
            (Ok((w, Ok(r))), Some(want)) => ensure(w == want && WireRelay::of(r) == *want, || {
                "no round trip".into()
            }),
            (_, Some(_)) => Err("a valid relay was refused".into()),
            (Ok((_, Ok(r))), None) => {
                ensure(WireRelay::of(r).into_relay().as_ref() == Ok(r), || {
                    "the relay does not survive the wire form".into()
                })
            }
            (Ok((_, Err(e))) | Err(e), None) => {
                ensure(!e.is_empty(), || "an error without a description".into())
            }
        },
    );
}

/// What one decode of the §5.2 codec may allocate: its lists item by item (counts checked
/// against the bytes left first), the widest a (process, timestamp) pair, 16 bytes in memory
/// for 12 on the wire, up to 3 × while a `Vec` grows and moves (4 bytes per byte); a forward's
/// packets, each at least 24 bytes on the wire (its length and a beacon), 3 ×
/// `size_of::<Packet>()` each, plus its payload copied out and an ACK batch's entries.
fn codec_bound() -> Bound {
    let packet = size_of::<Packet>();
    Bound::new(3 * packet + 24 + size_of::<Ack>() + 96, 24, 4 * packet + 64)
}

/// A decode of the codec: the valid message back to itself; garbage a typed error, or a
/// message that encodes to exactly its bytes (the encoding is canonical).
fn check_codec<M: PartialEq + Debug>(
    input: &[u8],
    got: &Result<M, codec::DecodeError>,
    valid: Option<&M>,
    encode: fn(&M) -> Vec<u8>,
) -> Result<(), String> {
    match (got, valid) {
        (Ok(m), Some(want)) => ensure(m == want, || "did not decode back to itself".into()),
        (Err(_), Some(_)) => Err("a valid message was refused".into()),
        (Ok(m), None) => ensure(encode(m) == input, || {
            "decoded garbage does not encode back to its bytes".into()
        }),
        (Err(e), None) => ensure(!e.to_string().is_empty(), || "no description".into()),
    }
}

#[test]
fn codec_decode_ctrl_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder(
        "failure::codec::decode_ctrl",
        codec_bound(),
        |rng| {
            let m = ctrl_msg(rng);
            let b = codec::encode_ctrl(&m);
            (m, b)
        },
        codec::decode_ctrl,
        |input, got, valid| check_codec(input, got, valid, codec::encode_ctrl),
    );
}

#[test]
fn codec_decode_relay_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder(
        "failure::codec::decode_relay",
        codec_bound(),
        |rng| {
            let m = relay_msg(rng);
            let b = codec::encode_relay(&m);
            (m, b)
        },
        codec::decode_relay,
        |input, got, valid| check_codec(input, got, valid, codec::encode_relay),
    );
}

// --- Reading lines ---------------------------------------------------------------------------

/// A stream that hands out at most `chunk` bytes per read, as a socket may.
struct Chunked {
    data: Vec<u8>,
    at: usize,
    chunk: usize,
}

impl Read for Chunked {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let rest = &self.data[self.at..];
        let n = self.chunk.min(buf.len()).min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.at += n;
        Ok(n)
    }
}

/// A control connection's receive side: a reader of `capacity` bytes over a stream that hands
/// out `chunk` bytes at a time, and room for what it reads (made before the measured reads).
struct Connection {
    reader: BufReader<Chunked>,
    /// Every line read, back to back, and where each ends.
    read: Vec<u8>,
    ends: Vec<usize>,
}

impl Connection {
    fn new(stream: &[u8], capacity: usize, chunk: usize) -> Connection {
        let data = stream.to_vec();
        Connection {
            reader: BufReader::with_capacity(capacity, Chunked { data, at: 0, chunk }),
            read: Vec::with_capacity(stream.len()),
            ends: Vec::with_capacity(stream.len() + 1),
        }
    }

    /// Reads every line with [`read_line`], one line buffer reused as the control connection
    /// does; what it read goes to `read` and `ends` (room made beforehand: only `read_line`
    /// allocates here).
    fn read_all(&mut self) -> io::Result<()> {
        let mut buf = Vec::new();
        while read_line(&mut self.reader, &mut buf)? {
            self.read.extend_from_slice(&buf);
            self.ends.push(self.read.len());
        }
        Ok(())
    }
}

/// Several control lines back to back, and the reader's capacity and chunk size in front
/// (4 bytes): mutations reach the framing and the sizes too.
fn stream(rng: &mut Rng) -> ((), Vec<u8>) {
    let mut b = vec![rng.u8(), rng.u8(), rng.u8(), rng.u8()];
    for _ in 0..1 + rng.len(8) {
        let line = match rng.bool() {
            true => serde_json::to_vec(&to_controller(rng)),
            false => serde_json::to_vec(&from_controller(rng)),
        };
        b.extend(line.expect("serializes"));
        b.push(b'\n');
    }
    ((), b)
}

/// The line buffer holds at most twice the longest line while growing, and its old block
/// while it moves: 3 bytes per input byte, and a first 8 bytes.
#[test]
fn read_line_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder_with(
        "control::read_line",
        Bound::new(3, 1, 8),
        stream,
        |input| {
            let sizes = input.get(..4).unwrap_or(&[1, 1, 1, 1]);
            let capacity = 1 + usize::from(sizes[0]) * 8 + usize::from(sizes[1]);
            let chunk = 1 + usize::from(sizes[2]) + usize::from(sizes[3]) * 64;
            let stream = input.get(4..).unwrap_or(&[]);
            std::cell::RefCell::new(Connection::new(stream, capacity, chunk))
        },
        |_, c| c.borrow_mut().read_all(),
        |input, c, got, _| {
            let stream = input.get(4..).unwrap_or(&[]);
            got.as_ref()
                .map_err(|e| format!("{e}: the stream is short"))?;
            let c = c.borrow();
            ensure(c.read == stream, || "lines lost or invented bytes".into())?;
            let mut start = 0;
            for (i, &end) in c.ends.iter().enumerate() {
                let line = &c.read[start..end];
                let inner = line[..line.len() - 1].iter().all(|&b| b != b'\n');
                let last = i + 1 == c.ends.len();
                ensure(inner && (line.ends_with(b"\n") || last), || {
                    format!("line {i} is not one line")
                })?;
                start = end;
            }
            Ok(())
        },
    );
}

/// A stream that never ends a line.
struct Endless;

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        buf.fill(b'x');
        Ok(buf.len())
    }
}

/// A peer that sends a line without end is cut off at [`LINE_LEN_MAX`]: the reader refuses it
/// after reading at most one more buffer, having held no more than 3 × what it read.
#[test]
fn an_endless_line_is_refused_at_the_line_limit_without_growing_past_it() {
    let capacity = 8 << 10;
    let mut r = BufReader::with_capacity(capacity, Endless);
    let mut buf = Vec::new();
    let (got, usage) = measure(|| read_line(&mut r, &mut buf));
    let e = got.expect_err("an endless line is an error");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(buf.len() > LINE_LEN_MAX && buf.len() <= LINE_LEN_MAX + capacity);
    assert!(usage.peak_bytes <= 3 * buf.len(), "{usage:?}");
}

/// The worst cases of [`JSON_BOUND`], built on purpose: long lists of the shortest items, as
/// JSON lists and inside the §5.2 messages' hex, and long maps of short distinct keys. Each stays within
/// the bound, and the most amplifying says by how much (seen with `--nocapture`).
#[test]
fn json_lines_amplify_at_most_the_json_bound() {
    let n = 20_000;
    let zeros = vec!["0"; n].join(",");
    let keys: Vec<String> = (0..n).map(|i| format!("\"{i:x}\":0")).collect();
    let keys = keys.join(",");
    let hex = |b: Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let resume = hex(codec::encode_ctrl(&CtrlMsg::Resume {
        round: 0,
        dead_links: vec![LinkId(0); n],
    }));
    let failure = hex(codec::encode_ctrl(&CtrlMsg::Failure {
        round: 0,
        failed: vec![(ProcId(0), Timestamp::new(0)); n],
        correct: Vec::new(),
    }));
    let beacon = Packet::Beacon(Beacon {
        from: NodeId(0),
        barrier: Timestamp::new(0),
        commit: Timestamp::new(0),
        demand: false,
    });
    let forward = hex(codec::encode_relay(&RelayMsg::Forward {
        from: NodeId(0),
        packets: vec![beacon; codec::FORWARD_PACKETS_MAX],
    }));
    let lines = [
        format!(r#"{{"type":"ctrl","to":null,"msg":"{resume}"}}"#),
        format!(r#"{{"type":"ctrl","to":null,"msg":"{failure}"}}"#),
        format!(r#"{{"type":"relay","msg":"{forward}"}}"#),
        format!(r#"{{"type":"health","counters":{{{keys}}}}}"#),
        format!(r#"{{"type":"joined","host":0,"procs":[{zeros}]}}"#),
    ];
    let mut worst = (0.0f64, String::new());
    for line in &lines {
        let len = line.len();
        let (to, usage_to) = measure(|| parse_line::<ToController>(line.as_bytes()));
        let (from, usage_from) = measure(|| parse_line::<FromController>(line.as_bytes()));
        assert!(to.is_ok() || from.is_ok(), "{}", &line[..60]);
        for usage in [usage_to, usage_from] {
            JSON_BOUND
                .check(len, usage)
                .unwrap_or_else(|e| panic!("{}: {e}", &line[..60]));
            let ratio = usage.peak_bytes as f64 / len as f64;
            if ratio > worst.0 {
                worst = (ratio, line[..60].to_string());
            }
        }
    }
    eprintln!(
        "JSON amplification at most {:.1} bytes per input byte ({}…)",
        worst.0, worst.1
    );
}
