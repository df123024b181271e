//! Versioned buckets end to end through gRPC: S3's rules for writes, deletes,
//! delete markers and the null version; ListKeys and ListObjectVersions
//! against a naive model (with restarts); the native cost of listings past
//! long histories; every bad input refused with the tables unchanged; and
//! `omctl`. `listings`: ListKeys and ListObjectVersions against the model.

mod listings;

use std::process::Command;

use om_client::v1::*;
use om_client::{ClientError, OmClient};
use om_tests::{TestNode, assert_err, binary, rejected};
use tonic::Code;

async fn setup(c: &OmClient) {
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
}

async fn put(c: &OmClient, key: &str, size: u64) -> KeyInfo {
    c.put_key("vol", "bkt", key, size).await.unwrap()
}

async fn all_versions(c: &OmClient, mut req: ListObjectVersionsRequest) -> Vec<(String, String)> {
    let mut out = Vec::new();
    loop {
        let r = c.list_object_versions(req.clone()).await.unwrap();
        out.extend(
            r.versions
                .iter()
                .map(|v| (v.name.clone(), v.version_id.clone())),
        );
        out.extend(r.common_prefixes.iter().map(|p| (p.clone(), String::new())));
        if !r.truncated {
            return out;
        }
        req.continuation_token = r.next_continuation_token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versioned_bucket_follows_s3() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    let b = c.get_bucket("vol", "bkt").await.unwrap();
    assert_eq!(b.versioning(), BucketVersioning::Unversioned);
    let legacy = put(&c, "k", 10).await;
    assert_eq!(legacy.version_id, "null");
    let b = c
        .set_bucket_versioning("vol", "bkt", BucketVersioning::Enabled)
        .await
        .unwrap();
    assert_eq!(b.versioning(), BucketVersioning::Enabled);
    assert_eq!(
        c.get_bucket("vol", "bkt").await.unwrap().versioning(),
        BucketVersioning::Enabled
    );

    // Every write is a new version; the previous one keeps its blocks.
    let v1 = put(&c, "k", 20).await;
    let v2 = put(&c, "k", 30).await;
    assert_ne!(v1.version_id, v2.version_id);
    let cur = c.lookup_key("vol", "bkt", "k").await.unwrap();
    assert_eq!(
        (cur.version_id.as_str(), cur.size, cur.is_latest),
        (v2.version_id.as_str(), 30, true)
    );
    let old = c
        .lookup_key_version("vol", "bkt", "k", &v1.version_id)
        .await
        .unwrap();
    assert_eq!((old.size, old.is_latest), (20, false));
    assert!(old.noncurrent_since_ms >= v2.creation_time_ms);
    assert_eq!(old.blocks, v1.blocks);
    let null = c
        .lookup_key_version("vol", "bkt", "k", "null")
        .await
        .unwrap();
    assert_eq!(null.size, 10);
    let b = c.get_bucket("vol", "bkt").await.unwrap();
    assert_eq!((b.key_count, b.used_bytes), (3, 60));

    // A delete adds a delete marker: the key is gone for reads and ListKeys.
    let d = c.delete_key_version("vol", "bkt", "k", "").await.unwrap();
    assert!(d.delete_marker);
    match c.lookup_key("vol", "bkt", "k").await {
        Err(ClientError::Api {
            code: Code::NotFound,
            reason,
            delete_marker: Some(id),
            ..
        }) => {
            assert_eq!(reason, "KEY_NOT_FOUND");
            assert_eq!(id, d.version_id);
        }
        other => panic!("expected NOT_FOUND for a delete marker, got {other:?}"),
    }
    let marker = c
        .lookup_key_version("vol", "bkt", "k", &d.version_id)
        .await
        .unwrap();
    assert!(marker.delete_marker && marker.is_latest);
    let l = c
        .list_keys(ListKeysRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(l.keys.is_empty());
    // Conditions apply to the current version: a delete marker is no key.
    let cond = c
        .put_key_with(PutKeyRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            size: 1,
            conditions: Some(KeyConditions {
                expected_update_id: v2.update_id,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
    assert_err(
        cond,
        Code::NotFound,
        "KEY_NOT_FOUND",
        "conditions.expected_update_id",
    );
    let versions = all_versions(
        &c,
        ListObjectVersionsRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            ..Default::default()
        },
    )
    .await;
    let ids: Vec<&str> = versions.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(
        ids,
        [
            d.version_id.as_str(),
            &v2.version_id,
            &v1.version_id,
            "null"
        ]
    );

    // Removing the marker by version brings v2 back.
    c.delete_key_version("vol", "bkt", "k", &d.version_id)
        .await
        .unwrap();
    assert_eq!(
        c.lookup_key("vol", "bkt", "k").await.unwrap().version_id,
        v2.version_id
    );
    // Copying an older version onto its key restores it as a new version.
    let restored = c
        .copy_key(CopyKeyRequest {
            src_volume: "vol".into(),
            src_bucket: "bkt".into(),
            src_key: "k".into(),
            src_version_id: v1.version_id.clone(),
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            content_md5: "0123456789abcdef0123456789abcdef".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .key
        .unwrap();
    assert_eq!(
        (restored.size, restored.blocks.clone()),
        (20, v1.blocks.clone())
    );

    // Suspended: writes and deletes replace the null version only.
    c.set_bucket_versioning("vol", "bkt", BucketVersioning::Suspended)
        .await
        .unwrap();
    let n = put(&c, "k", 40).await;
    assert_eq!(n.version_id, "null");
    let d = c.delete_key_version("vol", "bkt", "k", "").await.unwrap();
    assert_eq!((d.version_id.as_str(), d.delete_marker), ("null", true));
    let versions = all_versions(
        &c,
        ListObjectVersionsRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            ..Default::default()
        },
    )
    .await;
    let ids: Vec<&str> = versions.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(
        ids,
        ["null", &restored.version_id, &v2.version_id, &v1.version_id],
        "the old null version (10 bytes) and the suspended write are gone"
    );

    // DeleteKeys with version ids: one outcome each.
    let r = c
        .delete_key_versions(
            "vol",
            "bkt",
            &["k".into(), "k".into(), "nope".into()],
            &["null".into(), v2.version_id.clone(), String::new()],
        )
        .await
        .unwrap();
    assert_eq!(
        r.iter()
            .map(|o| (o.reason.as_str(), o.delete_marker))
            .collect::<Vec<_>>(),
        [("", true), ("", false), ("", true)]
    );
    assert_eq!(
        c.lookup_key("vol", "bkt", "k").await.unwrap().version_id,
        restored.version_id
    );
    // Versions survive a restart.
    let before = node.dump();
    let node = node.restart(|_| {}).await;
    assert_eq!(before, node.dump());
    node.node.shutdown().await;
}

/// A version-id marker is a position: a scan that deletes what each page
/// listed (s3-tests' cleanup does) resumes after a null version it just
/// deleted, and lists every older version once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_version_marker_outlives_its_version() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    c.set_bucket_versioning("vol", "bkt", BucketVersioning::Enabled)
        .await
        .unwrap();
    let old = put(&c, "a", 1).await;
    c.set_bucket_versioning("vol", "bkt", BucketVersioning::Suspended)
        .await
        .unwrap();
    assert_eq!(put(&c, "a", 2).await.version_id, "null");
    c.set_bucket_versioning("vol", "bkt", BucketVersioning::Enabled)
        .await
        .unwrap();
    let new = put(&c, "a", 3).await;
    let b = put(&c, "b", 4).await;
    // "a": new, null, old; then "b".
    let page = |km: &str, vm: &str| {
        c.list_object_versions(ListObjectVersionsRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key_marker: km.into(),
            version_id_marker: vm.into(),
            max_keys: 2,
            ..Default::default()
        })
    };
    let first = page("", "").await.unwrap();
    let ids: Vec<&str> = first
        .versions
        .iter()
        .map(|v| v.version_id.as_str())
        .collect();
    assert_eq!(ids, vec![new.version_id.as_str(), "null"]);
    assert_eq!(
        (
            first.next_key_marker.as_str(),
            first.next_version_id_marker.as_str()
        ),
        ("a", "null")
    );
    for id in ["null", new.version_id.as_str()] {
        c.delete_key_version("vol", "bkt", "a", id).await.unwrap();
    }
    let rest = page("a", "null").await.unwrap();
    let got: Vec<(&str, &str)> = rest
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.version_id.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![("a", old.version_id.as_str()), ("b", b.version_id.as_str())]
    );
    // With the key gone altogether, the marker resumes at the next key.
    c.delete_key_version("vol", "bkt", "a", &old.version_id)
        .await
        .unwrap();
    let rest = page("a", "null").await.unwrap();
    let got: Vec<&str> = rest.versions.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(got, vec!["b"]);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_version_input_is_refused_and_changes_nothing() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    c.create_bucket("vol", "fso", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    put(&c, "k", 1).await;
    let lookup = |v: &'static str| c.lookup_key_version("vol", "bkt", "k", v);
    rejected(
        &node,
        lookup("xyz"),
        Code::InvalidArgument,
        "INVALID_VERSION_ID",
        "version_id",
    )
    .await;
    rejected(
        &node,
        lookup("00000000000000ff"),
        Code::NotFound,
        "VERSION_NOT_FOUND",
        "version_id",
    )
    .await;
    rejected(
        &node,
        c.delete_key_version("vol", "bkt", "k", "NULL"),
        Code::InvalidArgument,
        "INVALID_VERSION_ID",
        "version_id",
    )
    .await;
    rejected(
        &node,
        c.delete_key_version("vol", "bkt", "k", "00000000000000ff"),
        Code::NotFound,
        "VERSION_NOT_FOUND",
        "version_id",
    )
    .await;
    rejected(
        &node,
        c.delete_key_versions("vol", "bkt", &["k".into(), "j".into()], &["null".into()]),
        Code::InvalidArgument,
        "INVALID_VERSION_ID_COUNT",
        "version_ids",
    )
    .await;
    rejected(
        &node,
        c.delete_key_versions("vol", "bkt", &["k".into()], &["bad".into()]),
        Code::InvalidArgument,
        "INVALID_VERSION_ID",
        "version_ids",
    )
    .await;
    let list = |key_marker: &'static str, version_id_marker: &'static str| {
        c.list_object_versions(ListObjectVersionsRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key_marker: key_marker.into(),
            version_id_marker: version_id_marker.into(),
            ..Default::default()
        })
    };
    rejected(
        &node,
        list("", "null"),
        Code::InvalidArgument,
        "VERSION_ID_MARKER_WITHOUT_KEY_MARKER",
        "version_id_marker",
    )
    .await;
    rejected(
        &node,
        list("k", "v1"),
        Code::InvalidArgument,
        "INVALID_VERSION_ID",
        "version_id_marker",
    )
    .await;
    rejected(
        &node,
        c.set_bucket_versioning("vol", "bkt", BucketVersioning::Unversioned),
        Code::InvalidArgument,
        "INVALID_VERSIONING",
        "versioning",
    )
    .await;
    rejected(
        &node,
        c.set_bucket_versioning("vol", "fso", BucketVersioning::Enabled),
        Code::FailedPrecondition,
        "VERSIONING_NOT_SUPPORTED",
        "bucket",
    )
    .await;
    rejected(
        &node,
        c.copy_key(CopyKeyRequest {
            src_volume: "vol".into(),
            src_bucket: "bkt".into(),
            src_key: "k".into(),
            src_version_id: "nope".into(),
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "c".into(),
            ..Default::default()
        }),
        Code::InvalidArgument,
        "INVALID_VERSION_ID",
        "src_version_id",
    )
    .await;
    c.set_bucket_versioning("vol", "bkt", BucketVersioning::Enabled)
        .await
        .unwrap();
    rejected(
        &node,
        c.rename_key("vol", "bkt", "k", "z"),
        Code::FailedPrecondition,
        "BUCKET_VERSIONED",
        "bucket",
    )
    .await;
    let d = c.delete_key_version("vol", "bkt", "k", "").await.unwrap();
    rejected(
        &node,
        c.copy_key(CopyKeyRequest {
            src_volume: "vol".into(),
            src_bucket: "bkt".into(),
            src_key: "k".into(),
            src_version_id: d.version_id.clone(),
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "c".into(),
            ..Default::default()
        }),
        Code::InvalidArgument,
        "SOURCE_IS_DELETE_MARKER",
        "src_version_id",
    )
    .await;
    rejected(
        &node,
        c.delete_bucket("vol", "bkt"),
        Code::FailedPrecondition,
        "BUCKET_NOT_EMPTY",
        "name",
    )
    .await;
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_manages_versions() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    let ep = node.endpoint();
    let run = |args: &[&str]| {
        let o = Command::new(binary("omctl"))
            .args(["--endpoint", &ep, "--timeout", "20", "--output", "json"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "omctl {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let b = run(&["bucket", "set-versioning", "vol/bkt", "enabled"]);
    assert_eq!(b["versioning"], "ENABLED");
    let b = run(&["bucket", "set-tags", "vol/bkt", "team=storage", "tier=hot"]);
    assert_eq!(
        b["tags"],
        serde_json::json!({"team": "storage", "tier": "hot"})
    );
    assert_eq!(run(&["bucket", "info", "vol/bkt"])["tags"]["tier"], "hot");
    let b = run(&["bucket", "set-tags", "vol/bkt"]);
    assert_eq!(b["tags"], serde_json::json!({}));
    let v1 = run(&["key", "put", "vol/bkt/k", "--size", "5"]);
    let v2 = run(&["key", "put", "vol/bkt/k", "--size", "7"]);
    let old = run(&[
        "key",
        "info",
        "vol/bkt/k",
        "--version",
        v1["version_id"].as_str().unwrap(),
    ]);
    assert_eq!(
        (old["size"].as_u64(), old["is_latest"].as_bool()),
        (Some(5), Some(false))
    );
    let refused = Command::new(binary("omctl"))
        .args([
            "--endpoint",
            &ep,
            "key",
            "delete",
            "vol/bkt/k",
            "--if-size",
            "6",
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("IF_MATCH_FAILED"));
    let d = run(&["key", "delete", "vol/bkt/k", "--if-size", "7"]);
    assert_eq!(d["delete_marker"], true);
    let l = run(&["key", "versions", "vol/bkt", "--all", "--max", "1"]);
    let ids: Vec<&str> = l["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["version_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            d["version_id"].as_str().unwrap(),
            v2["version_id"].as_str().unwrap(),
            v1["version_id"].as_str().unwrap()
        ]
    );
    let r = run(&[
        "key",
        "delete",
        "vol/bkt/k",
        "--version",
        d["version_id"].as_str().unwrap(),
    ]);
    assert_eq!(r["delete_marker"], true);
    assert_eq!(
        c.lookup_key("vol", "bkt", "k").await.unwrap().version_id,
        v2["version_id"].as_str().unwrap()
    );
    let v3 = run(&["key", "put", "vol/bkt/k", "--size", "9"]);
    let many = run(&[
        "key",
        "delete-many",
        "vol/bkt",
        "k",
        "k",
        "--versions",
        &format!(
            "{},{}",
            v3["version_id"].as_str().unwrap(),
            v1["version_id"].as_str().unwrap()
        ),
    ]);
    assert_eq!(many[0]["deleted"], true);
    assert_eq!(many[1]["version_id"], v1["version_id"]);
    let b = run(&["bucket", "set-versioning", "vol/bkt", "suspended"]);
    assert_eq!(b["versioning"], "SUSPENDED");
    node.node.shutdown().await;
}
