//! The barrier aggregator (§4.1, Eq. 4.1; §6.2): what a switch — or the CPU or host that stands in
//! for one — does to barriers.
//!
//! The switch keeps one register per input link holding the latest barrier seen on it, and its
//! output barrier is the minimum of the registers (Eq. 4.1). The output barrier never moves
//! backwards: an input whose register lags (a reordered beacon) cannot pull it down.
//!
//! Three incarnations (§6.2), chosen by [`SwitchMode`]:
//! * [`SwitchMode::Chip`] — a programmable switching chip (§6.2.1): every forwarded data packet has
//!   its barrier field rewritten to the output barrier. When a *beacon* advances the output
//!   barrier, a beacon goes out at once on every output link (at most one per link per
//!   `beacon_idle_ns`), so a wave of synchronized host beacons (§4.2) crosses the network in one
//!   pass instead of waiting at every layer for a timer; at each beacon time, every output link
//!   whose last packet carried a stale barrier gets a beacon too. Because hosts stamp their beacons with
//!   the synchronized beacon time itself, a wave changes a switch's minimum once, not once per
//!   input.
//! * [`SwitchMode::Cpu`] — the switch CPU (§6.2.2): data is forwarded unchanged by the chip; the
//!   CPU sees only beacons, which reach it after a processing delay, and periodically sends a beacon
//!   with the minimum on *every* output link.
//! * [`SwitchMode::Host`] — a host representative (§6.2.3): as `Cpu`, with the extra switch↔host
//!   hop folded into the processing delay by whoever configures it.
//!
//! Forwarding (which output port a data packet takes) is not the aggregator's business: it asks a
//! [`Router`]. In the simulator the router is the topology's ECMP table; a live aggregator
//! daemon, which sees only beacons, has none.
//!
//! Reliable 1Pipe (§5.1) adds the commit barrier, aggregated "exactly like best-effort barriers":
//! a second register per input link (beside the first), a second monotone output, both rewritten
//! on forwarded data in chip mode and both carried by every beacon. A beacon goes out when either
//! output moved.
//!
//! Failures (§4.2, "Handling failures"): an input link that says nothing — no beacon, no data —
//! for `link_timeout_intervals` beacon intervals is removed from the best-effort minimum, so the
//! barrier resumes (the commit barrier stays held: §5.2's controller must decide first); a removed link that speaks again is added back, and because the output never moves
//! backwards, B_new is in effect suspended until the new link's barrier passes it ("Addition of
//! new hosts and links"). So that a stalled barrier is not mistaken for a dead link downstream, a
//! switch sends a keep-alive beacon (its unchanged barriers) on every output link that carried
//! nothing during a beacon interval.

use crate::failure::{CtrlMsg, Mgmt, MgmtDest, RelayMsg};
use crate::gaps::BarrierGaps;
use crate::ids::{LinkId, NodeId, PortId, ProcId};
use crate::node::{Input, Node, Output};
use crate::time::{next_tick, Instant, Timestamp};
use crate::wire::{flags, Beacon, Packet};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

/// Chooses the output port for a packet addressed to a process.
pub trait Router: core::fmt::Debug + Send + Sync {
    /// The output port at switch `at` for a packet from `src` to `dst`, or `None` if unroutable.
    fn route(&self, at: NodeId, src: ProcId, dst: ProcId) -> Option<PortId>;
}

/// The switch incarnation (§6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SwitchMode {
    /// Programmable chip: per-packet barrier rewrite (§6.2.1).
    Chip,
    /// Switch CPU: periodic beacons after a processing delay (§6.2.2).
    Cpu,
    /// Host representative: as `Cpu` plus the switch↔host hop (§6.2.3).
    Host,
}

impl SwitchMode {
    /// True if data packets carry barriers that this incarnation reads and rewrites.
    pub fn rewrites_data(self) -> bool {
        self == SwitchMode::Chip
    }
}

impl core::str::FromStr for SwitchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "chip" => Ok(SwitchMode::Chip),
            "cpu" => Ok(SwitchMode::Cpu),
            "host" => Ok(SwitchMode::Host),
            _ => Err(format!(
                "unknown switch mode '{s}' (expected chip, cpu or host)"
            )),
        }
    }
}

impl core::fmt::Display for SwitchMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SwitchMode::Chip => "chip",
            SwitchMode::Cpu => "cpu",
            SwitchMode::Host => "host",
        })
    }
}

/// Static configuration of an aggregator.
#[derive(Clone, Debug)]
pub struct SwitchConfig {
    /// This switch's node id (names it in beacons and routing).
    pub node: NodeId,
    /// The incarnation.
    pub mode: SwitchMode,
    /// Number of input links (ports `0..inputs`).
    pub inputs: usize,
    /// Number of output links (ports `0..outputs`).
    pub outputs: usize,
    /// Beacon interval T_beacon (§4.2).
    pub beacon_interval_ns: u64,
    /// Offset of this switch's beacon times within the interval: a switch `d` hops above the
    /// hosts fires when the beacons of the layer below have arrived, so one wave of beacons
    /// crosses the network per interval (§4.2, "sent at synchronized times").
    pub beacon_phase_ns: u64,
    /// Chip mode: least time between two beacons a barrier change triggers on one output link.
    pub beacon_min_gap_ns: u64,
    /// Chip mode, issue 37: after an input's beacon asks for demand ([`Beacon::demand`]), every
    /// beacon this switch sends asks for it too, for this long; the first goes on every output
    /// at once. So a host's need for the barrier reaches every host of the tree within one
    /// crossing, and they beacon at their fast interval. 0: never (the paper's switch).
    pub demand_hold_ns: u64,
    /// Cpu/Host modes: how long a received beacon takes to reach the registers (§6.2.2–6.2.3).
    pub beacon_delay_ns: u64,
    /// Cpu/Host modes: most beacons in flight to the CPU; more are dropped and counted.
    pub pending_max: usize,
    /// An input link silent for this many beacon intervals is removed (§4.2: "e.g., 10 beacon
    /// intervals"); 0 never removes.
    pub link_timeout_intervals: u32,
    /// §5.2: an input reported dead is reported again every this many beacon intervals until
    /// the controller's Resume removes it (the controller may have been down and lost the
    /// report; it ignores duplicates); 0 never.
    pub report_retry_intervals: u32,
    /// §5.2: the link entering each input port, as the controller's routing graph names it —
    /// what the switch's `LinkDown` reports name, and what the controller's `Resume`, `Isolate`
    /// and `Admit` address. Empty: no controller (a silent input is removed and counted, and
    /// reported to nobody).
    pub input_links: Vec<LinkId>,
    /// The node those links enter in the controller's graph (the reporter of its `LinkDown`s);
    /// `None`: [`SwitchConfig::node`].
    pub graph_node: Option<NodeId>,
}

impl SwitchConfig {
    /// A configuration with defaults (3 µs beacons, no phase, no processing delay).
    pub fn new(node: NodeId, mode: SwitchMode, inputs: usize, outputs: usize) -> SwitchConfig {
        SwitchConfig {
            node,
            mode,
            inputs,
            outputs,
            beacon_interval_ns: crate::time::BEACON_INTERVAL_NS_DEFAULT,
            beacon_phase_ns: 0,
            beacon_min_gap_ns: 375,
            demand_hold_ns: 0,
            beacon_delay_ns: 0,
            pending_max: 4096,
            link_timeout_intervals: 10,
            report_retry_intervals: 16,
            input_links: Vec::new(),
            graph_node: None,
        }
    }
}

/// Counters a switch keeps; never reset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Data packets and NAKs forwarded.
    pub forwarded: u64,
    /// Beacons received.
    pub beacons_received: u64,
    /// Beacons sent.
    pub beacons_sent: u64,
    /// Input links removed after a timeout (§4.2).
    pub links_removed: u64,
    /// Input links removed because their host left ([`CtrlMsg::Depart`]).
    pub links_departed: u64,
    /// Removed input links added back when they spoke again (§4.2).
    pub links_added: u64,
    /// §5.2 `LinkDown` reports sent again, the controller not having answered with Resume.
    pub reports_resent: u64,
    /// §5.2 `LinkDown` reports sent (first or again).
    pub links_reported: u64,
    /// Management messages not for this switch (another's link, or a message switches do not
    /// take).
    pub mgmt_dropped: u64,
    /// Packets dropped: unroutable, on an unknown port, or beacon overflow in CPU modes.
    pub dropped: u64,
}

/// Which barrier: index into [`Aggregates`]' per-input pair.
const BE: usize = 0;
/// The commit barrier's index.
const COMMIT: usize = 1;
/// A link that never spoke is timed out after this many times `link_timeout_intervals`.
pub const NEVER_SPOKE_TIMEOUT_FACTOR: u32 = 4;
/// A register that has not heard from its link yet.
const NONE: u64 = u64::MAX;
/// A barrier this far (2^43 ns, about 2.4 hours) or more ahead of the switch's output is garbage,
/// not time: dropped. Timestamps compare on a 2^48 ring (PAWS, §6.1), and barriers that leap
/// across a large part of it would make "ahead" meaningless — several such leaps within one
/// input could even look like the output moving backwards.
pub const BARRIER_JUMP_MAX_NS: u64 = 1 << 43;

/// Eq. 4.1 over all input links, for both barriers (§4.1 best effort, §5.1 commit). The two
/// registers of a link sit side by side — one cache line serves a data packet that carries both —
/// and hold raw timestamps with a sentinel for "not yet" (8 bytes each, not 16).
#[derive(Clone, Debug)]
struct Aggregates {
    /// Per input link, everything kept about it: a packet from the link reads and writes one
    /// 32-byte record (at 1,024 hosts the switches' state does not stay in cache, and separate
    /// arrays per field cost a cache miss each).
    inputs: Vec<InPort>,
    /// The minimum of each barrier's registers once every input has reported (cached for
    /// `update`).
    min_register: [Option<Timestamp>; 2],
    /// How many counted registers hold exactly `min_register` (when it is `Some`). Raising one
    /// of them lowers the count, and only the last one's raise rescans the inputs: a
    /// synchronized beacon wave raises every input from the same value, which would otherwise
    /// rescan on every beacon (N scans of N registers per wave instead of about one).
    min_count: [u32; 2],
    /// B_new of Eq. 4.1 for each barrier, kept monotone.
    out: [Option<Timestamp>; 2],
    /// Barriers dropped as implausible leaps (`BARRIER_JUMP_MAX_NS`).
    garbage: u64,
}

/// One input link of a switch.
#[derive(Clone, Copy, Debug)]
struct InPort {
    /// R_i of Eq. 4.1: [best effort, commit]; `NONE` until the link has spoken.
    registers: [u64; 2],
    /// Beacon times in a row it was silent (§4.2 failure detection).
    silent: u32,
    /// Beacon intervals since it was last reported dead (§5.2 retries).
    since_report: u32,
    /// Heard anything since the last beacon time.
    heard: bool,
    /// Spoke at least once. Before that a link is timed out only after
    /// [`NEVER_SPOKE_TIMEOUT_FACTOR`] times the timeout: a link that is still starting (its
    /// upstream's synchronized beacon phase can exceed the timeout) is not dead.
    spoke: bool,
    /// Removed after a timeout (§4.2); a removed link bounds nothing.
    dead: bool,
    /// Removed from the commit minimum by the controller's Resume (§5.2).
    commit_removed: bool,
    /// Its host left ([`CtrlMsg::Depart`]): removed, and not taken back by a late datagram.
    departed: bool,
    /// Reported dead to the controller (§5.2 Detect); its commit register is frozen at the
    /// value reported. The controller takes the failure timestamp from these reports, so nothing
    /// above it may pass here afterwards — not even when the link speaks again (it was slow, not
    /// dead: VOPR seed 15 at 10 ms, where hosts starved their own beacons and, heard again, raised
    /// the commit barrier above the failure timestamp the controller was about to announce for
    /// them).
    commit_frozen: bool,
}

const _: () = assert!(std::mem::size_of::<InPort>() == 32);

impl InPort {
    const NEW: InPort = InPort {
        registers: [NONE; 2],
        silent: 0,
        since_report: 0,
        heard: false,
        spoke: false,
        dead: false,
        commit_removed: false,
        departed: false,
        commit_frozen: false,
    };
}

/// One output link of a switch.
#[derive(Clone, Copy, Debug)]
struct OutPort {
    /// What the last barrier-carrying packet on the link said.
    last_sent: Outputs,
    /// When the last beacon went out on it.
    last_beacon: Option<Instant>,
    /// Carried something since the last beacon time.
    active: bool,
}

impl Aggregates {
    fn new(inputs: usize) -> Aggregates {
        Aggregates {
            inputs: vec![InPort::NEW; inputs],
            min_register: [None; 2],
            min_count: [0; 2],
            out: [None; 2],
            garbage: 0,
        }
    }

    fn register(&self, port: usize, k: usize) -> Option<Timestamp> {
        let r = self.inputs.get(port)?.registers[k];
        (r != NONE).then(|| Timestamp::new(r))
    }

    /// R_i := B for input `port` and barrier `k` (kept monotone), then B_new := min_i R_i
    /// (Eq. 4.1).
    #[inline(always)]
    fn update(&mut self, port: usize, k: usize, b: Timestamp) {
        if self.raise(port, k, b) {
            self.recompute_one(k);
        }
    }

    /// Both barriers of one input (a beacon, or a chip-mode data packet carrying both).
    #[inline(always)]
    fn update_both(&mut self, port: usize, b: Timestamp, c: Timestamp) {
        self.update(port, BE, b);
        self.update(port, COMMIT, c);
    }

    /// Raises one register; true if the minimum may have moved. Raising a register that was
    /// above the minimum cannot move it: no scan then (the common case — one input in a wave,
    /// or data from a sender that is not the laggard).
    #[inline(always)]
    fn raise(&mut self, port: usize, k: usize, b: Timestamp) -> bool {
        if self.out[k].is_some_and(|o| {
            b > o
                && b.raw().wrapping_sub(o.raw()) & crate::time::TIMESTAMP_MASK
                    >= BARRIER_JUMP_MAX_NS
        }) {
            self.garbage += 1;
            return false;
        }
        if k == COMMIT && self.inputs[port].commit_frozen {
            return false;
        }
        let r = &mut self.inputs[port].registers[k];
        let old = *r;
        if old == NONE {
            *r = b.raw();
            return true;
        }
        let old = Timestamp::new(old);
        let new = old.max_wrapping(b);
        *r = new.raw();
        if new == old || self.excluded(port, k) {
            return false;
        }
        let Some(min) = self.min_register[k] else {
            return true; // not every input has reported: scan
        };
        // A register above the minimum cannot move it; the minimum moves only once the last
        // register holding it rises.
        if old == min {
            debug_assert!(self.min_count[k] > 0);
            self.min_count[k] -= 1;
            return self.min_count[k] == 0;
        }
        if new == min {
            // Only garbage barriers leaping across half the ring get here (from "below" the
            // minimum, where wrapping order is intransitive); keep the count exact anyway.
            self.min_count[k] += 1;
        }
        false
    }

    /// Whether input `port`'s register of barrier `k` is left out of the minimum: a removed
    /// link no longer bounds the best-effort barrier (§4.2); it still bounds the commit barrier
    /// until the controller's Resume removes it (§5.2).
    #[inline(always)]
    fn excluded(&self, port: usize, k: usize) -> bool {
        let p = &self.inputs[port];
        if k == BE {
            p.dead
        } else {
            p.commit_removed
        }
    }

    #[inline(never)]
    fn recompute_one(&mut self, k: usize) {
        let mut min: Option<Timestamp> = None;
        let mut count = 0u32;
        for (i, p) in self.inputs.iter().enumerate() {
            let r = p.registers;
            // A removed link no longer bounds the best-effort barrier (§4.2). It still bounds
            // the commit barrier: "a failed component cannot be simply removed, because
            // otherwise, the in-flight messages sent by the failed component cannot be
            // consistently delivered or discarded" (§5.2) — until the controller's Resume.
            if self.excluded(i, k) {
                continue;
            }
            if r[k] == NONE {
                // An input that never spoke bounds nothing yet: no minimum, so every raise
                // scans again until all have spoken.
                self.min_register[k] = None;
                return;
            }
            let v = Timestamp::new(r[k]);
            match min {
                Some(m) if v == m => count += 1,
                Some(m) if v > m => {}
                _ => (min, count) = (Some(v), 1),
            }
        }
        self.min_count[k] = count;
        if min.is_none() {
            self.min_register[k] = None; // every input removed: nothing to cache
        }
        self.set_min(k, min);
    }

    /// §4.2: removes or re-adds an input link, and recomputes both minimums.
    #[cold]
    fn set_dead(&mut self, port: usize, dead: bool) {
        self.inputs[port].dead = dead;
        // A removed link's minimum must be forgotten, or `raise` would skip scans it needs.
        self.min_register = [None; 2];
        self.recompute_one(BE);
        self.recompute_one(COMMIT);
    }

    /// Debug builds: the cached minimum and its count agree with a scan of the registers.
    fn check(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        for k in [BE, COMMIT] {
            let Some(m) = self.min_register[k] else {
                continue;
            };
            let counted: Vec<u64> = (0..self.inputs.len())
                .filter(|&i| !self.excluded(i, k))
                .map(|i| self.inputs[i].registers[k])
                .collect();
            assert!(
                counted.iter().all(|&r| r != NONE),
                "a minimum over a silent input"
            );
            // (Whether every register is at or above `m` is not checked: garbage barriers that
            // leap across half the 48-bit ring make the wrapping order intransitive, and no
            // cached or scanned minimum is meaningful then — `BARRIER_JUMP_MAX_NS` bounds them.)
            let at_min = counted.iter().filter(|&&r| r == m.raw()).count();
            assert_eq!(at_min, self.min_count[k] as usize, "minimum count");
        }
    }

    /// Stores a new minimum (all inputs reported) and raises the output to it — never
    /// backwards (§4.2: "the switch must maintain monotonicity of its B_new").
    fn set_min(&mut self, k: usize, min: Option<Timestamp>) {
        let Some(m) = min else {
            return;
        };
        self.min_register[k] = Some(m);
        self.out[k] = Some(self.out[k].map_or(m, |o| o.max_wrapping(m)));
    }
}

/// Both outputs of a switch at one moment: (best-effort barrier, commit barrier).
type Outputs = (Option<Timestamp>, Option<Timestamp>);

/// The barrier aggregator. See the module docs.
#[derive(Debug)]
pub struct Switch {
    cfg: SwitchConfig,
    router: Option<Arc<dyn Router>>,
    /// Both barriers' registers and outputs (§4.1, §5.1).
    agg: Aggregates,
    /// Per output link.
    out_ports: Vec<OutPort>,
    /// Cpu/Host modes: beacons on their way to the CPU: (ready at, input port, barrier, commit).
    pending: VecDeque<(Instant, PortId, Timestamp, Timestamp)>,
    next_beacon: Instant,
    /// Chip mode: when deferred change-triggered beacons are due.
    flush_at: Option<Instant>,
    /// Beacons ask for demand until then ([`SwitchConfig::demand_hold_ns`]).
    demand_until: Instant,
    /// Per input link, when barriers arrived on it, for metrics (apart from `agg`: a packet's
    /// hot path reads nothing of it).
    gaps: Vec<BarrierGaps>,
    outputs: VecDeque<Output<Packet, Infallible, Mgmt>>,
    stats: SwitchStats,
}

impl Switch {
    /// A switch at local time `now`.
    ///
    /// # Panics
    /// On a zero beacon interval: a configuration bug of the caller.
    pub fn new(cfg: SwitchConfig, router: Option<Arc<dyn Router>>, now: Instant) -> Switch {
        assert!(
            cfg.beacon_interval_ns > 0,
            "beacon interval must be positive"
        );
        Switch {
            agg: Aggregates::new(cfg.inputs),
            out_ports: vec![
                OutPort {
                    last_sent: (None, None),
                    last_beacon: None,
                    active: false,
                };
                cfg.outputs
            ],
            pending: VecDeque::new(),
            next_beacon: next_tick(now, cfg.beacon_interval_ns, cfg.beacon_phase_ns),
            flush_at: None,
            demand_until: now,
            gaps: vec![BarrierGaps::default(); cfg.inputs],
            outputs: VecDeque::new(),
            stats: SwitchStats::default(),
            router,
            cfg,
        }
    }

    /// Performance hint for a driver that knows a packet from input `port` is among this switch's
    /// next inputs: starts loading what forwarding it reads, to the depth of `stage` (see
    /// [`crate::prefetch`]). Changes nothing.
    #[inline]
    pub fn prefetch(&self, stage: crate::prefetch::Stage, port: PortId) {
        use crate::prefetch::{prefetch, Stage};
        match stage {
            Stage::Fields => {
                prefetch(&self.cfg);
                prefetch(&self.agg);
                prefetch(&self.out_ports);
                prefetch(&self.stats);
            }
            Stage::Records => {
                if let Some(p) = self.agg.inputs.get(port.index()) {
                    prefetch(p);
                }
            }
            Stage::Peers | Stage::Entries => {}
        }
    }

    /// Prefetch hint: output `port`'s record (see [`crate::prefetch`]).
    #[inline]
    pub fn prefetch_output(&self, port: PortId) {
        if let Some(p) = self.out_ports.get(port.index()) {
            crate::prefetch::prefetch(p);
        }
    }

    /// The output port a packet from `src` to `dst` takes here, if this switch routes (a hint's
    /// helper: the same answer [`Switch::forward`] will compute).
    #[inline]
    pub fn route(&self, src: ProcId, dst: ProcId) -> Option<PortId> {
        self.router.as_ref()?.route(self.cfg.node, src, dst)
    }

    /// The configuration.
    pub fn config(&self) -> &SwitchConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &SwitchStats {
        &self.stats
    }

    /// The output barrier B_new (Eq. 4.1), once every input link has reported.
    pub fn barrier(&self) -> Option<Timestamp> {
        self.agg.out[BE]
    }

    /// The output commit barrier (§5.1), once every input link has reported one.
    pub fn commit_barrier(&self) -> Option<Timestamp> {
        self.agg.out[COMMIT]
    }

    /// The best-effort register of one input link.
    pub fn register(&self, port: PortId) -> Option<Timestamp> {
        self.agg.register(port.index(), BE)
    }

    /// The commit register of one input link.
    pub fn commit_register(&self, port: PortId) -> Option<Timestamp> {
        self.agg.register(port.index(), COMMIT)
    }

    /// Barriers dropped as implausible leaps ahead of the output ([`BARRIER_JUMP_MAX_NS`]).
    pub fn barriers_rejected(&self) -> u64 {
        self.agg.garbage
    }

    /// When barriers arrived on input `port` (beacons, and in chip mode barrier-carrying data),
    /// as [`Node::handle`] saw them: a driver that moves data in place with
    /// [`Switch::forward`], which reads no clock, leaves its data out. `None` for a port that
    /// is not an input.
    pub fn input_gaps(&self, port: PortId) -> Option<BarrierGaps> {
        self.gaps.get(port.index()).copied()
    }

    /// Whether input link `port` has been removed after a timeout (§4.2).
    pub fn link_removed(&self, port: PortId) -> bool {
        self.agg.inputs.get(port.index()).is_some_and(|p| p.dead)
    }

    /// §5.2 Resume: input `port` no longer bounds the commit barrier, for good (a failed
    /// component rejoins only as a new one). Returns false for an unknown port.
    fn remove_commit_input(&mut self, port: PortId) -> bool {
        let i = port.index();
        if i >= self.cfg.inputs {
            return false;
        }
        if !self.agg.inputs[i].commit_removed {
            self.agg.inputs[i].commit_removed = true;
            // An input that never spoke and that the controller takes for dead (the uplink of a
            // switch whose hosts all left before their first beacon) would hold the
            // best-effort barrier at `None` until its own, longer, timeout: removed now.
            let p = &mut self.agg.inputs[i];
            if p.registers[BE] == NONE && !p.dead {
                p.dead = true;
            }
            self.agg.min_register = [None; 2];
            self.agg.recompute_one(BE);
            self.agg.recompute_one(COMMIT);
        }
        true
    }

    /// §5.2 Determine's [`CtrlMsg::Isolate`]: input `port` (a host's uplink) stops raising the
    /// commit barrier, and its register is reported as a `LinkDown` — exactly as if it had
    /// timed out, except that its best-effort barrier still counts (the host is alive). The
    /// controller takes the host's failure timestamp from this report; nothing above it passes
    /// here afterwards, so no correct receiver's commit barrier goes past it. Reported again
    /// until Resume removes the input, like a timed-out one. Returns false for an unknown port.
    fn isolate_input(&mut self, port: PortId) -> bool {
        let i = port.index();
        if i >= self.cfg.inputs {
            return false;
        }
        self.agg.inputs[i].commit_frozen = true;
        self.agg.inputs[i].since_report = 0;
        self.report_link_down(i);
        true
    }

    /// [`CtrlMsg::Depart`]: the host on input `port` left. Its link leaves the best-effort
    /// minimum at once (§4.2 removal, the host having said it sends nothing more) and stays out
    /// until `Admit` takes it back, and its commit register is frozen and reported as
    /// [`Switch::isolate_input`] does.
    fn depart_input(&mut self, port: PortId) {
        let i = port.index();
        if i >= self.cfg.inputs {
            return;
        }
        self.agg.inputs[i].departed = true;
        // Not alive (for `Admit`) until it is heard again.
        self.agg.inputs[i].silent = self.cfg.link_timeout_intervals.max(1);
        if !self.agg.inputs[i].dead {
            self.stats.links_departed += 1;
            self.agg.set_dead(i, true);
        }
        self.isolate_input(port);
    }

    /// §5.2 Detect: input `i` is reported dead to the controller, with its commit register.
    fn report_link_down(&mut self, i: usize) {
        let Some(&link) = self.cfg.input_links.get(i) else {
            return;
        };
        self.stats.links_reported += 1;
        self.outputs.push_back(Output::Mgmt {
            to: MgmtDest::Controller,
            msg: Mgmt::Ctrl(CtrlMsg::LinkDown {
                reporter: self.cfg.graph_node.unwrap_or(self.cfg.node),
                link,
                last_commit: self.agg.register(i, COMMIT),
            }),
        });
    }

    /// The input port `link` enters, if it is one of this switch's.
    fn input_of(&self, link: LinkId) -> Option<PortId> {
        let i = self.cfg.input_links.iter().position(|&l| l == link)?;
        Some(PortId(i as u32))
    }

    /// A §5.2 message from the controller: Resume (the dead links among its inputs stop
    /// bounding the commit barrier), Isolate, Admit (answered with `Admitted`). Anything else,
    /// or a link that does not enter this switch, is dropped and counted.
    fn on_mgmt(&mut self, now: Instant, msg: Mgmt) {
        match msg {
            Mgmt::Ctrl(CtrlMsg::Resume { dead_links, .. }) => {
                for l in dead_links {
                    if let Some(port) = self.input_of(l) {
                        self.remove_commit_input(port);
                    }
                }
                // The outputs may have moved: beacons that are due go now.
                self.on_timeout(now);
            }
            Mgmt::Ctrl(CtrlMsg::Isolate { link }) => match self.input_of(link) {
                Some(port) => {
                    self.isolate_input(port);
                }
                None => self.stats.mgmt_dropped += 1,
            },
            Mgmt::Ctrl(CtrlMsg::Depart { link }) => match self.input_of(link) {
                Some(port) => {
                    self.depart_input(port);
                    // The best-effort output may have moved: beacons that are due go now.
                    self.on_timeout(now);
                }
                None => self.stats.mgmt_dropped += 1,
            },
            Mgmt::Relay(RelayMsg::Admit { link, apply }) => {
                let answer = self
                    .input_of(link)
                    .and_then(|port| self.admit_input(port, apply));
                let Some((alive, barrier, commit)) = answer else {
                    self.stats.mgmt_dropped += 1;
                    return;
                };
                self.outputs.push_back(Output::Mgmt {
                    to: MgmtDest::Controller,
                    msg: Mgmt::Relay(RelayMsg::Admitted {
                        link,
                        alive,
                        barrier,
                        commit,
                    }),
                });
            }
            _ => self.stats.mgmt_dropped += 1,
        }
    }

    /// §5.2 rejoin ([`crate::failure::RelayMsg::Admit`]): whether input `port` is alive — it
    /// spoke, and not `link_timeout_intervals` ago — and, with `apply`, §4.2 "addition of …
    /// links": it bounds both barriers again (no longer removed, departed, frozen or timed
    /// out). Its register keeps what it last said, which is below the output when the link was
    /// away (or says nothing yet, which bounds everything), and the output never moves
    /// backwards: B_new waits until the link's barriers pass it, exactly the paper's "suspends
    /// updates to B_new until the barrier received from the new link is greater than B_new".
    /// Returns (alive, best-effort output, commit output), the outputs after taking the link
    /// back; `None` for an unknown port.
    fn admit_input(
        &mut self,
        port: PortId,
        apply: bool,
    ) -> Option<(bool, Option<Timestamp>, Option<Timestamp>)> {
        let i = port.index();
        if i >= self.cfg.inputs {
            return None;
        }
        let p = &self.agg.inputs[i];
        // A departed link stays out of the minimum when it speaks again; it is alive if it
        // spoke within the last beacon interval.
        let alive = p.spoke && (!p.dead || p.departed && p.silent == 0);
        if apply {
            let p = &mut self.agg.inputs[i];
            p.departed = false;
            // Back in the best-effort minimum now, whether it departed or timed out, not only
            // once it speaks: the controller's floor for the rejoining host is the largest of
            // the outputs answered here, and holds only if every output stays at or below it
            // until the host's own barriers pass it (§4.2 addition of links, §5.2 rejoin).
            // A timed-out link left out until heard would let this output run on with the
            // other inputs while the host's first beacons are still on their way up — past the
            // floor its first messages carry, so they arrive late (VOPR seed 103959: a core
            // switch healed, its link from the rejoining host's side silent until then).
            // Its silence counts afresh from here: it has the link timeout to speak again.
            if p.dead {
                p.dead = false;
                p.silent = 0;
                self.stats.links_added += 1;
            }
            let p = &mut self.agg.inputs[i];
            p.commit_removed = false;
            p.commit_frozen = false;
            p.since_report = 0;
            self.agg.min_register = [None; 2];
            self.agg.recompute_one(BE);
            self.agg.recompute_one(COMMIT);
        }
        Some((alive, self.agg.out[BE], self.agg.out[COMMIT]))
    }

    /// Whether Resume removed input `port` from the commit minimum.
    pub fn commit_input_removed(&self, port: PortId) -> bool {
        self.agg
            .inputs
            .get(port.index())
            .is_some_and(|p| p.commit_removed)
    }

    /// Input `port` spoke: alive, and back in the minimum if it had been removed (§4.2).
    #[inline]
    fn heard_from(&mut self, port: usize) {
        let p = &mut self.agg.inputs[port];
        p.heard = true;
        p.spoke = true;
        if p.dead && !p.departed {
            self.stats.links_added += 1;
            self.agg.set_dead(port, false);
        }
    }

    fn outputs_now(&self) -> Outputs {
        (self.agg.out[BE], self.agg.out[COMMIT])
    }

    fn on_packet(&mut self, now: Instant, port: PortId, mut packet: Packet) {
        if let Packet::Beacon(b) = packet {
            if port.index() >= self.cfg.inputs {
                self.stats.dropped += 1;
                return;
            }
            self.gaps[port.index()].heard(now);
            self.on_beacon(now, port, b);
            return;
        }
        if let (Packet::Data(d), Some(g)) = (&packet, self.gaps.get_mut(port.index())) {
            let h = &d.header;
            if self.cfg.mode.rewrites_data() && (h.barrier().is_some() || h.commit().is_some()) {
                g.heard(now);
            }
        }
        if let Some(out) = self.forward(port, &mut packet) {
            self.outputs.push_back(Output::Send { port: out, packet });
        }
    }

    /// Forwards a data packet, NAK or ACK that arrived on input `port`, in place: updates the input's
    /// register and rewrites the barrier field (chip mode, §4.1), and returns the output port —
    /// or `None` if the packet is dropped (unknown port, unroutable, or a beacon, which only
    /// [`Node::handle`] takes).
    ///
    /// This is exactly what `handle(now, Input::Packet { port, packet })` does with such a packet,
    /// minus queueing the one `Output::Send` — `handle` calls it. It reads no clock and never
    /// changes [`Node::poll_timeout`], so a driver that moves packets in place (the simulator's
    /// hot path) may call it without a time and without re-arming the switch's timer.
    pub fn forward(&mut self, port: PortId, packet: &mut Packet) -> Option<PortId> {
        self.forward_routed(port, packet, None)
    }

    /// [`Switch::forward`] for a driver that already asked [`Switch::route`] where this packet
    /// goes (the simulator does, to prefetch the output's records): `routed` is that answer,
    /// `(src, dst, output)`, used when it names this packet's endpoints instead of routing
    /// again. The answer must still be current — a driver whose router changed since must not
    /// pass it.
    #[inline]
    pub fn forward_routed(
        &mut self,
        port: PortId,
        packet: &mut Packet,
        routed: Option<(ProcId, ProcId, PortId)>,
    ) -> Option<PortId> {
        if port.index() >= self.cfg.inputs {
            self.stats.dropped += 1;
            return None;
        }
        self.heard_from(port.index());
        let before = self.outputs_now();
        let (src, dst) = match packet {
            Packet::Beacon(_) => {
                self.stats.dropped += 1;
                return None;
            }
            Packet::Data(d) => {
                if self.cfg.mode.rewrites_data() {
                    let h = &mut d.header;
                    match (h.barrier(), h.commit()) {
                        (Some(b), Some(c)) => self.agg.update_both(port.index(), b, c),
                        (Some(b), None) => self.agg.update(port.index(), BE, b),
                        (None, Some(c)) => self.agg.update(port.index(), COMMIT, c),
                        (None, None) => {}
                    }
                    // §4.1: the forwarded packet carries B_new.
                    match self.agg.out[BE] {
                        Some(b) => {
                            h.barrier = b;
                            h.flags |= flags::BARRIER_VALID;
                        }
                        None => h.flags &= !flags::BARRIER_VALID,
                    }
                    // §5.1: and the commit barrier likewise.
                    match self.agg.out[COMMIT] {
                        Some(c) => {
                            h.commit = c;
                            h.flags |= flags::COMMIT_VALID;
                        }
                        None => h.flags &= !flags::COMMIT_VALID,
                    }
                }
                (d.header.src, d.header.dst)
            }
            Packet::Nak(n) => (n.from, n.to),
            Packet::Ack(a) => (a.from, a.to),
            Packet::AckBatch(b) => (b.first().from, b.first().to),
        };
        self.invariants(before);
        let out = match routed {
            Some((s, d, out)) if (s, d) == (src, dst) => {
                debug_assert_eq!(Some(out), self.route(src, dst), "a stale route");
                Some(out)
            }
            _ => self.route(src, dst),
        };
        let Some(out) = out else {
            self.stats.dropped += 1;
            return None;
        };
        if out.index() >= self.cfg.outputs {
            self.stats.dropped += 1;
            return None;
        }
        // Only a chip's rewritten barrier describes this link; in CPU modes the field (if a
        // misconfigured host set it) is the sender's, and must not suppress our next beacon.
        if let (Packet::Data(d), true) = (&*packet, self.cfg.mode.rewrites_data()) {
            let last = &mut self.out_ports[out.index()].last_sent;
            if let Some(b) = d.header.barrier() {
                last.0 = Some(b);
            }
            if let Some(c) = d.header.commit() {
                last.1 = Some(c);
            }
        }
        self.out_ports[out.index()].active = true;
        self.stats.forwarded += 1;
        Some(out)
    }

    fn on_beacon(&mut self, now: Instant, port: PortId, b: Beacon) {
        self.stats.beacons_received += 1;
        self.heard_from(port.index());
        match self.cfg.mode {
            SwitchMode::Chip => {
                let before = self.outputs_now();
                self.agg.update_both(port.index(), b.barrier, b.commit);
                let rising = b.demand && self.cfg.demand_hold_ns > 0 && self.demand_until <= now;
                if b.demand && self.cfg.demand_hold_ns > 0 {
                    self.demand_until = now + self.cfg.demand_hold_ns;
                }
                if rising && self.outputs_now().0.is_some() && self.outputs_now().1.is_some() {
                    // The demand goes on at once, on every output, whether the barrier moved
                    // or not.
                    for o in 0..self.cfg.outputs {
                        self.send_beacon(now, o);
                    }
                } else if self.outputs_now() != before {
                    self.send_paced_beacons(now);
                }
            }
            SwitchMode::Cpu | SwitchMode::Host => {
                if self.pending.len() >= self.cfg.pending_max {
                    self.stats.dropped += 1;
                    return;
                }
                self.pending
                    .push_back((now + self.cfg.beacon_delay_ns, port, b.barrier, b.commit));
            }
        }
    }

    fn on_timeout(&mut self, now: Instant) {
        if self.flush_at.is_some_and(|t| t <= now) {
            self.send_paced_beacons(now);
        }
        if now < self.next_beacon {
            return;
        }
        self.next_beacon = next_tick(now, self.cfg.beacon_interval_ns, self.cfg.beacon_phase_ns);
        self.detect_dead_links();
        if self.cfg.mode != SwitchMode::Chip {
            while let Some(&(ready, port, b, c)) = self.pending.front() {
                if ready > now {
                    break;
                }
                self.pending.pop_front();
                self.agg.update_both(port.index(), b, c);
            }
        }
        match self.cfg.mode {
            // Links whose last packet carried a stale barrier: idle ones, or busy ones whose data
            // went out before the barrier last moved (§4.2).
            SwitchMode::Chip => self.send_beacons(now, |_, _| true),
            // §6.2.2: every output link, "regardless of whether the link is idle or busy" — when
            // the barrier has moved since the last beacon on it (an unchanged barrier tells the
            // link nothing).
            SwitchMode::Cpu | SwitchMode::Host => self.send_beacons(now, |_, _| true),
        }
        // Keep-alive: an output link that carried nothing this interval gets the unchanged
        // barriers, so its far end does not take a stalled barrier for a dead link (§4.2). A
        // switch whose every input is dead keeps silent instead: it bounds nothing any more, and
        // its silence lets the next switch remove it in turn.
        let any_alive = self.agg.inputs.iter().any(|p| !p.dead);
        if self.cfg.link_timeout_intervals > 0 && any_alive && self.outputs_now().0.is_some() {
            for o in 0..self.cfg.outputs {
                if !self.out_ports[o].active && self.outputs_now().1.is_some() {
                    self.send_beacon(now, o);
                }
            }
        }
        for p in &mut self.out_ports {
            p.active = false;
        }
    }

    /// §4.2 "Handling failures": an input link silent for `link_timeout_intervals` beacon
    /// intervals is removed from the minimum, so the barrier resumes.
    fn detect_dead_links(&mut self) {
        let timeout = self.cfg.link_timeout_intervals;
        if timeout == 0 {
            return;
        }
        let retry = self.cfg.report_retry_intervals;
        for i in 0..self.cfg.inputs {
            let p = &mut self.agg.inputs[i];
            if retry > 0 && p.commit_frozen && !p.commit_removed {
                p.since_report += 1;
                if p.since_report >= retry {
                    p.since_report = 0;
                    self.stats.reports_resent += 1;
                    self.report_link_down(i);
                }
            }
            let p = &mut self.agg.inputs[i];
            if std::mem::take(&mut p.heard) {
                p.silent = 0;
            } else if !p.dead {
                // A link that never spoke is timed out too (issue 35: a host that left before
                // its first beacon arrived held every barrier for good), after a longer wait: it
                // may still be starting, behind an upstream whose outputs need a few intervals.
                let limit = match p.spoke {
                    true => timeout,
                    false => timeout.saturating_mul(NEVER_SPOKE_TIMEOUT_FACTOR),
                };
                p.silent += 1;
                if p.silent >= limit {
                    p.commit_frozen = true;
                    self.stats.links_removed += 1;
                    self.agg.set_dead(i, true);
                    self.report_link_down(i);
                }
            }
        }
    }

    /// Chip mode: sends the output barrier at once on every output link that would learn
    /// something and has had no beacon for `beacon_min_gap_ns`; the others are deferred (not
    /// dropped) until their gap has passed, so the last change of a wave always goes out promptly
    /// and a link never carries more than one change-triggered beacon per gap.
    fn send_paced_beacons(&mut self, now: Instant) {
        let gap = self.cfg.beacon_min_gap_ns;
        let mut flush_at: Option<Instant> = None;
        for o in 0..self.cfg.outputs {
            if !self.fresh(o) {
                continue;
            }
            match self.out_ports[o]
                .last_beacon
                .map(|t| t + gap)
                .filter(|ready| *ready > now)
            {
                Some(ready) => flush_at = Some(flush_at.map_or(ready, |f| f.min(ready))),
                None => self.send_beacon(now, o),
            }
        }
        self.flush_at = flush_at;
    }

    /// Sends a beacon with the output barrier on every output link that would learn something
    /// from it and that `eligible` admits.
    fn send_beacons(&mut self, now: Instant, eligible: impl Fn(&Switch, usize) -> bool) {
        for o in 0..self.cfg.outputs {
            if self.fresh(o) && eligible(self, o) {
                self.send_beacon(now, o);
            }
        }
    }

    /// Would a beacon on output `o` tell the link something? Both outputs must be known (a
    /// beacon carries both), and one of them must have moved past what the link last carried.
    fn fresh(&self, o: usize) -> bool {
        let (Some(b), Some(c)) = self.outputs_now() else {
            return false;
        };
        let (last_b, last_c) = self.out_ports[o].last_sent;
        last_b.is_none_or(|l| b > l) || last_c.is_none_or(|l| c > l)
    }

    fn send_beacon(&mut self, now: Instant, o: usize) {
        let (Some(barrier), Some(commit)) = self.outputs_now() else {
            unreachable!("callers check both barriers are known");
        };
        self.stats.beacons_sent += 1;
        self.out_ports[o] = OutPort {
            last_sent: (Some(barrier), Some(commit)),
            last_beacon: Some(now),
            active: true,
        };
        self.outputs.push_back(Output::Send {
            port: PortId(o as u32),
            packet: Packet::Beacon(Beacon {
                from: self.cfg.node,
                barrier,
                commit,
                demand: now < self.demand_until,
            }),
        });
    }

    fn invariants(&self, before: Outputs) {
        let after = self.outputs_now();
        for (b, a, what) in [
            (before.0, after.0, "barrier"),
            (before.1, after.1, "commit barrier"),
        ] {
            if let (Some(b), Some(a)) = (b, a) {
                assert!(a >= b, "switch {} {what} moved backwards", self.cfg.node);
            }
            debug_assert!(b.is_none() || a.is_some());
        }
        debug_assert!(self.pending.len() <= self.cfg.pending_max);
        self.agg.check();
    }
}

impl Node for Switch {
    type Packet = Packet;
    /// A switch reports nothing upward: its §5.2 reports go to the controller.
    type Event = Infallible;
    type Mgmt = Mgmt;

    fn handle(&mut self, now: Instant, input: Input<Packet, Mgmt>) {
        let before = self.outputs_now();
        match input {
            Input::Packet { port, packet } => self.on_packet(now, port, packet),
            Input::Timeout => self.on_timeout(now),
            Input::Mgmt(msg) => self.on_mgmt(now, msg),
            // A switch's links speak for themselves (§4.2: a silent input is removed, one that
            // speaks again is taken back).
            Input::Notice(_) => {}
        }
        self.invariants(before);
    }

    fn poll_output(&mut self) -> Option<Output<Packet, Infallible, Mgmt>> {
        self.outputs.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(match self.flush_at {
            Some(f) => f.min(self.next_beacon),
            None => self.next_beacon,
        })
    }
}

#[cfg(test)]
mod tests;
