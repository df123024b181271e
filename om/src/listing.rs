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

#[derive(Debug, Clone)]
pub struct ScanPage {
    pub items: Vec<Item>,
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
}

/// Reads one page of `spec.table` under `parent` + `prefix`.
///
/// Cost: one native seek to position, then one `next` per listed entry, plus
/// for each rolled-up common prefix at most `seek_after - 1` nexts and one seek.
pub fn scan_page(db: &rocksdb::DB, spec: &ScanSpec<'_>) -> Result<ScanPage, OmError> {
    let ScanSpec {
        table,
        parent,
        prefix,
        delimiter,
        ref start,
        max,
        seek_after,
        terminator,
    } = *spec;
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
            None => it.seek(&abs(&keys::key_successor(name))),
        },
        Start::At(target) => it.seek(&abs(target)),
    }
    let mut items: Vec<Item> = Vec::new();
    let mut last_prefix: Option<Vec<u8>> = None;
    let mut run = RunTracker::new(seek_after);
    let mut resume = None;
    while let Some((k, v)) = it.current() {
        let name = &k[parent.len()..];
        match common_prefix(key_part(name, terminator), prefix, delimiter) {
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
                items.push(Item::CommonPrefix(cp.clone()));
                last_prefix = Some(cp);
                run.start();
                it.advance();
            }
            None => {
                if items.len() == max {
                    resume = Some(name.to_vec());
                    break;
                }
                items.push(Item::Entry {
                    name: name.to_vec(),
                    value: v.to_vec(),
                });
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
}
