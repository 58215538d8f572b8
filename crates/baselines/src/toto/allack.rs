//! The all-ack protocol ToTo is measured against (the paper's §1, after \[22, 4, 15, 20, 24\]),
//! on the same causal layer and DAG:
//!
//! * wait for a message from each machine in the system (one following a candidate:
//!   `NTail_p = n` in §4.1's terms), then
//! * deliver the set of messages that do not causally follow any other (the candidates `M_p`),
//!   in lexicographical order of `<sender, counter>`.
//!
//! Every machine delivers the same set: once each machine sent a message following some
//! candidate, every candidate is in the DAG — a candidate `c` of machine `r` sent before `r`'s
//! message following a candidate came with it (causal delivery), and one sent after it
//! follows that candidate, so is not one. Its index of latency (§6) is always `n`.

use super::dag::{Dag, MsgId};

/// The candidate set to deliver now, in lexicographical order, or `None` while some machine
/// has not yet sent a message following a candidate.
pub fn decide(dag: &Dag) -> Option<Vec<MsgId>> {
    if dag.tail().len() < dag.procs() {
        return None;
    }
    let mut set: Vec<MsgId> = dag
        .candidates()
        .into_iter()
        .map(|m| (m.origin, m.seq))
        .collect();
    if set.is_empty() {
        return None;
    }
    set.sort_unstable();
    Some(set)
}
