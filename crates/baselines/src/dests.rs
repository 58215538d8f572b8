//! Destination sets: everyone, or a sorted list of processes.
//!
//! A message goes to every process of the group ([`Dests::all`], the all-to-all broadcast of the
//! paper's Fig. 8) or to a subset. The list is kept sorted and free of duplicates, so membership
//! is a binary search and two equal sets compare equal; it is shared (`Arc`), so the copies a
//! sequencer keeps in its history cost a pointer.

use onepipe_proto::ids::ProcId;
use std::sync::Arc;

/// The destinations of one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dests(Repr);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Repr {
    All,
    List(Arc<[ProcId]>),
}

impl Dests {
    /// Every process of the group, the sender included.
    pub fn all() -> Dests {
        Dests(Repr::All)
    }

    /// One process.
    pub fn one(p: ProcId) -> Dests {
        Dests(Repr::List(Arc::from([p])))
    }

    /// These processes (sorted and deduplicated here). An empty list is allowed by the type and
    /// refused by `send`.
    pub fn list(procs: impl IntoIterator<Item = ProcId>) -> Dests {
        let mut v: Vec<ProcId> = procs.into_iter().collect();
        v.sort_unstable();
        v.dedup();
        Dests(Repr::List(Arc::from(v)))
    }

    /// A list already sorted strictly ascending (as decoded from the wire), or `None`.
    pub(crate) fn from_sorted(v: Vec<ProcId>) -> Option<Dests> {
        v.windows(2)
            .all(|w| w[0] < w[1])
            .then(|| Dests(Repr::List(Arc::from(v))))
    }

    /// True for [`Dests::all`].
    pub fn is_all(&self) -> bool {
        matches!(self.0, Repr::All)
    }

    /// The explicit list, or `None` for [`Dests::all`].
    pub fn as_slice(&self) -> Option<&[ProcId]> {
        match &self.0 {
            Repr::All => None,
            Repr::List(l) => Some(l),
        }
    }

    /// True if `p` is a destination (in a group of any size: `all` contains everyone).
    pub fn contains(&self, p: ProcId) -> bool {
        match &self.0 {
            Repr::All => true,
            Repr::List(l) => l.binary_search(&p).is_ok(),
        }
    }

    /// Number of destinations in a group of `procs` processes.
    pub fn len(&self, procs: u32) -> usize {
        match &self.0 {
            Repr::All => procs as usize,
            Repr::List(l) => l.len(),
        }
    }

    /// True if there is no destination in a group of `procs` processes.
    pub fn is_empty(&self, procs: u32) -> bool {
        self.len(procs) == 0
    }

    /// The destinations in ascending order, in a group of `procs` processes.
    pub fn iter(&self, procs: u32) -> DestIter<'_> {
        match &self.0 {
            Repr::All => DestIter::All(0..procs),
            Repr::List(l) => DestIter::List(l.iter()),
        }
    }
}

/// Iterator over a [`Dests`] in ascending order.
#[derive(Clone, Debug)]
pub enum DestIter<'a> {
    /// Every process `0..procs`.
    All(core::ops::Range<u32>),
    /// An explicit list.
    List(core::slice::Iter<'a, ProcId>),
}

impl Iterator for DestIter<'_> {
    type Item = ProcId;

    fn next(&mut self) -> Option<ProcId> {
        match self {
            DestIter::All(r) => r.next().map(ProcId),
            DestIter::List(i) => i.next().copied(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_is_sorted_and_deduplicated() {
        let d = Dests::list([ProcId(5), ProcId(1), ProcId(5), ProcId(3)]);
        assert_eq!(d.as_slice().unwrap(), &[ProcId(1), ProcId(3), ProcId(5)]);
        assert!(d.contains(ProcId(3)));
        assert!(!d.contains(ProcId(2)));
        assert_eq!(d.iter(100).count(), 3);
    }

    #[test]
    fn all_contains_everyone_in_the_group() {
        let d = Dests::all();
        assert!(d.contains(ProcId(7)));
        assert_eq!(d.iter(4).collect::<Vec<_>>().len(), 4);
        assert_eq!(d.len(4), 4);
    }

    #[test]
    fn from_sorted_refuses_unsorted_or_duplicated() {
        assert!(Dests::from_sorted(vec![ProcId(1), ProcId(1)]).is_none());
        assert!(Dests::from_sorted(vec![ProcId(2), ProcId(1)]).is_none());
        assert!(Dests::from_sorted(vec![ProcId(1), ProcId(2)]).is_some());
    }
}
