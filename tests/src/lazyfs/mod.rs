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
//! An fsync can also be made to fail (`LazyFs::fail_fsyncs`), as a disk's
//! write-back error reaches it: EIO, and the data it covered is lost.
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
}

/// What the filesystem has seen.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub syncs: u64,
    pub failed_syncs: u64,
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

impl Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = self.state();
        match self
            .child(&st, parent, name)
            .and_then(|p| self.attr(&mut st, &p))
        {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let mut st = self.state();
        match self.path(&st, ino).and_then(|p| self.attr(&mut st, &p)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.state();
        let r = (|| {
            let path = self.path(&st, ino)?;
            if let Some(m) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m))
                    .map_err(errno)?;
            }
            if let Some(s) = size {
                // A truncation is data: it waits for the next fsync too.
                self.dirty(&mut st, ino, fh)?.truncate(s);
            }
            self.attr(&mut st, &path)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut st = self.state();
        let r = self.child(&st, parent, name).and_then(|p| {
            std::fs::create_dir(&p).map_err(errno)?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode & 0o7777))
                .map_err(errno)?;
            self.attr(&mut st, &p)
        });
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut st = self.state();
        let r = self.child(&st, parent, name).and_then(|p| {
            let ino = std::fs::symlink_metadata(&p)
                .ok()
                .and_then(|m| st.by_underlying.get(&m.ino()).copied());
            std::fs::remove_file(&p).map_err(errno)?;
            if let Some(ino) = ino {
                Fs::drop_if_gone(&mut st, ino);
            }
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let st = self.state();
        match self
            .child(&st, parent, name)
            .and_then(|p| std::fs::remove_dir(p).map_err(errno))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut st = self.state();
        let r = (|| {
            let from = self.child(&st, parent, name)?;
            let to = self.child(&st, newparent, newname)?;
            let replaced = std::fs::symlink_metadata(&to)
                .ok()
                .and_then(|m| st.by_underlying.get(&m.ino()).copied());
            std::fs::rename(&from, &to).map_err(errno)?;
            // Paths under a renamed directory move with it.
            for p in st.paths.values_mut() {
                if let Ok(rest) = p.strip_prefix(&from) {
                    *p = if rest.as_os_str().is_empty() {
                        to.clone()
                    } else {
                        to.join(rest)
                    };
                }
            }
            if let Some(ino) = replaced {
                Fs::drop_if_gone(&mut st, ino);
            }
            Ok(())
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut st = self.state();
        let r = (|| {
            let from = self.path(&st, ino)?;
            let to = self.child(&st, newparent, newname)?;
            std::fs::hard_link(&from, &to).map_err(errno)?;
            let a = self.attr(&mut st, &to)?;
            // Either name reaches the inode.
            st.paths.insert(ino.0, from);
            Ok(a)
        })();
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut st = self.state();
        let r = (|| {
            let path = self.path(&st, ino)?;
            let fh = self.handle(&mut st, ino.0, &path)?;
            if flags.0 & libc::O_TRUNC != 0 {
                self.dirty(&mut st, ino, Some(fh))?.truncate(0);
            }
            Ok(fh)
        })();
        match r {
            Ok(fh) => reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.state();
        st.handles.remove(&fh.0);
        Fs::drop_if_gone(&mut st, ino.0);
        reply.ok();
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = self.state();
        let r = (|| {
            let p = self.child(&st, parent, name)?;
            let mut o = OpenOptions::new();
            o.write(true).create(true).mode(mode & 0o7777);
            if flags & libc::O_EXCL != 0 {
                o.create_new(true);
            }
            drop(o.open(&p).map_err(errno)?);
            let a = self.attr(&mut st, &p)?;
            let fh = self.handle(&mut st, a.ino.0, &p)?;
            if flags & libc::O_TRUNC != 0 {
                self.dirty(&mut st, a.ino, Some(fh))?.truncate(0);
            }
            Ok((self.attr(&mut st, &p)?, fh))
        })();
        match r {
            Ok((a, fh)) => reply.created(&TTL, &a, Generation(0), fh, FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut st = self.state();
        let file = st.handles.get(&fh.0).map(|(_, f)| f.clone());
        let r = match st.dirty.get_mut(&ino.0) {
            Some(d) => d.read(offset, size as usize).map_err(errno),
            None => file.ok_or(Errno::EBADF).and_then(|f| {
                let mut buf = vec![0u8; size as usize];
                let mut got = 0;
                while got < buf.len() {
                    match f.read_at(&mut buf[got..], offset + got as u64) {
                        Ok(0) => break,
                        Ok(k) => got += k,
                        Err(e) => return Err(errno(e)),
                    }
                }
                buf.truncate(got);
                Ok(buf)
            }),
        };
        match r {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut st = self.state();
        match self
            .dirty(&mut st, ino, Some(fh))
            .and_then(|d| d.write(offset, data).map_err(errno))
        {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() makes nothing durable.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.state();
        st.stats.syncs += 1;
        if st.lying {
            reply.ok();
            return;
        }
        if st.failing > 0 {
            // As Linux does: the write-back failed, the pages are dropped
            // (marked clean), and a later fsync has nothing to report.
            st.failing -= 1;
            st.stats.failed_syncs += 1;
            st.dirty.remove(&ino.0);
            reply.error(Errno::EIO);
            return;
        }
        let r = match st.dirty.remove(&ino.0) {
            Some(mut d) => d.sync(),
            None => Ok(()),
        };
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut st = self.state();
        let r = (|| {
            let dir = self.path(&st, ino)?;
            let mut names: Vec<(PathBuf, std::ffi::OsString)> = std::fs::read_dir(&dir)
                .map_err(errno)?
                .filter_map(|e| e.ok())
                .map(|e| (e.path(), e.file_name()))
                .collect();
            names.sort_by(|a, b| a.1.as_bytes().cmp(b.1.as_bytes()));
            let mut all = vec![
                (ino, FileType::Directory, ".".into()),
                (ino, FileType::Directory, "..".into()),
            ];
            for (p, n) in names {
                if let Ok(a) = self.attr(&mut st, &p) {
                    all.push((a.ino, a.kind, n));
                }
            }
            Ok(all)
        })();
        match r {
            Ok(all) => {
                for (i, (ino, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(ino, i as u64 + 1, kind, &name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // Names reach the underlying directory at once.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // SAFETY: statvfs fills the struct it is given.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let path = std::ffi::CString::new(self.root.as_os_str().as_bytes()).expect("no NUL");
        if unsafe { libc::statvfs(path.as_ptr(), &mut s) } != 0 {
            reply.error(Errno::EIO);
            return;
        }
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut st = self.state();
        let r = self.dirty(&mut st, ino, Some(fh)).and_then(|d| {
            use std::os::fd::AsRawFd;
            // SAFETY: a plain syscall on a file this owns.
            let rc =
                unsafe { libc::fallocate(d.file.as_raw_fd(), mode, offset as i64, length as i64) };
            if rc != 0 {
                return Err(errno(io::Error::last_os_error()));
            }
            if mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
                d.size = d.size.max(offset + length);
            }
            Ok(())
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
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
