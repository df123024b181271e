//! Writing keys through sessions, server-side copies, multipart uploads and
//! block reclamation, end to end through gRPC on a single node: each
//! operation, its failure cases, and proof that a rejected request leaves
//! every table unchanged.

use std::collections::BTreeSet;

use md5::{Digest, Md5};
use om_client::OmClient;
use om_client::v1::*;
use om_tests::{TestNode, assert_err, deleted_block_ids as deleted_blocks, rejected};
use tonic::Code;

const MIB: u64 = 1024 * 1024;
const BLOCK: u64 = 256 * MIB;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn md5_of(s: &str) -> String {
    hex(&Md5::digest(s.as_bytes()))
}

async fn setup(node: &TestNode) -> OmClient {
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c
}

fn ids(blocks: &[BlockInfo]) -> Vec<u64> {
    blocks.iter().map(|b| b.block_id).collect()
}

fn open_req(key: &str, blocks: u32) -> OpenKeyRequest {
    OpenKeyRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        blocks,
        ..Default::default()
    }
}

fn commit_req(key: &str, session: u64, blocks: Vec<BlockInfo>, size: u64) -> CommitKeyRequest {
    CommitKeyRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        session_id: session,
        size,
        blocks,
        etag: md5_of(key),
        ..Default::default()
    }
}

fn written(blocks: &[BlockInfo], size: u64) -> Vec<BlockInfo> {
    let mut off = 0;
    let mut out = Vec::new();
    for b in blocks {
        if off >= size {
            break;
        }
        let len = BLOCK.min(size - off);
        out.push(BlockInfo {
            block_id: b.block_id,
            offset: off,
            length: len,
        });
        off += len;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_open_allocate_and_commit() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    // Two writers of one key, each with its own session.
    let s1 = c.open_key(open_req("a/obj", 1)).await.unwrap();
    let s2 = c.open_key(open_req("a/obj", 0)).await.unwrap();
    assert_ne!(s1.session_id, s2.session_id);
    assert_eq!(s1.blocks.len(), 1);
    let more = c
        .allocate_block(AllocateBlockRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "a/obj".into(),
            session_id: s1.session_id,
            count: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(more.blocks.len(), 2);
    let mut alloc = s1.blocks.clone();
    alloc.extend(more.blocks.clone());

    let listed = c
        .list_open_keys(ListOpenKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            prefix: "a/".into(),
            max_keys: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.total, 2);
    assert_eq!(listed.keys.len(), 1);
    assert!(listed.truncated);
    assert_eq!(listed.keys[0].allocated_blocks, ids(&alloc));
    let rest = c
        .list_open_keys(ListOpenKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            prefix: "a/".into(),
            continuation_token: listed.next_continuation_token,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(rest.keys.len(), 1);
    assert_eq!(rest.keys[0].session_id, s2.session_id);
    assert!(!rest.truncated);
    assert_eq!(
        rest.scan.unwrap().seeks,
        1,
        "a continuation page is one seek"
    );

    // Bad commits are refused and change nothing.
    let size = BLOCK + 10;
    let good = written(&alloc, size);
    let mut gap = good.clone();
    gap[1].offset += 1;
    rejected(
        &node,
        c.commit_key(commit_req("a/obj", s1.session_id, gap, size)),
        Code::InvalidArgument,
        "INVALID_BLOCKS",
        "blocks",
    )
    .await;
    rejected(
        &node,
        c.commit_key(commit_req("a/obj", s1.session_id, good.clone(), size + 1)),
        Code::InvalidArgument,
        "SIZE_MISMATCH",
        "size",
    )
    .await;
    let mut stolen = good.clone();
    stolen.push(BlockInfo {
        block_id: 999_999,
        offset: size,
        length: 1,
    });
    rejected(
        &node,
        c.commit_key(commit_req("a/obj", s1.session_id, stolen, size + 1)),
        Code::InvalidArgument,
        "INVALID_BLOCKS",
        "blocks",
    )
    .await;
    rejected(
        &node,
        c.commit_key(commit_req("a/obj", 12345, vec![], 0)),
        Code::FailedPrecondition,
        "SESSION_NOT_FOUND",
        "session_id",
    )
    .await;
    let mut cond = commit_req("a/obj", s1.session_id, good.clone(), size);
    cond.conditions = Some(KeyConditions {
        if_match: md5_of("x"),
        ..Default::default()
    });
    rejected(
        &node,
        c.commit_key(cond),
        Code::NotFound,
        "KEY_NOT_FOUND",
        "conditions.if_match",
    )
    .await;

    // Commit with create-only: the third allocated block was not used.
    let mut req = commit_req("a/obj", s1.session_id, good.clone(), size);
    req.conditions = Some(KeyConditions {
        if_none_match_any: true,
        ..Default::default()
    });
    let k = c.commit_key(req).await.unwrap().key.unwrap();
    assert_eq!(k.size, size);
    assert_eq!(ids(&k.blocks), ids(&alloc[..2]));
    assert_eq!(k.etag, md5_of("a/obj"));
    assert_eq!(deleted_blocks(&c).await, vec![alloc[2].block_id]);
    // The session is gone; committing it again is refused.
    rejected(
        &node,
        c.commit_key(commit_req("a/obj", s1.session_id, good.clone(), size)),
        Code::FailedPrecondition,
        "SESSION_NOT_FOUND",
        "session_id",
    )
    .await;

    // The second writer's conditions are checked against the new version.
    let mut req = commit_req("a/obj", s2.session_id, vec![], 0);
    req.conditions = Some(KeyConditions {
        if_none_match_any: true,
        ..Default::default()
    });
    rejected(
        &node,
        c.commit_key(req.clone()),
        Code::FailedPrecondition,
        "IF_NONE_MATCH_FAILED",
        "conditions.if_none_match_any",
    )
    .await;
    req.conditions = Some(KeyConditions {
        if_match: format!("\"{}\"", md5_of("other")),
        ..Default::default()
    });
    rejected(
        &node,
        c.commit_key(req.clone()),
        Code::FailedPrecondition,
        "IF_MATCH_FAILED",
        "conditions.if_match",
    )
    .await;
    req.conditions = Some(KeyConditions {
        expected_update_id: k.update_id + 1,
        ..Default::default()
    });
    rejected(
        &node,
        c.commit_key(req.clone()),
        Code::FailedPrecondition,
        "UPDATE_ID_MISMATCH",
        "conditions.expected_update_id",
    )
    .await;
    req.conditions = Some(KeyConditions {
        if_match: format!("\"{}\"", k.etag.to_uppercase()),
        expected_update_id: k.update_id,
        ..Default::default()
    });
    let k2 = c.commit_key(req).await.unwrap().key.unwrap();
    assert_eq!(k2.size, 0);
    // Replacing the key freed its two blocks.
    let mut freed = deleted_blocks(&c).await;
    freed.sort();
    assert_eq!(freed, ids(&alloc));
    let b = c.get_bucket("vol1", "bkt1").await.unwrap();
    assert_eq!((b.key_count, b.used_bytes, b.open_key_count), (1, 0, 0));
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_sessions_expire_and_free_their_blocks() {
    let node = TestNode::start_with(|a| a.open_key_ttl_s = Some(1)).await;
    let c = setup(&node).await;
    let s = c.open_key(open_req("left", 3)).await.unwrap();
    let b = c.get_bucket("vol1", "bkt1").await.unwrap();
    assert_eq!(b.open_key_count, 1);
    // Deleting the bucket is refused while a session holds blocks.
    rejected(
        &node,
        c.delete_bucket("vol1", "bkt1"),
        Code::FailedPrecondition,
        "BUCKET_NOT_EMPTY",
        "name",
    )
    .await;
    om_tests::wait_for(
        std::time::Duration::from_secs(15),
        "open key expiry",
        || async {
            let b = c.get_bucket("vol1", "bkt1").await.ok()?;
            (b.open_key_count == 0).then_some(())
        },
    )
    .await;
    let mut freed = deleted_blocks(&c).await;
    freed.sort();
    assert_eq!(freed, ids(&s.blocks));
    assert_err(
        c.commit_key(commit_req("left", s.session_id, vec![], 0))
            .await,
        Code::FailedPrecondition,
        "SESSION_NOT_FOUND",
        "session_id",
    );
    c.delete_bucket("vol1", "bkt1").await.unwrap();
    node.node.shutdown().await;
}

fn copy_req(src: &str, dst: &str) -> CopyKeyRequest {
    CopyKeyRequest {
        src_volume: "vol1".into(),
        src_bucket: "bkt1".into(),
        src_key: src.into(),
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: dst.into(),
        ..Default::default()
    }
}

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

fn part_req(key: &str, upload: &str, n: u32, size: u64, tag: &str) -> CommitPartRequest {
    CommitPartRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        upload_id: upload.into(),
        part_number: n,
        size,
        etag: md5_of(tag),
        ..Default::default()
    }
}

fn complete_req(key: &str, upload: &str, parts: &[(u32, &str)]) -> CompleteMultipartUploadRequest {
    CompleteMultipartUploadRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        upload_id: upload.into(),
        parts: parts
            .iter()
            .map(|(n, tag)| CompletedPart {
                part_number: *n,
                etag: md5_of(tag),
            })
            .collect(),
        ..Default::default()
    }
}

fn initiate(key: &str) -> InitiateMultipartUploadRequest {
    InitiateMultipartUploadRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        content_type: "video/mp4".into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_upload_completes_with_the_aws_etag() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    let up = c
        .initiate_multipart_upload(initiate("movie"))
        .await
        .unwrap()
        .upload
        .unwrap();
    let id = up.upload_id.clone();
    assert_eq!(id.len(), 16);
    let p1 = c
        .commit_part(part_req("movie", &id, 1, 5 * MIB, "one-old"))
        .await
        .unwrap()
        .part
        .unwrap();
    // Uploading part 1 again replaces it and frees the old part's blocks.
    let p1b = c
        .commit_part(part_req("movie", &id, 1, 6 * MIB, "one"))
        .await
        .unwrap()
        .part
        .unwrap();
    assert_eq!(deleted_blocks(&c).await, ids(&p1.blocks));
    let p2 = c
        .commit_part(part_req("movie", &id, 2, 1, "two"))
        .await
        .unwrap()
        .part
        .unwrap();
    let p3 = c
        .commit_part(part_req("movie", &id, 3, 5 * MIB, "three"))
        .await
        .unwrap()
        .part
        .unwrap();
    let p4 = c
        .commit_part(part_req("movie", &id, 4, 7, "four"))
        .await
        .unwrap()
        .part
        .unwrap();

    // ListParts pages with an exclusive part-number marker.
    let l = c
        .list_parts(ListPartsRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "movie".into(),
            upload_id: id.clone(),
            max_parts: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        l.parts.iter().map(|p| p.part_number).collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(l.truncated);
    assert_eq!(l.next_part_number_marker, 2);
    let l2 = c
        .list_parts(ListPartsRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "movie".into(),
            upload_id: id.clone(),
            part_number_marker: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        l2.parts.iter().map(|p| p.part_number).collect::<Vec<_>>(),
        [3, 4]
    );
    assert!(!l2.truncated);
    assert_eq!(l2.scan.unwrap().seeks, 1);

    // Failures, each leaving everything as it was.
    rejected(
        &node,
        c.complete_multipart_upload(complete_req(
            "movie",
            &id,
            &[(1, "one"), (2, "two"), (4, "four")],
        )),
        Code::InvalidArgument,
        "ENTITY_TOO_SMALL",
        "parts",
    )
    .await;
    rejected(
        &node,
        c.complete_multipart_upload(complete_req("movie", &id, &[(1, "one-old"), (3, "three")])),
        Code::InvalidArgument,
        "INVALID_PART",
        "parts",
    )
    .await;
    rejected(
        &node,
        c.complete_multipart_upload(complete_req("movie", &id, &[(1, "one"), (5, "x")])),
        Code::InvalidArgument,
        "INVALID_PART",
        "parts",
    )
    .await;
    rejected(
        &node,
        c.complete_multipart_upload(complete_req("movie", &id, &[(3, "three"), (1, "one")])),
        Code::InvalidArgument,
        "INVALID_PART_ORDER",
        "parts",
    )
    .await;
    rejected(
        &node,
        c.complete_multipart_upload(complete_req("movie", "00000000000000ff", &[(1, "one")])),
        Code::NotFound,
        "UPLOAD_NOT_FOUND",
        "upload_id",
    )
    .await;
    rejected(
        &node,
        c.commit_part(part_req("movie", "nothex", 1, 1, "x")),
        Code::InvalidArgument,
        "INVALID_UPLOAD_ID",
        "upload_id",
    )
    .await;
    rejected(
        &node,
        c.commit_part(part_req("movie", &id, 10_001, 1, "x")),
        Code::InvalidArgument,
        "INVALID_PART_NUMBER",
        "part_number",
    )
    .await;
    rejected(
        &node,
        c.commit_part(part_req("other", &id, 1, 1, "x")),
        Code::NotFound,
        "UPLOAD_NOT_FOUND",
        "upload_id",
    )
    .await;

    // Complete with parts 1, 3, 4 (2 is left out): AWS's ETag rule over the
    // listed parts only, and part 2's blocks go to reclamation.
    let k = c
        .complete_multipart_upload(complete_req(
            "movie",
            &id,
            &[(1, "one"), (3, "three"), (4, "four")],
        ))
        .await
        .unwrap()
        .key
        .unwrap();
    let mut cat = Vec::new();
    for t in ["one", "three", "four"] {
        cat.extend_from_slice(&Md5::digest(t.as_bytes()));
    }
    assert_eq!(k.etag, format!("{}-3", hex(&Md5::digest(&cat))));
    assert_eq!(k.size, 6 * MIB + 5 * MIB + 7);
    assert_eq!(k.content_type, "video/mp4");
    let mut want_blocks = ids(&p1b.blocks);
    want_blocks.extend(ids(&p3.blocks));
    want_blocks.extend(ids(&p4.blocks));
    assert_eq!(ids(&k.blocks), want_blocks);
    let offsets: Vec<u64> = k.blocks.iter().map(|b| b.offset).collect();
    assert_eq!(offsets, [0, 6 * MIB, 11 * MIB]);
    let mut want_freed = ids(&p1.blocks);
    want_freed.extend(ids(&p2.blocks));
    assert_eq!(deleted_blocks(&c).await, want_freed);
    // The upload is gone.
    assert_err(
        c.list_parts(ListPartsRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "movie".into(),
            upload_id: id.clone(),
            ..Default::default()
        })
        .await,
        Code::NotFound,
        "UPLOAD_NOT_FOUND",
        "upload_id",
    );
    assert_eq!(c.lookup_key("vol1", "bkt1", "movie").await.unwrap(), k);
    node.node.shutdown().await;
}

async fn list_up(
    c: &OmClient,
    prefix: &str,
    delim: &str,
    km: &str,
    um: &str,
    max: u32,
) -> ListMultipartUploadsResponse {
    c.list_multipart_uploads(ListMultipartUploadsRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        prefix: prefix.into(),
        delimiter: delim.into(),
        key_marker: km.into(),
        upload_id_marker: um.into(),
        max_uploads: max,
        ..Default::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_frees_parts_and_uploads_list_with_s3_markers() {
    let node = TestNode::start_with(|a| a.min_part_size = Some(1)).await;
    let c = setup(&node).await;
    let mut uploads = Vec::new();
    for key in ["a", "b/1", "b/2", "c", "c", "d"] {
        let u = c
            .initiate_multipart_upload(initiate(key))
            .await
            .unwrap()
            .upload
            .unwrap();
        uploads.push((key.to_string(), u.upload_id));
    }
    let names = |r: &ListMultipartUploadsResponse| {
        r.uploads
            .iter()
            .map(|u| format!("{}@{}", u.key, u.upload_id))
            .collect::<Vec<_>>()
    };
    let all: Vec<String> = uploads.iter().map(|(k, u)| format!("{k}@{u}")).collect();
    assert_eq!(names(&list_up(&c, "", "", "", "", 0).await), all);
    // Key marker alone: after every upload of that key.
    assert_eq!(names(&list_up(&c, "", "", "c", "", 0).await), all[5..]);
    // With an upload-id marker: after that upload of that key.
    assert_eq!(
        names(&list_up(&c, "", "", "c", &uploads[3].1, 0).await),
        all[4..]
    );
    // Delimiter roll-up, and the next markers of a truncated page.
    let r = list_up(&c, "", "/", "", "", 2).await;
    assert_eq!(names(&r), all[..1]);
    assert_eq!(r.common_prefixes, ["b/"]);
    assert!(r.truncated);
    assert_eq!(
        (r.next_key_marker.as_str(), r.next_upload_id_marker.as_str()),
        ("b/", "")
    );
    let r2 = list_up(&c, "", "/", &r.next_key_marker, "", 2).await;
    assert_eq!(names(&r2), all[3..5]);
    assert_eq!(r2.next_key_marker, "c");
    assert_eq!(r2.next_upload_id_marker, uploads[4].1);
    let r3 = list_up(
        &c,
        "",
        "/",
        &r2.next_key_marker,
        &r2.next_upload_id_marker,
        2,
    )
    .await;
    assert_eq!(names(&r3), all[5..]);
    assert!(!r3.truncated);
    assert_eq!(names(&list_up(&c, "b/", "", "", "", 0).await), all[1..3]);

    // Abort frees every part; the upload is gone; a second abort is NOT_FOUND.
    let (key, id) = uploads[0].clone();
    let p = c
        .commit_part(part_req(&key, &id, 1, 3 * BLOCK, "p"))
        .await
        .unwrap()
        .part
        .unwrap();
    let q = c
        .commit_part(part_req(&key, &id, 9, 1, "q"))
        .await
        .unwrap()
        .part
        .unwrap();
    rejected(
        &node,
        c.delete_bucket("vol1", "bkt1"),
        Code::FailedPrecondition,
        "BUCKET_NOT_EMPTY",
        "name",
    )
    .await;
    let abort = AbortMultipartUploadRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.clone(),
        upload_id: id.clone(),
        ..Default::default()
    };
    c.abort_multipart_upload(abort.clone()).await.unwrap();
    let mut want = ids(&p.blocks);
    want.extend(ids(&q.blocks));
    assert_eq!(deleted_blocks(&c).await, want);
    rejected(
        &node,
        c.abort_multipart_upload(abort),
        Code::NotFound,
        "UPLOAD_NOT_FOUND",
        "upload_id",
    )
    .await;
    // The parts' range is empty after the range deletion.
    let dump = node.dump();
    assert!(!dump.keys().any(|(t, _)| *t == "parts"));
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclamation_hands_out_blocks_until_acknowledged() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    let mut all = BTreeSet::new();
    for i in 0..5 {
        let k = c
            .put_key("vol1", "bkt1", &format!("k{i}"), BLOCK + 1)
            .await
            .unwrap();
        all.extend(ids(&k.blocks));
        c.delete_key("vol1", "bkt1", &format!("k{i}"))
            .await
            .unwrap();
    }
    let page = c
        .list_deleted_blocks(ListDeletedBlocksRequest {
            max_entries: 3,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.entries.len(), 3);
    assert!(page.truncated);
    // Reading does not consume: the same page comes back until acknowledged.
    let again = c
        .list_deleted_blocks(ListDeletedBlocksRequest {
            max_entries: 3,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(again.entries, page.entries);
    let ack_ids: Vec<String> = page.entries.iter().map(|e| e.id.clone()).collect();
    let acked = c
        .ack_deleted_blocks(AckDeletedBlocksRequest {
            ids: ack_ids.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(acked.acknowledged, 3);
    // A repeated acknowledgement is harmless.
    let again = c
        .ack_deleted_blocks(AckDeletedBlocksRequest {
            ids: ack_ids,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(again.acknowledged, 0);
    let rest: BTreeSet<u64> = deleted_blocks(&c).await.into_iter().collect();
    let handed: BTreeSet<u64> = page
        .entries
        .iter()
        .flat_map(|e| e.blocks.iter().map(|b| b.block_id))
        .collect();
    assert_eq!(rest.union(&handed).copied().collect::<BTreeSet<_>>(), all);
    assert!(rest.is_disjoint(&handed));
    rejected(
        &node,
        c.ack_deleted_blocks(AckDeletedBlocksRequest {
            ids: vec!["zz".into()],
            ..Default::default()
        }),
        Code::InvalidArgument,
        "INVALID_ENTRY_ID",
        "ids",
    )
    .await;
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_writes_are_answered_from_the_retry_cache() {
    use om_client::v1::ozone_manager_client::OzoneManagerClient;
    let node = TestNode::start().await;
    let c = setup(&node).await;
    let mut raw = OzoneManagerClient::connect(format!("http://{}", node.endpoint()))
        .await
        .unwrap();
    let header = |seq| {
        Some(WriteHeader {
            client_id: "gateway-7".into(),
            seq,
        })
    };
    c.put_key_with(PutKeyRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: "src".into(),
        size: BLOCK + 1,
        etag: md5_of("src"),
        ..Default::default()
    })
    .await
    .unwrap();
    // CopyKey twice with one header: one copy, the same answer.
    let req = CopyKeyRequest {
        header: header(1),
        ..copy_req("src", "dst")
    };
    let first = raw.copy_key(req.clone()).await.unwrap().into_inner();
    let dump = node.dump();
    let again = raw.copy_key(req).await.unwrap().into_inner();
    assert_eq!(first, again);
    assert!(dump == node.dump(), "a retried copy changed the tables");
    // A retried commit returns the original result although its session is gone.
    let s = c.open_key(open_req("k", 1)).await.unwrap();
    let commit = CommitKeyRequest {
        header: header(2),
        ..commit_req("k", s.session_id, written(&s.blocks, 5), 5)
    };
    let first = raw.commit_key(commit.clone()).await.unwrap().into_inner();
    let dump = node.dump();
    assert_eq!(raw.commit_key(commit).await.unwrap().into_inner(), first);
    assert!(dump == node.dump(), "a retried commit changed the tables");
    // Likewise a completed upload.
    let up = c
        .initiate_multipart_upload(initiate("mp"))
        .await
        .unwrap()
        .upload
        .unwrap();
    c.commit_part(part_req("mp", &up.upload_id, 1, 10, "p"))
        .await
        .unwrap();
    let complete = CompleteMultipartUploadRequest {
        header: header(3),
        ..complete_req("mp", &up.upload_id, &[(1, "p")])
    };
    let first = raw
        .complete_multipart_upload(complete.clone())
        .await
        .unwrap()
        .into_inner();
    let again = raw
        .complete_multipart_upload(complete)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first, again);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_and_reclamation_continuations_are_one_seek() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    for i in 0..6 {
        c.initiate_multipart_upload(initiate(&format!("k{i}")))
            .await
            .unwrap();
        c.put_key("vol1", "bkt1", &format!("x{i}"), 1)
            .await
            .unwrap();
        c.delete_key("vol1", "bkt1", &format!("x{i}"))
            .await
            .unwrap();
    }
    let r = list_up(&c, "", "", "", "", 3).await;
    let r2 = list_up(&c, "", "", &r.next_key_marker, &r.next_upload_id_marker, 3).await;
    assert_eq!(r2.uploads[0].key, "k3");
    assert_eq!(r2.scan.unwrap().seeks, 1);
    let p = c
        .list_deleted_blocks(ListDeletedBlocksRequest {
            max_entries: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    let p2 = c
        .list_deleted_blocks(ListDeletedBlocksRequest {
            after: p.next_after,
            max_entries: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(p2.entries.len(), 2);
    assert_eq!(p2.scan.unwrap().seeks, 1);
    node.node.shutdown().await;
}

/// ListMultipartUploads over every page size, prefix and delimiter equals a
/// naive roll-up of the sorted (key, upload id) list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_listings_equal_a_naive_scan() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    let keys = [
        "a", "a/b", "a/b/c", "a/c", "a/c", "a/d/e", "ab", "b", "b/x/y", "b/x/z", "c/",
    ];
    let mut all: Vec<(String, String)> = Vec::new();
    for k in keys {
        let u = c
            .initiate_multipart_upload(initiate(k))
            .await
            .unwrap()
            .upload
            .unwrap();
        all.push((k.to_string(), u.upload_id));
    }
    all.sort();
    for prefix in ["", "a", "a/", "b/x/", "zz"] {
        for delim in ["", "/", "x"] {
            // Naive: entries and common prefixes in order, each listed once.
            let mut want: Vec<String> = Vec::new();
            for (k, u) in &all {
                let Some(rest) = k.strip_prefix(prefix) else {
                    continue;
                };
                let item = match (!delim.is_empty()).then(|| rest.find(delim)).flatten() {
                    Some(i) => format!("P:{prefix}{}", &rest[..i + delim.len()]),
                    None => format!("U:{k}@{u}"),
                };
                if want.last() != Some(&item) {
                    want.push(item);
                }
            }
            for max in [1, 2, 3, 100] {
                let mut got = Vec::new();
                let (mut km, mut um) = (String::new(), String::new());
                loop {
                    let r = list_up(&c, prefix, delim, &km, &um, max).await;
                    // Uploads and prefixes interleave by name on a page.
                    let mut page: Vec<(String, String)> = r
                        .uploads
                        .iter()
                        .map(|u| (u.key.clone(), format!("U:{}@{}", u.key, u.upload_id)))
                        .chain(
                            r.common_prefixes
                                .iter()
                                .map(|p| (p.clone(), format!("P:{p}"))),
                        )
                        .collect();
                    page.sort();
                    got.extend(page.into_iter().map(|(_, v)| v));
                    if !r.truncated {
                        break;
                    }
                    km = r.next_key_marker;
                    um = r.next_upload_id_marker;
                }
                assert_eq!(got, want, "prefix {prefix:?} delimiter {delim:?} max {max}");
            }
        }
    }
    // Key markers anywhere, inside common prefixes included, with and without
    // an upload-id marker: an item is listed only when it sorts after the
    // marker (S3), and a common prefix sorts before every key under it.
    let mid_id = all[all.len() / 2].1.clone();
    let mut markers: Vec<String> = all.iter().map(|(k, _)| k.clone()).collect();
    markers.extend(
        [
            "a/", "a/b/", "a/bb", "a/c/", "b/", "b/x/", "b/x/yy", "c", "0",
        ]
        .map(String::from),
    );
    for prefix in ["", "a/", "b/"] {
        for delim in ["", "/", "x"] {
            for km in &markers {
                for um in [String::new(), mid_id.clone()] {
                    let mut want: Vec<String> = Vec::new();
                    for (k, u) in &all {
                        let Some(rest) = k.strip_prefix(prefix) else {
                            continue;
                        };
                        let item = match (!delim.is_empty()).then(|| rest.find(delim)).flatten() {
                            Some(i) => {
                                let cp = format!("{prefix}{}", &rest[..i + delim.len()]);
                                (cp.as_str() > km.as_str()).then(|| format!("P:{cp}"))
                            }
                            None => (k > km || (k == km && !um.is_empty() && *u > um))
                                .then(|| format!("U:{k}@{u}")),
                        };
                        if let Some(item) = item
                            && want.last() != Some(&item)
                        {
                            want.push(item);
                        }
                    }
                    let r = list_up(&c, prefix, delim, km, &um, 1000).await;
                    let mut got: Vec<(String, String)> = r
                        .uploads
                        .iter()
                        .map(|u| (u.key.clone(), format!("U:{}@{}", u.key, u.upload_id)))
                        .chain(
                            r.common_prefixes
                                .iter()
                                .map(|p| (p.clone(), format!("P:{p}"))),
                        )
                        .collect();
                    got.sort();
                    let got: Vec<String> = got.into_iter().map(|(_, v)| v).collect();
                    assert_eq!(
                        got, want,
                        "prefix {prefix:?} delimiter {delim:?} key marker {km:?} upload marker {um:?}"
                    );
                }
            }
        }
    }
    node.node.shutdown().await;
}
