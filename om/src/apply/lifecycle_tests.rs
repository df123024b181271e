//! Lifecycle scans through apply: pages built by the scanner's own code
//! (`scan::page`) at chosen instants, applied as the state machine does,
//! against S3's semantics (midnight rounding included) in each versioning
//! state.

use om_proto::store::{self as st, KeyRecord, LifecycleScanRecord, command::Op, command_result};
use om_proto::v1::{
    LifecycleAbortUpload, LifecycleExpiration, LifecycleFilter, LifecycleNoncurrentExpiration,
    LifecycleRule, lifecycle_filter::Predicate,
};

use crate::apply::tests::{Sm, setup};
use crate::apply::{LAYOUT_OBJECT_STORE, versions};
use crate::lifecycle::eval::after_days;
use crate::lifecycle::scan::{self, PageLimits};
use crate::store::iter::DeferredSeekIter;
use crate::store::keys;
use crate::store::table::{self, BucketTable, KeyTable, LifecycleScanTable, LifecycleTable};

pub(super) const DAY: u64 = 86_400_000;

pub(super) fn limits(evaluations: usize) -> PageLimits {
    PageLimits {
        evaluations,
        items: 1000,
        day_ms: DAY,
        interval_ms: u64::MAX / 4,
    }
}

pub(super) fn rule(id: &str, prefix: Option<&str>) -> LifecycleRule {
    LifecycleRule {
        id: id.into(),
        enabled: true,
        filter: prefix.map(|p| LifecycleFilter {
            predicate: Some(Predicate::Prefix(p.into())),
        }),
        ..Default::default()
    }
}

pub(super) fn expire_days(id: &str, prefix: &str, days: u32) -> LifecycleRule {
    LifecycleRule {
        expiration: Some(LifecycleExpiration {
            days: Some(days),
            ..Default::default()
        }),
        ..rule(id, Some(prefix))
    }
}

pub(super) fn set_rules(sm: &mut Sm, rules: Vec<LifecycleRule>) {
    sm.ok(Op::SetBucketLifecycle(st::SetBucketLifecycle {
        volume: "vol".into(),
        bucket: "bkt".into(),
        rules,
        delete: false,
    }));
}

pub(super) use crate::apply::tests::versioning;

pub(super) fn put(sm: &mut Sm, key: &str) -> KeyRecord {
    match sm.ok(Op::PutKey(st::PutKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        size: 10,
        block_size: 1 << 20,
        etag: "0123456789abcdef0123456789abcdef".into(),
        ..Default::default()
    })) {
        command_result::Result::Key(k) => k.key.unwrap(),
        other => panic!("{other:?}"),
    }
}

pub(super) fn delete(sm: &mut Sm, key: &str, version_id: &str) {
    sm.ok(Op::DeleteKey(st::DeleteKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        version_id: version_id.into(),
        conditions: Default::default(),
    }));
}

pub(super) fn stored_scan(sm: &Sm) -> Option<LifecycleScanRecord> {
    table::get::<LifecycleScanTable>(&sm.db, &keys::bucket_key("vol", "bkt")).unwrap()
}

/// The next page at the next command's time, or None when none is due.
pub(super) fn next_page(sm: &Sm, l: PageLimits) -> Option<st::LifecycleScan> {
    let bk = keys::bucket_key("vol", "bkt");
    let bucket = table::get::<BucketTable>(&sm.db, &bk).unwrap().unwrap();
    let config = table::get::<LifecycleTable>(&sm.db, &bk).unwrap().unwrap();
    scan::page(
        &sm.db,
        &bucket,
        &config,
        stored_scan(sm).as_ref(),
        sm.next_now(),
        l,
    )
    .unwrap()
}

/// Runs pages until the pass under way (or a new one) completes; returns
/// every page's result.
pub(super) fn run_pass(sm: &mut Sm, l: PageLimits) -> Vec<st::LifecycleScanResult> {
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let Some(page) = next_page(sm, l) else { break };
        match sm.ok(Op::LifecycleScan(page)) {
            command_result::Result::LifecycleScan(r) => out.push(r),
            other => panic!("{other:?}"),
        }
        if stored_scan(sm).unwrap().phase == scan::PHASE_IDLE {
            break;
        }
    }
    out
}

pub(super) fn actions(results: &[st::LifecycleScanResult], name: &str) -> u64 {
    results.iter().filter_map(|r| r.actions.get(name)).sum()
}

/// The bucket's `keys` entries: (key name, version id, delete marker).
fn entries(sm: &Sm) -> Vec<(String, String, bool)> {
    let prefix = keys::object_prefix("vol", "bkt");
    let mut it = DeferredSeekIter::with_prefix(&sm.db, keys::KEYS_CF, &prefix).unwrap();
    let mut out = Vec::new();
    while let Some((k, v)) = it.current() {
        let (name, _) = keys::split_version(&k[prefix.len()..]);
        let rec = table::decode::<KeyTable>(v).unwrap();
        out.push((
            String::from_utf8(name.to_vec()).unwrap(),
            versions::version_id(&rec),
            rec.delete_marker,
        ));
        it.advance();
    }
    out
}

/// Moves the clock so the next command carries `at`.
pub(super) fn at(sm: &mut Sm, at: u64) {
    sm.clock_ms = 0;
    sm.clock_ms = at - sm.next_now();
}

pub(super) fn fso_file(sm: &mut Sm, path: &str) {
    let command_result::Result::OpenKey(s) = sm.ok(Op::CreateFile(st::CreateFile {
        volume: "vol".into(),
        bucket: "bkt".into(),
        path: path.into(),
        recursive: true,
        ..Default::default()
    })) else {
        panic!("CreateFile {path}")
    };
    sm.ok(Op::CommitKey(st::CommitKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: path.into(),
        session_id: s.session_id,
        ..Default::default()
    }));
}

#[test]
fn unversioned_keys_expire_at_the_next_midnight_after_n_days() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    at(&mut sm, 10 * DAY + 37_000);
    let a = put(&mut sm, "logs/a");
    put(&mut sm, "data/b");
    set_rules(&mut sm, vec![expire_days("logs", "logs/", 2)]);
    let due = after_days(a.creation_time_ms, 2, DAY);
    assert_eq!(due, 13 * DAY);
    // A millisecond before: evaluated, nothing done.
    at(&mut sm, due - 1);
    let r = run_pass(&mut sm, limits(1000));
    assert_eq!(actions(&r, "expire"), 0);
    let s = stored_scan(&sm).unwrap();
    assert_eq!(
        (s.pass, s.phase, s.last_pass_evaluated),
        (1, scan::PHASE_IDLE, 2)
    );
    // The next pass is due only after the interval.
    assert!(next_page(&sm, limits(1000)).is_none());
    let l = PageLimits {
        interval_ms: 0,
        ..limits(1000)
    };
    at(&mut sm, due);
    let r = run_pass(&mut sm, l);
    assert_eq!(actions(&r, "expire"), 1);
    assert_eq!(entries(&sm), vec![("data/b".into(), "null".into(), false)]);
    let s = stored_scan(&sm).unwrap();
    assert_eq!(s.pass, 2);
    assert_eq!(s.last_pass_actions.get("expire"), Some(&1));
    assert_eq!(s.total_evaluated, 4);
    assert_eq!(s.rule_actions.get("logs"), Some(&1));
    // The key's blocks went to reclamation, the bucket's usage with it.
    let bucket = table::get::<BucketTable>(&sm.db, &keys::bucket_key("vol", "bkt"))
        .unwrap()
        .unwrap();
    assert_eq!((bucket.key_count, bucket.used_bytes), (1, 10));
}

#[test]
fn enabled_buckets_get_delete_markers_and_suspended_ones_null_markers() {
    for state in [versions::ENABLED, versions::SUSPENDED] {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        versioning(&mut sm, versions::ENABLED);
        versioning(&mut sm, state);
        put(&mut sm, "logs/a");
        put(&mut sm, "logs/a");
        set_rules(&mut sm, vec![expire_days("logs", "logs/", 1)]);
        at(&mut sm, 5 * DAY);
        let r = run_pass(&mut sm, limits(1000));
        assert_eq!(actions(&r, "expire"), 1, "state {state}");
        let e = entries(&sm);
        let marker = &e[0];
        assert_eq!(marker.0, "logs/a");
        assert!(marker.2, "the current version is a delete marker: {e:?}");
        if state == versions::ENABLED {
            assert_eq!(e.len(), 3, "both versions stay behind the marker: {e:?}");
            assert_ne!(marker.1, "null");
        } else {
            // Suspended: the marker is the null version; the null object
            // version it replaced is gone.
            assert_eq!(marker.1, "null");
            assert!(e.iter().all(|x| x.1 != "null" || x.2), "{e:?}");
        }
    }
}

#[test]
fn noncurrent_versions_expire_keeping_the_newest_ones() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    versioning(&mut sm, versions::ENABLED);
    at(&mut sm, DAY + 5);
    for _ in 0..5 {
        put(&mut sm, "k");
    }
    set_rules(
        &mut sm,
        vec![LifecycleRule {
            noncurrent_version_expiration: Some(LifecycleNoncurrentExpiration {
                noncurrent_days: 1,
                newer_noncurrent_versions: 2,
            }),
            ..rule("nc", None)
        }],
    );
    let before = entries(&sm);
    assert_eq!(before.len(), 5);
    // Not yet a day noncurrent: nothing.
    at(&mut sm, 2 * DAY - 1);
    assert_eq!(
        actions(&run_pass(&mut sm, limits(1000)), "expire_noncurrent"),
        0
    );
    // Pages of one entry: the count of newer versions crosses pages.
    at(&mut sm, 3 * DAY);
    let l = PageLimits {
        interval_ms: 0,
        ..limits(1)
    };
    let r = run_pass(&mut sm, l);
    assert_eq!(actions(&r, "expire_noncurrent"), 2);
    // The current version and the two newest noncurrent ones stay.
    assert_eq!(entries(&sm), before[..3].to_vec());
}

#[test]
fn a_lone_delete_marker_goes_and_one_with_versions_behind_it_stays() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    versioning(&mut sm, versions::ENABLED);
    let a = put(&mut sm, "a");
    delete(&mut sm, "a", "");
    // `a`: marker, then its object version; removing the object version
    // leaves the marker alone.
    delete(&mut sm, "a", &versions::version_id(&a));
    put(&mut sm, "b");
    delete(&mut sm, "b", "");
    set_rules(
        &mut sm,
        vec![LifecycleRule {
            expiration: Some(LifecycleExpiration {
                expired_object_delete_marker: Some(true),
                ..Default::default()
            }),
            ..rule("markers", None)
        }],
    );
    // Pages of one entry: the marker's lone-ness is decided across pages.
    for n in [1, 1000] {
        let r = run_pass(
            &mut sm,
            PageLimits {
                interval_ms: 0,
                ..limits(n)
            },
        );
        let removed = actions(&r, "remove_delete_marker");
        let e = entries(&sm);
        assert!(e.iter().all(|x| x.0 == "b"), "{e:?}");
        assert_eq!(e.len(), 2);
        assert_eq!(removed, u64::from(n == 1));
    }
}

#[test]
fn an_expiration_rule_also_removes_lone_delete_markers_once_due() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    versioning(&mut sm, versions::ENABLED);
    at(&mut sm, DAY + 5);
    let a = put(&mut sm, "logs/a");
    delete(&mut sm, "logs/a", "");
    delete(&mut sm, "logs/a", &versions::version_id(&a));
    set_rules(&mut sm, vec![expire_days("logs", "logs/", 1)]);
    at(&mut sm, 2 * DAY - 1);
    let r = run_pass(&mut sm, limits(1000));
    assert_eq!(actions(&r, "remove_delete_marker"), 0);
    assert_eq!(entries(&sm).len(), 1);
    at(&mut sm, 3 * DAY);
    let r = run_pass(
        &mut sm,
        PageLimits {
            interval_ms: 0,
            ..limits(1000)
        },
    );
    assert_eq!(actions(&r, "remove_delete_marker"), 1);
    assert!(entries(&sm).is_empty());
}

#[test]
fn stale_uploads_are_aborted_and_their_parts_released() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let up = match sm.ok(Op::InitiateMultipart(st::InitiateMultipart {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "big".into(),
        ..Default::default()
    })) {
        command_result::Result::Upload(u) => u.upload.unwrap().upload_id,
        other => panic!("{other:?}"),
    };
    sm.ok(Op::CommitPart(st::CommitPart {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "big".into(),
        upload_id: up,
        part_number: 1,
        size: 3 << 20,
        etag: "0123456789abcdef0123456789abcdef".into(),
        block_size: 1 << 20,
        ..Default::default()
    }));
    set_rules(
        &mut sm,
        vec![LifecycleRule {
            abort_incomplete_multipart_upload: Some(LifecycleAbortUpload {
                days_after_initiation: 1,
            }),
            ..rule("uploads", None)
        }],
    );
    at(&mut sm, DAY - 1);
    assert_eq!(actions(&run_pass(&mut sm, limits(1000)), "abort_upload"), 0);
    at(&mut sm, 2 * DAY);
    let r = run_pass(
        &mut sm,
        PageLimits {
            interval_ms: 0,
            ..limits(1000)
        },
    );
    assert_eq!(actions(&r, "abort_upload"), 1);
    let mut it =
        DeferredSeekIter::with_prefix(&sm.db, keys::UPLOADS_CF, &keys::object_prefix("vol", "bkt"))
            .unwrap();
    assert!(!it.has_current());
    let mut freed = DeferredSeekIter::new(&sm.db, keys::DELETED_BLOCKS_CF, None, None).unwrap();
    let mut n = 0;
    while let Some((_, v)) = freed.current() {
        n += table::decode::<table::DeletedBlocksTable>(v)
            .unwrap()
            .blocks
            .len();
        freed.advance();
    }
    assert_eq!(n, 3, "the part's three blocks go to reclamation");
}

#[test]
fn an_entry_overwritten_after_the_scan_read_it_survives() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    put(&mut sm, "logs/a");
    set_rules(&mut sm, vec![expire_days("logs", "logs/", 1)]);
    at(&mut sm, 3 * DAY);
    let page = next_page(&sm, limits(1000)).unwrap();
    assert_eq!(page.items.len(), 1);
    // Written again before the page applies: a new write time, a new
    // update id. Apply leaves it alone.
    let fresh = put(&mut sm, "logs/a");
    match sm.ok(Op::LifecycleScan(page)) {
        command_result::Result::LifecycleScan(r) => assert!(r.actions.is_empty()),
        other => panic!("{other:?}"),
    }
    let now = table::get::<KeyTable>(&sm.db, &keys::object_key("vol", "bkt", "logs/a"))
        .unwrap()
        .unwrap();
    assert_eq!(now.update_id, fresh.update_id);
}

#[test]
fn pages_that_do_not_continue_the_stored_scan_are_refused_and_change_nothing() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    for i in 0..10 {
        put(&mut sm, &format!("logs/{i}"));
    }
    set_rules(&mut sm, vec![expire_days("logs", "logs/", 1)]);
    at(&mut sm, 3 * DAY);
    let first = next_page(&sm, limits(4)).unwrap();
    assert!(first.start_pass);
    sm.ok(Op::LifecycleScan(first.clone()));
    // The same page again (a retry, a deposed leader's proposal).
    assert_eq!(
        sm.rejected(Op::LifecycleScan(first)),
        "STALE_LIFECYCLE_PAGE"
    );
    let second = next_page(&sm, limits(4)).unwrap();
    assert!(!second.start_pass);
    // A page from another cursor.
    let mut off = second.clone();
    off.from = keys::object_key("vol", "bkt", "logs/0");
    assert_eq!(sm.rejected(Op::LifecycleScan(off)), "STALE_LIFECYCLE_PAGE");
    // A new configuration: the page read under the old one is refused and
    // the next page starts a new pass from the beginning.
    set_rules(&mut sm, vec![expire_days("logs", "logs/", 2)]);
    assert_eq!(
        sm.rejected(Op::LifecycleScan(second)),
        "STALE_LIFECYCLE_PAGE"
    );
    let restart = next_page(&sm, limits(4)).unwrap();
    assert!(restart.start_pass && restart.from.is_empty());
    sm.ok(Op::LifecycleScan(restart));
    assert_eq!(stored_scan(&sm).unwrap().pass, 2);
    // Malformed pages are refused before any state is read.
    let mut bad = next_page(&sm, limits(4)).unwrap();
    bad.to = bad.from.clone();
    assert_eq!(
        sm.rejected(Op::LifecycleScan(bad)),
        "INVALID_LIFECYCLE_PAGE"
    );
    let mut bad = next_page(&sm, limits(4)).unwrap();
    bad.items.push(st::LifecycleItem {
        entry: keys::object_key("vol", "bkt", "zzz"),
        update_id: 1,
        action: 1,
        rule_id: "logs".into(),
    });
    assert_eq!(
        sm.rejected(Op::LifecycleScan(bad)),
        "INVALID_LIFECYCLE_PAGE"
    );
    // Older rules do not know the command.
    let page = next_page(&sm, limits(4)).unwrap();
    assert_eq!(
        sm.rejected_rules(Op::LifecycleScan(page), 4),
        "UNSUPPORTED_COMMAND"
    );
}

#[test]
fn a_page_resumes_with_one_seek_past_the_tombstones_behind_its_cursor() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    for i in 0..3000 {
        put(&mut sm, &format!("k{i:05}"));
    }
    set_rules(&mut sm, vec![expire_days("logs", "logs/", 1)]);
    let l = limits(1000);
    for _ in 0..2 {
        let page = next_page(&sm, l).unwrap();
        sm.ok(Op::LifecycleScan(page));
    }
    // Everything behind the cursor is deleted: 2000 tombstones.
    for i in 0..2000 {
        delete(&mut sm, &format!("k{i:05}"), "");
    }
    let page = next_page(&sm, l).unwrap();
    assert_eq!(page.resume_seeks, 1);
    assert_eq!(page.resume_before_cursor, 0);
    assert_eq!(page.evaluated, 1000);
    assert!(page.phase_done);
}

/// Status names the version at the cursor as ListObjectVersions does: a
/// noncurrent `null` version (written unversioned, or suspended) is `null`,
/// not its stamp in hex.
#[test]
fn status_names_a_null_version_at_the_cursor_null() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    // `n0`: a null version from before versioning (stamp 0) behind a new
    // one; `ns`: a null version written suspended (a real stamp) behind a
    // new one; `v`: two versioned versions; `z` last (a page that reads
    // the last entry ends the phase instead of storing a cursor).
    put(&mut sm, "n0");
    versioning(&mut sm, versions::ENABLED);
    put(&mut sm, "n0");
    put(&mut sm, "v");
    put(&mut sm, "v");
    versioning(&mut sm, versions::SUSPENDED);
    put(&mut sm, "ns");
    versioning(&mut sm, versions::ENABLED);
    put(&mut sm, "ns");
    put(&mut sm, "z");
    set_rules(&mut sm, vec![expire_days("logs", "logs/", 1)]);
    let prefix = keys::object_prefix("vol", "bkt");
    let mut named = Vec::new();
    while let Some(page) = next_page(&sm, limits(1)) {
        sm.ok(Op::LifecycleScan(page));
        let s = stored_scan(&sm).unwrap();
        if s.phase == scan::PHASE_IDLE {
            break;
        }
        if s.phase != scan::PHASE_OBJECTS || s.cursor.is_empty() {
            continue;
        }
        let (key, version_id) = scan::cursor_names(&s, &prefix);
        let rec = table::get::<KeyTable>(&sm.db, &s.cursor).unwrap().unwrap();
        let is_version = keys::split_version(&s.cursor[prefix.len()..]).1.is_some();
        if is_version {
            assert_eq!(version_id, versions::version_id(&rec), "{key}");
        } else {
            assert_eq!(
                version_id, "",
                "{key}: a current version has no id in status"
            );
        }
        named.push((key, version_id));
    }
    let nulls: Vec<_> = named.iter().filter(|(_, v)| v == "null").collect();
    assert_eq!(nulls.len(), 2, "{named:?}");
    assert!(
        named.iter().any(|(k, v)| k == "v" && v.len() == 16),
        "{named:?}"
    );
}

/// The count of entries read at or before the cursor comes from what the
/// iterator yields, not from its bounds: 0 for a page's resume (its lower
/// bound is the cursor's successor), and every entry read again for an
/// iterator bounded at the cursor or at the bucket's start.
#[test]
fn entries_read_again_on_resuming_are_counted() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    for i in 0..10 {
        put(&mut sm, &format!("k{i}"));
    }
    set_rules(&mut sm, vec![expire_days("logs", "logs/", 1)]);
    let first = next_page(&sm, limits(4)).unwrap();
    assert_eq!(first.resume_before_cursor, 0);
    sm.ok(Op::LifecycleScan(first));
    let page = next_page(&sm, limits(4)).unwrap();
    let cursor = page.from.clone();
    assert_eq!(cursor, keys::object_key("vol", "bkt", "k3"));
    assert_eq!((page.resume_before_cursor, page.evaluated), (0, 4));
    let prefix = keys::object_prefix("vol", "bkt");
    let read = |lower: Vec<u8>| {
        let raw = DeferredSeekIter::new(
            &sm.db,
            keys::KEYS_CF,
            Some(lower),
            keys::prefix_end(&prefix),
        )
        .unwrap();
        let mut it = scan::resumed_after(raw, &cursor);
        let mut n = 0;
        while it.current().is_some() {
            // Asking again for the same entry counts it once.
            assert!(it.has_current());
            n += 1;
            it.advance();
        }
        it.status().unwrap();
        (it.before_cursor(), n)
    };
    assert_eq!(read(keys::key_successor(&cursor)), (0, 6));
    assert_eq!(read(cursor.clone()), (1, 7), "bounded at the cursor");
    assert_eq!(read(prefix.clone()), (4, 10), "from the bucket's start");
}
