//! Everything a simulated run is made of. Defaults follow the paper's testbed (§7.1) where it
//! says, and are stated beside each field otherwise.

use crate::queue::QueueKind;
use onepipe_proto::host::{HostConfig, ACK_DELAY_BE_RTO_DIVISOR_MIN, RETRANSMIT_BURST_MAX};
use onepipe_proto::ids::{NodeId, ProcId};
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

/// The traffic pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    /// Every process broadcasts to every process (itself included) — Fig. 8.
    AllToAll,
    /// Every process sends scatterings to `k` distinct random processes.
    Scatter {
        /// Destinations per scattering.
        k: u32,
    },
    /// Process `p` sends to process `(p + n/2) mod n`.
    OneToOne,
}

/// Which service the workload uses (`--service`, Table 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// Best effort (`onepipe_unreliable_send`, §4).
    BestEffort,
    /// Reliable (`onepipe_reliable_send`, §5.1).
    Reliable,
    /// Each scattering picks one of the two with equal probability (seeded).
    Mixed,
}

/// Which packets the loss model may drop (`--loss-kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketKind {
    /// Data packets (message fragments).
    Data,
    /// End-to-end ACKs.
    Ack,
    /// NAKs.
    Nak,
    /// Beacons.
    Beacon,
    /// The packets that carry commit barriers forward (§5.1): beacons, and data packets with a
    /// valid commit field (chip mode).
    Commit,
}

impl PacketKind {
    /// True if `p` is of this kind.
    pub fn matches(self, p: &onepipe_proto::wire::Packet) -> bool {
        use onepipe_proto::wire::Packet;
        matches!(
            (self, p),
            (PacketKind::Data, Packet::Data(_))
                | (PacketKind::Ack, Packet::Ack(_) | Packet::AckBatch(_))
                | (PacketKind::Nak, Packet::Nak(_))
                | (PacketKind::Beacon, Packet::Beacon(_))
                | (PacketKind::Commit, Packet::Beacon(_))
        ) || matches!((self, p), (PacketKind::Commit, Packet::Data(d)) if d.header.commit().is_some())
    }
}

/// A full run description.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The network.
    pub topology: TopologySpec,
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
    /// Traffic pattern.
    pub workload: WorkloadKind,
    /// Best effort, reliable, or both.
    pub service: Service,
    /// A switch egress queue holding more than this many bytes marks data packets ECN (§6.1,
    /// DCTCP's K).
    pub ecn_threshold_bytes: u64,
    /// Floor of the reliable retransmission timeout (estimated from RTT samples above it).
    pub rto_ns: u64,
    /// Its ceiling (`ReliableConfig::rto_max_ns`).
    pub rto_max_ns: u64,
    /// Duplicate ACKs that trigger a reliable fast retransmission
    /// (`ReliableConfig::dupack_threshold`).
    pub dupack_threshold: u32,
    /// How long a receiver may delay a best-effort ACK (`HostConfig::ack_delay_be_ns`, §2.1:
    /// those ACKs serve only the sender's loss report); at most a quarter of the hosts' loss
    /// timeout (`HostConfig::rto_ns`).
    pub ack_delay_be_ns: u64,
    /// Longest best-effort loss timeout (`HostConfig::rto_max_ns`): above the hosts' 1 ms
    /// (`HostConfig::rto_ns`) the timeout adapts to the measured ACK delay (RFC 6298) up to
    /// this, as the live runtime's does, so queues at overload are not reported as losses.
    /// Equal to the 1 ms floor (the default), the timeout is fixed.
    pub loss_timeout_max_ns: u64,
    /// Each host's reliable send buffer, payload bytes (`--send-buffer`): beyond it reliable
    /// sends are refused (`SendError::Full`), as best-effort sends are beyond the CPU queue.
    pub send_buffer_bytes: usize,
    /// Message size in bytes.
    pub msg_size: usize,
    /// Sends (messages or scatterings) per second per process, Poisson.
    pub rate_per_proc: f64,
    /// How long processes send.
    pub duration_ns: u64,
    /// Longest the run goes on after sending stops, until everything in flight has been
    /// delivered or reported; it stops as soon as that is so.
    pub drain_ns: u64,
    /// Probability that a packet is held back on a link and overtaken (non-FIFO links).
    pub reorder_prob: f64,
    /// Largest extra delay of a held-back packet.
    pub reorder_delay_ns: u64,
    /// Probability that a packet starts a loss event on its link (seeded, per link).
    pub loss_rate: f64,
    /// Packets one loss event drops on its link (1: independent losses).
    pub loss_burst: u32,
    /// Probability that a packet is duplicated on its link.
    pub dup_rate: f64,
    /// Only packets of this kind are lost (`None`: any kind).
    pub loss_kind: Option<PacketKind>,
    /// The run's seed.
    pub seed: u64,
    /// Run the checkers.
    pub check: bool,
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
    /// Host crashes: (host, true time ns). A crashed host sends nothing more and loses what
    /// reaches it; switches remove its link after `link_timeout_intervals` (§4.2).
    pub crashes: Vec<(u32, u64)>,
    /// Graceful leaves (issue 35): (host, true time ns). From then on the host's processes
    /// send nothing new; once every message they sent is resolved (at most 2 ms later) the
    /// host stops and tells the controller (`CtrlMsg::Departed`), which takes it out without
    /// a link timeout. A restart of that host later (`restarts`) joins it again as new
    /// processes.
    pub leaves: Vec<(u32, u64)>,
    /// Host restarts: (host, true time ns), after a crash of that host. The host comes back
    /// with its state lost (`Host::restarted`): declared failed, it rejoins as new processes
    /// (§5.2).
    pub restarts: Vec<(u32, u64)>,
    /// A switch removes an input link silent for this many beacon intervals (§4.2; 0: never).
    pub link_timeout_intervals: u32,
    /// Cuts: (name, true time ns). Every link of the named host ("host-3": a host link
    /// failure) or physical switch ("tor-1", "core-0": a switch failure), the physical link
    /// between two nodes ("agg-0/core-0", both directions) or one direction of it
    /// ("agg-3>tor-3") carries nothing from then on.
    pub cuts: Vec<(String, u64)>,
    /// Heals of cuts: (the cut's name, true time ns), e.g. ("host-9", 900 µs) after a cut of
    /// "host-9" (`--cut host-9@600us..900us`): its links carry again from then on, and a host
    /// the controller declared failed meanwhile runs §5.2 receiver recovery and rejoins.
    pub heals: Vec<(String, u64)>,
    /// One-way delay of the management network that carries §5.2's control messages, ns.
    pub ctrl_delay_ns: u64,
    /// Time the controller waits after the first failure report before Determine, so that
    /// every neighbour of a failure has reported (§5.2), ns.
    pub failure_settle_ns: u64,
    /// Clock steps: (host, true time ns, signed step ns). From then on the host's clock reads
    /// that much more (or less); its timestamps stay non-decreasing (§2.1).
    pub clock_steps: Vec<(u32, u64, i64)>,
    /// Controller outages: [from, to) in true time ns. Meanwhile the controller neither
    /// receives (messages to it are lost, as with a crash) nor runs; it recovers with its state
    /// (§6.1: kept in a highly available store) and hosts and switches re-send what it missed.
    pub controller_down: Vec<(u64, u64)>,
    /// Route black holes: (from host, to host, true time ns). From then on the first-hop switch
    /// of `from` forwards nothing of its data, ACKs or NAKs to `to` — a broken routing entry the
    /// routing does not notice: links stay alive (a black-holed data packet still carries its
    /// barriers on, as a beacon) and no switch reports anything (§5.2 "Controller Forwarding").
    pub blackholes: Vec<(u32, u32, u64)>,
    /// §5.2 forwarding: a reliable message retransmitted this many times on timeout is also
    /// handed to the controller to relay (0: never).
    pub forward_after: u32,
    /// §5.2 Receiver Recovery: process ids kept for hosts that rejoin as new processes (each
    /// rejoin takes one per process of the host). `None`: three per process in networks of at
    /// most 1,024 processes, none above (every host keeps per-sender state for every id).
    pub proc_ids_spare: Option<u32>,
    /// Most messages of each service a host delivers per instant
    /// (`HostConfig::deliver_burst_max`; 0: no limit).
    pub deliver_burst_max: u32,
    /// Most reliable messages a host retransmits per input
    /// (`HostConfig::retransmit_burst_max`; 0: no limit).
    pub retransmit_burst_max: u32,
    /// An application every process runs in place of the synthetic workload (`--app`; `None`:
    /// the synthetic workload).
    pub app: Option<AppSpec>,
    /// Keep the application's history for `Report::app_history` (`--history`).
    pub keep_history: bool,
}

/// An application the processes run (`--app`).
#[derive(Clone, Debug, PartialEq)]
pub enum AppSpec {
    /// §7.3.1's transactional key-value store: every process serves the keys that hash to it
    /// and initiates transactions, `window` in flight at a time.
    Kv {
        /// The transactions.
        workload: onepipe_apps::kv::workload::KvWorkload,
        /// Transactions each process keeps in flight.
        window: u32,
    },
    /// §7.3.2's independent transactions: TPC-C New-Order and Payment over a sharded database,
    /// 3 replicas per shard (`procs / 3` shards); every process initiates, `window` in flight.
    Tpcc {
        /// The database's size and the transaction mix.
        workload: onepipe_apps::tpcc::gen::TpccWorkload,
        /// Transactions each process keeps in flight.
        window: u32,
    },
    /// A replicated linearizable key-value service (§2.2.2): processes `0..replicas` replicate,
    /// the others are clients with `window` operations in flight each.
    ReplKv {
        /// The operations.
        workload: onepipe_apps::repl::ReplWorkload,
        /// Operations each client keeps in flight.
        window: u32,
        /// Replicas.
        replicas: u32,
        /// Each replica's disk.
        disk: onepipe_apps::repl::DiskModel,
        /// A client's silence before it suspects a loss or a failure and resends
        /// (`ReplConfig::suspect_ns`; `None`: 200 µs, or 10 disk writes if longer).
        suspect_ns: Option<u64>,
        /// MultiPaxos's settings (`--system paxos`).
        paxos: PaxosSpec,
    },
    /// §7.3.3's replicated remote hash table (Fig. 16): `layout.servers` shards of
    /// `layout.replicas` replicas each (processes `0..servers × replicas`), then
    /// `layout.clients` clients with `window` operations in flight each; processes after them
    /// are idle.
    HashTable {
        /// The operations.
        workload: onepipe_apps::hashtable::HtWorkload,
        /// Operations each client keeps in flight.
        window: u32,
        /// Shards, replicas, clients.
        layout: onepipe_apps::hashtable::HtLayout,
    },
}

/// MultiPaxos's settings in a run (`onepipe_apps::repl::paxos::PaxosConfig` without the
/// service's): Fig. 6's WND, BSZ and Δ_B, the leader's heartbeat and the election timeout, and
/// whether replies echo the request's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaxosSpec {
    /// WND: the most instances in Phase 2 at once.
    pub wnd: u32,
    /// BSZ: the batch size, bytes.
    pub bsz: u32,
    /// Δ_B: the longest a request waits for its batch to fill, ns.
    pub delta_b_ns: u64,
    /// The leader's heartbeat; an Accept without a majority after two is sent again, ns.
    pub heartbeat_ns: u64,
    /// A follower that hears nothing from the leader for this long runs Phase 1, ns.
    pub election_timeout_ns: u64,
    /// Replies carry the request's padding back (the seed paper's echo service).
    pub echo: bool,
}

impl Default for PaxosSpec {
    /// `PaxosConfig::new`'s: tuned for the simulated data center.
    fn default() -> Self {
        PaxosSpec {
            wnd: 8,
            bsz: 32 << 10,
            delta_b_ns: 5_000,
            heartbeat_ns: 20_000,
            election_timeout_ns: 100_000,
            echo: false,
        }
    }
}

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

impl AppSpec {
    /// Its name on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            AppSpec::Kv { .. } => "kv",
            AppSpec::Tpcc { .. } => "tpcc",
            AppSpec::ReplKv { .. } => "replkv",
            AppSpec::HashTable { .. } => "hashtable",
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            topology: TopologySpec::FatTree { k: 4 },
            procs_per_host: 1,
            switch_mode: SwitchMode::Chip,
            beacon_interval_ns: onepipe_proto::time::BEACON_INTERVAL_NS_DEFAULT,
            beacon_min_gap_ns: None,
            fast_beacon_interval_ns: 0,
            clock_skew_ns: 300.0,
            clock_drift_ppm: 0.1,
            clock_sync_interval_ns: 125_000_000,
            clock_epoch_ns: 1_000_000_000,
            workload: WorkloadKind::AllToAll,
            service: Service::BestEffort,
            ecn_threshold_bytes: 100_000,
            rto_ns: 25_000,
            rto_max_ns: onepipe_proto::reliable::ReliableConfig::default().rto_max_ns,
            dupack_threshold: onepipe_proto::reliable::ReliableConfig::default().dupack_threshold,
            ack_delay_be_ns: HostConfig::new(NodeId(0), vec![ProcId(0)], 1).ack_delay_be_ns,
            loss_timeout_max_ns: HostConfig::new(NodeId(0), vec![ProcId(0)], 1).rto_max_ns,
            send_buffer_bytes: 64 << 10,
            msg_size: 64,
            rate_per_proc: 10_000.0,
            duration_ns: 2_000_000,
            drain_ns: 10_000_000,
            reorder_prob: 0.0,
            reorder_delay_ns: 5_000,
            loss_rate: 0.0,
            loss_burst: 1,
            dup_rate: 0.0,
            loss_kind: None,
            seed: 1,
            check: true,
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
            crashes: Vec::new(),
            leaves: Vec::new(),
            restarts: Vec::new(),
            link_timeout_intervals: 10,
            cuts: Vec::new(),
            heals: Vec::new(),
            ctrl_delay_ns: 3_000,
            failure_settle_ns: 6_000,
            clock_steps: Vec::new(),
            controller_down: Vec::new(),
            blackholes: Vec::new(),
            forward_after: 4,
            proc_ids_spare: None,
            deliver_burst_max: 256,
            retransmit_burst_max: RETRANSMIT_BURST_MAX,
            app: None,
            keep_history: false,
        }
    }
}

/// A configuration that cannot run; the message names the flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The offending flag, as the CLI spells it (e.g. `--k`).
    pub flag: &'static str,
    /// What is wrong.
    pub message: String,
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.flag, self.message)
    }
}

impl std::error::Error for ConfigError {}

fn bad(flag: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        flag,
        message: message.into(),
    }
}

/// Most per-sender protocol state a run may allocate (see `validate`).
pub const STATE_BYTES_MAX: u64 = 8 << 30;

/// Longest a leaving host waits for its sends to be resolved before it leaves anyway
/// ([`SimConfig::leaves`]).
pub const LEAVE_FLUSH_MAX_NS: u64 = 2_000_000;

/// Bytes at the start of every simulated payload: the scattering's sequence number and its send
/// time, so deliveries can be matched and timed without a lookup table.
pub const PAYLOAD_HEADER_LEN: usize = 16;

impl SimConfig {
    /// Checks the configuration; the error names the first bad flag. The parts are checked in
    /// one fixed order, interleaved (the network's, the workload's, the protocol's and the
    /// faults'), so that a configuration with several errors always reports the same one first.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_procs_per_host()?;
        self.validate_app()?;
        self.validate_beacons()?;
        self.validate_traffic()?;
        self.validate_link_faults()?;
        self.validate_reliable()?;
        self.validate_noise()?;
        self.validate_links()?;
        self.validate_sync_and_mtu()?;
        // The network's size: the topology's own arguments, and processes a receiver can order.
        let procs = self.procs()?;
        self.validate_fault_schedule()?;
        self.validate_link_timeout()?;
        self.validate_state_size(procs)?;
        self.validate_scatter(procs)
    }

    // The network: its size, its links and what it takes to simulate.

    /// The network: processes per host.
    fn validate_procs_per_host(&self) -> Result<(), ConfigError> {
        if self.procs_per_host == 0 {
            return Err(bad("--procs-per-host", "must be at least 1"));
        }
        Ok(())
    }

    /// The network: link bandwidths, the default and the per-host ones.
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

    /// The network: the per-sender state every host keeps for every one of `procs` processes.
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

    // The workload: the application or the synthetic traffic.

    /// The workload: the application's settings and its window of transactions in flight.
    fn validate_app(&self) -> Result<(), ConfigError> {
        let window = match &self.app {
            Some(AppSpec::Kv { workload, window }) => {
                workload.validate().map_err(|m| bad("--app", m))?;
                Some(*window)
            }
            Some(AppSpec::Tpcc { workload, window }) => {
                workload.scale.validate().map_err(|m| bad("--app", m))?;
                Some(*window)
            }
            Some(AppSpec::ReplKv {
                workload,
                window,
                replicas,
                paxos: PaxosSpec { wnd, bsz, .. },
                ..
            }) => {
                self.validate_replkv(workload, *wnd, *bsz, *replicas)?;
                Some(*window)
            }
            Some(AppSpec::HashTable {
                workload,
                window,
                layout,
            }) => {
                self.validate_hashtable(workload, *window, layout)?;
                Some(*window)
            }
            None => None,
        };
        if let Some(window) = window {
            if window == 0 {
                return Err(bad(
                    "--window",
                    "at least 1 transaction in flight per process",
                ));
            }
        }
        Ok(())
    }

    /// The workload: the replicated key-value service's (MultiPaxos's window and batch, the
    /// replicas, and a client left among the processes).
    fn validate_replkv(
        &self,
        workload: &onepipe_apps::repl::ReplWorkload,
        wnd: u32,
        bsz: u32,
        replicas: u32,
    ) -> Result<(), ConfigError> {
        workload.validate().map_err(|m| bad("--app", m))?;
        use onepipe_apps::repl::paxos::{BSZ_MAX, WND_MAX};
        if !(1..=WND_MAX).contains(&wnd) {
            return Err(bad("--wnd", format!("{wnd}: take 1 to {WND_MAX}")));
        }
        if !(1..=BSZ_MAX).contains(&bsz) {
            return Err(bad("--bsz", format!("{bsz} bytes: take 1 to {BSZ_MAX}")));
        }
        if !(1..=64).contains(&replicas) {
            return Err(bad(
                "--replicas",
                format!("{replicas} replicas: take 1 to 64"),
            ));
        }
        let procs = self.procs()?;
        if procs <= replicas {
            return Err(bad(
                "--replicas",
                format!(
                    "{replicas} replicas leave no client among {procs} processes \
                     (the processes after the replicas are the clients)"
                ),
            ));
        }
        Ok(())
    }

    /// The workload: the hash table's (its layout must fit the processes).
    fn validate_hashtable(
        &self,
        workload: &onepipe_apps::hashtable::HtWorkload,
        window: u32,
        layout: &onepipe_apps::hashtable::HtLayout,
    ) -> Result<(), ConfigError> {
        workload.validate().map_err(|m| bad("--app", m))?;
        layout.validate().map_err(|m| bad("--app", m))?;
        use onepipe_apps::hashtable::WINDOW_MAX;
        if window > WINDOW_MAX {
            return Err(bad("--window", format!("{window}: at most {WINDOW_MAX}")));
        }
        let procs = self.procs()?;
        if procs < layout.procs() {
            return Err(bad(
                "--app",
                format!(
                    "hashtable needs servers × replicas + clients = {} × {} + {} = {} \
                     processes; the topology has {procs} (--hosts, --k, \
                     --procs-per-host)",
                    layout.servers,
                    layout.replicas,
                    layout.clients,
                    layout.procs()
                ),
            ));
        }
        Ok(())
    }

    /// The workload: message size, send rate and duration.
    fn validate_traffic(&self) -> Result<(), ConfigError> {
        if self.msg_size < PAYLOAD_HEADER_LEN {
            return Err(bad(
                "--msg-size",
                format!(
                    "must be at least {PAYLOAD_HEADER_LEN} bytes in the simulator (it carries the send time and scattering id)"
                ),
            ));
        }
        if self.msg_size > 1 << 20 {
            return Err(bad("--msg-size", "must be at most 1 MiB"));
        }
        if !(self.rate_per_proc > 0.0 && self.rate_per_proc.is_finite()) {
            return Err(bad("--rate", "must be a positive number of messages/s"));
        }
        if self.rate_per_proc > 1e9 {
            return Err(bad("--rate", "must be at most 1e9 messages/s per process"));
        }
        if self.duration_ns == 0 {
            return Err(bad("--duration", "must be positive"));
        }
        Ok(())
    }

    /// The workload: a scattering's destinations among `procs` processes.
    fn validate_scatter(&self, procs: u32) -> Result<(), ConfigError> {
        if let WorkloadKind::Scatter { k } = self.workload {
            if k == 0 || k as u64 > procs as u64 {
                return Err(bad(
                    "--scatter-k",
                    format!("must be between 1 and the number of processes ({procs}), got {k}"),
                ));
            }
        }
        Ok(())
    }

    // The protocol and the service: beacons, reliability, timers, packets.

    /// The protocol: the beacon intervals.
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

    /// The service: the reliable transport's buffer and timers, and the best-effort loss reports.
    fn validate_reliable(&self) -> Result<(), ConfigError> {
        if self.service != Service::BestEffort {
            // A reliable scattering must fit the send buffer whole (§6.1: it waits there until
            // every message fits its window).
            let dsts = match self.workload {
                WorkloadKind::AllToAll => self.procs()? as usize,
                WorkloadKind::Scatter { k } => k as usize,
                WorkloadKind::OneToOne => 1,
            };
            let need = dsts.saturating_mul(self.msg_size);
            if self.send_buffer_bytes < need {
                return Err(bad(
                    "--send-buffer",
                    format!(
                        "a reliable scattering here is {dsts} × {} = {need} bytes and must fit the send buffer ({} bytes)",
                        self.msg_size, self.send_buffer_bytes
                    ),
                ));
            }
        }
        if self.rto_ns == 0 {
            return Err(bad("--rto", "must be positive"));
        }
        if self.rto_max_ns < self.rto_ns {
            return Err(bad("--rto-max", "must be at least --rto"));
        }
        if self.dupack_threshold == 0 {
            return Err(bad("--dupack-threshold", "must be at least 1"));
        }
        let host = HostConfig::new(NodeId(0), vec![ProcId(0)], 1);
        let ack_delay_be_max = host.rto_ns / ACK_DELAY_BE_RTO_DIVISOR_MIN;
        if self.ack_delay_be_ns > ack_delay_be_max {
            return Err(bad(
                "--ack-delay-be",
                format!(
                    "must be at most a quarter of the hosts' {} ns loss timeout ({ack_delay_be_max} ns), so an ACK reaches its sender before the loss is reported (§2.1)",
                    host.rto_ns
                ),
            ));
        }
        if self.loss_timeout_max_ns < host.rto_ns {
            return Err(bad(
                "--loss-timeout-max",
                format!(
                    "must be at least the hosts' {} ns best-effort loss timeout",
                    host.rto_ns
                ),
            ));
        }
        Ok(())
    }

    /// The protocol: the clock synchronization interval and the payload per packet.
    fn validate_sync_and_mtu(&self) -> Result<(), ConfigError> {
        if self.clock_sync_interval_ns == 0 {
            return Err(bad("--clock-sync-interval", "must be positive"));
        }
        if self.mtu_payload == 0 || self.mtu_payload > onepipe_proto::wire::PAYLOAD_LEN_MAX {
            return Err(bad("--mtu", "payload per packet must be 1..=65535 bytes"));
        }
        Ok(())
    }

    /// The protocol: link timeouts, which reliable failure handling needs when anything fails.
    fn validate_link_timeout(&self) -> Result<(), ConfigError> {
        if self.link_timeout_intervals == 0
            && self.service != Service::BestEffort
            && !(self.cuts.is_empty() && self.crashes.is_empty() && self.leaves.is_empty())
        {
            return Err(bad(
                "--link-timeout",
                "reliable failure handling (§5.2) starts from link timeouts: it cannot be 0 with --crash-host, --leave-host or --cut",
            ));
        }
        Ok(())
    }

    // The faults: loss, duplication, reordering, skew, and the scheduled ones.

    /// The faults: reordering and loss probabilities.
    fn validate_link_faults(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.reorder_prob) {
            return Err(bad("--reorder-prob", "must be between 0 and 1"));
        }
        if !(0.0..=1.0).contains(&self.loss_rate) {
            return Err(bad("--loss", "must be between 0 and 1"));
        }
        Ok(())
    }

    /// The faults: loss bursts, duplication and clock skew.
    fn validate_noise(&self) -> Result<(), ConfigError> {
        if self.loss_burst == 0 {
            return Err(bad("--loss-burst", "must be at least 1 packet"));
        }
        if !(0.0..=1.0).contains(&self.dup_rate) {
            return Err(bad("--dup", "must be between 0 and 1"));
        }
        if !(self.clock_skew_ns >= 0.0 && self.clock_skew_ns < 1e9) {
            return Err(bad("--clock-skew", "must be between 0 and 1s"));
        }
        Ok(())
    }

    /// The faults: crashes, leaves, restarts, clock steps, blackholes and controller outages.
    fn validate_fault_schedule(&self) -> Result<(), ConfigError> {
        for &(h, _) in &self.crashes {
            if h >= self.hosts()? {
                return Err(bad(
                    "--crash-host",
                    format!("host {h} does not exist (hosts are 0..{})", self.hosts()?),
                ));
            }
        }
        for &(h, _) in &self.leaves {
            if h >= self.hosts()? {
                return Err(bad(
                    "--leave-host",
                    format!("host {h} does not exist (hosts are 0..{})", self.hosts()?),
                ));
            }
            if self.crashes.iter().any(|&(c, _)| c == h) {
                return Err(bad(
                    "--leave-host",
                    format!("host {h} also crashes: a host either crashes or leaves"),
                ));
            }
        }
        for &(h, at) in &self.restarts {
            let crashed = self.crashes.iter().any(|&(c, t)| c == h && t < at);
            let left = self
                .leaves
                .iter()
                .any(|&(c, t)| c == h && t + LEAVE_FLUSH_MAX_NS < at);
            if !crashed && !left {
                return Err(bad(
                    "--restart-host",
                    format!(
                        "host {h} restarts at {at} ns but has not crashed before (nor left more than {LEAVE_FLUSH_MAX_NS} ns before)"
                    ),
                ));
            }
        }
        for &(h, _, step) in &self.clock_steps {
            if h >= self.hosts()? {
                return Err(bad(
                    "--clock-step",
                    format!("host {h} does not exist (hosts are 0..{})", self.hosts()?),
                ));
            }
            if step.unsigned_abs() > 1_000_000_000 {
                return Err(bad("--clock-step", "a step is at most 1 s either way"));
            }
        }
        for &(a, b, _) in &self.blackholes {
            if a >= self.hosts()? || b >= self.hosts()? || a == b {
                return Err(bad(
                    "--blackhole",
                    format!(
                        "hosts {a} and {b}: two different hosts of 0..{}",
                        self.hosts()?
                    ),
                ));
            }
        }
        for &(from, to) in &self.controller_down {
            if from >= to {
                return Err(bad(
                    "--controller-down",
                    format!("the outage {from}..{to} ns ends before it starts"),
                ));
            }
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
