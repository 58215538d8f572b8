//! A seeded loop of random and mutated inputs for a decoder, with its properties checked on each.
//!
//! Each case draws a valid value, encodes it with the codec's own encoder and decodes it back
//! (it must round-trip), then decodes a *garbage* buffer made from it: either fully random bytes
//! (0 to 4 KiB, most of them short: [`random_buffer`]) or the valid encoding mutated — bits
//! flipped, bytes set to 0x00, 0xFF or anything, integers written over fields (length fields
//! made huge), truncated, extended, spliced with another valid encoding, chunks inserted,
//! deleted or repeated ([`mutate`]). Every decode runs under [`crate::measure`] and must stay
//! within its decoder's allocation [`Bound`]; a panic, a broken property or an allocation past
//! the bound fails the test with the case's replay line.
//!
//! How many cases, and which, come from the environment:
//!
//! * [`CASES_ENV`] (`ONEPIPE_FUZZ_CASES`): cases per decoder, default [`CASES_DEFAULT`] (what
//!   `cargo test` and `scripts/test.sh` run); `ONEPIPE_FUZZ_CASES=1000000` for the long run;
//! * [`SEED_ENV`] (`ONEPIPE_FUZZ_SEED`): the run's seed (decimal or `0x` hex), default
//!   [`SEED_DEFAULT`]: the same cases every run unless asked otherwise (STYLE.md: determinism);
//! * [`CASE_ENV`] (`ONEPIPE_FUZZ_CASE`): run only that case — what a failure prints to replay it.
//!
//! A case's randomness depends only on (seed, decoder name, case index), so one case replays
//! alone, whatever the count.

use crate::{measure, Usage};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::fmt::Debug;
use std::panic::{self, AssertUnwindSafe};

/// Cases per decoder, from the environment.
pub const CASES_ENV: &str = "ONEPIPE_FUZZ_CASES";
/// The run's seed, from the environment.
pub const SEED_ENV: &str = "ONEPIPE_FUZZ_SEED";
/// Run only this case (its index), from the environment.
pub const CASE_ENV: &str = "ONEPIPE_FUZZ_CASE";
/// Cases per decoder when [`CASES_ENV`] is not set: all the decoders' tests together stay within
/// a minute of `cargo test` on 2 cores at the test profile's `opt-level = 1`.
pub const CASES_DEFAULT: u64 = 50_000;
/// The seed when [`SEED_ENV`] is not set.
pub const SEED_DEFAULT: u64 = 0x1_917e_0000_0034;
/// Longest random buffer, in bytes.
pub const RANDOM_LEN_MAX: usize = 4096;

/// A small, fast, seeded generator (SplitMix64): the tests' only randomness.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// 64 random bits.
    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// 32 random bits.
    pub fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }

    /// 8 random bits.
    pub fn u8(&mut self) -> u8 {
        (self.u64() >> 56) as u8
    }

    /// A fair coin.
    pub fn bool(&mut self) -> bool {
        self.u64() >> 63 == 1
    }

    /// Uniform in `0..n` (`n > 0`; the bias of the multiply-shift is below 2^-32 for any `n`
    /// a test uses).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((u128::from(self.u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A length in `0..=max`, log-uniform: as likely below 16 as between 1,024 and 2,048, so
    /// most are short and every size is reached.
    pub fn len(&mut self, max: usize) -> usize {
        let bits = usize::BITS - max.leading_zeros();
        let width = self.below(u64::from(bits) + 1);
        let x = self.below(1u64 << width) as usize;
        x.min(max)
    }

    /// One of `xs`.
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.index(xs.len())]
    }

    /// A value that breaks codecs: a boundary of a field width, or anything.
    pub fn interesting(&mut self) -> u64 {
        const EDGES: [u64; 20] = [
            0,
            1,
            2,
            0x7f,
            0x80,
            0xff,
            0x100,
            0x7fff,
            0x8000,
            0xffff,
            0x1_0000,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            0x1_0000_0000,
            (1 << 48) - 1,
            1 << 48,
            1 << 62,
            i64::MAX as u64,
            u64::MAX,
        ];
        if self.percent(80) {
            *self.pick(&EDGES)
        } else {
            self.u64()
        }
    }

    /// Random bytes, `0..=max` of them ([`Rng::len`]: most short).
    pub fn some_bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.len(max);
        self.bytes(n)
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            let w = self.u64().to_le_bytes();
            v.extend_from_slice(&w[..(n - v.len()).min(8)]);
        }
        v
    }
}

/// A value of a proptest `strategy`, drawn from `rng`: the codecs' existing strategies serve as
/// generators of valid values (no shrinking: the case's seed replays it).
pub fn draw<S: Strategy>(rng: &mut Rng, strategy: S) -> S::Value {
    let mut seed = [0u8; 16];
    seed[..8].copy_from_slice(&rng.u64().to_le_bytes());
    seed[8..].copy_from_slice(&rng.u64().to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::XorShift, &seed);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    strategy
        .new_tree(&mut runner)
        .expect("the strategy draws a value")
        .current()
}

/// Random bytes, 0 to [`RANDOM_LEN_MAX`] of them, most short ([`Rng::len`]): uniform bytes, or
/// mostly one byte (0x00, 0xFF, anything) with a few others, or bytes from a small alphabet of
/// field boundaries and JSON punctuation.
pub fn random_buffer(rng: &mut Rng) -> Vec<u8> {
    let n = rng.len(RANDOM_LEN_MAX);
    match rng.below(10) {
        0..=5 => rng.bytes(n),
        6..=7 => {
            let any = rng.u8();
            let fill = *rng.pick(&[0x00, 0xff, any]);
            let mut v = vec![fill; n];
            for _ in 0..rng.len(8).min(n) {
                let at = rng.index(n);
                v[at] = rng.u8();
            }
            v
        }
        _ => {
            const ALPHABET: &[u8] = b"\x00\x01\x02\x7f\x80\xff{}[]\":,0-e\n \\";
            (0..n).map(|_| *rng.pick(ALPHABET)).collect()
        }
    }
}

/// `valid` with one to four mutations (most often one). `other` gives another valid encoding
/// to splice with, asked for only when a splice is drawn.
pub fn mutate(rng: &mut Rng, valid: &[u8], other: &mut dyn FnMut(&mut Rng) -> Vec<u8>) -> Vec<u8> {
    let mut b = valid.to_vec();
    let rounds = 1 + rng.len(3);
    for _ in 0..rounds {
        mutate_once(rng, &mut b, other);
    }
    b
}

fn mutate_once(rng: &mut Rng, b: &mut Vec<u8>, other: &mut dyn FnMut(&mut Rng) -> Vec<u8>) {
    let at = |rng: &mut Rng, len: usize| rng.index(len + 1);
    match rng.below(11) {
        // A bit flipped.
        0 if !b.is_empty() => {
            let i = rng.index(b.len());
            b[i] ^= 1 << rng.below(8);
        }
        // A byte set to 0x00, 0xFF or anything.
        1 if !b.is_empty() => {
            let (i, any) = (rng.index(b.len()), rng.u8());
            b[i] = *rng.pick(&[0x00, 0xff, any]);
        }
        // A byte moved a little: a tag or a count one off.
        2 if !b.is_empty() => {
            let i = rng.index(b.len());
            let d = *rng.pick(&[1u8, 2, 0xff, 0xfe]);
            b[i] = b[i].wrapping_add(d);
        }
        // An integer of 1, 2, 4 or 8 bytes, either byte order, over whatever is there: length
        // and count fields made huge, zero or one past a limit.
        3 if !b.is_empty() => overwrite_integer(rng, b),
        // Truncated.
        4 => {
            let n = at(rng, b.len());
            b.truncate(n);
        }
        // Extended by random bytes or zeros.
        5 => {
            let n = 1 + rng.len(64);
            if rng.bool() {
                b.extend(rng.bytes(n));
            } else {
                b.resize(b.len() + n, 0);
            }
        }
        // Spliced: a prefix of this one, the suffix of another valid encoding.
        6 => {
            let o = other(rng);
            let cut = at(rng, b.len());
            let from = at(rng, o.len());
            b.truncate(cut);
            b.extend_from_slice(&o[from..]);
        }
        // Random bytes inserted.
        7 => {
            let i = at(rng, b.len());
            let n = 1 + rng.len(16);
            let ins = rng.bytes(n);
            b.splice(i..i, ins);
        }
        // A chunk deleted.
        8 if !b.is_empty() => {
            let i = rng.index(b.len());
            let n = 1 + rng.len(b.len() - i - 1);
            b.drain(i..i + n);
        }
        // A chunk repeated (a list entry twice, a header again).
        9 if !b.is_empty() => repeat_chunk(rng, b),
        // Another valid encoding appended: two messages where one is expected.
        _ => {
            let o = other(rng);
            b.extend_from_slice(&o);
        }
    }
}

/// Writes an integer of 1, 2, 4 or 8 bytes ([`Rng::interesting`]), big- or little-endian, its
/// high or low bytes, over non-empty `b` at a random place (cut at the end).
fn overwrite_integer(rng: &mut Rng, b: &mut [u8]) {
    let width = *rng.pick(&[1usize, 2, 4, 8]);
    let x = rng.interesting();
    let bytes = if rng.bool() {
        x.to_be_bytes()
    } else {
        x.to_le_bytes()
    };
    let field = if rng.bool() {
        &bytes[8 - width..]
    } else {
        &bytes[..width]
    };
    let i = rng.index(b.len());
    let n = width.min(b.len() - i);
    b[i..i + n].copy_from_slice(&field[..n]);
}

/// Inserts a copy of a chunk of non-empty `b` (at most 64 bytes) at a random place in it.
fn repeat_chunk(rng: &mut Rng, b: &mut Vec<u8>) {
    let i = rng.index(b.len());
    let n = 1 + rng.len((b.len() - i - 1).min(64));
    let chunk = b[i..i + n].to_vec();
    let to = rng.index(b.len() + 1);
    b.splice(to..to, chunk);
}

/// How much a decoder may allocate for an input of `len` bytes:
/// `len × per_byte_num / per_byte_den + constant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    /// Bytes per input byte, numerator.
    pub per_byte_num: usize,
    /// Bytes per input byte, denominator.
    pub per_byte_den: usize,
    /// Bytes whatever the input.
    pub constant: usize,
}

impl Bound {
    /// Nothing at all: the decoder returns plain values.
    pub const NOTHING: Bound = Bound::new(0, 1, 0);

    /// `len × num / den + constant` bytes.
    pub const fn new(num: usize, den: usize, constant: usize) -> Bound {
        assert!(den > 0);
        Bound {
            per_byte_num: num,
            per_byte_den: den,
            constant,
        }
    }

    /// At most `constant` bytes whatever the input.
    pub const fn constant(constant: usize) -> Bound {
        Bound::new(0, 1, constant)
    }

    /// The limit for an input of `len` bytes.
    pub fn limit(&self, len: usize) -> usize {
        len * self.per_byte_num / self.per_byte_den + self.constant
    }

    /// `Ok` if `usage` of an input of `len` bytes is within the bound.
    ///
    /// # Errors
    /// A message with the usage and the limit.
    pub fn check(&self, len: usize, usage: Usage) -> Result<(), String> {
        let limit = self.limit(len);
        if usage.peak_bytes <= limit {
            Ok(())
        } else {
            Err(format!(
                "allocated {} bytes at peak ({} allocations) for {len} input bytes: more than \
                 the bound {} × {len} / {} + {} = {limit}",
                usage.peak_bytes,
                usage.allocations,
                self.per_byte_num,
                self.per_byte_den,
                self.constant
            ))
        }
    }
}

/// One case of [`run`]: its generator, and the input it is about to decode (printed if it
/// fails).
#[derive(Debug)]
pub struct Case {
    /// The case's randomness: a function of (seed, decoder, case index) only.
    pub rng: Rng,
    input: Vec<u8>,
}

impl Case {
    /// Notes `input` as the bytes under test, for the failure report.
    pub fn record(&mut self, input: &[u8]) {
        self.input.clear();
        self.input.extend_from_slice(input);
    }

    /// A garbage buffer made from `valid`: random bytes (two in five) or `valid` mutated
    /// (`other` gives more valid encodings to splice with). Recorded for the failure report.
    pub fn garbage(&mut self, valid: &[u8], other: &mut dyn FnMut(&mut Rng) -> Vec<u8>) -> Vec<u8> {
        let b = if self.rng.percent(40) {
            random_buffer(&mut self.rng)
        } else {
            mutate(&mut self.rng, valid, other)
        };
        self.record(&b);
        b
    }
}

/// The cases to run, from the environment.
#[derive(Clone, Copy, Debug)]
struct Plan {
    cases: u64,
    seed: u64,
    only: Option<u64>,
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim().replace('_', "");
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v}: not a number")))
}

impl Plan {
    fn from_env() -> Plan {
        Plan {
            cases: env_u64(CASES_ENV).unwrap_or(CASES_DEFAULT),
            seed: env_u64(SEED_ENV).unwrap_or(SEED_DEFAULT),
            only: env_u64(CASE_ENV),
        }
    }
}

/// The seed of case `index` of decoder `name` in a run seeded `seed`.
fn case_seed(seed: u64, name: &str, index: u64) -> u64 {
    // FNV-1a of the name: decoders run different cases from one run seed.
    let name_hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut r = Rng::new(seed ^ name_hash.rotate_left(17));
    r.0 ^= index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    r.u64()
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic".to_string()
    }
}

fn hex_prefix(b: &[u8]) -> String {
    const SHOWN: usize = 256;
    let mut s: String = b.iter().take(SHOWN).map(|x| format!("{x:02x}")).collect();
    if b.len() > SHOWN {
        s.push('…');
    }
    s
}

/// Runs the cases of decoder `name` (how many, and which: the module docs). `case` returns
/// `Err` for a broken property; a panic inside it is caught and reported the same way. The
/// first failing case fails the test with its index, seed, input and a replay line.
///
/// # Panics
/// If a case fails, or the binary did not install [`crate::CountingAlloc`] (the allocation
/// bounds would hold vacuously).
pub fn run(name: &str, mut case: impl FnMut(&mut Case) -> Result<(), String>) {
    assert!(
        crate::installed(),
        "{name}: this test binary has no `#[global_allocator] static ALLOC: \
         onepipe_testalloc::CountingAlloc`"
    );
    let plan = Plan::from_env();
    let range = match plan.only {
        Some(i) => i..i + 1,
        None => 0..plan.cases,
    };
    let mut c = Case {
        rng: Rng::new(0),
        input: Vec::new(),
    };
    for index in range {
        c.rng = Rng::new(case_seed(plan.seed, name, index));
        c.input.clear();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| case(&mut c)));
        let message = match outcome {
            Ok(Ok(())) => continue,
            Ok(Err(m)) => m,
            Err(p) => format!("panicked: {}", panic_text(p.as_ref())),
        };
        panic!(
            "{name}: case {index} of {} failed: {message}\n  input ({} bytes): {}\n  replay: \
             {SEED_ENV}={:#x} {CASE_ENV}={index} cargo test -p <its crate> -- --exact {}",
            plan.cases,
            c.input.len(),
            hex_prefix(&c.input),
            plan.seed,
            // libtest names each test's thread after the test.
            std::thread::current().name().unwrap_or("<the test>"),
        );
    }
}

/// Runs decoder `name` ([`run`]) over valid encodings and garbage made from them.
///
/// Each case draws a valid value and its encoding from `valid`, decodes the encoding and then a
/// garbage buffer ([`Case::garbage`]), each under [`measure`] against `bound`, and asks `check`
/// whether the result is right: with the value (`Some`) for the valid encoding — it must
/// round-trip — and with `None` for garbage, where a success must at least be consistent (the
/// caller's to say: re-encoding, bytes used).
pub fn decoder<V: Debug, R: Debug>(
    name: &str,
    bound: Bound,
    valid: impl FnMut(&mut Rng) -> (V, Vec<u8>),
    mut decode: impl FnMut(&[u8]) -> R,
    mut check: impl FnMut(&[u8], &R, Option<&V>) -> Result<(), String>,
) {
    decoder_with(
        name,
        bound,
        valid,
        |_| (),
        |input, ()| decode(input),
        |input, (), got, value| check(input, got, value),
    );
}

/// [`decoder`] for a decoder whose input is not a plain slice: `prepare` makes it from the bytes
/// outside the measured decode (a `Bytes` the receive path owns already, a reader), `decode`
/// decodes it, and `check` sees both.
pub fn decoder_with<V: Debug, I, R: Debug>(
    name: &str,
    bound: Bound,
    mut valid: impl FnMut(&mut Rng) -> (V, Vec<u8>),
    mut prepare: impl FnMut(&[u8]) -> I,
    mut decode: impl FnMut(&[u8], &I) -> R,
    mut check: impl FnMut(&[u8], &I, &R, Option<&V>) -> Result<(), String>,
) {
    let mut closest = Closest::default();
    run(name, |case| {
        let (value, bytes) = valid(&mut case.rng);
        case.record(&bytes);
        let prepared = prepare(&bytes);
        let (got, usage) = measure(|| decode(&bytes, &prepared));
        closest.note(bound, bytes.len(), usage);
        bound
            .check(bytes.len(), usage)
            .map_err(|e| format!("the valid encoding of {value:?}: {e}"))?;
        check(&bytes, &prepared, &got, Some(&value))
            .map_err(|e| format!("the valid encoding of {value:?} decoded as {got:?}: {e}"))?;
        drop((got, prepared));
        let garbage = case.garbage(&bytes, &mut |rng| valid(rng).1);
        let prepared = prepare(&garbage);
        let (got, usage) = measure(|| decode(&garbage, &prepared));
        closest.note(bound, garbage.len(), usage);
        bound.check(garbage.len(), usage)?;
        check(&garbage, &prepared, &got, None).map_err(|e| format!("decoded as {got:?}: {e}"))
    });
    closest.report(name, bound);
}

/// The decode that came closest to its bound, for the summary a passing run prints (seen with
/// `--nocapture`): how much room the bound leaves.
#[derive(Debug, Default)]
pub struct Closest {
    decodes: u64,
    /// (peak bytes, input bytes) of the closest one.
    worst: Option<(usize, usize)>,
    /// The most bytes any decode allocated.
    peak_max: usize,
}

impl Closest {
    /// Takes one decode of `len` input bytes into account.
    pub fn note(&mut self, bound: Bound, len: usize, usage: Usage) {
        self.decodes += 1;
        self.peak_max = self.peak_max.max(usage.peak_bytes);
        let share = |(peak, len): (usize, usize)| peak as f64 / bound.limit(len).max(1) as f64;
        if self
            .worst
            .is_none_or(|w| share((usage.peak_bytes, len)) > share(w))
        {
            self.worst = Some((usage.peak_bytes, len));
        }
    }

    /// Prints the summary line.
    pub fn report(&self, name: &str, bound: Bound) {
        let Some((peak, len)) = self.worst else {
            return;
        };
        eprintln!(
            "{name}: {} decodes passed; closest to the bound: {peak} of {} bytes for a \
             {len}-byte input; most allocated by one decode: {} bytes",
            self.decodes,
            bound.limit(len),
            self.peak_max
        );
    }
}

/// `Ok` if `cond`, else `Err(what)`: a property in a case.
///
/// # Errors
/// `what`, when `cond` is false.
pub fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_replays_from_its_seed_alone() {
        let a = case_seed(7, "x", 3);
        assert_eq!(a, case_seed(7, "x", 3));
        assert_ne!(a, case_seed(7, "x", 4));
        assert_ne!(a, case_seed(7, "y", 3));
        assert_ne!(a, case_seed(8, "x", 3));
    }

    #[test]
    fn lengths_are_mostly_short_and_reach_the_maximum() {
        let mut r = Rng::new(1);
        let lens: Vec<usize> = (0..100_000).map(|_| r.len(RANDOM_LEN_MAX)).collect();
        assert!(lens.iter().all(|&n| n <= RANDOM_LEN_MAX));
        let short = lens.iter().filter(|&&n| n < 64).count();
        assert!(short > 40_000, "{short} short");
        assert!(lens.iter().any(|&n| n > 3_000));
        assert!(lens.contains(&0));
    }

    #[test]
    fn mutations_change_the_input_and_sometimes_its_length() {
        let mut r = Rng::new(2);
        let valid: Vec<u8> = (0..40).collect();
        let (mut changed, mut resized) = (0, 0);
        for _ in 0..1_000 {
            let m = mutate(&mut r, &valid, &mut |r| r.bytes(10));
            changed += usize::from(m != valid);
            resized += usize::from(m.len() != valid.len());
        }
        assert!(changed > 900, "{changed}");
        assert!(resized > 300 && resized < 900, "{resized}");
    }

    /// A failing case, by `Err` or by panic, fails the test with what replays it. (The crate's
    /// own test binary installs the counting allocator: `lib.rs`.)
    #[test]
    fn a_failing_case_says_how_to_replay_it() {
        for panics in [false, true] {
            let failed = panic::catch_unwind(|| {
                run("broken", |case| {
                    let b = case.rng.bytes(3);
                    case.record(&b);
                    assert!(!panics, "the decoder panicked");
                    Err("a property broke".into())
                })
            });
            let message = panic_text(failed.expect_err("the run fails").as_ref());
            let why = if panics {
                "the decoder panicked"
            } else {
                "a property broke"
            };
            assert!(message.contains(why), "{message}");
            assert!(message.contains("input (3 bytes)"), "{message}");
            assert!(message.contains("ONEPIPE_FUZZ_SEED=0x"), "{message}");
            assert!(message.contains("ONEPIPE_FUZZ_CASE="), "{message}");
            assert!(
                message.contains("a_failing_case_says_how_to_replay_it"),
                "{message}"
            );
        }
    }

    #[test]
    fn bounds_scale_with_the_input() {
        let b = Bound::new(3, 2, 10);
        assert_eq!(b.limit(100), 160);
        let used = |peak_bytes| Usage {
            peak_bytes,
            allocations: 1,
        };
        assert!(b.check(100, used(160)).is_ok());
        assert!(b.check(100, used(161)).unwrap_err().contains("160"));
        assert!(Bound::NOTHING.check(5, used(1)).is_err());
    }
}
