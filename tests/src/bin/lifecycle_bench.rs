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
//! 3. Resume cost at 10%, 50% and 90% of a bucket the pass went through:
//!    native seeks and entries read at or before the cursor when a page
//!    resumes at the replicated cursor, against reading from the bucket's
//!    start up to the cursor (what a scanner without a replicated cursor
//!    pays), with the time of each.
//! 4. After the pass expired 90% of a bucket: ListKeys first and
//!    continuation pages (native seeks, tombstones skipped).
//!
//! `cargo run --release -p om-tests --bin lifecycle_bench [-- --keys N]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use om::lifecycle::scan::{self, PageLimits};
use om::store::iter::DeferredSeekIter;
use om::store::keys;
use om::store::table::{self, BucketTable, LifecycleTable};
use om_client::v1::lifecycle_filter::Predicate;
use om_client::v1::*;
use om_client::{ClientOptions, OmClient};
use om_proto::store::LifecycleScanRecord;
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
                c.put_key("vol", "fg", &format!("{round}/{t}/{i}"), 1)
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = arg("--keys", 1_000_000);
    let unlimited = |a: &mut om::config::Args| {
        a.lifecycle_day_ms = Some(1);
        a.lifecycle_interval_ms = Some(3_600_000);
        a.lifecycle_evaluations_per_s = Some(1_000_000_000);
        a.lifecycle_actions_per_s = Some(1_000_000_000);
    };
    let node = TestNode::start_with(unlimited).await;
    let ep = node.endpoint();
    let c = client(&ep);
    c.create_volume("vol", "").await.unwrap();
    let buckets: Vec<String> = (0..BUCKETS).map(|b| format!("b{b}")).collect();
    for b in buckets.iter().map(String::as_str).chain(["fg", "ninety"]) {
        c.create_bucket("vol", b, BucketLayout::ObjectStore)
            .await
            .unwrap();
    }
    let items: Vec<(String, String)> = (0..n)
        .map(|i| {
            let j = i / BUCKETS;
            let p = if j % 2 == 0 { "exp" } else { "keep" };
            (buckets[i % BUCKETS].clone(), format!("{p}/{j:08}"))
        })
        .collect();
    let rate = load(&ep, items, 64).await;
    println!("loaded {n} keys in {BUCKETS} buckets at {rate:.0} PutKey/s");
    let ninety = n / 10;
    let items: Vec<(String, String)> = (0..ninety)
        .map(|i| {
            let p = if i % 10 == 0 { "keep" } else { "exp" };
            ("ninety".to_string(), format!("{p}/{i:08}"))
        })
        .collect();
    load(&ep, items, 64).await;
    println!("loaded {ninety} keys into the 90%-eligible bucket");

    // 2a. PutKey latency with no pass running.
    let (p50, p99) = put_latencies(&ep, 16, 2000, "idle").await;
    println!("\n## 2. Foreground PutKey, 16 clients");
    println!(
        "no pass running:                  p50 {}  p99 {}",
        ms(p50),
        ms(p99)
    );

    // 1. One unthrottled pass over every bucket (latency measured meanwhile).
    let started = Instant::now();
    for b in &buckets {
        set_rules(&c, b).await;
    }
    let (p50, p99) = put_latencies(&ep, 16, 2000, "unthrottled").await;
    println!(
        "during an unthrottled pass:       p50 {}  p99 {}",
        ms(p50),
        ms(p99)
    );
    let (evaluated, expired) = wait_passes(&c, &buckets).await;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "\n## 1. One pass over {n} keys in {BUCKETS} buckets, half eligible, rate limits lifted"
    );
    println!(
        "pass completed in {secs:.1} s: {evaluated} entries evaluated ({:.0}/s), {expired} expired through Raft ({:.0}/s)",
        evaluated as f64 / secs,
        expired as f64 / secs
    );

    // 3. Resume cost at 10/50/90% of bucket b0, on the state the pass left.
    println!(
        "\n## 3. Resuming a page in bucket b0 (per bucket {} keys, half expired behind the cursor)",
        n / BUCKETS
    );
    println!(
        "| position | resume: seeks | resume: entries at/before cursor | resume time | rescan: entries read | rescan: tombstones | rescan time |"
    );
    println!("|---|---|---|---|---|---|---|");
    let db = node.node.service.db().clone();
    let bk = keys::bucket_key("vol", "b0");
    let bucket = table::get::<BucketTable>(&db, &bk).unwrap().unwrap();
    let config = table::get::<LifecycleTable>(&db, &bk).unwrap().unwrap();
    let per_bucket = n / BUCKETS;
    for pct in [10, 50, 90] {
        // The cursor at pct% of the bucket's original key space (keep/
        // keys sort after exp/ keys: pct% of the way through both runs).
        let i = per_bucket * pct / 100;
        let name = if i < per_bucket / 2 {
            format!("exp/{:08}", 2 * i)
        } else {
            format!("keep/{:08}", 2 * (i - per_bucket / 2) + 1)
        };
        let cursor = keys::object_key("vol", "b0", &name);
        let stored = LifecycleScanRecord {
            bucket_object_id: bucket.object_id,
            config_update_id: config.update_id,
            pass: 2,
            phase: scan::PHASE_OBJECTS,
            cursor: cursor.clone(),
            ..Default::default()
        };
        let limits = PageLimits {
            evaluations: 1000,
            items: 1000,
            day_ms: 1,
            interval_ms: 0,
        };
        let t0 = Instant::now();
        let page = scan::page(&db, &bucket, &config, Some(&stored), u64::MAX / 2, limits)
            .unwrap()
            .unwrap();
        let resume = t0.elapsed();
        // Without a cursor: read from the bucket's start up to it.
        let t0 = Instant::now();
        let prefix = keys::object_prefix("vol", "b0");
        let mut it = DeferredSeekIter::new(
            &db,
            keys::KEYS_CF,
            Some(prefix),
            Some(keys::key_successor(&cursor)),
        )
        .unwrap();
        let mut read = 0u64;
        while it.current().is_some() {
            read += 1;
            it.advance();
        }
        let rescan = t0.elapsed();
        println!(
            "| {pct}% | {} | {} | {} | {read} | {} | {} |",
            page.resume_seeks,
            page.resume_before_cursor,
            ms(resume),
            it.stats().tombstones,
            ms(rescan)
        );
    }

    // 2b and 4: a pass at the default rate limits over a bucket 90% eligible.
    let node = node
        .restart(|a| {
            a.lifecycle_day_ms = Some(1);
            a.lifecycle_interval_ms = Some(3_600_000);
        })
        .await;
    let ep = node.endpoint();
    let c = client(&ep);
    set_rules(&c, "ninety").await;
    let started = Instant::now();
    let (p50, p99) = put_latencies(&ep, 16, 2000, "default").await;
    let during = status(&c, "ninety").await.map_or(0, |s| s.evaluated);
    println!(
        "\n## 2 (continued)\nduring a pass at the default limits: p50 {}  p99 {}  ({during} entries evaluated meanwhile)",
        ms(p50),
        ms(p99)
    );
    let (evaluated, expired) = wait_passes(&c, &["ninety".to_string()]).await;
    let secs = started.elapsed().as_secs_f64();
    println!(
        "default-limit pass over {ninety} keys: {secs:.1} s, {evaluated} evaluated ({:.0}/s), {expired} expired ({:.0}/s)",
        evaluated as f64 / secs,
        expired as f64 / secs
    );

    println!("\n## 4. ListKeys after a pass expired 90% of a bucket ({ninety} keys)");
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
        let s = r.scan.clone().unwrap_or_default();
        println!(
            "{what}: {} keys, {} seeks, {} nexts, {} tombstones skipped",
            r.keys.len(),
            s.seeks,
            s.nexts,
            s.tombstones_skipped
        );
    }
}
