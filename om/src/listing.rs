//! Paginated listings over `DeferredSeekIter`: one native seek per page, and
//! runs of keys under an already-emitted common prefix jumped with a seek once
//! they prove long (seed HBASE-29039's rule: step with `next` while the run is
//! short, seek past it at the N-th contiguous entry, so one key per prefix never
//! pays for a seek).
//!
//! The decisions (`common_prefix`, `RunTracker`) are plain functions over plain
//! data; `scan_page` is the only part that touches the iterator.

use prost::Message;

use crate::error::OmError;
use crate::store::iter::{DeferredSeekIter, IterStats};
use crate::store::keys;

/// Default N: seek past a common prefix at its third contiguous entry.
pub const DEFAULT_SEEK_AFTER: usize = 3;

/// The common prefix `name` rolls up into: `prefix` plus the rest of `name`
/// up to and including the first `delimiter` after `prefix`. `None` when the
/// delimiter is empty or does not occur there (the name is listed itself).
pub fn common_prefix<'a>(name: &'a [u8], prefix: &[u8], delimiter: &[u8]) -> Option<&'a [u8]> {
    if delimiter.is_empty() || !name.starts_with(prefix) {
        return None;
    }
    let rest = &name[prefix.len()..];
    rest.windows(delimiter.len())
        .position(|w| w == delimiter)
        .map(|i| &name[..prefix.len() + i + delimiter.len()])
}

/// The name part of a table entry: up to `terminator` when the table appends
/// a suffix to names (e.g. `key \0 upload-id`), else all of it.
fn key_part(name: &[u8], terminator: Option<u8>) -> &[u8] {
    match terminator.and_then(|t| name.iter().position(|&c| c == t)) {
        Some(end) => &name[..end],
        None => name,
    }
}

/// The common prefix a `start-after` / key marker rolls up into, if any: the
/// listing then starts after everything under it (S3 lists a common prefix
/// only when it sorts after the marker, and a prefix sorts before every name
/// under it). Only the name part of the marker counts: a suffix such as an
/// upload id never holds a delimiter.
pub fn marker_prefix<'a>(
    marker: &'a [u8],
    prefix: &[u8],
    delimiter: &[u8],
    terminator: Option<u8>,
) -> Option<&'a [u8]> {
    common_prefix(key_part(marker, terminator), prefix, delimiter)
}

/// What the scan does with an entry under the common prefix it just emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStep {
    /// Step over it with one `next`.
    Next,
    /// Seek past the whole common prefix.
    SeekPast,
}

/// Counts contiguous entries under the last emitted common prefix and decides
/// when stepping has gone on long enough to justify a seek.
#[derive(Debug, Clone)]
pub struct RunTracker {
    seek_after: usize,
    run: usize,
}

impl RunTracker {
    /// `seek_after` = N: the N-th contiguous entry of one prefix triggers a seek
    /// (N ≥ 2; `usize::MAX` never seeks).
    pub fn new(seek_after: usize) -> Self {
        RunTracker {
            seek_after: seek_after.max(2),
            run: 1,
        }
    }

    /// A new common prefix was emitted from its first entry.
    pub fn start(&mut self) {
        self.run = 1;
    }

    /// Another entry under the same prefix.
    pub fn step(&mut self) -> RunStep {
        self.run += 1;
        if self.run >= self.seek_after {
            RunStep::SeekPast
        } else {
            RunStep::Next
        }
    }
}

/// One item of a page: a key (name relative to the parent, raw value) or a
/// rolled-up common prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Entry { name: Vec<u8>, value: Vec<u8> },
    CommonPrefix(Vec<u8>),
}

/// One page of a scan: the items taken (as `take` converted them), and where
/// the next page starts.
#[derive(Debug, Clone)]
pub struct ScanPage<T = Item> {
    pub items: Vec<T>,
    /// Where the next page starts (inclusive seek target relative to the
    /// parent), when the listing is truncated.
    pub resume: Option<Vec<u8>>,
    pub stats: IterStats,
}

/// Where a page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// From the first name `>= prefix`.
    Beginning,
    /// Strictly after this name (S3 `start-after` / marker).
    After(Vec<u8>),
    /// At this seek target, from a continuation token.
    At(Vec<u8>),
}

/// What one page reads.
#[derive(Debug, Clone)]
pub struct ScanSpec<'a> {
    pub table: &'static str,
    /// Fixed key prefix of the listing's scope (e.g. `volume/bucket/`); names
    /// are relative to it.
    pub parent: &'a [u8],
    pub prefix: &'a [u8],
    /// Empty for no roll-up.
    pub delimiter: &'a [u8],
    pub start: Start,
    /// Items (entries plus common prefixes) per page.
    pub max: usize,
    /// N of the seek-past rule; `usize::MAX` always steps.
    pub seek_after: usize,
    /// Where the name part of an entry ends (for tables whose entries add a
    /// suffix to a key name, e.g. `key \0 upload-id`): the delimiter is looked
    /// for only before it.
    pub terminator: Option<u8>,
    /// Set to list only the current entries of a versioned table (`keys` of
    /// a versioned bucket), whose names carry `\0` and a version after a
    /// key's name for its noncurrent versions.
    pub current_only: Option<CurrentOnly>,
}

/// How a listing of current versions treats a key's history: noncurrent
/// entries (a `\0` after the name) and hidden current entries (delete
/// markers) are never listed and never make a common prefix appear. A key's
/// run of unlisted entries is stepped with `next` while short and sought
/// past (`key \x01`) at its N-th contiguous entry, the rule common prefixes
/// follow, so a key with one version pays no seek and one with 100,000
/// pays N operations.
#[derive(Debug, Clone, Copy)]
pub struct CurrentOnly {
    /// Whether a current entry is hidden, from its stored value.
    pub hidden: fn(&[u8]) -> bool,
}

/// Reads one page of `spec.table` under `parent` + `prefix`, every item as it
/// is stored.
pub fn scan_page(db: &rocksdb::DB, spec: &ScanSpec<'_>) -> Result<ScanPage, OmError> {
    scan_page_within(db, spec, usize::MAX, |item| Ok((item, 0)))
}

/// Whether an item of `bytes` still fits a page that holds `used` bytes in
/// `taken` items: the first item always does, so a page always makes
/// progress, however large one item is.
pub fn fits(taken: usize, used: usize, bytes: usize, max_bytes: usize) -> bool {
    taken == 0 || used.saturating_add(bytes) <= max_bytes
}

/// Reads one page of `spec.table` under `parent` + `prefix`, converting each
/// item with `take`, which also says how many bytes the item adds to the
/// response. The page stops at `spec.max` items or before its items would
/// pass `max_bytes`, whichever comes first, resuming exactly at the item left
/// out (its conversion is dropped).
///
/// Cost: one native seek to position, then one `next` per listed entry, plus
/// for each rolled-up common prefix at most `seek_after - 1` nexts and one seek.
pub fn scan_page_within<T>(
    db: &rocksdb::DB,
    spec: &ScanSpec<'_>,
    max_bytes: usize,
    mut take: impl FnMut(Item) -> Result<(T, usize), OmError>,
) -> Result<ScanPage<T>, OmError> {
    let ScanSpec {
        table,
        parent,
        prefix,
        delimiter,
        ref start,
        max,
        seek_after,
        terminator,
        current_only,
    } = *spec;
    // A versioned table's names end at the NUL before a version.
    let terminator = if current_only.is_some() {
        Some(0)
    } else {
        terminator
    };
    let mut lower = parent.to_vec();
    lower.extend_from_slice(prefix);
    let upper = keys::prefix_end(&lower);
    let mut it =
        DeferredSeekIter::new(db, table, (!lower.is_empty()).then(|| lower.clone()), upper)?;
    let abs = |rel: &[u8]| {
        let mut k = parent.to_vec();
        k.extend_from_slice(rel);
        k
    };
    match start {
        Start::Beginning => it.seek(&lower),
        // S3 lists a common prefix only when it sorts after the marker. A
        // marker that rolls up into a common prefix (the prefix itself, as S3
        // returns for a next marker, or any name under it) sorts after that
        // prefix, so the page starts past everything under it: still one seek.
        Start::After(name) => match marker_prefix(name, prefix, delimiter, terminator) {
            Some(cp) => match keys::prefix_end(&abs(cp)) {
                Some(end) => it.seek(&end),
                None => it.seek(&abs(&keys::key_successor(name))),
            },
            // Past the name and, listing current versions, its history.
            None if current_only.is_some() => {
                match keys::prefix_end(&abs(&keys::key_successor(name))) {
                    Some(end) => it.seek(&end),
                    None => it.seek(&abs(&keys::key_successor(name))),
                }
            }
            None => it.seek(&abs(&keys::key_successor(name))),
        },
        Start::At(target) => it.seek(&abs(target)),
    }
    // The key whose run of entries the scan is in (its current entry and
    // history, or a hidden current entry and its history), kept in one buffer
    // so a listing of single-version keys allocates nothing per key.
    let mut versions_of: Vec<u8> = Vec::new();
    let mut in_run = false;
    let mut versions_run = RunTracker::new(seek_after);
    let mut items: Vec<T> = Vec::new();
    let mut used = 0usize;
    let mut last_prefix: Option<Vec<u8>> = None;
    let mut run = RunTracker::new(seek_after);
    let mut resume = None;
    while let Some((k, v)) = it.current() {
        let name = &k[parent.len()..];
        let kp = key_part(name, terminator);
        let cp = common_prefix(kp, prefix, delimiter);
        if let Some(cur) = current_only
            && cp.is_none_or(|cp| last_prefix.as_deref() != Some(cp))
        {
            let unlisted = kp.len() < name.len() || (cur.hidden)(v);
            if unlisted {
                let step = if in_run && versions_of == kp {
                    versions_run.step()
                } else {
                    versions_of.clear();
                    versions_of.extend_from_slice(kp);
                    in_run = true;
                    versions_run.start();
                    RunStep::Next
                };
                match step {
                    RunStep::Next => it.advance(),
                    RunStep::SeekPast => {
                        let Some(end) = keys::prefix_end(&abs(&keys::key_successor(kp))) else {
                            break;
                        };
                        in_run = false;
                        it.seek(&end);
                    }
                }
                continue;
            }
            // A listed current entry: its history, if any, follows it.
            versions_of.clear();
            versions_of.extend_from_slice(kp);
            in_run = true;
            versions_run.start();
        }
        match cp {
            Some(cp) if last_prefix.as_deref() == Some(cp) => match run.step() {
                RunStep::Next => it.advance(),
                RunStep::SeekPast => {
                    let Some(end) = keys::prefix_end(&abs(cp)) else {
                        break;
                    };
                    it.seek(&end);
                }
            },
            Some(cp) => {
                if items.len() == max {
                    resume = Some(name.to_vec());
                    break;
                }
                let cp = cp.to_vec();
                let (item, bytes) = take(Item::CommonPrefix(cp.clone()))?;
                if !fits(items.len(), used, bytes, max_bytes) {
                    resume = Some(name.to_vec());
                    break;
                }
                used += bytes;
                items.push(item);
                last_prefix = Some(cp);
                run.start();
                it.advance();
            }
            None => {
                if items.len() == max {
                    resume = Some(name.to_vec());
                    break;
                }
                let (item, bytes) = take(Item::Entry {
                    name: name.to_vec(),
                    value: v.to_vec(),
                })?;
                if !fits(items.len(), used, bytes, max_bytes) {
                    resume = Some(name.to_vec());
                    break;
                }
                used += bytes;
                items.push(item);
                last_prefix = None;
                it.advance();
            }
        }
    }
    it.status()?;
    Ok(ScanPage {
        items,
        resume,
        stats: it.stats(),
    })
}

/// An opaque, validated continuation token. It names the listing it belongs
/// to (table, volume, bucket and its object id, prefix, delimiter) and where to
/// resume; a digest over all of it detects tampering, and a token presented to
/// another bucket or listing is refused.
#[derive(Clone, PartialEq, Message)]
pub struct ContinuationToken {
    #[prost(uint32, tag = "1")]
    pub version: u32,
    #[prost(string, tag = "2")]
    pub listing: String,
    #[prost(string, tag = "3")]
    pub volume: String,
    #[prost(string, tag = "4")]
    pub bucket: String,
    #[prost(uint64, tag = "5")]
    pub bucket_object_id: u64,
    #[prost(bytes = "vec", tag = "6")]
    pub prefix: Vec<u8>,
    #[prost(bytes = "vec", tag = "7")]
    pub delimiter: Vec<u8>,
    #[prost(bytes = "vec", tag = "8")]
    pub resume: Vec<u8>,
}

impl ContinuationToken {
    fn digest(body: &[u8]) -> [u8; 16] {
        use md5::Digest;
        let mut h = md5::Md5::new();
        h.update(b"om-continuation-v1");
        h.update(body);
        h.finalize().into()
    }

    /// Hex of the encoded token followed by its digest.
    pub fn encode_token(&self) -> String {
        let mut body = self.encode_to_vec();
        let d = Self::digest(&body);
        body.extend_from_slice(&d);
        hex::encode(body)
    }

    /// Decodes and checks a token against the listing it is presented to.
    pub fn decode_token(
        token: &str,
        expect: &ContinuationToken,
    ) -> Result<ContinuationToken, OmError> {
        let bad = |why: &str| {
            OmError::invalid(
                "INVALID_CONTINUATION_TOKEN",
                "continuation_token",
                format!("continuation token {why}"),
            )
        };
        let raw = hex::decode(token).map_err(|_| bad("is not a token om issued"))?;
        if raw.len() < 16 {
            return Err(bad("is too short"));
        }
        let (body, d) = raw.split_at(raw.len() - 16);
        if Self::digest(body) != d {
            return Err(bad("was altered"));
        }
        let t = ContinuationToken::decode(body).map_err(|_| bad("is corrupt"))?;
        if t.version != 1 {
            return Err(bad("has an unknown version"));
        }
        if t.listing != expect.listing
            || t.volume != expect.volume
            || t.bucket != expect.bucket
            || t.bucket_object_id != expect.bucket_object_id
        {
            return Err(bad("belongs to another listing or bucket"));
        }
        if t.prefix != expect.prefix || t.delimiter != expect.delimiter {
            return Err(bad("was issued for another prefix or delimiter"));
        }
        Ok(t)
    }
}

/// Bytes of a protobuf varint holding `v`.
const fn varint_len(v: u64) -> usize {
    let mut n = 1;
    let mut v = v >> 7;
    while v > 0 {
        n += 1;
        v >>= 7;
    }
    n
}

/// Bytes a length-delimited field (string, bytes or message) with a body of
/// `len` bytes takes in its message, for field numbers below 16 (one-byte
/// key), as every field of om's tokens and of the repeated items of its
/// listing responses has.
pub const fn field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// Longest listing name a token carries (`open_files`).
const MAX_LISTING_NAME: usize = 16;
/// Longest volume or bucket name (`validate::resource_name`).
const MAX_RESOURCE_NAME: usize = 63;
/// Longest delimiter (`validate::delimiter`).
const MAX_DELIMITER: usize = 16;
/// Bytes of a token's fixed-size and small fields beyond its strings.
const TOKEN_SCALARS: usize = (1 + 1) + (1 + 10); // version, bucket object id

/// Most bytes one `StatusFrame` adds to a `StatusResume` beyond its name: the
/// frame's key and length, the directory id (up to 10 varint bytes) and the
/// name's key and length.
const STATUS_FRAME_OVERHEAD: usize = 1
    + varint_len((1 + 10 + 1 + 2 + crate::validate::MAX_KEY_BYTES) as u64)
    + (1 + 10)
    + (1 + varint_len(crate::validate::MAX_KEY_BYTES as u64));

/// Largest ListStatus resume position om issues for a tree within the path
/// limits: one frame for the listed directory and one per directory level
/// below it (at most `fs::MAX_PATH_DEPTH + 1` frames), whose names spell one
/// path below the listed directory (at most `validate::MAX_KEY_BYTES`).
/// Linear in depth: frames hold names, not paths.
pub const MAX_STATUS_RESUME_BYTES: usize =
    (crate::fs::MAX_PATH_DEPTH + 1) * STATUS_FRAME_OVERHEAD + crate::validate::MAX_KEY_BYTES;

/// Most bytes a ListStatus token's prefix (the listed path) and resume
/// fields take together: the listed path and the frames' names spell one
/// path, so they share one `MAX_KEY_BYTES`.
const STATUS_POSITION: usize = (1 + varint_len(crate::validate::MAX_KEY_BYTES as u64))
    + (1 + varint_len(MAX_STATUS_RESUME_BYTES as u64))
    + (crate::fs::MAX_PATH_DEPTH + 1) * STATUS_FRAME_OVERHEAD
    + crate::validate::MAX_KEY_BYTES;

/// Most bytes a key-order token's prefix and resume fields take: a prefix
/// and a key name with an 8-byte suffix (open keys: `key \0 session id`).
const KEY_POSITION: usize =
    field_len(crate::validate::MAX_KEY_BYTES) + field_len(crate::validate::MAX_KEY_BYTES + 9);

/// Longest continuation token om issues, in characters, derived from the
/// request limits: hex of the encoded `ContinuationToken` (version, listing
/// name, volume, bucket, object id, delimiter, and the larger of the
/// ListStatus and key-order prefix and resume fields) and its 16-byte digest.
/// The gRPC edge refuses longer tokens before decoding them.
pub const MAX_TOKEN_CHARS: usize = 2
    * (TOKEN_SCALARS
        + field_len(MAX_LISTING_NAME)
        + 2 * field_len(MAX_RESOURCE_NAME)
        + field_len(MAX_DELIMITER)
        + if STATUS_POSITION > KEY_POSITION {
            STATUS_POSITION
        } else {
            KEY_POSITION
        }
        + 16);

/// Room a listing response keeps for everything but its items: the
/// continuation token, one marker (`next_start_after`, `next_key_marker`), and
/// flags, totals, scan statistics and an upload-id marker (under 128 bytes).
/// A page's items take at most the response byte budget minus this.
pub const PAGE_OVERHEAD_BYTES: usize =
    field_len(MAX_TOKEN_CHARS) + field_len(crate::validate::MAX_KEY_BYTES) + 128;

/// Refuses a continuation token longer than any om issues, before it is
/// decoded.
pub fn check_token_len(token: &str) -> Result<(), OmError> {
    if token.len() > MAX_TOKEN_CHARS {
        return Err(OmError::invalid(
            "INVALID_CONTINUATION_TOKEN",
            "continuation_token",
            format!(
                "continuation token is too long ({} characters; om issues at most {MAX_TOKEN_CHARS})",
                token.len()
            ),
        ));
    }
    Ok(())
}

/// One directory of a recursive ListStatus walk as its token stores it: the
/// directory's object id and the last name returned from it, which for every
/// frame but the innermost is the child directory being walked. Paths are
/// not stored (a frame's path is the names of the frames above it), so a
/// token grows with depth times the longest name, not with depth squared.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct StatusFrame {
    #[prost(uint64, tag = "1")]
    pub dir: u64,
    #[prost(string, optional, tag = "2")]
    pub after: Option<String>,
}

/// The resume position of a ListStatus token: its frames, outermost first.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct StatusResume {
    #[prost(message, repeated, tag = "1")]
    pub frames: Vec<StatusFrame>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefix_rules() {
        assert_eq!(common_prefix(b"a/b/c", b"", b"/"), Some(&b"a/"[..]));
        assert_eq!(common_prefix(b"a/b/c", b"a/", b"/"), Some(&b"a/b/"[..]));
        assert_eq!(common_prefix(b"a/b", b"a/", b"/"), None);
        assert_eq!(common_prefix(b"a/b", b"a/", b""), None);
        assert_eq!(common_prefix(b"x--y--z", b"", b"--"), Some(&b"x--"[..]));
        // The delimiter right at the prefix boundary still rolls up.
        assert_eq!(common_prefix(b"a//", b"a/", b"/"), Some(&b"a//"[..]));
    }

    #[test]
    fn markers_inside_a_common_prefix_roll_up() {
        // S3: start-after a/b with delimiter / lists nothing under a/.
        assert_eq!(marker_prefix(b"a/b", b"", b"/", None), Some(&b"a/"[..]));
        assert_eq!(marker_prefix(b"a/", b"", b"/", None), Some(&b"a/"[..]));
        assert_eq!(marker_prefix(b"c-1", b"", b"-", None), Some(&b"c-"[..]));
        assert_eq!(
            marker_prefix(b"p/a/b", b"p/", b"/", None),
            Some(&b"p/a/"[..])
        );
        assert_eq!(marker_prefix(b"a", b"", b"/", None), None);
        assert_eq!(marker_prefix(b"a/b", b"", b"", None), None);
        // A marker outside the prefix is an ordinary marker.
        assert_eq!(marker_prefix(b"b/x", b"a/", b"/", None), None);
        // Bytes after the terminator (an upload id) are not searched.
        let mut upload = b"ab\0".to_vec();
        upload.extend_from_slice(&0x2f2f_u64.to_be_bytes());
        assert_eq!(marker_prefix(&upload, b"", b"/", Some(0)), None);
    }

    #[test]
    fn run_tracker_seeks_at_the_nth_entry() {
        let mut r = RunTracker::new(3);
        r.start();
        assert_eq!(r.step(), RunStep::Next);
        assert_eq!(r.step(), RunStep::SeekPast);
        r.start();
        assert_eq!(r.step(), RunStep::Next);
        let mut never = RunTracker::new(usize::MAX);
        never.start();
        for _ in 0..1000 {
            assert_eq!(never.step(), RunStep::Next);
        }
    }

    #[test]
    fn tokens_round_trip_and_refuse_tampering() {
        let t = ContinuationToken {
            version: 1,
            listing: "keys".into(),
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            bucket_object_id: 7,
            prefix: b"a/".to_vec(),
            delimiter: b"/".to_vec(),
            resume: b"a/b0".to_vec(),
        };
        let s = t.encode_token();
        assert_eq!(ContinuationToken::decode_token(&s, &t).unwrap(), t);
        let mut chars: Vec<char> = s.chars().collect();
        chars[4] = if chars[4] == '0' { '1' } else { '0' };
        let tampered: String = chars.into_iter().collect();
        assert!(ContinuationToken::decode_token(&tampered, &t).is_err());
        let other = ContinuationToken {
            bucket: "bkt2".into(),
            ..t.clone()
        };
        assert!(ContinuationToken::decode_token(&s, &other).is_err());
        let recreated = ContinuationToken {
            bucket_object_id: 8,
            ..t.clone()
        };
        assert!(ContinuationToken::decode_token(&s, &recreated).is_err());
        assert!(ContinuationToken::decode_token("zz", &t).is_err());
    }

    #[test]
    fn the_first_item_always_fits() {
        assert!(fits(0, 0, usize::MAX, 10));
        assert!(fits(1, 4, 6, 10));
        assert!(!fits(1, 4, 7, 10));
        assert!(!fits(3, usize::MAX - 1, 2, usize::MAX - 1));
    }

    #[test]
    fn field_len_matches_prost() {
        // Singular fields omit empty values; elements of repeated ones (what
        // field_len sizes) never do, so only non-empty lengths compare here.
        for len in [1usize, 127, 128, 16_383, 16_384, 3 << 20] {
            let t = ContinuationToken {
                listing: "x".repeat(len),
                ..Default::default()
            };
            assert_eq!(field_len(len), t.encoded_len(), "{len}");
        }
    }

    /// The largest tokens om can issue for a tree within the path limits
    /// (the longest names, a frame per level of the deepest path, the
    /// largest ids) and for a key-order listing (the longest prefix and
    /// resume key) fit `MAX_TOKEN_CHARS`, which is not loose.
    #[test]
    fn the_largest_tokens_fit_the_derived_limit() {
        let depth = crate::fs::MAX_PATH_DEPTH;
        let max_key = crate::validate::MAX_KEY_BYTES;
        let token = |listing: &str, prefix: usize, resume: Vec<u8>| ContinuationToken {
            version: 1,
            listing: listing.into(),
            volume: "v".repeat(63),
            bucket: "b".repeat(63),
            bucket_object_id: u64::MAX,
            prefix: vec![b'p'; prefix],
            delimiter: vec![b'd'; 16],
            resume,
        };
        let mut longest = 0;
        // A listed path of `listed` bytes and frames whose names, with it,
        // spell one path of `max_key` bytes: the longest single name (the
        // largest length prefixes) at the innermost frame.
        for listed in [0, 10, max_key / 2, max_key - 24] {
            // `P/n/n/…/n/NAME`: `levels` one-byte names, then the longest
            // NAME that keeps the path at `max_key` bytes.
            let sep = usize::from(listed > 0);
            let levels = depth.min((max_key - listed - sep - 1) / 2);
            let mut frames: Vec<StatusFrame> = (0..=levels)
                .map(|_| StatusFrame {
                    dir: u64::MAX,
                    after: Some("n".into()),
                })
                .collect();
            let name = max_key - listed - sep - 2 * levels;
            assert!(name >= 1);
            frames[levels].after = Some("n".repeat(name));
            let resume = StatusResume { frames }.encode_to_vec();
            assert!(resume.len() <= MAX_STATUS_RESUME_BYTES, "{}", resume.len());
            let chars = token("status", listed, resume).encode_token().len();
            assert!(chars <= MAX_TOKEN_CHARS, "{chars} > {MAX_TOKEN_CHARS}");
            longest = longest.max(chars);
        }
        let keys = token("open_files", max_key, vec![b'k'; max_key + 9]);
        let chars = keys.encode_token().len();
        assert!(chars <= MAX_TOKEN_CHARS, "{chars} > {MAX_TOKEN_CHARS}");
        longest = longest.max(chars);
        // Within 8 bytes per frame of the bound (the frames' length
        // prefixes and the listing name's slack).
        assert!(
            longest + 2 * 8 * (depth + 1) >= MAX_TOKEN_CHARS,
            "{longest} is far below {MAX_TOKEN_CHARS}"
        );
        assert!(check_token_len(&"0".repeat(MAX_TOKEN_CHARS)).is_ok());
        assert!(check_token_len(&"0".repeat(MAX_TOKEN_CHARS + 1)).is_err());
    }
}

/// Where a background scan (the lifecycle scanner, purges) stopped: the table
/// and the next key to visit. Saved in replicated state between runs, it lets
/// a scan resume after suspension, restart or leader change with one seek.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct ScanCursor {
    #[prost(string, tag = "1")]
    pub table: String,
    /// The next key to visit (inclusive).
    #[prost(bytes = "vec", tag = "2")]
    pub next: Vec<u8>,
}

impl ScanCursor {
    /// Positions `it` at the cursor: exactly one native seek, however many
    /// deletions lie between the table's start and the cursor.
    pub fn resume(&self, it: &mut DeferredSeekIter<'_>) {
        it.seek(&self.next);
    }

    /// The cursor that continues after `key`.
    pub fn after(table: &str, key: &[u8]) -> ScanCursor {
        ScanCursor {
            table: table.to_string(),
            next: keys::key_successor(key),
        }
    }
}

#[cfg(test)]
mod cursor_tests {
    use super::*;
    use crate::store::keys::{KEYS_CF, TABLE_CFS};

    fn scratch_db() -> (tempfile::TempDir, rocksdb::DB) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        let db = rocksdb::DB::open_cf(&o, dir.path(), TABLE_CFS).unwrap();
        (dir, db)
    }

    /// Pages stop before their items pass the byte budget, a larger item
    /// goes alone, each page is one seek, and the pages together are the
    /// whole table in order.
    #[test]
    fn pages_stop_by_bytes_and_resume_at_the_first_item_left_out() {
        let (_dir, db) = scratch_db();
        let cf = db.cf_handle(KEYS_CF).unwrap();
        let sizes = [10usize, 30, 30, 5, 100, 1, 1, 1, 60, 40];
        for (i, n) in sizes.iter().enumerate() {
            db.put_cf(cf, format!("k{i}"), vec![b'x'; *n]).unwrap();
        }
        let budget = 64;
        let mut start = Start::Beginning;
        let mut pages: Vec<Vec<usize>> = Vec::new();
        loop {
            let spec = ScanSpec {
                table: KEYS_CF,
                parent: b"",
                prefix: b"",
                delimiter: b"",
                start: start.clone(),
                max: 1000,
                seek_after: usize::MAX,
                terminator: None,
                current_only: None,
            };
            let page = scan_page_within(&db, &spec, budget, |item| match item {
                Item::Entry { value, .. } => Ok((value.len(), value.len())),
                Item::CommonPrefix(_) => unreachable!(),
            })
            .unwrap();
            assert_eq!(page.stats.seeks, 1);
            let total: usize = page.items.iter().sum();
            assert!(total <= budget || page.items.len() == 1, "{:?}", page.items);
            pages.push(page.items);
            match page.resume {
                Some(r) => start = Start::At(r),
                None => break,
            }
        }
        assert_eq!(
            pages,
            vec![
                vec![10, 30],
                vec![30, 5],
                vec![100],
                vec![1, 1, 1, 60],
                vec![40]
            ]
        );
    }

    #[test]
    fn resuming_a_scan_is_one_seek_past_any_deletions() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        o.set_disable_auto_compactions(true);
        let db = rocksdb::DB::open_cf(&o, dir.path(), TABLE_CFS).unwrap();
        let cf = db.cf_handle(KEYS_CF).unwrap();
        for i in 0..3000 {
            db.put_cf(cf, format!("k{i:05}"), b"v").unwrap();
        }
        // The scan visited k00000..k00999 and saved its cursor.
        let mut it = DeferredSeekIter::new(&db, KEYS_CF, None, None).unwrap();
        it.seek_to_first();
        let mut last = Vec::new();
        for _ in 0..1000 {
            last = it.current().unwrap().0.to_vec();
            it.advance();
        }
        let cursor = ScanCursor::after(KEYS_CF, &last);
        let saved = cursor.encode_to_vec();
        // Everything before the cursor is deleted meanwhile (a purge).
        for i in 0..2000 {
            db.delete_cf(cf, format!("k{i:05}")).unwrap();
        }
        let cursor = ScanCursor::decode(saved.as_slice()).unwrap();
        let mut it = DeferredSeekIter::new(&db, KEYS_CF, None, None).unwrap();
        cursor.resume(&mut it);
        assert_eq!(it.current().unwrap().0, b"k02000");
        assert_eq!(it.stats().seeks, 1);
        assert_eq!(
            it.stats().tombstones,
            1000,
            "only the deletions after the cursor"
        );
    }

    /// A versioned table: `name` current entries (value "L" listed, "D" a
    /// hidden delete marker) followed by `name \0 !version` history.
    fn versioned_db(keys: &[(&str, bool, usize)]) -> (tempfile::TempDir, rocksdb::DB) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        let db = rocksdb::DB::open_cf(&o, dir.path(), TABLE_CFS).unwrap();
        let cf = db.cf_handle(KEYS_CF).unwrap();
        for (name, live, history) in keys {
            db.put_cf(cf, name, if *live { b"L" } else { b"D" })
                .unwrap();
            for v in 0..*history as u64 {
                let mut k = name.as_bytes().to_vec();
                k.push(0);
                k.extend_from_slice(&(!v).to_be_bytes());
                db.put_cf(cf, k, b"L").unwrap();
            }
        }
        (dir, db)
    }

    fn hidden(v: &[u8]) -> bool {
        v == b"D"
    }

    /// Every page of a current-versions listing, with each page's stats.
    fn list_current(
        db: &rocksdb::DB,
        prefix: &str,
        delimiter: &str,
        max: usize,
        start: Start,
    ) -> (Vec<Item>, Vec<IterStats>) {
        let mut start = start;
        let (mut items, mut stats) = (Vec::new(), Vec::new());
        loop {
            let page = scan_page(
                db,
                &ScanSpec {
                    table: KEYS_CF,
                    parent: b"",
                    prefix: prefix.as_bytes(),
                    delimiter: delimiter.as_bytes(),
                    start: start.clone(),
                    max,
                    seek_after: 3,
                    terminator: None,
                    current_only: Some(CurrentOnly { hidden }),
                },
            )
            .unwrap();
            items.extend(page.items);
            stats.push(page.stats);
            match page.resume {
                Some(r) => start = Start::At(r),
                None => return (items, stats),
            }
        }
    }

    #[test]
    fn current_versions_listing_equals_a_naive_model_and_seeks_past_history() {
        // A small deterministic generator: names over "ab/", each with a
        // random history length and a live or hidden current entry.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..40 {
            let mut names = std::collections::BTreeMap::new();
            for _ in 0..(5 + next(40)) {
                let len = 1 + next(5);
                let name: String = (0..len)
                    .map(|_| ["a", "b", "/"][next(3) as usize])
                    .collect();
                let history = [0, 0, 1, 2, 5, 40][next(6) as usize];
                names.insert(name, (next(4) != 0, history));
            }
            let keys: Vec<(&str, bool, usize)> = names
                .iter()
                .map(|(n, (l, h))| (n.as_str(), *l, *h))
                .collect();
            let (_dir, db) = versioned_db(&keys);
            for (prefix, delimiter) in [("", ""), ("", "/"), ("a", "/"), ("a/", ""), ("b", "b")] {
                let mut want: Vec<Item> = Vec::new();
                for (name, live, _) in &keys {
                    if !live || !name.starts_with(prefix) {
                        continue;
                    }
                    let item = match common_prefix(
                        name.as_bytes(),
                        prefix.as_bytes(),
                        delimiter.as_bytes(),
                    ) {
                        Some(cp) => Item::CommonPrefix(cp.to_vec()),
                        None => Item::Entry {
                            name: name.as_bytes().to_vec(),
                            value: b"L".to_vec(),
                        },
                    };
                    if want.last() != Some(&item) {
                        want.push(item);
                    }
                }
                for max in [1, 2, 7, 1000] {
                    let (got, stats) = list_current(&db, prefix, delimiter, max, Start::Beginning);
                    assert_eq!(
                        got, want,
                        "round {round} prefix {prefix:?} delimiter {delimiter:?} max {max}"
                    );
                    for s in &stats[1..] {
                        assert!(s.seeks >= 1);
                    }
                }
                // Start-after every listed key: the rest of the listing.
                if delimiter.is_empty() {
                    for (i, item) in want.iter().enumerate() {
                        let Item::Entry { name, .. } = item else {
                            unreachable!()
                        };
                        let (got, _) =
                            list_current(&db, prefix, "", 1000, Start::After(name.clone()));
                        assert_eq!(got, want[i + 1..], "after {name:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_long_history_costs_n_operations_and_single_versions_no_seek() {
        // 100 keys with one version each: one seek for the whole page.
        let single: Vec<String> = (0..100).map(|i| format!("k{i:03}")).collect();
        let keys: Vec<(&str, bool, usize)> = single.iter().map(|n| (n.as_str(), true, 0)).collect();
        let (_d, db) = versioned_db(&keys);
        let (items, stats) = list_current(&db, "", "", 1000, Start::Beginning);
        assert_eq!(items.len(), 100);
        assert_eq!((stats[0].seeks, stats[0].nexts), (1, 100));
        // 20 keys with 1,000 noncurrent versions each, half behind a delete
        // marker: N = 3 operations per key (two nexts, one seek).
        let long: Vec<String> = (0..20).map(|i| format!("k{i:03}")).collect();
        let keys: Vec<(&str, bool, usize)> = long
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i % 2 == 0, 1000))
            .collect();
        let (_d, db) = versioned_db(&keys);
        let (items, stats) = list_current(&db, "", "", 1000, Start::Beginning);
        assert_eq!(items.len(), 10);
        assert_eq!(stats[0].seeks, 1 + 20);
        assert_eq!(stats[0].nexts, 20 * 2);
        // Pages of 3: each resumes at a listed key with one seek, and seeks
        // past each history it meets, no more.
        let (items, stats) = list_current(&db, "", "", 3, Start::Beginning);
        assert_eq!(items.len(), 10);
        let seeks: u64 = stats.iter().map(|s| s.seeks).sum();
        assert_eq!(seeks, stats.len() as u64 + 20);
        let (after, stats) = list_current(&db, "", "", 1000, Start::After(b"k000".to_vec()));
        assert_eq!(after.len(), 9);
        assert_eq!(stats[0].seeks, 1 + 19);
    }
}
