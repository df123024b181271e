//! Values stored inside records, shared by apply, listings and the
//! lifecycle scanner: bucket layouts, versioning states and version ids.

use om_proto::store::KeyRecord;

use crate::error::OmError;

/// Layout numbers stored in `BucketRecord::layout`.
pub const LAYOUT_OBJECT_STORE: u32 = 1;
pub const LAYOUT_FSO: u32 = 2;

/// `BucketRecord::versioning`.
pub const UNVERSIONED: u32 = 0;
pub const ENABLED: u32 = 1;
pub const SUSPENDED: u32 = 2;

/// The id of versions written while a bucket was unversioned or suspended.
pub const NULL_VERSION_ID: &str = "null";

/// Characters of a version id other than "null".
pub const VERSION_ID_CHARS: usize = 16;

/// The stamp of the `n`-th version one entry creates: newer entries (and
/// later versions within one) get larger stamps.
pub fn version_stamp(log_index: u64, n: u16) -> u64 {
    (log_index << 16) | u64::from(n)
}

/// The version id of a stored version.
pub fn version_id(rec: &KeyRecord) -> String {
    if rec.versioned {
        format!("{:016x}", rec.version)
    } else {
        NULL_VERSION_ID.to_string()
    }
}

/// A version id as a request names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionRef {
    Null,
    Stamp(u64),
}

/// Parses a version id: "null" or 16 lowercase hex digits (not all zero);
/// anything else is INVALID_ARGUMENT `INVALID_VERSION_ID` on `field`.
pub fn parse_version_id(id: &str, field: &str) -> Result<VersionRef, OmError> {
    if id == NULL_VERSION_ID {
        return Ok(VersionRef::Null);
    }
    let well_formed = id.len() == VERSION_ID_CHARS
        && id
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    match well_formed
        .then(|| u64::from_str_radix(id, 16).ok())
        .flatten()
    {
        Some(v) if v != 0 => Ok(VersionRef::Stamp(v)),
        _ => Err(OmError::invalid(
            "INVALID_VERSION_ID",
            field,
            format!(
                "{:?} is not a version id (\"null\" or {VERSION_ID_CHARS} hex digits)",
                crate::validate::quote_prefix(id)
            ),
        )),
    }
}
