//! The endpoint's control thread: the TCP connection to the controller — §5.2 messages both
//! ways, failure notifications, health reports — and re-registering with whichever controller
//! leads after a failover.

use super::*;

/// What the control thread needs to re-register after a failover.
pub(super) struct ControlLink {
    pub(super) controllers: Vec<SocketAddr>,
    /// The UDP address this endpoint is bound to.
    pub(super) addr: SocketAddr,
    /// The §5.2 messages sent so far (bounded by [`CONTROL_HISTORY_LEN_MAX`], oldest first
    /// out): a new leader may not have logged them, so they go again on re-registering. Every
    /// one is idempotent there: a `LinkDown` for a known link and a `Completed` for a resumed
    /// round are ignored, a `Recall` is answered again.
    pub(super) history: VecDeque<ToController>,
    /// The control channel's TLS identity, to re-register with.
    pub(super) tls: Option<Credentials>,
    /// Where key updates go for the I/O thread, when datagrams are sealed.
    pub(super) keys: Option<Arc<KeyInbox>>,
    /// Where to publish for the application's metrics endpoint ([`JoinOptions::telemetry`]).
    pub(super) telemetry: Option<Arc<Telemetry>>,
}

/// Most §5.2 messages an endpoint keeps to re-send after a controller failover.
pub const CONTROL_HISTORY_LEN_MAX: usize = 4096;

impl ControlLink {
    fn sent(&mut self, msg: &ToController) {
        if self.history.len() >= CONTROL_HISTORY_LEN_MAX {
            self.history.pop_front();
        }
        self.history.push_back(msg.clone());
    }

    /// Registers again with whichever controller leads (one pass of at most a few seconds,
    /// so a stop is noticed), and re-sends the history.
    fn reconnect(&self, member: Member, stop: &AtomicBool) -> Option<ControlClient> {
        let timeout = Duration::from_secs(2);
        let mut c = ControlClient::rejoin_leader(
            &self.controllers,
            member,
            self.addr,
            timeout,
            stop,
            self.tls.as_ref(),
        )
        .ok()?;
        for msg in &self.history {
            c.send(msg).ok()?;
        }
        Some(c)
    }
}

/// The control thread: health to the controller, failure notices and the §5.2 procedure's
/// messages both ways; re-registration when the controller is lost.
pub(super) fn control_loop(mut control: ControlClient, mut link: ControlLink, shared: Arc<Shared>) {
    let mut last_health: Option<std::time::Instant> = None;
    let mut last_published: Option<std::time::Instant> = None;
    let mut connected = true;
    // Logged once per loss, not once per attempt.
    let mut searching = false;
    while !shared.stop.load(Ordering::SeqCst) {
        shared.complete_untaken();
        if !connected {
            // The controller is gone: the data path goes on; find whoever leads now.
            if let Some(c) = find_leader(&link, &shared, &mut searching) {
                control = c;
                connected = true;
            }
            continue;
        }
        if last_health.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            last_health = Some(std::time::Instant::now());
            let metrics = link.telemetry.as_ref().and_then(|t| t.metrics_addr);
            connected = send_health(&mut control, &shared, metrics);
        }
        if let Some(t) = &link.telemetry {
            if last_published.is_none_or(|p| p.elapsed() >= crate::aggregator::TELEMETRY_INTERVAL) {
                last_published = Some(std::time::Instant::now());
                publish(&shared, t);
            }
        }
        let out: Vec<ToController> =
            std::mem::take(&mut *shared.control_out.lock().unwrap_or_else(|e| e.into_inner()))
                .into();
        for msg in out {
            link.sent(&msg);
            connected &= control.send(&msg).is_ok();
        }
        match control.recv(Duration::from_millis(10)) {
            Ok(Some(msg)) => connected &= on_line(msg, &mut control, &link, &shared),
            Ok(None) => {}
            // A line that is not a message: skipped (the connection is still good).
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                debug!(proc = shared.proc.0, "skipped a control line: {e}");
            }
            // The controller is gone: the data path goes on without it.
            Err(_) => connected = false,
        }
    }
    if connected && !shared.vanish.load(Ordering::SeqCst) {
        let last = *shared.leave_last.lock().unwrap_or_else(|e| e.into_inner());
        control.leave_at(last, Duration::from_millis(500));
    }
}

/// One attempt to re-register with whichever controller leads (`searching`: the loss was
/// logged already); a pause before the next when it failed.
fn find_leader(link: &ControlLink, shared: &Shared, searching: &mut bool) -> Option<ControlClient> {
    if !*searching {
        *searching = true;
        warn!(
            proc = shared.proc.0,
            "lost the controller; re-registering with whichever leads"
        );
    }
    match link.reconnect(Member::Process(shared.proc.0), &shared.stop) {
        Some(c) => {
            *searching = false;
            info!(
                proc = shared.proc.0,
                "re-registered with the leading controller"
            );
            shared.push_event(Event::ControllerChanged);
            Some(c)
        }
        None => {
            std::thread::sleep(Duration::from_millis(50));
            None
        }
    }
}

/// Sends this endpoint's counters (and where its metrics are served, if anywhere) to the
/// controller: whether the connection took them.
fn send_health(control: &mut ControlClient, shared: &Shared, metrics: Option<SocketAddr>) -> bool {
    let counters = shared.stats().counters();
    control
        .send(&ToController::Health { counters, metrics })
        .is_ok()
}

/// This endpoint's counters and its uplink's barriers, to `telemetry`.
fn publish(shared: &Shared, telemetry: &Telemetry) {
    let stats = shared.stats();
    let clock = shared.clock.now();
    let now = clock.timestamp();
    let barrier = shared.published(0);
    let link = LinkBarriers {
        link: 0,
        barrier: barrier.map(|b| b.raw()),
        commit_barrier: shared.published(1).map(|b| b.raw()),
        barrier_lag_ns: barrier.map(|b| now.signed_distance(b)),
        ..LinkBarriers::default()
    }
    .with_gaps(Some(stats.uplink_gaps), clock);
    let late = &stats.host.dropped_late_by_sender;
    telemetry.publish(TelemetrySnapshot {
        counters: stats.counters(),
        links: vec![link],
        late_dropped_by_sender: late.iter().map(|(p, &n)| (p.0, n)).collect(),
    });
}

/// One message from the controller; returns whether the connection is still good (an answer
/// it needed went out).
fn on_line(
    msg: FromController,
    control: &mut ControlClient,
    link: &ControlLink,
    shared: &Shared,
) -> bool {
    match msg {
        FromController::Down { member, reason } => on_down(member, reason, shared),
        FromController::Ctrl { msg } => shared.on_control(msg.into()),
        // Datagram keys: to the I/O thread (which takes them at its next turn, woken now);
        // an installed epoch is acknowledged so the controller can activate it.
        k @ (FromController::Keys { .. } | FromController::KeysActivate { .. }) => {
            if let (Some(inbox), Some(update)) = (&link.keys, k.key_update()) {
                inbox.push(update);
                shared.wake();
            }
            if let FromController::Keys {
                epoch,
                activate: false,
                ..
            } = k
            {
                return control.send(&ToController::KeysInstalled { epoch }).is_ok();
            }
        }
        // §5.2: a process (perhaps this one) rejoined under new ids.
        FromController::View {
            epoch,
            members,
            joined,
            left,
            failed,
        } => {
            let ids = |v: Vec<u32>| v.into_iter().map(ProcId).collect::<Vec<_>>();
            shared.on_view(View {
                epoch,
                members: ids(members),
                joined: ids(joined),
                left: ids(left),
                failed: ids(failed),
            });
        }
        FromController::Joined { host, procs } => {
            shared.slot_rejoined(host, &procs);
            shared.push_event(Event::Rejoined {
                old: ProcId(host),
                procs: procs.into_iter().map(ProcId).collect(),
            });
        }
        // §5.2 controller forwarding: data for this process, or ACKs for data it forwarded.
        FromController::Relay { msg } => match msg.into_relay() {
            Ok(r) => shared.on_mgmt(Mgmt::Relay(r)),
            Err(e) => debug!(proc = shared.proc.0, "skipped a bad relay: {e}"),
        },
        FromController::Declared { failed, .. } => on_declared(&failed, shared),
        _ => {}
    }
    true
}

/// The controller reports a member down: a process that left or was lost (its slot
/// `member`), or an aggregator.
fn on_down(member: Member, reason: String, shared: &Shared) {
    match member {
        Member::Process(slot) => {
            debug!(
                proc = shared.proc.0,
                "the controller reports p{slot} {reason}"
            );
            // A process that left is taken out by a §5.2 round at once: its one event
            // comes from there (`Left`). A lost connection is only a hint.
            let left = reason == "left";
            let proc = shared.slot_down(slot, left);
            if !left {
                shared.push_event(Event::ProcessFailed {
                    proc,
                    ts: shared.clock.now().timestamp(),
                    reason: FailReason::Lost,
                    callback: Callback::default(),
                });
            }
        }
        Member::Aggregator(name) => {
            debug!(
                proc = shared.proc.0,
                "the controller reports {name} {reason}"
            );
            shared.push_event(Event::AggregatorFailed { name });
        }
    }
}

/// The controller declared processes failed (`failed`: process, failure timestamp). The others
/// hear of it through `Failure`; this is for a process cut off from them, which learns of its
/// own failure (§5.2).
pub(super) fn on_declared(failed: &[(u32, u64)], shared: &Shared) {
    for &(p, ts) in failed {
        if p == shared.proc.0 {
            warn!(proc = p, ts, "declared failed by the controller (§5.2)");
            // §5.2 Receiver Recovery: "the controller notifies process of its own
            // failure" — the live wire's form of `RelayMsg::Failed`: the role
            // freezes (no more sends, its in-flight messages recalled, reliable
            // delivery stopped).
            let ts = Timestamp::new(ts);
            shared.on_mgmt(Mgmt::Relay(RelayMsg::Failed { ts }));
            shared.push_event(Event::ProcessFailed {
                proc: shared.proc,
                ts,
                reason: FailReason::Declared,
                callback: Callback::default(),
            });
        }
    }
}
