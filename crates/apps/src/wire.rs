//! The applications' byte readers and writers: a cursor over a payload that fails (`None`)
//! instead of panicking, and a builder, big-endian, shared by every application's codec (each
//! adds its own fields in an `impl Reader` and an `impl Writer` of its own).

/// A cursor over a payload.
pub(crate) struct Reader<'a> {
    /// What is left to read.
    pub(crate) buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`.
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.buf.split_at_checked(N)?;
        self.buf = rest;
        head.try_into().ok()
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_be_bytes)
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_be_bytes)
    }
    pub(crate) fn i64(&mut self) -> Option<i64> {
        self.take().map(i64::from_be_bytes)
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
        (n <= self.buf.len() / min.max(1)).then_some(n)
    }
    /// Nothing after the end.
    pub(crate) fn finish(self) -> Option<()> {
        self.buf.is_empty().then_some(())
    }
    /// Exactly `len` bytes (of padding, values) left.
    pub(crate) fn finish_with(self, len: u64) -> Option<()> {
        (self.buf.len() as u64 == len).then_some(())
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
        self.0.push(x);
        self
    }
    pub(crate) fn u32(&mut self, x: u32) -> &mut Self {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }
    pub(crate) fn u64(&mut self, x: u64) -> &mut Self {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }
    /// `n` zero bytes (a value's padding).
    pub(crate) fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}
