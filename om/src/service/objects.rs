//! Reads of keys: lookups, ListKeys, ListOpenKeys and ListDeletedBlocks.

use om_proto::store::{BucketRecord, DeletedBlocksRecord, KeyRecord, OpenKeyRecord};

use super::pages::{Listed, RolledUp, entry, utf8};
use super::{Consistency, OmService, versions};
use crate::error::OmError;
use crate::listing::{ContinuationToken, ScanSpec, Start, scan_page_within};
use crate::store::iter::IterStats;
use crate::store::keys;
use crate::store::table::{self, DeletedBlocksTable, KeyTable, OpenFileTable, OpenKeyTable};

/// A ListKeys request, validated.
#[derive(Debug, Clone, Default)]
pub struct KeyListing {
    pub volume: String,
    pub bucket: String,
    pub prefix: String,
    pub delimiter: String,
    pub start_after: String,
    pub continuation_token: String,
    pub max_keys: u32,
    /// Lists this snapshot of the bucket; empty: the live bucket.
    pub snapshot: String,
}

/// One page of ListKeys: keys as the caller converted them.
#[derive(Debug, Clone)]
pub struct KeyPage<T> {
    pub keys: Vec<T>,
    pub common_prefixes: Vec<String>,
    pub next_start_after: String,
    /// Empty when the listing is complete.
    pub next_continuation_token: String,
    pub stats: IterStats,
}

/// One page of ListOpenKeys.
#[derive(Debug, Clone)]
pub struct OpenKeyPage<T> {
    pub keys: Vec<T>,
    pub next_continuation_token: String,
    /// Open keys in the whole bucket.
    pub total: u64,
    pub stats: IterStats,
}

/// An entry id of the deleted-blocks table: the releasing log index and the
/// sequence within it.
pub type DeletedId = (u64, u32);

/// One page of ListDeletedBlocks.
#[derive(Debug, Clone)]
pub struct DeletedPage<T> {
    pub entries: Vec<T>,
    /// The last entry returned, when truncated.
    pub last: Option<DeletedId>,
    pub truncated: bool,
    pub stats: IterStats,
}

impl OmService {
    pub async fn lookup_key(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        key: &str,
    ) -> Result<KeyRecord, OmError> {
        self.lookup_key_in(c, volume, bucket, key, "").await
    }

    /// The current version of a key, as snapshot `snapshot` of the bucket
    /// shows it (empty: the live bucket).
    pub async fn lookup_key_in(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        key: &str,
        snapshot: &str,
    ) -> Result<KeyRecord, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::READ,
        )
        .await?;
        let b = self.bucket_now(volume, bucket)?;
        if !snapshot.is_empty() {
            let at = self
                .snapshot_now(volume, bucket, snapshot, "snapshot")?
                .index;
            return crate::store::snapshot::key_at(
                &self.db,
                &keys::object_key(volume, bucket, key),
                at,
            )?
            .ok_or_else(|| {
                OmError::not_found(
                    "KEY_NOT_FOUND",
                    "key",
                    format!("snapshot {snapshot:?} of {volume}/{bucket} has no key {key}"),
                )
            });
        }
        if b.layout == crate::apply::LAYOUT_FSO {
            // A key of an FSO bucket is a file path.
            let path = crate::validate::fs_path_not_root("key", key)?;
            let comps = crate::fs::components(&path);
            if let Some(crate::fs::Entry::File { rec, .. }) =
                crate::fs::stat(&self.db, b.object_id, &comps, "key")?
            {
                return Ok(rec);
            }
        }
        // The current version; a delete marker is returned as such (the
        // edge answers NOT_FOUND for it, saying so).
        table::get::<KeyTable>(&self.db, &keys::object_key(volume, bucket, key))?.ok_or_else(|| {
            OmError::not_found(
                "KEY_NOT_FOUND",
                "key",
                format!("key {volume}/{bucket}/{key} does not exist"),
            )
        })
    }

    /// One page of keys, with S3 delimiter roll-up and continuation tokens;
    /// `convert` turns each key (name, record) into what the response carries
    /// and says how many bytes it adds there.
    pub async fn list_keys<T>(
        &self,
        c: Consistency,
        q: KeyListing,
        mut convert: impl FnMut(String, KeyRecord) -> (T, usize),
    ) -> Result<KeyPage<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(&q.volume, &q.bucket),
            crate::authz::LIST,
        )
        .await?;
        let bucket = self.object_store_bucket_now(&q.volume, &q.bucket)?;
        let at = if q.snapshot.is_empty() {
            None
        } else {
            Some(
                self.snapshot_now(&q.volume, &q.bucket, &q.snapshot, "snapshot")?
                    .index,
            )
        };
        // A token resumes only the listing it came from: the live bucket,
        // or one snapshot (by index, which a rename keeps).
        let listing = match at {
            None => "keys".to_string(),
            Some(at) => format!("keys@{at}"),
        };
        let expect = ContinuationToken::expected(
            &listing,
            &bucket,
            q.prefix.as_bytes(),
            q.delimiter.as_bytes(),
        );
        let start = if !q.continuation_token.is_empty() {
            Start::At(ContinuationToken::decode_token(&q.continuation_token, &expect)?.resume)
        } else if q.start_after.is_empty() {
            Start::Beginning
        } else {
            Start::After(q.start_after.as_bytes().to_vec())
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
                terminator: None,
                current_only: (bucket.versioning != crate::apply::versions::UNVERSIONED).then_some(
                    crate::listing::CurrentOnly {
                        hidden: versions::is_delete_marker,
                    },
                ),
                at,
            },
            self.item_budget(),
            |item| {
                Listed::read(item, |name, value| {
                    let name = utf8(name)?;
                    let (t, bytes) = convert(name.clone(), table::decode::<KeyTable>(&value)?);
                    Ok((name, (), t, bytes))
                })
            },
        )?;
        let rolled = RolledUp::of(page.items);
        let mut out = KeyPage {
            keys: rolled.entries,
            common_prefixes: rolled.prefixes,
            next_start_after: String::new(),
            next_continuation_token: String::new(),
            stats: page.stats,
        };
        if let Some(resume) = page.resume {
            out.next_start_after = rolled.last.map(|(name, _)| name).unwrap_or_default();
            out.next_continuation_token = ContinuationToken { resume, ..expect }.encode_token();
        }
        Ok(out)
    }

    pub(super) fn object_store_bucket_now(
        &self,
        volume: &str,
        bucket: &str,
    ) -> Result<BucketRecord, OmError> {
        crate::apply::require_layout(
            self.bucket_now(volume, bucket)?,
            crate::apply::LAYOUT_OBJECT_STORE,
        )
    }

    /// Sessions of keys under `prefix` being written, in key order; stops at
    /// the end of the prefix. `convert` turns each (name, session) into what
    /// the response carries and says how many bytes it adds there.
    #[allow(clippy::too_many_arguments)]
    pub async fn list_open_keys<T>(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        prefix: &str,
        max: u32,
        token: &str,
        mut convert: impl FnMut(String, OpenKeyRecord) -> (T, usize),
    ) -> Result<OpenKeyPage<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::LIST,
        )
        .await?;
        let b = self.bucket_now(volume, bucket)?;
        if b.layout == crate::apply::LAYOUT_FSO {
            return self.list_open_files(&b, prefix, max, token, convert);
        }
        let expect = ContinuationToken::expected("open_keys", &b, prefix.as_bytes(), &[]);
        let start = if token.is_empty() {
            Start::Beginning
        } else {
            Start::At(ContinuationToken::decode_token(token, &expect)?.resume)
        };
        let parent = keys::object_prefix(volume, bucket);
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::OPEN_KEYS_CF,
                parent: &parent,
                prefix: prefix.as_bytes(),
                delimiter: b"",
                start,
                max: self.page_size(max),
                seek_after: usize::MAX,
                terminator: None,
                current_only: None,
                at: None,
            },
            self.item_budget(),
            |item| {
                let (name, value) = entry(item)?;
                let (key, _) = keys::split_key_run(&name)
                    .ok_or_else(|| OmError::Internal("malformed open-key entry".to_string()))?;
                Ok(convert(
                    utf8(key.to_vec())?,
                    table::decode::<OpenKeyTable>(&value)?,
                ))
            },
        )?;
        let mut out = OpenKeyPage {
            keys: page.items,
            next_continuation_token: String::new(),
            total: b.open_key_count,
            stats: page.stats,
        };
        if let Some(resume) = page.resume {
            out.next_continuation_token = ContinuationToken { resume, ..expect }.encode_token();
        }
        Ok(out)
    }

    /// ListOpenKeys of an FSO bucket: the files being written in the
    /// directory named by `prefix` up to its last `/`, whose names start with
    /// the rest; one seek in `open_files`, bounded by that directory's range.
    pub(super) fn list_open_files<T>(
        &self,
        b: &BucketRecord,
        prefix: &str,
        max: u32,
        token: &str,
        mut convert: impl FnMut(String, OpenKeyRecord) -> (T, usize),
    ) -> Result<OpenKeyPage<T>, OmError> {
        let (dir, name_prefix) = match prefix.rfind('/') {
            Some(i) => (&prefix[..i], &prefix[i + 1..]),
            None => ("", prefix),
        };
        let dir = crate::validate::fs_path("prefix", dir)?;
        let comps = crate::fs::components(&dir);
        let empty = OpenKeyPage::<T> {
            keys: Vec::new(),
            next_continuation_token: String::new(),
            total: b.open_key_count,
            stats: IterStats::default(),
        };
        let dir_id = match crate::fs::walk_dirs(&self.db, b.object_id, &comps, "prefix")? {
            crate::fs::Walk::Dir(id) => id,
            crate::fs::Walk::Missing { .. } => return Ok(empty),
        };
        let expect = ContinuationToken::expected("open_files", b, prefix.as_bytes(), &[]);
        let start = if token.is_empty() {
            Start::Beginning
        } else {
            Start::At(ContinuationToken::decode_token(token, &expect)?.resume)
        };
        let parent = keys::children_prefix(dir_id);
        let base = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::OPEN_FILES_CF,
                parent: &parent,
                prefix: name_prefix.as_bytes(),
                delimiter: b"",
                start,
                max: self.page_size(max),
                seek_after: usize::MAX,
                terminator: None,
                current_only: None,
                at: None,
            },
            self.item_budget(),
            |item| {
                let (name, value) = entry(item)?;
                let (name, _) = keys::split_key_run(&name)
                    .ok_or_else(|| OmError::Internal("malformed open-file entry".to_string()))?;
                let name = utf8(name.to_vec())?;
                Ok(convert(
                    format!("{base}{name}"),
                    table::decode::<OpenFileTable>(&value)?,
                ))
            },
        )?;
        let mut out = OpenKeyPage {
            keys: page.items,
            stats: page.stats,
            ..empty
        };
        if let Some(resume) = page.resume {
            out.next_continuation_token = ContinuationToken { resume, ..expect }.encode_token();
        }
        Ok(out)
    }

    /// Entries of the deleted-blocks table after `after`, oldest first. An
    /// entry stays (and is listed again) until acknowledged.
    /// `convert` turns each entry into what the response carries and says
    /// how many bytes it adds there.
    pub async fn list_deleted_blocks<T>(
        &self,
        c: Consistency,
        after: Option<DeletedId>,
        max: u32,
        mut convert: impl FnMut(DeletedId, DeletedBlocksRecord) -> (T, usize),
    ) -> Result<DeletedPage<T>, OmError> {
        // RECLAIM: admins, and gateways granted it.
        self.read_as(c, crate::authz::Resource::Cluster, crate::authz::RECLAIM)
            .await?;
        let start = match after {
            None => Start::Beginning,
            Some((index, seq)) => Start::After(keys::deleted_blocks_key(index, seq)),
        };
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::DELETED_BLOCKS_CF,
                parent: b"",
                prefix: b"",
                delimiter: b"",
                start,
                max: self.page_size(max),
                seek_after: usize::MAX,
                terminator: None,
                current_only: None,
                at: None,
            },
            self.item_budget(),
            |item| {
                let (name, value) = entry(item)?;
                if name.len() != 12 {
                    return Err(OmError::Internal(
                        "malformed deleted-blocks key".to_string(),
                    ));
                }
                let index = u64::from_be_bytes(name[..8].try_into().unwrap_or_default());
                let seq = u32::from_be_bytes(name[8..].try_into().unwrap_or_default());
                let (t, bytes) =
                    convert((index, seq), table::decode::<DeletedBlocksTable>(&value)?);
                Ok((((index, seq), t), bytes))
            },
        )?;
        let truncated = page.resume.is_some();
        Ok(DeletedPage {
            last: if truncated {
                page.items.last().map(|(id, _)| *id)
            } else {
                None
            },
            entries: page.items.into_iter().map(|(_, t)| t).collect(),
            truncated,
            stats: page.stats,
        })
    }
}
