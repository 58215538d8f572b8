//! The routing table of a live aggregator: each destination process to the port that leads to
//! it, on a tree (one way to anyone).

use crate::ids::{NodeId, PortId, ProcId};
use crate::switch::Router;
use std::sync::atomic::{AtomicU32, Ordering};

/// Routes a packet by its destination process through a table: process `p` leaves on
/// `port_of[p]`. Filled with [`ProcessRouter::set`] while the role is built; afterwards only
/// [`ProcessRouter::alias`] changes it (a process that rejoined under new ids, §5.2), through a
/// shared reference, while the role routes.
#[derive(Debug, Default)]
pub struct ProcessRouter {
    port_of: Vec<AtomicU32>,
}

/// No route.
const NO_PORT: u32 = u32::MAX;

impl ProcessRouter {
    /// An empty table.
    pub fn new() -> ProcessRouter {
        ProcessRouter::default()
    }

    /// An empty table with room for process ids below `ids` (what [`ProcessRouter::alias`]
    /// may name).
    pub fn with_ids(ids: u32) -> ProcessRouter {
        ProcessRouter {
            port_of: (0..ids).map(|_| AtomicU32::new(NO_PORT)).collect(),
        }
    }

    /// Process `p` is reached through output `port`.
    pub fn set(&mut self, p: ProcId, port: PortId) {
        if self.port_of.len() <= p.index() {
            self.port_of
                .resize_with(p.index() + 1, || AtomicU32::new(NO_PORT));
        }
        self.port_of[p.index()].store(port.0, Ordering::Relaxed);
    }

    /// The output that leads to process `p`, if it is routed.
    pub fn port_of(&self, p: ProcId) -> Option<PortId> {
        let port = self.port_of.get(p.index())?.load(Ordering::Relaxed);
        (port != NO_PORT).then_some(PortId(port))
    }

    /// Process `new` is reached the way `like` is (§5.2 rejoin: the same host under a new id).
    /// Returns false, changing nothing, for an id beyond the table's room.
    pub fn alias(&self, new: ProcId, like: ProcId) -> bool {
        let (Some(n), Some(l)) = (
            self.port_of.get(new.index()),
            self.port_of.get(like.index()),
        ) else {
            return false;
        };
        n.store(l.load(Ordering::Relaxed), Ordering::Relaxed);
        true
    }
}

impl Router for ProcessRouter {
    fn route(&self, _at: NodeId, _src: ProcId, dst: ProcId) -> Option<PortId> {
        self.port_of(dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_router_maps_known_processes_only() {
        let mut r = ProcessRouter::new();
        r.set(ProcId(3), PortId(1));
        assert_eq!(r.route(NodeId(0), ProcId(0), ProcId(3)), Some(PortId(1)));
        assert_eq!(r.route(NodeId(0), ProcId(0), ProcId(2)), None);
        assert_eq!(r.route(NodeId(0), ProcId(0), ProcId(99)), None);
        // §5.2 rejoin: a new id routes as the old one, within the table's room.
        let mut r = ProcessRouter::with_ids(8);
        r.set(ProcId(3), PortId(1));
        assert!(r.alias(ProcId(6), ProcId(3)));
        assert_eq!(r.route(NodeId(0), ProcId(0), ProcId(6)), Some(PortId(1)));
        assert!(!r.alias(ProcId(8), ProcId(3)));
        assert_eq!(r.route(NodeId(0), ProcId(0), ProcId(8)), None);
    }
}
