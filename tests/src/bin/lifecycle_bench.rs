//! Lifecycle-scan benchmarks (BENCHMARKS.md, "7. Lifecycle scans"), one run
//! on one in-process node with fsync on, lifecycle days of 1 ms so every
//! `exp/` key is eligible at once:
//!
//! 1. `--keys` keys (default 1,000,000) in 10 buckets, half eligible: one
//!    pass through Raft with the rate limits lifted: entries evaluated per
//!    second, expirations per second, time to complete the pass.
//! 2. Foreground PutKey p50/p99 (16 clients) with no pass running, while the
//!    unthrottled pass of (1) runs, and while a pass runs at the default rate
//!    limits (a bucket of `--keys`/10 keys, 90% eligible).
//! 3. Restarts at 10%, 50% and 90% of a pass (default limits) over a bucket
//!    whose eligible and kept keys interleave: what the restarted node's
//!    first page cost (native seeks, entries read at or before the cursor,
//!    as the scanner reports them), against reading from the bucket's start
//!    up to the cursor (what a scanner without a replicated cursor pays:
//!    live entries, tombstones, time).
//! 4. After the pass expired 90% of a bucket: ListKeys first and
//!    continuation pages (native seeks, tombstones skipped).
//!
//! `cargo run --release --bin lifecycle_bench [-- --keys N]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use om::store::iter::DeferredSeekIter;
use om::store::keys;
use om_client::v1::lifecycle_filter::Predicate;
use om_client::v1::*;
use om_client::{ClientOptions, OmClient};
use om_tests::TestNode;

const BUCKETS: usize = 10;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rules() -> Vec<LifecycleRule> {
    vec![LifecycleRule {
        id: "exp".into(),
        enabled: true,
        filter: Some(LifecycleFilter {
            predicate: Some(Predicate::Prefix("exp/".into())),
        }),
        expiration: Some(LifecycleExpiration {
            days: Some(1),
            ..Default::default()
        }),
        ..Default::default()
    }]
}

fn client(ep: &str) -> OmClient {
    OmClient::new(
        &[ep.to_string()],
        ClientOptions {
            deadline: Duration::from_secs(60),
            ..Default::default()
        },
    )
    .unwrap()
}

/// Puts `(bucket, name)` pairs over `tasks` clients; returns ops/s.
async fn load(ep: &str, items: Vec<(String, String)>, tasks: usize) -> f64 {
    let items = Arc::new(items);
    let started = Instant::now();
    let mut hs = Vec::new();
    for t in 0..tasks {
        let (items, ep) = (items.clone(), ep.to_string());
        hs.push(tokio::spawn(async move {
            let c = client(&ep);
            for (b, k) in items.iter().skip(t).step_by(tasks) {
                c.put_key("vol", b, k, 1).await.unwrap();
            }
        }));
    }
    for h in hs {
        h.await.unwrap();
    }
    items.len() as f64 / started.elapsed().as_secs_f64()
}

/// PutKey latencies of `clients` writers doing `per` puts each into `fg`.
async fn put_latencies(ep: &str, clients: usize, per: usize, round: &str) -> (Duration, Duration) {
    let mut hs = Vec::new();
    for t in 0..clients {
        let (ep, round) = (ep.to_string(), round.to_string());
        hs.push(tokio::spawn(async move {
            let c = client(&ep);
            let mut lat = Vec::with_capacity(per);
            for i in 0..per {
                let t0 = Instant::now();
                c.put_key("vol", "fgw", &format!("{round}/{t}/{i}"), 1)
                    .await
                    .unwrap();
                lat.push(t0.elapsed());
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for h in hs {
        all.extend(h.await.unwrap());
    }
    all.sort();
    (all[all.len() / 2], all[all.len() * 99 / 100])
}

async fn status(c: &OmClient, bucket: &str) -> Option<LifecycleStatus> {
    c.get_lifecycle_status(GetLifecycleStatusRequest {
        volume: "vol".into(),
        bucket: bucket.into(),
        ..Default::default()
    })
    .await
    .ok()
    .and_then(|r| r.status)
}

async fn set_rules(c: &OmClient, bucket: &str) {
    c.put_bucket_lifecycle(PutBucketLifecycleRequest {
        volume: "vol".into(),
        bucket: bucket.into(),
        rules: rules(),
        ..Default::default()
    })
    .await
    .unwrap();
}

/// Waits for every bucket's first pass to complete; returns the totals
/// (evaluated, expired).
async fn wait_passes(c: &OmClient, buckets: &[String]) -> (u64, u64) {
    loop {
        let mut done = 0;
        let (mut evaluated, mut expired) = (0, 0);
        for b in buckets {
            if let Some(s) = status(c, b).await {
                evaluated += s.total_evaluated;
                expired += s.total_actions.get("expire").copied().unwrap_or(0);
                if s.last_pass_completed_ms > 0 {
                    done += 1;
                }
            }
        }
        if done == buckets.len() {
            return (evaluated, expired);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// Waits until `bucket`'s scan is in a pass (a page applied).
async fn wait_started(c: &OmClient, bucket: &str) {
    loop {
        if status(c, bucket)
            .await
            .is_some_and(|s| s.phase != "idle" || s.last_pass_completed_ms > 0)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a scanner without a replicated cursor pays after a restart at
/// `cursor`: every entry from the bucket's start up to it (live entries,
/// tombstones, time); and what om pays: positioning at its successor.
fn resume_costs(
    db: &rocksdb::DB,
    bucket: &str,
    cursor: &[u8],
) -> (u64, u64, Duration, u64, Duration) {
    let prefix = keys::object_prefix("vol", bucket);
    let t0 = Instant::now();
    let mut it = DeferredSeekIter::new(
        db,
        keys::KEYS_CF,
        Some(keys::key_successor(cursor)),
        keys::prefix_end(&prefix),
    )
    .unwrap();
    it.has_current();
    let resume = t0.elapsed();
    let seeks = it.stats().seeks;
    let t0 = Instant::now();
    let mut it = DeferredSeekIter::new(
        db,
        keys::KEYS_CF,
        Some(prefix),
        Some(keys::key_successor(cursor)),
    )
    .unwrap();
    let mut read = 0u64;
    while it.current().is_some() {
        read += 1;
        it.advance();
    }
    (seeks, read, t0.elapsed(), it.stats().tombstones, resume)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = arg("--keys", 1_000_000);
    let unlimited = |a: &mut om::config::Args| {
        a.lifecycle_day_ms = Some(1);
        a.lifecycle_interval_ms = Some(3_600_000);
        a.lifecycle_evaluations_per_s = Some(1_000_000_000);
        a.lifecycle_actions_per_s = Some(1_000_000_000);
    };
    let defaults = |a: &mut om::config::Args| {
        a.lifecycle_day_ms = Some(1);
        a.lifecycle_interval_ms = Some(3_600_000);
    };
    let node = TestNode::start_with(unlimited).await;
    let ep = node.endpoint();
    let c = client(&ep);
    c.create_volume("vol", "").await.unwrap();
    let buckets: Vec<String> = (0..BUCKETS).map(|b| format!("bkt{b}")).collect();
    for b in buckets
        .iter()
        .map(String::as_str)
        .chain(["fgw", "ninety", "resume"])
    {
        c.create_bucket("vol", b, BucketLayout::ObjectStore)
            .await
            .unwrap();
    }
    let items: Vec<(String, String)> = (0..n)
        .map(|i| {
            let j = i / BUCKETS;
            let p = if j.is_multiple_of(2) { "exp" } else { "keep" };
            (buckets[i % BUCKETS].clone(), format!("{p}/{j:08}"))
        })
        .collect();
    let rate = load(&ep, items, 64).await;
    println!("loaded {n} keys in {BUCKETS} buckets at {rate:.0} PutKey/s");
    let small = n / 10;
    let items: Vec<(String, String)> = (0..small)
        .map(|i| {
            let p = if i.is_multiple_of(10) { "keep" } else { "exp" };
            ("ninety".to_string(), format!("{p}/{i:08}"))
        })
        .collect();
    load(&ep, items, 64).await;
    // Eligible and kept keys interleaved (by size), so tombstones lie
    // between the live keys behind a cursor.
    let items: Arc<Vec<usize>> = Arc::new((0..small).collect());
    let mut hs = Vec::new();
    for t in 0..64 {
        let (items, ep) = (items.clone(), ep.clone());
        hs.push(tokio::spawn(async move {
            let c = client(&ep);
            for i in items.iter().skip(t).step_by(64) {
                c.put_key("vol", "resume", &format!("k{i:08}"), 1 + (*i as u64 % 2))
                    .await
                    .unwrap();
            }
        }));
    }
    for h in hs {
        h.await.unwrap();
    }
    println!(
        "loaded {small} keys into each of two {small}-key buckets (90% eligible; half eligible, interleaved)"
    );

    // 2a. PutKey latency with no pass running.
    let (p50, p99) = put_latencies(&ep, 16, 2000, "idle").await;
    println!("\n## 2. Foreground PutKey, 16 clients, 32000 puts each");
    println!(
        "no pass running:                     p50 {}  p99 {}",
        ms(p50),
        ms(p99)
    );

    // 1. One unthrottled pass over every bucket (latency measured meanwhile).
    for b in &buckets {
        set_rules(&c, b).await;
    }
    wait_started(&c, &buckets[0]).await;
    let (p50, p99) = put_latencies(&ep, 16, 2000, "unthrottled").await;
    let during = status(&c, &buckets[BUCKETS - 1])
        .await
        .map_or(0, |s| s.evaluated);
    println!(
        "during an unthrottled pass:          p50 {}  p99 {}  (pass still running at the end: {})",
        ms(p50),
        ms(p99),
        during < (n / BUCKETS) as u64
    );
    let (evaluated, expired) = wait_passes(&c, &buckets).await;
    // The pass's own span, from the statuses: first page to last.
    let mut first = u64::MAX;
    let mut last = 0;
    for b in &buckets {
        let s = status(&c, b).await.unwrap();
        first = first.min(s.last_pass_started_ms);
        last = last.max(s.last_pass_completed_ms);
    }
    let secs = (last.saturating_sub(first)) as f64 / 1000.0;

    // 2b and 4: a pass at the default rate limits over a bucket 90% eligible.
    let node = node.restart(defaults).await;
    let ep = node.endpoint();
    let c = client(&ep);
    set_rules(&c, "ninety").await;
    wait_started(&c, "ninety").await;
    let (p50, p99) = put_latencies(&ep, 16, 2000, "default").await;
    let still = status(&c, "ninety")
        .await
        .is_some_and(|s| s.phase != "idle");
    println!(
        "during a pass at the default limits: p50 {}  p99 {}  (pass still running at the end: {still})",
        ms(p50),
        ms(p99)
    );
    println!(
        "\n## 1. One pass over {n} keys in {BUCKETS} buckets, half eligible, rate limits lifted"
    );
    println!(
        "pass completed in {secs:.1} s: {evaluated} entries evaluated ({:.0}/s), {expired} expired through Raft ({:.0}/s)",
        evaluated as f64 / secs,
        expired as f64 / secs
    );
    let (evaluated, expired) = wait_passes(&c, &["ninety".to_string()]).await;
    let s = status(&c, "ninety").await.unwrap();
    let secs = s
        .last_pass_completed_ms
        .saturating_sub(s.last_pass_started_ms) as f64
        / 1000.0;
    println!(
        "at the default limits (20000 evaluations/s, 2000 actions/s), {small} keys 90% eligible: {secs:.1} s, {evaluated} evaluated ({:.0}/s), {expired} expired ({:.0}/s)",
        evaluated as f64 / secs,
        expired as f64 / secs
    );
    // The replica compacts the bucket's range once the pass completes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!("\n## 4. ListKeys after a pass expired 90% of a bucket ({small} keys)");
    let first = c
        .list_keys(ListKeysRequest {
            volume: "vol".into(),
            bucket: "ninety".into(),
            max_keys: 1000,
            ..Default::default()
        })
        .await
        .unwrap();
    let next = c
        .list_keys(ListKeysRequest {
            volume: "vol".into(),
            bucket: "ninety".into(),
            max_keys: 1000,
            continuation_token: first.next_continuation_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    for (what, r) in [("first page", &first), ("continuation", &next)] {
        let s = r.scan.unwrap_or_default();
        println!(
            "{what}: {} keys, {} seeks, {} nexts, {} tombstones skipped",
            r.keys.len(),
            s.seeks,
            s.nexts,
            s.tombstones_skipped
        );
    }

    // 3. Restarts at 10%, 50% and 90% of a pass (default limits) over the
    // interleaved bucket: what the restarted node's first page cost, and
    // what reading up to the cursor again would have.
    println!(
        "\n## 3. Resuming after a restart at 10%, 50% and 90% of a pass ({small} keys, half eligible, interleaved)"
    );
    println!(
        "| at | first page after the restart: seeks | entries at/before the cursor | positioning | rescan from the bucket start: live entries | tombstones | time |"
    );
    println!("|---|---|---|---|---|---|---|");
    c.put_bucket_lifecycle(PutBucketLifecycleRequest {
        volume: "vol".into(),
        bucket: "resume".into(),
        rules: vec![LifecycleRule {
            id: "small".into(),
            enabled: true,
            filter: Some(LifecycleFilter {
                predicate: Some(Predicate::ObjectSizeLessThan(2)),
            }),
            expiration: Some(LifecycleExpiration {
                days: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut node = node;
    let mut c = c;
    for pct in [10u64, 50, 90] {
        let reached = loop {
            let s = status(&c, "resume").await;
            if s.as_ref()
                .is_some_and(|s| s.phase != "objects" && s.pass > 0)
            {
                break false;
            }
            if s.is_some_and(|s| s.phase == "objects" && s.evaluated >= small as u64 * pct / 100) {
                break true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if !reached {
            println!(
                "| {pct}% | the pass was past its objects phase before this point | | | | | |"
            );
            break;
        }
        node = node.restart(defaults).await;
        c = client(&node.endpoint());
        let restarted = om::service::now_ms();
        let s = status(&c, "resume").await.unwrap();
        let cursor = keys::object_key("vol", "resume", &s.cursor);
        let (seeks, read, rescan, tombstones, positioning) = {
            let db = node.node.service.db().clone();
            resume_costs(&db, "resume", &cursor)
        };
        // The scanner's own figures for its first page after the restart.
        let s = loop {
            let s = status(&c, "resume").await.unwrap();
            if s.cursor_ms > restarted {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        println!(
            "| {pct}% ({} evaluated) | {} | {} | {} ({seeks} seek) | {read} | {tombstones} | {} |",
            s.evaluated,
            s.last_resume_seeks,
            s.last_resume_before_cursor,
            ms(positioning),
            ms(rescan)
        );
    }
}
