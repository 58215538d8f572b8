//! What a baseline run adds to [`SimConfig`]: which protocol, and the knobs Fig. 8's numbers
//! depend on that 1Pipe does not have (the sequencer's per-packet cost, the Lamport heartbeat
//! interval, the token's batch). Everything else — topology, links, host CPU costs, clocks,
//! workload, faults, seed — is the [`SimConfig`] a 1Pipe run uses, so both run on the same
//! footing.

use crate::config::{ConfigError, PacketKind, SimConfig, WorkloadKind};
use onepipe_baselines::{PacketClass, Protocol};

/// Baseline-specific configuration (`onepipe sim --protocol
/// sequencer|sequencer-switch|token|lamport|isis|plato|plato-fixed|toto|allack`).
#[derive(Clone, Debug, PartialEq)]
pub struct BaselineConfig {
    /// Which protocol.
    pub protocol: Protocol,
    /// Host-placed sequencer (\[57\]): its cost per packet taken in or sent out — the reciprocal
    /// of its NIC/CPU message rate (`--seq-host-cost`). `None`: the host CPU costs
    /// (`host_recv_ns` in, `host_send_ns` out, 50 ns each by default, i.e. 20 M packets/s), as
    /// the sequencer is one more process with a core of its own.
    pub seq_host_packet_ns: Option<u64>,
    /// Switch-placed sequencer (\[51\]): its pipeline time per packet taken in
    /// (`--seq-switch-cost`; default 100 ns, 10 M orderings/s). Its copies leave at line rate,
    /// so beyond that its egress links bound it.
    pub seq_switch_packet_ns: u64,
    /// Most packets waiting at the sequencer's input. While this many wait, processes' sends are
    /// refused (`sends_rejected`): the lossless fabric (PFC in the paper's RoCEv2 testbed)
    /// pauses senders rather than dropping, and offered load beyond the sequencer's rate is
    /// backpressure, as the 64-send host CPU queue is for 1Pipe. Default 64.
    pub seq_queue_len_max: u32,
    /// Lamport clock exchange interval (`--lamport-heartbeat`). `None` (auto): the beacon
    /// interval, or longer if heartbeats would take more than half of a host's CPU — each round
    /// costs each of the host's `pph` processes `procs − 1` sends and `procs − 1` receives on
    /// the host's one core, so the interval is
    /// `max(beacon interval, 2 × pph × (procs − 1) × (send + receive cost))` (§7.2: "even if 50%
    /// throughput is used for timestamp exchange"). With the benches' pooled CPU
    /// ([`NetworkConfig::pool_host_cpu`](crate::config::NetworkConfig::pool_host_cpu)) that is
    /// half of each process's core's worth.
    pub lamport_heartbeat_interval_ns: Option<u64>,
    /// Token: most messages a holder stamps per holding (`--token-batch`; default 16).
    pub token_batch_max: usize,
    /// Token: most messages a process queues waiting for the token; more sends are refused
    /// (`sends_refused_full`). Default 16 (one holding's worth).
    pub token_queue_len_max: usize,
    /// PLATO and its fixed sequencer: places per sequencing packet, the paper's k
    /// (`--plato-k`; default 10).
    pub plato_k: usize,
    /// PLATO: a partial sequencing batch leaves this long after its first place
    /// (`--plato-flush`; default 20 µs).
    pub plato_flush_ns: u64,
    /// PLATO: Δ, the inter-arrival gap below which two arrivals are suspected
    /// (`--plato-delta`; default 2 µs, a few data-centre hops), the start value when adaptive.
    pub plato_delta_ns: u64,
    /// PLATO: adapt Δ as its §5 does (`--plato-adaptive`; default on).
    pub plato_adaptive: bool,
    /// Record the order in which each process takes in PLATO's direct copies (`Early`
    /// packets) and count the packets cores take in ([`BaseReport::arrivals`](super::BaseReport::arrivals);
    /// PLATO §3's swaps and losses). Off by default; the run is the same either way.
    pub log_arrivals: bool,
    /// ToTo: the threshold φ (`--toto-phi`), `n/2 ≤ φ < n`. `None`: `⌈n/2⌉`, the least φ
    /// the paper allows (its φ = n/2 for even n, §4.2 and §6).
    pub toto_phi: Option<u32>,
    /// ToTo and all-ack: how long a machine that delivered an agreed message stays silent
    /// before it sends a heartbeat (`--toto-heartbeat`; default 20 µs). The paper has none
    /// (docs/TOTO.md).
    pub toto_heartbeat_ns: u64,
    /// ToTo and all-ack: how long the causal layer waits before it NACKs a missing message,
    /// between NACKs, and before it sends an own message again to a machine that has not shown
    /// it delivered (default 200 µs, the causal layer's). No flag: `bench toto` raises it
    /// beside its long heartbeat interval, where a message is shown delivered only by the
    /// next application message.
    pub toto_retry_ns: u64,
    /// ToTo and all-ack: how long a machine may be silent, while another waits on it, before
    /// it is suspected and agreed crashed (§5.1; `--toto-suspect`). `None`: 5 ms, and at least
    /// 4 heartbeats and 4 retries.
    pub toto_suspect_ns: Option<u64>,
    /// Record every delivery's time and latency, and every rollback
    /// ([`BaseReport::deliveries`](super::BaseReport::deliveries); PLATO's Figs. 9 and 11). Off
    /// by default; the run is the same either way.
    pub log_deliveries: bool,
}

impl BaselineConfig {
    /// Defaults for `protocol`.
    pub fn new(protocol: Protocol) -> BaselineConfig {
        BaselineConfig {
            protocol,
            seq_host_packet_ns: None,
            seq_switch_packet_ns: 100,
            seq_queue_len_max: 64,
            lamport_heartbeat_interval_ns: None,
            token_batch_max: 16,
            token_queue_len_max: 16,
            plato_k: 10,
            plato_flush_ns: 20_000,
            plato_delta_ns: 2_000,
            plato_adaptive: true,
            toto_phi: None,
            toto_heartbeat_ns: 20_000,
            toto_retry_ns: 200_000,
            toto_suspect_ns: None,
            log_arrivals: false,
            log_deliveries: false,
        }
    }

    /// The Lamport heartbeat interval this run uses (see
    /// [`BaselineConfig::lamport_heartbeat_interval_ns`]).
    pub fn heartbeat_interval(&self, sim: &SimConfig, procs: u32) -> u64 {
        self.lamport_heartbeat_interval_ns.unwrap_or_else(|| {
            let round = u64::from(sim.net.procs_per_host)
                * u64::from(procs.saturating_sub(1))
                * (sim.net.host_send_ns + sim.net.host_recv_ns);
            sim.net.beacon_interval_ns.max(2 * round)
        })
    }

    /// PLATO's optimistic pipeline in this run: Δ from `plato_delta_ns`, adaptive or fixed.
    pub fn plato_opt(&self) -> onepipe_proto::optimistic::OptConfig {
        use onepipe_proto::optimistic::OptConfig;
        if self.plato_adaptive {
            OptConfig::adaptive(self.plato_delta_ns)
        } else {
            OptConfig::fixed(self.plato_delta_ns)
        }
    }

    /// The host-placed sequencer's cost per packet in and per packet out.
    pub fn seq_host_costs(&self, sim: &SimConfig) -> (u64, u64) {
        match self.seq_host_packet_ns {
            Some(ns) => (ns, ns),
            None => (sim.net.host_recv_ns, sim.net.host_send_ns),
        }
    }

    /// Checks the baseline knobs and the parts of `sim` a baseline run uses; the error names the
    /// flag.
    pub fn validate(&self, sim: &SimConfig) -> Result<(), ConfigError> {
        sim.validate()?;
        let bad = |flag, message: &str| {
            Err(ConfigError {
                flag,
                message: message.to_string(),
            })
        };
        if self.lamport_heartbeat_interval_ns == Some(0) {
            return bad("--lamport-heartbeat", "must be positive (or auto)");
        }
        if self.token_batch_max == 0 {
            return bad("--token-batch", "must be at least 1");
        }
        if self.token_queue_len_max == 0 {
            return bad(
                "--token-batch",
                "the token's send queue must hold at least 1",
            );
        }
        if self.seq_queue_len_max == 0 {
            return bad(
                "--seq-queue",
                "the sequencer's input queue must hold at least 1",
            );
        }
        if self.plato_k == 0 || self.plato_k > onepipe_baselines::packet::ORDER_BATCH_LEN_MAX {
            return bad("--plato-k", "must lie in 1..=1024");
        }
        if self.plato_flush_ns == 0 {
            return bad("--plato-flush", "must be positive");
        }
        if self.plato_delta_ns == 0 {
            return bad("--plato-delta", "must be positive");
        }
        self.validate_toto(sim)?;
        if sim.workload.msg_size > onepipe_baselines::packet::PAYLOAD_LEN_MAX {
            return bad(
                "--msg-size",
                "a baseline message travels in one packet: at most 65,535 bytes",
            );
        }
        let fails_over = matches!(self.protocol, Protocol::Toto | Protocol::AllAck);
        if !sim.faults.crashes.is_empty() && !fails_over {
            return bad(
                "--crash-host",
                "the baselines but ToTo and all-ack do not fail over (BASELINES.md): crashes are not modelled for them",
            );
        }
        if !sim.faults.cuts.is_empty() {
            return bad("--cut", "link cuts are not modelled for the baselines");
        }
        if sim.faults.loss_kind == Some(PacketKind::Commit) {
            return bad(
                "--loss-kind",
                "commit packets are 1Pipe's; baselines take data, nak (repair), beacon (heartbeat) or ack (token)",
            );
        }
        Ok(())
    }
}

impl BaselineConfig {
    /// The ToTo rule of this run for `procs` machines: φ as configured or `⌈n/2⌉`.
    pub fn toto_rule(&self, procs: u32) -> onepipe_baselines::toto::Rule {
        use onepipe_baselines::toto::{toto::default_phi, Rule};
        match self.protocol {
            Protocol::Toto => Rule::Toto {
                phi: self.toto_phi.unwrap_or_else(|| default_phi(procs)),
            },
            _ => Rule::AllAck,
        }
    }

    /// ToTo and all-ack: the least suspicion timeout — a live machine may be silent for a
    /// heartbeat, and its repairs come a retry apart.
    fn toto_suspect_floor_ns(&self) -> u64 {
        onepipe_baselines::toto::member::suspect_floor_ns(
            self.toto_heartbeat_ns,
            self.toto_retry_ns,
        )
    }

    /// ToTo's and all-ack's suspicion timeout (§5.1): [`BaselineConfig::toto_suspect_ns`], or
    /// the membership's default raised to the floor.
    pub fn toto_suspect(&self) -> u64 {
        let default = onepipe_baselines::toto::member::MemberConfig::default().suspect_ns;
        self.toto_suspect_ns
            .unwrap_or_else(|| default.max(self.toto_suspect_floor_ns()))
    }

    /// ToTo and all-ack broadcast (every message to every machine), and φ lies in
    /// `n/2 ≤ φ < n` (§4.2).
    fn validate_toto(&self, sim: &SimConfig) -> Result<(), ConfigError> {
        if !matches!(self.protocol, Protocol::Toto | Protocol::AllAck) {
            return Ok(());
        }
        let bad = |flag, message: String| Err(ConfigError { flag, message });
        if sim.workload.workload != WorkloadKind::AllToAll {
            return bad(
                "--workload",
                "ToTo and all-ack multicast every message to every machine: all-to-all only"
                    .to_string(),
            );
        }
        if self.toto_heartbeat_ns == 0 {
            return bad("--toto-heartbeat", "must be positive".to_string());
        }
        if self.toto_retry_ns == 0 {
            return bad(
                "--toto-heartbeat",
                "the retry interval must be positive".to_string(),
            );
        }
        if self
            .toto_suspect_ns
            .is_some_and(|s| s < self.toto_suspect_floor_ns())
        {
            return bad(
                "--toto-suspect",
                format!(
                    "must be at least 4 × the longer of the heartbeat and the retry interval ({} ns), or live machines are suspected",
                    self.toto_suspect_floor_ns()
                ),
            );
        }
        let hosts = sim.net.hosts()?;
        let mut crashed: Vec<u32> = sim.faults.crashes.iter().map(|c| c.0).collect();
        crashed.sort_unstable();
        crashed.dedup();
        if crashed.len() as u32 >= hosts {
            return bad(
                "--crash-host",
                "ToTo's membership (§5) needs a survivor: at least one host must not crash"
                    .to_string(),
            );
        }
        let procs = hosts * sim.net.procs_per_host;
        if let onepipe_baselines::toto::Rule::Toto { phi } = self.toto_rule(procs) {
            if let Err(e) = onepipe_baselines::toto::toto::check_phi(phi, procs) {
                return bad("--toto-phi", e.to_string());
            }
        }
        Ok(())
    }
}

/// The baseline packet class a `--loss-kind` targets: `data` → [`PacketClass::Data`], `nak` →
/// [`PacketClass::Repair`], `beacon` → [`PacketClass::Heartbeat`] (the periodic control
/// packets), `ack` → [`PacketClass::Token`] (the token and its acknowledgements; and, by
/// [`class_targeted`], ISIS's proposals and agreed timestamps, [`PacketClass::Agreement`]).
/// `commit` has no counterpart (refused by [`BaselineConfig::validate`]).
pub fn class_of_kind(kind: PacketKind) -> Option<PacketClass> {
    match kind {
        PacketKind::Data => Some(PacketClass::Data),
        PacketKind::Nak => Some(PacketClass::Repair),
        PacketKind::Beacon => Some(PacketClass::Heartbeat),
        PacketKind::Ack => Some(PacketClass::Token),
        PacketKind::Commit => None,
    }
}

/// True if loss aimed at `target` (from [`class_of_kind`]) hits a packet of `class`: the same
/// class, or, for the acknowledgement kind, ISIS's agreement packets too.
pub fn class_targeted(target: PacketClass, class: PacketClass) -> bool {
    target == class || (target == PacketClass::Token && class == PacketClass::Agreement)
}
