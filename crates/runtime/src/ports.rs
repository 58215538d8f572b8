//! The port table: which UDP address each port of a role stands for.
//!
//! A role's ports are node-local link indexes (`onepipe_proto::ids::PortId`). Over UDP, each
//! output port is one next hop — a peer's socket address — and each input port is recognised by
//! the source address of the datagrams that arrive on it. A host has port 0 both ways (its
//! aggregator); an aggregator has input `i` and output `i` for its `i`-th host or neighbour.
//! Several addresses may map to one input port. Datagrams from an address that is in no entry
//! are dropped and counted by the driver.

use onepipe_proto::ids::PortId;
use std::collections::HashMap;
use std::net::SocketAddr;

/// `PortId → SocketAddr` for outputs, `SocketAddr → PortId` for inputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortTable {
    outputs: Vec<Option<SocketAddr>>,
    inputs: HashMap<SocketAddr, PortId>,
}

impl PortTable {
    /// An empty table.
    pub fn new() -> PortTable {
        PortTable::default()
    }

    /// Output `port` sends to `addr` (replacing any earlier address).
    pub fn set_output(&mut self, port: PortId, addr: SocketAddr) {
        let i = port.index();
        if self.outputs.len() <= i {
            self.outputs.resize(i + 1, None);
        }
        self.outputs[i] = Some(addr);
    }

    /// Datagrams from `addr` arrive on input `port`; returns the port `addr` mapped to before.
    pub fn set_input(&mut self, addr: SocketAddr, port: PortId) -> Option<PortId> {
        self.inputs.insert(addr, port)
    }

    /// `port` is a bidirectional link to `addr`: output `port` sends there and datagrams from
    /// there arrive on input `port`.
    pub fn link(&mut self, port: PortId, addr: SocketAddr) {
        self.set_output(port, addr);
        self.set_input(addr, port);
    }

    /// [`PortTable::link`] for a port whose peer moved: datagrams from its old addresses no
    /// longer arrive on it.
    pub fn relink(&mut self, port: PortId, addr: SocketAddr) {
        self.inputs.retain(|_, p| *p != port);
        self.link(port, addr);
    }

    /// Builder form of [`PortTable::link`].
    pub fn with_link(mut self, port: PortId, addr: SocketAddr) -> PortTable {
        self.link(port, addr);
        self
    }

    /// Where output `port` sends, if anywhere.
    pub fn output(&self, port: PortId) -> Option<SocketAddr> {
        self.outputs.get(port.index()).copied().flatten()
    }

    /// The input port of datagrams from `addr`, if it is known.
    pub fn input(&self, addr: &SocketAddr) -> Option<PortId> {
        self.inputs.get(addr).copied()
    }

    /// One more than the highest output port with an address (0 if none).
    pub fn outputs_len(&self) -> usize {
        self.outputs.len()
    }

    /// The number of known input addresses.
    pub fn inputs_len(&self) -> usize {
        self.inputs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_map_both_ways_and_gaps_have_no_address() {
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:1001".parse().unwrap();
        let mut t = PortTable::new().with_link(PortId(0), a);
        t.set_output(PortId(2), b);
        t.set_input(b, PortId(0));
        assert_eq!(t.output(PortId(0)), Some(a));
        assert_eq!(t.output(PortId(1)), None);
        assert_eq!(t.output(PortId(2)), Some(b));
        assert_eq!(t.output(PortId(9)), None);
        assert_eq!(t.outputs_len(), 3);
        assert_eq!(t.input(&a), Some(PortId(0)));
        assert_eq!(
            t.input(&b),
            Some(PortId(0)),
            "two addresses, one input port"
        );
        assert_eq!(t.input(&"127.0.0.1:9".parse().unwrap()), None);
    }
}
