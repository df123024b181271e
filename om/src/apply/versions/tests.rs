use super::*;
use crate::apply::tests::{Sm, setup, versioning};
use crate::apply::{LAYOUT_FSO, LAYOUT_OBJECT_STORE, into_outcome};
use om_proto::store::{self as st, command::Op, command_result};

/// Puts `key` with `size` bytes; returns its version id.
fn put(sm: &mut Sm, key: &str, size: u64) -> String {
    match sm.ok(Op::PutKey(st::PutKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        size,
        block_size: 1 << 20,
        etag: "0123456789abcdef0123456789abcdef".into(),
        ..Default::default()
    })) {
        command_result::Result::Key(k) => version_id(&k.key.unwrap()),
        other => panic!("{other:?}"),
    }
}

fn delete(sm: &mut Sm, key: &str, version_id: &str) -> st::DeletedVersion {
    match sm.ok(Op::DeleteKey(st::DeleteKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        version_id: version_id.into(),
        conditions: Default::default(),
    })) {
        command_result::Result::Deleted(d) => d,
        other => panic!("{other:?}"),
    }
}

/// The key's entries in table order: (current?, version id, delete
/// marker?, size).
fn history(sm: &Sm, key: &str) -> Vec<(bool, String, bool, u64)> {
    let prefix = keys::object_key("vol", "bkt", key);
    let mut it =
        crate::store::iter::DeferredSeekIter::with_prefix(&sm.db, keys::KEYS_CF, &prefix).unwrap();
    it.seek(&prefix);
    let mut out = Vec::new();
    while let Some((k, v)) = it.current() {
        let rel = &k[prefix.len()..];
        if !(rel.is_empty() || rel[0] == 0) {
            break;
        }
        let rec = table::decode::<KeyTable>(v).unwrap();
        out.push((
            rel.is_empty(),
            version_id(&rec),
            rec.delete_marker,
            rec.size,
        ));
        it.advance();
    }
    out
}

fn bucket(sm: &Sm) -> BucketRecord {
    table::get::<crate::store::table::BucketTable>(&sm.db, &keys::bucket_key("vol", "bkt"))
        .unwrap()
        .unwrap()
}

/// Blocks released so far, in release order.
fn freed_blocks(sm: &Sm) -> usize {
    let mut it =
        crate::store::iter::DeferredSeekIter::new(&sm.db, keys::DELETED_BLOCKS_CF, None, None)
            .unwrap();
    it.seek_to_first();
    let mut n = 0;
    while let Some((_, v)) = it.current() {
        n += table::decode::<crate::store::table::DeletedBlocksTable>(v)
            .unwrap()
            .blocks
            .len();
        it.advance();
    }
    n
}

#[test]
fn enabled_keeps_every_version_and_delete_markers_hide_the_key() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let legacy = put(&mut sm, "k", 1 << 20);
    assert_eq!(legacy, "null");
    versioning(&mut sm, ENABLED);
    let v1 = put(&mut sm, "k", 2 << 20);
    let v2 = put(&mut sm, "k", 3 << 20);
    assert!(v2 > v1, "newer versions have larger ids here");
    assert_eq!(
        history(&sm, "k"),
        vec![
            (true, v2.clone(), false, 3 << 20),
            (false, v1.clone(), false, 2 << 20),
            (false, legacy.clone(), false, 1 << 20),
        ]
    );
    assert_eq!(
        freed_blocks(&sm),
        0,
        "noncurrent versions keep their blocks"
    );
    let b = bucket(&sm);
    assert_eq!((b.key_count, b.used_bytes), (3, 6 << 20));
    // A delete without a version id adds a delete marker.
    let d = delete(&mut sm, "k", "");
    assert!(d.delete_marker);
    let h = history(&sm, "k");
    assert_eq!(h[0], (true, d.version_id.clone(), true, 0));
    assert_eq!(h.len(), 4);
    assert_eq!(
        bucket(&sm).key_count,
        3,
        "a delete marker counts for nothing"
    );
    // Noncurrent versions carry when they became noncurrent.
    let rec = table::get::<KeyTable>(
        &sm.db,
        &keys::version_key("vol", "bkt", "k", parse_stamp(&v2)),
    )
    .unwrap()
    .unwrap();
    assert!(rec.noncurrent_since_ms > 0);
    // Removing the marker by version brings v2 back.
    let d2 = delete(&mut sm, "k", &d.version_id);
    assert!(d2.delete_marker);
    assert_eq!(history(&sm, "k")[0], (true, v2.clone(), false, 3 << 20));
    // Removing the current version promotes the next newest and frees
    // its blocks.
    delete(&mut sm, "k", &v2);
    assert_eq!(history(&sm, "k")[0], (true, v1.clone(), false, 2 << 20));
    assert_eq!(freed_blocks(&sm), 3);
    let rec = table::get::<KeyTable>(&sm.db, &keys::object_key("vol", "bkt", "k"))
        .unwrap()
        .unwrap();
    assert_eq!(rec.noncurrent_since_ms, 0);
    assert_eq!(rec.null_history, Some(0), "the null version is still known");
    // The null version goes by its id, wherever it is.
    delete(&mut sm, "k", "null");
    assert_eq!(history(&sm, "k"), vec![(true, v1.clone(), false, 2 << 20)]);
    let rec = table::get::<KeyTable>(&sm.db, &keys::object_key("vol", "bkt", "k"))
        .unwrap()
        .unwrap();
    assert_eq!(rec.null_history, None);
    delete(&mut sm, "k", &v1);
    assert!(history(&sm, "k").is_empty());
    let b = bucket(&sm);
    assert_eq!((b.key_count, b.used_bytes), (0, 0));
    assert_eq!(freed_blocks(&sm), 6);
}

fn parse_stamp(id: &str) -> u64 {
    match parse_version_id(id, "f").unwrap() {
        VersionRef::Stamp(s) => s,
        VersionRef::Null => panic!("null"),
    }
}

#[test]
fn suspended_replaces_only_the_null_version() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    versioning(&mut sm, ENABLED);
    let v1 = put(&mut sm, "k", 1 << 20);
    versioning(&mut sm, SUSPENDED);
    let n1 = put(&mut sm, "k", 2 << 20);
    assert_eq!(n1, "null");
    // A second suspended write replaces the null version (frees it).
    put(&mut sm, "k", 3 << 20);
    assert_eq!(
        history(&sm, "k"),
        vec![
            (true, "null".into(), false, 3 << 20),
            (false, v1.clone(), false, 1 << 20)
        ]
    );
    assert_eq!(freed_blocks(&sm), 2);
    // Enabled again: the null version becomes noncurrent and stays
    // findable; suspended again, a write removes it from the history.
    versioning(&mut sm, ENABLED);
    let v2 = put(&mut sm, "k", 1 << 20);
    assert_eq!(
        history(&sm, "k"),
        vec![
            (true, v2.clone(), false, 1 << 20),
            (false, "null".into(), false, 3 << 20),
            (false, v1.clone(), false, 1 << 20),
        ]
    );
    versioning(&mut sm, SUSPENDED);
    let d = delete(&mut sm, "k", "");
    assert_eq!((d.version_id.as_str(), d.delete_marker), ("null", true));
    assert_eq!(
        history(&sm, "k"),
        vec![
            (true, "null".into(), true, 0),
            (false, v2.clone(), false, 1 << 20),
            (false, v1.clone(), false, 1 << 20),
        ]
    );
    assert_eq!(freed_blocks(&sm), 5);
    let b = bucket(&sm);
    assert_eq!((b.key_count, b.used_bytes), (2, 2 << 20));
}

#[test]
fn one_command_removes_several_versions_of_one_key() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    versioning(&mut sm, ENABLED);
    let ids: Vec<String> = (0..4).map(|_| put(&mut sm, "k", 1 << 20)).collect();
    // The current one, the next, a missing one, the current one again
    // (gone by then), and a marker for another key.
    let r = sm.ok(Op::DeleteKeys(st::DeleteKeys {
        volume: "vol".into(),
        bucket: "bkt".into(),
        keys: vec!["k".into(), "k".into(), "k".into(), "k".into(), "j".into()],
        version_ids: vec![
            ids[3].clone(),
            ids[2].clone(),
            "00000000000000ff".into(),
            ids[3].clone(),
            String::new(),
        ],
        conditions: Default::default(),
    }));
    let command_result::Result::DeleteKeys(d) = r else {
        panic!()
    };
    let reasons: Vec<&str> = d.outcomes.iter().map(|o| o.reason.as_str()).collect();
    assert_eq!(
        reasons,
        ["", "", "VERSION_NOT_FOUND", "VERSION_NOT_FOUND", ""]
    );
    assert!(d.outcomes[4].delete_marker);
    assert_eq!(
        history(&sm, "k"),
        vec![
            (true, ids[1].clone(), false, 1 << 20),
            (false, ids[0].clone(), false, 1 << 20)
        ]
    );
    assert_eq!(history(&sm, "j").len(), 1);
    assert_eq!(freed_blocks(&sm), 2);
    assert_eq!(bucket(&sm).key_count, 2);
}

#[test]
fn restoring_a_version_by_copy_shares_its_blocks() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    versioning(&mut sm, ENABLED);
    let v1 = put(&mut sm, "k", 1 << 20);
    put(&mut sm, "k", 1 << 20);
    let r = sm.ok(Op::CopyKey(st::CopyKey {
        src_volume: "vol".into(),
        src_bucket: "bkt".into(),
        src_key: "k".into(),
        src_version_id: v1.clone(),
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "k".into(),
        ..Default::default()
    }));
    let command_result::Result::Key(k) = r else {
        panic!()
    };
    let restored = k.key.unwrap();
    assert_eq!(history(&sm, "k").len(), 3);
    // Deleting the restored copy and v1 frees the shared block once.
    delete(&mut sm, "k", &version_id(&restored));
    assert_eq!(freed_blocks(&sm), 0);
    delete(&mut sm, "k", &v1);
    assert_eq!(freed_blocks(&sm), 1);
}

#[test]
fn a_copy_onto_itself_keeps_its_blocks_in_every_state() {
    for state in [UNVERSIONED, SUSPENDED] {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        if state != UNVERSIONED {
            versioning(&mut sm, state);
        }
        put(&mut sm, "k", 2 << 20);
        sm.ok(Op::CopyKey(st::CopyKey {
            src_volume: "vol".into(),
            src_bucket: "bkt".into(),
            src_key: "k".into(),
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            metadata_directive: 1,
            ..Default::default()
        }));
        assert_eq!(
            freed_blocks(&sm),
            0,
            "state {state}: a self-copy freed its blocks"
        );
        assert_eq!(history(&sm, "k").len(), 1);
        // Deleting it frees them exactly once.
        delete(&mut sm, "k", "null");
        assert_eq!(freed_blocks(&sm), 2, "state {state}");
    }
}

#[test]
fn bad_versions_are_refused_and_change_nothing() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    put(&mut sm, "k", 1);
    let del = |v: &str| {
        Op::DeleteKey(st::DeleteKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            version_id: v.into(),
            conditions: Default::default(),
        })
    };
    assert_eq!(sm.rejected(del("zzz")), "INVALID_VERSION_ID");
    assert_eq!(sm.rejected(del("0000000000000001")), "VERSION_NOT_FOUND");
    assert_eq!(
        sm.rejected(Op::SetBucketVersioning(st::SetBucketVersioning {
            volume: "vol".into(),
            bucket: "bkt".into(),
            versioning: UNVERSIONED,
        })),
        "INVALID_VERSIONING"
    );
    versioning(&mut sm, ENABLED);
    assert_eq!(
        sm.rejected(Op::SetBucketVersioning(st::SetBucketVersioning {
            volume: "vol".into(),
            bucket: "bkt".into(),
            versioning: 7,
        })),
        "INVALID_VERSIONING"
    );
    assert_eq!(
        sm.rejected(Op::RenameKey(st::RenameKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            from: "k".into(),
            to: "z".into(),
        })),
        "BUCKET_VERSIONED"
    );
    assert_eq!(
        sm.rejected(Op::CopyKey(st::CopyKey {
            src_volume: "vol".into(),
            src_bucket: "bkt".into(),
            src_key: "k".into(),
            src_version_id: "00000000000000aa".into(),
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "c".into(),
            ..Default::default()
        })),
        "VERSION_NOT_FOUND"
    );
    assert_eq!(history(&sm, "k").len(), 1);
    // An FSO bucket refuses versioning.
    let mut fso = Sm::new();
    setup(&mut fso, LAYOUT_FSO);
    let (r, staged) = fso.apply(Op::SetBucketVersioning(st::SetBucketVersioning {
        volume: "vol".into(),
        bucket: "bkt".into(),
        versioning: ENABLED,
    }));
    assert_eq!(staged, 0);
    assert_eq!(
        into_outcome(r).unwrap_err().reason(),
        "VERSIONING_NOT_SUPPORTED"
    );
}

#[test]
fn version_ids_round_trip_and_refuse_malformed_ones() {
    let rec = KeyRecord {
        version: version_stamp(5, 1),
        versioned: true,
        ..Default::default()
    };
    let id = version_id(&rec);
    assert_eq!(id.len(), VERSION_ID_CHARS);
    assert_eq!(
        parse_version_id(&id, "f").unwrap(),
        VersionRef::Stamp(rec.version)
    );
    assert_eq!(parse_version_id("null", "f").unwrap(), VersionRef::Null);
    for bad in [
        "",
        "NULL",
        "0000000000000000",
        "00000000000000zz",
        "0123",
        "0000000000050001x",
    ] {
        let e = parse_version_id(bad, "version_id").unwrap_err();
        assert_eq!(e.reason(), "INVALID_VERSION_ID", "{bad:?}");
    }
    assert!(version_stamp(2, 0) > version_stamp(1, u16::MAX));
}
