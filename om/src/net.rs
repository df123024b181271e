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
}

impl PortPolicy {
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
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                let n = self.stats.refused.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("om_net_connections_refused_total", "port" => port).increment(1);
                if n.is_power_of_two() {
                    tracing::warn!(
                        port,
                        cap = self.policy.max_connections,
                        refused = n + 1,
                        "connection cap reached; resetting new connections"
                    );
                }
                let _ = stream.set_zero_linger();
                drop(stream);
                continue;
            };
            if let Err(e) = stream.set_nodelay(true) {
                tracing::debug!(error = %e, "set_nodelay");
            }
            self.stats.accepted.fetch_add(1, Ordering::Relaxed);
            let open = self.stats.open.fetch_add(1, Ordering::Relaxed) + 1;
            metrics::gauge!("om_net_connections", "port" => port).set(open as f64);
            let stream = LimitedStream {
                inner: stream,
                idle: self.policy.idle_timeout,
                last_activity: Instant::now(),
                timer: Box::pin(tokio::time::sleep(self.policy.idle_timeout)),
                closing: Box::pin(self.closer.0.notify.clone().notified_owned()),
                closer: self.closer.clone(),
                stats: self.stats.clone(),
                port,
                _permit: permit,
            };
            return (stream, addr);
        }
    }

    /// The listener as the stream of connections tonic serves, over TLS when
    /// `tls` is given; it never yields an error. Handshakes run in their own
    /// tasks (each bounded by `om_tls::HANDSHAKE_TIMEOUT` and holding its
    /// connection's permit), so a slow client delays no other; a failed
    /// handshake closes the connection and is counted. The accept task ends
    /// when the server drops the stream, releasing the port.
    pub fn into_incoming(
        self,
        tls: Option<Arc<om_tls::ServerTls>>,
    ) -> std::pin::Pin<Box<dyn futures::Stream<Item = io::Result<Conn>> + Send>> {
        let Some(tls) = tls else {
            return Box::pin(futures::stream::unfold(self, |mut l| async move {
                let (s, _) = l.accept_limited().await;
                Some((Ok(om_tls::MaybeTls::Plain(s)), l))
            }));
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Conn>>(64);
        let mut l = self;
        tokio::spawn(async move {
            let port = l.policy.name;
            loop {
                let (s, addr) = tokio::select! {
                    _ = tx.closed() => return,
                    c = l.accept_limited() => c,
                };
                let (tx, tls) = (tx.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls.accept(s).await {
                        Ok(t) => {
                            let _ = tx.send(Ok(om_tls::MaybeTls::Tls(Box::new(t)))).await;
                        }
                        Err(e) => {
                            metrics::counter!("om_net_tls_handshake_failures_total", "port" => port)
                                .increment(1);
                            tracing::debug!(port, %addr, error = %e, "TLS handshake failed");
                        }
                    }
                });
            }
        });
        Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
    }
}

/// A connection a gRPC port serves: plain, or TLS over a `LimitedStream`.
pub type Conn = om_tls::ServerStream<LimitedStream>;

/// What a request knows of its connection.
pub use om_tls::ConnInfo;

impl om_tls::PeerAddr for LimitedStream {
    fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.peer_addr().ok()
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
/// the idle timeout without traffic, and fails once its port is closed.
pub struct LimitedStream {
    inner: TcpStream,
    idle: Duration,
    last_activity: Instant,
    timer: Pin<Box<Sleep>>,
    /// Completes when the port's `Closer` closes (created with the stream,
    /// so a close between creation and the first poll is not missed).
    closing: Pin<Box<OwnedNotified>>,
    closer: Closer,
    stats: Arc<PortStats>,
    port: &'static str,
    _permit: OwnedSemaphorePermit,
}

impl LimitedStream {
    /// Errors once the port is closed (a flag read: every read and write
    /// checks it).
    fn check_closed(&self) -> io::Result<()> {
        if self.closer.is_closed() {
            return Err(Closer::closed_error());
        }
        Ok(())
    }

    /// For an operation about to wait: errors if the port is closed,
    /// otherwise registers `cx` to be woken when it closes.
    fn poll_closed(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.closer.is_closed() || self.closing.as_mut().poll(cx).is_ready() {
            return Err(Closer::closed_error());
        }
        Ok(())
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
                }
                Poll::Ready(r)
            }
            Poll::Pending => match this.poll_closed(cx).and_then(|()| this.poll_idle(cx)) {
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
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        assert_eq!(accept_backoff(1), ACCEPT_BACKOFF_MIN);
        assert_eq!(accept_backoff(2), ACCEPT_BACKOFF_MIN * 2);
        assert_eq!(accept_backoff(4), ACCEPT_BACKOFF_MIN * 8);
        assert_eq!(accept_backoff(20), ACCEPT_BACKOFF_MAX);
        assert_eq!(accept_backoff(u32::MAX), ACCEPT_BACKOFF_MAX);
    }

    /// A listener whose accepts fail with EMFILE while `failing` is set,
    /// counting every accept attempt.
    struct Exhausted {
        inner: TcpListener,
        failing: Arc<std::sync::atomic::AtomicBool>,
        attempts: Arc<AtomicU64>,
    }

    impl Acceptor for Exhausted {
        fn poll_accept(
            &mut self,
            cx: &mut Context<'_>,
        ) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
            self.attempts.fetch_add(1, Ordering::Relaxed);
            if self.failing.load(Ordering::Relaxed) {
                return Poll::Ready(Err(io::Error::from_raw_os_error(libc::EMFILE)));
            }
            self.inner.poll_accept(cx)
        }

        fn local_addr(&self) -> io::Result<SocketAddr> {
            self.inner.local_addr()
        }
    }

    fn policy(max: usize, idle: Duration) -> PortPolicy {
        PortPolicy {
            name: "test",
            max_connections: max,
            idle_timeout: idle,
        }
    }

    #[tokio::test]
    async fn accept_survives_descriptor_exhaustion_with_backoff() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let attempts = Arc::new(AtomicU64::new(0));
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let mut l = LimitedListener::new(
            Exhausted {
                inner,
                failing: failing.clone(),
                attempts: attempts.clone(),
            },
            policy(4, Duration::from_secs(60)),
        );
        // While every accept fails, the loop keeps trying, but with backoff:
        // a spinning loop would count millions of attempts in this window.
        let r = tokio::time::timeout(Duration::from_millis(600), l.accept_limited()).await;
        assert!(r.is_err(), "nothing can be accepted while accept fails");
        let tried = attempts.load(Ordering::Relaxed);
        assert!((2..=30).contains(&tried), "{tried} accept attempts");
        assert_eq!(l.stats().accept_errors.load(Ordering::Relaxed), tried);
        // Once descriptors are back, the same listener serves again.
        failing.store(false, Ordering::Relaxed);
        let client = tokio::spawn(async move { TcpStream::connect(addr).await.unwrap() });
        let (_s, _) = l.accept_limited().await;
        let _c = client.await.unwrap();
        assert_eq!(l.stats().accepted.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn connections_past_the_cap_are_reset_and_permits_come_back() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut l = LimitedListener::new(inner, policy(2, Duration::from_secs(60)));
        let stats = l.stats();
        let held = Arc::new(std::sync::Mutex::new(Vec::new()));
        let server = {
            let held = held.clone();
            tokio::spawn(async move {
                loop {
                    let (s, _) = l.accept_limited().await;
                    held.lock().unwrap().push(s);
                }
            })
        };
        let held_count = |n: usize| {
            let held = held.clone();
            async move {
                while held.lock().unwrap().len() != n {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        let _a = TcpStream::connect(addr).await.unwrap();
        let _b = TcpStream::connect(addr).await.unwrap();
        held_count(2).await;
        // A third connection finds the cap full: it is reset, not queued.
        let mut third = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 1];
        let r = third.read(&mut buf).await;
        assert!(
            matches!(r, Ok(0)) || r.is_err(),
            "a connection past the cap is closed: {r:?}"
        );
        assert_eq!(stats.refused.load(Ordering::Relaxed), 1);
        // Closing one frees its permit for the next.
        drop(held.lock().unwrap().remove(0));
        let _d = TcpStream::connect(addr).await.unwrap();
        held_count(2).await;
        assert_eq!(stats.accepted.load(Ordering::Relaxed), 3);
        assert_eq!(stats.refused.load(Ordering::Relaxed), 1);
        assert_eq!(stats.open.load(Ordering::Relaxed), 2);
        server.abort();
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_after_the_idle_timeout() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut l = LimitedListener::new(inner, policy(4, Duration::from_millis(400)));
        let stats = l.stats();
        let mut talker = TcpStream::connect(addr).await.unwrap();
        let (mut served_talker, _) = l.accept_limited().await;
        let _silent = TcpStream::connect(addr).await.unwrap();
        let (mut served_silent, _) = l.accept_limited().await;
        // The talker sends a byte every 100 ms for a whole second, more than
        // twice the timeout; the server echoes each.
        let echo = tokio::spawn(async move {
            let mut buf = [0u8; 1];
            let mut n = 0;
            while n < 10 && served_talker.read_exact(&mut buf).await.is_ok() {
                served_talker.write_all(&buf).await.unwrap();
                n += 1;
            }
            n
        });
        let idle = tokio::spawn(async move {
            let mut buf = [0u8; 1];
            served_silent.read(&mut buf).await
        });
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            talker.write_all(b"x").await.unwrap();
            let mut b = [0u8; 1];
            talker.read_exact(&mut b).await.unwrap();
        }
        assert_eq!(
            echo.await.unwrap(),
            10,
            "the talking connection stayed open"
        );
        let r = idle.await.unwrap();
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(stats.idle_closed.load(Ordering::Relaxed), 1);
    }

    /// Closing a port fails a read waiting on one of its connections, any
    /// later read or write on another, and the connections accepted after.
    #[tokio::test]
    async fn closing_a_port_fails_its_connections_reads_and_writes() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut l = LimitedListener::new(inner, policy(4, Duration::from_secs(60)));
        let closer = l.closer();
        let mut a = TcpStream::connect(addr).await.unwrap();
        let (mut served_a, _) = l.accept_limited().await;
        let _b = TcpStream::connect(addr).await.unwrap();
        let (mut served_b, _) = l.accept_limited().await;
        // Still open: a byte goes through.
        a.write_all(b"x").await.unwrap();
        let mut buf = [0u8; 1];
        served_a.read_exact(&mut buf).await.unwrap();
        let waiting = tokio::spawn(async move {
            let mut buf = [0u8; 1];
            served_a.read(&mut buf).await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the read waits for the peer");
        closer.close();
        let r = waiting.await.unwrap();
        assert_eq!(r.unwrap_err().kind(), io::ErrorKind::ConnectionAborted);
        assert_eq!(
            served_b.write_all(b"y").await.unwrap_err().kind(),
            io::ErrorKind::ConnectionAborted
        );
        let _c = TcpStream::connect(addr).await.unwrap();
        let (mut served_c, _) = l.accept_limited().await;
        assert_eq!(
            served_c.read(&mut buf).await.unwrap_err().kind(),
            io::ErrorKind::ConnectionAborted
        );
    }
}
