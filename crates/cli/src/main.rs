//! The `onepipe` command: `onepipe sim` runs the deterministic data-center simulator, `onepipe
//! bench` its experiments, `onepipe up` a live local cluster (with the daemons `controller`,
//! `agg` and `node`, and `topology` for cluster files).
#![allow(clippy::disallowed_methods)] // a CLI may read files and clocks.

mod bench;
mod bench_plato;
mod bench_plato_1pipe;
mod bench_plato_fig3;
mod bench_plato_spike;
mod bench_toto;
mod cli;
mod etcd_bench;
mod fig14;
mod fig15;
mod fig16;
mod fig8;
mod hugepages;
mod live;
mod model;
mod paxos;
mod plot;
mod replication;
mod sim_app;
mod sim_baseline;
mod sweep;
mod vopr;

fn main() {
    std::process::exit(cli::main());
}
