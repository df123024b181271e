//! Limits at the gRPC edge: every field is bounded, bad values are refused
//! with a short message (never the whole input echoed back), input never
//! panics a request, and a body that is not protobuf is INVALID_ARGUMENT.

use std::process::Command;
use std::time::Duration;

use bytes::{Buf, BufMut};
use om_client::v1::*;
use om_client::{ClientError, ClientOptions, OmClient};
use om_tests::{TestNode, assert_err, binary, rejected};
use tonic::Code;

/// The longest error message these tests accept: a reason's sentence plus a
/// quoted prefix of the bad value.
const SHORT: usize = 300;

fn message(r: Result<impl std::fmt::Debug, ClientError>) -> (String, String) {
    match r {
        Err(ClientError::Api {
            reason, message, ..
        }) => (reason, message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A client that gives up quickly: a request that kills its connection (a
/// panic in a handler) would otherwise be retried for the whole deadline.
fn impatient(node: &TestNode) -> OmClient {
    OmClient::new(
        &[node.endpoint()],
        ClientOptions {
            deadline: Duration::from_secs(3),
            ..Default::default()
        },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_names_are_refused_with_a_short_message() {
    let node = TestNode::start().await;
    let c = node.client();
    for len in [10_000, 1 << 20] {
        let name = "a".repeat(len);
        let (reason, msg) = message(c.create_volume(&name, "").await);
        assert_eq!(reason, "INVALID_NAME");
        assert!(msg.len() < SHORT, "{len}: {} bytes: {msg}", msg.len());
        assert!(msg.contains(&format!("({len} bytes)")), "{msg}");
        rejected(
            &node,
            c.create_volume(&name, ""),
            Code::InvalidArgument,
            "INVALID_NAME",
            "name",
        )
        .await;
        let (reason, msg) = message(c.get_volume(&name).await);
        assert_eq!(reason, "INVALID_NAME");
        assert!(msg.len() < SHORT, "{msg}");
        // Other echoing checks quote a prefix too.
        let (reason, msg) = message(
            c.list_multipart_uploads(ListMultipartUploadsRequest {
                volume: "vol".into(),
                bucket: "bkt".into(),
                upload_id_marker: name.clone(),
                ..Default::default()
            })
            .await,
        );
        assert_eq!(reason, "INVALID_UPLOAD_ID");
        assert!(msg.len() < SHORT, "{msg}");
    }
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_prints_a_short_invalid_name_for_a_huge_name() {
    let node = TestNode::start().await;
    // One command-line argument holds at most 128 KiB on Linux; the 1 MiB
    // case goes through the client library above.
    for len in [10_000, 100_000] {
        let name = "v".repeat(len);
        let out = Command::new(binary("omctl"))
            .args(["--endpoint", &node.endpoint(), "--timeout", "20"])
            .args(["volume", "create", &name])
            .output()
            .expect("run omctl");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("error: InvalidArgument INVALID_NAME (field name)"),
            "{err}"
        );
        assert!(err.len() < SHORT, "{len}: {} bytes: {err}", err.len());
    }
    node.node.shutdown().await;
}

/// A deleted-blocks id of 24 bytes whose 16th byte falls inside a character:
/// slicing it there used to panic the request.
fn split_char_id() -> String {
    let id = format!("{}é{}", "0".repeat(15), "0".repeat(7));
    assert_eq!(id.len(), 24);
    assert!(!id.is_char_boundary(16));
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_block_ids_with_multibyte_characters_are_refused() {
    let node = TestNode::start().await;
    let c = impatient(&node);
    assert_err(
        c.list_deleted_blocks(ListDeletedBlocksRequest {
            after: split_char_id(),
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "INVALID_ENTRY_ID",
        "after",
    );
    rejected(
        &node,
        c.ack_deleted_blocks(AckDeletedBlocksRequest {
            ids: vec![split_char_id()],
            ..Default::default()
        }),
        Code::InvalidArgument,
        "INVALID_ENTRY_ID",
        "ids",
    )
    .await;
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_token_and_address_fields_are_bounded() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    rejected(
        &node,
        c.create_volume("vol2", &"o".repeat(257)),
        Code::InvalidArgument,
        "INVALID_OWNER",
        "owner",
    )
    .await;
    c.create_volume("vol2", &"o".repeat(256)).await.unwrap();
    assert_err(
        c.list_open_keys(ListOpenKeysRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            continuation_token: "t".repeat(om::listing::MAX_TOKEN_CHARS + 1),
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "INVALID_CONTINUATION_TOKEN",
        "continuation_token",
    );
    let (reason, msg) = message(
        c.add_node(
            4,
            &format!("{}:9000", "h".repeat(100_000)),
            "127.0.0.1:1",
            true,
        )
        .await,
    );
    assert_eq!(reason, "INVALID_ADDRESS");
    assert!(msg.len() < SHORT, "{msg}");
    node.node.shutdown().await;
}

/// Bytes in, bytes out: lets a test put anything on the wire as a message.
#[derive(Clone, Copy, Default)]
struct RawCodec;
struct RawEncoder;
struct RawDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut v = vec![0; src.remaining()];
        src.copy_to_slice(&mut v);
        Ok(Some(v))
    }
}

async fn raw_unary(endpoint: &str, path: &'static str, body: Vec<u8>) -> tonic::Status {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{endpoint}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(ch);
    grpc.ready().await.unwrap();
    grpc.unary::<Vec<u8>, Vec<u8>, _>(
        tonic::Request::new(body),
        tonic::codegen::http::uri::PathAndQuery::from_static(path),
        RawCodec,
    )
    .await
    .expect_err("garbage must be refused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_protobuf_is_invalid_argument() {
    let node = TestNode::start().await;
    let before = node.dump();
    // 0xff: field 31 with wire type 7, which does not exist.
    for (path, body) in [
        ("/om.v1.OzoneManager/CreateVolume", vec![0xff; 8]),
        // Field 2 (name, a string) sent as a varint.
        ("/om.v1.OzoneManager/PutKey", vec![0x10, 0x01]),
        ("/om.v1.Cluster/AddNode", vec![0xff, 0xff, 0xff]),
    ] {
        let s = raw_unary(&node.endpoint(), path, body).await;
        assert_eq!(s.code(), Code::InvalidArgument, "{path}: {s:?}");
        assert_eq!(
            s.metadata().get("om-reason").unwrap(),
            "MALFORMED_REQUEST",
            "{path}"
        );
    }
    assert_eq!(before, node.dump());
    // A well-formed body still reaches the handler (and its own checks).
    let s = raw_unary(&node.endpoint(), "/om.v1.OzoneManager/GetVolume", vec![]).await;
    assert_eq!(s.code(), Code::InvalidArgument);
    assert_eq!(s.metadata().get("om-reason").unwrap(), "INVALID_NAME");
    node.node.shutdown().await;
}

const GIB: u64 = 1024 * 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_uploads_cannot_pass_5_tib() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let etag = "0cc175b9c0f1b6a831c399e269772661";
    let mut uploads = Vec::new();
    for key in ["too-big", "just-fits"] {
        let u = c
            .initiate_multipart_upload(InitiateMultipartUploadRequest {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: key.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .upload
            .unwrap();
        uploads.push((key, u.upload_id));
    }
    // 1025 parts of 5 GiB: 5 GiB more than the largest object.
    for (key, upload_id) in &uploads {
        let n = if *key == "too-big" { 1025 } else { 1024 };
        for part_number in 1..=n {
            c.commit_part(CommitPartRequest {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: key.to_string(),
                upload_id: upload_id.clone(),
                part_number,
                size: 5 * GIB,
                etag: etag.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        }
    }
    let complete = |key: &str, upload_id: &str, n: u32| CompleteMultipartUploadRequest {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        upload_id: upload_id.into(),
        parts: (1..=n)
            .map(|part_number| CompletedPart {
                part_number,
                etag: etag.into(),
            })
            .collect(),
        ..Default::default()
    };
    rejected(
        &node,
        c.complete_multipart_upload(complete("too-big", &uploads[0].1, 1025)),
        Code::InvalidArgument,
        "KEY_TOO_LARGE",
        "parts",
    )
    .await;
    let k = c
        .complete_multipart_upload(complete("just-fits", &uploads[1].1, 1024))
        .await
        .unwrap()
        .key
        .unwrap();
    assert_eq!(k.size, 5 * 1024 * GIB);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_cannot_push_paths_past_the_limits() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "fsb", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    let mkdir = |path: String| {
        let c = &c;
        async move {
            c.create_directory(CreateDirectoryRequest {
                volume: "vol".into(),
                bucket: "fsb".into(),
                path,
                ..Default::default()
            })
            .await
            .unwrap();
        }
    };
    let rename = |from: &str, to: &str| RenamePathRequest {
        volume: "vol".into(),
        bucket: "fsb".into(),
        from: from.into(),
        to: to.into(),
        ..Default::default()
    };
    // 150 components under "a", 60 directories deep at "b/.../b".
    mkdir(format!("a/{}", vec!["d"; 150].join("/"))).await;
    let deep = vec!["b"; 60].join("/");
    mkdir(deep.clone()).await;
    rejected(
        &node,
        c.rename_path(rename("a", &format!("{deep}/a"))),
        Code::FailedPrecondition,
        "PATH_TOO_DEEP",
        "to",
    )
    .await;
    // 910 bytes under "l"; a 150-byte parent would make 1061.
    let long = vec!["x".repeat(100); 9].join("/");
    mkdir(format!("l/{long}")).await;
    let wide = "p".repeat(150);
    mkdir(wide.clone()).await;
    rejected(
        &node,
        c.rename_path(rename("l", &format!("{wide}/l"))),
        Code::FailedPrecondition,
        "PATH_TOO_LONG",
        "to",
    )
    .await;
    // Within the limits, the same subtrees move.
    c.rename_path(rename("a", &format!("{}/a", vec!["b"; 40].join("/"))))
        .await
        .unwrap();
    mkdir("q".into()).await;
    c.rename_path(rename("l", "q/l")).await.unwrap();
    node.node.shutdown().await;
}
