//! # onepipe-ctrlstore
//!
//! Controller high availability for 1Pipe (§5.2, §6.1 "controller state in etcd"): the
//! network controller's state lives behind a store, with leader election by lease, so a standby
//! controller takes over when the leader dies — mid-procedure included.
//!
//! * [`ControllerStore`] — the store trait: `campaign` for a lease-backed leadership, a log
//!   whose `append` is *fenced* (it fails once the caller is no longer leader), metadata.
//! * [`MemStore`] — the embedded in-memory store (default; several controllers of one process
//!   share it), with a manual clock for deterministic tests.
//! * `EtcdStore` (cargo feature `etcd`) — the same on etcd, through `etcd-client` behind a
//!   private current-thread tokio runtime.
//! * [`HaController`] — the proto [`onepipe_proto::failure::Controller`] wrapped so every input
//!   is logged before it is applied, and a new leader recovers by replaying the log.
//! * [`codec`] — the log-entry encoding (proto has no serde: a hand-written binary mirror).
//!
//! This is a driver-level crate: it reads clocks and sleeps (lease expiry, campaign waits),
//! which the protocol crates may not. It does not open the controller's own sockets; the live
//! controller calls [`HaController`] (docs/CONTROLLER-HA.md).

#![allow(clippy::disallowed_methods)] // lease clocks and campaign waits, as in the runtime crate

pub mod codec;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod ha;
pub mod mem;
pub mod store;

pub use codec::Entry;
#[cfg(feature = "etcd")]
pub use etcd::EtcdStore;
pub use ha::{HaController, HaError, HaEvent, HaOutput, HaStats};
pub use mem::MemStore;
pub use store::{ControllerStore, Leadership, Op, StoreError};

use std::sync::Arc;
use std::time::Duration;

/// A shared store is a store: several controllers (or a controller and a monitor) can hold one.
impl<T: ControllerStore + ?Sized> ControllerStore for Arc<T> {
    fn campaign(
        &self,
        candidate: &str,
        lease_ttl: Duration,
        wait_max: Duration,
    ) -> Result<Leadership, StoreError> {
        (**self).campaign(candidate, lease_ttl, wait_max)
    }

    fn keep_alive(&self, leadership: &Leadership) -> Result<(), StoreError> {
        (**self).keep_alive(leadership)
    }

    fn is_leader(&self, leadership: &Leadership) -> Result<bool, StoreError> {
        (**self).is_leader(leadership)
    }

    fn leader(&self) -> Result<Option<String>, StoreError> {
        (**self).leader()
    }

    fn resign(&self, leadership: Leadership) -> Result<(), StoreError> {
        (**self).resign(leadership)
    }

    fn append(&self, leadership: &Leadership, entry: &[u8]) -> Result<u64, StoreError> {
        (**self).append(leadership, entry)
    }

    fn load(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        (**self).load()
    }

    fn put_meta(&self, leadership: &Leadership, key: &str, value: &[u8]) -> Result<(), StoreError> {
        (**self).put_meta(leadership, key, value)
    }

    fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        (**self).get_meta(key)
    }
}
