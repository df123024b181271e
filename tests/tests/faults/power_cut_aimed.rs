//! Power cuts aimed at the moments a store is rewritten in bulk rather
//! than appended to, on `lazyfs` (see `power_cut`):
//!
//! - a snapshot install: a follower brought back behind the leader's
//!   purged log receives a snapshot, and the power is cut the moment its
//!   staging file appears, several times over; started again it still
//!   catches up;
//! - a backup: the leader's power is cut while `omctl backup create`
//!   copies from it; the cut-short backup is never listed as complete, the
//!   next one is, and verifies;
//! - a compaction: a follower's power is cut at a write of the
//!   compaction's output SSTs, or at the MANIFEST write that would install
//!   them (`LazyFs::freeze_when` stops the disk at that very write).
//!
//! After each, every acknowledged write is there and the replicas are
//! identical, record by record. Needs `/dev/fuse` and root, else
//! "skipped".

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use om_tests::lazyfs::{Cut, mounts};
use om_tests::replicas::{assert_identical, register_bucket, wait_settled};
use om_tests::writes::{Acked, WriteStream, check_acked};
use om_tests::{claimed_leader, omctl, wait_for};

/// Snapshots often and little log kept behind them, so a follower that
/// was down needs a snapshot.
const FLAGS: &[&str] = &["--snapshot-every", "100", "--snapshot-keep-logs", "10"];

/// The staging files of snapshots being received or installed in
/// `snapshots` (a process's own are named with its pid).
fn staging(snapshots: &Path) -> BTreeSet<String> {
    std::fs::read_dir(snapshots)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("tmp-incoming") || n.starts_with("tmp-install"))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `dir` holds any file, at any depth.
fn holds_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.path().is_file() || holds_files(&e.path()))
    })
}

async fn more_acked(stream: &WriteStream, acked: &Acked, n: usize) {
    let have = acked.lock().unwrap().len();
    stream.wait_acked(have + n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_during_a_snapshot_install_or_a_backup_lose_nothing() {
    let Some(fs) = mounts(3) else { return };
    let (dirs, mut procs, eps) = super::power_cut::members_with(&fs, FLAGS);
    let c = register_bucket(&eps).await;
    let leader = claimed_leader(&eps).await.unwrap() as usize - 1;
    let acked = Acked::default();
    let stream = WriteStream::start(&eps[leader], "a/", 4, &acked);
    more_acked(&stream, &acked, 1000).await;

    // Cuts during snapshot installs on a follower.
    let f = (0..3).find(|i| *i != leader).unwrap();
    let snapshots = dirs[f].join("snapshots");
    let mut during = 0;
    for round in 0..20u64 {
        procs[f].kill9();
        fs[f].cut(Cut::Lose);
        // The leader purges its log past what the follower holds.
        more_acked(&stream, &acked, 600).await;
        // Left by an earlier cut (the restart removes them).
        let old = staging(&snapshots);
        let new = || staging(&snapshots).difference(&old).count() > 0;
        procs[f].restart();
        let t = Instant::now();
        while !new() && t.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        procs[f].kill9();
        let hit = new();
        let stats = fs[f].cut(Cut::Scramble(round));
        eprintln!("round {round}: cut during a snapshot install: {hit}; {stats:?}");
        during += u32::from(hit);
        if during == 3 {
            break;
        }
    }
    assert!(during > 0, "no cut landed during a snapshot install");
    procs[f].restart();
    more_acked(&stream, &acked, 300).await;
    stream.stop().await;

    // A cut of the leader while a backup copies from it.
    let dest = tempfile::tempdir().unwrap();
    let d = dest.path().to_str().unwrap().to_string();
    let backup = {
        let (ep, d) = (eps[leader].clone(), d.clone());
        std::thread::spawn(move || omctl(&ep, 60, &["backup", "create", "--quiet", &d]))
    };
    let t = Instant::now();
    while !holds_files(dest.path()) && t.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    procs[leader].kill9();
    let stats = fs[leader].cut(Cut::Scramble(99));
    let cut_short = backup.join().unwrap();
    eprintln!(
        "a backup cut short ({}): {stats:?}",
        String::from_utf8_lossy(&cut_short.stderr).trim()
    );
    procs[leader].restart();
    wait_settled(&c, &procs).await;
    let listed = omctl(&eps[leader], 30, &["backup", "list", &d]);
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    // A header line, then one per complete backup.
    let complete = listed
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count();
    if !cut_short.status.success() {
        assert_eq!(complete, 0, "a backup cut short is listed: {listed}");
    }
    let ep = wait_for(Duration::from_secs(30), "a leader", || async {
        claimed_leader(&eps).await
    })
    .await;
    let o = omctl(
        &eps[ep as usize - 1],
        60,
        &["backup", "create", "--quiet", &d],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = omctl(&eps[0], 60, &["backup", "verify", &d]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    check_acked(&c, &acked, "cuts during installs and a backup").await;
    assert_identical(&c, &mut procs, &dirs, "aimed power cuts").await;
}

/// Where in a compaction a cut lands (`compaction_trigger`).
#[derive(Clone, Copy, Debug)]
enum InCompaction {
    /// At the n-th write of its output SSTs: they are cut short.
    Output(u32),
    /// At its first MANIFEST write: the output is complete and synced, the
    /// edit that swaps it in for the inputs is not written.
    Install,
}

/// A `freeze_when` trigger for `at`. RocksDB writes "compaction_started"
/// to its LOG, and flushes the LOG once it has opened the first output
/// file, before any write of it.
fn compaction_trigger(at: InCompaction) -> impl FnMut(&str, &[u8]) -> bool + Send + 'static {
    let mut started = false;
    let mut writes = 0;
    move |name, data| {
        if name == "LOG" {
            started |= data
                .windows(b"compaction_started".len())
                .any(|w| w == b"compaction_started");
            return false;
        }
        if !started {
            return false;
        }
        match at {
            InCompaction::Output(n) if name.ends_with(".sst") => {
                writes += 1;
                writes >= n
            }
            InCompaction::Install => name.starts_with("MANIFEST-"),
            _ => false,
        }
    }
}

/// Power cuts aimed inside compactions on a follower: while its output is
/// written, and just before the edit that installs it. Backups flush the
/// memtables into L0 files until four of them start a compaction.
/// Started again, the follower opens (the cut-short output is an orphan,
/// the inputs are still live), catches up, and holds what the others do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_during_compactions_lose_nothing() {
    let Some(fs) = mounts(3) else { return };
    let (dirs, mut procs, eps) = super::power_cut::members_with(&fs, &[]);
    let c = register_bucket(&eps).await;
    let leader = claimed_leader(&eps).await.unwrap() as usize - 1;
    let acked = Acked::default();
    let stream = WriteStream::start(&eps[leader], "a/", 4, &acked);
    more_acked(&stream, &acked, 500).await;

    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let aims = [
        InCompaction::Output(1),
        InCompaction::Install,
        InCompaction::Output(3),
        InCompaction::Install,
    ];
    let mut landed = 0;
    for (round, at) in aims.into_iter().enumerate() {
        let f = followers[round % 2];
        fs[f].freeze_when(compaction_trigger(at));
        let t = Instant::now();
        let mut flushes = 0;
        while !fs[f].frozen() && t.elapsed() < Duration::from_secs(90) {
            more_acked(&stream, &acked, 100).await;
            let ep = procs[f].grpc.clone();
            // Fails once the member froze.
            let _ = tokio::task::spawn_blocking(move || {
                let dest = tempfile::tempdir().unwrap();
                omctl(
                    &ep,
                    30,
                    &["backup", "create", "--quiet", dest.path().to_str().unwrap()],
                )
            })
            .await;
            flushes += 1;
        }
        procs[f].kill9();
        let hit = fs[f].frozen();
        let stats = fs[f].cut(Cut::Scramble(round as u64));
        eprintln!("round {round}: cut at {at:?} after {flushes} flushes: {hit}; {stats:?}");
        landed += u32::from(hit);
        procs[f].restart();
        more_acked(&stream, &acked, 300).await;
    }
    assert!(
        landed >= 3,
        "only {landed} of 4 cuts landed in a compaction"
    );
    stream.stop().await;
    wait_settled(&c, &procs).await;
    check_acked(&c, &acked, "cuts during compactions").await;
    assert_identical(&c, &mut procs, &dirs, "power cuts during compactions").await;
}
