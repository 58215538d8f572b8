//! Scripted scenario tests of the 1Pipe roles (STYLE.md "Tests, in layers", layer 3).
//!
//! A tiny harness sits at the top: packet builders, a `drain` that empties a node's outputs, and a
//! `Rack` — two or three [`Host`]s wired to one [`Switch`] through links of equal latency (so every
//! link is FIFO, as §4.1 assumes), with per-host clock offsets to model skew. Most scenarios
//! hand-feed packets to a single node; the end-to-end ones drive a `Rack` event by event.
//!
//! Each test is named after what it proves and the paper section it checks (Li et al., "1Pipe:
//! Scalable Total Order Communication in Data Center Networks", SIGCOMM 2021). A test that found
//! a bug is kept, marked `#[ignore = "BUG: ..."]`.
//!
//! What this is not: a simulator. Loss, reordering by the network and failures are injected by
//! hand where a scenario needs them; random configurations and faults live in `onepipe-sim`.

use bytes::Bytes;
use onepipe_proto::failure::{CtrlMsg, Mgmt, MgmtDest, RelayMsg};
use onepipe_proto::host::{
    Delivery, Host, HostConfig, HostEvent, ACK_DELAY_BE_RTO_DIVISOR_MIN, UPLINK,
};
use onepipe_proto::switch::{Router, Switch, SwitchConfig, SwitchMode};
use onepipe_proto::time::{Barrier, TIMESTAMP_MASK};
use onepipe_proto::wire::{
    flags, Ack, AckBatch, Beacon, DataHeader, DataPacket, Nak, NakReason, Packet, ACK_BATCH_LEN_MAX,
};
use onepipe_proto::{
    Input, Instant, LinkId, Node, NodeId, Notice, Output, PortId, ProcId, Psn, Timestamp,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Harness: builders.
// ---------------------------------------------------------------------------------------------

/// Beacon interval used throughout (1 µs keeps the numbers readable).
const INTERVAL_NS: u64 = 1_000;
/// The switch's node id in hand-fed scenarios.
const SWITCH_NODE: NodeId = NodeId(100);

fn p(i: u32) -> ProcId {
    ProcId(i)
}

fn t(ns: u64) -> Timestamp {
    Timestamp::new(ns)
}

fn at(ns: u64) -> Instant {
    Instant(ns)
}

fn host_config(node: u32, procs: &[u32], senders_max: u32) -> HostConfig {
    let procs = procs.iter().map(|&i| ProcId(i)).collect();
    let mut cfg = HostConfig::new(NodeId(node), procs, senders_max);
    cfg.beacon_interval_ns = INTERVAL_NS;
    cfg
}

/// Failure detection (link timeouts, keep-alive beacons) is off here, so beacon scenarios see
/// exactly the beacons they reason about; the §4.2 failure scenarios turn it on.
fn switch_config(mode: SwitchMode, inputs: usize, outputs: usize) -> SwitchConfig {
    let mut cfg = SwitchConfig::new(SWITCH_NODE, mode, inputs, outputs);
    cfg.beacon_interval_ns = INTERVAL_NS;
    cfg.link_timeout_intervals = 0;
    cfg
}

/// One fragment with full control over its header; the barrier field equals the timestamp, as a
/// sender initialises it (§4.1).
fn fragment(src: u32, dst: u32, ts: u64, psn: u32, frag: u16, fl: u8, payload: &[u8]) -> Packet {
    Packet::Data(DataPacket {
        header: DataHeader {
            flags: fl,
            frag,
            ts: t(ts),
            barrier: t(ts),
            commit: t(ts),
            psn: Psn(psn),
            src: p(src),
            dst: p(dst),
        },
        payload: Bytes::copy_from_slice(payload),
    })
}

/// A whole single-fragment message whose barrier field is not valid, so that feeding it to a host
/// does not move the host's barrier: only beacons do, in the scenarios that use this.
fn message(src: u32, dst: u32, ts: u64, psn: u32, payload: &[u8]) -> Packet {
    fragment(src, dst, ts, psn, 0, flags::END_OF_MESSAGE, payload)
}

fn beacon(from: u32, barrier: u64) -> Packet {
    Packet::Beacon(Beacon {
        from: NodeId(from),
        barrier: t(barrier),
        commit: t(barrier),
        demand: false,
    })
}

fn nak(reason: NakReason, from: u32, to: u32, psn: u32, ts: u64) -> Packet {
    Packet::Nak(Nak {
        reason,
        from: p(from),
        to: p(to),
        psn: Psn(psn),
        ts: t(ts),
        reliable: false,
        seq: 0,
    })
}

fn bytes(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// A payload of `len` bytes whose content depends on its position, so reassembly mistakes show.
fn patterned(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

// ---------------------------------------------------------------------------------------------
// Harness: driving one node by hand.
// ---------------------------------------------------------------------------------------------

type Out<N> = Output<<N as Node>::Packet, <N as Node>::Event, <N as Node>::Mgmt>;

/// Drains every output of the last mutation (the `node` call order: mutate, drain, poll_timeout).
fn drain<N: Node>(node: &mut N) -> Vec<Out<N>> {
    std::iter::from_fn(|| node.poll_output()).collect()
}

fn feed<N: Node<Packet = Packet>>(
    node: &mut N,
    now: u64,
    port: PortId,
    packet: Packet,
) -> Vec<Out<N>> {
    node.handle(at(now), Input::Packet { port, packet });
    drain(node)
}

fn tick<N: Node>(node: &mut N, now: u64) -> Vec<Out<N>> {
    node.handle(at(now), Input::Timeout);
    drain(node)
}

fn sent<E, M>(outputs: &[Output<Packet, E, M>]) -> Vec<(PortId, Packet)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Send { port, packet } => Some((*port, packet.clone())),
            _ => None,
        })
        .collect()
}

/// Hands `host` a §5.2 control message at local time `now` (ns) and drains it.
fn control(host: &mut Host, now: u64, msg: CtrlMsg) -> Vec<Out<Host>> {
    host.handle(at(now), Input::Mgmt(Mgmt::Ctrl(msg)));
    drain(host)
}

/// Hands `host` a §5.2 relay at local time `now` (ns) and drains it.
fn relay(host: &mut Host, now: u64, msg: RelayMsg) -> Vec<Out<Host>> {
    host.handle(at(now), Input::Mgmt(Mgmt::Relay(msg)));
    drain(host)
}

/// The relays among `outputs`, with their addressees.
fn relays(outputs: &[Out<Host>]) -> Vec<(MgmtDest, RelayMsg)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Mgmt {
                to,
                msg: Mgmt::Relay(m),
            } => Some((*to, m.clone())),
            _ => None,
        })
        .collect()
}

fn data_of(packets: &[(PortId, Packet)]) -> Vec<DataPacket> {
    packets
        .iter()
        .filter_map(|(_, pk)| match pk {
            Packet::Data(d) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

/// The beacons among `outputs`, as (port, barrier).
fn beacons_sent<E, M>(outputs: &[Output<Packet, E, M>]) -> Vec<(PortId, u64)> {
    sent(outputs)
        .into_iter()
        .filter_map(|(port, pk)| match pk {
            Packet::Beacon(b) => Some((port, b.barrier.raw())),
            _ => None,
        })
        .collect()
}

fn deliveries(outputs: &[Out<Host>]) -> Vec<Delivery> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Event(HostEvent::Deliver(d)) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

fn failures(outputs: &[Out<Host>]) -> Vec<HostEvent> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Event(e @ HostEvent::SendFailed { .. }) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// (ts, src, payload) of each delivery, the fields a total-order assertion compares.
fn summary(ds: &[Delivery]) -> Vec<(u64, u32, Bytes)> {
    ds.iter()
        .map(|d| (d.ts.raw(), d.src.0, d.payload.clone()))
        .collect()
}

/// Routes process `p` to output port `port_of[p]`; anything else is unroutable.
#[derive(Debug)]
struct ProcRouter {
    port_of: Vec<PortId>,
}

impl Router for ProcRouter {
    fn route(&self, _at: NodeId, _src: ProcId, dst: ProcId) -> Option<PortId> {
        self.port_of.get(dst.index()).copied()
    }
}

/// A router sending process `i` to port `i`.
fn identity_router(procs: u32) -> Arc<dyn Router> {
    Arc::new(ProcRouter {
        port_of: (0..procs).map(PortId).collect(),
    })
}

// ---------------------------------------------------------------------------------------------
// Harness: a rack of hosts under one switch.
// ---------------------------------------------------------------------------------------------

/// Where an in-flight packet is going.
#[derive(Debug, Clone, Copy)]
enum Dest {
    Switch,
    Host(usize),
}

/// A packet on a link: (arrival time, sequence) -> (destination, its input port, packet).
type InFlight = BTreeMap<(u64, u64), (Dest, PortId, Packet)>;

/// Hosts `0..n` under one switch: host `i`'s uplink is switch input `i`, switch output `i` is
/// host `i`'s downlink. Every link has the same latency, so every link is FIFO. Host `i`'s local
/// clock reads the global time plus `offsets_ns[i]`; the switch's reads the global time.
struct Rack {
    now: u64,
    hosts: Vec<Host>,
    offsets_ns: Vec<u64>,
    switch: Switch,
    latency_ns: u64,
    in_flight: InFlight,
    seq: u64,
    /// Per host: deliveries, in the order they were reported.
    delivered: Vec<Vec<Delivery>>,
    /// Per host: send-failed notifications.
    failed: Vec<Vec<HostEvent>>,
    /// Every packet a host put on its uplink: (global time, host, packet).
    uplink: Vec<(u64, usize, Packet)>,
}

/// Events one `run_until` may process before the harness calls it a livelock.
const RACK_STEPS_MAX: usize = 1_000_000;

impl Rack {
    /// A rack with the processes of `layout[i]` on host `i`. Chip mode stamps barriers on data;
    /// the CPU modes need hosts that beacon every interval and leave data barriers invalid
    /// (`HostConfig::beacon_always`, `barrier_on_data` docs).
    fn new(layout: &[&[u32]], start_ns: u64, offsets_ns: &[u64], mode: SwitchMode) -> Rack {
        assert_eq!(layout.len(), offsets_ns.len());
        let procs: u32 = layout.iter().map(|h| h.len() as u32).sum();
        let mut port_of = vec![PortId(u32::MAX); procs as usize];
        let hosts = layout
            .iter()
            .enumerate()
            .map(|(i, ps)| {
                for &q in ps.iter() {
                    port_of[q as usize] = PortId(i as u32);
                }
                let mut cfg = host_config(i as u32, ps, procs);
                if !mode.rewrites_data() {
                    cfg.beacon_always = true;
                    cfg.barrier_on_data = false;
                }
                Host::new(cfg, at(start_ns + offsets_ns[i]))
            })
            .collect();
        let mut scfg = switch_config(mode, layout.len(), layout.len());
        if !mode.rewrites_data() {
            scfg.beacon_delay_ns = 200;
        }
        let router: Arc<dyn Router> = Arc::new(ProcRouter { port_of });
        Rack {
            now: start_ns,
            hosts,
            offsets_ns: offsets_ns.to_vec(),
            switch: Switch::new(scfg, Some(router), at(start_ns)),
            latency_ns: 100,
            in_flight: BTreeMap::new(),
            seq: 0,
            delivered: vec![Vec::new(); layout.len()],
            failed: vec![Vec::new(); layout.len()],
            uplink: Vec::new(),
        }
    }

    fn local(&self, h: usize) -> Instant {
        at(self.now + self.offsets_ns[h])
    }

    /// Host `h`'s process `src` sends a scattering now; returns its timestamp.
    fn send(&mut self, h: usize, src: u32, msgs: &[(u32, Bytes)]) -> Timestamp {
        let scattering: Vec<(ProcId, Bytes)> =
            msgs.iter().map(|(d, m)| (p(*d), m.clone())).collect();
        let now = self.local(h);
        let ts = self.hosts[h]
            .send(now, p(src), &scattering)
            .expect("a valid scattering");
        self.drain_host(h);
        ts
    }

    fn schedule(&mut self, dest: Dest, port: PortId, packet: Packet) {
        self.seq += 1;
        self.in_flight
            .insert((self.now + self.latency_ns, self.seq), (dest, port, packet));
    }

    fn drain_host(&mut self, h: usize) {
        while let Some(o) = self.hosts[h].poll_output() {
            match o {
                Output::Send { port, packet } => {
                    assert_eq!(port, UPLINK, "a host has one port");
                    self.uplink.push((self.now, h, packet.clone()));
                    self.schedule(Dest::Switch, PortId(h as u32), packet);
                }
                Output::Event(HostEvent::Deliver(d)) => self.delivered[h].push(d),
                Output::Event(e) => self.failed[h].push(e),
                // No controller here: a silent uplink's report goes nowhere.
                Output::Mgmt { .. } => {}
            }
        }
    }

    fn drain_switch(&mut self) {
        while let Some(o) = self.switch.poll_output() {
            match o {
                Output::Send { port, packet } => {
                    self.schedule(Dest::Host(port.index()), UPLINK, packet)
                }
                Output::Mgmt { .. } => {}
            }
        }
    }

    /// The earliest global time a node's timer is due.
    fn next_timer(&self) -> Option<u64> {
        let hosts = self
            .hosts
            .iter()
            .zip(&self.offsets_ns)
            .filter_map(|(h, off)| h.poll_timeout().map(|d| d.as_nanos().saturating_sub(*off)));
        hosts
            .chain(self.switch.poll_timeout().map(Instant::as_nanos))
            .min()
    }

    /// Processes the next event (a packet arrival first when a timer is due at the same time) if
    /// it is due by `end`; returns false when nothing is.
    fn step(&mut self, end: u64) -> bool {
        let packet_at = self.in_flight.keys().next().map(|k| k.0);
        let Some(next) = [packet_at, self.next_timer()].into_iter().flatten().min() else {
            return false;
        };
        if next > end {
            return false;
        }
        self.now = self.now.max(next);
        if packet_at == Some(next) {
            let (_, (dest, port, packet)) = self.in_flight.pop_first().expect("peeked above");
            match dest {
                Dest::Switch => {
                    self.switch
                        .handle(at(self.now), Input::Packet { port, packet });
                    self.drain_switch();
                }
                Dest::Host(h) => {
                    let now = self.local(h);
                    self.hosts[h].handle(now, Input::Packet { port, packet });
                    self.drain_host(h);
                }
            }
            return true;
        }
        for h in 0..self.hosts.len() {
            let now = self.local(h);
            if self.hosts[h].poll_timeout().is_some_and(|d| d <= now) {
                self.hosts[h].handle(now, Input::Timeout);
                self.drain_host(h);
            }
        }
        if self
            .switch
            .poll_timeout()
            .is_some_and(|d| d <= at(self.now))
        {
            self.switch.handle(at(self.now), Input::Timeout);
            self.drain_switch();
        }
        true
    }

    /// Runs every event due by global time `end`, then sets the clock to `end`.
    fn run_until(&mut self, end: u64) {
        for _ in 0..RACK_STEPS_MAX {
            if !self.step(end) {
                self.now = self.now.max(end);
                return;
            }
        }
        panic!("the rack did not settle by {end}: livelock");
    }

    /// What process `dst` was delivered, in order.
    fn delivered_to(&self, dst: u32) -> Vec<Delivery> {
        self.delivered
            .iter()
            .flatten()
            .filter(|d| d.dst == p(dst))
            .cloned()
            .collect()
    }

    /// §4.1 on every delivery so far: released by a barrier above it, causal (`ts < now_ts`), and,
    /// per receiving process, strictly increasing in (timestamp, sender, PSN).
    fn assert_ordered_and_causal(&self) {
        for ds in &self.delivered {
            for d in ds {
                assert!(d.ts < d.barrier, "delivered at or above its barrier: {d:?}");
                assert!(
                    d.ts < d.now_ts,
                    "§4.1 causality: delivered ts not below the host's: {d:?}"
                );
            }
            // One total order per receiver and service (Table 1: two receive calls).
            let mut by_dst: BTreeMap<(ProcId, bool), Vec<&Delivery>> = BTreeMap::new();
            for d in ds {
                by_dst.entry((d.dst, d.reliable)).or_default().push(d);
            }
            for seq in by_dst.values() {
                for w in seq.windows(2) {
                    let a = (w[0].ts, w[0].src, w[0].psn);
                    let b = (w[1].ts, w[1].src, w[1].psn);
                    assert!(a < b, "out of total order: {:?} then {:?}", w[0], w[1]);
                }
            }
        }
    }
}

mod acks;
mod failures;
mod host_order;
mod metrics;
mod receiver_edges;
mod services;
mod switches;
mod untrusted_input;
