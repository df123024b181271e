//! Writing keys through sessions, server-side copies, multipart uploads and
//! block reclamation, end to end through gRPC on a single node: each
//! operation, its failure cases, and proof that a rejected request leaves
//! every table unchanged.

use std::collections::BTreeSet;

use md5::{Digest, Md5};
use om_client::OmClient;
use om_client::v1::*;
use om_tests::{TestNode, assert_err, deleted_block_ids as deleted_blocks, rejected};
use tonic::Code;

const MIB: u64 = 1024 * 1024;
const BLOCK: u64 = 256 * MIB;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn md5_of(s: &str) -> String {
    hex(&Md5::digest(s.as_bytes()))
}

async fn setup(node: &TestNode) -> OmClient {
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c
}

fn ids(blocks: &[BlockInfo]) -> Vec<u64> {
    blocks.iter().map(|b| b.block_id).collect()
}

fn open_req(key: &str, blocks: u32) -> OpenKeyRequest {
    OpenKeyRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        blocks,
        ..Default::default()
    }
}

fn commit_req(key: &str, session: u64, blocks: Vec<BlockInfo>, size: u64) -> CommitKeyRequest {
    CommitKeyRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        session_id: session,
        size,
        blocks,
        etag: md5_of(key),
        ..Default::default()
    }
}

fn written(blocks: &[BlockInfo], size: u64) -> Vec<BlockInfo> {
    let mut off = 0;
    let mut out = Vec::new();
    for b in blocks {
        if off >= size {
            break;
        }
        let len = BLOCK.min(size - off);
        out.push(BlockInfo {
            block_id: b.block_id,
            offset: off,
            length: len,
        });
        off += len;
    }
    out
}

fn copy_req(src: &str, dst: &str) -> CopyKeyRequest {
    CopyKeyRequest {
        src_volume: "vol1".into(),
        src_bucket: "bkt1".into(),
        src_key: src.into(),
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: dst.into(),
        ..Default::default()
    }
}

fn part_req(key: &str, upload: &str, n: u32, size: u64, tag: &str) -> CommitPartRequest {
    CommitPartRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        upload_id: upload.into(),
        part_number: n,
        size,
        etag: md5_of(tag),
        ..Default::default()
    }
}

fn complete_req(key: &str, upload: &str, parts: &[(u32, &str)]) -> CompleteMultipartUploadRequest {
    CompleteMultipartUploadRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        upload_id: upload.into(),
        parts: parts
            .iter()
            .map(|(n, tag)| CompletedPart {
                part_number: *n,
                etag: md5_of(tag),
            })
            .collect(),
        ..Default::default()
    }
}

fn initiate(key: &str) -> InitiateMultipartUploadRequest {
    InitiateMultipartUploadRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        content_type: "video/mp4".into(),
        ..Default::default()
    }
}

async fn list_up(
    c: &OmClient,
    prefix: &str,
    delim: &str,
    km: &str,
    um: &str,
    max: u32,
) -> ListMultipartUploadsResponse {
    c.list_multipart_uploads(ListMultipartUploadsRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        prefix: prefix.into(),
        delimiter: delim.into(),
        key_marker: km.into(),
        upload_id_marker: um.into(),
        max_uploads: max,
        ..Default::default()
    })
    .await
    .unwrap()
}

mod copies;
mod multipart;
mod reclamation;
mod sessions;
