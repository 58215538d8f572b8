//! The hash table's end-of-run checks ([`check_run`]), every run:
//!
//! * **linearizability** of every insert and lookup clients completed, with
//!   [`crate::repl::lincheck`]: an insert is a put of a unique value, a lookup a get; the
//!   preloaded pairs are puts completed before anything began, and after the run every key the
//!   history touches is looked up once more in the final table (a get after every return), so
//!   an insert whose pair was lost from its chain is caught even in a run without lookups;
//! * **the tables**: every chain well-formed (each pointer links a pair written for it, whose
//!   key hashes to the bucket; no cycle), the replicas of each shard identical, and every
//!   acknowledged insert reachable in its bucket.
//!
//! It does not check liveness or performance.

use super::{preload_val, HtLayout, HtWorkload, Table, PRELOAD_CLIENT};
use crate::repl::lincheck::{self, LinVerdict, MaybeOp};
use crate::repl::{Cmd, Key, ReplDone, Val};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// The client id of the final lookups in the checked history.
pub const FINAL_CLIENT: u32 = PRELOAD_CLIENT - 1;

/// Violations a [`TableVerdict`] describes.
pub const TABLE_SAMPLES_MAX: usize = 8;

/// What [`check_tables`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TableVerdict {
    /// Tables checked.
    pub tables: u64,
    /// Pairs reachable in the reference tables.
    pub pairs: u64,
    /// Violations found.
    pub violations: u64,
    /// The first [`TABLE_SAMPLES_MAX`] of them, described.
    pub samples: Vec<String>,
}

impl TableVerdict {
    fn violation(&mut self, s: String) {
        self.violations += 1;
        if self.samples.len() < TABLE_SAMPLES_MAX {
            self.samples.push(s);
        }
    }
}

/// What [`check_run`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RunVerdict {
    /// Linearizability of the history with the preload and the final lookups.
    pub lin: LinVerdict,
    /// The tables.
    pub tables: TableVerdict,
}

impl RunVerdict {
    /// Nothing wrong: no violation, no key undecided.
    pub fn ok(&self) -> bool {
        self.lin.ok() && self.tables.violations == 0
    }
    /// Violations, keys undecided counted as violations.
    pub fn violations(&self) -> u64 {
        self.lin.violations + self.lin.undecided + self.tables.violations
    }
    /// The first few violations, described.
    pub fn samples(&self) -> Vec<String> {
        let mut v: Vec<String> = self.lin.samples.clone();
        v.extend(self.tables.samples.iter().cloned());
        if self.lin.undecided > 0 {
            v.push(format!(
                "{} keys undecided within the search budget",
                self.lin.undecided
            ));
        }
        v
    }
}

/// Each shard's reference table: its lowest replica present.
fn references<'a>(tables: &[(u32, u32, &'a Table)]) -> BTreeMap<u32, (u32, &'a Table)> {
    let mut refs: BTreeMap<u32, (u32, &Table)> = BTreeMap::new();
    for &(s, r, t) in tables {
        let e = refs.entry(s).or_insert((r, t));
        if r < e.0 {
            *e = (r, t);
        }
    }
    refs
}

/// Checks the tables of a run (`tables`: shard, replica, table — every replica of every shard)
/// against the inserts clients completed (`inserted`).
pub fn check_tables(
    layout: &HtLayout,
    buckets: u32,
    tables: &[(u32, u32, &Table)],
    inserted: &[(Key, Val)],
) -> TableVerdict {
    let mut v = TableVerdict {
        tables: tables.len() as u64,
        ..TableVerdict::default()
    };
    let present: BTreeSet<(u32, u32)> = tables.iter().map(|&(s, r, _)| (s, r)).collect();
    for s in 0..layout.servers {
        for r in 0..layout.replicas {
            if !present.contains(&(s, r)) {
                v.violation(format!("shard {s} replica {r}: no table"));
            }
        }
    }
    let refs = references(tables);
    let mut reachable: HashSet<(Key, Val)> = HashSet::new();
    for &(s, r, t) in tables {
        let reference = refs.get(&s).map(|&(r0, t0)| (r0, t0));
        for b in 0..buckets.min(t.buckets()) {
            let chain = match t.chain(b) {
                Ok(c) => c,
                Err(e) => {
                    v.violation(format!("shard {s} replica {r}: {e}"));
                    continue;
                }
            };
            for p in &chain {
                if layout.place(p.key, buckets) != (s, b) {
                    v.violation(format!(
                        "shard {s} replica {r} bucket {b}: key {} belongs elsewhere",
                        p.key
                    ));
                }
            }
            match reference {
                Some((r0, _)) if r0 == r => {
                    v.pairs += chain.len() as u64;
                    reachable.extend(chain.iter().map(|p| (p.key, p.val)));
                }
                Some((r0, t0)) if t0.chain(b).ok().as_ref() != Some(&chain) => {
                    v.violation(format!(
                        "shard {s} bucket {b}: replica {r} differs from replica {r0}"
                    ));
                }
                Some(_) | None => {}
            }
        }
        if t.buckets() != buckets {
            v.violation(format!(
                "shard {s} replica {r}: {} buckets, not {buckets}",
                t.buckets()
            ));
        }
    }
    for &(key, val) in inserted {
        if !reachable.contains(&(key, val)) {
            v.violation(format!(
                "acknowledged insert of key {key} (value {val:#x}) is in no chain"
            ));
        }
    }
    v
}

/// The checked history of a run: `history`, the preloaded pairs of the keys it touches (puts
/// done at time 0), and a lookup of each such key in the final table at `at_ns`.
pub fn full_history(
    layout: &HtLayout,
    workload: &HtWorkload,
    history: &[ReplDone],
    maybe: &[MaybeOp],
    tables: &[(u32, u32, &Table)],
    at_ns: u64,
) -> Vec<ReplDone> {
    let keys: BTreeSet<Key> = history
        .iter()
        .map(|d| d.cmd.key())
        .chain(maybe.iter().map(|m| m.cmd.key()))
        .collect();
    let refs = references(tables);
    let mut out = history.to_vec();
    for &key in &keys {
        if key < workload.preload {
            out.push(ReplDone {
                client: PRELOAD_CLIENT,
                id: key,
                cmd: Cmd::Put(key, preload_val(key)),
                output: None,
                call_ns: 0,
                return_ns: 0,
            });
        }
        let (s, b) = layout.place(key, workload.buckets);
        // A chain that is broken is reported by `check_tables`.
        if let Some(Ok(found)) = refs.get(&s).map(|(_, t)| t.lookup(b, key)) {
            out.push(ReplDone {
                client: FINAL_CLIENT,
                id: key,
                cmd: Cmd::Get(key),
                output: found,
                call_ns: at_ns,
                return_ns: at_ns,
            });
        }
    }
    out
}

/// Every check of a run: `history` completed by the clients, `maybe` inserts whose outcome is
/// unknown, `tables` of every server; clients' clocks up to `skew_ns` apart; the
/// linearizability search takes at most `budget` steps per key.
pub fn check_run(
    layout: &HtLayout,
    workload: &HtWorkload,
    history: &[ReplDone],
    maybe: &[MaybeOp],
    tables: &[(u32, u32, &Table)],
    skew_ns: u64,
    budget: u64,
) -> RunVerdict {
    let last = history
        .iter()
        .map(|d| d.return_ns.max(d.call_ns))
        .chain(maybe.iter().map(|m| m.call_ns))
        .max()
        .unwrap_or(0);
    let at = last.saturating_add(skew_ns).saturating_add(1);
    let full = full_history(layout, workload, history, maybe, tables, at);
    let inserted: Vec<(Key, Val)> = history
        .iter()
        .filter_map(|d| match d.cmd {
            Cmd::Put(k, v) => Some((k, v)),
            _ => None,
        })
        .collect();
    RunVerdict {
        lin: lincheck::check(&full, maybe, skew_ns, budget),
        tables: check_tables(layout, workload.buckets, tables, &inserted),
    }
}
