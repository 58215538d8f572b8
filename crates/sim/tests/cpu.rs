//! One CPU model for every system (issue 36, "equal resources"): a host's processes share one
//! core — 1Pipe's host role, the direct engine's processes, the baselines' processes — at the
//! same costs, which the benches pool (`NetworkConfig::pool_host_cpu`: a core's worth per process);
//! only the host-placed sequencer has a core of its own.

use onepipe_apps::kv::workload::KvWorkload;
use onepipe_baselines::Protocol;
use onepipe_sim::baseline::protocol::BaseWorld;
use onepipe_sim::baseline::BaselineConfig;
use onepipe_sim::direct::{DirectSystem, DirectWorld};
use onepipe_sim::engine::Costs;
use onepipe_sim::onepipe::World;
use onepipe_sim::queue::RadixHeap;
use onepipe_sim::{AppSpec, NetworkConfig, SimConfig, TopologySpec, WorkloadConfig};

const HOSTS: u32 = 4;
const PPH: u32 = 4;

fn cfg() -> SimConfig {
    let mut c = SimConfig {
        net: NetworkConfig {
            topology: TopologySpec::Rack { hosts: HOSTS },
            procs_per_host: PPH,
            ..Default::default()
        },
        workload: WorkloadConfig {
            duration_ns: 100_000,
            app: Some(AppSpec::Kv {
                workload: KvWorkload::default(),
                window: 4,
            }),
            ..Default::default()
        },
        ..SimConfig::default()
    };
    c.net.pool_host_cpu();
    c
}

fn same(a: Costs, b: Costs) -> bool {
    (a.send_ns, a.recv_ns, a.deliver_ns) == (b.send_ns, b.recv_ns, b.deliver_ns)
}

#[test]
fn pooling_divides_the_costs_by_the_processes_per_host_with_the_sum_exact() {
    let pooled = |pph| {
        let mut c = SimConfig {
            net: NetworkConfig {
                procs_per_host: pph,
                ..Default::default()
            },
            ..SimConfig::default()
        };
        c.net.pool_host_cpu();
        (
            c.net.host_send_ns,
            c.net.host_recv_ns,
            c.net.host_deliver_ns,
        )
    };
    // The defaults: 50 ns to send, 50 to receive, 20 to deliver.
    assert_eq!(pooled(1), (50, 50, 20), "one process per host: unchanged");
    assert_eq!(pooled(2), (25, 25, 10));
    assert_eq!(pooled(3), (16, 17, 7), "send + receive = ⌊100 / 3⌋");
    assert_eq!(pooled(4), (12, 13, 5), "send + receive = 100 / 4");
}

#[test]
fn the_direct_engine_runs_a_hosts_processes_on_one_core_as_1pipe_does() {
    let c = cfg();
    let host_costs = Costs {
        send_ns: c.net.host_send_ns,
        recv_ns: c.net.host_recv_ns,
        deliver_ns: c.net.host_deliver_ns,
    };
    let direct = DirectWorld::new(c.clone(), DirectSystem::NonTx, RadixHeap::new()).unwrap();
    let onepipe = World::new(c, RadixHeap::new()).unwrap();
    assert_eq!(direct.cpus().len(), HOSTS as usize);
    assert_eq!(onepipe.cpus().len(), HOSTS as usize);
    for h in 0..HOSTS {
        let (d, o) = (&direct.cpus()[h as usize], &onepipe.cpus()[h as usize]);
        assert_eq!(d.roles(), h * PPH..(h + 1) * PPH, "host {h}'s processes");
        assert_eq!(o.roles(), h..h + 1, "host {h}'s 1Pipe role");
        assert!(same(d.costs, host_costs) && same(o.costs, host_costs));
        assert_eq!(
            d.send_queue_max, o.send_queue_max,
            "one send limit per host"
        );
    }
}

#[test]
fn baseline_processes_share_their_hosts_core_and_the_sequencer_has_its_own() {
    let mut c = cfg();
    c.workload.app = None;
    let base = BaselineConfig::new(Protocol::Sequencer);
    let w = BaseWorld::new(c.clone(), base.clone(), RadixHeap::new()).unwrap();
    let procs = HOSTS * PPH;
    assert_eq!(w.cpus().len(), HOSTS as usize + 1);
    for h in 0..HOSTS {
        assert_eq!(w.cpus()[h as usize].roles(), h * PPH..(h + 1) * PPH);
        assert_eq!(w.cpus()[h as usize].costs.send_ns, c.net.host_send_ns);
    }
    let seq = &w.cpus()[HOSTS as usize];
    assert_eq!(
        seq.roles(),
        procs..procs + 1,
        "the sequencer, on a core of its own"
    );
    let (seq_in, seq_out) = base.seq_host_costs(&c);
    assert_eq!((seq.costs.recv_ns, seq.costs.send_ns), (seq_in, seq_out));
}

/// The whole-run view: the same seed gives the same run on shared cores, and a host's four
/// processes never take more of their core than there is.
#[test]
fn shared_cores_are_deterministic_and_never_overbooked() {
    let run = || {
        let c = {
            let base = cfg();
            SimConfig {
                workload: WorkloadConfig {
                    duration_ns: 200_000,
                    ..base.workload
                },
                ..base
            }
        };
        onepipe_sim::direct::run_direct(&c, DirectSystem::NonTx, &mut |_| {}).unwrap()
    };
    let (a, b) = (run(), run());
    assert_eq!(a.trace_hash, b.trace_hash, "seed 1: same seed, same run");
    assert!(a.drained, "seed 1");
    assert!(a.app.committed > 0, "seed 1: {:?}", a.app);
    assert!(
        a.cpu_busy.max > 0.5,
        "a closed loop of 4 keeps the cores busy: {:?}",
        a.cpu_busy
    );
    // An input that starts before the end of issuing may run a little past it.
    assert!(a.cpu_busy.max <= 1.01, "{:?}", a.cpu_busy);
}
