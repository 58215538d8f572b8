//! Software prefetch: performance hints for drivers that know a role's next inputs.
//!
//! A simulator of a thousand hosts touches hundreds of megabytes of per-node, per-link and
//! per-peer state in an order no hardware prefetcher can guess, and nearly every event begins
//! with cache misses on it. Its event queue knows what comes next, so it asks the CPU to start
//! loading the state of the next few events while it processes the current one: its own link and
//! node records, and through [`Host::prefetch`](crate::host::Host::prefetch) and
//! [`Switch::prefetch`](crate::switch::Switch::prefetch) the roles' internals. A prefetch is only
//! a hint: it reads nothing, never faults and changes no result (a simulated run's trace hash is
//! the same with or without it). It is not I/O: the sans-IO rule holds.

/// How deep into a role's state a prefetch hint reaches. A driver issues the stages for one
/// upcoming input in order, each a little later than the one before (the simulator: one event
/// apart), so that the pointers a deeper stage follows were loaded by the stage before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The role's own fields on the input's path (their addresses need no memory read).
    Fields,
    /// The records those fields point to (a local process's receive state).
    Records,
    /// The per-peer entries inside those records (one sender's receive window and reorder list).
    Peers,
    /// What the per-peer entries point to (a switch's output link, once routed).
    Entries,
}

/// Starts loading the cache line holding `r`.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    safe_arch::prefetch_t0(r);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    let _ = r;
}
