//! [`PeerVec`]: per-peer state indexed by process id, materialized only as far as it is used.
//!
//! A host keeps a receive window, a reorder list, a next PSN and an ACK-tracker list for every
//! process id it may hear from or send to, up to `senders_max`. That limit is sized for the ids
//! the network may ever hand out — in the simulator, three spare ids per process for §5.2
//! rejoins — while a run with no rejoin only ever uses the first quarter. A `PeerVec` holds
//! the entries below its *materialized length* and answers for every other index below its
//! `len_max` with one shared empty entry, so the unused ids cost no memory until an entry is
//! written (a rejoined process's first packet). At 1,024 hosts that is three quarters of the
//! simulator's per-host state (docs/BENCHMARKS.md, "Simulator speed").
//!
//! Reads beyond the materialized length see the empty entry, exactly as a fully allocated
//! vector filled with it would: the type changes memory, never an answer.

use core::ops::{Index, IndexMut};

/// A vector of `len_max` entries, all `empty` at first, of which only those below the highest
/// index written (or `len_initial`) are stored. See the module docs.
#[derive(Clone, Debug)]
pub struct PeerVec<T> {
    items: Vec<T>,
    empty: T,
    len_max: usize,
}

impl<T: Clone> PeerVec<T> {
    /// `len_max` entries equal to `empty`, the first `len_initial` of them stored at once (the
    /// ids known to be in use; clamped to `len_max`).
    pub fn new(empty: T, len_max: usize, len_initial: usize) -> PeerVec<T> {
        PeerVec {
            items: vec![empty.clone(); len_initial.min(len_max)],
            empty,
            len_max,
        }
    }

    /// The number of entries (stored or not).
    pub fn len(&self) -> usize {
        self.len_max
    }

    /// True when it has no entry at all.
    pub fn is_empty(&self) -> bool {
        self.len_max == 0
    }

    /// How many entries are stored: every index at or above it reads as empty.
    pub fn len_stored(&self) -> usize {
        self.items.len()
    }

    /// Entry `i`, or `None` beyond `len()`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        match self.items.get(i) {
            Some(t) => Some(t),
            None => (i < self.len_max).then_some(&self.empty),
        }
    }

    /// Entry `i` to write, stored from now on (with every entry below it); `None` beyond
    /// `len()`.
    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.items.len() {
            if i >= self.len_max {
                return None;
            }
            self.grow(i);
        }
        self.items.get_mut(i)
    }

    #[cold]
    fn grow(&mut self, i: usize) {
        self.items.resize(i + 1, self.empty.clone());
    }

    /// The stored entries, in index order (every other entry is empty).
    pub fn stored_mut(&mut self) -> &mut [T] {
        &mut self.items
    }

    /// The stored entries, in index order (every other entry is empty).
    pub fn stored(&self) -> &[T] {
        &self.items
    }
}

impl<T: Clone> Index<usize> for PeerVec<T> {
    type Output = T;

    /// # Panics
    /// If `i >= len()`, as a slice index would.
    #[inline]
    fn index(&self, i: usize) -> &T {
        match self.get(i) {
            Some(t) => t,
            None => panic!("index {i} out of range for {} peers", self.len_max),
        }
    }
}

impl<T: Clone> IndexMut<usize> for PeerVec<T> {
    /// # Panics
    /// If `i >= len()`, as a slice index would.
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        let len_max = self.len_max;
        match self.get_mut(i) {
            Some(t) => t,
            None => panic!("index {i} out of range for {len_max} peers"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unstored_entries_read_as_empty_and_writes_store_them() {
        let mut v = PeerVec::new(7u32, 100, 10);
        assert_eq!((v.len(), v.len_stored()), (100, 10));
        assert_eq!(v[50], 7);
        assert_eq!(v.get(99), Some(&7));
        assert_eq!(v.get(100), None);
        assert_eq!(v.len_stored(), 10, "reads store nothing");
        v[50] = 1;
        assert_eq!(v.len_stored(), 51);
        assert_eq!((v[49], v[50], v[51]), (7, 1, 7));
        assert!(v.get_mut(100).is_none());
        assert_eq!(
            PeerVec::new(0u8, 4, 9).len_stored(),
            4,
            "clamped to len_max"
        );
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn an_index_beyond_len_panics_like_a_slice() {
        let v = PeerVec::new(0u8, 4, 0);
        let _ = v[4];
    }

    proptest! {
        /// Any sequence of reads and writes sees what a fully allocated vector would.
        #[test]
        fn behaves_as_a_full_vector(
            initial in 0usize..40,
            ops in proptest::collection::vec((0usize..40, proptest::option::of(any::<u16>())), 0..200),
        ) {
            let mut lazy = PeerVec::new(0u16, 32, initial);
            let mut full = [0u16; 32];
            for (i, write) in ops {
                match write {
                    Some(x) => {
                        prop_assert_eq!(lazy.get_mut(i).is_some(), i < 32);
                        if let Some(e) = lazy.get_mut(i) {
                            *e = x;
                            full[i] = x;
                        }
                    }
                    None => prop_assert_eq!(lazy.get(i), full.get(i)),
                }
            }
            for (i, x) in full.iter().enumerate() {
                prop_assert_eq!(&lazy[i], x);
            }
        }
    }
}
