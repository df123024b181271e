//! A multipart object of 5 GiB, declared rather than sent: most parts are
//! committed straight through om (blocks allocated, lengths declared, no
//! bytes written), the last two go through the gateway with real data. Sizes
//! and offsets past 4 GiB must survive every layer: ListParts, the complete,
//! HEAD, listings, ranged and suffix reads that land in the real parts.

use super::*;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// om's block size: an allocated block's capacity.
const BLOCK: u64 = 256 * MIB;

/// Commits part `number` of `size` bytes into blocks om allocates, without
/// writing them: what the data path would commit after writing them.
async fn declare_part(
    om: &OmClient,
    bucket: &str,
    key: &str,
    upload_id: &str,
    number: u32,
    size: u64,
) -> String {
    let open = om
        .open_key(OpenKeyRequest {
            volume: "s3v".into(),
            bucket: bucket.into(),
            key: key.into(),
            blocks: size.div_ceil(BLOCK) as u32,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut blocks = Vec::new();
    let mut offset = 0;
    for b in &open.blocks {
        assert_eq!(b.length, BLOCK, "an allocated block's capacity");
        let length = (size - offset).min(BLOCK);
        blocks.push(BlockInfo {
            block_id: b.block_id,
            offset,
            length,
        });
        offset += length;
    }
    assert_eq!(offset, size);
    let etag = md5_hex(format!("declared part {number}").as_bytes());
    om.commit_part(CommitPartRequest {
        volume: "s3v".into(),
        bucket: bucket.into(),
        key: key.into(),
        upload_id: upload_id.into(),
        part_number: number,
        size,
        etag: etag.clone(),
        session_id: open.session_id,
        blocks,
        ..Default::default()
    })
    .await
    .unwrap();
    format!("\"{etag}\"")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_five_gib_declared_multipart_object() {
    let env = env().await;
    let alice_om = env.om(ALICE);
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);
    c.create_bucket().bucket("big").send().await.unwrap();
    let up = c
        .create_multipart_upload()
        .bucket("big")
        .key("disk.img")
        .content_type("application/octet-stream")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap().to_string();

    // Parts 1-5 declared (4 × 1 GiB, then what makes 5 GiB with the real
    // parts), parts 6 and 7 sent: 5 MiB and 1000 bytes.
    let real = [
        vec![0xa6u8; (5 * MIB) as usize],
        (0..1000u32).map(|i| i as u8).collect::<Vec<u8>>(),
    ];
    let real_len: u64 = real.iter().map(|p| p.len() as u64).sum();
    let declared = [GIB, GIB, GIB, GIB, GIB - real_len];
    let mut etags = Vec::new();
    for (i, size) in declared.iter().enumerate() {
        etags.push(declare_part(&alice_om, "big", "disk.img", &id, i as u32 + 1, *size).await);
    }
    for (i, p) in real.iter().enumerate() {
        let r = c
            .upload_part()
            .bucket("big")
            .key("disk.img")
            .upload_id(&id)
            .part_number(declared.len() as i32 + i as i32 + 1)
            .body(ByteStream::from(p.clone()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.e_tag().unwrap(), format!("\"{}\"", md5_hex(p)));
        etags.push(r.e_tag().unwrap().to_string());
    }

    let listed = c
        .list_parts()
        .bucket("big")
        .key("disk.img")
        .upload_id(&id)
        .send()
        .await
        .unwrap();
    let sizes: Vec<i64> = listed.parts().iter().map(|p| p.size().unwrap()).collect();
    let mut want: Vec<i64> = declared.iter().map(|n| *n as i64).collect();
    want.extend(real.iter().map(|p| p.len() as i64));
    assert_eq!(sizes, want);

    let parts: Vec<CompletedPart> = etags
        .iter()
        .enumerate()
        .map(|(i, e)| {
            CompletedPart::builder()
                .part_number(i as i32 + 1)
                .e_tag(e)
                .build()
        })
        .collect();
    let done = c
        .complete_multipart_upload()
        .bucket("big")
        .key("disk.img")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build(),
        )
        .send()
        .await
        .unwrap();
    // The multipart ETag: MD5 of the parts' binary MD5s, then "-7".
    let mut cat = Vec::new();
    for e in &etags {
        let h = e.trim_matches('"');
        cat.extend(
            (0..h.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()),
        );
    }
    assert_eq!(done.e_tag().unwrap(), format!("\"{}-7\"", md5_hex(&cat)));

    let total = 5 * GIB;
    let head = c
        .head_object()
        .bucket("big")
        .key("disk.img")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(total as i64));
    assert_eq!(head.e_tag(), done.e_tag());
    let listed = c.list_objects_v2().bucket("big").send().await.unwrap();
    assert_eq!(listed.contents()[0].size(), Some(total as i64));

    // Reads past 4 GiB: across the two real parts, and a suffix range.
    let start = total - real_len + 5 * MIB - 10;
    let r = c
        .get_object()
        .bucket("big")
        .key("disk.img")
        .range(format!("bytes={start}-{}", start + 19))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.content_range(),
        Some(format!("bytes {start}-{}/{total}", start + 19).as_str())
    );
    let got = r.body.collect().await.unwrap().into_bytes();
    let mut expect = vec![0xa6u8; 10];
    expect.extend(0..10u8);
    assert_eq!(got[..], expect[..]);
    let r = c
        .get_object()
        .bucket("big")
        .key("disk.img")
        .range("bytes=-1000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.content_length(), Some(1000));
    assert_eq!(
        r.body.collect().await.unwrap().into_bytes()[..],
        real[1][..]
    );
    // Declared parts have no data here: reading one is an error answer.
    let (why, status) = code(
        c.get_object()
            .bucket("big")
            .key("disk.img")
            .range("bytes=0-99")
            .send()
            .await,
    );
    assert_eq!((why.as_str(), status), ("InternalError", 500));

    // Deleted, every block is released and reclaimed.
    c.delete_object()
        .bucket("big")
        .key("disk.img")
        .send()
        .await
        .unwrap();
    let ops = env.om(OPS);
    wait_for(Duration::from_secs(30), "blocks reclaimed", || {
        let ops = &ops;
        async move {
            let r = ops
                .list_deleted_blocks(ListDeletedBlocksRequest::default())
                .await
                .ok()?;
            r.entries.is_empty().then_some(())
        }
    })
    .await;
    assert!(env.block_files().is_empty());
}
