//! The transactional store's workloads (§7.3.1): keys uniform or YCSB's Zipf (θ = 0.99), value
//! sizes from Facebook's ETC distribution (generalized Pareto, scale 214.476, shape 0.348238),
//! operations per transaction, the share of read-only transactions and of writes among the
//! operations of the others, and YCSB's core workloads A, B and C by name.

use super::{Key, Op, Value};
use onepipe_proto::rng::Rng;

/// How keys are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyDist {
    /// Every key alike.
    Uniform,
    /// YCSB's Zipfian generator (Gray et al.): rank `i` with probability ∝ 1 / i^θ.
    Zipf {
        /// The skew, YCSB's default 0.99.
        theta: f64,
    },
}

/// A transactional workload.
#[derive(Debug, Clone, PartialEq)]
pub struct KvWorkload {
    /// Keys `0..keys`.
    pub keys: u64,
    /// How keys are drawn.
    pub dist: KeyDist,
    /// Operations per transaction (the paper's default 2).
    pub ops_per_txn: u32,
    /// Share of transactions that only read (Fig. 14a: 0.5). `None`: a transaction is read-only
    /// only when every operation happened to be drawn a read.
    pub read_only_share: Option<f64>,
    /// Share of writes among the operations of a transaction that is not read-only.
    pub write_share: f64,
    /// Longest value (bytes): ETC's tail is clamped here.
    pub value_len_max: u32,
}

impl Default for KvWorkload {
    /// Fig. 14a: 2 operations, half the transactions read-only, reads and writes alike in the
    /// others, a million uniform keys, ETC values up to 4 KiB.
    fn default() -> Self {
        KvWorkload {
            keys: 1_000_000,
            dist: KeyDist::Uniform,
            ops_per_txn: 2,
            read_only_share: Some(0.5),
            write_share: 0.5,
            value_len_max: 4096,
        }
    }
}

/// ETC's value sizes (Atikoglu et al., SIGMETRICS 2012): generalized Pareto.
pub const ETC_SCALE: f64 = 214.476;
/// See [`ETC_SCALE`].
pub const ETC_SHAPE: f64 = 0.348238;

impl KvWorkload {
    /// YCSB's core workload `a` (50% updates), `b` (5%) or `c` (read only), Zipfian keys; a
    /// transaction is read-only when all its operations are reads.
    pub fn ycsb(name: &str) -> Result<KvWorkload, String> {
        let write_share = match name.to_ascii_lowercase().as_str() {
            "a" => 0.5,
            "b" => 0.05,
            "c" => 0.0,
            other => {
                return Err(format!(
                    "no YCSB core workload '{other}' here (a: 50% updates, b: 5%, c: read only)"
                ))
            }
        };
        Ok(KvWorkload {
            dist: KeyDist::Zipf { theta: 0.99 },
            read_only_share: None,
            write_share,
            ..KvWorkload::default()
        })
    }

    /// Checks the fields, naming the bad one.
    pub fn validate(&self) -> Result<(), String> {
        if self.keys == 0 {
            return Err("keys: at least 1".into());
        }
        if self.ops_per_txn == 0 || self.ops_per_txn as usize > super::codec::OPS_MAX {
            return Err(format!(
                "ops per transaction: 1 to {}, not {}",
                super::codec::OPS_MAX,
                self.ops_per_txn
            ));
        }
        let share = |name: &str, x: f64| {
            if (0.0..=1.0).contains(&x) {
                Ok(())
            } else {
                Err(format!("{name}: a share from 0 to 1, not {x}"))
            }
        };
        share("write share", self.write_share)?;
        if let Some(r) = self.read_only_share {
            share("read-only share", r)?;
            if r < 1.0 && self.write_share == 0.0 {
                return Err("write share 0 leaves no transaction that writes: set the read-only share to 1 (or leave it unset)".into());
            }
        }
        if let KeyDist::Zipf { theta } = self.dist {
            if !(theta > 0.0 && theta < 1.0) {
                return Err(format!("Zipf θ: strictly between 0 and 1, not {theta}"));
            }
        }
        if self.value_len_max == 0 || self.value_len_max > super::codec::VALUE_LEN_MAX {
            return Err(format!(
                "longest value: 1 to {} bytes, not {}",
                super::codec::VALUE_LEN_MAX,
                self.value_len_max
            ));
        }
        Ok(())
    }

    /// The Zipf table of this workload, if its keys are Zipfian (computed once: it sums over
    /// every key; share it between the generators of a run).
    pub fn zipf(&self) -> Option<Zipf> {
        match self.dist {
            KeyDist::Uniform => None,
            KeyDist::Zipf { theta } => Some(Zipf::new(self.keys, theta)),
        }
    }
}

/// YCSB's Zipfian generator over ranks `0..n` (Gray et al., "Quickly generating billion-record
/// synthetic databases", SIGMOD 1994), as `ZipfianGenerator` computes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Zipf {
    n: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

impl Zipf {
    /// The generator over `n >= 1` ranks with skew `0 < theta < 1`.
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(
            n >= 1 && theta > 0.0 && theta < 1.0,
            "Zipf over {n} with θ {theta}"
        );
        let zetan: f64 = (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum();
        let zeta2 = 1.0 + 0.5f64.powf(theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n,
            theta,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta,
        }
    }

    /// A rank: 0 is the hottest.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// Draws transactions from a workload, deterministically from its seed.
#[derive(Debug, Clone)]
pub struct TxnGen {
    w: KvWorkload,
    zipf: Option<Zipf>,
    rng: Rng,
}

impl TxnGen {
    /// A generator for `w` (valid), with the run's shared Zipf table (`w.zipf()`).
    pub fn new(w: KvWorkload, zipf: Option<Zipf>, seed: u64) -> TxnGen {
        debug_assert!(w.validate().is_ok());
        assert_eq!(zipf.is_some(), matches!(w.dist, KeyDist::Zipf { .. }));
        TxnGen {
            w,
            zipf,
            rng: Rng::new(seed),
        }
    }

    /// The workload.
    pub fn workload(&self) -> &KvWorkload {
        &self.w
    }

    fn key(&mut self) -> Key {
        match &self.zipf {
            None => self.rng.below(self.w.keys),
            Some(z) => z.sample(&mut self.rng),
        }
    }

    /// An ETC value size, at least 1 byte, at most `value_len_max`.
    pub fn value_len(&mut self) -> u32 {
        let u = self.rng.unit_f64();
        let x = ETC_SCALE / ETC_SHAPE * ((1.0 - u).powf(-ETC_SHAPE) - 1.0);
        (x.ceil().max(1.0) as u64).min(u64::from(self.w.value_len_max)) as u32
    }

    /// The operations of the next transaction; its writes write values named `writer`. Keys
    /// are distinct within a transaction.
    pub fn next(&mut self, writer: u64) -> Vec<Op> {
        let n = self
            .w
            .ops_per_txn
            .min(self.w.keys.min(u32::MAX as u64) as u32) as usize;
        let read_only = match self.w.read_only_share {
            Some(r) => self.rng.chance(r),
            None => false,
        };
        let mut keys: Vec<Key> = Vec::with_capacity(n);
        while keys.len() < n {
            let k = self.key();
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        let mut writes: Vec<bool> = (0..n)
            .map(|_| !read_only && self.rng.chance(self.w.write_share))
            .collect();
        // A transaction drawn not read-only writes something.
        if self.w.read_only_share.is_some() && !read_only && !writes.contains(&true) {
            let i = self.rng.below(n as u64) as usize;
            writes[i] = true;
        }
        keys.into_iter()
            .zip(writes)
            .map(|(k, w)| {
                if w {
                    let len = self.value_len();
                    Op::Put(k, Value { writer, len })
                } else {
                    Op::Get(k)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_skewed_toward_low_ranks_and_stays_in_range() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = Rng::new(1);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.sample(&mut rng) as usize] += 1;
        }
        // θ = 0.99 over 1,000 ranks: rank 0 has ~13% of the draws, rank 99 about a hundredth of it.
        assert!(counts[0] > 10_000, "{}", counts[0]);
        assert!(
            counts[0] > 50 * counts[99].max(1),
            "{} vs {}",
            counts[0],
            counts[99]
        );
        let top10: u32 = counts[..10].iter().sum();
        assert!(top10 > 30_000, "{top10}");
    }

    #[test]
    fn etc_value_sizes_have_the_distributions_mean_and_a_clamped_tail() {
        let w = KvWorkload {
            value_len_max: 1 << 20,
            ..KvWorkload::default()
        };
        let mut g = TxnGen::new(w, None, 3);
        let n = 200_000;
        let sizes: Vec<u32> = (0..n).map(|_| g.value_len()).collect();
        let mean = sizes.iter().map(|&s| s as f64).sum::<f64>() / n as f64;
        // Generalized Pareto mean: σ / (1 − ξ) = 329 bytes (+0.5 from rounding up).
        assert!((300.0..360.0).contains(&mean), "{mean}");
        assert!(sizes.iter().all(|&s| s >= 1));
        let mut g = TxnGen::new(KvWorkload::default(), None, 3);
        assert!((0..10_000).all(|_| g.value_len() <= 4096));
    }

    #[test]
    fn shares_of_read_only_transactions_and_writes_follow_the_workload() {
        let mut g = TxnGen::new(KvWorkload::default(), None, 5);
        let txns: Vec<Vec<Op>> = (0..20_000).map(|i| g.next(i)).collect();
        let ro = txns
            .iter()
            .filter(|t| t.iter().all(|o| matches!(o, Op::Get(_))))
            .count();
        assert!((9_500..10_500).contains(&ro), "{ro}");
        assert!(txns
            .iter()
            .all(|t| t.len() == 2 && t[0].key() != t[1].key()));
        let mut c = TxnGen::new(
            KvWorkload::ycsb("c").unwrap(),
            KvWorkload::ycsb("c").unwrap().zipf(),
            1,
        );
        assert!((0..1000).all(|i| c.next(i).iter().all(|o| matches!(o, Op::Get(_)))));
    }

    #[test]
    fn bad_workloads_are_refused_by_name() {
        let bad = KvWorkload {
            write_share: 1.5,
            ..KvWorkload::default()
        };
        assert!(bad.validate().unwrap_err().contains("write share"));
        assert!(KvWorkload::ycsb("z").unwrap_err().contains("'z'"));
        let zero = KvWorkload {
            ops_per_txn: 0,
            ..KvWorkload::default()
        };
        assert!(zero.validate().unwrap_err().contains("ops per transaction"));
    }
}
