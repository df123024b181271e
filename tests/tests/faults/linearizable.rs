//! Concurrent clients put, get and delete a handful of keys while nodes are
//! partitioned, stopped and restarted; the recorded history must be
//! linearizable (checked with `om_tests::linearizability`, whose own tests
//! show it rejects non-linearizable histories).

use std::sync::Arc;
use std::time::Duration;

use om_client::OmClient;
use om_client::v1::BucketLayout;
use om_tests::history::{Recorder, check_linearizable};
use om_tests::{ClusterOptions, Faults, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_under_partitions_and_restarts_are_linearizable() {
    let faults = Arc::new(Faults::default());
    let mut cluster =
        TestCluster::start_with(3, ClusterOptions::default().faults(faults.clone())).await;
    let eps = cluster.endpoints();
    let setup = OmClient::new(&eps, om_tests::client_options()).unwrap();
    setup.create_volume("vol1", "").await.unwrap();
    setup
        .create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();

    let rec = Recorder::start(&eps, 4, false);

    let pause = |ms| tokio::time::sleep(Duration::from_millis(ms));
    let all: Vec<u64> = cluster.addrs().iter().map(|a| a.id).collect();
    // Nemesis: partition the leader, heal, stop and restart a follower, then the leader.
    pause(800).await;
    let l = cluster.leader().await;
    faults.isolate(l, &all);
    pause(1500).await;
    faults.heal();
    pause(800).await;
    let l = cluster.leader().await;
    let f = all.iter().copied().find(|id| *id != l).unwrap();
    cluster.stop(f).await;
    pause(1000).await;
    cluster.start_member(f).await;
    pause(800).await;
    let l = cluster.leader().await;
    cluster.stop(l).await;
    pause(1200).await;
    cluster.start_member(l).await;
    pause(1000).await;

    let end = rec.now();
    let history = rec.finish().await;
    let known = history.iter().filter(|o| o.output.is_some()).count();
    eprintln!(
        "history: {} operations, {known} with known outcomes",
        history.len()
    );
    assert!(
        known >= 100,
        "too few completed operations ({known}) for a meaningful check"
    );
    check_linearizable(&history, end);
    cluster.shutdown().await;
}
