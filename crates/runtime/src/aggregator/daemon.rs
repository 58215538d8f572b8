//! The aggregator daemon: joining the controller as one aggregator, driving the role over a
//! socket until stopped ([`run_aggregator`], or [`AggregatorDaemon`] on a thread), carrying
//! the §5.2 messages both ways, re-registering after a controller failover, and the test faults
//! it applies ([`AggregatorFaults`], through the [`FaultFilter`] it drives the role behind).

use super::*;
use crate::auth::{KeyInbox, LinkAuth};
use crate::clock::Clock;
use crate::config::DriverConfig;
use crate::control::{
    ControlClient, ControlSender, FromController, JoinAs, JoinError, Member, ToController,
};
use crate::driver::Driver;
use crate::failure::{WireCtrl, WireRelay};
use crate::faults::Filtered;
use crate::keys::{aggregator_links, member_ix};
use crate::stats::{DriverStats, LinkBarriers, Telemetry, TelemetrySnapshot};
use crate::sys::bind_udp;
use crate::tls::Credentials;
use onepipe_proto::failure::{CtrlMsg, Mgmt, MgmtDest};
use onepipe_proto::node::{Input, Node};
use onepipe_proto::switch::SwitchStats;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;
use tracing::{debug, info, warn};

/// What an aggregator daemon did, when it stops.
#[derive(Clone, Debug)]
pub struct AggregatorReport {
    /// Its name.
    pub name: String,
    /// The UDP address it bound.
    pub addr: SocketAddr,
    /// Transport counters (`unknown_source` and `decode_errors` count datagrams dropped as
    /// strangers' or garbage).
    pub driver: DriverStats,
    /// Both halves' counters.
    pub switch: SwitchStats,
    /// Inputs the controller's Resume removed from the commit minimum (§5.2).
    pub commit_inputs_removed: u64,
    /// Packets dropped by a black-hole test fault ([`AggregatorFaults`]).
    pub blackholed: u64,
    /// Packets dropped at a cut uplink ([`AggregatorFaults`]).
    pub cut_dropped: u64,
    /// Packets dropped by reverse-path filtering: they named a sender that does not live
    /// behind the port they came in on (docs/SECURITY.md).
    pub spoofed_src: u64,
}

impl AggregatorReport {
    /// The counters by name (what the daemon reports to the controller and prints at exit).
    pub fn counters(&self) -> BTreeMap<String, u64> {
        let mut m = counters(&self.driver, &self.switch, self.commit_inputs_removed);
        m.insert("blackholed".into(), self.blackholed);
        m.insert("cut_dropped".into(), self.cut_dropped);
        m.insert("spoofed_src".into(), self.spoofed_src);
        m
    }
}

fn counters(d: &DriverStats, s: &SwitchStats, commit_removed: u64) -> BTreeMap<String, u64> {
    let mut m = d.counters();
    m.insert("forwarded".into(), s.forwarded);
    m.insert("beacons_received".into(), s.beacons_received);
    m.insert("beacons_sent".into(), s.beacons_sent);
    m.insert("switch_dropped".into(), s.dropped);
    m.insert("links_removed".into(), s.links_removed);
    m.insert("links_added".into(), s.links_added);
    m.insert("commit_inputs_removed".into(), commit_removed);
    m
}

/// A test fault for a running aggregator ([`AggregatorFaults`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// [`FaultFilter::blackhole`]: what `from` sends `to` is dropped here.
    Blackhole {
        /// The sending process.
        from: ProcId,
        /// The receiving process.
        to: ProcId,
    },
    /// [`FaultFilter::cut`]: everything `from` sends is dropped here.
    Cut {
        /// The process whose uplink is cut.
        from: ProcId,
    },
}

/// Test faults for a running aggregator, set from another thread (`onepipe up --blackhole`
/// and `--cut` write them to the daemon's standard input) and applied by [`run_aggregator`]'s
/// loop.
#[derive(Debug, Default)]
pub struct AggregatorFaults {
    faults: Mutex<Vec<Fault>>,
}

impl AggregatorFaults {
    /// Applies `fault` from the loop's next turn.
    pub fn add(&self, fault: Fault) {
        self.faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(fault);
    }

    /// Faults added and not yet taken by the loop. The loop applies what it takes before it
    /// handles another datagram, so once this is 0, every datagram that arrives from then on
    /// meets the faults.
    pub fn pending(&self) -> usize {
        self.faults.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn take(&self) -> Vec<Fault> {
        std::mem::take(&mut *self.faults.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Joins whichever of the `controllers` leads (a leader and standbys, docs/CONTROLLER-HA.md)
/// as aggregator `name`, binds, waits for the cluster and runs the aggregator until `stop` is
/// set. `on_ready` is called with the bound address once the cluster is ready. When the control
/// connection is lost, a thread of its own re-registers with whichever controller leads then
/// (same name, same address) while the data path runs on, and the §5.2 reports sent so far go
/// again (a new leader may not have logged them; it ignores a report it knows). Every
/// [`TELEMETRY_INTERVAL`] the loop publishes its counters and input barriers into `telemetry`
/// (for a metrics endpoint), whose address goes to the controller with the health reports.
///
/// # Errors
/// Joining failed, the socket could not be bound, or the poller failed.
#[allow(clippy::too_many_arguments)]
pub fn run_aggregator(
    controllers: &[SocketAddr],
    name: &str,
    cfg: &DriverConfig,
    tls: Option<&Credentials>,
    stop: &AtomicBool,
    faults: &AggregatorFaults,
    on_ready: &mut dyn FnMut(SocketAddr),
    telemetry: &Telemetry,
) -> Result<AggregatorReport, JoinError> {
    let mut daemon = Daemon::join(controllers, name, cfg, tls, stop)?;
    let addr = daemon.addr;
    debug!(aggregator = name, %addr, "ready");
    on_ready(addr);
    while !stop.load(Ordering::SeqCst) {
        daemon
            .driver
            .run_once(Duration::from_millis(20), &mut |e: Infallible| match e {})?;
        daemon.apply_faults(faults);
        daemon.take_control();
        daemon.send_reports();
        daemon.send_health(telemetry);
        daemon.rejoin()?;
    }
    Ok(daemon.finish())
}

/// The daemon's loop: the driven aggregator, its control connection, and what re-registering
/// after a controller failover needs.
struct Daemon<'a> {
    name: &'a str,
    controllers: &'a [SocketAddr],
    tls: Option<&'a Credentials>,
    /// The UDP address it bound.
    addr: SocketAddr,
    /// Who is at each of its ports.
    place: Placement,
    /// The role, behind the test faults' filter.
    driver: Driver<Filtered<Aggregator>>,
    control: ControlSender,
    inbox: Receiver<FromController>,
    /// The control readers started so far (one per connection).
    readers: Vec<JoinHandle<()>>,
    reader_stop: StopOnDrop,
    thread_name: String,
    /// Every report sent, to send again after a failover (a handful per failure).
    reports: Vec<ToController>,
    connected: bool,
    rejoining: Option<JoinHandle<Option<ControlClient>>>,
    last_health: std::time::Instant,
    /// When the loop last published to its [`Telemetry`].
    last_published: std::time::Instant,
}

impl<'a> Daemon<'a> {
    /// Joins as aggregator `name`, binds, waits for the cluster and builds the driver (with the
    /// link keys, when datagrams are sealed); the control connection is split, its reader on
    /// a thread of its own.
    fn join(
        controllers: &'a [SocketAddr],
        name: &'a str,
        cfg: &DriverConfig,
        tls: Option<&'a Credentials>,
        stop: &AtomicBool,
    ) -> Result<Daemon<'a>, JoinError> {
        let join_timeout = Duration::from_secs(60);
        let (mut control, _, bind) = ControlClient::join_leader(
            controllers,
            JoinAs::Aggregator(name.to_string()),
            join_timeout,
            tls,
        )?;
        let socket = bind_udp(bind, cfg)?;
        let addr = socket.local_addr()?;
        let cluster = control.bound_and_wait(addr, Duration::from_secs(3600), stop)?;
        let clock = Clock::of(cluster.clock);
        let place = Placement::of(&cluster, name).map_err(JoinError::Protocol)?;
        let node = Filtered {
            filter: place.fault_filter(),
            role: place.role(&cluster, clock.now()),
        };
        let ports = place.port_table(&cluster).map_err(JoinError::Protocol)?;
        let peers: Vec<SocketAddr> = (0..ports.outputs_len())
            .filter_map(|i| ports.output(PortId(i as u32)))
            .collect();
        let cfg = cluster
            .driver_config(cfg, &peers)
            .map_err(JoinError::Transport)?;
        let links = aggregator_links(&cluster, place.peers());
        let mut driver = Driver::new(node, socket, ports, clock, cfg)?;
        // Datagrams sealed with the keys of this aggregator's links (docs/SECURITY.md): updates
        // come on the control channel, read on this thread, and apply at once.
        let mode = cluster.auth_mode();
        if mode.seals() {
            let me = member_ix(&cluster, &Member::Aggregator(name.to_string()))
                .ok_or_else(|| JoinError::Protocol(format!("{name} has no member number")))?;
            driver.set_auth(LinkAuth::new(mode, me, &links, KeyInbox::new()))?;
            for update in control.take_keys() {
                driver.apply_key_update(update);
            }
        }
        let reader_stop = StopOnDrop(Arc::new(AtomicBool::new(false)));
        let thread_name = format!("onepipe-agg-{name}");
        let (control, inbox, reader) = control.split(&thread_name, reader_stop.0.clone())?;
        Ok(Daemon {
            name,
            controllers,
            tls,
            addr,
            place,
            driver,
            control,
            inbox,
            readers: vec![reader],
            reader_stop,
            thread_name,
            reports: Vec::new(),
            connected: true,
            rejoining: None,
            last_health: std::time::Instant::now(),
            last_published: std::time::Instant::now(),
        })
    }

    /// Applies the test faults added since the last turn.
    fn apply_faults(&mut self, faults: &AggregatorFaults) {
        let name = self.name;
        for fault in faults.take() {
            let applied = self.driver.with_node(
                |n, _| match fault {
                    Fault::Blackhole { from, to } => n.filter.blackhole(from, to),
                    Fault::Cut { from } => n.filter.cut(from),
                },
                &mut |e: Infallible| match e {},
            );
            match applied {
                Ok(()) => warn!(aggregator = name, "test fault: {fault:?}"),
                Err(e) => warn!(aggregator = name, "test fault refused: {e}"),
            }
        }
    }

    /// Handles what the controller sent since the last turn; a reader that ended means the
    /// connection closed.
    fn take_control(&mut self) {
        loop {
            match self.inbox.try_recv() {
                Ok(msg) => self.on_control(msg),
                Err(TryRecvError::Empty) => break,
                // The reader ended: the connection closed.
                Err(TryRecvError::Disconnected) => {
                    self.connected = false;
                    break;
                }
            }
        }
    }

    /// One message from the controller.
    fn on_control(&mut self, msg: FromController) {
        let (name, driver) = (self.name, &mut self.driver);
        match msg {
            FromController::Ctrl { msg } => {
                let msg: CtrlMsg = msg.into();
                driver.with_node(
                    |n, now| n.handle(now, Input::Mgmt(Mgmt::Ctrl(msg))),
                    &mut |e: Infallible| match e {},
                );
            }
            // §5.2 rejoin: `Admit` for an input of one of the halves.
            FromController::Relay { msg } => match msg.into_relay() {
                Ok(r) => driver.with_node(
                    |n, now| n.handle(now, Input::Mgmt(Mgmt::Relay(r))),
                    &mut |e: Infallible| match e {},
                ),
                Err(e) => warn!(aggregator = name, "skipped a bad relay: {e}"),
            },
            k @ (FromController::Keys { .. } | FromController::KeysActivate { .. }) => {
                if let Some(update) = k.key_update() {
                    driver.apply_key_update(update);
                }
                if let FromController::Keys {
                    epoch,
                    activate: false,
                    ..
                } = k
                {
                    let installed = ToController::KeysInstalled { epoch };
                    self.connected &= self.control.send(&installed).is_ok();
                }
            }
            // A process joined the running cluster: its datagrams come from `addr`.
            FromController::Address {
                member: Member::Process(p),
                addr,
            } => {
                if let Some(port) = self.place.process_port(p) {
                    debug!(aggregator = name, "p{p} is at {addr}");
                    driver.relink(port, addr);
                }
            }
            FromController::Joined { host, procs } => {
                let procs: Vec<ProcId> = procs.into_iter().map(ProcId).collect();
                if !driver.node().role.rejoined(ProcId(host), &procs) {
                    warn!(
                        aggregator = name,
                        "p{host} rejoined under ids beyond the cluster's room"
                    );
                }
            }
            _ => {}
        }
    }

    /// §5.2 Detect: the halves' reports go to the controller. Control messages are best
    /// effort here: a controller that went away does not stop the data path. Relays (rejoin's
    /// `Admitted`) go the same way.
    fn send_reports(&mut self) {
        while let Some((to, msg)) = self.driver.poll_mgmt() {
            if let (MgmtDest::Controller, Mgmt::Relay(r)) = (&to, &msg) {
                let msg = ToController::Relay {
                    msg: WireRelay::of(r),
                };
                self.connected &= self.control.send(&msg).is_ok();
                continue;
            }
            if let (MgmtDest::Controller, Mgmt::Ctrl(msg)) = (to, msg) {
                if let CtrlMsg::LinkDown { link, .. } = &msg {
                    warn!(
                        aggregator = self.name,
                        link = link.0,
                        "input link down: reported to the controller (§5.2 Detect)"
                    );
                }
                let msg = ToController::Ctrl {
                    to: None,
                    msg: WireCtrl::from(&msg),
                };
                self.connected &= self.control.send(&msg).is_ok();
                if self.reports.len() < REPORTS_MAX {
                    self.reports.push(msg);
                }
            }
        }
    }

    /// The counters and input barriers to `telemetry` every [`TELEMETRY_INTERVAL`], and the
    /// counters to the controller once a second.
    fn send_health(&mut self, telemetry: &Telemetry) {
        let health = self.last_health.elapsed() >= Duration::from_secs(1);
        if !health && self.last_published.elapsed() < TELEMETRY_INTERVAL {
            return;
        }
        self.last_published = std::time::Instant::now();
        let Filtered { filter, role } = self.driver.node();
        let mut counters = counters(
            &self.driver.stats(),
            &role.stats(),
            role.commit_inputs_removed(),
        );
        counters.insert("blackholed".into(), filter.blackholed());
        counters.insert("cut_dropped".into(), filter.cut_dropped());
        counters.insert("spoofed_src".into(), role.spoofed_dropped());
        let clock = self.driver.now();
        let now = clock.timestamp();
        let links = (0..role.inputs_len() as u32)
            .filter_map(|port| {
                let (be, commit) = role.input_registers(PortId(port))?;
                Some(
                    LinkBarriers {
                        link: port,
                        barrier: be.map(|t| t.raw()),
                        commit_barrier: commit.map(|t| t.raw()),
                        barrier_lag_ns: be.map(|t| now.signed_distance(t)),
                        ..LinkBarriers::default()
                    }
                    .with_gaps(role.input_gaps(PortId(port)), clock),
                )
            })
            .collect();
        if health {
            self.last_health = self.last_published;
            let msg = ToController::Health {
                counters: counters.clone(),
                metrics: telemetry.metrics_addr,
            };
            self.connected &= self.control.send(&msg).is_ok();
        }
        telemetry.publish(TelemetrySnapshot {
            counters,
            links,
            ..TelemetrySnapshot::default()
        });
    }

    /// The controller is gone: re-register with whoever leads, off the data path's thread;
    /// once that has succeeded, the reports go again.
    fn rejoin(&mut self) -> io::Result<()> {
        if !self.connected && self.rejoining.is_none() {
            warn!(
                aggregator = self.name,
                "lost the controller; re-registering with whichever leads"
            );
            let (controllers, member) = (
                self.controllers.to_vec(),
                Member::Aggregator(self.name.into()),
            );
            let flag = self.reader_stop.0.clone();
            let (tls, addr) = (self.tls.cloned(), self.addr);
            self.rejoining = Some(
                std::thread::Builder::new()
                    .name(format!("{}-rejoin", self.thread_name))
                    .spawn(move || loop {
                        let timeout = Duration::from_secs(2);
                        let c = ControlClient::rejoin_leader(
                            &controllers,
                            member.clone(),
                            addr,
                            timeout,
                            &flag,
                            tls.as_ref(),
                        );
                        match c {
                            Ok(c) => return Some(c),
                            Err(_) if flag.load(Ordering::SeqCst) => return None,
                            Err(_) => std::thread::sleep(Duration::from_millis(50)),
                        }
                    })?,
            );
        }
        if self.rejoining.as_ref().is_some_and(|h| h.is_finished()) {
            let c = self.rejoining.take().and_then(|h| h.join().ok().flatten());
            if let Some(c) = c {
                let (sender, rx, reader) =
                    c.split(&self.thread_name, self.reader_stop.0.clone())?;
                (self.control, self.inbox, self.connected) = (sender, rx, true);
                info!(
                    aggregator = self.name,
                    "re-registered with the leading controller"
                );
                self.readers.push(reader);
                for msg in &self.reports {
                    self.connected &= self.control.send(msg).is_ok();
                }
            }
        }
        Ok(())
    }

    /// Stops: the last counters to the controller, `Leave`, and every thread joined.
    fn finish(self) -> AggregatorReport {
        let Daemon {
            name,
            addr,
            mut driver,
            mut control,
            inbox,
            readers,
            reader_stop,
            rejoining,
            ..
        } = self;
        let _ = driver.flush();
        let Filtered { filter, role } = driver.node();
        let report = AggregatorReport {
            name: name.to_string(),
            addr,
            driver: driver.stats(),
            switch: role.stats(),
            commit_inputs_removed: role.commit_inputs_removed(),
            blackholed: filter.blackholed(),
            cut_dropped: filter.cut_dropped(),
            spoofed_src: role.spoofed_dropped(),
        };
        let _ = control.send(&ToController::Health {
            counters: report.counters(),
            metrics: None,
        });
        control.leave();
        // The reader reads on until the controller closes (or briefly, if it does not): a socket
        // closed with unread input is reset, and the reset could overtake the `Leave`.
        let linger = std::time::Instant::now() + Duration::from_millis(500);
        while readers.iter().any(|r| !r.is_finished()) && std::time::Instant::now() < linger {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(reader_stop);
        drop(inbox);
        for r in readers {
            let _ = r.join();
        }
        if let Some(h) = rejoining {
            let _ = h.join();
        }
        report
    }
}

/// How often the loop publishes its counters and barriers for a metrics endpoint.
pub const TELEMETRY_INTERVAL: Duration = Duration::from_millis(200);

/// Most §5.2 reports an aggregator keeps to send again after a controller failover (one per
/// input link at most, as a link is reported once).
const REPORTS_MAX: usize = 4096;

/// Sets a flag when dropped: the control reader stops however the daemon's loop ends.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An aggregator running on a thread of this process (what [`crate::LocalCluster`] and tests
/// use; the `onepipe agg` daemon runs [`run_aggregator`] on its main thread).
pub struct AggregatorDaemon {
    stop: Arc<AtomicBool>,
    faults: Arc<AggregatorFaults>,
    thread: Option<JoinHandle<Result<AggregatorReport, JoinError>>>,
}

impl AggregatorDaemon {
    /// Applies test fault `fault` ([`FaultFilter::blackhole`], [`FaultFilter::cut`]) and waits
    /// (at most `timeout`) until the aggregator's loop has taken it: what arrives there from
    /// then on meets it. Returns whether it was taken in time. Refused faults (a process not
    /// attached here) are logged by the aggregator.
    pub fn inject(&self, fault: Fault, timeout: Duration) -> bool {
        self.faults.add(fault);
        let until = std::time::Instant::now() + timeout;
        while self.faults.pending() > 0 {
            if std::time::Instant::now() >= until
                || self.thread.as_ref().is_none_or(|t| t.is_finished())
            {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Starts aggregator `name` of the cluster whose controller is at `controller`.
    ///
    /// # Errors
    /// The thread could not be spawned (joining happens on the thread: see
    /// [`AggregatorDaemon::stop`]).
    pub fn start(
        controller: SocketAddr,
        name: &str,
        cfg: DriverConfig,
        tls: Option<Credentials>,
    ) -> io::Result<AggregatorDaemon> {
        AggregatorDaemon::start_any(&[controller], name, cfg, tls)
    }

    /// Starts aggregator `name` with a leader and standby controllers at `controllers` (see
    /// [`run_aggregator`]).
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start_any(
        controllers: &[SocketAddr],
        name: &str,
        cfg: DriverConfig,
        tls: Option<Credentials>,
    ) -> io::Result<AggregatorDaemon> {
        let stop = Arc::new(AtomicBool::new(false));
        let faults = Arc::new(AggregatorFaults::default());
        let (stop2, name, controllers) = (stop.clone(), name.to_string(), controllers.to_vec());
        let faults2 = faults.clone();
        let thread = std::thread::Builder::new()
            .name(format!("onepipe-agg-{name}"))
            .spawn(move || {
                let faults = faults2;
                run_aggregator(
                    &controllers,
                    &name,
                    &cfg,
                    tls.as_ref(),
                    &stop2,
                    &faults,
                    &mut |_| {},
                    &Telemetry::default(),
                )
            })?;
        Ok(AggregatorDaemon {
            stop,
            faults,
            thread: Some(thread),
        })
    }

    /// Stops it and returns its report.
    ///
    /// # Errors
    /// What made it fail, if it did.
    pub fn stop(mut self) -> Result<AggregatorReport, JoinError> {
        self.stop.store(true, Ordering::SeqCst);
        let t = self.thread.take().expect("joined once");
        t.join()
            .unwrap_or_else(|_| Err(JoinError::Protocol("the aggregator thread panicked".into())))
    }
}

impl Drop for AggregatorDaemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
