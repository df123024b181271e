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
//! | `keys`           | `volume` `/` `bucket` `/` `key`                  | `KeyRecord`           |
//! | `deleted_blocks` | u64 BE log index, u32 BE sequence in that entry   | `DeletedBlocksRecord` |
//! | `retry_cache`    | `c` client-id `\0` u64 BE seq                     | `RetryCacheRecord`    |
//! |                  | `t` u64 BE created-ms client-id `\0` u64 BE seq   | empty (expiry index)  |
//! | `counters`       | counter name (e.g. `next_block_id`)              | u64 BE                |
//!
//! Room left for what comes next: a versioned bucket's versions go in their own
//! column family keyed `volume/bucket/key` `\0` inverted version id, so all
//! versions of a key are one contiguous run that a listing can seek past; NUL is
//! never part of a key name, which keeps that run adjacent to its key.

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
];

/// Tables whose deletions come in bulk (keys deleted by clients, expired
/// retry-cache entries, reclaimed blocks): deletion-triggered compaction is on.
pub const DELETION_HEAVY_CFS: &[&str] = &[KEYS_CF, DELETED_BLOCKS_CF, RETRY_CACHE_CF];

pub const VOLUMES_CF: &str = "volumes";
pub const BUCKETS_CF: &str = "buckets";
pub const KEYS_CF: &str = "keys";
pub const DELETED_BLOCKS_CF: &str = "deleted_blocks";
pub const RETRY_CACHE_CF: &str = "retry_cache";
pub const COUNTERS_CF: &str = "counters";

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

pub fn deleted_blocks_key(log_index: u64, seq: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(12);
    k.extend_from_slice(&log_index.to_be_bytes());
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

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
    fn retry_expiry_round_trip() {
        let e = retry_expiry_key(42, "cli", 7);
        assert_eq!(retry_key_from_expiry(&e), Some((42, retry_key("cli", 7))));
    }

    #[test]
    fn big_endian_orders_numerically() {
        assert!(deleted_blocks_key(255, 0) < deleted_blocks_key(256, 0));
        assert!(deleted_blocks_key(1, 9) < deleted_blocks_key(2, 0));
    }
}
