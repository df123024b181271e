//! On-disk layout of the Raft column families.
//!
//! | column family | key                     | value                         |
//! |---------------|-------------------------|-------------------------------|
//! | `raft_log`    | u64 BE log index        | `om.raft.v1.Entry`            |
//! | `raft_meta`   | `vote`                  | `om.raft.v1.Vote`             |
//! |               | `last_purged`           | `om.raft.v1.LogId`            |
//! |               | `committed`             | `om.raft.v1.LogId`            |
//! |               | `published_snapshot`    | `om.raft.v1.PublishedSnapshot`|
//! | `sm_meta`     | `applied`               | `om.raft.v1.AppliedState`     |
//! |               | `digest/` u64 BE index  | 32-byte state digest          |
//!
//! `sm_meta` belongs to the replicated state: it is written in the same batch
//! as the table data of every applied entry.

pub const LOG_CF: &str = "raft_log";
pub const RAFT_META_CF: &str = "raft_meta";
pub const SM_META_CF: &str = "sm_meta";

pub const VOTE_KEY: &[u8] = b"vote";
pub const LAST_PURGED_KEY: &[u8] = b"last_purged";
pub const COMMITTED_KEY: &[u8] = b"committed";
pub const APPLIED_KEY: &[u8] = b"applied";
pub const PUBLISHED_SNAPSHOT_KEY: &[u8] = b"published_snapshot";
/// The store's log-archive lineage (`archive`): absent for a cluster's
/// original history; a restore names a new one.
pub const ARCHIVE_LINEAGE_KEY: &[u8] = b"archive_lineage";
/// Checkpoints of the state digest (node-local: not carried by snapshots,
/// cleared with the applied state by an install).
pub const DIGEST_PREFIX: &[u8] = b"digest/";
/// Exclusive upper bound of the checkpoint keys.
pub const DIGEST_END: &[u8] = b"digest0";

pub fn log_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

pub fn log_index(key: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(key.try_into().ok()?))
}

/// Exclusive upper bound above every log key (9 bytes sort after any 8-byte key
/// with the same first 8 bytes, and `0xff`×9 after all of them).
pub const LOG_END: [u8; 9] = [0xff; 9];

/// Exclusive upper bound of the log keys `<= index`.
pub fn log_end_after(index: u64) -> Vec<u8> {
    match index.checked_add(1) {
        Some(next) => log_key(next).to_vec(),
        None => LOG_END.to_vec(),
    }
}
