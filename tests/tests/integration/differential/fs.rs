//! Operations on the FILE_SYSTEM_OPTIMIZED bucket: directories, files written
//! through sessions, and deletes and renames of paths.

use om_client::v1::*;
use rand::Rng;
use rand::seq::IndexedRandom;

use crate::differential::model::{MFsSession, MKey, Model, ancestors, under};
use crate::differential::runner::Run;
use crate::differential::{FS_BUCKET, FS_NAMES, ids, reason};

impl Run {
    fn fs_path(&mut self) -> String {
        let depth = self.rng.random_range(1..=3);
        (0..depth)
            .map(|_| *FS_NAMES.choose(&mut self.rng).unwrap())
            .collect::<Vec<_>>()
            .join("/")
    }

    pub(crate) async fn fs_mkdir(&mut self) {
        let p = self.fs_path();
        let want = self.m.parents_exist(&p).and_then(|_| {
            if self.m.files.contains_key(&p) {
                Err("FILE_ALREADY_EXISTS")
            } else {
                Ok(())
            }
        });
        // A file above the path is found first.
        let want = match (self.m.parents_exist(&p), want) {
            (Err(e), _) => Err(e),
            (_, w) => w,
        };
        let r = self
            .c
            .create_directory(CreateDirectoryRequest {
                volume: "vol1".into(),
                bucket: FS_BUCKET.into(),
                path: p.clone(),
                ..Default::default()
            })
            .await;
        self.expect_same("mkdir", reason(&r), want);
        if r.is_ok() {
            self.m.mkdirs(&p);
        }
    }

    pub(crate) async fn fs_create(&mut self) {
        let p = self.fs_path();
        let recursive = self.rng.random_bool(0.7);
        let overwrite = self.rng.random_bool(0.5);
        let blocks = self.rng.random_range(0..2);
        let want = match self.m.parents_exist(&p) {
            Err(e) => Err(e),
            Ok(false) if !recursive => Err("DIRECTORY_NOT_FOUND"),
            Ok(false) => Ok(()),
            Ok(true) if self.m.dirs.contains(&p) => Err("IS_A_DIRECTORY"),
            Ok(true) if self.m.files.contains_key(&p) && !overwrite => Err("FILE_ALREADY_EXISTS"),
            Ok(true) => Ok(()),
        };
        let r = self
            .c
            .create_file(CreateFileRequest {
                volume: "vol1".into(),
                bucket: FS_BUCKET.into(),
                path: p.clone(),
                recursive,
                overwrite,
                blocks,
                ..Default::default()
            })
            .await;
        self.expect_same("create file", reason(&r), want);
        if let Ok(r) = r {
            for a in ancestors(&p) {
                self.m.dirs.insert(a);
            }
            let allocated = self.m.alloc(u64::from(blocks));
            assert_eq!(ids(&r.blocks), allocated, "{}", self.ctx());
            self.m.fs_sessions.insert(
                r.session_id,
                MFsSession {
                    path: Some(p),
                    allocated,
                    no_overwrite: !overwrite,
                },
            );
        }
    }

    pub(crate) async fn fs_commit(&mut self) {
        let live: Vec<(u64, MFsSession)> = self
            .m
            .fs_sessions
            .iter()
            .filter(|(_, s)| s.path.is_some())
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        let Some((id, s)) = live.choose(&mut self.rng).cloned() else {
            return;
        };
        let path = s.path.clone().unwrap();
        let used = self.rng.random_range(0..=s.allocated.len());
        let size = if used == 0 {
            0
        } else {
            self.rng.random_range(1..=100)
        };
        let blocks: Vec<BlockInfo> = s.allocated[..used]
            .iter()
            .map(|b| BlockInfo {
                block_id: *b,
                offset: 0,
                length: size,
            })
            .collect();
        let cur = self.m.files.get(&path).cloned();
        let cond = self.conditions(cur.as_ref());
        let want = if self.m.dirs.contains(&path) {
            Err("IS_A_DIRECTORY")
        } else {
            self.m.check_cond(cur.as_ref(), &cond).and_then(|_| {
                if s.no_overwrite && cur.is_some() {
                    Err("FILE_ALREADY_EXISTS")
                } else {
                    Ok(())
                }
            })
        };
        let etag = self.etag();
        let r = self
            .c
            .commit_key(CommitKeyRequest {
                volume: "vol1".into(),
                bucket: FS_BUCKET.into(),
                key: path.clone(),
                session_id: id,
                size,
                blocks: blocks.clone(),
                etag: etag.clone(),
                conditions: cond,
                ..Default::default()
            })
            .await;
        self.expect_same("commit file", reason(&r), want);
        if let Ok(r) = r {
            let s = self.m.fs_sessions.remove(&id).unwrap();
            self.m.release(&s.allocated[used..]);
            let got = r.key.unwrap();
            let new = MKey {
                size,
                etag,
                blocks: ids(&blocks),
                update_id: got.update_id,
            };
            assert_eq!(
                (got.size, &got.etag, ids(&got.blocks)),
                (new.size, &new.etag, new.blocks.clone()),
                "{}: file {path}",
                self.ctx()
            );
            if let Some(old) = self.m.files.insert(path, new) {
                self.m.release(&old.blocks);
            }
        }
    }

    pub(crate) async fn fs_delete(&mut self) {
        let p = self.fs_path();
        let recursive = self.rng.random_bool(0.5);
        let non_empty =
            |m: &Model| m.dirs.iter().any(|d| under(d, &p)) || m.files.keys().any(|f| under(f, &p));
        let want = match self.m.parents_exist(&p) {
            Err(e) => Err(e),
            Ok(false) => Err("PATH_NOT_FOUND"),
            Ok(true) if self.m.files.contains_key(&p) => Ok(()),
            Ok(true) if self.m.dirs.contains(&p) => {
                if non_empty(&self.m) && !recursive {
                    Err("DIRECTORY_NOT_EMPTY")
                } else {
                    Ok(())
                }
            }
            Ok(true) => Err("PATH_NOT_FOUND"),
        };
        let r = self
            .c
            .delete_path(DeletePathRequest {
                volume: "vol1".into(),
                bucket: FS_BUCKET.into(),
                path: p.clone(),
                recursive,
                ..Default::default()
            })
            .await;
        self.expect_same("delete path", reason(&r), want);
        if r.is_ok() {
            if let Some(k) = self.m.files.remove(&p) {
                self.m.release(&k.blocks);
            } else {
                self.m.remove_tree(&p);
            }
        }
    }

    pub(crate) async fn fs_rename(&mut self) {
        let from = self.fs_path();
        let to = self.fs_path();
        let exists = |m: &Model, p: &str| m.dirs.contains(p) || m.files.contains_key(p);
        let want = if from == to {
            Err("SAME_NAME")
        } else if under(&to, &from) {
            Err("RENAME_INTO_ITSELF")
        } else {
            match self.m.parents_exist(&from) {
                Err(e) => Err(e),
                Ok(false) => Err("PATH_NOT_FOUND"),
                Ok(true) if !exists(&self.m, &from) => Err("PATH_NOT_FOUND"),
                Ok(true) => match self.m.parents_exist(&to) {
                    Err(e) => Err(e),
                    Ok(false) => Err("DIRECTORY_NOT_FOUND"),
                    Ok(true) if exists(&self.m, &to) => Err("PATH_ALREADY_EXISTS"),
                    Ok(true) => Ok(()),
                },
            }
        };
        let r = self
            .c
            .rename_path(RenamePathRequest {
                volume: "vol1".into(),
                bucket: FS_BUCKET.into(),
                from: from.clone(),
                to: to.clone(),
                ..Default::default()
            })
            .await;
        self.expect_same("rename path", reason(&r), want);
        let Ok(r) = r else { return };
        let st = r.status.unwrap();
        let moved = |p: &str| format!("{to}{}", &p[from.len()..]);
        if let Some(mut k) = self.m.files.remove(&from) {
            k.update_id = st.update_id;
            self.m.files.insert(to.clone(), k);
        } else {
            let dirs: Vec<String> = self
                .m
                .dirs
                .iter()
                .filter(|d| **d == from || under(d, &from))
                .cloned()
                .collect();
            for d in dirs {
                self.m.dirs.remove(&d);
                self.m.dirs.insert(moved(&d));
            }
            let files: Vec<String> = self
                .m
                .files
                .keys()
                .filter(|f| under(f, &from))
                .cloned()
                .collect();
            for f in files {
                let k = self.m.files.remove(&f).unwrap();
                self.m.files.insert(moved(&f), k);
            }
            for s in self.m.fs_sessions.values_mut() {
                if let Some(p) = &s.path
                    && under(p, &from)
                {
                    s.path = Some(moved(p));
                }
            }
        }
    }
}
