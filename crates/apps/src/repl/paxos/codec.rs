//! The wire format of MultiPaxos: one kind byte, then big-endian fields; decoding never panics.

use super::*;

pub(super) const REQUEST: u8 = 1;
pub(super) const REPLY: u8 = 2;
pub(super) const REDIRECT: u8 = 3;
pub(super) const ACCEPT: u8 = 4;
pub(super) const ACCEPTED: u8 = 5;
pub(super) const DECIDE: u8 = 6;
pub(super) const PREPARE: u8 = 7;
pub(super) const PROMISE: u8 = 8;
pub(super) const REJECT: u8 = 9;
pub(super) const FETCH: u8 = 10;
pub(super) const LEARN: u8 = 11;

/// The messages, big-endian, bounds-checked: a malformed one decodes to `None`.
///
/// Each starts with its kind `u8`. A request is client `u32`, id `u64`, acked `u64`, the
/// command (kind `u8` 0 get, 1 put, 2 cas; key `u64`; put: value `u64`; cas: presence `u8`,
/// expected `u64`, new `u64`), padding length `u32` and the padding. A batch is a count `u16`
/// and its requests. A promise's slots are a count `u16`, each instance `u64`, ballot `u64`
/// (`u64::MAX`: decided) and batch. An optional value is a presence `u8` and, if present, `u64`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Msg {
    /// Client → leader.
    Request(Request),
    /// Leader → client: the request's output, and `pad` bytes of padding (an echo of the
    /// request's, with [`PaxosConfig::echo`]).
    Reply {
        id: u64,
        output: Option<Val>,
        pad: u32,
    },
    /// Replica → client: ask `leader` (`None`: unknown).
    Redirect { id: u64, leader: Option<u32> },
    /// Phase 2a, with the leader's decided prefix.
    Accept {
        ballot: u64,
        instance: u64,
        commit: u64,
        batch: Batch,
    },
    /// Phase 2b.
    Accepted { ballot: u64, instance: u64 },
    /// The leader's decided prefix: its heartbeat.
    Decide { ballot: u64, commit: u64 },
    /// Phase 1a: promise `ballot`, report accepted values from instance `from`.
    Prepare { ballot: u64, from: u64 },
    /// Phase 1b: the promiser's decided prefix and its slots past it.
    Promise {
        ballot: u64,
        commit: u64,
        slots: Vec<(u64, u64, Batch)>,
    },
    /// A message of a lower ballot was refused: this one is promised.
    Reject { ballot: u64 },
    /// Send me the decided instances from `from`.
    Fetch { from: u64 },
    /// `instance` was decided with `batch`.
    Learn { instance: u64, batch: Batch },
}

fn put_opt(b: &mut BytesMut, v: Option<u64>) {
    b.put_u8(u8::from(v.is_some()));
    if let Some(v) = v {
        b.put_u64(v);
    }
}

fn put_request(b: &mut BytesMut, r: &Request) {
    b.put_u32(r.client);
    b.put_u64(r.id);
    b.put_u64(r.acked);
    match r.cmd {
        Cmd::Get(k) => {
            b.put_u8(0);
            b.put_u64(k);
        }
        Cmd::Put(k, v) => {
            b.put_u8(1);
            b.put_u64(k);
            b.put_u64(v);
        }
        Cmd::Cas { key, expect, new } => {
            b.put_u8(2);
            b.put_u64(key);
            b.put_u8(u8::from(expect.is_some()));
            b.put_u64(expect.unwrap_or(0));
            b.put_u64(new);
        }
    }
    b.put_u32(r.pad);
    b.put_bytes(0, r.pad as usize);
}

fn put_batch(b: &mut BytesMut, batch: &[Request]) {
    assert!(
        batch.len() <= BATCH_REQUESTS_MAX,
        "a batch of {}",
        batch.len()
    );
    b.put_u16(batch.len() as u16);
    batch.iter().for_each(|r| put_request(b, r));
}

/// A Phase 1b promise after its kind byte: ballot, decided prefix, and the slots past it.
fn put_promise(b: &mut BytesMut, ballot: u64, commit: u64, slots: &[(u64, u64, Batch)]) {
    b.put_u8(PROMISE);
    b.put_u64(ballot);
    b.put_u64(commit);
    assert!(
        slots.len() as u64 <= ACCEPT_AHEAD_MAX,
        "a promise of {}",
        slots.len()
    );
    b.put_u16(slots.len() as u16);
    for (instance, ballot, batch) in slots {
        b.put_u64(*instance);
        b.put_u64(*ballot);
        put_batch(b, batch);
    }
}

pub(super) fn encode(msg: &Msg) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    match msg {
        Msg::Request(r) => {
            b.put_u8(REQUEST);
            put_request(&mut b, r);
        }
        Msg::Reply { id, output, pad } => {
            b.put_u8(REPLY);
            b.put_u64(*id);
            put_opt(&mut b, *output);
            b.put_u32(*pad);
            b.put_bytes(0, *pad as usize);
        }
        Msg::Redirect { id, leader } => {
            b.put_u8(REDIRECT);
            b.put_u64(*id);
            put_opt(&mut b, leader.map(u64::from));
        }
        Msg::Accept {
            ballot,
            instance,
            commit,
            batch,
        } => {
            b.put_u8(ACCEPT);
            b.put_u64(*ballot);
            b.put_u64(*instance);
            b.put_u64(*commit);
            put_batch(&mut b, batch);
        }
        Msg::Accepted { ballot, instance } => {
            b.put_u8(ACCEPTED);
            b.put_u64(*ballot);
            b.put_u64(*instance);
        }
        Msg::Decide { ballot, commit } => {
            b.put_u8(DECIDE);
            b.put_u64(*ballot);
            b.put_u64(*commit);
        }
        Msg::Prepare { ballot, from } => {
            b.put_u8(PREPARE);
            b.put_u64(*ballot);
            b.put_u64(*from);
        }
        Msg::Promise {
            ballot,
            commit,
            slots,
        } => put_promise(&mut b, *ballot, *commit, slots),
        Msg::Reject { ballot } => {
            b.put_u8(REJECT);
            b.put_u64(*ballot);
        }
        Msg::Fetch { from } => {
            b.put_u8(FETCH);
            b.put_u64(*from);
        }
        Msg::Learn { instance, batch } => {
            b.put_u8(LEARN);
            b.put_u64(*instance);
            put_batch(&mut b, batch);
        }
    }
    b.freeze()
}

impl Reader<'_> {
    fn opt_u64(&mut self) -> Option<Option<u64>> {
        Some(if self.bool()? {
            Some(self.u64()?)
        } else {
            None
        })
    }
    fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(drop)
    }
    fn request(&mut self) -> Option<Request> {
        let (client, id, acked) = (self.u32()?, self.u64()?, self.u64()?);
        let cmd = match self.u8()? {
            0 => Cmd::Get(self.u64()?),
            1 => Cmd::Put(self.u64()?, self.u64()?),
            2 => {
                let key = self.u64()?;
                let present = self.bool()?;
                let expect = self.u64()?;
                let new = self.u64()?;
                Cmd::Cas {
                    key,
                    expect: present.then_some(expect),
                    new,
                }
            }
            _ => return None,
        };
        let pad = self.u32()?;
        if pad > MAX_VALUE_SIZE {
            return None;
        }
        self.skip(pad as usize)?;
        Some(Request {
            client,
            id,
            acked,
            cmd,
            pad,
        })
    }
    fn batch(&mut self) -> Option<Batch> {
        let n = self.count(REQUEST_FIXED_LEN + CMD_LEN_MIN)?;
        if n > BATCH_REQUESTS_MAX {
            return None;
        }
        (0..n).map(|_| self.request()).collect()
    }
    /// A ballot: at most [`BALLOT_MAX`].
    fn ballot(&mut self) -> Option<u64> {
        self.u64().filter(|&b| b <= BALLOT_MAX)
    }
}

pub(super) fn decode(payload: &[u8]) -> Option<Msg> {
    let mut r = Reader::new(payload);
    let msg = match r.u8()? {
        REQUEST => Msg::Request(r.request()?),
        REPLY => {
            let (id, output) = (r.u64()?, r.opt_u64()?);
            let pad = r.u32()?;
            if pad > MAX_VALUE_SIZE {
                return None;
            }
            r.skip(pad as usize)?;
            Msg::Reply { id, output, pad }
        }
        REDIRECT => Msg::Redirect {
            id: r.u64()?,
            leader: match r.opt_u64()? {
                Some(l) => Some(u32::try_from(l).ok()?),
                None => None,
            },
        },
        ACCEPT => Msg::Accept {
            ballot: r.ballot()?,
            instance: r.u64()?,
            commit: r.u64()?,
            batch: r.batch()?,
        },
        ACCEPTED => Msg::Accepted {
            ballot: r.ballot()?,
            instance: r.u64()?,
        },
        DECIDE => Msg::Decide {
            ballot: r.ballot()?,
            commit: r.u64()?,
        },
        PREPARE => Msg::Prepare {
            ballot: r.ballot()?,
            from: r.u64()?,
        },
        PROMISE => {
            let (ballot, commit) = (r.ballot()?, r.u64()?);
            let n = r.count(8 + 8 + 2)?;
            let slots = (0..n)
                .map(|_| Some((r.u64()?, r.u64()?, r.batch()?)))
                .collect::<Option<_>>()?;
            Msg::Promise {
                ballot,
                commit,
                slots,
            }
        }
        REJECT => Msg::Reject {
            ballot: r.ballot()?,
        },
        FETCH => Msg::Fetch { from: r.u64()? },
        LEARN => Msg::Learn {
            instance: r.u64()?,
            batch: r.batch()?,
        },
        _ => return None,
    };
    r.finish()?;
    Some(msg)
}
