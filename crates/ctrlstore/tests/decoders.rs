//! Distrust the store (the module docs of `codec.rs`: it is shared and may hold anything): the
//! log-entry decoder [`Entry::decode`], fed random buffers and mutated valid encodings
//! (`onepipe_testalloc::fuzz`; `ONEPIPE_FUZZ_CASES` cases, docs/TESTING.md). Every case: no
//! panic; a valid entry decodes back to itself; garbage is a typed error, or an entry that
//! encodes back to exactly its bytes (the format has one encoding per entry); and one decode
//! allocates no more than its bound. An entry's message or relay is
//! `onepipe_proto::failure::codec`'s encoding, which `crates/runtime/tests/decoders.rs` fuzzes
//! on its own, every variant (the live control lines carry it too).

use onepipe_ctrlstore::codec::DecodeError;
use onepipe_ctrlstore::Entry;
use onepipe_proto::failure::{CtrlMsg, RelayMsg};
use onepipe_proto::{Instant, LinkId, NodeId, ProcId, Psn, Timestamp};
use onepipe_testalloc::fuzz::{self, ensure, Bound, Rng};
use onepipe_testalloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// What one decode may allocate: its lists, each collected item by item into a `Vec` (counts
/// are checked against the bytes left first, so never more items than the bytes hold). The
/// widest item per wire byte is a (process, timestamp) pair, 16 bytes in memory for 12 on the
/// wire; a growing `Vec` holds at most twice its items, and while it moves, its old block too
/// (3 × 16 / 12 = 4 bytes per input byte). 64 bytes for the smallest `Vec` of 4 items.
const BOUND: Bound = Bound::new(4, 1, 64);

fn ts(rng: &mut Rng) -> Timestamp {
    Timestamp::new(rng.interesting())
}

fn list<T>(rng: &mut Rng, item: impl FnMut(&mut Rng) -> T) -> Vec<T> {
    let mut item = item;
    let n = rng.len(64);
    (0..n).map(|_| item(rng)).collect()
}

fn pair(rng: &mut Rng) -> (ProcId, Timestamp) {
    (ProcId(rng.u32()), ts(rng))
}

fn ctrl_msg(rng: &mut Rng) -> CtrlMsg {
    match rng.below(10) {
        0 => CtrlMsg::LinkDown {
            reporter: NodeId(rng.u32()),
            link: LinkId(rng.u32()),
            last_commit: rng.bool().then(|| ts(rng)),
        },
        1 => CtrlMsg::Failure {
            round: rng.u32(),
            failed: list(rng, pair),
            correct: list(rng, |r| NodeId(r.u32())),
        },
        2 => CtrlMsg::Recall {
            round: rng.u32(),
            from: NodeId(rng.u32()),
            groups: list(rng, pair),
            unacked: list(rng, |r| {
                (ProcId(r.u32()), ProcId(r.u32()), Psn(r.u32()), r.u32())
            }),
        },
        3 => CtrlMsg::RecallAck {
            round: rng.u32(),
            from: NodeId(rng.u32()),
        },
        4 => CtrlMsg::Completed {
            round: rng.u32(),
            host: NodeId(rng.u32()),
        },
        5 => CtrlMsg::Isolate {
            link: LinkId(rng.u32()),
        },
        6 => CtrlMsg::Departed {
            host: NodeId(rng.u32()),
            last: (rng.below(2) == 0).then(|| ts(rng)),
        },
        7 => CtrlMsg::Depart {
            link: LinkId(rng.u32()),
        },
        8 => CtrlMsg::CallbackTaken {
            round: rng.u32(),
            host: NodeId(rng.u32()),
        },
        _ => CtrlMsg::Resume {
            round: rng.u32(),
            dead_links: list(rng, |r| LinkId(r.u32())),
        },
    }
}

/// The relays a controller takes as inputs (the only ones a log entry holds).
fn relay_msg(rng: &mut Rng) -> RelayMsg {
    match rng.below(4) {
        0 => RelayMsg::Recalled {
            groups: list(rng, pair),
        },
        1 => RelayMsg::RecoverRequest {
            host: NodeId(rng.u32()),
        },
        2 => RelayMsg::Rejoin {
            host: NodeId(rng.u32()),
        },
        _ => RelayMsg::Admitted {
            link: LinkId(rng.u32()),
            alive: rng.bool(),
            barrier: rng.bool().then(|| ts(rng)),
            commit: rng.bool().then(|| ts(rng)),
        },
    }
}

fn entry(rng: &mut Rng) -> (Entry, Vec<u8>) {
    let at = Instant(rng.interesting());
    let e = match rng.below(3) {
        0 => Entry::Timeout { at },
        1 => Entry::Message {
            at,
            msg: ctrl_msg(rng),
        },
        _ => Entry::Relay {
            at,
            msg: relay_msg(rng),
        },
    };
    let b = e.encode().expect("small entries of input relays encode");
    (e, b)
}

fn check(
    input: &[u8],
    got: &Result<Entry, DecodeError>,
    valid: Option<&Entry>,
) -> Result<(), String> {
    match (got, valid) {
        (Ok(e), Some(want)) => ensure(e == want, || "did not decode back to itself".into()),
        (Err(_), Some(_)) => Err("a valid entry was refused".into()),
        (Ok(e), None) => ensure(e.encode().is_ok_and(|b| b == input), || {
            "decoded garbage does not encode back to its bytes".into()
        }),
        (Err(e), None) => {
            let ok = match e {
                DecodeError::Trailing(n) => *n > 0 && *n < input.len(),
                DecodeError::Version(v) => input.first() == Some(v),
                DecodeError::Truncated => true,
                DecodeError::Tag(_) | DecodeError::Timestamp(_) | DecodeError::Flag(_) => {
                    input.len() > 2
                }
            };
            ensure(ok, || format!("{e:?} does not describe this input"))
        }
    }
}

#[test]
fn entry_decode_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder(
        "ctrlstore::Entry::decode",
        BOUND,
        entry,
        Entry::decode,
        check,
    );
}
