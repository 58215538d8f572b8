//! The client's part of a 1-RTT process (§2.2.2): it fills its window with writes, scattered as
//! log entries to the view, and reads, each to one replica; takes the replicas' Acks, Rejects,
//! read replies and views; tells the replicas its commit point; and, on its timer, asks again
//! for missing Acks and lost reads, or for a recovery. What it is not: the replica's side
//! (`replica.rs`) or the recovery round (`recovery.rs`).

use super::*;

impl OneRttProcess {
    fn client_dsts(c: &Client) -> Vec<u32> {
        ids_of(c.members)
            .filter(|m| !c.failed.contains(m))
            .collect()
    }

    pub(super) fn fill_window(&mut self) {
        let now = self.now;
        if now < self.cfg.start || now >= self.cfg.stop {
            return;
        }
        let pad = self.cfg.workload.value_size;
        let window = self.cfg.window as usize;
        loop {
            let Some(c) = self.client.as_mut() else {
                return;
            };
            if c.writes.len() + c.reads.len() >= window {
                return;
            }
            let cmd = c.gen.next_cmd();
            let id = c.next_id;
            c.next_id += 1;
            if let Cmd::Get(key) = cmd {
                c.reads.insert(
                    id,
                    PendingRead {
                        key,
                        call: now,
                        sent: now,
                        ts: None,
                        tries: 0,
                    },
                );
                self.send_read(id);
            } else {
                let seq = c.next_seq;
                c.next_seq += 1;
                c.writes.insert(
                    seq,
                    PendingWrite {
                        id,
                        cmd,
                        call: now,
                        sent: now,
                        ts: None,
                        acks: BTreeMap::new(),
                        asked: 0,
                    },
                );
                let epoch = c.epoch;
                let dsts = Self::client_dsts(c);
                c.commit_told = c.commit;
                let m = Msg::Entry {
                    epoch,
                    seq,
                    id,
                    cmd,
                    pad,
                    commit: c.commit,
                };
                self.send(seq, dsts.into_iter(), &m);
            }
        }
    }

    /// Sends read `rid` to the next replica in turn.
    pub(super) fn send_read(&mut self, rid: u64) {
        let me = self.cfg.me.0;
        let Some(c) = self.client.as_mut() else {
            return;
        };
        let dsts = Self::client_dsts(c);
        let Some(r) = c.reads.get_mut(&rid) else {
            return;
        };
        // Asked again after `suspect_ns` even if no replica is left to ask now.
        r.sent = self.now;
        if dsts.is_empty() {
            return;
        }
        let dst = dsts[(me as usize + rid as usize + r.tries as usize) % dsts.len()];
        r.tries += 1;
        r.sent = self.now;
        r.ts = None;
        let key = r.key;
        self.send(READ_TAG | rid, [dst].into_iter(), &Msg::Read { rid, key });
    }

    /// Sends every pending write again, in sequence order, in the current view.
    fn resend_writes(&mut self) {
        let pad = self.cfg.workload.value_size;
        let Some(c) = self.client.as_mut() else {
            return;
        };
        let dsts = Self::client_dsts(c);
        let epoch = c.epoch;
        let commit = c.commit;
        if !c.writes.is_empty() {
            c.commit_told = commit;
        }
        let mut msgs = Vec::new();
        for (&seq, w) in c.writes.iter_mut() {
            w.acks.clear();
            w.asked = 0;
            w.sent = self.now;
            w.ts = None;
            msgs.push((
                seq,
                Msg::Entry {
                    epoch,
                    seq,
                    id: w.id,
                    cmd: w.cmd,
                    pad,
                    commit,
                },
            ));
        }
        self.stats.resent += msgs.len() as u64;
        for (seq, m) in msgs {
            self.send(seq, dsts.iter().copied(), &m);
        }
    }

    pub(super) fn request_recovery(&mut self) {
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let replicas = self.cfg.replicas;
        let Some(c) = self.client.as_mut() else {
            return;
        };
        if c.recover_sent.is_some_and(|t| now.0 < t.0 + suspect) {
            return;
        }
        c.recover_sent = Some(now);
        let epoch = c.epoch;
        let dsts: Vec<u32> = (0..replicas).filter(|r| !c.failed.contains(r)).collect();
        self.send(OTHER_TAG, dsts.into_iter(), &Msg::Recover { epoch });
    }

    /// Tells the replicas a commit point none of this input's entries carried, alone (an
    /// unordered [`Msg::Commit`]): called at the end of every input, after the window was
    /// filled, so a commit point rides on the entries sent in the same input as the Ack that
    /// advanced it and goes alone otherwise — a read parked at some replica never waits for a
    /// write this client may not send.
    pub(super) fn tell_commit(&mut self) {
        let Some(c) = self.client.as_mut() else {
            return;
        };
        if c.commit <= c.commit_told {
            return;
        }
        c.commit_told = c.commit;
        let m = Msg::Commit {
            epoch: c.epoch,
            upto: c.commit,
        };
        let dsts = Self::client_dsts(c);
        self.send(OTHER_TAG, dsts.into_iter(), &m);
    }

    fn finish(&mut self, id: u64, cmd: Cmd, output: Option<Val>, call: Instant) {
        let now = self.now;
        let me = self.cfg.me.0;
        let Some(c) = self.client.as_mut() else {
            return;
        };
        c.gen.observe(&cmd, output);
        c.done.push_back(ReplDone {
            client: me,
            id,
            cmd,
            output,
            call_ns: call.0,
            return_ns: now.0,
        });
        match cmd {
            Cmd::Get(_) => self.stats.gets += 1,
            Cmd::Put(..) => self.stats.puts += 1,
            Cmd::Cas { .. } => self.stats.cas += 1,
        }
    }

    /// A replica's answer `m` from `src`.
    pub(super) fn client_msg(&mut self, src: ProcId, m: Msg) {
        let Some(c) = self.client.as_mut() else {
            return;
        };
        match m {
            Msg::Ack {
                epoch,
                seq,
                pos,
                checksum,
                output,
                ..
            } => self.on_ack(src, epoch, seq, pos, checksum, output),
            Msg::Reject { epoch, .. } => {
                if epoch == c.epoch {
                    self.request_recovery();
                }
            }
            Msg::ReadReply { rid, ok, value } => {
                if !c.reads.contains_key(&rid) {
                    return;
                }
                if ok {
                    if let Some(r) = c.reads.remove(&rid) {
                        self.finish(rid, Cmd::Get(r.key), value, r.call);
                        self.fill_window();
                    }
                } else {
                    self.send_read(rid);
                }
            }
            Msg::View {
                epoch,
                members,
                next_seq,
            } => self.on_view(epoch, members, next_seq),
            _ => self.stats.malformed += 1,
        }
    }

    /// Replica `src`'s Ack of entry `seq` in `epoch`: at `pos`, with the checksum after it and
    /// its output. Once every replica of the view answered alike, the write is done.
    fn on_ack(
        &mut self,
        src: ProcId,
        epoch: u64,
        seq: u64,
        pos: u64,
        checksum: u64,
        output: Option<Val>,
    ) {
        let Some(c) = self.client.as_mut() else {
            return;
        };
        if epoch != c.epoch {
            return;
        }
        let Some(w) = c.writes.get_mut(&seq) else {
            return;
        };
        w.acks.insert(src.0, (pos, checksum, output));
        let members: Vec<u32> = ids_of(c.members).collect();
        if !members.iter().all(|m| w.acks.contains_key(m)) {
            return;
        }
        // §2.2.2: replicated when every replica's checksum agrees.
        let first = w.acks.get(&members[0]).copied();
        let agree = members
            .iter()
            .all(|m| w.acks.get(m).map(|a| (a.0, a.1)) == first.map(|a| (a.0, a.1)));
        if !agree {
            self.request_recovery();
            return;
        }
        let Some(w) = c.writes.remove(&seq) else {
            return;
        };
        // The replicas hear of it on this client's next entries, or alone at the end
        // of this input ([`OneRttProcess::tell_commit`]).
        c.commit = c.commit.max(pos + 1);
        self.finish(w.id, w.cmd, output, w.call);
        self.fill_window();
    }

    /// A newer view, `epoch` with replicas `members`, in which this client's entries go on from
    /// `next_seq`: every pending write and read is sent again in it.
    fn on_view(&mut self, epoch: u64, members: u64, next_seq: u64) {
        let Some(c) = self.client.as_mut() else {
            return;
        };
        if epoch <= c.epoch {
            return;
        }
        c.epoch = epoch;
        c.members = members;
        c.recover_sent = None;
        // Entries below `next_seq` are in the log (answered again as duplicates); the
        // rest were removed and are appended anew, from `next_seq` on.
        let first = c.writes.keys().next().copied().unwrap_or(c.next_seq);
        if next_seq > c.next_seq || next_seq < first {
            self.stats.malformed += 1;
        }
        self.resend_writes();
        let rids: Vec<u64> = self
            .client
            .as_ref()
            .map(|c| c.reads.keys().copied().collect())
            .unwrap_or_default();
        for rid in rids {
            self.send_read(rid);
        }
    }

    pub(super) fn client_timeout(&mut self) {
        let now = self.now;
        let suspect = self.cfg.suspect_ns;
        let Some(c) = self.client.as_mut() else {
            return;
        };
        // §2.2.2: "in the case of packet loss, the client simply retransmits". A write whose
        // Acks are missing after `suspect_ns` asks the replicas that have not answered, in this
        // epoch, for their Ack again ([`Msg::AckAgain`]): one that holds the entry answers as
        // for a duplicate, with the position and checksum it gave the original; one that lacks
        // it (the entry was lost: 1Pipe would have delivered it first, it was stamped earlier)
        // rejects it, and the client asks for a recovery at once. Before, a missing Ack always
        // asked for a recovery, which ends in a new epoch in which every Entry and every Ack
        // must get through once more: where 1Pipe loses about a fifth of the messages on a long
        // path (1% bursty loss per link), a write to five replicas rarely did, and its client
        // asked for recoveries for ever (vopr --apps seed 105817: 54 epochs by the end of the
        // drain, its write missing some replica's Ack or Entry in each). Not the entry itself:
        // a replica lacking it would append the copy at a later timestamp than the others, and
        // a recovery, keeping only the entries every replica holds with the same timestamp,
        // would drop it and keep the client's later entries — a gap no resend fills. A lost
        // request is made again at the next timeout; once the tries are spent, or every
        // replica answered and the checksums disagree, the client asks for a recovery.
        let dsts = Self::client_dsts(c);
        let epoch = c.epoch;
        let mut again = Vec::new();
        let mut recover = false;
        for (&seq, w) in c.writes.iter_mut() {
            if now.0 < w.sent.0 + suspect {
                continue;
            }
            w.sent = now;
            let missing: Vec<u32> = dsts
                .iter()
                .copied()
                .filter(|d| !w.acks.contains_key(d))
                .collect();
            if missing.is_empty() || w.asked >= ACK_TRIES {
                recover = true;
                continue;
            }
            w.asked += 1;
            again.push((missing, Msg::AckAgain { epoch, seq }));
        }
        let stale_reads: Vec<u64> = c
            .reads
            .iter()
            .filter(|(_, r)| now.0 >= r.sent.0 + suspect)
            .map(|(&id, _)| id)
            .collect();
        if recover {
            for w in c.writes.values_mut() {
                w.sent = now;
            }
            self.request_recovery();
        }
        for (missing, m) in again {
            self.send(OTHER_TAG, missing.into_iter(), &m);
        }
        for rid in stale_reads {
            self.send_read(rid);
        }
    }
}
