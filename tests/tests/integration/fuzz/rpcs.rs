//! Every public RPC fed bad and mutated input: refused with a stable reason, nothing changed.

use super::*;

fn targets(f: &Fixture) -> Vec<Target> {
    let meta = || [("m".to_string(), "v".to_string())].into();
    let block = BlockInfo {
        block_id: f.session_block,
        offset: 0,
        length: 10,
    };
    let mut all = vec![
        target!(
            "CreateVolume",
            create_volume,
            CreateVolumeRequest,
            true,
            CreateVolumeRequest {
                name: "vol2".into(),
                owner: "o".into(),
                metadata: meta(),
                ..Default::default()
            }
        ),
        target!(
            "GetVolume",
            get_volume,
            GetVolumeRequest,
            false,
            GetVolumeRequest {
                name: "vol1".into(),
                ..Default::default()
            }
        ),
        target!(
            "ListVolumes",
            list_volumes,
            ListVolumesRequest,
            false,
            ListVolumesRequest {
                prefix: "v".into(),
                max_results: 2,
                ..Default::default()
            }
        ),
        target!(
            "DeleteVolume",
            delete_volume,
            DeleteVolumeRequest,
            true,
            DeleteVolumeRequest {
                name: "vol2".into(),
                ..Default::default()
            }
        ),
        target!(
            "CreateBucket",
            create_bucket,
            CreateBucketRequest,
            true,
            CreateBucketRequest {
                volume: "vol1".into(),
                name: "bkt2".into(),
                layout: BucketLayout::FileSystemOptimized as i32,
                metadata: meta(),
                ..Default::default()
            }
        ),
        target!(
            "GetBucket",
            get_bucket,
            GetBucketRequest,
            false,
            GetBucketRequest {
                volume: "vol1".into(),
                name: "bkt1".into(),
                ..Default::default()
            }
        ),
        target!(
            "ListBuckets",
            list_buckets,
            ListBucketsRequest,
            false,
            ListBucketsRequest {
                volume: "vol1".into(),
                max_results: 1,
                ..Default::default()
            }
        ),
        target!(
            "DeleteBucket",
            delete_bucket,
            DeleteBucketRequest,
            true,
            DeleteBucketRequest {
                volume: "vol1".into(),
                name: "bkt2".into(),
                ..Default::default()
            }
        ),
        target!(
            "PutKey",
            put_key,
            PutKeyRequest,
            true,
            PutKeyRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "k".into(),
                size: 300 << 20,
                etag: ETAG.into(),
                content_type: "text/plain".into(),
                metadata: meta(),
                conditions: Some(KeyConditions {
                    if_match: ETAG.into(),
                    ..Default::default()
                }),
                tags: meta(),
                ..Default::default()
            }
        ),
        target!(
            "PutKeys",
            put_keys,
            PutKeysRequest,
            true,
            PutKeysRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                keys: vec![
                    NewKey {
                        key: "bulk/a".into(),
                        size: 300 << 20,
                        etag: ETAG.into(),
                        content_type: "text/plain".into(),
                        metadata: meta(),
                        tags: meta(),
                    },
                    NewKey {
                        key: "bulk/b".into(),
                        size: 1,
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }
        ),
        target!(
            "PutKeyTagging",
            put_key_tagging,
            PutKeyTaggingRequest,
            true,
            PutKeyTaggingRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "a".into(),
                tags: [("t".to_string(), "v 1".to_string())].into(),
                ..Default::default()
            }
        ),
        target!(
            "GetKeyTagging",
            get_key_tagging,
            GetKeyTaggingRequest,
            false,
            GetKeyTaggingRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "a".into(),
                ..Default::default()
            }
        ),
        target!(
            "GetKeyTagging(version)",
            get_key_tagging,
            GetKeyTaggingRequest,
            false,
            GetKeyTaggingRequest {
                volume: "vol1".into(),
                bucket: "ver1".into(),
                key: "k".into(),
                version_id: f.old_version.clone(),
                ..Default::default()
            }
        ),
        target!(
            "DeleteKeyTagging",
            delete_key_tagging,
            DeleteKeyTaggingRequest,
            true,
            DeleteKeyTaggingRequest {
                volume: "vol1".into(),
                bucket: "ver1".into(),
                key: "k".into(),
                version_id: f.old_version.clone(),
                ..Default::default()
            }
        ),
        target!(
            "GetBucketLifecycle",
            get_bucket_lifecycle,
            GetBucketLifecycleRequest,
            false,
            GetBucketLifecycleRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                ..Default::default()
            }
        ),
        target!(
            "GetLifecycleStatus",
            get_lifecycle_status,
            GetLifecycleStatusRequest,
            false,
            GetLifecycleStatusRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                ..Default::default()
            }
        ),
        target!(
            "LookupKey",
            lookup_key,
            LookupKeyRequest,
            false,
            LookupKeyRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "a".into(),
                ..Default::default()
            }
        ),
        target!(
            "DeleteKey",
            delete_key,
            DeleteKeyRequest,
            true,
            DeleteKeyRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "b".into(),
                ..Default::default()
            }
        ),
        target!(
            "ListKeys",
            list_keys,
            ListKeysRequest,
            false,
            ListKeysRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                prefix: "a".into(),
                delimiter: "/".into(),
                start_after: "a/b".into(),
                max_keys: 2,
                ..Default::default()
            }
        ),
        target!(
            "DeleteKeys",
            delete_keys,
            DeleteKeysRequest,
            true,
            DeleteKeysRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                keys: vec!["a/c".into(), "zz".into(), "a/c".into()],
                ..Default::default()
            }
        ),
        target!(
            "RenameKey",
            rename_key,
            RenameKeyRequest,
            true,
            RenameKeyRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                from: "c-1".into(),
                to: "c-2".into(),
                ..Default::default()
            }
        ),
        target!(
            "OpenKey",
            open_key,
            OpenKeyRequest,
            true,
            OpenKeyRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "n".into(),
                blocks: 3,
                metadata: meta(),
                ..Default::default()
            }
        ),
        target!(
            "AllocateBlock",
            allocate_block,
            AllocateBlockRequest,
            true,
            AllocateBlockRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "open".into(),
                session_id: f.session,
                count: 2,
                ..Default::default()
            }
        ),
        target!(
            "CommitKey",
            commit_key,
            CommitKeyRequest,
            true,
            CommitKeyRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "open".into(),
                session_id: f.session,
                size: 10,
                blocks: vec![block],
                etag: ETAG.into(),
                ..Default::default()
            }
        ),
        target!(
            "ListOpenKeys",
            list_open_keys,
            ListOpenKeysRequest,
            false,
            ListOpenKeysRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                prefix: "o".into(),
                max_keys: 1,
                ..Default::default()
            }
        ),
        target!(
            "CopyKey",
            copy_key,
            CopyKeyRequest,
            true,
            CopyKeyRequest {
                src_volume: "vol1".into(),
                src_bucket: "bkt1".into(),
                src_key: "a".into(),
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "copy".into(),
                ..Default::default()
            }
        ),
        target!(
            "InitiateMultipartUpload",
            initiate_multipart_upload,
            InitiateMultipartUploadRequest,
            true,
            InitiateMultipartUploadRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "mp2".into(),
                ..Default::default()
            }
        ),
        target!(
            "CommitPart",
            commit_part,
            CommitPartRequest,
            true,
            CommitPartRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "mp".into(),
                upload_id: f.upload_id.clone(),
                part_number: 2,
                size: 10,
                etag: ETAG.into(),
                ..Default::default()
            }
        ),
        target!(
            "CompleteMultipartUpload",
            complete_multipart_upload,
            CompleteMultipartUploadRequest,
            true,
            CompleteMultipartUploadRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "mp".into(),
                upload_id: f.upload_id.clone(),
                parts: vec![CompletedPart {
                    part_number: 1,
                    etag: ETAG.into(),
                }],
                ..Default::default()
            }
        ),
        target!(
            "AbortMultipartUpload",
            abort_multipart_upload,
            AbortMultipartUploadRequest,
            true,
            AbortMultipartUploadRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "mp".into(),
                upload_id: f.upload_id.clone(),
                ..Default::default()
            }
        ),
        target!(
            "ListParts",
            list_parts,
            ListPartsRequest,
            false,
            ListPartsRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: "mp".into(),
                upload_id: f.upload_id.clone(),
                max_parts: 1,
                ..Default::default()
            }
        ),
        target!(
            "ListObjectVersions",
            list_object_versions,
            ListObjectVersionsRequest,
            false,
            ListObjectVersionsRequest {
                volume: "vol1".into(),
                bucket: "ver1".into(),
                prefix: "k".into(),
                delimiter: "/".into(),
                key_marker: "k".into(),
                version_id_marker: f.old_version.clone(),
                max_keys: 1,
                ..Default::default()
            }
        ),
        target!(
            "LookupKey(version)",
            lookup_key,
            LookupKeyRequest,
            false,
            LookupKeyRequest {
                volume: "vol1".into(),
                bucket: "ver1".into(),
                key: "k".into(),
                version_id: f.old_version.clone(),
                ..Default::default()
            }
        ),
        target!(
            "SetBucketVersioning",
            set_bucket_versioning,
            SetBucketVersioningRequest,
            true,
            SetBucketVersioningRequest {
                volume: "vol1".into(),
                bucket: "ver1".into(),
                versioning: BucketVersioning::Enabled as i32,
                ..Default::default()
            }
        ),
        target!(
            "SetBucketTags",
            set_bucket_tags,
            SetBucketTagsRequest,
            true,
            SetBucketTagsRequest {
                volume: "vol1".into(),
                bucket: "ver1".into(),
                tags: [("team".to_string(), "storage".to_string())].into(),
                ..Default::default()
            }
        ),
        target!(
            "DeleteKey(conditions)",
            delete_key,
            DeleteKeyRequest,
            true,
            DeleteKeyRequest {
                volume: "vol1".into(),
                bucket: "ver1".into(),
                key: "k".into(),
                conditions: Some(DeleteConditions {
                    if_match: "\"0123456789abcdef0123456789abcdef\"".into(),
                    if_size: Some(3),
                    ..Default::default()
                }),
                ..Default::default()
            }
        ),
        target!(
            "DeleteKey(version)",
            delete_key,
            DeleteKeyRequest,
            true,
            DeleteKeyRequest {
                volume: "vol1".into(),
                bucket: "ver1".into(),
                key: "k".into(),
                version_id: f.old_version.clone(),
                ..Default::default()
            }
        ),
        target!(
            "ListMultipartUploads",
            list_multipart_uploads,
            ListMultipartUploadsRequest,
            false,
            ListMultipartUploadsRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                delimiter: "/".into(),
                key_marker: "m".into(),
                max_uploads: 1,
                ..Default::default()
            }
        ),
        target!(
            "ListDeletedBlocks",
            list_deleted_blocks,
            ListDeletedBlocksRequest,
            false,
            ListDeletedBlocksRequest {
                after: om::validate::format_deleted_id(1, 0),
                max_entries: 2,
                ..Default::default()
            }
        ),
        target!(
            "AckDeletedBlocks",
            ack_deleted_blocks,
            AckDeletedBlocksRequest,
            true,
            AckDeletedBlocksRequest {
                ids: vec![om::validate::format_deleted_id(12, 0)],
                ..Default::default()
            }
        ),
        target!(
            "CreateDirectory",
            create_directory,
            CreateDirectoryRequest,
            true,
            CreateDirectoryRequest {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                path: "x/z/w".into(),
                ..Default::default()
            }
        ),
        target!(
            "CreateFile",
            create_file,
            CreateFileRequest,
            true,
            CreateFileRequest {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                path: "x/g".into(),
                recursive: true,
                blocks: 1,
                ..Default::default()
            }
        ),
        target!(
            "GetFileStatus",
            get_file_status,
            GetFileStatusRequest,
            false,
            GetFileStatusRequest {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                path: "x/y".into(),
                ..Default::default()
            }
        ),
        target!(
            "DeletePath",
            delete_path,
            DeletePathRequest,
            true,
            DeletePathRequest {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                path: "x/y".into(),
                recursive: false,
                ..Default::default()
            }
        ),
        target!(
            "RenamePath",
            rename_path,
            RenamePathRequest,
            true,
            RenamePathRequest {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                from: "x/y".into(),
                to: "x/q".into(),
                ..Default::default()
            }
        ),
        target!(
            "ListStatus",
            list_status,
            ListStatusRequest,
            false,
            ListStatusRequest {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                path: "x".into(),
                recursive: true,
                max_entries: 1,
                ..Default::default()
            }
        ),
        target!(
            "CommitKey(file)",
            commit_key,
            CommitKeyRequest,
            true,
            CommitKeyRequest {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                key: "x/y/f".into(),
                session_id: f.file_session,
                ..Default::default()
            }
        ),
    ];
    all.extend(super::snapshot_targets::snapshot_targets());
    all
}

/// What a case feeds one target: a mutation of its template, or random bytes.
#[derive(Debug, Clone)]
enum Input {
    Mutated(Vec<Mutation>),
    Random(Vec<u8>),
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        4 => mutate::mutations().prop_map(Input::Mutated),
        1 => mutate::random_bytes().prop_map(Input::Random),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_refuses_bad_input_and_changes_nothing() {
    let node = TestNode::start().await;
    let c = node.client();
    let fixture = build_state(&c).await;
    let targets = targets(&fixture);
    let grpc = OmGrpc::new(node.node.service.clone());
    // Every template is accepted as it is (so mutations start from a request
    // that reaches the deep paths), in an order where each still applies.
    for t in &targets {
        if t.write {
            continue;
        }
        let r = (t.call)(grpc.clone(), t.template.clone()).await.unwrap();
        assert!(r.is_ok(), "{}: {r:?}", t.name);
    }
    let mut runner = TestRunner::new(Config {
        cases: cases() * targets.len() as u32 / 8,
        failure_persistence: None,
        ..Config::default()
    });
    let stats = Arc::new(std::sync::Mutex::new((0usize, 0usize)));
    let result = runner.run(&((0..targets.len()), input()), |(i, input)| {
        let t = &targets[i];
        let bytes = match &input {
            Input::Mutated(m) => mutate::apply(&t.template, m),
            Input::Random(b) => b.clone(),
        };
        block_on(settle(&node));
        let before = node.dump();
        let Some(r) = block_on((t.call)(grpc.clone(), bytes)) else {
            return Ok(());
        };
        let mut st = stats.lock().unwrap();
        match r {
            Ok(()) => {
                st.0 += 1;
                if !t.write {
                    prop_assert_eq!(&before, &node.dump(), "{} changed state", t.name);
                }
            }
            Err(s) => {
                st.1 += 1;
                check_refusal(t.name, &s)?;
                block_on(settle(&node));
                prop_assert_eq!(
                    &before,
                    &node.dump(),
                    "{} refused ({:?} {}) but changed state",
                    t.name,
                    s.code(),
                    s.message()
                );
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (accepted, refused) = *stats.lock().unwrap();
    eprintln!("rpc fuzz: {accepted} accepted, {refused} refused");
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
    node.node.shutdown().await;
}
