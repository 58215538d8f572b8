//! A transactional key-value store on 1Pipe (§7.3.1), for applications: [`KvServer`] on the
//! server processes, [`KvClient`] wherever transactions start.
//!
//! Processes `0..servers` of the cluster are the servers; key `k` lives at
//! `onepipe_apps::kv::server_of(k, servers)`. A transaction is a set of independent reads and
//! writes: the client sends it as **one scattering** — a part per server, all at one timestamp
//! — so every server applies it at the same place in one total order, with no locks, no aborts
//! and no coordinator. Read-only transactions go by best effort (and are sent again at a new
//! timestamp if a part is lost); the others by the reliable service. A read stamped T sees
//! exactly the writes stamped below T. The result carries the transaction's timestamp: its place
//! in the serialization order.
//!
//! ```no_run
//! # fn f(ep: &onepipe::Endpoint) -> Result<(), onepipe::kv::KvError> {
//! use onepipe::kv::KvClient;
//! let mut kv = KvClient::new(ep, 3)?; // processes 0, 1 and 2 run KvServer::serve
//! let w = kv.begin().put(7, "seven").put(8, "eight").commit()?;
//! let r = kv.begin().get(7).get(8).commit()?;
//! assert!(w.ts < r.ts);
//! assert_eq!(r.get(7).map(|v| &v[..]), Some(&b"seven"[..]));
//! # Ok(()) }
//! ```
//!
//! The same store runs in the simulator (`onepipe sim --app kv`) and across processes
//! (`onepipe up --app kv`); `examples/kv.rs` is a complete program.

use bytes::Bytes;
use onepipe_apps::kv::codec::{OPS_MAX, VALUE_LEN_MAX};
use onepipe_apps::kv::workload::{KvWorkload, TxnGen};
use onepipe_apps::kv::{ClientOp, Key, KvConfig, KvProcess, KvStats, Outcome};
use onepipe_proto::{ProcId, Timestamp};
use onepipe_runtime::apphost::AppHost;
use onepipe_runtime::clock::monotonic_ns;
use onepipe_runtime::endpoint::Endpoint;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Why a transaction was refused or did not complete. Refused ones sent nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KvError {
    /// The transaction has no operations.
    Empty,
    /// More operations than one message carries.
    TooManyOps {
        /// Operations in the transaction.
        ops: usize,
        /// The most.
        max: usize,
    },
    /// A value longer than the limit.
    ValueTooLarge {
        /// Its key.
        key: Key,
        /// Its length in bytes.
        len: usize,
        /// The limit ([`KvClient::with_value_max`]).
        max: usize,
    },
    /// The store's servers are processes `0..servers`, and the cluster has fewer.
    NoSuchServer {
        /// The first missing server.
        server: u32,
        /// Processes in the cluster.
        procs: u32,
    },
    /// This endpoint is itself a server: clients run on the other processes.
    ClientIsServer {
        /// This process.
        proc: u32,
    },
    /// A server the transaction needs failed (§5.2): it will never complete. A writing
    /// transaction's parts at the correct servers may have been applied (restricted atomicity).
    ServerFailed,
    /// No outcome within the client's timeout.
    Timeout,
}

impl std::fmt::Display for KvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvError::Empty => f.write_str("a transaction needs at least one operation"),
            KvError::TooManyOps { ops, max } => {
                write!(f, "{ops} operations in one transaction; at most {max}")
            }
            KvError::ValueTooLarge { key, len, max } => {
                write!(f, "the value for key {key} is {len} bytes; at most {max}")
            }
            KvError::NoSuchServer { server, procs } => write!(
                f,
                "server process {server} is not in the cluster ({procs} processes)"
            ),
            KvError::ClientIsServer { proc } => write!(
                f,
                "process {proc} is a server of the store; run clients on the others"
            ),
            KvError::ServerFailed => f.write_str("a server the transaction needs failed"),
            KvError::Timeout => f.write_str("the transaction did not complete in time"),
        }
    }
}

impl std::error::Error for KvError {}

/// A committed transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResult {
    /// Its timestamp: its place in the serialization order (reads saw every write below it).
    pub ts: Timestamp,
    /// What its reads returned, in the order they were asked (`None`: never written).
    pub reads: Vec<(Key, Option<Bytes>)>,
}

impl TxnResult {
    /// What the read of `key` returned (`None` if never written or not read).
    pub fn get(&self, key: Key) -> Option<&Bytes> {
        self.reads
            .iter()
            .find(|r| r.0 == key)
            .and_then(|r| r.1.as_ref())
    }
}

/// The store process of one server: its part of the store, never a transaction of its own.
fn process(me: ProcId, servers: u32) -> KvProcess {
    let w = KvWorkload::default();
    let mut cfg = KvConfig::new(me, servers, w.clone(), 0);
    cfg.keep_values = true;
    KvProcess::new(cfg, TxnGen::new(w, None, 0))
}

/// Serves process `ep`'s part of the store.
pub struct KvServer;

impl KvServer {
    /// Serves the keys of this process (one of `0..servers`) until `stop` turns true; returns
    /// the server's counters.
    ///
    /// # Errors
    /// [`KvError::NoSuchServer`] if this process is not one of `0..servers` or the cluster
    /// has fewer processes.
    pub fn serve(ep: &Endpoint, servers: u32, stop: &AtomicBool) -> Result<KvStats, KvError> {
        let procs = ep.cluster().procs();
        if servers > procs {
            return Err(KvError::NoSuchServer {
                server: procs,
                procs,
            });
        }
        let me = ep.proc();
        if me.0 >= servers {
            return Err(KvError::NoSuchServer {
                server: me.0,
                procs: servers,
            });
        }
        let mut host = AppHost::new(ep, process(me, servers));
        host.run_until(Duration::MAX, Duration::from_micros(50), |_| {
            stop.load(Ordering::Relaxed)
        });
        Ok(host.app().stats().clone())
    }
}

/// Starts transactions on the store from one process (not a server).
pub struct KvClient<'e> {
    host: AppHost<'e, KvProcess>,
    value_max: usize,
    timeout: Duration,
}

impl<'e> KvClient<'e> {
    /// A client on `ep` of the store served by processes `0..servers`.
    ///
    /// # Errors
    /// [`KvError::NoSuchServer`] if the cluster has fewer than `servers` processes (or none
    /// is asked for); [`KvError::ClientIsServer`] if `ep` is one of them.
    pub fn new(ep: &'e Endpoint, servers: u32) -> Result<KvClient<'e>, KvError> {
        let procs = ep.cluster().procs();
        if servers == 0 || servers > procs {
            return Err(KvError::NoSuchServer {
                server: servers.min(procs),
                procs,
            });
        }
        let me = ep.proc();
        if me.0 < servers {
            return Err(KvError::ClientIsServer { proc: me.0 });
        }
        Ok(KvClient {
            host: AppHost::new(ep, process(me, servers)),
            value_max: 64 * 1024,
            timeout: Duration::from_secs(10),
        })
    }

    /// Values longer than `max` bytes are refused (default 64 KiB; at most 1 MiB).
    pub fn with_value_max(mut self, max: usize) -> KvClient<'e> {
        self.value_max = max.min(VALUE_LEN_MAX as usize);
        self
    }

    /// How long [`Txn::commit`] waits for the outcome (default 10 s).
    pub fn with_timeout(mut self, timeout: Duration) -> KvClient<'e> {
        self.timeout = timeout;
        self
    }

    /// A new transaction: add reads and writes, then [`Txn::commit`].
    pub fn begin(&mut self) -> Txn<'_, 'e> {
        Txn {
            client: self,
            ops: Vec::new(),
        }
    }

    /// The store process's counters (retries, refusals, …).
    pub fn stats(&self) -> &KvStats {
        self.host.app().stats()
    }

    fn check(&self, ops: &[ClientOp]) -> Result<(), KvError> {
        if ops.is_empty() {
            return Err(KvError::Empty);
        }
        if ops.len() > OPS_MAX {
            return Err(KvError::TooManyOps {
                ops: ops.len(),
                max: OPS_MAX,
            });
        }
        for op in ops {
            if let ClientOp::Put(key, v) = op {
                if v.len() > self.value_max {
                    return Err(KvError::ValueTooLarge {
                        key: *key,
                        len: v.len(),
                        max: self.value_max,
                    });
                }
            }
        }
        Ok(())
    }

    // A blocking client API: between idle turns it sleeps (the rule against it is for the
    // sans-IO protocol code).
    #[allow(clippy::disallowed_methods)]
    fn run(&mut self, ops: Vec<ClientOp>) -> Result<TxnResult, KvError> {
        self.check(&ops)?;
        // The process's clock moves with its inputs: tell it the time before it stamps `call`.
        self.host.tell_time();
        let txn = self.host.app_mut().submit(ops);
        let deadline = monotonic_ns().saturating_add(self.timeout.as_nanos() as u64);
        loop {
            while let Some(o) = self.host.app_mut().poll_outcome() {
                match o {
                    Outcome::Committed { txn: t, ts, reads } if t == txn => {
                        return Ok(TxnResult { ts, reads });
                    }
                    Outcome::Abandoned { txn: t } if t == txn => return Err(KvError::ServerFailed),
                    _ => {}
                }
            }
            // Committed records are for checkers; a client keeps none.
            while self.host.app_mut().poll_committed().is_some() {}
            if monotonic_ns() >= deadline {
                return Err(KvError::Timeout);
            }
            if !self.host.turn() {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
    }
}

/// A transaction being built ([`KvClient::begin`]).
pub struct Txn<'c, 'e> {
    client: &'c mut KvClient<'e>,
    ops: Vec<ClientOp>,
}

impl Txn<'_, '_> {
    /// Reads `key`.
    pub fn get(mut self, key: Key) -> Self {
        self.ops.push(ClientOp::Get(key));
        self
    }

    /// Writes `value` to `key`.
    pub fn put(mut self, key: Key, value: impl Into<Bytes>) -> Self {
        self.ops.push(ClientOp::Put(key, value.into()));
        self
    }

    /// Sends the transaction and waits for its outcome.
    ///
    /// # Errors
    /// [`KvError::Empty`], [`KvError::TooManyOps`], [`KvError::ValueTooLarge`] before
    /// anything is sent; [`KvError::ServerFailed`] or [`KvError::Timeout`] after.
    pub fn commit(self) -> Result<TxnResult, KvError> {
        self.client.run(self.ops)
    }
}
