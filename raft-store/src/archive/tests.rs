use super::replay::read_header;
use super::*;
use om_backup_format::keys::MacKeys;
use openraft::EntryPayload;
use openraft::vote::leader_id_adv::LeaderId;

fn id(term: u64, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: id(term, index),
        payload: EntryPayload::Blank,
    }
}

fn label(c: &str) -> Option<LabelSource> {
    let c = c.to_string();
    Some(LabelSource(Arc::new(move || Label {
        cluster_id: c.clone(),
        incarnation: 0,
    })))
}

/// A writer of cluster `cluster` and `lineage` whose store applied
/// `applied`, archiving `entries`.
fn write(dir: &Path, cluster: &str, lineage: &str, applied: Option<LogId>, entries: &[Entry]) {
    write_signed(dir, cluster, lineage, applied, entries, None)
}

fn write_signed(
    dir: &Path,
    cluster: &str,
    lineage: &str,
    applied: Option<LogId>,
    entries: &[Entry],
    keys: Option<Arc<MacKeys>>,
) {
    let a = LogArchive::open(
        dir,
        Start {
            lineage: lineage.to_string(),
            applied,
            label: label(cluster),
            keys,
        },
    )
    .unwrap();
    for e in entries {
        a.push(e).unwrap();
    }
}

fn run(
    dir: &Path,
    from: u64,
    to: Option<u64>,
    h: &History,
) -> std::io::Result<(Vec<LogId>, Replayed)> {
    let mut seen = Vec::new();
    let r = replay(dir, from, to, h, |e| {
        seen.push(e.log_id);
        Ok(true)
    })?;
    Ok((seen, r))
}

fn history(cluster: &str, after: Option<LogId>) -> History {
    History {
        after,
        cluster_id: cluster.to_string(),
        lineage: String::new(),
        keys: None,
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "omlog"))
        .collect();
    v.sort();
    v
}

#[test]
fn overlapping_and_torn_segments_replay_each_index_once() {
    let d = tempfile::tempdir().unwrap();
    let all: Vec<Entry> = (1..=15).map(|i| entry(1, i)).collect();
    write(d.path(), "c", "", None, &all[..10]);
    // A restart applies 8.. again (its store had applied 7) into a new
    // segment, which never reuses a name.
    write(d.path(), "c", "", Some(id(1, 7)), &all[7..]);
    // And a third time: no "file exists".
    write(d.path(), "c", "", Some(id(1, 7)), &all[7..9]);
    assert_eq!(segments(d.path()).len(), 3);
    // A torn record at the end of the second segment.
    let second = segments(d.path())
        .into_iter()
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{:020}", 8))
                && std::fs::metadata(p).unwrap().len() > 200
        })
        .unwrap();
    let mut f = File::options().append(true).open(&second).unwrap();
    f.write_all(&16u64.to_be_bytes()).unwrap();
    drop(f);
    let h = history("c", Some(id(1, 2)));
    let (seen, r) = run(d.path(), 3, Some(12), &h).unwrap();
    assert_eq!(seen, (3..=12).map(|i| id(1, i)).collect::<Vec<_>>());
    assert_eq!(r, Replayed::Complete { last: 12 });
    let (seen, r) = run(d.path(), 1, None, &history("c", None)).unwrap();
    assert_eq!(seen.len(), 15);
    assert_eq!(r, Replayed::Complete { last: 15 });
    let (_, r) = run(d.path(), 5, Some(20), &history("c", Some(id(1, 4)))).unwrap();
    assert_eq!(
        r,
        Replayed::Gap {
            last: 15,
            missing: 16
        }
    );
    let r = replay(d.path(), 2, None, &history("c", Some(id(1, 1))), |e| {
        Ok(e.log_id.index < 6)
    })
    .unwrap();
    assert_eq!(r, Replayed::Stopped { last: 5, at: 6 });
}

/// Two clusters archived into one directory: each replay takes only its
/// own cluster's segments.
#[test]
fn two_clusters_segments_in_one_directory() {
    let d = tempfile::tempdir().unwrap();
    let a: Vec<Entry> = (1..=10).map(|i| entry(1, i)).collect();
    let b: Vec<Entry> = (1..=10).map(|i| entry(3, i)).collect();
    write(d.path(), "a", "", None, &a);
    write(d.path(), "b", "", None, &b);
    let (seen, r) = run(d.path(), 5, Some(10), &history("a", Some(id(1, 4)))).unwrap();
    assert_eq!(seen, (5..=10).map(|i| id(1, i)).collect::<Vec<_>>());
    assert_eq!(r, Replayed::Complete { last: 10 });
    let (seen, _) = run(d.path(), 5, Some(10), &history("b", Some(id(3, 4)))).unwrap();
    assert_eq!(seen, (5..=10).map(|i| id(3, i)).collect::<Vec<_>>());
    // Without a cluster id to go by, the two fork at the first index.
    let e = run(d.path(), 1, Some(10), &history("", None)).unwrap_err();
    assert!(e.to_string().contains("forks at index 1"), "{e}");
}

/// A cluster restored from a backup at index 5 archives its own history
/// into its lineage's directory: the old cluster's replay ignores it, the
/// restored one's follows it. Its segments copied beside the old ones are
/// a fork, refused, naming them.
#[test]
fn a_fork_after_restore() {
    let d = tempfile::tempdir().unwrap();
    let old: Vec<Entry> = (1..=10).map(|i| entry(1, i)).collect();
    write(d.path(), "c", "", None, &old);
    let restored: Vec<Entry> = (6..=9).map(|i| entry(2, i)).collect();
    write(d.path(), "", "restored-1", Some(id(1, 5)), &restored);
    assert!(d.path().join("restored-1").is_dir());
    let (seen, _) = run(d.path(), 6, Some(10), &history("c", Some(id(1, 5)))).unwrap();
    assert_eq!(seen, (6..=10).map(|i| id(1, i)).collect::<Vec<_>>());
    let mine = History {
        after: Some(id(1, 5)),
        cluster_id: String::new(),
        lineage: "restored-1".into(),
        keys: None,
    };
    let (seen, r) = run(d.path(), 6, Some(9), &mine).unwrap();
    assert_eq!(seen, (6..=9).map(|i| id(2, i)).collect::<Vec<_>>());
    assert_eq!(r, Replayed::Complete { last: 9 });
    // The restored history's segments written beside the old ones.
    for p in segments(&d.path().join("restored-1")) {
        let to = d.path().join(p.file_name().unwrap());
        let mut bytes = std::fs::read(&p).unwrap();
        // Re-label them as the original lineage: what an archive shared
        // by two histories holds.
        let (mut h, at) = read_header(&p).unwrap().unwrap();
        h.lineage.clear();
        let mut out = header_bytes(&h.encode_to_vec());
        out.extend_from_slice(&bytes.split_off(at as usize));
        std::fs::write(to, out).unwrap();
    }
    let e = run(d.path(), 6, Some(10), &history("c", Some(id(1, 5)))).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("forks at index 6"), "{msg}");
    assert!(msg.contains(".omlog"), "names the segments: {msg}");
}

/// A gap (the archiving member installed a snapshot) ends the replay
/// where the entries stop; a segment that continues another history
/// (another term at the same index) is refused.
#[test]
fn a_gap_and_another_history() {
    let d = tempfile::tempdir().unwrap();
    let all: Vec<Entry> = (1..=12).map(|i| entry(1, i)).collect();
    write(d.path(), "c", "", None, &all[..5]);
    write(d.path(), "c", "", Some(id(1, 8)), &all[8..]);
    let (_, r) = run(d.path(), 1, Some(12), &history("c", None)).unwrap();
    assert_eq!(
        r,
        Replayed::Gap {
            last: 5,
            missing: 6
        }
    );

    let e = tempfile::tempdir().unwrap();
    write(e.path(), "c", "", None, &all[..5]);
    let other: Vec<Entry> = (6..=8).map(|i| entry(2, i)).collect();
    write(e.path(), "c", "", Some(id(2, 5)), &other);
    let err = run(e.path(), 1, Some(8), &history("c", None)).unwrap_err();
    assert!(err.to_string().contains("another history"), "{err}");
    // From a backup that did hold (2, 5), the same archive replays.
    let (seen, _) = run(e.path(), 6, Some(8), &history("c", Some(id(2, 5)))).unwrap();
    assert_eq!(seen, (6..=8).map(|i| id(2, i)).collect::<Vec<_>>());
}

/// A segment written before headers existed is still read.
#[test]
fn a_segment_without_header_is_read() {
    let d = tempfile::tempdir().unwrap();
    let mut bytes = Vec::new();
    for i in 1..=4 {
        let b = codec::encode_entry(&entry(1, i));
        bytes.extend_from_slice(&i.to_be_bytes());
        bytes.extend_from_slice(&(b.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&b).to_be_bytes());
        bytes.extend_from_slice(&b);
    }
    std::fs::write(d.path().join(format!("{:020}.omlog", 1)), bytes).unwrap();
    let (seen, r) = run(d.path(), 2, Some(4), &history("c", Some(id(1, 1)))).unwrap();
    assert_eq!(seen, (2..=4).map(|i| id(1, i)).collect::<Vec<_>>());
    assert_eq!(r, Replayed::Complete { last: 4 });
}

fn keys(text: &str) -> Arc<MacKeys> {
    Arc::new(MacKeys::parse(text).unwrap())
}

const K1: &str = "k1 0101010101010101010101010101010101010101010101010101010101010101";
const K2: &str = "k2 0202020202020202020202020202020202020202020202020202020202020202";

/// A signed archive replays under its key (and unverified without one);
/// a record altered in place, a record appended without the key, another
/// key, and an unsigned segment are refused when a key is given, naming
/// the segment.
#[test]
fn signed_segments_refuse_what_was_altered_or_added() {
    let d = tempfile::tempdir().unwrap();
    let all: Vec<Entry> = (1..=6).map(|i| entry(1, i)).collect();
    write_signed(d.path(), "c", "", None, &all, Some(keys(K1)));
    let signed = History {
        keys: Some(keys(&format!("{K2}\n{K1}"))),
        ..history("c", None)
    };
    let (seen, r) = run(d.path(), 1, Some(6), &signed).unwrap();
    assert_eq!((seen.len(), r), (6, Replayed::Complete { last: 6 }));
    let (seen, _) = run(d.path(), 1, Some(6), &history("c", None)).unwrap();
    assert_eq!(seen.len(), 6);
    let e = run(
        d.path(),
        1,
        Some(6),
        &History {
            keys: Some(keys(K2)),
            ..history("c", None)
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("\"k1\""), "{e}");

    let seg = segments(d.path()).pop().unwrap();
    let good = std::fs::read(&seg).unwrap();
    // Appended: entry 7 with a made-up tag.
    let bytes = codec::encode_entry(&entry(1, 7));
    let mut more = good.clone();
    more.extend_from_slice(&7u64.to_be_bytes());
    more.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    more.extend_from_slice(&crc32fast::hash(&bytes).to_be_bytes());
    more.extend_from_slice(&bytes);
    more.extend_from_slice(&[0u8; TAG_LEN]);
    std::fs::write(&seg, &more).unwrap();
    let e = run(d.path(), 1, Some(7), &signed).unwrap_err().to_string();
    assert!(e.contains("index 7") && e.contains(".omlog"), "{e}");
    // Altered in place: a tag's byte (the CRC still holds).
    let mut altered = good.clone();
    let at = altered.len() - 1;
    altered[at] ^= 1;
    std::fs::write(&seg, &altered).unwrap();
    assert!(run(d.path(), 1, Some(6), &signed).is_err());
    // A torn tail is not tampering: replay stops where the records stop.
    std::fs::write(&seg, &good[..good.len() - 5]).unwrap();
    let (seen, r) = run(d.path(), 1, None, &signed).unwrap();
    assert_eq!((seen.len(), r), (5, Replayed::Complete { last: 5 }));

    let u = tempfile::tempdir().unwrap();
    write(u.path(), "c", "", None, &all);
    let e = run(u.path(), 1, Some(6), &signed).unwrap_err().to_string();
    assert!(e.contains("unsigned") && e.contains(".omlog"), "{e}");
}
