//! The summary `onepipe up` prints of a run's [`UpReport`], the JSON report it writes, and
//! the exit code it comes to.

use super::{AuthSummary, FailuresReport, UpReport};
use crate::cli::{EXIT_USAGE, EXIT_VIOLATION};
use crate::live::UpArgs;

fn us(ns: f64) -> String {
    format!("{:.1} µs", ns / 1e3)
}

/// Prints the summary and writes `--json`; the exit code.
pub(in super::super) fn finish(args: &UpArgs, r: &UpReport) -> i32 {
    print_messages(r);
    print_transport(r);
    if !r.checks.drained {
        println!(
            "  drain       limit reached with {} message(s) neither delivered nor reported lost",
            r.checks.undrained
        );
    }
    let checks = if r.checks.checked {
        let mut c = format!(
            "{} violations in {} checked deliveries",
            r.checks.violations, r.checks.checked_deliveries
        );
        if r.checks.causal_unchecked > 0 {
            c += &format!(
                "; causal order unchecked for the {} messages of killed senders (rebuilt from the survivors' deliveries)",
                r.checks.causal_unchecked
            );
        }
        c
    } else {
        "off (--unordered: delivery order is the baseline's; --check runs them)".to_string()
    };
    r.failures.print();
    if !args.blackhole.is_empty() || !args.cut.is_empty() || r.forwarded_by_controller > 0 {
        println!(
            "  forwarding  {} packets black-holed and {} dropped at cut uplinks by aggregators, {} relayed by the controller (§5.2)",
            r.blackholed, r.cut_dropped, r.forwarded_by_controller
        );
    }
    if let Some(o) = &r.optimistic {
        println!(
            "  optimistic  {} handed over; usable p50 {} (final delivery p50 {}); {} rollbacks ({:.2}% of confirms), {} revokes before Tm; {} violations",
            o.delivered,
            us(o.latency_ns.p50 as f64),
            us(r.latency_ns.p50 as f64),
            o.rollbacks,
            100.0 * o.rollback_fraction,
            o.revokes_early,
            o.violations
        );
    }
    println!("  checks      {checks}");
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(r).expect("report serializes");
        if let Err(e) = std::fs::write(path, json + "\n") {
            eprintln!("onepipe up: --json: cannot write {}: {e}", path.display());
            return EXIT_USAGE;
        }
    }
    verdict(r)
}

/// The messages' lines: sent and delivered, throughput, latency, and (reliable) retransmits.
fn print_messages(r: &UpReport) {
    let s = &r.sums;
    println!(
        "  messages    {} sent in {} scatterings, {} delivered ({} reliable), {} dropped late, {} send-failed ({} lost)",
        r.sent, r.scatterings, r.delivered, r.delivered_reliable, s.dropped_late, s.send_failed, s.lost_reported
    );
    println!(
        "  throughput  {:.0} msgs/s delivered (all receivers), {} sends refused (buffer full)",
        r.throughput_msgs_per_s, s.sends_refused_full
    );
    println!(
        "  latency     mean {}  p50 {}  p99 {}  max {}",
        us(r.latency_ns.mean),
        us(r.latency_ns.p50 as f64),
        us(r.latency_ns.p99 as f64),
        us(r.latency_ns.max as f64)
    );
    if r.service == "reliable" {
        println!(
            "  reliable    {} retransmits, {} undelivered",
            s.retransmits, r.checks.undelivered_reliable
        );
    }
}

/// The transport's lines: datagrams and offloads, drops, protection, and CPU time.
fn print_transport(r: &UpReport) {
    let t = &r.transport;
    let offload = match (t.gso, t.gro) {
        (true, true) => format!(
            ", GSO ({} sends) and GRO ({} receives)",
            t.gso_sends, t.gro_receives
        ),
        (true, false) => format!(", GSO ({} sends)", t.gso_sends),
        (false, true) => format!(", GRO on ({} receives)", t.gro_receives),
        (false, false) => String::new(),
    };
    println!(
        "  transport   {} datagrams ({:.0}/s) of up to {} B{offload}, {:.1} packets per datagram",
        t.datagrams_sent, t.datagrams_per_s, t.datagram_len_max, t.packets_per_datagram
    );
    println!(
        "  dropped     {} datagrams at full receive buffers (kernel), {} garbage datagrams",
        t.datagrams_dropped_rcvbuf, t.garbage_dropped
    );
    r.auth.print();
    let busiest: Vec<String> = {
        let mut v: Vec<(&String, &f64)> = t.cpu_s.iter().collect();
        v.sort_by(|a, b| b.1.total_cmp(a.1));
        v.iter()
            .take(4)
            .map(|(n, s)| format!("{n} {s:.2}"))
            .collect()
    };
    println!(
        "  cpu         {:.2} s in all ({:.2} cores over the {:.1} s of traffic); busiest: {}",
        t.cpu_s_total,
        t.cpu_s_total / r.delivery_span_s.max(1e-9),
        r.delivery_span_s,
        busiest.join(", ")
    );
}

impl AuthSummary {
    /// The protection's line (none with `--auth off`).
    fn print(&self) {
        if self.mode != "off" {
            let reasons: Vec<String> = self
                .refused
                .iter()
                .filter(|(_, &n)| n > 0)
                .map(|(k, n)| format!("{n} {}", k.replace('_', " ")))
                .collect();
            let reasons = match reasons.is_empty() {
                true => String::new(),
                false => format!(" ({})", reasons.join(", ")),
            };
            println!(
                "  auth        {}: {} datagrams sealed, {} opened, {} refused{reasons}; {} key epochs activated; {} TLS handshakes refused",
                self.mode, self.sealed, self.opened, self.refused_total, self.key_activations, self.controller_tls_refused
            );
        }
    }
}

impl FailuresReport {
    /// With `--kill`s, the failures' lines: who was declared failed, who led, each §5.2
    /// round, the stall; then every rejoined endpoint's line.
    fn print(&self) {
        if !self.kills.is_empty() {
            let declared: Vec<String> = self
                .declared_failed
                .iter()
                .map(|d| {
                    format!(
                        "p{} at ts {} (round {}, {:.2} s)",
                        d.proc, d.failure_ts, d.round, d.at_s
                    )
                })
                .collect();
            println!(
                "  failures    declared failed: {}{}",
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared.join(", ")
                },
                if self.controller_killed {
                    " (the controller was killed: no failure after it was repaired)"
                } else {
                    ""
                }
            );
            if self.leaders.len() > 1 {
                println!("  controllers led by {}", self.leaders.join(", then "));
            }
            for round in &self.rounds {
                println!(
                    "  round {}     declared by {}, resumed by {}",
                    round.round,
                    round.declared_by,
                    round
                        .resumed_by
                        .as_deref()
                        .unwrap_or("nobody (not resumed)")
                );
            }
            let after: Vec<String> = self
                .delivered_after_kills
                .iter()
                .map(|(p, k)| format!("{p} {k}"))
                .collect();
            println!(
                "  stall       longest delivery gap of a correct process after the first kill: {:.1} ms{}; delivered after the last kill: {}",
                self.stall_ms,
                self.stall_proc.map_or(String::new(), |p| format!(" (p{p})")),
                after.join(", ")
            );
        }
        for j in &self.rejoined {
            println!(
                "  rejoined    p{} as p{} (§5.2: recovered, a new process): sent {}, delivered {}",
                j.proc, j.as_proc, j.sent, j.delivered
            );
        }
    }
}

/// The exit code of a run whose report is `r`: a violation (said on standard error), a run
/// not drained, or 0.
fn verdict(r: &UpReport) -> i32 {
    let c = &r.checks;
    let mut code = 0;
    if c.violations > 0 || c.undelivered_reliable > 0 {
        eprintln!("onepipe up: {} violation(s):", c.violations);
        for v in &c.violation_samples {
            eprintln!("  {v}");
        }
        code = EXIT_VIOLATION;
    }
    if !c.drained {
        // Liveness: every message is delivered or reported lost to its sender (§2.1); a run
        // whose drain limit passed first has not shown that, so it fails.
        eprintln!(
            "onepipe up: not drained within --drain: {} message(s) neither delivered nor reported lost{}",
            c.undrained,
            if c.undrained_samples.is_empty() { "" } else { ", e.g.:" }
        );
        for u in &c.undrained_samples {
            eprintln!("  {u}");
        }
        code = EXIT_VIOLATION;
    }
    code
}
