//! om's storage layer: key layouts, typed tables and the deferred-seek iterator.
//! With `om-raft-store`, the only code that touches RocksDB.

pub mod iter;
pub mod keys;
pub mod records;
pub mod table;

use std::collections::BTreeMap;

/// Consecutive tombstones an iterator must step over before RocksDB replaces
/// them with one range tombstone (`min_tombstones_for_range_conversion`), so
/// the next scan through the same band skips it at once. The conversion only
/// covers keys that are already deleted, so the logical state every replica
/// holds is unchanged; measured in BENCHMARKS.md (a first page across 100k
/// tombstones: 6.6 ms per scan without, 16 µs after the first scan with it).
pub const RANGE_CONVERSION_MIN_TOMBSTONES: u32 = 1000;

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

/// The retry cache's oldest entry time (ms; one seek in the expiry index) and
/// RocksDB's estimate of its entry count.
pub fn retry_cache_stats(db: &rocksdb::DB) -> Result<(Option<u64>, u64), crate::error::OmError> {
    let mut it =
        iter::DeferredSeekIter::with_prefix(db, keys::RETRY_CACHE_CF, keys::RETRY_EXPIRY_PREFIX)?;
    let oldest = it
        .current()
        .and_then(|(k, _)| keys::retry_key_from_expiry(k))
        .map(|(t, _)| t);
    it.status()?;
    let cf = table::cf(db, keys::RETRY_CACHE_CF)?;
    let keys = db
        .property_int_value_cf(cf, "rocksdb.estimate-num-keys")?
        .unwrap_or(0);
    Ok((oldest, keys / 2))
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
