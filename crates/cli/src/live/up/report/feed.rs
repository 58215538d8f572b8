//! The merge of every process's records into one timeline for the checker, and the
//! scatterings of senders that left no records, rebuilt from what the others delivered.

use crate::live::records::NodeRecords;
use crate::live::Workload;
use onepipe_proto::host::Delivery;
use onepipe_proto::wire::NakReason;
use onepipe_proto::{Instant as ProtoInstant, ProcId, Psn, Timestamp};
use onepipe_sim::baseline::causal::CausalCheck;
use onepipe_sim::baseline::check::{BaseChecker, Dsts as BaseDsts};
use onepipe_sim::check::{Checker, Dsts};
use onepipe_sim::metrics::NsHistogram;
use std::collections::{BTreeMap, BTreeSet};

/// What one process recorded, by kind, for [`Feed`]'s merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Rec {
    /// A slot's endpoint rejoined as a new process (index into `Feed::joins`): before the
    /// first record it made as that process.
    Join,
    /// A delivery (index into `deliveries`). At equal times deliveries go first: `recv_ns`
    /// is read after the application received the message and `send_ns` before the send call
    /// stamps, so a delivery at or before a send's time happened before its stamp.
    Delivery,
    Send,
    Failure,
}

/// Feeds every process's records to the checker in the order they happened — all processes
/// on one machine read one clock (`CLOCK_MONOTONIC`), and every record carries its time — so
/// the rules that relate a process's sends to what it delivered before (§2.1 causality: a
/// host never stamps at or below what it already delivered) run as they do in the simulator.
/// Sums up as it goes.
pub(super) struct Feed {
    procs: u32,
    /// Each recorded slot's process id (see `report`).
    ids: Vec<u32>,
    /// (time, kind, slot, index into that slot's records of that kind).
    order: Vec<(u64, Rec, u32, u32)>,
    /// (slot, the process it rejoined as).
    joins: Vec<(u32, u32)>,
    pub(super) sent: u64,
    pub(super) scatterings: u64,
    pub(super) delivered: u64,
    pub(super) delivered_reliable: u64,
    pub(super) last_delivery_ns: u64,
    pub(super) latency: NsHistogram,
}

impl Feed {
    pub(super) fn new(procs: u32, all: &[Option<NodeRecords>], ids: &[u32]) -> Feed {
        let len = all
            .iter()
            .flatten()
            .map(|r| r.sends.len() + r.deliveries.len() + r.failures.len())
            .sum();
        let mut order = Vec::with_capacity(len);
        let mut joins = Vec::new();
        for (p, recs) in all.iter().enumerate() {
            let Some(recs) = recs else { continue };
            let p = p as u32;
            // The slot's process changed (§5.2 rejoin): the checker hears it just before the
            // first record the new process made.
            let id = ids.get(p as usize).copied().unwrap_or(p);
            if id != p {
                let first = recs
                    .sends
                    .iter()
                    .filter(|s| s.proc == id)
                    .map(|s| s.send_ns)
                    .chain(
                        recs.deliveries
                            .iter()
                            .filter(|d| d.dst == id)
                            .map(|d| d.recv_ns),
                    )
                    .min()
                    .unwrap_or(u64::MAX);
                order.push((first, Rec::Join, p, joins.len() as u32));
                joins.push((p, id));
            }
            let at = |i: usize| i as u32;
            order.extend(
                recs.sends
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (s.send_ns, Rec::Send, p, at(i))),
            );
            order.extend(
                recs.deliveries
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (d.recv_ns, Rec::Delivery, p, at(i))),
            );
            order.extend(
                recs.failures
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (f.at_ns, Rec::Failure, p, at(i))),
            );
        }
        // Stable: one process's deliveries of one service at one instant keep their order.
        order.sort_by_key(|&(t, kind, _, _)| (t, kind));
        Feed {
            procs,
            ids: ids.to_vec(),
            order,
            joins,
            sent: 0,
            scatterings: 0,
            delivered: 0,
            delivered_reliable: 0,
            last_delivery_ns: 0,
            latency: NsHistogram::default(),
        }
    }

    /// Feeds the scatterings of senders that left no records, as the others delivered them
    /// (all-to-all knows every destination; otherwise those that delivered are all that is
    /// known).
    pub(super) fn send_rebuilt(
        &mut self,
        checker: &mut Checker,
        workload: Workload,
        all: &[Option<NodeRecords>],
        ids: &[u32],
        killed: &BTreeSet<u32>,
    ) {
        let n = self.procs;
        for ((src, seq), (ts, reliable, receivers)) in rebuilt_sends(all, ids, killed) {
            let dsts = match workload {
                Workload::AllToAll => Dsts::All(n),
                _ => Dsts::List(receivers.into_iter().collect()),
            };
            self.scatterings += 1;
            self.sent += match &dsts {
                Dsts::All(n) => u64::from(*n),
                Dsts::List(v) => v.len() as u64,
            };
            checker.on_send(0, src, src, seq, Timestamp::new(ts), dsts, reliable);
        }
    }

    /// Feeds every record to `checker`, in time order, and sums up.
    pub(super) fn run(&mut self, checker: &mut Checker, all: &[Option<NodeRecords>]) {
        let n = self.procs;
        // Each slot's process as the feed goes (its own until it rejoined).
        let mut current: Vec<u32> = (0..self.ids.len() as u32).collect();
        for &(t, kind, slot, i) in &self.order {
            let recs = all[slot as usize]
                .as_ref()
                .expect("only recorded processes are fed");
            match kind {
                Rec::Join => {
                    let (slot, id) = self.joins[i as usize];
                    checker.on_joined(t, slot, &[id]);
                    current[slot as usize] = id;
                }
                Rec::Send => {
                    let s = &recs.sends[i as usize];
                    let p = s.proc;
                    let dsts = match &s.dsts {
                        None => Dsts::All(n),
                        Some(v) => Dsts::List(v.clone()),
                    };
                    self.scatterings += 1;
                    self.sent += s.dsts.as_ref().map_or(u64::from(n), |v| v.len() as u64);
                    let ts = Timestamp::new(s.ts);
                    checker.on_send(t, slot, p, s.seq, ts, dsts, s.reliable);
                }
                Rec::Delivery => {
                    let d = &recs.deliveries[i as usize];
                    let p = d.dst;
                    self.delivered += 1;
                    self.delivered_reliable += u64::from(d.reliable);
                    self.last_delivery_ns = self.last_delivery_ns.max(t);
                    self.latency.record(d.latency_ns);
                    let barrier = Timestamp::new(d.barrier);
                    let before = checker.on_released(t, p, d.reliable, barrier);
                    let delivery = Delivery {
                        dst: ProcId(p),
                        src: ProcId(d.src),
                        ts: Timestamp::new(d.ts),
                        psn: Psn(d.psn),
                        payload: bytes::Bytes::new(),
                        barrier,
                        reliable: d.reliable,
                        arrived: ProtoInstant(t),
                        now_ts: Timestamp::new(d.delivered_ts),
                    };
                    checker.on_deliver(t, slot, &delivery, d.seq, before);
                }
                Rec::Failure => {
                    let f = &recs.failures[i as usize];
                    let p = current[slot as usize];
                    let reason = nak_reason(f.reason);
                    checker.on_send_failed(t, p, f.dst, Timestamp::new(f.ts), reason);
                }
            }
        }
    }
}

impl Feed {
    /// [`Feed::run`] for a baseline run (`--protocol plato|plato-fixed|toto|allack`): every
    /// record to the baselines' checker (total order by the protocol's keys, agreement, FIFO,
    /// no phantom, and — drained — nothing lost unreported, or with `killed` processes: a
    /// survivor's message at every survivor, a killed one's at every survivor or none) and to
    /// the `causal` check if given, in time order, and sums up. A killed process left no
    /// records: its broadcasts are rebuilt from what the others delivered (numbered up to the
    /// highest delivered anywhere) and fed first, as having followed nothing but its own.
    /// Returns how many were rebuilt: their causal dependencies are unchecked.
    pub(super) fn run_base(
        &mut self,
        checker: &mut BaseChecker,
        mut causal: Option<&mut CausalCheck>,
        all: &[Option<NodeRecords>],
        killed: &BTreeSet<u32>,
    ) -> u64 {
        let n = self.procs;
        let mut rebuilt = 0;
        for &p in killed {
            let sent = all
                .iter()
                .flatten()
                .flat_map(|r| &r.deliveries)
                .filter(|d| d.src == p)
                .map(|d| d.seq + 1)
                .max()
                .unwrap_or(0);
            rebuilt += sent;
            for seq in 0..sent {
                checker.on_send(p, seq, BaseDsts::All);
                if let Some(c) = causal.as_deref_mut() {
                    c.on_send(p, seq);
                }
            }
        }
        for &(t, kind, slot, i) in &self.order {
            let recs = all[slot as usize]
                .as_ref()
                .expect("only recorded processes are fed");
            match kind {
                // No §5.2 here: nobody rejoins.
                Rec::Join => {}
                Rec::Send => {
                    let s = &recs.sends[i as usize];
                    self.scatterings += 1;
                    self.sent += u64::from(n);
                    checker.on_send(s.proc, s.seq, BaseDsts::All);
                    if let Some(c) = causal.as_deref_mut() {
                        c.on_send(s.proc, s.seq);
                    }
                }
                Rec::Delivery => {
                    let d = &recs.deliveries[i as usize];
                    self.delivered += 1;
                    self.last_delivery_ns = self.last_delivery_ns.max(t);
                    self.latency.record(d.latency_ns);
                    checker.on_deliver(t, d.dst, d.src, d.seq, d.ts);
                    if let Some(c) = causal.as_deref_mut() {
                        c.on_deliver(t, d.dst, d.src, d.seq);
                    }
                }
                Rec::Failure => {
                    let f = &recs.failures[i as usize];
                    if f.reason == crate::live::baseline::LOST_REASON {
                        checker.on_lost(f.dst, f.ts);
                    }
                }
            }
        }
        rebuilt
    }
}

/// Scatterings of senders that left no records, rebuilt from the deliveries of the others:
/// (sender, seq) → (timestamp, reliable, receivers that delivered it).
#[allow(clippy::type_complexity)]
fn rebuilt_sends(
    all: &[Option<NodeRecords>],
    ids: &[u32],
    killed: &BTreeSet<u32>,
) -> BTreeMap<(u32, u64), (u64, bool, BTreeSet<u32>)> {
    // Senders whose records are in: each recorded slot's processes — its process now, and its
    // first one unless it was killed (a restarted slot lost its old process's records with its
    // memory: those sends are rebuilt like a dead one's).
    let mut recorded: BTreeSet<u32> = BTreeSet::new();
    for (q, (r, &id)) in all.iter().zip(ids).enumerate() {
        let Some(r) = r else { continue };
        recorded.insert(id);
        if !killed.contains(&(q as u32)) {
            recorded.insert(q as u32);
        }
        recorded.extend(r.sends.iter().map(|s| s.proc));
    }
    let mut rebuilt: BTreeMap<(u32, u64), (u64, bool, BTreeSet<u32>)> = BTreeMap::new();
    for recs in all {
        for d in recs.iter().flat_map(|r| &r.deliveries) {
            if !recorded.contains(&d.src) {
                rebuilt
                    .entry((d.src, d.seq))
                    .or_insert_with(|| (d.ts, d.reliable, BTreeSet::new()))
                    .2
                    .insert(d.dst);
            }
        }
    }
    rebuilt
}

/// The reason a failure record names, from its code.
fn nak_reason(r: u8) -> NakReason {
    match r {
        1 => NakReason::Late,
        2 => NakReason::Incomplete,
        3 => NakReason::BufferFull,
        _ => NakReason::Lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::records::{DeliveryRec, SendRec};

    fn send(seq: u64, ts: u64, send_ns: u64) -> SendRec {
        SendRec {
            proc: 0,
            seq,
            ts,
            send_ns,
            reliable: false,
            dsts: None,
        }
    }

    fn delivery(src: u32, dst: u32, ts: u64, barrier: u64, recv_ns: u64) -> DeliveryRec {
        DeliveryRec {
            src,
            dst,
            seq: 0,
            ts,
            barrier,
            delivered_ts: barrier + 1,
            recv_ns,
            latency_ns: 1,
            reliable: false,
            psn: 0,
        }
    }

    /// Two processes; p1 broadcasts ts 10 at time 1, which both deliver at time 5 (barrier
    /// 20); p0 then sends `p0_ts` at time `p0_at`. The violations' kinds.
    fn kinds_of(p0_ts: u64, p0_at: u64) -> Vec<&'static str> {
        let all = vec![
            Some(NodeRecords {
                sends: vec![send(0, p0_ts, p0_at)],
                deliveries: vec![delivery(1, 0, 10, 20, 5)],
                failures: Vec::new(),
                hooks: Vec::new(),
            }),
            Some(NodeRecords {
                sends: vec![SendRec {
                    proc: 1,
                    ..send(0, 10, 1)
                }],
                deliveries: vec![delivery(1, 1, 10, 20, 5)],
                failures: Vec::new(),
                hooks: Vec::new(),
            }),
        ];
        let mut checker = Checker::new(2, 1, 0, true);
        Feed::new(2, &all, &[0, 1]).run(&mut checker, &all);
        checker.violations().iter().map(|v| v.kind).collect()
    }

    /// §2.1 causality, live: records are fed in time order, so a send stamped at or below a
    /// timestamp its process had already delivered is caught — and one made before that
    /// delivery is not.
    #[test]
    fn a_send_stamped_below_what_its_process_delivered_before_is_a_causality_violation() {
        assert_eq!(kinds_of(9, 6), ["causality"], "sent after delivering ts 10");
        assert_eq!(kinds_of(10, 6), ["causality"], "at it is not above it");
        assert_eq!(
            kinds_of(9, 4),
            Vec::<&str>::new(),
            "sent before the delivery"
        );
        // Equal times: the delivery was taken before the send call read the clock.
        assert_eq!(kinds_of(9, 5), ["causality"]);
    }
}
