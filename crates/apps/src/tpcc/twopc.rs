//! What the two baselines of Fig. 15 share — two-phase locking ([`super::lock`]) and OCC
//! ([`super::occ`]), each with two-phase commit and primary-backup replication (§7.3.2: "2PL
//! and OCC do not scale, because each Payment TXN updates its corresponding warehouse entry and
//! each New-Order reads it") — so that nothing is written twice:
//!
//! * the messages ([`Msg`], [`encode`], [`decode`]): bounds-checked, a malformed one decodes to
//!   `None`;
//! * the **coordinator**: every process initiates its own transactions, a closed loop of
//!   [`TpccConfig::window`] of them, and coordinates each with the **primary** (replica 0) of
//!   every shard it touches ([`super::db::TpccLayout::shards_of`]). 2PL: prepare (lock, execute,
//!   replicate, vote), then commit. OCC: execute, then prepare (lock, validate, replicate,
//!   vote), then commit. Any no vote aborts the attempt everywhere it went, and the transaction
//!   is tried again, whole, after a randomized exponential backoff (as [`crate::kv::farm`]) — once the initiators stop issuing, an aborted transaction is given up instead (`TpccStats::given_up`);
//! * the **primary**'s replication of a prepared part ([`PrimaryBase`]): the part goes to the
//!   shard's two backups and the primary votes yes only once both acknowledged it (primary-backup
//!   replication of the 2PC prepare); the commit is forwarded to them ([`Msg::Apply`]), an abort
//!   too ([`Msg::Discard`]). A part that writes nothing here (a rolled-back New-Order's, a
//!   New-Order's at the shard of only its warehouse row) is not replicated: backups would apply
//!   nothing;
//! * the **backup** ([`Backup`]): keeps replicated parts and executes each when its commit comes,
//!   in the primary's commit order (direct messages are FIFO per pair). Why that reaches the
//!   primary's state is argued at [`Backup`];
//! * the process ([`TwoPcProcess`]), generic over the primary's protocol ([`Primary`]).
//!
//! **Transport.** Direct messages ([`AppSend::reliable`] is false and means nothing here),
//! delivered exactly once and in FIFO order per (sender, receiver) pair, never lost — the
//! simulator's direct driver provides that, retransmitting when the network loses packets. No
//! `Sent`, `SendFailed`, `Refused` or `CommitReleased` input is expected (they are ignored);
//! `Timeout` comes when [`App::poll_timeout`] says. **Failures are not handled**: a crashed
//! primary leaves its locks held and its coordinators waiting (`ProcFailed` is ignored).
//!
//! **Serialization order, for the checker** (as [`crate::kv::farm`]). A primary stamps each of
//! its decisive steps with `max(clock, last stamp + 1)` — strictly increasing per primary —
//! where the clock is its `now` when it handles the message (the simulator's direct driver gives
//! the baselines exact clocks; processes of one machine share one); and it
//! raises its last stamp to every committed transaction's key ([`Msg::Commit`] carries it, as a
//! Lamport clock would), so a step that follows a commit at that primary is stamped above that
//! transaction's key. A transaction's key ([`TpccCommitted::key`], `seq` 0) is the largest stamp
//! among its primaries' yes votes: for 2PL the instant a primary held all the part's locks, for
//! OCC the instant of a primary's successful lock-and-validate. At the largest one, every lock
//! the transaction needs anywhere is held, until after its writes apply: a conflicting
//! transaction was either committed at the common primary before (its key is below: the
//! Lamport rule) or locks there after the commit (its stamp is above). The stamps are never
//! read by the protocol, only by [`super::check::TpccChecker`].

use super::codec::{put_input, put_result, Reader, INPUT_LEN_MAX, RESULT_LEN_MAX};
use super::db::{mix64, Placement, Shard};
use super::gen::TxnGen;
use super::onepipe::TpccConfig;
use super::{PartResult, TpccApp, TpccCommitted, TpccStats, TpccTxnKind, TxnInput, LINES_MAX};
use crate::kv::txn_id;
use crate::{App, AppInput, AppSend};
use bytes::{BufMut, Bytes, BytesMut};
use onepipe_proto::{Instant, ProcId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// The first backoff after an abort (ns); it doubles per attempt up to
/// 2^[`BACKOFF_DOUBLINGS_MAX`]×, randomized ×[1, 2) (as [`crate::kv::farm::BACKOFF_BASE_NS`]).
pub const BACKOFF_BASE_NS: u64 = 2_000;
/// Doublings of the backoff, at most.
pub const BACKOFF_DOUBLINGS_MAX: u32 = 6;
/// Most rows one part touches: a New-Order's warehouse, district and [`LINES_MAX`] stock rows
/// (a Payment's are 3).
pub const ROWS_MAX: usize = 2 + LINES_MAX;
/// Most parts a primary (or a backup) keeps open at once: a bound far above the processes'
/// windows summed; a prepare beyond it is refused (a no vote).
pub const PARTS_MAX: usize = 1 << 16;

const _: () = assert!(ROWS_MAX >= 3 && ROWS_MAX <= u8::MAX as usize);
const _: () = assert!(BACKOFF_DOUBLINGS_MAX < 32);

const LOCK: u8 = 21;
const EXECUTE: u8 = 22;
const EXECUTED: u8 = 23;
const PREPARE: u8 = 24;
const VOTE: u8 = 25;
const COMMIT: u8 = 26;
const COMMIT_ACK: u8 = 27;
const ABORT: u8 = 28;
const REPLICATE: u8 = 29;
const REPLICATED: u8 = 30;
const APPLY: u8 = 31;
const DISCARD: u8 = 32;

/// Kind, transaction, attempt.
const HEADER_LEN: usize = 1 + 8 + 4;
/// A count and the versions.
const VERSIONS_LEN_MAX: usize = 1 + 8 * ROWS_MAX;
/// Longest message: a prepare of a New-Order of [`LINES_MAX`] lines with every row's version.
pub const MSG_LEN_MAX: usize = HEADER_LEN + INPUT_LEN_MAX + VERSIONS_LEN_MAX;
const _: () = assert!(HEADER_LEN + 8 + INPUT_LEN_MAX <= MSG_LEN_MAX);
const _: () = assert!(HEADER_LEN + RESULT_LEN_MAX + VERSIONS_LEN_MAX <= MSG_LEN_MAX);
const _: () = assert!(HEADER_LEN + 8 + 1 + 1 + RESULT_LEN_MAX <= MSG_LEN_MAX);

/// A transaction attempt: (transaction id, attempt number from 1). Locks and parts belong to
/// attempts: an abort's late messages never touch the next attempt.
pub type Owner = (u64, u32);

/// Which protocol a [`Primary`] runs: the coordinator's flow follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Strict two-phase locking: [`Msg::Lock`], votes with results, commit.
    Lock,
    /// Optimistic: [`Msg::Execute`], [`Msg::Prepare`] with the versions read, commit.
    Occ,
}

/// The baselines' messages. On the wire (big-endian): kind `u8` (21–32, apart from the
/// key-value store's 1, 2, 11–19 and TPC-C on 1Pipe's 3, 4), transaction `u64`, attempt `u32`,
/// then per kind what the variant holds, in order: an input as [`super::codec`]'s request
/// carries it, a result as its reply does, versions as a count `u8` (at most [`ROWS_MAX`]) and
/// `u64`s, booleans as `0`/`1`, an optional result as a presence boolean and the result.
/// Nothing follows the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// 2PL's prepare (coordinator → primary): take the part's locks (wait-die by `prio_ns`),
    /// execute, replicate, vote.
    Lock {
        /// The transaction's wait-die priority: its first attempt's call (coordinator's ns);
        /// lower is older.
        prio_ns: u64,
        /// The transaction's input.
        input: TxnInput,
    },
    /// OCC's execution (coordinator → primary): run the part on the current state, without
    /// locks or changes.
    Execute {
        /// The transaction's input.
        input: TxnInput,
    },
    /// OCC's execution answer (primary → coordinator).
    Executed {
        /// The part's result.
        result: PartResult,
        /// The version of every row the part reads or writes, in [`Shard::access`] order.
        versions: Vec<u64>,
    },
    /// OCC's prepare (coordinator → primary): lock the part's rows without waiting, validate
    /// the versions, replicate, vote.
    Prepare {
        /// The transaction's input.
        input: TxnInput,
        /// What [`Msg::Executed`] said.
        versions: Vec<u64>,
    },
    /// A primary's vote (primary → coordinator).
    Vote {
        /// The step's stamp (a yes: the transaction's key is the largest).
        stamp: u64,
        /// Yes: prepared and replicated.
        yes: bool,
        /// 2PL's yes: the part's result.
        result: Option<PartResult>,
    },
    /// Commit (coordinator → primary).
    Commit {
        /// The transaction's key: the primary's stamps go above it from now on.
        key: u64,
    },
    /// Committed (primary → coordinator).
    CommitAck {
        /// OCC: the result the commit applied (it must equal the execution's).
        result: Option<PartResult>,
    },
    /// Abort (coordinator → primary): release, undo, discard.
    Abort,
    /// A prepared part (primary → backup).
    Replicate {
        /// The transaction's input.
        input: TxnInput,
    },
    /// A backup keeps the part (backup → primary).
    Replicated,
    /// The part committed: apply it (primary → backup).
    Apply,
    /// The part aborted: forget it (primary → backup).
    Discard,
}

impl Msg {
    fn kind(&self) -> u8 {
        match self {
            Msg::Lock { .. } => LOCK,
            Msg::Execute { .. } => EXECUTE,
            Msg::Executed { .. } => EXECUTED,
            Msg::Prepare { .. } => PREPARE,
            Msg::Vote { .. } => VOTE,
            Msg::Commit { .. } => COMMIT,
            Msg::CommitAck { .. } => COMMIT_ACK,
            Msg::Abort => ABORT,
            Msg::Replicate { .. } => REPLICATE,
            Msg::Replicated => REPLICATED,
            Msg::Apply => APPLY,
            Msg::Discard => DISCARD,
        }
    }
}

/// Encodes a message. Versions must number at most [`ROWS_MAX`], inputs and results as
/// [`super::codec`] requires.
pub fn encode(owner: Owner, msg: &Msg) -> Bytes {
    let mut b = BytesMut::with_capacity(MSG_LEN_MAX);
    b.put_u8(msg.kind());
    b.put_u64(owner.0);
    b.put_u32(owner.1);
    match msg {
        Msg::Lock { prio_ns, input } => {
            b.put_u64(*prio_ns);
            put_input(&mut b, input);
        }
        Msg::Execute { input } | Msg::Replicate { input } => put_input(&mut b, input),
        Msg::Executed { result, versions } => {
            put_result(&mut b, result);
            put_versions(&mut b, versions);
        }
        Msg::Prepare { input, versions } => {
            put_input(&mut b, input);
            put_versions(&mut b, versions);
        }
        Msg::Vote { stamp, yes, result } => {
            b.put_u64(*stamp);
            b.put_u8(u8::from(*yes));
            put_option_result(&mut b, result.as_ref());
        }
        Msg::Commit { key } => b.put_u64(*key),
        Msg::CommitAck { result } => put_option_result(&mut b, result.as_ref()),
        Msg::Abort | Msg::Replicated | Msg::Apply | Msg::Discard => {}
    }
    debug_assert!(b.len() <= MSG_LEN_MAX, "{} bytes", b.len());
    b.freeze()
}

fn put_versions(b: &mut BytesMut, versions: &[u64]) {
    assert!(versions.len() <= ROWS_MAX, "{} versions", versions.len());
    b.put_u8(versions.len() as u8);
    versions.iter().for_each(|&v| b.put_u64(v));
}

fn put_option_result(b: &mut BytesMut, result: Option<&PartResult>) {
    b.put_u8(u8::from(result.is_some()));
    if let Some(r) = result {
        put_result(b, r);
    }
}

/// Decodes a message; `None` if it is not a well-formed one.
pub fn decode(payload: &[u8]) -> Option<(Owner, Msg)> {
    let mut r = Reader::new(payload);
    let kind = r.u8()?;
    let owner = (r.u64()?, r.u32()?);
    let versions = |r: &mut Reader<'_>| {
        let n = usize::from(r.u8()?);
        (n <= ROWS_MAX).then_some(())?;
        (0..n).map(|_| r.u64()).collect::<Option<Vec<u64>>>()
    };
    let option_result = |r: &mut Reader<'_>| match r.bool()? {
        true => r.result().map(Some),
        false => Some(None),
    };
    let msg = match kind {
        LOCK => Msg::Lock {
            prio_ns: r.u64()?,
            input: r.input()?,
        },
        EXECUTE => Msg::Execute { input: r.input()? },
        EXECUTED => Msg::Executed {
            result: r.result()?,
            versions: versions(&mut r)?,
        },
        PREPARE => Msg::Prepare {
            input: r.input()?,
            versions: versions(&mut r)?,
        },
        VOTE => Msg::Vote {
            stamp: r.u64()?,
            yes: r.bool()?,
            result: option_result(&mut r)?,
        },
        COMMIT => Msg::Commit { key: r.u64()? },
        COMMIT_ACK => Msg::CommitAck {
            result: option_result(&mut r)?,
        },
        ABORT => Msg::Abort,
        REPLICATE => Msg::Replicate { input: r.input()? },
        REPLICATED => Msg::Replicated,
        APPLY => Msg::Apply,
        DISCARD => Msg::Discard,
        _ => return None,
    };
    r.finish()?;
    Some((owner, msg))
}

/// What a role needs to act while handling one message: where sends go, the counters, and the
/// process's clock when it handles the message (for stamps only).
#[derive(Debug)]
pub struct Io<'a> {
    out: &'a mut VecDeque<AppSend>,
    pub(super) stats: &'a mut TpccStats,
    pub(super) clock: u64,
}

impl Io<'_> {
    /// Sends `msg` of `owner` to `dst`, by a direct message.
    pub(super) fn send(&mut self, dst: ProcId, owner: Owner, msg: &Msg) {
        self.out.push_back(AppSend {
            tag: owner.0,
            reliable: false,
            ordered: true,
            parts: vec![(dst, encode(owner, msg))],
        });
    }
}

/// A primary's stamps: strictly increasing, and above every key witnessed.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Stamps {
    last: u64,
}

impl Stamps {
    /// A stamp for now: the message's `clock` if above every earlier stamp, else just above.
    pub(super) fn next(&mut self, clock: u64) -> u64 {
        self.last = clock.max(self.last.saturating_add(1));
        self.last
    }

    /// A transaction committed here at `key`: later stamps go above it.
    pub(super) fn witness(&mut self, key: u64) {
        self.last = self.last.max(key);
    }
}

/// A part prepared at a primary: locked (and, for 2PL, executed), replicated or being
/// replicated, voted yes or about to be.
#[derive(Debug)]
pub(super) struct Prepared {
    /// The stamp of the vote.
    pub(super) stamp: u64,
    /// Backups that have not acknowledged it; none left: the yes vote went.
    pub(super) acks_left: usize,
    /// It went to the backups: a commit or an abort follows it there.
    pub(super) replicated: bool,
    /// What the vote carries (2PL: the part's result), until sent.
    pub(super) result: Option<PartResult>,
}

impl Prepared {
    /// Prepared at `stamp`, the vote to carry `result`; not yet replicated.
    pub(super) fn new(stamp: u64, result: Option<PartResult>) -> Prepared {
        Prepared {
            stamp,
            acks_left: 0,
            replicated: false,
            result,
        }
    }

    /// The yes vote went: the part waits for the coordinator's decision.
    pub(super) fn voted(&self) -> bool {
        self.acks_left == 0
    }
}

/// What both protocols' primaries have: the shard, its backups, the stamps — and the
/// replication of prepared parts.
#[derive(Debug)]
pub struct PrimaryBase {
    pub(super) id: u32,
    pub(super) shard: Shard,
    pub(super) backups: Vec<ProcId>,
    pub(super) stamps: Stamps,
    scale: super::gen::TpccScale,
    layout: super::db::TpccLayout,
}

impl PrimaryBase {
    /// The primary of shard `id` of `cfg`'s layout, loaded from the workload's seed.
    fn new(cfg: &TpccConfig, id: u32) -> PrimaryBase {
        let w = &cfg.workload;
        PrimaryBase {
            id,
            shard: Shard::populate(&w.scale, w.seed, &cfg.layout, id),
            backups: cfg.layout.replicas_of(id).skip(1).collect(),
            stamps: Stamps::default(),
            scale: w.scale,
            layout: cfg.layout,
        }
    }

    /// Its shard's rows.
    pub fn shard(&self) -> &Shard {
        &self.shard
    }

    /// Whether a coordinator's request for `owner` from `src` may be served: the transaction
    /// is `src`'s ([`txn_id`]), its input valid and touching this shard. If not, it is counted
    /// as malformed.
    pub(super) fn accepts(
        &self,
        io: &mut Io<'_>,
        src: ProcId,
        owner: Owner,
        input: &TxnInput,
    ) -> bool {
        let ok = owner.0 >> 40 == u64::from(src.0)
            && input.is_valid(&self.scale)
            && self.layout.shards_of(input).contains(&self.id);
        if !ok {
            io.stats.malformed += 1;
        }
        ok
    }

    /// `owner`'s part `p` is prepared here (coordinator `coordinator`): it goes to the backups
    /// if it `writes`, else the primary votes yes at once.
    pub(super) fn replicate(
        &self,
        io: &mut Io<'_>,
        owner: Owner,
        coordinator: ProcId,
        input: &TxnInput,
        writes: bool,
        p: &mut Prepared,
    ) {
        debug_assert!(p.acks_left == 0 && !p.replicated);
        if writes && !self.backups.is_empty() {
            p.replicated = true;
            p.acks_left = self.backups.len();
            let msg = Msg::Replicate {
                input: input.clone(),
            };
            for &b in &self.backups {
                io.send(b, owner, &msg);
            }
        } else {
            Self::vote_yes(io, coordinator, owner, p);
        }
    }

    /// Backup `src` acknowledged `owner`'s part `p`: once all have, the primary votes yes.
    /// Anything else (not a backup, nothing awaited) is malformed.
    pub(super) fn on_replicated(
        &self,
        io: &mut Io<'_>,
        src: ProcId,
        owner: Owner,
        coordinator: ProcId,
        p: &mut Prepared,
    ) {
        if !self.backups.contains(&src) || p.voted() {
            io.stats.malformed += 1;
            return;
        }
        p.acks_left -= 1;
        if p.voted() {
            Self::vote_yes(io, coordinator, owner, p);
        }
    }

    fn vote_yes(io: &mut Io<'_>, coordinator: ProcId, owner: Owner, p: &mut Prepared) {
        let vote = Msg::Vote {
            stamp: p.stamp,
            yes: true,
            result: p.result.take(),
        };
        io.send(coordinator, owner, &vote);
    }

    /// Votes no (nothing of the part is kept).
    pub(super) fn vote_no(&mut self, io: &mut Io<'_>, coordinator: ProcId, owner: Owner) {
        let vote = Msg::Vote {
            stamp: self.stamps.next(io.clock),
            yes: false,
            result: None,
        };
        io.send(coordinator, owner, &vote);
    }

    /// `owner`'s part committed at `key`: the backups apply it (in this order: the primary's
    /// commit order), and later stamps go above `key`.
    pub(super) fn committed(&mut self, io: &mut Io<'_>, owner: Owner, key: u64, p: &Prepared) {
        self.stamps.witness(key);
        io.stats.parts_applied += 1;
        if p.replicated {
            for &b in &self.backups {
                io.send(b, owner, &Msg::Apply);
            }
        }
    }

    /// `owner`'s prepared part aborted: the backups forget it.
    pub(super) fn aborted(&self, io: &mut Io<'_>, owner: Owner, p: &Prepared) {
        if p.replicated {
            for &b in &self.backups {
                io.send(b, owner, &Msg::Discard);
            }
        }
    }
}

/// A shard's primary under one protocol: what [`TwoPcProcess`] hands the messages for a
/// primary to ([`Msg::Lock`], [`Msg::Execute`], [`Msg::Prepare`], [`Msg::Commit`],
/// [`Msg::Abort`], [`Msg::Replicated`]).
pub trait Primary: std::fmt::Debug {
    /// Its protocol.
    const PROTOCOL: Protocol;
    /// A primary of `base`'s shard, with no lock held and no part open.
    fn new(base: PrimaryBase) -> Self;
    /// The shard and replication.
    fn base(&self) -> &PrimaryBase;
    /// Handles one message from a coordinator or a backup (anything unexpected is counted as
    /// malformed, never a panic).
    fn on_message(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner, msg: Msg);
    /// Rows locked (or waited for) and parts open: both 0 once every transaction finished.
    fn open(&self) -> (usize, usize);
    /// Asserts its internal invariants (debug builds, after every input).
    fn invariants(&self);
}

/// A backup of a shard: the parts its primary prepared, applied when they commit.
///
/// **Why backups reach the primary's state.** The primary forwards each commit to its backups
/// as it commits, and FIFO delivery keeps that order, so a backup executes the committed parts
/// in the primary's commit order, from the same initial rows. At the primary, a part reads and
/// writes only rows it holds locked ([`Shard::access`] is exactly what [`Shard::execute`]
/// touches), and keeps its locks until its commit (strict 2PL; OCC's prepare-to-commit locks).
/// So two committed parts that conflict (share a row, one writing it) took effect at the
/// primary in their commit order — the later one locked the row only after the earlier
/// committed — and two that do not conflict commute. Re-executing in commit order therefore
/// gives each part the rows it had at the primary, hence the same writes: the backup's rows
/// equal the primary's committed rows after every commit. Aborted parts are undone at the
/// primary (2PL) or never applied (OCC), and discarded at the backup.
#[derive(Debug)]
pub struct Backup {
    id: u32,
    primary: ProcId,
    shard: Shard,
    /// Replicated parts awaiting their commit or abort.
    prepared: BTreeMap<Owner, TxnInput>,
}

impl Backup {
    fn new(cfg: &TpccConfig, id: u32) -> Backup {
        let w = &cfg.workload;
        Backup {
            id,
            primary: ProcId(id),
            shard: Shard::populate(&w.scale, w.seed, &cfg.layout, id),
            prepared: BTreeMap::new(),
        }
    }

    /// Handles a message from the primary (only the primary's are accepted).
    fn on_message(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner, msg: Msg) {
        if src != self.primary {
            io.stats.malformed += 1;
            return;
        }
        match msg {
            Msg::Replicate { input }
                if !self.prepared.contains_key(&owner) && self.prepared.len() < PARTS_MAX =>
            {
                self.prepared.insert(owner, input);
                io.send(src, owner, &Msg::Replicated);
            }
            Msg::Apply => match self.prepared.remove(&owner) {
                Some(input) => {
                    self.shard.execute(&input);
                    io.stats.parts_applied += 1;
                }
                None => io.stats.malformed += 1,
            },
            Msg::Discard => {
                if self.prepared.remove(&owner).is_none() {
                    io.stats.malformed += 1;
                }
            }
            _ => io.stats.malformed += 1,
        }
    }
}

/// What a process keeps of a shard.
#[derive(Debug)]
enum Role<P> {
    Primary(P),
    Backup(Backup),
    /// Only an initiator.
    None,
}

/// Where a coordinator's transaction is.
#[derive(Debug)]
enum Phase {
    /// Aborted: tried again from `at`.
    Backoff { at: Instant },
    /// OCC's execution: the primaries that have not answered, what each shard answered.
    Execute {
        waiting: Vec<ProcId>,
        results: BTreeMap<u32, PartResult>,
        versions: BTreeMap<u32, Vec<u64>>,
    },
    /// 2PC's prepare: the primaries that have not voted; the results (2PL: from the votes; OCC:
    /// from the execution); the largest yes stamp so far.
    Prepare {
        waiting: Vec<ProcId>,
        results: BTreeMap<u32, PartResult>,
        key: u64,
    },
    /// Committed at `key`: the primaries that have not acknowledged.
    Commit {
        waiting: Vec<ProcId>,
        results: BTreeMap<u32, PartResult>,
        key: u64,
    },
}

impl Phase {
    /// Whether `msg` is the answer this phase waits for under `protocol`: `None` while backing
    /// off (an answer to the attempt aborted).
    fn answered_by(&self, msg: &Msg, protocol: Protocol) -> Option<bool> {
        let lock = protocol == Protocol::Lock;
        Some(match (self, msg) {
            (Phase::Backoff { .. }, _) => return None,
            (Phase::Execute { .. }, Msg::Executed { .. }) => !lock,
            // 2PL's yes carries the part's result; OCC's came with the execution.
            (Phase::Prepare { .. }, Msg::Vote { yes, result, .. }) => {
                !yes || result.is_some() == lock
            }
            // OCC's acknowledgement carries the result applied.
            (Phase::Commit { .. }, Msg::CommitAck { result }) => result.is_some() != lock,
            _ => false,
        })
    }

    /// The primaries the phase waits for.
    fn waiting_mut(&mut self) -> Option<&mut Vec<ProcId>> {
        match self {
            Phase::Backoff { .. } => None,
            Phase::Execute { waiting, .. }
            | Phase::Prepare { waiting, .. }
            | Phase::Commit { waiting, .. } => Some(waiting),
        }
    }
}

/// A coordinator's transaction.
#[derive(Debug)]
struct Txn {
    input: TxnInput,
    /// Its first attempt's call: its real-time start and its wait-die priority.
    call: Instant,
    attempt: u32,
    /// The primaries of the shards it touches, ascending.
    primaries: Vec<ProcId>,
    phase: Phase,
}

/// A process of a baseline: initiator and coordinator of its own transactions and, by
/// [`super::db::placement`], a shard's primary (replica 0) or backup. [`super::lock`] and
/// [`super::occ`] name it for their primaries.
#[derive(Debug)]
pub struct TwoPcProcess<P> {
    cfg: TpccConfig,
    gen: TxnGen,
    role: Role<P>,
    txns: BTreeMap<u64, Txn>,
    /// Aborted transactions by the instant they are tried again.
    backoff: BTreeSet<(Instant, u64)>,
    seq: u64,
    started: bool,
    out: VecDeque<AppSend>,
    committed: VecDeque<TpccCommitted>,
    now: Instant,
    stats: TpccStats,
}

impl<P: Primary> TwoPcProcess<P> {
    /// A process; `gen` draws its transactions (its home warehouse: see
    /// [`TpccConfig::home_warehouse`]). Replica 0 of a shard is its primary, the others its
    /// backups; each loads the shard from the workload's seed. Of the configuration,
    /// `reply_keep_ns` and `retry_ns` are unused (nothing is lost or refused).
    pub fn new(cfg: TpccConfig, gen: TxnGen) -> TwoPcProcess<P> {
        let role = match cfg.layout.placement(cfg.me) {
            Placement::Replica { shard, replica: 0 } => {
                Role::Primary(P::new(PrimaryBase::new(&cfg, shard)))
            }
            Placement::Replica { shard, .. } => Role::Backup(Backup::new(&cfg, shard)),
            Placement::Initiator => Role::None,
        };
        assert!(
            !matches!(role, Role::None) || cfg.window > 0,
            "a process that neither keeps a shard nor initiates"
        );
        TwoPcProcess {
            cfg,
            gen,
            role,
            txns: BTreeMap::new(),
            backoff: BTreeSet::new(),
            seq: 0,
            started: false,
            out: VecDeque::new(),
            committed: VecDeque::new(),
            now: Instant(0),
            stats: TpccStats::default(),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &TpccConfig {
        &self.cfg
    }

    /// Transactions in flight (backing off included).
    pub fn inflight(&self) -> usize {
        self.txns.len()
    }

    /// Rows its primary has locked or queued for, and parts open at its primary or backup:
    /// `(0, 0)` once every transaction finished.
    pub fn open(&self) -> (usize, usize) {
        match &self.role {
            Role::Primary(p) => p.open(),
            Role::Backup(b) => (0, b.prepared.len()),
            Role::None => (0, 0),
        }
    }

    /// Its primary, if it is one (tests plant flaws in it).
    #[cfg(test)]
    pub(super) fn primary_mut(&mut self) -> Option<&mut P> {
        match &mut self.role {
            Role::Primary(p) => Some(p),
            _ => None,
        }
    }

    /// What holds after every input (checked in debug builds).
    fn invariants(&self) {
        assert!(self.txns.len() <= self.cfg.window as usize);
        let backing_off = self
            .txns
            .iter()
            .filter(|(_, t)| matches!(t.phase, Phase::Backoff { .. }))
            .count();
        assert_eq!(backing_off, self.backoff.len());
        for &(at, txn) in &self.backoff {
            assert!(
                matches!(self.txns.get(&txn), Some(t) if matches!(t.phase, Phase::Backoff { at: a } if a == at)),
                "{txn:#x}"
            );
        }
        for (txn, t) in &self.txns {
            assert!(t.attempt >= 1 && !t.primaries.is_empty(), "{txn:#x}");
            let waiting = match &t.phase {
                Phase::Backoff { .. } => continue,
                Phase::Execute { waiting, .. }
                | Phase::Prepare { waiting, .. }
                | Phase::Commit { waiting, .. } => waiting,
            };
            assert!(waiting.iter().all(|p| t.primaries.contains(p)), "{txn:#x}");
        }
        match &self.role {
            Role::Primary(p) => p.invariants(),
            Role::Backup(b) => assert!(b.prepared.len() <= PARTS_MAX),
            Role::None => {}
        }
    }

    fn io(&mut self, clock: u64) -> (Io<'_>, &mut Role<P>) {
        let io = Io {
            out: &mut self.out,
            stats: &mut self.stats,
            clock,
        };
        (io, &mut self.role)
    }

    fn send(&mut self, dst: ProcId, owner: Owner, msg: &Msg) {
        self.io(0).0.send(dst, owner, msg);
    }

    // --- Coordinator ---------------------------------------------------------------------

    fn fill_window(&mut self) {
        while self.started && self.now < self.cfg.stop && self.txns.len() < self.cfg.window as usize
        {
            let txn = txn_id(self.cfg.me, self.seq);
            self.seq += 1;
            let input = self.gen.next_txn();
            debug_assert!(input.is_valid(&self.cfg.workload.scale), "{input:?}");
            let layout = self.cfg.layout;
            let primaries = layout
                .shards_of(&input)
                .into_iter()
                .filter_map(|s| layout.replicas_of(s).next())
                .collect();
            let t = Txn {
                input,
                call: self.now,
                attempt: 0,
                primaries,
                // Replaced at once by its first attempt's phase.
                phase: Phase::Backoff { at: self.now },
            };
            self.txns.insert(txn, t);
            self.start_attempt(txn);
        }
    }

    /// Sends the next attempt of `txn` to its primaries: 2PL's lock request, OCC's execution.
    fn start_attempt(&mut self, txn: u64) {
        let Some(t) = self.txns.get_mut(&txn) else {
            return;
        };
        t.attempt += 1;
        let owner = (txn, t.attempt);
        let input = t.input.clone();
        let waiting = t.primaries.clone();
        let msg = match P::PROTOCOL {
            Protocol::Lock => {
                t.phase = Phase::Prepare {
                    waiting: waiting.clone(),
                    results: BTreeMap::new(),
                    key: 0,
                };
                Msg::Lock {
                    prio_ns: t.call.as_nanos(),
                    input,
                }
            }
            Protocol::Occ => {
                t.phase = Phase::Execute {
                    waiting: waiting.clone(),
                    results: BTreeMap::new(),
                    versions: BTreeMap::new(),
                };
                Msg::Execute { input }
            }
        };
        let bytes = encode(owner, &msg);
        for p in waiting {
            self.out.push_back(AppSend {
                tag: txn,
                reliable: false,
                ordered: true,
                parts: vec![(p, bytes.clone())],
            });
        }
    }

    /// A primary's answer to one of this process's transactions.
    fn on_answer(&mut self, src: ProcId, owner: Owner, msg: Msg) {
        let layout = self.cfg.layout;
        let Some(t) = self.txns.get_mut(&owner.0).filter(|t| t.attempt == owner.1) else {
            self.stats.stale_replies += 1;
            return;
        };
        let Some(shard) = layout.shard_of_proc(src) else {
            self.stats.malformed += 1;
            return;
        };
        let Some(fits) = t.phase.answered_by(&msg, P::PROTOCOL) else {
            // A late answer of an attempt aborted, not yet tried again.
            self.stats.stale_replies += 1;
            return;
        };
        let Some(waiting) = t.phase.waiting_mut().filter(|_| fits) else {
            self.stats.malformed += 1;
            return;
        };
        let Some(i) = waiting.iter().position(|&p| p == src) else {
            self.stats.stale_replies += 1;
            return;
        };
        waiting.swap_remove(i);
        let done = waiting.is_empty();
        match (&mut t.phase, msg) {
            (
                Phase::Execute {
                    results, versions, ..
                },
                Msg::Executed {
                    result,
                    versions: v,
                },
            ) => {
                results.insert(shard, result);
                versions.insert(shard, v);
                if done {
                    self.send_prepare(owner);
                }
            }
            (Phase::Prepare { .. }, Msg::Vote { yes: false, .. }) => self.abort(owner, src),
            (Phase::Prepare { results, key, .. }, Msg::Vote { stamp, result, .. }) => {
                results.extend(result.map(|r| (shard, r)));
                *key = (*key).max(stamp);
                if done {
                    self.commit(owner);
                }
            }
            (Phase::Commit { results, .. }, Msg::CommitAck { result }) => {
                if result.is_some_and(|r| results.get(&shard) != Some(&r)) {
                    // OCC: the commit applied something else than the execution returned.
                    self.stats.result_mismatches += 1;
                }
                if done {
                    self.complete(owner.0);
                }
            }
            _ => unreachable!("the message matches the phase: checked above"),
        }
    }

    /// OCC: every primary executed; each is asked to prepare with the versions it read.
    fn send_prepare(&mut self, owner: Owner) {
        let Some(t) = self.txns.get_mut(&owner.0) else {
            return;
        };
        let placeholder = Phase::Backoff { at: Instant(0) };
        let Phase::Execute {
            results, versions, ..
        } = std::mem::replace(&mut t.phase, placeholder)
        else {
            unreachable!("called at the end of the execution")
        };
        t.phase = Phase::Prepare {
            waiting: t.primaries.clone(),
            results,
            key: 0,
        };
        let layout = self.cfg.layout;
        let input = t.input.clone();
        for p in t.primaries.clone() {
            let shard = layout.shard_of_proc(p).unwrap_or(u32::MAX);
            let msg = Msg::Prepare {
                input: input.clone(),
                versions: versions.get(&shard).cloned().unwrap_or_default(),
            };
            self.send(p, owner, &msg);
        }
    }

    /// Every primary voted yes: commit at the largest stamp.
    fn commit(&mut self, owner: Owner) {
        let Some(t) = self.txns.get_mut(&owner.0) else {
            return;
        };
        let Phase::Prepare { results, key, .. } =
            std::mem::replace(&mut t.phase, Phase::Backoff { at: Instant(0) })
        else {
            unreachable!("called at the end of the prepare")
        };
        t.phase = Phase::Commit {
            waiting: t.primaries.clone(),
            results,
            key,
        };
        for p in t.primaries.clone() {
            self.send(p, owner, &Msg::Commit { key });
        }
    }

    /// `no` voted no: every other primary of the attempt is told to abort (FIFO: after the
    /// request it may not have handled yet), and the transaction backs off.
    fn abort(&mut self, owner: Owner, no: ProcId) {
        self.stats.aborts += 1;
        let Some(t) = self.txns.get_mut(&owner.0) else {
            return;
        };
        if self.now >= self.cfg.stop {
            // Issuing is over: an aborted attempt is not tried again, so that a run settles.
            // Under the hot warehouse rows at hundreds of processes, thousands of transactions
            // in flight die and retry every few hundred µs; the oldest get through one at a
            // time behind that storm (2PL at 512 processes: 48 committed in the 300 ms after
            // issuing stopped). Given up, it took no effect; throughput counts only what
            // committed while issuing, so it is unchanged.
            let primaries = t.primaries.clone();
            self.txns.remove(&owner.0);
            self.stats.given_up += 1;
            for p in primaries {
                if p != no {
                    self.send(p, owner, &Msg::Abort);
                }
            }
            return;
        }
        // Randomized so that conflicting coordinators do not retry in lockstep.
        let spread = 1000 + mix64(owner.0 ^ u64::from(owner.1) << 48) % 1000;
        let wait = BACKOFF_BASE_NS << (owner.1 - 1).min(BACKOFF_DOUBLINGS_MAX);
        let at = self.now + wait * spread / 1000;
        t.phase = Phase::Backoff { at };
        self.backoff.insert((at, owner.0));
        for p in t.primaries.clone() {
            if p != no {
                self.send(p, owner, &Msg::Abort);
            }
        }
    }

    /// Every primary acknowledged the commit: the transaction is done.
    fn complete(&mut self, txn: u64) {
        let Some(t) = self.txns.remove(&txn) else {
            return;
        };
        let Phase::Commit { results, key, .. } = t.phase else {
            unreachable!("completed in the commit phase")
        };
        match t.input.kind() {
            TpccTxnKind::NewOrder => {
                self.stats.committed_new_order += 1;
                let rolled_back = results
                    .values()
                    .any(|r| matches!(r, PartResult::NewOrder(p) if p.rolled_back));
                self.stats.rolled_back += u64::from(rolled_back);
            }
            TpccTxnKind::Payment => self.stats.committed_payment += 1,
        }
        self.committed.push_back(TpccCommitted {
            txn,
            client: self.cfg.me.0,
            key,
            seq: 0,
            input: t.input,
            results: results.into_iter().collect(),
            call_ns: t.call.as_nanos(),
            return_ns: self.now.as_nanos(),
            attempts: t.attempt,
        });
    }

    fn on_timeout(&mut self) {
        if !self.started && self.now >= self.cfg.start && self.cfg.window > 0 {
            self.started = true;
        }
        while let Some(&(at, txn)) = self.backoff.first() {
            if at > self.now {
                break;
            }
            self.backoff.pop_first();
            self.start_attempt(txn);
        }
    }

    fn on_deliver(&mut self, src: ProcId, clock: u64, payload: &[u8]) {
        let Some((owner, msg)) = decode(payload) else {
            self.stats.malformed += 1;
            return;
        };
        match msg {
            Msg::Executed { .. } | Msg::Vote { .. } | Msg::CommitAck { .. } => {
                self.on_answer(src, owner, msg);
            }
            Msg::Replicate { .. } | Msg::Apply | Msg::Discard => match self.io(clock) {
                (mut io, Role::Backup(b)) => b.on_message(&mut io, src, owner, msg),
                (io, _) => io.stats.malformed += 1,
            },
            _ => match self.io(clock) {
                (mut io, Role::Primary(p)) => p.on_message(&mut io, src, owner, msg),
                (io, _) => io.stats.malformed += 1,
            },
        }
    }
}

impl<P: Primary> TpccApp for TwoPcProcess<P> {
    fn poll_committed(&mut self) -> Option<TpccCommitted> {
        self.committed.pop_front()
    }

    fn stats(&self) -> &TpccStats {
        &self.stats
    }

    /// No transaction of its own in flight, and nothing open at its primary or backup (no lock,
    /// no part): true everywhere once a run drained.
    fn idle(&self) -> bool {
        self.txns.is_empty() && self.open() == (0, 0)
    }

    /// The transactions it decided to commit whose acknowledgements have not all come: bound
    /// to take effect at every primary. (An undrained run also leaves parts prepared and not
    /// decided — 2PL executed them in place, to be undone if they abort — and commits not yet
    /// applied at backups: compare replicas only after draining.)
    fn unfinished(&self) -> Vec<TpccCommitted> {
        self.txns
            .iter()
            .filter_map(|(&txn, t)| match t.phase {
                Phase::Commit { key, .. } => Some(TpccCommitted {
                    txn,
                    client: self.cfg.me.0,
                    key,
                    seq: 0,
                    input: t.input.clone(),
                    results: Vec::new(),
                    call_ns: t.call.as_nanos(),
                    return_ns: u64::MAX,
                    attempts: t.attempt,
                }),
                _ => None,
            })
            .collect()
    }

    fn shard(&self) -> Option<(u32, &Shard)> {
        match &self.role {
            Role::Primary(p) => Some((p.base().id, &p.base().shard)),
            Role::Backup(b) => Some((b.id, &b.shard)),
            Role::None => None,
        }
    }
}

impl<P: Primary> App for TwoPcProcess<P> {
    fn handle(&mut self, now: Instant, input: AppInput<'_>) {
        self.now = self.now.max(now);
        match input {
            AppInput::Deliver { src, payload, .. } => self.on_deliver(src, now.as_nanos(), payload),
            AppInput::Timeout => self.on_timeout(),
            // Direct messages are neither stamped, refused nor lost, and failures are not
            // handled (see the module's doc).
            _ => {}
        }
        self.fill_window();
        if cfg!(debug_assertions) {
            self.invariants();
        }
    }

    fn poll_send(&mut self) -> Option<AppSend> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let start = (!self.started && self.cfg.window > 0).then_some(self.cfg.start);
        let retry = self.backoff.first().map(|b| b.0);
        start.into_iter().chain(retry).min()
    }
}
