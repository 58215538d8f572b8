//! `onepipe bench plato`'s Figs. 9 and 11 (PLATO §5): a load step on the setting of Figs. 8
//! and 10 ([`crate::bench_plato`]). Processes 0 and 2 (one per rack) send 200 packets/s each
//! throughout; 20 s in, processes 1 and 3 send 750 packets/s each for 10 s (the group's rate
//! 400 → 1,900 → 400 packets/s), through the workload's rate steps
//! ([`WorkloadConfig::rate_steps`](onepipe_sim::WorkloadConfig::rate_steps)); the run sends for
//! 40 s. `--quick` scales the timeline down by 10 (2 s, a 1-s step, 4 s).
//!
//! * **Fig. 9**: PLATO with Δ = 140 µs fixed and the fixed sequencer, k = 10 and 20.
//! * **Fig. 11**: PLATO with adaptive Δ (`plato_adaptive`, §5: ×1.5 on a rollback while the
//!   moving fraction of rollbacks is above 0.01, ×0.9 every 100 ms or 1,000 packets below it),
//!   starting at 140 µs, k = 10.
//!
//! From each run's delivery log
//! ([`BaselineConfig::log_deliveries`](onepipe_sim::baseline::BaselineConfig::log_deliveries))
//! every 10 ms ([`STEP_NS`]): the mean latency of the deliveries of the last second
//! ([`WINDOW_NS`]; PLATO's send → usable, the fixed sequencer's send → delivery), the
//! rollbacks of that second over its deliveries, and (Fig. 11) the mean Δ the receivers had at
//! the deliveries and rollbacks of the last 10 ms (the previous value if there were none). A
//! delivery counts at the time it became usable.

use crate::bench_plato::{plato_config, run_checked, setting_config, PlatoArgs, HOSTS};
use crate::plot::{line_charts, Chart, Panel, Series};
use onepipe_sim::baseline::{BaselineConfig, DeliverySample};
use onepipe_sim::RateStep;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Each steady sender's rate, packets/s.
pub const BASE_RATE: f64 = 200.0;
/// Each added sender's rate during the step, packets/s.
pub const STEP_RATE: f64 = 750.0;
/// When the step starts, ns (`--quick`: a tenth).
pub const STEP_FROM_NS: u64 = 20_000_000_000;
/// How long it lasts, ns (`--quick`: a tenth).
pub const STEP_LEN_NS: u64 = 10_000_000_000;
/// Sending time of the run, ns (`--quick`: a tenth).
pub const DURATION_NS: u64 = 40_000_000_000;
/// The moving window, ns (the paper's 1 s; `--quick`: a tenth).
pub const WINDOW_NS: u64 = 1_000_000_000;
/// One sample per this, ns (the paper's 10 ms).
pub const STEP_NS: u64 = 10_000_000;
/// Δ of Fig. 9, and Fig. 11's start, ns.
pub const DELTA_NS: u64 = 140_000;
/// The trade-off parameter k of Fig. 9's runs; Fig. 11 runs the first.
pub const KS: [usize; 2] = [10, 20];

/// One run of the step.
#[derive(Clone, Copy, Debug)]
struct Run {
    k: usize,
    /// PLATO's (fixed) Δ; `None`: the fixed sequencer.
    delta_ns: Option<u64>,
    adaptive: bool,
}

impl Run {
    fn name(self) -> String {
        match (self.delta_ns, self.adaptive) {
            (None, _) => format!("fixed sequencer k = {}", self.k),
            (Some(_), false) => format!("PLATO k = {}", self.k),
            (Some(_), true) => format!("PLATO adaptive k = {}", self.k),
        }
    }
}

/// One sample of a run's timeline.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    t_s: f64,
    latency_us: f64,
    rollback_fraction: f64,
    delta_us: f64,
}

/// Runs `f` over `items` on `threads` threads; the results in the items' order.
pub fn par_map<J: Sync, O: Send>(
    threads: usize,
    items: &[J],
    f: impl Fn(&J) -> O + Sync,
) -> Vec<O> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<O>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let o = f(item);
                out.lock().expect("no worker panicked")[i] = Some(o);
            });
        }
    });
    out.into_inner()
        .expect("no worker panicked")
        .into_iter()
        .map(|o| o.expect("every item ran"))
        .collect()
}

/// The timeline's scale: 1, or 10 under `--quick`.
fn scale(a: &PlatoArgs) -> u64 {
    if a.quick {
        10
    } else {
        1
    }
}

/// Figs. 9 and 11 (those `--figs` names): their CSVs and PNGs.
pub fn spike(a: &PlatoArgs) -> Result<(), String> {
    let mut runs = Vec::new();
    if a.figs.contains(&9) {
        for k in KS {
            for delta_ns in [Some(DELTA_NS), None] {
                let adaptive = false;
                runs.push(Run {
                    k,
                    delta_ns,
                    adaptive,
                });
            }
        }
    }
    if a.figs.contains(&11) {
        let (k, delta_ns, adaptive) = (KS[0], Some(DELTA_NS), true);
        runs.push(Run {
            k,
            delta_ns,
            adaptive,
        });
    }
    let timelines = par_map(a.jobs, &runs, |&r| run(a, r))
        .into_iter()
        .collect::<Result<Vec<Vec<Sample>>, String>>()?;
    let font = crate::plot::load_font();
    let fixed: Vec<usize> = (0..runs.len()).filter(|&i| !runs[i].adaptive).collect();
    let adaptive: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].adaptive).collect();
    for (fig, mine) in [(9, fixed), (11, adaptive)] {
        if mine.is_empty() {
            continue;
        }
        let pick = |v: &[usize]| -> (Vec<Run>, Vec<&[Sample]>) {
            (
                v.iter().map(|&i| runs[i]).collect(),
                v.iter().map(|&i| &timelines[i][..]).collect(),
            )
        };
        let (rs, ts) = pick(&mine);
        write_csv(a, fig, &rs, &ts)?;
        print_summary(a, fig, &rs, &ts);
        if let Some(font) = font {
            let png = a.out.join(format!("plato-fig{fig}.png"));
            plot(&png, (fig, secs(WINDOW_NS / scale(a))), &rs, &ts, font)?;
            println!("# wrote {}", png.display());
        }
    }
    Ok(())
}

/// The run `r` of the step, checked, and its timeline.
fn run(a: &PlatoArgs, r: Run) -> Result<Vec<Sample>, String> {
    let s = scale(a);
    let mut cfg = setting_config(a.seed, 0, DURATION_NS / s);
    cfg.workload.rate_per_proc = BASE_RATE;
    let step = |from_ns, procs, rate_per_proc| RateStep {
        from_ns,
        procs,
        rate_per_proc,
    };
    // Processes 1 and 3 (one per rack) are the added senders.
    cfg.workload.rate_steps = [0, STEP_FROM_NS / s, (STEP_FROM_NS + STEP_LEN_NS) / s]
        .into_iter()
        .zip([0.0, STEP_RATE, 0.0])
        .flat_map(|(at, rate)| [step(at, 1..2, rate), step(at, 3..4, rate)])
        .collect();
    debug_assert_eq!(HOSTS, 4);
    let mut base: BaselineConfig = plato_config(r.k, r.delta_ns);
    base.plato_adaptive = r.adaptive;
    base.log_deliveries = true;
    let report = run_checked(&cfg, &base, &r.name())?;
    let log = report.deliveries.ok_or("no delivery log")?;
    Ok(timeline(log, DURATION_NS / s, WINDOW_NS / s))
}

/// Every [`STEP_NS`] from one window in to `end_ns`: the window's mean latency and rollback
/// fraction, and the mean Δ of the last step's samples (module docs).
fn timeline(mut log: Vec<DeliverySample>, end_ns: u64, window_ns: u64) -> Vec<Sample> {
    log.sort_by_key(|d| d.at_ns);
    let mut out = Vec::new();
    let (mut lo, mut hi) = (0, 0);
    let (mut lat_sum, mut delivered, mut rollbacks) = (0u128, 0u64, 0u64);
    let mut delta_us = f64::NAN;
    let mut t = window_ns;
    while t <= end_ns {
        let step_start = hi;
        while hi < log.len() && log[hi].at_ns <= t {
            match log[hi].latency_ns {
                Some(l) => (lat_sum, delivered) = (lat_sum + u128::from(l), delivered + 1),
                None => rollbacks += 1,
            }
            hi += 1;
        }
        while lo < hi && log[lo].at_ns + window_ns <= t {
            match log[lo].latency_ns {
                Some(l) => (lat_sum, delivered) = (lat_sum - u128::from(l), delivered - 1),
                None => rollbacks -= 1,
            }
            lo += 1;
        }
        let deltas: Vec<u64> = log[step_start..hi]
            .iter()
            .filter_map(|d| d.delta_ns)
            .collect();
        if !deltas.is_empty() {
            delta_us = deltas.iter().sum::<u64>() as f64 / deltas.len() as f64 / 1e3;
        }
        out.push(Sample {
            t_s: t as f64 / 1e9,
            latency_us: lat_sum as f64 / delivered.max(1) as f64 / 1e3,
            rollback_fraction: rollbacks as f64 / delivered.max(1) as f64,
            delta_us,
        });
        t += STEP_NS;
    }
    out
}

/// The setting, as a comment line.
fn setting(a: &PlatoArgs, fig: u32) -> String {
    let s = scale(a);
    format!(
        "# PLATO Fig. {fig} (onepipe bench plato{}, seed {}): the setting of Figs. 8 and 10; \
         processes 0 and 2 send {BASE_RATE} packets/s each, processes 1 and 3 {STEP_RATE} each \
         from {} s to {} s, {} s of sending; Delta {} us ({}); every {} ms the {} s moving mean \
         latency (us) and fraction of rollbacks{}",
        if a.quick { " --quick" } else { "" },
        a.seed,
        secs(STEP_FROM_NS / s),
        secs((STEP_FROM_NS + STEP_LEN_NS) / s),
        secs(DURATION_NS / s),
        DELTA_NS / 1_000,
        if fig == 11 {
            "adaptive, the start"
        } else {
            "fixed"
        },
        STEP_NS / 1_000_000,
        secs(WINDOW_NS / s),
        if fig == 11 {
            ", and the receivers' mean Delta (us)"
        } else {
            ""
        },
    )
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// The column name of `r`'s series `what`: `plato_k10_latency_us`, `fixed_k20_rollbacks`, ...
fn column(r: Run, what: &str) -> String {
    let who = match (r.delta_ns, r.adaptive) {
        (None, _) => "fixed",
        (Some(_), false) => "plato",
        (Some(_), true) => "plato_adaptive",
    };
    format!("{who}_k{}_{what}", r.k)
}

/// plato-figN.csv: one row per sample time, a latency and a rollback column per run (and Δ for
/// an adaptive run).
fn write_csv(a: &PlatoArgs, fig: u32, runs: &[Run], ts: &[&[Sample]]) -> Result<(), String> {
    let path = a.out.join(format!("plato-fig{fig}.csv"));
    let mut f = std::fs::File::create(&path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    w(setting(a, fig))?;
    let mut header = vec!["t_s".to_string()];
    for &r in runs {
        header.push(column(r, "latency_us"));
        header.push(column(r, "rollback_fraction"));
        if r.adaptive {
            header.push(column(r, "delta_us"));
        }
    }
    w(header.join(","))?;
    for i in 0..ts[0].len() {
        let mut row = vec![format!("{:.2}", ts[0][i].t_s)];
        for (r, t) in runs.iter().zip(ts) {
            row.push(format!("{:.1}", t[i].latency_us));
            row.push(format!("{:.5}", t[i].rollback_fraction));
            if r.adaptive {
                row.push(format!("{:.1}", t[i].delta_us));
            }
        }
        w(row.join(","))?;
    }
    println!("# wrote {}", path.display());
    Ok(())
}

/// Per run, the moving means just before the step, at its end and at the end of the run.
fn print_summary(a: &PlatoArgs, fig: u32, runs: &[Run], ts: &[&[Sample]]) {
    println!("{}", setting(a, fig));
    println!("| run | before the step (µs, rollbacks) | end of the step | end of the run |");
    println!("| --- | --- | --- | --- |");
    let s = scale(a);
    let at = |t: &[Sample], ns: u64| t[((ns - WINDOW_NS / s) / STEP_NS) as usize];
    let cell = |x: Sample| {
        let delta = if x.delta_us.is_nan() {
            String::new()
        } else {
            format!(", Δ {:.0} µs", x.delta_us)
        };
        format!(
            "{:.0}, {:.2}%{delta}",
            x.latency_us,
            100.0 * x.rollback_fraction
        )
    };
    for (r, t) in runs.iter().zip(ts) {
        println!(
            "| {} | {} | {} | {} |",
            r.name(),
            cell(at(t, STEP_FROM_NS / s)),
            cell(at(t, (STEP_FROM_NS + STEP_LEN_NS) / s)),
            cell(t[t.len() - 1]),
        );
    }
}

/// Fig. 9: latency (top, log scale) and rollbacks (bottom) over time, k = 10 (left) and 20
/// (right). Fig. 11: latency, rollbacks and Δ over time. `window_s`: the moving window.
fn plot(
    path: &Path,
    (fig, window_s): (u32, f64),
    runs: &[Run],
    ts: &[&[Sample]],
    font: &'static str,
) -> Result<(), String> {
    let line = |r: Run, t: &[Sample], f: &dyn Fn(&Sample) -> f64| Series {
        name: r.name(),
        points: t.iter().map(|x| (x.t_s, f(x))).collect(),
    };
    let ks: Vec<usize> = if fig == 9 { KS.to_vec() } else { vec![KS[0]] };
    let captions = captions(fig, window_s, &ks);
    let chart = |caption, y_desc, log_y| Chart {
        caption,
        x_desc: "time (s)",
        y_desc,
        log_x: false,
        log_y,
        legend_upper: true,
    };
    let mut charts = Vec::new();
    let mut data = Vec::new();
    for (k, c) in ks.iter().zip(&captions) {
        let mine: Vec<(Run, &[Sample])> = runs
            .iter()
            .zip(ts)
            .filter(|(r, _)| r.k == *k)
            .map(|(&r, &t)| (r, t))
            .collect();
        charts.push(chart(&c[0][..], "latency (µs)", fig == 9));
        data.push(
            mine.iter()
                .map(|&(r, t)| line(r, t, &|x| x.latency_us))
                .collect::<Vec<_>>(),
        );
        charts.push(chart(&c[1][..], "rollbacks (% of deliveries)", false));
        data.push(
            mine.iter()
                .filter(|(r, _)| r.delta_ns.is_some())
                .map(|&(r, t)| line(r, t, &|x| 100.0 * x.rollback_fraction))
                .collect(),
        );
        if fig == 11 {
            charts.push(chart(&c[2][..], "Δ (µs)", false));
            data.push(
                mine.iter()
                    .map(|&(r, t)| line(r, t, &|x| x.delta_us))
                    .collect(),
            );
        }
    }
    // Fig. 9 is two columns (k), latency over rollbacks; Fig. 11 one row of three.
    let order: Vec<usize> = if fig == 9 {
        vec![0, 2, 1, 3]
    } else {
        vec![0, 1, 2]
    };
    let panels: Vec<Panel> = order
        .iter()
        .map(|&i| Panel {
            chart: &charts[i],
            series: &data[i],
            legend_right: true,
        })
        .collect();
    let cols = if fig == 9 { 2 } else { 3 };
    line_charts(path, &panels, cols, font)
}

/// The captions of each k's latency, rollback and Δ panels.
fn captions(fig: u32, window_s: f64, ks: &[usize]) -> Vec<[String; 3]> {
    ks.iter()
        .map(|k| {
            let what = if fig == 9 {
                "Δ = 140 µs"
            } else {
                "adaptive Δ"
            };
            [
                format!("Fig. {fig}: latency, {window_s}-s moving mean, {what}, k = {k}"),
                format!("Fig. {fig}: rollbacks, {window_s}-s moving fraction, k = {k}"),
                format!("Fig. {fig}: Δ (mean over the receivers), k = {k}"),
            ]
        })
        .collect()
}
