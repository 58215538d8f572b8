//! The fault-injecting swarm (`onepipe vopr`): every seed draws a network, a workload and a mix
//! of faults, runs it with every checker on, then checks liveness — after sending stops, the run
//! must drain: every message delivered or reported, every barrier moving again.
//!
//! A seed replays exactly (`onepipe vopr --seed S`). The outcome separates a *crash* (the code
//! panicked), a *correctness* failure (a checker fired) and a *liveness* failure (the run did not
//! drain within its limit), so a swarm run says at once which kind of bug it found.
//!
//! Faults drawn today: per-link random and bursty loss, targeted loss of one packet kind,
//! duplication, reordering (non-FIFO links), clock skew, host crashes, host-link cuts, whole
//! switch failures and switch-to-switch link cuts — under every service: with the reliable one,
//! the controller's procedure (§5.2) must fail the disconnected processes consistently and
//! resume — clock steps (a host's clock jumps 1–50 µs forward or back) and controller outages
//! (it loses what is sent to it for 10–500 µs, then resumes from its state). Every fault stays on for the whole run — the drain phase is the "liveness" phase
//! under the same faults, which is stricter than healing first.
//!
//! [`tree_scenario`] (`onepipe vopr --tree`) draws the same kinds of faults for 1Pipe on the
//! simulator's tree fabric, where the aggregators run the live runtime's role; it has a
//! generator of its own, so the swarm's seeds keep their scenarios.

use crate::config::{
    ConfigError, Fabric, NetworkConfig, PacketKind, Service, SimConfig, TopologySpec,
    WorkloadConfig, WorkloadKind,
};
use crate::{run, Report};
use onepipe_proto::rng::Rng;
use onepipe_proto::switch::SwitchMode;
use serde::Serialize;

/// What one seed found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// Every checker passed and the run drained.
    Ok,
    /// A checker fired.
    Correctness,
    /// The run did not drain: something stopped making progress.
    Liveness,
    /// The simulation panicked.
    Crash,
}

impl Verdict {
    /// The process exit code `onepipe vopr` uses for it.
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Ok => 0,
            Verdict::Correctness => 1,
            Verdict::Liveness => 3,
            Verdict::Crash => 4,
        }
    }
}

/// Faults one seed drew, for the summary line.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FaultMix {
    /// Hosts crashed.
    pub host_crashes: u32,
    /// Host links cut (the host lives on, cut off).
    pub host_link_cuts: u32,
    /// Physical switches cut (every link).
    pub switch_cuts: u32,
    /// Physical switch-to-switch links cut (both directions).
    pub link_cuts: u32,
    /// Per-link loss probability.
    pub loss: f64,
    /// Loss burst length.
    pub loss_burst: u32,
    /// Targeted loss kind, if any.
    pub loss_kind: Option<String>,
    /// Duplication probability.
    pub dup: f64,
    /// Reordering probability (non-FIFO links).
    pub reorder: f64,
    /// Mean clock offset, ns.
    pub skew_ns: f64,
    /// Host clock steps (forward or back).
    pub clock_steps: u32,
    /// Controller outages.
    pub controller_downs: u32,
    /// Cuts that heal (a host's, a switch's or a link's).
    pub heals: u32,
    /// Crashed hosts that restart with their state lost.
    pub restarts: u32,
    /// Hosts that leave gracefully (issue 35), and how many of them join again later (as new
    /// processes, through a restart).
    pub leaves: u32,
    /// See `leaves`.
    pub rejoins_after_leave: u32,
    /// The application run in place of the synthetic workload, if any.
    pub app: Option<String>,
    /// The application runs on direct messages (MultiPaxos), not on 1Pipe.
    pub direct: bool,
}

/// The result of one seed.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// What it found.
    pub verdict: Verdict,
    /// The configuration, in words.
    pub scenario: String,
    /// The faults.
    pub faults: FaultMix,
    /// Deliveries the checkers examined.
    pub checked_deliveries: u64,
    /// Packets the loss model dropped.
    pub packets_lost: u64,
    /// Packets duplicated.
    pub packets_duplicated: u64,
    /// Links switches removed (§4.2).
    pub links_removed: u64,
    /// §5.2 rounds the controller ran, and hosts it declared failed in them.
    pub failure_rounds: u64,
    /// Hosts declared failed (§5.2).
    pub hosts_declared: u64,
    /// Reliable scatterings recalled (§5.2).
    pub recalled: u64,
    /// Control messages lost to a controller outage.
    pub ctrl_lost: u64,
    /// Reliable messages handed to the controller to forward (§5.2).
    pub forwarded: u64,
    /// Hosts that settled their buffer (§5.2 receiver recovery).
    pub recovered: u64,
    /// Hosts that rejoined as new processes (§5.2).
    pub rejoined: u64,
    /// Messages delivered to or from rejoined processes.
    pub rejoined_traffic: u64,
    /// The first violations, or the panic message.
    pub detail: Vec<String>,
}

/// Simulated sending time per seed by default (`onepipe vopr --duration`).
pub const DURATION_NS: u64 = 10_000_000;

/// The configuration seed `seed` runs with `duration_ns` of sending: a pure function of both.
pub fn scenario(seed: u64, duration_ns: u64) -> (SimConfig, FaultMix) {
    scenario_with(seed, duration_ns, false)
}

/// Seed `seed`'s scenario; with `apps`, a third of the seeds (those with at least 4 processes)
/// run the replicated key-value service in place of the synthetic workload. Without, every seed
/// is what it always was (the pinned regression seeds keep their scenarios).
pub fn scenario_with(seed: u64, duration_ns: u64, apps: bool) -> (SimConfig, FaultMix) {
    let mut rng = Rng::new(seed ^ 0x5EED_F00D);
    let cfg = draw_network(&mut rng, seed, duration_ns);
    let faults = FaultMix {
        skew_ns: [0.0, 300.0, 2_000.0][pick(&mut rng, 3)],
        ..FaultMix::default()
    };
    let mut d = Draw { rng, cfg, faults };
    d.cfg.net.clock_skew_ns = d.faults.skew_ns;
    // Issue 37: a quarter of the seeds run demand beacons (chip mode only), chosen from the
    // seed apart from `rng` so that every other seed's scenario is what it was.
    if seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 62 == 0 {
        d.cfg.net.fast_beacon_interval_ns = d.cfg.net.beacon_interval_ns / 4;
    }
    // Issue 39: a quarter of the seeds also deliver best-effort messages optimistically, chosen
    // from the seed apart from `rng` (it adds events and checks, and changes no delivery).
    let opt = seed.wrapping_mul(0xD1B5_4A32_D192_ED03) >> 61;
    if opt < 2 {
        d.cfg.protocol.optimistic_delta_ns = [500, 2_000][opt as usize];
    }
    d.draw_link_faults();
    let hosts = d.cfg.net.hosts().unwrap_or(1);
    d.draw_crashes(hosts);
    if d.rng.chance(0.3) {
        d.draw_cut();
    }
    d.cfg.workload.service =
        [Service::BestEffort, Service::Reliable, Service::Mixed][pick(&mut d.rng, 3)];
    // Drawn after everything else, so seeds keep the rest of their scenario.
    d.draw_clock_steps(hosts);
    d.draw_controller_down();
    d.draw_recoveries();
    d.draw_app(apps);
    let Draw {
        mut cfg,
        mut faults,
        ..
    } = d;
    if cfg.workload.app.is_none() {
        draw_leaves(seed, &mut cfg, &mut faults);
    }
    (cfg, faults)
}

/// One of `n` choices, drawn.
fn pick(rng: &mut Rng, n: u64) -> usize {
    rng.below(n) as usize
}

/// The network and the workload of seed `seed`: topology, processes per host, switch mode,
/// workload and rate, drawn in that order.
fn draw_network(rng: &mut Rng, seed: u64, duration_ns: u64) -> SimConfig {
    let topology = match pick(rng, 4) {
        0 => TopologySpec::Rack {
            hosts: 2 + rng.below(6) as u32,
        },
        1 => TopologySpec::LeafSpine {
            hosts: 4 + rng.below(9) as u32,
            rack_size: 2 + rng.below(3) as u32,
            spines: 1 + rng.below(3) as u32,
        },
        2 => TopologySpec::FatTree { k: 2 },
        _ => TopologySpec::FatTree { k: 4 },
    };
    let procs_per_host = 1 + rng.below(2) as u32;
    let switch_mode = [SwitchMode::Chip, SwitchMode::Cpu, SwitchMode::Host][pick(rng, 3)];
    let (workload, rate_per_proc) = draw_traffic(rng);
    SimConfig {
        seed,
        net: NetworkConfig {
            topology,
            procs_per_host,
            switch_mode,
            ..Default::default()
        },
        workload: WorkloadConfig {
            workload,
            rate_per_proc,
            duration_ns,
            drain_ns: 30_000_000,
            ..Default::default()
        },
        ..SimConfig::default()
    }
}

/// The traffic of a seed: the pattern, then the rate per process.
fn draw_traffic(rng: &mut Rng) -> (WorkloadKind, f64) {
    let workload = match pick(rng, 3) {
        0 => WorkloadKind::AllToAll,
        1 => WorkloadKind::OneToOne,
        _ => WorkloadKind::Scatter { k: 2 },
    };
    (workload, [20_000.0, 50_000.0, 100_000.0][pick(rng, 3)])
}

/// Seed `seed`'s scenario on the tree fabric (`onepipe vopr --tree`): the live runtime's
/// aggregators in a tree of 1–3 layers over 2–12 hosts in racks of 2–4 (one process per host,
/// chip or host-representative aggregators), the swarm's traffic, and the faults that make
/// sense on a tree, drawn as the swarm draws them — link loss, duplication and reordering,
/// clock skew and steps, host crashes and restarts, cuts of a host's links, an aggregator or
/// an aggregator-to-aggregator link and their heals, controller outages, leaves and joins —
/// under every service. A pure function of its arguments, from a generator of its own: plain
/// `vopr`'s seeds keep their scenarios.
pub fn tree_scenario(seed: u64, duration_ns: u64) -> (SimConfig, FaultMix) {
    let mut rng = Rng::new(seed ^ 0x7EE0_0000);
    let layers = 1 + rng.below(3) as u8;
    let hosts = 2 + rng.below(11) as u32;
    let rack_size = 2 + rng.below(3) as u32;
    let switch_mode = [SwitchMode::Chip, SwitchMode::Host][pick(&mut rng, 2)];
    let (workload, rate_per_proc) = draw_traffic(&mut rng);
    let cfg = SimConfig {
        seed,
        net: NetworkConfig {
            topology: TopologySpec::LeafSpine {
                hosts,
                rack_size,
                spines: 1,
            },
            fabric: Fabric::Tree { layers },
            switch_mode,
            ..Default::default()
        },
        workload: WorkloadConfig {
            workload,
            rate_per_proc,
            duration_ns,
            drain_ns: 30_000_000,
            ..Default::default()
        },
        ..SimConfig::default()
    };
    let faults = FaultMix {
        skew_ns: [0.0, 300.0, 2_000.0][pick(&mut rng, 3)],
        ..FaultMix::default()
    };
    let mut d = Draw { rng, cfg, faults };
    d.cfg.net.clock_skew_ns = d.faults.skew_ns;
    d.draw_link_faults();
    d.draw_crashes(hosts);
    if d.rng.chance(0.3) {
        d.draw_cut();
    }
    d.cfg.workload.service =
        [Service::BestEffort, Service::Reliable, Service::Mixed][pick(&mut d.rng, 3)];
    d.draw_clock_steps(hosts);
    d.draw_controller_down();
    d.draw_recoveries();
    let Draw {
        mut cfg,
        mut faults,
        ..
    } = d;
    draw_leaves(seed, &mut cfg, &mut faults);
    (cfg, faults)
}

/// The routing graph a run's nodes are named in (what `--cut` names): the tree fabric's
/// graph, or the topology's.
fn named_graph(net: &NetworkConfig) -> Result<onepipe_proto::topology::Topology, String> {
    let Some(layout) = net.tree_layout() else {
        return net.topology.build();
    };
    let hosts = net.hosts().map_err(|e| e.to_string())?;
    let specs = layout.into_iter().map(|l| l.1).collect();
    let tree = onepipe_proto::aggregator::tree::AggTree::new(hosts, hosts, specs);
    let graph = tree.graph().map_err(|e| e.to_string())?;
    Ok(graph.topology().as_ref().clone())
}

/// A seed's scenario while it is drawn: the generator, and the configuration and faults so far.
struct Draw {
    rng: Rng,
    cfg: SimConfig,
    faults: FaultMix,
}

impl Draw {
    /// Loss (random, bursty or of one packet kind), duplication and reordering on every link.
    fn draw_link_faults(&mut self) {
        let (rng, cfg, faults) = (&mut self.rng, &mut self.cfg, &mut self.faults);
        if rng.chance(0.6) {
            faults.loss = [1e-4, 1e-3, 1e-2][pick(rng, 3)];
            faults.loss_burst = [1, 1, 4][pick(rng, 3)];
            if rng.chance(0.3) {
                let (kind, name) = [
                    (PacketKind::Data, "data"),
                    (PacketKind::Ack, "ack"),
                    (PacketKind::Beacon, "beacon"),
                    (PacketKind::Commit, "commit"),
                    (PacketKind::Nak, "nak"),
                ][pick(rng, 5)];
                cfg.faults.loss_kind = Some(kind);
                faults.loss_kind = Some(name.to_string());
                faults.loss = faults.loss.max(1e-2);
            }
        }
        if rng.chance(0.3) {
            faults.dup = 1e-2;
        }
        if rng.chance(0.3) {
            faults.reorder = 0.02;
        }
        cfg.faults.loss_rate = faults.loss;
        cfg.faults.loss_burst = faults.loss_burst.max(1);
        cfg.faults.dup_rate = faults.dup;
        cfg.faults.reorder_prob = faults.reorder;
    }

    /// Host crashes: one or two of the `hosts`, never every host.
    fn draw_crashes(&mut self, hosts: u32) {
        let duration_ns = self.cfg.workload.duration_ns;
        let (rng, cfg) = (&mut self.rng, &mut self.cfg);
        if hosts > 2 && rng.chance(0.4) {
            let n = 1 + rng.below(2) as u32;
            for _ in 0..n {
                let h = rng.below(hosts as u64) as u32;
                let at = duration_ns / 6 + rng.below(duration_ns / 2);
                if !cfg.faults.crashes.iter().any(|c| c.0 == h) {
                    cfg.faults.crashes.push((h, at));
                }
            }
            self.faults.host_crashes = cfg.faults.crashes.len() as u32;
        }
    }

    /// Cuts a host's links, a whole physical switch or one switch-to-switch link (names from
    /// the topology itself, or the tree fabric's graph).
    fn draw_cut(&mut self) {
        let (rng, cfg, faults) = (&mut self.rng, &mut self.cfg, &mut self.faults);
        let duration_ns = cfg.workload.duration_ns;
        let Ok(topo) = named_graph(&cfg.net) else {
            return;
        };
        let names: Vec<String> = topo
            .nodes()
            .iter()
            .map(|n| {
                n.name
                    .trim_end_matches("-up")
                    .trim_end_matches("-down")
                    .to_string()
            })
            .collect();
        let mut name = names[rng.below(names.len() as u64) as usize].clone();
        let at = duration_ns / 6 + rng.below(duration_ns / 2);
        if name.starts_with("host-") {
            faults.host_link_cuts += 1;
        } else if rng.chance(0.5) {
            // One of the switch's links to another switch, if it has one.
            let i = names
                .iter()
                .position(|n| *n == name)
                .expect("drawn from names");
            let peers: Vec<&String> = topo.nodes()[i]
                .outputs
                .iter()
                .map(|l| &names[topo.links()[l.index()].to.index()])
                .filter(|n| !n.starts_with("host-") && **n != name)
                .collect();
            if peers.is_empty() {
                faults.switch_cuts += 1;
            } else {
                name = format!("{name}/{}", peers[rng.below(peers.len() as u64) as usize]);
                faults.link_cuts += 1;
            }
        } else {
            faults.switch_cuts += 1;
        }
        cfg.faults.cuts.push((name, at));
    }

    /// Clock steps on a quarter of the seeds: one to three, each on one of the `hosts`, 1–50 µs
    /// forward or back.
    fn draw_clock_steps(&mut self, hosts: u32) {
        let duration_ns = self.cfg.workload.duration_ns;
        let (rng, cfg) = (&mut self.rng, &mut self.cfg);
        if rng.chance(0.25) {
            for _ in 0..1 + rng.below(3) {
                let h = rng.below(hosts as u64) as u32;
                let at = duration_ns / 6 + rng.below(duration_ns / 2);
                let ns = 1_000 + rng.below(49_000) as i64;
                let step = if rng.chance(0.5) { ns } else { -ns };
                cfg.faults.clock_steps.push((h, at, step));
            }
            self.faults.clock_steps = cfg.faults.clock_steps.len() as u32;
        }
    }

    /// A controller outage on a quarter of the seeds.
    fn draw_controller_down(&mut self) {
        let duration_ns = self.cfg.workload.duration_ns;
        let (rng, cfg) = (&mut self.rng, &mut self.cfg);
        if rng.chance(0.25) {
            // Mostly across a §5.2 round if there is one: detection takes ~10 beacon intervals
            // (30 µs) after a crash or cut, Determine and Broadcast a few µs more.
            let first_fault = cfg
                .faults
                .crashes
                .iter()
                .map(|c| c.1)
                .chain(cfg.faults.cuts.iter().map(|c| c.1))
                .min();
            let from = match first_fault {
                Some(t) if rng.chance(0.6) => t + 20_000 + rng.below(60_000),
                _ => duration_ns / 6 + rng.below(duration_ns / 2),
            };
            let len = 10_000 + rng.below(490_000);
            cfg.faults.controller_down.push((from, from + len));
            self.faults.controller_downs = 1;
        }
    }

    /// Recoveries, drawn last of all (seeds keep everything above): half the cuts heal 40 µs to
    /// a quarter of the run later — a host then recovers and rejoins as new processes (§5.2),
    /// as do hosts a healed switch or link had cut off — and half the crashed hosts restart
    /// with their state lost, 10 µs to a quarter of the run after the crash (before or after the
    /// controller declares them), and rejoin.
    fn draw_recoveries(&mut self) {
        let duration_ns = self.cfg.workload.duration_ns;
        let (rng, cfg) = (&mut self.rng, &mut self.cfg);
        for (name, at) in cfg.faults.cuts.clone() {
            if rng.chance(0.5) {
                cfg.faults
                    .heals
                    .push((name, at + 40_000 + rng.below(duration_ns / 4)));
            }
        }
        self.faults.heals = cfg.faults.heals.len() as u32;
        for (h, at) in cfg.faults.crashes.clone() {
            if rng.chance(0.5) {
                cfg.faults
                    .restarts
                    .push((h, at + 10_000 + rng.below(duration_ns / 4)));
            }
        }
        self.faults.restarts = cfg.faults.restarts.len() as u32;
    }

    /// Drawn last of all: a third of the seeds run the replicated key-value service (1-RTT
    /// replication on best-effort 1Pipe, §2.2.2) in place of the synthetic workload, its
    /// checkers (linearizability, the replicas' logs, no acknowledged write lost) added to
    /// 1Pipe's; a quarter of the others run it on MultiPaxos (`draw_paxos`). Only with `apps`.
    fn draw_app(&mut self, apps: bool) {
        let procs = self.cfg.net.procs().unwrap_or(0);
        if apps && procs >= 4 && self.rng.chance(1.0 / 3.0) {
            let replicas = if procs >= 8 && self.rng.chance(0.3) {
                5
            } else {
                3
            };
            self.cfg.workload.app = Some(draw_replkv(&mut self.rng, replicas, Default::default()));
            self.cfg.workload.keep_history = false;
            self.faults.app = Some(format!("replkv ({replicas} replicas)"));
        } else if apps && procs >= 4 && self.rng.chance(0.25) {
            self.draw_paxos(procs);
        }
    }

    /// The replicated service on MultiPaxos with batching and pipelining, on direct messages
    /// (`onepipe sim --app replkv --system paxos`) among `procs` processes: the network's faults
    /// and host crashes apply (1Pipe's own — restarts, clock steps, the controller's — do not),
    /// and half of them crash the leader's host.
    fn draw_paxos(&mut self, procs: u32) {
        let (rng, cfg, faults) = (&mut self.rng, &mut self.cfg, &mut self.faults);
        let duration_ns = cfg.workload.duration_ns;
        let replicas = if procs >= 8 && rng.chance(0.3) { 5 } else { 3 };
        // On a lossy network the transport's retransmissions (25 µs, doubling per timeout in
        // a row) can hold a heartbeat for milliseconds: the default election timeout (100 µs,
        // tuned for a lossless data center) would then depose every leader in turn. A
        // deployment sets it above the retransmission delays it expects: 2 ms here.
        let paxos = if cfg.faults.loss_rate > 0.0
            || cfg.faults.dup_rate > 0.0
            || cfg.faults.reorder_prob > 0.0
        {
            crate::config::PaxosSpec {
                heartbeat_ns: 200_000,
                election_timeout_ns: 2_000_000,
                ..Default::default()
            }
        } else {
            Default::default()
        };
        cfg.workload.app = Some(draw_replkv(rng, replicas, paxos));
        // 1Pipe's own faults go: a cut that never heals would partition processes for good on
        // a network that does not reroute (1Pipe's controller does), and restarts, clock steps
        // and controller outages mean nothing to MultiPaxos.
        cfg.faults.cuts.clear();
        cfg.faults.heals.clear();
        cfg.faults.restarts.clear();
        cfg.faults.clock_steps.clear();
        cfg.faults.controller_down.clear();
        faults.host_link_cuts = 0;
        faults.switch_cuts = 0;
        faults.link_cuts = 0;
        faults.heals = 0;
        faults.restarts = 0;
        faults.clock_steps = 0;
        faults.controller_downs = 0;
        let leader_host = 0;
        if rng.chance(0.5) && !cfg.faults.crashes.iter().any(|c| c.0 == leader_host) {
            cfg.faults
                .crashes
                .push((leader_host, 50_000 + rng.below(duration_ns / 2)));
        }
        cfg.workload.keep_history = false;
        faults.host_crashes = cfg.faults.crashes.len() as u32;
        faults.app = Some(format!("replkv on paxos ({replicas} replicas)"));
        faults.direct = true;
    }
}

/// Graceful leaves, and joins after them (issue 35), from a generator of their own so every
/// other draw of a seed stays what it was: a third of the synthetic-workload seeds have one
/// host (sometimes two) leave — before any traffic (in the first 20 µs) or mid-run — and half
/// of the leavers join again later as new processes (§4.2 addition of links, through §5.2's
/// rejoin).
fn draw_leaves(seed: u64, cfg: &mut SimConfig, faults: &mut FaultMix) {
    let mut rng = Rng::new(seed ^ 0x1EA7_E5E5);
    let hosts = cfg.net.hosts().unwrap_or(1);
    if hosts < 2 || !rng.chance(1.0 / 3.0) {
        return;
    }
    let duration_ns = cfg.workload.duration_ns;
    let leavers = if hosts > 3 && rng.chance(0.3) { 2 } else { 1 };
    for _ in 0..leavers {
        let h = rng.below(hosts as u64) as u32;
        let taken = cfg.faults.crashes.iter().any(|c| c.0 == h)
            || cfg.faults.leaves.iter().any(|c| c.0 == h)
            || cfg.faults.restarts.iter().any(|c| c.0 == h);
        if taken {
            continue;
        }
        let at = match rng.chance(0.4) {
            true => rng.below(20_000),
            false => duration_ns / 6 + rng.below(duration_ns / 2),
        };
        cfg.faults.leaves.push((h, at));
        if rng.chance(0.5) {
            let join = at + crate::config::LEAVE_FLUSH_MAX_NS + 10_000 + rng.below(duration_ns / 4);
            cfg.faults.restarts.push((h, join));
            faults.rejoins_after_leave += 1;
        }
    }
    faults.leaves = cfg.faults.leaves.len() as u32;
}

/// The replicated service with `replicas` replicas: its keys and clients' window drawn, in that
/// order (a seed's draws are part of what it replays).
fn draw_replkv(
    rng: &mut Rng,
    replicas: u32,
    paxos: crate::config::PaxosSpec,
) -> crate::config::AppSpec {
    crate::config::AppSpec::ReplKv {
        workload: onepipe_apps::repl::ReplWorkload {
            keys: [10, 100, 1_000][rng.below(3) as usize],
            ..Default::default()
        },
        window: 1 + rng.below(3) as u32,
        replicas,
        disk: Default::default(),
        paxos,
        suspect_ns: None,
    }
}

fn describe(cfg: &SimConfig) -> String {
    format!(
        "{:?}{}, {} procs/host, {} switches{}, {:?}, {:?}, {} sends/s per process, crashes {:?}, leaves {:?}, restarts {:?}, cuts {:?}, heals {:?}, clock steps {:?}, controller down {:?}",
        cfg.net.topology,
        match cfg.net.fabric {
            Fabric::Clos => String::new(),
            Fabric::Tree { layers } => format!(" as a tree of {layers} layers"),
        },
        cfg.net.procs_per_host,
        cfg.net.switch_mode,
        match cfg.net.fast_beacon_interval_ns {
            0 => String::new(),
            f => format!(" (demand beacons every {f} ns)"),
        },
        cfg.workload.workload,
        cfg.workload.service,
        cfg.workload.rate_per_proc,
        cfg.faults.crashes,
        cfg.faults.leaves,
        cfg.faults.restarts,
        cfg.faults.cuts,
        cfg.faults.heals,
        cfg.faults.clock_steps,
        cfg.faults.controller_down
    )
}

/// Whether the replicated service of `cfg` (if it runs one) lost a majority of its replicas:
/// their hosts crashed or were `declared` failed.
fn majority_lost(cfg: &SimConfig, declared: impl Iterator<Item = u32>) -> bool {
    let Some(crate::config::AppSpec::ReplKv { replicas, .. }) = &cfg.workload.app else {
        return false;
    };
    let pph = cfg.net.procs_per_host;
    let gone: std::collections::BTreeSet<u32> = declared
        .chain(cfg.faults.crashes.iter().map(|c| c.0))
        .collect();
    let lost = (0..*replicas).filter(|r| gone.contains(&(r / pph))).count();
    lost > (*replicas as usize) / 2
}

/// A seed whose service runs on MultiPaxos on direct messages: its checkers judge it (a
/// violation is a correctness failure); a run that does not drain is a liveness failure unless
/// a majority of the replicas crashed.
fn run_direct_seed(seed: u64, cfg: &SimConfig, faults: FaultMix) -> Outcome {
    let scenario = format!("{} (on direct messages: MultiPaxos)", describe(cfg));
    let mut out = Outcome::new(seed, scenario, faults);
    let system = crate::direct::DirectSystem::Paxos;
    let Some(report) = out.caught(|| crate::direct::run_direct(cfg, system, &mut |_| {})) else {
        return out;
    };
    out.checked_deliveries = report.app.checked_transactions;
    if report.app.violations > 0 {
        out.verdict = Verdict::Correctness;
        out.detail = report.app.violation_samples.clone();
    } else if !report.drained && !majority_lost(cfg, std::iter::empty()) {
        out.verdict = Verdict::Liveness;
        out.detail.push(format!(
            "did not drain within {} ns after sending stopped: operations still open",
            cfg.workload.drain_ns
        ));
    }
    out
}

impl Outcome {
    /// A seed not judged yet: `Ok`, nothing counted.
    fn new(seed: u64, scenario: String, faults: FaultMix) -> Outcome {
        Outcome {
            seed,
            verdict: Verdict::Ok,
            scenario,
            faults,
            checked_deliveries: 0,
            packets_lost: 0,
            packets_duplicated: 0,
            links_removed: 0,
            failure_rounds: 0,
            hosts_declared: 0,
            recalled: 0,
            ctrl_lost: 0,
            forwarded: 0,
            recovered: 0,
            rejoined: 0,
            rejoined_traffic: 0,
            detail: Vec::new(),
        }
    }

    /// Runs `f`: its report, or `None` with the verdict `Crash` and why (a refused
    /// configuration, or a panic's message).
    fn caught<R>(&mut self, f: impl FnOnce() -> Result<R, ConfigError>) -> Option<R> {
        let why = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(Ok(r)) => return Some(r),
            Ok(Err(e)) => format!("configuration refused: {e}"),
            Err(panic) => panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".to_string()),
        };
        self.verdict = Verdict::Crash;
        self.detail.push(why);
        None
    }
}

/// The baseline families `onepipe vopr` draws instead of 1Pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaselineDraw {
    /// `--plato`: PLATO or its fixed sequencer.
    Plato,
    /// `--toto`: ToTo or all-ack over the causal layer (docs/TOTO.md).
    Toto,
}

/// Seed `seed`'s baseline scenario (`onepipe vopr --plato|--toto`): the network, workload and
/// link faults of the swarm (loss, bursts, targeted loss, duplication, reordering, clock skew;
/// the baselines model no crashes or cuts), then the family's protocol and its parameters:
/// PLATO or its fixed sequencer with k, the batch flush, Δ and its adaptation; ToTo (φ from
/// ⌈n/2⌉ to n − 1) or all-ack, with the heartbeat interval, all-to-all (ToTo broadcasts). A
/// pure function of its arguments.
pub fn baseline_scenario(
    seed: u64,
    duration_ns: u64,
    family: BaselineDraw,
) -> (SimConfig, crate::baseline::BaselineConfig, FaultMix) {
    let salt = match family {
        BaselineDraw::Plato => 0x91A7_0000,
        BaselineDraw::Toto => 0x7070_0000,
    };
    let mut rng = Rng::new(seed ^ salt);
    let cfg = draw_network(&mut rng, seed, duration_ns);
    let faults = FaultMix {
        skew_ns: [0.0, 300.0, 2_000.0][pick(&mut rng, 3)],
        ..FaultMix::default()
    };
    let mut d = Draw { rng, cfg, faults };
    d.cfg.net.clock_skew_ns = d.faults.skew_ns;
    d.draw_link_faults();
    if d.cfg.faults.loss_kind == Some(PacketKind::Commit) {
        // 1Pipe's commit packets have no counterpart here: aim at the data (and the order).
        d.cfg.faults.loss_kind = Some(PacketKind::Data);
        d.faults.loss_kind = Some("data".to_string());
    }
    let base = match family {
        BaselineDraw::Plato => draw_plato(&mut d.rng),
        BaselineDraw::Toto => draw_toto(&mut d.rng, &mut d.cfg),
    };
    if family == BaselineDraw::Toto {
        // §5: ToTo and all-ack fail over (the others do not): one or two hosts crash
        // mid-load, never all.
        if let Ok(hosts) = d.cfg.net.hosts() {
            d.draw_crashes(hosts);
        }
    }
    (d.cfg, base, d.faults)
}

/// Seed `seed`'s PLATO scenario (`onepipe vopr --plato`): [`baseline_scenario`]'s.
pub fn plato_scenario(
    seed: u64,
    duration_ns: u64,
) -> (SimConfig, crate::baseline::BaselineConfig, FaultMix) {
    baseline_scenario(seed, duration_ns, BaselineDraw::Plato)
}

/// PLATO or its fixed sequencer, k, the batch flush, Δ and its adaptation.
fn draw_plato(rng: &mut Rng) -> crate::baseline::BaselineConfig {
    use onepipe_baselines::Protocol;
    let protocol = if rng.chance(0.75) {
        Protocol::Plato
    } else {
        Protocol::PlatoFixed
    };
    let mut base = crate::baseline::BaselineConfig::new(protocol);
    base.plato_k = [1, 2, 10, 20][pick(rng, 4)];
    base.plato_flush_ns = [5_000, 20_000, 100_000][pick(rng, 3)];
    base.plato_delta_ns = [500, 2_000, 10_000][pick(rng, 3)];
    base.plato_adaptive = rng.chance(0.5);
    base
}

/// ToTo (φ drawn in ⌈n/2⌉ .. n) or all-ack, the heartbeat interval; all-to-all sends at a
/// rate of their own.
fn draw_toto(rng: &mut Rng, cfg: &mut SimConfig) -> crate::baseline::BaselineConfig {
    use onepipe_baselines::Protocol;
    cfg.workload.workload = WorkloadKind::AllToAll;
    // ToTo's rules read the whole pending DAG at every change: a swarm rate (up to 100,000
    // broadcasts/s per process to 32 processes) made a seed cost ~20 s; these keep it ~1 s.
    cfg.workload.rate_per_proc = [2_000.0, 5_000.0, 10_000.0][pick(rng, 3)];
    let n = cfg.net.procs().unwrap_or(2);
    let protocol = if rng.chance(0.75) && n >= 2 {
        Protocol::Toto
    } else {
        Protocol::AllAck
    };
    let mut base = crate::baseline::BaselineConfig::new(protocol);
    if protocol == Protocol::Toto {
        let least = n.div_ceil(2);
        base.toto_phi = Some(least + rng.below(u64::from(n - least)) as u32);
    }
    base.toto_heartbeat_ns = [5_000, 20_000, 100_000][pick(rng, 3)];
    base
}

/// Seed `seed`'s baseline scenario, in words.
fn describe_baseline(cfg: &SimConfig, base: &crate::baseline::BaselineConfig) -> String {
    use onepipe_baselines::Protocol;
    let params = match base.protocol {
        Protocol::Plato | Protocol::PlatoFixed => format!(
            "k={} flush={}ns delta={}ns{}",
            base.plato_k,
            base.plato_flush_ns,
            base.plato_delta_ns,
            if base.plato_adaptive { " adaptive" } else { "" }
        ),
        _ => format!(
            "phi={} heartbeat={}ns",
            base.toto_phi.map_or("-".to_string(), |p| p.to_string()),
            base.toto_heartbeat_ns
        ),
    };
    format!("{} — {} {params}", describe(cfg), base.protocol.name())
}

/// Runs seed `seed` as [`plato_scenario`] draws it and judges it ([`run_baseline_seed`]).
pub fn run_plato_seed(seed: u64, duration_ns: u64) -> Outcome {
    run_baseline_seed(seed, duration_ns, BaselineDraw::Plato)
}

/// Runs seed `seed` as [`baseline_scenario`] draws it and judges it: a checker's violation (the
/// baselines' total order and, per family, PLATO's hooks or causal order) is a correctness
/// failure, a run that does not drain a liveness failure.
pub fn run_baseline_seed(seed: u64, duration_ns: u64, family: BaselineDraw) -> Outcome {
    let (cfg, base, faults) = baseline_scenario(seed, duration_ns, family);
    let mut out = Outcome::new(seed, describe_baseline(&cfg, &base), faults);
    let run = || crate::baseline::run_baseline(&cfg, &base, &mut |_| {});
    let Some(report) = out.caught(run) else {
        return out;
    };
    out.checked_deliveries = report.checked_deliveries;
    out.packets_lost = report.packets_lost;
    out.packets_duplicated = report.packets_duplicated;
    if report.violations > 0 {
        out.verdict = Verdict::Correctness;
        out.detail = report.violation_samples;
    } else if !report.drained {
        out.verdict = Verdict::Liveness;
        out.detail.push(format!(
            "did not drain within {} ns after sending stopped: {} message(s) still undelivered",
            cfg.workload.drain_ns, report.undrained
        ));
    }
    out
}

/// Runs seed `seed` with `duration_ns` of sending and judges it.
pub fn run_seed(seed: u64, duration_ns: u64) -> Outcome {
    run_seed_with(seed, duration_ns, false)
}

/// Runs seed `seed` as [`scenario_with`] draws it (`apps`: applications drawn too) and judges
/// it.
pub fn run_seed_with(seed: u64, duration_ns: u64, apps: bool) -> Outcome {
    let (cfg, faults) = scenario_with(seed, duration_ns, apps);
    if faults.direct {
        return run_direct_seed(seed, &cfg, faults);
    }
    judge(seed, &cfg, faults)
}

/// Runs seed `seed` as [`tree_scenario`] draws it and judges it as every 1Pipe seed is.
pub fn run_tree_seed(seed: u64, duration_ns: u64) -> Outcome {
    let (cfg, faults) = tree_scenario(seed, duration_ns);
    judge(seed, &cfg, faults)
}

/// Runs 1Pipe seed `seed` on `cfg` and judges it: a checker's violation (1Pipe's or its
/// application's) is a correctness failure, a run that does not drain a liveness failure
/// (unless its replicated service lost a majority and nothing went stale).
fn judge(seed: u64, cfg: &SimConfig, faults: FaultMix) -> Outcome {
    let mut out = Outcome::new(seed, describe(cfg), faults);
    let Some(report): Option<Report> = out.caught(|| run(cfg, &mut |_| {})) else {
        return out;
    };
    out.checked_deliveries = report.checked_deliveries;
    out.packets_lost = report.packets_lost;
    out.packets_duplicated = report.packets_duplicated;
    out.links_removed = report.links_removed;
    out.failure_rounds = report.failure_rounds.len() as u64;
    out.hosts_declared = report
        .failure_rounds
        .iter()
        .map(|r| r.hosts.len() as u64)
        .sum();
    out.recalled = report.recalled;
    out.ctrl_lost = report.ctrl_lost;
    out.forwarded = report.forwarded;
    out.recovered = report.recovered;
    out.rejoined = report.rejoined;
    out.rejoined_traffic = report.rejoined_delivered_to + report.rejoined_delivered_from;
    let app_violations = report.app.as_ref().map_or(0, |a| a.violations);
    // A replicated service that lost a majority of its replicas cannot go on (it chooses
    // consistency): its clients' open operations are then no liveness failure, nor are the
    // messages their retries keep in flight to the end — but a message stuck for
    // `check::STALE_NS` still is.
    let declared = report
        .failure_rounds
        .iter()
        .flat_map(|r| r.hosts.iter().map(|h| h.0));
    let majority_lost = majority_lost(cfg, declared);
    if report.violations > 0 || app_violations > 0 {
        out.verdict = Verdict::Correctness;
        out.detail = report.violation_samples;
        if let Some(a) = &report.app {
            out.detail.extend(a.violation_samples.iter().cloned());
        }
    } else if !(report.drained || majority_lost && report.undrained_stale == 0) {
        out.verdict = Verdict::Liveness;
        out.detail.push(format!(
            "did not drain within {} ns after sending stopped: {} message(s) still undelivered and unreported ({} sent {} ms or more before the end)",
            cfg.workload.drain_ns,
            report.undrained,
            report.undrained_stale,
            crate::check::STALE_NS / 1_000_000
        ));
        out.detail
            .extend(report.undrained_samples.iter().take(3).cloned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plato_seeds_pass_and_draw_both_protocols() {
        let mut names = std::collections::BTreeSet::new();
        for seed in 1..9 {
            let o = run_plato_seed(seed, 1_000_000);
            assert_eq!(o.verdict, Verdict::Ok, "seed {seed}: {o:?}");
            assert!(o.checked_deliveries > 0, "seed {seed}");
            let protocol = o.scenario.rsplit(" — ").next().unwrap();
            names.insert(protocol.split(' ').next().unwrap().to_string());
        }
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_seed_is_a_pure_function() {
        let (a, fa) = scenario(7, DURATION_NS);
        let (b, fb) = scenario(7, DURATION_NS);
        assert_eq!(format!("{a:?}{fa:?}"), format!("{b:?}{fb:?}"));
        for s in 0..200 {
            scenario(s, DURATION_NS)
                .0
                .validate()
                .unwrap_or_else(|e| panic!("seed {s}: {e}"));
        }
    }

    /// Heals and restarts are drawn after every other fault (so a seed's earlier faults are
    /// what they were before recoveries existed), each of a cut or crash drawn before it; some
    /// seeds draw each.
    #[test]
    fn the_swarm_draws_heals_and_restarts_last() {
        let (mut heals, mut restarts) = (0, 0);
        for s in 0..300 {
            let (cfg, f) = scenario(s, DURATION_NS);
            assert_eq!(f.heals as usize, cfg.faults.heals.len());
            assert_eq!(
                (f.restarts + f.rejoins_after_leave) as usize,
                cfg.faults.restarts.len()
            );
            for (name, at) in &cfg.faults.heals {
                let cut = cfg
                    .faults
                    .cuts
                    .iter()
                    .find(|c| c.0 == *name)
                    .expect("a heal of a cut");
                assert!(*at > cut.1);
            }
            for &(h, at) in &cfg.faults.restarts {
                let crashed = cfg.faults.crashes.iter().any(|&(c, t)| c == h && t < at);
                let left = cfg.faults.leaves.iter().any(|&(c, t)| c == h && t < at);
                assert!(crashed || left);
            }
            assert!(cfg.validate().is_ok(), "seed {s}: {:?}", cfg.validate());
            heals += cfg.faults.heals.len();
            restarts += cfg.faults.restarts.len();
        }
        assert!(
            heals > 10 && restarts > 10,
            "{heals} heals, {restarts} restarts"
        );
    }

    #[test]
    fn the_swarm_draws_clock_steps_and_controller_outages() {
        let (mut steps, mut back, mut downs, mut during_a_round) = (0, 0, 0, 0);
        for s in 0..200 {
            let (cfg, f) = scenario(s, DURATION_NS);
            assert_eq!(f.clock_steps as usize, cfg.faults.clock_steps.len());
            assert_eq!(
                f.controller_downs as usize,
                cfg.faults.controller_down.len()
            );
            steps += cfg.faults.clock_steps.len();
            back += cfg.faults.clock_steps.iter().filter(|c| c.2 < 0).count();
            for &(from, to) in &cfg.faults.controller_down {
                assert!((10_000..=500_000).contains(&(to - from)));
                downs += 1;
                let fault = cfg
                    .faults
                    .crashes
                    .iter()
                    .map(|c| c.1)
                    .chain(cfg.faults.cuts.iter().map(|c| c.1))
                    .min();
                during_a_round +=
                    fault.is_some_and(|t| (t + 20_000..t + 80_000).contains(&from)) as u32;
            }
            for &(_, _, step) in &cfg.faults.clock_steps {
                assert!((1_000..=50_000).contains(&step.unsigned_abs()));
            }
        }
        assert!(
            steps > 20 && back > 5 && steps - back > 5,
            "{steps} steps, {back} back"
        );
        assert!(
            downs > 20 && during_a_round > 5,
            "{downs} outages, {during_a_round} in a round"
        );
    }
}
