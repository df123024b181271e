//! Server-side copies: shared blocks, digests and conditions.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_share_blocks_until_the_last_holder_goes() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    c.create_bucket("vol1", "bkt2", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let src = c
        .put_key_with(PutKeyRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "src".into(),
            size: 2 * BLOCK,
            etag: md5_of("src"),
            content_type: "text/plain".into(),
            metadata: [("a".to_string(), "1".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // The plain MD5 ETag is reused; blocks are shared, not allocated.
    let cp = c
        .copy_key(copy_req("src", "copy"))
        .await
        .unwrap()
        .key
        .unwrap();
    assert_eq!(cp.etag, src.etag);
    assert_eq!(cp.blocks, src.blocks);
    assert_eq!(cp.metadata, src.metadata);
    assert_eq!(cp.content_type, "text/plain");
    let mut other = copy_req("src", "copy2");
    other.bucket = "bkt2".into();
    other.metadata_directive = MetadataDirective::Replace as i32;
    other.metadata = [("b".to_string(), "2".to_string())].into();
    let cp2 = c.copy_key(other).await.unwrap().key.unwrap();
    assert_eq!(cp2.metadata.get("b").map(String::as_str), Some("2"));
    assert!(cp2.content_type.is_empty());

    // Deleting the source and one copy frees nothing: a copy still holds them.
    c.delete_key("vol1", "bkt1", "src").await.unwrap();
    c.delete_key("vol1", "bkt2", "copy2").await.unwrap();
    assert!(deleted_blocks(&c).await.is_empty());
    // Overwriting the last holder frees them, once.
    c.put_key("vol1", "bkt1", "copy", 1).await.unwrap();
    let mut freed = deleted_blocks(&c).await;
    freed.sort();
    assert_eq!(freed, ids(&src.blocks));

    // One batch that deletes a key and its copy frees each block exactly once.
    let k = c
        .put_key_with(PutKeyRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "x".into(),
            size: BLOCK + 1,
            etag: md5_of("x"),
            ..Default::default()
        })
        .await
        .unwrap();
    c.copy_key(copy_req("x", "y")).await.unwrap();
    c.copy_key(copy_req("x", "z")).await.unwrap();
    let before = deleted_blocks(&c).await.len();
    c.delete_keys("vol1", "bkt1", &["x".into(), "y".into()])
        .await
        .unwrap();
    assert_eq!(deleted_blocks(&c).await.len(), before);
    c.delete_keys("vol1", "bkt1", &["z".into()]).await.unwrap();
    let after = deleted_blocks(&c).await;
    assert_eq!(after.len(), before + 2);
    assert_eq!(after[before..].to_vec(), ids(&k.blocks));
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_needs_a_digest_for_multipart_sources_and_checks_conditions() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    let mp = c
        .put_key_with(PutKeyRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "mp".into(),
            size: 10,
            etag: format!("{}-3", md5_of("x")),
            ..Default::default()
        })
        .await
        .unwrap();
    let none = c.put_key("vol1", "bkt1", "noetag", 10).await.unwrap();
    assert!(none.etag.is_empty());
    for src in ["mp", "noetag"] {
        rejected(
            &node,
            c.copy_key(copy_req(src, "dst")),
            Code::FailedPrecondition,
            "CONTENT_DIGEST_REQUIRED",
            "content_md5",
        )
        .await;
    }
    let mut with = copy_req("mp", "dst");
    with.content_md5 = md5_of("content").to_uppercase();
    let d = c.copy_key(with).await.unwrap().key.unwrap();
    assert_eq!(d.etag, md5_of("content"));
    assert_eq!(d.blocks, mp.blocks);

    // Source conditions, evaluated at apply.
    let plain = c
        .put_key_with(PutKeyRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "plain".into(),
            size: 1,
            etag: md5_of("plain"),
            ..Default::default()
        })
        .await
        .unwrap();
    let t = plain.modification_time_ms;
    let cases: Vec<(CopyKeyRequest, &str)> = vec![
        (
            CopyKeyRequest {
                src_if_match: md5_of("no"),
                ..copy_req("plain", "d2")
            },
            "src_if_match",
        ),
        (
            CopyKeyRequest {
                src_if_none_match: md5_of("plain"),
                ..copy_req("plain", "d2")
            },
            "src_if_none_match",
        ),
        (
            CopyKeyRequest {
                src_if_modified_since_ms: t,
                ..copy_req("plain", "d2")
            },
            "src_if_modified_since_ms",
        ),
        (
            CopyKeyRequest {
                src_if_unmodified_since_ms: t - 1,
                ..copy_req("plain", "d2")
            },
            "src_if_unmodified_since_ms",
        ),
    ];
    for (req, field) in cases {
        rejected(
            &node,
            c.copy_key(req),
            Code::FailedPrecondition,
            "SOURCE_CONDITION_FAILED",
            field,
        )
        .await;
    }
    // A true if-match overrides a false if-unmodified-since (S3's rule).
    c.copy_key(CopyKeyRequest {
        src_if_match: md5_of("plain"),
        src_if_unmodified_since_ms: t - 1,
        src_if_modified_since_ms: t - 1,
        ..copy_req("plain", "d2")
    })
    .await
    .unwrap();
    // Destination conditions and bad input.
    rejected(
        &node,
        c.copy_key(CopyKeyRequest {
            conditions: Some(KeyConditions {
                if_none_match_any: true,
                ..Default::default()
            }),
            ..copy_req("plain", "d2")
        }),
        Code::FailedPrecondition,
        "IF_NONE_MATCH_FAILED",
        "conditions.if_none_match_any",
    )
    .await;
    rejected(
        &node,
        c.copy_key(copy_req("plain", "plain")),
        Code::InvalidArgument,
        "COPY_TO_ITSELF",
        "key",
    )
    .await;
    rejected(
        &node,
        c.copy_key(copy_req("missing", "d3")),
        Code::NotFound,
        "KEY_NOT_FOUND",
        "src_key",
    )
    .await;
    rejected(
        &node,
        c.copy_key(CopyKeyRequest {
            content_md5: "abc".into(),
            ..copy_req("mp", "d3")
        }),
        Code::InvalidArgument,
        "INVALID_ETAG",
        "content_md5",
    )
    .await;
    rejected(
        &node,
        c.copy_key(CopyKeyRequest {
            bucket: "nobkt".into(),
            ..copy_req("plain", "d3")
        }),
        Code::NotFound,
        "BUCKET_NOT_FOUND",
        "bucket",
    )
    .await;
    // Copying onto itself with REPLACE changes metadata and keeps the blocks.
    let same = c
        .copy_key(CopyKeyRequest {
            metadata_directive: MetadataDirective::Replace as i32,
            content_type: "image/png".into(),
            ..copy_req("plain", "plain")
        })
        .await
        .unwrap()
        .key
        .unwrap();
    assert_eq!(same.blocks, plain.blocks);
    assert_eq!(same.content_type, "image/png");
    assert!(deleted_blocks(&c).await.is_empty());
    node.node.shutdown().await;
}
