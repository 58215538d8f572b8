//! The log-entry encoding: a compact, hand-written, versioned binary form of the controller's
//! inputs ([`Entry`]).
//!
//! An entry frames one input with its kind and controller log time; a message or relay in it
//! is the §5.2 message codec of `onepipe_proto::failure::codec` (whose module docs give the
//! grammar of `msg` and `relay`), the same bytes the live control connection carries. All
//! integers are little-endian.
//!
//! ```text
//! entry    = version:u8 (=1) kind:u8 at:u64 [msg|relay|host:u32]
//!                   kind 0 = Timeout, 1 = Message, 2 = Relay, 3 = Unreachable (host:u32)
//! msg      = failure::codec's ctrl                    tags 1..=10
//! relay    = failure::codec's relay, tags 1..=4 only: the relays a controller takes (§5.2),
//!            Recalled, RecoverRequest, Rejoin, Admitted
//! ```
//!
//! Forwarded data (`RelayMsg::Forward`) is not logged (`HaController::on_relay`), and the
//! relays only a controller sends are not inputs: [`Entry::encode`] refuses them, and
//! [`Entry::decode`] refuses their tags.
//!
//! Decoding distrusts its input (the store is shared and may hold anything): every length is
//! checked against the bytes left before anything is allocated, timestamps must fit in 48 bits,
//! and trailing bytes are an error. Nothing panics on malformed input.

use onepipe_proto::byteio::{ByteReader, ByteWriter};
use onepipe_proto::failure::codec::{self as msg_codec, relay_tag};
use onepipe_proto::failure::{CtrlMsg, RelayMsg};
use onepipe_proto::{Instant, NodeId};
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
    /// A timestamp wider than 48 bits: not one [`onepipe_proto::Timestamp::new`] can produce.
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
        let mut w = ByteWriter::new(&mut out);
        w.u8(ENTRY_VERSION);
        match self {
            Entry::Timeout { at } => {
                w.u8(KIND_TIMEOUT).u64_le(at.0);
            }
            Entry::Message { at, msg } => {
                w.u8(KIND_MESSAGE).u64_le(at.0);
                msg_codec::write_ctrl(&mut w, msg);
            }
            Entry::Relay { at, msg } => {
                if !is_input(msg) {
                    return Err(EncodeError::NotAnInput);
                }
                w.u8(KIND_RELAY).u64_le(at.0);
                msg_codec::write_relay(&mut w, msg);
            }
            Entry::Unreachable { at, host } => {
                w.u8(KIND_UNREACHABLE).u64_le(at.0).u32_le(host.0);
            }
        }
        if out.len() > ENTRY_BYTES_MAX {
            return Err(EncodeError::TooLarge(out.len()));
        }
        Ok(out)
    }

    /// Parses an entry; see the module docs for the format.
    pub fn decode(bytes: &[u8]) -> Result<Entry, DecodeError> {
        let mut r = ByteReader::new(bytes);
        let version = r.u8()?;
        if version != ENTRY_VERSION {
            return Err(DecodeError::Version(version));
        }
        let kind = r.u8()?;
        let at = Instant(r.u64_le()?);
        let entry = match kind {
            KIND_TIMEOUT => Entry::Timeout { at },
            KIND_MESSAGE => Entry::Message {
                at,
                msg: msg_codec::read_ctrl(&mut r)?,
            },
            KIND_RELAY => {
                // Only the relays a controller takes are entries.
                match r.rest().first() {
                    Some(&t) if !(relay_tag::RECALLED..=relay_tag::ADMITTED).contains(&t) => {
                        return Err(DecodeError::Tag(t))
                    }
                    _ => {}
                }
                Entry::Relay {
                    at,
                    msg: msg_codec::read_relay(&mut r)?,
                }
            }
            KIND_UNREACHABLE => Entry::Unreachable {
                at,
                host: NodeId(r.u32_le()?),
            },
            other => return Err(DecodeError::Tag(other)),
        };
        if !r.is_empty() {
            return Err(DecodeError::Trailing(r.remaining()));
        }
        Ok(entry)
    }
}

/// A relay the controller takes as an input (§5.2 receiver recovery and rejoin): the ones a
/// log entry may hold.
fn is_input(msg: &RelayMsg) -> bool {
    matches!(
        msg,
        RelayMsg::Recalled { .. }
            | RelayMsg::RecoverRequest { .. }
            | RelayMsg::Rejoin { .. }
            | RelayMsg::Admitted { .. }
    )
}

impl From<onepipe_proto::byteio::Short> for DecodeError {
    fn from(_: onepipe_proto::byteio::Short) -> DecodeError {
        DecodeError::Truncated
    }
}

impl From<msg_codec::DecodeError> for DecodeError {
    fn from(e: msg_codec::DecodeError) -> DecodeError {
        match e {
            msg_codec::DecodeError::Truncated => DecodeError::Truncated,
            msg_codec::DecodeError::Tag(t) => DecodeError::Tag(t),
            msg_codec::DecodeError::Timestamp(t) => DecodeError::Timestamp(t),
            msg_codec::DecodeError::Flag(f) => DecodeError::Flag(f),
            msg_codec::DecodeError::Trailing(n) => DecodeError::Trailing(n),
            // `decode` refuses a forward's tag before reading one.
            msg_codec::DecodeError::Forward(_) | msg_codec::DecodeError::Packet(..) => {
                DecodeError::Tag(relay_tag::FORWARD)
            }
        }
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
mod tests {
    use super::*;
    use onepipe_proto::{LinkId, ProcId, Psn, Timestamp};
    use proptest::prelude::*;

    /// One message of every kind the log takes. The message codec's own properties (every
    /// message round-trips, every prefix and any bytes are refused without a panic) are
    /// `onepipe_proto::failure::codec`'s tests; here the frame around it is checked.
    fn messages() -> Vec<CtrlMsg> {
        let ts = Timestamp::new;
        vec![
            CtrlMsg::LinkDown {
                reporter: NodeId(1),
                link: LinkId(2),
                last_commit: Some(ts(3)),
            },
            CtrlMsg::Failure {
                round: 1,
                failed: vec![(ProcId(4), ts(5))],
                correct: vec![NodeId(0), NodeId(2)],
            },
            CtrlMsg::Recall {
                round: 1,
                from: NodeId(2),
                groups: vec![(ProcId(4), ts(5))],
                unacked: vec![(ProcId(2), ProcId(4), Psn(9), 1)],
            },
            CtrlMsg::RecallAck {
                round: 1,
                from: NodeId(2),
            },
            CtrlMsg::Completed {
                round: 1,
                host: NodeId(2),
            },
            CtrlMsg::Resume {
                round: 1,
                dead_links: vec![LinkId(7)],
            },
            CtrlMsg::Isolate { link: LinkId(7) },
            CtrlMsg::Departed {
                host: NodeId(3),
                last: None,
            },
            CtrlMsg::Depart { link: LinkId(8) },
            CtrlMsg::CallbackTaken {
                round: 2,
                host: NodeId(1),
            },
        ]
    }

    /// One relay of every kind the log takes.
    fn relays() -> Vec<RelayMsg> {
        vec![
            RelayMsg::Recalled {
                groups: vec![(ProcId(4), Timestamp::new(5))],
            },
            RelayMsg::RecoverRequest { host: NodeId(3) },
            RelayMsg::Rejoin { host: NodeId(3) },
            RelayMsg::Admitted {
                link: LinkId(6),
                alive: true,
                barrier: None,
                commit: Some(Timestamp::new(11)),
            },
        ]
    }

    fn entry() -> impl Strategy<Value = Entry> {
        prop_oneof![
            any::<u64>().prop_map(|t| Entry::Timeout { at: Instant(t) }),
            (any::<u64>(), any::<u32>()).prop_map(|(t, h)| Entry::Unreachable {
                at: Instant(t),
                host: NodeId(h),
            }),
            (any::<u64>(), prop::sample::select(messages())).prop_map(|(t, msg)| {
                Entry::Message {
                    at: Instant(t),
                    msg,
                }
            }),
            (any::<u64>(), prop::sample::select(relays())).prop_map(|(t, msg)| Entry::Relay {
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
