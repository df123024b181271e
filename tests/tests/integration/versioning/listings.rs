//! ListKeys and ListObjectVersions against a naive model of each key's
//! versions, across states and restarts, and the native cost of listings
//! past long histories.

use std::collections::BTreeMap;

use super::*;

/// The naive model: each key's versions, newest first, as (version id,
/// delete marker).
type Model = BTreeMap<String, Vec<(String, bool)>>;

fn common_prefix(name: &str, prefix: &str, delimiter: &str) -> Option<String> {
    if delimiter.is_empty() {
        return None;
    }
    let rest = name.strip_prefix(prefix)?;
    rest.find(delimiter)
        .map(|i| name[..prefix.len() + i + delimiter.len()].to_string())
}

/// ListKeys of the model: live current versions, rolled up.
fn model_keys(m: &Model, prefix: &str, delimiter: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (k, vs) in m.range(prefix.to_string()..) {
        if !k.starts_with(prefix) {
            break;
        }
        if vs.first().is_none_or(|v| v.1) {
            continue;
        }
        let item = common_prefix(k, prefix, delimiter).unwrap_or_else(|| k.clone());
        if out.last() != Some(&item) {
            out.push(item);
        }
    }
    out
}

/// ListObjectVersions of the model: (name, version id), common prefixes
/// with an empty id.
fn model_versions(m: &Model, prefix: &str, delimiter: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, vs) in m.range(prefix.to_string()..) {
        if !k.starts_with(prefix) {
            break;
        }
        match common_prefix(k, prefix, delimiter) {
            Some(cp) => {
                if out.last().map(|l| &l.0) != Some(&cp) {
                    out.push((cp, String::new()));
                }
            }
            None => out.extend(vs.iter().map(|(id, _)| (k.clone(), id.clone()))),
        }
    }
    out
}

async fn list_all_keys(c: &OmClient, prefix: &str, delimiter: &str, max: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let r = c
            .list_keys(ListKeysRequest {
                volume: "vol".into(),
                bucket: "bkt".into(),
                prefix: prefix.into(),
                delimiter: delimiter.into(),
                max_keys: max,
                continuation_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut page: Vec<String> = r.keys.iter().map(|k| k.name.clone()).collect();
        page.extend(r.common_prefixes.iter().cloned());
        page.sort();
        out.extend(page);
        if !r.truncated {
            return out;
        }
        token = r.next_continuation_token;
    }
}

/// ListObjectVersions followed by S3's markers (not the token); every
/// continuation without a delimiter costs one seek.
async fn list_all_versions_by_markers(
    c: &OmClient,
    prefix: &str,
    delimiter: &str,
    max: u32,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let (mut km, mut vm) = (String::new(), String::new());
    loop {
        let r = c
            .list_object_versions(ListObjectVersionsRequest {
                volume: "vol".into(),
                bucket: "bkt".into(),
                prefix: prefix.into(),
                delimiter: delimiter.into(),
                key_marker: km.clone(),
                version_id_marker: vm.clone(),
                max_keys: max,
                ..Default::default()
            })
            .await
            .unwrap();
        let mut page: Vec<(String, String)> = r
            .versions
            .iter()
            .map(|v| (v.name.clone(), v.version_id.clone()))
            .collect();
        page.extend(r.common_prefixes.iter().map(|p| (p.clone(), String::new())));
        page.sort_by(|a, b| a.0.cmp(&b.0));
        out.extend(page);
        if !km.is_empty() && delimiter.is_empty() {
            assert_eq!(r.scan.unwrap().seeks, 1, "a continuation is one seek");
        }
        if !r.truncated {
            return out;
        }
        km = r.next_key_marker;
        vm = r.next_version_id_marker;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_equal_a_naive_model_across_states_and_restarts() {
    let mut node = TestNode::start().await;
    let mut c = node.client();
    setup(&c).await;
    let names = ["a", "a/b", "a/c/d", "b", "b/x", "c", "ca", "d/e/f"];
    let mut m: Model = BTreeMap::new();
    let mut state = BucketVersioning::Unversioned;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..6 {
        for _ in 0..40 {
            let name = names[rnd(names.len() as u64) as usize].to_string();
            let versions = m.entry(name.clone()).or_default();
            match rnd(10) {
                0..=4 => {
                    let k = put(&c, &name, 1 + rnd(100)).await;
                    if state != BucketVersioning::Enabled {
                        versions.retain(|(id, _)| id != "null");
                    }
                    if state == BucketVersioning::Unversioned {
                        versions.clear();
                    }
                    versions.insert(0, (k.version_id, false));
                }
                5..=7 => {
                    let r = c.delete_key_version("vol", "bkt", &name, "").await;
                    match state {
                        BucketVersioning::Unversioned => {
                            if versions.is_empty() {
                                assert_err(r, Code::NotFound, "KEY_NOT_FOUND", "key");
                            } else {
                                r.unwrap();
                                versions.clear();
                            }
                        }
                        _ => {
                            let d = r.unwrap();
                            assert!(d.delete_marker);
                            if state == BucketVersioning::Suspended {
                                versions.retain(|(id, _)| id != "null");
                            }
                            versions.insert(0, (d.version_id, true));
                        }
                    }
                }
                _ => {
                    if versions.is_empty() {
                        continue;
                    }
                    let i = rnd(versions.len() as u64) as usize;
                    let (id, marker) = versions.remove(i);
                    let d = c
                        .delete_key_version("vol", "bkt", &name, &id)
                        .await
                        .unwrap();
                    assert_eq!((d.version_id, d.delete_marker), (id, marker));
                }
            }
            if m.get(&name).is_some_and(Vec::is_empty) {
                m.remove(&name);
            }
        }
        for (prefix, delimiter) in [("", ""), ("", "/"), ("a", "/"), ("a/", ""), ("c", "")] {
            for max in [1, 3, 1000] {
                let what =
                    format!("round {round} prefix {prefix:?} delimiter {delimiter:?} max {max}");
                assert_eq!(
                    list_all_keys(&c, prefix, delimiter, max).await,
                    model_keys(&m, prefix, delimiter),
                    "ListKeys {what}"
                );
                let mut by_marker = list_all_versions_by_markers(&c, prefix, delimiter, max).await;
                let want = model_versions(&m, prefix, delimiter);
                let mut by_token = all_versions(
                    &c,
                    ListObjectVersionsRequest {
                        volume: "vol".into(),
                        bucket: "bkt".into(),
                        prefix: prefix.into(),
                        delimiter: delimiter.into(),
                        max_keys: max,
                        ..Default::default()
                    },
                )
                .await;
                // Pages interleave common prefixes and versions by name.
                by_token.sort_by(|a, b| a.0.cmp(&b.0));
                by_marker.sort_by(|a, b| a.0.cmp(&b.0));
                assert_eq!(by_token, want, "ListObjectVersions (token) {what}");
                assert_eq!(by_marker, want, "ListObjectVersions (markers) {what}");
            }
        }
        // Move between the states S3 allows, and restart now and then.
        state = if state == BucketVersioning::Enabled {
            BucketVersioning::Suspended
        } else {
            BucketVersioning::Enabled
        };
        c.set_bucket_versioning("vol", "bkt", state).await.unwrap();
        if round % 2 == 1 {
            node = node.restart(|_| {}).await;
            c = node.client();
        }
    }
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_seek_past_long_histories() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    c.set_bucket_versioning("vol", "bkt", BucketVersioning::Enabled)
        .await
        .unwrap();
    // "a" has 300 versions, "m" 300 versions behind a delete marker, "z" one.
    let mut a_ids = Vec::new();
    for _ in 0..300 {
        a_ids.push(put(&c, "a", 1).await.version_id);
        put(&c, "m", 1).await;
    }
    c.delete_key_version("vol", "bkt", "m", "").await.unwrap();
    put(&c, "z", 1).await;
    let r = c
        .list_keys(ListKeysRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let names: Vec<&str> = r.keys.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["a", "z"]);
    let s = r.scan.unwrap();
    // N = 3: per long history two nexts and a seek; "z" one next.
    assert_eq!((s.seeks, s.nexts), (1 + 2, 2 + 2 + 1), "{s:?}");

    // Remove every version of "a" (tombstones before "m"): a page resuming
    // after "a" is still one seek and steps over none of them.
    for chunk in a_ids.chunks(100) {
        let keys = vec!["a".to_string(); chunk.len()];
        let out = c
            .delete_key_versions("vol", "bkt", &keys, chunk)
            .await
            .unwrap();
        assert!(out.iter().all(|o| o.reason.is_empty()), "{out:?}");
    }
    let r = c
        .list_object_versions(ListObjectVersionsRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key_marker: "a".into(),
            max_keys: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.versions.len(), 2);
    assert!(r.versions[0].delete_marker && r.versions[0].is_latest && !r.versions[1].is_latest);
    let s = r.scan.unwrap();
    assert_eq!((s.seeks, s.tombstones_skipped), (1, 0), "{s:?}");
    // Resuming by token in the middle of "m"'s history: one seek.
    let r = c
        .list_object_versions(ListObjectVersionsRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            continuation_token: r.next_continuation_token,
            max_keys: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.versions.len(), 299 + 1);
    assert_eq!(r.scan.unwrap().seeks, 1);
    node.node.shutdown().await;
}
