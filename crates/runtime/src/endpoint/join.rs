//! Joining: registering with the controller, binding, building the role and the shared state,
//! sealing the link when the cluster asks, and starting the I/O and control threads.

use super::control_thread::{control_loop, ControlLink};
use super::io_thread::{io_loop, CoreNode};
use super::*;

impl Endpoint {
    /// Joins the cluster whose controller listens at `controller` (Table 1 `onepipe_init`):
    /// registers, binds the UDP address the cluster file gives this process, waits until every
    /// member of the cluster has joined, and starts the I/O thread. See the module docs for an
    /// example.
    ///
    /// # Errors
    /// The controller cannot be reached or refuses (an id taken, none free), the socket cannot
    /// be bound, or the cluster is not complete within [`JoinOptions::join_timeout`].
    pub fn join(controller: SocketAddr, opts: JoinOptions) -> Result<Endpoint, JoinError> {
        Endpoint::join_any(&[controller], opts)
    }

    /// Joins the cluster whose controllers (a leader and standbys, docs/CONTROLLER-HA.md)
    /// listen at `controllers`: like [`Endpoint::join`], with whichever leads. When the control
    /// connection is lost later, the control thread re-registers with whichever leads then (same
    /// process id, same UDP address: the data path never stops) and re-sends its §5.2 reports.
    ///
    /// # Errors
    /// As [`Endpoint::join`]; `controllers` must not be empty.
    pub fn join_any(controllers: &[SocketAddr], opts: JoinOptions) -> Result<Endpoint, JoinError> {
        let (mut control, member, bind) = ControlClient::join_leader(
            controllers,
            JoinAs::Process(opts.proc),
            opts.join_timeout,
            opts.credentials.as_ref(),
        )?;
        let Member::Process(id) = member else {
            return Err(JoinError::Protocol(format!("joined as {member}")));
        };
        let socket = bind_udp(bind, &opts.driver)?;
        let addr = socket.local_addr()?;
        let cluster = control.bound_and_wait(addr, opts.join_timeout, &AtomicBool::new(false))?;
        // A free slot of a running cluster: this process starts as a restarted one does and
        // rejoins as a new process (§4.2 addition of links, §5.2 rejoin).
        let joins_running = control.joins_running_cluster() && !opts.restarted;
        let restarted = opts.restarted || joins_running;
        let spec = cluster
            .process(id)
            .ok_or_else(|| JoinError::Protocol(format!("p{id} is not in the cluster")))?;
        let uplink = cluster
            .aggregator(&spec.aggregator)
            .ok_or_else(|| JoinError::Protocol(format!("no aggregator {}", spec.aggregator)))?
            .addr;
        let clock = Clock::of(cluster.clock);
        let me = ProcId(id);
        // Datagrams as long as the path to the aggregator carries (or the file says).
        let driver_cfg = cluster
            .driver_config(&opts.driver, &[uplink])
            .map_err(JoinError::Transport)?;
        let role = Role::of(&cluster, &opts, me, restarted, &driver_cfg, clock);
        let shared = Arc::new(Shared::new(me, role, clock, &opts, &cluster, restarted));
        let ports = PortTable::new().with_link(UPLINK, uplink);
        let mut driver = Driver::new(
            {
                // The role accepts no more best-effort messages than the queue holds.
                shared.grant_room(true);
                CoreNode::new(shared.clone())
            },
            socket,
            ports,
            clock,
            driver_cfg,
        )?;
        let keys = seal(
            &cluster,
            id,
            &spec.aggregator,
            &mut control,
            &mut driver,
            clock,
        )?;
        let _ = shared.waker.set(driver.waker());
        let _ = shared.me.set(Arc::downgrade(&shared));
        debug!(proc = id, %addr, "joined");
        let link = ControlLink {
            controllers: controllers.to_vec(),
            addr,
            history: VecDeque::new(),
            tls: opts.credentials.clone(),
            keys,
            telemetry: opts.telemetry.clone(),
        };
        let (io, control) = start_threads(id, driver, control, link, &shared)?;
        let endpoint = Endpoint {
            proc: me,
            cluster: Arc::new(cluster),
            shared,
            io: Some(io),
            control: Some(control),
        };
        if !opts.restarted {
            endpoint.wait_until_member(me, joins_running, opts.join_timeout)?;
        }
        Ok(endpoint)
    }

    /// Returns once it is a member, in the controller's view (a process that joins a running
    /// cluster: once it rejoined under its new id).
    fn wait_until_member(
        &self,
        me: ProcId,
        joins_running: bool,
        timeout: Duration,
    ) -> Result<(), JoinError> {
        let deadline = deadline(timeout);
        loop {
            let p = self.proc();
            if (p != me || !joins_running) && self.view().contains(p) {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(JoinError::Timeout);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Role {
    /// The role process `me` runs in `cluster`: the 1Pipe host (frozen at the start when it
    /// was `restarted`, §5.2), or the unordered baseline when ordering is off.
    pub(super) fn of(
        cluster: &Cluster,
        opts: &JoinOptions,
        me: ProcId,
        restarted: bool,
        driver_cfg: &DriverConfig,
        clock: Clock,
    ) -> Role {
        let id = me.0;
        let roles = cluster.roles();
        // Senders up to `proc_ids_max`: processes that rejoin get fresh ids (§5.2).
        let ids = cluster.proc_ids_max();
        let mut host_cfg = roles.host_config(NodeId(id), vec![me], ids, driver_cfg);
        // §5.2 Detect: a silent aggregator is reported as this process's input link.
        host_cfg.input_link = cluster.graph().ok().and_then(|t| t.downlink(id));
        // §5.2: a failure round completes here once the application's callbacks are done
        // (`Held`), or at once (`Automatic`).
        host_cfg.callbacks_held = opts.failure_callbacks == FailureCallbacks::Held;
        host_cfg.optimistic = opts.optimistic.clone();
        if !cluster.ordered {
            Role::Unordered(Box::new(UnorderedHost::new(
                me,
                cluster.procs(),
                host_cfg.mtu_payload,
                clock.now(),
            )))
        } else if restarted {
            Role::Ordered(Box::new(Host::restarted(host_cfg, clock.now())))
        } else {
            Role::Ordered(Box::new(Host::new(host_cfg, clock.now())))
        }
    }
}

impl Shared {
    /// What the threads of process `me` share, its queues sized as `opts` says.
    pub(super) fn new(
        me: ProcId,
        role: Role,
        clock: Clock,
        opts: &JoinOptions,
        cluster: &Cluster,
        restarted: bool,
    ) -> Shared {
        Shared {
            proc: me,
            current: AtomicU32::new(me.0),
            core: Mutex::new(Core {
                role,
                extra: VecDeque::new(),
                scratch: Vec::new(),
            }),
            dirty: AtomicBool::new(false),
            clock,
            waker: OnceLock::new(),
            me: OnceLock::new(),
            held_events: Mutex::new(VecDeque::new()),
            be: BoundedQueue::new(opts.recv_queue_len_max.max(1)),
            rel: BoundedQueue::new(opts.recv_queue_len_max.max(1)),
            plain: BoundedQueue::new(opts.recv_queue_len_max.max(1)),
            opt: BoundedQueue::new(
                opts.recv_queue_len_max
                    .max(1)
                    .saturating_mul(optimistic::HOOKS_PER_MESSAGE),
            ),
            optimistic: opts.optimistic.is_some() && cluster.ordered,
            events: BoundedQueue::new(opts.event_queue_len_max.max(1)),
            stop: AtomicBool::new(false),
            rel_paused: AtomicBool::new(false),
            be_starved: AtomicBool::new(false),
            plain_starved: AtomicBool::new(false),
            report_reliable_sent: opts.report_reliable_sent,
            callbacks_held: opts.failure_callbacks == FailureCallbacks::Held,
            driver_stats: Mutex::new(DriverStats::default()),
            events_dropped: AtomicU64::new(0),
            published: [AtomicU64::new(NO_BARRIER), AtomicU64::new(NO_BARRIER)],
            control_out: Mutex::new(VecDeque::new()),
            control_dropped: AtomicU64::new(0),
            room: Mutex::new(0),
            room_ready: Condvar::new(),
            room_waiters: AtomicUsize::new(0),
            activity: AtomicU64::new(0),
            activity_lock: Mutex::new(()),
            activity_ready: Condvar::new(),
            activity_waiters: AtomicUsize::new(0),
            members: Mutex::new(Membership {
                // Every process has joined when a cluster of all its processes is ready; the
                // controller's first view says who did (a process that joins a running
                // cluster learns it from there).
                view: match restarted || cluster.start_with.is_some() {
                    true => View::default(),
                    false => View {
                        epoch: 0,
                        members: (0..cluster.procs()).map(ProcId).collect(),
                        joined: (0..cluster.procs()).map(ProcId).collect(),
                        left: Vec::new(),
                        failed: Vec::new(),
                    },
                },
                ever: match restarted || cluster.start_with.is_some() {
                    true => Default::default(),
                    false => (0..cluster.procs()).collect(),
                },
                ..Membership::default()
            }),
            leave_last: Mutex::new(None),
            vanish: AtomicBool::new(false),
            untaken: Mutex::new(Vec::new()),
            callback_timeout: Duration::from_nanos(cluster.callback_timeout_ns),
        }
    }
}

/// Seals datagrams with the keys of this process's one link, to aggregator `aggregator`
/// (docs/SECURITY.md), when the cluster asks: the keys `control` has so far go to `driver`
/// now; the inbox returned takes the later ones.
fn seal(
    cluster: &Cluster,
    id: u32,
    aggregator: &str,
    control: &mut ControlClient,
    driver: &mut Driver<CoreNode>,
    clock: Clock,
) -> Result<Option<Arc<KeyInbox>>, JoinError> {
    let mode = cluster.auth_mode();
    if !mode.seals() {
        return Ok(None);
    }
    let inbox = KeyInbox::new();
    let me = member_ix(cluster, &Member::Process(id));
    let agg = member_ix(cluster, &Member::Aggregator(aggregator.to_string()));
    let (Some(me), Some(peer)) = (me, agg) else {
        return Err(JoinError::Protocol("no member number".into()));
    };
    let links = [LinkPorts {
        peer,
        out: UPLINK,
        input: UPLINK,
    }];
    let mut auth = LinkAuth::new(mode, me, &links, inbox.clone());
    for update in control.take_keys() {
        auth.apply(clock.now(), update);
    }
    driver.set_auth(auth)?;
    Ok(Some(inbox))
}

/// Starts process `id`'s I/O thread, which drives `driver`, and its control thread, which
/// keeps `control`.
fn start_threads(
    id: u32,
    driver: Driver<CoreNode>,
    control: ControlClient,
    link: ControlLink,
    shared: &Arc<Shared>,
) -> io::Result<(JoinHandle<io::Result<()>>, JoinHandle<()>)> {
    let io = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("onepipe-io-p{id}"))
            .spawn(move || io_loop(driver, shared))?
    };
    let control = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("onepipe-ctl-p{id}"))
            .spawn(move || control_loop(control, link, shared))?
    };
    Ok((io, control))
}
