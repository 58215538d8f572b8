//! Leadership (docs/CONTROLLER-HA.md): campaigning, turning members away while standby,
//! keeping the lease, taking over and being deposed.

use super::conn::open_channel;
use super::*;

/// Runs for leader every [`CAMPAIGN_INTERVAL`] until it wins (`None`: stopped first). Meanwhile
/// every connection is told `Standby` and closed.
pub(super) fn campaign(
    listener: &TcpListener,
    stop: &AtomicBool,
    ha: &HaOptions,
    tls: &Option<Arc<rustls::ServerConfig>>,
) -> Option<Leadership> {
    let mut said = String::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        let holder = match ha.store.campaign(&ha.name, ha.lease_ttl, Duration::ZERO) {
            Ok(l) => return Some(l),
            Err(StoreError::CampaignTimedOut { holder, .. }) => holder,
            Err(e) => {
                let why = e.to_string();
                if why != said {
                    warn!(controller = %ha.name, "campaign: {why}");
                    said = why;
                }
                None
            }
        };
        if let (Some(h), false) = (&holder, said == format!("standby {holder:?}")) {
            said = format!("standby {holder:?}");
            info!(controller = %ha.name, "standby: {h} leads");
        }
        let until = Instant::now() + CAMPAIGN_INTERVAL;
        while Instant::now() < until {
            turn_away(listener, &holder, tls);
            std::thread::sleep(POLL_INTERVAL / 5);
        }
    }
}

/// A standby's answer to every connection: one `Standby` line (over TLS when the cluster has
/// it, on a short-lived thread of its own), then the connection closes.
fn turn_away(
    listener: &TcpListener,
    leader: &Option<String>,
    tls: &Option<Arc<rustls::ServerConfig>>,
) {
    while let Ok((stream, _)) = listener.accept() {
        let msg = FromController::Standby {
            leader: leader.clone(),
        };
        let tls = tls.clone();
        let _ = std::thread::Builder::new()
            .name("onepipe-controller-standby".into())
            .spawn(move || {
                let _ = stream.set_nonblocking(false);
                let Ok(channel) = open_channel(stream, tls) else {
                    return;
                };
                if let Ok(mut w) = channel.writer() {
                    let _ = w.set_write_timeout(Some(POLL_INTERVAL));
                    let _ = write_line(&mut w, &msg);
                    let _ = w.shutdown(Shutdown::Write);
                }
            });
    }
}

/// Renews the lease every third of its time to live; deposes the controller when the store
/// says it no longer leads, or has not answered for a whole lease. Resigns when the controller
/// stops, so a standby need not wait for the lease to end.
pub(super) fn lease_loop(
    store: Arc<dyn ControllerStore>,
    leadership: Leadership,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
) {
    let ttl = leadership.lease_ttl;
    let mut last_ok = Instant::now();
    let mut next = last_ok + ttl / 3;
    while !stop.load(Ordering::SeqCst) {
        if state.lock().expect("controller state").deposed.is_some() {
            return;
        }
        if Instant::now() < next {
            std::thread::sleep(POLL_INTERVAL / 5);
            continue;
        }
        match store.keep_alive(&leadership) {
            Ok(()) => {
                last_ok = Instant::now();
                next = last_ok + ttl / 3;
            }
            Err(e) if e.is_not_leader() || last_ok.elapsed() >= ttl => {
                let mut st = state.lock().expect("controller state");
                return st.depose(format!("lease: {e}"));
            }
            // Unavailable: try again soon, until the lease would have ended.
            Err(_) => next = Instant::now() + POLL_INTERVAL,
        }
    }
    if state.lock().expect("controller state").resign_on_stop {
        let _ = store.resign(leadership);
    }
}

impl State {
    /// Starts leading with `leadership`: recovers the procedure's log (re-queuing what may be
    /// outstanding), and marks the processes it declared failed as lost (they do not rejoin).
    pub(super) fn lead(
        &mut self,
        store: Arc<dyn ControllerStore>,
        leadership: Leadership,
    ) -> Result<(), onepipe_ctrlstore::HaError> {
        let (keys_store, keys_leadership) = (store.clone(), leadership.clone());
        if let Ok(f) = self.failure.as_mut() {
            let topo = f.live.topology().clone();
            // §5.2's relay channel is always on live: forwarding (when `forward_after` asks
            // for it) and receiver recovery, rejoining processes taking ids up to twice the
            // cluster's.
            let relay = Some(self.cluster.proc_ids_max());
            let ha =
                Procedure::recover_with(store, leadership, f.cfg.clone(), topo, f.now(), relay)?;
            let failed: Vec<NodeId> = ha.controller().failed_hosts().collect();
            // Above every epoch the predecessor announced (it counted one per declaration of a
            // member and one per rejoin; the log holds every declaration and rejoin).
            self.view_epoch = failed.len() as u64 + 2 * ha.controller().rejoined();
            let stats = ha.stats();
            f.procedure = Some(ha);
            for h in failed {
                if let Some(s) = self.slots.get_mut(&Member::Process(h.0)) {
                    s.state = SlotState::Lost;
                }
            }
            if stats.replayed > 0 {
                info!(
                    controller = %self.name,
                    "took over: replayed {} log entries, re-sending {}",
                    stats.replayed,
                    stats.resent
                );
            }
        }
        if let Err(why) = self.start_keys(&keys_store, &keys_leadership) {
            self.depose(why);
            return Ok(());
        }
        self.leading = true;
        info!("{} leads", self.name);
        self.drain_failure();
        Ok(())
    }

    /// Stops leading at once: nothing more is sent, every connection closes.
    pub(super) fn depose(&mut self, why: String) {
        if self.deposed.is_some() {
            return;
        }
        warn!(controller = %self.name, "deposed: {why}");
        self.leading = false;
        self.deposed = Some(why);
        if let Ok(f) = self.failure.as_mut() {
            f.procedure = None;
        }
        for c in self.conns.values() {
            let _ = c.writer.shutdown(Shutdown::Both);
        }
    }
}
