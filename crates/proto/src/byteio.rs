//! The byte reader and writer the workspace's hand-written codecs are built on: the §5.2
//! control messages ([`crate::failure::codec`]), the controller store's log entries, the
//! baselines' packets, the applications' payloads and `onepipe up`'s record files.
//!
//! Byte order is in every method's name (`u32_be`, `u64_le`): the formats differ (the data
//! packets and the applications are big-endian, the control log and the record files
//! little-endian), and a reader never guesses.
//!
//! [`ByteReader`] distrusts its input: a read past the end is a [`Short`] error, never a panic;
//! [`ByteReader::take`] refuses a length beyond what is left, and [`ByteReader::count`] a list
//! count whose items cannot fit in what is left, before the caller allocates anything for them.
//!
//! This is not a serialization framework: each codec still spells out its layout field by field.
//! The data-packet codec (`wire::codec`) reads its fixed offsets directly after one length check
//! and shares nothing here: it is on every packet's path, and a cursor's check per field makes a
//! data packet's zero-copy decode about a quarter slower (≈ 37 against 47 ns in a
//! micro-benchmark on a 2-core machine).

use core::fmt;

/// A read ran past the end of the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Short {
    /// The offset (from the start of the input) the read needed to reach.
    pub needed: usize,
    /// The input's length.
    pub got: usize,
}

/// A cursor over an input that refuses, rather than panics on, reads past its end.
#[derive(Clone, Debug)]
pub struct ByteReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// An encoder that appends fixed-width integers, in the byte order its method names say, to a
/// `Vec<u8>` it borrows.
#[derive(Debug)]
pub struct ByteWriter<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> ByteReader<'a> {
    /// A cursor at the start of `buf`.
    #[inline]
    pub fn new(buf: &'a [u8]) -> ByteReader<'a> {
        ByteReader { buf, pos: 0 }
    }

    /// Bytes read so far (the offset of the next read).
    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left to read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Everything has been read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// What is left, without reading it.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The next `n` bytes, or [`Short`] (reading nothing) if fewer are left. Nothing is
    /// allocated: a length read off the input can be passed straight in.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Short> {
        if n > self.remaining() {
            return Err(Short {
                needed: self.pos.saturating_add(n),
                got: self.buf.len(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// The next `N` bytes as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// `n` if `n` items of at least `item_bytes` each fit in what is left, else [`Short`]:
    /// the check a list count read off the input must pass before anything is allocated for
    /// its items.
    #[inline]
    pub fn count(&self, n: usize, item_bytes: usize) -> Result<usize, Short> {
        let bytes = n.saturating_mul(item_bytes);
        if bytes > self.remaining() {
            return Err(Short {
                needed: self.pos.saturating_add(bytes),
                got: self.buf.len(),
            });
        }
        Ok(n)
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, Short> {
        Ok(self.array::<1>()?[0])
    }

    /// A big-endian `u16`.
    #[inline]
    pub fn u16_be(&mut self) -> Result<u16, Short> {
        self.array().map(u16::from_be_bytes)
    }

    /// A big-endian `u32`.
    #[inline]
    pub fn u32_be(&mut self) -> Result<u32, Short> {
        self.array().map(u32::from_be_bytes)
    }

    /// A big-endian `u64`.
    #[inline]
    pub fn u64_be(&mut self) -> Result<u64, Short> {
        self.array().map(u64::from_be_bytes)
    }

    /// A big-endian `i64`.
    #[inline]
    pub fn i64_be(&mut self) -> Result<i64, Short> {
        self.array().map(i64::from_be_bytes)
    }

    /// A little-endian `u32`.
    #[inline]
    pub fn u32_le(&mut self) -> Result<u32, Short> {
        self.array().map(u32::from_le_bytes)
    }

    /// A little-endian `u64`.
    #[inline]
    pub fn u64_le(&mut self) -> Result<u64, Short> {
        self.array().map(u64::from_le_bytes)
    }
}

impl<'a> ByteWriter<'a> {
    /// A writer appending to `out`.
    #[inline]
    pub fn new(out: &'a mut Vec<u8>) -> ByteWriter<'a> {
        ByteWriter { out }
    }

    /// Bytes in the output so far (including what it held before this writer).
    #[inline]
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// The output is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Appends `bytes` as they are.
    #[inline]
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        self.out.extend_from_slice(bytes);
        self
    }

    /// Appends `n` zero bytes (padding, or an absent field).
    #[inline]
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.out.resize(self.out.len() + n, 0);
        self
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self, x: u8) -> &mut Self {
        self.out.push(x);
        self
    }

    /// A big-endian `u16`.
    #[inline]
    pub fn u16_be(&mut self, x: u16) -> &mut Self {
        self.bytes(&x.to_be_bytes())
    }

    /// A big-endian `u32`.
    #[inline]
    pub fn u32_be(&mut self, x: u32) -> &mut Self {
        self.bytes(&x.to_be_bytes())
    }

    /// A big-endian `u64`.
    #[inline]
    pub fn u64_be(&mut self, x: u64) -> &mut Self {
        self.bytes(&x.to_be_bytes())
    }

    /// A little-endian `u32`.
    #[inline]
    pub fn u32_le(&mut self, x: u32) -> &mut Self {
        self.bytes(&x.to_le_bytes())
    }

    /// A little-endian `u64`.
    #[inline]
    pub fn u64_le(&mut self, x: u64) -> &mut Self {
        self.bytes(&x.to_le_bytes())
    }
}

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "input ends at {} bytes, needed {}",
            self.got, self.needed
        )
    }
}

impl std::error::Error for Short {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_width_reads_back_what_was_written_in_its_byte_order() {
        let mut out = vec![0xaa];
        ByteWriter::new(&mut out)
            .u8(1)
            .u16_be(0x0203)
            .u32_be(0x0405_0607)
            .u64_be(0x0809_0a0b_0c0d_0e0f)
            .u32_le(0x1011_1213)
            .u64_le(0x1415_1617_1819_1a1b)
            .zeros(2)
            .bytes(b"xy");
        assert_eq!(out[1..4], [1, 2, 3]);
        assert_eq!(out[16..20], [0x13, 0x12, 0x11, 0x10]);
        let mut r = ByteReader::new(&out);
        assert_eq!(r.u8(), Ok(0xaa));
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.u16_be(), Ok(0x0203));
        assert_eq!(r.u32_be(), Ok(0x0405_0607));
        assert_eq!(r.i64_be(), Ok(0x0809_0a0b_0c0d_0e0f));
        assert_eq!(r.u32_le(), Ok(0x1011_1213));
        assert_eq!(r.u64_le(), Ok(0x1415_1617_1819_1a1b));
        assert_eq!(r.take(2), Ok(&[0u8, 0][..]));
        assert_eq!(r.rest(), b"xy");
        assert_eq!(r.pos(), out.len() - 2);
        assert_eq!(
            r.u32_be(),
            Err(Short {
                needed: 34,
                got: 32
            })
        );
        assert_eq!(r.remaining(), 2, "a short read reads nothing");
    }

    #[test]
    fn a_length_or_count_beyond_the_input_is_refused_before_allocation() {
        let buf = [0u8; 10];
        let mut r = ByteReader::new(&buf);
        r.u32_le().unwrap();
        assert_eq!(
            r.take(usize::MAX),
            Err(Short {
                needed: usize::MAX,
                got: 10
            })
        );
        assert_eq!(r.count(3, 2), Ok(3));
        assert!(r.count(4, 2).is_err());
        assert!(r.count(usize::MAX, 16).is_err());
        assert_eq!(
            r.count(usize::MAX, 0),
            Ok(usize::MAX),
            "zero-sized items fit"
        );
    }

    proptest! {
        #[test]
        fn arbitrary_reads_never_panic_nor_overrun(
            buf in prop::collection::vec(any::<u8>(), 0..40),
            ops in prop::collection::vec(0u8..8, 0..20),
        ) {
            let mut r = ByteReader::new(&buf);
            for op in ops {
                let before = r.pos();
                let ok = match op {
                    0 => r.u8().is_ok(),
                    1 => r.u16_be().is_ok(),
                    2 => r.u32_be().is_ok(),
                    3 => r.u64_be().is_ok(),
                    4 => r.u32_le().is_ok(),
                    5 => r.u64_le().is_ok(),
                    6 => r.take(usize::from(before as u8 % 7)).is_ok(),
                    _ => r.take(r.remaining() + 1).is_ok(),
                };
                prop_assert!(r.pos() <= buf.len());
                prop_assert!(ok || r.pos() == before);
            }
        }
    }
}
