//! Versioned buckets (rules 3), with S3's semantics.
//!
//! A bucket is unversioned until `SetBucketVersioning` enables it; it can then
//! move between enabled and suspended, never back. In `keys` a key's current
//! version sits at the key and its noncurrent versions and delete markers
//! right after it, newest first (`keys::version_key`).
//!
//! - Enabled: a write makes a new current version; the previous one becomes
//!   noncurrent (stamped with the write's time) and keeps its blocks. A delete
//!   without a version id adds a delete marker as the current version.
//! - Suspended: a write or a delete without a version id replaces the "null"
//!   version (current or noncurrent; its blocks are freed) and leaves the
//!   others alone; a delete adds a "null" delete marker.
//! - A delete naming a version removes it permanently; when it was current,
//!   the newest noncurrent one becomes current.
//!
//! Version stamps come from the log index (`version_stamp`), so apply stays
//! deterministic; a version's id is its stamp in hex, or "null". Usage counts
//! every version that holds data (current or not); delete markers count for
//! nothing, so a delete never grows usage and is never refused by a quota.
//!
//! One command may touch the same key more than once (DeleteKeys naming
//! several versions of one key): reads inside apply see the state before the
//! entry, so every read and write of `keys` here goes through `Ctx`'s staged
//! view (`key_get`, `key_put`, `key_del`, `newest_noncurrent`).

use om_proto::store::{BucketRecord, KeyRecord};
use om_raft_store::EntryWrites;

use super::Ctx;
use super::quota::Usage;
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, KeyTable};
use crate::store::view::StateRead;

pub use crate::store::records::{
    ENABLED, NULL_VERSION_ID, SUSPENDED, UNVERSIONED, VERSION_ID_CHARS, VersionRef,
    parse_version_id, version_id, version_stamp,
};

/// DeleteKeys' version ids: none, or one per key (INVALID_ARGUMENT
/// `INVALID_VERSION_ID_COUNT`), checked at the edge and in apply alike.
pub fn check_version_id_count(keys: usize, ids: usize) -> Result<(), OmError> {
    if ids == 0 || ids == keys {
        return Ok(());
    }
    Err(OmError::invalid(
        "INVALID_VERSION_ID_COUNT",
        "version_ids",
        format!("version_ids holds {ids} entries for {keys} keys; give none or one per key"),
    ))
}

/// Whether `rec` is the version `v` names.
pub fn is_version(rec: &KeyRecord, v: VersionRef) -> bool {
    match v {
        VersionRef::Null => !rec.versioned,
        VersionRef::Stamp(s) => rec.versioned && rec.version == s,
    }
}

/// Where a version lives: the current entry, or a noncurrent one at its
/// table key.
#[derive(Debug, Clone, PartialEq)]
pub enum Located {
    Current(KeyRecord),
    Noncurrent(Vec<u8>, KeyRecord),
}

impl Located {
    pub fn record(&self) -> &KeyRecord {
        match self {
            Located::Current(r) | Located::Noncurrent(_, r) => r,
        }
    }

    pub fn into_record(self) -> KeyRecord {
        match self {
            Located::Current(r) | Located::Noncurrent(_, r) => r,
        }
    }
}

/// Finds version `v` of a key whose current entry is `current`, reading
/// noncurrent entries with `get`: at most one point read.
pub fn locate(
    volume: &str,
    bucket: &str,
    key: &str,
    current: Option<KeyRecord>,
    v: VersionRef,
    mut get: impl FnMut(&[u8]) -> Result<Option<KeyRecord>, OmError>,
) -> Result<Option<Located>, OmError> {
    let Some(current) = current else {
        return Ok(None);
    };
    if is_version(&current, v) {
        return Ok(Some(Located::Current(current)));
    }
    let stamp = match v {
        VersionRef::Stamp(s) => s,
        VersionRef::Null => match current.null_history {
            Some(s) => s,
            None => return Ok(None),
        },
    };
    let hk = keys::version_key(volume, bucket, key, stamp);
    Ok(get(&hk)?
        .filter(|r| is_version(r, v))
        .map(|r| Located::Noncurrent(hk, r)))
}

/// Reads version `version_id` (field `field`) of a key from committed state:
/// NOT_FOUND `VERSION_NOT_FOUND` when there is no such version.
pub fn read_version(
    db: &(impl StateRead + ?Sized),
    volume: &str,
    bucket: &str,
    key: &str,
    version_id: &str,
    field: &str,
) -> Result<Located, OmError> {
    let v = parse_version_id(version_id, field)?;
    let current = table::get::<KeyTable>(db, &keys::object_key(volume, bucket, key))?;
    locate(volume, bucket, key, current, v, |k| {
        table::get::<KeyTable>(db, k)
    })?
    .ok_or_else(|| version_not_found(volume, bucket, key, version_id, field))
}

pub fn version_not_found(
    volume: &str,
    bucket: &str,
    key: &str,
    version_id: &str,
    field: &str,
) -> OmError {
    OmError::not_found(
        "VERSION_NOT_FOUND",
        field,
        format!(
            "key {volume}/{bucket}/{key} has no version {:?}",
            crate::validate::quote_prefix(version_id)
        ),
    )
}

/// A key's versions a new current version (object or delete marker)
/// affects. Read before anything is staged.
#[derive(Debug, Default)]
pub(super) struct Supersede {
    /// The key's current entry, if any (possibly a delete marker).
    pub current: Option<KeyRecord>,
    /// The version the write removes: unversioned, the current one;
    /// suspended, the "null" version wherever it is; enabled, none.
    pub removed: Option<Located>,
    versioning: u32,
}

impl Supersede {
    /// The current version when it is an object (not a delete marker): what
    /// a write's conditions are checked against.
    pub fn live(&self) -> Option<&KeyRecord> {
        self.current.as_ref().filter(|r| !r.delete_marker)
    }

    /// How a new version of `size` bytes changes usage.
    pub fn usage(&self, size: u64, adds_object: bool) -> Usage {
        if self.versioning == UNVERSIONED {
            return Usage::write(self.current.as_ref(), size);
        }
        let mut u = Usage {
            add_bytes: size,
            add_keys: u64::from(adds_object),
            ..Usage::default()
        };
        if let Some(r) = &self.removed {
            u.free(removal(r.record()));
        }
        u
    }

    /// Whether the write removes exactly this version (a copy of a version
    /// onto the key it replaces keeps the blocks instead of sharing them).
    pub fn removes(&self, rec: &KeyRecord) -> bool {
        self.removed.as_ref().is_some_and(|r| {
            r.record().versioned == rec.versioned && r.record().version == rec.version
        })
    }

    /// Forgets the removed version's blocks (they move to the new version).
    pub fn keep_removed_blocks(&mut self) {
        if let Some(Located::Current(r) | Located::Noncurrent(_, r)) = self.removed.as_mut() {
            r.blocks.clear();
        }
    }

    /// Unversioned buckets: the current version the write replaces, as
    /// `removed` holds it (a copy onto itself kept its blocks there).
    pub fn into_current(self) -> Option<KeyRecord> {
        self.removed.map(Located::into_record)
    }

    pub fn versioning(&self) -> u32 {
        self.versioning
    }
}

/// What removing `rec` frees.
pub(super) fn removal(rec: &KeyRecord) -> Usage {
    if rec.delete_marker {
        Usage::default()
    } else {
        Usage::removal(rec.size)
    }
}

impl Ctx<'_> {
    /// A `keys` entry as this command left it so far.
    pub(super) fn key_get(&self, k: &[u8]) -> Result<Option<KeyRecord>, OmError> {
        if let Some(staged) = self.staged_keys.borrow().get(k) {
            return Ok(staged.clone());
        }
        table::get::<KeyTable>(self.db, k)
    }

    /// Stages `rec` at `keys` entry `k` of `bucket`; an entry it replaces
    /// is retired first (`snapshots::retire`).
    pub(super) fn key_put(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        k: &[u8],
        mut rec: KeyRecord,
    ) -> Result<KeyRecord, OmError> {
        if let Some(old) = self.key_get(k)? {
            self.retire(b, bucket, k, &old)?;
        }
        self.log_change(b, bucket, k)?;
        rec.written_index = self.written_index();
        table::put::<KeyTable>(self.db, b, k, &mut rec)?;
        self.staged_keys
            .borrow_mut()
            .insert(k.to_vec(), Some(rec.clone()));
        Ok(rec)
    }

    /// Stages the deletion of `keys` entry `k` of `bucket`, retiring it
    /// first (`snapshots::retire`).
    pub(super) fn key_del(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        k: &[u8],
    ) -> Result<(), OmError> {
        if let Some(old) = self.key_get(k)? {
            self.retire(b, bucket, k, &old)?;
        }
        self.log_change(b, bucket, k)?;
        table::delete::<KeyTable>(self.db, b, k)?;
        self.staged_keys.borrow_mut().insert(k.to_vec(), None);
        Ok(())
    }

    /// The newest noncurrent version of the key whose run starts at
    /// `run_prefix`, as this command left it: one seek, plus one `next` per
    /// entry this command removed from the front of the run.
    pub(super) fn newest_noncurrent(
        &self,
        run_prefix: &[u8],
    ) -> Result<Option<(Vec<u8>, KeyRecord)>, OmError> {
        let end = keys::prefix_end(run_prefix);
        let staged = self.staged_keys.borrow();
        let from_staged = staged
            .range(run_prefix.to_vec()..)
            .take_while(|(k, _)| end.as_ref().is_none_or(|e| k.as_slice() < e.as_slice()))
            .find_map(|(k, v)| v.as_ref().map(|r| (k.clone(), r.clone())));
        let mut it = self.db.iter_prefix(keys::KEYS_CF, run_prefix)?;
        it.seek(run_prefix);
        let mut from_db = None;
        while let Some((k, v)) = it.current() {
            match staged.get(k) {
                Some(None) => it.advance(),
                Some(Some(r)) => {
                    from_db = Some((k.to_vec(), r.clone()));
                    break;
                }
                None => {
                    from_db = Some((k.to_vec(), table::decode::<KeyTable>(v)?));
                    break;
                }
            }
        }
        it.status()?;
        Ok(match (from_staged, from_db) {
            (Some(s), Some(d)) => Some(if s.0 <= d.0 { s } else { d }),
            (s, d) => s.or(d),
        })
    }

    /// Reads what a new current version of `name` would affect.
    pub(super) fn supersede(
        &self,
        bucket: &BucketRecord,
        name: &str,
    ) -> Result<Supersede, OmError> {
        let current = self.key_get(&keys::object_key(&bucket.volume, &bucket.name, name))?;
        let removed = match bucket.versioning {
            ENABLED => None,
            SUSPENDED => locate(
                &bucket.volume,
                &bucket.name,
                name,
                current.clone(),
                VersionRef::Null,
                |k| self.key_get(k),
            )?,
            _ => current.clone().map(Located::Current),
        };
        Ok(Supersede {
            current,
            removed,
            versioning: bucket.versioning,
        })
    }

    /// The stamp of the next version this command creates.
    fn next_version(&self) -> u64 {
        let n = self.versions_made.get();
        self.versions_made.set(n.wrapping_add(1));
        self.version_stamp(n)
    }

    /// Stages `rec` as the new current version of `name` in a versioned
    /// bucket: the removed version's blocks go (release sequence `seq`), the
    /// previous current version becomes noncurrent. Stamps the version
    /// fields and times; returns the record as staged. The caller charged
    /// usage (`Supersede::usage`) and stages the bucket.
    pub(super) fn put_version(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        name: &str,
        sup: Supersede,
        mut rec: KeyRecord,
        seq: u32,
    ) -> Result<KeyRecord, OmError> {
        let key = keys::object_key(&bucket.volume, &bucket.name, name);
        let enabled = bucket.versioning == ENABLED;
        let mut removed_current = false;
        if let Some(r) = sup.removed {
            let origin = format!("overwrite {}/{}/{name}", bucket.volume, bucket.name);
            match r {
                Located::Current(old) => {
                    removed_current = true;
                    self.retire(b, bucket, &key, &old)?;
                    self.release_blocks(b, seq, old.blocks, origin)?;
                }
                Located::Noncurrent(hk, old) => {
                    self.retire(b, bucket, &hk, &old)?;
                    self.release_blocks(b, seq, old.blocks, origin)?;
                    self.key_del(b, bucket, &hk)?;
                }
            }
        }
        rec.null_history = None;
        if let Some(mut old) = sup.current.filter(|_| !removed_current) {
            if enabled {
                rec.null_history = if old.versioned {
                    old.null_history
                } else {
                    Some(old.version)
                };
            }
            let hk = keys::version_key(&bucket.volume, &bucket.name, name, old.version);
            old.noncurrent_since_ms = self.now;
            old.null_history = None;
            self.key_put(b, bucket, &hk, old)?;
        }
        rec.creation_time_ms = self.now;
        rec.modification_time_ms = self.now;
        rec.object_id = self.object_id(0);
        rec.update_id = self.index;
        rec.version = self.next_version();
        rec.versioned = enabled;
        rec.noncurrent_since_ms = 0;
        self.key_put(b, bucket, &key, rec)
    }

    /// Deletes `name` without a version id in a versioned bucket: a delete
    /// marker becomes its current version. Adds what it frees to `freed`.
    pub(super) fn add_delete_marker(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        name: &str,
        seq: u32,
        freed: &mut Usage,
    ) -> Result<KeyRecord, OmError> {
        let sup = self.supersede(bucket, name)?;
        freed.free(sup.usage(0, false));
        // Scalars only: listings tell markers from objects by the absence
        // of fields 2 to 6 (`service::versions::is_delete_marker`).
        let marker = KeyRecord {
            delete_marker: true,
            ..Default::default()
        };
        self.put_version(b, bucket, name, sup, marker, seq)
    }

    /// Removes version `version_id` of `name` permanently (any bucket; in an
    /// unversioned one only "null" exists). When it was current, the newest
    /// noncurrent version becomes current. Refusals (malformed or unknown
    /// version) come before anything is staged. Returns the removed version.
    pub(super) fn remove_version(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        name: &str,
        version_id: &str,
        seq: u32,
        freed: &mut Usage,
    ) -> Result<KeyRecord, OmError> {
        let (volume, bname) = (&bucket.volume, &bucket.name);
        let v = parse_version_id(version_id, "version_id")?;
        let key = keys::object_key(volume, bname, name);
        let current = self.key_get(&key)?;
        let found = locate(volume, bname, name, current.clone(), v, |k| self.key_get(k))?
            .ok_or_else(|| version_not_found(volume, bname, name, version_id, "version_id"))?;
        let origin = format!("delete {volume}/{bname}/{name} version {version_id}");
        match found {
            Located::Current(old) => {
                freed.free(removal(&old));
                let run = keys::key_run_prefix(volume, bname, name);
                let next = self.newest_noncurrent(&run)?;
                self.retire(b, bucket, &key, &old)?;
                self.release_blocks(b, seq, old.blocks.clone(), origin)?;
                match next {
                    Some((hk, mut promoted)) => {
                        self.key_del(b, bucket, &hk)?;
                        promoted.null_history = if promoted.versioned {
                            old.null_history
                        } else {
                            None
                        };
                        promoted.noncurrent_since_ms = 0;
                        self.key_put(b, bucket, &key, promoted)?;
                    }
                    None => self.key_del(b, bucket, &key)?,
                }
                Ok(old)
            }
            Located::Noncurrent(hk, old) => {
                freed.free(removal(&old));
                self.retire(b, bucket, &hk, &old)?;
                self.release_blocks(b, seq, old.blocks.clone(), origin)?;
                self.key_del(b, bucket, &hk)?;
                if !old.versioned
                    && let Some(mut cur) = current
                {
                    cur.null_history = None;
                    self.key_put(b, bucket, &key, cur)?;
                }
                Ok(old)
            }
        }
    }
}

#[cfg(test)]
mod tests;
