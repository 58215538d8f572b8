//! The routing DAG of a multi-rooted tree data-center network (1Pipe §3.1, Fig. 3).
//!
//! In a multi-rooted tree a shortest path climbs to one of the lowest common ancestors of its
//! two hosts, turns, and descends (§3.1). Following Fig. 3, every physical switch below the top
//! layer is split into an *up* logical switch, which carries climbing traffic, and a *down*
//! logical switch, which carries descending traffic; a virtual *loopback* link joins the two
//! halves for traffic that turns at that switch. A top-layer switch (fat-tree core, leaf-spine
//! spine) only ever turns traffic, so it is one logical node ([`Half::Top`]). Taking each host
//! as a source on its uplink and a sink on its downlink, the graph is acyclic, which is what lets
//! every node compute its barrier as the min over its input links, hop by hop (§4.1, Eq. 4.1).
//!
//! This module builds that graph ([`Topology::fat_tree`], [`Topology::rack`],
//! [`Topology::leaf_spine`]), numbers every node's ports, and answers per-hop ECMP routing
//! queries ([`Topology::route`]) from compact tables precomputed at build time. It is not a
//! simulator and not a switch: it holds no queues, clocks or barrier state, and it models no
//! failures or rerouting (the job of §3.1's SDN controller). Drivers build those on top of it.
//!
//! # Routing tables
//!
//! [`Topology::route`] runs once per packet per hop in the simulator, so it is O(1) and does not
//! allocate. Rather than a `hosts`-long table per switch (which would be `nodes × hosts` entries,
//! ~1.6 M for a k=16 fat tree), it exploits the fact that every builder numbers hosts so that the
//! hosts below any logical switch form a contiguous range, and the children of a descending node
//! split that range into equal, aligned blocks in port order (only the last may be short):
//!
//! - an up half stores the host range below its physical switch, its loopback port, and the
//!   contiguous port range of its uplinks: "below me" is a range test, otherwise ECMP picks an
//!   uplink;
//! - a down half or top node stores the host range it reaches and the block size `hosts_per_port`:
//!   the port toward `dst` is `(dst - lo) / hosts_per_port`;
//! - a host always sends on port 0.
//!
//! That is 24 bytes per logical node, whatever the number of hosts. The build asserts the
//! alignment it relies on, and [`Topology::validate`] checks every routing choice end to end.

use core::fmt;

use crate::ids::{LinkId, NodeId, PortId};

/// The most hosts a topology may have (a k=160 fat tree has 1,024,000).
pub const HOSTS_MAX: u32 = 1 << 20;

/// The most links a topology may have. A leaf-spine grows as `leaves × spines`, so its host limit
/// alone does not bound it.
pub const LINKS_MAX: u64 = 1 << 24;

// Every host owns two links (its uplink and its downlink), so the host limit must fit the link
// limit with room for the switch fabric; the largest fat tree under HOSTS_MAX has about 6.2 M links.
const _: () = assert!(8 * HOSTS_MAX as u64 <= LINKS_MAX);

/// The golden-ratio increment of SplitMix64, used to spread small integers before mixing.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// What a node of the routing graph is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKind {
    /// An end host: a source on its single output port and a sink on its single input port.
    Host,
    /// A logical switch (§3.1, Fig. 3).
    Switch {
        /// 1 = ToR / leaf, 2 = aggregation (fat tree) or spine (leaf-spine), 3 = core (fat tree).
        layer: u8,
        /// Which logical half of its physical switch this node is.
        half: Half,
    },
}

/// Which logical half of a physical switch a node is (§3.1, Fig. 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Half {
    /// Carries traffic climbing toward the lowest common ancestor.
    Up,
    /// Carries traffic descending toward the destination.
    Down,
    /// The single logical node of a top-layer switch, which only turns traffic.
    Top,
}

/// What a link of the routing graph is. Along any route the kinds appear in this order (§3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// A host's uplink, to its ToR's up half.
    HostUp,
    /// From an up half to a higher layer's up half or top node.
    Up,
    /// The virtual link from a physical switch's up half to its own down half (Fig. 3, dashed):
    /// traffic that turns at that switch.
    Loopback,
    /// From a down half or top node to a lower layer's down half.
    Down,
    /// A host's downlink, from its ToR's down half.
    HostDown,
}

/// A node of the routing graph: a host or a logical switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopoNode {
    /// What the node is.
    pub kind: NodeKind,
    /// A readable name: "host-3", "tor-1-up", "agg-2-down", "core-0", "leaf-0-up", "spine-1".
    pub name: String,
    /// The index of the physical switch (or host) this node belongs to, within its layer.
    pub physical: u32,
    /// The longest path, in links, from any host to this node (hosts: 0). Drivers use it to
    /// phase-shift beacon timers layer by layer.
    pub depth: u32,
    /// Input links in port order: `inputs[p]` arrives on input port `PortId(p)`.
    pub inputs: Vec<LinkId>,
    /// Output links in port order: `outputs[p]` leaves on output port `PortId(p)`.
    pub outputs: Vec<LinkId>,
}

/// A directed link of the routing graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopoLink {
    /// The node it leaves.
    pub from: NodeId,
    /// The output port of `from` it leaves on.
    pub from_port: PortId,
    /// The node it enters.
    pub to: NodeId,
    /// The input port of `to` it enters on.
    pub to_port: PortId,
    /// What the link is.
    pub kind: LinkKind,
}

/// The routing DAG of a multi-rooted tree (§3.1, Fig. 3) with precomputed ECMP routing tables.
///
/// Hosts are nodes `0..hosts()` in host order (`NodeId(h)` is host `h`); logical switches follow.
/// Every host has exactly one output port 0 (its [`LinkKind::HostUp`]) and one input port 0 (its
/// [`LinkKind::HostDown`]). Ports are dense per node, numbered in the order links were added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    label: String,
    hosts: u32,
    layers: u8,
    physical_switches: u32,
    nodes: Vec<TopoNode>,
    links: Vec<TopoLink>,
    /// One compressed routing entry per node (see the module docs), indexed by `NodeId`.
    routes: Vec<Route>,
    max_depth: u32,
    diameter_links: u32,
}

/// One switch of a tree ([`Topology::tree`]): its parent (an index into the same list; `None`
/// for the root) and the hosts attached to it, in port order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeSwitch {
    /// The switch above, if any.
    pub parent: Option<usize>,
    /// The hosts attached here.
    pub hosts: Vec<u32>,
}

/// The links of a tree's graph by switch port ([`Topology::tree`]), in the port order a live
/// aggregator gives them: per switch, its up half's (or the root's) inputs — the attached hosts'
/// uplinks, then each child's up link, children in list order — and a non-root switch's down
/// half's inputs: the loopback from its own up half, then the link from its parent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeLinks {
    /// Per switch: its up half's (the root's) input links, in port order.
    pub up_inputs: Vec<Vec<LinkId>>,
    /// Per switch: its down half's input links (loopback, parent); empty for the root.
    pub down_inputs: Vec<Vec<LinkId>>,
    /// Per switch: its graph nodes (up and down halves, or the root's one node).
    pub nodes: Vec<Vec<NodeId>>,
}

/// Why a topology could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopologyError {
    /// A fat tree's arity must be even and at least 2.
    FatTreeArity {
        /// The arity asked for.
        k: u32,
    },
    /// A topology needs at least one host.
    NoHosts,
    /// A leaf-spine's rack size must be at least 1.
    RackSize {
        /// The rack size asked for.
        rack_size: u32,
    },
    /// A tree's switch list is not one tree: no root or several, a parent out of range, a
    /// cycle, or a host attached twice or not at all.
    NotATree {
        /// What is wrong.
        why: String,
    },
    /// A leaf-spine needs at least one spine.
    Spines {
        /// The number of spines asked for.
        spines: u32,
    },
    /// The topology would exceed [`HOSTS_MAX`] hosts or [`LINKS_MAX`] links.
    TooLarge {
        /// What overflowed: "hosts" or "links".
        what: &'static str,
        /// How many there would be.
        count: u64,
        /// The limit.
        max: u64,
    },
}

/// Checks that `switches` is one tree over hosts `0..hosts`, each attached once; returns its
/// root, each switch's children (in list order) and each switch's height (a leaf is 1).
#[allow(clippy::type_complexity)]
fn tree_shape(
    hosts: u32,
    switches: &[TreeSwitch],
) -> Result<(usize, Vec<Vec<usize>>, Vec<u8>), TopologyError> {
    let not = |why: String| TopologyError::NotATree { why };
    let n = switches.len();
    let roots: Vec<usize> = (0..n).filter(|&s| switches[s].parent.is_none()).collect();
    if roots.len() != 1 {
        return Err(not(format!("{} roots", roots.len())));
    }
    let mut children = vec![Vec::new(); n];
    for (s, sw) in switches.iter().enumerate() {
        if let Some(p) = sw.parent {
            if p >= n || p == s {
                return Err(not(format!("switch {s}'s parent {p}")));
            }
            children[p].push(s);
        }
    }
    // From the root down; a cycle never reaches the root.
    let mut order = vec![roots[0]];
    let mut i = 0;
    while i < order.len() {
        order.extend(children[order[i]].iter().copied());
        i += 1;
    }
    if order.len() != n {
        return Err(not("a cycle: not every switch is below the root".into()));
    }
    let mut height = vec![1u8; n];
    for &s in order.iter().rev() {
        if let Some(p) = switches[s].parent {
            height[p] = height[p].max(height[s].saturating_add(1));
        }
    }
    let mut seen = vec![false; hosts as usize];
    for sw in switches {
        for &h in &sw.hosts {
            if h >= hosts || std::mem::replace(&mut seen[h as usize], true) {
                return Err(not(format!("host {h} attached twice or out of range")));
            }
        }
    }
    if let Some(h) = seen.iter().position(|&x| !x) {
        return Err(not(format!("host {h} attached nowhere")));
    }
    Ok((roots[0], children, height))
}

/// A half-open range of host indices, `lo..hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HostRange {
    lo: u32,
    hi: u32,
}

/// A node's compressed routing entry (module docs, "Routing tables").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// A host sends everything but its own traffic on port 0.
    Host { host: u32 },
    /// An up half: loop back if the destination is below, else ECMP over the uplinks, which
    /// occupy ports `uplinks_first .. uplinks_first + uplinks_count`.
    Up {
        below: HostRange,
        loopback: PortId,
        uplinks_first: u32,
        uplinks_count: u32,
    },
    /// A down half or top node: output port `p` leads to hosts
    /// `reach.lo + p * hosts_per_port ..` (the last block may be short).
    Down {
        reach: HostRange,
        hosts_per_port: u32,
    },
}

// The module docs promise a routing entry of 24 bytes per node.
const _: () = assert!(size_of::<Route>() <= 24);

/// Accumulates nodes and links, assigning ports in the order links are added.
struct Builder {
    hosts: u32,
    nodes: Vec<TopoNode>,
    links: Vec<TopoLink>,
}

impl Topology {
    /// The Al-Fares k-ary fat tree: `k` pods of `k/2` edge (ToR) and `k/2` aggregation switches,
    /// `(k/2)²` core switches and `k³/4` hosts, `k/2` per ToR.
    ///
    /// Edge switch `e` of pod `p` connects to all `k/2` aggregation switches of pod `p`;
    /// aggregation switch `a` (0-based within its pod) connects to cores
    /// `a·k/2 .. a·k/2 + k/2 - 1`. Physical indices run pod by pod: `tor-{p·k/2 + e}`,
    /// `agg-{p·k/2 + a}`, `core-{c}`. `k` must be even and at least 2 (k=2 gives 2 hosts).
    pub fn fat_tree(k: u32) -> Result<Topology, TopologyError> {
        if k < 2 || k & 1 == 1 {
            return Err(TopologyError::FatTreeArity { k });
        }
        let hosts = check_hosts(u128::from(k).pow(3) / 4)?;
        let half = k / 2;
        let pod_switches = k * half; // ToRs, and also aggregation switches, across all pods.
        let cores = half * half;

        let mut b = Builder::with_hosts(hosts);
        let (tor_up, tor_down) = b.add_split_switches(1, "tor", pod_switches);
        let (agg_up, agg_down) = b.add_split_switches(2, "agg", pod_switches);
        let core: Vec<NodeId> = (0..cores)
            .map(|c| b.add_switch(3, Half::Top, format!("core-{c}"), c))
            .collect();

        // Links are added node by node so that each up half's uplinks take contiguous ports,
        // followed by its loopback; every host's links are its port 0 both ways. `w` is the
        // width of a pod (k/2) and `pod_of(i)` the switches of the pod holding switch `i`.
        let w = half as usize;
        let pod_of = |i: usize| (i / w * w)..(i / w * w + w);
        for h in 0..hosts {
            b.add_link(NodeId(h), tor_up[h as usize / w], LinkKind::HostUp);
        }
        for (t, (&up, &down)) in tor_up.iter().zip(&tor_down).enumerate() {
            for &agg in &agg_up[pod_of(t)] {
                b.add_link(up, agg, LinkKind::Up);
            }
            b.add_link(up, down, LinkKind::Loopback);
        }
        // Aggregation switch a of every pod climbs to cores a·k/2 .. a·k/2 + k/2 - 1.
        for (g, (&up, &down)) in agg_up.iter().zip(&agg_down).enumerate() {
            let a = g % w;
            for &top in &core[a * w..a * w + w] {
                b.add_link(up, top, LinkKind::Up);
            }
            b.add_link(up, down, LinkKind::Loopback);
        }
        for (c, &top) in core.iter().enumerate() {
            for pod in agg_down.chunks(w) {
                b.add_link(top, pod[c / w], LinkKind::Down);
            }
        }
        for (g, &down) in agg_down.iter().enumerate() {
            for &tor in &tor_down[pod_of(g)] {
                b.add_link(down, tor, LinkKind::Down);
            }
        }
        for h in 0..hosts {
            b.add_link(tor_down[h as usize / w], NodeId(h), LinkKind::HostDown);
        }
        Ok(b.finish(format!("fat-tree k={k}")))
    }

    /// A single rack: `hosts` hosts under one ToR (`tor-0-up`, `tor-0-down` and the loopback
    /// between them).
    pub fn rack(hosts: u32) -> Result<Topology, TopologyError> {
        let hosts = check_hosts(u128::from(hosts))?;
        let mut b = Builder::with_hosts(hosts);
        let (up, down) = b.add_split_switches(1, "tor", 1);
        for h in 0..hosts {
            b.add_link(NodeId(h), up[0], LinkKind::HostUp);
        }
        b.add_link(up[0], down[0], LinkKind::Loopback);
        for h in 0..hosts {
            b.add_link(down[0], NodeId(h), LinkKind::HostDown);
        }
        Ok(b.finish("rack".to_string()))
    }

    /// A two-layer leaf-spine: `ceil(hosts / rack_size)` leaves, `rack_size` hosts each (the last
    /// may be partly filled), every leaf's up half linked to every spine and every spine to every
    /// leaf's down half.
    pub fn leaf_spine(hosts: u32, rack_size: u32, spines: u32) -> Result<Topology, TopologyError> {
        if hosts == 0 {
            return Err(TopologyError::NoHosts);
        }
        if rack_size == 0 {
            return Err(TopologyError::RackSize { rack_size });
        }
        if spines == 0 {
            return Err(TopologyError::Spines { spines });
        }
        let hosts = check_hosts(u128::from(hosts))?;
        let leaves = hosts.div_ceil(rack_size);
        let links = 2 * u64::from(hosts) + u64::from(leaves) * (1 + 2 * u64::from(spines));
        if links > LINKS_MAX {
            return Err(TopologyError::TooLarge {
                what: "links",
                count: links,
                max: LINKS_MAX,
            });
        }

        let mut b = Builder::with_hosts(hosts);
        let (leaf_up, leaf_down) = b.add_split_switches(1, "leaf", leaves);
        let spine: Vec<NodeId> = (0..spines)
            .map(|s| b.add_switch(2, Half::Top, format!("spine-{s}"), s))
            .collect();
        let leaf_of = |h: u32| (h / rack_size) as usize;
        for h in 0..hosts {
            b.add_link(NodeId(h), leaf_up[leaf_of(h)], LinkKind::HostUp);
        }
        for (&up, &down) in leaf_up.iter().zip(&leaf_down) {
            for &s in &spine {
                b.add_link(up, s, LinkKind::Up);
            }
            b.add_link(up, down, LinkKind::Loopback);
        }
        for &s in &spine {
            for &down in &leaf_down {
                b.add_link(s, down, LinkKind::Down);
            }
        }
        for h in 0..hosts {
            b.add_link(leaf_down[leaf_of(h)], NodeId(h), LinkKind::HostDown);
        }
        Ok(b.finish(format!("leaf-spine rack={rack_size} spines={spines}")))
    }

    /// The routing graph of an arbitrary tree of switches — what a live cluster's aggregators
    /// form — for the §5.2 controller to reason about: each switch below the root split into an
    /// up and a down half (Fig. 3), the root one node, hosts attached to any switch. The graph
    /// has no routing tables ([`Topology::route`] gives `None`: a tree's aggregators route by
    /// process table), so its blocks of hosts need not be aligned. Returns the links by switch
    /// port ([`TreeLinks`]).
    ///
    /// # Errors
    /// `switches` is not one tree over hosts `0..hosts`, each attached once.
    pub fn tree(
        hosts: u32,
        switches: &[TreeSwitch],
    ) -> Result<(Topology, TreeLinks), TopologyError> {
        let hosts = check_hosts(u128::from(hosts))?;
        let (root, children, height) = tree_shape(hosts, switches)?;
        let n = switches.len();
        let mut b = Builder::with_hosts(hosts);
        let mut links = TreeLinks {
            up_inputs: vec![Vec::new(); n],
            down_inputs: vec![Vec::new(); n],
            nodes: vec![Vec::new(); n],
        };
        // Nodes: the root's one, the others' halves.
        let (mut up, mut down) = (vec![NodeId(0); n], vec![NodeId(0); n]);
        for s in 0..n {
            if s == root {
                up[s] = b.add_switch(height[s], Half::Top, format!("agg-{s}"), s as u32);
                down[s] = up[s];
                links.nodes[s] = vec![up[s]];
            } else {
                up[s] = b.add_switch(height[s], Half::Up, format!("agg-{s}-up"), s as u32);
                down[s] = b.add_switch(height[s], Half::Down, format!("agg-{s}-down"), s as u32);
                links.nodes[s] = vec![up[s], down[s]];
            }
        }
        // Up inputs in port order: attached hosts, then the children.
        for s in 0..n {
            for &h in &switches[s].hosts {
                let l = b.add_link(NodeId(h), up[s], LinkKind::HostUp);
                links.up_inputs[s].push(l);
            }
            for &c in &children[s] {
                let l = b.add_link(up[c], up[s], LinkKind::Up);
                links.up_inputs[s].push(l);
            }
        }
        // Down inputs: the loopback, then the parent.
        for s in 0..n {
            if let Some(p) = switches[s].parent {
                links.down_inputs[s].push(b.add_link(up[s], down[s], LinkKind::Loopback));
                links.down_inputs[s].push(b.add_link(down[p], down[s], LinkKind::Down));
            }
        }
        for s in 0..n {
            for &h in &switches[s].hosts {
                b.add_link(down[s], NodeId(h), LinkKind::HostDown);
            }
        }
        Ok((b.finish_unrouted(format!("tree of {n} switches")), links))
    }

    /// The output port to take at node `at` for a packet to host `dst_host`.
    ///
    /// At an up half: the loopback if `dst_host` is below this physical switch, else an uplink
    /// chosen by ECMP from `flow_hash` and `at`, so different switches choose independently for
    /// the same flow. At a down half or top node: the unique port toward `dst_host`. At a host:
    /// port 0. `None` if `at` is `dst_host` itself, or `dst_host` or `at` is out of range, or
    /// `dst_host` is not reachable from `at`. O(1); does not allocate.
    #[inline]
    pub fn route(&self, at: NodeId, dst_host: u32, flow_hash: u64) -> Option<PortId> {
        let (first, count) = self.choices(at, dst_host)?;
        debug_assert!(count >= 1);
        let pick = if count == 1 {
            0
        } else {
            let mixed = ecmp_mix(flow_hash, at);
            // The same pick as `%`, without a division when the group is a power of two (a
            // fat tree's k/2 uplinks).
            if count.is_power_of_two() {
                (mixed & u64::from(count - 1)) as u32
            } else {
                (mixed % u64::from(count)) as u32
            }
        };
        Some(PortId(first + pick))
    }

    /// Prefetch hint: the routing entry of `at` (see [`crate::prefetch`]).
    #[inline(always)]
    pub fn prefetch_route(&self, at: NodeId) {
        if let Some(r) = self.routes.get(at.index()) {
            crate::prefetch::prefetch(r);
        }
    }

    /// The ECMP group at `at` towards `dst_host`: (first output port, number of ports). A driver
    /// routing around failures (§5.2 Resume) picks another member of it.
    pub fn route_choices(&self, at: NodeId, dst_host: u32) -> Option<(u32, u32)> {
        self.choices(at, dst_host)
    }

    /// The seeded per-flow hash used for ECMP; the same as the free function [`flow_hash`].
    pub fn flow_hash(seed: u64, src_host: u32, dst_host: u32) -> u64 {
        flow_hash(seed, src_host, dst_host)
    }

    /// The links a packet from `src_host` to `dst_host` takes, following [`Topology::route`]
    /// hop by hop. Empty if the two are the same host or either is out of range. For tests and
    /// tools; it allocates.
    pub fn path(&self, src_host: u32, dst_host: u32, flow_hash: u64) -> Vec<LinkId> {
        let mut path = Vec::new();
        if src_host >= self.hosts || dst_host >= self.hosts {
            return path;
        }
        let mut at = NodeId(src_host);
        while let Some(port) = self.route(at, dst_host, flow_hash) {
            let link = self.nodes[at.index()].outputs[port.index()];
            path.push(link);
            at = self.links[link.index()].to;
            // The graph is a DAG (§3.1), so a route can never revisit a link.
            assert!(
                path.len() <= self.links.len(),
                "routing loop toward host-{dst_host}"
            );
        }
        path
    }

    /// The number of hosts.
    pub fn hosts(&self) -> u32 {
        self.hosts
    }

    /// All nodes, indexed by `NodeId`: hosts first, then logical switches.
    pub fn nodes(&self) -> &[TopoNode] {
        &self.nodes
    }

    /// One node.
    pub fn node(&self, id: NodeId) -> &TopoNode {
        &self.nodes[id.index()]
    }

    /// All links, indexed by `LinkId`.
    pub fn links(&self) -> &[TopoLink] {
        &self.links
    }

    /// One link.
    pub fn link(&self, id: LinkId) -> &TopoLink {
        &self.links[id.index()]
    }

    /// The node of host `host`, which is `NodeId(host)`.
    pub fn host_node(&self, host: u32) -> NodeId {
        assert!(host < self.hosts, "host-{host} out of range");
        NodeId(host)
    }

    /// Host `host`'s uplink ([`LinkKind::HostUp`], its output port 0).
    pub fn uplink(&self, host: u32) -> LinkId {
        self.nodes[self.host_node(host).index()].outputs[0]
    }

    /// Host `host`'s downlink ([`LinkKind::HostDown`], its input port 0).
    pub fn downlink(&self, host: u32) -> LinkId {
        self.nodes[self.host_node(host).index()].inputs[0]
    }

    /// The logical switches, in node order.
    pub fn switches(&self) -> impl Iterator<Item = NodeId> {
        let end = u32::try_from(self.nodes.len()).expect("node count fits u32");
        (self.hosts..end).map(NodeId)
    }

    /// The largest [`TopoNode::depth`].
    pub fn max_depth(&self) -> u32 {
        self.max_depth
    }

    /// The longest route, in links, between two distinct hosts (0 if there is only one host).
    pub fn diameter_links(&self) -> u32 {
        self.diameter_links
    }

    /// One line, e.g. "fat-tree k=4: 16 hosts, 20 switches (36 logical), 3 layers, 112 links".
    pub fn describe(&self) -> String {
        format!(
            "{}: {}, {} ({} logical), {}, {}",
            self.label,
            plural(u64::from(self.hosts), "host"),
            plural(u64::from(self.physical_switches), "switch"),
            self.nodes.len() - self.hosts as usize,
            plural(u64::from(self.layers), "layer"),
            plural(self.links.len() as u64, "link"),
        )
    }

    /// Approximate bytes owned by this topology, inline and on the heap, ignoring allocator
    /// overhead.
    pub fn memory_bytes(&self) -> usize {
        let per_node: usize = self
            .nodes
            .iter()
            .map(|n| {
                n.name.capacity()
                    + (n.inputs.capacity() + n.outputs.capacity()) * size_of::<LinkId>()
            })
            .sum();
        size_of::<Self>()
            + self.label.capacity()
            + self.nodes.capacity() * size_of::<TopoNode>()
            + per_node
            + self.links.capacity() * size_of::<TopoLink>()
            + self.routes.capacity() * size_of::<Route>()
    }

    /// Checks every structural promise this type makes, returning the first broken one:
    /// hosts come first with one port each way; port tables agree with links; link kinds join
    /// the node kinds they should; the graph is acyclic once hosts are split into sources and
    /// sinks (§3.1); depths are longest paths; every routing choice (every ECMP branch) from
    /// every node leads to the destination; every host reaches every other host along a path
    /// that climbs, turns once and descends; and the longest such path is
    /// [`Topology::diameter_links`].
    ///
    /// Costs O(nodes × hosts + hosts² × diameter): meant for tests and tools, not for
    /// million-host topologies.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_nodes()?;
        self.validate_ports()?;
        for (l, link) in self.links.iter().enumerate() {
            self.validate_link_kind(LinkId(l as u32), link)?;
        }
        let order = topological_order(&self.nodes, &self.links)
            .ok_or("the routing graph has a cycle (§3.1 requires a DAG)")?;
        let depth = longest_paths(&self.nodes, &self.links, &order);
        for (node, d) in self.nodes.iter().zip(&depth) {
            if node.depth != *d {
                return Err(format!(
                    "{} has depth {}, expected {d}",
                    node.name, node.depth
                ));
            }
        }
        if self.max_depth != depth.iter().copied().max().unwrap_or(0) {
            return Err(format!(
                "max_depth {} is not the largest depth",
                self.max_depth
            ));
        }
        self.validate_all_choices(&order)?;
        self.validate_paths()
    }

    /// The output ports `first .. first + count` that [`Topology::route`] chooses among, or
    /// `None` if there is no way on.
    #[inline]
    fn choices(&self, at: NodeId, dst: u32) -> Option<(u32, u32)> {
        if dst >= self.hosts {
            return None;
        }
        match *self.routes.get(at.index())? {
            Route::Host { host } => (host != dst).then_some((0, 1)),
            Route::Up {
                below,
                loopback,
                uplinks_first,
                uplinks_count,
            } => {
                if below.contains(dst) {
                    // §3.1: this physical switch is the lowest common ancestor; turn here.
                    Some((loopback.0, 1))
                } else if uplinks_count > 0 {
                    Some((uplinks_first, uplinks_count))
                } else {
                    None
                }
            }
            Route::Down {
                reach,
                hosts_per_port,
            } => reach.contains(dst).then(|| {
                let i = dst - reach.lo;
                let port = if hosts_per_port.is_power_of_two() {
                    i >> hosts_per_port.trailing_zeros()
                } else {
                    i / hosts_per_port
                };
                (port, 1)
            }),
        }
    }
}

impl Builder {
    /// A builder holding hosts `0..hosts`, with no links yet.
    fn with_hosts(hosts: u32) -> Builder {
        assert!((1..=HOSTS_MAX).contains(&hosts));
        let nodes = (0..hosts)
            .map(|h| TopoNode {
                kind: NodeKind::Host,
                name: format!("host-{h}"),
                physical: h,
                depth: 0,
                inputs: Vec::with_capacity(1),
                outputs: Vec::with_capacity(1),
            })
            .collect();
        Builder {
            hosts,
            nodes,
            links: Vec::new(),
        }
    }

    /// Adds one logical switch.
    fn add_switch(&mut self, layer: u8, half: Half, name: String, physical: u32) -> NodeId {
        let id = NodeId(u32::try_from(self.nodes.len()).expect("node count fits u32"));
        self.nodes.push(TopoNode {
            kind: NodeKind::Switch { layer, half },
            name,
            physical,
            depth: 0,
            inputs: Vec::new(),
            outputs: Vec::new(),
        });
        id
    }

    /// Adds `count` physical switches of one layer, each split into an up and a down half
    /// (Fig. 3), interleaved in node order; returns the up halves and the down halves.
    fn add_split_switches(
        &mut self,
        layer: u8,
        prefix: &str,
        count: u32,
    ) -> (Vec<NodeId>, Vec<NodeId>) {
        let mut up = Vec::with_capacity(count as usize);
        let mut down = Vec::with_capacity(count as usize);
        for i in 0..count {
            up.push(self.add_switch(layer, Half::Up, format!("{prefix}-{i}-up"), i));
            down.push(self.add_switch(layer, Half::Down, format!("{prefix}-{i}-down"), i));
        }
        (up, down)
    }

    /// Adds a link on the next free output port of `from` and input port of `to`.
    fn add_link(&mut self, from: NodeId, to: NodeId, kind: LinkKind) -> LinkId {
        assert_ne!(from, to);
        let id = LinkId(u32::try_from(self.links.len()).expect("link count fits u32"));
        let from_port = PortId(self.nodes[from.index()].outputs.len() as u32);
        let to_port = PortId(self.nodes[to.index()].inputs.len() as u32);
        self.nodes[from.index()].outputs.push(id);
        self.nodes[to.index()].inputs.push(id);
        self.links.push(TopoLink {
            from,
            from_port,
            to,
            to_port,
            kind,
        });
        id
    }

    /// Computes depths and seals the topology without routing tables ([`Topology::tree`]).
    fn finish_unrouted(self, label: String) -> Topology {
        let Builder {
            hosts,
            mut nodes,
            links,
        } = self;
        assert!(links.len() as u64 <= LINKS_MAX);
        let order = topological_order(&nodes, &links)
            .expect("a multi-rooted tree's routing graph is a DAG (§3.1)");
        let depth = longest_paths(&nodes, &links, &order);
        for (node, d) in nodes.iter_mut().zip(&depth) {
            node.depth = *d;
        }
        let (mut layers, mut physical_switches) = (0, 0);
        for node in &nodes {
            if let NodeKind::Switch { layer, half } = node.kind {
                layers = layers.max(layer);
                physical_switches += u32::from(half != Half::Down);
            }
        }
        Topology {
            label,
            hosts,
            layers,
            physical_switches,
            nodes,
            links,
            routes: Vec::new(),
            max_depth: depth.iter().copied().max().unwrap_or(0),
            diameter_links: 0,
        }
    }

    /// Computes depths and routing tables and seals the topology.
    fn finish(self, label: String) -> Topology {
        let mut topology = self.finish_unrouted(label);
        let order = topological_order(&topology.nodes, &topology.links)
            .expect("a multi-rooted tree's routing graph is a DAG (§3.1)");
        let (routes, descent_len) =
            route_tables(&topology.nodes, &topology.links, &order, topology.hosts);
        topology.routes = routes;
        topology.diameter_links = topology.diameter_from_tables(&descent_len);
        topology
    }
}

impl HostRange {
    fn contains(self, host: u32) -> bool {
        self.lo <= host && host < self.hi
    }

    fn len(self) -> u32 {
        self.hi - self.lo
    }
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::FatTreeArity { k } => {
                write!(f, "fat-tree --k must be even and >= 2, got {k}")
            }
            TopologyError::NoHosts => write!(f, "--hosts must be >= 1, got 0"),
            TopologyError::RackSize { rack_size } => {
                write!(f, "--rack-size must be >= 1, got {rack_size}")
            }
            TopologyError::NotATree { why } => write!(f, "not a tree: {why}"),
            TopologyError::Spines { spines } => {
                write!(f, "leaf-spine --spines must be >= 1, got {spines}")
            }
            TopologyError::TooLarge { what, count, max } => {
                write!(f, "topology too large: {count} {what}, the limit is {max}")
            }
        }
    }
}

impl std::error::Error for TopologyError {}

/// The seeded per-flow hash used for ECMP: the same `(seed, src_host, dst_host)` always gives
/// the same hash, and under one seed distinct pairs give distinct hashes (it is a bijection of
/// the pair).
pub fn flow_hash(seed: u64, src_host: u32, dst_host: u32) -> u64 {
    let pair = (u64::from(src_host) << 32) | u64::from(dst_host);
    mix64(mix64(seed.wrapping_add(GOLDEN)) ^ pair)
}

/// SplitMix64's finalizer: a bijective 64-bit mixer with full avalanche.
#[inline]
const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The ECMP draw of switch `at` for a flow: mixing in the node makes the switches along a path
/// choose independently of each other.
#[inline]
fn ecmp_mix(flow_hash: u64, at: NodeId) -> u64 {
    mix64(flow_hash ^ u64::from(at.0).wrapping_mul(GOLDEN))
}

/// Host count as `u32`, or why not.
fn check_hosts(hosts: u128) -> Result<u32, TopologyError> {
    if hosts == 0 {
        return Err(TopologyError::NoHosts);
    }
    if hosts > u128::from(HOSTS_MAX) {
        return Err(TopologyError::TooLarge {
            what: "hosts",
            count: u64::try_from(hosts).unwrap_or(u64::MAX),
            max: u64::from(HOSTS_MAX),
        });
    }
    Ok(hosts as u32)
}

/// "1 host", "16 hosts", "2 switches".
fn plural(n: u64, noun: &str) -> String {
    match (n, noun.ends_with("ch")) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{n} {noun}es"),
        (_, false) => format!("{n} {noun}s"),
    }
}

/// A topological order of the nodes (Kahn), or `None` if there is a cycle.
///
/// Downlinks into hosts are left out: a host is a source on its uplink and a sink on its
/// downlink (§3.1, Fig. 3), and the barrier a host sends is its own clock, not a function of
/// what it received, so host → ToR → host is not a dependency cycle. Hosts therefore come first.
fn topological_order(nodes: &[TopoNode], links: &[TopoLink]) -> Option<Vec<NodeId>> {
    let counts_in = |l: &LinkId| links[l.index()].kind != LinkKind::HostDown;
    let mut indegree: Vec<usize> = nodes
        .iter()
        .map(|n| n.inputs.iter().filter(|l| counts_in(l)).count())
        .collect();
    let mut order: Vec<NodeId> = (0..nodes.len())
        .filter(|&i| indegree[i] == 0)
        .map(|i| NodeId(i as u32))
        .collect();
    let mut next = 0;
    while let Some(&at) = order.get(next) {
        next += 1;
        for l in nodes[at.index()].outputs.iter().filter(|l| counts_in(l)) {
            let to = links[l.index()].to;
            indegree[to.index()] -= 1;
            if indegree[to.index()] == 0 {
                order.push(to);
            }
        }
    }
    (order.len() == nodes.len()).then_some(order)
}

/// Each node's longest path in links from any host (hosts: 0), over `order`.
fn longest_paths(nodes: &[TopoNode], links: &[TopoLink], order: &[NodeId]) -> Vec<u32> {
    let mut depth = vec![0; nodes.len()];
    for &at in order {
        for l in &nodes[at.index()].outputs {
            let link = &links[l.index()];
            if link.kind != LinkKind::HostDown {
                let d = depth[at.index()] + 1;
                let to = &mut depth[link.to.index()];
                *to = (*to).max(d);
            }
        }
    }
    depth
}

/// Every node's compressed routing entry, and every descending node's longest descent to a
/// host in links (0 for hosts and up halves).
fn route_tables(
    nodes: &[TopoNode],
    links: &[TopoLink],
    order: &[NodeId],
    hosts: u32,
) -> (Vec<Route>, Vec<u32>) {
    let mut reach = vec![HostRange { lo: 0, hi: 0 }; nodes.len()];
    let mut descent_len = vec![0; nodes.len()];
    let mut routes: Vec<Option<Route>> = vec![None; nodes.len()];
    for h in 0..hosts {
        reach[h as usize] = HostRange { lo: h, hi: h + 1 };
        routes[h as usize] = Some(Route::Host { host: h });
    }
    // Reverse topological order decides a descending node's children before the node itself.
    for &at in order.iter().rev() {
        if let NodeKind::Switch { half, .. } = nodes[at.index()].kind {
            if half != Half::Up {
                let (route, range, descent) = down_route(nodes, links, &reach, &descent_len, at);
                routes[at.index()] = Some(route);
                reach[at.index()] = range;
                descent_len[at.index()] = descent;
            }
        }
    }
    for (i, node) in nodes.iter().enumerate() {
        if is_up(node) {
            routes[i] = Some(up_route(nodes, links, &reach, NodeId(i as u32)));
        }
    }
    let routes = routes
        .into_iter()
        .map(|r| r.expect("every node has a routing entry"))
        .collect();
    (routes, descent_len)
}

/// A switch's layer and half; `None` for a host.
fn switch_of(kind: NodeKind) -> Option<(u8, Half)> {
    match kind {
        NodeKind::Host => None,
        NodeKind::Switch { layer, half } => Some((layer, half)),
    }
}

/// True for an up half.
fn is_up(node: &TopoNode) -> bool {
    matches!(node.kind, NodeKind::Switch { half: Half::Up, .. })
}

/// A down half's or top node's entry, the hosts it reaches and its longest descent. Asserts the
/// aligned block layout the compressed entry relies on (module docs).
fn down_route(
    nodes: &[TopoNode],
    links: &[TopoLink],
    reach: &[HostRange],
    descent_len: &[u32],
    at: NodeId,
) -> (Route, HostRange, u32) {
    let node = &nodes[at.index()];
    assert!(!node.outputs.is_empty(), "{} has no way down", node.name);
    let child = |p: usize| {
        let link = &links[node.outputs[p].index()];
        assert!(
            matches!(link.kind, LinkKind::Down | LinkKind::HostDown),
            "{} has a non-descending output",
            node.name
        );
        link.to
    };
    let first = reach[child(0).index()];
    let hosts_per_port = first.len();
    let last_port = node.outputs.len() - 1;
    let mut descent = 0;
    for p in 0..=last_port {
        let to = child(p);
        let r = reach[to.index()];
        let aligned = r.lo == first.lo + p as u32 * hosts_per_port
            && r.len() >= 1
            && (r.len() == hosts_per_port || (p == last_port && r.len() < hosts_per_port));
        assert!(
            aligned,
            "{}: port {p} breaks the aligned host blocks",
            node.name
        );
        descent = descent.max(descent_len[to.index()] + 1);
    }
    let range = HostRange {
        lo: first.lo,
        hi: reach[child(last_port).index()].hi,
    };
    let route = Route::Down {
        reach: range,
        hosts_per_port,
    };
    (route, range, descent)
}

/// An up half's entry: the hosts below its physical switch (what its loopback reaches), its
/// loopback port and its contiguous uplink ports.
fn up_route(nodes: &[TopoNode], links: &[TopoLink], reach: &[HostRange], at: NodeId) -> Route {
    let node = &nodes[at.index()];
    let mut loopback = None;
    let mut uplinks_first = None;
    let mut uplinks_count = 0;
    for (p, l) in node.outputs.iter().enumerate() {
        let link = &links[l.index()];
        match link.kind {
            LinkKind::Loopback => {
                assert!(loopback.is_none(), "{} has two loopbacks", node.name);
                loopback = Some((PortId(p as u32), link.to));
            }
            LinkKind::Up => {
                let first = *uplinks_first.get_or_insert(p as u32);
                assert_eq!(
                    first + uplinks_count,
                    p as u32,
                    "{}: uplinks not contiguous",
                    node.name
                );
                uplinks_count += 1;
            }
            kind => panic!("{} has a {kind:?} output", node.name),
        }
    }
    let (loopback, down) = loopback.unwrap_or_else(|| panic!("{} has no loopback", node.name));
    Route::Up {
        below: reach[down.index()],
        loopback,
        uplinks_first: uplinks_first.unwrap_or(0),
        uplinks_count,
    }
}

mod validate;

#[cfg(test)]
mod tests;
