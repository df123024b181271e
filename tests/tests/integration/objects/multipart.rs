//! Multipart uploads: the AWS ETag, aborts and upload listings with S3's markers.

use super::*;

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
