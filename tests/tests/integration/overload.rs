//! Connection floods: a node whose public port is flooded with idle
//! connections keeps its descriptors for RocksDB, snapshots and Raft.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use om_client::v1::BucketLayout;
use om_client::{ClientOptions, OmClient};
use om_tests::{TestNode, binary, free_port, http_get, wait_for};

/// The open-file limit the flooded `om` runs with.
const NOFILE: u64 = 256;
/// Idle connections the flood opens.
const FLOOD: usize = 1000;

/// A real `om` started with soft and hard RLIMIT_NOFILE set to `nofile`.
struct Limited {
    child: Child,
    grpc: String,
    http: std::net::SocketAddr,
}

impl Limited {
    fn spawn(dir: &Path, nofile: u64, extra: &[&str]) -> Limited {
        let grpc = format!("127.0.0.1:{}", free_port());
        let http: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let raft = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(binary("om"));
        cmd.arg("--data-dir")
            .arg(dir)
            .args(["--grpc-addr", &grpc, "--raft-addr", &raft])
            .arg("--http-addr")
            .arg(http.to_string())
            .args(extra)
            .env("OM_LOG", "warn")
            // Closes the flood's accepted connections soon after they fall silent.
            .env("OM_IDLE_TIMEOUT_S", "3")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: only async-signal-safe calls (setrlimit) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let r = libc::rlimit {
                    rlim_cur: nofile as libc::rlim_t,
                    rlim_max: nofile as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Limited {
            child: cmd.spawn().expect("spawn om"),
            grpc,
            http,
        }
    }
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Lets this test process hold the flood's sockets.
fn raise_own_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = r.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
    assert!(
        r.rlim_cur as usize > FLOOD + 200,
        "this test needs {} descriptors",
        FLOOD + 200
    );
}

/// The value of the first sample of `name` (with its labels) in `/metrics`.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Whether the server closed `s` (EOF or reset); reads whatever it sent.
fn closed_by_server(s: &tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match s.try_read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

async fn snapshot_index(addr: &str) -> u64 {
    OmClient::node_status(addr)
        .await
        .map(|s| s.snapshot_index)
        .unwrap_or(0)
}

/// Floods the public port of an `om` limited to 256 descriptors with 1000
/// idle connections: those past the port's cap are reset at once, the ones
/// within it are closed when idle, and meanwhile Raft keeps committing and
/// building snapshots; afterwards the node is healthy and serves new clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_does_not_stop_raft() {
    raise_own_limit();
    let dir = tempfile::tempdir().unwrap();
    let om = Limited::spawn(
        dir.path(),
        NOFILE,
        &["--snapshot-every", "10", "--snapshot-keep-logs", "5"],
    );
    let grpc = om.grpc.clone();
    wait_for(Duration::from_secs(30), "om to lead", || {
        let grpc = grpc.clone();
        async move {
            let s = OmClient::node_status(&grpc).await.ok()?;
            (s.role == "leader").then_some(())
        }
    })
    .await;
    // The budget of 256 descriptors: 64 reserved, 64 for RocksDB, and of
    // the remaining 128, 16 for Raft, 8 for HTTP and 104 for the public port.
    let cap = 104;
    let c = OmClient::new(
        std::slice::from_ref(&om.grpc),
        ClientOptions {
            deadline: Duration::from_secs(10),
            ..Default::default()
        },
    )
    .unwrap();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let before = snapshot_index(&om.grpc).await;

    let mut flood = Vec::with_capacity(FLOOD);
    let mut refused_at_connect = 0;
    for _ in 0..FLOOD {
        // A connect that does not complete at once sits in a full backlog:
        // the server stopped accepting.
        let s = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::TcpStream::connect(&om.grpc),
        )
        .await
        .expect("the server keeps accepting (and resetting) connections");
        match s {
            Ok(s) => flood.push(s),
            Err(_) => refused_at_connect += 1,
        }
    }
    // Writes go on through Raft while the flood holds the port, and
    // snapshots (a new file each) keep being built.
    for i in 0..60 {
        c.put_key("vol1", "bkt1", &format!("during{i:03}"), i)
            .await
            .expect("a write during the flood");
    }
    // Everything past the cap was reset promptly rather than queued.
    let refused = wait_for(Duration::from_secs(30), "excess connections reset", || {
        let n = flood.iter().filter(|s| closed_by_server(s)).count() + refused_at_connect;
        async move { (n >= FLOOD - cap).then_some(n) }
    })
    .await;
    assert!(refused >= FLOOD - cap, "{refused} of {FLOOD} refused");
    let m = http_get(om.http, "/metrics").await;
    // Past the cap, past one address's share or past the unproven pool.
    let counted = sample(&m, "om_net_connections_refused_total{port=\"grpc\"}")
        + sample(
            &m,
            "om_net_connections_per_source_refused_total{port=\"grpc\"}",
        )
        + sample(
            &m,
            "om_net_connections_unproven_refused_total{port=\"grpc\"}",
        );
    // A connect the server reset before this side saw it complete is
    // counted by the server too, so the bound is on the rest; under load
    // nearly all of them can be such connects.
    assert!(
        counted >= (FLOOD - cap).saturating_sub(refused_at_connect) as f64,
        "refusals counted: {counted}"
    );
    // The connections within the cap say nothing: they are closed when idle.
    wait_for(Duration::from_secs(30), "idle connections closed", || {
        let all = flood.iter().all(closed_by_server);
        async move { all.then_some(()) }
    })
    .await;
    let m = http_get(om.http, "/metrics").await;
    assert!(
        sample(&m, "om_net_connections_idle_closed_total{port=\"grpc\"}")
            + sample(
                &m,
                "om_net_connections_unproven_closed_total{port=\"grpc\"}"
            )
            >= 1.0
    );
    drop(flood);

    // Once the flood is over: healthy, ready, new clients served, and
    // nothing acknowledged was lost.
    for i in 0..20 {
        c.put_key("vol1", "bkt1", &format!("after{i:03}"), i)
            .await
            .expect("a write after the flood");
    }
    assert!(
        http_get(om.http, "/healthz")
            .await
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        http_get(om.http, "/readyz")
            .await
            .starts_with("HTTP/1.1 200")
    );
    let fresh = OmClient::new(std::slice::from_ref(&om.grpc), ClientOptions::default()).unwrap();
    assert_eq!(
        fresh.get_bucket("vol1", "bkt1").await.unwrap().key_count,
        80
    );
    let after = snapshot_index(&om.grpc).await;
    assert!(
        after > before + 50,
        "snapshots were built during and after the flood: {before} -> {after}"
    );
}

/// Connects to `addr` from `source` (a loopback address) and proves the
/// connection as a client would: the HTTP/2 preface (the server's SETTINGS
/// come back once it read it) or, on the HTTP port, a whole request (its
/// answer comes back). `None` when the server reset it.
async fn proven_connection(
    addr: std::net::SocketAddr,
    source: std::net::IpAddr,
    http: bool,
) -> Option<tokio::net::TcpStream> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind((source, 0).into()).unwrap();
    let mut s = sock.connect(addr).await.ok()?;
    let hello: &[u8] = if http {
        b"GET /healthz HTTP/1.1\r\nHost: om\r\n\r\n"
    } else {
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    };
    s.write_all(hello).await.ok()?;
    let mut buf = [0u8; 512];
    match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
        Ok(Ok(n)) if n > 0 => Some(s),
        _ => None,
    }
}

/// Each port (public gRPC, Raft, HTTP) has its own configured cap: the
/// connections past it are reset and counted, the ones within it are served,
/// and closing them gives their places back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_port_resets_connections_past_its_own_cap() {
    let n = TestNode::start_with(|a| {
        a.max_grpc_connections = Some(3);
        a.max_raft_connections = Some(8);
        a.max_http_connections = Some(2);
    })
    .await;
    let b = n.node.budget;
    assert_eq!(
        (b.grpc_connections, b.raft_connections, b.http_connections),
        (3, 8, 2)
    );
    let ports = [
        (n.node.grpc_addr, 3, false),
        (n.node.raft_addr, 8, false),
        (n.node.http_addr, 2, true),
    ];
    for ((addr, cap, http), stats) in ports.into_iter().zip(n.node.port_stats.iter()) {
        let ordering = std::sync::atomic::Ordering::Relaxed;
        let open_before = stats.open.load(ordering) as usize;
        let refused_before = stats.refused.load(ordering) as usize;
        // Proven connections, each from its own address (one source may
        // hold only part of a port).
        let mut held = Vec::new();
        let mut reset = 0;
        for i in 0..cap + 4 {
            let source = std::net::IpAddr::from([127, 0, 1, 10 + i as u8]);
            match proven_connection(addr, source, http).await {
                Some(s) => held.push(s),
                None => reset += 1,
            }
        }
        let excess = cap + 4 - (cap - open_before);
        assert_eq!(reset, excess, "{addr}: only the excess is reset");
        assert_eq!(
            stats.refused.load(ordering) as usize - refused_before,
            excess
        );
        assert_eq!(stats.open.load(ordering) as usize, cap);
        drop(held);
        wait_for(Duration::from_secs(10), "places given back", || {
            let open = stats.open.load(ordering) as usize;
            async move { (open == open_before).then_some(()) }
        })
        .await;
    }
    assert!(
        http_get(n.node.http_addr, "/healthz")
            .await
            .starts_with("HTTP/1.1 200")
    );
    n.client().create_volume("vol1", "").await.unwrap();
    n.stop().await;
}

/// Silent sockets from many addresses cannot hold a port: one address gets
/// at most its share, a full pool of unproven connections makes room for
/// newcomers by closing its oldest, the unproven ones are closed at the
/// prove deadline, a request head that never ends is closed too, and
/// meanwhile `/healthz` answers and clients are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_strangers_hold_no_port() {
    let n = TestNode::start_with(|a| {
        a.max_grpc_connections = Some(32);
        a.max_raft_connections = Some(16);
        a.max_http_connections = Some(8);
    })
    .await;
    n.client().create_volume("before", "").await.unwrap();
    let ordering = std::sync::atomic::Ordering::Relaxed;
    let mut silent = Vec::new();
    // 40 addresses, 10 silent sockets each, on each port: far more than
    // every cap together.
    for port in [n.node.grpc_addr, n.node.raft_addr, n.node.http_addr] {
        for host in 0..40u8 {
            for _ in 0..10 {
                let sock = tokio::net::TcpSocket::new_v4().unwrap();
                sock.bind(([127, 0, 2, 10 + host], 0).into()).unwrap();
                // A reset at connect means its address's share was used up.
                if let Ok(s) = sock.connect(port).await {
                    silent.push(s);
                }
            }
        }
    }
    let stats = &n.node.port_stats;
    // Each address got its share of the unproven pool and no more; the
    // pool made room for newcomers by closing its oldest.
    for (s, name) in stats.iter().zip(["grpc", "raft", "http"]) {
        let share = s.pending_refused.load(ordering);
        let evicted = s.evicted.load(ordering);
        assert!(share > 0 && evicted > 0, "{name}: {share} {evicted}");
    }
    // While the flood holds what it can: health, a client of an address of
    // its own.
    assert!(
        http_get(n.node.http_addr, "/healthz")
            .await
            .starts_with("HTTP/1.1 200")
    );
    n.client().create_volume("during", "").await.unwrap();
    // A request head that starts and never ends is closed too (its first
    // bytes proved the connection; the head must arrive within 5 s).
    let slow = {
        use tokio::io::AsyncWriteExt;
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind(([127, 0, 3, 1], 0).into()).unwrap();
        let mut s = sock.connect(n.node.http_addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: om\r\n")
            .await
            .unwrap();
        s
    };
    // At the prove deadline every silent socket is closed.
    wait_for(Duration::from_secs(15), "silent sockets closed", || {
        let all = silent.iter().all(closed_by_server);
        async move { all.then_some(()) }
    })
    .await;
    let closed: u64 = stats
        .iter()
        .map(|s| s.unproven_closed.load(ordering) + s.idle_closed.load(ordering))
        .sum();
    assert!(closed > 0);
    wait_for(
        Duration::from_secs(15),
        "the unfinished head closed",
        || {
            let c = closed_by_server(&slow);
            async move { c.then_some(()) }
        },
    )
    .await;
    drop(silent);
    n.client().create_volume("after", "").await.unwrap();
    n.stop().await;
}

/// Busy addresses cannot take the probe port from the kubelet: each holds
/// at most its share, the last quarter of the port is kept for addresses
/// holding no connection, and `/readyz` from a new address answers while
/// eight addresses keep requesting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_addresses_leave_the_probe_port_a_reserve() {
    let n = TestNode::start_with(|a| a.max_http_connections = Some(16)).await;
    let ordering = std::sync::atomic::Ordering::Relaxed;
    let stats = &n.node.port_stats[2];
    let mut held = Vec::new();
    for host in 0..8u8 {
        for _ in 0..4 {
            let source = std::net::IpAddr::from([127, 0, 4, 10 + host]);
            if let Some(s) = proven_connection(n.node.http_addr, source, true).await {
                held.push(s);
            }
        }
    }
    // 2 a source (16/16, at least 2): 12 fill what is outside the reserve
    // of 4, and an address holding nothing may take one more from it (the
    // last two addresses here), no further.
    assert!(held.len() <= 14, "{} held", held.len());
    assert!(stats.source_refused.load(ordering) + stats.reserve_refused.load(ordering) > 0);
    for _ in 0..3 {
        let r = http_get(n.node.http_addr, "/readyz").await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    drop(held);
    n.stop().await;
}
