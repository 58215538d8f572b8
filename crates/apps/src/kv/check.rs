//! The transactional store's checker, for every run: replays the committed transactions in the
//! system's serialization order on a model and checks every value read (serializability), and
//! that a transaction that returned before another was called comes first in that order (strict
//! serializability). It also writes the run's transactions as a history in Jepsen's form
//! ([`crate::history`]) and hands it to the dependency-graph checker ([`crate::depgraph`]), which
//! reads the history alone.

use super::{AppliedWrite, Committed, Key, TxnKind, Value};
use crate::depgraph::{self, GraphVerdict};
use crate::history::{self, Mop, OpType, Operation};
use std::collections::HashMap;

/// One violation, with what it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvViolation {
    /// A read returned something else than the model holds at the transaction's place.
    StaleRead {
        /// The transaction.
        txn: u64,
        /// The key.
        key: Key,
        /// What it read.
        read: Option<Value>,
        /// What the serialization order says it should have read.
        expected: Option<Value>,
    },
    /// `later` returned before `earlier` was called, yet comes after it in the order.
    RealTime {
        /// The transaction that comes first in the order.
        earlier: u64,
        /// The transaction that returned first.
        later: u64,
    },
    /// Two committed transactions share an id.
    Duplicate {
        /// The id.
        txn: u64,
    },
}

impl std::fmt::Display for KvViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KvViolation::StaleRead {
                txn,
                key,
                read,
                expected,
            } => write!(
                f,
                "stale-read: transaction {txn:#x} read key {key} as {read:?}, its place in the order holds {expected:?}"
            ),
            KvViolation::RealTime { earlier, later } => write!(
                f,
                "real-time: transaction {later:#x} returned before {earlier:#x} was called, yet is serialized after it"
            ),
            KvViolation::Duplicate { txn } => write!(f, "duplicate: transaction {txn:#x} committed twice"),
        }
    }
}

/// What took effect beyond what the initiators report committed: every transaction of which a
/// server applied a write (`applied`, the servers' logs, [`super::KvConfig::log_applied`]) but
/// that is not among `committed`, as an unfinished writer — its applied writes at its timestamp,
/// no reads, never returned — for [`KvChecker::verdict_with`]. Its initiator died, or gave it up
/// when a server failed (§2.2.3), or the run ended first; a scattering recalled by §5.2 was
/// applied nowhere and takes no place.
pub fn unfinished_from_logs<'a>(
    committed: impl Iterator<Item = &'a Committed>,
    applied: impl Iterator<Item = &'a AppliedWrite>,
) -> Vec<Committed> {
    let mut open: std::collections::BTreeMap<u64, Committed> = Default::default();
    for w in applied {
        let u = open.entry(w.txn).or_insert_with(|| Committed {
            txn: w.txn,
            client: w.client,
            kind: TxnKind::WriteOnly,
            ts: w.ts,
            reads: Vec::new(),
            writes: Vec::new(),
            call_ns: 0,
            return_ns: u64::MAX,
            attempts: 1,
        });
        u.writes.push((w.key, w.value));
    }
    for c in committed {
        open.remove(&c.txn);
    }
    open.into_values().collect()
}

/// Most violations kept as samples (all are counted).
const SAMPLES_MAX: usize = 16;

/// What the checker found.
#[derive(Debug, Clone, Default)]
pub struct KvVerdict {
    /// Transactions checked.
    pub transactions: u64,
    /// Reads checked.
    pub reads: u64,
    /// Violations, counted.
    pub violations: u64,
    /// The first few.
    pub samples: Vec<KvViolation>,
}

impl KvVerdict {
    fn add(&mut self, v: KvViolation) {
        self.violations += 1;
        if self.samples.len() < SAMPLES_MAX {
            self.samples.push(v);
        }
    }
}

/// Collects committed transactions; [`KvChecker::verdict`] checks them.
#[derive(Debug, Default)]
pub struct KvChecker {
    committed: Vec<Committed>,
}

impl KvChecker {
    /// An empty history.
    pub fn new() -> KvChecker {
        KvChecker::default()
    }

    /// Records a committed transaction.
    pub fn on_commit(&mut self, c: Committed) {
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
    pub fn committed(&self) -> &[Committed] {
        &self.committed
    }

    /// Replays the history in serialization order — (timestamp, initiator, id), 1Pipe's total order —
    /// and checks every read and the real-time order. Times are the initiators' local clocks, so
    /// the real-time check allows `skew_ns` of disagreement between them.
    pub fn verdict(&self, skew_ns: u64) -> KvVerdict {
        self.verdict_with(&[], skew_ns)
    }

    /// [`KvChecker::verdict`], with transactions still open at the end whose writes are bound to
    /// be applied ([`super::TxnApp::unfinished`]): their writes take their place in the order
    /// (a committed read may have seen them), they read nothing and never returned.
    pub fn verdict_with(&self, unfinished: &[Committed], skew_ns: u64) -> KvVerdict {
        let all: Vec<&Committed> = self.committed.iter().chain(unfinished).collect();
        let mut v = KvVerdict::default();
        let mut order: Vec<usize> = (0..all.len()).collect();
        // (timestamp, initiator), and an initiator's transactions of one timestamp in the order
        // it sent them: their ids'.
        order.sort_by_key(|&i| {
            let c = all[i];
            (c.ts, c.client, c.txn)
        });
        let mut model: HashMap<Key, Value> = HashMap::new();
        let mut seen: HashMap<u64, ()> = HashMap::new();
        for &i in &order {
            let c = all[i];
            v.transactions += 1;
            if seen.insert(c.txn, ()).is_some() {
                v.add(KvViolation::Duplicate { txn: c.txn });
            }
            for &(key, read) in &c.reads {
                v.reads += 1;
                let expected = model.get(&key).copied();
                if read != expected {
                    v.add(KvViolation::StaleRead {
                        txn: c.txn,
                        key,
                        read,
                        expected,
                    });
                }
            }
            for &(key, value) in &c.writes {
                model.insert(key, value);
            }
        }
        // Real time: by call time, each transaction must come after every one that returned
        // before it was called. Sweep calls in time order, keeping the latest place in the order
        // among the transactions returned so far.
        let mut place = vec![0usize; all.len()];
        for (p, &i) in order.iter().enumerate() {
            place[i] = p;
        }
        let mut by_call: Vec<usize> = (0..all.len()).collect();
        by_call.sort_by_key(|&i| all[i].call_ns);
        let mut by_return: Vec<usize> = (0..all.len()).collect();
        by_return.sort_by_key(|&i| all[i].return_ns);
        let mut r = 0;
        let mut latest: Option<usize> = None;
        for &i in &by_call {
            let call = all[i].call_ns;
            while r < by_return.len() && all[by_return[r]].return_ns.saturating_add(skew_ns) < call
            {
                let j = by_return[r];
                if latest.is_none_or(|l| place[j] > place[l]) {
                    latest = Some(j);
                }
                r += 1;
            }
            if let Some(l) = latest {
                if place[l] > place[i] {
                    v.add(KvViolation::RealTime {
                        earlier: all[i].txn,
                        later: all[l].txn,
                    });
                }
            }
        }
        v
    }

    /// The run as operations: every committed transaction `ok` with what its reads returned,
    /// and each of `unfinished` (a writer a server applied whose initiator never heard back,
    /// [`unfinished_from_logs`]) of unknown outcome. Values are the writing transaction's id,
    /// so they are unique per key.
    pub fn operations(&self, unfinished: &[Committed]) -> Vec<Operation> {
        let op = |c: &Committed, outcome| Operation {
            client: c.client,
            call_ns: c.call_ns,
            outcome,
            mops: c
                .reads
                .iter()
                .map(|&(k, v)| Mop::Read(k, v.map(|v| v.writer)))
                .chain(c.writes.iter().map(|&(k, v)| Mop::Write(k, v.writer)))
                .collect(),
        };
        let done = self
            .committed
            .iter()
            .map(|c| op(c, Some((OpType::Ok, c.return_ns))));
        done.chain(unfinished.iter().map(|c| op(c, None))).collect()
    }

    /// The run's history in Jepsen's form ([`crate::history`]), for `--history`.
    pub fn history_json(&self, unfinished: &[Committed]) -> String {
        history::to_json(&history::build(&self.operations(unfinished)))
    }

    /// The dependency-graph checker's verdict ([`crate::depgraph`]) on the run's history: it
    /// reads the history alone — not the timestamps [`KvChecker::verdict_with`] replays in.
    pub fn graph_verdict(&self, unfinished: &[Committed], skew_ns: u64) -> GraphVerdict {
        depgraph::strict(&history::build(&self.operations(unfinished)), skew_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::TxnKind;

    fn c(
        txn: u64,
        ts: u64,
        reads: &[(Key, Option<u64>)],
        writes: &[Key],
        call: u64,
        ret: u64,
    ) -> Committed {
        Committed {
            txn,
            client: (txn >> 40) as u32,
            kind: TxnKind::ReadWrite,
            ts,
            reads: reads
                .iter()
                .map(|&(k, w)| (k, w.map(|writer| Value { writer, len: 8 })))
                .collect(),
            writes: writes
                .iter()
                .map(|&k| {
                    (
                        k,
                        Value {
                            writer: txn,
                            len: 8,
                        },
                    )
                })
                .collect(),
            call_ns: call,
            return_ns: ret,
            attempts: 1,
        }
    }

    #[test]
    fn a_serializable_history_passes() {
        let mut k = KvChecker::new();
        k.on_commit(c(1, 10, &[(5, None)], &[5], 0, 100));
        k.on_commit(c(2, 20, &[(5, Some(1))], &[6], 50, 150));
        k.on_commit(c(3, 30, &[(5, Some(1)), (6, Some(2))], &[], 200, 300));
        let v = k.verdict(0);
        assert_eq!(
            (v.transactions, v.reads, v.violations),
            (3, 4, 0),
            "{:?}",
            v.samples
        );
    }

    #[test]
    fn a_read_of_a_write_from_later_in_the_order_is_caught() {
        let mut k = KvChecker::new();
        k.on_commit(c(1, 30, &[], &[5], 0, 100));
        k.on_commit(c(2, 20, &[(5, Some(1))], &[], 50, 150));
        let v = k.verdict(0);
        assert_eq!(v.violations, 1);
        assert!(
            v.samples[0].to_string().starts_with("stale-read"),
            "{}",
            v.samples[0]
        );
    }

    #[test]
    fn an_order_against_real_time_is_caught() {
        let mut k = KvChecker::new();
        // 2 returned at 100, before 1 was called at 200, yet is ordered after it.
        k.on_commit(c(1, 10, &[], &[5], 200, 300));
        k.on_commit(c(2, 20, &[], &[6], 0, 100));
        let v = k.verdict(0);
        assert_eq!(v.violations, 1);
        assert!(
            v.samples[0].to_string().starts_with("real-time"),
            "{}",
            v.samples[0]
        );
        // Within the clocks' skew, it is not a violation.
        assert_eq!(k.verdict(150).violations, 0);
    }

    #[test]
    fn a_read_of_an_unfinished_stamped_write_is_no_violation() {
        let mut k = KvChecker::new();
        k.on_commit(c(2, 20, &[(5, Some(1))], &[], 50, 150));
        assert_eq!(k.verdict(0).violations, 1, "the write is unknown");
        let mut w = c(1, 10, &[], &[5], 0, u64::MAX);
        w.reads.clear();
        assert_eq!(k.verdict_with(&[w], 0).violations, 0);
    }

    #[test]
    fn the_history_keeps_transactions_whole_and_unfinished_writers_as_info() {
        let mut k = KvChecker::new();
        k.on_commit(c(1, 10, &[(5, None)], &[6], 0, 100));
        let mut w = c(2, 20, &[], &[5], 50, u64::MAX);
        w.reads.clear();
        let h: serde_json::Value = serde_json::from_str(&k.history_json(&[w])).unwrap();
        let ops = h.as_array().unwrap();
        let kinds: Vec<&str> = ops.iter().map(|o| o["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["invoke", "invoke", "ok", "info"]);
        assert_eq!(
            ops[2]["value"],
            serde_json::json!([["r", 5, null], ["w", 6, 1]])
        );
        assert_eq!(ops[2]["time"], 100);
        assert_eq!(ops[3]["value"], serde_json::json!([["w", 5, 2]]));
    }
}
