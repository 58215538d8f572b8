//! [`HaController`]: the §5.2 controller made highly available by event sourcing.
//!
//! [`Controller`] is a deterministic state machine over its inputs (a [`Node`]: control messages
//! and timeouts),
//! so its state *is* its input log. `HaController` wraps one with a [`ControllerStore`]: every
//! input is appended to the store's log (fenced by the leadership) *before* it is applied, and a
//! new leader rebuilds the state by replaying the log into a fresh `Controller`
//! ([`HaController::recover`]). What the replay shows was sent but may not have arrived —
//! the `Failure` broadcasts of rounds not resumed yet, and the last round's `Resume` — is queued
//! again, so a standby that takes over mid-procedure finishes the round.
//!
//! `HaController` is a [`Node`], driven as every role is: [`Node::handle`] a control message, a
//! relay or a timeout, drain [`Node::poll_output`] until `None`, then read
//! [`Node::poll_timeout`]. Being deposed is an output: when the store refuses an input
//! ([`StoreError::NotLeader`]: another controller leads; or the store failed), the input is not
//! applied, [`HaEvent::Deposed`] is the last output, and from then on the controller takes no
//! input (the caller stops acting as controller, and may campaign again with a new one).
//!
//! Time: inputs are logged in *log time*. A new leader whose clock is behind the last logged
//! input is shifted forward so log time never goes backwards; with a cluster-wide time base
//! (synchronized wall clock) the shift is zero and pending deadlines keep their meaning.

use crate::codec::{DecodeError, EncodeError, Entry};
use crate::store::{ControllerStore, Leadership, StoreError};
use onepipe_proto::failure::{
    Controller, ControllerConfig, CtrlEvent, CtrlMsg, CtrlOutput, Mgmt, MgmtDest, RelayMsg,
};
use onepipe_proto::topology::Topology;
use onepipe_proto::{drive, Input, Instant, Node, NodeId, Notice, Output};
use std::collections::{BTreeSet, VecDeque};
use std::convert::Infallible;
use std::fmt;
use std::sync::Arc;

/// The metadata key holding the fingerprint of the routing graph and controller configuration
/// the log was written against.
pub const FINGERPRINT_KEY: &str = "fingerprint";

/// A §5.2 controller whose inputs live in a store, so a standby can take over.
pub struct HaController<S: ControllerStore> {
    store: S,
    leadership: Leadership,
    ctrl: Controller,
    /// The log time of the last logged input: log time never goes backwards.
    log_now: Instant,
    /// Added to the caller's clock to get log time.
    offset_ns: u64,
    /// The index the next append must get.
    next_index: u64,
    outputs: VecDeque<CtrlOutput>,
    stats: HaStats,
    /// Why the store refused an input, until [`Node::poll_output`] reports it; `deposed` stays.
    refused: Option<HaError>,
    deposed: bool,
}

/// What an [`HaController`] reports ([`Node::Event`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HaEvent {
    /// The wrapped controller's event.
    Ctrl(CtrlEvent),
    /// The store refused an input, which was not applied: this controller no longer leads
    /// ([`StoreError::NotLeader`]) or cannot log, and takes no more inputs.
    Deposed(HaError),
}

/// An [`HaController`]'s output.
pub type HaOutput = Output<Infallible, HaEvent, Mgmt>;

/// Counters of an [`HaController`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HaStats {
    /// Log entries replayed by [`HaController::recover`].
    pub replayed: u64,
    /// Outputs queued again by [`HaController::recover`].
    pub resent: u64,
    /// Entries this controller appended.
    pub appended: u64,
    /// Timeouts that had nothing due (not logged).
    pub idle_timeouts: u64,
    /// Inputs handed to a deposed controller (not applied).
    pub after_deposed: u64,
}

/// Why an [`HaController`] could not recover or act.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HaError {
    /// The store refused or failed ([`StoreError::NotLeader`]: deposed).
    Store(StoreError),
    /// An input too large to log.
    Encode(EncodeError),
    /// Log entry `index` is not an entry.
    Decode {
        /// Its index.
        index: u64,
        /// Why.
        err: DecodeError,
    },
    /// The log was written for another routing graph or controller configuration.
    ClusterMismatch {
        /// The fingerprint in the store.
        stored: String,
        /// This controller's.
        ours: String,
    },
    /// An append landed at another index than this leader expected: someone else wrote the
    /// log, which fencing forbids. A bug in a store, or a store shared by two clusters.
    Diverged {
        /// The index expected.
        expected: u64,
        /// The index the store gave.
        got: u64,
    },
}

/// What the replay of a log saw, for working out what to send again.
#[derive(Default)]
struct Replay {
    outputs: Vec<CtrlOutput>,
    /// (round, host) pairs whose `Completed` is in the log.
    completed: BTreeSet<(u32, NodeId)>,
    resumed: BTreeSet<u32>,
}

impl<S: ControllerStore> HaController<S> {
    /// Rebuilds the controller from the store's log, as the holder of `leadership`: checks the
    /// log was written for this `topo` and `cfg` (recording it if the log is new), replays
    /// every entry, and queues again what may not have reached its addressee. `now` is this
    /// controller's clock.
    pub fn recover(
        store: S,
        leadership: Leadership,
        cfg: ControllerConfig,
        topo: Arc<Topology>,
        now: Instant,
    ) -> Result<HaController<S>, HaError> {
        Self::recover_with(store, leadership, cfg, topo, now, None)
    }

    /// [`HaController::recover`] with §5.2's relay channel on when `relay` is `Some(max)`:
    /// controller forwarding and receiver recovery, rejoining hosts getting fresh process ids
    /// below `max` (`Controller::with_relay`). Configuration,
    /// not an input: part of the log's fingerprint, so every controller of a cluster agrees.
    ///
    /// # Errors
    /// As [`HaController::recover`].
    pub fn recover_with(
        store: S,
        leadership: Leadership,
        cfg: ControllerConfig,
        topo: Arc<Topology>,
        now: Instant,
        relay: Option<u32>,
    ) -> Result<HaController<S>, HaError> {
        // Fail fast (a lost leadership would only show at the first append), and start the
        // replay with a fresh lease.
        store.keep_alive(&leadership).map_err(HaError::Store)?;
        let mut ours = fingerprint(&cfg, &topo);
        if let Some(max) = relay {
            ours.push_str(&format!("-relay{max}"));
        }
        match store.get_meta(FINGERPRINT_KEY).map_err(HaError::Store)? {
            Some(stored) if stored != ours.as_bytes() => {
                return Err(HaError::ClusterMismatch {
                    stored: String::from_utf8_lossy(&stored).into_owned(),
                    ours,
                })
            }
            Some(_) => {}
            None => store
                .put_meta(&leadership, FINGERPRINT_KEY, ours.as_bytes())
                .map_err(HaError::Store)?,
        }
        // Fencing makes the log final once we lead: nobody else can append after this load.
        let log = store.load().map_err(HaError::Store)?;
        let ctrl = match relay {
            Some(max) => Controller::new(cfg, topo).with_relay(max),
            None => Controller::new(cfg, topo),
        };
        let mut ha = HaController {
            store,
            leadership,
            ctrl,
            log_now: Instant(0),
            offset_ns: 0,
            next_index: log.len() as u64,
            outputs: VecDeque::new(),
            stats: HaStats::default(),
            refused: None,
            deposed: false,
        };
        let mut replay = Replay::default();
        for (index, bytes) in log.iter().enumerate() {
            let entry = Entry::decode(bytes).map_err(|err| HaError::Decode {
                index: index as u64,
                err,
            })?;
            if let Entry::Message {
                msg: CtrlMsg::Completed { round, host },
                ..
            } = &entry
            {
                replay.completed.insert((*round, *host));
            }
            ha.log_now = ha.log_now.max(entry.at());
            ha.apply(entry);
            replay.outputs.extend(ha.outputs.drain(..));
        }
        ha.stats.replayed = log.len() as u64;
        ha.offset_ns = ha.log_now.0.saturating_sub(now.0);
        ha.queue_outstanding(replay);
        Ok(ha)
    }

    /// Queues, in their original order, the replayed outputs that may not have arrived: for
    /// every round not resumed, its `Declared` and its `Failure` to each host neither failed
    /// since nor logged as `Completed` (hosts tolerate a duplicate `Failure`: they answer
    /// `Completed` again); for the last resumed round, its `Resume`s and `Resumed`. Earlier
    /// `Resume`s are implied: each round's dead links include every earlier round's.
    fn queue_outstanding(&mut self, mut replay: Replay) {
        for out in &replay.outputs {
            if let Output::Event(CtrlEvent::Resumed { round }) = out {
                replay.resumed.insert(*round);
            }
        }
        let last_resumed = replay.resumed.last().copied();
        for out in replay.outputs {
            let keep = match &out {
                Output::Event(CtrlEvent::Declared { round, .. }) => !replay.resumed.contains(round),
                Output::Mgmt {
                    to: MgmtDest::Node(h),
                    msg: Mgmt::Ctrl(CtrlMsg::Failure { round, .. }),
                } => {
                    !replay.resumed.contains(round)
                        && !self.ctrl.is_failed(*h)
                        && !replay.completed.contains(&(*round, *h))
                }
                Output::Mgmt {
                    msg: Mgmt::Ctrl(CtrlMsg::Resume { round, .. }),
                    ..
                }
                | Output::Event(CtrlEvent::Resumed { round }) => Some(*round) == last_resumed,
                // Isolation requests go again from the standby's own Determine; rejoins run
                // on the relay channel, which is not logged.
                _ => false,
            };
            if keep {
                self.stats.resent += 1;
                self.outputs.push_back(out);
            }
        }
    }

    /// Handles a control message addressed to the controller: logged, then applied.
    fn on_message(&mut self, now: Instant, msg: CtrlMsg) -> Result<(), HaError> {
        let at = self.log_time(now);
        self.log_and_apply(Entry::Message { at, msg })
    }

    /// Handles a §5.2 relay addressed to the controller. A forward
    /// ([`RelayMsg::Forward`]) is applied **unlogged**: forwarding changes no state replay
    /// depends on (it only reads who is failed), and a forward lost with a deposed leader is
    /// like one lost on the way — the sender retransmits and forwards again. Receiver
    /// recovery's relays (`Recalled`, `RecoverRequest`, `Rejoin`, `Admitted`) are logged, then
    /// applied, like control messages. Without the relay channel
    /// ([`HaController::recover_with`]) the controller ignores them.
    ///
    /// # Errors
    /// The store refused the entry, or `msg` is a relay only a controller sends.
    fn on_relay(&mut self, now: Instant, msg: RelayMsg) -> Result<(), HaError> {
        let at = self.log_time(now);
        if matches!(msg, RelayMsg::Forward { .. }) {
            let input = Input::Mgmt(Mgmt::Relay(msg));
            drive::turn(&mut self.ctrl, Some((at, input)), |o| {
                self.outputs.push_back(o)
            });
            return Ok(());
        }
        self.log_and_apply(Entry::Relay { at, msg })
    }

    /// Runs Determine if it is due: logged, then applied. A timeout with nothing due is not
    /// logged.
    fn on_timeout(&mut self, now: Instant) -> Result<(), HaError> {
        let at = self.log_time(now);
        if self.ctrl.poll_timeout().is_none_or(|t| t > at) {
            self.stats.idle_timeouts += 1;
            return Ok(());
        }
        self.log_and_apply(Entry::Timeout { at })
    }

    /// Renews the leadership's lease; call it every third of the lease's time to live.
    pub fn keep_alive(&self) -> Result<(), HaError> {
        self.store
            .keep_alive(&self.leadership)
            .map_err(HaError::Store)
    }

    /// Whether this controller still leads.
    pub fn is_leader(&self) -> Result<bool, HaError> {
        self.store
            .is_leader(&self.leadership)
            .map_err(HaError::Store)
    }

    /// Gives up the leadership at once, so a standby need not wait for the lease to expire.
    pub fn resign(self) -> Result<S, HaError> {
        self.store.resign(self.leadership).map_err(HaError::Store)?;
        Ok(self.store)
    }

    /// The wrapped controller (read-only: inputs go through the log).
    pub fn controller(&self) -> &Controller {
        &self.ctrl
    }

    /// The leadership this controller acts under.
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Entries in the log (replayed and appended).
    pub fn log_len(&self) -> u64 {
        self.next_index
    }

    /// Counters.
    pub fn stats(&self) -> HaStats {
        self.stats
    }

    fn log_time(&self, now: Instant) -> Instant {
        Instant(now.0.saturating_add(self.offset_ns)).max(self.log_now)
    }

    fn log_and_apply(&mut self, entry: Entry) -> Result<(), HaError> {
        let bytes = entry.encode().map_err(HaError::Encode)?;
        let index = self
            .store
            .append(&self.leadership, &bytes)
            .map_err(HaError::Store)?;
        if index != self.next_index {
            return Err(HaError::Diverged {
                expected: self.next_index,
                got: index,
            });
        }
        self.next_index += 1;
        self.stats.appended += 1;
        debug_assert!(entry.at() >= self.log_now, "log time never goes backwards");
        self.log_now = entry.at();
        self.apply(entry);
        Ok(())
    }

    /// One turn of the wrapped controller on `entry`; its outputs become this role's (the
    /// deadline is read through [`Node::poll_timeout`]).
    fn apply(&mut self, entry: Entry) {
        let input = match entry {
            Entry::Message { at, msg } => (at, Input::Mgmt(Mgmt::Ctrl(msg))),
            Entry::Timeout { at } => (at, Input::Timeout),
            Entry::Relay { at, msg } => (at, Input::Mgmt(Mgmt::Relay(msg))),
            Entry::Unreachable { at, host } => (at, Input::Notice(Notice::Unreachable(host))),
        };
        drive::turn(&mut self.ctrl, Some(input), |o| self.outputs.push_back(o));
    }
}

impl<S: ControllerStore> Node for HaController<S> {
    /// Like the controller it wraps, it is on the management network only.
    type Packet = Infallible;
    type Event = HaEvent;
    type Mgmt = Mgmt;

    /// Logs the input, then applies it (a forward: applied unlogged; a timeout with nothing due:
    /// neither). A store's refusal deposes the controller (see the module's docs).
    fn handle(&mut self, now: Instant, input: Input<Infallible, Mgmt>) {
        if self.deposed {
            self.stats.after_deposed += 1;
            return;
        }
        let r = match input {
            Input::Packet { packet, .. } => match packet {},
            Input::Timeout => self.on_timeout(now),
            Input::Mgmt(Mgmt::Ctrl(msg)) => self.on_message(now, msg),
            Input::Mgmt(Mgmt::Relay(msg)) => self.on_relay(now, msg),
            Input::Notice(Notice::Unreachable(host)) => {
                let at = self.log_time(now);
                self.log_and_apply(Entry::Unreachable { at, host })
            }
            // A new leader rebuilds from the log ([`HaController::recover`]): what the bare
            // controller's `Recovered` does, recovery's re-queueing does here.
            Input::Notice(Notice::Recovered | Notice::LinkUp) => Ok(()),
        };
        if let Err(e) = r {
            self.deposed = true;
            self.refused = Some(e);
        }
    }

    /// The controller's outputs in order, then [`HaEvent::Deposed`] once if the store refused.
    fn poll_output(&mut self) -> Option<HaOutput> {
        let out = match self.outputs.pop_front() {
            Some(o) => o,
            None => {
                return self
                    .refused
                    .take()
                    .map(|e| Output::Event(HaEvent::Deposed(e)))
            }
        };
        Some(match out {
            Output::Send { packet, .. } => match packet {},
            Output::Event(e) => Output::Event(HaEvent::Ctrl(e)),
            Output::Mgmt { to, msg } => Output::Mgmt { to, msg },
        })
    }

    /// When a timeout is due, on the caller's clock; none once deposed.
    fn poll_timeout(&self) -> Option<Instant> {
        if self.deposed {
            return None;
        }
        self.ctrl
            .poll_timeout()
            .map(|t| Instant(t.0.saturating_sub(self.offset_ns)))
    }
}

impl<S: ControllerStore> fmt::Debug for HaController<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HaController")
            .field("leadership", &self.leadership)
            .field("log_len", &self.next_index)
            .field("offset_ns", &self.offset_ns)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// A fingerprint of what replay depends on besides the log: the routing graph (nodes, their
/// ports, links) and the controller configuration (processes per host, settling time). FNV-1a,
/// 64 bits, over explicitly listed fields so it does not change with `Debug` formatting.
pub fn fingerprint(cfg: &ControllerConfig, topo: &Topology) -> String {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    h.u64(u64::from(topo.hosts()));
    h.u64(topo.nodes().len() as u64);
    for n in topo.nodes() {
        h.bytes(n.name.as_bytes());
        h.u64(n.inputs.len() as u64);
        n.inputs.iter().for_each(|l| h.u64(u64::from(l.0)));
        h.u64(n.outputs.len() as u64);
        n.outputs.iter().for_each(|l| h.u64(u64::from(l.0)));
    }
    h.u64(topo.links().len() as u64);
    for l in topo.links() {
        for v in [l.from.0, l.from_port.0, l.to.0, l.to_port.0] {
            h.u64(u64::from(v));
        }
    }
    h.u64(cfg.procs_of_host.len() as u64);
    for procs in &cfg.procs_of_host {
        h.u64(procs.len() as u64);
        procs.iter().for_each(|p| h.u64(u64::from(p.0)));
    }
    h.u64(cfg.settle_ns);
    format!("fnv1a64:{:016x}", h.0)
}

struct Fnv(u64);

impl Fnv {
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn u64(&mut self, v: u64) {
        for x in v.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

impl From<StoreError> for HaError {
    fn from(e: StoreError) -> HaError {
        HaError::Store(e)
    }
}

impl HaError {
    /// Whether this controller was deposed (fenced by the store).
    pub fn is_not_leader(&self) -> bool {
        matches!(self, HaError::Store(e) if e.is_not_leader())
    }
}

impl fmt::Display for HaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HaError::Store(e) => write!(f, "{e}"),
            HaError::Encode(e) => write!(f, "log entry: {e}"),
            HaError::Decode { index, err } => write!(f, "log entry {index}: {err}"),
            HaError::ClusterMismatch { stored, ours } => write!(
                f,
                "the log is for another cluster (stored {stored}, this controller {ours})"
            ),
            HaError::Diverged { expected, got } => write!(
                f,
                "append landed at index {got}, expected {expected}: the log has another writer"
            ),
        }
    }
}

impl std::error::Error for HaError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemStore;
    use onepipe_proto::{LinkId, ProcId, Timestamp};
    use proptest::prelude::*;
    use std::time::Duration;

    const TTL: Duration = Duration::from_secs(2);

    fn topo() -> Arc<Topology> {
        Arc::new(Topology::leaf_spine(4, 2, 2).unwrap())
    }

    fn cfg(topo: &Topology) -> ControllerConfig {
        ControllerConfig {
            procs_of_host: (0..topo.hosts()).map(|h| vec![ProcId(h)]).collect(),
            settle_ns: 1_000,
            callback_timeout_ns: 0,
        }
    }

    fn lead(store: &MemStore, name: &str, now: Instant) -> HaController<MemStore> {
        let l = store.campaign(name, TTL, Duration::ZERO).unwrap();
        let t = topo();
        HaController::recover(store.clone(), l, cfg(&t), t, now).unwrap()
    }

    fn drain(c: &mut HaController<MemStore>) -> Vec<CtrlOutput> {
        std::iter::from_fn(|| c.poll_output())
            .map(|o| match o {
                Output::Event(HaEvent::Ctrl(e)) => Output::Event(e),
                Output::Event(HaEvent::Deposed(e)) => panic!("deposed: {e}"),
                Output::Mgmt { to, msg } => Output::Mgmt { to, msg },
                Output::Send { packet, .. } => match packet {},
            })
            .collect()
    }

    fn host_crash(topo: &Topology, host: u32, commit: u64) -> CtrlMsg {
        let up = topo.uplink(host);
        CtrlMsg::LinkDown {
            reporter: topo.links()[up.index()].to,
            link: up,
            last_commit: Some(Timestamp::new(commit)),
        }
    }

    fn lead_relay(store: &MemStore, name: &str, now: Instant) -> HaController<MemStore> {
        let l = store.campaign(name, TTL, Duration::ZERO).unwrap();
        let t = topo();
        HaController::recover_with(store.clone(), l, cfg(&t), t, now, Some(8)).unwrap()
    }

    #[test]
    fn forwards_are_relayed_unlogged_and_recovery_relays_are_logged_and_replayed_5_2() {
        use onepipe_proto::wire::{Ack, Packet};
        let ack = Packet::Ack(Ack {
            from: ProcId(1),
            to: ProcId(2),
            cum_psn: onepipe_proto::ids::Psn(1),
            sack: 0,
            reliable: true,
            ecn: 0,
            rwnd: 8,
        });
        let fwd = RelayMsg::Forward {
            from: NodeId(1),
            packets: vec![ack],
        };
        // Without the relay channel, nothing goes out.
        let plain = MemStore::new();
        let mut c = lead(&plain, "a", Instant(0));
        c.on_relay(Instant(10), fwd.clone()).unwrap();
        assert!(drain(&mut c).is_empty());
        let store = MemStore::manual();
        let mut c = lead_relay(&store, "a", Instant(0));
        c.on_relay(Instant(20), fwd.clone()).unwrap();
        assert_eq!(
            drain(&mut c),
            [Output::Mgmt {
                to: MgmtDest::Node(NodeId(2)),
                msg: Mgmt::Relay(fwd),
            }]
        );
        assert_eq!(c.controller().forwarded(), 1);
        assert_eq!(c.log_len(), 0, "forwarding is not logged");
        // A recall report is logged; a standby's replay knows it, and settles a recovering
        // host with it.
        let recalled = vec![(ProcId(0), Timestamp::new(5))];
        c.on_relay(
            Instant(30),
            RelayMsg::Recalled {
                groups: recalled.clone(),
            },
        )
        .unwrap();
        assert_eq!(c.log_len(), 1);
        assert!(c
            .on_relay(Instant(40), RelayMsg::Rejoin { host: NodeId(9) })
            .is_ok());
        assert_eq!(c.log_len(), 2, "logged, though the controller drops it");
        drop(c);
        store.advance(TTL);
        let mut b = lead_relay(&store, "b", Instant(50));
        assert_eq!(b.stats().replayed, 2);
        assert!(b.controller().relay_enabled());
        let _ = drain(&mut b);
        // A mismatched relay setting is another cluster.
        drop(b);
        store.advance(TTL);
        let l = store.campaign("c", TTL, Duration::ZERO).unwrap();
        let t = topo();
        assert!(HaController::recover(store.clone(), l, cfg(&t), t, Instant(60)).is_err());
    }

    fn completed(round: u32, host: u32) -> CtrlMsg {
        CtrlMsg::Completed {
            round,
            host: NodeId(host),
        }
    }

    fn failure_addressees(out: &[CtrlOutput]) -> Vec<u32> {
        out.iter()
            .filter_map(|o| match o {
                Output::Mgmt {
                    to: MgmtDest::Node(h),
                    msg: Mgmt::Ctrl(CtrlMsg::Failure { .. }),
                } => Some(h.0),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn standby_finishes_a_round_the_leader_left_open_5_2() {
        let store = MemStore::manual();
        let t = topo();
        let mut a = lead(&store, "a", Instant(0));
        // Detect, Determine, Broadcast.
        a.on_message(Instant(0), host_crash(&t, 1, 500)).unwrap();
        a.on_timeout(Instant(1_000)).unwrap();
        let out = drain(&mut a);
        assert_eq!(failure_addressees(&out), vec![0, 2, 3]);
        a.on_message(Instant(1_500), completed(1, 0)).unwrap();
        assert!(drain(&mut a).is_empty(), "Resume waits for hosts 2 and 3");
        // The leader dies before Resume: its lease runs out, the standby wins and replays.
        store.advance(TTL);
        let mut b = lead(&store, "b", Instant(2_000));
        assert_eq!(b.stats().replayed, 3);
        assert_eq!(
            b.controller().failed_hosts().collect::<Vec<_>>(),
            [NodeId(1)]
        );
        assert_eq!(b.controller().open_rounds(), 1);
        let resent = drain(&mut b);
        assert!(matches!(
            resent[0],
            Output::Event(CtrlEvent::Declared { round: 1, .. })
        ));
        assert_eq!(
            failure_addressees(&resent),
            vec![2, 3],
            "host 0's Completed is logged: only the others are told again"
        );
        // The round completes under the new leader.
        b.on_message(Instant(2_100), completed(1, 2)).unwrap();
        b.on_message(Instant(2_200), completed(1, 3)).unwrap();
        let out = drain(&mut b);
        assert!(out.contains(&Output::Event(CtrlEvent::Resumed { round: 1 })));
        let resumes = out
            .iter()
            .filter(|o| {
                matches!(
                    o,
                    Output::Mgmt {
                        msg: Mgmt::Ctrl(CtrlMsg::Resume { .. }),
                        ..
                    }
                )
            })
            .count();
        assert_eq!(
            resumes,
            3 + t.switches().count(),
            "correct hosts and every switch"
        );
        // The deposed leader is fenced: its input is refused and not applied.
        let err = a.on_message(Instant(2_300), completed(1, 2)).unwrap_err();
        assert!(err.is_not_leader(), "{err}");
        assert_eq!(a.controller().open_rounds(), 1);
        assert_eq!(store.log_len(), 5);
    }

    #[test]
    fn after_a_resumed_round_recovery_resends_only_its_resume() {
        let store = MemStore::manual();
        let t = topo();
        let mut a = lead(&store, "a", Instant(0));
        a.on_message(Instant(0), host_crash(&t, 1, 500)).unwrap();
        a.on_timeout(Instant(1_000)).unwrap();
        for h in [0, 2, 3] {
            a.on_message(Instant(1_500), completed(1, h)).unwrap();
        }
        let straight = drain(&mut a);
        a.resign().unwrap();
        let mut b = lead(&store, "b", Instant(3_000));
        let resent = drain(&mut b);
        assert!(failure_addressees(&resent).is_empty());
        let resume_tail: Vec<_> = straight
            .iter()
            .skip_while(|o| {
                !matches!(
                    o,
                    Output::Mgmt {
                        msg: Mgmt::Ctrl(CtrlMsg::Resume { .. }),
                        ..
                    }
                )
            })
            .cloned()
            .collect();
        assert_eq!(resent, resume_tail);
        assert_eq!(b.controller().open_rounds(), 0);
    }

    #[test]
    fn a_new_leader_whose_clock_is_behind_the_log_is_shifted_forward() {
        let store = MemStore::manual();
        let t = topo();
        let mut a = lead(&store, "a", Instant(0));
        a.on_message(Instant(1_000_000), host_crash(&t, 2, 7))
            .unwrap();
        store.advance(TTL);
        // The standby's clock started later: it reads 5 where the log is at 1_000_000.
        let mut b = lead(&store, "b", Instant(5));
        assert_eq!(b.poll_timeout(), Some(Instant(1_005)), "settle time kept");
        b.on_timeout(Instant(1_004)).unwrap();
        assert_eq!(b.stats().idle_timeouts, 1);
        assert!(drain(&mut b).is_empty());
        b.on_timeout(Instant(1_005)).unwrap();
        let out = drain(&mut b);
        assert!(out.contains(&Output::Event(CtrlEvent::Declared {
            round: 1,
            at: Instant(1_001_000),
            hosts: vec![(NodeId(2), Timestamp::new(7))],
        })));
    }

    #[test]
    fn recovering_with_a_lost_leadership_is_refused() {
        let store = MemStore::manual();
        let l = store.campaign("a", TTL, Duration::ZERO).unwrap();
        store.advance(TTL);
        let t = topo();
        let err = HaController::recover(store.clone(), l, cfg(&t), t, Instant(0)).unwrap_err();
        assert!(err.is_not_leader(), "{err}");
    }

    /// Driven through [`Node`] as every role is: a deposed controller reports it as its last
    /// output, applies nothing more, and asks for no timeout.
    #[test]
    fn through_node_being_deposed_is_the_last_output_and_ends_its_inputs() {
        let store = MemStore::manual();
        let t = topo();
        let mut a = lead(&store, "a", Instant(0));
        a.handle(
            Instant(0),
            onepipe_proto::Input::Mgmt(Mgmt::Ctrl(host_crash(&t, 1, 500))),
        );
        assert!(std::iter::from_fn(|| Node::poll_output(&mut a))
            .next()
            .is_none());
        assert_eq!(
            Node::poll_timeout(&a),
            Some(Instant(1_000)),
            "Determine after settling"
        );
        a.handle(Instant(1_000), onepipe_proto::Input::Timeout);
        let round: Vec<HaOutput> = std::iter::from_fn(|| Node::poll_output(&mut a)).collect();
        assert!(
            round.iter().any(|o| matches!(o, Output::Mgmt { .. })),
            "{round:?}"
        );
        assert!(!round
            .iter()
            .any(|o| matches!(o, Output::Event(HaEvent::Deposed(_)))));
        assert_eq!(store.log_len(), 2);

        store.advance(TTL); // the lease runs out: another controller may lead
        a.handle(
            Instant(1_500),
            onepipe_proto::Input::Mgmt(Mgmt::Ctrl(completed(1, 0))),
        );
        let out: Vec<HaOutput> = std::iter::from_fn(|| Node::poll_output(&mut a)).collect();
        match out.as_slice() {
            [Output::Event(HaEvent::Deposed(e))] => assert!(e.is_not_leader(), "{e}"),
            other => panic!("expected one Deposed, got {other:?}"),
        }
        assert_eq!(store.log_len(), 2, "the refused input was not logged");
        a.handle(Instant(2_000), onepipe_proto::Input::Timeout);
        assert!(Node::poll_output(&mut a).is_none());
        assert_eq!(Node::poll_timeout(&a), None);
        assert_eq!(a.stats().after_deposed, 1);
    }

    #[test]
    fn idle_timeouts_are_not_logged() {
        let store = MemStore::manual();
        let mut a = lead(&store, "a", Instant(0));
        for t in 0..10 {
            a.on_timeout(Instant(t * 1_000)).unwrap();
        }
        assert_eq!(store.log_len(), 0);
        assert_eq!(a.stats().idle_timeouts, 10);
    }

    #[test]
    fn a_log_for_another_cluster_is_refused() {
        let store = MemStore::manual();
        let _a = lead(&store, "a", Instant(0));
        store.advance(TTL);
        let l = store.campaign("b", TTL, Duration::ZERO).unwrap();
        let other = Arc::new(Topology::leaf_spine(8, 2, 2).unwrap());
        let err =
            HaController::recover(store.clone(), l, cfg(&other), other, Instant(0)).unwrap_err();
        assert!(matches!(err, HaError::ClusterMismatch { .. }), "{err}");
    }

    #[test]
    fn a_corrupt_entry_is_a_typed_error_naming_its_index() {
        let store = MemStore::manual();
        let l = store.campaign("a", TTL, Duration::ZERO).unwrap();
        store.append(&l, &[9, 9]).unwrap();
        let t = topo();
        let err = HaController::recover(store.clone(), l, cfg(&t), t, Instant(0)).unwrap_err();
        assert_eq!(
            err,
            HaError::Decode {
                index: 0,
                err: DecodeError::Version(9)
            }
        );
    }

    /// A controller input as the property test draws it.
    #[derive(Clone, Debug)]
    enum Input {
        /// A report on link `link % links`, from its true reporter or (garbage) from host 0.
        LinkDown {
            link: u32,
            honest: bool,
            commit: Option<u64>,
        },
        Completed {
            round: u32,
            host: u32,
        },
        Timeout,
    }

    fn input() -> impl Strategy<Value = (u64, Input)> {
        let kind = prop_oneof![
            3 => (any::<u32>(), prop::bool::weighted(0.9), prop::option::of(0u64..10_000))
                .prop_map(|(link, honest, commit)| Input::LinkDown { link, honest, commit }),
            4 => (1u32..4, 0u32..4).prop_map(|(round, host)| Input::Completed { round, host }),
            3 => Just(Input::Timeout),
        ];
        (0u64..1_500, kind)
    }

    fn feed(c: &mut HaController<MemStore>, t: &Topology, now: Instant, input: &Input) {
        let r = match input {
            Input::LinkDown {
                link,
                honest,
                commit,
            } => {
                let link = LinkId(link % t.links().len() as u32);
                let reporter = if *honest {
                    t.links()[link.index()].to
                } else {
                    NodeId(0)
                };
                let msg = CtrlMsg::LinkDown {
                    reporter,
                    link,
                    last_commit: commit.map(Timestamp::new),
                };
                c.on_message(now, msg)
            }
            Input::Completed { round, host } => c.on_message(now, completed(*round, *host)),
            Input::Timeout => c.on_timeout(now),
        };
        r.unwrap();
    }

    fn times(inputs: &[(u64, Input)]) -> Vec<Instant> {
        inputs
            .iter()
            .scan(0u64, |t, (dt, _)| {
                *t += dt;
                Some(Instant(*t))
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Event sourcing: crashing after any prefix, replaying it on a standby and going on
        /// there gives the same outputs, the same failed hosts and the same log as one
        /// controller running straight through; what recovery queues again is a subset of
        /// what was already emitted.
        #[test]
        fn replaying_any_prefix_then_continuing_equals_running_straight_through(
            inputs in prop::collection::vec(input(), 0..40),
            cut in any::<prop::sample::Index>(),
        ) {
            let t = topo();
            let at = times(&inputs);
            let straight_store = MemStore::manual();
            let mut straight = lead(&straight_store, "a", Instant(0));
            let mut expected = Vec::new();
            for (now, (_, i)) in at.iter().zip(&inputs) {
                feed(&mut straight, &t, *now, i);
                expected.extend(drain(&mut straight));
            }

            let k = cut.index(inputs.len() + 1);
            let store = MemStore::manual();
            let mut first = lead(&store, "a", Instant(0));
            let mut got = Vec::new();
            for (now, (_, i)) in at.iter().zip(&inputs).take(k) {
                feed(&mut first, &t, *now, i);
                got.extend(drain(&mut first));
            }
            store.advance(TTL);
            let crash_at = if k == 0 { Instant(0) } else { at[k - 1] };
            let mut second = lead(&store, "b", crash_at);
            let resent = drain(&mut second);
            for r in &resent {
                prop_assert!(got.contains(r), "resent {:?} was never emitted", r);
            }
            for (now, (_, i)) in at.iter().zip(&inputs).skip(k) {
                feed(&mut second, &t, *now, i);
                got.extend(drain(&mut second));
            }
            prop_assert_eq!(got, expected);
            prop_assert_eq!(
                second.controller().failed_hosts().collect::<Vec<_>>(),
                straight.controller().failed_hosts().collect::<Vec<_>>()
            );
            prop_assert_eq!(second.controller().open_rounds(), straight.controller().open_rounds());
            prop_assert_eq!(second.poll_timeout(), straight.poll_timeout());
            prop_assert_eq!(store.load().unwrap(), straight_store.load().unwrap());
            // The first leader is fenced for good.
            let late = first.on_message(Instant(u64::MAX / 2), completed(1, 0));
            prop_assert!(late.unwrap_err().is_not_leader());
        }
    }
}
