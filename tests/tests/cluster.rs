//! Multi-node clusters over the real gRPC Raft transport, in-process.

use std::time::Duration;

use om_client::v1::BucketLayout;
use om_client::{ClientOptions, OmClient};
use om_tests::{TestNode, cluster_addrs, wait_for};

async fn leader_of(nodes: &[Option<TestNode>], not: Option<u64>) -> u64 {
    wait_for(
        Duration::from_secs(20),
        "a leader agreed by all live nodes",
        || {
            let leaders: Vec<Option<u64>> = nodes
                .iter()
                .flatten()
                .map(|n| {
                    let m = n.node.raft.metrics();
                    let m = openraft::async_runtime::WatchReceiver::borrow_watched(&m).clone();
                    if m.state == openraft::ServerState::Leader
                        || m.state == openraft::ServerState::Follower
                    {
                        m.current_leader
                    } else {
                        None
                    }
                })
                .collect();
            let first = leaders[0];
            let agreed = first.is_some() && first != not && leaders.iter().all(|l| *l == first);
            async move { if agreed { first } else { None } }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_and_survive_losing_the_leader() {
    let addrs = cluster_addrs(3);
    let mut nodes = Vec::new();
    for a in &addrs {
        nodes.push(Some(TestNode::start_member(a, &addrs).await));
    }
    let leader = leader_of(&nodes, None).await;
    let endpoints: Vec<String> = addrs.iter().map(|a| a.grpc.clone()).collect();
    let c = OmClient::new(&endpoints, ClientOptions::default()).unwrap();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for i in 0..20 {
        c.put_key("vol1", "bkt1", &format!("k{i:02}"), i)
            .await
            .unwrap();
    }
    // Every replica applies every write.
    for a in &addrs {
        let local = OmClient::new(
            std::slice::from_ref(&a.grpc),
            ClientOptions {
                stale_reads: true,
                ..Default::default()
            },
        )
        .unwrap();
        wait_for(Duration::from_secs(10), "replication to every node", || {
            let local = &local;
            async move { local.lookup_key("vol1", "bkt1", "k19").await.ok() }
        })
        .await;
    }

    // Stop the leader: the others elect a new one and the client follows.
    let idx = (leader - 1) as usize;
    nodes[idx].take().unwrap().node.shutdown().await;
    let new_leader = leader_of(&nodes, Some(leader)).await;
    assert_ne!(new_leader, leader);
    c.put_key("vol1", "bkt1", "after-failover", 1)
        .await
        .unwrap();
    for i in 0..20 {
        c.lookup_key("vol1", "bkt1", &format!("k{i:02}"))
            .await
            .unwrap();
    }
    let s = c.cluster_status().await.unwrap();
    assert_eq!(s.members.len(), 3);
    for n in nodes.into_iter().flatten() {
        n.node.shutdown().await;
    }
}
