//! The live cluster's side of reliable failure handling (1Pipe §5.2): the routing graph the
//! controller reasons about, the ids the members report in, and the control messages on the control connection.
//!
//! The procedure itself — Detect, Determine, Broadcast, Discard, Recall, Callback, Resume — is
//! `onepipe_proto::failure` (the controller) and `onepipe_proto::host::Host` (the
//! hosts), unchanged from the simulator. This module gives it what the live runtime must:
//!
//! * [`LiveTopology`] ([`Cluster::graph`]): the cluster's tree of aggregators as a
//!   `onepipe_proto::topology::Topology` routing graph (§3.1, Fig. 3), with each process a host
//!   of its own, and the map between the graph's links and the ports the aggregators and
//!   endpoints report a silent input on — built by `onepipe_proto::aggregator::tree`, the
//!   builder the aggregators' roles come from. Every tree a cluster file can describe has one
//!   (`Topology::tree`: any depth, processes on any aggregator, racks of any size); a file that
//!   is not one tree is refused when it is parsed.
//! * [`WireCtrl`] and [`WireRelay`]: `onepipe_proto::failure::{CtrlMsg, RelayMsg}` as they
//!   travel on the control connection — the bytes of `onepipe_proto::failure::codec` (the
//!   encoding the controller store logs too), as a JSON string of lowercase hex. A `WireCtrl`
//!   is decoded as its line is parsed (a line whose message does not decode is not a control
//!   message), a `WireRelay` by [`WireRelay::into_relay`]; both refuse what the codec refuses
//!   (truncation, trailing bytes, unknown tags, timestamps wider than 48 bits, oversized or
//!   malformed forwards). Whether the ids of a decoded message make sense is checked by whoever
//!   receives it (the controller refuses a member speaking for another's nodes, the proto
//!   controller drops a report that is not the reporter's input, hosts ignore processes they do
//!   not know).
//!
//! The ids: process `p` is host `NodeId(p)` both in the graph and in its endpoint's
//! `HostConfig`; the aggregators report the graph's `NodeId`s and `LinkId`s (not the node ids
//! their halves use for beacons), which they compute from the same cluster file.

use crate::cluster::Cluster;
use core::fmt;
use onepipe_proto::aggregator::tree::TreeGraph;
use onepipe_proto::failure::{codec, CtrlMsg, RelayMsg};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The routing graph of a live cluster and its id maps ([`Cluster::graph`]): the graph of the
/// one builder of an aggregator tree's roles. See the module docs.
pub type LiveTopology = TreeGraph;

impl Cluster {
    /// The routing graph of the cluster's tree ([`Cluster::tree`]), or why it has none (a
    /// shape the module docs do not list).
    ///
    /// # Errors
    /// The cluster's shape cannot be expressed (the message says how it differs).
    pub fn graph(&self) -> Result<LiveTopology, String> {
        self.tree().graph().map_err(|e| e.to_string())
    }
}

/// A §5.2 control message ([`CtrlMsg`]) on the control connection: its
/// [`onepipe_proto::failure::codec`] bytes as one JSON string of lowercase hex. See the module
/// docs.
#[derive(Clone, PartialEq, Eq)]
pub struct WireCtrl(CtrlMsg);

/// A §5.2 relay ([`RelayMsg`]) on the control connection: its
/// [`onepipe_proto::failure::codec`] bytes as one JSON string of lowercase hex, decoded by
/// [`WireRelay::into_relay`]. See the module docs.
#[derive(Clone, PartialEq, Eq)]
pub struct WireRelay(Vec<u8>);

impl From<&CtrlMsg> for WireCtrl {
    fn from(m: &CtrlMsg) -> WireCtrl {
        WireCtrl(m.clone())
    }
}

impl From<WireCtrl> for CtrlMsg {
    fn from(m: WireCtrl) -> CtrlMsg {
        m.0
    }
}

impl WireRelay {
    /// The wire form of `msg` (every relay has one).
    pub fn of(msg: &RelayMsg) -> WireRelay {
        WireRelay(codec::encode_relay(msg))
    }

    /// The relay it carries.
    ///
    /// # Errors
    /// The bytes are not exactly one relay's encoding: truncated, trailing bytes, an unknown
    /// tag, a timestamp wider than 48 bits, a forward of more than
    /// [`codec::FORWARD_PACKETS_MAX`] packets or one that is not exactly one well-formed
    /// packet (the message says which).
    pub fn into_relay(self) -> Result<RelayMsg, String> {
        codec::decode_relay(&self.0).map_err(|e| e.to_string())
    }
}

impl fmt::Debug for WireCtrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl fmt::Debug for WireRelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WireRelay({})", hex(&self.0))
    }
}

impl Serialize for WireCtrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex(&codec::encode_ctrl(&self.0)))
    }
}

impl<'de> Deserialize<'de> for WireCtrl {
    /// Decoded as the line is parsed: a line whose message is not exactly one message's
    /// encoding is not a control message.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WireCtrl, D::Error> {
        let bytes = unhex(&String::deserialize(d)?)
            .ok_or_else(|| D::Error::custom("a control message that is not hex"))?;
        codec::decode_ctrl(&bytes)
            .map(WireCtrl)
            .map_err(|e| D::Error::custom(format!("a malformed control message: {e}")))
    }
}

impl Serialize for WireRelay {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex(&self.0))
    }
}

impl<'de> Deserialize<'de> for WireRelay {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<WireRelay, D::Error> {
        unhex(&String::deserialize(d)?)
            .map(WireRelay)
            .ok_or_else(|| D::Error::custom("a relay that is not hex"))
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Lowercase hex only: the encoding is canonical, so one message has one line.
fn unhex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let s = s.as_bytes();
    if s.len() % 2 == 1 {
        return None;
    }
    s.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::LocalLayout;
    use onepipe_proto::aggregator::Half as AggHalf;
    use onepipe_proto::ids::{LinkId, NodeId, PortId, ProcId, Psn};
    use onepipe_proto::time::Timestamp;

    fn generated(hosts: u32, pph: u32, layers: u8) -> Cluster {
        Cluster::generate(&LocalLayout {
            hosts,
            procs_per_host: pph,
            layers,
            ..LocalLayout::default()
        })
        .unwrap()
    }

    #[test]
    fn a_two_layer_cluster_is_a_leaf_spine_whose_links_match_the_aggregators_ports_3_1() {
        let c = generated(4, 2, 2);
        let lt = c.graph().unwrap();
        let topo = lt.topology();
        assert_eq!(topo.hosts(), 8);
        let tor1 = c.aggregator_index("tor-1").unwrap();
        // tor-1's up half hears processes 4..8 on ports 0..4: their uplinks.
        for port in 0..4 {
            let l = lt.input_link(tor1, AggHalf::Up, PortId(port)).unwrap();
            assert_eq!(l, topo.uplink(4 + port));
            assert_eq!(lt.input_port(tor1, l), Some((AggHalf::Up, PortId(port))));
            assert_eq!(lt.aggregator_of(lt.link_head(l).unwrap()), Some(tor1));
        }
        // Its down half hears the loopback and the spine; every process's downlink leaves it.
        let from_spine = lt.input_link(tor1, AggHalf::Down, PortId(1)).unwrap();
        let spine = c.aggregator_index("spine-0").unwrap();
        assert_eq!(
            lt.aggregator_of(topo.link(from_spine).from),
            Some(spine),
            "port 1 of a down half is the parent"
        );
        assert_eq!(
            lt.aggregator_of(topo.link(topo.downlink(5)).from),
            Some(tor1)
        );
        // The spine's port 1 is tor-1's up half.
        let l = lt.input_link(spine, AggHalf::Up, PortId(1)).unwrap();
        assert_eq!(lt.aggregator_of(topo.link(l).from), Some(tor1));
        assert_eq!(lt.input_link(spine, AggHalf::Down, PortId(0)), None);
    }

    /// Every graph link enters exactly one (aggregator, half, port) or is a process's
    /// downlink, and each mapping names the aggregator the link enters.
    fn assert_maps_every_link(c: &Cluster, what: &str) {
        let lt = c.graph().unwrap();
        let topo = lt.topology();
        let mut seen = vec![0; topo.links().len()];
        for (a, spec) in c.aggregators.iter().enumerate() {
            let below = (c.attached(&spec.name).len() + c.children(&spec.name).len()) as u32;
            let mut ports: Vec<(AggHalf, u32)> = (0..below).map(|p| (AggHalf::Up, p)).collect();
            if spec.parent.is_some() {
                ports.extend([(AggHalf::Down, 0), (AggHalf::Down, 1)]);
            }
            for (half, port) in ports {
                let l = lt
                    .input_link(a, half, PortId(port))
                    .unwrap_or_else(|| panic!("{what}: {} {half:?} {port}", spec.name));
                assert_eq!(lt.aggregator_of(lt.link_head(l).unwrap()), Some(a));
                assert_eq!(lt.input_port(a, l), Some((half, PortId(port))));
                // Where it comes from, by the live port order: attached processes, children,
                // then (down half) the loopback and the parent.
                let from = topo.link(l).from;
                let attached = c.attached(&spec.name);
                let children = c.children(&spec.name);
                let expected = match (half, port as usize) {
                    (AggHalf::Up, i) if i < attached.len() => topo.host_node(attached[i]),
                    (AggHalf::Up, i) => {
                        let child = c.aggregator_index(&children[i - attached.len()].name);
                        lt.nodes_of(child.unwrap())[0]
                    }
                    (AggHalf::Down, 0) => lt.nodes_of(a)[0],
                    (AggHalf::Down, _) => {
                        let parent = c.aggregator_index(spec.parent.as_deref().unwrap());
                        *lt.nodes_of(parent.unwrap()).last().unwrap()
                    }
                };
                assert_eq!(from, expected, "{what}: {} {half:?} {port}", spec.name);
                seen[l.index()] += 1;
            }
        }
        for p in 0..c.procs() {
            seen[lt.downlink(p).unwrap().index()] += 1;
        }
        assert!(seen.iter().all(|&n| n == 1), "{what}: {seen:?}");
    }

    #[test]
    fn every_tree_maps_each_graph_link_to_exactly_one_input_3_1() {
        for (hosts, pph, layers) in [(3, 1, 1), (4, 2, 2), (5, 1, 2), (8, 2, 3), (11, 1, 3)] {
            let c = Cluster::generate(&LocalLayout {
                hosts,
                procs_per_host: pph,
                layers,
                ..LocalLayout::default()
            })
            .unwrap();
            assert_maps_every_link(&c, &format!("{hosts}x{pph}, {layers} layers"));
        }
        // Any tree a cluster file describes: a process on the root, racks of unequal size.
        let mut odd = generated(6, 1, 2);
        odd.processes[5].aggregator = "spine-0".into();
        odd.processes[1].aggregator = "tor-2".into();
        assert_maps_every_link(&odd, "odd");
        // Three layers: agg-1's down half hears the core on port 1, and tor-2 is its first child.
        let c = generated(8, 1, 3);
        let lt = c.graph().unwrap();
        let agg1 = c.aggregator_index("agg-1").unwrap();
        let core = c.aggregator_index("core-0").unwrap();
        let l = lt.input_link(agg1, AggHalf::Down, PortId(1)).unwrap();
        assert_eq!(lt.aggregator_of(lt.topology().link(l).from), Some(core));
        let l = lt.input_link(agg1, AggHalf::Up, PortId(0)).unwrap();
        assert_eq!(
            lt.aggregator_of(lt.topology().link(l).from),
            c.aggregator_index("tor-2")
        );
    }

    #[test]
    fn one_aggregator_is_one_node_for_all_its_processes() {
        let c = generated(3, 1, 1);
        let lt = c.graph().unwrap();
        assert_eq!(lt.topology().hosts(), 3);
        assert_eq!(
            lt.input_link(0, AggHalf::Up, PortId(2)),
            Some(lt.topology().uplink(2))
        );
        // A short last rack is a tree like any other.
        assert!(generated(5, 1, 2).graph().is_ok());
    }

    #[test]
    fn a_forward_survives_json_and_bad_packets_are_errors_not_panics() {
        use onepipe_proto::wire::{flags, DataHeader, DataPacket, Packet};
        let data = Packet::Data(DataPacket {
            header: DataHeader {
                flags: flags::END_OF_MESSAGE,
                frag: 0,
                ts: Timestamp::new(5),
                barrier: Timestamp::new(4),
                commit: Timestamp::new(3),
                psn: Psn(7),
                src: ProcId(1),
                dst: ProcId(2),
            },
            payload: bytes::Bytes::from_static(b"hello"),
        });
        let msg = RelayMsg::Forward {
            from: NodeId(1),
            packets: vec![data.clone(), data],
        };
        let json = serde_json::to_string(&WireRelay::of(&msg)).unwrap();
        let back: WireRelay = serde_json::from_str(&json).unwrap();
        assert_eq!(back.into_relay().unwrap(), msg);
        let good = codec::encode_relay(&msg);
        let bad = |bytes: Vec<u8>| WireRelay(bytes).into_relay().unwrap_err();
        // tag, from, count; the first packet's length, then its opcode.
        let mut op = good.clone();
        op[13] = 0xee;
        assert!(bad(op).contains("packet 0"));
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(bad(trailing).contains("after the message"));
        assert!(bad(good[..20].to_vec()).contains("truncated"));
        for junk in [r#""zz""#, r#""abc""#, r#""0A""#, "5"] {
            assert!(serde_json::from_str::<WireRelay>(junk).is_err(), "{junk}");
        }
        let many = RelayMsg::Forward {
            from: NodeId(1),
            packets: vec![
                Packet::Beacon(onepipe_proto::wire::Beacon {
                    from: NodeId(0),
                    barrier: Timestamp::new(0),
                    commit: Timestamp::new(0),
                    demand: false,
                });
                codec::FORWARD_PACKETS_MAX + 1
            ],
        };
        assert!(WireRelay::of(&many)
            .into_relay()
            .unwrap_err()
            .contains("at most"));
    }

    #[test]
    fn every_recovery_relay_survives_json_both_ways_5_2() {
        let t = Timestamp::new;
        let msgs = [
            RelayMsg::Failed { ts: t(9) },
            RelayMsg::Recalled {
                groups: vec![(ProcId(1), t(5)), (ProcId(2), t(6))],
            },
            RelayMsg::RecoverRequest { host: NodeId(3) },
            RelayMsg::Settle {
                failed: vec![(ProcId(3), t(7))],
                recalled: vec![(ProcId(1), t(5))],
            },
            RelayMsg::Rejoin { host: NodeId(3) },
            RelayMsg::Admit {
                link: LinkId(4),
                apply: true,
            },
            RelayMsg::Admitted {
                link: LinkId(4),
                alive: true,
                barrier: Some(t(11)),
                commit: None,
            },
            RelayMsg::Joined {
                procs: vec![ProcId(8)],
                floor: t(12),
                failed: vec![(ProcId(3), t(7))],
            },
            RelayMsg::PeerJoined {
                host: NodeId(3),
                procs: vec![ProcId(8)],
                floor: t(12),
            },
        ];
        for m in msgs {
            let json = serde_json::to_string(&WireRelay::of(&m)).unwrap();
            let back: WireRelay = serde_json::from_str(&json).unwrap();
            assert_eq!(back.into_relay().unwrap(), m, "{json}");
        }
    }

    #[test]
    fn control_messages_survive_json_both_ways() {
        let msgs = [
            CtrlMsg::LinkDown {
                reporter: NodeId(9),
                link: LinkId(3),
                last_commit: Some(Timestamp::new(77)),
            },
            CtrlMsg::Failure {
                round: 2,
                failed: vec![(ProcId(3), Timestamp::new(1_000))],
                correct: vec![NodeId(0), NodeId(4)],
            },
            CtrlMsg::Recall {
                round: 2,
                from: NodeId(1),
                groups: vec![(ProcId(1), Timestamp::new(5))],
                unacked: vec![(ProcId(1), ProcId(3), Psn(7), 2)],
            },
            CtrlMsg::RecallAck {
                round: 2,
                from: NodeId(4),
            },
            CtrlMsg::Completed {
                round: 2,
                host: NodeId(4),
            },
            CtrlMsg::Resume {
                round: 2,
                dead_links: vec![LinkId(3)],
            },
            CtrlMsg::Isolate { link: LinkId(4) },
            CtrlMsg::Departed {
                host: NodeId(2),
                last: Some(Timestamp::new(12)),
            },
            CtrlMsg::Depart { link: LinkId(5) },
            CtrlMsg::CallbackTaken {
                round: 2,
                host: NodeId(1),
            },
        ];
        for m in msgs.clone() {
            let json = serde_json::to_string(&WireCtrl::from(&m)).unwrap();
            let back: WireCtrl = serde_json::from_str(&json).unwrap();
            assert_eq!(CtrlMsg::from(back), m, "{json}");
        }
        // Not hex, a truncated message, a trailing byte, a timestamp wider than 48 bits.
        let link_down = hex(&codec::encode_ctrl(&msgs[0]));
        let wide = format!("{}ff\"", &link_down[..link_down.len() - 2]);
        for junk in [
            r#""link_down""#.to_string(),
            format!("\"{}\"", &link_down[..10]),
            format!("\"{link_down}00\""),
            format!("\"{wide}"),
        ] {
            assert!(serde_json::from_str::<WireCtrl>(&junk).is_err(), "{junk}");
        }
    }
}
