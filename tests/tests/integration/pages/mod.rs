//! Response sizes end to end: every listing stops a page before its encoded
//! response would pass the server's byte budget and resumes exactly at the
//! first item it left out (one seek, as always); the largest records decode
//! with a default client; key and file listings can leave block lists out;
//! and every recursive ListStatus token of the deepest, longest tree the path
//! limits allow is accepted.

use std::collections::BTreeMap;

use om::listing::{PAGE_OVERHEAD_BYTES, field_len};
use om_client::OmClient;
use om_client::v1::ozone_manager_client::OzoneManagerClient;
use om_client::v1::*;
use om_tests::TestNode;
use prost::Message;

mod records;
mod trees;

/// What a tonic (and grpc-go, grpc-java) client decodes by default.
const CLIENT_LIMIT: usize = 4 * 1024 * 1024;
/// The smallest response budget a server takes: pages of a few items.
const SMALL: usize = om::config::MIN_RESPONSE_BYTES;
const BLOCK: u64 = 256 * 1024 * 1024;
/// S3's largest object, 5 TiB: 20480 blocks.
const MAX_KEY_SIZE: u64 = 5 * 1024 * 1024 * 1024 * 1024;
const GIB: u64 = 1024 * 1024 * 1024;

/// One page as the checks see it: the encoded size of the response and of
/// each item in the order the server scanned them.
struct Cut {
    encoded: usize,
    items: Vec<usize>,
}

fn item_lens<M: Message>(items: &[M]) -> Vec<usize> {
    items.iter().map(|m| field_len(m.encoded_len())).collect()
}

/// The pages of one listing, cut by a server with response budget `budget`
/// and asked for `max` items per page: each fits the budget unless it holds
/// a single item, and each that stopped before `max` items did so because
/// the next page's first item would not have fitted.
fn check_cuts(what: &str, cuts: &[Cut], budget: usize, max: usize) {
    let item_budget = budget - PAGE_OVERHEAD_BYTES;
    assert!(cuts.len() > 1, "{what}: one page; the test needs more data");
    let mut by_bytes = 0;
    for (i, c) in cuts.iter().enumerate() {
        let used: usize = c.items.iter().sum();
        assert!(!c.items.is_empty(), "{what}: page {i} is empty");
        assert!(c.encoded < CLIENT_LIMIT, "{what}: page {i}");
        if c.items.len() > 1 {
            assert!(c.encoded <= budget, "{what}: page {i} is {}", c.encoded);
            assert!(used <= item_budget, "{what}: page {i} items {used}");
        }
        if let Some(next) = cuts.get(i + 1)
            && c.items.len() < max
        {
            assert!(
                used + next.items[0] > item_budget,
                "{what}: page {i} stopped at {used} bytes though {} more fitted",
                next.items[0]
            );
            by_bytes += 1;
        }
    }
    assert!(by_bytes > 0, "{what}: no page stopped by bytes");
}

async fn raw(node: &TestNode) -> OzoneManagerClient<tonic::transport::Channel> {
    OzoneManagerClient::connect(format!("http://{}", node.endpoint()))
        .await
        .expect("connect")
}

fn meta(n: usize) -> BTreeMap<String, String> {
    BTreeMap::from([("m".to_string(), "x".repeat(n))])
}

async fn volumes(c: &OmClient, max: u32) -> (Vec<Cut>, Vec<VolumeInfo>) {
    let (mut cuts, mut all, mut after) = (Vec::new(), Vec::new(), String::new());
    loop {
        let r = c.list_volumes("vol-", &after, max).await.unwrap();
        cuts.push(Cut {
            encoded: r.encoded_len(),
            items: item_lens(&r.volumes),
        });
        all.extend(r.volumes);
        if !r.truncated {
            return (cuts, all);
        }
        after = r.next_start_after;
    }
}

async fn buckets(c: &OmClient, max: u32) -> (Vec<Cut>, Vec<BucketInfo>) {
    let (mut cuts, mut all, mut after) = (Vec::new(), Vec::new(), String::new());
    loop {
        let r = c.list_buckets("vol-00", "b-", &after, max).await.unwrap();
        cuts.push(Cut {
            encoded: r.encoded_len(),
            items: item_lens(&r.buckets),
        });
        all.extend(r.buckets);
        if !r.truncated {
            return (cuts, all);
        }
        after = r.next_start_after;
    }
}

/// Keys and common prefixes of `bucket`, each page's items in name order.
async fn keys(
    c: &OmClient,
    bucket: &str,
    delimiter: &str,
    omit_blocks: bool,
    max: u32,
) -> (Vec<Cut>, Vec<KeyInfo>, Vec<String>) {
    let (mut cuts, mut keys, mut prefixes, mut token) =
        (Vec::new(), Vec::new(), Vec::new(), String::new());
    loop {
        let r = c
            .list_keys(ListKeysRequest {
                volume: "vol-00".into(),
                bucket: bucket.into(),
                delimiter: delimiter.into(),
                max_keys: max,
                continuation_token: token.clone(),
                omit_blocks,
                ..Default::default()
            })
            .await
            .unwrap();
        if delimiter.is_empty() {
            assert_eq!(r.scan.unwrap().seeks, 1, "a page is one seek");
        }
        let mut items: Vec<(&str, usize)> = r
            .keys
            .iter()
            .map(|k| (k.name.as_str(), field_len(k.encoded_len())))
            .chain(
                r.common_prefixes
                    .iter()
                    .map(|p| (p.as_str(), field_len(p.len()))),
            )
            .collect();
        items.sort();
        cuts.push(Cut {
            encoded: r.encoded_len(),
            items: items.into_iter().map(|(_, n)| n).collect(),
        });
        keys.extend(r.keys);
        prefixes.extend(r.common_prefixes);
        if !r.truncated {
            assert!(r.next_continuation_token.is_empty());
            return (cuts, keys, prefixes);
        }
        token = r.next_continuation_token;
    }
}

async fn open_keys(c: &OmClient, max: u32) -> (Vec<Cut>, Vec<OpenKeyInfo>) {
    let (mut cuts, mut all, mut token) = (Vec::new(), Vec::new(), String::new());
    loop {
        let r = c
            .list_open_keys(ListOpenKeysRequest {
                volume: "vol-00".into(),
                bucket: "keys".into(),
                max_keys: max,
                continuation_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(r.scan.unwrap().seeks, 1, "a page is one seek");
        cuts.push(Cut {
            encoded: r.encoded_len(),
            items: item_lens(&r.keys),
        });
        all.extend(r.keys);
        if !r.truncated {
            return (cuts, all);
        }
        token = r.next_continuation_token;
    }
}

async fn parts(c: &OmClient, upload_id: &str, max: u32) -> (Vec<Cut>, Vec<PartInfo>) {
    let (mut cuts, mut all, mut marker) = (Vec::new(), Vec::new(), 0);
    loop {
        let r = c
            .list_parts(ListPartsRequest {
                volume: "vol-00".into(),
                bucket: "keys".into(),
                key: "mp".into(),
                upload_id: upload_id.into(),
                part_number_marker: marker,
                max_parts: max,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(r.scan.unwrap().seeks, 1, "a page is one seek");
        cuts.push(Cut {
            encoded: r.encoded_len(),
            items: item_lens(&r.parts),
        });
        all.extend(r.parts);
        if !r.truncated {
            return (cuts, all);
        }
        marker = r.next_part_number_marker;
    }
}

async fn uploads(
    c: &OmClient,
    delimiter: &str,
    max: u32,
) -> (Vec<Cut>, Vec<UploadInfo>, Vec<String>) {
    let (mut cuts, mut all, mut prefixes) = (Vec::new(), Vec::new(), Vec::new());
    let (mut key_marker, mut id_marker) = (String::new(), String::new());
    loop {
        let r = c
            .list_multipart_uploads(ListMultipartUploadsRequest {
                volume: "vol-00".into(),
                bucket: "keys".into(),
                prefix: "up".into(),
                delimiter: delimiter.into(),
                key_marker: key_marker.clone(),
                upload_id_marker: id_marker.clone(),
                max_uploads: max,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut items: Vec<(&str, usize)> = r
            .uploads
            .iter()
            .map(|u| (u.key.as_str(), field_len(u.encoded_len())))
            .chain(
                r.common_prefixes
                    .iter()
                    .map(|p| (p.as_str(), field_len(p.len()))),
            )
            .collect();
        items.sort();
        cuts.push(Cut {
            encoded: r.encoded_len(),
            items: items.into_iter().map(|(_, n)| n).collect(),
        });
        all.extend(r.uploads);
        prefixes.extend(r.common_prefixes);
        if !r.truncated {
            return (cuts, all, prefixes);
        }
        key_marker = r.next_key_marker;
        id_marker = r.next_upload_id_marker;
    }
}

async fn deleted(c: &OmClient, max: u32) -> (Vec<Cut>, Vec<DeletedBlocksEntry>) {
    let (mut cuts, mut all, mut after) = (Vec::new(), Vec::new(), String::new());
    loop {
        let r = c
            .list_deleted_blocks(ListDeletedBlocksRequest {
                after: after.clone(),
                max_entries: max,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(r.scan.unwrap().seeks, 1, "a page is one seek");
        cuts.push(Cut {
            encoded: r.encoded_len(),
            items: item_lens(&r.entries),
        });
        all.extend(r.entries);
        if !r.truncated {
            return (cuts, all);
        }
        after = r.next_after;
    }
}

async fn statuses(
    c: &OmClient,
    bucket: &str,
    recursive: bool,
    omit_blocks: bool,
    max: u32,
) -> (Vec<Cut>, Vec<FileStatus>, usize) {
    let (mut cuts, mut all, mut token, mut longest) = (Vec::new(), Vec::new(), String::new(), 0);
    loop {
        let r = c
            .list_status(ListStatusRequest {
                volume: "vol-00".into(),
                bucket: bucket.into(),
                recursive,
                max_entries: max,
                continuation_token: token.clone(),
                omit_blocks,
                ..Default::default()
            })
            .await
            .unwrap();
        cuts.push(Cut {
            encoded: r.encoded_len(),
            items: item_lens(&r.entries),
        });
        all.extend(r.entries);
        if !r.truncated {
            return (cuts, all, longest);
        }
        longest = longest.max(r.next_continuation_token.len());
        token = r.next_continuation_token;
    }
}

/// A client of one node and that node's setup: volume `vol-00` with an
/// object-store bucket `keys`.
async fn node_with(budget: Option<usize>) -> (TestNode, OmClient) {
    let node = TestNode::start_with(|a| a.max_response_bytes = budget).await;
    let c = node.client();
    c.create_volume("vol-00", "").await.unwrap();
    c.create_bucket("vol-00", "keys", BucketLayout::ObjectStore)
        .await
        .unwrap();
    (node, c)
}

async fn put(c: &OmClient, bucket: &str, key: &str, size: u64) -> KeyInfo {
    c.put_key("vol-00", bucket, key, size).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_bucket_and_key_pages_stop_by_bytes() {
    let (node, c) = node_with(Some(SMALL)).await;
    // Volumes and buckets of ~2 KiB each (their metadata).
    for i in 0..24 {
        c.create_volume_with(CreateVolumeRequest {
            name: format!("vol-{i:02}x"),
            metadata: meta(2000),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let mut om = raw(&node).await;
    for i in 0..24 {
        om.create_bucket(CreateBucketRequest {
            volume: "vol-00".into(),
            name: format!("b-{i:02}"),
            metadata: meta(2000),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let (cuts, all) = volumes(&c, 0).await;
    check_cuts("ListVolumes", &cuts, SMALL, 1000);
    assert_eq!(all, volumes(&c, 1).await.1);
    assert_eq!(all.len(), 25);
    let (cuts, all) = buckets(&c, 0).await;
    check_cuts("ListBuckets", &cuts, SMALL, 1000);
    assert_eq!(all, buckets(&c, 1).await.1);
    assert_eq!(all.len(), 24);
    // Keys of 300 blocks (~6 KiB each), some under common prefixes.
    let mut want = Vec::new();
    for i in 0..14 {
        want.push(put(&c, "keys", &format!("k{i:02}"), 300 * BLOCK).await);
        if i % 3 == 0 {
            want.push(put(&c, "keys", &format!("k{i:02}/a"), 300 * BLOCK).await);
            want.push(put(&c, "keys", &format!("k{i:02}/b"), 1).await);
        }
    }
    want.sort_by(|a, b| a.name.cmp(&b.name));
    let (cuts, got, prefixes) = keys(&c, "keys", "", false, 0).await;
    check_cuts("ListKeys", &cuts, SMALL, 1000);
    assert!(prefixes.is_empty());
    assert_eq!(got, want, "the pages are the whole listing");
    let (cuts, got, prefixes) = keys(&c, "keys", "/", false, 0).await;
    check_cuts("ListKeys with a delimiter", &cuts, SMALL, 1000);
    let (_, one_by_one, one_by_one_prefixes) = keys(&c, "keys", "/", false, 1).await;
    assert_eq!(got, one_by_one);
    assert_eq!(prefixes, one_by_one_prefixes);
    assert_eq!(prefixes.len(), 5);
    // Without blocks, the whole bucket is one page.
    let (cuts, got, _) = keys(&c, "keys", "", true, 0).await;
    assert_eq!(cuts.len(), 1);
    let bare: Vec<KeyInfo> = want
        .iter()
        .map(|k| KeyInfo {
            blocks: Vec::new(),
            ..k.clone()
        })
        .collect();
    assert_eq!(got, bare);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_part_upload_and_release_pages_stop_by_bytes() {
    let (node, c) = node_with(Some(SMALL)).await;
    // Sessions of 64 blocks with ~900-byte names (~1.1 KiB each).
    for i in 0..30 {
        c.open_key(OpenKeyRequest {
            volume: "vol-00".into(),
            bucket: "keys".into(),
            key: format!("open/{i:02}{}", "o".repeat(900)),
            blocks: 64,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let (cuts, all) = open_keys(&c, 0).await;
    check_cuts("ListOpenKeys", &cuts, SMALL, 1000);
    assert_eq!(all, open_keys(&c, 1).await.1);
    assert_eq!(all.len(), 30);
    // 80 parts of 5 GiB: 20 blocks each.
    let up = c
        .initiate_multipart_upload(InitiateMultipartUploadRequest {
            volume: "vol-00".into(),
            bucket: "keys".into(),
            key: "mp".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .upload
        .unwrap();
    for n in 1..=80 {
        c.commit_part(CommitPartRequest {
            volume: "vol-00".into(),
            bucket: "keys".into(),
            key: "mp".into(),
            upload_id: up.upload_id.clone(),
            part_number: n,
            size: 5 * GIB,
            etag: "0cc175b9c0f1b6a831c399e269772661".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let (cuts, all) = parts(&c, &up.upload_id, 0).await;
    check_cuts("ListParts", &cuts, SMALL, 1000);
    assert_eq!(all, parts(&c, &up.upload_id, 1).await.1);
    assert_eq!(all.len(), 80);
    // Uploads with 2 KiB of metadata, some under common prefixes.
    for i in 0..20 {
        let key = if i % 4 == 0 {
            format!("up/{i:02}/x")
        } else {
            format!("up{i:02}")
        };
        c.initiate_multipart_upload(InitiateMultipartUploadRequest {
            volume: "vol-00".into(),
            bucket: "keys".into(),
            key,
            metadata: meta(2000),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    for delimiter in ["", "/"] {
        let (cuts, all, prefixes) = uploads(&c, delimiter, 0).await;
        check_cuts("ListMultipartUploads", &cuts, SMALL, 1000);
        let (_, one, one_prefixes) = uploads(&c, delimiter, 1).await;
        assert_eq!((&all, &prefixes), (&one, &one_prefixes), "{delimiter:?}");
    }
    // Released blocks: deleted keys of 400 blocks (~8 KiB per entry).
    for i in 0..6 {
        put(&c, "keys", &format!("del{i}"), 400 * BLOCK).await;
        c.delete_key("vol-00", "keys", &format!("del{i}"))
            .await
            .unwrap();
    }
    let (cuts, all) = deleted(&c, 0).await;
    check_cuts("ListDeletedBlocks", &cuts, SMALL, 1000);
    assert_eq!(all, deleted(&c, 1).await.1);
    assert_eq!(all.iter().map(|e| e.blocks.len()).sum::<usize>(), 6 * 400);
    node.node.shutdown().await;
}

/// Creates and commits `path` with `blocks` full blocks.
async fn write_file(c: &OmClient, bucket: &str, path: &str, blocks: u32) {
    let s = c
        .create_file(CreateFileRequest {
            volume: "vol-00".into(),
            bucket: bucket.into(),
            path: path.into(),
            recursive: true,
            blocks,
            ..Default::default()
        })
        .await
        .unwrap();
    let blocks: Vec<BlockInfo> = s
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| BlockInfo {
            block_id: b.block_id,
            offset: i as u64 * BLOCK,
            length: BLOCK,
        })
        .collect();
    c.commit_key(CommitKeyRequest {
        volume: "vol-00".into(),
        bucket: bucket.into(),
        key: s.path,
        session_id: s.session_id,
        size: blocks.len() as u64 * BLOCK,
        blocks,
        ..Default::default()
    })
    .await
    .unwrap();
}

async fn mkdir(c: &OmClient, bucket: &str, path: &str) {
    c.create_directory(CreateDirectoryRequest {
        volume: "vol-00".into(),
        bucket: bucket.into(),
        path: path.into(),
        ..Default::default()
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_pages_stop_by_bytes_and_can_leave_blocks_out() {
    let (node, c) = node_with(Some(SMALL)).await;
    c.create_bucket("vol-00", "files", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    // Files of 64 blocks (~1.2 KiB each) at the top and in nested directories.
    for i in 0..30 {
        write_file(&c, "files", &format!("f{i:02}"), 64).await;
        if i < 10 {
            write_file(&c, "files", &format!("d{}/e{i:02}/g", i % 3), 64).await;
        }
    }
    mkdir(&c, "files", "d0/empty").await;
    for recursive in [false, true] {
        let (cuts, all, _) = statuses(&c, "files", recursive, false, 0).await;
        check_cuts("ListStatus", &cuts, SMALL, 1000);
        assert_eq!(all, statuses(&c, "files", recursive, false, 1).await.1);
        // Without blocks: one page, the same entries.
        let (cuts, bare, _) = statuses(&c, "files", recursive, true, 0).await;
        assert_eq!(cuts.len(), 1);
        let want: Vec<FileStatus> = all
            .iter()
            .map(|s| FileStatus {
                blocks: Vec::new(),
                ..s.clone()
            })
            .collect();
        assert_eq!(bare, want);
        assert_eq!(all.len(), if recursive { 54 } else { 33 });
    }
    node.node.shutdown().await;
}

/// `omctl key list --no-blocks` and `omctl fs ls --no-blocks` ask for pages
/// without block lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_lists_without_blocks() {
    let (node, c) = node_with(None).await;
    put(&c, "keys", "k", 3 * BLOCK).await;
    c.create_bucket("vol-00", "files", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    write_file(&c, "files", "d/f", 2).await;
    let ep = node.endpoint();
    let omctl = |args: &'static [&'static str]| {
        let ep = ep.clone();
        tokio::task::spawn_blocking(move || {
            let o = std::process::Command::new(om_tests::binary("omctl"))
                .args(["--endpoint", &ep, "--output", "json"])
                .args(args)
                .output()
                .expect("run omctl");
            assert!(
                o.status.success(),
                "omctl {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
        })
    };
    let blocks = |v: &serde_json::Value| v["items"][0]["blocks"].as_array().unwrap().len();
    let with = omctl(&["key", "list", "vol-00/keys"]).await.unwrap();
    assert_eq!(blocks(&with), 3);
    let without = omctl(&["key", "list", "vol-00/keys", "--no-blocks"])
        .await
        .unwrap();
    assert_eq!(without["items"][0]["name"], "k");
    assert_eq!(blocks(&without), 0);
    let with = omctl(&["fs", "ls", "vol-00/files/d"]).await.unwrap();
    assert_eq!(blocks(&with), 2);
    let without = omctl(&["fs", "ls", "vol-00/files/d", "--no-blocks"])
        .await
        .unwrap();
    assert_eq!(without["items"][0]["path"], "d/f");
    assert_eq!(blocks(&without), 0);
    node.node.shutdown().await;
}
