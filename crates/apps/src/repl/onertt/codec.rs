//! The wire format of 1-RTT replication: one kind byte, then big-endian fields. Decoding never
//! panics: anything malformed is `None` (the caller counts it).

use crate::repl::{Cmd, Key, Val};
use crate::wire::{Reader, Writer};
use bytes::Bytes;

/// An entry as it travels in a recovery (no value bytes: values are identities here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WireEntry {
    /// Its 1Pipe timestamp.
    pub ts: u64,
    /// Its client.
    pub client: u32,
    /// Its number on the (client, replica) pairs.
    pub seq: u64,
    /// The client's operation id.
    pub id: u64,
    /// The command.
    pub cmd: Cmd,
    /// Bytes of value padding it carried.
    pub pad: u32,
}

/// What a recovery decides for epoch `epoch`: the replicas of the new view, the position below
/// which every member keeps its own log (committed, hence identical), and the entries that
/// follow it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Value {
    /// The epoch it starts.
    pub epoch: u64,
    /// The new view's replicas, as a bit mask of process ids.
    pub members: u64,
    /// Members keep their log below this position.
    pub keep: u64,
    /// The entries from `keep` on.
    pub entries: Vec<WireEntry>,
}

/// A message of 1-RTT replication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    /// Client → every replica (one best-effort scattering): a log entry, and the client's
    /// commit point (every position below `commit` is committed), piggybacked.
    Entry {
        epoch: u64,
        seq: u64,
        id: u64,
        cmd: Cmd,
        pad: u32,
        commit: u64,
    },
    /// Client → replicas: every position below `upto` is committed (all checksums agreed). Sent
    /// alone only when no entry of the same input carried the commit point.
    Commit { epoch: u64, upto: u64 },
    /// Client → one replica: read `key` at this message's timestamp.
    Read { rid: u64, key: Key },
    /// Client → replicas: it suspects a loss or a failure in `epoch`.
    Recover { epoch: u64 },
    /// Replica → client: it appended entry `seq` at `pos`; the checksum after it; its output.
    Ack {
        epoch: u64,
        members: u64,
        seq: u64,
        pos: u64,
        checksum: u64,
        output: Option<Val>,
    },
    /// Replica → client: entry `seq` leaves a gap; it expects `expected`.
    Reject { epoch: u64, seq: u64, expected: u64 },
    /// Replica → client: the read's value (`ok` false: ask again).
    ReadReply {
        rid: u64,
        ok: bool,
        value: Option<Val>,
    },
    /// Replica → client: the current view and the client's next sequence number.
    View {
        epoch: u64,
        members: u64,
        next_seq: u64,
    },
    /// Recovery, Phase 1a: coordinator `ballot` asks to decide epoch `epoch`.
    Prepare { epoch: u64, ballot: u64 },
    /// Recovery, Phase 1b: the replica's commit point, its entries from there, and the value it
    /// accepted for `epoch`, if any.
    Promise {
        epoch: u64,
        ballot: u64,
        accepted: Option<(u64, Value)>,
        commit: u64,
        tail: Vec<WireEntry>,
    },
    /// Recovery, Phase 2a.
    Accept { ballot: u64, value: Value },
    /// Recovery, Phase 2b.
    Accepted { epoch: u64, ballot: u64 },
    /// The value is chosen: install it.
    Decide { value: Value },
    /// Client → replicas whose Ack of entry `seq` it misses: answer again (an [`Msg::Ack`] as
    /// for a duplicate), or [`Msg::Reject`] if the entry is not in the log.
    AckAgain { epoch: u64, seq: u64 },
}

impl Msg {
    /// Whether the message takes a place in 1Pipe's total order (`AppSend::ordered`). Only what
    /// the receiver must take at its timestamp is ordered; the rest is a reply or a notice whose
    /// receiver checks it against its own state, so it may come in any order, and sooner
    /// (§2.2.2: "the response message does not need to be ordered by 1Pipe"). The table and the
    /// argument are in the module docs of `repl::onertt`.
    pub(crate) fn ordered(&self) -> bool {
        match self {
            // The log's order is the timestamp order; a read is evaluated at its timestamp; a
            // replica that lacks the entry an AckAgain names rejects it only because 1Pipe
            // delivers the entry, stamped earlier, first.
            Msg::Entry { .. } | Msg::Read { .. } | Msg::AckAgain { .. } => true,
            // A Prepare in the order freezes every replica at one point of the log (entries
            // stamped before it appended, later ones refused); the rest of a recovery round
            // stays with it. Paxos would be safe in any order; recovery is off the normal path.
            Msg::Prepare { .. }
            | Msg::Promise { .. }
            | Msg::Accept { .. }
            | Msg::Accepted { .. }
            | Msg::Decide { .. } => true,
            // Replies and notices: each names its epoch (or its read), and its receiver takes
            // it only if that still holds.
            Msg::Ack { .. }
            | Msg::Reject { .. }
            | Msg::ReadReply { .. }
            | Msg::View { .. }
            | Msg::Commit { .. }
            | Msg::Recover { .. } => false,
        }
    }
}

const ENTRY: u8 = 1;
const COMMIT: u8 = 2;
const READ: u8 = 3;
const RECOVER: u8 = 4;
const ACK: u8 = 5;
const REJECT: u8 = 6;
const READ_REPLY: u8 = 7;
const VIEW: u8 = 8;
const PREPARE: u8 = 9;
const PROMISE: u8 = 10;
const ACCEPT: u8 = 11;
const ACCEPTED: u8 = 12;
const DECIDE: u8 = 13;
const ACK_AGAIN: u8 = 14;

/// Bytes of an encoded [`WireEntry`] at least (a get).
const ENTRY_MIN: usize = 8 + 4 + 8 + 8 + 1 + 8 + 4;

impl Writer {
    /// An optional `u64`: a flag byte, then the value if any.
    pub(crate) fn opt(&mut self, x: Option<u64>) -> &mut Self {
        match x {
            Some(v) => self.u8(1).u64(v),
            None => self.u8(0),
        }
    }
    /// A command of the replicated key-value service.
    pub(crate) fn cmd(&mut self, c: &Cmd) -> &mut Self {
        match *c {
            Cmd::Get(k) => self.u8(0).u64(k),
            Cmd::Put(k, v) => self.u8(1).u64(k).u64(v),
            Cmd::Cas { key, expect, new } => self.u8(2).u64(key).opt(expect).u64(new),
        }
    }
    fn entry(&mut self, e: &WireEntry) -> &mut Self {
        self.u64(e.ts)
            .u32(e.client)
            .u64(e.seq)
            .u64(e.id)
            .cmd(&e.cmd)
            .u32(e.pad)
    }
    fn entries(&mut self, es: &[WireEntry]) -> &mut Self {
        self.u32(es.len() as u32);
        for e in es {
            self.entry(e);
        }
        self
    }
    fn value(&mut self, v: &Value) -> &mut Self {
        self.u64(v.epoch)
            .u64(v.members)
            .u64(v.keep)
            .entries(&v.entries)
    }
}

impl Reader<'_> {
    /// An optional `u64` ([`Writer::opt`]).
    pub(crate) fn repl_opt(&mut self) -> Option<Option<u64>> {
        if self.bool()? {
            Some(Some(self.u64()?))
        } else {
            Some(None)
        }
    }
    /// A command ([`Writer::cmd`]).
    pub(crate) fn repl_cmd(&mut self) -> Option<Cmd> {
        Some(match self.u8()? {
            0 => Cmd::Get(self.u64()?),
            1 => Cmd::Put(self.u64()?, self.u64()?),
            2 => Cmd::Cas {
                key: self.u64()?,
                expect: self.repl_opt()?,
                new: self.u64()?,
            },
            _ => return None,
        })
    }
    fn repl_entry(&mut self) -> Option<WireEntry> {
        Some(WireEntry {
            ts: self.u64()?,
            client: self.u32()?,
            seq: self.u64()?,
            id: self.u64()?,
            cmd: self.repl_cmd()?,
            pad: self.u32()?,
        })
    }
    fn repl_entries(&mut self) -> Option<Vec<WireEntry>> {
        let n = self.u32()? as usize;
        if n > self.remaining() / ENTRY_MIN {
            return None;
        }
        (0..n).map(|_| self.repl_entry()).collect()
    }
    fn repl_value(&mut self) -> Option<Value> {
        Some(Value {
            epoch: self.u64()?,
            members: self.u64()?,
            keep: self.u64()?,
            entries: self.repl_entries()?,
        })
    }
}

/// `m` on the wire; an entry carries `pad` zero bytes after its fields.
pub(crate) fn encode(m: &Msg) -> Bytes {
    let mut w = Writer::with_capacity(64);
    match m {
        Msg::Entry { .. }
        | Msg::Commit { .. }
        | Msg::Read { .. }
        | Msg::Recover { .. }
        | Msg::AckAgain { .. } => encode_from_client(&mut w, m),
        Msg::Ack { .. } | Msg::Reject { .. } | Msg::ReadReply { .. } | Msg::View { .. } => {
            encode_to_client(&mut w, m)
        }
        Msg::Prepare { .. }
        | Msg::Promise { .. }
        | Msg::Accept { .. }
        | Msg::Accepted { .. }
        | Msg::Decide { .. } => encode_recovery(&mut w, m),
    }
    Bytes::from(w.0)
}

/// Writes a message a client sends to replicas.
fn encode_from_client(w: &mut Writer, m: &Msg) {
    match m {
        Msg::Entry {
            epoch,
            seq,
            id,
            cmd,
            pad,
            commit,
        } => {
            w.u8(ENTRY)
                .u64(*epoch)
                .u64(*seq)
                .u64(*id)
                .cmd(cmd)
                .u64(*commit)
                .u32(*pad);
            w.zeros(*pad as usize);
        }
        Msg::Commit { epoch, upto } => {
            w.u8(COMMIT).u64(*epoch).u64(*upto);
        }
        Msg::Read { rid, key } => {
            w.u8(READ).u64(*rid).u64(*key);
        }
        Msg::Recover { epoch } => {
            w.u8(RECOVER).u64(*epoch);
        }
        Msg::AckAgain { epoch, seq } => {
            w.u8(ACK_AGAIN).u64(*epoch).u64(*seq);
        }
        _ => unreachable!("not a client's message: {m:?}"),
    }
}

/// Writes a replica's answer to a client.
fn encode_to_client(w: &mut Writer, m: &Msg) {
    match m {
        Msg::Ack {
            epoch,
            members,
            seq,
            pos,
            checksum,
            output,
        } => {
            w.u8(ACK)
                .u64(*epoch)
                .u64(*members)
                .u64(*seq)
                .u64(*pos)
                .u64(*checksum)
                .opt(*output);
        }
        Msg::Reject {
            epoch,
            seq,
            expected,
        } => {
            w.u8(REJECT).u64(*epoch).u64(*seq).u64(*expected);
        }
        Msg::ReadReply { rid, ok, value } => {
            w.u8(READ_REPLY).u64(*rid).u8(u8::from(*ok)).opt(*value);
        }
        Msg::View {
            epoch,
            members,
            next_seq,
        } => {
            w.u8(VIEW).u64(*epoch).u64(*members).u64(*next_seq);
        }
        _ => unreachable!("not a replica's answer to a client: {m:?}"),
    }
}

/// Writes a message of a recovery round.
fn encode_recovery(w: &mut Writer, m: &Msg) {
    match m {
        Msg::Prepare { epoch, ballot } => {
            w.u8(PREPARE).u64(*epoch).u64(*ballot);
        }
        Msg::Promise {
            epoch,
            ballot,
            accepted,
            commit,
            tail,
        } => {
            w.u8(PROMISE).u64(*epoch).u64(*ballot);
            match accepted {
                Some((b, v)) => w.u8(1).u64(*b).value(v),
                None => w.u8(0),
            };
            w.u64(*commit).entries(tail);
        }
        Msg::Accept { ballot, value } => {
            w.u8(ACCEPT).u64(*ballot).value(value);
        }
        Msg::Accepted { epoch, ballot } => {
            w.u8(ACCEPTED).u64(*epoch).u64(*ballot);
        }
        Msg::Decide { value } => {
            w.u8(DECIDE).value(value);
        }
        _ => unreachable!("not a recovery message: {m:?}"),
    }
}

/// The message in `buf`, or `None` if it is malformed.
pub(crate) fn decode(buf: &[u8]) -> Option<Msg> {
    let mut r = Reader::new(buf);
    let m = match r.u8()? {
        ENTRY => return decode_entry(r),
        kind @ (COMMIT | READ | RECOVER | ACK_AGAIN) => decode_from_client(kind, &mut r)?,
        kind @ (ACK | REJECT | READ_REPLY | VIEW) => decode_to_client(kind, &mut r)?,
        kind @ (PREPARE | PROMISE | ACCEPT | ACCEPTED | DECIDE) => decode_recovery(kind, &mut r)?,
        _ => return None,
    };
    r.finish()?;
    Some(m)
}

/// An entry after its kind byte, with its padding to the end of the buffer.
fn decode_entry(mut r: Reader<'_>) -> Option<Msg> {
    // Fields in wire order (a struct expression evaluates its fields as written).
    let m = Msg::Entry {
        epoch: r.u64()?,
        seq: r.u64()?,
        id: r.u64()?,
        cmd: r.repl_cmd()?,
        commit: r.u64()?,
        pad: r.u32()?,
    };
    let Msg::Entry { pad, .. } = m else {
        return None;
    };
    r.finish_with(u64::from(pad))?;
    Some(m)
}

/// A client's message other than an entry, of `kind`, after its kind byte.
fn decode_from_client(kind: u8, r: &mut Reader<'_>) -> Option<Msg> {
    Some(match kind {
        COMMIT => Msg::Commit {
            epoch: r.u64()?,
            upto: r.u64()?,
        },
        READ => Msg::Read {
            rid: r.u64()?,
            key: r.u64()?,
        },
        RECOVER => Msg::Recover { epoch: r.u64()? },
        ACK_AGAIN => Msg::AckAgain {
            epoch: r.u64()?,
            seq: r.u64()?,
        },
        _ => unreachable!("not a client's message kind: {kind}"),
    })
}

/// A replica's answer to a client, of `kind`, after its kind byte.
fn decode_to_client(kind: u8, r: &mut Reader<'_>) -> Option<Msg> {
    Some(match kind {
        ACK => Msg::Ack {
            epoch: r.u64()?,
            members: r.u64()?,
            seq: r.u64()?,
            pos: r.u64()?,
            checksum: r.u64()?,
            output: r.repl_opt()?,
        },
        REJECT => Msg::Reject {
            epoch: r.u64()?,
            seq: r.u64()?,
            expected: r.u64()?,
        },
        READ_REPLY => Msg::ReadReply {
            rid: r.u64()?,
            ok: r.bool()?,
            value: r.repl_opt()?,
        },
        VIEW => Msg::View {
            epoch: r.u64()?,
            members: r.u64()?,
            next_seq: r.u64()?,
        },
        _ => unreachable!("not a replica's answer kind: {kind}"),
    })
}

/// A message of a recovery round, of `kind`, after its kind byte.
fn decode_recovery(kind: u8, r: &mut Reader<'_>) -> Option<Msg> {
    Some(match kind {
        PREPARE => Msg::Prepare {
            epoch: r.u64()?,
            ballot: r.u64()?,
        },
        PROMISE => Msg::Promise {
            epoch: r.u64()?,
            ballot: r.u64()?,
            accepted: if r.bool()? {
                Some((r.u64()?, r.repl_value()?))
            } else {
                None
            },
            commit: r.u64()?,
            tail: r.repl_entries()?,
        },
        ACCEPT => Msg::Accept {
            ballot: r.u64()?,
            value: r.repl_value()?,
        },
        ACCEPTED => Msg::Accepted {
            epoch: r.u64()?,
            ballot: r.u64()?,
        },
        DECIDE => Msg::Decide {
            value: r.repl_value()?,
        },
        _ => unreachable!("not a recovery message kind: {kind}"),
    })
}
