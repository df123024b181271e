//! The public API end to end through gRPC on an in-process single-node cluster:
//! volumes, buckets and keys, their failure cases, and proof that every
//! rejected request leaves the tables unchanged.

use om_client::OmClient;
use om_client::v1::*;
use om_tests::{TestNode, assert_err, rejected};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_lifecycle() {
    let node = TestNode::start().await;
    let c = node.client();
    let v = c.create_volume("vol1", "alice").await.unwrap();
    assert_eq!(v.name, "vol1");
    assert_eq!(v.owner, "alice");
    assert!(v.creation_time_ms > 0);
    assert!(v.object_id > 0 && v.update_id > 0);
    assert_eq!(c.get_volume("vol1").await.unwrap(), v);
    c.create_volume("vol2", "").await.unwrap();
    let l = c.list_volumes("", "", 0).await.unwrap();
    let names: Vec<_> = l.volumes.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["vol1", "vol2"]);
    assert!(!l.truncated);
    c.delete_volume("vol1").await.unwrap();
    assert_err(
        c.get_volume("vol1").await,
        Code::NotFound,
        "VOLUME_NOT_FOUND",
        "name",
    );
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_and_key_flow() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    let b = c
        .create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    assert_eq!(b.layout, BucketLayout::ObjectStore as i32);
    let fso = c
        .create_bucket("vol1", "fso1", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    assert_eq!(fso.layout, BucketLayout::FileSystemOptimized as i32);
    assert_eq!(c.get_volume("vol1").await.unwrap().bucket_count, 2);

    let k = c.put_key("vol1", "bkt1", "dir/a.txt", 10).await.unwrap();
    assert_eq!(k.size, 10);
    assert_eq!(k.blocks.len(), 1);
    assert_eq!(k.blocks[0].length, 10);
    let big = c
        .put_key("vol1", "bkt1", "big", 600 * 1024 * 1024)
        .await
        .unwrap();
    assert_eq!(big.blocks.len(), 3, "256 MiB blocks");
    assert_eq!(
        big.blocks.iter().map(|b| b.length).sum::<u64>(),
        600 * 1024 * 1024
    );
    let ids: std::collections::BTreeSet<u64> = k
        .blocks
        .iter()
        .chain(&big.blocks)
        .map(|b| b.block_id)
        .collect();
    assert_eq!(ids.len(), 4, "block ids are unique");

    let got = c.lookup_key("vol1", "bkt1", "dir/a.txt").await.unwrap();
    assert_eq!(got, k);
    // Overwrite keeps creation time, bumps update id, allocates new blocks.
    let k2 = c.put_key("vol1", "bkt1", "dir/a.txt", 20).await.unwrap();
    assert_eq!(k2.creation_time_ms, k.creation_time_ms);
    assert!(k2.update_id > k.update_id);
    assert_ne!(k2.blocks[0].block_id, k.blocks[0].block_id);
    let bi = c.get_bucket("vol1", "bkt1").await.unwrap();
    assert_eq!(bi.key_count, 2);
    assert_eq!(bi.used_bytes, 20 + 600 * 1024 * 1024);

    c.delete_key("vol1", "bkt1", "dir/a.txt").await.unwrap();
    assert_err(
        c.lookup_key("vol1", "bkt1", "dir/a.txt").await,
        Code::NotFound,
        "KEY_NOT_FOUND",
        "key",
    );
    c.delete_key("vol1", "bkt1", "big").await.unwrap();
    c.delete_bucket("vol1", "bkt1").await.unwrap();
    c.delete_bucket("vol1", "fso1").await.unwrap();
    c.delete_volume("vol1").await.unwrap();
    assert!(c.list_volumes("", "", 0).await.unwrap().volumes.is_empty());
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_paginate_with_exclusive_markers() {
    let node = TestNode::start_with(|a| a.max_page = Some(4)).await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.create_bucket("vol1", "bkt1-x", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let names = ["a", "a/1", "a/2", "b", "b/1", "c", "d", "e", "é"];
    for n in names {
        c.put_key("vol1", "bkt1", n, 1).await.unwrap();
    }
    // A neighbouring bucket whose name sorts close by must never leak in.
    c.put_key("vol1", "bkt1-x", "a", 1).await.unwrap();

    let list = |prefix: &str, start_after: &str, max: u32| ListKeysRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        prefix: prefix.into(),
        start_after: start_after.into(),
        max_keys: max,
        ..Default::default()
    };
    // Follow markers: the server cap (4) applies even when asked for more.
    let mut seen = Vec::new();
    let mut marker = String::new();
    let mut pages = 0;
    loop {
        let r = c.list_keys(list("", &marker, 100)).await.unwrap();
        assert!(r.keys.len() <= 4);
        seen.extend(r.keys.iter().map(|k| k.name.clone()));
        pages += 1;
        if !r.truncated {
            assert!(r.next_start_after.is_empty());
            break;
        }
        marker = r.next_start_after;
    }
    assert_eq!(seen, names);
    assert_eq!(pages, 3);

    let r = c.list_keys(list("a/", "", 0)).await.unwrap();
    let got: Vec<_> = r.keys.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(got, ["a/1", "a/2"]);
    let r = c.list_keys(list("a/", "a/1", 0)).await.unwrap();
    assert_eq!(r.keys.len(), 1);
    assert_eq!(r.keys[0].name, "a/2");
    // start_after before the prefix starts at the prefix.
    let r = c.list_keys(list("b", "a", 0)).await.unwrap();
    let got: Vec<_> = r.keys.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(got, ["b", "b/1"]);
    // A marker past the prefix yields nothing.
    assert!(
        c.list_keys(list("a", "zz", 0))
            .await
            .unwrap()
            .keys
            .is_empty()
    );

    let bl = c.list_buckets("vol1", "", "", 0).await.unwrap();
    let got: Vec<_> = bl.buckets.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(got, ["bkt1", "bkt1-x"]);
    let bl = c.list_buckets("vol1", "", "bkt1", 1).await.unwrap();
    assert_eq!(bl.buckets[0].name, "bkt1-x");
    assert!(!bl.truncated);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.create_bucket("vol1", "fso", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    c.put_key("vol1", "bkt1", "k", 5).await.unwrap();

    for bad in [
        "ab",
        "Upper",
        "has_underscore",
        "-lead",
        "trail-",
        "a..b",
        "192.168.0.1",
        "xn--abc",
    ] {
        rejected(
            &node,
            c.create_volume(bad, ""),
            Code::InvalidArgument,
            "INVALID_NAME",
            "name",
        )
        .await;
    }
    rejected(
        &node,
        c.create_bucket("vol1", "Bad", BucketLayout::ObjectStore),
        Code::InvalidArgument,
        "INVALID_NAME",
        "name",
    )
    .await;
    rejected(
        &node,
        c.create_bucket("no-such", "bkt2", BucketLayout::ObjectStore),
        Code::NotFound,
        "VOLUME_NOT_FOUND",
        "volume",
    )
    .await;
    rejected(
        &node,
        c.create_volume("vol1", ""),
        Code::AlreadyExists,
        "VOLUME_ALREADY_EXISTS",
        "name",
    )
    .await;
    rejected(
        &node,
        c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore),
        Code::AlreadyExists,
        "BUCKET_ALREADY_EXISTS",
        "name",
    )
    .await;
    rejected(
        &node,
        c.delete_volume("vol1"),
        Code::FailedPrecondition,
        "VOLUME_NOT_EMPTY",
        "name",
    )
    .await;
    rejected(
        &node,
        c.delete_bucket("vol1", "bkt1"),
        Code::FailedPrecondition,
        "BUCKET_NOT_EMPTY",
        "name",
    )
    .await;
    rejected(
        &node,
        c.delete_volume("nope"),
        Code::NotFound,
        "VOLUME_NOT_FOUND",
        "name",
    )
    .await;
    rejected(
        &node,
        c.delete_bucket("vol1", "nope"),
        Code::NotFound,
        "BUCKET_NOT_FOUND",
        "bucket",
    )
    .await;
    rejected(
        &node,
        c.put_key("vol1", "nope", "k", 1),
        Code::NotFound,
        "BUCKET_NOT_FOUND",
        "bucket",
    )
    .await;
    rejected(
        &node,
        c.put_key("vol1", "bkt1", "", 1),
        Code::InvalidArgument,
        "INVALID_KEY",
        "key",
    )
    .await;
    rejected(
        &node,
        c.put_key("vol1", "bkt1", &"k".repeat(1025), 1),
        Code::InvalidArgument,
        "KEY_TOO_LONG",
        "key",
    )
    .await;
    // 1024 bytes of multi-byte UTF-8 is fine; 1026 is not.
    c.put_key("vol1", "bkt1", &"é".repeat(512), 1)
        .await
        .unwrap();
    rejected(
        &node,
        c.put_key("vol1", "bkt1", &"é".repeat(513), 1),
        Code::InvalidArgument,
        "KEY_TOO_LONG",
        "key",
    )
    .await;
    rejected(
        &node,
        c.put_key_with(PutKeyRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "x".into(),
            etag: "not-an-etag".into(),
            ..Default::default()
        }),
        Code::InvalidArgument,
        "INVALID_ETAG",
        "etag",
    )
    .await;
    rejected(
        &node,
        c.put_key("vol1", "fso", "k", 1),
        Code::FailedPrecondition,
        "UNSUPPORTED_BUCKET_LAYOUT",
        "bucket",
    )
    .await;
    rejected(
        &node,
        c.delete_key("vol1", "bkt1", "nope"),
        Code::NotFound,
        "KEY_NOT_FOUND",
        "key",
    )
    .await;
    rejected(
        &node,
        c.create_volume_with(CreateVolumeRequest {
            name: "vol9".into(),
            metadata: [("k".to_string(), "v".repeat(3000))].into(),
            ..Default::default()
        }),
        Code::InvalidArgument,
        "METADATA_TOO_LARGE",
        "metadata",
    )
    .await;
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_write_is_applied_once() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    // Two sends of one logical write (same client id and seq), as after a lost reply.
    let header = c.next_header();
    let req = PutKeyRequest {
        header: Some(header.clone()),
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: "k".into(),
        size: 1,
        ..Default::default()
    };
    let mut raw = om_client::v1::ozone_manager_client::OzoneManagerClient::connect(format!(
        "http://{}",
        node.endpoint()
    ))
    .await
    .unwrap();
    let first = raw.put_key(req.clone()).await.unwrap().into_inner();
    let second = raw.put_key(req.clone()).await.unwrap().into_inner();
    assert_eq!(first, second, "the retry gets the original response");
    let k = c.lookup_key("vol1", "bkt1", "k").await.unwrap();
    assert_eq!(Some(k.clone()), first.key);
    // A new sequence number is a new write.
    let mut req3 = req;
    req3.header = Some(c.next_header());
    let third = raw.put_key(req3).await.unwrap().into_inner();
    assert!(third.key.unwrap().update_id > k.update_id);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_cache_entries_expire_after_their_ttl() {
    let node = TestNode::start_with(|a| a.retry_cache_ttl_s = Some(1)).await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let req = PutKeyRequest {
        header: Some(c.next_header()),
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: "k".into(),
        size: 1,
        ..Default::default()
    };
    let mut raw = om_client::v1::ozone_manager_client::OzoneManagerClient::connect(format!(
        "http://{}",
        node.endpoint()
    ))
    .await
    .unwrap();
    let first = raw.put_key(req.clone()).await.unwrap().into_inner();
    // Within the TTL the same request is answered from the cache...
    assert_eq!(raw.put_key(req.clone()).await.unwrap().into_inner(), first);
    // ...and once the leader has expired it, the same request is a new write.
    let again = om_tests::wait_for(
        std::time::Duration::from_secs(15),
        "retry-cache expiry",
        || {
            let (mut raw, req, first) = (raw.clone(), req.clone(), first.clone());
            async move {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                let r = raw.put_key(req).await.ok()?.into_inner();
                (r != first).then_some(r)
            }
        },
    )
    .await;
    assert!(again.key.unwrap().update_id > first.key.unwrap().update_id);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_linearizable_by_default_and_stale_on_request() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    let stale = OmClient::new(
        &[node.endpoint()],
        om_client::ClientOptions {
            stale_reads: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(stale.get_volume("vol1").await.unwrap().name, "vol1");
    let lease = OmClient::new(
        &[node.endpoint()],
        om_client::ClientOptions {
            lease_reads: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(lease.get_volume("vol1").await.unwrap().name, "vol1");
    let status = c.cluster_status().await.unwrap();
    assert_eq!(status.role, "leader");
    assert!(status.applied_index >= 2);
    assert_eq!(status.members.len(), 1);
    assert!(status.members[0].voter);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health_are_served() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    let _ = c.get_volume("nope").await;
    let get = |path: &str| {
        let addr = node.node.http_addr;
        let path = path.to_string();
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        }
    };
    let h = get("/healthz").await;
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
    let r = get("/readyz").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let m = get("/metrics").await;
    assert!(m.contains("om_grpc_requests_total"), "{m}");
    assert!(m.contains("method=\"GetVolume\""), "{m}");
    assert!(m.contains("code=\"NotFound\""), "{m}");
    assert!(m.contains("om_raft_applied_index"), "{m}");
    assert!(m.contains("om_raft_term"), "{m}");
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_keys_reports_each_key() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for k in ["a", "b", "c"] {
        c.put_key("vol1", "bkt1", k, 10).await.unwrap();
    }
    let keys: Vec<String> = ["a", "missing", "c", "a"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let r = c.delete_keys("vol1", "bkt1", &keys).await.unwrap();
    let got: Vec<(&str, &str)> = r
        .iter()
        .map(|o| (o.key.as_str(), o.reason.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("a", ""),
            ("missing", "KEY_NOT_FOUND"),
            ("c", ""),
            ("a", "")
        ]
    );
    let left = c
        .list_keys(ListKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(left.keys.len(), 1);
    assert_eq!(left.keys[0].name, "b");
    let b = c.get_bucket("vol1", "bkt1").await.unwrap();
    assert_eq!((b.key_count, b.used_bytes), (1, 10));

    rejected(
        &node,
        c.delete_keys("vol1", "bkt1", &[]),
        Code::InvalidArgument,
        "INVALID_KEY_COUNT",
        "keys",
    )
    .await;
    let too_many: Vec<String> = (0..1001).map(|i| format!("k{i}")).collect();
    rejected(
        &node,
        c.delete_keys("vol1", "bkt1", &too_many),
        Code::InvalidArgument,
        "INVALID_KEY_COUNT",
        "keys",
    )
    .await;
    rejected(
        &node,
        c.delete_keys("vol1", "bkt1", &["ok".to_string(), String::new()]),
        Code::InvalidArgument,
        "INVALID_KEY",
        "keys",
    )
    .await;
    rejected(
        &node,
        c.delete_keys("vol1", "nope", &["b".to_string()]),
        Code::NotFound,
        "BUCKET_NOT_FOUND",
        "bucket",
    )
    .await;
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_moves_a_key_and_refuses_conflicts() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let a = c.put_key("vol1", "bkt1", "a", 10).await.unwrap();
    c.put_key("vol1", "bkt1", "taken", 1).await.unwrap();
    let moved = c.rename_key("vol1", "bkt1", "a", "dir/a2").await.unwrap();
    assert_eq!(moved.name, "dir/a2");
    assert_eq!(moved.object_id, a.object_id, "same object, new name");
    assert_eq!(moved.blocks, a.blocks);
    assert!(moved.update_id > a.update_id);
    assert_eq!(c.lookup_key("vol1", "bkt1", "dir/a2").await.unwrap(), moved);
    assert!(c.lookup_key("vol1", "bkt1", "a").await.is_err());
    assert_eq!(c.get_bucket("vol1", "bkt1").await.unwrap().key_count, 2);

    rejected(
        &node,
        c.rename_key("vol1", "bkt1", "dir/a2", "taken"),
        Code::AlreadyExists,
        "KEY_ALREADY_EXISTS",
        "to",
    )
    .await;
    rejected(
        &node,
        c.rename_key("vol1", "bkt1", "nope", "x"),
        Code::NotFound,
        "KEY_NOT_FOUND",
        "from",
    )
    .await;
    rejected(
        &node,
        c.rename_key("vol1", "bkt1", "taken", "taken"),
        Code::InvalidArgument,
        "SAME_NAME",
        "to",
    )
    .await;
    rejected(
        &node,
        c.rename_key("vol1", "bkt1", "taken", ""),
        Code::InvalidArgument,
        "INVALID_KEY",
        "to",
    )
    .await;
    node.node.shutdown().await;
}
