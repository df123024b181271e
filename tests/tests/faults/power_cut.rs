//! Power cuts: `om` processes on `lazyfs`, a filesystem that holds what is
//! written but not fsynced in memory and loses it (or, scrambled, writes
//! back an arbitrary part of it, pages torn) when the power is cut. A kill
//! -9 alone keeps the page cache; these runs do not. After each cut the
//! processes start again on what the disk kept.
//!
//! - One node, a write stream: every acknowledged key is there after the
//!   cut, and the listing agrees with the lookups. On a disk whose fsync
//!   lies, the same check finds acknowledged writes lost: it can fail.
//! - Three members under the register load, cuts drawn from a seed: one
//!   member (the leader or a follower) or all three at once, losing or
//!   scrambling what was unsynced. The history must be linearizable (so no
//!   acknowledged write was lost, no vote given twice split the cluster),
//!   and the replicas identical, digests and record by record.
//!
//! Mounting needs `/dev/fuse` and root; without them each test says
//! "skipped" and why. `OM_POWER_SEEDS=1,2,3` picks the three-member runs
//! (default `1`) and `OM_POWER_SECONDS` how long each runs (default 20).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use om_tests::history::{Recorder, check_linearizable};
use om_tests::lazyfs::{Cut, LazyFs, mounts};
use om_tests::writes::{Acked, WriteStream, check_acked, single_node};
use om_tests::{OmProcess, claimed_leader, cluster_addrs};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const READY: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_loses_no_acknowledged_write_on_one_node() {
    let Some(fs) = mounts(1) else { return };
    let dir = fs[0].path().join("om");
    std::fs::create_dir(&dir).unwrap();
    let mut om = single_node(&dir).await;
    let acked = Acked::default();
    for (round, cut) in [Cut::Lose, Cut::Scramble(7), Cut::Scramble(8)]
        .into_iter()
        .enumerate()
    {
        let before = acked.lock().unwrap().len();
        let stream = WriteStream::start(&om.grpc, &format!("r{round}/"), 4, &acked);
        stream.wait_acked(before + 200).await;
        om.kill9();
        let stats = fs[0].cut(cut);
        eprintln!("round {round}: {cut:?}: {stats:?}");
        stream.join().await;
        om.restart();
        om.wait_ready(READY).await;
    }
    let stats = fs[0].stats();
    assert!(
        stats.pages_lost > 0 && stats.syncs > 0,
        "the cuts lost nothing: the test proved nothing ({stats:?})"
    );
    check_acked(&om.client(), &acked, "power cuts").await;
}

/// The check can fail: on a disk whose fsync lies, a power cut loses
/// acknowledged writes (or leaves a store that does not start), and the
/// lookups of the test above find it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_lies_about_fsync_loses_acknowledged_writes() {
    let Some(fs) = mounts(1) else { return };
    let dir = fs[0].path().join("om");
    std::fs::create_dir(&dir).unwrap();
    let mut om = single_node(&dir).await;
    let c = om.client();
    fs[0].lie_about_fsync(true);
    let mut acked = Vec::new();
    for i in 0..200u64 {
        let key = format!("k{i:04}");
        c.put_key("vol1", "bkt1", &key, i).await.unwrap();
        acked.push(key);
    }
    om.kill9();
    let stats = fs[0].cut(Cut::Lose);
    fs[0].lie_about_fsync(false);
    om.restart();
    let up = tokio::time::timeout(Duration::from_secs(30), om.wait_ready(READY)).await;
    let lost = match up {
        Err(_) => {
            eprintln!("the store did not start again after the cut");
            acked.len()
        }
        Ok(()) => {
            let c = om.client();
            let mut lost = 0;
            for key in &acked {
                if c.lookup_key("vol1", "bkt1", key).await.is_err() {
                    lost += 1;
                }
            }
            lost
        }
    };
    eprintln!(
        "a lying fsync: {lost} of {} acknowledged writes lost ({stats:?})",
        acked.len()
    );
    assert!(
        lost > 0,
        "a lying disk lost nothing: the cut is not a power cut"
    );
}

/// A cluster of one member on each of `fs`: its data directories, its
/// processes and their gRPC addresses, by id - 1.
pub(crate) fn members_on(fs: &[LazyFs]) -> (Vec<PathBuf>, Vec<OmProcess>, Vec<String>) {
    members_with(fs, &[])
}

/// `members_on` with more flags for every member.
pub(crate) fn members_with(
    fs: &[LazyFs],
    flags: &[&str],
) -> (Vec<PathBuf>, Vec<OmProcess>, Vec<String>) {
    let dirs: Vec<PathBuf> = fs.iter().map(|f| f.path().join("om")).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let addrs = cluster_addrs(fs.len() as u64);
    let procs = addrs
        .iter()
        .zip(&dirs)
        .map(|(a, d)| OmProcess::spawn_member_args(d, a, &addrs, flags))
        .collect();
    let eps = addrs.iter().map(|a| a.grpc.clone()).collect();
    (dirs, procs, eps)
}

async fn run(seed: u64, seconds: u64) {
    let Some(fs) = mounts(3) else { return };
    let mut rng = StdRng::seed_from_u64(seed);
    let (dirs, mut procs, eps) = members_on(&fs);
    let c = om_tests::replicas::register_bucket(&eps).await;

    let rec = Recorder::start(&eps, 6, true);
    let started = Instant::now();
    let mut cuts = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2000))).await;
        let victims: Vec<usize> = match rng.random_range(0..3) {
            0 => (0..3).collect(),
            1 => {
                let running: Vec<String> = procs.iter().map(|p| p.grpc.clone()).collect();
                match claimed_leader(&running).await {
                    Some(id) => vec![(id - 1) as usize],
                    None => continue,
                }
            }
            _ => vec![rng.random_range(0..3)],
        };
        let how: Vec<Cut> = victims
            .iter()
            .map(|_| {
                if rng.random_bool(0.5) {
                    Cut::Lose
                } else {
                    Cut::Scramble(rng.random())
                }
            })
            .collect();
        for v in &victims {
            procs[*v].kill9();
        }
        for (v, h) in victims.iter().zip(&how) {
            let stats = fs[*v].cut(*h);
            eprintln!(
                "seed {seed} at {:?}: member {} {h:?}: {stats:?}",
                started.elapsed(),
                v + 1
            );
        }
        cuts += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..1500))).await;
        for v in &victims {
            procs[*v].restart();
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let end = rec.now();
    let history = rec.finish().await;
    om_tests::replicas::wait_settled(&c, &procs).await;
    let known = history.iter().filter(|o| o.output.is_some()).count();
    eprintln!(
        "seed {seed}: {cuts} power cuts, {} operations, {known} with known outcomes",
        history.len()
    );
    assert!(known >= 100, "too few completed operations ({known})");
    assert!(
        fs.iter().any(|f| f.stats().pages_lost > 0),
        "the cuts lost nothing: the run proved nothing"
    );
    check_linearizable(&history, end);
    om_tests::replicas::assert_identical(&c, &mut procs, &dirs, &format!("power seed {seed}"))
        .await;
    // Only a seed that passed gets here: the line `scripts/soak.sh` sums.
    eprintln!(
        "soak: run=power_cut seed={seed} seconds={seconds} operations={known} faults={cuts} anomalies=0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_of_one_member_or_all_keep_replicas_identical_and_histories_linearizable() {
    let seeds: Vec<u64> = std::env::var("OM_POWER_SEEDS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1]);
    let seconds: u64 = std::env::var("OM_POWER_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    for seed in seeds {
        run(seed, seconds).await;
    }
}
