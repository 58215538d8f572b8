//! Primary-backup replication in a chain, as Ceph's OSDs do it (§7.3.4): the client sends a
//! write to the primary (replica 0), which writes it to its disk and passes it to the first
//! backup, which writes it and passes it on; the last backup acknowledges back along the chain,
//! and the primary answers the client. With 3 replicas a write waits for 3 disk writes and 6
//! messages in sequence — what 1-RTT replication cuts to one disk write and one round trip.
//! Reads are served by the primary from its state.
//!
//! It runs on direct messages and is the latency baseline of `bench replication`; it does not
//! handle failures (no failover of the primary, no chain repair).

use super::lincheck::MaybeOp;
use super::{
    Cmd, CmdGen, Disk, KvMachine, ReplApp, ReplConfig, ReplDone, ReplStats, ReplicaLog, Val,
};
use crate::repl::onertt::chain as checksum_chain;
use crate::wire::{Reader, Writer};
use crate::{App, AppInput, AppSend};
use bytes::Bytes;
use onepipe_proto::{Instant, ProcId};
use std::collections::{BTreeMap, VecDeque};

/// A message of the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Msg {
    /// Client → primary.
    Request { id: u64, cmd: Cmd, pad: u32 },
    /// Down the chain: the primary's `seq`th write.
    Forward {
        seq: u64,
        client: u32,
        id: u64,
        cmd: Cmd,
        output: Option<Val>,
        pad: u32,
    },
    /// Up the chain: write `seq` is on every replica from the sender on.
    Back { seq: u64 },
    /// Primary → client.
    Reply { id: u64, output: Option<Val> },
}

fn encode(m: &Msg) -> Bytes {
    let mut w = Writer::with_capacity(48);
    let pad = match *m {
        Msg::Request { id, cmd, pad } => {
            w.u8(1).u64(id).cmd(&cmd).u32(pad);
            pad
        }
        Msg::Forward {
            seq,
            client,
            id,
            cmd,
            output,
            pad,
        } => {
            w.u8(2)
                .u64(seq)
                .u32(client)
                .u64(id)
                .cmd(&cmd)
                .opt(output)
                .u32(pad);
            pad
        }
        Msg::Back { seq } => {
            w.u8(3).u64(seq);
            0
        }
        Msg::Reply { id, output } => {
            w.u8(4).u64(id).opt(output);
            0
        }
    };
    w.zeros(pad as usize);
    Bytes::from(w.0)
}

fn decode(buf: &[u8]) -> Option<Msg> {
    let mut r = Reader::new(buf);
    let (m, pad) = match r.u8()? {
        1 => {
            let (id, cmd, pad) = (r.u64()?, r.repl_cmd()?, r.u32()?);
            (Msg::Request { id, cmd, pad }, pad)
        }
        2 => {
            let (seq, client, id, cmd) = (r.u64()?, r.u32()?, r.u64()?, r.repl_cmd()?);
            let (output, pad) = (r.repl_opt()?, r.u32()?);
            let m = Msg::Forward {
                seq,
                client,
                id,
                cmd,
                output,
                pad,
            };
            (m, pad)
        }
        3 => (Msg::Back { seq: r.u64()? }, 0),
        4 => (
            Msg::Reply {
                id: r.u64()?,
                output: r.repl_opt()?,
            },
            0,
        ),
        _ => return None,
    };
    r.finish_with(u64::from(pad))?;
    Some(m)
}

/// A write a replica holds until the rest of the chain has it.
#[derive(Clone, Copy, Debug)]
struct Held {
    client: u32,
    id: u64,
    output: Option<Val>,
}

/// A process of the chain: a replica (`me < replicas`; 0 is the primary), a client, or both.
#[derive(Debug)]
pub struct ChainProcess {
    cfg: ReplConfig,
    gen: CmdGen,
    state: KvMachine,
    disk: Disk,
    /// Primary: the next write's number. Backups: the next one to take.
    next_seq: u64,
    /// Backups: writes that came ahead of their turn.
    early: BTreeMap<u64, Msg>,
    /// Writes on their way to this replica's disk: (done at, seq, message to pass on).
    disk_queue: VecDeque<(Instant, u64, Msg)>,
    /// Writes waiting for the rest of the chain.
    held: BTreeMap<u64, Held>,
    log: Vec<(u32, u64, u64)>,
    /// Client: operations in flight.
    inflight: BTreeMap<u64, (Cmd, Instant)>,
    next_id: u64,
    done: VecDeque<ReplDone>,
    out: VecDeque<AppSend>,
    now: Instant,
    stats: ReplStats,
}

impl ChainProcess {
    /// A process of `cfg`; `gen` draws its commands if it is a client; `seed` its disk's jitter.
    pub fn new(cfg: ReplConfig, gen: CmdGen, seed: u64) -> ChainProcess {
        ChainProcess {
            disk: Disk::new(cfg.disk, seed),
            cfg,
            gen,
            state: KvMachine::default(),
            next_seq: 0,
            early: BTreeMap::new(),
            disk_queue: VecDeque::new(),
            held: BTreeMap::new(),
            log: Vec::new(),
            inflight: BTreeMap::new(),
            next_id: 0,
            done: VecDeque::new(),
            out: VecDeque::new(),
            now: Instant(0),
            stats: ReplStats::default(),
        }
    }

    fn send(&mut self, dst: u32, m: &Msg) {
        self.out.push_back(AppSend {
            tag: 0,
            reliable: true,
            ordered: true,
            parts: vec![(ProcId(dst), encode(m))],
        });
    }

    fn fill_window(&mut self) {
        let pad = self.cfg.workload.value_size;
        while self.now >= self.cfg.start
            && self.now < self.cfg.stop
            && (self.inflight.len() as u32) < self.cfg.window
        {
            let cmd = self.gen.next_cmd();
            let id = self.next_id;
            self.next_id += 1;
            self.inflight.insert(id, (cmd, self.now));
            let pad = if cmd.is_write() { pad } else { 0 };
            self.send(0, &Msg::Request { id, cmd, pad });
        }
    }

    /// Applies write `seq` here and sends it to this replica's disk.
    fn take_write(&mut self, seq: u64, m: Msg) {
        let Msg::Forward {
            client,
            id,
            cmd,
            output,
            ..
        } = m
        else {
            return;
        };
        let out = self.state.apply(&cmd);
        let output = if self.cfg.me.0 == 0 { out } else { output };
        let prev = self.log.last().map_or(0, |e| e.2);
        self.log
            .push((client, id, checksum_chain(prev, seq, client, id)));
        self.stats.appended += 1;
        let m = match m {
            Msg::Forward { .. } => Msg::Forward {
                seq,
                client,
                id,
                cmd,
                output,
                pad: self.cfg.workload.value_size,
            },
            other => other,
        };
        let at = self.disk.write(self.now);
        self.held.insert(seq, Held { client, id, output });
        self.disk_queue.push_back((at, seq, m));
        self.drain_disk();
    }

    /// Writes whose disk write is done go down the chain, or (the last replica) back up.
    fn drain_disk(&mut self) {
        while self
            .disk_queue
            .front()
            .is_some_and(|(t, ..)| *t <= self.now)
        {
            let Some((_, seq, m)) = self.disk_queue.pop_front() else {
                break;
            };
            let me = self.cfg.me.0;
            if me + 1 < self.cfg.replicas {
                self.send(me + 1, &m);
            } else {
                self.back(seq);
            }
        }
    }

    /// Write `seq` is on every replica from this one on.
    fn back(&mut self, seq: u64) {
        let Some(h) = self.held.remove(&seq) else {
            return;
        };
        let me = self.cfg.me.0;
        if me == 0 {
            let m = Msg::Reply {
                id: h.id,
                output: h.output,
            };
            self.send(h.client, &m);
        } else {
            self.send(me - 1, &Msg::Back { seq });
        }
    }

    fn on_msg(&mut self, src: ProcId, m: Msg) {
        let me = self.cfg.me.0;
        match m {
            Msg::Request { id, cmd, pad } if me == 0 => {
                if let Cmd::Get(_) = cmd {
                    let output = self.state.apply(&cmd);
                    self.send(src.0, &Msg::Reply { id, output });
                    return;
                }
                let seq = self.next_seq;
                self.next_seq += 1;
                let m = Msg::Forward {
                    seq,
                    client: src.0,
                    id,
                    cmd,
                    output: None,
                    pad,
                };
                self.take_write(seq, m);
            }
            Msg::Forward { seq, .. } if me > 0 && me < self.cfg.replicas => {
                if seq < self.next_seq {
                    self.stats.duplicates += 1;
                    return;
                }
                self.early.insert(seq, m);
                while let Some(m) = self.early.remove(&self.next_seq) {
                    let seq = self.next_seq;
                    self.next_seq += 1;
                    self.take_write(seq, m);
                }
            }
            Msg::Back { seq } if me + 1 < self.cfg.replicas && src.0 == me + 1 => self.back(seq),
            Msg::Reply { id, output } => {
                let Some((cmd, call)) = self.inflight.remove(&id) else {
                    return;
                };
                self.gen.observe(&cmd, output);
                match cmd {
                    Cmd::Get(_) => self.stats.gets += 1,
                    Cmd::Put(..) => self.stats.puts += 1,
                    Cmd::Cas { .. } => self.stats.cas += 1,
                }
                self.done.push_back(ReplDone {
                    client: me,
                    id,
                    cmd,
                    output,
                    call_ns: call.0,
                    return_ns: self.now.0,
                });
            }
            _ => self.stats.malformed += 1,
        }
    }
}

impl App for ChainProcess {
    fn handle(&mut self, now: Instant, input: AppInput<'_>) {
        self.now = self.now.max(now);
        if let AppInput::Deliver { src, payload, .. } = input {
            match decode(payload) {
                Some(m) => self.on_msg(src, m),
                None => self.stats.malformed += 1,
            }
        }
        self.drain_disk();
        self.fill_window();
    }
    fn poll_send(&mut self) -> Option<AppSend> {
        self.out.pop_front()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        let disk = self.disk_queue.front().map(|(t, ..)| *t);
        let start = (self.cfg.window > 0 && self.now < self.cfg.start).then_some(self.cfg.start);
        disk.into_iter().chain(start).min()
    }
}

impl ReplApp for ChainProcess {
    fn poll_done(&mut self) -> Option<ReplDone> {
        self.done.pop_front()
    }
    fn stats(&self) -> &ReplStats {
        &self.stats
    }
    fn idle(&self) -> bool {
        self.inflight.is_empty()
    }
    fn open_writes(&self) -> Vec<MaybeOp> {
        let me = self.cfg.me.0;
        self.inflight
            .iter()
            .filter(|(_, (c, _))| c.is_write())
            .map(|(&id, &(cmd, call))| MaybeOp {
                client: me,
                id,
                cmd,
                call_ns: call.0,
            })
            .collect()
    }
    fn replica_log(&self) -> Option<ReplicaLog> {
        self.cfg.is_replica().then(|| ReplicaLog {
            replica: self.cfg.me.0,
            start: 0,
            commit: self.log.len() as u64,
            entries: self.log.clone(),
            committed_writes: self.log.iter().map(|e| (e.0, e.1)).collect(),
            committed_cmds: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repl::ReplWorkload;
    use onepipe_proto::Timestamp;
    use onepipe_testalloc::fuzz::{self, ensure, Bound};

    /// Runs 3 replicas and 2 clients with every message taking `delay`, a disk of `disk_ns`.
    fn run(disk_ns: u64) -> (Vec<ChainProcess>, Vec<ReplDone>) {
        let w = ReplWorkload {
            keys: 4,
            ..ReplWorkload::default()
        };
        let mut procs: Vec<ChainProcess> = (0..5)
            .map(|p| {
                let mut c = ReplConfig::new(ProcId(p), 3, 5, w.clone(), if p >= 3 { 2 } else { 0 });
                c.stop = Instant(1_000_000);
                c.disk.write_ns = disk_ns;
                ChainProcess::new(c, CmdGen::new(w.clone(), p, u64::from(p)), 1)
            })
            .collect();
        let delay = 1_000;
        let mut q: BTreeMap<(u64, u64), (u32, u32, Bytes)> = BTreeMap::new();
        let mut n = 0;
        let mut done = Vec::new();
        let mut now = 0;
        for p in procs.iter_mut() {
            p.handle(Instant(0), AppInput::Timeout);
        }
        loop {
            for (p, x) in procs.iter_mut().enumerate() {
                while let Some(s) = x.poll_send() {
                    for (dst, b) in s.parts {
                        n += 1;
                        q.insert((now + delay, n), (p as u32, dst.0, b));
                    }
                }
                done.extend(std::iter::from_fn(|| x.poll_done()));
            }
            let timer = procs
                .iter()
                .filter_map(|p| p.poll_timeout())
                .map(|t| t.0)
                .min();
            let next = q.keys().next().map(|k| k.0);
            let t = match (timer, next) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            now = now.max(t);
            if next == Some(t) {
                let (&k, _) = q.iter().next().expect("a message");
                let (src, dst, b) = q.remove(&k).expect("a message");
                let input = AppInput::Deliver {
                    src: ProcId(src),
                    ts: Timestamp::new(now),
                    reliable: true,
                    payload: &b,
                };
                procs[dst as usize].handle(Instant(now), input);
            } else {
                for p in procs.iter_mut() {
                    if p.poll_timeout().is_some_and(|x| x.0 <= now) {
                        p.handle(Instant(now), AppInput::Timeout);
                    }
                }
            }
        }
        (procs, done)
    }

    #[test]
    fn a_write_waits_for_every_disk_and_six_messages() {
        let (procs, done) = run(10_000);
        assert!(done.len() > 50);
        let logs: Vec<ReplicaLog> = procs.iter().filter_map(|p| p.replica_log()).collect();
        assert_eq!(logs.len(), 3);
        assert!(logs.iter().all(|l| l.entries == logs[0].entries));
        for d in &done {
            let lat = d.return_ns - d.call_ns;
            if d.cmd.is_write() {
                assert!(lat >= 3 * 10_000 + 6 * 1_000, "{d:?}");
            } else {
                assert_eq!(lat, 2 * 1_000, "{d:?}");
            }
        }
        // Outputs are a replay of the primary's log.
        let mut m = KvMachine::default();
        let cmds: BTreeMap<(u32, u64), &ReplDone> =
            done.iter().map(|d| ((d.client, d.id), d)).collect();
        for (c, id, _) in &logs[0].entries {
            let d = cmds[&(*c, *id)];
            assert_eq!(m.apply(&d.cmd), d.output, "{d:?}");
        }
    }

    fn fuzz_cmd(rng: &mut fuzz::Rng) -> Cmd {
        let (key, v) = (rng.interesting(), rng.interesting());
        match rng.below(3) {
            0 => Cmd::Get(key),
            1 => Cmd::Put(key, v),
            _ => Cmd::Cas {
                key,
                expect: rng.bool().then(|| rng.interesting()),
                new: v,
            },
        }
    }

    /// Any message the encoder can write (paddings up to 2 KiB).
    fn fuzz_msg(rng: &mut fuzz::Rng) -> Msg {
        let (a, b) = (rng.interesting(), rng.interesting());
        let pad = rng.len(2048) as u32;
        match rng.below(4) {
            0 => Msg::Request {
                id: a,
                cmd: fuzz_cmd(rng),
                pad,
            },
            1 => Msg::Forward {
                seq: a,
                client: rng.u32(),
                id: b,
                cmd: fuzz_cmd(rng),
                output: rng.bool().then(|| rng.interesting()),
                pad,
            },
            2 => Msg::Back { seq: a },
            _ => Msg::Reply {
                id: a,
                output: rng.bool().then_some(b),
            },
        }
    }

    /// Messages are plain values (the padding is skipped, not kept): a decode allocates
    /// nothing at all.
    #[test]
    fn decode_never_panics_nor_allocates_on_random_and_mutated_input() {
        fuzz::decoder(
            "repl::chain::decode",
            Bound::NOTHING,
            |rng| {
                let m = fuzz_msg(rng);
                (m, encode(&m).to_vec())
            },
            decode,
            // Padding is opaque (its length is kept, not its bytes): a decoded message
            // re-encodes to its length and decodes to itself.
            |bytes, got, valid| match (got, valid) {
                (got, Some(want)) => ensure(got.as_ref() == Some(want), || "no round trip".into()),
                (Some(m), None) => {
                    let again = encode(m);
                    ensure(
                        again.len() == bytes.len() && decode(&again).as_ref() == Some(m),
                        || "does not re-encode to itself".into(),
                    )
                }
                (None, None) => Ok(()),
            },
        );
    }

    #[test]
    fn garbage_is_counted() {
        let w = ReplWorkload::default();
        let mut p = ChainProcess::new(
            ReplConfig::new(ProcId(0), 3, 4, w.clone(), 0),
            CmdGen::new(w, 0, 0),
            0,
        );
        for b in [&[][..], &[9, 1, 2], &[1, 0, 0], &[2; 40]] {
            p.handle(
                Instant(1),
                AppInput::Deliver {
                    src: ProcId(3),
                    ts: Timestamp::new(1),
                    reliable: true,
                    payload: b,
                },
            );
        }
        assert_eq!(p.stats().malformed, 4);
    }
}
