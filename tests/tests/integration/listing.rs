//! ListKeys pagination through gRPC: results identical to a naive full scan,
//! S3 delimiter roll-up, validated continuation tokens, and the native cost of
//! each page (one seek per continuation, runs under a common prefix jumped).

use std::collections::BTreeSet;

use om_client::v1::{BucketLayout, ListKeysRequest, ListKeysResponse};
use om_client::{ClientError, OmClient};
use om_tests::TestNode;

/// Keys and common prefixes in name order, from a plain scan of every name.
fn naive(names: &BTreeSet<String>, prefix: &str, delimiter: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in names.iter().filter(|n| n.starts_with(prefix)) {
        let rest = &n[prefix.len()..];
        let item = match (delimiter.is_empty(), rest.find(delimiter)) {
            (false, Some(i)) => format!("{prefix}{}{delimiter}/", &rest[..i]),
            _ => n.clone(),
        };
        if out.last() != Some(&item) {
            out.push(item);
        }
    }
    out
}

async fn list_all(
    c: &OmClient,
    prefix: &str,
    delimiter: &str,
    max: u32,
) -> (Vec<String>, Vec<ListKeysResponse>) {
    let mut items = Vec::new();
    let mut pages = Vec::new();
    let mut token = String::new();
    loop {
        let r = c
            .list_keys(ListKeysRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                prefix: prefix.into(),
                delimiter: delimiter.into(),
                max_keys: max,
                continuation_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(r.keys.len() + r.common_prefixes.len() <= max as usize);
        let mut page: Vec<String> = r.keys.iter().map(|k| k.name.clone()).collect();
        // Common prefixes are marked with a trailing "/" so they cannot collide with keys.
        page.extend(r.common_prefixes.iter().map(|p| format!("{p}/")));
        page.sort();
        items.extend(page);
        let more = r.truncated;
        token = r.next_continuation_token.clone();
        pages.push(r);
        if !more {
            assert!(token.is_empty());
            break;
        }
    }
    (items, pages)
}

async fn setup(names: &BTreeSet<String>) -> (TestNode, OmClient) {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.create_bucket("vol1", "bkt2", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for n in names {
        c.put_key("vol1", "bkt1", n, 1).await.unwrap();
    }
    (node, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delimiter_listings_match_a_naive_scan() {
    let mut names = BTreeSet::new();
    for d in ["a", "b", "c"] {
        for i in 0..7 {
            names.insert(format!("{d}/{i}"));
            names.insert(format!("{d}/sub/{i}"));
        }
    }
    for n in ["a", "a0", "b-", "b.x", "c//x", "top", "z/", "é/1", "é2"] {
        names.insert(n.to_string());
    }
    let (node, c) = setup(&names).await;
    for (prefix, delimiter) in [
        ("", ""),
        ("", "/"),
        ("a/", "/"),
        ("a", "/"),
        ("c/", "/"),
        ("", "sub"),
        ("b", ""),
    ] {
        let want = naive(&names, prefix, delimiter);
        for max in [1, 2, 3, 5, 1000] {
            let (got, _) = list_all(&c, prefix, delimiter, max).await;
            assert_eq!(
                got, want,
                "prefix {prefix:?} delimiter {delimiter:?} max {max}"
            );
        }
    }
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_continuation_page_is_one_native_seek_over_any_tombstones() {
    let names: BTreeSet<String> = (0..400).map(|i| format!("k{i:04}")).collect();
    let (node, c) = setup(&names).await;
    // A band of deletions right where later pages continue.
    for i in 100..350 {
        c.delete_key("vol1", "bkt1", &format!("k{i:04}"))
            .await
            .unwrap();
    }
    let (items, pages) = list_all(&c, "", "", 50).await;
    assert_eq!(items.len(), 150);
    assert!(pages.len() >= 3);
    for (i, p) in pages.iter().enumerate() {
        let s = p.scan.as_ref().unwrap();
        assert_eq!(s.seeks, 1, "page {i}: exactly one native seek");
        assert!(s.nexts <= 50, "page {i}: bounded nexts ({})", s.nexts);
    }
    // The page that resumes at k0350 continued past the band without walking it.
    let resumed = pages
        .iter()
        .position(|p| p.keys.first().is_some_and(|k| k.name == "k0350"))
        .expect("a page starts right after the band");
    assert_eq!(pages[resumed].scan.as_ref().unwrap().tombstones_skipped, 0);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_under_an_emitted_prefix_is_jumped_not_stepped() {
    let mut names = BTreeSet::new();
    for d in 0..5 {
        for i in 0..100 {
            names.insert(format!("d{d}/{i:03}"));
        }
    }
    // One key per prefix: the rule never seeks.
    for s in 0..20 {
        names.insert(format!("s{s:02}/only"));
    }
    let (node, c) = setup(&names).await;
    let r = c
        .list_keys(ListKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            delimiter: "/".into(),
            prefix: "d".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.common_prefixes, ["d0/", "d1/", "d2/", "d3/", "d4/"]);
    let s = r.scan.unwrap();
    // One seek to start, then per prefix two nexts and one seek past it (N = 3).
    assert_eq!(s.seeks, 1 + 5);
    assert_eq!(s.nexts, 5 * 2);
    let r = c
        .list_keys(ListKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            delimiter: "/".into(),
            prefix: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.common_prefixes.len(), 20);
    let s = r.scan.unwrap();
    assert_eq!(s.seeks, 1, "one key per prefix never pays for a seek");
    assert_eq!(s.nexts, 20);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_continuation_tokens_are_refused() {
    let names: BTreeSet<String> = (0..10).map(|i| format!("k{i}")).collect();
    let (node, c) = setup(&names).await;
    let req = |bucket: &str, prefix: &str, token: &str| ListKeysRequest {
        volume: "vol1".into(),
        bucket: bucket.into(),
        prefix: prefix.into(),
        max_keys: 3,
        continuation_token: token.into(),
        ..Default::default()
    };
    let first = c.list_keys(req("bkt1", "", "")).await.unwrap();
    let token = first.next_continuation_token.clone();
    assert!(!token.is_empty());
    let mut tampered: Vec<char> = token.chars().collect();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == 'a' { 'b' } else { 'a' };
    let tampered: String = tampered.into_iter().collect();
    for (r, what) in [
        (req("bkt1", "", &tampered), "tampered"),
        (req("bkt2", "", &token), "another bucket"),
        (req("bkt1", "k", &token), "another prefix"),
        (req("bkt1", "", "not-hex"), "garbage"),
    ] {
        let before = node.dump();
        match c.list_keys(r).await {
            Err(ClientError::Api {
                code,
                reason,
                field,
                ..
            }) => {
                assert_eq!(code, tonic::Code::InvalidArgument, "{what}");
                assert_eq!(reason, "INVALID_CONTINUATION_TOKEN", "{what}");
                assert_eq!(field, "continuation_token", "{what}");
            }
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(before, node.dump());
    }
    let second = c.list_keys(req("bkt1", "", &token)).await.unwrap();
    assert_eq!(second.keys[0].name, "k3");
    node.node.shutdown().await;
}

/// S3's listing with a `start-after` marker: keys and common prefixes in name
/// order, each only when it sorts after the marker (a common prefix sorts
/// before every name under it, so a marker inside one skips it whole).
fn naive_after(
    names: &BTreeSet<String>,
    prefix: &str,
    delimiter: &str,
    marker: &str,
) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for n in names.iter().filter(|n| n.starts_with(prefix)) {
        let rest = &n[prefix.len()..];
        let item = match (delimiter.is_empty(), rest.find(delimiter)) {
            (false, Some(i)) => (format!("{prefix}{}", &rest[..i + delimiter.len()]), true),
            _ => (n.clone(), false),
        };
        if item.0.as_str() > marker && out.last() != Some(&item) {
            out.push(item);
        }
    }
    out
}

/// Markers drawn inside common prefixes (and everywhere else), for first
/// pages and for walks that pass each page's last item back as the marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_after_inside_a_common_prefix_skips_the_prefix() {
    let names: BTreeSet<String> = [
        "a/b", "a/c", "a/d/e", "b", "c-1", "c-2", "c-3/x", "d", "p/a/b", "p/a/c", "p/b", "p/c/d",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (node, c) = setup(&names).await;
    // The examples: a/b, a/c, b with start-after a/b lists only b.
    let r = c
        .list_keys(ListKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            delimiter: "/".into(),
            start_after: "a/b".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(r.common_prefixes.iter().all(|p| p != "a/"), "{r:?}");
    assert_eq!(r.keys.first().map(|k| k.name.as_str()), Some("b"));
    let mut markers: BTreeSet<String> = names.clone();
    for m in [
        "", "a", "a/", "a/a", "a/bb", "a/d/", "c-", "c-0", "c-3/", "p/", "p/a/", "p/a/bz", "p/c/",
    ] {
        markers.insert(m.to_string());
    }
    for (prefix, delimiter) in [("", "/"), ("", "-"), ("p/", "/"), ("a", "/"), ("", "")] {
        for marker in &markers {
            let want = naive_after(&names, prefix, delimiter, marker);
            for max in [1, 2, 1000] {
                // Walk with client-supplied markers: each page's last item
                // (a key or a common prefix) is the next page's start-after.
                let mut got: Vec<(String, bool)> = Vec::new();
                let mut after = marker.clone();
                loop {
                    let r = c
                        .list_keys(ListKeysRequest {
                            volume: "vol1".into(),
                            bucket: "bkt1".into(),
                            prefix: prefix.into(),
                            delimiter: delimiter.into(),
                            start_after: after.clone(),
                            max_keys: max,
                            ..Default::default()
                        })
                        .await
                        .unwrap();
                    let mut page: Vec<(String, bool)> = r
                        .keys
                        .iter()
                        .map(|k| (k.name.clone(), false))
                        .chain(r.common_prefixes.iter().map(|p| (p.clone(), true)))
                        .collect();
                    page.sort();
                    got.extend(page);
                    if !r.truncated {
                        break;
                    }
                    after = r.next_start_after;
                }
                assert_eq!(
                    got, want,
                    "prefix {prefix:?} delimiter {delimiter:?} start-after {marker:?} max {max}"
                );
            }
        }
    }
    // Positioning past a rolled-up marker is still one native seek.
    let r = c
        .list_keys(ListKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            delimiter: "/".into(),
            start_after: "p/a/b".into(),
            prefix: "p/".into(),
            max_keys: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.keys[0].name, "p/b");
    assert_eq!(r.scan.unwrap().seeks, 1);
    node.node.shutdown().await;
}
