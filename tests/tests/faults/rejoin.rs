//! Members restarted on an empty data directory (a replaced disk) with their
//! usual flags, and first boots of a static cluster.

use std::sync::Arc;
use std::time::Duration;

use om::tasks::rejoin::{Outcome, Phase};
use om_client::OmClient;
use om_client::v1::BucketLayout;
use om_tests::{
    ClusterOptions, Faults, TestCluster, TestNode, cluster_addrs, http_get, local_client,
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

/// Starts a 3-node cluster (with `faults` on every start, if given) with one
/// volume, one bucket and 20 keys.
async fn cluster(faults: Option<Arc<Faults>>) -> (TestCluster, OmClient) {
    let mut options = ClusterOptions::default();
    if let Some(f) = faults {
        options = options.faults(f);
    }
    let cluster = TestCluster::start_with(3, options).await;
    let c = cluster.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    write(&c, "a", 20).await;
    (cluster, c)
}

/// After member `victim` rejoined: it holds everything, is ready, and counts
/// in a quorum again: with the leader stopped, it and the third member elect
/// a leader between them and commit.
async fn check_rejoined(mut cluster: TestCluster, c: &OmClient, victim: u64) {
    let lc = local_client(
        &cluster.addrs()[(victim - 1) as usize],
        Duration::from_secs(2),
    );
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
    let http = cluster.node(victim).node.http_addr;
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
    let leader = cluster.leader().await;
    assert_ne!(leader, victim);
    cluster.stop(leader).await;
    cluster.leader_other_than(leader).await;
    write(c, "c", 3).await;
    assert_eq!(c.get_bucket("vol1", "bkt1").await.unwrap().key_count, 28);
    cluster.shutdown().await;
}

/// A follower other than the lowest id comes back on an empty data
/// directory: the leader recorded it as holding entries it no longer has
/// (before, it stayed a learner at applied index 0 forever), so it hands
/// leadership over. While the node cannot catch up it refuses votes, says so
/// on /readyz and keeps waiting across a restart; then it catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_catches_up_and_votes_only_after() {
    let faults = Arc::new(Faults::default());
    let (mut cluster, c) = cluster(Some(faults.clone())).await;
    let leader = cluster.leader().await;
    let id = (2..=3).find(|id| *id != leader).unwrap();
    cluster.stop(id).await;
    write(&c, "b", 5).await;

    // The disk is replaced; the leader cannot reach the node for now.
    faults.isolate(id, &[1, 2, 3]);
    cluster.restart_wiped(id).await;
    let n = cluster.node(id);
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
        cluster.addrs()[(id - 1) as usize].raft
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
    let others: Vec<u64> = (1..=3).filter(|o| *o != id).collect();
    wait_for(Duration::from_secs(20), "leadership handed over", || {
        let ls: Vec<Option<u64>> = others
            .iter()
            .map(|o| metrics_of(cluster.node(*o)).current_leader)
            .collect();
        let ok = ls[0].is_some_and(|l| l != leader && l != id) && ls[0] == ls[1];
        async move { ok.then_some(()) }
    })
    .await;

    // A restart before it caught up keeps it waiting (the marker says so).
    cluster.restart(id).await;
    let n = cluster.node(id);
    assert_eq!(n.node.admission.phase(), Phase::CatchingUp);
    let ready = http_get(n.node.http_addr, "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");

    faults.heal();
    let o = outcome_of(n).await;
    assert!(
        matches!(o, Outcome::Rejoined { target, .. } if target >= 25),
        "{o:?}"
    );
    check_rejoined(cluster, &c, id).await;
}

/// The lowest id, wiped, does not initialize a cluster again: it finds the
/// cluster through the other members and rejoins it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_lowest_id_rejoins_instead_of_initializing() {
    let (mut cluster, c) = cluster(None).await;
    if cluster.leader().await == 1 {
        c.transfer_leader(2).await.unwrap();
    }
    let leader = cluster.leader().await;
    assert_ne!(leader, 1);
    cluster.stop(1).await;
    write(&c, "b", 5).await;
    cluster.restart_wiped(1).await;
    let o = outcome_of(cluster.node(1)).await;
    assert!(
        matches!(o, Outcome::Rejoined { reset: true, target } if target >= 25),
        "{o:?}"
    );
    check_rejoined(cluster, &c, 1).await;
}

/// A first boot waits for every member before the lowest id initializes;
/// members that lost their data meanwhile are told apart by the others' state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_boot_waits_for_every_member() {
    let mut cluster = TestCluster::new(3, ClusterOptions::default());
    cluster.start_member(1).await;
    cluster.start_member(2).await;
    let first = cluster.node(1);
    wait_for(Duration::from_secs(10), "node 1 to wait for node 3", || {
        let msg = first.node.admission.message();
        async move { msg.contains("[3]").then_some(()) }
    })
    .await;
    assert_eq!(first.node.admission.phase(), Phase::Sealed);
    assert!(first.node.raft.is_initialized().await.is_ok_and(|i| !i));
    cluster.start_member(3).await;
    cluster.leader().await;
    assert_eq!(outcome_of(cluster.node(1)).await, Outcome::Initialized);
    // The others took part in the first election, or, if it was over by
    // the time they asked, caught up without any reset.
    for id in 2..=3 {
        let o = outcome_of(cluster.node(id)).await;
        assert!(
            matches!(o, Outcome::Fresh | Outcome::Rejoined { reset: false, .. }),
            "{o:?}"
        );
    }
    let c = cluster.client();
    c.create_volume("vol1", "").await.unwrap();
    cluster.shutdown().await;
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
