//! A protocol written for these tests alone plugs into the engine without touching it: each
//! host's one role sends a counter to the next host on every workload send; switches forward
//! by the topology's routes.
use super::*;
use crate::clock::ClockParams;
use crate::config::{FaultConfig, NetworkConfig, TopologySpec, WorkloadConfig};
use crate::queue::RadixHeap;
use onepipe_proto::NodeId;
use std::convert::Infallible;

/// A packet: (destination host, sequence number).
type Pkt = (u32, u64);

#[derive(Default)]
struct Ring {
    hosts: u32,
    sent: u64,
    delivered: u64,
    /// Per host, the last sequence number delivered from its predecessor.
    last: Vec<Option<u64>>,
    /// Earliest true time of a delivery after a send at 0 (at least the path's costs).
    first_delivery: Option<SimTime>,
}

impl Protocol for Ring {
    type Packet = Pkt;
    type Ev = Infallible;
    type Input = Infallible;

    fn wire_len(_: &Pkt) -> usize {
        100
    }
    fn background(_: &Pkt) -> bool {
        false
    }
    fn counted(_: &Pkt) -> bool {
        true
    }
    fn lossy(&self, _: &SimConfig, _: &Pkt) -> bool {
        true
    }
    fn procs(&self) -> u32 {
        self.hosts
    }
    fn sender(&self, proc: u32) -> u32 {
        proc
    }
    fn poll_timeout(&self, _: u32) -> Option<Instant> {
        None
    }
    fn arrive<Q: EventQueue<Ev<Infallible>>>(
        e: &mut Engine<Ring, Q>,
        t: SimTime,
        link: u32,
        slot: u32,
    ) {
        let to = e.links[link as usize].to;
        if to < e.topo.hosts() {
            e.input(t, to, CoreInput::Packet(slot));
            return;
        }
        let dst = e.packets.get(slot).0;
        let port = e.topo.route(NodeId(to), dst, 0).expect("a route");
        let out = e.topo.node(NodeId(to)).outputs[port.index()].0;
        e.put_on_link(out, slot, t);
    }
    fn process<Q: EventQueue<Ev<Infallible>>>(
        e: &mut Engine<Ring, Q>,
        t: SimTime,
        role: u32,
        input: CoreInput<Infallible>,
    ) {
        assert!(e.core(role).free <= t, "a core runs one input at a time");
        let costs = e.core(role).costs;
        let mut cursor = t;
        match input {
            CoreInput::Packet(slot) => {
                cursor += costs.recv_ns + costs.deliver_ns;
                let (dst, seq) = e.take_packet(slot);
                assert_eq!(dst, role, "delivered to its destination");
                let p = &mut e.proto;
                assert!(p.last[role as usize] < Some(seq), "FIFO links, no loss");
                p.last[role as usize] = Some(seq);
                p.delivered += 1;
                p.first_delivery.get_or_insert(cursor);
            }
            CoreInput::Send { .. } => {
                cursor += costs.send_ns;
                let dst = (role + 1) % e.proto.hosts;
                let seq = e.proto.sent;
                e.proto.sent += 1;
                let up = e.topo.uplink(role).0;
                e.transmit(up, (dst, seq), cursor);
            }
            CoreInput::Timeout => {}
            CoreInput::Proto(x) => match x {},
        }
        let c = e.core(role);
        c.busy_ns += cursor - t;
        c.free = cursor;
        e.rearm(role);
    }
    fn event<Q: EventQueue<Ev<Infallible>>>(_: &mut Engine<Ring, Q>, _: SimTime, x: Infallible) {
        match x {}
    }
}

fn ring(cfg: SimConfig) -> Engine<Ring, RadixHeap<Ev<Infallible>>> {
    ring_on(cfg, 1)
}

/// The ring with `hosts_per_cpu` consecutive hosts' roles sharing each core.
fn ring_on(cfg: SimConfig, hosts_per_cpu: u32) -> Engine<Ring, RadixHeap<Ev<Infallible>>> {
    let topo = Arc::new(cfg.net.topology.build().expect("a topology"));
    let seeds = Seeds::new(cfg.seed);
    let costs = Costs {
        recv_ns: 100,
        send_ns: 200,
        deliver_ns: 50,
    };
    let roles = (0..topo.hosts())
        .map(|h| {
            let params = ClockParams {
                skew_ns: 0.0,
                drift_ppm: 0.0,
                sync_interval_ns: 1_000_000,
                epoch_ns: 0,
            };
            let clock = Clock::new(params, seeds.clock, h);
            RoleSt::new(clock, Some(h / hosts_per_cpu))
        })
        .collect();
    let cpus = (0..topo.hosts().div_ceil(hosts_per_cpu))
        .map(|_| Core::new(costs, 4, false))
        .collect();
    let links = build_links(&cfg, &topo);
    let proto = Ring {
        hosts: topo.hosts(),
        last: vec![None; topo.hosts() as usize],
        ..Ring::default()
    };
    Engine::assemble(
        cfg,
        topo,
        RadixHeap::new(),
        seeds,
        proto,
        roles,
        cpus,
        links,
    )
}

fn cfg(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        net: NetworkConfig {
            topology: TopologySpec::Rack { hosts: 4 },
            ..Default::default()
        },
        workload: WorkloadConfig {
            rate_per_proc: 1e6,
            duration_ns: 200_000,
            ..Default::default()
        },
        ..SimConfig::default()
    }
}

fn run(e: &mut Engine<Ring, RadixHeap<Ev<Infallible>>>) {
    e.run_until(e.cfg.workload.duration_ns + 1_000_000, &mut |_| {});
}

#[test]
fn a_new_protocol_runs_on_the_engine_and_drains() {
    let mut e = ring(cfg(1));
    run(&mut e);
    let p = &e.proto;
    assert!(p.sent > 100, "sent {}", p.sent);
    assert_eq!(p.delivered, p.sent, "everything sent arrives");
    assert_eq!(e.live, 0, "nothing left in flight");
    // A rack's ToR is two logical halves: host → ToR up → ToR down → host.
    assert_eq!(e.net.packets, 3 * p.sent, "three links each");
    // Serialization (100 B at 100 Gbit/s: 8 ns) and latency on each of three links, and the
    // sender's and receiver's costs.
    let path = 3 * (8 + e.cfg.net.link_delay_ns) + 200 + 100 + 50;
    assert!(p.first_delivery.expect("deliveries") >= path);
}

/// `host_links` give the hosts they name their own uplinks and downlinks; the other hosts
/// keep the run's; a range outside the topology is refused.
#[test]
fn host_links_override_the_named_hosts_links() {
    let wan = crate::config::LinkSpec {
        gbps: 0.01,
        delay_ns: 150_000_000,
    };
    let fast = crate::config::LinkSpec {
        gbps: 10.0,
        delay_ns: 0,
    };
    let mut c = {
        let base = cfg(1);
        SimConfig {
            net: NetworkConfig {
                host_links: vec![crate::config::HostLinks {
                    hosts: 0..2,
                    up: wan,
                    down: fast,
                }],
                ..base.net
            },
            ..base
        }
    };
    c.validate().expect("valid");
    let topo = c.net.topology.build().unwrap();
    let links = build_links(&c, &topo);
    let at = |id: onepipe_proto::LinkId| &links[id.0 as usize];
    for h in 0..2 {
        assert_eq!(at(topo.uplink(h)).delay_ns, 150_000_000);
        assert_eq!(at(topo.uplink(h)).ps_per_byte, 800_000);
        assert_eq!(at(topo.downlink(h)).delay_ns, 0);
        assert_eq!(at(topo.downlink(h)).ps_per_byte, 800);
    }
    for id in [topo.uplink(3), topo.downlink(3)] {
        assert_eq!(at(id).delay_ns, c.net.link_delay_ns);
        assert_eq!(at(id).ps_per_byte, ps_per_byte(&c));
    }
    c.net.host_links[0].hosts = 3..5;
    assert_eq!(c.validate().unwrap_err().flag, "host_links");
}

#[test]
fn a_full_send_queue_refuses_sends_at_overload() {
    // 10 M sends/s against 200 ns per send: the core keeps up with 5 M/s.
    let mut e = ring({
        let base = cfg(2);
        SimConfig {
            workload: WorkloadConfig {
                rate_per_proc: 1e7,
                ..base.workload
            },
            ..base
        }
    });
    run(&mut e);
    assert!(e.net.sends_rejected > 0);
    assert_eq!(e.proto.delivered, e.proto.sent);
}

/// Four hosts' roles on one core: one FIFO and one `free` time for all of them, so the core
/// that kept up with one role's sends (a core each) is overloaded by four, refuses sends at
/// its one send queue, and is never busy longer than the run.
#[test]
fn roles_sharing_a_core_run_one_input_at_a_time() {
    // 1 M sends/s per role against 200 + 100 + 50 ns per message: a core each is 35% busy,
    // one core for four is 140% busy.
    let (mut own, mut shared) = (ring_on(cfg(4), 1), ring_on(cfg(4), 4));
    run(&mut own);
    run(&mut shared);
    assert_eq!(own.cpus().len(), 4);
    assert_eq!(shared.cpus().len(), 1);
    assert_eq!(shared.cpus()[0].roles(), 0..4);
    assert_eq!(own.net.sends_rejected, 0, "a core each keeps up");
    assert!(shared.net.sends_rejected > 0, "one core for four does not");
    assert_eq!(shared.proto.delivered, shared.proto.sent);
    assert_eq!(shared.live, 0, "the shared queue drains");
    let busy = shared.cpus()[0].busy_ns;
    assert!(
        busy <= shared.now(),
        "busy {busy} ns in {} ns",
        shared.now()
    );
    // Sending stops at 200 µs; the core was saturated until then.
    assert!(
        busy >= shared.cfg.workload.duration_ns * 9 / 10,
        "busy {busy} ns"
    );
}

#[test]
#[should_panic(expected = "consecutive")]
fn a_core_serves_consecutive_roles_only() {
    let topo = Arc::new(cfg(1).net.topology.build().expect("a topology"));
    let seeds = Seeds::new(1);
    let params = ClockParams {
        skew_ns: 0.0,
        drift_ppm: 0.0,
        sync_interval_ns: 1_000_000,
        epoch_ns: 0,
    };
    let clock = || Clock::new(params, 1, 0);
    let roles = vec![
        RoleSt::new(clock(), Some(0)),
        RoleSt::new(clock(), Some(1)),
        RoleSt::new(clock(), Some(0)),
    ];
    let cpus = (0..2)
        .map(|_| Core::new(Costs::default(), 4, false))
        .collect();
    let links = build_links(&cfg(1), &topo);
    let proto = Ring::default();
    Engine::assemble(
        cfg(1),
        topo,
        RadixHeap::new(),
        seeds,
        proto,
        roles,
        cpus,
        links,
    );
}

#[test]
fn link_loss_drops_counted_packets_and_the_run_is_deterministic() {
    let lossy = |seed| {
        let base = cfg(seed);
        SimConfig {
            faults: FaultConfig {
                loss_rate: 0.05,
                ..base.faults
            },
            ..base
        }
    };
    let (mut a, mut b) = (ring(lossy(3)), ring(lossy(3)));
    run(&mut a);
    run(&mut b);
    assert!(a.net.packets_lost > 0, "seed 3");
    assert_eq!(
        a.proto.delivered + a.net.packets_lost,
        a.proto.sent,
        "seed 3"
    );
    assert_eq!(a.live, 0, "seed 3: lost packets leave the network");
    assert_eq!(
        (a.proto.delivered, a.net.events, a.net.packets_lost),
        (b.proto.delivered, b.net.events, b.net.packets_lost),
        "seed 3: same seed, same run"
    );
}

/// Links serialize: packets put on one link at one instant leave one after another, each its
/// wire length at the link rate after the one before, and arrive in that order one link delay
/// later (what makes a loaded link queue, as the pinned traces assume).
#[test]
fn packets_put_on_a_link_together_leave_one_serialization_apart() {
    let mut e = ring(cfg(1));
    let link = e.topo.uplink(0).0;
    let ser = {
        let l = &e.links[link as usize];
        (Ring::wire_len(&(1, 0)) as u64 * l.ps_per_byte).div_ceil(1000)
    };
    assert!(ser > 0, "a packet takes time on the wire");
    let t = 5_000;
    let done: Vec<SimTime> = (0..3).map(|i| e.transmit(link, (1, i), t)).collect();
    assert_eq!(done, vec![t + ser, t + 2 * ser, t + 3 * ser]);
}
