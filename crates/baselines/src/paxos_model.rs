//! The analytic model of MultiPaxos with batching and pipelining (Santos & Schiper, "Tuning
//! Paxos for high-throughput with batching and pipelining", §III; `paxos-batching-pipelining.txt`
//! in the shared papers): with point-to-point links, the leader's outgoing link is the network
//! bottleneck (§III-A); from its bandwidth, the one-way latency, the replica count and the
//! message sizes the model gives the maximum request throughput (Eq. 1), the duration of one
//! instance of Phase 2 (Eqs. 2–3), the number of parallel instances that keeps the link full for
//! a batch size (Eq. 4, `w = f(S_batch)`), its inverse (Eq. 5, `S_batch = g(w)`), and the idle
//! time of an instance (§III-E, Tables II and III). Pure functions of [`PaxosNet`]: `onepipe model
//! paxos` prints them, and the MultiPaxos runs to come are drawn beside them.

/// A network and workload, in bytes and seconds (Table I).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PaxosNet {
    /// `B`: bandwidth of each link, bytes per second.
    pub bandwidth: f64,
    /// `L`: one-way delay, seconds.
    pub latency: f64,
    /// `n`: replicas (odd: an even count adds no resilience, §III-D).
    pub replicas: u32,
    /// `S_req`: a request's size, bytes.
    pub request: f64,
    /// `S_ack`: a Phase 2b message's size, bytes.
    pub ack: f64,
    /// `S_ans`: the answer sent to a client, bytes.
    pub answer: f64,
}

impl PaxosNet {
    /// The paper's Emulab setting (Table II): 3 replicas, 150 ms one way, 9.59 Mbit/s, 1 KB
    /// requests and answers, acks of no size.
    pub fn emulab() -> PaxosNet {
        PaxosNet {
            bandwidth: 9.59e6 / 8.0,
            latency: 0.150,
            replicas: 3,
            request: 1024.0,
            ack: 0.0,
            answer: 1024.0,
        }
    }

    /// The paper's cluster setting (Table III): 3 replicas, 0.2 ms one way, 940 Mbit/s, 1 KB
    /// requests and answers, acks of no size.
    pub fn cluster() -> PaxosNet {
        PaxosNet {
            bandwidth: 940e6 / 8.0,
            latency: 0.0002,
            ..PaxosNet::emulab()
        }
    }

    /// Checks the settings; the error names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        let sized = |x: f64| x.is_finite() && x >= 0.0;
        if !positive(self.bandwidth) {
            return Err("bandwidth: must be positive".into());
        }
        if !sized(self.latency) {
            return Err("latency: must be zero or more".into());
        }
        if self.replicas < 3 || self.replicas.is_multiple_of(2) {
            return Err(format!(
                "replicas: {} — an odd number, at least 3 (an even one adds no resilience)",
                self.replicas
            ));
        }
        if !positive(self.request) || !sized(self.ack) || !sized(self.answer) {
            return Err(
                "sizes: a request must have some bytes; acks and answers zero or more".into(),
            );
        }
        Ok(())
    }

    /// Eq. 1: the most requests per second, the leader's outgoing link full (each request goes
    /// to `n − 1` replicas, its answer to the client).
    pub fn max_throughput(&self) -> f64 {
        self.bandwidth / (f64::from(self.replicas - 1) * self.request + self.answer)
    }

    /// `⌊n/2⌋`: the replicas besides the leader that make a majority.
    fn majority_others(&self) -> f64 {
        f64::from(self.replicas / 2)
    }

    /// Eq. 2: sending a batch of `batch` bytes to a majority.
    pub fn tau_maj(&self, batch: f64) -> f64 {
        self.majority_others() * batch / self.bandwidth
    }

    /// Eq. 3: one instance of Phase 2, from the first Phase 2a sent to a majority of Phase 2b in.
    pub fn tau_dec(&self, batch: f64) -> f64 {
        self.tau_maj(batch) + 2.0 * self.latency + self.ack / self.bandwidth
    }

    /// §III-E: sending the Phase 2a message to all `n − 1` others.
    pub fn tau_all(&self, batch: f64) -> f64 {
        f64::from(self.replicas - 1) * batch / self.bandwidth
    }

    /// §III-E: the leader's outgoing link idle during an instance (negative: it decides before
    /// it has sent to all).
    pub fn tau_idle(&self, batch: f64) -> f64 {
        self.tau_dec(batch) - self.tau_all(batch)
    }

    /// Eq. 4 before rounding up: the parallel instances that keep the link full.
    pub fn w_exact(&self, batch: f64) -> f64 {
        (2.0 * self.latency * self.bandwidth + self.ack) / (f64::from(self.replicas - 1) * batch)
            + self.majority_others() / f64::from(self.replicas - 1)
    }

    /// Eq. 4: `w = f(S_batch)`, the window that keeps the leader's link full with batches of
    /// `batch` bytes (at least 1).
    pub fn w(&self, batch: f64) -> u32 {
        // A hair below an integer is that integer: g(w) must give back w despite rounding.
        ((self.w_exact(batch) - 1e-9).ceil() as u32).max(1)
    }

    /// Eq. 5: `S_batch = g(w)`, the batch size that fills the link with `w` instances in
    /// parallel; `g(1)` is the batch with which one instance at a time suffices.
    pub fn batch_for(&self, w: u32) -> f64 {
        (2.0 * self.latency * self.bandwidth + self.ack)
            / (f64::from(self.replicas - 1) * (f64::from(w.max(1)) - 0.5))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-12)
    }

    /// Table II (Emulab): τ_dec 300.8 / 350.5 / 401.8 / 600 ms for 1, 64, 128 and 362 KB batches;
    /// τ_all 1.7 / 100.9 / 203.5 / 600 ms; w = 2 at 128 KB and 1 at the optimum (~360 KB); the
    /// optimum makes τ_idle 0.
    #[test]
    fn the_emulab_table_is_reproduced() {
        let m = PaxosNet::emulab();
        let kb = 1024.0;
        for (batch, dec, all) in [
            (kb, 0.3008, 0.0017),
            (64.0 * kb, 0.3505, 0.1009),
            (128.0 * kb, 0.4018, 0.2035),
        ] {
            assert!(
                close(m.tau_dec(batch), dec, 0.02),
                "{batch}: {}",
                m.tau_dec(batch)
            );
            // The paper's τ_all column mixes KB and kB and rounds B: within 10%.
            assert!(
                close(m.tau_all(batch), all, 0.10),
                "{batch}: {}",
                m.tau_all(batch)
            );
        }
        assert_eq!(m.w(128.0 * kb), 2);
        assert_eq!(m.w(64.0 * kb), 4);
        let best = m.batch_for(1);
        assert!(close(best, 362.0 * kb, 0.05), "{best}");
        assert_eq!(m.w(best), 1);
        assert!(m.tau_idle(best).abs() < 1e-9);
        assert!(close(m.tau_dec(best), 0.600, 0.02));
        // Eq. 1: ~405 requests per second (§IV-D3: "compared to 405").
        assert!(
            close(m.max_throughput(), 405.0, 0.05),
            "{}",
            m.max_throughput()
        );
    }

    /// Table III (cluster): the optimum for one instance is 47 KB, where τ_idle is 0; larger
    /// batches make it negative; at 1 KB τ_dec is ~0.41 ms.
    #[test]
    fn the_cluster_table_is_reproduced() {
        let m = PaxosNet::cluster();
        let best = m.batch_for(1);
        assert!(close(best, 47_000.0, 0.03), "{best}");
        assert!(m.tau_idle(best).abs() < 1e-12);
        assert!(m.tau_idle(64.0 * 1024.0) < 0.0);
        assert!(
            close(m.tau_dec(1024.0), 0.00041, 0.03),
            "{}",
            m.tau_dec(1024.0)
        );
        assert_eq!(m.w(64.0 * 1024.0), 1);
    }

    /// f and g are inverse: the batch g(w) needs exactly w instances, a byte less needs more.
    #[test]
    fn w_and_batch_are_inverse() {
        for m in [PaxosNet::emulab(), PaxosNet::cluster()] {
            for w in 1..50 {
                let b = m.batch_for(w);
                assert_eq!(m.w(b), w, "{m:?} w {w}");
                assert!(m.w(b * 0.99) >= w, "{m:?} w {w}");
            }
        }
    }

    #[test]
    fn bad_settings_are_refused_by_name() {
        let bad = |f: fn(&mut PaxosNet)| {
            let mut m = PaxosNet::cluster();
            f(&mut m);
            m.validate().unwrap_err()
        };
        assert!(bad(|m| m.replicas = 4).contains("replicas"));
        assert!(bad(|m| m.bandwidth = 0.0).contains("bandwidth"));
        assert!(bad(|m| m.latency = f64::NAN).contains("latency"));
        assert!(bad(|m| m.request = 0.0).contains("sizes"));
        assert!(PaxosNet::emulab().validate().is_ok());
    }
}
