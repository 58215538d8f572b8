//! The store's two messages on the wire. Big-endian, bounds-checked: a malformed message decodes
//! to `None` (the receiver drops and counts it), never a panic.
//!
//! * Request (initiator → server): `1`, txn `u64`, op count `u16`, then per op a kind (`0` get,
//!   `1` put), the key `u64` and for a put the value's writer `u64` and length `u32`; then the put
//!   values' bytes (their lengths' sum), so a message is as long as the data it carries.
//! * Reply (server → initiator): `2`, txn `u64`, the request's timestamp `u64`, read count `u16`,
//!   then per read the key `u64`, a presence byte and, if present, the writer `u64` and length
//!   `u32`; then the read values' bytes.

use super::{Key, Op, Value};
use bytes::{BufMut, Bytes, BytesMut};

const REQUEST: u8 = 1;
const REPLY: u8 = 2;
/// Most operations in one message (the count is a `u16`).
pub const OPS_MAX: usize = u16::MAX as usize;
/// Longest value carried (bytes): longer ones are clamped by the workload.
pub const VALUE_LEN_MAX: u32 = 1 << 20;

/// A decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The transaction.
    pub txn: u64,
    /// Its operations at this server, in order.
    pub ops: Vec<Op>,
    /// Where the put values' bytes start in the payload.
    pub values_at: usize,
}

impl Request {
    /// Each put's value bytes, in order, out of the `payload` this was decoded from.
    pub fn put_data<'a>(&self, payload: &'a [u8]) -> Vec<&'a [u8]> {
        let lens = self.ops.iter().filter_map(|o| match o {
            Op::Put(_, v) => Some(v.len as usize),
            Op::Get(_) => None,
        });
        slices(payload, self.values_at, lens)
    }
}

/// Consecutive slices of `lens` from `at` (short ones where the payload ends: never, for a
/// payload the request or reply was decoded from).
fn slices(payload: &[u8], mut at: usize, lens: impl Iterator<Item = usize>) -> Vec<&[u8]> {
    lens.map(|n| {
        let s = payload.get(at..at + n).unwrap_or_default();
        at += n;
        s
    })
    .collect()
}

/// A decoded reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The transaction.
    pub txn: u64,
    /// The timestamp of the request it answers (a retried read-only transaction's earlier
    /// attempts are told apart by it).
    pub req_ts: u64,
    /// What each get read, in the request's order (`None`: the key was never written).
    pub reads: Vec<(Key, Option<Value>)>,
    /// Where the read values' bytes start in the payload.
    pub values_at: usize,
}

impl Reply {
    /// Each read value's bytes (`None` for a key never written), in order, out of the
    /// `payload` this was decoded from.
    pub fn read_data<'a>(&self, payload: &'a [u8]) -> Vec<Option<&'a [u8]>> {
        let lens = self
            .reads
            .iter()
            .filter_map(|r| r.1.map(|v| v.len as usize));
        let mut data = slices(payload, self.values_at, lens).into_iter();
        self.reads
            .iter()
            .map(|r| r.1.and_then(|_| data.next()))
            .collect()
    }
}

/// Whether `payload` is a request (else a reply, or malformed).
pub fn is_request(payload: &[u8]) -> bool {
    payload.first() == Some(&REQUEST)
}

/// Encodes a request; the put values' bytes are zeros.
pub fn encode_request(txn: u64, ops: &[Op]) -> Bytes {
    encode_request_data(txn, ops, &[])
}

/// Encodes a request carrying `data`, each put's value bytes in order (each as long as its
/// value says); empty: zeros.
pub fn encode_request_data(txn: u64, ops: &[Op], data: &[Bytes]) -> Bytes {
    assert!(
        ops.len() <= OPS_MAX,
        "{} operations in one message",
        ops.len()
    );
    let values: usize = ops
        .iter()
        .map(|o| match o {
            Op::Put(_, v) => v.len as usize,
            Op::Get(_) => 0,
        })
        .sum();
    let mut b = BytesMut::with_capacity(11 + ops.len() * 21 + values);
    b.put_u8(REQUEST);
    b.put_u64(txn);
    b.put_u16(ops.len() as u16);
    for op in ops {
        match *op {
            Op::Get(k) => {
                b.put_u8(0);
                b.put_u64(k);
            }
            Op::Put(k, v) => {
                b.put_u8(1);
                b.put_u64(k);
                b.put_u64(v.writer);
                b.put_u32(v.len);
            }
        }
    }
    put_values(&mut b, values, data);
    b.freeze()
}

/// The values' bytes: `data`, or `values` zeros when it is empty.
fn put_values(b: &mut BytesMut, values: usize, data: &[Bytes]) {
    if data.is_empty() {
        b.resize(b.len() + values, 0);
        return;
    }
    let total: usize = data.iter().map(Bytes::len).sum();
    assert_eq!(total, values, "value bytes as long as the values say");
    data.iter().for_each(|d| b.put_slice(d));
}

/// Encodes a reply; the read values' bytes are zeros.
pub fn encode_reply(txn: u64, req_ts: u64, reads: &[(Key, Option<Value>)]) -> Bytes {
    encode_reply_data(txn, req_ts, reads, &[])
}

/// Encodes a reply carrying `data`, each present read value's bytes in order; empty: zeros.
pub fn encode_reply_data(
    txn: u64,
    req_ts: u64,
    reads: &[(Key, Option<Value>)],
    data: &[Bytes],
) -> Bytes {
    assert!(
        reads.len() <= OPS_MAX,
        "{} reads in one message",
        reads.len()
    );
    let values: usize = reads
        .iter()
        .map(|r| r.1.map_or(0, |v| v.len as usize))
        .sum();
    let mut b = BytesMut::with_capacity(19 + reads.len() * 21 + values);
    b.put_u8(REPLY);
    b.put_u64(txn);
    b.put_u64(req_ts);
    b.put_u16(reads.len() as u16);
    for &(k, v) in reads {
        b.put_u64(k);
        match v {
            None => b.put_u8(0),
            Some(v) => {
                b.put_u8(1);
                b.put_u64(v.writer);
                b.put_u32(v.len);
            }
        }
    }
    put_values(&mut b, values, data);
    b.freeze()
}

pub(super) use crate::wire::Reader;

impl Reader<'_> {
    pub(super) fn value(&mut self) -> Option<Value> {
        let writer = self.u64()?;
        let len = self.u32()?;
        (len <= VALUE_LEN_MAX).then_some(Value { writer, len })
    }
}

/// Decodes a request; `None` if it is not a well-formed one.
pub fn decode_request(payload: &[u8]) -> Option<Request> {
    let mut r = Reader::new(payload);
    if r.u8()? != REQUEST {
        return None;
    }
    let txn = r.u64()?;
    let n = r.u16()? as usize;
    // Each op takes at least 9 bytes: a count larger than the payload can hold is a lie.
    if n > r.remaining() / 9 {
        return None;
    }
    let mut ops = Vec::with_capacity(n);
    let mut values = 0u64;
    for _ in 0..n {
        let kind = r.u8()?;
        let key = r.u64()?;
        ops.push(match kind {
            0 => Op::Get(key),
            1 => {
                let v = r.value()?;
                values += u64::from(v.len);
                Op::Put(key, v)
            }
            _ => return None,
        });
    }
    let values_at = payload.len() - r.remaining();
    r.finish_with(values)?;
    Some(Request {
        txn,
        ops,
        values_at,
    })
}

/// Decodes a reply; `None` if it is not a well-formed one.
pub fn decode_reply(payload: &[u8]) -> Option<Reply> {
    let mut r = Reader::new(payload);
    if r.u8()? != REPLY {
        return None;
    }
    let txn = r.u64()?;
    let req_ts = r.u64()?;
    let n = r.u16()? as usize;
    if n > r.remaining() / 9 {
        return None;
    }
    let mut reads = Vec::with_capacity(n);
    let mut values = 0u64;
    for _ in 0..n {
        let key = r.u64()?;
        let v = match r.u8()? {
            0 => None,
            1 => {
                let v = r.value()?;
                values += u64::from(v.len);
                Some(v)
            }
            _ => return None,
        };
        reads.push((key, v));
    }
    let values_at = payload.len() - r.remaining();
    r.finish_with(values)?;
    Some(Reply {
        txn,
        req_ts,
        reads,
        values_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use onepipe_testalloc::fuzz::{self, ensure, Bound};
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<u64>().prop_map(Op::Get),
            (any::<u64>(), any::<u64>(), 0u32..2000)
                .prop_map(|(k, writer, len)| Op::Put(k, Value { writer, len })),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip(txn in any::<u64>(), ops in proptest::collection::vec(op(), 0..20)) {
            let data: Vec<Bytes> = ops
                .iter()
                .filter_map(|o| match o {
                    Op::Put(k, v) => Some(Bytes::from(vec![*k as u8; v.len as usize])),
                    Op::Get(_) => None,
                })
                .collect();
            let b = encode_request_data(txn, &ops, &data);
            prop_assert!(is_request(&b));
            let r = decode_request(&b).expect("decodes");
            prop_assert_eq!((r.txn, &r.ops), (txn, &ops));
            let got: Vec<&[u8]> = data.iter().map(|d| &d[..]).collect();
            prop_assert_eq!(r.put_data(&b), got);
            prop_assert_eq!(decode_reply(&b), None);
        }

        #[test]
        fn replies_round_trip(
            txn in any::<u64>(),
            ts in any::<u64>(),
            reads in proptest::collection::vec(
                (any::<u64>(), proptest::option::of((any::<u64>(), 0u32..2000))), 0..20),
        ) {
            let reads: Vec<_> = reads
                .into_iter()
                .map(|(k, v)| (k, v.map(|(writer, len)| Value { writer, len })))
                .collect();
            let data: Vec<Bytes> = reads
                .iter()
                .filter_map(|r| r.1.map(|v| Bytes::from(vec![r.0 as u8; v.len as usize])))
                .collect();
            let b = encode_reply_data(txn, ts, &reads, &data);
            prop_assert!(!is_request(&b));
            let r = decode_reply(&b).expect("decodes");
            prop_assert_eq!((r.txn, r.req_ts, &r.reads), (txn, ts, &reads));
            let mut want = data.iter();
            let expect: Vec<Option<&[u8]>> =
                reads.iter().map(|x| x.1.and_then(|_| want.next().map(|d| &d[..]))).collect();
            prop_assert_eq!(r.read_data(&b), expect);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_request(&bytes);
            let _ = decode_reply(&bytes);
        }

        #[test]
        fn truncated_or_extended_messages_are_refused(
            ops in proptest::collection::vec(op(), 1..8),
            cut in 1usize..30,
        ) {
            let b = encode_request(7, &ops);
            let cut = cut.min(b.len());
            prop_assert_eq!(decode_request(&b[..b.len() - cut]), None);
            let mut longer = b.to_vec();
            longer.push(0);
            prop_assert_eq!(decode_request(&longer), None);
        }
    }

    fn value(rng: &mut fuzz::Rng) -> Value {
        Value {
            writer: rng.interesting(),
            len: rng.len(2000) as u32,
        }
    }

    /// Each value's bytes, random.
    fn data(rng: &mut fuzz::Rng, values: impl Iterator<Item = Value>) -> Vec<Bytes> {
        values
            .map(|v| Bytes::from(rng.bytes(v.len as usize)))
            .collect()
    }

    fn owned(slices: Vec<&[u8]>) -> Vec<Bytes> {
        slices.into_iter().map(Bytes::copy_from_slice).collect()
    }

    /// A request of up to 64 operations with its values' bytes.
    fn request(rng: &mut fuzz::Rng) -> ((u64, Vec<Op>, Vec<Bytes>), Vec<u8>) {
        let txn = rng.interesting();
        let n = rng.len(64);
        let ops: Vec<Op> = (0..n)
            .map(|_| match rng.bool() {
                true => Op::Get(rng.interesting()),
                false => Op::Put(rng.interesting(), value(rng)),
            })
            .collect();
        let puts = ops.iter().filter_map(|o| match o {
            Op::Put(_, v) => Some(*v),
            Op::Get(_) => None,
        });
        let data = data(rng, puts);
        let b = encode_request_data(txn, &ops, &data).to_vec();
        ((txn, ops, data), b)
    }

    /// A reply of up to 64 reads with the read values' bytes.
    fn reply(rng: &mut fuzz::Rng) -> (Reply, Vec<u8>) {
        let (txn, req_ts) = (rng.interesting(), rng.interesting());
        let n = rng.len(64);
        let reads: Vec<(Key, Option<Value>)> = (0..n)
            .map(|_| (rng.interesting(), rng.bool().then(|| value(rng))))
            .collect();
        let data = data(rng, reads.iter().filter_map(|r| r.1));
        let b = encode_reply_data(txn, req_ts, &reads, &data).to_vec();
        let values_at = b.len() - data.iter().map(Bytes::len).sum::<usize>();
        let r = Reply {
            txn,
            req_ts,
            reads,
            values_at,
        };
        (r, b)
    }

    /// A request allocates its operations at once, for a count checked against the bytes left
    /// at 9 per operation (a get's): at most `len / 9` of `size_of::<Op>()` bytes each. Nothing
    /// else; an empty list allocates nothing.
    #[test]
    fn decode_request_never_panics_nor_overallocates_on_random_and_mutated_input() {
        let bound = Bound::new(size_of::<Op>(), 9, 0);
        fuzz::decoder(
            "kv::decode_request",
            bound,
            request,
            decode_request,
            |input, got, valid| match (got, valid) {
                (Some(r), Some((txn, ops, data))) => ensure(
                    (r.txn, &r.ops) == (*txn, ops) && owned(r.put_data(input)) == *data,
                    || "did not decode back to itself".into(),
                ),
                (None, Some(_)) => Err("a valid request was refused".into()),
                (Some(r), None) => {
                    let again = encode_request_data(r.txn, &r.ops, &owned(r.put_data(input)));
                    ensure(again == input, || "does not re-encode to its bytes".into())
                }
                (None, None) => Ok(()),
            },
        );
    }

    /// A reply allocates its reads at once, for a count checked against the bytes left at 9
    /// per read (an absent one's): at most `len / 9` of `size_of::<(Key, Option<Value>)>()`
    /// bytes each.
    #[test]
    fn decode_reply_never_panics_nor_overallocates_on_random_and_mutated_input() {
        let bound = Bound::new(size_of::<(Key, Option<Value>)>(), 9, 0);
        fuzz::decoder(
            "kv::decode_reply",
            bound,
            reply,
            decode_reply,
            |input, got, valid| match (got, valid) {
                (Some(r), Some(want)) => {
                    ensure(r == want, || "did not decode back to itself".into())
                }
                (None, Some(_)) => Err("a valid reply was refused".into()),
                (Some(r), None) => {
                    let data: Vec<Bytes> = r
                        .read_data(input)
                        .into_iter()
                        .flatten()
                        .map(Bytes::copy_from_slice)
                        .collect();
                    let again = encode_reply_data(r.txn, r.req_ts, &r.reads, &data);
                    ensure(again == input, || "does not re-encode to its bytes".into())
                }
                (None, None) => Ok(()),
            },
        );
    }

    #[test]
    fn a_lying_op_count_is_refused_without_allocating_for_it() {
        let mut b = encode_request(1, &[Op::Get(5)]).to_vec();
        b[9] = 0xFF;
        b[10] = 0xFF;
        assert_eq!(decode_request(&b), None);
    }
}
