//! The replica's part of a 1-RTT process (§2.2.2) in the normal case: it appends its clients'
//! entries in delivery order and acknowledges them with the log's checksum, answers reads at
//! their timestamps once the entries before them are committed, takes commit points, and runs
//! its watchdog and delayed Acks on its timer. What it is not: the recovery round that replaces
//! a view (`recovery.rs`).

use super::*;

impl OneRttProcess {
    pub(super) fn end(r: &Replica) -> u64 {
        r.log_start + r.log.len() as u64
    }

    fn last_checksum(r: &Replica) -> u64 {
        r.log.back().map_or(r.base_checksum, |e| e.checksum)
    }

    pub(super) fn view_for(r: &Replica, client: u32) -> Msg {
        Msg::View {
            epoch: r.epoch,
            members: r.members,
            next_seq: r.next_seq.get(&client).copied().unwrap_or(0),
        }
    }

    /// A message `m` to the replica from `src`, stamped `ts` (`payload` as delivered).
    pub(super) fn replica_msg(&mut self, src: ProcId, ts: u64, payload: &[u8], m: Msg) {
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        match m {
            Msg::Entry {
                epoch,
                seq,
                id,
                cmd,
                pad,
                commit,
            } => {
                let e = WireEntry {
                    ts,
                    client: src.0,
                    seq,
                    id,
                    cmd,
                    pad,
                };
                self.on_entry(src, payload, epoch, commit, e);
            }
            Msg::AckAgain { epoch, seq } => self.on_ack_again(src, epoch, seq),
            Msg::Commit { epoch, upto } => {
                if epoch == r.epoch && r.frozen_since.is_none() {
                    self.advance_commit(upto);
                }
            }
            Msg::Read { rid, key } => self.on_read(src, rid, key),
            Msg::Recover { epoch } => {
                if epoch < r.epoch {
                    let v = Self::view_for(r, src.0);
                    self.send(OTHER_TAG, [src.0].into_iter(), &v);
                } else if epoch == r.epoch {
                    self.want_recovery();
                }
            }
            Msg::Prepare { epoch, ballot } => self.on_prepare(src, epoch, ballot),
            Msg::Promise {
                epoch,
                ballot,
                accepted,
                commit,
                tail,
            } => self.on_promise(src.0, epoch, ballot, accepted, commit, tail),
            Msg::Accept { ballot, value } => self.on_accept(src, ballot, value),
            Msg::Accepted { epoch, ballot } => self.on_accepted(src.0, epoch, ballot),
            Msg::Decide { value } => self.install(value),
            _ => self.stats.malformed += 1,
        }
    }

    /// Client `src` misses this replica's Ack of its entry `seq` of `epoch`: the Ack again if
    /// the entry is in the log, else a Reject.
    fn on_ack_again(&mut self, src: ProcId, epoch: u64, seq: u64) {
        if !self.takes_client_msg(src, epoch) {
            return;
        }
        let Some(r) = self.replica.as_ref() else {
            return;
        };
        let expected = r.next_seq.get(&src.0).copied().unwrap_or(0);
        if seq < expected {
            self.ack_again(src, seq);
        } else {
            // Not in the log: it was lost (or rejected), as 1Pipe delivers the entry,
            // stamped earlier, before this request.
            let m = Msg::Reject {
                epoch,
                seq,
                expected,
            };
            self.send(OTHER_TAG, [src.0].into_iter(), &m);
        }
    }

    /// Client `src`'s read `rid` of `key`: evaluated now, answered once every entry before it
    /// is committed; refused while frozen or out of the view.
    fn on_read(&mut self, src: ProcId, rid: u64, key: Key) {
        let me = self.cfg.me.0;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        r.clients.insert(src.0);
        if r.frozen_since.is_some() || r.members & (1 << me) == 0 {
            let m = Msg::ReadReply {
                rid,
                ok: false,
                value: None,
            };
            self.send(OTHER_TAG, [src.0].into_iter(), &m);
            return;
        }
        // Evaluated at its timestamp: after every entry delivered before it.
        let p = Parked {
            pos: Self::end(r),
            client: src,
            rid,
            value: r.spec.get(key),
        };
        if r.commit >= p.pos {
            self.answer_read(p, true);
        } else {
            r.parked.push_back(p);
        }
    }

    /// Whether this replica takes a client's `Entry` or `AckAgain` of epoch `epoch`: only in its
    /// own epoch, not frozen for a recovery, and as a member of the view. A client behind by an
    /// epoch is sent the current view instead.
    fn takes_client_msg(&mut self, src: ProcId, epoch: u64) -> bool {
        let me = self.cfg.me.0;
        let Some(r) = self.replica.as_ref() else {
            return false;
        };
        if epoch < r.epoch {
            let v = Self::view_for(r, src.0);
            self.send(OTHER_TAG, [src.0].into_iter(), &v);
            return false;
        }
        epoch == r.epoch && r.frozen_since.is_none() && r.members & (1 << me) != 0
    }

    /// An entry `e` of epoch `epoch` from its client `src` (`payload` as delivered), carrying
    /// the client's commit point `commit`.
    fn on_entry(&mut self, src: ProcId, payload: &[u8], epoch: u64, commit: u64, e: WireEntry) {
        let now = self.now;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        if epoch == r.epoch + 1 && r.early.len() < EARLY_MAX {
            // The next epoch's, before this replica installed it: held, then taken in the
            // order 1Pipe delivered them.
            r.early.push((src, e.ts, Bytes::copy_from_slice(payload)));
            return;
        }
        if !self.takes_client_msg(src, epoch) {
            return;
        }
        // §2.2.2, piggybacked: the client's commit point, true whatever becomes of this entry
        // (it holds only positions every replica of the view acknowledged, this one included,
        // before the entry was sent), taken as the notice is: in this epoch, not frozen.
        self.advance_commit(commit);
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        r.clients.insert(src.0);
        let seq = e.seq;
        let expected = r.next_seq.get(&src.0).copied().unwrap_or(0);
        if seq < expected {
            self.stats.duplicates += 1;
            self.ack_again(src, seq);
            return;
        }
        if seq > expected {
            // §2.2.2: "the replica rejects messages with non-consecutive sequence numbers".
            self.stats.rejected += 1;
            let m = Msg::Reject {
                epoch,
                seq,
                expected,
            };
            self.send(OTHER_TAG, [src.0].into_iter(), &m);
            return;
        }
        let (pos, checksum, output) = Self::append(r, e, now);
        self.stats.appended += 1;
        let ack = Msg::Ack {
            epoch,
            members: r.members,
            seq,
            pos,
            checksum,
            output,
        };
        if r.disk.enabled() {
            let at = r.disk.write(now);
            r.acks_due.push_back((at, src, ack));
        } else {
            self.send(OTHER_TAG, [src.0].into_iter(), &ack);
        }
    }

    /// Answers `client`'s entry `seq`, in the log, again: its position, checksum and output.
    fn ack_again(&mut self, client: ProcId, seq: u64) {
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let Some(&pos) = r.index.get(&(client.0, seq)) else {
            return;
        };
        let e = &r.log[(pos - r.log_start) as usize];
        let a = Msg::Ack {
            epoch: r.epoch,
            members: r.members,
            seq,
            pos,
            checksum: e.checksum,
            output: e.output,
        };
        // Not before the original's Ack, which may still wait for its disk write (answers go
        // out in completion order).
        if let Some(&(at, ..)) = r.acks_due.back() {
            r.acks_due.push_back((at, client, a));
        } else {
            self.send(OTHER_TAG, [client.0].into_iter(), &a);
        }
    }

    /// Appends `e` to `r`'s log; its position, the checksum after it and its output.
    pub(super) fn append(r: &mut Replica, e: WireEntry, now: Instant) -> (u64, u64, Option<Val>) {
        let pos = Self::end(r);
        let checksum = chain(Self::last_checksum(r), e.ts, e.client, e.seq);
        let output = r.spec.apply(&e.cmd);
        r.next_seq.insert(e.client, e.seq + 1);
        r.index.insert((e.client, e.seq), pos);
        r.log.push_back(LogEntry {
            e,
            checksum,
            output,
            at: now,
        });
        (pos, checksum, output)
    }

    pub(super) fn answer_read(&mut self, p: Parked, ok: bool) {
        let m = Msg::ReadReply {
            rid: p.rid,
            ok,
            value: if ok { p.value } else { None },
        };
        self.send(OTHER_TAG, [p.client.0].into_iter(), &m);
    }

    /// Every position below `upto` is committed.
    pub(super) fn advance_commit(&mut self, upto: u64) {
        let retain = self.cfg.retain;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let upto = upto.min(Self::end(r));
        if upto <= r.commit {
            return;
        }
        for p in r.commit..upto {
            let e = &r.log[(p - r.log_start) as usize].e;
            r.committed_writes.push((e.client, e.id));
            r.committed_cmds.push(e.cmd);
        }
        r.commit = upto;
        let mut ready = Vec::new();
        while r.parked.front().is_some_and(|p| p.pos <= upto) {
            ready.extend(r.parked.pop_front());
        }
        // Keep `retain` committed entries; fold older ones into the base state.
        while r.log.len() > retain && r.log_start < r.commit {
            let Some(e) = r.log.pop_front() else { break };
            r.base.apply(&e.e.cmd);
            r.base_checksum = e.checksum;
            r.index.remove(&(e.e.client, e.e.seq));
            r.log_start += 1;
        }
        for p in ready {
            self.answer_read(p, true);
        }
    }

    pub(super) fn replica_timeout(&mut self) {
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let me = self.cfg.me.0;
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let mut due = Vec::new();
        while r.acks_due.front().is_some_and(|(t, ..)| *t <= now) {
            due.extend(r.acks_due.pop_front());
        }
        for (_, dst, m) in due {
            self.send(OTHER_TAG, [dst.0].into_iter(), &m);
        }
        let Some(r) = self.replica.as_mut() else {
            return;
        };
        let live: Vec<u32> = ids_of(r.members)
            .filter(|m| !r.failed.contains(m))
            .collect();
        if r.coord.as_ref().is_some_and(|c| now >= c.deadline) {
            return self.coord_deadline(live);
        }
        if let Some((at, epoch)) = r.want {
            if now >= at {
                r.want = None;
                if epoch == r.epoch {
                    self.start_recovery();
                }
                return;
            }
        }
        // Every `suspect_ns` while something is open: frozen for long (the coordinator is
        // silent), or an entry uncommitted for long (a lost commit notice, a client that died):
        // start or stand by for a recovery.
        if !Self::watching(r) || now < r.next_check {
            return;
        }
        r.next_check = Instant(now.0 + suspect);
        let Some(rank) = ids_of(r.members).position(|m| m == me) else {
            return;
        };
        let stuck = r
            .frozen_since
            .is_some_and(|t| now.0 >= t.0 + (rank as u64 + 2) * round_wait_ns(suspect, r.promised));
        let stale = r
            .log
            .get((r.commit - r.log_start) as usize)
            .is_some_and(|e| now.0 >= e.at.0 + 2 * suspect);
        if stuck && r.coord.is_none() {
            self.start_recovery();
        } else if stale && r.frozen_since.is_none() {
            self.want_recovery();
        }
    }

    /// The replica has something open its watchdog looks after.
    pub(super) fn watching(r: &Replica) -> bool {
        r.frozen_since.is_some() || r.commit < Self::end(r)
    }
}
