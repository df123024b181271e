//! Applying committed entries in runs: what a run has staged, read over the
//! database.
//!
//! The state machine applies a run of consecutive committed entries into
//! ONE RocksDB write batch (see `state_machine`). Every entry of the run
//! must read the state as the entries before it left it, although none of
//! their writes is in the database yet, so every read in apply goes through
//! an [`ApplyView`]: the [`Overlay`] of the run's staged writes over the
//! database. An entry stages its own writes in [`EntryWrites`], which it
//! cannot read back (apply reads the state *before* the entry, as it always
//! has); once the entry is applied, its writes join the overlay. A refused
//! entry stages nothing, so the overlay stays as it was.
//!
//! The overlay keeps, per table, the newest staged value of each key
//! (`None` for a deletion) and the ranges deleted by the run. A point entry
//! is always newer than every deleted range covering it (a range deletion
//! drops the point entries it covers), so a read is: the staged point entry
//! if there is one, else nothing if a deleted range covers the key, else
//! the database. The run's batch is built from the overlay alone: every
//! deleted range first, then every point entry, in key order. It leaves
//! the database exactly as writing each entry's batch in turn would, and a
//! record that several entries of the run rewrite (a bucket's usage, the
//! block counter) is written once.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::hot::HotRecords;
use rocksdb::{AsColumnFamilyRef, ColumnFamily, DB, DBPinnableSlice, ReadOptions, WriteBatch};

/// The column families apply may write, and their handles' identities.
pub struct Tables {
    names: Vec<String>,
    handles: Vec<usize>,
}

impl Tables {
    /// The tables `names` of `db`; every one must exist.
    pub fn new(db: &DB, names: &[String]) -> std::io::Result<Tables> {
        let mut handles = Vec::with_capacity(names.len());
        for n in names {
            let cf = db
                .cf_handle(n)
                .ok_or_else(|| crate::io_err(format!("column family {n} missing")))?;
            handles.push(cf.inner() as usize);
        }
        Ok(Tables {
            names: names.to_vec(),
            handles,
        })
    }

    /// The index of the table named `name`.
    pub fn by_name(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    fn by_handle(&self, cf: &ColumnFamily) -> Option<usize> {
        let h = cf.inner() as usize;
        self.handles.iter().position(|&x| x == h)
    }

    pub fn name(&self, t: usize) -> &str {
        &self.names[t]
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// One write an entry staged.
#[derive(Debug, Clone)]
enum Write {
    Put(usize, Vec<u8>, Vec<u8>),
    Delete(usize, Vec<u8>),
    DeleteRange(usize, Vec<u8>, Vec<u8>),
}

/// The writes of one entry, in the order staged. `batch` holds the same
/// writes as a RocksDB batch, whose bytes are the entry's contribution to
/// the state digest (unchanged by applying in runs).
pub struct EntryWrites<'a> {
    tables: &'a Tables,
    batch: WriteBatch,
    writes: Vec<Write>,
    bytes: usize,
    /// A write to a column family apply may not write (a storage-class
    /// failure of the entry, reported when it is absorbed).
    stray: Option<String>,
}

impl<'a> EntryWrites<'a> {
    pub fn new(tables: &'a Tables) -> EntryWrites<'a> {
        EntryWrites {
            tables,
            batch: WriteBatch::default(),
            writes: Vec::new(),
            bytes: 0,
            stray: None,
        }
    }

    fn table(&mut self, cf: &ColumnFamily) -> Option<usize> {
        let t = self.tables.by_handle(cf);
        if t.is_none() && self.stray.is_none() {
            self.stray = Some("a write to a column family outside the state".to_string());
        }
        t
    }

    pub fn put_cf(&mut self, cf: &ColumnFamily, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        self.put_cf_vec(cf, key.as_ref().to_vec(), value.as_ref().to_vec());
    }

    /// `put_cf` of owned bytes (no copy into the overlay).
    pub fn put_cf_vec(&mut self, cf: &ColumnFamily, key: Vec<u8>, value: Vec<u8>) {
        self.batch.put_cf(cf, &key, &value);
        if let Some(t) = self.table(cf) {
            self.bytes += key.len() + value.len();
            self.writes.push(Write::Put(t, key, value));
        }
    }

    pub fn delete_cf(&mut self, cf: &ColumnFamily, key: impl AsRef<[u8]>) {
        self.batch.delete_cf(cf, key.as_ref());
        if let Some(t) = self.table(cf) {
            self.bytes += key.as_ref().len();
            self.writes.push(Write::Delete(t, key.as_ref().to_vec()));
        }
    }

    pub fn delete_range_cf(
        &mut self,
        cf: &ColumnFamily,
        from: impl AsRef<[u8]>,
        to: impl AsRef<[u8]>,
    ) {
        self.batch.delete_range_cf(cf, from.as_ref(), to.as_ref());
        if let Some(t) = self.table(cf) {
            self.bytes += from.as_ref().len() + to.as_ref().len();
            self.writes.push(Write::DeleteRange(
                t,
                from.as_ref().to_vec(),
                to.as_ref().to_vec(),
            ));
        }
    }

    /// Writes staged so far.
    pub fn len(&self) -> usize {
        self.writes.len() + usize::from(self.stray.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The writes as RocksDB's batch encodes them.
    pub fn data(&self) -> &[u8] {
        self.batch.data()
    }

    /// Bytes of keys and values staged.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[derive(Default)]
struct TableOverlay {
    points: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Deleted `[from, to)` ranges, in the order staged.
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
}

/// What a run has staged, per table.
pub struct Overlay {
    tables: Vec<TableOverlay>,
    bytes: usize,
    entries: usize,
}

/// What the overlay says of one key.
#[derive(Debug, PartialEq, Eq)]
pub enum Staged<'a> {
    /// The run wrote this value.
    Value(&'a [u8]),
    /// The run deleted the key (a point deletion or a deleted range).
    Deleted,
    /// The run did not touch the key: the database answers.
    Untouched,
}

impl Overlay {
    pub fn new(tables: &Tables) -> Overlay {
        Overlay {
            tables: (0..tables.len()).map(|_| TableOverlay::default()).collect(),
            bytes: 0,
            entries: 0,
        }
    }

    /// Entries absorbed since the run began.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Bytes of keys and values the run staged (rewrites counted again).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Adds an applied entry's writes, in the order it staged them.
    pub fn absorb(&mut self, w: EntryWrites<'_>) -> std::io::Result<()> {
        if let Some(why) = w.stray {
            return Err(crate::io_err(why));
        }
        self.bytes += w.bytes;
        self.entries += 1;
        for write in w.writes {
            match write {
                Write::Put(t, k, v) => {
                    self.tables[t].points.insert(k, Some(v));
                }
                Write::Delete(t, k) => {
                    self.tables[t].points.insert(k, None);
                }
                Write::DeleteRange(t, from, to) => {
                    let table = &mut self.tables[t];
                    if from < to {
                        let covered: Vec<Vec<u8>> = table
                            .points
                            .range::<[u8], _>((
                                Bound::Included(from.as_slice()),
                                Bound::Excluded(to.as_slice()),
                            ))
                            .map(|(k, _)| k.clone())
                            .collect();
                        for k in covered {
                            table.points.remove(&k);
                        }
                    }
                    table.ranges.push((from, to));
                }
            }
        }
        Ok(())
    }

    /// What the run staged for `key` of table `t`.
    pub fn staged(&self, t: usize, key: &[u8]) -> Staged<'_> {
        let table = &self.tables[t];
        match table.points.get(key) {
            Some(Some(v)) => Staged::Value(v),
            Some(None) => Staged::Deleted,
            None if table.ranges.is_empty() => Staged::Untouched,
            None => match self.masked_until(t, key) {
                Some(_) => Staged::Deleted,
                None => Staged::Untouched,
            },
        }
    }

    /// If ranges the run deleted cover `key`, the furthest end among them:
    /// every database key from `key` up to it is deleted.
    pub fn masked_until(&self, t: usize, key: &[u8]) -> Option<&[u8]> {
        self.tables[t]
            .ranges
            .iter()
            .filter(|(from, to)| from.as_slice() <= key && key < to.as_slice())
            .map(|(_, to)| to.as_slice())
            .max()
    }

    /// The run's point entries of table `t` from `from` (inclusive) up to
    /// `upper` (exclusive, `None`: no bound), in key order.
    pub fn points(
        &self,
        t: usize,
        from: &[u8],
        upper: Option<&[u8]>,
    ) -> std::collections::btree_map::Range<'_, Vec<u8>, Option<Vec<u8>>> {
        let hi = match upper {
            Some(u) if u <= from => Bound::Excluded(from),
            Some(u) => Bound::Excluded(u),
            None => Bound::Unbounded,
        };
        self.tables[t]
            .points
            .range::<[u8], _>((Bound::Included(from), hi))
    }

    /// Whether the run wrote anything to table `t`.
    pub fn touched(&self, t: usize) -> bool {
        !self.tables[t].points.is_empty() || !self.tables[t].ranges.is_empty()
    }

    /// Whether the run deleted any range of table `t`.
    pub fn has_ranges(&self, t: usize) -> bool {
        !self.tables[t].ranges.is_empty()
    }

    /// The run's writes as one batch: every deleted range, then every point
    /// entry in key order. Empties the overlay.
    pub fn drain_into(&mut self, db: &DB, tables: &Tables, batch: &mut WriteBatch) {
        for (t, table) in self.tables.iter_mut().enumerate() {
            if table.points.is_empty() && table.ranges.is_empty() {
                continue;
            }
            let Some(cf) = db.cf_handle(tables.name(t)) else {
                continue; // checked when `tables` was made
            };
            for (from, to) in table.ranges.drain(..) {
                batch.delete_range_cf(cf, from, to);
            }
            for (k, v) in std::mem::take(&mut table.points) {
                match v {
                    Some(v) => batch.put_cf(cf, k, v),
                    None => batch.delete_cf(cf, k),
                }
            }
        }
        self.bytes = 0;
        self.entries = 0;
    }
}

/// The state as an entry of a run reads it: the run's overlay over the
/// database.
#[derive(Clone, Copy)]
pub struct ApplyView<'a> {
    db: &'a DB,
    tables: &'a Tables,
    overlay: &'a Overlay,
    /// The state machine's cache of hot records (`hot`), if any.
    hot: Option<&'a HotRecords>,
}

/// A value read through a view.
pub enum ViewValue<'a> {
    Db(DBPinnableSlice<'a>),
    Staged(&'a [u8]),
    /// The database's value, from the cache of hot records.
    Hot(std::sync::Arc<[u8]>),
}

impl std::ops::Deref for ViewValue<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ViewValue::Db(s) => s,
            ViewValue::Staged(s) => s,
            ViewValue::Hot(s) => s,
        }
    }
}

impl AsRef<[u8]> for ViewValue<'_> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl<'a> ApplyView<'a> {
    pub fn new(db: &'a DB, tables: &'a Tables, overlay: &'a Overlay) -> ApplyView<'a> {
        ApplyView {
            db,
            tables,
            overlay,
            hot: None,
        }
    }

    /// Reads the tables `hot` caches through it.
    pub fn with_hot(self, hot: &'a HotRecords) -> ApplyView<'a> {
        ApplyView {
            hot: Some(hot),
            ..self
        }
    }

    pub fn db(&self) -> &'a DB {
        self.db
    }

    pub fn overlay(&self) -> &'a Overlay {
        self.overlay
    }

    /// The index of table `name` (`None`: not a state table, which apply
    /// only reads from the database).
    pub fn table(&self, name: &str) -> Option<usize> {
        self.tables.by_name(name)
    }

    /// A point read of `key` in the column family `name`, with `opts`.
    pub fn get(
        &self,
        name: &str,
        cf: &ColumnFamily,
        key: &[u8],
        opts: &ReadOptions,
    ) -> Result<Option<ViewValue<'a>>, rocksdb::Error> {
        if let Some(t) = self.tables.by_name(name) {
            match self.overlay.staged(t, key) {
                Staged::Value(v) => return Ok(Some(ViewValue::Staged(v))),
                Staged::Deleted => return Ok(None),
                Staged::Untouched => {}
            }
            if let Some(hot) = self.hot.filter(|h| h.holds(t)) {
                if let Some(v) = hot.get(t, key) {
                    return Ok(Some(ViewValue::Hot(v)));
                }
                let v = self.db.get_pinned_cf_opt(cf, key, opts)?;
                if let Some(v) = &v {
                    hot.remember(t, key, v);
                }
                return Ok(v.map(ViewValue::Db));
            }
        }
        Ok(self.db.get_pinned_cf_opt(cf, key, opts)?.map(ViewValue::Db))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (tempfile::TempDir, DB, Tables) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        let db = DB::open_cf(&o, dir.path(), ["a", "b"]).unwrap();
        let tables = Tables::new(&db, &["a".to_string(), "b".to_string()]).unwrap();
        (dir, db, tables)
    }

    fn read(db: &DB, tables: &Tables, o: &Overlay, cf: &str, k: &[u8]) -> Option<Vec<u8>> {
        let view = ApplyView::new(db, tables, o);
        view.get(cf, db.cf_handle(cf).unwrap(), k, &ReadOptions::default())
            .unwrap()
            .map(|v| v.to_vec())
    }

    /// Reads through the overlay answer what the database answers after
    /// the run's batch is written, and the entry's digest bytes are its
    /// own RocksDB batch.
    #[test]
    fn the_overlay_reads_as_the_written_run() {
        let (_d, db, tables) = db();
        let a = db.cf_handle("a").unwrap();
        for k in ["k1", "k2", "k3", "r1", "r2", "z"] {
            db.put_cf(a, k, "old").unwrap();
        }
        let mut o = Overlay::new(&tables);
        let mut w = EntryWrites::new(&tables);
        w.put_cf(a, "k1", "new");
        w.delete_cf(a, "k2");
        w.put_cf(a, "r5", "staged-then-ranged");
        let mut plain = WriteBatch::default();
        plain.put_cf(a, "k1", "new");
        plain.delete_cf(a, "k2");
        plain.put_cf(a, "r5", "staged-then-ranged");
        assert_eq!(w.data(), plain.data());
        o.absorb(w).unwrap();
        let mut w = EntryWrites::new(&tables);
        w.delete_range_cf(a, "r", "s");
        o.absorb(w).unwrap();
        let mut w = EntryWrites::new(&tables);
        w.put_cf(a, "r2", "back");
        o.absorb(w).unwrap();
        let expect = |o: &Overlay| {
            assert_eq!(
                read(&db, &tables, o, "a", b"k1").as_deref(),
                Some(&b"new"[..])
            );
            assert_eq!(read(&db, &tables, o, "a", b"k2"), None);
            assert_eq!(
                read(&db, &tables, o, "a", b"k3").as_deref(),
                Some(&b"old"[..])
            );
            assert_eq!(read(&db, &tables, o, "a", b"r1"), None);
            assert_eq!(read(&db, &tables, o, "a", b"r5"), None);
            assert_eq!(
                read(&db, &tables, o, "a", b"r2").as_deref(),
                Some(&b"back"[..])
            );
            assert_eq!(
                read(&db, &tables, o, "a", b"z").as_deref(),
                Some(&b"old"[..])
            );
        };
        expect(&o);
        let mut batch = WriteBatch::default();
        o.drain_into(&db, &tables, &mut batch);
        db.write(batch).unwrap();
        assert!(o.is_empty());
        expect(&o);
    }

    /// A write outside the state's tables fails the entry when absorbed.
    #[test]
    fn a_stray_write_is_refused() {
        let (_d, db, _) = db();
        let only_b = Tables::new(&db, &["b".to_string()]).unwrap();
        let mut o = Overlay::new(&only_b);
        let mut w = EntryWrites::new(&only_b);
        w.put_cf(db.cf_handle("a").unwrap(), "k", "v");
        assert_eq!(w.len(), 1);
        assert!(o.absorb(w).is_err());
    }
}
