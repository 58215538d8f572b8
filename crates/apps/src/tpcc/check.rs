//! TPC-C's checker, for every run, whichever system ran it:
//!
//! * **Replay** (serializability): the committed transactions, with those bound to take effect
//!   ([`super::TpccApp::unfinished`]), replayed in the system's serialization order — (key,
//!   initiator, seq, id): for 1Pipe the timestamp order, ties by sender and then in the order
//!   the sender's host stamped them (§2.2.3, §4.1) — on one unsharded model database
//!   loaded from the same seed. Every result a shard returned is compared, field by field, with
//!   what the model's execution gives for the rows of that shard ([`expected_part`]).
//! * **Real time** (strict serializability): a transaction that returned before another was
//!   called comes first in the order, allowing for the initiators' clock skew.
//! * **Consistency** (clause 3.3.2.1–3.3.2.4, 3.3.2.8–3.3.2.9, as they apply with only New-Order
//!   and Payment and no initial orders or history) over the final state of one live replica of
//!   every shard ([`consistency`]).
//! * **Replicas**: all live replicas of a shard end with the same [`Shard::digest`], and it is
//!   the digest of the model's rows of that shard ([`Shard::digest_of`]).
//!
//! Violations are counted; the first [`SAMPLES_MAX`] are kept.

use super::db::{RowKey, Shard, TpccLayout};
use super::gen::{TpccScale, D_YTD_INITIAL};
use super::{Cents, NewOrderPart, PartResult, PaymentPart, TpccCommitted, TxnInput};
use std::collections::{BTreeMap, BTreeSet};

/// One violation, with what it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TpccViolation {
    /// A shard's result differs from the replay's: `field` holds `got`, the replay says
    /// `expected` (`None`: absent).
    Result {
        /// The transaction.
        txn: u64,
        /// The shard that answered.
        shard: u32,
        /// The field (`s_quantity[i]` for line `i`'s stock).
        field: String,
        /// What the initiator heard.
        got: Option<i64>,
        /// What the replay gives.
        expected: Option<i64>,
    },
    /// A shard the transaction touches did not answer.
    MissingShard {
        /// The transaction.
        txn: u64,
        /// The shard.
        shard: u32,
    },
    /// A shard the transaction does not touch answered.
    UnexpectedShard {
        /// The transaction.
        txn: u64,
        /// The shard.
        shard: u32,
    },
    /// `later` returned before `earlier` was called, yet comes after it in the order.
    RealTime {
        /// The transaction that comes first in the order.
        earlier: u64,
        /// The transaction that returned first.
        later: u64,
    },
    /// Two recorded transactions share an id.
    Duplicate {
        /// The id.
        txn: u64,
    },
    /// A consistency condition of clause 3.3.2 does not hold: `left ≠ right`.
    Consistency {
        /// The condition, with its clause.
        condition: &'static str,
        /// The warehouse.
        w_id: u32,
        /// The district, for a per-district condition.
        d_id: Option<u32>,
        /// The condition's left side.
        left: i64,
        /// Its right side.
        right: i64,
    },
    /// The live replicas of a shard ended with different states.
    ReplicasDiverge {
        /// The shard.
        shard: u32,
        /// Distinct digests among its live replicas.
        states: usize,
    },
    /// A shard's final state is not the replay's for its rows.
    StateMismatch {
        /// The shard.
        shard: u32,
    },
}

impl TpccViolation {
    /// Its kind's name, as [`std::fmt::Display`] starts.
    pub fn kind(&self) -> &'static str {
        match self {
            TpccViolation::Result { .. } => "result",
            TpccViolation::MissingShard { .. } => "missing-shard",
            TpccViolation::UnexpectedShard { .. } => "unexpected-shard",
            TpccViolation::RealTime { .. } => "real-time",
            TpccViolation::Duplicate { .. } => "duplicate",
            TpccViolation::Consistency { .. } => "consistency",
            TpccViolation::ReplicasDiverge { .. } => "replicas-diverge",
            TpccViolation::StateMismatch { .. } => "state-mismatch",
        }
    }
}

impl std::fmt::Display for TpccViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TpccViolation::Result {
                txn,
                shard,
                field,
                got,
                expected,
            } => write!(
                f,
                "result: transaction {txn:#x} got {field} = {got:?} from shard {shard}, its place in the order gives {expected:?}"
            ),
            TpccViolation::MissingShard { txn, shard } => {
                write!(f, "missing-shard: transaction {txn:#x} committed without shard {shard}'s answer")
            }
            TpccViolation::UnexpectedShard { txn, shard } => {
                write!(f, "unexpected-shard: transaction {txn:#x} got an answer from shard {shard}, which it does not touch")
            }
            TpccViolation::RealTime { earlier, later } => write!(
                f,
                "real-time: transaction {later:#x} returned before {earlier:#x} was called, yet is serialized after it"
            ),
            TpccViolation::Duplicate { txn } => {
                write!(f, "duplicate: transaction {txn:#x} recorded twice")
            }
            TpccViolation::Consistency {
                condition,
                w_id,
                d_id,
                left,
                right,
            } => match d_id {
                Some(d) => write!(
                    f,
                    "consistency {condition}: district ({w_id}, {d}) has {left} against {right}"
                ),
                None => write!(
                    f,
                    "consistency {condition}: warehouse {w_id} has {left} against {right}"
                ),
            },
            TpccViolation::ReplicasDiverge { shard, states } => write!(
                f,
                "replicas-diverge: the live replicas of shard {shard} ended in {states} different states"
            ),
            TpccViolation::StateMismatch { shard } => write!(
                f,
                "state-mismatch: shard {shard}'s final state is not the replay's"
            ),
        }
    }
}

/// Most violations kept as samples (all are counted).
pub const SAMPLES_MAX: usize = 16;

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct TpccVerdict {
    /// Committed transactions replayed and compared.
    pub transactions: u64,
    /// Unfinished ones replayed (their effects applied, nothing compared).
    pub unfinished: u64,
    /// Result fields compared.
    pub fields: u64,
    /// Consistency conditions evaluated (per warehouse or district).
    pub conditions: u64,
    /// Shards whose final state was compared with the replay.
    pub shards_compared: u64,
    /// Violations, counted.
    pub violations: u64,
    /// Violations by kind ([`TpccViolation::kind`]).
    pub by_kind: BTreeMap<&'static str, u64>,
    /// The first few.
    pub samples: Vec<TpccViolation>,
}

impl TpccVerdict {
    fn add(&mut self, v: TpccViolation) {
        self.violations += 1;
        *self.by_kind.entry(v.kind()).or_default() += 1;
        if self.samples.len() < SAMPLES_MAX {
            self.samples.push(v);
        }
    }
}

/// Collects committed transactions; [`TpccChecker::verdict_with`] checks them.
#[derive(Debug)]
pub struct TpccChecker {
    scale: TpccScale,
    seed: u64,
    layout: TpccLayout,
    committed: Vec<TpccCommitted>,
}

impl TpccChecker {
    /// A checker for runs on the database of `scale` loaded from `seed`, sharded by `layout`.
    pub fn new(scale: TpccScale, seed: u64, layout: TpccLayout) -> TpccChecker {
        TpccChecker {
            scale,
            seed,
            layout,
            committed: Vec::new(),
        }
    }

    /// Records a committed transaction.
    pub fn on_commit(&mut self, c: TpccCommitted) {
        self.committed.push(c);
    }

    /// Transactions recorded.
    pub fn len(&self) -> usize {
        self.committed.len()
    }

    /// True if none.
    pub fn is_empty(&self) -> bool {
        self.committed.is_empty()
    }

    /// The recorded transactions.
    pub fn committed(&self) -> &[TpccCommitted] {
        &self.committed
    }

    /// Replays the history and checks every result and the real-time order (no final state).
    pub fn verdict(&self, skew_ns: u64) -> TpccVerdict {
        self.verdict_with(&[], &[], skew_ns)
    }

    /// The replay and real-time check, with `unfinished` transactions bound to take effect (their
    /// effects apply in their place; nothing to compare), and, if `replicas` is not empty, the
    /// final state: `(shard, state)` of every live replica ([`super::TpccApp::shard`]) — replicas
    /// of a shard identical, equal to the replay's rows of that shard, and clause 3.3.2's
    /// conditions over one replica per shard. Times are the initiators' clocks: the real-time
    /// check allows `skew_ns` between them.
    pub fn verdict_with(
        &self,
        unfinished: &[TpccCommitted],
        replicas: &[(u32, &Shard)],
        skew_ns: u64,
    ) -> TpccVerdict {
        let (model, mut v) = self.replay(unfinished, skew_ns);
        if !replicas.is_empty() {
            self.check_state(&model, replicas, &mut v);
        }
        v
    }

    /// [`TpccChecker::verdict_with`] for replicas known by their digests only (`(shard,
    /// Shard::digest)` of every live replica: the live runtime's processes report no more).
    /// Replicas of a shard must agree and equal the replay's rows of that shard; clause 3.3.2's
    /// conditions are then checked over the replay's database, which the replicas equal.
    pub fn verdict_with_digests(
        &self,
        unfinished: &[TpccCommitted],
        digests: &[(u32, u64)],
        skew_ns: u64,
    ) -> TpccVerdict {
        let (model, mut v) = self.replay(unfinished, skew_ns);
        let mut by_shard: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        for &(s, d) in digests {
            by_shard.entry(s).or_default().insert(d);
        }
        for (&shard, ds) in &by_shard {
            if ds.len() > 1 {
                v.add(TpccViolation::ReplicasDiverge {
                    shard,
                    states: ds.len(),
                });
            }
            v.shards_compared += 1;
            if *ds != BTreeSet::from([model.digest_of(&self.layout, shard)]) {
                v.add(TpccViolation::StateMismatch { shard });
            }
        }
        let (conditions, found) = consistency(&self.scale, &[&model]);
        v.conditions += conditions;
        for x in found {
            v.add(x);
        }
        v
    }

    /// Replays the committed transactions (and `unfinished` ones, whose effects apply) in order
    /// on the model, comparing every result, and checks real time: the model at the end, and the
    /// verdict so far.
    fn replay(&self, unfinished: &[TpccCommitted], skew_ns: u64) -> (Shard, TpccVerdict) {
        let all: Vec<&TpccCommitted> = self.committed.iter().chain(unfinished).collect();
        let done = self.committed.len();
        let mut v = TpccVerdict::default();
        let mut order: Vec<usize> = (0..all.len()).collect();
        order.sort_by_key(|&i| (all[i].key, all[i].client, all[i].seq, all[i].txn));
        let mut model = Shard::full(&self.scale, self.seed);
        let mut seen = BTreeSet::new();
        for &i in &order {
            let c = all[i];
            if !seen.insert(c.txn) {
                v.add(TpccViolation::Duplicate { txn: c.txn });
            }
            let full = model.execute(&c.input);
            if i < done {
                v.transactions += 1;
                self.compare(c, &full, &mut v);
            } else {
                v.unfinished += 1;
            }
        }
        real_time(&all[..done], &order, skew_ns, &mut v);
        (model, v)
    }

    /// Compares the results `c` got with the model's execution `full`, shard by shard.
    fn compare(&self, c: &TpccCommitted, full: &PartResult, v: &mut TpccVerdict) {
        let touched = self.layout.shards_of(&c.input);
        let mut answered = BTreeSet::new();
        for (shard, got) in &c.results {
            answered.insert(*shard);
            if !touched.contains(shard) {
                v.add(TpccViolation::UnexpectedShard {
                    txn: c.txn,
                    shard: *shard,
                });
                continue;
            }
            let expected = expected_part(full, &c.input, &self.layout, *shard);
            let got: BTreeMap<String, i64> = got.fields().into_iter().collect();
            let expected: BTreeMap<String, i64> = expected.fields().into_iter().collect();
            let names: BTreeSet<&String> = got.keys().chain(expected.keys()).collect();
            for name in names {
                v.fields += 1;
                let (g, e) = (got.get(name).copied(), expected.get(name).copied());
                if g != e {
                    v.add(TpccViolation::Result {
                        txn: c.txn,
                        shard: *shard,
                        field: name.clone(),
                        got: g,
                        expected: e,
                    });
                }
            }
        }
        for shard in touched.into_iter().filter(|s| !answered.contains(s)) {
            v.add(TpccViolation::MissingShard { txn: c.txn, shard });
        }
    }

    /// The final state against the replay's `model`.
    fn check_state(&self, model: &Shard, replicas: &[(u32, &Shard)], v: &mut TpccVerdict) {
        let mut by_shard: BTreeMap<u32, Vec<&Shard>> = BTreeMap::new();
        for &(s, r) in replicas {
            by_shard.entry(s).or_default().push(r);
        }
        for (&shard, rs) in &by_shard {
            let digests: BTreeSet<u64> = rs.iter().map(|r| r.digest()).collect();
            if digests.len() > 1 {
                v.add(TpccViolation::ReplicasDiverge {
                    shard,
                    states: digests.len(),
                });
            }
            v.shards_compared += 1;
            if digests != BTreeSet::from([model.digest_of(&self.layout, shard)]) {
                v.add(TpccViolation::StateMismatch { shard });
            }
        }
        let one: Vec<&Shard> = by_shard.values().map(|rs| rs[0]).collect();
        let (conditions, found) = consistency(&self.scale, &one);
        v.conditions += conditions;
        for x in found {
            v.add(x);
        }
    }
}

/// What took effect beyond what the initiators report committed: every transaction a replica
/// applied (`applied`, the replicas' logs in their apply order, [`super::TpccConfig::log_applied`])
/// that is not among `committed`, as an unfinished record in its place — its timestamp, then the
/// order its initiator's transactions of that timestamp were applied in — for
/// [`TpccChecker::verdict_with_digests`]. Its initiator died, or gave it up; a scattering
/// recalled by §5.2 was applied nowhere and takes no place.
pub fn unfinished_from_logs<'a>(
    committed: impl Iterator<Item = &'a TpccCommitted>,
    logs: impl Iterator<Item = &'a [super::onepipe::AppliedTxn]>,
) -> Vec<TpccCommitted> {
    let done: BTreeSet<u64> = committed.map(|c| c.txn).collect();
    let mut open: BTreeMap<u64, TpccCommitted> = BTreeMap::new();
    for log in logs {
        // One sender's transactions of one timestamp are applied in the order it sent them.
        let mut seq: BTreeMap<(u64, u32), u64> = BTreeMap::new();
        for a in log {
            let n = seq.entry((a.ts, a.client)).or_default();
            *n += 1;
            if done.contains(&a.txn) {
                continue;
            }
            open.entry(a.txn).or_insert_with(|| TpccCommitted {
                txn: a.txn,
                client: a.client,
                key: a.ts,
                seq: *n,
                input: a.input.clone(),
                results: Vec::new(),
                call_ns: 0,
                return_ns: u64::MAX,
                attempts: 1,
            });
        }
    }
    open.into_values().collect()
}

/// What shard `shard` of `layout` should answer for `input`, given the whole transaction's
/// result `full` on an unsharded database: the fields of the rows that shard holds.
///
/// # Panics
///
/// If `full` is not a result of `input`'s kind (it is what [`Shard::execute`] returned for it).
pub fn expected_part(
    full: &PartResult,
    input: &TxnInput,
    layout: &TpccLayout,
    shard: u32,
) -> PartResult {
    let here = |row: RowKey| layout.shard_of(row) == shard;
    match (full, input) {
        (PartResult::NewOrder(p), TxnInput::NewOrder(t)) => PartResult::NewOrder(NewOrderPart {
            rolled_back: p.rolled_back,
            w_tax: p.w_tax.filter(|_| here(RowKey::Warehouse(t.w_id))),
            district: p
                .district
                .filter(|_| here(RowKey::District(t.w_id, t.d_id))),
            stock: p
                .stock
                .iter()
                .filter(|(n, _)| {
                    t.lines
                        .get(usize::from(*n))
                        .is_some_and(|l| here(RowKey::Stock(l.supply_w_id, l.i_id)))
                })
                .copied()
                .collect(),
        }),
        (PartResult::Payment(p), TxnInput::Payment(t)) => PartResult::Payment(PaymentPart {
            w_ytd: p.w_ytd.filter(|_| here(RowKey::Warehouse(t.w_id))),
            d_ytd: p.d_ytd.filter(|_| here(RowKey::District(t.w_id, t.d_id))),
            customer: p
                .customer
                .filter(|_| here(RowKey::District(t.c_w_id, t.c_d_id))),
        }),
        // The model executed `input` itself: the kinds agree.
        _ => unreachable!("a {:?} result for a {:?} input", full, input.kind()),
    }
}

/// Clause 3.3.2's consistency conditions that apply with only New-Order and Payment, over the
/// rows of `shards` (one state per shard; rows of shards not given are missing, and a condition
/// that needs one is not evaluated). Returns the conditions evaluated and the violations.
///
/// * 3.3.2.1: `W_YTD = sum(D_YTD)` over the warehouse's districts;
/// * 3.3.2.2: `D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID)` (0 for none) per district;
/// * 3.3.2.3: `max(NO_O_ID) − min(NO_O_ID) + 1` = the NEW-ORDER rows per district;
/// * 3.3.2.4: `sum(O_OL_CNT)` = the ORDER-LINE rows per district;
/// * 3.3.2.8: `W_YTD` = its initial value + `sum(H_AMOUNT)` of the payments made at it;
/// * 3.3.2.9: `D_YTD` likewise per district.
///
/// (The database is loaded with no orders and no history: see [`super`]; hence "initial +".)
pub fn consistency(scale: &TpccScale, shards: &[&Shard]) -> (u64, Vec<TpccViolation>) {
    let mut warehouses = BTreeMap::new();
    let mut districts = BTreeMap::new();
    for s in shards {
        warehouses.extend(s.warehouses());
        districts.extend(s.districts());
    }
    let mut n = 0u64;
    let mut found = Vec::new();
    let mut check = |condition, w_id, d_id, left: i64, right: i64| {
        n += 1;
        if left != right {
            found.push(TpccViolation::Consistency {
                condition,
                w_id,
                d_id,
                left,
                right,
            });
        }
    };
    for (&(w, d), r) in &districts {
        let next = i64::from(r.d_next_o_id()) - 1;
        let max_o = r.orders().iter().map(|o| o.o_id).max().unwrap_or(0);
        let max_no = r.new_orders().iter().copied().max().unwrap_or(0);
        let min_no = r.new_orders().iter().copied().min().unwrap_or(1);
        check(
            "3.3.2.2 D_NEXT_O_ID - 1 = max(O_ID)",
            w,
            Some(d),
            next,
            max_o.into(),
        );
        check(
            "3.3.2.2 D_NEXT_O_ID - 1 = max(NO_O_ID)",
            w,
            Some(d),
            next,
            max_no.into(),
        );
        check(
            "3.3.2.3 max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW-ORDER)",
            w,
            Some(d),
            i64::from(max_no) - i64::from(min_no) + 1,
            r.new_orders().len() as i64,
        );
        check(
            "3.3.2.4 sum(O_OL_CNT) = count(ORDER-LINE)",
            w,
            Some(d),
            r.orders().iter().map(|o| i64::from(o.ol_cnt)).sum(),
            r.order_lines().len() as i64,
        );
        check(
            "3.3.2.9 D_YTD = initial + sum(H_AMOUNT)",
            w,
            Some(d),
            r.d_ytd(),
            D_YTD_INITIAL + history_sum(r),
        );
    }
    for (&w, r) in &warehouses {
        let ds: Vec<_> = (1..=scale.districts_per_warehouse)
            .filter_map(|d| districts.get(&(w, d)))
            .collect();
        if ds.len() as u32 != scale.districts_per_warehouse {
            continue;
        }
        check(
            "3.3.2.1 W_YTD = sum(D_YTD)",
            w,
            None,
            r.w_ytd,
            ds.iter().map(|d| d.d_ytd()).sum(),
        );
        check(
            "3.3.2.8 W_YTD = initial + sum(H_AMOUNT)",
            w,
            None,
            r.w_ytd,
            scale.w_ytd_initial() + ds.iter().map(|d| history_sum(d)).sum::<Cents>(),
        );
    }
    (n, found)
}

fn history_sum(d: &super::db::District) -> Cents {
    d.history().iter().map(|h| Cents::from(h.amount)).sum()
}

/// Real time: by call time, each transaction must come after every one that returned before it
/// was called. Sweeps calls in time order, keeping the latest place in the order among the
/// transactions returned so far (as the key-value store's checker does). `order` ranks indices
/// of a list whose first `done.len()` are `done` (the rest, unfinished, never returned).
fn real_time(done: &[&TpccCommitted], order: &[usize], skew_ns: u64, v: &mut TpccVerdict) {
    let mut place = vec![0usize; done.len()];
    for (p, &i) in order.iter().enumerate() {
        if let Some(slot) = place.get_mut(i) {
            *slot = p;
        }
    }
    let mut by_call: Vec<usize> = (0..done.len()).collect();
    by_call.sort_by_key(|&i| done[i].call_ns);
    let mut by_return: Vec<usize> = (0..done.len()).collect();
    by_return.sort_by_key(|&i| done[i].return_ns);
    let mut r = 0;
    let mut latest: Option<usize> = None;
    for &i in &by_call {
        let call = done[i].call_ns;
        while r < by_return.len() && done[by_return[r]].return_ns.saturating_add(skew_ns) < call {
            let j = by_return[r];
            if latest.is_none_or(|l| place[j] > place[l]) {
                latest = Some(j);
            }
            r += 1;
        }
        if let Some(l) = latest {
            if place[l] > place[i] {
                v.add(TpccViolation::RealTime {
                    earlier: done[i].txn,
                    later: done[l].txn,
                });
            }
        }
    }
}
