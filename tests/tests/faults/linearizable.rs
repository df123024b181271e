//! Concurrent clients put, get and delete a handful of keys while nodes are
//! partitioned, stopped and restarted; the recorded history must be
//! linearizable (checked with `om_tests::linearizability`, whose own tests
//! show it rejects non-linearizable histories).

use std::sync::Arc;
use std::time::Duration;

use om_client::OmClient;
use om_client::v1::BucketLayout;
use om_tests::history::{Recorder, check_linearizable};
use om_tests::{Faults, TestNode, cluster_addrs, wait_for};

async fn current_leader(nodes: &[Option<TestNode>]) -> Option<u64> {
    for n in nodes.iter().flatten() {
        let m = n.node.raft.metrics();
        let m = openraft::async_runtime::WatchReceiver::borrow_watched(&m).clone();
        if m.state == openraft::ServerState::Leader {
            return Some(m.id);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_under_partitions_and_restarts_are_linearizable() {
    let addrs = cluster_addrs(3);
    let faults = Arc::new(Faults::default());
    let mut nodes: Vec<Option<TestNode>> = Vec::new();
    for a in &addrs {
        nodes.push(Some(
            TestNode::start_member_with(a, &addrs, Some(faults.clone()), |_| {}).await,
        ));
    }
    let eps: Vec<String> = addrs.iter().map(|a| a.grpc.clone()).collect();
    let setup = OmClient::new(&eps, om_tests::client_options()).unwrap();
    setup.create_volume("vol1", "").await.unwrap();
    setup
        .create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();

    let rec = Recorder::start(&eps, 4, false);

    let pause = |ms| tokio::time::sleep(Duration::from_millis(ms));
    let all: Vec<u64> = addrs.iter().map(|a| a.id).collect();
    // Nemesis: partition the leader, heal, stop and restart a follower, then the leader.
    pause(800).await;
    let l = wait_for(Duration::from_secs(10), "a leader", || async {
        current_leader(&nodes).await
    })
    .await;
    faults.isolate(l, &all);
    pause(1500).await;
    faults.heal();
    pause(800).await;
    let l = wait_for(Duration::from_secs(10), "a leader", || async {
        current_leader(&nodes).await
    })
    .await;
    let f = all.iter().copied().find(|id| *id != l).unwrap() as usize - 1;
    let dir = nodes[f].take().unwrap().stop().await;
    pause(1000).await;
    nodes[f] =
        Some(TestNode::start_member_in(dir, &addrs[f], &addrs, Some(faults.clone()), |_| {}).await);
    pause(800).await;
    let l = wait_for(Duration::from_secs(10), "a leader", || async {
        current_leader(&nodes).await
    })
    .await as usize
        - 1;
    let dir = nodes[l].take().unwrap().stop().await;
    pause(1200).await;
    nodes[l] =
        Some(TestNode::start_member_in(dir, &addrs[l], &addrs, Some(faults.clone()), |_| {}).await);
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
    for n in nodes.into_iter().flatten() {
        n.node.shutdown().await;
    }
}
