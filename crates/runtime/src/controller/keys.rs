//! The data path's key schedule as the controller runs it (docs/SECURITY.md): starting it on
//! taking the lead, rotations, handing keys to members and activating epochs they installed.

use super::*;

impl State {
    /// Nanoseconds since this controller started: the key schedule's clock.
    pub(super) fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    /// Starts the key schedule on taking the lead: the first epoch is above every epoch this
    /// cluster's controllers recorded in the store, and above the Unix time in seconds (a
    /// controller without a shared store starts above whatever one before it handed out).
    pub(super) fn start_keys(
        &mut self,
        store: &Arc<dyn ControllerStore>,
        leadership: &Leadership,
    ) -> Result<(), String> {
        let Some(secret) = self.secret.clone() else {
            return Ok(());
        };
        let stored = store
            .get_meta(KEY_EPOCH_KEY)
            .map_err(|e| format!("reading the key epoch: {e}"))?
            .and_then(|v| <[u8; 4]>::try_from(v.as_slice()).ok())
            .map_or(0, u32::from_be_bytes);
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX - 1));
        let first = Epoch(stored.saturating_add(1).max(unix));
        store
            .put_meta(leadership, KEY_EPOCH_KEY, &first.0.to_be_bytes())
            .map_err(|e| format!("recording the key epoch: {e}"))?;
        let auth = self
            .cluster
            .auth
            .clone()
            .unwrap_or_else(crate::cluster::AuthConfig::off);
        let now = self.now_ns();
        let mut km = KeyMaster::new(secret, first, auth.rotate_every_ns, auth.grace_ns, now);
        if stored > 0 {
            // A takeover: members keep the old leader's keys until the first rotation.
            km.rotate_by(now + crate::keys::INSTALL_TIMEOUT_NS);
        }
        self.keys = Some(km);
        self.store = Some((store.clone(), leadership.clone()));
        Ok(())
    }

    /// Begins a key rotation (on the timer, a removal, or `restarted` registering again): the
    /// new epoch is recorded in the store before any of its keys goes out.
    pub(super) fn rotate_keys(&mut self, restarted: Option<&Member>) {
        let Some(km) = self.keys.as_ref() else {
            return;
        };
        let epoch = km.next_epoch();
        if let Some((store, leadership)) = &self.store {
            if let Err(e) = store.put_meta(leadership, KEY_EPOCH_KEY, &epoch.0.to_be_bytes()) {
                return self.depose(format!("the store refused a key epoch: {e}"));
            }
        }
        let live: BTreeSet<Member> = self
            .slots
            .iter()
            .filter(|(_, s)| s.conn.is_some() && s.state == SlotState::Bound)
            .map(|(m, _)| m.clone())
            .collect();
        let now = self.now_ns();
        let km = self.keys.as_mut().expect("checked above");
        let sends = km.rotate(&self.cluster, epoch, &live, restarted, now);
        debug!(epoch = epoch.0, members = sends.len(), "key rotation begun");
        self.send_keys(sends);
    }

    /// Sends each member its key messages.
    pub(super) fn send_keys(&mut self, sends: Vec<KeySend>) {
        for (member, msg) in sends {
            self.send_to(&member, &msg);
        }
    }

    /// Connection `id`'s member installed key epoch `epoch`: activations that waited for it go out.
    pub(super) fn on_keys_installed(&mut self, id: u64, epoch: Epoch) {
        let Some(member) = self.conns.get(&id).and_then(|c| c.member.clone()) else {
            return;
        };
        let now = self.now_ns();
        if let Some(km) = self.keys.as_mut() {
            let sends = km.installed(&member, epoch, now);
            if !sends.is_empty() {
                debug!(epoch = epoch.0, "key epoch activated");
            }
            self.send_keys(sends);
        }
    }

    /// A member's keys before it is told the cluster is ready: a member that held keys before
    /// (a restart) gets a new epoch only, anyone else the current one.
    pub(super) fn keys_for_new_member(&mut self, member: &Member) {
        let Some(km) = self.keys.as_mut() else {
            return;
        };
        if km.holds(member) {
            return self.rotate_keys(Some(member));
        }
        let msgs = km.admit(&self.cluster, member);
        for m in msgs {
            self.send_to(member, &m);
        }
    }
}
