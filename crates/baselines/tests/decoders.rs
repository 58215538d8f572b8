//! Distrust the wire (STYLE.md §7): the baselines' packet decoders, [`BasePacket::decode`] and
//! [`BasePacket::decode_bytes`], fed random buffers and mutated valid encodings
//! (`onepipe_testalloc::fuzz`; `ONEPIPE_FUZZ_CASES` cases each, docs/TESTING.md). Every case:
//! no panic; a valid encoding decodes back to its packet; garbage is a typed error that says
//! what is wrong, or a packet that re-encodes to the bytes it used (absent optional fields
//! canonicalised to zeros) and decodes to itself; and one decode allocates no more than its
//! bound. `robustness.rs` beside it feeds decoded packets to the roles.

use bytes::Bytes;
use onepipe_baselines::packet::{CausalAck, HEADER_LEN};
use onepipe_baselines::{BasePacket, Body, DecodeError, Dests, Holding};
use onepipe_proto::ids::ProcId;
use onepipe_testalloc::fuzz::{self, ensure, Bound, Rng};
use onepipe_testalloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// What one decode may allocate: a `Submit`'s destination list is read into a `Vec` (4 bytes
/// per 4-byte entry, its count checked against the bytes there first) and copied into the
/// shared list it becomes (the same again, plus the `Arc`'s 16-byte header), and a payload is
/// copied (`decode`; `decode_bytes` shares the buffer: one shared-buffer header). Entries and
/// payload share the input, so twice its length covers them; 64 bytes for the rest.
const BOUND: Bound = Bound::new(2, 1, 64);

fn holding(rng: &mut Rng) -> Option<Holding> {
    rng.bool().then(|| Holding {
        holder: ProcId(rng.u32()),
        start: rng.interesting(),
    })
}

fn payload(rng: &mut Rng) -> Bytes {
    Bytes::from(rng.some_bytes(300))
}

fn dests(rng: &mut Rng) -> Dests {
    if rng.percent(20) {
        return Dests::all();
    }
    let n = rng.len(40);
    Dests::list((0..n).map(|_| ProcId(rng.interesting() as u32)))
}

fn acks(rng: &mut Rng) -> Vec<CausalAck> {
    (0..rng.len(40))
        .map(|_| CausalAck {
            origin: ProcId(rng.interesting() as u32),
            seq: rng.interesting(),
        })
        .collect()
}

/// Any body the encoder can write.
fn body(rng: &mut Rng) -> Body {
    let x = |rng: &mut Rng| rng.interesting();
    match rng.below(26) {
        0 => Body::Submit {
            msg_id: x(rng),
            dests: dests(rng),
            payload: payload(rng),
        },
        1 => Body::Ordered {
            gseq: x(rng),
            rseq: x(rng),
            origin: ProcId(rng.u32()),
            payload: payload(rng),
        },
        2 => Body::SeqSync {
            rseq_next: x(rng),
            gseq_last: x(rng),
        },
        3 => Body::SyncAck { rseq_next: x(rng) },
        4 => Body::SubmitLost {
            msg_id: x(rng),
            count: rng.u32(),
        },
        5 => Body::Nack {
            seq: x(rng),
            count: rng.u32(),
            index_lo: x(rng),
            index_hi: x(rng),
        },
        6 => Body::Lost {
            seq: x(rng),
            count: rng.u32(),
        },
        7 => Body::TokenPass {
            seq: x(rng),
            pass: x(rng),
            last: holding(rng),
        },
        8 => Body::TokenAck { pass: x(rng) },
        9 => Body::TokenData {
            gseq: x(rng),
            holding_start: x(rng),
            prev: holding(rng),
            addressed: rng.bool(),
            payload: payload(rng),
        },
        10 => Body::TokenLost {
            gseq: x(rng),
            count: rng.u32(),
            holding_start: x(rng),
            prev: holding(rng),
        },
        11 => Body::Stamped {
            ts: x(rng),
            cseq: x(rng),
            index: x(rng),
            payload: payload(rng),
        },
        12 => Body::Clock {
            ts: x(rng),
            cseq_next: x(rng),
            index_next: x(rng),
        },
        13 => Body::ClockRequest,
        14 => Body::Propose {
            msg_id: x(rng),
            cseq: x(rng),
            payload: payload(rng),
        },
        15 => Body::Proposal {
            msg_id: x(rng),
            ts: x(rng),
        },
        16 => Body::Final {
            msg_id: x(rng),
            ts: x(rng),
        },
        17 => Body::FinalRequest { msg_id: x(rng) },
        18 => Body::Early {
            msg_id: x(rng),
            payload: payload(rng),
        },
        19 => Body::OrderBatch {
            rseq: x(rng),
            entries: (0..rng.len(40))
                .map(|_| onepipe_baselines::packet::OrderEntry {
                    gseq: x(rng),
                    origin: ProcId(rng.u32()),
                    msg_id: x(rng),
                })
                .collect(),
        },
        20 => Body::Causal {
            origin: ProcId(rng.u32()),
            seq: x(rng),
            agreed: rng.bool(),
            acks: acks(rng),
            payload: payload(rng),
        },
        21 => Body::CausalNack {
            origin: ProcId(rng.u32()),
            seq: x(rng),
            count: rng.u32(),
        },
        22 => Body::CausalStatus {
            delivered: acks(rng),
        },
        23 => Body::TotoFlush {
            epoch: x(rng),
            crashed: acks(rng),
        },
        24 => Body::TotoInstall {
            epoch: x(rng),
            cut: acks(rng),
        },
        _ => Body::Resend {
            gseq: x(rng),
            rseq: x(rng),
            origin: ProcId(rng.u32()),
            msg_id: x(rng),
            payload: payload(rng),
        },
    }
}

fn packet(rng: &mut Rng) -> (BasePacket, Vec<u8>) {
    let p = BasePacket {
        src: ProcId(rng.u32()),
        dst: ProcId(rng.u32()),
        body: body(rng),
    };
    let b = encoded(&p);
    (p, b)
}

fn encoded(p: &BasePacket) -> Vec<u8> {
    let mut b = Vec::with_capacity(p.encoded_len());
    p.encode(&mut b);
    b
}

/// The properties of one decode of `input` (`valid`: the packet it encodes).
fn check(
    input: &[u8],
    got: &Result<(BasePacket, usize), DecodeError>,
    valid: Option<&BasePacket>,
) -> Result<(), String> {
    match (got, valid) {
        (Ok((p, used)), Some(want)) => ensure(p == want && *used == input.len(), || {
            "a valid packet did not decode back to itself".into()
        }),
        (Err(_), Some(_)) => Err("a valid packet was refused".into()),
        // Garbage that decodes re-encodes to as many bytes as it used, and to itself.
        (Ok((p, used)), None) => {
            let again = encoded(p);
            ensure(*used <= input.len() && again.len() == *used, || {
                format!("used {used} bytes, re-encodes to {}", again.len())
            })?;
            ensure(
                BasePacket::decode(&again).is_ok_and(|(q, _)| q == *p),
                || "re-encoded, it decodes to something else".into(),
            )
        }
        (Err(e), None) => {
            let ok = match *e {
                DecodeError::Empty => input.is_empty(),
                DecodeError::UnknownOpcode(b) => input.first() == Some(&b),
                DecodeError::Truncated { needed, got } => got == input.len() && needed > got,
                DecodeError::UnknownFlags(_) | DecodeError::UnsortedDests => {
                    input.len() >= HEADER_LEN
                }
                DecodeError::BatchTooLong(n) => {
                    n > onepipe_baselines::packet::ORDER_BATCH_LEN_MAX && input.len() >= HEADER_LEN
                }
            };
            ensure(ok, || format!("{e:?} does not describe this input"))
        }
    }
}

#[test]
fn base_packet_decode_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder(
        "baselines::BasePacket::decode",
        BOUND,
        packet,
        BasePacket::decode,
        check,
    );
}

#[test]
fn base_packet_decode_bytes_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder_with(
        "baselines::BasePacket::decode_bytes",
        BOUND,
        packet,
        // The received buffer is made outside the measured decode: the receive path owns it.
        Bytes::copy_from_slice,
        |_, shared| BasePacket::decode_bytes(shared),
        |input, _, got, valid| check(input, got, valid),
    );
}
