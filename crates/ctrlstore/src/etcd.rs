//! [`EtcdStore`]: the [`ControllerStore`] on etcd (§6.1 "controller state in etcd"), through
//! `etcd-client` driven by a private current-thread tokio runtime behind the synchronous trait.
//!
//! Keys, under a per-cluster prefix `/onepipe/<cluster>/` so several clusters share one etcd:
//!
//! * `leader` — the election key: the leader's candidate name, attached to its lease. Created
//!   only if absent (a transaction comparing its create revision with 0); it disappears when the
//!   lease ends (expiry or resignation), and the next campaign can create it.
//! * `log/<index, 20 digits>` — the log entries, written once each.
//! * `meta/<key>` — metadata.
//!
//! **Fencing**: a leadership's fence is the create revision of the `leader` key it created
//! (etcd revisions only grow). Every write is a transaction that compares the `leader` key's
//! create revision with the fence; after the lease ended the key is gone or was re-created at a
//! higher revision by the next leader, so a deposed leader's write fails — even one delayed in
//! the network past the new leader's replay.
//!
//! **Reaching a protected etcd** ([`EtcdStore::connect_with`], [`EtcdOptions`]): TLS with a
//! client certificate (rustls on aws-lc-rs, as the runtime's own TLS), and an etcd user whose
//! role may read and write the cluster's prefix and nothing else ([`EtcdStore::enable_auth`]
//! sets that up on a fresh etcd).

use crate::store::{ControllerStore, Leadership, Op, StoreError, LOG_ENTRIES_MAX};
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, Permission,
    PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse,
};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How long a waiting campaign sleeps between looks at the election key.
const CAMPAIGN_POLL: Duration = Duration::from_millis(100);

/// Log entries fetched per range request by [`ControllerStore::load`], by default.
pub const LOAD_PAGE_ENTRIES: i64 = 1_000;

/// How to reach an etcd that asks for more than plain HTTP. The default is plain: no TLS, no
/// user.
#[derive(Clone, Default)]
pub struct EtcdOptions {
    /// TLS with a client certificate. Endpoints are then `https://HOST:PORT` or `HOST:PORT`.
    pub tls: Option<EtcdTls>,
    /// An etcd user and its password, for an etcd with authentication on. The client
    /// authenticates when it connects and again whenever etcd says the token expired.
    pub user: Option<(String, String)>,
}

/// TLS to etcd, PEM: the CA that signed etcd's certificate, and this client's certificate and
/// key (etcd's `--client-cert-auth` asks for one its `--trusted-ca-file` signed).
#[derive(Clone)]
pub struct EtcdTls {
    /// The CA certificate(s) trusted for etcd's server certificate.
    pub ca_pem: String,
    /// This client's certificate.
    pub cert_pem: String,
    /// This client's private key.
    pub key_pem: String,
    /// The name etcd's certificate must hold, if not the endpoint's host (an IP address is
    /// checked against the certificate's IP names).
    pub domain: Option<String>,
}

/// A controller store on etcd.
pub struct EtcdStore {
    endpoint: String,
    prefix: String,
    rt: tokio::runtime::Runtime,
    client: Mutex<Client>,
    /// (fence, next log index) of the leadership that appended last: the leader is the only
    /// writer, so it counts the log once and then keeps count.
    next: Mutex<Option<(i64, u64)>>,
    load_page_entries: i64,
}

impl EtcdStore {
    /// Connects to etcd at `endpoints` (e.g. `["127.0.0.1:2379"]`) for cluster `cluster`
    /// (a name without `/`: the key prefix is `/onepipe/<cluster>/`), in plain HTTP and without
    /// a user.
    pub fn connect(endpoints: &[String], cluster: &str) -> Result<EtcdStore, StoreError> {
        EtcdStore::connect_with(endpoints, cluster, &EtcdOptions::default())
    }

    /// As [`EtcdStore::connect`], with TLS and a user as `options` say. With a user, the
    /// client authenticates here, so a wrong password, or a TLS handshake etcd refuses (no
    /// client certificate, or one its CA did not sign), fails the connect; without one, the
    /// first request fails instead.
    pub fn connect_with(
        endpoints: &[String],
        cluster: &str,
        options: &EtcdOptions,
    ) -> Result<EtcdStore, StoreError> {
        let endpoint = endpoints.join(",");
        let fail = |detail: String| StoreError::Unavailable {
            op: Op::Connect,
            endpoint: endpoint.clone(),
            detail,
        };
        if cluster.is_empty() || cluster.contains('/') {
            return Err(fail(format!("bad cluster name {cluster:?}")));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| fail(format!("tokio runtime: {e}")))?;
        let mut connect = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        if let Some(tls) = &options.tls {
            let mut t = TlsOptions::new()
                .ca_certificate(Certificate::from_pem(&tls.ca_pem))
                .identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem));
            if let Some(domain) = &tls.domain {
                t = t.domain_name(domain.clone());
            }
            connect = connect.with_tls(t);
        }
        if let Some((name, password)) = &options.user {
            connect = connect
                .with_user(name.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        let options = connect;
        let client = rt
            .block_on(Client::connect(endpoints, Some(options)))
            .map_err(|e| fail(e.to_string()))?;
        Ok(EtcdStore {
            prefix: format!("/onepipe/{cluster}/"),
            endpoint,
            rt,
            client: Mutex::new(client),
            next: Mutex::new(None),
            load_page_entries: LOAD_PAGE_ENTRIES,
        })
    }

    /// Turns etcd's authentication on, for a fresh etcd this store reaches without a user
    /// (as `onepipe up --etcd` does with its private one): user `root` with `root_password`
    /// and the `root` role (etcd enables authentication only with one), a role
    /// `onepipe-<cluster>` that may read and write this cluster's prefix — the election key,
    /// the log and the metadata — and nothing else, and `user` with `password` and that role.
    ///
    /// # Errors
    /// etcd refused a step (it names the step): e.g. a user or role of those names exists.
    pub fn enable_auth(
        &self,
        root_password: &str,
        user: &str,
        password: &str,
    ) -> Result<(), StoreError> {
        let cluster = self
            .prefix
            .trim_start_matches("/onepipe/")
            .trim_end_matches('/');
        let role = format!("onepipe-{cluster}");
        let fail = |step: &str, e: etcd_client::Error| {
            self.unavailable(Op::Connect, format!("{step}: {e}"))
        };
        let mut c = self.client();
        let rt = &self.rt;
        rt.block_on(c.user_add("root", root_password, None))
            .map_err(|e| fail("adding user root", e))?;
        rt.block_on(c.user_grant_role("root", "root"))
            .map_err(|e| fail("granting root the root role", e))?;
        rt.block_on(c.role_add(role.as_str()))
            .map_err(|e| fail(&format!("adding role {role}"), e))?;
        let perm = Permission::read_write(self.prefix.as_str()).with_prefix();
        rt.block_on(c.role_grant_permission(role.as_str(), perm))
            .map_err(|e| fail(&format!("granting {role} {}", self.prefix), e))?;
        rt.block_on(c.user_add(user, password, None))
            .map_err(|e| fail(&format!("adding user {user}"), e))?;
        rt.block_on(c.user_grant_role(user, role.as_str()))
            .map_err(|e| fail(&format!("granting {user} the role {role}"), e))?;
        rt.block_on(c.auth_enable())
            .map_err(|e| fail("enabling authentication", e))?;
        Ok(())
    }

    /// Sets how many log entries one range request of [`ControllerStore::load`] fetches
    /// (at least 1; [`LOAD_PAGE_ENTRIES`] by default). Loads stay consistent across pages: every
    /// page reads the first page's revision.
    pub fn set_load_page_entries(&mut self, n: i64) {
        self.load_page_entries = n.max(1);
    }

    /// The key prefix of this cluster.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    fn log_key(&self, index: u64) -> String {
        self.key(&format!("log/{index:020}"))
    }

    fn client(&self) -> MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unavailable(&self, op: Op, e: impl std::fmt::Display) -> StoreError {
        StoreError::Unavailable {
            op,
            endpoint: self.endpoint.clone(),
            detail: e.to_string(),
        }
    }

    fn not_leader(&self, op: Op) -> StoreError {
        StoreError::NotLeader {
            op,
            endpoint: self.endpoint.clone(),
        }
    }

    /// The election key's (create revision, value), if it exists.
    fn leader_key(&self, op: Op) -> Result<Option<(i64, String)>, StoreError> {
        let key = self.key("leader");
        let mut c = self.client();
        let resp = self
            .rt
            .block_on(c.get(key, None))
            .map_err(|e| self.unavailable(op, e))?;
        Ok(resp.kvs().first().map(|kv| {
            (
                kv.create_revision(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        }))
    }

    /// One attempt: create the election key under a fresh lease if it is absent.
    fn try_campaign(
        &self,
        candidate: &str,
        lease_ttl: Duration,
    ) -> Result<Option<Leadership>, StoreError> {
        let ttl_s = lease_ttl.as_secs().max(1) as i64;
        let key = self.key("leader");
        let mut c = self.client();
        let grant = self
            .rt
            .block_on(c.lease_grant(ttl_s, None))
            .map_err(|e| self.unavailable(Op::Campaign, e))?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                candidate,
                Some(PutOptions::new().with_lease(grant.id())),
            )]);
        let resp = self
            .rt
            .block_on(c.txn(txn))
            .map_err(|e| self.unavailable(Op::Campaign, e))?;
        if !resp.succeeded() {
            // Somebody else leads: give the unused lease back rather than let it linger.
            let _ = self.rt.block_on(c.lease_revoke(grant.id()));
            return Ok(None);
        }
        // The put created the key in this transaction: its create revision is the revision
        // the transaction committed at.
        let fence = resp
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| self.unavailable(Op::Campaign, "transaction without a header"))?;
        Ok(Some(Leadership {
            candidate: candidate.to_owned(),
            lease: grant.id(),
            fence,
            lease_ttl: Duration::from_secs(grant.ttl().max(1) as u64),
        }))
    }

    /// The next log index for `leadership`, counting the log if another leadership wrote last.
    fn next_index(&self, leadership: &Leadership) -> Result<u64, StoreError> {
        if let Some((fence, next)) = *self.next.lock().unwrap_or_else(|e| e.into_inner()) {
            if fence == leadership.fence {
                return Ok(next);
            }
        }
        let (start, end) = self.log_range();
        let mut c = self.client();
        let resp = self
            .rt
            .block_on(c.get(
                start,
                Some(GetOptions::new().with_range(end).with_count_only()),
            ))
            .map_err(|e| self.unavailable(Op::Append, e))?;
        Ok(resp.count() as u64)
    }

    /// `[start, end)` of the log keys.
    fn log_range(&self) -> (String, String) {
        // '0' follows '/': every "log/…" key sorts below "log0".
        (self.key("log/"), self.key("log0"))
    }

    /// A transaction fenced on `leadership`: `ops` run only while it is current.
    fn fenced_txn(
        &self,
        leadership: &Leadership,
        op: Op,
        ops: Vec<TxnOp>,
        extra: Vec<Compare>,
    ) -> Result<(), StoreError> {
        let leader = self.key("leader");
        let mut compares = vec![Compare::create_revision(
            leader.clone(),
            CompareOp::Equal,
            leadership.fence,
        )];
        compares.extend(extra);
        let txn = Txn::new()
            .when(compares)
            .and_then(ops)
            .or_else([TxnOp::get(leader, None)]);
        let mut c = self.client();
        let resp = self
            .rt
            .block_on(c.txn(txn))
            .map_err(|e| self.unavailable(op, e))?;
        if resp.succeeded() {
            return Ok(());
        }
        let still_leader = resp.op_responses().iter().any(|r| {
            matches!(r, TxnOpResponse::Get(g)
                if g.kvs().first().is_some_and(|kv| kv.create_revision() == leadership.fence))
        });
        if still_leader {
            Err(StoreError::Corrupt {
                op,
                endpoint: self.endpoint.clone(),
                detail: "the log index to write is already taken".into(),
            })
        } else {
            Err(self.not_leader(op))
        }
    }
}

impl ControllerStore for EtcdStore {
    fn campaign(
        &self,
        candidate: &str,
        lease_ttl: Duration,
        wait_max: Duration,
    ) -> Result<Leadership, StoreError> {
        let started = std::time::Instant::now();
        loop {
            // Look before granting a lease, so waiting does not pile leases up.
            let holder = self.leader_key(Op::Campaign)?;
            if holder.is_none() {
                if let Some(won) = self.try_campaign(candidate, lease_ttl)? {
                    return Ok(won);
                }
            }
            let waited = started.elapsed();
            if waited >= wait_max {
                return Err(StoreError::CampaignTimedOut {
                    endpoint: self.endpoint.clone(),
                    holder: holder.map(|(_, name)| name),
                });
            }
            std::thread::sleep(CAMPAIGN_POLL.min(wait_max - waited));
        }
    }

    fn keep_alive(&self, leadership: &Leadership) -> Result<(), StoreError> {
        // Opening the keep-alive stream renews the lease once and reads the answer: a lease
        // that already ended answers with TTL 0, which etcd-client reports as "lease not found".
        let renewed = {
            let mut c = self.client();
            self.rt.block_on(c.lease_keep_alive(leadership.lease))
        };
        match renewed {
            Ok(_) => {}
            Err(etcd_client::Error::LeaseKeepAliveError(m)) if m.contains("lease not found") => {
                return Err(self.not_leader(Op::KeepAlive))
            }
            Err(e) => return Err(self.unavailable(Op::KeepAlive, e)),
        }
        // The lease lives; the election key must still be the one this leadership created.
        if !self.is_leader(leadership)? {
            return Err(self.not_leader(Op::KeepAlive));
        }
        Ok(())
    }

    fn is_leader(&self, leadership: &Leadership) -> Result<bool, StoreError> {
        Ok(self
            .leader_key(Op::Leader)?
            .is_some_and(|(rev, _)| rev == leadership.fence))
    }

    fn leader(&self) -> Result<Option<String>, StoreError> {
        Ok(self.leader_key(Op::Leader)?.map(|(_, name)| name))
    }

    fn resign(&self, leadership: Leadership) -> Result<(), StoreError> {
        // Revoking the lease deletes the election key with it; a lease that already ended is
        // nothing to resign.
        let mut c = self.client();
        match self.rt.block_on(c.lease_revoke(leadership.lease)) {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("lease not found") => Ok(()),
            Err(e) => Err(self.unavailable(Op::Resign, e)),
        }
    }

    fn append(&self, leadership: &Leadership, entry: &[u8]) -> Result<u64, StoreError> {
        let index = self.next_index(leadership)?;
        if index >= LOG_ENTRIES_MAX {
            return Err(StoreError::LogFull {
                endpoint: self.endpoint.clone(),
            });
        }
        let key = self.log_key(index);
        let absent = Compare::create_revision(key.clone(), CompareOp::Equal, 0);
        let put = TxnOp::put(key, entry, None);
        self.fenced_txn(leadership, Op::Append, vec![put], vec![absent])?;
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = Some((leadership.fence, index + 1));
        Ok(index)
    }

    fn load(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        let (mut start, end) = self.log_range();
        let mut revision = 0; // 0: the latest; later pages read the first page's revision
        let mut log = Vec::new();
        let mut c = self.client();
        loop {
            let opts = GetOptions::new()
                .with_range(end.clone())
                .with_limit(self.load_page_entries)
                .with_revision(revision);
            let mut resp = self
                .rt
                .block_on(c.get(start.clone(), Some(opts)))
                .map_err(|e| self.unavailable(Op::Load, e))?;
            if revision == 0 {
                revision = resp.header().map_or(0, |h| h.revision());
            }
            let more = resp.more();
            for kv in resp.take_kvs() {
                let (key, value) = kv.into_key_value();
                let want = self.log_key(log.len() as u64);
                if key != want.as_bytes() {
                    return Err(StoreError::Corrupt {
                        op: Op::Load,
                        endpoint: self.endpoint.clone(),
                        detail: format!("expected {want}, found {}", String::from_utf8_lossy(&key)),
                    });
                }
                start = format!("{want}\0");
                log.push(value);
            }
            if !more {
                return Ok(log);
            }
        }
    }

    fn put_meta(&self, leadership: &Leadership, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let put = TxnOp::put(self.key(&format!("meta/{key}")), value, None);
        self.fenced_txn(leadership, Op::PutMeta, vec![put], Vec::new())
    }

    fn get_meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut c = self.client();
        let mut resp = self
            .rt
            .block_on(c.get(self.key(&format!("meta/{key}")), None))
            .map_err(|e| self.unavailable(Op::GetMeta, e))?;
        Ok(resp.take_kvs().pop().map(|kv| kv.into_key_value().1))
    }
}

/// Without the key or the password.
impl std::fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("tls", &self.tls)
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .finish()
    }
}

/// Without the key.
impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTls")
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoint", &self.endpoint)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}
