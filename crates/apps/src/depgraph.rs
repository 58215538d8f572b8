//! A serializability checker that reads a history alone ([`crate::history`]'s Jepsen form), after
//! Adya's dependency graphs as Elle builds them (Kingsbury & Alvaro, "Elle: inferring isolation
//! anomalies from experimental observations", VLDB 2020). It never sees the system's timestamps,
//! commit stamps or serialization order: only who wrote and who read which unique value, and
//! when each operation was called and returned.
//!
//! **Edges** between the transactions that took effect (`ok`, and `info` ones that may have):
//! * *wr*: the writer of the value a transaction read comes before it.
//! * *ww*: a transaction that read version `v` of a key and wrote the key installs the version
//!   right after `v` (a read-modify-write), so `v`'s writer comes before it.
//! * *rw* (anti-dependency): a transaction that read `v` comes before every other transaction
//!   whose version of that key is known to follow `v` — the read-modify-writes of `v`; with
//!   nothing read (the initial version), every writer of the key; and, when real time is checked,
//!   every writer called after `v`'s writer returned (in a strictly serializable history that
//!   writer's version comes later).
//! * *rt* (only when real time is checked): a transaction that returned before another was called
//!   comes first, allowing `skew_ns` of disagreement between the processes' clocks.
//!
//! A cycle is an anomaly (one is reported per strongly connected component, the shortest cycle
//! found, named as Adya does: G0 with write dependencies only, G1c with write and read
//! dependencies, G-single with one anti-dependency, G2 with more, `-realtime` when it needs a
//! real-time edge). Besides cycles: a read of a value nobody wrote (garbage), of a value only a
//! failed operation wrote (G1a), a transaction reading its own later write, a read inside a
//! transaction disagreeing with what it wrote before (internal), and two writes of one value to
//! one key (the value is not unique, so who-read-whom is not known).
//!
//! The edge sets "every writer after `v`" and real time are many-to-many; they are kept linear
//! with helper nodes that only lead forward (a segment tree over a key's writers, a chain over
//! the history's times), so a cycle through them is a cycle of the relation itself.

use crate::history::{HistOp, Mop, OpType};
use std::collections::{HashMap, VecDeque};

/// What to check.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Strict serializability: real-time edges, and versions ordered by real time.
    pub realtime: bool,
    /// How far two processes' clocks may disagree (ns), for real time.
    pub skew_ns: u64,
}

/// Most anomalies kept as samples (all are counted).
const SAMPLES_MAX: usize = 16;

/// What the checker found, and what it looked at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GraphVerdict {
    /// Operations that took effect (`ok`).
    pub ok: u64,
    /// Operations of unknown outcome (`info`, or invoked and never completed): their writes
    /// count if somebody read them; their reads are unknown.
    pub info: u64,
    /// Operations that failed: their writes must be read by nobody.
    pub failed: u64,
    /// Reads of a value written before in another transaction, checked.
    pub reads: u64,
    /// Edges by kind: ww, wr, rw, rt (an rw or rt edge to a set counts once).
    pub edges: [u64; 4],
    /// Anomalies, counted: one per cycle component, one per bad read or write.
    pub anomalies: u64,
    /// The first few, described.
    pub samples: Vec<String>,
}

impl GraphVerdict {
    fn add(&mut self, what: String) {
        self.anomalies += 1;
        if self.samples.len() < SAMPLES_MAX {
            self.samples.push(what);
        }
    }
}

const WW: u8 = 0;
const WR: u8 = 1;
const RW: u8 = 2;
const RT: u8 = 3;
const LABELS: [&str; 4] = ["ww", "wr", "rw", "rt"];

/// One operation as the history tells it.
#[derive(Debug)]
struct Txn {
    kind: OpType,
    process: u64,
    call: u64,
    /// `u64::MAX` if it never returned.
    ret: u64,
    mops: Vec<Mop>,
}

/// Pairs each invoke with its process's next completion. Records out of place are anomalies.
fn pair(h: &[HistOp], v: &mut GraphVerdict) -> Vec<Txn> {
    let mut open: HashMap<u64, usize> = HashMap::new();
    let mut txns: Vec<Txn> = Vec::new();
    for r in h {
        if r.kind == OpType::Invoke {
            if open.contains_key(&r.process) {
                v.add(format!(
                    "malformed: process {} invoked at record {} with an operation open",
                    r.process, r.index
                ));
                continue;
            }
            open.insert(r.process, txns.len());
            txns.push(Txn {
                kind: OpType::Info,
                process: r.process,
                call: r.time,
                ret: u64::MAX,
                mops: r.value.clone(),
            });
            continue;
        }
        let Some(i) = open.remove(&r.process) else {
            v.add(format!(
                "malformed: record {} completes nothing process {} invoked",
                r.index, r.process
            ));
            continue;
        };
        let t = &mut txns[i];
        t.kind = r.kind;
        if r.kind == OpType::Ok {
            t.ret = r.time;
            t.mops = r.value.clone();
        }
    }
    txns
}

/// The graph: real nodes first (one per transaction that may have taken effect), helper nodes
/// after; edges with their labels.
struct Graph {
    nodes: usize,
    edges: Vec<(u32, u32, u8)>,
}

impl Graph {
    fn node(&mut self) -> u32 {
        self.nodes += 1;
        (self.nodes - 1) as u32
    }
    fn edge(&mut self, a: u32, b: u32, label: u8) {
        self.edges.push((a, b, label));
    }
}

/// A key's writers, by call time, under a segment tree of helper nodes: an edge to a tree node
/// reaches exactly the writers under it.
struct Writers {
    /// Writer nodes, by call time.
    by_call: Vec<u32>,
    /// Their call times.
    calls: Vec<u64>,
    /// The tree's helper nodes (heap order, leaves at `size..`), built on first use.
    tree: Option<(usize, u32)>,
}

impl Writers {
    /// Edges from `from` to every writer at positions `lo..hi`.
    fn edges_to_range(&mut self, g: &mut Graph, from: u32, lo: usize, hi: usize) {
        if lo >= hi {
            return;
        }
        if hi - lo == 1 {
            g.edge(from, self.by_call[lo], RW);
            return;
        }
        let (size, base) = *self.tree.get_or_insert_with(|| {
            let size = self.by_call.len().next_power_of_two();
            let base = g.nodes as u32;
            g.nodes += 2 * size;
            // Inner node i leads to 2i and 2i + 1; leaf size + j to writer j.
            for i in 1..size {
                g.edges.push((base + i as u32, base + 2 * i as u32, RW));
                g.edges.push((base + i as u32, base + 2 * i as u32 + 1, RW));
            }
            for (j, &w) in self.by_call.iter().enumerate() {
                g.edges.push((base + (size + j) as u32, w, RW));
            }
            (size, base)
        });
        let (mut l, mut r) = (lo + size, hi + size);
        while l < r {
            if l & 1 == 1 {
                g.edge(from, base + l as u32, RW);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                g.edge(from, base + r as u32, RW);
            }
            l /= 2;
            r /= 2;
        }
    }

    /// Edges from reader `from` to every writer in `lo..` except `skip`.
    fn edges_to_all_from(&mut self, g: &mut Graph, from: u32, lo: usize, skip: Option<usize>) {
        match skip {
            Some(s) if s >= lo => {
                self.edges_to_range(g, from, lo, s);
                self.edges_to_range(g, from, s + 1, self.by_call.len());
            }
            _ => self.edges_to_range(g, from, lo, self.by_call.len()),
        }
    }
}

/// Strict serializability: [`check`] with real time, allowing `skew_ns` between the processes'
/// clocks — what every run of the applications is held to.
pub fn strict(history: &[HistOp], skew_ns: u64) -> GraphVerdict {
    check(
        history,
        Options {
            realtime: true,
            skew_ns,
        },
    )
}

/// Checks `history` for the anomalies above.
pub fn check(history: &[HistOp], opts: Options) -> GraphVerdict {
    let mut v = GraphVerdict::default();
    let txns = pair(history, &mut v);
    let (node_of, real) = real_nodes(&txns, &mut v);
    let mut g = Graph {
        nodes: real.len(),
        edges: Vec::new(),
    };
    let mut written = versions(&txns, &node_of, &real, &mut v);
    let read = external_reads(&txns, &real, &mut v);
    // wr and ww.
    wr_ww_edges(&mut g, &mut v, &txns, &real, &written, &read);
    // rw.
    rw_edges(&mut g, &mut v, &txns, &real, &mut written, &read, opts);
    // rt: a chain of helper nodes over the history's times.
    if opts.realtime {
        rt_edges(&mut g, &mut v, &txns, &real, opts.skew_ns);
    }
    cycles(&g, real.len(), &txns, &real, &mut v);
    v
}

/// Real nodes: the transactions that may have taken effect, counted by outcome. Each
/// transaction's node (if any), and each node's transaction.
fn real_nodes(txns: &[Txn], v: &mut GraphVerdict) -> (Vec<Option<u32>>, Vec<usize>) {
    let mut node_of: Vec<Option<u32>> = vec![None; txns.len()];
    let mut real: Vec<usize> = Vec::new();
    for (i, t) in txns.iter().enumerate() {
        match t.kind {
            OpType::Ok => v.ok += 1,
            OpType::Fail => {
                v.failed += 1;
                continue;
            }
            _ => v.info += 1,
        }
        node_of[i] = Some(real.len() as u32);
        real.push(i);
    }
    (node_of, real)
}

/// Who wrote which version of which key.
struct Versions {
    /// The node that wrote each (key, value).
    writer: HashMap<(u64, u64), u32>,
    /// The failed transaction that wrote each (key, value) no node wrote.
    aborted: HashMap<(u64, u64), usize>,
    /// Each key's writers, by call time.
    keys: HashMap<u64, Writers>,
    /// Each writer's place among its key's writers.
    pos: HashMap<(u64, u32), usize>,
}

/// Who wrote which (key, value): a transaction's last write of a key is its version. A value
/// written twice is an anomaly.
fn versions(
    txns: &[Txn],
    node_of: &[Option<u32>],
    real: &[usize],
    v: &mut GraphVerdict,
) -> Versions {
    let mut writer: HashMap<(u64, u64), u32> = HashMap::new();
    let mut aborted: HashMap<(u64, u64), usize> = HashMap::new();
    let mut keys: HashMap<u64, Writers> = HashMap::new();
    for (i, t) in txns.iter().enumerate() {
        let mut last: HashMap<u64, u64> = HashMap::new();
        for m in &t.mops {
            if let Mop::Write(k, x) = *m {
                last.insert(k, x);
            }
        }
        for (k, x) in last {
            let Some(n) = node_of[i] else {
                aborted.insert((k, x), i);
                continue;
            };
            if let Some(&other) = writer.get(&(k, x)) {
                v.add(format!(
                    "duplicate-write: value {x} of key {k} written by {} and {}",
                    describe(&txns[real[other as usize]]),
                    describe(t)
                ));
                continue;
            }
            writer.insert((k, x), n);
            let w = keys.entry(k).or_insert(Writers {
                by_call: Vec::new(),
                calls: Vec::new(),
                tree: None,
            });
            w.by_call.push(n);
            w.calls.push(t.call);
        }
    }
    for w in keys.values_mut() {
        let mut order: Vec<usize> = (0..w.by_call.len()).collect();
        order.sort_by_key(|&j| (w.calls[j], w.by_call[j]));
        w.by_call = order.iter().map(|&j| w.by_call[j]).collect();
        w.calls = order.iter().map(|&j| w.calls[j]).collect();
    }
    // Each writer's place among its key's writers.
    let mut pos: HashMap<(u64, u32), usize> = HashMap::new();
    for (&k, w) in &keys {
        for (j, &n) in w.by_call.iter().enumerate() {
            pos.insert((k, n), j);
        }
    }
    Versions {
        writer,
        aborted,
        keys,
        pos,
    }
}

/// What the transactions that returned read from others.
struct Reads {
    /// Each node's external reads: (key, value read; `None` for the initial version).
    ext: Vec<Vec<(u64, Option<u64>)>>,
    /// The read-modify-writes: (key, version read) → its successors.
    succ: HashMap<(u64, Option<u64>), Vec<u32>>,
}

/// External reads, and the read-modify-writes. A read disagreeing with the transaction's own
/// earlier write is an anomaly.
fn external_reads(txns: &[Txn], real: &[usize], v: &mut GraphVerdict) -> Reads {
    let mut ext: Vec<Vec<(u64, Option<u64>)>> = vec![Vec::new(); real.len()];
    let mut succ: HashMap<(u64, Option<u64>), Vec<u32>> = HashMap::new();
    for (n, &i) in real.iter().enumerate() {
        let t = &txns[i];
        if t.kind != OpType::Ok {
            continue;
        }
        let mut own: HashMap<u64, u64> = HashMap::new();
        for m in &t.mops {
            match *m {
                Mop::Write(k, x) => {
                    own.insert(k, x);
                }
                Mop::Read(k, got) => match own.get(&k) {
                    Some(&mine) if got != Some(mine) => v.add(format!(
                        "internal: {} read key {k} as {got:?} after writing {mine}",
                        describe(t)
                    )),
                    Some(_) => {}
                    None => ext[n].push((k, got)),
                },
            }
        }
        for &(k, got) in &ext[n] {
            if own.contains_key(&k) {
                succ.entry((k, got)).or_default().push(n as u32);
            }
        }
    }
    Reads { ext, succ }
}

/// The wr edges (writer to reader) and ww edges (a version's writer to its read-modify-writes);
/// a read of the reader's own later write, of a failed write or of a value nobody wrote is an
/// anomaly.
fn wr_ww_edges(
    g: &mut Graph,
    v: &mut GraphVerdict,
    txns: &[Txn],
    real: &[usize],
    versions: &Versions,
    reads: &Reads,
) {
    let Versions {
        writer, aborted, ..
    } = versions;
    for (n, rs) in reads.ext.iter().enumerate() {
        let t = &txns[real[n]];
        for &(k, got) in rs {
            v.reads += 1;
            let Some(x) = got else { continue };
            match writer.get(&(k, x)) {
                Some(&w) if w as usize == n => v.add(format!(
                    "future-read: {} read key {k} as {x}, its own later write",
                    describe(t)
                )),
                Some(&w) => {
                    g.edge(w, n as u32, WR);
                    v.edges[WR as usize] += 1;
                }
                None => match aborted.get(&(k, x)) {
                    Some(&a) => v.add(format!(
                        "G1a (aborted read): {} read key {k} as {x}, written only by the failed {}",
                        describe(t),
                        describe(&txns[a])
                    )),
                    None => v.add(format!(
                        "garbage-read: {} read key {k} as {x}, which nobody wrote",
                        describe(t)
                    )),
                },
            }
        }
    }
    for (&(k, got), ts) in &reads.succ {
        if let Some(w) = got.and_then(|x| writer.get(&(k, x))) {
            for &t in ts {
                if t != *w {
                    g.edge(*w, t, WW);
                    v.edges[WW as usize] += 1;
                }
            }
        }
    }
}

/// The rw edges (anti-dependencies): from each reader of a version to the read-modify-writes
/// of it, and to the writers known to follow it.
fn rw_edges(
    g: &mut Graph,
    v: &mut GraphVerdict,
    txns: &[Txn],
    real: &[usize],
    versions: &mut Versions,
    reads: &Reads,
    opts: Options,
) {
    let Versions {
        writer, keys, pos, ..
    } = versions;
    for (n, rs) in reads.ext.iter().enumerate() {
        for &(k, got) in rs {
            if let Some(ts) = reads.succ.get(&(k, got)) {
                for &u in ts {
                    if u as usize != n {
                        g.edge(n as u32, u, RW);
                        v.edges[RW as usize] += 1;
                    }
                }
            }
            let Some(w) = keys.get_mut(&k) else { continue };
            let me = pos.get(&(k, n as u32)).copied();
            let from = match got {
                // The initial version: every writer of the key comes after.
                None => Some(0),
                // Every writer called after this version's writer returned.
                Some(x) if opts.realtime => writer.get(&(k, x)).map(|&wn| {
                    let ret = txns[real[wn as usize]].ret.saturating_add(opts.skew_ns);
                    w.calls.partition_point(|&c| c <= ret)
                }),
                Some(_) => None,
            };
            if let Some(lo) = from {
                if lo + usize::from(me.is_some_and(|m| m >= lo)) < w.by_call.len() {
                    v.edges[RW as usize] += 1;
                }
                w.edges_to_all_from(g, n as u32, lo, me);
            }
        }
    }
}

/// The rt edges, through a chain of helper nodes over the history's times: a transaction that
/// returned (plus `skew_ns`) before another was called comes first.
fn rt_edges(g: &mut Graph, v: &mut GraphVerdict, txns: &[Txn], real: &[usize], skew_ns: u64) {
    let mut events: Vec<(u64, bool, u32)> = Vec::new();
    for (n, &i) in real.iter().enumerate() {
        let t = &txns[i];
        events.push((t.call, false, n as u32));
        if t.ret != u64::MAX {
            events.push((t.ret.saturating_add(skew_ns), true, n as u32));
        }
    }
    // At one time, calls before returns: a return at the very time of a call orders nothing.
    events.sort_by_key(|&(t, is_ret, n)| (t, is_ret, n));
    let mut prev: Option<u32> = None;
    for (_, is_ret, n) in events {
        let c = g.node();
        if let Some(p) = prev {
            g.edge(p, c, RT);
        }
        prev = Some(c);
        if is_ret {
            g.edge(n, c, RT);
            v.edges[RT as usize] += 1;
        } else {
            g.edge(c, n, RT);
        }
    }
}

fn describe(t: &Txn) -> String {
    let ret = if t.ret == u64::MAX {
        "never returned".to_string()
    } else {
        format!("returned at {}", t.ret)
    };
    format!(
        "the transaction of process {} called at {} ({ret}, {:?})",
        t.process, t.call, t.kind
    )
}

/// Compressed adjacency: `start[a]..start[a + 1]` in `to`.
struct Csr {
    start: Vec<u32>,
    to: Vec<(u32, u8)>,
}

fn csr(g: &Graph) -> Csr {
    let mut start = vec![0u32; g.nodes + 1];
    for &(a, _, _) in &g.edges {
        start[a as usize + 1] += 1;
    }
    for i in 0..g.nodes {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut to = vec![(0u32, 0u8); g.edges.len()];
    for &(a, b, l) in &g.edges {
        to[fill[a as usize] as usize] = (b, l);
        fill[a as usize] += 1;
    }
    Csr { start, to }
}

/// Strongly connected components (Tarjan's, iterative): each node's component id.
fn components(c: &Csr, nodes: usize) -> Vec<u32> {
    const NONE: u32 = u32::MAX;
    let mut index = vec![NONE; nodes];
    let mut low = vec![0u32; nodes];
    let mut on = vec![false; nodes];
    let mut comp = vec![NONE; nodes];
    let mut stack: Vec<u32> = Vec::new();
    let mut calls: Vec<(u32, u32)> = Vec::new();
    let (mut next, mut comps) = (0u32, 0u32);
    for root in 0..nodes as u32 {
        if index[root as usize] != NONE {
            continue;
        }
        calls.push((root, c.start[root as usize]));
        index[root as usize] = next;
        low[root as usize] = next;
        next += 1;
        stack.push(root);
        on[root as usize] = true;
        while let Some(&mut (a, ref mut e)) = calls.last_mut() {
            if *e < c.start[a as usize + 1] {
                let (b, _) = c.to[*e as usize];
                *e += 1;
                if index[b as usize] == NONE {
                    index[b as usize] = next;
                    low[b as usize] = next;
                    next += 1;
                    stack.push(b);
                    on[b as usize] = true;
                    calls.push((b, c.start[b as usize]));
                } else if on[b as usize] {
                    low[a as usize] = low[a as usize].min(index[b as usize]);
                }
                continue;
            }
            calls.pop();
            if let Some(&(p, _)) = calls.last() {
                low[p as usize] = low[p as usize].min(low[a as usize]);
            }
            if low[a as usize] == index[a as usize] {
                loop {
                    let x = stack.pop().expect("the component's nodes are on the stack");
                    on[x as usize] = false;
                    comp[x as usize] = comps;
                    if x == a {
                        break;
                    }
                }
                comps += 1;
            }
        }
    }
    comp
}

/// One anomaly per component with a cycle through real nodes: the first cycle found using the
/// fewest kinds of edge (ww; then wr; then rw; then rt), as Elle reports them.
fn cycles(g: &Graph, reals: usize, txns: &[Txn], real: &[usize], v: &mut GraphVerdict) {
    let c = csr(g);
    let comp = components(&c, g.nodes);
    let mut members: HashMap<u32, Vec<u32>> = HashMap::new();
    for n in 0..reals as u32 {
        members.entry(comp[n as usize]).or_default().push(n);
    }
    let mut cyclic: Vec<&Vec<u32>> = members.values().filter(|m| m.len() > 1).collect();
    cyclic.sort_by_key(|m| m[0]);
    for m in cyclic {
        if v.samples.len() >= SAMPLES_MAX {
            v.anomalies += 1;
            continue;
        }
        let found = [1u8, 3, 7, 15].iter().find_map(|&allowed| {
            m.iter()
                .take(64)
                .find_map(|&s| shortest_cycle(&c, &comp, s, allowed))
        });
        v.add(match found {
            Some(path) => name_cycle(&path, txns, real),
            None => format!(
                "cycle: {} transactions in one dependency cycle (none shown)",
                m.len()
            ),
        });
    }
}

/// The shortest cycle through `s` within its component using edges whose label bit is in
/// `allowed`: the nodes with the label of the edge into each.
fn shortest_cycle(c: &Csr, comp: &[u32], s: u32, allowed: u8) -> Option<Vec<(u32, u8)>> {
    let k = comp[s as usize];
    let mut prev: HashMap<u32, (u32, u8)> = HashMap::new();
    let mut q = VecDeque::from([s]);
    while let Some(a) = q.pop_front() {
        for &(b, l) in &c.to[c.start[a as usize] as usize..c.start[a as usize + 1] as usize] {
            if allowed & (1 << l) == 0 || comp[b as usize] != k {
                continue;
            }
            if b == s {
                let mut path = vec![(s, l)];
                let mut x = a;
                while x != s {
                    let (p, pl) = prev[&x];
                    path.push((x, pl));
                    x = p;
                }
                path.reverse();
                return Some(path);
            }
            if let std::collections::hash_map::Entry::Vacant(e) = prev.entry(b) {
                e.insert((a, l));
                q.push_back(b);
            }
        }
    }
    None
}

/// `G-single: T1 -rw-> T2 -wr-> T1`, helper nodes left out.
fn name_cycle(path: &[(u32, u8)], txns: &[Txn], real: &[usize]) -> String {
    let reals = real.len() as u32;
    let mut kinds = [0u32; 4];
    let mut steps = Vec::new();
    for &(n, l) in path {
        // Each edge into a real node ends one step; a step's kind is the kind of its edges.
        if n < reals {
            kinds[l as usize] += 1;
            steps.push(format!(
                "-{}-> {}",
                LABELS[l as usize],
                describe(&txns[real[n as usize]])
            ));
        }
    }
    let name = match (kinds[RW as usize], kinds[WR as usize]) {
        (0, 0) => "G0",
        (0, _) => "G1c",
        (1, _) => "G-single",
        _ => "G2",
    };
    let rt = if kinds[RT as usize] > 0 {
        "-realtime"
    } else {
        ""
    };
    format!("{name}{rt} cycle: {}", steps.join(" "))
}

#[cfg(test)]
mod tests;
