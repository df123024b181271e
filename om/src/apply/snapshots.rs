//! Snapshots of a bucket (rules 16): frozen images of its `keys` entries.
//!
//! A snapshot is one record: the log index `S` of the entry that created it.
//! Nothing is copied. Every write of a `keys` entry stamps the entry's
//! `written_index`; a snapshot shows the entries written below `S` that had
//! not left the table by `S`. When an entry some snapshot shows leaves the
//! table (deleted, overwritten, retagged, moved to noncurrent, renamed),
//! `retire` first copies it to `snapshot_keys` under its key and the index
//! of the entry retiring it, and adds the copy as a holder of its blocks.
//! Only the newest live snapshot needs checking: an entry written below an
//! older one is written below it too. So a snapshot reads the live table
//! (entries written below `S`) merged with `snapshot_keys` (copies written
//! below `S` and retired above it), which `store::snapshot` does.
//!
//! Deleting a snapshot moves its record to the reclaim queue; the leader's
//! reclaimer pages through the bucket's retained copies
//! (`ReclaimSnapshot`), dropping each that no live snapshot shows any more
//! and releasing its blocks.

use om_proto::store::{
    self as st, BucketRecord, CommandResult, KeyRecord, SnapshotRecord, command_result,
};
use om_raft_store::EntryWrites;

use super::ops::Operation;
use super::{Ctx, limits, ok};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, RetainedKeyTable, SnapshotTable};
use crate::store::view::StateRead;

fn needs_rules(rules: u32) -> Result<(), OmError> {
    if crate::rules::BUCKET_SNAPSHOTS.holds(rules) {
        return Ok(());
    }
    Err(OmError::invalid(
        "UNSUPPORTED_COMMAND",
        "op",
        format!(
            "snapshots need apply rules {}",
            crate::rules::BUCKET_SNAPSHOTS.since
        ),
    ))
}

fn snapshot_target(volume: &str, bucket: &str, name: &str) -> String {
    format!("{}/.snapshot/{name}", Resource::Bucket(volume, bucket))
}

impl Operation for om_proto::store::CreateSnapshot {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        snapshot_target(&self.volume, &self.bucket, &self.name)
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::bucket(&self.volume, &self.bucket)?;
        crate::validate::snapshot_name("name", &self.name)?;
        needs_rules(rules)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.create_snapshot(b, self)
    }
}

/// Deleting a snapshot releases what only it held: whoever may delete
/// the bucket's keys may delete it.
impl Operation for om_proto::store::DeleteSnapshot {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(
            Resource::Bucket(&self.volume, &self.bucket),
            authz::WRITE | authz::DELETE,
        )]
    }

    fn target(&self) -> String {
        snapshot_target(&self.volume, &self.bucket, &self.name)
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::bucket(&self.volume, &self.bucket)?;
        crate::validate::snapshot_name("name", &self.name)?;
        needs_rules(rules)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.delete_snapshot(b, self)
    }
}

impl Operation for om_proto::store::RenameSnapshot {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        snapshot_target(&self.volume, &self.bucket, &self.name)
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::bucket(&self.volume, &self.bucket)?;
        crate::validate::snapshot_name("name", &self.name)?;
        crate::validate::snapshot_name("new_name", &self.new_name)?;
        needs_rules(rules)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.rename_snapshot(b, self)
    }
}

/// The leader's reclaimer only.
impl Operation for om_proto::store::ReclaimSnapshot {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
    }

    fn target(&self) -> String {
        Resource::Bucket(&self.volume, &self.bucket).to_string()
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::bucket(&self.volume, &self.bucket)?;
        if self.max == 0 || self.max > crate::limits::MAX_RECLAIM_PAGE {
            return Err(OmError::invalid(
                "INVALID_ARGUMENT",
                "max",
                format!(
                    "a reclaim page examines 1 to {} retained versions",
                    crate::limits::MAX_RECLAIM_PAGE
                ),
            ));
        }
        needs_rules(rules)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.reclaim_snapshot(b, self)
    }
}

fn snapshot_not_found(volume: &str, bucket: &str, name: &str, field: &str) -> OmError {
    OmError::not_found(
        "SNAPSHOT_NOT_FOUND",
        field,
        format!("bucket {volume}/{bucket} has no snapshot {name:?}"),
    )
}

impl Ctx<'_> {
    /// Before the `keys` entry at `table_key` (holding `old`) leaves the
    /// table or is rewritten by this command: when a live snapshot shows it,
    /// keeps a copy in `snapshot_keys` that holds its blocks too. Call it
    /// before the command releases `old`'s blocks; once per entry and
    /// command is enough (later calls keep the first copy).
    pub(super) fn retire(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        table_key: &[u8],
        old: &KeyRecord,
    ) -> Result<(), OmError> {
        if bucket.latest_snapshot <= old.written_index || self.retired.borrow().contains(table_key)
        {
            return Ok(());
        }
        for blk in &old.blocks {
            if self.block_holders(blk.block_id)? == 0 {
                return Err(OmError::Internal(format!(
                    "block {} was released before its key was retired",
                    blk.block_id
                )));
            }
        }
        self.share_blocks(b, &old.blocks)?;
        let mut copy = old.clone();
        table::put::<RetainedKeyTable>(
            self.db,
            b,
            &keys::retained_key(table_key, self.index),
            &mut copy,
        )?;
        self.retired.borrow_mut().insert(table_key.to_vec());
        Ok(())
    }

    /// Before current key `table_key` of `bucket` changes (written or
    /// deleted): while the bucket holds a snapshot, logs the change (with
    /// the key's previous change, so a diff reports each key once), which
    /// a diff reads instead of walking the bucket. Once per key and command.
    pub(super) fn log_change(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        table_key: &[u8],
    ) -> Result<(), OmError> {
        if bucket.latest_snapshot == 0 {
            return Ok(());
        }
        let prefix = keys::object_prefix(&bucket.volume, &bucket.name);
        let Some(name) = table_key.strip_prefix(prefix.as_slice()) else {
            return Err(OmError::Internal(
                "a key logged outside its bucket".to_string(),
            ));
        };
        // A noncurrent version's entry: not a change of the key.
        if name.contains(&0) || !self.changed.borrow_mut().insert(table_key.to_vec()) {
            return Ok(());
        }
        let cf = table::cf(self.db.rocks(), keys::SNAPSHOT_CHANGES_CF)?;
        let last = keys::last_change_key(table_key);
        let prev = match table::get_raw(self.db, keys::SNAPSHOT_CHANGES_CF, &last)? {
            Some(v) => index_of(&v)?,
            None => 0,
        };
        b.put_cf(
            cf,
            keys::change_key(&bucket.volume, &bucket.name, self.index, name),
            prev.to_be_bytes(),
        );
        b.put_cf(cf, last, self.index.to_be_bytes());
        Ok(())
    }

    /// The index a `keys` entry written now records (0 before rules 16).
    pub(super) fn written_index(&self) -> u64 {
        if crate::rules::BUCKET_SNAPSHOTS.holds(self.rules) {
            self.index
        } else {
            0
        }
    }

    pub(super) fn create_snapshot(
        &self,
        b: &mut EntryWrites<'_>,
        c: &st::CreateSnapshot,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.object_store_bucket(&c.volume, &c.bucket)?;
        let key = keys::snapshot_key(&c.volume, &c.bucket, &c.name);
        if table::get::<SnapshotTable>(self.db, &key)?.is_some() {
            return Err(OmError::exists(
                "SNAPSHOT_ALREADY_EXISTS",
                "name",
                format!(
                    "bucket {}/{} already has a snapshot {:?}",
                    c.volume, c.bucket, c.name
                ),
            ));
        }
        if bucket.snapshot_count >= crate::limits::MAX_BUCKET_SNAPSHOTS {
            return Err(OmError::precondition(
                "TOO_MANY_SNAPSHOTS",
                "bucket",
                format!(
                    "bucket {}/{} holds {} snapshots (deleted ones count until reclaimed), \
                     the most a bucket holds",
                    c.volume, c.bucket, bucket.snapshot_count
                ),
            ));
        }
        let mut rec = SnapshotRecord {
            format: 0,
            volume: c.volume.clone(),
            bucket: c.bucket.clone(),
            name: c.name.clone(),
            index: self.index,
            creation_time_ms: self.now,
            creator: self.caller.map(|c| c.user.clone()).unwrap_or_default(),
            bucket_object_id: bucket.object_id,
            key_count: bucket.key_count,
            used_bytes: bucket.used_bytes,
            deleted: false,
            reclaim_cursor: Vec::new(),
        };
        table::put::<SnapshotTable>(self.db, b, &key, &mut rec)?;
        self.put_snapshot_index(b, &c.volume, &c.bucket, self.index, Some(&c.name))?;
        bucket.latest_snapshot = self.index;
        bucket.snapshot_count += 1;
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::Snapshot(rec))
    }

    fn put_snapshot_index(
        &self,
        b: &mut EntryWrites<'_>,
        volume: &str,
        bucket: &str,
        index: u64,
        name: Option<&str>,
    ) -> Result<(), OmError> {
        let cf = table::cf(self.db.rocks(), keys::SNAPSHOTS_CF)?;
        let k = keys::snapshot_index_key(volume, bucket, index);
        match name {
            Some(n) => b.put_cf(cf, k, n.as_bytes()),
            None => b.delete_cf(cf, k),
        }
        Ok(())
    }

    /// The live snapshot record `name` of a bucket.
    fn snapshot(&self, volume: &str, bucket: &str, name: &str) -> Result<SnapshotRecord, OmError> {
        table::get::<SnapshotTable>(self.db, &keys::snapshot_key(volume, bucket, name))?
            .ok_or_else(|| snapshot_not_found(volume, bucket, name, "name"))
    }

    pub(super) fn delete_snapshot(
        &self,
        b: &mut EntryWrites<'_>,
        c: &st::DeleteSnapshot,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.bucket(&c.volume, &c.bucket)?;
        let mut rec = self.snapshot(&c.volume, &c.bucket, &c.name)?;
        table::delete::<SnapshotTable>(
            self.db,
            b,
            &keys::snapshot_key(&c.volume, &c.bucket, &c.name),
        )?;
        self.put_snapshot_index(b, &c.volume, &c.bucket, rec.index, None)?;
        rec.deleted = true;
        table::put::<SnapshotTable>(
            self.db,
            b,
            &keys::deleted_snapshot_key(rec.index, &c.volume, &c.bucket),
            &mut rec,
        )?;
        if bucket.latest_snapshot == rec.index {
            // The newest of the rest (reads see the state before this
            // entry, which still holds this one); at most
            // MAX_BUCKET_SNAPSHOTS entries.
            let prefix = keys::snapshot_index_prefix(&c.volume, &c.bucket);
            let mut it = self.db.iter_prefix(keys::SNAPSHOTS_CF, &prefix)?;
            it.seek(&prefix);
            let mut latest = 0;
            while let Some((k, _)) = it.current() {
                let index = index_of(&k[prefix.len()..])?;
                if index != rec.index {
                    latest = index;
                }
                it.advance();
            }
            it.status()?;
            bucket.latest_snapshot = latest;
        }
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::Snapshot(rec))
    }

    pub(super) fn rename_snapshot(
        &self,
        b: &mut EntryWrites<'_>,
        c: &st::RenameSnapshot,
    ) -> Result<CommandResult, OmError> {
        self.bucket(&c.volume, &c.bucket)?;
        let mut rec = self.snapshot(&c.volume, &c.bucket, &c.name)?;
        let to = keys::snapshot_key(&c.volume, &c.bucket, &c.new_name);
        if table::get::<SnapshotTable>(self.db, &to)?.is_some() {
            return Err(OmError::exists(
                "SNAPSHOT_ALREADY_EXISTS",
                "new_name",
                format!(
                    "bucket {}/{} already has a snapshot {:?}",
                    c.volume, c.bucket, c.new_name
                ),
            ));
        }
        table::delete::<SnapshotTable>(
            self.db,
            b,
            &keys::snapshot_key(&c.volume, &c.bucket, &c.name),
        )?;
        rec.name = c.new_name.clone();
        table::put::<SnapshotTable>(self.db, b, &to, &mut rec)?;
        self.put_snapshot_index(b, &c.volume, &c.bucket, rec.index, Some(&c.new_name))?;
        ok(command_result::Result::Snapshot(rec))
    }

    /// Drops the bucket's change log below its oldest live snapshot (a diff
    /// starts at a live snapshot), all of it when none is left: range
    /// deletions, whatever the log holds.
    fn trim_changes(
        &self,
        b: &mut EntryWrites<'_>,
        volume: &str,
        bucket: &str,
    ) -> Result<(), OmError> {
        let prefix = keys::snapshot_index_prefix(volume, bucket);
        let mut it = self.db.iter_prefix(keys::SNAPSHOTS_CF, &prefix)?;
        it.seek(&prefix);
        let oldest = match it.current() {
            Some((k, _)) => Some(index_of(&k[prefix.len()..])?),
            None => None,
        };
        it.status()?;
        drop(it);
        let cf = table::cf(self.db.rocks(), keys::SNAPSHOT_CHANGES_CF)?;
        let log = keys::change_prefix(volume, bucket);
        match oldest {
            Some(o) => b.delete_range_cf(cf, &log, keys::change_key(volume, bucket, o, b"")),
            None => {
                let end = keys::prefix_end(&log).unwrap_or_default();
                b.delete_range_cf(cf, &log, end);
                let last = keys::last_change_prefix(volume, bucket);
                let end = keys::prefix_end(&last).unwrap_or_default();
                b.delete_range_cf(cf, &last, end);
            }
        }
        Ok(())
    }

    /// Whether a live snapshot of the bucket lies strictly between `lo` and
    /// `hi` (one seek).
    fn live_snapshot_between(
        &self,
        volume: &str,
        bucket: &str,
        lo: u64,
        hi: u64,
    ) -> Result<bool, OmError> {
        if hi <= lo.saturating_add(1) {
            return Ok(false);
        }
        let start = keys::snapshot_index_key(volume, bucket, lo + 1);
        let end = keys::snapshot_index_key(volume, bucket, hi);
        let mut it = self
            .db
            .iter(keys::SNAPSHOTS_CF, Some(start.clone()), Some(end))?;
        it.seek(&start);
        let found = it.has_current();
        it.status()?;
        Ok(found)
    }

    pub(super) fn reclaim_snapshot(
        &self,
        b: &mut EntryWrites<'_>,
        c: &st::ReclaimSnapshot,
    ) -> Result<CommandResult, OmError> {
        let dkey = keys::deleted_snapshot_key(c.index, &c.volume, &c.bucket);
        let Some(mut rec) = table::get::<SnapshotTable>(self.db, &dkey)? else {
            return Err(OmError::precondition(
                "STALE_RECLAIM_PAGE",
                "index",
                format!(
                    "bucket {}/{} has no deleted snapshot at index {} being reclaimed",
                    c.volume, c.bucket, c.index
                ),
            ));
        };
        let mut bucket = self.bucket(&c.volume, &c.bucket)?;
        let prefix = keys::object_prefix(&c.volume, &c.bucket);
        let start = if rec.reclaim_cursor.is_empty() {
            prefix.clone()
        } else {
            rec.reclaim_cursor.clone()
        };
        let mut it = self.db.iter(
            keys::SNAPSHOT_KEYS_CF,
            Some(start.clone()),
            keys::prefix_end(&prefix),
        )?;
        it.seek(&start);
        let mut page = Vec::new();
        let mut next = None;
        while let Some((k, v)) = it.current() {
            if page.len() == c.max as usize {
                next = Some(k.to_vec());
                break;
            }
            page.push((k.to_vec(), table::decode::<RetainedKeyTable>(v)?));
            it.advance();
        }
        it.status()?;
        drop(it);
        let mut seq = 0u32;
        for (k, copy) in page {
            let (_, retired) = keys::split_retained(&k)
                .ok_or_else(|| OmError::Internal("corrupt snapshot_keys key".to_string()))?;
            let shown = copy.written_index < c.index && c.index < retired;
            if !shown
                || self.live_snapshot_between(&c.volume, &c.bucket, copy.written_index, retired)?
            {
                continue;
            }
            table::delete::<RetainedKeyTable>(self.db, b, &k)?;
            let origin = format!(
                "snapshot of {}/{} at {} reclaimed",
                c.volume, c.bucket, c.index
            );
            self.release_blocks(b, seq, copy.blocks, origin)?;
            seq += 1;
        }
        match next {
            Some(cursor) => {
                rec.reclaim_cursor = cursor;
                table::put::<SnapshotTable>(self.db, b, &dkey, &mut rec)?;
            }
            None => {
                table::delete::<SnapshotTable>(self.db, b, &dkey)?;
                bucket.snapshot_count = bucket.snapshot_count.saturating_sub(1);
                self.put_bucket(b, &mut bucket)?;
                self.trim_changes(b, &c.volume, &c.bucket)?;
            }
        }
        ok(command_result::Result::Snapshot(rec))
    }
}

fn index_of(k: &[u8]) -> Result<u64, OmError> {
    Ok(u64::from_be_bytes(k.try_into().map_err(|_| {
        OmError::Internal("corrupt snapshot index key".to_string())
    })?))
}
