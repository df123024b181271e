//! A filesystem that loses what was not synced, for power-cut tests, in
//! the manner of Jepsen's LazyFS: a FUSE passthrough over a directory in
//! which file data written lands in the underlying file only when an
//! `fsync` or `fdatasync` of that file covers it. Until then it is held in
//! this process's memory (and read back from there), and a power cut
//! (`LazyFs::cut`) discards it. Everything else (creating, renaming,
//! linking and removing names, directories, `fallocate`) reaches the
//! underlying directory at once, as LazyFS has it: the cut models lost
//! page-cache data, not a lost journal.
//!
//! A cut can also be harsher than losing everything unsynced
//! (`Cut::Scramble`): the kernel writes dirty pages back whenever it likes
//! and in any order, so each unsynced page is then kept, lost, or torn (a
//! prefix of it written), chosen by a seed.
//!
//! A cut can be aimed (`LazyFs::freeze_when`): from the write a trigger
//! picks on, nothing more reaches the disk, until the cut.
//!
//! An fsync can also be made to fail (`LazyFs::fail_fsyncs`), as a disk's
//! write-back error reaches it: EIO, and the data it covered is lost; and
//! reads of some files (`LazyFs::fail_reads`), as bad sectors do: EIO.
//!
//! Files are opened with direct I/O and attributes are never cached, so
//! the kernel holds no copy of unsynced data that would outlive a cut.
//! Mounting needs root (or `fusermount3`) and `/dev/fuse`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BsdFileFlags, Config, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};

mod dirty;
mod ops;

use dirty::{Dirty, PAGE};
/// Nothing is cached by the kernel.
const TTL: Duration = Duration::ZERO;

/// What a power cut does to data written but not synced.
#[derive(Clone, Copy, Debug)]
pub enum Cut {
    /// All of it is lost (LazyFS's `clear-cache`).
    Lose,
    /// Each page of it is kept, lost or torn (a prefix written), as the
    /// seed chooses: write-back in any order, stopped at any moment.
    Scramble(u64),
}

/// A small deterministic generator for `Cut::Scramble`.
fn next(seed: &mut u64) -> u64 {
    *seed = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    *seed >> 33
}

#[derive(Default)]
struct State {
    /// Inode numbers given to the kernel, by the underlying file's.
    by_underlying: HashMap<u64, u64>,
    /// A path of each inode number (the root is 1).
    paths: HashMap<u64, PathBuf>,
    next_ino: u64,
    /// Unsynced data, by inode number.
    dirty: HashMap<u64, Dirty>,
    /// Open files: each handle's inode number and underlying file (which
    /// outlives a rename or an unlink of its name).
    handles: HashMap<u64, (u64, Arc<File>)>,
    next_fh: u64,
    /// Pages lost, kept and torn by cuts, and bytes synced.
    stats: Stats,
    /// fsync answers success and makes nothing durable (a disk that lies).
    lying: bool,
    /// How many of the next fsyncs fail (EIO), losing what they covered.
    failing: u32,
    /// Reads of files whose name ends so fail (EIO), as a disk's bad
    /// sectors do.
    failing_reads: Option<String>,
    /// Shown each data write (`LazyFs::freeze_when`); the first it accepts
    /// freezes the filesystem.
    trigger: Option<Trigger>,
    /// The moment of a power cut came: the write that froze it and every
    /// change since fail (EIO) and reach nothing, until the cut.
    frozen: bool,
}

/// Decides, from a write's file name and data, whether the power goes now.
pub type Trigger = Box<dyn FnMut(&str, &[u8]) -> bool + Send>;

/// What the filesystem has seen.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub syncs: u64,
    pub failed_syncs: u64,
    pub failed_reads: u64,
    pub pages_lost: u64,
    pub pages_kept: u64,
    pub pages_torn: u64,
}

struct Fs {
    root: PathBuf,
    state: Arc<Mutex<State>>,
}

fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

fn kind(t: std::fs::FileType) -> FileType {
    FileType::from_std(t).unwrap_or(FileType::RegularFile)
}

fn time(s: i64, ns: i64) -> SystemTime {
    if s >= 0 {
        UNIX_EPOCH + Duration::new(s as u64, ns as u32)
    } else {
        UNIX_EPOCH
    }
}

impl Fs {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("lazyfs state")
    }

    /// Whether the filesystem froze (`LazyFs::freeze_when`): a change now
    /// fails.
    fn frozen(&self) -> bool {
        self.state().frozen
    }

    fn path(&self, st: &State, ino: INodeNo) -> Result<PathBuf, Errno> {
        st.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)
    }

    fn child(&self, st: &State, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path(st, parent)?.join(name))
    }

    /// The attributes of `path`, giving it an inode number if new; its size
    /// the unsynced one.
    fn attr(&self, st: &mut State, path: &Path) -> Result<FileAttr, Errno> {
        let m = std::fs::symlink_metadata(path).map_err(errno)?;
        let ino = if path == self.root {
            1
        } else {
            match st.by_underlying.get(&m.ino()) {
                Some(i) => *i,
                None => {
                    st.next_ino += 1;
                    let i = st.next_ino;
                    st.by_underlying.insert(m.ino(), i);
                    i
                }
            }
        };
        st.paths.insert(ino, path.to_path_buf());
        let size = st.dirty.get(&ino).map_or(m.len(), |d| d.size);
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: m.blocks(),
            atime: time(m.atime(), m.atime_nsec()),
            mtime: time(m.mtime(), m.mtime_nsec()),
            ctime: time(m.ctime(), m.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind: kind(m.file_type()),
            perm: (m.permissions().mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: PAGE as u32,
            flags: 0,
        })
    }

    /// The unsynced data of `ino`, begun from its open file `fh` or its
    /// path.
    fn dirty<'a>(
        &self,
        st: &'a mut State,
        ino: INodeNo,
        fh: Option<FileHandle>,
    ) -> Result<&'a mut Dirty, Errno> {
        if !st.dirty.contains_key(&ino.0) {
            let file = match fh.and_then(|f| st.handles.get(&f.0)) {
                Some((_, f)) => f.try_clone().map_err(errno)?,
                None => {
                    let path = st.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)?;
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(path)
                        .map_err(errno)?
                }
            };
            st.dirty.insert(ino.0, Dirty::open(file).map_err(errno)?);
        }
        Ok(st.dirty.get_mut(&ino.0).expect("just inserted"))
    }

    /// Opens `path` (inode `ino`) for a new handle.
    fn handle(&self, st: &mut State, ino: u64, path: &Path) -> Result<FileHandle, Errno> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .or_else(|_| File::open(path))
            .map_err(errno)?;
        st.next_fh += 1;
        st.handles.insert(st.next_fh, (ino, Arc::new(file)));
        Ok(FileHandle(st.next_fh))
    }

    /// The inode number given to what `path` names, if it has one.
    fn known(st: &State, path: &Path) -> Option<u64> {
        let m = std::fs::symlink_metadata(path).ok()?;
        st.by_underlying.get(&m.ino()).copied()
    }

    /// Forgets the unsynced data of a file whose last name went and that
    /// no one has open.
    fn drop_if_gone(st: &mut State, ino: u64) {
        let open = st.handles.values().any(|(i, _)| *i == ino);
        if let Some(d) = st.dirty.get(&ino)
            && !open
            && d.file.metadata().is_ok_and(|m| m.nlink() == 0)
        {
            st.dirty.remove(&ino);
        }
    }
}

/// `n` lazy filesystems, or `None` once it said why they cannot be
/// mounted here ("skipped: …", for a test to return on).
pub fn mounts(n: usize) -> Option<Vec<LazyFs>> {
    let mut all = Vec::new();
    for _ in 0..n {
        match LazyFs::mount() {
            Ok(fs) => all.push(fs),
            Err(why) => {
                eprintln!("skipped: {why}");
                return None;
            }
        }
    }
    Some(all)
}

/// A lazy filesystem mounted over a directory; unmounted on drop.
pub struct LazyFs {
    mount: PathBuf,
    state: Arc<Mutex<State>>,
    session: Option<fuser::BackgroundSession>,
    _under: tempfile::TempDir,
    _at: tempfile::TempDir,
}

impl LazyFs {
    /// Mounts a new lazy filesystem over a new directory; an `Err` says
    /// why it cannot be mounted here (no `/dev/fuse`, not root).
    pub fn mount() -> Result<LazyFs, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("no /dev/fuse".into());
        }
        let under = tempfile::tempdir().map_err(|e| e.to_string())?;
        let at = tempfile::tempdir().map_err(|e| e.to_string())?;
        // The root is inode 1; others are numbered from 2.
        let mut st = State {
            next_ino: 1,
            ..State::default()
        };
        st.paths.insert(1, under.path().to_path_buf());
        let state = Arc::new(Mutex::new(st));
        let fs = Fs {
            root: under.path().to_path_buf(),
            state: state.clone(),
        };
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("om-lazyfs".into()),
            MountOption::RW,
            MountOption::DefaultPermissions,
        ];
        let session = fuser::spawn_mount2(fs, at.path(), &config)
            .map_err(|e| format!("mounting a FUSE filesystem: {e}"))?;
        Ok(LazyFs {
            mount: at.path().to_path_buf(),
            state,
            session: Some(session),
            _under: under,
            _at: at,
        })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// A power cut: what was written and not synced is lost (or, with
    /// `Cut::Scramble`, partly written back). Stop the processes using the
    /// filesystem first (kill -9): the cut is the moment they died.
    pub fn cut(&self, how: Cut) -> Stats {
        let mut st = self.state.lock().expect("lazyfs state");
        st.frozen = false;
        st.trigger = None;
        let dirty = std::mem::take(&mut st.dirty);
        let mut stats = st.stats;
        for (_, d) in dirty {
            match how {
                Cut::Lose => stats.pages_lost += d.pages.len() as u64,
                Cut::Scramble(seed) => {
                    let mut s = seed ^ d.size;
                    let mut keep = Vec::new();
                    for n in d.pages.keys() {
                        match next(&mut s) % 3 {
                            0 => stats.pages_lost += 1,
                            1 => {
                                stats.pages_kept += 1;
                                keep.push((*n, PAGE as usize));
                            }
                            _ => {
                                stats.pages_torn += 1;
                                keep.push((*n, (next(&mut s) % PAGE) as usize));
                            }
                        }
                    }
                    // The size may or may not have reached the disk.
                    let synced = d.file.metadata().map_or(0, |m| m.len());
                    let size = if next(&mut s).is_multiple_of(2) {
                        synced
                    } else {
                        d.size
                    };
                    let _ = d.persist(keep.into_iter(), size);
                }
            }
        }
        st.stats = stats;
        stats
    }

    /// Makes fsync lie (`true`: it succeeds and makes nothing durable) or
    /// tell the truth again: to show that a test finds what a lying disk
    /// loses.
    pub fn lie_about_fsync(&self, lying: bool) {
        self.state.lock().expect("lazyfs state").lying = lying;
    }

    /// Makes the next `n` fsyncs fail with EIO, each losing the unsynced
    /// data of the file it was asked for (Linux's write-back error).
    pub fn fail_fsyncs(&self, n: u32) {
        self.state.lock().expect("lazyfs state").failing = n;
    }

    /// Makes every read of a file whose name ends with `suffix` fail with
    /// EIO (`None`: reads succeed again).
    pub fn fail_reads(&self, suffix: Option<&str>) {
        self.state.lock().expect("lazyfs state").failing_reads = suffix.map(str::to_string);
    }

    /// Aims the next power cut: `trigger` sees each data write (the file's
    /// name and the data) until it says yes; that write and every change
    /// after it then fail with EIO and reach nothing, as if the power went
    /// just before it. Kill the processes, then `cut`, which thaws it.
    pub fn freeze_when(&self, trigger: impl FnMut(&str, &[u8]) -> bool + Send + 'static) {
        let mut st = self.state.lock().expect("lazyfs state");
        st.trigger = Some(Box::new(trigger));
        st.frozen = false;
    }

    /// Whether a `freeze_when` trigger fired.
    pub fn frozen(&self) -> bool {
        self.state.lock().expect("lazyfs state").frozen
    }

    /// What the filesystem has seen so far.
    pub fn stats(&self) -> Stats {
        self.state.lock().expect("lazyfs state").stats
    }
}

impl Drop for LazyFs {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Through the kernel: what was fsynced survives a cut, the rest is
    /// lost; names stay.
    #[test]
    fn a_cut_loses_what_was_not_synced() {
        use std::io::Write;
        let fs = match LazyFs::mount() {
            Ok(fs) => fs,
            Err(why) => {
                eprintln!("skipped: {why}");
                return;
            }
        };
        let dir = fs.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        let mut synced = File::create(dir.join("synced")).unwrap();
        synced.write_all(b"kept").unwrap();
        synced.sync_all().unwrap();
        synced.write_all(b" and lost").unwrap();
        let mut unsynced = File::create(dir.join("unsynced")).unwrap();
        unsynced.write_all(&vec![7u8; 10_000]).unwrap();
        assert_eq!(std::fs::read(dir.join("synced")).unwrap(), b"kept and lost");
        assert_eq!(std::fs::read(dir.join("unsynced")).unwrap().len(), 10_000);
        std::fs::rename(dir.join("unsynced"), dir.join("renamed")).unwrap();
        drop((synced, unsynced));
        let stats = fs.cut(Cut::Lose);
        assert!(stats.pages_lost >= 4, "{stats:?}");
        assert_eq!(std::fs::read(dir.join("synced")).unwrap(), b"kept");
        assert_eq!(std::fs::read(dir.join("renamed")).unwrap(), b"");
        assert!(!dir.join("unsynced").exists());
    }
}
