//! The gateway across an om leader kill, lifecycle expiration set through S3,
//! and a gateway on an S3 block store killed in the middle of an upload.

use super::*;

/// A multipart upload loses no part when om's leader is killed between two
/// parts (the gateway's om client finds the new leader, and a retried write
/// is answered once), and a lifecycle rule set through S3 expires objects
/// (om's scanner, with a 1-second day).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn multipart_survives_a_leader_kill_and_lifecycle_expires_objects() {
    let mut env = env_with(|args| {
        args.lifecycle_day_ms = Some(1_000);
        args.lifecycle_interval_ms = Some(200);
    })
    .await;
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);
    c.create_bucket().bucket("mpu").send().await.unwrap();

    let up = c
        .create_multipart_upload()
        .bucket("mpu")
        .key("obj")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap().to_string();
    let parts: Vec<Vec<u8>> = vec![vec![7u8; 5 << 20], vec![8u8; 1000]];
    let mut done = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        if i == 1 {
            // Kill the leader between the parts.
            let leader = env.members.leader().await;
            env.members.stop(leader).await;
        }
        let n = i as i32 + 1;
        let r = c
            .upload_part()
            .bucket("mpu")
            .key("obj")
            .upload_id(&id)
            .part_number(n)
            .body(ByteStream::from(p.clone()))
            .send()
            .await
            .unwrap();
        done.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(r.e_tag().unwrap())
                .build(),
        );
    }
    let listed = c
        .list_parts()
        .bucket("mpu")
        .key("obj")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.parts().len(), 2);
    c.complete_multipart_upload()
        .bucket("mpu")
        .key("obj")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(body(&c, "mpu", "obj").await, parts.concat());

    // Lifecycle: objects under tmp/ expire after one (1-second) day.
    use aws_sdk_s3::types::{
        BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule,
        LifecycleRuleFilter,
    };
    for k in ["tmp/a", "tmp/b", "keep/c"] {
        c.put_object()
            .bucket("mpu")
            .key(k)
            .body(ByteStream::from_static(b"x"))
            .send()
            .await
            .unwrap();
    }
    c.put_bucket_lifecycle_configuration()
        .bucket("mpu")
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(
                    LifecycleRule::builder()
                        .id("tmp")
                        .filter(LifecycleRuleFilter::builder().prefix("tmp/").build())
                        .status(ExpirationStatus::Enabled)
                        .expiration(LifecycleExpiration::builder().days(1).build())
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("mpu")
        .send()
        .await
        .unwrap();
    assert_eq!(got.rules().len(), 1);
    wait_for(Duration::from_secs(30), "tmp/ to expire", || {
        let c = &c;
        async move {
            let r = c.list_objects_v2().bucket("mpu").send().await.ok()?;
            let keys: Vec<String> = r
                .contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_string))
                .collect();
            (keys == ["keep/c", "obj"]).then_some(())
        }
    })
    .await;
    drop(env);
}

/// A gateway whose blocks live in an S3 bucket (`--blocks s3://…`, served
/// here by a second gateway) killed (SIGKILL) in the middle of a large
/// upload: the object never appears, the bucket holds no block object for
/// it but an incomplete multipart upload, which no name shows and which
/// the bucket's lifecycle rule AbortIncompleteMultipartUpload removes (the
/// rule docs/s3-gateway.md says to set); a restarted gateway serves what
/// was written before and takes new writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_killed_mid_upload_leaves_what_the_abort_rule_removes() {
    use aws_sdk_s3::types::{
        AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, ExpirationStatus,
        LifecycleRule, LifecycleRuleFilter,
    };
    use tokio::io::AsyncWriteExt;

    use super::stores::block_objects;
    let env = env_opts(
        |args| {
            args.lifecycle_day_ms = Some(1_000);
            args.lifecycle_interval_ms = Some(200);
        },
        &["--reclaim", "false"],
    )
    .await;
    let ops = env.om(OPS);
    let (alice_key, alice_secret) = env.s3_secret(OPS, "alice").await;
    env.volume_for_alice("s3b").await;
    let a = s3(&env.url, &alice_key, &alice_secret);
    a.create_bucket().bucket("blockstore").send().await.unwrap();
    let store_env = block_store_env(&env.url, &alice_key, &alice_secret);
    let args = ["--blocks", "s3://blockstore/b1", "--volume", "s3b"];
    let (mut gateway, url) = env.start_gateway(&args, &store_env).await;
    let c = s3(&url, &alice_key, &alice_secret);
    c.create_bucket().bucket("photos").send().await.unwrap();
    let kept = vec![7u8; 3 << 20];
    c.put_object()
        .bucket("photos")
        .key("kept")
        .body(ByteStream::from(kept.clone()))
        .send()
        .await
        .unwrap();

    // A 40 MiB upload of which 20 MiB are sent (a presigned PUT streamed by
    // hand): the gateway writes the block into the bucket as a multipart
    // upload of 8 MiB parts as the bytes arrive.
    let presigned = c
        .put_object()
        .bucket("photos")
        .key("torn")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(300)).unwrap())
        .await
        .unwrap();
    let rest = presigned.uri().strip_prefix("http://").unwrap().to_string();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n",
        40 << 20
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![1u8; 1 << 20];
    for _ in 0..20 {
        s.write_all(&chunk).await.unwrap();
    }
    let uploads = || {
        let a = &a;
        async move {
            a.list_multipart_uploads()
                .bucket("blockstore")
                .send()
                .await
                .unwrap()
                .uploads()
                .len()
        }
    };
    wait_for(
        Duration::from_secs(60),
        "the block's multipart upload",
        || async move { (uploads().await > 0).then_some(()) },
    )
    .await;
    let _ = gateway.kill();
    let _ = gateway.wait();
    drop(s);

    // Nothing of the torn object is visible, through om or a new gateway;
    // the bucket's block objects are exactly the kept object's.
    let (mut gateway, url) = env.start_gateway(&args, &store_env).await;
    let c = s3(&url, &alice_key, &alice_secret);
    assert_eq!(
        code(c.head_object().bucket("photos").key("torn").send().await).1,
        404
    );
    assert!(ops.lookup_key("s3b", "photos", "torn").await.is_err());
    assert_eq!(body(&c, "photos", "kept").await, kept);
    let info = ops.lookup_key("s3b", "photos", "kept").await.unwrap();
    let expect: Vec<String> = info
        .blocks
        .iter()
        .map(|b| format!("b1/{:02x}/{:016x}", b.block_id & 0xff, b.block_id))
        .collect();
    let stored: Vec<String> = block_objects(&a, "b1/")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(stored, expect);
    assert_eq!(uploads().await, 1, "the torn block's upload is left");

    // The abort rule on the block bucket removes it (a lifecycle day is
    // 1 s here).
    a.put_bucket_lifecycle_configuration()
        .bucket("blockstore")
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(
                    LifecycleRule::builder()
                        .id("abort-torn-blocks")
                        .filter(LifecycleRuleFilter::builder().prefix("").build())
                        .status(ExpirationStatus::Enabled)
                        .abort_incomplete_multipart_upload(
                            AbortIncompleteMultipartUpload::builder()
                                .days_after_initiation(1)
                                .build(),
                        )
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    wait_for(
        Duration::from_secs(60),
        "the abort rule to remove the upload",
        || async move { (uploads().await == 0).then_some(()) },
    )
    .await;
    assert_eq!(block_objects(&a, "b1/").await.len(), expect.len());

    // New writes go on.
    let after = vec![9u8; 10 << 20];
    c.put_object()
        .bucket("photos")
        .key("after")
        .body(ByteStream::from(after.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(body(&c, "photos", "after").await, after);
    let _ = gateway.kill();
    let _ = gateway.wait();
}
