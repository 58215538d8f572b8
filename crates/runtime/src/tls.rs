//! The control channel's protection: TLS 1.3 with mutual authentication (docs/SECURITY.md).
//!
//! Every member and the controller hold [`Credentials`]: the cluster's CA certificate, a
//! certificate the CA signed, and its key. A certificate's DNS names say whom it may act as:
//! `controller`, a member's name (`tor-0`, `p3`), [`ANY_PROCESS`] (any process id: what
//! `Endpoint::join` without an id needs) or [`OPERATOR`] (status only). The controller verifies
//! every member's certificate against the CA and takes a member only in a name its certificate
//! holds ([`Channel::peer_may_act_as`]); members verify the controller's under the name
//! [`CONTROLLER`].
//!
//! [`Pki`] makes a CA and certificates (for `onepipe up`, `onepipe topology --pki` and
//! [`crate::LocalCluster`]). [`Channel`] is one TCP connection, plain or TLS, split into a
//! reader and a writer that two threads may use at once: socket reads happen outside the
//! session's lock, so a reader waiting for input never holds up a writer.
//!
//! What it is not: the data path's protection ([`crate::auth`]).

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The controller's certificate name, which members verify.
pub const CONTROLLER: &str = "controller";
/// A certificate name that may join as any process (`JoinAs::Process(None)`).
pub const ANY_PROCESS: &str = "process";
/// A certificate name that may ask for status only (`onepipe up`, an operator's tools).
pub const OPERATOR: &str = "operator";

/// Bytes read from the socket at a time: small enough that the plaintext it holds always fits
/// rustls's receive buffer (16 KiB), which is empty whenever the socket is read.
const READ_CHUNK: usize = 4096;

/// A party's TLS identity: the CA it trusts, its certificate and its key. Cheap to clone.
#[derive(Clone)]
pub struct Credentials {
    inner: Arc<CredentialsInner>,
}

struct CredentialsInner {
    ca: CertificateDer<'static>,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials(..)")
    }
}

impl Credentials {
    /// From PEM texts: the CA's certificate, this party's certificate and its PKCS#8 key.
    ///
    /// # Errors
    /// A text that is not what it should be (the message says which).
    pub fn from_pem(ca: &str, cert: &str, key: &str) -> Result<Credentials, String> {
        let ca = CertificateDer::from_pem_slice(ca.as_bytes())
            .map_err(|e| format!("CA certificate: {e}"))?;
        let cert = CertificateDer::from_pem_slice(cert.as_bytes())
            .map_err(|e| format!("certificate: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
            .map_err(|e| format!("private key: {e}"))?;
        Ok(Credentials {
            inner: Arc::new(CredentialsInner { ca, cert, key }),
        })
    }

    /// Reads `ca.crt`, `NAME.crt` and `NAME.key` from `dir` (what [`Pki::write_dir`] writes).
    ///
    /// # Errors
    /// A file missing or unreadable: the message names it.
    pub fn load(dir: &Path, name: &str) -> Result<Credentials, String> {
        let read = |file: String| {
            let path = dir.join(&file);
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
        };
        let (ca, cert, key) = (
            read("ca.crt".into())?,
            read(format!("{name}.crt"))?,
            read(format!("{name}.key"))?,
        );
        Credentials::from_pem(&ca, &cert, &key).map_err(|e| format!("{}: {e}", dir.display()))
    }

    fn roots(&self) -> Result<Arc<RootCertStore>, String> {
        let mut roots = RootCertStore::empty();
        roots
            .add(self.inner.ca.clone())
            .map_err(|e| format!("CA certificate: {e}"))?;
        Ok(Arc::new(roots))
    }

    /// The controller's side: TLS 1.3, a certificate from every client, verified against the
    /// CA; no session tickets (nothing to resume).
    ///
    /// # Errors
    /// The certificates or key are unusable.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(self.roots()?, provider.clone())
            .build()
            .map_err(|e| format!("client verifier: {e}"))?;
        let mut cfg = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.inner.cert.clone()], self.inner.key.clone_key())
            .map_err(|e| format!("certificate: {e}"))?;
        cfg.send_tls13_tickets = 0;
        Ok(Arc::new(cfg))
    }

    /// A member's side: TLS 1.3, the controller verified against the CA under [`CONTROLLER`],
    /// this certificate presented.
    ///
    /// # Errors
    /// The certificates or key are unusable.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut cfg = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| e.to_string())?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(vec![self.inner.cert.clone()], self.inner.key.clone_key())
            .map_err(|e| format!("certificate: {e}"))?;
        cfg.resumption = rustls::client::Resumption::disabled();
        Ok(Arc::new(cfg))
    }
}

/// A certificate authority for one cluster, and the certificates it issues.
pub struct Pki {
    params: CertificateParams,
    key: KeyPair,
    ca_pem: String,
}

impl fmt::Debug for Pki {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Pki(..)")
    }
}

impl Pki {
    /// A fresh CA (ECDSA P-256). Certificates carry rcgen's default validity (no expiry in
    /// practice): a cluster's CA is replaced, not renewed.
    ///
    /// # Errors
    /// Key generation or signing failed.
    pub fn generate() -> Result<Pki, String> {
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "onepipe cluster CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = params.self_signed(&key).map_err(|e| e.to_string())?;
        Ok(Pki {
            ca_pem: ca.pem(),
            params,
            key,
        })
    }

    /// The CA's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A certificate for `names` (its DNS names: whom it may act as) and its key, as PEM.
    ///
    /// # Errors
    /// A name that is not a DNS name, or signing failed.
    pub fn issue_pem(&self, names: &[&str]) -> Result<(String, String), String> {
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let owned: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params =
            CertificateParams::new(owned).map_err(|e| format!("names {names:?}: {e}"))?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("member"),
        );
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).map_err(|e| e.to_string())?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// [`Credentials`] for `names`.
    ///
    /// # Errors
    /// As [`Pki::issue_pem`].
    pub fn issue(&self, names: &[&str]) -> Result<Credentials, String> {
        let (cert, key) = self.issue_pem(names)?;
        Credentials::from_pem(&self.ca_pem, &cert, &key)
    }

    /// Writes `ca.crt`, `ca.key` and, for each name, `NAME.crt` and `NAME.key` into `dir`
    /// (created if missing; keys readable by their owner only).
    ///
    /// # Errors
    /// A file could not be written, or a name is not a DNS name.
    pub fn write_dir(&self, dir: &Path, names: &[String]) -> Result<(), String> {
        let at = |f: &str| dir.join(f);
        let err = |p: &Path, e: io::Error| format!("{}: {e}", p.display());
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
        std::fs::write(at("ca.crt"), &self.ca_pem).map_err(|e| err(&at("ca.crt"), e))?;
        crate::auth::write_private(&at("ca.key"), self.key.serialize_pem().as_bytes())
            .map_err(|e| err(&at("ca.key"), e))?;
        for name in names {
            let (cert, key) = self.issue_pem(&[name])?;
            let (c, k) = (at(&format!("{name}.crt")), at(&format!("{name}.key")));
            std::fs::write(&c, cert).map_err(|e| err(&c, e))?;
            crate::auth::write_private(&k, key.as_bytes()).map_err(|e| err(&k, e))?;
        }
        Ok(())
    }
}

/// A rustls session of either side.
enum Session {
    Client(ClientConnection),
    Server(ServerConnection),
}

macro_rules! either {
    ($s:expr, $c:ident => $e:expr) => {
        match $s {
            Session::Client($c) => $e,
            Session::Server($c) => $e,
        }
    };
}

/// One control connection, plain or TLS. See the module docs.
pub struct Channel {
    tcp: TcpStream,
    tls: Option<Arc<Mutex<Session>>>,
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("peer", &self.tcp.peer_addr().ok())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Channel {
    /// A plain TCP connection.
    pub fn plain(tcp: TcpStream) -> Channel {
        Channel { tcp, tls: None }
    }

    /// A member's TLS connection to the controller: the handshake, within `timeout`.
    ///
    /// # Errors
    /// The handshake failed (the controller's certificate, ours, or a controller without TLS:
    /// the message says so).
    pub fn client(
        tcp: TcpStream,
        cfg: Arc<ClientConfig>,
        timeout: Duration,
    ) -> io::Result<Channel> {
        let name = ServerName::try_from(CONTROLLER).expect("a valid DNS name");
        let conn = ClientConnection::new(cfg, name).map_err(io::Error::other)?;
        let mut s = Session::Client(conn);
        handshake(&tcp, &mut s, timeout).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("TLS handshake with the controller: {e} (does the cluster file have auth = \"off\" there, or another CA?)"),
            )
        })?;
        Ok(Channel {
            tcp,
            tls: Some(Arc::new(Mutex::new(s))),
        })
    }

    /// The controller's side of a new connection: the handshake within `timeout`. A client
    /// that speaks plain JSON instead is told, in one plain line, that TLS is required, and
    /// refused (`PermissionDenied`).
    ///
    /// # Errors
    /// The handshake failed, or the client is not speaking TLS.
    pub fn server(
        tcp: TcpStream,
        cfg: Arc<ServerConfig>,
        timeout: Duration,
    ) -> io::Result<Channel> {
        tcp.set_read_timeout(Some(timeout))?;
        let mut first = [0u8; 1];
        // 0x16: a TLS handshake record. Anything else is not TLS.
        if tcp.peek(&mut first)? == 1 && first[0] != 0x16 {
            let msg = crate::control::FromController::Error {
                message: "this controller requires TLS (the cluster file has auth on): give the member the cluster's certificates".into(),
            };
            let mut w = &tcp;
            let _ = crate::control::write_line(&mut w, &msg);
            let _ = tcp.shutdown(std::net::Shutdown::Both);
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a client without TLS",
            ));
        }
        let conn = ServerConnection::new(cfg).map_err(io::Error::other)?;
        let mut s = Session::Server(conn);
        handshake(&tcp, &mut s, timeout)?;
        Ok(Channel {
            tcp,
            tls: Some(Arc::new(Mutex::new(s))),
        })
    }

    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Whether the peer's certificate (TLS) holds `name`. `false` on a plain connection.
    pub fn peer_may_act_as(&self, name: &str) -> bool {
        let Some(tls) = &self.tls else {
            return false;
        };
        let s = lock(tls);
        let certs = either!(&*s, c => c.peer_certificates());
        let Some(cert) = certs.and_then(|c| c.first()) else {
            return false;
        };
        let (Ok(ee), Ok(sn)) = (
            webpki::EndEntityCert::try_from(cert),
            ServerName::try_from(name),
        ) else {
            return false;
        };
        ee.verify_is_valid_for_subject_name(&sn).is_ok()
    }

    /// Whether this connection is TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The reading half (a clone of the socket; TLS records opened under the session's lock,
    /// the socket read outside it).
    ///
    /// # Errors
    /// The socket could not be cloned.
    pub fn reader(&self) -> io::Result<ChannelReader> {
        Ok(ChannelReader {
            tcp: self.tcp.try_clone()?,
            tls: self.tls.clone(),
            buf: vec![0; READ_CHUNK],
        })
    }

    /// The writing half (a clone of the socket; one writer's record at a time).
    ///
    /// # Errors
    /// The socket could not be cloned.
    pub fn writer(&self) -> io::Result<ChannelWriter> {
        Ok(ChannelWriter {
            tcp: self.tcp.try_clone()?,
            tls: self.tls.clone(),
        })
    }
}

fn lock(s: &Mutex<Session>) -> MutexGuard<'_, Session> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn handshake(tcp: &TcpStream, s: &mut Session, timeout: Duration) -> io::Result<()> {
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    let mut io = tcp;
    while either!(&*s, c => c.is_handshaking()) {
        either!(&mut *s, c => c.complete_io(&mut io))?;
    }
    // Whatever the handshake left to send (the client's Finished).
    while either!(&*s, c => c.wants_write()) {
        either!(&mut *s, c => c.write_tls(&mut io))?;
    }
    Ok(())
}

/// The reading half of a [`Channel`].
pub struct ChannelReader {
    tcp: TcpStream,
    tls: Option<Arc<Mutex<Session>>>,
    buf: Vec<u8>,
}

impl ChannelReader {
    /// Sets the socket's read timeout (a read that times out returns `WouldBlock` or
    /// `TimedOut`, having lost nothing).
    ///
    /// # Errors
    /// As [`TcpStream::set_read_timeout`].
    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.tcp.set_read_timeout(d)
    }
}

impl Read for ChannelReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = &self.tls else {
            return self.tcp.read(out);
        };
        loop {
            {
                let mut s = lock(tls);
                match either!(&mut *s, c => c.reader().read(out)) {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            // Outside the lock: a writer is never held up by a reader waiting for input.
            let n = self.tcp.read(&mut self.buf)?;
            if n == 0 {
                return Ok(0);
            }
            let mut s = lock(tls);
            let mut data = &self.buf[..n];
            while !data.is_empty() {
                either!(&mut *s, c => c.read_tls(&mut data))?;
                either!(&mut *s, c => c.process_new_packets())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
            // Rare after the handshake (an alert, a key update): sent under the lock, so it
            // does not interleave with a writer's record.
            let mut w = &self.tcp;
            while either!(&*s, c => c.wants_write()) {
                either!(&mut *s, c => c.write_tls(&mut w))?;
            }
        }
    }
}

/// The writing half of a [`Channel`].
pub struct ChannelWriter {
    tcp: TcpStream,
    tls: Option<Arc<Mutex<Session>>>,
}

impl ChannelWriter {
    /// Another writer of the same connection.
    ///
    /// # Errors
    /// The socket could not be cloned.
    pub fn try_clone(&self) -> io::Result<ChannelWriter> {
        Ok(ChannelWriter {
            tcp: self.tcp.try_clone()?,
            tls: self.tls.clone(),
        })
    }

    /// Shuts the connection down.
    ///
    /// # Errors
    /// As [`TcpStream::shutdown`].
    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        self.tcp.shutdown(how)
    }

    /// Sets the socket's write timeout.
    ///
    /// # Errors
    /// As [`TcpStream::set_write_timeout`].
    pub fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.tcp.set_write_timeout(d)
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let Some(tls) = &self.tls else {
            return self.tcp.write(data);
        };
        let mut s = lock(tls);
        let n = either!(&mut *s, c => c.writer().write(data))?;
        let mut w = &self.tcp;
        while either!(&*s, c => c.wants_write()) {
            either!(&mut *s, c => c.write_tls(&mut w))?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&self.tcp).flush()
    }
}

#[cfg(test)]
mod tests;
