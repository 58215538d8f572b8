//! TPC-C's checker, for every run, whichever system ran it. It never executes the
//! implementation ([`super::db`]): its model is the specification's, written apart
//! ([`super::reference`]), and what the run left is read as data.
//!
//! * **Replay** (serializability): the committed transactions, with those bound to take effect
//!   ([`super::TpccApp::unfinished`]), replayed in the system's serialization order — (key,
//!   initiator, seq, id): for 1Pipe the timestamp order, ties by sender and then in the order
//!   the sender's host stamped them (§2.2.3, §4.1) — on the [`Reference`] loaded with the same
//!   population. Every field of every result a shard returned is compared with what the
//!   reference's execution gives for the rows that shard holds.
//! * **Real time** (strict serializability): a transaction that returned before another was
//!   called comes first in the order, allowing for the initiators' clock skew.
//! * **Replicas**: every live replica's final rows, read as data ([`Rows::from_shard`]), are
//!   compared row by row with the reference's rows of its shard; replicas of a shard agree. From
//!   the live runtime, which reports digests only, each digest is compared with the reference's
//!   digest of its own rows ([`Rows::digest`]).
//! * **Consistency** (clause 3.3.2, [`consistency`]) over the final rows of one live replica of
//!   every shard, as they apply with only New-Order and Payment and a population with no orders
//!   and no history (see [`super`]): "initial +" below is the value as loaded.
//!
//!   | clause | condition | per |
//!   | --- | --- | --- |
//!   | 3.3.2.1 | `W_YTD = sum(D_YTD)` | warehouse |
//!   | 3.3.2.2 | `D_NEXT_O_ID − 1 = max(O_ID) = max(NO_O_ID)` (0 for none) | district |
//!   | 3.3.2.3 | `max(NO_O_ID) − min(NO_O_ID) + 1 = count(NEW-ORDER)` | district |
//!   | 3.3.2.4 | `sum(O_OL_CNT) = count(ORDER-LINE)` | district |
//!   | 3.3.2.5 | `O_CARRIER_ID` is null (always: no Delivery) iff a NEW-ORDER row: `ORDER` and `NEW-ORDER` hold the same ids | district |
//!   | 3.3.2.6 | `O_OL_CNT = count(ORDER-LINE)` of the order | order |
//!   | 3.3.2.8 | `W_YTD = initial + sum(H_AMOUNT)` | warehouse |
//!   | 3.3.2.9 | `D_YTD = initial + sum(H_AMOUNT)` | district |
//!   | 3.3.2.10 | `C_BALANCE = initial − sum(H_AMOUNT)` (no delivered `OL_AMOUNT`) | customer |
//!   | 3.3.2.11 | `count(ORDER) − count(NEW-ORDER) = initial` (0 here) | district |
//!   | 3.3.2.12 | `C_BALANCE + C_YTD_PAYMENT = initial` (no delivered `OL_AMOUNT`) | customer |
//!   | 2.5.2.2 | `C_PAYMENT_CNT = initial + count(HISTORY)` of the customer | customer |
//!   | 2.4.2.2 | `OL_AMOUNT = OL_QUANTITY × I_PRICE` | order line |
//!   | 2.4.2.2 | `S_YTD`, `S_ORDER_CNT`, `S_REMOTE_CNT` = initial + the sum, count, remote count of its order lines | stock row |
//!
//!   The last four are not numbered conditions of clause 3.3.2; they follow from clause 2.4.2.2
//!   and 2.5.2.2 as 3.3.2.10 does (with the specification's population, `C_PAYMENT_CNT` = 1 and
//!   one HISTORY row per customer). `C_YTD_PAYMENT = initial + sum(H_AMOUNT)` follows from
//!   3.3.2.10 and 3.3.2.12 together.
//!
//!   What cannot be checked without Delivery: **3.3.2.7** (`OL_DELIVERY_D` is null iff
//!   `O_CARRIER_ID` is): only Delivery sets either, so both are null everywhere and the
//!   representation keeps neither — it holds vacuously, with nothing to read. **3.3.2.11** as
//!   written (`= 2100`): 2100 is the 3000 orders loaded minus the 900 of them loaded as new
//!   (clause 4.3.3.1); without Delivery the difference stays what was loaded, and nothing is
//!   loaded here, so it is checked against 0. 3.3.2.10 and 3.3.2.12 lose their `sum(OL_AMOUNT)`
//!   term: it sums delivered lines, and none is ever delivered.
//!
//! It says what it checked ([`TpccChecks`]): transactions replayed, fields compared, replicas,
//! rows and digests compared, each condition's instances, and what was left out and why.
//! Violations are counted; the first [`SAMPLES_MAX`] are kept.

use super::db::{RowKey, Shard, TpccLayout};
use super::gen::TpccScale;
use super::reference::{self, Outcome, Population, Reference, Rows};
use super::{
    Credit, CustomerSelector, NewOrderDistrict, NewOrderPart, PartResult, PaymentCustomer,
    PaymentPart, TpccCommitted, TxnInput,
};
use crate::depgraph::GraphVerdict;
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
    /// A consistency condition ([`consistency`]) does not hold: `left ≠ right`.
    Consistency {
        /// The condition, with its clause.
        condition: &'static str,
        /// The warehouse (a stock row's: `S_W_ID`).
        w_id: u32,
        /// The district, for a per-district, per-order or per-customer condition.
        d_id: Option<u32>,
        /// The order, customer or item, for a condition on one of them.
        id: Option<u32>,
        /// The condition's left side.
        left: i64,
        /// Its right side.
        right: i64,
    },
    /// The live replicas of a shard ended with different states.
    ReplicasDiverge {
        /// The shard.
        shard: u32,
        /// Distinct states among its live replicas.
        states: usize,
    },
    /// A replica's final state is not the reference's rows of its shard.
    StateMismatch {
        /// The shard.
        shard: u32,
        /// Which replica (its place among those given) and what differs.
        detail: String,
    },
    /// The dependency-graph checker ([`crate::depgraph`]) found an anomaly in the history of
    /// key accesses ([`super::history`]).
    Graph {
        /// The anomaly, as the checker names it.
        detail: String,
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
            TpccViolation::Graph { .. } => "dependency-graph",
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
                id,
                left,
                right,
            } => {
                write!(f, "consistency {condition}: warehouse {w_id}")?;
                if let Some(d) = d_id {
                    write!(f, ", district {d}")?;
                }
                if let Some(i) = id {
                    write!(f, ", id {i}")?;
                }
                write!(f, " has {left} against {right}")
            }
            TpccViolation::ReplicasDiverge { shard, states } => write!(
                f,
                "replicas-diverge: the live replicas of shard {shard} ended in {states} different states"
            ),
            TpccViolation::StateMismatch { shard, detail } => write!(
                f,
                "state-mismatch: shard {shard}'s final state is not the reference's: {detail}"
            ),
            TpccViolation::Graph { detail } => write!(f, "dependency-graph: {detail}"),
        }
    }
}

/// Most violations kept as samples (all are counted).
pub const SAMPLES_MAX: usize = 16;

/// What the checker checked, counted — and what it left out, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TpccChecks {
    /// Committed transactions replayed against the reference, their results compared.
    pub transactions: u64,
    /// Unfinished ones replayed (their effects applied in their place; no result to compare).
    pub unfinished: u64,
    /// Result fields compared (every field of every shard's answer, and every field the
    /// reference expected that an answer lacked).
    pub fields: u64,
    /// Shards whose final state was compared with the reference's (by rows or by digests).
    pub shards_compared: u64,
    /// Replicas whose rows were compared, row by row, with the reference's.
    pub replicas_compared: u64,
    /// Rows compared (summed over those replicas).
    pub rows_compared: u64,
    /// Replica digests compared with the reference's digest of its own rows (the live
    /// runtime's replicas report no more).
    pub digests_compared: u64,
    /// Consistency conditions evaluated: instances per condition ([`consistency`]).
    pub conditions: BTreeMap<&'static str, u64>,
    /// What was left out of a check, by reason: how many transactions, answers, shards, rows
    /// or condition instances.
    pub left_out: BTreeMap<&'static str, u64>,
}

impl TpccChecks {
    /// Consistency condition instances evaluated, all conditions together.
    pub fn conditions_evaluated(&self) -> u64 {
        self.conditions.values().sum()
    }

    fn leave_out(&mut self, why: &'static str, n: u64) {
        if n > 0 {
            *self.left_out.entry(why).or_default() += n;
        }
    }

    fn merge(&mut self, o: TpccChecks) {
        self.transactions += o.transactions;
        self.unfinished += o.unfinished;
        self.fields += o.fields;
        self.shards_compared += o.shards_compared;
        self.replicas_compared += o.replicas_compared;
        self.rows_compared += o.rows_compared;
        self.digests_compared += o.digests_compared;
        for (k, n) in o.conditions {
            *self.conditions.entry(k).or_default() += n;
        }
        for (k, n) in o.left_out {
            *self.left_out.entry(k).or_default() += n;
        }
    }
}

/// Why something was left out ([`TpccChecks::left_out`]).
pub mod left_out {
    /// Unfinished transactions: applied in their place, never returned, no result to compare.
    pub const UNFINISHED: &str = "unfinished: replayed, no result to compare";
    /// A second record of a transaction id: replayed once.
    pub const DUPLICATE: &str = "duplicate record: replayed once";
    /// An input naming a row the database does not hold: not replayed, nothing compared.
    pub const UNKNOWN_ROW: &str = "input names a row the database lacks: not replayed";
    /// An answer from a shard the transaction does not touch: not compared.
    pub const UNTOUCHED_SHARD: &str = "answer from an untouched shard: not compared";
    /// No final state given (mid-run, or not settled): no replica compared, no condition.
    pub const NO_STATE: &str = "final state not given: replicas and conditions unchecked";
    /// A shard with no live replica given: its final rows are unchecked.
    pub const SHARD_WITHOUT_REPLICA: &str = "shard with no live replica: its rows unchecked";
    /// A warehouse some of whose districts are on shards not given.
    pub const WAREHOUSE_PARTIAL: &str =
        "warehouse conditions: a district not given (3.3.2.1, 3.3.2.8)";
    /// Customers and stock rows while some district is not given: HISTORY or ORDER-LINE rows
    /// that concern them may be missing.
    pub const CUSTOMER_PARTIAL: &str =
        "customer conditions: a district not given, HISTORY incomplete (3.3.2.10, 3.3.2.12)";
    /// Stock rows while some district is not given.
    pub const STOCK_PARTIAL: &str = "stock conditions: a district not given, ORDER-LINE incomplete";
    /// Digests only: the conditions were evaluated over the reference's rows, which the digests
    /// matched, not over the replicas' own.
    pub const DIGESTS_ONLY: &str =
        "replica rows not reported (digests only): conditions over the reference's rows";
}

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct TpccVerdict {
    /// What it checked.
    pub checks: TpccChecks,
    /// Violations, counted.
    pub violations: u64,
    /// Violations by kind ([`TpccViolation::kind`]).
    pub by_kind: BTreeMap<&'static str, u64>,
    /// The first few.
    pub samples: Vec<TpccViolation>,
    /// The dependency-graph checker's verdict on the history of key accesses
    /// ([`super::history`]), which reads neither the order stated nor the reference: its
    /// anomalies are among `violations` too (kind `dependency-graph`).
    pub graph: GraphVerdict,
}

impl TpccVerdict {
    /// Takes the dependency-graph checker's verdict: its anomalies count as violations.
    fn add_graph(&mut self, g: GraphVerdict) {
        self.violations += g.anomalies;
        if g.anomalies > 0 {
            *self.by_kind.entry("dependency-graph").or_default() += g.anomalies;
        }
        for detail in &g.samples {
            if self.samples.len() < SAMPLES_MAX {
                self.samples.push(TpccViolation::Graph {
                    detail: detail.clone(),
                });
            }
        }
        self.graph = g;
    }

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

    /// The run's key accesses as a history in Jepsen's form ([`super::history`]), `unfinished`
    /// ones (bound to take effect) as `info`: for `--history`.
    pub fn history_json(&self, unfinished: &[TpccCommitted]) -> String {
        let initial = Population::load(&self.scale, self.seed);
        super::history::history_json(&self.committed, unfinished, &initial)
    }

    /// Replays the history and checks every result and the real-time order (no final state).
    pub fn verdict(&self, skew_ns: u64) -> TpccVerdict {
        self.verdict_with(&[], &[], skew_ns)
    }

    /// The replay and real-time check, with `unfinished` transactions bound to take effect (their
    /// effects apply in their place; nothing to compare), and, if `replicas` is not empty, the
    /// final state: `(shard, state)` of every live replica ([`super::TpccApp::shard`]) — each
    /// replica's rows equal to the reference's rows of its shard, replicas of a shard alike, and
    /// the consistency conditions over one replica per shard. Times are the initiators' clocks:
    /// the real-time check allows `skew_ns` between them.
    pub fn verdict_with(
        &self,
        unfinished: &[TpccCommitted],
        replicas: &[(u32, &Shard)],
        skew_ns: u64,
    ) -> TpccVerdict {
        let (initial, reference, mut v) = self.replay(unfinished, skew_ns);
        if replicas.is_empty() {
            v.checks.leave_out(left_out::NO_STATE, 1);
        } else {
            self.check_state(&initial, &reference, replicas, &mut v);
        }
        v
    }

    /// [`TpccChecker::verdict_with`] for replicas known by their digests only (`(shard,
    /// Shard::digest)` of every live replica: the live runtime's processes report no more).
    /// Replicas of a shard must agree and equal the reference's digest of its rows of that shard
    /// ([`Rows::digest`]); the consistency conditions are then evaluated over the reference's
    /// rows, which the replicas equal.
    pub fn verdict_with_digests(
        &self,
        unfinished: &[TpccCommitted],
        digests: &[(u32, u64)],
        skew_ns: u64,
    ) -> TpccVerdict {
        let (initial, reference, mut v) = self.replay(unfinished, skew_ns);
        let expected = reference.rows().split(&self.layout);
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
            v.checks.shards_compared += 1;
            let want = expected.get(&shard).map_or(0, Rows::digest);
            for &d in ds.iter().filter(|&&d| d != want) {
                v.add(TpccViolation::StateMismatch {
                    shard,
                    detail: format!("digest {d:#x}, the reference's rows {want:#x}"),
                });
            }
        }
        v.checks.digests_compared += digests.len() as u64;
        let missing = (0..self.layout.shards).filter(|s| !by_shard.contains_key(s));
        v.checks
            .leave_out(left_out::SHARD_WITHOUT_REPLICA, missing.count() as u64);
        v.checks
            .leave_out(left_out::DIGESTS_ONLY, digests.len() as u64);
        let (checks, found) = consistency(reference.rows(), &initial);
        v.checks.merge(checks);
        for x in found {
            v.add(x);
        }
        v
    }

    /// Replays the committed transactions (and `unfinished` ones, whose effects apply) in order
    /// on the reference, comparing every result, and checks real time: the population as
    /// loaded, the reference at the end, and the verdict so far.
    fn replay(
        &self,
        unfinished: &[TpccCommitted],
        skew_ns: u64,
    ) -> (Population, Reference, TpccVerdict) {
        let all: Vec<&TpccCommitted> = self.committed.iter().chain(unfinished).collect();
        let done = self.committed.len();
        let mut v = TpccVerdict::default();
        let mut order: Vec<usize> = (0..all.len()).collect();
        order.sort_by_key(|&i| (all[i].key, all[i].client, all[i].seq, all[i].txn));
        let initial = Population::load(&self.scale, self.seed);
        let mut reference = Reference::new(initial.clone());
        let mut seen = BTreeSet::new();
        for &i in &order {
            let c = all[i];
            if !seen.insert(c.txn) {
                v.add(TpccViolation::Duplicate { txn: c.txn });
                v.checks.leave_out(left_out::DUPLICATE, 1);
                continue;
            }
            let Some(outcome) = reference.execute(&c.input) else {
                v.checks.leave_out(left_out::UNKNOWN_ROW, 1);
                continue;
            };
            if i < done {
                v.checks.transactions += 1;
                self.compare(c, &outcome, &mut v);
            } else {
                v.checks.unfinished += 1;
                v.checks.leave_out(left_out::UNFINISHED, 1);
            }
        }
        real_time(&all[..done], &order, skew_ns, &mut v);
        // Serializability again, from the history alone: no key, seq or reference.
        v.add_graph(super::history::graph_verdict(
            &self.committed,
            unfinished,
            &initial,
            skew_ns,
        ));
        (initial, reference, v)
    }

    /// The shards holding a row `input` names — the warehouse, the districts, every line's
    /// stock row, even when an unused item rolls a New-Order back: each such shard answers.
    fn touched(&self, input: &TxnInput) -> BTreeSet<u32> {
        let rows: Vec<RowKey> = match input {
            TxnInput::NewOrder(t) => [RowKey::Warehouse(t.w_id), RowKey::District(t.w_id, t.d_id)]
                .into_iter()
                .chain(t.lines.iter().map(|l| RowKey::Stock(l.supply_w_id, l.i_id)))
                .collect(),
            TxnInput::Payment(t) => vec![
                RowKey::Warehouse(t.w_id),
                RowKey::District(t.w_id, t.d_id),
                RowKey::District(t.c_w_id, t.c_d_id),
            ],
        };
        rows.into_iter().map(|r| self.layout.shard_of(r)).collect()
    }

    /// Compares every field of the results `c` got with the reference's `outcome`, shard by
    /// shard.
    fn compare(&self, c: &TpccCommitted, outcome: &Outcome, v: &mut TpccVerdict) {
        let touched = self.touched(&c.input);
        let mut answered = BTreeSet::new();
        for (shard, got) in &c.results {
            answered.insert(*shard);
            if !touched.contains(shard) {
                v.add(TpccViolation::UnexpectedShard {
                    txn: c.txn,
                    shard: *shard,
                });
                v.checks.leave_out(left_out::UNTOUCHED_SHARD, 1);
                continue;
            }
            let expected = expected_fields(outcome, &c.input, &self.layout, *shard);
            let got = got_fields(got);
            let names: BTreeSet<&String> = got.keys().chain(expected.keys()).collect();
            for name in names {
                v.checks.fields += 1;
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

    /// The live replicas' final rows against the reference's, and the consistency conditions
    /// over one replica of every shard.
    fn check_state(
        &self,
        initial: &Population,
        reference: &Reference,
        replicas: &[(u32, &Shard)],
        v: &mut TpccVerdict,
    ) {
        let expected = reference.rows().split(&self.layout);
        let mut by_shard: BTreeMap<u32, Vec<&Shard>> = BTreeMap::new();
        for &(s, r) in replicas {
            by_shard.entry(s).or_default().push(r);
        }
        let none = Rows::default();
        let mut state = Rows::default();
        for (&shard, rs) in &by_shard {
            let mut rows: Vec<Rows> = rs.iter().map(|r| Rows::from_shard(r)).collect();
            let mut distinct: Vec<&Rows> = Vec::new();
            for r in &rows {
                if !distinct.contains(&r) {
                    distinct.push(r);
                }
            }
            if distinct.len() > 1 {
                v.add(TpccViolation::ReplicasDiverge {
                    shard,
                    states: distinct.len(),
                });
            }
            v.checks.shards_compared += 1;
            let want = expected.get(&shard).unwrap_or(&none);
            for (i, r) in rows.iter().enumerate() {
                v.checks.replicas_compared += 1;
                v.checks.rows_compared += r.len() as u64;
                if let (n @ 1.., first) = r.diff(want) {
                    v.add(TpccViolation::StateMismatch {
                        shard,
                        detail: format!(
                            "replica {i} of those given: {n} row(s) differ; {}",
                            first.unwrap_or_default()
                        ),
                    });
                }
            }
            state.extend(rows.swap_remove(0));
        }
        let missing = (0..self.layout.shards).filter(|s| !by_shard.contains_key(s));
        v.checks
            .leave_out(left_out::SHARD_WITHOUT_REPLICA, missing.count() as u64);
        let (checks, found) = consistency(&state, initial);
        v.checks.merge(checks);
        for x in found {
            v.add(x);
        }
    }
}

/// What took effect beyond what the initiators report committed — with what the replicas that
/// applied it answered, one answer per shard — every transaction a replica applied (`applied`, the replicas' logs in their apply order, [`super::TpccConfig::log_applied`])
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
            let u = open.entry(a.txn).or_insert_with(|| TpccCommitted {
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
            // What the replicas answered, one per shard: the history's values for it (the
            // replay compares none of an unfinished one's).
            if let Some((shard, part)) = &a.answer {
                if let Err(at) = u.results.binary_search_by_key(shard, |r| r.0) {
                    u.results.insert(at, (*shard, part.clone()));
                }
            }
        }
    }
    open.into_values().collect()
}

/// `unfinished`, the records of the transactions the initiators left open (stamped, bound to
/// take effect), completed by what the replicas logged ([`unfinished_from_logs`] of `committed`
/// and `logs`): each record takes the answers of the shards its initiator never heard, and a
/// transaction some replica applied that no initiator reports — stamped after its initiator last
/// heard — is added. An initiator that fails leaves its open transactions' answers unheard; the
/// history ([`super::history`]) then takes their writes from the replicas, which applied them,
/// instead of inferring them (several unread writes on one row in a row cannot be inferred).
pub fn complete_from_logs<'a>(
    mut unfinished: Vec<TpccCommitted>,
    committed: impl Iterator<Item = &'a TpccCommitted>,
    logs: impl Iterator<Item = &'a [super::onepipe::AppliedTxn]>,
) -> Vec<TpccCommitted> {
    let at: BTreeMap<u64, usize> = unfinished
        .iter()
        .enumerate()
        .map(|(i, u)| (u.txn, i))
        .collect();
    for logged in unfinished_from_logs(committed, logs) {
        let Some(&i) = at.get(&logged.txn) else {
            unfinished.push(logged);
            continue;
        };
        let u = &mut unfinished[i];
        assert_eq!(
            u.input, logged.input,
            "{:#x}: one transaction, one input",
            u.txn
        );
        for (shard, part) in logged.results {
            if let Err(at) = u.results.binary_search_by_key(&shard, |r| r.0) {
                u.results.insert(at, (shard, part));
            }
        }
    }
    unfinished
}

/// What shard `shard` of `layout` should answer for `input`, by the reference's `outcome`: the
/// fields of the rows that shard holds, named as [`got_fields`] names them.
///
/// # Panics
///
/// If `outcome` is not of `input`'s kind (it is what the reference gave for it).
fn expected_fields(
    outcome: &Outcome,
    input: &TxnInput,
    layout: &TpccLayout,
    shard: u32,
) -> BTreeMap<String, i64> {
    let here = |row: RowKey| layout.shard_of(row) == shard;
    let mut f = BTreeMap::new();
    let mut put = |name: &str, x: i64| f.insert(name.to_string(), x);
    match (outcome, input) {
        (Outcome::NewOrder(o), TxnInput::NewOrder(t)) => {
            put("kind", 1);
            put("rolled_back", o.rolled_back.into());
            if here(RowKey::Warehouse(t.w_id)) {
                put("w_tax", o.w_tax.into());
            }
            if here(RowKey::District(t.w_id, t.d_id)) {
                put("d_tax", o.d_tax.into());
                put("o_id", o.o_id.into());
                put("c_discount", o.c_discount.into());
                put("c_last", o.c_last.into());
                put("c_credit", (o.c_credit == Credit::Bad).into());
            }
            // Lines are output only by a New-Order that went through (none if rolled back).
            for (n, (l, out)) in t.lines.iter().zip(&o.lines).enumerate() {
                if here(RowKey::Stock(l.supply_w_id, l.i_id)) {
                    put(&format!("s_quantity[{n}]"), out.s_quantity);
                }
            }
        }
        (Outcome::Payment(p), TxnInput::Payment(t)) => {
            put("kind", 2);
            if here(RowKey::Warehouse(t.w_id)) {
                put("w_ytd", p.w_ytd);
            }
            if here(RowKey::District(t.w_id, t.d_id)) {
                put("d_ytd", p.d_ytd);
            }
            if here(RowKey::District(t.c_w_id, t.c_d_id)) {
                // No customer of that name: the representation answers `C_ID` 0, balance 0,
                // good credit (`PaymentCustomer`'s docs); the specification's database always
                // has one (clause 4.3.2.3).
                let (c_id, c_balance, bad) = p.customer.map_or((0, 0, false), |c| {
                    (c.c_id, c.c_balance, c.c_credit == Credit::Bad)
                });
                put("c_id", c_id.into());
                put("c_balance", c_balance);
                put("c_credit", bad.into());
            }
        }
        // The reference executed `input` itself: the kinds agree.
        _ => unreachable!("a {:?} outcome for a {:?} input", outcome, input.kind()),
    }
    f
}

/// Every field of a shard's answer, by name (booleans and enums 0 or 1). The patterns are
/// exhaustive: a field added to the answer fails to compile here until it is compared.
fn got_fields(part: &PartResult) -> BTreeMap<String, i64> {
    let mut f = BTreeMap::new();
    let mut put = |name: &str, x: i64| f.insert(name.to_string(), x);
    match part {
        PartResult::NewOrder(NewOrderPart {
            rolled_back,
            w_tax,
            district,
            stock,
        }) => {
            put("kind", 1);
            put("rolled_back", (*rolled_back).into());
            if let Some(t) = w_tax {
                put("w_tax", (*t).into());
            }
            if let Some(NewOrderDistrict {
                d_tax,
                o_id,
                c_discount,
                c_last,
                c_credit,
            }) = district
            {
                put("d_tax", (*d_tax).into());
                put("o_id", (*o_id).into());
                put("c_discount", (*c_discount).into());
                put("c_last", (*c_last).into());
                put("c_credit", (*c_credit == Credit::Bad).into());
            }
            for &(line, q) in stock {
                put(&format!("s_quantity[{line}]"), q.into());
            }
        }
        PartResult::Payment(PaymentPart {
            w_ytd,
            d_ytd,
            customer,
        }) => {
            put("kind", 2);
            if let Some(y) = w_ytd {
                put("w_ytd", *y);
            }
            if let Some(y) = d_ytd {
                put("d_ytd", *y);
            }
            if let Some(PaymentCustomer {
                c_id,
                c_balance,
                c_credit,
            }) = customer
            {
                put("c_id", (*c_id).into());
                put("c_balance", *c_balance);
                put("c_credit", (*c_credit == Credit::Bad).into());
            }
        }
    }
    f
}

/// The conditions' names, each with its clause.
pub mod condition {
    /// 3.3.2.1.
    pub const W_YTD_SUM_D_YTD: &str = "3.3.2.1 W_YTD = sum(D_YTD)";
    /// 3.3.2.2, ORDER.
    pub const NEXT_O_ID_MAX_O_ID: &str = "3.3.2.2 D_NEXT_O_ID - 1 = max(O_ID)";
    /// 3.3.2.2, NEW-ORDER.
    pub const NEXT_O_ID_MAX_NO_O_ID: &str = "3.3.2.2 D_NEXT_O_ID - 1 = max(NO_O_ID)";
    /// 3.3.2.3.
    pub const NEW_ORDER_CONTIGUOUS: &str =
        "3.3.2.3 max(NO_O_ID) - min(NO_O_ID) + 1 = count(NEW-ORDER)";
    /// 3.3.2.4.
    pub const OL_CNT_SUM: &str = "3.3.2.4 sum(O_OL_CNT) = count(ORDER-LINE)";
    /// 3.3.2.5, with `O_CARRIER_ID` null everywhere (no Delivery).
    pub const CARRIER_NULL_IFF_NEW_ORDER: &str =
        "3.3.2.5 O_CARRIER_ID null (all) iff NEW-ORDER: |ORDER xor NEW-ORDER| = 0";
    /// 3.3.2.6.
    pub const OL_CNT_PER_ORDER: &str = "3.3.2.6 O_OL_CNT = count(ORDER-LINE of the order)";
    /// 3.3.2.8.
    pub const W_YTD_HISTORY: &str = "3.3.2.8 W_YTD = initial + sum(H_AMOUNT)";
    /// 3.3.2.9.
    pub const D_YTD_HISTORY: &str = "3.3.2.9 D_YTD = initial + sum(H_AMOUNT)";
    /// 3.3.2.10, with no delivered order line.
    pub const C_BALANCE_HISTORY: &str = "3.3.2.10 C_BALANCE = initial - sum(H_AMOUNT)";
    /// 3.3.2.11, against the loaded difference.
    pub const ORDERS_MINUS_NEW_ORDERS: &str = "3.3.2.11 count(ORDER) - count(NEW-ORDER) = initial";
    /// 3.3.2.12, with no delivered order line.
    pub const C_BALANCE_PLUS_YTD: &str = "3.3.2.12 C_BALANCE + C_YTD_PAYMENT = initial";
    /// From 2.5.2.2 (`C_PAYMENT_CNT` incremented by each payment, each inserting a HISTORY row).
    pub const C_PAYMENT_CNT_HISTORY: &str = "2.5.2.2 C_PAYMENT_CNT = initial + count(HISTORY)";
    /// From 2.4.2.2.
    pub const OL_AMOUNT: &str = "2.4.2.2 OL_AMOUNT = OL_QUANTITY * I_PRICE";
    /// From 2.4.2.2.
    pub const S_YTD: &str = "2.4.2.2 S_YTD = initial + sum(OL_QUANTITY)";
    /// From 2.4.2.2.
    pub const S_ORDER_CNT: &str = "2.4.2.2 S_ORDER_CNT = initial + count(ORDER-LINE)";
    /// From 2.4.2.2.
    pub const S_REMOTE_CNT: &str = "2.4.2.2 S_REMOTE_CNT = initial + count(remote ORDER-LINE)";
}

/// The consistency conditions of the module docs (clause 3.3.2 as it applies with only
/// New-Order and Payment, and what clause 2.4.2.2 and 2.5.2.2 add) over `state` — the final
/// rows of one replica of each shard given, read as data — against `initial`, the population
/// as loaded. A condition that needs rows of a shard not given is not evaluated (counted in
/// [`TpccChecks::left_out`]). Returns what was evaluated and the violations.
pub fn consistency(state: &Rows, initial: &Population) -> (TpccChecks, Vec<TpccViolation>) {
    let mut e = Eval::default();
    for (&(w, d), r) in &state.districts {
        e.district(state, initial, w, d, r);
    }
    for (&w, r) in &state.warehouses {
        e.warehouse(state, initial, w, r);
    }
    // A customer's HISTORY rows and a stock row's ORDER-LINE rows may be kept by any district.
    let all_districts = initial
        .rows
        .districts
        .keys()
        .all(|k| state.districts.contains_key(k));
    if all_districts {
        e.customers(state, initial);
        e.stock(state, initial);
    } else {
        let (c, s) = (state.customers.len(), state.stock.len());
        e.checks.leave_out(left_out::CUSTOMER_PARTIAL, c as u64);
        e.checks.leave_out(left_out::STOCK_PARTIAL, s as u64);
    }
    for (&(w, d, o, _), l) in &state.order_lines {
        let price = initial.price(l.i_id).unwrap_or(-1);
        e.check(
            condition::OL_AMOUNT,
            (w, Some(d), Some(o)),
            l.amount,
            l.quantity * price,
        );
    }
    (e.checks, e.found)
}

/// Conditions evaluated so far, and the violations.
#[derive(Default)]
struct Eval {
    checks: TpccChecks,
    found: Vec<TpccViolation>,
}

impl Eval {
    /// One instance of `condition` on `(w_id, d_id, id)`: `left = right`.
    fn check(
        &mut self,
        condition: &'static str,
        (w_id, d_id, id): (u32, Option<u32>, Option<u32>),
        left: i64,
        right: i64,
    ) {
        *self.checks.conditions.entry(condition).or_default() += 1;
        if left != right {
            self.found.push(TpccViolation::Consistency {
                condition,
                w_id,
                d_id,
                id,
                left,
                right,
            });
        }
    }

    fn district(
        &mut self,
        state: &Rows,
        initial: &Population,
        w: u32,
        d: u32,
        r: &reference::DistrictRow,
    ) {
        let at = (w, Some(d), None);
        let orders: BTreeMap<u32, &reference::OrderRow> = state
            .orders
            .range((w, d, 0)..=(w, d, u32::MAX))
            .map(|(k, o)| (k.2, o))
            .collect();
        let new_orders: BTreeSet<u32> = state
            .new_orders
            .range((w, d, 0)..=(w, d, u32::MAX))
            .map(|k| k.2)
            .collect();
        let mut lines: BTreeMap<u32, i64> = BTreeMap::new();
        for k in state
            .order_lines
            .range((w, d, 0, 0)..=(w, d, u32::MAX, u32::MAX))
        {
            *lines.entry(k.0 .2).or_default() += 1;
        }
        let next = i64::from(r.d_next_o_id) - 1;
        let max_o = orders.keys().next_back().copied().unwrap_or(0);
        let max_no = new_orders.last().copied().unwrap_or(0);
        let min_no = new_orders.first().copied().unwrap_or(1);
        self.check(condition::NEXT_O_ID_MAX_O_ID, at, next, max_o.into());
        self.check(condition::NEXT_O_ID_MAX_NO_O_ID, at, next, max_no.into());
        self.check(
            condition::NEW_ORDER_CONTIGUOUS,
            at,
            i64::from(max_no) - i64::from(min_no) + 1,
            new_orders.len() as i64,
        );
        self.check(
            condition::OL_CNT_SUM,
            at,
            orders.values().map(|o| o.ol_cnt).sum(),
            lines.values().sum(),
        );
        let ids: BTreeSet<u32> = orders.keys().copied().collect();
        let xor = ids.symmetric_difference(&new_orders).count();
        self.check(condition::CARRIER_NULL_IFF_NEW_ORDER, at, xor as i64, 0);
        for (&o, row) in &orders {
            let n = lines.get(&o).copied().unwrap_or(0);
            self.check(
                condition::OL_CNT_PER_ORDER,
                (w, Some(d), Some(o)),
                row.ol_cnt,
                n,
            );
        }
        let init = |rows: &Rows| {
            let o = rows.orders.range((w, d, 0)..=(w, d, u32::MAX)).count();
            let no = rows.new_orders.range((w, d, 0)..=(w, d, u32::MAX)).count();
            o as i64 - no as i64
        };
        self.check(
            condition::ORDERS_MINUS_NEW_ORDERS,
            at,
            orders.len() as i64 - new_orders.len() as i64,
            init(&initial.rows),
        );
        let d_ytd0 = initial.rows.districts.get(&(w, d)).map_or(0, |x| x.d_ytd);
        self.check(
            condition::D_YTD_HISTORY,
            at,
            r.d_ytd,
            d_ytd0 + history_sum(state, w, d),
        );
    }

    fn warehouse(
        &mut self,
        state: &Rows,
        initial: &Population,
        w: u32,
        r: &reference::WarehouseRow,
    ) {
        let ds: Vec<u32> = initial
            .rows
            .districts
            .range((w, 0)..=(w, u32::MAX))
            .map(|(k, _)| k.1)
            .collect();
        if !ds.iter().all(|&d| state.districts.contains_key(&(w, d))) {
            self.checks.leave_out(left_out::WAREHOUSE_PARTIAL, 2);
            return;
        }
        let at = (w, None, None);
        let d_ytd: i64 = ds.iter().map(|&d| state.districts[&(w, d)].d_ytd).sum();
        self.check(condition::W_YTD_SUM_D_YTD, at, r.w_ytd, d_ytd);
        let w_ytd0 = initial.rows.warehouses.get(&w).map_or(0, |x| x.w_ytd);
        let paid: i64 = ds.iter().map(|&d| history_sum(state, w, d)).sum();
        self.check(condition::W_YTD_HISTORY, at, r.w_ytd, w_ytd0 + paid);
    }

    /// 3.3.2.10, 3.3.2.12 and `C_PAYMENT_CNT`, per customer: HISTORY's customer selectors
    /// resolved by the specification's rule (clause 2.5.2.2, [`reference::middle`]) over the
    /// state's own `C_LAST` and `C_FIRST` (which no transaction changes).
    fn customers(&mut self, state: &Rows, initial: &Population) {
        let index = reference::by_last_name_index(state);
        let mut paid: BTreeMap<(u32, u32, u32), (i64, i64)> = BTreeMap::new();
        for h in state.history.values().flatten() {
            let c = match h.customer {
                CustomerSelector::Id(c) => Some(c),
                CustomerSelector::LastName(code) => index
                    .get(&(h.c_w_id, h.c_d_id, code))
                    .and_then(|cs| reference::middle(cs)),
            };
            if let Some(c) = c {
                let e = paid.entry((h.c_w_id, h.c_d_id, c)).or_default();
                e.0 += h.amount;
                e.1 += 1;
            }
        }
        for (&k, c) in &state.customers {
            let Some(c0) = initial.rows.customers.get(&k) else {
                continue;
            };
            let (sum, count) = paid.get(&k).copied().unwrap_or_default();
            let at = (k.0, Some(k.1), Some(k.2));
            self.check(
                condition::C_BALANCE_HISTORY,
                at,
                c.c_balance,
                c0.c_balance - sum,
            );
            self.check(
                condition::C_BALANCE_PLUS_YTD,
                at,
                c.c_balance + c.c_ytd_payment,
                c0.c_balance + c0.c_ytd_payment,
            );
            self.check(
                condition::C_PAYMENT_CNT_HISTORY,
                at,
                c.c_payment_cnt,
                c0.c_payment_cnt + count,
            );
        }
    }

    /// `S_YTD`, `S_ORDER_CNT` and `S_REMOTE_CNT` per stock row against the order lines it
    /// supplied (clause 2.4.2.2; a line is remote when `OL_SUPPLY_W_ID ≠ OL_W_ID`).
    fn stock(&mut self, state: &Rows, initial: &Population) {
        let mut supplied: BTreeMap<(u32, u32), (i64, i64, i64)> = BTreeMap::new();
        for (&(w, _, _, _), l) in &state.order_lines {
            let e = supplied.entry((l.supply_w_id, l.i_id)).or_default();
            e.0 += l.quantity;
            e.1 += 1;
            e.2 += i64::from(l.supply_w_id != w);
        }
        for (&(w, i), s) in &state.stock {
            let Some(s0) = initial.rows.stock.get(&(w, i)) else {
                continue;
            };
            let (qty, n, remote) = supplied.get(&(w, i)).copied().unwrap_or_default();
            let at = (w, None, Some(i));
            self.check(condition::S_YTD, at, s.s_ytd, s0.s_ytd + qty);
            self.check(
                condition::S_ORDER_CNT,
                at,
                s.s_order_cnt,
                s0.s_order_cnt + n,
            );
            self.check(
                condition::S_REMOTE_CNT,
                at,
                s.s_remote_cnt,
                s0.s_remote_cnt + remote,
            );
        }
    }
}

/// `sum(H_AMOUNT)` of the payments made at district (`w`, `d`).
fn history_sum(state: &Rows, w: u32, d: u32) -> i64 {
    state
        .history
        .get(&(w, d))
        .map_or(0, |h| h.iter().map(|r| r.amount).sum())
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
