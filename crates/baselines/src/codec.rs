//! Byte encoding of [`BasePacket`]: fixed layouts, big-endian, every field checked on decode.
//!
//! ```text
//!  0      1      2      4          8          12
//!  +------+------+------+----------+----------+---------------------------+
//!  |opcode|flags | rsvd | src proc | dst proc | body (Opcode::fixed_len) ..
//!  +------+------+------+----------+----------+---------------------------+
//! ```
//!
//! Body layouts, in order (all integers big-endian):
//!
//! * `Submit`: msg_id u64, dest count u32, dests u32 × count, payload length u16, payload.
//!   Flag [`flags::ALL_DESTS`] means "everyone" and requires a count of 0.
//! * `Ordered`: gseq u64, rseq u64, origin u32, length u16, payload.
//! * `SeqSync`: rseq_next u64, gseq_last u64. `SyncAck`: rseq_next u64. `SubmitLost`:
//!   msg_id u64, count u32.
//! * `Nack`: seq u64, count u32, index_lo u64, index_hi u64. `Lost`: seq u64, count u32.
//! * `TokenPass`: seq u64, pass u64, last holder u32, last start u64 (flag [`flags::HOLDING`]).
//! * `TokenAck`: pass u64.
//! * `TokenData`: gseq u64, holding start u64, prev holder u32, prev start u64, length u16,
//!   payload (flags [`flags::HOLDING`] for `prev`, [`flags::ADDRESSED`]).
//! * `TokenLost`: gseq u64, count u32, holding start u64, prev holder u32, prev start u64.
//! * `Stamped`: ts u64, cseq u64, index u64, length u16, payload.
//! * `Clock`: ts u64, cseq_next u64, index_next u64. `ClockRequest`: empty.
//! * `Propose`: msg_id u64, cseq u64, length u16, payload. `Proposal`, `Final`: msg_id u64,
//!   ts u64. `FinalRequest`: msg_id u64.
//! * `Early`: msg_id u64, length u16, payload. `OrderBatch`: rseq u64, entry count u16 (at
//!   most [`crate::packet::ORDER_BATCH_LEN_MAX`]), then per entry gseq u64, origin u32,
//!   msg_id u64. `Resend`: gseq u64, rseq u64, origin u32, msg_id u64, length u16, payload.
//! * `Causal`: origin u32, seq u64, ack count u16, then per ack origin u32, seq u64, then
//!   length u16, payload (flag [`flags::AGREED`]). `CausalNack`: origin u32, seq u64, count
//!   u32. `CausalStatus`: entry count u16, then per entry origin u32, seq u64. `TotoFlush`,
//!   `TotoInstall`: epoch u64, then a list as `CausalStatus`'s. Ack lists are
//!   decoded as they come; the roles refuse unsorted or over-long ones (`Body::plausible` and
//!   `crate::toto`).
//!
//! Absent optional fields are encoded as zeros with their flag clear; decoding refuses unknown
//! flag bits, unknown opcodes, truncation, and destination lists that are not strictly
//! ascending.

use crate::dests::Dests;
use crate::packet::{
    BasePacket, Body, CausalAck, Holding, Opcode, OrderEntry, CAUSAL_ACK_LEN, HEADER_LEN,
    ORDER_BATCH_LEN_MAX, ORDER_ENTRY_LEN, PAYLOAD_LEN_MAX,
};
use bytes::Bytes;
use core::fmt;
use onepipe_proto::byteio::{ByteReader, ByteWriter, Short};
use onepipe_proto::ids::ProcId;

/// Flag bits (the second byte).
pub mod flags {
    /// `Submit`: the message goes to every process.
    pub const ALL_DESTS: u8 = 1 << 0;
    /// `TokenPass`, `TokenData`, `TokenLost`: the optional holding field is present.
    pub const HOLDING: u8 = 1 << 1;
    /// `TokenData`: the receiver is a destination (not a filler).
    pub const ADDRESSED: u8 = 1 << 2;
    /// `Causal`: an agreed multicast message (clear: a causal-only heartbeat).
    pub const AGREED: u8 = 1 << 3;
}

/// Why a buffer is not a valid [`BasePacket`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer is empty.
    Empty,
    /// The first byte is not a known opcode.
    UnknownOpcode(u8),
    /// The buffer ends before the packet does.
    Truncated {
        /// Bytes the packet needs (at least).
        needed: usize,
        /// Bytes available.
        got: usize,
    },
    /// A flag bit this opcode does not define is set, or `ALL_DESTS` with a non-empty list.
    UnknownFlags(u8),
    /// A destination list is not strictly ascending.
    UnsortedDests,
    /// An `OrderBatch` claims more entries than [`crate::packet::ORDER_BATCH_LEN_MAX`].
    BatchTooLong(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Empty => write!(f, "empty packet"),
            DecodeError::UnknownOpcode(b) => write!(f, "unknown opcode {b:#04x}"),
            DecodeError::Truncated { needed, got } => {
                write!(f, "truncated packet: need {needed} bytes, got {got}")
            }
            DecodeError::UnknownFlags(b) => write!(f, "invalid flag bits {b:#04x}"),
            DecodeError::UnsortedDests => write!(f, "destination list not strictly ascending"),
            DecodeError::BatchTooLong(n) => write!(
                f,
                "order batch of {n} entries exceeds {}",
                crate::packet::ORDER_BATCH_LEN_MAX
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// The flag bits each opcode may use.
fn allowed_flags(op: Opcode) -> u8 {
    match op {
        Opcode::Submit => flags::ALL_DESTS,
        Opcode::TokenPass | Opcode::TokenLost => flags::HOLDING,
        Opcode::TokenData => flags::HOLDING | flags::ADDRESSED,
        Opcode::Causal => flags::AGREED,
        _ => 0,
    }
}

/// The baselines' fields on the shared writer (big-endian).
struct Writer<'a>(ByteWriter<'a>);

impl Writer<'_> {
    fn u16(&mut self, x: u16) {
        self.0.u16_be(x);
    }
    fn u32(&mut self, x: u32) {
        self.0.u32_be(x);
    }
    fn u64(&mut self, x: u64) {
        self.0.u64_be(x);
    }
    fn holding(&mut self, h: Option<Holding>) {
        let h = h.unwrap_or(Holding {
            holder: ProcId(0),
            start: 0,
        });
        self.u32(h.holder.0);
        self.u64(h.start);
    }
    fn payload(&mut self, p: &Bytes) {
        assert!(p.len() <= PAYLOAD_LEN_MAX, "payload too large to encode");
        self.u16(p.len() as u16);
        self.0.bytes(p);
    }
}

/// The baselines' fields on the shared reader (big-endian).
struct Reader<'a>(ByteReader<'a>);

impl From<Short> for DecodeError {
    fn from(s: Short) -> DecodeError {
        DecodeError::Truncated {
            needed: s.needed,
            got: s.got,
        }
    }
}

impl Reader<'_> {
    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(self.0.u16_be()?)
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(self.0.u32_be()?)
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(self.0.u64_be()?)
    }
    fn proc(&mut self) -> Result<ProcId, DecodeError> {
        self.u32().map(ProcId)
    }
    fn holding(&mut self, present: bool) -> Result<Option<Holding>, DecodeError> {
        let holder = self.proc()?;
        let start = self.u64()?;
        Ok(present.then_some(Holding { holder, start }))
    }
    /// A length-prefixed payload, returned as the range it occupies in the buffer.
    fn payload(&mut self) -> Result<core::ops::Range<usize>, DecodeError> {
        let len = self.u16()? as usize;
        let start = self.0.pos();
        self.0.take(len)?;
        Ok(start..start + len)
    }
}

/// The flag byte of `body`: which optional fields are present and how it is addressed.
fn flag_bits(body: &Body) -> u8 {
    match body {
        Body::Submit { dests, .. } if dests.is_all() => flags::ALL_DESTS,
        Body::TokenPass { last: Some(_), .. } | Body::TokenLost { prev: Some(_), .. } => {
            flags::HOLDING
        }
        Body::TokenData {
            prev, addressed, ..
        } => {
            (if prev.is_some() { flags::HOLDING } else { 0 })
                | (if *addressed { flags::ADDRESSED } else { 0 })
        }
        Body::Causal { agreed: true, .. } => flags::AGREED,
        _ => 0,
    }
}

impl Writer<'_> {
    /// Writes the body of any packet, after its header.
    fn body(&mut self, body: &Body) {
        match body {
            Body::Submit { .. }
            | Body::Ordered { .. }
            | Body::SeqSync { .. }
            | Body::SyncAck { .. }
            | Body::SubmitLost { .. } => self.sequencer_body(body),
            Body::Nack { .. } | Body::Lost { .. } => self.stream_body(body),
            Body::TokenPass { .. }
            | Body::TokenAck { .. }
            | Body::TokenData { .. }
            | Body::TokenLost { .. } => self.token_body(body),
            Body::Stamped { .. } | Body::Clock { .. } | Body::ClockRequest => {
                self.lamport_body(body)
            }
            Body::Propose { .. }
            | Body::Proposal { .. }
            | Body::Final { .. }
            | Body::FinalRequest { .. } => self.isis_body(body),
            Body::Early { .. } | Body::OrderBatch { .. } | Body::Resend { .. } => {
                self.plato_body(body)
            }
            Body::Causal { .. }
            | Body::CausalNack { .. }
            | Body::CausalStatus { .. }
            | Body::TotoFlush { .. }
            | Body::TotoInstall { .. } => self.causal_body(body),
        }
    }

    /// Writes a list of causal acknowledgements, count first.
    fn acks(&mut self, acks: &[CausalAck]) {
        assert!(
            acks.len() <= u16::MAX as usize,
            "ack list too long to encode"
        );
        self.u16(acks.len() as u16);
        for a in acks {
            self.u32(a.origin.0);
            self.u64(a.seq);
        }
    }

    /// Writes the body of a causal-layer packet.
    fn causal_body(&mut self, body: &Body) {
        match body {
            Body::Causal {
                origin,
                seq,
                acks,
                payload,
                ..
            } => {
                self.u32(origin.0);
                self.u64(*seq);
                self.acks(acks);
                self.payload(payload);
            }
            Body::CausalNack { origin, seq, count } => {
                self.u32(origin.0);
                self.u64(*seq);
                self.u32(*count);
            }
            Body::CausalStatus { delivered } => self.acks(delivered),
            Body::TotoFlush { epoch, crashed: v } | Body::TotoInstall { epoch, cut: v } => {
                self.u64(*epoch);
                self.acks(v);
            }
            _ => unreachable!("not a causal-layer packet: {body:?}"),
        }
    }

    /// Writes the body of a PLATO packet.
    fn plato_body(&mut self, body: &Body) {
        match body {
            Body::Early { msg_id, payload } => {
                self.u64(*msg_id);
                self.payload(payload);
            }
            Body::OrderBatch { rseq, entries } => {
                self.u64(*rseq);
                assert!(entries.len() <= ORDER_BATCH_LEN_MAX, "order batch too long");
                self.u16(entries.len() as u16);
                for e in entries {
                    self.u64(e.gseq);
                    self.u32(e.origin.0);
                    self.u64(e.msg_id);
                }
            }
            Body::Resend {
                gseq,
                rseq,
                origin,
                msg_id,
                payload,
            } => {
                self.u64(*gseq);
                self.u64(*rseq);
                self.u32(origin.0);
                self.u64(*msg_id);
                self.payload(payload);
            }
            _ => unreachable!("not a PLATO packet: {body:?}"),
        }
    }

    /// Writes the body of a fixed-sequencer packet.
    fn sequencer_body(&mut self, body: &Body) {
        match body {
            Body::Submit {
                msg_id,
                dests,
                payload,
            } => {
                self.u64(*msg_id);
                let list = dests.as_slice().unwrap_or(&[]);
                self.u32(u32::try_from(list.len()).expect("destination list too long"));
                for p in list {
                    self.u32(p.0);
                }
                self.payload(payload);
            }
            Body::Ordered {
                gseq,
                rseq,
                origin,
                payload,
            } => {
                self.u64(*gseq);
                self.u64(*rseq);
                self.u32(origin.0);
                self.payload(payload);
            }
            Body::SeqSync {
                rseq_next,
                gseq_last,
            } => {
                self.u64(*rseq_next);
                self.u64(*gseq_last);
            }
            Body::SyncAck { rseq_next } => self.u64(*rseq_next),
            Body::SubmitLost { msg_id, count } => {
                self.u64(*msg_id);
                self.u32(*count);
            }
            _ => unreachable!("not a sequencer packet: {body:?}"),
        }
    }

    /// Writes the body of a repair packet shared by the sequencer and Lamport streams.
    fn stream_body(&mut self, body: &Body) {
        match body {
            Body::Nack {
                seq,
                count,
                index_lo,
                index_hi,
            } => {
                self.u64(*seq);
                self.u32(*count);
                self.u64(*index_lo);
                self.u64(*index_hi);
            }
            Body::Lost { seq, count } => {
                self.u64(*seq);
                self.u32(*count);
            }
            _ => unreachable!("not a stream repair packet: {body:?}"),
        }
    }

    /// Writes the body of a token packet.
    fn token_body(&mut self, body: &Body) {
        match body {
            Body::TokenPass { seq, pass, last } => {
                self.u64(*seq);
                self.u64(*pass);
                self.holding(*last);
            }
            Body::TokenAck { pass } => self.u64(*pass),
            Body::TokenData {
                gseq,
                holding_start,
                prev,
                payload,
                ..
            } => {
                self.u64(*gseq);
                self.u64(*holding_start);
                self.holding(*prev);
                self.payload(payload);
            }
            Body::TokenLost {
                gseq,
                count,
                holding_start,
                prev,
            } => {
                self.u64(*gseq);
                self.u32(*count);
                self.u64(*holding_start);
                self.holding(*prev);
            }
            _ => unreachable!("not a token packet: {body:?}"),
        }
    }

    /// Writes the body of a Lamport-timestamp packet.
    fn lamport_body(&mut self, body: &Body) {
        match body {
            Body::Stamped {
                ts,
                cseq,
                index,
                payload,
            } => {
                self.u64(*ts);
                self.u64(*cseq);
                self.u64(*index);
                self.payload(payload);
            }
            Body::Clock {
                ts,
                cseq_next,
                index_next,
            } => {
                self.u64(*ts);
                self.u64(*cseq_next);
                self.u64(*index_next);
            }
            Body::ClockRequest => {}
            _ => unreachable!("not a Lamport packet: {body:?}"),
        }
    }

    /// Writes the body of an ISIS packet.
    fn isis_body(&mut self, body: &Body) {
        match body {
            Body::Propose {
                msg_id,
                cseq,
                payload,
            } => {
                self.u64(*msg_id);
                self.u64(*cseq);
                self.payload(payload);
            }
            Body::Proposal { msg_id, ts } | Body::Final { msg_id, ts } => {
                self.u64(*msg_id);
                self.u64(*ts);
            }
            Body::FinalRequest { msg_id } => self.u64(*msg_id),
            _ => unreachable!("not an ISIS packet: {body:?}"),
        }
    }
}

impl Reader<'_> {
    /// Reads the body of an `op` packet whose flag byte is `flag`; `payload` turns a payload's
    /// range into bytes.
    fn body(
        &mut self,
        op: Opcode,
        flag: u8,
        payload: &impl Fn(core::ops::Range<usize>) -> Bytes,
    ) -> Result<Body, DecodeError> {
        let holding = flag & flags::HOLDING != 0;
        match op {
            Opcode::Submit => self.submit(flag, payload),
            Opcode::Ordered
            | Opcode::SeqSync
            | Opcode::SyncAck
            | Opcode::SubmitLost
            | Opcode::Nack
            | Opcode::Lost => self.sequencer_body(op, payload),
            Opcode::TokenPass | Opcode::TokenAck | Opcode::TokenData | Opcode::TokenLost => {
                self.token_body(op, holding, flag & flags::ADDRESSED != 0, payload)
            }
            Opcode::Stamped | Opcode::Clock | Opcode::ClockRequest => {
                self.lamport_body(op, payload)
            }
            Opcode::Propose | Opcode::Proposal | Opcode::Final | Opcode::FinalRequest => {
                self.isis_body(op, payload)
            }
            Opcode::Early | Opcode::OrderBatch | Opcode::Resend => self.plato_body(op, payload),
            Opcode::Causal
            | Opcode::CausalNack
            | Opcode::CausalStatus
            | Opcode::TotoFlush
            | Opcode::TotoInstall => self.causal_body(op, flag & flags::AGREED != 0, payload),
        }
    }

    /// Reads a count-prefixed list of causal acknowledgements (checked whole before allocating
    /// for it).
    fn acks(&mut self) -> Result<Vec<CausalAck>, DecodeError> {
        let n = self.u16()? as usize;
        self.0.count(n, CAUSAL_ACK_LEN)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(CausalAck {
                origin: self.proc()?,
                seq: self.u64()?,
            });
        }
        Ok(v)
    }

    /// Reads the body of a causal-layer packet.
    fn causal_body(
        &mut self,
        op: Opcode,
        agreed: bool,
        payload: &impl Fn(core::ops::Range<usize>) -> Bytes,
    ) -> Result<Body, DecodeError> {
        Ok(match op {
            Opcode::Causal => Body::Causal {
                origin: self.proc()?,
                seq: self.u64()?,
                agreed,
                acks: self.acks()?,
                payload: payload(self.payload()?),
            },
            Opcode::CausalNack => Body::CausalNack {
                origin: self.proc()?,
                seq: self.u64()?,
                count: self.u32()?,
            },
            Opcode::CausalStatus => Body::CausalStatus {
                delivered: self.acks()?,
            },
            Opcode::TotoFlush => Body::TotoFlush {
                epoch: self.u64()?,
                crashed: self.acks()?,
            },
            Opcode::TotoInstall => Body::TotoInstall {
                epoch: self.u64()?,
                cut: self.acks()?,
            },
            _ => unreachable!("not a causal-layer opcode: {op:?}"),
        })
    }

    /// Reads the body of a PLATO packet; an order batch's entries must all be there (checked
    /// before allocating for them).
    fn plato_body(
        &mut self,
        op: Opcode,
        payload: &impl Fn(core::ops::Range<usize>) -> Bytes,
    ) -> Result<Body, DecodeError> {
        Ok(match op {
            Opcode::Early => Body::Early {
                msg_id: self.u64()?,
                payload: payload(self.payload()?),
            },
            Opcode::OrderBatch => {
                let rseq = self.u64()?;
                let n = self.u16()? as usize;
                if n > ORDER_BATCH_LEN_MAX {
                    return Err(DecodeError::BatchTooLong(n));
                }
                self.0.count(n, ORDER_ENTRY_LEN)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    entries.push(OrderEntry {
                        gseq: self.u64()?,
                        origin: self.proc()?,
                        msg_id: self.u64()?,
                    });
                }
                Body::OrderBatch { rseq, entries }
            }
            Opcode::Resend => Body::Resend {
                gseq: self.u64()?,
                rseq: self.u64()?,
                origin: self.proc()?,
                msg_id: self.u64()?,
                payload: payload(self.payload()?),
            },
            _ => unreachable!("not a PLATO opcode: {op:?}"),
        })
    }

    /// Reads a `Submit` body: its destination list must be whole, strictly ascending, and empty
    /// when the flags say "everyone".
    fn submit(
        &mut self,
        flag: u8,
        payload: &impl Fn(core::ops::Range<usize>) -> Bytes,
    ) -> Result<Body, DecodeError> {
        let msg_id = self.u64()?;
        let n = self.u32()? as usize;
        if flag & flags::ALL_DESTS != 0 && n != 0 {
            return Err(DecodeError::UnknownFlags(flag));
        }
        // Check the whole list is there before allocating for it.
        self.0.count(n, 4)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(self.proc()?);
        }
        let dests = if flag & flags::ALL_DESTS != 0 {
            Dests::all()
        } else {
            Dests::from_sorted(v).ok_or(DecodeError::UnsortedDests)?
        };
        let p = self.payload()?;
        Ok(Body::Submit {
            msg_id,
            dests,
            payload: payload(p),
        })
    }

    /// Reads the body of a fixed-sequencer packet other than `Submit`, or of a stream repair
    /// packet.
    fn sequencer_body(
        &mut self,
        op: Opcode,
        payload: &impl Fn(core::ops::Range<usize>) -> Bytes,
    ) -> Result<Body, DecodeError> {
        Ok(match op {
            Opcode::Ordered => Body::Ordered {
                gseq: self.u64()?,
                rseq: self.u64()?,
                origin: self.proc()?,
                payload: payload(self.payload()?),
            },
            Opcode::SeqSync => Body::SeqSync {
                rseq_next: self.u64()?,
                gseq_last: self.u64()?,
            },
            Opcode::SyncAck => Body::SyncAck {
                rseq_next: self.u64()?,
            },
            Opcode::SubmitLost => Body::SubmitLost {
                msg_id: self.u64()?,
                count: self.u32()?,
            },
            Opcode::Nack => Body::Nack {
                seq: self.u64()?,
                count: self.u32()?,
                index_lo: self.u64()?,
                index_hi: self.u64()?,
            },
            Opcode::Lost => Body::Lost {
                seq: self.u64()?,
                count: self.u32()?,
            },
            _ => unreachable!("not a sequencer opcode: {op:?}"),
        })
    }

    /// Reads the body of a token packet; `holding` and `addressed` come from its flags.
    fn token_body(
        &mut self,
        op: Opcode,
        holding: bool,
        addressed: bool,
        payload: &impl Fn(core::ops::Range<usize>) -> Bytes,
    ) -> Result<Body, DecodeError> {
        Ok(match op {
            Opcode::TokenPass => Body::TokenPass {
                seq: self.u64()?,
                pass: self.u64()?,
                last: self.holding(holding)?,
            },
            Opcode::TokenAck => Body::TokenAck { pass: self.u64()? },
            Opcode::TokenData => Body::TokenData {
                gseq: self.u64()?,
                holding_start: self.u64()?,
                prev: self.holding(holding)?,
                addressed,
                payload: payload(self.payload()?),
            },
            Opcode::TokenLost => Body::TokenLost {
                gseq: self.u64()?,
                count: self.u32()?,
                holding_start: self.u64()?,
                prev: self.holding(holding)?,
            },
            _ => unreachable!("not a token opcode: {op:?}"),
        })
    }

    /// Reads the body of a Lamport-timestamp packet.
    fn lamport_body(
        &mut self,
        op: Opcode,
        payload: &impl Fn(core::ops::Range<usize>) -> Bytes,
    ) -> Result<Body, DecodeError> {
        Ok(match op {
            Opcode::Stamped => Body::Stamped {
                ts: self.u64()?,
                cseq: self.u64()?,
                index: self.u64()?,
                payload: payload(self.payload()?),
            },
            Opcode::Clock => Body::Clock {
                ts: self.u64()?,
                cseq_next: self.u64()?,
                index_next: self.u64()?,
            },
            Opcode::ClockRequest => Body::ClockRequest,
            _ => unreachable!("not a Lamport opcode: {op:?}"),
        })
    }

    /// Reads the body of an ISIS packet.
    fn isis_body(
        &mut self,
        op: Opcode,
        payload: &impl Fn(core::ops::Range<usize>) -> Bytes,
    ) -> Result<Body, DecodeError> {
        Ok(match op {
            Opcode::Propose => Body::Propose {
                msg_id: self.u64()?,
                cseq: self.u64()?,
                payload: payload(self.payload()?),
            },
            Opcode::Proposal => Body::Proposal {
                msg_id: self.u64()?,
                ts: self.u64()?,
            },
            Opcode::Final => Body::Final {
                msg_id: self.u64()?,
                ts: self.u64()?,
            },
            Opcode::FinalRequest => Body::FinalRequest {
                msg_id: self.u64()?,
            },
            _ => unreachable!("not an ISIS opcode: {op:?}"),
        })
    }
}

impl BasePacket {
    /// Appends the encoding of `self` to `out` ([`BasePacket::encoded_len`] bytes).
    ///
    /// # Panics
    /// If a payload exceeds [`PAYLOAD_LEN_MAX`] or a destination list has more than `u32::MAX`
    /// entries: `send` refuses both, so either here is a bug in the caller.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let op = self.opcode();
        let flag = flag_bits(&self.body);
        out.extend_from_slice(&[op as u8, flag, 0, 0]);
        let mut w = Writer(ByteWriter::new(out));
        w.u32(self.src.0);
        w.u32(self.dst.0);
        w.body(&self.body);
        debug_assert_eq!(out.len() - start, self.encoded_len());
    }

    /// Decodes one packet from the front of `buf`, returning it and the bytes it used. Payloads
    /// are copied out of `buf`; [`BasePacket::decode_bytes`] shares the buffer instead.
    pub fn decode(buf: &[u8]) -> Result<(BasePacket, usize), DecodeError> {
        Self::decode_with(buf, |r| Bytes::copy_from_slice(&buf[r]))
    }

    /// Like [`BasePacket::decode`], but payloads are zero-copy slices of `buf`.
    pub fn decode_bytes(buf: &Bytes) -> Result<(BasePacket, usize), DecodeError> {
        Self::decode_with(buf, |r| buf.slice(r))
    }

    fn decode_with(
        buf: &[u8],
        payload: impl Fn(core::ops::Range<usize>) -> Bytes,
    ) -> Result<(BasePacket, usize), DecodeError> {
        let op_byte = *buf.first().ok_or(DecodeError::Empty)?;
        let op = Opcode::from_u8(op_byte).ok_or(DecodeError::UnknownOpcode(op_byte))?;
        let mut r = Reader(ByteReader::new(buf));
        r.0.take(HEADER_LEN)?;
        let flag = buf[1];
        if flag & !allowed_flags(op) != 0 || buf[2] != 0 || buf[3] != 0 {
            return Err(DecodeError::UnknownFlags(flag));
        }
        let src = ProcId(u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]));
        let dst = ProcId(u32::from_be_bytes([buf[8], buf[9], buf[10], buf[11]]));
        let body = r.body(op, flag, &payload)?;
        Ok((BasePacket { src, dst, body }, r.0.pos()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn holding() -> impl Strategy<Value = Option<Holding>> {
        proptest::option::of((any::<u32>(), any::<u64>()).prop_map(|(h, s)| Holding {
            holder: ProcId(h),
            start: s,
        }))
    }

    fn bytes() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(Bytes::from)
    }

    fn dests() -> impl Strategy<Value = Dests> {
        prop_oneof![
            Just(Dests::all()),
            proptest::collection::vec(any::<u32>(), 0..20)
                .prop_map(|v| Dests::list(v.into_iter().map(ProcId))),
        ]
    }

    fn body() -> impl Strategy<Value = Body> {
        prop_oneof![
            (any::<u64>(), dests(), bytes()).prop_map(|(msg_id, dests, payload)| Body::Submit {
                msg_id,
                dests,
                payload
            }),
            (any::<u64>(), any::<u64>(), any::<u32>(), bytes()).prop_map(|(g, r, o, p)| {
                Body::Ordered {
                    gseq: g,
                    rseq: r,
                    origin: ProcId(o),
                    payload: p,
                }
            }),
            (any::<u64>(), any::<u64>()).prop_map(|(a, b)| Body::SeqSync {
                rseq_next: a,
                gseq_last: b
            }),
            any::<u64>().prop_map(|rseq_next| Body::SyncAck { rseq_next }),
            (any::<u64>(), any::<u32>())
                .prop_map(|(msg_id, count)| Body::SubmitLost { msg_id, count }),
            (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(s, c, l, h)| {
                Body::Nack {
                    seq: s,
                    count: c,
                    index_lo: l,
                    index_hi: h,
                }
            }),
            (any::<u64>(), any::<u32>()).prop_map(|(seq, count)| Body::Lost { seq, count }),
            (any::<u64>(), any::<u64>(), holding()).prop_map(|(seq, pass, last)| Body::TokenPass {
                seq,
                pass,
                last
            }),
            any::<u64>().prop_map(|pass| Body::TokenAck { pass }),
            (
                any::<u64>(),
                any::<u64>(),
                holding(),
                any::<bool>(),
                bytes()
            )
                .prop_map(|(gseq, holding_start, prev, addressed, payload)| {
                    Body::TokenData {
                        gseq,
                        holding_start,
                        prev,
                        addressed,
                        payload,
                    }
                }),
            (any::<u64>(), any::<u32>(), any::<u64>(), holding()).prop_map(
                |(gseq, count, holding_start, prev)| Body::TokenLost {
                    gseq,
                    count,
                    holding_start,
                    prev,
                }
            ),
            (any::<u64>(), any::<u64>(), any::<u64>(), bytes()).prop_map(|(ts, c, i, p)| {
                Body::Stamped {
                    ts,
                    cseq: c,
                    index: i,
                    payload: p,
                }
            }),
            (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(ts, c, i)| Body::Clock {
                ts,
                cseq_next: c,
                index_next: i
            }),
            Just(Body::ClockRequest),
            (any::<u64>(), any::<u64>(), bytes()).prop_map(|(msg_id, cseq, payload)| {
                Body::Propose {
                    msg_id,
                    cseq,
                    payload,
                }
            }),
            (any::<u64>(), any::<u64>()).prop_map(|(msg_id, ts)| Body::Proposal { msg_id, ts }),
            (any::<u64>(), any::<u64>()).prop_map(|(msg_id, ts)| Body::Final { msg_id, ts }),
            any::<u64>().prop_map(|msg_id| Body::FinalRequest { msg_id }),
            (any::<u64>(), bytes()).prop_map(|(msg_id, payload)| Body::Early { msg_id, payload }),
            (
                any::<u64>(),
                proptest::collection::vec((any::<u64>(), any::<u32>(), any::<u64>()), 0..12)
            )
                .prop_map(|(rseq, v)| Body::OrderBatch {
                    rseq,
                    entries: v
                        .into_iter()
                        .map(|(gseq, o, msg_id)| OrderEntry {
                            gseq,
                            origin: ProcId(o),
                            msg_id
                        })
                        .collect(),
                }),
            (
                any::<u64>(),
                any::<u64>(),
                any::<u32>(),
                any::<u64>(),
                bytes()
            )
                .prop_map(|(gseq, rseq, o, msg_id, payload)| Body::Resend {
                    gseq,
                    rseq,
                    origin: ProcId(o),
                    msg_id,
                    payload,
                }),
            (any::<u32>(), any::<u64>(), any::<bool>(), acks(), bytes()).prop_map(
                |(o, seq, agreed, acks, payload)| Body::Causal {
                    origin: ProcId(o),
                    seq,
                    agreed,
                    acks,
                    payload,
                }
            ),
            (any::<u32>(), any::<u64>(), any::<u32>()).prop_map(|(o, seq, count)| {
                Body::CausalNack {
                    origin: ProcId(o),
                    seq,
                    count,
                }
            }),
            acks().prop_map(|delivered| Body::CausalStatus { delivered }),
            (any::<u64>(), acks()).prop_map(|(epoch, crashed)| Body::TotoFlush { epoch, crashed }),
            (any::<u64>(), acks()).prop_map(|(epoch, cut)| Body::TotoInstall { epoch, cut }),
        ]
    }

    fn acks() -> impl Strategy<Value = Vec<CausalAck>> {
        proptest::collection::vec((any::<u32>(), any::<u64>()), 0..12).prop_map(|v| {
            v.into_iter()
                .map(|(o, seq)| CausalAck {
                    origin: ProcId(o),
                    seq,
                })
                .collect()
        })
    }

    fn packet() -> impl Strategy<Value = BasePacket> {
        (any::<u32>(), any::<u32>(), body()).prop_map(|(s, d, body)| BasePacket {
            src: ProcId(s),
            dst: ProcId(d),
            body,
        })
    }

    proptest! {
        #[test]
        fn encode_decode_round_trip(p in packet(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
            let mut buf = Vec::new();
            p.encode(&mut buf);
            prop_assert_eq!(buf.len(), p.encoded_len());
            let len = buf.len();
            buf.extend_from_slice(&tail);
            let (q, used) = BasePacket::decode(&buf).unwrap();
            prop_assert_eq!(used, len);
            prop_assert_eq!(&q, &p);
            let (r, used) = BasePacket::decode_bytes(&Bytes::from(buf)).unwrap();
            prop_assert_eq!(used, len);
            prop_assert_eq!(r, p);
        }

        #[test]
        fn every_strict_prefix_is_truncated(p in packet()) {
            let mut buf = Vec::new();
            p.encode(&mut buf);
            for cut in 1..buf.len() {
                let e = BasePacket::decode(&buf[..cut]).unwrap_err();
                prop_assert!(matches!(e, DecodeError::Truncated { .. }), "{:?}", e);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..300)) {
            // Whatever decodes re-encodes to the same length and decodes to itself (absent
            // optional fields are canonicalised to zeros).
            if let Ok((p, used)) = BasePacket::decode(&buf) {
                let mut again = Vec::new();
                p.encode(&mut again);
                prop_assert_eq!(again.len(), used);
                prop_assert_eq!(BasePacket::decode(&again).unwrap().0, p);
            }
        }
    }

    #[test]
    fn typed_errors() {
        assert_eq!(BasePacket::decode(&[]), Err(DecodeError::Empty));
        assert_eq!(
            BasePacket::decode(&[0xEE]),
            Err(DecodeError::UnknownOpcode(0xEE))
        );
        let mut buf = Vec::new();
        BasePacket {
            src: ProcId(1),
            dst: ProcId(2),
            body: Body::TokenAck { pass: 3 },
        }
        .encode(&mut buf);
        buf[1] = flags::ADDRESSED;
        assert_eq!(
            BasePacket::decode(&buf),
            Err(DecodeError::UnknownFlags(flags::ADDRESSED))
        );
        let mut s = Vec::new();
        BasePacket {
            src: ProcId(1),
            dst: ProcId(2),
            body: Body::Submit {
                msg_id: 0,
                dests: Dests::list([ProcId(1), ProcId(2)]),
                payload: Bytes::new(),
            },
        }
        .encode(&mut s);
        // Swap the two destinations: 1, 2 → 2, 1.
        s[HEADER_LEN + 12..HEADER_LEN + 20].copy_from_slice(&[0, 0, 0, 2, 0, 0, 0, 1]);
        assert_eq!(BasePacket::decode(&s), Err(DecodeError::UnsortedDests));
    }

    #[test]
    fn order_batch_longer_than_the_limit_is_refused() {
        let mut buf = vec![Opcode::OrderBatch as u8, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2];
        buf.extend_from_slice(&7u64.to_be_bytes());
        buf.extend_from_slice(&u16::MAX.to_be_bytes());
        assert_eq!(
            BasePacket::decode(&buf),
            Err(DecodeError::BatchTooLong(u16::MAX as usize))
        );
    }

    #[test]
    fn huge_dest_count_is_truncated_not_allocated() {
        let mut buf = vec![Opcode::Submit as u8, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2];
        buf.extend_from_slice(&7u64.to_be_bytes());
        buf.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            BasePacket::decode(&buf),
            Err(DecodeError::Truncated { .. })
        ));
    }
}
