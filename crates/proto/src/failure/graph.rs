//! The controller's graph questions (§5.2 Determine): who reaches whom over the links not known
//! dead, and the largest groups of hosts that reach each other both ways.

use super::*;

/// Nodes reachable from `start` over links not in `dead` (the start included).
pub fn reachable_from(topo: &Topology, start: NodeId, dead: &BTreeSet<LinkId>) -> Vec<bool> {
    let mut seen = vec![false; topo.nodes().len()];
    let mut stack = vec![start];
    seen[start.index()] = true;
    while let Some(n) = stack.pop() {
        for &l in &topo.nodes()[n.index()].outputs {
            if dead.contains(&l) {
                continue;
            }
            let to = topo.links()[l.index()].to;
            if !seen[to.index()] {
                seen[to.index()] = true;
                // A host is a sink here: what reaches it does not go on through it.
                if to.0 >= topo.hosts() {
                    stack.push(to);
                }
            }
        }
    }
    seen
}

/// §5.2 "a process that disconnects … in a routing graph is regarded as failed": the hosts of the
/// largest group that can all reach one another over live links, as a mask by host. Under a
/// partition this is the greedy choice: the other side is failed. See
/// [`connected_hosts_among`].
pub fn connected_hosts(topo: &Topology, dead: &BTreeSet<LinkId>) -> Vec<bool> {
    connected_hosts_among(topo, dead, &vec![true; topo.hosts() as usize])
}

/// [`connected_hosts`] among the hosts `candidate` admits (the controller leaves out hosts
/// already declared failed).
///
/// Every pair of correct hosts must reach each other over live links, both ways: a correct
/// receiver's commit barrier is bounded by a correct sender's only through a path of links
/// that stay in the commit minimum, and Resume removes the dead ones. It is not enough that
/// each reaches one common host (VOPR seed 1806: with `agg-0` failed and
/// `agg-3-down → tor-3-down` reported, pod 0 and `tor-3`'s hosts both reached pod 2, but not
/// each other; all were counted correct, and `tor-3`'s commit barrier lost pod 0's bound).
/// Greedy (the paper's "greedy algorithm to find a set to separate as many receivers as
/// possible"): for each host, biggest first, the hosts it reaches both ways; then, while two of
/// them do not reach each other, drop the one that misses the most (ties: the higher id). The
/// largest group wins (ties: the one found first).
pub fn connected_hosts_among(
    topo: &Topology,
    dead: &BTreeSet<LinkId>,
    candidate: &[bool],
) -> Vec<bool> {
    let hosts = topo.hosts() as usize;
    assert_eq!(candidate.len(), hosts, "a candidate flag per host");
    // Per host: which hosts it reaches, and whether it reaches itself through the network — a
    // host whose uplink or downlink is dead is in no group; one cut off with its rack alone is.
    let (reach, eligible): (Vec<Vec<bool>>, Vec<bool>) = (0..hosts)
        .map(|h| {
            let r = reachable_from(topo, NodeId(h as u32), dead);
            let down = topo.downlink(h as u32);
            let feeder = topo.links()[down.index()].from;
            let ok = !dead.contains(&down) && r[feeder.index()];
            (r[..hosts].to_vec(), ok)
        })
        .unzip();
    let eligible: Vec<bool> = (0..hosts).map(|h| eligible[h] && candidate[h]).collect();
    let both = |a: usize, b: usize| a == b || reach[a][b] && reach[b][a];
    let stars: Vec<Vec<usize>> = (0..hosts)
        .map(|h| {
            if !eligible[h] {
                return Vec::new();
            }
            (0..hosts).filter(|&o| eligible[o] && both(h, o)).collect()
        })
        .collect();
    let mut order: Vec<usize> = (0..hosts).filter(|&h| eligible[h]).collect();
    order.sort_by_key(|&h| (std::cmp::Reverse(stars[h].len()), h));
    let mut best: Vec<usize> = Vec::new();
    for h in order {
        if stars[h].len() <= best.len() {
            break; // no smaller star can beat it
        }
        let group = prune_to_clique(&stars[h], both);
        if group.len() > best.len() {
            best = group;
        }
    }
    let mut mask = vec![false; hosts];
    for h in best {
        mask[h] = true;
    }
    mask
}

/// Drops members of `group` until every two of them are related by `both`: each time the one
/// related to the fewest (ties: the higher id).
fn prune_to_clique(group: &[usize], both: impl Fn(usize, usize) -> bool) -> Vec<usize> {
    let mut members = group.to_vec();
    let mut missing: Vec<usize> = members
        .iter()
        .map(|&a| members.iter().filter(|&&b| !both(a, b)).count())
        .collect();
    loop {
        let Some((i, _)) = missing
            .iter()
            .enumerate()
            .filter(|(_, &m)| m > 0)
            .max_by_key(|&(i, &m)| (m, members[i]))
        else {
            return members;
        };
        let gone = members.remove(i);
        missing.remove(i);
        for (j, &b) in members.iter().enumerate() {
            if !both(gone, b) {
                missing[j] -= 1;
            }
        }
    }
}

/// For each destination host, the nodes that can still reach it over live links: what a driver
/// routes by after Resume (`usable[dst][node]`).
pub fn reach_table(topo: &Topology, dead: &BTreeSet<LinkId>) -> Vec<Vec<bool>> {
    let n = topo.nodes().len();
    (0..topo.hosts())
        .map(|d| {
            let mut can = vec![false; n];
            can[d as usize] = true;
            let mut stack = vec![NodeId(d)];
            while let Some(x) = stack.pop() {
                for &l in &topo.nodes()[x.index()].inputs {
                    if dead.contains(&l) {
                        continue;
                    }
                    let from = topo.links()[l.index()].from;
                    // Hosts are sources only: reaching host `from` says nothing of routing on.
                    if !can[from.index()] && from.0 >= topo.hosts() {
                        can[from.index()] = true;
                        stack.push(from);
                    }
                }
            }
            can
        })
        .collect()
}

/// `dead` plus every link out of a switch that no host outside `failed` reaches over links
/// not in `dead` (see `Controller::with_orphaned`).
pub(super) fn with_orphaned(
    topo: &Topology,
    dead: BTreeSet<LinkId>,
    failed: &[bool],
) -> Vec<LinkId> {
    let mut reached = vec![false; topo.nodes().len()];
    for h in (0..topo.hosts()).filter(|&h| !failed[h as usize]) {
        let r = reachable_from(topo, NodeId(h), &dead);
        for (x, y) in reached.iter_mut().zip(r) {
            *x |= y;
        }
    }
    let mut all = dead;
    for (i, l) in topo.links().iter().enumerate() {
        if l.from.0 >= topo.hosts() && !reached[l.from.index()] {
            all.insert(LinkId(i as u32));
        }
    }
    all.into_iter().collect()
}
