//! One memory budget for RocksDB: a block cache shared by every column
//! family, with the memtables' memory charged to it (a write-buffer manager
//! over the same cache), and index and filter blocks held in it too. Without
//! it each of the ~20 column families has its own 64 MiB memtables (two of
//! them) and an 8 MiB cache, and index and filter blocks live outside any
//! bound, growing with the data: ~3 GiB in theory.
//!
//! The split, of a budget B:
//! - memtables: about B / 4 in all (past it the write-buffer manager has a
//!   column family's memtable flushed), each at most
//!   `clamp(B / 32, 2 MiB, 64 MiB)`, two per column family;
//! - the rest of B caches data, index and filter blocks; the cache is strict
//!   only about what it can evict, so pinned blocks (iterators, L0 filters)
//!   may take it a little over.

use rocksdb::{BlockBasedOptions, Cache, Options, WriteBufferManager};

/// The shared cache and memtable bound of one store.
#[derive(Clone)]
pub struct MemoryBudget {
    bytes: u64,
    cache: Cache,
    memtables: WriteBufferManager,
    write_buffer_size: usize,
}

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("bytes", &self.bytes)
            .field("write_buffer_size", &self.write_buffer_size)
            .finish()
    }
}

impl MemoryBudget {
    pub fn new(bytes: u64) -> MemoryBudget {
        let bytes_usize = usize::try_from(bytes).unwrap_or(usize::MAX);
        let cache = Cache::new_lru_cache(bytes_usize);
        let memtables = WriteBufferManager::new_write_buffer_manager_with_cache(
            bytes_usize / 4,
            false,
            cache.clone(),
        );
        let write_buffer_size = (bytes_usize / 32).clamp(2 << 20, 64 << 20);
        MemoryBudget {
            bytes,
            cache,
            memtables,
            write_buffer_size,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes the memtables use now.
    pub fn memtable_usage(&self) -> usize {
        self.memtables.get_usage()
    }

    /// Bytes the block cache holds now (memtable charges included).
    pub fn cache_usage(&self) -> usize {
        self.cache.get_usage()
    }

    /// The largest memtable of one column family.
    pub fn write_buffer_size(&self) -> usize {
        self.write_buffer_size
    }

    /// Database-wide options.
    pub fn apply_to_db(&self, o: &mut Options) {
        o.set_write_buffer_manager(&self.memtables);
    }

    /// The table options of a column family under this budget (its blocks,
    /// index and filters in the shared cache), to build on.
    pub fn block_options(&self) -> BlockBasedOptions {
        let mut t = BlockBasedOptions::default();
        t.set_block_cache(&self.cache);
        t.set_cache_index_and_filter_blocks(true);
        t.set_cache_index_and_filter_blocks_with_high_priority(true);
        t.set_pin_l0_filter_and_index_blocks_in_cache(true);
        t
    }

    /// Options of a column family under this budget, to build on.
    pub fn cf_options(&self) -> Options {
        let mut o = Options::default();
        self.apply_to_cf(&mut o);
        o
    }

    /// Puts a column family's options under this budget.
    pub fn apply_to_cf(&self, o: &mut Options) {
        o.set_block_based_table_factory(&self.block_options());
        o.set_write_buffer_size(self.write_buffer_size);
        o.set_max_write_buffer_number(2);
    }
}
