//! Where a host stands in §5.2's failure procedure: its own lifecycle, apart from the rounds it
//! takes part in for others (discard, recall, callback). One explicit state instead of a set of
//! flags; the host calls in, and acts on what the transitions return (the messages to send).
//!
//! ```text
//!             declared (Failed)              Settle answered            Joined: a new host
//! Correct ─────────────────────────▶ Failed ─────────────────▶ Settled ─────────────────────▶ Correct
//!    ▲                                  ▲
//!    │ restarted after a crash          │ declared (Failed / Settle)
//! Restarted ────────────────────────────┘
//! ```
//!
//! * **Correct**: sends and delivers. Its link may come back (or its driver say so) before the
//!   controller declares it: then it asks to recover as soon as it is declared.
//! * **Restarted**: crashed and came back with its state lost; silent on the data network (not
//!   even beacons) until it hears it was declared, so that its switch times its link out and the
//!   controller declares its old processes at the last commit barrier they sent. It asked to
//!   recover at once.
//! * **Failed**: declared at `ts`. Frozen: sends refused, reliable delivery stopped, nothing
//!   more buffered. It asks the controller to recover once (when it hears its switch).
//! * **Settled**: delivered or discarded its buffer as the controller's answer said; asks to
//!   rejoin as new processes from its next timer, backing off, until `Joined` answers.

use crate::time::{Instant, Timestamp};

/// A host's §5.2 lifecycle. See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// Not declared failed; `recover`: it should ask to recover once it is.
    Correct { recover: bool },
    /// Restarted with its state lost, not yet told it was declared; asked to recover.
    Restarted,
    /// Declared failed at `ts`; `asked`: its `RecoverRequest` went out.
    Failed { ts: Timestamp, asked: bool },
    /// Settled; asks to rejoin at `due`, then waits `wait` (0: the first request).
    Settled {
        ts: Timestamp,
        due: Instant,
        wait: u64,
    },
}

impl Lifecycle {
    /// Its failure timestamp, once declared (a restarted host's is not known yet: 0).
    pub(crate) fn own_failure(self) -> Option<Timestamp> {
        match self {
            Lifecycle::Correct { .. } => None,
            Lifecycle::Restarted => Some(Timestamp::new(0)),
            Lifecycle::Failed { ts, .. } | Lifecycle::Settled { ts, .. } => Some(ts),
        }
    }

    /// Frozen: declared failed, or restarted and about to be.
    pub(crate) fn failed(self) -> bool {
        !matches!(self, Lifecycle::Correct { .. })
    }

    /// Silent on the data network.
    pub(crate) fn silent(self) -> bool {
        self == Lifecycle::Restarted
    }

    pub(crate) fn settled(self) -> bool {
        matches!(self, Lifecycle::Settled { .. })
    }

    /// When it asks to rejoin next.
    pub(crate) fn rejoin_due(self) -> Option<Instant> {
        match self {
            Lifecycle::Settled { due, .. } => Some(due),
            _ => None,
        }
    }

    /// Declared failed at `ts`; `hears_switch`: its first-hop switch spoke in the last beacon
    /// interval (a false suspicion, or a partition elsewhere: it recovers at once). Returns
    /// `None` if it was declared already (nothing changes), else whether to ask the controller
    /// to recover now.
    pub(crate) fn declared(&mut self, ts: Timestamp, hears_switch: bool) -> Option<bool> {
        let (ask, asked) = match *self {
            Lifecycle::Correct { recover } => (recover || hears_switch, false),
            Lifecycle::Restarted => (false, true),
            Lifecycle::Failed { .. } | Lifecycle::Settled { .. } => return None,
        };
        *self = Lifecycle::Failed {
            ts,
            asked: asked || ask,
        };
        Some(ask)
    }

    /// Its link came back (or its driver said so): returns whether to ask the controller to
    /// recover now (declared and not asked yet); a host not declared asks once it is.
    pub(crate) fn recover(&mut self) -> bool {
        match self {
            Lifecycle::Correct { recover } => {
                *recover = true;
                false
            }
            Lifecycle::Failed { asked, .. } => !std::mem::replace(asked, true),
            Lifecycle::Restarted | Lifecycle::Settled { .. } => false,
        }
    }

    /// The controller's `Settle` answer, at `now`; `own`: its own failure timestamp as the
    /// answer lists it (a restarted host whose `Failed` was lost learns it here). Returns false
    /// if it did not wait for one. It asks to rejoin from its next timer, due at once.
    pub(crate) fn settle(&mut self, now: Instant, own: Option<Timestamp>) -> bool {
        let ts = match *self {
            Lifecycle::Failed { ts, asked: true } => ts,
            Lifecycle::Restarted => own.unwrap_or(Timestamp::new(0)),
            _ => return false,
        };
        *self = Lifecycle::Settled {
            ts,
            due: now,
            wait: 0,
        };
        true
    }

    /// Settled, it asks to rejoin at `now`: the next request waits `retry_ns`, doubling up to
    /// `retry_max_ns`. Returns false if not settled.
    pub(crate) fn rejoin_asked(&mut self, now: Instant, retry_ns: u64, retry_max_ns: u64) -> bool {
        let Lifecycle::Settled { due, wait, .. } = self else {
            return false;
        };
        let next = if *wait > 0 {
            (*wait * 2).min(retry_max_ns.max(*wait))
        } else {
            retry_ns.max(1)
        };
        *due = now + next;
        *wait = next;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u64) -> Timestamp {
        Timestamp::new(n)
    }

    #[test]
    fn a_correct_host_asks_to_recover_when_declared_only_if_it_should() {
        let mut l = Lifecycle::Correct { recover: false };
        assert_eq!(l.declared(t(5), false), Some(false));
        assert_eq!(
            l,
            Lifecycle::Failed {
                ts: t(5),
                asked: false
            }
        );
        assert_eq!(l.declared(t(9), true), None, "declared once");
        assert!(l.recover(), "asks when it hears its switch");
        assert!(!l.recover(), "once");
        assert_eq!(
            l,
            Lifecycle::Failed {
                ts: t(5),
                asked: true
            }
        );
        let mut l = Lifecycle::Correct { recover: false };
        assert!(!l.recover(), "not declared: nothing to ask yet");
        assert_eq!(l.declared(t(5), false), Some(true));
    }

    #[test]
    fn a_restarted_host_learns_its_failure_timestamp_from_the_answer() {
        let mut l = Lifecycle::Restarted;
        assert!(l.silent() && l.failed());
        assert!(l.settle(Instant(10), Some(t(7))));
        assert_eq!(l.own_failure(), Some(t(7)));
        assert_eq!(l.rejoin_due(), Some(Instant(10)));
        assert!(!l.settle(Instant(11), None), "settled once");
        let mut l = Lifecycle::Restarted;
        assert_eq!(l.declared(t(3), false), Some(false), "it asked already");
        assert_eq!(
            l,
            Lifecycle::Failed {
                ts: t(3),
                asked: true
            }
        );
    }

    #[test]
    fn rejoin_requests_back_off() {
        let mut l = Lifecycle::Failed {
            ts: t(1),
            asked: false,
        };
        assert!(!l.settle(Instant(0), None), "it never asked");
        l.recover();
        assert!(l.settle(Instant(0), None));
        let mut dues = Vec::new();
        for _ in 0..4 {
            let now = l.rejoin_due().unwrap();
            assert!(l.rejoin_asked(now, 10, 50));
            dues.push(l.rejoin_due().unwrap().0);
        }
        assert_eq!(dues, vec![10, 30, 70, 120]);
    }
}
