//! The one packet type every baseline role exchanges: [`BasePacket`].
//!
//! A packet names its source and destination *process*; the driver routes it to the host (or
//! switch) where the destination process lives, exactly as it routes 1Pipe data packets by
//! `(src, dst)`. The body says which protocol message it is. Roles exchange the typed values;
//! [`BasePacket::encode`] and [`BasePacket::decode`] (in `codec.rs`) turn them into bytes for a
//! live runtime.
//!
//! What it is not: a fragmenting transport. A payload travels in one packet (at most
//! [`PAYLOAD_LEN_MAX`] bytes), as the 64-byte messages of the paper's Fig. 8 do.

use crate::dests::Dests;
use bytes::Bytes;
use onepipe_proto::ids::ProcId;
use onepipe_proto::wire::FRAMING_LEN;

/// Largest payload one packet carries (the length field is 16 bits).
pub const PAYLOAD_LEN_MAX: usize = u16::MAX as usize;

/// Largest sequence number, index, timestamp or transfer counter accepted from the wire.
///
/// None ever comes near it (2^62 messages), and refusing larger ones keeps every `+ 1` and
/// `+ window` a role computes from wire values in range: a role must never overflow, let alone
/// panic, on what a peer sends.
pub const WIRE_SEQ_MAX: u64 = 1 << 62;

/// Length of the header every packet starts with: opcode, flags, two reserved bytes, source
/// process, destination process.
pub const HEADER_LEN: usize = 1 + 1 + 2 + 4 + 4;

/// One holding of the token: who held it and the first global sequence number it stamped.
///
/// The messages of one holding carry consecutive sequence numbers starting at `start`, and the
/// next non-empty holding starts right after the last of them — which is what lets a receiver
/// find the sender of a sequence number it never saw (see [`crate::token`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The process that held the token and sent the messages.
    pub holder: ProcId,
    /// The first global sequence number it stamped in that holding.
    pub start: u64,
}

/// The protocol message a [`BasePacket`] carries.
///
/// Sequence numbers and counters are `u64` and never wrap in practice (2^64 messages); counts in
/// NACKs and loss markers are `u32`, bounded by the receivers' windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    // --- Fixed sequencer ([57], [51]; see `crate::sequencer`) ---------------------------------
    /// Endpoint → sequencer: order this message. `msg_id` counts the sender's accepted sends
    /// from 0, so the sequencer keeps each sender's messages in FIFO order and drops duplicates.
    Submit {
        /// The sender's send counter.
        msg_id: u64,
        /// Who should receive it.
        dests: Dests,
        /// The application message.
        payload: Bytes,
    },
    /// Sequencer → endpoint: an ordered message (first copy or a retransmission).
    Ordered {
        /// The global sequence number: the total order.
        gseq: u64,
        /// The per-receiver sequence number: consecutive over the messages addressed to this
        /// receiver, so a gap is visible even when the receiver gets only a subset.
        rseq: u64,
        /// The process that submitted it.
        origin: ProcId,
        /// The application message.
        payload: Bytes,
    },
    /// Sequencer → endpoint, after the stream to it went idle: "messages to you have
    /// `rseq < rseq_next`, the last one stamped `gseq_last`" — so a lost last message is noticed.
    SeqSync {
        /// One past the last per-receiver sequence number sent.
        rseq_next: u64,
        /// The global sequence number of the last message sent to this receiver.
        gseq_last: u64,
    },
    /// Endpoint → sequencer, answering a [`Body::SeqSync`]: "I have taken in every message to
    /// me below `rseq_next`" — so the sequencer stops syncing this receiver.
    SyncAck {
        /// The receiver's next expected per-receiver sequence number.
        rseq_next: u64,
    },
    /// Sequencer → endpoint: your sends `msg_id .. msg_id + count` never reached the sequencer
    /// in time; they were skipped and will be delivered nowhere.
    SubmitLost {
        /// The first skipped send counter.
        msg_id: u64,
        /// How many.
        count: u32,
    },

    // --- Shared by the sequencer and Lamport streams ------------------------------------------
    /// Receiver → source of a stream (the sequencer, or a Lamport sender): "I am missing stream
    /// sequence numbers `seq .. seq + count`; their source-wide indexes lie in
    /// `index_lo .. index_hi`". For the token protocol `seq` is the global sequence number and
    /// the index range repeats it.
    Nack {
        /// First missing sequence number.
        seq: u64,
        /// How many.
        count: u32,
        /// Lower bound (inclusive) of the missing messages' source indexes.
        index_lo: u64,
        /// Upper bound (exclusive).
        index_hi: u64,
    },
    /// Source → receiver, answering a NACK: sequence numbers `seq .. seq + count` fell out of
    /// the source's bounded history and will never come; skip them.
    Lost {
        /// First lost sequence number.
        seq: u64,
        /// How many.
        count: u32,
    },

    // --- Token ([86]; see `crate::token`) -----------------------------------------------------
    /// The token, passed from a ring member to its successor.
    TokenPass {
        /// The next global sequence number to stamp.
        seq: u64,
        /// Transfer counter: +1 per pass, so a retransmitted token is recognised as a duplicate.
        pass: u64,
        /// The last non-empty holding, if any (tells the receiver who sent `.. seq`).
        last: Option<Holding>,
    },
    /// Acknowledges the token transfer numbered `pass`.
    TokenAck {
        /// The acknowledged transfer.
        pass: u64,
    },
    /// A message stamped by the token holder (to a destination), or a header-only filler (to a
    /// non-destination) so that every member sees every global sequence number.
    TokenData {
        /// The global sequence number.
        gseq: u64,
        /// The first sequence number of this holding.
        holding_start: u64,
        /// The previous non-empty holding, if any.
        prev: Option<Holding>,
        /// True if the receiver is a destination; false for a filler (empty payload).
        addressed: bool,
        /// The application message (empty for a filler).
        payload: Bytes,
    },
    /// Holder → receiver, answering a NACK: `gseq .. gseq + count` fell out of the holder's
    /// history. Carries the holding they belong to, so the receiver can keep tracing senders.
    TokenLost {
        /// First lost global sequence number.
        gseq: u64,
        /// How many.
        count: u32,
        /// Start of the holding they belong to (equal to `gseq` when unknown).
        holding_start: u64,
        /// The holding before it; `None` when the holder no longer knows.
        prev: Option<Holding>,
    },

    // --- Lamport timestamps ([63]; see `crate::lamport`) --------------------------------------
    /// A message stamped with its sender's Lamport clock.
    Stamped {
        /// The Lamport timestamp; ties between senders break by process id.
        ts: u64,
        /// Per-(src, dst) channel sequence number: makes the channel FIFO over a reordering
        /// network.
        cseq: u64,
        /// The sender-wide message index (for NACK lookups).
        index: u64,
        /// The application message.
        payload: Bytes,
    },
    /// A Lamport clock heartbeat: "my clock is `ts`; I have sent you `cseq_next` messages, the
    /// last with index `index_next - 1`". Sent every heartbeat interval (§7.2: "exchanges
    /// received timestamps per interval rather than per message").
    Clock {
        /// The sender's clock: all its future messages carry larger timestamps.
        ts: u64,
        /// One past the last channel sequence number sent to this receiver.
        cseq_next: u64,
        /// One past the index of the last message sent to this receiver (0 if none).
        index_next: u64,
    },
    /// "Send me your clock now": a receiver whose delivery has waited on this process for a
    /// NACK timeout pulls a heartbeat instead of waiting for one that may have been lost.
    ClockRequest,

    // --- ISIS agreed order (Skeen; [17] Birman and Joseph; see `crate::isis`) -----------------
    /// Sender → destination: a message; answer with the timestamp you propose for it.
    Propose {
        /// The sender's send counter (from 0): names the message in the other ISIS packets.
        msg_id: u64,
        /// Per-(src, dst) channel sequence number: makes the channel FIFO over a reordering
        /// network and a lost proposal request visible.
        cseq: u64,
        /// The application message.
        payload: Bytes,
    },
    /// Destination → sender: the timestamp this destination proposes for `msg_id` (above
    /// everything it proposed or saw agreed before; ties break by proposer).
    Proposal {
        /// The message.
        msg_id: u64,
        /// The proposed timestamp.
        ts: u64,
    },
    /// Sender → destination: the agreed timestamp of `msg_id`, at least every proposal.
    Final {
        /// The message.
        msg_id: u64,
        /// The agreed timestamp: the message's place in the total order, with its sender.
        ts: u64,
    },
    /// Destination → sender: "`msg_id` has waited too long for its agreed timestamp" (the
    /// `Final` may have been lost); the sender sends it again, or `Lost` if it forgot it.
    FinalRequest {
        /// The message.
        msg_id: u64,
    },

    // --- PLATO (Balakrishnan et al. §4; see `crate::plato`) ----------------------------------
    /// Sender → destination: the message itself, straight from its sender (PLATO's data
    /// multicast), while a [`Body::Submit`] of it goes to the sequencer.
    Early {
        /// The sender's send counter (names the message in the sequencer's order).
        msg_id: u64,
        /// The application message.
        payload: Bytes,
    },
    /// Sequencer → destination: the next places in the total order among the messages to this
    /// destination (PLATO's sequencing packet, one per `k` messages).
    OrderBatch {
        /// The per-receiver sequence number of the first entry; the rest follow consecutively.
        rseq: u64,
        /// The places, in order; at most [`ORDER_BATCH_LEN_MAX`].
        entries: Vec<OrderEntry>,
    },
    /// Sequencer → destination, answering a NACK in PLATO: one place in the order with its
    /// message, for a lost [`Body::OrderBatch`] or a lost [`Body::Early`].
    Resend {
        /// The global sequence number.
        gseq: u64,
        /// The per-receiver sequence number.
        rseq: u64,
        /// The sender.
        origin: ProcId,
        /// The sender's send counter.
        msg_id: u64,
        /// The application message.
        payload: Bytes,
    },

    // --- Causal multicast under ToTo and all-ack (Transis §2.1; see `crate::toto`) ----------
    /// A message of the causal layer, from its origin or retransmitted by anyone holding it:
    /// the `seq`'th message of `origin`, with the acknowledgements it was sent with.
    Causal {
        /// The machine that sent it first.
        origin: ProcId,
        /// Its number among `origin`'s messages, from 1 (the paper's `m_{origin,seq}`).
        seq: u64,
        /// An agreed multicast message (delivered in the total order), or a causal-only one (a
        /// heartbeat: empty, never delivered to the application).
        agreed: bool,
        /// Transis's piggybacked ACKs: for each machine whose messages `origin` delivered since
        /// its previous message, the latest one — its direct causal predecessors. Strictly
        /// ascending by machine, at most [`CAUSAL_ACKS_LEN_MAX`].
        acks: Vec<CausalAck>,
        /// The application message (empty for a heartbeat).
        payload: Bytes,
    },
    /// "I am missing `origin`'s messages `seq .. seq + count`": to their origin or to a machine
    /// whose message acknowledged them; the answer is the [`Body::Causal`] messages themselves.
    CausalNack {
        /// Whose messages.
        origin: ProcId,
        /// The first missing one.
        seq: u64,
        /// How many.
        count: u32,
    },
    /// "I have delivered these": the latest message of each machine this machine delivered,
    /// outside the causal graph (it needs no acknowledgement), so senders learn what is stable.
    CausalStatus {
        /// One entry per machine with anything delivered, strictly ascending, at most
        /// [`CAUSAL_ACKS_LEN_MAX`].
        delivered: Vec<CausalAck>,
    },
    /// ToTo's membership (§5.1, Agree): "in view `epoch` I take these machines for crashed,
    /// and of each I delivered up to `seq`" — one entry per suspected machine, strictly
    /// ascending. See `crate::toto::member`.
    TotoFlush {
        /// The view the change leaves (installed views so far).
        epoch: u64,
        /// Per suspected machine, the latest of its messages the sender delivered.
        crashed: Vec<CausalAck>,
    },
    /// ToTo's membership (§5.1, end of Agree): view `epoch` ends without the machines of
    /// `cut`, and of each the messages up to its `seq` belong to it (virtual synchrony).
    TotoInstall {
        /// The view the change leaves.
        epoch: u64,
        /// Per crashed machine, its last message every survivor delivers.
        cut: Vec<CausalAck>,
    },
}

/// One acknowledgement of the causal layer: "`origin`'s messages up to `seq`".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CausalAck {
    /// The machine.
    pub origin: ProcId,
    /// Its latest message acknowledged.
    pub seq: u64,
}

/// Most acknowledgements one [`Body::Causal`] or [`Body::CausalStatus`] carries (one per
/// machine of the group at most).
pub const CAUSAL_ACKS_LEN_MAX: usize = 1_024;

/// Encoded length of one [`CausalAck`]: origin, seq.
pub const CAUSAL_ACK_LEN: usize = 4 + 8;

/// Most entries one [`Body::OrderBatch`] carries.
pub const ORDER_BATCH_LEN_MAX: usize = 1_024;

/// One place in PLATO's total order: message `msg_id` of `origin` is number `gseq`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderEntry {
    /// The global sequence number.
    pub gseq: u64,
    /// The sender.
    pub origin: ProcId,
    /// The sender's send counter.
    pub msg_id: u64,
}

/// A baseline packet: source and destination processes and the protocol message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BasePacket {
    /// The sending process (for a sequencer, its own process id).
    pub src: ProcId,
    /// The receiving process. The driver routes on the host where it lives.
    pub dst: ProcId,
    /// The protocol message.
    pub body: Body,
}

/// Packet kinds (the first byte on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// [`Body::Submit`].
    Submit = 1,
    /// [`Body::Ordered`].
    Ordered = 2,
    /// [`Body::SeqSync`].
    SeqSync = 3,
    /// [`Body::SubmitLost`].
    SubmitLost = 4,
    /// [`Body::Nack`].
    Nack = 5,
    /// [`Body::Lost`].
    Lost = 6,
    /// [`Body::TokenPass`].
    TokenPass = 7,
    /// [`Body::TokenAck`].
    TokenAck = 8,
    /// [`Body::TokenData`].
    TokenData = 9,
    /// [`Body::TokenLost`].
    TokenLost = 10,
    /// [`Body::Stamped`].
    Stamped = 11,
    /// [`Body::Clock`].
    Clock = 12,
    /// [`Body::ClockRequest`].
    ClockRequest = 13,
    /// [`Body::SyncAck`].
    SyncAck = 14,
    /// [`Body::Propose`].
    Propose = 15,
    /// [`Body::Proposal`].
    Proposal = 16,
    /// [`Body::Final`].
    Final = 17,
    /// [`Body::FinalRequest`].
    FinalRequest = 18,
    /// [`Body::Early`].
    Early = 19,
    /// [`Body::OrderBatch`].
    OrderBatch = 20,
    /// [`Body::Resend`].
    Resend = 21,
    /// [`Body::Causal`].
    Causal = 40,
    /// [`Body::CausalNack`].
    CausalNack = 41,
    /// [`Body::CausalStatus`].
    CausalStatus = 42,
    /// [`Body::TotoFlush`].
    TotoFlush = 43,
    /// [`Body::TotoInstall`].
    TotoInstall = 44,
}

impl Opcode {
    /// Parses an opcode byte.
    pub fn from_u8(b: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match b {
            1 => Submit,
            2 => Ordered,
            3 => SeqSync,
            4 => SubmitLost,
            5 => Nack,
            6 => Lost,
            7 => TokenPass,
            8 => TokenAck,
            9 => TokenData,
            10 => TokenLost,
            11 => Stamped,
            12 => Clock,
            13 => ClockRequest,
            14 => SyncAck,
            15 => Propose,
            16 => Proposal,
            17 => Final,
            18 => FinalRequest,
            19 => Early,
            20 => OrderBatch,
            21 => Resend,
            40 => Causal,
            41 => CausalNack,
            42 => CausalStatus,
            43 => TotoFlush,
            44 => TotoInstall,
            _ => return None,
        })
    }

    /// Length of the body's fixed part, after the [`HEADER_LEN`]-byte header: everything but
    /// the destination list of a `Submit` and the payload.
    pub const fn fixed_len(self) -> usize {
        match self {
            // msg_id, dest count, payload length.
            Opcode::Submit => 8 + 4 + 2,
            // gseq, rseq, origin, payload length.
            Opcode::Ordered => 8 + 8 + 4 + 2,
            Opcode::SeqSync => 8 + 8,
            Opcode::SubmitLost => 8 + 4,
            Opcode::Nack => 8 + 4 + 8 + 8,
            Opcode::Lost => 8 + 4,
            // seq, pass, last holder, last start.
            Opcode::TokenPass => 8 + 8 + 4 + 8,
            Opcode::TokenAck => 8,
            // gseq, holding start, prev holder, prev start, payload length.
            Opcode::TokenData => 8 + 8 + 4 + 8 + 2,
            // gseq, count, holding start, prev holder, prev start.
            Opcode::TokenLost => 8 + 4 + 8 + 4 + 8,
            // ts, cseq, index, payload length.
            Opcode::Stamped => 8 + 8 + 8 + 2,
            Opcode::Clock => 8 + 8 + 8,
            Opcode::ClockRequest => 0,
            Opcode::SyncAck => 8,
            // msg_id, cseq, payload length.
            Opcode::Propose => 8 + 8 + 2,
            Opcode::Proposal | Opcode::Final => 8 + 8,
            Opcode::FinalRequest => 8,
            // msg_id, payload length.
            Opcode::Early => 8 + 2,
            // rseq, entry count (then gseq u64, origin u32, msg_id u64 per entry).
            Opcode::OrderBatch => 8 + 2,
            // gseq, rseq, origin, msg_id, payload length.
            Opcode::Resend => 8 + 8 + 4 + 8 + 2,
            // origin, seq, ack count, payload length (the acks lie between the two counts).
            Opcode::Causal => 4 + 8 + 2 + 2,
            // origin, seq, count.
            Opcode::CausalNack => 4 + 8 + 4,
            // entry count.
            Opcode::CausalStatus => 2,
            // epoch, entry count.
            Opcode::TotoFlush | Opcode::TotoInstall => 8 + 2,
        }
    }
}

/// Coarse classes of packets, for a driver that injects loss by kind or decides when a run is
/// quiescent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketClass {
    /// Carries an application message (or a token filler standing for one): `Submit`,
    /// `Ordered`, `TokenData`, `Stamped`, `Propose`; PLATO's `Early`, `Resend`, and
    /// `OrderBatch` (the order itself).
    Data,
    /// Loss recovery: `Nack`, `Lost`, `SubmitLost`, `TokenLost`, `ClockRequest`, `SeqSync`,
    /// `SyncAck`; the causal layer's `CausalNack` and `CausalStatus`.
    Repair,
    /// The token and its acknowledgement. The token circulates for ever, so a driver waiting
    /// for quiescence must not wait for these.
    Token,
    /// Lamport clock heartbeats; the causal layer's heartbeats (`Causal` messages that are not
    /// agreed).
    Heartbeat,
    /// ISIS's replies and decisions: `Proposal` and `Final` (its acknowledgements: every
    /// message needs both at every destination).
    Agreement,
}

impl PacketClass {
    /// The class of a causal-layer message: an agreed one is data, a heartbeat is background.
    fn causal(agreed: bool) -> PacketClass {
        if agreed {
            PacketClass::Data
        } else {
            PacketClass::Heartbeat
        }
    }
}

impl Body {
    /// The opcode of this body.
    pub fn opcode(&self) -> Opcode {
        match self {
            Body::Submit { .. } => Opcode::Submit,
            Body::Ordered { .. } => Opcode::Ordered,
            Body::SeqSync { .. } => Opcode::SeqSync,
            Body::SyncAck { .. } => Opcode::SyncAck,
            Body::SubmitLost { .. } => Opcode::SubmitLost,
            Body::Nack { .. } => Opcode::Nack,
            Body::Lost { .. } => Opcode::Lost,
            Body::TokenPass { .. } => Opcode::TokenPass,
            Body::TokenAck { .. } => Opcode::TokenAck,
            Body::TokenData { .. } => Opcode::TokenData,
            Body::TokenLost { .. } => Opcode::TokenLost,
            Body::Stamped { .. } => Opcode::Stamped,
            Body::Clock { .. } => Opcode::Clock,
            Body::ClockRequest => Opcode::ClockRequest,
            Body::Propose { .. } => Opcode::Propose,
            Body::Proposal { .. } => Opcode::Proposal,
            Body::Final { .. } => Opcode::Final,
            Body::FinalRequest { .. } => Opcode::FinalRequest,
            Body::Early { .. } => Opcode::Early,
            Body::OrderBatch { .. } => Opcode::OrderBatch,
            Body::Resend { .. } => Opcode::Resend,
            Body::Causal { .. } => Opcode::Causal,
            Body::CausalNack { .. } => Opcode::CausalNack,
            Body::CausalStatus { .. } => Opcode::CausalStatus,
            Body::TotoFlush { .. } => Opcode::TotoFlush,
            Body::TotoInstall { .. } => Opcode::TotoInstall,
        }
    }

    /// True if every sequence number, index, timestamp and counter is at most
    /// [`WIRE_SEQ_MAX`]. Roles drop (and count) packets that are not.
    pub fn plausible(&self) -> bool {
        let ok = |x: &u64| *x <= WIRE_SEQ_MAX;
        let holding = |h: &Option<Holding>| h.as_ref().is_none_or(|h| ok(&h.start));
        match self {
            Body::Submit { msg_id, .. } | Body::SubmitLost { msg_id, .. } => ok(msg_id),
            Body::Ordered { gseq, rseq, .. } => ok(gseq) && ok(rseq),
            Body::SeqSync {
                rseq_next,
                gseq_last,
            } => ok(rseq_next) && ok(gseq_last),
            Body::Nack {
                seq,
                index_lo,
                index_hi,
                ..
            } => ok(seq) && ok(index_lo) && ok(index_hi),
            Body::Lost { seq, .. } => ok(seq),
            Body::SyncAck { rseq_next } => ok(rseq_next),
            Body::TokenPass { seq, pass, last } => ok(seq) && ok(pass) && holding(last),
            Body::TokenAck { pass } => ok(pass),
            Body::TokenData {
                gseq,
                holding_start,
                prev,
                ..
            }
            | Body::TokenLost {
                gseq,
                holding_start,
                prev,
                ..
            } => ok(gseq) && ok(holding_start) && holding(prev),
            Body::Stamped {
                ts, cseq, index, ..
            } => ok(ts) && ok(cseq) && ok(index),
            Body::Clock {
                ts,
                cseq_next,
                index_next,
            } => ok(ts) && ok(cseq_next) && ok(index_next),
            Body::ClockRequest => true,
            Body::Propose { msg_id, cseq, .. } => ok(msg_id) && ok(cseq),
            Body::Proposal { msg_id, ts } | Body::Final { msg_id, ts } => ok(msg_id) && ok(ts),
            Body::FinalRequest { msg_id } => ok(msg_id),
            Body::Early { msg_id, .. } => ok(msg_id),
            Body::OrderBatch { rseq, entries } => {
                ok(rseq)
                    && entries.len() <= ORDER_BATCH_LEN_MAX
                    && entries.iter().all(|e| ok(&e.gseq) && ok(&e.msg_id))
            }
            Body::Resend {
                gseq, rseq, msg_id, ..
            } => ok(gseq) && ok(rseq) && ok(msg_id),
            Body::Causal { seq, acks, .. } => {
                ok(seq) && acks.len() <= CAUSAL_ACKS_LEN_MAX && acks.iter().all(|a| ok(&a.seq))
            }
            Body::CausalNack { seq, .. } => ok(seq),
            Body::CausalStatus { delivered } => {
                delivered.len() <= CAUSAL_ACKS_LEN_MAX && delivered.iter().all(|a| ok(&a.seq))
            }
            Body::TotoFlush { epoch, crashed: v } | Body::TotoInstall { epoch, cut: v } => {
                ok(epoch) && v.len() <= CAUSAL_ACKS_LEN_MAX && v.iter().all(|a| ok(&a.seq))
            }
        }
    }

    /// The application payload, if this body carries one.
    pub fn payload(&self) -> Option<&Bytes> {
        match self {
            Body::Submit { payload, .. }
            | Body::Ordered { payload, .. }
            | Body::TokenData { payload, .. }
            | Body::Stamped { payload, .. }
            | Body::Propose { payload, .. }
            | Body::Early { payload, .. }
            | Body::Resend { payload, .. }
            | Body::Causal { payload, .. } => Some(payload),
            _ => None,
        }
    }
}

impl BasePacket {
    /// The packet's opcode.
    pub fn opcode(&self) -> Opcode {
        self.body.opcode()
    }

    /// The packet's class (for targeted loss and quiescence).
    pub fn class(&self) -> PacketClass {
        match self.body {
            Body::Submit { .. }
            | Body::Ordered { .. }
            | Body::TokenData { .. }
            | Body::Stamped { .. }
            | Body::Propose { .. }
            | Body::Early { .. }
            | Body::OrderBatch { .. }
            | Body::Resend { .. } => PacketClass::Data,
            Body::TokenPass { .. } | Body::TokenAck { .. } => PacketClass::Token,
            Body::Proposal { .. } | Body::Final { .. } => PacketClass::Agreement,
            Body::Causal { agreed, .. } => PacketClass::causal(agreed),
            Body::Clock { .. } => PacketClass::Heartbeat,
            Body::SeqSync { .. }
            | Body::SyncAck { .. }
            | Body::SubmitLost { .. }
            | Body::Nack { .. }
            | Body::Lost { .. }
            | Body::TokenLost { .. }
            | Body::ClockRequest
            | Body::FinalRequest { .. }
            | Body::CausalNack { .. }
            | Body::CausalStatus { .. }
            | Body::TotoFlush { .. }
            | Body::TotoInstall { .. } => PacketClass::Repair,
        }
    }

    /// Encoded length in bytes (header, body and payload), without lower-layer framing.
    pub fn encoded_len(&self) -> usize {
        let op = self.opcode();
        let dests = match &self.body {
            Body::Submit { dests, .. } => 4 * dests.as_slice().map_or(0, <[ProcId]>::len),
            Body::OrderBatch { entries, .. } => ORDER_ENTRY_LEN * entries.len(),
            Body::Causal { acks, .. } => CAUSAL_ACK_LEN * acks.len(),
            Body::CausalStatus { delivered } => CAUSAL_ACK_LEN * delivered.len(),
            Body::TotoFlush { crashed: v, .. } | Body::TotoInstall { cut: v, .. } => {
                CAUSAL_ACK_LEN * v.len()
            }
            _ => 0,
        };
        let payload = self.body.payload().map_or(0, Bytes::len);
        HEADER_LEN + op.fixed_len() + dests + payload
    }

    /// Bytes this packet occupies on a link, framing included (Ethernet + IP + UDP, the same
    /// [`FRAMING_LEN`] the 1Pipe packets are charged): what the simulator's serialization delay
    /// should use.
    pub fn wire_len(&self) -> usize {
        self.encoded_len() + FRAMING_LEN
    }
}

/// Encoded length of one [`OrderEntry`]: gseq, origin, msg_id.
pub const ORDER_ENTRY_LEN: usize = 8 + 4 + 8;

// Compile-time checks of the layout arithmetic.
const _: () = assert!(HEADER_LEN == 12);
const _: () = assert!(Opcode::Nack.fixed_len() == 28);
const _: () = assert!(Opcode::TokenLost.fixed_len() == 32);
const _: () = assert!(Opcode::Propose.fixed_len() == 18);
const _: () = assert!(Opcode::Final.fixed_len() == 16);
const _: () = assert!(PAYLOAD_LEN_MAX <= u16::MAX as usize);
const _: () = assert!(ORDER_BATCH_LEN_MAX <= u16::MAX as usize);
const _: () = assert!(Opcode::Resend.fixed_len() == 30);
const _: () = assert!(Opcode::Causal.fixed_len() == 16);
const _: () = assert!(CAUSAL_ACKS_LEN_MAX <= u16::MAX as usize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_len_adds_header_body_payload_and_framing() {
        let p = BasePacket {
            src: ProcId(1),
            dst: ProcId(2),
            body: Body::Stamped {
                ts: 1,
                cseq: 0,
                index: 0,
                payload: Bytes::from_static(&[0; 64]),
            },
        };
        assert_eq!(p.encoded_len(), 12 + 26 + 64);
        assert_eq!(p.wire_len(), 12 + 26 + 64 + FRAMING_LEN);
        let s = BasePacket {
            src: ProcId(1),
            dst: ProcId(9),
            body: Body::Submit {
                msg_id: 0,
                dests: Dests::list([ProcId(3), ProcId(1)]),
                payload: Bytes::new(),
            },
        };
        assert_eq!(s.encoded_len(), 12 + 14 + 8);
    }

    #[test]
    fn opcode_bytes_round_trip() {
        for b in 0..=255u8 {
            if let Some(op) = Opcode::from_u8(b) {
                assert_eq!(op as u8, b);
            }
        }
    }
}
