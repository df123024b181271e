//! Lifecycle configurations end to end: set, read and remove through gRPC and
//! `omctl` (AWS's JSON), S3's validation rules each refused with the tables
//! unchanged, and a configuration that goes with its bucket.

use std::process::Command;

use om_client::OmClient;
use om_client::v1::lifecycle_filter::Predicate;
use om_client::v1::*;
use om_tests::{TestNode, assert_err, binary, rejected};
use tonic::Code;

fn expire(id: &str, days: u32) -> LifecycleRule {
    LifecycleRule {
        id: id.into(),
        enabled: true,
        filter: Some(LifecycleFilter {
            predicate: Some(Predicate::Prefix("logs/".into())),
        }),
        expiration: Some(LifecycleExpiration {
            days: Some(days),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn put(
    c: &OmClient,
    rules: Vec<LifecycleRule>,
) -> impl Future<Output = Result<PutBucketLifecycleResponse, om_client::ClientError>> + '_ {
    c.put_bucket_lifecycle(PutBucketLifecycleRequest {
        volume: "vol".into(),
        bucket: "bkt".into(),
        rules,
        ..Default::default()
    })
}

fn get(
    c: &OmClient,
) -> impl Future<Output = Result<GetBucketLifecycleResponse, om_client::ClientError>> + '_ {
    c.get_bucket_lifecycle(GetBucketLifecycleRequest {
        volume: "vol".into(),
        bucket: "bkt".into(),
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_are_set_read_and_removed_with_their_bucket() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    assert_err(
        get(&c).await,
        Code::NotFound,
        "NO_SUCH_LIFECYCLE_CONFIGURATION",
        "bucket",
    );
    let rules = vec![
        expire("logs", 30),
        LifecycleRule {
            id: "uploads".into(),
            enabled: false,
            filter: Some(LifecycleFilter::default()),
            abort_incomplete_multipart_upload: Some(LifecycleAbortUpload {
                days_after_initiation: 7,
            }),
            ..Default::default()
        },
    ];
    put(&c, rules.clone()).await.unwrap();
    let got = get(&c).await.unwrap();
    assert_eq!(got.rules, rules);
    assert!(got.modification_time_ms > 0 && got.update_id > 0);
    // Replaced as a whole.
    put(&c, vec![expire("other", 1)]).await.unwrap();
    assert_eq!(get(&c).await.unwrap().rules, vec![expire("other", 1)]);
    c.delete_bucket_lifecycle(DeleteBucketLifecycleRequest {
        volume: "vol".into(),
        bucket: "bkt".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_err(
        get(&c).await,
        Code::NotFound,
        "NO_SUCH_LIFECYCLE_CONFIGURATION",
        "bucket",
    );
    // A configuration goes with its bucket; a bucket made again under the
    // name starts without one.
    put(&c, vec![expire("logs", 30)]).await.unwrap();
    c.delete_bucket("vol", "bkt").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    assert_err(
        get(&c).await,
        Code::NotFound,
        "NO_SUCH_LIFECYCLE_CONFIGURATION",
        "bucket",
    );
    // And it survives a restart.
    put(&c, vec![expire("logs", 30)]).await.unwrap();
    let node = node.restart(|_| {}).await;
    assert_eq!(
        get(&node.client()).await.unwrap().rules,
        vec![expire("logs", 30)]
    );
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_configurations_are_refused_and_change_nothing() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    put(&c, vec![expire("kept", 5)]).await.unwrap();
    // The scanner's first pass writes its progress: let it complete before
    // tables are compared (the next pass is an hour away).
    om_tests::wait_for(
        std::time::Duration::from_secs(30),
        "the first lifecycle pass",
        || async {
            c.get_lifecycle_status(GetLifecycleStatusRequest {
                volume: "vol".into(),
                bucket: "bkt".into(),
                ..Default::default()
            })
            .await
            .ok()
            .and_then(|r| r.status)
            .filter(|s| s.last_pass_completed_ms > 0)
            .map(|_| ())
        },
    )
    .await;
    let tag_filter = Some(LifecycleFilter {
        predicate: Some(Predicate::Tag(LifecycleTag {
            key: "k".into(),
            value: "v".into(),
        })),
    });
    let cases: Vec<(Vec<LifecycleRule>, &str, &str)> = vec![
        (vec![], "INVALID_RULE_COUNT", "rules"),
        (
            (0..1001).map(|i| expire(&format!("r{i}"), 1)).collect(),
            "INVALID_RULE_COUNT",
            "rules",
        ),
        (
            vec![expire("a", 1), expire("a", 2)],
            "DUPLICATE_RULE_ID",
            "rules[1].id",
        ),
        (
            vec![expire(&"i".repeat(256), 1)],
            "INVALID_RULE_ID",
            "rules[0].id",
        ),
        (
            vec![expire("a", 0)],
            "INVALID_DAYS",
            "rules[0].expiration.days",
        ),
        (
            vec![LifecycleRule {
                expiration: Some(LifecycleExpiration {
                    date_ms: Some(1_798_761_600_001),
                    ..Default::default()
                }),
                ..expire("a", 1)
            }],
            "INVALID_DATE",
            "rules[0].expiration.date",
        ),
        (
            vec![LifecycleRule {
                expiration: Some(LifecycleExpiration {
                    days: Some(3),
                    expired_object_delete_marker: Some(true),
                    ..Default::default()
                }),
                ..expire("a", 1)
            }],
            "INVALID_EXPIRATION",
            "rules[0].expiration",
        ),
        (
            vec![LifecycleRule {
                id: "none".into(),
                ..Default::default()
            }],
            "NO_LIFECYCLE_ACTION",
            "rules[0]",
        ),
        // S3 wants a Filter (an empty one: every object) or a Prefix.
        (
            vec![
                expire("a", 1),
                LifecycleRule {
                    filter: None,
                    ..expire("b", 1)
                },
            ],
            "INVALID_FILTER",
            "rules[1].filter",
        ),
        // An empty Expiration, and ExpiredObjectDeleteMarker (even false)
        // beside Days.
        (
            vec![LifecycleRule {
                expiration: Some(LifecycleExpiration::default()),
                ..expire("a", 1)
            }],
            "INVALID_EXPIRATION",
            "rules[0].expiration",
        ),
        (
            vec![LifecycleRule {
                expiration: Some(LifecycleExpiration {
                    days: Some(3),
                    expired_object_delete_marker: Some(false),
                    ..Default::default()
                }),
                ..expire("a", 1)
            }],
            "INVALID_EXPIRATION",
            "rules[0].expiration",
        ),
        (
            vec![LifecycleRule {
                id: "u".into(),
                filter: tag_filter.clone(),
                abort_incomplete_multipart_upload: Some(LifecycleAbortUpload {
                    days_after_initiation: 1,
                }),
                ..Default::default()
            }],
            "INVALID_FILTER",
            "rules[0].filter",
        ),
        (
            vec![LifecycleRule {
                id: "m".into(),
                filter: tag_filter,
                expiration: Some(LifecycleExpiration {
                    expired_object_delete_marker: Some(true),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            "INVALID_FILTER",
            "rules[0].filter",
        ),
        (
            vec![LifecycleRule {
                unsupported: vec!["Transitions".into()],
                ..expire("t", 1)
            }],
            "UNSUPPORTED_LIFECYCLE_ACTION",
            "rules[0].Transitions",
        ),
        (
            vec![LifecycleRule {
                noncurrent_version_expiration: Some(LifecycleNoncurrentExpiration {
                    noncurrent_days: 1,
                    newer_noncurrent_versions: 101,
                }),
                ..expire("n", 1)
            }],
            "INVALID_NONCURRENT_VERSIONS",
            "rules[0].noncurrent_version_expiration.newer_noncurrent_versions",
        ),
    ];
    for (rules, reason, field) in cases {
        rejected(&node, put(&c, rules), Code::InvalidArgument, reason, field).await;
    }
    rejected(
        &node,
        c.put_bucket_lifecycle(PutBucketLifecycleRequest {
            volume: "vol".into(),
            bucket: "nope".into(),
            rules: vec![expire("a", 1)],
            ..Default::default()
        }),
        Code::NotFound,
        "BUCKET_NOT_FOUND",
        "bucket",
    )
    .await;
    assert_eq!(get(&c).await.unwrap().rules, vec![expire("kept", 5)]);
    node.node.shutdown().await;
}

/// What S3 accepts, om accepts: a rule without an id gets one (the same
/// on every replica: assigned before proposing), and a lone
/// `ExpiredObjectDeleteMarker: false` is kept as given; through `omctl`'s
/// AWS JSON too, where a rule with neither `Filter` nor `Prefix` is refused
/// with the configuration unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_without_ids_and_a_false_delete_marker_flag_are_accepted() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let no_marker = LifecycleRule {
        id: String::new(),
        filter: Some(LifecycleFilter::default()),
        expiration: Some(LifecycleExpiration {
            expired_object_delete_marker: Some(false),
            ..Default::default()
        }),
        ..expire("", 1)
    };
    put(
        &c,
        vec![expire("", 1), expire("rule-1", 2), no_marker.clone()],
    )
    .await
    .unwrap();
    let got = get(&c).await.unwrap().rules;
    let ids: Vec<&str> = got.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["rule-1-2", "rule-1", "rule-3"]);
    assert_eq!(
        got[2],
        LifecycleRule {
            id: "rule-3".into(),
            ..no_marker
        }
    );

    let ep = node.endpoint();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lc.json");
    let omctl = |args: &[&str]| {
        Command::new(binary("omctl"))
            .args(["--endpoint", &ep, "--timeout", "20"])
            .args(args)
            .output()
            .unwrap()
    };
    let set = |config: serde_json::Value| {
        std::fs::write(&file, config.to_string()).unwrap();
        omctl(&[
            "bucket",
            "lifecycle",
            "set",
            "vol/bkt",
            file.to_str().unwrap(),
        ])
    };
    let o = set(serde_json::json!({"Rules": [
        {"Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 1}},
        {"ID": "markers", "Status": "Enabled", "Filter": {},
         "Expiration": {"ExpiredObjectDeleteMarker": false}},
    ]}));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let shown = serde_json::json!({"Rules": [
        {"ID": "rule-1", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
         "Expiration": {"Days": 1}},
        {"ID": "markers", "Status": "Enabled", "Filter": {},
         "Expiration": {"ExpiredObjectDeleteMarker": false}},
    ]});
    let o = omctl(&["bucket", "lifecycle", "get", "vol/bkt"]);
    assert!(o.status.success());
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap(),
        shown
    );
    // The scanner's pass over these rules writes its progress: let it
    // complete before tables are compared (the next pass is an hour away).
    om_tests::wait_for(
        std::time::Duration::from_secs(30),
        "a lifecycle pass of the rules set",
        || async {
            c.get_lifecycle_status(GetLifecycleStatusRequest {
                volume: "vol".into(),
                bucket: "bkt".into(),
                ..Default::default()
            })
            .await
            .ok()
            .and_then(|r| r.status)
            .filter(|s| s.current && s.phase == "idle" && s.last_pass_completed_ms > 0)
            .map(|_| ())
        },
    )
    .await;
    let before = node.dump();
    let o = set(serde_json::json!({"Rules": [
        {"ID": "bare", "Status": "Enabled", "Expiration": {"Days": 1}},
    ]}));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("INVALID_FILTER") && err.contains("bare"),
        "{err}"
    );
    assert_eq!(
        before,
        node.dump(),
        "a refused configuration changed the tables"
    );
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_takes_aws_json() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let ep = node.endpoint();
    let dir = tempfile::tempdir().unwrap();
    let omctl = |args: &[&str]| {
        Command::new(binary("omctl"))
            .args(["--endpoint", &ep, "--timeout", "20"])
            .args(args)
            .output()
            .unwrap()
    };
    let config = serde_json::json!({"Rules": [
        {"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"},
         "Expiration": {"Days": 30},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 10, "NewerNoncurrentVersions": 3}},
        {"ID": "tmp", "Status": "Disabled",
         "Filter": {"And": {"Prefix": "tmp/", "Tags": [{"Key": "k", "Value": "v"}]}},
         "Expiration": {"Date": "2027-01-01T00:00:00Z"}},
        {"ID": "uploads", "Status": "Enabled", "Filter": {},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}},
    ]});
    let file = dir.path().join("lc.json");
    std::fs::write(&file, config.to_string()).unwrap();
    let o = omctl(&[
        "bucket",
        "lifecycle",
        "set",
        "vol/bkt",
        file.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = omctl(&["bucket", "lifecycle", "get", "vol/bkt"]);
    assert!(o.status.success());
    let got: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(got, config);
    // Actions om cannot run are refused loudly, the configuration unchanged.
    let transition = serde_json::json!({"Rules": [{"ID": "cold", "Status": "Enabled",
        "Filter": {}, "Transitions": [{"Days": 30, "StorageClass": "GLACIER"}]}]});
    std::fs::write(&file, transition.to_string()).unwrap();
    let o = omctl(&[
        "bucket",
        "lifecycle",
        "set",
        "vol/bkt",
        file.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("UNSUPPORTED_LIFECYCLE_ACTION") && err.contains("cold"),
        "{err}"
    );
    let o = omctl(&["bucket", "lifecycle", "get", "vol/bkt"]);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap(),
        config
    );
    let o = omctl(&["bucket", "lifecycle", "delete", "vol/bkt"]);
    assert!(o.status.success());
    let o = omctl(&["bucket", "lifecycle", "get", "vol/bkt"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("NO_SUCH_LIFECYCLE_CONFIGURATION"));
    node.node.shutdown().await;
}
