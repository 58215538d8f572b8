//! Checking a cluster: [`Cluster::validate`] (and the checks [`Cluster::parse`] runs, which
//! name the line of the field at fault).

use super::*;

/// Where a field of the cluster lives, for error messages.
#[derive(Clone, Copy, Debug)]
pub(super) enum Loc {
    Top(&'static str),
    Aggregator(usize, &'static str),
    Process(usize, &'static str),
}

impl Loc {
    fn field(self) -> String {
        match self {
            Loc::Top(f) => f.to_string(),
            Loc::Aggregator(_, f) => format!("aggregator.{f}"),
            Loc::Process(_, f) => format!("process.{f}"),
        }
    }
}

impl Cluster {
    /// Checks that the cluster makes sense: at least one process and aggregator; process ids
    /// `0..n` each once; aggregator names unique; every parent and every process's aggregator
    /// named; the aggregators form one tree; every aggregator has something below it; beacon
    /// interval positive and the phase below it.
    ///
    /// # Errors
    /// The first problem found, naming the field (no line: use [`Cluster::parse`] for that).
    pub fn validate(&self) -> Result<(), ClusterError> {
        self.check(&|_| None)
    }

    /// [`Cluster::validate`], with `locate` giving the line of a field at fault.
    pub(super) fn check(&self, locate: &dyn Fn(Loc) -> Option<usize>) -> Result<(), ClusterError> {
        let err = |loc: Loc, message: String| ClusterError {
            line: locate(loc),
            field: loc.field(),
            message,
        };
        self.check_settings(&err)?;
        self.check_sizes(&err)?;
        let index = self.aggregator_names(&err)?;
        self.check_tree(&index, &err)?;
        self.check_processes(&index, &err)?;
        for (i, a) in self.aggregators.iter().enumerate() {
            if self.subtree_procs(&a.name).is_empty() {
                return Err(err(
                    Loc::Aggregator(i, "name"),
                    format!("aggregator '{}' has no process below it", a.name),
                ));
            }
        }
        Ok(())
    }

    /// The shared settings: `start_with`, the beacon intervals and phase, the loss timeout and
    /// the datagram length.
    fn check_settings(
        &self,
        err: &impl Fn(Loc, String) -> ClusterError,
    ) -> Result<(), ClusterError> {
        if let Some(n) = self.start_with {
            if n == 0 || n > self.procs() {
                return Err(err(
                    Loc::Top("start_with"),
                    format!("must be 1..={} (the processes of the file)", self.procs()),
                ));
            }
        }
        if self.beacon_interval_ns == 0 || self.beacon_interval_ns > 10_000_000_000 {
            return Err(err(
                Loc::Top("beacon_interval"),
                "must be between 1ns and 10s".into(),
            ));
        }
        if self.fast_beacon_interval_ns != 0
            && !(FAST_BEACON_INTERVAL_MIN_NS..self.beacon_interval_ns)
                .contains(&self.fast_beacon_interval_ns)
        {
            return Err(err(
                Loc::Top("fast_beacon_interval"),
                format!(
                    "must be 0s (off) or at least {FAST_BEACON_INTERVAL_MIN_NS} ns and below the beacon interval ({} ns)",
                    self.beacon_interval_ns
                ),
            ));
        }
        if self.aggregator_phase_ns >= self.beacon_interval_ns {
            return Err(err(
                Loc::Top("aggregator_phase"),
                format!(
                    "must be below the beacon interval ({} ns)",
                    self.beacon_interval_ns
                ),
            ));
        }
        if self.loss_timeout_ns == 0 {
            return Err(err(Loc::Top("loss_timeout"), "must be positive".into()));
        }
        if let Some(n) = self.datagram_len_max {
            if !(DATAGRAM_LEN_MIN..=UDP_PAYLOAD_MAX).contains(&n) {
                return Err(err(
                    Loc::Top("datagram_len_max"),
                    format!(
                        "{n} is not in {DATAGRAM_LEN_MIN}..={UDP_PAYLOAD_MAX} (the largest ACK batch must fit; a UDP datagram holds at most {UDP_PAYLOAD_MAX})"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// At least one aggregator and one process, and not too many of either.
    fn check_sizes(&self, err: &impl Fn(Loc, String) -> ClusterError) -> Result<(), ClusterError> {
        if self.aggregators.is_empty() {
            return Err(err(
                Loc::Top("aggregator"),
                "a cluster needs at least one [[aggregator]]".into(),
            ));
        }
        if self.aggregators.len() > AGGREGATORS_MAX {
            return Err(err(
                Loc::Top("aggregator"),
                format!("at most {AGGREGATORS_MAX} aggregators"),
            ));
        }
        if self.processes.is_empty() {
            return Err(err(
                Loc::Top("process"),
                "a cluster needs at least one [[process]]".into(),
            ));
        }
        if self.processes.len() > PROCS_MAX as usize {
            return Err(err(
                Loc::Top("process"),
                format!("at most {PROCS_MAX} processes"),
            ));
        }
        Ok(())
    }

    /// Every aggregator's index by name; names must be names, and unique.
    fn aggregator_names(
        &self,
        err: &impl Fn(Loc, String) -> ClusterError,
    ) -> Result<BTreeMap<&str, usize>, ClusterError> {
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, a) in self.aggregators.iter().enumerate() {
            if a.name.is_empty() || a.name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(err(
                    Loc::Aggregator(i, "name"),
                    format!("'{}' is not a name (non-empty, no spaces)", a.name),
                ));
            }
            if index.insert(&a.name, i).is_some() {
                return Err(err(
                    Loc::Aggregator(i, "name"),
                    format!("duplicate aggregator '{}'", a.name),
                ));
            }
        }
        Ok(index)
    }

    /// The aggregators form one tree: every parent known and not itself, one root, no cycle.
    fn check_tree(
        &self,
        index: &BTreeMap<&str, usize>,
        err: &impl Fn(Loc, String) -> ClusterError,
    ) -> Result<(), ClusterError> {
        let mut roots = Vec::new();
        for (i, a) in self.aggregators.iter().enumerate() {
            match &a.parent {
                None => roots.push(i),
                Some(p) if !index.contains_key(p.as_str()) => {
                    return Err(err(
                        Loc::Aggregator(i, "parent"),
                        format!("unknown aggregator '{p}'"),
                    ));
                }
                Some(p) if p == &a.name => {
                    return Err(err(
                        Loc::Aggregator(i, "parent"),
                        format!("'{p}' cannot be its own parent"),
                    ));
                }
                Some(_) => {}
            }
        }
        if roots.len() != 1 {
            let names: Vec<_> = roots.iter().map(|&i| &self.aggregators[i].name).collect();
            let at = roots.get(1).copied().unwrap_or(0);
            return Err(err(
                Loc::Aggregator(at, "parent"),
                format!(
                    "the aggregators must form one tree with one root (no parent); roots: {names:?}"
                ),
            ));
        }
        // Every chain of parents must reach the root within `len` steps, else there is a cycle.
        for (i, a) in self.aggregators.iter().enumerate() {
            let mut at = a;
            for step in 0..=self.aggregators.len() {
                let Some(p) = &at.parent else { break };
                if step == self.aggregators.len() {
                    return Err(err(
                        Loc::Aggregator(i, "parent"),
                        format!("'{}' is in a cycle of parents", a.name),
                    ));
                }
                at = &self.aggregators[index[p.as_str()]];
            }
        }
        Ok(())
    }

    /// Process ids `0..n` each once, each attached to a known aggregator.
    fn check_processes(
        &self,
        index: &BTreeMap<&str, usize>,
        err: &impl Fn(Loc, String) -> ClusterError,
    ) -> Result<(), ClusterError> {
        let n = self.processes.len();
        let mut seen = vec![false; n];
        for (i, p) in self.processes.iter().enumerate() {
            if p.id as usize >= n {
                return Err(err(
                    Loc::Process(i, "id"),
                    format!("id {} out of range: {n} processes have ids 0..{n}", p.id),
                ));
            }
            if std::mem::replace(&mut seen[p.id as usize], true) {
                return Err(err(Loc::Process(i, "id"), format!("duplicate id {}", p.id)));
            }
            if !index.contains_key(p.aggregator.as_str()) {
                return Err(err(
                    Loc::Process(i, "aggregator"),
                    format!("unknown aggregator '{}'", p.aggregator),
                ));
            }
        }
        Ok(())
    }
}
