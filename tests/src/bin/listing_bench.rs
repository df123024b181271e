//! Listing benchmarks (BENCHMARKS.md, "Listings"): every arm measured side by
//! side in one run on this machine.
//!
//! 1. Seed HDDS-16250's experiment: a band of N consecutive point tombstones
//!    before a live continuation target, automatic compaction off, warm cache;
//!    positioning and reading a page with om's iterator (one seek) versus the
//!    old double positioning (seek to the prefix start, then to the marker).
//! 2. Delimiter listing of 1M keys under 1,000 common prefixes: native
//!    operations per listed prefix with the seek-past rule versus stepping.
//! 3. One key per prefix: the rule versus plain stepping (no regression).
//! 4. End to end over gRPC on loopback: a 1000-key ListKeys page and a
//!    continuation page, with and without a 100k-tombstone band before the marker.
//! 6. Versioned buckets (seed HBASE-29039 on a key's history): listing current
//!    keys whose histories hold 1 to 100,000 versions and delete markers, om's
//!    seek past a history at its N-th entry versus stepping through it; one
//!    version per key versus an unversioned listing; a bucket where 90% of the
//!    keys are behind delete markers; a ListObjectVersions continuation behind
//!    a 100k-tombstone band.
//!
//! `cargo run --release --bin listing_bench [-- --quick] [--tombstones-only]`

use std::time::{Duration, Instant};

use om::listing::{CurrentOnly, Item, ScanSpec, Start, scan_page};
use om::store::iter::DeferredSeekIter;
use om::store::keys::{KEYS_CF, TABLE_CFS};
use rocksdb::{DB, Options, WriteBatch};

fn open(dir: &std::path::Path) -> DB {
    let mut o = Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    o.set_disable_auto_compactions(true);
    DB::open_cf(&o, dir, TABLE_CFS).expect("open")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn write_batches(db: &DB, keys: impl Iterator<Item = (Vec<u8>, bool)>) {
    let cf = db.cf_handle(KEYS_CF).unwrap();
    let mut b = WriteBatch::default();
    for (k, live) in keys {
        if live {
            b.put_cf(cf, &k, b"v");
        } else {
            b.put_cf(cf, &k, b"v");
            b.delete_cf(cf, &k);
        }
        if b.len() >= 20_000 {
            db.write(std::mem::take(&mut b)).unwrap();
        }
    }
    db.write(b).unwrap();
}

fn read_page(it: &mut DeferredSeekIter<'_>, n: usize) -> usize {
    let mut got = 0;
    while got < n && it.current().is_some() {
        got += 1;
        it.advance();
    }
    got
}

/// Times `f` `reps` times after two warm-up runs; returns the median.
fn timed(reps: usize, mut f: impl FnMut()) -> Duration {
    let mut ts = Vec::with_capacity(reps);
    for r in 0..reps + 2 {
        let t = Instant::now();
        f();
        if r >= 2 {
            ts.push(t.elapsed());
        }
    }
    median(ts)
}

fn tombstone_arm(quick: bool) {
    println!("\n### 1. Continuation past a band of tombstones (medians of repeated runs)\n");
    println!("Positioning = create the iterator, position it at the marker, read the first entry;");
    println!("page = positioning plus reading 100 entries. om's runs are interleaved across");
    println!("the bands (one run of each band per round, 2001 rounds), so every band is timed");
    println!("under the same conditions; the baseline walks the band and runs 21–201 times.\n");
    println!(
        "| tombstones | om positioning (µs) | double positioning (µs) | ratio | om page (µs) | double page (µs) | ratio | tombstones skipped om / double |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---|");
    let bands: &[usize] = if quick {
        &[0, 10_000]
    } else {
        &[0, 10_000, 100_000, 500_000]
    };
    let marker = b"p/z00000".to_vec();
    let dbs: Vec<(usize, tempfile::TempDir, DB)> = bands
        .iter()
        .map(|&n| {
            let dir = tempfile::tempdir().unwrap();
            let db = open(dir.path());
            write_batches(
                &db,
                (0..n).map(|i| (format!("p/t{i:07}").into_bytes(), false)),
            );
            write_batches(
                &db,
                (0..200).map(|i| (format!("p/z{i:05}").into_bytes(), true)),
            );
            db.flush_cf(db.cf_handle(KEYS_CF).unwrap()).unwrap();
            (n, dir, db)
        })
        .collect();
    let run = |db: &DB, double: bool, page: usize| -> u64 {
        let mut it = DeferredSeekIter::with_prefix(db, KEYS_CF, b"p/").unwrap();
        if double {
            it.seek_to_first();
        }
        it.seek(&marker);
        assert_eq!(read_page(&mut it, page), page);
        it.stats().tombstones
    };
    // Positioning alone: the iterator is created before the timer starts.
    let seek_only = |db: &DB, double: bool| -> Duration {
        let mut it = DeferredSeekIter::with_prefix(db, KEYS_CF, b"p/").unwrap();
        let t = Instant::now();
        if double {
            it.seek_to_first();
        }
        it.seek(&marker);
        assert_eq!(read_page(&mut it, 1), 1);
        t.elapsed()
    };
    // om: interleaved rounds over all bands.
    let rounds = 2001;
    let mut om_pos: Vec<Vec<Duration>> = vec![Vec::new(); dbs.len()];
    let mut om_page: Vec<Vec<Duration>> = vec![Vec::new(); dbs.len()];
    let mut om_seek: Vec<Vec<Duration>> = vec![Vec::new(); dbs.len()];
    let mut om_skip = vec![0u64; dbs.len()];
    // The first rounds only warm up (caches, page tables, CPU clocks).
    let warmup = 2000;
    for r in 0..rounds + warmup {
        for (i, (_, _, db)) in dbs.iter().enumerate() {
            let t = Instant::now();
            om_skip[i] = run(db, false, 1);
            let pos = t.elapsed();
            let t = Instant::now();
            om_skip[i] = om_skip[i].max(run(db, false, 100));
            let page = t.elapsed();
            let seek = seek_only(db, false);
            if r >= warmup {
                om_pos[i].push(pos);
                om_page[i].push(page);
                om_seek[i].push(seek);
            }
        }
    }
    let mut seek_rows = Vec::new();
    for (i, (n, _, db)) in dbs.iter().enumerate() {
        let reps = if *n >= 100_000 { 21 } else { 201 };
        let mut base_skip = 0;
        let bp = timed(reps, || base_skip = run(db, true, 1));
        let bg = timed(reps, || base_skip = run(db, true, 100));
        let bs = median((0..reps).map(|_| seek_only(db, true)).collect());
        let op = median(om_pos[i].clone());
        let og = median(om_page[i].clone());
        let os = median(om_seek[i].clone());
        println!(
            "| {n} | {:.2} | {:.1} | {:.0}× | {:.1} | {:.1} | {:.0}× | {} / {base_skip} |",
            us(op),
            us(bp),
            us(bp) / us(op),
            us(og),
            us(bg),
            us(bg) / us(og),
            om_skip[i]
        );
        seek_rows.push(format!(
            "| {n} | {:.2} | {:.1} | {:.0}× |",
            us(os),
            us(bs),
            us(bs) / us(os)
        ));
    }
    println!("\nThe same, positioning only (iterator created before the timer starts):\n");
    println!("| tombstones | om seek + first entry (µs) | double positioning (µs) | ratio |");
    println!("|---:|---:|---:|---:|");
    for r in seek_rows {
        println!("{r}");
    }
}

fn list_all_prefixes(db: &DB, seek_after: usize, page: usize) -> (usize, u64, u64, Duration) {
    let t = Instant::now();
    let (mut n, mut seeks, mut nexts) = (0, 0, 0);
    let mut start = Start::Beginning;
    loop {
        let p = scan_page(
            db,
            &ScanSpec {
                table: KEYS_CF,
                parent: b"",
                prefix: b"",
                delimiter: b"/",
                start: start.clone(),
                max: page,
                seek_after,
                terminator: None,
                current_only: None,
                at: None,
            },
        )
        .unwrap();
        n += p
            .items
            .iter()
            .filter(|i| matches!(i, Item::CommonPrefix(_)))
            .count();
        seeks += p.stats.seeks;
        nexts += p.stats.nexts;
        match p.resume {
            Some(r) => start = Start::At(r),
            None => break,
        }
    }
    (n, seeks, nexts, t.elapsed())
}

fn delimiter_arms(quick: bool) {
    let (prefixes, per) = if quick { (100, 1000) } else { (1000, 1000) };
    println!(
        "\n### 2. Delimiter listing: {} keys under {prefixes} common prefixes\n",
        prefixes * per
    );
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    write_batches(
        &db,
        (0..prefixes)
            .flat_map(|p| (0..per).map(move |i| (format!("d{p:04}/{i:04}").into_bytes(), true))),
    );
    db.flush_cf(db.cf_handle(KEYS_CF).unwrap()).unwrap();
    println!("| strategy | prefixes listed | seeks | nexts | native ops per prefix | time (ms) |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut times = Vec::new();
    for (name, n) in [
        ("seek past at the 3rd key (om)", 3),
        ("step every key", usize::MAX),
    ] {
        let (cnt, s, x, t) = list_all_prefixes(&db, n, 1000);
        assert_eq!(cnt, prefixes);
        times.push(t);
        println!(
            "| {name} | {cnt} | {s} | {x} | {:.2} | {:.1} |",
            (s + x) as f64 / cnt as f64,
            t.as_secs_f64() * 1e3
        );
    }
    println!(
        "\nstepping / om time: {:.0}×",
        times[1].as_secs_f64() / times[0].as_secs_f64()
    );

    let singles = if quick { 10_000 } else { 100_000 };
    println!(
        "\n### 3. One key per prefix: {singles} prefixes of one key each (median of 11 interleaved runs)\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    write_batches(
        &db,
        (0..singles).map(|i| (format!("o{i:06}/x").into_bytes(), true)),
    );
    db.flush_cf(db.cf_handle(KEYS_CF).unwrap()).unwrap();
    println!("| strategy | seeks | nexts | time (ms) |");
    println!("|---|---:|---:|---:|");
    // Interleaved runs, so neither strategy gets the warmer cache.
    let strategies = [("om rule (N = 3)", 3), ("plain stepping", usize::MAX)];
    let mut runs: Vec<Vec<Duration>> = vec![Vec::new(), Vec::new()];
    let mut ops = [(0, 0); 2];
    for _ in 0..11 {
        for (i, (_, n)) in strategies.iter().enumerate() {
            let (cnt, s, x, t) = list_all_prefixes(&db, *n, 1000);
            assert_eq!(cnt, singles);
            runs[i].push(t);
            ops[i] = (s, x);
        }
    }
    let med: Vec<Duration> = runs.into_iter().map(median).collect();
    for (i, (name, _)) in strategies.iter().enumerate() {
        println!(
            "| {name} | {} | {} | {:.1} |",
            ops[i].0,
            ops[i].1,
            med[i].as_secs_f64() * 1e3
        );
    }
    println!(
        "\nom / stepping time: {:.3}",
        med[0].as_secs_f64() / med[1].as_secs_f64()
    );
}

/// RocksDB 11.8's `min_tombstones_for_range_conversion`: an iterator that steps
/// over that many consecutive tombstones writes one range tombstone over them,
/// so later scans through the same band skip it at once. Measured on the one
/// scan om cannot avoid: a first page whose range starts in front of the band.
fn range_conversion_arm(quick: bool) {
    let n = if quick { 10_000 } else { 100_000 };
    println!("\n### 5. First page across {n} tombstones: `min_tombstones_for_range_conversion`\n");
    println!(
        "| setting | 1st scan (µs) | later scans, median (µs) | tombstones skipped by later scans |"
    );
    println!("|---|---:|---:|---:|");
    for setting in ["0", "1000"] {
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        let cf = db.cf_handle(KEYS_CF).unwrap();
        db.set_options_cf(cf, &[("min_tombstones_for_range_conversion", setting)])
            .unwrap();
        write_batches(
            &db,
            (0..n).map(|i| (format!("p/a{i:07}").into_bytes(), false)),
        );
        write_batches(
            &db,
            (0..200).map(|i| (format!("p/z{i:05}").into_bytes(), true)),
        );
        db.flush_cf(cf).unwrap();
        let mut skipped = 0;
        let mut scan = || {
            let mut it = DeferredSeekIter::with_prefix(&db, KEYS_CF, b"p/").unwrap();
            it.seek_to_first();
            assert_eq!(read_page(&mut it, 100), 100);
            skipped = it.stats().tombstones;
        };
        let t = Instant::now();
        scan();
        let first = t.elapsed();
        let later = timed(21, &mut scan);
        println!(
            "| {setting} | {:.0} | {:.1} | {skipped} |",
            us(first),
            us(later)
        );
    }
}

async fn grpc_arm(quick: bool) {
    use om_client::v1::{BucketLayout, ListKeysRequest};
    println!(
        "\n### 4. End to end over gRPC (loopback, single node): ListKeys pages of 1000 keys\n"
    );
    let node = om_tests::TestNode::start().await;
    let c = std::sync::Arc::new(node.client());
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let band = if quick { 10_000 } else { 100_000 };
    // Live keys a*, the band b* (put then deleted later), live keys c*.
    let put_many = |names: Vec<String>| {
        let c = c.clone();
        async move {
            let mut tasks = Vec::new();
            for chunk in names.chunks(names.len().div_ceil(64).max(1)) {
                let (c, chunk) = (c.clone(), chunk.to_vec());
                tasks.push(tokio::spawn(async move {
                    for n in chunk {
                        c.put_key("vol1", "bkt1", &n, 1).await.unwrap();
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    put_many((0..2000).map(|i| format!("a{i:06}")).collect()).await;
    put_many((0..2000).map(|i| format!("c{i:06}")).collect()).await;
    let page = |start_after: &str| ListKeysRequest {
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        start_after: start_after.into(),
        max_keys: 1000,
        ..Default::default()
    };
    let measure = |start_after: &'static str| {
        let c = c.clone();
        async move {
            let mut ts = Vec::new();
            let mut skipped = 0;
            for r in 0..105 {
                let t = Instant::now();
                let resp = c.list_keys(page(start_after)).await.unwrap();
                if r >= 5 {
                    ts.push(t.elapsed());
                }
                assert_eq!(resp.keys.len(), 1000);
                skipped = resp.scan.unwrap().tombstones_skipped;
            }
            (pct(ts.clone(), 0.5), pct(ts, 0.99), skipped)
        }
    };
    println!("| page | band before marker | p50 (ms) | p99 (ms) | tombstones skipped |");
    println!("|---|---|---:|---:|---:|");
    let (p50, p99, s) = measure("").await;
    println!(
        "| first page | none | {:.2} | {:.2} | {s} |",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    let (p50, p99, s) = measure("a001999").await;
    println!(
        "| continuation | none | {:.2} | {:.2} | {s} |",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    let names: Vec<String> = (0..band).map(|i| format!("b{i:06}")).collect();
    put_many(names.clone()).await;
    let c2 = c.clone();
    let mut tasks = Vec::new();
    for chunk in names.chunks(names.len().div_ceil(64)) {
        let (c, chunk) = (c2.clone(), chunk.to_vec());
        tasks.push(tokio::spawn(async move {
            for n in chunk {
                c.delete_key("vol1", "bkt1", &n).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (p50, p99, s) = measure("c000999").await;
    println!(
        "| continuation | {band} tombstones | {:.2} | {:.2} | {s} |",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    node.node.shutdown().await;
}

/// A stored version: a 1-block object or a delete marker, as om writes them.
fn version_value(marker: bool, version: u64) -> Vec<u8> {
    use prost::Message;
    let rec = om_proto::store::KeyRecord {
        format: 1,
        size: if marker { 0 } else { 4096 },
        blocks: if marker {
            Vec::new()
        } else {
            vec![om_proto::store::BlockRecord {
                block_id: version,
                offset: 0,
                length: 4096,
            }]
        },
        etag: if marker {
            String::new()
        } else {
            "0123456789abcdef0123456789abcdef".into()
        },
        creation_time_ms: 1_700_000_000_000,
        modification_time_ms: 1_700_000_000_000,
        object_id: version,
        update_id: version >> 16,
        version,
        versioned: true,
        delete_marker: marker,
        ..Default::default()
    };
    rec.encode_to_vec()
}

/// Writes `keys` keys named `{tag}{i:08}`, each with `history` entries: the
/// current one (a delete marker when `hidden(i)`) and `history - 1`
/// noncurrent ones alternating versions and delete markers.
fn write_histories(
    db: &DB,
    tag: &str,
    keys: usize,
    history: usize,
    hidden: impl Fn(usize) -> bool,
) {
    let cf = db.cf_handle(KEYS_CF).unwrap();
    let mut b = WriteBatch::default();
    let mut stamp = 1u64 << 40;
    for i in 0..keys {
        let name = format!("{tag}{i:08}");
        for h in 0..history {
            stamp -= 1;
            let (key, marker) = if h == 0 {
                (name.clone().into_bytes(), hidden(i))
            } else {
                let mut k = name.clone().into_bytes();
                k.push(0);
                k.extend_from_slice(&(!stamp).to_be_bytes());
                (k, h % 2 == 0)
            };
            b.put_cf(cf, key, version_value(marker, stamp));
            if b.len() >= 20_000 {
                db.write(std::mem::take(&mut b)).unwrap();
            }
        }
    }
    db.write(b).unwrap();
    db.flush_cf(cf).unwrap();
}

/// Lists every current key under `prefix` in pages of 1000: (keys listed,
/// seeks, nexts, time). `seek_after` N = om's rule; `usize::MAX` steps
/// through every history; `versioned` false lists as an unversioned bucket.
fn list_current(
    db: &DB,
    prefix: &[u8],
    seek_after: usize,
    versioned: bool,
) -> (usize, u64, u64, Duration) {
    let t = Instant::now();
    let (mut n, mut seeks, mut nexts) = (0, 0, 0);
    let mut start = Start::Beginning;
    loop {
        let p = scan_page(
            db,
            &ScanSpec {
                table: KEYS_CF,
                parent: b"",
                prefix,
                delimiter: b"",
                start: start.clone(),
                max: 1000,
                seek_after,
                terminator: None,
                current_only: versioned.then_some(CurrentOnly {
                    hidden: om::service::versions::is_delete_marker,
                }),
                at: None,
            },
        )
        .unwrap();
        n += p.items.len();
        seeks += p.stats.seeks;
        nexts += p.stats.nexts;
        match p.resume {
            Some(r) => start = Start::At(r),
            None => break,
        }
    }
    (n, seeks, nexts, t.elapsed())
}

fn versioning_arms(quick: bool) {
    let budget: usize = if quick { 100_000 } else { 1_000_000 };
    println!("\n### 6. Versioned buckets: listing current keys past their history\n");
    println!(
        "Each key: a live current version and a history of noncurrent versions and delete markers;"
    );
    println!(
        "about {budget} entries per row (at least 10 keys). N = 3. Times are medians of 5 interleaved runs.\n"
    );
    println!(
        "| entries per key | keys | om ops per key | stepping ops per key | om µs per key | stepping µs per key | stepping / om time |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for history in [1usize, 3, 10, 1000, 100_000] {
        let keys = (budget / history).clamp(10, 100_000);
        let dir = tempfile::tempdir().unwrap();
        let db = open(dir.path());
        write_histories(&db, "k", keys, history, |_| false);
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(), Vec::new()];
        let mut ops = [0u64; 2];
        let reps = 5;
        for _ in 0..reps {
            for (i, n) in [3usize, usize::MAX].into_iter().enumerate() {
                let (cnt, s, x, t) = list_current(&db, b"k", n, true);
                assert_eq!(cnt, keys);
                times[i].push(t);
                ops[i] = s + x;
            }
        }
        let med: Vec<Duration> = times.into_iter().map(median).collect();
        let per = |d: Duration| us(d) / keys as f64;
        println!(
            "| {history} | {keys} | {:.2} | {:.2} | {:.3} | {:.3} | {:.1}× |",
            ops[0] as f64 / keys as f64,
            ops[1] as f64 / keys as f64,
            per(med[0]),
            per(med[1]),
            us(med[1]) / us(med[0])
        );
    }

    let n = if quick { 100_000 } else { 1_000_000 };
    println!("\n{n} keys of one version each: a versioned listing (om) versus an unversioned one");
    println!("over the same keys (plain stepping; median of 11 interleaved runs)\n");
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    write_histories(&db, "k", n, 1, |_| false);
    let mut runs: Vec<Vec<Duration>> = vec![Vec::new(), Vec::new()];
    let mut ops = [(0, 0); 2];
    for _ in 0..11 {
        for (i, versioned) in [true, false].into_iter().enumerate() {
            let (cnt, s, x, t) = list_current(&db, b"k", 3, versioned);
            assert_eq!(cnt, n);
            runs[i].push(t);
            ops[i] = (s, x);
        }
    }
    let med: Vec<Duration> = runs.into_iter().map(median).collect();
    println!("| listing | seeks | nexts | time (ms) |");
    println!("|---|---:|---:|---:|");
    for (i, name) in ["versioned (om rule)", "unversioned (plain stepping)"]
        .iter()
        .enumerate()
    {
        println!(
            "| {name} | {} | {} | {:.1} |",
            ops[i].0,
            ops[i].1,
            med[i].as_secs_f64() * 1e3
        );
    }
    println!(
        "\nversioned / unversioned time: {:.3}",
        med[0].as_secs_f64() / med[1].as_secs_f64()
    );

    println!("\n{n} keys, 90% of them behind a delete marker (marker + 1 noncurrent version;");
    println!("live keys have 1 or 2 versions)\n");
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    // Hidden keys: marker + one version (2 entries); live keys: history 2.
    write_histories(&db, "h", n, 2, |i| i % 10 != 0);
    println!(
        "| strategy | live keys listed | seeks | nexts | native ops per listed key | time (ms) |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let strategies = [("om (N = 3)", 3usize), ("step every entry", usize::MAX)];
    let mut runs: Vec<Vec<Duration>> = vec![Vec::new(), Vec::new()];
    let mut ops = [(0, 0); 2];
    for _ in 0..5 {
        for (i, (_, sa)) in strategies.iter().enumerate() {
            let (cnt, s, x, t) = list_current(&db, b"h", *sa, true);
            assert_eq!(cnt, n / 10);
            runs[i].push(t);
            ops[i] = (s, x);
        }
    }
    for (i, (name, _)) in strategies.iter().enumerate() {
        let (s, x) = ops[i];
        println!(
            "| {name} | {} | {s} | {x} | {:.2} | {:.1} |",
            n / 10,
            (s + x) as f64 / (n / 10) as f64,
            median(runs[i].clone()).as_secs_f64() * 1e3
        );
    }

    let band = if quick { 10_000 } else { 100_000 };
    println!(
        "\nListObjectVersions continuation behind {band} removed versions (tombstones) of key \"a\"\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    write_histories(&db, "a", 1, band, |_| false);
    write_histories(&db, "b", 1, 200, |_| false);
    // Remove every version of a00000000: a band of point tombstones.
    let cf = db.cf_handle(KEYS_CF).unwrap();
    let mut it = DeferredSeekIter::with_prefix(&db, KEYS_CF, b"a").unwrap();
    it.seek(b"a");
    let mut batch = WriteBatch::default();
    while let Some((k, _)) = it.current() {
        batch.delete_cf(cf, k);
        it.advance();
    }
    drop(it);
    db.write(batch).unwrap();
    db.flush_cf(cf).unwrap();
    // S3's key marker "a00000000": om resumes at `a00000000 \x01`.
    let resume = b"a00000000\x01".to_vec();
    let page = |start: Start| {
        scan_page(
            &db,
            &ScanSpec {
                table: KEYS_CF,
                parent: b"",
                prefix: b"",
                delimiter: b"",
                start,
                max: 100,
                seek_after: 3,
                terminator: Some(0),
                current_only: None,
                at: None,
            },
        )
        .unwrap()
    };
    let om = page(Start::At(resume.clone()));
    assert_eq!(om.items.len(), 100);
    let t_om = timed(101, || {
        page(Start::At(resume.clone()));
    });
    // The pre-HDDS-16250 way: position at the listing's start, then seek.
    let double = || {
        let mut it = DeferredSeekIter::new(&db, KEYS_CF, None, Some(b"c".to_vec())).unwrap();
        it.seek_to_first();
        it.seek(&resume);
        assert_eq!(read_page(&mut it, 100), 100);
        it.stats()
    };
    let ds = double();
    let t_double = timed(11, || {
        double();
    });
    println!("| positioning | seeks | tombstones skipped | page of 100 (µs) |");
    println!("|---|---:|---:|---:|");
    println!(
        "| om (one seek to the marker) | {} | {} | {:.1} |",
        om.stats.seeks,
        om.stats.tombstones,
        us(t_om)
    );
    println!(
        "| start, then marker | {} | {} | {:.1} |",
        ds.seeks,
        ds.tombstones,
        us(t_double)
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    println!(
        "listing benchmarks, {} cores, {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if quick { "quick sizes" } else { "full sizes" }
    );
    tombstone_arm(quick);
    if std::env::args().any(|a| a == "--tombstones-only") {
        return;
    }
    if std::env::args().any(|a| a == "--versions-only") {
        versioning_arms(quick);
        return;
    }
    delimiter_arms(quick);
    range_conversion_arm(quick);
    versioning_arms(quick);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(grpc_arm(quick));
}
