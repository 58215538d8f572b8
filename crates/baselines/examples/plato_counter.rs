//! A replicated register that consumes PLATO's optimistic deliveries and rolls back.
//!
//! Four processes update one register with operations that do not commute (`x = 2x + k` and
//! `x = x - k`), so every replica must apply them in the same order. Each replica keeps the
//! *confirmed* value (operations applied in the total order, on `confirm`) and a list of
//! *tentative* operations (delivered by `optdeliver`, not yet confirmed); its optimistic value is
//! the tentative operations applied to the confirmed one. A `revoke` takes an operation out of
//! the list — a rollback if the replica had already used the value it gave (after Tm).
//!
//! The processes run in one program over a small simulated network (seeded delays of 20–60 µs,
//! so messages from different senders swap), with the sequencer on a fifth node. At the end
//! every replica's confirmed value is the same, its optimistic value equals it, and the program
//! prints how much sooner the optimistic value was usable than the confirmed one.
//!
//! `cargo run -p onepipe-baselines --example plato_counter`

use bytes::Bytes;
use onepipe_baselines::plato::{MsgKey, PlatoConfig, PlatoEndpoint};
use onepipe_baselines::sequencer::{OrderBatchConfig, Sequencer, SequencerConfig};
use onepipe_baselines::{BaseEvent, BaseNode, BasePacket, Dests, PORT};
use onepipe_proto::optimistic::OptConfig;
use onepipe_proto::rng::Rng;
use onepipe_proto::{Input, Instant, Node, Output, ProcId};
use std::collections::{BTreeMap, HashMap};

const PROCS: u32 = 4;
const SENDS_PER_PROC: u64 = 2_000;

/// One replica's register: confirmed value, and the tentative operations in view order.
#[derive(Default)]
struct Register {
    confirmed: i64,
    tentative: Vec<(MsgKey, Op)>,
}

#[derive(Clone, Copy)]
enum Op {
    DoublePlus(i64),
    Minus(i64),
}

impl Op {
    fn apply(self, x: i64) -> i64 {
        match self {
            Op::DoublePlus(k) => x.wrapping_mul(2).wrapping_add(k),
            Op::Minus(k) => x.wrapping_sub(k),
        }
    }

    fn decode(p: &[u8]) -> Op {
        let k = i64::from(p[1]);
        if p[0] == 0 {
            Op::DoublePlus(k)
        } else {
            Op::Minus(k)
        }
    }
}

impl Register {
    /// The value the application sees now.
    fn optimistic(&self) -> i64 {
        self.tentative
            .iter()
            .fold(self.confirmed, |x, (_, op)| op.apply(x))
    }
}

/// What one message's journey was: sent, first usable (a Tm never followed by a revoke), final.
#[derive(Default, Clone, Copy)]
struct Timing {
    sent: u64,
    usable: Option<u64>,
    confirmed: Option<u64>,
}

struct Net {
    nodes: Vec<BaseNode>,
    rng: Rng,
    queue: BTreeMap<(u64, u64), (usize, Option<BasePacket>)>,
    seq: u64,
    regs: Vec<Register>,
    timing: HashMap<(usize, MsgKey), Timing>,
    sent_at: HashMap<MsgKey, u64>,
    rollbacks: u64,
}

impl Net {
    fn push(&mut self, t: u64, node: usize, p: Option<BasePacket>) {
        self.seq += 1;
        self.queue.insert((t, self.seq), (node, p));
    }

    /// Drains a node after an input: packets go on the wire, hooks go to its register.
    fn drain(&mut self, now: u64, i: usize) {
        while let Some(o) = self.nodes[i].poll_output() {
            match o {
                Output::Send { packet, .. } => {
                    let delay = 20_000 + self.rng.below(40_000);
                    let to = packet.dst.index();
                    self.push(now + delay, to, Some(packet));
                }
                Output::Event(e) => self.on_hook(now, i, e),
            }
        }
        if let Some(t) = self.nodes[i].poll_timeout() {
            self.push(t.0.max(now), i, None);
        }
    }

    fn on_hook(&mut self, now: u64, i: usize, e: BaseEvent) {
        let reg = &mut self.regs[i];
        match e {
            BaseEvent::OptDeliver {
                src,
                msg_id,
                usable_at,
                payload,
                ..
            } => {
                let key = (src, msg_id);
                reg.tentative.push((key, Op::decode(&payload)));
                let t = self.timing.entry((i, key)).or_default();
                t.sent = self.sent_at[&key];
                t.usable = Some(usable_at.0);
            }
            BaseEvent::Revoke {
                src,
                msg_id,
                rollback,
                ..
            } => {
                let key = (src, msg_id);
                reg.tentative.retain(|(k, _)| *k != key);
                self.timing.entry((i, key)).or_default().usable = None;
                self.rollbacks += u64::from(rollback);
            }
            BaseEvent::Confirm { src, msg_id, .. } => {
                let key = (src, msg_id);
                let (first, op) = reg.tentative.remove(0);
                assert_eq!(first, key, "a confirm names the first tentative operation");
                reg.confirmed = op.apply(reg.confirmed);
                self.timing.entry((i, key)).or_default().confirmed = Some(now);
            }
            BaseEvent::Deliver { .. } => {} // the confirm just before it said it all
            other => panic!("unexpected event {other:?}"),
        }
    }
}

fn main() {
    report(&run(SENDS_PER_PROC));
}

/// Runs the group, each process sending `sends_per_proc` operations, to quiescence.
fn run(sends_per_proc: u64) -> Net {
    let mut nodes: Vec<BaseNode> = (0..PROCS)
        .map(|i| {
            let mut c = PlatoConfig::new(ProcId(i), PROCS);
            c.opt = Some(OptConfig::adaptive(30_000));
            BaseNode::Plato(PlatoEndpoint::new(c))
        })
        .collect();
    let mut sc = SequencerConfig::new(PROCS);
    sc.order_batch = Some(OrderBatchConfig {
        k: 10,
        flush_ns: 200_000,
    });
    nodes.push(BaseNode::Sequencer(Sequencer::new(sc)));
    let mut net = Net {
        nodes,
        rng: Rng::new(42),
        queue: BTreeMap::new(),
        seq: 0,
        regs: (0..PROCS).map(|_| Register::default()).collect(),
        timing: HashMap::new(),
        sent_at: HashMap::new(),
        rollbacks: 0,
    };
    // Each process sends every ~1 ms (Poisson-ish), an operation chosen at random.
    let mut sends: Vec<(u64, usize)> = Vec::new();
    for p in 0..PROCS as usize {
        let mut t = 0;
        for _ in 0..sends_per_proc {
            t += 1 + net.rng.below(2_000_000);
            sends.push((t, p));
        }
    }
    sends.sort_unstable();
    let mut next_id = [0u64; PROCS as usize];
    let mut s = 0;
    loop {
        let next_net = net.queue.first_key_value().map(|(k, _)| k.0);
        let next_send = sends.get(s).map(|x| x.0);
        let now = match (next_net, next_send) {
            (None, None) => break,
            (Some(a), Some(b)) if b < a => b,
            (Some(a), _) => a,
            (None, Some(b)) => b,
        };
        if next_send == Some(now) {
            let p = sends[s].1;
            s += 1;
            let op = [net.rng.below(2) as u8, net.rng.below(100) as u8];
            let key = (ProcId(p as u32), next_id[p]);
            next_id[p] += 1;
            net.sent_at.insert(key, now);
            net.nodes[p]
                .send(Instant(now), Bytes::copy_from_slice(&op), Dests::all())
                .expect("the group takes it");
            net.drain(now, p);
            continue;
        }
        let ((_, _), (i, packet)) = net.queue.pop_first().expect("peeked");
        let input = match packet {
            Some(packet) => Input::Packet { port: PORT, packet },
            None if net.nodes[i].poll_timeout().is_some_and(|t| t.0 <= now) => Input::Timeout,
            None => continue,
        };
        net.nodes[i].handle(Instant(now), input);
        net.drain(now, i);
    }
    net
}

fn report(net: &Net) {
    let values: Vec<i64> = net.regs.iter().map(|r| r.confirmed).collect();
    assert!(
        values.windows(2).all(|w| w[0] == w[1]),
        "replicas agree: {values:?}"
    );
    assert!(net
        .regs
        .iter()
        .all(|r| r.tentative.is_empty() && r.optimistic() == r.confirmed));
    let mut usable: Vec<u64> = Vec::new();
    let mut confirmed: Vec<u64> = Vec::new();
    for t in net.timing.values() {
        let c = t.confirmed.expect("every delivery confirmed");
        confirmed.push(c - t.sent);
        usable.push(t.usable.map_or(c, |u| u.min(c)) - t.sent);
    }
    usable.sort_unstable();
    confirmed.sort_unstable();
    let p50 = |v: &[u64]| v[v.len() / 2] as f64 / 1_000.0;
    println!(
        "{} replicas agree on {} operations: register = {}",
        PROCS,
        net.timing.len() / PROCS as usize,
        values[0]
    );
    println!(
        "median send → usable: optimistic {:.0} µs, confirmed {:.0} µs ({} rollbacks in {} deliveries)",
        p50(&usable),
        p50(&confirmed),
        net.rollbacks,
        net.timing.len()
    );
}

#[test]
fn replicas_agree_and_the_optimistic_value_is_the_confirmed_one_at_the_end() {
    // `report` asserts both; 300 operations per process exercise revokes and rollbacks.
    let net = run(300);
    assert!(net.timing.values().any(|t| t.usable.is_some()));
    report(&net);
}
