//! Lifecycle scans of file-system buckets through apply: the tree walked
//! depth first in pages that resume in the deepest directory, and a file
//! moved after the scan read it left alone.

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::{
    LifecycleExpiration, LifecycleFilter, LifecycleRule, lifecycle_filter::Predicate,
};

use super::scan_tests::{
    DAY, actions, at, expire_days, fso_file, limits, next_page, rule, set_rules, stored_scan,
};
use crate::apply::tests::{Sm, setup};
use crate::lifecycle::scan;
use crate::store::iter::DeferredSeekIter;
use crate::store::keys;
use crate::store::table::{self, BucketTable};

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
