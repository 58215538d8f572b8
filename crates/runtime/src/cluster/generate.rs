//! Writing cluster files: [`Cluster::generate`] lays out a local cluster, [`Cluster::to_toml`]
//! renders any cluster in the file format (which [`Cluster::parse`] reads back).

use super::*;
use onepipe_proto::aggregator::tree::layered;
use std::fmt::Write;

impl Cluster {
    /// A local cluster laid out as `layout` says: processes `0..hosts × procs_per_host`
    /// numbered host by host, aggregators `tor-0`, `tor-1`, … (and `spine-0` with two
    /// layers; `agg-0`, `agg-1`, … and `core-0` with three) as the one rule for a layered tree
    /// places them (`onepipe_proto::aggregator::tree::layered`, which the simulator's tree
    /// fabric follows too), every address on 127.0.0.1 with port 0 (any free port).
    ///
    /// ```
    /// use onepipe_runtime::cluster::{Cluster, LocalLayout};
    /// let c = Cluster::generate(&LocalLayout { hosts: 4, ..LocalLayout::default() }).unwrap();
    /// let names: Vec<_> = c.aggregators.iter().map(|a| a.name.as_str()).collect();
    /// assert_eq!(names, ["tor-0", "tor-1", "spine-0"]);
    /// assert_eq!(c.processes[3].aggregator, "tor-1");
    /// assert_eq!(Cluster::parse(&c.to_toml()).unwrap(), c);
    /// ```
    ///
    /// # Errors
    /// No hosts or processes, a zero rack or pod size, layers other than 1, 2 or 3, or too
    /// many processes.
    pub fn generate(layout: &LocalLayout) -> Result<Cluster, ClusterError> {
        let procs = check_layout(layout)?;
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let tree = layered(
            layout.hosts,
            layout.layers,
            layout.rack_size,
            layout.pod_racks,
        );
        let aggregators = local_aggregators(&tree, any);
        let mut tor_of = vec![""; layout.hosts as usize];
        for (name, spec) in &tree {
            for &h in &spec.hosts {
                tor_of[h as usize] = name;
            }
        }
        let processes = (0..procs as u32)
            .map(|id| {
                let host = id / layout.procs_per_host;
                ProcessSpec {
                    id,
                    host,
                    addr: any,
                    aggregator: tor_of[host as usize].to_string(),
                }
            })
            .collect();
        let roles = LiveRoles::default();
        let cluster = Cluster {
            controller: layout.controller,
            beacon_interval_ns: roles.beacon_interval_ns,
            fast_beacon_interval_ns: roles.fast_beacon_interval_ns,
            aggregator_mode: roles.aggregator_mode,
            aggregator_phase_ns: roles.aggregator_phase_ns,
            clock: ClockSource::Monotonic,
            ordered: true,
            loss_timeout_ns: roles.rto_ns,
            link_timeout_ns: roles.link_timeout_ns,
            callback_timeout_ns: roles.callback_timeout_ns,
            forward_after: 0,
            start_with: layout.start_with,
            datagram_len_max: None,
            gso: true,
            gro: true,
            auth: None,
            aggregators,
            processes,
        };
        cluster.validate()?;
        Ok(cluster)
    }

    /// The cluster as a TOML cluster file (the format of the module docs).
    pub fn to_toml(&self) -> String {
        let mut s = String::new();
        self.write_settings(&mut s);
        self.write_auth(&mut s);
        self.write_members(&mut s);
        s
    }

    /// The header comment and the shared settings, one line each.
    fn write_settings(&self, s: &mut String) {
        let hosts: BTreeSet<u32> = self.processes.iter().map(|p| p.host).collect();
        let _ = writeln!(
            s,
            "# onepipe cluster: {} processes on {} hosts, {} aggregators.",
            self.processes.len(),
            hosts.len(),
            self.aggregators.len()
        );
        let _ = writeln!(
            s,
            "# Addresses with port 0 take any free port and are announced to the controller."
        );
        let _ = writeln!(s, "controller = \"{}\"", self.controller);
        let _ = writeln!(
            s,
            "beacon_interval = \"{}\"",
            format_duration(self.beacon_interval_ns)
        );
        let _ = writeln!(
            s,
            "fast_beacon_interval = \"{}\"",
            format_duration(self.fast_beacon_interval_ns)
        );
        let _ = writeln!(s, "aggregator_mode = \"{}\"", self.aggregator_mode);
        let _ = writeln!(
            s,
            "aggregator_phase = \"{}\"",
            format_duration(self.aggregator_phase_ns)
        );
        let clock = match self.clock {
            ClockSource::Monotonic => "monotonic",
            ClockSource::Realtime => "realtime",
        };
        let _ = writeln!(s, "clock = \"{clock}\"");
        let _ = writeln!(s, "ordered = {}", self.ordered);
        let _ = writeln!(
            s,
            "loss_timeout = \"{}\"",
            format_duration(self.loss_timeout_ns)
        );
        let _ = writeln!(
            s,
            "link_timeout = \"{}\"",
            format_duration(self.link_timeout_ns)
        );
        let _ = writeln!(
            s,
            "callback_timeout = \"{}\"",
            format_duration(self.callback_timeout_ns)
        );
        if let Some(n) = self.start_with {
            let _ = writeln!(s, "start_with = {n}");
        }
        let _ = writeln!(s, "forward_after = {}", self.forward_after);
        match self.datagram_len_max {
            None => {
                let _ = writeln!(s, "datagram_len_max = \"auto\"");
            }
            Some(n) => {
                let _ = writeln!(s, "datagram_len_max = {n}");
            }
        }
        let _ = writeln!(s, "gso = {}\ngro = {}", self.gso, self.gro);
    }

    /// The `auth` entry: `auth = "off"`, an `[auth]` table, or nothing.
    fn write_auth(&self, s: &mut String) {
        match &self.auth {
            None => {}
            Some(a) if a.mode == AuthMode::Off => {
                let _ = writeln!(s, "auth = \"off\"");
            }
            Some(a) => {
                let _ = writeln!(s, "\n[auth]\nmode = \"{}\"", a.mode);
                if let Some(p) = &a.pki {
                    let _ = writeln!(s, "pki = {:?}", p.display().to_string());
                }
                let _ = writeln!(
                    s,
                    "rotate_every = \"{}\"\ngrace = \"{}\"",
                    format_duration(a.rotate_every_ns),
                    format_duration(a.grace_ns)
                );
            }
        }
    }

    /// The `[[aggregator]]` and `[[process]]` tables.
    fn write_members(&self, s: &mut String) {
        for a in &self.aggregators {
            let _ = writeln!(
                s,
                "\n[[aggregator]]\nname = \"{}\"\naddr = \"{}\"",
                a.name, a.addr
            );
            if let Some(p) = &a.parent {
                let _ = writeln!(s, "parent = \"{p}\"");
            }
        }
        for p in &self.processes {
            let _ = writeln!(
                s,
                "\n[[process]]\nid = {}\nhost = {}\naddr = \"{}\"\naggregator = \"{}\"",
                p.id, p.host, p.addr, p.aggregator
            );
        }
    }
}

/// Checks `layout`: everything at least 1, 1 to 3 layers, not too many processes. Returns the
/// number of processes.
fn check_layout(layout: &LocalLayout) -> Result<u64, ClusterError> {
    let bad = |field: &str, message: &str| ClusterError {
        line: None,
        field: field.to_string(),
        message: message.to_string(),
    };
    if layout.hosts == 0 {
        return Err(bad("hosts", "must be at least 1"));
    }
    if layout.procs_per_host == 0 {
        return Err(bad("procs-per-host", "must be at least 1"));
    }
    if layout.rack_size == 0 {
        return Err(bad("rack-size", "must be at least 1"));
    }
    if layout.pod_racks == 0 {
        return Err(bad("pod-racks", "must be at least 1"));
    }
    if !(1..=3).contains(&layout.layers) {
        return Err(bad("layers", "must be 1, 2 or 3"));
    }
    let procs = u64::from(layout.hosts) * u64::from(layout.procs_per_host);
    if procs > u64::from(PROCS_MAX) {
        return Err(bad("hosts", &format!("at most {PROCS_MAX} processes")));
    }
    Ok(procs)
}

/// The aggregators of the layered `tree` ([`layered`]: the racks' `tor-N`, then `spine-0`, or
/// the pods' `agg-N` and `core-0`), every one at `any`.
fn local_aggregators(tree: &[(String, TreeSwitch)], any: SocketAddr) -> Vec<AggregatorSpec> {
    tree.iter()
        .map(|(name, spec)| AggregatorSpec {
            name: name.clone(),
            addr: any,
            parent: spec.parent.map(|p| tree[p].0.clone()),
        })
        .collect()
}
