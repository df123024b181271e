//! Space and namespace quotas of volumes and buckets: each write path that
//! adds committed bytes or entries is refused past a quota with
//! FAILED_PRECONDITION QUOTA_EXCEEDED naming the resource, the refused write
//! changes nothing, and deleting makes room again.

use om_client::OmClient;
use om_client::v1::*;
use om_tests::{TestNode, rejected, wait_for};
use tonic::Code;

const ETAG: &str = "0cc175b9c0f1b6a831c399e269772661";

async fn volume(c: &OmClient, name: &str, quota_bytes: u64) {
    c.create_volume_with(CreateVolumeRequest {
        name: name.into(),
        quota_bytes,
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn bucket(c: &OmClient, v: &str, b: &str, layout: BucketLayout, bytes: u64, names: u64) {
    c.create_bucket_with(CreateBucketRequest {
        volume: v.into(),
        name: b.into(),
        layout: layout as i32,
        quota_bytes: bytes,
        quota_namespace: names,
        ..Default::default()
    })
    .await
    .unwrap();
}

/// Opens a session for `key` with one block; the commit request that
/// writes `size` bytes to it.
async fn session(c: &OmClient, v: &str, b: &str, key: &str, size: u64) -> CommitKeyRequest {
    let o = c
        .open_key(OpenKeyRequest {
            volume: v.into(),
            bucket: b.into(),
            key: key.into(),
            blocks: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    CommitKeyRequest {
        volume: v.into(),
        bucket: b.into(),
        key: key.into(),
        session_id: o.session_id,
        size,
        blocks: if size == 0 {
            vec![]
        } else {
            vec![BlockInfo {
                block_id: o.blocks[0].block_id,
                offset: 0,
                length: size,
            }]
        },
        ..Default::default()
    }
}

/// A file session in an FSO bucket, and the commit that writes `size` bytes.
async fn file(c: &OmClient, v: &str, b: &str, path: &str, size: u64) -> CommitKeyRequest {
    let o = c
        .create_file(CreateFileRequest {
            volume: v.into(),
            bucket: b.into(),
            path: path.into(),
            recursive: true,
            blocks: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    CommitKeyRequest {
        volume: v.into(),
        bucket: b.into(),
        key: o.path,
        session_id: o.session_id,
        size,
        blocks: vec![BlockInfo {
            block_id: o.blocks[0].block_id,
            offset: 0,
            length: size,
        }],
        ..Default::default()
    }
}

/// An upload of `key` with one uploaded part of `size` bytes; the request
/// that completes it.
async fn upload(
    c: &OmClient,
    v: &str,
    b: &str,
    key: &str,
    size: u64,
) -> CompleteMultipartUploadRequest {
    let u = c
        .initiate_multipart_upload(InitiateMultipartUploadRequest {
            volume: v.into(),
            bucket: b.into(),
            key: key.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .upload
        .unwrap();
    c.commit_part(CommitPartRequest {
        volume: v.into(),
        bucket: b.into(),
        key: key.into(),
        upload_id: u.upload_id.clone(),
        part_number: 1,
        size,
        etag: ETAG.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    CompleteMultipartUploadRequest {
        volume: v.into(),
        bucket: b.into(),
        key: key.into(),
        upload_id: u.upload_id,
        parts: vec![CompletedPart {
            part_number: 1,
            etag: ETAG.into(),
        }],
        ..Default::default()
    }
}

fn copy(v: &str, b: &str, from: &str, to: &str) -> CopyKeyRequest {
    CopyKeyRequest {
        src_volume: v.into(),
        src_bucket: b.into(),
        src_key: from.into(),
        volume: v.into(),
        bucket: b.into(),
        key: to.into(),
        // Keys put without an ETag need the content's digest to be copied.
        content_md5: ETAG.into(),
        ..Default::default()
    }
}

async fn exceeded<T: std::fmt::Debug>(
    node: &TestNode,
    f: impl std::future::Future<Output = Result<T, om_client::ClientError>>,
    resource: &str,
) {
    rejected(
        node,
        f,
        Code::FailedPrecondition,
        "QUOTA_EXCEEDED",
        resource,
    )
    .await;
}

/// A bucket's space quota of 130 through PutKey, CommitKey, CopyKey and
/// CompleteMultipartUpload, then a volume's through the same paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn space_quotas_bind_every_write_path() {
    let node = TestNode::start().await;
    let c = node.client();
    for (vol, bkt_quota, vol_quota, resource) in
        [("vbk", 130, 0, "bucket"), ("vvl", 0, 130, "volume")]
    {
        volume(&c, vol, vol_quota).await;
        bucket(&c, vol, "bkt", BucketLayout::ObjectStore, bkt_quota, 0).await;
        c.put_key(vol, "bkt", "a", 90).await.unwrap();
        exceeded(&node, c.put_key(vol, "bkt", "b", 41), resource).await;
        let commit = session(&c, vol, "bkt", "b", 41).await;
        exceeded(&node, c.commit_key(commit.clone()), resource).await;
        exceeded(&node, c.copy_key(copy(vol, "bkt", "a", "b")), resource).await;
        let complete = upload(&c, vol, "bkt", "m", 41).await;
        exceeded(
            &node,
            c.complete_multipart_upload(complete.clone()),
            resource,
        )
        .await;
        // Up to the quota exactly, and an overwrite counts its growth only.
        c.put_key(vol, "bkt", "a", 130).await.unwrap();
        c.put_key(vol, "bkt", "a", 90).await.unwrap();
        let b = c.get_bucket(vol, "bkt").await.unwrap();
        assert_eq!((b.used_bytes, b.key_count), (90, 1));
        assert_eq!(c.get_volume(vol).await.unwrap().used_bytes, 90);
        // Deleting makes room: each refused write now goes through.
        c.delete_key(vol, "bkt", "a").await.unwrap();
        c.commit_key(commit).await.unwrap();
        c.complete_multipart_upload(complete).await.unwrap();
        c.copy_key(copy(vol, "bkt", "b", "c")).await.unwrap();
        assert_eq!(c.get_volume(vol).await.unwrap().used_bytes, 41 * 3);
    }
    node.node.shutdown().await;
}

/// A volume's usage is the sum of its buckets', whatever their layout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_quota_spans_its_buckets() {
    let node = TestNode::start().await;
    let c = node.client();
    volume(&c, "vol", 100).await;
    bucket(&c, "vol", "obj", BucketLayout::ObjectStore, 0, 0).await;
    bucket(&c, "vol", "fsb", BucketLayout::FileSystemOptimized, 0, 0).await;
    c.put_key("vol", "obj", "a", 70).await.unwrap();
    let commit = file(&c, "vol", "fsb", "d/f", 31).await;
    exceeded(&node, c.commit_key(commit.clone()), "volume").await;
    let small = file(&c, "vol", "fsb", "d/g", 30).await;
    c.commit_key(small).await.unwrap();
    assert_eq!(c.get_volume("vol").await.unwrap().used_bytes, 100);
    assert_eq!(c.get_bucket("vol", "fsb").await.unwrap().used_bytes, 30);
    // Deleting in one bucket makes room in the other.
    c.delete_key("vol", "obj", "a").await.unwrap();
    c.commit_key(commit).await.unwrap();
    assert_eq!(c.get_volume("vol").await.unwrap().used_bytes, 61);
    c.delete_path(DeletePathRequest {
        volume: "vol".into(),
        bucket: "fsb".into(),
        path: "d/g".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(c.get_volume("vol").await.unwrap().used_bytes, 31);
    node.node.shutdown().await;
}

/// Bucket namespace quotas count keys (object store) and files plus
/// directories (FSO); a volume's counts its buckets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_quotas_bind_keys_files_directories_and_buckets() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume_with(CreateVolumeRequest {
        name: "vol".into(),
        quota_namespace: 2,
        ..Default::default()
    })
    .await
    .unwrap();
    bucket(&c, "vol", "obj", BucketLayout::ObjectStore, 0, 2).await;
    bucket(&c, "vol", "fsb", BucketLayout::FileSystemOptimized, 0, 3).await;
    exceeded(
        &node,
        c.create_bucket("vol", "third", BucketLayout::ObjectStore),
        "volume",
    )
    .await;

    c.put_key("vol", "obj", "a", 1).await.unwrap();
    c.put_key("vol", "obj", "b", 1).await.unwrap();
    exceeded(&node, c.put_key("vol", "obj", "c", 1), "bucket").await;
    let commit = session(&c, "vol", "obj", "c", 0).await;
    exceeded(&node, c.commit_key(commit.clone()), "bucket").await;
    exceeded(&node, c.copy_key(copy("vol", "obj", "a", "c")), "bucket").await;
    let complete = upload(&c, "vol", "obj", "c", 1).await;
    exceeded(
        &node,
        c.complete_multipart_upload(complete.clone()),
        "bucket",
    )
    .await;
    // Replacing an existing key adds no entry.
    c.put_key("vol", "obj", "a", 5).await.unwrap();
    c.copy_key(copy("vol", "obj", "a", "b")).await.unwrap();
    c.delete_key("vol", "obj", "b").await.unwrap();
    c.complete_multipart_upload(complete).await.unwrap();
    assert_eq!(c.get_bucket("vol", "obj").await.unwrap().used_namespace, 2);

    let mkdir = |path: &str| CreateDirectoryRequest {
        volume: "vol".into(),
        bucket: "fsb".into(),
        path: path.into(),
        ..Default::default()
    };
    c.create_directory(mkdir("x/y")).await.unwrap();
    exceeded(&node, c.create_directory(mkdir("p/q")), "bucket").await;
    // CreateFile counts the parents it makes, the file counts at commit.
    exceeded(
        &node,
        c.create_file(CreateFileRequest {
            volume: "vol".into(),
            bucket: "fsb".into(),
            path: "p/q/f".into(),
            recursive: true,
            ..Default::default()
        }),
        "bucket",
    )
    .await;
    let f = file(&c, "vol", "fsb", "x/f", 1).await;
    c.commit_key(f).await.unwrap();
    let g = file(&c, "vol", "fsb", "x/y/g", 1).await;
    exceeded(&node, c.commit_key(g.clone()), "bucket").await;
    assert_eq!(c.get_bucket("vol", "fsb").await.unwrap().used_namespace, 3);
    // A recursive delete frees the directory at once, what is under it as
    // the purge goes.
    c.delete_path(DeletePathRequest {
        volume: "vol".into(),
        bucket: "fsb".into(),
        path: "x".into(),
        recursive: true,
        ..Default::default()
    })
    .await
    .unwrap();
    wait_for(std::time::Duration::from_secs(20), "the purge", || async {
        (c.get_bucket("vol", "fsb").await.unwrap().used_namespace == 0).then_some(())
    })
    .await;
    c.create_directory(mkdir("p/q")).await.unwrap();
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_are_set_cleared_and_never_below_usage() {
    let node = TestNode::start().await;
    let c = node.client();
    volume(&c, "vol", 0).await;
    bucket(&c, "vol", "bkt", BucketLayout::ObjectStore, 0, 0).await;
    c.put_key("vol", "bkt", "a", 50).await.unwrap();
    c.put_key("vol", "bkt", "b", 50).await.unwrap();
    let set_bucket = |bytes, names| SetBucketQuotaRequest {
        volume: "vol".into(),
        name: "bkt".into(),
        quota_bytes: bytes,
        quota_namespace: names,
        ..Default::default()
    };
    let set_volume = |bytes, names| SetVolumeQuotaRequest {
        name: "vol".into(),
        quota_bytes: bytes,
        quota_namespace: names,
        ..Default::default()
    };
    for (bytes, names, field) in [
        (Some(99), None, "quota_bytes"),
        (None, Some(1), "quota_namespace"),
    ] {
        rejected(
            &node,
            c.set_bucket_quota(set_bucket(bytes, names)),
            Code::FailedPrecondition,
            "QUOTA_BELOW_USAGE",
            field,
        )
        .await;
    }
    rejected(
        &node,
        c.set_volume_quota(set_volume(Some(99), None)),
        Code::FailedPrecondition,
        "QUOTA_BELOW_USAGE",
        "quota_bytes",
    )
    .await;
    let b = c
        .set_bucket_quota(set_bucket(Some(100), Some(2)))
        .await
        .unwrap()
        .bucket
        .unwrap();
    assert_eq!((b.quota_bytes, b.quota_namespace), (100, 2));
    assert_eq!((b.used_bytes, b.used_namespace), (100, 2));
    exceeded(&node, c.put_key("vol", "bkt", "a", 51), "bucket").await;
    // Clearing one quota leaves the other.
    let b = c
        .set_bucket_quota(set_bucket(Some(0), None))
        .await
        .unwrap()
        .bucket
        .unwrap();
    assert_eq!((b.quota_bytes, b.quota_namespace), (0, 2));
    c.put_key("vol", "bkt", "a", 51).await.unwrap();
    exceeded(&node, c.put_key("vol", "bkt", "c", 0), "bucket").await;
    let v = c
        .set_volume_quota(set_volume(Some(101), Some(1)))
        .await
        .unwrap()
        .volume
        .unwrap();
    assert_eq!(
        (v.quota_bytes, v.quota_namespace, v.used_bytes),
        (101, 1, 101)
    );
    exceeded(&node, c.put_key("vol", "bkt", "b", 51), "volume").await;
    node.node.shutdown().await;
}

fn omctl(endpoint: &str, args: &[&str]) -> std::process::Output {
    om_tests::omctl(endpoint, 20, args)
}

fn ok_json(endpoint: &str, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--output", "json"];
    all.extend_from_slice(args);
    let o = omctl(endpoint, &all);
    assert!(
        o.status.success(),
        "omctl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_sets_clears_and_shows_quotas() {
    let node = TestNode::start().await;
    let ep = node.endpoint();
    ok_json(&ep, &["volume", "create", "vol", "--space-quota", "1KB"]);
    let b = ok_json(
        &ep,
        &["bucket", "create", "vol/bkt", "--namespace-quota", "1"],
    );
    assert_eq!(b["quota_namespace"], 1);
    ok_json(&ep, &["key", "put", "vol/bkt/a", "--size", "1000"]);
    let o = omctl(&ep, &["key", "put", "vol/bkt/b", "--size", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error: FailedPrecondition QUOTA_EXCEEDED (field bucket)"),
        "{err}"
    );
    let b = ok_json(&ep, &["bucket", "clrquota", "vol/bkt", "--namespace-quota"]);
    assert_eq!(b["quota_namespace"], 0);
    let o = omctl(&ep, &["key", "put", "vol/bkt/b", "--size", "25"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error: FailedPrecondition QUOTA_EXCEEDED (field volume)"),
        "{err}"
    );
    ok_json(&ep, &["volume", "setquota", "vol", "--space-quota", "2KB"]);
    ok_json(&ep, &["key", "put", "vol/bkt/b", "--size", "25"]);
    let v = ok_json(&ep, &["volume", "info", "vol"]);
    assert_eq!(
        (v["used_bytes"].as_u64(), v["quota_bytes"].as_u64()),
        (Some(1025), Some(2048))
    );
    let b = ok_json(
        &ep,
        &[
            "bucket",
            "setquota",
            "vol/bkt",
            "--space-quota",
            "1025",
            "--namespace-quota",
            "5",
        ],
    );
    assert_eq!(b["quota_bytes"], 1025);
    let b = ok_json(&ep, &["bucket", "info", "vol/bkt"]);
    assert_eq!(
        (b["used_bytes"].as_u64(), b["used_namespace"].as_u64()),
        (Some(1025), Some(2))
    );
    let v = ok_json(&ep, &["volume", "clrquota", "vol", "--space-quota"]);
    assert_eq!(v["quota_bytes"], 0);
    // Neither quota named: a usage error, nothing sent.
    assert!(!omctl(&ep, &["volume", "clrquota", "vol"]).status.success());
    node.node.shutdown().await;
}
