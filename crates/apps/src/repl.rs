//! Replicated services (§2.1 state machine replication, §2.2.2 1-RTT replication, §7.3.3–7.3.4):
//! one replicated linearizable key-value service — get, put, compare-and-set — served by
//! interchangeable replication schemes, so they can be compared operation for operation:
//!
//! * `onertt` — 1-RTT replication on best-effort 1Pipe (§2.2.2): a client scatters each entry
//!   to every replica; replicas order entries by timestamp, reject per-client sequence gaps and
//!   return a checksum over the timestamps of every entry they appended; a write is done when all
//!   checksums agree; a loss or a failure starts a recovery, a consensus round that removes the
//!   entries not every replica holds. Any replica serves reads, in timestamp order.
//! * [`paxos`] — MultiPaxos with batching and pipelining (Santos and Schiper's Fig. 6 policy: WND,
//!   BSZ, Δ_B) on direct messages: a stable leader orders batches of requests in pipelined
//!   instances; reads go through the log too.
//!
//! This module holds what every scheme shares: the commands ([`Cmd`]) and the state machine
//! ([`KvMachine`]), what a client completed ([`ReplDone`]), the workload ([`ReplWorkload`],
//! [`CmdGen`]), the settings ([`ReplConfig`]), the interface a driver sees ([`ReplApp`]) and
//! what replicas expose for the end-of-run checks ([`ReplicaLog`]).

pub mod chain;
pub mod lincheck;
pub mod onertt;
pub mod paxos;

use crate::App;
use onepipe_proto::rng::Rng;
use onepipe_proto::{Instant, ProcId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A key.
pub type Key = u64;
/// A value: its identity. Values are unique per write (`client << 40 | counter`), so a checker
/// can tell which write a read saw; their bytes travel as padding of
/// [`ReplWorkload::value_size`].
pub type Val = u64;

/// A command of the replicated key-value service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Cmd {
    /// Read `key`; the output is its value (`None`: never written).
    Get(Key),
    /// Write `value` to `key`; no output.
    Put(Key, Val),
    /// Compare-and-set: if `key` holds `expect`, write `new`. The output is the value `key` held
    /// before, so the swap happened exactly when the output equals `expect`.
    Cas {
        /// The key.
        key: Key,
        /// The value it must hold (`None`: never written).
        expect: Option<Val>,
        /// The value written if it does.
        new: Val,
    },
}

impl Cmd {
    /// Its key.
    pub fn key(&self) -> Key {
        match *self {
            Cmd::Get(k) | Cmd::Put(k, _) | Cmd::Cas { key: k, .. } => k,
        }
    }
    /// It may change the state (put, compare-and-set).
    pub fn is_write(&self) -> bool {
        !matches!(self, Cmd::Get(_))
    }
    /// `get`, `put` or `cas` (the history's `op`).
    pub fn name(&self) -> &'static str {
        match self {
            Cmd::Get(_) => "get",
            Cmd::Put(..) => "put",
            Cmd::Cas { .. } => "cas",
        }
    }
    /// The value it writes, if any.
    pub fn written(&self) -> Option<Val> {
        match *self {
            Cmd::Get(_) => None,
            Cmd::Put(_, v) | Cmd::Cas { new: v, .. } => Some(v),
        }
    }
}

/// The replicated state machine: a map from keys to values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvMachine {
    map: HashMap<Key, Val>,
}

impl KvMachine {
    /// Applies `cmd` and returns its output (see [`Cmd`]).
    pub fn apply(&mut self, cmd: &Cmd) -> Option<Val> {
        match *cmd {
            Cmd::Get(k) => self.map.get(&k).copied(),
            Cmd::Put(k, v) => {
                self.map.insert(k, v);
                None
            }
            Cmd::Cas { key, expect, new } => {
                let old = self.map.get(&key).copied();
                if old == expect {
                    self.map.insert(key, new);
                }
                old
            }
        }
    }
    /// `key`'s value.
    pub fn get(&self, key: Key) -> Option<Val> {
        self.map.get(&key).copied()
    }
    /// Keys written.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Nothing written.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// An operation a client completed, with its client-observed call and return times (the
/// history a linearizability checker reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplDone {
    /// The client process.
    pub client: u32,
    /// The client's number for it.
    pub id: u64,
    /// The command.
    pub cmd: Cmd,
    /// Its output (see [`Cmd`]).
    pub output: Option<Val>,
    /// When the client issued it (the client's clock, ns).
    pub call_ns: u64,
    /// When the client learned its outcome (the client's clock, ns).
    pub return_ns: u64,
}

/// The workload of the replicated key-value service.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplWorkload {
    /// Keys, drawn uniformly.
    pub keys: u64,
    /// Share of gets.
    pub read_ratio: f64,
    /// Share of compare-and-sets among writes.
    pub cas_ratio: f64,
    /// Bytes of each written value (padding on the wire; §7.3.4 writes 4 KB).
    pub value_size: u32,
}

impl Default for ReplWorkload {
    fn default() -> Self {
        ReplWorkload {
            keys: 1_000,
            read_ratio: 0.5,
            cas_ratio: 0.1,
            value_size: 64,
        }
    }
}

/// The largest value a request may carry, bytes: it must fit one datagram with its headers.
pub const MAX_VALUE_SIZE: u32 = 8_192;

/// A request the service refuses before sending it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplError {
    /// The value is larger than [`MAX_VALUE_SIZE`].
    ValueTooLarge {
        /// Its size.
        size: u32,
        /// The limit.
        limit: u32,
    },
}

impl core::fmt::Display for ReplError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReplError::ValueTooLarge { size, limit } => {
                write!(
                    f,
                    "a value of {size} bytes is over the limit of {limit} bytes"
                )
            }
        }
    }
}

impl std::error::Error for ReplError {}

impl ReplWorkload {
    /// Checks the workload, naming the bad field.
    pub fn validate(&self) -> Result<(), String> {
        if self.keys == 0 {
            return Err("keys must be at least 1".into());
        }
        for (name, r) in [
            ("read ratio", self.read_ratio),
            ("cas ratio", self.cas_ratio),
        ] {
            if !(0.0..=1.0).contains(&r) {
                return Err(format!("{name} {r} is not between 0 and 1"));
            }
        }
        if self.value_size > MAX_VALUE_SIZE {
            return Err(ReplError::ValueTooLarge {
                size: self.value_size,
                limit: MAX_VALUE_SIZE,
            }
            .to_string());
        }
        Ok(())
    }
}

/// Draws a client's commands: uniform keys, unique written values, compare-and-sets that expect
/// the last value the client saw for the key (so some succeed).
#[derive(Clone, Debug)]
pub struct CmdGen {
    workload: ReplWorkload,
    client: u32,
    rng: Rng,
    written: u64,
    seen: HashMap<Key, Val>,
}

impl CmdGen {
    /// `client`'s generator, seeded.
    pub fn new(workload: ReplWorkload, client: u32, seed: u64) -> CmdGen {
        CmdGen {
            workload,
            client,
            rng: Rng::new(seed),
            written: 0,
            seen: HashMap::new(),
        }
    }
    /// The next command.
    pub fn next_cmd(&mut self) -> Cmd {
        let key = self.rng.below(self.workload.keys);
        if self.rng.chance(self.workload.read_ratio) {
            return Cmd::Get(key);
        }
        self.written += 1;
        let value = (u64::from(self.client) << 40) | self.written;
        if self.rng.chance(self.workload.cas_ratio) {
            Cmd::Cas {
                key,
                expect: self.seen.get(&key).copied(),
                new: value,
            }
        } else {
            Cmd::Put(key, value)
        }
    }
    /// Learns what a completed command saw.
    pub fn observe(&mut self, cmd: &Cmd, output: Option<Val>) {
        let seen = match *cmd {
            Cmd::Get(_) => output,
            Cmd::Put(_, v) => Some(v),
            Cmd::Cas { expect, new, .. } => {
                if output == expect {
                    Some(new)
                } else {
                    output
                }
            }
        };
        match seen {
            Some(v) => self.seen.insert(cmd.key(), v),
            None => self.seen.remove(&cmd.key()),
        };
    }
}

/// The settings of a replicated service's process.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplConfig {
    /// This process.
    pub me: ProcId,
    /// Processes `0..replicas` are the replicas.
    pub replicas: u32,
    /// Processes of the group; the clients are the processes with a window.
    pub procs: u32,
    /// Operations a client keeps in flight (a closed loop); 0: not a client.
    pub window: u32,
    /// The workload.
    pub workload: ReplWorkload,
    /// When the client starts issuing (local time).
    pub start: Instant,
    /// It issues nothing new from then on (local time).
    pub stop: Instant,
    /// A client that has heard nothing about an operation for this long suspects a loss or a
    /// failure (1-RTT: it asks for recovery; reads are sent again).
    pub suspect_ns: u64,
    /// A replica keeps this many committed entries after its commit point for a recovery and
    /// for the end-of-run checks; older ones are folded into its state.
    pub retain: usize,
    /// Each replica writes every entry to its disk before answering for it ([`Disk`]).
    pub disk: DiskModel,
}

/// A replica's disk (§7.3.4's SSD): a log device with group commit. A write takes `write_ns`
/// plus a uniform draw in `0..=jitter_ns`; writes issued while the disk is busy wait for it and
/// go together in its next write, as a log's group commit does. Zero `write_ns`: no disk
/// (in-memory replicas).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskModel {
    /// Service time of one write, ns.
    pub write_ns: u64,
    /// Uniform jitter added to each write, ns.
    pub jitter_ns: u64,
}

/// A disk that serves writes in order, grouping those that wait ([`DiskModel`]): `write` says
/// when a write issued now is durable.
#[derive(Clone, Debug)]
pub struct Disk {
    model: DiskModel,
    /// When the last write scheduled starts, and when it is durable.
    last_start: u64,
    busy_until: u64,
    rng: Rng,
}

impl Disk {
    /// A disk of `model`, its jitter drawn from `seed`.
    pub fn new(model: DiskModel, seed: u64) -> Disk {
        Disk {
            model,
            last_start: 0,
            busy_until: 0,
            rng: Rng::new(seed),
        }
    }
    /// There is a disk to wait for.
    pub fn enabled(&self) -> bool {
        self.model.write_ns > 0
    }
    /// Issues a write at `now`; returns when it is durable (`now` without a disk).
    pub fn write(&mut self, now: Instant) -> Instant {
        if !self.enabled() {
            return now;
        }
        if now.0 < self.last_start {
            // The next write has not started: this one goes with it.
            return Instant(self.busy_until);
        }
        let jitter = if self.model.jitter_ns > 0 {
            self.rng.below(self.model.jitter_ns + 1)
        } else {
            0
        };
        self.last_start = self.busy_until.max(now.0);
        self.busy_until = self.last_start + self.model.write_ns + jitter;
        Instant(self.busy_until)
    }
}

#[cfg(test)]
mod disk_tests {
    use super::*;

    #[test]
    fn writes_that_wait_go_together() {
        let mut d = Disk::new(
            DiskModel {
                write_ns: 100,
                jitter_ns: 0,
            },
            1,
        );
        assert_eq!(d.write(Instant(10)), Instant(110));
        // Busy: the next write starts at 110; everything issued before then joins it.
        assert_eq!(d.write(Instant(20)), Instant(210));
        assert_eq!(d.write(Instant(109)), Instant(210));
        // Issued while that one is in service: the one after.
        assert_eq!(d.write(Instant(150)), Instant(310));
        // Idle again.
        assert_eq!(d.write(Instant(1_000)), Instant(1_100));
        let mut none = Disk::new(DiskModel::default(), 1);
        assert!(!none.enabled());
        assert_eq!(none.write(Instant(5)), Instant(5));
    }
}

impl ReplConfig {
    /// The settings of `me` in a group of `procs` processes of which the first `replicas`
    /// replicate; `window` operations in flight if `me` is a client.
    pub fn new(
        me: ProcId,
        replicas: u32,
        procs: u32,
        workload: ReplWorkload,
        window: u32,
    ) -> ReplConfig {
        ReplConfig {
            me,
            replicas,
            procs,
            window,
            workload,
            start: Instant(0),
            stop: Instant(u64::MAX),
            suspect_ns: 200_000,
            retain: 4_096,
            disk: DiskModel::default(),
        }
    }
    /// `me` is a replica.
    pub fn is_replica(&self) -> bool {
        self.me.0 < self.replicas
    }
    /// The replicas.
    pub fn replica_ids(&self) -> impl Iterator<Item = ProcId> {
        (0..self.replicas).map(ProcId)
    }
}

/// A replica's log as the end-of-run checks see it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaLog {
    /// The replica.
    pub replica: u32,
    /// Position of the first entry kept.
    pub start: u64,
    /// Positions below this are committed.
    pub commit: u64,
    /// For each kept entry from `start`: its writer (client, operation id) and the checksum
    /// after it. Two replicas' logs are identical prefixes when their checksums agree at the
    /// last position both hold.
    pub entries: Vec<(u32, u64, u64)>,
    /// Every write this replica committed, in order, as (client, operation id).
    pub committed_writes: Vec<(u32, u64)>,
    /// Their commands, when the scheme keeps them (1-RTT and MultiPaxos: a checker places the
    /// writes of a client that died with its records); empty otherwise (the chain).
    #[serde(default)]
    pub committed_cmds: Vec<Cmd>,
}

/// Counters of a replicated service's process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplStats {
    /// Operations completed, by kind.
    pub gets: u64,
    /// See `gets`.
    pub puts: u64,
    /// See `gets`.
    pub cas: u64,
    /// Entries a replica appended, rejected for a sequence gap, and dropped as duplicates.
    pub appended: u64,
    /// See `appended`.
    pub rejected: u64,
    /// See `appended`.
    pub duplicates: u64,
    /// Recoveries this replica installed, and that it led.
    pub recoveries: u64,
    /// See `recoveries`.
    pub recoveries_led: u64,
    /// Operations a client sent again (a loss, a recovery, a new leader).
    pub resent: u64,
    /// Messages dropped as malformed.
    pub malformed: u64,
}

impl core::ops::AddAssign<&ReplStats> for ReplStats {
    fn add_assign(&mut self, o: &ReplStats) {
        self.gets += o.gets;
        self.puts += o.puts;
        self.cas += o.cas;
        self.appended += o.appended;
        self.rejected += o.rejected;
        self.duplicates += o.duplicates;
        self.recoveries += o.recoveries;
        self.recoveries_led += o.recoveries_led;
        self.resent += o.resent;
        self.malformed += o.malformed;
    }
}

/// A process of a replicated service, as a driver sees it.
pub trait ReplApp: App {
    /// The next operation it completed as a client since the last call.
    fn poll_done(&mut self) -> Option<ReplDone>;
    /// Its counters.
    fn stats(&self) -> &ReplStats;
    /// No operation in flight.
    fn idle(&self) -> bool;
    /// Its log, if it is a replica.
    fn replica_log(&self) -> Option<ReplicaLog>;
    /// Its writes in flight as a client: each may or may not take effect.
    fn open_writes(&self) -> Vec<lincheck::MaybeOp> {
        Vec::new()
    }
    /// Its MultiPaxos counters, if it runs [`paxos`] (instances decided, mean batch, mean
    /// active instances: what `onepipe bench paxos` reports).
    fn paxos_stats(&self) -> Option<paxos::PaxosStats> {
        None
    }
    /// Its state in a line, for a run that did not drain (`ONEPIPE_SIM_TRACE`); empty if the
    /// scheme has nothing to say.
    fn debug_state(&self) -> String {
        String::new()
    }
}
