//! The deterministic state machine of om: one replicated `Command` in, table
//! writes and a `CommandResult` out.
//!
//! Apply never reads a clock or a random source: times come from the command
//! (`now_ms`, set by the leader before proposing) and ids derive from the log
//! index. A request that fails a check becomes a `Rejection` result and stages
//! no write at all, so a rejected command changes nothing but the applied index.
//! Reads here see the state before this entry; a handler reads first, then
//! stages its writes.

use std::cell::RefCell;
use std::collections::HashMap;

use om_proto::store::{
    BucketRecord, Command, CommandResult, DeleteKeysResult, DeletedVersion, Empty, KeyConditions,
    KeyOutcome, KeyRecord, KeyResult, Rejection, RetryCacheRecord, VolumeRecord, command::Op,
    command_result,
};
use rocksdb::{DB, WriteBatch};

mod acl;
mod blocks;
mod bulk;
mod cluster;
mod conditions;
mod fs;
mod lifecycle;
mod limits;
mod multipart;
mod namespace;
mod quota;
pub mod tagging;
pub mod versions;
mod write;

pub use bulk::MAX_PUT_KEYS;
pub use limits::{
    MAX_ACK_IDS, MAX_BLOCKS_PER_CALL, MAX_KEY_BLOCKS, MAX_PART_NUMBER, MAX_PART_SIZE,
    MAX_PURGE_BATCH, block_size_or_legacy, blocks_per_call, key_size, part_number, put_keys_count,
};
pub use multipart::{DEFAULT_MIN_PART_SIZE, multipart_etag};
pub use quota::{bucket_namespace, volume_used_bytes};
pub use write::{
    LEGACY_MAX_SESSION_BLOCKS, LEGACY_OPEN_KEY_EXPIRY_BATCH, MAX_OPEN_KEY_EXPIRY_BATCH,
    MAX_SESSION_BLOCKS, OPEN_KEY_EXPIRY_BATCH,
};

use crate::error::{ErrorKind, OmError};
use crate::store::iter::DeferredSeekIter;
use crate::store::keys;
use crate::store::table::{self, BucketTable, KeyTable, RetryCacheTable, VolumeTable};
use blocks::lay_out;
use conditions::check_conditions;
use quota::Usage;

/// The version of apply's rules this binary proposes and the newest it
/// applies (`Command.rules`; see ARCHITECTURE.md, "What apply may read").
/// Raise it with every change to what an existing command does, and branch
/// on `Ctx::rules` so older entries keep applying as they did.
pub const RULES: u32 = 8;

/// The block size of commands that carry none (written before they did).
/// Never change it: old log entries replay with it.
pub const LEGACY_BLOCK_SIZE: u64 = 256 * 1024 * 1024;

/// Size of the blocks a key's data is split into when om allocates them: the
/// leader stamps it into every command that allocates, so changing it changes
/// only later writes, on every replica alike.
pub const BLOCK_SIZE: u64 = LEGACY_BLOCK_SIZE;

/// Smallest and largest block size a command may carry.
pub const MIN_BLOCK_SIZE: u64 = 1024 * 1024;
pub const MAX_BLOCK_SIZE: u64 = 5 * 1024 * 1024 * 1024;

/// Largest object S3 allows: 5 TiB.
pub const MAX_KEY_SIZE: u64 = 5 * 1024 * 1024 * 1024 * 1024;

/// Retry-cache entries one `ExpireRetryCache` command removes when the command
/// names no batch size: the value before commands carried it, kept so old log
/// entries apply exactly as they did.
pub const LEGACY_RETRY_EXPIRY_BATCH: u32 = 10_000;

/// Most retry-cache entries one `ExpireRetryCache` command may remove, so one
/// apply stays short whatever a replicated command asks for.
pub const MAX_RETRY_EXPIRY_BATCH: u32 = 100_000;

pub use crate::store::records::{LAYOUT_FSO, LAYOUT_OBJECT_STORE};

/// Object ids are the log index shifted left by 8 plus a per-entry counter, so
/// they are unique across the cluster and need no coordination.
pub fn object_id(log_index: u64, n: u8) -> u64 {
    (log_index << 8) | u64::from(n)
}

/// The application half of the Raft state machine.
#[derive(Debug, Default)]
pub struct OmApplier;

impl om_raft_store::Applier for OmApplier {
    fn apply(
        &self,
        db: &DB,
        batch: &mut WriteBatch,
        log_index: u64,
        cmd: &Command,
    ) -> Result<CommandResult, om_raft_store::ApplyError> {
        apply_command(db, batch, log_index, cmd)
            .map_err(|e| om_raft_store::ApplyError(e.to_string()))
    }

    fn pins_state(&self, cmd: &Command) -> bool {
        matches!(cmd.op, Some(Op::VerifyMark(_)))
    }
}

/// Applies one command. `Err` is a storage failure (fatal); request failures
/// are `Ok` results holding a `Rejection`.
pub fn apply_command(
    db: &DB,
    batch: &mut WriteBatch,
    log_index: u64,
    cmd: &Command,
) -> Result<CommandResult, OmError> {
    if cmd.rules > RULES {
        // Applying it with older rules could diverge from the replicas that
        // know them: stop instead (a storage-class error).
        return Err(OmError::Internal(format!(
            "entry {log_index} needs apply rules {}; this binary knows up to {RULES}",
            cmd.rules
        )));
    }
    let dedup = !cmd.client_id.is_empty();
    let retry_client = retry_client(cmd);
    if dedup {
        let rk = keys::retry_key(&retry_client, cmd.seq);
        if let Some(rec) = table::get::<RetryCacheTable>(db, &rk)? {
            // The same (client id, seq) with another request: refuse it and
            // change nothing (the cached result stays for the real retry).
            // Entries or commands from before digests existed carry none.
            if !rec.request_digest.is_empty()
                && !cmd.request_digest.is_empty()
                && rec.request_digest != cmd.request_digest
            {
                return Ok(rejection(OmError::invalid(
                    "RETRY_MISMATCH",
                    "header.seq",
                    format!(
                        "client {:?} already used sequence number {} for a different request",
                        crate::validate::quote_prefix(&cmd.client_id),
                        cmd.seq
                    ),
                )));
            }
            return Ok(rec.result.unwrap_or_default());
        }
    }
    let ctx = Ctx {
        db,
        index: log_index,
        now: cmd.now_ms,
        rules: cmd.rules,
        caller: cmd.caller.as_ref(),
        holders: RefCell::new(HashMap::new()),
        staged_keys: RefCell::default(),
        versions_made: std::cell::Cell::new(0),
    };
    // Handlers check everything before they stage their first write, so a
    // rejected command leaves the batch as it was; the length check enforces it.
    let staged_before = batch.len();
    let outcome = limits::check(cmd)
        .and_then(|()| match &cmd.op {
            Some(op) if cmd.rules >= 2 => {
                crate::authz::check_command(db, cmd.caller.as_ref(), op, cmd.rules)
            }
            _ => Ok(()),
        })
        .and_then(|()| match &cmd.op {
            Some(Op::CreateVolume(c)) => ctx.create_volume(batch, c),
            Some(Op::DeleteVolume(c)) => ctx.delete_volume(batch, c),
            Some(Op::CreateBucket(c)) => ctx.create_bucket(batch, c),
            Some(Op::DeleteBucket(c)) => ctx.delete_bucket(batch, c),
            Some(Op::PutKey(c)) => ctx.put_key(batch, c),
            Some(Op::PutKeys(c)) => ctx.put_keys(batch, c),
            Some(Op::DeleteKey(c)) => ctx.delete_key(batch, c),
            Some(Op::ExpireRetryCache(c)) => ctx.expire_retry_cache(batch, c),
            Some(Op::DeleteKeys(c)) => ctx.delete_keys(batch, c),
            Some(Op::RenameKey(c)) => ctx.rename_key(batch, c),
            Some(Op::OpenKey(c)) => ctx.open_key(batch, c),
            Some(Op::AllocateBlock(c)) => ctx.allocate_block(batch, c),
            Some(Op::CommitKey(c)) => ctx.commit_key(batch, c),
            Some(Op::CopyKey(c)) => ctx.copy_key(batch, c),
            Some(Op::ExpireOpenKeys(c)) => ctx.expire_open_keys(batch, c),
            Some(Op::AckDeletedBlocks(c)) => ctx.ack_deleted_blocks(batch, c),
            Some(Op::InitiateMultipart(c)) => ctx.initiate_multipart(batch, c),
            Some(Op::CommitPart(c)) => ctx.commit_part(batch, c),
            Some(Op::CompleteMultipart(c)) => ctx.complete_multipart(batch, c),
            Some(Op::AbortMultipart(c)) => ctx.abort_multipart(batch, c),
            Some(Op::CreateDirectory(c)) => ctx.create_directory(batch, c),
            Some(Op::CreateFile(c)) => ctx.create_file(batch, c),
            Some(Op::DeletePath(c)) => ctx.delete_path(batch, c),
            Some(Op::RenamePath(c)) => ctx.rename_path(batch, c),
            Some(Op::PurgeDeletedDirs(c)) => ctx.purge_deleted_dirs(batch, c),
            Some(Op::SetVolumeQuota(c)) => ctx.set_volume_quota(batch, c),
            Some(Op::SetBucketQuota(c)) => ctx.set_bucket_quota(batch, c),
            Some(Op::SetAcl(c)) => ctx.set_acl(batch, c),
            Some(Op::SetBucketVersioning(c)) => ctx.set_bucket_versioning(batch, c),
            Some(Op::SetBucketLifecycle(c)) => ctx.set_bucket_lifecycle(batch, c),
            Some(Op::LifecycleScan(c)) => ctx.lifecycle_scan(batch, c),
            Some(Op::PutKeyTagging(c)) => ctx.put_key_tagging(batch, c),
            // Changes nothing; the store pins the state after it (`pins_state`).
            Some(Op::VerifyMark(_)) => Ok(CommandResult::default()),
            Some(Op::InitCluster(c)) => ctx.init_cluster(batch, c),
            None => Err(OmError::invalid(
                "EMPTY_COMMAND",
                "op",
                "command has no operation",
            )),
        });
    let result = match outcome {
        Ok(r) => r,
        Err(e @ (OmError::Request { .. } | OmError::Denied { .. })) => {
            if batch.len() != staged_before {
                return Err(OmError::Internal(format!(
                    "command rejected ({}) after staging writes",
                    e.reason()
                )));
            }
            rejection(e)
        }
        Err(e) => return Err(e),
    };
    if dedup {
        let mut rec = RetryCacheRecord {
            format: 0,
            created_ms: cmd.now_ms,
            result: Some(result.clone()),
            request_digest: cmd.request_digest.clone(),
        };
        let rk = keys::retry_key(&retry_client, cmd.seq);
        table::put::<RetryCacheTable>(db, batch, &rk, &mut rec)?;
        batch.put_cf(
            table::cf(db, keys::RETRY_CACHE_CF)?,
            keys::retry_expiry_key(cmd.now_ms, &retry_client, cmd.seq),
            [],
        );
    }
    Ok(result)
}

/// Whose retry-cache entries a command's (client id, seq) names. From rules
/// 8 the caller is part of it: another principal reusing a victim's client
/// id can neither read the victim's cached results nor plant one that
/// refuses the victim's next write (names hold no control characters, so
/// the separator cannot be forged).
fn retry_client(cmd: &Command) -> std::borrow::Cow<'_, str> {
    match &cmd.caller {
        Some(c) if cmd.rules >= 8 => {
            std::borrow::Cow::Owned(format!("{}\u{1}{}\u{1}{}", cmd.client_id, c.user, c.by))
        }
        _ => std::borrow::Cow::Borrowed(&cmd.client_id),
    }
}

/// The replicated result of a refused request.
fn rejection(e: OmError) -> CommandResult {
    if let OmError::Denied {
        right,
        resource,
        message,
    } = e
    {
        return CommandResult {
            result: Some(command_result::Result::Rejected(Rejection {
                reason: "ACCESS_DENIED".to_string(),
                field: String::new(),
                message,
                kind: ErrorKind::PermissionDenied.to_code(),
                right,
                resource,
            })),
        };
    }
    let (kind, reason, field, message) = match e {
        OmError::Request {
            kind,
            reason,
            field,
            message,
        } => (kind, reason, field, message),
        other => (
            ErrorKind::FailedPrecondition,
            other.reason().to_string(),
            String::new(),
            other.to_string(),
        ),
    };
    CommandResult {
        result: Some(command_result::Result::Rejected(Rejection {
            reason,
            field,
            message,
            kind: kind.to_code(),
            ..Rejection::default()
        })),
    }
}

/// Decodes a replicated result into the response or the request error it holds.
pub fn into_outcome(result: CommandResult) -> Result<command_result::Result, OmError> {
    match result.result {
        Some(command_result::Result::Rejected(r)) if r.kind == 5 => Err(OmError::Denied {
            right: r.right,
            resource: r.resource,
            message: r.message,
        }),
        Some(command_result::Result::Rejected(r)) => Err(OmError::Request {
            kind: ErrorKind::from_code(r.kind),
            reason: r.reason,
            field: r.field,
            message: r.message,
        }),
        Some(other) => Ok(other),
        None => Err(OmError::Internal("empty command result".to_string())),
    }
}

struct Ctx<'a> {
    db: &'a DB,
    index: u64,
    now: u64,
    /// The command's `rules` version: what changed since is done only for
    /// commands of the version that changed it.
    rules: u32,
    /// Who the command is applied for (rules 2; absent for internal
    /// commands and without authentication).
    caller: Option<&'a om_proto::store::Caller>,
    /// Holder counts of blocks changed by this command so far: reads inside
    /// one apply see the state before the entry, so a command that touches a
    /// shared block twice (deleting a key and its copy at once) must see its
    /// own first change.
    holders: RefCell<HashMap<u64, u32>>,
    /// `keys` entries this command staged (None: deleted), for the same
    /// reason: one command may touch several versions of one key.
    staged_keys: RefCell<std::collections::BTreeMap<Vec<u8>, Option<KeyRecord>>>,
    /// Versions this command created so far (`versions::version_stamp`).
    versions_made: std::cell::Cell<u16>,
}

fn ok(r: command_result::Result) -> Result<CommandResult, OmError> {
    Ok(CommandResult { result: Some(r) })
}

impl Ctx<'_> {
    fn volume(&self, name: &str, field: &str) -> Result<VolumeRecord, OmError> {
        table::get::<VolumeTable>(self.db, &keys::volume_key(name))?.ok_or_else(|| {
            OmError::not_found(
                "VOLUME_NOT_FOUND",
                field,
                format!("volume {name:?} does not exist"),
            )
        })
    }

    /// The bucket, or why there is none: its volume is missing
    /// (VOLUME_NOT_FOUND) or it is (BUCKET_NOT_FOUND). The volume is read only
    /// when the bucket is missing: a bucket never outlives its volume (a
    /// volume with buckets cannot be deleted), so a found bucket's volume
    /// exists, and every write to a bucket saves a point read.
    fn bucket(&self, volume: &str, name: &str) -> Result<BucketRecord, OmError> {
        if let Some(b) = table::get::<BucketTable>(self.db, &keys::bucket_key(volume, name))? {
            return Ok(b);
        }
        self.volume(volume, "volume")?;
        Err(OmError::not_found(
            "BUCKET_NOT_FOUND",
            "bucket",
            format!("bucket {volume}/{name} does not exist"),
        ))
    }

    fn fso_bucket(&self, volume: &str, bucket: &str) -> Result<BucketRecord, OmError> {
        require_layout(self.bucket(volume, bucket)?, LAYOUT_FSO)
    }

    fn object_store_bucket(&self, volume: &str, bucket: &str) -> Result<BucketRecord, OmError> {
        require_layout(self.bucket(volume, bucket)?, LAYOUT_OBJECT_STORE)
    }

    /// An OBJECT_STORE bucket that has never had versioning: operations that
    /// would rewrite history (rename) or skip it (bulk creation) refuse the
    /// others with BUCKET_VERSIONED, saying `why` and what to use instead.
    fn unversioned_object_store_bucket(
        &self,
        volume: &str,
        bucket: &str,
        why: &str,
    ) -> Result<BucketRecord, OmError> {
        let b = self.object_store_bucket(volume, bucket)?;
        if b.versioning != versions::UNVERSIONED {
            return Err(OmError::precondition(
                "BUCKET_VERSIONED",
                "bucket",
                format!("bucket {volume}/{bucket} is versioned; {why}"),
            ));
        }
        Ok(b)
    }

    fn put_key(
        &self,
        b: &mut WriteBatch,
        c: &om_proto::store::PutKey,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.object_store_bucket(&c.volume, &c.bucket)?;
        let old = self.replaced_key(&bucket, &c.key, c.conditions.as_ref())?;
        let vol = self.charge(&mut bucket, old.usage(c.size, true))?;
        // `limits` bounded the block count before anything is allocated.
        let block_size = block_size_or_legacy(c.block_size);
        let blocks = self.allocate(b, c.size.div_ceil(block_size))?;
        let blocks = lay_out(blocks, c.size, block_size);
        let rec = KeyRecord {
            size: c.size,
            blocks,
            etag: c.etag.clone(),
            metadata: c.metadata.clone(),
            content_type: c.content_type.clone(),
            tags: c.tags.clone(),
            ..Default::default()
        };
        self.write_key(b, &mut bucket, &c.key, old, rec, vol)
    }

    /// Reads the versions a write of `name` would affect and checks the
    /// write's conditions against the current one (a delete marker counts as
    /// no key). Stages nothing.
    fn replaced_key(
        &self,
        bucket: &BucketRecord,
        name: &str,
        cond: Option<&KeyConditions>,
    ) -> Result<versions::Supersede, OmError> {
        let sup = self.supersede(bucket, name)?;
        if let Some(cond) = cond {
            check_conditions(
                cond,
                sup.live(),
                &format!("{}/{}/{name}", bucket.volume, bucket.name),
            )?;
        }
        Ok(sup)
    }

    /// Stages `rec` as the new version of `name`: stamps times and ids, frees
    /// the replaced version's blocks (seq 0) or, in a versioned bucket, keeps
    /// the previous version as noncurrent, and stages `bucket` and `vol`,
    /// whose counters `charge` already moved.
    fn write_key(
        &self,
        b: &mut WriteBatch,
        bucket: &mut BucketRecord,
        name: &str,
        sup: versions::Supersede,
        rec: KeyRecord,
        vol: Option<VolumeRecord>,
    ) -> Result<CommandResult, OmError> {
        if sup.versioning() == versions::UNVERSIONED {
            let key = keys::object_key(&bucket.volume, &bucket.name, name);
            return self.write_entry::<KeyTable>(
                b,
                bucket,
                name,
                &key,
                (sup.into_current(), vol),
                rec,
            );
        }
        let rec = self.put_version(b, bucket, name, sup, rec, 0)?;
        bucket.update_id = self.index;
        self.put_bucket(b, bucket)?;
        self.put_volume(b, vol)?;
        ok(command_result::Result::Key(KeyResult {
            volume: bucket.volume.clone(),
            bucket: bucket.name.clone(),
            name: name.to_string(),
            key: Some(rec),
        }))
    }

    /// `write_key` for any table of `KeyRecord`s (keys, or files of FSO
    /// buckets), at table key `key`; `name` is what the result reports.
    fn write_entry<T: table::TableSchema<Value = KeyRecord>>(
        &self,
        b: &mut WriteBatch,
        bucket: &mut BucketRecord,
        name: &str,
        key: &[u8],
        (old, vol): (Option<KeyRecord>, Option<VolumeRecord>),
        mut rec: KeyRecord,
    ) -> Result<CommandResult, OmError> {
        rec.creation_time_ms = old.as_ref().map_or(self.now, |o| o.creation_time_ms);
        rec.modification_time_ms = self.now;
        rec.object_id = object_id(self.index, 0);
        rec.update_id = self.index;
        if let Some(o) = old {
            let origin = format!("overwrite {}/{}/{name}", bucket.volume, bucket.name);
            self.release_blocks(b, 0, o.blocks, origin)?;
        }
        bucket.update_id = self.index;
        table::put::<T>(self.db, b, key, &mut rec)?;
        self.put_bucket(b, bucket)?;
        self.put_volume(b, vol)?;
        ok(command_result::Result::Key(KeyResult {
            volume: bucket.volume.clone(),
            bucket: bucket.name.clone(),
            name: name.to_string(),
            key: Some(rec),
        }))
    }

    /// Stages the deletion of `name` if it exists: the key goes, its blocks go
    /// to the deleted-blocks table under sequence `seq`, and what it held is
    /// added to `freed`. Returns whether the key existed; stages nothing when
    /// it did not.
    fn remove_key(
        &self,
        b: &mut WriteBatch,
        bucket: &BucketRecord,
        name: &str,
        seq: u32,
        freed: &mut Usage,
    ) -> Result<bool, OmError> {
        let key = keys::object_key(&bucket.volume, &bucket.name, name);
        let Some(old) = table::get::<KeyTable>(self.db, &key)? else {
            return Ok(false);
        };
        freed.free(Usage::removal(old.size));
        let origin = format!("delete {}/{}/{name}", bucket.volume, bucket.name);
        self.release_blocks(b, seq, old.blocks, origin)?;
        table::delete::<KeyTable>(self.db, b, &key)?;
        Ok(true)
    }

    fn put_bucket(&self, b: &mut WriteBatch, bucket: &mut BucketRecord) -> Result<(), OmError> {
        let key = keys::bucket_key(&bucket.volume, &bucket.name);
        table::put::<BucketTable>(self.db, b, &key, bucket)
    }

    fn delete_key(
        &self,
        b: &mut WriteBatch,
        c: &om_proto::store::DeleteKey,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.object_store_bucket(&c.volume, &c.bucket)?;
        let mut freed = Usage::default();
        let deleted = if !c.version_id.is_empty() {
            let old = self.remove_version(b, &bucket, &c.key, &c.version_id, 0, &mut freed)?;
            Some(DeletedVersion {
                version_id: versions::version_id(&old),
                delete_marker: old.delete_marker,
            })
        } else if bucket.versioning != versions::UNVERSIONED {
            let marker = self.add_delete_marker(b, &bucket, &c.key, 0, &mut freed)?;
            Some(DeletedVersion {
                version_id: versions::version_id(&marker),
                delete_marker: true,
            })
        } else if self.remove_key(b, &bucket, &c.key, 0, &mut freed)? {
            None
        } else {
            return Err(OmError::not_found(
                "KEY_NOT_FOUND",
                "key",
                format!("key {}/{}/{} does not exist", c.volume, c.bucket, c.key),
            ));
        };
        // Frees only: never refused, so it may follow the staged removal.
        let vol = self.charge(&mut bucket, freed)?;
        bucket.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        self.put_volume(b, vol)?;
        ok(match deleted {
            Some(d) => command_result::Result::Deleted(d),
            None => command_result::Result::Empty(Empty {}),
        })
    }

    /// DeleteKeys in a versioned bucket or with version ids: each key in
    /// turn, every one seeing what the ones before it did (several versions
    /// of one key may go at once), each with its own outcome.
    fn delete_versions(
        &self,
        b: &mut WriteBatch,
        bucket: &BucketRecord,
        c: &om_proto::store::DeleteKeys,
        freed: &mut Usage,
    ) -> Result<Vec<KeyOutcome>, OmError> {
        let mut outcomes = Vec::with_capacity(c.keys.len());
        for (i, name) in c.keys.iter().enumerate() {
            let vid = c.version_ids.get(i).map_or("", String::as_str);
            let seq = u32::try_from(i).unwrap_or(u32::MAX);
            let done = if !vid.is_empty() {
                self.remove_version(b, bucket, name, vid, seq, freed)
                    .map(|old| (versions::version_id(&old), old.delete_marker))
            } else if bucket.versioning != versions::UNVERSIONED {
                self.add_delete_marker(b, bucket, name, seq, freed)
                    .map(|m| (versions::version_id(&m), true))
            } else if self
                .key_get(&keys::object_key(&bucket.volume, &bucket.name, name))?
                .is_some()
            {
                self.remove_version(b, bucket, name, versions::NULL_VERSION_ID, seq, freed)
                    .map(|_| (String::new(), false))
            } else {
                Err(OmError::not_found(
                    "KEY_NOT_FOUND",
                    "keys",
                    format!("key {}/{}/{name} does not exist", c.volume, c.bucket),
                ))
            };
            outcomes.push(match done {
                Ok((version_id, delete_marker)) => KeyOutcome {
                    key: name.clone(),
                    version_id,
                    delete_marker,
                    ..Default::default()
                },
                Err(e @ OmError::Request { .. }) => KeyOutcome {
                    key: name.clone(),
                    reason: e.reason().to_string(),
                    message: e.to_string(),
                    version_id: vid.to_string(),
                    ..Default::default()
                },
                Err(e) => return Err(e),
            });
        }
        Ok(outcomes)
    }

    /// Deletes each listed key that exists; the others get their own outcome.
    /// A key listed twice is deleted once and reported the same way both times.
    fn delete_keys(
        &self,
        b: &mut WriteBatch,
        c: &om_proto::store::DeleteKeys,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.object_store_bucket(&c.volume, &c.bucket)?;
        if bucket.versioning != versions::UNVERSIONED || !c.version_ids.is_empty() {
            let mut freed = Usage::default();
            let outcomes = self.delete_versions(b, &bucket, c, &mut freed)?;
            // Frees only: never refused, so it may follow the staged removals.
            let vol = self.charge(&mut bucket, freed)?;
            bucket.update_id = self.index;
            self.put_bucket(b, &mut bucket)?;
            self.put_volume(b, vol)?;
            return ok(command_result::Result::DeleteKeys(DeleteKeysResult {
                outcomes,
            }));
        }
        // A key listed twice gets the outcome of its first occurrence.
        let mut seen: std::collections::HashMap<&str, bool> = std::collections::HashMap::new();
        let mut outcomes = Vec::with_capacity(c.keys.len());
        let mut seq = 0u32;
        let mut freed = Usage::default();
        for name in &c.keys {
            let deleted = match seen.get(name.as_str()) {
                Some(d) => *d,
                None => {
                    let removed = self.remove_key(b, &bucket, name, seq, &mut freed)?;
                    seq += u32::from(removed);
                    seen.insert(name, removed);
                    removed
                }
            };
            outcomes.push(if deleted {
                KeyOutcome {
                    key: name.clone(),
                    ..Default::default()
                }
            } else {
                KeyOutcome {
                    key: name.clone(),
                    reason: "KEY_NOT_FOUND".to_string(),
                    message: format!("key {}/{}/{name} does not exist", c.volume, c.bucket),
                    ..Default::default()
                }
            });
        }
        if seq > 0 {
            // Frees only: never refused, so it may follow the staged removals.
            let vol = self.charge(&mut bucket, freed)?;
            bucket.update_id = self.index;
            self.put_bucket(b, &mut bucket)?;
            self.put_volume(b, vol)?;
        }
        ok(command_result::Result::DeleteKeys(DeleteKeysResult {
            outcomes,
        }))
    }

    /// Moves a key to a new name in the same bucket, keeping its object id and blocks.
    fn rename_key(
        &self,
        b: &mut WriteBatch,
        c: &om_proto::store::RenameKey,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.unversioned_object_store_bucket(
            &c.volume,
            &c.bucket,
            "a rename would rewrite history (copy, then delete)",
        )?;
        let from = keys::object_key(&c.volume, &c.bucket, &c.from);
        let to = keys::object_key(&c.volume, &c.bucket, &c.to);
        let mut rec = table::get::<KeyTable>(self.db, &from)?.ok_or_else(|| {
            OmError::not_found(
                "KEY_NOT_FOUND",
                "from",
                format!("key {}/{}/{} does not exist", c.volume, c.bucket, c.from),
            )
        })?;
        if table::get::<KeyTable>(self.db, &to)?.is_some() {
            return Err(OmError::exists(
                "KEY_ALREADY_EXISTS",
                "to",
                format!("key {}/{}/{} already exists", c.volume, c.bucket, c.to),
            ));
        }
        rec.modification_time_ms = self.now;
        rec.update_id = self.index;
        bucket.update_id = self.index;
        table::delete::<KeyTable>(self.db, b, &from)?;
        table::put::<KeyTable>(self.db, b, &to, &mut rec)?;
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::Key(KeyResult {
            volume: c.volume.clone(),
            bucket: c.bucket.clone(),
            name: c.to.clone(),
            key: Some(rec),
        }))
    }

    /// Removes the oldest retry-cache entries created before `before_ms`, at
    /// most the command's batch size; reports how many went, so the leader
    /// proposes the next batch at once when this one was full.
    fn expire_retry_cache(
        &self,
        b: &mut WriteBatch,
        c: &om_proto::store::ExpireRetryCache,
    ) -> Result<CommandResult, OmError> {
        let max = match c.max_entries {
            0 => LEGACY_RETRY_EXPIRY_BATCH,
            n => n.min(MAX_RETRY_EXPIRY_BATCH),
        };
        let mut upper = keys::RETRY_EXPIRY_PREFIX.to_vec();
        upper.extend_from_slice(&c.before_ms.to_be_bytes());
        let mut it = DeferredSeekIter::new(
            self.db,
            keys::RETRY_CACHE_CF,
            Some(keys::RETRY_EXPIRY_PREFIX.to_vec()),
            Some(upper),
        )?;
        let cf = table::cf(self.db, keys::RETRY_CACHE_CF)?;
        let mut n = 0u32;
        while n < max {
            let Some((k, _)) = it.current() else { break };
            if let Some((_, main)) = keys::retry_key_from_expiry(k) {
                b.delete_cf(cf, main);
            }
            b.delete_cf(cf, k);
            n += 1;
            it.advance();
        }
        it.status()?;
        ok(command_result::Result::Count(
            om_proto::store::CountResult {
                count: u64::from(n),
            },
        ))
    }
}

/// `bucket` if it has `layout`, else FAILED_PRECONDITION
/// `UNSUPPORTED_BUCKET_LAYOUT`: object-store calls need an OBJECT_STORE
/// bucket, file-system calls a FILE_SYSTEM_OPTIMIZED one. Shared by apply and
/// the read paths.
pub fn require_layout(bucket: BucketRecord, layout: u32) -> Result<BucketRecord, OmError> {
    if bucket.layout == layout {
        return Ok(bucket);
    }
    let (is, needs, calls) = if layout == LAYOUT_FSO {
        ("OBJECT_STORE", "FILE_SYSTEM_OPTIMIZED", "file-system")
    } else {
        ("FILE_SYSTEM_OPTIMIZED", "OBJECT_STORE", "key")
    };
    Err(OmError::precondition(
        "UNSUPPORTED_BUCKET_LAYOUT",
        "bucket",
        format!(
            "bucket {}/{} is {is}; {calls} calls need an {needs} bucket",
            bucket.volume, bucket.name
        ),
    ))
}

/// Whether `etag` is a plain MD5: 32 lowercase hex digits.
pub fn is_plain_md5(etag: &str) -> bool {
    etag.len() == 32
        && etag
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod tests;
