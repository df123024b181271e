//! TLS for om's connections: the public gRPC port, the Raft port between
//! members, and the clients (`omctl`, the client library, Raft peers).
//!
//! Certificates, keys and CA bundles are PEM files. Both sides keep the
//! configuration built from them behind a lock and rebuild it when the files
//! change (`Reloader::reload`, run on a timer by the server): Kubernetes
//! rotates a mounted Secret by swapping the files, and new connections then use
//! the new certificate while open ones keep theirs until they close. A change
//! that does not parse (a half-written file, a key that does not match its
//! certificate) is logged and the previous configuration stays.
//!
//! TLS is done here, on plain TCP streams, rather than through tonic's own TLS
//! support, so that a reload reaches new connections without rebuilding
//! channels or servers, and so the server can read the client's certificate
//! chain from the connection it accepted.
//!
//! `net` holds the listening sockets every port of om and om-s3 serves on:
//! capped, with idle and proof timeouts and per-source limits.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

mod names;
pub mod net;

pub use names::{host_of, names_any_host, names_host, server_name};

pub use rustls;
pub use tokio_rustls::client::TlsStream as ClientTlsStream;
pub use tokio_rustls::server::TlsStream as ServerTlsStream;

/// How long a TLS handshake may take before the connection is dropped, so a
/// client that connects and stays silent cannot hold a handshake slot.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a server checks its certificate files for changes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// Largest certificate, key or CA file read (a bundle of a few hundred
/// certificates fits).
pub const MAX_PEM_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {error}")]
    Read { path: PathBuf, error: io::Error },
    #[error("{path}: {what}")]
    Parse { path: PathBuf, what: String },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The PEM files of one side of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// This side's certificate chain (leaf first).
    pub cert: Option<PathBuf>,
    /// The private key of `cert`.
    pub key: Option<PathBuf>,
    /// CA certificates the other side's certificate must chain to.
    pub ca: Option<PathBuf>,
    /// Certificate revocation lists (PEM): a certificate of the other side
    /// that the list of its issuer revokes is refused during the handshake
    /// (the leaf only; a certificate whose issuer has no list here passes).
    /// Reread with the other files; connections already open stay.
    pub crl: Option<PathBuf>,
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    use std::io::Read;
    let err = |error| TlsError::Read {
        path: path.to_path_buf(),
        error,
    };
    let f = std::fs::File::open(path).map_err(err)?;
    let mut buf = Vec::new();
    f.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(err)?;
    if buf.len() as u64 > MAX_PEM_BYTES {
        return Err(TlsError::Parse {
            path: path.to_path_buf(),
            what: format!("larger than {MAX_PEM_BYTES} bytes"),
        });
    }
    Ok(buf)
}

fn parse_certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Parse {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Parse {
            path: path.to_path_buf(),
            what: "no certificate in the file".to_string(),
        });
    }
    Ok(certs)
}

fn parse_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| TlsError::Parse {
        path: path.to_path_buf(),
        what: e.to_string(),
    })
}

fn parse_roots(path: &Path, pem: &[u8]) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in parse_certs(path, pem)? {
        roots.add(c).map_err(|e| TlsError::Parse {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

/// The bytes of every configured file, to tell whether anything changed.
type Snapshot = Vec<Option<Vec<u8>>>;

fn parse_crls(
    path: &Path,
    pem: &[u8],
) -> Result<Vec<rustls::pki_types::CertificateRevocationListDer<'static>>, TlsError> {
    rustls::pki_types::CertificateRevocationListDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Parse {
            path: path.to_path_buf(),
            what: e.to_string(),
        })
}

/// The revocation lists configured, empty when none is.
fn crls_of(
    files: &TlsFiles,
    snap: &Snapshot,
) -> Result<Vec<rustls::pki_types::CertificateRevocationListDer<'static>>, TlsError> {
    let Some(p) = &files.crl else {
        return Ok(Vec::new());
    };
    let crls = parse_crls(p, snap[3].as_deref().unwrap_or_default())?;
    if crls.is_empty() {
        return Err(TlsError::Parse {
            path: p.clone(),
            what: "no revocation list in the file".to_string(),
        });
    }
    Ok(crls)
}

fn snapshot(files: &TlsFiles) -> Result<Snapshot, TlsError> {
    [&files.cert, &files.key, &files.ca, &files.crl]
        .into_iter()
        .map(|p| p.as_deref().map(read).transpose())
        .collect()
}

/// Whether the server asks connecting clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    None,
    /// A client certificate signed by the CA is required (the Raft port).
    Required,
    /// A client certificate is asked for and verified when presented, but a
    /// client may go without one (and authenticate otherwise, with a token).
    Optional,
}

fn server_config(
    files: &TlsFiles,
    snap: &Snapshot,
    auth: ClientAuth,
) -> Result<Arc<ServerConfig>, TlsError> {
    let (Some(cert_path), Some(key_path)) = (&files.cert, &files.key) else {
        return Err(TlsError::Config(
            "a TLS server needs both a certificate and a key".to_string(),
        ));
    };
    let certs = parse_certs(cert_path, snap[0].as_deref().unwrap_or_default())?;
    let key = parse_key(key_path, snap[1].as_deref().unwrap_or_default())?;
    let builder = ServerConfig::builder();
    let builder = match auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Required | ClientAuth::Optional => {
            let Some(ca_path) = &files.ca else {
                return Err(TlsError::Config(
                    "requiring client certificates needs a CA file".to_string(),
                ));
            };
            let roots = parse_roots(ca_path, snap[2].as_deref().unwrap_or_default())?;
            let mut b = WebPkiClientVerifier::builder(roots)
                .with_crls(crls_of(files, snap)?)
                .only_check_end_entity_revocation()
                .allow_unknown_revocation_status();
            if auth == ClientAuth::Optional {
                b = b.allow_unauthenticated();
            }
            let verifier = b.build().map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Parse {
            path: key_path.clone(),
            what: e.to_string(),
        })?;
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

fn client_config(files: &TlsFiles, snap: &Snapshot) -> Result<Arc<ClientConfig>, TlsError> {
    let Some(ca_path) = &files.ca else {
        return Err(TlsError::Config(
            "a TLS client needs the CA file that signed the server's certificate".to_string(),
        ));
    };
    let roots = parse_roots(ca_path, snap[2].as_deref().unwrap_or_default())?;
    let verifier = rustls::client::WebPkiServerVerifier::builder(roots)
        .with_crls(crls_of(files, snap)?)
        .only_check_end_entity_revocation()
        .allow_unknown_revocation_status()
        .build()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = ClientConfig::builder().with_webpki_verifier(verifier);
    let mut cfg = match (&files.cert, &files.key) {
        (Some(cert_path), Some(key_path)) => {
            let certs = parse_certs(cert_path, snap[0].as_deref().unwrap_or_default())?;
            let key = parse_key(key_path, snap[1].as_deref().unwrap_or_default())?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| TlsError::Parse {
                    path: key_path.clone(),
                    what: e.to_string(),
                })?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(TlsError::Config(
                "a client certificate needs its key, and a key its certificate".to_string(),
            ));
        }
    };
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

/// A configuration built from files, rebuilt when they change.
struct Reloading<T> {
    files: TlsFiles,
    state: RwLock<(Snapshot, Arc<T>)>,
    build: fn(&TlsFiles, &Snapshot, ClientAuth) -> Result<Arc<T>, TlsError>,
    auth: ClientAuth,
}

impl<T> Reloading<T> {
    fn load(
        files: TlsFiles,
        auth: ClientAuth,
        build: fn(&TlsFiles, &Snapshot, ClientAuth) -> Result<Arc<T>, TlsError>,
    ) -> Result<Self, TlsError> {
        let snap = snapshot(&files)?;
        let cfg = build(&files, &snap, auth)?;
        Ok(Reloading {
            files,
            state: RwLock::new((snap, cfg)),
            build,
            auth,
        })
    }

    /// When this side's own certificate (the chain's leaf) expires, in
    /// seconds since the epoch; `None` without one.
    fn not_after(&self) -> Option<i64> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let pem = state.0.first()?.as_ref()?;
        let leaf = CertificateDer::pem_slice_iter(pem).next()?.ok()?;
        let (_, cert) = x509_parser::parse_x509_certificate(&leaf).ok()?;
        Some(cert.validity().not_after.timestamp())
    }

    fn current(&self) -> Arc<T> {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// Rereads the files; true when they changed and the new configuration
    /// took effect. Blocking file I/O: call it off the async workers.
    fn reload(&self) -> Result<bool, TlsError> {
        let snap = snapshot(&self.files)?;
        if self.state.read().unwrap_or_else(|e| e.into_inner()).0 == snap {
            return Ok(false);
        }
        let cfg = (self.build)(&self.files, &snap, self.auth)?;
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = (snap, cfg);
        Ok(true)
    }
}

/// Exports when the certificate `name` uses expires
/// (`om_tls_certificate_expiry_timestamp_seconds{name}`), so an alert fires
/// before it does, whatever renews it (cert-manager's CSI driver renews the
/// members' own, which no Certificate resource reports).
fn publish_expiry(name: &str, not_after: Option<i64>) {
    if let Some(t) = not_after {
        metrics::gauge!("om_tls_certificate_expiry_timestamp_seconds", "name" => name.to_string())
            .set(t as f64);
    }
}

/// Something whose certificate files can be reread.
pub trait Reloader: Send + Sync + 'static {
    /// Rereads the files; true when they changed and took effect.
    fn reload(&self) -> Result<bool, TlsError>;
    /// What to call it in logs.
    fn name(&self) -> &str;
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("name", &self.name)
            .field("files", &self.inner.files)
            .finish()
    }
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("name", &self.name)
            .field("files", &self.inner.files)
            .finish()
    }
}

/// The server side of one port.
pub struct ServerTls {
    name: String,
    inner: Reloading<ServerConfig>,
}

impl ServerTls {
    /// Loads `files` for the port called `name`; fails when they cannot be
    /// read or do not make a valid configuration.
    pub fn load(name: &str, files: TlsFiles, auth: ClientAuth) -> Result<Arc<Self>, TlsError> {
        let t = ServerTls {
            name: name.to_string(),
            inner: Reloading::load(files, auth, server_config)?,
        };
        publish_expiry(name, t.inner.not_after());
        Ok(Arc::new(t))
    }

    /// Completes the server side of a handshake on `stream`, within
    /// `HANDSHAKE_TIMEOUT`, with the configuration current at the call.
    pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        stream: S,
    ) -> io::Result<ServerTlsStream<S>> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.inner.current());
        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))?
    }
}

impl Reloader for ServerTls {
    fn reload(&self) -> Result<bool, TlsError> {
        let changed = self.inner.reload()?;
        if changed {
            publish_expiry(&self.name, self.inner.not_after());
        }
        Ok(changed)
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// The client side: the CA to check servers against and, for mutual TLS,
/// this side's certificate.
pub struct ClientTls {
    name: String,
    inner: Reloading<ClientConfig>,
}

impl ClientTls {
    pub fn load(name: &str, files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        let t = ClientTls {
            name: name.to_string(),
            inner: Reloading::load(files, ClientAuth::None, |f, s, _| client_config(f, s))?,
        };
        publish_expiry(name, t.inner.not_after());
        Ok(Arc::new(t))
    }

    /// Completes the client side of a handshake on `stream` to `addr`
    /// (`host:port`): the server's certificate must name `host` (a DNS name,
    /// or an IP address SAN when `host` is an address).
    pub async fn connect(
        &self,
        addr: &str,
        stream: TcpStream,
    ) -> io::Result<ClientTlsStream<TcpStream>> {
        let name = server_name(addr)?;
        let connector = tokio_rustls::TlsConnector::from(self.inner.current());
        tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, stream))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))?
    }
}

impl Reloader for ClientTls {
    fn reload(&self) -> Result<bool, TlsError> {
        let changed = self.inner.reload()?;
        if changed {
            publish_expiry(&self.name, self.inner.not_after());
        }
        Ok(changed)
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// Rereads `r`'s files every `every` until `r` is dropped everywhere else,
/// logging each change that took effect and each that could not.
pub fn spawn_reload(r: Arc<dyn Reloader>, every: Duration) {
    let weak = Arc::downgrade(&r);
    drop(r);
    tokio::spawn(async move {
        let mut last_error = String::new();
        loop {
            tokio::time::sleep(every).await;
            let Some(r) = weak.upgrade() else { return };
            let name = r.name().to_string();
            match tokio::task::spawn_blocking(move || r.reload()).await {
                Ok(Ok(true)) => {
                    tracing::info!(port = %name, "files changed: what they hold is in force now");
                    last_error.clear();
                }
                Ok(Ok(false)) => last_error.clear(),
                Ok(Err(e)) => {
                    let e = e.to_string();
                    if e != last_error {
                        tracing::warn!(port = %name, error = %e, "files changed but cannot be used; keeping the previous ones");
                        last_error = e;
                    }
                }
                Err(_) => return,
            }
        }
    });
}

/// A connection that is plain `S`, or TLS (`T`) over it.
pub enum MaybeTls<S, T> {
    Plain(S),
    Tls(Box<T>),
}

/// A client's connection: plain TCP, or TLS over it.
pub type ClientStream = MaybeTls<TcpStream, ClientTlsStream<TcpStream>>;

/// A server's connection over the accepted stream `S`.
pub type ServerStream<S> = MaybeTls<S, ServerTlsStream<S>>;

/// Opens a connection to `addr` (`host:port`): TCP with no delay, then a TLS
/// handshake when `tls` is given.
pub async fn connect(addr: &str, tls: Option<&ClientTls>) -> io::Result<ClientStream> {
    let addr = addr
        .strip_prefix("https://")
        .or_else(|| addr.strip_prefix("http://"))
        .unwrap_or(addr);
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    match tls {
        None => Ok(MaybeTls::Plain(tcp)),
        Some(t) => Ok(MaybeTls::Tls(Box::new(t.connect(addr, tcp).await?))),
    }
}

impl<S, T> AsyncRead for MaybeTls<S, T>
where
    S: AsyncRead + Unpin,
    T: AsyncRead + Unpin,
{
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<S, T> AsyncWrite for MaybeTls<S, T>
where
    S: AsyncWrite + Unpin,
    T: AsyncWrite + Unpin,
{
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(s) => s.is_write_vectored(),
            MaybeTls::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A stream that knows the address at its other end.
pub trait PeerAddr {
    fn peer_addr(&self) -> Option<std::net::SocketAddr>;

    /// What closes this connection from a request's handler, if it can be.
    fn close_handle(&self) -> Option<ConnHook> {
        None
    }

    /// What marks this connection proven (see the server's `net` module)
    /// from a request's handler, if it can be.
    fn prove_handle(&self) -> Option<ConnHook> {
        None
    }
}

/// Acts on the connection a request came on: closes it (its reads and
/// writes fail from then on), or marks it proven.
#[derive(Clone)]
pub struct ConnHook(pub Arc<dyn Fn() + Send + Sync>);

impl ConnHook {
    pub fn call(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for ConnHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnHook")
    }
}

/// What a request knows of its connection (tonic puts it in the request's
/// extensions): the client's address, over TLS the certificate chain it
/// presented (verified during the handshake), and hooks to close it or mark
/// it proven.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub remote: Option<std::net::SocketAddr>,
    pub peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
    pub close: Option<ConnHook>,
    pub prove: Option<ConnHook>,
}

impl<S> tonic::transport::server::Connected for ServerStream<S>
where
    S: PeerAddr,
{
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match self {
            MaybeTls::Plain(s) => ConnInfo {
                remote: s.peer_addr(),
                peer_certs: None,
                close: s.close_handle(),
                prove: s.prove_handle(),
            },
            MaybeTls::Tls(t) => {
                let (s, session) = t.get_ref();
                ConnInfo {
                    remote: s.peer_addr(),
                    close: s.close_handle(),
                    prove: s.prove_handle(),
                    peer_certs: session
                        .peer_certificates()
                        .map(|c| Arc::new(c.iter().map(|c| c.clone().into_owned()).collect())),
                }
            }
        }
    }
}

/// A connector for tonic channels (`Endpoint::connect_with_connector*`):
/// connects to the URI's authority, over TLS when configured. Use `http://`
/// URIs: TLS is done here, below HTTP/2.
#[derive(Clone, Default)]
pub struct Connector {
    tls: Option<Arc<ClientTls>>,
}

impl Connector {
    pub fn new(tls: Option<Arc<ClientTls>>) -> Self {
        Connector { tls }
    }
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = TokioIo<ClientStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let Some(authority) = uri.authority() else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{uri}: no host:port"),
                ));
            };
            let s = connect(authority.as_str(), tls.as_deref()).await?;
            Ok(TokioIo::new(s))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Ca {
        params: rcgen::CertificateParams,
        key: rcgen::KeyPair,
        cert: rcgen::Certificate,
    }

    fn ca() -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Ca { params, key, cert }
    }

    fn leaf(names: &[&str], ca: &Ca) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let p =
            rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        let issuer = rcgen::Issuer::from_params(&ca.params, &ca.key);
        (
            p.signed_by(&key, &issuer).unwrap().pem(),
            key.serialize_pem(),
        )
    }

    #[test]
    fn a_certificate_names_its_hosts_only() {
        let ca = ca();
        let (pem, _) = leaf(&["127.0.0.2", "om-1.om-peers.ns.svc"], &ca);
        let der = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
        assert!(names_host(&der, "127.0.0.2:9872"));
        assert!(names_host(&der, "om-1.om-peers.ns.svc:9872"));
        assert!(!names_host(&der, "127.0.0.3:9872"));
        assert!(!names_host(&der, "om-2.om-peers.ns.svc:9872"));
    }

    #[test]
    fn a_change_that_does_not_parse_keeps_the_previous_configuration() {
        let ca = ca();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = leaf(&["localhost"], &ca);
        let files = TlsFiles {
            cert: Some(dir.path().join("tls.crt")),
            key: Some(dir.path().join("tls.key")),
            ca: Some(dir.path().join("ca.crt")),
            crl: None,
        };
        std::fs::write(files.cert.as_ref().unwrap(), &cert).unwrap();
        std::fs::write(files.key.as_ref().unwrap(), &key).unwrap();
        std::fs::write(files.ca.as_ref().unwrap(), ca.cert.pem()).unwrap();
        let s = ServerTls::load("test", files.clone(), ClientAuth::Required).unwrap();
        let before = s.inner.current();
        assert!(!s.reload().unwrap(), "nothing changed");
        std::fs::write(files.key.as_ref().unwrap(), "not a key").unwrap();
        assert!(s.reload().is_err());
        assert!(Arc::ptr_eq(&before, &s.inner.current()));
        let (cert2, key2) = leaf(&["localhost"], &ca);
        std::fs::write(files.cert.as_ref().unwrap(), &cert2).unwrap();
        std::fs::write(files.key.as_ref().unwrap(), &key2).unwrap();
        assert!(s.reload().unwrap());
        assert!(!Arc::ptr_eq(&before, &s.inner.current()));
        // A key that does not belong to the certificate is refused.
        std::fs::write(files.key.as_ref().unwrap(), &key).unwrap();
        assert!(s.reload().is_err());
    }
}
