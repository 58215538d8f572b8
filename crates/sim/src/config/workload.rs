//! The workload of a simulated run: the synthetic traffic (pattern, service, message size, rate,
//! duration) or the application every process runs in its place. It checks what is only about
//! these ([`WorkloadConfig::validate`]); whether they fit the network's processes,
//! [`SimConfig::validate`](super::SimConfig::validate) checks.

use super::{bad, ConfigError, PAYLOAD_HEADER_LEN};

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

/// The workload of a run ([`SimConfig::workload`](super::SimConfig::workload)).
#[derive(Clone, Debug)]
pub struct WorkloadConfig {
    /// Traffic pattern.
    pub workload: WorkloadKind,
    /// Best effort, reliable, or both.
    pub service: Service,
    /// Message size in bytes.
    pub msg_size: usize,
    /// Sends (messages or scatterings) per second per process, Poisson (or periodic, below).
    pub rate_per_proc: f64,
    /// Periodic sends in place of Poisson ones: every process sends every `1 / rate_per_proc`
    /// exactly, its first send at a uniformly drawn phase within the first period (so the
    /// processes do not send in lockstep). ToTo's §6 periodic source. Off by default; not with
    /// `rate_steps`.
    pub periodic: bool,
    /// How long processes send.
    pub duration_ns: u64,
    /// Longest the run goes on after sending stops, until everything in flight has been
    /// delivered or reported; it stops as soon as that is so.
    pub drain_ns: u64,
    /// An application every process runs in place of the synthetic workload (`--app`; `None`:
    /// the synthetic workload).
    pub app: Option<AppSpec>,
    /// Keep the application's history for `Report::app_history` (`--history`).
    pub keep_history: bool,
    /// Changes of the send rate over time for some processes (PLATO's Fig. 9 load step), in
    /// order of `from_ns`. Empty (the default): every process sends at `rate_per_proc` for the
    /// whole run. The synthetic workload only.
    pub rate_steps: Vec<RateStep>,
}

/// From `from_ns` on, processes `procs` send `rate_per_proc` sends per second (Poisson; 0:
/// silent) until a later step for them ([`WorkloadConfig::rate_steps`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RateStep {
    /// When the step takes effect, true time, ns.
    pub from_ns: u64,
    /// The processes it sets the rate of.
    pub procs: std::ops::Range<u32>,
    /// Their rate from then on, sends per second (0: they stop sending).
    pub rate_per_proc: f64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            workload: WorkloadKind::AllToAll,
            service: Service::BestEffort,
            msg_size: 64,
            rate_per_proc: 10_000.0,
            periodic: false,
            duration_ns: 2_000_000,
            drain_ns: 10_000_000,
            app: None,
            keep_history: false,
            rate_steps: Vec::new(),
        }
    }
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

impl WorkloadConfig {
    /// Checks the workload alone; the error names the first bad flag, in a fixed order: the
    /// application, then the traffic.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_app()?;
        self.validate_traffic()
    }

    /// The application's settings and its window of transactions in flight.
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
                validate_replkv(workload, *wnd, *bsz, *replicas)?;
                Some(*window)
            }
            Some(AppSpec::HashTable {
                workload,
                window,
                layout,
            }) => {
                validate_hashtable(workload, *window, layout)?;
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

    /// Message size, send rate and duration.
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
        if self.periodic && !self.rate_steps.is_empty() {
            return Err(bad(
                "--rate",
                "periodic sends take one rate, not rate steps",
            ));
        }
        self.validate_rate_steps()
    }

    /// The rate steps: in order of time, each over some processes, at a rate in 0..=1e9.
    fn validate_rate_steps(&self) -> Result<(), ConfigError> {
        for (i, s) in self.rate_steps.iter().enumerate() {
            if s.procs.is_empty() {
                return Err(bad("--rate", format!("rate step {i}: no processes")));
            }
            if !(s.rate_per_proc >= 0.0 && s.rate_per_proc <= 1e9) {
                return Err(bad(
                    "--rate",
                    format!("rate step {i}: the rate must lie in 0..=1e9 messages/s"),
                ));
            }
            if i > 0 && s.from_ns < self.rate_steps[i - 1].from_ns {
                return Err(bad(
                    "--rate",
                    format!("rate step {i}: the steps must be in order of time"),
                ));
            }
        }
        Ok(())
    }

    /// Process `proc`'s send rate at true time `t` (sends per second; 0: silent), and when it
    /// next changes (`None`: never), from [`WorkloadConfig::rate_steps`].
    pub fn rate_at(&self, proc: u32, t: u64) -> (f64, Option<u64>) {
        let mine = || self.rate_steps.iter().filter(|s| s.procs.contains(&proc));
        let rate = mine()
            .take_while(|s| s.from_ns <= t)
            .last()
            .map_or(self.rate_per_proc, |s| s.rate_per_proc);
        let next = mine().map(|s| s.from_ns).find(|&f| f > t);
        (rate, next)
    }
}

/// The replicated key-value service's own settings: its operations, MultiPaxos's window and
/// batch, and the number of replicas.
fn validate_replkv(
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
    Ok(())
}

/// The hash table's own settings: its operations, its layout and the window.
fn validate_hashtable(
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
    Ok(())
}
