//! Applications on the simulated 1Pipe hosts (`--app`): each process runs an application role
//! (an `onepipe_apps::App`, driven as its `AppNode`) in place of the synthetic workload. The
//! host's core charges its deliveries and sends as for any traffic; what the application hands
//! in goes out through the host's `send` or `send_reliable`, each part behind the 16-byte header
//! the synthetic workload uses (scattering id, send time), so 1Pipe's own checkers judge the
//! application's traffic as they judge the synthetic one. The application's checker judges the
//! application.

use super::*;
use crate::apps::{ht_set, kv_processes, repl_set, tpcc_set, AppReport, AppSet, KvSet};
use onepipe_apps::hashtable::HtMode;
use onepipe_apps::kv::{KvProcess, TxnApp};
use onepipe_apps::repl::onertt::OneRttProcess;
use onepipe_apps::repl::ReplApp;
use onepipe_apps::tpcc::{TpccApp, TpccProcess};
use onepipe_proto::app::{AppIo, AppSend, DynAppNode};
use std::collections::HashMap;

/// The applications of a run.
pub(super) struct AppRun {
    /// One per process id of the first incarnations.
    set: Box<dyn AppSet>,
    /// Reliable sends waiting for their timestamp: host handle → (process, application tag).
    tags: HashMap<(u32, u64), u64>,
    /// Per host, the released commit barrier the applications were last told.
    released: Vec<Option<Timestamp>>,
}

impl AppRun {
    /// The applications of `cfg.app` on `procs` processes.
    pub(super) fn new(cfg: &SimConfig, procs: u32, hosts: u32) -> AppRun {
        let repl = repl_set(cfg, procs, |c, g, seed| {
            Box::new(OneRttProcess::new(c, g, seed)) as Box<dyn ReplApp>
        });
        let ht = ht_set(cfg, procs, HtMode::OnePipe);
        let set: Box<dyn AppSet> = match tpcc_set(cfg, procs, |c, g| {
            Box::new(TpccProcess::new(c, g)) as Box<dyn TpccApp>
        }) {
            Some(t) => Box::new(t),
            None if repl.is_some() => Box::new(repl.expect("a replkv run")),
            None if ht.is_some() => Box::new(ht.expect("a hashtable run")),
            None => {
                let kv = kv_processes(cfg, procs)
                    .into_iter()
                    .map(|(kc, gen)| Box::new(KvProcess::new(kc, gen)) as Box<dyn TxnApp>)
                    .collect();
                Box::new(KvSet::new(cfg, kv))
            }
        };
        AppRun {
            set,
            tags: HashMap::new(),
            released: vec![None; hosts as usize],
        }
    }

    /// The earliest timer of the applications of `procs`.
    pub(super) fn poll_timeout(&self, procs: &[ProcId]) -> Option<Instant> {
        procs
            .iter()
            .filter_map(|p| self.set.poll_timeout(p.index()))
            .min()
    }

    /// True when no process but those `dead` has a transaction in flight or a read waiting (a
    /// crashed process's work stays open for ever).
    pub(super) fn idle_except(&self, dead: impl Fn(u32) -> bool) -> bool {
        (0..self.set.len()).all(|p| dead(p as u32) || self.set.proc_idle(p))
    }

    /// What is still open, for `ONEPIPE_SIM_TRACE`.
    pub(super) fn describe(&self) -> String {
        format!(
            "{} reliable sends awaiting their timestamp; {}",
            self.tags.len(),
            self.set.describe()
        )
    }

    /// The report (`skew_ns`: how far the initiators' clocks may disagree; `failed`: the
    /// processes declared failed, with their failure timestamps).
    pub(super) fn report(&self, skew_ns: u64, failed: &HashMap<u32, u64>) -> AppReport {
        self.set.report("1pipe", true, skew_ns, failed)
    }

    /// The run's history as JSON in Jepsen's form (`--history`), if the application has one.
    pub(super) fn history_json(&self) -> Option<String> {
        self.set.history_json()
    }
}

impl<Q: EventQueue<Ev>> World<Q> {
    /// Hands `input` to process `proc`'s application on host `h`, carries out its sends (each
    /// answered before the next is asked for), then records what it committed.
    pub(super) fn app_input(
        &mut self,
        t: SimTime,
        h: u32,
        local: Instant,
        proc: u32,
        input: Input<AppIo>,
    ) {
        let Some(apps) = self.proto.apps.as_mut() else {
            return;
        };
        if proc as usize >= apps.set.len() {
            // A process that rejoined under a new id runs no application.
            return;
        }
        apps.set.node(proc as usize).handle(local, input);
        drive::drain_in(
            self,
            |w| w.app_node(proc),
            |w, o| w.app_send(t, h, local, proc, AppSend::from_output(o)),
        );
        if let Some(apps) = self.proto.apps.as_mut() {
            apps.set.collect(proc as usize, &mut |_, _| {});
        }
    }

    /// Process `proc`'s application, of a run that has applications.
    fn app_node(&mut self, proc: u32) -> &mut DynAppNode {
        let apps = self.proto.apps.as_mut().expect("a run with applications");
        apps.set.node(proc as usize)
    }

    /// One send of process `proc`'s application: each part behind the synthetic workload's
    /// header, through the host; an unordered one ([`AppSend::ordered`] false) waits for
    /// [`World::send_plain`], outside 1Pipe. The application hears at once of its stamp or its
    /// refusal (a reliable send's stamp comes later, [`World::app_reliable_sent`]).
    fn app_send(&mut self, t: SimTime, h: u32, local: Instant, proc: u32, s: AppSend) {
        if !s.ordered {
            for (d, body) in s.parts {
                self.proto.plain_out.push((h, proc, d, body));
            }
            let sent = AppIo::Sent {
                tag: s.tag,
                ts: Timestamp::new(local.as_nanos()),
            };
            self.app_node(proc).handle(local, sent.input());
            return;
        }
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
                        Some(AppIo::Sent { tag: s.tag, ts })
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
                Some(AppIo::Refused { tag: s.tag })
            }
            Err(_) => {
                self.proto.stats.sends_to_failed += 1;
                Some(AppIo::Refused { tag: s.tag })
            }
        };
        // What the application hears of it; what it sends in turn, the drain in `app_input`
        // carries out.
        if let Some(answer) = answer {
            self.app_node(proc).handle(local, answer.input());
        }
    }

    /// Sends the unordered messages host `h`'s applications asked for, each charged as a
    /// packet sent from `cursor` on; returns where the host's CPU is then. They bypass 1Pipe
    /// (no timestamp order, no reorder buffer, no 1Pipe checker: replies that need no place in
    /// the order, §2.2.2) and the links: each arrives after its path's unloaded latency —
    /// serialization and delay of every link of its ECMP path, as a data packet of its size
    /// would take with empty queues — and is never lost. A message between two processes of
    /// one host takes no time.
    pub(super) fn send_plain(&mut self, h: u32, mut cursor: SimTime, local: Instant) -> SimTime {
        if self.proto.plain_out.is_empty() {
            return cursor;
        }
        let out = std::mem::take(&mut self.proto.plain_out);
        let ps_per_byte = engine::ps_per_byte(&self.cfg);
        for (from, src, dst, payload) in out {
            debug_assert_eq!(from, h, "only the host being handled sends");
            cursor += self.cfg.net.host_send_ns;
            let Some(dh) = self.proto.router.host_of(dst) else {
                self.proto.stats.sends_to_failed += 1;
                continue;
            };
            let delay = if dh == h {
                0
            } else {
                let bytes = (PAYLOAD_HEADER_LEN
                    + payload.len()
                    + onepipe_proto::wire::DATA_HEADER_LEN
                    + onepipe_proto::wire::FRAMING_LEN) as u64;
                let hash = flow_hash(self.proto.router.seed, h, dh);
                let hops = self.topo.path(h, dh, hash).len() as u64;
                hops * ((bytes * ps_per_byte).div_ceil(1000) + self.cfg.net.link_delay_ns)
            };
            let msg = self.proto.plain_msgs.insert(PlainMsg {
                host: dh,
                src: ProcId(src),
                dst,
                ts: Timestamp::new(local.as_nanos()),
                payload,
            });
            self.proto.plain_in_flight += 1;
            self.queue
                .push(cursor + delay, Ev::Proto(OnePipeEv::AppPlain { msg }));
        }
        cursor
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
        self.app_input(t, h, local, proc, AppIo::Sent { tag, ts }.input());
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
        self.app_input(t, h, local, proc, AppIo::Refused { tag }.input());
    }

    /// Host `h`'s processes: each whose application timer is due runs it.
    pub(super) fn app_timeouts(&mut self, t: SimTime, h: u32, local: Instant) {
        let procs = self.proto.hosts[h as usize].host.config().procs.clone();
        for p in procs {
            let due = self
                .proto
                .apps
                .as_ref()
                .and_then(|a| a.set.poll_timeout(p.index()))
                .is_some_and(|d| d <= local);
            if due {
                self.app_input(t, h, local, p.0, Input::Timeout);
            }
        }
    }

    /// Every process of host `h` hears of `input` (a failure, the released commit barrier).
    pub(super) fn app_broadcast(&mut self, t: SimTime, h: u32, local: Instant, input: AppIo) {
        let procs = self.proto.hosts[h as usize].host.config().procs.clone();
        for p in procs {
            self.app_input(t, h, local, p.0, input.clone().input());
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
            self.app_broadcast(t, h, local, AppIo::CommitReleased { ts });
        }
        true
    }

    /// The application's report, if the run has one.
    pub fn app_report(&self) -> Option<AppReport> {
        let skew = crate::apps::realtime_skew_ns(&self.cfg);
        let mut failed = HashMap::new();
        for r in &self.proto.failure_rounds {
            for &(h, ts) in &r.hosts {
                for p in &self.proto.hosts[h as usize].host.config().procs {
                    failed.entry(p.0).or_insert(ts);
                }
                // The host's first processes (the applications' ids), if it rejoined since.
                let pph = self.cfg.net.procs_per_host;
                for p in h * pph..(h + 1) * pph {
                    failed.entry(p).or_insert(ts);
                }
            }
        }
        self.proto.apps.as_ref().map(|a| a.report(skew, &failed))
    }

    /// The application's history as JSON (`--history`), if the run has one.
    pub fn app_history_json(&self) -> Option<String> {
        self.proto.apps.as_ref().and_then(AppRun::history_json)
    }
}
