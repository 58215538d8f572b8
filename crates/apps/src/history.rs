//! Histories in the form Jepsen and Elle read (docs/APPS.md, "Histories"): one `invoke` record
//! and one completion record (`ok`, `fail` or `info`) per operation, each with its `process`,
//! `time` (ns) and `f`, and as `value` the transaction's micro-operations — `["r", key, value]`
//! and `["w", key, value]`, a read's value `null` when it found nothing.
//!
//! * `ok`: the operation took effect, with the values its reads returned.
//! * `fail`: it certainly took no effect.
//! * `info`: its outcome is unknown (its initiator failed, gave it up, or the run ended first);
//!   it may have taken effect. Its reads are unknown (`null` in the invoke record); its writes
//!   are what it would write.
//!
//! A process runs one operation at a time, as Jepsen's do: an initiator with several
//! transactions in flight appears as several processes (`lane`s), numbered
//! `client * LANES_PER_CLIENT + lane` so the initiator can be read back from the number.
//!
//! Written values are unique per key (the store writes the writing transaction's id), which is
//! what a dependency-graph checker ([`crate::depgraph`]) needs to infer who read whom.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Processes an initiator can appear as (its transactions in flight at once).
pub const LANES_PER_CLIENT: u64 = 1 << 20;

/// What a record says about its operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpType {
    /// The operation was called.
    Invoke,
    /// It took effect.
    Ok,
    /// It certainly took no effect.
    Fail,
    /// Its outcome is unknown.
    Info,
}

/// One micro-operation: `["r", key, value]` or `["w", key, value]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mop {
    /// A read of `key` that returned `value` (`None`: nothing written yet, or not known).
    Read(u64, Option<u64>),
    /// A write of `value` to `key`.
    Write(u64, u64),
}

impl Serialize for Mop {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Mop::Read(k, v) => ("r", k, v).serialize(s),
            Mop::Write(k, v) => ("w", k, Some(v)).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Mop {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Mop, D::Error> {
        let (f, k, v): (String, u64, Option<u64>) = Deserialize::deserialize(d)?;
        match (f.as_str(), v) {
            ("r", v) => Ok(Mop::Read(k, v)),
            ("w", Some(v)) => Ok(Mop::Write(k, v)),
            ("w", None) => Err(serde::de::Error::custom(format!(
                "a write of key {k} without a value"
            ))),
            (other, _) => Err(serde::de::Error::custom(format!(
                "micro-operation '{other}': expected \"r\" or \"w\""
            ))),
        }
    }
}

/// One record of a history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistOp {
    /// Its place in the history.
    pub index: u64,
    /// What it says.
    #[serde(rename = "type")]
    pub kind: OpType,
    /// The process (one operation at a time).
    pub process: u64,
    /// When (ns, the process's clock).
    pub time: u64,
    /// The function: `txn`.
    pub f: String,
    /// The micro-operations.
    pub value: Vec<Mop>,
}

/// One operation as its initiator saw it, before it is written as two records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// The initiator.
    pub client: u32,
    /// When it was called.
    pub call_ns: u64,
    /// How it ended and when (`None`: unknown, an `info` at the end of the history).
    pub outcome: Option<(OpType, u64)>,
    /// Its micro-operations: reads with what they returned (an `info`'s are written as
    /// `null`), then writes.
    pub mops: Vec<Mop>,
}

/// The history of `ops` in Jepsen's form: records in time order (an invoke before a completion
/// at the same time), each operation on a lane of its initiator free at its call.
pub fn build(ops: &[Operation]) -> Vec<HistOp> {
    // (time, class, operation): at one time, completions of operations called before it come
    // first (class 0), so a lane freed at t can be taken at t; then invokes (1); then the
    // completions of operations called at that same time (2), which must follow their own
    // invoke (an operation that returned at its call time, or before it by a clock stepped
    // back: vopr --apps seeds 100290, 100779).
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(ops.len() * 2);
    for (i, o) in ops.iter().enumerate() {
        events.push((o.call_ns, 1, i));
        if let Some((_, t)) = o.outcome {
            let t = t.max(o.call_ns);
            events.push((t, if t == o.call_ns { 2 } else { 0 }, i));
        }
    }
    events.sort_unstable();
    let mut free: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut next_lane: BTreeMap<u32, u64> = BTreeMap::new();
    let mut lane_of = vec![0u64; ops.len()];
    let mut out = Vec::with_capacity(events.len() + ops.len());
    let mut unknown = Vec::new();
    for (t, class, i) in events {
        let done = class != 1;
        let o = &ops[i];
        let c = o.client;
        if done {
            free.entry(c).or_default().push(lane_of[i]);
            let (kind, _) = o.outcome.expect("a completion event has an outcome");
            push(&mut out, kind, lane_of[i], t, completed_mops(kind, &o.mops));
            continue;
        }
        // A free lane's process number, or the initiator's next lane's.
        lane_of[i] = match free.get_mut(&c).and_then(Vec::pop) {
            Some(process) => process,
            None => {
                let n = next_lane.entry(c).or_insert(0);
                *n += 1;
                u64::from(c) * LANES_PER_CLIENT + *n - 1
            }
        };
        push(
            &mut out,
            OpType::Invoke,
            lane_of[i],
            t,
            invoked_mops(&o.mops),
        );
        if o.outcome.is_none() {
            unknown.push(i);
        }
    }
    // Operations never completed: `info` at the end, each on its own lane for ever.
    let end = out.last().map_or(0, |r| r.time);
    for i in unknown {
        let mops = invoked_mops(&ops[i].mops);
        push(&mut out, OpType::Info, lane_of[i], end, mops);
    }
    out
}

fn push(out: &mut Vec<HistOp>, kind: OpType, process: u64, time: u64, value: Vec<Mop>) {
    out.push(HistOp {
        index: out.len() as u64,
        kind,
        process,
        time,
        f: "txn".into(),
        value,
    });
}

/// An invoke's micro-operations: reads not known yet.
fn invoked_mops(mops: &[Mop]) -> Vec<Mop> {
    mops.iter()
        .map(|m| match *m {
            Mop::Read(k, _) => Mop::Read(k, None),
            w => w,
        })
        .collect()
}

fn completed_mops(kind: OpType, mops: &[Mop]) -> Vec<Mop> {
    match kind {
        OpType::Ok => mops.to_vec(),
        _ => invoked_mops(mops),
    }
}

/// The history as one JSON array.
pub fn to_json(h: &[HistOp]) -> String {
    serde_json::to_string(h).expect("plain data serializes")
}

/// A history read back from [`to_json`]'s form (or any tool's that writes it).
pub fn from_json(s: &str) -> Result<Vec<HistOp>, String> {
    serde_json::from_str(s).map_err(|e| format!("not a history in Jepsen's form: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_round_trips_in_jepsens_form_with_lanes_and_info() {
        let ops = [
            Operation {
                client: 1,
                call_ns: 10,
                outcome: Some((OpType::Ok, 30)),
                mops: vec![Mop::Read(5, Some(7)), Mop::Write(6, 99)],
            },
            Operation {
                client: 1,
                call_ns: 20,
                outcome: None,
                mops: vec![Mop::Read(5, Some(7)), Mop::Write(5, 100)],
            },
            Operation {
                client: 1,
                call_ns: 30,
                outcome: Some((OpType::Fail, 40)),
                mops: vec![Mop::Write(8, 101)],
            },
        ];
        let h = build(&ops);
        let kinds: Vec<OpType> = h.iter().map(|r| r.kind).collect();
        use OpType::*;
        assert_eq!(kinds, [Invoke, Invoke, Ok, Invoke, Fail, Info]);
        // Two in flight at once: two lanes; the third takes the first's, freed at 30.
        let lanes: Vec<u64> = h.iter().map(|r| r.process - LANES_PER_CLIENT).collect();
        assert_eq!(lanes, [0, 1, 0, 0, 0, 1]);
        // An invoke does not know its reads; an info neither.
        assert_eq!(h[1].value[0], Mop::Read(5, None));
        assert_eq!(h[5].value, [Mop::Read(5, None), Mop::Write(5, 100)]);
        let json = to_json(&h);
        assert!(json.contains(r#""type":"invoke""#), "{json}");
        assert!(json.contains(r#"["r",5,7],["w",6,99]"#), "{json}");
        assert!(json.contains(r#"["r",5,null]"#), "{json}");
        assert_eq!(from_json(&json).unwrap(), h);
    }

    /// An operation that returned at its call time, or before it (its clock stepped back),
    /// still completes after its own invoke, and the graph checker finds the history well
    /// formed (vopr --apps seeds 100290 and 100779 found "completes nothing process 0 invoked").
    #[test]
    fn an_operation_returning_at_or_before_its_call_completes_after_its_invoke() {
        let op = |call, ret, v| Operation {
            client: 0,
            call_ns: call,
            outcome: Some((OpType::Ok, ret)),
            mops: vec![Mop::Write(1, v)],
        };
        let h = build(&[op(10, 10, 1), op(10, 5, 2), op(10, 12, 3), op(12, 12, 4)]);
        let mut open = std::collections::BTreeSet::new();
        for r in &h {
            if r.kind == OpType::Invoke {
                assert!(open.insert(r.process), "{h:?}");
            } else {
                assert!(open.remove(&r.process), "{h:?}");
            }
        }
        assert!(open.is_empty(), "{h:?}");
        let g = crate::depgraph::check(&h, Default::default());
        assert!(g.samples.iter().all(|s| !s.contains("malformed")), "{g:?}");
    }

    #[test]
    fn a_bad_micro_operation_is_refused_with_its_name() {
        let e = from_json(
            r#"[{"index":0,"type":"invoke","process":0,"time":0,"f":"txn","value":[["x",1,2]]}]"#,
        )
        .unwrap_err();
        assert!(e.contains("'x'"), "{e}");
    }
}
