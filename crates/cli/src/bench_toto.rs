//! `onepipe bench toto`: ToTo's §6 (Dolev, Kramer and Malki, FTCS 1993) on the simulator —
//! ToTo(8, φ) against all-ack on the same causal layer, and ToTo against 1Pipe, Lamport and
//! ISIS on one load.
//!
//! * **Figs. 5 and 6**: the distribution of the index of latency τ, periodic (Fig. 5) and
//!   Poisson (Fig. 6) sources, at 50, 100, 150 and 200 messages/s in the group.
//! * **Tables 2 and 3**: mean τ, mean ω, mean latency and ToTo's speedup over all-ack.
//! * **Tables 4 and 5**: the paper's Eq. 2 (periodic) and Eq. 1 (Poisson) fed with the
//!   measured joint distribution of (τ, ω), against the measured latency, and the deviation δ.
//! * φ from 4 to 7 at one load, and ToTo, all-ack, 1Pipe, Lamport and ISIS on one load.
//!
//! **τ and ω** are counted by each machine when it delivers a set
//! (`TotoEndpoint::latency_index`): τ is the number of machines it had heard from after a
//! pending message (`NTail_p`; §6: "the number of machines that p receives messages from,
//! before it can deliver m … concurrent to m, or follow m"), ω the number of candidates then
//! (§6: "the number of machines having a concurrent message in DAG_p"; "the size of the
//! candidate set").
//!
//! **The setting.** 8 machines, one process each, every message to every machine
//! ([`MSG_SIZE`] bytes; the paper does not give its size). Two networks:
//!
//! * **segment**: the paper's 10 Mb/s Ethernet approximated as one rack of 8 hosts whose links
//!   run at 10 Mb/s ([`SEGMENT_GBPS`]). The simulator's rack switch is an up and a down half
//!   joined by one link, so every packet crosses one 10 Mb/s link, as every frame crosses the
//!   one Ethernet medium. What differs: Ethernet carries a broadcast as one frame, here it is
//!   8 copies (one per machine, the sender's own included) in turn, so messages are small
//!   ([`MSG_SIZE`]); a switch queues where CSMA/CD collides and backs off; and the Sun-4s' and
//!   kernels' processing time (ms in 1993) is not modelled.
//! * **dc**: the simulator's data-centre rack (its default links), the same 8 hosts.
//!
//! The paper's machines send only what the application sends, so a message waits for the
//! next application messages of other machines: latency is a fraction of the send interval,
//! which is what Eq. 1–2 model. Here a silent machine would send a heartbeat after
//! `--toto-heartbeat` (docs/TOTO.md); the bench sets it to [`HEARTBEAT_NS`], longer than any
//! send gap at these rates, so heartbeats only drain the run's last messages. Periodic sources
//! send every `8 / rate` s with a random phase per machine (`WorkloadConfig::periodic`);
//! Poisson sources draw exponential gaps with that mean. Every run is checked; a violation or
//! an undrained run is an error naming the seed.

use crate::plot::{line_charts, Chart, Panel, Series};
use clap::Args;
use onepipe_baselines::Protocol;
use onepipe_sim::baseline::{run_baseline, BaseReport, BaselineConfig};
use onepipe_sim::{NetworkConfig, SimConfig, TopologySpec, WorkloadConfig, WorkloadKind};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Flags of `bench toto`.
#[derive(Args, Debug)]
pub struct TotoArgs {
    /// Directory for toto.csv, toto-tau.csv, toto-fig5.png and toto-fig6.png (created if
    /// missing).
    #[arg(long, default_value = "toto")]
    pub out: PathBuf,
    /// A small version (400 messages per point in place of the paper's 4,000) for the test
    /// suite.
    #[arg(long)]
    pub quick: bool,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulations run in parallel (each is deterministic; the results do not depend on it).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
}

/// Machines: the paper's 8 Sun-4s.
pub const HOSTS: u32 = 8;
/// The segment's link rate: the paper's 10 Mbit/s Ethernet.
pub const SEGMENT_GBPS: f64 = 0.01;
/// Message size, bytes (the paper does not give one): small enough that the 8 copies of each
/// message through the segment's one core link (module docs) load it at 200 messages/s about
/// as one 1-KB Ethernet broadcast frame per message would (~1.6 Mb/s of 10).
pub const MSG_SIZE: usize = 128;
/// The group's loads, messages/s in total (Tables 2–5).
pub const RATES: [u32; 4] = [50, 100, 150, 200];
/// The paper's φ for 8 machines (§6: "the optimal φ for this communication system is 4").
pub const PHI: u32 = 4;
/// The φ swept at one load (§4.2 allows `n/2 ≤ φ < n`).
pub const PHIS: [u32; 4] = [4, 5, 6, 7];
/// The load of the φ sweep and of the protocol comparison, messages/s in the group.
pub const SWEEP_RATE: u32 = 200;
/// Messages sent per point: the paper's "4000 agreed multicast messages".
pub const MESSAGES: u32 = 4_000;
/// Messages per point in `--quick`.
pub const MESSAGES_QUICK: u32 = 100;
/// The loads of `--quick`.
pub const RATES_QUICK: [u32; 2] = [50, 200];
/// A machine silent this long sends a heartbeat: 5 s, beyond every send gap at 50 messages/s
/// (160 ms on average; a Poisson gap of 5 s has probability e^-31), so heartbeats only drain
/// the end of a run, as the paper has none.
pub const HEARTBEAT_NS: u64 = 5_000_000_000;
/// The causal layer's retry interval (NACKs, resending an own message not shown delivered):
/// beyond the heartbeat, since here a message is shown delivered by the next application
/// message of each machine, up to seconds later. At the 200-µs default a machine would resend
/// every message ~800 times per 160-ms gap, more than a 10 Mb/s link carries. Nothing is lost
/// in this bench, so no NACK waits on it.
pub const RETRY_NS: u64 = 2 * HEARTBEAT_NS;
/// Longest a run drains after sending: the heartbeats after the last messages, and room.
pub const DRAIN_NS: u64 = 6 * HEARTBEAT_NS;
/// 1Pipe's and Lamport's runs in the comparison send for this long: their beacons and clock
/// exchanges tick every few microseconds, so a run of the paper's length is billions of events.
pub const COMPARE_DURATION_NS: u64 = 2_000_000_000;
/// The same in `--quick`.
pub const COMPARE_DURATION_NS_QUICK: u64 = 20_000_000;

/// The network of a point (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Net {
    /// The paper's 10 Mb/s segment, approximated.
    Segment,
    /// The simulator's data-centre rack.
    Dc,
}

/// The send process (§6: "periodic source", "Poisson source").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// Every `8 / rate` s.
    Periodic,
    /// Exponential gaps of mean `8 / rate` s.
    Poisson,
}

/// The protocol of a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// ToTo(8, φ).
    Toto(u32),
    /// All-ack.
    AllAck,
    /// 1Pipe (reliable service).
    OnePipe,
    /// A baseline of `crates/baselines` other than ToTo (Lamport, ISIS).
    Base(Protocol),
}

/// One simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    net: Net,
    source: Source,
    /// Messages/s in the group.
    rate: u32,
    proto: Proto,
}

impl Net {
    fn name(self) -> &'static str {
        match self {
            Net::Segment => "segment",
            Net::Dc => "dc",
        }
    }
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Periodic => "periodic",
            Source::Poisson => "poisson",
        }
    }
}

impl Proto {
    fn name(self) -> String {
        match self {
            Proto::Toto(phi) => format!("toto(phi={phi})"),
            Proto::AllAck => "allack".to_string(),
            Proto::OnePipe => "1pipe".to_string(),
            Proto::Base(p) => p.name().to_string(),
        }
    }
}

impl Job {
    fn describe(self) -> String {
        format!(
            "{} {} {} msgs/s {}",
            self.net.name(),
            self.source.name(),
            self.rate,
            self.proto.name()
        )
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct Outcome {
    sent: u64,
    delivered: u64,
    latency_mean_ns: f64,
    latency_p50_ns: u64,
    latency_p99_ns: u64,
    /// Deliveries per (τ, ω) at `τ · (n + 1) + ω` (ToTo and all-ack).
    index: Option<Vec<u64>>,
    /// Packets on links, retransmissions and heartbeats (baselines; 0 for 1Pipe).
    packets: u64,
    retransmits: u64,
    heartbeats: u64,
    events: u64,
}

/// Every point: Tables 2–5 on both networks, the φ sweep and the comparison.
fn jobs(a: &TotoArgs) -> Vec<Job> {
    let mut out = Vec::new();
    for net in [Net::Segment, Net::Dc] {
        for source in [Source::Periodic, Source::Poisson] {
            for &rate in rates(a) {
                for proto in [Proto::Toto(PHI), Proto::AllAck] {
                    out.push(Job {
                        net,
                        source,
                        rate,
                        proto,
                    });
                }
            }
        }
    }
    for phi in &PHIS[1..] {
        for source in [Source::Periodic, Source::Poisson] {
            out.push(Job {
                net: Net::Segment,
                source,
                rate: SWEEP_RATE,
                proto: Proto::Toto(*phi),
            });
        }
    }
    let others = [
        Proto::OnePipe,
        Proto::Base(Protocol::Lamport),
        Proto::Base(Protocol::Isis),
    ];
    for proto in others {
        out.push(Job {
            net: Net::Dc,
            source: Source::Poisson,
            rate: SWEEP_RATE,
            proto,
        });
    }
    out
}

/// The loads of Tables 2–5, full or `--quick`.
fn rates(a: &TotoArgs) -> &'static [u32] {
    match a.quick {
        true => &RATES_QUICK,
        false => &RATES,
    }
}

/// The simulation of `job` (module docs).
fn sim_config(a: &TotoArgs, job: Job) -> SimConfig {
    let messages = if a.quick { MESSAGES_QUICK } else { MESSAGES };
    let long = matches!(job.proto, Proto::OnePipe | Proto::Base(Protocol::Lamport));
    let duration_ns = match (long, a.quick) {
        (true, true) => COMPARE_DURATION_NS_QUICK,
        (true, false) => COMPARE_DURATION_NS,
        _ => u64::from(messages) * 1_000_000_000 / u64::from(job.rate),
    };
    let mut net = NetworkConfig {
        topology: TopologySpec::Rack { hosts: HOSTS },
        ..Default::default()
    };
    if job.net == Net::Segment {
        net.link_gbps = SEGMENT_GBPS;
    }
    SimConfig {
        seed: a.seed,
        check: true,
        net,
        workload: WorkloadConfig {
            workload: WorkloadKind::AllToAll,
            msg_size: MSG_SIZE,
            rate_per_proc: f64::from(job.rate) / f64::from(HOSTS),
            periodic: job.source == Source::Periodic,
            duration_ns,
            drain_ns: DRAIN_NS,
            ..Default::default()
        },
        ..SimConfig::default()
    }
}

/// Runs `job`, checked: a violation, an unchecked or undrained run is an error.
fn run_job(a: &TotoArgs, job: Job) -> Result<Outcome, String> {
    let mut cfg = sim_config(a, job);
    let fail = |e: String| format!("{}, seed {}: {e}", job.describe(), cfg.seed);
    let (checked, drained, violations, samples) = match job.proto {
        Proto::OnePipe => {
            cfg.workload.service = onepipe_sim::Service::Reliable;
            let r = onepipe_sim::run(&cfg, &mut |_| {}).map_err(|e| fail(e.to_string()))?;
            let o = Outcome {
                sent: r.sent,
                delivered: r.delivered,
                latency_mean_ns: r.latency_ns.mean,
                latency_p50_ns: r.latency_ns.p50,
                latency_p99_ns: r.latency_ns.p99,
                index: None,
                packets: 0,
                retransmits: 0,
                heartbeats: 0,
                events: r.events,
            };
            let s = format!("{:?}", r.violation_samples);
            check_run(r.checked, r.drained, r.violations, s).map_err(fail)?;
            return Ok(o);
        }
        _ => {
            let r = run_base(&cfg, job).map_err(fail)?;
            let s = format!("{:?}", r.violation_samples);
            (r.checked, r.drained, r.violations, (s, r))
        }
    };
    check_run(checked, drained, violations, samples.0).map_err(fail)?;
    let r = samples.1;
    let (mean, p50, p99) = sending_latency(&r, cfg.workload.duration_ns).map_err(fail)?;
    Ok(Outcome {
        sent: r.sent,
        delivered: r.delivered,
        latency_mean_ns: mean,
        latency_p50_ns: p50,
        latency_p99_ns: p99,
        index: r.toto_index,
        packets: r.packets,
        retransmits: r.retransmits,
        heartbeats: r.heartbeats,
        events: r.events,
    })
}

/// Mean, median and 99th percentile latency of the deliveries during the sending period, ns:
/// in the drain the last messages wait for machines that stopped sending (up to the
/// heartbeat), which the paper's sources, sending on, never do. τ and ω are counted over the
/// same deliveries (`BaseReport::toto_index`).
fn sending_latency(r: &BaseReport, duration_ns: u64) -> Result<(f64, u64, u64), String> {
    let log = r.deliveries.as_ref().ok_or("no delivery log")?;
    let mut lat: Vec<u64> = log
        .iter()
        .filter(|d| d.at_ns <= duration_ns)
        .filter_map(|d| d.latency_ns)
        .collect();
    if lat.is_empty() {
        return Err("nothing delivered during the sending period".to_string());
    }
    lat.sort_unstable();
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize];
    let mean = lat.iter().sum::<u64>() as f64 / lat.len() as f64;
    Ok((mean, at(0.5), at(0.99)))
}

/// A baseline run of `job` on `cfg`.
fn run_base(cfg: &SimConfig, job: Job) -> Result<BaseReport, String> {
    let mut base = match job.proto {
        Proto::Toto(phi) => {
            let mut b = BaselineConfig::new(Protocol::Toto);
            b.toto_phi = Some(phi);
            b
        }
        Proto::AllAck => BaselineConfig::new(Protocol::AllAck),
        Proto::Base(p) => BaselineConfig::new(p),
        Proto::OnePipe => unreachable!("1Pipe is not a baseline"),
    };
    base.toto_heartbeat_ns = HEARTBEAT_NS;
    base.toto_retry_ns = RETRY_NS;
    base.log_deliveries = true;
    run_baseline(cfg, &base, &mut |_| {}).map_err(|e| e.to_string())
}

/// A run's verdict: judged, drained, no violation.
fn check_run(checked: bool, drained: bool, violations: u64, samples: String) -> Result<(), String> {
    if violations > 0 {
        return Err(format!("{violations} violation(s): {samples}"));
    }
    if !checked {
        return Err("the checkers did not run".to_string());
    }
    if !drained {
        return Err(format!(
            "not drained after the {} s drain",
            DRAIN_NS / 1_000_000_000
        ));
    }
    Ok(())
}

/// Runs every job on `a.jobs` threads ([`crate::sweep::run_points`]), checked.
fn run_all(a: &TotoArgs, jobs: &[Job]) -> Result<Vec<Outcome>, String> {
    crate::sweep::run_points(
        "toto",
        jobs,
        a.jobs,
        |j| u64::from(j.rate),
        |j| j.describe(),
        |&j| run_job(a, j),
    )
    .into_iter()
    .collect()
}

/// §6's joint distribution of (τ, ω): the fraction of deliveries with each pair.
pub struct Joint {
    n: usize,
    p: Vec<f64>,
}

impl Joint {
    /// From the counts at `τ · (n + 1) + ω`; `None` when nothing was counted.
    pub fn new(n: usize, counts: &[u64]) -> Option<Joint> {
        assert_eq!(counts.len(), (n + 1) * (n + 1));
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let p = counts.iter().map(|&c| c as f64 / total as f64).collect();
        Some(Joint { n, p })
    }

    fn at(&self, tau: usize, omega: usize) -> f64 {
        self.p[tau * (self.n + 1) + omega]
    }

    /// P(τ = i).
    pub fn tau(&self, i: usize) -> f64 {
        (0..=self.n).map(|j| self.at(i, j)).sum()
    }

    /// E[τ].
    pub fn tau_mean(&self) -> f64 {
        (0..=self.n).map(|i| i as f64 * self.tau(i)).sum()
    }

    /// E[ω].
    pub fn omega_mean(&self) -> f64 {
        (0..=self.n)
            .flat_map(|i| (0..=self.n).map(move |j| (i, j)))
            .map(|(i, j)| j as f64 * self.at(i, j))
            .sum()
    }

    /// The terms `(i, j)` of Eq. 1–2: `i` from `n/2 + 1` to `n`, `j` from 1 to `i`.
    fn terms(&self) -> impl Iterator<Item = (usize, usize, f64)> + '_ {
        (self.n / 2 + 1..=self.n)
            .flat_map(move |i| (1..=i).map(move |j| (i, j)))
            .map(|(i, j)| (i, j, self.at(i, j)))
    }

    /// Eq. 2, a periodic source sending every `c`: `c Σ P(τ=i, ω=j) (i − j) / (n − j + 1)`.
    pub fn eq2_periodic(&self, c: f64) -> f64 {
        let n = self.n as f64;
        c * self
            .terms()
            .map(|(i, j, p)| p * (i - j) as f64 / (n - j as f64 + 1.0))
            .sum::<f64>()
    }

    /// Eq. 1, a Poisson source of mean gap `1/λ`:
    /// `(1/λ) Σ P(τ=i, ω=j) Σ_{k=j}^{i−1} 1 / (n − k)`.
    pub fn eq1_poisson(&self, mean_gap: f64) -> f64 {
        let n = self.n;
        mean_gap
            * self
                .terms()
                .map(|(i, j, p)| p * (j..i).map(|k| 1.0 / (n - k) as f64).sum::<f64>())
                .sum::<f64>()
    }
}

/// The paper's Tables 2–5, per source and load: (τ̄, ω̄, latency ms, speedup) for ToTo and
/// all-ack, and Table 4–5's (l_model, l_observed, δ).
pub static PAPER: [(Source, u32, [f64; 8], [f64; 6]); 8] = [
    (
        Source::Periodic,
        50,
        [5.10, 1.12, 76.68, 1.76, 8.0, 1.69, 135.02, 0.0],
        [75.67, 76.68, 0.013, 137.51, 135.02, 0.018],
    ),
    (
        Source::Periodic,
        100,
        [5.42, 1.39, 42.31, 1.63, 8.0, 1.31, 68.78, 0.0],
        [44.87, 42.31, 0.060, 69.35, 68.78, 0.008],
    ),
    (
        Source::Periodic,
        150,
        [5.36, 1.44, 29.17, 1.56, 8.0, 1.81, 45.59, 0.0],
        [29.29, 29.17, 0.004, 47.34, 45.59, 0.038],
    ),
    (
        Source::Periodic,
        200,
        [5.90, 1.72, 23.80, 1.84, 8.0, 1.48, 43.71, 0.0],
        [24.78, 23.80, 0.041, 35.96, 43.71, 0.177],
    ),
    (
        Source::Poisson,
        50,
        [5.11, 1.15, 114.10, 3.38, 8.0, 1.13, 385.25, 0.0],
        [122.34, 114.10, 0.072, 396.17, 385.25, 0.028],
    ),
    (
        Source::Poisson,
        100,
        [5.31, 1.29, 60.98, 3.08, 8.0, 1.27, 188.06, 0.0],
        [66.64, 60.98, 0.093, 194.58, 188.06, 0.035],
    ),
    (
        Source::Poisson,
        150,
        [5.54, 1.42, 44.10, 3.01, 8.0, 1.42, 133.09, 0.0],
        [52.34, 44.10, 0.187, 137.79, 133.09, 0.035],
    ),
    (
        Source::Poisson,
        200,
        [5.89, 1.63, 39.37, 2.60, 8.0, 1.58, 102.33, 0.0],
        [46.12, 39.37, 0.171, 111.45, 102.33, 0.089],
    ),
];

/// A point and its outcome.
struct Row<'a> {
    job: Job,
    o: &'a Outcome,
}

impl Row<'_> {
    fn joint(&self) -> Option<Joint> {
        self.o
            .index
            .as_ref()
            .and_then(|c| Joint::new(HOSTS as usize, c))
    }

    /// The mean gap between one machine's sends, ms: the paper's `c` and `1/λ`.
    fn gap_ms(&self) -> f64 {
        1e3 * f64::from(HOSTS) / f64::from(self.job.rate)
    }

    /// Eq. 2 (periodic) or Eq. 1 (Poisson) on this run's (τ, ω), ms.
    fn model_ms(&self) -> Option<f64> {
        let j = self.joint()?;
        Some(match self.job.source {
            Source::Periodic => j.eq2_periodic(self.gap_ms()),
            Source::Poisson => j.eq1_poisson(self.gap_ms()),
        })
    }

    fn latency_ms(&self) -> f64 {
        self.o.latency_mean_ns / 1e6
    }
}

/// `bench toto`: every point, toto.csv and toto-tau.csv, the tables, Figs. 5 and 6.
pub fn toto(a: &TotoArgs) -> Result<(), String> {
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("--out: cannot create {}: {e}", a.out.display()))?;
    let jobs = jobs(a);
    let started = std::time::Instant::now();
    let outcomes = run_all(a, &jobs)?;
    let rows: Vec<Row> = jobs
        .iter()
        .zip(&outcomes)
        .map(|(&job, o)| Row { job, o })
        .collect();
    write_csv(a, &rows)?;
    write_tau_csv(a, &rows)?;
    print_tables(a, &rows);
    println!(
        "# {} simulations, {:.1} M events, {:.0} s wall on {} thread(s)",
        rows.len(),
        outcomes.iter().map(|o| o.events).sum::<u64>() as f64 / 1e6,
        started.elapsed().as_secs_f64(),
        a.jobs.max(1)
    );
    match crate::plot::load_font() {
        Some(font) => {
            for (source, fig) in [(Source::Periodic, 5), (Source::Poisson, 6)] {
                let path = a.out.join(format!("toto-fig{fig}.png"));
                plot_tau(&path, &rows, (source, rates(a)), fig, font)?;
            }
            println!("# wrote toto.csv, toto-tau.csv, toto-fig5.png, toto-fig6.png");
        }
        None => eprintln!(
            "onepipe bench toto: no TrueType font found (install fonts-dejavu-core or set \
             ONEPIPE_FONT to a .ttf file): plots skipped, the CSVs written"
        ),
    }
    Ok(())
}

/// The setting, as comment lines of the CSVs and the tables.
fn setting(a: &TotoArgs) -> Vec<String> {
    vec![
        format!(
            "# ToTo section 6 (onepipe bench toto{}, seed {}): {HOSTS} machines on one rack, 1 \
             process each, every message ({MSG_SIZE} B) to all; {} messages per point \
             (1Pipe and Lamport: {} s of sending)",
            if a.quick { " --quick" } else { "" },
            a.seed,
            if a.quick { MESSAGES_QUICK } else { MESSAGES },
            if a.quick { COMPARE_DURATION_NS_QUICK } else { COMPARE_DURATION_NS } as f64 / 1e9
        ),
        format!(
            "# segment: every link {} Mb/s, the rack's core link the shared medium (a broadcast is \
             8 copies); dc: the simulator's default links; toto heartbeat {} s (the paper has none); periodic: one send per \
             8/rate s per machine, random phase; poisson: exponential gaps of that mean",
            SEGMENT_GBPS * 1e3,
            HEARTBEAT_NS / 1_000_000_000
        ),
        "# tau: machines heard from after a pending message when a set is delivered (NTail_p); \
         omega: candidates then; model: Eq. 2 (periodic) or Eq. 1 (poisson) on the measured \
         joint (tau, omega); delta = |model - observed| / observed"
            .to_string(),
    ]
}

fn create(a: &TotoArgs, name: &str) -> Result<std::fs::File, String> {
    let path = a.out.join(name);
    std::fs::File::create(&path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))
}

/// toto.csv: a line per run.
fn write_csv(a: &TotoArgs, rows: &[Row]) -> Result<(), String> {
    let mut f = create(a, "toto.csv")?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    for line in setting(a) {
        w(line)?;
    }
    w("network,source,rate_msgs_per_s,protocol,sent,delivered,latency_mean_ms,latency_p50_ms,latency_p99_ms,tau_mean,omega_mean,model_ms,delta,speedup,packets,retransmits,heartbeats".into())?;
    for r in rows {
        let j = r.joint();
        let opt = |v: Option<f64>, d: usize| v.map(|x| format!("{x:.d$}")).unwrap_or_default();
        let model = r.model_ms();
        let delta = model.map(|m| (m - r.latency_ms()).abs() / r.latency_ms());
        w(format!(
            "{},{},{},{},{},{},{:.3},{:.3},{:.3},{},{},{},{},{},{},{},{}",
            r.job.net.name(),
            r.job.source.name(),
            r.job.rate,
            r.job.proto.name(),
            r.o.sent,
            r.o.delivered,
            r.latency_ms(),
            r.o.latency_p50_ns as f64 / 1e6,
            r.o.latency_p99_ns as f64 / 1e6,
            opt(j.as_ref().map(Joint::tau_mean), 3),
            opt(j.as_ref().map(Joint::omega_mean), 3),
            opt(model, 3),
            opt(delta, 3),
            opt(speedup(rows, r), 2),
            r.o.packets,
            r.o.retransmits,
            r.o.heartbeats,
        ))?;
    }
    Ok(())
}

/// toto-tau.csv: P(τ) per ToTo and all-ack run (Figs. 5 and 6).
fn write_tau_csv(a: &TotoArgs, rows: &[Row]) -> Result<(), String> {
    let mut f = create(a, "toto-tau.csv")?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    for line in setting(a) {
        w(line)?;
    }
    w("network,source,rate_msgs_per_s,protocol,tau,probability".into())?;
    for r in rows {
        let Some(j) = r.joint() else { continue };
        for tau in 1..=HOSTS as usize {
            w(format!(
                "{},{},{},{},{tau},{:.4}",
                r.job.net.name(),
                r.job.source.name(),
                r.job.rate,
                r.job.proto.name(),
                j.tau(tau)
            ))?;
        }
    }
    Ok(())
}

/// All-ack's run beside ToTo's `r` (same network, source and load).
fn allack_of<'a>(rows: &'a [Row<'a>], r: &Row) -> Option<&'a Row<'a>> {
    rows.iter().find(|x| {
        x.job.proto == Proto::AllAck
            && (x.job.net, x.job.source, x.job.rate) == (r.job.net, r.job.source, r.job.rate)
    })
}

/// ToTo's speedup over all-ack: all-ack's mean latency over ToTo's.
fn speedup(rows: &[Row], r: &Row) -> Option<f64> {
    match r.job.proto {
        Proto::Toto(_) => allack_of(rows, r).map(|x| x.latency_ms() / r.latency_ms()),
        _ => None,
    }
}

/// The paper's row of Tables 2–5 for a source and load.
fn paper(source: Source, rate: u32) -> Option<(&'static [f64; 8], &'static [f64; 6])> {
    PAPER
        .iter()
        .find(|p| p.0 == source && p.1 == rate)
        .map(|p| (&p.2, &p.3))
}

/// Tables 2–5 and the comparison, as markdown.
fn print_tables(a: &TotoArgs, rows: &[Row]) {
    for line in setting(a) {
        println!("{line}");
    }
    println!("| network | source | msgs/s | protocol | τ̄ (paper) | ω̄ (paper) | latency ms (paper) | speedup (paper) | Eq. 1–2 model ms | δ (paper) |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        let Some(j) = r.joint() else { continue };
        let toto = matches!(r.job.proto, Proto::Toto(_));
        let p = paper(r.job.source, r.job.rate)
            .filter(|_| r.job.proto == Proto::Toto(PHI) || r.job.proto == Proto::AllAck);
        let col = |ours: String, k: Option<usize>, tab: u8| match (p, k) {
            (Some(p), Some(k)) => format!("{ours} ({})", if tab == 0 { p.0[k] } else { p.1[k] }),
            _ => ours,
        };
        let off = if toto { 0 } else { 4 };
        let model = r.model_ms().unwrap_or(f64::NAN);
        let delta = (model - r.latency_ms()).abs() / r.latency_ms();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {} |",
            r.job.net.name(),
            r.job.source.name(),
            r.job.rate,
            r.job.proto.name(),
            col(format!("{:.2}", j.tau_mean()), Some(off), 0),
            col(format!("{:.2}", j.omega_mean()), Some(off + 1), 0),
            col(format!("{:.2}", r.latency_ms()), Some(off + 2), 0),
            col(
                speedup(rows, r)
                    .map(|s| format!("{s:.2}"))
                    .unwrap_or_default(),
                toto.then_some(3),
                0
            ),
            model,
            col(format!("{delta:.3}"), Some(if toto { 2 } else { 5 }), 1),
        );
    }
    println!("| protocol (dc, poisson, {SWEEP_RATE} msgs/s) | latency mean ms | p50 ms | p99 ms | delivered |");
    println!("| --- | --- | --- | --- | --- |");
    for r in rows
        .iter()
        .filter(|r| (r.job.net, r.job.source, r.job.rate) == (Net::Dc, Source::Poisson, SWEEP_RATE))
    {
        println!(
            "| {} | {:.3} | {:.3} | {:.3} | {} |",
            r.job.proto.name(),
            r.latency_ms(),
            r.o.latency_p50_ns as f64 / 1e6,
            r.o.latency_p99_ns as f64 / 1e6,
            r.o.delivered
        );
    }
}

/// Fig. 5 (periodic) or 6 (Poisson): P(τ) of ToTo(8, 4) per load, a panel each, a line per
/// network.
fn plot_tau(
    path: &Path,
    rows: &[Row],
    (source, rates): (Source, &[u32]),
    fig: u32,
    font: &'static str,
) -> Result<(), String> {
    let captions: Vec<String> = rates
        .iter()
        .map(|r| {
            format!(
                "Fig. {fig}: index of latency, {} source, {r} msgs/s",
                source.name()
            )
        })
        .collect();
    let charts: Vec<Chart> = captions
        .iter()
        .map(|c| Chart {
            caption: c,
            x_desc: "index of latency τ",
            y_desc: "probability",
            log_x: false,
            log_y: false,
            legend_upper: true,
        })
        .collect();
    let series: Vec<Vec<Series>> = rates
        .iter()
        .map(|&rate| {
            rows.iter()
                .filter(|r| r.job.source == source && r.job.rate == rate)
                .filter(|r| r.job.proto == Proto::Toto(PHI))
                .filter_map(|r| {
                    let j = r.joint()?;
                    Some(Series {
                        name: format!("{} (mean {:.2})", r.job.net.name(), j.tau_mean()),
                        points: (4..=HOSTS as usize).map(|t| (t as f64, j.tau(t))).collect(),
                    })
                })
                .collect()
        })
        .collect();
    let panels: Vec<Panel> = charts
        .iter()
        .zip(&series)
        .map(|(chart, s)| Panel {
            chart,
            series: s,
            legend_right: false,
        })
        .collect();
    line_charts(path, &panels, 2, font)
}
