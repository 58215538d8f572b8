//! Test faults of the live drivers: a filter on the packets a driver feeds its role, outside
//! the role.
//!
//! [`FaultFilter`] holds an aggregator's test faults — the simulator's `--cut host-N` and
//! `--blackhole A>B`, which `onepipe up --cut` and `--blackhole` set on a running cluster — and
//! what they dropped. [`Filtered`] puts a role behind one: the driver drives the pair as one
//! [`Node`], and every packet passes the filter before the role sees it, as a packet dropped on
//! the wire never reaches the next hop. The role stays the one that ships; the faults are
//! the driver's, as the simulator's are (docs/STYLE.md: faults live in the driver, not in the
//! protocol).
//!
//! What it is not: an adversary. A fault names processes attached to this aggregator (its
//! first hop) and drops or rewrites only what they send; a packet in another's name is the
//! role's to refuse (reverse-path filtering).

use onepipe_proto::ids::{NodeId, PortId, ProcId};
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::Instant;
use onepipe_proto::wire::{Beacon, Packet};

/// The test faults of one aggregator and their counters. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct FaultFilter {
    /// The aggregator's name, for refusals.
    name: String,
    /// The process attached at each port, if one is.
    attached: Vec<Option<ProcId>>,
    /// (A, B) pairs whose packets from A to B are black-holed ([`FaultFilter::blackhole`]).
    blackholes: Vec<(ProcId, ProcId)>,
    /// Packets black-holed.
    blackholed: u64,
    /// Processes whose uplink into this aggregator is cut ([`FaultFilter::cut`]).
    cuts: Vec<ProcId>,
    /// Packets dropped at a cut uplink.
    cut_dropped: u64,
}

impl FaultFilter {
    /// No faults yet, for aggregator `name` whose port `i` has process `attached[i]` at its
    /// far end (`None`: another aggregator).
    pub fn new(name: &str, attached: Vec<Option<ProcId>>) -> FaultFilter {
        FaultFilter {
            name: name.to_string(),
            attached,
            ..FaultFilter::default()
        }
    }

    /// The port process `a` is attached at.
    fn port_of(&self, a: ProcId) -> Result<usize, String> {
        self.attached
            .iter()
            .position(|&p| p == Some(a))
            .ok_or_else(|| format!("p{} is not attached to {}", a.0, self.name))
    }

    /// Test fault (the simulator's `--blackhole A>B`, to show §5.2 controller forwarding):
    /// from now on, of what process `a` sends through this aggregator — it must be attached
    /// here, its first hop — drop the data, ACKs and NAKs for process `b`. A data packet's
    /// barriers go on as a beacon, so no link falls silent and no failure is detected: only
    /// `a`'s reliable retransmissions, and then the controller's forwarding, reach `b`.
    ///
    /// # Errors
    /// `a` is not attached to this aggregator.
    pub fn blackhole(&mut self, a: ProcId, b: ProcId) -> Result<(), String> {
        self.port_of(a)?;
        if !self.blackholes.contains(&(a, b)) {
            self.blackholes.push((a, b));
        }
        Ok(())
    }

    /// Test fault (the simulator's `--cut host-N`, one direction): from now on every packet
    /// process `a` sends arrives nowhere — its uplink into this aggregator is cut, its downlink
    /// is not. The input falls silent: after the link timeout the aggregator reports it (§5.2
    /// Detect) and the controller declares `a` failed; meanwhile `a`'s reliable messages time
    /// out and, with `forward_after`, go by the controller.
    ///
    /// # Errors
    /// `a` is not attached to this aggregator.
    pub fn cut(&mut self, a: ProcId) -> Result<(), String> {
        self.port_of(a)?;
        if !self.cuts.contains(&a) {
            self.cuts.push(a);
        }
        Ok(())
    }

    /// Packets dropped at a cut uplink so far ([`FaultFilter::cut`]).
    pub fn cut_dropped(&self) -> u64 {
        self.cut_dropped
    }

    /// Packets black-holed so far ([`FaultFilter::blackhole`]).
    pub fn blackholed(&self) -> u64 {
        self.blackholed
    }

    /// What of `packet`, arrived on `port`, goes on to the role: itself, the beacon that takes
    /// a black-holed data packet's place, or nothing.
    pub fn pass(&mut self, port: PortId, packet: Packet) -> Option<Packet> {
        let from = self.attached.get(port.index()).copied().flatten();
        if from.is_some_and(|a| self.cuts.contains(&a)) {
            self.cut_dropped += 1;
            return None;
        }
        let Some((src, dst)) = packet.endpoints() else {
            return Some(packet);
        };
        if from != Some(src) || !self.blackholes.contains(&(src, dst)) {
            return Some(packet);
        }
        self.blackholed += 1;
        match packet {
            Packet::Data(d) => match (d.header.barrier(), d.header.commit()) {
                (Some(barrier), Some(commit)) => Some(Packet::Beacon(Beacon {
                    from: NodeId(src.0),
                    barrier,
                    commit,
                    demand: false,
                })),
                _ => None,
            },
            _ => None,
        }
    }
}

/// A role behind a [`FaultFilter`]: driven as one [`Node`], every packet passes the filter
/// before the role sees it.
#[derive(Debug)]
pub struct Filtered<N> {
    /// The faults.
    pub filter: FaultFilter,
    /// The role.
    pub role: N,
}

impl<N: Node<Packet = Packet>> Node for Filtered<N> {
    type Packet = Packet;
    type Event = N::Event;
    type Mgmt = N::Mgmt;

    fn handle(&mut self, now: Instant, input: Input<Packet, N::Mgmt>) {
        let input = match input {
            Input::Packet { port, packet } => match self.filter.pass(port, packet) {
                Some(packet) => Input::Packet { port, packet },
                None => return,
            },
            input => input,
        };
        self.role.handle(now, input);
    }

    fn poll_output(&mut self) -> Option<Output<Packet, N::Event, N::Mgmt>> {
        self.role.poll_output()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.role.poll_timeout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use onepipe_proto::ids::Psn;
    use onepipe_proto::time::Timestamp;
    use onepipe_proto::wire::{flags, DataHeader, DataPacket};

    fn data(src: u32, dst: u32) -> Packet {
        Packet::Data(DataPacket {
            header: DataHeader {
                flags: flags::END_OF_MESSAGE | flags::BARRIER_VALID | flags::COMMIT_VALID,
                frag: 0,
                ts: Timestamp::new(5),
                barrier: Timestamp::new(6),
                commit: Timestamp::new(4),
                psn: Psn(1),
                src: ProcId(src),
                dst: ProcId(dst),
            },
            payload: Bytes::from_static(b"x"),
        })
    }

    /// p0 on port 0, p1 on port 1, an aggregator on port 2.
    fn filter() -> FaultFilter {
        FaultFilter::new("tor-0", vec![Some(ProcId(0)), Some(ProcId(1)), None])
    }

    #[test]
    fn faults_name_attached_processes_only() {
        let mut f = filter();
        assert_eq!(
            f.cut(ProcId(2)),
            Err("p2 is not attached to tor-0".to_string())
        );
        assert!(f.blackhole(ProcId(3), ProcId(0)).is_err());
        assert_eq!(f.pass(PortId(0), data(0, 1)), Some(data(0, 1)));
        assert_eq!((f.cut_dropped(), f.blackholed()), (0, 0));
    }

    #[test]
    fn a_cut_uplink_drops_everything_its_process_sends() {
        let mut f = filter();
        f.cut(ProcId(1)).unwrap();
        assert_eq!(f.pass(PortId(1), data(1, 0)), None);
        assert_eq!(f.pass(PortId(0), data(0, 1)), Some(data(0, 1)));
        assert_eq!(f.pass(PortId(2), data(2, 1)), Some(data(2, 1)));
        assert_eq!(f.cut_dropped(), 1);
    }

    /// A black-holed data packet's barriers go on as a beacon from its sender, so the link does
    /// not fall silent; other pairs, and the same pair from elsewhere, pass.
    #[test]
    fn a_black_hole_keeps_a_data_packets_barriers_as_a_beacon() {
        let mut f = filter();
        f.blackhole(ProcId(0), ProcId(1)).unwrap();
        let beacon = Packet::Beacon(Beacon {
            from: NodeId(0),
            barrier: Timestamp::new(6),
            commit: Timestamp::new(4),
            demand: false,
        });
        assert_eq!(f.pass(PortId(0), data(0, 1)), Some(beacon));
        assert_eq!(f.pass(PortId(0), data(0, 3)), Some(data(0, 3)));
        assert_eq!(f.pass(PortId(2), data(0, 1)), Some(data(0, 1)));
        assert_eq!(f.blackholed(), 1);
    }
}
