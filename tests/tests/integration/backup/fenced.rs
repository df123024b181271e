//! Members that must not serve: the old members of a forced cluster, a
//! survivor without a majority, a member restored while the cluster ran.

use super::*;

/// A client of the member at `grpc` alone, giving up after 2 s.
fn alone(grpc: &str) -> OmClient {
    OmClient::new(
        std::slice::from_ref(&grpc.to_string()),
        ClientOptions {
            deadline: Duration::from_secs(2),
            ..Default::default()
        },
    )
    .unwrap()
}

/// Waits (up to `secs`) until the member at `http` answers `/readyz` with a
/// text containing `want` (a status line, or a reason), and returns it.
async fn readyz_says_within(secs: u64, http: &str, want: &str) -> String {
    let http: std::net::SocketAddr = http.parse().unwrap();
    let mut last = None::<String>;
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(r) = om_tests::try_http_get(http, "/readyz").await {
            if r.contains(want) {
                return r;
            }
            last = Some(r);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for /readyz to say {want:?}; last answer: {:?}",
            last
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The drill that split the brain: two of three members are killed with
/// their data, the survivor forces a new cluster, and the two come back
/// with their old data (as a StatefulSet brings pods back with their
/// volumes). They are a majority of the old membership, but they learn
/// that a forced cluster replaced their incarnation and serve nothing: no
/// write through them is acknowledged, `/readyz` and the metric say why,
/// and clients go to the survivor. Wiped and added back, one serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn old_members_returning_after_a_forced_cluster_serve_nothing() {
    let root = tempfile::tempdir().unwrap();
    let (members, dirs, mut procs, c) = cluster_with_bucket(root.path(), 3, &[]).await;
    for i in 0..20 {
        c.put_key(VOL, BKT, &format!("k-{i:06}"), 1).await.unwrap();
    }
    for p in procs.iter_mut().skip(1) {
        p.kill9();
    }
    assert!(procs[0].terminate(Duration::from_secs(30)));
    procs[0].extra.push("--force-new-cluster".to_string());
    procs[0].restart();
    let only = client(vec![members[0].grpc.clone()]);
    wait_for(Duration::from_secs(30), "the survivor to lead", || async {
        only.cluster_status()
            .await
            .ok()
            .filter(|s| s.role == "leader")
    })
    .await;
    only.put_key(VOL, BKT, "after-force", 1).await.unwrap();
    let survivor_label = only
        .cluster_label()
        .expect("the survivor names its cluster");

    // The old members come back with their data.
    for p in procs.iter_mut().skip(1) {
        p.restart();
    }
    for (i, m) in members.iter().enumerate().skip(1) {
        let ready = readyz_says_within(30, &m.http, "fenced").await;
        assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
        // The gauge follows the fence (read again a moment later if the
        // scrape came first).
        let addr: std::net::SocketAddr = m.http.parse().unwrap();
        wait_for(
            Duration::from_secs(10),
            "om_cluster_superseded 1",
            || async move {
                let metrics = om_tests::http_get(addr, "/metrics").await;
                metrics.contains("om_cluster_superseded 1").then_some(())
            },
        )
        .await;
        assert!(dirs[i].join(om::incarnation::FENCE_FILE).exists());
    }
    // Give the old majority every chance to elect a leader.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for m in &members[1..] {
        let old = alone(&m.grpc);
        for i in 0..5 {
            let r = old.put_key(VOL, BKT, &format!("old-{i}"), 1).await;
            assert!(r.is_err(), "a write through an old member was acknowledged");
        }
        assert!(old.cluster_status().await.is_err());
    }
    // A client of all three endpoints reaches the survivor only.
    let all = client(endpoints(&members));
    all.put_key(VOL, BKT, "through-all", 1).await.unwrap();
    assert_eq!(all.cluster_label(), Some(survivor_label.clone()));
    let names = key_names(&only).await;
    assert!(!names.iter().any(|n| n.starts_with("old-")), "{names:?}");
    assert!(names.contains(&"through-all".to_string()));
    // Still fenced after a restart.
    assert!(procs[1].terminate(Duration::from_secs(30)));
    procs[1].restart();
    readyz_says_within(30, &members[1].http, "fenced").await;
    // Adding it back unwiped is refused; wiped, it joins the new incarnation.
    let refused = only
        .add_node(2, &members[1].raft, &members[1].grpc, false)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("incarnation"), "{refused}");
    procs[1].kill9();
    std::fs::remove_dir_all(&dirs[1]).unwrap();
    let rejoined = OmProcess::spawn_member_args(&dirs[1], &members[1], &members[..1], &["--join"]);
    only.add_node(2, &members[1].raft, &members[1].grpc, false)
        .await
        .unwrap();
    let two = client(vec![members[1].grpc.clone()]);
    wait_for(
        Duration::from_secs(30),
        "the wiped member to serve",
        || async {
            two.cluster_status()
                .await
                .ok()
                .filter(|s| s.has_leader && s.members.len() == 2)
        },
    )
    .await;
    assert_eq!(two.cluster_label(), Some(survivor_label));
    only.put_key(VOL, BKT, "after-rejoin", 1).await.unwrap();
    drop(rejoined);
}

/// The survivor of a lost majority says so within an election timeout or
/// two: it reports no leader (`om_raft_leader_id` 0, `om_raft_has_leader`
/// 0), and `/readyz` answers 503 naming the silent leader, so OmNoLeader
/// fires and the pod leaves the client Service. Back to a majority, it is
/// ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_survivor_of_a_lost_majority_reports_no_leader() {
    let root = tempfile::tempdir().unwrap();
    let (members, _, mut procs, c) = cluster_with_bucket(root.path(), 3, &[]).await;
    c.put_key(VOL, BKT, "k", 1).await.unwrap();
    let leader = c.cluster_status().await.unwrap().leader_id;
    // Keep a follower; lose the leader and the other follower.
    let survivor = (0..3).find(|i| members[*i].id != leader).unwrap();
    for (i, p) in procs.iter_mut().enumerate() {
        if i != survivor {
            p.kill9();
        }
    }
    let http: std::net::SocketAddr = members[survivor].http.parse().unwrap();
    let started = std::time::Instant::now();
    let ready = readyz_says_within(20, &members[survivor].http, "no leader").await;
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    // Within a few election timeouts, not the minute it took before.
    assert!(started.elapsed() < Duration::from_secs(15));
    let metrics = wait_for(Duration::from_secs(5), "the leader gauges", || async move {
        let m = om_tests::try_http_get(http, "/metrics").await?;
        (m.contains("om_raft_leader_id 0") && m.contains("om_raft_has_leader 0")).then_some(m)
    })
    .await;
    assert!(metrics.contains("om_raft_has_leader 0"));
    // One member back: a majority again, a leader, ready.
    let back = (0..3).find(|i| *i != survivor).unwrap();
    procs[back].restart();
    readyz_says_within(30, &members[survivor].http, "HTTP/1.1 200").await;
}

/// A member whose disk was replaced comes back through `om restore` while
/// the cluster keeps running (a StatefulSet's `restore_from` left set): its
/// store starts another cluster from the backup, which would fork the
/// running one. It learns from the others that they run a history not
/// restored from that backup, serves nothing and says so; the cluster keeps
/// serving. Emptied, it catches up from the leader like any member that
/// lost its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_restored_while_the_cluster_runs_refuses_to_fork_it() {
    let root = tempfile::tempdir().unwrap();
    let dest = root.path().join("backups");
    let (members, dirs, mut procs, c) = cluster_with_bucket(root.path(), 3, &[]).await;
    for i in 0..10 {
        c.put_key(VOL, BKT, &format!("k-{i:06}"), 1).await.unwrap();
    }
    let m = take_backup(&members[0].grpc, &dest);
    for i in 10..20 {
        c.put_key(VOL, BKT, &format!("k-{i:06}"), 1).await.unwrap();
    }
    procs[2].kill9();
    std::fs::remove_dir_all(&dirs[2]).unwrap();
    ok(
        om_restore(&dest.join(&m.id), &dirs[2], &members[2], &members),
        "om restore",
    );
    assert!(dirs[2].join(om::incarnation::RESTORED_FILE).exists());
    procs[2].restart();
    let ready = readyz_says_within(30, &members[2].http, "restored from backup").await;
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    // The cluster serves on, and no write reaches the restored member.
    for i in 20..30 {
        c.put_key(VOL, BKT, &format!("k-{i:06}"), 1).await.unwrap();
    }
    assert!(
        alone(&members[2].grpc)
            .put_key(VOL, BKT, "through-restored", 1)
            .await
            .is_err()
    );
    // Emptied, it catches up and the three agree.
    procs[2].kill9();
    std::fs::remove_dir_all(&dirs[2]).unwrap();
    procs[2].restart();
    readyz_says_within(60, &members[2].http, "HTTP/1.1 200").await;
    assert_eq!(key_names(&c).await.len(), 30);
    replicas::wait_settled(&c, &procs).await;
    replicas::assert_identical(&c, &mut procs, &dirs, "restored member emptied").await;
}
