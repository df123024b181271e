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
    BucketRecord, Command, CommandResult, KeyRecord, Rejection, VolumeRecord, command::Op,
    command_result,
};
use om_raft_store::{ApplyView, EntryWrites, Position};

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
mod objects;
pub mod ops;
mod quota;
mod retry;
pub mod s3;
mod snapshots;
mod standalone;
pub mod tagging;
pub mod versions;
mod write;

pub use bulk::MAX_PUT_KEYS;
pub use limits::{
    MAX_ACK_IDS, MAX_BLOCKS_PER_CALL, MAX_KEY_BLOCKS, MAX_PART_NUMBER, MAX_PART_SIZE,
    MAX_PURGE_BATCH, block_size_or_legacy, blocks_per_call, condition_count, part_number,
};
pub use multipart::{DEFAULT_MIN_PART_SIZE, multipart_etag};
pub use quota::{bucket_namespace, volume_used_bytes};
pub use retry::current_generation;
pub use standalone::{apply_alone, stage_alone, state_tables};
pub use write::{
    LEGACY_MAX_SESSION_BLOCKS, LEGACY_OPEN_KEY_EXPIRY_BATCH, MAX_OPEN_KEY_EXPIRY_BATCH,
    MAX_SESSION_BLOCKS, OPEN_KEY_EXPIRY_BATCH,
};

use crate::error::{ErrorKind, OmError};
use crate::store::keys;
use crate::store::table::{self, BucketTable, VolumeTable};
use blocks::lay_out;
use conditions::check_conditions;
use quota::Usage;

/// The version of apply's rules this binary proposes and the newest it
/// applies (`Command.rules`): `rules::CURRENT`, where every behaviour
/// change is named.
pub const RULES: u32 = crate::rules::CURRENT;

/// The block size of commands that carry none (written before they did).
/// Never change it: old log entries replay with it.
pub const LEGACY_BLOCK_SIZE: u64 = 256 * 1024 * 1024;

/// Size of the blocks a key's data is split into when om allocates them: the
/// leader stamps it into every command that allocates, so changing it changes
/// only later writes, on every replica alike.
pub const BLOCK_SIZE: u64 = LEGACY_BLOCK_SIZE;

/// Retry-cache entries one `ExpireRetryCache` command removes when the command
/// names no batch size: the value before commands carried it, kept so old log
/// entries apply exactly as they did.
pub const LEGACY_RETRY_EXPIRY_BATCH: u32 = 10_000;

pub use crate::limits::{MAX_BLOCK_SIZE, MAX_KEY_SIZE, MAX_RETRY_EXPIRY_BATCH, MIN_BLOCK_SIZE};
pub use crate::store::records::{LAYOUT_FSO, LAYOUT_OBJECT_STORE};

/// Object ids are the log index shifted left by 8 plus a per-entry counter, so
/// they are unique across the cluster and need no coordination.
pub fn object_id(log_index: u64, n: u8) -> u64 {
    (log_index << 8) | u64::from(n)
}

/// Most writes one batch entry holds (`Command.batch`): a write's slot takes
/// 8 bits of its ids (`Ctx::object_id`).
pub const MAX_BATCH_WRITES: usize = 256;

/// Set in the object ids of writes in batch entries, which a plain entry's
/// ids (`object_id`, below 2^56 for any index below 2^48) never have.
const BATCHED_OBJECT_ID: u64 = 1 << 63;

/// The application half of the Raft state machine.
#[derive(Debug, Default)]
pub struct OmApplier {
    /// The newest command time applied, for the node's clock
    /// (`service::clock`): read outside apply, never by it.
    pub latest_time: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl om_raft_store::Applier for OmApplier {
    fn apply(
        &self,
        view: &ApplyView<'_>,
        batch: &mut EntryWrites<'_>,
        at: Position,
        cmd: &Command,
    ) -> Result<CommandResult, om_raft_store::ApplyError> {
        let newest = cmd
            .batch
            .iter()
            .map(|c| c.now_ms)
            .fold(cmd.now_ms, u64::max);
        self.latest_time
            .fetch_max(newest, std::sync::atomic::Ordering::Relaxed);
        apply_command(view, batch, at, cmd).map_err(|e| om_raft_store::ApplyError(e.to_string()))
    }

    /// Every write reads its bucket (and the volume's usage, the block
    /// counter, the retry cache's generation): a few records, read again and
    /// again.
    fn hot_tables(&self) -> &[&'static str] {
        &[keys::BUCKETS_CF, keys::VOLUMES_CF, keys::COUNTERS_CF]
    }

    fn pins_state(&self, cmd: &Command) -> bool {
        matches!(cmd.op, Some(Op::VerifyMark(_)))
    }
}

/// Applies one command, a plain entry's or one write of a batch entry (`at`
/// names its slot). `Err` is a storage failure (fatal); request failures
/// are `Ok` results holding a `Rejection`.
pub fn apply_command(
    db: &ApplyView<'_>,
    batch: &mut EntryWrites<'_>,
    at: Position,
    cmd: &Command,
) -> Result<CommandResult, OmError> {
    let log_index = at.index;
    if cmd.rules > RULES {
        // Applying it with older rules could diverge from the replicas that
        // know them: stop instead (a storage-class error).
        return Err(OmError::Internal(format!(
            "entry {log_index} needs apply rules {}; this binary knows up to {RULES}",
            cmd.rules
        )));
    }
    let slot = match batched_slot(at, cmd) {
        Ok(slot) => slot,
        Err(e @ OmError::Internal(_)) => return Err(e),
        Err(e) => return Ok(rejection(e)),
    };
    let dedup = !cmd.client_id.is_empty();
    let retry_client = retry_client(cmd);
    let generation = if dedup {
        retry::generation_for(db, cmd)?
    } else {
        None
    };
    if dedup && let Some(rec) = retry::lookup(db, cmd, &retry_client, generation)? {
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
    let ctx = Ctx {
        db,
        index: log_index,
        slot,
        now: cmd.now_ms,
        rules: cmd.rules,
        caller: cmd.caller.as_ref(),
        holders: RefCell::new(HashMap::new()),
        staged_keys: RefCell::default(),
        retired: RefCell::default(),
        changed: RefCell::default(),
        versions_made: std::cell::Cell::new(0),
    };
    // Handlers check everything before they stage their first write, so a
    // rejected command leaves the batch as it was; the length check enforces it.
    let staged_before = batch.len();
    let outcome = limits::check_caller(cmd).and_then(|()| match &cmd.op {
        None => Err(OmError::invalid(
            "EMPTY_COMMAND",
            "op",
            "command has no operation",
        )),
        Some(op) => ops::limits(op, cmd.rules)
            .and_then(|()| {
                if !crate::rules::ACL_AT_APPLY.holds(cmd.rules) {
                    return Ok(());
                }
                crate::authz::check_rights(
                    db,
                    cmd.caller.as_ref(),
                    ops::rights(op, cmd.rules),
                    cmd.rules,
                )
                .and_then(|()| ops::check_caller(db, cmd.caller.as_ref(), op))
            })
            .and_then(|()| ops::apply(op, &ctx, batch)),
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
        retry::record(db, batch, cmd, &retry_client, generation, &result)?;
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
        Some(c) if crate::rules::RETRY_BY_CALLER.holds(cmd.rules) => {
            std::borrow::Cow::Owned(format!("{}\u{1}{}\u{1}{}", cmd.client_id, c.user, c.by))
        }
        _ => std::borrow::Cow::Borrowed(&cmd.client_id),
    }
}

/// The replicated result of a refused request.
pub(crate) fn rejection(e: OmError) -> CommandResult {
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
            ..Default::default()
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
        ..Default::default()
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
    /// Every read goes through the run's view (`store::view`).
    db: &'a ApplyView<'a>,
    index: u64,
    /// The write's slot in its batch entry; `None` for a plain entry.
    slot: Option<u8>,
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
    /// `keys` entries this command retained for a snapshot
    /// (`snapshots::retire`), so a second leave of one entry keeps one copy.
    retired: RefCell<std::collections::BTreeSet<Vec<u8>>>,
    /// Current keys this command logged as changed (`snapshots::log_change`).
    changed: RefCell<std::collections::BTreeSet<Vec<u8>>>,
    /// Versions this command created so far (`versions::version_stamp`).
    versions_made: std::cell::Cell<u16>,
}

fn ok(r: command_result::Result) -> Result<CommandResult, OmError> {
    Ok(CommandResult {
        result: Some(r),
        ..Default::default()
    })
}

/// The slot of a write in a batch entry, after the checks a batched write
/// passes before anything else (none of them reachable from a leader, which
/// batches only what passes): the rules that added batches, a slot its ids
/// have room for, an operation `ops::batchable`, and no batch of its own.
/// A refusal changes nothing and is not kept in the retry cache.
fn batched_slot(at: Position, cmd: &Command) -> Result<Option<u8>, OmError> {
    let Some(slot) = at.slot else {
        if !cmd.batch.is_empty() {
            return Err(OmError::Internal(format!(
                "entry {}: a batch entry's writes are applied one by one",
                at.index
            )));
        }
        return Ok(None);
    };
    if !crate::rules::BATCHED_WRITES.holds(cmd.rules) {
        return Err(OmError::invalid(
            "UNSUPPORTED_COMMAND",
            "batch.rules",
            format!(
                "a write in a batch entry needs rules {} or newer, not {}",
                crate::rules::BATCHED_WRITES.since,
                cmd.rules
            ),
        ));
    }
    let slot = u8::try_from(slot).map_err(|_| {
        OmError::invalid(
            "BATCH_TOO_LONG",
            "batch",
            format!("a batch entry holds at most {MAX_BATCH_WRITES} writes"),
        )
    })?;
    if !cmd.batch.is_empty() || !cmd.op.as_ref().is_some_and(ops::batchable) {
        return Err(OmError::invalid(
            "NOT_BATCHABLE",
            "batch.op",
            format!("{} is not applied in a batch entry", cmd.op_name()),
        ));
    }
    Ok(Some(slot))
}

impl Ctx<'_> {
    /// The `n`-th object id (also session and upload ids) this write takes.
    /// A write in a batch entry takes its own 256 below its slot, with
    /// `BATCHED_OBJECT_ID` set, so no two writes of any entries share one.
    fn object_id(&self, n: u8) -> u64 {
        match self.slot {
            None => object_id(self.index, n),
            Some(s) => BATCHED_OBJECT_ID | (self.index << 16) | (u64::from(s) << 8) | u64::from(n),
        }
    }

    /// The stamp of the `n`-th version this write creates: a write in a
    /// batch entry stamps `n` below its slot, so versions still sort in log
    /// order (a batchable write creates at most two).
    fn version_stamp(&self, n: u16) -> u64 {
        match self.slot {
            None => versions::version_stamp(self.index, n),
            Some(s) => versions::version_stamp(self.index, (u16::from(s) << 8) | (n & 0xff)),
        }
    }

    /// The key of this write's `seq`-th deleted-blocks record: a write in a
    /// batch entry numbers its records below its slot (a batchable write
    /// frees at most a key's blocks, far below 2^24 records).
    fn deleted_blocks_key(&self, seq: u32) -> Vec<u8> {
        let seq = match self.slot {
            None => seq,
            Some(s) => (u32::from(s) << 24) | (seq & 0x00ff_ffff),
        };
        keys::deleted_blocks_key(self.index, seq)
    }

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

    fn put_bucket(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &mut BucketRecord,
    ) -> Result<(), OmError> {
        let key = keys::bucket_key(&bucket.volume, &bucket.name);
        table::put::<BucketTable>(self.db, b, &key, bucket)
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
mod batch_tests;
#[cfg(test)]
mod conditions_tests;
#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod part_sizes_tests;
#[cfg(test)]
mod retry_tests;
#[cfg(test)]
mod snapshots_tests;
#[cfg(test)]
mod tests;
