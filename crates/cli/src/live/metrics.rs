//! The daemons' management HTTP endpoint: `GET /metrics` on `onepipe controller`, `agg` and
//! `node` (`--metrics ADDR`, loopback by default), in the Prometheus text format (OpenMetrics,
//! encoded by `prometheus-client`). docs/LIVE.md, "Metrics and status", lists the names.
//!
//! The daemon's own loop publishes a [`TelemetrySnapshot`] into a [`Telemetry`] every
//! [`onepipe_runtime::aggregator::TELEMETRY_INTERVAL`] or so; the HTTP thread only reads the
//! last one, so a slow or hostile scraper never holds up the data path. The HTTP side is a
//! `std` listener on a thread of its own, one request at a time, with a read timeout and a
//! limit on the request's length: anything but `GET /metrics` is answered 400, 404 or 405,
//! and nothing a peer sends can panic it. It is not a general HTTP server: no keep-alive, no
//! chunked bodies, no TLS (bind it to loopback or a management network).

use onepipe_runtime::stats::{LinkBarriers, TelemetrySnapshot};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tracing::debug;

/// The longest request head (request line and headers) read, in bytes; a longer one is
/// answered 400.
pub const REQUEST_LEN_MAX: usize = 8 << 10;
/// How long a connection may take to send its whole request head, however it trickles in (a
/// deadline, not a timeout per read: a peer sending a byte now and then is cut off all the
/// same), and the longest one write of the answer may block.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The `Content-Type` of a scrape: the OpenMetrics text `prometheus-client` writes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// `--metrics`: an address to serve on, or `off`.
pub fn metrics_flag(s: &str) -> Result<Option<SocketAddr>, String> {
    if s == "off" {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("'{s}': expected an address such as 127.0.0.1:9100, or off"))
}

/// One sample of one metric family.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The family's name after `onepipe_` (a counter's without its `_total`).
    pub name: String,
    /// Its `# HELP` text.
    pub help: String,
    /// A counter (`_total`, never goes down) or a gauge.
    pub counter: bool,
    /// Its labels.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    fn new(name: &str, help: &str, counter: bool, value: f64) -> Sample {
        Sample {
            name: name.into(),
            help: help.into(),
            counter,
            labels: Vec::new(),
            value,
        }
    }

    /// A gauge without labels.
    pub fn gauge(name: &str, help: &str, value: f64) -> Sample {
        Sample::new(name, help, false, value)
    }

    /// The sample with one more label.
    pub fn label(mut self, key: &str, value: &str) -> Sample {
        self.labels.push((key.into(), value.into()));
        self
    }
}

/// Counters served under a name and help of their own; every other counter a daemon keeps is
/// served as `onepipe_<counter>_total` with a generic help.
const NAMED: [(&str, &str, &str); 25] = [
    ("datagrams_sent", "datagrams_sent", "UDP datagrams handed to the kernel"),
    ("datagrams_received", "datagrams_received", "UDP datagrams received from known addresses"),
    ("packets_sent", "packets_sent", "1Pipe packets in the datagrams sent"),
    ("packets_received", "packets_received", "1Pipe packets decoded from the datagrams received"),
    ("bytes_sent", "sent_bytes", "UDP payload bytes sent"),
    ("bytes_received", "received_bytes", "UDP payload bytes received"),
    ("gso_sends", "gso_sends", "Sends of several datagrams at once (UDP GSO)"),
    ("gro_receives", "gro_receives", "Receives that held several datagrams (UDP GRO)"),
    ("datagrams_dropped_rcvbuf", "kernel_dropped_datagrams", "Datagrams the kernel dropped for a full receive buffer (SO_RXQ_OVFL)"),
    ("decode_errors", "decode_errors", "Datagrams that ended in a malformed packet"),
    ("unknown_source", "unknown_source_datagrams", "Datagrams from addresses outside the cluster, dropped"),
    ("messages_sent", "messages_sent", "Messages sent in the total order, one per destination"),
    ("dropped_late", "late_dropped_packets", "Packets dropped because they arrived below the barrier (section 4.1)"),
    ("naks_sent", "naks_sent", "NAKs sent"),
    ("retransmits", "retransmits", "Reliable messages retransmitted (section 5.1)"),
    ("fast_retransmits", "fast_retransmits", "Retransmissions triggered by duplicate ACKs"),
    ("window_cuts", "window_cuts", "Windows in which DCTCP saw ECN marks and cut the window"),
    ("send_failed", "send_failed", "Send-failed notifications raised"),
    ("lost", "lost_messages", "Messages reported lost after the retransmission timeout"),
    ("beacons_sent", "beacons_sent", "Beacons sent"),
    ("beacons_received", "beacons_received", "Beacons received"),
    ("forwarded", "forwarded", "Packets forwarded (aggregators), or messages handed to the controller to forward (section 5.2)"),
    ("links_removed", "links_removed", "Input links removed after falling silent (section 4.2)"),
    ("uplink_failures", "uplink_failures", "Times the first-hop aggregator fell silent (section 4.2)"),
    ("reorder_holds", "reorder_holds", "Messages delivered from a reorder buffer, whose holds reorder_hold_seconds sums"),
];

/// Counters of nanoseconds, served in seconds: (counter, family, help, a counter or a gauge).
const NANOSECONDS: [(&str, &str, &str, bool); 2] = [
    (
        "reorder_hold_ns",
        "reorder_hold_seconds",
        "Time messages waited in a reorder buffer, from arrival to delivery, summed (section 4.1)",
        true,
    ),
    (
        "reorder_hold_ns_max",
        "reorder_hold_seconds_max",
        "The longest a message waited in a reorder buffer",
        false,
    ),
];

/// Counters that are levels, not counts: served as gauges.
const GAUGES: [(&str, &str, &str); 13] = [
    (
        "datagram_len_max",
        "datagram_len_max_bytes",
        "UDP payload bytes per datagram on the wire (the coalescing limit)",
    ),
    (
        "gso",
        "gso_enabled",
        "1 when the kernel took UDP_SEGMENT (GSO)",
    ),
    ("gro", "gro_enabled", "1 when the kernel took UDP_GRO"),
    (
        "auth_epoch",
        "auth_key_epoch",
        "The datagram key epoch in use",
    ),
    (
        "auth_reorder_depth_max",
        "auth_reorder_depth_max",
        "Deepest reordering the replay window has seen",
    ),
    (
        "reorder_len",
        "reorder_messages",
        "Messages held in the reorder buffers now (section 4.1)",
    ),
    (
        "reorder_len_peak",
        "reorder_messages_peak",
        "The most messages one reorder buffer has held",
    ),
    (
        "reliable_window_pairs",
        "reliable_window_pairs",
        "(Sender, destination) pairs of the reliable sender (section 5.1)",
    ),
    (
        "reliable_window_in_flight_packets",
        "reliable_window_in_flight_packets",
        "Reliable packets in flight, summed over the pairs",
    ),
    (
        "reliable_window_limit_packets",
        "reliable_window_limit_packets",
        "The pairs' windows, min(cwnd, rwnd, 64) packets each, summed",
    ),
    (
        "reliable_window_unacked_messages",
        "reliable_window_unacked_messages",
        "Reliable messages sent and not yet acknowledged",
    ),
    (
        "reliable_window_buffered_bytes",
        "reliable_window_buffered_bytes",
        "Payload bytes in the reliable send buffer, queued and in flight",
    ),
    (
        "reliable_window_buffer_limit_bytes",
        "reliable_window_buffer_limit_bytes",
        "The reliable send buffer's limit (send_buffer_bytes_max)",
    ),
];

/// The samples for a member's counters (as its `Health` names them) and input links.
pub fn samples(snapshot: &TelemetrySnapshot) -> Vec<Sample> {
    let c = &snapshot.counters;
    let mut out = Vec::new();
    for (key, v) in c {
        out.push(counter_sample(key, *v as f64));
    }
    let (sent, datagrams) = (c.get("packets_sent"), c.get("datagrams_sent"));
    if let (Some(&p), Some(&d)) = (sent, datagrams) {
        let ratio = if d == 0 { 0.0 } else { p as f64 / d as f64 };
        out.push(Sample::new(
            "packets_per_datagram",
            "Mean 1Pipe packets per UDP datagram sent",
            false,
            ratio,
        ));
    }
    for (sender, &n) in &snapshot.late_dropped_by_sender {
        out.push(
            Sample::new(
                "late_dropped_packets_by_sender",
                "Packets dropped below the barrier, by sending process (section 4.1)",
                true,
                n as f64,
            )
            .label("sender", &sender.to_string()),
        );
    }
    for l in &snapshot.links {
        let link = l.link.to_string();
        link_gaps(l, &link, &mut out);
        for (which, b) in [("best_effort", l.barrier), ("commit", l.commit_barrier)] {
            if let Some(b) = b {
                out.push(
                    Sample::new("link_barrier_seconds", "The barrier an input link last reported (timestamp, seconds on the cluster clock)", false, b as f64 / 1e9)
                        .label("link", &link)
                        .label("barrier", which),
                );
            }
        }
        if let Some(lag) = l.barrier_lag_ns {
            out.push(
                Sample::new(
                    "link_barrier_lag_seconds",
                    "How far an input link's best-effort barrier trails this daemon's clock",
                    false,
                    lag as f64 / 1e9,
                )
                .label("link", &link),
            );
        }
    }
    out
}

/// The sample for one counter of a member, by its name (see [`NAMED`], [`GAUGES`],
/// [`NANOSECONDS`]).
fn counter_sample(key: &str, v: f64) -> Sample {
    if let Some(reason) = key
        .strip_prefix("auth_")
        .filter(|r| *r == "no_key" || onepipe_runtime::auth::REFUSAL_REASONS.contains(r))
    {
        Sample::new(
            "auth_refused_datagrams",
            "Datagrams refused by authentication, by reason",
            true,
            v,
        )
        .label("reason", reason)
    } else if let Some(service) = delivered_service(key) {
        Sample::new(
            "delivered_messages",
            "Messages delivered to the application, by service",
            true,
            v,
        )
        .label("service", service)
    } else if let Some(&(_, name, help, counter)) = NANOSECONDS.iter().find(|n| n.0 == key) {
        Sample::new(name, help, counter, v / 1e9)
    } else if let Some((_, name, help)) = GAUGES.iter().find(|g| g.0 == key) {
        Sample::new(name, help, false, v)
    } else if let Some((_, name, help)) = NAMED.iter().find(|n| n.0 == key) {
        Sample::new(name, help, true, v)
    } else {
        Sample::new(key, &format!("The daemon's `{key}` counter"), true, v)
    }
}

/// A link's gaps between barrier updates (§4.2): the largest, and the one open now.
fn link_gaps(l: &LinkBarriers, link: &str, out: &mut Vec<Sample>) {
    let gaps = [
        (l.barrier_gap_ns_max, "link_beacon_gap_seconds_max", "The largest interval between two barrier updates (beacons or barrier-carrying data) on an input link (section 4.2)"),
        (l.since_barrier_ns, "link_beacon_gap_seconds", "Time since an input link's last barrier update"),
    ];
    for (ns, name, help) in gaps {
        if let Some(ns) = ns {
            out.push(Sample::gauge(name, help, ns as f64 / 1e9).label("link", link));
        }
    }
}

/// The service a `delivered*` counter counts.
fn delivered_service(key: &str) -> Option<&'static str> {
    match key {
        "delivered" => Some("best_effort"),
        "delivered_reliable" => Some("reliable"),
        "delivered_plain" => Some("plain"),
        _ => None,
    }
}

/// The samples in the OpenMetrics text format, every family under `onepipe_` with its HELP.
pub fn render(samples: &[Sample]) -> String {
    type Labels = Vec<(String, String)>;
    /// A family's help, whether it is a counter, and its samples.
    type Rows<'a> = (&'a str, bool, Vec<(&'a Labels, f64)>);
    let mut families: BTreeMap<&str, Rows<'_>> = BTreeMap::new();
    for s in samples {
        let f = families
            .entry(&s.name)
            .or_insert_with(|| (&s.help, s.counter, Vec::new()));
        f.2.push((&s.labels, s.value));
    }
    let mut registry = Registry::with_prefix("onepipe");
    for (name, (help, counter, values)) in families {
        if counter && name.ends_with("_seconds") {
            // Times are fractions of seconds.
            let family = Family::<Labels, Counter<f64, AtomicU64>>::default();
            for (labels, v) in values {
                family.get_or_create(labels).inc_by(v);
            }
            registry.register(name, help, family);
        } else if counter {
            // Counters are counts: whole numbers, written as such.
            let family = Family::<Labels, Counter>::default();
            for (labels, v) in values {
                family.get_or_create(labels).inc_by(v as u64);
            }
            registry.register(name, help, family);
        } else {
            let family = Family::<Labels, Gauge<f64, AtomicU64>>::default();
            for (labels, v) in values {
                family.get_or_create(labels).set(v);
            }
            registry.register(name, help, family);
        }
    }
    let mut text = String::new();
    // Writing to a `String` cannot fail.
    let _ = encode(&mut text, &registry);
    text
}

/// A running metrics endpoint; stops when dropped.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `bind` and serves `GET /metrics` from what `source` returns at each request.
    ///
    /// # Errors
    /// The address could not be bound, or the thread not started.
    pub fn start(
        bind: SocketAddr,
        source: Box<dyn Fn() -> Vec<Sample> + Send>,
    ) -> io::Result<Server> {
        Server::on(TcpListener::bind(bind)?, source)
    }

    /// [`Server::start`] on a listener already bound.
    ///
    /// # Errors
    /// The listener's address could not be read, or the thread not started.
    pub fn on(
        listener: TcpListener,
        source: Box<dyn Fn() -> Vec<Sample> + Send>,
    ) -> io::Result<Server> {
        Server::with_timeout(listener, source, REQUEST_TIMEOUT)
    }

    /// [`Server::on`] with `timeout` in place of [`REQUEST_TIMEOUT`].
    fn with_timeout(
        listener: TcpListener,
        source: Box<dyn Fn() -> Vec<Sample> + Send>,
        timeout: Duration,
    ) -> io::Result<Server> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                while !flag.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, peer)) => {
                            if let Err(e) = serve(stream, &*source, timeout) {
                                debug!(%peer, "metrics request: {e}");
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(e) => {
                            debug!("metrics accept: {e}");
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            })?;
        Ok(Server {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads one request and answers it; the connection closes after.
fn serve(
    mut stream: TcpStream,
    source: &dyn Fn() -> Vec<Sample>,
    timeout: Duration,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(timeout))?;
    let head = match read_head(&mut stream, std::time::Instant::now() + timeout) {
        Ok(head) => head,
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            return respond(
                &mut stream,
                "400 Bad Request",
                "text/plain",
                "bad request\n",
            );
        }
        Err(e) => return Err(e),
    };
    let line = head.lines().next().unwrap_or("");
    let words: Vec<&str> = line.split(' ').collect();
    match words[..] {
        ["GET", "/metrics", v] if v.starts_with("HTTP/1.") => {
            let body = render(&source());
            respond(&mut stream, "200 OK", CONTENT_TYPE, &body)
        }
        ["GET", _, v] if v.starts_with("HTTP/1.") => respond(
            &mut stream,
            "404 Not Found",
            "text/plain",
            "only /metrics here\n",
        ),
        [_, _, v] if v.starts_with("HTTP/1.") => respond(
            &mut stream,
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n",
        ),
        _ => respond(
            &mut stream,
            "400 Bad Request",
            "text/plain",
            "bad request\n",
        ),
    }
}

/// The request head, up to the empty line; `InvalidData` if it is longer than
/// [`REQUEST_LEN_MAX`], not text, or the peer closed before finishing it; `TimedOut` if it is
/// not whole by `deadline`.
fn read_head(stream: &mut TcpStream, deadline: std::time::Instant) -> io::Result<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") {
            break;
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "request too slow"));
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "closed mid-request",
            ));
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > REQUEST_LEN_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request too long",
            ));
        }
    }
    String::from_utf8(head).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not text"))
}

fn respond(stream: &mut TcpStream, status: &str, content_type: &str, body: &str) -> io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> TelemetrySnapshot {
        TelemetrySnapshot {
            counters: [
                ("delivered", 7),
                ("auth_bad_tag", 2),
                ("datagrams_sent", 4),
                ("packets_sent", 10),
                ("gso", 1),
                ("turns", 99),
                ("reorder_len", 3),
                ("reorder_hold_ns", 1_500_000),
                ("reorder_hold_ns_max", 250_000),
                ("reliable_window_limit_packets", 64),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            links: vec![LinkBarriers {
                link: 3,
                barrier: Some(2_000_000_000),
                commit_barrier: None,
                barrier_lag_ns: Some(1_500),
                barrier_gap_ns_max: Some(2_000_000),
                since_barrier_ns: Some(500_000),
            }],
            late_dropped_by_sender: [(4, 2)].into_iter().collect(),
        }
    }

    #[test]
    fn counters_become_named_families_with_help_units_and_labels() {
        let text = render(&samples(&snapshot()));
        for line in [
            "# HELP onepipe_delivered_messages Messages delivered to the application, by service.",
            "# TYPE onepipe_delivered_messages counter",
            "onepipe_delivered_messages_total{service=\"best_effort\"} 7",
            "onepipe_auth_refused_datagrams_total{reason=\"bad_tag\"} 2",
            "onepipe_datagrams_sent_total 4",
            "onepipe_packets_per_datagram 2.5",
            "onepipe_gso_enabled 1.0",
            "onepipe_turns_total 99",
            "onepipe_link_barrier_seconds{link=\"3\",barrier=\"best_effort\"} 2.0",
            "onepipe_link_barrier_lag_seconds{link=\"3\"} 0.0000015",
            "# TYPE onepipe_reorder_messages gauge",
            "onepipe_reorder_messages 3.0",
            "onepipe_reorder_hold_seconds_total 0.0015",
            "onepipe_reorder_hold_seconds_max 0.00025",
            "onepipe_reliable_window_limit_packets 64.0",
            "onepipe_late_dropped_packets_by_sender_total{sender=\"4\"} 2",
            "onepipe_link_beacon_gap_seconds_max{link=\"3\"} 0.002",
            "onepipe_link_beacon_gap_seconds{link=\"3\"} 0.0005",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    fn ask(addr: SocketAddr, request: &[u8]) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(request).unwrap();
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out
    }

    #[test]
    fn only_get_metrics_is_served_and_junk_is_answered_not_fatal() {
        let s = Server::start(
            "127.0.0.1:0".parse().unwrap(),
            Box::new(|| samples(&snapshot())),
        )
        .unwrap();
        let ok = ask(s.addr(), b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("onepipe_turns_total 99"), "{ok}");
        for (req, status) in [
            (&b"GET / HTTP/1.1\r\n\r\n"[..], "404"),
            (b"POST /metrics HTTP/1.1\r\n\r\n", "405"),
            (b"\x16\x03\x01 hello?\r\n\r\n", "400"),
            (&[b'A'; REQUEST_LEN_MAX + 10][..], "400"),
        ] {
            let out = ask(s.addr(), req);
            assert!(out.starts_with(&format!("HTTP/1.1 {status}")), "{out}");
        }
        // A stranger that connects and says nothing, then one that hangs up at once.
        drop(TcpStream::connect(s.addr()).unwrap());
        let again = ask(s.addr(), b"GET /metrics HTTP/1.0\r\n\r\n");
        assert!(again.starts_with("HTTP/1.1 200 OK\r\n"), "{again}");
    }

    /// A peer that trickles its request a byte at a time holds the endpoint for the request
    /// deadline at most, not for a timeout per byte: a scrape right after is answered.
    #[test]
    fn a_request_trickled_in_is_cut_off_at_the_deadline() {
        let timeout = Duration::from_millis(200);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = Server::with_timeout(listener, Box::new(|| samples(&snapshot())), timeout).unwrap();
        let mut slow = TcpStream::connect(s.addr()).unwrap();
        let mut cut_off = false;
        for b in b"GET /metrics HTTP/1.1\r\nHost: a-very-slow-peer\r\n\r\n" {
            std::thread::sleep(Duration::from_millis(40));
            if slow.write_all(&[*b]).is_err() {
                cut_off = true;
                break;
            }
        }
        let mut rest = Vec::new();
        let _ = slow.read_to_end(&mut rest);
        assert!(
            cut_off || rest.is_empty(),
            "answered a trickled request: {rest:?}"
        );
        let ok = ask(s.addr(), b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
    }

    #[test]
    fn the_flag_takes_an_address_or_off() {
        assert_eq!(metrics_flag("off"), Ok(None));
        assert_eq!(
            metrics_flag("127.0.0.1:0"),
            Ok(Some("127.0.0.1:0".parse().unwrap()))
        );
        assert!(metrics_flag("loopback").unwrap_err().contains("'loopback'"));
    }
}
