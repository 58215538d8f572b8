//! The binary encoding of the §5.2 management messages, [`CtrlMsg`] and [`RelayMsg`]: one
//! codec for every place they leave a process — the controller store's log entries
//! (`onepipe_ctrlstore::Entry`, which frames a message with its kind and time) and the live
//! runtime's control connection (which carries the bytes in hex inside a JSON line).
//!
//! Hand-written, no serde (this crate has none). All integers are little-endian; a list is a
//! `u32` count followed by its items; an `Option<Timestamp>` is a flag byte then, if 1, the
//! `u64`; a `bool` is a byte, 0 or 1.
//!
//! ```text
//! ctrl     = tag:u8 fields                                        tags 1..=10
//! LinkDown      1 = reporter:u32 link:u32 flag:u8 [commit:u64]
//! Failure       2 = round:u32 n:u32 (proc:u32 ts:u64)*n m:u32 (host:u32)*m
//! Recall        3 = round:u32 from:u32 n:u32 (proc:u32 ts:u64)*n
//!                   m:u32 (src:u32 dst:u32 psn:u32 frags:u32)*m
//! RecallAck     4 = round:u32 from:u32
//! Completed     5 = round:u32 host:u32
//! Resume        6 = round:u32 n:u32 (link:u32)*n
//! Isolate       7 = link:u32
//! Departed      8 = host:u32 flag:u8 [last:u64]
//! Depart        9 = link:u32
//! CallbackTaken 10 = round:u32 host:u32
//! relay    = tag:u8 fields                                        tags 1..=10
//! Recalled      1 = n:u32 (proc:u32 ts:u64)*n
//! RecoverRequest 2 = host:u32
//! Rejoin        3 = host:u32
//! Admitted      4 = link:u32 alive:u8 flag:u8 [barrier:u64] flag:u8 [commit:u64]
//! Forward       5 = from:u32 n:u32 (len:u32 packet)*n              packet: Packet::encode
//! Failed        6 = ts:u64
//! Settle        7 = n:u32 (proc:u32 ts:u64)*n m:u32 (proc:u32 ts:u64)*m
//! Admit         8 = link:u32 apply:u8
//! Joined        9 = n:u32 (proc:u32)*n floor:u64 m:u32 (proc:u32 ts:u64)*m
//! PeerJoined   10 = host:u32 n:u32 (proc:u32)*n floor:u64
//! ```
//!
//! Decoding distrusts its input (a member's line, a shared store): every count is checked
//! against the bytes left before anything is allocated, timestamps must fit in 48 bits,
//! a forward carries at most [`FORWARD_PACKETS_MAX`] packets, each exactly one well-formed
//! packet of its stated length, and [`decode_ctrl`] / [`decode_relay`] refuse trailing bytes.
//! Nothing panics on malformed input. The encoding is canonical: what decodes re-encodes to the
//! same bytes.

use super::{CtrlMsg, RelayMsg};
use crate::byteio::{ByteReader, ByteWriter, Short};
use crate::ids::{LinkId, NodeId, ProcId, Psn};
use crate::time::Timestamp;
use crate::wire::{self, Packet, BEACON_LEN};
use core::fmt;

/// Most packets one [`RelayMsg::Forward`] may carry (a host forwards one message's fragments,
/// or one batch of ACKs).
pub const FORWARD_PACKETS_MAX: usize = 4096;

/// The relay tags: those of the relays a controller takes as inputs (§5.2: `Recalled`,
/// `RecoverRequest`, `Rejoin`, `Admitted`) are 1 to 4.
pub mod relay_tag {
    /// [`super::RelayMsg::Recalled`].
    pub const RECALLED: u8 = 1;
    /// [`super::RelayMsg::RecoverRequest`].
    pub const RECOVER_REQUEST: u8 = 2;
    /// [`super::RelayMsg::Rejoin`].
    pub const REJOIN: u8 = 3;
    /// [`super::RelayMsg::Admitted`].
    pub const ADMITTED: u8 = 4;
    /// [`super::RelayMsg::Forward`].
    pub const FORWARD: u8 = 5;
    /// [`super::RelayMsg::Failed`].
    pub const FAILED: u8 = 6;
    /// [`super::RelayMsg::Settle`].
    pub const SETTLE: u8 = 7;
    /// [`super::RelayMsg::Admit`].
    pub const ADMIT: u8 = 8;
    /// [`super::RelayMsg::Joined`].
    pub const JOINED: u8 = 9;
    /// [`super::RelayMsg::PeerJoined`].
    pub const PEER_JOINED: u8 = 10;
}

/// Why bytes are not a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside a field (or a count promised more than is left).
    Truncated,
    /// An unknown message tag.
    Tag(u8),
    /// A timestamp wider than 48 bits: not one [`Timestamp::new`] can produce.
    Timestamp(u64),
    /// An option flag or a `bool` other than 0 or 1.
    Flag(u8),
    /// Bytes left over after the message.
    Trailing(usize),
    /// A forward of more than [`FORWARD_PACKETS_MAX`] packets.
    Forward(usize),
    /// A forward's packet `.0` is not one well-formed packet of its stated length.
    Packet(usize, PacketError),
}

/// What is wrong with one forwarded packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketError {
    /// Its bytes do not decode.
    Malformed(wire::DecodeError),
    /// It decodes from fewer bytes than stated (this many are left over).
    Trailing(usize),
}

/// The bytes of `msg`.
pub fn encode_ctrl(msg: &CtrlMsg) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    write_ctrl(&mut ByteWriter::new(&mut out), msg);
    out
}

/// The bytes of `msg` (every relay has an encoding).
pub fn encode_relay(msg: &RelayMsg) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    write_relay(&mut ByteWriter::new(&mut out), msg);
    out
}

/// The message `bytes` encode, all of them.
pub fn decode_ctrl(bytes: &[u8]) -> Result<CtrlMsg, DecodeError> {
    let mut r = ByteReader::new(bytes);
    let msg = read_ctrl(&mut r)?;
    finish(&r)?;
    Ok(msg)
}

/// The relay `bytes` encode, all of them.
pub fn decode_relay(bytes: &[u8]) -> Result<RelayMsg, DecodeError> {
    let mut r = ByteReader::new(bytes);
    let msg = read_relay(&mut r)?;
    finish(&r)?;
    Ok(msg)
}

fn finish(r: &ByteReader<'_>) -> Result<(), DecodeError> {
    match r.remaining() {
        0 => Ok(()),
        n => Err(DecodeError::Trailing(n)),
    }
}

/// Appends `msg` (a framing format's message field).
pub fn write_ctrl(w: &mut ByteWriter<'_>, msg: &CtrlMsg) {
    match msg {
        CtrlMsg::LinkDown {
            reporter,
            link,
            last_commit,
        } => {
            w.u8(1).u32_le(reporter.0).u32_le(link.0);
            put_opt_ts(w, *last_commit);
        }
        CtrlMsg::Failure {
            round,
            failed,
            correct,
        } => {
            w.u8(2).u32_le(*round);
            put_pairs(w, failed);
            put_len(w, correct.len());
            for h in correct {
                w.u32_le(h.0);
            }
        }
        CtrlMsg::Recall {
            round,
            from,
            groups,
            unacked,
        } => {
            w.u8(3).u32_le(*round).u32_le(from.0);
            put_pairs(w, groups);
            put_len(w, unacked.len());
            for &(src, dst, psn, frags) in unacked {
                w.u32_le(src.0).u32_le(dst.0).u32_le(psn.0).u32_le(frags);
            }
        }
        CtrlMsg::RecallAck { round, from } => {
            w.u8(4).u32_le(*round).u32_le(from.0);
        }
        CtrlMsg::Completed { round, host } => {
            w.u8(5).u32_le(*round).u32_le(host.0);
        }
        CtrlMsg::Resume { round, dead_links } => {
            w.u8(6).u32_le(*round);
            put_len(w, dead_links.len());
            for l in dead_links {
                w.u32_le(l.0);
            }
        }
        CtrlMsg::Isolate { link } => {
            w.u8(7).u32_le(link.0);
        }
        CtrlMsg::Departed { host, last } => {
            w.u8(8).u32_le(host.0);
            put_opt_ts(w, *last);
        }
        CtrlMsg::Depart { link } => {
            w.u8(9).u32_le(link.0);
        }
        CtrlMsg::CallbackTaken { round, host } => {
            w.u8(10).u32_le(*round).u32_le(host.0);
        }
    }
}

/// Appends `msg` (a framing format's relay field).
pub fn write_relay(w: &mut ByteWriter<'_>, msg: &RelayMsg) {
    use relay_tag::*;
    match msg {
        RelayMsg::Recalled { groups } => {
            w.u8(RECALLED);
            put_pairs(w, groups);
        }
        RelayMsg::RecoverRequest { host } => {
            w.u8(RECOVER_REQUEST).u32_le(host.0);
        }
        RelayMsg::Rejoin { host } => {
            w.u8(REJOIN).u32_le(host.0);
        }
        RelayMsg::Admitted {
            link,
            alive,
            barrier,
            commit,
        } => {
            w.u8(ADMITTED).u32_le(link.0).u8(u8::from(*alive));
            put_opt_ts(w, *barrier);
            put_opt_ts(w, *commit);
        }
        RelayMsg::Forward { from, packets } => {
            w.u8(FORWARD).u32_le(from.0);
            put_len(w, packets.len());
            let mut bytes = Vec::new();
            for p in packets {
                bytes.clear();
                p.encode(&mut bytes);
                put_len(w, bytes.len());
                w.bytes(&bytes);
            }
        }
        RelayMsg::Failed { ts } => {
            w.u8(FAILED).u64_le(ts.raw());
        }
        RelayMsg::Settle { failed, recalled } => {
            w.u8(SETTLE);
            put_pairs(w, failed);
            put_pairs(w, recalled);
        }
        RelayMsg::Admit { link, apply } => {
            w.u8(ADMIT).u32_le(link.0).u8(u8::from(*apply));
        }
        RelayMsg::Joined {
            procs,
            floor,
            failed,
        } => {
            w.u8(JOINED);
            put_procs(w, procs);
            w.u64_le(floor.raw());
            put_pairs(w, failed);
        }
        RelayMsg::PeerJoined { host, procs, floor } => {
            w.u8(PEER_JOINED).u32_le(host.0);
            put_procs(w, procs);
            w.u64_le(floor.raw());
        }
    }
}

/// Reads one message (a framing format's message field).
pub fn read_ctrl(r: &mut ByteReader<'_>) -> Result<CtrlMsg, DecodeError> {
    Ok(match r.u8()? {
        1 => CtrlMsg::LinkDown {
            reporter: NodeId(r.u32_le()?),
            link: LinkId(r.u32_le()?),
            last_commit: opt_ts(r)?,
        },
        2 => CtrlMsg::Failure {
            round: r.u32_le()?,
            failed: pairs(r)?,
            correct: list(r, 4, |r| Ok(NodeId(r.u32_le()?)))?,
        },
        3 => CtrlMsg::Recall {
            round: r.u32_le()?,
            from: NodeId(r.u32_le()?),
            groups: pairs(r)?,
            unacked: list(r, 16, |r| {
                let (src, dst) = (ProcId(r.u32_le()?), ProcId(r.u32_le()?));
                Ok((src, dst, Psn(r.u32_le()?), r.u32_le()?))
            })?,
        },
        4 => CtrlMsg::RecallAck {
            round: r.u32_le()?,
            from: NodeId(r.u32_le()?),
        },
        5 => CtrlMsg::Completed {
            round: r.u32_le()?,
            host: NodeId(r.u32_le()?),
        },
        6 => CtrlMsg::Resume {
            round: r.u32_le()?,
            dead_links: list(r, 4, |r| Ok(LinkId(r.u32_le()?)))?,
        },
        7 => CtrlMsg::Isolate {
            link: LinkId(r.u32_le()?),
        },
        8 => CtrlMsg::Departed {
            host: NodeId(r.u32_le()?),
            last: opt_ts(r)?,
        },
        9 => CtrlMsg::Depart {
            link: LinkId(r.u32_le()?),
        },
        10 => CtrlMsg::CallbackTaken {
            round: r.u32_le()?,
            host: NodeId(r.u32_le()?),
        },
        other => return Err(DecodeError::Tag(other)),
    })
}

/// Reads one relay (a framing format's relay field).
pub fn read_relay(r: &mut ByteReader<'_>) -> Result<RelayMsg, DecodeError> {
    use relay_tag::*;
    Ok(match r.u8()? {
        RECALLED => RelayMsg::Recalled { groups: pairs(r)? },
        RECOVER_REQUEST => RelayMsg::RecoverRequest {
            host: NodeId(r.u32_le()?),
        },
        REJOIN => RelayMsg::Rejoin {
            host: NodeId(r.u32_le()?),
        },
        ADMITTED => RelayMsg::Admitted {
            link: LinkId(r.u32_le()?),
            alive: flag(r)?,
            barrier: opt_ts(r)?,
            commit: opt_ts(r)?,
        },
        FORWARD => RelayMsg::Forward {
            from: NodeId(r.u32_le()?),
            packets: forwarded(r)?,
        },
        FAILED => RelayMsg::Failed { ts: ts(r)? },
        SETTLE => RelayMsg::Settle {
            failed: pairs(r)?,
            recalled: pairs(r)?,
        },
        ADMIT => RelayMsg::Admit {
            link: LinkId(r.u32_le()?),
            apply: flag(r)?,
        },
        JOINED => RelayMsg::Joined {
            procs: procs(r)?,
            floor: ts(r)?,
            failed: pairs(r)?,
        },
        PEER_JOINED => RelayMsg::PeerJoined {
            host: NodeId(r.u32_le()?),
            procs: procs(r)?,
            floor: ts(r)?,
        },
        other => return Err(DecodeError::Tag(other)),
    })
}

fn put_len(w: &mut ByteWriter<'_>, n: usize) {
    // A list longer than u32::MAX items fits in no frame that carries it; saturating keeps the
    // encoder total (a log entry's size check refuses it, a decoder finds it truncated).
    w.u32_le(u32::try_from(n).unwrap_or(u32::MAX));
}

fn put_opt_ts(w: &mut ByteWriter<'_>, ts: Option<Timestamp>) {
    match ts {
        None => w.u8(0),
        Some(ts) => w.u8(1).u64_le(ts.raw()),
    };
}

fn put_pairs(w: &mut ByteWriter<'_>, pairs: &[(ProcId, Timestamp)]) {
    put_len(w, pairs.len());
    for &(p, ts) in pairs {
        w.u32_le(p.0).u64_le(ts.raw());
    }
}

fn put_procs(w: &mut ByteWriter<'_>, procs: &[ProcId]) {
    put_len(w, procs.len());
    for p in procs {
        w.u32_le(p.0);
    }
}

/// A timestamp that fits in 48 bits.
fn ts(r: &mut ByteReader<'_>) -> Result<Timestamp, DecodeError> {
    let raw = r.u64_le()?;
    let ts = Timestamp::new(raw);
    if ts.raw() != raw {
        return Err(DecodeError::Timestamp(raw));
    }
    Ok(ts)
}

/// What [`put_opt_ts`] wrote: a flag byte (0 none, 1 some), then the timestamp.
fn opt_ts(r: &mut ByteReader<'_>) -> Result<Option<Timestamp>, DecodeError> {
    Ok(if flag(r)? { Some(ts(r)?) } else { None })
}

/// A byte that is 0 or 1.
fn flag(r: &mut ByteReader<'_>) -> Result<bool, DecodeError> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        f => Err(DecodeError::Flag(f)),
    }
}

/// A counted list whose items take at least `item_bytes` each: the count is checked against
/// what is left before anything is allocated.
fn list<T>(
    r: &mut ByteReader<'_>,
    item_bytes: usize,
    mut item: impl FnMut(&mut ByteReader<'_>) -> Result<T, DecodeError>,
) -> Result<Vec<T>, DecodeError> {
    let n = r.u32_le()? as usize;
    let n = r.count(n, item_bytes)?;
    (0..n).map(|_| item(r)).collect()
}

fn pairs(r: &mut ByteReader<'_>) -> Result<Vec<(ProcId, Timestamp)>, DecodeError> {
    list(r, 12, |r| Ok((ProcId(r.u32_le()?), ts(r)?)))
}

fn procs(r: &mut ByteReader<'_>) -> Result<Vec<ProcId>, DecodeError> {
    list(r, 4, |r| Ok(ProcId(r.u32_le()?)))
}

/// A forward's packets: at most [`FORWARD_PACKETS_MAX`], each exactly its stated length.
fn forwarded(r: &mut ByteReader<'_>) -> Result<Vec<Packet>, DecodeError> {
    // The shortest packet is a beacon.
    let n = r.u32_le()? as usize;
    let n = r.count(n, 4 + BEACON_LEN)?;
    if n > FORWARD_PACKETS_MAX {
        return Err(DecodeError::Forward(n));
    }
    (0..n)
        .map(|i| {
            let len = r.u32_le()? as usize;
            let bytes = r.take(len)?;
            match Packet::decode(bytes) {
                Ok((p, used)) if used == len => Ok(p),
                Ok((_, used)) => Err(DecodeError::Packet(i, PacketError::Trailing(len - used))),
                Err(e) => Err(DecodeError::Packet(i, PacketError::Malformed(e))),
            }
        })
        .collect()
}

impl From<Short> for DecodeError {
    fn from(_: Short) -> DecodeError {
        DecodeError::Truncated
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "truncated message"),
            DecodeError::Tag(t) => write!(f, "unknown message tag {t}"),
            DecodeError::Timestamp(t) => write!(f, "timestamp {t:#x} wider than 48 bits"),
            DecodeError::Flag(b) => write!(f, "flag {b} is neither 0 nor 1"),
            DecodeError::Trailing(n) => write!(f, "{n} bytes after the message"),
            DecodeError::Forward(n) => {
                write!(
                    f,
                    "{n} packets in one forward, at most {FORWARD_PACKETS_MAX}"
                )
            }
            DecodeError::Packet(i, PacketError::Malformed(e)) => write!(f, "packet {i}: {e}"),
            DecodeError::Packet(i, PacketError::Trailing(n)) => {
                write!(f, "packet {i}: {n} trailing bytes")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

#[cfg(test)]
mod tests;
