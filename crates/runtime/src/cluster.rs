//! The cluster file: who is in a live cluster, how its aggregators are linked, and the settings
//! every member shares (beacon interval, clock, ordering).
//!
//! A cluster is a tree of barrier aggregators (§6.2.3 host representatives: `tor-0`, `tor-1`, …
//! under a `spine-0`) with processes attached to the leaves of the tree — or to any
//! aggregator. It is written in TOML:
//!
//! ```toml
//! controller = "127.0.0.1:7400"   # the controller's TCP address
//! beacon_interval = "1ms"         # T_beacon (§4.2)
//! fast_beacon_interval = "200us"  # while someone waits for the barrier, hosts beacon this often
//!                                 # (chip mode; "0s": never, the paper's fixed interval)
//! aggregator_mode = "chip"        # §6.2.1: barriers on data, waves on at once; "host": §6.2.3
//! aggregator_phase = "200us"      # an aggregator d hops up beacons d × this after each tick
//! clock = "monotonic"             # or "realtime" for a cluster across machines (chrony/PTP)
//! ordered = true                  # false: the same transport with ordering switched off
//! loss_timeout = "50ms"           # a best-effort message unacknowledged this long is reported lost
//! link_timeout = "1s"             # an aggregator removes an input silent this long (§4.2); "0s": never
//! callback_timeout = "2s"         # a §5.2 round waits this long for a process's failure callbacks;
//!                                 # then that process is declared failed ("0s": as long as it takes)
//! start_with = 4                  # the cluster starts once this many processes joined; the
//!                                 # others join the running cluster later (default: all)
//! forward_after = 0               # §5.2 controller forwarding: a reliable message unacknowledged
//!                                 # after this many retransmissions also goes by the controller
//!                                 # (0: off)
//! datagram_len_max = "auto"       # UDP payload bytes per datagram: "auto" (each member's path
//!                                 # MTU: 65,507 on loopback, 1,472 on Ethernet) or 1472..=65507
//! gso = true                      # send many datagrams per system call (UDP GSO) where the kernel can
//! gro = true                      # receive them as one buffer (UDP GRO) where the kernel can
//!
//! [auth]                          # docs/SECURITY.md; or `auth = "off"` (nothing protected)
//! mode = "on"                     # every datagram authenticated; "encrypt": payloads hidden too
//! pki = "pki"                     # relative to this file: ca.crt, each daemon's NAME.crt and
//!                                 # NAME.key, and the controller's cluster secret (`secret`)
//! rotate_every = "1h"             # a new key epoch this often (and on every removal)
//! grace = "500ms"                 # the previous epoch is accepted this long after a switch
//!
//! [[aggregator]]
//! name = "tor-0"
//! addr = "127.0.0.1:0"            # UDP; port 0: any free port, announced to the controller
//! parent = "spine-0"
//!
//! [[aggregator]]
//! name = "spine-0"
//! addr = "127.0.0.1:0"
//!
//! [[process]]
//! id = 0                          # process ids are 0, 1, 2, … with none missing
//! host = 0                        # the machine it runs on (informational)
//! addr = "127.0.0.1:0"
//! aggregator = "tor-0"
//! ```
//!
//! [`Cluster::parse`] reads it and checks it; an error names the field and the line
//! ([`ClusterError`]). [`Cluster::generate`] writes one for a local cluster (what
//! `onepipe topology` prints); [`Cluster::to_toml`] renders any cluster back to TOML.
//!
//! What it is not: the addresses every member actually bound. Members announce those to the
//! controller, which hands the completed cluster to everyone once all have joined
//! ([`crate::control`]).

mod generate;
mod parse;
mod validate;

use crate::auth::AuthMode;
use crate::clock::ClockSource;
use crate::config::{DriverConfig, DATAGRAM_LEN_MIN, GSO_SEGMENTS_MAX, UDP_PAYLOAD_MAX};
use crate::roles::{AggregatorMode, LiveRoles};
use onepipe_proto::aggregator::tree::AggTree;
use onepipe_proto::topology::TreeSwitch;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// Most processes a cluster may have: as many senders as a receiver's reorder buffer can order
/// ([`onepipe_proto::reorder::SENDERS_MAX`]).
pub const PROCS_MAX: u32 = onepipe_proto::reorder::SENDERS_MAX;

/// Fresh process ids a live cluster has at least for processes that join it while it runs
/// (rejoins after a failure, joins into free slots; [`Cluster::proc_ids_max`]).
pub const REJOIN_IDS_MIN: u32 = 64;

/// Most aggregators a cluster may have.
pub const AGGREGATORS_MAX: usize = 4096;

/// The shortest fast beacon interval a cluster file may set (issue 37): 10 µs.
pub const FAST_BEACON_INTERVAL_MIN_NS: u64 = 10_000;

fn fast_beacon_interval_default() -> u64 {
    crate::roles::FAST_BEACON_INTERVAL_NS_DEFAULT
}

/// A live cluster: its members and shared settings. See the module docs for the file format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    /// Where the controller listens (TCP).
    pub controller: SocketAddr,
    /// T_beacon (§4.2), for hosts and aggregators.
    pub beacon_interval_ns: u64,
    /// Issue 37: while someone waits for the barrier, hosts also beacon at this shorter
    /// interval ([`LiveRoles::fast_beacon_interval_ns`]); 0: never.
    #[serde(default = "fast_beacon_interval_default")]
    pub fast_beacon_interval_ns: u64,
    /// How the aggregators aggregate barriers (§6.2.1 chip, the default, or §6.2.3 host
    /// representatives).
    #[serde(default)]
    pub aggregator_mode: AggregatorMode,
    /// An aggregator `d` hops above the hosts beacons `d` times this after each beacon tick, so
    /// one wave of beacons crosses the tree per interval (§4.2).
    pub aggregator_phase_ns: u64,
    /// The clock every member reads.
    pub clock: ClockSource,
    /// Total order on (the default). `false` runs the identical transport with no barriers and
    /// no reordering: messages are delivered on arrival (a baseline, best effort only).
    pub ordered: bool,
    /// A best-effort message unacknowledged this long is reported lost to its sender.
    pub loss_timeout_ns: u64,
    /// An aggregator removes an input link silent this long (§4.2); 0 never.
    pub link_timeout_ns: u64,
    /// §5.2: how long a failure round waits for a process to finish its failure callbacks
    /// before that process is declared failed itself; 0 as long as it takes.
    #[serde(default = "callback_timeout_default")]
    pub callback_timeout_ns: u64,
    /// §5.2 controller forwarding: a reliable message unacknowledged after this many
    /// retransmissions is also handed to the controller, which relays it to the receiver over
    /// the control connections; 0 (the default) is off.
    #[serde(default)]
    pub forward_after: u32,
    /// UDP payload bytes per datagram on the wire; `None` (`"auto"`): as many as every path
    /// from the member carries without IP fragmentation (its route MTU). See
    /// [`Cluster::driver_config`].
    #[serde(default)]
    pub datagram_len_max: Option<usize>,
    /// Send several datagrams per system call with UDP GSO where the kernel has it.
    #[serde(default = "yes")]
    pub gso: bool,
    /// Receive datagrams coalesced with UDP GRO where the kernel has it.
    #[serde(default = "yes")]
    pub gro: bool,
    /// How datagrams and the control channel are protected (docs/SECURITY.md). `None`: the
    /// file says nothing, which the daemons refuse (a cluster must say `auth = "off"` to run
    /// unprotected).
    #[serde(default)]
    pub auth: Option<AuthConfig>,
    /// The cluster starts (`Ready`) once every aggregator and this many processes joined;
    /// `None`: every process. The process ids nobody took by then are free: a process that
    /// joins later joins the running cluster (§4.2 addition of links, as a new process of
    /// §5.2 — it gets a fresh id) and every member sees it in its view.
    #[serde(default)]
    pub start_with: Option<u32>,
    /// The aggregators, in file order.
    pub aggregators: Vec<AggregatorSpec>,
    /// The processes, by id.
    pub processes: Vec<ProcessSpec>,
}

fn callback_timeout_default() -> u64 {
    crate::roles::CALLBACK_TIMEOUT_NS
}

fn yes() -> bool {
    true
}

/// The `[auth]` section of a cluster file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthConfig {
    /// Whether datagrams are sealed, and how.
    pub mode: AuthMode,
    /// The directory of the cluster's CA certificate, each daemon's certificate and key
    /// (`NAME.crt`, `NAME.key`) and the controller's cluster secret (`secret`): what
    /// `onepipe topology --pki` writes. Relative paths are relative to the cluster file.
    pub pki: Option<PathBuf>,
    /// A new key epoch this often (0: only on removals and restarts).
    pub rotate_every_ns: u64,
    /// How long the previous epoch is accepted after a switch.
    pub grace_ns: u64,
}

impl AuthConfig {
    /// Protection on, keys from `pki`, default rotation and grace.
    pub fn on(pki: Option<PathBuf>) -> AuthConfig {
        AuthConfig {
            mode: AuthMode::On,
            pki,
            rotate_every_ns: crate::keys::ROTATE_EVERY_NS_DEFAULT,
            grace_ns: crate::auth::KEY_GRACE_NS_DEFAULT,
        }
    }

    /// No protection (`auth = "off"`).
    pub fn off() -> AuthConfig {
        AuthConfig {
            mode: AuthMode::Off,
            ..AuthConfig::on(None)
        }
    }
}

/// One barrier aggregator (a host representative of a switch, §6.2.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregatorSpec {
    /// Its name (`tor-0`, `spine-0`, …).
    pub name: String,
    /// Its UDP address (port 0: any free port).
    pub addr: SocketAddr,
    /// The aggregator one layer up, if any. Exactly one aggregator has none: the root.
    pub parent: Option<String>,
}

/// One process (an endpoint).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// Its process id.
    pub id: u32,
    /// The machine it runs on (informational: processes of one host share nothing here).
    pub host: u32,
    /// Its UDP address (port 0: any free port).
    pub addr: SocketAddr,
    /// The aggregator its uplink goes to.
    pub aggregator: String,
}

/// How [`Cluster::generate`] lays out a local cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalLayout {
    /// Hosts.
    pub hosts: u32,
    /// Processes per host.
    pub procs_per_host: u32,
    /// 1: every process under `tor-0`; 2: racks of `rack_size` hosts under `tor-N`, joined by
    /// `spine-0`; 3: racks grouped `pod_racks` to a pod under `agg-N`, the pods joined by
    /// `core-0` (edge, aggregation and core layers).
    pub layers: u8,
    /// Hosts per rack (two and three layers).
    pub rack_size: u32,
    /// Racks per pod (three layers).
    pub pod_racks: u32,
    /// The controller's address ([`crate::LocalCluster`] listens there; port 0, the default:
    /// any free port).
    pub controller: SocketAddr,
    /// [`Cluster::start_with`]: the cluster starts once this many processes joined (`None`,
    /// the default: all of them); the others may join it later.
    pub start_with: Option<u32>,
}

impl Default for LocalLayout {
    fn default() -> Self {
        LocalLayout {
            hosts: 4,
            procs_per_host: 1,
            layers: 2,
            rack_size: 2,
            pod_racks: 2,
            controller: SocketAddr::from(([127, 0, 0, 1], 0)),
            start_with: None,
        }
    }
}

/// A cluster file that does not parse or does not make sense. Names the field and, when it came
/// from a file, the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterError {
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    /// The field, as a path: `beacon_interval`, `process.aggregator`, `aggregator.parent`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}: {}", self.field, self.message),
            None => write!(f, "{}: {}", self.field, self.message),
        }
    }
}

impl std::error::Error for ClusterError {}

impl Cluster {
    /// The transport of a member whose datagrams go to `peers`, from `base`: datagrams of the
    /// file's `datagram_len_max`, or with `"auto"` as long as every path to a peer carries
    /// whole (the smallest route MTU less the IP and UDP headers: 65,507 bytes on loopback,
    /// 1,472 on Ethernet, 8,972 with jumbo frames); UDP GSO when `gso` is on and more than one
    /// datagram fits a send (the driver falls back where the kernel refuses it); UDP GRO as
    /// `gro` says.
    ///
    /// # Errors
    /// A route MTU the kernel will not tell, or a `datagram_len_max` longer than a path carries
    /// (it would be IP-fragmented, or refused with the don't-fragment bit): the message names
    /// the field, the peer and its limit.
    pub fn driver_config(
        &self,
        base: &DriverConfig,
        peers: &[SocketAddr],
    ) -> Result<DriverConfig, String> {
        let mut path_max = UDP_PAYLOAD_MAX;
        let mut narrowest = None;
        for &peer in peers {
            let max = crate::sys::path_payload_max(peer)
                .map_err(|e| format!("datagram_len_max: the route MTU to {peer}: {e}"))?;
            if max < path_max {
                (path_max, narrowest) = (max, Some(peer));
            }
        }
        let len = match self.datagram_len_max {
            None if path_max < DATAGRAM_LEN_MIN => {
                return Err(format!(
                    "datagram_len_max: the path to {} carries at most {path_max} bytes of UDP payload per datagram, below the {DATAGRAM_LEN_MIN} a live cluster needs (the largest ACK batch)",
                    narrowest.map_or("a peer".to_string(), |p| p.to_string())
                ))
            }
            None => path_max,
            Some(n) if n > path_max => {
                return Err(format!(
                    "datagram_len_max: {n} bytes do not fit the path to {} (at most {path_max} bytes of UDP payload per datagram): they would be IP-fragmented",
                    narrowest.map_or("a peer".to_string(), |p| p.to_string())
                ))
            }
            Some(n) => n,
        };
        let mut cfg = base.clone();
        cfg.coalesce.datagram_len_max = len;
        cfg.coalesce.segments_max = if self.gso {
            (UDP_PAYLOAD_MAX / len).clamp(1, GSO_SEGMENTS_MAX)
        } else {
            1
        };
        cfg.gro = self.gro;
        cfg.recv_datagram_len_max = cfg.recv_datagram_len_max.max(cfg.coalesce.send_len_max());
        if self.auth_mode().seals() {
            cfg.coalesce = cfg.coalesce.sealed();
        }
        Ok(cfg)
    }

    /// How datagrams are protected: [`AuthMode::Off`] without an `[auth]` section.
    pub fn auth_mode(&self) -> AuthMode {
        self.auth.as_ref().map_or(AuthMode::Off, |a| a.mode)
    }

    /// Whether §5.2 controller forwarding is on (`forward_after > 0`).
    pub fn forwarding(&self) -> bool {
        self.forward_after > 0
    }

    /// Process ids a live cluster may use: the file's, and as many again (at least
    /// [`REJOIN_IDS_MIN`]) for processes that join while it runs — rejoins after a failure
    /// (§5.2: a recovered process "joins 1Pipe as a new process") and joins into free slots —
    /// at most [`PROCS_MAX`]. Every reorder buffer has room for this many senders.
    pub fn proc_ids_max(&self) -> u32 {
        let procs = self.procs();
        procs
            .saturating_mul(2)
            .max(procs.saturating_add(REJOIN_IDS_MIN))
            .min(PROCS_MAX)
    }

    /// Number of processes.
    pub fn procs(&self) -> u32 {
        self.processes.len() as u32
    }

    /// The aggregator called `name`.
    pub fn aggregator(&self, name: &str) -> Option<&AggregatorSpec> {
        self.aggregators.iter().find(|a| a.name == name)
    }

    /// The index of the aggregator called `name`.
    pub fn aggregator_index(&self, name: &str) -> Option<usize> {
        self.aggregators.iter().position(|a| a.name == name)
    }

    /// Process `id`.
    pub fn process(&self, id: u32) -> Option<&ProcessSpec> {
        self.processes.iter().find(|p| p.id == id)
    }

    /// The aggregators whose parent is `name`, in file order.
    pub fn children(&self, name: &str) -> Vec<&AggregatorSpec> {
        self.aggregators
            .iter()
            .filter(|a| a.parent.as_deref() == Some(name))
            .collect()
    }

    /// The processes attached directly to `name`, by id.
    pub fn attached(&self, name: &str) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .processes
            .iter()
            .filter(|p| p.aggregator == name)
            .map(|p| p.id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Every process below `name` (attached to it or to an aggregator below it), by id.
    pub fn subtree_procs(&self, name: &str) -> Vec<u32> {
        let mut v = self.attached(name);
        let mut stack: Vec<&str> = vec![name];
        let mut visited = BTreeSet::new();
        while let Some(at) = stack.pop() {
            if !visited.insert(at.to_string()) {
                continue;
            }
            for c in self.children(at) {
                v.extend(self.attached(&c.name));
                stack.push(&c.name);
            }
        }
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The cluster's tree of aggregators as the one builder of their roles takes it
    /// ([`AggTree`]): per aggregator, in file order, its parent and its attached processes by
    /// id; process ids up to [`Cluster::proc_ids_max`].
    pub fn tree(&self) -> AggTree {
        let aggs = self
            .aggregators
            .iter()
            .map(|a| TreeSwitch {
                parent: a.parent.as_deref().and_then(|p| self.aggregator_index(p)),
                hosts: self.attached(&a.name),
            })
            .collect();
        AggTree::new(self.procs(), self.proc_ids_max(), aggs)
    }

    /// The live role settings of this cluster.
    pub fn roles(&self) -> LiveRoles {
        LiveRoles {
            beacon_interval_ns: self.beacon_interval_ns,
            fast_beacon_interval_ns: self.fast_beacon_interval_ns,
            aggregator_mode: self.aggregator_mode,
            aggregator_phase_ns: self.aggregator_phase_ns,
            rto_ns: self.loss_timeout_ns,
            link_timeout_ns: self.link_timeout_ns,
            callback_timeout_ns: self.callback_timeout_ns,
            forward_after_retransmits: self.forward_after,
            ..LiveRoles::default()
        }
    }
}

/// Parses `3us`, `1.5ms`, `200ns`, `2s` (also `µs`) into nanoseconds.
///
/// ```
/// assert_eq!(onepipe_runtime::cluster::parse_duration_ns("1.5ms"), Ok(1_500_000));
/// assert!(onepipe_runtime::cluster::parse_duration_ns("3").is_err());
/// ```
///
/// # Errors
/// No unit, an unknown unit, not a number, or out of range (negative or above 10⁶ s).
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("'{s}' needs a unit: ns, us, ms or s (e.g. 1ms)"))?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("'{num}' is not a number (in '{s}')"))?;
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" => 60e9,
        "h" => 3600e9,
        _ => {
            return Err(format!(
                "unknown unit '{unit}' in '{s}': use ns, us, ms, s, m or h"
            ))
        }
    };
    let ns = v * scale;
    if !ns.is_finite() || !(0.0..=1e15).contains(&ns) {
        return Err(format!("'{s}' is out of range (0 to 1e6 s)"));
    }
    Ok(ns.round() as u64)
}

/// The shortest exact form of `ns` in the largest whole unit: `1ms`, `250us`, `7ns`.
pub fn format_duration(ns: u64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    for (unit, scale) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= scale && ns.is_multiple_of(scale) {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

#[cfg(test)]
mod tests;
