//! Throughput and latency of the S3 gateway through a real S3 client
//! (aws-sdk-s3): for each object size and client count, PUTs for a while,
//! then GETs of what was written, each client one request at a time. Beside
//! each figure, what one S3 operation cost om: gRPC requests and Raft log
//! entries, read from the members' /metrics before and after each phase.
//! Prints a Markdown table. `scripts/bench-s3.sh` starts a 3-node om and
//! om-s3 and runs it:
//!   s3_bench --url http://127.0.0.1:9878 --access-key K --secret-key S \
//!     --om-metrics 127.0.0.1:23021,127.0.0.1:23022,127.0.0.1:23023 \
//!     [--seconds 5] [--sizes 4096,1048576,67108864] [--clients 1,16,64] \
//!     [--disk-mibs WRITE,READ] [--om-ops commit:1=N,lookup:1=M,...] [--drop-caches] [--gateway-pid PID]
//!     [--gateway-cores N]
//!
//! With `--disk-mibs` (the disk's own sequential rates, measured beside
//! it), PUT and GET of 1 MiB and larger objects say what share of the
//! disk's write and read rate they reach; with `--om-ops` (om's own
//! CommitKey and LookupKey rates per client count), 4 KiB PUTs and GETs
//! say what share of om's rate they reach. Large PUTs also say what share
//! of the gateway's hashing limit they reach: S3 makes the gateway hash
//! every byte it stores twice, MD5 for the ETag and SHA-256 for a signed
//! payload, one object's bytes on one core. Both are measured first, in
//! this process, with the crates om-s3 links (`md-5`, `sha2`), and the
//! limit is that rate times `--gateway-cores` (the cores the gateway may
//! use; all of this machine's by default).

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
    /// The disk's sequential write and read rates, MiB/s.
    disk: Option<(f64, f64)>,
    /// om's own rate, ops/s, by ("commit" or "lookup", clients).
    om_ops: Vec<(String, usize, f64)>,
    /// Empty the page cache before each GET phase (root), so GETs read
    /// from the disk as the disk's read rate was measured, not from memory.
    drop_caches: bool,
    /// The gateway's process, whose CPU time each phase reports per MiB.
    gateway_pid: Option<u32>,
    /// The cores the gateway may use.
    gateway_cores: f64,
    /// One core's rate, MiB/s, of MD5 and SHA-256 over the same bytes.
    hashing: f64,
}

/// One core's rate of `hash` over 64 MiB, MiB/s: the best of three.
fn hash_rate(mut hash: impl FnMut(&[u8])) -> f64 {
    let data = vec![0x5au8; 64 << 20];
    (0..3)
        .map(|_| {
            let t = Instant::now();
            hash(&data);
            64.0 / t.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

/// One core's MD5 and SHA-256 rates, MiB/s, and both over the same bytes.
fn hashing_rates() -> (f64, f64, f64) {
    use md5::Digest as _;
    use sha2::Digest as _;
    let md5 = hash_rate(|d| {
        std::hint::black_box(md5::Md5::digest(d));
    });
    let sha = hash_rate(|d| {
        std::hint::black_box(sha2::Sha256::digest(d));
    });
    (md5, sha, 1.0 / (1.0 / md5 + 1.0 / sha))
}

/// A process's CPU time (user and system), from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

fn args() -> Args {
    let mut a = Args {
        url: "http://127.0.0.1:9878".into(),
        access_key: String::new(),
        secret_key: String::new(),
        metrics: Vec::new(),
        seconds: 5,
        sizes: vec![4096, 1 << 20, 64 << 20],
        clients: vec![1, 16, 64],
        disk: None,
        om_ops: Vec::new(),
        drop_caches: false,
        gateway_pid: None,
        gateway_cores: std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64),
        hashing: 0.0,
    };
    let list =
        |v: &str| -> Vec<usize> { v.split(',').map(|x| x.parse().expect("a number")).collect() };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--drop-caches" {
            a.drop_caches = true;
            continue;
        }
        let v = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => a.url = v,
            "--access-key" => a.access_key = v,
            "--secret-key" => a.secret_key = v,
            "--om-metrics" => a.metrics = v.split(',').map(str::to_string).collect(),
            "--seconds" => a.seconds = v.parse().expect("seconds"),
            "--sizes" => a.sizes = list(&v),
            "--clients" => a.clients = list(&v),
            "--gateway-pid" => a.gateway_pid = Some(v.parse().expect("a pid")),
            "--gateway-cores" => a.gateway_cores = v.parse().expect("cores"),
            "--disk-mibs" => {
                let r: Vec<f64> = v.split(',').map(|x| x.parse().expect("MiB/s")).collect();
                a.disk = Some((r[0], r[1]));
            }
            "--om-ops" => {
                for item in v.split(',').filter(|x| !x.is_empty()) {
                    let (op, rest) = item.split_once(':').expect("op:clients=ops");
                    let (c, n) = rest.split_once('=').expect("op:clients=ops");
                    a.om_ops.push((
                        op.to_string(),
                        c.parse().expect("clients"),
                        n.parse().expect("ops/s"),
                    ));
                }
            }
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
    /// The gateway's CPU seconds in the phase.
    gateway_cpu: f64,
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
    let cpu_before = a.gateway_pid.map_or(0.0, cpu_seconds);
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
        gateway_cpu: 0.0,
    };
    for t in tasks {
        let (lat, bytes) = t.await.expect("a client task");
        p.ops += lat.len() as u64;
        p.per_client.push(lat.len() as u64);
        p.bytes += bytes;
        p.latencies.extend(lat);
    }
    p.elapsed = started.elapsed();
    p.gateway_cpu = a.gateway_pid.map_or(0.0, cpu_seconds) - cpu_before;
    let after = om_counters(&a.metrics).await;
    let ops = p.ops.max(1) as f64;
    p.rpcs = (after.0 - before.0) / ops;
    p.entries = (after.1 - before.1) / ops;
    p.latencies.sort();
    p
}

/// What a phase reached of the physical limit: for 1 MiB and larger
/// objects the disk's rate (write for PUT, read for GET), for smaller ones
/// om's own rate (CommitKey for PUT, LookupKey for GET) at as many clients.
fn share(a: &Args, op: &str, size: usize, clients: usize, ops_s: f64, mib_s: f64) -> String {
    if size >= 1 << 20 {
        return match a.disk {
            Some((w, r)) => {
                let (of, name) = if op == "PUT" {
                    (w, "write")
                } else {
                    (r, "read")
                };
                let disk = format!("{:.0}% of disk {name} ({of:.0} MiB/s)", 100.0 * mib_s / of);
                if op == "PUT" && a.hashing > 0.0 {
                    let limit = a.hashing * a.gateway_cores;
                    format!(
                        "{disk}; {:.0}% of hashing ({limit:.0} MiB/s)",
                        100.0 * mib_s / limit
                    )
                } else {
                    disk
                }
            }
            None => "-".into(),
        };
    }
    let name = if op == "PUT" { "commit" } else { "lookup" };
    match a.om_ops.iter().find(|(o, c, _)| o == name && *c == clients) {
        Some((_, _, n)) => format!("{:.0}% of om {name} ({n:.0}/s)", 100.0 * ops_s / n),
        None => "-".into(),
    }
}

fn row(a: &Args, op: &str, size: usize, clients: usize, p: &Phase) {
    let secs = p.elapsed.as_secs_f64();
    let (ops_s, mib_s) = (
        p.ops as f64 / secs,
        p.bytes as f64 / secs / (1 << 20) as f64,
    );
    println!(
        "| {op} | {} | {clients} | {:.0} | {:.1} | {:.1} | {:.1} | {} | {:.2} | {:.1} | {:.2} |",
        if size >= 1 << 20 {
            format!("{} MiB", size >> 20)
        } else {
            format!("{} KiB", size >> 10)
        },
        ops_s,
        percentile(&p.latencies, 0.5).as_secs_f64() * 1e3,
        percentile(&p.latencies, 0.99).as_secs_f64() * 1e3,
        mib_s,
        share(a, op, size, clients, ops_s, mib_s),
        p.gateway_cpu * 1e3 / (p.bytes as f64 / (1 << 20) as f64).max(1e-9),
        p.rpcs,
        p.entries,
    );
}

#[tokio::main]
async fn main() {
    let mut a = args();
    let (md5, sha, both) = hashing_rates();
    a.hashing = both;
    println!(
        "hashing on one core (md-5, sha2, as om-s3 links them): MD5 {md5:.0} MiB/s, \
         SHA-256 {sha:.0} MiB/s, both over the same bytes {both:.0} MiB/s; the gateway may use \
         {} cores: a hashing limit of {:.0} MiB/s for PUTs",
        a.gateway_cores,
        both * a.gateway_cores
    );
    println!();
    let a = Arc::new(a);
    let c = client(&a);
    let bucket = format!("bench-{:08x}", rand::random::<u32>());
    c.create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create the bucket");
    println!(
        "| op | size | clients | ops/s | p50 ms | p99 ms | MiB/s | of the limit | gateway CPU ms/MiB | om RPCs/op | Raft entries/op |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|");
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
            row(&a, "PUT", size, clients, &put);
            if a.drop_caches {
                // SAFETY: sync(2) takes no arguments and cannot fail.
                unsafe { libc::sync() };
                std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop the page cache");
            }
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
                    // Read as it arrives, never held whole: 64 clients
                    // of 64 MiB objects would hold 4 GiB.
                    let mut body = r.body;
                    let mut n = 0u64;
                    while let Some(chunk) = body.try_next().await.expect("a body") {
                        n += chunk.len() as u64;
                    }
                    n
                }
            })
            .await;
            row(&a, "GET", size, clients, &get);
        }
    }
}
