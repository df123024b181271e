//! Every limit on what a client or a replicated command may carry, in one
//! place: field lengths, counts, sizes and batch bounds. The edge refuses a
//! request past one with a clear error, and apply checks a command against
//! the same constants again (`apply::limits`). A limit that apply checks may
//! be raised, never lowered: an entry some edge accepted must apply the same
//! way on every binary that replays it.

// Names, keys and objects (checked at the edge, and again in apply where a command carries them).

/// Longest key name in bytes (S3's limit); also the longest FSO path,
/// listing prefix and marker.
pub const MAX_KEY_BYTES: usize = 1024;
/// Longest volume or bucket name (S3's bucket-name limit).
pub const MAX_NAME_BYTES: usize = 63;
/// Longest volume owner.
pub const MAX_OWNER_BYTES: usize = 256;
/// Most bytes of a metadata map (names plus values; S3 allows 2 KiB).
pub const MAX_METADATA_BYTES: usize = 2048;
/// Longest content type.
pub const MAX_CONTENT_TYPE_BYTES: usize = 256;
/// Longest listing delimiter.
pub const MAX_DELIMITER_BYTES: usize = 16;
/// Longest ETag as stored: a multipart `<32 hex>-<up to 5 digits>`.
pub const MAX_ETAG_BYTES: usize = 38;
/// Most keys one DeleteKeys request names.
pub const MAX_DELETE_KEYS: usize = 1000;
/// Longest `host:port` address: a 253-byte DNS name, `:` and a port.
pub const MAX_ADDRESS_BYTES: usize = 259;
/// Longest ETag a write condition may name.
pub const MAX_CONDITION_ETAG_BYTES: usize = 1024;
/// Most tags one object version carries (S3's limit).
pub const MAX_OBJECT_TAGS: usize = 10;
/// Most tags a bucket has (S3's limit).
pub const MAX_BUCKET_TAGS: usize = 50;
/// A snapshot's name: bytes (`validate::snapshot_name`).
pub const MAX_SNAPSHOT_NAME_BYTES: usize = 63;
/// Snapshots one bucket holds, live or deleted and still being reclaimed.
pub const MAX_BUCKET_SNAPSHOTS: u64 = 1000;
/// Retained versions one ReclaimSnapshot page examines.
pub const MAX_RECLAIM_PAGE: u32 = 10_000;
/// Deepest path a FILE_SYSTEM_OPTIMIZED bucket accepts (directories created by
/// one command get per-entry object ids, of which there are 255).
pub const MAX_PATH_DEPTH: usize = 200;
/// S3's object-tag limits (lifecycle filters name tags as objects carry
/// them).
pub const MAX_TAG_KEY_CHARS: usize = 128;
pub const MAX_TAG_VALUE_CHARS: usize = 256;

// Sizes of keys, blocks and parts.

/// Smallest and largest block size a command may carry.
pub const MIN_BLOCK_SIZE: u64 = 1024 * 1024;
pub const MAX_BLOCK_SIZE: u64 = 5 * 1024 * 1024 * 1024;
/// Largest object S3 allows: 5 TiB.
pub const MAX_KEY_SIZE: u64 = 5 * 1024 * 1024 * 1024 * 1024;

/// Most blocks one key, part or commit lists (a 5 TiB key in 256 MiB
/// blocks): a stateless limit apply re-checks (never lower it).
pub const MAX_KEY_BLOCKS: usize = 20_480;
/// Most entries one `AckDeletedBlocks` command removes.
pub const MAX_ACK_IDS: usize = 1_000;
/// Most blocks one OpenKey, CreateFile or AllocateBlock hands out.
pub const MAX_BLOCKS_PER_CALL: u32 = 64;
/// S3's largest part: 5 GiB.
pub const MAX_PART_SIZE: u64 = 5 * 1024 * 1024 * 1024;
/// S3's highest part number, and so the most parts an upload completes with.
pub const MAX_PART_NUMBER: u32 = 10_000;
/// Most children one `PurgeDeletedDirs` purges, whatever it asks for (the
/// leader asks for 1,000); a cap, not a refusal, so one apply stays short.
pub const MAX_PURGE_BATCH: u32 = 100_000;

/// Most blocks a session may hold, which the leader stamps into every
/// `AllocateBlock` (the check depends on the session, so its value travels
/// in the command).
pub const MAX_SESSION_BLOCKS: usize = MAX_KEY_BLOCKS;
/// Most sessions one `ExpireOpenKeys` removes, whatever it asks for.
pub const MAX_OPEN_KEY_EXPIRY_BATCH: u32 = 100_000;

/// Most keys one `PutKeys` creates: each key's object id is the entry's log
/// index and its position (8 bits; see `object_id`).
pub const MAX_PUT_KEYS: usize = 256;

/// Most retry-cache entries one `ExpireRetryCache` command may remove, so one
/// apply stays short whatever a replicated command asks for.
pub const MAX_RETRY_EXPIRY_BATCH: u32 = 100_000;

/// Most blocks a key can hold, which bounds every response carrying one key
/// or one key's released blocks. A key committed from a session holds at
/// most `MAX_SESSION_BLOCKS` (5 TiB in 256 MiB blocks). A completed multipart
/// upload is at most `MAX_KEY_SIZE` (checked when it completes) in at most
/// `MAX_PART_NUMBER` parts of `ceil(size / BLOCK_SIZE)` blocks each, so
/// fewer than `MAX_KEY_SIZE / BLOCK_SIZE + MAX_PART_NUMBER` blocks. Encoded
/// as a `KeyInfo` with the largest field values, that is under 1 MiB (see
/// the `largest_records_fit_a_default_client` test).
pub const MAX_RECORD_BLOCKS: usize = MAX_SESSION_BLOCKS + MAX_PART_NUMBER as usize;

// Lifecycle configurations and scan pages.

/// S3's limit on rules per configuration.
pub const MAX_RULES: usize = 1000;
/// S3's limit on a rule id.
pub const MAX_RULE_ID_CHARS: usize = 255;
pub const MAX_FILTER_TAGS: usize = 10;
/// S3's limit on `NewerNoncurrentVersions`.
pub const MAX_NEWER_NONCURRENT_VERSIONS: u32 = 100;
/// Most encoded bytes of a whole configuration: one Raft entry stays small
/// whatever the rules hold (1000 rules of long prefixes and ten tags each
/// would pass 5 MiB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// Most items one page proposes (one Raft entry, one apply).
pub const MAX_PAGE_ITEMS: usize = 1000;
/// Most entries one page may report evaluated.
pub const MAX_PAGE_EVALUATED: u64 = 100_000;
/// Longest entry key a page may name: a bucket prefix, a key, a version or
/// upload id.
pub const MAX_ENTRY_BYTES: usize = MAX_NAME_BYTES * 2 + 2 + MAX_KEY_BYTES + 9;
/// Shortest and longest lifecycle day a page may carry.
pub const MIN_DAY_MS: u64 = 1;
pub const MAX_DAY_MS: u64 = 86_400_000;

// Principals, grants and S3 credentials.

/// Most grants one resource holds.
pub const MAX_GRANTS: usize = 64;
/// Longest user or group name.
pub const MAX_PRINCIPAL_BYTES: usize = 256;
/// Most groups a caller is taken to belong to.
pub const MAX_GROUPS: usize = 32;

/// Most credentials one user holds (AWS allows an IAM user 2; rotation
/// needs at least 2).
pub const MAX_SECRETS_PER_USER: usize = 16;

/// Most credentials one ListS3Secrets page holds.
pub const MAX_S3_SECRETS_PAGE: usize = 1000;

// Answers.

/// Longest message a status carries (in `grpc-message` and again in the
/// `ErrorDetail`). Messages quote at most a short prefix of any input
/// (`validate::quote_prefix`); this cap is the last line of defence, so no
/// error can outgrow a client's header limits.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 1024;
