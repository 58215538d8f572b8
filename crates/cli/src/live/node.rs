//! `onepipe node`: one workload endpoint. It joins the cluster through the public
//! [`Endpoint`] API, sends scatterings at a paced rate for a while, receives on two threads
//! (best effort and reliable), and records everything for the checkers.
//!
//! Under `onepipe up` (`--supervised`) it follows orders on standard input, so that every node
//! starts, stops sending and stops draining at the same moments:
//!
//! ```text
//! node → up   ready <proc> <udp addr> [metrics <addr>]
//! up → node   start <t0>           (CLOCK_MONOTONIC ns: when to start sending)
//! node → up   sent <max ts> <n>    (sending ended and every own send is resolved)
//! up → node   drain <M>            (the largest timestamp anyone sent)
//! node → up   done <drained>       (barriers passed M, or the drain limit; records written)
//! up → node   stop                 (or end of input: leave and exit)
//! node → up   event <text>         (at any time: a process failed, …)
//! ```
//!
//! Alone, it starts at once and drains until its barrier is a few beacon intervals past its
//! own last send.

use super::records::{self, DeliveryRec, FailureRec, HookKind, HookRec, NodeRecords, SendRec};
use super::supervise;
use super::{NodeArgs, Service, Workload};
use onepipe_proto::optimistic::OptConfig;
use onepipe_proto::rng::Rng;
use onepipe_proto::{ProcId, Timestamp};
use onepipe_runtime::clock::monotonic_ns;
use onepipe_runtime::endpoint::{
    Endpoint, Event, FailReason, JoinOptions, Optimistic, RecvError, SendError, SendHandle,
};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{error, info};

/// A reliable scattering waiting for its stamp: (seq, send time, destinations).
type Unstamped = (u64, u64, Option<Vec<u32>>);

/// Reliable scatterings sent and not yet stamped, and stamps that came back before the sender
/// had recorded their scattering (a send returns its handle after the I/O thread may already
/// have stamped it: neither side holds a lock across the send).
#[derive(Default)]
struct Stamps {
    waiting: BTreeMap<SendHandle, Unstamped>,
    /// Stamped (`Some`: the stamp and the process it was sent as) or aborted (`None`, §5.2)
    /// before the sender recorded them.
    early: BTreeMap<SendHandle, Option<(Timestamp, u32)>>,
}

impl Stamps {
    /// The sender's side: `handle` was sent; the record if its stamp is already in.
    fn sent(&mut self, handle: SendHandle, u: Unstamped) -> Option<SendRec> {
        match self.early.remove(&handle) {
            Some(Some((ts, proc))) => Some(stamped(u, ts, proc)),
            // Aborted: never stamped, never sent.
            Some(None) => None,
            None => {
                self.waiting.insert(handle, u);
                None
            }
        }
    }

    /// The event thread's side: `handle` was stamped `ts` by process `proc`; the record if it
    /// was sent.
    fn stamp(&mut self, handle: SendHandle, ts: Timestamp, proc: u32) -> Option<SendRec> {
        match self.waiting.remove(&handle) {
            Some(u) => Some(stamped(u, ts, proc)),
            None => {
                self.early.insert(handle, Some((ts, proc)));
                None
            }
        }
    }

    /// The event thread's side: `handle` was aborted before it was stamped (§5.2).
    fn abort(&mut self, handle: SendHandle) {
        if self.waiting.remove(&handle).is_none() {
            self.early.insert(handle, None);
        }
    }
}

fn stamped((seq, send_ns, dsts): Unstamped, ts: Timestamp, proc: u32) -> SendRec {
    SendRec {
        proc,
        seq,
        ts: ts.raw(),
        send_ns,
        reliable: true,
        dsts,
    }
}

/// What the receive and event threads share with the sender.
struct Shared {
    ep: Endpoint,
    stop_receiving: AtomicBool,
    deliveries: [Mutex<Vec<DeliveryRec>>; 2],
    failures: Mutex<Vec<FailureRec>>,
    /// Optimistic hooks (`--optimistic-delta`), in the order they were taken.
    hooks: Mutex<Vec<HookRec>>,
    /// Reliable scatterings sent and not yet stamped: handle → (seq, send time, dsts).
    unstamped: Mutex<Stamps>,
    stamped: Mutex<Vec<SendRec>>,
    last_delivery_ns: AtomicU64,
    malformed: AtomicU64,
    /// §5.2: timestamps of this process's reliable scatterings that were recalled (bounded by
    /// [`RECALLED_MAX`]).
    recalled: Mutex<Vec<u64>>,
    /// The drain limit passed: stop waiting for unstamped reliable scatterings.
    given_up: AtomicBool,
    /// §5.2: processes the failure callback named (no more sends to them).
    failed: Mutex<BTreeSet<u32>>,
    /// §5.2 rejoin: each process slot's id now (slot `i` is process `i` until it rejoins under
    /// a new id).
    ids: Mutex<Vec<u32>>,
    /// §5.2: the controller declared this process failed (it is cut off): stop waiting for
    /// acknowledgements and barriers that cannot come.
    declared: AtomicBool,
    /// Receive and event threads that have finished (and handed over what they recorded).
    finished: std::sync::atomic::AtomicUsize,
}

/// The receive threads (one per service), the event thread and the hooks thread.
const THREADS: usize = 4;

/// Most recalled scatterings recorded (a recall is rare: a round aborts what was in flight).
const RECALLED_MAX: usize = 1 << 20;

/// Prints a line for `up` (or a person) at once.
pub(super) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub fn run(args: &NodeArgs, metrics: &super::daemons::NodeMetrics) -> i32 {
    if let Err(e) = args.work.check().and_then(|()| args.protocol.check()) {
        eprintln!("onepipe node: {e}");
        return crate::cli::EXIT_USAGE;
    }
    let (stop, orders) = supervise::install(args.supervised);
    let ep = match join(args, metrics) {
        Ok(ep) => ep,
        Err(code) => return code,
    };
    let me = ep.proc();
    let n_procs = ep.cluster().procs();
    let addr = ep.cluster().process(me.0).map(|p| p.addr);
    say(&format!(
        "ready {} {}{}",
        me.0,
        addr.map_or("?".into(), |a| a.to_string()),
        super::daemons::metrics_suffix(metrics.1.as_ref())
    ));
    if args.protocol.baseline() {
        return match super::baseline::run_node(args, ep, &stop, orders.as_ref()) {
            Ok(()) | Err(Exit::Stopped) => 0,
            Err(Exit::Failed(e)) => {
                error!(proc = me.0, "{e}");
                super::EXIT_RUNTIME
            }
        };
    }
    let shared = Arc::new(Shared::new(ep, n_procs));
    let threads: Vec<_> = [false, true]
        .into_iter()
        .map(|reliable| {
            let s = shared.clone();
            let args = args.clone();
            std::thread::spawn(move || receive(&s, &args, reliable))
        })
        .chain(std::iter::once({
            let s = shared.clone();
            std::thread::spawn(move || events(&s))
        }))
        .chain(std::iter::once({
            let s = shared.clone();
            std::thread::spawn(move || hooks(&s))
        }))
        .collect();
    let outcome = drive(args, &shared, &stop, orders.as_ref());
    shared.stop_receiving.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
    let Ok(shared) = Arc::try_unwrap(shared) else {
        unreachable!("every thread has ended");
    };
    let stats = shared.ep.leave();
    match outcome {
        Ok(()) => 0,
        Err(Exit::Stopped) => {
            info!(
                proc = me.0,
                delivered = stats.host.delivered,
                "stopped before the run finished"
            );
            0
        }
        Err(Exit::Failed(e)) => {
            error!(proc = me.0, "{e}");
            super::EXIT_RUNTIME
        }
    }
}

/// Joins the cluster as `args` say; the exit code if it cannot (said on standard error or in
/// the log).
fn join(args: &NodeArgs, metrics: &super::daemons::NodeMetrics) -> Result<Endpoint, i32> {
    let opts = JoinOptions {
        telemetry: super::node_telemetry(metrics),
        proc: args.proc,
        restarted: args.restarted,
        report_reliable_sent: args.work.service == Service::Reliable,
        // Every notice matters to the checkers: at saturation a burst of loss reports must not
        // overflow the queue.
        event_queue_len_max: 1 << 22,
        optimistic: (args.work.optimistic_delta > 0).then(|| {
            let delta = args.work.optimistic_delta;
            match args.work.optimistic_adaptive {
                true => OptConfig::adaptive(delta),
                false => OptConfig::fixed(delta),
            }
        }),
        credentials: match super::node_credentials(args) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("onepipe node: --pki: {e}");
                return Err(crate::cli::EXIT_USAGE);
            }
        },
        ..JoinOptions::default()
    };
    Endpoint::join_any(&args.controller, opts).map_err(|e| {
        let list: Vec<String> = args.controller.iter().map(|a| a.to_string()).collect();
        error!("cannot join {}: {e}", list.join(","));
        super::EXIT_RUNTIME
    })
}

impl Shared {
    /// What the threads share, nothing recorded yet; `n_procs` slots, each its own process.
    fn new(ep: Endpoint, n_procs: u32) -> Shared {
        Shared {
            ep,
            stop_receiving: AtomicBool::new(false),
            deliveries: [Mutex::new(Vec::new()), Mutex::new(Vec::new())],
            failures: Mutex::new(Vec::new()),
            hooks: Mutex::new(Vec::new()),
            unstamped: Mutex::new(Stamps::default()),
            stamped: Mutex::new(Vec::new()),
            last_delivery_ns: AtomicU64::new(monotonic_ns()),
            malformed: AtomicU64::new(0),
            recalled: Mutex::new(Vec::new()),
            failed: Mutex::new(BTreeSet::new()),
            ids: Mutex::new((0..n_procs).collect()),
            given_up: AtomicBool::new(false),
            declared: AtomicBool::new(false),
            finished: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

pub(super) enum Exit {
    /// Told to stop (signal, end of input, `stop`) before the run finished.
    Stopped,
    Failed(String),
}

/// Waits for the next order from `up`; `None` at end of input or stop.
fn order(orders: &Receiver<String>, stop: &AtomicBool) -> Option<String> {
    loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        match orders.recv_timeout(Duration::from_millis(20)) {
            Ok(line) => return Some(line),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => return None,
        }
    }
}

pub(super) fn expect_order(
    orders: Option<&Receiver<String>>,
    stop: &AtomicBool,
    word: &str,
) -> Result<Option<u64>, Exit> {
    let Some(orders) = orders else {
        return Ok(None);
    };
    let line = order(orders, stop).ok_or(Exit::Stopped)?;
    let mut it = line.split_whitespace();
    if it.next() == Some("stop") {
        return Err(Exit::Stopped);
    }
    match (
        line.split_whitespace().next(),
        it.next().map(str::parse::<u64>),
    ) {
        (Some(w), Some(Ok(v))) if w == word => Ok(Some(v)),
        _ => Err(Exit::Failed(format!("expected '{word} <n>', got '{line}'"))),
    }
}

/// The node's life after joining: start, send, resolve, drain, write, wait for stop.
fn drive(
    args: &NodeArgs,
    s: &Shared,
    stop: &AtomicBool,
    orders: Option<&Receiver<String>>,
) -> Result<(), Exit> {
    let t0 = expect_order(orders, stop, "start")?.unwrap_or_else(|| monotonic_ns() + 10_000_000);
    let end = t0 + args.work.duration;
    if args.restarted {
        wait_restarted(args, s, end, stop)?;
    }
    let mut sends = send_loop(args, s, t0, end, stop)?;
    let resolved = resolve(args, s, stop)?;
    sends.append(&mut lock(&s.stamped));
    sends.sort_by_key(|r| r.seq);
    let max_ts = sends
        .iter()
        .map(|r| Timestamp::new(r.ts))
        .max()
        .unwrap_or(Timestamp::new(0));
    let drain_to = match orders {
        Some(_) => {
            say(&format!("sent {} {}", max_ts.raw(), sends.len()));
            Timestamp::new(expect_order(orders, stop, "drain")?.unwrap_or(0))
        }
        // Alone: the others started about when we did; give them a few beacon intervals.
        None => max_ts.plus(20 * s.ep.cluster().beacon_interval_ns),
    };
    let drained =
        drain(args, s, drain_to, stop)? && (resolved || s.declared.load(Ordering::SeqCst));
    if !drained {
        // Reliable scatterings still unstamped now never will be (a destination failed and
        // nobody repaired it: no controller): the event thread stops waiting for them.
        s.given_up.store(true, Ordering::SeqCst);
    }
    // Everything up to the drain point is in the endpoint's queues: the threads empty them,
    // then stop and hand over what they recorded.
    s.stop_receiving.store(true, Ordering::SeqCst);
    wait_threads(s, stop)?;
    // Scatterings stamped after the wait above (a send buffer that drained slowly, e.g. through
    // §5.2 controller forwarding) were still recorded by the event thread: they were sent, and
    // the others may deliver them.
    sends.append(&mut lock(&s.stamped));
    sends.sort_by_key(|r| r.seq);
    if orders.is_none() {
        print_summary(s, sends.len());
    }
    write_records(args, s, sends)?;
    say(&format!("done {drained}"));
    // Keep beaconing until told to go: the others' barriers need ours.
    while let Some(line) = orders.and_then(|o| order(o, stop)) {
        if line.trim() == "stop" {
            break;
        }
    }
    Ok(())
}

/// `--restarted` (§5.2): declared failed, recovered, and back as a new process — or the time
/// is up (`end`) first. Says `rejoined-as` when it is back.
fn wait_restarted(args: &NodeArgs, s: &Shared, end: u64, stop: &AtomicBool) -> Result<(), Exit> {
    let slot = args.proc.unwrap_or(u32::MAX);
    while s.ep.proc().0 == slot && monotonic_ns() < end {
        if stop.load(Ordering::SeqCst) {
            return Err(Exit::Stopped);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if s.ep.proc().0 != slot {
        say(&format!("event rejoined-as {}", s.ep.proc().0));
    }
    Ok(())
}

/// Waits until every own send is resolved — acknowledged, reported, or (reliable) stamped and
/// acknowledged — the drain limit passes, or this process is declared failed; whether every
/// one was.
fn resolve(args: &NodeArgs, s: &Shared, stop: &AtomicBool) -> Result<bool, Exit> {
    let resolve_until = monotonic_ns() + args.drain;
    while (s.ep.pending_sends() > 0 || !lock(&s.unstamped).waiting.is_empty())
        && monotonic_ns() < resolve_until
        && !s.declared.load(Ordering::SeqCst)
    {
        if stop.load(Ordering::SeqCst) {
            return Err(Exit::Stopped);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    // Sends still unresolved past the drain limit are stamped later than the drain point the
    // others stop at: a run with any is not drained (the checkers skip the loss checks).
    Ok(s.ep.pending_sends() == 0 && lock(&s.unstamped).waiting.is_empty())
}

/// Waits until the receive and event threads have finished and handed over what they
/// recorded.
fn wait_threads(s: &Shared, stop: &AtomicBool) -> Result<(), Exit> {
    while s.finished.load(Ordering::SeqCst) < THREADS {
        if stop.load(Ordering::SeqCst) {
            return Err(Exit::Stopped);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The destinations of one scattering, leaving out the processes known to have failed
/// (§5.2: after the failure callback an application stops sending to them).
fn destinations(
    args: &NodeArgs,
    me: u32,
    ids: &[u32],
    rng: &mut Rng,
    failed: &BTreeSet<u32>,
) -> Option<Vec<u32>> {
    let alive = |p: &u32| !failed.contains(p);
    let n = ids.len() as u32;
    // Slots whose process rejoined under a new id (§5.2) are addressed by it.
    let moved = ids.iter().enumerate().any(|(i, &p)| p != i as u32);
    let all = || ids.iter().copied().filter(alive);
    match args.work.workload {
        Workload::AllToAll if failed.is_empty() && !moved => None,
        Workload::AllToAll => Some(all().collect()),
        Workload::OneToOne => {
            let slot = ids.iter().position(|&p| p == me).unwrap_or(me as usize) as u32;
            let to = ids[((slot + n / 2) % n) as usize];
            Some(Some(to).into_iter().filter(alive).collect())
        }
        Workload::Scatter => {
            let mut all: Vec<u32> = all().collect();
            let k = (args.work.scatter_k as usize).min(all.len());
            // A partial Fisher–Yates shuffle: the first k are a uniform choice.
            for i in 0..k {
                let j = i + rng.below((all.len() - i) as u64) as usize;
                all.swap(i, j);
            }
            all.truncate(k);
            all.sort_unstable();
            Some(all)
        }
    }
}

/// Sends paced scatterings from `t0` to `end` — on average `rate` per second, in small bursts
/// of what fell due while the thread slept; returns the best-effort sends (reliable ones are
/// recorded when stamped).
fn send_loop(
    args: &NodeArgs,
    s: &Shared,
    t0: u64,
    end: u64,
    stop: &AtomicBool,
) -> Result<Vec<SendRec>, Exit> {
    let mut me = s.ep.proc().0;
    let n = s.ep.cluster().procs();
    let interval_ns = (1e9 / args.work.rate).max(1.0);
    let reliable = args.work.service == Service::Reliable;
    let mut rng = Rng::new(args.work.seed ^ (u64::from(me) << 32) ^ 0x5EED);
    let mut sends = Vec::with_capacity(expected(args, 1));
    let mut seq: u64 = 0;
    let mut next_due = t0 as f64;
    let mut refused: u64 = 0;
    loop {
        let now = monotonic_ns();
        if now >= end {
            break;
        }
        if stop.load(Ordering::SeqCst) {
            return Err(Exit::Stopped);
        }
        if (now as f64) < next_due {
            // Sleep at least 200 µs and send what fell due meanwhile in a burst: spinning
            // for exact pacing would take a core from the cluster on a small machine.
            let wait = (next_due - now as f64)
                .max(200_000.0)
                .min((end - now) as f64);
            std::thread::sleep(Duration::from_nanos(wait as u64));
            continue;
        }
        // Never more than 10 ms of backlog at once: a stalled sender resumes at the rate, it
        // does not burst.
        next_due = next_due.max(now as f64 - 10e6);
        let dsts = destinations(args, me, &lock(&s.ids), &mut rng, &lock(&s.failed));
        if dsts.as_ref().is_some_and(Vec::is_empty) {
            // Everyone it would send to has failed: this send is skipped.
            next_due += interval_ns;
            continue;
        }
        let payload = records::payload(seq, now, args.work.msg_size);
        let scattering: Vec<(ProcId, bytes::Bytes)> = match &dsts {
            None => (0..n).map(|d| (ProcId(d), payload.clone())).collect(),
            Some(v) => v.iter().map(|&d| (ProcId(d), payload.clone())).collect(),
        };
        // §6.1: a full send buffer makes the send wait for room (`send_*_timeout`: the
        // endpoint wakes it when acknowledgements free the window); a send that had to wait
        // counts as refused once. The wait is cut short now and then to see `stop`.
        let wait = Duration::from_nanos(end.saturating_sub(now)).min(FULL_WAIT_MAX);
        let u = (seq, now, dsts);
        let sent = send_waiting(s, reliable, &scattering, &u, wait, &mut sends, &mut refused);
        match sent {
            Ok(()) => {
                seq += 1;
                next_due += interval_ns;
            }
            // This process was declared failed (§5.2): its role is frozen. It recovers and
            // rejoins as a new process, which sends on until the end (`--pause`); or the time
            // is up first.
            Err(SendError::Failed(p)) if p.0 == me => match wait_rejoined(s, me, end, stop)? {
                Some(new) => me = new,
                None => break,
            },
            // A destination failed (§5.2) before the callback reached the event thread.
            Err(SendError::Failed(p)) => {
                lock(&s.failed).insert(p.0);
            }
            // Still full after waiting: the loop tries again (and checks the time and `stop`).
            Err(SendError::Full) => {}
            Err(e) => return Err(Exit::Failed(format!("send failed: {e}"))),
        }
    }
    REFUSED.store(refused, Ordering::Relaxed);
    Ok(sends)
}

/// Sends scattering `u` (seq, send time, destinations): at once, or, when the send buffer is
/// full, once more after waiting up to `wait` for room (a send that had to wait counts as
/// `refused` once). A best-effort send's record goes to `sends`; a reliable one's is made when
/// it is stamped.
fn send_waiting(
    s: &Shared,
    reliable: bool,
    scattering: &[(ProcId, bytes::Bytes)],
    u: &Unstamped,
    wait: Duration,
    sends: &mut Vec<SendRec>,
    refused: &mut u64,
) -> Result<(), SendError> {
    let (seq, now, dsts) = (u.0, u.1, &u.2);
    let mut waited = false;
    loop {
        let timeout = if waited { wait } else { Duration::ZERO };
        let r = if reliable {
            s.ep.send_reliable_timeout(scattering, timeout).map(|h| {
                let rec = lock(&s.unstamped).sent(h, (seq, now, dsts.clone()));
                lock(&s.stamped).extend(rec);
            })
        } else {
            s.ep.send_unreliable_timeout(scattering, timeout).map(|ts| {
                sends.push(SendRec {
                    proc: s.ep.proc().0,
                    seq,
                    ts: ts.raw(),
                    send_ns: now,
                    reliable: false,
                    dsts: dsts.clone(),
                });
            })
        };
        match r {
            Err(SendError::Full) if !waited => {
                *refused += 1;
                waited = true;
            }
            r => break r,
        }
    }
}

/// Process `me` was declared failed (§5.2): its role is frozen until it recovers and rejoins
/// as a new process, which sends on until `end` (`--pause`). The new id (said to `up`), or
/// `None` if the time is up first.
fn wait_rejoined(s: &Shared, me: u32, end: u64, stop: &AtomicBool) -> Result<Option<u32>, Exit> {
    while s.ep.proc().0 == me && monotonic_ns() < end {
        if stop.load(Ordering::SeqCst) {
            return Err(Exit::Stopped);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if s.ep.proc().0 == me {
        return Ok(None);
    }
    let me = s.ep.proc().0;
    s.declared.store(false, Ordering::SeqCst);
    say(&format!("event rejoined-as {me}"));
    Ok(Some(me))
}

/// Longest single wait for room in a full send buffer before the sender looks at the time and
/// at `stop` again.
const FULL_WAIT_MAX: Duration = Duration::from_millis(50);

/// Sends refused with `SendError::Full` (for the summary).
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// Most messages a receive thread takes at once.
const RECV_BATCH_LEN: usize = 1_024;

/// Most records of one kind set room aside for up front (a bound on address space, not on
/// what is recorded: beyond it the vector grows as usual).
const RECORDS_RESERVED_MAX: usize = 1 << 23;

/// How many records of a kind to set room aside for: what `per_send` records per scattering
/// come to at the asked rate over the duration (slightly more). Growing by doubling instead
/// touches twice the memory, and the kernel zeroes every fresh page: at 64 B messages that
/// was a quarter of an endpoint's CPU time.
fn expected(args: &NodeArgs, per_send: u64) -> usize {
    let sends = args.work.rate * (args.work.duration as f64 / 1e9) * 1.05;
    ((sends * per_send as f64) as usize).min(RECORDS_RESERVED_MAX)
}

/// One receive thread: takes messages of one service, in batches, and records them.
fn receive(s: &Shared, args: &NodeArgs, reliable: bool) {
    // Per scattering a process sends, this one receives on average: one from everyone
    // (all-to-all), k in n of them from everyone (scatter), one from one (one-to-one).
    let receives = match args.work.workload {
        Workload::AllToAll => u64::from(s.ep.cluster().procs()),
        Workload::Scatter => u64::from(args.work.scatter_k),
        Workload::OneToOne => 1,
    };
    let mine = u64::from(reliable == (args.work.service == Service::Reliable));
    let mut local = Vec::with_capacity(expected(args, receives * mine));
    let mut batch = Vec::with_capacity(RECV_BATCH_LEN);
    loop {
        let wait = Duration::from_millis(10);
        let inbox = match reliable {
            true => s.ep.reliable(),
            false => s.ep.best_effort(),
        };
        // Wait for the first, then take what else is there under one lock.
        let r = inbox.recv(wait).map(|first| {
            batch.push(first);
            inbox.poll(RECV_BATCH_LEN - 1, |m| batch.push(m))
        });
        match r {
            Ok(_) => {
                // One reading of the clock per batch: every message of it was in the queue
                // by then (a delivery's time is when the application had it).
                let now = monotonic_ns();
                s.last_delivery_ns.store(now, Ordering::Relaxed);
                for m in batch.drain(..) {
                    let Some((seq, sent_ns)) = records::read_payload(&m.payload) else {
                        s.malformed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    local.push(DeliveryRec {
                        src: m.src.0,
                        dst: m.dst.0,
                        seq,
                        ts: m.ts.raw(),
                        barrier: m.barrier.raw(),
                        delivered_ts: m.delivered_ts.raw(),
                        recv_ns: now,
                        latency_ns: now.saturating_sub(sent_ns),
                        reliable: m.reliable,
                        psn: m.psn,
                    });
                }
            }
            Err(RecvError::Timeout | RecvError::Empty) => {
                if s.stop_receiving.load(Ordering::SeqCst) {
                    break;
                }
            }
            // Closed, or a reason a later runtime adds: nothing more will come.
            Err(_) => break,
        }
    }
    lock(&s.deliveries[usize::from(reliable)]).append(&mut local);
    s.finished.fetch_add(1, Ordering::SeqCst);
}

/// The hooks thread: takes optimistic delivery's hooks (`--optimistic-delta`; with it off,
/// none come) and records them, each with the workload's name for its message.
fn hooks(s: &Shared) {
    let mut local = Vec::new();
    // (ts, src, psn) → the scattering's sequence number, of messages handed over and not yet
    // confirmed or revoked.
    let mut names: BTreeMap<(u64, u32, u32, bool), u64> = BTreeMap::new();
    loop {
        let h = match s.ep.recv_optimistic(Duration::from_millis(10)) {
            Ok(h) => h,
            Err(RecvError::Timeout | RecvError::Empty) => {
                if s.stop_receiving.load(Ordering::SeqCst) {
                    break;
                }
                continue;
            }
            // Closed, or a reason a later runtime adds: nothing more will come.
            Err(_) => break,
        };
        let now = monotonic_ns();
        let mut rec = HookRec {
            kind: HookKind::Deliver,
            src: 0,
            dst: s.ep.proc().0,
            seq: 0,
            at_ns: now,
            usable_ns: 0,
            sent_ns: 0,
            reliable: false,
            rollback: false,
        };
        let key = match h {
            Optimistic::Deliver {
                message: m,
                usable_at,
            } => {
                let Some((seq, sent_ns)) = records::read_payload(&m.payload) else {
                    s.malformed.fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let wait = usable_at.saturating_duration_since(std::time::Instant::now());
                names.insert((m.ts.raw(), m.src.0, m.psn, m.reliable), seq);
                rec.usable_ns = now.saturating_add(wait.as_nanos() as u64);
                (rec.src, rec.dst, rec.seq, rec.sent_ns) = (m.src.0, m.dst.0, seq, sent_ns);
                rec.reliable = m.reliable;
                None
            }
            Optimistic::Revoke {
                ts,
                src,
                psn,
                reliable,
                rollback,
            } => {
                (rec.kind, rec.rollback) = (HookKind::Revoke, rollback);
                Some((ts.raw(), src.0, psn, reliable))
            }
            Optimistic::Confirm {
                ts,
                src,
                psn,
                reliable,
            } => {
                rec.kind = HookKind::Confirm;
                Some((ts.raw(), src.0, psn, reliable))
            }
            // A hook a later runtime adds: nothing this workload records.
            _ => continue,
        };
        if let Some(key) = key {
            // A hook for a message never handed over is recorded under a name no message has:
            // the checker reports it.
            let seq = names.remove(&key).unwrap_or(u64::MAX);
            (rec.src, rec.seq, rec.reliable) = (key.1, seq, key.3);
        }
        local.push(rec);
    }
    lock(&s.hooks).append(&mut local);
    s.finished.fetch_add(1, Ordering::SeqCst);
}

/// The event thread: send failures, reliable stamps, failed processes.
fn events(s: &Shared) {
    loop {
        match s.ep.next_event_timeout(Duration::from_millis(10)) {
            Ok(Event::SendFailed { dst, ts, reason }) => lock(&s.failures).push(FailureRec {
                dst: dst.0,
                ts: ts.raw(),
                reason: reason as u8,
                at_ns: monotonic_ns(),
            }),
            Ok(Event::ReliableSent { handle, ts }) => {
                let rec = lock(&s.unstamped).stamp(handle, ts, s.ep.proc().0);
                lock(&s.stamped).extend(rec);
            }
            // The callback completes when this arm drops it: nothing here outlives it.
            Ok(Event::ProcessFailed {
                proc, reason, ts, ..
            }) => {
                if proc == s.ep.proc() && reason == FailReason::Declared {
                    s.declared.store(true, Ordering::SeqCst);
                }
                if matches!(reason, FailReason::Failed | FailReason::Left) {
                    lock(&s.failed).insert(proc.0);
                }
                // `lost` (a hint) carries no failure timestamp; the others do.
                if !reason.is_declared() {
                    say(&format!("event process-failed {} {reason}", proc.0));
                } else {
                    say(&format!(
                        "event process-failed {} {reason} {}",
                        proc.0,
                        ts.raw()
                    ));
                }
            }
            Ok(Event::Recalled { ts }) => {
                let mut r = lock(&s.recalled);
                if r.len() < RECALLED_MAX {
                    r.push(ts.raw());
                }
            }
            Ok(Event::ReliableAborted { handle }) => {
                // Never stamped, never sent: nothing to record.
                lock(&s.unstamped).abort(handle);
            }
            Ok(Event::AggregatorFailed { name }) => say(&format!("event aggregator-failed {name}")),
            // §5.2: a process came back under a new id; sends to its slot go there now.
            Ok(Event::Rejoined { old, procs }) => {
                if let Some(&new) = procs.first() {
                    let mut ids = lock(&s.ids);
                    if let Some(slot) = ids.iter().position(|&p| p == old.0) {
                        ids[slot] = new.0;
                    }
                }
                let new: Vec<String> = procs.iter().map(|p| p.0.to_string()).collect();
                say(&format!("event rejoined {} {}", old.0, new.join(",")));
            }
            Ok(Event::ControllerChanged) => say("event controller-changed"),
            // An event a later runtime adds: nothing this workload records.
            Ok(_) => {}
            Err(RecvError::Timeout | RecvError::Empty) => {
                if s.stop_receiving.load(Ordering::SeqCst)
                    && (lock(&s.unstamped).waiting.is_empty() || s.given_up.load(Ordering::SeqCst))
                {
                    break;
                }
            }
            // Closed, or a reason a later runtime adds: nothing more will come.
            Err(_) => break,
        }
    }
    s.finished.fetch_add(1, Ordering::SeqCst);
}

/// Waits until everything stamped up to `to` can have been delivered here: the barrier of the
/// service in use has passed it (ordered), or nothing has arrived for a while (unordered); and
/// every own send is resolved. Returns whether that happened before the drain limit.
fn drain(args: &NodeArgs, s: &Shared, to: Timestamp, stop: &AtomicBool) -> Result<bool, Exit> {
    let until = monotonic_ns() + args.drain;
    let reliable = args.work.service == Service::Reliable;
    let quiet_ns = 20 * s.ep.cluster().beacon_interval_ns.max(10_000_000);
    loop {
        if stop.load(Ordering::SeqCst) {
            return Err(Exit::Stopped);
        }
        let passed = if s.ep.cluster().ordered {
            let b = if reliable {
                s.ep.commit_barrier()
            } else {
                s.ep.barrier()
            };
            b.is_some_and(|b| b > to)
        } else {
            monotonic_ns().saturating_sub(s.last_delivery_ns.load(Ordering::Relaxed)) > quiet_ns
        };
        if passed && s.ep.pending_sends() == 0 {
            return Ok(true);
        }
        if monotonic_ns() >= until || s.declared.load(Ordering::SeqCst) {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn write_records(args: &NodeArgs, s: &Shared, sends: Vec<SendRec>) -> Result<(), Exit> {
    let Some(path) = &args.out else {
        return Ok(());
    };
    let mut deliveries = std::mem::take(&mut *lock(&s.deliveries[0]));
    deliveries.append(&mut lock(&s.deliveries[1]));
    let recs = NodeRecords {
        sends,
        deliveries,
        failures: std::mem::take(&mut *lock(&s.failures)),
        hooks: std::mem::take(&mut *lock(&s.hooks)),
    };
    recs.write(path)
        .map_err(|e| Exit::Failed(format!("cannot write {}: {e}", path.display())))?;
    let st = s.ep.stats();
    let summary = json!({
        "proc": s.ep.proc().0,
        "sends_refused_full": REFUSED.load(Ordering::Relaxed),
        "recv_refused_full": st.recv_refused_full,
        "events_dropped": st.events_dropped,
        "malformed_payloads": s.malformed.load(Ordering::Relaxed),
        "recalled": lock(&s.recalled).clone(),
        "declared_failed": s.declared.load(Ordering::SeqCst),
        // §5.2: the role froze at this failure timestamp (the controller told it it failed).
        "frozen_ts": s.ep.declared_failed().map(|ts| ts.raw()),
        "control_dropped": st.control_dropped,
        "dropped_late": st.host.dropped_late,
        "dropped_incomplete": st.host.dropped_incomplete,
        "dropped_full": st.host.dropped_full,
        "dropped_invalid": st.host.dropped_invalid,
        "dropped_duplicate": st.host.dropped_duplicate,
        "send_failed": st.host.send_failed,
        "lost": st.host.lost,
        // The workload sends no plain message (§2.2.2): any delivered would be a forgery.
        "plain_sent": st.host.plain_sent,
        "delivered_plain": st.host.delivered_plain,
        "acks_sent": st.host.acks_sent,
        "beacons_sent": st.host.beacons_sent,
        "retransmits": st.reliable.retransmits,
        "fast_retransmits": st.reliable.fast_retransmits,
        "driver": st.driver.counters(),
        "cpu_ns": onepipe_runtime::process_cpu_ns(),
    });
    let json_path = path.with_extension("json");
    std::fs::write(&json_path, summary.to_string())
        .map_err(|e| Exit::Failed(format!("cannot write {}: {e}", json_path.display())))
}

fn print_summary(s: &Shared, sent: usize) {
    let be = lock(&s.deliveries[0]).len();
    let rel = lock(&s.deliveries[1]).len();
    let st = s.ep.stats();
    say(&format!(
        "p{}: {sent} scatterings sent; {} best-effort and {} reliable messages delivered, {} send failures, {} late drops",
        s.ep.proc().0,
        be,
        rel,
        st.host.send_failed,
        st.host.dropped_late
    ));
}
