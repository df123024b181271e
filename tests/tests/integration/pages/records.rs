//! The largest records and responses decode with a default client: pages of
//! 5 TiB keys, a full DeleteKeys response, uploads completed into at most
//! 5 TiB, and member addresses bounded.

use std::sync::Arc;

use om_client::v1::*;
use om_tests::{assert_err, rejected};
use prost::Message;
use tonic::Code;

use super::{CLIENT_LIMIT, GIB, MAX_KEY_SIZE, check_cuts, deleted, keys, node_with, put};

/// At the default budget, a bucket of 5 TiB keys (20480 blocks, ~400 KiB
/// each as a `KeyInfo`) lists in pages a default client decodes; a single
/// listing of them would not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_pages_stay_under_a_default_clients_limit() {
    let (node, c) = node_with(None).await;
    let mut want = Vec::new();
    for i in 0..11 {
        want.push(put(&c, "keys", &format!("big{i:02}"), MAX_KEY_SIZE).await);
    }
    // The largest key a request can make: every field at its limit.
    let largest = c
        .put_key_with(PutKeyRequest {
            volume: "vol-00".into(),
            bucket: "keys".into(),
            key: "k".repeat(1024),
            size: MAX_KEY_SIZE,
            etag: format!("{}-10000", "e".repeat(32)),
            content_type: "c".repeat(256),
            metadata: (0..682)
                .map(|i| (format!("{i:03}"), String::new()))
                .collect(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(largest.blocks.len(), 20480);
    let looked_up = c.lookup_key("vol-00", "keys", &largest.name).await.unwrap();
    assert_eq!(looked_up, largest);
    println!("largest key: {} bytes as a KeyInfo", largest.encoded_len());
    want.push(largest);
    let total: usize = want.iter().map(|k| k.encoded_len()).sum();
    assert!(total > CLIENT_LIMIT, "{total}: one page would not decode");
    let (cuts, got, _) = keys(&c, "keys", "", false, 0).await;
    check_cuts(
        "ListKeys",
        &cuts,
        om::service::DEFAULT_MAX_RESPONSE_BYTES,
        1000,
    );
    assert_eq!(got, want);
    // Leaving blocks out, they are one small page.
    let (cuts, got, _) = keys(&c, "keys", "", true, 0).await;
    assert_eq!(cuts.len(), 1);
    assert!(cuts[0].encoded < 16 * 1024, "{}", cuts[0].encoded);
    assert!(got.iter().all(|k| k.blocks.is_empty()));
    assert_eq!(got.len(), want.len());
    // Released blocks of those keys list in pages a client decodes too.
    let names: Vec<String> = want.iter().map(|k| k.name.clone()).collect();
    let results = c.delete_keys("vol-00", "keys", &names).await.unwrap();
    assert!(results.iter().all(|r| r.reason.is_empty()));
    let (cuts, all) = deleted(&c, 0).await;
    assert!(cuts.len() > 1);
    assert!(
        cuts.iter()
            .all(|c| c.encoded <= om::service::DEFAULT_MAX_RESPONSE_BYTES)
    );
    assert_eq!(
        all.iter().map(|e| e.blocks.len()).sum::<usize>(),
        12 * 20480
    );
    node.node.shutdown().await;
}

/// The largest DeleteKeys response (1000 outcomes naming 1024-byte keys)
/// decodes with a default client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_delete_keys_response_decodes() {
    let (node, c) = node_with(None).await;
    let names: Vec<String> = (0..1000)
        .map(|i| format!("{i:04}{}", "k".repeat(1020)))
        .collect();
    let results = c.delete_keys("vol-00", "keys", &names).await.unwrap();
    assert_eq!(results.len(), 1000);
    assert!(results.iter().all(|r| r.reason == "KEY_NOT_FOUND"));
    let size = DeleteKeysResponse { results }.encoded_len();
    println!("DeleteKeys of 1000 missing keys: {size} bytes");
    assert!(size < CLIENT_LIMIT, "{size}");
    node.node.shutdown().await;
}

/// S3 refuses to complete an upload into more than 5 TiB; om does too, so a
/// key never holds more blocks than `MAX_RECORD_BLOCKS` and always decodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_complete_into_at_most_5_tib() {
    let (node, c) = node_with(None).await;
    let c = Arc::new(c);
    let up = c
        .initiate_multipart_upload(InitiateMultipartUploadRequest {
            volume: "vol-00".into(),
            bucket: "keys".into(),
            key: "huge".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .upload
        .unwrap();
    let etag = "0cc175b9c0f1b6a831c399e269772661";
    // 1025 parts of 5 GiB: 5 GiB more than 5 TiB.
    let mut tasks = tokio::task::JoinSet::new();
    for n in 1..=1025u32 {
        let (c, id) = (c.clone(), up.upload_id.clone());
        tasks.spawn(async move {
            c.commit_part(CommitPartRequest {
                volume: "vol-00".into(),
                bucket: "keys".into(),
                key: "huge".into(),
                upload_id: id,
                part_number: n,
                size: 5 * GIB,
                etag: etag.into(),
                ..Default::default()
            })
            .await
            .unwrap()
        });
        if tasks.len() >= 32 {
            tasks.join_next().await.unwrap().unwrap();
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let complete = |parts: u32| CompleteMultipartUploadRequest {
        volume: "vol-00".into(),
        bucket: "keys".into(),
        key: "huge".into(),
        upload_id: up.upload_id.clone(),
        parts: (1..=parts)
            .map(|n| CompletedPart {
                part_number: n,
                etag: etag.into(),
            })
            .collect(),
        ..Default::default()
    };
    rejected(
        &node,
        c.complete_multipart_upload(complete(1025)),
        Code::InvalidArgument,
        "KEY_TOO_LARGE",
        "parts",
    )
    .await;
    // Exactly 5 TiB completes (the 1025th part is released).
    let key = c
        .complete_multipart_upload(complete(1024))
        .await
        .unwrap()
        .key
        .unwrap();
    assert_eq!(key.size, MAX_KEY_SIZE);
    assert_eq!(key.blocks.len(), 20480);
    assert_eq!(c.lookup_key("vol-00", "keys", "huge").await.unwrap(), key);
    node.node.shutdown().await;
}

/// Member addresses are bounded (they are replicated in the membership and
/// returned by every cluster status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_with_overlong_addresses_are_refused() {
    let (node, c) = node_with(None).await;
    let before = c.cluster_status().await.unwrap().members;
    let long = format!("{}:9872", "h".repeat(300));
    assert_err(
        c.add_node(2, &long, "127.0.0.1:1", true).await,
        Code::InvalidArgument,
        "INVALID_ADDRESS",
        "raft_addr",
    );
    assert_eq!(c.cluster_status().await.unwrap().members, before);
    node.node.shutdown().await;
}
