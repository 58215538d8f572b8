//! `onepipe status`: one view of a running cluster. It asks the controller for `Status` (the
//! members, when each was last heard, their last `Health` counters and where each serves its
//! metrics), scrapes every member's `GET /metrics` and the controller's, and prints one table
//! (`--json`: the same as one JSON object), again every `--watch` interval until Ctrl-C, with
//! rates from consecutive scrapes.
//!
//! It is a reader only: it never changes the cluster. A member that cannot be scraped is named
//! with the reason and the rest are shown; the exit code is non-zero only when no controller
//! answers.

use super::supervise;
use crate::cli::EXIT_USAGE;
use clap::Args;
use onepipe_runtime::cluster::Cluster;
use onepipe_runtime::control::{ControlClient, FromController, Member, MemberStatus, ToController};
use onepipe_runtime::tls::{Credentials, OPERATOR};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How long the controller and each scrape may take.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(3);
/// The largest scrape read, in bytes.
pub const SCRAPE_LEN_MAX: usize = 16 << 20;

/// `onepipe status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// The controllers (a leader and standbys, comma-separated; the first that answers is
    /// asked) [default: the cluster file's].
    #[arg(long, value_name = "ADDR[,ADDR..]", value_delimiter = ',')]
    pub controller: Vec<SocketAddr>,
    /// The cluster file: its controller address, and its `[auth] pki` directory.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The key directory holding `ca.crt` and the `operator` certificate and key
    /// (docs/SECURITY.md) [default: the cluster file's `[auth] pki`]. Without either, the
    /// controller is asked without TLS, which only a cluster with `auth = "off"` answers.
    #[arg(long, value_name = "DIR")]
    pub pki: Option<PathBuf>,
    /// Refresh every this long until Ctrl-C, with rates from consecutive scrapes (`1s`).
    #[arg(long, value_parser = super::duration)]
    pub watch: Option<u64>,
    /// Print JSON (one object per refresh) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One scrape: every sample by its series (`name{labels}`).
type Scrape = BTreeMap<String, f64>;

/// What one refresh learned about one member (or the controller).
struct Seen {
    status: Option<MemberStatus>,
    metrics_addr: Option<SocketAddr>,
    scrape: Result<Scrape, String>,
}

/// One refresh: the controller's answer and every scrape.
struct View {
    controller: SocketAddr,
    malformed: u64,
    at: Instant,
    own: Seen,
    members: Vec<Seen>,
}

/// Runs `onepipe status`; the exit code.
pub fn run(args: &StatusArgs) -> i32 {
    let (controllers, tls) = match target(args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("onepipe status: {e}");
            return EXIT_USAGE;
        }
    };
    let (stop, _) = supervise::install(false);
    let mut before: Option<View> = None;
    loop {
        let view = match look(&controllers, tls.as_ref()) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("onepipe status: {e}");
                if args.watch.is_none() || before.is_none() {
                    return super::EXIT_RUNTIME;
                }
                std::thread::sleep(Duration::from_nanos(args.watch.unwrap_or(0)));
                continue;
            }
        };
        let report = report(&view, before.as_ref());
        if args.json {
            println!("{report}");
        } else {
            print!("{}", table(&report));
        }
        let _ = std::io::stdout().flush();
        let Some(every) = args.watch else {
            return 0;
        };
        before = Some(view);
        let until = Instant::now() + Duration::from_nanos(every);
        while Instant::now() < until {
            if stop.load(Ordering::SeqCst) {
                return 0;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !args.json {
            println!();
        }
    }
}

/// The controllers to ask and the operator's TLS identity, from the flags and the file.
fn target(args: &StatusArgs) -> Result<(Vec<SocketAddr>, Option<Credentials>), String> {
    let cluster = match &args.config {
        Some(path) => Some(Cluster::load(path).map_err(|e| format!("{}: {e}", path.display()))?),
        None => None,
    };
    let controllers = match (&args.controller[..], &cluster) {
        ([], Some(c)) => vec![c.controller],
        ([], None) => return Err("--controller or --config: which controller to ask".into()),
        (list, _) => list.to_vec(),
    };
    let pki = args.pki.clone().or_else(|| {
        let auth = cluster.as_ref()?.auth.as_ref()?;
        auth.pki.clone().filter(|_| auth.mode.seals())
    });
    let tls = match pki {
        Some(dir) => Some(Credentials::load(&dir, OPERATOR).map_err(|e| format!("--pki: {e}"))?),
        None => None,
    };
    Ok((controllers, tls))
}

/// Asks the first controller that answers, then scrapes it and every member (at once).
fn look(controllers: &[SocketAddr], tls: Option<&Credentials>) -> Result<View, String> {
    let mut errors = Vec::new();
    for &addr in controllers {
        match ask(addr, tls) {
            Ok((members, malformed, own)) => {
                let (own, members) = std::thread::scope(|s| {
                    let own = s.spawn(move || seen(own, None));
                    let members: Vec<_> = members
                        .into_iter()
                        .map(|m| {
                            // A member that left serves nothing any more.
                            let addr = m.metrics.filter(|_| m.state != "left");
                            s.spawn(move || seen(addr, Some(m)))
                        })
                        .collect();
                    (
                        own.join().expect("a scrape never panics"),
                        members
                            .into_iter()
                            .map(|h| h.join().expect("a scrape never panics"))
                            .collect(),
                    )
                });
                return Ok(View {
                    controller: addr,
                    malformed,
                    at: Instant::now(),
                    own,
                    members,
                });
            }
            Err(e) => errors.push(format!("controller {addr}: {e}")),
        }
    }
    Err(errors.join("; "))
}

/// One controller's `Status`: the members, its malformed-line count and its metrics address.
fn ask(
    addr: SocketAddr,
    tls: Option<&Credentials>,
) -> Result<(Vec<MemberStatus>, u64, Option<SocketAddr>), String> {
    let mut c = ControlClient::connect(addr, ASK_TIMEOUT, tls).map_err(|e| e.to_string())?;
    c.send(&ToController::Status).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + ASK_TIMEOUT;
    while Instant::now() < deadline {
        match c.recv(Duration::from_millis(100)) {
            Ok(Some(FromController::Status {
                members,
                malformed,
                metrics,
            })) => return Ok((members, malformed, metrics)),
            Ok(Some(FromController::Error { message })) => return Err(message),
            Ok(Some(FromController::Standby { .. })) => {
                return Err("a standby, not the leader".into())
            }
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("no answer within {ASK_TIMEOUT:?}"))
}

/// A member (or, without `status`, the controller at `metrics`) and its scrape.
fn seen(metrics: Option<SocketAddr>, status: Option<MemberStatus>) -> Seen {
    let scrape = match metrics {
        Some(addr) => scrape(addr).map_err(|e| format!("cannot scrape {addr}: {e}")),
        None if status.as_ref().is_some_and(|s| s.state == "left") => {
            Err("not scraped: it left the cluster".into())
        }
        None => Err("no metrics address (it serves none, or has not reported one yet)".into()),
    };
    Seen {
        status,
        metrics_addr: metrics,
        scrape,
    }
}

/// `GET /metrics` from `addr`, parsed.
///
/// # Errors
/// The connection failed or timed out, the answer was not 200, or too long.
pub fn scrape(addr: SocketAddr) -> Result<Scrape, String> {
    let mut c = TcpStream::connect_timeout(&addr, ASK_TIMEOUT).map_err(|e| e.to_string())?;
    c.set_read_timeout(Some(ASK_TIMEOUT))
        .map_err(|e| e.to_string())?;
    c.set_write_timeout(Some(ASK_TIMEOUT))
        .map_err(|e| e.to_string())?;
    write!(
        c,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    c.take(SCRAPE_LEN_MAX as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| e.to_string())?;
    if body.len() > SCRAPE_LEN_MAX {
        return Err(format!("answer longer than {SCRAPE_LEN_MAX} bytes"));
    }
    let text = String::from_utf8_lossy(&body);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("not an HTTP answer")?;
    let status = head.lines().next().unwrap_or("");
    if !status.starts_with("HTTP/1.1 200") && !status.starts_with("HTTP/1.0 200") {
        return Err(format!("answered '{status}'"));
    }
    Ok(parse(body))
}

/// Samples of the text format by series; comments and lines that are not samples are skipped.
pub fn parse(text: &str) -> Scrape {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of every series of family `name` (its sample name, `_total` included).
fn total(s: &Scrape, name: &str) -> Option<f64> {
    let mut found = None;
    for (series, v) in s {
        let base = series.split('{').next().unwrap_or("");
        if base == name {
            *found.get_or_insert(0.0) += v;
        }
    }
    found
}

/// The columns of the members' table: a heading, and the family summed into it.
const COLUMNS: [(&str, &str); 8] = [
    ("delivered", "onepipe_delivered_messages_total"),
    ("datagrams_sent", "onepipe_datagrams_sent_total"),
    ("datagrams_received", "onepipe_datagrams_received_total"),
    ("late_drops", "onepipe_late_dropped_packets_total"),
    ("naks", "onepipe_naks_sent_total"),
    ("retransmits", "onepipe_retransmits_total"),
    ("auth_refused", "onepipe_auth_refused_datagrams_total"),
    ("kernel_drops", "onepipe_kernel_dropped_datagrams_total"),
];

/// The view as JSON; rates per second against `before` when there is one.
fn report(view: &View, before: Option<&View>) -> Value {
    let secs = before.map(|b| view.at.duration_since(b.at).as_secs_f64());
    let members: Vec<Value> = view
        .members
        .iter()
        .map(|m| member_json(m, before, secs))
        .collect();
    let own = view.own.scrape.as_ref().ok();
    let c = |name: &str| own.and_then(|s| total(s, name));
    json!({
        "controller": view.controller.to_string(),
        "controller_metrics": view.own.metrics_addr.map(|a| a.to_string()),
        "controller_scrape_error": view.own.scrape.as_ref().err(),
        "malformed": view.malformed,
        "failure": {
            "detected": c("onepipe_failure_detected_total"),
            "rounds_declared": c("onepipe_failure_rounds_declared_total"),
            "rounds_resumed": c("onepipe_failure_rounds_resumed_total"),
        },
        "members": members,
    })
}

fn member_json(m: &Seen, before: Option<&View>, secs: Option<f64>) -> Value {
    let st = m.status.as_ref().expect("members have a status");
    let role = match st.member {
        Member::Aggregator(_) => "aggregator",
        Member::Process(_) => "process",
    };
    let scrape = m.scrape.as_ref().ok();
    let prev = before
        .and_then(|b| {
            b.members
                .iter()
                .find(|p| p.status.as_ref().map(|s| &s.member) == Some(&st.member))
        })
        .and_then(|p| p.scrape.as_ref().ok());
    let mut totals = serde_json::Map::new();
    let mut rates = serde_json::Map::new();
    for (key, family) in COLUMNS {
        let now = scrape.and_then(|s| total(s, family));
        totals.insert(key.into(), json!(now));
        if let (Some(now), Some(then), Some(secs)) =
            (now, prev.and_then(|p| total(p, family)), secs)
        {
            rates.insert(key.into(), json!((now - then) / secs.max(1e-9)));
        }
    }
    let links: Vec<Value> = scrape
        .map(|s| {
            s.iter()
                .filter_map(|(k, v)| {
                    let labels = k
                        .strip_prefix("onepipe_link_barrier_lag_seconds")
                        .filter(|l| l.starts_with('{'))?;
                    let gap = s.get(&format!("onepipe_link_beacon_gap_seconds_max{labels}"));
                    Some(json!({ "series": k, "lag_seconds": v, "gap_max_seconds": gap }))
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "member": st.member.to_string(),
        "role": role,
        "state": st.state,
        "addr": st.addr.map(|a| a.to_string()),
        "last_heard_ms": st.last_seen_ms,
        "metrics_addr": m.metrics_addr.map(|a| a.to_string()),
        "scrape_error": m.scrape.as_ref().err(),
        "counters": st.counters,
        "totals": totals,
        "rates": if secs.is_some() { Value::Object(rates) } else { Value::Null },
        "links": links,
        "reorder_hold_max_seconds": scrape.and_then(|s| total(s, "onepipe_reorder_hold_seconds_max")),
        "metrics": scrape,
    })
}

/// The report as a table: a heading line, the members, their links' barrier lag, and the
/// errors.
fn table(r: &Value) -> String {
    let mut out = String::new();
    let f = &r["failure"];
    let n = |v: &Value| v.as_f64().map_or("?".into(), |x| format!("{x:.0}"));
    out += &format!(
        "controller {} (metrics {}): {} malformed control lines; §5.2: {} detected, {} rounds declared, {} resumed\n",
        r["controller"].as_str().unwrap_or("?"),
        r["controller_metrics"].as_str().unwrap_or("none"),
        r["malformed"],
        n(&f["detected"]),
        n(&f["rounds_declared"]),
        n(&f["rounds_resumed"]),
    );
    let members = r["members"].as_array().cloned().unwrap_or_default();
    let rated = members.iter().any(|m| !m["rates"].is_null());
    let mut rows = vec![vec![
        "MEMBER".to_string(),
        "ROLE".into(),
        "STATE".into(),
        "ADDR".into(),
        "HEARD".into(),
    ]];
    rows[0].extend(COLUMNS.iter().map(|(k, _)| {
        let k = k.to_uppercase();
        if rated && matches!(&*k, "DELIVERED" | "DATAGRAMS_SENT" | "DATAGRAMS_RECEIVED") {
            format!("{k}/S")
        } else {
            k
        }
    }));
    rows[0].push("HOLD_MAX".into());
    for m in &members {
        let mut row = vec![
            m["member"].as_str().unwrap_or("?").to_string(),
            m["role"].as_str().unwrap_or("?").into(),
            m["state"].as_str().unwrap_or("?").into(),
            m["addr"].as_str().unwrap_or("-").into(),
            m["last_heard_ms"]
                .as_u64()
                .map_or("-".into(), |ms| format!("{:.1}s", ms as f64 / 1e3)),
        ];
        for (k, _) in COLUMNS {
            let rate = &m["rates"][k];
            let cell = if rated
                && !rate.is_null()
                && matches!(k, "delivered" | "datagrams_sent" | "datagrams_received")
            {
                format!("{:.0}", rate.as_f64().unwrap_or(0.0))
            } else {
                m["totals"][k]
                    .as_f64()
                    .map_or("-".into(), |v| format!("{v:.0}"))
            };
            row.push(cell);
        }
        row.push(seconds_text(&m["reorder_hold_max_seconds"]));
        rows.push(row);
    }
    out += &columns(&rows);
    let links = link_rows(&members);
    if links.len() > 1 {
        out += "\n";
        out += &columns(&links);
    }
    for (who, e) in std::iter::once(("controller", &r["controller_scrape_error"])).chain(
        members
            .iter()
            .map(|m| (m["member"].as_str().unwrap_or("?"), &m["scrape_error"])),
    ) {
        if let Some(e) = e.as_str() {
            out += &format!("{who}: {e}\n");
        }
    }
    out
}

/// Seconds as text: microseconds with one decimal, milliseconds with two from 1 ms up; `-` if
/// absent.
fn seconds_text(v: &Value) -> String {
    match v.as_f64() {
        None => "-".into(),
        Some(x) if x >= 1e-3 => format!("{:.2} ms", x * 1e3),
        Some(x) => format!("{:.1} µs", x * 1e6),
    }
}

/// The links' table: each member's input links, their barrier lag and the largest gap between
/// two barrier updates (§4.2).
fn link_rows(members: &[Value]) -> Vec<Vec<String>> {
    let mut links = vec![vec![
        "MEMBER".to_string(),
        "LINK".into(),
        "BARRIER LAG".into(),
        "LARGEST GAP".into(),
    ]];
    for m in members {
        for l in m["links"].as_array().into_iter().flatten() {
            let series = l["series"].as_str().unwrap_or("");
            let link = series
                .split("link=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .unwrap_or("?");
            links.push(vec![
                m["member"].as_str().unwrap_or("?").into(),
                link.into(),
                seconds_text(&l["lag_seconds"]),
                seconds_text(&l["gap_max_seconds"]),
            ]);
        }
    }
    links
}

/// Rows as left-aligned columns two spaces apart.
fn columns(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out += cells.join("  ").trim_end();
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_parses_by_series_and_families_sum() {
        let s = parse(
            "# HELP onepipe_x X.\n# TYPE onepipe_x counter\nonepipe_x_total{a=\"1\"} 2\nonepipe_x_total{a=\"2\"} 3.5\nonepipe_y 1\ngarbage\n# EOF\n",
        );
        assert_eq!(s.len(), 3);
        assert_eq!(total(&s, "onepipe_x_total"), Some(5.5));
        assert_eq!(total(&s, "onepipe_y"), Some(1.0));
        assert_eq!(total(&s, "onepipe_z"), None);
    }
}
