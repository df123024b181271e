//! Bucket snapshot benchmarks (BENCHMARKS.md, "Bucket snapshots"), one run
//! on one in-process node with fsync on, through gRPC and Raft:
//!
//! 1. CreateSnapshot on a bucket of 1,000 keys and on one of `--keys` keys
//!    (default 1,000,000): time (median of 5), records written and bytes
//!    they take in the `snapshots` table.
//! 2. SnapshotDiff between two snapshots of the big bucket with `--changes`
//!    keys (default 1,000) overwritten in between: change-log entries and
//!    point reads, native seeks, time; against a full walk of both images
//!    (ListKeys at each snapshot, every page) in the same run.
//! 3. Foreground PutKey p50/p99 (16 clients overwriting random keys of a
//!    100,000-key bucket) with no snapshot against a bucket holding 10,
//!    in alternating rounds.
//!
//! `cargo run --release --bin snapshot_bench [-- --keys N --changes M]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use om::store::keys;
use om_client::v1::*;
use om_client::{ClientOptions, OmClient};
use om_tests::TestNode;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn client(ep: &str) -> OmClient {
    OmClient::new(
        &[ep.to_string()],
        ClientOptions {
            deadline: Duration::from_secs(120),
            ..Default::default()
        },
    )
    .unwrap()
}

fn name(i: usize) -> String {
    format!("k{i:08}")
}

/// Fills `bucket` with `n` one-byte keys, 256 per PutKeys, 8 at a time.
async fn fill(ep: &str, bucket: &str, n: usize) {
    let chunks: Vec<Vec<usize>> = (0..n)
        .collect::<Vec<_>>()
        .chunks(256)
        .map(<[usize]>::to_vec)
        .collect();
    let chunks = Arc::new(chunks);
    let mut hs = Vec::new();
    for t in 0..8 {
        let (chunks, ep, bucket) = (chunks.clone(), ep.to_string(), bucket.to_string());
        hs.push(tokio::spawn(async move {
            let c = client(&ep);
            for chunk in chunks.iter().skip(t).step_by(8) {
                let keys = chunk
                    .iter()
                    .map(|i| NewKey {
                        key: name(*i),
                        size: 1,
                        ..Default::default()
                    })
                    .collect();
                c.put_keys("vol", &bucket, keys).await.unwrap();
            }
        }));
    }
    for h in hs {
        h.await.unwrap();
    }
}

/// Bytes of the `snapshots` table's entries.
fn snapshot_table_bytes(node: &TestNode) -> usize {
    let db = node.node.service.db();
    db.iterator_cf(
        db.cf_handle(keys::SNAPSHOTS_CF).unwrap(),
        rocksdb::IteratorMode::Start,
    )
    .map(|kv| {
        let (k, v) = kv.unwrap();
        k.len() + v.len()
    })
    .sum()
}

/// Median create time and bytes per snapshot, over 5 snapshots of `bucket`.
async fn creates(node: &TestNode, c: &OmClient, bucket: &str) -> (Duration, usize) {
    let before = snapshot_table_bytes(node);
    let mut times = Vec::new();
    for i in 0..5 {
        let t = Instant::now();
        c.create_snapshot("vol", bucket, &format!("c{i}"))
            .await
            .unwrap();
        times.push(t.elapsed());
    }
    times.sort();
    (times[2], (snapshot_table_bytes(node) - before) / 5)
}

/// One PutKey latency per write, `clients` writers overwriting random keys
/// of `bucket` (of `n`) for `secs`.
async fn put_latencies(
    ep: &str,
    bucket: &str,
    n: usize,
    clients: usize,
    secs: u64,
) -> Vec<Duration> {
    let until = Instant::now() + Duration::from_secs(secs);
    let mut hs = Vec::new();
    for t in 0..clients {
        let (ep, bucket) = (ep.to_string(), bucket.to_string());
        hs.push(tokio::spawn(async move {
            let c = client(&ep);
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
            let mut out = Vec::new();
            while Instant::now() < until {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = name((x % n as u64) as usize);
                let s = Instant::now();
                c.put_key("vol", &bucket, &k, 2).await.unwrap();
                out.push(s.elapsed());
            }
            out
        }));
    }
    let mut all = Vec::new();
    for h in hs {
        all.extend(h.await.unwrap());
    }
    all.sort();
    all
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n = arg("--keys", 1_000_000);
    let changes = arg("--changes", 1_000);
    let node = TestNode::start().await;
    let ep = node.endpoint();
    let c = client(&ep);
    c.create_volume("vol", "").await.unwrap();
    for b in ["small", "big", "plain", "held"] {
        c.create_bucket("vol", b, BucketLayout::ObjectStore)
            .await
            .unwrap();
    }
    let t = Instant::now();
    fill(&ep, "small", 1_000).await;
    fill(&ep, "big", n).await;
    println!("filled: {n} keys in {:.1} s", t.elapsed().as_secs_f64());

    println!("\n1. CreateSnapshot (median of 5)");
    for (b, keys) in [("small", 1_000), ("big", n)] {
        let (time, bytes) = creates(&node, &c, b).await;
        println!(
            "   bucket of {keys:>9} keys: {}  3 records, {bytes} bytes in `snapshots`",
            ms(time)
        );
    }

    println!("\n2. SnapshotDiff: {changes} keys overwritten between two snapshots of {n} keys");
    c.create_snapshot("vol", "big", "s1").await.unwrap();
    for i in 0..changes {
        c.put_key("vol", "big", &name(i * (n / changes)), 2)
            .await
            .unwrap();
    }
    c.create_snapshot("vol", "big", "s2").await.unwrap();
    let t = Instant::now();
    let (mut found, mut examined, mut reads, mut seeks, mut pages) = (0, 0, 0, 0, 0);
    let mut token = String::new();
    loop {
        let r = c
            .snapshot_diff(SnapshotDiffRequest {
                volume: "vol".into(),
                bucket: "big".into(),
                from: "s1".into(),
                to: "s2".into(),
                continuation_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        found += r.entries.len();
        examined += r.changes_examined;
        reads += r.point_reads;
        seeks += r.scan.map_or(0, |s| s.seeks);
        pages += 1;
        if !r.truncated {
            break;
        }
        token = r.next_continuation_token;
    }
    let diff_time = t.elapsed();
    assert_eq!(found, changes);
    let t = Instant::now();
    let (mut walked, mut walk_seeks, mut listed) = (0u64, 0u64, 0usize);
    for s in ["s1", "s2"] {
        let mut token = String::new();
        loop {
            let r = c
                .list_keys(ListKeysRequest {
                    volume: "vol".into(),
                    bucket: "big".into(),
                    snapshot: s.into(),
                    continuation_token: token.clone(),
                    omit_blocks: true,
                    ..Default::default()
                })
                .await
                .unwrap();
            listed += r.keys.len();
            if let Some(sc) = r.scan {
                walked += sc.nexts;
                walk_seeks += sc.seeks;
            }
            if !r.truncated {
                break;
            }
            token = r.next_continuation_token;
        }
    }
    let walk_time = t.elapsed();
    let diff_entries = examined + reads;
    println!(
        "   diff:      {found} keys in {pages} pages, {examined} log entries + {reads} point reads = {diff_entries} entries read, {seeks} seeks, {}",
        ms(diff_time)
    );
    println!(
        "   full walk: {listed} keys listed, {walked} entries read, {walk_seeks} seeks, {}",
        ms(walk_time)
    );
    println!(
        "   entries read: {:.0}x fewer; time: {:.0}x less",
        walked as f64 / diff_entries as f64,
        walk_time.as_secs_f64() / diff_time.as_secs_f64()
    );

    println!("\n3. PutKey p50/p99, 16 clients overwriting random keys of 100,000");
    fill(&ep, "plain", 100_000).await;
    fill(&ep, "held", 100_000).await;
    for i in 0..10 {
        c.create_snapshot("vol", "held", &format!("h{i}"))
            .await
            .unwrap();
        // Spread the snapshots over some writes, as a schedule would.
        put_latencies(&ep, "held", 100_000, 4, 1).await;
    }
    let (mut plain, mut held) = (Vec::new(), Vec::new());
    for round in 0..3 {
        let p = put_latencies(&ep, "plain", 100_000, 16, 5).await;
        let h = put_latencies(&ep, "held", 100_000, 16, 5).await;
        println!(
            "   round {round}: no snapshot p50 {} p99 {} ({} writes) | 10 held p50 {} p99 {} ({} writes)",
            ms(pct(&p, 0.5)),
            ms(pct(&p, 0.99)),
            p.len(),
            ms(pct(&h, 0.5)),
            ms(pct(&h, 0.99)),
            h.len()
        );
        plain.extend(p);
        held.extend(h);
    }
    plain.sort();
    held.sort();
    println!(
        "   all rounds: no snapshot p99 {} | 10 held p99 {} ({:+.1} %)",
        ms(pct(&plain, 0.99)),
        ms(pct(&held, 0.99)),
        (pct(&held, 0.99).as_secs_f64() / pct(&plain, 0.99).as_secs_f64() - 1.0) * 100.0
    );
    let b = c.get_bucket("vol", "held").await.unwrap();
    println!("   held bucket: {} keys", b.key_count);
}
