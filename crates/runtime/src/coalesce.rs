//! Coalescing: many packets per datagram, one pending datagram per output port.
//!
//! On this class of machine a datagram costs ~4–5 µs of kernel time whatever its size, so small
//! 1Pipe packets (36-byte data headers, 20-byte beacons, 24-byte ACKs) are packed back to back
//! into datagrams — the batching of paxos-batching-pipelining §IV-A (Fig. 6) with BSZ =
//! `datagram_len_max` and Δ_B = `flush_delay_ns`. A pending datagram is flushed:
//!
//! * **full** — when the next packet would not fit (bytes or `packets_per_datagram_max`), or
//!   less room is left than the smallest packet;
//! * **delay** — when its oldest packet has waited `flush_delay_ns` and the loop is still busy;
//! * **idle** — as soon as the loop has nothing more to do: a packet never waits for company
//!   that is not coming.
//!
//! Flushed datagrams join one FIFO send queue, so packets to one port leave in the order the
//! role emitted them (a beacon never overtakes the data it follows). The queue is bounded
//! (`send_queue_len_max`); a flush into a full queue drops the datagram and counts it.
//!
//! **GSO** (`segments_max > 1`): one send may carry several datagrams of `datagram_len_max`
//! bytes (*segments*), which the kernel cuts apart at exact multiples of that length (UDP
//! `UDP_SEGMENT`). A packet never straddles two segments — each must decode alone — so when the
//! next packet does not fit the rest of a segment, the segment is padded to its full length with
//! zero bytes ([`PADDING`], a byte no packet starts with) and the packet opens the next one; the
//! last segment is not padded. The pending buffer is flushed when no further segment fits one
//! UDP send (65,507 bytes) or `segments_max` are used.
//!
//! On receive, [`decode_datagram`] takes packets off a datagram one after another, skipping
//! padding to the end of its segment; a malformed tail is reported and the rest of the datagram
//! dropped. With UDP GRO a receive may hold several segments: the kernel gives their length, and
//! a packet must end within its segment.
//!
//! This module is pure: no sockets, no clock (time is an argument), so the policy is unit-tested
//! on its own. Buffers are recycled through a free list: the steady state allocates nothing.

use crate::config::{CoalesceConfig, PACKET_LEN_MIN, UDP_PAYLOAD_MAX};
use bytes::Bytes;
use onepipe_proto::ids::PortId;
use onepipe_proto::time::Instant;
use onepipe_proto::wire::{DecodeError, Packet};
use std::collections::VecDeque;

/// The byte GSO segments are padded with: no packet starts with it (opcodes start at 1).
pub const PADDING: u8 = 0;

/// Most emptied buffers kept for reuse; beyond it they are freed (64 KiB each at most).
const FREE_LEN_MAX: usize = 64;

/// Why a pending datagram was flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushReason {
    /// The next packet would not fit.
    Full,
    /// Its oldest packet waited `flush_delay_ns`.
    Delay,
    /// The loop had nothing more to do.
    Idle,
}

/// A flushed datagram waiting for the socket — with GSO, a send of several.
#[derive(Debug)]
pub struct Datagram {
    /// The output port it goes to.
    pub port: PortId,
    /// The encoded packets, back to back (with GSO, segments padded to `datagram_len_max`).
    pub bytes: Vec<u8>,
    /// How many packets it holds.
    pub packets: u32,
    /// How many datagrams the kernel makes of it (1 without GSO).
    pub segments: u32,
    /// Whether its segments were sealed ([`Coalescer::seal_queued`]).
    pub sealed: bool,
}

/// Counters of the coalescing layer; never reset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoalesceStats {
    /// Packets accepted into a pending datagram.
    pub packets_queued: u64,
    /// Flushes because the next packet would not fit.
    pub flushes_full: u64,
    /// Flushes because the oldest packet waited `flush_delay_ns`.
    pub flushes_delay: u64,
    /// Flushes because the loop was idle.
    pub flushes_idle: u64,
    /// Packets longer than `datagram_len_max` sent alone in a datagram of their own.
    pub packets_oversize: u64,
    /// Packets longer than a UDP datagram can be — or, with GSO, than one segment (the kernel
    /// would cut them): dropped.
    pub packets_too_large: u64,
    /// Bytes of zero padding that ended GSO segments early.
    pub padding_bytes: u64,
    /// Datagrams dropped because the send queue was full.
    pub send_queue_dropped_datagrams: u64,
    /// Packets in those datagrams.
    pub send_queue_dropped_packets: u64,
    /// Packets in datagrams dropped because they could not be sealed (no key).
    pub unsealed_dropped_packets: u64,
}

/// One output port's pending datagram.
#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    packets: u32,
    /// When the oldest packet was appended.
    oldest: Option<Instant>,
    /// Where the segment being filled starts in `bytes` (GSO; 0 without).
    segment_start: usize,
    /// Segments begun (0 while empty).
    segments: u32,
}

impl Pending {
    /// Bytes of packets in the segment being filled.
    fn used(&self, head: usize) -> usize {
        self.bytes.len() - self.segment_start - head
    }
}

/// Per-port coalescing buffers and the FIFO send queue behind them. See the module docs.
#[derive(Debug)]
pub struct Coalescer {
    cfg: CoalesceConfig,
    pending: Vec<Pending>,
    queue: VecDeque<Datagram>,
    /// Bytes in `queue`.
    queue_bytes: usize,
    /// Emptied buffers, reused for the next pending datagram.
    free: Vec<Vec<u8>>,
    stats: CoalesceStats,
}

impl Coalescer {
    /// Buffers for output ports `0..ports`.
    ///
    /// # Panics
    /// If `cfg` fails [`CoalesceConfig::check`] (a programming error of the caller).
    pub fn new(cfg: CoalesceConfig, ports: usize) -> Coalescer {
        if let Err(e) = cfg.check() {
            panic!("{e}");
        }
        Coalescer {
            pending: (0..ports)
                .map(|_| Pending {
                    bytes: Vec::with_capacity(cfg.datagram_len_max),
                    ..Pending::default()
                })
                .collect(),
            queue: VecDeque::with_capacity(cfg.send_queue_len_max.min(1_024)),
            queue_bytes: 0,
            free: Vec::new(),
            stats: CoalesceStats::default(),
            cfg,
        }
    }

    /// The policy.
    pub fn config(&self) -> &CoalesceConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &CoalesceStats {
        &self.stats
    }

    /// Number of output ports.
    pub fn ports(&self) -> usize {
        self.pending.len()
    }

    /// Appends `packet` to output `port`'s pending datagram at local time `now`, flushing that
    /// datagram first if the packet would not fit, and after if nothing more could fit. With
    /// GSO, a packet that does not fit the rest of a segment opens the next one instead, the
    /// segment padded to its full length.
    ///
    /// # Panics
    /// If `port` is not below [`Coalescer::ports`]: the driver checks ports against its table.
    pub fn push(&mut self, now: Instant, port: PortId, packet: &Packet) {
        assert!(port.index() < self.pending.len(), "unknown output {port}");
        let len = packet.encoded_len();
        self.stats.packets_queued += 1;
        let room = self.cfg.packet_room();
        let head = self.cfg.segment_head_len;
        if len > room {
            self.push_oversize(port, packet, len);
            return;
        }
        let p = &self.pending[port.index()];
        if p.packets > 0 && p.used(head) + len > room {
            if self.segment_fits(p, len) {
                self.next_segment(port);
            } else {
                self.flush_port(port, FlushReason::Full);
            }
        }
        let p = &mut self.pending[port.index()];
        if p.oldest.is_none() {
            debug_assert!(p.bytes.is_empty());
            p.oldest = Some(now);
            p.segments = 1;
            p.bytes.resize(head, 0);
        }
        let before = p.bytes.len();
        packet.encode(&mut p.bytes);
        debug_assert_eq!(
            p.bytes.len() - before,
            len,
            "encoded_len agrees with encode"
        );
        p.packets += 1;
        let p = &self.pending[port.index()];
        let left = room - p.used(head);
        let full = p.packets as usize >= self.cfg.packets_per_datagram_max
            || (left < PACKET_LEN_MIN && !self.segment_fits(p, PACKET_LEN_MIN));
        if full {
            self.flush_port(port, FlushReason::Full);
        }
    }

    /// Ends the segment being filled (padding to its packet room, then room for the tail) and
    /// opens the next one (room for the head).
    fn next_segment(&mut self, port: PortId) {
        let (seg_len, head, tail) = (
            self.cfg.datagram_len_max,
            self.cfg.segment_head_len,
            self.cfg.segment_tail_len,
        );
        let p = &mut self.pending[port.index()];
        let end = p.segment_start + seg_len - tail;
        let padding = end - p.bytes.len();
        p.bytes.resize(end, PADDING);
        p.bytes.resize(end + tail, 0);
        p.segment_start = p.bytes.len();
        p.segments += 1;
        p.bytes.resize(p.segment_start + head, 0);
        self.stats.padding_bytes += padding as u64;
    }

    /// Whether, after padding the segment being filled, a packet of `len` bytes fits a new
    /// segment of the same send (GSO).
    fn segment_fits(&self, p: &Pending, len: usize) -> bool {
        let framing = self.cfg.segment_head_len + self.cfg.segment_tail_len;
        (p.segments as usize) < self.cfg.segments_max
            && p.segment_start + self.cfg.datagram_len_max + framing + len <= UDP_PAYLOAD_MAX
    }

    /// Fig. 6 lets a request larger than BSZ form a batch of its own: flush what is pending
    /// (order), then send the packet alone — unless no UDP datagram can hold it.
    fn push_oversize(&mut self, port: PortId, packet: &Packet, len: usize) {
        let (head, tail) = (self.cfg.segment_head_len, self.cfg.segment_tail_len);
        // With GSO the socket cuts every longer send into segments: such a packet cannot go.
        if head + len + tail > UDP_PAYLOAD_MAX || self.cfg.segments_max > 1 {
            self.stats.packets_too_large += 1;
            return;
        }
        self.stats.packets_oversize += 1;
        if self.pending[port.index()].packets > 0 {
            self.flush_port(port, FlushReason::Full);
        }
        let mut bytes = self.free.pop().unwrap_or_default();
        debug_assert!(bytes.is_empty());
        bytes.resize(head, 0);
        packet.encode(&mut bytes);
        bytes.resize(bytes.len() + tail, 0);
        self.enqueue(Datagram {
            port,
            bytes,
            packets: 1,
            segments: 1,
            sealed: false,
        });
    }

    /// Flushes every pending datagram whose oldest packet has waited `flush_delay_ns` by `now`.
    pub fn flush_due(&mut self, now: Instant) {
        let delay = self.cfg.flush_delay_ns;
        for i in 0..self.pending.len() {
            if self.pending[i]
                .oldest
                .is_some_and(|t| now.saturating_since(t) >= delay)
            {
                self.flush_port(PortId(i as u32), FlushReason::Delay);
            }
        }
    }

    /// Flushes every pending datagram: the loop is idle.
    pub fn flush_idle(&mut self) {
        for i in 0..self.pending.len() {
            if self.pending[i].packets > 0 {
                self.flush_port(PortId(i as u32), FlushReason::Idle);
            }
        }
    }

    /// The earliest instant a pending datagram is due for a delay flush.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending
            .iter()
            .filter_map(|p| p.oldest)
            .min()
            .map(|t| t + self.cfg.flush_delay_ns)
    }

    /// Packets waiting in pending (unflushed) datagrams.
    pub fn pending_packets(&self) -> usize {
        self.pending.iter().map(|p| p.packets as usize).sum()
    }

    /// The send queue: flushed datagrams, oldest first.
    pub fn queue(&self) -> &VecDeque<Datagram> {
        &self.queue
    }

    /// Seals every datagram queued since the last call, segment by segment (each
    /// `datagram_len_max` bytes but the last; a datagram of one segment is sealed whole): `seal(port, segment)` fills the segment's head
    /// and tail. A datagram with a segment `seal` refuses (no key) is dropped and counted.
    pub fn seal_queued(&mut self, mut seal: impl FnMut(PortId, &mut [u8]) -> bool) {
        let seg_len = self.cfg.datagram_len_max;
        let mut refused = false;
        // In queue order (the order they leave in), so counters grow along the link: the
        // receiver's replay window sees them in order.
        let unsealed = self.queue.iter().rev().take_while(|d| !d.sealed).count();
        let from = self.queue.len() - unsealed;
        for d in self.queue.range_mut(from..) {
            // An oversize packet's datagram (no GSO) is one segment longer than `seg_len`.
            let chunk = if d.segments == 1 {
                d.bytes.len()
            } else {
                seg_len
            };
            d.sealed = d.bytes.chunks_mut(chunk).all(|seg| seal(d.port, seg));
            refused |= !d.sealed;
        }
        if refused {
            for d in self.queue.iter().filter(|d| !d.sealed) {
                self.stats.unsealed_dropped_packets += u64::from(d.packets);
                self.queue_bytes -= d.bytes.len();
            }
            self.queue.retain(|d| d.sealed);
        }
    }

    /// Removes the `n` oldest datagrams from the send queue (they were sent, or failed for
    /// good) and recycles their buffers.
    ///
    /// # Panics
    /// If the queue holds fewer than `n`.
    pub fn pop_sent(&mut self, n: usize) {
        assert!(n <= self.queue.len(), "popping more than was queued");
        for _ in 0..n {
            let d = self.queue.pop_front().expect("length checked");
            self.queue_bytes -= d.bytes.len();
            self.recycle(d.bytes);
        }
    }

    /// Keeps an emptied buffer for the next pending datagram, up to [`FREE_LEN_MAX`].
    fn recycle(&mut self, mut bytes: Vec<u8>) {
        if self.free.len() >= FREE_LEN_MAX {
            return;
        }
        bytes.clear();
        if bytes.capacity() < self.cfg.datagram_len_max {
            bytes.reserve_exact(self.cfg.datagram_len_max);
        }
        self.free.push(bytes);
    }

    fn flush_port(&mut self, port: PortId, reason: FlushReason) {
        let fresh = self
            .free
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.cfg.datagram_len_max));
        let tail = self.cfg.segment_tail_len;
        let p = &mut self.pending[port.index()];
        debug_assert!(p.packets > 0 && !p.bytes.is_empty());
        p.bytes.resize(p.bytes.len() + tail, 0);
        let bytes = core::mem::replace(&mut p.bytes, fresh);
        let packets = core::mem::take(&mut p.packets);
        let segments = core::mem::take(&mut p.segments);
        p.segment_start = 0;
        p.oldest = None;
        match reason {
            FlushReason::Full => self.stats.flushes_full += 1,
            FlushReason::Delay => self.stats.flushes_delay += 1,
            FlushReason::Idle => self.stats.flushes_idle += 1,
        }
        debug_assert!(segments >= 1 && bytes.len() <= self.cfg.send_len_max());
        self.enqueue(Datagram {
            port,
            bytes,
            packets,
            segments,
            sealed: false,
        });
    }

    fn enqueue(&mut self, d: Datagram) {
        if self.queue.len() >= self.cfg.send_queue_len_max
            || self.queue_bytes + d.bytes.len() > self.cfg.send_queue_bytes_max
        {
            self.stats.send_queue_dropped_datagrams += u64::from(d.segments);
            self.stats.send_queue_dropped_packets += u64::from(d.packets);
            self.recycle(d.bytes);
            return;
        }
        self.queue_bytes += d.bytes.len();
        self.queue.push_back(d);
        debug_assert!(self.free.len() <= FREE_LEN_MAX);
    }
}

/// Why [`decode_datagram`] stopped before the end of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FramingError {
    /// The datagram held no packet (empty, or padding only).
    Empty,
    /// A malformed packet.
    Packet(DecodeError),
    /// Padding (a zero byte where a packet would start) followed by something other than zero
    /// bytes up to the end of its segment.
    Padding {
        /// Where the padding started.
        at: usize,
    },
}

impl From<DecodeError> for FramingError {
    fn from(e: DecodeError) -> FramingError {
        FramingError::Packet(e)
    }
}

/// What [`decode_datagram`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatagramDecode {
    /// Packets decoded (and handed over) before the end or the first error.
    pub packets: usize,
    /// Why decoding stopped early, if it did: the rest of the datagram was dropped.
    pub error: Option<FramingError>,
}

/// Decodes the packets of one received buffer, front to back, into `out`. `segment_len` is the
/// length of the datagrams it holds (a GRO receive holds several, each `segment_len` bytes but
/// the last); 0 or anything at least the buffer's length means one datagram. A zero byte where
/// a packet would start is padding to the end of its segment; a packet must end within its
/// segment. Data payloads are zero-copy slices of `datagram`. Stops at the first malformed
/// packet: what follows it cannot be framed.
pub fn decode_datagram(
    datagram: &Bytes,
    segment_len: usize,
    out: &mut Vec<Packet>,
) -> DatagramDecode {
    let len = datagram.len();
    let seg = if segment_len == 0 {
        len.max(1)
    } else {
        segment_len
    };
    let mut at = 0;
    let mut packets = 0;
    let stop = |packets, error| DatagramDecode {
        packets,
        error: Some(error),
    };
    while at < len {
        let segment_end = ((at / seg + 1) * seg).min(len);
        if datagram[at] == PADDING {
            if datagram[at..segment_end].iter().any(|&b| b != PADDING) {
                return stop(packets, FramingError::Padding { at });
            }
            at = segment_end;
            continue;
        }
        match Packet::decode_bytes(&datagram.slice(at..segment_end)) {
            Ok((packet, used)) => {
                debug_assert!(used > 0 && at + used <= segment_end);
                out.push(packet);
                packets += 1;
                at += used;
            }
            Err(e) => return stop(packets, e.into()),
        }
    }
    if packets == 0 {
        return stop(0, FramingError::Empty);
    }
    DatagramDecode {
        packets,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onepipe_proto::ids::{NodeId, ProcId, Psn};
    use onepipe_proto::time::Timestamp;
    use onepipe_proto::wire::{flags, Beacon, DataHeader, DataPacket, BEACON_LEN, DATA_HEADER_LEN};

    fn beacon(b: u64) -> Packet {
        Packet::Beacon(Beacon {
            from: NodeId(7),
            barrier: Timestamp::new(b),
            commit: Timestamp::new(b),
            demand: false,
        })
    }

    fn data(ts: u64, payload_len: usize) -> Packet {
        Packet::Data(DataPacket {
            header: DataHeader {
                flags: flags::END_OF_MESSAGE,
                frag: 0,
                ts: Timestamp::new(ts),
                barrier: Timestamp::new(ts),
                commit: Timestamp::new(ts),
                psn: Psn(ts as u32),
                src: ProcId(1),
                dst: ProcId(2),
            },
            payload: Bytes::from(vec![ts as u8; payload_len]),
        })
    }

    fn cfg(datagram_len_max: usize) -> CoalesceConfig {
        CoalesceConfig {
            datagram_len_max,
            ..CoalesceConfig::default()
        }
    }

    /// Every packet in the send queue, decoded, with the port it goes to.
    fn sent(c: &Coalescer) -> Vec<(PortId, Packet)> {
        let mut out = Vec::new();
        for d in c.queue() {
            let mut ps = Vec::new();
            // As a GRO receive hands it over: with its segment length if it has several.
            let seg = if d.segments > 1 {
                c.config().datagram_len_max
            } else {
                0
            };
            let r = decode_datagram(&Bytes::copy_from_slice(&d.bytes), seg, &mut ps);
            assert_eq!(r.error, None);
            assert_eq!(r.packets, d.packets as usize);
            out.extend(ps.into_iter().map(|p| (d.port, p)));
        }
        out
    }

    /// With room for the auth header and tag, every segment of every datagram leaves with a
    /// head and a tail and its packets between; sealing goes segment by segment in the order
    /// they leave, so a link's counters grow in the order its datagrams are sent (a receiver's
    /// replay window sees them in order).
    #[test]
    fn sealed_segments_hold_head_packets_tail_and_are_sealed_in_send_order() {
        use crate::auth::{HEADER_LEN, TAG_LEN};
        let (head, tail) = (HEADER_LEN, TAG_LEN);
        // 1,472-byte segments (what GSO needs at least): two 636-byte packets fit, three do not.
        let seg = 1_472;
        assert!(2 * (DATA_HEADER_LEN + 600) <= seg - head - tail);
        assert!(3 * (DATA_HEADER_LEN + 600) > seg - head - tail);
        let mut c = Coalescer::new(
            CoalesceConfig {
                segments_max: 3,
                ..cfg(seg)
            }
            .sealed(),
            2,
        );
        // Seven packets to port 0 (two per segment, three segments per send: a send of 6 and
        // one of 1), one to port 1, flushed in between.
        for i in 0..7 {
            c.push(Instant(i), PortId(0), &data(i, 600));
        }
        c.push(Instant(7), PortId(1), &data(7, 600));
        c.flush_idle();
        let mut order = Vec::new();
        c.seal_queued(|port, segment| {
            assert!(segment.len() <= seg && segment.len() > head + tail);
            // The first packet's timestamp byte names the segment.
            let first = Packet::decode(&segment[head..]).unwrap().0;
            let Packet::Data(d) = first else { panic!() };
            order.push((port, d.header.ts.raw()));
            let len = segment.len();
            segment[..head].fill(0xAB);
            segment[len - tail..].fill(0xCD);
            true
        });
        let zero = PortId(0);
        assert_eq!(
            order,
            vec![(zero, 0), (zero, 2), (zero, 4), (zero, 6), (PortId(1), 7)]
        );
        // Every segment but a send's last is exactly `seg` long, framed by what sealing wrote.
        for d in c.queue() {
            for (k, segment) in d.bytes.chunks(seg).enumerate() {
                assert_eq!(&segment[..head], &[0xAB; HEADER_LEN][..]);
                assert_eq!(&segment[segment.len() - tail..], &[0xCD; TAG_LEN][..]);
                assert!(k + 1 == d.segments as usize || segment.len() == seg);
            }
        }
        // Sealed once: a second call seals nothing.
        c.seal_queued(|_, _| panic!("sealed again"));
    }

    #[test]
    fn packets_wait_until_the_next_would_not_fit_iv_a() {
        // Three 40-byte data packets fit in 140 bytes, leaving room for a beacon but not for a
        // fourth data packet.
        let mut c = Coalescer::new(cfg(3 * (DATA_HEADER_LEN + 4) + BEACON_LEN), 1);
        for i in 0..3 {
            c.push(Instant(i), PortId(0), &data(i, 4));
        }
        assert!(c.queue().is_empty(), "three fit; nothing flushed yet");
        c.push(Instant(3), PortId(0), &data(3, 4));
        assert_eq!(c.queue().len(), 1);
        assert_eq!(c.queue()[0].packets, 3);
        assert_eq!(c.stats().flushes_full, 1);
        assert_eq!(c.pending_packets(), 1);
    }

    #[test]
    fn a_datagram_with_no_room_for_the_smallest_packet_goes_at_once() {
        let mut c = Coalescer::new(cfg(2 * BEACON_LEN + 5), 1);
        c.push(Instant(0), PortId(0), &beacon(0));
        assert!(c.queue().is_empty());
        c.push(Instant(0), PortId(0), &beacon(1));
        assert_eq!(
            c.queue().len(),
            1,
            "5 bytes left: nothing fits, flushed as full"
        );
        assert_eq!(c.stats().flushes_full, 1);
        assert_eq!(c.pending_packets(), 0);
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn the_oldest_packet_waits_at_most_the_flush_delay_iv_a() {
        let mut c = Coalescer::new(
            CoalesceConfig {
                flush_delay_ns: 1_000,
                ..CoalesceConfig::default()
            },
            2,
        );
        c.push(Instant(100), PortId(0), &beacon(1));
        c.push(Instant(600), PortId(0), &beacon(2));
        c.push(Instant(700), PortId(1), &beacon(3));
        assert_eq!(c.next_deadline(), Some(Instant(1_100)), "oldest packet + Δ");
        c.flush_due(Instant(1_099));
        assert!(c.queue().is_empty());
        c.flush_due(Instant(1_100));
        assert_eq!(c.queue().len(), 1, "only port 0's oldest packet is due");
        assert_eq!(c.queue()[0].packets, 2);
        assert_eq!(c.next_deadline(), Some(Instant(1_700)));
        c.flush_due(Instant(5_000));
        assert_eq!(c.stats().flushes_delay, 2);
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn an_idle_loop_flushes_everything_at_once() {
        let mut c = Coalescer::new(CoalesceConfig::default(), 3);
        c.push(Instant(0), PortId(0), &beacon(1));
        c.push(Instant(0), PortId(2), &beacon(2));
        c.push(Instant(0), PortId(2), &data(3, 10));
        c.flush_idle();
        assert_eq!(c.stats().flushes_idle, 2, "one per non-empty port");
        assert_eq!(
            sent(&c),
            vec![
                (PortId(0), beacon(1)),
                (PortId(2), beacon(2)),
                (PortId(2), data(3, 10)),
            ]
        );
        c.flush_idle();
        assert_eq!(
            c.stats().flushes_idle,
            2,
            "nothing pending: no empty datagrams"
        );
    }

    #[test]
    fn coalescing_off_sends_one_packet_per_datagram() {
        let mut c = Coalescer::new(CoalesceConfig::default().uncoalesced(), 1);
        for i in 0..5 {
            c.push(Instant(0), PortId(0), &beacon(i));
        }
        assert_eq!(c.queue().len(), 5);
        assert!(c.queue().iter().all(|d| d.packets == 1));
    }

    #[test]
    fn per_port_order_is_kept_across_flushes_and_oversize_packets() {
        let mut c = Coalescer::new(cfg(100), 2);
        let mut expect = Vec::new();
        for i in 0..40u64 {
            let port = PortId((i % 2) as u32);
            // Every seventh packet is larger than a datagram: it goes alone, after what is
            // pending on its port.
            let p = if i % 7 == 0 {
                data(i, 200)
            } else {
                data(i, (i % 20) as usize)
            };
            c.push(Instant(i), port, &p);
            expect.push((port, p));
        }
        c.flush_idle();
        let got = sent(&c);
        for port in [PortId(0), PortId(1)] {
            let e: Vec<_> = expect.iter().filter(|(p, _)| *p == port).collect();
            let g: Vec<_> = got.iter().filter(|(p, _)| *p == port).collect();
            assert_eq!(e, g, "order on {port}");
        }
        assert_eq!(c.stats().packets_oversize, 6);
        assert!(c
            .queue()
            .iter()
            .all(|d| d.bytes.len() <= 100 || d.packets == 1));
    }

    #[test]
    fn a_packet_no_datagram_can_hold_is_dropped_and_counted() {
        let mut c = Coalescer::new(CoalesceConfig::default(), 1);
        c.push(Instant(0), PortId(0), &data(1, UDP_PAYLOAD_MAX));
        assert_eq!(c.stats().packets_too_large, 1);
        assert!(c.queue().is_empty());
        c.push(
            Instant(0),
            PortId(0),
            &data(1, UDP_PAYLOAD_MAX - DATA_HEADER_LEN),
        );
        assert_eq!(c.queue().len(), 1, "exactly the UDP maximum still goes");
    }

    #[test]
    fn a_full_send_queue_drops_and_counts_new_datagrams() {
        let mut c = Coalescer::new(
            CoalesceConfig {
                send_queue_len_max: 2,
                ..CoalesceConfig::default().uncoalesced()
            },
            1,
        );
        for i in 0..5 {
            c.push(Instant(0), PortId(0), &beacon(i));
        }
        assert_eq!(c.queue().len(), 2);
        assert_eq!(c.stats().send_queue_dropped_datagrams, 3);
        assert_eq!(c.stats().send_queue_dropped_packets, 3);
        assert_eq!(
            sent(&c),
            vec![(PortId(0), beacon(0)), (PortId(0), beacon(1))]
        );
        c.pop_sent(2);
        c.push(Instant(0), PortId(0), &beacon(9));
        assert_eq!(
            sent(&c),
            vec![(PortId(0), beacon(9))],
            "room again after sending"
        );
    }

    #[test]
    fn buffers_are_recycled_in_the_steady_state() {
        let mut c = Coalescer::new(cfg(200), 1);
        for round in 0..10 {
            for i in 0..30 {
                c.push(Instant(round), PortId(0), &beacon(i));
            }
            c.flush_idle();
            let n = c.queue().len();
            c.pop_sent(n);
        }
        assert!(c.free.len() <= 4, "free list stays small: {}", c.free.len());
    }

    #[test]
    fn a_malformed_tail_keeps_the_packets_before_it() {
        let mut bytes = Vec::new();
        beacon(1).encode(&mut bytes);
        data(2, 5).encode(&mut bytes);
        bytes.extend_from_slice(&[0xEE, 1, 2, 3]);
        beacon(3).encode(&mut bytes);
        let mut out = Vec::new();
        let r = decode_datagram(&Bytes::from(bytes), 0, &mut out);
        assert_eq!(r.packets, 2);
        assert_eq!(
            r.error,
            Some(FramingError::Packet(DecodeError::UnknownOpcode(0xEE)))
        );
        assert_eq!(out, vec![beacon(1), data(2, 5)]);
    }

    #[test]
    fn a_truncated_last_packet_is_an_error_not_a_panic() {
        let mut bytes = Vec::new();
        data(1, 50).encode(&mut bytes);
        data(2, 50).encode(&mut bytes);
        bytes.truncate(bytes.len() - 10);
        let mut out = Vec::new();
        let r = decode_datagram(&Bytes::from(bytes), 0, &mut out);
        assert_eq!(r.packets, 1);
        assert!(matches!(
            r.error,
            Some(FramingError::Packet(DecodeError::Truncated { .. }))
        ));
        let r = decode_datagram(&Bytes::new(), 0, &mut out);
        assert_eq!(r.error, Some(FramingError::Empty));
    }

    fn gso(datagram_len_max: usize, segments_max: usize) -> CoalesceConfig {
        CoalesceConfig {
            datagram_len_max,
            segments_max,
            ..CoalesceConfig::default()
        }
    }

    /// GSO: packets that do not fit the rest of a segment open the next one, the segment
    /// padded to its full length, so the kernel's cuts at multiples of `datagram_len_max` fall
    /// between packets; the last segment is not padded.
    #[test]
    fn gso_segments_are_padded_so_every_cut_falls_between_packets() {
        let seg = 1_500;
        let mut c = Coalescer::new(gso(seg, 8), 1);
        let mut expect = Vec::new();
        // 1,000-byte packets: one per segment, 500 bytes of padding after each but the last.
        for i in 0..5 {
            let p = data(i, 1_000 - DATA_HEADER_LEN);
            c.push(Instant(0), PortId(0), &p);
            expect.push((PortId(0), p));
        }
        assert!(c.queue().is_empty(), "five of eight segments used");
        c.flush_idle();
        let d = &c.queue()[0];
        assert_eq!((d.packets, d.segments), (5, 5));
        assert_eq!(d.bytes.len(), 4 * seg + 1_000);
        assert_eq!(c.stats().padding_bytes, 4 * 500);
        for k in 1..5 {
            assert_eq!(d.bytes[k * seg - 500..k * seg], [PADDING; 500]);
        }
        assert_eq!(sent(&c), expect, "decoded as GRO would hand it over");
        // Each segment alone (no GRO: the kernel delivers them one by one) decodes too.
        let mut one_by_one = Vec::new();
        for chunk in d.bytes.chunks(seg) {
            let r = decode_datagram(&Bytes::copy_from_slice(chunk), 0, &mut one_by_one);
            assert_eq!((r.packets, r.error), (1, None));
        }
        assert_eq!(one_by_one.len(), 5);
    }

    #[test]
    fn a_gso_send_is_flushed_when_no_further_segment_fits() {
        // Eight segments at most: the ninth packet flushes the first eight.
        let mut c = Coalescer::new(gso(1_500, 8), 1);
        for i in 0..9 {
            c.push(Instant(0), PortId(0), &data(i, 1_000));
        }
        assert_eq!(c.queue().len(), 1);
        assert_eq!(c.queue()[0].segments, 8);
        assert_eq!(c.stats().flushes_full, 1);
        // 9,000-byte segments: seven fit one UDP send (65,507 bytes), an eighth does not.
        let mut c = Coalescer::new(gso(9_000, 64), 1);
        for i in 0..8 {
            c.push(Instant(0), PortId(0), &data(i, 8_000));
        }
        assert_eq!(c.queue().len(), 1);
        assert_eq!(c.queue()[0].segments, 7);
        assert!(c.queue()[0].bytes.len() <= UDP_PAYLOAD_MAX);
    }

    #[test]
    fn with_gso_a_packet_longer_than_a_segment_is_dropped_not_cut() {
        let mut c = Coalescer::new(gso(1_500, 8), 1);
        c.push(Instant(0), PortId(0), &data(1, 2_000));
        assert_eq!(c.stats().packets_too_large, 1);
        c.flush_idle();
        assert!(c.queue().is_empty());
    }

    #[test]
    fn padding_is_no_opcode() {
        assert_eq!(onepipe_proto::wire::Opcode::from_u8(PADDING), None);
    }

    #[test]
    fn padding_that_is_not_zero_to_its_segment_end_is_malformed() {
        let mut bytes = Vec::new();
        beacon(1).encode(&mut bytes);
        bytes.resize(50, PADDING);
        beacon(2).encode(&mut bytes);
        let mut out = Vec::new();
        let r = decode_datagram(&Bytes::from(bytes.clone()), 50, &mut out);
        assert_eq!(
            (r.packets, r.error),
            (2, None),
            "padding to the segment end"
        );
        out.clear();
        let r = decode_datagram(&Bytes::from(bytes), 0, &mut out);
        assert_eq!(r.packets, 1, "one datagram: the padding runs to its end");
        assert_eq!(r.error, Some(FramingError::Padding { at: BEACON_LEN }));
        let r = decode_datagram(&Bytes::from(vec![PADDING; 40]), 0, &mut out);
        assert_eq!(r.error, Some(FramingError::Empty), "padding only");
    }

    #[test]
    fn a_packet_that_would_straddle_a_segment_boundary_is_malformed() {
        let mut bytes = Vec::new();
        data(1, 10).encode(&mut bytes);
        data(2, 10).encode(&mut bytes);
        let mut out = Vec::new();
        let r = decode_datagram(&Bytes::from(bytes), DATA_HEADER_LEN + 20, &mut out);
        assert_eq!(r.packets, 1);
        assert!(matches!(
            r.error,
            Some(FramingError::Packet(DecodeError::Truncated { .. }))
        ));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small deterministic fuzz: xorshift bytes, some starting with valid opcodes.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut out = Vec::new();
        for _ in 0..2_000 {
            let mut v = Vec::new();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 120) as usize;
            for i in 0..len {
                v.push((x >> (i % 56)) as u8 ^ i as u8);
            }
            if let Some(b) = v.first_mut() {
                *b = (*b % 6).max(1);
            }
            out.clear();
            let seg = (x % 3) as usize * 40;
            let r = decode_datagram(&Bytes::from(v), seg, &mut out);
            assert_eq!(r.packets, out.len());
        }
    }
}
