//! Throughput and latency of the S3 gateway through a real S3 client
//! (aws-sdk-s3): for each object size and client count, PUTs for a while,
//! then GETs of what was written, each client one request at a time. Beside
//! each figure, what one S3 operation cost om: gRPC requests and Raft log
//! entries, read from the members' /metrics before and after each phase.
//! Prints a Markdown table. `scripts/bench-s3.sh` starts a 3-node om and
//! om-s3 and runs it:
//!   s3_bench --url http://127.0.0.1:9878 --access-key K --secret-key S \
//!     --om-metrics 127.0.0.1:23021,127.0.0.1:23022,127.0.0.1:23023 \
//!     [--seconds 5] [--sizes 4096,1048576] [--clients 1,16,64]

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Args {
    url: String,
    access_key: String,
    secret_key: String,
    metrics: Vec<String>,
    seconds: u64,
    sizes: Vec<usize>,
    clients: Vec<usize>,
}

fn args() -> Args {
    let mut a = Args {
        url: "http://127.0.0.1:9878".into(),
        access_key: String::new(),
        secret_key: String::new(),
        metrics: Vec::new(),
        seconds: 5,
        sizes: vec![4096, 1 << 20],
        clients: vec![1, 16, 64],
    };
    let list =
        |v: &str| -> Vec<usize> { v.split(',').map(|x| x.parse().expect("a number")).collect() };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = v,
            "--access-key" => a.access_key = v,
            "--secret-key" => a.secret_key = v,
            "--om-metrics" => a.metrics = v.split(',').map(str::to_string).collect(),
            "--seconds" => a.seconds = v.parse().expect("seconds"),
            "--sizes" => a.sizes = list(&v),
            "--clients" => a.clients = list(&v),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(
        !a.access_key.is_empty(),
        "--access-key and --secret-key are needed"
    );
    a
}

fn client(a: &Args) -> Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(&a.url)
        .credentials_provider(Credentials::new(
            &a.access_key,
            &a.secret_key,
            None,
            None,
            "bench",
        ))
        .force_path_style(true)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(conf)
}

/// The sum of om's gRPC requests over the members, and the highest applied
/// Raft index among them.
async fn om_counters(addrs: &[String]) -> (f64, f64) {
    let (mut requests, mut applied) = (0.0, 0.0f64);
    for addr in addrs {
        let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
            continue;
        };
        let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        if s.write_all(req.as_bytes()).await.is_err() {
            continue;
        }
        let mut text = String::new();
        let _ = s.read_to_string(&mut text).await;
        for line in text.lines() {
            let value = || {
                line.rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            if line.starts_with("om_grpc_requests_total{") {
                requests += value();
            } else if line.starts_with("om_raft_applied_index ") {
                applied = applied.max(value());
            }
        }
    }
    (requests, applied)
}

struct Phase {
    ops: u64,
    /// Operations each client made.
    per_client: Vec<u64>,
    bytes: u64,
    latencies: Vec<Duration>,
    elapsed: Duration,
    rpcs: f64,
    entries: f64,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// `clients` tasks each running `op(client, task, n)` until `deadline`, or
/// over `keys` once each when given.
async fn phase<F, Fut>(a: &Args, c: &Client, clients: usize, keys: Option<u64>, op: F) -> Phase
where
    F: Fn(Client, usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = u64> + Send,
{
    let before = om_counters(&a.metrics).await;
    let op = Arc::new(op);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(a.seconds);
    let mut tasks = Vec::new();
    for t in 0..clients {
        let (c, op) = (c.clone(), op.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut bytes = 0;
            let mut n = 0u64;
            loop {
                match keys {
                    Some(k) if n >= k => break,
                    None if Instant::now() >= deadline => break,
                    _ => {}
                }
                let t0 = Instant::now();
                bytes += op(c.clone(), t, n).await;
                lat.push(t0.elapsed());
                n += 1;
            }
            (lat, bytes)
        }));
    }
    let mut p = Phase {
        ops: 0,
        per_client: Vec::new(),
        bytes: 0,
        latencies: Vec::new(),
        elapsed: Duration::ZERO,
        rpcs: 0.0,
        entries: 0.0,
    };
    for t in tasks {
        let (lat, bytes) = t.await.expect("a client task");
        p.ops += lat.len() as u64;
        p.per_client.push(lat.len() as u64);
        p.bytes += bytes;
        p.latencies.extend(lat);
    }
    p.elapsed = started.elapsed();
    let after = om_counters(&a.metrics).await;
    let ops = p.ops.max(1) as f64;
    p.rpcs = (after.0 - before.0) / ops;
    p.entries = (after.1 - before.1) / ops;
    p.latencies.sort();
    p
}

fn row(op: &str, size: usize, clients: usize, p: &Phase) {
    let secs = p.elapsed.as_secs_f64();
    println!(
        "| {op} | {} | {clients} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |",
        if size >= 1 << 20 {
            format!("{} MiB", size >> 20)
        } else {
            format!("{} KiB", size >> 10)
        },
        p.ops as f64 / secs,
        percentile(&p.latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&p.latencies, 0.99).as_secs_f64() * 1e3,
        p.bytes as f64 / secs / (1 << 20) as f64,
        p.rpcs,
        p.entries,
    );
}

#[tokio::main]
async fn main() {
    let a = Arc::new(args());
    let c = client(&a);
    let bucket = format!("bench-{:08x}", rand::random::<u32>());
    c.create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create the bucket");
    println!(
        "| op | size | clients | ops/s | p50 ms | p99 ms | MiB/s | om RPCs/op | Raft entries/op |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for &size in &a.sizes {
        let data = bytes::Bytes::from(vec![0x5a; size]);
        for &clients in &a.clients {
            let prefix = format!("s{size}-c{clients}");
            let (b, d, p) = (bucket.clone(), data.clone(), prefix.clone());
            let put = phase(&a, &c, clients, None, move |c, t, n| {
                let (b, d, p) = (b.clone(), d.clone(), p.clone());
                async move {
                    let len = d.len() as u64;
                    c.put_object()
                        .bucket(b)
                        .key(format!("{p}/{t}/{n}"))
                        .body(ByteStream::from(d))
                        .send()
                        .await
                        .expect("PUT");
                    len
                }
            })
            .await;
            row("PUT", size, clients, &put);
            // Each client reads back as many objects as the slowest wrote.
            let per_client = put.per_client.iter().copied().min().unwrap_or(0).max(1);
            let (b, p) = (bucket.clone(), prefix.clone());
            let get = phase(&a, &c, clients, Some(per_client), move |c, t, n| {
                let (b, p) = (b.clone(), p.clone());
                async move {
                    let r = c
                        .get_object()
                        .bucket(b)
                        .key(format!("{p}/{t}/{n}"))
                        .send()
                        .await
                        .expect("GET");
                    r.body.collect().await.expect("a body").into_bytes().len() as u64
                }
            })
            .await;
            row("GET", size, clients, &get);
        }
    }
}
