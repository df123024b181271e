//! Apply's own check of every limit a replicated command could carry: the
//! edge checks each request, and apply checks the command again before a
//! handler runs, so a command that never went through an edge (a bug, a
//! hand-made log entry) can neither exhaust memory on every replica (block
//! counts, sizes, list lengths) nor write malformed state (names with `/`,
//! unnormalized paths).
//!
//! These checks look at the command alone, never at the state, and only
//! refuse; each limit is at least what every edge has enforced since the
//! field existed. So an entry some edge accepted passes here whatever binary
//! replays it, as long as no limit here is ever lowered (raising one is
//! safe). They are structural (lengths, counts, separators, sizes), not the
//! edge's policy rules (S3 naming, ETag syntax), which may tighten over time.
//! Limits new in rules 1 (the owner) apply to rules-1 commands only. Limits
//! whose outcome depends on state are not here: their values travel in the
//! command (`max_session_blocks`, `max_key_size`, `max_path_depth`...).

use std::collections::BTreeMap;

use om_proto::store::{Command, KeyConditions, command::Op};

use super::{LEGACY_BLOCK_SIZE, MAX_BLOCK_SIZE, MAX_KEY_SIZE, MIN_BLOCK_SIZE};
use crate::error::OmError;
use crate::validate::{self, MAX_DELETE_KEYS, MAX_ETAG_BYTES, MAX_NAME_BYTES, quote_prefix};

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

/// The block size a command means: its own, or for commands written before
/// they carried one, the 256 MiB every block had then.
pub fn block_size_or_legacy(stamped: u64) -> u64 {
    if stamped == 0 {
        LEGACY_BLOCK_SIZE
    } else {
        stamped
    }
}

/// A version id field: empty (none) or at most a version id's length, so a
/// hostile command carries no long string (its syntax is checked where it
/// is used, with the state's answer).
fn version_id(field: &str, v: &str) -> Result<(), OmError> {
    if v.len() <= super::versions::VERSION_ID_CHARS {
        return Ok(());
    }
    Err(OmError::invalid(
        "INVALID_VERSION_ID",
        field,
        format!(
            "a version id has at most {} characters",
            super::versions::VERSION_ID_CHARS
        ),
    ))
}

/// A command's caller: a valid user name (the principal's), groups and
/// impersonator within their limits.
fn caller(c: &om_proto::store::Caller) -> Result<(), OmError> {
    use crate::authz::{MAX_GROUPS, MAX_NAME_BYTES};
    let bad = |field: &str, what: &str| {
        Err(OmError::invalid(
            "INVALID_CALLER",
            field,
            format!("the command's caller has {what}"),
        ))
    };
    let sized = |n: &str| !n.is_empty() && n.len() <= MAX_NAME_BYTES;
    if !sized(&c.user) {
        return bad("caller.user", "no user name or one that is too long");
    }
    if c.by.len() > MAX_NAME_BYTES {
        return bad("caller.by", "an impersonator name that is too long");
    }
    if c.groups.len() > MAX_GROUPS || !c.groups.iter().all(|g| sized(g)) {
        return bad(
            "caller.groups",
            "too many groups or an empty or too long group name",
        );
    }
    Ok(())
}

/// Checks every field of `cmd` that has a limit; the error names the field
/// as the edge would.
pub(super) fn check(cmd: &Command) -> Result<(), OmError> {
    let Some(op) = &cmd.op else { return Ok(()) };
    if let Some(c) = &cmd.caller {
        caller(c)?;
    }
    match op {
        Op::CreateVolume(c) => {
            name("name", &c.name)?;
            metadata(&c.metadata)?;
            if crate::rules::OWNER_BOUND.holds(cmd.rules) {
                validate::owner("owner", &c.owner)?;
            }
        }
        Op::DeleteVolume(c) => name("name", &c.name)?,
        Op::SetVolumeQuota(c) => name("name", &c.name)?,
        Op::CreateBucket(c) => {
            name("volume", &c.volume)?;
            name("name", &c.name)?;
            metadata(&c.metadata)?;
        }
        Op::DeleteBucket(c) => {
            name("volume", &c.volume)?;
            name("name", &c.name)?;
        }
        Op::SetBucketQuota(c) => {
            name("volume", &c.volume)?;
            name("name", &c.name)?;
        }
        Op::SetAcl(c) => {
            if !c.volume.is_empty() {
                name("volume", &c.volume)?;
            }
            if !c.bucket.is_empty() {
                name("bucket", &c.bucket)?;
            }
            if c.volume.is_empty() && !c.bucket.is_empty() {
                return Err(OmError::invalid(
                    "MISSING_VOLUME",
                    "volume",
                    "a bucket's ACL names its volume",
                ));
            }
            crate::authz::check_grants(
                crate::authz::Resource::of(&c.volume, &c.bucket),
                &c.grants,
            )?;
        }
        Op::PutKey(c) => {
            object(&c.volume, &c.bucket, "key", &c.key)?;
            key_size("size", c.size)?;
            layout(c.size, c.block_size)?;
            etag("etag", &c.etag)?;
            validate::content_type("content_type", &c.content_type)?;
            metadata(&c.metadata)?;
            conditions(c.conditions.as_ref())?;
            tags(cmd.rules, &c.tags)?;
        }
        Op::PutKeys(c) => {
            bucket(&c.volume, &c.bucket)?;
            put_keys_count(c.keys.len())?;
            block_size(c.block_size)?;
            for (i, k) in c.keys.iter().enumerate() {
                new_key(k, c.block_size).map_err(|e| e.within(&format!("keys[{i}]")))?;
            }
        }
        Op::PutKeyTagging(c) => {
            object(&c.volume, &c.bucket, "key", &c.key)?;
            version_id("version_id", &c.version_id)?;
            validate::tags("tags", &c.tags)?;
        }
        Op::DeleteKey(c) => {
            object(&c.volume, &c.bucket, "key", &c.key)?;
            version_id("version_id", &c.version_id)?;
        }
        Op::SetBucketVersioning(c) => {
            name("volume", &c.volume)?;
            name("bucket", &c.bucket)?;
        }
        Op::SetBucketLifecycle(c) => {
            name("volume", &c.volume)?;
            name("bucket", &c.bucket)?;
            if !c.delete {
                crate::lifecycle::validate(&c.rules)?;
            }
        }
        Op::LifecycleScan(c) => {
            name("volume", &c.volume)?;
            name("bucket", &c.bucket)?;
            crate::lifecycle::scan::check_page(c)?;
        }
        Op::ExpireRetryCache(_) | Op::VerifyMark(_) => {}
        Op::InitCluster(c) => crate::cluster_id::check(&c.cluster_id)?,
        Op::CreateS3Secret(_) | Op::RevokeS3Secret(_) => super::s3::check_fields(op)?,
        Op::DeleteKeys(c) => {
            bucket(&c.volume, &c.bucket)?;
            if c.keys.len() > MAX_DELETE_KEYS {
                return Err(OmError::invalid(
                    "INVALID_KEY_COUNT",
                    "keys",
                    format!(
                        "at most {MAX_DELETE_KEYS} keys per request, got {}",
                        c.keys.len()
                    ),
                ));
            }
            for k in &c.keys {
                validate::key_name("keys", k)?;
            }
            super::versions::check_version_id_count(c.keys.len(), c.version_ids.len())?;
            for v in &c.version_ids {
                version_id("version_ids", v)?;
            }
        }
        Op::RenameKey(c) => {
            object(&c.volume, &c.bucket, "from", &c.from)?;
            validate::key_name("to", &c.to)?;
        }
        Op::OpenKey(c) => {
            object(&c.volume, &c.bucket, "key", &c.key)?;
            validate::content_type("content_type", &c.content_type)?;
            metadata(&c.metadata)?;
            blocks_per_call("blocks", c.blocks)?;
            block_size(c.block_size)?;
            tags(cmd.rules, &c.tags)?;
        }
        Op::AllocateBlock(c) => {
            object(&c.volume, &c.bucket, "key", &c.key)?;
            blocks_per_call("count", c.count)?;
        }
        Op::AbortKey(c) => object(&c.volume, &c.bucket, "key", &c.key)?,
        Op::CommitKey(c) => {
            object(&c.volume, &c.bucket, "key", &c.key)?;
            key_size("size", c.size)?;
            if c.blocks.len() > MAX_KEY_BLOCKS {
                return Err(OmError::invalid(
                    "INVALID_BLOCKS",
                    "blocks",
                    format!(
                        "{} blocks listed; a key has at most {MAX_KEY_BLOCKS}",
                        c.blocks.len()
                    ),
                ));
            }
            etag("etag", &c.etag)?;
            validate::content_type("content_type", &c.content_type)?;
            metadata(&c.metadata)?;
            conditions(c.conditions.as_ref())?;
        }
        Op::CopyKey(c) => {
            object(&c.src_volume, &c.src_bucket, "src_key", &c.src_key)?;
            object(&c.volume, &c.bucket, "key", &c.key)?;
            etag("src_if_match", &c.src_if_match)?;
            etag("src_if_none_match", &c.src_if_none_match)?;
            etag("content_md5", &c.content_md5)?;
            validate::content_type("content_type", &c.content_type)?;
            metadata(&c.metadata)?;
            conditions(c.conditions.as_ref())?;
            version_id("src_version_id", &c.src_version_id)?;
            if c.tagging_directive != 0 && !crate::rules::OBJECT_TAGS.holds(cmd.rules) {
                return Err(unsupported_tags("tagging_directive"));
            }
            tags(cmd.rules, &c.tags)?;
        }
        Op::InitiateMultipart(c) => {
            object(&c.volume, &c.bucket, "key", &c.key)?;
            validate::content_type("content_type", &c.content_type)?;
            metadata(&c.metadata)?;
            tags(cmd.rules, &c.tags)?;
        }
        Op::CommitPart(c) => {
            object(&c.volume, &c.bucket, "key", &c.key)?;
            part_number("part_number", c.part_number)?;
            if c.size > MAX_PART_SIZE {
                return Err(OmError::invalid(
                    "ENTITY_TOO_LARGE",
                    "size",
                    format!("a part is at most {MAX_PART_SIZE} bytes, got {}", c.size),
                ));
            }
            layout(c.size, c.block_size)?;
            etag("etag", &c.etag)?;
            if c.blocks.len() > MAX_KEY_BLOCKS {
                return Err(OmError::invalid(
                    "INVALID_BLOCKS",
                    "blocks",
                    format!(
                        "{} blocks listed; a part has at most {MAX_KEY_BLOCKS}",
                        c.blocks.len()
                    ),
                ));
            }
        }
        Op::CompleteMultipart(c) => {
            object(&c.volume, &c.bucket, "key", &c.key)?;
            if c.parts.is_empty() || c.parts.len() > MAX_PART_NUMBER as usize {
                return Err(OmError::invalid(
                    "INVALID_PARTS",
                    "parts",
                    format!(
                        "1..={MAX_PART_NUMBER} parts must be listed, got {}",
                        c.parts.len()
                    ),
                ));
            }
            for p in &c.parts {
                part_number("parts", p.part_number)?;
                etag("parts", &p.etag)?;
            }
            conditions(c.conditions.as_ref())?;
        }
        Op::AbortMultipart(c) => object(&c.volume, &c.bucket, "key", &c.key)?,
        Op::AckDeletedBlocks(c) => {
            if c.ids.len() > MAX_ACK_IDS {
                return Err(OmError::invalid(
                    "INVALID_ID_COUNT",
                    "ids",
                    format!("at most {MAX_ACK_IDS} ids per call, got {}", c.ids.len()),
                ));
            }
        }
        // Batch sizes: capped by the handlers, never refused.
        Op::ExpireOpenKeys(_) | Op::PurgeDeletedDirs(_) => {}
        Op::CreateDirectory(c) => {
            bucket(&c.volume, &c.bucket)?;
            path("path", &c.path)?;
        }
        Op::CreateFile(c) => {
            bucket(&c.volume, &c.bucket)?;
            path("path", &c.path)?;
            validate::content_type("content_type", &c.content_type)?;
            metadata(&c.metadata)?;
            blocks_per_call("blocks", c.blocks)?;
            block_size(c.block_size)?;
        }
        Op::DeletePath(c) => {
            bucket(&c.volume, &c.bucket)?;
            path("path", &c.path)?;
        }
        Op::RenamePath(c) => {
            bucket(&c.volume, &c.bucket)?;
            path("from", &c.from)?;
            path("to", &c.to)?;
        }
    }
    Ok(())
}

/// A volume or bucket name as the key layouts need it: 1 to 63 bytes,
/// without `/` (the separator) or NUL.
fn name(field: &'static str, n: &str) -> Result<(), OmError> {
    if n.is_empty() || n.len() > MAX_NAME_BYTES || n.contains(['/', '\0']) {
        return Err(OmError::invalid(
            "INVALID_NAME",
            field,
            format!(
                "invalid {field} {}: 1 to {MAX_NAME_BYTES} bytes without '/' or NUL",
                quote_prefix(n)
            ),
        ));
    }
    Ok(())
}

fn bucket(volume: &str, bucket: &str) -> Result<(), OmError> {
    name("volume", volume)?;
    name("bucket", bucket)
}

fn object(volume: &str, bkt: &str, field: &'static str, key: &str) -> Result<(), OmError> {
    bucket(volume, bkt)?;
    validate::key_name(field, key)
}

/// A `PutKeys` request or command carries 1 to `MAX_PUT_KEYS` keys.
pub fn put_keys_count(n: usize) -> Result<(), OmError> {
    if n == 0 || n > super::MAX_PUT_KEYS {
        return Err(OmError::invalid(
            "INVALID_KEY_COUNT",
            "keys",
            format!(
                "between 1 and {} keys per request, got {n}",
                super::MAX_PUT_KEYS
            ),
        ));
    }
    Ok(())
}

/// One key of a `PutKeys`, as `PutKey`'s fields are checked (field names
/// relative to the item).
fn new_key(k: &om_proto::store::NewKey, stamped: u64) -> Result<(), OmError> {
    validate::key_name("key", &k.key)?;
    key_size("size", k.size)?;
    layout(k.size, stamped)?;
    etag("etag", &k.etag)?;
    validate::content_type("content_type", &k.content_type)?;
    metadata(&k.metadata)?;
    validate::tags("tags", &k.tags)
}

fn metadata(m: &BTreeMap<String, String>) -> Result<(), OmError> {
    validate::metadata("metadata", m)
}

/// Object tags arrived with rules 5: an older command carrying some was
/// never proposed by any leader, and is refused as an unknown command would
/// be.
fn unsupported_tags(field: &'static str) -> OmError {
    OmError::invalid(
        "UNSUPPORTED_COMMAND",
        field,
        "object tags need apply rules 5",
    )
}

/// Tags a write gives the key it creates: S3's rules (`validate::tags`),
/// from rules 5 on (a command without tags applies as before).
fn tags(rules: u32, t: &BTreeMap<String, String>) -> Result<(), OmError> {
    if t.is_empty() {
        return Ok(());
    }
    if !crate::rules::OBJECT_TAGS.holds(rules) {
        return Err(unsupported_tags("tags"));
    }
    validate::tags("tags", t)
}

/// ETags and digests are stored as given: bounded by the longest form.
fn etag(field: &'static str, e: &str) -> Result<(), OmError> {
    if e.len() > MAX_ETAG_BYTES {
        return Err(OmError::invalid(
            "INVALID_ETAG",
            field,
            format!(
                "{field} is {} bytes; an ETag has at most {MAX_ETAG_BYTES}",
                e.len()
            ),
        ));
    }
    Ok(())
}

/// A condition's ETags are compared, never stored: bounded by what the edge
/// takes (`validate::MAX_CONDITION_ETAG_BYTES`, above `MAX_ETAG_BYTES` since
/// rules 10, whose leaders alone send longer ones).
fn conditions(c: Option<&KeyConditions>) -> Result<(), OmError> {
    let Some(c) = c else { return Ok(()) };
    for (field, e) in [
        ("conditions.if_match", &c.if_match),
        ("conditions.if_none_match", &c.if_none_match),
    ] {
        if e.len() > validate::MAX_CONDITION_ETAG_BYTES {
            return Err(OmError::invalid(
                "INVALID_ETAG",
                field,
                format!(
                    "{field} is {} bytes; a condition names at most {}",
                    e.len(),
                    validate::MAX_CONDITION_ETAG_BYTES
                ),
            ));
        }
    }
    Ok(())
}

/// A key's size: at most `MAX_KEY_SIZE` (S3's 5 TiB). Shared with the edge.
pub fn key_size(field: &'static str, size: u64) -> Result<(), OmError> {
    if size > MAX_KEY_SIZE {
        return Err(OmError::invalid(
            "KEY_TOO_LARGE",
            field,
            format!("size {size} exceeds the {MAX_KEY_SIZE}-byte (5 TiB) object limit"),
        ));
    }
    Ok(())
}

/// Blocks one OpenKey, CreateFile or AllocateBlock asks for. Shared with the edge.
pub fn blocks_per_call(field: &'static str, n: u32) -> Result<(), OmError> {
    if n > MAX_BLOCKS_PER_CALL {
        return Err(OmError::invalid(
            "TOO_MANY_BLOCKS",
            field,
            format!("at most {MAX_BLOCKS_PER_CALL} blocks per call, got {n}"),
        ));
    }
    Ok(())
}

/// A part number: 1 to `MAX_PART_NUMBER`. Shared with the edge.
pub fn part_number(field: &'static str, n: u32) -> Result<(), OmError> {
    if !(1..=MAX_PART_NUMBER).contains(&n) {
        return Err(OmError::invalid(
            "INVALID_PART_NUMBER",
            field,
            format!("part numbers are 1..={MAX_PART_NUMBER}, got {n}"),
        ));
    }
    Ok(())
}

/// A stamped block size: 0 (legacy) or within `MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE`.
fn block_size(bs: u64) -> Result<(), OmError> {
    if bs != 0 && !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&bs) {
        return Err(OmError::invalid(
            "INVALID_BLOCK_SIZE",
            "block_size",
            format!("block size {bs} is outside {MIN_BLOCK_SIZE}..={MAX_BLOCK_SIZE}"),
        ));
    }
    Ok(())
}

/// `size` bytes laid out in blocks of the stamped size: a valid size, and at
/// most `MAX_KEY_BLOCKS` of them, checked before apply allocates any id.
fn layout(size: u64, stamped: u64) -> Result<(), OmError> {
    block_size(stamped)?;
    let n = size.div_ceil(block_size_or_legacy(stamped));
    if n > MAX_KEY_BLOCKS as u64 {
        return Err(OmError::invalid(
            "TOO_MANY_BLOCKS",
            "size",
            format!("{size} bytes take {n} blocks; at most {MAX_KEY_BLOCKS} are allowed"),
        ));
    }
    Ok(())
}

/// An FSO path in the normalized form the edge produces (see
/// `validate::fs_path`): not the root, at most `MAX_KEY_BYTES` and
/// `fs::MAX_PATH_DEPTH` components, which also keeps the per-entry object-id
/// counter of the directories one command creates below 255.
fn path(field: &'static str, p: &str) -> Result<(), OmError> {
    if validate::fs_path_not_root(field, p)? != p {
        return Err(OmError::invalid(
            "INVALID_PATH",
            field,
            format!("{field} {} is not normalized", quote_prefix(p)),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_the_layout_separators_out() {
        assert!(name("volume", "vol").is_ok());
        for bad in ["", "a/b", "a\0b", &"v".repeat(64)] {
            assert!(name("volume", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn layouts_are_bounded_before_allocation() {
        assert!(layout(MAX_KEY_SIZE, 0).is_ok());
        assert!(layout(MAX_KEY_SIZE, MIN_BLOCK_SIZE).is_err());
        assert!(layout(1, 1).is_err());
        assert!(layout(1, MAX_BLOCK_SIZE + 1).is_err());
        assert!(layout(u64::MAX, MAX_BLOCK_SIZE).is_err());
    }

    #[test]
    fn paths_must_be_normalized() {
        assert!(path("path", "a/b").is_ok());
        for bad in ["", "/a", "a/", "a//b", "a/./b"] {
            assert!(path("path", bad).is_err(), "{bad:?}");
        }
        let deep = vec!["d"; crate::fs::MAX_PATH_DEPTH + 1].join("/");
        assert!(path("path", &deep).is_err());
    }
}
