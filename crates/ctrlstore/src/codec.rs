//! The log-entry encoding: a compact, hand-written, versioned binary form of the controller's
//! inputs ([`Entry`]).
//!
//! `onepipe-proto` has no serde and must not get one (the protocol core builds in seconds), so
//! this module mirrors [`CtrlMsg`] by hand. All integers are little-endian; a list is a `u32`
//! count followed by its items; an `Option<Timestamp>` is a flag byte then, if 1, the `u64`.
//!
//! ```text
//! entry    = version:u8 (=1) kind:u8 at:u64 [msg|relay|host:u32]
//!                   kind 0 = Timeout, 1 = Message, 2 = Relay, 3 = Unreachable (host:u32)
//! msg      = tag:u8 fields                            tags 1..=6, in CtrlMsg order
//! LinkDown = reporter:u32 link:u32 flag:u8 [commit:u64]
//! Failure  = round:u32 n:u32 (proc:u32 ts:u64)*n m:u32 (host:u32)*m
//! Recall   = round:u32 from:u32 n:u32 (proc:u32 ts:u64)*n m:u32 (src:u32 dst:u32 psn:u32 frags:u32)*m
//! RecallAck= round:u32 from:u32
//! Completed= round:u32 host:u32
//! Resume   = round:u32 n:u32 (link:u32)*n
//! relay    = tag:u8 fields                            the relays a controller takes (§5.2)
//! Recalled = 1 n:u32 (proc:u32 ts:u64)*n
//! RecoverRequest = 2 host:u32
//! Rejoin   = 3 host:u32
//! Admitted = 4 link:u32 alive:u8 flag:u8 [barrier:u64] flag:u8 [commit:u64]
//! ```
//!
//! Forwarded data (`RelayMsg::Forward`) is not logged (`HaController::on_relay`), and the
//! relays only a controller sends have no encoding: [`Entry::encode`] refuses them.
//!
//! Decoding distrusts its input (the store is shared and may hold anything): every length is
//! checked against the bytes left before anything is allocated, timestamps must fit in 48 bits,
//! and trailing bytes are an error. Nothing panics on malformed input.

use onepipe_proto::failure::{CtrlMsg, RelayMsg};
use onepipe_proto::{Instant, LinkId, NodeId, ProcId, Psn, Timestamp};
use std::fmt;

/// The encoding version written in the first byte of every entry.
pub const ENTRY_VERSION: u8 = 1;

/// The largest encoded entry. etcd refuses requests above 1.5 MiB by default; 1 MiB leaves room
/// for the transaction around it. A `Failure` naming 80,000 processes still fits.
pub const ENTRY_BYTES_MAX: usize = 1 << 20;

const KIND_TIMEOUT: u8 = 0;
const KIND_MESSAGE: u8 = 1;
const KIND_RELAY: u8 = 2;
const KIND_UNREACHABLE: u8 = 3;

/// One input to the §5.2 controller, as logged: what [`onepipe_proto::failure::Controller`]
/// was given, and when (controller log time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `Controller::on_message(at, msg)`.
    Message {
        /// Controller log time.
        at: Instant,
        /// The message.
        msg: CtrlMsg,
    },
    /// `Controller::on_timeout(at)`.
    Timeout {
        /// Controller log time.
        at: Instant,
    },
    /// A §5.2 receiver-recovery relay to the controller: `Recalled`, `RecoverRequest`,
    /// `Rejoin` or `Admitted`.
    Relay {
        /// Controller log time.
        at: Instant,
        /// The relay.
        msg: RelayMsg,
    },
    /// [`onepipe_proto::Notice::Unreachable`]: the management network could not deliver a
    /// message to `host` (§5.2: it is announced failed).
    Unreachable {
        /// Controller log time.
        at: Instant,
        /// The host.
        host: NodeId,
    },
}

/// Why bytes are not an [`Entry`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended inside a field (or a count promised more than is left).
    Truncated,
    /// The first byte is not [`ENTRY_VERSION`].
    Version(u8),
    /// An unknown entry kind or message tag.
    Tag(u8),
    /// A timestamp wider than 48 bits: not one [`Timestamp::new`] can produce.
    Timestamp(u64),
    /// An option flag other than 0 or 1.
    Flag(u8),
    /// Bytes left over after the entry.
    Trailing(usize),
}

/// Why an [`Entry`] cannot be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The encoding would exceed [`ENTRY_BYTES_MAX`].
    TooLarge(usize),
    /// A relay the controller does not take as an input (it only sends it, or it is a
    /// forward, which is not logged).
    NotAnInput,
}

impl Entry {
    /// The controller log time of the input.
    pub fn at(&self) -> Instant {
        match self {
            Entry::Message { at, .. }
            | Entry::Timeout { at }
            | Entry::Relay { at, .. }
            | Entry::Unreachable { at, .. } => *at,
        }
    }

    /// The entry's bytes.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::with_capacity(32);
        out.push(ENTRY_VERSION);
        match self {
            Entry::Timeout { at } => {
                out.push(KIND_TIMEOUT);
                put_u64(&mut out, at.0);
            }
            Entry::Message { at, msg } => {
                out.push(KIND_MESSAGE);
                put_u64(&mut out, at.0);
                encode_msg(&mut out, msg);
            }
            Entry::Relay { at, msg } => {
                out.push(KIND_RELAY);
                put_u64(&mut out, at.0);
                encode_relay(&mut out, msg)?;
            }
            Entry::Unreachable { at, host } => {
                out.push(KIND_UNREACHABLE);
                put_u64(&mut out, at.0);
                put_u32(&mut out, host.0);
            }
        }
        if out.len() > ENTRY_BYTES_MAX {
            return Err(EncodeError::TooLarge(out.len()));
        }
        Ok(out)
    }

    /// Parses an entry; see the module docs for the format.
    pub fn decode(bytes: &[u8]) -> Result<Entry, DecodeError> {
        let mut r = Reader { buf: bytes };
        let version = r.u8()?;
        if version != ENTRY_VERSION {
            return Err(DecodeError::Version(version));
        }
        let kind = r.u8()?;
        let at = Instant(r.u64()?);
        let entry = match kind {
            KIND_TIMEOUT => Entry::Timeout { at },
            KIND_MESSAGE => Entry::Message {
                at,
                msg: decode_msg(&mut r)?,
            },
            KIND_RELAY => Entry::Relay {
                at,
                msg: decode_relay(&mut r)?,
            },
            KIND_UNREACHABLE => Entry::Unreachable {
                at,
                host: NodeId(r.u32()?),
            },
            other => return Err(DecodeError::Tag(other)),
        };
        if !r.buf.is_empty() {
            return Err(DecodeError::Trailing(r.buf.len()));
        }
        Ok(entry)
    }
}

fn encode_msg(out: &mut Vec<u8>, msg: &CtrlMsg) {
    match msg {
        CtrlMsg::LinkDown {
            reporter,
            link,
            last_commit,
        } => {
            out.push(1);
            put_u32(out, reporter.0);
            put_u32(out, link.0);
            put_opt_ts(out, *last_commit);
        }
        CtrlMsg::Failure {
            round,
            failed,
            correct,
        } => encode_failure(out, *round, failed, correct),
        CtrlMsg::Recall {
            round,
            from,
            groups,
            unacked,
        } => encode_recall(out, *round, *from, groups, unacked),
        CtrlMsg::RecallAck { round, from } => {
            out.push(4);
            put_u32(out, *round);
            put_u32(out, from.0);
        }
        CtrlMsg::Completed { round, host } => {
            out.push(5);
            put_u32(out, *round);
            put_u32(out, host.0);
        }
        CtrlMsg::Isolate { link } => {
            out.push(7);
            put_u32(out, link.0);
        }
        CtrlMsg::Departed { host, last } => {
            out.push(8);
            put_u32(out, host.0);
            put_opt_ts(out, *last);
        }
        CtrlMsg::Depart { link } => {
            out.push(9);
            put_u32(out, link.0);
        }
        CtrlMsg::CallbackTaken { round, host } => {
            out.push(10);
            put_u32(out, *round);
            put_u32(out, host.0);
        }
        CtrlMsg::Resume { round, dead_links } => {
            out.push(6);
            put_u32(out, *round);
            put_len(out, dead_links.len());
            for l in dead_links {
                put_u32(out, l.0);
            }
        }
    }
}

/// Writes a `Failure` (tag 2): its round, the failed processes with their last timestamps, and
/// the correct hosts.
fn encode_failure(
    out: &mut Vec<u8>,
    round: u32,
    failed: &[(ProcId, Timestamp)],
    correct: &[NodeId],
) {
    out.push(2);
    put_u32(out, round);
    put_len(out, failed.len());
    for &(p, ts) in failed {
        put_u32(out, p.0);
        put_u64(out, ts.raw());
    }
    put_len(out, correct.len());
    for h in correct {
        put_u32(out, h.0);
    }
}

/// Writes a `Recall` (tag 3): its round, the recalling host, the aborted scatterings and their
/// unacknowledged messages.
fn encode_recall(
    out: &mut Vec<u8>,
    round: u32,
    from: NodeId,
    groups: &[(ProcId, Timestamp)],
    unacked: &[(ProcId, ProcId, Psn, u32)],
) {
    out.push(3);
    put_u32(out, round);
    put_u32(out, from.0);
    put_len(out, groups.len());
    for &(p, ts) in groups {
        put_u32(out, p.0);
        put_u64(out, ts.raw());
    }
    put_len(out, unacked.len());
    for &(src, dst, psn, frags) in unacked {
        for v in [src.0, dst.0, psn.0, frags] {
            put_u32(out, v);
        }
    }
}

fn decode_msg(r: &mut Reader<'_>) -> Result<CtrlMsg, DecodeError> {
    let tag = r.u8()?;
    let msg = match tag {
        1 => CtrlMsg::LinkDown {
            reporter: NodeId(r.u32()?),
            link: LinkId(r.u32()?),
            last_commit: opt_ts(r)?,
        },
        2 => {
            let round = r.u32()?;
            let n = r.count(12)?;
            let failed = (0..n)
                .map(|_| Ok((ProcId(r.u32()?), r.ts()?)))
                .collect::<Result<_, _>>()?;
            let m = r.count(4)?;
            let correct = (0..m)
                .map(|_| Ok(NodeId(r.u32()?)))
                .collect::<Result<_, _>>()?;
            CtrlMsg::Failure {
                round,
                failed,
                correct,
            }
        }
        3 => {
            let round = r.u32()?;
            let from = NodeId(r.u32()?);
            let n = r.count(12)?;
            let groups = (0..n)
                .map(|_| Ok((ProcId(r.u32()?), r.ts()?)))
                .collect::<Result<_, _>>()?;
            let m = r.count(16)?;
            let unacked = (0..m)
                .map(|_| Ok((ProcId(r.u32()?), ProcId(r.u32()?), Psn(r.u32()?), r.u32()?)))
                .collect::<Result<_, _>>()?;
            CtrlMsg::Recall {
                round,
                from,
                groups,
                unacked,
            }
        }
        4 => CtrlMsg::RecallAck {
            round: r.u32()?,
            from: NodeId(r.u32()?),
        },
        7 => CtrlMsg::Isolate {
            link: LinkId(r.u32()?),
        },
        8 => CtrlMsg::Departed {
            host: NodeId(r.u32()?),
            last: opt_ts(r)?,
        },
        9 => CtrlMsg::Depart {
            link: LinkId(r.u32()?),
        },
        10 => CtrlMsg::CallbackTaken {
            round: r.u32()?,
            host: NodeId(r.u32()?),
        },
        5 => CtrlMsg::Completed {
            round: r.u32()?,
            host: NodeId(r.u32()?),
        },
        6 => {
            let round = r.u32()?;
            let n = r.count(4)?;
            let dead_links = (0..n)
                .map(|_| Ok(LinkId(r.u32()?)))
                .collect::<Result<_, _>>()?;
            CtrlMsg::Resume { round, dead_links }
        }
        other => return Err(DecodeError::Tag(other)),
    };
    Ok(msg)
}

fn put_opt_ts(out: &mut Vec<u8>, ts: Option<Timestamp>) {
    match ts {
        None => out.push(0),
        Some(ts) => {
            out.push(1);
            put_u64(out, ts.raw());
        }
    }
}

fn encode_relay(out: &mut Vec<u8>, msg: &RelayMsg) -> Result<(), EncodeError> {
    match msg {
        RelayMsg::Recalled { groups } => {
            out.push(1);
            put_len(out, groups.len());
            for &(p, ts) in groups {
                put_u32(out, p.0);
                put_u64(out, ts.raw());
            }
        }
        RelayMsg::RecoverRequest { host } => {
            out.push(2);
            put_u32(out, host.0);
        }
        RelayMsg::Rejoin { host } => {
            out.push(3);
            put_u32(out, host.0);
        }
        RelayMsg::Admitted {
            link,
            alive,
            barrier,
            commit,
        } => {
            out.push(4);
            put_u32(out, link.0);
            out.push(u8::from(*alive));
            put_opt_ts(out, *barrier);
            put_opt_ts(out, *commit);
        }
        _ => return Err(EncodeError::NotAnInput),
    }
    Ok(())
}

fn decode_relay(r: &mut Reader<'_>) -> Result<RelayMsg, DecodeError> {
    Ok(match r.u8()? {
        1 => {
            let n = r.count(12)?;
            let groups = (0..n)
                .map(|_| Ok((ProcId(r.u32()?), r.ts()?)))
                .collect::<Result<_, _>>()?;
            RelayMsg::Recalled { groups }
        }
        2 => RelayMsg::RecoverRequest {
            host: NodeId(r.u32()?),
        },
        3 => RelayMsg::Rejoin {
            host: NodeId(r.u32()?),
        },
        4 => RelayMsg::Admitted {
            link: LinkId(r.u32()?),
            alive: match r.u8()? {
                0 => false,
                1 => true,
                f => return Err(DecodeError::Flag(f)),
            },
            barrier: opt_ts(r)?,
            commit: opt_ts(r)?,
        },
        other => return Err(DecodeError::Tag(other)),
    })
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    // A list longer than u32::MAX items cannot fit in ENTRY_BYTES_MAX anyway; saturating keeps
    // the encoder total and the size check in `encode` rejects the entry.
    put_u32(out, u32::try_from(n).unwrap_or(u32::MAX));
}

struct Reader<'a> {
    buf: &'a [u8],
}

/// What [`put_opt_ts`] wrote: a flag byte (0 none, 1 some), then the timestamp.
fn opt_ts(r: &mut Reader<'_>) -> Result<Option<Timestamp>, DecodeError> {
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(r.ts()?)),
        f => Err(DecodeError::Flag(f)),
    }
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let (head, rest) = self
            .buf
            .split_first_chunk::<N>()
            .ok_or(DecodeError::Truncated)?;
        self.buf = rest;
        Ok(*head)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn ts(&mut self) -> Result<Timestamp, DecodeError> {
        let raw = self.u64()?;
        let ts = Timestamp::new(raw);
        if ts.raw() != raw {
            return Err(DecodeError::Timestamp(raw));
        }
        Ok(ts)
    }

    /// A list count whose items take at least `item_bytes` each: checked against what is left
    /// before anything is allocated.
    fn count(&mut self, item_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(item_bytes) > self.buf.len() {
            return Err(DecodeError::Truncated);
        }
        Ok(n)
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "truncated entry"),
            DecodeError::Version(v) => write!(f, "unknown entry version {v}"),
            DecodeError::Tag(t) => write!(f, "unknown entry kind or message tag {t}"),
            DecodeError::Timestamp(t) => write!(f, "timestamp {t:#x} wider than 48 bits"),
            DecodeError::Flag(b) => write!(f, "option flag {b} is neither 0 nor 1"),
            DecodeError::Trailing(n) => write!(f, "{n} bytes after the entry"),
        }
    }
}

impl std::error::Error for DecodeError {}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::TooLarge(n) => {
                write!(f, "entry of {n} bytes exceeds {ENTRY_BYTES_MAX}")
            }
            EncodeError::NotAnInput => write!(f, "a relay the controller does not take as input"),
        }
    }
}

impl std::error::Error for EncodeError {}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts() -> impl Strategy<Value = Timestamp> {
        any::<u64>().prop_map(Timestamp::new)
    }

    pub(crate) fn ctrl_msg() -> impl Strategy<Value = CtrlMsg> {
        let ids = || prop::collection::vec(any::<u32>(), 0..6);
        let pairs = || prop::collection::vec((any::<u32>().prop_map(ProcId), ts()), 0..6);
        prop_oneof![
            (any::<u32>(), any::<u32>(), prop::option::of(ts())).prop_map(|(r, l, c)| {
                CtrlMsg::LinkDown {
                    reporter: NodeId(r),
                    link: LinkId(l),
                    last_commit: c,
                }
            }),
            (any::<u32>(), pairs(), ids()).prop_map(|(round, failed, c)| CtrlMsg::Failure {
                round,
                failed,
                correct: c.into_iter().map(NodeId).collect(),
            }),
            (
                any::<u32>(),
                any::<u32>(),
                pairs(),
                prop::collection::vec(any::<(u32, u32, u32, u32)>(), 0..6)
            )
                .prop_map(|(round, from, groups, u)| CtrlMsg::Recall {
                    round,
                    from: NodeId(from),
                    groups,
                    unacked: u
                        .into_iter()
                        .map(|(s, d, p, f)| (ProcId(s), ProcId(d), Psn(p), f))
                        .collect(),
                }),
            (any::<u32>(), any::<u32>()).prop_map(|(round, from)| CtrlMsg::RecallAck {
                round,
                from: NodeId(from)
            }),
            (any::<u32>(), any::<u32>()).prop_map(|(round, host)| CtrlMsg::Completed {
                round,
                host: NodeId(host)
            }),
            (any::<u32>(), ids()).prop_map(|(round, l)| CtrlMsg::Resume {
                round,
                dead_links: l.into_iter().map(LinkId).collect(),
            }),
            any::<u32>().prop_map(|l| CtrlMsg::Isolate { link: LinkId(l) }),
            (any::<u32>(), prop::option::of(ts())).prop_map(|(h, last)| CtrlMsg::Departed {
                host: NodeId(h),
                last
            }),
            any::<u32>().prop_map(|l| CtrlMsg::Depart { link: LinkId(l) }),
            (any::<u32>(), any::<u32>()).prop_map(|(round, host)| CtrlMsg::CallbackTaken {
                round,
                host: NodeId(host)
            }),
        ]
    }

    fn relay_msg() -> impl Strategy<Value = RelayMsg> {
        let pairs = prop::collection::vec((any::<u32>().prop_map(ProcId), ts()), 0..6);
        prop_oneof![
            pairs.prop_map(|groups| RelayMsg::Recalled { groups }),
            any::<u32>().prop_map(|h| RelayMsg::RecoverRequest { host: NodeId(h) }),
            any::<u32>().prop_map(|h| RelayMsg::Rejoin { host: NodeId(h) }),
            (
                any::<u32>(),
                any::<bool>(),
                prop::option::of(ts()),
                prop::option::of(ts())
            )
                .prop_map(|(l, alive, barrier, commit)| RelayMsg::Admitted {
                    link: LinkId(l),
                    alive,
                    barrier,
                    commit,
                }),
        ]
    }

    fn entry() -> impl Strategy<Value = Entry> {
        prop_oneof![
            any::<u64>().prop_map(|t| Entry::Timeout { at: Instant(t) }),
            (any::<u64>(), any::<u32>()).prop_map(|(t, h)| Entry::Unreachable {
                at: Instant(t),
                host: NodeId(h),
            }),
            (any::<u64>(), ctrl_msg()).prop_map(|(t, msg)| Entry::Message {
                at: Instant(t),
                msg
            }),
            (any::<u64>(), relay_msg()).prop_map(|(t, msg)| Entry::Relay {
                at: Instant(t),
                msg
            }),
        ]
    }

    #[test]
    fn relays_the_controller_only_sends_are_not_entries() {
        let e = Entry::Relay {
            at: Instant(1),
            msg: RelayMsg::Failed {
                ts: Timestamp::new(3),
            },
        };
        assert_eq!(e.encode(), Err(EncodeError::NotAnInput));
    }

    proptest! {
        #[test]
        fn every_entry_round_trips(e in entry()) {
            let bytes = e.encode().unwrap();
            prop_assert_eq!(Entry::decode(&bytes), Ok(e));
        }

        #[test]
        fn every_proper_prefix_is_rejected_not_a_panic(e in entry()) {
            let bytes = e.encode().unwrap();
            for n in 0..bytes.len() {
                prop_assert!(Entry::decode(&bytes[..n]).is_err());
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(e) = Entry::decode(&bytes) {
                // What decodes re-encodes to the same bytes: the encoding is canonical.
                prop_assert_eq!(e.encode().unwrap(), bytes);
            }
        }
    }

    #[test]
    fn malformed_entries_are_typed_errors() {
        let e = Entry::Message {
            at: Instant(7),
            msg: CtrlMsg::LinkDown {
                reporter: NodeId(1),
                link: LinkId(2),
                last_commit: Some(Timestamp::new(3)),
            },
        };
        let good = e.encode().unwrap();
        let mut bad = good.clone();
        bad[0] = 9;
        assert_eq!(Entry::decode(&bad), Err(DecodeError::Version(9)));
        let mut bad = good.clone();
        bad[1] = 5;
        assert_eq!(Entry::decode(&bad), Err(DecodeError::Tag(5)));
        let mut bad = good.clone();
        bad.push(0);
        assert_eq!(Entry::decode(&bad), Err(DecodeError::Trailing(1)));
        let mut bad = good.clone();
        let n = bad.len();
        bad[n - 1] = 0xff; // the top byte of the 48-bit timestamp
        assert_eq!(
            Entry::decode(&bad),
            Err(DecodeError::Timestamp(0xff00_0000_0000_0003))
        );
        // A count far beyond the bytes left allocates nothing.
        let mut huge = vec![ENTRY_VERSION, KIND_MESSAGE];
        huge.extend_from_slice(&0u64.to_le_bytes());
        huge.push(6);
        huge.extend_from_slice(&1u32.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Entry::decode(&huge), Err(DecodeError::Truncated));
    }

    #[test]
    fn an_entry_above_the_limit_is_refused() {
        let e = Entry::Message {
            at: Instant(0),
            msg: CtrlMsg::Resume {
                round: 1,
                dead_links: vec![LinkId(0); ENTRY_BYTES_MAX / 4 + 1],
            },
        };
        assert!(matches!(e.encode(), Err(EncodeError::TooLarge(_))));
    }
}
