//! The operating-system side: socket setup, batched receive and send, and the poller.
//!
//! * Sockets are made with `socket2` (non-blocking, close-on-exec, `SO_RCVBUF`/`SO_SNDBUF`).
//! * Receive is `recvmmsg` through `nix`, into one preallocated buffer cut into slots, with
//!   preallocated `mmsghdr`s and source addresses (`nix::sys::socket::MultiHeaders`, kept per
//!   thread).
//! * Send is `sendmmsg` through `rustix`: each datagram of a batch may go to a different peer
//!   (a scattering, an aggregator's beacon fan-out), which only `sendmmsg` batches. `nix`'s
//!   `sendmmsg` reports how many datagrams went out only through an iterator that reads the
//!   (never written) source-address slots of its headers, i.e. uninitialised memory; `rustix`
//!   returns the count directly. The header arrays live on the stack, sized [`BATCH_LEN_MAX`].
//! * The poller is `epoll` over the socket, a `timerfd` (nanosecond deadlines, which
//!   `epoll_wait`'s millisecond timeout cannot express and which timer slack does not stretch)
//!   and an `eventfd` other threads use to wake the loop ([`Waker`]).
//!
//! Everything here is safe Rust: the crate keeps the workspace's `forbid(unsafe_code)`.

use crate::config::{DriverConfig, BATCH_LEN_MAX};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::socket::{
    recvmmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, MultiHeaders, SockaddrStorage,
};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags, SocketAddrAny};
use socket2::{Domain, Protocol, Socket, Type};
use std::cell::RefCell;
use std::io::{self, IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

/// Opens a non-blocking UDP socket bound to `addr` (port 0: any free port), with the socket
/// buffer sizes of `cfg`. The kernel may grant less than asked (`net.core.rmem_max`,
/// `wmem_max`); read the result back through `socket2::SockRef` if it matters.
pub fn bind_udp(addr: SocketAddr, cfg: &DriverConfig) -> io::Result<UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::DGRAM.nonblocking().cloexec(),
        Some(Protocol::UDP),
    )?;
    socket.set_recv_buffer_size(cfg.socket_recv_buffer_len)?;
    socket.set_send_buffer_size(cfg.socket_send_buffer_len)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// What the kernel let a socket have: UDP GSO and GRO, and the count of datagrams dropped at
/// a full receive buffer (`SO_RXQ_OVFL`). Each is asked for and used only where granted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketFeatures {
    /// `UDP_SEGMENT` is set: a send longer than one segment is cut into datagrams.
    pub gso: bool,
    /// `UDP_GRO` is on: datagrams may arrive coalesced, with their segment length.
    pub gro: bool,
    /// `SO_RXQ_OVFL` is on: received datagrams carry the socket's drop count.
    pub rxq_ovfl: bool,
}

/// Asks the kernel for what `cfg` wants of `socket`: GSO with segments of
/// `coalesce.datagram_len_max` bytes (if `segments_max > 1`), GRO (if `gro`), the drop count
/// always; and the don't-fragment bit, so a datagram too long for its path is refused
/// (`EMSGSIZE`, counted) instead of IP-fragmented. Never fails: what is refused is reported
/// off.
pub fn configure_socket(socket: &UdpSocket, cfg: &DriverConfig) -> SocketFeatures {
    let seg = u16::try_from(cfg.coalesce.datagram_len_max).unwrap_or(u16::MAX);
    let gso = cfg.coalesce.segments_max > 1
        && setsockopt(socket, sockopt::UdpGsoSegment, &i32::from(seg)).is_ok();
    let gro = cfg.gro && setsockopt(socket, sockopt::UdpGroSegment, &true).is_ok();
    let rxq_ovfl = setsockopt(socket, sockopt::RxqOvfl, &1).is_ok();
    let _ = match socket.local_addr() {
        Ok(SocketAddr::V4(_)) => rustix::net::sockopt::set_ip_mtu_discover(
            socket,
            rustix::net::sockopt::Ipv4PathMtuDiscovery::DO,
        ),
        Ok(SocketAddr::V6(_)) => rustix::net::sockopt::set_ipv6_mtu_discover(
            socket,
            rustix::net::sockopt::Ipv6PathMtuDiscovery::DO,
        ),
        Err(_) => Ok(()),
    };
    SocketFeatures { gso, gro, rxq_ovfl }
}

/// The largest UDP payload that reaches `peer` in one IP packet: the MTU of the route the
/// kernel would take to it (`IP_MTU` of a socket connected there; no packet is sent), less the
/// IP and UDP headers, at most [`crate::config::UDP_PAYLOAD_MAX`]. Loopback's is 65,507; an
/// Ethernet LAN's 1,472, or 8,972 with jumbo frames.
///
/// # Errors
/// No route to `peer`, or the kernel will not say.
pub fn path_payload_max(peer: SocketAddr) -> io::Result<usize> {
    let socket = Socket::new(Domain::for_address(peer), Type::DGRAM.cloexec(), None)?;
    socket.connect(&peer.into())?;
    let (mtu, headers) = match peer {
        SocketAddr::V4(_) => (rustix::net::sockopt::ip_mtu(&socket)?, 20 + 8),
        SocketAddr::V6(_) => (rustix::net::sockopt::ipv6_mtu(&socket)?, 40 + 8),
    };
    Ok((mtu as usize)
        .saturating_sub(headers)
        .min(crate::config::UDP_PAYLOAD_MAX))
}

/// CPU time this process has used so far, user and system together, in nanoseconds
/// (`getrusage(RUSAGE_SELF)`; 0 if the kernel will not say).
pub fn process_cpu_ns() -> u64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0;
    };
    let ns = |t: nix::sys::time::TimeVal| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
            + u64::try_from(t.tv_usec()).unwrap_or(0) * 1_000
    };
    ns(u.user_time()) + ns(u.system_time())
}

/// One received buffer: where it lies in the receive buffer, who sent it, and — with GRO —
/// the length of the datagrams it holds.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Received {
    pub len: usize,
    pub from: Option<SocketAddr>,
    pub truncated: bool,
    /// GRO: the length of each datagram in the buffer (all but the last); 0: one datagram.
    pub segment_len: usize,
}

/// Preallocated state for `recvmmsg`: one buffer cut into slots, and the
/// per-datagram results. The `mmsghdr` array lives in [`RECV_HEADERS`].
pub(crate) struct RecvBatch {
    buf: Vec<u8>,
    slot_len: usize,
    results: Vec<Received>,
    /// The largest drop count (`SO_RXQ_OVFL`) a received datagram carried: datagrams the
    /// kernel dropped at this socket's full receive buffer so far.
    kernel_drops: u32,
}

thread_local! {
    /// `recvmmsg` headers, source-address slots and control-message buffers, per thread and
    /// address family. They hold raw pointers, so `nix` makes them neither `Send` nor `Sync`;
    /// keeping them here rather than in the driver keeps [`crate::Driver`] `Send` without
    /// `unsafe`. The pointers into a receive buffer are rewritten by every call before the
    /// kernel sees them — but not the lengths: the kernel shrinks each used slot's control
    /// length to what it wrote there (0 when a datagram came without GRO's segment length or
    /// the drop count) and its address length to the last address, and `nix` does not restore
    /// them. So a set serves until a call receives something, and the next call makes a fresh
    /// one (a few KiB; a receive that finds nothing keeps it). Without that, a GRO buffer after
    /// the first would arrive with its control message cut off, and be decoded as one datagram.
    static RECV_HEADERS: [RefCell<Option<MultiHeaders<SockaddrStorage>>>; 2] =
        const { [RefCell::new(None), RefCell::new(None)] };
}

impl core::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("slot_len", &self.slot_len)
            .field("results", &self.results.len())
            .finish_non_exhaustive()
    }
}

impl RecvBatch {
    /// `slots` receive slots of `slot_len` bytes each.
    pub fn new(slot_len: usize, slots: usize) -> RecvBatch {
        assert!(slots > 0 && slots <= BATCH_LEN_MAX);
        RecvBatch {
            buf: vec![0; slot_len * slots],
            slot_len,
            results: Vec::with_capacity(BATCH_LEN_MAX),
            kernel_drops: 0,
        }
    }

    /// Datagrams the kernel dropped at this socket's full receive buffer, as of the last
    /// datagram received (`SO_RXQ_OVFL`; 0 where the kernel does not count).
    pub fn kernel_drops(&self) -> u32 {
        self.kernel_drops
    }

    /// Receives up to `max` datagrams without blocking. Returns how many arrived (0 when the
    /// socket had nothing, or a signal interrupted the call); read them with
    /// [`RecvBatch::datagram`].
    pub fn recv(&mut self, socket: &UdpSocket, family_v6: bool, max: usize) -> io::Result<usize> {
        debug_assert!(max > 0 && max * self.slot_len <= self.buf.len());
        self.results.clear();
        let (buf, slot_len, results) = (&mut self.buf, self.slot_len, &mut self.results);
        let drops = &mut self.kernel_drops;
        RECV_HEADERS.with(|cells| {
            let mut cell = cells[usize::from(family_v6)].borrow_mut();
            let headers = cell.get_or_insert_with(|| {
                // Room for the two control messages asked for: GRO's segment length and the
                // drop count.
                let space = nix::cmsg_space!(i32, u32);
                MultiHeaders::preallocate(max, Some(space))
            });
            let mut slots = buf.chunks_exact_mut(slot_len);
            let mut iovs: [[IoSliceMut<'_>; 1]; BATCH_LEN_MAX] =
                std::array::from_fn(|_| [IoSliceMut::new(slots.next().unwrap_or(&mut []))]);
            match recvmmsg(
                socket.as_raw_fd(),
                headers,
                iovs[..max].iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            ) {
                Ok(received) => {
                    for msg in received {
                        let mut segment_len = 0;
                        // Room was made for every control message asked for: a cut one
                        // (`MSG_CTRUNC`) is a bug, and its datagram would be misread.
                        debug_assert!(!msg.flags.contains(MsgFlags::MSG_CTRUNC));
                        for cmsg in msg.cmsgs().into_iter().flatten() {
                            match cmsg {
                                ControlMessageOwned::UdpGroSegments(len) => {
                                    segment_len = usize::try_from(len).unwrap_or(0);
                                }
                                ControlMessageOwned::RxqOvfl(n) => *drops = (*drops).max(n),
                                _ => {}
                            }
                        }
                        results.push(Received {
                            len: msg.bytes,
                            from: msg.address.as_ref().and_then(to_std),
                            truncated: msg.flags.contains(MsgFlags::MSG_TRUNC),
                            segment_len,
                        });
                    }
                    if !results.is_empty() {
                        // The kernel shrank the used slots' lengths: fresh ones next time.
                        *cell = None;
                    }
                    Ok(results.len())
                }
                Err(Errno::EAGAIN | Errno::EINTR) => Ok(0),
                Err(e) => Err(e.into()),
            }
        })
    }

    /// Datagram `i` of the last [`RecvBatch::recv`]: its bytes (mutable, to open in place) and
    /// metadata.
    pub fn datagram_mut(&mut self, i: usize) -> (&mut [u8], Received) {
        let r = self.results[i];
        let start = i * self.slot_len;
        (&mut self.buf[start..start + r.len.min(self.slot_len)], r)
    }
}

fn to_std(a: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::from(*v4));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::from(*v6))
}

/// The `SocketAddrAny` form of an address, as `sendmmsg` headers point to it.
pub(crate) fn sendmmsg_addr(addr: SocketAddr) -> SocketAddrAny {
    use rustix::net::addr::SocketAddrArg;
    addr.as_any()
}

/// Sends `datagrams` (at most [`BATCH_LEN_MAX`]) in one `sendmmsg`, each to its own address.
/// Returns how many the kernel took, from the front; `Err` when it took none (`WouldBlock` when
/// the socket buffer is full).
pub(crate) fn send_batch<'a>(
    socket: &UdpSocket,
    datagrams: impl Iterator<Item = (&'a [u8], &'a SocketAddrAny)>,
) -> io::Result<usize> {
    let mut iovs: [[IoSlice<'a>; 1]; BATCH_LEN_MAX] = std::array::from_fn(|_| [IoSlice::new(&[])]);
    let mut addrs: [Option<&'a SocketAddrAny>; BATCH_LEN_MAX] = [None; BATCH_LEN_MAX];
    let mut n = 0;
    for ((bytes, addr), (iov, slot)) in datagrams.zip(iovs.iter_mut().zip(addrs.iter_mut())) {
        *iov = [IoSlice::new(bytes)];
        *slot = Some(addr);
        n += 1;
    }
    if n == 0 {
        return Ok(0);
    }
    let mut controls: [SendAncillaryBuffer<'_, '_, '_>; BATCH_LEN_MAX] =
        std::array::from_fn(|_| SendAncillaryBuffer::default());
    let mut controls = controls.iter_mut();
    let mut headers: [MMsgHdr<'_>; BATCH_LEN_MAX] = std::array::from_fn(|i| {
        let control = controls.next().expect("one control buffer per header");
        match addrs[i] {
            Some(addr) => MMsgHdr::new_with_addr(addr, &iovs[i], control),
            None => MMsgHdr::new(&[], control),
        }
    });
    loop {
        match rustix::net::sendmmsg(socket, &mut headers[..n], SendFlags::DONTWAIT) {
            Ok(sent) => return Ok(sent),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// What woke the poller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Readiness {
    pub readable: bool,
    pub writable: bool,
    pub timer: bool,
    pub woken: bool,
}

impl Readiness {
    pub fn any(self) -> bool {
        self.readable || self.writable || self.timer || self.woken
    }
}

const TOKEN_SOCKET: u64 = 0;
const TOKEN_TIMER: u64 = 1;
const TOKEN_WAKER: u64 = 2;

/// `epoll` over the socket, a deadline timer and a waker.
#[derive(Debug)]
pub(crate) struct Poller {
    epoll: Epoll,
    timer: TimerFd,
    /// The `CLOCK_MONOTONIC` deadline the timer is armed for, if it is armed and has not fired.
    armed_ns: Option<u64>,
    waker: Arc<EventFd>,
    want_writable: bool,
}

impl Poller {
    pub fn new(socket: &UdpSocket) -> io::Result<Poller> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        let waker = Arc::new(EventFd::from_flags(
            EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC,
        )?);
        epoll.add(socket, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_SOCKET))?;
        epoll.add(&timer, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_TIMER))?;
        epoll.add(&*waker, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_WAKER))?;
        Ok(Poller {
            epoll,
            timer,
            armed_ns: None,
            waker,
            want_writable: false,
        })
    }

    pub fn waker(&self) -> Waker {
        Waker(self.waker.clone())
    }

    /// Also wake when the socket becomes writable (after `EAGAIN` on send), or stop.
    pub fn set_want_writable(&mut self, socket: &UdpSocket, on: bool) -> io::Result<()> {
        if self.want_writable == on {
            return Ok(());
        }
        let flags = if on {
            EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT
        } else {
            EpollFlags::EPOLLIN
        };
        self.epoll
            .modify(socket, &mut EpollEvent::new(flags, TOKEN_SOCKET))?;
        self.want_writable = on;
        Ok(())
    }

    /// Checks readiness without blocking.
    pub fn poll(&mut self) -> io::Result<Readiness> {
        self.wait(EpollTimeout::ZERO)
    }

    /// Blocks until the socket is ready, the waker is woken, or `CLOCK_MONOTONIC` reaches
    /// `deadline_ns`.
    pub fn block_until(&mut self, deadline_ns: u64) -> io::Result<Readiness> {
        if self.armed_ns != Some(deadline_ns) {
            let at = TimeSpec::from_duration(Duration::from_nanos(deadline_ns.max(1)));
            self.timer.set(
                Expiration::OneShot(at),
                TimerSetTimeFlags::TFD_TIMER_ABSTIME,
            )?;
            self.armed_ns = Some(deadline_ns);
        }
        self.wait(EpollTimeout::NONE)
    }

    fn wait(&mut self, timeout: EpollTimeout) -> io::Result<Readiness> {
        let mut events = [EpollEvent::empty(); 3];
        let n = loop {
            match self.epoll.wait(&mut events, timeout) {
                Ok(n) => break n,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        };
        let mut r = Readiness::default();
        for e in &events[..n] {
            match e.data() {
                TOKEN_SOCKET => {
                    r.readable |= e.events().contains(EpollFlags::EPOLLIN);
                    r.writable |= e.events().contains(EpollFlags::EPOLLOUT);
                }
                TOKEN_TIMER => {
                    r.timer = true;
                    // Disarm (and clear readiness): the next block re-arms for its deadline.
                    self.timer.unset()?;
                    self.armed_ns = None;
                }
                TOKEN_WAKER => {
                    r.woken = true;
                    match self.waker.read() {
                        Ok(_) | Err(Errno::EAGAIN) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => unreachable!("only three descriptors are registered"),
            }
        }
        Ok(r)
    }
}

/// Wakes a driver blocked in its poll loop from another thread (an application thread that has
/// queued a command, a shutdown request). Cheap to clone; waking an awake driver makes its next
/// wait return at once.
#[derive(Clone, Debug)]
pub struct Waker(Arc<EventFd>);

impl Waker {
    /// Wakes the driver.
    pub fn wake(&self) -> io::Result<()> {
        match self.0.write(1) {
            // EAGAIN: the counter is saturated, so the driver is already due to wake.
            Ok(_) | Err(Errno::EAGAIN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
