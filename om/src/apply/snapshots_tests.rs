//! Snapshots of a bucket: what a snapshot shows while the bucket changes,
//! the blocks it keeps, and what deleting it releases.

use super::tests::{Sm, setup, versioning};
use super::*;
use crate::listing::{CurrentOnly, ScanSpec, Start, scan_page};
use crate::store::table::{BucketTable, DeletedBlocksTable, KeyTable, RetainedKeyTable};
use om_proto::store as st;

const MIB: u64 = 1 << 20;

fn put(sm: &mut Sm, key: &str, size: u64, etag: &str) -> KeyRecord {
    match sm.ok(Op::PutKey(st::PutKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        size,
        block_size: MIB,
        etag: etag.into(),
        ..Default::default()
    })) {
        command_result::Result::Key(k) => k.key.unwrap(),
        other => panic!("{other:?}"),
    }
}

fn delete(sm: &mut Sm, key: &str, version_id: &str) {
    sm.ok(Op::DeleteKey(st::DeleteKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        version_id: version_id.into(),
        conditions: None,
    }));
}

fn snapshot(sm: &mut Sm, name: &str) -> u64 {
    match sm.ok(Op::CreateSnapshot(st::CreateSnapshot {
        volume: "vol".into(),
        bucket: "bkt".into(),
        name: name.into(),
    })) {
        command_result::Result::Snapshot(s) => s.index,
        other => panic!("{other:?}"),
    }
}

fn drop_snapshot(sm: &mut Sm, name: &str) -> u64 {
    match sm.ok(Op::DeleteSnapshot(st::DeleteSnapshot {
        volume: "vol".into(),
        bucket: "bkt".into(),
        name: name.into(),
    })) {
        command_result::Result::Snapshot(s) => s.index,
        other => panic!("{other:?}"),
    }
}

/// Reclaims deleted snapshot `index` in pages of `max`; returns the pages.
fn reclaim(sm: &mut Sm, index: u64, max: u32) -> usize {
    let mut pages = 0;
    loop {
        let (r, _) = sm.apply(Op::ReclaimSnapshot(st::ReclaimSnapshot {
            volume: "vol".into(),
            bucket: "bkt".into(),
            index,
            max,
        }));
        match into_outcome(r) {
            Ok(_) => pages += 1,
            Err(OmError::Request { reason, .. }) if reason == "STALE_RECLAIM_PAGE" => {
                return pages;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
}

fn at(sm: &Sm, key: &str, index: u64) -> Option<KeyRecord> {
    crate::store::snapshot::key_at(&sm.db, &keys::object_key("vol", "bkt", key), index).unwrap()
}

/// Names (and ETags) of the bucket's current keys as the snapshot at
/// `index` shows them, read in pages of `max`.
fn list_at(sm: &Sm, index: Option<u64>, max: usize, versioned: bool) -> Vec<(String, String)> {
    let parent = keys::object_prefix("vol", "bkt");
    let mut out = Vec::new();
    let mut start = Start::Beginning;
    loop {
        let page = scan_page(
            &sm.db,
            &ScanSpec {
                table: keys::KEYS_CF,
                parent: &parent,
                prefix: b"",
                delimiter: b"",
                start,
                max,
                seek_after: 2,
                terminator: None,
                current_only: versioned.then_some(CurrentOnly {
                    hidden: crate::service::versions::is_delete_marker,
                }),
                at: index,
            },
        )
        .unwrap();
        for item in page.items {
            if let crate::listing::Item::Entry { name, value } = item {
                let rec = table::decode::<KeyTable>(&value).unwrap();
                out.push((String::from_utf8(name).unwrap(), rec.etag));
            }
        }
        match page.resume {
            Some(r) => start = Start::At(r),
            None => return out,
        }
    }
}

fn count(sm: &Sm, cf: &str) -> usize {
    sm.db
        .iterator_cf(sm.db.cf_handle(cf).unwrap(), rocksdb::IteratorMode::Start)
        .count()
}

fn freed_blocks(sm: &Sm) -> Vec<u64> {
    let mut ids: Vec<u64> = sm
        .db
        .iterator_cf(
            sm.db.cf_handle(keys::DELETED_BLOCKS_CF).unwrap(),
            rocksdb::IteratorMode::Start,
        )
        .flat_map(|kv| {
            table::decode::<DeletedBlocksTable>(&kv.unwrap().1)
                .unwrap()
                .blocks
                .into_iter()
                .map(|b| b.block_id)
        })
        .collect();
    ids.sort();
    ids
}

fn ids(k: &KeyRecord) -> Vec<u64> {
    k.blocks.iter().map(|b| b.block_id).collect()
}

fn bucket(sm: &Sm) -> BucketRecord {
    table::get::<BucketTable>(&sm.db, &keys::bucket_key("vol", "bkt"))
        .unwrap()
        .unwrap()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// A snapshot copies nothing, and shows the bucket as it was however the
/// bucket changes after it: overwrites, deletes, renames, tag changes and
/// new keys. What left the bucket keeps its blocks while the snapshot shows
/// it; deleting the snapshot releases them, page by page.
#[test]
fn a_snapshot_shows_the_bucket_as_it_was_and_keeps_its_blocks() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let a1 = put(&mut sm, "a", 2 * MIB, "a1");
    let b1 = put(&mut sm, "b", MIB, "b1");
    put(&mut sm, "c", MIB, "c1");
    put(&mut sm, "c/x", MIB, "cx");
    let (_, staged) = sm.apply(Op::CreateSnapshot(st::CreateSnapshot {
        volume: "vol".into(),
        bucket: "bkt".into(),
        name: "s1".into(),
    }));
    // The record, its index entry and the bucket: nothing per key.
    assert_eq!(staged, 3);
    let s1 = bucket(&sm).latest_snapshot;
    assert_eq!(count(&sm, keys::SNAPSHOT_KEYS_CF), 0);

    put(&mut sm, "a", MIB, "a2");
    delete(&mut sm, "b", "");
    put(&mut sm, "d", MIB, "d1");
    sm.ok(Op::RenameKey(st::RenameKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        from: "c".into(),
        to: "e".into(),
    }));
    sm.ok(Op::PutKeyTagging(st::PutKeyTagging {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "c/x".into(),
        tags: [("k".to_string(), "v".to_string())].into(),
        ..Default::default()
    }));

    assert_eq!(at(&sm, "a", s1).unwrap().etag, "a1");
    assert_eq!(at(&sm, "b", s1).unwrap().etag, "b1");
    assert_eq!(at(&sm, "c", s1).unwrap().etag, "c1");
    assert!(at(&sm, "c/x", s1).unwrap().tags.is_empty());
    assert_eq!(at(&sm, "d", s1), None);
    assert_eq!(at(&sm, "e", s1), None);
    let then = pairs(&[("a", "a1"), ("b", "b1"), ("c", "c1"), ("c/x", "cx")]);
    for max in [1, 2, 1000] {
        assert_eq!(list_at(&sm, Some(s1), max, false), then, "pages of {max}");
    }
    assert_eq!(
        list_at(&sm, None, 1000, false),
        pairs(&[("a", "a2"), ("c/x", "cx"), ("d", "d1"), ("e", "c1")])
    );
    // Nothing the snapshot shows was released.
    assert_eq!(freed_blocks(&sm), Vec::<u64>::new());

    // The bucket cannot go while it holds a snapshot.
    for k in ["a", "c/x", "d", "e"] {
        delete(&mut sm, k, "");
    }
    let delete_bucket = Op::DeleteBucket(st::DeleteBucket {
        volume: "vol".into(),
        name: "bkt".into(),
    });
    assert_eq!(sm.rejected(delete_bucket.clone()), "BUCKET_HAS_SNAPSHOTS");
    assert_eq!(list_at(&sm, Some(s1), 1, false), then);

    assert_eq!(drop_snapshot(&mut sm, "s1"), s1);
    assert_eq!(bucket(&sm).latest_snapshot, 0);
    assert_eq!(sm.rejected(delete_bucket.clone()), "BUCKET_HAS_SNAPSHOTS");
    let retained = count(&sm, keys::SNAPSHOT_KEYS_CF);
    assert_eq!(retained, 4, "a1, b1, c1, and cx before its tags");
    assert_eq!(reclaim(&mut sm, s1, 2), retained.div_ceil(2));
    assert_eq!(count(&sm, keys::SNAPSHOT_KEYS_CF), 0);
    // Every block went once, when its last holder let go.
    let mut all = ids(&a1);
    all.extend(ids(&b1));
    let freed = freed_blocks(&sm);
    assert!(all.iter().all(|id| freed.contains(id)), "{freed:?}");
    let mut dedup = freed.clone();
    dedup.dedup();
    assert_eq!(dedup, freed, "no block released twice");
    assert_eq!(freed.len(), 7, "a1 (2), b1, c1, cx, a2, d1");
    assert_eq!(bucket(&sm).snapshot_count, 0);
    sm.ok(delete_bucket);
}

/// Deleting one of two snapshots drops only what no other one shows.
#[test]
fn deleting_a_snapshot_keeps_what_another_one_shows() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let a1 = put(&mut sm, "a", MIB, "a1");
    let s1 = snapshot(&mut sm, "s1");
    let a2 = put(&mut sm, "a", MIB, "a2");
    let s2 = snapshot(&mut sm, "s2");
    let a3 = put(&mut sm, "a", MIB, "a3");
    put(&mut sm, "z", MIB, "z1");
    let s3 = snapshot(&mut sm, "s3");
    assert_eq!(at(&sm, "a", s1).unwrap().etag, "a1");
    assert_eq!(at(&sm, "a", s2).unwrap().etag, "a2");
    assert_eq!(at(&sm, "a", s3).unwrap().etag, "a3");
    assert_eq!(at(&sm, "z", s2), None);

    // s2 alone showed a2.
    drop_snapshot(&mut sm, "s2");
    assert_eq!(bucket(&sm).latest_snapshot, s3);
    reclaim(&mut sm, s2, 1000);
    assert_eq!(freed_blocks(&sm), ids(&a2));
    assert_eq!(at(&sm, "a", s1).unwrap().etag, "a1");
    assert_eq!(list_at(&sm, Some(s1), 1, false), pairs(&[("a", "a1")]));
    // The newest going leaves the one before as the latest.
    drop_snapshot(&mut sm, "s3");
    assert_eq!(bucket(&sm).latest_snapshot, s1);
    reclaim(&mut sm, s3, 1000);
    assert_eq!(freed_blocks(&sm), ids(&a2), "a3 is live");
    drop_snapshot(&mut sm, "s1");
    reclaim(&mut sm, s1, 1000);
    let mut want = ids(&a1);
    want.extend(ids(&a2));
    want.sort();
    assert_eq!(freed_blocks(&sm), want);
    assert!(!freed_blocks(&sm).iter().any(|id| ids(&a3).contains(id)));
    // Without snapshots an overwrite releases at once again.
    put(&mut sm, "a", MIB, "a4");
    want.extend(ids(&a3));
    want.sort();
    assert_eq!(freed_blocks(&sm), want);
}

/// In a versioned bucket a snapshot shows each key's current version as it
/// was: later versions, delete markers and permanent deletions of
/// versions do not change it, and no block it shows is released.
#[test]
fn a_snapshot_of_a_versioned_bucket_keeps_its_current_versions() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    versioning(&mut sm, crate::apply::versions::ENABLED);
    let a1 = put(&mut sm, "a", MIB, "a1");
    put(&mut sm, "b", MIB, "b1");
    let s1 = snapshot(&mut sm, "s1");
    let a2 = put(&mut sm, "a", MIB, "a2");
    delete(&mut sm, "b", "");
    // Both of a's versions removed for good, newest first.
    delete(&mut sm, "a", &versions::version_id(&a2));
    delete(&mut sm, "a", &versions::version_id(&a1));
    put(&mut sm, "c", MIB, "c1");
    assert_eq!(
        list_at(&sm, Some(s1), 1, true),
        pairs(&[("a", "a1"), ("b", "b1")])
    );
    assert_eq!(list_at(&sm, None, 1000, true), pairs(&[("c", "c1")]));
    assert_eq!(
        freed_blocks(&sm),
        ids(&a2),
        "only a2, which s1 never showed"
    );
    drop_snapshot(&mut sm, "s1");
    reclaim(&mut sm, s1, 3);
    assert_eq!(count(&sm, keys::SNAPSHOT_KEYS_CF), 0);
    assert!(freed_blocks(&sm).contains(&ids(&a1)[0]));
}

/// A continuation or marker at a name whose earlier versions the snapshot
/// retained resumes after it, not at its retained copy.
#[test]
fn a_snapshot_listing_resumes_after_a_marker() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    for k in ["a", "b", "c"] {
        put(&mut sm, k, MIB, k);
    }
    let s1 = snapshot(&mut sm, "s1");
    for k in ["a", "b", "c"] {
        put(&mut sm, k, MIB, "new");
    }
    let parent = keys::object_prefix("vol", "bkt");
    let page = scan_page(
        &sm.db,
        &ScanSpec {
            table: keys::KEYS_CF,
            parent: &parent,
            prefix: b"",
            delimiter: b"",
            start: Start::After(b"a".to_vec()),
            max: 10,
            seek_after: usize::MAX,
            terminator: None,
            current_only: None,
            at: Some(s1),
        },
    )
    .unwrap();
    let names: Vec<Vec<u8>> = page
        .items
        .into_iter()
        .filter_map(|i| match i {
            crate::listing::Item::Entry { name, .. } => Some(name),
            _ => None,
        })
        .collect();
    assert_eq!(names, vec![b"b".to_vec(), b"c".to_vec()]);
    assert_eq!(page.stats.seeks, 2, "one seek in each table");
}

/// Refusals name the field and stage nothing.
#[test]
fn snapshot_refusals_change_nothing() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    snapshot(&mut sm, "s1");
    snapshot(&mut sm, "s2");
    let create = |name: &str| {
        Op::CreateSnapshot(st::CreateSnapshot {
            volume: "vol".into(),
            bucket: "bkt".into(),
            name: name.into(),
        })
    };
    assert_eq!(sm.rejected(create("s1")), "SNAPSHOT_ALREADY_EXISTS");
    assert_eq!(sm.rejected(create("a/b")), "INVALID_SNAPSHOT_NAME");
    assert_eq!(sm.rejected(create("..")), "INVALID_SNAPSHOT_NAME");
    assert_eq!(
        sm.rejected(Op::RenameSnapshot(st::RenameSnapshot {
            volume: "vol".into(),
            bucket: "bkt".into(),
            name: "s1".into(),
            new_name: "s2".into(),
        })),
        "SNAPSHOT_ALREADY_EXISTS"
    );
    assert_eq!(
        sm.rejected(Op::DeleteSnapshot(st::DeleteSnapshot {
            volume: "vol".into(),
            bucket: "bkt".into(),
            name: "nope".into(),
        })),
        "SNAPSHOT_NOT_FOUND"
    );
    assert_eq!(
        sm.rejected_rules(create("s3"), crate::rules::BUCKET_SNAPSHOTS.since - 1),
        "UNSUPPORTED_COMMAND"
    );
    sm.ok(Op::CreateBucket(st::CreateBucket {
        volume: "vol".into(),
        name: "fso".into(),
        layout: LAYOUT_FSO,
        ..Default::default()
    }));
    assert_eq!(
        sm.rejected(Op::CreateSnapshot(st::CreateSnapshot {
            volume: "vol".into(),
            bucket: "fso".into(),
            name: "s".into(),
        })),
        "UNSUPPORTED_BUCKET_LAYOUT"
    );
    // A rename keeps the index; the old name is gone.
    match sm.ok(Op::RenameSnapshot(st::RenameSnapshot {
        volume: "vol".into(),
        bucket: "bkt".into(),
        name: "s1".into(),
        new_name: "first".into(),
    })) {
        command_result::Result::Snapshot(s) => assert_eq!(s.name, "first"),
        other => panic!("{other:?}"),
    }
    assert_eq!(sm.rejected(create("first")), "SNAPSHOT_ALREADY_EXISTS");
    sm.ok(create("s1"));
    assert!(
        table::get::<RetainedKeyTable>(&sm.db, b"x")
            .unwrap()
            .is_none()
    );
}

fn diff_all(
    sm: &Sm,
    from: u64,
    to: Option<u64>,
    max: usize,
) -> (Vec<(String, u32)>, u64, u64, u64) {
    let (mut out, mut examined, mut seeks, mut pages) = (Vec::new(), 0, 0, 0);
    let mut resume: Option<Vec<u8>> = None;
    loop {
        let p = crate::store::snapshot::diff_page(
            &sm.db,
            "vol",
            "bkt",
            from,
            to,
            resume.as_deref(),
            max,
            u64::MAX,
        )
        .unwrap();
        out.extend(
            p.changes
                .iter()
                .map(|c| (String::from_utf8(c.name.clone()).unwrap(), c.kind)),
        );
        examined += p.examined;
        seeks += p.stats.seeks;
        pages += 1;
        match p.resume {
            Some(r) => resume = Some(r),
            None => return (out, examined, seeks, pages),
        }
    }
}

/// A diff reads the bucket's change log, not its images: its reads follow
/// the changes (each page one seek), a key changed several times is
/// reported once, and what it reports matches the two images.
#[test]
fn a_diff_reads_the_changes_not_the_bucket() {
    use crate::store::snapshot::{DIFF_CREATED, DIFF_DELETED, DIFF_MODIFIED};
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let n = 5_000;
    for chunk in (0..n).collect::<Vec<_>>().chunks(256) {
        sm.ok(Op::PutKeys(st::PutKeys {
            volume: "vol".into(),
            bucket: "bkt".into(),
            keys: chunk
                .iter()
                .map(|i| st::NewKey {
                    key: format!("k{i:05}"),
                    size: 1,
                    etag: "e".into(),
                    ..Default::default()
                })
                .collect(),
            block_size: MIB,
        }));
    }
    // Changes before the first snapshot are not logged.
    put(&mut sm, "k00000", 2, "x");
    assert_eq!(count(&sm, keys::SNAPSHOT_CHANGES_CF), 0);
    let s1 = snapshot(&mut sm, "s1");
    put(&mut sm, "k00010", 2, "v2");
    put(&mut sm, "k00010", 3, "v3");
    delete(&mut sm, "k00020", "");
    put(&mut sm, "new1", 1, "n");
    put(&mut sm, "new2", 1, "n");
    delete(&mut sm, "new2", "");
    sm.ok(Op::RenameKey(st::RenameKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        from: "k00030".into(),
        to: "moved".into(),
    }));
    let s2 = snapshot(&mut sm, "s2");
    put(&mut sm, "k00040", 2, "after");
    delete(&mut sm, "k00010", "");

    let want = vec![
        ("k00010".to_string(), DIFF_MODIFIED),
        ("k00020".to_string(), DIFF_DELETED),
        ("new1".to_string(), DIFF_CREATED),
        ("k00030".to_string(), DIFF_DELETED),
        ("moved".to_string(), DIFF_CREATED),
    ];
    let (got, examined, seeks, _) = diff_all(&sm, s1, Some(s2), 1000);
    assert_eq!(got, want);
    // Eight changes logged between the snapshots (new2 twice, k00010 twice,
    // the rename two): each read once, with one seek.
    assert_eq!((examined, seeks), (8, 1));
    // In pages of two, the same keys, one seek a page.
    let (paged, _, seeks, pages) = diff_all(&sm, s1, Some(s2), 2);
    assert_eq!(paged, want);
    assert_eq!(seeks, pages);
    // Against the live bucket: k00010 is now gone, k00040 changed.
    let (live, _, _, _) = diff_all(&sm, s1, None, 1000);
    assert_eq!(
        live,
        vec![
            ("k00010".to_string(), DIFF_DELETED),
            ("k00020".to_string(), DIFF_DELETED),
            ("new1".to_string(), DIFF_CREATED),
            ("k00030".to_string(), DIFF_DELETED),
            ("moved".to_string(), DIFF_CREATED),
            ("k00040".to_string(), DIFF_MODIFIED),
        ]
    );
    assert_eq!(
        diff_all(&sm, s2, None, 1000).0,
        vec![
            ("k00040".to_string(), DIFF_MODIFIED),
            ("k00010".to_string(), DIFF_DELETED),
        ]
    );
    // A full walk of both images reads every key of each.
    let walk = |at| {
        let parent = keys::object_prefix("vol", "bkt");
        let p = scan_page(
            &sm.db,
            &ScanSpec {
                table: keys::KEYS_CF,
                parent: &parent,
                prefix: b"",
                delimiter: b"",
                start: Start::Beginning,
                max: usize::MAX,
                seek_after: usize::MAX,
                terminator: None,
                current_only: None,
                at: Some(at),
            },
        )
        .unwrap();
        p.stats.nexts
    };
    let full = walk(s1) + walk(s2);
    assert!(full >= 2 * n as u64 - 10, "{full}");
    assert!(examined * 100 <= full, "{examined} against {full}");
    // Reclaiming every snapshot drops the log.
    drop_snapshot(&mut sm, "s1");
    reclaim(&mut sm, s1, 1000);
    assert!(
        count(&sm, keys::SNAPSHOT_CHANGES_CF) > 0,
        "s2's changes stay"
    );
    assert_eq!(diff_all(&sm, s2, None, 1000).0.len(), 2);
    drop_snapshot(&mut sm, "s2");
    reclaim(&mut sm, s2, 1000);
    assert_eq!(count(&sm, keys::SNAPSHOT_CHANGES_CF), 0);
}
