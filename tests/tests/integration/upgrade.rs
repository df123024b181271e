//! A store written by an older om is served by this one: its tables read as
//! they were written, and the retry-cache entries it wrote (rules 10: one
//! record per write plus an expiry-index entry) still answer retries, refuse
//! reused sequence numbers, and expire, while new writes use rules 11's
//! generations.
//!
//! `tests/fixtures/rules10-store.tar.gz` is the data directory of a one-node
//! cluster written by om 9be8a78 (rules 10; the stored formats did not change
//! between it and cfe9735, the last commit before rules 11), with the encoded
//! answers to its retried writes beside it. `write_rules10_fixture` below made
//! it; to make it again, build that om and run
//! `OM_BIN=<that om> OM_FIXTURE_OUT=<file.tar.gz> cargo test --release --workspace
//! --test integration -- upgrade::write_rules10_fixture`. Without `OM_FIXTURE_OUT` it
//! writes a fixture of this build into a temporary file, so the writer is
//! kept working.

use std::path::{Path, PathBuf};
use std::time::Duration;

use om::store::keys;
use om_client::v1::ozone_manager_client::OzoneManagerClient;
use om_client::v1::{
    BucketLayout, CreateDirectoryRequest, GetFileStatusRequest, ListKeysRequest, PutKeyRequest,
    PutKeyResponse, WriteHeader,
};
use om_client::{ClientError, OmClient};
use om_tests::{OmProcess, TestNode, repo_root, wait_for};
use prost::Message;
use tonic::transport::Channel;

/// The client id of the fixture's retried writes.
const CLIENT: &str = "c-upgrade-fixture";
/// Writes with sequence numbers 1..=WRITES, keys `k01`.. in `vol1/bkt1`.
const WRITES: u64 = 20;

fn fixture() -> PathBuf {
    repo_root().join("tests/fixtures/rules10-store.tar.gz")
}

async fn raw(endpoint: &str) -> OzoneManagerClient<Channel> {
    OzoneManagerClient::connect(format!("http://{endpoint}"))
        .await
        .unwrap()
}

fn put(seq: u64, key: &str) -> PutKeyRequest {
    PutKeyRequest {
        header: Some(WriteHeader {
            client_id: CLIENT.into(),
            seq,
        }),
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        size: seq,
        ..Default::default()
    }
}

fn key_of(seq: u64) -> String {
    format!("k{seq:02}")
}

fn tar(args: &[&str], dir: &Path) {
    let out = std::process::Command::new("tar")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("tar");
    assert!(
        out.status.success(),
        "tar {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Retry-cache keys of `node`: (rules-10 entries, rules-10 expiry-index
/// entries, rules-11 generation entries).
fn retry_keys(node: &TestNode) -> (usize, usize, usize) {
    let dump = om::store::dump_table(node.node.service.db(), keys::RETRY_CACHE_CF).unwrap();
    let count = |p: &[u8]| dump.keys().filter(|(_, k)| k.starts_with(p)).count();
    (
        count(b"c"),
        count(keys::RETRY_EXPIRY_PREFIX),
        count(keys::RETRY_GENERATION_PREFIX),
    )
}

/// Writes the fixture with the `om` named by `OM_BIN` (an older build) into
/// `OM_FIXTURE_OUT`; without it, with this build into a temporary file,
/// and checks what the archive holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_rules10_fixture() {
    let work = tempfile::tempdir().unwrap();
    let out = std::env::var_os("OM_FIXTURE_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| work.path().join("fixture.tar.gz"));
    let data = work.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let mut om = OmProcess::spawn(&data);
    om.wait_ready(Duration::from_secs(30)).await;
    let c = om.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.create_bucket("vol1", "fso1", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    c.create_directory(CreateDirectoryRequest {
        volume: "vol1".into(),
        bucket: "fso1".into(),
        path: "a/b".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut r = raw(&om.grpc).await;
    let mut answers = Vec::new();
    for seq in 1..=WRITES {
        let a = r
            .put_key(put(seq, &key_of(seq)))
            .await
            .unwrap()
            .into_inner();
        a.encode_length_delimited(&mut answers).unwrap();
    }
    c.delete_key("vol1", "bkt1", &key_of(WRITES)).await.unwrap();
    assert!(om.terminate(Duration::from_secs(20)), "om stops on SIGTERM");
    std::fs::write(work.path().join("answers.bin"), answers).unwrap();
    tar(
        &[
            "-czf",
            out.to_str().unwrap(),
            "--exclude=data/db/LOG",
            "data",
            "answers.bin",
        ],
        work.path(),
    );
    let listed = std::process::Command::new("tar")
        .arg("-tzf")
        .arg(&out)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    for want in ["answers.bin", "data/db/CURRENT"] {
        assert!(listed.lines().any(|l| l == want), "{want} in {listed}");
    }
}

/// The fixture's store under this build: tables, retries, refusals, expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_written_under_rules_10_is_served_and_its_retry_cache_honoured() {
    let work = tempfile::tempdir().unwrap();
    tar(&["-xzf", fixture().to_str().unwrap()], work.path());
    let answers_bytes = std::fs::read(work.path().join("answers.bin")).unwrap();
    let mut buf = &answers_bytes[..];
    let mut answers = Vec::new();
    while !buf.is_empty() {
        answers.push(PutKeyResponse::decode_length_delimited(&mut buf).unwrap());
    }
    assert_eq!(answers.len() as u64, WRITES);
    let data = work.path().join("data");
    let node = TestNode::start_in(work, |a| a.data_dir = Some(data.clone())).await;
    let (entries, index, generations) = retry_keys(&node);
    assert!(
        entries >= WRITES as usize && entries == index && generations == 0,
        "the old store's retry cache: {entries} entries, {index} index entries, {generations} in generations"
    );

    // The tables read as the older build wrote them.
    let c = node.client();
    let listed: Vec<String> = c
        .list_keys(ListKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .keys
        .into_iter()
        .map(|k| k.name)
        .collect();
    let expected: Vec<String> = (1..WRITES).map(key_of).collect();
    assert_eq!(listed, expected);
    for (i, a) in answers.iter().enumerate().take(WRITES as usize - 1) {
        let k = c
            .lookup_key("vol1", "bkt1", &key_of(i as u64 + 1))
            .await
            .unwrap();
        let written = a.key.as_ref().unwrap();
        assert_eq!(
            (k.object_id, k.size, &k.name),
            (written.object_id, written.size, &written.name)
        );
    }
    let dir = c
        .get_file_status(GetFileStatusRequest {
            volume: "vol1".into(),
            bucket: "fso1".into(),
            path: "a/b".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(dir.is_directory);
    match c.lookup_key("vol1", "bkt1", &key_of(WRITES)).await {
        Err(ClientError::Api { reason, .. }) => assert_eq!(reason, "KEY_NOT_FOUND"),
        other => panic!("{} was deleted: {other:?}", key_of(WRITES)),
    }

    // A retry of each old write gets its first answer and changes nothing,
    // even the last one, whose key has since been deleted.
    let mut r = raw(&node.endpoint()).await;
    let before = node.dump();
    for seq in 1..=WRITES {
        let again = r
            .put_key(put(seq, &key_of(seq)))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(again, answers[seq as usize - 1], "retry of seq {seq}");
    }
    assert_eq!(before, node.dump(), "retries of old writes change nothing");
    // Another request under an old sequence number is refused.
    let err = r.put_key(put(3, "other")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.metadata().get("om-reason").unwrap().to_str().unwrap(),
        "RETRY_MISMATCH"
    );
    assert_eq!(before, node.dump(), "a refused retry changes nothing");

    // New writes are kept under a generation, one record each.
    let fresh = r
        .put_key(put(WRITES + 1, "new"))
        .await
        .unwrap()
        .into_inner();
    let (_, _, generations) = retry_keys(&node);
    assert_eq!(generations, 1);
    let again = r
        .put_key(put(WRITES + 1, "new"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again, fresh);

    // With a short TTL the old entries expire, index and all, and so do the
    // generations; nothing of the retry cache is left.
    let node = node
        .restart(|a| {
            a.data_dir = Some(data.clone());
            a.retry_cache_ttl_s = Some(1);
        })
        .await;
    wait_for(Duration::from_secs(20), "the old entries to expire", || {
        let left = retry_keys(&node);
        async move { (left == (0, 0, 0)).then_some(()) }
    })
    .await;
    // Once expired, the old sequence number is free: the same request is a
    // new write (a new version of the key, with a new object id).
    let c: OmClient = node.client();
    let mut r = raw(&node.endpoint()).await;
    let renewed = r.put_key(put(1, &key_of(1))).await.unwrap().into_inner();
    assert_ne!(
        renewed.key.as_ref().unwrap().object_id,
        answers[0].key.as_ref().unwrap().object_id
    );
    assert_eq!(
        c.lookup_key("vol1", "bkt1", &key_of(1))
            .await
            .unwrap()
            .object_id,
        renewed.key.unwrap().object_id
    );
    node.node.shutdown().await;
}
