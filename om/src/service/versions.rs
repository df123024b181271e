//! Reads of versioned buckets: one version of a key, and ListObjectVersions.
//!
//! ListObjectVersions scans `keys` under the bucket in table order, which is
//! S3's order (key ascending, then newest first): a key's current version,
//! then its noncurrent versions and delete markers. S3's markers become one
//! seek target: after every version of a key is `key \x01`, after one of its
//! versions is just past that version's entry.

use om_proto::store::KeyRecord;

use super::pages::{Listed, RolledUp, utf8};
use super::{Consistency, OmService};
use crate::apply::versions::{self as v, Located, VersionRef};
use crate::error::OmError;
use crate::listing::{ContinuationToken, ScanSpec, Start, marker_prefix, scan_page_within};
use crate::store::iter::IterStats;
use crate::store::keys;
use crate::store::table::{self, KeyTable};

/// A protobuf varint at the front of `buf`, consumed.
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Whether a stored `KeyRecord` is a delete marker, read from its encoding
/// without decoding it: a marker never carries size, blocks, ETag, metadata
/// or content type (fields 2 to 6), so the first of those ends the question
/// for an object (usually the second field read); otherwise the answer is
/// field 13. A record that does not parse is not a marker (the listing's own
/// decode reports it).
pub fn is_delete_marker(value: &[u8]) -> bool {
    let mut buf = value;
    let mut marker = false;
    while !buf.is_empty() {
        let Some(key) = varint(&mut buf) else {
            return false;
        };
        let field = key >> 3;
        if (2..=6).contains(&field) {
            return false;
        }
        let skip = match key & 7 {
            0 => match varint(&mut buf) {
                Some(v) => {
                    if field == 13 {
                        marker = v != 0;
                    }
                    0
                }
                None => return false,
            },
            1 => 8,
            2 => match varint(&mut buf).and_then(|n| usize::try_from(n).ok()) {
                Some(n) => n,
                None => return false,
            },
            5 => 4,
            _ => return false,
        };
        match buf.get(skip..) {
            Some(rest) => buf = rest,
            None => return false,
        }
    }
    marker
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn delete_markers_are_told_from_objects_without_decoding() {
        let marker = KeyRecord {
            format: 1,
            creation_time_ms: u64::MAX,
            modification_time_ms: 1,
            object_id: 7,
            update_id: 9,
            version: u64::MAX,
            versioned: true,
            delete_marker: true,
            noncurrent_since_ms: 5,
            null_history: Some(3),
            ..Default::default()
        };
        assert!(is_delete_marker(&marker.encode_to_vec()));
        let mut not = marker.clone();
        not.delete_marker = false;
        assert!(!is_delete_marker(&not.encode_to_vec()));
        let object = KeyRecord {
            format: 1,
            size: 10,
            blocks: vec![om_proto::store::BlockRecord::default()],
            etag: "e".into(),
            metadata: [("a".to_string(), "b".to_string())].into(),
            content_type: "t".into(),
            version: 4,
            ..Default::default()
        };
        assert!(!is_delete_marker(&object.encode_to_vec()));
        // An empty object (no size, blocks or ETag) is read to the end.
        assert!(!is_delete_marker(&KeyRecord::default().encode_to_vec()));
        // Truncated or garbage bytes are not markers, and never panic.
        let bytes = marker.encode_to_vec();
        for cut in 0..bytes.len() {
            let _ = is_delete_marker(&bytes[..cut]);
        }
        assert!(!is_delete_marker(&[0xff; 12]));
        assert!(!is_delete_marker(&[0x6a, 0x05, 0x01]));
    }
}

/// A ListObjectVersions request, validated.
#[derive(Debug, Clone, Default)]
pub struct VersionListing {
    pub volume: String,
    pub bucket: String,
    pub prefix: String,
    pub delimiter: String,
    pub key_marker: String,
    pub version_id_marker: String,
    pub continuation_token: String,
    pub max_keys: u32,
}

/// One page of ListObjectVersions.
#[derive(Debug, Clone)]
pub struct VersionPage<T> {
    pub versions: Vec<T>,
    pub common_prefixes: Vec<String>,
    /// When truncated: the last item returned (a key and its version id, or
    /// a common prefix and no version id).
    pub next_key_marker: String,
    pub next_version_id_marker: String,
    /// Empty when the listing is complete.
    pub next_continuation_token: String,
    pub stats: IterStats,
}

impl OmService {
    /// Version `version_id` of a key (object or delete marker), and whether
    /// it is the current one. FILE_SYSTEM_OPTIMIZED buckets hold only "null"
    /// versions.
    pub async fn lookup_version(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<(KeyRecord, bool), OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::READ,
        )
        .await?;
        let b = self.bucket_now(volume, bucket)?;
        if b.layout == crate::apply::LAYOUT_FSO {
            if v::parse_version_id(version_id, "version_id")? == VersionRef::Null {
                let path = crate::validate::fs_path_not_root("key", key)?;
                let comps = crate::fs::components(&path);
                if let Some(crate::fs::Entry::File { rec, .. }) =
                    crate::fs::stat(&self.db, b.object_id, &comps, "key")?
                {
                    return Ok((rec, true));
                }
            }
            return Err(v::version_not_found(
                volume,
                bucket,
                key,
                version_id,
                "version_id",
            ));
        }
        let found = v::read_version(&self.db, volume, bucket, key, version_id, "version_id")?;
        let latest = matches!(found, Located::Current(_));
        Ok((found.into_record(), latest))
    }

    /// Where a ListObjectVersions page without a token starts.
    fn versions_start(&self, q: &VersionListing) -> Result<Start, OmError> {
        if q.key_marker.is_empty() {
            if !q.version_id_marker.is_empty() {
                return Err(OmError::invalid(
                    "VERSION_ID_MARKER_WITHOUT_KEY_MARKER",
                    "version_id_marker",
                    "a version-id marker needs a key marker",
                ));
            }
            return Ok(Start::Beginning);
        }
        let marker = q.key_marker.as_bytes();
        // A marker under a common prefix resumes after the whole prefix.
        if marker_prefix(marker, q.prefix.as_bytes(), q.delimiter.as_bytes(), Some(0)).is_some() {
            return Ok(Start::After(marker.to_vec()));
        }
        if q.version_id_marker.is_empty() {
            // `key \x01`: past the key and its whole history.
            let mut past = marker.to_vec();
            past.push(1);
            return Ok(Start::At(past));
        }
        let ver = v::parse_version_id(&q.version_id_marker, "version_id_marker")?;
        let current = table::get::<KeyTable>(
            &self.db,
            &keys::object_key(&q.volume, &q.bucket, &q.key_marker),
        )?;
        if current.as_ref().is_some_and(|c| v::is_version(c, ver)) {
            return Ok(Start::At(keys::key_successor(marker)));
        }
        let stamp = match ver {
            VersionRef::Stamp(s) => s,
            VersionRef::Null => match current.and_then(|c| c.null_history) {
                Some(s) => s,
                // A marker is a position, and the null version that held it
                // is gone (deleted since the page that named it): resume at
                // the key, its current version included (deleting newer
                // versions may have made an older one current). Versions
                // older than the null one were not listed yet; newer ones
                // still kept are listed again, which a scan survives (a
                // skipped version it would not).
                None => return Ok(Start::At(marker.to_vec())),
            },
        };
        let mut at = keys::key_successor(marker);
        at.extend_from_slice(&(!stamp).to_be_bytes());
        Ok(Start::At(keys::key_successor(&at)))
    }

    /// One page of every version and delete marker under `q.prefix`, in S3's
    /// order, with delimiter roll-up; `convert` turns each (key, version,
    /// is latest) into what the response carries and its bytes there.
    pub async fn list_object_versions<T>(
        &self,
        c: Consistency,
        q: VersionListing,
        mut convert: impl FnMut(String, KeyRecord, bool) -> (T, usize),
    ) -> Result<VersionPage<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(&q.volume, &q.bucket),
            crate::authz::LIST,
        )
        .await?;
        let bucket = self.object_store_bucket_now(&q.volume, &q.bucket)?;
        let expect = ContinuationToken::expected(
            "versions",
            &bucket,
            q.prefix.as_bytes(),
            q.delimiter.as_bytes(),
        );
        let start = if q.continuation_token.is_empty() {
            self.versions_start(&q)?
        } else {
            Start::At(ContinuationToken::decode_token(&q.continuation_token, &expect)?.resume)
        };
        let parent = keys::object_prefix(&q.volume, &q.bucket);
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::KEYS_CF,
                parent: &parent,
                prefix: q.prefix.as_bytes(),
                delimiter: q.delimiter.as_bytes(),
                start,
                max: self.page_size(q.max_keys),
                seek_after: self.seek_after,
                terminator: Some(0),
                current_only: None,
                at: None,
            },
            self.item_budget(),
            |item| {
                Listed::read(item, |name, value| {
                    let (key, version) = keys::split_version(&name);
                    let key = utf8(key.to_vec())?;
                    let rec = table::decode::<KeyTable>(&value)?;
                    let id = v::version_id(&rec);
                    let (t, bytes) = convert(key.clone(), rec, version.is_none());
                    Ok((key, id, t, bytes))
                })
            },
        )?;
        let rolled = RolledUp::of(page.items);
        let mut out = VersionPage {
            versions: rolled.entries,
            common_prefixes: rolled.prefixes,
            next_key_marker: String::new(),
            next_version_id_marker: String::new(),
            next_continuation_token: String::new(),
            stats: page.stats,
        };
        if let Some(resume) = page.resume {
            if let Some((key, id)) = rolled.last {
                out.next_key_marker = key;
                out.next_version_id_marker = id.unwrap_or_default();
            }
            out.next_continuation_token = ContinuationToken { resume, ..expect }.encode_token();
        }
        Ok(out)
    }
}
