//! Optimistic delivery on 1Pipe (issue 39): PLATO's receiver pipeline
//! ([`crate::optimistic::Pipeline`]) over a local process's best-effort messages.
//!
//! 1Pipe's final order is the barrier's: a message is delivered when the barrier passes its
//! timestamp, in `(ts, src)` order (§4.1). That wait is the beacon interval's share plus the
//! clock skew. With [`HostConfig::optimistic`](crate::host::HostConfig::optimistic) set, a
//! message is also reported the moment it is whole ([`HostEvent::OptDeliver`]) when it came more
//! than Δ after the previous one; the barrier's delivery sequences it — [`HostEvent::Confirm`]
//! just before its [`HostEvent::Deliver`] — and a message delivered ahead of one that the barrier
//! puts first is revoked ([`HostEvent::Revoke`]).
//!
//! Reliable messages have a pipeline of their own per local process: the commit barrier is their
//! final order (each message it releases is confirmed just before its `Deliver`), and a message
//! §5.2 discards — from a failed process at or above its failure timestamp, or of a recalled
//! scattering — is revoked if it was delivered optimistically, and never comes again.
//!
//! What it is not: causal. An optimistic delivery is tentative; a process that sends because of
//! one may stamp its message below it (the barrier has not passed it yet).

use super::events::{Delivery, HostEvent};
use crate::failure::Mgmt;
use crate::ids::ProcId;
use crate::node::Output;
use crate::optimistic::{OptConfig, OptEvent, Pipeline};
use crate::reorder::OrderKey;
use crate::time::{Instant, Timestamp};
use crate::wire::Packet;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};

/// A message arrived and not yet confirmed: what its optimistic delivery reports.
#[derive(Clone, Debug)]
struct Arrived {
    payload: Bytes,
    arrived: Instant,
}

/// One local process's optimistic deliveries of one service.
#[derive(Debug)]
pub(super) struct OptState {
    /// The reliable service's (its final order is the commit barrier's).
    reliable: bool,
    pipeline: Pipeline<OrderKey>,
    /// Arrived and unconfirmed; looked up by key only (never iterated).
    arrived: HashMap<OrderKey, Arrived>,
}

impl OptState {
    /// An empty pipeline for the best-effort (`reliable` false) or the reliable service.
    pub(super) fn new(cfg: &OptConfig, reliable: bool) -> Box<OptState> {
        Box::new(OptState {
            reliable,
            pipeline: Pipeline::new(cfg.clone()),
            arrived: HashMap::new(),
        })
    }

    /// Messages arrived and neither confirmed nor discarded.
    pub(super) fn held(&self) -> usize {
        self.pipeline.arrived_len()
    }

    /// Δ now, ns.
    pub(super) fn delta_ns(&self) -> u64 {
        self.pipeline.delta_ns()
    }

    /// Message `key` to `dst` is whole and in the reorder buffer.
    pub(super) fn on_arrival(
        &mut self,
        now: Instant,
        dst: ProcId,
        key: OrderKey,
        payload: Bytes,
        out: &mut VecDeque<Output<Packet, HostEvent, Mgmt>>,
    ) {
        if self.pipeline.arrive_ordered(now, key) {
            self.arrived.insert(
                key,
                Arrived {
                    payload,
                    arrived: now,
                },
            );
        }
        self.report(dst, out);
    }

    /// The barrier delivers `key` to `dst` now: it is next in the order.
    pub(super) fn on_delivery(
        &mut self,
        now: Instant,
        dst: ProcId,
        d: &Delivery,
        out: &mut VecDeque<Output<Packet, HostEvent, Mgmt>>,
    ) {
        let key = OrderKey {
            ts: d.ts,
            src: d.src,
            psn: d.psn,
        };
        if !self.pipeline.sequence(now, key) {
            // The pipeline refused it only if its places known ahead are full, which cannot be:
            // every place is matched at once below. Deliver it plainly rather than stall.
            debug_assert!(false, "sequencing queue full");
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(v) = self.arrived.entry(key) {
            // Refused on arrival (the pipeline was full): it arrives now, as the next in order.
            v.insert(Arrived {
                payload: d.payload.clone(),
                arrived: d.arrived,
            });
            let taken = self.pipeline.arrive(now, key);
            debug_assert!(taken, "the next in order is always taken");
        }
        self.report(dst, out);
        debug_assert_eq!(self.pipeline.sequenced_len(), 0);
    }

    /// §5.2 discarded `key` (to `dst`): it will never be delivered; revoked if it was delivered
    /// optimistically.
    pub(super) fn on_discard(
        &mut self,
        now: Instant,
        dst: ProcId,
        key: OrderKey,
        out: &mut VecDeque<Output<Packet, HostEvent, Mgmt>>,
    ) {
        self.pipeline.remove(now, key);
        self.arrived.remove(&key);
        self.report(dst, out);
    }

    /// Turns the pipeline's hooks into host events.
    fn report(&mut self, dst: ProcId, out: &mut VecDeque<Output<Packet, HostEvent, Mgmt>>) {
        while let Some(e) = self.pipeline.poll() {
            let ev = match e {
                OptEvent::Deliver { key, usable_at } => {
                    let a = &self.arrived[&key];
                    let delivery = Delivery {
                        dst,
                        src: key.src,
                        ts: key.ts,
                        psn: key.psn,
                        payload: a.payload.clone(),
                        barrier: Timestamp::new(0),
                        reliable: self.reliable,
                        arrived: a.arrived,
                        now_ts: Timestamp::new(0),
                    };
                    HostEvent::OptDeliver {
                        delivery,
                        usable_at,
                    }
                }
                OptEvent::Revoke { key, rollback } => HostEvent::Revoke {
                    dst,
                    key,
                    reliable: self.reliable,
                    rollback,
                },
                OptEvent::Confirm { key } => {
                    self.arrived.remove(&key);
                    HostEvent::Confirm {
                        dst,
                        key,
                        reliable: self.reliable,
                    }
                }
            };
            out.push_back(Output::Event(ev));
        }
    }
}
