//! `onepipe bench etcd`: the replicated key-value service's put/get load against etcd — what
//! users reach for today — on loopback: `--members` etcd members (Debian's `etcd`, Raft), and
//! `--clients` closed-loop clients over etcd's gRPC API (`etcd-client`), each with one operation
//! in flight, drawing the same commands as `onepipe up --app replkv` (`CmdGen`: gets, puts, and
//! compare-and-sets as etcd transactions). It prints latency p50/p99 by kind and throughput,
//! and checks the run's history with the same linearizability checker (etcd's reads are
//! linearizable by default). Compare with `onepipe up --app replkv` of the same shape
//! (docs/BENCHMARKS.md).
//!
//! Behind the `etcd` feature (`etcd-client` needs `protoc` at build time).

use crate::cli::parse_duration;
use clap::Args;
use std::path::PathBuf;

/// Flags of `bench etcd`.
#[derive(Args, Debug)]
pub struct EtcdArgs {
    /// etcd members (a Raft group on loopback).
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// Closed-loop clients (threads), one operation in flight each.
    #[arg(long, default_value_t = 3)]
    pub clients: u32,
    /// How long the clients issue operations.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: u64,
    /// Keys 0..N.
    #[arg(long, default_value_t = 1_000)]
    pub keys: u64,
    /// Share of gets.
    #[arg(long, default_value_t = 0.5)]
    pub read_share: f64,
    /// Share of compare-and-sets among writes.
    #[arg(long, default_value_t = 0.1)]
    pub cas_share: f64,
    /// Bytes of each value.
    #[arg(long, default_value_t = 64)]
    pub value_size: u32,
    /// Seed of the clients' commands.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write every operation to FILE as the replicated service's history.
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
}

/// `bench etcd`.
#[cfg(not(feature = "etcd"))]
pub fn etcd(_: &EtcdArgs) -> Result<(), String> {
    Err("bench etcd: this onepipe was built without the `etcd` feature (cargo build --release -p onepipe-cli --features etcd; etcd-client needs protoc)".into())
}

/// `bench etcd`.
#[cfg(feature = "etcd")]
pub fn etcd(a: &EtcdArgs) -> Result<(), String> {
    imp::run(a)
}

#[cfg(feature = "etcd")]
mod imp {
    use super::EtcdArgs;
    use crate::live::etcd::EtcdCluster;
    use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
    use onepipe_apps::repl::lincheck::{self, LinVerdict};
    use onepipe_apps::repl::{Cmd, CmdGen, ReplDone, ReplWorkload, Val};
    use onepipe_runtime::clock::monotonic_ns;
    use onepipe_sim::metrics::{NsHistogram, Summary};
    use serde_json::json;

    fn key(k: u64) -> Vec<u8> {
        format!("k{k}").into_bytes()
    }

    /// A value's bytes: its identity, then padding.
    fn value(v: Val, size: u32) -> Vec<u8> {
        let mut b = v.to_be_bytes().to_vec();
        b.resize((size as usize).max(8), 0);
        b
    }

    fn parse(b: &[u8]) -> Option<Val> {
        b.get(..8)
            .and_then(|x| x.try_into().ok())
            .map(u64::from_be_bytes)
    }

    async fn execute(c: &mut Client, cmd: &Cmd, size: u32) -> Result<Option<Val>, String> {
        let e = |e: etcd_client::Error| e.to_string();
        match *cmd {
            Cmd::Get(k) => {
                let r = c.get(key(k), None).await.map_err(e)?;
                Ok(r.kvs().first().and_then(|kv| parse(kv.value())))
            }
            Cmd::Put(k, v) => {
                c.put(key(k), value(v, size), None).await.map_err(e)?;
                Ok(None)
            }
            Cmd::Cas {
                key: k,
                expect,
                new,
            } => {
                let cond = match expect {
                    Some(x) => Compare::value(key(k), CompareOp::Equal, value(x, size)),
                    None => Compare::version(key(k), CompareOp::Equal, 0),
                };
                let txn = Txn::new()
                    .when([cond])
                    .and_then([TxnOp::put(key(k), value(new, size), None)])
                    .or_else([TxnOp::get(key(k), None)]);
                let r = c.txn(txn).await.map_err(e)?;
                if r.succeeded() {
                    return Ok(expect);
                }
                Ok(r.op_responses().into_iter().find_map(|o| match o {
                    TxnOpResponse::Get(g) => g.kvs().first().and_then(|kv| parse(kv.value())),
                    _ => None,
                }))
            }
        }
    }

    /// One client: its operations until `stop` (monotonic ns).
    fn client(
        urls: Vec<String>,
        workload: ReplWorkload,
        me: u32,
        seed: u64,
        stop: u64,
    ) -> Result<Vec<ReplDone>, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        rt.block_on(async move {
            let mut c = Client::connect(&urls, None)
                .await
                .map_err(|e| format!("cannot connect to etcd at {urls:?}: {e}"))?;
            let size = workload.value_size;
            let mut gen = CmdGen::new(workload, me, seed);
            let mut done = Vec::new();
            let mut id = 0;
            while monotonic_ns() < stop {
                let cmd = gen.next_cmd();
                let call = monotonic_ns();
                let output = execute(&mut c, &cmd, size).await?;
                let ret = monotonic_ns();
                gen.observe(&cmd, output);
                done.push(ReplDone {
                    client: me,
                    id,
                    cmd,
                    output,
                    call_ns: call,
                    return_ns: ret,
                });
                id += 1;
            }
            Ok(done)
        })
    }

    /// Writes `--history` (every operation, Jepsen's form) and `--json` (the counts, the
    /// latency by kind, the checker's verdict).
    fn write_outputs(
        a: &EtcdArgs,
        done: &[ReplDone],
        per_s: f64,
        s: &[Summary],
        v: &LinVerdict,
    ) -> Result<(), String> {
        if let Some(path) = &a.history {
            std::fs::write(path, lincheck::history_json(done, &[]))
                .map_err(|e| format!("--history: {}: {e}", path.display()))?;
        }
        if let Some(path) = &a.json {
            let r = json!({
                "system": "etcd",
                "members": a.members,
                "clients": a.clients,
                "ops": done.len(),
                "ops_per_s": per_s,
                "latency_ns_get": s[0],
                "latency_ns_write": s[1],
                "violations": v.violations,
                "undecided": v.undecided,
            });
            std::fs::write(path, format!("{r:#}\n"))
                .map_err(|e| format!("--json: {}: {e}", path.display()))?;
        }
        Ok(())
    }

    pub(super) fn run(a: &EtcdArgs) -> Result<(), String> {
        let workload = ReplWorkload {
            keys: a.keys,
            read_ratio: a.read_share,
            cas_ratio: a.cas_share,
            value_size: a.value_size,
        };
        workload
            .validate()
            .map_err(|e| format!("bench etcd: {e}"))?;
        if a.members == 0 || a.clients == 0 {
            return Err("bench etcd: --members and --clients must be at least 1".into());
        }
        let dir = std::env::temp_dir().join(format!("onepipe-etcd-bench-{}", std::process::id()));
        let cluster = EtcdCluster::start(dir, a.members)?;
        println!(
            "etcd: {} members on loopback ({}); {} clients, one operation in flight each, for {:.1} s",
            a.members,
            cluster.urls.join(", "),
            a.clients,
            a.duration as f64 / 1e9
        );
        let stop = monotonic_ns() + a.duration;
        let handles: Vec<_> = (0..a.clients)
            .map(|c| {
                let (urls, w) = (cluster.urls.clone(), workload.clone());
                let seed = a.seed ^ (u64::from(c) << 32);
                std::thread::spawn(move || client(urls, w, c, seed, stop))
            })
            .collect();
        let mut done = Vec::new();
        for h in handles {
            done.extend(
                h.join()
                    .map_err(|_| "a client thread panicked".to_string())??,
            );
        }
        drop(cluster);
        let mut latency: [NsHistogram; 2] = Default::default();
        for d in &done {
            latency[usize::from(d.cmd.is_write())].record(d.return_ns.saturating_sub(d.call_ns));
        }
        let per_s = done.len() as f64 / (a.duration as f64 / 1e9);
        let v = lincheck::check(&done, &[], 0, 2_000_000);
        let s: Vec<_> = latency.iter().map(NsHistogram::summary).collect();
        println!("  etcd        {} operations: {:.0}/s", done.len(), per_s);
        for (name, l) in [("get", &s[0]), ("write", &s[1])] {
            println!(
                "  {name:<11} latency p50 {:.1} µs  p99 {:.1} µs",
                l.p50 as f64 / 1e3,
                l.p99 as f64 / 1e3
            );
        }
        println!(
            "  checker     {} operations over {} keys checked for linearizability: {} violation(s), {} undecided",
            v.ops, v.keys, v.violations, v.undecided
        );
        for x in &v.samples {
            eprintln!("  {x}");
        }
        write_outputs(a, &done, per_s, &s, &v)?;
        if v.violations + v.undecided > 0 {
            return Err(format!(
                "etcd's history is not linearizable: {} violation(s)",
                v.violations
            ));
        }
        Ok(())
    }
}
