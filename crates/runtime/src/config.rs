//! Transport configuration of a [`crate::Driver`]: coalescing policy, batch sizes, socket buffers,
//! spinning. Every limit has a default chosen for one machine running a cluster over loopback,
//! and is checked by [`DriverConfig::check`] before a driver is built.
//!
//! What it is not: the roles' own configuration (beacon interval, MTU, timeouts) lives in
//! `onepipe_proto::host::HostConfig` and `onepipe_proto::switch::SwitchConfig`;
//! [`crate::roles::LiveRoles`] fills those in with live defaults.

use core::fmt;
use onepipe_proto::wire::BEACON_LEN;

/// Largest UDP payload over IPv4: 65,535 − 20 (IP header) − 8 (UDP header).
pub const UDP_PAYLOAD_MAX: usize = 65_507;

/// Default datagram size: a 1,500-byte Ethernet MTU less the IPv4 and UDP headers, so a datagram
/// is never IP-fragmented on a LAN (loopback's MTU is 64 KiB, so anything up to
/// [`UDP_PAYLOAD_MAX`] works there).
pub const DATAGRAM_LEN_MAX_DEFAULT: usize = 1_472;

/// Default Δ of the batching policy: the longest a packet waits in a coalescing buffer while the
/// loop is busy.
pub const FLUSH_DELAY_NS_DEFAULT: u64 = 20_000;

/// The smallest encoded packet (a beacon). A coalescing buffer with less room than this left is
/// full whatever comes next.
pub const PACKET_LEN_MIN: usize = BEACON_LEN;

/// Most datagrams one `recvmmsg` or `sendmmsg` call moves: the size of the preallocated header
/// arrays.
pub const BATCH_LEN_MAX: usize = 64;

/// Most segments one UDP GSO send carries (the kernel's `UDP_MAX_SEGMENTS` on older kernels).
pub const GSO_SEGMENTS_MAX: usize = 64;

/// The smallest `datagram_len_max` a live cluster accepts: the largest ACK batch (§6.1) must fit
/// one datagram, since with GSO a longer packet could not be sent whole.
pub const DATAGRAM_LEN_MIN: usize = onepipe_proto::wire::ACK_BATCH_BYTES_MAX;

const _: () = assert!(PACKET_LEN_MIN <= DATAGRAM_LEN_MAX_DEFAULT);
const _: () = assert!(DATAGRAM_LEN_MAX_DEFAULT <= UDP_PAYLOAD_MAX);
const _: () = assert!(onepipe_proto::wire::NAK_LEN >= PACKET_LEN_MIN);
const _: () = assert!(onepipe_proto::wire::ACK_LEN >= PACKET_LEN_MIN);
// The largest ACK batch (§6.1: a host's ACKs to another host in one packet) fits one datagram.
const _: () = assert!(onepipe_proto::wire::ACK_BATCH_BYTES_MAX <= DATAGRAM_LEN_MAX_DEFAULT);
const _: () = assert!(onepipe_proto::wire::DATA_HEADER_LEN >= PACKET_LEN_MIN);

/// The coalescing policy (paxos-batching-pipelining §IV-A, Fig. 6: a batch goes out when it is
/// full or when its oldest request has waited Δ_B; and, here, as soon as the loop is idle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoalesceConfig {
    /// BSZ: bytes of encoded packets in one datagram. A packet that would overflow the pending
    /// datagram flushes it first. A single packet larger than this goes alone in a datagram of
    /// its own size (up to [`UDP_PAYLOAD_MAX`]), as Fig. 6 lets a large request exceed BSZ.
    pub datagram_len_max: usize,
    /// Most packets in one datagram. `1` switches coalescing off: every packet is its own
    /// datagram (still sent in `sendmmsg` batches).
    pub packets_per_datagram_max: usize,
    /// Δ_B: the longest the oldest packet of a pending datagram waits while the loop is busy.
    pub flush_delay_ns: u64,
    /// Most flushed datagrams waiting for the socket (after `EAGAIN`); further flushes are
    /// dropped and counted.
    pub send_queue_len_max: usize,
    /// Most bytes of flushed datagrams waiting for the socket: 64 KiB datagrams make
    /// `send_queue_len_max` alone a loose bound on memory.
    pub send_queue_bytes_max: usize,
    /// UDP GSO (`UDP_SEGMENT`): how many datagrams of `datagram_len_max` bytes one send may
    /// carry, the kernel cutting them apart (each but the last padded to the full length, see
    /// [`crate::coalesce`]). 1: no GSO. The driver sets the socket's segment size to
    /// `datagram_len_max` and falls back to 1 where the kernel refuses it.
    pub segments_max: usize,
    /// Bytes left free at the start of every datagram (GSO segment) for the transport's own
    /// framing: the auth header ([`crate::auth::HEADER_LEN`]) when datagrams are sealed, else 0.
    pub segment_head_len: usize,
    /// Bytes left free at the end of every datagram (GSO segment): the auth tag
    /// ([`crate::auth::TAG_LEN`]) when datagrams are sealed, else 0.
    pub segment_tail_len: usize,
}

impl Default for CoalesceConfig {
    fn default() -> Self {
        CoalesceConfig {
            datagram_len_max: DATAGRAM_LEN_MAX_DEFAULT,
            packets_per_datagram_max: 1_024,
            flush_delay_ns: FLUSH_DELAY_NS_DEFAULT,
            send_queue_len_max: 4_096,
            send_queue_bytes_max: 16 << 20,
            segments_max: 1,
            segment_head_len: 0,
            segment_tail_len: 0,
        }
    }
}

impl CoalesceConfig {
    /// The same policy with coalescing switched off (one packet per datagram).
    pub fn uncoalesced(self) -> CoalesceConfig {
        CoalesceConfig {
            packets_per_datagram_max: 1,
            ..self
        }
    }

    /// The same policy with room for the auth header and tag in every datagram (segment).
    pub fn sealed(self) -> CoalesceConfig {
        CoalesceConfig {
            segment_head_len: crate::auth::HEADER_LEN,
            segment_tail_len: crate::auth::TAG_LEN,
            ..self
        }
    }

    /// Bytes of packets one datagram (segment) holds: `datagram_len_max` less the framing.
    pub fn packet_room(&self) -> usize {
        self.datagram_len_max
            .saturating_sub(self.segment_head_len + self.segment_tail_len)
    }

    /// Checks the limits and their relationships.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.packet_room() < PACKET_LEN_MIN {
            return Err(ConfigError::new(
                "segment_head_len",
                format!(
                    "with segment_tail_len leaves less than {PACKET_LEN_MIN} bytes of a datagram for packets"
                ),
            ));
        }
        if self.datagram_len_max < PACKET_LEN_MIN || self.datagram_len_max > UDP_PAYLOAD_MAX {
            return Err(ConfigError::new(
                "datagram_len_max",
                format!("must be in {PACKET_LEN_MIN}..={UDP_PAYLOAD_MAX}"),
            ));
        }
        if self.packets_per_datagram_max == 0 {
            return Err(ConfigError::new(
                "packets_per_datagram_max",
                "must be at least 1",
            ));
        }
        if self.send_queue_len_max == 0 {
            return Err(ConfigError::new("send_queue_len_max", "must be at least 1"));
        }
        if self.send_queue_bytes_max < UDP_PAYLOAD_MAX {
            return Err(ConfigError::new(
                "send_queue_bytes_max",
                format!("must be at least {UDP_PAYLOAD_MAX} (one datagram)"),
            ));
        }
        if self.segments_max == 0 || self.segments_max > GSO_SEGMENTS_MAX {
            return Err(ConfigError::new(
                "segments_max",
                format!("must be in 1..={GSO_SEGMENTS_MAX}"),
            ));
        }
        if self.segments_max > 1 && self.datagram_len_max < DATAGRAM_LEN_MIN {
            return Err(ConfigError::new(
                "segments_max",
                format!(
                    "GSO needs datagram_len_max of at least {DATAGRAM_LEN_MIN} (every packet must fit one segment)"
                ),
            ));
        }
        Ok(())
    }

    /// The longest send this policy makes: one datagram, or with GSO as many segments as fit
    /// one UDP send.
    pub fn send_len_max(&self) -> usize {
        if self.segments_max <= 1 {
            self.datagram_len_max
        } else {
            (self.datagram_len_max * self.segments_max).min(UDP_PAYLOAD_MAX)
        }
    }
}

/// Everything a [`crate::Driver`] needs besides its role, socket and port table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverConfig {
    /// The coalescing policy.
    pub coalesce: CoalesceConfig,
    /// Datagrams one `recvmmsg` call may return (at most [`BATCH_LEN_MAX`]).
    pub recv_batch_len: usize,
    /// Datagrams one `sendmmsg` call may send (at most [`BATCH_LEN_MAX`]).
    pub send_batch_len: usize,
    /// `recvmmsg` calls per loop turn before timers and flushes get their turn, so a flood of
    /// input cannot starve them.
    pub recv_batches_per_turn_max: usize,
    /// Size of each receive buffer slot. A longer datagram is truncated by the kernel, counted
    /// (`datagrams_truncated`), and only its whole packets are used. The default takes any UDP
    /// datagram.
    pub recv_datagram_len_max: usize,
    /// `SO_RCVBUF` requested (the kernel caps it at `net.core.rmem_max` and doubles it).
    pub socket_recv_buffer_len: usize,
    /// `SO_SNDBUF` requested (capped at `net.core.wmem_max`).
    pub socket_send_buffer_len: usize,
    /// How long the loop polls the socket without sleeping before it blocks in `epoll_wait`
    /// (0: block at once). Spinning saves a wakeup (tens of µs) per idle period at the price of
    /// CPU time.
    pub spin_ns: u64,
    /// Ask the kernel for UDP GRO (`UDP_GRO`): datagrams of one GSO send (or of one flow, on a
    /// NIC that coalesces) arrive as one buffer, with their segment length. Where the kernel
    /// refuses, each datagram arrives alone; both decode the same.
    pub gro: bool,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            coalesce: CoalesceConfig::default(),
            recv_batch_len: 32,
            send_batch_len: 32,
            recv_batches_per_turn_max: 8,
            recv_datagram_len_max: UDP_PAYLOAD_MAX + 1,
            socket_recv_buffer_len: 4 << 20,
            socket_send_buffer_len: 4 << 20,
            spin_ns: 20_000,
            gro: true,
        }
    }
}

impl DriverConfig {
    /// Checks the limits and their relationships.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.coalesce.check()?;
        for (field, len) in [
            ("recv_batch_len", self.recv_batch_len),
            ("send_batch_len", self.send_batch_len),
        ] {
            if len == 0 || len > BATCH_LEN_MAX {
                return Err(ConfigError::new(
                    field,
                    format!("must be in 1..={BATCH_LEN_MAX}"),
                ));
            }
        }
        if self.recv_batches_per_turn_max == 0 {
            return Err(ConfigError::new(
                "recv_batches_per_turn_max",
                "must be at least 1",
            ));
        }
        if self.recv_datagram_len_max < self.coalesce.send_len_max() {
            return Err(ConfigError::new(
                "recv_datagram_len_max",
                "must be at least coalesce.datagram_len_max, or our own peers' datagrams would be truncated",
            ));
        }
        Ok(())
    }
}

/// A configuration value out of range: names the field and says why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl ConfigError {
    fn new(field: &'static str, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            field,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid driver configuration: {} {}",
            self.field, self.reason
        )
    }
}

impl std::error::Error for ConfigError {}

impl From<ConfigError> for std::io::Error {
    fn from(e: ConfigError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        DriverConfig::default().check().unwrap();
        CoalesceConfig::default().uncoalesced().check().unwrap();
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        let mut c = DriverConfig::default();
        c.coalesce.datagram_len_max = UDP_PAYLOAD_MAX + 1;
        assert_eq!(c.check().unwrap_err().field, "datagram_len_max");
        let c = DriverConfig {
            recv_batch_len: BATCH_LEN_MAX + 1,
            ..DriverConfig::default()
        };
        assert_eq!(c.check().unwrap_err().field, "recv_batch_len");
        let c = DriverConfig {
            recv_datagram_len_max: 100,
            ..DriverConfig::default()
        };
        assert_eq!(c.check().unwrap_err().field, "recv_datagram_len_max");
        let mut c = DriverConfig::default();
        c.coalesce.segments_max = GSO_SEGMENTS_MAX + 1;
        assert_eq!(c.check().unwrap_err().field, "segments_max");
        c.coalesce.segments_max = 2;
        c.coalesce.datagram_len_max = 500;
        assert_eq!(c.check().unwrap_err().field, "segments_max");
    }

    #[test]
    fn a_gso_send_holds_as_many_segments_as_one_udp_send_can() {
        let mut c = CoalesceConfig {
            segments_max: 64,
            ..CoalesceConfig::default()
        };
        assert_eq!(
            c.send_len_max(),
            UDP_PAYLOAD_MAX,
            "44 whole segments and a part"
        );
        c.segments_max = 8;
        assert_eq!(c.send_len_max(), 8 * 1_472);
        c.datagram_len_max = 9_000;
        assert_eq!(c.send_len_max(), UDP_PAYLOAD_MAX);
        c.segments_max = 1;
        assert_eq!(c.send_len_max(), 9_000);
    }
}
