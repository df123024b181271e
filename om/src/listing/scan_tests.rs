//! The scan engine against a real RocksDB: seeks, tombstones, runs and
//! resumption.

use prost::Message;

use super::*;
use crate::store::keys::{KEYS_CF, TABLE_CFS};

fn scratch_db() -> (tempfile::TempDir, rocksdb::DB) {
    let dir = tempfile::tempdir().unwrap();
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    let db = rocksdb::DB::open_cf(&o, dir.path(), TABLE_CFS).unwrap();
    (dir, db)
}

/// Pages stop before their items pass the byte budget, a larger item
/// goes alone, each page is one seek, and the pages together are the
/// whole table in order.
#[test]
fn pages_stop_by_bytes_and_resume_at_the_first_item_left_out() {
    let (_dir, db) = scratch_db();
    let cf = db.cf_handle(KEYS_CF).unwrap();
    let sizes = [10usize, 30, 30, 5, 100, 1, 1, 1, 60, 40];
    for (i, n) in sizes.iter().enumerate() {
        db.put_cf(cf, format!("k{i}"), vec![b'x'; *n]).unwrap();
    }
    let budget = 64;
    let mut start = Start::Beginning;
    let mut pages: Vec<Vec<usize>> = Vec::new();
    loop {
        let spec = ScanSpec {
            table: KEYS_CF,
            parent: b"",
            prefix: b"",
            delimiter: b"",
            start: start.clone(),
            max: 1000,
            seek_after: usize::MAX,
            terminator: None,
            current_only: None,
            at: None,
        };
        let page = scan_page_within(&db, &spec, budget, |item| match item {
            Item::Entry { value, .. } => Ok((value.len(), value.len())),
            Item::CommonPrefix(_) => unreachable!(),
        })
        .unwrap();
        assert_eq!(page.stats.seeks, 1);
        let total: usize = page.items.iter().sum();
        assert!(total <= budget || page.items.len() == 1, "{:?}", page.items);
        pages.push(page.items);
        match page.resume {
            Some(r) => start = Start::At(r),
            None => break,
        }
    }
    assert_eq!(
        pages,
        vec![
            vec![10, 30],
            vec![30, 5],
            vec![100],
            vec![1, 1, 1, 60],
            vec![40]
        ]
    );
}

#[test]
fn resuming_a_scan_is_one_seek_past_any_deletions() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_disable_auto_compactions(true);
    let db = rocksdb::DB::open_cf(&o, dir.path(), TABLE_CFS).unwrap();
    let cf = db.cf_handle(KEYS_CF).unwrap();
    for i in 0..3000 {
        db.put_cf(cf, format!("k{i:05}"), b"v").unwrap();
    }
    // The scan visited k00000..k00999 and saved its cursor.
    let mut it = DeferredSeekIter::new(&db, KEYS_CF, None, None).unwrap();
    it.seek_to_first();
    let mut last = Vec::new();
    for _ in 0..1000 {
        last = it.current().unwrap().0.to_vec();
        it.advance();
    }
    let cursor = ScanCursor::after(KEYS_CF, &last);
    let saved = cursor.encode_to_vec();
    // Everything before the cursor is deleted meanwhile (a purge).
    for i in 0..2000 {
        db.delete_cf(cf, format!("k{i:05}")).unwrap();
    }
    let cursor = ScanCursor::decode(saved.as_slice()).unwrap();
    let mut it = DeferredSeekIter::new(&db, KEYS_CF, None, None).unwrap();
    cursor.resume(&mut it);
    assert_eq!(it.current().unwrap().0, b"k02000");
    assert_eq!(it.stats().seeks, 1);
    assert_eq!(
        it.stats().tombstones,
        1000,
        "only the deletions after the cursor"
    );
}

/// A versioned table: `name` current entries (value "L" listed, "D" a
/// hidden delete marker) followed by `name \0 !version` history.
fn versioned_db(keys: &[(&str, bool, usize)]) -> (tempfile::TempDir, rocksdb::DB) {
    let dir = tempfile::tempdir().unwrap();
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    let db = rocksdb::DB::open_cf(&o, dir.path(), TABLE_CFS).unwrap();
    let cf = db.cf_handle(KEYS_CF).unwrap();
    for (name, live, history) in keys {
        db.put_cf(cf, name, if *live { b"L" } else { b"D" })
            .unwrap();
        for v in 0..*history as u64 {
            let mut k = name.as_bytes().to_vec();
            k.push(0);
            k.extend_from_slice(&(!v).to_be_bytes());
            db.put_cf(cf, k, b"L").unwrap();
        }
    }
    (dir, db)
}

fn hidden(v: &[u8]) -> bool {
    v == b"D"
}

/// Every page of a current-versions listing, with each page's stats.
fn list_current(
    db: &rocksdb::DB,
    prefix: &str,
    delimiter: &str,
    max: usize,
    start: Start,
) -> (Vec<Item>, Vec<IterStats>) {
    let mut start = start;
    let (mut items, mut stats) = (Vec::new(), Vec::new());
    loop {
        let page = scan_page(
            db,
            &ScanSpec {
                table: KEYS_CF,
                parent: b"",
                prefix: prefix.as_bytes(),
                delimiter: delimiter.as_bytes(),
                start: start.clone(),
                max,
                seek_after: 3,
                terminator: None,
                current_only: Some(CurrentOnly { hidden }),
                at: None,
            },
        )
        .unwrap();
        items.extend(page.items);
        stats.push(page.stats);
        match page.resume {
            Some(r) => start = Start::At(r),
            None => return (items, stats),
        }
    }
}

#[test]
fn current_versions_listing_equals_a_naive_model_and_seeks_past_history() {
    // A small deterministic generator: names over "ab/", each with a
    // random history length and a live or hidden current entry.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for round in 0..40 {
        let mut names = std::collections::BTreeMap::new();
        for _ in 0..(5 + next(40)) {
            let len = 1 + next(5);
            let name: String = (0..len)
                .map(|_| ["a", "b", "/"][next(3) as usize])
                .collect();
            let history = [0, 0, 1, 2, 5, 40][next(6) as usize];
            names.insert(name, (next(4) != 0, history));
        }
        let keys: Vec<(&str, bool, usize)> = names
            .iter()
            .map(|(n, (l, h))| (n.as_str(), *l, *h))
            .collect();
        let (_dir, db) = versioned_db(&keys);
        for (prefix, delimiter) in [("", ""), ("", "/"), ("a", "/"), ("a/", ""), ("b", "b")] {
            let mut want: Vec<Item> = Vec::new();
            for (name, live, _) in &keys {
                if !live || !name.starts_with(prefix) {
                    continue;
                }
                let item =
                    match common_prefix(name.as_bytes(), prefix.as_bytes(), delimiter.as_bytes()) {
                        Some(cp) => Item::CommonPrefix(cp.to_vec()),
                        None => Item::Entry {
                            name: name.as_bytes().to_vec(),
                            value: b"L".to_vec(),
                        },
                    };
                if want.last() != Some(&item) {
                    want.push(item);
                }
            }
            for max in [1, 2, 7, 1000] {
                let (got, stats) = list_current(&db, prefix, delimiter, max, Start::Beginning);
                assert_eq!(
                    got, want,
                    "round {round} prefix {prefix:?} delimiter {delimiter:?} max {max}"
                );
                for s in &stats[1..] {
                    assert!(s.seeks >= 1);
                }
            }
            // Start-after every listed key: the rest of the listing.
            if delimiter.is_empty() {
                for (i, item) in want.iter().enumerate() {
                    let Item::Entry { name, .. } = item else {
                        unreachable!()
                    };
                    let (got, _) = list_current(&db, prefix, "", 1000, Start::After(name.clone()));
                    assert_eq!(got, want[i + 1..], "after {name:?}");
                }
            }
        }
    }
}

#[test]
fn a_long_history_costs_n_operations_and_single_versions_no_seek() {
    // 100 keys with one version each: one seek for the whole page.
    let single: Vec<String> = (0..100).map(|i| format!("k{i:03}")).collect();
    let keys: Vec<(&str, bool, usize)> = single.iter().map(|n| (n.as_str(), true, 0)).collect();
    let (_d, db) = versioned_db(&keys);
    let (items, stats) = list_current(&db, "", "", 1000, Start::Beginning);
    assert_eq!(items.len(), 100);
    assert_eq!((stats[0].seeks, stats[0].nexts), (1, 100));
    // 20 keys with 1,000 noncurrent versions each, half behind a delete
    // marker: N = 3 operations per key (two nexts, one seek).
    let long: Vec<String> = (0..20).map(|i| format!("k{i:03}")).collect();
    let keys: Vec<(&str, bool, usize)> = long
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i % 2 == 0, 1000))
        .collect();
    let (_d, db) = versioned_db(&keys);
    let (items, stats) = list_current(&db, "", "", 1000, Start::Beginning);
    assert_eq!(items.len(), 10);
    assert_eq!(stats[0].seeks, 1 + 20);
    assert_eq!(stats[0].nexts, 20 * 2);
    // Pages of 3: each resumes at a listed key with one seek, and seeks
    // past each history it meets, no more.
    let (items, stats) = list_current(&db, "", "", 3, Start::Beginning);
    assert_eq!(items.len(), 10);
    let seeks: u64 = stats.iter().map(|s| s.seeks).sum();
    assert_eq!(seeks, stats.len() as u64 + 20);
    let (after, stats) = list_current(&db, "", "", 1000, Start::After(b"k000".to_vec()));
    assert_eq!(after.len(), 9);
    assert_eq!(stats[0].seeks, 1 + 19);
}
