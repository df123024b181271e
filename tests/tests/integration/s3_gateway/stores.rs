//! Blocks in an S3 bucket (`--blocks s3://BUCKET/PREFIX`, through
//! `object_store`). The bucket is served by a first gateway (blocks in a
//! directory); a second gateway, over the same om members and another
//! volume, keeps its blocks there. So the S3 store is exercised against a
//! real S3 endpoint: signed requests, single PUTs, multipart uploads for
//! blocks past the part size, ranged GETs and deletes.

use super::*;

fn sizes(listed: &[aws_sdk_s3::types::Object]) -> Vec<(String, i64)> {
    listed
        .iter()
        .map(|o| (o.key().unwrap().to_string(), o.size().unwrap()))
        .collect()
}

/// The block objects under `prefix` in the first gateway's bucket.
pub(super) async fn block_objects(a: &Client, prefix: &str) -> Vec<(String, i64)> {
    objects_in(a, "blockstore", prefix).await
}

/// The objects under `prefix` in `bucket`, with their sizes.
async fn objects_in(a: &Client, bucket: &str, prefix: &str) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let r = a
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .unwrap();
        out.extend(sizes(r.contents()));
        token = r.next_continuation_token().map(str::to_string);
        if token.is_none() {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn blocks_live_in_an_s3_bucket() {
    // The first gateway does not reclaim: om's deleted-blocks table is the
    // cluster's, and the blocks to free here are the second gateway's.
    let env = env_opts(|_| {}, &["--reclaim", "false"]).await;
    let ops = env.om(OPS);
    let (alice_key, alice_secret) = env.s3_secret(OPS, "alice").await;
    // The second gateway's volume, made by an admin (the gateways may not
    // make volumes).
    env.volume_for_alice("s3b").await;
    let a = s3(&env.url, &alice_key, &alice_secret);
    a.create_bucket().bucket("blockstore").send().await.unwrap();

    let store_env = block_store_env(&env.url, &alice_key, &alice_secret);
    // A bucket that does not exist, or a wrong secret: the gateway does not
    // start, and says why.
    for (bucket, secret) in [
        ("s3://nosuch/b", alice_secret.as_str()),
        ("s3://blockstore/b", "wrong"),
    ] {
        let mut envs = store_env.to_vec();
        envs.push(("AWS_SECRET_ACCESS_KEY", secret));
        let listen = format!("127.0.0.1:{}", free_port());
        let mut cmd = env.gateway_command(&listen, &["--blocks", bucket, "--volume", "s3b"], &envs);
        cmd.stdout(Stdio::piped());
        let run = tokio::task::spawn_blocking(move || cmd.output());
        let out = tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("a refused start in time")
            .unwrap()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{bucket}: {said}");
        assert!(said.contains("opening the block store"), "{bucket}: {said}");
        assert!(!said.contains(secret) || secret == "wrong", "{said}");
    }
    assert!(block_objects(&a, "b").await.is_empty());

    let (mut gateway, url) = env
        .start_gateway(
            &[
                "--blocks",
                "s3://blockstore/b1",
                "--volume",
                "s3b",
                "--reclaim-seconds",
                "1",
            ],
            &store_env,
        )
        .await;
    let c = s3(&url, &alice_key, &alice_secret);
    c.create_bucket().bucket("photos").send().await.unwrap();

    // One block of 4 KiB (a single PUT) and one of 12 MiB (a multipart
    // upload into the bucket: past the store's 8 MiB part size).
    let small: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let big: Vec<u8> = (0..(12u32 << 20) + 123).map(|i| (i % 241) as u8).collect();
    for (k, v) in [("small", &small), ("big", &big)] {
        let r = c
            .put_object()
            .bucket("photos")
            .key(k)
            .body(ByteStream::from(v.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.e_tag().unwrap(), format!("\"{}\"", md5_hex(v)));
        assert_eq!(body(&c, "photos", k).await, *v);
    }
    let from = (8 << 20) - 5;
    let r = c
        .get_object()
        .bucket("photos")
        .key("big")
        .range(format!("bytes={from}-{}", from + 99))
        .send()
        .await
        .unwrap();
    let got = r.body.collect().await.unwrap().into_bytes();
    assert_eq!(got[..], big[from..from + 100]);

    // A multipart object, and a copy (metadata only: no new block).
    let up = c
        .create_multipart_upload()
        .bucket("photos")
        .key("parts")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let parts = [vec![3u8; 5 << 20], vec![4u8; 1000]];
    let done = upload_parts(&c, "photos", "parts", id, &parts).await;
    c.complete_multipart_upload()
        .bucket("photos")
        .key("parts")
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(body(&c, "photos", "parts").await, parts.concat());
    let copied = c
        .copy_object()
        .bucket("photos")
        .key("small-copy")
        .copy_source("photos/small")
        .send()
        .await
        .unwrap();
    assert_eq!(
        copied.copy_object_result().unwrap().e_tag().unwrap(),
        format!("\"{}\"", md5_hex(&small))
    );

    // Every block om allocated is an object named by its id, holding
    // exactly the block's bytes; nothing else is in the bucket.
    let mut expect = Vec::new();
    for k in ["small", "big", "parts"] {
        let info = ops.lookup_key("s3b", "photos", k).await.unwrap();
        for b in &info.blocks {
            let name = format!("b1/{:02x}/{:016x}", b.block_id & 0xff, b.block_id);
            expect.push((name, b.length as i64));
        }
    }
    expect.sort();
    let mut stored = block_objects(&a, "b1/").await;
    stored.sort();
    assert_eq!(stored, expect);
    let total: i64 = stored.iter().map(|(_, n)| n).sum();
    assert_eq!(total as usize, small.len() + big.len() + (5 << 20) + 1000);

    // A block gone from the store is an error answer, not a broken body.
    let info = ops.lookup_key("s3b", "photos", "big").await.unwrap();
    let first = info.blocks[0].block_id;
    a.delete_object()
        .bucket("blockstore")
        .key(format!("b1/{:02x}/{first:016x}", first & 0xff))
        .send()
        .await
        .unwrap();
    let (why, status) = code(c.get_object().bucket("photos").key("big").send().await);
    assert_eq!((why.as_str(), status), ("InternalError", 500));

    // Deleting through the gateway frees its blocks from the bucket: om
    // lists them, the gateway deletes the objects, then acknowledges.
    for k in ["small", "small-copy", "big", "parts"] {
        c.delete_object()
            .bucket("photos")
            .key(k)
            .send()
            .await
            .unwrap();
    }
    wait_for(Duration::from_secs(60), "the bucket emptied", || {
        let (a, ops) = (&a, &ops);
        async move {
            let left = block_objects(a, "b1/").await;
            let pending = ops
                .list_deleted_blocks(ListDeletedBlocksRequest::default())
                .await
                .ok()?;
            (left.is_empty() && pending.entries.is_empty()).then_some(())
        }
    })
    .await;
    c.delete_bucket().bucket("photos").send().await.unwrap();
    let _ = gateway.kill();
    let _ = gateway.wait();
}

/// `omctl backup copy`: backups taken from the cluster go to an S3 bucket
/// (served by a gateway) objects first, each once, manifests last; a second
/// copy sends only what is new; `--keep 1` leaves the newest backup and
/// only the objects it names; what is there matches the local backup byte
/// for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backups_are_copied_off_site_with_retention() {
    let env = env().await;
    let ops = env.om(OPS);
    ops.create_volume("bvol", "").await.unwrap();
    ops.create_bucket("bvol", "bbkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let (key, secret) = env.s3_secret(OPS, "alice").await;
    let a = s3(&env.url, &key, &secret);
    a.create_bucket().bucket("offsite").send().await.unwrap();
    let dest = env.dir.path().join("backups");
    let omctl = |args: &[&str]| {
        let out = Command::new(om_tests::binary("omctl"))
            .args(["--endpoint", &env.addrs[0].grpc, "--timeout", "60"])
            .args(args)
            .env("OM_TOKEN", OPS)
            .env("AWS_ENDPOINT", &env.url)
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", &key)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "omctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let d = dest.to_str().unwrap();
    let first = omctl(&["backup", "create", "--quiet", d])
        .trim()
        .to_string();
    // `omctl backup copy` to the bucket, with `more` flags, as JSON.
    let copy = |more: &[&str]| -> serde_json::Value {
        let mut args = vec!["--output", "json", "backup", "copy", d, "s3://offsite/om"];
        args.extend_from_slice(more);
        serde_json::from_str(&omctl(&args)).unwrap()
    };
    let copied = copy(&[]);
    assert_eq!(copied["copied"], serde_json::json!([first]));
    let sent = copied["objects"].as_u64().unwrap();
    assert!(sent > 0);
    let listed = objects_in(&a, "offsite", "om/").await;
    let local = om_client::backup::read_manifest(&dest.join(&first)).unwrap();
    for f in &local.files {
        let name = format!("om/objects/{}", f.sha256);
        assert!(
            listed
                .iter()
                .any(|(k, n)| *k == name && *n as u64 == f.bytes),
            "{name} missing or of another size: {listed:?}"
        );
    }
    let got = a
        .get_object()
        .bucket("offsite")
        .key(format!("om/{first}/manifest.json"))
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert_eq!(
        got.as_ref(),
        std::fs::read(dest.join(&first).join("manifest.json")).unwrap()
    );

    // Again, with nothing new: nothing sent.
    let again = copy(&[]);
    assert_eq!(again["copied"], serde_json::json!([]));
    assert_eq!(again["objects"], 0);

    // A second backup after more writes, copied with --keep 1: only its
    // own new files are sent, and the first backup goes.
    for i in 0..50 {
        ops.put_key("bvol", "bbkt", &format!("k{i}"), 1)
            .await
            .unwrap();
    }
    let second = omctl(&["backup", "create", "--quiet", d])
        .trim()
        .to_string();
    let kept = copy(&["--keep", "1"]);
    assert_eq!(kept["copied"], serde_json::json!([second]));
    assert_eq!(kept["removed"], serde_json::json!([first]));
    assert!(kept["reused"].as_u64().unwrap() > 0, "{kept}");
    let listed = objects_in(&a, "offsite", "om/").await;
    let newest = om_client::backup::read_manifest(&dest.join(&second)).unwrap();
    let names: std::collections::BTreeSet<String> = newest
        .files
        .iter()
        .map(|f| format!("om/objects/{}", f.sha256))
        .chain([format!("om/{second}/manifest.json")])
        .collect();
    let there: std::collections::BTreeSet<String> = listed.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(there, names, "only the kept backup's files stay");
}
