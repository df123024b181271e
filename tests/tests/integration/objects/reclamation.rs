//! Block reclamation, the retry cache, and one-seek continuations and naive-scan equality of upload listings.

use super::*;

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
