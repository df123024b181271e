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

const DAY: u64 = 86_400_000;

fn limits(evaluations: usize) -> PageLimits {
    PageLimits {
        evaluations,
        items: 1000,
        day_ms: DAY,
        interval_ms: u64::MAX / 4,
    }
}

fn rule(id: &str, prefix: Option<&str>) -> LifecycleRule {
    LifecycleRule {
        id: id.into(),
        enabled: true,
        filter: prefix.map(|p| LifecycleFilter {
            predicate: Some(Predicate::Prefix(p.into())),
        }),
        ..Default::default()
    }
}

fn expire_days(id: &str, prefix: &str, days: u32) -> LifecycleRule {
    LifecycleRule {
        expiration: Some(LifecycleExpiration {
            days: Some(days),
            ..Default::default()
        }),
        ..rule(id, Some(prefix))
    }
}

fn set_rules(sm: &mut Sm, rules: Vec<LifecycleRule>) {
    sm.ok(Op::SetBucketLifecycle(st::SetBucketLifecycle {
        volume: "vol".into(),
        bucket: "bkt".into(),
        rules,
        delete: false,
    }));
}

fn versioning(sm: &mut Sm, v: u32) {
    sm.ok(Op::SetBucketVersioning(st::SetBucketVersioning {
        volume: "vol".into(),
        bucket: "bkt".into(),
        versioning: v,
    }));
}

fn put(sm: &mut Sm, key: &str) -> KeyRecord {
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

fn delete(sm: &mut Sm, key: &str, version_id: &str) {
    sm.ok(Op::DeleteKey(st::DeleteKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        version_id: version_id.into(),
    }));
}

fn stored_scan(sm: &Sm) -> Option<LifecycleScanRecord> {
    table::get::<LifecycleScanTable>(&sm.db, &keys::bucket_key("vol", "bkt")).unwrap()
}

/// The next page at the next command's time, or None when none is due.
fn next_page(sm: &Sm, l: PageLimits) -> Option<st::LifecycleScan> {
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
fn run_pass(sm: &mut Sm, l: PageLimits) -> Vec<st::LifecycleScanResult> {
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

fn actions(results: &[st::LifecycleScanResult], name: &str) -> u64 {
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
fn at(sm: &mut Sm, at: u64) {
    sm.clock_ms = 0;
    sm.clock_ms = at - sm.next_now();
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
                expired_object_delete_marker: true,
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
    // Written again before the page applies: a new creation time, a new
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

/// A small deterministic generator (xorshift64*), so a failing seed replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One version as the model sees it.
#[derive(Debug, Clone)]
struct MVersion {
    /// (version id, delete marker) as stored; new markers the model adds
    /// are `("*new*", true)` (enabled) or `("null", true)` (suspended).
    id: (String, bool),
    marker: bool,
    null: bool,
    created: u64,
    since: u64,
    size: u64,
    tags: std::collections::BTreeMap<String, String>,
}

/// The first day boundary at or after `t + days` days, found by walking
/// whole days (independent of `eval::after_days`' arithmetic).
fn model_after(t: u64, days: u32) -> u64 {
    let target = t + u64::from(days) * DAY;
    let mut m = t / DAY * DAY;
    while m < target {
        m += DAY;
    }
    m
}

fn model_matches(r: &LifecycleRule, key: &str, v: &MVersion, sized: bool) -> bool {
    if !r.enabled {
        return false;
    }
    let tag_ok = |k: &str, val: &str| v.tags.get(k).map(String::as_str) == Some(val);
    match r.filter.as_ref().and_then(|f| f.predicate.clone()) {
        None => true,
        Some(Predicate::Prefix(p)) => key.starts_with(&p),
        Some(Predicate::Tag(t)) => tag_ok(&t.key, &t.value),
        Some(Predicate::ObjectSizeGreaterThan(n)) => sized && v.size > n,
        Some(Predicate::ObjectSizeLessThan(n)) => sized && v.size < n,
        Some(Predicate::And(a)) => {
            key.starts_with(&a.prefix)
                && a.tags.iter().all(|t| tag_ok(&t.key, &t.value))
                && a.object_size_greater_than
                    .is_none_or(|n| sized && v.size > n)
                && a.object_size_less_than.is_none_or(|n| sized && v.size < n)
        }
    }
}

/// S3's semantics at `now`, applied until nothing more is due: the state a
/// scanner must reach (whatever its page boundaries) after enough passes.
fn model_fixpoint(
    rules: &[LifecycleRule],
    state: u32,
    now: u64,
    mut objects: std::collections::BTreeMap<String, Vec<MVersion>>,
) -> std::collections::BTreeMap<String, Vec<MVersion>> {
    loop {
        let mut changed = false;
        for (key, vs) in objects.iter_mut() {
            if vs.is_empty() {
                continue;
            }
            // The current version.
            let cur = vs[0].clone();
            let cur_due = !cur.marker
                && rules.iter().any(|r| {
                    model_matches(r, key, &cur, true)
                        && r.expiration
                            .as_ref()
                            .is_some_and(|e| match (e.days, e.date_ms) {
                                (Some(d), _) => model_after(cur.created, d) <= now,
                                (None, Some(date)) => date <= now,
                                _ => false,
                            })
                });
            if cur_due {
                changed = true;
                let marker = |id: &str| MVersion {
                    id: (id.to_string(), true),
                    marker: true,
                    null: id == "null",
                    created: now,
                    since: 0,
                    size: 0,
                    tags: Default::default(),
                };
                match state {
                    versions::UNVERSIONED => {
                        vs.remove(0);
                    }
                    versions::ENABLED => {
                        vs[0].since = now;
                        vs.insert(0, marker("*new*"));
                    }
                    _ => {
                        vs.retain(|v| !v.null);
                        // The current version, unless it was the null one
                        // (gone), becomes noncurrent now.
                        if let Some(c) = vs.first_mut()
                            && c.id == cur.id
                        {
                            c.since = now;
                        }
                        vs.insert(0, marker("null"));
                    }
                }
                continue;
            }
            // Noncurrent versions, newest first, counting those kept.
            let mut kept = 0u32;
            let mut i = 1;
            while i < vs.len() {
                let v = vs[i].clone();
                let due = rules.iter().any(|r| {
                    model_matches(r, key, &v, true)
                        && r.noncurrent_version_expiration.as_ref().is_some_and(|n| {
                            kept >= n.newer_noncurrent_versions
                                && model_after(v.since, n.noncurrent_days) <= now
                        })
                });
                if due {
                    vs.remove(i);
                    changed = true;
                } else {
                    kept += 1;
                    i += 1;
                }
            }
            // A lone delete marker.
            if vs.len() == 1 && vs[0].marker {
                let m = vs[0].clone();
                let none = MVersion {
                    size: 0,
                    tags: Default::default(),
                    ..m.clone()
                };
                let due = rules.iter().any(|r| {
                    model_matches(r, key, &none, true)
                        && r.expiration.as_ref().is_some_and(|e| {
                            e.expired_object_delete_marker
                                || match (e.days, e.date_ms) {
                                    (Some(d), _) => model_after(m.created, d) <= now,
                                    (None, Some(date)) => date <= now,
                                    _ => false,
                                }
                        })
                });
                if due {
                    vs.clear();
                    changed = true;
                }
            }
        }
        objects.retain(|_, vs| !vs.is_empty());
        if !changed {
            return objects;
        }
    }
}

fn random_rules(rng: &mut Rng) -> Vec<LifecycleRule> {
    use om_proto::v1::{LifecycleAnd, LifecycleTag};
    let tag = |rng: &mut Rng| LifecycleTag {
        key: ["class", "team"][rng.below(2) as usize].into(),
        value: ["tmp", "keep"][rng.below(2) as usize].into(),
    };
    let n = 1 + rng.below(3);
    (0..n)
        .map(|i| {
            let predicate = match rng.below(7) {
                0 | 1 => None,
                2 => Some(Predicate::Prefix(
                    ["a/", "b/", "a/1"][rng.below(3) as usize].into(),
                )),
                3 => Some(Predicate::Tag(tag(rng))),
                4 => Some(Predicate::ObjectSizeGreaterThan(rng.below(20))),
                5 => Some(Predicate::ObjectSizeLessThan(1 + rng.below(20))),
                _ => Some(Predicate::And(LifecycleAnd {
                    prefix: "a/".into(),
                    tags: if rng.chance(50) {
                        vec![tag(rng)]
                    } else {
                        vec![]
                    },
                    object_size_greater_than: Some(rng.below(10)),
                    object_size_less_than: None,
                })),
            };
            let tagged = matches!(&predicate, Some(Predicate::Tag(_)))
                || matches!(&predicate, Some(Predicate::And(a)) if !a.tags.is_empty());
            let mut r = LifecycleRule {
                id: format!("r{i}"),
                enabled: rng.chance(90),
                filter: predicate.map(|p| LifecycleFilter { predicate: Some(p) }),
                ..Default::default()
            };
            if rng.chance(60) {
                r.expiration = Some(match rng.below(3) {
                    0 if !tagged => LifecycleExpiration {
                        expired_object_delete_marker: true,
                        ..Default::default()
                    },
                    1 => LifecycleExpiration {
                        date_ms: Some((5 + rng.below(10)) * DAY),
                        ..Default::default()
                    },
                    _ => LifecycleExpiration {
                        days: Some(1 + rng.below(3) as u32),
                        ..Default::default()
                    },
                });
            }
            if rng.chance(50) {
                r.noncurrent_version_expiration = Some(LifecycleNoncurrentExpiration {
                    noncurrent_days: 1 + rng.below(3) as u32,
                    newer_noncurrent_versions: rng.below(3) as u32,
                });
            }
            if !tagged
                && (rng.chance(30)
                    || (r.expiration.is_none() && r.noncurrent_version_expiration.is_none()))
            {
                r.abort_incomplete_multipart_upload = Some(LifecycleAbortUpload {
                    days_after_initiation: 1 + rng.below(3) as u32,
                });
            }
            r
        })
        .collect()
}

/// The bucket's objects as the model sees them, read from `keys`.
fn model_state(sm: &Sm) -> std::collections::BTreeMap<String, Vec<MVersion>> {
    let prefix = keys::object_prefix("vol", "bkt");
    let mut it = DeferredSeekIter::with_prefix(&sm.db, keys::KEYS_CF, &prefix).unwrap();
    let mut out: std::collections::BTreeMap<String, Vec<MVersion>> = Default::default();
    while let Some((k, v)) = it.current() {
        let (name, _) = keys::split_version(&k[prefix.len()..]);
        let rec = table::decode::<KeyTable>(v).unwrap();
        let id = versions::version_id(&rec);
        out.entry(String::from_utf8(name.to_vec()).unwrap())
            .or_default()
            .push(MVersion {
                id: (id.clone(), rec.delete_marker),
                marker: rec.delete_marker,
                null: id == "null",
                created: rec.creation_time_ms,
                since: rec.noncurrent_since_ms,
                size: rec.size,
                tags: rec.tags.clone(),
            });
        it.advance();
    }
    out
}

fn uploads_left(sm: &Sm) -> Vec<Vec<u8>> {
    let prefix = keys::object_prefix("vol", "bkt");
    let mut it = DeferredSeekIter::with_prefix(&sm.db, keys::UPLOADS_CF, &prefix).unwrap();
    let mut out = Vec::new();
    while let Some((k, _)) = it.current() {
        out.push(k.to_vec());
        it.advance();
    }
    out
}

/// Random histories in every versioning state, random rules, random page
/// sizes: after passes at `now` until none acts, the bucket holds exactly
/// what S3's semantics leave (the model), uploads included.
#[test]
fn scans_reach_the_state_s3s_semantics_give() {
    for seed in 1..=60u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        at(&mut sm, DAY + rng.below(DAY));
        let mut state = versions::UNVERSIONED;
        let names = ["a/1", "a/2", "b/1", "c"];
        let mut uploads = Vec::new();
        for _ in 0..(10 + rng.below(30)) {
            let t = sm.next_now() + rng.below(DAY * 2 / 3);
            at(&mut sm, t);
            let name = names[rng.below(names.len() as u64) as usize];
            match rng.below(10) {
                0 if state != versions::ENABLED => {
                    state = versions::ENABLED;
                    versioning(&mut sm, state);
                }
                1 if state == versions::ENABLED => {
                    state = versions::SUSPENDED;
                    versioning(&mut sm, state);
                }
                2 | 3 => {
                    // May be refused (no such key): changes nothing then.
                    sm.apply(Op::DeleteKey(st::DeleteKey {
                        volume: "vol".into(),
                        bucket: "bkt".into(),
                        key: name.into(),
                        version_id: String::new(),
                    }));
                }
                4 => {
                    // Remove a random existing version permanently.
                    let s = model_state(&sm);
                    if let Some(vs) = s.get(name) {
                        let v = &vs[rng.below(vs.len() as u64) as usize];
                        delete(&mut sm, name, &v.id.0);
                    }
                }
                5 => {
                    if let command_result::Result::Upload(u) =
                        sm.ok(Op::InitiateMultipart(st::InitiateMultipart {
                            volume: "vol".into(),
                            bucket: "bkt".into(),
                            key: name.into(),
                            ..Default::default()
                        }))
                    {
                        let u = u.upload.unwrap();
                        uploads.push((name, u.initiated_ms, u.upload_id));
                    }
                }
                _ => {
                    let mut tags = std::collections::BTreeMap::new();
                    if rng.chance(50) {
                        tags.insert(
                            ["class", "team"][rng.below(2) as usize].to_string(),
                            ["tmp", "keep"][rng.below(2) as usize].to_string(),
                        );
                    }
                    sm.ok(Op::PutKey(st::PutKey {
                        volume: "vol".into(),
                        bucket: "bkt".into(),
                        key: name.into(),
                        size: rng.below(25),
                        block_size: 1 << 20,
                        etag: "0123456789abcdef0123456789abcdef".into(),
                        tags,
                        ..Default::default()
                    }));
                }
            }
        }
        let rules = random_rules(&mut rng);
        if crate::lifecycle::validate(&rules).is_err() {
            continue;
        }
        set_rules(&mut sm, rules.clone());
        let now = sm.next_now() + rng.below(6 * DAY);
        let before = model_state(&sm);
        let want = model_fixpoint(&rules, state, now, before.clone());
        let mut want_uploads: Vec<Vec<u8>> = uploads
            .iter()
            .filter(|(name, initiated, _)| {
                let v = MVersion {
                    id: (String::new(), false),
                    marker: false,
                    null: false,
                    created: 0,
                    since: 0,
                    size: 0,
                    tags: Default::default(),
                };
                !rules.iter().any(|r| {
                    model_matches(r, name, &v, false)
                        && r.abort_incomplete_multipart_upload
                            .as_ref()
                            .is_some_and(|a| {
                                model_after(*initiated, a.days_after_initiation) <= now
                            })
                })
            })
            .map(|(name, _, id)| keys::upload_key("vol", "bkt", name, *id))
            .collect();
        want_uploads.sort();
        // Passes at `now` (every command then carries it) until one acts on
        // nothing; pages of a random size.
        let l = PageLimits {
            evaluations: 1 + rng.below(6) as usize,
            items: 2 + rng.below(5) as usize,
            day_ms: DAY,
            interval_ms: 0,
        };
        let mut quiet = false;
        for _ in 0..20 {
            sm.clock_ms = 0;
            sm.clock_ms = now - sm.next_now();
            let mut acted = 0;
            for _ in 0..10_000 {
                sm.clock_ms = 0;
                sm.clock_ms = now - sm.next_now();
                let Some(page) = next_page(&sm, l) else { break };
                if let command_result::Result::LifecycleScan(r) = sm.ok(Op::LifecycleScan(page)) {
                    acted += r.actions.values().sum::<u64>();
                }
                if stored_scan(&sm).unwrap().phase == scan::PHASE_IDLE {
                    break;
                }
            }
            if acted == 0 {
                quiet = true;
                break;
            }
        }
        assert!(quiet, "seed {seed}: passes never settled");
        let got = model_state(&sm);
        let norm = |s: &std::collections::BTreeMap<String, Vec<MVersion>>| {
            let originals: std::collections::BTreeSet<(String, bool)> =
                before.values().flatten().map(|v| v.id.clone()).collect();
            s.iter()
                .map(|(k, vs)| {
                    let ids: Vec<(String, bool)> = vs
                        .iter()
                        .map(|v| {
                            if originals.contains(&v.id) || v.id.0 == "*new*" {
                                v.id.clone()
                            } else if v.id.0 == "null" {
                                ("null".to_string(), true)
                            } else {
                                ("*new*".to_string(), true)
                            }
                        })
                        .collect();
                    (k.clone(), ids)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            norm(&got),
            norm(&want),
            "seed {seed}: state {state}, rules {rules:?}, now {now}, before {before:#?}"
        );
        assert_eq!(uploads_left(&sm), want_uploads, "seed {seed}: uploads");
    }
}

fn fso_file(sm: &mut Sm, path: &str) {
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

/// Every file path of an FSO bucket, depth first.
fn fso_files(sm: &Sm) -> Vec<String> {
    fn walk(sm: &Sm, id: u64, path: &str, out: &mut Vec<String>) {
        let join = |n: &str| {
            if path.is_empty() {
                n.to_string()
            } else {
                format!("{path}/{n}")
            }
        };
        let prefix = keys::children_prefix(id);
        let mut it = DeferredSeekIter::with_prefix(&sm.db, keys::FILES_CF, &prefix).unwrap();
        while let Some((k, _)) = it.current() {
            out.push(join(&String::from_utf8_lossy(&k[8..])));
            it.advance();
        }
        let mut it = DeferredSeekIter::with_prefix(&sm.db, keys::DIRECTORIES_CF, &prefix).unwrap();
        let mut dirs = Vec::new();
        while let Some((k, v)) = it.current() {
            let d = table::decode::<table::DirectoryTable>(v).unwrap();
            dirs.push((String::from_utf8_lossy(&k[8..]).into_owned(), d.object_id));
            it.advance();
        }
        for (n, id) in dirs {
            walk(sm, id, &join(&n), out);
        }
    }
    let bucket = table::get::<BucketTable>(&sm.db, &keys::bucket_key("vol", "bkt"))
        .unwrap()
        .unwrap();
    let mut out = Vec::new();
    walk(sm, bucket.object_id, "", &mut out);
    out
}

#[test]
fn file_system_buckets_are_walked_as_trees_and_resume_in_the_deepest_directory() {
    let paths = [
        "top.log",
        "keep.txt",
        "logs/a.log",
        "logs/b.txt",
        "logs/deep/er/c.log",
        "logs/deep/er/d.log",
        "logs/deep/x.log",
        "m/n/o.log",
        "z.log",
    ];
    for evaluations in [1, 2, 3, 1000] {
        let mut sm = Sm::new();
        setup(&mut sm, crate::apply::LAYOUT_FSO);
        for p in paths {
            fso_file(&mut sm, p);
        }
        // Files whose path ends in .log under logs/ expire.
        set_rules(
            &mut sm,
            vec![LifecycleRule {
                filter: Some(LifecycleFilter {
                    predicate: Some(Predicate::Prefix("logs/".into())),
                }),
                expiration: Some(LifecycleExpiration {
                    days: Some(1),
                    ..Default::default()
                }),
                ..rule("logs", None)
            }],
        );
        at(&mut sm, 3 * DAY);
        let l = limits(evaluations);
        let mut pages = 0;
        let mut expired = 0;
        while let Some(page) = next_page(&sm, l) {
            assert_eq!(page.phase, scan::PHASE_FILES);
            if !page.start_pass {
                assert_eq!(page.resume_seeks, 1, "one seek to resume");
                assert_eq!(page.resume_before_cursor, 0);
            }
            let r = match sm.ok(Op::LifecycleScan(page)) {
                command_result::Result::LifecycleScan(r) => r,
                other => panic!("{other:?}"),
            };
            expired += actions(&[r], "expire");
            pages += 1;
            if stored_scan(&sm).unwrap().phase == scan::PHASE_IDLE {
                break;
            }
            assert!(pages < 100);
        }
        assert_eq!(expired, 5, "evaluations {evaluations}");
        assert_eq!(
            fso_files(&sm),
            vec!["keep.txt", "top.log", "z.log", "m/n/o.log"],
            "evaluations {evaluations}"
        );
        let s = stored_scan(&sm).unwrap();
        // 9 files and 5 directories, each read once.
        assert_eq!(s.last_pass_evaluated, 14, "evaluations {evaluations}");
        assert_eq!(s.last_pass_actions.get("expire"), Some(&5));
    }
}

#[test]
fn a_file_moved_after_the_scan_read_it_is_left_alone() {
    let mut sm = Sm::new();
    setup(&mut sm, crate::apply::LAYOUT_FSO);
    fso_file(&mut sm, "logs/a.log");
    set_rules(&mut sm, vec![expire_days("logs", "logs/", 1)]);
    at(&mut sm, 3 * DAY);
    let page = next_page(&sm, limits(1000)).unwrap();
    assert_eq!(page.items.len(), 1);
    // An object-store page is refused for a file-system bucket.
    let mut wrong = page.clone();
    wrong.phase = scan::PHASE_OBJECTS;
    wrong.items.clear();
    assert_eq!(
        sm.rejected(Op::LifecycleScan(wrong)),
        "LIFECYCLE_PHASE_MISMATCH"
    );
    sm.ok(Op::RenamePath(st::RenamePath {
        volume: "vol".into(),
        bucket: "bkt".into(),
        from: "logs".into(),
        to: "kept".into(),
        ..Default::default()
    }));
    match sm.ok(Op::LifecycleScan(page)) {
        command_result::Result::LifecycleScan(r) => assert!(r.actions.is_empty()),
        other => panic!("{other:?}"),
    }
    assert_eq!(fso_files(&sm), vec!["kept/a.log"]);
}
