//! `StateRead`: the one way apply reads the state.
//!
//! Apply runs committed entries in runs and writes each run as one batch
//! (`om_raft_store::overlay`), so an entry must read the database *under*
//! the writes the entries before it in the run staged. Every read in apply
//! takes a `StateRead`: the run's `ApplyView` in apply, the database itself
//! for reads outside apply (the gRPC read paths share helpers such as
//! `fs::stat` with apply). A point read and an iterator read the same
//! state through either.

use om_raft_store::{ApplyView, Overlay, ViewValue};
use rocksdb::{ColumnFamily, DB, ReadOptions};

use super::iter::{DeferredSeekIter, IterStats};
use crate::error::OmError;

/// Something apply's reads can go through: the database, or a run's view.
pub trait StateRead {
    /// The database underneath (column family handles, and the tables apply
    /// only reads, which no run stages).
    fn rocks(&self) -> &DB;

    /// A point read of `key` in `table`.
    fn read(
        &self,
        table: &str,
        cf: &ColumnFamily,
        key: &[u8],
    ) -> Result<Option<ViewValue<'_>>, OmError>;

    /// An iterator over `[lower, upper)` of `table`; positions nothing.
    fn iter(
        &self,
        table: &'static str,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    ) -> Result<ViewIter<'_>, OmError>;

    /// An iterator over every key of `table` starting with `prefix`.
    fn iter_prefix(&self, table: &'static str, prefix: &[u8]) -> Result<ViewIter<'_>, OmError> {
        let lower = (!prefix.is_empty()).then(|| prefix.to_vec());
        self.iter(table, lower, super::keys::prefix_end(prefix))
    }
}

fn with_defaults<R>(f: impl FnOnce(&ReadOptions) -> R) -> R {
    // One set of options per thread serves every point read: creating and
    // dropping them for each read was about 1 % of a PutKey's instructions.
    thread_local! {
        static DEFAULTS: ReadOptions = ReadOptions::default();
    }
    DEFAULTS.with(f)
}

impl StateRead for DB {
    fn rocks(&self) -> &DB {
        self
    }

    fn read(
        &self,
        _table: &str,
        cf: &ColumnFamily,
        key: &[u8],
    ) -> Result<Option<ViewValue<'_>>, OmError> {
        Ok(with_defaults(|o| self.get_pinned_cf_opt(cf, key, o))?.map(ViewValue::Db))
    }

    fn iter(
        &self,
        table: &'static str,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    ) -> Result<ViewIter<'_>, OmError> {
        Ok(ViewIter::plain(DeferredSeekIter::new(
            self, table, lower, upper,
        )?))
    }
}

impl<T: StateRead + ?Sized> StateRead for std::sync::Arc<T> {
    fn rocks(&self) -> &DB {
        (**self).rocks()
    }

    fn read(
        &self,
        table: &str,
        cf: &ColumnFamily,
        key: &[u8],
    ) -> Result<Option<ViewValue<'_>>, OmError> {
        (**self).read(table, cf, key)
    }

    fn iter(
        &self,
        table: &'static str,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    ) -> Result<ViewIter<'_>, OmError> {
        (**self).iter(table, lower, upper)
    }
}

impl StateRead for ApplyView<'_> {
    fn rocks(&self) -> &DB {
        self.db()
    }

    fn read(
        &self,
        table: &str,
        cf: &ColumnFamily,
        key: &[u8],
    ) -> Result<Option<ViewValue<'_>>, OmError> {
        Ok(with_defaults(|o| self.get(table, cf, key, o))?)
    }

    fn iter(
        &self,
        table: &'static str,
        lower: Option<Vec<u8>>,
        upper: Option<Vec<u8>>,
    ) -> Result<ViewIter<'_>, OmError> {
        let db = DeferredSeekIter::new(self.db(), table, lower.clone(), upper.clone())?;
        let overlay = self.overlay();
        Ok(match self.table(table) {
            Some(t) if overlay.touched(t) => ViewIter {
                db,
                staged: Some(Staged {
                    overlay,
                    table: t,
                    lower,
                    upper,
                    points: None,
                }),
                current: Current::Unpositioned,
            },
            _ => ViewIter::plain(db),
        })
    }
}

/// The staged entries of a table from a position on.
type StagedPoints<'a> =
    std::iter::Peekable<std::collections::btree_map::Range<'a, Vec<u8>, Option<Vec<u8>>>>;

/// The run's point entries of one table, merged into a database iterator.
struct Staged<'a> {
    overlay: &'a Overlay,
    table: usize,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    /// The staged entries not yet passed, from the last positioning.
    points: Option<StagedPoints<'a>>,
}

impl<'a> Staged<'a> {
    fn position(&mut self, from: &[u8]) {
        let from = match &self.lower {
            Some(l) if from < l.as_slice() => l.as_slice(),
            _ => from,
        };
        self.points = Some(
            self.overlay
                .points(self.table, from, self.upper.as_deref())
                .peekable(),
        );
    }
}

#[derive(Clone, Copy)]
enum Current<'a> {
    Unpositioned,
    Db,
    Staged(&'a [u8], &'a [u8]),
    End,
}

/// A forward iterator over the state as a `StateRead` sees it. Over the
/// database alone (or a table the run has not touched) it is exactly a
/// `DeferredSeekIter`; over a run's view it merges the run's staged
/// entries in, hides the database entries they overwrite or delete, and
/// steps over ranges the run deleted with one seek.
pub struct ViewIter<'a> {
    db: DeferredSeekIter<'a>,
    staged: Option<Staged<'a>>,
    current: Current<'a>,
}

impl<'a> ViewIter<'a> {
    fn plain(db: DeferredSeekIter<'a>) -> ViewIter<'a> {
        ViewIter {
            db,
            staged: None,
            current: Current::Unpositioned,
        }
    }

    /// Positions at the first entry `>= key` (clamped to the lower bound).
    pub fn seek(&mut self, key: &[u8]) {
        self.db.seek(key);
        if let Some(s) = &mut self.staged {
            s.position(key);
            self.settle();
        }
    }

    /// Positions at the first entry strictly after `key`.
    pub fn seek_after(&mut self, key: &[u8]) {
        self.seek(&super::keys::key_successor(key));
    }

    pub fn seek_to_first(&mut self) {
        self.db.seek_to_first();
        if let Some(s) = &mut self.staged {
            s.position(b"");
            self.settle();
        }
    }

    fn ensure_positioned(&mut self) {
        if self.staged.is_some() && matches!(self.current, Current::Unpositioned) {
            self.seek_to_first();
        }
    }

    /// Moves to the entry the merged view shows next, from wherever the
    /// database iterator and the staged entries stand.
    fn settle(&mut self) {
        let Some(s) = &mut self.staged else { return };
        let points = s.points.as_mut().expect("positioned");
        loop {
            // A database entry inside a range the run deleted: seek past it.
            if s.overlay.has_ranges(s.table)
                && let Some(end) = self
                    .db
                    .current()
                    .and_then(|(k, _)| s.overlay.masked_until(s.table, k))
            {
                let end = end.to_vec();
                self.db.seek(&end);
                continue;
            }
            let db_key = self.db.current().map(|(k, _)| k);
            match (db_key, points.peek().copied()) {
                (None, None) => {
                    self.current = Current::End;
                    return;
                }
                (Some(_), None) => {
                    self.current = Current::Db;
                    return;
                }
                (Some(d), Some((p, _))) if d < p.as_slice() => {
                    self.current = Current::Db;
                    return;
                }
                (Some(d), Some((p, _))) if d == p.as_slice() => {
                    // The staged entry overrides the database's.
                    self.db.advance();
                }
                (_, Some((_, None))) => {
                    // Deleted by the run.
                    points.next();
                }
                (_, Some((p, Some(v)))) => {
                    self.current = Current::Staged(p.as_slice(), v.as_slice());
                    return;
                }
            }
        }
    }

    /// Whether there is a current entry; positions an unpositioned iterator once.
    pub fn has_current(&mut self) -> bool {
        self.current().is_some()
    }

    /// The current entry, positioning an unpositioned iterator once.
    pub fn current(&mut self) -> Option<(&[u8], &[u8])> {
        if self.staged.is_none() {
            return self.db.current();
        }
        self.ensure_positioned();
        match self.current {
            Current::Staged(k, v) => Some((k, v)),
            Current::Db => self.db.current(),
            Current::End | Current::Unpositioned => None,
        }
    }

    /// Moves to the next entry.
    pub fn advance(&mut self) {
        if self.staged.is_none() {
            return self.db.advance();
        }
        self.ensure_positioned();
        match self.current {
            Current::Db => self.db.advance(),
            Current::Staged(..) => {
                if let Some(p) = self.staged.as_mut().and_then(|s| s.points.as_mut()) {
                    p.next();
                }
            }
            Current::End | Current::Unpositioned => return,
        }
        self.settle();
    }

    /// The native error, if iteration stopped on one rather than at the end.
    pub fn status(&self) -> Result<(), OmError> {
        self.db.status()
    }

    /// Native operations of the database iterator underneath.
    pub fn stats(&self) -> IterStats {
        self.db.stats()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use om_raft_store::{EntryWrites, Overlay};
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::store::keys::KEYS_CF;

    /// A view iterator over random database contents and random staged
    /// puts, deletions and deleted ranges lists exactly what the database
    /// holds once the run is written, from any seek target.
    #[test]
    fn a_view_iterates_as_the_written_run() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for round in 0..40 {
            let dir = tempfile::tempdir().unwrap();
            let mut o = rocksdb::Options::default();
            o.create_if_missing(true);
            o.create_missing_column_families(true);
            let db = DB::open_cf(&o, dir.path(), crate::store::keys::TABLE_CFS).unwrap();
            let tables = crate::apply::state_tables(&db).unwrap();
            let cf = db.cf_handle(KEYS_CF).unwrap();
            let key = |rng: &mut rand::rngs::StdRng| format!("p/{:02}", rng.random_range(0..40u8));
            for _ in 0..rng.random_range(0..30) {
                db.put_cf(cf, key(&mut rng), format!("db{round}")).unwrap();
            }
            let mut overlay = Overlay::new(&tables);
            for e in 0..rng.random_range(1..6) {
                let mut w = EntryWrites::new(&tables);
                for _ in 0..rng.random_range(0..8) {
                    match rng.random_range(0..4) {
                        0 | 1 => w.put_cf(cf, key(&mut rng), format!("staged{e}")),
                        2 => w.delete_cf(cf, key(&mut rng)),
                        _ => {
                            let (a, b) = (key(&mut rng), key(&mut rng));
                            w.delete_range_cf(cf, a.clone().min(b.clone()), a.max(b));
                        }
                    }
                }
                overlay.absorb(w).unwrap();
            }
            let (lower, upper) = (b"p/05".to_vec(), b"p/35".to_vec());
            let listed = |it: &mut ViewIter<'_>| {
                let mut out = BTreeMap::new();
                while let Some((k, v)) = it.current() {
                    out.insert(k.to_vec(), v.to_vec());
                    it.advance();
                }
                it.status().unwrap();
                out
            };
            let target = key(&mut rng).into_bytes();
            let point = key(&mut rng).into_bytes();
            let (before, before_from, read) = {
                let view = ApplyView::new(&db, &tables, &overlay);
                let mut it = view
                    .iter(KEYS_CF, Some(lower.clone()), Some(upper.clone()))
                    .unwrap();
                let before = listed(&mut it);
                let mut it = view
                    .iter(KEYS_CF, Some(lower.clone()), Some(upper.clone()))
                    .unwrap();
                it.seek(&target);
                let before_from = listed(&mut it);
                let read = view.read(KEYS_CF, cf, &point).unwrap().map(|v| v.to_vec());
                (before, before_from, read)
            };
            let mut batch = rocksdb::WriteBatch::default();
            overlay.drain_into(&db, &tables, &mut batch);
            db.write(batch).unwrap();
            let mut it = db.iter(KEYS_CF, Some(lower), Some(upper)).unwrap();
            let after = listed(&mut it);
            assert_eq!(before, after, "round {round}");
            let expect: BTreeMap<_, _> = after.into_iter().filter(|(k, _)| *k >= target).collect();
            assert_eq!(before_from, expect, "round {round} from {target:?}");
            assert_eq!(read, db.get_cf(cf, &point).unwrap(), "round {round}");
        }
    }
}
