//! The hash table's wire format: one kind byte, then big-endian fields of fixed size. Decoding
//! never panics: anything malformed — an unknown kind, a short or long payload, a flag byte that
//! is neither 0 nor 1 — is `None`, and the caller counts it.

use super::{Pair, Ptr};
use crate::wire::{Reader, Writer};
use bytes::Bytes;

/// A message of the hash table: the one-sided verbs a client posts and the answers a server's
/// NIC gives (§7.3.3), and the leader's replication to its followers (the baseline's CPU path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    /// Client → server: RDMA read of bucket `bucket`'s head pointer.
    ReadHead { op: u64, bucket: u32 },
    /// Client → server: RDMA read of the pair at `ptr`.
    ReadSlot { op: u64, ptr: Ptr },
    /// Client → server: RDMA write of `pair` into the slot `pair.me` names.
    Write { op: u64, pair: Pair },
    /// Client → server: RDMA compare-and-swap of bucket `bucket`'s head from `expect` to `new`.
    Cas {
        op: u64,
        bucket: u32,
        expect: Ptr,
        new: Ptr,
    },
    /// Server → client: bucket `bucket`'s head is `head`.
    HeadIs { op: u64, bucket: u32, head: Ptr },
    /// Server → client: the slot at `ptr` holds `pair` (`None`: never written).
    SlotIs {
        op: u64,
        ptr: Ptr,
        pair: Option<Pair>,
    },
    /// Server → client: the write of the slot `ptr` completed (the completion a fence waits for).
    WriteDone { op: u64, ptr: Ptr },
    /// Server → client: the compare-and-swap that tried to install `new` found `old` (it swapped
    /// exactly when `old` was what it expected).
    CasDone {
        op: u64,
        bucket: u32,
        new: Ptr,
        old: Ptr,
    },
    /// Leader → follower (baseline, replicated): apply `cmd`, the leader's `lseq`th.
    Repl { lseq: u64, cmd: ReplCmd },
    /// Follower → leader: everything up to and including `lseq` is applied.
    ReplAck { lseq: u64 },
}

/// What a leader replicates: the writes that change its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplCmd {
    /// A pair written.
    Write(Pair),
    /// A bucket's head swung (a compare-and-swap that succeeded at the leader).
    SetHead { bucket: u32, head: Ptr },
}

const READ_HEAD: u8 = 1;
const READ_SLOT: u8 = 2;
const WRITE: u8 = 3;
const CAS: u8 = 4;
const HEAD_IS: u8 = 5;
const SLOT_IS: u8 = 6;
const WRITE_DONE: u8 = 7;
const CAS_DONE: u8 = 8;
const REPL: u8 = 9;
const REPL_ACK: u8 = 10;

/// The longest message: a pair read back (kind, operation, pointer, flag, a pair).
pub(crate) const MSG_LEN_MAX: usize = 1 + 8 + 8 + 1 + 32;

impl Writer {
    fn pair(&mut self, p: &Pair) -> &mut Self {
        self.u64(p.key).u64(p.val).u64(p.next.0).u64(p.me.0)
    }
}

impl Reader<'_> {
    fn ht_ptr(&mut self) -> Option<Ptr> {
        self.u64().map(Ptr)
    }
    fn ht_pair(&mut self) -> Option<Pair> {
        Some(Pair {
            key: self.u64()?,
            val: self.u64()?,
            next: self.ht_ptr()?,
            me: self.ht_ptr()?,
        })
    }
}

/// Encodes `m`.
pub(crate) fn encode(m: &Msg) -> Bytes {
    let mut w = Writer::with_capacity(MSG_LEN_MAX);
    match *m {
        Msg::ReadHead { op, bucket } => w.u8(READ_HEAD).u64(op).u32(bucket),
        Msg::ReadSlot { op, ptr } => w.u8(READ_SLOT).u64(op).u64(ptr.0),
        Msg::Write { op, ref pair } => w.u8(WRITE).u64(op).pair(pair),
        Msg::Cas {
            op,
            bucket,
            expect,
            new,
        } => w.u8(CAS).u64(op).u32(bucket).u64(expect.0).u64(new.0),
        Msg::HeadIs { op, bucket, head } => w.u8(HEAD_IS).u64(op).u32(bucket).u64(head.0),
        Msg::SlotIs { op, ptr, ref pair } => {
            w.u8(SLOT_IS).u64(op).u64(ptr.0);
            match pair {
                Some(p) => w.u8(1).pair(p),
                None => w.u8(0),
            }
        }
        Msg::WriteDone { op, ptr } => w.u8(WRITE_DONE).u64(op).u64(ptr.0),
        Msg::CasDone {
            op,
            bucket,
            new,
            old,
        } => w.u8(CAS_DONE).u64(op).u32(bucket).u64(new.0).u64(old.0),
        Msg::Repl { lseq, ref cmd } => {
            w.u8(REPL).u64(lseq);
            match cmd {
                ReplCmd::Write(p) => w.u8(0).pair(p),
                ReplCmd::SetHead { bucket, head } => w.u8(1).u32(*bucket).u64(head.0),
            }
        }
        Msg::ReplAck { lseq } => w.u8(REPL_ACK).u64(lseq),
    };
    debug_assert!(w.0.len() <= MSG_LEN_MAX);
    Bytes::from(w.0)
}

/// Decodes a message; `None` if it is malformed.
pub(crate) fn decode(buf: &[u8]) -> Option<Msg> {
    let mut r = Reader::new(buf);
    let m = match r.u8()? {
        READ_HEAD => Msg::ReadHead {
            op: r.u64()?,
            bucket: r.u32()?,
        },
        READ_SLOT => Msg::ReadSlot {
            op: r.u64()?,
            ptr: r.ht_ptr()?,
        },
        WRITE => Msg::Write {
            op: r.u64()?,
            pair: r.ht_pair()?,
        },
        CAS => Msg::Cas {
            op: r.u64()?,
            bucket: r.u32()?,
            expect: r.ht_ptr()?,
            new: r.ht_ptr()?,
        },
        HEAD_IS => Msg::HeadIs {
            op: r.u64()?,
            bucket: r.u32()?,
            head: r.ht_ptr()?,
        },
        SLOT_IS => {
            let op = r.u64()?;
            let ptr = r.ht_ptr()?;
            let pair = if r.bool()? { Some(r.ht_pair()?) } else { None };
            Msg::SlotIs { op, ptr, pair }
        }
        WRITE_DONE => Msg::WriteDone {
            op: r.u64()?,
            ptr: r.ht_ptr()?,
        },
        CAS_DONE => Msg::CasDone {
            op: r.u64()?,
            bucket: r.u32()?,
            new: r.ht_ptr()?,
            old: r.ht_ptr()?,
        },
        REPL => {
            let lseq = r.u64()?;
            let cmd = match r.u8()? {
                0 => ReplCmd::Write(r.ht_pair()?),
                1 => ReplCmd::SetHead {
                    bucket: r.u32()?,
                    head: r.ht_ptr()?,
                },
                _ => return None,
            };
            Msg::Repl { lseq, cmd }
        }
        REPL_ACK => Msg::ReplAck { lseq: r.u64()? },
        _ => return None,
    };
    r.finish()?;
    Some(m)
}
