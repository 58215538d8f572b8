//! A replicated remote hash table accessed with one-sided verbs (§2.2.1, §7.3.3, Fig. 16).
//!
//! **The table.** Keys hash to one of `servers` shards and, within it, to one of `buckets`
//! buckets. A bucket holds a head pointer; key-value pairs live in slots of server memory and are
//! chained newest first (a pair points at the pair that was the head when it was linked). An
//! insert prepends a new pair, so a key inserted twice has two pairs and a lookup returns the
//! newest: an insert is a put of a unique value, a lookup a get ([`crate::repl::lincheck`] checks
//! them as such).
//!
//! **One-sided verbs, modelled.** Clients post RDMA read, write and compare-and-swap (CAS) as
//! request messages that the server's NIC answers: `ReadHead`, `ReadSlot`, `Write`, `Cas`, each
//! answered by one reply. A server does no application work for them: it applies the verb to its
//! memory at once and answers. The simulator charges the server's core what it charges every
//! process per message (receive and deliver the request, send the reply) and nothing more — so a
//! verb at the server costs exactly one message in and one out, like any other traffic.
//!
//! **Allocation.** Each client owns a region of slots on every shard (region `client + 1`;
//! region 0 holds the preloaded pairs) and allocates from it by itself, one slot per insert, never
//! reused: no allocation round trip. A pointer names (region, slot, attempt); a slot's content
//! carries the pointer it was written for, so a reader that follows a pointer to content of
//! another attempt (or none) knows the write has not reached this server yet — §2.2.1's
//! "every object needs to maintain a version".
//!
//! **Insert: write the pair, then swing the head with CAS.** The client writes its pair with
//! `next` = the head it expects (what it last saw of the bucket — from a lookup, an insert or a
//! failed CAS — else empty), then CASes the bucket head from that expectation to the new pair. A
//! CAS that finds another head returns it: the client rewrites its (still unlinked) pair to point
//! there and CASes again, as the next attempt. This is what the paper implies — "1Pipe removes the
//! fence between writing KV pair and updating the pointer in hash bucket": one write and one CAS
//! per attempt, no read of the head first. A linked pair is never written again, so a chain read
//! from a head is an immutable snapshot, and an insert takes effect at its successful CAS.
//!
//! **Modes** ([`HtMode`]):
//! * `OnePipe` — the write and the CAS go back to back, by best-effort 1Pipe, without waiting:
//!   1Pipe delivers them to the server in timestamp order, so the CAS never overtakes the write it
//!   publishes (the WAW hazard of §2.2.1 cannot occur) — one round trip per attempt. With
//!   replicas, the client scatters the write, then the CAS, to every replica of the shard; every
//!   replica applies every client's verbs in the same timestamp order, so all CASes have the same
//!   outcome everywhere and the client checks that they do. A lookup goes to any one replica:
//!   its head read in 1Pipe's order (where the lookup takes effect), the pair reads after it
//!   unordered (those pairs were written at that server before the head was read, and a linked
//!   pair never changes). Replies are unordered (§2.2.2: "the response message does not need to
//!   be ordered by 1Pipe"; they are the verbs' completions).
//! * `Rdma` — the baseline on plain messages: the write, a *fence* (wait for its completion), then
//!   the CAS — two dependent round trips per attempt, as the paper's baseline does (on a
//!   multipath network, or across queue pairs, nothing else keeps the CAS from publishing a pair
//!   before its write lands). With replicas it is leader-follower: every
//!   verb goes to the shard's leader (replica 0), whose CPU forwards each write and each
//!   successful CAS to the followers and answers the client once all acknowledged; only the
//!   leader serves lookups.
//!
//! **Losses (1Pipe).** Best-effort 1Pipe reports every loss to its sender (§2.1). A lost request
//! is sent again: a read as it was, a write with the pair's current content, a CAS (one replica)
//! as it was — it never took effect. A reply reported lost (a driver that sends replies ordered)
//! is sent again by the server, which keeps its replies for [`KEEP_NS`]. A reader that follows a
//! pointer to a pair not yet written reads it again after `retry_ns`, doubling. A CAS lost to
//! one of several replicas is not repaired: the replicas could then decide differently, which
//! needs a consensus round (as `repl::onertt`'s recovery); the client counts it (`unrepaired`),
//! gives the insert up, and the end-of-run table comparison says where replicas diverged.
//! Failures of processes are not handled.
//!
//! What it is not: a general hash table (no delete, no resize, no garbage collection of shadowed
//! pairs), nor a model of NIC hardware (no doorbells, no memory registration).

pub mod check;
mod client;
mod codec;
mod server;
#[cfg(test)]
mod tests;

use crate::repl::lincheck::MaybeOp;
use crate::repl::{Cmd, Key, ReplDone, Val};
use crate::{App, AppInput, AppSend};
use bytes::Bytes;
use codec::{decode, encode, Msg, ReplCmd};
use onepipe_proto::rng::Rng;
use onepipe_proto::{Instant, ProcId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Most replicas of a shard (a reply set is a byte of flags).
pub const REPLICAS_MAX: u32 = 8;
/// Most shards.
pub const SERVERS_MAX: u32 = 4_096;
/// Most clients (a region number is 16 bits; region 0 is the preload's).
pub const CLIENTS_MAX: u32 = 4_096;
/// Most buckets per shard.
pub const BUCKETS_MAX: u32 = 1 << 22;
/// Most preloaded keys.
pub const PRELOAD_MAX: u64 = 1 << 24;
/// Most operations a client keeps in flight.
pub const WINDOW_MAX: u32 = 4_096;
/// Attempts of one insert before it is given up (a pointer holds the attempt in 8 bits).
pub const ATTEMPTS_MAX: u8 = u8::MAX;
/// A lookup that walks this many pairs gives up (a chain that long, or a cycle, is a bug the
/// end-of-run check names).
pub const CHAIN_STEPS_MAX: u32 = 1 << 16;
/// Times one operation's messages are sent again after losses before it is given up.
pub const RESENDS_MAX: u32 = 64;
/// How long a 1Pipe server keeps a reply for a loss report (longer than any report takes).
pub const KEEP_NS: u64 = 50_000_000;
/// Most replies a 1Pipe server keeps; the oldest go first.
pub const KEPT_MAX: usize = 1 << 16;
/// Most entries of a client's cache of bucket heads.
pub const HEAD_CACHE_MAX: usize = 1 << 20;
/// Most replicated commands a follower holds ahead of a gap.
pub const EARLY_MAX: usize = 1 << 16;
/// A write may land this far beyond the end of its region's slots in use (writes of one client
/// arrive about in allocation order; a region never grows by more than this at once).
pub const REGION_GROW_MAX: u64 = 1 << 16;
/// The client id of the preloaded pairs in histories: their values are
/// `PRELOAD_CLIENT << 40 | key`.
pub const PRELOAD_CLIENT: u32 = (1 << 24) - 1;

const _: () = assert!(REPLICAS_MAX <= 8, "reply sets are one byte");
const _: () = assert!(CLIENTS_MAX < u16::MAX as u32, "a region number is 16 bits");
const _: () = assert!(
    WINDOW_MAX as u64 <= REGION_GROW_MAX,
    "in-flight writes fit the slack"
);
const _: () = assert!(
    PRELOAD_MAX < 1 << 40,
    "preloaded values keep the key in 40 bits"
);

/// A pointer into server memory: (region, slot, attempt) in one word; 0 is the empty pointer.
/// Bits 48–63 region, 40–47 attempt (from 1), 0–39 slot.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Ptr(pub u64);

impl Ptr {
    /// The empty pointer: the end of a chain, an empty bucket.
    pub const NIL: Ptr = Ptr(0);

    /// The pointer to `slot` of `region`, written by attempt `attempt` (≥ 1).
    pub fn new(region: u16, slot: u64, attempt: u8) -> Ptr {
        assert!(attempt >= 1, "attempts count from 1, so no pointer is NIL");
        assert!(slot < 1 << 40, "slot {slot} beyond 40 bits");
        Ptr(u64::from(region) << 48 | u64::from(attempt) << 40 | slot)
    }
    /// Its region.
    pub fn region(self) -> u16 {
        (self.0 >> 48) as u16
    }
    /// Its slot in the region.
    pub fn slot(self) -> u64 {
        self.0 & ((1 << 40) - 1)
    }
    /// The attempt that wrote it.
    pub fn attempt(self) -> u8 {
        (self.0 >> 40) as u8
    }
    /// It is the empty pointer.
    pub fn is_nil(self) -> bool {
        self == Ptr::NIL
    }
}

/// A key-value pair in a slot: the pair, the pointer to the next (older) pair of its bucket, and
/// the pointer it was written for (region, slot and attempt).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Pair {
    /// Its key.
    pub key: Key,
    /// Its value.
    pub val: Val,
    /// The next pair of the chain.
    pub next: Ptr,
    /// The pointer this content was written for.
    pub me: Ptr,
}

/// Who a process is in a hash table run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Replica `replica` of shard `shard` (replica 0 is the baseline's leader).
    Server {
        /// The shard.
        shard: u32,
        /// The replica.
        replica: u32,
    },
    /// Client `index` (its slots are region `index + 1` on every shard).
    Client {
        /// The client's number.
        index: u32,
    },
    /// A process the run leaves out (the topology has more than the layout needs).
    Idle,
}

/// Where processes are: replica `r` of shard `s` is process `r * servers + s`, then the
/// clients, then idle processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HtLayout {
    /// Shards, one server process per replica of each.
    pub servers: u32,
    /// Replicas of each shard.
    pub replicas: u32,
    /// Clients.
    pub clients: u32,
}

impl Default for HtLayout {
    fn default() -> Self {
        HtLayout {
            servers: 16,
            replicas: 1,
            clients: 16,
        }
    }
}

impl HtLayout {
    /// Processes the layout uses.
    pub fn procs(&self) -> u32 {
        self.servers * self.replicas + self.clients
    }
    /// Checks the layout, naming the bad field.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=SERVERS_MAX).contains(&self.servers) {
            return Err(format!("{} servers: take 1 to {SERVERS_MAX}", self.servers));
        }
        if !(1..=REPLICAS_MAX).contains(&self.replicas) {
            return Err(format!(
                "{} replicas: take 1 to {REPLICAS_MAX}",
                self.replicas
            ));
        }
        if !(1..=CLIENTS_MAX).contains(&self.clients) {
            return Err(format!("{} clients: take 1 to {CLIENTS_MAX}", self.clients));
        }
        Ok(())
    }
    /// Process `p`'s role.
    pub fn role(&self, p: ProcId) -> Role {
        let n = self.servers * self.replicas;
        if p.0 < n {
            Role::Server {
                shard: p.0 % self.servers,
                replica: p.0 / self.servers,
            }
        } else if p.0 < n + self.clients {
            Role::Client { index: p.0 - n }
        } else {
            Role::Idle
        }
    }
    /// The process of replica `replica` of shard `shard`.
    pub fn server(&self, shard: u32, replica: u32) -> ProcId {
        debug_assert!(shard < self.servers && replica < self.replicas);
        ProcId(replica * self.servers + shard)
    }
    /// The shard and bucket of `key` with `buckets` buckets per shard.
    pub fn place(&self, key: Key, buckets: u32) -> (u32, u32) {
        let h = mix(key);
        let shard = (h % u64::from(self.servers)) as u32;
        let bucket = ((h / u64::from(self.servers)) % u64::from(buckets)) as u32;
        (shard, bucket)
    }
}

/// A 64-bit finalizer (SplitMix64): spreads consecutive keys over shards and buckets.
fn mix(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The workload: uniform keys, a share of inserts, a table preloaded or not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HtWorkload {
    /// Keys 0..keys, drawn uniformly.
    pub keys: u64,
    /// Share of inserts among the operations (the rest are lookups).
    pub insert_share: f64,
    /// Keys 0..preload are in the table when the run starts, one pair each.
    pub preload: u64,
    /// Buckets per shard.
    pub buckets: u32,
}

impl Default for HtWorkload {
    fn default() -> Self {
        HtWorkload {
            keys: 1_000,
            insert_share: 0.5,
            preload: 1_000,
            buckets: 256,
        }
    }
}

impl HtWorkload {
    /// Checks the workload, naming the bad field.
    pub fn validate(&self) -> Result<(), String> {
        if self.keys == 0 {
            return Err("keys must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.insert_share) {
            return Err(format!(
                "insert share {} is not between 0 and 1",
                self.insert_share
            ));
        }
        if self.preload > PRELOAD_MAX.min(self.keys) {
            return Err(format!(
                "preload {}: at most the keys ({}) and {PRELOAD_MAX}",
                self.preload, self.keys
            ));
        }
        if !(1..=BUCKETS_MAX).contains(&self.buckets) {
            return Err(format!(
                "{} buckets per shard: take 1 to {BUCKETS_MAX}",
                self.buckets
            ));
        }
        Ok(())
    }
}

/// The value key `key` is preloaded with.
pub fn preload_val(key: Key) -> Val {
    u64::from(PRELOAD_CLIENT) << 40 | key
}

/// How the verbs travel (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum HtMode {
    /// On best-effort 1Pipe: write and CAS back to back; replicas written by scattering, any
    /// replica serves lookups.
    OnePipe,
    /// On plain messages: a fence between write and CAS; leader-follower replication, lookups
    /// at the leader.
    Rdma,
}

/// The settings of a hash table process.
#[derive(Clone, Debug, PartialEq)]
pub struct HtConfig {
    /// This process.
    pub me: ProcId,
    /// How the verbs travel.
    pub mode: HtMode,
    /// Who is where.
    pub layout: HtLayout,
    /// The operations.
    pub workload: HtWorkload,
    /// Operations a client keeps in flight (a closed loop).
    pub window: u32,
    /// When clients start issuing (local time).
    pub start: Instant,
    /// They issue nothing new from then on (local time).
    pub stop: Instant,
    /// A lookup that finds a pair not yet written (its write was lost and is being sent again)
    /// reads it again after this long, doubled at each new wait up to 32 times as long.
    pub retry_ns: u64,
    /// Slots of each client's region on each shard.
    pub region_slots_max: u64,
}

impl HtConfig {
    /// The settings of process `me`.
    pub fn new(
        me: ProcId,
        mode: HtMode,
        layout: HtLayout,
        workload: HtWorkload,
        window: u32,
    ) -> HtConfig {
        HtConfig {
            me,
            mode,
            layout,
            workload,
            window,
            start: Instant(0),
            stop: Instant(u64::MAX),
            retry_ns: 2_000,
            region_slots_max: 1 << 24,
        }
    }
}

/// Counters of a hash table process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HtStats {
    /// Operations completed, by kind.
    pub inserts: u64,
    /// See `inserts`.
    pub lookups: u64,
    /// Insert attempts whose CAS found another head (the insert tried again).
    pub cas_failed: u64,
    /// Reads a client posted: bucket heads, and pairs along chains.
    pub head_reads: u64,
    /// See `head_reads`.
    pub slot_reads: u64,
    /// Pair reads that found the pair not yet written there (read again later).
    pub not_written: u64,
    /// Verbs a server answered.
    pub served: u64,
    /// Commands a leader forwarded to its followers (one per follower).
    pub replicated: u64,
    /// Messages sent again after a loss report.
    pub resent: u64,
    /// Losses this design does not repair (a CAS lost to one of several replicas) and replica
    /// answers that disagree.
    pub unrepaired: u64,
    /// Operations given up: unrepaired, too many attempts or resends, a chain too long, no slot
    /// left.
    pub abandoned: u64,
    /// Messages dropped as malformed (or of a kind the process never takes).
    pub malformed: u64,
}

impl core::ops::AddAssign<&HtStats> for HtStats {
    fn add_assign(&mut self, o: &HtStats) {
        self.inserts += o.inserts;
        self.lookups += o.lookups;
        self.cas_failed += o.cas_failed;
        self.head_reads += o.head_reads;
        self.slot_reads += o.slot_reads;
        self.not_written += o.not_written;
        self.served += o.served;
        self.replicated += o.replicated;
        self.resent += o.resent;
        self.unrepaired += o.unrepaired;
        self.abandoned += o.abandoned;
        self.malformed += o.malformed;
    }
}

/// One shard's memory: bucket heads and slots by region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    heads: Vec<Ptr>,
    regions: Vec<Vec<Option<Pair>>>,
    region_slots_max: u64,
}

impl Table {
    /// An empty table of `buckets` buckets and `regions` regions of up to `region_slots_max`
    /// slots.
    pub fn new(buckets: u32, regions: u16, region_slots_max: u64) -> Table {
        Table {
            heads: vec![Ptr::NIL; buckets as usize],
            regions: vec![Vec::new(); usize::from(regions)],
            region_slots_max,
        }
    }

    /// The table of shard `shard` with keys `0..workload.preload` in it: region 0, one pair per
    /// key, linked in key order — the same at every replica.
    pub fn preloaded(
        layout: &HtLayout,
        workload: &HtWorkload,
        shard: u32,
        region_slots_max: u64,
    ) -> Table {
        let regions = (layout.clients + 1) as u16;
        let mut t = Table::new(workload.buckets, regions, region_slots_max.max(1));
        let mut slot = 0u64;
        for key in 0..workload.preload {
            let (s, b) = layout.place(key, workload.buckets);
            if s != shard {
                continue;
            }
            let me = Ptr::new(0, slot, 1);
            slot += 1;
            let next = t.heads[b as usize];
            t.regions[0].push(Some(Pair {
                key,
                val: preload_val(key),
                next,
                me,
            }));
            t.heads[b as usize] = me;
        }
        t
    }

    /// Buckets.
    pub fn buckets(&self) -> u32 {
        self.heads.len() as u32
    }

    /// Bucket `b`'s head; `None` if there is no such bucket.
    pub fn head(&self, b: u32) -> Option<Ptr> {
        self.heads.get(b as usize).copied()
    }

    /// The slot `p` names: `Some(None)` if never written; `None` if there is no such region.
    pub fn slot(&self, p: Ptr) -> Option<Option<Pair>> {
        let region = self.regions.get(usize::from(p.region()))?;
        Some(
            usize::try_from(p.slot())
                .ok()
                .and_then(|i| region.get(i))
                .copied()
                .flatten(),
        )
    }

    /// Writes `pair` into the slot `pair.me` names; false if outside memory.
    pub fn write(&mut self, pair: Pair) -> bool {
        let (slot, max) = (pair.me.slot(), self.region_slots_max);
        let Some(region) = self.regions.get_mut(usize::from(pair.me.region())) else {
            return false;
        };
        if slot >= max || slot >= region.len() as u64 + REGION_GROW_MAX {
            return false;
        }
        if slot >= region.len() as u64 {
            region.resize(slot as usize + 1, None);
        }
        region[slot as usize] = Some(pair);
        true
    }

    /// Compare-and-swap of bucket `b`'s head: to `new` if it is `expect`. Returns what it was;
    /// `None` if there is no such bucket.
    pub fn cas(&mut self, b: u32, expect: Ptr, new: Ptr) -> Option<Ptr> {
        let h = self.heads.get_mut(b as usize)?;
        let old = *h;
        if old == expect {
            *h = new;
        }
        Some(old)
    }

    /// Sets bucket `b`'s head (a follower applying its leader's CAS); false if no such bucket.
    pub fn set_head(&mut self, b: u32, head: Ptr) -> bool {
        match self.heads.get_mut(b as usize) {
            Some(h) => {
                *h = head;
                true
            }
            None => false,
        }
    }

    /// Bucket `b`'s chain, newest first, or what is wrong with it: a pointer outside memory, a
    /// pair not written for the pointer that links it, a chain longer than every slot (a
    /// cycle).
    pub fn chain(&self, b: u32) -> Result<Vec<Pair>, String> {
        let mut p = self.head(b).ok_or_else(|| format!("no bucket {b}"))?;
        let limit: usize = self.regions.iter().map(Vec::len).sum::<usize>() + 1;
        let mut out = Vec::new();
        while !p.is_nil() {
            if out.len() >= limit {
                return Err(format!("bucket {b}: a cycle"));
            }
            match self.slot(p) {
                Some(Some(pair)) if pair.me == p => {
                    out.push(pair);
                    p = pair.next;
                }
                Some(Some(pair)) => {
                    return Err(format!(
                        "bucket {b}: {p:?} links a pair written for {:?}",
                        pair.me
                    ))
                }
                Some(None) => return Err(format!("bucket {b}: {p:?} links an unwritten slot")),
                None => return Err(format!("bucket {b}: {p:?} is outside memory")),
            }
        }
        Ok(out)
    }

    /// What a lookup of `key` in bucket `b` finds (the newest pair of the key).
    pub fn lookup(&self, b: u32, key: Key) -> Result<Option<Val>, String> {
        Ok(self.chain(b)?.iter().find(|p| p.key == key).map(|p| p.val))
    }
}

/// A send a 1Pipe client remembers until its operation completes, to send again if lost.
#[derive(Clone, Debug)]
struct SendRec {
    op: u64,
    ts: Option<u64>,
    dsts: Vec<ProcId>,
    msg: Msg,
}

/// Where an insert is.
#[derive(Clone, Copy, Debug)]
enum InsertPhase {
    /// 1Pipe: the write and the CAS went out together; the replicas whose write completed (a
    /// bit each), and each replica's CAS answer.
    Together {
        written: u8,
        cas: [Option<Ptr>; REPLICAS_MAX as usize],
    },
    /// Baseline: the write is out; the CAS waits for its completion (the fence).
    Fence,
    /// Baseline: the write completed; the CAS is out.
    Swing,
}

#[derive(Clone, Copy, Debug)]
struct Insert {
    key: Key,
    val: Val,
    shard: u32,
    bucket: u32,
    /// The new pair's slot, at the current attempt.
    ptr: Ptr,
    /// The head the pair points at and the CAS expects.
    guess: Ptr,
    call: Instant,
    phase: InsertPhase,
}

/// Where a lookup is.
#[derive(Clone, Copy, Debug)]
enum LookupPhase {
    /// Reading the bucket head.
    Head,
    /// Reading the pair at this pointer.
    Slot(Ptr),
    /// The pair at this pointer was not written yet: reading it again at the timer.
    Wait(Ptr),
}

#[derive(Clone, Copy, Debug)]
struct Lookup {
    key: Key,
    shard: u32,
    bucket: u32,
    /// The replica it reads.
    replica: u32,
    call: Instant,
    steps: u32,
    /// Times it found a pair not yet written (each wait doubles, up to 32 × `retry_ns`).
    waits: u32,
    phase: LookupPhase,
}

#[derive(Clone, Copy, Debug)]
enum OpKind {
    Insert(Insert),
    Lookup(Lookup),
}

#[derive(Clone, Copy, Debug)]
struct Op {
    kind: OpKind,
    resends: u32,
}

/// A client's state.
#[derive(Debug)]
struct Client {
    index: u32,
    rng: Rng,
    next_id: u64,
    written: u64,
    /// Next free slot of this client's region on each shard.
    next_slot: Vec<u64>,
    ops: BTreeMap<u64, Op>,
    /// The last head seen of each (shard, bucket): an insert's expectation.
    heads: HashMap<(u32, u32), Ptr>,
    /// 1Pipe: sends by tag, until their operation completes.
    sends: BTreeMap<u64, SendRec>,
    next_tag: u64,
    /// Lookups waiting to read a pair again: (when, operation).
    timers: BTreeSet<(Instant, u64)>,
    done: VecDeque<ReplDone>,
    abandoned: Vec<MaybeOp>,
    /// A region ran out of slots: no new operation.
    exhausted: bool,
}

/// A reply a 1Pipe server keeps until it cannot be reported lost any more.
#[derive(Clone, Debug)]
struct Kept {
    tag: u64,
    ts: Option<u64>,
    at: Instant,
    dst: ProcId,
    bytes: Bytes,
}

/// A leader's verb waiting for its followers.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    client: ProcId,
    reply: Msg,
    /// Followers that acknowledged, a bit each.
    acked: u8,
}

/// A server's part in the baseline's leader-follower replication.
#[derive(Debug)]
enum ReplRole {
    /// No replication (1Pipe, or one replica).
    Alone,
    /// Replica 0 with followers: forwards what changes its table, answers once all applied.
    Leader {
        next_lseq: u64,
        waiting: BTreeMap<u64, Waiting>,
    },
    /// A follower: applies its leader's commands in order.
    Follower {
        next_lseq: u64,
        early: BTreeMap<u64, ReplCmd>,
    },
}

/// A server's state.
#[derive(Debug)]
struct Server {
    shard: u32,
    replica: u32,
    table: Table,
    repl: ReplRole,
    kept: VecDeque<Kept>,
    next_tag: u64,
}

#[derive(Debug)]
enum RoleSt {
    Server(Box<Server>),
    Client(Box<Client>),
    Idle,
}

/// What every role uses: the settings, the sends out, the counters, the clock.
#[derive(Debug)]
struct Shared {
    cfg: HtConfig,
    out: VecDeque<AppSend>,
    stats: HtStats,
    now: Instant,
}

impl Shared {
    /// Sends `bytes` to every process of `dsts` at once (one scattering), best effort;
    /// `ordered`: in 1Pipe's total order (requests), or not (a verb's completion, which the
    /// server's NIC returns outside the order, §2.2.2: "the response message does not need to be
    /// ordered by 1Pipe").
    fn push(&mut self, tag: u64, dsts: &[ProcId], bytes: &Bytes, ordered: bool) {
        debug_assert!(!dsts.is_empty());
        self.out.push_back(AppSend {
            tag,
            reliable: false,
            ordered,
            parts: dsts.iter().map(|&d| (d, bytes.clone())).collect(),
        });
    }
    fn onepipe(&self) -> bool {
        self.cfg.mode == HtMode::OnePipe
    }
}

/// A process of the hash table: a server (a shard's replica), a client, or idle.
#[derive(Debug)]
pub struct HtProcess {
    sh: Shared,
    role: RoleSt,
}

impl HtProcess {
    /// The process `cfg.me`; `seed` draws a client's operations.
    ///
    /// # Panics
    /// If the layout or the workload is invalid (the caller validates them first).
    pub fn new(cfg: HtConfig, seed: u64) -> HtProcess {
        cfg.layout.validate().expect("a valid layout");
        cfg.workload.validate().expect("a valid workload");
        let role = match cfg.layout.role(cfg.me) {
            Role::Server { shard, replica } => {
                let repl = match (cfg.mode, cfg.layout.replicas, replica) {
                    (HtMode::OnePipe, ..) | (HtMode::Rdma, 1, _) => ReplRole::Alone,
                    (HtMode::Rdma, _, 0) => ReplRole::Leader {
                        next_lseq: 0,
                        waiting: BTreeMap::new(),
                    },
                    (HtMode::Rdma, ..) => ReplRole::Follower {
                        next_lseq: 0,
                        early: BTreeMap::new(),
                    },
                };
                RoleSt::Server(Box::new(Server {
                    shard,
                    replica,
                    table: Table::preloaded(
                        &cfg.layout,
                        &cfg.workload,
                        shard,
                        cfg.region_slots_max,
                    ),
                    repl,
                    kept: VecDeque::new(),
                    next_tag: 0,
                }))
            }
            Role::Client { index } => RoleSt::Client(Box::new(Client {
                index,
                rng: Rng::new(seed),
                next_id: 0,
                written: 0,
                next_slot: vec![0; cfg.layout.servers as usize],
                ops: BTreeMap::new(),
                heads: HashMap::new(),
                sends: BTreeMap::new(),
                next_tag: 0,
                timers: BTreeSet::new(),
                done: VecDeque::new(),
                abandoned: Vec::new(),
                exhausted: false,
            })),
            Role::Idle => RoleSt::Idle,
        };
        HtProcess {
            sh: Shared {
                cfg,
                out: VecDeque::new(),
                stats: HtStats::default(),
                now: Instant(0),
            },
            role,
        }
    }

    /// The next operation it completed as a client since the last call.
    pub fn poll_done(&mut self) -> Option<ReplDone> {
        match &mut self.role {
            RoleSt::Client(c) => c.done.pop_front(),
            _ => None,
        }
    }
    /// Its counters.
    pub fn stats(&self) -> &HtStats {
        &self.sh.stats
    }
    /// Nothing in flight: no operation open, no replication waiting.
    pub fn idle(&self) -> bool {
        match &self.role {
            RoleSt::Client(c) => c.ops.is_empty(),
            RoleSt::Server(s) => match &s.repl {
                ReplRole::Alone => true,
                ReplRole::Leader { waiting, .. } => waiting.is_empty(),
                ReplRole::Follower { early, .. } => early.is_empty(),
            },
            RoleSt::Idle => true,
        }
    }
    /// It is a client.
    pub fn is_client(&self) -> bool {
        matches!(self.role, RoleSt::Client(_))
    }
    /// Its inserts whose outcome it never learned (open, or given up): each may or may not
    /// have taken effect.
    pub fn open_inserts(&self) -> Vec<MaybeOp> {
        let RoleSt::Client(c) = &self.role else {
            return Vec::new();
        };
        let open = c.ops.iter().filter_map(|(&id, op)| match op.kind {
            OpKind::Insert(i) => Some(MaybeOp {
                client: self.sh.cfg.me.0,
                id,
                cmd: Cmd::Put(i.key, i.val),
                call_ns: i.call.0,
            }),
            OpKind::Lookup(_) => None,
        });
        c.abandoned.iter().copied().chain(open).collect()
    }
    /// Its table, with its shard and replica, if it is a server.
    pub fn table(&self) -> Option<(u32, u32, &Table)> {
        match &self.role {
            RoleSt::Server(s) => Some((s.shard, s.replica, &s.table)),
            _ => None,
        }
    }

    /// Checks what must always hold (debug builds, after every input).
    #[cfg(debug_assertions)]
    fn invariants(&self) {
        match &self.role {
            RoleSt::Client(c) => {
                debug_assert!(c.ops.len() <= self.sh.cfg.window as usize);
                debug_assert!(c.sends.values().all(|r| c.ops.contains_key(&r.op)));
                debug_assert!(c.timers.iter().all(|(_, id)| c.ops.contains_key(id)));
                debug_assert!(c.heads.len() <= HEAD_CACHE_MAX);
            }
            RoleSt::Server(s) => {
                debug_assert!(s.kept.len() <= KEPT_MAX);
                if let ReplRole::Follower { early, next_lseq } = &s.repl {
                    debug_assert!(early.len() <= EARLY_MAX);
                    debug_assert!(early.keys().all(|&l| l > *next_lseq));
                }
            }
            RoleSt::Idle => {}
        }
    }
}

impl App for HtProcess {
    fn handle(&mut self, now: Instant, input: AppInput<'_>) {
        let sh = &mut self.sh;
        sh.now = sh.now.max(now);
        match (&mut self.role, input) {
            (RoleSt::Idle, _) => {}
            (role, AppInput::Deliver { src, payload, .. }) => match (role, decode(payload)) {
                (_, None) => sh.stats.malformed += 1,
                (RoleSt::Client(c), Some(m)) => c.on_msg(sh, src, m),
                (RoleSt::Server(s), Some(m)) => s.on_msg(sh, src, m),
                (RoleSt::Idle, Some(_)) => {}
            },
            (RoleSt::Client(c), AppInput::Sent { tag, ts }) => {
                if let Some(r) = c.sends.get_mut(&tag) {
                    r.ts = Some(ts.raw());
                }
            }
            (RoleSt::Server(s), AppInput::Sent { tag, ts }) => {
                if let Some(k) = s.kept.iter_mut().rev().find(|k| k.tag == tag) {
                    k.ts = Some(ts.raw());
                }
            }
            (RoleSt::Client(c), AppInput::SendFailed { dst, ts }) => c.on_lost(sh, dst, ts.raw()),
            (RoleSt::Server(s), AppInput::SendFailed { dst, ts }) => s.on_lost(sh, dst, ts.raw()),
            (RoleSt::Client(c), AppInput::Refused { tag }) => {
                // Never stamped, so delivered nowhere: as if lost to every destination.
                if let Some(r) = c.sends.remove(&tag) {
                    for &d in &r.dsts {
                        c.send_again(sh, d, r.clone());
                    }
                }
            }
            (RoleSt::Server(s), AppInput::Refused { tag }) => {
                if let Some(k) = s.kept.iter().find(|k| k.tag == tag).cloned() {
                    sh.stats.resent += 1;
                    sh.push(k.tag, &[k.dst], &k.bytes, false);
                }
            }
            (RoleSt::Client(c), AppInput::Timeout) => c.on_timeout(sh),
            // Failures are not handled (module docs); the commit barrier is not used.
            _ => {}
        }
        match &mut self.role {
            RoleSt::Client(c) => c.fill_window(&mut self.sh),
            RoleSt::Server(s) => s.prune(self.sh.now),
            RoleSt::Idle => {}
        }
        #[cfg(debug_assertions)]
        self.invariants();
    }

    fn poll_send(&mut self) -> Option<AppSend> {
        self.sh.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let RoleSt::Client(c) = &self.role else {
            return None;
        };
        let start = (self.sh.now < self.sh.cfg.start).then_some(self.sh.cfg.start);
        let retry = c.timers.first().map(|&(t, _)| t);
        start.into_iter().chain(retry).min()
    }
}
