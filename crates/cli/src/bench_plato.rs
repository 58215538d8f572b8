//! `onepipe bench plato`: PLATO's Figs. 8 and 10 (Balakrishnan, Birman and Phanishayee, §5) on
//! the simulator — optimistic delivery (`--protocol plato`) against the fixed sequencer with the
//! same trade-off parameter k (`--protocol plato-fixed`, one sequencing packet per k messages).
//!
//! * **Fig. 8**: latency (median and mean) and the fraction of rollbacks against Δ, 0 … 200 µs,
//!   at 400 and 1,600 packets/s in the group, for k = 10 and 20; the fixed sequencer is a
//!   horizontal line (it has no Δ).
//! * **Fig. 10**: the same against the group's rate, 400 … 4,000 packets/s, at Δ = 160 µs.
//! * **Fig. 3** (swaps and losses against the rate, receiver overload on) is
//!   [`crate::bench_plato_fig3`]'s; **Figs. 9 and 11** (a load step, Δ fixed and adaptive) are
//!   [`crate::bench_plato_spike`]'s. `--figs` picks the figures; all five by default.
//!
//! **The setting** is the paper's "Emulab 3-switch" (§3.1, §5): two sender-receiver pairs three
//! switches apart, ~100 µs one-way. Here: 4 hosts on a leaf-spine (2 per leaf, 1 spine: host →
//! leaf → spine → leaf → host), one process per host, every process broadcasting to all (the
//! paper's senders are its receivers), the group's rate split evenly (Poisson). What differs from
//! the simulator's defaults, and why:
//!
//! * every link 25 µs ([`LINK_DELAY_NS`]): 4 links between racks make the 100-µs one-way delay,
//!   fitted to the paper's measured ping (Fig. 2 gives ~100–110 µs); 50 µs within a rack;
//! * 1 KB messages ([`MSG_SIZE`]): the paper counts "1k packets";
//! * a partial sequencing batch waits 1 s ([`FLUSH_NS`]): the paper has no flush, its
//!   sequencer waits for k messages; the drain ([`DRAIN_NS`]) outlasts it;
//! * Δ fixed (`plato_adaptive = false`, §5 before Fig. 11); "Δ = 0" is 1 ns (Δ must be positive).
//!
//! The last partial batch of a run waits for the flush, not for k messages: up to k − 1
//! messages delivered ~1 s late raise the mean a little (a few % of the fixed sequencer's at
//! 400 packets/s, k = 20); the median does not see them.
//!
//! Links run at 100 Gbit/s and nothing is lost, so disorder here comes only from the paths'
//! lengths (a process's own message arrives at once, its rack-mate's after 50 µs, the others'
//! after 100 µs): the paper's swaps, not its receive-buffer losses. Latency is send → usable for
//! PLATO (the earlier of Tm = arrival + Δ and the confirm) and send → delivery for the fixed
//! sequencer; a rollback is a revoke at or after Tm, over confirmed deliveries. Every run is
//! checked; a violation or an undrained run is an error naming the seed.

use crate::plot::{line_charts, Chart, Panel, Series};
use clap::Args;
use onepipe_baselines::Protocol;
use onepipe_sim::baseline::{run_baseline, BaseReport, BaselineConfig};
use onepipe_sim::metrics::Summary;
use onepipe_sim::{NetworkConfig, SimConfig, TopologySpec, WorkloadConfig, WorkloadKind};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Flags of `bench plato`.
#[derive(Args, Debug)]
pub struct PlatoArgs {
    /// Directory for plato.csv (Figs. 8 and 10), plato-fig3.csv, plato-fig9.csv,
    /// plato-fig11.csv and a PNG per figure (created if missing).
    #[arg(long, default_value = "plato")]
    pub out: PathBuf,
    /// The figures to run, of 3, 8, 9, 10 and 11.
    #[arg(long, value_delimiter = ',', default_value = "3,8,9,10,11")]
    pub figs: Vec<u32>,
    /// A small version of each figure (fewer points, 0.5 s of sending per point; Figs. 9 and
    /// 11 on a 4-s timeline) that runs in the test suite.
    #[arg(long)]
    pub quick: bool,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulations run in parallel (each is deterministic; the results do not depend on it).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
}

/// Hosts: two sender-receiver pairs, one process each (§3.1).
pub const HOSTS: u32 = 4;
/// Every link's delay: host → leaf → spine → leaf → host is 4 links, 100 µs, fitted to the
/// paper's one-way ping (Fig. 2).
pub const LINK_DELAY_NS: u64 = 25_000;
/// Message size: the paper's "1k packets" (Fig. 10's x axis).
pub const MSG_SIZE: usize = 1024;
/// A partial sequencing batch leaves this long after its first place: longer than any wait
/// for k messages here, so a batch waits for k messages, as in the paper (which has no flush).
pub const FLUSH_NS: u64 = 1_000_000_000;
/// Longest a run drains after sending: the last partial batch leaves after [`FLUSH_NS`].
pub const DRAIN_NS: u64 = 3 * FLUSH_NS;
/// Sending time of a full run: 96,000 deliveries per point at 400 packets/s (4 receivers), long
/// beside the last sequencing batch, which waits for the 1-s flush (module docs).
pub const DURATION_NS: u64 = 60_000_000_000;
/// Sending time of `--quick`.
pub const DURATION_NS_QUICK: u64 = 500_000_000;
/// The trade-off parameter k of both figures (§4).
pub const KS: [usize; 2] = [10, 20];
/// Fig. 8's rates, packets per second in the group.
pub const FIG8_RATES: [u32; 2] = [400, 1_600];
/// Fig. 8's Δ, ns ("0" is 1 ns).
pub const FIG8_DELTAS_NS: [u64; 11] = [
    1, 20_000, 40_000, 60_000, 80_000, 100_000, 120_000, 140_000, 160_000, 180_000, 200_000,
];
/// Fig. 8's Δ in `--quick`, ns.
pub const FIG8_DELTAS_NS_QUICK: [u64; 3] = [1, 80_000, 160_000];
/// Fig. 10's Δ, ns.
pub const FIG10_DELTA_NS: u64 = 160_000;
/// Fig. 10's rates, packets per second in the group.
pub const FIG10_RATES: [u32; 10] = [
    400, 800, 1_200, 1_600, 2_000, 2_400, 2_800, 3_200, 3_600, 4_000,
];
/// Fig. 10's rates in `--quick`.
pub const FIG10_RATES_QUICK: [u32; 3] = [400, 2_000, 4_000];

/// One simulation: PLATO (with its Δ) or the fixed sequencer, with k, at a rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Job {
    /// Rate in the group, packets per second.
    rate: u32,
    /// The trade-off parameter.
    k: usize,
    /// PLATO's Δ, ns; `None`: the fixed sequencer.
    delta_ns: Option<u64>,
}

impl Job {
    fn protocol(self) -> Protocol {
        match self.delta_ns {
            Some(_) => Protocol::Plato,
            None => Protocol::PlatoFixed,
        }
    }

    /// The job, in words, for errors and progress.
    fn describe(self) -> String {
        match self.delta_ns {
            Some(d) => format!("plato k={} {} pkt/s Δ={d} ns", self.k, self.rate),
            None => format!("plato-fixed k={} {} pkt/s", self.k, self.rate),
        }
    }
}

/// Which figure a row of plato.csv belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Figure {
    Fig8,
    Fig10,
}

impl Figure {
    fn name(self) -> &'static str {
        match self {
            Figure::Fig8 => "fig8",
            Figure::Fig10 => "fig10",
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
struct Outcome {
    /// Send → usable (PLATO) or send → delivery (fixed sequencer).
    latency: Summary,
    /// Send → confirm (PLATO) or send → delivery (fixed sequencer).
    confirm: Summary,
    sent: u64,
    delivered: u64,
    rollbacks: u64,
    rollback_fraction: f64,
    revokes_early: u64,
    events: u64,
    wall_s: f64,
}

/// Fig. 8's Δ axis and Fig. 10's rate axis, full or `--quick`.
pub(crate) fn axes(a: &PlatoArgs) -> (&'static [u64], &'static [u32]) {
    match a.quick {
        true => (&FIG8_DELTAS_NS_QUICK, &FIG10_RATES_QUICK),
        false => (&FIG8_DELTAS_NS, &FIG10_RATES),
    }
}

/// The points of each figure, in plotting order.
fn figure_jobs(a: &PlatoArgs) -> Vec<(Figure, Job)> {
    let (deltas, rates10) = axes(a);
    let mut out = Vec::new();
    let rates8: &[u32] = if a.figs.contains(&8) {
        &FIG8_RATES
    } else {
        &[]
    };
    let rates10 = if a.figs.contains(&10) { rates10 } else { &[] };
    for &rate in rates8 {
        for k in KS {
            for &d in deltas {
                let job = Job {
                    rate,
                    k,
                    delta_ns: Some(d),
                };
                out.push((Figure::Fig8, job));
            }
            let fixed = Job {
                rate,
                k,
                delta_ns: None,
            };
            out.push((Figure::Fig8, fixed));
        }
    }
    for k in KS {
        for &rate in rates10 {
            for delta_ns in [Some(FIG10_DELTA_NS), None] {
                out.push((Figure::Fig10, Job { rate, k, delta_ns }));
            }
        }
    }
    out
}

/// The simulation of `job` (module docs).
fn config(a: &PlatoArgs, job: Job) -> (SimConfig, BaselineConfig) {
    let duration_ns = if a.quick {
        DURATION_NS_QUICK
    } else {
        DURATION_NS
    };
    let cfg = setting_config(a.seed, job.rate, duration_ns);
    (cfg, plato_config(job.k, job.delta_ns))
}

/// The setting of every figure (module docs): `rate` packets/s in the group, split evenly,
/// for `duration_ns`.
pub(crate) fn setting_config(seed: u64, rate: u32, duration_ns: u64) -> SimConfig {
    SimConfig {
        seed,
        check: true,
        net: NetworkConfig {
            topology: TopologySpec::LeafSpine {
                hosts: HOSTS,
                rack_size: 2,
                spines: 1,
            },
            link_delay_ns: LINK_DELAY_NS,
            ..Default::default()
        },
        workload: WorkloadConfig {
            workload: WorkloadKind::AllToAll,
            msg_size: MSG_SIZE,
            // The group's rate split evenly: each send is one broadcast packet of the paper's.
            rate_per_proc: f64::from(rate) / f64::from(HOSTS),
            duration_ns,
            drain_ns: DRAIN_NS,
            ..Default::default()
        },
        ..SimConfig::default()
    }
}

/// PLATO with k and a fixed Δ (`Some`), or the fixed sequencer with k (`None`), with the
/// figures' flush.
pub(crate) fn plato_config(k: usize, delta_ns: Option<u64>) -> BaselineConfig {
    let protocol = match delta_ns {
        Some(_) => Protocol::Plato,
        None => Protocol::PlatoFixed,
    };
    let mut base = BaselineConfig::new(protocol);
    base.plato_k = k;
    base.plato_flush_ns = FLUSH_NS;
    base.plato_adaptive = false;
    if let Some(d) = delta_ns {
        base.plato_delta_ns = d;
    }
    base
}

/// Runs `base` on `cfg`; a violation, a run the checkers did not judge or an undrained run is
/// an error naming `what` and the seed.
pub(crate) fn run_checked(
    cfg: &SimConfig,
    base: &BaselineConfig,
    what: &str,
) -> Result<BaseReport, String> {
    let fail = |e: String| format!("{what}, seed {}: {e}", cfg.seed);
    let r: BaseReport = run_baseline(cfg, base, &mut |_| {}).map_err(|e| fail(e.to_string()))?;
    if r.violations > 0 {
        return Err(fail(format!(
            "{} violation(s): {:?}",
            r.violations, r.violation_samples
        )));
    }
    if !r.checked {
        return Err(fail("the checkers did not run".to_string()));
    }
    if !r.drained {
        return Err(fail(format!(
            "not drained: {} message(s) undelivered after the {} s drain",
            r.undrained,
            DRAIN_NS / 1_000_000_000
        )));
    }
    Ok(r)
}

/// Runs `job` (checked, [`run_checked`]).
fn run_job(a: &PlatoArgs, job: Job) -> Result<Outcome, String> {
    let (cfg, base) = config(a, job);
    let fail = |e: String| format!("{}, seed {}: {e}", job.describe(), cfg.seed);
    let r = run_checked(&cfg, &base, &job.describe())?;
    let (latency, rollbacks, rollback_fraction, revokes_early) = match (&r.optimistic, job.delta_ns)
    {
        (Some(o), Some(_)) => (
            o.latency_ns,
            o.rollbacks,
            o.rollback_fraction,
            o.revokes_early,
        ),
        (None, None) => (r.latency_ns, 0, 0.0, 0),
        _ => return Err(fail("optimistic report missing or unexpected".to_string())),
    };
    Ok(Outcome {
        latency,
        confirm: r.latency_ns,
        sent: r.sent,
        delivered: r.delivered,
        rollbacks,
        rollback_fraction,
        revokes_early,
        events: r.events,
        wall_s: r.wall_s,
    })
}

/// Runs every job on `a.jobs` threads, the highest rates (the most events) first, with a
/// progress bar ([`crate::sweep::run_points`]), checked.
fn run_all(a: &PlatoArgs, jobs: &[Job]) -> Result<Vec<Outcome>, String> {
    crate::sweep::run_points(
        "plato",
        jobs,
        a.jobs,
        |j| u64::from(j.rate),
        |j| j.describe(),
        |&j| run_job(a, j),
    )
    .into_iter()
    .collect()
}

/// One row of plato.csv: a point of a figure and what its run measured.
struct Row<'a> {
    figure: Figure,
    job: Job,
    o: &'a Outcome,
}

/// The figures `bench plato` draws.
pub const FIGS: [u32; 5] = [3, 8, 9, 10, 11];

/// `bench plato`: the figures `--figs` names, each to its CSV and PNG.
pub fn plato(a: &PlatoArgs) -> Result<(), String> {
    if let Some(f) = a.figs.iter().find(|f| !FIGS.contains(f)) {
        return Err(format!("--figs: no Fig. {f}; take some of 3, 8, 9, 10, 11"));
    }
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("--out: cannot create {}: {e}", a.out.display()))?;
    if a.figs.contains(&8) || a.figs.contains(&10) {
        figs_8_10(a)?;
        crate::bench_plato_1pipe::onepipe(a)?;
    }
    if a.figs.contains(&3) {
        crate::bench_plato_fig3::fig3(a)?;
    }
    if a.figs.contains(&9) || a.figs.contains(&11) {
        crate::bench_plato_spike::spike(a)?;
    }
    Ok(())
}

/// Figs. 8 and 10 (those of them `--figs` names): plato.csv and a PNG each.
fn figs_8_10(a: &PlatoArgs) -> Result<(), String> {
    let points = figure_jobs(a);
    // A point of both figures (Δ = 160 µs at 400 and 1,600 packets/s) runs once.
    let mut jobs: Vec<Job> = points.iter().map(|&(_, j)| j).collect();
    jobs.sort_unstable();
    jobs.dedup();
    let started = std::time::Instant::now();
    let outcomes = run_all(a, &jobs)?;
    let rows: Vec<Row> = points
        .iter()
        .map(|&(figure, job)| {
            let i = jobs.binary_search(&job).expect("every point has a job");
            Row {
                figure,
                job,
                o: &outcomes[i],
            }
        })
        .collect();
    write_csv(a, &a.out.join("plato.csv"), &rows)?;
    let drawn = |f: Figure| rows.iter().any(|r| r.figure == f);
    print_table(a, &rows);
    println!(
        "# {} simulations, {:.1} M events, {:.0} s of simulation on {} thread(s), {:.0} s wall",
        jobs.len(),
        outcomes.iter().map(|o| o.events).sum::<u64>() as f64 / 1e6,
        outcomes.iter().map(|o| o.wall_s).sum::<f64>(),
        a.jobs.max(1),
        started.elapsed().as_secs_f64()
    );
    match crate::plot::load_font() {
        Some(font) => {
            if drawn(Figure::Fig8) {
                plot_fig8(&a.out.join("plato-fig8.png"), &rows, font)?;
            }
            if drawn(Figure::Fig10) {
                plot_fig10(&a.out.join("plato-fig10.png"), &rows, font)?;
            }
            println!(
                "# wrote {} and its figures' PNGs",
                a.out.join("plato.csv").display()
            );
        }
        None => eprintln!(
            "onepipe bench plato: no TrueType font found (install fonts-dejavu-core or set \
             ONEPIPE_FONT to a .ttf file): plots skipped, plato.csv written"
        ),
    }
    Ok(())
}

/// The setting, as comment lines of the CSV and the table.
fn setting(a: &PlatoArgs) -> Vec<String> {
    vec![
        format!(
            "# PLATO Figs. 8 and 10 (onepipe bench plato{}, seed {}): {HOSTS} hosts on a \
             leaf-spine (2 per leaf, 1 spine), 1 process each, all-to-all broadcast of {MSG_SIZE} B \
             messages, Poisson, the group's rate split evenly; {} s of sending per point",
            if a.quick { " --quick" } else { "" },
            a.seed,
            if a.quick { DURATION_NS_QUICK } else { DURATION_NS } as f64 / 1e9
        ),
        format!(
            "# link delay {} us: host -> leaf -> spine -> leaf -> host is {} us one-way, fitted to \
             the paper's 100-us one-way ping ({} us within a rack); other network defaults",
            LINK_DELAY_NS / 1_000,
            4 * LINK_DELAY_NS / 1_000,
            2 * LINK_DELAY_NS / 1_000
        ),
        format!(
            "# sequencing flush {} s (the paper has none: a batch waits for k messages); Delta \
             fixed (not adaptive), 1 ns for 0; latency: PLATO send -> usable (earlier of Tm and \
             confirm), plato-fixed send -> delivery; rollback_fraction: revokes at or after Tm \
             over confirmed deliveries",
            FLUSH_NS / 1_000_000_000
        ),
    ]
}

fn write_csv(a: &PlatoArgs, path: &Path, rows: &[Row]) -> Result<(), String> {
    let mut f = std::fs::File::create(path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    for line in setting(a) {
        w(line)?;
    }
    w("figure,protocol,k,rate_pkts_per_s,delta_ns,sent,delivered,latency_p50_ns,latency_mean_ns,latency_p99_ns,confirm_latency_p50_ns,confirm_latency_mean_ns,rollbacks,rollback_fraction,revokes_early".into())?;
    for r in rows {
        let delta = r.job.delta_ns.map(|d| d.to_string()).unwrap_or_default();
        w(format!(
            "{},{},{},{},{delta},{},{},{},{:.0},{},{},{:.0},{},{:.6},{}",
            r.figure.name(),
            r.job.protocol().name(),
            r.job.k,
            r.job.rate,
            r.o.sent,
            r.o.delivered,
            r.o.latency.p50,
            r.o.latency.mean,
            r.o.latency.p99,
            r.o.confirm.p50,
            r.o.confirm.mean,
            r.o.rollbacks,
            r.o.rollback_fraction,
            r.o.revokes_early
        ))?;
    }
    Ok(())
}

fn us(ns: f64) -> String {
    format!("{:.0}", ns / 1e3)
}

/// The fixed sequencer's outcome at the rate and k of `job`, among `rows`.
fn fixed_of<'a>(rows: &'a [Row], job: Job) -> Option<&'a Outcome> {
    rows.iter()
        .find(|r| r.job.delta_ns.is_none() && r.job.k == job.k && r.job.rate == job.rate)
        .map(|r| r.o)
}

/// A markdown table: each PLATO point beside the fixed sequencer with the same k and rate.
fn print_table(a: &PlatoArgs, rows: &[Row]) {
    for line in setting(a) {
        println!("{line}");
    }
    println!(
        "| figure | k | packets/s | Δ (µs) | PLATO p50 / mean (µs) | rollbacks | fixed sequencer p50 / mean (µs) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        let Some(d) = r.job.delta_ns else { continue };
        let fixed = fixed_of(rows, r.job)
            .map(|f| format!("{} / {}", us(f.latency.p50 as f64), us(f.latency.mean)))
            .unwrap_or_default();
        println!(
            "| {} | {} | {} | {} | {} / {} | {:.2}% | {fixed} |",
            r.figure.name(),
            r.job.k,
            r.job.rate,
            us(d as f64),
            us(r.o.latency.p50 as f64),
            us(r.o.latency.mean),
            100.0 * r.o.rollback_fraction,
        );
    }
}

/// The series of one figure's latency and rollback panels at one rate (Fig. 8) or over all
/// rates (Fig. 10): x is Δ in µs (Fig. 8) or the rate (Fig. 10).
fn series(rows: &[Row], figure: Figure, rate: Option<u32>) -> (Vec<Series>, Vec<Series>) {
    let mine = |r: &&Row| r.figure == figure && rate.is_none_or(|x| r.job.rate == x);
    let x = |r: &Row| match figure {
        Figure::Fig8 => r.job.delta_ns.unwrap_or(0) as f64 / 1e3,
        Figure::Fig10 => f64::from(r.job.rate) / 1e3,
    };
    let (mut lat, mut rb) = (Vec::new(), Vec::new());
    for k in KS {
        let plato: Vec<&Row> = rows
            .iter()
            .filter(mine)
            .filter(|r| r.job.k == k && r.job.delta_ns.is_some())
            .collect();
        let pts = |f: &dyn Fn(&Row) -> f64| plato.iter().map(|r| (x(r), f(r))).collect();
        lat.push(Series {
            name: format!("PLATO median (k = {k})"),
            points: pts(&|r| r.o.latency.p50 as f64 / 1e3),
        });
        lat.push(Series {
            name: format!("PLATO mean (k = {k})"),
            points: pts(&|r| r.o.latency.mean / 1e3),
        });
        rb.push(Series {
            name: format!("rollbacks (k = {k})"),
            points: pts(&|r| 100.0 * r.o.rollback_fraction),
        });
        let fixed = |f: &dyn Fn(&Outcome) -> f64| -> Vec<(f64, f64)> {
            match figure {
                // A horizontal line across the Δ axis.
                Figure::Fig8 => fixed_of(rows, plato[0].job)
                    .map(|o| vec![(x(plato[0]), f(o)), (x(plato[plato.len() - 1]), f(o))])
                    .unwrap_or_default(),
                Figure::Fig10 => plato
                    .iter()
                    .filter_map(|r| fixed_of(rows, r.job).map(|o| (x(r), f(o))))
                    .collect(),
            }
        };
        lat.push(Series {
            name: format!("fixed sequencer median (k = {k})"),
            points: fixed(&|o| o.latency.p50 as f64 / 1e3),
        });
        lat.push(Series {
            name: format!("fixed sequencer mean (k = {k})"),
            points: fixed(&|o| o.latency.mean / 1e3),
        });
    }
    (lat, rb)
}

/// The rollback panels' y axis: the CSV's fraction, in percent.
const ROLLBACKS: &str = "rollbacks (% of confirmed deliveries)";

/// A panel of Fig. 8: linear axes, Δ across.
fn delta_chart<'a>(caption: &'a str, y_desc: &'a str) -> Chart<'a> {
    Chart {
        caption,
        x_desc: "Δ (µs)",
        y_desc,
        log_x: false,
        log_y: false,
        legend_upper: true,
    }
}

/// Fig. 8: latency (top) and rollbacks (bottom) against Δ, 400 (left) and 1,600 (right)
/// packets/s.
fn plot_fig8(path: &Path, rows: &[Row], font: &'static str) -> Result<(), String> {
    let captions: Vec<(String, String)> = FIG8_RATES
        .iter()
        .map(|r| {
            (
                format!("Fig. 8: Δ vs latency, {r} packets/s"),
                format!("Fig. 8: Δ vs rollbacks, {r} packets/s"),
            )
        })
        .collect();
    let data: Vec<(Vec<Series>, Vec<Series>)> = FIG8_RATES
        .iter()
        .map(|&r| series(rows, Figure::Fig8, Some(r)))
        .collect();
    let lat: Vec<Chart> = captions
        .iter()
        .map(|(c, _)| delta_chart(c, "latency (µs)"))
        .collect();
    let rb: Vec<Chart> = captions
        .iter()
        .map(|(_, c)| delta_chart(c, ROLLBACKS))
        .collect();
    let panel = |chart, series| Panel {
        chart,
        series,
        legend_right: false,
    };
    let panels: Vec<Panel> = lat
        .iter()
        .zip(&data)
        .map(|(c, d)| panel(c, &d.0[..]))
        .chain(rb.iter().zip(&data).map(|(c, d)| panel(c, &d.1[..])))
        .collect();
    line_charts(path, &panels, FIG8_RATES.len(), font)
}

/// Fig. 10: latency (left) and rollbacks (right) against the rate, Δ = 160 µs.
fn plot_fig10(path: &Path, rows: &[Row], font: &'static str) -> Result<(), String> {
    let (lat, rb) = series(rows, Figure::Fig10, None);
    let x_desc = "thousand packets/s in the group (1 KB)";
    let lat_chart = Chart {
        caption: "Fig. 10: rate vs latency, Δ = 160 µs",
        x_desc,
        y_desc: "latency (µs)",
        log_x: false,
        log_y: false,
        legend_upper: true,
    };
    let rb_chart = Chart {
        caption: "Fig. 10: rate vs rollbacks, Δ = 160 µs",
        x_desc,
        y_desc: ROLLBACKS,
        log_x: false,
        log_y: false,
        legend_upper: true,
    };
    let panels = [
        // The lines fall with the rate: the legend goes above their low end.
        Panel {
            chart: &lat_chart,
            series: &lat,
            legend_right: true,
        },
        Panel {
            chart: &rb_chart,
            series: &rb,
            legend_right: true,
        },
    ];
    line_charts(path, &panels, 2, font)
}
