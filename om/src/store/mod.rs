//! om's storage layer: key layouts, typed tables and the deferred-seek iterator.
//! With `om-raft-store`, the only code that touches RocksDB.

pub mod iter;
pub mod keys;
pub mod table;

use std::collections::BTreeMap;

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
        let mut it = iter::DeferredSeekIter::new(db, cf, None, None)?;
        it.seek_to_first();
        while let Some((k, v)) = it.current() {
            out.insert((cf, k.to_vec()), v.to_vec());
            it.advance();
        }
        it.status()?;
    }
    Ok(out)
}
