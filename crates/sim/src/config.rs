//! Everything a simulated run is made of: a seed, whether to check, and four parts — the network
//! ([`NetworkConfig`]), the faults ([`FaultConfig`]), the workload ([`WorkloadConfig`]) and the
//! protocol's settings ([`ProtocolConfig`]). Each part checks what is only about itself;
//! [`SimConfig::validate`] runs those checks, then the ones that need several parts. Defaults
//! follow the paper's testbed (§7.1) where it says, and are stated beside each field otherwise.

mod faults;
mod network;
mod protocol;
mod workload;

pub use faults::{FaultConfig, PacketKind};
pub use network::{Fabric, HostLinks, LinkSpec, NetworkConfig, TopologySpec, TREE_POD_RACKS};
pub use protocol::ProtocolConfig;
pub use workload::{AppSpec, PaxosSpec, RateStep, Service, WorkloadConfig, WorkloadKind};

/// A full run description.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The run's seed.
    pub seed: u64,
    /// Run the checkers.
    pub check: bool,
    /// The network: topology, switches, beacons, clocks, links and CPU costs.
    pub net: NetworkConfig,
    /// The faults injected: link faults and the scheduled ones.
    pub faults: FaultConfig,
    /// The synthetic traffic or the application.
    pub workload: WorkloadConfig,
    /// The protocol's timers, buffers and failure handling.
    pub protocol: ProtocolConfig,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            check: true,
            net: NetworkConfig::default(),
            faults: FaultConfig::default(),
            workload: WorkloadConfig::default(),
            protocol: ProtocolConfig::default(),
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
/// ([`FaultConfig::leaves`]).
pub const LEAVE_FLUSH_MAX_NS: u64 = 2_000_000;

/// Bytes at the start of every simulated payload: the scattering's sequence number and its send
/// time, so deliveries can be matched and timed without a lookup table.
pub const PAYLOAD_HEADER_LEN: usize = 16;

impl SimConfig {
    /// Checks the configuration; the error names the first bad flag. The parts check themselves
    /// in one fixed order — the network ([`NetworkConfig::validate`]), the faults
    /// ([`FaultConfig::validate`]), the workload ([`WorkloadConfig::validate`]), the protocol
    /// ([`ProtocolConfig::validate`]) — and then come the checks that need several parts (the
    /// application and the send buffer against the processes, the faults' hosts against the
    /// topology, link timeouts against the faults, scatterings against the processes, the tree
    /// fabric against the faults and the workload). For a
    /// configuration with several errors, the first error reported is the first in that order.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.net.validate()?;
        self.faults.validate()?;
        self.workload.validate()?;
        self.protocol.validate()?;
        let procs = self.net.procs()?;
        self.validate_app_fits(procs)?;
        self.validate_send_buffer(procs)?;
        self.validate_fault_hosts()?;
        self.validate_link_timeout()?;
        self.validate_scatter(procs)?;
        self.validate_tree_fabric()
    }

    /// The network's fabric and the rest: a tree of aggregators routes by its own tables, so
    /// what works on the Clos's routes does not run there — route black holes (the Clos
    /// router's) and applications (their unordered replies are timed by Clos hops).
    fn validate_tree_fabric(&self) -> Result<(), ConfigError> {
        if self.net.fabric == Fabric::Clos {
            return Ok(());
        }
        if !self.faults.blackholes.is_empty() {
            return Err(bad("--blackhole", "runs on the Clos fabric only"));
        }
        if self.workload.app.is_some() {
            return Err(bad("--app", "runs on the Clos fabric only"));
        }
        Ok(())
    }

    /// The workload and the network: an application's processes among the `procs` there are.
    fn validate_app_fits(&self, procs: u32) -> Result<(), ConfigError> {
        match &self.workload.app {
            Some(AppSpec::ReplKv { replicas, .. }) if procs <= *replicas => Err(bad(
                "--replicas",
                format!(
                    "{replicas} replicas leave no client among {procs} processes \
                     (the processes after the replicas are the clients)"
                ),
            )),
            Some(AppSpec::HashTable { layout, .. }) if procs < layout.procs() => Err(bad(
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
            )),
            _ => Ok(()),
        }
    }

    /// The workload and the protocol: a reliable scattering to some of `procs` processes must
    /// fit the send buffer whole.
    fn validate_send_buffer(&self, procs: u32) -> Result<(), ConfigError> {
        if self.workload.service != Service::BestEffort {
            // A reliable scattering must fit the send buffer whole (§6.1: it waits there until
            // every message fits its window).
            let dsts = match self.workload.workload {
                WorkloadKind::AllToAll => procs as usize,
                WorkloadKind::Scatter { k } => k as usize,
                WorkloadKind::OneToOne => 1,
            };
            let need = dsts.saturating_mul(self.workload.msg_size);
            if self.protocol.send_buffer_bytes < need {
                return Err(bad(
                    "--send-buffer",
                    format!(
                        "a reliable scattering here is {dsts} × {} = {need} bytes and must fit the send buffer ({} bytes)",
                        self.workload.msg_size, self.protocol.send_buffer_bytes
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The faults and the network: the hosts that crash, leave, step their clocks or lose
    /// routes exist.
    fn validate_fault_hosts(&self) -> Result<(), ConfigError> {
        let hosts = self.net.hosts()?;
        let missing = |flag: &'static str, h: u32| {
            bad(
                flag,
                format!("host {h} does not exist (hosts are 0..{hosts})"),
            )
        };
        let f = &self.faults;
        if let Some(&(h, _)) = f.crashes.iter().find(|c| c.0 >= hosts) {
            return Err(missing("--crash-host", h));
        }
        if let Some(&(h, _)) = f.leaves.iter().find(|c| c.0 >= hosts) {
            return Err(missing("--leave-host", h));
        }
        if let Some(&(h, _, _)) = f.clock_steps.iter().find(|c| c.0 >= hosts) {
            return Err(missing("--clock-step", h));
        }
        for &(a, b, _) in &f.blackholes {
            if a >= hosts || b >= hosts || a == b {
                return Err(bad(
                    "--blackhole",
                    format!("hosts {a} and {b}: two different hosts of 0..{hosts}"),
                ));
            }
        }
        Ok(())
    }

    /// The protocol, the workload and the faults: link timeouts, which reliable failure handling
    /// needs when anything fails.
    fn validate_link_timeout(&self) -> Result<(), ConfigError> {
        let f = &self.faults;
        if self.protocol.link_timeout_intervals == 0
            && self.workload.service != Service::BestEffort
            && !(f.cuts.is_empty() && f.crashes.is_empty() && f.leaves.is_empty())
        {
            return Err(bad(
                "--link-timeout",
                "reliable failure handling (§5.2) starts from link timeouts: it cannot be 0 with --crash-host, --leave-host or --cut",
            ));
        }
        Ok(())
    }

    /// The workload and the network: a scattering's destinations and the rate steps' processes
    /// among `procs` processes.
    fn validate_scatter(&self, procs: u32) -> Result<(), ConfigError> {
        if let WorkloadKind::Scatter { k } = self.workload.workload {
            if k == 0 || k as u64 > procs as u64 {
                return Err(bad(
                    "--scatter-k",
                    format!("must be between 1 and the number of processes ({procs}), got {k}"),
                ));
            }
        }
        if let Some(s) = self
            .workload
            .rate_steps
            .iter()
            .find(|s| s.procs.end > procs)
        {
            return Err(bad(
                "--rate",
                format!(
                    "a rate step names processes {:?}; the run has {procs}",
                    s.procs
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Of several errors, the first in the order network, faults, workload, protocol, then the
    /// checks across parts, is the one reported.
    #[test]
    fn of_several_errors_the_first_in_the_fixed_order_is_reported() {
        let mut cfg = SimConfig::default();
        assert_eq!(cfg.validate(), Ok(()));
        cfg.faults.crashes.push((99, 1_000));
        assert_eq!(cfg.validate().unwrap_err().flag, "--crash-host");
        cfg.protocol.rto_ns = 0;
        assert_eq!(cfg.validate().unwrap_err().flag, "--rto");
        cfg.workload.duration_ns = 0;
        assert_eq!(cfg.validate().unwrap_err().flag, "--duration");
        cfg.faults.loss_rate = 2.0;
        assert_eq!(cfg.validate().unwrap_err().flag, "--loss");
        cfg.net.procs_per_host = 0;
        assert_eq!(cfg.validate().unwrap_err().flag, "--procs-per-host");
    }

    /// Each part's defaults pass its own check.
    #[test]
    fn each_parts_defaults_pass_its_own_check() {
        assert_eq!(NetworkConfig::default().validate(), Ok(()));
        assert_eq!(FaultConfig::default().validate(), Ok(()));
        assert_eq!(WorkloadConfig::default().validate(), Ok(()));
        assert_eq!(ProtocolConfig::default().validate(), Ok(()));
    }
}
