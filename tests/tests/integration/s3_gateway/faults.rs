//! The gateway across an om leader kill, and lifecycle expiration set through S3.

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
