//! Replicas never diverge: a (term, index) names one entry forever.
//!
//! Real `om` processes, killed with SIGKILL. A leader sends entries to its
//! followers before its own WAL fsync covers them, so a leader killed with -9
//! can come back with a shorter log than its followers hold. Were it to lead
//! again in its old term, its next entries would reuse log ids the followers
//! already hold with other commands, and they would keep theirs: replicas
//! diverged for good, and acknowledged writes gone from the old leader.

use std::time::Duration;

use om_client::v1::BucketLayout;
use om_client::{ClientOptions, OmClient};
use om_tests::{
    ClusterOptions, OmProcess, ProcessCluster, TestCluster, dump_data_dir, first_difference,
    wait_for,
};

async fn wait_applied(p: &OmProcess, index: u64) {
    let addr = p.grpc.clone();
    wait_for(Duration::from_secs(30), "a node to apply", || {
        let addr = addr.clone();
        async move {
            OmClient::node_status(&addr)
                .await
                .ok()
                .filter(|s| s.applied_index >= index)
                .map(|_| ())
        }
    })
    .await
}

/// The sequence a fault run found: the leader's last appends reach both
/// followers but not its own disk; the leader and one follower are killed
/// with -9 and restarted; writes go on. Every replica must hold every
/// acknowledged write and the same tables, record by record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_before_its_own_flush_never_reuses_log_ids() {
    let holds = tempfile::tempdir().unwrap();
    let hold = |id: u64| holds.path().join(format!("hold-{id}"));
    let mut cluster = ProcessCluster::spawn_with(3, &[], |id| {
        let h = hold(id);
        vec![(
            "OM_TEST_HOLD_WAL_FLUSH".to_string(),
            h.to_str().unwrap().to_string(),
        )]
    });
    let addrs = cluster.addrs().to_vec();
    let first = cluster.leader().await;
    let eps = cluster.endpoints();
    let c = OmClient::new(
        &eps,
        ClientOptions {
            deadline: Duration::from_secs(30),
            ..Default::default()
        },
    )
    .unwrap();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let mut acked = Vec::new();
    for i in 0..10 {
        let key = format!("before/{i:03}");
        acked.push((
            key.clone(),
            c.put_key("vol1", "bkt1", &key, i).await.unwrap(),
        ));
    }

    // The leader stops flushing its WAL: its appends stay in memory, while
    // both followers receive, fsync and acknowledge them, so they commit.
    std::fs::write(hold(first), b"").unwrap();
    for i in 0..20 {
        let key = format!("held/{i:03}");
        acked.push((
            key.clone(),
            c.put_key("vol1", "bkt1", &key, i).await.unwrap(),
        ));
    }
    let committed = c.cluster_status().await.unwrap().committed_index;
    let followers: Vec<usize> = (0..3).filter(|&i| addrs[i].id != first).collect();
    for &f in &followers {
        wait_applied(&cluster.procs()[f], committed).await;
    }

    // kill -9 of the leader and one follower; the other follower survives
    // alone with the log the leader's disk never had.
    let (l, f) = ((first - 1) as usize, followers[0]);
    let procs = cluster.procs_mut();
    procs[l].kill9();
    procs[f].kill9();
    std::fs::remove_file(hold(first)).unwrap();
    procs[l].restart();
    procs[f].restart();
    let second = cluster.leader().await;
    for i in 0..20 {
        let key = format!("after/{i:03}");
        acked.push((
            key.clone(),
            c.put_key("vol1", "bkt1", &key, i).await.unwrap(),
        ));
    }
    let last = c.cluster_status().await.unwrap().committed_index;
    for p in cluster.procs() {
        wait_applied(p, last).await;
    }
    eprintln!(
        "leader {first} held its flush and was killed with follower {}; leader {second} after the restart",
        addrs[f].id
    );

    // Every node serves every acknowledged write with what the client was told.
    for a in &addrs {
        let local = OmClient::new(
            std::slice::from_ref(&a.grpc),
            ClientOptions {
                stale_reads: true,
                deadline: Duration::from_secs(5),
                ..Default::default()
            },
        )
        .unwrap();
        for (key, k) in &acked {
            let got = local
                .lookup_key("vol1", "bkt1", key)
                .await
                .unwrap_or_else(|e| panic!("node {}: acknowledged key {key} missing: {e}", a.id));
            assert_eq!(
                (got.update_id, &got.blocks),
                (k.update_id, &k.blocks),
                "node {}: {key} differs from what was acknowledged",
                a.id
            );
        }
    }

    // Stopped cleanly, the replicas hold the same tables record by record.
    for p in cluster.procs_mut() {
        assert!(p.terminate(Duration::from_secs(30)), "node did not stop");
    }
    let dumps: Vec<_> = cluster.dirs().iter().map(|d| dump_data_dir(d)).collect();
    for (i, d) in dumps.iter().enumerate().skip(1) {
        assert!(
            first_difference(&dumps[0], d).is_none(),
            "node {} differs from node {}: first at {:?}",
            addrs[i].id,
            addrs[0].id,
            first_difference(&dumps[0], d)
        );
    }
}

/// A replica that applies one entry differently is found by the periodic
/// digest comparison within seconds: it marks itself diverged (kept across a
/// restart), refuses reads and writes with `REPLICA_DIVERGED`, reports
/// not-ready, refuses leadership, and the others export the mismatch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_applied_differently_is_found_and_stops_serving() {
    use om_tests::http_get;
    let fast = ClusterOptions::default().tweak(|_, a| a.divergence_check_interval_ms = Some(200));
    let mut cluster = TestCluster::start_with(3, fast).await;
    let eps = cluster.endpoints();
    let c = std::sync::Arc::new(OmClient::new(&eps, om_tests::client_options()).unwrap());
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for i in 0..5 {
        c.put_key("vol1", "bkt1", &format!("k{i}"), i)
            .await
            .unwrap();
    }
    // While the replicas agree, verification says so, digests and tables.
    let agreed = wait_for(Duration::from_secs(10), "an agreeing comparison", || {
        let c = c.clone();
        async move { c.verify_replicas(true).await.ok().filter(|r| r.all_agree) }
    })
    .await;
    assert_eq!(agreed.members.len(), 3);
    let t = agreed.tables.unwrap();
    assert!(t.all_agree && t.differences.is_empty(), "{t:?}");
    assert_eq!(t.members.len(), 3);
    let keys = |m: &om_client::v1::TableMember| {
        m.tables
            .iter()
            .find(|x| x.table == "keys")
            .map(|x| x.entries)
    };
    assert!(
        t.members.iter().all(|m| m.agrees && keys(m) == Some(5)),
        "{t:?}"
    );
    let (code, text) = omctl_verify(&eps);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("tables compared at index"), "{text}");

    // One follower applies the next command differently.
    let leader = c.cluster_status().await.unwrap().leader_id;
    let bad_id = (1..=3).find(|id| *id != leader).unwrap();
    let bad = cluster.node(bad_id);
    bad.node.service.divergence().unwrap().inject(1);
    let started = std::time::Instant::now();
    for i in 5..10 {
        c.put_key("vol1", "bkt1", &format!("k{i}"), i)
            .await
            .unwrap();
    }
    let why = wait_for(
        Duration::from_secs(10),
        "the diverged replica to notice",
        || {
            let d = bad.node.service.divergence().unwrap().diverged();
            async move { d }
        },
    )
    .await;
    eprintln!(
        "node {bad_id} found diverged after {:?}: {why}",
        started.elapsed()
    );
    assert!(why.contains("first differing index"), "{why}");
    assert!(bad.dir.path().join("DIVERGED").exists());

    // It serves no read, stale or not, and is not ready.
    let local = OmClient::new(
        &[bad.endpoint()],
        ClientOptions {
            stale_reads: true,
            deadline: Duration::from_secs(2),
            ..om_tests::client_options()
        },
    )
    .unwrap();
    // (UNAVAILABLE, so clients move on to another member.)
    match local.lookup_key("vol1", "bkt1", "k0").await {
        Err(om_client::ClientError::Unavailable(m)) if m.contains("replica diverged") => {}
        other => panic!("expected the diverged replica to refuse, got {other:?}"),
    }
    let ready = http_get(bad.node.http_addr, "/readyz").await;
    assert!(
        ready.contains("503") && ready.contains("diverged"),
        "{ready}"
    );
    // The cluster still serves; the others report the mismatch.
    c.put_key("vol1", "bkt1", "after", 1).await.unwrap();
    let good = cluster.node(bad_id % 3 + 1);
    let metrics = http_get(good.node.http_addr, "/metrics").await;
    assert!(
        metrics.contains("om_replica_divergence 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("replica"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let r = c.verify_replicas(true).await.unwrap();
    assert!(!r.all_agree && r.majority, "{r:?}");
    let m = r.members.iter().find(|m| m.node_id == bad_id).unwrap();
    assert!(!m.agrees && m.diverged, "{r:?}");
    // Record by record: the diverged replica, and the one record it holds
    // that the others do not (the injected fault's).
    let t = r.tables.unwrap();
    assert!(!t.all_agree, "{t:?}");
    let differs: Vec<u64> = t
        .members
        .iter()
        .filter(|m| !m.agrees)
        .map(|m| m.node_id)
        .collect();
    assert_eq!(differs, vec![bad_id], "{t:?}");
    assert_eq!(t.differences.len(), 1, "{t:?}");
    let d = &t.differences[0];
    assert_eq!(
        (d.node_id, d.key.as_slice()),
        (bad_id, &b"\xffperturbed"[..]),
        "{t:?}"
    );
    assert_eq!(d.what, "only on the member", "{t:?}");
    // As an operator sees it.
    let (code, text) = omctl_verify(&eps);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("node {bad_id}: first difference from node"))
            && text.contains(r#"at key "\xffperturbed": only on the member"#),
        "{text}"
    );

    // It refuses leadership.
    assert!(c.transfer_leader(bad_id).await.is_err());
    assert_ne!(c.cluster_status().await.unwrap().leader_id, bad_id);

    // A restart remembers.
    cluster.restart(bad_id).await;
    let n = cluster.node(bad_id);
    assert!(n.node.service.divergence().unwrap().diverged().is_some());
    let ready = http_get(n.node.http_addr, "/readyz").await;
    assert!(ready.contains("503"), "{ready}");
    cluster.shutdown().await;
}

/// `omctl cluster verify` against `eps`: exit code and standard output.
fn omctl_verify(eps: &[String]) -> (Option<i32>, String) {
    let out = std::process::Command::new(om_tests::binary("omctl"))
        .args(["--endpoint", &eps.join(","), "cluster", "verify"])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}
