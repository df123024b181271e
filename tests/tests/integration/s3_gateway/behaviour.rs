//! S3 behaviours beyond the basic operations, through a real S3 client:
//! conditional deletes, delete-marker headers on a missing key, a part
//! listed twice, bucket tagging and owners in listings, reads by part
//! number, snapshots under `.snapshot/NAME/`.

use aws_sdk_s3::primitives::DateTime;

use super::*;

/// DeleteObject and DeleteObjects with If-Match (an ETag or `*`),
/// x-amz-if-match-size and x-amz-if-match-last-modified-time: a condition
/// that fails is 412 and deletes nothing; a missing key is a success that
/// adds no delete marker; in a versioned bucket the current entry (a delete
/// marker included) or the version named is what is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conditional_deletes_remove_only_what_they_name() {
    let env = env().await;
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);
    let exists = |b: &'static str, k: &'static str| {
        let c = c.clone();
        async move { c.head_object().bucket(b).key(k).send().await.is_ok() }
    };

    c.create_bucket().bucket("plain").send().await.unwrap();
    let put = c
        .put_object()
        .bucket("plain")
        .key("k")
        .body(ByteStream::from_static(b"12345"))
        .send()
        .await
        .unwrap();
    let etag = put.e_tag().unwrap().to_string();
    let modified = *c
        .head_object()
        .bucket("plain")
        .key("k")
        .send()
        .await
        .unwrap()
        .last_modified()
        .unwrap();
    let del = || c.delete_object().bucket("plain").key("k");
    assert_eq!(
        code(del().if_match("\"0123\"").send().await),
        ("PreconditionFailed".into(), 412)
    );
    assert_eq!(code(del().if_match_size(4).send().await).1, 412);
    let long_ago = DateTime::from_secs(1_420_070_400);
    assert_eq!(
        code(del().if_match_last_modified_time(long_ago).send().await).1,
        412
    );
    assert!(exists("plain", "k").await, "a failed condition deleted");
    del()
        .if_match(&etag)
        .if_match_size(5)
        .if_match_last_modified_time(modified)
        .send()
        .await
        .unwrap();
    assert!(!exists("plain", "k").await);
    // Gone: a conditional delete of it succeeds, as any delete does.
    del().if_match("*").send().await.unwrap();
    del().if_match("\"0123\"").send().await.unwrap();

    // DeleteObjects: each key's conditions alone.
    for k in ["a", "b"] {
        c.put_object()
            .bucket("plain")
            .key(k)
            .body(ByteStream::from_static(b"xy"))
            .send()
            .await
            .unwrap();
    }
    let id = |k: &str| ObjectIdentifier::builder().key(k);
    let r = c
        .delete_objects()
        .bucket("plain")
        .delete(
            Delete::builder()
                .objects(id("a").e_tag("\"0123\"").build().unwrap())
                .objects(id("b").size(2).build().unwrap())
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let deleted: Vec<&str> = r.deleted().iter().filter_map(|d| d.key()).collect();
    assert_eq!(deleted, ["b"]);
    let failed: Vec<(&str, &str)> = r
        .errors()
        .iter()
        .map(|e| (e.key().unwrap(), e.code().unwrap()))
        .collect();
    assert_eq!(failed, [("a", "PreconditionFailed")]);
    assert!(exists("plain", "a").await && !exists("plain", "b").await);

    // A versioned bucket.
    c.create_bucket().bucket("kept").send().await.unwrap();
    set_versioning(&c, "kept", BucketVersioningStatus::Enabled).await;
    let vdel = || c.delete_object().bucket("kept").key("k");
    // Nothing there: success, and no delete marker is made.
    let r = vdel().if_match("*").send().await.unwrap();
    assert_eq!(r.delete_marker(), None);
    let listed = c
        .list_object_versions()
        .bucket("kept")
        .send()
        .await
        .unwrap();
    assert!(listed.delete_markers().is_empty());
    let put = c
        .put_object()
        .bucket("kept")
        .key("k")
        .body(ByteStream::from_static(b"v1"))
        .send()
        .await
        .unwrap();
    let (v1, etag) = (put.version_id().unwrap(), put.e_tag().unwrap());
    assert_eq!(code(vdel().if_match("\"0123\"").send().await).1, 412);
    let r = vdel().if_match(etag).send().await.unwrap();
    assert_eq!(r.delete_marker(), Some(true));
    // The delete marker is current: an ETag fails on it.
    assert_eq!(code(vdel().if_match(etag).send().await).1, 412);
    // A version named is what its conditions are checked against.
    assert_eq!(
        code(vdel().version_id(v1).if_match_size(3).send().await).1,
        412
    );
    let r = vdel()
        .version_id(v1)
        .if_match_size(2)
        .if_match(etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.version_id(), Some(v1));
    let listed = c
        .list_object_versions()
        .bucket("kept")
        .send()
        .await
        .unwrap();
    assert!(listed.versions().is_empty());
    assert_eq!(listed.delete_markers().len(), 1);
}

/// `x-amz-delete-marker` on a HEAD that found nothing: `true` where a
/// delete marker is the current entry, `false` where nothing is (an
/// unversioned or suspended bucket's deleted key).
async fn delete_marker_header(c: &Client, bucket: &str, key: &str) -> Option<String> {
    match c.head_object().bucket(bucket).key(key).send().await {
        Ok(_) => panic!("{bucket}/{key} is there"),
        Err(SdkError::ServiceError(e)) => e
            .raw()
            .headers()
            .get("x-amz-delete-marker")
            .map(str::to_string),
        Err(e) => panic!("{e:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_key_says_whether_a_delete_marker_stands_there() {
    let env = env().await;
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);
    for (bucket, status) in [
        ("plain", None),
        ("kept", Some(BucketVersioningStatus::Enabled)),
        ("paused", Some(BucketVersioningStatus::Suspended)),
    ] {
        c.create_bucket().bucket(bucket).send().await.unwrap();
        if let Some(s) = status {
            set_versioning(&c, bucket, s).await;
        }
        c.put_object()
            .bucket(bucket)
            .key("k")
            .body(ByteStream::from_static(b"x"))
            .send()
            .await
            .unwrap();
        c.delete_object()
            .bucket(bucket)
            .key("k")
            .send()
            .await
            .unwrap();
        let want = if bucket == "plain" { "false" } else { "true" };
        assert_eq!(
            delete_marker_header(&c, bucket, "k").await.as_deref(),
            Some(want),
            "{bucket}"
        );
        assert_eq!(
            delete_marker_header(&c, bucket, "never").await.as_deref(),
            Some("false"),
            "{bucket}"
        );
    }
}

/// A part uploaded twice (as two uploads of it racing do), both answers
/// listed for it at completion: the one om holds, the upload that finished
/// last, stands; a list naming only parts om does not hold is InvalidPart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_part_listed_twice_completes_with_the_part_held() {
    let env = env().await;
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);
    c.create_bucket().bucket("parts").send().await.unwrap();
    for order in [[0, 1], [1, 0]] {
        let up = c
            .create_multipart_upload()
            .bucket("parts")
            .key("k")
            .send()
            .await
            .unwrap();
        let id = up.upload_id().unwrap();
        let mut etags = Vec::new();
        for body in [&b"BBBBBBBB"[..], &b"AAAAAAAA"[..]] {
            let r = c
                .upload_part()
                .bucket("parts")
                .key("k")
                .upload_id(id)
                .part_number(1)
                .body(ByteStream::from(body.to_vec()))
                .send()
                .await
                .unwrap();
            etags.push(r.e_tag().unwrap().to_string());
        }
        let listed = |tags: &[&str]| {
            let mut m = CompletedMultipartUpload::builder();
            for t in tags {
                m = m.parts(CompletedPart::builder().part_number(1).e_tag(*t).build());
            }
            m.build()
        };
        let complete = |m| {
            c.complete_multipart_upload()
                .bucket("parts")
                .key("k")
                .upload_id(id)
                .multipart_upload(m)
                .send()
        };
        let wrong = complete(listed(&[
            "\"0123456789abcdef0123456789abcdef\"",
            "\"fedcba9876543210fedcba9876543210\"",
        ]))
        .await;
        assert_eq!(code(wrong).0, "InvalidPart");
        complete(listed(&[&etags[order[0]], &etags[order[1]]]))
            .await
            .unwrap();
        assert_eq!(body(&c, "parts", "k").await, b"AAAAAAAA");
    }
}

/// Bucket tagging (Put, Get, Delete; NoSuchTagSet when there are none;
/// S3's limit of 50 tags; only who may write the bucket sets them), and
/// owners in listings: every object is its bucket owner's (S3's default
/// object ownership), named by V1, by V2 with fetch-owner, and by
/// ListObjectVersions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buckets_keep_tags_and_listings_name_owners() {
    let env = env().await;
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);
    let (bkey, bsecret) = env.s3_secret(OPS, "bob").await;
    let bob = s3(&env.url, &bkey, &bsecret);
    c.create_bucket().bucket("tagged").send().await.unwrap();

    let get = || c.get_bucket_tagging().bucket("tagged").send();
    assert_eq!(code(get().await), ("NoSuchTagSet".into(), 404));
    let tagging = |n: usize| {
        let mut t = Tagging::builder();
        for i in 0..n {
            t = t.tag_set(
                Tag::builder()
                    .key(format!("team{i:02}"))
                    .value("storage")
                    .build()
                    .unwrap(),
            );
        }
        t.build().unwrap()
    };
    let put = |t: Tagging| c.put_bucket_tagging().bucket("tagged").tagging(t).send();
    put(tagging(2)).await.unwrap();
    let tags: Vec<(String, String)> = get()
        .await
        .unwrap()
        .tag_set()
        .iter()
        .map(|t| (t.key().to_string(), t.value().to_string()))
        .collect();
    assert_eq!(
        tags,
        [
            ("team00".to_string(), "storage".to_string()),
            ("team01".to_string(), "storage".to_string())
        ]
    );
    assert_eq!(code(put(tagging(51)).await).0, "InvalidTag");
    assert_eq!(
        get().await.unwrap().tag_set().len(),
        2,
        "refused, unchanged"
    );
    let by_bob = bob
        .put_bucket_tagging()
        .bucket("tagged")
        .tagging(tagging(1))
        .send()
        .await;
    assert_eq!(code(by_bob), ("AccessDenied".into(), 403));
    assert_eq!(get().await.unwrap().tag_set().len(), 2);
    c.delete_bucket_tagging()
        .bucket("tagged")
        .send()
        .await
        .unwrap();
    assert_eq!(code(get().await).1, 404);

    // Owners.
    c.put_object()
        .bucket("tagged")
        .key("k")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let v2 = |fetch| {
        c.list_objects_v2()
            .bucket("tagged")
            .fetch_owner(fetch)
            .send()
    };
    let listed = v2(true).await.unwrap();
    let owner = listed.contents()[0].owner().unwrap();
    assert_eq!(
        (owner.id(), owner.display_name()),
        (Some("alice"), Some("alice"))
    );
    assert!(v2(false).await.unwrap().contents()[0].owner().is_none());
    let v1 = c.list_objects().bucket("tagged").send().await.unwrap();
    assert_eq!(v1.contents()[0].owner().unwrap().id(), Some("alice"));
    let versions = c
        .list_object_versions()
        .bucket("tagged")
        .send()
        .await
        .unwrap();
    assert_eq!(versions.versions()[0].owner().unwrap().id(), Some("alice"));
}

/// GET and HEAD by part number: part N of a multipart object (its bytes,
/// its length and the object's part count, the object's ETag), 400
/// InvalidPart past the last; part 1 of an object written whole is all of
/// it; a key whose upload is not complete is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn objects_are_read_by_part_number() {
    let env = env().await;
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);
    c.create_bucket().bucket("parts").send().await.unwrap();
    let up = c
        .create_multipart_upload()
        .bucket("parts")
        .key("mp")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let parts = [vec![1u8; 5 << 20], vec![2u8; 5 << 20], vec![3u8; 1000]];
    let done = CompletedMultipartUpload::builder()
        .set_parts(Some(upload_parts(&c, "parts", "mp", id, &parts).await))
        .build();
    let early = c
        .get_object()
        .bucket("parts")
        .key("mp")
        .part_number(1)
        .send();
    assert_eq!(code(early.await), ("NoSuchKey".into(), 404));
    let made = c
        .complete_multipart_upload()
        .bucket("parts")
        .key("mp")
        .upload_id(id)
        .multipart_upload(done)
        .send()
        .await
        .unwrap();
    for (i, p) in parts.iter().enumerate() {
        let n = i as i32 + 1;
        let got = c
            .get_object()
            .bucket("parts")
            .key("mp")
            .part_number(n)
            .send()
            .await
            .unwrap();
        assert_eq!(got.parts_count(), Some(3));
        assert_eq!(got.e_tag(), made.e_tag());
        assert_eq!(got.content_length(), Some(p.len() as i64));
        let bytes = got.body.collect().await.unwrap().into_bytes();
        assert!(bytes[..] == p[..], "part {n}");
        let head = c
            .head_object()
            .bucket("parts")
            .key("mp")
            .part_number(n)
            .send()
            .await
            .unwrap();
        assert_eq!(
            (head.parts_count(), head.content_length()),
            (Some(3), Some(p.len() as i64))
        );
    }
    let past = c
        .get_object()
        .bucket("parts")
        .key("mp")
        .part_number(4)
        .send();
    assert_eq!(code(past.await), ("InvalidPart".into(), 400));

    c.put_object()
        .bucket("parts")
        .key("whole")
        .body(ByteStream::from_static(b"body"))
        .send()
        .await
        .unwrap();
    let one = c
        .get_object()
        .bucket("parts")
        .key("whole")
        .part_number(1)
        .send()
        .await
        .unwrap();
    assert_eq!(&one.body.collect().await.unwrap().into_bytes()[..], b"body");
    let two = c
        .get_object()
        .bucket("parts")
        .key("whole")
        .part_number(2)
        .send();
    assert_eq!(code(two.await), ("InvalidPart".into(), 400));
}

/// A bucket's snapshot under `.snapshot/NAME/`, as Ozone serves it: GET,
/// HEAD and listings read the bucket as the snapshot shows it while the
/// bucket changes; writes there are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshots_are_read_only_under_the_reserved_prefix() {
    let env = env().await;
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);
    c.create_bucket().bucket("snapb").send().await.unwrap();
    let put = |k: &'static str, body: &'static [u8]| {
        c.put_object()
            .bucket("snapb")
            .key(k)
            .body(ByteStream::from_static(body))
            .send()
    };
    put("a", b"first").await.unwrap();
    put("docs/x", b"x").await.unwrap();
    env.om(ALICE)
        .create_snapshot("s3v", "snapb", "daily")
        .await
        .unwrap();
    put("a", b"second").await.unwrap();
    put("b", b"new").await.unwrap();
    c.delete_object()
        .bucket("snapb")
        .key("docs/x")
        .send()
        .await
        .unwrap();

    assert_eq!(body(&c, "snapb", ".snapshot/daily/a").await, b"first");
    assert_eq!(body(&c, "snapb", ".snapshot/daily/docs/x").await, b"x");
    assert_eq!(body(&c, "snapb", "a").await, b"second");
    let head = c
        .head_object()
        .bucket("snapb")
        .key(".snapshot/daily/a")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(5));
    assert_eq!(
        code(
            c.get_object()
                .bucket("snapb")
                .key(".snapshot/daily/b")
                .send()
                .await
        ),
        ("NoSuchKey".into(), 404)
    );
    let names = |r: &aws_sdk_s3::operation::list_objects_v2::ListObjectsV2Output| {
        r.contents()
            .iter()
            .map(|o| o.key().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let all = c
        .list_objects_v2()
        .bucket("snapb")
        .prefix(".snapshot/daily/")
        .send()
        .await
        .unwrap();
    assert_eq!(names(&all), [".snapshot/daily/a", ".snapshot/daily/docs/x"]);
    let rolled = c
        .list_objects_v2()
        .bucket("snapb")
        .prefix(".snapshot/daily/")
        .delimiter("/")
        .send()
        .await
        .unwrap();
    assert_eq!(names(&rolled), [".snapshot/daily/a"]);
    assert_eq!(
        rolled.common_prefixes()[0].prefix(),
        Some(".snapshot/daily/docs/")
    );
    // Pages of one, continued by token.
    let first = c
        .list_objects_v2()
        .bucket("snapb")
        .prefix(".snapshot/daily/")
        .max_keys(1)
        .send()
        .await
        .unwrap();
    assert_eq!(names(&first), [".snapshot/daily/a"]);
    let next = c
        .list_objects_v2()
        .bucket("snapb")
        .prefix(".snapshot/daily/")
        .continuation_token(first.next_continuation_token().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(names(&next), [".snapshot/daily/docs/x"]);
    // Writes under the prefix are refused and change nothing.
    assert_eq!(
        code(put(".snapshot/daily/a", b"no").await),
        ("AccessDenied".into(), 403)
    );
    assert_eq!(
        code(
            c.delete_object()
                .bucket("snapb")
                .key(".snapshot/daily/a")
                .send()
                .await
        ),
        ("AccessDenied".into(), 403)
    );
    assert_eq!(body(&c, "snapb", ".snapshot/daily/a").await, b"first");
}
