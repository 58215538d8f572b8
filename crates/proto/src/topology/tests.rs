use super::*;
use crate::rng::Rng;
use proptest::prelude::*;

fn by_name(topo: &Topology, name: &str) -> NodeId {
    let i = topo.nodes().iter().position(|n| n.name == name);
    NodeId(i.unwrap_or_else(|| panic!("no node {name}")) as u32)
}

fn kinds(topo: &Topology, path: &[LinkId]) -> Vec<LinkKind> {
    path.iter().map(|&l| topo.link(l).kind).collect()
}

fn logical_switches(topo: &Topology) -> usize {
    topo.switches().count()
}

/// The route from `src` to `dst` starts on `src`'s uplink, ends on `dst`'s downlink and
/// climbs, turns once and descends (§3.1).
fn assert_route_reaches(topo: &Topology, src: u32, dst: u32, flow: u64) {
    let path = topo.path(src, dst, flow);
    if src == dst {
        assert!(path.is_empty());
        return;
    }
    assert_eq!(path.first(), Some(&topo.uplink(src)), "{src} -> {dst}");
    assert_eq!(path.last(), Some(&topo.downlink(dst)), "{src} -> {dst}");
    assert_eq!(topo.check_path_shape(&path), Ok(()), "{src} -> {dst}");
}

#[test]
fn fat_tree_k4_has_16_hosts_20_switches_3_1() {
    let topo = Topology::fat_tree(4).unwrap();
    assert_eq!(topo.hosts(), 16);
    // 8 edge + 8 aggregation switches split in two halves each, plus 4 single cores.
    assert_eq!(logical_switches(&topo), 36);
    assert_eq!(topo.nodes().len(), 16 + 36);
    assert_eq!(topo.links().len(), 112);
    assert_eq!(
        topo.describe(),
        "fat-tree k=4: 16 hosts, 20 switches (36 logical), 3 layers, 112 links"
    );
    assert_eq!(topo.validate(), Ok(()));
}

#[test]
fn fat_tree_k2_and_k8_have_al_fares_counts() {
    // k=2: 2 pods of 1 ToR and 1 aggregation switch, 1 core, 1 host per ToR.
    let topo = Topology::fat_tree(2).unwrap();
    assert_eq!(topo.hosts(), 2);
    assert_eq!(logical_switches(&topo), 2 * 2 + 2 * 2 + 1);
    assert!(topo.describe().contains("5 switches (9 logical)"));
    assert_eq!(topo.validate(), Ok(()));

    // k=8: 128 hosts, 32 ToRs, 32 aggregation switches, 16 cores.
    let topo = Topology::fat_tree(8).unwrap();
    assert_eq!(topo.hosts(), 128);
    assert_eq!(logical_switches(&topo), 64 + 64 + 16);
    assert!(topo
        .describe()
        .contains("128 hosts, 80 switches (144 logical), 3 layers"));
    assert_eq!(topo.validate(), Ok(()));
}

#[test]
fn rack_is_one_tor_split_in_two_halves_3_1() {
    let one = Topology::rack(1).unwrap();
    assert_eq!(
        one.describe(),
        "rack: 1 host, 1 switch (2 logical), 1 layer, 3 links"
    );
    assert_eq!(one.diameter_links(), 0);
    assert_eq!(one.validate(), Ok(()));

    let five = Topology::rack(5).unwrap();
    assert_eq!(
        five.describe(),
        "rack: 5 hosts, 1 switch (2 logical), 1 layer, 11 links"
    );
    assert_eq!(five.node(by_name(&five, "tor-0-up")).outputs.len(), 1);
    assert_eq!(five.validate(), Ok(()));
}

#[test]
fn leaf_spine_10_hosts_racks_of_4_has_3_leaves_last_partly_filled() {
    let topo = Topology::leaf_spine(10, 4, 2).unwrap();
    assert_eq!(topo.hosts(), 10);
    assert_eq!(logical_switches(&topo), 3 * 2 + 2);
    // 10 host uplinks + 10 downlinks + 3 loopbacks + 3 leaves × 2 spines × 2 directions.
    assert_eq!(
        topo.describe(),
        "leaf-spine rack=4 spines=2: 10 hosts, 5 switches (8 logical), 2 layers, 35 links"
    );
    assert_eq!(topo.node(by_name(&topo, "leaf-2-down")).outputs.len(), 2);
    assert_eq!(topo.node(by_name(&topo, "spine-1")).outputs.len(), 3);
    assert_eq!(topo.validate(), Ok(()));
}

#[test]
fn fat_tree_k16_validates_within_memory_bound() {
    let topo = Topology::fat_tree(16).unwrap();
    assert_eq!(topo.hosts(), 1024);
    // 128 ToRs and 128 aggregation switches split in two, plus 64 cores: 320 physical
    // switches, 576 logical ones.
    assert_eq!(logical_switches(&topo), 2 * 128 + 2 * 128 + 64);
    assert!(topo.describe().contains("320 switches (576 logical)"));
    assert_eq!(topo.validate(), Ok(()));
    // The routing entry is per node, not per (node, destination) pair.
    assert_eq!(topo.routes.len(), topo.nodes().len());
    assert!(
        topo.memory_bytes() < 10 << 20,
        "{} bytes",
        topo.memory_bytes()
    );
}

#[test]
fn hosts_have_one_port_each_way_to_their_tor() {
    let topo = Topology::fat_tree(4).unwrap();
    for h in 0..topo.hosts() {
        let node = topo.node(topo.host_node(h));
        assert_eq!(node.kind, NodeKind::Host);
        assert_eq!(node.name, format!("host-{h}"));
        let up = topo.link(topo.uplink(h));
        let down = topo.link(topo.downlink(h));
        assert_eq!((up.kind, up.from_port), (LinkKind::HostUp, PortId(0)));
        assert_eq!((down.kind, down.to_port), (LinkKind::HostDown, PortId(0)));
        assert_eq!(topo.node(up.to).name, format!("tor-{}-up", h / 2));
        assert_eq!(topo.node(down.from).name, format!("tor-{}-down", h / 2));
    }
}

#[test]
fn fat_tree_aggregation_a_connects_to_cores_a_times_half_onwards() {
    let topo = Topology::fat_tree(4).unwrap();
    let up_targets = |name: &str| -> Vec<String> {
        let node = topo.node(by_name(&topo, name));
        node.outputs
            .iter()
            .map(|&l| topo.link(l))
            .filter(|l| l.kind == LinkKind::Up)
            .map(|l| topo.node(l.to).name.clone())
            .collect()
    };
    // agg-1 is aggregation switch 1 of pod 0 and agg-3 is switch 1 of pod 1.
    assert_eq!(up_targets("agg-1-up"), ["core-2", "core-3"]);
    assert_eq!(up_targets("agg-3-up"), ["core-2", "core-3"]);
    assert_eq!(up_targets("tor-2-up"), ["agg-2-up", "agg-3-up"]);
    let core = topo.node(by_name(&topo, "core-2"));
    let downs: Vec<&str> = core
        .outputs
        .iter()
        .map(|&l| topo.node(topo.link(l).to).name.as_str())
        .collect();
    assert_eq!(
        downs,
        ["agg-1-down", "agg-3-down", "agg-5-down", "agg-7-down"]
    );
}

#[test]
fn routing_graph_is_a_dag_3_1() {
    for topo in [
        Topology::fat_tree(4).unwrap(),
        Topology::leaf_spine(10, 4, 2).unwrap(),
        Topology::rack(3).unwrap(),
    ] {
        let order = topological_order(&topo.nodes, &topo.links).expect("acyclic");
        let mut position = vec![0; order.len()];
        for (i, at) in order.iter().enumerate() {
            position[at.index()] = i;
        }
        for link in topo.links().iter().filter(|l| l.kind != LinkKind::HostDown) {
            assert!(position[link.from.index()] < position[link.to.index()]);
            assert!(topo.node(link.from).depth < topo.node(link.to).depth);
        }
    }
}

#[test]
fn depth_is_the_longest_path_from_any_host() {
    let topo = Topology::fat_tree(4).unwrap();
    let depth = |name| topo.node(by_name(&topo, name)).depth;
    // agg-down is fed by its own up half (depth 3) and by cores (depth 4): the longer wins.
    assert_eq!(
        [
            depth("host-0"),
            depth("tor-0-up"),
            depth("agg-0-up"),
            depth("core-0")
        ],
        [0, 1, 2, 3]
    );
    assert_eq!([depth("agg-0-down"), depth("tor-0-down")], [4, 5]);
    assert_eq!(topo.max_depth(), 5);
    assert_eq!(Topology::leaf_spine(10, 4, 2).unwrap().max_depth(), 3);
    assert_eq!(Topology::rack(5).unwrap().max_depth(), 2);
}

#[test]
fn every_path_climbs_turns_once_and_descends_3_1() {
    for topo in [
        Topology::fat_tree(4).unwrap(),
        Topology::leaf_spine(10, 4, 2).unwrap(),
        Topology::rack(5).unwrap(),
    ] {
        for src in 0..topo.hosts() {
            for dst in 0..topo.hosts() {
                assert_route_reaches(&topo, src, dst, flow_hash(7, src, dst));
            }
        }
    }
}

#[test]
fn path_lengths_follow_the_lowest_common_ancestor_3_1() {
    use LinkKind::{Down, HostDown, HostUp, Loopback, Up};
    let topo = Topology::fat_tree(4).unwrap();
    let kinds_of = |src, dst| kinds(&topo, &topo.path(src, dst, flow_hash(1, src, dst)));
    // Hosts 0 and 1 share ToR 0: up to the ToR, loop back, down to the host — 3 links.
    assert_eq!(kinds_of(0, 1), [HostUp, Loopback, HostDown]);
    // Hosts 0 and 2 share pod 0 but not a ToR: turn at an aggregation switch — 5 links.
    assert_eq!(kinds_of(0, 2), [HostUp, Up, Loopback, Down, HostDown]);
    // Hosts 0 and 4 are in different pods: turn at a core, which has no loopback because it
    // is a single logical node — 6 links.
    assert_eq!(kinds_of(0, 4), [HostUp, Up, Up, Down, Down, HostDown]);
    assert_eq!(topo.diameter_links(), 6);

    // Leaf-spine: same leaf 3 links; across leaves turn at a spine — 4 links.
    let ls = Topology::leaf_spine(10, 4, 2).unwrap();
    assert_eq!(kinds(&ls, &ls.path(0, 3, 1)), [HostUp, Loopback, HostDown]);
    assert_eq!(kinds(&ls, &ls.path(0, 9, 1)), [HostUp, Up, Down, HostDown]);
    assert_eq!(ls.diameter_links(), 4);
    // One leaf holds every host, so nothing ever turns at a spine.
    assert_eq!(Topology::leaf_spine(4, 4, 2).unwrap().diameter_links(), 3);
    assert_eq!(Topology::rack(5).unwrap().diameter_links(), 3);
    assert_eq!(Topology::fat_tree(2).unwrap().diameter_links(), 6);
}

#[test]
fn route_is_none_for_self_and_out_of_range_and_path_to_self_is_empty() {
    let topo = Topology::fat_tree(4).unwrap();
    assert_eq!(topo.route(NodeId(3), 3, 0), None);
    assert_eq!(topo.route(NodeId(3), 16, 0), None);
    assert_eq!(topo.route(NodeId(10_000), 1, 0), None);
    assert_eq!(topo.route(NodeId(3), 4, 0), Some(PortId(0)));
    // A down half routes only toward hosts below it.
    assert_eq!(topo.route(by_name(&topo, "tor-0-down"), 5, 0), None);
    assert!(topo.path(3, 3, 0).is_empty());
    assert!(topo.path(3, 99, 0).is_empty());
}

#[test]
fn ecmp_spreads_a_tor_over_both_uplinks() {
    let topo = Topology::fat_tree(4).unwrap();
    let tor = by_name(&topo, "tor-0-up");
    let mut rng = Rng::new(42);
    let mut uses = [0u32; 3]; // Ports 0 and 1 are uplinks, port 2 the loopback.
    for _ in 0..1000 {
        let port = topo.route(tor, 9, rng.next_u64()).unwrap();
        uses[port.index()] += 1;
    }
    assert_eq!(uses[2], 0);
    assert!(uses[0] > 300 && uses[1] > 300, "{uses:?}");
}

#[test]
fn same_seed_same_path_different_seed_different_choices() {
    let topo = Topology::fat_tree(4).unwrap();
    let mut differ = 0;
    for src in 0..topo.hosts() {
        for dst in 0..topo.hosts() {
            let a = topo.path(src, dst, flow_hash(5, src, dst));
            let again = topo.path(src, dst, Topology::flow_hash(5, src, dst));
            assert_eq!(a, again);
            differ += u32::from(a != topo.path(src, dst, flow_hash(6, src, dst)));
        }
    }
    assert!(differ > 0);
    assert_eq!(Topology::fat_tree(4).unwrap(), topo);
}

#[test]
fn bad_parameters_are_typed_errors_naming_the_parameter() {
    let err = Topology::fat_tree(3).unwrap_err();
    assert_eq!(err, TopologyError::FatTreeArity { k: 3 });
    assert!(err.to_string().contains("--k") && err.to_string().contains('3'));
    assert_eq!(
        Topology::fat_tree(0),
        Err(TopologyError::FatTreeArity { k: 0 })
    );
    let err = Topology::rack(0).unwrap_err();
    assert_eq!(err, TopologyError::NoHosts);
    assert!(err.to_string().contains("--hosts"));
    let err = Topology::leaf_spine(4, 0, 1).unwrap_err();
    assert_eq!(err, TopologyError::RackSize { rack_size: 0 });
    assert!(err.to_string().contains("--rack-size"));
    let err = Topology::leaf_spine(4, 1, 0).unwrap_err();
    assert!(err.to_string().contains("--spines"));
    assert_eq!(Topology::leaf_spine(0, 1, 1), Err(TopologyError::NoHosts));
    let err = Topology::fat_tree(162).unwrap_err();
    assert!(
        matches!(err, TopologyError::TooLarge { what: "hosts", .. }),
        "{err}"
    );
    let err = Topology::leaf_spine(1 << 20, 1, 1 << 10).unwrap_err();
    assert!(
        matches!(err, TopologyError::TooLarge { what: "links", .. }),
        "{err}"
    );
    let _: &dyn std::error::Error = &err;
}

#[test]
fn validate_rejects_a_miswired_link_and_a_bad_route_table() {
    let good = Topology::fat_tree(2).unwrap();

    let mut miswired = good.clone();
    let (from, to) = (by_name(&good, "tor-0-down"), by_name(&good, "tor-0-up"));
    let mut b = Builder {
        hosts: miswired.hosts,
        nodes: miswired.nodes.clone(),
        links: miswired.links.clone(),
    };
    b.add_link(from, to, LinkKind::Up);
    miswired.nodes = b.nodes;
    miswired.links = b.links;
    assert!(miswired.validate().is_err());

    let mut misrouted = good.clone();
    let tor_down = by_name(&good, "tor-0-down");
    misrouted.routes[tor_down.index()] = Route::Down {
        reach: HostRange { lo: 1, hi: 2 },
        hosts_per_port: 1,
    };
    let err = misrouted.validate().unwrap_err();
    assert!(err.contains("misses host-0"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_leaf_spine_validates_and_routes_every_pair(
        hosts in 1u32..=40,
        rack_size in 1u32..=8,
        spines in 1u32..=4,
        seed: u64,
    ) {
        let topo = Topology::leaf_spine(hosts, rack_size, spines).unwrap();
        prop_assert_eq!(topo.validate(), Ok(()));
        for src in 0..hosts {
            for dst in 0..hosts {
                assert_route_reaches(&topo, src, dst, flow_hash(seed, src, dst));
            }
        }
    }

    #[test]
    fn small_fat_trees_validate_and_route_every_pair(
        k in prop::sample::select(vec![2u32, 4, 6]),
        seed: u64,
    ) {
        let topo = Topology::fat_tree(k).unwrap();
        prop_assert_eq!(topo.validate(), Ok(()));
        for src in 0..topo.hosts() {
            for dst in 0..topo.hosts() {
                assert_route_reaches(&topo, src, dst, flow_hash(seed, src, dst));
            }
        }
    }
}

#[test]
fn any_tree_is_a_graph_with_split_halves_and_errors_name_what_is_not_a_tree() {
    // A root (2) with a process of its own over two switches of unequal racks.
    let sw = |parent: Option<usize>, hosts: &[u32]| TreeSwitch {
        parent,
        hosts: hosts.to_vec(),
    };
    let (topo, links) = Topology::tree(
        5,
        &[sw(Some(2), &[0, 1, 3]), sw(Some(2), &[2]), sw(None, &[4])],
    )
    .unwrap();
    assert_eq!(topo.hosts(), 5);
    assert_eq!(links.nodes[2].len(), 1, "the root is one node");
    assert_eq!(
        links.up_inputs[2].len(),
        3,
        "its process, then its two children"
    );
    assert_eq!(links.down_inputs[0].len(), 2, "loopback, then the parent");
    assert_eq!(topo.link(links.up_inputs[0][2]).from, topo.host_node(3));
    assert_eq!(
        topo.route(topo.host_node(0), 1, 0),
        None,
        "no routing tables"
    );
    for h in 0..5 {
        assert_eq!(topo.link(topo.uplink(h)).kind, LinkKind::HostUp);
        assert_eq!(topo.link(topo.downlink(h)).kind, LinkKind::HostDown);
    }
    let err = |s: &[TreeSwitch]| Topology::tree(3, s).unwrap_err().to_string();
    assert!(err(&[sw(None, &[0, 1, 2]), sw(None, &[])]).contains("2 roots"));
    assert!(err(&[sw(None, &[0, 1])]).contains("host 2 attached nowhere"));
    assert!(err(&[sw(None, &[0, 1, 2, 1])]).contains("host 1 attached twice"));
    assert!(err(&[sw(None, &[0, 1, 2]), sw(Some(2), &[]), sw(Some(1), &[])]).contains("cycle"));
}
