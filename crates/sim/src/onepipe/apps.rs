//! Applications on the simulated 1Pipe hosts (`--app`): each process runs an application role
//! (`onepipe_apps::App`) in place of the synthetic workload. The host's core charges its
//! deliveries and sends as for any traffic; what the application hands in goes out through the
//! host's `send` or `send_reliable`, each part behind the 16-byte header the synthetic workload
//! uses (scattering id, send time), so 1Pipe's own checkers judge the application's traffic as
//! they judge the synthetic one. The application's checker judges the application.

use super::*;
use crate::config::AppSpec;
use crate::metrics::Summary;
use onepipe_apps::kv::check::KvChecker;
use onepipe_apps::kv::workload::TxnGen;
use onepipe_apps::kv::{Committed, KvConfig, KvProcess, KvStats, TxnKind};
use onepipe_apps::{App, AppInput, AppSend};
use onepipe_proto::rng::Rng;
use std::collections::HashMap;

/// The applications of a run.
pub(super) struct AppRun {
    /// One per process id of the first incarnations.
    procs: Vec<KvProcess>,
    /// Reliable sends waiting for their timestamp: host handle → (process, application tag).
    tags: HashMap<(u32, u64), u64>,
    /// Per host, the released commit barrier the applications were last told.
    released: Vec<Option<Timestamp>>,
    /// The committed transactions (checked at the end, and written by `--history`).
    checker: KvChecker,
    /// Transaction latency by kind (read-only, write-only, read-write), the initiator's clock.
    latency: [NsHistogram; 3],
    /// Transactions committed before the workload stopped.
    committed_in_period: u64,
    duration_ns: u64,
}

/// What an application run reports (`Report::app`).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct AppReport {
    /// The application (`kv`).
    pub app: String,
    /// Transactions committed, and by kind.
    pub committed: u64,
    /// See `committed`.
    pub committed_ro: u64,
    /// See `committed`.
    pub committed_wo: u64,
    /// See `committed`.
    pub committed_rw: u64,
    /// Transactions per second committed while the initiators were issuing, all processes.
    pub txns_per_s: f64,
    /// The same per process.
    pub txns_per_s_per_proc: f64,
    /// Transaction latency (first send to last reply, the initiator's clock), by kind.
    pub latency_ns_ro: Summary,
    /// See `latency_ns_ro`.
    pub latency_ns_wo: Summary,
    /// See `latency_ns_ro`.
    pub latency_ns_rw: Summary,
    /// The processes' counters, summed.
    pub stats: KvStats,
    /// Transactions and reads the checker replayed, and what it found.
    pub checked_transactions: u64,
    /// See `checked_transactions`.
    pub checked_reads: u64,
    /// See `checked_transactions`.
    pub violations: u64,
    /// The first few violations.
    pub violation_samples: Vec<String>,
}

impl AppRun {
    /// The applications of `spec` on `procs` processes.
    pub(super) fn new(cfg: &SimConfig, spec: &AppSpec, procs: u32, hosts: u32) -> AppRun {
        let AppSpec::Kv { workload, window } = spec;
        let zipf = workload.zipf();
        let mut seeds = Rng::new(cfg.seed ^ 0xA995);
        let procs = (0..procs)
            .map(|p| {
                let mut kc = KvConfig::new(ProcId(p), procs, workload.clone(), *window);
                // Local clocks read about true time plus the epoch.
                kc.start = Instant(cfg.clock_epoch_ns);
                kc.stop = Instant(cfg.clock_epoch_ns + cfg.duration_ns);
                KvProcess::new(kc, TxnGen::new(workload.clone(), zipf, seeds.next_u64()))
            })
            .collect();
        AppRun {
            procs,
            tags: HashMap::new(),
            released: vec![None; hosts as usize],
            checker: KvChecker::new(),
            latency: Default::default(),
            committed_in_period: 0,
            duration_ns: cfg.duration_ns,
        }
    }

    /// The earliest timer of the applications of `procs`.
    pub(super) fn poll_timeout(&self, procs: &[ProcId]) -> Option<Instant> {
        procs
            .iter()
            .filter_map(|p| self.procs.get(p.index())?.poll_timeout())
            .min()
    }

    /// True when no transaction is in flight and no read waits.
    pub(super) fn idle(&self) -> bool {
        self.procs
            .iter()
            .all(|p| p.inflight() == 0 && p.waiting_reads() == 0)
    }

    /// What is still open, for `ONEPIPE_SIM_TRACE`.
    pub(super) fn describe(&self) -> String {
        let open: Vec<String> = self
            .procs
            .iter()
            .enumerate()
            .filter(|(_, p)| p.inflight() + p.waiting_reads() > 0)
            .map(|(i, p)| {
                format!(
                    "p{i}: {} in flight, {} reads waiting",
                    p.inflight(),
                    p.waiting_reads()
                )
            })
            .collect();
        format!(
            "{} reliable sends awaiting their timestamp; {open:?}",
            self.tags.len()
        )
    }

    fn record(&mut self, c: Committed, epoch_ns: u64) {
        let k = match c.kind {
            TxnKind::ReadOnly => 0,
            TxnKind::WriteOnly => 1,
            TxnKind::ReadWrite => 2,
        };
        self.latency[k].record(c.return_ns.saturating_sub(c.call_ns));
        if c.return_ns <= epoch_ns + self.duration_ns {
            self.committed_in_period += 1;
        }
        self.checker.on_commit(c);
    }

    /// The report: counters, latency and the checker's verdict (`skew_ns`: how far the
    /// initiators' clocks may disagree).
    pub(super) fn report(&self, skew_ns: u64) -> AppReport {
        let mut s = KvStats::default();
        for p in &self.procs {
            let q = p.stats();
            s.committed_ro += q.committed_ro;
            s.committed_wo += q.committed_wo;
            s.committed_rw += q.committed_rw;
            s.ro_retries += q.ro_retries;
            s.refused += q.refused;
            s.abandoned += q.abandoned;
            s.reads += q.reads;
            s.writes += q.writes;
            s.ro_waited += q.ro_waited;
            s.replies_resent += q.replies_resent;
            s.malformed += q.malformed;
            s.stale_replies += q.stale_replies;
        }
        let v = self.checker.verdict(skew_ns);
        let secs = self.duration_ns.max(1) as f64 / 1e9;
        let txns_per_s = self.committed_in_period as f64 / secs;
        AppReport {
            app: "kv".into(),
            committed: s.committed_ro + s.committed_wo + s.committed_rw,
            committed_ro: s.committed_ro,
            committed_wo: s.committed_wo,
            committed_rw: s.committed_rw,
            txns_per_s,
            txns_per_s_per_proc: txns_per_s / self.procs.len().max(1) as f64,
            latency_ns_ro: self.latency[0].summary(),
            latency_ns_wo: self.latency[1].summary(),
            latency_ns_rw: self.latency[2].summary(),
            stats: s,
            checked_transactions: v.transactions,
            checked_reads: v.reads,
            violations: v.violations,
            violation_samples: v.samples.iter().map(|x| x.to_string()).collect(),
        }
    }

    /// The run's single-key operations as JSON (`--history`).
    pub(super) fn history_json(&self) -> String {
        self.checker.history_json()
    }
}

impl<Q: EventQueue<Ev>> World<Q> {
    /// Hands `input` to process `proc`'s application on host `h`, then carries out what it asks.
    pub(super) fn app_input(
        &mut self,
        t: SimTime,
        h: u32,
        local: Instant,
        proc: u32,
        input: AppInput<'_>,
    ) {
        let Some(apps) = self.proto.apps.as_mut() else {
            return;
        };
        let Some(app) = apps.procs.get_mut(proc as usize) else {
            return;
        };
        app.handle(local, input);
        self.drain_app(t, h, local, proc);
    }

    /// Carries out process `proc`'s sends and records what it committed.
    fn drain_app(&mut self, t: SimTime, h: u32, local: Instant, proc: u32) {
        let epoch = self.cfg.clock_epoch_ns;
        loop {
            let Some(apps) = self.proto.apps.as_mut() else {
                return;
            };
            let app = &mut apps.procs[proc as usize];
            if let Some(s) = app.poll_send() {
                self.app_send(t, h, local, proc, s);
                continue;
            }
            let Some(c) = app.poll_committed() else {
                return;
            };
            apps.record(c, epoch);
        }
    }

    /// One send of process `proc`'s application: each part behind the synthetic workload's
    /// header, through the host.
    fn app_send(&mut self, t: SimTime, h: u32, local: Instant, proc: u32, s: AppSend) {
        let seq = self.proto.scatter_seq[proc as usize];
        let mut parts: Vec<(ProcId, Bytes)> = s
            .parts
            .into_iter()
            .map(|(d, body)| {
                let mut b = BytesMut::with_capacity(PAYLOAD_HEADER_LEN + body.len());
                b.put_u64(seq);
                b.put_u64(t);
                b.extend_from_slice(&body);
                (d, b.freeze())
            })
            .collect();
        parts.sort_unstable_by_key(|p| p.0);
        let dsts = Dsts::List(parts.iter().map(|p| p.0 .0).collect());
        let n = parts.len() as u64;
        let host = &mut self.proto.hosts[h as usize].host;
        let sent = if s.reliable {
            host.send_reliable(local, ProcId(proc), &parts).map(Err)
        } else {
            host.send(local, ProcId(proc), &parts).map(Ok)
        };
        let answer = match sent {
            Ok(stamped) => {
                self.proto.scatter_seq[proc as usize] += 1;
                self.proto.stats.scatterings += 1;
                self.proto.stats.messages_sent += n;
                match stamped {
                    Ok(ts) => {
                        self.record_send(t, h, proc, seq, ts, dsts, false);
                        Some(AppInput::Sent { tag: s.tag, ts })
                    }
                    Err(handle) => {
                        if let Some(apps) = self.proto.apps.as_mut() {
                            apps.tags.insert((h, handle), s.tag);
                        }
                        self.proto.hosts[h as usize]
                            .reliable_queued
                            .push_back((handle, proc, seq, dsts));
                        None
                    }
                }
            }
            Err(onepipe_proto::host::SendError::Full) => {
                self.proto.stats.sends_refused_full += 1;
                Some(AppInput::Refused { tag: s.tag })
            }
            Err(_) => {
                self.proto.stats.sends_to_failed += 1;
                Some(AppInput::Refused { tag: s.tag })
            }
        };
        // What the application hears of it; what it sends in turn, `drain_app` carries out.
        if let (Some(input), Some(apps)) = (answer, self.proto.apps.as_mut()) {
            apps.procs[proc as usize].handle(local, input);
        }
    }

    /// Host `h` stamped its reliable send `handle` at `ts`: its application hears of it.
    pub(super) fn app_reliable_sent(
        &mut self,
        t: SimTime,
        h: u32,
        local: Instant,
        proc: u32,
        handle: u64,
        ts: Timestamp,
    ) {
        let Some(tag) = self
            .proto
            .apps
            .as_mut()
            .and_then(|a| a.tags.remove(&(h, handle)))
        else {
            return;
        };
        self.app_input(t, h, local, proc, AppInput::Sent { tag, ts });
    }

    /// Host `h` aborted its reliable send `handle` (a destination failed).
    pub(super) fn app_reliable_aborted(
        &mut self,
        t: SimTime,
        h: u32,
        local: Instant,
        proc: u32,
        handle: u64,
    ) {
        let Some(tag) = self
            .proto
            .apps
            .as_mut()
            .and_then(|a| a.tags.remove(&(h, handle)))
        else {
            return;
        };
        self.app_input(t, h, local, proc, AppInput::Refused { tag });
    }

    /// Host `h`'s processes: each whose application timer is due runs it.
    pub(super) fn app_timeouts(&mut self, t: SimTime, h: u32, local: Instant) {
        let procs = self.proto.hosts[h as usize].host.config().procs.clone();
        for p in procs {
            let due = self
                .proto
                .apps
                .as_ref()
                .and_then(|a| a.procs.get(p.index())?.poll_timeout())
                .is_some_and(|d| d <= local);
            if due {
                self.app_input(t, h, local, p.0, AppInput::Timeout);
            }
        }
    }

    /// Every process of host `h` hears of `input` (a failure).
    pub(super) fn app_broadcast(
        &mut self,
        t: SimTime,
        h: u32,
        local: Instant,
        input: AppInput<'_>,
    ) {
        let procs = self.proto.hosts[h as usize].host.config().procs.clone();
        for p in procs {
            self.app_input(t, h, local, p.0, input);
        }
    }

    /// If host `h`'s released commit barrier moved since its applications last heard, they hear
    /// now; returns whether they did (what they sent is then among the host's outputs).
    pub(super) fn app_released(&mut self, t: SimTime, h: u32, local: Instant) -> bool {
        let Some(apps) = self.proto.apps.as_mut() else {
            return false;
        };
        let now = self.proto.hosts[h as usize]
            .host
            .commit_released()
            .map(|b| b.timestamp());
        if now == apps.released[h as usize] {
            return false;
        }
        apps.released[h as usize] = now;
        if let Some(ts) = now {
            self.app_broadcast(t, h, local, AppInput::CommitReleased { ts });
        }
        true
    }

    /// The application's report, if the run has one.
    pub fn app_report(&self) -> Option<AppReport> {
        let skew = (20.0 * self.cfg.clock_skew_ns) as u64 + 1_000;
        self.proto.apps.as_ref().map(|a| a.report(skew))
    }

    /// The application's history as JSON (`--history`), if the run has one.
    pub fn app_history_json(&self) -> Option<String> {
        self.proto.apps.as_ref().map(AppRun::history_json)
    }
}
