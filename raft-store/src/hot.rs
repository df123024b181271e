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

use crate::overlay::{Overlay, Tables};

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
        if self.records >= MAX_HOT_RECORDS {
            self.clear();
        }
        if self.maps[t]
            .insert(key.to_vec(), Arc::from(value))
            .is_none()
        {
            self.records += 1;
        }
    }

    fn remove(&mut self, t: usize, key: &[u8]) {
        if self.maps[t].remove(key).is_some() {
            self.records -= 1;
        }
    }
}

impl HotRecords {
    /// A cache of the tables named `hot` (names that are not tables of
    /// `tables` are ignored).
    pub fn new(tables: &Tables, hot: &[&str]) -> HotRecords {
        let cached = (0..tables.len())
            .map(|t| hot.contains(&tables.name(t)))
            .collect();
        HotRecords {
            cached,
            inner: Mutex::new(Inner {
                maps: vec![HashMap::new(); tables.len()],
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

    /// Takes in the writes of `run` to cached tables, just before the run is
    /// written (a failed write must be followed by `clear`).
    pub fn write_through(&self, run: &Overlay) {
        let mut inner = self.lock();
        for t in (0..self.cached.len()).filter(|&t| self.cached[t]) {
            if !run.touched(t) {
                continue;
            }
            if run.has_ranges(t) {
                let n = inner.maps[t].len();
                inner.maps[t].clear();
                inner.records -= n;
            }
            for (k, v) in run.points(t, &[], None) {
                match v {
                    Some(v) => inner.insert(t, k, v),
                    None => inner.remove(t, k),
                }
            }
        }
    }

    /// Forgets everything (a failed write, a snapshot install).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Reads answered here, and reads of cached tables that were not.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}
