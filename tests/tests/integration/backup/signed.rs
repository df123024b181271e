//! Backups and the log archive signed under a backup key
//! (`--backup-key-file`): `omctl backup verify` and `om restore` refuse a
//! data file, a manifest or an archive record altered since, naming it.

use super::*;

/// `om restore` of the backup in `dest` into `root/what`, replaying the
/// archive to `to`, with the backup key `key`.
fn restore(root: &Path, what: &str, backup: &Path, archive: &Path, to: u64, key: &Path) -> Output {
    let one = cluster_addrs(1);
    Command::new(binary("om"))
        .arg("restore")
        .arg("--from")
        .arg(backup)
        .arg("--data-dir")
        .arg(root.join(what))
        .args([
            "--node-id",
            "1",
            "--initial-cluster",
            &om_tests::initial_cluster(&one),
        ])
        .arg("--archive-log")
        .arg(archive)
        .args(["--to-index", &to.to_string()])
        .arg("--backup-key-file")
        .arg(key)
        .env("OM_LOG", "warn")
        .output()
        .unwrap()
}

fn refused(o: &Output, names: &str) -> String {
    assert!(!o.status.success(), "not refused");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(err.contains(names), "does not name {names}: {err}");
    err
}

/// Copies every file under `from` to `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The attack of a SetAcl record appended to an archive, and its kin: with
/// the backup key, a tampered data file, manifest or archive record is
/// refused by `verify` and `restore`, naming the file, and nothing is
/// restored; the untouched backup and archive restore to the last write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tampered_backups_and_archives_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let key = root.path().join("backup.key");
    std::fs::write(&key, format!("b1 {}\n", "0b".repeat(32))).unwrap();
    let archive = root.path().join("archive");
    let dest = root.path().join("backups");
    let flags = [
        "--archive-log",
        archive.to_str().unwrap(),
        "--backup-key-file",
        key.to_str().unwrap(),
    ];
    let (members, _, mut procs, c) = cluster_with_bucket(root.path(), 1, &flags).await;
    for i in 0..10 {
        c.put_key(VOL, BKT, &format!("k-{i:06}"), 1).await.unwrap();
    }
    let endpoint = &members[0].grpc;
    let id = ok(
        om_tests::omctl(
            endpoint,
            60,
            &[
                "backup",
                "create",
                "--quiet",
                "--backup-key-file",
                key.to_str().unwrap(),
                dest.to_str().unwrap(),
            ],
        ),
        "backup create",
    );
    let backup = dest.join(id.trim());
    assert!(backup.join(backup::MANIFEST_MAC).exists());
    let mut last = 0;
    for i in 10..20 {
        last = c
            .put_key(VOL, BKT, &format!("k-{i:06}"), 1)
            .await
            .unwrap()
            .update_id;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(procs[0].terminate(Duration::from_secs(30)));

    let verify = |b: &Path| {
        om_tests::omctl(
            endpoint,
            60,
            &[
                "--output",
                "json",
                "backup",
                "verify",
                "--backup-key-file",
                key.to_str().unwrap(),
                b.to_str().unwrap(),
            ],
        )
    };
    let v: serde_json::Value = serde_json::from_str(&ok(verify(&backup), "verify")).unwrap();
    assert_eq!(v["signed_by"], "b1");

    // A data file altered: its digest no longer matches.
    let m = backup::read_manifest(&backup).unwrap();
    let sst = m.files.iter().find(|f| f.name.ends_with(".sst")).unwrap();
    let bad_data = root.path().join("bad-data");
    copy_tree(&dest, &bad_data);
    let obj = bad_data.join(backup::OBJECTS).join(&sst.sha256);
    let mut bytes = std::fs::read(&obj).unwrap();
    bytes[10] ^= 1;
    std::fs::write(&obj, bytes).unwrap();
    refused(&verify(&bad_data.join(&m.id)), &sst.sha256);
    let o = restore(
        root.path(),
        "r-data",
        &bad_data.join(&m.id),
        &archive,
        last,
        &key,
    );
    refused(&o, &sst.name);
    assert!(!root.path().join("r-data/db").exists());

    // The manifest altered (the data file and its digest swapped in
    // together would need this): its tag no longer matches.
    let bad_manifest = root.path().join("bad-manifest");
    copy_tree(&dest, &bad_manifest);
    let p = bad_manifest.join(&m.id).join(backup::MANIFEST);
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, text.replacen(&m.created, "2020-01-01T00:00:00Z", 1)).unwrap();
    refused(&verify(&bad_manifest.join(&m.id)), "manifest.json");
    refused(
        &restore(
            root.path(),
            "r-manifest",
            &bad_manifest.join(&m.id),
            &archive,
            last,
            &key,
        ),
        "manifest.json",
    );
    // Without its tag: not authenticated, so refused under a key.
    std::fs::write(&p, text).unwrap();
    std::fs::remove_file(bad_manifest.join(&m.id).join(backup::MANIFEST_MAC)).unwrap();
    refused(&verify(&bad_manifest.join(&m.id)), "manifest.mac");

    // An archive record appended (a copy of the last record, re-indexed):
    // it carries no tag the key made.
    let bad_archive = root.path().join("bad-archive");
    copy_tree(&archive, &bad_archive);
    let seg = std::fs::read_dir(&bad_archive)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "omlog"))
        .max()
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let forged = om_raft_store::codec::encode_entry(&om_raft_store::Entry {
        log_id: om_raft_store::LogId::new(
            openraft::vote::leader_id_adv::LeaderId {
                term: 1,
                node_id: 1,
            },
            last + 1,
        ),
        payload: openraft::EntryPayload::Blank,
    });
    bytes.extend_from_slice(&(last + 1).to_be_bytes());
    bytes.extend_from_slice(&(forged.len() as u32).to_be_bytes());
    bytes.extend_from_slice(&crc32fast::hash(&forged).to_be_bytes());
    bytes.extend_from_slice(&forged);
    bytes.extend_from_slice(&[7u8; 32]);
    std::fs::write(&seg, bytes).unwrap();
    let seg_name = seg.file_name().unwrap().to_string_lossy().into_owned();
    let o = restore(
        root.path(),
        "r-archive",
        &backup,
        &bad_archive,
        last + 1,
        &key,
    );
    let err = refused(&o, &seg_name);
    assert!(err.contains("altered or added"), "{err}");
    assert!(!root.path().join("r-archive/db").exists());

    // Untouched, under the key: restored to the last write.
    ok(
        restore(root.path(), "r-good", &backup, &archive, last, &key),
        "om restore",
    );
    let one = cluster_addrs(1);
    let _p = start(&one, &[root.path().join("r-good")], &[]).await;
    assert_eq!(key_names(&client(endpoints(&one))).await.len(), 20);
}
