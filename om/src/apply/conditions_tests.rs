//! Conditional deletes (rules 15): each condition is checked against what
//! the delete would remove, a refusal stages nothing, and with conditions
//! nothing there is NOT_FOUND (no delete marker is added).

use om_proto::store::{self as st, KeyRecord, command::Op, command_result};

use crate::apply::tests::{Sm, setup, versioning};
use crate::apply::versions::{self, version_id};
use crate::apply::{LAYOUT_OBJECT_STORE, into_outcome};
use crate::store::keys;
use crate::store::table::{self, KeyTable};

const ETAG: &str = "0123456789abcdef0123456789abcdef";

fn put(sm: &mut Sm, key: &str, size: u64) -> KeyRecord {
    match sm.ok(Op::PutKey(st::PutKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        size,
        block_size: 1 << 20,
        etag: ETAG.into(),
        ..Default::default()
    })) {
        command_result::Result::Key(k) => k.key.unwrap(),
        other => panic!("{other:?}"),
    }
}

fn del(key: &str, version_id: &str, c: st::DeleteConditions) -> Op {
    Op::DeleteKey(st::DeleteKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        version_id: version_id.into(),
        conditions: Some(c),
    })
}

fn etag(e: &str) -> st::DeleteConditions {
    st::DeleteConditions {
        if_match: e.into(),
        ..Default::default()
    }
}

fn any() -> st::DeleteConditions {
    st::DeleteConditions {
        if_match_any: true,
        ..Default::default()
    }
}

fn size(n: u64) -> st::DeleteConditions {
    st::DeleteConditions {
        if_size: Some(n),
        ..Default::default()
    }
}

fn modified(s: u64) -> st::DeleteConditions {
    st::DeleteConditions {
        if_modified_s: Some(s),
        ..Default::default()
    }
}

fn current(sm: &Sm, key: &str) -> Option<KeyRecord> {
    table::get::<KeyTable>(&sm.db, &keys::object_key("vol", "bkt", key)).unwrap()
}

#[test]
fn an_unversioned_delete_checks_the_key_it_removes() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let rec = put(&mut sm, "k", 10);
    let secs = rec.modification_time_ms / 1000;
    for wrong in [etag("ffff"), size(9), modified(secs + 1)] {
        assert_eq!(sm.rejected(del("k", "", wrong)), "IF_MATCH_FAILED");
    }
    assert!(current(&sm, "k").is_some());
    sm.ok(del(
        "k",
        "",
        st::DeleteConditions {
            if_match: ETAG.into(),
            if_match_any: false,
            if_modified_s: Some(secs),
            if_size: Some(10),
        },
    ));
    assert!(current(&sm, "k").is_none());
    // Nothing there: every condition, `*` included, is KEY_NOT_FOUND.
    assert_eq!(sm.rejected(del("k", "", any())), "KEY_NOT_FOUND");
    assert_eq!(sm.rejected(del("k", "", etag("ffff"))), "KEY_NOT_FOUND");
}

#[test]
fn a_versioned_delete_checks_the_current_entry_or_the_version_named() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    versioning(&mut sm, versions::ENABLED);
    let v1 = version_id(&put(&mut sm, "k", 10));
    // A key never written: no delete marker is added.
    assert_eq!(sm.rejected(del("never", "", any())), "KEY_NOT_FOUND");
    assert!(current(&sm, "never").is_none());

    assert_eq!(sm.rejected(del("k", "", etag("ffff"))), "IF_MATCH_FAILED");
    let command_result::Result::Deleted(d) = sm.ok(del("k", "", etag(ETAG))) else {
        panic!()
    };
    assert!(d.delete_marker);
    // The marker is the current entry now: an ETag or a size fails on it,
    // `*` passes (and adds another marker, as a plain delete does).
    assert_eq!(sm.rejected(del("k", "", etag(ETAG))), "IF_MATCH_FAILED");
    assert_eq!(sm.rejected(del("k", "", size(10))), "IF_MATCH_FAILED");
    let command_result::Result::Deleted(d) = sm.ok(del("k", "", any())) else {
        panic!()
    };
    assert!(d.delete_marker);

    // A version named: checked against that version.
    assert_eq!(sm.rejected(del("k", &v1, size(11))), "IF_MATCH_FAILED");
    let command_result::Result::Deleted(d) = sm.ok(del("k", &v1, size(10))) else {
        panic!()
    };
    assert_eq!(d.version_id, v1);
    assert!(!d.delete_marker);
    assert_eq!(sm.rejected(del("k", &v1, any())), "VERSION_NOT_FOUND");
}

#[test]
fn delete_keys_checks_each_key_with_its_own_conditions() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    put(&mut sm, "a", 1);
    put(&mut sm, "b", 2);
    let many = |keys: &[&str], conditions: Vec<st::DeleteConditions>| {
        Op::DeleteKeys(st::DeleteKeys {
            volume: "vol".into(),
            bucket: "bkt".into(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            version_ids: Vec::new(),
            conditions,
        })
    };
    assert_eq!(
        sm.rejected(many(&["a", "b"], vec![any()])),
        "INVALID_CONDITION_COUNT"
    );
    let command_result::Result::DeleteKeys(r) = sm.ok(many(
        &["a", "b", "c", "a"],
        vec![
            etag("ffff"),
            st::DeleteConditions::default(),
            any(),
            size(1),
        ],
    )) else {
        panic!()
    };
    let reasons: Vec<&str> = r.outcomes.iter().map(|o| o.reason.as_str()).collect();
    // The first "a" failed its condition and changed nothing, so the
    // second finds it; "b" asked nothing and is deleted.
    assert_eq!(reasons, ["IF_MATCH_FAILED", "", "KEY_NOT_FOUND", ""]);
    assert!(current(&sm, "a").is_none() && current(&sm, "b").is_none());
}

#[test]
fn entries_before_rules_15_carry_no_conditions() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    put(&mut sm, "k", 1);
    assert_eq!(
        sm.rejected_rules(del("k", "", any()), 14),
        "UNSUPPORTED_COMMAND"
    );
    assert!(current(&sm, "k").is_some());
    // The same delete without conditions applies as it always did.
    let (r, _) = sm.apply_rules(
        Op::DeleteKey(st::DeleteKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            ..Default::default()
        }),
        14,
    );
    into_outcome(r).unwrap();
    assert!(current(&sm, "k").is_none());
}
