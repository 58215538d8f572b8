//! Ping-pong through one driver pair: how many packets per second the transport moves, with
//! and without coalescing. The `pingpong` example prints it; a tiny run is in the test suite so
//! it cannot rot. Numbers are measured, never asserted.
//!
//! A *pitcher* keeps `window` data packets in flight to an *echo*, which returns each one; every
//! echo that comes back releases the next packet. Both run on their own thread with their own
//! [`Driver`] on loopback. A lost packet (a receive buffer overflow) would shrink the window, so
//! the pitcher refills it after `stall_ns` without progress and counts the refill.

use crate::clock::Clock;
use crate::config::DriverConfig;
use crate::driver::Driver;
use crate::ports::PortTable;
use crate::stats::DriverStats;
use crate::sys::bind_udp;
use bytes::Bytes;
use onepipe_proto::ids::{PortId, ProcId, Psn};
use onepipe_proto::node::{Input, Node, Output};
use onepipe_proto::time::{Instant, Timestamp};
use onepipe_proto::wire::{flags, DataHeader, DataPacket, Packet};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A ping-pong run.
#[derive(Clone, Debug)]
pub struct PingPongConfig {
    /// How long the pitcher pitches.
    pub duration: Duration,
    /// Packets in flight.
    pub window: usize,
    /// Payload bytes per data packet (the header adds 36).
    pub payload_len: usize,
    /// Both drivers' configuration (use [`crate::CoalesceConfig::uncoalesced`] for the
    /// baseline).
    pub driver: DriverConfig,
}

impl Default for PingPongConfig {
    fn default() -> Self {
        PingPongConfig {
            duration: Duration::from_secs(2),
            window: 512,
            payload_len: 16,
            driver: DriverConfig::default(),
        }
    }
}

/// What a ping-pong run measured.
#[derive(Clone, Debug)]
pub struct PingPongReport {
    /// Packets that went out and came back.
    pub round_trips: u64,
    /// Wall time of the pitching phase.
    pub elapsed: Duration,
    /// Times the pitcher refilled a window that had stopped moving (lost packets).
    pub refills: u64,
    /// The pitcher's driver counters.
    pub pitcher: DriverStats,
    /// The echo's driver counters.
    pub echo: DriverStats,
}

impl PingPongReport {
    /// Packets received per second, both directions together.
    pub fn packets_per_s(&self) -> f64 {
        (self.pitcher.packets_received + self.echo.packets_received) as f64
            / self.elapsed.as_secs_f64()
    }

    /// Datagrams received per second, both directions together.
    pub fn datagrams_per_s(&self) -> f64 {
        (self.pitcher.datagrams_received + self.echo.datagrams_received) as f64
            / self.elapsed.as_secs_f64()
    }
}

/// Runs one ping-pong on 127.0.0.1.
///
/// # Errors
/// Socket setup or poller failures.
pub fn pingpong(cfg: &PingPongConfig) -> io::Result<PingPongReport> {
    let clock = Clock::starting_now();
    let lo: SocketAddr = "127.0.0.1:0".parse().expect("a valid address");
    let (a, b) = (bind_udp(lo, &cfg.driver)?, bind_udp(lo, &cfg.driver)?);
    let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
    let stop = Arc::new(AtomicBool::new(false));
    let mut echo = Driver::new(
        Echo::default(),
        b,
        PortTable::new().with_link(PortId(0), a_addr),
        clock,
        cfg.driver.clone(),
    )?;
    let echo_waker = echo.waker();
    let echo_thread = {
        let stop = stop.clone();
        // A hang must end: the echo gives up long after the pitcher should have finished.
        let give_up = clock.now() + duration_ns(cfg.duration) + 30_000_000_000;
        std::thread::spawn(move || -> io::Result<DriverStats> {
            while !stop.load(Ordering::Relaxed) && echo.now() < give_up {
                echo.run_once(Duration::from_millis(100), &mut |_| {})?;
            }
            Ok(echo.stats())
        })
    };
    let pitcher = Pitcher::new(cfg.window, cfg.payload_len);
    let mut pitcher = Driver::new(
        pitcher,
        a,
        PortTable::new().with_link(PortId(0), b_addr),
        clock,
        cfg.driver.clone(),
    )?;
    let start = std::time::Instant::now();
    pitcher.with_node(|p, now| p.start(now), &mut |_| {});
    let end = pitcher.now() + duration_ns(cfg.duration);
    let result = pitcher.run_until(end, &mut |_| {}, |_| false);
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    echo_waker.wake()?;
    let echo_stats = echo_thread
        .join()
        .expect("the echo thread does not panic")?;
    result?;
    Ok(PingPongReport {
        round_trips: pitcher.node().echoed,
        elapsed,
        refills: pitcher.node().refills,
        pitcher: pitcher.stats(),
        echo: echo_stats,
    })
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 4)
}

/// Keeps `window` packets in flight to port 0.
#[derive(Debug)]
struct Pitcher {
    window: usize,
    payload: Bytes,
    in_flight: usize,
    seq: u32,
    echoed: u64,
    refills: u64,
    last_progress: Instant,
    stall_ns: u64,
    outputs: VecDeque<Output<Packet, ()>>,
}

impl Pitcher {
    fn new(window: usize, payload_len: usize) -> Pitcher {
        Pitcher {
            window: window.max(1),
            payload: Bytes::from(vec![0xAB; payload_len]),
            in_flight: 0,
            seq: 0,
            echoed: 0,
            refills: 0,
            last_progress: Instant::ZERO,
            stall_ns: 20_000_000,
            outputs: VecDeque::new(),
        }
    }

    fn start(&mut self, now: Instant) {
        self.last_progress = now;
        while self.in_flight < self.window {
            self.pitch(now);
        }
    }

    fn pitch(&mut self, now: Instant) {
        self.seq = self.seq.wrapping_add(1);
        self.in_flight += 1;
        let ts = Timestamp::new(now.as_nanos());
        self.outputs.push_back(Output::Send {
            port: PortId(0),
            packet: Packet::Data(DataPacket {
                header: DataHeader {
                    flags: flags::END_OF_MESSAGE,
                    frag: 0,
                    ts,
                    barrier: ts,
                    commit: ts,
                    psn: Psn(self.seq),
                    src: ProcId(0),
                    dst: ProcId(1),
                },
                payload: self.payload.clone(),
            }),
        });
    }
}

impl Node for Pitcher {
    type Packet = Packet;
    type Event = ();
    type Mgmt = std::convert::Infallible;

    fn handle(&mut self, now: Instant, input: Input<Packet>) {
        match input {
            Input::Packet { .. } => {
                self.echoed += 1;
                self.last_progress = now;
                self.in_flight = self.in_flight.saturating_sub(1);
                self.pitch(now);
            }
            Input::Timeout => {
                if now.saturating_since(self.last_progress) >= self.stall_ns {
                    self.refills += 1;
                    self.in_flight = 0;
                    self.start(now);
                }
            }
            Input::Notice(_) => {}
        }
    }

    fn poll_output(&mut self) -> Option<Output<Packet, ()>> {
        self.outputs.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.last_progress + self.stall_ns)
    }
}

/// Returns every packet on port 0.
#[derive(Debug, Default)]
struct Echo {
    outputs: VecDeque<Output<Packet, ()>>,
}

impl Node for Echo {
    type Packet = Packet;
    type Event = ();
    type Mgmt = std::convert::Infallible;

    fn handle(&mut self, _now: Instant, input: Input<Packet>) {
        if let Input::Packet { packet, .. } = input {
            self.outputs.push_back(Output::Send {
                port: PortId(0),
                packet,
            });
        }
    }

    fn poll_output(&mut self) -> Option<Output<Packet, ()>> {
        self.outputs.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tiny variant of the benchmark: it runs, packets go round, the counters agree.
    #[test]
    fn pingpong_moves_packets_both_ways() {
        for driver in [
            DriverConfig::default(),
            DriverConfig {
                coalesce: DriverConfig::default().coalesce.uncoalesced(),
                ..DriverConfig::default()
            },
        ] {
            let cfg = PingPongConfig {
                duration: Duration::from_millis(100),
                window: 64,
                driver,
                ..PingPongConfig::default()
            };
            let r = pingpong(&cfg).unwrap();
            assert!(r.round_trips > 0, "{r:?}");
            assert!(r.pitcher.packets_sent >= r.round_trips);
            assert_eq!(r.pitcher.decode_errors + r.echo.decode_errors, 0);
            assert_eq!(r.pitcher.unknown_source + r.echo.unknown_source, 0);
            assert!(r.packets_per_s() > 0.0);
        }
    }
}
