//! Tests of `net`: caps, idle and proof timeouts, per-source limits.

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
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
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

/// A port of `max` connections where one address may hold them all, proven
/// or not.
fn policy(max: usize, idle: Duration) -> PortPolicy {
    PortPolicy {
        per_source: max,
        pending: max * 4,
        ..PortPolicy::new("test", max, idle)
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

/// Accepts forever, keeping every connection (and reading from it, so a
/// plaintext connection proves itself with its first bytes).
fn serve(mut l: LimitedListener) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept_limited().await;
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    })
}

/// Whether the server closed (or reset) `s` within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1];
    matches!(
        tokio::time::timeout(within, s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

async fn connect_from(ip: &str, to: SocketAddr) -> TcpStream {
    try_connect_from(ip, to).await.unwrap()
}

async fn try_connect_from(ip: &str, to: SocketAddr) -> io::Result<TcpStream> {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{ip}:0").parse().unwrap()).unwrap();
    sock.connect(to).await
}

/// Whether a connection from `ip` is refused: reset at connect, or closed
/// at once.
async fn refused_from(ip: &str, to: SocketAddr) -> bool {
    match try_connect_from(ip, to).await {
        Err(_) => true,
        Ok(mut s) => closed_within(&mut s, Duration::from_secs(1)).await,
    }
}

/// One address may hold `per_source` connections, and a share of the
/// unproven pool; when the pool is full the oldest unproven connection makes
/// room, so one that proves itself at once always gets in; unproven ones are
/// closed at the prove deadline.
#[tokio::test]
async fn strangers_cannot_hold_the_port() {
    let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = inner.local_addr().unwrap();
    let p = PortPolicy {
        per_source: 3,
        pending: 8,
        prove_timeout: Duration::from_secs(2),
        ..PortPolicy::new("test", 32, Duration::from_secs(60))
    };
    let l = LimitedListener::new(inner, p);
    let stats = l.stats();
    let server = serve(l);
    let ordering = Ordering::Relaxed;
    // One address: two proven connections and one unproven, then its share
    // is used up.
    let mut mine = Vec::new();
    for _ in 0..2 {
        let mut s = connect_from("127.0.0.2", addr).await;
        s.write_all(b"hello").await.unwrap();
        mine.push(s);
    }
    // Read (so proven) before the next one comes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    mine.push(connect_from("127.0.0.2", addr).await);
    assert!(refused_from("127.0.0.2", addr).await);
    assert_eq!(stats.source_refused.load(ordering), 1);
    // Ten silent addresses: the pool of 8 (one place held by 127.0.0.2)
    // makes room by closing its oldest.
    let mut silent = Vec::new();
    for i in 3..13 {
        silent.push(connect_from(&format!("127.0.0.{i}"), addr).await);
    }
    let mut third = mine.pop().unwrap();
    assert!(
        closed_within(&mut third, Duration::from_secs(1)).await,
        "evicted"
    );
    assert!(closed_within(&mut silent[0], Duration::from_secs(1)).await);
    assert_eq!(stats.evicted.load(ordering), 3);
    // A client that speaks at once gets in and stays.
    let mut talker = connect_from("127.0.0.20", addr).await;
    talker.write_all(b"hello").await.unwrap();
    // The unproven ones are closed at their deadline; the proven stay.
    for s in silent.iter_mut().skip(3) {
        assert!(closed_within(s, Duration::from_secs(4)).await);
    }
    assert!(stats.unproven_closed.load(ordering) >= 1);
    assert!(!closed_within(&mut talker, Duration::from_millis(200)).await);
    for s in &mut mine {
        assert!(!closed_within(s, Duration::from_millis(100)).await);
    }
    server.abort();
}

/// A trusted source (one that proved membership) waits in a pool of its
/// own: strangers filling theirs, and silent sockets opened from the
/// member's own address, do not keep its next connection out; those
/// silent sockets are still closed at their deadline, and the address
/// still holds at most `per_source` connections.
#[tokio::test]
async fn silent_sockets_on_a_members_address_do_not_keep_it_out() {
    let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = inner.local_addr().unwrap();
    let p = PortPolicy {
        per_source: MEMBER_PER_SOURCE,
        pending: 1,
        member_pending: 4,
        prove_timeout: Duration::from_secs(2),
        ..PortPolicy::new("test", 32, Duration::from_secs(60))
    };
    let mut l = LimitedListener::new(inner, p);
    let _first = connect_from("127.0.0.3", addr).await;
    let (s, _) = l.accept_limited().await;
    s.trust_source();
    s.prove();
    let stats = l.stats();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let server = tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept_limited().await;
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                // A member proves itself with its first bytes here (its
                // handshake on the Raft port).
                if let Ok(n) = s.read(&mut buf).await
                    && n > 0
                {
                    s.prove();
                    let _ = tx.send(());
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                    }
                }
            });
        }
    });
    // A stranger holds the shared pool; the member's address opens 6
    // silent sockets.
    let _stranger = connect_from("127.0.0.4", addr).await;
    let mut silent = Vec::new();
    for _ in 0..6 {
        silent.push(connect_from("127.0.0.3", addr).await);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The member's own connection gets in, at once, every time.
    for _ in 0..3 {
        let mut c = connect_from("127.0.0.3", addr).await;
        c.write_all(b"member").await.unwrap();
        tokio::time::timeout(Duration::from_secs(1), rx.recv())
            .await
            .expect("the member's connection was served")
            .unwrap();
        assert!(!closed_within(&mut c, Duration::from_millis(100)).await);
    }
    let evicted = stats.evicted.load(Ordering::Relaxed);
    assert!(evicted >= 3, "{evicted} evicted");
    // The silent ones left are closed at their deadline.
    for s in &mut silent {
        assert!(closed_within(s, Duration::from_secs(3)).await);
    }
    // The address holds at most per_source connections.
    let mut held = Vec::new();
    for _ in 0..MEMBER_PER_SOURCE + 2 {
        if let Ok(mut c) = try_connect_from("127.0.0.3", addr).await {
            let _ = c.write_all(b"member").await;
            held.push(c);
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(stats.source_refused.load(Ordering::Relaxed) >= 1);
    drop(s);
    server.abort();
}

/// The last `reserve` permits go only to addresses holding no connection:
/// busy addresses leave room for a new one (a probe).
#[tokio::test]
async fn the_reserve_is_for_addresses_without_a_connection() {
    let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = inner.local_addr().unwrap();
    let p = PortPolicy {
        per_source: 4,
        pending: 16,
        reserve: 2,
        ..PortPolicy::new("test", 10, Duration::from_secs(60))
    };
    let l = LimitedListener::new(inner, p);
    let stats = l.stats();
    let server = serve(l);
    let mut busy = Vec::new();
    for ip in ["127.0.0.5", "127.0.0.6"] {
        for _ in 0..4 {
            let mut c = connect_from(ip, addr).await;
            c.write_all(b"x").await.unwrap();
            busy.push(c);
        }
    }
    // 8 of 10 taken: the busy addresses get no more.
    assert!(refused_from("127.0.0.5", addr).await);
    let mut third = connect_from("127.0.0.7", addr).await;
    third.write_all(b"x").await.unwrap();
    assert!(refused_from("127.0.0.7", addr).await);
    // A probe from a new address gets the last one.
    let mut probe = connect_from("127.0.0.8", addr).await;
    probe.write_all(b"x").await.unwrap();
    assert!(!closed_within(&mut probe, Duration::from_millis(200)).await);
    assert!(!closed_within(&mut third, Duration::from_millis(100)).await);
    assert_eq!(stats.reserve_refused.load(Ordering::Relaxed), 2);
    server.abort();
}
