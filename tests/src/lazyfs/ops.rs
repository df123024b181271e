//! The FUSE operations of `lazyfs`: names and attributes pass through to
//! the underlying directory, file data goes to `Dirty` until an fsync.

use super::*;

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
        if self.frozen() {
            reply.error(Errno::EIO);
            return;
        }
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
        if self.frozen() {
            reply.error(Errno::EIO);
            return;
        }
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
        if self.frozen() {
            reply.error(Errno::EIO);
            return;
        }
        let mut st = self.state();
        let r = self.child(&st, parent, name).and_then(|p| {
            let ino = Fs::known(&st, &p);
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
        if self.frozen() {
            reply.error(Errno::EIO);
            return;
        }
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
        if self.frozen() {
            reply.error(Errno::EIO);
            return;
        }
        let mut st = self.state();
        let r = (|| {
            let from = self.child(&st, parent, name)?;
            let to = self.child(&st, newparent, newname)?;
            let replaced = Fs::known(&st, &to);
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
        if self.frozen() {
            reply.error(Errno::EIO);
            return;
        }
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
        if self.frozen() {
            reply.error(Errno::EIO);
            return;
        }
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
        if let Some(suffix) = &st.failing_reads
            && st
                .paths
                .get(&ino.0)
                .is_some_and(|p| p.to_string_lossy().ends_with(suffix.as_str()))
        {
            st.stats.failed_reads += 1;
            return reply.error(Errno::EIO);
        }
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
        let state = &mut *st;
        if !state.frozen
            && let Some(t) = state.trigger.as_mut()
        {
            let path = state.paths.get(&ino.0);
            let name = path.and_then(|p| p.file_name()).unwrap_or_default();
            if t(&name.to_string_lossy(), data) {
                state.frozen = true;
                state.trigger = None;
            }
        }
        if st.frozen {
            reply.error(Errno::EIO);
            return;
        }
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
        if self.frozen() {
            reply.error(Errno::EIO);
            return;
        }
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
        if self.frozen() {
            reply.error(Errno::EIO);
            return;
        }
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
        if self.frozen() {
            reply.error(Errno::EIO);
            return;
        }
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
