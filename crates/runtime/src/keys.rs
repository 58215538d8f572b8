//! The controller's side of datagram keys: which links a member has, their keys, and when the
//! cluster moves to a new key epoch (docs/SECURITY.md, "Keys").
//!
//! [`KeyMaster`] is a pure state machine (time is an argument): the controller asks it what to
//! send when the cluster becomes ready, when a member is removed or registers again, when a
//! member acknowledges an epoch, and on its timer. A rotation has two phases:
//!
//! 1. **install** — every member holding keys gets the next epoch's keys of its own links
//!    (`Keys`, `activate: false`) and accepts that epoch for receiving at once; it answers
//!    `KeysInstalled`;
//! 2. **activate** — once all have answered (or [`INSTALL_TIMEOUT_NS`] passed: a paused member
//!    does not hold the cluster up), everyone is told `KeysActivate`: senders switch, receivers
//!    keep the previous epoch for the grace and then refuse it.
//!
//! Epochs only grow and each is handed to one incarnation of a member: a member that registers
//! again (a restart) gets only a new epoch's keys, which it may send with at once. The caller
//! records every new epoch in its store before sending any of its keys
//! ([`KeyMaster::next_epoch`], then [`KeyMaster::rotate`]).
//!
//! What it is not: the data path's use of the keys ([`crate::auth`]).

use crate::auth::{ClusterSecret, Epoch, LinkId, LinkKey, LinkPorts, MemberIx};
use crate::cluster::Cluster;
use crate::control::{FromController, Member};
use onepipe_proto::ids::PortId;
use std::collections::BTreeSet;

/// How long a rotation waits for every member's `KeysInstalled` before activating anyway.
pub const INSTALL_TIMEOUT_NS: u64 = 2_000_000_000;

/// Default time between rotations (`[auth] rotate_every` in the cluster file).
pub const ROTATE_EVERY_NS_DEFAULT: u64 = 3_600_000_000_000;

/// The number of `member` in `cluster`: aggregators in file order, then processes by id.
pub fn member_ix(cluster: &Cluster, member: &Member) -> Option<MemberIx> {
    let aggs = cluster.aggregators.len();
    let ix = match member {
        Member::Aggregator(name) => cluster.aggregators.iter().position(|a| &a.name == name)?,
        Member::Process(p) if *p < cluster.procs() => aggs + *p as usize,
        Member::Process(_) => return None,
    };
    u16::try_from(ix).ok().map(MemberIx)
}

/// The members `member` has a link with: a process's aggregator; an aggregator's processes,
/// child aggregators and parent.
pub fn neighbours(cluster: &Cluster, member: &Member) -> Vec<Member> {
    match member {
        Member::Process(p) => cluster
            .process(*p)
            .map(|s| vec![Member::Aggregator(s.aggregator.clone())])
            .unwrap_or_default(),
        Member::Aggregator(name) => {
            let procs = cluster
                .processes
                .iter()
                .filter(|p| &p.aggregator == name)
                .map(|p| Member::Process(p.id));
            let children = cluster
                .aggregators
                .iter()
                .filter(|a| a.parent.as_deref() == Some(name.as_str()))
                .map(|a| Member::Aggregator(a.name.clone()));
            let parent = cluster
                .aggregator(name)
                .and_then(|a| a.parent.clone())
                .map(Member::Aggregator);
            procs.chain(children).chain(parent).collect()
        }
    }
}

/// The keys of `epoch` of every link of `member`, both directions.
pub fn link_keys(
    secret: &ClusterSecret,
    cluster: &Cluster,
    member: &Member,
    epoch: Epoch,
) -> Vec<LinkKey> {
    let Some(me) = member_ix(cluster, member) else {
        return Vec::new();
    };
    neighbours(cluster, member)
        .iter()
        .filter_map(|n| member_ix(cluster, n))
        .flat_map(|peer| {
            [LinkId { from: me, to: peer }, LinkId { from: peer, to: me }].map(|link| LinkKey {
                link,
                key: secret.link_key(link, epoch),
            })
        })
        .collect()
}

/// An aggregator's links by port, from its peers in port order (port `i` both ways).
pub fn aggregator_links(cluster: &Cluster, peers: &[crate::aggregator::Peer]) -> Vec<LinkPorts> {
    use crate::aggregator::Peer;
    peers
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let member = match p {
                Peer::Process(id) => Member::Process(*id),
                Peer::Child(n) | Peer::Parent(n) => Member::Aggregator(n.clone()),
            };
            let port = PortId(i as u32);
            member_ix(cluster, &member).map(|peer| LinkPorts {
                peer,
                out: port,
                input: port,
            })
        })
        .collect()
}

/// Where a rotation stands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// No rotation under way.
    Idle,
    /// `epoch` was handed out; `waiting` have not acknowledged it yet.
    Installing {
        epoch: Epoch,
        waiting: BTreeSet<Member>,
        since_ns: u64,
    },
}

/// Counters of a [`KeyMaster`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyStats {
    /// Rotations begun.
    pub rotations: u64,
    /// Epochs activated.
    pub activations: u64,
    /// Activations that did not wait for every member (install timeout).
    pub install_timeouts: u64,
}

/// The controller's key schedule. See the module docs.
#[derive(Debug)]
pub struct KeyMaster {
    secret: ClusterSecret,
    rotate_every_ns: u64,
    grace_ns: u64,
    /// The highest epoch handed out.
    issued: Epoch,
    /// The epoch senders use.
    active: Epoch,
    /// Members holding keys of their current incarnation.
    holders: BTreeSet<Member>,
    phase: Phase,
    next_rotation_ns: u64,
    stats: KeyStats,
}

/// A message for a member.
pub type KeySend = (Member, FromController);

impl KeyMaster {
    /// A schedule whose first epoch is `first` (recorded by the caller), rotating every
    /// `rotate_every_ns` (0: only on removals and restarts) from `now_ns`, with `grace_ns` for
    /// the previous epoch after a switch.
    pub fn new(
        secret: ClusterSecret,
        first: Epoch,
        rotate_every_ns: u64,
        grace_ns: u64,
        now_ns: u64,
    ) -> KeyMaster {
        KeyMaster {
            secret,
            rotate_every_ns,
            grace_ns,
            issued: first,
            active: first,
            holders: BTreeSet::new(),
            phase: Phase::Idle,
            next_rotation_ns: next_at(now_ns, rotate_every_ns),
            stats: KeyStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> KeyStats {
        self.stats
    }

    /// The epoch senders use.
    pub fn active(&self) -> Epoch {
        self.active
    }

    /// Whether `member` holds keys of its current incarnation.
    pub fn holds(&self, member: &Member) -> bool {
        self.holders.contains(member)
    }

    /// A member's first keys (the cluster became ready, or a member that never had keys
    /// joined late): the active epoch, to send with at once, and the epoch being installed, if
    /// a rotation is under way (it must acknowledge that one too).
    pub fn admit(&mut self, cluster: &Cluster, member: &Member) -> Vec<FromController> {
        debug_assert!(!self.holders.contains(member));
        self.holders.insert(member.clone());
        let mut out = vec![FromController::Keys {
            epoch: self.active,
            keys: link_keys(&self.secret, cluster, member, self.active),
            activate: true,
        }];
        if let Phase::Installing { epoch, waiting, .. } = &mut self.phase {
            waiting.insert(member.clone());
            out.push(FromController::Keys {
                epoch: *epoch,
                keys: link_keys(&self.secret, cluster, member, *epoch),
                activate: false,
            });
        }
        out
    }

    /// Counts `member` as holding keys without sending any: it re-registered with a new
    /// leader (a failover) and kept the keys the old one gave it.
    pub fn adopt(&mut self, member: &Member) {
        self.holders.insert(member.clone());
    }

    /// Makes a rotation due at `at_ns` at the latest (a new leader rotates soon after taking
    /// over, to know which epoch every member holds).
    pub fn rotate_by(&mut self, at_ns: u64) {
        self.next_rotation_ns = self.next_rotation_ns.min(at_ns);
    }

    /// Forgets a member that was removed (it left, or its connection was lost). Returns whether it held
    /// keys: then the caller starts a rotation, so that its keys stop opening anything.
    pub fn removed(&mut self, member: &Member) -> bool {
        if let Phase::Installing { waiting, .. } = &mut self.phase {
            waiting.remove(member);
        }
        self.holders.remove(member)
    }

    /// The epoch a rotation begun now would hand out; record it before [`KeyMaster::rotate`].
    pub fn next_epoch(&self) -> Epoch {
        Epoch(self.issued.0.checked_add(1).expect("2^32 key epochs"))
    }

    /// Begins a rotation to `epoch` (from [`KeyMaster::next_epoch`], recorded) at `now_ns`:
    /// every holder connected (`live`) gets the epoch's keys to install; `restarted`, a member
    /// registering again after its memory was lost, gets them to send with at once and holds
    /// no older epoch. A rotation under way is superseded.
    pub fn rotate(
        &mut self,
        cluster: &Cluster,
        epoch: Epoch,
        live: &BTreeSet<Member>,
        restarted: Option<&Member>,
        now_ns: u64,
    ) -> Vec<KeySend> {
        assert!(epoch > self.issued, "key epochs only grow");
        self.issued = epoch;
        self.stats.rotations += 1;
        if let Some(r) = restarted {
            self.holders.insert(r.clone());
        }
        let mut waiting = BTreeSet::new();
        let mut out = Vec::new();
        for m in self.holders.iter().filter(|m| live.contains(*m)) {
            let activate = restarted == Some(m);
            if !activate {
                waiting.insert(m.clone());
            }
            let keys = link_keys(&self.secret, cluster, m, epoch);
            let msg = FromController::Keys {
                epoch,
                keys,
                activate,
            };
            out.push((m.clone(), msg));
        }
        self.phase = Phase::Installing {
            epoch,
            waiting,
            since_ns: now_ns,
        };
        out
    }

    /// `member` installed `epoch`. Returns the activation once every member has.
    pub fn installed(&mut self, member: &Member, epoch: Epoch, now_ns: u64) -> Vec<KeySend> {
        let Phase::Installing {
            epoch: e, waiting, ..
        } = &mut self.phase
        else {
            return Vec::new();
        };
        if *e != epoch {
            return Vec::new();
        }
        waiting.remove(member);
        if waiting.is_empty() {
            return self.activate(now_ns);
        }
        Vec::new()
    }

    /// The timer: whether a rotation is due now (the caller begins it), and the activation of
    /// one that waited long enough for acknowledgements.
    pub fn tick(&mut self, now_ns: u64) -> (bool, Vec<KeySend>) {
        match &self.phase {
            Phase::Installing { since_ns, .. } => {
                if now_ns.saturating_sub(*since_ns) >= INSTALL_TIMEOUT_NS {
                    self.stats.install_timeouts += 1;
                    return (false, self.activate(now_ns));
                }
                (false, Vec::new())
            }
            Phase::Idle => (now_ns >= self.next_rotation_ns, Vec::new()),
        }
    }

    fn activate(&mut self, now_ns: u64) -> Vec<KeySend> {
        let Phase::Installing { epoch, .. } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return Vec::new();
        };
        self.active = epoch;
        self.stats.activations += 1;
        self.next_rotation_ns = next_at(now_ns, self.rotate_every_ns);
        let msg = FromController::KeysActivate {
            epoch,
            grace_ns: self.grace_ns,
        };
        self.holders
            .iter()
            .map(|m| (m.clone(), msg.clone()))
            .collect()
    }
}

fn next_at(now_ns: u64, every_ns: u64) -> u64 {
    if every_ns == 0 {
        u64::MAX
    } else {
        now_ns.saturating_add(every_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::LocalLayout;

    fn cluster() -> Cluster {
        Cluster::generate(&LocalLayout::default()).unwrap()
    }

    fn members(c: &Cluster) -> Vec<Member> {
        c.aggregators
            .iter()
            .map(|a| Member::Aggregator(a.name.clone()))
            .chain(c.processes.iter().map(|p| Member::Process(p.id)))
            .collect()
    }

    fn master() -> KeyMaster {
        KeyMaster::new(ClusterSecret::from_bytes([3; 32]), Epoch(100), 1_000, 50, 0)
    }

    #[test]
    fn members_are_numbered_aggregators_first_and_linked_as_the_tree() {
        let c = cluster();
        let ixs: Vec<u16> = members(&c)
            .iter()
            .map(|m| member_ix(&c, m).unwrap().0)
            .collect();
        assert_eq!(ixs, (0..ixs.len() as u16).collect::<Vec<_>>());
        assert_eq!(member_ix(&c, &Member::Process(c.procs())), None);
        assert_eq!(member_ix(&c, &Member::Aggregator("nope".into())), None);
        // tor-0: p0, p1 and spine-0; spine-0: tor-0 and tor-1.
        let tor = Member::Aggregator("tor-0".into());
        assert_eq!(
            neighbours(&c, &tor),
            vec![
                Member::Process(0),
                Member::Process(1),
                Member::Aggregator("spine-0".into())
            ]
        );
        // Every link is known at both ends: each end's neighbours include the other.
        for m in members(&c) {
            for n in neighbours(&c, &m) {
                assert!(neighbours(&c, &n).contains(&m), "{m} - {n}");
            }
        }
    }

    #[test]
    fn a_member_gets_the_keys_of_its_own_links_only_and_they_match_its_peers() {
        let c = cluster();
        let s = ClusterSecret::from_bytes([3; 32]);
        let p0 = link_keys(&s, &c, &Member::Process(0), Epoch(1));
        let tor = link_keys(&s, &c, &Member::Aggregator("tor-0".into()), Epoch(1));
        assert_eq!(p0.len(), 2, "one link, both directions");
        for k in &p0 {
            assert!(tor.contains(k), "tor-0 holds p0's link keys");
        }
        let p2 = link_keys(&s, &c, &Member::Process(2), Epoch(1));
        assert!(p2.iter().all(|k| !tor.contains(k)), "p2 is under tor-1");
    }

    #[test]
    fn a_rotation_activates_once_every_live_member_installed() {
        let c = cluster();
        let mut km = master();
        let all = members(&c);
        for m in &all {
            let first = km.admit(&c, m);
            assert!(matches!(
                first[..],
                [FromController::Keys {
                    epoch: Epoch(100),
                    activate: true,
                    ..
                }]
            ));
        }
        let live: BTreeSet<Member> = all.iter().cloned().collect();
        let e = km.next_epoch();
        let sends = km.rotate(&c, e, &live, None, 10);
        assert_eq!(sends.len(), all.len());
        for (i, m) in all.iter().enumerate() {
            let out = km.installed(m, e, 20);
            assert_eq!(out.is_empty(), i + 1 < all.len(), "activates at the last");
        }
        assert_eq!(km.active(), Epoch(101));
        // Acknowledgements of an old epoch change nothing.
        assert!(km.installed(&all[0], e, 30).is_empty());
    }

    #[test]
    fn a_silent_member_does_not_hold_a_rotation_up() {
        let c = cluster();
        let mut km = master();
        let all = members(&c);
        for m in &all {
            km.admit(&c, m);
        }
        let live: BTreeSet<Member> = all.iter().cloned().collect();
        let e = km.next_epoch();
        km.rotate(&c, e, &live, None, 0);
        assert!(km.tick(INSTALL_TIMEOUT_NS - 1).1.is_empty());
        let (_, act) = km.tick(INSTALL_TIMEOUT_NS);
        assert_eq!(act.len(), all.len());
        assert_eq!((km.active(), km.stats().install_timeouts), (e, 1));
    }

    #[test]
    fn rotations_are_due_on_the_timer_and_epochs_only_grow() {
        let c = cluster();
        let mut km = master();
        assert_eq!(km.tick(999), (false, vec![]));
        assert!(km.tick(1_000).0, "due every 1,000 ns");
        let e1 = km.next_epoch();
        km.rotate(&c, e1, &BTreeSet::new(), None, 1_000);
        // Nobody to wait for: activated at the next tick past the timeout; then due again.
        let (_, act) = km.tick(1_000 + INSTALL_TIMEOUT_NS);
        assert!(act.is_empty(), "no holders, no messages");
        assert_eq!(km.active(), e1);
        assert!(km.next_epoch() > e1);
    }

    #[test]
    fn a_restarted_member_gets_a_new_epoch_to_send_with_at_once() {
        let c = cluster();
        let mut km = master();
        let all = members(&c);
        for m in &all {
            km.admit(&c, m);
        }
        let p1 = Member::Process(1);
        assert!(km.removed(&p1));
        let live: BTreeSet<Member> = all.iter().cloned().collect();
        let e = km.next_epoch();
        let sends = km.rotate(&c, e, &live, Some(&p1), 5);
        let (_, to_p1) = sends.iter().find(|(m, _)| *m == p1).unwrap();
        assert!(matches!(to_p1, FromController::Keys { epoch, activate: true, .. } if *epoch == e));
        assert!(sends
            .iter()
            .filter(|(m, _)| *m != p1)
            .all(|(_, s)| matches!(
                s,
                FromController::Keys {
                    activate: false,
                    ..
                }
            )));
        // It is not waited for (it sends with the epoch already).
        for m in all.iter().filter(|m| **m != p1) {
            km.installed(m, e, 6);
        }
        assert_eq!(km.active(), e);
    }

    #[test]
    fn a_removed_member_is_not_given_the_next_epoch() {
        let c = cluster();
        let mut km = master();
        let all = members(&c);
        for m in &all {
            km.admit(&c, m);
        }
        let gone = Member::Process(3);
        assert!(km.removed(&gone));
        assert!(!km.removed(&gone), "once");
        let live: BTreeSet<Member> = all.iter().cloned().collect();
        let e = km.next_epoch();
        let sends = km.rotate(&c, e, &live, None, 0);
        assert!(sends.iter().all(|(m, _)| *m != gone));
        assert_eq!(sends.len(), all.len() - 1);
    }
}
