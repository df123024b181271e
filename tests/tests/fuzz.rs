//! Property tests of every entry point that takes outside input: random bytes
//! and mutated well-formed messages into every public RPC (decoded as the
//! server decodes them), random and forged continuation tokens into every
//! listing, and random replicated commands into `apply_command`.
//!
//! Properties: nothing panics; a refusal carries a request error (never
//! INTERNAL or UNKNOWN) with a stable reason and a bounded message, and it
//! changes nothing; a read never changes anything; apply never fails (a
//! replicated command is refused, not fatal) and a refused command stages no
//! write.
//!
//! The number of cases per property is bounded for the normal test run;
//! `PROPTEST_CASES=20000 cargo test --release -p om-tests --test fuzz` runs
//! longer (see ARCHITECTURE.md).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use om::grpc::OmGrpc;
use om_client::OmClient;
use om_client::v1::ozone_manager_server::OzoneManager;
use om_client::v1::*;
use om_tests::TestNode;
use om_tests::mutate::{self, Mutation};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use prost::Message;
use tonic::{Code, Request, Status};

/// Cases per property unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 400;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// Longest error message a refusal may carry (bad values are quoted by a
/// short prefix, never echoed whole; the status mapping caps the rest and
/// notes the full length).
const MAX_ERROR_MESSAGE: usize = om::grpc::MAX_STATUS_MESSAGE_BYTES + 32;

type CallFuture = Pin<Box<dyn Future<Output = Option<Result<(), Status>>> + Send>>;

/// One RPC: a valid request to mutate, whether it writes, and how to decode
/// bytes as its request and call it.
struct Target {
    name: &'static str,
    write: bool,
    template: Vec<u8>,
    call: fn(OmGrpc, Vec<u8>) -> CallFuture,
}

macro_rules! target {
    ($name:literal, $method:ident, $req:ty, $write:expr, $template:expr) => {
        Target {
            name: $name,
            write: $write,
            template: {
                let t: $req = $template;
                t.encode_to_vec()
            },
            call: |g, bytes| {
                Box::pin(async move {
                    let req = <$req>::decode(bytes.as_slice()).ok()?;
                    Some(g.$method(Request::new(req)).await.map(|_| ()))
                })
            },
        }
    };
}

/// Ids of the state the templates point into.
struct Fixture {
    upload_id: String,
    session: u64,
    session_block: u64,
    file_session: u64,
    /// A noncurrent version of `vol1/ver1/k` (a versioned bucket).
    old_version: String,
}

async fn build_state(c: &OmClient) -> Fixture {
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.create_bucket("vol1", "fs1", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    for k in ["a", "a/b", "a/c", "b", "c-1", "d/e/f"] {
        c.put_key("vol1", "bkt1", k, 10).await.unwrap();
    }
    let up = c
        .initiate_multipart_upload(InitiateMultipartUploadRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "mp".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .upload
        .unwrap();
    c.commit_part(CommitPartRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: "mp".into(),
        upload_id: up.upload_id.clone(),
        part_number: 1,
        size: 10,
        etag: ETAG.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let s = c
        .open_key(OpenKeyRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "open".into(),
            blocks: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    c.create_directory(CreateDirectoryRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        path: "x/y".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let f = c
        .create_file(CreateFileRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            path: "x/y/f".into(),
            blocks: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    c.create_bucket("vol1", "ver1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.set_bucket_versioning("vol1", "ver1", BucketVersioning::Enabled)
        .await
        .unwrap();
    let old = c.put_key("vol1", "ver1", "k", 10).await.unwrap();
    c.put_key("vol1", "ver1", "k", 20).await.unwrap();
    c.delete_key("vol1", "ver1", "j").await.unwrap();
    // Lifecycle rules that expire nothing for a century; the scanner's first
    // pass completes before any request is checked (the next is an hour
    // away), so no background page lands while a check compares tables.
    c.put_bucket_lifecycle(PutBucketLifecycleRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        rules: vec![LifecycleRule {
            id: "century".into(),
            enabled: true,
            filter: Some(LifecycleFilter::default()),
            expiration: Some(LifecycleExpiration {
                days: Some(36_500),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let s = c
            .get_lifecycle_status(GetLifecycleStatusRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        if s.status.is_some_and(|s| s.last_pass_completed_ms > 0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no lifecycle pass");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Fixture {
        old_version: old.version_id,
        upload_id: up.upload_id,
        session: s.session_id,
        session_block: s.blocks[0].block_id,
        file_session: f.session_id,
    }
}

const ETAG: &str = "0cc175b9c0f1b6a831c399e269772661";

fn targets(f: &Fixture) -> Vec<Target> {
    let meta = || [("m".to_string(), "v".to_string())].into();
    let block = BlockInfo {
        block_id: f.session_block,
        offset: 0,
        length: 10,
    };
    vec![
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
    ]
}

/// Runs `fut` to completion from inside a proptest case (which is synchronous)
/// on the test's multi-threaded runtime.
fn block_on<T>(fut: impl Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(fut))
}

/// Waits until no recursively deleted directory awaits its background purge,
/// so a before/after comparison sees only the request's own effect.
async fn settle(node: &TestNode) {
    om_tests::wait_for(Duration::from_secs(20), "purges to finish", || async {
        (!node.dump().keys().any(|(t, _)| *t == "deleted_dirs")).then_some(())
    })
    .await;
}

/// The properties of one refused request.
fn check_refusal(name: &str, s: &Status) -> Result<(), TestCaseError> {
    prop_assert!(
        !matches!(s.code(), Code::Internal | Code::Unknown | Code::Unavailable),
        "{name}: refused with {:?}: {}",
        s.code(),
        s.message()
    );
    prop_assert!(
        s.metadata().get("om-reason").is_some(),
        "{name}: refusal without a reason: {s:?}"
    );
    prop_assert!(
        s.message().len() <= MAX_ERROR_MESSAGE,
        "{name}: {}-byte error message",
        s.message().len()
    );
    Ok(())
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

/// Random, mutated and forged continuation tokens: refused as
/// INVALID_CONTINUATION_TOKEN, or (a token whose digest is right, since the
/// digest is no MAC) a page inside the listing's own bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_tokens_are_refused_or_stay_in_bounds() {
    let node = TestNode::start().await;
    let c = node.client();
    build_state(&c).await;
    for i in 0..30 {
        c.put_key("vol1", "bkt1", &format!("a/k{i:02}"), 1)
            .await
            .unwrap();
    }
    for i in 0..8 {
        c.create_directory(CreateDirectoryRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            path: format!("x/d{i}/e"),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let grpc = OmGrpc::new(node.node.service.clone());
    let keys_req = |token: String| ListKeysRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        prefix: "a/".into(),
        max_keys: 3,
        continuation_token: token,
        ..Default::default()
    };
    let status_req = |token: String| ListStatusRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        path: "x".into(),
        recursive: true,
        max_entries: 2,
        continuation_token: token,
        ..Default::default()
    };
    let open_req = |token: String| ListOpenKeysRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        max_keys: 1,
        continuation_token: token,
        ..Default::default()
    };
    // Real tokens to mutate.
    let keys_token = grpc
        .list_keys(Request::new(keys_req(String::new())))
        .await
        .unwrap()
        .into_inner()
        .next_continuation_token;
    let status_token = grpc
        .list_status(Request::new(status_req(String::new())))
        .await
        .unwrap()
        .into_inner()
        .next_continuation_token;
    assert!(!keys_token.is_empty() && !status_token.is_empty());
    // A token: random hex, random bytes as hex, a real token with one
    // character changed, or a forged one whose digest is right around random
    // fields (the digest is no MAC, so anyone can make one).
    let token_input = (
        0u8..4,
        "[0-9a-f]{0,96}",
        proptest::collection::vec(any::<u8>(), 0..64),
        (any::<usize>(), 0usize..17),
        (
            proptest::collection::vec(any::<u8>(), 0..24),
            any::<u64>(),
            prop_oneof![Just(b"a/".to_vec()), Just(Vec::new()), Just(b"b".to_vec())],
        ),
    );
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let before = node.dump();
    let result = runner.run(
        &(0u8..3, token_input),
        |(which, (kind, hexed, bytes, edit, forged))| {
            let token = match kind {
                0 => hexed,
                1 => hex(&bytes),
                2 => {
                    let real = if which == 1 {
                        &status_token
                    } else {
                        &keys_token
                    };
                    let mut b = real.clone().into_bytes();
                    let i = edit.0 % b.len();
                    b[i] = b"0123456789abcdefg"[edit.1];
                    String::from_utf8(b).unwrap()
                }
                _ => om::listing::ContinuationToken {
                    version: 1,
                    listing: ["keys", "status", "open_keys"][which as usize].into(),
                    volume: "vol1".into(),
                    bucket: ["bkt1", "fs1", "bkt1"][which as usize].into(),
                    bucket_object_id: forged.1,
                    prefix: forged.2,
                    delimiter: Vec::new(),
                    resume: forged.0,
                }
                .encode_token(),
            };
            let outcome: Result<Vec<String>, Status> = match which {
                0 => block_on(grpc.list_keys(Request::new(keys_req(token))))
                    .map(|r| r.into_inner().keys.into_iter().map(|k| k.name).collect()),
                1 => block_on(grpc.list_status(Request::new(status_req(token))))
                    .map(|r| r.into_inner().entries.into_iter().map(|e| e.path).collect()),
                _ => block_on(grpc.list_open_keys(Request::new(open_req(token))))
                    .map(|r| r.into_inner().keys.into_iter().map(|k| k.name).collect()),
            };
            match outcome {
                Ok(names) => {
                    let scope = ["a/", "x/", ""][which as usize];
                    for n in &names {
                        prop_assert!(n.starts_with(scope), "listing {which} escaped to {n:?}");
                    }
                }
                Err(s) => {
                    check_refusal("token", &s)?;
                    prop_assert_eq!(s.code(), Code::InvalidArgument, "{}", s.message());
                }
            }
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert_eq!(before, node.dump(), "listings changed state");
    node.node.shutdown().await;
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

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
        let mut b = rocksdb::WriteBatch::default();
        let r = om::apply::apply_command(&self.db, &mut b, self.index, &cmd).unwrap();
        self.db.write(b).unwrap();
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
                version_id: "null".into()
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
                max_entries: 10
            }
        ),
        op!(
            DeleteKeys,
            st::DeleteKeys {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                keys: vec!["a".into(), "b".into(), "a".into()],
                version_ids: Vec::new()
            }
        ),
        op!(
            DeleteKeys,
            st::DeleteKeys {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                keys: vec!["a".into(), "b".into(), "a".into()],
                version_ids: vec!["null".into(), "".into(), "0000000000010000".into()]
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
        let mut b = rocksdb::WriteBatch::default();
        let r = om::apply::apply_command(&sm.db, &mut b, sm.index + 1, &cmd);
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
            let mut b = rocksdb::WriteBatch::default();
            let r = om::apply::apply_command(&sm.db, &mut b, sm.index + 1, &cmd);
            prop_assert!(r.is_ok(), "{name}: apply failed: {r:?} on {cmd:?}");
            let r = r.unwrap();
            let (applied, refused) = tally.get();
            if let Some(st::command_result::Result::Rejected(_)) = &r.result {
                tally.set((applied, refused + 1));
                // Only the retry-cache record of the refusal may be staged.
                let cache_writes = if with_client { 2 } else { 0 };
                prop_assert_eq!(b.len(), cache_writes, "{} staged writes when refused", name);
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
