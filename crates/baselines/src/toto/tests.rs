//! Tests of the causal layer, ToTo's rules (named after the paper's sections) and the whole
//! endpoint on a tiny hand-driven network.

use super::causal::{CausalConfig, CausalLayer, CausalMsg};
use super::dag::{Dag, MsgId};
use super::toto::{self, default_phi, future, win, Vt, Win};
use super::{allack, Rule, TotoConfig, TotoEndpoint};
use crate::common::{BaseEvent, BaseStats, Endpoint};
use crate::dests::Dests;
use crate::packet::{BasePacket, Body};
use bytes::Bytes;
use onepipe_proto::ids::ProcId;
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::Instant;
use proptest::prelude::*;
use std::collections::BTreeMap;

const A: u32 = 0;
const B: u32 = 1;
const C: u32 = 2;
const D: u32 = 3;
const E: u32 = 4;

/// A message for a hand-built DAG: `m_{origin,seq}` with vector time `vt`.
fn msg(origin: u32, seq: u64, vt: [u64; 5], agreed: bool) -> CausalMsg {
    assert_eq!(vt[origin as usize], seq);
    CausalMsg {
        origin: ProcId(origin),
        seq,
        vt: vt.to_vec().into(),
        agreed,
        payload: Bytes::new(),
    }
}

fn id(origin: u32, seq: u64) -> MsgId {
    (ProcId(origin), seq)
}

fn procs(list: &[u32]) -> Vec<ProcId> {
    list.iter().map(|&p| ProcId(p)).collect()
}

/// The DAG of the paper's Figure 1 at machine p, with `m_{a,1}`, `m_{d,1}` and `m_{e,1}`
/// delivered (§4.1). `m_{d,2}` ACKs `m_{c,1}` and `m_{e,2}` (§2.1's example); `m_{a,2}`
/// follows the three candidates, `m_{d,3}` follows `m_{a,2}`; `m_{b,2}` and `m_{c,2}` follow
/// only their senders' first messages. Agreed: the candidates and `m_{c,2}`.
fn figure_1() -> Dag {
    let mut dag = Dag::new(5, 64);
    dag.add(msg(A, 1, [1, 0, 0, 0, 0], true));
    dag.add(msg(E, 1, [0, 0, 0, 0, 1], true));
    dag.add(msg(D, 1, [1, 0, 0, 1, 0], true));
    dag.deliver(&[id(A, 1), id(E, 1)]);
    dag.deliver(&[id(D, 1)]);
    dag.add(msg(B, 1, [1, 1, 0, 0, 0], true));
    dag.add(msg(C, 1, [1, 0, 1, 0, 0], true));
    dag.add(msg(E, 2, [1, 0, 0, 1, 2], true));
    dag.add(msg(A, 2, [2, 1, 1, 1, 2], false));
    dag.add(msg(B, 2, [1, 2, 0, 0, 0], false));
    dag.add(msg(C, 2, [1, 0, 2, 0, 0], true));
    dag.add(msg(D, 2, [1, 0, 1, 2, 2], false));
    dag.add(msg(D, 3, [2, 1, 1, 3, 2], false));
    dag
}

#[test]
fn table_1_is_reproduced_row_by_row_4_1() {
    let dag = figure_1();
    let rows = toto::table(&dag);
    let inf = Vt::Inf;
    let at = Vt::At;
    // (candidate, Tail_p, NTail_p, VT_p, NVT_p), as printed in Table 1.
    let table_1 = [
        (id(B, 1), vec![A, B, D], 3, [at(2), at(1), inf, inf, inf], 2),
        (
            id(C, 1),
            vec![A, C, D],
            3,
            [at(2), inf, at(1), at(2), inf],
            3,
        ),
        (
            id(E, 2),
            vec![A, D, E],
            3,
            [at(2), inf, inf, at(2), at(2)],
            3,
        ),
    ];
    assert_eq!(
        rows.len(),
        table_1.len(),
        "the candidate set is {{b1, c1, e2}}"
    );
    for (row, (cand, tail, ntail, vt, nvt)) in rows.iter().zip(table_1) {
        assert_eq!(row.id, cand);
        assert_eq!(row.tail, procs(&tail), "Tail of {cand:?}");
        assert_eq!(row.ntail(), ntail, "NTail of {cand:?}");
        assert_eq!(row.vt, vt, "VT of {cand:?}");
        assert_eq!(row.nvt(), nvt, "NVT of {cand:?}");
    }
    // m_{c,2} is pending but follows m_{c,1}: not a candidate.
    assert!(dag
        .candidates()
        .iter()
        .all(|m| (m.origin, m.seq) != id(C, 2)));
    assert_eq!(dag.tail(), procs(&[A, B, C, D, E]));
}

#[test]
fn figure_1_delivers_its_three_sources_in_lexicographical_order_4_2() {
    let dag = figure_1();
    for phi in [3, 4] {
        let rows = toto::table(&dag);
        // Every entry is decided and no candidate beats another on more than φ: all sources.
        assert_eq!(toto::sources(&rows, phi), vec![0, 1, 2]);
        assert_eq!(
            toto::decide(&dag, phi),
            Some(vec![id(B, 1), id(C, 1), id(E, 2)]),
            "(DEL) 2(b): NTail_p = n"
        );
    }
    assert_eq!(
        allack::decide(&dag),
        Some(vec![id(B, 1), id(C, 1), id(E, 2)])
    );
}

#[test]
fn win_needs_more_than_phi_entries_4_1() {
    let (at, inf, bot) = (Vt::At, Vt::Inf, Vt::Bottom);
    let v1 = [at(1), at(1), at(1), bot];
    let v2 = [inf, inf, at(2), bot];
    assert_eq!(win(&v1, &v2, 2), Win::One);
    assert_eq!(win(&v2, &v1, 2), Win::Zero);
    assert_eq!(win(&v1, &v2, 3), Win::Undecided);
    // ⊥ compares with nothing; ∞ is not below ∞.
    assert_eq!(win(&[bot, inf], &[at(1), inf], 0), Win::Undecided);
}

#[test]
fn future_says_what_win_may_still_become_4_1() {
    let (at, inf, bot) = (Vt::At, Vt::Inf, Vt::Bottom);
    // n = 4, φ = 2: two entries undecided, one each way.
    let v1 = [at(1), inf, bot, bot];
    let v2 = [inf, at(1), bot, bot];
    let f = future(&v1, &v2, 2);
    assert!(f.one && f.zero && f.undecided);
    // Three entries for v1: Win is 1 for good.
    let v1 = [at(1), at(1), at(1), bot];
    let v2 = [inf, inf, inf, bot];
    assert!(future(&v1, &v2, 2).is_only_one());
    let back = future(&v2, &v1, 2);
    assert!(!back.one && back.zero && !back.undecided);
}

/// Machine 0's and 1's first messages are concurrent candidates among n = 4 (φ = 2); `then`
/// adds, in order, which machines next send a message following only `m_{0,1}`.
fn two_candidates(then: &[u32]) -> Dag {
    let mut dag = Dag::new(4, 64);
    let vt = |v: [u64; 4]| -> std::sync::Arc<[u64]> { v.to_vec().into() };
    let add = |dag: &mut Dag, origin: u32, seq: u64, v: [u64; 4], agreed: bool| {
        dag.add(CausalMsg {
            origin: ProcId(origin),
            seq,
            vt: vt(v),
            agreed,
            payload: Bytes::new(),
        })
    };
    add(&mut dag, 0, 1, [1, 0, 0, 0], true);
    add(&mut dag, 1, 1, [0, 1, 0, 0], true);
    for &q in then {
        let mut v = [0; 4];
        v[0] = 1;
        v[q as usize] = if q == 0 { 2 } else { 1 };
        add(&mut dag, q, v[q as usize], v, false);
    }
    dag
}

#[test]
fn a_candidate_that_may_still_lose_is_no_source_and_waits_4_2() {
    // Machines 0 and 2 heard m_{0,1} first: m_{1,1} may still lose, so it is no source; m_{0,1}
    // is, but (DEL) 1 fails while m_{1,1} is not beaten for good.
    let dag = two_candidates(&[0, 2]);
    let rows = toto::table(&dag);
    assert_eq!(toto::sources(&rows, 2), vec![0]);
    assert_eq!(toto::decide(&dag, 2), None);
    assert_eq!(
        allack::decide(&dag),
        None,
        "machine 1 and 3 have not spoken"
    );
}

#[test]
fn all_ack_waits_for_every_machine_then_delivers_the_candidates_1() {
    // A candidate counts for its own sender: machines 0, 1 and 2 have spoken, 3 not yet.
    assert_eq!(allack::decide(&two_candidates(&[0, 2])), None);
    // Where ToTo delivers m_{0,1} alone, all-ack delivers both candidates.
    let dag = two_candidates(&[0, 2, 3]);
    assert_eq!(allack::decide(&dag), Some(vec![id(0, 1), id(1, 1)]));
}

// --- The causal layer ------------------------------------------------------------------------

fn layer(id: u32, procs: u32) -> CausalLayer {
    CausalLayer::new(CausalConfig::new(ProcId(id), procs))
}

/// Everything `l` sends, by destination.
fn packets(l: &mut CausalLayer) -> BTreeMap<u32, Vec<BasePacket>> {
    let mut m: BTreeMap<u32, Vec<BasePacket>> = BTreeMap::new();
    while let Some(p) = l.poll_packet() {
        m.entry(p.dst.0).or_default().push(p);
    }
    m
}

fn packets_to(l: &mut CausalLayer, dst: u32) -> Vec<BasePacket> {
    packets(l).remove(&dst).unwrap_or_default()
}

fn delivered(l: &mut CausalLayer) -> Vec<MsgId> {
    std::iter::from_fn(|| l.poll_deliver())
        .map(|m| (m.origin, m.seq))
        .collect()
}

const ROOM: &dyn Fn(ProcId) -> usize = &|_| usize::MAX;

#[test]
fn a_missing_predecessor_is_nacked_and_retransmitted_2_1() {
    let t = Instant(0);
    let mut stats = BaseStats::default();
    let (mut l0, mut l1, mut l2) = (layer(0, 3), layer(1, 3), layer(2, 3));
    l0.send(t, true, Bytes::new());
    let to1 = packets_to(&mut l0, 1);
    l1.on_packet(t, to1[0].clone(), &mut stats, ROOM);
    l1.send(t, true, Bytes::new());
    let from1 = packets_to(&mut l1, 2);
    l2.on_packet(t, from1[0].clone(), &mut stats, ROOM);
    // Nothing asked before retry_ns; then a NACK to the origin.
    let retry = l2.config().retry_ns;
    l2.on_timeout(t + retry / 2, &mut stats);
    assert!(packets_to(&mut l2, 0).is_empty());
    assert_eq!(l2.poll_timeout(), Some(t + retry));
    l2.on_timeout(t + retry, &mut stats);
    let nack = packets_to(&mut l2, 0);
    assert_eq!(
        nack[0].body,
        Body::CausalNack {
            origin: ProcId(0),
            seq: 1,
            count: 1
        }
    );
    // The next ask goes to the machine that revealed it, which holds it.
    l2.on_timeout(t + 2 * retry, &mut stats);
    let nack = packets_to(&mut l2, 1);
    assert_eq!(nack.len(), 1);
    l1.on_packet(t, nack[0].clone(), &mut stats, ROOM);
    let resent = packets_to(&mut l1, 2);
    assert!(matches!(resent[0].body, Body::Causal { origin, seq: 1, .. } if origin == ProcId(0)));
    l2.on_packet(t, resent[0].clone(), &mut stats, ROOM);
    assert_eq!(delivered(&mut l2), vec![id(0, 1), id(1, 1)]);
    assert_eq!(stats.nacks_sent, 2);
}

#[test]
fn an_idle_machine_heartbeats_after_an_agreed_message_and_only_then() {
    let t = Instant(0);
    let mut stats = BaseStats::default();
    let (mut l0, mut l1) = (layer(0, 2), layer(1, 2));
    l0.send(t, true, Bytes::new());
    l1.on_packet(t, packets_to(&mut l0, 1)[0].clone(), &mut stats, ROOM);
    let idle = l1.config().idle_ns;
    assert_eq!(l1.poll_timeout(), Some(t + idle));
    assert!(l1.on_timeout(t + idle, &mut stats), "a heartbeat is due");
    l1.send(t + idle, false, Bytes::new());
    // Machine 0 takes the heartbeat in: it owes a status, never a heartbeat back.
    l0.on_packet(t, packets_to(&mut l1, 0)[0].clone(), &mut stats, ROOM);
    assert!(!l0.on_timeout(t + idle, &mut stats));
    let status = packets_to(&mut l0, 1);
    assert!(matches!(status[0].body, Body::CausalStatus { .. }));
    l1.on_packet(t, status[0].clone(), &mut stats, ROOM);
    assert!(
        l0.is_idle() && l1.is_idle(),
        "everything stable, nothing owed"
    );
}

/// An own message nobody shows delivered is sent again after `retry_ns`, then after twice as
/// long each time, up to the heartbeat interval (a machine that took it in answers within
/// that); with the heartbeat below the retry interval (the default) the pace stays `retry_ns`.
#[test]
fn resends_back_off_up_to_the_heartbeat_interval() {
    let resend_times = |idle_ns: u64| {
        let mut cfg = CausalConfig::new(ProcId(0), 2);
        cfg.retry_ns = 100;
        cfg.idle_ns = idle_ns;
        let mut l = CausalLayer::new(cfg);
        let mut stats = BaseStats::default();
        l.send(Instant(0), true, Bytes::new());
        packets(&mut l);
        let mut at = Vec::new();
        while let Some(t) = l.poll_timeout().filter(|t| t.0 <= 5_000) {
            l.on_timeout(t, &mut stats);
            if !packets_to(&mut l, 1).is_empty() {
                at.push(t.0);
            }
        }
        at
    };
    assert_eq!(
        resend_times(1_000),
        [100, 300, 700, 1_500, 2_500, 3_500, 4_500]
    );
    assert_eq!(
        resend_times(20),
        (1..=50).map(|k| k * 100).collect::<Vec<u64>>()
    );
}

// --- Whole endpoints on a tiny network -------------------------------------------------------

/// A hand-driven network of endpoints: packets in flight are taken in an order the test's
/// choices decide.
struct Net {
    nodes: Vec<TotoEndpoint>,
    flight: Vec<BasePacket>,
    now: Instant,
    /// Per machine, its deliveries: (sender, sender's counter, key).
    log: Vec<Vec<(u32, u64, u64)>>,
    /// Per message (sender, counter): what its sender had delivered when it sent it, per
    /// machine the latest counter.
    deps: BTreeMap<(u32, u64), Vec<u64>>,
    /// Per machine, the latest counter delivered from each machine.
    seen: Vec<Vec<u64>>,
    sent: Vec<u64>,
}

impl Net {
    fn new(n: u32, rule: Rule) -> Net {
        let nodes = (0..n)
            .map(|i| {
                let mut cfg = TotoConfig::new(ProcId(i), n, rule);
                cfg.causal.window = 16;
                cfg.causal.unstable_len_max = 8;
                TotoEndpoint::new(cfg).expect("valid φ")
            })
            .collect();
        Net {
            nodes,
            flight: Vec::new(),
            now: Instant(0),
            log: vec![Vec::new(); n as usize],
            deps: BTreeMap::new(),
            seen: vec![vec![0; n as usize]; n as usize],
            sent: vec![0; n as usize],
        }
    }

    fn drain(&mut self, i: usize) {
        while let Some(o) = self.nodes[i].poll_output() {
            match o {
                Output::Send { packet, .. } => self.flight.push(packet),
                Output::Event(BaseEvent::Deliver {
                    dst,
                    src,
                    seq_or_ts,
                    payload,
                }) => {
                    let counter = u64::from_be_bytes(payload[..8].try_into().unwrap());
                    let d = dst.index();
                    // Causal order, judged from what each sender had delivered when it sent.
                    let deps = &self.deps[&(src.0, counter)];
                    for (s, &need) in deps.iter().enumerate() {
                        assert!(
                            self.seen[d][s] >= need,
                            "machine {d} delivered ({}, {counter}) before ({s}, {need})",
                            src.0
                        );
                    }
                    self.seen[d][src.index()] = counter;
                    self.log[d].push((src.0, counter, seq_or_ts));
                }
                Output::Event(e) => panic!("unexpected event {e:?}"),
            }
        }
    }

    fn send(&mut self, i: usize) {
        let counter = self.sent[i] + 1;
        let payload = Bytes::copy_from_slice(&counter.to_be_bytes());
        if self.nodes[i].send(self.now, payload, Dests::all()).is_ok() {
            self.sent[i] = counter;
            let mut deps = self.seen[i].clone();
            deps[i] = counter - 1;
            self.deps.insert((i as u32, counter), deps);
        }
        self.drain(i);
    }

    /// One step: take in the packet the choice names (dropping or duplicating it sometimes),
    /// or, with nothing in flight, fire the earliest timer.
    fn step(&mut self, choice: u32, lossy: bool) -> bool {
        self.now = self.now + 1_000;
        if !self.flight.is_empty() {
            let k = choice as usize % self.flight.len();
            let p = self.flight.swap_remove(k);
            if lossy && choice.is_multiple_of(13) {
                return true;
            }
            if lossy && choice.is_multiple_of(17) {
                self.flight.push(p.clone());
            }
            let d = p.dst.index();
            self.nodes[d].handle(
                self.now,
                Input::Packet {
                    port: crate::common::PORT,
                    packet: p,
                },
            );
            self.drain(d);
            return true;
        }
        let next = (0..self.nodes.len())
            .filter_map(|i| self.nodes[i].poll_timeout().map(|t| (t, i)))
            .min();
        let Some((t, i)) = next else { return false };
        self.now = self.now.max(t);
        self.nodes[i].handle(self.now, Input::Timeout);
        self.drain(i);
        true
    }

    fn run(&mut self, choices: &[u32], sends: &[(usize, u32)], lossy: bool) {
        let mut sends = sends.iter().peekable();
        for (step, &c) in choices.iter().enumerate() {
            while let Some(&&(at, who)) = sends.peek() {
                if at > step {
                    break;
                }
                self.send(who as usize % self.nodes.len());
                sends.next();
            }
            self.step(c, lossy);
        }
        for &(_, who) in sends {
            self.send(who as usize % self.nodes.len());
        }
        let mut k = 0u32;
        while self.step(k.wrapping_mul(2_654_435_761), false) {
            k += 1;
            assert!(k < 200_000, "no quiescence");
        }
        let busy = self.nodes.iter().find(|e| !e.is_idle());
        assert!(busy.is_none(), "not idle at the end: {busy:?}");
    }

    /// Every machine delivered everything sent, in one order with one key per message.
    fn check_agreement(&self) -> Vec<(u32, u64, u64)> {
        let total: u64 = self.sent.iter().sum();
        for l in &self.log {
            assert_eq!(
                l.len() as u64,
                total,
                "every machine delivers every message"
            );
            assert_eq!(l, &self.log[0], "same order and keys everywhere");
            assert!(l.windows(2).all(|w| (w[0].2, w[0].0) < (w[1].2, w[1].0)));
        }
        self.log[0].clone()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// ToTo(n, φ) for every φ in range and all-ack, over random interleavings (with some loss
    /// and duplication): each delivers every message, in one total order with one key per
    /// message at every machine, extending the causal order; the two deliver the same set.
    #[test]
    fn toto_and_all_ack_agree_at_every_machine_under_any_interleaving(
        n in 2u32..6,
        phi_pick in 0u32..8,
        choices in proptest::collection::vec(any::<u32>(), 0..300),
        sends in proptest::collection::vec((0usize..300, any::<u32>()), 1..24),
        lossy in any::<bool>(),
    ) {
        let mut sends = sends;
        sends.sort_unstable();
        let lo = default_phi(n);
        let phi = lo + phi_pick % (n - lo);
        let mut toto = Net::new(n, Rule::Toto { phi });
        toto.run(&choices, &sends, lossy);
        let mut all = Net::new(n, Rule::AllAck);
        all.run(&choices, &sends, lossy);
        let a = toto.check_agreement();
        let b = all.check_agreement();
        let set = |v: &[(u32, u64, u64)]| {
            let mut s: Vec<(u32, u64)> = v.iter().map(|&(p, c, _)| (p, c)).collect();
            s.sort_unstable();
            s
        };
        prop_assert_eq!(set(&a), set(&b));
    }
}

#[test]
fn a_send_must_go_to_every_machine() {
    let mut e = TotoEndpoint::new(TotoConfig::new(ProcId(0), 3, Rule::AllAck)).unwrap();
    assert_eq!(
        e.send(Instant(0), Bytes::new(), Dests::one(ProcId(1))),
        Err(crate::common::BaseSendError::NoDestinations)
    );
    assert!(e.send(Instant(0), Bytes::new(), Dests::all()).is_ok());
}
