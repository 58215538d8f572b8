//! Real sockets on 127.0.0.1 (ephemeral ports), one process, one thread per role.
//!
//! * A one-rack cluster — two hosts (two processes and one) under one host-representative
//!   aggregator (1Pipe §6.2.3) — exchanges a few hundred messages and scatterings; every
//!   process must deliver exactly what was sent to it, in (timestamp, sender) order, and any two
//!   processes must agree on the order of what they both delivered (§2.1, §4.1).
//! * The driver itself: coalescing packs packets into few datagrams; garbage and strangers are
//!   counted and dropped; a waker ends a blocking wait.
//!
//! Every loop has a deadline, so a hang fails the test instead of blocking CI; nothing asserts
//! speed.
// Threads and sleeps are how a test runs several loops at once; the rule against them is for
// the sans-IO protocol crates.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use onepipe_proto::host::{Delivery, Host, HostEvent, UPLINK};
use onepipe_proto::ids::{NodeId, PortId, ProcId};
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::switch::Switch;
use onepipe_proto::time::{Instant, Timestamp};
use onepipe_proto::wire::{Beacon, Packet};
use onepipe_runtime::{
    bind_udp, Clock, CoalesceConfig, Driver, DriverConfig, LiveRoles, PortTable, ProcessRouter,
};
use std::collections::{BTreeMap, VecDeque};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long any one test may run before it is declared hung.
const DEADLINE_NS: u64 = 60_000_000_000;

fn lo() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A driver configuration for tests: no spinning (the machine has two cores and this test runs
/// three loops plus other tests).
fn test_config() -> DriverConfig {
    DriverConfig {
        spin_ns: 0,
        ..DriverConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// A one-rack cluster.
// ---------------------------------------------------------------------------------------------

/// Processes per host: host 0 runs processes 0 and 1, host 1 runs process 2.
const LAYOUT: [&[u32]; 2] = [&[0, 1], &[2]];
const PROCS: u32 = 3;
/// Scatterings each process sends.
const SENDS_PER_PROC: u32 = 200;
/// Scatterings sent back to back before the loop turns (so they coalesce).
const BURST: u32 = 8;

/// The destinations of scattering `seq` of process `src`: unicasts to a remote, to a local and
/// to itself, scatterings to everyone and to two processes.
fn destinations(src: u32, seq: u32) -> Vec<u32> {
    match seq % 5 {
        0 => vec![(src + 1) % PROCS],
        1 => vec![src],
        2 => (0..PROCS).collect(),
        3 => vec![(src + 2) % PROCS, (src + 1) % PROCS],
        _ => vec![(src + 2) % PROCS],
    }
}

/// The payload names the message: (sender, sequence number).
fn payload(src: u32, seq: u32) -> Bytes {
    let mut v = src.to_be_bytes().to_vec();
    v.extend_from_slice(&seq.to_be_bytes());
    Bytes::from(v)
}

fn message_id(d: &Delivery) -> (u32, u32) {
    let p = &d.payload;
    assert_eq!(p.len(), 8, "payloads are 8 bytes");
    let src = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
    let seq = u32::from_be_bytes([p[4], p[5], p[6], p[7]]);
    assert_eq!(src, d.src.0, "the payload names its sender");
    (src, seq)
}

/// What every process must deliver, as (sender, sequence) sorted.
fn expected(p: u32) -> Vec<(u32, u32)> {
    let mut v: Vec<_> = (0..PROCS)
        .flat_map(|src| (0..SENDS_PER_PROC).map(move |seq| (src, seq)))
        .filter(|&(src, seq)| destinations(src, seq).contains(&p))
        .collect();
    v.sort_unstable();
    v
}

/// What one host thread reports.
#[derive(Debug)]
struct HostRun {
    delivered: BTreeMap<u32, Vec<Delivery>>,
    send_failed: Vec<HostEvent>,
    driver: onepipe_runtime::DriverStats,
    host: onepipe_proto::host::HostStats,
}

/// Runs host `h` until every host has delivered everything or the deadline passes.
fn run_host(
    mut driver: Driver<Host>,
    h: usize,
    finished: Arc<AtomicUsize>,
    deadline: Instant,
) -> HostRun {
    let locals = LAYOUT[h];
    let want: BTreeMap<u32, usize> = locals.iter().map(|&p| (p, expected(p).len())).collect();
    let mut delivered: BTreeMap<u32, Vec<Delivery>> =
        locals.iter().map(|&p| (p, Vec::new())).collect();
    let mut send_failed = Vec::new();
    let mut next_seq = 0;
    let mut done = false;
    let mut sink = |e: HostEvent, delivered: &mut BTreeMap<u32, Vec<Delivery>>| match e {
        HostEvent::Deliver(d) => delivered
            .get_mut(&d.dst.0)
            .expect("a local process")
            .push(d),
        other => send_failed.push(other),
    };
    while driver.now() < deadline {
        // Send a burst from each local process, until all are sent.
        if next_seq < SENDS_PER_PROC {
            for seq in next_seq..(next_seq + BURST).min(SENDS_PER_PROC) {
                for &src in locals {
                    let scattering: Vec<(ProcId, Bytes)> = destinations(src, seq)
                        .into_iter()
                        .map(|d| (ProcId(d), payload(src, seq)))
                        .collect();
                    driver
                        .with_node(
                            |host, now| host.send(now, ProcId(src), &scattering),
                            &mut |e| sink(e, &mut delivered),
                        )
                        .expect("a valid scattering");
                }
            }
            next_seq = (next_seq + BURST).min(SENDS_PER_PROC);
        }
        driver
            .run_once(Duration::from_micros(200), &mut |e| sink(e, &mut delivered))
            .expect("the loop runs");
        if !done && want.iter().all(|(p, n)| delivered[p].len() >= *n) {
            done = true;
            finished.fetch_add(1, Ordering::SeqCst);
        }
        // Keep beaconing until every host is done: the others' barriers need ours.
        if finished.load(Ordering::SeqCst) == LAYOUT.len() {
            break;
        }
    }
    HostRun {
        delivered,
        send_failed,
        driver: driver.stats(),
        host: driver.node().stats().clone(),
    }
}

/// Every process delivers exactly the messages sent to it, in (timestamp, sender) order, and
/// every pair of processes delivers the messages they share in the same order (§2.1, §4.1).
#[test]
fn a_rack_over_udp_delivers_everything_in_one_total_order() {
    let cfg = test_config();
    let roles = LiveRoles {
        beacon_interval_ns: 200_000,
        aggregator_phase_ns: 50_000,
        // The machine may be busy: never report a delivered message lost because its
        // acknowledgement was scheduled late.
        rto_ns: 30_000_000_000,
        ..LiveRoles::default()
    };
    let clock = Clock::monotonic();
    let deadline = clock.now() + DEADLINE_NS;
    let agg_socket = bind_udp(lo(), &cfg).unwrap();
    let agg_addr = agg_socket.local_addr().unwrap();
    let host_sockets: Vec<UdpSocket> = LAYOUT
        .iter()
        .map(|_| bind_udp(lo(), &cfg).unwrap())
        .collect();
    let host_addrs: Vec<SocketAddr> = host_sockets
        .iter()
        .map(|s| s.local_addr().unwrap())
        .collect();

    // The aggregator: input i and output i are host i.
    let mut router = ProcessRouter::new();
    let mut agg_ports = PortTable::new();
    for (i, procs) in LAYOUT.iter().enumerate() {
        agg_ports.link(PortId(i as u32), host_addrs[i]);
        for &p in procs.iter() {
            router.set(ProcId(p), PortId(i as u32));
        }
    }
    let agg = Switch::new(
        roles.switch_config(NodeId(LAYOUT.len() as u32), 1, LAYOUT.len(), LAYOUT.len()),
        Some(Arc::new(router)),
        clock.now(),
    );
    let mut agg = Driver::new(agg, agg_socket, agg_ports, clock, cfg.clone()).unwrap();

    let finished = Arc::new(AtomicUsize::new(0));
    let hosts: Vec<_> = host_sockets
        .into_iter()
        .enumerate()
        .map(|(h, socket)| {
            let procs = LAYOUT[h].iter().map(|&p| ProcId(p)).collect();
            let host = Host::new(
                roles.host_config(NodeId(h as u32), procs, PROCS, &cfg),
                clock.now(),
            );
            let ports = PortTable::new().with_link(UPLINK, agg_addr);
            let driver = Driver::new(host, socket, ports, clock, cfg.clone()).unwrap();
            let finished = finished.clone();
            std::thread::spawn(move || run_host(driver, h, finished, deadline))
        })
        .collect();
    let agg_thread = {
        let finished = finished.clone();
        std::thread::spawn(move || {
            while agg.now() < deadline && finished.load(Ordering::SeqCst) < LAYOUT.len() {
                agg.run_once(Duration::from_millis(1), &mut |_| {})
                    .expect("the loop runs");
            }
            (agg.stats(), agg.node().stats().clone())
        })
    };
    let runs: Vec<HostRun> = hosts.into_iter().map(|t| t.join().unwrap()).collect();
    let (agg_driver, agg_switch) = agg_thread.join().unwrap();

    // Nothing lost, nothing duplicated.
    let mut all: BTreeMap<u32, Vec<Delivery>> = BTreeMap::new();
    for run in &runs {
        all.extend(run.delivered.clone());
    }
    for (&p, ds) in &all {
        let mut got: Vec<_> = ds.iter().map(message_id).collect();
        got.sort_unstable();
        assert_eq!(
            got,
            expected(p),
            "process {p} delivered {} of {} messages; hosts {:?}; aggregator {agg_driver:?} {agg_switch:?}",
            ds.len(),
            expected(p).len(),
            runs.iter().map(|r| (&r.driver, &r.host)).collect::<Vec<_>>()
        );
    }
    // Each process delivers in (timestamp, sender) order; within a sender, in send order.
    let key = |d: &Delivery| (d.ts, d.src.0, message_id(d).1);
    for (p, ds) in &all {
        for w in ds.windows(2) {
            assert!(
                key(&w[0]) < key(&w[1]),
                "process {p} delivered out of order: {w:?}"
            );
        }
    }
    // Any two processes agree on the order of the messages both delivered.
    for (p, a) in &all {
        for (q, b) in &all {
            let ids_b: std::collections::BTreeSet<_> = b.iter().map(message_id).collect();
            let ids_a: std::collections::BTreeSet<_> = a.iter().map(message_id).collect();
            let common_a: Vec<_> = a
                .iter()
                .map(message_id)
                .filter(|m| ids_b.contains(m))
                .collect();
            let common_b: Vec<_> = b
                .iter()
                .map(message_id)
                .filter(|m| ids_a.contains(m))
                .collect();
            assert_eq!(
                common_a, common_b,
                "processes {p} and {q} disagree on order"
            );
        }
    }
    // A message has one timestamp at every receiver (one per scattering, §2.1).
    let mut ts_of: BTreeMap<(u32, u32), Timestamp> = BTreeMap::new();
    for d in all.values().flatten() {
        let ts = *ts_of.entry(message_id(d)).or_insert(d.ts);
        assert_eq!(ts, d.ts, "one timestamp per scattering");
    }
    for run in &runs {
        assert!(
            run.send_failed.is_empty(),
            "no message fails: {:?}",
            run.send_failed
        );
        assert_eq!(run.host.dropped_late, 0);
        for s in [&run.driver, &agg_driver] {
            assert_eq!(s.decode_errors, 0);
            assert_eq!(s.unknown_source, 0);
            assert_eq!(s.unknown_output_port, 0);
            assert_eq!(s.send_errors, 0);
        }
    }
    // Bursts of sends coalesce: some datagram carried several packets.
    let packets: u64 = runs.iter().map(|r| r.driver.packets_sent).sum();
    let datagrams: u64 = runs.iter().map(|r| r.driver.datagrams_sent).sum();
    assert!(
        packets > datagrams,
        "{packets} packets in {datagrams} datagrams"
    );
    assert!(agg_switch.forwarded > 0 && agg_switch.beacons_sent > 0);
}

// ---------------------------------------------------------------------------------------------
// The driver on its own, with test roles.
// ---------------------------------------------------------------------------------------------

/// Sends what it is told to, and records what it receives.
#[derive(Debug, Default)]
struct Probe {
    received: Vec<(PortId, Packet)>,
    outputs: VecDeque<Output<Packet, ()>>,
}

impl Probe {
    fn send(&mut self, port: PortId, packet: Packet) {
        self.outputs.push_back(Output::Send { port, packet });
    }
}

impl Node for Probe {
    type Packet = Packet;
    type Event = ();
    type Mgmt = std::convert::Infallible;

    fn handle(&mut self, _now: Instant, input: Input<Packet>) {
        if let Input::Packet { port, packet } = input {
            self.received.push((port, packet));
        }
    }

    fn poll_output(&mut self) -> Option<Output<Packet, ()>> {
        self.outputs.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

fn beacon(b: u64) -> Packet {
    Packet::Beacon(Beacon {
        from: NodeId(1),
        barrier: Timestamp::new(b),
        commit: Timestamp::new(b),
        demand: false,
    })
}

/// Two probes linked on port 0 of each.
fn probe_pair(cfg: &DriverConfig) -> (Driver<Probe>, Driver<Probe>) {
    let clock = Clock::starting_now();
    let (a, b) = (bind_udp(lo(), cfg).unwrap(), bind_udp(lo(), cfg).unwrap());
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let a = Driver::new(
        Probe::default(),
        a,
        PortTable::new().with_link(PortId(0), b_addr),
        clock,
        cfg.clone(),
    )
    .unwrap();
    let b = Driver::new(
        Probe::default(),
        b,
        PortTable::new().with_link(PortId(0), a_addr),
        clock,
        cfg.clone(),
    )
    .unwrap();
    (a, b)
}

/// A probe sending with `a_cfg` linked to one receiving with `b_cfg`.
fn probe_pair_with(a_cfg: &DriverConfig, b_cfg: &DriverConfig) -> (Driver<Probe>, Driver<Probe>) {
    let clock = Clock::starting_now();
    let (a, b) = (
        bind_udp(lo(), a_cfg).unwrap(),
        bind_udp(lo(), b_cfg).unwrap(),
    );
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let a = Driver::new(
        Probe::default(),
        a,
        PortTable::new().with_link(PortId(0), b_addr),
        clock,
        a_cfg.clone(),
    )
    .unwrap();
    let b = Driver::new(
        Probe::default(),
        b,
        PortTable::new().with_link(PortId(0), a_addr),
        clock,
        b_cfg.clone(),
    )
    .unwrap();
    (a, b)
}

/// Runs `d` until `done` or the deadline.
fn run_probe_until(d: &mut Driver<Probe>, done: impl Fn(&Driver<Probe>) -> bool) {
    let deadline = d.now() + DEADLINE_NS;
    while !done(d) {
        assert!(d.now() < deadline, "timed out: {:?}", d.stats());
        d.run_once(Duration::from_millis(10), &mut |_| {}).unwrap();
    }
}

/// paxos-batching-pipelining §IV-A: a burst fills datagrams up to the size limit (a full
/// flush), and the rest goes when the loop goes idle; order is kept. Off, it is one each.
#[test]
fn a_burst_coalesces_into_full_datagrams_then_an_idle_flush_iv_a() {
    for (coalesce, datagrams, full) in [
        // 1,472 bytes hold 73 beacons of 20 bytes: 100 beacons are 2 datagrams, the first full.
        (CoalesceConfig::default(), 2, 1),
        // One packet per datagram: each is full at once.
        (CoalesceConfig::default().uncoalesced(), 100, 100),
    ] {
        let cfg = DriverConfig {
            coalesce,
            ..test_config()
        };
        let (mut a, mut b) = probe_pair(&cfg);
        a.with_node(
            |p, _| {
                for i in 0..100 {
                    p.send(PortId(0), beacon(i));
                }
                // No address for port 3: dropped and counted, never sent.
                p.send(PortId(3), beacon(0));
            },
            &mut |_| {},
        );
        a.run_once(Duration::ZERO, &mut |_| {}).unwrap();
        let s = a.stats();
        assert_eq!(s.packets_sent, 100);
        assert_eq!(s.datagrams_sent, datagrams);
        assert_eq!(s.unknown_output_port, 1);
        // The rest went when the loop idled (or, on a slow machine, when the oldest packet had
        // waited the flush delay).
        let c = &s.coalesce;
        assert_eq!(c.flushes_full, full, "{s:?}");
        assert_eq!(c.flushes_full + c.flushes_idle + c.flushes_delay, datagrams);
        run_probe_until(&mut b, |b| b.node().received.len() >= 100);
        let got: Vec<_> = b.node().received.iter().map(|(_, p)| p.clone()).collect();
        assert_eq!(got, (0..100).map(beacon).collect::<Vec<_>>());
        assert_eq!(b.stats().datagrams_received, datagrams);
    }
}

/// UDP GSO and GRO (docs/RUNTIME.md): with GSO a burst leaves in sends of many 1,472-byte
/// datagrams (each segment padded so the kernel's cuts fall between packets); the receiver gets
/// each send as one buffer with GRO and datagram by datagram without; either way every packet
/// arrives once, in order. Without GSO (the fallback where the kernel has none) the same burst
/// goes a datagram per send. Loopback keeps a GSO send whole up to the receiving socket, so
/// both receive paths run here.
#[test]
fn gso_sends_arrive_whole_with_gro_and_datagram_by_datagram_without() {
    const N: u64 = 2_000;
    const ROUNDS: u64 = 4;
    for (gso, gro) in [(true, true), (true, false), (false, true)] {
        let sender = DriverConfig {
            coalesce: CoalesceConfig {
                datagram_len_max: 1_472,
                segments_max: if gso { 44 } else { 1 },
                ..CoalesceConfig::default()
            },
            ..test_config()
        };
        let receiver = DriverConfig {
            gro,
            ..test_config()
        };
        let (mut a, mut b) = probe_pair_with(&sender, &receiver);
        assert_eq!(a.stats().gso, gso, "this kernel has UDP GSO");
        assert_eq!(b.stats().gro, gro, "this kernel has UDP GRO");
        // Rounds of one lone datagram (no GRO segment length comes with it), received, then a
        // burst: every receive must still get the segment length of a GRO buffer, whatever the
        // receive before it got.
        let mut want = Vec::new();
        for round in 0..ROUNDS {
            for burst in [round * N..round * N + 1, round * N + 1..(round + 1) * N] {
                want.extend(burst.clone().map(beacon));
                a.with_node(
                    |p, _| burst.for_each(|i| p.send(PortId(0), beacon(i))),
                    &mut |_| {},
                );
                a.run_once(Duration::ZERO, &mut |_| {}).unwrap();
                run_probe_until(&mut b, |b| b.node().received.len() >= want.len());
            }
        }
        let got: Vec<_> = b.node().received.iter().map(|(_, p)| p.clone()).collect();
        assert_eq!(got, want, "gso {gso}, gro {gro}");
        let (sa, sb) = (a.stats(), b.stats());
        // 73 beacons fill a 1,472-byte datagram (12 bytes of padding each with GSO).
        assert!(sa.datagrams_sent >= ROUNDS * N / 73, "{sa:?}");
        assert_eq!(sb.datagrams_received, sa.datagrams_sent, "{sb:?}");
        assert_eq!(sb.decode_errors, 0);
        if gso {
            assert!(
                sa.gso_sends >= 1 && sa.gso_sends < sa.datagrams_sent,
                "{sa:?}"
            );
            assert!(sa.coalesce.padding_bytes > 0);
        } else {
            assert_eq!(sa.gso_sends, 0);
        }
        if gso && gro {
            assert!(sb.gro_receives >= ROUNDS, "one per round at least: {sb:?}");
        } else {
            assert_eq!(sb.gro_receives, 0, "{sb:?}");
        }
    }
}

/// Distrust the wire: a malformed tail, an empty datagram and garbage are counted and dropped
/// (the good packets before a bad tail still count); a stranger's datagrams never reach the role.
#[test]
fn garbage_and_strangers_are_counted_and_dropped() {
    let cfg = test_config();
    let (a, _b) = probe_pair(&cfg);
    // A peer known as input 0, and a stranger.
    let peer = bind_udp(lo(), &cfg).unwrap();
    let stranger = bind_udp(lo(), &cfg).unwrap();
    let mut ports = a.ports().clone();
    ports.set_input(peer.local_addr().unwrap(), PortId(0));
    let clock = a.clock();
    let socket = bind_udp(lo(), &cfg).unwrap();
    let addr = socket.local_addr().unwrap();
    drop(a);
    let mut a = Driver::new(Probe::default(), socket, ports, clock, cfg.clone()).unwrap();

    let mut good_then_garbage = Vec::new();
    beacon(7).encode(&mut good_then_garbage);
    good_then_garbage.extend_from_slice(&[0xFF, 0, 1, 2, 3]);
    let mut truncated = Vec::new();
    beacon(8).encode(&mut truncated);
    truncated.truncate(10);
    let mut valid = Vec::new();
    beacon(9).encode(&mut valid);
    for datagram in [
        &good_then_garbage[..],
        &[],
        &[0xAB; 300][..],
        &truncated[..],
    ] {
        peer.send_to(datagram, addr).unwrap();
    }
    stranger.send_to(&valid, addr).unwrap();

    run_probe_until(&mut a, |a| {
        let s = a.stats();
        s.datagrams_received + s.unknown_source >= 5
    });
    let s = a.stats();
    assert_eq!(s.datagrams_received, 4);
    assert_eq!(s.unknown_source, 1);
    assert_eq!(s.decode_errors, 4);
    assert_eq!(s.packets_received, 1);
    assert_eq!(a.node().received, vec![(PortId(0), beacon(7))]);
}

/// Nothing from the network is believed before it authenticates (docs/SECURITY.md) — and a
/// plain data packet (§2.2.2), which its host delivers the moment it arrives, no more than any
/// other: sealed with its link's key it is delivered at once; the same packet with a forged
/// tag, without a seal, or replayed is refused and counted by reason, and never delivered.
#[test]
fn a_plain_packet_is_delivered_only_once_it_authenticates() {
    use onepipe_proto::host::HostConfig;
    use onepipe_proto::wire::{flags, DataHeader, DataPacket};
    use onepipe_runtime::auth::{
        AuthMode, ClusterSecret, Epoch, KeyInbox, KeyUpdate, LinkAuth, LinkId, LinkKey, LinkPorts,
        MemberIx, HEADER_LEN, SECRET_LEN, TAG_LEN,
    };
    let cfg = DriverConfig {
        coalesce: CoalesceConfig::default().sealed(),
        ..test_config()
    };
    // The host (member 1) and its aggregator (member 0), played by this test.
    let (agg_ix, host_ix) = (MemberIx(0), MemberIx(1));
    let member = |me: MemberIx, peer: MemberIx, secret: &ClusterSecret| {
        let links = [LinkPorts {
            peer,
            out: PortId(0),
            input: PortId(0),
        }];
        let mut auth = LinkAuth::new(AuthMode::On, me, &links, KeyInbox::new());
        let keys = [LinkId { from: me, to: peer }, LinkId { from: peer, to: me }]
            .map(|link| LinkKey {
                link,
                key: secret.link_key(link, Epoch(1)),
            })
            .to_vec();
        let install = KeyUpdate::Install {
            epoch: Epoch(1),
            keys,
            activate: true,
        };
        auth.apply(Instant(0), install);
        auth
    };
    let secret = ClusterSecret::from_bytes([7; SECRET_LEN]);
    let mut agg = member(agg_ix, host_ix, &secret);
    // Right link, right epoch, fresh counters — the wrong key.
    let mut forger = member(agg_ix, host_ix, &ClusterSecret::from_bytes([8; SECRET_LEN]));
    let agg_socket = UdpSocket::bind(lo()).unwrap();
    let socket = bind_udp(lo(), &cfg).unwrap();
    let addr = socket.local_addr().unwrap();
    let clock = Clock::starting_now();
    let host = Host::new(HostConfig::new(NodeId(1), vec![ProcId(1)], 2), clock.now());
    let ports = PortTable::new().with_link(UPLINK, agg_socket.local_addr().unwrap());
    let mut driver = Driver::new(host, socket, ports, clock, cfg).unwrap();
    driver.set_auth(member(host_ix, agg_ix, &secret)).unwrap();

    let body = |psn: u32, payload: &'static [u8]| {
        let mut out = Vec::new();
        Packet::Data(DataPacket {
            header: DataHeader {
                flags: flags::PLAIN | flags::END_OF_MESSAGE,
                frag: 0,
                ts: Timestamp::new(1_000),
                barrier: Timestamp::new(0),
                commit: Timestamp::new(0),
                psn: onepipe_proto::ids::Psn(psn),
                src: ProcId(0),
                dst: ProcId(1),
            },
            payload: Bytes::from_static(payload),
        })
        .encode(&mut out);
        out
    };
    let seal = |auth: &mut LinkAuth, body: Vec<u8>| {
        let mut d = vec![0u8; HEADER_LEN];
        d.extend_from_slice(&body);
        d.extend_from_slice(&[0; TAG_LEN]);
        auth.seal(PortId(0), &mut d).expect("a key is held");
        d
    };
    let forged = seal(&mut forger, body(0, b"forged"));
    let unsealed = body(1, b"unsealed");
    let genuine = seal(&mut agg, body(2, b"genuine"));
    for d in [&forged, &unsealed, &genuine, &genuine] {
        agg_socket.send_to(d, addr).unwrap();
    }
    let mut plain = Vec::new();
    let mut ordered = 0;
    let deadline = driver.now() + DEADLINE_NS;
    loop {
        let auth = driver.auth().expect("sealed").stats().clone();
        if auth.ok + auth.refused() >= 4 {
            break;
        }
        assert!(
            driver.now() < deadline,
            "4 datagrams never arrived: {auth:?}"
        );
        driver
            .run_once(Duration::from_millis(10), &mut |e| match e {
                HostEvent::DeliverPlain(d) => plain.push(d.payload),
                HostEvent::Deliver(_) => ordered += 1,
                _ => {}
            })
            .unwrap();
    }
    let auth = driver.auth().unwrap().stats().clone();
    assert_eq!(plain, vec![Bytes::from_static(b"genuine")], "{auth:?}");
    assert_eq!(ordered, 0);
    assert_eq!((auth.ok, auth.bad_tag, auth.replay), (1, 1, 1), "{auth:?}");
    assert_eq!(auth.short + auth.bad_header, 1, "{auth:?}");
    assert_eq!(
        driver.stats().decode_errors,
        0,
        "nothing refused reached the decoder"
    );
    assert_eq!(driver.node().stats().delivered_plain, 1);
}

/// A waker ends a wait long before its timeout.
#[test]
fn a_waker_ends_a_blocking_wait() {
    let (mut a, _b) = probe_pair(&test_config());
    let waker = a.waker();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        waker.wake().unwrap();
    });
    let start = std::time::Instant::now();
    a.run_once(Duration::from_secs(30), &mut |_| {}).unwrap();
    t.join().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(25),
        "woken, not timed out"
    );
    assert_eq!(a.stats().blocks, 1);
}

/// IPv6 loopback works the same (the receive headers are kept per address family).
#[test]
fn ipv6_loopback_carries_packets_too() {
    let cfg = test_config();
    let v6: SocketAddr = "[::1]:0".parse().unwrap();
    let (Ok(a), Ok(b)) = (bind_udp(v6, &cfg), bind_udp(v6, &cfg)) else {
        eprintln!("no IPv6 loopback on this machine: skipped");
        return;
    };
    let clock = Clock::starting_now();
    let (a_addr, b_addr) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let mut a = Driver::new(
        Probe::default(),
        a,
        PortTable::new().with_link(PortId(0), b_addr),
        clock,
        cfg.clone(),
    )
    .unwrap();
    let mut b = Driver::new(
        Probe::default(),
        b,
        PortTable::new().with_link(PortId(0), a_addr),
        clock,
        cfg,
    )
    .unwrap();
    // An IPv4 driver on the same thread first, so the IPv6 one must not reuse its headers.
    let (mut c, mut d) = probe_pair(&test_config());
    c.with_node(|p, _| p.send(PortId(0), beacon(1)), &mut |_| {});
    c.flush().unwrap();
    run_probe_until(&mut d, |d| !d.node().received.is_empty());
    a.with_node(|p, _| p.send(PortId(0), beacon(2)), &mut |_| {});
    a.flush().unwrap();
    run_probe_until(&mut b, |b| !b.node().received.is_empty());
    assert_eq!(b.node().received, vec![(PortId(0), beacon(2))]);
    assert_eq!(b.stats().unknown_source, 0);
}
