//! The baseline endpoint role: the same wire format, ports and transport as the 1Pipe host, with
//! ordering switched off.
//!
//! [`UnorderedHost`] stamps and fragments messages exactly like `onepipe_proto::host::Host`
//! (one timestamp per scattering, PSNs per destination, one data packet per datagram-sized
//! fragment, through the same aggregators) but keeps no barrier: it sends no beacons, and
//! delivers a message the moment its last fragment arrives. It is what `onepipe up
//! --unordered` runs, so that the difference between the two runs is the price of ordering —
//! beacons, the reorder buffer and the wait for the barrier — and nothing else of the
//! transport.
//!
//! Plain messages ([`UnorderedHost::send_plain`]) are flagged as the host role flags them
//! (`flags::PLAIN`) and come out as `HostEvent::DeliverPlain`, so that an application reads them
//! from the same place (`Endpoint::plain`) whether or not the cluster orders; here every message
//! is delivered on arrival, so the flag changes nothing else.
//!
//! What it is not: a service. It has no acknowledgements, so it reports no losses, and no
//! reliable mode.

use bytes::{Bytes, BytesMut};
use onepipe_proto::host::{Delivery, HostEvent, HostStats, SendError, UPLINK};
use onepipe_proto::ids::{ProcId, Psn};
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::{Instant, Timestamp};
use onepipe_proto::wire::{flags, DataHeader, DataPacket, Packet};
use std::collections::{BTreeMap, VecDeque};

/// Most partially reassembled messages held at once; the oldest is dropped beyond it.
pub const PARTIALS_MAX: usize = 4096;

/// Largest message, as the host role's default.
pub const MESSAGE_LEN_MAX: usize = 1 << 20;

/// One message some of whose fragments have arrived.
#[derive(Debug)]
struct Partial {
    ts: Timestamp,
    plain: bool,
    parts: BTreeMap<u16, Bytes>,
    last: Option<u16>,
}

/// An endpoint that delivers on arrival. See the module docs.
#[derive(Debug)]
pub struct UnorderedHost {
    proc: ProcId,
    senders_max: u32,
    mtu_payload: usize,
    next_psn: Vec<Psn>,
    clock_ts: Timestamp,
    partials: BTreeMap<(ProcId, Psn), Partial>,
    outputs: VecDeque<Output<Packet, HostEvent>>,
    stats: HostStats,
    /// Messages the application has room for ([`UnorderedHost::set_room`]).
    room: usize,
    /// Plain messages the application has room for ([`UnorderedHost::set_plain_room`]).
    plain_room: usize,
}

impl UnorderedHost {
    /// An endpoint for process `proc` of `senders_max`, with fragments of at most `mtu_payload`
    /// bytes, at local time `now`.
    ///
    /// # Panics
    /// `proc` outside `senders_max`, or a zero MTU: configuration bugs of the caller.
    pub fn new(proc: ProcId, senders_max: u32, mtu_payload: usize, now: Instant) -> UnorderedHost {
        assert!(proc.0 < senders_max, "process {proc} outside senders_max");
        assert!(mtu_payload > 0);
        UnorderedHost {
            proc,
            senders_max,
            mtu_payload,
            next_psn: vec![Psn(0); senders_max as usize],
            clock_ts: now.timestamp(),
            partials: BTreeMap::new(),
            outputs: VecDeque::new(),
            stats: HostStats::default(),
            room: usize::MAX,
            plain_room: usize::MAX,
        }
    }

    /// The application has room for `room` more messages (`usize::MAX`, the default: no
    /// bound); out of room, arrivals are dropped and counted in `dropped_full` (the baseline
    /// tells no sender: it has no loss reports), as `Host::set_room` refuses them.
    pub fn set_room(&mut self, room: usize) {
        self.room = room;
    }

    /// The room left ([`UnorderedHost::set_room`]).
    pub fn room(&self) -> usize {
        self.room
    }

    /// [`UnorderedHost::set_room`] for plain messages ([`UnorderedHost::send_plain`]).
    pub fn set_plain_room(&mut self, room: usize) {
        self.plain_room = room;
    }

    /// The plain room left ([`UnorderedHost::set_plain_room`]).
    pub fn plain_room(&self) -> usize {
        self.plain_room
    }

    /// Counters (the ordering ones stay zero).
    pub fn stats(&self) -> &HostStats {
        &self.stats
    }

    /// The endpoint's timestamp at local time `now`: never below one issued before.
    pub fn timestamp(&mut self, now: Instant) -> Timestamp {
        self.clock_ts = self.clock_ts.max_wrapping(now.timestamp());
        self.clock_ts
    }

    /// Sends a scattering from `src` (which must be this endpoint's process), one timestamp for
    /// all of it, as the host role does. A message to itself is delivered at once.
    ///
    /// # Errors
    /// As `Host::send`: not the local process, empty, an unknown destination, too large.
    pub fn send(
        &mut self,
        now: Instant,
        src: ProcId,
        scattering: &[(ProcId, Bytes)],
    ) -> Result<Timestamp, SendError> {
        self.send_flagged(now, src, scattering, false)
    }

    /// Sends a scattering of plain messages (`Host::send_plain`): as [`UnorderedHost::send`],
    /// flagged `PLAIN`, and delivered by the receiver as plain.
    ///
    /// # Errors
    /// As [`UnorderedHost::send`].
    pub fn send_plain(
        &mut self,
        now: Instant,
        src: ProcId,
        scattering: &[(ProcId, Bytes)],
    ) -> Result<Timestamp, SendError> {
        self.send_flagged(now, src, scattering, true)
    }

    fn send_flagged(
        &mut self,
        now: Instant,
        src: ProcId,
        scattering: &[(ProcId, Bytes)],
        plain: bool,
    ) -> Result<Timestamp, SendError> {
        if src != self.proc {
            return Err(SendError::NotLocal(src));
        }
        if scattering.is_empty() {
            return Err(SendError::Empty);
        }
        for (dst, msg) in scattering {
            if dst.0 >= self.senders_max {
                return Err(SendError::UnknownDestination(*dst));
            }
            if msg.len() > MESSAGE_LEN_MAX {
                return Err(SendError::TooLarge {
                    len: msg.len(),
                    max: MESSAGE_LEN_MAX,
                });
            }
        }
        let ts = self.timestamp(now);
        let service = if plain { flags::PLAIN } else { 0 };
        for (dst, msg) in scattering {
            match plain {
                true => self.stats.plain_sent += 1,
                false => self.stats.messages_sent += 1,
            }
            let first = self.next_psn[dst.index()];
            if *dst == self.proc {
                self.deliver(now, src, first, ts, msg.clone(), plain);
                self.next_psn[dst.index()] = first.next();
                continue;
            }
            let frags = msg.len().div_ceil(self.mtu_payload).max(1);
            for i in 0..frags {
                let lo = i * self.mtu_payload;
                let hi = (lo + self.mtu_payload).min(msg.len());
                let last = i + 1 == frags;
                let header = DataHeader {
                    flags: service | if last { flags::END_OF_MESSAGE } else { 0 },
                    frag: i as u16,
                    ts,
                    barrier: ts,
                    commit: ts,
                    psn: Psn(first.0.wrapping_add(i as u32)),
                    src,
                    dst: *dst,
                };
                self.stats.packets_sent += 1;
                self.outputs.push_back(Output::Send {
                    port: UPLINK,
                    packet: Packet::Data(DataPacket {
                        header,
                        payload: msg.slice(lo..hi),
                    }),
                });
            }
            self.next_psn[dst.index()] = Psn(first.0.wrapping_add(frags as u32));
        }
        Ok(ts)
    }

    fn deliver(
        &mut self,
        now: Instant,
        src: ProcId,
        psn: Psn,
        ts: Timestamp,
        payload: Bytes,
        plain: bool,
    ) {
        let room = match plain {
            true => &mut self.plain_room,
            false => &mut self.room,
        };
        if *room == 0 {
            self.stats.dropped_full += 1;
            return;
        }
        if *room != usize::MAX {
            *room -= 1;
        }
        let now_ts = self.timestamp(now);
        let d = Delivery {
            dst: self.proc,
            src,
            ts,
            psn,
            payload,
            barrier: now_ts.max_wrapping(ts.plus(1)),
            reliable: false,
            arrived: now,
            now_ts: now_ts.max_wrapping(ts.plus(1)),
        };
        let e = match plain {
            true => {
                self.stats.delivered_plain += 1;
                HostEvent::DeliverPlain(d)
            }
            false => {
                self.stats.delivered += 1;
                HostEvent::Deliver(d)
            }
        };
        self.outputs.push_back(Output::Event(e));
    }

    fn on_data(&mut self, now: Instant, d: DataPacket) {
        let h = d.header;
        if h.dst != self.proc || h.src.0 >= self.senders_max || h.reliable() {
            self.stats.dropped_invalid += 1;
            return;
        }
        if h.frag == 0 && h.end_of_message() {
            return self.deliver(now, h.src, h.psn, h.ts, d.payload, h.plain());
        }
        let first = Psn(h.psn.0.wrapping_sub(u32::from(h.frag)));
        let key = (h.src, first);
        if !self.partials.contains_key(&key) && self.partials.len() >= PARTIALS_MAX {
            // The oldest by key is as good a victim as any: the baseline has no loss reports.
            self.partials.pop_first();
            self.stats.dropped_full += 1;
        }
        let p = self.partials.entry(key).or_insert_with(|| Partial {
            ts: h.ts,
            plain: h.plain(),
            parts: BTreeMap::new(),
            last: None,
        });
        if p.ts != h.ts || p.plain != h.plain() || p.parts.contains_key(&h.frag) {
            self.stats.dropped_invalid += 1;
            return;
        }
        p.parts.insert(h.frag, d.payload);
        if h.end_of_message() {
            p.last = Some(h.frag);
        }
        if p.last.is_some_and(|l| p.parts.len() == usize::from(l) + 1) {
            let p = self.partials.remove(&key).expect("just filled");
            let len = p.parts.values().map(Bytes::len).sum();
            let mut whole = BytesMut::with_capacity(len);
            for part in p.parts.values() {
                whole.extend_from_slice(part);
            }
            self.deliver(now, h.src, first, p.ts, whole.freeze(), p.plain);
        }
    }
}

impl Node for UnorderedHost {
    type Packet = Packet;
    type Event = HostEvent;
    type Mgmt = std::convert::Infallible;

    fn handle(&mut self, now: Instant, input: Input<Packet>) {
        match input {
            Input::Packet {
                packet: Packet::Data(d),
                ..
            } => self.on_data(now, d),
            // No barriers, acknowledgements or NAKs in the baseline.
            Input::Packet { .. } => self.stats.dropped_invalid += 1,
            // No failure handling in the baseline either.
            Input::Timeout | Input::Notice(_) => {}
        }
    }

    fn poll_output(&mut self) -> Option<Output<Packet, HostEvent>> {
        self.outputs.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(h: &mut UnorderedHost) -> (Vec<Packet>, Vec<Delivery>) {
        let (mut sent, mut got) = (Vec::new(), Vec::new());
        while let Some(o) = h.poll_output() {
            match o {
                Output::Send { packet, .. } => sent.push(packet),
                Output::Event(HostEvent::Deliver(d)) => got.push(d),
                Output::Event(e) => panic!("{e:?}"),
            }
        }
        (sent, got)
    }

    /// Plain messages are flagged on the wire and come out as plain deliveries, within their
    /// own room; ordered ones are unchanged.
    #[test]
    fn plain_messages_are_flagged_and_delivered_as_plain() {
        let mut a = UnorderedHost::new(ProcId(0), 2, 4, Instant(10));
        let mut b = UnorderedHost::new(ProcId(1), 2, 4, Instant(10));
        a.send_plain(
            Instant(20),
            ProcId(0),
            &[(ProcId(1), "reply, 2 frags".into())],
        )
        .unwrap();
        a.send(Instant(21), ProcId(0), &[(ProcId(1), "req".into())])
            .unwrap();
        b.set_plain_room(1);
        let mut plain = Vec::new();
        let mut ordered = Vec::new();
        let mut sent = Vec::new();
        while let Some(o) = a.poll_output() {
            let Output::Send { packet, .. } = o else {
                panic!("{o:?}")
            };
            sent.push(packet);
        }
        let flagged: Vec<bool> = sent
            .iter()
            .map(|p| matches!(p, Packet::Data(d) if d.header.plain()))
            .collect();
        assert_eq!(flagged, [true, true, true, true, false]);
        for packet in sent {
            b.handle(
                Instant(30),
                Input::Packet {
                    port: UPLINK,
                    packet,
                },
            );
        }
        while let Some(o) = b.poll_output() {
            match o {
                Output::Event(HostEvent::DeliverPlain(d)) => plain.push(d.payload),
                Output::Event(HostEvent::Deliver(d)) => ordered.push(d.payload),
                o => panic!("{o:?}"),
            }
        }
        assert_eq!(plain, vec![Bytes::from_static(b"reply, 2 frags")]);
        assert_eq!(ordered, vec![Bytes::from_static(b"req")]);
        assert_eq!(b.plain_room(), 0);
        assert_eq!((b.stats().delivered_plain, b.stats().delivered), (1, 1));
    }

    #[test]
    fn fragments_are_delivered_on_arrival_in_any_order() {
        let mut a = UnorderedHost::new(ProcId(0), 2, 4, Instant(10));
        let mut b = UnorderedHost::new(ProcId(1), 2, 4, Instant(10));
        let msg = Bytes::from_static(b"hello, world");
        let ts = a
            .send(
                Instant(20),
                ProcId(0),
                &[(ProcId(1), msg.clone()), (ProcId(0), "me".into())],
            )
            .unwrap();
        let (mut sent, mine) = drain(&mut a);
        assert_eq!(mine.len(), 1, "to itself: at once");
        assert_eq!(sent.len(), 3, "12 bytes in 4-byte fragments");
        sent.reverse();
        for p in sent {
            b.handle(
                Instant(30),
                Input::Packet {
                    port: UPLINK,
                    packet: p,
                },
            );
        }
        let (_, got) = drain(&mut b);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].payload.clone(), got[0].ts, got[0].src),
            (msg, ts, ProcId(0))
        );
        assert!(got[0].ts < got[0].barrier);
    }

    #[test]
    fn strangers_and_beacons_are_dropped_and_counted() {
        let mut b = UnorderedHost::new(ProcId(1), 2, 4, Instant(10));
        let header = DataHeader {
            flags: flags::END_OF_MESSAGE,
            frag: 0,
            ts: Timestamp::new(1),
            barrier: Timestamp::new(1),
            commit: Timestamp::new(1),
            psn: Psn(0),
            src: ProcId(7),
            dst: ProcId(1),
        };
        let packet = Packet::Data(DataPacket {
            header,
            payload: Bytes::new(),
        });
        b.handle(
            Instant(1),
            Input::Packet {
                port: UPLINK,
                packet,
            },
        );
        assert_eq!(b.stats().dropped_invalid, 1);
        assert!(b.poll_output().is_none());
    }
}
