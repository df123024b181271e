//! ListObjects (V1), ListObjectsV2 and ListObjectVersions over om's
//! `list_keys` and `list_object_versions`, which already roll keys up into
//! common prefixes at the delimiter and resume after a marker the way S3
//! does. om may end a page early (its response byte budget); the gateway
//! then follows om's continuation token until the client's MaxKeys is
//! reached, so a page holds what S3 would put in it.
//!
//! V2's continuation token is om's (opaque, one seek to resume); V1's
//! NextMarker is the last key or common prefix returned, always given when
//! truncated. With `encoding-type=url` every name in the answer is
//! URL-encoded.

use om_client::OmClient;
use om_client::v1::{KeyInfo, ListKeysRequest, ListObjectVersionsRequest};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::OmS3;
use super::codec::{etag, maybe_encode, ts};
use crate::errors::from_om;

/// S3's default and largest page.
pub(super) const MAX_KEYS: i32 = 1000;

/// Where a listing starts.
enum Start {
    After(String),
    Token(String),
}

/// Keys and common prefixes gathered from om's pages.
#[derive(Default)]
struct Gathered {
    keys: Vec<KeyInfo>,
    prefixes: Vec<String>,
    truncated: bool,
    /// The last key or prefix returned (when truncated).
    next_marker: String,
    /// om's token to resume after it (when truncated).
    next_token: String,
}

/// The page size a request asks for: 0..=1000 (default 1000).
pub(super) fn page_size(max: Option<i32>) -> S3Result<u32> {
    match max {
        None => Ok(MAX_KEYS as u32),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "max-keys must not be negative")),
        Some(n) => Ok(n.min(MAX_KEYS) as u32),
    }
}

/// Whether the answer's names are URL-encoded.
pub(super) fn url_encoded(e: Option<&EncodingType>) -> S3Result<bool> {
    match e.map(EncodingType::as_str) {
        None => Ok(false),
        Some(EncodingType::URL) => Ok(true),
        Some(_) => Err(s3_error!(InvalidArgument, "encoding-type must be url")),
    }
}

async fn gather(
    om: &OmClient,
    volume: &str,
    bucket: &str,
    prefix: &str,
    delimiter: &str,
    start: Start,
    max: u32,
) -> S3Result<Gathered> {
    let mut g = Gathered::default();
    if max == 0 {
        // Nothing to list, but the bucket must exist.
        om.get_bucket(volume, bucket).await.map_err(from_om)?;
        return Ok(g);
    }
    let (mut after, mut token) = match start {
        Start::After(a) => (a, String::new()),
        Start::Token(t) => (String::new(), t),
    };
    // Under `.snapshot/NAME/`: the snapshot's keys, named as the client
    // asked for them.
    let scoped = super::snapshots::scope(prefix, &after);
    let (prefix, snapshot) = match &scoped {
        Some(s) => {
            after = s.start_after.clone();
            (s.prefix.as_str(), s.snapshot.clone())
        }
        None => (prefix, String::new()),
    };
    let outer = scoped.as_ref().map(|s| s.outer.clone()).unwrap_or_default();
    let with_outer = |name: String| format!("{outer}{name}");
    loop {
        let left = max - (g.keys.len() + g.prefixes.len()) as u32;
        let page = om
            .list_keys(ListKeysRequest {
                read: None,
                volume: volume.to_string(),
                bucket: bucket.to_string(),
                prefix: prefix.to_string(),
                start_after: std::mem::take(&mut after),
                max_keys: left,
                delimiter: delimiter.to_string(),
                continuation_token: std::mem::take(&mut token),
                omit_blocks: true,
                snapshot: snapshot.clone(),
            })
            .await
            .map_err(from_om)?;
        let got = page.keys.len() + page.common_prefixes.len();
        g.keys.extend(page.keys.into_iter().map(|mut k| {
            k.name = with_outer(std::mem::take(&mut k.name));
            k
        }));
        g.prefixes
            .extend(page.common_prefixes.into_iter().map(with_outer));
        g.truncated = page.truncated;
        g.next_marker = with_outer(page.next_start_after);
        g.next_token = page.next_continuation_token;
        let full = g.keys.len() + g.prefixes.len() >= max as usize;
        if !g.truncated || full || got == 0 || g.next_token.is_empty() {
            return Ok(g);
        }
        token = g.next_token.clone();
    }
}

/// The owner S3 names on each object listed: the bucket's, since om keeps
/// every object as its bucket owner's (S3's default object ownership,
/// BucketOwnerEnforced); none where om records no owner (authorization
/// off). One read of the bucket, made only for a page that lists objects.
async fn owner(om: &OmClient, volume: &str, bucket: &str) -> S3Result<Option<Owner>> {
    let b = om.get_bucket(volume, bucket).await.map_err(from_om)?;
    Ok((!b.owner.is_empty()).then(|| Owner {
        display_name: Some(b.owner.clone()),
        id: Some(b.owner),
    }))
}

fn object(k: KeyInfo, encode: bool, owner: Option<&Owner>) -> Object {
    Object {
        owner: owner.cloned(),
        e_tag: etag(&k.etag),
        key: Some(maybe_encode(k.name, encode)),
        last_modified: Some(ts(k.modification_time_ms)),
        size: i64::try_from(k.size).ok(),
        storage_class: Some(ObjectStorageClass::from_static(
            ObjectStorageClass::STANDARD,
        )),
        ..Default::default()
    }
}

fn prefixes(p: Vec<String>, encode: bool) -> Option<Vec<CommonPrefix>> {
    (!p.is_empty()).then(|| {
        p.into_iter()
            .map(|p| CommonPrefix {
                prefix: Some(maybe_encode(p, encode)),
            })
            .collect()
    })
}

fn opt_encode(s: Option<String>, encode: bool) -> Option<String> {
    s.map(|s| maybe_encode(s, encode))
}

/// A request's delimiter as the answer echoes it: an empty one is no
/// delimiter, and S3 then sends no `Delimiter` element.
fn echo_delimiter(d: Option<String>, encode: bool) -> Option<String> {
    opt_encode(d.filter(|d| !d.is_empty()), encode)
}

pub async fn objects_v1(
    s: &OmS3,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let max = page_size(i.max_keys)?;
    let encode = url_encoded(i.encoding_type.as_ref())?;
    let g = gather(
        &om,
        &s.volume,
        &i.bucket,
        i.prefix.as_deref().unwrap_or_default(),
        i.delimiter.as_deref().unwrap_or_default(),
        Start::After(i.marker.clone().unwrap_or_default()),
        max,
    )
    .await?;
    let next_marker = g.truncated.then(|| maybe_encode(g.next_marker, encode));
    let owner = match g.keys.is_empty() {
        true => None,
        false => owner(&om, &s.volume, &i.bucket).await?,
    };
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(i.bucket),
        // V1 echoes Prefix as given even with encoding-type=url (S3, and
        // the SDKs, which decode only Delimiter, Marker, NextMarker, keys
        // and common prefixes of a V1 answer).
        prefix: Some(i.prefix.unwrap_or_default()),
        marker: Some(maybe_encode(i.marker.unwrap_or_default(), encode)),
        max_keys: Some(max as i32),
        is_truncated: Some(g.truncated),
        contents: (!g.keys.is_empty()).then(|| {
            g.keys
                .into_iter()
                .map(|k| object(k, encode, owner.as_ref()))
                .collect()
        }),
        common_prefixes: prefixes(g.prefixes, encode),
        delimiter: echo_delimiter(i.delimiter, encode),
        next_marker,
        encoding_type: i.encoding_type,
        ..Default::default()
    }))
}

pub async fn objects_v2(
    s: &OmS3,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let max = page_size(i.max_keys)?;
    let encode = url_encoded(i.encoding_type.as_ref())?;
    let start = match i.continuation_token.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => Start::Token(t.to_string()),
        None => Start::After(i.start_after.clone().unwrap_or_default()),
    };
    let g = gather(
        &om,
        &s.volume,
        &i.bucket,
        i.prefix.as_deref().unwrap_or_default(),
        i.delimiter.as_deref().unwrap_or_default(),
        start,
        max,
    )
    .await?;
    let count = g.keys.len() + g.prefixes.len();
    let owner = match i.fetch_owner == Some(true) && !g.keys.is_empty() {
        true => owner(&om, &s.volume, &i.bucket).await?,
        false => None,
    };
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(i.bucket),
        prefix: Some(maybe_encode(i.prefix.unwrap_or_default(), encode)),
        max_keys: Some(max as i32),
        key_count: Some(count as i32),
        continuation_token: i.continuation_token,
        is_truncated: Some(g.truncated),
        next_continuation_token: g.truncated.then_some(g.next_token),
        contents: (!g.keys.is_empty()).then(|| {
            g.keys
                .into_iter()
                .map(|k| object(k, encode, owner.as_ref()))
                .collect()
        }),
        common_prefixes: prefixes(g.prefixes, encode),
        delimiter: echo_delimiter(i.delimiter, encode),
        encoding_type: i.encoding_type,
        start_after: opt_encode(i.start_after, encode),
        ..Default::default()
    }))
}

/// A version or delete marker as S3 lists it.
enum Entry {
    Version(ObjectVersion),
    Marker(DeleteMarkerEntry),
}

fn version_entry(k: KeyInfo, encode: bool, owner: Option<&Owner>) -> Entry {
    let key = Some(maybe_encode(k.name, encode));
    let version_id = Some(if k.version_id.is_empty() {
        "null".to_string()
    } else {
        k.version_id
    });
    if k.delete_marker {
        return Entry::Marker(DeleteMarkerEntry {
            is_latest: Some(k.is_latest),
            key,
            last_modified: Some(ts(k.modification_time_ms)),
            owner: owner.cloned(),
            version_id,
        });
    }
    Entry::Version(ObjectVersion {
        e_tag: etag(&k.etag),
        is_latest: Some(k.is_latest),
        key,
        last_modified: Some(ts(k.modification_time_ms)),
        size: i64::try_from(k.size).ok(),
        storage_class: Some(ObjectVersionStorageClass::from_static(
            ObjectVersionStorageClass::STANDARD,
        )),
        version_id,
        owner: owner.cloned(),
        ..Default::default()
    })
}

pub async fn versions(
    s: &OmS3,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let max = page_size(i.max_keys)?;
    let encode = url_encoded(i.encoding_type.as_ref())?;
    let mut versions = Vec::new();
    let mut markers = Vec::new();
    let mut common = Vec::new();
    let mut truncated = false;
    let (mut next_key, mut next_version) = (String::new(), String::new());
    let mut token = String::new();
    let mut count = 0u32;
    let mut owner: Option<Option<Owner>> = None;
    while count < max {
        let first = token.is_empty();
        let page = om
            .list_object_versions(ListObjectVersionsRequest {
                read: None,
                volume: s.volume.clone(),
                bucket: i.bucket.clone(),
                prefix: i.prefix.clone().unwrap_or_default(),
                delimiter: i.delimiter.clone().unwrap_or_default(),
                key_marker: if first {
                    i.key_marker.clone().unwrap_or_default()
                } else {
                    String::new()
                },
                version_id_marker: if first {
                    i.version_id_marker.clone().unwrap_or_default()
                } else {
                    String::new()
                },
                max_keys: max - count,
                continuation_token: std::mem::take(&mut token),
                omit_blocks: true,
            })
            .await
            .map_err(from_om)?;
        let got = page.versions.len() + page.common_prefixes.len();
        count += got as u32;
        if owner.is_none() && !page.versions.is_empty() {
            owner = Some(self::owner(&om, &s.volume, &i.bucket).await?);
        }
        for v in page.versions {
            match version_entry(v, encode, owner.as_ref().and_then(Option::as_ref)) {
                Entry::Version(v) => versions.push(v),
                Entry::Marker(m) => markers.push(m),
            }
        }
        common.extend(page.common_prefixes);
        truncated = page.truncated;
        next_key = page.next_key_marker;
        next_version = page.next_version_id_marker;
        if !truncated || got == 0 || page.next_continuation_token.is_empty() {
            break;
        }
        token = page.next_continuation_token;
    }
    if max == 0 {
        om.get_bucket(&s.volume, &i.bucket).await.map_err(from_om)?;
    }
    Ok(S3Response::new(ListObjectVersionsOutput {
        common_prefixes: prefixes(common, encode),
        delete_markers: (!markers.is_empty()).then_some(markers),
        delimiter: echo_delimiter(i.delimiter, encode),
        encoding_type: i.encoding_type,
        is_truncated: Some(truncated),
        key_marker: Some(maybe_encode(i.key_marker.unwrap_or_default(), encode)),
        max_keys: Some(max as i32),
        name: Some(i.bucket),
        next_key_marker: truncated.then(|| maybe_encode(next_key, encode)),
        next_version_id_marker: truncated.then_some(next_version),
        prefix: Some(maybe_encode(i.prefix.unwrap_or_default(), encode)),
        version_id_marker: Some(i.version_id_marker.unwrap_or_default()),
        versions: (!versions.is_empty()).then_some(versions),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sizes() {
        assert_eq!(page_size(None).unwrap(), 1000);
        assert_eq!(page_size(Some(5)).unwrap(), 5);
        assert_eq!(page_size(Some(0)).unwrap(), 0);
        assert_eq!(page_size(Some(5000)).unwrap(), 1000);
        assert!(page_size(Some(-1)).is_err());
    }

    #[test]
    fn encoding_types() {
        assert!(!url_encoded(None).unwrap());
        assert!(url_encoded(Some(&EncodingType::from_static(EncodingType::URL))).unwrap());
        assert!(url_encoded(Some(&EncodingType::from("xml".to_string()))).is_err());
    }

    #[test]
    fn keys_map_to_objects() {
        let k = KeyInfo {
            name: "dir/a b".into(),
            size: 5,
            etag: "abc".into(),
            modification_time_ms: 1_000,
            ..Default::default()
        };
        let o = object(k.clone(), true, None);
        assert_eq!(o.key.as_deref(), Some("dir/a%20b"));
        assert_eq!(o.size, Some(5));
        assert_eq!(o.e_tag, Some(ETag::Strong("abc".into())));
        assert_eq!(object(k, false, None).key.as_deref(), Some("dir/a b"));
        let p = prefixes(vec!["x y/".into()], true).unwrap();
        assert_eq!(p[0].prefix.as_deref(), Some("x%20y/"));
        assert!(prefixes(vec![], false).is_none());
    }

    #[test]
    fn versions_and_markers() {
        let v = KeyInfo {
            name: "k".into(),
            version_id: "null".into(),
            is_latest: true,
            ..Default::default()
        };
        match version_entry(v, false, None) {
            Entry::Version(v) => {
                assert_eq!(v.version_id.as_deref(), Some("null"));
                assert_eq!(v.is_latest, Some(true));
            }
            Entry::Marker(_) => panic!("a version"),
        }
        let m = KeyInfo {
            name: "k".into(),
            version_id: "00ab".into(),
            delete_marker: true,
            ..Default::default()
        };
        match version_entry(m, false, None) {
            Entry::Marker(m) => assert_eq!(m.version_id.as_deref(), Some("00ab")),
            Entry::Version(_) => panic!("a marker"),
        }
    }
}
