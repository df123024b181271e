//! Apply on its own: the limits, counters, quotas and rule versions a
//! replicated command meets whether or not it went through an edge. Each
//! refusal is checked to stage nothing.

use om_proto::store::{self as st, command::Op, command_result};

use super::tests::{Sm, setup};
use super::*;
use crate::validate;

const GIB: u64 = 1024 * 1024 * 1024;
const TIB: u64 = 1024 * GIB;

fn put(key: &str, size: u64) -> Op {
    Op::PutKey(st::PutKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        size,
        block_size: BLOCK_SIZE,
        ..Default::default()
    })
}

fn bucket_record(sm: &Sm) -> BucketRecord {
    table::get::<BucketTable>(&sm.db, &keys::bucket_key("vol", "bkt"))
        .unwrap()
        .unwrap()
}

fn volume_record(sm: &Sm) -> VolumeRecord {
    table::get::<VolumeTable>(&sm.db, &keys::volume_key("vol"))
        .unwrap()
        .unwrap()
}

fn next_block_id(sm: &Sm) -> u64 {
    table::get_counter(&sm.db, keys::NEXT_BLOCK_ID, 1).unwrap()
}

#[test]
fn sizes_and_block_counts_are_refused_before_anything_is_allocated() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let first = next_block_id(&sm);
    assert_eq!(sm.rejected(put("k", MAX_KEY_SIZE + 1)), "KEY_TOO_LARGE");
    assert_eq!(sm.rejected(put("k", u64::MAX)), "KEY_TOO_LARGE");
    // A block size that would take millions of ids for one key.
    let tiny_blocks = |block_size| {
        Op::PutKey(st::PutKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            size: 5 * TIB,
            block_size,
            ..Default::default()
        })
    };
    assert_eq!(sm.rejected(tiny_blocks(1)), "INVALID_BLOCK_SIZE");
    assert_eq!(sm.rejected(tiny_blocks(MIN_BLOCK_SIZE)), "TOO_MANY_BLOCKS");
    assert_eq!(next_block_id(&sm), first, "nothing was allocated");
    // The largest key still fits.
    sm.ok(put("k", MAX_KEY_SIZE));
    assert_eq!(next_block_id(&sm), first + MAX_KEY_BLOCKS as u64);
}

#[test]
fn parts_and_completed_uploads_are_bounded() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let command_result::Result::Upload(u) = sm.ok(Op::InitiateMultipart(st::InitiateMultipart {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "k".into(),
        ..Default::default()
    })) else {
        panic!("no upload")
    };
    let upload_id = u.upload.unwrap().upload_id;
    let etag = "0cc175b9c0f1b6a831c399e269772661".to_string();
    let part = |n: u32, size: u64| {
        Op::CommitPart(st::CommitPart {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            upload_id,
            part_number: n,
            size,
            etag: etag.clone(),
            block_size: BLOCK_SIZE,
            ..Default::default()
        })
    };
    assert_eq!(sm.rejected(part(1, MAX_PART_SIZE + 1)), "ENTITY_TOO_LARGE");
    assert_eq!(sm.rejected(part(0, 1)), "INVALID_PART_NUMBER");
    assert_eq!(
        sm.rejected(part(MAX_PART_NUMBER + 1, 1)),
        "INVALID_PART_NUMBER"
    );
    sm.ok(part(1, 10));
    sm.ok(part(2, 10));
    let complete = |max_key_size| {
        Op::CompleteMultipart(st::CompleteMultipart {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            upload_id,
            parts: vec![
                st::PartRef {
                    part_number: 1,
                    etag: etag.clone(),
                },
                st::PartRef {
                    part_number: 2,
                    etag: etag.clone(),
                },
            ],
            max_key_size,
            ..Default::default()
        })
    };
    // The parts add up past the limit the leader stamped.
    assert_eq!(sm.rejected(complete(15)), "KEY_TOO_LARGE");
    // An entry without the limit (written before it existed) completes.
    sm.ok(complete(0));
    assert_eq!(bucket_record(&sm).used_bytes, 20);
}

#[test]
fn lists_and_names_are_bounded_in_apply() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let too_many = Op::DeleteKeys(st::DeleteKeys {
        volume: "vol".into(),
        bucket: "bkt".into(),
        keys: (0..=validate::MAX_DELETE_KEYS)
            .map(|i| format!("k{i}"))
            .collect(),
        version_ids: Vec::new(),
        conditions: Default::default(),
    });
    assert_eq!(sm.rejected(too_many), "INVALID_KEY_COUNT");
    let acks = Op::AckDeletedBlocks(st::AckDeletedBlocks {
        ids: vec![st::DeletedBlocksId::default(); MAX_ACK_IDS + 1],
    });
    assert_eq!(sm.rejected(acks), "INVALID_ID_COUNT");
    // A '/' would break the key layouts' prefix-freedom.
    let slash = Op::CreateBucket(st::CreateBucket {
        volume: "vol".into(),
        name: "a/b".into(),
        ..Default::default()
    });
    assert_eq!(sm.rejected(slash), "INVALID_NAME");
    let blocks = Op::OpenKey(st::OpenKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "k".into(),
        blocks: MAX_BLOCKS_PER_CALL + 1,
        ..Default::default()
    });
    assert_eq!(sm.rejected(blocks), "TOO_MANY_BLOCKS");
    let meta = Op::PutKey(st::PutKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "k".into(),
        metadata: [("m".to_string(), "v".repeat(validate::MAX_METADATA_BYTES))].into(),
        ..Default::default()
    });
    assert_eq!(sm.rejected(meta), "METADATA_TOO_LARGE");
}

#[test]
fn fso_paths_are_normalized_and_bounded_in_apply() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_FSO);
    let mkdir = |path: String| {
        Op::CreateDirectory(st::CreateDirectory {
            volume: "vol".into(),
            bucket: "bkt".into(),
            path,
        })
    };
    // Deeper than the per-entry object-id counter allows: ids would repeat.
    let deep = vec!["d"; 300].join("/");
    assert_eq!(sm.rejected(mkdir(deep)), "INVALID_PATH");
    assert_eq!(sm.rejected(mkdir("a//b".into())), "INVALID_PATH");
    assert_eq!(sm.rejected(mkdir("/a".into())), "INVALID_PATH");
    sm.ok(mkdir("a/b".into()));
}

#[test]
fn the_owner_limit_binds_commands_of_rules_1_only() {
    let mut sm = Sm::new();
    let volume = |name: &str| {
        Op::CreateVolume(st::CreateVolume {
            name: name.into(),
            owner: "o".repeat(validate::MAX_OWNER_BYTES + 1),
            ..Default::default()
        })
    };
    assert_eq!(sm.rejected(volume("vol")), "INVALID_OWNER");
    // An old entry with a long owner was applied; it still is.
    sm.ok_rules(volume("old"), 0);
}

#[test]
fn a_newer_rules_version_stops_apply() {
    let sm = Sm::new();
    let cmd = Command {
        rules: RULES + 1,
        op: Some(Op::CreateVolume(st::CreateVolume {
            name: "vol".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    assert!(matches!(
        stage_alone(&sm.db, 1, &cmd),
        Err(OmError::Internal(_))
    ));
}

#[test]
fn counters_refuse_to_overflow() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let mut bk = bucket_record(&sm);
    bk.used_bytes = u64::MAX - 5;
    let mut b = rocksdb::WriteBatch::default();
    table::put::<BucketTable>(&sm.db, &mut b, &keys::bucket_key("vol", "bkt"), &mut bk).unwrap();
    sm.db.write(b).unwrap();
    assert_eq!(sm.rejected(put("k", 10)), "COUNTER_OVERFLOW");
    // Old entries wrap, as the build that applied them did.
    sm.ok_rules(put("k", 10), 0);
    assert_eq!(bucket_record(&sm).used_bytes, 4);
}

#[test]
fn a_block_shared_by_u32_max_keys_refuses_another_copy() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let etag = "0cc175b9c0f1b6a831c399e269772661";
    sm.ok(Op::PutKey(st::PutKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "src".into(),
        size: 1,
        etag: etag.into(),
        block_size: BLOCK_SIZE,
        ..Default::default()
    }));
    let mut b = rocksdb::WriteBatch::default();
    let cf = table::cf(&sm.db, keys::BLOCK_REFS_CF).unwrap();
    b.put_cf(cf, keys::block_ref_key(1), u32::MAX.to_be_bytes());
    sm.db.write(b).unwrap();
    let copy = Op::CopyKey(st::CopyKey {
        src_volume: "vol".into(),
        src_bucket: "bkt".into(),
        src_key: "src".into(),
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "dst".into(),
        ..Default::default()
    });
    assert_eq!(sm.rejected(copy), "COUNTER_OVERFLOW");
}

#[test]
fn old_entries_apply_as_they_did() {
    let mut sm = Sm::new();
    sm.ok_rules(
        Op::CreateVolume(st::CreateVolume {
            name: "vol".into(),
            quota_bytes: 5,
            ..Default::default()
        }),
        0,
    );
    sm.ok_rules(
        Op::CreateBucket(st::CreateBucket {
            volume: "vol".into(),
            name: "bkt".into(),
            ..Default::default()
        }),
        0,
    );
    // No usage counters appear, and the volume's quota was not enforced.
    let vol_before = volume_record(&sm);
    assert_eq!(vol_before.used_bytes, None);
    assert_eq!(bucket_record(&sm).dir_count, None);
    sm.ok_rules(put("k", 10), 0);
    assert_eq!(volume_record(&sm), vol_before);
    // A session opened without a block size has 256 MiB blocks.
    let command_result::Result::OpenKey(o) = sm.ok_rules(
        Op::OpenKey(st::OpenKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "s".into(),
            blocks: 1,
            ..Default::default()
        }),
        0,
    ) else {
        panic!("no session")
    };
    assert_eq!(o.blocks[0].length, LEGACY_BLOCK_SIZE);
    // A rules-1 write now enforces the quota, on usage summed from buckets.
    assert_eq!(sm.rejected(put("k2", 1)), "QUOTA_EXCEEDED");
    assert_eq!(volume_used_bytes(&sm.db, &volume_record(&sm)).unwrap(), 10);
}

#[test]
fn stamped_session_and_expiry_limits_are_the_ones_applied() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_OBJECT_STORE);
    let mut sessions = Vec::new();
    for key in ["a", "b", "c"] {
        let command_result::Result::OpenKey(o) = sm.ok(Op::OpenKey(st::OpenKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: key.into(),
            block_size: BLOCK_SIZE,
            ..Default::default()
        })) else {
            panic!("no session")
        };
        sessions.push(o.session_id);
    }
    let allocate = |count, max_session_blocks| {
        Op::AllocateBlock(st::AllocateBlock {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "a".into(),
            session_id: sessions[0],
            count,
            max_session_blocks,
        })
    };
    sm.ok(allocate(2, 3));
    assert_eq!(sm.rejected(allocate(2, 3)), "TOO_MANY_BLOCKS");
    sm.ok(allocate(2, 0));
    let expire = |max_entries| {
        Op::ExpireOpenKeys(st::ExpireOpenKeys {
            before_ms: u64::MAX,
            max_entries,
        })
    };
    let count = |r| match r {
        command_result::Result::Count(c) => c.count,
        other => panic!("{other:?}"),
    };
    assert_eq!(count(sm.ok(expire(2))), 2);
    assert_eq!(count(sm.ok(expire(0))), 1);
    assert_eq!(bucket_record(&sm).open_key_count, 0);
}

#[test]
fn quota_refusals_stage_nothing_and_deletes_make_room() {
    let mut sm = Sm::new();
    sm.ok(Op::CreateVolume(st::CreateVolume {
        name: "vol".into(),
        quota_bytes: 100,
        ..Default::default()
    }));
    sm.ok(Op::CreateBucket(st::CreateBucket {
        volume: "vol".into(),
        name: "bkt".into(),
        quota_bytes: 80,
        quota_namespace: 2,
        ..Default::default()
    }));
    sm.ok(put("a", 50));
    // Bucket space: 50 + 40 > 80.
    assert_eq!(sm.rejected(put("b", 40)), "QUOTA_EXCEEDED");
    // An overwrite counts its growth only: 50 -> 80.
    sm.ok(put("a", 80));
    sm.ok(put("b", 0));
    // Namespace: a third key.
    assert_eq!(sm.rejected(put("c", 0)), "QUOTA_EXCEEDED");
    let bk = bucket_record(&sm);
    assert_eq!((bk.used_bytes, bk.key_count), (80, 2));
    assert_eq!(volume_record(&sm).used_bytes, Some(80));
    // A quota below what the bucket holds is refused.
    let set = |q| {
        Op::SetBucketQuota(st::SetBucketQuota {
            volume: "vol".into(),
            name: "bkt".into(),
            quota_bytes: Some(q),
            quota_namespace: None,
        })
    };
    assert_eq!(sm.rejected(set(79)), "QUOTA_BELOW_USAGE");
    sm.ok(set(0));
    // Now the volume's quota binds: 80 + 30 > 100.
    assert_eq!(sm.rejected(put("b", 30)), "QUOTA_EXCEEDED");
    sm.ok(Op::DeleteKey(st::DeleteKey {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "a".into(),
        version_id: String::new(),
        conditions: Default::default(),
    }));
    assert_eq!(volume_record(&sm).used_bytes, Some(0));
    sm.ok(put("b", 30));
}

#[test]
fn directories_count_against_the_namespace() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_FSO);
    sm.ok(Op::SetBucketQuota(st::SetBucketQuota {
        volume: "vol".into(),
        name: "bkt".into(),
        quota_bytes: None,
        quota_namespace: Some(3),
    }));
    let mkdir = |path: &str| {
        Op::CreateDirectory(st::CreateDirectory {
            volume: "vol".into(),
            bucket: "bkt".into(),
            path: path.into(),
        })
    };
    sm.ok(mkdir("a/b"));
    assert_eq!(sm.rejected(mkdir("c/d")), "QUOTA_EXCEEDED");
    let file = |path: &str| {
        Op::CreateFile(st::CreateFile {
            volume: "vol".into(),
            bucket: "bkt".into(),
            path: path.into(),
            recursive: true,
            ..Default::default()
        })
    };
    assert_eq!(sm.rejected(file("x/y/f")), "QUOTA_EXCEEDED");
    sm.ok(mkdir("c"));
    assert_eq!(bucket_record(&sm).dir_count, Some(3));
    // Deleting an empty directory frees its entry at once.
    sm.ok(Op::DeletePath(st::DeletePath {
        volume: "vol".into(),
        bucket: "bkt".into(),
        path: "c".into(),
        recursive: false,
    }));
    assert_eq!(bucket_record(&sm).dir_count, Some(2));
}

fn dir_below(sm: &Sm, path: &str) -> Option<st::SubtreeBounds> {
    let root = bucket_record(sm).object_id;
    let comps = crate::fs::components(path);
    match crate::fs::stat(&sm.db, root, &comps, "path").unwrap() {
        Some(crate::fs::Entry::Dir { rec, .. }) => rec.below,
        other => panic!("{path}: {other:?}"),
    }
}

#[test]
fn renames_keep_subtrees_within_the_stamped_path_limits() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_FSO);
    let mkdir = |path: &str| {
        Op::CreateDirectory(st::CreateDirectory {
            volume: "vol".into(),
            bucket: "bkt".into(),
            path: path.into(),
        })
    };
    let rename = |from: &str, to: &str, max_path_depth, max_path_bytes| {
        Op::RenamePath(st::RenamePath {
            volume: "vol".into(),
            bucket: "bkt".into(),
            from: from.into(),
            to: to.into(),
            max_path_depth,
            max_path_bytes,
        })
    };
    sm.ok(mkdir("a/b/c"));
    assert_eq!(
        dir_below(&sm, "a"),
        Some(st::SubtreeBounds { depth: 2, bytes: 3 })
    );
    sm.ok(mkdir("y"));
    sm.ok(mkdir("k/l/m"));
    // "y/a/b/c": 4 components.
    sm.ok(rename("a", "y/a", 5, 1024));
    assert_eq!(
        dir_below(&sm, "y"),
        Some(st::SubtreeBounds { depth: 3, bytes: 5 })
    );
    // "k/l/m/y/a/b/c" would have 7 components.
    assert_eq!(
        sm.rejected(rename("y", "k/l/m/y", 6, 1024)),
        "PATH_TOO_DEEP"
    );
    // ... and 13 bytes.
    assert_eq!(sm.rejected(rename("y", "k/l/m/y", 7, 12)), "PATH_TOO_LONG");
    // Entries without the limits (written before they existed) move freely.
    sm.ok(rename("y", "k/l/m/y", 0, 0));
    assert_eq!(
        dir_below(&sm, "k"),
        Some(st::SubtreeBounds {
            depth: 6,
            bytes: 11
        })
    );
}

#[test]
fn a_directory_of_unknown_bounds_makes_its_new_ancestors_unknown() {
    let mut sm = Sm::new();
    setup(&mut sm, LAYOUT_FSO);
    let mkdir = |path: &str| {
        Op::CreateDirectory(st::CreateDirectory {
            volume: "vol".into(),
            bucket: "bkt".into(),
            path: path.into(),
        })
    };
    sm.ok_rules(mkdir("old/x"), 0);
    assert_eq!(dir_below(&sm, "old"), None);
    sm.ok(mkdir("new"));
    sm.ok(Op::RenamePath(st::RenamePath {
        volume: "vol".into(),
        bucket: "bkt".into(),
        from: "old".into(),
        to: "new/old".into(),
        max_path_depth: 200,
        max_path_bytes: 1024,
    }));
    assert_eq!(dir_below(&sm, "new"), None);
}
