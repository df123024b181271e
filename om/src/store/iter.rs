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

use rocksdb::perf::{PerfContext, PerfMetric, set_perf_stats};
use rocksdb::{DB, DBRawIterator, PerfStatsLevel, ReadOptions};

/// Native operations performed by one iterator.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IterStats {
    /// Native positioning calls: seek, seek_for_prev, seek_to_first, seek_to_last.
    pub seeks: u64,
    /// Native next/prev calls.
    pub nexts: u64,
    /// Deleted entries RocksDB stepped over inside those calls
    /// (PerfContext `internal_delete_skipped_count`).
    pub tombstones: u64,
}

impl std::ops::AddAssign for IterStats {
    fn add_assign(&mut self, o: IterStats) {
        self.seeks += o.seeks;
        self.nexts += o.nexts;
        self.tombstones += o.tombstones;
    }
}

/// Process-wide counters of one table, exported as `om_db_*_total{table}`.
#[derive(Debug, Default)]
pub struct TableCounters {
    pub seeks: AtomicU64,
    pub nexts: AtomicU64,
    pub tombstones: AtomicU64,
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
pub fn all_table_counters() -> Vec<(&'static str, IterStats)> {
    static_names()
        .iter()
        .map(|t| {
            let c = table_counters(t);
            (
                *t,
                IterStats {
                    seeks: c.seeks.load(Ordering::Relaxed),
                    nexts: c.nexts.load(Ordering::Relaxed),
                    tombstones: c.tombstones.load(Ordering::Relaxed),
                },
            )
        })
        .collect()
}

thread_local! {
    static PERF: std::cell::RefCell<Option<PerfContext>> = const { std::cell::RefCell::new(None) };
}

/// Runs one native iterator call and returns how many tombstones RocksDB
/// skipped inside it. PerfContext is thread-local, and the call is synchronous,
/// so the before/after readings are of the same thread. `EnableCount` has the
/// same value in the binding and in RocksDB 11 (the higher levels do not).
fn counting_tombstones(f: impl FnOnce()) -> u64 {
    set_perf_stats(PerfStatsLevel::EnableCount);
    PERF.with(|p| {
        let mut p = p.borrow_mut();
        let ctx = p.get_or_insert_with(PerfContext::default);
        let before = ctx.metric(PerfMetric::InternalDeleteSkippedCount);
        f();
        ctx.metric(PerfMetric::InternalDeleteSkippedCount)
            .saturating_sub(before)
    })
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

    fn count_seek(&mut self, tombstones: u64) {
        self.stats.seeks += 1;
        self.stats.tombstones += tombstones;
        self.global.seeks.fetch_add(1, Ordering::Relaxed);
        self.global
            .tombstones
            .fetch_add(tombstones, Ordering::Relaxed);
        self.position = Position::Positioned;
    }

    /// Positions at the first entry `>= key` (clamped to the lower bound). One native seek.
    pub fn seek(&mut self, key: &[u8]) {
        let target = match &self.lower {
            Some(l) if key < l.as_slice() => l.as_slice(),
            _ => key,
        };
        let raw = &mut self.raw;
        let t = counting_tombstones(|| raw.seek(target));
        self.count_seek(t);
    }

    /// Positions at the first entry strictly after `key`. One native seek.
    pub fn seek_after(&mut self, key: &[u8]) {
        self.seek(&super::keys::key_successor(key));
    }

    pub fn seek_to_first(&mut self) {
        let raw = &mut self.raw;
        let t = counting_tombstones(|| raw.seek_to_first());
        self.count_seek(t);
    }

    pub fn seek_to_last(&mut self) {
        let raw = &mut self.raw;
        let t = counting_tombstones(|| raw.seek_to_last());
        self.count_seek(t);
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
            let raw = &mut self.raw;
            let t = counting_tombstones(|| raw.next());
            self.stats.nexts += 1;
            self.stats.tombstones += t;
            self.global.nexts.fetch_add(1, Ordering::Relaxed);
            self.global.tombstones.fetch_add(t, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::keys::KEYS_CF;

    fn db() -> (tempfile::TempDir, DB) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        o.set_disable_auto_compactions(true);
        let db = DB::open_cf(&o, dir.path(), crate::store::keys::TABLE_CFS).unwrap();
        (dir, db)
    }

    fn put(db: &DB, k: &str) {
        db.put_cf(db.cf_handle(KEYS_CF).unwrap(), k, b"v").unwrap();
    }

    fn del(db: &DB, k: &str) {
        db.delete_cf(db.cf_handle(KEYS_CF).unwrap(), k).unwrap();
    }

    #[test]
    fn construction_positions_nothing() {
        let (_d, db) = db();
        put(&db, "a/1");
        let it = DeferredSeekIter::with_prefix(&db, KEYS_CF, b"a/").unwrap();
        assert_eq!(it.stats(), IterStats::default());
    }

    #[test]
    fn first_read_positions_once() {
        let (_d, db) = db();
        put(&db, "a/1");
        put(&db, "a/2");
        let mut it = DeferredSeekIter::with_prefix(&db, KEYS_CF, b"a/").unwrap();
        assert!(it.has_current());
        assert!(it.has_current());
        assert_eq!(it.current().unwrap().0, b"a/1");
        assert_eq!(it.stats().seeks, 1, "repeated reads do not re-position");
        it.advance();
        assert_eq!(it.current().unwrap().0, b"a/2");
        assert_eq!(
            it.stats(),
            IterStats {
                seeks: 1,
                nexts: 1,
                tombstones: 0
            }
        );
    }

    #[test]
    fn explicit_seek_is_exactly_one_native_seek() {
        let (_d, db) = db();
        for i in 0..10 {
            put(&db, &format!("a/{i}"));
        }
        let mut it = DeferredSeekIter::with_prefix(&db, KEYS_CF, b"a/").unwrap();
        it.seek(b"a/5");
        assert_eq!(it.current().unwrap().0, b"a/5");
        assert_eq!(it.stats().seeks, 1);
        // A target below the lower bound is clamped, still one seek.
        let mut it = DeferredSeekIter::with_prefix(&db, KEYS_CF, b"a/").unwrap();
        it.seek(b"");
        assert_eq!(it.current().unwrap().0, b"a/0");
        assert_eq!(it.stats().seeks, 1);
    }

    #[test]
    fn seek_to_last_does_not_seek_first() {
        let (_d, db) = db();
        put(&db, "a/1");
        put(&db, "a/9");
        put(&db, "b/1");
        let mut it = DeferredSeekIter::with_prefix(&db, KEYS_CF, b"a/").unwrap();
        it.seek_to_last();
        assert_eq!(it.current().unwrap().0, b"a/9", "bounded by the prefix");
        assert_eq!(it.stats().seeks, 1);
    }

    #[test]
    fn reaching_the_end_of_a_prefix_walks_no_tombstones_beyond_it() {
        let (_d, db) = db();
        put(&db, "a/1");
        for i in 0..1000 {
            let k = format!("b/{i:04}");
            put(&db, &k);
            del(&db, &k);
        }
        put(&db, "c/1");
        let mut it = DeferredSeekIter::with_prefix(&db, KEYS_CF, b"a/").unwrap();
        assert!(it.has_current());
        it.advance();
        assert!(!it.has_current());
        assert_eq!(it.stats().tombstones, 0, "the upper bound stops the walk");
        // Unbounded, the same walk steps over every tombstone: the counter works.
        let mut it = DeferredSeekIter::new(&db, KEYS_CF, Some(b"a/".to_vec()), None).unwrap();
        it.seek(b"a/");
        it.advance();
        assert_eq!(it.current().unwrap().0, b"c/1");
        assert!(it.stats().tombstones >= 1000, "{:?}", it.stats());
    }

    #[test]
    fn seeking_past_a_tombstone_band_is_one_seek() {
        let (_d, db) = db();
        put(&db, "a/0000");
        for i in 1..2000 {
            let k = format!("a/{i:04}");
            put(&db, &k);
            del(&db, &k);
        }
        put(&db, "a/9999");
        let mut it = DeferredSeekIter::with_prefix(&db, KEYS_CF, b"a/").unwrap();
        it.seek(b"a/2000");
        assert_eq!(it.current().unwrap().0, b"a/9999");
        assert_eq!(it.stats().seeks, 1);
        assert_eq!(
            it.stats().tombstones,
            0,
            "a marker past the band never walks it"
        );
    }
}
