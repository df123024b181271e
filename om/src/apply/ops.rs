//! One home per replicated operation. Each command type implements
//! `Operation` next to its handler (`namespace.rs` for volumes and buckets,
//! `objects.rs` for keys, ...): the rights it needs, what it acts on, apply's
//! check of its fields and its apply. `ops!` below lists every operation once
//! and derives the dispatch over `Op` from that list, with no catch-all arm:
//! an operation missing from the list, or listed without an `Operation`
//! implementation (and so without its rights), does not compile.
//!
//! Names come from the schema (`Command::op_name`, generated from
//! `store.proto`). Callers outside apply use the free functions: the edge and the leader's
//! precheck ask `rights`, `check_caller` and `target`; apply runs `limits`,
//! the rights and `check_caller` again on the state as of the entry, then
//! `apply`.

use om_proto::store::command::Op;
use om_proto::store::{Caller, CommandResult};
use om_raft_store::EntryWrites;

use super::Ctx;
use crate::authz::Resource;
use crate::error::OmError;
use crate::store::view::StateRead;

/// What apply, the edge and the audit log know of one replicated operation.
pub(super) trait Operation {
    /// The rights the caller needs, and on what, under apply rules `rules`
    /// (an entry replays with the rights it was checked against). Empty
    /// when the check depends on the state beyond ACLs (`check_caller`).
    fn rights(&self, rules: u32) -> Vec<(Resource<'_>, u32)>;

    /// What the operation acts on, for the audit log: the key or path when
    /// it has one, else the bucket, volume or cluster.
    fn target(&self) -> String;

    /// Apply's structural check of the command's fields (`limits.rs`): the
    /// command alone, never the state; the error names the field as the
    /// edge would.
    fn limits(&self, rules: u32) -> Result<(), OmError>;

    /// A check of the caller that depends on the state beyond the ACL
    /// rights of `rights` (whose S3 credentials a caller may manage). Most
    /// operations have none.
    fn check_caller(
        &self,
        _db: &(impl StateRead + ?Sized),
        _caller: &Caller,
    ) -> Result<(), OmError> {
        Ok(())
    }

    /// Stages the operation's writes, after every check passed: a handler
    /// checks everything before it stages its first write.
    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError>;
}

/// Derives the dispatch over `Op` from the one list of operations.
macro_rules! ops {
    ($($op:ident),* $(,)?) => {
        /// The rights `op` needs under apply rules `rules`.
        pub fn rights(op: &Op, rules: u32) -> Vec<(Resource<'_>, u32)> {
            match op {
                $(Op::$op(c) => c.rights(rules),)*
            }
        }

        /// The operation's name, for the audit log.
        pub fn name(op: &Op) -> &'static str {
            match op {
                $(Op::$op(_) => stringify!($op),)*
            }
        }

        /// What `op` acts on, for the audit log.
        pub fn target(op: &Op) -> String {
            match op {
                $(Op::$op(c) => c.target(),)*
            }
        }

        /// Apply's structural check of `op`'s fields.
        pub fn limits(op: &Op, rules: u32) -> Result<(), OmError> {
            match op {
                $(Op::$op(c) => c.limits(rules),)*
            }
        }

        /// The caller check of `op` beyond ACL rights, for `caller` (none
        /// when authorization is off), on the state as of the entry.
        pub fn check_caller(
            db: &(impl StateRead + ?Sized),
            caller: Option<&Caller>,
            op: &Op,
        ) -> Result<(), OmError> {
            let Some(caller) = caller else { return Ok(()) };
            match op {
                $(Op::$op(c) => c.check_caller(db, caller),)*
            }
        }

        pub(super) fn apply(
            op: &Op,
            ctx: &Ctx<'_>,
            b: &mut EntryWrites<'_>,
        ) -> Result<CommandResult, OmError> {
            match op {
                $(Op::$op(c) => c.apply(ctx, b),)*
            }
        }
    };
}

ops! {
    // Volumes and buckets (`namespace.rs`, `quota.rs`, `acl.rs`).
    CreateVolume,
    DeleteVolume,
    SetVolumeQuota,
    CreateBucket,
    DeleteBucket,
    SetBucketQuota,
    SetBucketVersioning,
    SetBucketTags,
    SetAcl,
    // Snapshots (`snapshots.rs`).
    CreateSnapshot,
    DeleteSnapshot,
    RenameSnapshot,
    ReclaimSnapshot,
    // Keys (`objects.rs`, `bulk.rs`, `tagging.rs`).
    PutKey,
    PutKeys,
    PutKeyTagging,
    DeleteKey,
    DeleteKeys,
    RenameKey,
    // Write sessions and blocks (`write.rs`).
    OpenKey,
    AllocateBlock,
    CommitKey,
    AbortKey,
    CopyKey,
    ExpireOpenKeys,
    AckDeletedBlocks,
    // Multipart uploads (`multipart.rs`).
    InitiateMultipart,
    CommitPart,
    CompleteMultipart,
    AbortMultipart,
    // File-system buckets (`fs.rs`).
    CreateDirectory,
    CreateFile,
    DeletePath,
    RenamePath,
    PurgeDeletedDirs,
    // Lifecycle (`lifecycle.rs`).
    SetBucketLifecycle,
    LifecycleScan,
    // S3 credentials (`s3.rs`).
    CreateS3Secret,
    RevokeS3Secret,
    ResealS3Secrets,
    // The cluster and the retry cache (`cluster.rs`, `retry.rs`).
    InitCluster,
    VerifyMark,
    ExpireRetryCache,
}

/// Whether `op` may be one write of a batch entry (`Command.batch`): the
/// small writes clients send at a high rate, each of which takes few ids
/// (at most 256 object ids, 256 version stamps and 2^24 deleted-blocks
/// records, the room its slot gives it; `Ctx::object_id`). Bulk and
/// administrative operations, and those that free an unbounded number of
/// blocks, go in entries of their own. Every operation is named, so a new
/// one must be decided here.
pub fn batchable(op: &Op) -> bool {
    match op {
        Op::PutKey(_)
        | Op::PutKeyTagging(_)
        | Op::DeleteKey(_)
        | Op::OpenKey(_)
        | Op::AllocateBlock(_)
        | Op::CommitKey(_)
        | Op::AbortKey(_)
        | Op::CopyKey(_)
        | Op::InitiateMultipart(_)
        | Op::CommitPart(_)
        | Op::CreateDirectory(_)
        | Op::CreateFile(_) => true,
        Op::CreateVolume(_)
        | Op::DeleteVolume(_)
        | Op::SetVolumeQuota(_)
        | Op::CreateBucket(_)
        | Op::DeleteBucket(_)
        | Op::SetBucketQuota(_)
        | Op::SetBucketVersioning(_)
        | Op::SetBucketTags(_)
        | Op::SetAcl(_)
        | Op::CreateSnapshot(_)
        | Op::DeleteSnapshot(_)
        | Op::RenameSnapshot(_)
        | Op::ReclaimSnapshot(_)
        | Op::PutKeys(_)
        | Op::DeleteKeys(_)
        | Op::RenameKey(_)
        | Op::ExpireOpenKeys(_)
        | Op::AckDeletedBlocks(_)
        | Op::CompleteMultipart(_)
        | Op::AbortMultipart(_)
        | Op::DeletePath(_)
        | Op::RenamePath(_)
        | Op::PurgeDeletedDirs(_)
        | Op::SetBucketLifecycle(_)
        | Op::LifecycleScan(_)
        | Op::CreateS3Secret(_)
        | Op::RevokeS3Secret(_)
        | Op::ResealS3Secrets(_)
        | Op::InitCluster(_)
        | Op::VerifyMark(_)
        | Op::ExpireRetryCache(_) => false,
    }
}

/// Whether `op` adds to what the store holds: refused while the data
/// volume is short of space (`service::OmService::check_space`). Deletions,
/// aborts, renames and the leader's own upkeep go on, so space can be
/// freed. Every operation is named, so a new one must be decided here.
pub fn adds_data(op: &Op) -> bool {
    match op {
        Op::CreateVolume(_)
        | Op::CreateBucket(_)
        | Op::SetVolumeQuota(_)
        | Op::SetBucketQuota(_)
        | Op::SetBucketVersioning(_)
        | Op::SetBucketTags(_)
        | Op::SetAcl(_)
        | Op::CreateSnapshot(_)
        | Op::RenameSnapshot(_)
        | Op::PutKey(_)
        | Op::PutKeys(_)
        | Op::PutKeyTagging(_)
        | Op::OpenKey(_)
        | Op::AllocateBlock(_)
        | Op::CommitKey(_)
        | Op::CopyKey(_)
        | Op::InitiateMultipart(_)
        | Op::CommitPart(_)
        | Op::CompleteMultipart(_)
        | Op::CreateDirectory(_)
        | Op::CreateFile(_)
        | Op::SetBucketLifecycle(_)
        | Op::CreateS3Secret(_) => true,
        Op::DeleteVolume(_)
        | Op::DeleteBucket(_)
        | Op::DeleteSnapshot(_)
        | Op::ReclaimSnapshot(_)
        | Op::DeleteKey(_)
        | Op::DeleteKeys(_)
        | Op::RenameKey(_)
        | Op::AbortKey(_)
        | Op::ExpireOpenKeys(_)
        | Op::AckDeletedBlocks(_)
        | Op::AbortMultipart(_)
        | Op::DeletePath(_)
        | Op::RenamePath(_)
        | Op::PurgeDeletedDirs(_)
        | Op::LifecycleScan(_)
        | Op::RevokeS3Secret(_)
        | Op::ResealS3Secrets(_)
        | Op::InitCluster(_)
        | Op::VerifyMark(_)
        | Op::ExpireRetryCache(_) => false,
    }
}
