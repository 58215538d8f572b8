//! The control protocol between the controller and the members of a cluster (aggregators and
//! endpoints): registration, addresses, health. One TCP connection per member, one JSON object
//! per line.
//!
//! ```text
//! member                                   controller
//!   Join { member }                 ─────▶   assigns a process id if asked, checks the name
//!                                   ◀─────   Welcome { member, bind }   (the address to bind)
//!   Bound { addr }                  ─────▶   (the address actually bound)
//!                                   ◀─────   Ready { cluster }          once every member is bound:
//!                                            the cluster with every address filled in
//!   Health { counters, metrics }    ─────▶   kept for `Status` (every ~1 s; `metrics`: the
//!                                            member's `GET /metrics` address, if any)
//!                                   ◀─────   Down { member, reason }    a member left or was lost
//!   Leave                           ─────▶
//! ```
//!
//! Anyone may also send `Status` and get `Status { members, malformed }` back (what `onepipe
//! up` and the tests read). A line that is not a message is counted and answered with
//! `Error`; the connection stays up. A line longer than [`LINE_LEN_MAX`] closes it.
//!
//! Reliable failure handling (§5.2) rides on the same connections, as `Ctrl` lines carrying
//! [`WireCtrl`] (`onepipe_proto::failure::CtrlMsg`):
//!
//! ```text
//! aggregator / endpoint                    controller
//!   Ctrl { to: None, LinkDown }     ─────▶   Detect (an input fell silent; its last commit)
//!                                   ◀─────   Declared { round, failed }   to every member
//!                                   ◀─────   Ctrl { Failure }             to every correct process
//!   Ctrl { to: Some(h), Recall }    ─────▶   forwarded to process h, which answers
//!   Ctrl { to: Some(h), RecallAck } ─────▶   (forwarded back)
//!   Ctrl { to: None, Completed }    ─────▶
//!                                   ◀─────   Ctrl { Resume }              to every correct process
//!                                            and every aggregator, once all completed
//! ```
//!
//! A `Ctrl` line's message is the binary encoding of `onepipe_proto::failure::codec` (the one
//! the controller store logs) as a string of lowercase hex,
//! `{"type":"ctrl","to":null,"msg":"01…"}`; a line whose message is not exactly one well-formed
//! encoding is not a control message.
//!
//! With `forward_after > 0` in the cluster file, §5.2 controller forwarding rides here too: a
//! process whose reliable message went unacknowledged that many retransmissions sends
//! `Relay { Forward }` ([`WireRelay`]: a `onepipe_proto::failure::RelayMsg` in the same
//! binary encoding, in hex, each packet in it its own wire encoding), the controller relays it
//! to the receiving process, whose ACKs come back the same way. Receiver recovery's relays
//! (`Failed`, `Recalled`, `RecoverRequest`, `Settle`, `Rejoin`, `Admit`, `Admitted`, `Joined`,
//! `PeerJoined`) are `Relay` lines too. A relay whose bytes do not decode is refused as a bad
//! relay.
//!
//! A `Ctrl` line from a member that could not have sent it (a report about another member's
//! input, a completion in another process's name) is counted as malformed and answered with
//! `Error`.

use crate::auth::{Epoch, KeyUpdate, LinkKey};
use crate::cluster::Cluster;
use crate::failure::{WireCtrl, WireRelay};
use crate::tls::{Channel, ChannelReader, ChannelWriter, Credentials};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The longest control line accepted, in bytes (a `Ready` for a few thousand members fits).
pub const LINE_LEN_MAX: usize = 8 << 20;

/// A member of a cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Member {
    /// An aggregator, by name.
    Aggregator(String),
    /// A process, by id.
    Process(u32),
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Member::Aggregator(name) => f.write_str(name),
            Member::Process(p) => write!(f, "p{p}"),
        }
    }
}

/// What a member asks to join as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinAs {
    /// The aggregator of that name.
    Aggregator(String),
    /// A process: that id, or (`None`) the lowest id nobody has taken.
    Process(Option<u32>),
}

/// A message to the controller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToController {
    /// Register.
    Join {
        /// As whom.
        member: JoinAs,
    },
    /// The UDP address the member bound, after `Welcome`.
    Bound {
        /// The address.
        addr: SocketAddr,
    },
    /// Counters, now and then: kept for `Status`.
    Health {
        /// Named counters.
        counters: BTreeMap<String, u64>,
        /// The member's management HTTP endpoint (`GET /metrics`), if it serves one. Absent
        /// from the line when `None`, and optional when read: members that do not say it are
        /// still understood.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metrics: Option<SocketAddr>,
    },
    /// The member is leaving on purpose. A process that flushed its reliable sends first
    /// gives `last`, a timestamp above everything it sent: the controller takes it out at
    /// once (§5.2 with `CtrlMsg::Departed`), without waiting for its link to time out.
    Leave {
        /// Its clock when it left (ns), once every reliable message it sent was acknowledged.
        #[serde(default)]
        last: Option<u64>,
    },
    /// Asks for the members' status.
    Status,
    /// Registers again after the control connection was lost (a controller failover): the
    /// same member, already bound to `addr`, whose data path kept running. Answered with
    /// `Welcome { member, bind: addr }`, or `Error` (not in the file, left, declared failed).
    Rejoin {
        /// Who.
        member: Member,
        /// The UDP address it is bound to.
        addr: SocketAddr,
    },
    /// A §5.2 control message ([`crate::failure`]): to the controller (`to: None`: a Detect
    /// report or a host's completion), or for the controller to forward to graph node `to` (a
    /// host's recall and its acknowledgement).
    Ctrl {
        /// The addressee, if not the controller.
        to: Option<u32>,
        /// The message.
        msg: WireCtrl,
    },
    /// §5.2 controller forwarding: packets the process's data path could not deliver, for the
    /// controller to relay to the receiver (or the receiver's ACKs back).
    Relay {
        /// The relay.
        msg: WireRelay,
    },
    /// The member's data path holds `epoch`'s keys (after `Keys` with `activate: false`).
    KeysInstalled {
        /// The epoch.
        epoch: Epoch,
    },
}

/// A message from the controller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromController {
    /// Registered as `member`: bind `bind` (port 0: any) and say `Bound`.
    Welcome {
        /// Who the member is now.
        member: Member,
        /// The address to bind, from the cluster file.
        bind: SocketAddr,
    },
    /// Every member is bound: the cluster with every member's actual address.
    Ready {
        /// The cluster.
        cluster: Box<Cluster>,
        /// This process joins a cluster that is already running, in a free slot: it starts
        /// as a restarted process does and rejoins as a new one (§5.2; `JoinOptions::restarted`).
        #[serde(default)]
        rejoin: bool,
    },
    /// The cluster is not ready yet: how many members have bound, of how many it starts with
    /// (to every bound member, each time one binds before the cluster is ready).
    Waiting {
        /// Processes bound.
        processes: u32,
        /// Processes the cluster starts with (`start_with`, or all).
        of_processes: u32,
        /// Aggregators bound.
        aggregators: u32,
        /// Aggregators of the cluster.
        of_aggregators: u32,
    },
    /// Process `member` is reached at `addr` from now on (it joined the running cluster): to
    /// the aggregators.
    Address {
        /// The process.
        member: Member,
        /// Its UDP address.
        addr: SocketAddr,
    },
    /// A member went away.
    Down {
        /// Who.
        member: Member,
        /// `left` (said `Leave`) or `lost` (its connection closed without it).
        reason: String,
    },
    /// The members' status.
    Status {
        /// One entry per member of the cluster file.
        members: Vec<MemberStatus>,
        /// Control lines the controller could not read, since it started.
        malformed: u64,
        /// The controller's own management HTTP endpoint, if it serves one (absent from the
        /// line when `None`, and optional when read).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metrics: Option<SocketAddr>,
    },
    /// A §5.2 control message for this member ([`crate::failure`]): Failure, Recall,
    /// RecallAck or Resume.
    Ctrl {
        /// The message.
        msg: WireCtrl,
    },
    /// §5.2 controller forwarding: packets relayed from another process (data, or the ACKs
    /// for data this process forwarded).
    Relay {
        /// The relay.
        msg: WireRelay,
    },
    /// §5.2 rejoin: process `host` came back as the new processes `procs` (to every member:
    /// aggregators route to them as to `host`, processes may address them).
    Joined {
        /// The old process id (its host slot).
        host: u32,
        /// Its new process ids.
        procs: Vec<u32>,
    },
    /// The group's membership view (to every process, when it changes, and once when the
    /// cluster is ready): the live processes, and what changed since the view before.
    View {
        /// Counts membership changes: every process that joined, rejoined, left or failed
        /// advances it by one.
        epoch: u64,
        /// The live processes, in id order.
        members: Vec<u32>,
        /// Processes new in this view.
        joined: Vec<u32>,
        /// Processes that left on purpose.
        left: Vec<u32>,
        /// Processes declared failed.
        failed: Vec<u32>,
    },
    /// The controller declared processes failed (§5.2 Determine), sent to every member: the
    /// survivors learn it again through `Failure`; a declared process that is still running
    /// (cut off from the others) learns of its own failure (§5.2 "the controller notifies
    /// process of its own failure").
    Declared {
        /// The round.
        round: u32,
        /// (process, failure timestamp in ns).
        failed: Vec<(u32, u64)>,
    },
    /// A request was refused or could not be read.
    Error {
        /// Why.
        message: String,
    },
    /// This controller is a standby (it does not lead): it closes the connection after this
    /// line; ask another controller of the list.
    Standby {
        /// The leader's name, if the store knows it.
        leader: Option<String>,
    },
    /// The keys of `epoch` of this member's links, both directions (docs/SECURITY.md): accept
    /// them at once; send with them at once if `activate`, else answer `KeysInstalled` and
    /// wait for `KeysActivate`.
    Keys {
        /// The epoch.
        epoch: Epoch,
        /// The keys.
        keys: Vec<LinkKey>,
        /// Send with them at once (a member's first keys).
        activate: bool,
    },
    /// Send with `epoch`'s keys from now on; accept the epoch before it for `grace_ns` more.
    KeysActivate {
        /// The epoch.
        epoch: Epoch,
        /// How long the previous epoch stays accepted.
        grace_ns: u64,
    },
}

impl FromController {
    /// The data-path key update this message carries, if it is one.
    pub fn key_update(&self) -> Option<KeyUpdate> {
        match self {
            FromController::Keys {
                epoch,
                keys,
                activate,
            } => Some(KeyUpdate::Install {
                epoch: *epoch,
                keys: keys.clone(),
                activate: *activate,
            }),
            FromController::KeysActivate { epoch, grace_ns } => Some(KeyUpdate::Activate {
                epoch: *epoch,
                grace_ns: *grace_ns,
            }),
            _ => None,
        }
    }
}

/// One member as the controller sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    /// Who.
    pub member: Member,
    /// `waiting` (not joined), `joined`, `bound`, `left` or `lost`.
    pub state: String,
    /// The UDP address it bound, once bound.
    pub addr: Option<SocketAddr>,
    /// Milliseconds since its last message, once joined.
    pub last_seen_ms: Option<u64>,
    /// Its last `Health` counters.
    pub counters: BTreeMap<String, u64>,
    /// Its management HTTP endpoint, as its last `Health` said (`None`: it serves none, or
    /// has not said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<SocketAddr>,
}

/// Writes one message as a line.
///
/// # Errors
/// The write failed.
pub fn write_line<T: Serialize>(w: &mut impl Write, msg: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// Reads one line into `buf` (cleared first), at most [`LINE_LEN_MAX`] bytes. Returns `false`
/// at end of stream.
///
/// # Errors
/// Read errors (including timeouts, `WouldBlock`/`TimedOut`), and `InvalidData` for a line too
/// long.
pub fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    loop {
        let available = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(!buf.is_empty());
        }
        let (take, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        buf.extend_from_slice(&available[..take]);
        r.consume(take);
        if buf.len() > LINE_LEN_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "control line too long",
            ));
        }
        if done {
            return Ok(true);
        }
    }
}

/// Parses one line as a message.
///
/// # Errors
/// The line is not one (a description for an `Error` reply).
pub fn parse_line<T: for<'de> Deserialize<'de>>(line: &[u8]) -> Result<T, String> {
    serde_json::from_slice(line).map_err(|e| e.to_string())
}

/// Why joining a cluster failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum JoinError {
    /// The controller could not be reached, or the connection failed.
    Io(io::Error),
    /// The controller refused: its reason.
    Refused(String),
    /// The cluster was not ready before the deadline.
    Timeout,
    /// The cluster was not ready before the deadline: how many of its members had joined.
    NotReady {
        /// Processes bound, and how many the cluster starts with.
        processes: (u32, u32),
        /// Aggregators bound, and how many the cluster has.
        aggregators: (u32, u32),
    },
    /// The controller said something out of turn.
    Protocol(String),
    /// The controller is a standby, not the leader.
    Standby,
    /// The cluster's transport settings do not fit this member's network paths (for example a
    /// `datagram_len_max` longer than a path carries): the message names the field.
    Transport(String),
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinError::Io(e) => write!(f, "controller connection: {e}"),
            JoinError::Refused(why) => write!(f, "the controller refused: {why}"),
            JoinError::Timeout => write!(f, "the cluster was not ready in time"),
            JoinError::NotReady {
                processes,
                aggregators,
            } => write!(
                f,
                "the cluster was not ready in time: {} of {} processes and {} of {} aggregators had joined",
                processes.0, processes.1, aggregators.0, aggregators.1
            ),
            JoinError::Protocol(what) => write!(f, "unexpected control message: {what}"),
            JoinError::Standby => write!(f, "the controller is a standby, not the leader"),
            JoinError::Transport(what) => write!(f, "cluster file: {what}"),
        }
    }
}

impl std::error::Error for JoinError {}

impl From<io::Error> for JoinError {
    fn from(e: io::Error) -> JoinError {
        JoinError::Io(e)
    }
}

/// Most messages from the controller waiting for a member that split its connection.
pub const CONTROL_QUEUE_LEN_MAX: usize = 1024;

/// The sending half of a split control connection ([`ControlClient::split`]).
pub struct ControlSender {
    writer: ChannelWriter,
}

impl std::fmt::Debug for ControlSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControlSender")
    }
}

impl ControlSender {
    /// Sends one message.
    ///
    /// # Errors
    /// The connection failed.
    pub fn send(&mut self, msg: &ToController) -> io::Result<()> {
        write_line(&mut self.writer, msg)
    }

    /// Says `Leave` and shuts the write half: the controller reads the `Leave` before the end
    /// of the connection (the reading half keeps reading until it closes).
    pub fn leave(&mut self) {
        if self.send(&ToController::Leave { last: None }).is_ok() {
            let _ = self.writer.shutdown(std::net::Shutdown::Write);
        }
    }
}

/// A member's end of the control connection: TLS when given [`Credentials`].
pub struct ControlClient {
    writer: ChannelWriter,
    reader: BufReader<ChannelReader>,
    buf: Vec<u8>,
    /// The start of a line a read timeout cut short.
    pending: Vec<u8>,
    /// Key updates that came before `Ready` ([`ControlClient::bound_and_wait`]).
    keys: Vec<KeyUpdate>,
    /// `Ready` said this process joins the running cluster as a new one.
    rejoin: bool,
}

impl std::fmt::Debug for ControlClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlClient").finish_non_exhaustive()
    }
}

impl ControlClient {
    /// Connects to the controller at `addr`, retrying while it refuses (it may be starting) for
    /// up to `timeout`; with `tls`, authenticates both ways (docs/SECURITY.md).
    ///
    /// # Errors
    /// The last connection error once `timeout` has passed, or the TLS handshake failed.
    pub fn connect(
        addr: SocketAddr,
        timeout: Duration,
        tls: Option<&Credentials>,
    ) -> io::Result<ControlClient> {
        let tls = match tls {
            Some(c) => Some(c.client_config().map_err(io::Error::other)?),
            None => None,
        };
        let deadline = std::time::Instant::now() + timeout;
        let stream = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(1).min(timeout)) {
                Ok(s) => break s,
                Err(e) if std::time::Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        stream.set_nodelay(true)?;
        let channel = match tls {
            Some(cfg) => Channel::client(stream, cfg, timeout.max(Duration::from_secs(5)))?,
            None => Channel::plain(stream),
        };
        channel
            .tcp()
            .set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(ControlClient {
            reader: BufReader::new(channel.reader()?),
            writer: channel.writer()?,
            buf: Vec::new(),
            pending: Vec::new(),
            keys: Vec::new(),
            rejoin: false,
        })
    }

    /// Sends one message.
    ///
    /// # Errors
    /// The connection failed.
    pub fn send(&mut self, msg: &ToController) -> io::Result<()> {
        write_line(&mut self.writer, msg)
    }

    /// Says `Leave` and closes the connection cleanly: the write half first, then reading (and
    /// discarding) what the controller still sends until it closes too or `linger` passes. A
    /// socket closed with unread input would be reset, and the reset could reach the controller
    /// before the `Leave` does (it would take the member for lost).
    pub fn leave(&mut self, linger: Duration) {
        self.leave_at(None, linger);
    }

    /// [`ControlClient::leave`] for a process that flushed its reliable sends: `last` is a
    /// timestamp above everything it sent ([`ToController::Leave`]).
    pub fn leave_at(&mut self, last: Option<u64>, linger: Duration) {
        if self.send(&ToController::Leave { last }).is_err() {
            return;
        }
        let _ = self.writer.shutdown(std::net::Shutdown::Write);
        let deadline = std::time::Instant::now() + linger;
        while std::time::Instant::now() < deadline {
            match self.recv(Duration::from_millis(20)) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {}
                Err(_) => return,
            }
        }
    }

    /// The next message, waiting at most `timeout` (`Ok(None)` if none came).
    ///
    /// # Errors
    /// The connection closed (`UnexpectedEof`) or failed, or the controller sent something that
    /// is not a message (`InvalidData`).
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Option<FromController>> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        match read_line(&mut self.reader, &mut self.buf) {
            Ok(false) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the controller closed the connection",
            )),
            Ok(true) => {
                self.pending.extend_from_slice(&self.buf);
                if self.pending.last() != Some(&b'\n') {
                    return Ok(None);
                }
                let line = std::mem::take(&mut self.pending);
                parse_line(&line)
                    .map(Some)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                self.pending.extend_from_slice(&self.buf);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Joins as `want` and returns who the controller made us and the address to bind.
    ///
    /// # Errors
    /// Refused, timed out, or the connection failed.
    pub fn join(
        &mut self,
        want: JoinAs,
        timeout: Duration,
    ) -> Result<(Member, SocketAddr), JoinError> {
        self.send(&ToController::Join { member: want })?;
        self.await_welcome(timeout)
    }

    /// Connects to whichever controller of `controllers` leads and joins it as `want`: a
    /// standby answers `Standby` (or the connection fails) and the next address is tried, round
    /// and round, until `timeout`. A refusal by the leader is final.
    ///
    /// # Errors
    /// Refused by the leader, or no controller led within `timeout` (the last error).
    pub fn join_leader(
        controllers: &[SocketAddr],
        want: JoinAs,
        timeout: Duration,
        tls: Option<&Credentials>,
    ) -> Result<(ControlClient, Member, SocketAddr), JoinError> {
        let msg = ToController::Join { member: want };
        let (c, member, bind) = Self::register_leader(controllers, &msg, timeout, None, tls)?;
        Ok((c, member, bind))
    }

    /// Registers again with whichever controller of `controllers` leads, as `member` bound to
    /// `addr` (after the control connection was lost: a controller failover). Tries every
    /// address round and round until `timeout` or `stop`.
    ///
    /// # Errors
    /// Refused by the leader, stopped, or no controller led within `timeout`.
    pub fn rejoin_leader(
        controllers: &[SocketAddr],
        member: Member,
        addr: SocketAddr,
        timeout: Duration,
        stop: &AtomicBool,
        tls: Option<&Credentials>,
    ) -> Result<ControlClient, JoinError> {
        let msg = ToController::Rejoin { member, addr };
        let (c, _, _) = Self::register_leader(controllers, &msg, timeout, Some(stop), tls)?;
        Ok(c)
    }

    fn register_leader(
        controllers: &[SocketAddr],
        msg: &ToController,
        timeout: Duration,
        stop: Option<&AtomicBool>,
        tls: Option<&Credentials>,
    ) -> Result<(ControlClient, Member, SocketAddr), JoinError> {
        assert!(!controllers.is_empty(), "at least one controller address");
        let deadline = std::time::Instant::now() + timeout;
        let mut last = JoinError::Timeout;
        for (i, addr) in controllers.iter().enumerate().cycle() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                return Err(last);
            }
            let attempt = Duration::from_secs(2).min(left);
            let result = ControlClient::connect(*addr, attempt / 4, tls)
                .map_err(JoinError::Io)
                .and_then(|mut c| {
                    c.send(msg)?;
                    let (member, bind) = c.await_welcome(attempt)?;
                    Ok((c, member, bind))
                });
            match result {
                Ok(ok) => return Ok(ok),
                Err(JoinError::Refused(why)) => return Err(JoinError::Refused(why)),
                Err(e) => last = e,
            }
            // Once round the list without a leader: a failover takes a lease's time to live.
            if i + 1 == controllers.len() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        unreachable!("cycle over a non-empty list never ends")
    }

    fn await_welcome(&mut self, timeout: Duration) -> Result<(Member, SocketAddr), JoinError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(JoinError::Timeout);
            }
            match self.recv(left.min(Duration::from_millis(100)))? {
                None | Some(FromController::Down { .. }) => continue,
                Some(FromController::Welcome { member, bind }) => return Ok((member, bind)),
                Some(FromController::Error { message }) => return Err(JoinError::Refused(message)),
                Some(FromController::Standby { .. }) => return Err(JoinError::Standby),
                Some(other) => return Err(JoinError::Protocol(format!("{other:?}"))),
            }
        }
    }

    /// Says which address we bound and waits until the cluster is ready (every member bound),
    /// or `timeout` passes, or `stop` is set.
    ///
    /// # Errors
    /// Refused, timed out (or stopped: `Timeout`), or the connection failed.
    pub fn bound_and_wait(
        &mut self,
        addr: SocketAddr,
        timeout: Duration,
        stop: &AtomicBool,
    ) -> Result<Cluster, JoinError> {
        self.send(&ToController::Bound { addr })?;
        let deadline = std::time::Instant::now() + timeout;
        let mut waiting: Option<JoinError> = None;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if stop.load(Ordering::SeqCst) {
                return Err(JoinError::Timeout);
            }
            if left.is_zero() {
                return Err(waiting.unwrap_or(JoinError::Timeout));
            }
            match self.recv(left.min(Duration::from_millis(100)))? {
                None | Some(FromController::Down { .. }) => continue,
                Some(k @ (FromController::Keys { .. } | FromController::KeysActivate { .. })) => {
                    self.keys.extend(k.key_update());
                }
                Some(FromController::Ready { cluster, rejoin }) => {
                    self.rejoin = rejoin;
                    return Ok(*cluster);
                }
                Some(FromController::Standby { .. }) => return Err(JoinError::Standby),
                Some(FromController::Error { message }) => return Err(JoinError::Refused(message)),
                Some(FromController::Waiting {
                    processes,
                    of_processes,
                    aggregators,
                    of_aggregators,
                }) => {
                    waiting = Some(JoinError::NotReady {
                        processes: (processes, of_processes),
                        aggregators: (aggregators, of_aggregators),
                    });
                }
                // News of the running cluster (views, declarations, rejoins) before this
                // member's `Ready`: what it needs comes with `Ready` and after.
                Some(
                    FromController::View { .. }
                    | FromController::Declared { .. }
                    | FromController::Joined { .. }
                    | FromController::Address { .. },
                ) => continue,
                Some(other) => return Err(JoinError::Protocol(format!("{other:?}"))),
            }
        }
    }

    /// Whether `Ready` said this process joins a running cluster in a free slot (it must start
    /// as a restarted process: `JoinOptions::restarted`).
    pub fn joins_running_cluster(&self) -> bool {
        self.rejoin
    }

    /// The key updates that came with the cluster (before `Ready`), for the data path.
    pub fn take_keys(&mut self) -> Vec<KeyUpdate> {
        std::mem::take(&mut self.keys)
    }

    /// Splits the connection once the cluster is ready: a sender for this thread, and a thread
    /// that reads every message from the controller into a bounded channel (it blocks when the
    /// channel is full, so nothing is dropped and nothing grows). The thread ends when the
    /// connection closes, `stop` is set, or the receiver is dropped; lines that are not
    /// messages are skipped.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn split(
        mut self,
        name: &str,
        stop: Arc<AtomicBool>,
    ) -> io::Result<(ControlSender, Receiver<FromController>, JoinHandle<()>)> {
        let writer = self.writer.try_clone()?;
        let (tx, rx) = sync_channel(CONTROL_QUEUE_LEN_MAX);
        let reader = std::thread::Builder::new()
            .name(format!("{name}-control"))
            .spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match self.recv(Duration::from_millis(20)) {
                        Ok(Some(msg)) => {
                            if tx.send(msg).is_err() {
                                return;
                            }
                        }
                        Ok(None) => {}
                        Err(e) if e.kind() == io::ErrorKind::InvalidData => {}
                        Err(_) => return,
                    }
                }
            })?;
        Ok((ControlSender { writer }, rx, reader))
    }

    /// Asks a controller for every member's status (a connection of its own, closed after).
    ///
    /// # Errors
    /// The controller cannot be reached or did not answer within `timeout`.
    pub fn status(
        addr: SocketAddr,
        timeout: Duration,
        tls: Option<&Credentials>,
    ) -> Result<(Vec<MemberStatus>, u64), JoinError> {
        let mut c = ControlClient::connect(addr, timeout, tls)?;
        c.send(&ToController::Status)?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(JoinError::Timeout);
            }
            if let Some(FromController::Status {
                members, malformed, ..
            }) = c.recv(left.min(Duration::from_millis(100)))?
            {
                return Ok((members, malformed));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_lines() {
        let msgs = [
            ToController::Join {
                member: JoinAs::Process(None),
            },
            ToController::Join {
                member: JoinAs::Aggregator("tor-0".into()),
            },
            ToController::Bound {
                addr: "127.0.0.1:9".parse().unwrap(),
            },
            ToController::Leave { last: Some(7) },
            ToController::Health {
                counters: [("delivered".to_string(), 3)].into(),
                metrics: Some("127.0.0.1:9100".parse().unwrap()),
            },
            ToController::Rejoin {
                member: Member::Aggregator("tor-0".into()),
                addr: "127.0.0.1:9".parse().unwrap(),
            },
        ];
        let mut wire = Vec::new();
        for m in &msgs {
            write_line(&mut wire, m).unwrap();
        }
        let mut r = io::BufReader::new(&wire[..]);
        let mut buf = Vec::new();
        for m in &msgs {
            assert!(read_line(&mut r, &mut buf).unwrap());
            assert_eq!(&parse_line::<ToController>(&buf).unwrap(), m);
        }
        assert!(!read_line(&mut r, &mut buf).unwrap());
    }

    #[test]
    fn health_without_a_metrics_address_still_decodes() {
        let old = br#"{"type":"health","counters":{"delivered":3}}"#;
        let msg: ToController = parse_line(old).unwrap();
        assert_eq!(
            msg,
            ToController::Health {
                counters: [("delivered".to_string(), 3)].into(),
                metrics: None,
            }
        );
        let mut wire = Vec::new();
        write_line(&mut wire, &msg).unwrap();
        assert_eq!(
            wire.strip_suffix(b"\n").unwrap(),
            &old[..],
            "no field when None"
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for junk in [&b"\xff\xfe"[..], b"{", b"{\"type\":\"nope\"}", b"[]", b""] {
            assert!(parse_line::<ToController>(junk).is_err());
        }
    }
}
