use super::*;
use crate::cluster::LocalLayout;
use onepipe_proto::aggregator::Half;
use onepipe_proto::failure::{CtrlMsg, Mgmt, MgmtDest};
use onepipe_proto::ids::NodeId;
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::Timestamp;
use onepipe_proto::wire::{Beacon, Packet};

fn cluster() -> Cluster {
    Cluster::generate(&LocalLayout {
        hosts: 4,
        ..LocalLayout::default()
    })
    .unwrap()
}

#[test]
fn a_tor_has_its_processes_then_its_parent_as_peers() {
    let c = cluster();
    let tor = Placement::of(&c, "tor-1").unwrap();
    assert_eq!(
        tor.peers(),
        [
            Peer::Process(2),
            Peer::Process(3),
            Peer::Parent("spine-0".into())
        ]
    );
    assert_eq!(tor.process_port(3), Some(PortId(1)));
    assert_eq!(tor.process_port(0), None);
    let spine = Placement::of(&c, "spine-0").unwrap();
    assert_eq!(
        spine.peers(),
        [Peer::Child("tor-0".into()), Peer::Child("tor-1".into())]
    );
    assert!(Placement::of(&c, "tor-9").is_err());
}

fn beacon(b: u64) -> Packet {
    Packet::Beacon(Beacon {
        from: NodeId(0),
        barrier: Timestamp::new(b),
        commit: Timestamp::new(b),
        demand: false,
    })
}

/// §5.2 Detect and Resume on a split aggregator: a silent process and a silent parent are
/// reported as the controller's graph links, by the graph nodes they enter, and Resume
/// removes each from the right half's commit minimum.
#[test]
fn silent_inputs_are_reported_on_the_aggregators_ports_and_resume_removes_them_5_2() {
    let mut c = cluster();
    c.link_timeout_ns = 5_000_000; // 5 beacon intervals
    let mut tor = Placement::of(&c, "tor-1").unwrap().role(&c, Instant(0));
    let mut reported = Vec::new();
    for ms in 1..=20u64 {
        let now = Instant(ms * 1_000_000);
        // p2 (port 0) keeps beaconing; p3 (port 1) stops after 1 ms; the spine (port 2)
        // stops after 8 ms. (A link that never spoke is not timed out: it may be late to
        // start, §4.2.)
        let mut inputs = vec![PortId(0)];
        if ms <= 1 {
            inputs.push(PortId(1));
        }
        if ms <= 8 {
            inputs.push(PortId(2));
        }
        for port in inputs {
            tor.handle(
                now,
                Input::Packet {
                    port,
                    packet: beacon(ms * 1_000),
                },
            );
        }
        while let Some(t) = tor.poll_timeout().filter(|&t| t <= now) {
            tor.handle(t, Input::Timeout);
        }
        while let Some(o) = tor.poll_output() {
            if let Output::Mgmt {
                to: MgmtDest::Controller,
                msg: Mgmt::Ctrl(CtrlMsg::LinkDown { reporter, link, .. }),
            } = o
            {
                reported.push((reporter, link));
            }
        }
    }
    let live = c.graph().unwrap();
    let index = c.aggregator_index("tor-1").unwrap();
    let p3 = live.input_link(index, Half::Up, PortId(1)).unwrap();
    let parent = live.input_link(index, Half::Down, PortId(1)).unwrap();
    let head = |l| live.link_head(l).unwrap();
    assert_eq!(
        reported,
        [(head(p3), p3), (head(parent), parent)],
        "p3, then the parent"
    );
    assert_ne!(head(p3), head(parent), "the up half, then the down half");
    assert_eq!(tor.input_half(PortId(1)), Some((Half::Up, PortId(1))));
    assert_eq!(tor.input_half(PortId(2)), Some((Half::Down, PortId(1))));
    assert_eq!(tor.input_half(PortId(3)), None);
    let resume = CtrlMsg::Resume {
        round: 1,
        dead_links: vec![p3, parent],
    };
    tor.handle(Instant(21_000_000), Input::Mgmt(Mgmt::Ctrl(resume)));
    assert_eq!(tor.commit_inputs_removed(), 2);
}
