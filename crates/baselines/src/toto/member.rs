//! ToTo's membership (§5.1): a timeout-based agreement on which machines crashed and on
//! which of their messages every survivor delivers, then the Crash(q) events of §5.2.
//!
//! The paper relies on Transis's membership service (Initiate, Agree, Flush). This is a
//! simplified one for crash-stop failures of a single group:
//!
//! * **Initiate.** Machine `p` *suspects* `q` when it heard nothing from `q` for
//!   [`MemberConfig::suspect_ns`] while it waits for `q`: `q` has not shown it delivered
//!   `p`'s latest message (the causal layer sends it again every `retry_ns`, and a live
//!   machine answers), or, during a change, `q` has not sent a matching flush. An idle group
//!   suspects no one: silence with nothing owed is not failure. On suspecting `q`, `p`
//!   *freezes* it (delivers none of its messages beyond those it has) and notes how far it
//!   delivered.
//! * **Agree.** `p` sends every other machine of the view a [`Body::TotoFlush`]: the machines
//!   it takes for crashed, and how far it delivered each. A machine that learns of a suspicion
//!   from a flush adopts it (freezes the machine too), so the sets only grow; each machine
//!   repeats its flush every `retry_ns` while the change lasts. A machine *installs* set `S`
//!   once its own set is `S` and every other machine of the view outside `S` sent a flush
//!   with set `S`; the cut of each crashed `q` is the most any of them delivered. Every
//!   installer of view `e` installs the same `S` and cut: each needs the other's flush with
//!   its own set, and a machine's sets only grow. A machine still waiting gets a
//!   [`Body::TotoInstall`] from one that installed, in answer to its flush.
//! * **Flush.** Each survivor recovers the crashed machine's messages up to the cut from the
//!   others (the causal layer's NACKs, to survivors only: one of them delivered each) and
//!   drops the later ones; when they are all in the DAG, ToTo gets Crash(q) (§5.2, Fig. 4).
//!   Virtual synchrony: every survivor delivers the same messages of `q`, all of them before
//!   Crash(q).
//!
//! What it is not: joins and rejoins, partitions that heal, or a configuration-change message
//! to the application. A machine wrongly suspected is excluded: it goes on alone, and its
//! order after the cut is its own. Changes that overlap (a second crash during a change) are
//! folded into one set, or follow as the next view.

use super::causal::CausalLayer;
use crate::common::BaseStats;
use crate::packet::{BasePacket, Body, CausalAck};
use onepipe_proto::ids::ProcId;
use onepipe_proto::time::Instant;
use std::collections::{BTreeMap, VecDeque};

/// Static configuration of the [`Membership`].
#[derive(Clone, Copy, Debug)]
pub struct MemberConfig {
    /// Silence, while waiting for a machine, before it is suspected. Default 5 ms (25 of the
    /// causal layer's retries: with 10% loss of repair packets in a group of 16, a live machine
    /// busy with its own gaps can stay silent toward one machine for over 1 ms, and a machine
    /// wrongly suspected is excluded).
    pub suspect_ns: u64,
}

/// The least suspicion timeout for a causal layer that heartbeats after `idle_ns` and retries
/// after `retry_ns`: a live machine may be silent for a heartbeat, and its retries back off up
/// to the heartbeat interval, so suspicion waits at least 4 of the longer.
pub fn suspect_floor_ns(idle_ns: u64, retry_ns: u64) -> u64 {
    4 * idle_ns.max(retry_ns)
}

impl Default for MemberConfig {
    fn default() -> MemberConfig {
        MemberConfig {
            suspect_ns: 5_000_000,
        }
    }
}

/// Where a machine is in the membership protocol (§5.1).
#[derive(Debug)]
enum Phase {
    /// No change under way.
    Steady,
    /// Agree: a change of the view is under way.
    Changing {
        /// Per suspected machine, how far this machine delivered it (frozen since).
        mine: BTreeMap<ProcId, u64>,
        /// The latest flush of each other machine of the view, this view.
        flushes: BTreeMap<ProcId, Vec<CausalAck>>,
        /// When the own flush was last sent.
        sent_at: Instant,
    },
}

/// One machine's membership. See the module docs.
#[derive(Debug)]
pub struct Membership {
    cfg: MemberConfig,
    id: ProcId,
    retry_ns: u64,
    /// Views installed so far.
    epoch: u64,
    /// Per machine, when a packet last came from it (or when this machine started).
    heard: Vec<Instant>,
    /// Whether [`Membership::start`] ran: the clock's origin is the driver's.
    started: bool,
    /// Per machine, whether it is in the view.
    alive: Vec<bool>,
    phase: Phase,
    /// The last change installed: its epoch and cut, to answer late flushes.
    installed: Option<(u64, Vec<CausalAck>)>,
    /// Packets to send.
    out: VecDeque<BasePacket>,
    /// Machines crashed so far.
    crashed: u64,
}

impl Membership {
    /// The membership of machine `id` of `procs`, whose causal layer retries every `retry_ns`.
    pub fn new(cfg: MemberConfig, id: ProcId, procs: u32, retry_ns: u64) -> Membership {
        assert!(cfg.suspect_ns > retry_ns, "suspicion needs a few retries");
        Membership {
            cfg,
            id,
            retry_ns,
            epoch: 0,
            heard: vec![Instant(0); procs as usize],
            started: false,
            alive: vec![true; procs as usize],
            phase: Phase::Steady,
            installed: None,
            out: VecDeque::new(),
            crashed: 0,
        }
    }

    /// Views installed so far.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Machines this one installed as crashed.
    pub fn crashed(&self) -> u64 {
        self.crashed
    }

    /// True when no change is under way.
    pub fn is_steady(&self) -> bool {
        matches!(self.phase, Phase::Steady)
    }

    /// The next packet to send.
    pub fn poll_packet(&mut self) -> Option<BasePacket> {
        self.out.pop_front()
    }

    /// The first input at `now`: silence is counted from here. Later calls do nothing.
    pub fn start(&mut self, now: Instant) {
        if !self.started {
            self.started = true;
            self.heard.fill(now);
        }
    }

    /// A packet came from `src` (any packet: a sign of life).
    pub fn heard(&mut self, now: Instant, src: ProcId) {
        if let Some(h) = self.heard.get_mut(src.index()) {
            *h = (*h).max(now);
        }
    }

    /// True if this machine waits for `q`: `q` has not shown it delivered the latest own
    /// message, or, during a change, has not sent a flush with this machine's set.
    fn waits_for(&self, q: ProcId, causal: &CausalLayer) -> bool {
        let flush_owed = match &self.phase {
            Phase::Steady => false,
            Phase::Changing { mine, flushes, .. } => {
                !mine.contains_key(&q) && !same_set(flushes.get(&q), mine)
            }
        };
        flush_owed || causal.known_own(q) < causal.sent()
    }

    fn suspected(&self, q: ProcId) -> bool {
        matches!(&self.phase, Phase::Changing { mine, .. } if mine.contains_key(&q))
    }

    /// When [`Membership::on_timeout`] has something to do.
    pub fn poll_timeout(&self, causal: &CausalLayer) -> Option<Instant> {
        if !self.started {
            return None;
        }
        let suspect = (0..self.alive.len())
            .map(|q| ProcId(q as u32))
            .filter(|&q| q != self.id && self.alive[q.index()] && !self.suspected(q))
            .filter(|&q| self.waits_for(q, causal))
            .map(|q| self.heard[q.index()] + self.cfg.suspect_ns)
            .min();
        let resend = match &self.phase {
            Phase::Changing { sent_at, .. } => Some(*sent_at + self.retry_ns),
            Phase::Steady => None,
        };
        [suspect, resend].into_iter().flatten().min()
    }

    /// §5.1, Initiate: suspects every machine silent too long while waited for; repeats the
    /// flush during a change. Returns the crashes installed, for [`super::dag::Dag::crash`].
    pub fn on_timeout(&mut self, now: Instant, causal: &mut CausalLayer) -> Vec<(ProcId, u64)> {
        self.start(now);
        let silent: Vec<ProcId> = (0..self.alive.len())
            .map(|q| ProcId(q as u32))
            .filter(|&q| {
                q != self.id
                    && self.alive[q.index()]
                    && !self.suspected(q)
                    && now >= self.heard[q.index()] + self.cfg.suspect_ns
                    && self.waits_for(q, causal)
            })
            .collect();
        if !silent.is_empty() {
            self.suspect(now, &silent, causal);
            return self.try_install(now, causal);
        }
        if let Phase::Changing { sent_at, .. } = &self.phase {
            if now >= *sent_at + self.retry_ns {
                self.send_flush(now);
            }
        }
        Vec::new()
    }

    /// Freezes each of `qs` not yet suspected and sends the grown set to the view.
    fn suspect(&mut self, now: Instant, qs: &[ProcId], causal: &mut CausalLayer) {
        if let Phase::Steady = self.phase {
            // The others owe a flush from now on: a group stalled on a crashed machine is quiet,
            // so a live machine may have been silent toward this one for long. Silence counts
            // from here (a machine that crashed at about the same time as the suspected one is
            // then suspected `suspect_ns` later, in a second round).
            for h in &mut self.heard {
                *h = (*h).max(now);
            }
            self.phase = Phase::Changing {
                mine: BTreeMap::new(),
                flushes: BTreeMap::new(),
                sent_at: now,
            };
        }
        let Phase::Changing { mine, .. } = &mut self.phase else {
            unreachable!("changing")
        };
        let mut grew = false;
        for &q in qs {
            if self.alive[q.index()] && q != self.id && !mine.contains_key(&q) {
                mine.insert(q, causal.freeze(q));
                grew = true;
            }
        }
        if grew {
            self.send_flush(now);
        }
    }

    /// Sends the own flush to every other machine of the view outside the set.
    fn send_flush(&mut self, now: Instant) {
        let Phase::Changing { mine, sent_at, .. } = &mut self.phase else {
            return;
        };
        *sent_at = now;
        let crashed = acks(mine);
        for d in 0..self.alive.len() as u32 {
            let d = ProcId(d);
            if d != self.id && self.alive[d.index()] && !mine.contains_key(&d) {
                self.out.push_back(BasePacket {
                    src: self.id,
                    dst: d,
                    body: Body::TotoFlush {
                        epoch: self.epoch,
                        crashed: crashed.clone(),
                    },
                });
            }
        }
    }

    /// A [`Body::TotoFlush`] from `src` (in the view: the causal layer's checks ran).
    pub fn on_flush(
        &mut self,
        now: Instant,
        src: ProcId,
        (epoch, crashed): (u64, Vec<CausalAck>),
        causal: &mut CausalLayer,
        stats: &mut BaseStats,
    ) -> Vec<(ProcId, u64)> {
        if epoch != self.epoch {
            // A late flush of the last view: tell its sender how that view ended. An earlier or
            // later one has nothing to say (a machine ahead installed; this one's own flushes
            // bring the install back).
            match &self.installed {
                Some((e, cut)) if *e == epoch => self.out.push_back(BasePacket {
                    src: self.id,
                    dst: src,
                    body: Body::TotoInstall {
                        epoch,
                        cut: cut.clone(),
                    },
                }),
                _ => stats.dropped_duplicate += 1,
            }
            return Vec::new();
        }
        if crashed.is_empty() || !self.valid_set(&crashed) {
            stats.dropped_invalid += 1;
            return Vec::new();
        }
        if crashed.iter().any(|a| a.origin == self.id) {
            // This machine is alive, whatever `src` thinks: it never adopts its own crash.
            stats.dropped_invalid += 1;
            return Vec::new();
        }
        let qs: Vec<ProcId> = crashed.iter().map(|a| a.origin).collect();
        self.suspect(now, &qs, causal);
        if let Phase::Changing { flushes, .. } = &mut self.phase {
            flushes.insert(src, crashed);
        }
        self.try_install(now, causal)
    }

    /// True if a set is ascending, inside the group and names only machines of the view.
    fn valid_set(&self, set: &[CausalAck]) -> bool {
        set.windows(2).all(|w| w[0].origin < w[1].origin)
            && set
                .iter()
                .all(|a| a.origin.index() < self.alive.len() && self.alive[a.origin.index()])
    }

    /// Installs the change once every other machine of the view outside the own set sent a
    /// flush with that set (module docs).
    fn try_install(&mut self, now: Instant, causal: &mut CausalLayer) -> Vec<(ProcId, u64)> {
        let Phase::Changing { mine, flushes, .. } = &self.phase else {
            return Vec::new();
        };
        let members: Vec<ProcId> = (0..self.alive.len() as u32)
            .map(ProcId)
            .filter(|&r| r != self.id && self.alive[r.index()] && !mine.contains_key(&r))
            .collect();
        if !members.iter().all(|r| same_set(flushes.get(r), mine)) {
            return Vec::new();
        }
        // The cut: per crashed machine, the most any survivor delivered.
        let mut cut = mine.clone();
        for r in &members {
            for a in &flushes[r] {
                let c = cut.get_mut(&a.origin).expect("the same set");
                *c = (*c).max(a.seq);
            }
        }
        self.install(now, acks(&cut), causal)
    }

    /// A [`Body::TotoInstall`] from `src`: view `epoch` ended with `cut`.
    pub fn on_install(
        &mut self,
        now: Instant,
        (epoch, cut): (u64, Vec<CausalAck>),
        causal: &mut CausalLayer,
        stats: &mut BaseStats,
    ) -> Vec<(ProcId, u64)> {
        // Its sender needed this machine's flush with exactly that set, so this machine
        // suspects (and froze) every machine in it.
        let known = cut.iter().all(|a| self.suspected(a.origin));
        if epoch != self.epoch || !self.valid_set(&cut) || !known {
            stats.dropped_duplicate += 1;
            return Vec::new();
        }
        self.install(now, cut, causal)
    }

    /// Installs the next view: the machines of `cut` crash at their cut. Suspicions beyond
    /// the cut go on as the next view's change.
    fn install(
        &mut self,
        now: Instant,
        cut: Vec<CausalAck>,
        causal: &mut CausalLayer,
    ) -> Vec<(ProcId, u64)> {
        let Phase::Changing { mut mine, .. } = std::mem::replace(&mut self.phase, Phase::Steady)
        else {
            unreachable!("installing outside a change")
        };
        for a in &cut {
            assert!(
                mine.remove(&a.origin).is_some(),
                "installing an unsuspected crash"
            );
            self.alive[a.origin.index()] = false;
            causal.crash(now, a.origin, a.seq);
            self.crashed += 1;
        }
        self.epoch += 1;
        self.installed = Some((self.epoch - 1, cut.clone()));
        if !mine.is_empty() {
            let rest: Vec<ProcId> = mine.keys().copied().collect();
            self.suspect(now, &rest, causal);
        }
        cut.iter().map(|a| (a.origin, a.seq)).collect()
    }
}

/// A set with its delivered counts, as a flush carries it.
fn acks(set: &BTreeMap<ProcId, u64>) -> Vec<CausalAck> {
    set.iter()
        .map(|(&origin, &seq)| CausalAck { origin, seq })
        .collect()
}

/// True if `flush` names exactly the machines of `mine`.
fn same_set(flush: Option<&Vec<CausalAck>>, mine: &BTreeMap<ProcId, u64>) -> bool {
    flush.is_some_and(|f| {
        f.len() == mine.len() && f.iter().zip(mine.keys()).all(|(a, q)| a.origin == *q)
    })
}
