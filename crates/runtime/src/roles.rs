//! Live defaults for the 1Pipe roles.
//!
//! The roles' own defaults suit the simulator (3 µs beacons on µs links). Over UDP a datagram
//! costs microseconds of kernel time, so the live runtime beacons every millisecond by default,
//! sizes the host's MTU so one packet fits one datagram, and gives acknowledgements and
//! retransmissions timeouts that survive a busy machine's scheduling delays (milliseconds, where
//! the simulator's are microseconds).
//!
//! Aggregators run in one of two incarnations ([`AggregatorMode`]). By default they do what a
//! programmable switching chip does (§6.2.1) — the aggregator daemons forward the data anyway,
//! in FIFO order, so they may rewrite its barriers: hosts stamp barriers on data and beacon only
//! idle uplinks, and an aggregator stamps its output barrier on what it forwards and sends a
//! beacon the moment a wave of beacons moves its minimum. The paper's host representatives
//! (§6.2.3) read barriers from beacons only and send them on a timer, phased by depth; they cost a
//! beacon interval's wait at every missed phase (docs/BENCHMARKS.md, "Live cluster").

use crate::config::DriverConfig;
use onepipe_proto::host::{HostConfig, ACK_DELAY_BE_RTO_DIVISOR_MIN};
use onepipe_proto::ids::{NodeId, ProcId};
use onepipe_proto::switch::{SwitchConfig, SwitchMode};
use onepipe_proto::wire::{
    ACK_BATCH_ENTRY_LEN, ACK_BATCH_HEADER_LEN, ACK_BATCH_LEN_MAX, DATA_HEADER_LEN,
};
use serde::{Deserialize, Serialize};

/// Default live beacon interval: 1 ms.
pub const BEACON_INTERVAL_NS_DEFAULT: u64 = 1_000_000;

/// The live fast beacon interval (issue 37, [`LiveRoles::fast_beacon_interval_ns`]): 200 µs,
/// measured best on a 2-core machine (docs/BENCHMARKS.md, "Barrier latency at low load").
pub const FAST_BEACON_INTERVAL_NS_DEFAULT: u64 = 200_000;

/// How long a §5.2 failure round waits for a live process's failure callbacks by default
/// (2 s: a callback blocked for that long is taken for a failed process).
pub const CALLBACK_TIMEOUT_NS: u64 = 2_000_000_000;

/// How the live aggregators aggregate barriers (the switch incarnations of §6.2).
///
/// ```
/// use onepipe_runtime::roles::AggregatorMode;
/// assert_eq!("host".parse::<AggregatorMode>(), Ok(AggregatorMode::Host));
/// assert_eq!(AggregatorMode::default().to_string(), "chip");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AggregatorMode {
    /// §6.2.1: barriers ride on data and are rewritten by every aggregator that forwards it; a
    /// beacon goes out as soon as the minimum moves (at most one per `beacon_interval / 8` per
    /// link); hosts beacon only when their uplink was idle at a beacon time.
    #[default]
    Chip,
    /// §6.2.3 host representatives: barriers travel in beacons only, which every host sends
    /// every interval and every aggregator sends on a timer, `depth × aggregator_phase` after
    /// each beacon tick.
    Host,
}

impl AggregatorMode {
    /// The `onepipe_proto` switch incarnation.
    pub fn switch_mode(self) -> SwitchMode {
        match self {
            AggregatorMode::Chip => SwitchMode::Chip,
            AggregatorMode::Host => SwitchMode::Host,
        }
    }
}

impl std::str::FromStr for AggregatorMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "chip" => Ok(AggregatorMode::Chip),
            "host" => Ok(AggregatorMode::Host),
            _ => Err(format!(
                "unknown aggregator mode '{s}' (expected chip or host)"
            )),
        }
    }
}

impl std::fmt::Display for AggregatorMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AggregatorMode::Chip => "chip",
            AggregatorMode::Host => "host",
        })
    }
}

/// Role settings for a live cluster. Build the roles' configurations with
/// [`LiveRoles::host_config`] and [`LiveRoles::switch_config`], then adjust fields as needed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveRoles {
    /// T_beacon (§4.2) for hosts and aggregators.
    pub beacon_interval_ns: u64,
    /// Issue 37, chip mode: while someone in the tree waits for the barrier, hosts also beacon
    /// at this shorter interval (`HostConfig::beacon_fast_interval_ns`), for one beacon
    /// interval after the need was last announced (`SwitchConfig::demand_hold_ns`); 0: never
    /// (the paper's fixed interval).
    pub fast_beacon_interval_ns: u64,
    /// How the aggregators aggregate (§6.2.1 or §6.2.3).
    pub aggregator_mode: AggregatorMode,
    /// How long after each beacon time an aggregator one hop above the hosts sends its timed
    /// beacons, so the hosts' beacons of that wave have arrived (§4.2, synchronized beacons). An
    /// aggregator `d` hops up uses `d` times this. In chip mode a wave goes on as it arrives
    /// and the timer sends only keep-alives and deferred beacons.
    pub aggregator_phase_ns: u64,
    /// A host reports a best-effort message lost when it is unacknowledged this long — or
    /// longer, up to `rto_max_ns`, when acknowledgements are measured to take longer (RFC 6298).
    pub rto_ns: u64,
    /// The most the best-effort loss timeout adapts to (see `rto_ns`).
    pub rto_max_ns: u64,
    /// A receiver acknowledges at the latest this long after a packet arrives (or after
    /// `ack_every` packets, whichever comes first).
    pub ack_delay_ns: u64,
    /// Most best-effort messages a host tracks for acknowledgement — acknowledged ones until
    /// `rto_ns` after they were sent; beyond it `send` is `SendError::Full` (a bound on memory).
    pub inflight_max: usize,
    /// Most bytes of best-effort messages a host keeps unacknowledged; beyond it `send` is
    /// `SendError::Full` (§6.1 flow control: a window that keeps senders from flooding a network
    /// or a receiver slower than they are).
    pub unacked_bytes_max: u64,
    /// Reliable service (§5.1): retransmission timeout before the first RTT sample.
    pub reliable_rto_init_ns: u64,
    /// Reliable service: floor of the estimated retransmission timeout.
    pub reliable_rto_ns: u64,
    /// Reliable service: largest retransmission timeout after back-off.
    pub reliable_rto_max_ns: u64,
    /// Reliable service: payload bytes the send buffer holds; beyond it `send_reliable` is
    /// `SendError::Full`.
    pub send_buffer_bytes_max: usize,
    /// An aggregator removes an input link silent this long (§4.2 best-effort failure
    /// handling); 0 never removes. The paper's "10 beacon intervals" is 10 ms here, shorter
    /// than a process on a busy machine may wait for a core.
    pub link_timeout_ns: u64,
    /// §5.2: how long a failure round waits for a process's callbacks (0: as long as it
    /// takes); see `Cluster::callback_timeout_ns`.
    pub callback_timeout_ns: u64,
    /// §5.2 controller forwarding after this many retransmissions of a reliable message (0:
    /// off); see `Cluster::forward_after`.
    pub forward_after_retransmits: u32,
}

impl Default for LiveRoles {
    fn default() -> Self {
        LiveRoles {
            beacon_interval_ns: BEACON_INTERVAL_NS_DEFAULT,
            fast_beacon_interval_ns: FAST_BEACON_INTERVAL_NS_DEFAULT,
            aggregator_mode: AggregatorMode::default(),
            aggregator_phase_ns: BEACON_INTERVAL_NS_DEFAULT / 5,
            rto_ns: 50_000_000,
            rto_max_ns: 1_000_000_000,
            ack_delay_ns: 100_000,
            inflight_max: 65_536,
            unacked_bytes_max: 256 << 10,
            // The simulator's 25 µs floor and 200 µs initial value suit µs links; here a
            // round trip crosses several processes on a shared machine and scheduling delays
            // of milliseconds are normal.
            reliable_rto_init_ns: 20_000_000,
            reliable_rto_ns: 5_000_000,
            reliable_rto_max_ns: 200_000_000,
            send_buffer_bytes_max: 4 << 20,
            link_timeout_ns: 1_000_000_000,
            callback_timeout_ns: CALLBACK_TIMEOUT_NS,
            forward_after_retransmits: 0,
        }
    }
}

impl LiveRoles {
    /// A host configuration for processes `procs` (ids below `senders_max`) whose packets fit
    /// the datagrams of `driver`.
    pub fn host_config(
        &self,
        node: NodeId,
        procs: Vec<ProcId>,
        senders_max: u32,
        driver: &DriverConfig,
    ) -> HostConfig {
        let mut cfg = HostConfig::new(node, procs, senders_max);
        cfg.beacon_interval_ns = self.beacon_interval_ns;
        // Issue 37: fast beacons while someone waits, in chip mode only (a representative
        // reads beacons on its timer alone, so more of them would tell it nothing sooner).
        cfg.beacon_fast_interval_ns = self.fast_beacons();
        cfg.beacon_fast_hold_ns = self.beacon_interval_ns;
        // §6.2.1: a chip reads barriers from data and only idle uplinks need beacons; §6.2.3:
        // a representative sees beacons only, so every host beacons every interval.
        let chip = self.aggregator_mode == AggregatorMode::Chip;
        cfg.beacon_always = !chip;
        cfg.barrier_on_data = chip;
        let room = driver.coalesce.packet_room();
        cfg.mtu_payload = cfg.mtu_payload.min(room - DATA_HEADER_LEN).max(1);
        // The largest ACK batch fits one datagram's packet room (less than `datagram_len_max`
        // when datagrams are sealed).
        cfg.ack_batch_len_max =
            ((room - ACK_BATCH_HEADER_LEN) / ACK_BATCH_ENTRY_LEN).clamp(2, ACK_BATCH_LEN_MAX);
        cfg.rto_ns = self.rto_ns;
        cfg.rto_max_ns = self.rto_max_ns.max(self.rto_ns);
        cfg.ack_delay_ns = self.ack_delay_ns;
        // One delay for both services here (scheduling delays of a shared machine dwarf the
        // simulator's µs), capped so a best-effort ACK still beats the loss timeout (§2.1).
        cfg.ack_delay_be_ns = self
            .ack_delay_ns
            .min(cfg.rto_ns / ACK_DELAY_BE_RTO_DIVISOR_MIN);
        cfg.inflight_max = self.inflight_max;
        cfg.unacked_bytes_max = self.unacked_bytes_max;
        cfg.reliable.rto_init_ns = self.reliable_rto_init_ns;
        cfg.reliable.rto_ns = self.reliable_rto_ns;
        cfg.reliable.rto_max_ns = self.reliable_rto_max_ns;
        cfg.reliable.send_buffer_bytes_max = self.send_buffer_bytes_max;
        cfg.reliable.forward_after_retransmits = self.forward_after_retransmits;
        // The live controller always runs §5.2's relay channel (receiver recovery).
        cfg.relay_channel = true;
        // §5.2 Detect: a host reports its silent aggregator after the same silence an
        // aggregator reports a silent input after (the simulator's 10 intervals would be 10 ms
        // here, which a busy machine's scheduling can exceed: a false report declares the host
        // failed).
        cfg.uplink_timeout_intervals = self.link_timeout_intervals();
        // §5.2 messages travel on a TCP connection here, and a member re-sends its history to
        // a new leader when it re-registers: timed re-sends would only grow the controller's
        // log (each is an input it records).
        cfg.ctrl_retry_ns = 0;
        cfg
    }

    /// The fast beacon interval in force: [`LiveRoles::fast_beacon_interval_ns`] in chip mode,
    /// 0 (none) in host-representative mode.
    pub fn fast_beacons(&self) -> u64 {
        match self.aggregator_mode {
            AggregatorMode::Chip => self.fast_beacon_interval_ns,
            AggregatorMode::Host => 0,
        }
    }

    /// The link timeout in beacon intervals (0: never).
    fn link_timeout_intervals(&self) -> u32 {
        u32::try_from(
            self.link_timeout_ns
                .div_ceil(self.beacon_interval_ns.max(1)),
        )
        .unwrap_or(u32::MAX)
    }

    /// An aggregator in `aggregator_mode`, `depth` hops above the hosts, with `inputs` input
    /// links and `outputs` output links.
    pub fn switch_config(
        &self,
        node: NodeId,
        depth: u32,
        inputs: usize,
        outputs: usize,
    ) -> SwitchConfig {
        let mode = self.aggregator_mode.switch_mode();
        let mut cfg = SwitchConfig::new(node, mode, inputs, outputs);
        // Chip mode: a link carries at most one change-triggered beacon per eighth of an
        // interval (a wave of synchronized host beacons moves the minimum once, so a wave is
        // never held back; a stream of data-borne changes on an idle link is thinned).
        cfg.beacon_min_gap_ns = match self.fast_beacons() {
            0 => self.beacon_interval_ns / 8,
            fast => (self.beacon_interval_ns / 8).min(fast / 2),
        };
        cfg.demand_hold_ns = match self.fast_beacons() {
            0 => 0,
            _ => self.beacon_interval_ns,
        };
        cfg.beacon_interval_ns = self.beacon_interval_ns;
        cfg.beacon_phase_ns =
            (u64::from(depth) * self.aggregator_phase_ns) % self.beacon_interval_ns;
        // The real switch-to-representative hop is in the network, not simulated.
        cfg.beacon_delay_ns = 0;
        cfg.link_timeout_intervals = self.link_timeout_intervals();
        // As for hosts: reports go over TCP and are re-sent on re-registration.
        cfg.report_retry_intervals = 0;
        cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_packet_fits_one_datagram() {
        let driver = DriverConfig::default();
        let cfg = LiveRoles::default().host_config(NodeId(0), vec![ProcId(0)], 4, &driver);
        assert_eq!(
            cfg.mtu_payload + DATA_HEADER_LEN,
            driver.coalesce.datagram_len_max
        );
        assert!(
            !cfg.beacon_always && cfg.barrier_on_data,
            "chip mode by default"
        );
        let host = LiveRoles {
            aggregator_mode: AggregatorMode::Host,
            ..LiveRoles::default()
        };
        let cfg = host.host_config(NodeId(0), vec![ProcId(0)], 4, &driver);
        assert!(cfg.beacon_always && !cfg.barrier_on_data);
        assert!(cfg.rto_max_ns > cfg.rto_ns, "the loss timeout adapts");
        assert_eq!(cfg.beacon_interval_ns, 1_000_000);
        assert_eq!(
            cfg.uplink_timeout_intervals, 1_000,
            "one second, as aggregators"
        );
        assert_eq!(
            cfg.ctrl_retry_ns, 0,
            "TCP and re-registration re-send instead"
        );
    }

    #[test]
    fn aggregators_fire_later_the_higher_they_are() {
        let roles = LiveRoles::default();
        let tor = roles.switch_config(NodeId(1), 1, 2, 2);
        let spine = roles.switch_config(NodeId(2), 2, 2, 2);
        assert_eq!(tor.mode, SwitchMode::Chip);
        assert!(spine.beacon_phase_ns > tor.beacon_phase_ns);
        assert!(spine.beacon_phase_ns < roles.beacon_interval_ns);
        assert_eq!(
            tor.report_retry_intervals, 0,
            "TCP and re-registration re-send instead"
        );
    }
}
