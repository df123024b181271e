//! `DeferredSeekIter`: the one iterator every om listing uses.
//!
//! Rules (see ARCHITECTURE.md, "one seek per page"):
//! - creating the iterator creates the native RocksDB iterator (its view is fixed
//!   then) but positions nothing;
//! - `seek`, `seek_to_first` and `seek_to_last` each cost exactly one native
//!   positioning call; reading an unpositioned iterator positions it at the start
//!   of its range once;
//! - the iterator is bounded by `iterate_lower_bound`/`iterate_upper_bound`, so
//!   running off the end of a prefix never walks tombstones beyond it;
//! - it wraps the raw iterator, which never reads ahead.
//!
//! Every native call is counted on the iterator (for tests and responses) and
//! on the process-wide per-table counters (for metrics).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use rocksdb::{DB, DBRawIterator, ReadOptions};

/// Native operations performed by one iterator.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IterStats {
    /// Native positioning calls: seek, seek_for_prev, seek_to_first, seek_to_last.
    pub seeks: u64,
    /// Native next/prev calls.
    pub nexts: u64,
}

impl std::ops::AddAssign for IterStats {
    fn add_assign(&mut self, o: IterStats) {
        self.seeks += o.seeks;
        self.nexts += o.nexts;
    }
}

/// Process-wide counters of one table, exported as `om_db_*_total{table}`.
#[derive(Debug, Default)]
pub struct TableCounters {
    pub seeks: AtomicU64,
    pub nexts: AtomicU64,
}

/// The counters of `table`, created on first use and kept for the process's life.
pub fn table_counters(table: &'static str) -> &'static TableCounters {
    static ALL: OnceLock<Mutex<BTreeMap<&'static str, &'static TableCounters>>> = OnceLock::new();
    let mut all = ALL
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    all.entry(table)
        .or_insert_with(|| Box::leak(Box::default()))
}

/// A snapshot of every table's counters, for the metrics endpoint.
pub fn all_table_counters() -> Vec<(&'static str, u64, u64)> {
    static_names()
        .iter()
        .map(|t| {
            let c = table_counters(t);
            (
                *t,
                c.seeks.load(Ordering::Relaxed),
                c.nexts.load(Ordering::Relaxed),
            )
        })
        .collect()
}

fn static_names() -> &'static [&'static str] {
    super::keys::TABLE_CFS
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Nothing positioned yet: the first read seeks to the start of the range.
    Unpositioned,
    Positioned,
}

pub struct DeferredSeekIter<'a> {
    raw: DBRawIterator<'a>,
    lower: Option<Vec<u8>>,
    position: Position,
    stats: IterStats,
    global: &'static TableCounters,
}

impl<'a> DeferredSeekIter<'a> {
    /// An iterator over `[lower, upper)` of `table`. No native positioning happens here.
    pub fn new(
        db: &'a DB,
        table: &'static str,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    ) -> Result<Self, crate::error::OmError> {
        let cf = db.cf_handle(table).ok_or_else(|| {
            crate::error::OmError::Internal(format!("column family {table} missing"))
        })?;
        let mut opts = ReadOptions::default();
        if let Some(l) = &lower {
            opts.set_iterate_lower_bound(l.clone());
        }
        if let Some(u) = upper {
            opts.set_iterate_upper_bound(u);
        }
        let raw = db.raw_iterator_cf_opt(cf, opts);
        Ok(DeferredSeekIter {
            raw,
            lower,
            position: Position::Unpositioned,
            stats: IterStats::default(),
            global: table_counters(table),
        })
    }

    /// An iterator over every key starting with `prefix`.
    pub fn with_prefix(
        db: &'a DB,
        table: &'static str,
        prefix: &[u8],
    ) -> Result<Self, crate::error::OmError> {
        let lower = (!prefix.is_empty()).then(|| prefix.to_vec());
        Self::new(db, table, lower, super::keys::prefix_end(prefix))
    }

    fn count_seek(&mut self) {
        self.stats.seeks += 1;
        self.global.seeks.fetch_add(1, Ordering::Relaxed);
        self.position = Position::Positioned;
    }

    /// Positions at the first entry `>= key` (clamped to the lower bound). One native seek.
    pub fn seek(&mut self, key: &[u8]) {
        match &self.lower {
            Some(l) if key < l.as_slice() => {
                let l = l.clone();
                self.raw.seek(&l)
            }
            _ => self.raw.seek(key),
        }
        self.count_seek();
    }

    /// Positions at the first entry strictly after `key`. One native seek.
    pub fn seek_after(&mut self, key: &[u8]) {
        self.seek(&super::keys::key_successor(key));
    }

    pub fn seek_to_first(&mut self) {
        self.raw.seek_to_first();
        self.count_seek();
    }

    pub fn seek_to_last(&mut self) {
        self.raw.seek_to_last();
        self.count_seek();
    }

    fn ensure_positioned(&mut self) {
        if self.position == Position::Unpositioned {
            self.seek_to_first();
        }
    }

    /// Whether there is a current entry; positions an unpositioned iterator once.
    pub fn has_current(&mut self) -> bool {
        self.ensure_positioned();
        self.raw.valid()
    }

    /// The current entry, positioning an unpositioned iterator once.
    pub fn current(&mut self) -> Option<(&[u8], &[u8])> {
        self.ensure_positioned();
        if self.raw.valid() {
            Some((self.raw.key()?, self.raw.value()?))
        } else {
            None
        }
    }

    /// Moves to the next entry. One native next.
    pub fn advance(&mut self) {
        self.ensure_positioned();
        if self.raw.valid() {
            self.raw.next();
            self.stats.nexts += 1;
            self.global.nexts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The native error, if iteration stopped on one rather than at the end.
    pub fn status(&self) -> Result<(), crate::error::OmError> {
        self.raw.status().map_err(Into::into)
    }

    pub fn stats(&self) -> IterStats {
        self.stats
    }
}
