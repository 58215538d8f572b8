//! `onepipe bench plato`'s Fig. 3 (PLATO §3, "Disorder Characterization"): the swaps and the
//! losses a receiver sees against the group's rate, 400 … 4,000 packets/s, on the setting of
//! Figs. 8 and 10 ([`crate::bench_plato`]) with receiver overload on.
//!
//! **Receiver overload** ([`OVERLOAD`], **fitted**): the paper's losses are its receivers'
//! kernels dropping packets while "the receive thread is occasionally context-switched out"
//! (§3.1). Here every process's core takes [`HOST_RECV_NS`] per packet, holds at most
//! [`RECV_QUEUE_LEN_MAX`] waiting packets (the next is dropped) and is descheduled for
//! [`RECV_STALL_NS`] at Poisson times, [`RECV_STALL_EVERY_NS`] apart on average (the
//! sequencer's core stalls too, but keeps the 50-ns cost of Figs. 8 and 10). The four are
//! chosen so that the losses stay within the paper's 0–5 % and rise with the rate (a stall
//! drops what arrives beyond the queue's room), not measured.
//!
//! **What is counted.** The run is PLATO (k = 10, Δ = 160 µs fixed) with its arrival log
//! ([`BaselineConfig::log_arrivals`](onepipe_sim::baseline::BaselineConfig::log_arrivals)).
//! *Losses* are the direct copies (PLATO's `Early` packets) dropped at receive queues over
//! those sent ([`copies_lost`]); the CSV also gives the drops over all the packets that
//! arrived at receive queues (sequencing, sync and repair packets too). *Swaps* are the
//! paper's: for two receivers, the direct copies both took in, in the first one's order; a
//! consecutive pair that the second took in the other way round is a swap; the percentage is
//! over all such pairs, of every pair of receivers. The checkers judge every run (a violation
//! is an error); a run need not drain — this figure is about arrivals, and a drop of the
//! sequencer's best-effort upstream can leave a message unordered (BASELINES.md) — the CSV
//! counts what is left undelivered.

use crate::bench_plato::{plato_config, setting_config, PlatoArgs, HOSTS};
use crate::plot::{line_chart, Chart, Series};
use onepipe_sim::baseline::{run_baseline, ArrivalLog, BaseReport};
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;

/// The rates, packets per second in the group (the paper's "receive throughput").
pub const RATES: [u32; 10] = [
    400, 800, 1_200, 1_600, 2_000, 2_400, 2_800, 3_200, 3_600, 4_000,
];
/// The rates of `--quick`.
pub const RATES_QUICK: [u32; 3] = [400, 2_000, 4_000];
/// Sending time per rate: 80,000 arrivals per receiver at 4,000 packets/s.
pub const DURATION_NS: u64 = 20_000_000_000;
/// Sending time per rate in `--quick`.
pub const DURATION_NS_QUICK: u64 = 500_000_000;
/// A core's cost per packet taken in, ns (**fitted**, module docs): a 1 KB datagram through a
/// kernel and a user-level receive.
pub const HOST_RECV_NS: u64 = 20_000;
/// Most packets waiting at a core (**fitted**).
pub const RECV_QUEUE_LEN_MAX: u32 = 8;
/// Mean interval between a core's stalls, ns (**fitted**).
pub const RECV_STALL_EVERY_NS: u64 = 100_000_000;
/// One stall, ns (**fitted**).
pub const RECV_STALL_NS: u64 = 5_000_000;
/// The overload, in words, for the CSV and the table.
pub const OVERLOAD: &str = "receiver overload (fitted: losses within the paper's 0-5% and \
                            rising with the rate): 20 us per packet taken in, at most 8 \
                            packets waiting at a core, a 5-ms stall every 100 ms (Poisson)";
/// PLATO's k and Δ in the runs (they do not change what arrives, only the repairs).
const K: usize = 10;
/// The sequencer's cost per packet in and out, ns: the host default of Figs. 8 and 10, not
/// [`HOST_RECV_NS`].
const SEQ_PACKET_NS: u64 = 50;
const DELTA_NS: u64 = 160_000;

/// What one rate measured.
struct Point {
    rate: u32,
    swaps: u64,
    pairs: u64,
    /// Direct copies dropped at receive queues, and sent.
    copies_dropped: u64,
    copies_sent: u64,
    /// Packets of every kind dropped at receive queues, and arrived there.
    dropped: u64,
    arrived: u64,
    stalls: u64,
    /// Messages still undelivered when the drain ended (module docs).
    undrained: u64,
}

impl Point {
    fn swaps_pct(&self) -> f64 {
        100.0 * self.swaps as f64 / self.pairs.max(1) as f64
    }

    fn losses_pct(&self) -> f64 {
        100.0 * self.copies_dropped as f64 / self.copies_sent.max(1) as f64
    }

    fn all_losses_pct(&self) -> f64 {
        100.0 * self.dropped as f64 / self.arrived.max(1) as f64
    }
}

/// Fig. 3: plato-fig3.csv and plato-fig3.png.
pub fn fig3(a: &PlatoArgs) -> Result<(), String> {
    let rates: &[u32] = if a.quick { &RATES_QUICK } else { &RATES };
    let points = crate::bench_plato_spike::par_map(a.jobs, rates, |&rate| run(a, rate))
        .into_iter()
        .collect::<Result<Vec<Point>, String>>()?;
    let setting = format!(
        "# PLATO Fig. 3 (onepipe bench plato{}, seed {}): the setting of Figs. 8 and 10, PLATO \
         k = {K}, Delta = {} us fixed, {} s of sending per rate; {OVERLOAD}; losses: direct \
         copies dropped at receive queues over direct copies sent (all_packets: every packet \
         dropped there over every packet arriving there); swaps: consecutive direct copies \
         taken in the other way round at a second receiver, over such pairs; runs checked, \
         not required to drain",
        if a.quick { " --quick" } else { "" },
        a.seed,
        DELTA_NS / 1_000,
        duration(a) as f64 / 1e9
    );
    let path = a.out.join("plato-fig3.csv");
    let mut f = std::fs::File::create(&path)
        .map_err(|e| format!("--out: cannot create {}: {e}", path.display()))?;
    let mut w = |s: String| writeln!(f, "{s}").map_err(|e| e.to_string());
    w(setting.clone())?;
    w("rate_pkts_per_s,swaps_pct,losses_pct,swapped_pairs,pairs,copies_dropped,copies_sent,all_packets_losses_pct,dropped,arrived,stalls,undrained".into())?;
    println!("{setting}");
    println!("| packets/s | swaps | losses (direct copies) | losses (all packets) | undrained |");
    println!("| --- | --- | --- | --- | --- |");
    for p in &points {
        w(format!(
            "{},{:.4},{:.4},{},{},{},{},{:.4},{},{},{},{}",
            p.rate,
            p.swaps_pct(),
            p.losses_pct(),
            p.swaps,
            p.pairs,
            p.copies_dropped,
            p.copies_sent,
            p.all_losses_pct(),
            p.dropped,
            p.arrived,
            p.stalls,
            p.undrained
        ))?;
        println!(
            "| {} | {:.2}% | {:.2}% | {:.2}% | {} |",
            p.rate,
            p.swaps_pct(),
            p.losses_pct(),
            p.all_losses_pct(),
            p.undrained
        );
    }
    if let Some(font) = crate::plot::load_font() {
        plot(&a.out.join("plato-fig3.png"), &points, font)?;
        println!("# wrote {} and plato-fig3.png", path.display());
    }
    Ok(())
}

fn duration(a: &PlatoArgs) -> u64 {
    if a.quick {
        DURATION_NS_QUICK
    } else {
        DURATION_NS
    }
}

/// One rate's run, judged by the checkers (module docs: a run need not drain).
fn run(a: &PlatoArgs, rate: u32) -> Result<Point, String> {
    let mut cfg = setting_config(a.seed, rate, duration(a));
    cfg.net.host_recv_ns = HOST_RECV_NS;
    cfg.faults.recv_queue_len_max = RECV_QUEUE_LEN_MAX;
    cfg.faults.recv_stall_every_ns = RECV_STALL_EVERY_NS;
    cfg.faults.recv_stall_ns = RECV_STALL_NS;
    let mut base = plato_config(K, Some(DELTA_NS));
    // The sequencer's cost stays that of Figs. 8 and 10 (the host default).
    base.seq_host_packet_ns = Some(SEQ_PACKET_NS);
    base.log_arrivals = true;
    let what = format!("fig3 plato {rate} pkt/s, seed {}", cfg.seed);
    let r: BaseReport =
        run_baseline(&cfg, &base, &mut |_| {}).map_err(|e| format!("{what}: {e}"))?;
    if r.violations > 0 || !r.checked {
        return Err(format!(
            "{what}: {} violation(s) (checked: {}): {:?}",
            r.violations, r.checked, r.violation_samples
        ));
    }
    let log = r.arrivals.as_ref().ok_or("fig3: no arrival log")?;
    let (swaps, pairs) = swaps(log);
    let (copies_dropped, copies_sent) = copies_lost(log);
    Ok(Point {
        rate,
        swaps,
        pairs,
        copies_dropped,
        copies_sent,
        dropped: r.recv_overflow,
        arrived: log.packets_taken_in + r.recv_overflow,
        stalls: r.recv_stalls,
        undrained: r.undrained,
    })
}

/// Direct copies that did not reach their receiver, and direct copies sent: a sender's
/// messages are those any receiver took in (its own copy travels in no packet), and each
/// was sent to every other process.
pub fn copies_lost(log: &ArrivalLog) -> (u64, u64) {
    let n = log.early.len();
    let mut sent: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); n];
    for order in &log.early {
        for &(src, id) in order {
            if let Some(s) = sent.get_mut(src as usize) {
                s.insert(id);
            }
        }
    }
    let copies_sent: u64 = sent.iter().map(|s| s.len() as u64 * (n as u64 - 1)).sum();
    let taken_in: u64 = log.early.iter().map(|o| o.len() as u64).sum();
    (copies_sent.saturating_sub(taken_in), copies_sent)
}

/// Swapped consecutive pairs and all consecutive pairs, summed over every two receivers
/// (module docs).
pub fn swaps(log: &ArrivalLog) -> (u64, u64) {
    let n = log.early.len().min(HOSTS as usize);
    let (mut swapped, mut pairs) = (0, 0);
    for i in 0..n {
        for j in i + 1..n {
            let pos: HashMap<(u32, u64), usize> = log.early[j]
                .iter()
                .enumerate()
                .map(|(p, &m)| (m, p))
                .collect();
            let order: Vec<usize> = log.early[i]
                .iter()
                .filter_map(|m| pos.get(m).copied())
                .collect();
            pairs += order.len().saturating_sub(1) as u64;
            swapped += order.windows(2).filter(|w| w[0] > w[1]).count() as u64;
        }
    }
    (swapped, pairs)
}

/// Fig. 3: swaps and losses, %, against the rate.
fn plot(path: &Path, points: &[Point], font: &'static str) -> Result<(), String> {
    let line = |name: &str, f: &dyn Fn(&Point) -> f64| Series {
        name: name.to_string(),
        points: points
            .iter()
            .map(|p| (f64::from(p.rate) / 1e3, f(p)))
            .collect(),
    };
    let series = [
        line("swaps", &Point::swaps_pct),
        line("total losses", &Point::losses_pct),
    ];
    let chart = Chart {
        caption: "Fig. 3: disorder characterization (4 hosts, receiver overload fitted)",
        x_desc: "receive throughput (thousand packets/s)",
        y_desc: "losses and swaps %",
        log_x: false,
        log_y: false,
        legend_upper: true,
    };
    line_chart(path, &chart, &series, font)
}
