//! Multi-node clusters over the real gRPC Raft transport, in-process.

use std::time::Duration;

use om_client::v1::BucketLayout;
use om_client::{ClientOptions, OmClient};
use om_tests::{
    ClusterOptions, TestCluster, TestNode, cluster_addrs, local_client, members_client, metrics_of,
    wait_for,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_and_survive_losing_the_leader() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.leader().await;
    let c = OmClient::new(&cluster.endpoints(), om_tests::client_options()).unwrap();
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
    for a in cluster.addrs() {
        let local = OmClient::new(
            std::slice::from_ref(&a.grpc),
            ClientOptions {
                stale_reads: true,
                ..om_tests::client_options()
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
    cluster.stop(leader).await;
    let new_leader = cluster.leader_other_than(leader).await;
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
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_minority_cannot_commit_or_read_and_all_converge_after_healing() {
    let faults = std::sync::Arc::new(om_tests::Faults::default());
    let cluster =
        TestCluster::start_with(3, ClusterOptions::default().faults(faults.clone())).await;
    let addrs = cluster.addrs();
    let old = cluster.leader().await;
    let c = cluster.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();

    faults.isolate(old, &[1, 2, 3]);
    let minority = (old - 1) as usize;
    let majority: Vec<u64> = (1..=3).filter(|id| *id != old).collect();

    // The isolated old leader can neither commit a write nor serve a linearizable read.
    let isolated = OmClient::new(
        std::slice::from_ref(&addrs[minority].grpc),
        ClientOptions {
            deadline: Duration::from_secs(4),
            attempt_timeout: Duration::from_secs(4),
            ..om_tests::client_options()
        },
    )
    .unwrap();
    let w = isolated.put_key("vol1", "bkt1", "minority", 1).await;
    assert!(w.is_err(), "a minority committed a write: {w:?}");
    let r = isolated.get_volume("vol1").await;
    assert!(r.is_err(), "a minority answered a linearizable read: {r:?}");

    // The majority elects a leader and goes on.
    let new = cluster.leader_among(&majority).await;
    assert_ne!(new, old);
    let cm = members_client(
        &addrs
            .iter()
            .filter(|a| a.id != old)
            .cloned()
            .collect::<Vec<_>>(),
    );
    cm.put_key("vol1", "bkt1", "majority", 2).await.unwrap();

    faults.heal();
    for a in addrs {
        let lc = local_client(a, Duration::from_secs(2));
        wait_for(Duration::from_secs(20), "convergence after healing", || {
            let lc = &lc;
            async move { lc.lookup_key("vol1", "bkt1", "majority").await.ok() }
        })
        .await;
        let gone = lc.lookup_key("vol1", "bkt1", "minority").await;
        assert!(
            gone.is_err(),
            "the uncommitted minority write survived on {}",
            a.id
        );
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_follower_catches_up_from_a_snapshot() {
    let options = ClusterOptions::default().tweak(|_, a| {
        a.snapshot_every = Some(20);
        a.snapshot_keep_logs = Some(5);
    });
    let mut cluster = TestCluster::start_with(3, options).await;
    let leader = cluster.leader().await;
    let c = cluster.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for i in 0..40 {
        c.put_key("vol1", "bkt1", &format!("a{i:03}"), i)
            .await
            .unwrap();
    }
    let victim = (1..=3).find(|id| *id != leader).unwrap();
    cluster.stop(victim).await;
    for i in 0..40 {
        c.put_key("vol1", "bkt1", &format!("b{i:03}"), i)
            .await
            .unwrap();
    }
    // The leader has purged the log the wiped node would need (its snapshot
    // policy builds in the background, then openraft purges).
    wait_for(
        Duration::from_secs(30),
        "the leader to snapshot and purge its log",
        || {
            let m = metrics_of(cluster.node(leader));
            async move { m.purged.is_some_and(|p| p.index > 10).then_some(()) }
        },
    )
    .await;

    // Same id and addresses, empty data directory.
    cluster.restart_wiped(victim).await;
    let lc = local_client(
        &cluster.addrs()[(victim - 1) as usize],
        Duration::from_secs(2),
    );
    wait_for(
        Duration::from_secs(30),
        "the wiped node to catch up",
        || {
            let lc = &lc;
            async move { lc.lookup_key("vol1", "bkt1", "b039").await.ok() }
        },
    )
    .await;
    // Raft's metrics report the installed snapshot a moment after the state
    // machine holds its data.
    wait_for(
        Duration::from_secs(10),
        "the wiped node's metrics to show the installed snapshot (caught up without one?)",
        || {
            let m = metrics_of(cluster.node(victim));
            async move { m.snapshot.is_some().then_some(()) }
        },
    )
    .await;
    assert!(lc.lookup_key("vol1", "bkt1", "a000").await.is_ok());
    assert_eq!(lc.get_bucket("vol1", "bkt1").await.unwrap().key_count, 80);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_across_a_failover_is_applied_once() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.leader().await;
    let c = cluster.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let req = om_client::v1::PutKeyRequest {
        header: Some(c.next_header()),
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: "once".into(),
        size: 7,
        ..Default::default()
    };
    let send = |addr: String, req: om_client::v1::PutKeyRequest| async move {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_with_connector(om_tls::Connector::new(
                om_tests::mtls().map(|p| p.client.clone()),
            ))
            .await
            .unwrap();
        let mut raw = om_client::v1::ozone_manager_client::OzoneManagerClient::new(ch);
        raw.put_key(req).await.map(|r| r.into_inner())
    };
    let first = send(
        cluster.addrs()[(leader - 1) as usize].grpc.clone(),
        req.clone(),
    )
    .await
    .unwrap();
    // The reply may have been lost: the client retries on the next leader.
    cluster.stop(leader).await;
    let new = cluster.leader_other_than(leader).await;
    assert_ne!(new, leader);
    // The client library resends the same request (same client id and seq),
    // following leader hints until the new leader answers.
    let again = c
        .call(|ch| {
            let req = req.clone();
            async move {
                om_client::v1::ozone_manager_client::OzoneManagerClient::new(ch)
                    .put_key(req)
                    .await
            }
        })
        .await
        .unwrap();
    assert_eq!(
        first, again,
        "the retry is answered from the replicated retry cache"
    );
    let k = c.lookup_key("vol1", "bkt1", "once").await.unwrap();
    assert_eq!(
        Some(k.update_id),
        first.key.map(|k| k.update_id),
        "applied exactly once"
    );
    assert_eq!(c.get_bucket("vol1", "bkt1").await.unwrap().key_count, 1);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_and_leader_transfer_while_writes_continue() {
    // Three members; the fourth joins later.
    let mut cluster = TestCluster::start_with(4, ClusterOptions::default().joiners(1)).await;
    let addrs = cluster.addrs()[..3].to_vec();
    let joiner = cluster.addrs()[3].clone();
    let c = members_client(&addrs);
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acked = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let writer = {
        let stop = stop.clone();
        let acked = acked.clone();
        let eps: Vec<String> = addrs
            .iter()
            .chain([&joiner])
            .map(|a| a.grpc.clone())
            .collect();
        tokio::spawn(async move {
            let c = OmClient::new(&eps, om_tests::client_options()).unwrap();
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let k = format!("k{i:05}");
                c.put_key("vol1", "bkt1", &k, 1)
                    .await
                    .expect("write during membership change");
                acked.lock().unwrap().push(k);
                i += 1;
            }
        })
    };

    // A fourth node starts empty and joins, given the members it joins
    // (under TLS its Raft port admits only them until it has the membership).
    cluster.start_member(joiner.id).await;
    let s = c
        .add_node(joiner.id, &joiner.raft, &joiner.grpc, false)
        .await
        .unwrap();
    assert_eq!(s.members.iter().filter(|m| m.voter).count(), 4);

    let s = c.transfer_leader(joiner.id).await.unwrap();
    assert_eq!(s.leader_id, joiner.id);
    let s = c.remove_node(1).await.unwrap();
    assert_eq!(s.members.len(), 3);
    assert!(s.members.iter().all(|m| m.node_id != 1));

    // Refusals are clear.
    let e = c.remove_node(1).await.unwrap_err();
    assert_eq!(e.reason(), "NODE_NOT_FOUND");
    let e = c.transfer_leader(99).await.unwrap_err();
    assert_eq!(e.reason(), "NODE_NOT_FOUND");

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(!acked.is_empty());
    for k in &acked {
        c.lookup_key("vol1", "bkt1", k).await.unwrap();
    }
    cluster.shutdown().await;
}

/// Replicas apply the same commands to byte-identical tables, and the leader's
/// background purge of a recursively deleted directory continues on the next
/// leader when the first one stops mid-purge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_stay_identical_and_a_new_leader_finishes_a_purge() {
    use om_client::v1::*;
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.leader().await;
    let c = cluster.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "fs1", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    // Records with many map entries: each replica must encode them in the same
    // order (protobuf maps are BTreeMaps, not per-process-seeded HashMaps).
    let meta: std::collections::BTreeMap<String, String> = (0..16)
        .map(|i| (format!("m{i:02}"), format!("v{i}")))
        .collect();
    c.create_volume_with(CreateVolumeRequest {
        name: "vol2".into(),
        metadata: meta.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..8 {
        c.put_key_with(PutKeyRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: format!("meta{i}"),
            size: 1,
            metadata: meta.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let mut file_blocks = std::collections::BTreeSet::new();
    for i in 0..40 {
        let s = c
            .create_file(CreateFileRequest {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                path: format!("tree/d{}/f{i}", i % 4),
                recursive: true,
                blocks: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        file_blocks.insert(s.blocks[0].block_id);
        c.commit_key(CommitKeyRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            key: s.path,
            session_id: s.session_id,
            size: 1,
            blocks: vec![BlockInfo {
                block_id: s.blocks[0].block_id,
                offset: 0,
                length: 1,
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let up = c
        .initiate_multipart_upload(InitiateMultipartUploadRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "mp".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .upload
        .unwrap();
    let etag = "0cc175b9c0f1b6a831c399e269772661";
    c.commit_part(CommitPartRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: "mp".into(),
        upload_id: up.upload_id.clone(),
        part_number: 1,
        size: 10,
        etag: etag.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    c.delete_path(DeletePathRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        path: "tree".into(),
        recursive: true,
        ..Default::default()
    })
    .await
    .unwrap();
    // Stop the leader right away: the purge may be anywhere.
    cluster.stop(leader).await;
    let live: Vec<u64> = (1..=3).filter(|id| cluster.is_running(*id)).collect();
    cluster.leader_among(&live).await;
    let k = c
        .complete_multipart_upload(CompleteMultipartUploadRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "mp".into(),
            upload_id: up.upload_id.clone(),
            parts: vec![CompletedPart {
                part_number: 1,
                etag: etag.into(),
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .key
        .unwrap();
    assert!(k.etag.ends_with("-1"));
    // The new leader finishes the purge: every file's block is released.
    wait_for(Duration::from_secs(30), "purge on the new leader", || {
        let c = &c;
        let file_blocks = &file_blocks;
        async move {
            let r = c
                .list_deleted_blocks(ListDeletedBlocksRequest::default())
                .await
                .ok()?;
            let freed: std::collections::BTreeSet<u64> = r
                .entries
                .iter()
                .flat_map(|e| e.blocks.iter().map(|b| b.block_id))
                .collect();
            file_blocks.is_subset(&freed).then_some(())
        }
    })
    .await;
    // Both live replicas converge on byte-identical tables.
    let (a, b) = (live[0], live[1]);
    wait_for(Duration::from_secs(20), "replicas to converge", || {
        let (na, nb) = (cluster.node(a), cluster.node(b));
        let ma = metrics_of(na).last_applied;
        let mb = metrics_of(nb).last_applied;
        let same = ma == mb
            && na.dump() == nb.dump()
            && om::store::dump_table(na.node.service.db(), om::store::keys::RETRY_CACHE_CF)
                .unwrap()
                == om::store::dump_table(nb.node.service.db(), om::store::keys::RETRY_CACHE_CF)
                    .unwrap();
        async move { same.then_some(()) }
    })
    .await;
    let dump = cluster.node(a).dump();
    assert!(!dump.keys().any(|(t, _)| *t == "deleted_dirs"));
    assert!(!dump.keys().any(|(t, _)| *t == "files"));
    cluster.shutdown().await;
}

/// A cluster names itself once (every replica holds the same id); AddNode
/// refuses a node whose store holds another cluster's state, and a Raft RPC
/// carrying another cluster's id is refused before it is decoded. Neither
/// refusal changes either cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clusters_node_or_traffic_is_refused() {
    use om_proto::raft::raft_service_client::RaftServiceClient;
    let cluster = TestCluster::start(3).await;
    let addrs = cluster.addrs();
    let c = cluster.client();
    let ids = wait_for(
        Duration::from_secs(10),
        "every replica to hold the cluster id",
        || async {
            let mut ids = Vec::new();
            for a in addrs {
                ids.push(
                    local_client(a, Duration::from_secs(2))
                        .cluster_status()
                        .await
                        .ok()?
                        .cluster_id,
                );
            }
            (ids.iter().all(|i| !i.is_empty() && *i == ids[0])).then_some(ids)
        },
    )
    .await;
    assert_eq!(ids[0].len(), 32, "{ids:?}");

    // Another cluster: one node, id 4, with a store of its own.
    let other = TestNode::start_with(|a| a.node_id = Some(4)).await;
    let oc = OmClient::new(&[other.endpoint()], om_tests::client_options()).unwrap();
    oc.create_volume("theirs", "").await.unwrap();
    let theirs = wait_for(
        Duration::from_secs(10),
        "the other cluster's id",
        || async { Some(oc.cluster_status().await.ok()?.cluster_id).filter(|i| !i.is_empty()) },
    )
    .await;
    assert_ne!(theirs, ids[0]);
    let before = c.cluster_status().await.unwrap().members;
    let e = c
        .add_node(
            4,
            &other.node.raft_addr.to_string(),
            &other.endpoint(),
            false,
        )
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "NODE_OF_ANOTHER_CLUSTER", "{e:?}");
    assert_eq!(c.cluster_status().await.unwrap().members, before);
    let s = oc.cluster_status().await.unwrap();
    assert_eq!((s.members.len(), s.cluster_id), (1, theirs.clone()));
    oc.get_volume("theirs").await.unwrap();

    // A Raft message stamped with the other cluster's id.
    let target = &addrs[0].raft;
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{target}"))
        .unwrap()
        .connect_with_connector(om_tls::Connector::new(om_tests::mtls_member()))
        .await
        .unwrap();
    let term_before = metrics_of(cluster.node(1)).current_term;
    let mut req = tonic::Request::new(om_proto::raft::VoteRequest {
        vote: Some(om_proto::raft::Vote {
            leader_id: Some(om_proto::raft::LeaderId {
                term: term_before + 100,
                node_id: 2,
            }),
            committed: false,
        }),
        last_log_id: None,
        leadership_transfer: false,
    });
    req.metadata_mut()
        .insert("om-cluster-id", theirs.parse().unwrap());
    let status = RaftServiceClient::new(ch).vote(req).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("cluster"), "{status:?}");
    assert_eq!(metrics_of(cluster.node(1)).current_term, term_before);

    other.node.shutdown().await;
    cluster.shutdown().await;
}

/// A node stops within one grace period however many of its background
/// tasks ignore the stop: they get the grace period together, then are
/// cancelled (waiting for them one after another took a grace period each,
/// past Kubernetes' 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_its_tasks_one_grace_period_together() {
    let addrs = cluster_addrs(1);
    let n = TestNode::start_member_opts(
        tempfile::tempdir().unwrap(),
        &addrs[0],
        &addrs,
        om::server::NodeOptions {
            stubborn_tasks: 12,
            ..Default::default()
        },
        |_| {},
    )
    .await;
    OmClient::new(&[n.endpoint()], om_tests::client_options())
        .unwrap()
        .create_volume("before-stop", "")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    n.node.shutdown().await;
    let took = started.elapsed();
    let grace = om::server::SHUTDOWN_GRACE;
    assert!(
        took >= grace && took < grace + Duration::from_secs(4),
        "shutdown took {took:?}"
    );
}
