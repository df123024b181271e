//! Keys written in steps: open, allocate, commit, and sessions that expire.

use super::*;

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
    // If-Match: * needs the key to exist.
    let mut cond = commit_req("a/obj", s1.session_id, good.clone(), size);
    cond.conditions = Some(KeyConditions {
        if_match_any: true,
        ..Default::default()
    });
    rejected(
        &node,
        c.commit_key(cond),
        Code::NotFound,
        "KEY_NOT_FOUND",
        "conditions.if_match_any",
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
    // If-None-Match with the current ETag fails; a malformed one is refused.
    req.conditions = Some(KeyConditions {
        if_none_match: format!("\"{}\"", k.etag),
        ..Default::default()
    });
    rejected(
        &node,
        c.commit_key(req.clone()),
        Code::FailedPrecondition,
        "IF_NONE_MATCH_FAILED",
        "conditions.if_none_match",
    )
    .await;
    req.conditions = Some(KeyConditions {
        if_none_match: "x".repeat(1025),
        ..Default::default()
    });
    rejected(
        &node,
        c.commit_key(req.clone()),
        Code::InvalidArgument,
        "INVALID_ETAG",
        "conditions.if_none_match",
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
        // Both pass: the key exists, and has another ETag (a value that is
        // no ETag at all never matches).
        if_match_any: true,
        if_none_match: "badetag".into(),
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
