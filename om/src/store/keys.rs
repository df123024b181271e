//! Every on-disk key layout of om's metadata tables, in one place.
//!
//! Each table is one RocksDB column family. Names of volumes and buckets are
//! S3-style (no `/`), key names are UTF-8 without NUL (see `validate`), so the
//! layouts below are prefix-free and sort in the order listings need.
//! Integers are big-endian so byte order is numeric order.
//!
//! | column family    | key                                              | value                 |
//! |------------------|--------------------------------------------------|-----------------------|
//! | `volumes`        | `volume`                                         | `VolumeRecord`        |
//! | `buckets`        | `volume` `/` `bucket`                            | `BucketRecord`        |
//! | `keys`           | `volume` `/` `bucket` `/` `key`                  | `KeyRecord` (current) |
//! |                  | `volume/bucket/key` `\0` u64 BE !version         | `KeyRecord` (noncurrent) |
//! | `deleted_blocks` | u64 BE log index, u32 BE sequence in that entry   | `DeletedBlocksRecord` |
//! | `retry_cache`    | `g` u64 BE generation client-id `\0` u64 BE seq    | `RetryCacheRecord` (rules 11) |
//! |                  | `c` client-id `\0` u64 BE seq                     | `RetryCacheRecord` (rules ≤ 10) |
//! |                  | `t` u64 BE created-ms client-id `\0` u64 BE seq   | empty (its expiry index) |
//! | `counters`       | counter name (`next_block_id`, `retry_generation`) | u64 BE              |
//! | `open_keys`      | `volume/bucket/key` `\0` u64 BE session id        | `OpenKeyRecord`       |
//! |                  | `\0` u64 BE opened-ms, then the entry's key       | empty (expiry index)  |
//! | `uploads`        | `volume/bucket/key` `\0` u64 BE upload id         | `UploadRecord`        |
//! | `parts`          | u64 BE upload id, u32 BE part number              | `PartRecord`          |
//! | `block_refs`     | u64 BE block id                                   | u32 BE holder count   |
//! | `directories`    | u64 BE parent object id, name                     | `DirectoryRecord`     |
//! | `files`          | u64 BE parent object id, name                     | `KeyRecord`           |
//! | `open_files`     | u64 BE parent id, name, `\0`, u64 BE session id   | `OpenKeyRecord`       |
//! |                  | `\xff` u64 BE opened-ms, then the entry's key      | empty (expiry index)  |
//! | `deleted_dirs`   | u64 BE log index, u32 BE sequence                 | `DeletedDirRecord`    |
//! | `settings`       | `cluster_acl`                                     | `ClusterAclRecord`    |
//! | `lifecycle`      | `volume` `/` `bucket`                            | `LifecycleRecord`     |
//! | `lifecycle_scan` | `volume` `/` `bucket`                            | `LifecycleScanRecord` |
//! | `snapshots`      | `volume` `/` `bucket` `\0` name                  | `SnapshotRecord` (live) |
//! |                  | `volume` `/` `bucket` `\x01` u64 BE index         | name (live, by index) |
//! |                  | `\xff` u64 BE index `volume` `/` `bucket`         | `SnapshotRecord` (deleted, being reclaimed) |
//! | `snapshot_keys`  | a `keys` key, then u64 BE retiring index          | `KeyRecord` (retained) |
//! | `snapshot_changes` | `\0` `volume` `/` `bucket` `\0` u64 BE index key | u64 BE previous change of the key |
//! |                  | `\x01` a current key's `keys` key                 | u64 BE its last change |
//!
//! FILE_SYSTEM_OPTIMIZED buckets (Ozone's FSO layout) key every entry by its
//! parent directory's object id (the bucket's object id at the root) and its
//! name, so a directory's children are one contiguous range, listing one
//! directory is one seek per table, and renaming a directory rewrites one
//! entry however much lies under it (open files under it stay attached, as
//! they hang off the directory's id, not its path). Object ids are log-index-derived, so their first byte is 0 for the next 2^56
//! entries and never `\xff`, which keeps `open_files`' expiry index apart.
//!
//! Open keys and uploads hang off the key name with a NUL (never part of a
//! name), so every session or upload of one key is one contiguous run right
//! after the key's position, and listing by prefix works as on `keys`. Upload
//! ids are log-index-derived, so the uploads of one key sort by initiation, as
//! S3's ListMultipartUploads orders them. The open-key expiry index starts with
//! NUL, which no volume name does, so it never mixes with a listing's range.
//! A block absent from `block_refs` has exactly one holder; CopyKey records
//! the count once a block is shared, and releasing a shared block only
//! decrements it, so a block reaches `deleted_blocks` when its last holder goes.
//!
//! A key's versions (versioned buckets) share `keys`: the current version at
//! the key itself, every noncurrent one (versions and delete markers) right
//! after it at `key \0 !version` (the bitwise complement, so newer sorts
//! first). NUL is never part of a key name, so a key's history is one
//! contiguous run between the key and the next key, in S3's order for
//! ListObjectVersions, and a listing of current keys seeks past it with one
//! seek to `key \x01`. A bucket that was never versioned has no such runs.

/// Column families of the metadata tables, in the order they are opened.
/// Everything in them (plus the state-machine meta kept by `om-raft-store`) is
/// the replicated state that snapshots carry.
pub const TABLE_CFS: &[&str] = &[
    VOLUMES_CF,
    BUCKETS_CF,
    KEYS_CF,
    DELETED_BLOCKS_CF,
    RETRY_CACHE_CF,
    COUNTERS_CF,
    OPEN_KEYS_CF,
    UPLOADS_CF,
    PARTS_CF,
    BLOCK_REFS_CF,
    DIRECTORIES_CF,
    FILES_CF,
    OPEN_FILES_CF,
    DELETED_DIRS_CF,
    SETTINGS_CF,
    LIFECYCLE_CF,
    LIFECYCLE_SCAN_CF,
    S3_SECRETS_CF,
    SNAPSHOTS_CF,
    SNAPSHOT_KEYS_CF,
    SNAPSHOT_CHANGES_CF,
];

/// Tables whose deletions come in bulk (keys deleted by clients, expired
/// retry-cache entries, reclaimed blocks): deletion-triggered compaction is on.
pub const DELETION_HEAVY_CFS: &[&str] = &[
    KEYS_CF,
    DELETED_BLOCKS_CF,
    RETRY_CACHE_CF,
    OPEN_KEYS_CF,
    UPLOADS_CF,
    PARTS_CF,
    DIRECTORIES_CF,
    FILES_CF,
    OPEN_FILES_CF,
    DELETED_DIRS_CF,
    SNAPSHOT_KEYS_CF,
    SNAPSHOT_CHANGES_CF,
];

/// Tables where writes look up keys that mostly do not exist (a new key's
/// current version, a write's retry-cache record, a new path): their
/// memtables keep a whole-key bloom filter.
pub const POINT_MISS_CFS: &[&str] = &[KEYS_CF, RETRY_CACHE_CF, FILES_CF, DIRECTORIES_CF];

pub const VOLUMES_CF: &str = "volumes";
pub const BUCKETS_CF: &str = "buckets";
pub const KEYS_CF: &str = "keys";
pub const DELETED_BLOCKS_CF: &str = "deleted_blocks";
pub const RETRY_CACHE_CF: &str = "retry_cache";
pub const COUNTERS_CF: &str = "counters";
pub const OPEN_KEYS_CF: &str = "open_keys";
pub const UPLOADS_CF: &str = "uploads";
pub const PARTS_CF: &str = "parts";
pub const BLOCK_REFS_CF: &str = "block_refs";
pub const DIRECTORIES_CF: &str = "directories";
pub const FILES_CF: &str = "files";
pub const OPEN_FILES_CF: &str = "open_files";
pub const DELETED_DIRS_CF: &str = "deleted_dirs";
pub const SETTINGS_CF: &str = "settings";
pub const LIFECYCLE_CF: &str = "lifecycle";
pub const LIFECYCLE_SCAN_CF: &str = "lifecycle_scan";
pub const S3_SECRETS_CF: &str = "s3_secrets";
pub const SNAPSHOTS_CF: &str = "snapshots";
pub const SNAPSHOT_KEYS_CF: &str = "snapshot_keys";
pub const SNAPSHOT_CHANGES_CF: &str = "snapshot_changes";

/// `\0 volume/bucket \0`: a bucket's change log (current keys changed
/// while it held a snapshot), in log order.
pub fn change_prefix(volume: &str, bucket: &str) -> Vec<u8> {
    let mut k = vec![0];
    k.extend_from_slice(&bucket_key(volume, bucket));
    k.push(0);
    k
}

/// The change of current key `name` at `index`.
pub fn change_key(volume: &str, bucket: &str, index: u64, name: &[u8]) -> Vec<u8> {
    let mut k = change_prefix(volume, bucket);
    k.extend_from_slice(&index.to_be_bytes());
    k.extend_from_slice(name);
    k
}

/// Splits a change-log key after its bucket's prefix into index and name.
pub fn split_change(rel: &[u8]) -> Option<(u64, &[u8])> {
    if rel.len() < 8 {
        return None;
    }
    let (ix, name) = rel.split_at(8);
    Some((u64::from_be_bytes(ix.try_into().ok()?), name))
}

/// `\x01 volume/bucket/`: where each current key of a bucket last changed.
pub fn last_change_prefix(volume: &str, bucket: &str) -> Vec<u8> {
    let mut k = vec![1];
    k.extend_from_slice(&object_prefix(volume, bucket));
    k
}

pub fn last_change_key(table_key: &[u8]) -> Vec<u8> {
    let mut k = vec![1];
    k.extend_from_slice(table_key);
    k
}

/// `volume/bucket \0`: a bucket's live snapshots by name. A bucket's name
/// never holds NUL, so no other bucket's entries share it.
pub fn snapshot_name_prefix(volume: &str, bucket: &str) -> Vec<u8> {
    let mut k = bucket_key(volume, bucket);
    k.push(0);
    k
}

pub fn snapshot_key(volume: &str, bucket: &str, name: &str) -> Vec<u8> {
    let mut k = snapshot_name_prefix(volume, bucket);
    k.extend_from_slice(name.as_bytes());
    k
}

/// `volume/bucket \x01`: a bucket's live snapshots by index.
pub fn snapshot_index_prefix(volume: &str, bucket: &str) -> Vec<u8> {
    let mut k = bucket_key(volume, bucket);
    k.push(1);
    k
}

pub fn snapshot_index_key(volume: &str, bucket: &str, index: u64) -> Vec<u8> {
    let mut k = snapshot_index_prefix(volume, bucket);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// Deleted snapshots awaiting reclaim, of every bucket, oldest first. No
/// volume name starts with `\xff`.
pub const DELETED_SNAPSHOT_PREFIX: &[u8] = &[0xff];

pub fn deleted_snapshot_key(index: u64, volume: &str, bucket: &str) -> Vec<u8> {
    let mut k = DELETED_SNAPSHOT_PREFIX.to_vec();
    k.extend_from_slice(&index.to_be_bytes());
    k.extend_from_slice(&bucket_key(volume, bucket));
    k
}

/// A retained version in `snapshot_keys`: the `keys` key it left, then the
/// index of the entry that retired it. A key name holds no NUL and indexes
/// stay below 2^48, so the suffix (`\0\0...`) sorts a key's retained
/// versions right after the key and before anything longer (a longer name,
/// or a noncurrent version's `\0\xff...`): retained entries sort as the
/// `keys` entries they were, then by retiring index.
pub fn retained_key(table_key: &[u8], retired: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(table_key.len() + 8);
    k.extend_from_slice(table_key);
    k.extend_from_slice(&retired.to_be_bytes());
    k
}

/// Splits a `snapshot_keys` key into the `keys` key and the retiring index.
pub fn split_retained(k: &[u8]) -> Option<(&[u8], u64)> {
    let cut = k.len().checked_sub(8)?;
    let (key, ix) = k.split_at(cut);
    Some((key, u64::from_be_bytes(ix.try_into().ok()?)))
}

/// An S3 credential in `s3_secrets`: its access key (`[A-Z0-9]`, so it sorts
/// before the user index).
pub fn s3_secret_key(access_key: &str) -> Vec<u8> {
    access_key.as_bytes().to_vec()
}

/// The user index of `s3_secrets`: `0xff user NUL access_key`, empty values.
pub const S3_USER_INDEX_PREFIX: &[u8] = &[0xff];

/// Every index entry of one user's credentials.
pub fn s3_user_prefix(user: &str) -> Vec<u8> {
    let mut k = S3_USER_INDEX_PREFIX.to_vec();
    k.extend_from_slice(user.as_bytes());
    k.push(0);
    k
}

/// The index entry of one credential of `user`.
pub fn s3_user_index_key(user: &str, access_key: &str) -> Vec<u8> {
    let mut k = s3_user_prefix(user);
    k.extend_from_slice(access_key.as_bytes());
    k
}

/// The cluster's ACL (admins and impersonators) in `settings`.
pub const CLUSTER_ACL_KEY: &[u8] = b"cluster_acl";
/// The cluster's id (`ClusterIdRecord`) in `settings`.
pub const CLUSTER_ID_KEY: &[u8] = b"cluster_id";

/// `parent id`: every child of one directory (in `directories` or `files`).
pub fn children_prefix(parent: u64) -> Vec<u8> {
    parent.to_be_bytes().to_vec()
}

/// A directory or file entry: parent id, then the name.
pub fn fs_key(parent: u64, name: &str) -> Vec<u8> {
    let mut k = children_prefix(parent);
    k.extend_from_slice(name.as_bytes());
    k
}

/// An open-file entry: the file's entry key, NUL, the session id.
pub fn open_file_key(parent: u64, name: &str, session: u64) -> Vec<u8> {
    let mut k = fs_key(parent, name);
    k.push(0);
    k.extend_from_slice(&session.to_be_bytes());
    k
}

pub const OPEN_FILE_EXPIRY_PREFIX: &[u8] = &[0xff];

pub fn open_file_expiry_key(opened_ms: u64, entry: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + entry.len());
    k.push(0xff);
    k.extend_from_slice(&opened_ms.to_be_bytes());
    k.extend_from_slice(entry);
    k
}

/// Splits an fs key into parent id and name.
pub fn split_fs_key(k: &[u8]) -> Option<(u64, &[u8])> {
    if k.len() < 8 {
        return None;
    }
    Some((u64::from_be_bytes(k[..8].try_into().ok()?), &k[8..]))
}

/// Separator between path components in table keys.
pub const SEP: u8 = b'/';

pub fn volume_key(volume: &str) -> Vec<u8> {
    volume.as_bytes().to_vec()
}

pub fn bucket_key(volume: &str, bucket: &str) -> Vec<u8> {
    let mut k = bucket_prefix(volume);
    k.extend_from_slice(bucket.as_bytes());
    k
}

/// `volume/`: every bucket of a volume.
pub fn bucket_prefix(volume: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(volume.len() + 1);
    k.extend_from_slice(volume.as_bytes());
    k.push(SEP);
    k
}

/// `volume/bucket/`: every key of a bucket.
pub fn object_prefix(volume: &str, bucket: &str) -> Vec<u8> {
    let mut k = bucket_key(volume, bucket);
    k.push(SEP);
    k
}

pub fn object_key(volume: &str, bucket: &str, key: &str) -> Vec<u8> {
    let mut k = object_prefix(volume, bucket);
    k.extend_from_slice(key.as_bytes());
    k
}

/// `volume/bucket/key` `\0`: every session (or upload) of one key.
pub fn key_run_prefix(volume: &str, bucket: &str, key: &str) -> Vec<u8> {
    let mut k = object_key(volume, bucket, key);
    k.push(0);
    k
}

/// An open-key entry; also the layout of `uploads` with the upload id.
pub fn open_key(volume: &str, bucket: &str, key: &str, session: u64) -> Vec<u8> {
    let mut k = key_run_prefix(volume, bucket, key);
    k.extend_from_slice(&session.to_be_bytes());
    k
}

/// A noncurrent version of a key: the key's run prefix, then the
/// complemented version (newest first).
pub fn version_key(volume: &str, bucket: &str, key: &str, version: u64) -> Vec<u8> {
    let mut k = key_run_prefix(volume, bucket, key);
    k.extend_from_slice(&(!version).to_be_bytes());
    k
}

/// Splits a name relative to `volume/bucket/` of `keys` into the key name
/// and, for a noncurrent version, its version.
pub fn split_version(name: &[u8]) -> (&[u8], Option<u64>) {
    match split_key_run(name) {
        Some((key, inv)) => (key, Some(!inv)),
        None => (name, None),
    }
}

pub fn upload_key(volume: &str, bucket: &str, key: &str, upload_id: u64) -> Vec<u8> {
    open_key(volume, bucket, key, upload_id)
}

/// Splits a name relative to `volume/bucket/` of `open_keys` or `uploads`
/// into the key name and the session or upload id.
pub fn split_key_run(name: &[u8]) -> Option<(&[u8], u64)> {
    if name.len() < 9 || name[name.len() - 9] != 0 {
        return None;
    }
    let (key, rest) = name.split_at(name.len() - 9);
    Some((key, u64::from_be_bytes(rest[1..].try_into().ok()?)))
}

pub const OPEN_EXPIRY_PREFIX: &[u8] = &[0];

pub fn open_expiry_key(opened_ms: u64, entry: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + entry.len());
    k.push(0);
    k.extend_from_slice(&opened_ms.to_be_bytes());
    k.extend_from_slice(entry);
    k
}

/// The open-key entry an expiry-index key points at.
pub fn open_entry_from_expiry(expiry_key: &[u8]) -> Option<&[u8]> {
    (expiry_key.len() > 9 && expiry_key[0] == 0).then(|| &expiry_key[9..])
}

/// Every part of one upload.
pub fn parts_prefix(upload_id: u64) -> Vec<u8> {
    upload_id.to_be_bytes().to_vec()
}

pub fn part_key(upload_id: u64, part: u32) -> Vec<u8> {
    let mut k = parts_prefix(upload_id);
    k.extend_from_slice(&part.to_be_bytes());
    k
}

pub fn block_ref_key(block_id: u64) -> [u8; 8] {
    block_id.to_be_bytes()
}

pub fn deleted_blocks_key(log_index: u64, seq: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(12);
    k.extend_from_slice(&log_index.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Where rules 11 store a retry-cache entry: under the retry cache's
/// generation when it was written, so whole generations expire with one
/// range deletion and no entry needs an index of its own.
pub fn retry_generation_key(generation: u64, client_id: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(client_id.len() + 18);
    k.extend_from_slice(RETRY_GENERATION_PREFIX);
    k.extend_from_slice(&generation.to_be_bytes());
    k.extend_from_slice(client_id.as_bytes());
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// The first key of `generation` (and past every earlier one).
pub fn retry_generation_start(generation: u64) -> Vec<u8> {
    let mut k = RETRY_GENERATION_PREFIX.to_vec();
    k.extend_from_slice(&generation.to_be_bytes());
    k
}

/// The retry cache's current generation, a counter (absent: 0).
pub const RETRY_GENERATION: &[u8] = b"retry_generation";

pub const RETRY_GENERATION_PREFIX: &[u8] = b"g";

/// Where rules 10 and earlier store a retry-cache entry (with an expiry
/// index entry beside it, `retry_expiry_key`).
pub fn retry_key(client_id: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(client_id.len() + 10);
    k.push(b'c');
    k.extend_from_slice(client_id.as_bytes());
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

pub fn retry_expiry_key(created_ms: u64, client_id: &str, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(client_id.len() + 18);
    k.push(b't');
    k.extend_from_slice(&created_ms.to_be_bytes());
    k.extend_from_slice(client_id.as_bytes());
    k.push(0);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// Splits an expiry-index key back into its lookup key.
pub fn retry_key_from_expiry(expiry_key: &[u8]) -> Option<(u64, Vec<u8>)> {
    if expiry_key.len() < 1 + 8 + 1 + 8 || expiry_key[0] != b't' {
        return None;
    }
    let created = u64::from_be_bytes(expiry_key[1..9].try_into().ok()?);
    let mut k = Vec::with_capacity(expiry_key.len() - 8);
    k.push(b'c');
    k.extend_from_slice(&expiry_key[9..]);
    Some((created, k))
}

pub const RETRY_EXPIRY_PREFIX: &[u8] = b"t";

pub const NEXT_BLOCK_ID: &[u8] = b"next_block_id";

/// The smallest byte string greater than every string starting with `prefix`,
/// i.e. the exclusive upper bound of a prefix scan. `None` if there is none
/// (the prefix is empty or all `0xff`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The smallest key strictly greater than `key`: `key` followed by a zero byte.
pub fn key_successor(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    k
}

/// Every column family of the store: the tables and Raft's own.
pub fn all_cfs() -> impl Iterator<Item = &'static str> {
    TABLE_CFS.iter().copied().chain([
        om_raft_store::keys::LOG_CF,
        om_raft_store::keys::RAFT_META_CF,
        om_raft_store::keys::SM_META_CF,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_prefixes_are_disjoint() {
        // "b1-x" sorts before "b1/" but the prefixes never overlap.
        let p1 = object_prefix("v", "b1");
        let p2 = object_prefix("v", "b1-x");
        let k2 = object_key("v", "b1-x", "a");
        assert!(!k2.starts_with(&p1));
        assert!(k2.starts_with(&p2));
        assert!(object_key("v", "b1", "zzz") < prefix_end(&p1).unwrap());
    }

    #[test]
    fn prefix_end_handles_ff() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[b'a', 0xff]), Some(b"b".to_vec()));
        assert_eq!(prefix_end(&[0xff]), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn retry_generations_sort_in_order() {
        let early = retry_generation_key(1, "zzz", u64::MAX);
        let late = retry_generation_key(2, "aaa", 0);
        assert!(early < late);
        assert!(retry_generation_start(1) <= early);
        assert!(early < retry_generation_start(2));
        assert!(retry_generation_start(2) <= late);
        assert!(RETRY_GENERATION_PREFIX <= retry_generation_start(0).as_slice());
        assert!(retry_generation_key(u64::MAX, "a", 1).starts_with(RETRY_GENERATION_PREFIX));
    }

    #[test]
    fn retry_expiry_round_trip() {
        let e = retry_expiry_key(42, "cli", 7);
        assert_eq!(retry_key_from_expiry(&e), Some((42, retry_key("cli", 7))));
    }

    #[test]
    fn key_runs_stay_next_to_their_key() {
        let a = open_key("v", "b", "a", 7);
        let a2 = open_key("v", "b", "a", 8);
        let ab = open_key("v", "b", "a/b", 1);
        assert!(a < a2 && a2 < ab);
        let rel = &a[object_prefix("v", "b").len()..];
        assert_eq!(split_key_run(rel), Some((&b"a"[..], 7)));
        let e = open_expiry_key(5, &a);
        assert_eq!(open_entry_from_expiry(&e), Some(&a[..]));
        assert!(e < volume_key("a"));
        assert!(part_key(1, 10000) < part_key(2, 1));
    }

    #[test]
    fn versions_sort_newest_first_between_their_key_and_the_next() {
        let cur = object_key("v", "b", "a");
        let new = version_key("v", "b", "a", 9);
        let old = version_key("v", "b", "a", 3);
        let next = object_key("v", "b", "a\u{1}");
        let child = object_key("v", "b", "a/b");
        assert!(cur < new && new < old && old < next && old < child);
        assert!(old < prefix_end(&key_run_prefix("v", "b", "a")).unwrap());
        let rel = &old[object_prefix("v", "b").len()..];
        assert_eq!(split_version(rel), (&b"a"[..], Some(3)));
        assert_eq!(split_version(b"a"), (&b"a"[..], None));
    }

    #[test]
    fn big_endian_orders_numerically() {
        assert!(deleted_blocks_key(255, 0) < deleted_blocks_key(256, 0));
        assert!(deleted_blocks_key(1, 9) < deleted_blocks_key(2, 0));
    }
}
