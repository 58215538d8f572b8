//! The faults a simulated run injects: link reordering, loss and duplication, and the scheduled
//! ones (crashes, leaves, restarts, cuts and heals, clock steps, controller outages, black
//! holes). It checks what is only about these ([`FaultConfig::validate`]); whether the hosts
//! they name exist, [`SimConfig::validate`](super::SimConfig::validate) checks.

use super::{bad, ConfigError, LEAVE_FLUSH_MAX_NS};

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

/// The faults a run injects ([`SimConfig::faults`](super::SimConfig::faults)).
#[derive(Clone, Debug)]
pub struct FaultConfig {
    /// Probability that a packet is held back on a link and overtaken (non-FIFO links).
    pub reorder_prob: f64,
    /// Largest extra delay of a held-back packet.
    pub reorder_delay_ns: u64,
    /// Probability that a packet starts a loss event on its link (seeded, per link).
    pub loss_rate: f64,
    /// Packets one loss event drops on its link (1: independent losses).
    pub loss_burst: u32,
    /// Only packets of this kind are lost (`None`: any kind).
    pub loss_kind: Option<PacketKind>,
    /// Probability that a packet is duplicated on its link.
    pub dup_rate: f64,
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
    /// Cuts: (name, true time ns). Every link of the named host ("host-3": a host link
    /// failure) or physical switch ("tor-1", "core-0": a switch failure), the physical link
    /// between two nodes ("agg-0/core-0", both directions) or one direction of it
    /// ("agg-3>tor-3") carries nothing from then on.
    pub cuts: Vec<(String, u64)>,
    /// Heals of cuts: (the cut's name, true time ns), e.g. ("host-9", 900 µs) after a cut of
    /// "host-9" (`--cut host-9@600us..900us`): its links carry again from then on, and a host
    /// the controller declared failed meanwhile runs §5.2 receiver recovery and rejoins.
    pub heals: Vec<(String, u64)>,
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
    /// Receiver overload (PLATO §3: "it is the end-host kernel that gets overwhelmed ... and
    /// drops packets"): a core holding this many packets waiting drops the next one that
    /// arrives, as a full kernel receive buffer does (`--recv-queue`; 0: unbounded).
    pub recv_queue_len_max: u32,
    /// Receiver stalls: each core is descheduled now and then (Poisson, this mean interval;
    /// `--recv-stall-every`; 0: never) for `recv_stall_ns`, while packets queue at it — PLATO
    /// §3's "the receive thread is occasionally context-switched out and loses packets".
    pub recv_stall_every_ns: u64,
    /// How long one stall lasts (`--recv-stall`).
    pub recv_stall_ns: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            reorder_prob: 0.0,
            reorder_delay_ns: 5_000,
            loss_rate: 0.0,
            loss_burst: 1,
            loss_kind: None,
            dup_rate: 0.0,
            crashes: Vec::new(),
            leaves: Vec::new(),
            restarts: Vec::new(),
            cuts: Vec::new(),
            heals: Vec::new(),
            clock_steps: Vec::new(),
            controller_down: Vec::new(),
            blackholes: Vec::new(),
            recv_queue_len_max: 0,
            recv_stall_every_ns: 0,
            recv_stall_ns: 0,
        }
    }
}

impl FaultConfig {
    /// Checks the faults alone; the error names the first bad flag, in a fixed order: the links'
    /// faults, then the scheduled ones.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_link_faults()?;
        self.validate_noise()?;
        self.validate_schedule()
    }

    /// Reordering and loss probabilities.
    fn validate_link_faults(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.reorder_prob) {
            return Err(bad("--reorder-prob", "must be between 0 and 1"));
        }
        if !(0.0..=1.0).contains(&self.loss_rate) {
            return Err(bad("--loss", "must be between 0 and 1"));
        }
        Ok(())
    }

    /// Loss bursts and duplication.
    fn validate_noise(&self) -> Result<(), ConfigError> {
        if self.loss_burst == 0 {
            return Err(bad("--loss-burst", "must be at least 1 packet"));
        }
        if !(0.0..=1.0).contains(&self.dup_rate) {
            return Err(bad("--dup", "must be between 0 and 1"));
        }
        if self.recv_stall_every_ns > 0 && self.recv_stall_ns == 0 {
            return Err(bad(
                "--recv-stall",
                "must be positive when --recv-stall-every is set",
            ));
        }
        Ok(())
    }

    /// Leaves, restarts, clock steps and controller outages, each against the others.
    fn validate_schedule(&self) -> Result<(), ConfigError> {
        for &(h, _) in &self.leaves {
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
        for &(_, _, step) in &self.clock_steps {
            if step.unsigned_abs() > 1_000_000_000 {
                return Err(bad("--clock-step", "a step is at most 1 s either way"));
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
}
