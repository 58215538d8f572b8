//! The server of the replicated hash table: one-sided verbs applied to its memory and answered,
//! and (the leader-follower baseline) forwarding writes and successful CASes to the followers.
//! See the parent module for the design.

use super::*;

impl Server {
    /// Answers `dst`; on 1Pipe, keeps the reply for a loss report.
    pub(super) fn reply(&mut self, sh: &mut Shared, dst: ProcId, m: &Msg) {
        let tag = self.next_tag;
        self.next_tag += 1;
        let bytes = encode(m);
        sh.push(tag, &[dst], &bytes, false);
        if sh.onepipe() {
            if self.kept.len() >= KEPT_MAX {
                self.kept.pop_front();
            }
            self.kept.push_back(Kept {
                tag,
                ts: None,
                at: sh.now,
                dst,
                bytes,
            });
        }
    }

    pub(super) fn on_msg(&mut self, sh: &mut Shared, src: ProcId, m: Msg) {
        match m {
            Msg::ReadHead { op, bucket } => {
                let Some(head) = self.table.head(bucket) else {
                    sh.stats.malformed += 1;
                    return;
                };
                sh.stats.served += 1;
                self.reply(sh, src, &Msg::HeadIs { op, bucket, head });
            }
            Msg::ReadSlot { op, ptr } => {
                let Some(pair) = self.table.slot(ptr) else {
                    sh.stats.malformed += 1;
                    return;
                };
                sh.stats.served += 1;
                self.reply(sh, src, &Msg::SlotIs { op, ptr, pair });
            }
            Msg::Write { op, pair } => {
                if !self.table.write(pair) {
                    sh.stats.malformed += 1;
                    return;
                }
                sh.stats.served += 1;
                let done = Msg::WriteDone { op, ptr: pair.me };
                self.replicate_or_reply(sh, src, ReplCmd::Write(pair), done);
            }
            Msg::Cas {
                op,
                bucket,
                expect,
                new,
            } => {
                let Some(old) = self.table.cas(bucket, expect, new) else {
                    sh.stats.malformed += 1;
                    return;
                };
                sh.stats.served += 1;
                let done = Msg::CasDone {
                    op,
                    bucket,
                    new,
                    old,
                };
                if old == expect {
                    let cmd = ReplCmd::SetHead { bucket, head: new };
                    self.replicate_or_reply(sh, src, cmd, done);
                } else {
                    // Nothing changed: nothing to replicate.
                    self.reply(sh, src, &done);
                }
            }
            Msg::Repl { lseq, cmd } => self.on_repl(sh, src, lseq, cmd),
            Msg::ReplAck { lseq } => self.on_repl_ack(sh, src, lseq),
            Msg::HeadIs { .. }
            | Msg::SlotIs { .. }
            | Msg::WriteDone { .. }
            | Msg::CasDone { .. } => {
                sh.stats.malformed += 1;
            }
        }
    }

    /// A verb changed the table: a leader with followers forwards `cmd` and answers `client`
    /// once every follower applied it (the baseline's CPU path); anyone else answers now.
    pub(super) fn replicate_or_reply(
        &mut self,
        sh: &mut Shared,
        client: ProcId,
        cmd: ReplCmd,
        reply: Msg,
    ) {
        let ReplRole::Leader { next_lseq, waiting } = &mut self.repl else {
            return self.reply(sh, client, &reply);
        };
        let lseq = *next_lseq;
        *next_lseq += 1;
        waiting.insert(
            lseq,
            Waiting {
                client,
                reply,
                acked: 0,
            },
        );
        let l = &sh.cfg.layout;
        let followers: Vec<ProcId> = (1..l.replicas).map(|r| l.server(self.shard, r)).collect();
        sh.stats.replicated += followers.len() as u64;
        let tag = self.next_tag;
        self.next_tag += 1;
        sh.push(tag, &followers, &encode(&Msg::Repl { lseq, cmd }), true);
    }

    /// A follower applies its leader's commands in order, holding those ahead of a gap.
    pub(super) fn on_repl(&mut self, sh: &mut Shared, src: ProcId, lseq: u64, cmd: ReplCmd) {
        let leader = sh.cfg.layout.server(self.shard, 0);
        let ReplRole::Follower { next_lseq, early } = &mut self.repl else {
            sh.stats.malformed += 1;
            return;
        };
        if src != leader {
            sh.stats.malformed += 1;
            return;
        }
        if lseq < *next_lseq {
            // A copy: acknowledged again.
        } else if lseq > *next_lseq {
            if early.len() < EARLY_MAX {
                early.insert(lseq, cmd);
            } else {
                sh.stats.malformed += 1;
            }
            return;
        } else {
            let mut cmd = Some(cmd);
            while let Some(c) = cmd {
                let ok = match c {
                    ReplCmd::Write(pair) => self.table.write(pair),
                    ReplCmd::SetHead { bucket, head } => self.table.set_head(bucket, head),
                };
                if !ok {
                    sh.stats.malformed += 1;
                }
                *next_lseq += 1;
                cmd = early.remove(&*next_lseq);
            }
        }
        let upto = *next_lseq - 1;
        let tag = self.next_tag;
        self.next_tag += 1;
        sh.push(tag, &[leader], &encode(&Msg::ReplAck { lseq: upto }), true);
    }

    /// A follower applied everything up to `lseq`: what every follower applied is answered.
    pub(super) fn on_repl_ack(&mut self, sh: &mut Shared, src: ProcId, lseq: u64) {
        let l = sh.cfg.layout;
        let ReplRole::Leader { waiting, .. } = &mut self.repl else {
            sh.stats.malformed += 1;
            return;
        };
        let Role::Server { shard, replica } = l.role(src) else {
            sh.stats.malformed += 1;
            return;
        };
        if shard != self.shard || replica == 0 {
            sh.stats.malformed += 1;
            return;
        }
        let all = ((1u16 << l.replicas) - 2) as u8;
        let mut ready = Vec::new();
        for (&s, w) in waiting.range_mut(..=lseq) {
            w.acked |= 1 << replica;
            if w.acked == all {
                ready.push(s);
            }
        }
        let ready: Vec<Waiting> = ready.iter().filter_map(|s| waiting.remove(s)).collect();
        for w in ready {
            self.reply(sh, w.client, &w.reply);
        }
    }

    /// 1Pipe reported the reply stamped `ts` to `dst` lost: it goes again.
    pub(super) fn on_lost(&mut self, sh: &mut Shared, dst: ProcId, ts: u64) {
        let again: Vec<Bytes> = self
            .kept
            .iter()
            .filter(|k| k.ts == Some(ts) && k.dst == dst)
            .map(|k| k.bytes.clone())
            .collect();
        for bytes in again {
            sh.stats.resent += 1;
            let tag = self.next_tag;
            self.next_tag += 1;
            sh.push(tag, &[dst], &bytes, false);
            self.kept.push_back(Kept {
                tag,
                ts: None,
                at: sh.now,
                dst,
                bytes,
            });
        }
    }

    pub(super) fn prune(&mut self, now: Instant) {
        while self.kept.len() > KEPT_MAX
            || self.kept.front().is_some_and(|k| k.at.0 + KEEP_NS < now.0)
        {
            self.kept.pop_front();
        }
    }
}
