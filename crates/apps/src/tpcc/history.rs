//! TPC-C's key accesses as a history in Jepsen's form ([`crate::history`]), for the
//! dependency-graph checker ([`crate::depgraph`]) and `--history`.
//!
//! A transaction's micro-operations are the accesses whose values its output shows (clauses
//! 2.4.3.3 and 2.5.3.3) and whose written values are unique per row — each a read-modify-write
//! that moves the value one way only, so no value is ever written twice:
//!
//! | key | a New-Order | a Payment |
//! | --- | --- | --- |
//! | `D_NEXT_O_ID` of (w, d) | reads `O_ID`, writes `O_ID + 1` (a rolled-back one only reads) | — |
//! | `W_YTD` of w | — | reads `W_YTD − H_AMOUNT`, writes `W_YTD` |
//! | `D_YTD` of (w, d) | — | reads `D_YTD − H_AMOUNT`, writes `D_YTD` |
//! | `C_BALANCE` of (w, d, c), as `−C_BALANCE` | — | reads `−(C_BALANCE + H_AMOUNT)`, writes `−C_BALANCE` |
//!
//! A read of the value as loaded is a read of the initial version (`null`). `C_BALANCE` only
//! falls without Delivery, so its negation only rises and stays positive. Left out: the stock
//! rows (`S_QUANTITY`, the only stock column the output shows, is refilled by 91 and so takes
//! a value again) and the rows only read (`W_TAX`, `D_TAX`, the customer's discount, last name
//! and credit: never written by these two profiles).
//!
//! **Keys** ([`key`]): `table << 56 | w << 32 | d << 20 | c`, `table` one of [`W_YTD`],
//! [`D_YTD`], [`D_NEXT_O_ID`], [`C_BALANCE`]; the fields a table has no use for are 0.
//!
//! **Unknown outcomes.** A transaction bound to take effect whose initiator never heard all its
//! answers (`unfinished`) is an `info` operation: its reads are unknown. The values it wrote are
//! those its answers show — the ones its initiator heard, and what the replicas that applied it
//! logged (the simulator: [`super::check::complete_from_logs`]; the live runtime:
//! [`super::check::unfinished_from_logs`]). On rows no answer shows, it chose none. Those are
//! inferred from the history alone, as Elle infers versions: a value some operation read that no operation is
//! known to have written is the write of an `info` operation on that row whose increment leads
//! to it from a known value (or from another value inferred so). What cannot be inferred was
//! read by nobody, or only through another such write nobody read; the second leaves a read the
//! checker calls garbage, which a run with no failed initiator, or with the replicas' logs,
//! cannot have.

use super::reference::Population;
use super::{CustomerSelector, PartResult, TpccCommitted, TxnInput};
use crate::depgraph::{self, GraphVerdict};
use crate::history::{self, Mop, OpType, Operation};
use std::collections::{BTreeMap, BTreeSet};

/// Table tag of `W_YTD` in a [`key`].
pub const W_YTD: u64 = 1;
/// Table tag of `D_YTD`.
pub const D_YTD: u64 = 2;
/// Table tag of `D_NEXT_O_ID`.
pub const D_NEXT_O_ID: u64 = 3;
/// Table tag of `C_BALANCE` (its value written negated).
pub const C_BALANCE: u64 = 4;

/// The history key of `table`'s row (w, d, c): `table << 56 | w << 32 | d << 20 | c`. Ids
/// beyond their field (w ≥ 2²⁴, d ≥ 2¹², c ≥ 2²⁰) are masked: no scale this code runs comes near.
pub fn key(table: u64, w: u32, d: u32, c: u32) -> u64 {
    table << 56
        | (u64::from(w) & 0xff_ffff) << 32
        | (u64::from(d) & 0xfff) << 20
        | (u64::from(c) & 0xf_ffff)
}

/// One access: the row, the value read (`None`: as loaded) and the value written, if any.
type Access = (u64, Option<u64>, Option<u64>);

/// The values rows had as loaded, by history key.
struct Initial(BTreeMap<u64, u64>);

impl Initial {
    fn of(p: &Population) -> Initial {
        let r = &p.rows;
        let mut m = BTreeMap::new();
        for (&w, row) in &r.warehouses {
            m.insert(key(W_YTD, w, 0, 0), row.w_ytd as u64);
        }
        for (&(w, d), row) in &r.districts {
            m.insert(key(D_YTD, w, d, 0), row.d_ytd as u64);
            m.insert(key(D_NEXT_O_ID, w, d, 0), u64::from(row.d_next_o_id));
        }
        for (&(w, d, c), row) in &r.customers {
            m.insert(key(C_BALANCE, w, d, c), row.c_balance.wrapping_neg() as u64);
        }
        Initial(m)
    }

    /// A read of `v` from row `k`: `None` if `v` is the value as loaded.
    fn read(&self, k: u64, v: u64) -> Option<u64> {
        (self.0.get(&k) != Some(&v)).then_some(v)
    }
}

/// The accesses a committed transaction's results show.
fn accesses(c: &TpccCommitted, init: &Initial) -> Vec<Access> {
    let mut out = Vec::new();
    for (_, part) in &c.results {
        match (part, &c.input) {
            (PartResult::NewOrder(p), TxnInput::NewOrder(t)) => {
                if let Some(d) = &p.district {
                    let k = key(D_NEXT_O_ID, t.w_id, t.d_id, 0);
                    let o = u64::from(d.o_id);
                    out.push((k, init.read(k, o), (!p.rolled_back).then_some(o + 1)));
                }
            }
            (PartResult::Payment(p), TxnInput::Payment(t)) => {
                let amount = u64::from(t.amount);
                if let Some(y) = p.w_ytd {
                    let k = key(W_YTD, t.w_id, 0, 0);
                    let after = y as u64;
                    out.push((k, init.read(k, after.wrapping_sub(amount)), Some(after)));
                }
                if let Some(y) = p.d_ytd {
                    let k = key(D_YTD, t.w_id, t.d_id, 0);
                    let after = y as u64;
                    out.push((k, init.read(k, after.wrapping_sub(amount)), Some(after)));
                }
                if let Some(cu) = p.customer.filter(|cu| cu.c_id != 0) {
                    let k = key(C_BALANCE, t.c_w_id, t.c_d_id, cu.c_id);
                    let after = cu.c_balance.wrapping_neg() as u64;
                    out.push((k, init.read(k, after.wrapping_sub(amount)), Some(after)));
                }
            }
            // A part of the other kind: the replay's `result` violation; nothing to read here.
            _ => {}
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The rows an unfinished transaction may write, with its increment on each: a Payment by last
/// name may write any customer of its district.
fn increments(input: &TxnInput, init: &Initial) -> Vec<(Vec<u64>, u64)> {
    match input {
        TxnInput::NewOrder(t) => vec![(vec![key(D_NEXT_O_ID, t.w_id, t.d_id, 0)], 1)],
        TxnInput::Payment(t) => {
            let a = u64::from(t.amount);
            let customers = match t.customer {
                CustomerSelector::Id(c) => vec![key(C_BALANCE, t.c_w_id, t.c_d_id, c)],
                CustomerSelector::LastName(_) => {
                    let lo = key(C_BALANCE, t.c_w_id, t.c_d_id, 0);
                    let hi = key(C_BALANCE, t.c_w_id, t.c_d_id, 0xf_ffff);
                    init.0.range(lo..=hi).map(|(&k, _)| k).collect()
                }
            };
            vec![
                (vec![key(W_YTD, t.w_id, 0, 0)], a),
                (vec![key(D_YTD, t.w_id, t.d_id, 0)], a),
                (customers, a),
            ]
        }
    }
}

/// The accesses of the unfinished transactions: those their answers show (`heard`, the answers
/// their initiators heard before giving them up), and the rest inferred from what the others
/// read (module docs).
fn infer(
    known: &[Vec<Access>],
    heard: &[Vec<Access>],
    unfinished: &[&TpccCommitted],
    init: &Initial,
) -> Vec<Vec<Access>> {
    let mut written: BTreeSet<(u64, u64)> = BTreeSet::new();
    for &(k, _, w) in known.iter().chain(heard).flatten() {
        if let Some(w) = w {
            written.insert((k, w));
        }
    }
    let mut orphans: BTreeSet<(u64, u64)> = known
        .iter()
        .flatten()
        .filter_map(|&(k, r, _)| Some((k, r?)))
        .filter(|kv| !written.contains(kv))
        .collect();
    // The increments each one may still have made: on rows its answers do not show.
    let incs: Vec<Vec<(Vec<u64>, u64)>> = unfinished
        .iter()
        .zip(heard)
        .map(|(u, h)| {
            let mut inc = increments(&u.input, init);
            for (rows, _) in &mut inc {
                if rows.iter().any(|k| h.iter().any(|a| a.0 == *k)) {
                    rows.clear();
                }
            }
            inc
        })
        .collect();
    let mut out: Vec<Vec<Access>> = heard.to_vec();
    let mut taken: BTreeSet<(usize, usize)> = BTreeSet::new();
    // Each pass gives a value to every increment that leads to it from a known one; a chain
    // of unfinished writes takes one pass per link.
    loop {
        let mut progress = false;
        for (u, inc) in incs.iter().enumerate() {
            for (j, (rows, by)) in inc.iter().enumerate() {
                if taken.contains(&(u, j)) {
                    continue;
                }
                let found = rows.iter().find_map(|&k| {
                    orphans
                        .range((k, 0)..=(k, u64::MAX))
                        .map(|&(_, v)| v)
                        .find(|&v| {
                            let before = v.wrapping_sub(*by);
                            init.0.get(&k) == Some(&before) || written.contains(&(k, before))
                        })
                        .map(|v| (k, v))
                });
                if let Some((k, v)) = found {
                    orphans.remove(&(k, v));
                    written.insert((k, v));
                    taken.insert((u, j));
                    out[u].push((k, init.read(k, v.wrapping_sub(*by)), Some(v)));
                    progress = true;
                }
            }
        }
        if !progress {
            return out;
        }
    }
}

fn mops(a: &[Access]) -> Vec<Mop> {
    let reads = a.iter().map(|&(k, r, _)| Mop::Read(k, r));
    let writes = a.iter().filter_map(|&(k, _, w)| Some(Mop::Write(k, w?)));
    reads.chain(writes).collect()
}

/// The run's operations: `committed` ones `ok`, `unfinished` ones (bound to take effect, result
/// unknown) `info` with what can be inferred of them. `initial` is the database as loaded.
pub fn operations(
    committed: &[TpccCommitted],
    unfinished: &[TpccCommitted],
    initial: &Population,
) -> Vec<Operation> {
    let init = Initial::of(initial);
    let known: Vec<Vec<Access>> = committed.iter().map(|c| accesses(c, &init)).collect();
    let open: Vec<&TpccCommitted> = unfinished.iter().collect();
    let heard: Vec<Vec<Access>> = open.iter().map(|u| accesses(u, &init)).collect();
    let inferred = infer(&known, &heard, &open, &init);
    let done = committed.iter().zip(&known).map(|(c, a)| Operation {
        client: c.client,
        call_ns: c.call_ns,
        outcome: Some((OpType::Ok, c.return_ns)),
        mops: mops(a),
    });
    let info = open.iter().zip(&inferred).map(|(u, a)| Operation {
        client: u.client,
        call_ns: u.call_ns,
        outcome: None,
        mops: mops(a),
    });
    done.chain(info).collect()
}

/// The run's history in Jepsen's form, for `--history`.
pub fn history_json(
    committed: &[TpccCommitted],
    unfinished: &[TpccCommitted],
    initial: &Population,
) -> String {
    history::to_json(&history::build(&operations(committed, unfinished, initial)))
}

/// The dependency-graph checker's verdict on the run's history, with real time (strict
/// serializability) allowing `skew_ns` between the initiators' clocks.
pub fn graph_verdict(
    committed: &[TpccCommitted],
    unfinished: &[TpccCommitted],
    initial: &Population,
    skew_ns: u64,
) -> GraphVerdict {
    depgraph::strict(
        &history::build(&operations(committed, unfinished, initial)),
        skew_ns,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tpcc::gen::TpccScale;
    use crate::tpcc::{PaymentCustomer, PaymentInput, PaymentPart};

    fn payment(
        txn: u64,
        (w, d): (u32, u32),
        c: u32,
        amount: u32,
        w_ytd: i64,
        c_balance: i64,
        call: u64,
    ) -> TpccCommitted {
        let input = PaymentInput {
            w_id: w,
            d_id: d,
            c_w_id: 1,
            c_d_id: 1,
            customer: CustomerSelector::Id(c),
            amount,
        };
        let home = PaymentPart {
            w_ytd: Some(w_ytd),
            d_ytd: None,
            customer: None,
        };
        let remote = PaymentPart {
            w_ytd: None,
            d_ytd: None,
            customer: Some(PaymentCustomer {
                c_id: c,
                c_balance,
                c_credit: crate::tpcc::Credit::Good,
            }),
        };
        TpccCommitted {
            txn,
            client: txn as u32,
            key: 0,
            seq: 0,
            input: TxnInput::Payment(input),
            results: vec![
                (0, PartResult::Payment(home)),
                (1, PartResult::Payment(remote)),
            ],
            call_ns: call,
            return_ns: call + 10,
            attempts: 1,
        }
    }

    /// Two Payments on one warehouse and one customer, applied in one order at the warehouse's
    /// shard and in the other at the customer's: each row's chain of values is fine alone, and
    /// together they are a write cycle (G0) — what two shards delivering in different orders
    /// leave, whatever order the system states.
    #[test]
    fn two_shards_applying_in_different_orders_make_a_write_cycle() {
        let p = Population::load(&TpccScale::small(), 1);
        let w0 = p.rows.warehouses[&1].w_ytd;
        let c0 = p.rows.customers[&(1, 1, 1)].c_balance;
        // Concurrent (overlapping calls): only the values order them.
        let t1 = payment(1, (1, 1), 1, 100, w0 + 100, c0 - 200 - 100, 0);
        let t2 = payment(2, (1, 2), 1, 200, w0 + 300, c0 - 200, 5);
        let g = graph_verdict(&[t1.clone(), t2.clone()], &[], &p, 0);
        assert_eq!(g.ok, 2);
        assert!(g.anomalies > 0, "{g:?}");
        assert!(g.samples.iter().any(|s| s.starts_with("G0")), "{g:?}");
        // In one order at both shards: no anomaly, and both rows' edges are there.
        let t1 = payment(1, (1, 1), 1, 100, w0 + 100, c0 - 100, 0);
        let t2 = payment(2, (1, 2), 1, 200, w0 + 300, c0 - 300, 5);
        let g = graph_verdict(&[t1, t2], &[], &p, 0);
        assert_eq!(g.anomalies, 0, "{g:?}");
        assert_eq!(g.edges[0], 2, "one ww edge per row: {g:?}");
    }

    /// An unfinished Payment whose warehouse write a committed one read: its write is inferred
    /// from the increment, so the read is not garbage.
    #[test]
    fn an_unfinished_write_read_by_another_is_inferred() {
        let p = Population::load(&TpccScale::small(), 1);
        let w0 = p.rows.warehouses[&1].w_ytd;
        let c0 = p.rows.customers[&(1, 1, 1)].c_balance;
        let mut u = payment(1, (1, 1), 1, 100, 0, 0, 0);
        u.results.clear();
        u.return_ns = u64::MAX;
        let t = payment(2, (1, 2), 1, 200, w0 + 300, c0 - 300, 50);
        let g = graph_verdict(std::slice::from_ref(&t), std::slice::from_ref(&u), &p, 0);
        assert_eq!((g.ok, g.info, g.anomalies), (1, 1, 0), "{g:?}");
        // Not inferable: the increment does not lead to what was read.
        let t = payment(2, (1, 2), 1, 200, w0 + 301, c0 - 300, 50);
        let g = graph_verdict(&[t], &[u], &p, 0);
        assert!(g.samples.iter().any(|s| s.starts_with("garbage")), "{g:?}");
    }
}
