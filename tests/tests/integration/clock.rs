//! A jumping wall clock: the times the leader stamps neither go back nor
//! leap (`om::service::clock`), across a failover too.

use std::time::{Duration, Instant};

use om_client::v1::BucketLayout;
use om_tests::{ClusterOptions, TestCluster, http_get};

const HOUR_MS: i64 = 3_600_000;

/// Writes key `i` and returns its modification time.
async fn put(c: &om_client::OmClient, i: u32) -> u64 {
    c.put_key("vol1", "bkt1", &format!("k{i:04}"), 1)
        .await
        .unwrap()
        .modification_time_ms
}

/// The leader's clock is stepped back an hour, then forward ten days: the
/// modification times of the keys written meanwhile never go back, gain at
/// most twice the time that passed (so lifecycle ages do not leap and data
/// does not expire early), and the adjustment is exported. A new leader
/// whose clock is an hour behind stamps no time before the ones applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stamps_neither_go_back_nor_leap_when_the_clock_jumps() {
    let cluster = TestCluster::start_with(3, ClusterOptions::default()).await;
    let c = cluster.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let leader = cluster.leader().await;
    let clock = cluster.node(leader).node.service.clock();
    let mut last = 0;
    let mut times = Vec::new();
    for i in 0..5 {
        times.push(put(&c, i).await);
    }
    clock.set_offset(-HOUR_MS);
    for i in 5..15 {
        times.push(put(&c, i).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let before_leap = *times.last().unwrap();
    clock.set_offset(240 * HOUR_MS);
    let leap_at = Instant::now();
    for i in 15..25 {
        times.push(put(&c, i).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    let gained = times.last().unwrap() - before_leap;
    let bound = 2 * leap_at.elapsed().as_millis() as u64 + 2 * om::service::clock::SLACK_MS;
    assert!(
        gained <= bound,
        "gained {gained} ms in {:?}",
        leap_at.elapsed()
    );
    // The adjustment is exported (one gauge per process: the nodes of this
    // test process share it, so only its presence is checked here).
    let m = http_get(cluster.node(leader).node.http_addr, "/metrics").await;
    assert!(m.contains("om_clock_adjustment_seconds "), "{m}");

    // Another member, an hour behind, takes over: it stamps no time below
    // what it applied.
    let other = cluster
        .addrs()
        .iter()
        .map(|a| a.id)
        .find(|id| *id != leader)
        .unwrap();
    cluster
        .node(other)
        .node
        .service
        .clock()
        .set_offset(-HOUR_MS);
    c.transfer_leader(other).await.unwrap();
    for i in 25..30 {
        let t = put(&c, i).await;
        assert!(t >= last.max(*times.last().unwrap()), "{t} after {times:?}");
        last = t;
    }
    cluster.shutdown().await;
}
