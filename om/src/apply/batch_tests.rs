//! Batch entries (`Command.batch`): each write applies as it would in an
//! entry of its own, over the writes before it, with its own result, refusal
//! and retry-cache record, and ids below its slot; entries of older rules
//! apply as they did.

use om_proto::store as st;

use super::tests::{Sm, request_digest, setup, versioning};
use super::*;

fn put(bucket: &str, key: &str) -> Op {
    Op::PutKey(st::PutKey {
        volume: "vol".into(),
        bucket: bucket.into(),
        key: key.into(),
        size: 10,
        ..Default::default()
    })
}

fn delete(key: &str) -> Op {
    Op::DeleteKey(st::DeleteKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        ..Default::default()
    })
}

fn key_record(r: &CommandResult) -> KeyRecord {
    match &r.result {
        Some(command_result::Result::Key(k)) => k.key.clone().expect("a key record"),
        other => panic!("expected a key, got {other:?}"),
    }
}

fn refusal(r: &CommandResult) -> &str {
    match &r.result {
        Some(command_result::Result::Rejected(r)) => &r.reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A refused write in the middle of a batch stages nothing and changes no
/// neighbour: the state equals that of the same batch with another refusal
/// in its place, later writes see the earlier ones, and each write's ids
/// are its own.
#[test]
fn a_refused_write_in_a_batch_changes_nothing_and_leaves_its_neighbours_alone() {
    let run = |refused: Op| {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        let index = sm.next_index();
        let (r, _) = sm.apply_batch(
            vec![put("bkt", "a"), refused, put("bkt", "b"), delete("a")],
            RULES,
            None,
        );
        assert_eq!(r.result, None, "a batch entry's results are per write");
        assert_eq!(r.batch.len(), 4);
        let (a, b) = (key_record(&r.batch[0]), key_record(&r.batch[2]));
        assert_eq!(a.object_id, BATCHED_OBJECT_ID | index << 16);
        assert_eq!(b.object_id, BATCHED_OBJECT_ID | index << 16 | 2 << 8);
        // The delete, after the put of slot 0, found the key.
        assert!(
            matches!(
                &r.batch[3].result,
                Some(command_result::Result::Empty(_) | command_result::Result::Deleted(_))
            ),
            "{:?}",
            r.batch[3]
        );
        let dump = crate::store::dump_tables(&sm.db).unwrap();
        (refusal(&r.batch[1]).to_string(), dump)
    };
    let (why, one) = run(put("nobucket", "x"));
    assert_eq!(why, "BUCKET_NOT_FOUND");
    let (why, other) = run(Op::PutKey(st::PutKey {
        volume: "novolume".into(),
        bucket: "bkt".into(),
        key: "x".into(),
        ..Default::default()
    }));
    assert_eq!(why, "VOLUME_NOT_FOUND");
    assert_eq!(one, other, "a refused write changed the state");
}

/// Each write of a batch keeps its own retry-cache record: a retry of any
/// of them, alone, gets its result back; another request under its seq is
/// refused; a refused write's refusal is what its retry gets.
#[test]
fn each_write_of_a_batch_keeps_its_own_retry_record() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let (r, _) = sm.apply_batch(
        vec![put("bkt", "a"), put("nobucket", "x"), put("bkt", "b")],
        RULES,
        Some("client"),
    );
    let retry = |sm: &mut Sm, seq: u64, op: Op| {
        let cmd = Command {
            now_ms: sm.next_now(),
            request_digest: request_digest(&op),
            op: Some(op),
            rules: RULES,
            client_id: "client".into(),
            seq,
            ..Default::default()
        };
        sm.apply_raw(&cmd).0
    };
    assert_eq!(retry(&mut sm, 1, put("bkt", "a")), r.batch[0]);
    assert_eq!(retry(&mut sm, 2, put("nobucket", "x")), r.batch[1]);
    assert_eq!(retry(&mut sm, 3, put("bkt", "b")), r.batch[2]);
    let other = retry(&mut sm, 3, put("bkt", "c"));
    assert_eq!(refusal(&other), "RETRY_MISMATCH");
}

/// A write in a batch entry needs the rules that added batches and a
/// batchable operation; refused otherwise, staging nothing. A plain entry
/// of older rules takes the ids it always took.
#[test]
fn batches_need_their_rules_and_entries_of_older_rules_apply_as_before() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let old = crate::rules::BATCHED_WRITES.since - 1;
    let (r, staged) = sm.apply_batch(vec![put("bkt", "a"), put("bkt", "b")], old, None);
    assert_eq!(staged, 0);
    assert!(r.batch.iter().all(|r| refusal(r) == "UNSUPPORTED_COMMAND"));
    let (r, staged) = sm.apply_batch(
        vec![
            Op::CreateVolume(st::CreateVolume {
                name: "v2".into(),
                ..Default::default()
            }),
            put("bkt", "a"),
        ],
        RULES,
        None,
    );
    assert_eq!(refusal(&r.batch[0]), "NOT_BATCHABLE");
    assert!(staged > 0, "the batchable neighbour applied");
    key_record(&r.batch[1]);
    // An entry of the old rules, alone: the ids of before.
    let index = sm.next_index();
    let rec = match sm.ok_rules(put("bkt", "c"), old) {
        command_result::Result::Key(k) => k.key.unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(rec.object_id, object_id(index, 0));
}

/// Versions created in one batch entry sort in the order of their writes
/// (newest first), after the versions of earlier entries.
#[test]
fn versions_of_a_batch_sort_in_log_order() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    versioning(&mut sm, crate::store::records::ENABLED);
    let first = match sm.ok(put("bkt", "k")) {
        command_result::Result::Key(k) => k.key.unwrap().version,
        other => panic!("{other:?}"),
    };
    let (r, _) = sm.apply_batch(
        vec![put("bkt", "k"), delete("k"), put("bkt", "k")],
        RULES,
        None,
    );
    let v1 = key_record(&r.batch[0]).version;
    let v3 = key_record(&r.batch[2]).version;
    assert!(first < v1 && v1 < v3, "{first} {v1} {v3}");
}
