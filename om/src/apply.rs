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
    BlockRecord, BucketRecord, Command, CommandResult, DeleteKeysResult, DeletedBlocksRecord,
    DeletedVersion, Empty, KeyConditions, KeyOutcome, KeyRecord, KeyResult, Rejection,
    RetryCacheRecord, VolumeRecord, command::Op, command_result,
};
use rocksdb::{DB, WriteBatch};

mod acl;
mod bulk;
mod fs;
mod lifecycle;
mod limits;
mod multipart;
mod quota;
pub mod tagging;
pub mod versions;
mod write;

pub use bulk::MAX_PUT_KEYS;
pub use limits::{
    MAX_PURGE_BATCH, block_size_or_legacy, blocks_per_call, key_size, part_number, put_keys_count,
};
pub use multipart::{DEFAULT_MIN_PART_SIZE, MAX_PART_NUMBER, MAX_PART_SIZE, multipart_etag};
pub use quota::{bucket_namespace, volume_used_bytes};
pub use write::{
    LEGACY_MAX_SESSION_BLOCKS, LEGACY_OPEN_KEY_EXPIRY_BATCH, MAX_ACK_IDS, MAX_BLOCKS_PER_CALL,
    MAX_KEY_BLOCKS, MAX_OPEN_KEY_EXPIRY_BATCH, MAX_SESSION_BLOCKS, OPEN_KEY_EXPIRY_BATCH,
};

use crate::error::{ErrorKind, OmError};
use crate::store::iter::DeferredSeekIter;
use crate::store::keys;
use crate::store::table::{
    self, BucketTable, DeletedBlocksTable, KeyTable, RetryCacheTable, VolumeTable,
};
use quota::Usage;

/// The version of apply's rules this binary proposes and the newest it
/// applies (`Command.rules`; see ARCHITECTURE.md, "What apply may read").
/// Raise it with every change to what an existing command does, and branch
/// on `Ctx::rules` so older entries keep applying as they did.
pub const RULES: u32 = 6;

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

/// Layout numbers stored in `BucketRecord::layout`.
pub const LAYOUT_OBJECT_STORE: u32 = 1;
pub const LAYOUT_FSO: u32 = 2;

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
    if dedup {
        let rk = keys::retry_key(&cmd.client_id, cmd.seq);
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
            Some(op) if cmd.rules >= 2 => crate::authz::check_command(db, cmd.caller.as_ref(), op),
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
        let rk = keys::retry_key(&cmd.client_id, cmd.seq);
        table::put::<RetryCacheTable>(db, batch, &rk, &mut rec)?;
        batch.put_cf(
            table::cf(db, keys::RETRY_CACHE_CF)?,
            keys::retry_expiry_key(cmd.now_ms, &cmd.client_id, cmd.seq),
            [],
        );
    }
    Ok(result)
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

    fn create_volume(
        &self,
        b: &mut WriteBatch,
        c: &om_proto::store::CreateVolume,
    ) -> Result<CommandResult, OmError> {
        let key = keys::volume_key(&c.name);
        if table::get::<VolumeTable>(self.db, &key)?.is_some() {
            return Err(OmError::exists(
                "VOLUME_ALREADY_EXISTS",
                "name",
                format!("volume {:?} already exists", c.name),
            ));
        }
        let mut v = VolumeRecord {
            format: 0,
            name: c.name.clone(),
            owner: c.owner.clone(),
            quota_bytes: c.quota_bytes,
            quota_namespace: c.quota_namespace,
            creation_time_ms: self.now,
            modification_time_ms: self.now,
            object_id: object_id(self.index, 0),
            update_id: self.index,
            metadata: c.metadata.clone(),
            bucket_count: 0,
            used_bytes: (self.rules >= 1).then_some(0),
            acl: Vec::new(),
        };
        table::put::<VolumeTable>(self.db, b, &key, &mut v)?;
        ok(command_result::Result::Volume(v))
    }

    fn delete_volume(
        &self,
        b: &mut WriteBatch,
        c: &om_proto::store::DeleteVolume,
    ) -> Result<CommandResult, OmError> {
        let v = self.volume(&c.name, "name")?;
        // The count is maintained by bucket create/delete; the scan below is one
        // bounded seek and guards against a count that disagrees with the table.
        let mut it = DeferredSeekIter::with_prefix(
            self.db,
            keys::BUCKETS_CF,
            &keys::bucket_prefix(&c.name),
        )?;
        if v.bucket_count > 0 || it.has_current() {
            return Err(OmError::precondition(
                "VOLUME_NOT_EMPTY",
                "name",
                format!("volume {:?} still has buckets", c.name),
            ));
        }
        it.status()?;
        table::delete::<VolumeTable>(self.db, b, &keys::volume_key(&c.name))?;
        ok(command_result::Result::Empty(Empty {}))
    }

    fn create_bucket(
        &self,
        b: &mut WriteBatch,
        c: &om_proto::store::CreateBucket,
    ) -> Result<CommandResult, OmError> {
        let mut vol = self.volume(&c.volume, "volume")?;
        let key = keys::bucket_key(&c.volume, &c.name);
        if table::get::<BucketTable>(self.db, &key)?.is_some() {
            return Err(OmError::exists(
                "BUCKET_ALREADY_EXISTS",
                "name",
                format!("bucket {}/{} already exists", c.volume, c.name),
            ));
        }
        if vol.quota_namespace > 0 && vol.bucket_count >= vol.quota_namespace {
            return Err(OmError::precondition(
                "QUOTA_EXCEEDED",
                "volume",
                format!(
                    "volume {:?} holds its quota of {} buckets",
                    c.volume, vol.quota_namespace
                ),
            ));
        }
        let layout = match c.layout {
            0 | LAYOUT_OBJECT_STORE => LAYOUT_OBJECT_STORE,
            LAYOUT_FSO => LAYOUT_FSO,
            other => {
                return Err(OmError::invalid(
                    "INVALID_LAYOUT",
                    "layout",
                    format!("unknown bucket layout {other}"),
                ));
            }
        };
        let mut bucket = BucketRecord {
            format: 0,
            volume: c.volume.clone(),
            name: c.name.clone(),
            layout,
            creation_time_ms: self.now,
            modification_time_ms: self.now,
            object_id: object_id(self.index, 0),
            update_id: self.index,
            metadata: c.metadata.clone(),
            key_count: 0,
            used_bytes: 0,
            open_key_count: 0,
            quota_bytes: c.quota_bytes,
            quota_namespace: c.quota_namespace,
            dir_count: (self.rules >= 1).then_some(0),
            acl: Vec::new(),
            owner: self.caller.map(|c| c.user.clone()).unwrap_or_default(),
            versioning: versions::UNVERSIONED,
        };
        vol.bucket_count = self.grow(vol.bucket_count, 1, "name", "the volume's bucket count")?;
        vol.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        table::put::<VolumeTable>(self.db, b, &keys::volume_key(&c.volume), &mut vol)?;
        ok(command_result::Result::Bucket(bucket))
    }

    fn delete_bucket(
        &self,
        b: &mut WriteBatch,
        c: &om_proto::store::DeleteBucket,
    ) -> Result<CommandResult, OmError> {
        let bucket = self.bucket(&c.volume, &c.name)?;
        let mut it = DeferredSeekIter::with_prefix(
            self.db,
            keys::KEYS_CF,
            &keys::object_prefix(&c.volume, &c.name),
        )?;
        if bucket.key_count > 0 || it.has_current() {
            return Err(OmError::precondition(
                "BUCKET_NOT_EMPTY",
                "name",
                format!("bucket {}/{} still has keys", c.volume, c.name),
            ));
        }
        it.status()?;
        // Keys being written and uploads in progress hold blocks; the bucket
        // goes only once they are committed, aborted or expired.
        if bucket.open_key_count > 0 {
            return Err(OmError::precondition(
                "BUCKET_NOT_EMPTY",
                "name",
                format!(
                    "bucket {}/{} still has keys being written",
                    c.volume, c.name
                ),
            ));
        }
        let mut dirs = DeferredSeekIter::with_prefix(
            self.db,
            keys::DIRECTORIES_CF,
            &keys::children_prefix(bucket.object_id),
        )?;
        if dirs.has_current() {
            return Err(OmError::precondition(
                "BUCKET_NOT_EMPTY",
                "name",
                format!("bucket {}/{} still has directories", c.volume, c.name),
            ));
        }
        dirs.status()?;
        let prefix = keys::object_prefix(&c.volume, &c.name);
        for (cf, what) in [
            (keys::OPEN_KEYS_CF, "keys being written"),
            (keys::UPLOADS_CF, "multipart uploads in progress"),
        ] {
            let mut it = DeferredSeekIter::with_prefix(self.db, cf, &prefix)?;
            if it.has_current() {
                return Err(OmError::precondition(
                    "BUCKET_NOT_EMPTY",
                    "name",
                    format!("bucket {}/{} still has {what}", c.volume, c.name),
                ));
            }
            it.status()?;
        }
        let mut vol = self.volume(&c.volume, "volume")?;
        vol.bucket_count = vol.bucket_count.saturating_sub(1);
        if self.rules >= 1 {
            vol.used_bytes = vol.used_bytes.map(|u| u.saturating_sub(bucket.used_bytes));
        }
        vol.update_id = self.index;
        table::delete::<BucketTable>(self.db, b, &keys::bucket_key(&c.volume, &c.name))?;
        // Its lifecycle configuration goes with it (a bucket created again
        // under the name starts without one).
        if self.rules >= 4 {
            table::delete::<table::LifecycleTable>(
                self.db,
                b,
                &keys::bucket_key(&c.volume, &c.name),
            )?;
        }
        // And where its scan stood (rules 5; a recreated bucket's object id
        // differs anyway, so older entries need not remove it).
        if self.rules >= 5 {
            table::delete::<table::LifecycleScanTable>(
                self.db,
                b,
                &keys::bucket_key(&c.volume, &c.name),
            )?;
        }
        table::put::<VolumeTable>(self.db, b, &keys::volume_key(&c.volume), &mut vol)?;
        ok(command_result::Result::Empty(Empty {}))
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

    /// How many keys hold block `id`: 1 unless `block_refs` says otherwise.
    fn block_holders(&self, id: u64) -> Result<u32, OmError> {
        if let Some(n) = self.holders.borrow().get(&id) {
            return Ok(*n);
        }
        let cf = table::cf(self.db, keys::BLOCK_REFS_CF)?;
        match table::get_pinned(self.db, cf, &keys::block_ref_key(id))? {
            Some(v) => Ok(u32::from_be_bytes(v.as_ref().try_into().map_err(|_| {
                OmError::Internal(format!("corrupt holder count of block {id}"))
            })?)),
            None => Ok(1),
        }
    }

    fn set_block_holders(&self, b: &mut WriteBatch, id: u64, n: u32) -> Result<(), OmError> {
        let cf = table::cf(self.db, keys::BLOCK_REFS_CF)?;
        if n <= 1 {
            b.delete_cf(cf, keys::block_ref_key(id));
        } else {
            b.put_cf(cf, keys::block_ref_key(id), n.to_be_bytes());
        }
        self.holders.borrow_mut().insert(id, n);
        Ok(())
    }

    /// Adds one holder to each block (a copy now shares them). Every count
    /// is checked before the first is staged: from rules 1 a block already
    /// held `u32::MAX` times refuses the copy (rules-0 entries wrap, as the
    /// build that applied them did).
    fn share_blocks(&self, b: &mut WriteBatch, blocks: &[BlockRecord]) -> Result<(), OmError> {
        let mut counts = Vec::with_capacity(blocks.len());
        for blk in blocks {
            let n = self.block_holders(blk.block_id)?;
            let more = if self.rules == 0 {
                n.wrapping_add(1)
            } else {
                n.checked_add(1).ok_or_else(|| {
                    OmError::precondition(
                        "COUNTER_OVERFLOW",
                        "src_key",
                        format!("block {} is shared by too many keys", blk.block_id),
                    )
                })?
            };
            counts.push((blk.block_id, more));
        }
        for (id, n) in counts {
            self.set_block_holders(b, id, n)?;
        }
        Ok(())
    }

    /// Drops one holder of each block; blocks whose last holder this was go
    /// to the deleted-blocks table under this entry's index and `seq`.
    fn release_blocks(
        &self,
        b: &mut WriteBatch,
        seq: u32,
        blocks: Vec<BlockRecord>,
        origin: String,
    ) -> Result<(), OmError> {
        let mut freed = Vec::with_capacity(blocks.len());
        for blk in blocks {
            let n = self.block_holders(blk.block_id)?;
            if n > 1 {
                self.set_block_holders(b, blk.block_id, n - 1)?;
            } else if n == 1 {
                // Freed: a second release of it in this command is a bug.
                self.holders.borrow_mut().insert(blk.block_id, 0);
                freed.push(blk);
            } else {
                return Err(OmError::Internal(format!(
                    "block {} released twice in one command",
                    blk.block_id
                )));
            }
        }
        if freed.is_empty() {
            return Ok(());
        }
        let mut rec = DeletedBlocksRecord {
            format: 0,
            blocks: freed,
            origin,
        };
        table::put::<DeletedBlocksTable>(
            self.db,
            b,
            &keys::deleted_blocks_key(self.index, seq),
            &mut rec,
        )
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

    /// Takes `n` fresh block ids from the replicated counter; its first
    /// write, so an exhausted counter is refused before anything is staged.
    fn allocate(&self, b: &mut WriteBatch, n: u64) -> Result<Vec<u64>, OmError> {
        let first = table::get_counter(self.db, keys::NEXT_BLOCK_ID, 1)?;
        let end = first.checked_add(n).ok_or_else(|| {
            OmError::precondition("COUNTER_OVERFLOW", "", "the block id counter is exhausted")
        })?;
        if n > 0 {
            table::put_counter(self.db, b, keys::NEXT_BLOCK_ID, end)?;
        }
        Ok((first..end).collect())
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

    /// Enables or suspends versioning of an OBJECT_STORE bucket.
    fn set_bucket_versioning(
        &self,
        b: &mut WriteBatch,
        c: &om_proto::store::SetBucketVersioning,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.bucket(&c.volume, &c.bucket)?;
        if c.versioning != versions::ENABLED && c.versioning != versions::SUSPENDED {
            return Err(OmError::invalid(
                "INVALID_VERSIONING",
                "versioning",
                "versioning is ENABLED or SUSPENDED; a bucket never returns to UNVERSIONED",
            ));
        }
        if bucket.layout != LAYOUT_OBJECT_STORE {
            return Err(OmError::precondition(
                "VERSIONING_NOT_SUPPORTED",
                "bucket",
                format!(
                    "bucket {}/{} is FILE_SYSTEM_OPTIMIZED; only OBJECT_STORE buckets are versioned",
                    c.volume, c.bucket
                ),
            ));
        }
        bucket.versioning = c.versioning;
        bucket.modification_time_ms = self.now;
        bucket.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::Bucket(bucket))
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

/// Block records for `ids` filled in order, each up to `block_size`,
/// covering `size` bytes (`ids` holds `size.div_ceil(block_size)` ids).
fn lay_out(ids: Vec<u64>, size: u64, block_size: u64) -> Vec<BlockRecord> {
    let mut offset = 0;
    ids.into_iter()
        .map(|block_id| {
            let length = block_size.min(size.saturating_sub(offset));
            let blk = BlockRecord {
                block_id,
                offset,
                length,
            };
            offset += length;
            blk
        })
        .collect()
}

/// Whether `etag` is a plain MD5: 32 lowercase hex digits.
pub fn is_plain_md5(etag: &str) -> bool {
    etag.len() == 32
        && etag
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// Evaluates a write's conditions against the key it would replace.
fn check_conditions(
    cond: &KeyConditions,
    current: Option<&KeyRecord>,
    path: &str,
) -> Result<(), OmError> {
    if cond.if_none_match_any && current.is_some() {
        return Err(OmError::precondition(
            "IF_NONE_MATCH_FAILED",
            "conditions.if_none_match_any",
            format!("key {path} exists"),
        ));
    }
    if !cond.if_match.is_empty() {
        match current {
            None => {
                return Err(OmError::not_found(
                    "KEY_NOT_FOUND",
                    "conditions.if_match",
                    format!("key {path} does not exist"),
                ));
            }
            Some(k) if k.etag != cond.if_match => {
                return Err(OmError::precondition(
                    "IF_MATCH_FAILED",
                    "conditions.if_match",
                    format!("key {path} has ETag {:?}, not {:?}", k.etag, cond.if_match),
                ));
            }
            Some(_) => {}
        }
    }
    if cond.expected_update_id != 0 {
        match current {
            None => {
                return Err(OmError::not_found(
                    "KEY_NOT_FOUND",
                    "conditions.expected_update_id",
                    format!("key {path} does not exist"),
                ));
            }
            Some(k) if k.update_id != cond.expected_update_id => {
                return Err(OmError::precondition(
                    "UPDATE_ID_MISMATCH",
                    "conditions.expected_update_id",
                    format!(
                        "key {path} was last written at {}, not {}",
                        k.update_id, cond.expected_update_id
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod limits_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_ids_are_unique_per_entry() {
        assert_ne!(object_id(1, 0), object_id(1, 1));
        assert_ne!(object_id(1, 255), object_id(2, 0));
    }

    /// Applies commands one entry at a time, as the state machine does.
    pub(super) struct Sm {
        _dir: tempfile::TempDir,
        pub db: DB,
        /// The database's options, which hold its statistics.
        opts: rocksdb::Options,
        index: u64,
        /// Added to every command's time: tests move the clock with it.
        pub clock_ms: u64,
    }

    impl Sm {
        pub fn new() -> Sm {
            let dir = tempfile::tempdir().unwrap();
            let mut o = rocksdb::Options::default();
            o.create_if_missing(true);
            o.create_missing_column_families(true);
            o.enable_statistics();
            let db = DB::open_cf(&o, dir.path(), keys::TABLE_CFS).unwrap();
            Sm {
                _dir: dir,
                db,
                opts: o,
                index: 0,
                clock_ms: 0,
            }
        }

        /// The result, and how many writes the entry staged; stamped with
        /// this binary's rules, as a leader stamps it.
        pub fn apply(&mut self, op: Op) -> (CommandResult, usize) {
            self.apply_rules(op, RULES)
        }

        /// `apply` of a command stamped with `rules` (0: an old log entry).
        pub fn apply_rules(&mut self, op: Op, rules: u32) -> (CommandResult, usize) {
            self.index += 1;
            let mut b = WriteBatch::default();
            let cmd = Command {
                now_ms: 1000 + self.index + self.clock_ms,
                op: Some(op),
                rules,
                ..Default::default()
            };
            let r = apply_command(&self.db, &mut b, self.index, &cmd).unwrap();
            let n = b.len();
            self.db.write(b).unwrap();
            (r, n)
        }

        pub fn ok(&mut self, op: Op) -> command_result::Result {
            into_outcome(self.apply(op).0).unwrap()
        }

        /// `apply` of a command proposed for `user` (not an admin).
        pub fn apply_as(&mut self, user: &str, op: Op) -> (CommandResult, usize) {
            self.index += 1;
            let mut b = WriteBatch::default();
            let cmd = Command {
                now_ms: 1000 + self.index,
                op: Some(op),
                rules: RULES,
                caller: Some(om_proto::store::Caller {
                    user: user.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let r = apply_command(&self.db, &mut b, self.index, &cmd).unwrap();
            let n = b.len();
            self.db.write(b).unwrap();
            (r, n)
        }

        /// Point reads (`Get`s) of the database so far.
        pub fn keys_read(&self) -> u64 {
            self.opts
                .get_ticker_count(rocksdb::statistics::Ticker::NumberKeysRead)
        }

        /// The time the next command will carry.
        pub fn next_now(&self) -> u64 {
            1000 + self.index + 1 + self.clock_ms
        }

        pub fn ok_rules(&mut self, op: Op, rules: u32) -> command_result::Result {
            into_outcome(self.apply_rules(op, rules).0).unwrap()
        }

        pub fn rejected(&mut self, op: Op) -> String {
            self.rejected_rules(op, RULES)
        }

        pub fn rejected_rules(&mut self, op: Op, rules: u32) -> String {
            let (r, staged) = self.apply_rules(op, rules);
            assert_eq!(staged, 0, "a rejected command staged writes");
            match into_outcome(r) {
                Err(OmError::Request { reason, .. }) => reason,
                other => panic!("expected a rejection, got {other:?}"),
            }
        }
    }

    use om_proto::store as st;

    pub(super) fn setup(sm: &mut Sm, layout: u32) {
        sm.ok(Op::CreateVolume(st::CreateVolume {
            name: "vol".into(),
            ..Default::default()
        }));
        sm.ok(Op::CreateBucket(st::CreateBucket {
            volume: "vol".into(),
            name: "bkt".into(),
            layout,
            ..Default::default()
        }));
    }

    /// A write to an existing bucket reads the bucket but not its volume to
    /// learn that the volume exists (a bucket never outlives its volume); the
    /// volume is read once, for its usage. A missing bucket still names what
    /// is missing.
    #[test]
    fn a_put_reads_its_volume_once() {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        let put = |volume: &str, bucket: &str, key: &str| {
            Op::PutKey(st::PutKey {
                volume: volume.into(),
                bucket: bucket.into(),
                key: key.into(),
                size: 10,
                ..Default::default()
            })
        };
        sm.ok(put("vol", "bkt", "a"));
        let before = sm.keys_read();
        sm.ok(put("vol", "bkt", "b"));
        // The bucket, the key's current version, the block id counter and
        // the volume (its used bytes).
        assert_eq!(sm.keys_read() - before, 4);
        assert_eq!(sm.rejected(put("nope", "bkt", "c")), "VOLUME_NOT_FOUND");
        assert_eq!(sm.rejected(put("vol", "nope", "c")), "BUCKET_NOT_FOUND");
    }

    /// Apply decides rights from the state as of the entry: a grant lets a
    /// user write, its removal stops the next command, and a refusal stages
    /// nothing; a bucket belongs to whoever created it.
    #[test]
    fn apply_checks_the_callers_rights_against_the_acl_of_its_entry() {
        let mut sm = Sm::new();
        sm.ok(Op::CreateVolume(st::CreateVolume {
            name: "vol".into(),
            owner: "alice".into(),
            ..Default::default()
        }));
        let (r, _) = sm.apply_as(
            "alice",
            Op::CreateBucket(st::CreateBucket {
                volume: "vol".into(),
                name: "bkt".into(),
                ..Default::default()
            }),
        );
        match into_outcome(r).unwrap() {
            command_result::Result::Bucket(b) => assert_eq!(b.owner, "alice"),
            other => panic!("{other:?}"),
        }
        let put = || {
            Op::PutKey(st::PutKey {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: "k".into(),
                ..Default::default()
            })
        };
        let denied = |sm: &mut Sm| {
            let (r, staged) = sm.apply_as("bob", put());
            assert_eq!(staged, 0, "a refused command staged writes");
            match into_outcome(r) {
                Err(OmError::Denied {
                    right, resource, ..
                }) => assert_eq!((right.as_str(), resource.as_str()), ("WRITE", "/vol/bkt")),
                other => panic!("expected ACCESS_DENIED, got {other:?}"),
            }
        };
        denied(&mut sm);
        let grant = |mode| {
            Op::SetAcl(st::SetAcl {
                volume: "vol".into(),
                bucket: "bkt".into(),
                mode,
                grants: vec![st::AclGrant {
                    kind: crate::authz::KIND_USER,
                    name: "bob".into(),
                    rights: crate::authz::WRITE,
                }],
            })
        };
        // bob may not grant himself anything.
        let (r, staged) = sm.apply_as("bob", grant(1));
        assert!(matches!(into_outcome(r), Err(OmError::Denied { .. })) && staged == 0);
        into_outcome(sm.apply_as("alice", grant(1)).0).unwrap();
        into_outcome(sm.apply_as("bob", put()).0).unwrap();
        into_outcome(sm.apply_as("alice", grant(2)).0).unwrap();
        denied(&mut sm);
        // Commands without a caller (internal, or authentication off) pass.
        sm.ok(put());
    }

    /// Checks the edge also makes are repeated at apply, so a replicated
    /// command on its own cannot corrupt state.
    #[test]
    fn apply_refuses_parts_out_of_order_on_its_own() {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        let command_result::Result::Upload(u) =
            sm.ok(Op::InitiateMultipart(st::InitiateMultipart {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: "k".into(),
                ..Default::default()
            }))
        else {
            panic!("no upload")
        };
        let id = u.upload.unwrap().upload_id;
        let etag = "0cc175b9c0f1b6a831c399e269772661".to_string();
        sm.ok(Op::CommitPart(st::CommitPart {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            upload_id: id,
            part_number: 1,
            size: 10,
            etag: etag.clone(),
            ..Default::default()
        }));
        let part = st::PartRef {
            part_number: 1,
            etag,
        };
        let reason = sm.rejected(Op::CompleteMultipart(st::CompleteMultipart {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            upload_id: id,
            parts: vec![part.clone(), part],
            ..Default::default()
        }));
        assert_eq!(reason, "INVALID_PART_ORDER");
    }

    #[test]
    fn apply_refuses_moving_a_directory_under_itself() {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_FSO);
        sm.ok(Op::CreateDirectory(st::CreateDirectory {
            volume: "vol".into(),
            bucket: "bkt".into(),
            path: "a/x".into(),
        }));
        for to in ["a/x/y", "a/y"] {
            let reason = sm.rejected(Op::RenamePath(st::RenamePath {
                volume: "vol".into(),
                bucket: "bkt".into(),
                from: "a".into(),
                to: to.into(),
                ..Default::default()
            }));
            assert_eq!(reason, "RENAME_INTO_ITSELF", "{to}");
        }
        // A sibling target is fine.
        sm.ok(Op::RenamePath(st::RenamePath {
            volume: "vol".into(),
            bucket: "bkt".into(),
            from: "a".into(),
            to: "b".into(),
            ..Default::default()
        }));
    }

    #[test]
    fn a_block_released_twice_in_one_command_is_an_error() {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        let ctx = Ctx {
            db: &sm.db,
            index: 99,
            now: 0,
            rules: RULES,
            caller: None,
            holders: RefCell::new(HashMap::new()),
            staged_keys: RefCell::default(),
            versions_made: std::cell::Cell::new(0),
        };
        let mut b = WriteBatch::default();
        let blk = BlockRecord {
            block_id: 7,
            offset: 0,
            length: 1,
        };
        ctx.release_blocks(&mut b, 0, vec![blk], String::new())
            .unwrap();
        assert!(
            ctx.release_blocks(&mut b, 1, vec![blk], String::new())
                .is_err()
        );
    }
}
