//! Writing keys in steps (open, allocate, commit), server-side copies, and the
//! housekeeping commands around them (open-key expiry, reclamation acks).

use std::collections::{BTreeMap, HashSet};

use om_proto::store::{
    AckDeletedBlocks, AllocateBlock, BucketRecord, CommandResult, CommitKey, CopyKey, CountResult,
    ExpireOpenKeys, KeyRecord, OpenKey, OpenKeyRecord, OpenKeyResult, command_result,
};
use om_raft_store::EntryWrites;

use super::limits::block_size_or_legacy;
use super::limits::{self, MAX_ACK_IDS, MAX_KEY_BLOCKS};
use super::ops::Operation;
use super::{Ctx, LAYOUT_FSO, is_plain_md5, ok, versions};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::fs;
pub use crate::limits::{MAX_OPEN_KEY_EXPIRY_BATCH, MAX_SESSION_BLOCKS};
use crate::store::keys;
use crate::store::table::{
    self, BucketTable, DeletedBlocksTable, FileTable, KeyTable, OpenFileTable, OpenKeyTable,
};
use crate::store::view::StateRead;

impl Operation for om_proto::store::OpenKey {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)?;
        crate::validate::content_type("content_type", &self.content_type)?;
        limits::metadata(&self.metadata)?;
        limits::blocks_per_call("blocks", self.blocks)?;
        limits::block_size(self.block_size)?;
        limits::tags(rules, &self.tags)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.open_key(b, self)
    }
}

impl Operation for om_proto::store::AllocateBlock {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)?;
        limits::blocks_per_call("count", self.count)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.allocate_block(b, self)
    }
}

impl Operation for om_proto::store::CommitKey {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)?;
        limits::key_size("size", self.size)?;
        if self.blocks.len() > MAX_KEY_BLOCKS {
            return Err(OmError::invalid(
                "INVALID_BLOCKS",
                "blocks",
                format!(
                    "{} blocks listed; a key has at most {MAX_KEY_BLOCKS}",
                    self.blocks.len()
                ),
            ));
        }
        limits::etag("etag", &self.etag)?;
        crate::validate::content_type("content_type", &self.content_type)?;
        limits::metadata(&self.metadata)?;
        limits::conditions(self.conditions.as_ref())?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.commit_key(b, self)
    }
}

impl Operation for om_proto::store::AbortKey {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.abort_key(b, self)
    }
}

impl Operation for om_proto::store::CopyKey {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![
            (
                Resource::Bucket(&self.src_volume, &self.src_bucket),
                authz::READ,
            ),
            (Resource::Bucket(&self.volume, &self.bucket), authz::WRITE),
        ]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::object(&self.src_volume, &self.src_bucket, "src_key", &self.src_key)?;
        limits::object(&self.volume, &self.bucket, "key", &self.key)?;
        limits::etag("src_if_match", &self.src_if_match)?;
        limits::etag("src_if_none_match", &self.src_if_none_match)?;
        limits::etag("content_md5", &self.content_md5)?;
        crate::validate::content_type("content_type", &self.content_type)?;
        limits::metadata(&self.metadata)?;
        limits::conditions(self.conditions.as_ref())?;
        limits::version_id("src_version_id", &self.src_version_id)?;
        if self.tagging_directive != 0 && !crate::rules::OBJECT_TAGS.holds(rules) {
            return Err(limits::unsupported_tags("tagging_directive"));
        }
        limits::tags(rules, &self.tags)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.copy_key(b, self)
    }
}

impl Operation for om_proto::store::ExpireOpenKeys {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
    }

    fn target(&self) -> String {
        Resource::Cluster.to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        // Batch sizes: capped by the handlers, never refused.
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.expire_open_keys(b, self)
    }
}

impl Operation for om_proto::store::AckDeletedBlocks {
    fn rights(&self, rules: u32) -> Vec<(Resource<'_>, u32)> {
        let right = if crate::rules::RECLAIM_RIGHT.holds(rules) {
            authz::RECLAIM
        } else {
            authz::ALL
        };
        vec![(Resource::Cluster, right)]
    }

    fn target(&self) -> String {
        Resource::Cluster.to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        if self.ids.len() > MAX_ACK_IDS {
            return Err(OmError::invalid(
                "INVALID_ID_COUNT",
                "ids",
                format!("at most {MAX_ACK_IDS} ids per call, got {}", self.ids.len()),
            ));
        }
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.ack_deleted_blocks(b, self)
    }
}

/// An open session found by key (object store) or path (FSO).
pub(super) struct Session {
    /// Its key in `open_keys` or `open_files`.
    pub key: Vec<u8>,
    pub rec: OpenKeyRecord,
    /// FSO: the file's directory id and name.
    pub file: Option<(u64, String)>,
}

/// The session limit of `AllocateBlock` commands that carry none (written
/// before they did). Never change it.
pub const LEGACY_MAX_SESSION_BLOCKS: u32 = 20_480;

/// Sessions one `ExpireOpenKeys` command removes, as the leader stamps it.
pub const OPEN_KEY_EXPIRY_BATCH: u32 = 1_000;

/// The batch of `ExpireOpenKeys` commands that carry none. Never change it.
pub const LEGACY_OPEN_KEY_EXPIRY_BATCH: u32 = 1_000;

fn session_not_found(c_key: &str, session: u64) -> OmError {
    OmError::precondition(
        "SESSION_NOT_FOUND",
        "session_id",
        format!("no open session {session} for key {c_key:?} (committed, expired or never opened)"),
    )
}

impl Ctx<'_> {
    pub(super) fn open_key(
        &self,
        b: &mut EntryWrites<'_>,
        c: &OpenKey,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.object_store_bucket(&c.volume, &c.bucket)?;
        bucket.open_key_count = self.grow(bucket.open_key_count, 1, "key", "open keys")?;
        let session_id = self.object_id(0);
        let ids = self.allocate(b, u64::from(c.blocks))?;
        let mut rec = OpenKeyRecord {
            format: 0,
            session_id,
            opened_ms: self.now,
            allocated: ids.clone(),
            content_type: c.content_type.clone(),
            metadata: c.metadata.clone(),
            volume: c.volume.clone(),
            bucket: c.bucket.clone(),
            block_size: c.block_size,
            tags: c.tags.clone(),
            ..Default::default()
        };
        let key = keys::open_key(&c.volume, &c.bucket, &c.key, session_id);
        table::put::<OpenKeyTable>(self.db, b, &key, &mut rec)?;
        b.put_cf(
            table::cf(self.db.rocks(), keys::OPEN_KEYS_CF)?,
            keys::open_expiry_key(self.now, &key),
            [],
        );
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::OpenKey(OpenKeyResult {
            session_id,
            opened_ms: self.now,
            blocks: lay_out_unwritten(ids, c.block_size),
        }))
    }

    /// The open session `session` of `key` in `bucket`: an object-store key,
    /// or in an FSO bucket a path whose directory must (still) exist.
    pub(super) fn session(
        &self,
        bucket: &BucketRecord,
        key: &str,
        session: u64,
    ) -> Result<Session, OmError> {
        let (k, rec, file) = if bucket.layout == LAYOUT_FSO {
            let path = crate::validate::fs_path_not_root("key", key)?;
            let comps = fs::components(&path);
            let parent = fs::parent_dir(self.db, bucket.object_id, &comps, "key")?;
            let name = comps.last().copied().unwrap_or_default().to_string();
            let k = keys::open_file_key(parent, &name, session);
            let rec = table::get::<OpenFileTable>(self.db, &k)?;
            (k, rec, Some((parent, name)))
        } else {
            let k = keys::open_key(&bucket.volume, &bucket.name, key, session);
            let rec = table::get::<OpenKeyTable>(self.db, &k)?;
            (k, rec, None)
        };
        match rec {
            Some(rec) => Ok(Session { key: k, rec, file }),
            None => Err(session_not_found(key, session)),
        }
    }

    pub(super) fn put_session(
        &self,
        b: &mut EntryWrites<'_>,
        s: &mut Session,
    ) -> Result<(), OmError> {
        if s.file.is_some() {
            table::put::<OpenFileTable>(self.db, b, &s.key, &mut s.rec)
        } else {
            table::put::<OpenKeyTable>(self.db, b, &s.key, &mut s.rec)
        }
    }

    pub(super) fn allocate_block(
        &self,
        b: &mut EntryWrites<'_>,
        c: &AllocateBlock,
    ) -> Result<CommandResult, OmError> {
        let bucket = self.bucket(&c.volume, &c.bucket)?;
        let mut s = self.session(&bucket, &c.key, c.session_id)?;
        let count = c.count.max(1) as usize;
        let max = match c.max_session_blocks {
            0 => LEGACY_MAX_SESSION_BLOCKS,
            n => n,
        } as usize;
        if s.rec.allocated.len().saturating_add(count) > max {
            return Err(OmError::precondition(
                "TOO_MANY_BLOCKS",
                "count",
                format!(
                    "a session holds at most {max} blocks; it has {}",
                    s.rec.allocated.len()
                ),
            ));
        }
        let ids = self.allocate(b, count as u64)?;
        s.rec.allocated.extend_from_slice(&ids);
        self.put_session(b, &mut s)?;
        ok(command_result::Result::OpenKey(OpenKeyResult {
            session_id: c.session_id,
            opened_ms: s.rec.opened_ms,
            blocks: lay_out_unwritten(ids, s.rec.block_size),
        }))
    }

    /// Moves an open session to the key (or file) table: the listed blocks
    /// become the key's, unlisted allocated blocks and the replaced version's
    /// blocks are freed.
    pub(super) fn commit_key(
        &self,
        b: &mut EntryWrites<'_>,
        c: &CommitKey,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.bucket(&c.volume, &c.bucket)?;
        let s = self.session(&bucket, &c.key, c.session_id)?;
        check_committed_blocks(
            &s.rec.allocated,
            block_size_or_legacy(s.rec.block_size),
            c.session_id,
            &c.blocks,
            c.size,
        )?;
        let (old, sup) = match &s.file {
            None => (
                None,
                Some(self.replaced_key(&bucket, &c.key, c.conditions.as_ref())?),
            ),
            Some((parent, name)) => {
                if fs::get_dir(self.db, *parent, name)?.is_some() {
                    return Err(OmError::precondition(
                        "IS_A_DIRECTORY",
                        "key",
                        format!("{} is a directory", c.key),
                    ));
                }
                let old = fs::get_file(self.db, *parent, name)?;
                if let Some(cond) = &c.conditions {
                    super::conditions::check_conditions(cond, old.as_ref(), &c.key, self.rules)?;
                }
                if s.rec.no_overwrite && old.is_some() {
                    return Err(OmError::exists(
                        "FILE_ALREADY_EXISTS",
                        "key",
                        format!("file {} exists and was opened without overwrite", c.key),
                    ));
                }
                (old, None)
            }
        };
        let usage = match &sup {
            Some(sup) => sup.usage(c.size, true),
            None => super::quota::Usage::write(old.as_ref(), c.size),
        };
        let vol = self.charge(&mut bucket, usage)?;
        // Checks are done; stage writes from here on.
        let origin = format!("unused by commit of {}/{}/{}", c.volume, c.bucket, c.key);
        self.finish_session(b, &mut bucket, &s, &c.blocks, origin)?;
        let (metadata, content_type) = if c.replace_metadata {
            (c.metadata.clone(), c.content_type.clone())
        } else {
            (s.rec.metadata, s.rec.content_type)
        };
        let rec = KeyRecord {
            size: c.size,
            blocks: c.blocks.clone(),
            etag: c.etag.clone(),
            metadata,
            content_type,
            tags: s.rec.tags,
            ..Default::default()
        };
        match (&s.file, sup) {
            (None, Some(sup)) => self.write_key(b, &mut bucket, &c.key, sup, rec, vol),
            (None, None) => Err(OmError::Internal(
                "object-store commit without its key".into(),
            )),
            (Some((parent, name)), _) => self.write_entry::<FileTable>(
                b,
                &mut bucket,
                &c.key,
                &keys::fs_key(*parent, name),
                (old, vol),
                rec,
            ),
        }
    }

    /// AbortKey (rules 9): closes a session uncommitted, releasing every
    /// block it was given; the key is untouched.
    pub(super) fn abort_key(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::AbortKey,
    ) -> Result<CommandResult, OmError> {
        if !crate::rules::WRITE_SESSIONS.holds(self.rules) {
            return Err(OmError::invalid(
                "UNSUPPORTED_COMMAND",
                "op",
                "aborting a write session needs apply rules 9",
            ));
        }
        let mut bucket = self.bucket(&c.volume, &c.bucket)?;
        let s = self.session(&bucket, &c.key, c.session_id)?;
        let origin = format!(
            "aborted session {} of {}/{}/{}",
            c.session_id, c.volume, c.bucket, c.key
        );
        self.finish_session(b, &mut bucket, &s, &[], origin)?;
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::Empty(om_proto::store::Empty {}))
    }

    /// Closes session `s`, whose blocks `used` now hold committed data:
    /// frees its other allocated blocks (noting `origin`) and counts one
    /// open key less in `bucket` (which the caller writes).
    pub(super) fn finish_session(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &mut BucketRecord,
        s: &Session,
        used: &[om_proto::store::BlockRecord],
        origin: String,
    ) -> Result<(), OmError> {
        let used: HashSet<u64> = used.iter().map(|blk| blk.block_id).collect();
        let unused: Vec<_> = lay_out_unwritten(
            s.rec
                .allocated
                .iter()
                .copied()
                .filter(|id| !used.contains(id))
                .collect(),
            s.rec.block_size,
        );
        self.release_blocks(b, 1, unused, origin)?;
        self.close_session(b, s)?;
        bucket.open_key_count = bucket.open_key_count.saturating_sub(1);
        Ok(())
    }

    fn close_session(&self, b: &mut EntryWrites<'_>, s: &Session) -> Result<(), OmError> {
        if s.file.is_some() {
            table::delete::<OpenFileTable>(self.db, b, &s.key)?;
            b.delete_cf(
                table::cf(self.db.rocks(), keys::OPEN_FILES_CF)?,
                keys::open_file_expiry_key(s.rec.opened_ms, &s.key),
            );
        } else {
            table::delete::<OpenKeyTable>(self.db, b, &s.key)?;
            b.delete_cf(
                table::cf(self.db.rocks(), keys::OPEN_KEYS_CF)?,
                keys::open_expiry_key(s.rec.opened_ms, &s.key),
            );
        }
        Ok(())
    }

    /// A whole-object copy that shares the source's blocks (seed HDDS-16315:
    /// a plain MD5 ETag is reused, never recomputed from the data).
    pub(super) fn copy_key(
        &self,
        b: &mut EntryWrites<'_>,
        c: &CopyKey,
    ) -> Result<CommandResult, OmError> {
        let src_bucket = self.object_store_bucket(&c.src_volume, &c.src_bucket)?;
        let src_path = format!("{}/{}/{}", c.src_volume, c.src_bucket, c.src_key);
        let src = if c.src_version_id.is_empty() {
            table::get::<KeyTable>(
                self.db,
                &keys::object_key(&c.src_volume, &c.src_bucket, &c.src_key),
            )?
            .filter(|k| !k.delete_marker)
            .ok_or_else(|| {
                OmError::not_found(
                    "KEY_NOT_FOUND",
                    "src_key",
                    format!("key {src_path} does not exist"),
                )
            })?
        } else {
            let src = versions::read_version(
                self.db,
                &c.src_volume,
                &c.src_bucket,
                &c.src_key,
                &c.src_version_id,
                "src_version_id",
            )?
            .into_record();
            if src.delete_marker {
                return Err(OmError::invalid(
                    "SOURCE_IS_DELETE_MARKER",
                    "src_version_id",
                    format!(
                        "version {} of {src_path} is a delete marker",
                        c.src_version_id
                    ),
                ));
            }
            src
        };
        check_source_conditions(c, &src, &src_path)?;
        let etag = if is_plain_md5(&src.etag) {
            src.etag.clone()
        } else if !c.content_md5.is_empty() {
            c.content_md5.clone()
        } else {
            return Err(OmError::precondition(
                "CONTENT_DIGEST_REQUIRED",
                "content_md5",
                format!(
                    "source {src_path} has ETag {:?}, not a plain MD5; the copy needs content_md5",
                    src.etag
                ),
            ));
        };
        let same_bucket = c.src_volume == c.volume && c.src_bucket == c.bucket;
        let mut bucket = if same_bucket {
            src_bucket
        } else {
            self.object_store_bucket(&c.volume, &c.bucket)?
        };
        let mut old = self.replaced_key(&bucket, &c.key, c.conditions.as_ref())?;
        let vol = self.charge(&mut bucket, old.usage(src.size, true))?;
        let (metadata, content_type) = if c.metadata_directive == 1 {
            (c.metadata.clone(), c.content_type.clone())
        } else {
            (src.metadata.clone(), src.content_type.clone())
        };
        if same_bucket && c.src_key == c.key && old.removes(&src) {
            // Copying a version onto itself (a metadata replace): the blocks
            // stay where they are, with the same holders.
            old.keep_removed_blocks();
        } else {
            self.share_blocks(b, &src.blocks)?;
        }
        // S3's x-amz-tagging-directive: COPY (0) keeps the source's tags.
        let tags = if c.tagging_directive == 1 {
            c.tags.clone()
        } else {
            src.tags
        };
        // A copy is one part, with a plain MD5 ETag (a multipart source's
        // needs `content_md5`): it keeps no part sizes.
        let rec = KeyRecord {
            size: src.size,
            blocks: src.blocks,
            etag,
            metadata,
            content_type,
            tags,
            ..Default::default()
        };
        self.write_key(b, &mut bucket, &c.key, old, rec, vol)
    }

    /// Drops up to a batch of sessions (keys and files) opened before
    /// `before_ms`, freeing their allocated blocks.
    pub(super) fn expire_open_keys(
        &self,
        b: &mut EntryWrites<'_>,
        c: &ExpireOpenKeys,
    ) -> Result<CommandResult, OmError> {
        let before_ms = c.before_ms;
        let batch = match c.max_entries {
            0 => LEGACY_OPEN_KEY_EXPIRY_BATCH,
            n => n.min(MAX_OPEN_KEY_EXPIRY_BATCH),
        };
        let mut buckets: BTreeMap<Vec<u8>, BucketRecord> = BTreeMap::new();
        let mut n = 0u32;
        for (cf_name, prefix) in [
            (keys::OPEN_KEYS_CF, keys::OPEN_EXPIRY_PREFIX),
            (keys::OPEN_FILES_CF, keys::OPEN_FILE_EXPIRY_PREFIX),
        ] {
            let mut upper = prefix.to_vec();
            upper.extend_from_slice(&before_ms.to_be_bytes());
            let mut it = self.db.iter(cf_name, Some(prefix.to_vec()), Some(upper))?;
            let cf = table::cf(self.db.rocks(), cf_name)?;
            while n < batch {
                let Some((k, _)) = it.current() else { break };
                let index_key = k.to_vec();
                it.advance();
                b.delete_cf(cf, &index_key);
                n += 1;
                if index_key.len() <= 9 {
                    continue;
                }
                let entry = &index_key[9..];
                let rec = if cf_name == keys::OPEN_KEYS_CF {
                    table::get::<OpenKeyTable>(self.db, entry)?
                } else {
                    table::get::<OpenFileTable>(self.db, entry)?
                };
                let Some(rec) = rec else {
                    continue;
                };
                b.delete_cf(cf, entry);
                let bucket_key = keys::bucket_key(&rec.volume, &rec.bucket);
                if !buckets.contains_key(&bucket_key)
                    && let Some(bk) = table::get::<BucketTable>(self.db, &bucket_key)?
                {
                    buckets.insert(bucket_key.clone(), bk);
                }
                if let Some(bk) = buckets.get_mut(&bucket_key) {
                    bk.open_key_count = bk.open_key_count.saturating_sub(1);
                }
                let origin = format!(
                    "expired session {} in {}/{}",
                    rec.session_id, rec.volume, rec.bucket
                );
                self.release_blocks(
                    b,
                    n,
                    lay_out_unwritten(rec.allocated, rec.block_size),
                    origin,
                )?;
            }
            it.status()?;
        }
        for (k, mut bk) in buckets {
            table::put::<BucketTable>(self.db, b, &k, &mut bk)?;
        }
        ok(command_result::Result::Count(CountResult {
            count: u64::from(n),
        }))
    }

    /// Removes acknowledged deleted-blocks entries; ids not present (already
    /// acknowledged) are skipped, so a retried ack is harmless.
    pub(super) fn ack_deleted_blocks(
        &self,
        b: &mut EntryWrites<'_>,
        c: &AckDeletedBlocks,
    ) -> Result<CommandResult, OmError> {
        let mut seen = HashSet::new();
        let mut count = 0;
        for id in &c.ids {
            let k = keys::deleted_blocks_key(id.log_index, id.seq);
            if !seen.insert(k.clone()) {
                continue;
            }
            if table::get::<DeletedBlocksTable>(self.db, &k)?.is_some() {
                table::delete::<DeletedBlocksTable>(self.db, b, &k)?;
                count += 1;
            }
        }
        ok(command_result::Result::Count(CountResult { count }))
    }
}

/// Allocated but not yet written blocks: ids with a full block's capacity
/// (`block_size` as the session or command carries it; 0 is the legacy size).
pub(super) fn lay_out_unwritten(
    ids: Vec<u64>,
    block_size: u64,
) -> Vec<om_proto::store::BlockRecord> {
    let length = block_size_or_legacy(block_size);
    ids.into_iter()
        .map(|block_id| om_proto::store::BlockRecord {
            block_id,
            offset: 0,
            length,
        })
        .collect()
}

/// The blocks a commit names must be allocated to its session, each once, in
/// order: offsets contiguous from 0, lengths within a block of the session's
/// size, summing to size.
pub(super) fn check_committed_blocks(
    allocated: &[u64],
    block_size: u64,
    session_id: u64,
    blocks: &[om_proto::store::BlockRecord],
    size: u64,
) -> Result<(), OmError> {
    let bad = |why: String| Err(OmError::invalid("INVALID_BLOCKS", "blocks", why));
    let allocated: HashSet<u64> = allocated.iter().copied().collect();
    let mut seen = HashSet::new();
    let mut offset = 0u64;
    for blk in blocks {
        if !allocated.contains(&blk.block_id) {
            return bad(format!(
                "block {} was not allocated to session {session_id}",
                blk.block_id
            ));
        }
        if !seen.insert(blk.block_id) {
            return bad(format!("block {} is listed twice", blk.block_id));
        }
        if blk.offset != offset {
            return bad(format!(
                "block {} starts at {}, expected {offset}",
                blk.block_id, blk.offset
            ));
        }
        if blk.length == 0 || blk.length > block_size {
            return bad(format!(
                "block {} has length {}; 1..={block_size} allowed",
                blk.block_id, blk.length
            ));
        }
        // At most MAX_KEY_BLOCKS blocks of at most 5 GiB: cannot overflow.
        offset = offset.saturating_add(blk.length);
    }
    if offset != size {
        return Err(OmError::invalid(
            "SIZE_MISMATCH",
            "size",
            format!("blocks cover {offset} bytes but size is {size}"),
        ));
    }
    Ok(())
}

/// S3's copy-source conditions: a true if-match overrides a false
/// if-unmodified-since, and a true if-none-match overrides a false
/// if-modified-since.
fn check_source_conditions(c: &CopyKey, src: &KeyRecord, path: &str) -> Result<(), OmError> {
    let fail = |field: &str, why: String| {
        Err(OmError::precondition(
            "SOURCE_CONDITION_FAILED",
            field,
            format!("source {path}: {why}"),
        ))
    };
    let modified = src.modification_time_ms;
    if !c.src_if_match.is_empty() {
        if c.src_if_match != src.etag {
            return fail(
                "src_if_match",
                format!("ETag is {:?}, not {:?}", src.etag, c.src_if_match),
            );
        }
    } else if c.src_if_unmodified_since_ms != 0 && modified > c.src_if_unmodified_since_ms {
        return fail(
            "src_if_unmodified_since_ms",
            format!(
                "modified at {modified}, after {}",
                c.src_if_unmodified_since_ms
            ),
        );
    }
    if !c.src_if_none_match.is_empty() {
        if c.src_if_none_match == "*" || c.src_if_none_match == src.etag {
            return fail(
                "src_if_none_match",
                format!("ETag {:?} matches {:?}", src.etag, c.src_if_none_match),
            );
        }
    } else if c.src_if_modified_since_ms != 0 && modified <= c.src_if_modified_since_ms {
        return fail(
            "src_if_modified_since_ms",
            format!(
                "not modified since {} (modified at {modified})",
                c.src_if_modified_since_ms
            ),
        );
    }
    Ok(())
}
