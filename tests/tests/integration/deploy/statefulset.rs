//! The StatefulSet run as processes: a rolling update under load, scaling
//! out and in, a restore through the init container, and health and
//! reflection answered to real clients.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::processes::*;

/// The StatefulSet as three processes (its init container, command,
/// environment and ConfigMap; mutual TLS with a test CA): a rolling update
/// as Kubernetes does it (highest ordinal first, SIGTERM, wait until ready
/// again) under a steady write load loses no acknowledged write and shows
/// the client no error; then the leader's write unavailability is measured
/// for SIGTERM (handover) and for kill -9 (election), side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
pub(crate) async fn the_statefulset_survives_a_rolling_update_under_load() {
    let mut sts = Sts::start(77, 3).await;
    sts.pods.truncate(3);
    let (pods, client) = (&mut sts.pods, sts.client.clone());
    assert!(pods.iter().all(|p| p.config.exists()));
    let load = Arc::new(Load {
        acked: Default::default(),
        errors: Default::default(),
        last_ack: std::sync::Mutex::new(Instant::now()),
        longest_gap: Default::default(),
        stop: AtomicBool::new(false),
    });
    let writer = tokio::spawn(write_loop(client.clone(), load.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The rolling update: the highest ordinal first.
    let mut report = Vec::new();
    for i in (0..3).rev() {
        let was_leader = leader_ordinal(&client).await == i;
        load.mark();
        let stopped = pods[i].signal(libc::SIGTERM);
        assert!(
            stopped < Duration::from_secs(15),
            "pod {i} took {stopped:?} to stop"
        );
        pods[i].start();
        wait_ready(pods).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        report.push(format!(
            "om-{i}{}: stopped in {stopped:?}, longest write gap {:?}",
            if was_leader { " (leader)" } else { "" },
            load.gap()
        ));
    }
    // The leader alone, SIGTERM then kill -9, measured alike.
    let mut gaps = BTreeMap::new();
    for (name, sig) in [("SIGTERM", libc::SIGTERM), ("SIGKILL", libc::SIGKILL)] {
        let l = leader_ordinal(&client).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        load.mark();
        pods[l].signal(sig);
        // Until writes flow again without it.
        let before = load.acked.lock().unwrap().len();
        let deadline = Instant::now() + Duration::from_secs(20);
        while load.acked.lock().unwrap().len() < before + 20 {
            assert!(
                Instant::now() < deadline,
                "writes did not resume after {name}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        gaps.insert(name, load.gap());
        pods[l].start();
        wait_ready(pods).await;
    }
    load.stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    for line in &report {
        println!("rolling update: {line}");
    }
    println!(
        "leader write unavailability: SIGTERM {:?}, kill -9 {:?}",
        gaps["SIGTERM"], gaps["SIGKILL"]
    );
    let errors = load.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "client-visible errors: {errors:?}");
    let acked = load.acked.lock().unwrap().clone();
    assert!(
        acked.len() > 100,
        "only {} writes acknowledged",
        acked.len()
    );
    for key in &acked {
        client
            .lookup_key("vol1", "bkt1", key)
            .await
            .unwrap_or_else(|e| panic!("acknowledged {key} lost: {e}"));
    }
}

/// Scaling as the runbook says: pod om-3 starts from the same ConfigMap,
/// finds itself outside the initial cluster and waits; `add-node` makes it
/// a learner, then a voter once caught up, and it serves what was written
/// before it came. Scaling in removes the member first, then the pod; the
/// cluster keeps serving throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
pub(crate) async fn scaling_out_and_in_follows_the_runbook() {
    let mut sts = Sts::start(78, 3).await;
    let c = sts.client.clone();
    for i in 0..50 {
        c.put_key("vol1", "bkt1", &format!("before-{i:03}"), 1)
            .await
            .unwrap();
    }
    sts.pods[3].start();
    // Not a member yet: it waits, not ready.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !sts.pods[3].ready().await,
        "a joiner is ready only once added"
    );
    let ip = sts.pods[3].ip();
    let status = c
        .add_node(4, &format!("{ip}:9872"), &format!("{ip}:9862"), false)
        .await
        .unwrap();
    let voters = status.members.iter().filter(|m| m.voter).count();
    assert_eq!(voters, 4, "{status:?}");
    wait_ready(&sts.pods).await;
    // The new member holds what was written before it joined.
    om_tests::wait_for(Duration::from_secs(10), "om-3 to apply the log", || {
        let c = c.clone();
        async move {
            let s = c.cluster_status().await.ok()?;
            let m = s.members.iter().find(|m| m.node_id == 4)?;
            (m.matched_index >= s.committed_index).then_some(())
        }
    })
    .await;
    c.put_key("vol1", "bkt1", "after-join", 1).await.unwrap();
    // Scale in: the member goes first, then the pod.
    let status = c.remove_node(4).await.unwrap();
    assert_eq!(status.members.len(), 3, "{status:?}");
    sts.pods[3].signal(libc::SIGTERM);
    c.put_key("vol1", "bkt1", "after-leave", 1).await.unwrap();
    let listed = c
        .list_keys(om_client::v1::ListKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.keys.len(), 52);
}

/// Disaster recovery as the manifests do it: a 3-member cluster takes
/// writes; the backup CronJob's command (omctl backup create, verify,
/// prune) runs against member 0 and writes one backup to the backup
/// volume; the cluster is gone. A new cluster, its data directories empty,
/// starts with components/restore and the ConfigMap's restore_from naming
/// that backup: each pod's init container restores its member before om
/// starts, and the cluster serves every key written before the backup and
/// takes writes. A member that restarts keeps its store: the init
/// container leaves it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
pub(crate) async fn restore_from_a_backup_through_the_init_container() {
    let backups = tempfile::tempdir().unwrap();
    let mut old = Sts::start_with(79, 3, Some(backups.path()), "").await;
    for i in 0..50 {
        old.client
            .put_key("vol1", "bkt1", &format!("before-{i:03}"), 1)
            .await
            .unwrap();
    }
    let printed = old.run_backup_job();
    let ids = backup_ids(backups.path());
    assert_eq!(ids.len(), 1, "one backup, not {ids:?}:\n{printed}");
    assert!(printed.contains(&ids[0]), "{printed}");
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(backups.path().join(&ids[0]).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["node_id"], 1, "the backup job backs up member 0");
    for p in &mut old.pods[..3] {
        p.signal(libc::SIGTERM);
    }
    drop(old);

    let mut new = Sts::start_with(80, 3, Some(backups.path()), &ids[0]).await;
    let c = new.client.clone();
    for i in 0..50 {
        c.lookup_key("vol1", "bkt1", &format!("before-{i:03}"))
            .await
            .unwrap_or_else(|e| panic!("before-{i:03} was not restored: {e}"));
    }
    c.put_key("vol1", "bkt1", "after-restore", 1).await.unwrap();
    new.pods[0].signal(libc::SIGTERM);
    new.pods[0].start();
    wait_ready(&new.pods[..3]).await;
    c.put_key("vol1", "bkt1", "after-restart", 1).await.unwrap();
    let listed = c
        .list_keys(om_client::v1::ListKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.keys.len(), 52);
}

/// grpc.health.v1 answers SERVING once the node is ready and NOT_SERVING
/// while it has no leader; reflection lists and describes om's services, as
/// `grpcurl list` and `grpcurl describe` ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn health_and_reflection_answer_real_clients() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let node = om_tests::TestNode::start().await;
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", node.endpoint()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(ch.clone());
    for service in ["", "om.v1.OzoneManager", "om.v1.Cluster"] {
        let status = om_tests::wait_for(Duration::from_secs(10), "SERVING", || {
            let mut health = health.clone();
            async move {
                let r = health
                    .check(HealthCheckRequest {
                        service: service.into(),
                    })
                    .await
                    .ok()?
                    .into_inner();
                (r.status == ServingStatus::Serving as i32).then_some(r.status)
            }
        })
        .await;
        assert_eq!(status, ServingStatus::Serving as i32);
    }
    assert_eq!(
        health
            .check(HealthCheckRequest {
                service: "no.such.Service".into()
            })
            .await
            .unwrap_err()
            .code(),
        tonic::Code::NotFound
    );

    let mut reflection = ServerReflectionClient::new(ch);
    let ask = |m: MessageRequest| {
        futures::stream::iter(vec![ServerReflectionRequest {
            host: String::new(),
            message_request: Some(m),
        }])
    };
    let mut answers = reflection
        .server_reflection_info(ask(MessageRequest::ListServices(String::new())))
        .await
        .unwrap()
        .into_inner();
    let listed = match answers.message().await.unwrap().unwrap().message_response {
        Some(MessageResponse::ListServicesResponse(l)) => l
            .service
            .into_iter()
            .map(|s| s.name)
            .collect::<BTreeSet<_>>(),
        other => panic!("{other:?}"),
    };
    for s in ["om.v1.OzoneManager", "om.v1.Cluster"] {
        assert!(listed.contains(s), "{listed:?}");
    }
    let mut answers = reflection
        .server_reflection_info(ask(MessageRequest::FileContainingSymbol(
            "om.v1.OzoneManager".into(),
        )))
        .await
        .unwrap()
        .into_inner();
    match answers.message().await.unwrap().unwrap().message_response {
        Some(MessageResponse::FileDescriptorResponse(f)) => {
            // The encoded FileDescriptorProto of om.proto: its package, the
            // service and its methods are there by name.
            let file = f.file_descriptor_proto.concat();
            let has = |s: &str| file.windows(s.len()).any(|w| w == s.as_bytes());
            assert!(has("om/v1/om.proto") && has("om.v1"));
            assert!(has("OzoneManager") && has("ListKeys") && has("ListKeysRequest"));
        }
        other => panic!("{other:?}"),
    }
    node.stop().await;

    // A member whose peers never start has no leader: NOT_SERVING.
    let addrs = om_tests::cluster_addrs(3);
    let lonely = om_tests::TestNode::start_member(&addrs[0], &addrs).await;
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", addrs[0].grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let r = HealthClient::new(ch)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, ServingStatus::NotServing as i32);
    lonely.node.shutdown().await;
}
