//! Backups, restore and recovery from a lost majority, with real `om` and
//! `omctl` processes: what an operator runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use om_client::backup::{self, Manifest};
use om_client::v1::{BucketLayout, ListKeysRequest};
use om_client::{ClientOptions, OmClient};
use om_tests::{
    MemberAddrs, OmProcess, agreed_leader_at, binary, cluster_addrs, replicas, wait_for,
};

mod fenced;
mod signed;

const VOL: &str = "vol1";
const BKT: &str = "bkt1";

fn omctl(endpoint: &str, args: &[&str]) -> Output {
    om_tests::omctl(endpoint, 60, args)
}

fn ok(o: Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

fn om_restore(from: &Path, data_dir: &Path, me: &MemberAddrs, all: &[MemberAddrs]) -> Output {
    Command::new(binary("om"))
        .arg("restore")
        .arg("--from")
        .arg(from)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--node-id", &me.id.to_string()])
        .args(["--initial-cluster", &om_tests::initial_cluster(all)])
        .env("OM_LOG", "warn")
        .output()
        .expect("run om restore")
}

fn client(eps: Vec<String>) -> OmClient {
    OmClient::new(
        &eps,
        ClientOptions {
            deadline: Duration::from_secs(30),
            ..Default::default()
        },
    )
    .unwrap()
}

fn endpoints(members: &[MemberAddrs]) -> Vec<String> {
    members.iter().map(|m| m.grpc.clone()).collect()
}

async fn start(members: &[MemberAddrs], dirs: &[PathBuf], more: &[&str]) -> Vec<OmProcess> {
    let procs: Vec<OmProcess> = members
        .iter()
        .zip(dirs)
        .map(|(m, d)| OmProcess::spawn_member_args(d, m, members, more))
        .collect();
    let c = client(endpoints(members));
    wait_for(Duration::from_secs(30), "a leader", || async {
        c.cluster_status().await.ok().filter(|s| s.has_leader)
    })
    .await;
    procs
}

/// A cluster of `n` member processes under `root` (`n1`, `n2`, ...) with
/// the bucket the writers use.
async fn cluster_with_bucket(
    root: &Path,
    n: u64,
    more: &[&str],
) -> (
    Vec<MemberAddrs>,
    Vec<PathBuf>,
    Vec<OmProcess>,
    Arc<OmClient>,
) {
    let members = cluster_addrs(n);
    let dirs: Vec<PathBuf> = (1..=n).map(|i| root.join(format!("n{i}"))).collect();
    let procs = start(&members, &dirs, more).await;
    let c = Arc::new(client(endpoints(&members)));
    c.create_volume(VOL, "").await.unwrap();
    c.create_bucket(VOL, BKT, BucketLayout::ObjectStore)
        .await
        .unwrap();
    (members, dirs, procs, c)
}

/// `omctl backup create --quiet DEST` against `endpoint`, and its manifest.
fn take_backup(endpoint: &str, dest: &Path) -> Manifest {
    let id = ok(
        omctl(
            endpoint,
            &["backup", "create", "--quiet", dest.to_str().unwrap()],
        ),
        "backup create",
    );
    backup::read_manifest(&dest.join(id.trim())).unwrap()
}

/// Every key name in the bucket, in order.
async fn key_names(c: &OmClient) -> Vec<String> {
    let mut out = Vec::new();
    let mut after = String::new();
    loop {
        let r = c
            .list_keys(ListKeysRequest {
                volume: VOL.into(),
                bucket: BKT.into(),
                start_after: after.clone(),
                omit_blocks: true,
                ..Default::default()
            })
            .await
            .unwrap();
        out.extend(r.keys.iter().map(|k| k.name.clone()));
        if !r.truncated {
            return out;
        }
        after = r.next_start_after;
    }
}

/// One client writing `k-000000`, `k-000001`, ... one after another, each
/// acknowledged before the next is sent; `acked` counts the acknowledged.
fn writer(
    c: Arc<OmClient>,
    acked: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut i = acked.load(Ordering::SeqCst);
        while !stop.load(Ordering::SeqCst) {
            if c.put_key(VOL, BKT, &format!("k-{i:06}"), 1).await.is_ok() {
                i += 1;
                acked.store(i, Ordering::SeqCst);
            }
        }
    })
}

/// The keys a consistent copy holds: exactly the first n the writer sent,
/// n at least `at_least` (a copy never holds a later write without an
/// earlier one).
fn assert_prefix(names: &[String], at_least: u64, what: &str) -> u64 {
    for (i, n) in names.iter().enumerate() {
        assert_eq!(n, &format!("k-{i:06}"), "{what}: a hole in the writes");
    }
    let n = names.len() as u64;
    assert!(
        n >= at_least,
        "{what}: {n} keys, {at_least} were acknowledged before the backup"
    );
    n
}

/// Table digests of the leader at one index (a verification entry).
async fn table_digests(c: &OmClient) -> BTreeMap<String, (String, u64)> {
    let v = wait_for(Duration::from_secs(30), "table digests", || async {
        c.verify_replicas(true)
            .await
            .ok()
            .and_then(|r| r.tables)
            .filter(|t| t.all_agree)
    })
    .await;
    v.members[0]
        .tables
        .iter()
        .map(|t| (t.table.clone(), (t.digest.clone(), t.entries)))
        .collect()
}

fn manifest_digests(m: &Manifest) -> BTreeMap<String, (String, u64)> {
    m.tables
        .iter()
        .map(|t| (t.name.clone(), (t.sha256.clone(), t.entries)))
        .collect()
}

/// A backup of a quiet cluster holds exactly its tables; backups taken
/// under a write load, and from a follower while the leader is killed, are
/// consistent and share the files they can; damaged backups are refused with
/// nothing written; a restored cluster is a new cluster with the backup's
/// state, serving and taking writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn backups_restore_into_a_new_cluster() {
    let root = tempfile::tempdir().unwrap();
    let dest = root.path().join("backups");
    let (members, _dirs, mut procs, c) = cluster_with_bucket(root.path(), 3, &[]).await;
    let acked = Arc::new(AtomicU64::new(0));
    for _ in 0..200 {
        let i = acked.load(Ordering::SeqCst);
        c.put_key(VOL, BKT, &format!("k-{i:06}"), 1).await.unwrap();
        acked.store(i + 1, Ordering::SeqCst);
    }
    let old_cluster = c.cluster_status().await.unwrap().cluster_id;
    assert!(!old_cluster.is_empty());

    // Quiet: the backup's tables are the cluster's, digest for digest.
    let leader_id = agreed_leader_at(&endpoints(&members), None).await;
    let leader = members.iter().position(|m| m.id == leader_id).unwrap();
    let dest_s = dest.to_str().unwrap();
    let quiet = take_backup(&members[leader].grpc, &dest);
    assert_eq!(quiet.cluster_id, old_cluster);
    assert_eq!(
        manifest_digests(&quiet),
        table_digests(&c).await,
        "a quiet backup holds the cluster's tables"
    );
    assert_eq!(quiet.members.len(), 3);
    assert_eq!(
        quiet.new_bytes, quiet.bytes,
        "the first backup shares nothing"
    );

    // Under load, from the leader: every write acknowledged before it started.
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(c.clone(), acked.clone(), stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before_loaded = acked.load(Ordering::SeqCst);
    let loaded = take_backup(&members[leader].grpc, &dest);
    assert!(loaded.applied_index > quiet.applied_index);
    assert!(
        loaded.new_bytes < loaded.bytes,
        "the second backup shares the SST files that did not change: {} of {} bytes new",
        loaded.new_bytes,
        loaded.bytes
    );

    // From a follower while the leader is killed.
    let follower = (leader + 1) % 3;
    let taker = {
        let ep = members[follower].grpc.clone();
        let d = dest_s.to_string();
        std::thread::spawn(move || omctl(&ep, &["backup", "create", "--quiet", &d]))
    };
    procs[leader].kill9();
    let during_kill = ok(taker.join().unwrap(), "backup during a leader kill");
    let during = backup::read_manifest(&dest.join(during_kill.trim())).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    w.await.unwrap();
    procs[leader].restart();

    let listed = ok(
        omctl(&members[0].grpc, &["backup", "list", dest_s]),
        "backup list",
    );
    // A backup holds the whole state, S3 secrets included: nobody but its
    // owner may read it.
    private(&dest);
    for id in [&quiet.id, &loaded.id, &during.id] {
        assert!(listed.contains(id.as_str()), "{listed}");
        ok(
            omctl(
                &members[0].grpc,
                &["backup", "verify", dest.join(id).to_str().unwrap()],
            ),
            "backup verify",
        );
    }
    for p in &mut procs {
        assert!(p.terminate(Duration::from_secs(30)));
    }

    // Damaged or partial backups are refused, and nothing is written.
    let new_members = cluster_addrs(3);
    let bad = root.path().join("bad");
    copy_dir(&dest, &bad);
    let sst = loaded
        .files
        .iter()
        .find(|f| f.name.ends_with(".sst"))
        .unwrap();
    let obj = bad.join(backup::OBJECTS).join(&sst.sha256);
    let mut bytes = std::fs::read(&obj).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&obj, &bytes).unwrap();
    let refused = root.path().join("refused");
    let o = om_restore(
        &bad.join(&loaded.id),
        &refused,
        &new_members[0],
        &new_members,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "a damaged backup was restored");
    assert!(err.contains(&sst.name) && err.contains("damaged"), "{err}");
    assert!(
        !refused.join("db").exists(),
        "a refused restore wrote a store"
    );
    let o = omctl(
        &members[0].grpc,
        &["backup", "verify", bad.join(&loaded.id).to_str().unwrap()],
    );
    assert!(!o.status.success());
    std::fs::remove_file(&obj).unwrap();
    let o = om_restore(
        &bad.join(&loaded.id),
        &refused,
        &new_members[0],
        &new_members,
    );
    assert!(!o.status.success(), "a partial backup was restored");
    assert!(!refused.join("db").exists());

    // Restore the loaded backup into a new cluster of three.
    let new_dirs: Vec<PathBuf> = (1..=3).map(|i| root.path().join(format!("r{i}"))).collect();
    for (m, d) in new_members.iter().zip(&new_dirs) {
        ok(
            om_restore(&dest.join(&loaded.id), d, m, &new_members),
            "om restore",
        );
    }
    // A data directory that holds a store is never overwritten.
    let o = om_restore(
        &dest.join(&loaded.id),
        &new_dirs[0],
        &new_members[0],
        &new_members,
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("already holds a store"));

    let mut restored = start(&new_members, &new_dirs, &[]).await;
    let rc = client(endpoints(&new_members));
    let names = key_names(&rc).await;
    let n = assert_prefix(&names, before_loaded, "restored under load");
    let new_cluster = wait_for(Duration::from_secs(30), "a new cluster id", || async {
        rc.cluster_status()
            .await
            .ok()
            .map(|s| s.cluster_id)
            .filter(|id| !id.is_empty())
    })
    .await;
    assert_ne!(
        new_cluster, old_cluster,
        "a restored cluster is a new cluster"
    );
    // Every table but the settings (the new cluster id) is the backup's.
    let mut got = table_digests(&rc).await;
    let mut want = manifest_digests(&loaded);
    got.remove("settings");
    want.remove("settings");
    assert_eq!(got, want, "the restored tables are the backup's");
    rc.put_key(VOL, BKT, &format!("k-{n:06}"), 1).await.unwrap();
    assert_eq!(key_names(&rc).await.len() as u64, n + 1);
    replicas::wait_settled(&rc, &restored).await;
    replicas::assert_identical(&rc, &mut restored, &new_dirs, "restored").await;

    // The backup taken from a follower during the leader kill restores too,
    // to a consistent prefix.
    let one = cluster_addrs(1);
    let d = root.path().join("single");
    ok(
        om_restore(&dest.join(&during.id), &d, &one[0], &one),
        "om restore",
    );
    let _single = start(&one, &[d], &[]).await;
    assert_prefix(
        &key_names(&client(endpoints(&one))).await,
        0,
        "restored from the follower's backup",
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

/// Two of three members are lost for good (killed, data deleted): the
/// survivor is forced into a cluster of its own with every write it had
/// applied, fresh members are added back, and all replicas end identical.
/// A restart with the flag still set does not force again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn force_new_cluster_recovers_from_a_lost_majority() {
    let root = tempfile::tempdir().unwrap();
    let (members, dirs, mut procs, c) = cluster_with_bucket(root.path(), 3, &[]).await;
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(c.clone(), acked.clone(), stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;

    // Lose nodes 2 and 3 for good, whichever of the three led.
    let survivor = 0;
    for i in 1..3 {
        procs[i].kill9();
        std::fs::remove_dir_all(&dirs[i]).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    // The writer's last request may wait for its deadline (no quorum).
    let _ = tokio::time::timeout(Duration::from_secs(40), w).await;
    assert!(procs[survivor].terminate(Duration::from_secs(30)));
    let before = om_tests::dump_data_dir(&dirs[survivor]);

    procs[survivor]
        .extra
        .push("--force-new-cluster".to_string());
    procs[survivor].restart();
    let only = client(vec![members[survivor].grpc.clone()]);
    let s = wait_for(Duration::from_secs(30), "the survivor to lead", || async {
        only.cluster_status()
            .await
            .ok()
            .filter(|s| s.role == "leader")
    })
    .await;
    assert_eq!(s.members.len(), 1, "{s:?}");
    assert!(dirs[survivor].join(om::restore::FORCED_MARKER).exists());
    let after = assert_prefix(&key_names(&only).await, 0, "after forcing");
    // Two fresh members join.
    let fresh = cluster_addrs(3);
    let mut joined = Vec::new();
    for (id, m) in [(4u64, &fresh[1]), (5, &fresh[2])] {
        let d = root.path().join(format!("n{id}"));
        let p = OmProcess::spawn_member_args(
            &d,
            &MemberAddrs {
                id,
                grpc: m.grpc.clone(),
                http: m.http.clone(),
                raft: m.raft.clone(),
            },
            &members[..1],
            &["--join"],
        );
        only.add_node(id, &m.raft, &m.grpc, false).await.unwrap();
        joined.push((p, d));
    }
    only.put_key(VOL, BKT, &format!("k-{after:06}"), 1)
        .await
        .unwrap();
    let status = only.cluster_status().await.unwrap();
    assert_eq!(status.members.len(), 3, "{status:?}");

    // Restarted with the flag still set: the marker keeps it a member of
    // the three.
    assert!(procs[survivor].terminate(Duration::from_secs(30)));
    procs[survivor].restart();
    let all: Vec<String> = std::iter::once(members[survivor].grpc.clone())
        .chain(joined.iter().map(|(p, _)| p.grpc.clone()))
        .collect();
    let c3 = client(all);
    wait_for(
        Duration::from_secs(30),
        "the three to have a leader",
        || async {
            c3.cluster_status()
                .await
                .ok()
                .filter(|s| s.has_leader && s.members.len() == 3)
        },
    )
    .await;
    c3.put_key(VOL, BKT, &format!("k-{:06}", after + 1), 1)
        .await
        .unwrap();
    let mut running = vec![procs.remove(survivor)];
    let mut dirs3 = vec![dirs[survivor].clone()];
    for (p, d) in joined {
        running.push(p);
        dirs3.push(d);
    }
    replicas::wait_settled(&c3, &running).await;
    replicas::assert_identical(&c3, &mut running, &dirs3, "forced").await;
    // Every key the survivor had applied is still there.
    let end = om_tests::dump_data_dir(&dirs3[0]);
    let lost: Vec<_> = before
        .keys()
        .filter(|k| k.0 == om::store::keys::KEYS_CF && !end.contains_key(*k))
        .collect();
    assert!(
        lost.is_empty(),
        "keys the survivor had applied are gone: {lost:?}"
    );
}

/// Asserts `p` is its owner's alone: directories 0700 (all the way down),
/// files readable by nobody else.
fn private(p: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    if p.is_dir() {
        assert_eq!(mode, 0o700, "{}", p.display());
        for e in std::fs::read_dir(p).unwrap() {
            private(&e.unwrap().path());
        }
    } else {
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", p.display());
    }
}

/// With `--archive-log`, a restore replays past its backup to exactly the
/// index or time asked for: the keys written at or before it, none after;
/// an archive that does not reach the target is refused, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn point_in_time_restore_lands_on_the_chosen_index() {
    let root = tempfile::tempdir().unwrap();
    let archive = root.path().join("archive");
    let dest = root.path().join("backups");
    let archive_flag = archive.to_str().unwrap();
    let (members, _, mut procs, c) =
        cluster_with_bucket(root.path(), 1, &["--archive-log", archive_flag]).await;
    for i in 0..20 {
        c.put_key(VOL, BKT, &format!("k-{i:06}"), 1).await.unwrap();
    }
    let m = take_backup(&members[0].grpc, &dest);
    // After the backup: each write's index and the leader's time.
    let mut written = Vec::new();
    for i in 20..80 {
        let k = c.put_key(VOL, BKT, &format!("k-{i:06}"), 1).await.unwrap();
        assert!(k.update_id > m.applied_index);
        written.push((k.update_id, k.modification_time_ms));
        if i == 50 {
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    }
    // Let the archive's writer sync what was applied.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(procs[0].terminate(Duration::from_secs(30)));
    // The archive holds every write, S3 secrets included: private.
    private(&archive);

    let restore_to = |what: &str, extra: &[&str]| {
        let one = cluster_addrs(1);
        let d = root.path().join(what);
        let o = Command::new(binary("om"))
            .arg("restore")
            .arg("--from")
            .arg(dest.join(&m.id))
            .arg("--data-dir")
            .arg(&d)
            .args([
                "--node-id",
                "1",
                "--initial-cluster",
                &om_tests::initial_cluster(&one),
            ])
            .args(["--archive-log", archive_flag])
            .args(extra)
            .env("OM_LOG", "warn")
            .output()
            .unwrap();
        (o, one, d)
    };
    // To an index: the write at it is the last one there.
    let (at, _) = written[17];
    let (o, one, d) = restore_to("to-index", &["--to-index", &at.to_string()]);
    ok(o, "om restore --to-index");
    {
        // The restored cluster archives into the same directory, as the old
        // one did: its history forks from the old one's at the restore, so
        // it goes into a directory of its own.
        let mut p = start(&one, &[d], &["--archive-log", archive_flag]).await;
        let rc = client(endpoints(&one));
        let names = key_names(&rc).await;
        assert_eq!(
            names.len(),
            20 + 18,
            "exactly the writes through index {at}"
        );
        assert_eq!(names.last().unwrap(), &format!("k-{:06}", 37));
        for i in 0..10 {
            rc.put_key(VOL, BKT, &format!("r-{i:06}"), 1).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(p[0].terminate(Duration::from_secs(30)));
    }
    let lineages: Vec<String> = std::fs::read_dir(&archive)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(lineages.len(), 1, "{lineages:?}");
    assert!(lineages[0].starts_with("restored-at-"), "{lineages:?}");
    // The old history replays as it was, whatever the restored one wrote.
    let (o, one, d) = restore_to("to-index-again", &["--to-index", &at.to_string()]);
    ok(
        o,
        "om restore --to-index, with a restored cluster's archive beside",
    );
    let _p = start(&one, &[d], &[]).await;
    let names = key_names(&client(endpoints(&one))).await;
    assert_eq!(names.len(), 20 + 18, "{names:?}");
    assert_eq!(names.last().unwrap(), &format!("k-{:06}", 37));

    // To a time: the writes stamped at or before it.
    let (_, t) = written[31];
    let (o, one, d) = restore_to("to-time", &["--to-time", &t.to_string()]);
    ok(o, "om restore --to-time");
    let _q = start(&one, &[d], &[]).await;
    let want = 20 + written.iter().filter(|(_, ms)| *ms <= t).count();
    assert_eq!(key_names(&client(endpoints(&one))).await.len(), want);

    // Past the archive's end: refused, nothing written.
    let beyond = written.last().unwrap().0 + 1000;
    let (o, _, d) = restore_to("beyond", &["--to-index", &beyond.to_string()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("holds no entry"), "{err}");
    assert!(!d.join("db").exists());
}
