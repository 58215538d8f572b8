//! The receive-side reorder engine (1Pipe §4.1, §6.1): buffer by timestamp, deliver below the
//! barrier in (timestamp, sender, PSN) order.
//!
//! A single heap over every buffered message costs `O(log n)` per message with `n` in the
//! thousands. Packets from one sender mostly arrive in timestamp order (hop-by-hop FIFO links,
//! per-flow ECMP), so this engine keeps one FIFO queue per sender and merges only the queues'
//! heads, through a tournament tree with one leaf per sender — a k-way merge. An arrival that is
//! in order for its sender is an `O(1)` append; a delivery replays one leaf-to-root path of
//! `log2(senders)` nodes. Out-of-order arrivals (non-FIFO paths) are inserted in place.
//!
//! What it is not: it knows nothing of barriers' origin, lateness or fragments; the host decides
//! what to insert and up to which barrier to deliver.

use crate::ids::{ProcId, Psn};
use crate::peers::PeerVec;
use crate::time::Timestamp;
use core::cmp::Ordering;

/// The total order key: timestamp, ties broken by sender id (§4.1), then by the sender's PSN so
/// that two messages one sender stamped alike keep their send order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrderKey {
    /// Message timestamp.
    pub ts: Timestamp,
    /// Sending process.
    pub src: ProcId,
    /// PSN of the message's first packet, per (src, receiver).
    pub psn: Psn,
}

impl OrderKey {
    /// Signed three-way comparison folded into one integer: negative, zero or positive. Both
    /// wrap-safe differences are shifted so that their sign bit is the 64-bit sign bit: the
    /// timestamps' 48-bit difference (§6.1, PAWS) and the PSNs' 32-bit one.
    #[inline(always)]
    fn order(&self, other: &Self) -> i64 {
        let ts = (self.ts.raw().wrapping_sub(other.ts.raw()) << 16) as i64;
        if ts != 0 {
            return ts;
        }
        if self.src != other.src {
            return if self.src < other.src { -1 } else { 1 };
        }
        (self.psn.0.wrapping_sub(other.psn.0) as i32) as i64
    }
}

impl Ord for OrderKey {
    #[inline(always)]
    fn cmp(&self, other: &Self) -> Ordering {
        self.order(other).cmp(&0)
    }
}

impl PartialOrd for OrderKey {
    #[inline(always)]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }

    #[inline(always)]
    fn lt(&self, other: &Self) -> bool {
        self.order(other) < 0
    }

    #[inline(always)]
    fn le(&self, other: &Self) -> bool {
        self.order(other) <= 0
    }

    #[inline(always)]
    fn gt(&self, other: &Self) -> bool {
        self.order(other) > 0
    }

    #[inline(always)]
    fn ge(&self, other: &Self) -> bool {
        self.order(other) >= 0
    }
}

/// Why an insert was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// The buffer holds `len_max` messages already.
    Full,
    /// The sender id is not below `senders_max`.
    UnknownSender,
    /// A message with the same key is already buffered.
    Duplicate,
}

/// End of a list.
const NIL: u32 = u32::MAX;

/// Most senders one buffer can order: the merge tree packs a sender id into the low 16 bits of a
/// head, and one of those 65,536 values is kept to mean "no head".
pub const SENDERS_MAX: u32 = (1 << 16) - 1;

/// A list head in the merge tree: `ts << 16 | src`, one `u64`. The tree orders heads only by
/// (timestamp, sender) — within one sender the list is already sorted by (timestamp, PSN) — so
/// one wrapping subtraction compares two heads: the 48-bit timestamp difference lands in the top
/// bits, wrap-safe as for [`Timestamp`], and the sender difference (below 2^16 in magnitude)
/// decides only when the timestamps are equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeadKey(u64);

/// The tree's entry for a sender with nothing buffered: after every head. (Sender 65,535 at
/// the last timestamp, which [`SENDERS_MAX`] keeps out.)
const NO_HEAD: u64 = u64::MAX;

impl HeadKey {
    #[inline(always)]
    fn new(key: &OrderKey) -> HeadKey {
        HeadKey((key.ts.raw() << 16) | key.src.0 as u64)
    }

    #[inline(always)]
    fn src(self) -> usize {
        (self.0 & 0xFFFF) as usize
    }

    #[inline(always)]
    fn ts(self) -> Timestamp {
        Timestamp::new(self.0 >> 16)
    }
}

/// The earlier of two tree entries: wrap-safe between heads (as for [`Timestamp`]), and any head
/// before [`NO_HEAD`]. Two entries are never equal unless both are `NO_HEAD` (one per sender).
#[inline(always)]
fn earlier(a: u64, b: u64) -> u64 {
    let a_first = b == NO_HEAD || (a != NO_HEAD && (a.wrapping_sub(b) as i64) < 0);
    if a_first {
        a
    } else {
        b
    }
}

/// The merge tree: a tournament ("winner") tree over the senders' list heads (Knuth, TAOCP
/// vol. 3 §5.4.1), one leaf per sender, every inner node holding the earlier of its children.
///
/// Written for the operation every delivery makes: its sender's leaf changes (the next message
/// becomes the head, or the list empties) and the path to the root is replayed. The path is the
/// leaf's ancestors, so every node it reads — the siblings — has an address known before any
/// comparison, and the comparisons compile to conditional moves: about log2(senders) short
/// steps with no dependent load, where a binary heap's sift-down chases the index each
/// comparison picks (measured: docs/BENCHMARKS.md, "Reorder engine"). Leaves exist for the
/// senders heard from so far, the width doubling as higher sender ids appear.
#[derive(Debug, Default)]
struct MergeTree {
    /// `nodes[1]` is the root; sender `s`'s leaf is `nodes[width + s]`; `nodes[0]` is unused.
    nodes: Vec<u64>,
    /// Leaves: a power of two (0 before any sender).
    width: usize,
}

impl MergeTree {
    /// The earliest head, if any sender has one.
    #[inline(always)]
    fn top(&self) -> Option<HeadKey> {
        match self.nodes.get(1) {
            Some(&k) if k != NO_HEAD => Some(HeadKey(k)),
            _ => None,
        }
    }

    /// The heads of the two halves of the senders: the top and the best of the other half.
    #[inline(always)]
    fn top_two(&self) -> [Option<HeadKey>; 2] {
        let get = |i: usize| {
            self.nodes
                .get(i)
                .filter(|&&k| k != NO_HEAD)
                .map(|&k| HeadKey(k))
        };
        [get(2), get(3)]
    }

    /// Sets sender `src`'s head (`None`: nothing buffered) and replays its path to the root.
    #[inline]
    fn set(&mut self, src: usize, head: Option<HeadKey>) {
        if src >= self.width {
            self.grow(src);
        }
        let nodes = &mut self.nodes[..];
        let mut pos = self.width + src;
        let mut carried = head.map_or(NO_HEAD, |h| h.0);
        nodes[pos] = carried;
        while pos > 1 {
            carried = earlier(carried, nodes[pos ^ 1]);
            pos >>= 1;
            nodes[pos] = carried;
        }
    }

    /// Widens the tree to hold sender `src`'s leaf, keeping every leaf.
    #[cold]
    fn grow(&mut self, src: usize) {
        let width = (src + 1).next_power_of_two().max(2 * self.width);
        let mut nodes = vec![NO_HEAD; 2 * width];
        nodes[width..width + self.width].copy_from_slice(&self.nodes[self.width..]);
        for i in (1..width).rev() {
            nodes[i] = earlier(nodes[2 * i], nodes[2 * i + 1]);
        }
        self.nodes = nodes;
        self.width = width;
    }

    fn clear(&mut self) {
        self.nodes.fill(NO_HEAD);
    }
}

/// One buffered message, linked into its sender's FIFO list.
#[derive(Debug)]
struct Slot<T> {
    key: OrderKey,
    next: u32,
    /// The timestamp of slot `next` (meaningless at the tail): a delivery makes the next
    /// message's tree entry from its own slot, without a dependent read of the next one.
    next_ts: Timestamp,
    item: Option<T>,
}

/// Per-sender FIFO lists merged through a tournament tree of their heads.
///
/// Layout: the lists are intrusive, threaded through one slab of slots shared by all senders, so
/// a sender costs 8 bytes (head and tail index) whether or not it has anything buffered (and
/// nothing until it is first heard from, if above the senders stored at once), and
/// freed slots are reused while still in cache. A simulator holding a thousand hosts of a
/// thousand senders each depends on that footprint (docs/BENCHMARKS.md).
#[derive(Debug)]
pub struct ReorderBuffer<T> {
    /// (head, tail) slot index per sender, `NIL` when empty; stored up to the highest sender
    /// heard from ([`PeerVec`]).
    lists: PeerVec<(u32, u32)>,
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    /// Every list's head's (timestamp, sender), or `NO_HEAD` for an empty list; kept exact by
    /// every change of a head.
    heads: MergeTree,
    len: usize,
    len_max: usize,
    len_peak: usize,
}

impl<T> ReorderBuffer<T> {
    /// A buffer for senders `0..senders_max` holding at most `len_max` messages.
    pub fn new(senders_max: u32, len_max: usize) -> Self {
        Self::with_senders_stored(senders_max, senders_max, len_max)
    }

    /// As [`ReorderBuffer::new`], with room for the lists of senders `0..senders_stored` made
    /// at once and the others' when they are first heard from (see [`PeerVec`]).
    pub fn with_senders_stored(senders_max: u32, senders_stored: u32, len_max: usize) -> Self {
        assert!(len_max > 0, "a reorder buffer must hold something");
        assert!(len_max < NIL as usize, "slot indexes are u32");
        assert!(senders_max <= SENDERS_MAX, "at most {SENDERS_MAX} senders");
        ReorderBuffer {
            lists: PeerVec::new((NIL, NIL), senders_max as usize, senders_stored as usize),
            slots: Vec::new(),
            free: Vec::new(),
            heads: MergeTree::default(),
            len: 0,
            len_max,
            len_peak: 0,
        }
    }

    /// Prefetch hint for a message from `sender` (see [`crate::prefetch`]): its list, and the
    /// slot an insert would take.
    #[inline(always)]
    pub fn prefetch_sender(&self, sender: ProcId) {
        if let Some(l) = self.lists.get(sender.index()) {
            crate::prefetch::prefetch(l);
        }
        if let Some(&i) = self.free.last() {
            crate::prefetch::prefetch(&self.slots[i as usize]);
        }
    }

    /// Prefetch hint: the merge tree's root, the next message to deliver (see
    /// [`crate::prefetch`]).
    #[inline(always)]
    pub fn prefetch_front(&self) {
        if let Some(root) = self.heads.nodes.get(1) {
            crate::prefetch::prefetch(root);
        }
    }

    /// Starts loading the slots the next deliveries read: the heads of the senders that lead the
    /// two halves of the tree (one of them is the next message). Each delivery reads a slot
    /// written thousands of messages earlier (a cache miss once much is buffered); this
    /// overlaps the next ones' misses with the caller's handling of this one.
    #[inline(always)]
    fn prefetch_next_heads(&self) {
        for top in self.heads.top_two().into_iter().flatten() {
            if let Some(&(head, _)) = self.lists.get(top.src()) {
                if let Some(slot) = self.slots.get(head as usize) {
                    crate::prefetch::prefetch(slot);
                }
            }
        }
    }

    /// Messages buffered now.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most messages ever buffered at once.
    pub fn len_peak(&self) -> usize {
        self.len_peak
    }

    /// The smallest buffered key, if any.
    pub fn peek(&self) -> Option<OrderKey> {
        self.heads.top().and_then(|top| self.head_key(top.src()))
    }

    fn head_key(&self, sender: usize) -> Option<OrderKey> {
        let head = self.lists[sender].0;
        (head != NIL).then(|| self.slots[head as usize].key)
    }

    fn alloc(&mut self, key: OrderKey, item: T) -> u32 {
        let slot = Slot {
            key,
            next: NIL,
            next_ts: Timestamp::new(0),
            item: Some(item),
        };
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Links slot `to` after slot `from` (both linked or allocated).
    #[inline(always)]
    fn link(&mut self, from: u32, to: u32) {
        let ts = self.slots[to as usize].key.ts;
        let slot = &mut self.slots[from as usize];
        slot.next = to;
        slot.next_ts = ts;
    }

    /// Buffers `item` under `key`.
    pub fn insert(&mut self, key: OrderKey, item: T) -> Result<(), InsertError> {
        if self.len >= self.len_max {
            return Err(InsertError::Full);
        }
        let s = key.src.index();
        let (head, tail) = *self.lists.get(s).ok_or(InsertError::UnknownSender)?;
        if head == NIL {
            let i = self.alloc(key, item);
            self.lists[s] = (i, i);
            self.heads.set(s, Some(HeadKey::new(&key)));
        } else if self.slots[tail as usize].key < key {
            // The common case: in order for this sender.
            let i = self.alloc(key, item);
            self.link(tail, i);
            self.lists[s].1 = i;
        } else {
            // Out of order (a non-FIFO path): walk to the insertion point. The key is below the
            // tail's, so the walk stops inside the list.
            let (mut prev, mut cur) = (NIL, head);
            while self.slots[cur as usize].key < key {
                prev = cur;
                cur = self.slots[cur as usize].next;
            }
            if self.slots[cur as usize].key == key {
                return Err(InsertError::Duplicate);
            }
            let i = self.alloc(key, item);
            self.link(i, cur);
            if prev == NIL {
                // A new, smaller head.
                self.lists[s].0 = i;
                self.heads.set(s, Some(HeadKey::new(&key)));
            } else {
                self.link(prev, i);
            }
        }
        self.len += 1;
        self.len_peak = self.len_peak.max(self.len);
        Ok(())
    }

    /// Removes and returns the smallest buffered message if its timestamp is strictly below
    /// `barrier` (§4.1: deliver what lies below the barrier).
    #[inline]
    pub fn pop_below(&mut self, barrier: Timestamp) -> Option<(OrderKey, T)> {
        let top = self.heads.top()?;
        let ts = top.ts();
        if ts >= barrier {
            return None;
        }
        let s = top.src();
        let head = self.lists[s].0;
        let slot = &mut self.slots[head as usize];
        let key = slot.key;
        let item = slot.item.take().expect("linked slots hold items");
        let (next, next_ts) = (slot.next, slot.next_ts);
        self.free.push(head);
        self.lists[s].0 = next;
        if next == NIL {
            self.lists[s].1 = NIL;
            self.heads.set(s, None);
        } else {
            self.heads
                .set(s, Some(HeadKey::new(&OrderKey { ts: next_ts, ..key })));
        }
        self.len -= 1;
        self.prefetch_next_heads();
        Some((key, item))
    }

    /// Removes every buffered message whose key `keep` rejects (§5.2 Discard and Recall),
    /// returning how many. Linear in what is buffered: for failures, not the data path.
    pub fn retain(&mut self, mut keep: impl FnMut(&OrderKey) -> bool) -> usize {
        let mut removed = 0;
        // Senders above the stored lists have nothing buffered.
        for s in 0..self.lists.len_stored() {
            let (head, _) = self.lists[s];
            if head == NIL {
                continue;
            }
            let (mut new_head, mut new_tail) = (NIL, NIL);
            let mut cur = head;
            while cur != NIL {
                let next = self.slots[cur as usize].next;
                if keep(&self.slots[cur as usize].key) {
                    if new_tail == NIL {
                        new_head = cur;
                    } else {
                        self.link(new_tail, cur);
                    }
                    new_tail = cur;
                } else {
                    self.slots[cur as usize].item = None;
                    self.free.push(cur);
                    removed += 1;
                }
                cur = next;
            }
            if new_tail != NIL {
                self.slots[new_tail as usize].next = NIL;
            }
            self.lists[s] = (new_head, new_tail);
            if new_head != head {
                let key =
                    (new_head != NIL).then(|| HeadKey::new(&self.slots[new_head as usize].key));
                self.heads.set(s, key);
            }
        }
        self.len -= removed;
        removed
    }

    /// Removes every buffered message (e.g. when a process leaves), returning how many.
    pub fn clear(&mut self) -> usize {
        let n = self.len;
        self.lists
            .stored_mut()
            .iter_mut()
            .for_each(|l| *l = (NIL, NIL));
        self.slots.clear();
        self.free.clear();
        self.heads.clear();
        self.len = 0;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(ts: u64, src: u32, psn: u32) -> OrderKey {
        OrderKey {
            ts: Timestamp::new(ts),
            src: ProcId(src),
            psn: Psn(psn),
        }
    }

    /// Everything deliverable below `barrier`, in delivery order.
    fn drain_below<T>(b: &mut ReorderBuffer<T>, barrier: u64) -> Vec<T> {
        std::iter::from_fn(|| b.pop_below(Timestamp::new(barrier)))
            .map(|(_, v)| v)
            .collect()
    }

    #[test]
    fn delivers_below_barrier_in_timestamp_then_sender_order_4_1() {
        let mut b = ReorderBuffer::new(4, 100);
        b.insert(key(20, 1, 0), "b").unwrap();
        b.insert(key(10, 2, 0), "a").unwrap();
        b.insert(key(20, 0, 0), "tie-lower-sender").unwrap();
        b.insert(key(30, 3, 0), "not-yet").unwrap();
        let out = drain_below(&mut b, 30);
        assert_eq!(out, vec!["a", "tie-lower-sender", "b"]);
        assert_eq!(b.len(), 1);
        assert_eq!(
            b.pop_below(Timestamp::new(30)),
            None,
            "barrier is exclusive"
        );
    }

    #[test]
    fn out_of_order_arrival_from_one_sender_is_sorted() {
        let mut b = ReorderBuffer::new(2, 100);
        b.insert(key(30, 0, 2), 3).unwrap();
        b.insert(key(10, 0, 0), 1).unwrap();
        b.insert(key(20, 0, 1), 2).unwrap();
        b.insert(key(15, 1, 0), 9).unwrap();
        let out = drain_below(&mut b, 100);
        assert_eq!(out, vec![1, 9, 2, 3]);
    }

    #[test]
    fn refuses_when_full_duplicate_or_unknown() {
        let mut b = ReorderBuffer::new(2, 2);
        b.insert(key(5, 0, 0), ()).unwrap();
        assert_eq!(b.insert(key(5, 0, 0), ()), Err(InsertError::Duplicate));
        assert_eq!(b.insert(key(5, 7, 0), ()), Err(InsertError::UnknownSender));
        b.insert(key(6, 1, 0), ()).unwrap();
        assert_eq!(b.insert(key(7, 1, 1), ()), Err(InsertError::Full));
        assert_eq!(b.len_peak(), 2);
    }

    #[test]
    fn equal_timestamps_from_one_sender_keep_psn_order_across_psn_wrap() {
        let mut b = ReorderBuffer::new(1, 10);
        b.insert(key(5, 0, 0), "second").unwrap();
        b.insert(key(5, 0, u32::MAX), "first").unwrap();
        assert_eq!(b.pop_below(Timestamp::new(6)).unwrap().1, "first");
        assert_eq!(b.pop_below(Timestamp::new(6)).unwrap().1, "second");
    }

    #[test]
    fn a_sender_heard_after_the_tree_was_built_widens_it_keeping_every_head() {
        let mut b = ReorderBuffer::new(1000, 100);
        b.insert(key(30, 1, 0), "c").unwrap();
        b.insert(key(10, 0, 0), "a").unwrap();
        // Sender 700 is beyond the tree's width (2 leaves): the tree grows to 1,024 leaves.
        b.insert(key(20, 700, 0), "b").unwrap();
        b.insert(key(40, 999, 0), "d").unwrap();
        assert_eq!(b.heads.width, 1024);
        let out = drain_below(&mut b, 100);
        assert_eq!(out, vec!["a", "b", "c", "d"]);
        assert_eq!(b.peek(), None);
    }

    #[test]
    fn the_merge_tree_orders_across_the_timestamp_wrap() {
        // Timestamps 2^48 - 2 and 1 are three nanoseconds apart (§6.1, PAWS).
        let top = (1u64 << 48) - 2;
        let mut b = ReorderBuffer::new(3, 10);
        b.insert(key(1, 0, 0), "after-wrap").unwrap();
        b.insert(key(top, 2, 0), "before-wrap").unwrap();
        assert_eq!(b.peek().map(|k| k.ts.raw()), Some(top));
        assert_eq!(b.pop_below(Timestamp::new(5)).unwrap().1, "before-wrap");
        assert_eq!(b.pop_below(Timestamp::new(5)).unwrap().1, "after-wrap");
    }

    proptest! {
        /// Interleaved inserts and deliveries, any sender id (so the tree grows mid-run),
        /// timestamps that may straddle the 48-bit wrap: each delivery is the smallest buffered
        /// key below the barrier, as a sorted reference says.
        #[test]
        fn interleaved_inserts_and_deliveries_match_a_sorted_reference(
            base in prop_oneof![Just(0u64), Just((1u64 << 48) - 500), 0u64..(1 << 48)],
            ops in proptest::collection::vec(
                prop_oneof![
                    (0u64..1000, 0u32..2000).prop_map(|(ts, src)| Some((ts, src))),
                    Just(None),
                ],
                1..300,
            ),
        ) {
            let mut b = ReorderBuffer::new(2000, 10_000);
            let mut reference: Vec<(u64, u32, u32)> = Vec::new();
            let mut barrier = 0u64;
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    // Only at or above the barrier: below it would be late (the host's check).
                    Some((ts, src)) => {
                        let ts = barrier + ts;
                        b.insert(key(base.wrapping_add(ts), src, i as u32), ()).unwrap();
                        reference.push((ts, src, i as u32));
                    }
                    None => {
                        barrier += 100;
                        reference.sort();
                        let due = reference.iter().take_while(|k| k.0 < barrier).count();
                        for (ts, src, psn) in reference.drain(..due) {
                            let (k, ()) = b.pop_below(Timestamp::new(base.wrapping_add(barrier)))
                                .expect("a due message");
                            prop_assert_eq!(k, key(base.wrapping_add(ts), src, psn));
                        }
                        prop_assert_eq!(b.pop_below(Timestamp::new(base.wrapping_add(barrier))), None);
                    }
                }
                prop_assert_eq!(b.len(), reference.len());
            }
        }

        /// The k-way merge delivers exactly what one sorted list would, for any arrival order.
        #[test]
        fn matches_a_sorted_reference(
            msgs in proptest::collection::vec((0u64..1000, 0u32..8), 1..300),
            barriers in proptest::collection::vec(0u64..1100, 1..10),
        ) {
            let mut b = ReorderBuffer::new(8, 10_000);
            let mut reference = Vec::new();
            for (i, (ts, src)) in msgs.iter().enumerate() {
                let k = key(*ts, *src, i as u32);
                b.insert(k, i).unwrap();
                reference.push(k);
            }
            reference.sort();
            let mut delivered = Vec::new();
            let mut barriers = barriers;
            barriers.sort();
            barriers.push(2000);
            for bar in barriers {
                while let Some((k, _)) = b.pop_below(Timestamp::new(bar)) {
                    prop_assert!(k.ts < Timestamp::new(bar));
                    delivered.push(k);
                }
            }
            prop_assert_eq!(delivered, reference);
            prop_assert!(b.is_empty());
        }
            /// Discarding (§5.2) leaves exactly the kept messages, still delivered in order.
        #[test]
        fn retain_keeps_exactly_the_kept(
            keys in proptest::collection::btree_set((0u64..40, 0u32..5, 0u32..4), 1..60),
            drop_ts in 0u64..40,
            drop_src in 0u32..5,
            deliver_first in 0u64..20,
        ) {
            let mut b = ReorderBuffer::new(5, 1000);
            let keys: Vec<_> = keys.into_iter().collect();
            for &(ts, src, psn) in keys.iter().rev() {
                b.insert(key(ts, src, psn), (ts, src, psn)).unwrap();
            }
            let mut delivered = drain_below(&mut b, deliver_first);
            let gone = |ts: u64, src: u32| src == drop_src && ts > drop_ts;
            let removed = b.retain(|k| !gone(k.ts.raw(), k.src.0));
            delivered.extend(drain_below(&mut b, 100));
            let mut reference: Vec<_> = keys
                .iter()
                .copied()
                .filter(|&(ts, src, _)| ts < deliver_first || !gone(ts, src))
                .collect();
            reference.sort_by_key(|&(ts, src, psn)| (ts, src, psn));
            let expected_removed = keys.len() - reference.len();
            prop_assert_eq!(removed, expected_removed);
            prop_assert_eq!(delivered, reference);
            prop_assert!(b.is_empty());
        }
    }
}
