//! Snapshots of a bucket, end to end: from omctl against a real process
//! (create, read while the bucket changes, rename, restart, delete and the
//! reclaim that releases blocks), and on a cluster (a member that catches up
//! by a Raft snapshot holds the same snapshots, record by record).

use std::time::Duration;

use om_client::v1::{BucketLayout, ListKeysRequest};
use om_tests::{
    ClusterOptions, OmProcess, TestCluster, TestNode, local_client, metrics_of, wait_for,
};
use serde_json::Value;

fn ok(endpoint: &str, args: &[&str]) -> String {
    let o = om_tests::omctl(endpoint, 20, args);
    assert!(
        o.status.success(),
        "omctl {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn json(endpoint: &str, args: &[&str]) -> Value {
    let mut all = vec!["--output", "json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(endpoint, &all)).unwrap()
}

fn names(list: &Value) -> Vec<(String, u64)> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["name"].as_str().unwrap().to_string(),
                k["size"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn pairs(v: &[(&str, u64)]) -> Vec<(String, u64)> {
    v.iter().map(|(n, s)| (n.to_string(), *s)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_snapshots_a_bucket_reads_it_while_it_changes_and_reclaims_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut om = OmProcess::spawn(dir.path());
    om.wait_ready(Duration::from_secs(60)).await;
    let ep = om.grpc.clone();
    ok(&ep, &["volume", "create", "vol1"]);
    ok(&ep, &["bucket", "create", "vol1/bkt1"]);
    for (k, size) in [("a", 10), ("b", 20), ("docs/x", 30)] {
        ok(
            &ep,
            &[
                "key",
                "put",
                &format!("vol1/bkt1/{k}"),
                "--size",
                &size.to_string(),
            ],
        );
    }
    let s = json(&ep, &["snapshot", "create", "vol1/bkt1", "daily"]);
    assert_eq!(s["name"], "daily");
    assert_eq!(s["keys"], 3);
    assert_eq!(s["used_bytes"], 60);

    // The bucket changes; the snapshot does not.
    ok(&ep, &["key", "put", "vol1/bkt1/a", "--size", "11"]);
    ok(&ep, &["key", "delete", "vol1/bkt1/b"]);
    ok(&ep, &["key", "put", "vol1/bkt1/c", "--size", "40"]);
    ok(&ep, &["key", "rename", "vol1/bkt1/docs/x", "docs/y"]);
    let then = pairs(&[("a", 10), ("b", 20), ("docs/x", 30)]);
    let listed = |ep: &str, extra: &[&str]| {
        let mut args = vec!["key", "list", "vol1/bkt1", "--max", "1", "--all"];
        args.extend_from_slice(extra);
        names(&json(ep, &args))
    };
    assert_eq!(listed(&ep, &["--snapshot", "daily"]), then);
    assert_eq!(
        listed(&ep, &[]),
        pairs(&[("a", 11), ("c", 40), ("docs/y", 30)])
    );
    let info = json(&ep, &["key", "info", "vol1/bkt1/b", "--snapshot", "daily"]);
    assert_eq!(info["size"], 20);
    let missing = om_tests::omctl(
        &ep,
        20,
        &["key", "info", "vol1/bkt1/c", "--snapshot", "daily"],
    );
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("KEY_NOT_FOUND"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    // Delimiter roll-up at a snapshot.
    let rolled = json(
        &ep,
        &[
            "key",
            "list",
            "vol1/bkt1",
            "--delimiter",
            "/",
            "--snapshot",
            "daily",
        ],
    );
    let items: Vec<&str> = rolled["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(items, vec!["a", "b", "docs/"]);

    // The diff against the live bucket, in pages of one, as JSON lines.
    let diff = ok(
        &ep,
        &[
            "--output",
            "json",
            "snapshot",
            "diff",
            "vol1/bkt1",
            "daily",
            "--max",
            "1",
            "--all",
        ],
    );
    let changes: Vec<(String, String)> = diff
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["key"].as_str().unwrap().to_string(),
                v["kind"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("a", "modified"),
        ("b", "deleted"),
        ("c", "created"),
        ("docs/x", "deleted"),
        ("docs/y", "created"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(changes, want, "{diff}");
    let table = ok(&ep, &["snapshot", "diff", "vol1/bkt1", "daily"]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("modified") && l.contains(" a ")),
        "{table}"
    );

    // Listing, info, rename; bad input is refused with its reason.
    ok(&ep, &["snapshot", "create", "vol1/bkt1", "weekly"]);
    let list = json(
        &ep,
        &["snapshot", "list", "vol1/bkt1", "--max", "1", "--all"],
    );
    let snaps: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(snaps, vec!["daily", "weekly"]);
    ok(&ep, &["snapshot", "rename", "vol1/bkt1", "weekly", "w1"]);
    assert_eq!(
        json(&ep, &["snapshot", "info", "vol1/bkt1", "w1"])["keys"],
        3
    );
    for (args, reason) in [
        (
            vec!["snapshot", "create", "vol1/bkt1", "daily"],
            "SNAPSHOT_ALREADY_EXISTS",
        ),
        (
            vec!["snapshot", "create", "vol1/bkt1", "bad name"],
            "INVALID_SNAPSHOT_NAME",
        ),
        (
            vec!["snapshot", "info", "vol1/bkt1", "weekly"],
            "SNAPSHOT_NOT_FOUND",
        ),
        (
            vec!["bucket", "delete", "vol1/bkt1"],
            "BUCKET_HAS_SNAPSHOTS",
        ),
    ] {
        let o = om_tests::omctl(&ep, 20, &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(reason),
            "{args:?}: {err}"
        );
    }

    // Snapshots survive a kill -9.
    om.kill9();
    om.restart();
    om.wait_ready(Duration::from_secs(60)).await;
    assert_eq!(listed(&ep, &["--snapshot", "daily"]), then);

    // Deleting both releases the blocks only they held, in the background.
    let c = om.client();
    let mut held = Vec::new();
    for k in ["a", "b", "docs/x"] {
        let at = c.lookup_key_in("vol1", "bkt1", k, "daily").await.unwrap();
        held.extend(at.blocks.iter().map(|b| b.block_id));
    }
    assert!(!held.is_empty());
    let before = om_tests::deleted_block_ids(&c).await;
    assert!(held.iter().all(|b| !before.contains(b)), "{before:?}");
    ok(&ep, &["snapshot", "delete", "vol1/bkt1", "daily"]);
    ok(&ep, &["snapshot", "delete", "vol1/bkt1", "w1"]);
    for k in ["a", "c", "docs/y"] {
        ok(&ep, &["key", "delete", &format!("vol1/bkt1/{k}")]);
    }
    wait_for(
        Duration::from_secs(30),
        "the snapshots to be reclaimed",
        || {
            let c = &c;
            let held = held.clone();
            async move {
                let freed = om_tests::deleted_block_ids(c).await;
                held.iter().all(|b| freed.contains(b)).then_some(())
            }
        },
    )
    .await;
    wait_for(
        Duration::from_secs(30),
        "the bucket to be deletable",
        || {
            let c = &c;
            async move { c.delete_bucket("vol1", "bkt1").await.ok() }
        },
    )
    .await;
    om.terminate(Duration::from_secs(10));
}

/// A member that catches up by a Raft snapshot holds the bucket snapshots
/// and their retained versions as the others do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_catches_up_holds_the_same_snapshots() {
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
    for i in 0..20 {
        c.put_key("vol1", "bkt1", &format!("k{i:02}"), 1)
            .await
            .unwrap();
    }
    c.create_snapshot("vol1", "bkt1", "s1").await.unwrap();
    let victim = (1..=3).find(|id| *id != leader).unwrap();
    cluster.stop(victim).await;
    for i in 0..20 {
        c.put_key("vol1", "bkt1", &format!("k{i:02}"), 2)
            .await
            .unwrap();
    }
    c.create_snapshot("vol1", "bkt1", "s2").await.unwrap();
    for i in 0..20 {
        c.delete_key("vol1", "bkt1", &format!("k{i:02}"))
            .await
            .unwrap();
    }
    wait_for(
        Duration::from_secs(30),
        "the leader to snapshot and purge its log",
        || {
            let m = metrics_of(cluster.node(leader));
            async move { m.purged.is_some_and(|p| p.index > 35).then_some(()) }
        },
    )
    .await;
    cluster.restart_wiped(victim).await;
    let lc = local_client(
        &cluster.addrs()[(victim - 1) as usize],
        Duration::from_secs(2),
    );
    wait_for(
        Duration::from_secs(30),
        "the wiped member to catch up",
        || {
            let lc = &lc;
            async move { lc.get_snapshot("vol1", "bkt1", "s2").await.ok() }
        },
    )
    .await;
    let sizes = |snapshot: &'static str| {
        let lc = &lc;
        async move {
            let page = lc
                .list_keys(ListKeysRequest {
                    volume: "vol1".into(),
                    bucket: "bkt1".into(),
                    snapshot: snapshot.into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            page.keys.iter().map(|k| k.size).collect::<Vec<_>>()
        }
    };
    assert_eq!(sizes("s1").await, vec![1; 20]);
    assert_eq!(sizes("s2").await, vec![2; 20]);
    assert_eq!(sizes("").await, Vec::<u64>::new());
    // Every table, the snapshots' included, is the same on every member.
    wait_for(Duration::from_secs(30), "the replicas to agree", || {
        let dumps: Vec<_> = cluster.running().map(TestNode::dump).collect();
        async move { dumps.windows(2).all(|w| w[0] == w[1]).then_some(()) }
    })
    .await;
    let dump = cluster.node(victim).dump();
    assert!(
        dump.keys().any(|(t, _)| *t == "snapshot_keys"),
        "the dump covers the retained versions"
    );
    cluster.shutdown().await;
}
