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
//! `PROPTEST_CASES=20000 cargo test --release --workspace --test integration fuzz::` runs
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
    // A snapshot, then a change it does not show.
    c.create_snapshot("vol1", "bkt1", "snap1").await.unwrap();
    c.put_key("vol1", "bkt1", "b", 20).await.unwrap();
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

/// Runs `fut` to completion from inside a proptest case (which is synchronous)
/// on the test's multi-threaded runtime.
fn block_on<T>(fut: impl Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(fut))
}

/// Waits until no recursively deleted directory awaits its background purge,
/// so a before/after comparison sees only the request's own effect.
async fn settle(node: &TestNode) {
    // Recursive deletes purge, and deleted snapshots are reclaimed, in the
    // background.
    om_tests::wait_for(Duration::from_secs(20), "purges to finish", || async {
        (!node.dump().keys().any(|(t, k)| {
            *t == "deleted_dirs"
                || (*t == "snapshots" && k.starts_with(om::store::keys::DELETED_SNAPSHOT_PREFIX))
        }))
        .then_some(())
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

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

const ETAG: &str = "0cc175b9c0f1b6a831c399e269772661";

mod apply;
mod rpcs;
mod snapshot_targets;
mod tokens;
