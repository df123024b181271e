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
