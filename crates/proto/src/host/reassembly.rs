//! Messages some of whose fragments have arrived (§6.1: a message larger than a packet goes as
//! fragments with consecutive PSNs). The host hands each fragment in and gets the whole payload
//! back once every fragment is there; what to answer for a refused fragment (a NAK, a count) is
//! the host's business.

use crate::ids::{ProcId, Psn};
use crate::time::Timestamp;
use crate::wire::DataHeader;
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;

/// (sender, receiver, PSN of the first fragment, reliable).
pub(crate) type MessageId = (ProcId, ProcId, Psn, bool);

/// A message some of whose fragments have arrived.
#[derive(Debug)]
struct Partial {
    ts: Timestamp,
    /// Its fragments are plain ([`crate::wire::flags::PLAIN`]): every one must say so, or none.
    plain: bool,
    parts: BTreeMap<u16, Bytes>,
    last_frag: Option<u16>,
}

/// Why a fragment was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No message can have it (its index, its timestamp, a second copy, past the last).
    Invalid,
    /// It would start a message and `len_max` messages are partial already.
    Full,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Reassembly {
    partials: BTreeMap<MessageId, Partial>,
    /// Most messages partial at once.
    len_max: usize,
    /// Most fragments a message can have.
    frags_max: usize,
}

impl Reassembly {
    /// At most `len_max` messages partial at once, of at most `frags_max` fragments.
    pub(crate) fn new(len_max: usize, frags_max: usize) -> Reassembly {
        Reassembly {
            partials: BTreeMap::new(),
            len_max,
            frags_max: frags_max.max(1),
        }
    }

    /// Adds fragment `h.frag` of the message that starts at `first_psn`; returns its whole
    /// payload once complete. Validated before any state is made: a fragment index no message
    /// can have must not leave an empty partial behind (it would hold a slot and later raise a
    /// false NAK).
    pub(crate) fn add(
        &mut self,
        h: &DataHeader,
        first_psn: Psn,
        payload: Bytes,
    ) -> Result<Option<Bytes>, Refused> {
        let id = (h.src, h.dst, first_psn, h.reliable());
        if h.frag as usize >= self.frags_max {
            return Err(Refused::Invalid);
        }
        if !self.partials.contains_key(&id) && self.partials.len() >= self.len_max {
            return Err(Refused::Full);
        }
        let partial = self.partials.entry(id).or_insert_with(|| Partial {
            ts: h.ts,
            plain: h.plain(),
            parts: BTreeMap::new(),
            last_frag: None,
        });
        if partial.ts != h.ts
            || partial.plain != h.plain()
            || partial.parts.contains_key(&h.frag)
            || partial.last_frag.is_some_and(|l| h.frag > l)
            || (h.end_of_message() && partial.parts.keys().any(|&f| f > h.frag))
        {
            return Err(Refused::Invalid);
        }
        partial.parts.insert(h.frag, payload);
        if h.end_of_message() {
            partial.last_frag = Some(h.frag);
        }
        let complete = partial
            .last_frag
            .is_some_and(|l| partial.parts.len() == l as usize + 1);
        if !complete {
            return Ok(None);
        }
        let partial = self.partials.remove(&id).expect("present above");
        let len = partial.parts.values().map(Bytes::len).sum();
        let mut whole = BytesMut::with_capacity(len);
        for part in partial.parts.values() {
            whole.extend_from_slice(part);
        }
        debug_assert!(self.partials.len() <= self.len_max);
        Ok(Some(whole.freeze()))
    }

    /// Forgets a message (its fragment was refused late, say).
    pub(crate) fn remove(&mut self, id: &MessageId) {
        self.partials.remove(id);
    }

    /// Keeps the partial messages `keep` says yes to, given their id and timestamp.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&MessageId, Timestamp) -> bool) {
        self.partials.retain(|id, p| keep(id, p.ts));
    }

    /// Takes out the best-effort messages below `barrier`: the barrier passed them, so they can
    /// no longer be delivered — plain ones too: a sender's fragments leave back to back on a
    /// FIFO path, ahead of anything that could carry its barrier past their timestamp, so one
    /// still missing then was lost. Returns their ids and timestamps.
    pub(crate) fn take_stale_best_effort(
        &mut self,
        barrier: Timestamp,
    ) -> Vec<(MessageId, Timestamp)> {
        if self.partials.is_empty() {
            return Vec::new();
        }
        let stale: Vec<_> = self
            .partials
            .iter()
            .filter(|(id, p)| !id.3 && p.ts < barrier)
            .map(|(id, p)| (*id, p.ts))
            .collect();
        for (id, _) in &stale {
            self.partials.remove(id);
        }
        stale
    }

    /// Messages partial now.
    pub(crate) fn len(&self) -> usize {
        self.partials.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{flags, DataHeader};

    fn header(frag: u16, last: bool, ts: u64) -> DataHeader {
        DataHeader {
            flags: if last { flags::END_OF_MESSAGE } else { 0 },
            frag,
            ts: Timestamp::new(ts),
            barrier: Timestamp::new(0),
            commit: Timestamp::new(0),
            psn: Psn(10 + u32::from(frag)),
            src: ProcId(1),
            dst: ProcId(0),
        }
    }

    #[test]
    fn fragments_in_any_order_make_one_message_and_strangers_are_refused() {
        let mut r = Reassembly::new(1, 3);
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        assert_eq!(r.add(&header(2, true, 5), Psn(10), b("c")), Ok(None));
        assert_eq!(
            r.add(&header(3, false, 5), Psn(10), b("x")),
            Err(Refused::Invalid)
        );
        assert_eq!(
            r.add(&header(0, false, 6), Psn(10), b("a")),
            Err(Refused::Invalid)
        );
        assert_eq!(
            r.add(&header(0, false, 5), Psn(20), b("a")),
            Err(Refused::Full)
        );
        assert_eq!(r.add(&header(0, false, 5), Psn(10), b("a")), Ok(None));
        assert_eq!(
            r.add(&header(1, false, 5), Psn(10), b("b")),
            Ok(Some(b("abc")))
        );
        assert_eq!(r.len(), 0);
        assert_eq!(r.add(&header(0, false, 7), Psn(10), b("a")), Ok(None));
        assert_eq!(r.take_stale_best_effort(Timestamp::new(7)), vec![]);
        assert_eq!(
            r.take_stale_best_effort(Timestamp::new(8)),
            vec![((ProcId(1), ProcId(0), Psn(10), false), Timestamp::new(7))]
        );
        assert_eq!(r.len(), 0);
    }

    /// A message is plain or not as a whole: a fragment that disagrees with the first is
    /// refused, so an authenticated but confused sender cannot slip an ordered message's tail
    /// out by the plain path (or the other way round).
    #[test]
    fn a_fragment_whose_plain_flag_disagrees_with_its_message_is_refused() {
        let mut r = Reassembly::new(4, 3);
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        let plain = |mut h: DataHeader| {
            h.flags |= flags::PLAIN;
            h
        };
        assert_eq!(
            r.add(&plain(header(0, false, 5)), Psn(10), b("a")),
            Ok(None)
        );
        assert_eq!(
            r.add(&header(1, true, 5), Psn(10), b("b")),
            Err(Refused::Invalid)
        );
        assert_eq!(
            r.add(&plain(header(1, true, 5)), Psn(10), b("b")),
            Ok(Some(b("ab")))
        );
        assert_eq!(r.add(&header(0, false, 6), Psn(10), b("a")), Ok(None));
        assert_eq!(
            r.add(&plain(header(1, true, 6)), Psn(10), b("b")),
            Err(Refused::Invalid)
        );
        assert_eq!(r.len(), 1);
    }
}
