//! Request validation: pure functions, no I/O. Every rule returns the offending
//! field so the gRPC edge can name it.

use crate::error::OmError;
pub use crate::limits::{
    MAX_ADDRESS_BYTES, MAX_BUCKET_TAGS, MAX_CONDITION_ETAG_BYTES, MAX_CONTENT_TYPE_BYTES,
    MAX_DELETE_KEYS, MAX_DELIMITER_BYTES, MAX_ETAG_BYTES, MAX_KEY_BYTES, MAX_METADATA_BYTES,
    MAX_NAME_BYTES, MAX_OBJECT_TAGS, MAX_OWNER_BYTES, MAX_PATH_DEPTH, MAX_TAG_KEY_CHARS,
    MAX_TAG_VALUE_CHARS,
};

/// Most bytes of a bad value an error message quotes.
pub const QUOTED_PREFIX_BYTES: usize = 64;

/// A value as error messages show it: Debug-quoted, cut to at most
/// `QUOTED_PREFIX_BYTES` bytes on a character boundary, with the full length
/// noted when cut, so an error never echoes a huge input back.
/// `quote_prefix` as a command of apply rules `rules` quotes a name in its
/// refusal: once from rules 15 (`rules::QUOTE_ONCE`), twice before, as the
/// replicas that answered those entries did.
pub fn quote_in(rules: u32, value: &str) -> String {
    let q = quote_prefix(value);
    if crate::rules::QUOTE_ONCE.holds(rules) {
        q
    } else {
        format!("{q:?}")
    }
}

pub fn quote_prefix(value: &str) -> String {
    if value.len() <= QUOTED_PREFIX_BYTES {
        return format!("{value:?}");
    }
    let mut end = QUOTED_PREFIX_BYTES;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}…({} bytes)", &value[..end], value.len())
}

/// A snapshot's name: 1 to 63 of `[A-Za-z0-9._-]`, not `.` or `..` (it
/// names a directory of `.snapshot/` through a gateway).
pub fn snapshot_name(field: &'static str, name: &str) -> Result<(), OmError> {
    let ok = (1..=crate::limits::MAX_SNAPSHOT_NAME_BYTES).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if ok {
        return Ok(());
    }
    Err(OmError::invalid(
        "INVALID_SNAPSHOT_NAME",
        field,
        format!(
            "invalid {field} {}: 1 to {} of A-Z, a-z, 0-9, '.', '_' and '-', not '.' or '..'",
            quote_prefix(name),
            crate::limits::MAX_SNAPSHOT_NAME_BYTES
        ),
    ))
}

/// Checks a volume or bucket name against S3 bucket-naming rules: 3–63 characters
/// of lowercase letters, digits, `-` and `.`; starts and ends with a letter or
/// digit; no `..`, `.-` or `-.`; not shaped like an IPv4 address; none of the
/// prefixes and suffixes S3 reserves.
pub fn resource_name(field: &'static str, name: &str) -> Result<(), OmError> {
    let bad = |why: &str| {
        Err(OmError::invalid(
            "INVALID_NAME",
            field,
            format!("invalid {field} {}: {why}", quote_prefix(name)),
        ))
    };
    let len = name.len();
    if !(3..=63).contains(&len) {
        return bad("must be 3 to 63 characters long");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return bad(&format!(
            "contains {c:?}; only lowercase letters, digits, '-' and '.' are allowed"
        ));
    }
    let first = name.as_bytes()[0];
    let last = name.as_bytes()[len - 1];
    if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
        return bad("must start and end with a letter or digit");
    }
    if name.contains("..") || name.contains(".-") || name.contains("-.") {
        return bad("must not contain '..', '.-' or '-.'");
    }
    if looks_like_ipv4(name) {
        return bad("must not be formatted as an IP address");
    }
    for p in ["xn--", "sthree-", "amzn-s3-demo-"] {
        if name.starts_with(p) {
            return bad(&format!("must not start with the reserved prefix {p:?}"));
        }
    }
    for s in ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"] {
        if name.ends_with(s) {
            return bad(&format!("must not end with the reserved suffix {s:?}"));
        }
    }
    Ok(())
}

fn looks_like_ipv4(name: &str) -> bool {
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() == 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks a key name: non-empty UTF-8 of at most 1024 bytes without NUL, which
/// the key layout reserves as a separator (see `store::keys`).
pub fn key_name(field: &'static str, key: &str) -> Result<(), OmError> {
    let bad = |reason: &'static str, why: String| Err(OmError::invalid(reason, field, why));
    if key.is_empty() {
        return bad("INVALID_KEY", format!("{field} must not be empty"));
    }
    if key.len() > MAX_KEY_BYTES {
        return bad(
            "KEY_TOO_LONG",
            format!(
                "{field} is {} bytes; at most {MAX_KEY_BYTES} are allowed",
                key.len()
            ),
        );
    }
    if key.contains('\0') {
        return bad("INVALID_KEY", format!("{field} must not contain NUL"));
    }
    Ok(())
}

/// A listing prefix or marker may be empty but is otherwise bounded like a key.
pub fn optional_key(field: &'static str, key: &str) -> Result<(), OmError> {
    if key.is_empty() {
        Ok(())
    } else {
        key_name(field, key)
    }
}

/// A listing delimiter: empty, or up to 16 bytes without NUL.
pub fn delimiter(field: &'static str, d: &str) -> Result<(), OmError> {
    if d.len() > MAX_DELIMITER_BYTES || d.contains('\0') {
        return Err(OmError::invalid(
            "INVALID_DELIMITER",
            field,
            format!("{field} must be at most 16 bytes without NUL"),
        ));
    }
    Ok(())
}

/// Metadata maps are bounded so one request cannot bloat a record (S3 allows 2 KiB).
pub fn metadata(
    field: &'static str,
    map: &std::collections::BTreeMap<String, String>,
) -> Result<(), OmError> {
    let total = map
        .iter()
        .fold(0usize, |n, (k, v)| n.saturating_add(k.len() + v.len()));
    if total > MAX_METADATA_BYTES {
        return Err(OmError::invalid(
            "METADATA_TOO_LARGE",
            field,
            format!("{field} is {total} bytes; at most {MAX_METADATA_BYTES} are allowed"),
        ));
    }
    if map.keys().any(|k| k.is_empty()) {
        return Err(OmError::invalid(
            "INVALID_METADATA",
            field,
            format!("{field} has an empty name"),
        ));
    }
    Ok(())
}

/// A `host:port` address another node or client can dial, at most
/// `MAX_ADDRESS_BYTES` long (addresses are replicated in the membership and
/// returned by every cluster status).
pub fn address(field: &'static str, addr: &str) -> Result<(), OmError> {
    let ok = addr.len() <= MAX_ADDRESS_BYTES
        && match addr.rsplit_once(':') {
            Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
            None => false,
        };
    if ok {
        Ok(())
    } else {
        Err(OmError::invalid(
            "INVALID_ADDRESS",
            field,
            format!(
                "{field} {} is not HOST:PORT of at most {MAX_ADDRESS_BYTES} bytes",
                quote_prefix(addr)
            ),
        ))
    }
}

/// Accepts an empty ETag, a hex MD5 (32 lowercase hex digits) or a multipart
/// ETag `<32 hex>-<parts>`; optional surrounding quotes are not stored.
pub fn etag(field: &'static str, etag: &str) -> Result<(), OmError> {
    if etag.is_empty() {
        return Ok(());
    }
    let (hash, parts) = match etag.split_once('-') {
        Some((h, n)) => (h, Some(n)),
        None => (etag, None),
    };
    let hex_ok = hash.len() == 32 && hash.bytes().all(|b| b.is_ascii_hexdigit());
    let parts_ok = parts.is_none_or(|n| {
        !n.is_empty()
            && n.len() <= 5
            && n.bytes().all(|b| b.is_ascii_digit())
            && n.parse::<u32>().is_ok_and(|n| (1..=10_000).contains(&n))
    });
    if hex_ok && parts_ok {
        Ok(())
    } else {
        Err(OmError::invalid(
            "INVALID_ETAG",
            field,
            format!(
                "{field} {} is neither a hex MD5 nor a multipart ETag",
                quote_prefix(etag)
            ),
        ))
    }
}

/// An ETag a write condition compares with (If-Match, If-None-Match): any
/// visible ASCII up to `MAX_CONDITION_ETAG_BYTES`, as S3 takes it. A value
/// that is no ETag om could hold is not refused: it simply never matches
/// (S3 answers `If-Match: badetag` 412, or 404 for a missing key).
pub fn condition_etag(field: &'static str, etag: &str) -> Result<(), OmError> {
    if etag.len() <= MAX_CONDITION_ETAG_BYTES && etag.bytes().all(|b| b.is_ascii_graphic()) {
        return Ok(());
    }
    Err(OmError::invalid(
        "INVALID_ETAG",
        field,
        format!(
            "{field} {} is not at most {MAX_CONDITION_ETAG_BYTES} visible ASCII characters",
            quote_prefix(etag)
        ),
    ))
}

/// An ETag as clients send it (S3 quotes them) in the stored form: no
/// surrounding quotes, lowercase.
pub fn normalize_etag(etag: &str) -> String {
    etag.trim()
        .trim_start_matches('"')
        .trim_end_matches('"')
        .to_ascii_lowercase()
}

/// A required plain MD5 (32 hex digits), e.g. a part's ETag or a content digest.
pub fn md5_hex(field: &'static str, value: &str) -> Result<(), OmError> {
    if value.len() == 32 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(OmError::invalid(
            "INVALID_ETAG",
            field,
            format!(
                "{field} {} is not a hex MD5 (32 hex digits)",
                quote_prefix(value)
            ),
        ))
    }
}

/// A content type: at most `MAX_CONTENT_TYPE_BYTES`.
pub fn content_type(field: &'static str, ct: &str) -> Result<(), OmError> {
    if ct.len() > MAX_CONTENT_TYPE_BYTES {
        return Err(OmError::invalid(
            "INVALID_CONTENT_TYPE",
            field,
            format!("content type is longer than {MAX_CONTENT_TYPE_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// A volume owner: at most `MAX_OWNER_BYTES`, without NUL.
pub fn owner(field: &'static str, owner: &str) -> Result<(), OmError> {
    if owner.len() > MAX_OWNER_BYTES || owner.contains('\0') {
        return Err(OmError::invalid(
            "INVALID_OWNER",
            field,
            format!(
                "{field} is {} bytes; at most {MAX_OWNER_BYTES} without NUL are allowed",
                owner.len()
            ),
        ));
    }
    Ok(())
}

/// Normalizes a FILE_SYSTEM_OPTIMIZED path: one leading and one trailing `/`
/// are dropped; empty, `.` and `..` components, NUL, more than 1024 bytes or
/// more than `MAX_PATH_DEPTH` components are refused. The root is "".
pub fn fs_path(field: &'static str, path: &str) -> Result<String, OmError> {
    let bad = |why: String| Err(OmError::invalid("INVALID_PATH", field, why));
    if path.len() > MAX_KEY_BYTES {
        return bad(format!("{field} is longer than {MAX_KEY_BYTES} bytes"));
    }
    if path.contains('\0') {
        return bad(format!("{field} must not contain NUL"));
    }
    let p = path.strip_prefix('/').unwrap_or(path);
    if p.is_empty() {
        return Ok(String::new());
    }
    let p = p.strip_suffix('/').unwrap_or(p);
    let comps: Vec<&str> = p.split('/').collect();
    if comps.len() > MAX_PATH_DEPTH {
        return bad(format!(
            "{field} has more than {} components",
            MAX_PATH_DEPTH
        ));
    }
    for c in &comps {
        if c.is_empty() || *c == "." || *c == ".." {
            return bad(format!(
                "{field} {} has an empty, '.' or '..' component",
                quote_prefix(path)
            ));
        }
    }
    Ok(p.to_string())
}

/// Tag keys S3 reserves for AWS's own tags.
pub const RESERVED_TAG_PREFIX: &str = "aws:";

/// A character S3 allows in a tag key or value (its pattern
/// `[\p{L}\p{Z}\p{N}_.:/=+\-@]`): a letter (Rust's Unicode `Alphabetic`,
/// which also takes the combining marks of some scripts), a number, a
/// space or separator (Unicode white space other than control
/// characters: no tab or newline), or one of `_ . : / = + - @`.
fn tag_char(c: char) -> bool {
    c.is_alphabetic()
        || c.is_numeric()
        || (c.is_whitespace() && !c.is_control())
        || matches!(c, '_' | '.' | ':' | '/' | '=' | '+' | '-' | '@')
}

/// An object's tag set (S3's rules): at most `MAX_OBJECT_TAGS` tags (else
/// `TOO_MANY_TAGS` on `field`); each key 1 to `MAX_TAG_KEY_CHARS` and each
/// value at most `MAX_TAG_VALUE_CHARS` Unicode characters, of the
/// characters `tag_char` allows, and no key starting with "aws:" (else
/// `INVALID_TAG` on `field["key"]`). Keys are unique by construction (a
/// map). Checked at the edge and again in apply, on the command alone.
pub fn tags(
    field: &'static str,
    map: &std::collections::BTreeMap<String, String>,
) -> Result<(), OmError> {
    tag_set(field, map, MAX_OBJECT_TAGS, "an object")
}

/// A bucket's tag set: `tags`' rules, with at most `MAX_BUCKET_TAGS` tags.
pub fn bucket_tags(
    field: &'static str,
    map: &std::collections::BTreeMap<String, String>,
) -> Result<(), OmError> {
    tag_set(field, map, MAX_BUCKET_TAGS, "a bucket")
}

fn tag_set(
    field: &'static str,
    map: &std::collections::BTreeMap<String, String>,
    max: usize,
    whose: &str,
) -> Result<(), OmError> {
    if map.len() > max {
        return Err(OmError::invalid(
            "TOO_MANY_TAGS",
            field,
            format!("{whose} has at most {max} tags, got {}", map.len()),
        ));
    }
    for (k, v) in map {
        let bad = |why: String| {
            Err(OmError::invalid(
                "INVALID_TAG",
                format!("{field}[{}]", quote_prefix(k)),
                format!("tag {}: {why}", quote_prefix(k)),
            ))
        };
        // Counted only up to one past the limit: a huge value costs nothing.
        let chars = |s: &str, max: usize| s.chars().take(max + 1).count();
        if k.is_empty() || chars(k, MAX_TAG_KEY_CHARS) > MAX_TAG_KEY_CHARS {
            return bad(format!("a tag key has 1 to {MAX_TAG_KEY_CHARS} characters"));
        }
        if chars(v, MAX_TAG_VALUE_CHARS) > MAX_TAG_VALUE_CHARS {
            return bad(format!(
                "a tag value has at most {MAX_TAG_VALUE_CHARS} characters"
            ));
        }
        if k.starts_with(RESERVED_TAG_PREFIX) {
            return bad(format!(
                "tag keys starting with {RESERVED_TAG_PREFIX:?} are reserved"
            ));
        }
        if let Some(c) = k.chars().chain(v.chars()).find(|c| !tag_char(*c)) {
            return bad(format!(
                "{c:?} is not allowed; tags hold letters, digits, spaces and + - = . _ : / @"
            ));
        }
    }
    Ok(())
}

/// `fs_path` that refuses the root.
pub fn fs_path_not_root(field: &'static str, path: &str) -> Result<String, OmError> {
    let p = fs_path(field, path)?;
    if p.is_empty() {
        return Err(OmError::invalid(
            "INVALID_PATH",
            field,
            format!("{field} must name an entry, not the root"),
        ));
    }
    Ok(p)
}

/// Whether `s` is all ASCII hex digits (`from_str_radix` alone would also
/// take a leading `+`).
fn all_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// An upload id as om hands it out: 16 hex digits.
pub fn upload_id(field: &'static str, id: &str) -> Result<u64, OmError> {
    if id.len() == 16
        && all_hex(id)
        && let Ok(v) = u64::from_str_radix(id, 16)
    {
        return Ok(v);
    }
    Err(OmError::invalid(
        "INVALID_UPLOAD_ID",
        field,
        format!(
            "{field} {} is not an upload id (16 hex digits)",
            quote_prefix(id)
        ),
    ))
}

pub fn format_upload_id(id: u64) -> String {
    format!("{id:016x}")
}

/// A deleted-blocks entry id: 16 hex digits of log index, 8 of sequence.
/// Checked to be hex before it is split, so a multi-byte character can never
/// put the split inside a character.
pub fn deleted_id(field: &'static str, id: &str) -> Result<(u64, u32), OmError> {
    if id.len() == 24
        && all_hex(id)
        && let (Some(index), Some(seq)) = (id.get(..16), id.get(16..))
        && let (Ok(i), Ok(s)) = (u64::from_str_radix(index, 16), u32::from_str_radix(seq, 16))
    {
        return Ok((i, s));
    }
    Err(OmError::invalid(
        "INVALID_ENTRY_ID",
        field,
        format!(
            "{field} {} is not a deleted-blocks entry id (24 hex digits)",
            quote_prefix(id)
        ),
    ))
}

pub fn format_deleted_id(index: u64, seq: u32) -> String {
    format!("{index:016x}{seq:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_s3_rules() {
        for ok in ["abc", "v1-x", "a.b.c", "0ab", &"a".repeat(63)] {
            assert!(resource_name("volume", ok).is_ok(), "{ok}");
        }
        for bad in [
            "ab",
            &"a".repeat(64),
            "Abc",
            "a_b",
            "-ab",
            "ab-",
            "a..b",
            "a.-b",
            "a-.b",
            "192.168.1.1",
            "xn--abc",
            "abc-s3alias",
            "a b",
            "ab/",
        ] {
            assert!(resource_name("volume", bad).is_err(), "{bad}");
        }
        assert!(resource_name("bucket", "1.2.3").is_ok());
    }

    #[test]
    fn key_rules() {
        assert!(key_name("key", "a/b/c").is_ok());
        assert!(key_name("key", &"é".repeat(512)).is_ok());
        assert!(key_name("key", "").is_err());
        assert!(key_name("key", &"a".repeat(1025)).is_err());
        assert!(key_name("key", "a\0b").is_err());
    }

    #[test]
    fn fs_paths_normalize() {
        assert_eq!(fs_path("p", "/a/b/").unwrap(), "a/b");
        assert_eq!(fs_path("p", "a").unwrap(), "a");
        assert_eq!(fs_path("p", "/").unwrap(), "");
        for bad in ["a//b", "a/./b", "../a", "a/..", "//", "a\0b"] {
            assert!(fs_path("p", bad).is_err(), "{bad}");
        }
        assert!(fs_path_not_root("p", "/").is_err());
    }

    #[test]
    fn addresses_are_bounded() {
        assert!(address("a", "node-1.example.com:9872").is_ok());
        let host = "h".repeat(MAX_ADDRESS_BYTES - 5);
        assert!(address("a", &format!("{host}:9872")).is_ok());
        assert!(address("a", &format!("{host}x:9872")).is_err());
        assert!(address("a", "host").is_err());
    }

    #[test]
    fn ids_round_trip() {
        assert_eq!(upload_id("u", &format_upload_id(42)).unwrap(), 42);
        assert!(upload_id("u", "12").is_err());
        assert!(upload_id("u", "zzzzzzzzzzzzzzzz").is_err());
        assert_eq!(deleted_id("id", &format_deleted_id(7, 3)).unwrap(), (7, 3));
        assert!(deleted_id("id", "00").is_err());
        // 24 bytes whose 16th byte is inside a character: refused, no panic.
        let split_char = format!("{}é{}", "0".repeat(15), "0".repeat(7));
        assert_eq!(split_char.len(), 24);
        assert!(!split_char.is_char_boundary(16));
        assert!(deleted_id("id", &split_char).is_err());
        assert!(deleted_id("id", &format!("+{}", "0".repeat(23))).is_err());
        assert!(upload_id("u", "+00000000000000a").is_err());
        assert_eq!(normalize_etag("\"ABC\""), "abc");
    }

    #[test]
    fn errors_quote_a_short_prefix_of_bad_values() {
        let huge = "A".repeat(1 << 20);
        let checks: Vec<OmError> = vec![
            resource_name("name", &huge).unwrap_err(),
            address("raft_addr", &huge).unwrap_err(),
            etag("etag", &huge).unwrap_err(),
            md5_hex("etag", &huge).unwrap_err(),
            fs_path("path", &format!("a//{}", "b".repeat(900))).unwrap_err(),
            upload_id("upload_id", &huge).unwrap_err(),
            deleted_id("after", &huge).unwrap_err(),
            owner("owner", &huge).unwrap_err(),
            key_name("key", &huge).unwrap_err(),
        ];
        for e in checks {
            let m = e.to_string();
            assert!(m.len() < 200, "{} bytes: {m}", m.len());
        }
    }

    #[test]
    fn limits_of_owner_and_address() {
        assert!(owner("owner", &"o".repeat(MAX_OWNER_BYTES)).is_ok());
        assert!(owner("owner", &"o".repeat(MAX_OWNER_BYTES + 1)).is_err());
        assert!(owner("owner", "a\0b").is_err());
        let long_host = format!("{}:80", "h".repeat(MAX_ADDRESS_BYTES));
        assert!(address("a", &long_host).is_err());
        assert!(address("a", "h:80").is_ok());
    }

    #[test]
    fn quoted_values_are_cut_on_a_character_boundary() {
        assert_eq!(quote_prefix("abc"), "\"abc\"");
        let long = "é".repeat(100);
        let q = quote_prefix(&long);
        assert!(q.ends_with("…(200 bytes)"), "{q}");
        assert!(q.len() < QUOTED_PREFIX_BYTES + 24, "{q}");
    }

    #[test]
    fn etag_rules() {
        assert!(etag("etag", "").is_ok());
        assert!(etag("etag", "d41d8cd98f00b204e9800998ecf8427e").is_ok());
        assert!(etag("etag", "d41d8cd98f00b204e9800998ecf8427e-3").is_ok());
        assert!(etag("etag", "d41d8cd98f00b204e9800998ecf8427e-0").is_err());
        assert!(etag("etag", "xyz").is_err());
    }

    #[test]
    fn tags_follow_s3_rules() {
        let set = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let refused = |m: std::collections::BTreeMap<String, String>| match tags("tags", &m) {
            Err(OmError::Request { reason, field, .. }) => (reason, field),
            other => panic!("{m:?} accepted: {other:?}"),
        };
        let k128 = "k".repeat(128);
        let v256 = "é".repeat(256);
        for ok in [
            set(&[]),
            set(&[("project", "blue"), ("empty", "")]),
            set(&[(k128.as_str(), v256.as_str())]),
            set(&[("Straße 1", "日本語 +-=._:/@"), ("a\u{3000}b", "٣")]),
            set(&[("AWS:upper", "keys are case-sensitive")]),
        ] {
            assert!(tags("tags", &ok).is_ok(), "{ok:?}");
        }
        let pairs: Vec<(String, String)> = (0..11).map(|i| (format!("t{i}"), "v".into())).collect();
        let eleven = pairs.into_iter().collect();
        assert_eq!(refused(eleven), ("TOO_MANY_TAGS".into(), "tags".into()));
        let long_key = "k".repeat(129);
        for (m, field) in [
            (set(&[("", "v")]), "tags[\"\"]".to_string()),
            (
                set(&[(long_key.as_str(), "v")]),
                format!("tags[{}]", quote_prefix(&long_key)),
            ),
            (
                set(&[("k", "v".repeat(257).as_str())]),
                "tags[\"k\"]".into(),
            ),
            (set(&[("aws:created", "v")]), "tags[\"aws:created\"]".into()),
            (set(&[("k", "a\tb")]), "tags[\"k\"]".into()),
            (set(&[("k*", "v")]), "tags[\"k*\"]".into()),
            (set(&[("k", "<v>")]), "tags[\"k\"]".into()),
            (set(&[("k", "a,b")]), "tags[\"k\"]".into()),
        ] {
            assert_eq!(refused(m), ("INVALID_TAG".to_string(), field));
        }
    }
}
