//! Building a 1Pipe [`World`](super::World) from its configuration, step by step: the process
//! ids and the router, the hosts, the switches, the links' faults, the checkers and the
//! controller. `World::new` calls these in an order that keeps the random draws as they were.

use super::*;

/// Process ids: the hosts' processes and the spare ids §5.2 rejoins take.
pub(super) fn proc_ids_max(cfg: &SimConfig, procs: u32) -> Result<u32, String> {
    let spare = cfg
        .protocol
        .proc_ids_spare
        .unwrap_or(if procs <= 1024 { 3 * procs } else { 0 });
    procs
        .checked_add(spare)
        .filter(|&m| m <= onepipe_proto::reorder::SENDERS_MAX)
        .ok_or_else(|| format!("{procs} processes and {spare} spare ids are too many"))
}

impl TopoRouter {
    /// Process `p` on host `p / pph`; spare ids on no host yet.
    pub(super) fn new(topo: &Arc<Topology>, pph: u32, proc_ids_max: u32, seed: u64) -> TopoRouter {
        let procs = topo.hosts() * pph;
        TopoRouter {
            topo: topo.clone(),
            host_of: (0..proc_ids_max)
                .map(|p| {
                    std::sync::atomic::AtomicU32::new(if p < procs { p / pph } else { u32::MAX })
                })
                .collect(),
            seed,
            detour: std::sync::RwLock::new(None),
            detouring: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// Host `h`'s role configuration.
pub(super) fn host_config(
    cfg: &SimConfig,
    topo: &Topology,
    h: u32,
    proc_ids_max: u32,
    host_of: &Arc<[u32]>,
) -> HostConfig {
    let pph = cfg.net.procs_per_host;
    let procs = topo.hosts() * pph;
    let chip = cfg.net.switch_mode == SwitchMode::Chip;
    let mut hc = HostConfig::new(
        NodeId(h),
        (h * pph..(h + 1) * pph).map(ProcId).collect(),
        proc_ids_max,
    );
    hc.host_of = Some(host_of.clone());
    hc.input_link = Some(topo.downlink(h));
    // Spare ids cost nothing until a rejoined host's processes use them.
    hc.senders_stored = procs;
    hc.beacon_interval_ns = cfg.net.beacon_interval_ns;
    // Issue 37: demand beacons, chip mode only (a CPU or representative switch reads beacons
    // on its own timer).
    if chip {
        hc.beacon_fast_interval_ns = cfg.net.fast_beacon_interval_ns;
        hc.beacon_fast_hold_ns = cfg.net.beacon_interval_ns;
    }
    hc.barrier_on_data = chip;
    hc.beacon_always = !chip;
    hc.mtu_payload = cfg.net.mtu_payload;
    hc.reliable.rto_ns = cfg.protocol.rto_ns;
    hc.reliable.rto_max_ns = cfg.protocol.rto_max_ns;
    hc.reliable.dupack_threshold = cfg.protocol.dupack_threshold;
    hc.ack_delay_be_ns = cfg.protocol.ack_delay_be_ns;
    hc.rto_max_ns = cfg.protocol.loss_timeout_max_ns;
    hc.reliable.send_buffer_bytes_max = cfg.protocol.send_buffer_bytes;
    hc.reliable.forward_after_retransmits = cfg.protocol.forward_after;
    hc.deliver_burst_max = cfg.protocol.deliver_burst_max;
    hc.retransmit_burst_max = cfg.protocol.retransmit_burst_max;
    let delta = cfg.protocol.optimistic_delta_ns;
    hc.optimistic = (delta > 0).then(|| match cfg.protocol.optimistic_adaptive {
        true => onepipe_proto::optimistic::OptConfig::adaptive(delta),
        false => onepipe_proto::optimistic::OptConfig::fixed(delta),
    });
    hc
}

/// The hosts, with their roles and crash times, their engine roles (clocks) and their cores:
/// host `h` is role `h` on core `h`, one core serving all its processes.
pub(super) fn build_hosts(
    cfg: &SimConfig,
    topo: &Topology,
    clock_seed: u64,
    proc_ids_max: u32,
) -> (Vec<HostSt>, Vec<RoleSt>, Vec<Core<OnePipeInput>>) {
    let pph = cfg.net.procs_per_host;
    let procs = topo.hosts() * pph;
    // §6.1: a host sends the ACKs it owes another host's processes together.
    // Spare ids (for §5.2 rejoins) have no host yet: each is a batch of its own, numbered
    // after the hosts (a process lives on one host, so its ACKs still go to one place).
    let host_of: Arc<[u32]> = (0..proc_ids_max)
        .map(|p| {
            if p < procs {
                p / pph
            } else {
                topo.hosts() + (p - procs)
            }
        })
        .collect();
    let (mut hosts, mut roles, mut cpus) = (Vec::new(), Vec::new(), Vec::new());
    let costs = Costs {
        recv_ns: cfg.net.host_recv_ns,
        send_ns: cfg.net.host_send_ns,
        deliver_ns: cfg.net.host_deliver_ns,
    };
    for h in 0..topo.hosts() {
        let steps: Vec<(u64, i64)> = cfg
            .faults
            .clock_steps
            .iter()
            .filter(|s| s.0 == h)
            .map(|s| (s.1, s.2))
            .collect();
        let mut clock = Clock::new(engine::clock_params(cfg), clock_seed, h).with_steps(steps);
        let hc = host_config(cfg, topo, h, proc_ids_max, &host_of);
        let host = Host::new(hc, clock.local(0));
        roles.push(RoleSt::new(clock, Some(h)));
        cpus.push(Core::new(costs, HOST_QUEUE_SEND_MAX, true));
        hosts.push(HostSt {
            host,
            reliable_queued: VecDeque::new(),
            crash_at: first_at(&cfg.faults.crashes, h),
            restart_at: SimTime::MAX,
            leave_at: first_at(&cfg.faults.leaves, h),
            cut_at: SimTime::MAX,
            heal_at: SimTime::MAX,
            last_move: [0; 2],
            stall_max: [0; 2],
            keepalive_armed: false,
            released_before: None,
            be_released_before: None,
        });
    }
    (hosts, roles, cpus)
}

/// The switches, each beaconing its depth's phase after every tick, and their engine roles
/// (clocks; a switch has no core).
pub(super) fn build_switches(
    cfg: &SimConfig,
    topo: &Topology,
    clock_seed: u64,
    router: Arc<TopoRouter>,
) -> (Vec<Switch>, Vec<RoleSt>) {
    let router: Arc<dyn Router> = router;
    let clock_params = engine::clock_params(cfg);
    let hop_ns = beacon_hop_ns(cfg);
    let (mut switches, mut roles) = (Vec::new(), Vec::new());
    for n in topo.switches() {
        let node = topo.node(n);
        let mut clock = Clock::new(clock_params, clock_seed, n.0);
        let (inputs, outputs) = (node.inputs.len(), node.outputs.len());
        let mut sc = switch_config(cfg, hop_ns, n, node.depth, inputs, outputs);
        sc.input_links = node.inputs.clone();
        let sw = Switch::new(sc, Some(router.clone()), clock.local(0));
        switches.push(sw);
        roles.push(RoleSt::new(clock, None));
    }
    (switches, roles)
}

/// §4.2: beacons are sent at synchronized times, and a switch `d` links above the hosts fires
/// once the wave from below has arrived: one hop of latency, serialization and processing per
/// layer, plus slack for the skew between the clocks at either end of the hop. (Timer-driven
/// beacons matter in CPU and representative modes; a chip forwards a wave as it arrives and
/// its timer only sweeps stale links.) Returns that hop, ns.
pub(super) fn beacon_hop_ns(cfg: &SimConfig) -> u64 {
    let beacon_wire = Packet::Beacon(onepipe_proto::wire::Beacon {
        from: NodeId(0),
        barrier: Timestamp::new(0),
        commit: Timestamp::new(0),
        demand: false,
    })
    .wire_len() as u64;
    let ps_per_byte = engine::ps_per_byte(cfg);
    let slack_ns = (2.0 * cfg.net.clock_skew_ns) as u64 + cfg.net.host_recv_ns;
    cfg.net.link_delay_ns
        + (beacon_wire * ps_per_byte).div_ceil(1000)
        + cfg.net.beacon_delay()
        + slack_ns
}

/// The configuration of a switch (or an aggregator's half) `node`, `depth` hops above the
/// hosts, with `inputs` and `outputs` ports: the run's incarnation and beacons, its timed
/// beacons phased `depth` hops of `hop_ns` after each tick ([`beacon_hop_ns`]).
pub(super) fn switch_config(
    cfg: &SimConfig,
    hop_ns: u64,
    node: NodeId,
    depth: u32,
    inputs: usize,
    outputs: usize,
) -> SwitchConfig {
    let mut sc = SwitchConfig::new(node, cfg.net.switch_mode, inputs, outputs);
    sc.beacon_interval_ns = cfg.net.beacon_interval_ns;
    sc.beacon_min_gap_ns = cfg.net.beacon_min_gap();
    if cfg.net.fast_beacon_interval_ns > 0 && cfg.net.switch_mode == SwitchMode::Chip {
        sc.demand_hold_ns = cfg.net.beacon_interval_ns;
    }
    sc.beacon_delay_ns = cfg.net.beacon_delay();
    sc.beacon_phase_ns = depth as u64 * hop_ns;
    sc.link_timeout_intervals = cfg.protocol.link_timeout_intervals;
    sc
}

/// `--cut NAME@T[..HEAL]`: marks the links cut (and healed); returns the hosts whose own links
/// heal, and when (§5.2 receiver recovery starts there).
pub(super) fn apply_cuts(
    cfg: &SimConfig,
    topo: &Topology,
    links: &mut [Link],
) -> Result<Vec<(u32, SimTime)>, String> {
    // `--cut NAME@T`: every link of the named nodes — a host ("host-3": its two links), or a
    // physical switch ("tor-1": both logical halves, "core-0") — carries nothing from T on.
    let named = |name: &str| -> Result<Vec<usize>, String> {
        let nodes: Vec<usize> = topo
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                n.name == name || n.name == format!("{name}-up") || n.name == format!("{name}-down")
            })
            .map(|(i, _)| i)
            .collect();
        if nodes.is_empty() {
            return Err(format!(
                "--cut: no host or switch named '{name}' (names look like host-3, tor-1, agg-0, core-0, leaf-1, spine-0)"
            ));
        }
        Ok(nodes)
    };
    // "A/B": the physical link between A and B (both directions); "A>B": only its direction
    // from A to B; else every link of A.
    let cut_links = |name: &str| -> Result<Vec<usize>, String> {
        let (a, b, both) = match (name.split_once('/'), name.split_once('>')) {
            (Some((a, b)), _) => (named(a)?, Some(named(b)?), true),
            (None, Some((a, b))) => (named(a)?, Some(named(b)?), false),
            (None, None) => (named(name)?, None, true),
        };
        let hit: Vec<usize> = topo
            .links()
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                let (from, to) = (l.from.0 as usize, l.to.0 as usize);
                match &b {
                    None => a.contains(&from) || a.contains(&to),
                    Some(b) => {
                        a.contains(&from) && b.contains(&to)
                            || both && b.contains(&from) && a.contains(&to)
                    }
                }
            })
            .map(|(i, _)| i)
            .collect();
        if hit.is_empty() {
            return Err(format!("--cut: no link between the nodes of '{name}'"));
        }
        Ok(hit)
    };
    for (name, at) in &cfg.faults.cuts {
        for i in cut_links(name)? {
            links[i].cut_at = links[i].cut_at.min(*at);
        }
    }
    // Heals (`--cut NAME@T1..T2`): the links of a cut carry again. A host whose own links
    // heal runs §5.2 receiver recovery (it also starts on its own when it hears its switch).
    let mut heals = Vec::new();
    for (name, at) in &cfg.faults.heals {
        if !cfg.faults.cuts.iter().any(|c| c.0 == *name) {
            return Err(format!("--cut: '{name}' heals but is never cut"));
        }
        for i in cut_links(name)? {
            let l = &mut links[i];
            if l.cut_at > *at {
                return Err(format!("--cut: '{name}' heals before it is cut"));
            }
            l.heal_at = l.heal_at.min(*at);
        }
        if let Some(h) = (0..topo.hosts()).find(|&h| topo.node(NodeId(h)).name == *name) {
            heals.push((h, *at));
        }
    }
    Ok(heals)
}

/// The earliest time `events` (host, true time) name host `h`; `SimTime::MAX` for none.
fn first_at(events: &[(u32, u64)], h: u32) -> SimTime {
    events
        .iter()
        .filter(|c| c.0 == h)
        .map(|c| c.1)
        .min()
        .unwrap_or(SimTime::MAX)
}

/// Each switch's output links, all in one table: (where each switch's start, the links) —
/// switch s's port p is `links[base[s] + p]`.
pub(super) fn switch_out_links(topo: &Topology) -> (Vec<u32>, Vec<u32>) {
    let (mut switch_out_base, mut switch_out_links) = (Vec::new(), Vec::new());
    for n in topo.switches() {
        switch_out_base.push(switch_out_links.len() as u32);
        switch_out_links.extend(topo.node(n).outputs.iter().map(|l| l.0));
    }
    (switch_out_base, switch_out_links)
}

/// The first crash or cut (Fig. 10 measures stalls after it); `SimTime::MAX` if none.
pub(super) fn first_fault(cfg: &SimConfig) -> SimTime {
    cfg.faults
        .crashes
        .iter()
        .map(|c| c.1)
        .chain(cfg.faults.cuts.iter().map(|c| c.1))
        .min()
        .unwrap_or(SimTime::MAX)
}

/// Each host's crash, restart, cut and heal times; returns the restarts to schedule.
pub(super) fn schedule_faults(
    cfg: &SimConfig,
    topo: &Topology,
    hosts: &mut [HostSt],
    links: &[Link],
) -> Vec<(u32, SimTime)> {
    let mut restarts = Vec::new();
    for (h, st) in hosts.iter_mut().enumerate() {
        // The first restart after the first crash (later crashes and restarts of the same
        // host are not modelled).
        if let Some(at) = cfg
            .faults
            .restarts
            .iter()
            .filter(|r| r.0 == h as u32 && r.1 > st.crash_at.min(st.leave_at))
            .map(|r| r.1)
            .min()
        {
            st.restart_at = at;
            restarts.push((h as u32, at));
        }
        let (up, down) = (topo.uplink(h as u32), topo.downlink(h as u32));
        st.cut_at = links[up.index()].cut_at.min(links[down.index()].cut_at);
        st.heal_at = links[up.index()].heal_at.max(links[down.index()].heal_at);
    }
    restarts
}

/// The checkers (with `cfg.check`), a host cut off excused like a crashed one.
pub(super) fn new_checker(
    cfg: &SimConfig,
    procs: u32,
    hosts: &[HostSt],
    switches: usize,
) -> Option<Checker> {
    let pph = cfg.net.procs_per_host;
    let mut checker = cfg
        .check
        .then(|| Checker::new(procs, pph, switches, cfg.faults.reorder_prob == 0.0));
    if let Some(c) = checker.as_mut() {
        // A host cut off is excused like a crashed one (§4.2: best effort promises nothing
        // to or from it).
        for (h, st) in hosts.iter().enumerate() {
            if st.cut_at < SimTime::MAX {
                c.on_crash(st.cut_at, h as u32);
            }
        }
    }
    checker
}

/// The §5.2 controller over `topo`, its relay channel on.
pub(super) fn new_controller(
    cfg: &SimConfig,
    topo: &Arc<Topology>,
    proc_ids_max: u32,
) -> Controller {
    let pph = cfg.net.procs_per_host;
    Controller::new(
        ControllerConfig {
            procs_of_host: (0..topo.hosts())
                .map(|h| (h * pph..(h + 1) * pph).map(ProcId).collect())
                .collect(),
            settle_ns: cfg.protocol.failure_settle_ns,
            callback_timeout_ns: 0,
        },
        topo.clone(),
    )
    .with_relay(proc_ids_max)
}
