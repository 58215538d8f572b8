//! The command lines `onepipe up` starts its children with: the controllers' (with `--etcd`,
//! their election's flags), the aggregators', and the endpoints' (the workload's flags, the key
//! directory's, and the application's).

use super::{paxos_live, strings, Run};
use crate::sim_app::AppArgs;

impl Run<'_> {
    /// The command line of controller `c`'s `onepipe controller` (with `--etcd`, its election's
    /// flags).
    pub(super) fn controller_argv(&self, c: usize, config: &str) -> Vec<String> {
        let mut argv = strings(&["controller", "--config", config, "--supervised", "--quiet"]);
        if let Some((url, key)) = &self.etcd {
            let name = format!("controller-{c}");
            argv.extend(strings(&[
                "--etcd",
                url,
                "--cluster-key",
                key,
                "--name",
                &name,
            ]));
            if self.args.etcd.as_deref() == Some("") {
                // The private etcd start_etcd started: TLS, client certificates, a user.
                argv.extend(super::super::etcd::Etcd::controller_flags(
                    &self.dir.join("etcd"),
                ));
            }
        }
        argv
    }

    /// The command line of endpoint `p`'s `onepipe node`.
    pub(super) fn node_argv(&self, p: u32) -> Vec<String> {
        let (a, w) = (self.args, &self.args.work);
        let out = self.dir.join(format!("p{p}.rec")).display().to_string();
        strings(&[
            "node",
            "--controller",
            &self.controllers,
            "--proc",
            &p.to_string(),
            "--workload",
            w.workload.name(),
            "--service",
            w.service.name(),
            "--msg-size",
            &w.msg_size.to_string(),
            "--rate",
            &w.rate.to_string(),
            "--duration",
            &format!("{}ns", w.duration),
            "--scatter-k",
            &w.scatter_k.to_string(),
            "--seed",
            &w.seed.to_string(),
            "--optimistic-delta",
            &format!("{}ns", w.optimistic_delta),
            "--optimistic-adaptive",
            &w.optimistic_adaptive.to_string(),
            "--drain",
            &format!("{}ns", a.drain),
            "--out",
            &out,
            "--app-spin",
            &a.app_spin.to_string(),
            "--supervised",
        ])
        .into_iter()
        .chain(self.pki_argv())
        .chain(self.app_argv())
        .chain(a.protocol.argv())
        .collect()
    }

    /// `--pki DIR` for a node, when the run is protected.
    fn pki_argv(&self) -> Vec<String> {
        match &self.pki {
            Some(dir) => strings(&["--pki", &dir.display().to_string()]),
            None => Vec::new(),
        }
    }

    /// The application's flags, passed on to every node.
    fn app_argv(&self) -> Vec<String> {
        let a = &self.args.app;
        match a.app {
            None => Vec::new(),
            Some(crate::sim_app::AppName::Tpcc) => tpcc_argv(a),
            Some(crate::sim_app::AppName::Replkv) => replkv_argv(a, paxos_live(self.args)),
            Some(crate::sim_app::AppName::Kv) => kv_argv(a),
            Some(crate::sim_app::AppName::Hashtable) => unreachable!("refused by check_app"),
        }
    }
}

/// The command line of aggregator `name`'s `onepipe agg`.
pub(super) fn agg_argv(config: &str, name: &str, controller: &str) -> Vec<String> {
    strings(&[
        "agg",
        "--config",
        config,
        "--id",
        name,
        "--controller",
        controller,
        "--supervised",
    ])
}

/// `--app tpcc`'s flags for a node.
fn tpcc_argv(a: &AppArgs) -> Vec<String> {
    strings(&[
        "--app",
        "tpcc",
        "--window",
        &a.window.to_string(),
        "--warehouses",
        &a.warehouses.to_string(),
        "--items",
        &a.items.to_string(),
        "--customers",
        &a.customers.to_string(),
    ])
}

/// `--app replkv`'s flags for a node; `paxos`: on MultiPaxos (`paxos_live`).
fn replkv_argv(a: &AppArgs, paxos: bool) -> Vec<String> {
    strings(&[
        "--app",
        "replkv",
        "--window",
        &a.window.to_string(),
        "--keys",
        &a.keys.unwrap_or(1_000).to_string(),
        "--replicas",
        &a.replicas.unwrap_or(3).to_string(),
        "--read-share",
        &a.read_share.to_string(),
        "--cas-share",
        &a.cas_share.to_string(),
        "--value-size",
        &a.value_size.to_string(),
        "--disk",
        &format!("{}ns", a.disk),
        "--disk-jitter",
        &format!("{}ns", a.disk_jitter),
        "--system",
        if paxos { "paxos" } else { "1pipe" },
        "--wnd",
        &a.wnd.to_string(),
        "--bsz",
        &a.bsz.to_string(),
        "--delta-b",
        &format!("{}ns", a.delta_b),
    ])
}

/// `--app kv`'s flags for a node.
fn kv_argv(a: &AppArgs) -> Vec<String> {
    let mut v = strings(&[
        "--app",
        "kv",
        "--window",
        &a.window.to_string(),
        "--keys",
        &a.keys.unwrap_or(1_000_000).to_string(),
        "--key-dist",
        match a.key_dist {
            crate::sim_app::Dist::Uniform => "uniform",
            crate::sim_app::Dist::Zipf => "zipf",
        },
        "--ops-per-txn",
        &a.ops_per_txn.to_string(),
        "--read-only-share",
        &a.read_only_share
            .0
            .map_or("none".to_string(), |x| x.to_string()),
        "--write-share",
        &a.write_share.to_string(),
        "--value-max",
        &a.value_max.to_string(),
    ]);
    if let Some(y) = &a.ycsb {
        v.extend(strings(&["--ycsb", y]));
    }
    v
}
