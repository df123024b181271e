//! Reading a bucket as a snapshot shows it (see `apply::snapshots`): the
//! `keys` entries written below the snapshot's index `at`, merged with the
//! retained copies in `snapshot_keys` written below `at` and retired above
//! it. A key has at most one entry visible at `at` in the two tables
//! together (an entry's successor is written where it was retired), so the
//! merge never has to choose.

use om_proto::store::KeyRecord;
use prost::Message;
use rocksdb::DB;

use super::iter::{DeferredSeekIter, IterStats};
use super::keys;
use super::table::{self, KeyTable, RetainedKeyTable};
use crate::error::OmError;

/// The `written_index` of an encoded `KeyRecord`.
fn written_index(v: &[u8]) -> Result<u64, OmError> {
    Ok(KeyRecord::decode(v)
        .map_err(|e| OmError::Internal(format!("corrupt keys record: {e}")))?
        .written_index)
}

/// The `keys` entry `table_key` as the snapshot at `at` shows it: the live
/// entry if written below `at`, else the retained copy retired first above
/// `at`, if it was written below it. One point read and one seek.
pub fn key_at(db: &DB, table_key: &[u8], at: u64) -> Result<Option<KeyRecord>, OmError> {
    if let Some(rec) = table::get::<KeyTable>(db, table_key)?
        && rec.written_index < at
    {
        return Ok(Some(rec));
    }
    let start = keys::retained_key(table_key, at.saturating_add(1));
    let mut it = DeferredSeekIter::new(
        db,
        keys::SNAPSHOT_KEYS_CF,
        Some(start.clone()),
        keys::prefix_end(table_key),
    )?;
    it.seek(&start);
    let found = match it.current() {
        Some((k, v)) => match keys::split_retained(k) {
            Some((name, _)) if name == table_key => {
                let rec = table::decode::<RetainedKeyTable>(v)?;
                (rec.written_index < at).then_some(rec)
            }
            _ => None,
        },
        None => None,
    };
    it.status()?;
    Ok(found)
}

/// An iterator over `[lower, upper)` of `keys` as the snapshot at `at` shows
/// it, with `DeferredSeekIter`'s interface: one seek positions both tables,
/// and each `current` yields `keys` keys and records as they were.
pub struct SnapshotIter<'a> {
    live: DeferredSeekIter<'a>,
    kept: DeferredSeekIter<'a>,
    at: u64,
    /// The last seek target: a retained copy of a name below it (a name the
    /// target extends, as `key \0` extends `key`) sorts after it and is
    /// skipped.
    target: Vec<u8>,
    settled: bool,
    err: Option<OmError>,
}

impl<'a> SnapshotIter<'a> {
    pub fn new(
        db: &'a DB,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
        at: u64,
    ) -> Result<Self, OmError> {
        Ok(SnapshotIter {
            live: DeferredSeekIter::new(db, keys::KEYS_CF, lower.clone(), upper.clone())?,
            kept: DeferredSeekIter::new(db, keys::SNAPSHOT_KEYS_CF, lower, upper)?,
            at,
            target: Vec::new(),
            settled: false,
            err: None,
        })
    }

    pub fn seek(&mut self, key: &[u8]) {
        self.live.seek(key);
        self.kept.seek(key);
        self.target = key.to_vec();
        self.settled = false;
    }

    /// Steps both tables past what the snapshot does not show.
    fn settle(&mut self) {
        if self.settled || self.err.is_some() {
            return;
        }
        self.settled = true;
        while let Some((_, v)) = self.live.current() {
            match written_index(v) {
                Ok(w) if w < self.at => break,
                Ok(_) => self.live.advance(),
                Err(e) => {
                    self.err = Some(e);
                    return;
                }
            }
        }
        while let Some((k, v)) = self.kept.current() {
            let Some((name, retired)) = keys::split_retained(k) else {
                self.err = Some(OmError::Internal("corrupt snapshot_keys key".into()));
                return;
            };
            if name < self.target.as_slice() || retired <= self.at {
                self.kept.advance();
                continue;
            }
            match written_index(v) {
                Ok(w) if w < self.at => break,
                Ok(_) => self.kept.advance(),
                Err(e) => {
                    self.err = Some(e);
                    return;
                }
            }
        }
    }

    pub fn current(&mut self) -> Option<(&[u8], &[u8])> {
        self.settle();
        if self.err.is_some() {
            return None;
        }
        let live = self.live.current();
        let kept = self
            .kept
            .current()
            .map(|(k, v)| (&k[..k.len().saturating_sub(8)], v));
        match (live, kept) {
            (Some(l), Some(k)) => Some(if k.0 < l.0 { k } else { l }),
            (l, None) => l,
            (None, k) => k,
        }
    }

    pub fn advance(&mut self) {
        self.settle();
        let order = match (self.live.current(), self.kept.current()) {
            (Some((l, _)), Some((k, _))) => l.cmp(&k[..k.len().saturating_sub(8)]),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => return,
        };
        match order {
            std::cmp::Ordering::Less => self.live.advance(),
            std::cmp::Ordering::Greater => self.kept.advance(),
            std::cmp::Ordering::Equal => {
                self.live.advance();
                self.kept.advance();
            }
        }
        self.settled = false;
    }

    pub fn status(&self) -> Result<(), OmError> {
        if let Some(e) = &self.err {
            return Err(OmError::Internal(e.to_string()));
        }
        self.live.status()?;
        self.kept.status()
    }

    pub fn stats(&self) -> IterStats {
        let mut s = self.live.stats();
        s += self.kept.stats();
        s
    }
}

/// What a diff reports of one key.
pub const DIFF_CREATED: u32 = 1;
pub const DIFF_DELETED: u32 = 2;
pub const DIFF_MODIFIED: u32 = 3;

/// One key that differs between two images of a bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub name: Vec<u8>,
    pub kind: u32,
    pub before: Option<KeyRecord>,
    pub after: Option<KeyRecord>,
}

/// One page of a diff, and what it read.
#[derive(Debug, Clone, Default)]
pub struct DiffPage {
    pub changes: Vec<Change>,
    /// The change-log key the next page starts at, when there is more.
    pub resume: Option<Vec<u8>>,
    /// Change-log entries read.
    pub examined: u64,
    /// Point reads of the two images.
    pub point_reads: u64,
    pub stats: IterStats,
}

/// A current entry as an image shows it: a delete marker is no key.
fn present(rec: Option<KeyRecord>) -> Option<KeyRecord> {
    rec.filter(|r| !r.delete_marker)
}

/// One page of the keys of a bucket that differ between its snapshot at
/// `from` and its snapshot at `to` (`None`: the live bucket), read from
/// the bucket's change log (`apply::snapshots::log_change`) rather than
/// either image: one seek, then one entry per change in between, and for
/// each key (at its first change, which the log links) a point read of
/// each image. So its cost follows the changes, not the bucket. Starts at
/// `resume` (a change-log key), stops after `max` changes or `max_examined`
/// log entries.
#[allow(clippy::too_many_arguments)]
pub fn diff_page(
    db: &DB,
    volume: &str,
    bucket: &str,
    from: u64,
    to: Option<u64>,
    resume: Option<&[u8]>,
    max: usize,
    max_examined: u64,
) -> Result<DiffPage, OmError> {
    let prefix = keys::change_prefix(volume, bucket);
    let lower = keys::change_key(volume, bucket, from.saturating_add(1), b"");
    let upper = match to {
        Some(t) => Some(keys::change_key(volume, bucket, t, b"")),
        None => keys::prefix_end(&prefix),
    };
    let objects = keys::object_prefix(volume, bucket);
    let mut it = DeferredSeekIter::new(db, keys::SNAPSHOT_CHANGES_CF, Some(lower.clone()), upper)?;
    it.seek(resume.filter(|r| *r > lower.as_slice()).unwrap_or(&lower));
    let mut page = DiffPage::default();
    while let Some((k, v)) = it.current() {
        if page.changes.len() == max || page.examined == max_examined {
            page.resume = Some(k.to_vec());
            break;
        }
        page.examined += 1;
        let corrupt = || OmError::Internal("corrupt snapshot_changes entry".to_string());
        let (index, name) = keys::split_change(&k[prefix.len()..]).ok_or_else(corrupt)?;
        let prev = u64::from_be_bytes(v.try_into().map_err(|_| corrupt())?);
        // Only a key's first change since `from` reports it.
        if prev > from {
            it.advance();
            continue;
        }
        let mut table_key = objects.clone();
        table_key.extend_from_slice(name);
        // What `from` showed of the key left the table at this change, and
        // `from` kept it there.
        let before = present(table::get::<RetainedKeyTable>(
            db,
            &keys::retained_key(&table_key, index),
        )?);
        let after = present(match to {
            None => table::get::<KeyTable>(db, &table_key)?,
            Some(t) => key_at(db, &table_key, t)?,
        });
        page.point_reads += 2;
        let kind = match (&before, &after) {
            (None, None) => None,
            (Some(_), None) => Some(DIFF_DELETED),
            (None, Some(_)) => Some(DIFF_CREATED),
            (Some(b), Some(a)) => (b.written_index != a.written_index).then_some(DIFF_MODIFIED),
        };
        if let Some(kind) = kind {
            page.changes.push(Change {
                name: name.to_vec(),
                kind,
                before,
                after,
            });
        }
        it.advance();
    }
    it.status()?;
    page.stats = it.stats();
    Ok(page)
}
