//! The client of the replicated hash table: inserts (write the pair, then swing the bucket head
//! with CAS) and lookups (the head, then the chain), their losses and retries. See the parent
//! module for the design.

use super::*;

impl Client {
    /// Sends `msg` to `dsts` for operation `op`; on 1Pipe, remembers it until `op` completes.
    /// Every verb goes in 1Pipe's order but a pair read: a lookup takes effect at its head read,
    /// and the pairs it then follows were written at that server before the head was read and
    /// are never written again, so reading them needs no order (a plain one-sided read).
    pub(super) fn send(&mut self, sh: &mut Shared, op: u64, dsts: &[ProcId], msg: Msg) {
        let tag = self.next_tag;
        self.next_tag += 1;
        let ordered = !matches!(msg, Msg::ReadSlot { .. });
        sh.push(tag, dsts, &encode(&msg), ordered);
        if sh.onepipe() {
            let rec = SendRec {
                op,
                ts: None,
                dsts: dsts.to_vec(),
                msg,
            };
            self.sends.insert(tag, rec);
        }
    }

    /// Every replica of `shard`.
    pub(super) fn replicas(sh: &Shared, shard: u32) -> Vec<ProcId> {
        let l = &sh.cfg.layout;
        (0..l.replicas).map(|r| l.server(shard, r)).collect()
    }

    /// Where writes go: every replica on 1Pipe, the leader on the baseline.
    pub(super) fn writers(sh: &Shared, shard: u32) -> Vec<ProcId> {
        match sh.cfg.mode {
            HtMode::OnePipe => Self::replicas(sh, shard),
            HtMode::Rdma => vec![sh.cfg.layout.server(shard, 0)],
        }
    }

    pub(super) fn fill_window(&mut self, sh: &mut Shared) {
        let now = sh.now;
        if now < sh.cfg.start || now >= sh.cfg.stop || self.exhausted {
            return;
        }
        while self.ops.len() < sh.cfg.window as usize {
            let key = self.rng.below(sh.cfg.workload.keys);
            let (shard, bucket) = sh.cfg.layout.place(key, sh.cfg.workload.buckets);
            let id = self.next_id;
            self.next_id += 1;
            if self.rng.chance(sh.cfg.workload.insert_share) {
                if !self.start_insert(sh, id, key, shard, bucket) {
                    self.exhausted = true;
                    sh.stats.abandoned += 1;
                    return;
                }
            } else {
                self.start_lookup(sh, id, key, shard, bucket);
            }
        }
    }

    /// Starts insert `id`; false if this client's region on the shard is full.
    pub(super) fn start_insert(
        &mut self,
        sh: &mut Shared,
        id: u64,
        key: Key,
        shard: u32,
        bucket: u32,
    ) -> bool {
        let slot = self.next_slot[shard as usize];
        if slot >= sh.cfg.region_slots_max.min(1 << 40) {
            return false;
        }
        self.next_slot[shard as usize] += 1;
        self.written += 1;
        let val = u64::from(sh.cfg.me.0) << 40 | self.written;
        let guess = self
            .heads
            .get(&(shard, bucket))
            .copied()
            .unwrap_or(Ptr::NIL);
        let ins = Insert {
            key,
            val,
            shard,
            bucket,
            ptr: Ptr::new((self.index + 1) as u16, slot, 1),
            guess,
            call: sh.now,
            phase: InsertPhase::Fence,
        };
        self.ops.insert(
            id,
            Op {
                kind: OpKind::Insert(ins),
                resends: 0,
            },
        );
        self.send_attempt(sh, id);
        true
    }

    /// Sends the current attempt of insert `id`: on 1Pipe the write and the CAS back to back,
    /// on the baseline the write alone (the CAS waits for its completion).
    pub(super) fn send_attempt(&mut self, sh: &mut Shared, id: u64) {
        let Some(Op {
            kind: OpKind::Insert(ins),
            ..
        }) = self.ops.get_mut(&id)
        else {
            return;
        };
        let write = Msg::Write {
            op: id,
            pair: Pair {
                key: ins.key,
                val: ins.val,
                next: ins.guess,
                me: ins.ptr,
            },
        };
        let cas = Msg::Cas {
            op: id,
            bucket: ins.bucket,
            expect: ins.guess,
            new: ins.ptr,
        };
        let dsts = Self::writers(sh, ins.shard);
        if sh.onepipe() {
            // §2.2.1: no fence — 1Pipe delivers the CAS after the write at every replica.
            ins.phase = InsertPhase::Together {
                written: 0,
                cas: [None; REPLICAS_MAX as usize],
            };
            self.send(sh, id, &dsts, write);
            self.send(sh, id, &dsts, cas);
        } else {
            ins.phase = InsertPhase::Fence;
            self.send(sh, id, &dsts, write);
        }
    }

    pub(super) fn start_lookup(
        &mut self,
        sh: &mut Shared,
        id: u64,
        key: Key,
        shard: u32,
        bucket: u32,
    ) {
        let replica = match sh.cfg.mode {
            // Any replica serves a lookup, in timestamp order.
            HtMode::OnePipe => self.rng.below(u64::from(sh.cfg.layout.replicas)) as u32,
            // Leader-follower: only the leader.
            HtMode::Rdma => 0,
        };
        let l = Lookup {
            key,
            shard,
            bucket,
            replica,
            call: sh.now,
            steps: 0,
            waits: 0,
            phase: LookupPhase::Head,
        };
        self.ops.insert(
            id,
            Op {
                kind: OpKind::Lookup(l),
                resends: 0,
            },
        );
        sh.stats.head_reads += 1;
        let dst = sh.cfg.layout.server(shard, replica);
        self.send(sh, id, &[dst], Msg::ReadHead { op: id, bucket });
    }

    pub(super) fn read_slot(&mut self, sh: &mut Shared, id: u64, l: &mut Lookup, ptr: Ptr) {
        l.steps += 1;
        l.phase = LookupPhase::Slot(ptr);
        sh.stats.slot_reads += 1;
        let dst = sh.cfg.layout.server(l.shard, l.replica);
        self.send(sh, id, &[dst], Msg::ReadSlot { op: id, ptr });
    }

    pub(super) fn remember_head(&mut self, shard: u32, bucket: u32, head: Ptr) {
        if self.heads.len() < HEAD_CACHE_MAX || self.heads.contains_key(&(shard, bucket)) {
            self.heads.insert((shard, bucket), head);
        }
    }

    /// Operation `id` is over: it leaves the window with its sends and timers.
    pub(super) fn close(&mut self, id: u64) -> Option<Op> {
        let op = self.ops.remove(&id)?;
        if !self.sends.is_empty() {
            self.sends.retain(|_, r| r.op != id);
        }
        if let OpKind::Lookup(Lookup {
            phase: LookupPhase::Wait(_),
            ..
        }) = op.kind
        {
            self.timers.retain(|&(_, o)| o != id);
        }
        Some(op)
    }

    pub(super) fn finish(&mut self, sh: &mut Shared, id: u64, output: Option<Val>) {
        let Some(op) = self.close(id) else { return };
        let (cmd, call) = match op.kind {
            OpKind::Insert(i) => {
                sh.stats.inserts += 1;
                self.remember_head(i.shard, i.bucket, i.ptr);
                (Cmd::Put(i.key, i.val), i.call)
            }
            OpKind::Lookup(l) => {
                sh.stats.lookups += 1;
                (Cmd::Get(l.key), l.call)
            }
        };
        self.done.push_back(ReplDone {
            client: sh.cfg.me.0,
            id,
            cmd,
            output,
            call_ns: call.0,
            return_ns: sh.now.0,
        });
    }

    /// Gives operation `id` up: an insert may or may not have taken effect.
    pub(super) fn abandon(&mut self, sh: &mut Shared, id: u64) {
        let Some(op) = self.close(id) else { return };
        sh.stats.abandoned += 1;
        if let OpKind::Insert(i) = op.kind {
            self.abandoned.push(MaybeOp {
                client: sh.cfg.me.0,
                id,
                cmd: Cmd::Put(i.key, i.val),
                call_ns: i.call.0,
            });
        }
    }

    pub(super) fn on_msg(&mut self, sh: &mut Shared, src: ProcId, m: Msg) {
        let Role::Server { shard, replica } = sh.cfg.layout.role(src) else {
            sh.stats.malformed += 1;
            return;
        };
        let op = match m {
            Msg::HeadIs { op, .. }
            | Msg::SlotIs { op, .. }
            | Msg::WriteDone { op, .. }
            | Msg::CasDone { op, .. } => op,
            _ => {
                sh.stats.malformed += 1;
                return;
            }
        };
        // A reply to an operation already over (a reply sent again) is ignored.
        let Some(&Op { kind, .. }) = self.ops.get(&op) else {
            return;
        };
        match kind {
            OpKind::Lookup(mut l) if l.shard == shard && l.replica == replica => {
                self.on_lookup_reply(sh, op, &mut l, m);
                if let Some(o) = self.ops.get_mut(&op) {
                    o.kind = OpKind::Lookup(l);
                }
            }
            OpKind::Insert(mut i) if i.shard == shard => {
                self.on_insert_reply(sh, op, &mut i, replica, m);
                if let Some(o) = self.ops.get_mut(&op) {
                    o.kind = OpKind::Insert(i);
                }
            }
            _ => sh.stats.malformed += 1,
        }
    }

    /// A lookup walks its chain: the head, then pair after pair until its key or the end.
    pub(super) fn on_lookup_reply(&mut self, sh: &mut Shared, id: u64, l: &mut Lookup, m: Msg) {
        match (l.phase, m) {
            (LookupPhase::Head, Msg::HeadIs { bucket, head, .. }) if bucket == l.bucket => {
                self.remember_head(l.shard, l.bucket, head);
                if head.is_nil() {
                    self.finish(sh, id, None);
                } else {
                    self.read_slot(sh, id, l, head);
                }
            }
            (LookupPhase::Slot(p), Msg::SlotIs { ptr, pair, .. }) if ptr == p => match pair {
                Some(pair) if pair.me == p => {
                    if pair.key == l.key {
                        self.finish(sh, id, Some(pair.val));
                    } else if pair.next.is_nil() {
                        self.finish(sh, id, None);
                    } else if l.steps >= CHAIN_STEPS_MAX {
                        self.abandon(sh, id);
                    } else {
                        self.read_slot(sh, id, l, pair.next);
                    }
                }
                _ => {
                    // Linked, but its write has not reached this server (it was lost and is
                    // being sent again): read again shortly.
                    sh.stats.not_written += 1;
                    l.phase = LookupPhase::Wait(p);
                    let wait = sh.cfg.retry_ns << l.waits.min(5);
                    l.waits += 1;
                    self.timers.insert((sh.now + wait, id));
                }
            },
            // A stale or repeated reply.
            _ => {}
        }
    }

    pub(super) fn on_insert_reply(
        &mut self,
        sh: &mut Shared,
        id: u64,
        i: &mut Insert,
        replica: u32,
        m: Msg,
    ) {
        let bit = 1u8 << replica;
        match (&mut i.phase, m) {
            (InsertPhase::Together { written, .. }, Msg::WriteDone { ptr, .. }) if ptr == i.ptr => {
                *written |= bit;
            }
            (
                InsertPhase::Together { cas, .. },
                Msg::CasDone {
                    new, old, bucket, ..
                },
            ) if new == i.ptr && bucket == i.bucket => {
                cas[replica as usize] = Some(old);
            }
            (InsertPhase::Fence, Msg::WriteDone { ptr, .. }) if ptr == i.ptr => {
                // The fence is passed: the pair is written (and replicated); swing the head.
                i.phase = InsertPhase::Swing;
                let cas = Msg::Cas {
                    op: id,
                    bucket: i.bucket,
                    expect: i.guess,
                    new: i.ptr,
                };
                let leader = sh.cfg.layout.server(i.shard, 0);
                self.send(sh, id, &[leader], cas);
                return;
            }
            (
                InsertPhase::Swing,
                Msg::CasDone {
                    new, old, bucket, ..
                },
            ) if new == i.ptr && bucket == i.bucket => {
                return self.resolve(sh, id, i, old);
            }
            _ => return,
        }
        // 1Pipe: done when every replica completed the write and answered the CAS.
        let n = sh.cfg.layout.replicas as usize;
        let InsertPhase::Together { written, cas } = i.phase else {
            return;
        };
        if written.count_ones() as usize != n || cas[..n].iter().any(Option::is_none) {
            return;
        }
        let first = cas[0].expect("every answer is in");
        if cas[..n].iter().all(|&c| c == Some(first)) {
            self.resolve(sh, id, i, first);
        } else {
            // Replicas decided differently: only a loss this design does not repair does that.
            sh.stats.unrepaired += 1;
            self.abandon(sh, id);
        }
    }

    /// The CAS of insert `id`'s current attempt found `old`: done if it swapped (or found this
    /// very pair already linked), else the next attempt points at `old`.
    pub(super) fn resolve(&mut self, sh: &mut Shared, id: u64, i: &mut Insert, old: Ptr) {
        if old == i.guess || old == i.ptr {
            return self.finish(sh, id, None);
        }
        sh.stats.cas_failed += 1;
        self.remember_head(i.shard, i.bucket, old);
        if i.ptr.attempt() == ATTEMPTS_MAX {
            return self.abandon(sh, id);
        }
        i.ptr = Ptr::new(i.ptr.region(), i.ptr.slot(), i.ptr.attempt() + 1);
        i.guess = old;
        if let Some(o) = self.ops.get_mut(&id) {
            o.kind = OpKind::Insert(*i);
        }
        self.send_attempt(sh, id);
        if let Some(Op {
            kind: OpKind::Insert(now),
            ..
        }) = self.ops.get(&id)
        {
            *i = *now;
        }
    }

    /// 1Pipe reported the send stamped `ts` lost to `dst` (§2.1): what it carried goes again.
    pub(super) fn on_lost(&mut self, sh: &mut Shared, dst: ProcId, ts: u64) {
        let lost: Vec<(u64, SendRec)> = self
            .sends
            .iter()
            .filter(|(_, r)| r.ts == Some(ts) && r.dsts.contains(&dst))
            .map(|(&t, r)| (t, r.clone()))
            .collect();
        for (tag, rec) in lost {
            if let Some(r) = self.sends.get_mut(&tag) {
                r.dsts.retain(|&d| d != dst);
                if r.dsts.is_empty() {
                    self.sends.remove(&tag);
                }
            }
            self.send_again(sh, dst, rec);
        }
    }

    pub(super) fn send_again(&mut self, sh: &mut Shared, dst: ProcId, rec: SendRec) {
        let Some(op) = self.ops.get_mut(&rec.op) else {
            return;
        };
        op.resends += 1;
        if op.resends > RESENDS_MAX {
            return self.abandon(sh, rec.op);
        }
        let msg = match (rec.msg, op.kind) {
            // A write goes again with the pair's current content (never older than the lost).
            (Msg::Write { .. }, OpKind::Insert(i)) => Msg::Write {
                op: rec.op,
                pair: Pair {
                    key: i.key,
                    val: i.val,
                    next: i.guess,
                    me: i.ptr,
                },
            },
            // A CAS lost to one of several replicas: the others applied it at its timestamp;
            // sent again it would be ordered elsewhere here, and the replicas could decide
            // differently. Not repaired (see the module docs).
            (Msg::Cas { .. }, _) if sh.cfg.layout.replicas > 1 => {
                sh.stats.unrepaired += 1;
                return self.abandon(sh, rec.op);
            }
            (m, _) => m,
        };
        sh.stats.resent += 1;
        self.send(sh, rec.op, &[dst], msg);
    }

    pub(super) fn on_timeout(&mut self, sh: &mut Shared) {
        while let Some(&(at, id)) = self.timers.first() {
            if at > sh.now {
                break;
            }
            self.timers.pop_first();
            let Some(Op {
                kind: OpKind::Lookup(mut l),
                ..
            }) = self.ops.get(&id).copied()
            else {
                continue;
            };
            if let LookupPhase::Wait(p) = l.phase {
                l.steps -= 1;
                self.read_slot(sh, id, &mut l, p);
                if let Some(o) = self.ops.get_mut(&id) {
                    o.kind = OpKind::Lookup(l);
                }
            }
        }
    }
}
