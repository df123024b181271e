//! Paginated listings over `DeferredSeekIter`: one native seek per page, and
//! runs of keys under an already-emitted common prefix jumped with a seek once
//! they prove long (seed HBASE-29039's rule: step with `next` while the run is
//! short, seek past it at the N-th contiguous entry, so one key per prefix never
//! pays for a seek).
//!
//! The decisions (`common_prefix`, `RunTracker`) are plain functions over plain
//! data; `scan_page` is the only part that touches the iterator.

use crate::error::OmError;
use crate::store::iter::{DeferredSeekIter, IterStats};
use crate::store::keys;

mod cursor;
mod token;

pub use cursor::ScanCursor;
pub use token::{
    ContinuationToken, MAX_STATUS_RESUME_BYTES, MAX_TOKEN_CHARS, PAGE_OVERHEAD_BYTES, StatusFrame,
    StatusResume, check_token_len, field_len,
};

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
    /// Reads `keys` as the snapshot at this index shows it
    /// (`store::snapshot::SnapshotIter`); `None` reads `table` as it is.
    pub at: Option<u64>,
}

/// What a page iterates: a table, or `keys` as a snapshot shows it. Both
/// position with one seek (the snapshot's, one in each of its tables).
enum ScanIter<'a> {
    Table(DeferredSeekIter<'a>),
    Snapshot(Box<crate::store::snapshot::SnapshotIter<'a>>),
}

impl ScanIter<'_> {
    fn seek(&mut self, key: &[u8]) {
        match self {
            ScanIter::Table(it) => it.seek(key),
            ScanIter::Snapshot(it) => it.seek(key),
        }
    }

    fn current(&mut self) -> Option<(&[u8], &[u8])> {
        match self {
            ScanIter::Table(it) => it.current(),
            ScanIter::Snapshot(it) => it.current(),
        }
    }

    fn advance(&mut self) {
        match self {
            ScanIter::Table(it) => it.advance(),
            ScanIter::Snapshot(it) => it.advance(),
        }
    }

    fn status(&self) -> Result<(), OmError> {
        match self {
            ScanIter::Table(it) => it.status(),
            ScanIter::Snapshot(it) => it.status(),
        }
    }

    fn stats(&self) -> IterStats {
        match self {
            ScanIter::Table(it) => it.stats(),
            ScanIter::Snapshot(it) => it.stats(),
        }
    }
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
        at,
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
    let bound = (!lower.is_empty()).then(|| lower.clone());
    let mut it = match at {
        None => ScanIter::Table(DeferredSeekIter::new(db, table, bound, upper)?),
        Some(at) => ScanIter::Snapshot(Box::new(crate::store::snapshot::SnapshotIter::new(
            db, bound, upper, at,
        )?)),
    };
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

#[cfg(test)]
mod scan_tests;
#[cfg(test)]
mod tests;
