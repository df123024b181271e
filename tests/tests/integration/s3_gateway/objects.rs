//! Every S3 operation the gateway serves, through a real S3 client.

use super::*;

/// Every operation a gateway serves, through a real S3 client: buckets,
/// objects with metadata, ranged and conditional reads and writes, both
/// listings, copies that reuse the ETag, batch deletes, multipart uploads,
/// versioning with delete markers, tagging, presigned URLs, and refused
/// signatures and keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_s3_client_works_end_to_end_through_the_gateway() {
    let env = env().await;
    let ops = env.om(OPS);
    let alice_om = env.om(ALICE);
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);

    // Buckets.
    c.create_bucket().bucket("photos").send().await.unwrap();
    c.head_bucket().bucket("photos").send().await.unwrap();
    let names: Vec<String> = c
        .list_buckets()
        .send()
        .await
        .unwrap()
        .buckets()
        .iter()
        .filter_map(|b| b.name().map(str::to_string))
        .collect();
    assert_eq!(names, vec!["photos"]);
    assert_eq!(code(c.head_bucket().bucket("nope").send().await).1, 404);
    // om sees alice, impersonated by the gateway.
    let bucket = ops.get_bucket("s3v", "photos").await.unwrap();
    assert!(bucket.name == "photos");
    let audited = |l: &String| {
        l.contains("\"principal\":\"gw\"")
            && l.contains("\"impersonated_user\":\"alice\"")
            && l.contains("\"operation\":\"CreateBucket\"")
    };
    for _ in 0..100 {
        if env.audit_lines().iter().any(audited) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        env.audit_lines().iter().any(audited),
        "{:#?}",
        env.audit_lines()
    );

    // Objects with metadata and content type.
    let data = b"hello, om".repeat(1000);
    let put = c
        .put_object()
        .bucket("photos")
        .key("2026/a.txt")
        .content_type("text/plain")
        .metadata("camera", "x100")
        .body(ByteStream::from(data.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(
        put.e_tag(),
        Some(format!("\"{}\"", md5_hex(&data)).as_str())
    );
    let got = c
        .get_object()
        .bucket("photos")
        .key("2026/a.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(got.content_type(), Some("text/plain"));
    assert_eq!(
        got.metadata()
            .and_then(|m| m.get("camera"))
            .map(String::as_str),
        Some("x100")
    );
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().to_vec(),
        data
    );
    let head = c
        .head_object()
        .bucket("photos")
        .key("2026/a.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(data.len() as i64));

    // Ranged reads.
    let part = c
        .get_object()
        .bucket("photos")
        .key("2026/a.txt")
        .range("bytes=2-5")
        .send()
        .await
        .unwrap();
    assert_eq!(part.content_length(), Some(4));
    assert_eq!(
        part.body.collect().await.unwrap().into_bytes().as_ref(),
        b"llo,"
    );
    let (why, status) = code(
        c.get_object()
            .bucket("photos")
            .key("2026/a.txt")
            .range("bytes=100000-")
            .send()
            .await,
    );
    assert_eq!((why.as_str(), status), ("InvalidRange", 416));

    // Conditional writes and a missing key.
    let (why, status) = code(
        c.put_object()
            .bucket("photos")
            .key("2026/a.txt")
            .if_none_match("*")
            .body(ByteStream::from_static(b"x"))
            .send()
            .await,
    );
    assert_eq!((why.as_str(), status), ("PreconditionFailed", 412));
    assert_eq!(body(&c, "photos", "2026/a.txt").await, data);
    let (why, status) = code(c.get_object().bucket("photos").key("nope").send().await);
    assert_eq!((why.as_str(), status), ("NoSuchKey", 404));

    // Listings (V2 with a delimiter, V1 with a marker).
    for k in ["2026/b.txt", "2025/c.txt", "top.txt"] {
        c.put_object()
            .bucket("photos")
            .key(k)
            .body(ByteStream::from_static(b"."))
            .send()
            .await
            .unwrap();
    }
    let v2 = c
        .list_objects_v2()
        .bucket("photos")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    let prefixes: Vec<&str> = v2
        .common_prefixes()
        .iter()
        .filter_map(|p| p.prefix())
        .collect();
    assert_eq!(prefixes, vec!["2025/", "2026/"]);
    let keys: Vec<&str> = v2.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, vec!["top.txt"]);
    let page = c
        .list_objects_v2()
        .bucket("photos")
        .prefix("2026/")
        .max_keys(1)
        .send()
        .await
        .unwrap();
    assert_eq!(page.is_truncated(), Some(true));
    let next = c
        .list_objects_v2()
        .bucket("photos")
        .prefix("2026/")
        .continuation_token(page.next_continuation_token().unwrap())
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = next.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, vec!["2026/b.txt"]);
    let v1 = c
        .list_objects()
        .bucket("photos")
        .marker("2026/a.txt")
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = v1.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, vec!["2026/b.txt", "top.txt"]);

    // A copy reuses the source's ETag and shares its blocks.
    let blocks_before = env.block_files().len();
    let copied = c
        .copy_object()
        .bucket("photos")
        .key("copy.txt")
        .copy_source("photos/2026/a.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(
        copied.copy_object_result().and_then(|r| r.e_tag()),
        Some(format!("\"{}\"", md5_hex(&data)).as_str())
    );
    assert_eq!(env.block_files().len(), blocks_before);
    assert_eq!(body(&c, "photos", "copy.txt").await, data);

    // Batch deletes (their blocks are reclaimed below).
    let mut freed = Vec::new();
    for k in ["2025/c.txt", "top.txt"] {
        let info = ops.lookup_key("s3v", "photos", k).await.unwrap();
        freed.extend(info.blocks.iter().map(|b| env.block_path(b.block_id)));
    }
    assert!(!freed.is_empty() && freed.iter().all(|p| p.exists()));
    let del = c
        .delete_objects()
        .bucket("photos")
        .delete(
            Delete::builder()
                .objects(
                    ObjectIdentifier::builder()
                        .key("2025/c.txt")
                        .build()
                        .unwrap(),
                )
                .objects(ObjectIdentifier::builder().key("top.txt").build().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(del.deleted().len(), 2);
    assert!(del.errors().is_empty());
    c.delete_object()
        .bucket("photos")
        .key("copy.txt")
        .send()
        .await
        .unwrap();
    let left: Vec<String> = c
        .list_objects_v2()
        .bucket("photos")
        .send()
        .await
        .unwrap()
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_string))
        .collect();
    assert_eq!(left, vec!["2026/a.txt", "2026/b.txt"]);

    // Multipart: two parts of 5 MiB and a last one of 1 byte.
    let up = c
        .create_multipart_upload()
        .bucket("photos")
        .key("big.bin")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap().to_string();
    let parts: Vec<Vec<u8>> = vec![vec![1u8; 5 << 20], vec![2u8; 5 << 20], vec![3u8]];
    let done = upload_parts(&c, "photos", "big.bin", &id, &parts).await;
    for (d, p) in done.iter().zip(&parts) {
        assert_eq!(d.e_tag(), Some(format!("\"{}\"", md5_hex(p)).as_str()));
    }
    let listed = c
        .list_parts()
        .bucket("photos")
        .key("big.bin")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.parts().len(), 3);
    let uploads = c
        .list_multipart_uploads()
        .bucket("photos")
        .send()
        .await
        .unwrap();
    assert_eq!(uploads.uploads().len(), 1);
    let fin = c
        .complete_multipart_upload()
        .bucket("photos")
        .key("big.bin")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert!(fin.e_tag().unwrap().ends_with("-3\""), "{:?}", fin.e_tag());
    let whole = body(&c, "photos", "big.bin").await;
    assert_eq!(whole.len(), (10 << 20) + 1);
    assert_eq!(whole, parts.concat());
    let tail = c
        .get_object()
        .bucket("photos")
        .key("big.bin")
        .range("bytes=5242878-5242881")
        .send()
        .await
        .unwrap();
    assert_eq!(
        tail.body.collect().await.unwrap().into_bytes().as_ref(),
        [1, 1, 2, 2]
    );
    // An aborted upload is gone.
    let up = c
        .create_multipart_upload()
        .bucket("photos")
        .key("gone.bin")
        .send()
        .await
        .unwrap();
    c.abort_multipart_upload()
        .bucket("photos")
        .key("gone.bin")
        .upload_id(up.upload_id().unwrap())
        .send()
        .await
        .unwrap();
    let (why, _) = code(
        c.list_parts()
            .bucket("photos")
            .key("gone.bin")
            .upload_id(up.upload_id().unwrap())
            .send()
            .await,
    );
    assert_eq!(why, "NoSuchUpload");

    // Tagging.
    c.put_object_tagging()
        .bucket("photos")
        .key("2026/a.txt")
        .tagging(
            Tagging::builder()
                .tag_set(Tag::builder().key("k").value("v").build().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let tags = c
        .get_object_tagging()
        .bucket("photos")
        .key("2026/a.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(tags.tag_set().len(), 1);
    assert_eq!(tags.tag_set()[0].key(), "k");
    // GET and HEAD say how many tags the object has.
    let got = c
        .get_object()
        .bucket("photos")
        .key("2026/a.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(got.tag_count(), Some(1));
    let head = c
        .head_object()
        .bucket("photos")
        .key("2026/a.txt")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(60)).unwrap())
        .await
        .unwrap();
    let (status, text) = http_request("HEAD", head.uri()).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("\r\nx-amz-tagging-count: 1\r\n"),
        "{text}"
    );

    // Versioning and delete markers.
    c.create_bucket().bucket("docs").send().await.unwrap();
    set_versioning(&c, "docs", BucketVersioningStatus::Enabled).await;
    let v1 = c
        .put_object()
        .bucket("docs")
        .key("d")
        .body(ByteStream::from_static(b"one"))
        .send()
        .await
        .unwrap();
    c.put_object()
        .bucket("docs")
        .key("d")
        .body(ByteStream::from_static(b"two"))
        .send()
        .await
        .unwrap();
    let marker = c
        .delete_object()
        .bucket("docs")
        .key("d")
        .send()
        .await
        .unwrap();
    assert_eq!(marker.delete_marker(), Some(true));
    let (why, status) = code(c.get_object().bucket("docs").key("d").send().await);
    assert_eq!((why.as_str(), status), ("NoSuchKey", 404));
    let old = c
        .get_object()
        .bucket("docs")
        .key("d")
        .version_id(v1.version_id().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(
        old.body.collect().await.unwrap().into_bytes().as_ref(),
        b"one"
    );
    let versions = c
        .list_object_versions()
        .bucket("docs")
        .send()
        .await
        .unwrap();
    assert_eq!(versions.versions().len(), 2);
    assert_eq!(versions.delete_markers().len(), 1);

    // Presigned URLs: valid until they expire.
    let presigned = c
        .get_object()
        .bucket("photos")
        .key("2026/b.txt")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(2)).unwrap())
        .await
        .unwrap();
    let (status, text) = http_get(presigned.uri()).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("\r\n\r\n."), "{text}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, text) = http_get(presigned.uri()).await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("AccessDenied"), "{text}");

    // A failed upload leaves nothing behind: its write session is aborted,
    // so the bucket it went to can be deleted at once; so can a bucket
    // whose only content is an upload in progress (S3 aborts it).
    c.create_bucket().bucket("scratch").send().await.unwrap();
    let (why, status) = code(
        c.put_object()
            .bucket("scratch")
            .key("k")
            .content_md5("1B2M2Y8AsgTpgAmY7PhCfg==")
            .body(ByteStream::from_static(b"not empty"))
            .send()
            .await,
    );
    assert_eq!((why.as_str(), status), ("BadDigest", 400));
    c.create_multipart_upload()
        .bucket("scratch")
        .key("pending")
        .send()
        .await
        .unwrap();
    c.delete_bucket().bucket("scratch").send().await.unwrap();
    assert_eq!(code(c.head_bucket().bucket("scratch").send().await).1, 404);

    // Refused: a wrong secret, an unknown key, no credentials.
    let wrong = s3(&env.url, &key, &"x".repeat(40));
    let (why, status) = code(wrong.list_buckets().send().await);
    assert_eq!((why.as_str(), status), ("SignatureDoesNotMatch", 403));
    let unknown = s3(&env.url, "OMAAAAAAAAAAAAAAAAAA", &secret);
    let (why, status) = code(unknown.list_buckets().send().await);
    assert_eq!((why.as_str(), status), ("InvalidAccessKeyId", 403));
    let (status, _) = http_get(&format!("{}/photos", env.url)).await;
    assert_eq!(status, 403);
    // Alice may not touch a bucket of the volume she was given no rights on.
    ops.create_bucket("s3v", "private", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let (why, status) = code(c.list_objects_v2().bucket("private").send().await);
    assert_eq!((why.as_str(), status), ("AccessDenied", 403));

    // A revoked key stops working within the gateway's cache time (1 s).
    alice_om
        .revoke_s3_secret(RevokeS3SecretRequest {
            access_key: key.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (why, status) = code(c.list_buckets().send().await);
    assert_eq!((why.as_str(), status), ("InvalidAccessKeyId", 403));

    // The secret never reached a log.
    assert!(!env.audit_lines().iter().any(|l| l.contains(&secret)));

    // Deleted objects' blocks are reclaimed: om lists them, the gateway
    // deletes them, then acknowledges.
    wait_for(
        Duration::from_secs(30),
        "reclaimed blocks acknowledged",
        || {
            let (ops, freed) = (&ops, &freed);
            async move {
                let r = ops
                    .list_deleted_blocks(ListDeletedBlocksRequest::default())
                    .await
                    .ok()?;
                (r.entries.is_empty() && freed.iter().all(|p| !p.exists())).then_some(())
            }
        },
    )
    .await;
    drop(env);
}
