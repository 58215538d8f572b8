//! Distrust the wire (STYLE.md §7): the 1Pipe wire format's decoders, [`Packet::decode`] and
//! [`Packet::decode_bytes`], fed random buffers and mutated valid encodings
//! (`onepipe_testalloc::fuzz`; `ONEPIPE_FUZZ_CASES` cases each, docs/TESTING.md). Every case:
//! no panic; a valid encoding decodes back to its packet; garbage is a typed error that says
//! what is wrong, or a packet that encodes back to exactly the bytes it used; and one decode
//! allocates no more than its bound.

use bytes::Bytes;
use onepipe_proto::ids::{NodeId, ProcId, Psn};
use onepipe_proto::time::Timestamp;
use onepipe_proto::wire::{
    flags, Ack, AckBatch, Beacon, DataHeader, DataPacket, DecodeError, Nak, NakReason, Packet,
    ACK_BATCH_ENTRY_LEN, ACK_BATCH_LEN_MAX, DATA_HEADER_LEN,
};
use onepipe_testalloc::fuzz::{self, ensure, Bound, Rng};
use onepipe_testalloc::CountingAlloc;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// What one decode may allocate: a data packet copies its payload (`decode`: at most the input's
/// length; `decode_bytes` shares the buffer instead, at the cost of one shared-buffer header the
/// first time a `Vec`-backed `Bytes` is sliced), and an ACK batch allocates its entries at once
/// (`count × size_of::<Ack>()`, its count checked against the bytes there first: at most
/// `len / 24` entries). Never both; 64 bytes for the rest.
fn bound() -> Bound {
    let ack = size_of::<Ack>().max(ACK_BATCH_ENTRY_LEN);
    Bound::new(ack, ACK_BATCH_ENTRY_LEN, 64)
}

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

/// Any packet the encoder can write.
fn packet(rng: &mut Rng) -> Packet {
    match rng.below(5) {
        0 => Packet::Data(DataPacket {
            header: DataHeader {
                flags: encodable_flags(rng.below(u64::from(flags::ALL) + 1) as u8),
                frag: rng.interesting() as u16,
                ts: ts(rng),
                barrier: ts(rng),
                commit: ts(rng),
                psn: Psn(rng.u32()),
                src: ProcId(rng.u32()),
                dst: ProcId(rng.u32()),
            },
            payload: Bytes::from(rng.some_bytes(1500)),
        }),
        1 => Packet::Beacon(Beacon {
            from: NodeId(rng.u32()),
            barrier: ts(rng),
            commit: ts(rng),
            demand: rng.bool(),
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
            let n = 1 + rng.len(ACK_BATCH_LEN_MAX - 1);
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

/// The properties of one decode of `input` (`valid`: the packet it encodes).
fn check(
    input: &[u8],
    got: &Result<(Packet, usize), DecodeError>,
    valid: Option<&Packet>,
) -> Result<(), String> {
    match (got, valid) {
        (Ok((p, used)), Some(want)) => ensure(p == want && *used == input.len(), || {
            "a valid packet did not decode back to itself".into()
        }),
        (Err(_), Some(_)) => Err("a valid packet was refused".into()),
        // Garbage that decodes is a packet in canonical form: it encodes back to exactly the
        // bytes it used (no reserved bit, flag or padding is silently dropped).
        (Ok((p, used)), None) => ensure(
            *used > 0 && *used <= input.len() && encoded(p) == input[..*used],
            || format!("used {used} bytes, which do not re-encode"),
        ),
        (Err(e), None) => typed_error_names_the_problem(input, *e),
    }
}

/// An error says what is wrong with this input, not something else.
fn typed_error_names_the_problem(input: &[u8], e: DecodeError) -> Result<(), String> {
    let ok = match e {
        DecodeError::Empty => input.is_empty(),
        DecodeError::UnknownOpcode(b) => input.first() == Some(&b),
        DecodeError::Truncated { needed, got } => got == input.len() && needed > got,
        DecodeError::UnknownFlags(_)
        | DecodeError::UnknownNakReason(_)
        | DecodeError::AckBatchLen(_) => !input.is_empty(),
    };
    ensure(ok, || format!("{e:?} does not describe this input"))
}

#[test]
fn packet_decode_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder(
        "wire::Packet::decode",
        bound(),
        |rng| {
            let p = packet(rng);
            let b = encoded(&p);
            (p, b)
        },
        Packet::decode,
        check,
    );
}

#[test]
fn packet_decode_bytes_never_panics_nor_overallocates_on_random_and_mutated_input() {
    fuzz::decoder_with(
        "wire::Packet::decode_bytes",
        bound(),
        |rng| {
            let p = packet(rng);
            let b = encoded(&p);
            (p, b)
        },
        // The received buffer is made outside the measured decode: the receive path owns it.
        Bytes::copy_from_slice,
        |_, shared| Packet::decode_bytes(shared),
        |input, shared, got, valid| {
            check(input, got, valid)?;
            // Zero-copy: a payload is a slice of the received buffer, not a copy.
            match got {
                Ok((Packet::Data(d), _)) if !d.payload.is_empty() => {
                    let at = (d.payload.as_ptr() as usize).wrapping_sub(shared.as_ptr() as usize);
                    ensure(at == DATA_HEADER_LEN, || "the payload was copied".into())
                }
                _ => Ok(()),
            }
        },
    );
}
