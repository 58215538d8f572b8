//! `onepipe bench plato` (with Fig. 8 or 10): PLATO's Fig. 8 and Fig. 10 axes for optimistic 1Pipe —
//! the same hooks on 1Pipe's barrier instead of a sequencer (`--optimistic-delta`, docs/PLATO.md)
//! — against 1Pipe's barrier delivery, in PLATO's setting ([`crate::bench_plato`]'s module docs:
//! 4 hosts on a leaf-spine, 25-µs links, 1 KB all-to-all broadcasts, the group's rate split
//! evenly, Δ fixed).
//!
//! * **Fig. 8's axes**: latency (median and mean) and rollbacks against Δ at 400 and 1,600
//!   packets/s.
//! * **Fig. 10's axes**: the same against the group's rate at Δ = 160 µs.
//!
//! Barrier delivery is measured in the same runs: optimism changes no final delivery (the
//! simulator's tests pin the trace with and without it), so each run's final-delivery latency is
//! barrier delivery's.
//!
//! 1Pipe runs with the simulator's defaults otherwise (chip switches, 3-µs beacons, no skew), so
//! each run is much shorter than PLATO's: 1Pipe's beacons are events every few microseconds on
//! every link, which 60 s of sending would make billions of ([`DURATION_NS`]). There is no k:
//! the barrier is the order. Latency: optimistic send → usable (the earlier of Tm and the
//! confirm), barrier send → delivery; a rollback is a revoke at or after Tm, over confirmed
//! deliveries. Every run is checked, the hooks too; a violation or an undrained run is an error
//! naming the seed.

use crate::bench_plato::{
    setting_config, PlatoArgs, FIG10_DELTA_NS, FIG8_RATES, HOSTS, LINK_DELAY_NS, MSG_SIZE,
};
use crate::plot::{line_charts, Chart, Panel, Series};
use onepipe_sim::metrics::Summary;
use std::io::Write;
use std::path::Path;

/// Sending time of a full run.
pub const DURATION_NS: u64 = 2_000_000_000;
/// Sending time of `--quick`.
pub const DURATION_NS_QUICK: u64 = 100_000_000;

/// One optimistic 1Pipe run: Δ, at a rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Job {
    rate: u32,
    delta_ns: u64,
}

impl Job {
    fn describe(self) -> String {
        format!(
            "optimistic 1pipe {} pkt/s Δ={} ns",
            self.rate, self.delta_ns
        )
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
struct Outcome {
    /// Send → usable.
    latency: Summary,
    /// Send → final delivery.
    barrier: Summary,
    sent: u64,
    delivered: u64,
    rollbacks: u64,
    rollback_fraction: f64,
    revokes_early: u64,
}

/// The points: (figure, job), in plotting order.
fn points(a: &PlatoArgs) -> Vec<(&'static str, Job)> {
    let (deltas, rates10) = crate::bench_plato::axes(a);
    let mut out = Vec::new();
    for rate in FIG8_RATES {
        for &delta_ns in deltas {
            out.push(("fig8", Job { rate, delta_ns }));
        }
    }
    for &rate in rates10 {
        let delta_ns = FIG10_DELTA_NS;
        out.push(("fig10", Job { rate, delta_ns }));
    }
    out
}

/// Runs `job`, checked.
fn run_job(a: &PlatoArgs, job: Job) -> Result<Outcome, String> {
    let duration = if a.quick {
        DURATION_NS_QUICK
    } else {
        DURATION_NS
    };
    let mut cfg = setting_config(a.seed, job.rate, duration);
    cfg.workload.drain_ns = 100_000_000;
    cfg.protocol.optimistic_delta_ns = job.delta_ns;
    cfg.protocol.optimistic_adaptive = false;
    let fail = |e: String| format!("{}, seed {}: {e}", job.describe(), a.seed);
    let r = onepipe_sim::run(&cfg, &mut |_| {}).map_err(|e| fail(e.to_string()))?;
    if r.violations > 0 {
        return Err(fail(format!(
            "{} violation(s): {:?}",
            r.violations, r.violation_samples
        )));
    }
    if !r.checked || !r.drained {
        return Err(fail(format!(
            "checked {}, drained {}",
            r.checked, r.drained
        )));
    }
    let o = r
        .optimistic
        .as_ref()
        .ok_or_else(|| fail("no optimistic report".into()))?;
    Ok(Outcome {
        latency: o.latency_ns,
        barrier: r.latency_ns,
        sent: r.sent,
        delivered: r.delivered,
        rollbacks: o.rollbacks,
        rollback_fraction: o.rollback_fraction,
        revokes_early: o.revokes_early,
    })
}

/// Runs every job on `a.jobs` threads ([`crate::sweep::run_points`]), checked.
fn run_all(a: &PlatoArgs, jobs: &[Job]) -> Result<Vec<Outcome>, String> {
    crate::sweep::run_points(
        "plato 1pipe",
        jobs,
        a.jobs,
        |j| u64::from(j.rate),
        |j| j.describe(),
        |&j| run_job(a, j),
    )
    .into_iter()
    .collect()
}

/// Optimistic 1Pipe on Figs. 8 and 10's axes: plato-1pipe.csv, a table, and plato-1pipe.png.
pub fn onepipe(a: &PlatoArgs) -> Result<(), String> {
    let points = points(a);
    let mut jobs: Vec<Job> = points.iter().map(|&(_, j)| j).collect();
    jobs.sort_unstable();
    jobs.dedup();
    let outcomes = run_all(a, &jobs)?;
    let rows: Vec<(&str, Job, &Outcome)> = points
        .iter()
        .map(|&(f, j)| {
            (
                f,
                j,
                &outcomes[jobs.binary_search(&j).expect("a job per point")],
            )
        })
        .collect();
    let path = a.out.join("plato-1pipe.csv");
    write_csv(a, &path, &rows)?;
    print_table(a, &rows);
    match crate::plot::load_font() {
        Some(font) => plot(&a.out.join("plato-1pipe.png"), &rows, font)?,
        None => eprintln!("onepipe bench plato: no TrueType font found: plato-1pipe.png skipped"),
    }
    println!("# wrote {}", path.display());
    Ok(())
}

fn setting(a: &PlatoArgs) -> String {
    format!(
        "# optimistic 1Pipe on PLATO's Fig. 8 and 10 axes (onepipe bench plato{}, seed {}): \
         {HOSTS} hosts on a leaf-spine, link delay {} us, all-to-all {MSG_SIZE} B broadcasts, the \
         group's rate split evenly; {} s of sending per point; 1Pipe's defaults otherwise (chip \
         switches); Delta fixed; latency: optimistic send -> usable, barrier send -> delivery",
        if a.quick { " --quick" } else { "" },
        a.seed,
        LINK_DELAY_NS / 1_000,
        if a.quick {
            DURATION_NS_QUICK
        } else {
            DURATION_NS
        } as f64
            / 1e9
    )
}

fn write_csv(a: &PlatoArgs, path: &Path, rows: &[(&str, Job, &Outcome)]) -> Result<(), String> {
    let mut f = std::fs::File::create(path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    w(setting(a))?;
    w("figure,rate_pkts_per_s,delta_ns,sent,delivered,latency_p50_ns,latency_mean_ns,latency_p99_ns,barrier_latency_p50_ns,barrier_latency_mean_ns,rollbacks,rollback_fraction,revokes_early".into())?;
    for (fig, j, o) in rows {
        w(format!(
            "{fig},{},{},{},{},{},{:.0},{},{},{:.0},{},{:.6},{}",
            j.rate,
            j.delta_ns,
            o.sent,
            o.delivered,
            o.latency.p50,
            o.latency.mean,
            o.latency.p99,
            o.barrier.p50,
            o.barrier.mean,
            o.rollbacks,
            o.rollback_fraction,
            o.revokes_early
        ))?;
    }
    Ok(())
}

fn print_table(a: &PlatoArgs, rows: &[(&str, Job, &Outcome)]) {
    println!("{}", setting(a));
    println!("| axes | packets/s | Δ (µs) | optimistic p50 / mean (µs) | rollbacks | barrier p50 / mean (µs) |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (fig, j, o) in rows {
        let us = |ns: f64| format!("{:.1}", ns / 1e3);
        println!(
            "| {fig} | {} | {} | {} / {} | {:.2}% | {} / {} |",
            j.rate,
            j.delta_ns / 1_000,
            us(o.latency.p50 as f64),
            us(o.latency.mean),
            100.0 * o.rollback_fraction,
            us(o.barrier.p50 as f64),
            us(o.barrier.mean)
        );
    }
}

/// Four panels: latency and rollbacks against Δ (1,600 packets/s; 400 is in the CSV), and
/// against the rate at Δ = 160 µs.
fn plot(path: &Path, rows: &[(&str, Job, &Outcome)], font: &'static str) -> Result<(), String> {
    let series = |fig: &str, rate: Option<u32>| {
        let opt: Vec<&(&str, Job, &Outcome)> = rows
            .iter()
            .filter(|r| r.0 == fig && rate.is_none_or(|x| r.1.rate == x))
            .collect();
        let x = |j: &Job| match fig {
            "fig8" => j.delta_ns as f64 / 1e3,
            _ => f64::from(j.rate) / 1e3,
        };
        let pts = |f: &dyn Fn(&Outcome) -> f64| opt.iter().map(|r| (x(&r.1), f(r.2))).collect();
        let lat = vec![
            Series {
                name: "optimistic median".into(),
                points: pts(&|o| o.latency.p50 as f64 / 1e3),
            },
            Series {
                name: "optimistic mean".into(),
                points: pts(&|o| o.latency.mean / 1e3),
            },
            Series {
                name: "barrier median".into(),
                points: pts(&|o| o.barrier.p50 as f64 / 1e3),
            },
            Series {
                name: "barrier mean".into(),
                points: pts(&|o| o.barrier.mean / 1e3),
            },
        ];
        let rb = vec![Series {
            name: "rollbacks".into(),
            points: pts(&|o| 100.0 * o.rollback_fraction),
        }];
        (lat, rb)
    };
    let (lat8, rb8) = series("fig8", Some(FIG8_RATES[1]));
    let (lat10, rb10) = series("fig10", None);
    let chart = |caption, x_desc, y_desc| Chart {
        caption,
        x_desc,
        y_desc,
        log_x: false,
        log_y: false,
        legend_upper: true,
    };
    let rate_x = "thousand packets/s in the group (1 KB)";
    let charts = [
        chart(
            "1Pipe, Fig. 8 axes: Δ vs latency, 1,600 packets/s",
            "Δ (µs)",
            "latency (µs)",
        ),
        chart(
            "1Pipe, Fig. 10 axes: rate vs latency, Δ = 160 µs",
            rate_x,
            "latency (µs)",
        ),
        chart(
            "1Pipe, Fig. 8 axes: Δ vs rollbacks, 1,600 packets/s",
            "Δ (µs)",
            "rollbacks (%)",
        ),
        chart(
            "1Pipe, Fig. 10 axes: rate vs rollbacks, Δ = 160 µs",
            rate_x,
            "rollbacks (%)",
        ),
    ];
    let data = [&lat8, &lat10, &rb8, &rb10];
    let panels: Vec<Panel> = charts
        .iter()
        .zip(data)
        .map(|(chart, series)| Panel {
            chart,
            series,
            legend_right: false,
        })
        .collect();
    line_charts(path, &panels, 2, font)
}
