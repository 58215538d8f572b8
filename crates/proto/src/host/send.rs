//! The send path: scatterings stamped and emitted (§2.1, §4.1), best effort and reliable (§5.1),
//! the reliable window pumped and retransmitted.

use super::*;

impl Host {
    /// Sends a scattering from local process `src`: every message gets one timestamp (§2.1),
    /// which is returned. Messages to processes on this host skip the network but are still
    /// delivered in total order. Drain [`Node::poll_output`] afterwards.
    pub fn send(
        &mut self,
        now: Instant,
        src: ProcId,
        scattering: &[(ProcId, Bytes)],
    ) -> Result<Timestamp, SendError> {
        self.send_best_effort(now, src, scattering, 0)
    }

    /// Sends a scattering of *plain* messages from local process `src` (§2.2.2: "the response
    /// message does not need to be ordered by 1Pipe"): best effort, outside the total order.
    /// Each goes as a data packet flagged [`flags::PLAIN`] on the same uplink as everything
    /// else, and its receiver delivers it the moment it is whole
    /// ([`HostEvent::DeliverPlain`]) — never held for a barrier, never dropped as late.
    ///
    /// It is a best-effort message in every other way, and so reported lost as one
    /// ([`HostEvent::SendFailed`]): it takes the next PSN of the pair's best-effort space, is
    /// tracked until acknowledged, counts against the same window (`unacked_bytes_max`,
    /// `inflight_max`: `SendError::Full`), and is reported if its loss timeout passes without
    /// an ACK, if the receiver's window gives up on it, if a fragment is missing when the
    /// barrier passes its timestamp (`Incomplete`), or if the receiving application has no
    /// room for it (`BufferFull`, [`Host::set_plain_room`]). The returned timestamp is the
    /// host's timestamp now, carried in the packets: it orders nothing. Drain
    /// [`Node::poll_output`] afterwards.
    pub fn send_plain(
        &mut self,
        now: Instant,
        src: ProcId,
        scattering: &[(ProcId, Bytes)],
    ) -> Result<Timestamp, SendError> {
        self.send_best_effort(now, src, scattering, flags::PLAIN)
    }

    /// [`Host::send`] (`service` 0) and [`Host::send_plain`] (`service` [`flags::PLAIN`]): one
    /// best-effort path, so that both are tracked and reported alike.
    pub(super) fn send_best_effort(
        &mut self,
        now: Instant,
        src: ProcId,
        scattering: &[(ProcId, Bytes)],
        service: u8,
    ) -> Result<Timestamp, SendError> {
        debug_assert!(service == 0 || service == flags::PLAIN);
        let src_idx = self.local_index(src).ok_or(SendError::NotLocal(src))?;
        // §5.2: a host told it failed sends nothing more as its old processes — once its link
        // came back their messages would enter a network that stopped waiting for them, below
        // every barrier; it comes back only as new processes (`ask_rejoin`).
        if self.life.failed() {
            return Err(SendError::Failed(src));
        }
        if scattering.is_empty() {
            return Err(SendError::Empty);
        }
        for (dst, msg) in scattering {
            if dst.0 >= self.cfg.senders_max {
                return Err(SendError::UnknownDestination(*dst));
            }
            if msg.len() > self.cfg.message_len_max {
                return Err(SendError::TooLarge {
                    len: msg.len(),
                    max: self.cfg.message_len_max,
                });
            }
        }
        let (mut remote, mut bytes) = (0, 0u64);
        for (dst, msg) in scattering {
            if self.local_index(*dst).is_none() {
                remote += 1;
                bytes += self.wire_len(msg.len());
            }
        }
        if !self.tracker.has_room(remote) {
            return Err(SendError::Full);
        }
        // §6.1 flow control: the window of unacknowledged bytes (an empty window takes any
        // scattering, however large).
        let unacked = self.tracker.unresolved_bytes();
        if unacked > 0 && unacked.saturating_add(bytes) > self.cfg.unacked_bytes_max {
            return Err(SendError::Full);
        }
        // §4.1: one non-decreasing timestamp for the whole scattering; the barrier field starts
        // equal to it.
        let ts = self.timestamp(now);
        for (dst, msg) in scattering {
            let psn = self.procs[src_idx].next_psn[dst.index()];
            let frags = self.sender.frags(msg.len());
            self.procs[src_idx].next_psn[dst.index()] = Psn(psn.0.wrapping_add(frags));
            match service {
                0 => self.stats.messages_sent += 1,
                _ => self.stats.plain_sent += 1,
            }
            if service == 0 {
                self.fast_until = now + self.cfg.beacon_fast_hold_ns;
                self.uplink.fast_now(now);
            }
            if self.local_index(*dst).is_none() {
                let deadline = now + self.loss_timeout_ns();
                let bytes = u32::try_from(self.wire_len(msg.len())).unwrap_or(u32::MAX);
                self.tracker
                    .track(deadline, src, *dst, psn, frags, bytes, ts)
                    .expect("room checked above");
            }
            self.emit_message(now, src, *dst, psn, ts, msg, service);
        }
        self.deliver_ready(now);
        self.invariants();
        Ok(ts)
    }

    /// Queues a reliable scattering from local process `src` (Table 1 `onepipe_reliable_send`,
    /// §5.1). It is stamped and sent once every message fits its destination's window (§6.1);
    /// [`HostEvent::ReliableSent`] then reports its timestamp. Delivery is all-or-nothing and
    /// exactly once, in total order among reliable messages, unless a process fails. Returns
    /// the scattering's handle; `Err(SendError::Full)` if the send buffer cannot take it
    /// (nothing is queued then). Drain [`Node::poll_output`] afterwards.
    pub fn send_reliable(
        &mut self,
        now: Instant,
        src: ProcId,
        scattering: &[(ProcId, Bytes)],
    ) -> Result<u64, SendError> {
        self.local_index(src).ok_or(SendError::NotLocal(src))?;
        if self.life.failed() {
            return Err(SendError::Failed(src));
        }
        if scattering.is_empty() {
            return Err(SendError::Empty);
        }
        // A reliable message must fit one window, so that receivers never see a PSN beyond
        // their acknowledgement window (reliable.rs).
        let max = self
            .cfg
            .message_len_max
            .min(WINDOW_MAX as usize * self.cfg.mtu_payload);
        for (dst, msg) in scattering {
            if dst.0 >= self.cfg.senders_max {
                return Err(SendError::UnknownDestination(*dst));
            }
            if self.failed.contains_key(dst) {
                return Err(SendError::Failed(*dst));
            }
            if msg.len() > max {
                return Err(SendError::TooLarge {
                    len: msg.len(),
                    max,
                });
            }
        }
        // A scattering larger than the whole send buffer could never be queued: say so, rather
        // than `Full` for ever.
        let total: usize = scattering.iter().map(|(_, m)| m.len()).sum();
        let buffer = self.cfg.reliable.send_buffer_bytes_max;
        if total > buffer {
            return Err(SendError::TooLarge {
                len: total,
                max: buffer,
            });
        }
        self.fast_until = now + self.cfg.beacon_fast_hold_ns;
        self.uplink.fast_now(now);
        let procs = &self.procs;
        let handle = self
            .sender
            .enqueue(src, scattering, |d| procs.iter().all(|lp| lp.id != d))
            .map_err(|_| SendError::Full)?;
        self.pump(now);
        self.deliver_ready(now);
        self.invariants();
        Ok(handle)
    }

    /// Stamps and sends every reliable scattering at the head of the send buffer that holds its
    /// credits (§6.1: "attached with the current timestamp and sent out").
    pub(super) fn pump(&mut self, now: Instant) {
        while let Some(q) = self.sender.pop_ready() {
            // A destination failed while it waited (§5.2): never stamped, never sent.
            if !self.failed.is_empty() && q.messages().any(|(d, _, _)| self.failed.contains_key(&d))
            {
                self.outputs
                    .push_back(Output::Event(HostEvent::ReliableAborted {
                        handle: q.handle,
                        src: q.src,
                    }));
                self.sender.abort(q);
                continue;
            }
            let ts = self.timestamp(now);
            self.outputs
                .push_back(Output::Event(HostEvent::ReliableSent {
                    handle: q.handle,
                    src: q.src,
                    ts,
                }));
            for (dst, msg, remote) in q.messages() {
                self.stats.messages_sent += 1;
                if remote {
                    let psn = self.sender.sent(now, q.src, dst, ts, msg.clone());
                    self.emit_message(now, q.src, dst, psn, ts, msg, flags::RELIABLE);
                } else {
                    // Local: no network, no ACK; a PSN from the best-effort space only orders
                    // it among equal timestamps.
                    let si = self.local_index(q.src).expect("validated at enqueue");
                    let psn = self.procs[si].next_psn[dst.index()];
                    let frags = self.sender.frags(msg.len());
                    self.procs[si].next_psn[dst.index()] = Psn(psn.0.wrapping_add(frags));
                    self.emit_message(now, q.src, dst, psn, ts, msg, flags::RELIABLE);
                }
            }
        }
    }

    /// Retransmits a reliable message: same timestamp, same PSNs, current barriers. §5.2: if
    /// the path seems broken, the controller gets a copy to forward.
    pub(super) fn retransmit(&mut self, now: Instant, t: Transmit) {
        if t.forward && self.relays.len() < RELAY_OUT_MAX {
            self.stats.forwarded += 1;
            let frags = self.sender.frags(t.payload.len());
            let packets = (0..frags)
                .map(|f| {
                    let lo = f as usize * self.cfg.mtu_payload;
                    let hi = (lo + self.cfg.mtu_payload).min(t.payload.len());
                    let mut fl = flags::RELIABLE;
                    if f + 1 == frags {
                        fl |= flags::END_OF_MESSAGE;
                    }
                    // No barriers: a relayed packet passes no switch, and barriers are
                    // aggregated hop by hop.
                    Packet::Data(DataPacket {
                        header: DataHeader {
                            flags: fl,
                            frag: f as u16,
                            ts: t.ts,
                            barrier: Timestamp::new(0),
                            commit: Timestamp::new(0),
                            psn: Psn(t.first.0.wrapping_add(f)),
                            src: t.src,
                            dst: t.dst,
                        },
                        payload: t.payload.slice(lo..hi),
                    })
                })
                .collect();
            self.relays.push_back((
                MgmtDest::Controller,
                RelayMsg::Forward {
                    from: self.cfg.node,
                    packets,
                },
            ));
        }
        self.emit_message(
            now,
            t.src,
            t.dst,
            t.first,
            t.ts,
            &t.payload,
            flags::RELIABLE,
        );
    }

    /// The bytes a message of `len` occupies on the wire: its payload and one data header per
    /// fragment (what the best-effort window counts).
    pub(super) fn wire_len(&self, len: usize) -> u64 {
        let frags = u64::from(self.sender.frags(len));
        len as u64 + frags * crate::wire::DATA_HEADER_LEN as u64
    }

    /// Fragments one message and sends it up (or delivers it here, for a local destination).
    /// `service` is its service's flag: 0 (best effort), [`flags::RELIABLE`] or
    /// [`flags::PLAIN`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn emit_message(
        &mut self,
        now: Instant,
        src: ProcId,
        dst: ProcId,
        psn: Psn,
        ts: Timestamp,
        msg: &Bytes,
        service: u8,
    ) {
        debug_assert_eq!(service & !flags::EXCLUSIVE, 0, "a service flag");
        debug_assert_ne!(service, flags::EXCLUSIVE, "one service");
        let frags = self.sender.frags(msg.len());
        let local = self.local_index(dst).is_some();
        // What the packet advertises: the host's timestamp is its best-effort barrier (every later
        // best-effort message is stamped at or above it), and the commit barrier (§5.1).
        let barrier = self.clock_ts;
        let commit = self.commit_now();
        // A plain packet carries the barriers too: they describe its link, not the message.
        let mut base = service;
        if self.cfg.barrier_on_data {
            base |= flags::BARRIER_VALID | flags::COMMIT_VALID;
        }
        for frag in 0..frags {
            let lo = frag as usize * self.cfg.mtu_payload;
            let hi = (lo + self.cfg.mtu_payload).min(msg.len());
            let mut fl = base;
            if frag + 1 == frags {
                fl |= flags::END_OF_MESSAGE;
            }
            let packet = DataPacket {
                header: DataHeader {
                    flags: fl,
                    frag: frag as u16,
                    ts,
                    barrier,
                    commit,
                    psn: Psn(psn.0.wrapping_add(frag)),
                    src,
                    dst,
                },
                payload: msg.slice(lo..hi),
            };
            if local {
                self.on_data(now, packet);
            } else {
                self.stats.packets_sent += 1;
                self.send_uplink(Packet::Data(packet));
            }
        }
    }
}
