//! PutKeys through gRPC, and `omctl bench load` / `bench mix` as a user runs
//! them against a real `om` process.

use std::time::Duration;

use om_client::v1::{BucketLayout, ListKeysRequest, NewKey};
use om_tests::{OmProcess, TestNode};
use tonic::Code;

fn new_key(name: &str, size: u64) -> NewKey {
    NewKey {
        key: name.into(),
        size,
        ..Default::default()
    }
}

/// 256 keys in one command: listed, counted, laid out; a request with one
/// bad or existing key is refused whole, naming the key's field, with the
/// tables unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_keys_creates_all_or_nothing() {
    let n = TestNode::start().await;
    let c = n.client();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let keys: Vec<NewKey> = (0..256)
        .map(|i| new_key(&format!("k{i:03}"), 1000 + i))
        .collect();
    assert_eq!(c.put_keys("vol", "bkt", keys).await.unwrap(), 256);
    // One log entry wrote them all.
    let (first, last) = (
        c.lookup_key("vol", "bkt", "k000").await.unwrap(),
        c.lookup_key("vol", "bkt", "k255").await.unwrap(),
    );
    assert_eq!(first.update_id, last.update_id);
    assert_ne!(first.object_id, last.object_id);
    let b = c.get_bucket("vol", "bkt").await.unwrap();
    assert_eq!(b.key_count, 256);
    assert_eq!(b.used_bytes, (0..256).map(|i| 1000 + i).sum::<u64>());
    assert_eq!(last.size, 1255);
    assert_eq!(last.blocks.len(), 1);
    let page = c
        .list_keys(ListKeysRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            max_keys: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.keys.len(), 256);

    let before = n.dump();
    let cases: Vec<(Vec<NewKey>, Code, &str, &str)> = vec![
        (
            vec![new_key("new", 1), new_key("k007", 1)],
            Code::AlreadyExists,
            "KEY_ALREADY_EXISTS",
            "keys[1].key",
        ),
        (
            vec![new_key("x", 1), new_key("x", 1)],
            Code::InvalidArgument,
            "DUPLICATE_KEY",
            "keys[1].key",
        ),
        (
            vec![new_key("ok", 1), new_key("", 1)],
            Code::InvalidArgument,
            "INVALID_KEY",
            "keys[1].key",
        ),
        (
            vec![NewKey {
                key: "e".into(),
                etag: "not-an-etag".into(),
                ..Default::default()
            }],
            Code::InvalidArgument,
            "INVALID_ETAG",
            "keys[0].etag",
        ),
        (vec![], Code::InvalidArgument, "INVALID_KEY_COUNT", "keys"),
        (
            (0..257).map(|i| new_key(&format!("m{i}"), 0)).collect(),
            Code::InvalidArgument,
            "INVALID_KEY_COUNT",
            "keys",
        ),
    ];
    for (keys, code, reason, field) in cases {
        match c.put_keys("vol", "bkt", keys).await {
            Err(om_client::ClientError::Api {
                code: got,
                reason: r,
                field: f,
                ..
            }) => assert_eq!((got, r.as_str(), f.as_str()), (code, reason, field)),
            other => panic!("{reason}: {other:?}"),
        }
        assert_eq!(
            before,
            n.dump(),
            "a refused PutKeys ({reason}) changed state"
        );
    }
    n.node.shutdown().await;
}

fn omctl(endpoint: &str, args: &[&str]) -> String {
    let o = om_tests::omctl(endpoint, 30, args);
    assert!(
        o.status.success(),
        "omctl {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// `bench load` creates exactly the keys asked for (in batches, and with
/// `--start` where an earlier load stopped); `bench mix` runs a mix over
/// them and reports each operation in JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_load_and_mix_as_a_user_runs_them() {
    let dir = tempfile::tempdir().unwrap();
    let om = OmProcess::spawn(dir.path());
    om.wait_ready(Duration::from_secs(60)).await;
    let ep = om.grpc.clone();
    omctl(&ep, &["volume", "create", "bench"]);
    omctl(&ep, &["bucket", "create", "bench/keys"]);
    let load: serde_json::Value = serde_json::from_str(&omctl(
        &ep,
        &[
            "--output",
            "json",
            "bench",
            "load",
            "bench/keys",
            "--keys",
            "1000",
            "--batch",
            "256",
            "--concurrency",
            "4",
        ],
    ))
    .unwrap();
    assert_eq!(load["keys"], 1000);
    assert_eq!(load["ops"][0]["op"], "put");
    assert_eq!(load["ops"][0]["ops"], 4, "1000 keys in 4 requests");
    assert_eq!(load["ops"][0]["errors"], 0);
    omctl(
        &ep,
        &[
            "bench",
            "load",
            "bench/keys",
            "--keys",
            "50",
            "--start",
            "1000",
            "--concurrency",
            "8",
        ],
    );
    let c = om.client();
    assert_eq!(c.get_bucket("bench", "keys").await.unwrap().key_count, 1050);
    c.lookup_key("bench", "keys", "k/0000001049").await.unwrap();

    let mix: serde_json::Value = serde_json::from_str(&omctl(
        &ep,
        &[
            "--output",
            "json",
            "bench",
            "mix",
            "bench/keys",
            "--keys",
            "1050",
            "--mix",
            "get=40,list=40,put=10,delete=10",
            "--seconds",
            "2",
            "--warmup",
            "0",
            "--concurrency",
            "8",
            "--page",
            "100",
        ],
    ))
    .unwrap();
    let ops = mix["ops"].as_array().unwrap();
    let names: Vec<&str> = ops.iter().map(|o| o["op"].as_str().unwrap()).collect();
    assert_eq!(names, ["put", "get", "list", "delete"]);
    for o in ops {
        assert_eq!(o["errors"], 0, "{o}");
        assert!(o["ops"].as_u64().unwrap() > 0, "{o}");
        assert!(o["p99_ms"].as_f64().unwrap() >= o["p50_ms"].as_f64().unwrap());
    }
    // Without a warm-up every operation counted: deletes drew from the
    // loaded keys (a key drawn twice is a miss), puts added new ones.
    let deleted = ops[3]["ops"].as_u64().unwrap() - ops[3]["misses"].as_u64().unwrap();
    let put = ops[0]["ops"].as_u64().unwrap();
    assert_eq!(
        c.get_bucket("bench", "keys").await.unwrap().key_count,
        1050 + put - deleted
    );
}
