//! The network of a simulated run: its topology and size, the switches' incarnation, beacons,
//! clocks, links, the CPU costs of hosts and switches, and the management network. It checks
//! what is only about these ([`NetworkConfig::validate`]); what it shares with the other parts,
//! [`SimConfig::validate`](super::SimConfig::validate) checks.

use super::{bad, ConfigError, STATE_BYTES_MAX};
use crate::queue::QueueKind;
use onepipe_proto::switch::SwitchMode;

/// Which network to build (§3.1, Fig. 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologySpec {
    /// A k-ary fat tree (Al-Fares): k³/4 hosts.
    FatTree {
        /// Arity (even, ≥ 2).
        k: u32,
    },
    /// Hosts under one top-of-rack switch.
    Rack {
        /// Number of hosts.
        hosts: u32,
    },
    /// Two layers: leaves (racks) joined by spines.
    LeafSpine {
        /// Number of hosts.
        hosts: u32,
        /// Hosts per leaf.
        rack_size: u32,
        /// Number of spines.
        spines: u32,
    },
}

impl TopologySpec {
    /// The routing graph.
    ///
    /// # Errors
    /// Parameters no topology has (the message names them).
    pub fn build(self) -> Result<onepipe_proto::topology::Topology, String> {
        use onepipe_proto::topology::Topology;
        match self {
            TopologySpec::FatTree { k } => Topology::fat_tree(k),
            TopologySpec::Rack { hosts } => Topology::rack(hosts),
            TopologySpec::LeafSpine {
                hosts,
                rack_size,
                spines,
            } => Topology::leaf_spine(hosts, rack_size, spines),
        }
        .map_err(|e| e.to_string())
    }
}

/// Which fabric carries the packets ([`NetworkConfig::fabric`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fabric {
    /// The topology's multi-rooted Clos (§3.1, Fig. 3): each logical half of a switch is a
    /// `Switch` of its own, and data is routed by ECMP.
    #[default]
    Clos,
    /// A tree of aggregators, each one node running the live runtime's role
    /// (`onepipe_proto::aggregator::Aggregator`, one port per peer), laid out as `onepipe up
    /// --layers` lays out a local cluster (`onepipe_proto::aggregator::tree::layered`): the
    /// topology's hosts (`--topology rack` or `leaf-spine`, `--hosts`) in racks of its
    /// `--rack-size` (every host in one rack with one layer; `--spines` is not used), pods of
    /// [`TREE_POD_RACKS`] racks, one process per host.
    Tree {
        /// Layers of aggregators: 1, 2 or 3 (`--layers`).
        layers: u8,
    },
}

/// Racks per pod of a three-layer tree fabric (`onepipe up`'s default `--pod-racks`).
pub const TREE_POD_RACKS: u32 = 2;

/// One direction of a host's link, when it differs from the run's `link_gbps` and
/// `link_delay_ns` ([`HostLinks`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSpec {
    /// Bandwidth, Gbit/s.
    pub gbps: f64,
    /// Propagation and switching latency, ns.
    pub delay_ns: u64,
}

/// The links of hosts `hosts` (host → switch: `up`; switch → host: `down`), in place of the
/// run's uniform links: a slow WAN link among some hosts, fast client links (`onepipe bench
/// paxos`'s Emulab setting).
#[derive(Clone, Debug, PartialEq)]
pub struct HostLinks {
    /// The hosts.
    pub hosts: std::ops::Range<u32>,
    /// Their links to their switch.
    pub up: LinkSpec,
    /// Their switch's links to them.
    pub down: LinkSpec,
}

/// The network a run simulates ([`SimConfig::net`](super::SimConfig::net)).
#[derive(Clone, Debug)]
pub struct NetworkConfig {
    /// The network.
    pub topology: TopologySpec,
    /// What carries the packets over it: the topology's Clos (the default) or a tree of
    /// the live runtime's aggregators.
    pub fabric: Fabric,
    /// Processes per host.
    pub procs_per_host: u32,
    /// Switch incarnation (§6.2).
    pub switch_mode: SwitchMode,
    /// Beacon interval (§4.2; testbed 3 µs).
    pub beacon_interval_ns: u64,
    /// Chip mode: least time between change-triggered beacons on one link; default an eighth of
    /// the beacon interval.
    pub beacon_min_gap_ns: Option<u64>,
    /// Chip mode, issue 37: demand beacons — while someone waits for the barrier, hosts also
    /// beacon at this shorter interval, for one beacon interval after the last demand
    /// (`HostConfig::beacon_fast_interval_ns`, `SwitchConfig::demand_hold_ns`); 0: off (the
    /// paper's fixed interval; the default).
    pub fast_beacon_interval_ns: u64,
    /// Mean absolute clock offset after sync (§7.1: 0.3 µs).
    pub clock_skew_ns: f64,
    /// Clock drift bound, ppm.
    pub clock_drift_ppm: f64,
    /// Clock sync interval (§7.1: PTP every 125 ms).
    pub clock_sync_interval_ns: u64,
    /// Local clock reading at true time 0.
    pub clock_epoch_ns: u64,
    /// A switch egress queue holding more than this many bytes marks data packets ECN (§6.1,
    /// DCTCP's K).
    pub ecn_threshold_bytes: u64,
    /// Link bandwidth, Gbit/s (testbed: 100).
    pub link_gbps: f64,
    /// Per-link latency: propagation plus switch pipeline, ns.
    pub link_delay_ns: u64,
    /// Hosts whose links differ from `link_gbps` and `link_delay_ns` (the last entry naming a
    /// host wins).
    pub host_links: Vec<HostLinks>,
    /// Host CPU cost to send one packet, ns.
    pub host_send_ns: u64,
    /// Host CPU cost to receive one packet, ns.
    pub host_recv_ns: u64,
    /// Host CPU cost to deliver one message from the reorder buffer, ns.
    pub host_deliver_ns: u64,
    /// Switch CPU beacon processing delay (§6.2.2), ns.
    pub switch_cpu_delay_ns: u64,
    /// Host-representative processing delay (§6.2.3), ns.
    pub rep_proc_delay_ns: u64,
    /// Round trip between a switch and its host representative (§6.2.3), ns.
    pub rep_rtt_ns: u64,
    /// Largest packet payload.
    pub mtu_payload: usize,
    /// Event queue implementation.
    pub queue: QueueKind,
    /// One-way delay of the management network that carries §5.2's control messages, ns.
    pub ctrl_delay_ns: u64,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            topology: TopologySpec::FatTree { k: 4 },
            fabric: Fabric::Clos,
            procs_per_host: 1,
            switch_mode: SwitchMode::Chip,
            beacon_interval_ns: onepipe_proto::time::BEACON_INTERVAL_NS_DEFAULT,
            beacon_min_gap_ns: None,
            fast_beacon_interval_ns: 0,
            clock_skew_ns: 300.0,
            clock_drift_ppm: 0.1,
            clock_sync_interval_ns: 125_000_000,
            clock_epoch_ns: 1_000_000_000,
            ecn_threshold_bytes: 100_000,
            link_gbps: 100.0,
            link_delay_ns: 500,
            host_links: Vec::new(),
            host_send_ns: 50,
            host_recv_ns: 50,
            host_deliver_ns: 20,
            switch_cpu_delay_ns: 2_000,
            rep_proc_delay_ns: 500,
            rep_rtt_ns: 2_000,
            mtu_payload: 4096 - onepipe_proto::wire::DATA_HEADER_LEN,
            queue: QueueKind::Radix,
            ctrl_delay_ns: 3_000,
        }
    }
}

impl NetworkConfig {
    /// Checks the network alone; the error names the first bad flag, in a fixed order: processes
    /// per host, beacons, clocks, links, packets, then the network's size and fabric.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_procs_per_host()?;
        self.validate_beacons()?;
        self.validate_clock_skew()?;
        self.validate_links()?;
        self.validate_sync_and_mtu()?;
        // The network's size: the topology's own arguments, and processes a receiver can order.
        let procs = self.procs()?;
        self.validate_fabric()?;
        self.validate_state_size(procs)
    }

    /// Processes per host.
    fn validate_procs_per_host(&self) -> Result<(), ConfigError> {
        if self.procs_per_host == 0 {
            return Err(bad("--procs-per-host", "must be at least 1"));
        }
        Ok(())
    }

    /// The beacon intervals.
    fn validate_beacons(&self) -> Result<(), ConfigError> {
        if self.beacon_interval_ns == 0 {
            return Err(bad("--beacon-interval", "must be positive"));
        }
        if self.fast_beacon_interval_ns >= self.beacon_interval_ns {
            return Err(bad(
                "--fast-beacon-interval",
                "must be 0 (off) or below the beacon interval",
            ));
        }
        Ok(())
    }

    /// The clock skew.
    fn validate_clock_skew(&self) -> Result<(), ConfigError> {
        if !(self.clock_skew_ns >= 0.0 && self.clock_skew_ns < 1e9) {
            return Err(bad("--clock-skew", "must be between 0 and 1s"));
        }
        Ok(())
    }

    /// Link bandwidths, the default and the per-host ones.
    fn validate_links(&self) -> Result<(), ConfigError> {
        if !(self.link_gbps > 0.0 && self.link_gbps.is_finite()) {
            return Err(bad("--link-gbps", "must be positive"));
        }
        for h in &self.host_links {
            let fast_enough = |l: &LinkSpec| l.gbps > 0.0 && l.gbps.is_finite();
            if h.hosts.start >= h.hosts.end || h.hosts.end > self.hosts()? {
                return Err(bad(
                    "host_links",
                    format!(
                        "hosts {:?}: a non-empty range of 0..{}",
                        h.hosts,
                        self.hosts()?
                    ),
                ));
            }
            if !(fast_enough(&h.up) && fast_enough(&h.down)) {
                return Err(bad(
                    "host_links",
                    format!("hosts {:?}: bandwidths must be positive", h.hosts),
                ));
            }
        }
        Ok(())
    }

    /// The clock synchronization interval and the payload per packet.
    fn validate_sync_and_mtu(&self) -> Result<(), ConfigError> {
        if self.clock_sync_interval_ns == 0 {
            return Err(bad("--clock-sync-interval", "must be positive"));
        }
        if self.mtu_payload == 0 || self.mtu_payload > onepipe_proto::wire::PAYLOAD_LEN_MAX {
            return Err(bad("--mtu", "payload per packet must be 1..=65535 bytes"));
        }
        Ok(())
    }

    /// The tree fabric: a tree of the live runtime's aggregators over a rack's or a
    /// leaf-spine's hosts, one process per host (a live cluster's processes are hosts of their
    /// own to the aggregators), in the incarnations a live aggregator runs: chip (§6.2.1,
    /// barriers on data) or host representative (§6.2.3) — not §6.2.2's switch CPU, which an
    /// aggregator daemon is not.
    fn validate_fabric(&self) -> Result<(), ConfigError> {
        let Fabric::Tree { layers } = self.fabric else {
            return Ok(());
        };
        if !(1..=3).contains(&layers) {
            return Err(bad("--layers", format!("must be 1, 2 or 3, got {layers}")));
        }
        if matches!(self.topology, TopologySpec::FatTree { .. }) {
            return Err(bad(
                "--fabric",
                "a tree's hosts come from --topology rack or leaf-spine (--hosts, --rack-size)",
            ));
        }
        if self.procs_per_host != 1 {
            return Err(bad(
                "--procs-per-host",
                "must be 1 with --fabric tree (each process is a host of its own)",
            ));
        }
        if self.switch_mode == SwitchMode::Cpu {
            return Err(bad(
                "--switch",
                "a tree's aggregators run chip or host mode, as live aggregators do",
            ));
        }
        Ok(())
    }

    /// The tree fabric's aggregators ([`Fabric::Tree`]) with their names, in list order; `None`
    /// for the Clos (or a tree over a fat tree's hosts, which [`NetworkConfig::validate`]
    /// refuses).
    pub fn tree_layout(&self) -> Option<Vec<(String, onepipe_proto::topology::TreeSwitch)>> {
        let Fabric::Tree { layers } = self.fabric else {
            return None;
        };
        let (hosts, rack_size) = match self.topology {
            TopologySpec::Rack { hosts } => (hosts, hosts),
            TopologySpec::LeafSpine {
                hosts, rack_size, ..
            } => (hosts, rack_size),
            TopologySpec::FatTree { .. } => return None,
        };
        Some(onepipe_proto::aggregator::tree::layered(
            hosts,
            layers,
            rack_size,
            TREE_POD_RACKS,
        ))
    }

    /// The per-sender state every host keeps for every one of `procs` processes.
    fn validate_state_size(&self, procs: u32) -> Result<(), ConfigError> {
        // Every host keeps per-sender state for every process (reorder list heads, 8 bytes;
        // next PSN per destination, 4 bytes per local process): bound it before allocating.
        let hosts = self.hosts()? as u64;
        let state_bytes = hosts * procs as u64 * 8 + procs as u64 * procs as u64 * 4;
        if state_bytes > STATE_BYTES_MAX {
            return Err(bad(
                self.size_flag(),
                format!(
                    "{hosts} hosts × {procs} processes need ~{} GiB of per-sender state; the simulator allows {} GiB",
                    state_bytes >> 30,
                    STATE_BYTES_MAX >> 30
                ),
            ));
        }
        Ok(())
    }

    /// Number of hosts the topology has.
    pub fn hosts(&self) -> Result<u32, ConfigError> {
        match self.topology {
            TopologySpec::FatTree { k } => {
                if k < 2 || k % 2 == 1 || k > 64 {
                    return Err(bad(
                        "--k",
                        format!("fat-tree arity must be even, 2..=64, got {k}"),
                    ));
                }
                Ok(k * k * k / 4)
            }
            TopologySpec::Rack { hosts } | TopologySpec::LeafSpine { hosts, .. } => {
                if hosts == 0 || hosts > 1 << 16 {
                    return Err(bad("--hosts", format!("must be 1..=65536, got {hosts}")));
                }
                if let TopologySpec::LeafSpine {
                    rack_size, spines, ..
                } = self.topology
                {
                    if rack_size == 0 {
                        return Err(bad("--rack-size", "must be at least 1"));
                    }
                    if spines == 0 {
                        return Err(bad("--spines", "must be at least 1"));
                    }
                }
                Ok(hosts)
            }
        }
    }

    /// The flag that sets the number of hosts, for errors about the network's size.
    fn size_flag(&self) -> &'static str {
        match self.topology {
            TopologySpec::FatTree { .. } => "--k",
            TopologySpec::Rack { .. } | TopologySpec::LeafSpine { .. } => "--hosts",
        }
    }

    /// The CPU model of the benches, the same for every system: a host's `procs_per_host`
    /// processes share one CPU (one core of the engine, one FIFO) that runs at `procs_per_host`
    /// cores' speed, so a host has the capacity of a core per process (the testbed's, §7.1) and
    /// every system pools it alike. The per-packet and per-message costs, given for one core,
    /// become the pooled CPU's: send ⌊s / pph⌋, receive ⌊(s + r) / pph⌋ − ⌊s / pph⌋ (so a packet
    /// sent and received costs exactly ⌊(s + r) / pph⌋), deliver ⌈d / pph⌉. With one process
    /// per host nothing changes. Roles with a core of their own (the host-placed sequencer)
    /// take their costs from the configuration before this.
    pub fn pool_host_cpu(&mut self) {
        let pph = u64::from(self.procs_per_host.max(1));
        let (send, recv, deliver) = (self.host_send_ns, self.host_recv_ns, self.host_deliver_ns);
        self.host_send_ns = send / pph;
        self.host_recv_ns = (send + recv) / pph - send / pph;
        self.host_deliver_ns = deliver.div_ceil(pph);
    }

    /// Number of processes.
    pub fn procs(&self) -> Result<u32, ConfigError> {
        let hosts = self.hosts()? as u64;
        let procs = hosts * self.procs_per_host as u64;
        // A receiver orders at most 65,535 senders (onepipe_proto::reorder::SENDERS_MAX).
        if procs > onepipe_proto::reorder::SENDERS_MAX as u64 {
            return Err(bad(
                if self.procs_per_host > 1 {
                    "--procs-per-host"
                } else {
                    self.size_flag()
                },
                format!(
                    "{procs} processes in all is more than the {} senders a receiver can order",
                    onepipe_proto::reorder::SENDERS_MAX
                ),
            ));
        }
        Ok(procs as u32)
    }

    /// The least gap between change-triggered beacons on one link.
    pub fn beacon_min_gap(&self) -> u64 {
        self.beacon_min_gap_ns
            .unwrap_or(self.beacon_interval_ns / 8)
    }

    /// Per-hop beacon processing delay for the configured switch mode (§6.2).
    pub fn beacon_delay(&self) -> u64 {
        match self.switch_mode {
            SwitchMode::Chip => 0,
            SwitchMode::Cpu => self.switch_cpu_delay_ns,
            SwitchMode::Host => self.rep_proc_delay_ns + self.rep_rtt_ns,
        }
    }
}
