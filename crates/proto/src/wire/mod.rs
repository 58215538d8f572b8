//! The 1Pipe wire format (§6.1): typed packets and their byte encoding.
//!
//! The protocol roles exchange the typed [`Packet`]; the simulator moves those values directly,
//! and the UDP runtime encodes them with [`Packet::encode`] / [`Packet::decode`]. The encoding is
//! big-endian, fixed-layout, and versionless for now (the opcode space leaves room).
//!
//! Data packet header, 36 bytes (§6.1 lists "3 timestamps including message, best-effort barrier,
//! and commit barrier; PSN; an opcode and a flag that marks end of message" = 24 bytes on RDMA UD,
//! where the queue pair names the peers; over UDP we add the fragment index, payload length and
//! the source and destination process ids):
//!
//! ```text
//!  0      1      2      4          10         16         22     26     30     34     36
//!  +------+------+------+----------+----------+----------+------+------+------+------+
//!  |opcode|flags | frag | msg ts   | barrier  | commit   | psn  | src  | dst  | len  | payload..
//!  +------+------+------+----------+----------+----------+------+------+------+------+
//! ```
//!
//! Flags (bit 0 up): end of message, barrier valid, commit valid, reliable, ECN, plain
//! ([`flags`]); the top two bits are zero, and `reliable` and `plain` are never set together
//! (such a packet is refused as `UnknownFlags`). A *plain* data packet (§2.2.2) is a
//! best-effort fragment that its receiver delivers on arrival, outside the total order.
//!
//! Beacon, 20 bytes: opcode, flags (bit 0: *demand*, [`BEACON_DEMAND`]; the others zero), 2
//! reserved zero bytes, sending node id (4), barrier (6), commit barrier (6).
//! NAK, 24 bytes: opcode, reason, service (0 best effort, 1 reliable), 1 reserved zero byte, from
//! process (4), to process (4), psn (4), msg ts (6), give-up number (1), 1 reserved zero byte.
//! Reserved bytes must be zero: a packet that sets one is refused (`UnknownFlags`), so every
//! packet decodes from exactly one encoding.
//! ACK, 24 bytes: opcode, service (0/1), ECN echo count, receive window, from process (4), to
//! process (4), cumulative psn (4), SACK bitmap (8).
//!
//! ACK batch: the delayed ACKs one host owes the processes of one other host, in one packet (the
//! per-host polling thread of §6.1 generates every end-to-end ACK of its host, so it can pack
//! those bound for one host together). A 4-byte header — opcode, entry count (1 to
//! [`ACK_BATCH_LEN_MAX`]), 2 reserved zero bytes — then `count` entries of 24 bytes, each an ACK
//! without its opcode: service (0/1), ECN echo count, receive window, 1 reserved zero byte, from
//! process (4), to process (4), cumulative psn (4), SACK bitmap (8). At most
//! [`ACK_BATCH_BYTES_MAX`] bytes: it fits a 1,500-byte Ethernet MTU with its IPv4 and UDP headers.
//!
//! ```text
//!  0      1      2      4       5     6     7     8      12     16     20       28
//!  +------+------+------+-------+-----+-----+-----+------+------+------+--------+---
//!  |opcode|count | 0 0  |service| ecn |rwnd |  0  | from |  to  | cum  |  sack  | entry 2..
//!  +------+------+------+-------+-----+-----+-----+------+------+------+--------+---
//! ```

mod codec;

pub use codec::{DecodeError, PAYLOAD_LEN_MAX};

use crate::ids::{NodeId, ProcId, Psn};
use crate::time::Timestamp;
use bytes::Bytes;

/// Length of a data packet header.
pub const DATA_HEADER_LEN: usize = 36;
/// Length of a beacon.
pub const BEACON_LEN: usize = 20;
/// Length of a NAK.
pub const NAK_LEN: usize = 24;
/// Length of an ACK.
pub const ACK_LEN: usize = 24;
/// Length of an ACK batch's header.
pub const ACK_BATCH_HEADER_LEN: usize = 4;
/// Length of one entry of an ACK batch.
pub const ACK_BATCH_ENTRY_LEN: usize = 24;
/// Largest encoded ACK batch: a 1,500-byte Ethernet MTU less the IPv4 (20) and UDP (8) headers,
/// so a batch is never IP-fragmented.
pub const ACK_BATCH_BYTES_MAX: usize = 1_472;
/// Most entries in one ACK batch.
pub const ACK_BATCH_LEN_MAX: usize =
    (ACK_BATCH_BYTES_MAX - ACK_BATCH_HEADER_LEN) / ACK_BATCH_ENTRY_LEN;
/// Bytes of lower-layer framing a simulated packet also occupies on a link (Ethernet + IP + UDP:
/// 14 + 4 FCS + 20 + 8 + 20 preamble/IFG), used for serialization delay and bandwidth shares.
pub const FRAMING_LEN: usize = 66;

/// Packet kinds (first byte on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// A fragment of a message: best effort, reliable or plain, by its flags.
    Data = 1,
    /// A hop-by-hop beacon carrying only barriers (§4.2).
    Beacon = 2,
    /// A negative acknowledgement: a packet was dropped because it arrived late (§4.1).
    Nak = 3,
    /// An end-to-end acknowledgement (§2.1, §5.1).
    Ack = 4,
    /// Several end-to-end acknowledgements between the processes of two hosts (§6.1).
    AckBatch = 5,
}

impl Opcode {
    /// Parses an opcode byte.
    pub fn from_u8(b: u8) -> Option<Opcode> {
        match b {
            1 => Some(Opcode::Data),
            2 => Some(Opcode::Beacon),
            3 => Some(Opcode::Nak),
            4 => Some(Opcode::Ack),
            5 => Some(Opcode::AckBatch),
            _ => None,
        }
    }
}

/// Flag bits of a data packet.
pub mod flags {
    /// The last fragment of a message.
    pub const END_OF_MESSAGE: u8 = 1 << 0;
    /// The barrier field is meaningful. Hosts clear it when the switches do not rewrite barriers
    /// on data (switch-CPU and host-representative modes, §6.2.2–6.2.3): then a data packet's
    /// barrier field would describe only its sender, not the link it arrives on.
    pub const BARRIER_VALID: u8 = 1 << 1;
    /// The commit-barrier field is meaningful (§5.1; set with `BARRIER_VALID` in chip mode).
    pub const COMMIT_VALID: u8 = 1 << 2;
    /// The fragment belongs to a reliable message (§5.1): it has its own PSN space per pair, is
    /// retransmitted until acknowledged and is released by the commit barrier.
    pub const RELIABLE: u8 = 1 << 3;
    /// Congestion experienced: a switch queue above its threshold marked it (§6.1, DCTCP).
    pub const ECN: u8 = 1 << 4;
    /// The fragment belongs to a *plain* message (§2.2.2: "the response message does not need
    /// to be ordered by 1Pipe"): best effort, in the best-effort PSN space of its pair and
    /// acknowledged like any best-effort message, but delivered the moment it is whole —
    /// never held in the reorder buffer, never dropped as late. Its barrier fields still
    /// describe the link it travels on, as any data packet's do. Never with `RELIABLE`.
    pub const PLAIN: u8 = 1 << 5;
    /// All flag bits defined so far; others must be zero.
    pub const ALL: u8 = END_OF_MESSAGE | BARRIER_VALID | COMMIT_VALID | RELIABLE | ECN | PLAIN;
    /// Bits that no packet may carry together: a plain message is best effort.
    pub const EXCLUSIVE: u8 = RELIABLE | PLAIN;
}

/// The fixed header of a data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader {
    /// Flag bits, see [`flags`].
    pub flags: u8,
    /// Index of this fragment within its message (0 for the first).
    pub frag: u16,
    /// The message timestamp, set by the sender and never modified (§4.1).
    pub ts: Timestamp,
    /// The best-effort barrier, initialised by the sender and rewritten by switches (§4.1).
    pub barrier: Timestamp,
    /// The commit barrier of reliable 1Pipe (§5.1), when `COMMIT_VALID`; rewritten by switches
    /// like the best-effort barrier.
    pub commit: Timestamp,
    /// Packet sequence number per (src, dst) pair and service (§6.1).
    pub psn: Psn,
    /// Sending process.
    pub src: ProcId,
    /// Receiving process.
    pub dst: ProcId,
}

impl DataHeader {
    /// True if this is the last fragment of its message.
    pub fn end_of_message(&self) -> bool {
        self.flags & flags::END_OF_MESSAGE != 0
    }

    /// The barrier, if the field is valid.
    pub fn barrier(&self) -> Option<Timestamp> {
        (self.flags & flags::BARRIER_VALID != 0).then_some(self.barrier)
    }

    /// The commit barrier, if the field is valid.
    pub fn commit(&self) -> Option<Timestamp> {
        (self.flags & flags::COMMIT_VALID != 0).then_some(self.commit)
    }

    /// True for a fragment of a reliable message.
    pub fn reliable(&self) -> bool {
        self.flags & flags::RELIABLE != 0
    }

    /// True for a fragment of a plain message ([`flags::PLAIN`]): delivered on arrival,
    /// outside the total order.
    pub fn plain(&self) -> bool {
        self.flags & flags::PLAIN != 0
    }
}

/// One fragment of a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataPacket {
    /// The header.
    pub header: DataHeader,
    /// This fragment's payload.
    pub payload: Bytes,
}

/// A beacon: barriers only, sent hop by hop on idle links (§4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beacon {
    /// The node that sent it (its one-hop neighbour receives it).
    pub from: NodeId,
    /// The best-effort barrier.
    pub barrier: Timestamp,
    /// The commit barrier (reliable 1Pipe, §5.1: "commit messages also need periodic beacons").
    pub commit: Timestamp,
    /// Someone on the sending side waits for the barrier to rise (issue 37, not in the paper):
    /// a host that has just sent or holds messages for reordering sets it on its own beacons;
    /// a switch sets it on every beacon it sends while one of its inputs set it within the
    /// hold ([`crate::switch::SwitchConfig::demand_hold_ns`]). A host told so beacons at the
    /// fast interval for the hold ([`crate::host::HostConfig::beacon_fast_interval_ns`]). It
    /// changes when beacons go, never what a barrier means: §4.1–§4.2 are untouched.
    pub demand: bool,
}

/// The beacon's flag bit for [`Beacon::demand`].
pub const BEACON_DEMAND: u8 = 1 << 0;

/// Why a NAK was sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NakReason {
    /// The packet arrived with a timestamp below the receiver's barrier (§4.1).
    Late = 1,
    /// The message could not be reassembled: a fragment was late or missing when the barrier
    /// passed its timestamp.
    Incomplete = 2,
    /// The receiver's reorder or reassembly buffer was full.
    BufferFull = 3,
    /// Lost in the network: raised by the sender when no acknowledgement came within the
    /// retransmission timeout (the message may still have been delivered if only its
    /// acknowledgements were lost), or sent by a receiver whose acknowledgement window slid past
    /// a packet that never arrived (the NAK's PSN is that packet's, maybe not the message's
    /// first; its timestamp is unknown to the receiver and zero).
    Lost = 4,
}

/// A NAK from a receiver to the sender of a dropped message (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nak {
    /// Why the message was dropped.
    pub reason: NakReason,
    /// The receiving process that dropped it (the NAK's sender).
    pub from: ProcId,
    /// The process that sent the dropped message (the NAK's receiver).
    pub to: ProcId,
    /// The PSN of the message's first fragment.
    pub psn: Psn,
    /// The dropped message's timestamp.
    pub ts: Timestamp,
    /// The message was reliable (the PSN is in the reliable space; the sender retransmits).
    pub reliable: bool,
    /// For a `Lost` NAK from a receiver: which of the pair's give-ups this is (mod 256), so the
    /// sender knows exactly which ones it heard of; 0 otherwise.
    pub seq: u8,
}

/// An end-to-end acknowledgement from a receiver to a sender, per (sender, receiver) pair: every
/// packet with a PSN below `cum_psn` has been received (or given up on), and bit `i` of `sack`
/// says that packet `cum_psn + 1 + i` has been received too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    /// The receiving process (the ACK's sender).
    pub from: ProcId,
    /// The sending process (the ACK's receiver).
    pub to: ProcId,
    /// Cumulative: all PSNs below this one are acknowledged.
    pub cum_psn: Psn,
    /// Selective acknowledgements above `cum_psn` (bit `i` ↔ PSN `cum_psn + 1 + i`).
    pub sack: u64,
    /// The PSNs are in the reliable space of the pair.
    pub reliable: bool,
    /// Reliable: packets that arrived ECN-marked since the previous ACK of this pair
    /// (saturating; DCTCP echo, §6.1). Best effort: how many PSNs the receiver's window has given
    /// up on so far, mod 256 — a sender that saw fewer `Lost` NAKs missed one.
    pub ecn: u8,
    /// Receive window: how many more reliable packets the receiver will buffer for this sender.
    pub rwnd: u8,
}

/// The ACKs one host sends the processes of one other host at once, each applied by the
/// receiving host as if it had come alone (§2.1 end-to-end ACKs, generated per host by the
/// polling thread of §6.1). Holds 1 to [`ACK_BATCH_LEN_MAX`] entries: that is checked when it is
/// built ([`AckBatch::new`]) and when it is decoded, so a batch always fits its MTU.
///
/// The network routes a batch by its first entry (`from` → `to`); a host only puts entries for
/// the processes of one other host in a batch, so the first names the batch's destination host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckBatch {
    acks: Vec<Ack>,
}

impl AckBatch {
    /// A batch of `acks`, or `None` if there are none or more than [`ACK_BATCH_LEN_MAX`].
    pub fn new(acks: Vec<Ack>) -> Option<AckBatch> {
        (1..=ACK_BATCH_LEN_MAX)
            .contains(&acks.len())
            .then_some(AckBatch { acks })
    }

    /// The entries, in the order they were packed.
    pub fn acks(&self) -> &[Ack] {
        &self.acks
    }

    /// The entries, by value.
    pub fn into_acks(self) -> Vec<Ack> {
        self.acks
    }

    /// The entry that names the batch's route: its receiving process and its sending process
    /// (who the ACK goes to).
    pub fn first(&self) -> &Ack {
        // Never empty: `new` and the decoder refuse empty batches.
        &self.acks[0]
    }
}

/// Any 1Pipe packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Packet {
    /// A message fragment.
    Data(DataPacket),
    /// A beacon.
    Beacon(Beacon),
    /// A NAK.
    Nak(Nak),
    /// An ACK.
    Ack(Ack),
    /// Several ACKs for the processes of one host.
    AckBatch(AckBatch),
}

impl Packet {
    /// The packet's opcode.
    pub fn opcode(&self) -> Opcode {
        match self {
            Packet::Data(_) => Opcode::Data,
            Packet::Beacon(_) => Opcode::Beacon,
            Packet::Nak(_) => Opcode::Nak,
            Packet::Ack(_) => Opcode::Ack,
            Packet::AckBatch(_) => Opcode::AckBatch,
        }
    }

    /// Encoded length in bytes (header plus payload), without lower-layer framing.
    pub fn encoded_len(&self) -> usize {
        match self {
            Packet::Data(d) => DATA_HEADER_LEN + d.payload.len(),
            Packet::Beacon(_) => BEACON_LEN,
            Packet::Nak(_) => NAK_LEN,
            Packet::Ack(_) => ACK_LEN,
            Packet::AckBatch(b) => ACK_BATCH_HEADER_LEN + b.acks.len() * ACK_BATCH_ENTRY_LEN,
        }
    }

    /// Bytes this packet occupies on a link, framing included.
    pub fn wire_len(&self) -> usize {
        self.encoded_len() + FRAMING_LEN
    }

    /// The processes a packet travels between, (from, to), which the network routes it by
    /// (the destination process's host); `None` for a beacon, which goes one hop only. An ACK
    /// batch travels as its first entry.
    pub fn endpoints(&self) -> Option<(ProcId, ProcId)> {
        match self {
            Packet::Data(d) => Some((d.header.src, d.header.dst)),
            Packet::Beacon(_) => None,
            Packet::Nak(n) => Some((n.from, n.to)),
            Packet::Ack(a) => Some((a.from, a.to)),
            Packet::AckBatch(b) => Some((b.first().from, b.first().to)),
        }
    }
}
