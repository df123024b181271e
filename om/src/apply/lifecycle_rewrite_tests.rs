//! Lifecycle ages of keys written again through apply: every way of
//! writing a key again (put, session commit, copy, multipart, FSO
//! overwrite) counts its age from that write, and apply checks each page
//! item against the write time from rules 7 on.

use om_proto::store::{self as st, KeyRecord, command::Op, command_result};

use super::scan_tests::{
    DAY, actions, at, expire_days, fso_file, limits, next_page, put, run_pass, set_rules,
};
use crate::apply::LAYOUT_OBJECT_STORE;
use crate::apply::tests::{Sm, setup};
use crate::lifecycle::scan::PageLimits;
use crate::store::keys;
use crate::store::table::{self, BucketTable, KeyTable};

/// The ways a key is written again over an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rewrite {
    PutKey,
    CommitKey,
    CopyKey,
    CompleteMultipart,
    /// An FSO file created with `overwrite` and committed.
    FileOverwrite,
}

const ETAG: &str = "0123456789abcdef0123456789abcdef";

fn commit(sm: &mut Sm, key: &str, session_id: u64) {
    sm.ok(Op::CommitKey(st::CommitKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        session_id,
        ..Default::default()
    }));
}

fn rewrite(sm: &mut Sm, how: Rewrite, key: &str) {
    match how {
        Rewrite::PutKey => {
            put(sm, key);
        }
        Rewrite::CommitKey => {
            let command_result::Result::OpenKey(s) = sm.ok(Op::OpenKey(st::OpenKey {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: key.into(),
                block_size: 1 << 20,
                ..Default::default()
            })) else {
                panic!("OpenKey {key}")
            };
            commit(sm, key, s.session_id);
        }
        Rewrite::CopyKey => {
            sm.ok(Op::CopyKey(st::CopyKey {
                src_volume: "vol".into(),
                src_bucket: "bkt".into(),
                src_key: "src".into(),
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: key.into(),
                ..Default::default()
            }));
        }
        Rewrite::CompleteMultipart => {
            let command_result::Result::Upload(u) =
                sm.ok(Op::InitiateMultipart(st::InitiateMultipart {
                    volume: "vol".into(),
                    bucket: "bkt".into(),
                    key: key.into(),
                    ..Default::default()
                }))
            else {
                panic!("InitiateMultipart {key}")
            };
            let upload_id = u.upload.unwrap().upload_id;
            sm.ok(Op::CommitPart(st::CommitPart {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: key.into(),
                upload_id,
                part_number: 1,
                size: 10,
                etag: ETAG.into(),
                block_size: 1 << 20,
                ..Default::default()
            }));
            sm.ok(Op::CompleteMultipart(st::CompleteMultipart {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: key.into(),
                upload_id,
                parts: vec![st::PartRef {
                    part_number: 1,
                    etag: ETAG.into(),
                }],
                ..Default::default()
            }));
        }
        Rewrite::FileOverwrite => {
            let command_result::Result::OpenKey(s) = sm.ok(Op::CreateFile(st::CreateFile {
                volume: "vol".into(),
                bucket: "bkt".into(),
                path: key.into(),
                recursive: true,
                overwrite: true,
                ..Default::default()
            })) else {
                panic!("CreateFile {key}")
            };
            commit(sm, key, s.session_id);
        }
    }
}

/// The current record of `key` (an FSO bucket's file by its path).
fn current(sm: &Sm, key: &str) -> Option<KeyRecord> {
    let bk = keys::bucket_key("vol", "bkt");
    let bucket = table::get::<BucketTable>(&sm.db, &bk).unwrap().unwrap();
    if bucket.layout == crate::apply::LAYOUT_FSO {
        let comps = crate::fs::components(key);
        return match crate::fs::stat(&sm.db, bucket.object_id, &comps, "path").unwrap() {
            Some(crate::fs::Entry::File { rec, .. }) => Some(rec),
            _ => None,
        };
    }
    table::get::<KeyTable>(&sm.db, &keys::object_key("vol", "bkt", key)).unwrap()
}

const REWRITES: [Rewrite; 5] = [
    Rewrite::PutKey,
    Rewrite::CommitKey,
    Rewrite::CopyKey,
    Rewrite::CompleteMultipart,
    Rewrite::FileOverwrite,
];

/// Sets up `logs/a` written at DAY + 5 (and, for copies, an old source),
/// a one-day rule, and the key written again `how` from 10 DAY + 5 on;
/// returns the record that write left.
fn written_again(sm: &mut Sm, how: Rewrite) -> KeyRecord {
    let fso = how == Rewrite::FileOverwrite;
    setup(
        sm,
        if fso {
            crate::apply::LAYOUT_FSO
        } else {
            LAYOUT_OBJECT_STORE
        },
    );
    at(sm, DAY + 5);
    if fso {
        fso_file(sm, "logs/a");
    } else {
        put(sm, "logs/a");
        put(sm, "src");
    }
    set_rules(sm, vec![expire_days("logs", "logs/", 1)]);
    at(sm, 10 * DAY + 5);
    let first = current(sm, "logs/a").unwrap();
    rewrite(sm, how, "logs/a");
    let rec = current(sm, "logs/a").unwrap();
    assert_eq!(
        rec.creation_time_ms, first.creation_time_ms,
        "{how:?} keeps the creation time"
    );
    rec
}

/// Every way of writing a key again starts its lifecycle age again: `Days`
/// count from the new object's write (S3's Last-Modified), not from the
/// key's first write, whose creation time the overwrite keeps (Ozone's
/// creation time, which clients still see). Counted from the creation time,
/// data written a minute ago would expire as if it were the object it
/// replaced.
#[test]
fn a_key_written_again_ages_from_that_write_on_every_path() {
    for how in REWRITES {
        let mut sm = Sm::new();
        let rec = written_again(&mut sm, how);
        // The write's last command (a session or an upload takes several).
        assert!(
            (10 * DAY + 5..10 * DAY + 10).contains(&rec.modification_time_ms),
            "{how:?}: written at {}",
            rec.modification_time_ms
        );
        // Due one day after the write, at the next midnight: 12 DAY.
        let l = PageLimits {
            interval_ms: 0,
            ..limits(1000)
        };
        at(&mut sm, 12 * DAY - 1);
        let r = run_pass(&mut sm, l);
        assert_eq!(
            actions(&r, "expire"),
            0,
            "{how:?}: expired before a day counted from its own write"
        );
        assert_eq!(current(&sm, "logs/a"), Some(rec), "{how:?}");
        at(&mut sm, 12 * DAY);
        let r = run_pass(&mut sm, l);
        assert_eq!(actions(&r, "expire"), 1, "{how:?}");
        assert_eq!(current(&sm, "logs/a"), None, "{how:?}");
    }
}

/// Apply checks each item against the write time too: a page naming a key
/// written again since (built by a scanner that counted from the creation
/// time, or forged) leaves it alone from rules 7 on, while an entry of
/// rules 6 replays as it applied then (counted from the creation time), so
/// replicas replaying an old log agree with those that applied it.
#[test]
fn apply_counts_from_the_write_from_rules_7_and_replays_older_pages_as_they_applied() {
    for how in REWRITES {
        for rules in [6, crate::apply::RULES] {
            let mut sm = Sm::new();
            let rec = written_again(&mut sm, how);
            at(&mut sm, 11 * DAY);
            let mut page = next_page(&sm, limits(1000)).unwrap();
            assert!(page.items.is_empty(), "{how:?}: not due until 12 DAY");
            let entry = if how == Rewrite::FileOverwrite {
                b"logs/a".to_vec()
            } else {
                keys::object_key("vol", "bkt", "logs/a")
            };
            let action = if how == Rewrite::FileOverwrite {
                crate::lifecycle::eval::ACTION_EXPIRE_FILE
            } else {
                crate::lifecycle::eval::ACTION_EXPIRE
            };
            page.items.push(st::LifecycleItem {
                entry,
                update_id: rec.update_id,
                action,
                rule_id: "logs".into(),
            });
            let command_result::Result::LifecycleScan(r) =
                sm.ok_rules(Op::LifecycleScan(page), rules)
            else {
                panic!("{how:?}: no scan result")
            };
            let expired = r.actions.get("expire").copied().unwrap_or(0);
            if rules >= 7 {
                assert_eq!(expired, 0, "{how:?}, rules {rules}");
                assert_eq!(current(&sm, "logs/a"), Some(rec), "{how:?}");
            } else {
                assert_eq!(expired, 1, "{how:?}, rules {rules}");
                assert_eq!(current(&sm, "logs/a"), None, "{how:?}");
            }
        }
    }
}
