//! The replicated key-value service's end-of-run checkers: linearizability of the history
//! clients observed ([`check`]), the history as JSON for external checkers ([`history_json`]), and
//! agreement and durability of the replicas' logs ([`check_logs`]).
//!
//! [`check`] decides whether completed operations ([`ReplDone`]), plus writes whose outcome no
//! client learned ([`MaybeOp`]), are linearizable against [`KvMachine`](super::KvMachine).
//! Linearizability is local (Herlihy & Wing 1990, §3.3): a history is linearizable iff each key's
//! sub-history is, so each key is checked alone against a one-key machine whose state is
//! `Option<Val>`. A key is searched with the Wing–Gong algorithm as refined by Lowe (2017) and
//! used by Knossos and Porcupine: calls and returns in one time-ordered list; depth-first, take
//! any operation whose call precedes the first pending return, apply it, unlink it, start over;
//! at a return whose operation is not yet taken, undo the latest choice; a memo of (operations
//! taken, state) prunes every configuration already explored.
//!
//! Values are unique per write, so a value once overwritten never comes back. That makes cheap
//! refutations sound (a stale read, a lost write, a read from the future are found without a
//! search, and named by the two or three operations involved), and lets the search take any
//! pending read of the current value without trying alternatives, and overwrite a value only
//! once every read of it is taken: with tens of clients on one key, a history that passes and
//! most that fail take linear time. A key whose values repeat gets the plain search.
//!
//! Clients' clocks may disagree by up to `skew_ns`, so operation `a` must precede `b` only when
//! `a.return_ns + skew_ns < b.call_ns`: every return is moved `skew_ns` later, and a larger skew
//! accepts more histories (zero: exact real-time order). A [`MaybeOp`] may take effect at any
//! point after its call, or never; it is a return at infinity with an unconstrained output.
//!
//! It does not check transactions, liveness or performance; [`check_logs`] checks only what
//! replicas report in their [`ReplicaLog`]s.

use super::{Cmd, ReplDone, ReplicaLog, Val};
use crate::depgraph::{self, GraphVerdict};
use crate::history::{self, HistOp, Mop, OpType, Operation};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// A write whose outcome no client learned (its client crashed, or the run ended with it in
/// flight): it may have taken effect at any point after its call, or never.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MaybeOp {
    /// The client process.
    pub client: u32,
    /// The client's number for it.
    pub id: u64,
    /// The command; a get is ignored (a read nobody saw constrains nothing).
    pub cmd: Cmd,
    /// When the client issued it (the client's clock, ns).
    pub call_ns: u64,
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LinVerdict {
    /// Keys checked.
    pub keys: u64,
    /// Operations checked: completed ones and maybe-writes.
    pub ops: u64,
    /// Keys whose sub-history is not linearizable.
    pub violations: u64,
    /// Keys whose search ran out of budget: neither a pass nor a violation.
    pub undecided: u64,
    /// The first [`SAMPLES_MAX`] violations, described: the key, and either the few operations
    /// that cannot be linearized together, or where the deepest search got stuck (the last
    /// operations it took, the value left, the operations pending there).
    pub samples: Vec<String>,
}

impl LinVerdict {
    /// Every key passed: no violation and none undecided.
    pub fn ok(&self) -> bool {
        self.violations == 0 && self.undecided == 0
    }
}

/// Violations a [`LinVerdict`] describes.
pub const SAMPLES_MAX: usize = 8;
/// Operations a sample lists before and at the point the search got stuck.
const CONTEXT_MAX: usize = 6;
/// Violations [`check_logs`] describes of each kind; one more line counts the rest.
pub const LOG_VIOLATIONS_MAX: usize = 64;

/// Checks that `history` and `maybe` are linearizable, key by key, with clients' clocks up to
/// `skew_ns` apart, searching each key for at most `budget` steps (a step examines one call or
/// return) before calling it undecided. A return before its call is taken as at its call.
pub fn check(history: &[ReplDone], maybe: &[MaybeOp], skew_ns: u64, budget: u64) -> LinVerdict {
    let ops = ops_by_key(history, maybe, skew_ns);
    let mut v = LinVerdict {
        ops: ops.len() as u64,
        ..LinVerdict::default()
    };
    for key_ops in ops.chunk_by(|a, b| a.cmd.key() == b.cmd.key()) {
        v.keys += 1;
        let outcome = match prepare(key_ops) {
            Ok((ops, unique)) => check_key(&ops, unique, budget),
            Err(text) => Outcome::Violation(format!("key {}: {text}", key_ops[0].cmd.key())),
        };
        match outcome {
            Outcome::Linearizable => {}
            Outcome::Undecided => v.undecided += 1,
            Outcome::Violation(s) => {
                v.violations += 1;
                if v.samples.len() < SAMPLES_MAX {
                    v.samples.push(s);
                }
            }
        }
    }
    v
}

/// The operations, sorted by key then call, returns moved `skew_ns` later.
fn ops_by_key(history: &[ReplDone], maybe: &[MaybeOp], skew_ns: u64) -> Vec<Op> {
    let done = history.iter().map(|d| Op {
        client: d.client,
        id: d.id,
        cmd: d.cmd,
        output: d.output,
        known: true,
        call_ns: d.call_ns,
        return_ns: Some(d.return_ns.max(d.call_ns).saturating_add(skew_ns)),
    });
    let maybe = maybe.iter().filter(|m| m.cmd.is_write()).map(|m| Op {
        client: m.client,
        id: m.id,
        cmd: m.cmd,
        output: None,
        known: false,
        call_ns: m.call_ns,
        return_ns: None,
    });
    let mut ops: Vec<Op> = done.chain(maybe).collect();
    ops.sort_by_key(|o| (o.cmd.key(), o.call_ns, o.client, o.id));
    ops
}

/// One operation of a key's sub-history; `return_ns` already includes the skew.
#[derive(Clone, Copy, Debug)]
struct Op {
    client: u32,
    id: u64,
    cmd: Cmd,
    output: Option<Val>,
    /// `output` is what it returned (false: a maybe-write, any output).
    known: bool,
    call_ns: u64,
    /// `None`: at infinity (a maybe-write nothing forces to have happened).
    return_ns: Option<u64>,
}

/// One key's operations ready for the search, and whether its written values are unique (as
/// the service makes them); or a violation found without a search ([`refute`]). With unique
/// values, a maybe-write whose value an op returned did happen, before that op returned, so it
/// returns then; one whose value nothing returned nor a maybe-compare-and-set expects is
/// dropped (had it happened, the next op would have seen its value, or overwritten it unseen).
fn prepare(ops: &[Op]) -> Result<(Vec<Op>, bool), String> {
    let mut written = HashSet::new();
    if !ops
        .iter()
        .filter_map(|o| o.cmd.written())
        .all(|v| written.insert(v))
    {
        return Ok((ops.to_vec(), false));
    }
    let mut seen_by: HashMap<Val, u64> = HashMap::new();
    for o in ops {
        if let (Some(Some(v)), Some(r)) = (o.read(), o.return_ns) {
            seen_by.entry(v).and_modify(|e| *e = r.min(*e)).or_insert(r);
        }
    }
    let expected: HashSet<Val> = ops
        .iter()
        .filter_map(|o| match o.cmd {
            Cmd::Cas { expect, .. } if !o.known => expect,
            _ => None,
        })
        .collect();
    let mut kept = Vec::with_capacity(ops.len());
    for &o in ops {
        let v = o.cmd.written().unwrap_or_default();
        match seen_by.get(&v) {
            _ if o.known => kept.push(o),
            Some(&r) => kept.push(Op {
                return_ns: Some(r.max(o.call_ns)),
                ..o
            }),
            None if expected.contains(&v) => kept.push(o),
            None => {}
        }
    }
    refute(&kept)?;
    Ok((kept, true))
}

/// Cheap refutations, sound when written values are unique because a value, once overwritten,
/// never comes back; each names the few ops that cannot be linearized together, and spares the
/// search its costliest case, proving that no order exists:
///
/// * an op reads a value no write wrote, or one whose write was called after the op returned;
/// * two compare-and-sets both swap from the same value;
/// * an op R reads `v`, but an op X after v's write W and before R (`W ≺ X ≺ R` in real time)
///   wrote or read another value (a stale read, a lost write).
fn refute(ops: &[Op]) -> Result<(), String> {
    let mut writer: HashMap<Val, usize> = HashMap::new();
    let mut swapped: HashMap<Option<Val>, usize> = HashMap::new();
    for (i, o) in ops.iter().enumerate() {
        writer.extend(o.wrote().map(|v| (v, i)));
        if let (Cmd::Cas { expect, .. }, Some(r)) = (o.cmd, o.read()) {
            if let Some(j) = (r == expect).then(|| swapped.insert(expect, i)).flatten() {
                return Err(format!(
                    "{o} and {} both swap from {}",
                    ops[j],
                    Shown(expect)
                ));
            }
        }
    }
    // Ops whose value after them is known, by call: the two earliest returns from each on
    // with different values.
    let mut xs: Vec<(u64, u64, Option<Val>, usize)> = ops
        .iter()
        .enumerate()
        .filter_map(|(i, o)| Some((o.call_ns, o.return_ns?, o.after()?, i)))
        .collect();
    xs.sort_unstable();
    let mut best = vec![[None::<(u64, Option<Val>, usize)>; 2]; xs.len() + 1];
    for (k, &(_, ret, after, i)) in xs.iter().enumerate().rev() {
        let [a, b] = best[k + 1];
        let all = [a, b, Some((ret, after, i))];
        let first = all.into_iter().flatten().min_by_key(|x| x.0);
        let second = all
            .into_iter()
            .flatten()
            .filter(|x| Some(x.1) != first.map(|f| f.1));
        best[k] = [first, second.min_by_key(|x| x.0)];
    }
    for r in ops {
        let (Some(v), Some(ret)) = (r.read(), r.return_ns) else {
            continue;
        };
        let w = v.map(|v| writer.get(&v).map(|&w| &ops[w]));
        let since = match w {
            Some(None) => return Err(format!("{r} returns a value no write wrote")),
            Some(Some(w)) if w.call_ns > ret => {
                return Err(format!(
                    "{r} returns the value of {w}, called after it returned"
                ));
            }
            Some(Some(w)) => w.return_ns.unwrap_or(u64::MAX),
            None => 0,
        };
        let k = xs.partition_point(|x| x.0 <= since && w.is_some());
        let x = best[k].into_iter().flatten().find(|x| x.1 != v);
        if let Some((_, _, i)) = x.filter(|x| x.0 < r.call_ns) {
            let x = &ops[i];
            return Err(match w.flatten() {
                Some(w) => format!("{r} returns the value of {w}, yet {x} came between them"),
                None => format!("{r} returns none, yet {x} came before it"),
            });
        }
    }
    Ok(())
}

impl Op {
    /// The key's state after it, if it can take effect in `state` with its output: the one-key
    /// restriction of [`KvMachine::apply`](super::KvMachine::apply).
    fn step(&self, state: Option<Val>) -> Option<Option<Val>> {
        let (output, next) = match self.cmd {
            Cmd::Get(_) => (state, state),
            Cmd::Put(_, v) => (None, Some(v)),
            Cmd::Cas { expect, new, .. } => {
                (state, if state == expect { Some(new) } else { state })
            }
        };
        (!self.known || self.output == output).then_some(next)
    }
    /// The value it saw, if it returned one (a get or a compare-and-set).
    fn read(&self) -> Option<Option<Val>> {
        (self.known && !matches!(self.cmd, Cmd::Put(..))).then_some(self.output)
    }
    /// The value it wrote or may have written.
    fn wrote(&self) -> Option<Val> {
        match self.cmd {
            Cmd::Cas { expect, new, .. } if !self.known || self.output == expect => Some(new),
            Cmd::Put(_, v) => Some(v),
            _ => None,
        }
    }
    /// The key's value right after it, if the op alone tells (a maybe-write does only if it
    /// happened for sure).
    fn after(&self) -> Option<Option<Val>> {
        match self.read() {
            Some(r) if self.wrote().is_none() => Some(r),
            _ => self.wrote().filter(|_| self.return_ns.is_some()).map(Some),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}#{} ", self.client, self.id)?;
        match self.cmd {
            Cmd::Get(_) => write!(f, "get")?,
            Cmd::Put(_, v) => write!(f, "put {v}")?,
            Cmd::Cas { expect, new, .. } => write!(f, "cas {}->{new}", Shown(expect))?,
        }
        if !self.known {
            write!(f, " (outcome unknown)")?;
        } else if self.read().is_some() || self.output.is_some() {
            write!(f, " = {}", Shown(self.output))?;
        }
        match self.return_ns {
            Some(r) => write!(f, " [{}, {r}]", self.call_ns),
            None => write!(f, " [{}, -]", self.call_ns),
        }
    }
}

/// A key's value as a sample shows it.
struct Shown(Option<Val>);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v}"),
            None => write!(f, "none"),
        }
    }
}

enum Outcome {
    Linearizable,
    Violation(String),
    Undecided,
}

/// The search over one key's operations: Wing & Gong's, as Lowe (2017, §3) and Porcupine run
/// it, with a memo of (ops taken, state), and, when written values are unique, two rules that
/// lose no linearization because a value, once overwritten, never comes back:
///
/// * a pending read of the current value is taken first, and no alternative is tried in its
///   place (moving it to the front of any linearization keeps that linearization valid);
/// * nothing overwrites a value while an op that read it is not yet taken.
///
/// The list links calls and returns in time order (node 0 the head, the last node the tail; a
/// call before a return at the same time, as neither precedes the other). Taking an op unlinks
/// its call and return; an op can be taken when its call precedes every linked return.
struct Search<'a> {
    ops: &'a [Op],
    /// Calls and returns, node `n` is `events[n - 1]`: (time, is a return, op).
    events: Vec<(u64, bool, usize)>,
    return_node: Vec<Option<usize>>,
    next: Vec<usize>,
    prev: Vec<usize>,
    unique: bool,
    /// Values seen by ops not yet taken, with how many saw each.
    readers: HashMap<Option<Val>, u32>,
    state: Option<Val>,
    /// One past the largest op index taken: the ops taken are those below it but the ones
    /// still linked, which makes the memo's key short.
    hi: usize,
    /// Ops taken: (call node, state before, `hi` before, it was a forced read).
    stack: Vec<(usize, Option<Val>, usize, bool)>,
    /// Ops with a return not yet taken: the search is done at zero.
    left: usize,
    memo: HashSet<(Vec<u32>, Option<Val>)>,
}

impl Search<'_> {
    /// Ready to search `ops` (sorted by call).
    fn new(ops: &[Op], unique: bool) -> Search<'_> {
        let mut events = Vec::with_capacity(2 * ops.len());
        let mut readers = HashMap::new();
        for (i, op) in ops.iter().enumerate() {
            events.push((op.call_ns, false, i));
            events.extend(op.return_ns.map(|r| (r, true, i)));
            if let Some(v) = op.read() {
                *readers.entry(v).or_default() += 1;
            }
        }
        events.sort_unstable();
        let mut return_node = vec![None; ops.len()];
        for (n, &(_, is_return, i)) in events.iter().enumerate() {
            if is_return {
                return_node[i] = Some(n + 1);
            }
        }
        let tail = events.len() + 1;
        Search {
            ops,
            left: return_node.iter().flatten().count(),
            events,
            return_node,
            next: (1..=tail).chain([tail]).collect(),
            prev: [0].into_iter().chain(0..tail).collect(),
            unique,
            readers,
            state: None,
            hi: 0,
            stack: Vec::new(),
            memo: HashSet::new(),
        }
    }
    fn op(&self, node: usize) -> &Op {
        &self.ops[self.events[node - 1].2]
    }
    fn is_return(&self, node: usize) -> bool {
        self.events[node - 1].1
    }
    /// Unlinks (or, `back`, relinks) op `i`'s call node `n` and its return node; relinking
    /// goes in the reverse order, so each node's own links still say where it was.
    fn link(&mut self, i: usize, n: usize, back: bool) {
        let mut nodes = [Some(n), self.return_node[i]];
        if back {
            nodes.reverse();
        }
        for m in nodes.into_iter().flatten() {
            let (p, q) = (self.prev[m], self.next[m]);
            (self.next[p], self.prev[q]) = if back { (m, m) } else { (q, p) };
        }
    }
    /// The memo's key for the ops taken when `hi` is `hi`: `hi` and the linked calls below it.
    fn taken_key(&self, hi: usize) -> Vec<u32> {
        let mut key = vec![hi as u32];
        let mut n = self.next[0];
        while n < self.events.len() + 1 {
            let (_, is_return, i) = self.events[n - 1];
            if !is_return && i >= hi {
                break;
            }
            key.extend((!is_return).then_some(i as u32));
            n = self.next[n];
        }
        key
    }
    /// Takes the op of call node `n`, if it can go now and leads somewhere not yet explored.
    fn take(&mut self, n: usize, forced: bool) -> bool {
        let (i, op) = (self.events[n - 1].2, *self.op(n));
        let Some(next) = op.step(self.state) else {
            return false;
        };
        let others = (self.readers.get(&self.state).copied().unwrap_or(0))
            .saturating_sub(u32::from(op.read() == Some(self.state)));
        if self.unique && next != self.state && others > 0 {
            return false;
        }
        self.link(i, n, false);
        let hi = self.hi.max(i + 1);
        if !self.memo.insert((self.taken_key(hi), next)) {
            self.link(i, n, true);
            return false;
        }
        self.stack.push((n, self.state, self.hi, forced));
        (self.state, self.hi) = (next, hi);
        if let Some(v) = op.read() {
            self.readers
                .entry(v)
                .and_modify(|c| *c = c.saturating_sub(1));
        }
        self.left -= usize::from(op.return_ns.is_some());
        true
    }
    /// Undoes ops taken back to the latest choice that has alternatives; the node to try next
    /// there, or `None` when there is none (no linearization).
    fn backtrack(&mut self) -> Option<usize> {
        while let Some((n, state, hi, forced)) = self.stack.pop() {
            let (i, op) = (self.events[n - 1].2, *self.op(n));
            self.link(i, n, true);
            (self.state, self.hi) = (state, hi);
            if let Some(v) = op.read() {
                *self.readers.entry(v).or_default() += 1;
            }
            self.left += usize::from(op.return_ns.is_some());
            if !forced {
                return Some(self.next[n]);
            }
        }
        None
    }
    /// A pending op that reads the current value and leaves it, if any.
    fn forced_read(&self) -> Option<usize> {
        let mut n = self.next[0];
        while n < self.events.len() + 1 && !self.is_return(n) {
            let op = self.op(n);
            if op.read() == Some(self.state) && op.step(self.state) == Some(self.state) {
                return Some(n);
            }
            n = self.next[n];
        }
        None
    }
}

/// Searches one key's operations (sorted by call) for at most `budget` steps.
fn check_key(ops: &[Op], unique: bool, budget: u64) -> Outcome {
    enum Next {
        Level,
        At(usize),
        Fail,
    }
    let mut s = Search::new(ops, unique);
    let tail = s.events.len() + 1;
    let mut stuck: Option<Stuck> = None;
    // At a new level of the search, a forced read is looked for before any choice.
    let (mut n, mut fresh) = (s.next[0], true);
    for _ in 0..budget {
        if s.left == 0 {
            return Outcome::Linearizable;
        }
        let forced = if fresh && s.unique {
            s.forced_read()
        } else {
            None
        };
        fresh = false;
        let next = match forced {
            Some(r) if s.take(r, true) => Next::Level,
            Some(_) => s.backtrack().map_or(Next::Fail, Next::At),
            // Every op not taken has its return linked, so the scan meets one before the tail.
            None if n == tail => return Outcome::Undecided,
            None if !s.is_return(n) && s.take(n, false) => Next::Level,
            None if !s.is_return(n) => Next::At(s.next[n]),
            None => {
                // Op `n` has returned but cannot be taken now: undo the latest choice.
                if stuck.as_ref().is_none_or(|st| s.stack.len() > st.depth) {
                    stuck = Some(s.stuck(n));
                }
                s.backtrack().map_or(Next::Fail, Next::At)
            }
        };
        match next {
            Next::Level => (n, fresh) = (s.next[0], true),
            Next::At(m) => n = m,
            Next::Fail => {
                let key = ops.first().map_or(0, |o| o.cmd.key());
                let text = stuck.map_or(format!("key {key} is not linearizable"), |st| {
                    st.describe(ops)
                });
                return Outcome::Violation(text);
            }
        }
    }
    Outcome::Undecided
}

/// Where the search got stuck: at the return of op `at`, after taking `depth` ops, the last
/// of them `recent`, leaving `state`; `untaken` the ops not taken (a memo key), `pending` the
/// calls linked before `at`.
struct Stuck {
    at: usize,
    depth: usize,
    recent: Vec<usize>,
    state: Option<Val>,
    untaken: Vec<u32>,
    pending: Vec<usize>,
}

impl Search<'_> {
    /// Where the search is stuck, at return node `at`.
    fn stuck(&self, at: usize) -> Stuck {
        let recent = &self.stack[self.stack.len().saturating_sub(CONTEXT_MAX)..];
        let mut pending = Vec::new();
        let mut n = self.next[0];
        while n != at && pending.len() < CONTEXT_MAX {
            pending.extend((!self.is_return(n)).then_some(self.events[n - 1].2));
            n = self.next[n];
        }
        Stuck {
            at: self.events[at - 1].2,
            depth: self.stack.len(),
            recent: recent.iter().map(|f| self.events[f.0 - 1].2).collect(),
            state: self.state,
            untaken: self.taken_key(self.hi),
            pending,
        }
    }
}

impl Stuck {
    /// The violation, described: the key's ops where the deepest search got stuck.
    fn describe(&self, ops: &[Op]) -> String {
        let shown = |is: &mut dyn Iterator<Item = usize>| {
            let shown: Vec<String> = is.map(|i| ops[i].to_string()).collect();
            shown.join("; ")
        };
        let (hi, below) = self
            .untaken
            .split_first()
            .map_or((0, &[][..]), |(h, b)| (*h, b));
        let untaken = |i: usize| i >= hi as usize || below.contains(&(i as u32));
        let readers = (0..ops.len()).filter(|&i| untaken(i) && ops[i].read() == Some(self.state));
        format!(
            "key {} ({} ops) is not linearizable: the deepest search takes {} ops, the last [{}], \
             leaving {}, which ops not taken yet read: [{}]; then {} has returned, but no \
             pending op can go next: [{}]",
            ops[self.at].cmd.key(),
            ops.len(),
            self.depth,
            shown(&mut self.recent.iter().copied()),
            Shown(self.state),
            shown(&mut readers.take(CONTEXT_MAX)),
            ops[self.at],
            shown(&mut self.pending.iter().copied()),
        )
    }
}

/// The history in Jepsen's form ([`crate::history`]): every completed operation `ok`, every
/// write still `open` (its client failed, or the run ended first) `info`. A get is `["r", k, v]`;
/// a put `["w", k, v]`; a compare-and-set that swapped `["r", k, expect], ["w", k, new]`, one
/// that did not `["r", k, found]` (Elle's model of a register's CAS); an open one is the read
/// unknown and the write. Values are `client << 40 | count`, unique per key.
pub fn history_json(done: &[ReplDone], open: &[MaybeOp]) -> String {
    history::to_json(&history(done, open))
}

/// The dependency-graph checker ([`crate::depgraph`], strict: real time within `skew_ns`) on
/// the history [`history_json`] writes: it reads that history alone.
pub fn graph_verdict(done: &[ReplDone], open: &[MaybeOp], skew_ns: u64) -> GraphVerdict {
    depgraph::strict(&history(done, open), skew_ns)
}

fn history(done: &[ReplDone], open: &[MaybeOp]) -> Vec<HistOp> {
    let mops = |cmd: &Cmd, output: Option<Val>| match *cmd {
        Cmd::Get(k) => vec![Mop::Read(k, output)],
        Cmd::Put(k, v) => vec![Mop::Write(k, v)],
        Cmd::Cas { key, expect, new } if output == expect => {
            vec![Mop::Read(key, expect), Mop::Write(key, new)]
        }
        Cmd::Cas { key, .. } => vec![Mop::Read(key, output)],
    };
    let ops: Vec<Operation> = done
        .iter()
        .map(|d| Operation {
            client: d.client,
            call_ns: d.call_ns,
            outcome: Some((OpType::Ok, d.return_ns)),
            mops: mops(&d.cmd, d.output),
        })
        .chain(open.iter().map(|m| Operation {
            client: m.client,
            call_ns: m.call_ns,
            outcome: None,
            mops: match m.cmd {
                Cmd::Cas { key, new, .. } => vec![Mop::Read(key, None), Mop::Write(key, new)],
                ref c => mops(c, None),
            },
        }))
        .collect();
    history::build(&ops)
}

/// The end-of-run replica checks; returns the violations found, at most [`LOG_VIOLATIONS_MAX`]
/// described of each kind and one line counting the rest:
///
/// * agreement: for every pair of replicas, at every committed log position both hold
///   (positions `start..start + entries.len()` below both commit points), the entries are equal — writer (client, operation id) and
///   checksum. The checksum covers the whole prefix, so equal checksums at the last shared
///   position mean identical prefixes; comparing every shared position also names the first
///   that differs.
/// * durability: every `acknowledged` write (client, operation id) is held — in the log's
///   `entries` or its `committed_writes` — by at least one replica, and by every up-to-date replica (those whose
///   `commit` is the largest among `logs`). A replica behind them may lack it. With `logs`
///   empty (every replica failed) there is nothing to check it against.
pub fn check_logs(
    logs: &[ReplicaLog],
    acknowledged: impl Iterator<Item = (u32, u64)>,
) -> Vec<String> {
    let mut diverged = Vec::new();
    for (i, a) in logs.iter().enumerate() {
        diverged.extend(logs[i + 1..].iter().filter_map(|b| diverge(a, b)));
    }
    let newest = logs.iter().map(|l| l.commit).max();
    // A write is held by a replica once it is in its log (a client acknowledges a write when
    // every replica appended it; the notice that commits it may still be on its way when the
    // run ends) or among what it committed (folded out of the log since).
    let committed: Vec<HashSet<(u32, u64)>> = logs
        .iter()
        .map(|l| {
            l.committed_writes
                .iter()
                .copied()
                .chain(l.entries.iter().map(|e| (e.0, e.1)))
                .collect()
        })
        .collect();
    let mut lost = Vec::new();
    // With no replica left to ask (every one failed), what survives cannot be checked.
    let acknowledged = acknowledged.filter(|_| !logs.is_empty());
    for (client, id) in acknowledged {
        let holds = |c: &HashSet<(u32, u64)>| c.contains(&(client, id));
        if !committed.iter().any(holds) {
            lost.push(format!(
                "acknowledged write c{client}#{id} is held by no replica"
            ));
            continue;
        }
        for (l, c) in logs.iter().zip(&committed) {
            if Some(l.commit) == newest && !holds(c) {
                lost.push(format!(
                    "acknowledged write c{client}#{id} is missing from up-to-date replica {} \
                     (commit {})",
                    l.replica, l.commit
                ));
            }
        }
    }
    let mut v = Vec::new();
    for (kind, found) in [("disagreements", diverged), ("lost writes", lost)] {
        let more = found.len().saturating_sub(LOG_VIOLATIONS_MAX);
        v.extend(found.into_iter().take(LOG_VIOLATIONS_MAX));
        if more > 0 {
            v.push(format!("... and {more} more {kind}"));
        }
    }
    v
}

/// The first position `a` and `b` both hold where their entries differ, described.
fn diverge(a: &ReplicaLog, b: &ReplicaLog) -> Option<String> {
    let from = a.start.max(b.start);
    let skip = |l: &ReplicaLog| usize::try_from(from - l.start).unwrap_or(usize::MAX);
    let xs = a.entries.get(skip(a)..)?;
    let ys = b.entries.get(skip(b)..)?;
    // Committed positions only: an uncommitted tail may still be removed by a recovery, or
    // belong to a replica a view left out.
    let shared = a.commit.min(b.commit).saturating_sub(from);
    let shared = usize::try_from(shared).unwrap_or(usize::MAX);
    let (k, (x, y)) = xs
        .iter()
        .zip(ys)
        .take(shared)
        .enumerate()
        .find(|(_, (x, y))| x != y)?;
    Some(format!(
        "replicas {} and {} disagree at position {}: c{}#{} checksum {:#x} vs c{}#{} checksum {:#x}",
        a.replica,
        b.replica,
        from.saturating_add(k as u64),
        x.0,
        x.1,
        x.2,
        y.0,
        y.1,
        y.2
    ))
}

#[cfg(test)]
mod tests;
