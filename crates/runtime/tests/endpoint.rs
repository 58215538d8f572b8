//! The library API over real sockets on 127.0.0.1: a controller and aggregators on threads
//! ([`LocalCluster`]), endpoints joining it from threads as separate processes would.
//!
//! * Four endpoints under two layers of aggregators deliver best-effort and reliable
//!   broadcasts in one total order each (§2.1, §4.1, §5.1).
//! * Bounded queues: a best-effort message the application has no room for is dropped and its
//!   sender hears of it (§4.1); a reliable one waits (§6.1) and nothing is lost.
//! * Flow control without spinning: `send_*_timeout` waits for room in a full send buffer;
//!   `recv_*_many` and `poll_*` take delivered messages in batches, in order.
//! * The unordered baseline delivers but has no reliable service; the controller hands out
//!   process ids, refuses a taken one, and counts garbage.
//! * Plain messages (§2.2.2) are delivered on arrival — while an ordered message sent before
//!   them waits for the barrier — keep out of the ordered queue and its order, are reported
//!   lost (`--blackhole`'s fault, injected at the aggregator) and refused when their queue is
//!   full, as best-effort messages are.
//!
//! Every wait has a generous deadline; nothing asserts speed.
#![allow(clippy::disallowed_methods)]

use bytes::Bytes;
use onepipe_proto::wire::NakReason;
use onepipe_proto::{ProcId, Timestamp};
use onepipe_runtime::cluster::{AuthConfig, Cluster, LocalLayout};
use onepipe_runtime::control::{ControlClient, FromController};
use onepipe_runtime::endpoint::{Endpoint, Event, JoinOptions, Message, RecvError, SendError};
use onepipe_runtime::{JoinError, LocalCluster};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(60);

/// Joins `n` endpoints concurrently (joining waits for the whole cluster).
/// A controller and one aggregator (`tor-0`) on threads, for `hosts` processes.
fn one_rack(hosts: u32) -> LocalCluster {
    LocalCluster::start(&LocalLayout {
        hosts,
        layers: 1,
        ..LocalLayout::default()
    })
    .unwrap()
}

fn join_all(controller: SocketAddr, n: u32, opts: JoinOptions) -> Vec<Endpoint> {
    let threads: Vec<_> = (0..n)
        .map(|p| {
            let opts = JoinOptions {
                proc: Some(p),
                ..opts.clone()
            };
            std::thread::spawn(move || Endpoint::join(controller, opts))
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().unwrap().expect("join"))
        .collect()
}

fn receive(e: &Endpoint, reliable: bool, n: usize) -> Vec<Message> {
    let deadline = Instant::now() + PATIENCE;
    let mut got = Vec::new();
    while got.len() < n {
        assert!(
            Instant::now() < deadline,
            "p{} got {} of {n}",
            e.proc(),
            got.len()
        );
        let r = if reliable {
            e.reliable().recv(Duration::from_millis(100))
        } else {
            e.best_effort().recv(Duration::from_millis(100))
        };
        match r {
            Ok(m) => got.push(m),
            Err(RecvError::Timeout) => {}
            Err(e) => panic!("{e}"),
        }
    }
    got
}

fn id(m: &Message) -> (u32, u32) {
    (
        m.src.0,
        u32::from_le_bytes(m.payload[..4].try_into().unwrap()),
    )
}

/// §2.1, §4.1, §5.1: every endpoint delivers every broadcast of each service once, in
/// (timestamp, sender) order, so all four see one sequence per service.
#[test]
fn four_endpoints_under_two_layers_deliver_one_total_order_per_service() {
    let local = LocalCluster::start(&LocalLayout {
        hosts: 4,
        layers: 2,
        rack_size: 2,
        ..LocalLayout::default()
    })
    .unwrap();
    let eps = join_all(local.controller_addr(), 4, local.join_options());
    const EACH: u32 = 60;
    let senders: Vec<_> = eps
        .into_iter()
        .map(|e| {
            std::thread::spawn(move || {
                let all: Vec<ProcId> = e.processes().collect();
                for i in 0..EACH {
                    let msg = Bytes::copy_from_slice(&i.to_le_bytes());
                    let s: Vec<_> = all.iter().map(|&p| (p, msg.clone())).collect();
                    e.send_unreliable(&s).unwrap();
                    e.send_reliable(&s).unwrap();
                    if i % 10 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                let be = receive(&e, false, 4 * EACH as usize);
                let rel = receive(&e, true, 4 * EACH as usize);
                let stats = e.leave();
                (be, rel, stats)
            })
        })
        .collect();
    let runs: Vec<_> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    for service in 0..2 {
        let logs: Vec<&Vec<Message>> = runs
            .iter()
            .map(|r| if service == 0 { &r.0 } else { &r.1 })
            .collect();
        for log in &logs {
            // Timestamps are non-decreasing per host (§4.1), not strictly increasing: a host
            // raised to a barrier ahead of its clock stamps at the barrier until the clock
            // catches up. Equal (timestamp, sender) keys keep the sender's order.
            for w in log.windows(2) {
                let tie = (w[0].ts, w[0].src) == (w[1].ts, w[1].src) && id(&w[0]).1 < id(&w[1]).1;
                assert!(
                    (w[0].ts, w[0].src) < (w[1].ts, w[1].src) || tie,
                    "out of order: {:?} then {:?}",
                    id(&w[0]),
                    id(&w[1])
                );
            }
            assert!(log
                .iter()
                .all(|m| m.ts < m.barrier && m.ts < m.delivered_ts));
            assert!(log.iter().all(|m| m.reliable == (service == 1)));
        }
        let first: Vec<_> = logs[0].iter().map(id).collect();
        for log in &logs[1..] {
            assert_eq!(
                log.iter().map(id).collect::<Vec<_>>(),
                first,
                "one total order"
            );
        }
    }
    for (_, _, stats) in &runs {
        assert_eq!(stats.host.dropped_late, 0);
        assert_eq!(stats.driver.decode_errors, 0);
    }
    let reports = local.stop();
    assert_eq!(reports.len(), 3, "tor-0, tor-1, spine-0");
    assert!(reports
        .iter()
        .all(|r| r.switch.forwarded > 0 && r.driver.unknown_source == 0));
    // Every datagram was sealed and opened (docs/SECURITY.md): the cluster is protected by
    // default, and nothing was refused.
    assert!(
        reports
            .iter()
            .all(|r| r.driver.auth.ok > 0 && r.driver.auth.refused() == 0),
        "{:?}",
        reports.iter().map(|r| &r.driver.auth).collect::<Vec<_>>()
    );
}

/// §4.1: a best-effort message the receiving application has no room for is refused by the
/// role before it is acknowledged, and NAKed; its sender gets `SendFailed { reason: BufferFull
/// }`. The queue never holds more than its limit.
#[test]
fn a_full_best_effort_queue_drops_and_the_sender_hears_of_it_4_1() {
    let local = one_rack(2);
    let opts = JoinOptions {
        recv_queue_len_max: 4,
        ..local.join_options()
    };
    let eps = join_all(local.controller_addr(), 2, opts);
    for i in 0..50u32 {
        eps[0]
            .send_unreliable(&[(ProcId(1), Bytes::copy_from_slice(&i.to_le_bytes()))])
            .unwrap();
    }
    let deadline = Instant::now() + PATIENCE;
    let mut failed = 0;
    while failed < 46 {
        assert!(Instant::now() < deadline, "{failed} send failures reported");
        match eps[0].next_event_timeout(Duration::from_millis(100)) {
            Ok(Event::SendFailed { dst, reason, .. }) => {
                assert_eq!((dst, reason), (ProcId(1), NakReason::BufferFull));
                failed += 1;
            }
            Ok(other) => panic!("{other:?}"),
            Err(_) => {}
        }
    }
    // The four that fit arrive (refused at arrival, the others were NAKed before the barrier
    // passed these), in order.
    let got: Vec<_> = (0..4)
        .map(|_| id(&eps[1].best_effort().recv(PATIENCE).unwrap()))
        .collect();
    assert_eq!(got, vec![(0, 0), (0, 1), (0, 2), (0, 3)]);
    assert_eq!(eps[1].best_effort().try_recv(), Err(RecvError::Empty));
    assert_eq!(eps[1].stats().recv_refused_full, 46);
}

/// §6.1: a receiver that does not read reliable messages holds them back (its window closes);
/// when it reads again every one arrives, in order, none lost.
#[test]
fn a_full_reliable_queue_pauses_delivery_and_loses_nothing_6_1() {
    let local = one_rack(2);
    let opts = JoinOptions {
        recv_queue_len_max: 8,
        ..local.join_options()
    };
    let eps = join_all(local.controller_addr(), 2, opts);
    // Sent while the receiver reads nothing: the sender's buffer fills, and each send waits
    // for room (no spinning on `Full`) — the reader below makes it.
    std::thread::scope(|scope| {
        let sender = scope.spawn(|| {
            for i in 0..300u32 {
                let m = [(ProcId(1), Bytes::copy_from_slice(&i.to_le_bytes()))];
                eps[0].send_reliable_timeout(&m, PATIENCE).unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(200));
        // Then read in batches of at most 64: all 300, in order, none lost.
        let deadline = Instant::now() + PATIENCE;
        let mut got = Vec::new();
        while got.len() < 300 {
            assert!(Instant::now() < deadline, "{} of 300", got.len());
            let before = got.len();
            let inbox = eps[1].reliable();
            match inbox.recv(Duration::from_millis(100)) {
                Ok(first) => {
                    got.push(first);
                    let n = 1 + inbox.poll(63, |m| got.push(m));
                    assert!(n == got.len() - before && (1..=64).contains(&n));
                }
                Err(RecvError::Timeout) => assert_eq!(got.len(), before),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(
            got.iter().map(id).collect::<Vec<_>>(),
            (0..300).map(|i| (0, i)).collect::<Vec<_>>()
        );
        sender.join().expect("every send found room");
    });
    assert_eq!(eps[1].reliable().try_recv(), Err(RecvError::Empty));
    assert_eq!(eps[0].try_next_event(), Err(RecvError::Empty), "no failure");
}

/// §6.1 flow control without spinning: with the best-effort window full (256 KiB of 64 KiB
/// messages unacknowledged), `send_unreliable` is refused, and `send_unreliable_timeout` waits
/// until acknowledgements free the window, then sends. Batches: `Inbox::poll` hands over
/// what is delivered, in order, at most `limit` at a time, and 0 when nothing is.
#[test]
fn a_blocking_send_waits_for_the_window_and_polls_take_batches_in_order_6_1() {
    let local = one_rack(2);
    let eps = join_all(local.controller_addr(), 2, local.join_options());
    let big = Bytes::from(vec![7u8; 64 << 10]);
    let mut refused = false;
    for _ in 0..1_000 {
        match eps[0].send_unreliable(&[(ProcId(1), big.clone())]) {
            Ok(_) => {}
            Err(SendError::Full) => {
                refused = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused, "a 256 KiB window holds a few 64 KiB messages");
    for _ in 0..20 {
        eps[0]
            .send_unreliable_timeout(&[(ProcId(1), big.clone())], PATIENCE)
            .unwrap();
    }
    // Small messages, then batches.
    for i in 0..200u32 {
        let m = [(ProcId(1), Bytes::copy_from_slice(&i.to_le_bytes()))];
        eps[0].send_unreliable_timeout(&m, PATIENCE).unwrap();
    }
    let deadline = Instant::now() + PATIENCE;
    let mut small = Vec::new();
    let mut big_seen = 0;
    while small.len() < 200 {
        assert!(Instant::now() < deadline, "{} of 200", small.len());
        let n = eps[1].best_effort().poll(50, |m| {
            if m.payload.len() == 4 {
                small.push(id(&m));
            } else {
                big_seen += 1;
            }
        });
        assert!(n <= 50);
        if n == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert_eq!(small, (0..200).map(|i| (0, i)).collect::<Vec<_>>());
    assert!(big_seen > 0);
    assert_eq!(eps[1].best_effort().poll(50, |_| panic!("nothing left")), 0);
    assert_eq!(eps[0].stats().host.send_failed, 0, "{:?}", eps[0].stats());
}

/// The baseline: the same transport, delivery on arrival, no reliable service.
#[test]
fn the_unordered_baseline_delivers_on_arrival_and_has_no_reliable_service() {
    let mut cluster = Cluster::generate(&LocalLayout {
        hosts: 2,
        layers: 2,
        rack_size: 1,
        ..LocalLayout::default()
    })
    .unwrap();
    cluster.ordered = false;
    let local = LocalCluster::with_cluster(cluster).unwrap();
    let eps = join_all(local.controller_addr(), 2, local.join_options());
    assert_eq!(
        eps[0].send_reliable(&[(ProcId(1), "x".into())]),
        Err(SendError::Unsupported)
    );
    for i in 0..20u32 {
        eps[0]
            .send_unreliable(&[
                (ProcId(1), Bytes::copy_from_slice(&i.to_le_bytes())),
                (ProcId(0), Bytes::copy_from_slice(&i.to_le_bytes())),
            ])
            .unwrap();
    }
    assert_eq!(receive(&eps[1], false, 20).len(), 20);
    assert_eq!(receive(&eps[0], false, 20).len(), 20);
    assert_eq!(eps[0].barrier(), None);
    assert_eq!(eps[1].stats().host.beacons_sent, 0);
}

/// The controller gives out the lowest free id, refuses a taken one, answers `Status`, and
/// counts a garbage line without dropping the connection (the JSON lines themselves: a cluster
/// without TLS, `auth = "off"`).
#[test]
fn the_controller_assigns_ids_refuses_a_taken_one_and_counts_garbage() {
    let mut cluster = Cluster::generate(&LocalLayout {
        hosts: 2,
        layers: 1,
        ..LocalLayout::default()
    })
    .unwrap();
    cluster.auth = Some(AuthConfig::off());
    let local = LocalCluster::with_cluster(cluster).unwrap();
    let controller = local.controller_addr();
    let first = std::thread::spawn(move || Endpoint::join(controller, JoinOptions::default()));
    // Wait until p0 is taken, then ask for it again.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (members, _) = ControlClient::status(controller, PATIENCE, None).unwrap();
        if members.iter().any(|m| {
            m.member == onepipe_runtime::control::Member::Process(0) && m.state != "waiting"
        }) {
            break;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    let taken = Endpoint::join(
        controller,
        JoinOptions {
            proc: Some(0),
            ..JoinOptions::default()
        },
    );
    assert!(matches!(taken, Err(JoinError::Refused(_))), "{taken:?}");
    let second = Endpoint::join(controller, JoinOptions::default()).unwrap();
    let first = first.join().unwrap().unwrap();
    assert_eq!((first.proc(), second.proc()), (ProcId(0), ProcId(1)));
    assert!(first.timestamp() > Timestamp::new(0));

    let mut junk = TcpStream::connect(controller).unwrap();
    junk.write_all(b"\x00\xffnot json\n{\"type\":\"status\"}\n")
        .unwrap();
    let mut r = BufReader::new(junk.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.contains("error"), "{line}");
    line.clear();
    r.read_line(&mut line).unwrap();
    let reply: FromController = serde_json::from_str(&line).unwrap();
    let FromController::Status {
        members, malformed, ..
    } = reply
    else {
        panic!("{reply:?}");
    };
    assert_eq!(malformed, 1);
    assert!(members.iter().filter(|m| m.state == "bound").count() >= 3);
    // p1 leaves: p0 hears of it.
    second.leave();
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(Instant::now() < deadline, "no notice");
        if let Ok(Event::ProcessFailed { proc, reason, .. }) =
            first.next_event_timeout(Duration::from_millis(100))
        {
            assert_eq!(
                (proc, reason),
                (ProcId(1), onepipe_runtime::FailReason::Left)
            );
            break;
        }
    }
}

/// docs/SECURITY.md: on a protected cluster (the default) a stranger speaking plain JSON is told
/// that TLS is required and turned away; a certificate of the cluster's CA is taken only in
/// the names it holds; every refusal is counted.
#[test]
fn a_member_is_taken_only_in_the_names_its_certificate_holds() {
    let local = one_rack(2);
    let controller = local.controller_addr();
    // A stranger without TLS.
    let mut junk = TcpStream::connect(controller).unwrap();
    junk.write_all(b"{\"type\":\"status\"}\n").unwrap();
    let mut line = String::new();
    BufReader::new(junk).read_line(&mut line).unwrap();
    assert!(line.contains("requires TLS"), "{line}");
    // p1's certificate asking for p0, then for any id: refused; for p1: welcome.
    let p1 = local.credentials(&["p1"]).unwrap();
    let as_p = |want: Option<u32>| {
        let mut c = ControlClient::connect(controller, PATIENCE, p1.as_ref()).unwrap();
        c.join(onepipe_runtime::control::JoinAs::Process(want), PATIENCE)
    };
    let refused = as_p(Some(0));
    assert!(
        matches!(&refused, Err(JoinError::Refused(why)) if why.contains("does not name p0")),
        "{refused:?}"
    );
    assert!(matches!(
        as_p(Some(1)),
        Ok((onepipe_runtime::control::Member::Process(1), _))
    ));
    // An aggregator's name is not a process's.
    let tor = local.credentials(&["tor-0"]).unwrap();
    let mut c = ControlClient::connect(controller, PATIENCE, tor.as_ref()).unwrap();
    let refused = c.join(onepipe_runtime::control::JoinAs::Process(None), PATIENCE);
    assert!(matches!(refused, Err(JoinError::Refused(_))), "{refused:?}");
    let operator = local
        .credentials(&[onepipe_runtime::tls::OPERATOR])
        .unwrap();
    let (_, malformed) = ControlClient::status(controller, PATIENCE, operator.as_ref()).unwrap();
    assert!(malformed >= 2, "{malformed}");
    local.stop();
}

/// Issue 35: one merged stream across both services for an application that wants it. Two
/// endpoints each send best-effort and reliable broadcasts, interleaved; each takes every
/// message from `recv_merged`, and both see the same sequence, ordered by (timestamp,
/// sender) across the services.
#[test]
fn the_merged_stream_orders_both_services_by_timestamp() {
    let local = one_rack(2);
    let eps = join_all(local.controller_addr(), 2, local.join_options());
    const N: usize = 50;
    for k in 0..N {
        for e in &eps {
            let body = format!("{k}");
            match k % 2 {
                0 => e.broadcast_unreliable(body).map(|_| ()),
                _ => e.broadcast_reliable(body).map(|_| ()),
            }
            .unwrap();
        }
    }
    let streams: Vec<Vec<(Timestamp, ProcId, bool)>> = eps
        .iter()
        .map(|e| {
            (0..2 * N)
                .map(|_| {
                    let m = e.recv_merged(PATIENCE).expect("a merged message");
                    (m.ts, m.src, m.reliable)
                })
                .collect()
        })
        .collect();
    assert_eq!(streams[0], streams[1], "one merged order");
    let keys: Vec<(Timestamp, ProcId)> = streams[0].iter().map(|&(ts, src, _)| (ts, src)).collect();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "timestamp order: {keys:?}"
    );
    assert_eq!(
        streams[0].iter().filter(|m| m.2).count(),
        N,
        "both services"
    );
    for e in eps {
        e.leave();
    }
    local.stop();
}

/// Issue 35: a join that times out because the cluster has not started says how far it got:
/// how many of its processes and aggregators had joined.
#[test]
fn a_join_that_times_out_names_how_many_of_how_many_joined() {
    let local = one_rack(3);
    let opts = JoinOptions {
        join_timeout: Duration::from_secs(2),
        ..local.join_options()
    };
    let err = Endpoint::join(local.controller_addr(), opts).expect_err("alone, never ready");
    assert!(
        matches!(
            err,
            JoinError::NotReady {
                processes: (1, 3),
                aggregators: (1, 1)
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("1 of 3 processes"), "{err}");
    local.stop();
}

// ---------------------------------------------------------------------------------------------
// §2.2.2: plain messages, beside the ordered ones.
// ---------------------------------------------------------------------------------------------

/// A one-rack cluster of `hosts` whose aggregator never times a silent input out: a process
/// that stops holds every barrier where it left it.
fn one_rack_without_link_timeout(hosts: u32) -> LocalCluster {
    let mut cluster = Cluster::generate(&LocalLayout {
        hosts,
        layers: 1,
        ..LocalLayout::default()
    })
    .unwrap();
    cluster.link_timeout_ns = 0;
    LocalCluster::with_cluster(cluster).unwrap()
}

/// Waits until `e` has no send unacknowledged (every message it sent reached its receiver's
/// role, which acknowledges on arrival, before any barrier).
fn wait_acknowledged(e: &Endpoint) {
    let deadline = Instant::now() + PATIENCE;
    while e.pending_sends() > 0 {
        assert!(
            Instant::now() < deadline,
            "{} sends unacknowledged",
            e.pending_sends()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// §2.2.2 "the response message does not need to be ordered by 1Pipe": p2 stops, so the
/// barrier stops below everything sent after (no link timeout takes it out). An ordered message
/// p0 sends p1 is acknowledged — it is in p1's reorder buffer — and held there; a plain one p0
/// sends after it, on the same path, is delivered at once, above the barrier. The barrier never
/// moved for it, and the ordered queue saw nothing of it.
#[test]
fn a_plain_message_is_delivered_while_an_ordered_one_before_it_waits_for_the_barrier_2_2_2() {
    let local = one_rack_without_link_timeout(3);
    let mut eps = join_all(local.controller_addr(), 3, local.join_options());
    eps.pop().unwrap().kill();
    let (p0, p1) = (&eps[0], &eps[1]);
    let ordered_ts = p0.send_unreliable([(ProcId(1), "ordered")]).unwrap();
    wait_acknowledged(p0);
    let plain_ts = p0.send_plain([(ProcId(1), "plain")]).unwrap();
    assert!(ordered_ts < plain_ts);
    let m = p1.plain().recv(PATIENCE).expect("the plain message");
    assert_eq!(
        (&m.payload[..], m.src, m.ts),
        (&b"plain"[..], ProcId(0), plain_ts)
    );
    assert!(!m.ordered && !m.reliable);
    assert!(
        m.barrier < ordered_ts,
        "delivered with the barrier below both: {m:?}"
    );
    assert!(
        p1.barrier().is_none_or(|b| b <= ordered_ts),
        "{:?}",
        p1.barrier()
    );
    assert_eq!(
        p1.best_effort().try_recv(),
        Err(RecvError::Empty),
        "the ordered one waits"
    );
    wait_acknowledged(p0);
    assert_eq!(p1.best_effort().try_recv(), Err(RecvError::Empty));
    let s = p1.stats();
    assert_eq!((s.host.delivered_plain, s.host.delivered), (1, 0));
    assert_eq!(
        (p0.stats().host.plain_sent, p0.stats().host.messages_sent),
        (1, 1)
    );
    for e in eps {
        e.leave();
    }
    local.stop();
}

/// §2.1, §2.2.2: with plain broadcasts interleaved between ordered ones, every process still
/// delivers every ordered broadcast in one (timestamp, sender) order, the same everywhere —
/// the ordered queue holds ordered messages only — and gets every plain one exactly once from
/// the plain queue.
#[test]
fn ordered_messages_keep_one_total_order_with_plain_ones_interleaved_2_1_2_2_2() {
    let local = LocalCluster::start(&LocalLayout {
        hosts: 3,
        layers: 2,
        rack_size: 2,
        ..LocalLayout::default()
    })
    .unwrap();
    let eps = join_all(local.controller_addr(), 3, local.join_options());
    const EACH: u32 = 60;
    let body = |kind: u8, i: u32| {
        let mut b = vec![kind];
        b.extend_from_slice(&i.to_le_bytes());
        Bytes::from(b)
    };
    let runs: Vec<_> = eps
        .into_iter()
        .map(|e| {
            std::thread::spawn(move || {
                for i in 0..EACH {
                    // Plain before or after the ordered one, by turns.
                    if i % 2 == 0 {
                        e.broadcast_plain(body(b'p', i)).unwrap();
                    }
                    e.broadcast_unreliable(body(b'o', i)).unwrap();
                    if i % 2 == 1 {
                        e.broadcast_plain(body(b'p', i)).unwrap();
                    }
                    if i % 10 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                let (mut ordered, mut plain) = (Vec::new(), Vec::new());
                let deadline = Instant::now() + PATIENCE;
                let want = 3 * EACH as usize;
                while ordered.len() < want || plain.len() < want {
                    assert!(
                        Instant::now() < deadline,
                        "{} + {}",
                        ordered.len(),
                        plain.len()
                    );
                    e.best_effort().poll(64, |m| ordered.push(m));
                    e.plain().poll(64, |m| plain.push(m));
                    std::thread::sleep(Duration::from_micros(200));
                }
                let stats = e.leave();
                (ordered, plain, stats)
            })
        })
        .collect();
    let runs: Vec<_> = runs.into_iter().map(|t| t.join().unwrap()).collect();
    let mut first: Option<Vec<(u32, u32)>> = None;
    for (ordered, plain, stats) in &runs {
        let key = |m: &Message| {
            (
                m.payload[0],
                m.src.0,
                u32::from_le_bytes(m.payload[1..5].try_into().unwrap()),
            )
        };
        assert!(
            ordered.iter().all(|m| m.ordered && key(m).0 == b'o'),
            "only ordered ones"
        );
        assert!(
            plain.iter().all(|m| !m.ordered && key(m).0 == b'p'),
            "only plain ones"
        );
        // As in the test above: equal (timestamp, sender) keys keep the sender's order.
        for w in ordered.windows(2) {
            let (a, b) = (key(&w[0]), key(&w[1]));
            let tie = (w[0].ts, w[0].src) == (w[1].ts, w[1].src) && a.2 < b.2;
            assert!(
                (w[0].ts, w[0].src) < (w[1].ts, w[1].src) || tie,
                "out of order: {a:?} then {b:?}"
            );
        }
        assert!(ordered
            .iter()
            .all(|m| m.ts < m.barrier && m.ts < m.delivered_ts));
        let seq: Vec<(u32, u32)> = ordered.iter().map(|m| (key(m).1, key(m).2)).collect();
        match &first {
            None => first = Some(seq),
            Some(f) => assert_eq!(&seq, f, "one total order"),
        }
        let mut got: Vec<(u32, u32)> = plain.iter().map(|m| (key(m).1, key(m).2)).collect();
        got.sort_unstable();
        let all: Vec<(u32, u32)> = (0..3)
            .flat_map(|s| (0..EACH).map(move |i| (s, i)))
            .collect();
        assert_eq!(got, all, "every plain message once");
        assert_eq!(stats.host.dropped_late, 0);
        assert_eq!(stats.host.delivered_plain, 3 * u64::from(EACH));
        assert_eq!(stats.host.plain_sent, 3 * u64::from(EACH));
    }
    local.stop();
}

/// §2.1: "detects lost packets via end-to-end ACK, but does not retransmit them" — a plain
/// message is reported as a best-effort one is. tor-0 drops what p0 sends p1 (the runtime's
/// test fault, as `onepipe up --blackhole 0>1`): p0's plain message is never acknowledged and
/// reported `Lost` to p0, naming p1 and its timestamp; the other direction still works.
#[test]
fn a_lost_plain_message_is_reported_to_its_sender_2_1() {
    use onepipe_runtime::aggregator::Fault;
    let local = one_rack(2);
    let eps = join_all(local.controller_addr(), 2, local.join_options());
    local
        .inject_fault(
            "tor-0",
            Fault::Blackhole {
                from: ProcId(0),
                to: ProcId(1),
            },
        )
        .unwrap();
    let ts = eps[0].send_plain([(ProcId(1), "into the void")]).unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(Instant::now() < deadline, "the loss was never reported");
        match eps[0].next_event_timeout(Duration::from_millis(100)) {
            Ok(Event::SendFailed {
                dst,
                ts: lost,
                reason,
            }) => {
                assert_eq!((dst, lost, reason), (ProcId(1), ts, NakReason::Lost));
                break;
            }
            Ok(_) | Err(RecvError::Timeout) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(eps[1].plain().try_recv(), Err(RecvError::Empty));
    assert_eq!(eps[0].stats().host.lost, 1);
    eps[1].send_plain([(ProcId(0), "back")]).unwrap();
    let m = eps[0].plain().recv(PATIENCE).unwrap();
    assert_eq!((&m.payload[..], m.src), (&b"back"[..], ProcId(1)));
    for e in eps {
        e.leave();
    }
    local.stop();
}

/// §4.1, bounded memory: the plain queue has room for `recv_queue_len_max` messages; a plain
/// message beyond that is refused by the role before it is acknowledged, and its sender gets
/// `SendFailed { reason: BufferFull }`. The ordered queue is untouched.
#[test]
fn a_full_plain_queue_refuses_and_the_sender_hears_of_it_4_1() {
    let local = one_rack(2);
    let opts = JoinOptions {
        recv_queue_len_max: 4,
        ..local.join_options()
    };
    let eps = join_all(local.controller_addr(), 2, opts);
    for i in 0..50u32 {
        eps[0]
            .send_plain([(ProcId(1), Bytes::copy_from_slice(&i.to_le_bytes()))])
            .unwrap();
    }
    let deadline = Instant::now() + PATIENCE;
    let mut failed = 0;
    while failed < 46 {
        assert!(Instant::now() < deadline, "{failed} send failures reported");
        match eps[0].next_event_timeout(Duration::from_millis(100)) {
            Ok(Event::SendFailed { dst, reason, .. }) => {
                assert_eq!((dst, reason), (ProcId(1), NakReason::BufferFull));
                failed += 1;
            }
            Ok(other) => panic!("{other:?}"),
            Err(_) => {}
        }
    }
    let got: Vec<_> = (0..4)
        .map(|_| id(&eps[1].plain().recv(PATIENCE).unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![(0, 0), (0, 1), (0, 2), (0, 3)],
        "in the order they arrived"
    );
    assert_eq!(eps[1].plain().try_recv(), Err(RecvError::Empty));
    assert_eq!(eps[1].best_effort().try_recv(), Err(RecvError::Empty));
    assert_eq!(eps[1].stats().recv_refused_full, 46);
    for e in eps {
        e.leave();
    }
    local.stop();
}

/// An application that asks its peer in the total order and answers unordered (§2.2.2, as
/// 1-RTT replication and the hash table's completions do).
struct Echo {
    out: std::collections::VecDeque<onepipe_proto::app::AppSend>,
    /// (sender, reliable, payload) of each delivery.
    got: Vec<(ProcId, bool, Vec<u8>)>,
    /// The tags it heard were sent.
    sent: Vec<u64>,
}

impl Echo {
    fn new(first: Option<onepipe_proto::app::AppSend>) -> Echo {
        Echo {
            out: first.into_iter().collect(),
            got: Vec::new(),
            sent: Vec::new(),
        }
    }
}

impl onepipe_proto::app::App for Echo {
    fn handle(&mut self, _now: onepipe_proto::Instant, input: onepipe_proto::app::AppInput<'_>) {
        match input {
            onepipe_proto::app::AppInput::Deliver {
                src,
                reliable,
                payload,
                ..
            } => {
                self.got.push((src, reliable, payload.to_vec()));
                if payload == b"request" {
                    // `reliable` is ignored for an unordered send: best effort.
                    self.out.push_back(onepipe_proto::app::AppSend {
                        tag: 2,
                        reliable: true,
                        ordered: false,
                        parts: vec![(src, Bytes::from_static(b"reply"))],
                    });
                }
            }
            onepipe_proto::app::AppInput::Sent { tag, .. } => self.sent.push(tag),
            _ => {}
        }
    }

    fn poll_send(&mut self) -> Option<onepipe_proto::app::AppSend> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<onepipe_proto::Instant> {
        None
    }
}

/// `AppHost` sends what an application marks unordered (`AppSend::ordered` false) as a plain
/// message, and hands a plain arrival to the application as the simulator does: a `Deliver`
/// with `reliable` false. The request goes in the total order, the reply outside it.
#[test]
fn apphost_sends_unordered_replies_plain_and_delivers_them_as_the_simulator_does_2_2_2() {
    use onepipe_runtime::apphost::AppHost;
    let local = one_rack(2);
    let eps = join_all(local.controller_addr(), 2, local.join_options());
    let request = onepipe_proto::app::AppSend {
        tag: 1,
        reliable: false,
        ordered: true,
        parts: vec![(ProcId(1), Bytes::from_static(b"request"))],
    };
    let (asker, answerer) = std::thread::scope(|scope| {
        let answerer = scope.spawn(|| {
            let mut host = AppHost::new(&eps[1], Echo::new(None));
            let done = host.run_until(PATIENCE, Duration::from_micros(200), |a| {
                a.sent.contains(&2)
            });
            assert!(done, "the reply was never sent");
            (host.stats().clone(), host.into_app())
        });
        let mut host = AppHost::new(&eps[0], Echo::new(Some(request)));
        let done = host.run_until(PATIENCE, Duration::from_micros(200), |a| !a.got.is_empty());
        assert!(done, "no reply");
        let asker = (host.stats().clone(), host.into_app());
        (asker, answerer.join().unwrap())
    });
    assert_eq!(
        answerer.1.got,
        vec![(ProcId(0), false, b"request".to_vec())]
    );
    assert_eq!((answerer.0.delivered_be, answerer.0.sent_plain), (1, 1));
    assert_eq!(asker.1.got, vec![(ProcId(1), false, b"reply".to_vec())]);
    assert_eq!(asker.1.sent, vec![1]);
    assert_eq!(
        (
            asker.0.delivered_plain,
            asker.0.delivered_be,
            asker.0.sent_plain
        ),
        (1, 0, 0),
        "the reply came by the plain queue"
    );
    assert_eq!(eps[0].stats().host.delivered_plain, 1);
    for e in eps {
        e.leave();
    }
    local.stop();
}

/// `wait_activity` sleeps until something an application may act on happens, and misses
/// nothing that happened after the count was read: a plain message sent once the waiter has
/// read the count wakes it, with the message already in its inbox.
#[test]
fn wait_activity_wakes_on_a_delivery_after_the_count_was_read() {
    let local = one_rack(2);
    let eps = join_all(local.controller_addr(), 2, local.join_options());
    let (a, b) = (&eps[0], &eps[1]);
    for _ in 0..20 {
        let seen = b.activity();
        a.send_plain(&[(ProcId(1), Bytes::from_static(b"ping"))])
            .unwrap();
        // Barriers published meanwhile also wake it: wait until the message is there.
        let t0 = std::time::Instant::now();
        let mut seen = seen;
        let got = loop {
            if let Ok(m) = b.plain().try_recv() {
                break m;
            }
            assert!(
                b.wait_activity(seen, PATIENCE),
                "no activity for {PATIENCE:?}"
            );
            seen = b.activity();
            assert!(t0.elapsed() < PATIENCE, "the message never came");
        };
        assert_eq!(&got.payload[..], b"ping");
    }
    drop(eps);
    local.stop();
}

/// Issue 39, PLATO's hooks on 1Pipe: with optimistic delivery on, every best-effort message is
/// handed over optimistically, revoked at most until it is confirmed, and confirmed in the
/// final order: the confirms at each receiver are exactly its best-effort deliveries, in
/// order, and nothing is left tentative. The hooks are replayed here against PLATO §4.1's
/// view (confirmed, then the tentative ones in delivery order), not by the role's pipeline.
#[test]
fn optimistic_hooks_deliver_early_and_confirm_the_final_order_plato_4_1() {
    use onepipe_proto::optimistic::OptConfig;
    use onepipe_runtime::endpoint::Optimistic;
    let local = one_rack(3);
    let opts = JoinOptions {
        optimistic: Some(OptConfig::fixed(1_000)),
        ..local.join_options()
    };
    let eps = join_all(local.controller_addr(), 3, opts);
    const N: u32 = 100;
    for k in 0..N {
        for e in &eps {
            e.broadcast_unreliable(k.to_le_bytes().to_vec()).unwrap();
        }
    }
    let mut finals = Vec::new();
    for e in &eps {
        let delivered: Vec<(u32, u32)> = receive(e, false, 3 * N as usize).iter().map(id).collect();
        // Every confirm is queued before its delivery: all are there now.
        let (mut tentative, mut confirmed) = (Vec::<(Timestamp, ProcId)>::new(), Vec::new());
        let (mut names, mut optimistic) = (std::collections::HashMap::new(), 0);
        loop {
            match e.try_recv_optimistic() {
                Ok(Optimistic::Deliver { message: m, .. }) => {
                    let key = (m.ts, m.src);
                    assert!(
                        !tentative.contains(&key),
                        "delivered twice without a revoke"
                    );
                    assert!(!m.reliable && m.ordered);
                    names.insert(key, id(&m));
                    tentative.push(key);
                    optimistic += 1;
                }
                Ok(Optimistic::Revoke { ts, src, .. }) => {
                    let at = tentative.iter().position(|k| *k == (ts, src));
                    tentative.remove(at.expect("a revoke names a tentative message"));
                }
                Ok(Optimistic::Confirm { ts, src, .. }) => {
                    assert_eq!(
                        tentative.first(),
                        Some(&(ts, src)),
                        "confirms in view order"
                    );
                    confirmed.push(names[&tentative.remove(0)]);
                }
                Ok(other) => panic!("{other:?}"),
                Err(RecvError::Empty) => break,
                Err(err) => panic!("{err}"),
            }
        }
        assert!(
            optimistic >= 3 * N,
            "every message is handed over optimistically"
        );
        assert!(tentative.is_empty(), "left tentative: {tentative:?}");
        assert_eq!(
            confirmed,
            delivered,
            "p{}: confirmed = final order",
            e.proc()
        );
        finals.push(delivered);
    }
    assert!(finals.windows(2).all(|w| w[0] == w[1]), "one total order");
    for e in eps {
        e.leave();
    }
    local.stop();
}
