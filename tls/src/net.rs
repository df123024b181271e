//! Listening sockets that cannot be flooded: each port has a cap on
//! concurrent connections, connections that stay silent are closed, and the
//! accept loop survives running out of descriptors.
//!
//! - **Cap.** A connection takes one permit of its port for as long as it is
//!   open. One accepted past the cap is reset at once (zero linger, so no
//!   TIME_WAIT either): clients learn immediately instead of waiting in the
//!   kernel's backlog, and the caps (see `limits`) keep the descriptors that
//!   RocksDB, snapshots and Raft peers need.
//! - **Idle timeout.** A connection on which nothing was read or written for
//!   the port's idle timeout is closed. gRPC ports also send HTTP/2 keepalive
//!   pings at a third of it, so a live client (which answers pings) is never
//!   idle, while a socket that never speaks (or a peer that vanished) is.
//! - **Strangers.** A connection starts unproven and must prove itself
//!   within the port's `prove_timeout`, or it is closed: by finishing its
//!   TLS handshake (on the Raft port with a member's certificate; a
//!   non-member's connection is closed right after it), by its first
//!   authenticated request (the public port, when credentials are
//!   required), or, without TLS, by its first bytes (an HTTP/2 port: the
//!   whole client preface). Unproven connections share a pool of a quarter
//!   of the cap (`pending`), one address at most a quarter of it; when the
//!   pool is full the oldest unproven connection is closed to make room, so a
//!   client that proves itself quickly always gets in. One address holds at
//!   most `per_source` connections in all. Whatever strangers do, they hold
//!   at most the pool, and the rest of the cap is left to proven
//!   connections. An address whose connection proved membership on the Raft
//!   port is trusted for an hour after its last member connection: its new
//!   connections wait for their handshake in a pool of their own
//!   (`member_pending` per address, the address's oldest closed to make
//!   room), so strangers filling the shared pool, or silent sockets opened
//!   from a member's own address, never keep a member out; it still holds
//!   at most `per_source` connections (at least `MEMBER_PER_SOURCE`), each
//!   under the idle and prove timeouts. Addresses behind one NAT share their limits. A handler can
//!   close the connection a request came on (`ConnInfo::close`).
//! - **Reserve.** The last `reserve` permits of a port go only to an address
//!   that holds no connection there: a few busy addresses cannot take every
//!   slot of the probe port from the kubelet's probes.
//! - **Accept errors.** EMFILE, ENFILE, ENOBUFS and ENOMEM do not end the
//!   server (axum would sleep a second, tonic would retry at once and spin):
//!   the loop backs off exponentially (`accept_backoff`) and tries again, and
//!   logs once per episode. Errors that belong to one aborted connection are
//!   skipped.
//! - **Closing.** Servers spawn a task per connection that outlives the
//!   server's own future and, when stopped gracefully, waits for the streams
//!   in flight, which a peer may keep open indefinitely (a Raft peer's
//!   append stream). A stopping node closes them with its ports' `Closer`s:
//!   every read and write of their connections fails from then on, so the
//!   connection tasks end and release what their services hold (the Raft
//!   handle, the database).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::futures::OwnedNotified;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// How one listening port treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct PortPolicy {
    /// Label in metrics and logs: "grpc", "raft" or "http".
    pub name: &'static str,
    pub max_connections: usize,
    pub idle_timeout: Duration,
    /// Most connections one source address may hold.
    pub per_source: usize,
    /// Most unproven connections at once (trusted sources aside).
    pub pending: usize,
    /// Most unproven connections of one trusted (member) address.
    pub member_pending: usize,
    /// Permits kept for addresses holding no connection on the port.
    pub reserve: usize,
    /// How long a connection may stay unproven.
    pub prove_timeout: Duration,
    /// Without TLS, a connection is proven once it sent this many bytes (0:
    /// only by `prove`).
    pub proof_bytes: usize,
}

/// Unproven connections a member's address may have at once: more than a
/// member opens to one peer (a channel or two) while reconnecting.
pub const MEMBER_PENDING: usize = 8;
/// Connections a member's address may hold, whatever `per_source` is: its
/// Raft, forwarding and status channels to this node, with room to spare.
pub const MEMBER_PER_SOURCE: usize = 16;

/// How long a connection may take to prove itself by default: finish its
/// TLS handshake, or send its first bytes.
pub const PROVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes a plaintext HTTP/2 connection proves itself with: the client
/// connection preface.
pub const H2_PREFACE_BYTES: usize = 24;

mod strangers;
use strangers::{Admitted, Pool, SourceGuard, Sources, Unproven};

impl PortPolicy {
    /// A port of `max_connections`: one source may hold an eighth of them
    /// (at least 4), unproven connections a quarter (at least 4; one source
    /// a quarter of those, at least 1), for `PROVE_TIMEOUT` each; without
    /// TLS a connection's first byte proves it (set `proof_bytes` to
    /// `H2_PREFACE_BYTES` for gRPC ports).
    pub fn new(name: &'static str, max_connections: usize, idle_timeout: Duration) -> Self {
        PortPolicy {
            name,
            max_connections,
            idle_timeout,
            per_source: (max_connections / 8).max(4),
            pending: (max_connections / 4).max(4),
            member_pending: MEMBER_PENDING,
            reserve: 0,
            prove_timeout: PROVE_TIMEOUT,
            proof_bytes: 1,
        }
    }

    /// Interval (and ack timeout) of the HTTP/2 keepalive pings the gRPC
    /// servers send: a third of the idle timeout, so a client that answers is
    /// heard from well before it could be taken for idle.
    pub fn keepalive(&self) -> Duration {
        (self.idle_timeout / 3).max(Duration::from_millis(100))
    }
}

/// Counters of one port, also exported as `om_net_*` metrics.
#[derive(Debug, Default)]
pub struct PortStats {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub idle_closed: AtomicU64,
    pub accept_errors: AtomicU64,
    pub open: AtomicU64,
    /// Reset because their source held `per_source` connections already.
    pub source_refused: AtomicU64,
    /// Reset because only the reserve was left and their source held a
    /// connection already.
    pub reserve_refused: AtomicU64,
    /// Reset because their source held its share of the unproven pool.
    pub pending_refused: AtomicU64,
    /// Unproven connections closed to make room for a newer one.
    pub evicted: AtomicU64,
    /// Closed for not proving themselves in time, or, on the Raft port, for
    /// a certificate that names no member.
    pub unproven_closed: AtomicU64,
}

/// First wait after an accept error.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
/// Longest wait between accept attempts while errors persist.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The wait before the next accept after `failures` consecutive accept
/// errors: doubling from `ACCEPT_BACKOFF_MIN`, capped at `ACCEPT_BACKOFF_MAX`.
pub fn accept_backoff(failures: u32) -> Duration {
    let shift = failures.saturating_sub(1).min(16);
    (ACCEPT_BACKOFF_MIN * (1u32 << shift)).min(ACCEPT_BACKOFF_MAX)
}

/// Whether an accept error concerns only the connection being accepted (the
/// listener is fine and the next accept can follow at once).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Something that accepts TCP connections: the real listener, or a test
/// double that injects errors.
pub trait Acceptor: Send + 'static {
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>>;
    fn local_addr(&self) -> io::Result<SocketAddr>;
}

impl Acceptor for TcpListener {
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        TcpListener::poll_accept(self, cx)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        TcpListener::local_addr(self)
    }
}

/// Closes every connection of one port at once (see the module's "Closing").
#[derive(Clone, Default)]
pub struct Closer(Arc<CloserState>);

#[derive(Default)]
struct CloserState {
    closed: AtomicBool,
    notify: Arc<Notify>,
}

impl Closer {
    /// Fails every read and write of the port's connections from now on,
    /// including those waiting for the peer.
    pub fn close(&self) {
        self.0.closed.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::SeqCst)
    }

    fn closed_error() -> io::Error {
        io::Error::new(io::ErrorKind::ConnectionAborted, "the node is stopping")
    }
}

/// A listener that enforces a `PortPolicy`.
pub struct LimitedListener<A = TcpListener> {
    acceptor: A,
    policy: PortPolicy,
    permits: Arc<Semaphore>,
    pool: Arc<Pool>,
    /// Trusted addresses' unproven connections.
    member_pool: Arc<Pool>,
    sources: Arc<Sources>,
    stats: Arc<PortStats>,
    closer: Closer,
    failures: u32,
}

impl<A: Acceptor> LimitedListener<A> {
    pub fn new(acceptor: A, policy: PortPolicy) -> Self {
        LimitedListener {
            acceptor,
            policy,
            permits: Arc::new(Semaphore::new(policy.max_connections)),
            pool: Arc::new(Pool::new(
                policy.pending.min(policy.max_connections),
                (policy.pending / 4).max(1),
            )),
            member_pool: Arc::new(Pool::for_members(
                policy.member_pending.min(policy.max_connections),
            )),
            sources: Arc::default(),
            stats: Arc::default(),
            closer: Closer::default(),
            failures: 0,
        }
    }

    pub fn stats(&self) -> Arc<PortStats> {
        self.stats.clone()
    }

    /// Closes every connection this listener accepted, and those it accepts
    /// later.
    pub fn closer(&self) -> Closer {
        self.closer.clone()
    }

    /// The next connection within the cap. Never fails: errors are retried
    /// (with backoff when they are the listener's), connections past the cap
    /// are reset.
    pub async fn accept_limited(&mut self) -> (LimitedStream, SocketAddr) {
        let port = self.policy.name;
        loop {
            let r = std::future::poll_fn(|cx| self.acceptor.poll_accept(cx)).await;
            let (stream, addr) = match r {
                Ok(c) => c,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    self.failures += 1;
                    self.stats.accept_errors.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("om_net_accept_errors_total", "port" => port).increment(1);
                    if self.failures == 1 {
                        tracing::warn!(port, error = %e, "accept failed; backing off until it succeeds");
                    }
                    tokio::time::sleep(accept_backoff(self.failures)).await;
                    continue;
                }
            };
            if self.failures > 0 {
                tracing::info!(port, failures = self.failures, "accepting again");
                self.failures = 0;
            }
            let ip = addr.ip();
            let refuse = |stream: TcpStream, counter: &AtomicU64, metric: &'static str| {
                let n = counter.fetch_add(1, Ordering::Relaxed) + 1;
                metrics::counter!(metric, "port" => port).increment(1);
                // Logged at 1, 2, 4, 8... refusals: a flood cannot flood the log.
                if n.is_power_of_two() {
                    tracing::warn!(port, %ip, refused = n, metric, "connection reset");
                }
                let _ = stream.set_zero_linger();
                drop(stream);
            };
            let available = self.permits.available_permits();
            if available > 0 && available <= self.policy.reserve && self.sources.count(ip) > 0 {
                refuse(
                    stream,
                    &self.stats.reserve_refused,
                    "om_net_connections_reserve_refused_total",
                );
                continue;
            }
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                refuse(
                    stream,
                    &self.stats.refused,
                    "om_net_connections_refused_total",
                );
                continue;
            };
            // A member opens a few connections to each peer: its address
            // may hold at least `MEMBER_PER_SOURCE`.
            let trusted = self.sources.is_trusted(ip);
            let cap = match trusted {
                true => self.policy.per_source.max(MEMBER_PER_SOURCE),
                false => self.policy.per_source,
            };
            if !self.sources.take(ip, cap) {
                refuse(
                    stream,
                    &self.stats.source_refused,
                    "om_net_connections_per_source_refused_total",
                );
                continue;
            }
            let source = SourceGuard {
                ip,
                sources: self.sources.clone(),
                member: AtomicBool::new(false),
            };
            let conn = Closer::default();
            let pool = match trusted {
                true => &self.member_pool,
                false => &self.pool,
            };
            let unproven = {
                match pool.admit(ip, conn.clone()) {
                    Admitted::In(u) => Some(u),
                    Admitted::Evicted(u) => {
                        self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                        metrics::counter!("om_net_connections_unproven_evicted_total", "port" => port)
                            .increment(1);
                        Some(u)
                    }
                    Admitted::Refused => {
                        drop(source);
                        refuse(
                            stream,
                            &self.stats.pending_refused,
                            "om_net_connections_unproven_refused_total",
                        );
                        continue;
                    }
                }
            };
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(error = %e, "set_nodelay");
            }
            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            let open = self.stats.open.fetch_add(1, Ordering::Relaxed) + 1;
            metrics::gauge!("om_net_connections", "port" => port).set(open as f64);
            let conn_closing = Box::pin(conn.0.notify.clone().notified_owned());
            let stream = LimitedStream {
                inner: stream,
                idle: self.policy.idle_timeout,
                last_activity: Instant::now(),
                timer: Box::pin(tokio::time::sleep(self.policy.idle_timeout)),
                closing: Box::pin(self.closer.0.notify.clone().notified_owned()),
                closer: self.closer.clone(),
                conn,
                conn_closing,
                stats: self.stats.clone(),
                port,
                _permit: permit,
                source,
                proof: Arc::new(Proof {
                    proven: AtomicBool::new(unproven.is_none()),
                    unproven,
                    pool: pool.clone(),
                }),
                proof_bytes: self.policy.proof_bytes,
                read_bytes: 0,
                prove_timer: Box::pin(tokio::time::sleep(self.policy.prove_timeout)),
            };
            return (stream, addr);
        }
    }

    /// The listener as the stream of connections tonic serves, over TLS when
    /// `tls` is given; it never yields an error. A connection proves itself
    /// as `proof` says. Handshakes run in their own tasks (each bounded by
    /// the port's `prove_timeout` and `crate::HANDSHAKE_TIMEOUT`, and holding
    /// its connection's permits), so a slow client delays no other; a failed
    /// handshake closes the connection and is counted. The accept task ends
    /// when the server drops the stream, releasing the port.
    pub fn into_incoming(
        self,
        tls: Option<Arc<crate::ServerTls>>,
        proof: ProveBy,
    ) -> std::pin::Pin<Box<dyn futures::Stream<Item = io::Result<Conn>> + Send>> {
        let Some(tls) = tls else {
            return Box::pin(futures::stream::unfold(
                (self, proof),
                |(mut l, proof)| async move {
                    let (mut s, _) = l.accept_limited().await;
                    if matches!(proof, ProveBy::Request) {
                        s.prove_by_others();
                    }
                    Some((Ok(crate::MaybeTls::Plain(s)), (l, proof)))
                },
            ));
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Conn>>(64);
        let mut l = self;
        tokio::spawn(async move {
            let port = l.policy.name;
            loop {
                let (mut s, addr) = tokio::select! {
                    _ = tx.closed() => return,
                    c = l.accept_limited() => c,
                };
                s.prove_by_others();
                let (tx, tls, proof) = (tx.clone(), tls.clone(), proof.clone());
                let stats = l.stats.clone();
                tokio::spawn(async move {
                    let t = match tls.accept(s).await {
                        Ok(t) => crate::MaybeTls::Tls(Box::new(t)),
                        Err(e) => {
                            metrics::counter!("om_net_tls_handshake_failures_total", "port" => port)
                                .increment(1);
                            tracing::debug!(port, %addr, error = %e, "TLS handshake failed");
                            return;
                        }
                    };
                    let crate::MaybeTls::Tls(inner) = &t else {
                        unreachable!()
                    };
                    let stream = inner.get_ref().0;
                    match &proof {
                        ProveBy::Handshake => stream.prove(),
                        ProveBy::Request => {}
                        ProveBy::Member(admit) => {
                            use tonic::transport::server::Connected;
                            if !admit(&t.connect_info()) {
                                stats.unproven_closed.fetch_add(1, Ordering::Relaxed);
                                metrics::counter!("om_net_connections_unproven_closed_total", "port" => port)
                                    .increment(1);
                                tracing::debug!(port, %addr, "closed after the handshake: not a member");
                                return;
                            }
                            stream.trust_source();
                            stream.prove();
                        }
                    }
                    let _ = tx.send(Ok(t)).await;
                });
            }
        });
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
    }
}

/// How a gRPC port's connections prove themselves (see the module's
/// "Strangers"); without TLS, by their first `PortPolicy::proof_bytes`
/// unless `Request`.
#[derive(Clone)]
pub enum ProveBy {
    /// Finishing the TLS handshake.
    Handshake,
    /// Finishing the TLS handshake with a certificate `Admit` takes for a
    /// member's; another is closed at once, and the member's address is
    /// trusted.
    Member(Admit),
    /// Their first authenticated request (`ConnInfo::prove`), the public
    /// port's when credentials are required.
    Request,
}

/// Decides, from a finished handshake, whether a connection may stay.
pub type Admit = Arc<dyn Fn(&ConnInfo) -> bool + Send + Sync>;

/// A connection a gRPC port serves: plain, or TLS over a `LimitedStream`.
pub type Conn = crate::ServerStream<LimitedStream>;

/// What a request knows of its connection.
pub use crate::ConnInfo;

impl crate::PeerAddr for LimitedStream {
    fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.peer_addr().ok()
    }

    fn close_handle(&self) -> Option<crate::ConnHook> {
        let conn = self.conn.clone();
        Some(crate::ConnHook(Arc::new(move || conn.close())))
    }

    fn prove_handle(&self) -> Option<crate::ConnHook> {
        let proof = self.proof.clone();
        Some(crate::ConnHook(Arc::new(move || proof.prove())))
    }
}

impl<A: Acceptor> axum::serve::Listener for LimitedListener<A> {
    type Io = LimitedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (LimitedStream, SocketAddr) {
        self.accept_limited().await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.acceptor.local_addr()
    }
}

/// An accepted connection: holds its port's permit, closes itself after
/// the idle timeout without traffic or when it does not prove itself in
/// time, and fails once its port (or the connection itself) is closed.
pub struct LimitedStream {
    inner: TcpStream,
    idle: Duration,
    last_activity: Instant,
    timer: Pin<Box<Sleep>>,
    /// Completes when the port's `Closer` closes (created with the stream,
    /// so a close between creation and the first poll is not missed).
    closing: Pin<Box<OwnedNotified>>,
    closer: Closer,
    /// This connection's own closer (see `close_handle`), and its wake-up.
    conn: Closer,
    conn_closing: Pin<Box<OwnedNotified>>,
    stats: Arc<PortStats>,
    port: &'static str,
    _permit: OwnedSemaphorePermit,
    source: SourceGuard,
    proof: Arc<Proof>,
    /// Without TLS, proven once this many bytes were read (0: never so).
    proof_bytes: usize,
    read_bytes: usize,
    prove_timer: Pin<Box<Sleep>>,
}

/// Whether a connection proved itself, and its place in the unproven pool
/// until it does.
struct Proof {
    proven: AtomicBool,
    unproven: Option<Arc<Unproven>>,
    pool: Arc<Pool>,
}

impl Proof {
    fn prove(&self) {
        if !self.proven.swap(true, Ordering::Relaxed)
            && let Some(u) = &self.unproven
        {
            self.pool.release(u);
        }
    }
}

impl Drop for Proof {
    fn drop(&mut self) {
        if let Some(u) = &self.unproven {
            self.pool.release(u);
        }
    }
}

impl LimitedStream {
    /// The connection proved itself: it leaves the unproven pool and its
    /// prove deadline no longer applies.
    pub fn prove(&self) {
        self.proof.prove();
    }

    /// The connection proved membership: its address is trusted from now on,
    /// and again when the connection ends (see the module's "Strangers").
    pub fn trust_source(&self) {
        self.source.member.store(true, Ordering::Relaxed);
        self.source.sources.trust(self.source.ip);
    }

    /// Stops its first bytes from proving the connection: TLS, or a port
    /// where only an authenticated request does.
    fn prove_by_others(&mut self) {
        self.proof_bytes = 0;
    }

    fn is_proven(&self) -> bool {
        self.proof.proven.load(Ordering::Relaxed)
    }

    /// Errors once the port or the connection is closed (a flag read: every
    /// read and write checks it).
    fn check_closed(&self) -> io::Result<()> {
        if self.closer.is_closed() || self.conn.is_closed() {
            return Err(Closer::closed_error());
        }
        Ok(())
    }

    /// For an operation about to wait: errors if the port or connection is
    /// closed, otherwise registers `cx` to be woken when either closes.
    fn poll_closed(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.check_closed().is_err()
            || self.closing.as_mut().poll(cx).is_ready()
            || self.conn_closing.as_mut().poll(cx).is_ready()
        {
            return Err(Closer::closed_error());
        }
        Ok(())
    }

    /// Errors once the prove deadline passed on an unproven connection,
    /// otherwise registers `cx` to be woken at it.
    fn poll_unproven(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.is_proven() || self.prove_timer.as_mut().poll(cx).is_pending() {
            return Ok(());
        }
        self.stats.unproven_closed.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("om_net_connections_unproven_closed_total", "port" => self.port)
            .increment(1);
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the connection did not prove itself in time",
        ))
    }

    /// What a waiting write or flush returns: still pending, unless the
    /// port closed meanwhile.
    fn pending_unless_closed<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.poll_closed(cx) {
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Arms the idle timer for the current deadline; errors once it passed.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        loop {
            let deadline = self.last_activity + self.idle;
            if self.timer.deadline() != deadline {
                self.timer.as_mut().reset(deadline);
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
            if self.last_activity + self.idle <= Instant::now() {
                self.stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("om_net_connections_idle_closed_total", "port" => self.port)
                    .increment(1);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle past its timeout",
                ));
            }
        }
    }
}

impl Drop for LimitedStream {
    fn drop(&mut self) {
        let open = self.stats.open.fetch_sub(1, Ordering::Relaxed) - 1;
        metrics::gauge!("om_net_connections", "port" => self.port).set(open as f64);
    }
}

impl AsyncRead for LimitedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check_closed() {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.last_activity = Instant::now();
                    if this.proof_bytes > 0 && !this.is_proven() {
                        this.read_bytes += buf.filled().len() - before;
                        if this.read_bytes >= this.proof_bytes {
                            this.prove();
                        }
                    }
                }
                Poll::Ready(r)
            }
            Poll::Pending => match this
                .poll_closed(cx)
                .and_then(|()| this.poll_idle(cx))
                .and_then(|()| this.poll_unproven(cx))
            {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
}

impl AsyncWrite for LimitedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = this.check_closed() {
            return Poll::Ready(Err(e));
        }
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        if r.is_pending() {
            return this.pending_unless_closed(cx);
        }
        if let Poll::Ready(Ok(n)) = &r
            && *n > 0
        {
            this.last_activity = Instant::now();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = this.check_closed() {
            return Poll::Ready(Err(e));
        }
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        if r.is_pending() {
            return this.pending_unless_closed(cx);
        }
        if let Poll::Ready(Ok(n)) = &r
            && *n > 0
        {
            this.last_activity = Instant::now();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check_closed() {
            return Poll::Ready(Err(e));
        }
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending => this.pending_unless_closed(cx),
            r => r,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
