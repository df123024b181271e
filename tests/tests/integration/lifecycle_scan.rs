//! Lifecycle scans end to end: the leader's scanner expires exactly the
//! eligible objects (with short lifecycle days), reports where it stands
//! (`GetLifecycleStatus`, `omctl bucket lifecycle status`, metrics) and
//! LookupKey's expiration; a pass survives SIGKILL of its leader (the new
//! leader resumes at the replicated cursor with one seek, evaluating no entry
//! twice) and leadership moving every few seconds.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use om_client::v1::lifecycle_filter::Predicate;
use om_client::v1::*;
use om_client::{ClientOptions, OmClient};
use om_tests::{ClusterOptions, ProcessCluster, TestCluster, TestNode, binary, http_get, wait_for};

fn rule(id: &str, prefix: &str) -> LifecycleRule {
    LifecycleRule {
        id: id.into(),
        enabled: true,
        filter: Some(LifecycleFilter {
            predicate: Some(Predicate::Prefix(prefix.into())),
        }),
        ..Default::default()
    }
}

fn expire_after(id: &str, prefix: &str, days: u32) -> LifecycleRule {
    LifecycleRule {
        expiration: Some(LifecycleExpiration {
            days: Some(days),
            ..Default::default()
        }),
        ..rule(id, prefix)
    }
}

async fn set_rules(c: &OmClient, volume: &str, bucket: &str, rules: Vec<LifecycleRule>) {
    c.put_bucket_lifecycle(PutBucketLifecycleRequest {
        volume: volume.into(),
        bucket: bucket.into(),
        rules,
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn status(c: &OmClient, volume: &str, bucket: &str) -> Option<LifecycleStatus> {
    c.get_lifecycle_status(GetLifecycleStatusRequest {
        volume: volume.into(),
        bucket: bucket.into(),
        ..Default::default()
    })
    .await
    .ok()
    .and_then(|r| r.status)
}

/// Every current key of a bucket, page by page.
async fn all_keys(c: &OmClient, volume: &str, bucket: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let r = c
            .list_keys(ListKeysRequest {
                volume: volume.into(),
                bucket: bucket.into(),
                max_keys: 1000,
                continuation_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        out.extend(r.keys.into_iter().map(|k| k.name));
        if r.next_continuation_token.is_empty() {
            return out;
        }
        token = r.next_continuation_token;
    }
}

/// Puts `names` with `tasks` concurrent writers.
async fn put_all(eps: &[String], volume: &str, bucket: &str, names: Vec<String>, tasks: usize) {
    let names = std::sync::Arc::new(names);
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (names, eps) = (names.clone(), eps.to_vec());
        let (volume, bucket) = (volume.to_string(), bucket.to_string());
        handles.push(tokio::spawn(async move {
            let c = OmClient::new(&eps, ClientOptions::default()).unwrap();
            for name in names.iter().skip(t).step_by(tasks) {
                c.put_key(&volume, &bucket, name, 1).await.unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_filters_and_file_system_buckets_are_scanned_too() {
    let node = TestNode::start_with(|a| {
        a.lifecycle_day_ms = Some(1000);
        a.lifecycle_interval_ms = Some(300);
    })
    .await;
    let c = node.client();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "tagged", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.create_bucket("vol", "files", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    for i in 0..10 {
        let class = if i % 2 == 0 { "tmp" } else { "keep" };
        c.put_key_with(PutKeyRequest {
            volume: "vol".into(),
            bucket: "tagged".into(),
            key: format!("k{i}"),
            size: 1,
            tags: [("class".to_string(), class.to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    for path in ["logs/a/1.log", "logs/b.log", "data/x", "logs.txt"] {
        let s = c
            .create_file(CreateFileRequest {
                volume: "vol".into(),
                bucket: "files".into(),
                path: path.into(),
                recursive: true,
                ..Default::default()
            })
            .await
            .unwrap();
        c.commit_key(CommitKeyRequest {
            volume: "vol".into(),
            bucket: "files".into(),
            key: s.path,
            session_id: s.session_id,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    set_rules(
        &c,
        "vol",
        "tagged",
        vec![LifecycleRule {
            id: "tmp".into(),
            enabled: true,
            filter: Some(LifecycleFilter {
                predicate: Some(Predicate::Tag(LifecycleTag {
                    key: "class".into(),
                    value: "tmp".into(),
                })),
            }),
            expiration: Some(LifecycleExpiration {
                days: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        }],
    )
    .await;
    set_rules(&c, "vol", "files", vec![expire_after("logs", "logs/", 1)]).await;
    wait_for(Duration::from_secs(60), "tmp-tagged keys expired", || {
        let c = &c;
        async move {
            let left = all_keys(c, "vol", "tagged").await;
            (left == ["k1", "k3", "k5", "k7", "k9"]).then_some(())
        }
    })
    .await;
    let files = wait_for(Duration::from_secs(60), "logs/ files expired", || {
        let c = &c;
        async move {
            let r = c
                .list_status(ListStatusRequest {
                    volume: "vol".into(),
                    bucket: "files".into(),
                    recursive: true,
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut files: Vec<String> = r
                .entries
                .into_iter()
                .filter(|e| !e.is_directory)
                .map(|e| e.path)
                .collect();
            files.sort();
            (files.len() == 2).then_some(files)
        }
    })
    .await;
    assert_eq!(files, ["data/x", "logs.txt"]);
    let s = status(&c, "vol", "files").await.unwrap();
    assert_eq!(s.total_actions.get("expire"), Some(&2));
}

/// LookupKey's expiration counts `Days` from the current version's write
/// (S3's Last-Modified): a key written again on a later day expires a day
/// later than counted from its first write, whose creation time it keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_key_counts_days_from_the_last_write() {
    const DAY_MS: u64 = 1000;
    let node = TestNode::start_with(|a| a.lifecycle_day_ms = Some(DAY_MS)).await;
    let c = node.client();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let first = c.put_key("vol", "bkt", "logs/a", 1).await.unwrap();
    c.put_key("vol", "bkt", "src", 1).await.unwrap();
    // A thousand days of a second: nothing expires while the test runs.
    set_rules(&c, "vol", "bkt", vec![expire_after("logs", "logs/", 1000)]).await;
    let due = |written: u64| (written + 1000 * DAY_MS).div_ceil(DAY_MS) * DAY_MS;
    let mut last = first.modification_time_ms;
    for how in ["put", "copy"] {
        // Wait until the leader's clock is on a later day than the last write.
        wait_for(Duration::from_secs(10), "the next lifecycle day", || {
            let c = &c;
            async move {
                let p = c.put_key("vol", "bkt", "probe", 1).await.unwrap();
                (p.modification_time_ms / DAY_MS > last / DAY_MS).then_some(())
            }
        })
        .await;
        let again = if how == "put" {
            c.put_key("vol", "bkt", "logs/a", 1).await.unwrap()
        } else {
            c.copy_key(CopyKeyRequest {
                src_volume: "vol".into(),
                src_bucket: "bkt".into(),
                src_key: "src".into(),
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: "logs/a".into(),
                content_md5: "0123456789abcdef0123456789abcdef".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .key
            .unwrap()
        };
        assert_eq!(again.creation_time_ms, first.creation_time_ms, "{how}");
        let k = c.lookup_key("vol", "bkt", "logs/a").await.unwrap();
        assert_eq!(k.expiration_ms, due(again.modification_time_ms), "{how}");
        assert!(k.expiration_ms > due(last), "{how}");
        assert_eq!(k.expiration_rule_id, "logs");
        last = again.modification_time_ms;
    }
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scanner_expires_exactly_the_eligible_objects_and_reports_its_progress() {
    let node = TestNode::start_with(|a| {
        a.lifecycle_day_ms = Some(1000);
        a.lifecycle_interval_ms = Some(300);
    })
    .await;
    let c = node.client();
    c.create_volume("vol", "").await.unwrap();
    for b in ["plain", "versioned"] {
        c.create_bucket("vol", b, BucketLayout::ObjectStore)
            .await
            .unwrap();
    }
    c.set_bucket_versioning("vol", "versioned", BucketVersioning::Enabled)
        .await
        .unwrap();
    let mut expected_left = BTreeSet::new();
    for i in 0..20 {
        for b in ["plain", "versioned"] {
            c.put_key("vol", b, &format!("logs/{i:02}"), 1)
                .await
                .unwrap();
            c.put_key("vol", b, &format!("data/{i:02}"), 1)
                .await
                .unwrap();
        }
        expected_left.insert(format!("data/{i:02}"));
    }
    let up = c
        .initiate_multipart_upload(InitiateMultipartUploadRequest {
            volume: "vol".into(),
            bucket: "plain".into(),
            key: "data/big".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let rules = vec![
        expire_after("logs", "logs/", 1),
        LifecycleRule {
            abort_incomplete_multipart_upload: Some(LifecycleAbortUpload {
                days_after_initiation: 1,
            }),
            ..rule("uploads", "")
        },
    ];
    for b in ["plain", "versioned"] {
        set_rules(&c, "vol", b, rules.clone()).await;
    }
    // LookupKey reports the expiration S3's maths gives (the write plus one
    // day, rounded up to a day boundary) and the rule. A key no rule
    // matches has none.
    let k = c.lookup_key("vol", "plain", "data/00").await;
    if let Ok(k) = k {
        assert_eq!((k.expiration_ms, k.expiration_rule_id.as_str()), (0, ""));
    }
    let keep = c.put_key("vol", "plain", "logs/late", 1).await.unwrap();
    let k = c.lookup_key("vol", "plain", "logs/late").await.unwrap();
    assert_eq!(
        k.expiration_ms,
        (keep.modification_time_ms + 1000).div_ceil(1000) * 1000
    );
    assert_eq!(k.expiration_rule_id, "logs");

    // Every logs/ key goes, in both buckets; data/ stays.
    for b in ["plain", "versioned"] {
        wait_for(Duration::from_secs(60), "logs/ expired", || {
            let c = &c;
            async move {
                let left = all_keys(c, "vol", b).await;
                (left.iter().all(|k| k.starts_with("data/"))).then_some(())
            }
        })
        .await;
        let left: BTreeSet<String> = all_keys(&c, "vol", b).await.into_iter().collect();
        assert_eq!(left, expected_left, "bucket {b}");
    }
    // In the versioned bucket, the expired keys are behind delete markers:
    // their data is still there as noncurrent versions.
    let v = c
        .list_object_versions(ListObjectVersionsRequest {
            volume: "vol".into(),
            bucket: "versioned".into(),
            prefix: "logs/00".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let markers = v.versions.iter().filter(|x| x.delete_marker).count();
    assert_eq!((markers, v.versions.len()), (1, 2), "{:?}", v.versions);
    // The upload is aborted.
    wait_for(Duration::from_secs(30), "the upload aborted", || {
        let c = &c;
        async move {
            let r = c
                .list_multipart_uploads(ListMultipartUploadsRequest {
                    volume: "vol".into(),
                    bucket: "plain".into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            r.uploads.is_empty().then_some(())
        }
    })
    .await;
    assert!(!up.upload.unwrap().upload_id.is_empty());

    // Status: a completed pass with its actions, per action and per rule.
    let s = wait_for(Duration::from_secs(30), "a completed pass", || {
        let c = &c;
        async move {
            status(c, "vol", "plain")
                .await
                .filter(|s| s.total_actions.get("expire") == Some(&21))
        }
    })
    .await;
    assert!(s.current);
    assert!(s.pass >= 1);
    assert_eq!(s.total_actions.get("abort_upload"), Some(&1));
    assert_eq!(s.last_resume_before_cursor, 0);

    // omctl: the same, as text and as JSON.
    let ep = node.endpoint();
    let omctl = |args: &[&str]| {
        Command::new(binary("omctl"))
            .args(["--endpoint", &ep, "--timeout", "20"])
            .args(args)
            .output()
            .unwrap()
    };
    let o = omctl(&["bucket", "lifecycle", "status", "vol/plain"]);
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("2 lifecycle rules"), "{text}");
    assert!(text.contains("expire=21"), "{text}");
    let o = omctl(&[
        "--output",
        "json",
        "bucket",
        "lifecycle",
        "status",
        "vol/plain",
    ]);
    assert!(o.status.success(), "{o:?}");
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["total_actions"]["expire"], 21);
    assert_eq!(j["total_actions"]["abort_upload"], 1);
    // --watch follows the next pass to its end.
    let o = omctl(&["bucket", "lifecycle", "status", "--watch", "vol/plain"]);
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("100%"), "{text}");

    // Metrics.
    let m = http_get(node.node.http_addr, "/metrics").await;
    assert!(metric(&m, "om_lifecycle_evaluated_total") >= 80, "{m}");
    assert!(metric(&m, "om_lifecycle_actions_total{action=\"expire\"}") >= 41);
    assert!(m.contains("om_lifecycle_pass_seconds"), "{m}");
    assert!(m.contains("om_lifecycle_cursor_lag_seconds"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_leader_mid_pass_resumes_at_the_replicated_cursor() {
    const KEYS: usize = 100_000;
    let flags = [
        "--lifecycle-day-ms",
        "1",
        "--lifecycle-evaluations-per-s",
        "10000",
        "--lifecycle-actions-per-s",
        "10000",
        "--lifecycle-interval-ms",
        "3600000",
    ];
    let mut cluster = ProcessCluster::spawn_with(3, &flags, |_| Vec::new());
    let addrs = cluster.addrs().to_vec();
    let eps = cluster.endpoints();
    let first = cluster.leader().await;
    let c = OmClient::new(&eps, ClientOptions::default()).unwrap();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    // Half the keys are eligible (exp/), interleaved with the others.
    let names: Vec<String> = (0..KEYS)
        .map(|i| {
            if i % 2 == 0 {
                format!("exp/{i:06}")
            } else {
                format!("keep/{i:06}")
            }
        })
        .collect();
    put_all(&eps, "vol", "bkt", names, 32).await;
    set_rules(&c, "vol", "bkt", vec![expire_after("exp", "exp/", 1)]).await;

    // Kill the leader once the pass is well under way.
    wait_for(Duration::from_secs(120), "a third of the pass", || {
        let c = &c;
        async move {
            status(c, "vol", "bkt")
                .await
                .filter(|s| s.evaluated >= (KEYS / 3) as u64 && s.phase == "objects")
        }
    })
    .await;
    let at_kill = status(&c, "vol", "bkt").await.unwrap();
    cluster.kill9(first);
    let second = cluster.leader_other_than(first).await;
    eprintln!(
        "leader {first} killed at {} of {KEYS} entries evaluated; leader {second} continues",
        at_kill.evaluated
    );
    let s = wait_for(Duration::from_secs(180), "the pass completed", || {
        let c = &c;
        async move {
            status(c, "vol", "bkt")
                .await
                .filter(|s| s.last_pass_completed_ms > 0)
        }
    })
    .await;
    // One pass, every entry evaluated exactly once across both leaders,
    // exactly the eligible ones expired.
    assert_eq!(s.pass, 1, "the new leader resumed, it did not restart");
    assert_eq!(s.last_pass_evaluated, KEYS as u64);
    assert_eq!(
        s.last_pass_actions.get("expire"),
        Some(&((KEYS / 2) as u64))
    );
    assert_eq!(s.last_resume_before_cursor, 0);
    // Every page the new leader built was positioned with one seek.
    let second_http: std::net::SocketAddr = addrs[(second - 1) as usize].http.parse().unwrap();
    let m = http_get(second_http, "/metrics").await;
    let pages = metric(&m, "om_lifecycle_pages_total");
    let seeks = metric(&m, "om_lifecycle_resume_seeks_total");
    assert!(pages > 0, "{m}");
    assert_eq!(seeks, pages, "one seek per page");
    // The survivors are exactly the keep/ keys.
    let left = all_keys(&c, "vol", "bkt").await;
    assert_eq!(left.len(), KEYS / 2);
    assert!(left.iter().all(|k| k.starts_with("keep/")));
    // The killed node comes back and agrees.
    cluster.restart(first);
    let back = OmClient::new(
        std::slice::from_ref(&addrs[(first - 1) as usize].grpc),
        ClientOptions {
            stale_reads: true,
            deadline: Duration::from_secs(5),
            ..Default::default()
        },
    )
    .unwrap();
    wait_for(
        Duration::from_secs(60),
        "the restarted node caught up",
        || {
            let back = &back;
            async move {
                status(back, "vol", "bkt")
                    .await
                    .filter(|s| s.last_pass_completed_ms > 0)
                    .map(|_| ())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_completes_while_leadership_moves_every_few_seconds() {
    const KEYS: usize = 6_000;
    let options = ClusterOptions::default().tweak(|_, args| {
        args.lifecycle_day_ms = Some(1);
        args.lifecycle_evaluations_per_s = Some(1_000);
        args.lifecycle_actions_per_s = Some(1_000);
    });
    let cluster = TestCluster::start_with(3, options).await;
    let eps = cluster.endpoints();
    let c = OmClient::new(&eps, ClientOptions::default()).unwrap();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let names: Vec<String> = (0..KEYS)
        .map(|i| format!("{}/{i:05}", if i % 3 == 0 { "exp" } else { "keep" }))
        .collect();
    put_all(&eps, "vol", "bkt", names, 16).await;
    set_rules(&c, "vol", "bkt", vec![expire_after("exp", "exp/", 1)]).await;
    // About six seconds of scanning; move leadership every 1.5 s.
    let mut transfers = 0;
    let mut to = 1;
    let s = loop {
        if let Some(s) = status(&c, "vol", "bkt").await
            && s.last_pass_completed_ms > 0
        {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let leader = cluster.leader().await;
        to = to % 3 + 1;
        if to == leader {
            to = to % 3 + 1;
        }
        if c.transfer_leader(to).await.is_ok() {
            transfers += 1;
        }
        assert!(transfers < 60, "the pass never completed");
    };
    eprintln!("pass completed after {transfers} leader transfers");
    assert!(transfers >= 2, "leadership moved during the pass");
    assert_eq!(s.pass, 1);
    assert_eq!(s.last_pass_evaluated, KEYS as u64);
    assert_eq!(
        s.last_pass_actions.get("expire"),
        Some(&(KEYS.div_ceil(3) as u64))
    );
    let left = all_keys(&c, "vol", "bkt").await;
    assert_eq!(left.len(), KEYS - KEYS.div_ceil(3));
    assert!(left.iter().all(|k| k.starts_with("keep/")));
    cluster.shutdown().await;
}
