//! The replicated remote hash table's processes (§7.3.3, `onepipe_apps::hashtable`), whichever
//! system carries their verbs: what clients completed, latency and throughput by kind, and the
//! end-of-run checks (`hashtable::check::check_run`: linearizability with the preload and final
//! lookups, chains well-formed, replicas identical, every acknowledged insert reachable).

use super::{AppReport, AppSet, LIN_BUDGET};
use crate::config::{AppSpec, SimConfig};
use crate::metrics::NsHistogram;
use onepipe_apps::hashtable::check::check_run;
use onepipe_apps::hashtable::{HtConfig, HtLayout, HtMode, HtProcess, HtStats, HtWorkload, Table};
use onepipe_apps::repl::lincheck::MaybeOp;
use onepipe_apps::repl::ReplDone;
use onepipe_proto::app::{AppNode, DynAppNode};
use onepipe_proto::rng::Rng;
use onepipe_proto::Node;
use onepipe_proto::{Instant, ProcId};
use std::collections::HashMap;

/// The hash table's processes of a run and what their clients completed.
pub(crate) struct HtSet {
    procs: Vec<AppNode<HtProcess>>,
    layout: HtLayout,
    workload: HtWorkload,
    done: Vec<ReplDone>,
    /// Lookups, inserts.
    latency: [NsHistogram; 2],
    in_period: [u64; 2],
    stop_ns: u64,
    duration_ns: u64,
}

/// The hash table's processes of a run of `cfg` (its `AppSpec::HashTable`) on `procs`
/// processes, their verbs carried as `mode` says.
pub(crate) fn ht_set(cfg: &SimConfig, procs: u32, mode: HtMode) -> Option<HtSet> {
    let Some(AppSpec::HashTable {
        workload,
        window,
        layout,
    }) = &cfg.workload.app
    else {
        return None;
    };
    let mut seeds = Rng::new(cfg.seed ^ 0x4A5B);
    let apps = (0..procs)
        .map(|p| {
            let mut c = HtConfig::new(ProcId(p), mode, *layout, workload.clone(), *window);
            c.start = Instant(cfg.net.clock_epoch_ns);
            c.stop = Instant(cfg.net.clock_epoch_ns + cfg.workload.duration_ns);
            AppNode::new(HtProcess::new(c, seeds.next_u64()))
        })
        .collect();
    Some(HtSet {
        procs: apps,
        layout: *layout,
        workload: workload.clone(),
        done: Vec::new(),
        latency: Default::default(),
        in_period: [0; 2],
        stop_ns: cfg.net.clock_epoch_ns + cfg.workload.duration_ns,
        duration_ns: cfg.workload.duration_ns,
    })
}

impl AppSet for HtSet {
    fn len(&self) -> usize {
        self.procs.len()
    }
    fn node(&mut self, p: usize) -> &mut DynAppNode {
        &mut self.procs[p]
    }
    fn poll_timeout(&self, p: usize) -> Option<Instant> {
        self.procs.get(p)?.poll_timeout()
    }
    fn collect(&mut self, p: usize, trace: &mut dyn FnMut(u64, u64)) {
        while let Some(d) = self.procs[p].get_mut().poll_done() {
            trace((u64::from(d.client) << 40) | d.id, d.return_ns);
            let k = usize::from(d.cmd.is_write());
            self.latency[k].record(d.return_ns.saturating_sub(d.call_ns));
            if d.return_ns <= self.stop_ns {
                self.in_period[k] += 1;
            }
            self.done.push(d);
        }
    }
    fn proc_idle(&self, p: usize) -> bool {
        self.procs[p].get_ref().idle()
    }
    fn report(
        &self,
        system: &str,
        check: bool,
        skew_ns: u64,
        _failed: &HashMap<u32, u64>,
    ) -> AppReport {
        let mut stats = HtStats::default();
        for p in self.procs.iter().map(AppNode::get_ref) {
            stats += p.stats();
        }
        let secs = self.duration_ns.max(1) as f64 / 1e9;
        let clients = f64::from(self.layout.clients.max(1));
        let [lookups, inserts] = self.in_period;
        let mut r = AppReport {
            app: "hashtable".into(),
            system: system.into(),
            committed: self.done.len() as u64,
            committed_ro: stats.lookups,
            committed_wo: stats.inserts,
            txns_per_s: (lookups + inserts) as f64 / secs,
            txns_per_s_per_proc: (lookups + inserts) as f64 / secs / clients,
            ops_per_s: (lookups + inserts) as f64 / secs,
            lookups_per_s_per_client: lookups as f64 / secs / clients,
            inserts_per_s_per_client: inserts as f64 / secs / clients,
            latency_ns_ro: self.latency[0].summary(),
            latency_ns_wo: self.latency[1].summary(),
            checked: check,
            ht_stats: stats,
            ..AppReport::default()
        };
        if !check {
            return r;
        }
        let maybe: Vec<MaybeOp> = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .flat_map(|p| p.open_inserts())
            .collect();
        let tables: Vec<(u32, u32, &Table)> = self
            .procs
            .iter()
            .map(AppNode::get_ref)
            .filter_map(HtProcess::table)
            .collect();
        let v = check_run(
            &self.layout,
            &self.workload,
            &self.done,
            &maybe,
            &tables,
            skew_ns,
            LIN_BUDGET,
        );
        r.checked_transactions = v.lin.ops;
        r.checked_reads = v.lin.keys;
        r.violations = v.violations();
        r.violation_samples = v.samples().into_iter().take(8).collect();
        r
    }
    fn history_json(&self) -> Option<String> {
        Some(onepipe_apps::repl::lincheck::history_json(&self.done, &[]))
    }
}
