//! Counters a driver keeps. Never reset; never logged per packet (read them instead).

use crate::coalesce::CoalesceStats;
use onepipe_proto::gaps::BarrierGaps;
use onepipe_proto::time::Instant;

/// What a [`crate::Driver`] has done, counted. Packets are 1Pipe packets; datagrams are UDP
/// datagrams, each carrying one or more packets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// UDP datagrams handed to the kernel (a GSO send counts each datagram the kernel makes).
    pub datagrams_sent: u64,
    /// Management messages of the role dropped because its owner did not take them
    /// ([`crate::Driver::poll_mgmt`]).
    pub mgmt_dropped: u64,
    /// Sends of more than one datagram at once (UDP GSO).
    pub gso_sends: u64,
    /// Packets in those datagrams.
    pub packets_sent: u64,
    /// Bytes in those datagrams (UDP payload).
    pub bytes_sent: u64,
    /// UDP datagrams received from known addresses (a GRO receive counts each it holds).
    pub datagrams_received: u64,
    /// Receives that held more than one datagram (UDP GRO).
    pub gro_receives: u64,
    /// Datagrams the kernel dropped because this socket's receive buffer was full
    /// (`SO_RXQ_OVFL`, as of the last datagram received; 0 where the kernel does not count).
    pub datagrams_dropped_rcvbuf: u64,
    /// Bytes of UDP payload per datagram on the wire (the coalescing limit in use).
    pub datagram_len_max: u64,
    /// UDP GSO in use: the kernel took `UDP_SEGMENT`, and sends may carry several datagrams.
    pub gso: bool,
    /// UDP GRO in use: the kernel took `UDP_GRO`.
    pub gro: bool,
    /// Packets decoded from them and handed to the role.
    pub packets_received: u64,
    /// Bytes received from known addresses (UDP payload).
    pub bytes_received: u64,
    /// Datagrams that ended in a malformed packet (the rest of each was dropped).
    pub decode_errors: u64,
    /// Datagrams longer than a receive slot, cut by the kernel (only their whole packets were
    /// used).
    pub datagrams_truncated: u64,
    /// Datagrams from addresses in no port-table entry: dropped.
    pub unknown_source: u64,
    /// Packets the role sent to an output port with no address: dropped.
    pub unknown_output_port: u64,
    /// `sendmmsg` calls that found the socket buffer full (`EAGAIN`); the datagrams stayed
    /// queued and were retried when the socket became writable.
    pub send_would_block: u64,
    /// Datagrams the kernel refused for good (for example `EMSGSIZE`): dropped.
    pub send_errors: u64,
    /// `recvmmsg` failures other than "nothing to read".
    pub recv_errors: u64,
    /// `sendmmsg` calls.
    pub sendmmsg_calls: u64,
    /// `recvmmsg` calls that returned at least one datagram.
    pub recvmmsg_calls: u64,
    /// Times the role's timer fired (`Input::Timeout`).
    pub timeouts: u64,
    /// Outputs the role gave, of every kind (sends, events, management messages), as
    /// `onepipe_proto::drive` counted them.
    pub role_outputs: u64,
    /// Loop turns (receive, timers, flush, send).
    pub turns: u64,
    /// Times the loop blocked in `epoll_wait`.
    pub blocks: u64,
    /// The coalescing layer's counters: flushes by reason, oversize packets, queue drops.
    pub coalesce: CoalesceStats,
    /// The auth layer's counters: datagrams sealed and opened, refusals by reason (all zero
    /// when datagrams are not sealed).
    pub auth: crate::auth::AuthStats,
}

impl DriverStats {
    /// The counters by name, for reports and health messages.
    pub fn counters(&self) -> std::collections::BTreeMap<String, u64> {
        let c = &self.coalesce;
        [
            ("datagrams_sent", self.datagrams_sent),
            ("gso_sends", self.gso_sends),
            ("packets_sent", self.packets_sent),
            ("bytes_sent", self.bytes_sent),
            ("datagrams_received", self.datagrams_received),
            ("gro_receives", self.gro_receives),
            ("datagrams_dropped_rcvbuf", self.datagrams_dropped_rcvbuf),
            ("datagram_len_max", self.datagram_len_max),
            ("gso", u64::from(self.gso)),
            ("gro", u64::from(self.gro)),
            ("packets_received", self.packets_received),
            ("bytes_received", self.bytes_received),
            ("decode_errors", self.decode_errors),
            ("datagrams_truncated", self.datagrams_truncated),
            ("unknown_source", self.unknown_source),
            ("unknown_output_port", self.unknown_output_port),
            ("send_would_block", self.send_would_block),
            ("send_errors", self.send_errors),
            ("recv_errors", self.recv_errors),
            ("sendmmsg_calls", self.sendmmsg_calls),
            ("recvmmsg_calls", self.recvmmsg_calls),
            ("timeouts", self.timeouts),
            ("role_outputs", self.role_outputs),
            ("turns", self.turns),
            ("blocks", self.blocks),
            ("flushes_full", c.flushes_full),
            ("flushes_delay", c.flushes_delay),
            ("flushes_idle", c.flushes_idle),
            ("padding_bytes", c.padding_bytes),
            ("packets_too_large", c.packets_too_large),
            ("send_queue_dropped_packets", c.send_queue_dropped_packets),
            ("unsealed_dropped_packets", c.unsealed_dropped_packets),
        ]
        .into_iter()
        .chain(self.auth.counters())
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Mean packets per datagram sent (0 before anything was sent).
    pub fn packets_per_datagram_sent(&self) -> f64 {
        if self.datagrams_sent == 0 {
            0.0
        } else {
            self.packets_sent as f64 / self.datagrams_sent as f64
        }
    }
}

/// One input link's barriers, as a daemon last saw them (for its metrics endpoint).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkBarriers {
    /// The input port (the aggregator's port number; 0 for an endpoint's one uplink).
    pub link: u32,
    /// The best-effort barrier on it (§4.1), raw timestamp ns; `None` before the first.
    pub barrier: Option<u64>,
    /// The commit barrier on it (§5.1).
    pub commit_barrier: Option<u64>,
    /// How far the best-effort barrier trails the daemon's clock (ns; negative when it is
    /// ahead, as a skewed clock can make it).
    pub barrier_lag_ns: Option<i64>,
    /// The largest interval between two consecutive barrier updates (beacons or
    /// barrier-carrying data) received on the link since the start, ns (§4.2); `None` before
    /// the first update.
    pub barrier_gap_ns_max: Option<u64>,
    /// The time since the last one, ns.
    pub since_barrier_ns: Option<u64>,
}

impl LinkBarriers {
    /// The gap fields from a role's [`BarrierGaps`] for the link, at `now` on the role's
    /// clock.
    pub fn with_gaps(mut self, gaps: Option<BarrierGaps>, now: Instant) -> LinkBarriers {
        if let Some(g) = gaps.filter(|g| g.last.is_some()) {
            self.barrier_gap_ns_max = Some(g.gap_max_ns);
            self.since_barrier_ns = g.since_ns(now);
        }
        self
    }
}

/// What a running daemon last published for its metrics endpoint: its counters and its input
/// links' barriers. The daemon's loop copies them in now and then ([`Telemetry::publish`]);
/// another thread reads a copy ([`Telemetry::latest`]) without ever touching the role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TelemetrySnapshot {
    /// The counters by name, as in the daemon's `Health` message.
    pub counters: std::collections::BTreeMap<String, u64>,
    /// Per input link.
    pub links: Vec<LinkBarriers>,
    /// Packets dropped below the barrier (§4.1), by sending process id: an endpoint's, for
    /// the senders that had one.
    pub late_dropped_by_sender: std::collections::BTreeMap<u32, u64>,
}

/// The hand-over point between a daemon's loop and its metrics endpoint: where the endpoint
/// is (reported to the controller in `Health`), and the last snapshot.
#[derive(Debug, Default)]
pub struct Telemetry {
    /// The management HTTP endpoint's address, if the daemon serves one.
    pub metrics_addr: Option<std::net::SocketAddr>,
    latest: std::sync::Mutex<TelemetrySnapshot>,
}

impl Telemetry {
    /// A hand-over point for a daemon whose metrics endpoint is at `metrics_addr`.
    pub fn new(metrics_addr: Option<std::net::SocketAddr>) -> Telemetry {
        Telemetry {
            metrics_addr,
            latest: Default::default(),
        }
    }

    /// Replaces the snapshot (the daemon's loop; the lock is held for one move).
    pub fn publish(&self, snapshot: TelemetrySnapshot) {
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = snapshot;
    }

    /// A copy of the last snapshot.
    pub fn latest(&self) -> TelemetrySnapshot {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}
