//! A store that rotted or cannot be read: a block of an SST whose bytes
//! changed on disk (found by its checksum), a record of the write-ahead
//! log whose bytes changed (found by the WAL check at open), and reads the
//! disk fails
//! (EIO, on `lazyfs`). The member must not serve or replicate it: it exits
//! by itself with a clear message (the scrub, `--scrub-interval-s`, reads
//! every block even if no client does). The runbook (docs/operations.md,
//! "A member's store is corrupt") then rebuilds it from a peer on an empty
//! directory: nothing acknowledged is lost and the replicas end identical.

use std::path::{Path, PathBuf};
use std::time::Duration;

use om_client::OmClient;
use om_raft_store::wal;
use om_tests::lazyfs::mounts;
use om_tests::replicas::{assert_identical, register_bucket, wait_settled};
use om_tests::writes::{Acked, WriteStream, check_acked};
use om_tests::{OmProcess, claimed_leader, cluster_addrs, wait_for};

/// Scrub every second.
const FLAGS: &[&str] = &["--scrub-interval-s", "1"];

/// Has the member at `grpc` flush its memtables into SSTs, as a backup
/// does (into a directory that is dropped), and returns its SSTs.
fn flush(grpc: &str, data_dir: &Path) -> Vec<(u64, PathBuf)> {
    let dest = tempfile::tempdir().unwrap();
    let o = om_tests::omctl(
        grpc,
        60,
        &["backup", "create", "--quiet", dest.path().to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ssts = ssts(data_dir);
    assert!(!ssts.is_empty(), "no SST after a backup");
    ssts
}

/// Runs `p` from now on with its stderr appended to `file`.
fn capture_stderr(p: &mut OmProcess, file: &Path) {
    p.wrapper = vec![
        "sh".into(),
        "-c".into(),
        format!("exec \"$@\" 2>>'{}'", file.display()),
        "sh".into(),
    ];
}

/// How many scrub passes the process at `http` has finished.
async fn scrub_passes(http: &str) -> u64 {
    let text = om_tests::try_http_get(http.parse().unwrap(), "/metrics")
        .await
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("om_scrub_passes_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Waits for a scrub pass that began after now (a clean store passes).
async fn scrubbed(http: &str) {
    let before = scrub_passes(http).await;
    wait_for(Duration::from_secs(30), "a scrub pass", || async {
        (scrub_passes(http).await >= before + 2).then_some(())
    })
    .await;
}

/// The SST files of the live store in data directory `dir`, largest first.
fn ssts(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut out: Vec<(u64, PathBuf)> = std::fs::read_dir(dir.join("db"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .map(|p| (std::fs::metadata(&p).unwrap().len(), p))
        .collect();
    out.sort_by(|a, b| b.cmp(a));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotted_block_stops_the_member_and_a_rebuild_from_a_peer_restores_it() {
    let mut t = Three::start().await;
    let fi = t.fi;
    flush(&t.procs[fi].grpc, &t.dirs[fi]);
    scrubbed(&t.procs[fi].http).await;

    // A follower's largest SST rots while it is down: a third of the way in
    // (a data block), 64 bytes flip.
    assert!(t.procs[fi].terminate(Duration::from_secs(30)));
    let (len, sst) = ssts(&t.dirs[fi]).into_iter().next().expect("an SST");
    let mut bytes = std::fs::read(&sst).unwrap();
    let at = (len / 3) as usize;
    for b in &mut bytes[at..at + 64] {
        *b ^= 0x5a;
    }
    std::fs::write(&sst, bytes).unwrap();
    let log = t.tmp[fi].path().join("stderr");
    capture_stderr(&mut t.procs[fi], &log);
    t.procs[fi].restart();
    let status = t.procs[fi].exits("a member with a rotted block").await;
    assert!(!status.success(), "{status}");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("Corruption"), "{said}");
    eprintln!(
        "the member with a rotted block in {} exited {status}: {}",
        sst.display(),
        said.lines().last().unwrap_or_default()
    );

    t.rebuild().await;
}

/// Three members, a write stream through the leader (1,500 writes in),
/// and the follower `fi` a test damages.
struct Three {
    tmp: Vec<tempfile::TempDir>,
    dirs: Vec<PathBuf>,
    procs: Vec<OmProcess>,
    c: OmClient,
    fi: usize,
    acked: Acked,
    stream: WriteStream,
}

impl Three {
    async fn start() -> Three {
        let tmp: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let dirs: Vec<PathBuf> = tmp.iter().map(|t| t.path().join("om")).collect();
        let addrs = cluster_addrs(3);
        let procs: Vec<OmProcess> = addrs
            .iter()
            .zip(&dirs)
            .map(|(a, d)| OmProcess::spawn_member_args(d, a, &addrs, FLAGS))
            .collect();
        let eps: Vec<String> = addrs.iter().map(|a| a.grpc.clone()).collect();
        let c = register_bucket(&eps).await;
        let leader = claimed_leader(&eps).await.unwrap();
        let fi = (1..=3).find(|i| *i != leader).unwrap() as usize - 1;
        let acked = Acked::default();
        let stream = WriteStream::start(&eps[leader as usize - 1], "a/", 4, &acked);
        stream.wait_acked(1500).await;
        Three {
            tmp,
            dirs,
            procs,
            c,
            fi,
            acked,
            stream,
        }
    }

    /// The runbook for the corrupt member `fi` while writes go on: its
    /// store aside, an empty directory, the same flags. It catches up from
    /// a peer; nothing acknowledged is lost and the replicas end identical.
    async fn rebuild(mut self) {
        let fi = self.fi;
        let n = self.acked.lock().unwrap().len();
        self.stream.wait_acked(n + 200).await;
        std::fs::rename(&self.dirs[fi], self.tmp[fi].path().join("om.corrupt")).unwrap();
        std::fs::create_dir(&self.dirs[fi]).unwrap();
        self.procs[fi].wrapper.clear();
        self.procs[fi].restart();
        let n = self.acked.lock().unwrap().len();
        self.stream.wait_acked(n + 200).await;
        self.stream.stop().await;
        wait_settled(&self.c, &self.procs).await;
        scrubbed(&self.procs[fi].http).await;
        check_acked(&self.c, &self.acked, "a rebuild").await;
        assert_identical(&self.c, &mut self.procs, &self.dirs, "a rebuilt member").await;
    }
}

/// A byte of a follower's write-ahead log rots while it is down, amid
/// records it had synced and acknowledged. RocksDB alone would open the
/// store and drop every record after it; the member refuses to start
/// instead, naming the file and the offset, and is rebuilt from a peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotted_wal_record_stops_the_member_instead_of_dropping_what_follows() {
    let mut t = Three::start().await;
    let fi = t.fi;

    // Down hard (the WAL is not flushed into SSTs), then the WAL with the
    // most records rots in the payload of its middle record.
    t.procs[fi].kill9();
    let (log, records) = wal::wal_files(&t.dirs[fi].join("db"))
        .unwrap()
        .into_iter()
        .map(|p| {
            let s = wal::scan(&p).unwrap();
            (p, s.records)
        })
        .max_by_key(|(_, r)| r.len())
        .expect("a WAL file");
    assert!(
        records.len() > 100,
        "{} records in {}",
        records.len(),
        log.display()
    );
    let (offset, len) = records[records.len() / 2];
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[offset as usize + 7 + len / 2] ^= 0x5a;
    std::fs::write(&log, bytes).unwrap();
    assert!(matches!(
        wal::scan(&log).unwrap().ending,
        wal::Ending::Rotted { .. }
    ));

    let said_file = t.tmp[fi].path().join("stderr");
    capture_stderr(&mut t.procs[fi], &said_file);
    t.procs[fi].restart();
    let status = t.procs[fi].exits("a member with a rotted WAL record").await;
    assert!(!status.success(), "{status}");
    let said = std::fs::read_to_string(&said_file).unwrap();
    assert!(
        said.contains(&format!("is corrupt at byte {offset}")) && said.contains("write-ahead log"),
        "{said}"
    );
    eprintln!(
        "the member whose WAL rotted at byte {offset} of {} ({} records) exited {status}",
        log.display(),
        records.len()
    );
    t.rebuild().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_the_disk_fails_stop_the_node_and_lose_nothing() {
    let Some(fs) = mounts(1) else { return };
    let dir = fs[0].path().join("om");
    std::fs::create_dir(&dir).unwrap();
    let mut om = OmProcess::spawn_args(&dir, FLAGS);
    om.wait_ready(Duration::from_secs(60)).await;
    let c = om.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", om_client::v1::BucketLayout::ObjectStore)
        .await
        .unwrap();
    let acked = Acked::default();
    let stream = WriteStream::start(&om.grpc, "", 4, &acked);
    stream.wait_acked(1000).await;
    flush(&om.grpc, &dir);
    scrubbed(&om.http).await;

    let log = fs[0].path().join("stderr");
    std::fs::write(&log, "").unwrap();
    om.terminate(Duration::from_secs(30));
    stream.join().await;
    capture_stderr(&mut om, &log);
    om.restart();
    om.wait_ready(Duration::from_secs(60)).await;
    fs[0].fail_reads(Some(".sst"));
    let status = om.exits("a node whose disk fails reads").await;
    assert!(!status.success(), "{status}");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("Input/output error"), "{said}");
    assert!(fs[0].stats().failed_reads > 0);

    // The disk reads again (a replaced disk holding the same data): nothing
    // acknowledged was lost.
    fs[0].fail_reads(None);
    om.wrapper.clear();
    om.restart();
    om.wait_ready(Duration::from_secs(60)).await;
    check_acked(&om.client(), &acked, "failed reads").await;
}
