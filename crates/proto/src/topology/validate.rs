//! [`Topology::validate`]'s checks: every structural promise of a topology, each on its own.

use super::*;

impl Topology {
    /// Hosts are nodes `0..hosts` with one port each way; everything after them is a switch.
    pub(super) fn validate_nodes(&self) -> Result<(), String> {
        if self.hosts == 0 || self.hosts as usize > self.nodes.len() {
            return Err(format!(
                "{} hosts among {} nodes",
                self.hosts,
                self.nodes.len()
            ));
        }
        if self.routes.len() != self.nodes.len() {
            return Err("one routing entry per node".to_string());
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let is_host = i < self.hosts as usize;
            if is_host != (node.kind == NodeKind::Host) {
                return Err(format!("node {i} ({}) is out of place", node.name));
            }
            if is_host && node.physical != i as u32 {
                return Err(format!(
                    "{} has physical index {}",
                    node.name, node.physical
                ));
            }
            if is_host && (node.inputs.len() != 1 || node.outputs.len() != 1) {
                return Err(format!("{} must have exactly one port each way", node.name));
            }
        }
        Ok(())
    }

    /// Every link sits at the port its endpoints list it under, and vice versa.
    pub(super) fn validate_ports(&self) -> Result<(), String> {
        let n = self.nodes.len();
        for (l, link) in self.links.iter().enumerate() {
            let id = LinkId(l as u32);
            if link.from.index() >= n || link.to.index() >= n {
                return Err(format!("{id} has an endpoint out of range"));
            }
            let from = &self.nodes[link.from.index()];
            let to = &self.nodes[link.to.index()];
            if from.outputs.get(link.from_port.index()) != Some(&id) {
                return Err(format!(
                    "{id} is not output {} of {}",
                    link.from_port, from.name
                ));
            }
            if to.inputs.get(link.to_port.index()) != Some(&id) {
                return Err(format!("{id} is not input {} of {}", link.to_port, to.name));
            }
        }
        for (i, node) in self.nodes.iter().enumerate() {
            let at = NodeId(i as u32);
            for (p, l) in node.outputs.iter().enumerate() {
                let ok = self
                    .links
                    .get(l.index())
                    .is_some_and(|link| link.from == at && link.from_port == PortId(p as u32));
                if !ok {
                    return Err(format!("output {p} of {} lists {l} wrongly", node.name));
                }
            }
            for (p, l) in node.inputs.iter().enumerate() {
                let ok = self
                    .links
                    .get(l.index())
                    .is_some_and(|link| link.to == at && link.to_port == PortId(p as u32));
                if !ok {
                    return Err(format!("input {p} of {} lists {l} wrongly", node.name));
                }
            }
        }
        Ok(())
    }

    /// A link's kind agrees with the kinds of the nodes it joins (Fig. 3).
    pub(super) fn validate_link_kind(&self, id: LinkId, link: &TopoLink) -> Result<(), String> {
        use Half::{Down, Top, Up};
        let from = &self.nodes[link.from.index()];
        let to = &self.nodes[link.to.index()];
        let ok = match (link.kind, switch_of(from.kind), switch_of(to.kind)) {
            (LinkKind::HostUp, None, Some((1, Up))) => link.from_port.0 == 0,
            (LinkKind::HostDown, Some((1, Down)), None) => link.to_port.0 == 0,
            (LinkKind::Up, Some((a, Up)), Some((b, Up | Top))) => b > a,
            (LinkKind::Loopback, Some((a, Up)), Some((b, Down))) => {
                a == b && from.physical == to.physical
            }
            (LinkKind::Down, Some((a, Down | Top)), Some((b, Down))) => b < a,
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{id} ({:?}) from {} to {} is miswired",
                link.kind, from.name, to.name
            ))
        }
    }

    /// For every destination, every choice [`Topology::route`] could make at every node (every
    /// ECMP branch) leads to the destination; in particular every other host reaches it.
    pub(super) fn validate_all_choices(&self, order: &[NodeId]) -> Result<(), String> {
        let mut reaches = vec![false; self.nodes.len()];
        for dst in 0..self.hosts {
            reaches.fill(false);
            // Reverse topological order: every non-host successor is decided before its
            // predecessors, and a downlink is decided by where it lands.
            for &at in order.iter().rev() {
                reaches[at.index()] = self.choices(at, dst).is_some_and(|(first, count)| {
                    (first..first + count).all(|p| {
                        let node = &self.nodes[at.index()];
                        node.outputs.get(p as usize).is_some_and(|l| {
                            let link = &self.links[l.index()];
                            if link.kind == LinkKind::HostDown {
                                link.to == NodeId(dst)
                            } else {
                                reaches[link.to.index()]
                            }
                        })
                    })
                });
            }
            if let Some(src) = (0..self.hosts).find(|&s| s != dst && !reaches[s as usize]) {
                return Err(format!("some route from host-{src} misses host-{dst}"));
            }
        }
        Ok(())
    }

    /// Every host reaches every other along a path that climbs, turns once and descends
    /// (§3.1), and the longest such path is `diameter_links`.
    pub(super) fn validate_paths(&self) -> Result<(), String> {
        let mut longest = 0;
        for src in 0..self.hosts {
            for dst in (0..self.hosts).filter(|&d| d != src) {
                let path = self.path(src, dst, flow_hash(0x1bad_5eed, src, dst));
                if path.last() != Some(&self.downlink(dst)) {
                    return Err(format!(
                        "the route from host-{src} to host-{dst} goes astray"
                    ));
                }
                self.check_path_shape(&path)
                    .map_err(|e| format!("host-{src} to host-{dst}: {e}"))?;
                longest = longest.max(path.len() as u32);
            }
        }
        if longest != self.diameter_links {
            return Err(format!(
                "diameter_links is {}, but the longest route has {longest} links",
                self.diameter_links
            ));
        }
        Ok(())
    }

    /// A path is contiguous and its link kinds read `HostUp Up* (Loopback)? Down* HostDown`,
    /// turning exactly once: at a loopback or at a top node (§3.1).
    pub(super) fn check_path_shape(&self, path: &[LinkId]) -> Result<(), String> {
        let rank = |kind| match kind {
            LinkKind::HostUp => 0,
            LinkKind::Up => 1,
            LinkKind::Loopback => 2,
            LinkKind::Down => 3,
            LinkKind::HostDown => 4,
        };
        let mut rank_prev = 0;
        let mut turns = 0;
        for (i, &l) in path.iter().enumerate() {
            let link = &self.links[l.index()];
            if i > 0 && self.links[path[i - 1].index()].to != link.from {
                return Err(format!("{l} does not continue the path"));
            }
            let first_or_last_ok = (i == 0) == (link.kind == LinkKind::HostUp)
                && (i + 1 == path.len()) == (link.kind == LinkKind::HostDown);
            if rank(link.kind) < rank_prev || !first_or_last_ok {
                return Err(format!("{l} ({:?}) is out of order", link.kind));
            }
            rank_prev = rank(link.kind);
            let to_top = matches!(
                self.nodes[link.to.index()].kind,
                NodeKind::Switch {
                    half: Half::Top,
                    ..
                }
            );
            turns += u32::from(link.kind == LinkKind::Loopback) + u32::from(to_top);
        }
        if turns != 1 {
            return Err(format!("the path turns {turns} times"));
        }
        Ok(())
    }

    /// The longest route between two distinct hosts, from the tables, in O(hosts × layers).
    ///
    /// From each source it climbs the first uplinks; wherever an up half's "below" range grows
    /// (or a top node reaches beyond it), some destination turns there, at `hops + 1 + the
    /// longest descent` (loopback) or `hops + the longest descent` (top). It assumes what every
    /// builder here gives: ECMP siblings have equal ranges and equal depths; `validate` checks
    /// the result against every route.
    pub(super) fn diameter_from_tables(&self, descent_len: &[u32]) -> u32 {
        let mut diameter = 0;
        for src in 0..self.hosts {
            let mut covered = HostRange {
                lo: src,
                hi: src + 1,
            };
            let mut hops = 1;
            let mut at = self.links[self.uplink(src).index()].to;
            loop {
                let outputs = &self.nodes[at.index()].outputs;
                match self.routes[at.index()] {
                    Route::Up {
                        below,
                        loopback,
                        uplinks_first,
                        uplinks_count,
                    } => {
                        assert!(below.lo <= covered.lo && covered.hi <= below.hi);
                        if below.len() > covered.len() {
                            let turn = self.links[outputs[loopback.index()].index()].to;
                            diameter = diameter.max(hops + 1 + descent_len[turn.index()]);
                        }
                        if uplinks_count == 0 {
                            break;
                        }
                        covered = below;
                        hops += 1;
                        at = self.links[outputs[uplinks_first as usize].index()].to;
                    }
                    Route::Down { reach, .. } => {
                        // Climbing only ever ends at a top node.
                        if reach.len() > covered.len() {
                            diameter = diameter.max(hops + descent_len[at.index()]);
                        }
                        break;
                    }
                    Route::Host { .. } => unreachable!("an uplink leads to a host"),
                }
            }
        }
        diameter
    }
}
