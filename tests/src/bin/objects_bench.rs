//! Object-write benchmarks (BENCHMARKS.md, "Writes and copies"), measured side
//! by side in one run on a single in-process node with fsync on:
//!
//! 1. CommitKey ops/s (sessions opened beforehand, so only commits are timed)
//!    and CopyKey ops/s of a 1 GiB source, at 1, 16 and 64 concurrent clients.
//! 2. CopyKey of a 5 GiB source (metadata only: its 20 blocks are shared and
//!    its plain MD5 ETag reused, seed HDDS-16315) versus reading 5 GiB through
//!    MD5 on this machine (what a copy that re-hashes the content pays).
//!
//! `cargo run --release --bin objects_bench [-- --quick]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use md5::{Digest, Md5};
use om_client::OmClient;
use om_client::v1::*;
use om_tests::TestNode;

const GIB: u64 = 1024 * 1024 * 1024;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Runs `total` calls of `op(i)` over `clients` concurrent tasks; returns ops/s.
async fn run<F, Fut>(clients: usize, total: usize, op: F) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..clients {
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            while i < total {
                op(i).await;
                i += clients;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

async fn commit_rate(c: &Arc<OmClient>, clients: usize, total: usize, round: usize) -> f64 {
    // Open every session first: only the commits are timed.
    let mut sessions = Vec::with_capacity(total);
    for i in 0..total {
        let s = c
            .open_key(OpenKeyRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: format!("commit/{round}/{i}"),
                blocks: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        sessions.push((s.session_id, s.blocks[0].block_id));
    }
    let sessions = Arc::new(sessions);
    let c = c.clone();
    run(clients, total, move |i| {
        let c = c.clone();
        let (session, block) = sessions[i];
        async move {
            c.commit_key(CommitKeyRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: format!("commit/{round}/{i}"),
                session_id: session,
                size: 4096,
                blocks: vec![BlockInfo {
                    block_id: block,
                    offset: 0,
                    length: 4096,
                }],
                etag: "0cc175b9c0f1b6a831c399e269772661".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        }
    })
    .await
}

async fn copy_rate(c: &Arc<OmClient>, clients: usize, total: usize, round: usize) -> f64 {
    let c = c.clone();
    run(clients, total, move |i| {
        let c = c.clone();
        async move {
            c.copy_key(CopyKeyRequest {
                src_volume: "vol1".into(),
                src_bucket: "bkt1".into(),
                src_key: "src-1g".into(),
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: format!("copy/{round}/{i}"),
                ..Default::default()
            })
            .await
            .unwrap();
        }
    })
    .await
}

/// Streams `bytes` through MD5 in 1 MiB reads from memory: the hashing cost
/// alone, a lower bound on reading the object back to re-hash it.
fn md5_stream(bytes: u64) -> (Duration, String) {
    let buf: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    let started = Instant::now();
    let mut h = Md5::new();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        h.update(std::hint::black_box(&buf[..n]));
        left -= n as u64;
    }
    let d = h.finalize();
    (
        started.elapsed(),
        d.iter().map(|b| format!("{b:02x}")).collect(),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let per_level = if quick { 200 } else { 2000 };
    let node = TestNode::start().await;
    let c = Arc::new(node.client());
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.put_key_with(PutKeyRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: "src-1g".into(),
        size: GIB,
        etag: "9e107d9d372bb6826bd81d3542a419d6".into(),
        ..Default::default()
    })
    .await
    .unwrap();

    println!("## Writes and copies (single node, fsync on, {per_level} ops per level)\n");
    println!("| clients | CommitKey ops/s | CopyKey ops/s (1 GiB source) |");
    println!("|--------:|----------------:|-----------------------------:|");
    for (round, clients) in [1usize, 16, 64].into_iter().enumerate() {
        let commit = commit_rate(&c, clients, per_level, round).await;
        let copy = copy_rate(&c, clients, per_level, round).await;
        println!("| {clients} | {commit:.0} | {copy:.0} |");
    }

    let src = c
        .put_key_with(PutKeyRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            key: "src-5g".into(),
            size: 5 * GIB,
            etag: "e4d909c290d0fb1ca068ffaddf22cbd0".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut copies = Vec::new();
    for i in 0..21 {
        let t = Instant::now();
        let k = c
            .copy_key(CopyKeyRequest {
                src_volume: "vol1".into(),
                src_bucket: "bkt1".into(),
                src_key: "src-5g".into(),
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: format!("copy-5g/{i}"),
                ..Default::default()
            })
            .await
            .unwrap()
            .key
            .unwrap();
        copies.push(t.elapsed());
        assert_eq!(k.etag, src.etag);
        assert_eq!(k.blocks, src.blocks);
    }
    let copy = median(copies);
    let (hash, digest) = md5_stream(if quick { GIB } else { 5 * GIB });
    let hash = if quick { hash * 5 } else { hash };
    println!("\n## CopyKey of a 5 GiB source vs reading 5 GiB through MD5\n");
    println!("| what | time |");
    println!("|------|-----:|");
    println!(
        "| CopyKey, 5 GiB source ({} shared blocks, ETag reused), median of 21 | {:.2} ms |",
        src.blocks.len(),
        copy.as_secs_f64() * 1e3
    );
    println!(
        "| MD5 over 5 GiB in 1 MiB reads from memory ({:.0} MB/s){} | {:.2} s |",
        5.0 * GIB as f64 / hash.as_secs_f64() / 1e6,
        if quick {
            ", extrapolated from 1 GiB"
        } else {
            ""
        },
        hash.as_secs_f64()
    );
    println!(
        "| ratio (hash / copy) | {:.0}x |",
        hash.as_secs_f64() / copy.as_secs_f64()
    );
    eprintln!("(digest {digest})");
    node.node.shutdown().await;
}
