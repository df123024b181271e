//! What operators scrape: per-peer series belong to the leader only.

use std::time::Duration;

use om_client::{ClientOptions, OmClient};
use om_tests::{TestCluster, TestNode, cluster_addrs, http_get, wait_for};

fn lag_lines(metrics: &str) -> Vec<&str> {
    metrics
        .lines()
        .filter(|l| l.starts_with("om_raft_replication_lag_entries{"))
        .collect()
}

/// A leader exports a replication-lag series per peer; once it steps down it
/// exports none (not its last values).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_lag_series_leave_with_leadership() {
    let cluster = TestCluster::start(3).await;
    let c = OmClient::new(&cluster.endpoints(), ClientOptions::default()).unwrap();
    c.transfer_leader(1).await.unwrap();
    c.create_volume("vol1", "").await.unwrap();
    let m = wait_for(Duration::from_secs(10), "lag series on the leader", || {
        let addr = cluster.node(1).node.http_addr;
        async move {
            let m = http_get(addr, "/metrics").await;
            (lag_lines(&m).len() == 2).then_some(m)
        }
    })
    .await;
    let lines = lag_lines(&m);
    assert!(lines.iter().any(|l| l.contains("peer=\"2\"")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("peer=\"3\"")), "{lines:?}");
    for follower in [cluster.node(2), cluster.node(3)] {
        let m = http_get(follower.node.http_addr, "/metrics").await;
        assert!(lag_lines(&m).is_empty(), "a follower exports lag: {m}");
    }
    c.transfer_leader(2).await.unwrap();
    let former = http_get(cluster.node(1).node.http_addr, "/metrics").await;
    assert!(
        lag_lines(&former).is_empty(),
        "the former leader still exports lag: {:?}",
        lag_lines(&former)
    );
    wait_for(
        Duration::from_secs(10),
        "lag series on the new leader",
        || {
            let addr = cluster.node(2).node.http_addr;
            async move { (lag_lines(&http_get(addr, "/metrics").await).len() == 2).then_some(()) }
        },
    )
    .await;
    cluster.shutdown().await;
}

fn value(metrics: &str, name: &str) -> f64 {
    let line = metrics
        .lines()
        .find(|l| l.split(' ').next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} in {metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The process's CPU time and resident memory are exported as Prometheus's
/// standard process metrics (benchmarks divide the CPU counter's growth by
/// the operations done), with their types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_cpu_and_memory_are_exported() {
    let addrs = cluster_addrs(1);
    let node = TestNode::start_member(&addrs[0], &addrs).await;
    let c = OmClient::new(&[addrs[0].grpc.clone()], ClientOptions::default()).unwrap();
    wait_for(Duration::from_secs(20), "a leader", || {
        let c = &c;
        async move { c.cluster_status().await.ok().filter(|s| s.has_leader) }
    })
    .await;
    let before = http_get(node.node.http_addr, "/metrics").await;
    assert!(before.contains("# TYPE process_cpu_seconds_total counter\n"));
    assert!(before.contains("# TYPE process_resident_memory_bytes gauge\n"));
    assert!(value(&before, "process_resident_memory_bytes") > (1 << 20) as f64);
    // Start-up phases, in seconds since the node's start (the recorder is
    // shared by the nodes of this process, so only their presence and range
    // are checked here).
    let http = node.node.http_addr;
    let ready = wait_for(Duration::from_secs(20), "the ready phase", || async move {
        let m = http_get(http, "/metrics").await;
        m.contains("om_startup_seconds{phase=\"ready\"}")
            .then_some(m)
    })
    .await;
    for phase in ["store_open", "raft_start", "leader_known", "ready"] {
        let v = value(&ready, &format!("om_startup_seconds{{phase=\"{phase}\"}}"));
        assert!(v > 0.0 && v < 120.0, "{phase}: {v}");
    }
    c.create_volume("vol1", "").await.unwrap();
    // Burn a little CPU on this process for the counter to move.
    let started = std::time::Instant::now();
    let mut x = 0u64;
    while started.elapsed() < Duration::from_millis(50) {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    let after = http_get(node.node.http_addr, "/metrics").await;
    let (b, a) = (
        value(&before, "process_cpu_seconds_total"),
        value(&after, "process_cpu_seconds_total"),
    );
    assert!(b > 0.0 && a >= b + 0.03, "CPU seconds {b} then {a}");
    node.node.shutdown().await;
}
