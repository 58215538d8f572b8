//! The simulator's host driver: one host input at a time on the host's CPU model — the
//! workload's sends and scatterings, the role's outputs (deliveries, timestamps, losses), and
//! what is recorded of them for the checkers and the trace hash.

use super::*;
use onepipe_proto::app::AppIo;

impl<Q: EventQueue<Ev>> World<Q> {
    /// Builds the scattering of one send of workload slot `slot` into `scratch_scatter` /
    /// `scratch_dsts`.
    pub(super) fn build_scattering(&mut self, slot: u32, seq: u64, issued: SimTime) -> Dsts {
        let mut payload = BytesMut::with_capacity(self.cfg.workload.msg_size);
        payload.put_u64(seq);
        payload.put_u64(issued);
        payload.resize(self.cfg.workload.msg_size, 0);
        let payload = payload.freeze();
        self.proto.scratch_scatter.clear();
        self.proto.scratch_dsts.clear();
        // Destinations are drawn as workload slots, then named by the process each slot is now.
        let n = self.proto.procs;
        let dsts = match self.cfg.workload.workload {
            WorkloadKind::AllToAll => {
                self.proto.scratch_dsts.extend(0..n);
                Dsts::All(n)
            }
            WorkloadKind::OneToOne => {
                self.proto.scratch_dsts.push((slot + n / 2) % n);
                Dsts::List(self.proto.scratch_dsts.clone())
            }
            WorkloadKind::Scatter { k } => {
                // k distinct destinations, uniformly (rejection sampling; k <= n is validated).
                while self.proto.scratch_dsts.len() < k as usize {
                    let d = self.workload_rng.below(n as u64) as u32;
                    if !self.proto.scratch_dsts.contains(&d) {
                        self.proto.scratch_dsts.push(d);
                    }
                }
                self.proto.scratch_dsts.sort_unstable();
                Dsts::List(self.proto.scratch_dsts.clone())
            }
        };
        let dsts = if self.proto.remapped {
            let pph = self.cfg.net.procs_per_host;
            let sh = slot / pph;
            for i in 0..self.proto.scratch_dsts.len() {
                let d = self.proto.scratch_dsts[i];
                self.proto.scratch_dsts[i] = if d / pph == sh {
                    self.slot_proc(d)
                } else {
                    self.proto
                        .known
                        .get(&(sh, d / pph))
                        .map_or(d, |procs| procs[(d % pph) as usize])
                };
            }
            Dsts::List(self.proto.scratch_dsts.clone())
        } else {
            dsts
        };
        // An application told a process failed (§5.2 callback) stops sending to it.
        let host = &self.proto.hosts[(slot / self.cfg.net.procs_per_host) as usize].host;
        let dsts = if host.failures_known() == 0 {
            dsts
        } else {
            let before = self.proto.scratch_dsts.len();
            self.proto
                .scratch_dsts
                .retain(|&d| host.failure_of(ProcId(d)).is_none());
            if self.proto.scratch_dsts.len() == before {
                dsts
            } else {
                Dsts::List(self.proto.scratch_dsts.clone())
            }
        };
        for &d in &self.proto.scratch_dsts {
            self.proto
                .scratch_scatter
                .push((ProcId(d), payload.clone()));
        }
        dsts
    }

    /// Runs `input` on host `h` at true time `t` (its CPU's turn for it), then drains the host's
    /// outputs (`finish_host_input`).
    pub(super) fn host_process(&mut self, t: SimTime, h: u32, input: CoreInput<OnePipeInput>) {
        let hi = h as usize;
        let local = self.local(h, t);
        let before = self.barriers_before(hi);
        let mut cursor = t;
        match input {
            CoreInput::Packet(slot) => {
                cursor += self.cfg.net.host_recv_ns;
                let packet = self.take_packet(slot);
                self.proto.hosts[hi].host.handle(
                    local,
                    Input::Packet {
                        port: UPLINK,
                        packet,
                    },
                );
            }
            CoreInput::Timeout if self.proto.apps.is_some() => {
                // The role's timer is the host's and its applications' (whichever is due).
                let host = &mut self.proto.hosts[hi].host;
                if host.poll_timeout().is_some_and(|d| d <= local) {
                    host.handle(local, Input::Timeout);
                }
                self.app_timeouts(t, h, local);
            }
            CoreInput::Timeout => self.proto.hosts[hi].host.handle(local, Input::Timeout),
            CoreInput::Proto(OnePipeInput::Heal) => self.proto.hosts[hi]
                .host
                .handle(local, Input::Notice(Notice::LinkUp)),
            CoreInput::Proto(OnePipeInput::AppPlain(m)) => {
                cursor += self.cfg.net.host_recv_ns + self.cfg.net.host_deliver_ns;
                self.proto.plain_in_flight -= 1;
                let msg = self.proto.plain_msgs.take(m);
                let input = AppIo::Deliver {
                    src: msg.src,
                    ts: msg.ts,
                    reliable: false,
                    payload: msg.payload,
                };
                self.app_input(t, h, local, msg.dst.0, input.input());
            }
            CoreInput::Proto(OnePipeInput::Ctrl(m)) => {
                cursor += self.cfg.net.host_recv_ns;
                self.proto.ctrl_in_flight -= 1;
                let (_, msg) = self.proto.ctrl_msgs.take(m);
                match msg {
                    Mgmt::Ctrl(msg) => self.host_control(t, h, local, msg),
                    Mgmt::Relay(msg) => self.host_relay(t, h, local, msg),
                }
            }
            CoreInput::Send { proc: slot, issued } => self.host_send(t, h, local, slot, issued),
        }
        self.finish_host_input(t, h, cursor, local, before);
    }

    /// Host `hi`'s (barrier, commit barrier) before an input; its released best-effort and
    /// commit barriers are kept in its state, for the checker to judge the input's deliveries.
    fn barriers_before(&mut self, hi: usize) -> (Option<Timestamp>, Option<Timestamp>) {
        let barrier_before = self.proto.hosts[hi].host.barrier().map(|b| b.timestamp());
        let commit_before = self.proto.hosts[hi]
            .host
            .commit_barrier()
            .map(|b| b.timestamp());
        self.proto.hosts[hi].be_released_before =
            self.proto.hosts[hi].host.released().map(|b| b.timestamp());
        self.proto.hosts[hi].released_before = self.proto.hosts[hi]
            .host
            .commit_released()
            .map(|b| b.timestamp());
        (barrier_before, commit_before)
    }

    /// Workload slot `slot`'s send issued at `issued`, on host `h` at true time `t` (local time
    /// `local`): a scattering built and handed to the host, best-effort or reliable by the
    /// service; none while the host leaves or when every destination has failed.
    fn host_send(&mut self, t: SimTime, h: u32, local: Instant, slot: u32, issued: SimTime) {
        let hi = h as usize;
        if t >= self.proto.hosts[hi].leave_at {
            // Leaving: nothing new.
            self.proto.stats.sends_while_leaving += 1;
            return;
        }
        let reliable = match self.cfg.workload.service {
            Service::BestEffort => false,
            Service::Reliable => true,
            Service::Mixed => self.workload_rng.chance(0.5),
        };
        let proc = self.slot_proc(slot);
        let seq = self.proto.scatter_seq[proc as usize];
        let dsts = self.build_scattering(slot, seq, issued);
        if self.proto.scratch_scatter.is_empty() {
            self.proto.stats.sends_to_failed += 1;
            return;
        }
        let scattering = std::mem::take(&mut self.proto.scratch_scatter);
        let host = &mut self.proto.hosts[hi].host;
        let sent = if reliable {
            host.send_reliable(local, ProcId(proc), &scattering)
                .map(Err)
        } else {
            host.send(local, ProcId(proc), &scattering).map(Ok)
        };
        self.proto.scratch_scatter = scattering;
        match sent {
            Ok(stamped) => {
                self.proto.scatter_seq[proc as usize] += 1;
                self.proto.stats.scatterings += 1;
                self.proto.stats.messages_sent += self.proto.scratch_dsts.len() as u64;
                match stamped {
                    Ok(ts) => self.record_send(t, h, proc, seq, ts, dsts, false),
                    Err(handle) => {
                        self.proto.hosts[hi]
                            .reliable_queued
                            .push_back((handle, proc, seq, dsts));
                    }
                }
            }
            Err(onepipe_proto::host::SendError::Full) => {
                self.proto.stats.sends_refused_full += 1;
            }
            Err(onepipe_proto::host::SendError::Failed(_)) => {
                self.proto.stats.sends_to_failed += 1;
            }
            Err(e) => panic!("the simulator's workload sent an invalid scattering: {e}"),
        }
    }

    /// Drains a host's outputs after an input, charging its CPU from `cursor` on; `before` are
    /// its (barrier, commit barrier) before the input.
    pub(super) fn finish_host_input(
        &mut self,
        t: SimTime,
        h: u32,
        mut cursor: SimTime,
        local: Instant,
        before: (Option<Timestamp>, Option<Timestamp>),
    ) {
        let hi = h as usize;
        let (barrier_before, commit_before) = before;
        let released_before = self.proto.hosts[hi].released_before;
        let be_released_before = self.proto.hosts[hi].be_released_before;
        let released = (be_released_before, released_before);
        // With applications, a moved commit barrier is news to them, and what they send in
        // turn is more output.
        loop {
            drive::drain_in(
                self,
                |w| &mut w.proto.hosts[hi].host,
                |w, o| cursor = w.host_output(t, h, local, cursor, released, o),
            );
            cursor = self.send_plain(h, cursor, local);
            if !self.app_released(t, h, local) {
                break;
            }
        }
        let c = self.core(h);
        c.busy_ns += cursor - t;
        c.free = cursor;
        self.track_stalls(t, h, (barrier_before, commit_before));
        if let Some(c) = self.proto.checker.as_mut() {
            let b = self.proto.hosts[hi].host.barrier().map(|b| b.timestamp());
            c.on_host_barrier(t, h, b);
        }
        self.rearm(h);
    }

    /// One output `o` of host `h` after an input at `t` (its local time `local`), its CPU busy
    /// until `cursor`: a packet to send, a management message, or an event. `released` are the
    /// host's released best-effort and commit barriers before the input. Returns the new
    /// `cursor`.
    fn host_output(
        &mut self,
        t: SimTime,
        h: u32,
        local: Instant,
        mut cursor: SimTime,
        released: (Option<Timestamp>, Option<Timestamp>),
        o: Output<Packet, HostEvent, Mgmt>,
    ) -> SimTime {
        match o {
            Output::Send { packet, .. } => {
                cursor += self.cfg.net.host_send_ns;
                self.transmit(self.proto.host_uplinks[h as usize], packet, cursor);
            }
            Output::Event(e) => cursor = self.host_event(t, h, local, cursor, released, e),
            Output::Mgmt { to, msg } => {
                // A relay is charged as a packet sent; a control message is not.
                if matches!(msg, Mgmt::Relay(_)) {
                    cursor += self.cfg.net.host_send_ns;
                }
                self.send_mgmt(cursor, to, msg);
            }
        }
        cursor
    }

    /// Event `e` of host `h`, as `host_output` (deliveries, timestamped reliable scatterings,
    /// failures, recalls, losses): into the stats, the trace, the checker and the applications.
    /// Returns the new `cursor`.
    fn host_event(
        &mut self,
        t: SimTime,
        h: u32,
        local: Instant,
        mut cursor: SimTime,
        released: (Option<Timestamp>, Option<Timestamp>),
        e: HostEvent,
    ) -> SimTime {
        let hi = h as usize;
        match e {
            HostEvent::Deliver(d) => {
                cursor += self.cfg.net.host_deliver_ns;
                self.host_deliver(t, h, local, cursor, released, &d);
            }
            e @ (HostEvent::OptDeliver { .. }
            | HostEvent::Revoke { .. }
            | HostEvent::Confirm { .. }) => self.opt_hook(cursor, local, e),
            HostEvent::ReliableSent { handle, src, ts } => {
                let (queued, proc, seq, dsts) = self.proto.hosts[hi]
                    .reliable_queued
                    .pop_front()
                    .expect("a queued reliable scattering");
                debug_assert_eq!((queued, proc), (handle, src.0));
                self.record_send(t, h, proc, seq, ts, dsts, true);
                self.app_reliable_sent(t, h, local, proc, handle, ts);
            }
            HostEvent::ReliableAborted { handle, src } => {
                let (queued, proc, _, _) = self.proto.hosts[hi]
                    .reliable_queued
                    .pop_front()
                    .expect("a queued reliable scattering");
                debug_assert_eq!((queued, proc), (handle, src.0));
                self.proto.stats.sends_to_failed += 1;
                self.app_reliable_aborted(t, h, local, proc, handle);
            }
            HostEvent::ProcFailed { proc, ts, .. } => {
                self.proto.stats.proc_failed_callbacks += 1;
                self.proto
                    .trace
                    .add(0xFA1D ^ (proc.0 as u64) << 32 ^ h as u64);
                self.proto.trace.add(ts.raw());
                let input = AppIo::ProcFailed { proc, ts };
                self.app_broadcast(t, h, local, input);
            }
            HostEvent::Recalled { src, ts } => {
                self.proto.stats.recalled += 1;
                self.proto.trace.add(0x2ECA ^ (src.0 as u64) << 32);
                self.proto.trace.add(ts.raw());
                if let Some(c) = self.proto.checker.as_mut() {
                    c.on_recalled(src.0, ts);
                }
            }
            HostEvent::SendFailed {
                src,
                dst,
                ts,
                reason,
                ..
            } => {
                self.proto.stats.send_failed += 1;
                self.proto
                    .trace
                    .add(0xFA11 ^ (src.0 as u64) << 32 ^ dst.0 as u64);
                self.proto.trace.add(ts.raw());
                if let Some(c) = self.proto.checker.as_mut() {
                    c.on_send_failed(cursor, src.0, dst.0, ts, reason);
                }
                let input = AppIo::SendFailed { dst, ts };
                self.app_input(t, h, local, src.0, input.input());
            }
            // The simulator carries applications' plain messages beside the hosts
            // (`World::send_plain`); no host here is ever asked to send one.
            HostEvent::DeliverPlain(d) => {
                unreachable!("host {h} delivered a plain message it was never sent: {d:?}")
            }
        }
        cursor
    }

    /// One of the hosts' optimistic hooks at true time `cursor` (its clock read `local`).
    fn opt_hook(&mut self, cursor: SimTime, local: Instant, e: HostEvent) {
        let o = self.proto.opt.as_mut().expect("optimistic delivery is on");
        // Each service has its own order, so its own view at a receiver.
        let at = |dst: ProcId, reliable: bool, k: onepipe_proto::reorder::OrderKey| {
            (view(dst, reliable), k.src.0, k.ts.raw(), k.psn.0)
        };
        match e {
            HostEvent::OptDeliver {
                delivery: d,
                usable_at,
            } => {
                let key = onepipe_proto::reorder::OrderKey {
                    ts: d.ts,
                    src: d.src,
                    psn: d.psn,
                };
                let at = at(d.dst, d.reliable, key);
                o.on_opt_deliver(cursor, local, at, &d.payload, usable_at);
            }
            HostEvent::Revoke {
                dst, key, reliable, ..
            } => {
                o.on_revoke(cursor, at(dst, reliable, key));
            }
            HostEvent::Confirm { dst, key, reliable } => {
                o.on_confirm(cursor, at(dst, reliable, key));
            }
            other => unreachable!("not an optimistic hook: {other:?}"),
        }
    }

    /// Host `h`'s delivery `d` in the total order, at true time `cursor`: recorded, judged (the
    /// optimistic checker too, when on) and handed to the applications.
    fn host_deliver(
        &mut self,
        t: SimTime,
        h: u32,
        local: Instant,
        cursor: SimTime,
        released: (Option<Timestamp>, Option<Timestamp>),
        d: &onepipe_proto::host::Delivery,
    ) {
        self.record_delivery(h, d, cursor, local, released);
        if let Some(o) = self.proto.opt.as_mut() {
            // 1Pipe's order is (ts, src, then send order: the workload's sequence number).
            let (seq, _) = crate::optimistic::header(&d.payload);
            let place =
                u128::from(d.ts.raw()) << 64 | u128::from(d.src.0) << 32 | u128::from(seq as u32);
            o.on_deliver(cursor, view(d.dst, d.reliable), d.src.0, seq, place);
        }
        self.app_deliver(t, h, local, d);
    }

    /// Host `h`'s delivery `d` at `t` (its local time `local`), handed to its applications if
    /// it runs any, without the simulator's payload header.
    fn app_deliver(
        &mut self,
        t: SimTime,
        h: u32,
        local: Instant,
        d: &onepipe_proto::host::Delivery,
    ) {
        if self.proto.apps.is_some() {
            // The same bytes, not a copy: a slice of the delivery's payload.
            let payload = if d.payload.len() >= PAYLOAD_HEADER_LEN {
                d.payload.slice(PAYLOAD_HEADER_LEN..)
            } else {
                Bytes::new()
            };
            let input = AppIo::Deliver {
                src: d.src,
                ts: d.ts,
                reliable: d.reliable,
                payload,
            };
            self.app_input(t, h, local, d.dst.0, input.input());
        }
    }

    /// Host `h` delivered `d` at true time `cursor` (its local time `local`): into the counters,
    /// the latency histograms, the trace and the checker. `before` are the host's released
    /// best-effort and commit barriers before the input.
    pub(super) fn record_delivery(
        &mut self,
        h: u32,
        d: &onepipe_proto::host::Delivery,
        cursor: SimTime,
        local: Instant,
        before: (Option<Timestamp>, Option<Timestamp>),
    ) {
        let (be_released_before, released_before) = before;
        self.proto.stats.delivered += 1;
        self.proto.stats.rejoined_delivered_to += (d.dst.0 >= self.proto.procs) as u64;
        self.proto.stats.rejoined_delivered_from += (d.src.0 >= self.proto.procs) as u64;
        if cursor <= self.cfg.workload.duration_ns {
            self.proto.stats.delivered_in_period += 1;
        }
        let seq = u64::from_be_bytes(d.payload[..8].try_into().expect("16-byte header"));
        let issued = u64::from_be_bytes(d.payload[8..16].try_into().expect("16-byte header"));
        debug_assert!(d.payload.len() >= PAYLOAD_HEADER_LEN);
        self.proto.latency.record(cursor - issued);
        if d.reliable {
            self.proto.stats.delivered_reliable += 1;
            self.proto.latency_reliable.record(cursor - issued);
        } else {
            self.proto.latency_be.record(cursor - issued);
        }
        self.proto
            .reorder_delay
            .record(local.saturating_since(d.arrived));
        self.proto.trace.add(cursor);
        self.proto
            .trace
            .add((d.dst.0 as u64) << 32 | d.src.0 as u64);
        self.proto.trace.add(seq);
        if let Some(c) = self.proto.checker.as_mut() {
            // A delivery must not be below a barrier the host had released everything below
            // (a backlog left by `deliver_burst_max` is below the barrier, not yet released),
            // the commit barrier for a reliable one.
            let before = if d.reliable {
                released_before
            } else {
                be_released_before
            };
            c.on_deliver(cursor, h, d, seq, before);
        }
    }

    /// Fig. 10's measure: host `h`'s barriers after an input at `t`, against `before` (barrier,
    /// commit barrier): when each last moved, and its longest stall after the first fault.
    pub(super) fn track_stalls(
        &mut self,
        t: SimTime,
        h: u32,
        before: (Option<Timestamp>, Option<Timestamp>),
    ) {
        let hi = h as usize;
        let (barrier_before, commit_before) = before;
        let now_b = self.proto.hosts[hi].host.barrier().map(|b| b.timestamp());
        let now_c = self.proto.hosts[hi]
            .host
            .commit_barrier()
            .map(|b| b.timestamp());
        for (k, moved) in [now_b != barrier_before, now_c != commit_before]
            .into_iter()
            .enumerate()
        {
            if moved {
                let st = &mut self.proto.hosts[hi];
                if t > self.proto.first_fault {
                    st.stall_max[k] = st.stall_max[k].max(t - st.last_move[k]);
                }
                st.last_move[k] = t;
            }
        }
    }

    /// A scattering got its timestamp: into the trace and the checker.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_send(
        &mut self,
        t: SimTime,
        h: u32,
        proc: u32,
        seq: u64,
        ts: Timestamp,
        dsts: Dsts,
        reliable: bool,
    ) {
        self.proto.trace.add(t);
        self.proto.trace.add((proc as u64) << 32 | seq);
        self.proto.trace.add(ts.raw());
        if let Some(c) = self.proto.checker.as_mut() {
            c.on_send(t, h, proc, seq, ts, dsts, reliable);
        }
    }
}

/// The optimistic checker's view of process `dst`'s service (`reliable`): its id, or its
/// reliable view ([`crate::optcheck::reliable_view`]).
fn view(dst: ProcId, reliable: bool) -> u32 {
    match reliable {
        true => crate::optcheck::reliable_view(dst.0),
        false => dst.0,
    }
}
