//! Random replicated commands into apply: refused, never fatal, nothing staged.

use super::*;

/// A state machine on a scratch database, applied to as replicas do.
struct Scratch {
    _dir: tempfile::TempDir,
    db: rocksdb::DB,
    index: u64,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        let db = rocksdb::DB::open_cf(&o, dir.path(), om::store::keys::TABLE_CFS).unwrap();
        Scratch {
            _dir: dir,
            db,
            index: 0,
        }
    }

    fn command(&self, op: st::command::Op) -> st::Command {
        st::Command {
            now_ms: 1_000_000 + self.index,
            op: Some(op),
            rules: om::apply::RULES,
            ..Default::default()
        }
    }

    /// Applies and commits `op`; panics unless it succeeds.
    fn ok(&mut self, op: st::command::Op) -> st::command_result::Result {
        self.index += 1;
        let cmd = self.command(op);
        let (r, _) = om::apply::apply_alone(&self.db, self.index, &cmd).unwrap();
        om::apply::into_outcome(r).unwrap()
    }
}

use om_proto::store as st;

type DecodeOp = fn(&[u8]) -> Option<st::command::Op>;

macro_rules! op {
    ($variant:ident, $template:expr) => {{
        let t: st::$variant = $template;
        let decode: DecodeOp = |b| st::$variant::decode(b).ok().map(st::command::Op::$variant);
        (stringify!($variant), t.encode_to_vec(), decode)
    }};
}

/// A replicated command can carry anything a faulty or hostile leader (or an
/// old binary) put in it: apply refuses what is invalid without staging a
/// write, and never fails (a failure would stop every replica).
#[test]
fn apply_refuses_random_commands_without_staging() {
    use st::command::Op;
    let mut sm = Scratch::new();
    sm.ok(Op::CreateVolume(st::CreateVolume {
        name: "vol1".into(),
        ..Default::default()
    }));
    for (name, layout) in [("bkt1", 1), ("fs1", 2)] {
        sm.ok(Op::CreateBucket(st::CreateBucket {
            volume: "vol1".into(),
            name: name.into(),
            layout,
            ..Default::default()
        }));
    }
    for k in ["a", "a/b", "b"] {
        sm.ok(Op::PutKey(st::PutKey {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: k.into(),
            size: 10,
            etag: ETAG.into(),
            ..Default::default()
        }));
    }
    sm.ok(Op::CreateSnapshot(st::CreateSnapshot {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        name: "s0".into(),
    }));
    let st::command_result::Result::OpenKey(session) = sm.ok(Op::OpenKey(st::OpenKey {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: "open".into(),
        blocks: 2,
        ..Default::default()
    })) else {
        panic!("no session")
    };
    // Lifecycle rules on both buckets, and a page of a scan that expires
    // `a` (mutations reach every check of a page and of its items).
    for b in ["bkt1", "fs1"] {
        sm.ok(Op::SetBucketLifecycle(st::SetBucketLifecycle {
            volume: "vol1".into(),
            bucket: b.into(),
            rules: vec![om_proto::v1::LifecycleRule {
                id: "r".into(),
                enabled: true,
                expiration: Some(om_proto::v1::LifecycleExpiration {
                    days: Some(1),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            delete: false,
        }));
    }
    let table = |b: &str| {
        let k = om::store::keys::bucket_key("vol1", b);
        (
            om::store::table::get::<om::store::table::BucketTable>(&sm.db, &k)
                .unwrap()
                .unwrap(),
            om::store::table::get::<om::store::table::LifecycleTable>(&sm.db, &k)
                .unwrap()
                .unwrap(),
        )
    };
    let (bucket1, config1) = table("bkt1");
    let (fs_bucket, _) = table("fs1");
    let a = om::store::table::get::<om::store::table::KeyTable>(
        &sm.db,
        &om::store::keys::object_key("vol1", "bkt1", "a"),
    )
    .unwrap()
    .unwrap();
    let scan_page = st::LifecycleScan {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        bucket_object_id: bucket1.object_id,
        config_update_id: config1.update_id,
        start_pass: true,
        phase: 1,
        to: om::store::keys::object_key("vol1", "bkt1", "b"),
        day_ms: 1,
        evaluated: 3,
        items: vec![st::LifecycleItem {
            entry: om::store::keys::object_key("vol1", "bkt1", "a"),
            update_id: a.update_id,
            action: 1,
            rule_id: "r".into(),
        }],
        ..Default::default()
    };
    let st::command_result::Result::Upload(up) =
        sm.ok(Op::InitiateMultipart(st::InitiateMultipart {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "mp".into(),
            ..Default::default()
        }))
    else {
        panic!("no upload")
    };
    let upload_id = up.upload.unwrap().upload_id;
    sm.ok(Op::CommitPart(st::CommitPart {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: "mp".into(),
        upload_id,
        part_number: 1,
        size: 10,
        etag: ETAG.into(),
        block_size: om::apply::BLOCK_SIZE,
        ..Default::default()
    }));
    sm.ok(Op::CreateDirectory(st::CreateDirectory {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        path: "x/y".into(),
    }));
    let st::command_result::Result::OpenKey(file) = sm.ok(Op::CreateFile(st::CreateFile {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        path: "x/y/f".into(),
        blocks: 1,
        ..Default::default()
    })) else {
        panic!("no file session")
    };
    let block = st::BlockRecord {
        block_id: session.blocks[0].block_id,
        offset: 0,
        length: 10,
    };
    let meta = || [("m".to_string(), "v".to_string())].into();
    let templates: Vec<(&str, Vec<u8>, DecodeOp)> = vec![
        op!(
            CreateVolume,
            st::CreateVolume {
                name: "vol2".into(),
                owner: "o".into(),
                metadata: meta(),
                ..Default::default()
            }
        ),
        op!(
            DeleteVolume,
            st::DeleteVolume {
                name: "vol1".into()
            }
        ),
        op!(
            CreateBucket,
            st::CreateBucket {
                volume: "vol1".into(),
                name: "bkt2".into(),
                layout: 1,
                metadata: meta(),
                ..Default::default()
            }
        ),
        op!(
            DeleteBucket,
            st::DeleteBucket {
                volume: "vol1".into(),
                name: "bkt1".into()
            }
        ),
        op!(
            PutKey,
            st::PutKey {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "k".into(),
                size: 300 << 20,
                etag: ETAG.into(),
                metadata: meta(),
                ..Default::default()
            }
        ),
        op!(
            DeleteKey,
            st::DeleteKey {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "a".into(),
                version_id: "null".into(),
                conditions: Some(st::DeleteConditions {
                    if_match: ETAG.into(),
                    if_size: Some(300 << 20),
                    ..Default::default()
                })
            }
        ),
        op!(
            PutKeys,
            st::PutKeys {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                keys: vec![st::NewKey {
                    key: "bulk".into(),
                    size: 300 << 20,
                    etag: ETAG.into(),
                    metadata: meta(),
                    ..Default::default()
                }],
                block_size: 0
            }
        ),
        op!(
            PutKeyTagging,
            st::PutKeyTagging {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "a".into(),
                version_id: String::new(),
                tags: meta(),
            }
        ),
        op!(
            CreateSnapshot,
            st::CreateSnapshot {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                name: "s1".into()
            }
        ),
        op!(
            RenameSnapshot,
            st::RenameSnapshot {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                name: "s0".into(),
                new_name: "s9".into()
            }
        ),
        op!(
            DeleteSnapshot,
            st::DeleteSnapshot {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                name: "s0".into()
            }
        ),
        op!(
            SetBucketTags,
            st::SetBucketTags {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                tags: meta()
            }
        ),
        op!(
            SetBucketVersioning,
            st::SetBucketVersioning {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                versioning: 1
            }
        ),
        op!(
            ExpireRetryCache,
            st::ExpireRetryCache {
                before_ms: 2_000_000,
                max_entries: 10,
                advance_generation: false,
                from_generation: 0
            }
        ),
        op!(
            ExpireRetryCache,
            st::ExpireRetryCache {
                before_ms: 0,
                max_entries: 0,
                advance_generation: true,
                from_generation: 0
            }
        ),
        op!(
            DeleteKeys,
            st::DeleteKeys {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                keys: vec!["a".into(), "b".into(), "a".into()],
                version_ids: Vec::new(),
                conditions: Vec::new()
            }
        ),
        op!(
            DeleteKeys,
            st::DeleteKeys {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                keys: vec!["a".into(), "b".into(), "a".into()],
                version_ids: vec!["null".into(), "".into(), "0000000000010000".into()],
                conditions: vec![
                    st::DeleteConditions {
                        if_match_any: true,
                        ..Default::default()
                    },
                    st::DeleteConditions::default(),
                    st::DeleteConditions {
                        if_modified_s: Some(1_000),
                        ..Default::default()
                    },
                ]
            }
        ),
        op!(
            RenameKey,
            st::RenameKey {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                from: "a".into(),
                to: "z".into()
            }
        ),
        op!(
            OpenKey,
            st::OpenKey {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "n".into(),
                blocks: 3,
                metadata: meta(),
                ..Default::default()
            }
        ),
        op!(
            AllocateBlock,
            st::AllocateBlock {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "open".into(),
                session_id: session.session_id,
                count: 2,
                max_session_blocks: om::apply::MAX_SESSION_BLOCKS as u32,
            }
        ),
        op!(
            CommitKey,
            st::CommitKey {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "open".into(),
                session_id: session.session_id,
                size: 10,
                blocks: vec![block],
                etag: ETAG.into(),
                ..Default::default()
            }
        ),
        op!(
            CopyKey,
            st::CopyKey {
                src_volume: "vol1".into(),
                src_bucket: "bkt1".into(),
                src_key: "a".into(),
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "c".into(),
                ..Default::default()
            }
        ),
        op!(
            InitiateMultipart,
            st::InitiateMultipart {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "mp2".into(),
                ..Default::default()
            }
        ),
        op!(
            CommitPart,
            st::CommitPart {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "mp".into(),
                upload_id,
                part_number: 2,
                size: 10,
                etag: ETAG.into(),
                block_size: om::apply::BLOCK_SIZE,
                ..Default::default()
            }
        ),
        op!(
            CompleteMultipart,
            st::CompleteMultipart {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "mp".into(),
                upload_id,
                parts: vec![st::PartRef {
                    part_number: 1,
                    etag: ETAG.into()
                }],
                min_part_size: 5,
                ..Default::default()
            }
        ),
        op!(
            AbortMultipart,
            st::AbortMultipart {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "mp".into(),
                upload_id
            }
        ),
        op!(
            AckDeletedBlocks,
            st::AckDeletedBlocks {
                ids: vec![st::DeletedBlocksId {
                    log_index: 5,
                    seq: 0
                }]
            }
        ),
        op!(
            ExpireOpenKeys,
            st::ExpireOpenKeys {
                before_ms: 2_000_000,
                max_entries: 10,
            }
        ),
        op!(
            CreateDirectory,
            st::CreateDirectory {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                path: "x/z".into()
            }
        ),
        op!(
            CreateFile,
            st::CreateFile {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                path: "x/g".into(),
                recursive: true,
                blocks: 1,
                ..Default::default()
            }
        ),
        op!(
            DeletePath,
            st::DeletePath {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                path: "x".into(),
                recursive: true
            }
        ),
        op!(
            RenamePath,
            st::RenamePath {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                from: "x/y".into(),
                to: "q".into(),
                max_path_depth: 200,
                max_path_bytes: 1024,
            }
        ),
        op!(PurgeDeletedDirs, st::PurgeDeletedDirs { max_children: 5 }),
        op!(
            CommitKey,
            st::CommitKey {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                key: "x/y/f".into(),
                session_id: file.session_id,
                ..Default::default()
            }
        ),
        op!(LifecycleScan, scan_page.clone()),
        op!(
            LifecycleScan,
            st::LifecycleScan {
                phase: 3,
                bucket: "fs1".into(),
                bucket_object_id: fs_bucket.object_id,
                items: vec![st::LifecycleItem {
                    entry: b"x/y/f".to_vec(),
                    update_id: 1,
                    action: 5,
                    rule_id: "r".into(),
                }],
                ..scan_page
            }
        ),
    ];
    // Each template applies as it is.
    for (name, bytes, decode) in &templates {
        let cmd = sm.command(decode(bytes).unwrap());
        let r = om::apply::stage_alone(&sm.db, sm.index + 1, &cmd);
        assert!(r.is_ok(), "{name}: {r:?}");
    }
    let mut runner = TestRunner::new(Config {
        cases: cases() * 4,
        failure_persistence: None,
        ..Config::default()
    });
    let tally = std::cell::Cell::new((0usize, 0usize));
    let result = runner.run(
        &(0..templates.len(), mutate::mutations(), any::<bool>()),
        |(i, muts, with_client)| {
            let (name, bytes, decode) = &templates[i];
            let Some(op) = decode(&mutate::apply(bytes, &muts)) else {
                return Ok(());
            };
            let mut cmd = sm.command(op);
            if with_client {
                cmd.client_id = "fuzz".into();
                cmd.seq = 7;
            }
            let r = om::apply::stage_alone(&sm.db, sm.index + 1, &cmd);
            prop_assert!(r.is_ok(), "{name}: apply failed: {r:?} on {cmd:?}");
            let (r, staged) = r.unwrap();
            let (applied, refused) = tally.get();
            if let Some(st::command_result::Result::Rejected(_)) = &r.result {
                tally.set((applied, refused + 1));
                // Only the retry-cache record of the refusal may be staged:
                // one record, under the retry cache's generation (rules 11).
                let cache_writes = usize::from(with_client);
                prop_assert_eq!(staged, cache_writes, "{} staged writes when refused", name);
            } else {
                tally.set((applied + 1, refused));
            }
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    let (applied, refused) = tally.get();
    eprintln!("apply fuzz: {applied} applied, {refused} refused");
    assert!(
        applied > 0 && refused > 0,
        "{applied} applied, {refused} refused"
    );
}
