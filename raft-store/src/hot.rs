//! Records that almost every write reads (om's buckets, volumes and block
//! counter: `Applier::hot_tables`), kept in memory so apply reads them
//! without a RocksDB lookup.
//!
//! The cache holds, for a key, only the value the database holds: a value
//! enters when apply reads it from the database, and when a run that wrote it
//! is about to be written (`write_through`, with the run's every point write
//! and range deletion of the cached tables); a failed write empties it, and
//! so does a snapshot install, and a new state machine (a start) begins
//! empty. Every read that finds a key here would have found the same bytes
//! in the database, so no replica can read a different value than its store
//! holds, whatever the cache holds or has forgotten.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most records kept; past it the cache starts again empty (the hot ones
/// come back with their next read).
pub const MAX_HOT_RECORDS: usize = 4096;

/// Most bytes of one record kept.
pub const MAX_HOT_RECORD_BYTES: usize = 16 << 10;

pub struct HotRecords {
    /// By table index: whether the table is cached.
    cached: Vec<bool>,
    inner: Mutex<Inner>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Inner {
    /// By table index.
    maps: Vec<HashMap<Vec<u8>, Arc<[u8]>>>,
    records: usize,
}

impl Inner {
    fn clear(&mut self) {
        self.maps.iter_mut().for_each(HashMap::clear);
        self.records = 0;
    }

    fn insert(&mut self, t: usize, key: &[u8], value: &[u8]) {
        if value.len() > MAX_HOT_RECORD_BYTES {
            self.remove(t, key);
            return;
        }
        // A kept record (the bucket every write rewrites) takes its new
        // value in place; only a new key is copied.
        if let Some(kept) = self.maps[t].get_mut(key) {
            *kept = Arc::from(value);
            return;
        }
        if self.records >= MAX_HOT_RECORDS {
            self.clear();
        }
        self.maps[t].insert(key.to_vec(), Arc::from(value));
        self.records += 1;
    }

    fn remove(&mut self, t: usize, key: &[u8]) {
        if self.maps[t].remove(key).is_some() {
            self.records -= 1;
        }
    }
}

impl HotRecords {
    /// A cache of the tables whose index is `true` in `cached`.
    pub fn new(cached: Vec<bool>) -> HotRecords {
        let tables = cached.len();
        HotRecords {
            cached,
            inner: Mutex::new(Inner {
                maps: vec![HashMap::new(); tables],
                records: 0,
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether table `t` is cached.
    pub fn holds(&self, t: usize) -> bool {
        self.cached.get(t).copied().unwrap_or(false)
    }

    /// The database's value of `key` in table `t`, if it is kept here.
    pub fn get(&self, t: usize, key: &[u8]) -> Option<Arc<[u8]>> {
        let v = self.lock().maps[t].get(key).cloned();
        match v {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        v
    }

    /// Keeps `value`, just read from the database, as `key`'s in table `t`.
    pub fn remember(&self, t: usize, key: &[u8], value: &[u8]) {
        self.lock().insert(t, key, value);
    }

    /// Takes in a run's writes to cached table `t` (`cleared`: the run
    /// deleted ranges of it; `points`: its point writes, `None` a
    /// deletion), just before the run is written; a failed write must be
    /// followed by `clear`.
    pub fn write_through<'r>(
        &self,
        t: usize,
        cleared: bool,
        points: impl IntoIterator<Item = (&'r Vec<u8>, &'r Option<Vec<u8>>)>,
    ) {
        if !self.holds(t) {
            return;
        }
        let mut inner = self.lock();
        if cleared {
            let n = inner.maps[t].len();
            inner.maps[t].clear();
            inner.records -= n;
        }
        for (k, v) in points {
            match v {
                Some(v) => inner.insert(t, k, v),
                None => inner.remove(t, k),
            }
        }
    }

    /// Forgets everything (a failed write, a snapshot install).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Every record kept, by table index (tests compare them with the
    /// store).
    pub fn records(&self) -> Vec<(usize, Vec<u8>, Vec<u8>)> {
        let inner = self.lock();
        let mut out: Vec<_> = (0..inner.maps.len())
            .flat_map(|t| {
                inner.maps[t]
                    .iter()
                    .map(move |(k, v)| (t, k.clone(), v.to_vec()))
            })
            .collect();
        out.sort();
        out
    }

    /// Reads answered here, and reads of cached tables that were not.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t: usize, k: &str, v: &str) -> (usize, Vec<u8>, Vec<u8>) {
        (t, k.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    /// Point writes replace or remove what is kept, a range deletion
    /// forgets the table first, uncached tables keep nothing, and past
    /// the bound the cache starts again empty.
    #[test]
    fn the_cache_takes_in_what_runs_write() {
        let hot = HotRecords::new(vec![true, false, true]);
        hot.remember(0, b"a", b"1");
        hot.remember(0, b"b", b"1");
        hot.remember(2, b"x", b"1");
        assert_eq!(hot.get(0, b"a").as_deref(), Some(&b"1"[..]));
        let writes = [
            (b"a".to_vec(), Some(b"2".to_vec())),
            (b"b".to_vec(), None),
            (b"c".to_vec(), Some(b"3".to_vec())),
        ];
        hot.write_through(0, false, writes.iter().map(|(k, v)| (k, v)));
        hot.write_through(1, false, writes.iter().map(|(k, v)| (k, v)));
        assert_eq!(
            hot.records(),
            vec![rec(0, "a", "2"), rec(0, "c", "3"), rec(2, "x", "1")]
        );
        let after_range = [(b"d".to_vec(), Some(b"4".to_vec()))];
        hot.write_through(0, true, after_range.iter().map(|(k, v)| (k, v)));
        assert_eq!(hot.records(), vec![rec(0, "d", "4"), rec(2, "x", "1")]);
        assert_eq!(hot.get(0, b"a"), None);
        for i in 0..MAX_HOT_RECORDS {
            hot.remember(2, format!("k{i}").as_bytes(), b"v");
        }
        assert!(hot.records().len() <= MAX_HOT_RECORDS);
        hot.remember(0, b"big", &vec![0; MAX_HOT_RECORD_BYTES + 1]);
        assert_eq!(hot.get(0, b"big"), None);
        hot.clear();
        assert!(hot.records().is_empty());
        assert_eq!(hot.hits_and_misses(), (1, 2));
    }
}
