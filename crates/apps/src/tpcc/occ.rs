//! [`TpccOccProcess`]: Fig. 15's OCC baseline (§7.3.2) — optimistic concurrency control with
//! two-phase commit and primary-backup replication, on direct messages ([`super::twopc`] has
//! the coordinator, the replication, the backups and the serialization order).
//!
//! * **Execution.** The coordinator asks each touched shard's primary to run its part on the
//!   current rows, taking no lock and changing nothing ([`Msg::Execute`]: executed in place and
//!   undone at once, [`Shard::execute_undoable`]); the primary answers with the part's result
//!   and the version of every row the part reads or writes ([`Shard::access`]).
//! * **Prepare** (2PC's first phase). Each primary, in one step, locks the part's rows **without
//!   waiting** — exclusive for a row written, shared for a row only read; a row locked against
//!   it makes it vote no — and validates that every row's version is still the one the
//!   execution saw (else no); then it replicates the prepared part to its backups, waits for
//!   their acknowledgements and votes yes. The step's stamp is the key's candidate.
//! * **Commit.** The primary applies the part (executes it again: nothing it touches changed
//!   since the execution, so the result is the execution's — the coordinator compares, and
//!   counts a difference in [`super::TpccStats::result_mismatches`]), bumps the versions of the
//!   rows written, unlocks, forwards the commit to the backups and acknowledges. On abort it
//!   unlocks and tells the backups to discard. Any no vote aborts the attempt; the transaction
//!   is tried again, executed afresh, after a randomized exponential backoff.
//!
//! **Why rows only read are locked at prepare too** (shared). If a prepare only validated them,
//! two transactions could each read at one shard a row the other writes at another, validate
//! both reads before either commits, and both commit: write skew across shards, not
//! serializable. Holding a shared lock from the validation to the commit means that at the
//! largest prepare stamp every row the transaction touches, at every shard, is locked by it and
//! at the version it executed on — the instant it is serialized at. (It also makes a New-Order's
//! read of the hot warehouse row block Payments' prepares until it commits, as the paper says:
//! "in 2PL and OCC commit, a locked object cannot be released until the TXN completes".)
//!
//! **Versions** count the commits that wrote a row; they are kept beside the shard, for the rows
//! written so far (a row never written is at version 0), so the table is bounded by the
//! shard's rows.

use super::db::{Access, RowKey};
use super::twopc::{
    Io, Msg, Owner, Prepared, Primary, PrimaryBase, Protocol, TwoPcProcess, PARTS_MAX,
};
use super::TxnInput;
use onepipe_proto::ProcId;
use std::collections::BTreeMap;

#[cfg(doc)]
use super::db::Shard;

/// A process of the OCC baseline: initiator, coordinator and (by placement) a shard's primary
/// or backup. Built with `TpccOccProcess::new(cfg, gen)`.
pub type TpccOccProcess = TwoPcProcess<OccPrimary>;

/// A row's lock, held by prepared parts from their prepare to their commit or abort.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RowLock {
    /// One part writes it.
    Write(Owner),
    /// These parts read it.
    Read(Vec<Owner>),
}

/// A prepared part at its primary.
#[derive(Debug)]
struct Part {
    coordinator: ProcId,
    input: TxnInput,
    /// [`Shard::access`] of the input: all locked by it.
    rows: Vec<(RowKey, Access)>,
    prep: Prepared,
}

/// A shard's primary under OCC: the rows' versions and locks, the prepared parts.
#[derive(Debug)]
pub struct OccPrimary {
    base: PrimaryBase,
    locks: BTreeMap<RowKey, RowLock>,
    /// The version of each row written at least once (absent: 0).
    versions: BTreeMap<RowKey, u64>,
    parts: BTreeMap<Owner, Part>,
    /// A planted flaw, for the tests that show the checker catches a wrong protocol: the
    /// prepare does not validate versions.
    #[cfg(test)]
    pub(super) flaw_unvalidated: bool,
}

impl OccPrimary {
    fn version(&self, row: RowKey) -> u64 {
        self.versions.get(&row).copied().unwrap_or(0)
    }

    /// Whether `row` is locked against an `access` to it.
    fn locked_against(&self, row: RowKey, access: Access) -> bool {
        match self.locks.get(&row) {
            None => false,
            Some(RowLock::Write(_)) => true,
            Some(RowLock::Read(_)) => access == Access::Write,
        }
    }

    /// Execution: the part's result and its rows' versions, nothing changed, nothing locked.
    fn on_execute(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner, input: TxnInput) {
        if !self.base.accepts(io, src, owner, &input) {
            return;
        }
        // Rows locked by prepared parts are read as committed: those parts apply only at their
        // commit, which bumps the versions this execution reports, so its prepare will fail.
        let (result, undo) = self.base.shard.execute_undoable(&input);
        self.base.shard.undo(undo);
        let versions = self
            .base
            .shard
            .access(&input)
            .iter()
            .map(|&(row, _)| self.version(row))
            .collect();
        io.send(src, owner, &Msg::Executed { result, versions });
    }

    /// Prepare: lock without waiting, validate, replicate, vote.
    fn on_prepare(
        &mut self,
        io: &mut Io<'_>,
        src: ProcId,
        owner: Owner,
        input: TxnInput,
        versions: Vec<u64>,
    ) {
        if !self.base.accepts(io, src, owner, &input) {
            return;
        }
        if self.parts.contains_key(&owner) {
            io.stats.malformed += 1;
            return;
        }
        let rows = self.base.shard.access(&input);
        if versions.len() != rows.len() {
            io.stats.malformed += 1;
            self.base.vote_no(io, src, owner);
            return;
        }
        if self.parts.len() >= PARTS_MAX {
            self.base.vote_no(io, src, owner);
            return;
        }
        if rows.iter().any(|&(row, a)| self.locked_against(row, a)) {
            io.stats.lock_conflicts += 1;
            self.base.vote_no(io, src, owner);
            return;
        }
        #[cfg(test)]
        let validate = !self.flaw_unvalidated;
        #[cfg(not(test))]
        let validate = true;
        let changed = rows
            .iter()
            .zip(&versions)
            .any(|(&(row, _), &v)| self.version(row) != v);
        if validate && changed {
            io.stats.validation_failures += 1;
            self.base.vote_no(io, src, owner);
            return;
        }
        for &(row, a) in &rows {
            match (self.locks.get_mut(&row), a) {
                (None, Access::Write) => {
                    self.locks.insert(row, RowLock::Write(owner));
                }
                (None, Access::Read) => {
                    self.locks.insert(row, RowLock::Read(vec![owner]));
                }
                (Some(RowLock::Read(readers)), Access::Read) => readers.push(owner),
                (Some(_), _) => unreachable!("{row:?} was checked free for {owner:?}"),
            }
        }
        // Locked and validated: the instant this transaction may be serialized at, here.
        let stamp = self.base.stamps.next(io.clock);
        let writes = rows.iter().any(|r| r.1 == Access::Write);
        let mut prep = Prepared::new(stamp, None);
        self.base
            .replicate(io, owner, src, &input, writes, &mut prep);
        let part = Part {
            coordinator: src,
            input,
            rows,
            prep,
        };
        self.parts.insert(owner, part);
    }

    /// Unlocks every row of `part` of `owner`.
    fn unlock(&mut self, owner: Owner, part: &Part) {
        for &(row, _) in &part.rows {
            let free = match self.locks.get_mut(&row) {
                Some(RowLock::Write(o)) => {
                    assert_eq!(*o, owner, "{row:?}");
                    true
                }
                Some(RowLock::Read(readers)) => {
                    let before = readers.len();
                    readers.retain(|&o| o != owner);
                    assert_eq!(readers.len() + 1, before, "{owner:?} read {row:?}");
                    readers.is_empty()
                }
                None => unreachable!("{owner:?} locked {row:?}"),
            };
            if free {
                self.locks.remove(&row);
            }
        }
    }

    fn on_replicated(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner) {
        match self.parts.get_mut(&owner) {
            Some(p) => self
                .base
                .on_replicated(io, src, owner, p.coordinator, &mut p.prep),
            // An acknowledgement of a part aborted meanwhile.
            None => io.stats.stale_replies += 1,
        }
    }

    /// Commit: apply, bump the versions written, unlock, forward, acknowledge with the result.
    fn on_commit(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner, key: u64) {
        let voted = self
            .parts
            .get(&owner)
            .is_some_and(|p| p.coordinator == src && p.prep.voted());
        let Some(part) = self.parts.remove(&owner).filter(|_| voted) else {
            io.stats.malformed += 1;
            return;
        };
        let result = self.base.shard.execute(&part.input);
        for &(row, a) in &part.rows {
            if a == Access::Write {
                *self.versions.entry(row).or_insert(0) += 1;
            }
        }
        self.unlock(owner, &part);
        self.base.committed(io, owner, key, &part.prep);
        let ack = Msg::CommitAck {
            result: Some(result),
        };
        io.send(src, owner, &ack);
    }

    /// Abort: unlock; the backups discard the part.
    fn on_abort(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner) {
        match self.parts.get(&owner) {
            // It voted no here: nothing is left of it.
            None => {}
            Some(p) if p.coordinator != src => io.stats.malformed += 1,
            Some(_) => {
                if let Some(part) = self.parts.remove(&owner) {
                    self.unlock(owner, &part);
                    self.base.aborted(io, owner, &part.prep);
                }
            }
        }
    }
}

impl Primary for OccPrimary {
    const PROTOCOL: Protocol = Protocol::Occ;

    fn new(base: PrimaryBase) -> OccPrimary {
        OccPrimary {
            base,
            locks: BTreeMap::new(),
            versions: BTreeMap::new(),
            parts: BTreeMap::new(),
            #[cfg(test)]
            flaw_unvalidated: false,
        }
    }

    fn base(&self) -> &PrimaryBase {
        &self.base
    }

    fn on_message(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner, msg: Msg) {
        match msg {
            Msg::Execute { input } => self.on_execute(io, src, owner, input),
            Msg::Prepare { input, versions } => self.on_prepare(io, src, owner, input, versions),
            Msg::Commit { key } => self.on_commit(io, src, owner, key),
            Msg::Abort => self.on_abort(io, src, owner),
            Msg::Replicated => self.on_replicated(io, src, owner),
            _ => io.stats.malformed += 1,
        }
    }

    fn open(&self) -> (usize, usize) {
        (self.locks.len(), self.parts.len())
    }

    fn invariants(&self) {
        let mut locked = 0;
        for (&owner, p) in &self.parts {
            for &(row, a) in &p.rows {
                let ok = match (self.locks.get(&row), a) {
                    (Some(RowLock::Write(o)), Access::Write) => *o == owner,
                    (Some(RowLock::Read(rs)), Access::Read) => rs.contains(&owner),
                    _ => false,
                };
                assert!(ok, "{owner:?} does not hold {row:?} for {a:?}");
                locked += 1;
            }
        }
        // Nothing locked by a part no longer open.
        let entries: usize = self
            .locks
            .values()
            .map(|l| match l {
                RowLock::Write(_) => 1,
                RowLock::Read(rs) => {
                    assert!(!rs.is_empty());
                    rs.len()
                }
            })
            .sum();
        assert_eq!(entries, locked);
        assert!(self.parts.len() <= PARTS_MAX);
    }
}
