//! The store trait: leader election by lease, a fenced append-only log, and metadata.
//!
//! A store knows bytes, not controller entries ([`crate::codec`] encodes them), so the same
//! trait carries the log and the cluster metadata. Every write is *fenced*: it succeeds only
//! while the caller's [`Leadership`] is still the current one, so a deposed leader (its lease
//! expired, a standby won) can never add to the log the new leader replayed.

use std::fmt;
use std::time::Duration;

/// The largest number of log entries a store keeps. Controller inputs are failure reports and
/// completions — a handful per failure — so this bounds a cluster's failure history, not its
/// traffic. Compaction (a snapshot of the controller) is not built; a full log is a typed error.
pub const LOG_ENTRIES_MAX: u64 = 1 << 20;

/// Proof of having won an election: which campaign won, under which lease, and the fence every
/// write is checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    /// The candidate's name (for logs and for [`ControllerStore::leader`]).
    pub candidate: String,
    /// The lease the leadership lives by (etcd lease id; the memory store's lease number).
    pub lease: i64,
    /// What writes are fenced on: etcd's create revision of the election key, the memory store's
    /// election epoch. Strictly increasing from one leadership to the next.
    pub fence: i64,
    /// The lease's time to live.
    pub lease_ttl: Duration,
}

/// A store operation, named in errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Connecting to the store.
    Connect,
    /// [`ControllerStore::campaign`].
    Campaign,
    /// [`ControllerStore::keep_alive`].
    KeepAlive,
    /// [`ControllerStore::is_leader`] or [`ControllerStore::leader`].
    Leader,
    /// [`ControllerStore::resign`].
    Resign,
    /// [`ControllerStore::append`].
    Append,
    /// [`ControllerStore::load`].
    Load,
    /// [`ControllerStore::put_meta`].
    PutMeta,
    /// [`ControllerStore::get_meta`].
    GetMeta,
}

/// Why a store operation failed. Every variant names the operation and the store endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// Fenced: the caller's leadership is not the current one (its lease expired, or another
    /// candidate won). The caller must stop acting as leader.
    NotLeader {
        /// The operation refused.
        op: Op,
        /// The store.
        endpoint: String,
    },
    /// [`ControllerStore::campaign`] did not win within its wait.
    CampaignTimedOut {
        /// The store.
        endpoint: String,
        /// Who holds the leadership, if known.
        holder: Option<String>,
    },
    /// The log holds [`LOG_ENTRIES_MAX`] entries.
    LogFull {
        /// The store.
        endpoint: String,
    },
    /// The store holds something this crate did not write (a gap in the log, a foreign key).
    Corrupt {
        /// The operation.
        op: Op,
        /// The store.
        endpoint: String,
        /// What is wrong.
        detail: String,
    },
    /// The store could not be reached or answered with an error.
    Unavailable {
        /// The operation.
        op: Op,
        /// The store.
        endpoint: String,
        /// The client's error, as text.
        detail: String,
    },
}

/// Where the §5.2 controller keeps its state so a standby can take over (docs/CONTROLLER-HA.md).
///
/// Synchronous: the controller is thread-based. Implementations are shared between threads
/// (and, for [`crate::MemStore`], between several controllers of one process).
pub trait ControllerStore: Send + Sync {
    /// Runs for leader as `candidate` with a lease of `lease_ttl`, waiting up to `wait_max` for
    /// the current leader's lease to end. A zero `wait_max` tries once.
    fn campaign(
        &self,
        candidate: &str,
        lease_ttl: Duration,
        wait_max: Duration,
    ) -> Result<Leadership, StoreError>;

    /// Renews the lease. Call it well within `lease_ttl` (a third of it is usual);
    /// [`StoreError::NotLeader`] if the lease already ended.
    fn keep_alive(&self, leadership: &Leadership) -> Result<(), StoreError>;

    /// Whether `leadership` is still the current one.
    fn is_leader(&self, leadership: &Leadership) -> Result<bool, StoreError>;

    /// The current leader's candidate name, if any.
    fn leader(&self) -> Result<Option<String>, StoreError>;

    /// Gives the leadership up at once (revokes the lease), so a standby need not wait for it
    /// to expire.
    fn resign(&self, leadership: Leadership) -> Result<(), StoreError>;

    /// Appends `entry` to the log and returns its index (0, 1, …) — only while `leadership` is
    /// current ([`StoreError::NotLeader`] otherwise: fencing).
    fn append(&self, leadership: &Leadership, entry: &[u8]) -> Result<u64, StoreError>;

    /// The whole log in index order.
    fn load(&self) -> Result<Vec<Vec<u8>>, StoreError>;

    /// Sets metadata `key` — fenced like [`ControllerStore::append`].
    fn put_meta(&self, leadership: &Leadership, key: &str, value: &[u8]) -> Result<(), StoreError>;

    /// Reads metadata `key`.
    fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;
}

impl StoreError {
    /// Whether this is the fencing refusal: the caller is no longer leader.
    pub fn is_not_leader(&self) -> bool {
        matches!(self, StoreError::NotLeader { .. })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Op::Connect => "connect",
            Op::Campaign => "campaign",
            Op::KeepAlive => "keep-alive",
            Op::Leader => "leader",
            Op::Resign => "resign",
            Op::Append => "append",
            Op::Load => "load",
            Op::PutMeta => "put-meta",
            Op::GetMeta => "get-meta",
        };
        f.write_str(name)
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NotLeader { op, endpoint } => {
                write!(f, "{op} at {endpoint}: not the leader (fenced)")
            }
            StoreError::CampaignTimedOut { endpoint, holder } => match holder {
                Some(h) => write!(f, "campaign at {endpoint}: timed out, {h} leads"),
                None => write!(f, "campaign at {endpoint}: timed out"),
            },
            StoreError::LogFull { endpoint } => {
                write!(
                    f,
                    "append at {endpoint}: log holds {LOG_ENTRIES_MAX} entries"
                )
            }
            StoreError::Corrupt {
                op,
                endpoint,
                detail,
            } => write!(f, "{op} at {endpoint}: corrupt store: {detail}"),
            StoreError::Unavailable {
                op,
                endpoint,
                detail,
            } => write!(f, "{op} at {endpoint}: {detail}"),
        }
    }
}

impl std::error::Error for StoreError {}
