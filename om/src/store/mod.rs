//! om's storage layer: key layouts, typed tables and the deferred-seek iterator.
//! With `om-raft-store`, the only code that touches RocksDB.

pub mod iter;
pub mod keys;
pub mod records;
pub mod snapshot;
pub mod table;
pub mod view;

use std::collections::BTreeMap;

/// Consecutive tombstones an iterator must step over before RocksDB replaces
/// them with one range tombstone (`min_tombstones_for_range_conversion`), so
/// the next scan through the same band skips it at once. The conversion only
/// covers keys that are already deleted, so the logical state every replica
/// holds is unchanged; measured in BENCHMARKS.md (a first page across 100k
/// tombstones: 6.6 ms per scan without, 16 µs after the first scan with it).
pub const RANGE_CONVERSION_MIN_TOMBSTONES: u32 = 1000;

/// Options of the metadata tables' column families.
///
/// Tables that see bulk deletions get RocksDB's deletion-triggered compaction:
/// an SST file is marked for compaction when any window of
/// `DELETION_WINDOW` consecutive entries holds `DELETION_TRIGGER` or more
/// tombstones, or when tombstones make up `DELETION_RATIO` of the file. That
/// compacts tombstone bands away soon after they land, instead of waiting for
/// size-based compaction, so scans do not keep paying for deleted keys.
pub fn table_descriptors() -> Vec<rocksdb::ColumnFamilyDescriptor> {
    table_descriptors_with(None)
}

/// `table_descriptors` under a memory budget (one shared block cache).
pub fn table_descriptors_with(
    memory: Option<&om_raft_store::memory::MemoryBudget>,
) -> Vec<rocksdb::ColumnFamilyDescriptor> {
    keys::TABLE_CFS
        .iter()
        .map(|name| {
            let mut o = rocksdb::Options::default();
            let mut t = match memory {
                Some(m) => {
                    m.apply_to_cf(&mut o);
                    m.block_options()
                }
                None => rocksdb::BlockBasedOptions::default(),
            };
            // Point reads of keys that do not exist (a new key's current
            // version, a write's retry-cache record) are most of apply's
            // reads: bloom filters answer them without searching the
            // memtable's skip list or reading an SST block.
            t.set_bloom_filter(BLOOM_BITS_PER_KEY, false);
            o.set_block_based_table_factory(&t);
            // A memtable's filter is allocated whole with the memtable, so
            // only the tables whose absent keys every write looks up have one.
            if keys::POINT_MISS_CFS.contains(name) {
                o.set_memtable_whole_key_filtering(true);
                o.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO);
            }
            if keys::DELETION_HEAVY_CFS.contains(name) {
                o.add_compact_on_deletion_collector_factory(
                    DELETION_WINDOW,
                    DELETION_TRIGGER,
                    DELETION_RATIO,
                );
            }
            rocksdb::ColumnFamilyDescriptor::new(*name, o)
        })
        .collect()
}

/// Bits per key of the tables' SST bloom filters (about 1 % false positives).
pub const BLOOM_BITS_PER_KEY: f64 = 10.0;
/// Share of a memtable's budget its whole-key bloom filter takes (64 MiB
/// memtables of ~300-byte entries: about 25 bits per key).
pub const MEMTABLE_BLOOM_RATIO: f64 = 0.01;

/// Entries per sliding window of the deletion-triggered compaction collector.
pub const DELETION_WINDOW: usize = 32 * 1024;
/// Tombstones within one window that mark the file for compaction.
pub const DELETION_TRIGGER: usize = 8 * 1024;
/// Fraction of tombstones in a whole file that marks it for compaction.
pub const DELETION_RATIO: f64 = 0.5;

/// Runtime options of the metadata tables, set once the database is open.
pub fn tune_tables(db: &rocksdb::DB) -> Result<(), crate::error::OmError> {
    let value = RANGE_CONVERSION_MIN_TOMBSTONES.to_string();
    for name in keys::DELETION_HEAVY_CFS {
        let cf = table::cf(db, name)?;
        db.set_options_cf(
            cf,
            &[("min_tombstones_for_range_conversion", value.as_str())],
        )?;
    }
    Ok(())
}

/// The retry cache's oldest entry time (ms; one seek among the generations,
/// one in the pre-11 expiry index) and RocksDB's estimate of its key count
/// (an entry stored the pre-11 way is two keys).
pub fn retry_cache_stats(db: &rocksdb::DB) -> Result<(Option<u64>, u64), crate::error::OmError> {
    let mut it = iter::DeferredSeekIter::with_prefix(
        db,
        keys::RETRY_CACHE_CF,
        keys::RETRY_GENERATION_PREFIX,
    )?;
    // The first generation holds the oldest entries; its first key is one of
    // them, though not necessarily the very oldest.
    let generation = match it.current() {
        Some((_, v)) => Some(table::decode::<table::RetryCacheTable>(v)?.created_ms),
        None => None,
    };
    it.status()?;
    let mut it =
        iter::DeferredSeekIter::with_prefix(db, keys::RETRY_CACHE_CF, keys::RETRY_EXPIRY_PREFIX)?;
    let legacy = it
        .current()
        .and_then(|(k, _)| keys::retry_key_from_expiry(k))
        .map(|(t, _)| t);
    it.status()?;
    let oldest = match (generation, legacy) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let cf = table::cf(db, keys::RETRY_CACHE_CF)?;
    let keys = db
        .property_int_value_cf(cf, "rocksdb.estimate-num-keys")?
        .unwrap_or(0);
    Ok((oldest, keys))
}

/// Table entries by (table, key).
pub type TableDump = BTreeMap<(&'static str, Vec<u8>), Vec<u8>>;

/// Every entry of the metadata tables except the retry cache, by (table, key).
/// Tests compare two dumps to prove a rejected request changed nothing; the
/// retry cache is excluded because it records rejections on purpose, so a
/// retried request gets the same answer.
pub fn dump_tables(db: &rocksdb::DB) -> Result<TableDump, crate::error::OmError> {
    let mut out = BTreeMap::new();
    for &cf in keys::TABLE_CFS
        .iter()
        .filter(|c| **c != keys::RETRY_CACHE_CF)
    {
        dump_into(db, cf, &mut out)?;
    }
    Ok(out)
}

/// Every entry of one table, by (table, key).
pub fn dump_table(db: &rocksdb::DB, cf: &'static str) -> Result<TableDump, crate::error::OmError> {
    let mut out = BTreeMap::new();
    dump_into(db, cf, &mut out)?;
    Ok(out)
}

fn dump_into(
    db: &rocksdb::DB,
    cf: &'static str,
    out: &mut TableDump,
) -> Result<(), crate::error::OmError> {
    let mut it = iter::DeferredSeekIter::new(db, cf, None, None)?;
    it.seek_to_first();
    while let Some((k, v)) = it.current() {
        out.insert((cf, k.to_vec()), v.to_vec());
        it.advance();
    }
    it.status()?;
    Ok(())
}
