//! The applications' byte readers and writers: a cursor over a payload that fails (`None`)
//! instead of panicking, and a builder, big-endian, shared by every application's codec (each
//! adds its own fields in an `impl Reader` and an `impl Writer` of its own). Both are the
//! workspace's one byte reader and writer, `onepipe_proto::byteio`, with the applications'
//! conventions: `Option` for a refusal, big-endian, `u16` list counts.

use onepipe_proto::byteio::{ByteReader, ByteWriter};

/// A cursor over a payload.
pub(crate) struct Reader<'a>(ByteReader<'a>);

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader(ByteReader::new(buf))
    }
    /// Bytes left to read.
    pub(crate) fn remaining(&self) -> usize {
        self.0.remaining()
    }
    /// The next `n` bytes, if there are that many.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        self.0.take(n).ok()
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.0.u8().ok()
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.0.u16_be().ok()
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.0.u32_be().ok()
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.0.u64_be().ok()
    }
    pub(crate) fn i64(&mut self) -> Option<i64> {
        self.0.i64_be().ok()
    }
    /// A byte that is 0 or 1.
    pub(crate) fn bool(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
    /// Flags with no bit outside `mask`.
    pub(crate) fn flags(&mut self, mask: u8) -> Option<u8> {
        self.u8().filter(|f| f & !mask == 0)
    }
    /// A count of entries of at least `min` bytes each, no more than the rest can hold (a count
    /// that lies is refused before anything is allocated for it).
    pub(crate) fn count(&mut self, min: usize) -> Option<usize> {
        let n = self.u16()? as usize;
        self.0.count(n, min.max(1)).ok()
    }
    /// Nothing after the end.
    pub(crate) fn finish(self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
    /// Exactly `len` bytes (of padding, values) left.
    pub(crate) fn finish_with(self, len: u64) -> Option<()> {
        (self.0.remaining() as u64 == len).then_some(())
    }
}

/// A payload being built.
pub(crate) struct Writer(pub(crate) Vec<u8>);

impl Writer {
    /// An empty payload with room for `n` bytes.
    pub(crate) fn with_capacity(n: usize) -> Writer {
        Writer(Vec::with_capacity(n))
    }
    pub(crate) fn u8(&mut self, x: u8) -> &mut Self {
        ByteWriter::new(&mut self.0).u8(x);
        self
    }
    pub(crate) fn u32(&mut self, x: u32) -> &mut Self {
        ByteWriter::new(&mut self.0).u32_be(x);
        self
    }
    pub(crate) fn u64(&mut self, x: u64) -> &mut Self {
        ByteWriter::new(&mut self.0).u64_be(x);
        self
    }
    /// `n` zero bytes (a value's padding).
    pub(crate) fn zeros(&mut self, n: usize) -> &mut Self {
        ByteWriter::new(&mut self.0).zeros(n);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onepipe_testalloc::fuzz::{self, ensure, Bound};
    use onepipe_testalloc::measure;

    /// One field a codec reads.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Field {
        U8(u8),
        U16(u16),
        U32(u32),
        U64(u64),
        I64(i64),
        Bool(bool),
        Flags(u8, u8),
        /// A count of entries of at least `min` bytes, and the entries' bytes.
        Count(u16, usize),
        /// `n` bytes to be left at the end.
        FinishWith(u64),
    }

    fn field(rng: &mut fuzz::Rng) -> Field {
        let x = rng.interesting();
        match rng.below(9) {
            0 => Field::U8(x as u8),
            1 => Field::U16(x as u16),
            2 => Field::U32(x as u32),
            3 => Field::U64(x),
            4 => Field::I64(x as i64),
            5 => Field::Bool(rng.bool()),
            6 => {
                let mask = rng.u8();
                Field::Flags(mask, rng.u8() & mask)
            }
            7 => Field::Count(rng.below(8) as u16, 1 + rng.below(12) as usize),
            _ => Field::FinishWith(rng.below(64)),
        }
    }

    /// A schema of fields and its encoding. A `FinishWith` ends it.
    fn schema(rng: &mut fuzz::Rng) -> (Vec<Field>, Vec<u8>) {
        let n = 1 + rng.len(15);
        let mut fields: Vec<Field> = (0..n).map(|_| field(rng)).collect();
        if let Some(i) = fields
            .iter()
            .position(|f| matches!(f, Field::FinishWith(_)))
        {
            fields.truncate(i + 1);
        }
        let mut w = Writer::with_capacity(64);
        for f in &fields {
            match *f {
                Field::U8(x) | Field::Flags(_, x) => w.u8(x),
                Field::U16(x) => w.u8((x >> 8) as u8).u8(x as u8),
                Field::U32(x) => w.u32(x),
                Field::U64(x) => w.u64(x),
                Field::I64(x) => w.u64(x as u64),
                Field::Bool(b) => w.u8(u8::from(b)),
                Field::Count(n, min) => w.u8((n >> 8) as u8).u8(n as u8).zeros(n as usize * min),
                Field::FinishWith(n) => w.zeros(n as usize),
            };
        }
        (fields, w.0)
    }

    /// Reads `fields` from `buf`: the values read, up to the first refusal, and whether every
    /// read succeeded.
    fn read(fields: &[Field], buf: &[u8]) -> ([Option<Field>; 16], bool) {
        let mut r = Reader::new(buf);
        let mut out = [None; 16];
        for (i, f) in fields.iter().enumerate() {
            let before = r.remaining();
            let got = match *f {
                Field::U8(_) => r.u8().map(Field::U8),
                Field::U16(_) => r.u16().map(Field::U16),
                Field::U32(_) => r.u32().map(Field::U32),
                Field::U64(_) => r.u64().map(Field::U64),
                Field::I64(_) => r.i64().map(Field::I64),
                Field::Bool(_) => r.bool().map(Field::Bool),
                Field::Flags(mask, _) => r.flags(mask).map(|x| Field::Flags(mask, x)),
                Field::Count(_, min) => r.count(min).and_then(|n| {
                    // The entries' bytes: a count is only as good as the bytes behind it.
                    r.take(n * min)?;
                    Some(Field::Count(n as u16, min))
                }),
                Field::FinishWith(n) => {
                    let done = r.finish_with(n).is_some();
                    out[i] = done.then_some(*f);
                    return (out, done);
                }
            };
            assert!(r.remaining() <= before, "a read went backwards");
            match got {
                Some(g) => out[i] = Some(g),
                None => return (out, false),
            }
        }
        (out, r.finish().is_some())
    }

    /// The readers every codec is built on, fed random and mutated field sequences: they
    /// never panic, never read past the end, never allocate, and read back what the writer
    /// wrote; a count larger than the bytes behind it is refused.
    #[test]
    fn reader_never_panics_nor_allocates_on_random_and_mutated_input() {
        fuzz::run("apps::wire::Reader", |case| {
            let (fields, bytes) = schema(&mut case.rng);
            case.record(&bytes);
            let ((got, complete), usage) = measure(|| read(&fields, &bytes));
            Bound::NOTHING.check(bytes.len(), usage)?;
            let want: Vec<Option<Field>> = fields.iter().map(|&f| Some(f)).collect();
            ensure(complete && got[..fields.len()] == want[..], || {
                format!("{fields:?} read back as {got:?}")
            })?;
            let garbage = case.garbage(&bytes, &mut |rng| schema(rng).1);
            let (_, usage) = measure(|| read(&fields, &garbage));
            Bound::NOTHING.check(garbage.len(), usage)
        });
    }
}
