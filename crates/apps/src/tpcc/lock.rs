//! [`TpccLockProcess`]: Fig. 15's 2PL baseline (§7.3.2) — strict two-phase locking with
//! two-phase commit and primary-backup replication, on direct messages ([`super::twopc`] has
//! the coordinator, the replication, the backups and the serialization order).
//!
//! A shard's **primary**, asked to prepare a transaction's part ([`Msg::Lock`]), takes a lock on
//! each row the part touches ([`Shard::access`]'s rows: a warehouse row, a district with what is
//! kept with it, a stock row), one after the other in key order: **shared** for a row only read
//! — a New-Order's warehouse row (`W_TAX`), a rolled-back New-Order's district — **exclusive**
//! for a row written — a Payment's warehouse row (`W_YTD`): the hot spot the paper names ("each
//! Payment TXN updates its corresponding warehouse entry and each New-Order reads it"). Once it
//! holds them all it executes the part **in place**, keeping an [`Undo`] of the rows written (no
//! other part can see them: they are locked exclusively), replicates the prepared part to its
//! backups, waits for both acknowledgements and votes yes with the part's result. On commit it
//! keeps the execution, forwards the commit to the backups, releases the locks (waking waiters)
//! and acknowledges; on abort it undoes, tells the backups to discard, releases. Locks are held
//! until the transaction's outcome is known (strictness: "a locked object cannot be released
//! until the TXN completes").
//!
//! **Deadlocks: wait-die** (Rosenkrantz, Stearns and Lewis, 1978). A transaction's priority is
//! its first attempt's call time, then its id — kept across attempts, so a transaction that
//! keeps dying ages until it is the oldest and no longer dies. A request that conflicts with a
//! holder, or finds others queued, **waits** in the lock's FIFO queue if it is older than every
//! conflicting holder and every waiter, else it **dies**: the part releases what it holds and
//! votes no, and the coordinator aborts the attempt and tries again after a backoff. Waits only
//! ever go from older to younger transactions, so there is no cycle: no deadlock, and no
//! timeout needed. Why not no-wait: under the warehouse row's contention, no-wait aborts every
//! conflicting request, old or young, so a transaction may starve; wait-die lets the oldest
//! through and queues the others behind the hot row, which is the behaviour the figure
//! measures (throughput bounded by how long the hot row stays locked).
//!
//! A New-Order with an unused item rolls back deterministically (clause 2.4.2.3): its parts
//! change nothing, lock only what they read, and commit as a transaction.

use super::db::{Access, RowKey, Undo};
use super::twopc::{
    Io, Msg, Owner, Prepared, Primary, PrimaryBase, Protocol, TwoPcProcess, PARTS_MAX,
};
use super::TxnInput;
use onepipe_proto::ProcId;
use std::collections::{BTreeMap, VecDeque};

#[cfg(doc)]
use super::db::Shard;

/// A process of the 2PL baseline: initiator, coordinator and (by placement) a shard's primary
/// or backup. Built with `TpccLockProcess::new(cfg, gen)`.
pub type TpccLockProcess = TwoPcProcess<LockPrimary>;

/// Wait-die priority: (first call ns, transaction id); lower is older.
pub type Prio = (u64, u64);

/// What a lock request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Held now.
    Granted,
    /// Queued: older than every conflicting holder and every waiter.
    Waits,
    /// Refused: younger than one of them (wait-die).
    Dies,
}

/// A holder of a lock, or a waiter for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Holder {
    owner: Owner,
    access: Access,
    prio: Prio,
}

/// One row's lock.
#[derive(Debug, Default)]
struct Lock {
    /// Readers, or one writer.
    holders: Vec<Holder>,
    /// Waiters, granted from the front; each came older than all before it.
    queue: VecDeque<Holder>,
}

/// Whether two accesses to one row conflict: unless both only read.
fn conflict(a: Access, b: Access) -> bool {
    a == Access::Write || b == Access::Write
}

/// A primary's lock table, with wait-die. A row has an entry only while held or waited for.
#[derive(Debug, Default)]
pub struct LockTable {
    rows: BTreeMap<RowKey, Lock>,
}

impl LockTable {
    /// `owner` (of priority `prio`) asks for `row` to `access` it. Granted at once if nobody
    /// waits and no holder conflicts; else wait-die: it waits if older than every conflicting
    /// holder and every waiter (all of which are then younger: waits go from old to young),
    /// else it dies.
    pub fn request(&mut self, row: RowKey, owner: Owner, access: Access, prio: Prio) -> Outcome {
        let h = Holder {
            owner,
            access,
            prio,
        };
        let lock = self.rows.entry(row).or_default();
        debug_assert!(
            !lock
                .holders
                .iter()
                .chain(&lock.queue)
                .any(|x| x.owner == owner),
            "{owner:?} asks twice for {row:?}"
        );
        let conflicting = |x: &&Holder| conflict(x.access, access);
        if lock.queue.is_empty() && !lock.holders.iter().any(|x| conflict(x.access, access)) {
            lock.holders.push(h);
            return Outcome::Granted;
        }
        let older = lock
            .holders
            .iter()
            .filter(conflicting)
            .chain(&lock.queue)
            .all(|x| prio < x.prio);
        if older {
            lock.queue.push_back(h);
            Outcome::Waits
        } else {
            Outcome::Dies
        }
    }

    /// `owner` releases `row`; the waiters this lets in are granted, in queue order, and
    /// appended to `granted`.
    pub fn release(&mut self, row: RowKey, owner: Owner, granted: &mut Vec<Owner>) {
        let Some(lock) = self.rows.get_mut(&row) else {
            unreachable!("{owner:?} releases {row:?}, which nobody holds")
        };
        let before = lock.holders.len();
        lock.holders.retain(|x| x.owner != owner);
        assert_eq!(lock.holders.len() + 1, before, "{owner:?} held {row:?}");
        self.grant(row, granted);
    }

    /// Waiting `owner` gives up `row` (its attempt aborted); the waiters this lets in are
    /// granted and appended to `granted`.
    pub fn cancel(&mut self, row: RowKey, owner: Owner, granted: &mut Vec<Owner>) {
        let Some(lock) = self.rows.get_mut(&row) else {
            unreachable!("{owner:?} waits for {row:?}, which nobody holds")
        };
        let before = lock.queue.len();
        lock.queue.retain(|x| x.owner != owner);
        assert_eq!(lock.queue.len() + 1, before, "{owner:?} waited for {row:?}");
        self.grant(row, granted);
    }

    /// Grants `row`'s waiters from the front while they are compatible with the holders;
    /// drops the entry if nobody holds or waits.
    fn grant(&mut self, row: RowKey, granted: &mut Vec<Owner>) {
        let Some(lock) = self.rows.get_mut(&row) else {
            return;
        };
        while let Some(&front) = lock.queue.front() {
            if lock
                .holders
                .iter()
                .any(|x| conflict(x.access, front.access))
            {
                break;
            }
            lock.queue.pop_front();
            lock.holders.push(front);
            granted.push(front.owner);
        }
        if lock.holders.is_empty() && lock.queue.is_empty() {
            self.rows.remove(&row);
        }
    }

    /// Rows held or waited for.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No row held or waited for.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Whether `owner` holds `row`.
    fn holds(&self, row: RowKey, owner: Owner) -> bool {
        self.rows
            .get(&row)
            .is_some_and(|l| l.holders.iter().any(|x| x.owner == owner))
    }

    /// Whether `owner` waits for `row`.
    fn waits(&self, row: RowKey, owner: Owner) -> bool {
        self.rows
            .get(&row)
            .is_some_and(|l| l.queue.iter().any(|x| x.owner == owner))
    }

    /// Holders and waiters, over all rows.
    fn entries(&self) -> (usize, usize) {
        self.rows
            .values()
            .fold((0, 0), |(h, w), l| (h + l.holders.len(), w + l.queue.len()))
    }

    fn invariants(&self) {
        for (row, l) in &self.rows {
            assert!(!l.holders.is_empty() || !l.queue.is_empty(), "{row:?}");
            let writers = l
                .holders
                .iter()
                .filter(|x| x.access == Access::Write)
                .count();
            assert!(writers == 0 || l.holders.len() == 1, "{row:?}: {l:?}");
            if let Some(front) = l.queue.front() {
                assert!(
                    l.holders.iter().any(|x| conflict(x.access, front.access)),
                    "{row:?}: the front waiter could be granted"
                );
            }
            // Each waiter came older than all queued before it (wait-die).
            assert!(
                l.queue
                    .iter()
                    .zip(l.queue.iter().skip(1))
                    .all(|(a, b)| b.prio < a.prio),
                "{row:?}"
            );
        }
    }
}

/// Where a part is at its primary.
#[derive(Debug)]
enum PartPhase {
    /// Taking its locks in row order: the first `held` rows are held; `waiting`: queued for the
    /// next one.
    Locking { held: usize, waiting: bool },
    /// Every lock held; executed in place (`undo` restores what it wrote); replicated or being
    /// replicated, voted yes or about to be.
    Prepared { prep: Prepared, undo: Undo },
}

/// A transaction's part at its primary.
#[derive(Debug)]
struct Part {
    coordinator: ProcId,
    input: TxnInput,
    prio: Prio,
    /// [`Shard::access`] of the input: ascending, the order locks are taken in.
    rows: Vec<(RowKey, Access)>,
    phase: PartPhase,
}

impl Part {
    /// Rows whose lock it holds: a prefix of `rows`.
    fn held(&self) -> usize {
        match self.phase {
            PartPhase::Locking { held, .. } => held,
            PartPhase::Prepared { .. } => self.rows.len(),
        }
    }
}

/// A shard's primary under 2PL: the lock table and the open parts.
#[derive(Debug)]
pub struct LockPrimary {
    base: PrimaryBase,
    locks: LockTable,
    parts: BTreeMap<Owner, Part>,
    /// A planted flaw, for the tests that show the checker catches a wrong protocol: a
    /// warehouse row is locked shared even when written.
    #[cfg(test)]
    pub(super) flaw_shared_warehouse: bool,
}

impl LockPrimary {
    /// A coordinator asks for `owner`'s part: lock, execute, replicate, vote.
    fn on_lock(
        &mut self,
        io: &mut Io<'_>,
        src: ProcId,
        owner: Owner,
        prio_ns: u64,
        input: TxnInput,
    ) {
        if !self.base.accepts(io, src, owner, &input) {
            return;
        }
        if self.parts.contains_key(&owner) {
            io.stats.malformed += 1;
            return;
        }
        if self.parts.len() >= PARTS_MAX {
            self.base.vote_no(io, src, owner);
            return;
        }
        let rows = self.base.shard.access(&input);
        let part = Part {
            coordinator: src,
            input,
            prio: (prio_ns, owner.0),
            rows,
            phase: PartPhase::Locking {
                held: 0,
                waiting: false,
            },
        };
        self.parts.insert(owner, part);
        self.advance(io, VecDeque::from([owner]));
    }

    /// Takes each `ready` part (new, or granted the lock it waited for) as far as it goes:
    /// it prepares, waits, or dies — and a death may let more parts in.
    fn advance(&mut self, io: &mut Io<'_>, mut ready: VecDeque<Owner>) {
        while let Some(owner) = ready.pop_front() {
            match self.take_locks(owner) {
                Some(Outcome::Granted) => self.prepare(io, owner),
                Some(Outcome::Waits) => io.stats.lock_waits += 1,
                Some(Outcome::Dies) => {
                    io.stats.lock_dies += 1;
                    if let Some(part) = self.parts.remove(&owner) {
                        self.release(owner, &part, &mut ready);
                        self.base.vote_no(io, part.coordinator, owner);
                    }
                }
                None => {}
            }
        }
    }

    /// Requests `owner`'s next locks in row order until one is not granted; `Granted`: it holds
    /// them all. `None` if it is not taking locks.
    fn take_locks(&mut self, owner: Owner) -> Option<Outcome> {
        let part = self.parts.get_mut(&owner)?;
        let PartPhase::Locking { held, waiting } = &mut part.phase else {
            return None;
        };
        debug_assert!(!*waiting, "{owner:?} advanced while waiting");
        while let Some(&(row, access)) = part.rows.get(*held) {
            #[cfg(test)]
            let access = match row {
                RowKey::Warehouse(_) if self.flaw_shared_warehouse => Access::Read,
                _ => access,
            };
            match self.locks.request(row, owner, access, part.prio) {
                Outcome::Granted => *held += 1,
                Outcome::Waits => {
                    *waiting = true;
                    return Some(Outcome::Waits);
                }
                Outcome::Dies => return Some(Outcome::Dies),
            }
        }
        Some(Outcome::Granted)
    }

    /// Releases every lock `part` of `owner` holds or waits for (it has left `parts`); the
    /// waiters let in are marked granted and appended to `ready`.
    fn release(&mut self, owner: Owner, part: &Part, ready: &mut VecDeque<Owner>) {
        let mut granted = Vec::new();
        if let PartPhase::Locking {
            held,
            waiting: true,
        } = part.phase
        {
            self.locks.cancel(part.rows[held].0, owner, &mut granted);
        }
        for &(row, _) in &part.rows[..part.held()] {
            self.locks.release(row, owner, &mut granted);
        }
        for o in granted {
            if let Some(PartPhase::Locking { held, waiting }) =
                self.parts.get_mut(&o).map(|p| &mut p.phase)
            {
                debug_assert!(*waiting, "{o:?} granted a lock it did not wait for");
                *held += 1;
                *waiting = false;
                ready.push_back(o);
            }
        }
    }

    /// `owner`'s part holds every lock: this is the instant of its stamp (the 2PL key's
    /// candidate). It executes in place, keeping the undo, and goes to the backups.
    fn prepare(&mut self, io: &mut Io<'_>, owner: Owner) {
        let Some(part) = self.parts.get_mut(&owner) else {
            return;
        };
        let stamp = self.base.stamps.next(io.clock);
        let (result, undo) = self.base.shard.execute_undoable(&part.input);
        let writes = part.rows.iter().any(|r| r.1 == Access::Write);
        let mut prep = Prepared::new(stamp, Some(result));
        self.base
            .replicate(io, owner, part.coordinator, &part.input, writes, &mut prep);
        part.phase = PartPhase::Prepared { prep, undo };
    }

    fn on_replicated(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner) {
        match self.parts.get_mut(&owner) {
            Some(Part {
                coordinator,
                phase: PartPhase::Prepared { prep, .. },
                ..
            }) => self.base.on_replicated(io, src, owner, *coordinator, prep),
            // An acknowledgement of a part aborted meanwhile.
            None => io.stats.stale_replies += 1,
            Some(_) => io.stats.malformed += 1,
        }
    }

    /// Commit: the in-place execution stays (the undo is dropped), the backups apply it, the
    /// locks go — after the commit is forwarded, so the backups see commits in the order
    /// conflicting parts executed here.
    fn on_commit(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner, key: u64) {
        let voted = self.parts.get(&owner).is_some_and(|p| {
            p.coordinator == src
                && matches!(&p.phase, PartPhase::Prepared { prep, .. } if prep.voted())
        });
        let Some(part) = self.parts.remove(&owner).filter(|_| voted) else {
            io.stats.malformed += 1;
            return;
        };
        if let PartPhase::Prepared { prep, .. } = &part.phase {
            self.base.committed(io, owner, key, prep);
        }
        io.send(src, owner, &Msg::CommitAck { result: None });
        let mut ready = VecDeque::new();
        self.release(owner, &part, &mut ready);
        self.advance(io, ready);
    }

    /// Abort: undo what the part executed, the backups discard it, the locks go (the waiters
    /// let in run on the restored rows).
    fn on_abort(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner) {
        match self.parts.get(&owner) {
            // It died or voted no here: nothing is left of it.
            None => return,
            Some(p) if p.coordinator != src => {
                io.stats.malformed += 1;
                return;
            }
            Some(_) => {}
        }
        let Some(mut part) = self.parts.remove(&owner) else {
            return;
        };
        let mut ready = VecDeque::new();
        self.release(owner, &part, &mut ready);
        let phase = std::mem::replace(
            &mut part.phase,
            PartPhase::Locking {
                held: 0,
                waiting: false,
            },
        );
        if let PartPhase::Prepared { prep, undo } = phase {
            self.base.shard.undo(undo);
            self.base.aborted(io, owner, &prep);
        }
        self.advance(io, ready);
    }
}

impl Primary for LockPrimary {
    const PROTOCOL: Protocol = Protocol::Lock;

    fn new(base: PrimaryBase) -> LockPrimary {
        LockPrimary {
            base,
            locks: LockTable::default(),
            parts: BTreeMap::new(),
            #[cfg(test)]
            flaw_shared_warehouse: false,
        }
    }

    fn base(&self) -> &PrimaryBase {
        &self.base
    }

    fn on_message(&mut self, io: &mut Io<'_>, src: ProcId, owner: Owner, msg: Msg) {
        match msg {
            Msg::Lock { prio_ns, input } => self.on_lock(io, src, owner, prio_ns, input),
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
        self.locks.invariants();
        let (mut holding, mut waiting) = (0, 0);
        for (&owner, p) in &self.parts {
            for &(row, _) in &p.rows[..p.held()] {
                assert!(self.locks.holds(row, owner), "{owner:?} lost {row:?}");
            }
            holding += p.held();
            if let PartPhase::Locking { held, waiting: w } = p.phase {
                // Between inputs a part still taking locks is queued for its next one: else it
                // would have prepared or died.
                assert!(w && held < p.rows.len(), "{owner:?} stalled");
                assert!(self.locks.waits(p.rows[held].0, owner), "{owner:?}");
                waiting += 1;
            }
        }
        // Nothing held or waited for by a part no longer open.
        assert_eq!(self.locks.entries(), (holding, waiting));
        assert!(self.parts.len() <= PARTS_MAX);
    }
}
