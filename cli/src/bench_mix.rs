//! `omctl bench load` and `omctl bench mix`: the shape of Ozone's freon.
//!
//! - `load` creates `--keys` keys named `PREFIX` + a zero-padded index in one
//!   bucket, through Raft: PutKey, or with `--batch N` PutKeys (N keys in one
//!   command), `--concurrency` requests in flight; resumable with `--start`,
//!   with a progress bar and live keys/s on a terminal. The latencies it
//!   reports are per request (per batch).
//! - `mix` runs an operation mix over such a key space for `--seconds` after
//!   `--warmup` seconds that are not counted: `put` creates new keys, `get`
//!   looks up a random loaded key, `list` lists a page from a random loaded
//!   key, `delete` deletes a random loaded key (one already gone counts as a
//!   miss, not an error). Freon's `obrwk` is `--mix list=90,put=10
//!   --concurrency 100`.
//!
//! Both report ops/s and latency percentiles per operation, as a table or
//! (with `--output json`) JSON.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use om_client::v1::{ListKeysRequest, NewKey, PutKeyRequest};
use om_client::{ClientError, OmClient};
use serde::Serialize;
use tonic::Code;

#[derive(Debug, Clone, clap::Subcommand)]
pub enum BenchMode {
    /// Create `--keys` keys in VOLUME/BUCKET through Raft (a benchmark state).
    Load(LoadArgs),
    /// Run an operation mix (put/get/list/delete ratios) over a loaded key space.
    Mix(MixArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// VOLUME/BUCKET (an OBJECT_STORE bucket that exists).
    pub target: String,
    /// Keys to create.
    #[arg(long)]
    pub keys: u64,
    /// Index of the first key (to continue an interrupted load).
    #[arg(long, default_value_t = 0)]
    pub start: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Keys per request: 1 uses PutKey, more (up to 256) PutKeys, one Raft
    /// command for the whole batch (the bucket must be unversioned).
    #[arg(long, default_value_t = 1)]
    pub batch: u64,
    /// Size recorded for each key, in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: u64,
    /// Name prefix of the keys.
    #[arg(long, default_value = "k/")]
    pub prefix: String,
}

#[derive(Debug, Clone, clap::Args)]
pub struct MixArgs {
    /// VOLUME/BUCKET holding keys created by `bench load`.
    pub target: String,
    /// Keys `bench load` created (the key space get, list and delete draw from).
    #[arg(long)]
    pub keys: u64,
    /// Ratios of operations, e.g. `list=90,put=10` (put, get, list, delete).
    #[arg(long, default_value = "get=50,put=50")]
    pub mix: String,
    /// Clients (requests in flight).
    #[arg(long, default_value_t = 100)]
    pub concurrency: usize,
    /// Seconds measured.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// Seconds run first and not counted.
    #[arg(long, default_value_t = 5)]
    pub warmup: u64,
    /// Keys per listed page.
    #[arg(long, default_value_t = 1000)]
    pub page: u32,
    /// Size recorded for each created key, in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: u64,
    /// Name prefix `bench load` used.
    #[arg(long, default_value = "k/")]
    pub prefix: String,
    /// Spread the clients over the endpoints (client i starts at endpoint
    /// i mod n) instead of all following the leader.
    #[arg(long)]
    pub spread: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Put,
    Get,
    List,
    Delete,
}

const OPS: [Op; 4] = [Op::Put, Op::Get, Op::List, Op::Delete];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::List => "list",
            Op::Delete => "delete",
        }
    }
}

/// Parses `list=90,put=10` into cumulative weights over `OPS`.
pub fn parse_mix(s: &str) -> Result<[u32; 4]> {
    let mut w = [0u32; 4];
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, ratio) = part
            .split_once('=')
            .with_context(|| format!("--mix: {part:?} is not OP=RATIO"))?;
        let i = OPS
            .iter()
            .position(|o| o.name() == name.trim())
            .with_context(|| {
                format!("--mix: unknown operation {name:?} (put, get, list, delete)")
            })?;
        w[i] = ratio
            .trim()
            .parse()
            .with_context(|| format!("--mix: ratio of {name} is not a whole number"))?;
    }
    if w.iter().all(|r| *r == 0) {
        bail!("--mix: no operation has a ratio above 0");
    }
    Ok(w)
}

/// One operation's figures.
#[derive(Debug, Clone, Serialize)]
pub struct OpRow {
    pub op: Op,
    pub ops: u64,
    pub ops_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub misses: u64,
    pub errors: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mode: &'static str,
    pub concurrency: usize,
    pub seconds: f64,
    /// Requests per second.
    pub ops_per_sec: f64,
    /// `load`: keys created (a request creates `--batch` of them) and their rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_per_sec: Option<f64>,
    pub ops: Vec<OpRow>,
}

fn split_target(t: &str) -> Result<(String, String)> {
    match t.split_once('/') {
        Some((v, b)) if !v.is_empty() && !b.is_empty() && !b.contains('/') => {
            Ok((v.to_string(), b.to_string()))
        }
        _ => bail!("target {t:?} is not VOLUME/BUCKET"),
    }
}

fn key_name(prefix: &str, i: u64) -> String {
    format!("{prefix}{i:010}")
}

/// Latencies (µs) and counts of one operation, per worker.
#[derive(Default, Clone)]
struct Tally {
    lat: Vec<u64>,
    misses: u64,
    errors: u64,
}

/// What an operation came to.
enum Outcome {
    Done,
    Miss,
    Failed,
}

fn outcome<T>(r: Result<T, ClientError>, miss: Code) -> Outcome {
    match r {
        Ok(_) => Outcome::Done,
        Err(e) if e.code() == miss => Outcome::Miss,
        Err(_) => Outcome::Failed,
    }
}

/// A small fast generator per worker (xorshift), so workers draw keys
/// independently without a shared lock.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        if n == 0 { 0 } else { self.0 % n }
    }
}

/// A progress line on a terminal (stderr): a bar when the total is known,
/// the count, the live rate over the last second and the average.
struct Bar {
    on: bool,
    started: Instant,
    last: (Instant, u64),
}

impl Bar {
    fn new() -> Bar {
        use std::io::IsTerminal;
        let now = Instant::now();
        Bar {
            on: std::io::stderr().is_terminal(),
            started: now,
            last: (now, 0),
        }
    }

    fn update(&mut self, n: u64, total: Option<u64>, what: &str) {
        let now = Instant::now();
        let live =
            (n - self.last.1) as f64 / now.duration_since(self.last.0).as_secs_f64().max(1e-3);
        let avg = n as f64 / now.duration_since(self.started).as_secs_f64().max(1e-3);
        self.last = (now, n);
        let line = match total {
            Some(t) if t > 0 => {
                let frac = (n as f64 / t as f64).min(1.0);
                let filled = (frac * 30.0) as usize;
                let eta = if avg > 0.0 {
                    (t - n.min(t)) as f64 / avg
                } else {
                    0.0
                };
                format!(
                    "[{}{}] {:>5.1}% {n}/{t} {what}  {live:.0}/s now, {avg:.0}/s avg, ETA {eta:.0} s",
                    "#".repeat(filled),
                    ".".repeat(30 - filled),
                    frac * 100.0
                )
            }
            _ => format!("{n} {what}  {live:.0}/s now, {avg:.0}/s avg"),
        };
        if self.on {
            eprint!("\r{line}\x1b[K");
        } else if now
            .duration_since(self.started)
            .as_secs()
            .is_multiple_of(10)
        {
            // Not a terminal: a line every ten seconds keeps logs short.
            eprintln!("{line}");
        }
    }

    fn done(&self) {
        if self.on {
            eprintln!();
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn rows(tallies: Vec<[Tally; 4]>, secs: f64) -> Vec<OpRow> {
    let mut out = Vec::new();
    for (i, op) in OPS.iter().enumerate() {
        let mut t = Tally::default();
        for w in &tallies {
            t.lat.extend_from_slice(&w[i].lat);
            t.misses += w[i].misses;
            t.errors += w[i].errors;
        }
        if t.lat.is_empty() && t.misses == 0 && t.errors == 0 {
            continue;
        }
        t.lat.sort_unstable();
        let ops = t.lat.len() as u64 + t.misses;
        out.push(OpRow {
            op: *op,
            ops,
            ops_per_sec: ops as f64 / secs,
            p50_ms: percentile(&t.lat, 0.50),
            p99_ms: percentile(&t.lat, 0.99),
            p999_ms: percentile(&t.lat, 0.999),
            max_ms: t.lat.last().map_or(0.0, |m| *m as f64 / 1000.0),
            misses: t.misses,
            errors: t.errors,
        });
    }
    out
}

fn report(mode: &'static str, concurrency: usize, secs: f64, ops: Vec<OpRow>) -> Report {
    let total: u64 = ops.iter().map(|r| r.ops).sum();
    Report {
        mode,
        concurrency,
        seconds: secs,
        ops_per_sec: total as f64 / secs,
        keys: None,
        keys_per_sec: None,
        ops,
    }
}

/// `bench load`.
pub async fn load(om: Arc<OmClient>, args: &LoadArgs) -> Result<Report> {
    let (volume, bucket) = split_target(&args.target)?;
    om.get_bucket(&volume, &bucket)
        .await
        .with_context(|| format!("bucket {}", args.target))?;
    let next = Arc::new(AtomicU64::new(args.start));
    let done = Arc::new(AtomicU64::new(0));
    let end = args.start + args.keys;
    if !(1..=256).contains(&args.batch) {
        bail!("--batch is 1 to 256 keys per request");
    }
    let batch = args.batch;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency.max(1) {
        let (om, next, done) = (om.clone(), next.clone(), done.clone());
        let (volume, bucket, prefix, size) = (
            volume.clone(),
            bucket.clone(),
            args.prefix.clone(),
            args.size,
        );
        tasks.push(tokio::spawn(async move {
            let mut t: [Tally; 4] = Default::default();
            loop {
                let i = next.fetch_add(batch, Ordering::Relaxed);
                if i >= end {
                    break;
                }
                let last = end.min(i + batch);
                let at = Instant::now();
                let r = if batch == 1 {
                    om.put_key_with(PutKeyRequest {
                        volume: volume.clone(),
                        bucket: bucket.clone(),
                        key: key_name(&prefix, i),
                        size,
                        ..Default::default()
                    })
                    .await
                    .map(|_| ())
                } else {
                    let keys = (i..last)
                        .map(|j| NewKey {
                            key: key_name(&prefix, j),
                            size,
                            ..Default::default()
                        })
                        .collect();
                    om.put_keys(&volume, &bucket, keys).await.map(|_| ())
                };
                match r {
                    Ok(()) => t[0].lat.push(at.elapsed().as_micros() as u64),
                    Err(e) => {
                        t[0].errors += 1;
                        if t[0].errors == 1 {
                            tracing::warn!(error = %e, key = i, "put failed");
                        }
                    }
                }
                done.fetch_add(last - i, Ordering::Relaxed);
            }
            t
        }));
    }
    let mut bar = Bar::new();
    while tasks.iter().any(|t| !t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        bar.update(done.load(Ordering::Relaxed), Some(args.keys), "keys");
    }
    bar.done();
    let mut tallies = Vec::new();
    for t in tasks {
        tallies.push(t.await?);
    }
    let secs = started.elapsed().as_secs_f64();
    let mut r = report("load", args.concurrency, secs, rows(tallies, secs));
    let failed: u64 = r.ops.iter().map(|o| o.errors).sum();
    let created = args.keys.saturating_sub(failed * batch);
    r.keys = Some(created);
    r.keys_per_sec = Some(created as f64 / secs);
    Ok(r)
}

/// `bench mix`.
/// `clients[w mod n]` serves worker w.
pub async fn mix(clients: Vec<Arc<OmClient>>, args: &MixArgs) -> Result<Report> {
    let om = clients[0].clone();
    let (volume, bucket) = split_target(&args.target)?;
    let weights = parse_mix(&args.mix)?;
    om.get_bucket(&volume, &bucket)
        .await
        .with_context(|| format!("bucket {}", args.target))?;
    if args.keys == 0 && weights[1..].iter().any(|w| *w > 0) {
        bail!("--keys is 0: get, list and delete need a loaded key space (bench load)");
    }
    // Without a warm-up every operation counts, from the first.
    let counting = Arc::new(AtomicBool::new(args.warmup == 0));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let run = format!("{:08x}", rand::random::<u32>());
    let total_weight: u32 = weights.iter().sum();
    let mut tasks = Vec::new();
    for w in 0..args.concurrency.max(1) {
        let om = clients[w % clients.len()].clone();
        let (counting, stop, done) = (counting.clone(), stop.clone(), done.clone());
        let (volume, bucket, args, run) =
            (volume.clone(), bucket.clone(), args.clone(), run.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((w as u64 + 1) * 0x2545_f491_4f6c_dd1d));
            let mut t: [Tally; 4] = Default::default();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mut pick = rng.below(total_weight as u64) as u32;
                let mut op = 0;
                while pick >= weights[op] {
                    pick -= weights[op];
                    op += 1;
                }
                let at = Instant::now();
                let r = match OPS[op] {
                    Op::Put => {
                        n += 1;
                        let r = om
                            .put_key_with(PutKeyRequest {
                                volume: volume.clone(),
                                bucket: bucket.clone(),
                                key: format!("{}mix-{run}/{w}/{n}", args.prefix),
                                size: args.size,
                                ..Default::default()
                            })
                            .await;
                        outcome(r, Code::Ok)
                    }
                    Op::Get => {
                        let k = key_name(&args.prefix, rng.below(args.keys));
                        outcome(om.lookup_key(&volume, &bucket, &k).await, Code::NotFound)
                    }
                    Op::List => {
                        let from = key_name(&args.prefix, rng.below(args.keys));
                        let r = om
                            .list_keys(ListKeysRequest {
                                volume: volume.clone(),
                                bucket: bucket.clone(),
                                start_after: from,
                                max_keys: args.page,
                                ..Default::default()
                            })
                            .await;
                        outcome(r, Code::NotFound)
                    }
                    Op::Delete => {
                        let k = key_name(&args.prefix, rng.below(args.keys));
                        outcome(om.delete_key(&volume, &bucket, &k).await, Code::NotFound)
                    }
                };
                if !counting.load(Ordering::Relaxed) {
                    continue;
                }
                match r {
                    Outcome::Done => t[op].lat.push(at.elapsed().as_micros() as u64),
                    Outcome::Miss => t[op].misses += 1,
                    Outcome::Failed => t[op].errors += 1,
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            t
        }));
    }
    if args.warmup > 0 {
        tokio::time::sleep(Duration::from_secs(args.warmup)).await;
    }
    counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let end = started + Duration::from_secs(args.seconds);
    let mut bar = Bar::new();
    while Instant::now() < end {
        tokio::time::sleep(
            Duration::from_secs(1).min(end.saturating_duration_since(Instant::now())),
        )
        .await;
        bar.update(done.load(Ordering::Relaxed), None, "ops");
    }
    stop.store(true, Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    bar.done();
    let mut tallies = Vec::new();
    for t in tasks {
        tallies.push(t.await?);
    }
    Ok(report("mix", args.concurrency, secs, rows(tallies, secs)))
}

/// A report as a Markdown table.
pub fn markdown(r: &Report) -> String {
    let keys = match (r.keys, r.keys_per_sec) {
        (Some(k), Some(rate)) => format!(", {k} keys ({rate:.0} keys/s)"),
        _ => String::new(),
    };
    let mut s = format!(
        "{} with {} clients: {:.0} requests/s over {:.1} s{keys}\n\n| operation | ops | ops/s | p50 ms | p99 ms | p99.9 ms | max ms | misses | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        r.mode, r.concurrency, r.ops_per_sec, r.seconds
    );
    for o in &r.ops {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |\n",
            o.op.name(),
            o.ops,
            o.ops_per_sec,
            o.p50_ms,
            o.p99_ms,
            o.p999_ms,
            o.max_ms,
            o.misses,
            o.errors
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_mix("list=90,put=10").unwrap(), [10, 0, 90, 0]);
        assert_eq!(parse_mix(" get = 1 ").unwrap(), [0, 1, 0, 0]);
        for bad in ["", "put=0", "scan=5", "put", "put=x", "put=-1"] {
            assert!(parse_mix(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_names_sort_by_index() {
        assert!(key_name("k/", 9) < key_name("k/", 10));
        assert_eq!(key_name("k/", 42), "k/0000000042");
    }
}
