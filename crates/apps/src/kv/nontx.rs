//! The non-transactional store (§7.3.1's "NonTX", the upper bound of Fig. 14): the same
//! operations, keys, values and closed loop as [`super::KvProcess`], sent straight to the servers
//! with no ordering and no isolation — a server applies each operation as it arrives and answers.
//! What it commits states no serialization order and is not checked for one; it is the throughput
//! a transactional design can at best reach on the same network and CPUs.

use super::codec;
use super::workload::TxnGen;
use super::{server_of, txn_id, Committed, Key, KvConfig, KvStats, Op, TxnApp, TxnKind, Value};
use crate::{App, AppInput, AppSend};
use onepipe_proto::{Instant, ProcId};
use std::collections::{BTreeMap, HashMap, VecDeque};

#[derive(Debug)]
struct Pending {
    ops: Vec<Op>,
    waiting: Vec<u32>,
    reads: Vec<(Key, Option<Value>)>,
    call: Instant,
}

/// A process of the non-transactional store: server and initiator.
#[derive(Debug)]
pub struct NonTxProcess {
    cfg: KvConfig,
    gen: TxnGen,
    store: HashMap<Key, Value>,
    inflight: BTreeMap<u64, Pending>,
    seq: u64,
    started: bool,
    out: VecDeque<AppSend>,
    committed: VecDeque<Committed>,
    now: Instant,
    stats: KvStats,
}

impl NonTxProcess {
    /// A process; `gen` draws its transactions.
    pub fn new(cfg: KvConfig, gen: TxnGen) -> NonTxProcess {
        NonTxProcess {
            cfg,
            gen,
            store: HashMap::new(),
            inflight: BTreeMap::new(),
            seq: 0,
            started: false,
            out: VecDeque::new(),
            committed: VecDeque::new(),
            now: Instant(0),
            stats: KvStats::default(),
        }
    }

    fn fill_window(&mut self) {
        while self.started
            && self.now < self.cfg.stop
            && (self.inflight.len() as u32) < self.cfg.window
        {
            let txn = txn_id(self.cfg.me, self.seq);
            self.seq += 1;
            let ops = self.gen.next(txn);
            let mut parts: BTreeMap<u32, Vec<Op>> = BTreeMap::new();
            for op in &ops {
                parts
                    .entry(server_of(op.key(), self.cfg.servers))
                    .or_default()
                    .push(*op);
            }
            let waiting = parts.keys().copied().collect();
            self.out.push_back(AppSend {
                tag: txn,
                reliable: false,
                ordered: true,
                parts: parts
                    .into_iter()
                    .map(|(s, ops)| (ProcId(s), codec::encode_request(txn, &ops)))
                    .collect(),
            });
            self.inflight.insert(
                txn,
                Pending {
                    ops,
                    waiting,
                    reads: Vec::new(),
                    call: self.now,
                },
            );
        }
    }

    fn on_request(&mut self, src: ProcId, payload: &[u8]) {
        let Some(req) = codec::decode_request(payload) else {
            self.stats.malformed += 1;
            return;
        };
        let mut reads = Vec::new();
        for op in &req.ops {
            match *op {
                Op::Get(k) => {
                    reads.push((k, self.store.get(&k).copied()));
                    self.stats.reads += 1;
                }
                Op::Put(k, v) => {
                    self.store.insert(k, v);
                    self.stats.writes += 1;
                }
            }
        }
        self.out.push_back(AppSend {
            tag: super::REPLY_TAG,
            reliable: false,
            ordered: true,
            parts: vec![(src, codec::encode_reply(req.txn, 0, &reads))],
        });
    }

    fn on_reply(&mut self, src: ProcId, payload: &[u8]) {
        let Some(r) = codec::decode_reply(payload) else {
            self.stats.malformed += 1;
            return;
        };
        let Some(p) = self.inflight.get_mut(&r.txn) else {
            self.stats.stale_replies += 1;
            return;
        };
        let Some(i) = p.waiting.iter().position(|&s| s == src.0) else {
            self.stats.stale_replies += 1;
            return;
        };
        p.waiting.swap_remove(i);
        p.reads.extend(r.reads);
        if !p.waiting.is_empty() {
            return;
        }
        let p = self.inflight.remove(&r.txn).expect("in flight");
        let kind = TxnKind::of(&p.ops);
        match kind {
            TxnKind::ReadOnly => self.stats.committed_ro += 1,
            TxnKind::WriteOnly => self.stats.committed_wo += 1,
            TxnKind::ReadWrite => self.stats.committed_rw += 1,
        }
        self.committed.push_back(Committed {
            txn: r.txn,
            client: self.cfg.me.0,
            kind,
            ts: 0,
            reads: p.reads,
            writes: super::writes_of(&p.ops),
            call_ns: p.call.as_nanos(),
            return_ns: self.now.as_nanos(),
            attempts: 1,
        });
    }
}

impl App for NonTxProcess {
    fn handle(&mut self, now: Instant, input: AppInput<'_>) {
        self.now = self.now.max(now);
        match input {
            AppInput::Deliver { src, payload, .. } => {
                if codec::is_request(payload) {
                    self.on_request(src, payload);
                } else {
                    self.on_reply(src, payload);
                }
            }
            AppInput::Timeout if now >= self.cfg.start && self.cfg.window > 0 => {
                self.started = true;
            }
            _ => {}
        }
        self.fill_window();
    }

    fn poll_send(&mut self) -> Option<AppSend> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (!self.started && self.cfg.window > 0).then_some(self.cfg.start)
    }
}

impl TxnApp for NonTxProcess {
    fn poll_committed(&mut self) -> Option<Committed> {
        self.committed.pop_front()
    }
    fn stats(&self) -> &KvStats {
        &self.stats
    }
    fn idle(&self) -> bool {
        self.inflight.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::workload::KvWorkload;

    /// Delivers every send at once, in order: the store needs no more from the network.
    #[test]
    fn a_closed_loop_commits_what_it_sends() {
        let w = KvWorkload {
            keys: 10,
            ..KvWorkload::default()
        };
        let mut procs: Vec<NonTxProcess> = (0..3)
            .map(|p| {
                let cfg = KvConfig::new(ProcId(p), 3, w.clone(), 2);
                NonTxProcess::new(cfg, TxnGen::new(w.clone(), None, u64::from(p)))
            })
            .collect();
        let mut queue: VecDeque<(u32, ProcId, bytes::Bytes)> = VecDeque::new();
        for (p, app) in procs.iter_mut().enumerate() {
            app.handle(Instant(0), AppInput::Timeout);
            while let Some(s) = app.poll_send() {
                queue.extend(s.parts.into_iter().map(|(d, b)| (p as u32, d, b)));
            }
        }
        let mut steps = 0;
        while let Some((src, dst, b)) = queue.pop_front() {
            steps += 1;
            let now = Instant(steps);
            if steps > 3_000 {
                procs.iter_mut().for_each(|p| p.cfg.stop = Instant(0));
            }
            let app = &mut procs[dst.index()];
            let input = AppInput::Deliver {
                src: ProcId(src),
                ts: onepipe_proto::Timestamp::new(0),
                reliable: false,
                payload: &b,
            };
            app.handle(now, input);
            while let Some(s) = app.poll_send() {
                queue.extend(s.parts.into_iter().map(|(d, b)| (dst.0, d, b)));
            }
        }
        let committed: u64 = procs
            .iter()
            .map(|p| p.stats.committed_ro + p.stats.committed_wo + p.stats.committed_rw)
            .sum();
        assert!(committed > 500, "{committed}");
        assert!(procs.iter().all(TxnApp::idle));
    }
}
