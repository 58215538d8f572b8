//! The I/O thread (§6.1): the role as the driver sees it ([`CoreNode`]), each turn's
//! deliveries into the application's queues, room for the role, and the published barriers.

use super::*;
use onepipe_proto::drive;

impl Shared {
    /// The I/O thread took a turn: senders waiting for room try again once the send buffer is
    /// at most half full (acknowledgements came in: room for a burst of sends, not one send
    /// per turn), or the endpoint stops.
    fn room_turned(&self) {
        if self.room_waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        let room = self.stop.load(Ordering::SeqCst)
            || match &self.lock().role {
                Role::Ordered(h) => h.send_buffer_use() <= ROOM_WAKE_USE,
                Role::Unordered(_) => true,
            };
        if room {
            *self.room.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            self.room_ready.notify_all();
        }
    }

    /// Publishes the role's barriers. Called by the I/O thread right after a drain: deliveries
    /// come only from the I/O thread's own mutations, so everything below these barriers is in
    /// the queues. Not the commit barrier while reliable delivery is paused or overflowing: the
    /// role's commit barrier then runs ahead of what it has delivered.
    fn publish(&self, overflow_empty: bool) {
        let (be, commit) = match &self.lock().role {
            Role::Ordered(h) => (h.released(), h.commit_barrier()),
            Role::Unordered(_) => (None, None),
        };
        let mut moved = false;
        if let Some(b) = be {
            let raw = b.timestamp().raw();
            moved |= self.published[0].swap(raw, Ordering::AcqRel) != raw;
        }
        let reliable_flowing = overflow_empty && !self.rel_paused.load(Ordering::Relaxed);
        if let (Some(c), true) = (commit, reliable_flowing) {
            let raw = c.timestamp().raw();
            moved |= self.published[1].swap(raw, Ordering::AcqRel) != raw;
        }
        if moved {
            self.bump_activity();
        }
    }

    /// The callback handle for failure round `round`: one completion per round, shared by its
    /// notifications. `pending` keeps a clone until the turn ends, so the application cannot
    /// complete the round before it has seen every notification of it.
    fn callback(&self, round: u32, pending: &mut Pending) -> Callback {
        if let Some(c) = pending.callbacks.iter().find(|c| c.round() == Some(round)) {
            return c.clone();
        }
        let inner = Arc::new(CallbackInner {
            round,
            shared: self.me.get().cloned().unwrap_or_default(),
            taken: AtomicBool::new(false),
            done: AtomicBool::new(false),
            queued: std::time::Instant::now(),
        });
        self.untaken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(&inner));
        let c = Callback(Some(inner));
        pending.callbacks.push(c.clone());
        c
    }

    /// What the I/O thread does with each event of the role. Deliveries wait in `pending`
    /// for [`Shared::flush_deliveries`] at the end of the turn (one lock and one wake-up per
    /// batch instead of per message).
    fn on_event(&self, e: HostEvent, pending: &mut Pending) {
        match e {
            HostEvent::Deliver(d) => {
                let m = Message::of(d, true);
                if m.reliable {
                    pending.rel.push_back(m);
                } else {
                    pending.be.push_back(m);
                }
            }
            // Outside both orders, in a queue of its own: the application has it at the end
            // of this turn, whatever the barriers.
            HostEvent::DeliverPlain(d) => pending.plain.push_back(Message::of(d, false)),
            HostEvent::SendFailed {
                dst, ts, reason, ..
            } => self.push_event(Event::SendFailed { dst, ts, reason }),
            HostEvent::ProcFailed { proc, ts, round } => {
                let callback = match self.callbacks_held {
                    true => self.callback(round, pending),
                    false => Callback::default(),
                };
                let m = self.lock_members();
                // A free slot taken out when the cluster started was never a member: no news
                // (its callback, if held, completes with this turn).
                if !m.ever.contains(&proc.0) {
                    return;
                }
                let reason = match m.left.contains(&proc.0) {
                    true => FailReason::Left,
                    false => FailReason::Failed,
                };
                drop(m);
                self.push_event(Event::ProcessFailed {
                    proc,
                    ts,
                    reason,
                    callback,
                });
            }
            HostEvent::Recalled { ts, .. } => self.push_event(Event::Recalled { ts }),
            HostEvent::ReliableAborted { handle, .. } => self.push_event(Event::ReliableAborted {
                handle: SendHandle(handle),
            }),
            // Optimistic delivery's hooks ([`JoinOptions::optimistic`]).
            e @ (HostEvent::OptDeliver { .. }
            | HostEvent::Revoke { .. }
            | HostEvent::Confirm { .. }) => {
                debug_assert!(self.optimistic, "optimistic delivery is off");
                if let Ok(o) = Optimistic::of(e, self.clock.now()) {
                    pending.opt.push_back(o);
                }
            }
            HostEvent::ReliableSent { handle, ts, .. } => {
                if self.report_reliable_sent {
                    self.push_event(Event::ReliableSent {
                        handle: SendHandle(handle),
                        ts,
                    });
                }
            }
        }
    }

    /// Moves the turn's deliveries into the application's queues. The role never delivers
    /// more best-effort messages than the queue has room for ([`Shared::grant_room`]: it
    /// refuses and NAKs arrivals beyond that itself, §4.1). Reliable ones the queue cannot
    /// take stay in `pending.rel` and reliable delivery pauses (the role holds the rest back,
    /// §6.1) until the application makes room.
    fn flush_deliveries(&self, pending: &mut Pending) {
        let any = !(pending.be.is_empty()
            && pending.plain.is_empty()
            && pending.rel.is_empty()
            && pending.opt.is_empty());
        // Hooks first: a confirm is in its queue before the message's final delivery is in
        // the best-effort inbox (unless the application let the hooks' queue fill).
        self.opt.push_many(&mut pending.opt);
        self.be.push_many(&mut pending.be);
        debug_assert!(pending.be.is_empty(), "the role delivered beyond its room");
        self.plain.push_many(&mut pending.plain);
        debug_assert!(
            pending.plain.is_empty(),
            "the role delivered beyond its room"
        );
        self.rel.push_many(&mut pending.rel);
        if !pending.rel.is_empty() && !self.rel_paused.load(Ordering::Relaxed) {
            self.set_reliable_paused(true);
        }
        if any {
            self.bump_activity();
        }
    }

    /// Tells the role how many best-effort and plain messages the application's queues have
    /// room for (`Host::set_room`, `Host::set_plain_room`), once what it was given last is
    /// half used and the application has read since: the role accepts no more than that, and
    /// refuses what arrives beyond it with a `BufferFull` NAK before acknowledging it. Called
    /// by the I/O thread with no deliveries pending. Returns whether the role has new outputs.
    pub(super) fn grant_room(&self, force: bool) -> bool {
        let now = self.clock.now();
        let me = self.current();
        let mut core = self.lock();
        let mut granted = false;
        for (plain, queue, starved) in [
            (false, &self.be, &self.be_starved),
            (true, &self.plain, &self.plain_starved),
        ] {
            let len_max = queue.len_max();
            let mut free = len_max.saturating_sub(queue.len());
            if self.optimistic && !plain {
                // Every best-effort message admitted may queue a few hooks.
                let opt_free = self.opt.len_max().saturating_sub(self.opt.len());
                free = free.min(opt_free / optimistic::HOOKS_PER_MESSAGE);
            }
            let room = core.role.room(me, plain);
            let low = room <= len_max / 2;
            starved.store(low, Ordering::Relaxed);
            if !(force || low && free > room) {
                continue;
            }
            core.role.set_room(now, me, plain, free);
            starved.store(free <= len_max / 2, Ordering::Relaxed);
            granted = true;
        }
        if granted {
            self.dirty.store(true, Ordering::SeqCst);
        }
        granted
    }

    fn set_reliable_paused(&self, paused: bool) {
        self.rel_paused.store(paused, Ordering::Relaxed);
        let now = self.clock.now();
        let me = self.current();
        let mut core = self.lock();
        if let Role::Ordered(h) = &mut core.role {
            h.set_paused(now, me, paused);
        }
        self.dirty.store(true, Ordering::SeqCst);
    }
}

/// Deliveries of the current turn, waiting for [`Shared::flush_deliveries`]; reliable ones
/// stay while the application's queue is full (delivery is paused then).
#[derive(Default)]
struct Pending {
    be: VecDeque<Message>,
    rel: VecDeque<Message>,
    plain: VecDeque<Message>,
    /// Optimistic hooks; they stay while the application's queue is full.
    opt: VecDeque<Optimistic>,
    /// Callback handles made this turn (see [`Shared::callback`]), dropped at its end.
    callbacks: Vec<Callback>,
}

/// The role as the driver sees it. Each input takes the lock once: the role handles it, and
/// its outputs and timer are taken out under the same lock, for the driver to drain without
/// locking again. Outputs that other threads cause (sends, control messages, NAKs) are taken
/// when [`Shared::dirty`] says there are some.
pub(super) struct CoreNode {
    shared: Arc<Shared>,
    taken: Taken,
}

/// What [`CoreNode`] took out of the role under the lock: its outputs, and its timer.
#[derive(Default)]
struct Taken {
    outputs: VecDeque<Output<Packet, HostEvent>>,
    /// Management messages, for the control thread ([`CoreNode::forward_mgmt`]).
    mgmt: Vec<(MgmtDest, Mgmt)>,
    timeout: Option<Instant>,
}

impl Taken {
    /// Takes the role's outputs and reads its timer (`core` is the locked core); the role has
    /// nothing left waiting, so `dirty` is cleared.
    fn take(&mut self, core: &mut Core, dirty: &AtomicBool) {
        let Core { role, extra, .. } = core;
        match role {
            Role::Ordered(h) => {
                let (outputs, mgmt) = (&mut self.outputs, &mut self.mgmt);
                let turn = drive::turn(&mut **h, None, |o| match o {
                    Output::Send { port, packet } => {
                        outputs.push_back(Output::Send { port, packet })
                    }
                    Output::Event(e) => outputs.push_back(Output::Event(e)),
                    Output::Mgmt { to, msg } => mgmt.push((to, msg)),
                });
                self.timeout = turn.timeout;
            }
            Role::Unordered(h) => {
                let outputs = &mut self.outputs;
                self.timeout = drive::turn(&mut **h, None, |o| outputs.push_back(o)).timeout;
            }
        }
        self.outputs.extend(extra.drain(..));
        dirty.store(false, Ordering::SeqCst);
    }
}

impl CoreNode {
    pub(super) fn new(shared: Arc<Shared>) -> CoreNode {
        let mut taken = Taken::default();
        taken.take(&mut shared.lock(), &shared.dirty);
        let mut node = CoreNode { shared, taken };
        node.forward_mgmt();
        node
    }

    /// Hands the role's management messages to the control thread, in the role's order (the
    /// core's lock is not held).
    fn forward_mgmt(&mut self) {
        for (to, msg) in self.taken.mgmt.drain(..) {
            self.shared.send_mgmt(to, msg);
        }
    }
}

impl Node for CoreNode {
    type Packet = Packet;
    type Event = HostEvent;
    type Mgmt = std::convert::Infallible;

    fn handle(&mut self, now: Instant, input: Input<Packet>) {
        let mut core = self.shared.lock();
        match &mut core.role {
            Role::Ordered(h) => h.handle(now, input.widen()),
            Role::Unordered(h) => h.handle(now, input),
        }
        self.taken.take(&mut core, &self.shared.dirty);
        drop(core);
        if !self.taken.mgmt.is_empty() {
            self.forward_mgmt();
        }
    }

    fn poll_output(&mut self) -> Option<Output<Packet, HostEvent>> {
        if self.taken.outputs.is_empty() && self.shared.dirty.load(Ordering::SeqCst) {
            self.taken.take(&mut self.shared.lock(), &self.shared.dirty);
            if !self.taken.mgmt.is_empty() {
                self.forward_mgmt();
            }
        }
        self.taken.outputs.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.taken.timeout
    }
}

/// The I/O thread: lib1pipe's polling thread (§6.1).
pub(super) fn io_loop(mut driver: Driver<CoreNode>, shared: Arc<Shared>) -> io::Result<()> {
    let mut pending = Pending::default();
    let mut last_stats = std::time::Instant::now();
    let result = loop {
        if shared.stop.load(Ordering::SeqCst) {
            break Ok(());
        }
        let mut sink = |e| shared.on_event(e, &mut pending);
        let more = match driver.turn_once(&mut sink) {
            Ok(more) => more,
            Err(e) => break Err(e),
        };
        // Drain what application threads queued since the last turn (sends, NAKs).
        driver.with_node(|_, _| (), &mut sink);
        // The turn's deliveries go to the application's queues in one batch — before the
        // barriers are published, and before the loop waits.
        shared.flush_deliveries(&mut pending);
        // Best-effort room for the role, once the application has read.
        if shared.grant_room(false) {
            driver.with_node(|_, _| (), &mut |e| shared.on_event(e, &mut pending));
            shared.flush_deliveries(&mut pending);
        }
        // Reliable delivery resumes once the application has made room.
        if pending.rel.is_empty()
            && shared.rel_paused.load(Ordering::Relaxed)
            && shared.rel.len() <= shared.rel.len_max() / 2
        {
            shared.set_reliable_paused(false);
            driver.with_node(|_, _| (), &mut |e| shared.on_event(e, &mut pending));
            shared.flush_deliveries(&mut pending);
        }
        shared.publish(pending.rel.is_empty());
        shared.room_turned();
        // The turn's failure notifications are all queued: the application's callbacks may
        // complete their rounds now (dropped outside every lock).
        pending.callbacks.clear();
        shared.release_held_events();
        if last_stats.elapsed() >= Duration::from_millis(20) {
            last_stats = std::time::Instant::now();
            *shared
                .driver_stats
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = driver.stats();
        }
        if !more {
            if let Err(e) = driver.wait_for_work(Duration::from_millis(50)) {
                break Err(e);
            }
        }
    };
    let _ = driver.flush();
    *shared
        .driver_stats
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = driver.stats();
    // Wake whoever waits: the queues say Closed once drained, and senders waiting for room
    // find the endpoint closed.
    shared.stop.store(true, Ordering::SeqCst);
    shared.room_turned();
    shared.bump_activity();
    shared.be.close();
    shared.rel.close();
    shared.plain.close();
    shared.opt.close();
    shared.events.close();
    if let Err(e) = &result {
        error!(proc = shared.proc.0, "I/O thread stopped: {e}");
    }
    result
}
