//! `onepipe bench paxos`: the seed paper's experiments (Santos & Schiper, "Tuning Paxos for
//! high-throughput with batching and pipelining", §IV; `paxos-batching-pipelining.txt`, cited as
//! \[SS\]) on the simulator, MultiPaxos with batching and pipelining (`repl::paxos`) on direct
//! messages, with the §III model (`onepipe_baselines::paxos_model`) drawn beside every point.
//!
//! Two settings, each with \[SS\]'s parameters (the model's presets, Tables II and III): 3
//! replicas, 1 KB requests of writes answered with 1 KB (\[SS\] §IV-B's echo service), no disk,
//! closed-loop clients with one request outstanding each, Δ_B = 10 ms.
//!
//! * **emulab** (§IV-C, the WAN): the replicas' outgoing links are the emulated WAN links,
//!   9.59 Mbit/s and 150 ms one way; everything else is the clients' 100 Mbit/s network without
//!   emulated latency. The leader's outgoing link is the bottleneck (§III-A).
//! * **cluster** (§IV-D, the LAN): 940 Mbit/s and 0.2 ms one way between any two hosts; the
//!   leader's CPU is the bottleneck: every process pays per message 44 µs to send and 44 µs to
//!   take one in, so a leader that batches fully saturates at about \[SS\]'s 11 K requests/s.
//!
//! The experiments of each setting: batching alone (WND = 1, a BSZ sweep: Figs. 8 and 11),
//! pipelining alone (BSZ = 1 KB, a WND sweep: Figs. 9 and 12), both (BSZ at \[SS\]'s choice, a WND
//! sweep: Figs. 10 and 13), scalability with the clients (Fig. 14) and large requests (one
//! request per instance, a request-size sweep to 8 KiB, the service's largest value, where the
//! paper's Fig. 15 takes 64 KB). Every run is checked (linearizability,
//! the replicas' logs, no acknowledged write lost) and a violation fails the bench; so does a
//! leader change or an Accept sent again (timeouts too short for the setting).

use crate::plot::{line_chart, Chart, Series};
use clap::Args;
use onepipe_apps::repl::paxos::{accepted_len, put_len, put_reply_len};
use onepipe_apps::repl::{DiskModel, ReplWorkload};
use onepipe_baselines::paxos_model::PaxosNet;
use onepipe_sim::apps::AppReport;
use onepipe_sim::direct::{run_direct, DirectSystem, MESSAGE_OVERHEAD_LEN};
use onepipe_sim::{
    AppSpec, HostLinks, LinkSpec, NetworkConfig, PaxosSpec, SimConfig, TopologySpec, WorkloadConfig,
};
use std::io::Write;
use std::path::PathBuf;

/// Flags of `bench paxos`.
#[derive(Args, Debug)]
pub struct PaxosBenchArgs {
    /// Directory for paxos.csv and its plots (created if missing).
    #[arg(long, default_value = "paxos")]
    pub out: PathBuf,
    /// A small version (few points, short runs) for the test suite.
    #[arg(long)]
    pub quick: bool,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulations run in parallel (the results do not depend on it).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Which of \[SS\]'s settings to run.
    #[arg(long, value_enum, default_value = "both")]
    pub setting: SettingArg,
}

/// `--setting`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SettingArg {
    /// The WAN emulated on Emulab (§IV-C).
    Emulab,
    /// The LAN cluster (§IV-D).
    Cluster,
    /// Both.
    Both,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Setting {
    Emulab,
    Cluster,
}

/// Every process's CPU cost per message sent, ns (the cluster's leader bottleneck, §IV-D).
const SEND_NS: u64 = 44_000;
/// Every process's CPU cost per message taken in (receive + deliver), ns.
const RECV_NS: u64 = 30_000;
/// See `RECV_NS`.
const DELIVER_NS: u64 = 14_000;
/// \[SS\] §IV-A: "we study BSZ and WND, while keeping Δ_B set to 10ms".
const DELTA_B_NS: u64 = 10_000_000;
/// A client never resends (\[SS\]'s clients wait on TCP; nothing is lost here).
const CLIENT_SUSPECT_NS: u64 = 3_600_000_000_000;
/// \[SS\]'s requests: 1 KB on the wire.
const KIB: u32 = 1024;
const REPLICAS: u32 = 3;

/// A setting's network, its run length and its timeouts.
struct Net {
    /// `B`, `L` and `n` (the sizes are set per point).
    model: PaxosNet,
    /// The clients' links to their switch.
    client_up: LinkSpec,
    /// The switch's links to every host. A message is forwarded whole, so a slow second hop
    /// would count its serialization twice: the bandwidth `B` is the senders' links'.
    down_gbps: f64,
    duration_ns: u64,
    quick_duration_ns: u64,
    /// The leader's heartbeat: an Accept is sent again after two, so two must exceed the
    /// longest queue on the leader's link or at its CPU.
    heartbeat_ns: u64,
}

impl Setting {
    fn name(self) -> &'static str {
        match self {
            Setting::Emulab => "emulab",
            Setting::Cluster => "cluster",
        }
    }

    fn net(self) -> Net {
        match self {
            // §IV-C: "The replicas are connected by an emulated network with 150ms latency and
            // 10Mbit/s of bandwidth" (9.59 Mbit/s measured); the clients "are connected
            // directly to every replica over a link with no emulated latency and 100Mbit/s".
            Setting::Emulab => Net {
                model: PaxosNet::emulab(),
                client_up: LinkSpec {
                    gbps: 0.1,
                    delay_ns: 0,
                },
                down_gbps: 0.1,
                duration_ns: 360_000_000_000,
                quick_duration_ns: 20_000_000_000,
                heartbeat_ns: 2_000_000_000,
            },
            // §IV-D: Gigabit Ethernet, 940 Mbit/s measured; Table III's L = 0.2 ms.
            Setting::Cluster => Net {
                model: PaxosNet::cluster(),
                client_up: LinkSpec {
                    gbps: 0.94,
                    delay_ns: 200_000,
                },
                down_gbps: 10.0,
                duration_ns: 10_000_000_000,
                quick_duration_ns: 500_000_000,
                heartbeat_ns: 100_000_000,
            },
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Experiment {
    /// WND = 1, BSZ swept (Figs. 8, 11).
    Batching,
    /// BSZ = 1 KB, WND swept (Figs. 9, 12).
    Pipelining,
    /// BSZ fixed at \[SS\]'s choice, WND swept (Figs. 10, 13).
    Both,
    /// Three (BSZ, WND), clients swept (Fig. 14).
    Clients,
    /// One request per instance (BSZ = the request), the request's size swept per WND (Fig. 15).
    Large,
}

const EXPERIMENTS: [Experiment; 5] = [
    Experiment::Batching,
    Experiment::Pipelining,
    Experiment::Both,
    Experiment::Clients,
    Experiment::Large,
];

impl Experiment {
    fn name(self) -> &'static str {
        match self {
            Experiment::Batching => "batching",
            Experiment::Pipelining => "pipelining",
            Experiment::Both => "both",
            Experiment::Clients => "clients",
            Experiment::Large => "large",
        }
    }
    fn figure(self, s: Setting) -> &'static str {
        match (self, s) {
            (Experiment::Batching, Setting::Emulab) => "Fig. 8",
            (Experiment::Batching, Setting::Cluster) => "Fig. 11",
            (Experiment::Pipelining, Setting::Emulab) => "Fig. 9",
            (Experiment::Pipelining, Setting::Cluster) => "Fig. 12",
            (Experiment::Both, Setting::Emulab) => "Fig. 10",
            (Experiment::Both, Setting::Cluster) => "Fig. 13",
            (Experiment::Clients, _) => "Fig. 14",
            (Experiment::Large, _) => "Fig. 15",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Point {
    setting: Setting,
    exp: Experiment,
    clients: u32,
    /// BSZ, bytes.
    bsz: u32,
    wnd: u32,
    /// A request's size in a batch, bytes (`S_req`).
    request: u32,
}

/// One setting's sweeps.
struct Plan {
    clients: Vec<u32>,
    bsz_kib: Vec<u32>,
    wnd: Vec<u32>,
    both_bsz_kib: u32,
    both_wnd: Vec<u32>,
    sweep_clients: Vec<u32>,
    /// (BSZ KiB, WND) of the clients sweep.
    configs: Vec<(u32, u32)>,
    sizes_kib: Vec<u32>,
    large_wnd: Vec<u32>,
    large_clients: u32,
}

fn plan(s: Setting, quick: bool) -> Plan {
    match (s, quick) {
        (Setting::Emulab, false) => Plan {
            clients: vec![100, 500, 900],
            bsz_kib: vec![1, 4, 16, 64, 128, 256, 384, 512],
            wnd: vec![1, 2, 5, 10, 20, 30, 50, 100, 200],
            both_bsz_kib: 128,
            both_wnd: vec![1, 2, 3, 4, 5, 8],
            sweep_clients: vec![10, 30, 100, 300, 600, 1000],
            // The best of Figs. 9, 8 and 10.
            configs: vec![(1, 30), (128, 1), (128, 4)],
            sizes_kib: vec![1, 2, 4, 8],
            large_wnd: vec![1, 2, 5],
            large_clients: 100,
        },
        (Setting::Emulab, true) => Plan {
            clients: vec![900],
            bsz_kib: vec![1, 128, 384],
            wnd: vec![1, 100],
            both_bsz_kib: 128,
            both_wnd: vec![1, 2, 4],
            sweep_clients: vec![30, 300],
            configs: vec![(1, 30), (128, 4)],
            sizes_kib: vec![1, 8],
            large_wnd: vec![1, 5],
            large_clients: 100,
        },
        (Setting::Cluster, false) => Plan {
            clients: vec![100, 500, 900],
            bsz_kib: vec![1, 2, 4, 8, 16, 32, 64, 128],
            wnd: vec![1, 2, 3, 5, 10, 20],
            both_bsz_kib: 64,
            both_wnd: vec![1, 2, 3, 5, 10],
            sweep_clients: vec![3, 5, 10, 20, 50, 100, 200, 500, 1000],
            // §IV-E's three.
            configs: vec![(1, 1), (1, 5), (64, 1)],
            sizes_kib: vec![1, 2, 4, 8],
            large_wnd: vec![1, 2, 5],
            large_clients: 100,
        },
        (Setting::Cluster, true) => Plan {
            clients: vec![500],
            bsz_kib: vec![1, 16, 32, 64],
            wnd: vec![1, 5],
            both_bsz_kib: 64,
            both_wnd: vec![1, 3],
            sweep_clients: vec![10, 200],
            configs: vec![(1, 1), (64, 1)],
            sizes_kib: vec![1, 8],
            large_wnd: vec![1, 5],
            large_clients: 100,
        },
    }
}

fn settings(a: &PaxosBenchArgs) -> Vec<Setting> {
    match a.setting {
        SettingArg::Emulab => vec![Setting::Emulab],
        SettingArg::Cluster => vec![Setting::Cluster],
        SettingArg::Both => vec![Setting::Emulab, Setting::Cluster],
    }
}

fn points(a: &PaxosBenchArgs) -> Vec<Point> {
    let mut v = Vec::new();
    for setting in settings(a) {
        let p = plan(setting, a.quick);
        let pt = |exp, clients, bsz_kib: u32, wnd, request| Point {
            setting,
            exp,
            clients,
            bsz: bsz_kib * KIB,
            wnd,
            request,
        };
        for &c in &p.clients {
            for &b in &p.bsz_kib {
                v.push(pt(Experiment::Batching, c, b, 1, KIB));
            }
            for &w in &p.wnd {
                v.push(pt(Experiment::Pipelining, c, 1, w, KIB));
            }
            for &w in &p.both_wnd {
                v.push(pt(Experiment::Both, c, p.both_bsz_kib, w, KIB));
            }
        }
        for &(b, w) in &p.configs {
            for &c in &p.sweep_clients {
                v.push(pt(Experiment::Clients, c, b, w, KIB));
            }
        }
        for &w in &p.large_wnd {
            for &s in &p.sizes_kib {
                v.push(pt(Experiment::Large, p.large_clients, s, w, s * KIB));
            }
        }
    }
    v
}

/// The bytes of a put's value that make a request of `request` bytes in a batch.
fn value_size(request: u32) -> u32 {
    request - put_len(0)
}

fn config(a: &PaxosBenchArgs, p: &Point) -> SimConfig {
    let net = p.setting.net();
    let down = LinkSpec {
        gbps: net.down_gbps,
        delay_ns: 0,
    };
    let replica_up = LinkSpec {
        gbps: net.model.bandwidth * 8.0 / 1e9,
        delay_ns: (net.model.latency * 1e9).round() as u64,
    };
    let hosts = REPLICAS + p.clients;
    SimConfig {
        seed: a.seed,
        net: NetworkConfig {
            topology: TopologySpec::Rack { hosts },
            link_gbps: net.down_gbps,
            link_delay_ns: 0,
            host_links: vec![
                HostLinks {
                    hosts: 0..REPLICAS,
                    up: replica_up,
                    down,
                },
                HostLinks {
                    hosts: REPLICAS..hosts,
                    up: net.client_up,
                    down,
                },
            ],
            host_send_ns: SEND_NS,
            host_recv_ns: RECV_NS,
            host_deliver_ns: DELIVER_NS,
            ..Default::default()
        },
        workload: WorkloadConfig {
            duration_ns: if a.quick {
                net.quick_duration_ns
            } else {
                net.duration_ns
            },
            // The throughput and the counters are those of the run's length: it stops when the
            // clients do; the requests still open are checked as writes that may or may not have
            // taken effect.
            drain_ns: 0,
            app: Some(AppSpec::ReplKv {
                workload: ReplWorkload {
                    keys: 100_000,
                    read_ratio: 0.0,
                    cas_ratio: 0.0,
                    value_size: value_size(p.request),
                },
                window: 1,
                replicas: REPLICAS,
                disk: DiskModel::default(),
                suspect_ns: Some(CLIENT_SUSPECT_NS),
                paxos: PaxosSpec {
                    wnd: p.wnd,
                    bsz: p.bsz,
                    delta_b_ns: DELTA_B_NS,
                    heartbeat_ns: net.heartbeat_ns,
                    election_timeout_ns: 10 * net.heartbeat_ns,
                    echo: true,
                },
            }),
            ..Default::default()
        },
        ..SimConfig::default()
    }
}

/// The §III model of point `p`'s network with its sizes as they are on the simulated wire.
fn model_net(p: &Point) -> PaxosNet {
    let framing = MESSAGE_OVERHEAD_LEN as f64;
    PaxosNet {
        request: f64::from(p.request),
        ack: f64::from(accepted_len()) + framing,
        answer: f64::from(put_reply_len(value_size(p.request))) + framing,
        ..p.setting.net().model
    }
}

/// What the model and the CPU costs predict for a point.
#[derive(Clone, Copy, Debug)]
struct Prediction {
    /// Eq. 1: the leader's outgoing link full.
    max: f64,
    /// `min(WND · b / τ_dec(b · S_req), Eq. 1)` with full batches (`b = ⌊BSZ / S_req⌋`).
    full: f64,
    /// The same with the measured mean batch.
    at_batch: f64,
    /// Eq. 3 for full batches, seconds.
    tau_dec: f64,
    /// Eq. 4 for full batches.
    w: u32,
    /// Eq. 5's `g(1)`: the batch with which one instance fills the link, bytes.
    g1: f64,
    /// The leader's CPU: per request a message in and one out, per instance `n − 1` Accepts out
    /// and `n − 1` answers in: `b / ((send + receive) · (b + n − 1))`.
    cpu: f64,
}

/// Requests per second of `wnd` instances of `batch` requests each, each taking Eq. 3's
/// τ_dec, at most Eq. 1 (§III-D: below `w = f(S_batch)` the link is not full).
fn model_throughput(net: &PaxosNet, wnd: u32, batch: f64) -> f64 {
    let b = batch.max(1.0);
    (f64::from(wnd) * b / net.tau_dec(b * net.request)).min(net.max_throughput())
}

fn predict(p: &Point, measured_batch: f64) -> Prediction {
    let net = model_net(p);
    let full = f64::from((p.bsz / p.request).max(1));
    let per_msg = (SEND_NS + RECV_NS + DELIVER_NS) as f64 / 1e9;
    let others = f64::from(REPLICAS - 1);
    Prediction {
        max: net.max_throughput(),
        full: model_throughput(&net, p.wnd, full),
        at_batch: model_throughput(&net, p.wnd, measured_batch),
        tau_dec: net.tau_dec(full * net.request),
        w: net.w(full * net.request),
        g1: net.batch_for(1),
        cpu: full / (per_msg * (full + others)),
    }
}

/// A point's measurements.
#[derive(Clone, Debug)]
struct Measured {
    app: AppReport,
    duration_s: f64,
    req_per_s: f64,
    inst_per_s: f64,
    batch_mean: f64,
    active_mean: f64,
    /// Little's law: the mean active instances over the instances decided per second.
    instance_s: f64,
    retransmits: u64,
    leader_changes: u64,
    pred: Prediction,
}

fn run_point(a: &PaxosBenchArgs, p: &Point) -> Result<Measured, String> {
    let cfg = config(a, p);
    let r = run_direct(&cfg, DirectSystem::Paxos, &mut |_| {})
        .map_err(|e| format!("{}: {e}", label(p)))?;
    let app = r.app;
    let px = app.paxos.clone().unwrap_or_default();
    let duration_s = cfg.workload.duration_ns as f64 / 1e9;
    let inst_per_s = px.instances_decided as f64 / duration_s;
    let batch_mean = px.batch_mean();
    Ok(Measured {
        req_per_s: app.ops_per_s,
        inst_per_s,
        batch_mean,
        active_mean: px.active_mean(),
        instance_s: px.active_mean() / inst_per_s.max(1e-9),
        retransmits: px.retransmits,
        leader_changes: px.phase1_runs + px.step_downs,
        pred: predict(p, batch_mean),
        duration_s,
        app,
    })
}

fn label(p: &Point) -> String {
    format!(
        "{} {} {} clients BSZ {} KiB WND {} S_req {} KiB",
        p.setting.name(),
        p.exp.name(),
        p.clients,
        p.bsz / KIB,
        p.wnd,
        p.request / KIB
    )
}

/// `bench paxos`.
pub fn paxos(a: &PaxosBenchArgs) -> Result<(), String> {
    let pts = points(a);
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("--out: cannot create {}: {e}", a.out.display()))?;
    let started = std::time::Instant::now();
    let results = crate::sweep::run_points(
        "paxos",
        &pts,
        a.jobs,
        |p| u64::from(p.clients) * u64::from(p.wnd.min(8)),
        label,
        |p| run_point(a, p),
    );
    let out = results.into_iter().collect::<Result<Vec<_>, String>>()?;
    write_csv(a, &pts, &out)?;
    print_table(&pts, &out);
    print_shapes(a, &pts, &out);
    println!(
        "# {} simulations, {:.0} s wall on {} thread(s)",
        pts.len(),
        started.elapsed().as_secs_f64(),
        a.jobs.max(1)
    );
    let failing: Vec<String> = pts
        .iter()
        .zip(&out)
        .filter(|(_, m)| m.app.violations > 0 || m.retransmits > 0 || m.leader_changes > 0)
        .map(|(p, m)| {
            format!(
                "{}: {} violation(s), {} Accept(s) sent again, {} leader change(s); first {:?}",
                label(p),
                m.app.violations,
                m.retransmits,
                m.leader_changes,
                m.app.violation_samples.first()
            )
        })
        .collect();
    let pngs: Vec<String> = settings(a)
        .iter()
        .flat_map(|s| EXPERIMENTS.map(|e| png_name(*s, e)))
        .collect();
    crate::sweep::finish(
        "paxos",
        &a.out.join("paxos.csv"),
        &pngs.join(", "),
        |font| plots(a, &pts, &out, font),
        &failing,
        a.seed,
    )
}

fn write_csv(a: &PaxosBenchArgs, pts: &[Point], out: &[Measured]) -> Result<(), String> {
    let path = a.out.join("paxos.csv");
    let mut f = std::fs::File::create(&path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    w(
        "setting,experiment,clients,bsz_bytes,wnd,request_bytes,duration_s,requests,req_per_s,\
       inst_per_s,batch_mean,active_mean,instance_ms,latency_p50_ms,latency_mean_ms,\
       latency_p99_ms,data_mb_per_s,model_max_req_per_s,model_req_per_s,\
       model_at_batch_req_per_s,model_tau_dec_ms,model_w,model_g1_kib,cpu_bound_req_per_s,\
       retransmits,leader_changes,checked_ops,violations"
            .into(),
    )?;
    for (p, m) in pts.iter().zip(out) {
        let l = &m.app.latency_ns_wo;
        w(format!(
            "{},{},{},{},{},{},{},{},{:.1},{:.1},{:.2},{:.2},{:.3},{:.3},{:.3},{:.3},{:.3},{:.1},\
             {:.1},{:.1},{:.3},{},{:.1},{:.1},{},{},{},{}",
            p.setting.name(),
            p.exp.name(),
            p.clients,
            p.bsz,
            p.wnd,
            p.request,
            m.duration_s,
            m.app.committed_wo,
            m.req_per_s,
            m.inst_per_s,
            m.batch_mean,
            m.active_mean,
            m.instance_s * 1e3,
            l.p50 as f64 / 1e6,
            l.mean / 1e6,
            l.p99 as f64 / 1e6,
            m.req_per_s * f64::from(p.request) / 1e6,
            m.pred.max,
            m.pred.full,
            m.pred.at_batch,
            m.pred.tau_dec * 1e3,
            m.pred.w,
            m.pred.g1 / f64::from(KIB),
            m.pred.cpu,
            m.retransmits,
            m.leader_changes,
            m.app.checked_transactions,
            m.app.violations
        ))?;
    }
    Ok(())
}

fn print_table(pts: &[Point], out: &[Measured]) {
    println!(
        "| setting | experiment | clients | BSZ (KiB) | WND | S_req (KiB) | req/s | inst/s | \
         batch | active | instance (ms) | latency p50 / mean (ms) | model req/s | Eq. 1 | CPU bound |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (p, m) in pts.iter().zip(out) {
        let l = &m.app.latency_ns_wo;
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.1} | {:.2} | {:.1} | {:.1} / {:.1} | {:.0} | {:.0} | {:.0} |",
            p.setting.name(),
            p.exp.name(),
            p.clients,
            p.bsz / KIB,
            p.wnd,
            p.request / KIB,
            m.req_per_s,
            m.inst_per_s,
            m.batch_mean,
            m.active_mean,
            m.instance_s * 1e3,
            l.p50 as f64 / 1e6,
            l.mean / 1e6,
            m.pred.full,
            m.pred.max,
            m.pred.cpu
        );
    }
}

/// The best request throughput among the points of `exp` in `setting` that `keep` keeps, with
/// its point.
fn best<'a>(
    pts: &'a [Point],
    out: &'a [Measured],
    setting: Setting,
    exp: Experiment,
    keep: impl Fn(&Point) -> bool,
) -> Option<(&'a Point, &'a Measured)> {
    pts.iter()
        .zip(out)
        .filter(|(p, _)| p.setting == setting && p.exp == exp && keep(p))
        .max_by(|x, y| x.1.req_per_s.total_cmp(&y.1.req_per_s))
}

/// A few lines on \[SS\]'s findings, from the most loaded client count of each sweep.
fn print_shapes(a: &PaxosBenchArgs, pts: &[Point], out: &[Measured]) {
    for s in settings(a) {
        let pl = plan(s, a.quick);
        let Some(&top) = pl.clients.iter().max() else {
            continue;
        };
        let at = |exp, bsz: u32, wnd| {
            best(pts, out, s, exp, |p| {
                p.clients == top && p.bsz == bsz * KIB && p.wnd == wnd
            })
            .map_or(0.0, |(_, m)| m.req_per_s)
        };
        let batching = best(pts, out, s, Experiment::Batching, |p| p.clients == top);
        let pipelining = best(pts, out, s, Experiment::Pipelining, |p| p.clients == top);
        let both = best(pts, out, s, Experiment::Both, |p| p.clients == top);
        let (Some(b), Some(pi), Some(bo)) = (batching, pipelining, both) else {
            continue;
        };
        let one = at(Experiment::Batching, 1, 1);
        println!(
            "# {} ({top} clients): Eq. 1 {:.0} req/s; batching alone {:.0} → {:.0} req/s \
             ({:.1}×, best BSZ {} KiB; g(1) = {:.0} KiB); pipelining alone best {:.0} (WND {}); \
             both best {:.0} (BSZ {} KiB, WND {}; f(BSZ) = {}); leader CPU bound {:.0}",
            s.name(),
            b.1.pred.max,
            one,
            b.1.req_per_s,
            b.1.req_per_s / one.max(1e-9),
            b.0.bsz / KIB,
            b.1.pred.g1 / f64::from(KIB),
            pi.1.req_per_s,
            pi.0.wnd,
            bo.1.req_per_s,
            bo.0.bsz / KIB,
            bo.0.wnd,
            bo.1.pred.w,
            bo.1.pred.cpu
        );
    }
}

fn png_name(s: Setting, e: Experiment) -> String {
    format!("paxos-{}-{}.png", s.name(), e.name())
}

/// One chart's axes, from a point and its measurements.
type Axis = dyn Fn(&Point, &Measured) -> f64;

fn series(name: String, pts: &[(&Point, &Measured)], x: &Axis, y: &Axis) -> Series {
    Series {
        name,
        points: pts.iter().map(|(p, m)| (x(p, m), y(p, m))).collect(),
    }
}

fn plots(
    a: &PaxosBenchArgs,
    pts: &[Point],
    out: &[Measured],
    font: &'static str,
) -> Result<(), String> {
    for s in settings(a) {
        let pl = plan(s, a.quick);
        for exp in EXPERIMENTS {
            let mine: Vec<(&Point, &Measured)> = pts
                .iter()
                .zip(out)
                .filter(|(p, _)| p.setting == s && p.exp == exp)
                .collect();
            let lines = match exp {
                Experiment::Batching | Experiment::Pipelining | Experiment::Both => {
                    sweep_lines(s, exp, &pl.clients, &mine)
                }
                Experiment::Clients => clients_lines(&pl.configs, &mine),
                Experiment::Large => large_lines(s, &pl.large_wnd, &mine),
            };
            let (x_desc, log_x) = match exp {
                Experiment::Batching => ("BSZ (KiB), WND = 1", true),
                Experiment::Pipelining => ("WND, BSZ = 1 KiB", true),
                Experiment::Both => ("WND", false),
                Experiment::Clients => ("clients (one request outstanding each)", true),
                Experiment::Large => ("request size (KiB), one request per instance", true),
            };
            let caption = format!(
                "MultiPaxos, {} ({} of Santos & Schiper): {}",
                s.name(),
                exp.figure(s),
                match exp {
                    Experiment::Both => format!("BSZ = {} KiB", pl.both_bsz_kib),
                    Experiment::Large => format!("{} clients", pl.large_clients),
                    _ => "measured vs model".to_string(),
                }
            );
            let y_desc = if exp == Experiment::Large {
                "requests ordered (MB/s)"
            } else {
                "requests/s"
            };
            line_chart(
                &a.out.join(png_name(s, exp)),
                &Chart {
                    caption: &caption,
                    x_desc,
                    y_desc,
                    log_x,
                    log_y: false,
                    legend_upper: true,
                },
                &lines,
                font,
            )?;
        }
    }
    Ok(())
}

/// Batching, pipelining, both: measured per client count, the model with full batches, Eq. 1
/// and (the cluster) the leader's CPU.
fn sweep_lines(
    s: Setting,
    exp: Experiment,
    clients: &[u32],
    mine: &[(&Point, &Measured)],
) -> Vec<Series> {
    let x: &Axis = match exp {
        Experiment::Batching => &|p, _| f64::from(p.bsz / KIB),
        _ => &|p, _| f64::from(p.wnd),
    };
    let mut v: Vec<Series> = clients
        .iter()
        .map(|&c| {
            let pts: Vec<_> = mine
                .iter()
                .copied()
                .filter(|(p, _)| p.clients == c)
                .collect();
            series(format!("measured, {c} clients"), &pts, x, &|_, m| {
                m.req_per_s
            })
        })
        .collect();
    let first: Vec<_> = mine
        .iter()
        .copied()
        .filter(|(p, _)| Some(&p.clients) == clients.first())
        .collect();
    v.push(series(
        "model: min(WND·b/τ_dec, Eq. 1), full batches".into(),
        &first,
        x,
        &|_, m| m.pred.full,
    ));
    v.push(series(
        "Eq. 1 (leader's link full)".into(),
        &first,
        x,
        &|_, m| m.pred.max,
    ));
    if s == Setting::Cluster {
        v.push(series("leader's CPU".into(), &first, x, &|_, m| m.pred.cpu));
    }
    v
}

fn clients_lines(configs: &[(u32, u32)], mine: &[(&Point, &Measured)]) -> Vec<Series> {
    let x: &Axis = &|p, _| f64::from(p.clients);
    let of = |b: u32, w: u32| -> Vec<(&Point, &Measured)> {
        mine.iter()
            .copied()
            .filter(|(p, _)| p.bsz == b * KIB && p.wnd == w)
            .collect()
    };
    let measured = configs.iter().map(|&(b, w)| {
        series(
            format!("measured, BSZ {b} KiB, WND {w}"),
            &of(b, w),
            x,
            &|_, m| m.req_per_s,
        )
    });
    let model = configs.iter().map(|&(b, w)| {
        series(
            format!("model, BSZ {b} KiB, WND {w}"),
            &of(b, w),
            x,
            &|_, m| m.pred.full,
        )
    });
    measured.chain(model).collect()
}

fn large_lines(s: Setting, wnds: &[u32], mine: &[(&Point, &Measured)]) -> Vec<Series> {
    let x: &Axis = &|p, _| f64::from(p.request / KIB);
    fn mb(p: &Point, r: f64) -> f64 {
        r * f64::from(p.request) / 1e6
    }
    let of = |w: u32| -> Vec<(&Point, &Measured)> {
        mine.iter().copied().filter(|(p, _)| p.wnd == w).collect()
    };
    let mut v: Vec<Series> = wnds
        .iter()
        .map(|&w| {
            series(format!("measured, WND {w}"), &of(w), x, &|p, m| {
                mb(p, m.req_per_s)
            })
        })
        .collect();
    v.extend(wnds.iter().map(|&w| {
        series(format!("model, WND {w}"), &of(w), x, &|p, m| {
            mb(p, m.pred.full)
        })
    }));
    let first = of(wnds[0]);
    v.push(series("Eq. 1".into(), &first, x, &|p, m| mb(p, m.pred.max)));
    if s == Setting::Cluster {
        v.push(series("leader's CPU".into(), &first, x, &|p, m| {
            mb(p, m.pred.cpu)
        }));
    }
    v
}
