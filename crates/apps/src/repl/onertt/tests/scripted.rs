//! Scripted scenarios on one process or a few, hand-fed: the messages a test delivers, and what
//! the process sends in answer, decoded — a replica behind by an epoch, a view that keeps a
//! silent replica, a missing Ack asked for again, which messages take a place in 1Pipe's order,
//! and how commit points travel (§2.2.2).

use super::*;

/// A replica that missed the Decide of its next epoch, hearing a Prepare of a later one, asks
/// the sender for the value at once — a Prepare of its next epoch, which a replica that
/// installed that epoch answers with its Decide — and takes no ballot. Waiting for its watchdog
/// instead, it fell behind by two epochs and could never rejoin: the view kept too few
/// replicas for a majority once one crashed (`onepipe vopr --apps` seeds 350, 481, 1054 and
/// 1178, once a replica's watchdog counted from the last ballot it took).
#[test]
fn a_replica_an_epoch_behind_asks_for_the_decide_it_missed() {
    let workload = ReplWorkload::default();
    let cfg = ReplConfig::new(ProcId(2), 3, 3, workload.clone(), 0);
    let mut p = OneRttProcess::new(cfg, CmdGen::new(workload, 2, 1), 7);
    let later = encode(&Msg::Prepare {
        epoch: 2,
        ballot: 256,
    });
    p.handle(
        Instant(1_000),
        AppInput::Deliver {
            src: ProcId(0),
            ts: Timestamp::new(900),
            reliable: false,
            payload: &later,
        },
    );
    let sent = p.poll_send().expect("an answer");
    assert_eq!(sent.parts.len(), 1);
    assert_eq!(sent.parts[0].0, ProcId(0));
    assert_eq!(
        decode(&sent.parts[0].1),
        Some(Msg::Prepare {
            epoch: 1,
            ballot: 0
        })
    );
    assert!(p.poll_send().is_none());
    let r = p.replica.as_ref().expect("a replica");
    assert_eq!((r.epoch, r.promised, r.frozen_since), (0, 0, None));
}

/// Hands `m` from `src` to `p` at `t`; what `p` sends in answer, decoded, with its
/// destinations.
fn deliver(p: &mut OneRttProcess, t: u64, src: u32, m: &Msg) -> Vec<(Vec<u32>, Msg)> {
    let payload = encode(m);
    p.handle(
        Instant(t),
        AppInput::Deliver {
            src: ProcId(src),
            ts: Timestamp::new(t),
            reliable: false,
            payload: &payload,
        },
    );
    sent(p)
}

/// What `p` sends, decoded, with its destinations.
fn sent(p: &mut OneRttProcess) -> Vec<(Vec<u32>, Msg)> {
    let mut out = Vec::new();
    while let Some(s) = p.poll_send() {
        let dsts = s.parts.iter().map(|(d, _)| d.0).collect();
        out.push((dsts, decode(&s.parts[0].1).expect("a message")));
    }
    out
}

/// A recovery leaves out of the view only replicas 1Pipe declared failed (§2.1's
/// process-failure callback): a live replica whose Promises are lost is asked again, in a new
/// round once the coordinator's tries are spent, never left out for its silence — it could
/// never rejoin (no state transfer), and a view shrunk by loss tolerates one crash fewer.
/// Before, the coordinator proposed the view of the majority that answered: in `onepipe vopr
/// --apps` seed 101234 a replica that had missed a Decide spent the coordinator's tries
/// catching up, its Promise was then lost, and once one of the two replicas left crashed, the
/// survivor could not gather a majority of three: every client's write stayed open.
#[test]
fn a_live_replica_is_left_out_of_a_view_only_once_declared_failed() {
    let workload = ReplWorkload::default();
    let cfg = ReplConfig::new(ProcId(0), 3, 3, workload.clone(), 0);
    let mut p = OneRttProcess::new(cfg, CmdGen::new(workload, 0, 1), 7);
    let prepare = |out: &[(Vec<u32>, Msg)]| {
        out.iter().find_map(|(dsts, m)| match m {
            Msg::Prepare { epoch: 1, ballot } if *dsts == [0, 1, 2] => Some(*ballot),
            _ => None,
        })
    };
    let mut t = 1_000;
    let out = deliver(&mut p, t, 1, &Msg::Recover { epoch: 0 });
    let mut ballot = prepare(&out).expect("the coordinator starts a round");
    let mut rounds = 1;
    let promise = |ballot| Msg::Promise {
        epoch: 1,
        ballot,
        accepted: None,
        commit: 0,
        tail: Vec::new(),
    };
    // Replica 2's Promises are all lost: replicas 0 and 1 promise every round.
    for _ in 0..24 {
        for src in [0, 1] {
            assert!(deliver(&mut p, t, src, &promise(ballot)).is_empty());
        }
        t = p.poll_timeout().expect("a deadline").0;
        p.handle(Instant(t), AppInput::Timeout);
        let out = sent(&mut p);
        assert!(
            !out.iter().any(|(_, m)| matches!(m, Msg::Accept { .. })),
            "a view proposed without live replica 2: {out:?}"
        );
        if let Some(b) = prepare(&out) {
            assert!(b > ballot);
            (ballot, rounds) = (b, rounds + 1);
        }
    }
    assert!(rounds > 2, "{rounds} rounds");
    // Once declared failed, it is left out.
    p.handle(
        Instant(t),
        AppInput::ProcFailed {
            proc: ProcId(2),
            ts: Timestamp::new(t),
        },
    );
    let mut out = sent(&mut p);
    for src in [0, 1] {
        out.extend(deliver(&mut p, t, src, &promise(ballot)));
    }
    let members = out.iter().find_map(|(_, m)| match m {
        Msg::Accept { value, .. } => Some(value.members),
        _ => None,
    });
    assert_eq!(members, Some(0b011), "{out:?}");
}

/// A client whose write misses an Ack asks the silent replica for it again, in the same epoch,
/// before asking for a recovery (§2.2.2: "in the case of packet loss, the client simply
/// retransmits"): the replica holds the write and answers as for a duplicate, with the position
/// and checksum of the original; a replica that lacks it rejects the request. Before, a missing
/// Ack always asked for a recovery, after which every Entry and Ack had to get through again in
/// the new epoch: in `onepipe vopr --apps` seed 105817 (five replicas, 1% bursty loss per link)
/// a client's last write missed some replica's Ack or Entry in epoch after epoch (54 by the end
/// of the drain) and never finished.
#[test]
fn a_missing_ack_is_asked_for_again_before_a_recovery() {
    let workload = ReplWorkload {
        keys: 8,
        read_ratio: 0.0,
        cas_ratio: 0.0,
        value_size: 16,
    };
    let mut procs: Vec<OneRttProcess> = (0..6)
        .map(|p| {
            let cfg = ReplConfig::new(ProcId(p), 5, 6, workload.clone(), u32::from(p == 5));
            OneRttProcess::new(cfg, CmdGen::new(workload.clone(), p, 1), 7)
        })
        .collect();
    let mut t = 1_000;
    procs[5].handle(Instant(t), AppInput::Timeout);
    let out = sent(&mut procs[5]);
    let [(dsts, entry)] = &out[..] else {
        panic!("one write: {out:?}")
    };
    assert_eq!(*dsts, [0, 1, 2, 3, 4]);
    assert!(matches!(entry, Msg::Entry { seq: 0, .. }), "{entry:?}");
    let mut acks = Vec::new();
    for (r, replica) in procs.iter_mut().enumerate().take(5) {
        let out = deliver(replica, t, 5, entry);
        let [(to, ack @ Msg::Ack { .. })] = &out[..] else {
            panic!("replica {r} acks: {out:?}")
        };
        assert_eq!(*to, [5]);
        acks.push(ack.clone());
    }
    // Replica 4's Ack is lost.
    for (r, ack) in acks.iter().enumerate().take(4) {
        assert!(deliver(&mut procs[5], t, r as u32, ack).is_empty());
    }
    t = procs[5].poll_timeout().expect("the write's timer").0;
    procs[5].handle(Instant(t), AppInput::Timeout);
    let out = sent(&mut procs[5]);
    assert!(
        !out.iter().any(|(_, m)| matches!(m, Msg::Recover { .. })),
        "a recovery asked for a lost Ack: {out:?}"
    );
    let [(dsts, ask)] = &out[..] else {
        panic!("the Ack asked for again: {out:?}")
    };
    assert_eq!(*dsts, [4], "only the silent replica is asked again");
    assert_eq!(*ask, Msg::AckAgain { epoch: 0, seq: 0 });
    // A replica that lacks the entry (here: for another client) rejects the request.
    let out = deliver(&mut procs[3], t, 6, ask);
    assert!(
        matches!(&out[..], [(to, Msg::Reject { epoch: 0, seq: 0, expected: 0 })] if *to == [6]),
        "{out:?}"
    );
    // Replica 4 holds it: answered as the original was.
    let out = deliver(&mut procs[4], t, 5, ask);
    let [(to, again)] = &out[..] else {
        panic!("replica 4 answers: {out:?}")
    };
    assert_eq!((&to[..], again), (&[5][..], &acks[4]));
    let out = deliver(&mut procs[5], t, 4, again);
    assert!(
        out.iter().any(|(_, m)| matches!(
            m,
            Msg::Entry {
                seq: 1,
                commit: 1,
                ..
            }
        )),
        "the write is replicated, its commit point on the next entry: {out:?}"
    );
    let done = procs[5].poll_done().expect("the write returns");
    assert!(done.cmd.is_write());
    assert!(procs.iter().all(|p| p.stats().recoveries == 0));
}

/// What `p` sends, decoded, with its destinations and whether it is in 1Pipe's order.
fn sent_ordered(p: &mut OneRttProcess) -> Vec<(bool, Vec<u32>, Msg)> {
    let mut out = Vec::new();
    while let Some(s) = p.poll_send() {
        let dsts = s.parts.iter().map(|(d, _)| d.0).collect();
        out.push((s.ordered, dsts, decode(&s.parts[0].1).expect("a message")));
    }
    out
}

/// Hands `m` from `src` to `p` at `t`, as [`deliver`]; what `p` sends, with its order flag.
fn deliver_ordered(p: &mut OneRttProcess, t: u64, src: u32, m: &Msg) -> Vec<(bool, Vec<u32>, Msg)> {
    let payload = encode(m);
    p.handle(
        Instant(t),
        AppInput::Deliver {
            src: ProcId(src),
            ts: Timestamp::new(t),
            reliable: false,
            payload: &payload,
        },
    );
    sent_ordered(p)
}

/// Replicas `0..replicas` and one client after them (a window of `window`), drawing from
/// `workload` with `seed`.
fn cluster(replicas: u32, window: u32, workload: &ReplWorkload, seed: u64) -> Vec<OneRttProcess> {
    let n = replicas + 1;
    (0..n)
        .map(|p| {
            let w = if p == replicas { window } else { 0 };
            let cfg = ReplConfig::new(ProcId(p), replicas, n, workload.clone(), w);
            OneRttProcess::new(cfg, CmdGen::new(workload.clone(), p, seed), 7)
        })
        .collect()
}

/// A replica at `me` of three, alone: entries and reads are handed to it by the test.
fn lone_replica(me: u32) -> OneRttProcess {
    let workload = ReplWorkload::default();
    let cfg = ReplConfig::new(ProcId(me), 3, 6, workload.clone(), 0);
    OneRttProcess::new(cfg, CmdGen::new(workload, me, 1), 7)
}

/// §2.2.2: "the response message does not need to be ordered by 1Pipe". A replica's Ack — to
/// an entry or to an AckAgain — its Reject and its read reply go unordered; the client's
/// entries, reads and AckAgains go in 1Pipe's order (the log's order, a read's point, and the
/// Reject of an entry stamped before the AckAgain), and its commit notice alone goes unordered.
#[test]
fn replies_and_notices_go_unordered_entries_reads_and_ack_agains_in_order_2_2_2() {
    let workload = ReplWorkload {
        keys: 1,
        read_ratio: 0.5,
        cas_ratio: 0.0,
        value_size: 0,
    };
    // A seed whose client draws a write, then a read.
    let seed = (0..1000)
        .find(|&s| {
            let mut g = CmdGen::new(workload.clone(), 3, s);
            g.next_cmd().is_write() && !g.next_cmd().is_write()
        })
        .expect("a seed");
    let mut procs = cluster(3, 2, &workload, seed);
    let t = 1_000;
    procs[3].handle(Instant(t), AppInput::Timeout);
    let out = sent_ordered(&mut procs[3]);
    let [(true, to_all, write), (true, to_one, read)] = &out[..] else {
        panic!("an ordered entry and an ordered read: {out:?}")
    };
    assert_eq!(*to_all, [0, 1, 2]);
    assert!(matches!(write, Msg::Entry { commit: 0, .. }), "{write:?}");
    assert!(matches!(read, Msg::Read { .. }), "{read:?}");
    // The read reaches its replica first: evaluated before the write, answered at once.
    let out = deliver_ordered(&mut procs[to_one[0] as usize], t, 3, read);
    assert!(
        matches!(&out[..], [(false, to, Msg::ReadReply { ok: true, value: None, .. })] if *to == [3]),
        "{out:?}"
    );
    let mut acks = Vec::new();
    for (r, replica) in procs.iter_mut().enumerate().take(3) {
        let out = deliver_ordered(replica, t + 1, 3, write);
        let [(false, to, ack @ Msg::Ack { .. })] = &out[..] else {
            panic!("replica {r}: an unordered Ack: {out:?}")
        };
        assert_eq!(*to, [3]);
        acks.push(ack.clone());
    }
    // Asked again, the replica answers unordered too; an entry it lacks, it rejects unordered.
    let out = deliver_ordered(&mut procs[0], t + 2, 3, &Msg::AckAgain { epoch: 0, seq: 0 });
    assert_eq!(out, [(false, vec![3], acks[0].clone())]);
    let out = deliver_ordered(&mut procs[0], t + 2, 3, &Msg::AckAgain { epoch: 0, seq: 1 });
    assert!(
        matches!(&out[..], [(false, _, Msg::Reject { seq: 1, .. })]),
        "{out:?}"
    );
    // The client's own AckAgain is ordered: it has the write's timer fire with one Ack in.
    assert!(deliver_ordered(&mut procs[3], t + 3, 0, &acks[0]).is_empty());
    let at = procs[3].poll_timeout().expect("the write's timer").0;
    procs[3].handle(Instant(at), AppInput::Timeout);
    let out = sent_ordered(&mut procs[3]);
    assert!(
        out.iter()
            .any(|(o, to, m)| *o && *to == [1, 2] && matches!(m, Msg::AckAgain { seq: 0, .. })),
        "{out:?}"
    );
}

/// §2.2.2 leaves the commit notice to the design; here the client's commit point rides on its
/// entries. A replica takes the point an entry carries as it takes a notice — in its epoch, not
/// while frozen for a recovery, never past its log's end — whatever becomes of the entry itself
/// (appended, a duplicate, or rejected for a gap).
#[test]
fn a_commit_point_carried_by_an_entry_advances_the_replicas_commit_point() {
    let mut r = lone_replica(0);
    let commit = |p: &OneRttProcess| p.replica.as_ref().expect("a replica").commit;
    let put = |v| Cmd::Put(1, v);
    assert_eq!(deliver(&mut r, 1_000, 3, &entry(0, put(10), 0)).len(), 1);
    assert_eq!(commit(&r), 0);
    deliver(&mut r, 1_001, 3, &entry(1, put(11), 1));
    assert_eq!(commit(&r), 1, "carried by the next entry");
    // Never past the log's end as the entry arrives (2 entries), even if it claims more.
    deliver(&mut r, 1_002, 3, &entry(2, put(12), 9));
    assert_eq!(commit(&r), 2);
    // Carried by a duplicate, and by an entry rejected for a gap, it still counts.
    let out = deliver(&mut r, 1_003, 3, &entry(1, put(11), 3));
    assert!(
        matches!(&out[..], [(_, Msg::Ack { seq: 1, .. })]),
        "{out:?}"
    );
    assert_eq!(commit(&r), 3);
    deliver(&mut r, 1_004, 4, &entry(0, Cmd::Put(2, 20), 0));
    let out = deliver(&mut r, 1_005, 3, &entry(7, put(17), 4));
    assert!(
        matches!(&out[..], [(_, Msg::Reject { seq: 7, .. })]),
        "{out:?}"
    );
    assert_eq!(commit(&r), 4);
    // Frozen for a recovery (its Promise gave its commit point), it takes no more.
    deliver(&mut r, 1_006, 4, &entry(1, Cmd::Put(2, 21), 4));
    let out = deliver(
        &mut r,
        1_007,
        1,
        &Msg::Prepare {
            epoch: 1,
            ballot: 257,
        },
    );
    assert!(
        matches!(&out[..], [(_, Msg::Promise { commit: 4, .. })]),
        "{out:?}"
    );
    deliver(&mut r, 1_008, 3, &entry(3, put(13), 5));
    assert_eq!(commit(&r), 4, "frozen");
}

/// A read waits until every entry before it is committed (§2.2.2: an uncommitted entry could
/// still be removed by a recovery), and the commit point that frees it may come on the next
/// entry of any client: no separate notice is needed.
#[test]
fn a_parked_read_is_answered_on_a_piggybacked_commit_point_without_a_notice() {
    let mut r = lone_replica(1);
    deliver(&mut r, 1_000, 3, &entry(0, Cmd::Put(5, 42), 0));
    // Client 4 reads key 5 after the put: parked, the put is not committed.
    let out = deliver_ordered(&mut r, 1_001, 4, &Msg::Read { rid: 9, key: 5 });
    assert!(out.is_empty(), "answered before the put committed: {out:?}");
    // Client 3's next entry says the put is committed: the read is answered, unordered.
    let out = deliver_ordered(&mut r, 1_002, 3, &entry(1, Cmd::Put(6, 1), 1));
    let reply = out
        .iter()
        .find(|(_, to, m)| *to == [4] && matches!(m, Msg::ReadReply { .. }));
    assert_eq!(
        reply,
        Some(&(
            false,
            vec![4],
            Msg::ReadReply {
                rid: 9,
                ok: true,
                value: Some(42)
            }
        )),
        "{out:?}"
    );
    assert!(
        out.iter()
            .any(|(_, to, m)| *to == [3] && matches!(m, Msg::Ack { seq: 1, .. })),
        "{out:?}"
    );
}

/// The client's rule: a commit point rides on the entries sent in the input that advanced it
/// (the next write fills the window at once); when none is sent — the next command is a read,
/// or the run is over — it goes alone, at the end of that input, unordered, to every replica,
/// once.
#[test]
fn a_commit_point_goes_alone_only_when_no_entry_of_the_input_carries_it() {
    let acks = |seq, pos| -> Vec<(u32, Msg)> {
        (0..3)
            .map(|r| {
                let m = Msg::Ack {
                    epoch: 0,
                    members: 0b111,
                    seq,
                    pos,
                    checksum: 77,
                    output: None,
                };
                (r, m)
            })
            .collect()
    };
    let complete = |c: &mut OneRttProcess, t, seq, pos| {
        let mut out = Vec::new();
        for (r, m) in acks(seq, pos) {
            out = deliver_ordered(c, t, r, &m);
        }
        out
    };
    let writes = ReplWorkload {
        keys: 4,
        read_ratio: 0.0,
        cas_ratio: 0.0,
        value_size: 0,
    };
    // The next write carries it.
    let mut procs = cluster(3, 1, &writes, 1);
    let c = &mut procs[3];
    c.handle(Instant(1_000), AppInput::Timeout);
    assert!(matches!(
        &sent(c)[..],
        [(
            _,
            Msg::Entry {
                seq: 0,
                commit: 0,
                ..
            }
        )]
    ));
    let out = complete(c, 2_000, 0, 4);
    assert!(
        matches!(&out[..], [(true, to, Msg::Entry { seq: 1, commit: 5, .. })] if *to == [0, 1, 2]),
        "{out:?}"
    );
    // The run is over: no entry follows, the notice goes alone, once.
    c.cfg.stop = Instant(2_500);
    let out = complete(c, 3_000, 1, 5);
    assert_eq!(
        out,
        [(false, vec![0, 1, 2], Msg::Commit { epoch: 0, upto: 6 })]
    );
    c.handle(Instant(3_001), AppInput::Timeout);
    assert!(sent(c).is_empty(), "told once");
    // The next command is a read: the notice goes alone beside it.
    let mixed = ReplWorkload {
        read_ratio: 0.5,
        ..writes
    };
    let seed = (0..1000)
        .find(|&s| {
            let mut g = CmdGen::new(mixed.clone(), 3, s);
            g.next_cmd().is_write() && !g.next_cmd().is_write()
        })
        .expect("a seed");
    let mut procs = cluster(3, 1, &mixed, seed);
    let c = &mut procs[3];
    c.handle(Instant(1_000), AppInput::Timeout);
    assert_eq!(sent(c).len(), 1);
    let out = complete(c, 2_000, 0, 0);
    assert!(
        matches!(&out[..], [(true, _, Msg::Read { .. }), (false, to, Msg::Commit { upto: 1, .. })] if *to == [0, 1, 2]),
        "{out:?}"
    );
}
