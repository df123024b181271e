//! Members restarted on an empty data directory (a replaced disk) with their
//! usual flags, and first boots of a static cluster.

use std::sync::Arc;
use std::time::Duration;

use om::tasks::rejoin::{Outcome, Phase};
use om_client::OmClient;
use om_client::v1::BucketLayout;
use om_tests::{
    Faults, MemberAddrs, TestNode, agreed_leader, cluster_addrs, http_get, local_client,
    members_client, metrics_of, wait_for,
};

async fn outcome_of(n: &TestNode) -> Outcome {
    let mut rx = n.node.admission.outcome();
    let o = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|o| o.is_some()))
        .await
        .expect("admitted in time")
        .expect("admission state")
        .clone();
    o.unwrap()
}

/// Writes `n` keys named `prefix{i}`.
async fn write(c: &OmClient, prefix: &str, n: u64) {
    for i in 0..n {
        c.put_key("vol1", "bkt1", &format!("{prefix}{i:03}"), i)
            .await
            .unwrap();
    }
}

/// Starts a 3-node cluster with one volume, one bucket and 20 keys.
async fn cluster(
    faults: Option<Arc<Faults>>,
) -> (Vec<MemberAddrs>, Vec<Option<TestNode>>, OmClient) {
    let addrs = cluster_addrs(3);
    let mut nodes = Vec::new();
    for a in &addrs {
        nodes.push(Some(
            TestNode::start_member_with(a, &addrs, faults.clone(), |_| {}).await,
        ));
    }
    agreed_leader(&nodes, None).await;
    let c = members_client(&addrs);
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    write(&c, "a", 20).await;
    (addrs, nodes, c)
}

/// After a member rejoined: it holds everything, is ready, and counts in a
/// quorum again: with the leader stopped, it and the third member elect a
/// leader between them and commit.
async fn check_rejoined(
    addrs: &[MemberAddrs],
    mut nodes: Vec<Option<TestNode>>,
    c: &OmClient,
    victim: usize,
) {
    let lc = local_client(&addrs[victim], Duration::from_secs(2));
    wait_for(
        Duration::from_secs(20),
        "the rejoined node to have b004",
        || {
            let lc = &lc;
            async move { lc.lookup_key("vol1", "bkt1", "b004").await.ok() }
        },
    )
    .await;
    assert!(lc.lookup_key("vol1", "bkt1", "a000").await.is_ok());
    // Ready once it has applied what the leader had when it last asked.
    let http = nodes[victim].as_ref().unwrap().node.http_addr;
    wait_for(
        Duration::from_secs(10),
        "the rejoined node to be ready",
        || async move {
            http_get(http, "/readyz")
                .await
                .starts_with("HTTP/1.1 200")
                .then_some(())
        },
    )
    .await;
    let leader = agreed_leader(&nodes, None).await;
    assert_ne!(leader as usize, victim + 1);
    nodes[(leader - 1) as usize]
        .take()
        .unwrap()
        .node
        .shutdown()
        .await;
    agreed_leader(&nodes, Some(leader)).await;
    write(c, "c", 3).await;
    assert_eq!(c.get_bucket("vol1", "bkt1").await.unwrap().key_count, 28);
    for n in nodes.into_iter().flatten() {
        n.node.shutdown().await;
    }
}

/// A follower other than the lowest id comes back on an empty data
/// directory: the leader recorded it as holding entries it no longer has
/// (before, it stayed a learner at applied index 0 forever), so it hands
/// leadership over. While the node cannot catch up it refuses votes, says so
/// on /readyz and keeps waiting across a restart; then it catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_catches_up_and_votes_only_after() {
    let faults = Arc::new(Faults::default());
    let (addrs, mut nodes, c) = cluster(Some(faults.clone())).await;
    let leader = agreed_leader(&nodes, None).await;
    let victim = (1..3).find(|i| *i as u64 + 1 != leader).unwrap();
    let id = victim as u64 + 1;
    nodes[victim].take().unwrap().node.shutdown().await;
    write(&c, "b", 5).await;

    // The disk is replaced; the leader cannot reach the node for now.
    faults.isolate(id, &[1, 2, 3]);
    nodes[victim] = Some(
        TestNode::start_member_with(&addrs[victim], &addrs, Some(faults.clone()), |_| {}).await,
    );
    let n = nodes[victim].as_ref().unwrap();
    wait_for(Duration::from_secs(20), "the node to catch up", || {
        let p = n.node.admission.phase();
        async move { (p == Phase::CatchingUp).then_some(()) }
    })
    .await;
    let ready = http_get(n.node.http_addr, "/readyz").await;
    assert!(
        ready.starts_with("HTTP/1.1 503") && ready.contains("rejoining"),
        "{ready}"
    );
    // Its vote is not given while it lacks entries it may have acknowledged.
    let mut raft = om_proto::raft::raft_service_client::RaftServiceClient::connect(format!(
        "http://{}",
        addrs[victim].raft
    ))
    .await
    .unwrap();
    let vote = raft
        .vote(om_proto::raft::VoteRequest {
            vote: Some(om_proto::raft::Vote {
                leader_id: Some(om_proto::raft::LeaderId {
                    term: 1000,
                    node_id: leader,
                }),
                committed: false,
            }),
            last_log_id: None,
            leadership_transfer: false,
        })
        .await;
    assert_eq!(vote.unwrap_err().code(), tonic::Code::Unavailable);
    assert_eq!(
        metrics_of(n).current_term,
        0,
        "it neither voted nor campaigned"
    );
    // The leader had recorded entries the node lost: it handed leadership
    // over to the third member.
    let others: Vec<usize> = (0..3).filter(|i| *i != victim).collect();
    wait_for(Duration::from_secs(20), "leadership handed over", || {
        let ls: Vec<Option<u64>> = others
            .iter()
            .map(|i| metrics_of(nodes[*i].as_ref().unwrap()).current_leader)
            .collect();
        let ok = ls[0].is_some_and(|l| l != leader && l != id) && ls[0] == ls[1];
        async move { ok.then_some(()) }
    })
    .await;

    // A restart before it caught up keeps it waiting (the marker says so).
    let dir = nodes[victim].take().unwrap().stop().await;
    nodes[victim] = Some(
        TestNode::start_member_in(dir, &addrs[victim], &addrs, Some(faults.clone()), |_| {}).await,
    );
    let n = nodes[victim].as_ref().unwrap();
    assert_eq!(n.node.admission.phase(), Phase::CatchingUp);
    let ready = http_get(n.node.http_addr, "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");

    faults.heal();
    let o = outcome_of(n).await;
    assert!(
        matches!(o, Outcome::Rejoined { target, .. } if target >= 25),
        "{o:?}"
    );
    check_rejoined(&addrs, nodes, &c, victim).await;
}

/// The lowest id, wiped, does not initialize a cluster again: it finds the
/// cluster through the other members and rejoins it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_lowest_id_rejoins_instead_of_initializing() {
    let (addrs, mut nodes, c) = cluster(None).await;
    if agreed_leader(&nodes, None).await == 1 {
        c.transfer_leader(2).await.unwrap();
    }
    let leader = agreed_leader(&nodes, None).await;
    assert_ne!(leader, 1);
    nodes[0].take().unwrap().node.shutdown().await;
    write(&c, "b", 5).await;
    nodes[0] = Some(TestNode::start_member(&addrs[0], &addrs).await);
    let o = outcome_of(nodes[0].as_ref().unwrap()).await;
    assert!(
        matches!(o, Outcome::Rejoined { reset: true, target } if target >= 25),
        "{o:?}"
    );
    check_rejoined(&addrs, nodes, &c, 0).await;
}

/// A first boot waits for every member before the lowest id initializes;
/// members that lost their data meanwhile are told apart by the others' state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_boot_waits_for_every_member() {
    let addrs = cluster_addrs(3);
    let mut nodes = Vec::new();
    for a in &addrs[..2] {
        nodes.push(Some(TestNode::start_member(a, &addrs).await));
    }
    let first = nodes[0].as_ref().unwrap();
    wait_for(Duration::from_secs(10), "node 1 to wait for node 3", || {
        let msg = first.node.admission.message();
        async move { msg.contains("[3]").then_some(()) }
    })
    .await;
    assert_eq!(first.node.admission.phase(), Phase::Sealed);
    assert!(first.node.raft.is_initialized().await.is_ok_and(|i| !i));
    nodes.push(Some(TestNode::start_member(&addrs[2], &addrs).await));
    agreed_leader(&nodes, None).await;
    assert_eq!(
        outcome_of(nodes[0].as_ref().unwrap()).await,
        Outcome::Initialized
    );
    // The others took part in the first election, or, if it was over by
    // the time they asked, caught up without any reset.
    for n in &nodes[1..] {
        let o = outcome_of(n.as_ref().unwrap()).await;
        assert!(
            matches!(o, Outcome::Fresh | Outcome::Rejoined { reset: false, .. }),
            "{o:?}"
        );
    }
    let c = members_client(&addrs);
    c.create_volume("vol1", "").await.unwrap();
    for n in nodes.into_iter().flatten() {
        n.node.shutdown().await;
    }
}

/// A member added by scaling out (`--join`, as the StatefulSet starts pods
/// past the initial cluster) whose volume is lost restarts with an empty log
/// and no vote. It may have voted and acknowledged entries before, so it
/// goes through the sealed path like a configured member: it refuses votes
/// until it has caught up with the leader, then serves with every entry.
/// Real processes, killed with SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_joined_voter_does_not_vote_before_it_caught_up() {
    use om_tests::OmProcess;
    let addrs = cluster_addrs(4);
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let initial = &addrs[..3];
    let mut procs: Vec<OmProcess> = initial
        .iter()
        .zip(&dirs)
        .map(|(a, d)| OmProcess::spawn_member(d.path(), a, initial))
        .collect();
    let c = members_client(initial);
    wait_for(Duration::from_secs(30), "a leader", || {
        let c = &c;
        async move { c.cluster_status().await.ok().filter(|s| s.leader_id != 0) }
    })
    .await;
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    write(&c, "a", 20).await;

    // Scale out: node 4 joins and becomes a voter.
    let j = addrs[3].clone();
    procs.push(OmProcess::spawn_member_args(
        dirs[3].path(),
        &j,
        initial,
        &["--join"],
    ));
    c.add_node(4, &j.raft, &j.grpc, false).await.unwrap();
    write(&c, "b", 5).await;
    let committed = c.cluster_status().await.unwrap().committed_index;
    wait_for(Duration::from_secs(20), "node 4 to apply", || {
        let addr = j.grpc.clone();
        async move {
            OmClient::node_status(&addr)
                .await
                .ok()
                .filter(|s| s.applied_index >= committed)
        }
    })
    .await;

    // Its volume is lost; the cluster writes on without it.
    procs[3].kill9();
    std::fs::remove_dir_all(dirs[3].path()).unwrap();
    std::fs::create_dir_all(dirs[3].path()).unwrap();
    write(&c, "c", 5).await;
    procs[3].restart();

    // From its first answer on, it is not admitted and refuses votes.
    let first = wait_for(Duration::from_secs(20), "node 4's Raft port", || {
        let addr = j.raft.clone();
        async move { om::peers::peer_state(&addr, 99, None).await.ok() }
    })
    .await;
    assert!(!first.admitted, "an empty joiner was admitted at once");
    let mut raft = om_proto::raft::raft_service_client::RaftServiceClient::connect(format!(
        "http://{}",
        j.raft
    ))
    .await
    .unwrap();
    let vote = raft
        .vote(om_proto::raft::VoteRequest {
            vote: Some(om_proto::raft::Vote {
                leader_id: Some(om_proto::raft::LeaderId {
                    term: 1000,
                    node_id: 1,
                }),
                committed: false,
            }),
            last_log_id: None,
            leadership_transfer: false,
        })
        .await;
    assert_eq!(vote.unwrap_err().code(), tonic::Code::Unavailable);

    // It catches up, is admitted and holds every write.
    let http: std::net::SocketAddr = j.http.parse().unwrap();
    wait_for(
        Duration::from_secs(60),
        "node 4 to be ready",
        || async move {
            http_get(http, "/readyz")
                .await
                .starts_with("HTTP/1.1 200")
                .then_some(())
        },
    )
    .await;
    let lc = local_client(&j, Duration::from_secs(2));
    for key in ["a000", "b004", "c004"] {
        lc.lookup_key("vol1", "bkt1", key)
            .await
            .unwrap_or_else(|e| panic!("node 4 lacks {key}: {e}"));
    }
    let verified = wait_for(Duration::from_secs(30), "the replicas to agree", || {
        let c = &c;
        async move { c.verify_replicas(false).await.ok().filter(|r| r.all_agree) }
    })
    .await;
    assert_eq!(verified.members.len(), 4);
}
