//! [`Driver`]: one sans-IO role on one UDP socket.
//!
//! The loop, one turn at a time (DESIGN.md §3, `onepipe_proto::node`):
//!
//! 1. if the role's `poll_timeout` has passed, `handle(now, Input::Timeout)`;
//! 2. receive up to `recv_batches_per_turn_max` batches of datagrams (`recvmmsg`); map each
//!    datagram's source address to an input port (unknown: dropped, counted), decode its packets
//!    one after another (a malformed tail: counted, rest dropped) and feed each to
//!    `handle(now, Input::Packet { port, packet })`;
//! 3. after every mutation, drain `poll_output`: sends go to the coalescing buffer of their
//!    output port, events to the caller's sink; then re-read `poll_timeout`;
//! 4. flush pending datagrams whose oldest packet waited `flush_delay_ns`, and — if the socket
//!    had nothing more to read — all of them (the loop is idle);
//! 5. send the flushed datagrams (`sendmmsg`); on `EAGAIN` keep them and wait for the socket
//!    to become writable;
//! 6. if nothing is left to do: spin up to `spin_ns`, then block in `epoll_wait` until the
//!    socket is readable, the role's timer or a flush deadline is due, the caller's timeout
//!    passes, or a [`Waker`] fires.
//!
//! Application commands (such as `Host::send`) are not `Node` inputs: run them through
//! [`Driver::with_node`], which drains the role's outputs afterwards like any other mutation.

use crate::auth::LinkAuth;
use crate::clock::Clock;
use crate::coalesce::{decode_datagram, Coalescer};
use crate::config::DriverConfig;
use crate::ports::PortTable;
use crate::stats::DriverStats;
use crate::sys::{self, Poller, RecvBatch, Waker};
use bytes::Bytes;
use onepipe_proto::drive;
use onepipe_proto::node::{Input, MgmtDest, Node, Output};
use onepipe_proto::time::Instant;
use onepipe_proto::wire::Packet;
use rustix::net::SocketAddrAny;
use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// Drives a sans-IO role `N` over one non-blocking UDP socket. See the module docs for the loop.
///
/// The driver carries the data network only. A role's management messages
/// ([`Output::Mgmt`]) wait for its owner in [`Driver::poll_mgmt`] (at most
/// [`MGMT_QUEUE_MAX`]; beyond that the newest are dropped and counted: the roles send them
/// again on their timers).
pub struct Driver<N: Node<Packet = Packet>> {
    node: N,
    cfg: DriverConfig,
    clock: Clock,
    socket: UdpSocket,
    local_addr: SocketAddr,
    ports: PortTable,
    /// `sendmmsg`'s form of each output port's address.
    out_addrs: Vec<Option<SocketAddrAny>>,
    coalescer: Coalescer,
    recv: RecvBatch,
    poller: Poller,
    /// Decoded packets of the datagram being handled (kept for its capacity).
    scratch: Vec<Packet>,
    /// The role's `poll_timeout`, as of the last drain.
    node_timeout: Option<Instant>,
    /// Management messages for the owner.
    mgmt: VecDeque<(MgmtDest, N::Mgmt)>,
    /// Seals what leaves and opens what arrives, when the cluster authenticates datagrams.
    auth: Option<LinkAuth>,
    /// When auth refusals were last logged, and how many there were then.
    auth_logged: (Instant, u64),
    /// Body ranges of the segments of one received buffer that opened.
    opened: Vec<std::ops::Range<usize>>,
    stats: DriverStats,
}

/// Auth refusals are logged at most once per this many nanoseconds (counted always).
const AUTH_LOG_INTERVAL_NS: u64 = 1_000_000_000;

/// Most management messages a [`Driver`] holds for its owner.
pub const MGMT_QUEUE_MAX: usize = 1 << 12;

impl<N: Node<Packet = Packet>> Driver<N> {
    /// Wraps `node`, which must have been built with readings of `clock`, around `socket`
    /// (made non-blocking here; [`crate::bind_udp`] makes one with the configured buffer sizes).
    ///
    /// # Errors
    /// An invalid `cfg` (`InvalidInput`, naming the field), or a failure to set up `epoll`.
    pub fn new(
        node: N,
        socket: UdpSocket,
        ports: PortTable,
        clock: Clock,
        cfg: DriverConfig,
    ) -> io::Result<Driver<N>> {
        let mut cfg = cfg;
        cfg.check()?;
        socket.set_nonblocking(true)?;
        let local_addr = socket.local_addr()?;
        let features = sys::configure_socket(&socket, &cfg);
        if !features.gso {
            // The kernel has no UDP GSO (or it was not asked for): one datagram per send.
            cfg.coalesce.segments_max = 1;
        }
        let out_addrs = (0..ports.outputs_len())
            .map(|i| {
                ports
                    .output(onepipe_proto::ids::PortId(i as u32))
                    .map(sys::sendmmsg_addr)
            })
            .collect();
        let poller = Poller::new(&socket)?;
        let node_timeout = node.poll_timeout();
        Ok(Driver {
            coalescer: Coalescer::new(cfg.coalesce.clone(), ports.outputs_len()),
            recv: RecvBatch::new(cfg.recv_datagram_len_max, cfg.recv_batch_len),
            scratch: Vec::new(),
            stats: DriverStats {
                gso: features.gso,
                gro: features.gro,
                datagram_len_max: cfg.coalesce.datagram_len_max as u64,
                ..DriverStats::default()
            },
            node,
            clock,
            socket,
            local_addr,
            ports,
            out_addrs,
            poller,
            node_timeout,
            mgmt: VecDeque::new(),
            auth: None,
            auth_logged: (Instant::ZERO, 0),
            opened: Vec::new(),
            cfg,
        })
    }

    /// Seals every datagram this driver sends and opens every datagram it receives with
    /// `auth` (docs/SECURITY.md): a datagram that does not open is dropped and counted before
    /// any of it is decoded.
    ///
    /// # Errors
    /// `InvalidInput` if the configuration leaves no room for the auth header and tag in a
    /// datagram ([`crate::CoalesceConfig::sealed`]).
    pub fn set_auth(&mut self, auth: LinkAuth) -> io::Result<()> {
        let c = &self.cfg.coalesce;
        if c.segment_head_len != crate::auth::HEADER_LEN
            || c.segment_tail_len != crate::auth::TAG_LEN
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a sealing driver needs coalesce.segment_head_len and segment_tail_len of the auth header and tag (CoalesceConfig::sealed)",
            ));
        }
        self.auth = Some(auth);
        Ok(())
    }

    /// The auth state, when datagrams are sealed.
    pub fn auth(&self) -> Option<&LinkAuth> {
        self.auth.as_ref()
    }

    /// Applies a key update now (for an owner that reads the control channel on the driver's
    /// own thread; others leave updates in the [`crate::auth::KeyInbox`]). Ignored when
    /// datagrams are not sealed.
    pub fn apply_key_update(&mut self, update: crate::auth::KeyUpdate) {
        let now = self.clock.now();
        if let Some(auth) = &mut self.auth {
            auth.apply(now, update);
        }
    }

    /// The role.
    pub fn node(&self) -> &N {
        &self.node
    }

    /// Unwraps the role (pending datagrams are dropped).
    pub fn into_node(self) -> N {
        self.node
    }

    /// The clock the driver hands the role.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The current reading of [`Driver::clock`].
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The socket (for reading options such as the granted buffer sizes).
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// The port table.
    pub fn ports(&self) -> &PortTable {
        &self.ports
    }

    /// Port `port`'s peer is at `addr` from now on ([`PortTable::relink`]): a process that
    /// joined the running cluster.
    pub fn relink(&mut self, port: onepipe_proto::ids::PortId, addr: SocketAddr) {
        self.ports.relink(port, addr);
        if let Some(a) = self.out_addrs.get_mut(port.index()) {
            *a = Some(sys::sendmmsg_addr(addr));
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DriverConfig {
        &self.cfg
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> DriverStats {
        DriverStats {
            coalesce: self.coalescer.stats().clone(),
            auth: self
                .auth
                .as_ref()
                .map(|a| a.stats().clone())
                .unwrap_or_default(),
            ..self.stats.clone()
        }
    }

    /// A handle that wakes this driver's loop from another thread.
    pub fn waker(&self) -> Waker {
        self.poller.waker()
    }

    /// Packets not yet handed to the kernel: in pending datagrams or in the send queue.
    pub fn unsent_packets(&self) -> usize {
        self.coalescer.pending_packets()
            + self
                .coalescer
                .queue()
                .iter()
                .map(|d| d.packets as usize)
                .sum::<usize>()
    }

    /// The role's next management message (§5.2's control plane), for the owner to carry.
    pub fn poll_mgmt(&mut self) -> Option<(MgmtDest, N::Mgmt)> {
        self.mgmt.pop_front()
    }

    /// Runs an application command on the role at the current time (`f` gets the role and
    /// `now`), then drains its outputs: sends join the coalescing buffers, events go to
    /// `events`. The sends leave at the next [`Driver::run_once`] (or [`Driver::flush`]),
    /// coalesced with whatever else is pending.
    ///
    /// ```no_run
    /// # use onepipe_proto::host::Host;
    /// # use onepipe_proto::ids::ProcId;
    /// # fn f(driver: &mut onepipe_runtime::Driver<Host>) {
    /// let sent = driver.with_node(
    ///     |host, now| host.send(now, ProcId(0), &[(ProcId(1), "hi".into())]),
    ///     &mut |_event| {},
    /// );
    /// assert!(sent.is_ok());
    /// # }
    /// ```
    pub fn with_node<R, F>(&mut self, f: impl FnOnce(&mut N, Instant) -> R, events: &mut F) -> R
    where
        F: FnMut(N::Event),
    {
        let now = self.clock.now();
        let r = f(&mut self.node, now);
        self.node_turn(now, None, events);
        r
    }

    /// One turn of the loop; if it leaves nothing to do at once, waits — up to `timeout`, or
    /// less if the role's timer, a flush deadline, input or a [`Waker`] comes first — and takes
    /// one more turn. Events go to `events`.
    ///
    /// # Errors
    /// Only failures of the poller itself; network errors are counted in [`Driver::stats`].
    pub fn run_once<F>(&mut self, timeout: Duration, events: &mut F) -> io::Result<()>
    where
        F: FnMut(N::Event),
    {
        let until = self.clock.now() + duration_ns(timeout);
        if self.turn(events)? {
            return Ok(());
        }
        self.wait(until)?;
        self.turn(events)?;
        Ok(())
    }

    /// One turn of the loop — timer, receive, flush, send — without waiting. Returns whether
    /// there is more to do at once (input left unread, a timer due); if not, a caller that
    /// has nothing else to do calls [`Driver::wait_for_work`]. [`Driver::run_once`] is the two
    /// together, for a caller with nothing of its own to do between them.
    ///
    /// # Errors
    /// As [`Driver::run_once`].
    pub fn turn_once<F>(&mut self, events: &mut F) -> io::Result<bool>
    where
        F: FnMut(N::Event),
    {
        self.turn(events)
    }

    /// Waits until something is due — input, the role's timer, a flush deadline, a [`Waker`] —
    /// or `timeout` passes (spinning first for `spin_ns`).
    ///
    /// # Errors
    /// As [`Driver::run_once`].
    pub fn wait_for_work(&mut self, timeout: Duration) -> io::Result<()> {
        let until = self.clock.now() + duration_ns(timeout);
        self.wait(until)
    }

    /// Runs the loop until `stop(role)` holds (returns `true`) or the clock reaches `deadline`
    /// (returns `false`). `stop` is checked before each turn.
    ///
    /// # Errors
    /// As [`Driver::run_once`].
    pub fn run_until<F>(
        &mut self,
        deadline: Instant,
        events: &mut F,
        mut stop: impl FnMut(&N) -> bool,
    ) -> io::Result<bool>
    where
        F: FnMut(N::Event),
    {
        loop {
            if stop(&self.node) {
                return Ok(true);
            }
            let now = self.clock.now();
            if now >= deadline {
                return Ok(false);
            }
            let left = Duration::from_nanos(deadline.saturating_since(now));
            self.run_once(left, events)?;
        }
    }

    /// Flushes every pending datagram and sends what the socket takes now.
    ///
    /// # Errors
    /// As [`Driver::run_once`].
    pub fn flush(&mut self) -> io::Result<()> {
        self.coalescer.flush_idle();
        self.transmit()
    }

    /// One turn: timer, receive, flush, send. Returns true if there is more to do at once.
    fn turn<F: FnMut(N::Event)>(&mut self, events: &mut F) -> io::Result<bool> {
        self.stats.turns += 1;
        if let Some(auth) = &mut self.auth {
            auth.poll_updates(self.clock.now());
        }
        self.fire_timer(events);
        let mut drained = false;
        for _ in 0..self.cfg.recv_batches_per_turn_max {
            let n = match self.recv.recv(
                &self.socket,
                self.local_addr.is_ipv6(),
                self.cfg.recv_batch_len,
            ) {
                Ok(n) => n,
                Err(_) => {
                    // Never fatal: the network cannot stop the loop. Counted, retried next turn.
                    self.stats.recv_errors += 1;
                    0
                }
            };
            if n > 0 {
                self.stats.recvmmsg_calls += 1;
                self.handle_batch(n, events);
            }
            if n < self.cfg.recv_batch_len {
                drained = true;
                break;
            }
        }
        let timer_fired = self.fire_timer(events);
        let now = self.clock.now();
        self.coalescer.flush_due(now);
        if drained {
            self.coalescer.flush_idle();
        }
        self.transmit()?;
        Ok(!drained || (timer_fired && self.node_timeout.is_some_and(|t| t <= now)))
    }

    /// Feeds the `n` datagrams of the last receive to the role.
    fn handle_batch<F: FnMut(N::Event)>(&mut self, n: usize, events: &mut F) {
        let now = self.clock.now();
        let mut scratch = core::mem::take(&mut self.scratch);
        for i in 0..n {
            let (bytes, meta) = self.recv.datagram_mut(i);
            let Some(port) = meta.from.and_then(|a| self.ports.input(&a)) else {
                self.stats.unknown_source += 1;
                continue;
            };
            let datagrams = match meta.segment_len {
                0 => 1,
                seg => bytes.len().div_ceil(seg).max(1) as u64,
            };
            self.stats.datagrams_received += datagrams;
            self.stats.gro_receives += u64::from(datagrams > 1);
            self.stats.bytes_received += bytes.len() as u64;
            if meta.truncated {
                self.stats.datagrams_truncated += 1;
            }
            let Some(auth) = self.auth.as_mut() else {
                // One allocation per datagram; data payloads are slices of it.
                let datagram = Bytes::copy_from_slice(bytes);
                let decoded = decode_datagram(&datagram, meta.segment_len, &mut scratch);
                self.stats.decode_errors += u64::from(decoded.error.is_some());
                self.stats.packets_received += decoded.packets as u64;
                self.feed(now, port, &mut scratch, events);
                continue;
            };
            // Every segment is opened (tag, then replay window) before any of it is decoded.
            let seg = match meta.segment_len {
                0 => bytes.len().max(1),
                seg => seg,
            };
            self.opened.clear();
            for (k, segment) in bytes.chunks_mut(seg).enumerate() {
                if let Ok(body) = auth.open(now, port, segment) {
                    self.opened.push(k * seg + body.start..k * seg + body.end);
                }
            }
            if self.opened.is_empty() {
                continue;
            }
            let datagram = Bytes::copy_from_slice(bytes);
            for body in &self.opened {
                let decoded = decode_datagram(&datagram.slice(body.clone()), 0, &mut scratch);
                self.stats.decode_errors += u64::from(decoded.error.is_some());
                self.stats.packets_received += decoded.packets as u64;
            }
            self.feed(now, port, &mut scratch, events);
        }
        self.scratch = scratch;
        self.stats.datagrams_dropped_rcvbuf = u64::from(self.recv.kernel_drops());
        self.log_auth_refusals(now);
    }

    /// Hands the decoded packets to the role, draining after each.
    fn feed<F: FnMut(N::Event)>(
        &mut self,
        now: Instant,
        port: onepipe_proto::ids::PortId,
        packets: &mut Vec<Packet>,
        events: &mut F,
    ) {
        for packet in packets.drain(..) {
            self.node_turn(now, Some(Input::Packet { port, packet }), events);
        }
    }

    /// Logs the auth refusals since the last log, at most once per [`AUTH_LOG_INTERVAL_NS`].
    fn log_auth_refusals(&mut self, now: Instant) {
        let Some(auth) = &self.auth else { return };
        let s = auth.stats();
        let (at, logged) = self.auth_logged;
        let refused = s.refused();
        if refused == logged || now.saturating_since(at) < AUTH_LOG_INTERVAL_NS {
            return;
        }
        self.auth_logged = (now, refused);
        tracing::warn!(
            addr = %self.local_addr,
            refused = refused - logged,
            bad_tag = s.bad_tag,
            replay = s.replay,
            unknown_epoch = s.unknown_epoch,
            unknown_link = s.unknown_link,
            wrong_link = s.wrong_link,
            bad_header = s.bad_header,
            short = s.short,
            "refused datagrams that did not authenticate (totals since start)"
        );
    }

    /// Fires the role's timer if it is due. Returns whether it fired.
    fn fire_timer<F: FnMut(N::Event)>(&mut self, events: &mut F) -> bool {
        let now = self.clock.now();
        if self.node_timeout.is_none_or(|t| t > now) {
            return false;
        }
        self.stats.timeouts += 1;
        self.node_turn(now, Some(Input::Timeout), events);
        true
    }

    /// One turn of the loop (`onepipe_proto::drive`): the role handles `input` if there is one
    /// (without, the outputs of a mutation made otherwise), its outputs are carried out in
    /// order — sends to the `Coalescer`, events to `events`, management messages to the queue
    /// [`Driver::poll_mgmt`] empties — and its timer is re-read.
    fn node_turn<F: FnMut(N::Event)>(
        &mut self,
        now: Instant,
        input: Option<Input<Packet, N::Mgmt>>,
        events: &mut F,
    ) {
        let turn = drive::turn_in(
            self,
            |d| &mut d.node,
            input.map(|i| (now, i)),
            |d, output| match output {
                Output::Send { port, packet } => {
                    if d.out_addrs.get(port.index()).is_some_and(Option::is_some) {
                        d.coalescer.push(now, port, &packet);
                    } else {
                        d.stats.unknown_output_port += 1;
                    }
                }
                Output::Event(e) => events(e),
                Output::Mgmt { to, msg } => {
                    if d.mgmt.len() < MGMT_QUEUE_MAX {
                        d.mgmt.push_back((to, msg));
                    } else {
                        d.stats.mgmt_dropped += 1;
                    }
                }
            },
        );
        self.stats.role_outputs += turn.outputs as u64;
        self.node_timeout = turn.timeout;
    }

    /// Sends the send queue, `send_batch_len` datagrams per `sendmmsg`, until it is empty or
    /// the socket is full.
    fn transmit(&mut self) -> io::Result<()> {
        if let Some(auth) = &mut self.auth {
            self.coalescer
                .seal_queued(|port, segment| auth.seal(port, segment).is_ok());
        }
        while !self.coalescer.queue().is_empty() {
            let batch = self.coalescer.queue().len().min(self.cfg.send_batch_len);
            let out_addrs = &self.out_addrs;
            let datagrams = self.coalescer.queue().iter().take(batch).map(|d| {
                let addr = out_addrs[d.port.index()]
                    .as_ref()
                    .expect("only ports with an address are queued");
                (&d.bytes[..], addr)
            });
            self.stats.sendmmsg_calls += 1;
            match sys::send_batch(&self.socket, datagrams) {
                Ok(sent) if sent > 0 => {
                    for d in self.coalescer.queue().iter().take(sent) {
                        self.stats.datagrams_sent += u64::from(d.segments);
                        self.stats.gso_sends += u64::from(d.segments > 1);
                        self.stats.packets_sent += u64::from(d.packets);
                        self.stats.bytes_sent += d.bytes.len() as u64;
                    }
                    self.coalescer.pop_sent(sent);
                }
                Ok(_) => return self.await_writable(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return self.await_writable(),
                Err(_) => {
                    // The first datagram was refused for good (EMSGSIZE, EPERM, ...): drop it
                    // so the rest can go.
                    self.stats.send_errors += 1;
                    self.coalescer.pop_sent(1);
                }
            }
        }
        self.poller.set_want_writable(&self.socket, false)
    }

    fn await_writable(&mut self) -> io::Result<()> {
        self.stats.send_would_block += 1;
        self.poller.set_want_writable(&self.socket, true)
    }

    /// Waits until something is due: input, the role's timer, a flush deadline, `until`, or a
    /// wake-up. Spins first for `spin_ns`, then blocks.
    fn wait(&mut self, until: Instant) -> io::Result<()> {
        let deadline = [self.node_timeout, self.coalescer.next_deadline()]
            .into_iter()
            .flatten()
            .fold(until, Instant::min);
        let now = self.clock.now();
        if deadline <= now {
            return Ok(());
        }
        if self.cfg.spin_ns > 0 {
            let spin_end = deadline.min(now + self.cfg.spin_ns);
            loop {
                if self.poller.poll()?.any() {
                    return Ok(());
                }
                if self.clock.now() >= spin_end {
                    break;
                }
                std::hint::spin_loop();
            }
            if spin_end >= deadline {
                return Ok(());
            }
        }
        self.stats.blocks += 1;
        self.poller
            .block_until(self.clock.to_monotonic_ns(deadline))?;
        Ok(())
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 2)
}
