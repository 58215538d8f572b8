//! Byte encoding of [`Packet`]: fixed layouts, big-endian, every field checked on decode.

use super::*;
use core::fmt;

// Compile-time layout checks: the header is the sum of its fields (§6.1 plus our UDP additions).
const _: () = assert!(DATA_HEADER_LEN == 1 + 1 + 2 + 6 + 6 + 6 + 4 + 4 + 4 + 2);
const _: () = assert!(BEACON_LEN == 1 + 1 + 2 + 4 + 6 + 6);
const _: () = assert!(NAK_LEN == 1 + 1 + 2 + 4 + 4 + 4 + 6 + 2);
const _: () = assert!(ACK_LEN == 1 + 3 + 4 + 4 + 4 + 8);
const _: () = assert!(ACK_BATCH_HEADER_LEN == 1 + 1 + 2);
const _: () = assert!(ACK_BATCH_ENTRY_LEN == 3 + 1 + 4 + 4 + 4 + 8);
// A batch entry is an ACK without its opcode, plus one reserved byte.
const _: () = assert!(ACK_BATCH_ENTRY_LEN == ACK_LEN);
// The count byte holds every legal count, and the largest batch fits its MTU.
const _: () = assert!(ACK_BATCH_LEN_MAX >= 2 && ACK_BATCH_LEN_MAX <= u8::MAX as usize);
const _: () =
    assert!(ACK_BATCH_HEADER_LEN + ACK_BATCH_LEN_MAX * ACK_BATCH_ENTRY_LEN <= ACK_BATCH_BYTES_MAX);
// Six distinct flag bits; `EXCLUSIVE` names two of them.
const _: () = assert!(flags::ALL.count_ones() == 6);
const _: () = assert!(flags::EXCLUSIVE & flags::ALL == flags::EXCLUSIVE);
const _: () = assert!(flags::EXCLUSIVE.count_ones() == 2);
/// Largest payload one data packet can carry (the length field is 16 bits).
pub const PAYLOAD_LEN_MAX: usize = u16::MAX as usize;

/// Why a buffer is not a valid packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer is empty.
    Empty,
    /// The first byte is not a known opcode.
    UnknownOpcode(u8),
    /// The buffer ends before the packet does.
    Truncated {
        /// Bytes the packet needs.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
    /// A flag bit that no version defines is set, a reserved byte is not zero, or two flags
    /// that exclude each other are set together (`RELIABLE` and `PLAIN`).
    UnknownFlags(u8),
    /// A NAK reason byte is not known.
    UnknownNakReason(u8),
    /// An ACK batch's entry count is 0 or above [`ACK_BATCH_LEN_MAX`].
    AckBatchLen(u8),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Empty => write!(f, "empty packet"),
            DecodeError::UnknownOpcode(b) => write!(f, "unknown opcode {b:#04x}"),
            DecodeError::Truncated { needed, got } => {
                write!(f, "truncated packet: need {needed} bytes, got {got}")
            }
            DecodeError::UnknownFlags(b) => write!(f, "unknown flag bits {b:#04x}"),
            DecodeError::UnknownNakReason(b) => write!(f, "unknown NAK reason {b}"),
            DecodeError::AckBatchLen(n) => {
                write!(f, "ACK batch of {n} entries (1 to {ACK_BATCH_LEN_MAX})")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

fn put_u48(out: &mut Vec<u8>, t: Timestamp) {
    out.extend_from_slice(&t.raw().to_be_bytes()[2..]);
}

fn get_u48(b: &[u8]) -> Timestamp {
    let mut x = [0u8; 8];
    x[2..].copy_from_slice(&b[..6]);
    Timestamp::new(u64::from_be_bytes(x))
}

fn get_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn get_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// The 20 bytes an ACK and an ACK batch entry share: from, to, cumulative PSN, SACK.
fn put_ack_tail(out: &mut Vec<u8>, a: &Ack) {
    out.extend_from_slice(&a.from.0.to_be_bytes());
    out.extend_from_slice(&a.to.0.to_be_bytes());
    out.extend_from_slice(&a.cum_psn.0.to_be_bytes());
    out.extend_from_slice(&a.sack.to_be_bytes());
}

/// An ACK from its service, ECN and window bytes and its 20-byte tail (`b` holds at least 20).
fn get_ack(service: u8, ecn: u8, rwnd: u8, b: &[u8]) -> Result<Ack, DecodeError> {
    if service > 1 {
        return Err(DecodeError::UnknownFlags(service));
    }
    Ok(Ack {
        from: ProcId(get_u32(b)),
        to: ProcId(get_u32(&b[4..])),
        cum_psn: Psn(get_u32(&b[8..])),
        sack: u64::from_be_bytes(b[12..20].try_into().expect("8 bytes")),
        reliable: service == 1,
        ecn,
        rwnd,
    })
}

fn need(buf: &[u8], n: usize) -> Result<(), DecodeError> {
    if buf.len() < n {
        Err(DecodeError::Truncated {
            needed: n,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

impl Packet {
    /// Appends the encoding of `self` to `out`.
    ///
    /// # Panics
    /// If a data payload exceeds [`PAYLOAD_LEN_MAX`]: the host fragments messages long before
    /// that, so a larger payload here is a bug in the caller.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Packet::Data(d) => {
                let h = &d.header;
                assert!(
                    d.payload.len() <= PAYLOAD_LEN_MAX,
                    "payload too large to encode"
                );
                out.push(Opcode::Data as u8);
                out.push(h.flags);
                out.extend_from_slice(&h.frag.to_be_bytes());
                put_u48(out, h.ts);
                put_u48(out, h.barrier);
                put_u48(out, h.commit);
                out.extend_from_slice(&h.psn.0.to_be_bytes());
                out.extend_from_slice(&h.src.0.to_be_bytes());
                out.extend_from_slice(&h.dst.0.to_be_bytes());
                out.extend_from_slice(&(d.payload.len() as u16).to_be_bytes());
                out.extend_from_slice(&d.payload);
            }
            Packet::Beacon(b) => {
                let flags = if b.demand { BEACON_DEMAND } else { 0 };
                out.extend_from_slice(&[Opcode::Beacon as u8, flags, 0, 0]);
                out.extend_from_slice(&b.from.0.to_be_bytes());
                put_u48(out, b.barrier);
                put_u48(out, b.commit);
            }
            Packet::Nak(n) => {
                out.extend_from_slice(&[Opcode::Nak as u8, n.reason as u8, n.reliable as u8, 0]);
                out.extend_from_slice(&n.from.0.to_be_bytes());
                out.extend_from_slice(&n.to.0.to_be_bytes());
                out.extend_from_slice(&n.psn.0.to_be_bytes());
                put_u48(out, n.ts);
                out.extend_from_slice(&[n.seq, 0]);
            }
            Packet::Ack(a) => {
                out.extend_from_slice(&[Opcode::Ack as u8, a.reliable as u8, a.ecn, a.rwnd]);
                put_ack_tail(out, a);
            }
            Packet::AckBatch(b) => {
                // `AckBatch::new` keeps the count in 1..=ACK_BATCH_LEN_MAX, which fits a byte.
                out.extend_from_slice(&[Opcode::AckBatch as u8, b.acks().len() as u8, 0, 0]);
                for a in b.acks() {
                    out.extend_from_slice(&[a.reliable as u8, a.ecn, a.rwnd, 0]);
                    put_ack_tail(out, a);
                }
            }
        }
    }

    /// Decodes one packet from the front of `buf`, returning it and the bytes it used. Data
    /// payloads are copied out of `buf` (`Bytes::copy_from_slice`); use
    /// [`Packet::decode_bytes`] to share the buffer instead.
    pub fn decode(buf: &[u8]) -> Result<(Packet, usize), DecodeError> {
        Self::decode_with(buf, |range| Bytes::copy_from_slice(&buf[range]))
    }

    /// Like [`Packet::decode`], but data payloads are zero-copy slices of `buf`.
    pub fn decode_bytes(buf: &Bytes) -> Result<(Packet, usize), DecodeError> {
        Self::decode_with(buf, |range| buf.slice(range))
    }

    fn decode_with(
        buf: &[u8],
        payload: impl FnOnce(core::ops::Range<usize>) -> Bytes,
    ) -> Result<(Packet, usize), DecodeError> {
        let op = *buf.first().ok_or(DecodeError::Empty)?;
        match Opcode::from_u8(op).ok_or(DecodeError::UnknownOpcode(op))? {
            Opcode::Data => {
                need(buf, DATA_HEADER_LEN)?;
                let flags = buf[1];
                // A plain message is best effort: with `RELIABLE` too, which service would it
                // be acknowledged, buffered and delivered by?
                if flags & !flags::ALL != 0 || flags & flags::EXCLUSIVE == flags::EXCLUSIVE {
                    return Err(DecodeError::UnknownFlags(flags));
                }
                let len = get_u16(&buf[34..]) as usize;
                let total = DATA_HEADER_LEN + len;
                need(buf, total)?;
                let header = DataHeader {
                    flags,
                    frag: get_u16(&buf[2..]),
                    ts: get_u48(&buf[4..]),
                    barrier: get_u48(&buf[10..]),
                    commit: get_u48(&buf[16..]),
                    psn: Psn(get_u32(&buf[22..])),
                    src: ProcId(get_u32(&buf[26..])),
                    dst: ProcId(get_u32(&buf[30..])),
                };
                let payload = payload(DATA_HEADER_LEN..total);
                Ok((Packet::Data(DataPacket { header, payload }), total))
            }
            Opcode::Beacon => Self::decode_beacon(buf),
            Opcode::Nak => Self::decode_nak(buf),
            Opcode::Ack => {
                need(buf, ACK_LEN)?;
                let a = get_ack(buf[1], buf[2], buf[3], &buf[4..])?;
                Ok((Packet::Ack(a), ACK_LEN))
            }
            Opcode::AckBatch => Self::decode_ack_batch(buf),
        }
    }

    /// A beacon: its flags other than demand and its reserved bytes must be zero.
    #[inline]
    fn decode_beacon(buf: &[u8]) -> Result<(Packet, usize), DecodeError> {
        need(buf, BEACON_LEN)?;
        // Flags other than demand, and the two reserved bytes: zero in every version so
        // far, so a packet decodes only from its one encoding.
        let unknown = (buf[1] & !BEACON_DEMAND) | buf[2] | buf[3];
        if unknown != 0 {
            return Err(DecodeError::UnknownFlags(unknown));
        }
        let b = Beacon {
            from: NodeId(get_u32(&buf[4..])),
            barrier: get_u48(&buf[8..]),
            commit: get_u48(&buf[14..]),
            demand: buf[1] & BEACON_DEMAND != 0,
        };
        Ok((Packet::Beacon(b), BEACON_LEN))
    }

    /// A NAK: a known reason and service, zero reserved bytes.
    #[inline]
    fn decode_nak(buf: &[u8]) -> Result<(Packet, usize), DecodeError> {
        need(buf, NAK_LEN)?;
        let reason = match buf[1] {
            1 => NakReason::Late,
            2 => NakReason::Incomplete,
            3 => NakReason::BufferFull,
            4 => NakReason::Lost,
            r => return Err(DecodeError::UnknownNakReason(r)),
        };
        if buf[2] > 1 {
            return Err(DecodeError::UnknownFlags(buf[2]));
        }
        // The reserved bytes after the service and after `seq`.
        if buf[3] | buf[23] != 0 {
            return Err(DecodeError::UnknownFlags(buf[3] | buf[23]));
        }
        let n = Nak {
            reliable: buf[2] == 1,
            reason,
            from: ProcId(get_u32(&buf[4..])),
            to: ProcId(get_u32(&buf[8..])),
            psn: Psn(get_u32(&buf[12..])),
            ts: get_u48(&buf[16..]),
            seq: buf[22],
        };
        Ok((Packet::Nak(n), NAK_LEN))
    }
}

impl Packet {
    /// An ACK batch at the front of `buf` (its opcode checked by the caller): the count is
    /// checked before anything is allocated, so an oversized count costs nothing.
    fn decode_ack_batch(buf: &[u8]) -> Result<(Packet, usize), DecodeError> {
        need(buf, ACK_BATCH_HEADER_LEN)?;
        let count = buf[1];
        if count == 0 || count as usize > ACK_BATCH_LEN_MAX {
            return Err(DecodeError::AckBatchLen(count));
        }
        if buf[2] != 0 || buf[3] != 0 {
            return Err(DecodeError::UnknownFlags(buf[2] | buf[3]));
        }
        let total = ACK_BATCH_HEADER_LEN + count as usize * ACK_BATCH_ENTRY_LEN;
        need(buf, total)?;
        let mut acks = Vec::with_capacity(count as usize);
        for e in buf[ACK_BATCH_HEADER_LEN..total].chunks_exact(ACK_BATCH_ENTRY_LEN) {
            if e[3] != 0 {
                return Err(DecodeError::UnknownFlags(e[3]));
            }
            acks.push(get_ack(e[0], e[1], e[2], &e[4..])?);
        }
        let batch = AckBatch::new(acks).expect("count checked above");
        Ok((Packet::AckBatch(batch), total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts() -> impl Strategy<Value = Timestamp> {
        any::<u64>().prop_map(Timestamp::new)
    }

    fn packet() -> impl Strategy<Value = Packet> {
        let data = (
            valid_flags(),
            any::<u16>(),
            ts(),
            ts(),
            ts(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(|(flags, frag, ts, barrier, commit, psn, src, dst, p)| {
                Packet::Data(DataPacket {
                    header: DataHeader {
                        flags,
                        frag,
                        ts,
                        barrier,
                        commit,
                        psn: Psn(psn),
                        src: ProcId(src),
                        dst: ProcId(dst),
                    },
                    payload: Bytes::from(p),
                })
            });
        let beacon = (any::<u32>(), ts(), ts(), any::<bool>()).prop_map(
            |(from, barrier, commit, demand)| {
                Packet::Beacon(Beacon {
                    from: NodeId(from),
                    barrier,
                    commit,
                    demand,
                })
            },
        );
        let nak = (
            0u8..4,
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            ts(),
            any::<bool>(),
            any::<u8>(),
        )
            .prop_map(|(reason, from, to, psn, ts, reliable, seq)| {
                Packet::Nak(Nak {
                    reason: [
                        NakReason::Late,
                        NakReason::Incomplete,
                        NakReason::BufferFull,
                        NakReason::Lost,
                    ][reason as usize],
                    from: ProcId(from),
                    to: ProcId(to),
                    psn: Psn(psn),
                    ts,
                    reliable,
                    seq,
                })
            });
        let single = ack().prop_map(Packet::Ack);
        let batch = proptest::collection::vec(ack(), 1..=ACK_BATCH_LEN_MAX).prop_map(|acks| {
            Packet::AckBatch(AckBatch::new(acks).expect("1..=ACK_BATCH_LEN_MAX entries"))
        });
        prop_oneof![data, beacon, nak, single, batch]
    }

    /// Any combination of defined data flags but the one that is refused (reliable and plain).
    fn valid_flags() -> impl Strategy<Value = u8> {
        (0u8..=flags::ALL).prop_map(|f| match f & flags::EXCLUSIVE == flags::EXCLUSIVE {
            true => f & !flags::PLAIN,
            false => f,
        })
    }

    fn ack() -> impl Strategy<Value = Ack> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<bool>(),
            any::<u8>(),
            any::<u8>(),
        )
            .prop_map(|(from, to, cum, sack, reliable, ecn, rwnd)| Ack {
                from: ProcId(from),
                to: ProcId(to),
                cum_psn: Psn(cum),
                sack,
                reliable,
                ecn,
                rwnd,
            })
    }

    proptest! {
        #[test]
        fn every_packet_round_trips(p in packet()) {
            let mut buf = Vec::new();
            p.encode(&mut buf);
            prop_assert_eq!(buf.len(), p.encoded_len());
            let (q, used) = Packet::decode(&buf).unwrap();
            prop_assert_eq!(used, buf.len());
            prop_assert_eq!(&q, &p);
            let shared = Bytes::from(buf);
            let (r, _) = Packet::decode_bytes(&shared).unwrap();
            prop_assert_eq!(r, p);
        }

        #[test]
        fn every_strict_prefix_is_truncated(p in packet()) {
            let mut buf = Vec::new();
            p.encode(&mut buf);
            for cut in 1..buf.len() {
                let r = Packet::decode(&buf[..cut]);
                prop_assert!(matches!(r, Err(DecodeError::Truncated { .. })), "{:?}", r);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok((p, used)) = Packet::decode(&bytes) {
                prop_assert!(used <= bytes.len());
                let mut again = Vec::new();
                p.encode(&mut again);
                prop_assert_eq!(&again[..], &bytes[..used]);
            }
        }

        /// Arbitrary bytes behind a valid ACK batch opcode and count: the bytes the fuzz-style
        /// test above rarely reaches (a batch needs its first two bytes right).
        #[test]
        fn arbitrary_ack_batch_bodies_never_panic(
            count in any::<u8>(),
            body in proptest::collection::vec(any::<u8>(), 0..(ACK_BATCH_BYTES_MAX + 64)),
        ) {
            let mut bytes = vec![Opcode::AckBatch as u8, count];
            bytes.extend_from_slice(&body);
            match Packet::decode(&bytes) {
                Ok((p, used)) => {
                    prop_assert!((1..=ACK_BATCH_LEN_MAX).contains(&(count as usize)));
                    prop_assert!(used <= ACK_BATCH_BYTES_MAX);
                    let mut again = Vec::new();
                    p.encode(&mut again);
                    prop_assert_eq!(&again[..], &bytes[..used]);
                }
                Err(DecodeError::AckBatchLen(n)) => {
                    prop_assert_eq!(n, count);
                    prop_assert!(count == 0 || count as usize > ACK_BATCH_LEN_MAX);
                }
                Err(DecodeError::Truncated { needed, got }) => {
                    prop_assert!(got < needed && needed <= ACK_BATCH_BYTES_MAX);
                }
                Err(DecodeError::UnknownFlags(_)) => {}
                Err(e) => prop_assert!(false, "unexpected {:?}", e),
            }
        }

        #[test]
        fn concatenated_packets_decode_in_sequence(ps in proptest::collection::vec(packet(), 1..8)) {
            let mut buf = Vec::new();
            for p in &ps { p.encode(&mut buf); }
            let mut at = 0;
            for p in &ps {
                let (q, used) = Packet::decode(&buf[at..]).unwrap();
                prop_assert_eq!(&q, p);
                at += used;
            }
            prop_assert_eq!(at, buf.len());
        }
    }

    #[test]
    fn typed_errors_name_the_problem() {
        assert_eq!(Packet::decode(&[]), Err(DecodeError::Empty));
        assert_eq!(
            Packet::decode(&[0x7f]),
            Err(DecodeError::UnknownOpcode(0x7f))
        );
        assert_eq!(
            Packet::decode(&[1, 0, 0]),
            Err(DecodeError::Truncated { needed: 36, got: 3 })
        );
        let mut b = vec![0u8; BEACON_LEN];
        b[0] = Opcode::Beacon as u8;
        b[1] = 0x80;
        assert_eq!(Packet::decode(&b), Err(DecodeError::UnknownFlags(0x80)));
        // Bit 0 is the demand flag; the others stay unknown.
        b[1] = BEACON_DEMAND;
        assert!(matches!(Packet::decode(&b), Ok((Packet::Beacon(x), _)) if x.demand));
        b[1] = BEACON_DEMAND | 0x02;
        assert_eq!(Packet::decode(&b), Err(DecodeError::UnknownFlags(0x02)));
        let mut n = vec![0u8; NAK_LEN];
        n[0] = Opcode::Nak as u8;
        n[1] = 9;
        assert_eq!(Packet::decode(&n), Err(DecodeError::UnknownNakReason(9)));
    }

    /// Reserved bytes are zero or the packet is refused, so what decodes re-encodes to the same
    /// bytes (a beacon or NAK with a reserved byte set used to decode, and re-encode without it).
    #[test]
    fn reserved_bytes_set_are_refused() {
        let mut b = vec![0u8; BEACON_LEN];
        b[0] = Opcode::Beacon as u8;
        assert!(Packet::decode(&b).is_ok());
        b[3] = 0x20;
        assert_eq!(Packet::decode(&b), Err(DecodeError::UnknownFlags(0x20)));
        let mut n = vec![0u8; NAK_LEN];
        n[0] = Opcode::Nak as u8;
        n[1] = NakReason::Late as u8;
        assert!(Packet::decode(&n).is_ok());
        for at in [3, NAK_LEN - 1] {
            let mut bad = n.clone();
            bad[at] = 0xff;
            assert_eq!(Packet::decode(&bad), Err(DecodeError::UnknownFlags(0xff)));
        }
    }

    fn entry(from: u32, to: u32) -> Ack {
        Ack {
            from: ProcId(from),
            to: ProcId(to),
            cum_psn: Psn(7),
            sack: 0b101,
            reliable: from.is_multiple_of(2),
            ecn: 1,
            rwnd: 64,
        }
    }

    #[test]
    fn ack_batch_is_bounded_by_the_mtu_on_build_and_decode() {
        assert_eq!(AckBatch::new(Vec::new()), None);
        let full: Vec<Ack> = (0..ACK_BATCH_LEN_MAX as u32).map(|i| entry(i, 1)).collect();
        let batch = Packet::AckBatch(AckBatch::new(full.clone()).expect("a full batch"));
        assert!(batch.encoded_len() <= ACK_BATCH_BYTES_MAX);
        let mut over = full;
        over.push(entry(0, 1));
        assert_eq!(AckBatch::new(over), None, "one entry past the MTU");
        // On the wire: a count of 0 or past the maximum is refused before anything else.
        let mut b = vec![0u8; ACK_BATCH_BYTES_MAX + ACK_BATCH_ENTRY_LEN];
        b[0] = Opcode::AckBatch as u8;
        assert_eq!(Packet::decode(&b), Err(DecodeError::AckBatchLen(0)));
        b[1] = ACK_BATCH_LEN_MAX as u8 + 1;
        assert_eq!(
            Packet::decode(&b),
            Err(DecodeError::AckBatchLen(ACK_BATCH_LEN_MAX as u8 + 1))
        );
        b[1] = 2;
        assert_eq!(
            Packet::decode(&b[..ACK_BATCH_HEADER_LEN + ACK_BATCH_ENTRY_LEN]),
            Err(DecodeError::Truncated {
                needed: ACK_BATCH_HEADER_LEN + 2 * ACK_BATCH_ENTRY_LEN,
                got: ACK_BATCH_HEADER_LEN + ACK_BATCH_ENTRY_LEN,
            })
        );
    }

    #[test]
    fn ack_batch_rejects_unknown_service_and_reserved_bits() {
        let p = Packet::AckBatch(AckBatch::new(vec![entry(1, 2), entry(2, 3)]).expect("two"));
        let mut b = Vec::new();
        p.encode(&mut b);
        assert_eq!(b.len(), ACK_BATCH_HEADER_LEN + 2 * ACK_BATCH_ENTRY_LEN);
        let second = ACK_BATCH_HEADER_LEN + ACK_BATCH_ENTRY_LEN;
        let mut bad = b.clone();
        bad[second] = 2;
        assert_eq!(Packet::decode(&bad), Err(DecodeError::UnknownFlags(2)));
        let mut bad = b.clone();
        bad[second + 3] = 0x40;
        assert_eq!(Packet::decode(&bad), Err(DecodeError::UnknownFlags(0x40)));
        let mut bad = b;
        bad[2] = 1;
        assert_eq!(Packet::decode(&bad), Err(DecodeError::UnknownFlags(1)));
    }

    #[test]
    fn plain_data_round_trips_and_says_so() {
        let p = Packet::Data(DataPacket {
            header: DataHeader {
                flags: flags::PLAIN | flags::END_OF_MESSAGE | flags::BARRIER_VALID,
                frag: 0,
                ts: Timestamp::new(7),
                barrier: Timestamp::new(5),
                commit: Timestamp::new(3),
                psn: Psn(9),
                src: ProcId(1),
                dst: ProcId(2),
            },
            payload: Bytes::from_static(b"reply"),
        });
        let mut b = Vec::new();
        p.encode(&mut b);
        assert_eq!(b[1], 0x20 | 0x01 | 0x02, "bit 5 is PLAIN on the wire");
        let (q, used) = Packet::decode(&b).unwrap();
        assert_eq!((q.clone(), used), (p, b.len()));
        let Packet::Data(d) = q else { panic!() };
        assert!(d.header.plain() && !d.header.reliable());
        // Without the bit, the same bytes are an ordered best-effort fragment.
        b[1] &= !flags::PLAIN;
        let Ok((Packet::Data(d), _)) = Packet::decode(&b) else {
            panic!()
        };
        assert!(!d.header.plain());
    }

    /// A plain message is best effort: a fragment that says it is reliable too is refused, and
    /// so are the two bits above `PLAIN`, whatever else the header says.
    #[test]
    fn plain_and_reliable_together_or_an_undefined_bit_are_refused() {
        let mut b = Vec::new();
        Packet::Data(DataPacket {
            header: DataHeader {
                flags: flags::END_OF_MESSAGE,
                frag: 0,
                ts: Timestamp::new(7),
                barrier: Timestamp::new(7),
                commit: Timestamp::new(7),
                psn: Psn(0),
                src: ProcId(0),
                dst: ProcId(1),
            },
            payload: Bytes::new(),
        })
        .encode(&mut b);
        for extra in [0, flags::ECN, flags::BARRIER_VALID | flags::COMMIT_VALID] {
            let mut bad = b.clone();
            bad[1] |= flags::RELIABLE | flags::PLAIN | extra;
            assert_eq!(
                Packet::decode(&bad),
                Err(DecodeError::UnknownFlags(bad[1])),
                "{:#04x}",
                bad[1]
            );
            for undefined in [0x40, 0x80] {
                let mut bad = b.clone();
                bad[1] |= flags::PLAIN | extra | undefined;
                assert_eq!(Packet::decode(&bad), Err(DecodeError::UnknownFlags(bad[1])));
            }
            let mut good = b.clone();
            good[1] |= flags::PLAIN | extra;
            assert!(Packet::decode(&good).is_ok());
        }
    }

    #[test]
    fn ack_batch_routes_as_its_first_entry() {
        let p = Packet::AckBatch(AckBatch::new(vec![entry(4, 9), entry(5, 10)]).expect("two"));
        assert_eq!(p.endpoints(), Some((ProcId(4), ProcId(9))));
        assert_eq!(p.opcode(), Opcode::AckBatch);
    }
}
