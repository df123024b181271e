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

use om_proto::store::{Command, DeleteConditions, KeyConditions};

use super::{LEGACY_BLOCK_SIZE, MAX_BLOCK_SIZE, MAX_KEY_SIZE, MIN_BLOCK_SIZE};
use crate::error::OmError;
pub use crate::limits::{
    MAX_ACK_IDS, MAX_BLOCKS_PER_CALL, MAX_KEY_BLOCKS, MAX_PART_NUMBER, MAX_PART_SIZE,
    MAX_PURGE_BATCH,
};
use crate::validate::{self, MAX_ETAG_BYTES, MAX_NAME_BYTES, quote_prefix};

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
pub(super) fn version_id(field: &str, v: &str) -> Result<(), OmError> {
    if v.len() <= crate::store::records::VERSION_ID_CHARS {
        return Ok(());
    }
    Err(OmError::invalid(
        "INVALID_VERSION_ID",
        field,
        format!(
            "a version id has at most {} characters",
            crate::store::records::VERSION_ID_CHARS
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

/// Checks the limits of `cmd`'s caller; each operation checks its own
/// fields (`Operation::limits`, after this). The error names the field as
/// the edge would.
pub(super) fn check_caller(cmd: &Command) -> Result<(), OmError> {
    match &cmd.caller {
        Some(c) => caller(c),
        None => Ok(()),
    }
}

/// A volume or bucket name as the key layouts need it: 1 to 63 bytes,
/// without `/` (the separator) or NUL.
pub(super) fn name(field: &'static str, n: &str) -> Result<(), OmError> {
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

pub(super) fn bucket(volume: &str, bucket: &str) -> Result<(), OmError> {
    name("volume", volume)?;
    name("bucket", bucket)
}

pub(super) fn object(
    volume: &str,
    bkt: &str,
    field: &'static str,
    key: &str,
) -> Result<(), OmError> {
    bucket(volume, bkt)?;
    validate::key_name(field, key)
}

/// A `PutKeys` command carries 1 to `MAX_PUT_KEYS` keys.
pub(super) fn put_keys_count(n: usize) -> Result<(), OmError> {
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
pub(super) fn new_key(k: &om_proto::store::NewKey, stamped: u64) -> Result<(), OmError> {
    validate::key_name("key", &k.key)?;
    key_size("size", k.size)?;
    layout(k.size, stamped)?;
    etag("etag", &k.etag)?;
    validate::content_type("content_type", &k.content_type)?;
    metadata(&k.metadata)?;
    validate::tags("tags", &k.tags)
}

pub(super) fn metadata(m: &BTreeMap<String, String>) -> Result<(), OmError> {
    validate::metadata("metadata", m)
}

/// Object tags arrived with rules 5: an older command carrying some was
/// never proposed by any leader, and is refused as an unknown command would
/// be.
pub(super) fn unsupported_tags(field: &'static str) -> OmError {
    OmError::invalid(
        "UNSUPPORTED_COMMAND",
        field,
        "object tags need apply rules 5",
    )
}

/// Tags a write gives the key it creates: S3's rules (`validate::tags`),
/// from rules 5 on (a command without tags applies as before).
pub(super) fn tags(rules: u32, t: &BTreeMap<String, String>) -> Result<(), OmError> {
    if t.is_empty() {
        return Ok(());
    }
    if !crate::rules::OBJECT_TAGS.holds(rules) {
        return Err(unsupported_tags("tags"));
    }
    validate::tags("tags", t)
}

/// ETags and digests are stored as given: bounded by the longest form.
pub(super) fn etag(field: &'static str, e: &str) -> Result<(), OmError> {
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
pub(super) fn conditions(c: Option<&KeyConditions>) -> Result<(), OmError> {
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

/// A delete's conditions: ETags bounded as a write's are.
pub(super) fn delete_conditions<'a>(
    cs: impl Iterator<Item = &'a DeleteConditions>,
) -> Result<(), OmError> {
    for c in cs {
        if c.if_match.len() > validate::MAX_CONDITION_ETAG_BYTES {
            return Err(OmError::invalid(
                "INVALID_ETAG",
                "conditions.if_match",
                format!(
                    "conditions.if_match is {} bytes; a condition names at most {}",
                    c.if_match.len(),
                    validate::MAX_CONDITION_ETAG_BYTES
                ),
            ));
        }
    }
    Ok(())
}

/// DeleteKeys' conditions: none, or one per key (`INVALID_CONDITION_COUNT`),
/// checked at the edge and in apply alike.
pub fn condition_count(keys: usize, conditions: usize) -> Result<(), OmError> {
    if conditions == 0 || conditions == keys {
        return Ok(());
    }
    Err(OmError::invalid(
        "INVALID_CONDITION_COUNT",
        "conditions",
        format!("conditions holds {conditions} entries for {keys} keys; give none or one per key"),
    ))
}

/// A key's size: at most `MAX_KEY_SIZE` (S3's 5 TiB).
pub(super) fn key_size(field: &'static str, size: u64) -> Result<(), OmError> {
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
pub(super) fn block_size(bs: u64) -> Result<(), OmError> {
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
pub(super) fn layout(size: u64, stamped: u64) -> Result<(), OmError> {
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
pub(super) fn path(field: &'static str, p: &str) -> Result<(), OmError> {
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
