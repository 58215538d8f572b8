//! The protocol's settings in a simulated run: the reliable transport's timers and buffer, the
//! best-effort ACK delay and loss timeout, failure handling (§4.2, §5.2) and the hosts' bursts.
//! It checks what is only about these ([`ProtocolConfig::validate`]); what depends on the
//! workload or the faults, [`SimConfig::validate`](super::SimConfig::validate) checks.

use super::{bad, ConfigError};
use onepipe_proto::host::{HostConfig, ACK_DELAY_BE_RTO_DIVISOR_MIN, RETRANSMIT_BURST_MAX};
use onepipe_proto::ids::{NodeId, ProcId};

/// The protocol's settings in a run ([`SimConfig::protocol`](super::SimConfig::protocol)).
#[derive(Clone, Debug)]
pub struct ProtocolConfig {
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
    /// A switch removes an input link silent for this many beacon intervals (§4.2; 0: never).
    pub link_timeout_intervals: u32,
    /// Time the controller waits after the first failure report before Determine, so that
    /// every neighbour of a failure has reported (§5.2), ns.
    pub failure_settle_ns: u64,
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
    /// Optimistic delivery of best-effort messages (`HostConfig::optimistic`, PLATO's pipeline
    /// on 1Pipe; `--optimistic-delta`): Δ at the start, ns; 0: off (the default).
    pub optimistic_delta_ns: u64,
    /// Adapt Δ as PLATO §5 does (`--optimistic-adaptive`; default on).
    pub optimistic_adaptive: bool,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        ProtocolConfig {
            rto_ns: 25_000,
            rto_max_ns: onepipe_proto::reliable::ReliableConfig::default().rto_max_ns,
            dupack_threshold: onepipe_proto::reliable::ReliableConfig::default().dupack_threshold,
            ack_delay_be_ns: HostConfig::new(NodeId(0), vec![ProcId(0)], 1).ack_delay_be_ns,
            loss_timeout_max_ns: HostConfig::new(NodeId(0), vec![ProcId(0)], 1).rto_max_ns,
            send_buffer_bytes: 64 << 10,
            link_timeout_intervals: 10,
            failure_settle_ns: 6_000,
            forward_after: 4,
            proc_ids_spare: None,
            deliver_burst_max: 256,
            retransmit_burst_max: RETRANSMIT_BURST_MAX,
            optimistic_delta_ns: 0,
            optimistic_adaptive: true,
        }
    }
}

impl ProtocolConfig {
    /// Checks the protocol's settings alone; the error names the first bad flag, in a fixed
    /// order: the reliable transport's timers, then the best-effort loss reports.
    pub fn validate(&self) -> Result<(), ConfigError> {
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
}
