//! Reading a cluster file: [`Cluster::load`] and [`Cluster::parse`], from the TOML form (with
//! spans, so an error names the field and its line) to a checked [`Cluster`].

use super::validate::Loc;
use super::*;

impl Cluster {
    /// Reads and checks a cluster file.
    ///
    /// # Errors
    /// The file cannot be read, or [`Cluster::parse`] refuses it (the message names the file).
    pub fn load(path: &Path) -> Result<Cluster, ClusterError> {
        let text = std::fs::read_to_string(path).map_err(|e| ClusterError {
            line: None,
            field: path.display().to_string(),
            message: format!("cannot read: {e}"),
        })?;
        let mut cluster = Cluster::parse(&text)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        if let Some(pki) = cluster.auth.as_mut().and_then(|a| a.pki.as_mut()) {
            if pki.is_relative() {
                *pki = dir.join(&*pki);
            }
        }
        Ok(cluster)
    }

    /// Parses and checks a cluster file's text.
    ///
    /// ```
    /// use onepipe_runtime::cluster::Cluster;
    /// let c = Cluster::parse(r#"
    /// controller = "127.0.0.1:7400"
    /// [[aggregator]]
    /// name = "tor-0"
    /// addr = "127.0.0.1:0"
    /// [[process]]
    /// id = 0
    /// addr = "127.0.0.1:0"
    /// aggregator = "tor-9"
    /// "#).unwrap_err();
    /// assert_eq!((c.line, c.field.as_str()), (Some(9), "process.aggregator"));
    /// ```
    ///
    /// # Errors
    /// Bad TOML, an unknown or mistyped field, or a cluster that does not make sense (see
    /// [`Cluster::validate`]): the error names the field and the line.
    pub fn parse(text: &str) -> Result<Cluster, ClusterError> {
        let file: FileRepr = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
        let dur = |v: &Option<Spanned<String>>, name: &'static str, default: u64| {
            duration(text, v, name, default)
        };
        let roles = LiveRoles::default();
        let beacon_interval_ns = dur(
            &file.beacon_interval,
            "beacon_interval",
            roles.beacon_interval_ns,
        )?;
        let fast_beacon_interval_ns = dur(
            &file.fast_beacon_interval,
            "fast_beacon_interval",
            roles.fast_beacon_interval_ns,
        )?;
        let aggregator_phase_ns = dur(
            &file.aggregator_phase,
            "aggregator_phase",
            roles.aggregator_phase_ns.min(beacon_interval_ns / 5),
        )?;
        let loss_timeout_ns = dur(&file.loss_timeout, "loss_timeout", roles.rto_ns)?;
        let aggregator_mode = file.aggregator_mode(text, roles.aggregator_mode)?;
        let link_timeout_ns = dur(&file.link_timeout, "link_timeout", roles.link_timeout_ns)?;
        let callback_timeout_ns = dur(
            &file.callback_timeout,
            "callback_timeout",
            roles.callback_timeout_ns,
        )?;
        let datagram_len_max = file.datagram_len_max(text)?;
        let auth = file.auth(text)?;
        let cluster = Cluster {
            controller: *file.controller.get_ref(),
            beacon_interval_ns,
            fast_beacon_interval_ns,
            aggregator_mode,
            aggregator_phase_ns,
            clock: file
                .clock
                .as_ref()
                .map(|c| *c.get_ref())
                .unwrap_or_default(),
            ordered: file.ordered.unwrap_or(true),
            loss_timeout_ns,
            link_timeout_ns,
            callback_timeout_ns,
            forward_after: file.forward_after.unwrap_or(0),
            start_with: file.start_with,
            datagram_len_max,
            gso: file.gso.unwrap_or(true),
            gro: file.gro.unwrap_or(true),
            auth,
            aggregators: file.aggregator_specs(),
            processes: file.process_specs(),
        };
        let spans = file.top_spans();
        let locate = |loc: Loc| file.locate(&spans, loc).and_then(|s| line_of(text, s));
        let mut sorted = cluster;
        sorted.check(&locate)?;
        sorted.processes.sort_by_key(|p| p.id);
        Ok(sorted)
    }
}

/// The TOML form, with spans for error messages.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRepr {
    controller: Spanned<SocketAddr>,
    beacon_interval: Option<Spanned<String>>,
    fast_beacon_interval: Option<Spanned<String>>,
    aggregator_phase: Option<Spanned<String>>,
    aggregator_mode: Option<Spanned<String>>,
    clock: Option<Spanned<ClockSource>>,
    ordered: Option<bool>,
    loss_timeout: Option<Spanned<String>>,
    link_timeout: Option<Spanned<String>>,
    callback_timeout: Option<Spanned<String>>,
    forward_after: Option<u32>,
    start_with: Option<u32>,
    datagram_len_max: Option<Spanned<LenRepr>>,
    gso: Option<bool>,
    gro: Option<bool>,
    auth: Option<Spanned<toml::Value>>,
    #[serde(default, rename = "aggregator")]
    aggregators: Vec<AggregatorRepr>,
    #[serde(default, rename = "process")]
    processes: Vec<ProcessRepr>,
}

/// The `auth` entry: `"off"` (or `"on"`, `"encrypt"`), or an `[auth]` table. An error names
/// the field.
fn auth_config(v: &toml::Value) -> Result<AuthConfig, (String, String)> {
    let mode = |w: &str, field: &str| w.parse::<AuthMode>().map_err(|e| (field.to_string(), e));
    let t = match v {
        toml::Value::String(w) => {
            let mode = mode(w, "auth")?;
            return Ok(AuthConfig {
                mode,
                ..AuthConfig::on(None)
            });
        }
        toml::Value::Table(t) => t,
        _ => {
            return Err((
                "auth".into(),
                "expected \"off\", \"on\", \"encrypt\" or an [auth] table".into(),
            ))
        }
    };
    let mut auth = AuthConfig::on(None);
    for (k, v) in t {
        let field = format!("auth.{k}");
        let text = v
            .as_str()
            .ok_or_else(|| (field.clone(), "expected a string".to_string()))?;
        match k.as_str() {
            "mode" => auth.mode = mode(text, &field)?,
            "pki" => auth.pki = Some(PathBuf::from(text)),
            "rotate_every" => {
                auth.rotate_every_ns = parse_duration_ns(text).map_err(|e| (field, e))?
            }
            "grace" => auth.grace_ns = parse_duration_ns(text).map_err(|e| (field, e))?,
            _ => {
                return Err((
                    field,
                    "unknown field: expected mode, pki, rotate_every or grace".into(),
                ))
            }
        }
    }
    Ok(auth)
}

/// `datagram_len_max`: `"auto"` or a number of bytes.
#[derive(Deserialize)]
#[serde(untagged)]
enum LenRepr {
    Bytes(u64),
    Word(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AggregatorRepr {
    name: Spanned<String>,
    addr: Spanned<SocketAddr>,
    parent: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessRepr {
    id: Spanned<u32>,
    host: Option<u32>,
    addr: Spanned<SocketAddr>,
    aggregator: Spanned<String>,
}

/// A TOML or type error: the line from its span, the field from the key on that line.
fn toml_error(text: &str, e: &toml::de::Error) -> ClusterError {
    let (line, field) = match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let line = text[..start].matches('\n').count() + 1;
            let line_text = text.lines().nth(line - 1).unwrap_or("");
            let key = line_text
                .split_once('=')
                .map(|(k, _)| k.trim().trim_matches('"').to_string())
                .filter(|k| !k.is_empty() && !k.starts_with('['))
                .unwrap_or_else(|| line_text.trim().to_string());
            (Some(line), key)
        }
        None => (None, "cluster file".to_string()),
    };
    ClusterError {
        line,
        field,
        message: e.message().trim().to_string(),
    }
}

/// The line of byte `start` of `text` (1 for the first).
fn line_of(text: &str, start: usize) -> Option<usize> {
    Some(text[..start.min(text.len())].matches('\n').count() + 1)
}

/// Duration field `name` in nanoseconds, `default` when the file leaves it out; an error names
/// the field and its line.
fn duration(
    text: &str,
    v: &Option<Spanned<String>>,
    name: &'static str,
    default: u64,
) -> Result<u64, ClusterError> {
    match v {
        None => Ok(default),
        Some(s) => parse_duration_ns(s.get_ref()).map_err(|message| ClusterError {
            line: line_of(text, s.span().start),
            field: name.to_string(),
            message,
        }),
    }
}

impl FileRepr {
    /// `aggregator_mode`, `default` when the file leaves it out.
    fn aggregator_mode(
        &self,
        text: &str,
        default: AggregatorMode,
    ) -> Result<AggregatorMode, ClusterError> {
        match &self.aggregator_mode {
            None => Ok(default),
            Some(m) => m.get_ref().parse().map_err(|message| ClusterError {
                line: line_of(text, m.span().start),
                field: "aggregator_mode".to_string(),
                message,
            }),
        }
    }

    /// `datagram_len_max`: `None` for `"auto"` or when the file leaves it out.
    fn datagram_len_max(&self, text: &str) -> Result<Option<usize>, ClusterError> {
        let Some(v) = &self.datagram_len_max else {
            return Ok(None);
        };
        match v.get_ref() {
            LenRepr::Word(w) if w == "auto" => Ok(None),
            LenRepr::Bytes(n) => Ok(Some(usize::try_from(*n).unwrap_or(usize::MAX))),
            LenRepr::Word(w) => Err(ClusterError {
                line: line_of(text, v.span().start),
                field: "datagram_len_max".into(),
                message: format!("'{w}': expected \"auto\" or a number of bytes"),
            }),
        }
    }

    /// The `auth` entry, if the file has one.
    fn auth(&self, text: &str) -> Result<Option<AuthConfig>, ClusterError> {
        let Some(v) = &self.auth else {
            return Ok(None);
        };
        let auth = auth_config(v.get_ref()).map_err(|(field, message)| ClusterError {
            line: line_of(text, v.span().start),
            field,
            message,
        })?;
        Ok(Some(auth))
    }

    /// The `[[aggregator]]` entries, in file order.
    fn aggregator_specs(&self) -> Vec<AggregatorSpec> {
        self.aggregators
            .iter()
            .map(|a| AggregatorSpec {
                name: a.name.get_ref().clone(),
                addr: *a.addr.get_ref(),
                parent: a.parent.as_ref().map(|p| p.get_ref().clone()),
            })
            .collect()
    }

    /// The `[[process]]` entries, in file order.
    fn process_specs(&self) -> Vec<ProcessSpec> {
        self.processes
            .iter()
            .map(|p| ProcessSpec {
                id: *p.id.get_ref(),
                host: p.host.unwrap_or(*p.id.get_ref()),
                addr: *p.addr.get_ref(),
                aggregator: p.aggregator.get_ref().clone(),
            })
            .collect()
    }

    /// Where each top-level field the file has starts (byte offsets).
    fn top_spans(&self) -> BTreeMap<&'static str, usize> {
        let mut spans = BTreeMap::new();
        spans.insert("controller", self.controller.span().start);
        if let Some(v) = &self.datagram_len_max {
            spans.insert("datagram_len_max", v.span().start);
        }
        for (name, v) in [
            ("beacon_interval", &self.beacon_interval),
            ("fast_beacon_interval", &self.fast_beacon_interval),
            ("aggregator_phase", &self.aggregator_phase),
            ("aggregator_mode", &self.aggregator_mode),
            ("loss_timeout", &self.loss_timeout),
            ("link_timeout", &self.link_timeout),
            ("callback_timeout", &self.callback_timeout),
        ] {
            if let Some(s) = v {
                spans.insert(name, s.span().start);
            }
        }
        spans
    }

    /// Where the field `loc` names starts in the file (a byte offset), given `spans` from
    /// [`FileRepr::top_spans`].
    fn locate(&self, spans: &BTreeMap<&'static str, usize>, loc: Loc) -> Option<usize> {
        let start = match loc {
            Loc::Top(name) => *spans.get(name)?,
            Loc::Aggregator(i, f) => {
                let a = self.aggregators.get(i)?;
                match f {
                    "parent" => a.parent.as_ref().map_or(a.name.span(), |p| p.span()),
                    "addr" => a.addr.span(),
                    _ => a.name.span(),
                }
                .start
            }
            Loc::Process(i, f) => {
                let p = self.processes.get(i)?;
                match f {
                    "aggregator" => p.aggregator.span(),
                    "addr" => p.addr.span(),
                    _ => p.id.span(),
                }
                .start
            }
        };
        Some(start)
    }
}
