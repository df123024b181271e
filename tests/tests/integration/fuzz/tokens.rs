//! Random and forged continuation tokens into every listing.

use super::*;

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
