//! Running the points of a figure: many independent simulations on `--jobs` threads, the
//! biggest first, with a progress bar on standard error. The results come back in the points'
//! order and do not depend on the number of threads.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Runs `run` on every point, `jobs` at a time, largest `weight` first; `label` names the point
/// in the progress bar of figure `name`.
pub fn run_points<P: Sync, R: Send>(
    name: &str,
    pts: &[P],
    jobs: usize,
    weight: impl Fn(&P) -> u64,
    label: impl Fn(&P) -> String + Sync,
    run: impl Fn(&P) -> R + Sync,
) -> Vec<R> {
    let bar = indicatif::ProgressBar::new(pts.len() as u64);
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{spinner}} {name} [{{bar:40}}] {{pos}}/{{len}} points ({{elapsed}}, ~{{eta}} left) {{msg}}"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    let mut order: Vec<usize> = (0..pts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(weight(&pts[i])));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..pts.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = order.get(k) else { break };
                bar.set_message(label(&pts[i]));
                let r = run(&pts[i]);
                results.lock().expect("no worker panicked")[i] = Some(r);
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    results
        .into_inner()
        .expect("no worker panicked")
        .into_iter()
        .map(|r| r.expect("every point ran"))
        .collect()
}

/// The end of figure `name`: its plots `pngs` (drawn by `plots` when a TrueType font is found,
/// else skipped with a word on standard error), then the verdict — an error naming every point
/// in `failing` (a checker found a violation there; seed `seed`).
pub fn finish(
    name: &str,
    csv: &std::path::Path,
    pngs: &str,
    plots: impl FnOnce(&'static str) -> Result<(), String>,
    failing: &[String],
    seed: u64,
) -> Result<(), String> {
    match crate::plot::load_font() {
        Some(font) => {
            plots(font)?;
            println!("# wrote {}, {pngs}", csv.display());
        }
        None => eprintln!(
            "onepipe bench {name}: no TrueType font found (install fonts-dejavu-core or set \
             ONEPIPE_FONT): plots skipped, {} written",
            csv.display()
        ),
    }
    if failing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} point(s) failed their checkers (seed {seed}; in {} too):\n  {}",
        failing.len(),
        csv.display(),
        failing.join("\n  ")
    ))
}
