//! Packets per second through one driver pair on loopback, with coalescing on and off.
//!
//! ```text
//! cargo run --release -p onepipe-runtime --example pingpong -- [--secs S] [--window W] [--payload B] [--runs N]
//! ```
//!
//! A pitcher keeps `W` data packets (36-byte header + `B` bytes) in flight to an echo; see
//! `onepipe_runtime::bench`. Each configuration runs `N` times (the machine is noisy).

use onepipe_runtime::bench::{pingpong, PingPongConfig};
use onepipe_runtime::{CoalesceConfig, DriverConfig};
use std::time::Duration;

fn main() {
    let mut cfg = PingPongConfig::default();
    let mut runs = 3;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage(&flag));
        match flag.as_str() {
            "--secs" => cfg.duration = Duration::from_secs_f64(parse(&flag, &value)),
            "--window" => cfg.window = parse(&flag, &value),
            "--payload" => cfg.payload_len = parse(&flag, &value),
            "--runs" => runs = parse(&flag, &value),
            _ => usage(&flag),
        }
    }
    println!(
        "window {} packets, payload {} B, {:.1} s per run",
        cfg.window,
        cfg.payload_len,
        cfg.duration.as_secs_f64()
    );
    println!("mode        run  packets/s  datagrams/s  pkts/dgram  refills");
    for (name, coalesce) in [
        ("coalesced", CoalesceConfig::default()),
        ("one-per-dg", CoalesceConfig::default().uncoalesced()),
    ] {
        for run in 1..=runs {
            let cfg = PingPongConfig {
                driver: DriverConfig {
                    coalesce: coalesce.clone(),
                    ..cfg.driver.clone()
                },
                ..cfg.clone()
            };
            let r = pingpong(&cfg).expect("ping-pong runs");
            println!(
                "{name:<11} {run:>3}  {:>9.0}  {:>11.0}  {:>10.1}  {:>7}",
                r.packets_per_s(),
                r.datagrams_per_s(),
                r.pitcher.packets_per_datagram_sent(),
                r.refills
            );
        }
    }
}

fn parse<T: std::str::FromStr>(flag: &str, value: &str) -> T {
    value.parse().unwrap_or_else(|_| usage(flag))
}

fn usage(flag: &str) -> ! {
    eprintln!("bad argument near {flag}\nusage: pingpong [--secs S] [--window W] [--payload B] [--runs N]");
    std::process::exit(2)
}
