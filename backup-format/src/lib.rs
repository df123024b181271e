//! The backup directory's format, shared by the server (`om restore`) and
//! the client that takes backups (`omctl backup`).
//!
//! A backup directory `DEST` holds
//! - `objects/SHA256`: the files of every backup, named by the SHA-256 of
//!   their bytes, so a file two backups share is stored once; and
//! - `ID/manifest.json`: one backup: where it was taken (cluster, node,
//!   applied log id, membership), every table's entry count and digest, and
//!   its files (name in the store, bytes, SHA-256); and
//! - `ID/manifest.mac`, with a backup key (`keys`): `KEY_ID HEX`, the
//!   HMAC-SHA256 of the manifest's bytes. The manifest names every file by
//!   its digest, so the tag vouches for every byte of the backup.
//!
//! A backup exists once its manifest does: objects are written (and synced)
//! first, the manifest last, by rename. Writers (taking a backup, `prune`)
//! hold `DEST/.lock` (`lock`), so a prune never removes the objects of a
//! backup being written. Shipping `DEST` to object storage with any sync
//! tool is safe in that order too: objects never change, and a copied
//! manifest names only objects that were complete before it.

pub mod keys;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use ring::digest::{Context, SHA256};
use serde::{Deserialize, Serialize};

/// The manifest's version.
pub const FORMAT: u32 = 1;
pub const MANIFEST: &str = "manifest.json";
pub const MANIFEST_MAC: &str = "manifest.mac";
pub const OBJECTS: &str = "objects";
const LOCK: &str = ".lock";
/// Prefix of a file being written (renamed into place once complete).
pub const TMP_PREFIX: &str = ".tmp-";
/// Largest manifest read back (a store has some hundreds of files).
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub id: String,
    /// When the backup was taken (RFC 3339, UTC).
    pub created: String,
    pub cluster_id: String,
    /// The member that took the copy.
    pub node_id: u64,
    pub applied_index: u64,
    pub applied_term: u64,
    pub applied_leader: u64,
    /// The leader's time at the read barrier (ms since the Unix epoch).
    pub time_ms: u64,
    pub members: Vec<Member>,
    pub tables: Vec<Table>,
    pub store_identity: String,
    pub files: Vec<FileEntry>,
    /// Bytes of all files, and of those this backup transferred (the rest
    /// it shares with earlier backups in the same directory).
    pub bytes: u64,
    pub new_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub node_id: u64,
    pub raft_addr: String,
    pub grpc_addr: String,
    pub voter: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Table {
    pub name: String,
    pub entries: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    /// The backup is damaged or incomplete; nothing was restored from it.
    #[error("{0}")]
    Invalid(String),
}

/// Maps an I/O error to `FormatError::Io`, saying what was being done.
pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> FormatError {
    let what = what.into();
    move |err| FormatError::Io { what, err }
}

/// A name that is a plain file name of the store.
pub fn safe_name(n: &str) -> bool {
    !n.is_empty()
        && n != "."
        && n != ".."
        && n.len() <= 255
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// Creates `p` (and its parents) and makes it private: 0700. A backup holds
/// the whole state, credentials included, so nobody but its owner reads it.
pub fn private_dir(p: &Path) -> Result<(), FormatError> {
    use std::os::unix::fs::PermissionsExt;
    fs::create_dir_all(p).map_err(io(format!("creating {}", p.display())))?;
    fs::set_permissions(p, fs::Permissions::from_mode(0o700))
        .map_err(io(format!("making {} private", p.display())))
}

/// Creates (or truncates) file `p`, readable by its owner only: 0600.
pub fn private_file(p: &Path) -> Result<File, FormatError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let f = File::options()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(p)
        .map_err(io(format!("writing {}", p.display())))?;
    // A file that was there before keeps its mode on open: tighten it.
    f.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(io(format!("making {} private", p.display())))?;
    Ok(f)
}

pub fn sync_dir(p: &Path) -> Result<(), FormatError> {
    File::open(p)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("syncing {}", p.display())))
}

/// Holds `DEST/.lock` exclusively while it lives.
pub struct DestLock(#[allow(dead_code)] File);

pub fn lock(dest: &Path) -> Result<DestLock, FormatError> {
    private_dir(dest)?;
    private_dir(&dest.join(OBJECTS))?;
    let p = dest.join(LOCK);
    let f = {
        use std::os::unix::fs::OpenOptionsExt;
        File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&p)
            .map_err(io(format!("opening {}", p.display())))?
    };
    match f.try_lock() {
        Ok(()) => Ok(DestLock(f)),
        Err(fs::TryLockError::WouldBlock) => Err(FormatError::Invalid(format!(
            "another backup or prune is writing {}; try again when it ends",
            dest.display()
        ))),
        Err(fs::TryLockError::Error(e)) => Err(io(format!("locking {}", p.display()))(e)),
    }
}

/// Reads and checks one manifest.
pub fn read_manifest(dir: &Path) -> Result<Manifest, FormatError> {
    let p = dir.join(MANIFEST);
    let f = File::open(&p).map_err(io(format!("reading {}", p.display())))?;
    let mut text = String::new();
    f.take(MAX_MANIFEST_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(io(format!("reading {}", p.display())))?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(FormatError::Invalid(format!(
            "{} is larger than {MAX_MANIFEST_BYTES} bytes",
            p.display()
        )));
    }
    let m: Manifest = serde_json::from_str(&text)
        .map_err(|e| FormatError::Invalid(format!("{} does not parse: {e}", p.display())))?;
    if m.format != FORMAT {
        return Err(FormatError::Invalid(format!(
            "{} has format {}; this version reads format {FORMAT}",
            p.display(),
            m.format
        )));
    }
    let mut names = BTreeSet::new();
    for f in &m.files {
        if !safe_name(&f.name) || !is_sha256(&f.sha256) || !names.insert(f.name.as_str()) {
            return Err(FormatError::Invalid(format!(
                "{} names a bad or repeated file {:?}",
                p.display(),
                f.name
            )));
        }
    }
    if !names.contains("CURRENT") {
        return Err(FormatError::Invalid(format!(
            "{} has no CURRENT file: not a store",
            p.display()
        )));
    }
    if m.files.iter().map(|f| f.bytes).sum::<u64>() != m.bytes {
        return Err(FormatError::Invalid(format!(
            "{}: its files' sizes do not add up to its bytes",
            p.display()
        )));
    }
    Ok(m)
}

/// Every complete backup in `dest` (those with a manifest), oldest first.
/// A manifest that does not read is an error: nothing in `dest` is skipped
/// silently.
pub fn list(dest: &Path) -> Result<Vec<Manifest>, FormatError> {
    let mut out = Vec::new();
    let entries = fs::read_dir(dest).map_err(io(format!("reading {}", dest.display())))?;
    for e in entries {
        let e = e.map_err(io(format!("reading {}", dest.display())))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == OBJECTS || name.starts_with('.') || !e.path().join(MANIFEST).exists() {
            continue;
        }
        let m = read_manifest(&e.path())?;
        if m.id != name {
            return Err(FormatError::Invalid(format!(
                "{} holds the manifest of backup {}",
                e.path().display(),
                m.id
            )));
        }
        out.push(m);
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// The backup `path` names: a backup directory (`DEST/ID`), or `DEST` for
/// its newest backup. Returns `DEST` and the manifest.
pub fn resolve(path: &Path) -> Result<(PathBuf, Manifest), FormatError> {
    if path.join(MANIFEST).exists() {
        let m = read_manifest(path)?;
        let dest = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        return Ok((dest, m));
    }
    let newest = list(path)?.pop().ok_or_else(|| {
        FormatError::Invalid(format!("{} holds no complete backup", path.display()))
    })?;
    Ok((path.to_path_buf(), newest))
}

/// SHA-256 (hex) and length of a file's bytes.
pub fn hash_file(p: &Path) -> std::io::Result<(String, u64)> {
    let mut f = File::open(p)?;
    let mut ctx = Context::new(&SHA256);
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            break;
        }
        ctx.update(&buf[..k]);
        n += k as u64;
    }
    Ok((hex::encode(ctx.finish().as_ref()), n))
}

/// What `verify` read.
#[derive(Debug, Clone, Default)]
pub struct Verified {
    pub files: usize,
    pub bytes: u64,
}

/// Re-reads every byte of `m`'s files in `dest` and checks their sizes and
/// digests. Every problem is reported, not only the first.
pub fn verify(dest: &Path, m: &Manifest) -> Result<Verified, FormatError> {
    let mut problems = Vec::new();
    let mut done = Verified::default();
    for f in &m.files {
        let p = dest.join(OBJECTS).join(&f.sha256);
        match hash_file(&p) {
            Ok((sha, n)) if sha == f.sha256 && n == f.bytes => {
                done.files += 1;
                done.bytes += n;
            }
            Ok((_, n)) if n != f.bytes => problems.push(format!(
                "{} ({}): {n} bytes, the manifest says {}",
                f.name, f.sha256, f.bytes
            )),
            Ok(_) => problems.push(format!(
                "{} ({}): its bytes do not match their digest",
                f.name, f.sha256
            )),
            Err(e) => problems.push(format!("{} ({}): {e}", f.name, f.sha256)),
        }
    }
    if problems.is_empty() {
        return Ok(done);
    }
    let n = problems.len();
    problems.truncate(10);
    Err(FormatError::Invalid(format!(
        "backup {} in {} is damaged: {n} of {} files fail: {}",
        m.id,
        dest.display(),
        m.files.len(),
        problems.join("; ")
    )))
}

/// What `prune` removed.
#[derive(Debug, Clone, Default)]
pub struct Pruned {
    pub backups: Vec<String>,
    pub objects: usize,
    pub bytes: u64,
}

/// Keeps the newest `keep` backups in `dest` and removes the others, with
/// every object no kept backup names, and what interrupted backups left.
pub fn prune(dest: &Path, keep: usize) -> Result<Pruned, FormatError> {
    if keep == 0 {
        return Err(FormatError::Invalid(
            "--keep must be at least 1: prune never removes every backup".into(),
        ));
    }
    let _lock = lock(dest)?;
    let all = list(dest)?;
    let cut = all.len().saturating_sub(keep);
    let mut out = Pruned::default();
    for m in &all[..cut] {
        let d = dest.join(&m.id);
        // The manifest first: a backup without one no longer exists.
        fs::remove_file(d.join(MANIFEST)).map_err(io(format!("removing {}", d.display())))?;
        fs::remove_dir_all(&d).map_err(io(format!("removing {}", d.display())))?;
        out.backups.push(m.id.clone());
    }
    // Directories of backups that never got a manifest.
    for e in fs::read_dir(dest).map_err(io(format!("reading {}", dest.display())))? {
        let e = e.map_err(io(format!("reading {}", dest.display())))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name != OBJECTS
            && !name.starts_with('.')
            && e.path().is_dir()
            && !e.path().join(MANIFEST).exists()
        {
            fs::remove_dir_all(e.path()).map_err(io(format!("removing {}", e.path().display())))?;
        }
    }
    let kept: BTreeSet<&str> = all[cut..]
        .iter()
        .flat_map(|m| m.files.iter().map(|f| f.sha256.as_str()))
        .collect();
    let objects = dest.join(OBJECTS);
    for e in fs::read_dir(&objects).map_err(io(format!("reading {}", objects.display())))? {
        let e = e.map_err(io(format!("reading {}", objects.display())))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if kept.contains(name.as_str()) {
            continue;
        }
        let bytes = e.metadata().map(|m| m.len()).unwrap_or(0);
        fs::remove_file(e.path()).map_err(io(format!("removing {}", e.path().display())))?;
        out.objects += 1;
        out.bytes += bytes;
    }
    sync_dir(&objects)?;
    sync_dir(dest)?;
    Ok(out)
}

/// Files earlier backups in `dest` hold, by (store identity, name, bytes):
/// a file of the same store identity, name and size is that file (SST files
/// never change once written, and a store never reuses a file's number).
pub fn reusable(dest: &Path) -> Result<HashMap<(String, String, u64), String>, FormatError> {
    let mut out = HashMap::new();
    for m in list(dest)? {
        for f in m.files {
            if f.name.ends_with(".sst") && !m.store_identity.is_empty() {
                out.insert((m.store_identity.clone(), f.name, f.bytes), f.sha256);
            }
        }
    }
    // Only objects that are really there (and of the right size).
    out.retain(|_, sha| {
        fs::metadata(dest.join(OBJECTS).join(sha.as_str())).is_ok_and(|md| md.is_file())
    });
    Ok(out)
}

/// Writes `m` as `DEST/ID/manifest.json`, last; with `keys`, its tag
/// (`manifest.mac`) before it.
pub fn write_manifest(
    dest: &Path,
    m: &Manifest,
    keys: Option<&keys::MacKeys>,
) -> Result<(), FormatError> {
    let dir = dest.join(&m.id);
    private_dir(&dir)?;
    let tmp = dir.join(format!("{TMP_PREFIX}{MANIFEST}"));
    let text = serde_json::to_vec_pretty(m)
        .map_err(|e| FormatError::Invalid(format!("encoding the manifest: {e}")))?;
    if let Some(k) = keys {
        let line = format!("{} {}\n", k.current(), hex::encode(k.tag(&[&text])));
        let p = dir.join(MANIFEST_MAC);
        let mut f = private_file(&p)?;
        f.write_all(line.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io(format!("writing {}", p.display())))?;
    }
    let mut f = private_file(&tmp)?;
    f.write_all(&text)
        .and_then(|()| f.sync_all())
        .map_err(io(format!("writing {}", tmp.display())))?;
    fs::rename(&tmp, dir.join(MANIFEST)).map_err(io(format!("writing {}", dir.display())))?;
    sync_dir(&dir)?;
    sync_dir(dest)
}

/// Checks the backup in `dir` (`DEST/ID`) against its tag under `keys`:
/// the key id it was signed under. A manifest without a tag, or whose tag
/// does not match its bytes, is refused naming the file.
pub fn authenticate(dir: &Path, keys: &keys::MacKeys) -> Result<String, FormatError> {
    let read = |name: &str, max: u64| -> Result<Vec<u8>, FormatError> {
        let p = dir.join(name);
        let f = File::open(&p).map_err(io(format!("reading {}", p.display())))?;
        let mut bytes = Vec::new();
        f.take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(io(format!("reading {}", p.display())))?;
        Ok(bytes)
    };
    let manifest = dir.join(MANIFEST);
    let mac = dir.join(MANIFEST_MAC);
    if !mac.exists() {
        return Err(FormatError::Invalid(format!(
            "{} carries no tag ({} is missing): the backup is not authenticated, and a backup \
             key was given",
            manifest.display(),
            mac.display()
        )));
    }
    let text = read(MANIFEST, MAX_MANIFEST_BYTES)?;
    let line = String::from_utf8(read(MANIFEST_MAC, 1024)?).unwrap_or_default();
    let mut words = line.split_whitespace();
    let (Some(id), Some(tag), None) = (words.next(), words.next(), words.next()) else {
        return Err(FormatError::Invalid(format!(
            "{} is not `KEY_ID HEX`",
            mac.display()
        )));
    };
    let tag = hex::decode(tag).unwrap_or_default();
    keys.check(id, &[&text], &tag).map_err(|why| {
        FormatError::Invalid(format!(
            "{} was altered or is not this key's: {why} ({})",
            manifest.display(),
            mac.display()
        ))
    })?;
    Ok(id.to_string())
}

/// Table digests of a manifest, by table name.
pub fn table_digests(m: &Manifest) -> BTreeMap<&str, (&str, u64)> {
    m.tables
        .iter()
        .map(|t| (t.name.as_str(), (t.sha256.as_str(), t.entries)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(id: &str, files: &[(&str, &[u8])], dest: &Path) -> Manifest {
        let mut entries = Vec::new();
        for (name, bytes) in files {
            let sha = hex::encode(ring::digest::digest(&SHA256, bytes).as_ref());
            fs::create_dir_all(dest.join(OBJECTS)).unwrap();
            fs::write(dest.join(OBJECTS).join(&sha), bytes).unwrap();
            entries.push(FileEntry {
                name: name.to_string(),
                bytes: bytes.len() as u64,
                sha256: sha,
            });
        }
        let m = Manifest {
            format: FORMAT,
            id: id.to_string(),
            created: "2026-01-01T00:00:00Z".into(),
            cluster_id: "c".into(),
            node_id: 1,
            applied_index: 7,
            applied_term: 2,
            applied_leader: 1,
            time_ms: 0,
            members: vec![],
            tables: vec![],
            store_identity: "s".into(),
            bytes: entries.iter().map(|f| f.bytes).sum(),
            files: entries,
            new_bytes: 0,
        };
        write_manifest(dest, &m, None).unwrap();
        m
    }

    #[test]
    fn verify_names_every_damaged_file() {
        let d = tempfile::tempdir().unwrap();
        let m = manifest(
            "b1",
            &[("CURRENT", b"MANIFEST-1\n"), ("1.sst", b"abc")],
            d.path(),
        );
        assert_eq!(verify(d.path(), &m).unwrap().files, 2);
        let (dest, found) = resolve(d.path()).unwrap();
        assert_eq!((dest.as_path(), &found), (d.path(), &m));
        let sst = d.path().join(OBJECTS).join(&m.files[1].sha256);
        fs::write(&sst, b"abd").unwrap();
        let e = verify(d.path(), &m).unwrap_err().to_string();
        assert!(e.contains("1.sst") && e.contains("digest"), "{e}");
        fs::remove_file(&sst).unwrap();
        let e = verify(d.path(), &m).unwrap_err().to_string();
        assert!(e.contains("1.sst") && e.contains("1 of 2"), "{e}");
    }

    #[test]
    fn prune_keeps_the_newest_and_their_objects() {
        let d = tempfile::tempdir().unwrap();
        manifest("b1", &[("CURRENT", b"x"), ("1.sst", b"one")], d.path());
        manifest("b2", &[("CURRENT", b"x"), ("2.sst", b"two")], d.path());
        let b3 = manifest("b3", &[("CURRENT", b"x"), ("2.sst", b"two")], d.path());
        fs::create_dir_all(d.path().join("b4")).unwrap();
        let p = prune(d.path(), 1).unwrap();
        assert_eq!(p.backups, vec!["b1".to_string(), "b2".to_string()]);
        assert_eq!(p.objects, 1, "only the object of 1.sst is unreferenced");
        assert_eq!(list(d.path()).unwrap(), vec![b3.clone()]);
        assert!(!d.path().join("b4").exists());
        verify(d.path(), &b3).unwrap();
        assert!(prune(d.path(), 0).is_err());
    }

    #[test]
    fn bad_manifests_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let mut m = manifest("b1", &[("CURRENT", b"x")], d.path());
        m.files[0].name = "../../etc/passwd".into();
        fs::write(
            d.path().join("b1").join(MANIFEST),
            serde_json::to_vec(&m).unwrap(),
        )
        .unwrap();
        assert!(matches!(
            resolve(&d.path().join("b1")),
            Err(FormatError::Invalid(_))
        ));
        fs::write(d.path().join("b1").join(MANIFEST), b"{").unwrap();
        assert!(matches!(list(d.path()), Err(FormatError::Invalid(_))));
        let empty = tempfile::tempdir().unwrap();
        assert!(resolve(empty.path()).is_err());
    }
}
