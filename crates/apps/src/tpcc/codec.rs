//! TPC-C's two messages on the wire. Big-endian, bounds-checked: a malformed message decodes to
//! `None` (the receiver drops and counts it), never a panic.
//!
//! * Request (initiator → every replica of every shard touched, one payload for all, Eris-style;
//!   §7.3.2): `3`, txn `u64`, then the input:
//!   * New-Order: `1`, `W_ID u32`, `D_ID u32`, `C_ID u32`, line count `u8` (at most
//!     [`LINES_MAX`]), then per line `OL_I_ID u32`, `OL_SUPPLY_W_ID u32`, `OL_QUANTITY u8`;
//!   * Payment: `2`, `W_ID u32`, `D_ID u32`, `C_W_ID u32`, `C_D_ID u32`, selector `u8` (`0` by id,
//!     `1` by last name), `C_ID u32` or last-name code `u32` (below 2^16), `H_AMOUNT u32`
//!     (cents).
//! * Reply (replica → initiator): `4`, txn `u64`, the request's timestamp `u64`, shard `u32`,
//!   then the part's result:
//!   * New-Order: `1`, flags `u8` (bit 0 rolled back, bit 1 `W_TAX` follows, bit 2 the district's
//!     part follows), [`W_TAX u16`], [`D_TAX u16`, `O_ID u32`, `C_DISCOUNT u16`, `C_LAST u16`,
//!     `C_CREDIT u8`], stock count `u8` (at most [`LINES_MAX`]), per stock line its index `u8`
//!     and `S_QUANTITY u16`;
//!   * Payment: `2`, flags `u8` (bit 0 `W_YTD`, bit 1 `D_YTD`, bit 2 the customer follow),
//!     [`W_YTD i64`], [`D_YTD i64`], [`C_ID u32`, `C_BALANCE i64`, `C_CREDIT u8`].
//!
//! Booleans and `C_CREDIT` are `0` or `1`; flags have no other bits; nothing follows the end.
//! (The tags 3 and 4 differ from the key-value store's 1 and 2, so neither mistakes the other's
//! messages for its own.)

use super::{
    Credit, CustomerSelector, NewOrderDistrict, NewOrderInput, NewOrderPart, OrderLineInput,
    PartResult, PaymentCustomer, PaymentInput, PaymentPart, TxnInput, LINES_MAX,
};
use bytes::{BufMut, Bytes, BytesMut};

const REQUEST: u8 = 3;
const REPLY: u8 = 4;
const NEW_ORDER: u8 = 1;
const PAYMENT: u8 = 2;

/// Longest input: a New-Order of [`LINES_MAX`] lines.
pub const INPUT_LEN_MAX: usize = 1 + 12 + 1 + LINES_MAX * 9;
/// Longest result: a New-Order part with everything.
pub const RESULT_LEN_MAX: usize = 1 + 1 + 2 + 11 + 1 + LINES_MAX * 3;
/// Longest request.
pub const REQUEST_LEN_MAX: usize = 1 + 8 + INPUT_LEN_MAX;
/// Longest reply.
pub const REPLY_LEN_MAX: usize = 1 + 8 + 8 + 4 + RESULT_LEN_MAX;

/// A decoded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The transaction.
    pub txn: u64,
    /// Its input.
    pub input: TxnInput,
}

/// A decoded reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The transaction.
    pub txn: u64,
    /// The timestamp of the request it answers (an attempt sent again is told apart by it).
    pub req_ts: u64,
    /// The shard that answers.
    pub shard: u32,
    /// What its part read and decided.
    pub result: PartResult,
}

/// Whether `payload` is a request (else a reply, or malformed).
pub fn is_request(payload: &[u8]) -> bool {
    payload.first() == Some(&REQUEST)
}

/// Encodes a request. The input must have at most [`LINES_MAX`] lines and a last-name code
/// below 2^16 (the generator's always do).
pub fn encode_request(txn: u64, input: &TxnInput) -> Bytes {
    let mut b = BytesMut::with_capacity(REQUEST_LEN_MAX);
    b.put_u8(REQUEST);
    b.put_u64(txn);
    put_input(&mut b, input);
    debug_assert!(b.len() <= REQUEST_LEN_MAX);
    b.freeze()
}

/// Appends a transaction's input as a request carries it (at most [`INPUT_LEN_MAX`] bytes).
pub(super) fn put_input(b: &mut BytesMut, input: &TxnInput) {
    match input {
        TxnInput::NewOrder(t) => {
            assert!(t.lines.len() <= LINES_MAX, "{} lines", t.lines.len());
            b.put_u8(NEW_ORDER);
            b.put_u32(t.w_id);
            b.put_u32(t.d_id);
            b.put_u32(t.c_id);
            b.put_u8(t.lines.len() as u8);
            for l in &t.lines {
                b.put_u32(l.i_id);
                b.put_u32(l.supply_w_id);
                b.put_u8(l.quantity);
            }
        }
        TxnInput::Payment(t) => {
            b.put_u8(PAYMENT);
            b.put_u32(t.w_id);
            b.put_u32(t.d_id);
            b.put_u32(t.c_w_id);
            b.put_u32(t.c_d_id);
            match t.customer {
                CustomerSelector::Id(c) => {
                    b.put_u8(0);
                    b.put_u32(c);
                }
                CustomerSelector::LastName(n) => {
                    b.put_u8(1);
                    b.put_u32(n.into());
                }
            }
            b.put_u32(t.amount);
        }
    }
}

/// Encodes a reply. A New-Order part must have at most [`LINES_MAX`] stock lines.
pub fn encode_reply(txn: u64, req_ts: u64, shard: u32, result: &PartResult) -> Bytes {
    let mut b = BytesMut::with_capacity(REPLY_LEN_MAX);
    b.put_u8(REPLY);
    b.put_u64(txn);
    b.put_u64(req_ts);
    b.put_u32(shard);
    put_result(&mut b, result);
    debug_assert!(b.len() <= REPLY_LEN_MAX);
    b.freeze()
}

/// Appends a part's result as a reply carries it (at most [`RESULT_LEN_MAX`] bytes).
pub(super) fn put_result(b: &mut BytesMut, result: &PartResult) {
    match result {
        PartResult::NewOrder(p) => {
            assert!(p.stock.len() <= LINES_MAX, "{} stock lines", p.stock.len());
            b.put_u8(NEW_ORDER);
            let flags = u8::from(p.rolled_back)
                | u8::from(p.w_tax.is_some()) << 1
                | u8::from(p.district.is_some()) << 2;
            b.put_u8(flags);
            if let Some(t) = p.w_tax {
                b.put_u16(t);
            }
            if let Some(d) = &p.district {
                b.put_u16(d.d_tax);
                b.put_u32(d.o_id);
                b.put_u16(d.c_discount);
                b.put_u16(d.c_last);
                b.put_u8(credit_byte(d.c_credit));
            }
            b.put_u8(p.stock.len() as u8);
            for &(line, q) in &p.stock {
                b.put_u8(line);
                b.put_u16(q);
            }
        }
        PartResult::Payment(p) => {
            b.put_u8(PAYMENT);
            let flags = u8::from(p.w_ytd.is_some())
                | u8::from(p.d_ytd.is_some()) << 1
                | u8::from(p.customer.is_some()) << 2;
            b.put_u8(flags);
            if let Some(y) = p.w_ytd {
                b.put_i64(y);
            }
            if let Some(y) = p.d_ytd {
                b.put_i64(y);
            }
            if let Some(c) = &p.customer {
                b.put_u32(c.c_id);
                b.put_i64(c.c_balance);
                b.put_u8(credit_byte(c.c_credit));
            }
        }
    }
}

fn credit_byte(c: Credit) -> u8 {
    match c {
        Credit::Good => 0,
        Credit::Bad => 1,
    }
}

pub(super) use crate::wire::Reader;

impl Reader<'_> {
    pub(super) fn credit(&mut self) -> Option<Credit> {
        Some(if self.bool()? {
            Credit::Bad
        } else {
            Credit::Good
        })
    }

    /// A transaction's input, as [`put_input`] writes it.
    pub(super) fn input(&mut self) -> Option<TxnInput> {
        Some(match self.u8()? {
            NEW_ORDER => {
                let (w_id, d_id, c_id) = (self.u32()?, self.u32()?, self.u32()?);
                let n = self.u8()? as usize;
                if n > LINES_MAX {
                    return None;
                }
                let mut lines = Vec::with_capacity(n);
                for _ in 0..n {
                    lines.push(OrderLineInput {
                        i_id: self.u32()?,
                        supply_w_id: self.u32()?,
                        quantity: self.u8()?,
                    });
                }
                TxnInput::NewOrder(NewOrderInput {
                    w_id,
                    d_id,
                    c_id,
                    lines,
                })
            }
            PAYMENT => {
                let (w_id, d_id) = (self.u32()?, self.u32()?);
                let (c_w_id, c_d_id) = (self.u32()?, self.u32()?);
                let customer = match self.u8()? {
                    0 => CustomerSelector::Id(self.u32()?),
                    1 => CustomerSelector::LastName(u16::try_from(self.u32()?).ok()?),
                    _ => return None,
                };
                TxnInput::Payment(PaymentInput {
                    w_id,
                    d_id,
                    c_w_id,
                    c_d_id,
                    customer,
                    amount: self.u32()?,
                })
            }
            _ => return None,
        })
    }

    /// A part's result, as [`put_result`] writes it.
    pub(super) fn result(&mut self) -> Option<PartResult> {
        Some(match self.u8()? {
            NEW_ORDER => {
                let flags = self.flags(0b111)?;
                let w_tax = if flags & 2 != 0 {
                    Some(self.u16()?)
                } else {
                    None
                };
                let district = if flags & 4 != 0 {
                    Some(NewOrderDistrict {
                        d_tax: self.u16()?,
                        o_id: self.u32()?,
                        c_discount: self.u16()?,
                        c_last: self.u16()?,
                        c_credit: self.credit()?,
                    })
                } else {
                    None
                };
                let n = self.u8()? as usize;
                if n > LINES_MAX {
                    return None;
                }
                let mut stock = Vec::with_capacity(n);
                for _ in 0..n {
                    stock.push((self.u8()?, self.u16()?));
                }
                PartResult::NewOrder(NewOrderPart {
                    rolled_back: flags & 1 != 0,
                    w_tax,
                    district,
                    stock,
                })
            }
            PAYMENT => {
                let flags = self.flags(0b111)?;
                let w_ytd = if flags & 1 != 0 {
                    Some(self.i64()?)
                } else {
                    None
                };
                let d_ytd = if flags & 2 != 0 {
                    Some(self.i64()?)
                } else {
                    None
                };
                let customer = if flags & 4 != 0 {
                    Some(PaymentCustomer {
                        c_id: self.u32()?,
                        c_balance: self.i64()?,
                        c_credit: self.credit()?,
                    })
                } else {
                    None
                };
                PartResult::Payment(PaymentPart {
                    w_ytd,
                    d_ytd,
                    customer,
                })
            }
            _ => return None,
        })
    }
}

/// Decodes a request; `None` if it is not a well-formed one. (Whether its ids lie inside the
/// database is [`TxnInput::is_valid`]'s question.)
pub fn decode_request(payload: &[u8]) -> Option<Request> {
    let mut r = Reader::new(payload);
    if r.u8()? != REQUEST {
        return None;
    }
    let txn = r.u64()?;
    let input = r.input()?;
    r.finish()?;
    Some(Request { txn, input })
}

/// Decodes a reply; `None` if it is not a well-formed one.
pub fn decode_reply(payload: &[u8]) -> Option<Reply> {
    let mut r = Reader::new(payload);
    if r.u8()? != REPLY {
        return None;
    }
    let (txn, req_ts, shard) = (r.u64()?, r.u64()?, r.u32()?);
    let result = r.result()?;
    r.finish()?;
    Some(Reply {
        txn,
        req_ts,
        shard,
        result,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use onepipe_testalloc::fuzz::{self, ensure, Bound};
    use proptest::prelude::*;

    fn line() -> impl Strategy<Value = OrderLineInput> {
        (any::<u32>(), any::<u32>(), any::<u8>()).prop_map(|(i_id, supply_w_id, quantity)| {
            OrderLineInput {
                i_id,
                supply_w_id,
                quantity,
            }
        })
    }

    /// Any input the wire can carry (valid or not).
    pub(in crate::tpcc) fn input() -> impl Strategy<Value = TxnInput> {
        let selector = prop_oneof![
            any::<u32>().prop_map(CustomerSelector::Id),
            any::<u16>().prop_map(CustomerSelector::LastName),
        ];
        prop_oneof![
            (
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                proptest::collection::vec(line(), 0..=LINES_MAX)
            )
                .prop_map(|(w_id, d_id, c_id, lines)| TxnInput::NewOrder(
                    NewOrderInput {
                        w_id,
                        d_id,
                        c_id,
                        lines
                    }
                )),
            (
                (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
                selector,
                any::<u32>()
            )
                .prop_map(|((w_id, d_id, c_w_id, c_d_id), customer, amount)| {
                    TxnInput::Payment(PaymentInput {
                        w_id,
                        d_id,
                        c_w_id,
                        c_d_id,
                        customer,
                        amount,
                    })
                }),
        ]
    }

    fn credit() -> impl Strategy<Value = Credit> {
        prop_oneof![Just(Credit::Good), Just(Credit::Bad)]
    }

    /// Any result the wire can carry.
    pub(in crate::tpcc) fn result() -> impl Strategy<Value = PartResult> {
        let district = (
            any::<u16>(),
            any::<u32>(),
            any::<u16>(),
            any::<u16>(),
            credit(),
        )
            .prop_map(
                |(d_tax, o_id, c_discount, c_last, c_credit)| NewOrderDistrict {
                    d_tax,
                    o_id,
                    c_discount,
                    c_last,
                    c_credit,
                },
            );
        let customer =
            (any::<u32>(), any::<i64>(), credit()).prop_map(|(c_id, c_balance, c_credit)| {
                PaymentCustomer {
                    c_id,
                    c_balance,
                    c_credit,
                }
            });
        prop_oneof![
            (
                any::<bool>(),
                proptest::option::of(any::<u16>()),
                proptest::option::of(district),
                proptest::collection::vec((any::<u8>(), any::<u16>()), 0..=LINES_MAX)
            )
                .prop_map(|(rolled_back, w_tax, district, stock)| {
                    PartResult::NewOrder(NewOrderPart {
                        rolled_back,
                        w_tax,
                        district,
                        stock,
                    })
                }),
            (
                proptest::option::of(any::<i64>()),
                proptest::option::of(any::<i64>()),
                proptest::option::of(customer)
            )
                .prop_map(|(w_ytd, d_ytd, customer)| PartResult::Payment(
                    PaymentPart {
                        w_ytd,
                        d_ytd,
                        customer
                    }
                )),
        ]
    }

    proptest! {
        #[test]
        fn requests_round_trip(txn in any::<u64>(), input in input()) {
            let b = encode_request(txn, &input);
            prop_assert!(is_request(&b));
            prop_assert!(b.len() <= REQUEST_LEN_MAX);
            prop_assert_eq!(decode_request(&b), Some(Request { txn, input }));
            prop_assert_eq!(decode_reply(&b), None);
        }

        #[test]
        fn replies_round_trip(
            txn in any::<u64>(),
            ts in any::<u64>(),
            shard in any::<u32>(),
            result in result(),
        ) {
            let b = encode_reply(txn, ts, shard, &result);
            prop_assert!(!is_request(&b));
            prop_assert!(b.len() <= REPLY_LEN_MAX);
            prop_assert_eq!(decode_reply(&b), Some(Reply { txn, req_ts: ts, shard, result }));
            prop_assert_eq!(decode_request(&b), None);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_request(&bytes);
            let _ = decode_reply(&bytes);
        }

        #[test]
        fn arbitrary_bytes_after_a_tag_never_panic(
            tag in 3u8..=4,
            kind in 0u8..=3,
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut b = vec![tag];
            b.extend_from_slice(&bytes[..bytes.len().min(8)]);
            b.push(kind);
            b.extend_from_slice(&bytes);
            let _ = decode_request(&b);
            let _ = decode_reply(&b);
        }

        #[test]
        fn truncated_or_extended_messages_are_refused(
            input in input(),
            result in result(),
            cut in 1usize..40,
        ) {
            let b = encode_request(7, &input);
            let c = cut.min(b.len());
            prop_assert_eq!(decode_request(&b[..b.len() - c]), None);
            let mut longer = b.to_vec();
            longer.push(0);
            prop_assert_eq!(decode_request(&longer), None);
            let b = encode_reply(7, 9, 1, &result);
            let c = cut.min(b.len());
            prop_assert_eq!(decode_reply(&b[..b.len() - c]), None);
            let mut longer = b.to_vec();
            longer.push(0);
            prop_assert_eq!(decode_reply(&longer), None);
        }
    }

    /// A request allocates only its New-Order's lines, at most [`LINES_MAX`] of them (a
    /// larger count is refused before anything is allocated).
    const REQUEST_BOUND: Bound = Bound::constant(LINES_MAX * size_of::<OrderLineInput>());
    /// A reply allocates only its New-Order part's stock lines, at most [`LINES_MAX`].
    const REPLY_BOUND: Bound = Bound::constant(LINES_MAX * size_of::<(u8, u16)>());

    #[test]
    fn decode_request_never_panics_nor_overallocates_on_random_and_mutated_input() {
        fuzz::decoder(
            "tpcc::decode_request",
            REQUEST_BOUND,
            |rng| {
                let r = Request {
                    txn: rng.interesting(),
                    input: fuzz::draw(rng, input()),
                };
                let b = encode_request(r.txn, &r.input).to_vec();
                (r, b)
            },
            decode_request,
            |bytes, got, valid| match (got, valid) {
                (got, Some(want)) => ensure(got.as_ref() == Some(want), || "no round trip".into()),
                (Some(r), None) => ensure(encode_request(r.txn, &r.input) == bytes, || {
                    "does not re-encode to its bytes".into()
                }),
                (None, None) => Ok(()),
            },
        );
    }

    #[test]
    fn decode_reply_never_panics_nor_overallocates_on_random_and_mutated_input() {
        fuzz::decoder(
            "tpcc::decode_reply",
            REPLY_BOUND,
            |rng| {
                let r = Reply {
                    txn: rng.interesting(),
                    req_ts: rng.interesting(),
                    shard: rng.u32(),
                    result: fuzz::draw(rng, result()),
                };
                let b = encode_reply(r.txn, r.req_ts, r.shard, &r.result).to_vec();
                (r, b)
            },
            decode_reply,
            |bytes, got, valid| match (got, valid) {
                (got, Some(want)) => ensure(got.as_ref() == Some(want), || "no round trip".into()),
                (Some(r), None) => ensure(
                    encode_reply(r.txn, r.req_ts, r.shard, &r.result) == bytes,
                    || "does not re-encode to its bytes".into(),
                ),
                (None, None) => Ok(()),
            },
        );
    }

    #[test]
    fn a_lying_line_count_is_refused() {
        let t = TxnInput::NewOrder(NewOrderInput {
            w_id: 1,
            d_id: 1,
            c_id: 1,
            lines: vec![],
        });
        let mut b = encode_request(1, &t).to_vec();
        // The count is the last byte of an order with no lines.
        *b.last_mut().unwrap() = 0xFF;
        assert_eq!(decode_request(&b), None);
        *b.last_mut().unwrap() = LINES_MAX as u8 + 1;
        b.resize(b.len() + (LINES_MAX + 1) * 9, 0);
        assert_eq!(decode_request(&b), None, "more lines than a New-Order has");
    }

    #[test]
    fn unknown_flags_and_credit_bytes_are_refused() {
        let p = PartResult::Payment(PaymentPart {
            w_ytd: None,
            d_ytd: None,
            customer: Some(PaymentCustomer {
                c_id: 1,
                c_balance: 5,
                c_credit: Credit::Bad,
            }),
        });
        let b = encode_reply(1, 2, 3, &p).to_vec();
        let mut bad_flags = b.clone();
        bad_flags[22] |= 0x80;
        assert_eq!(decode_reply(&bad_flags), None);
        let mut bad_credit = b;
        *bad_credit.last_mut().unwrap() = 2;
        assert_eq!(decode_reply(&bad_credit), None);
    }
}
