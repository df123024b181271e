//! File-system operations of FILE_SYSTEM_OPTIMIZED buckets: directories,
//! file sessions, delete (recursive deletes are O(1) moves to the deleted
//! directory table, purged in bounded batches), and O(1) rename.

use om_proto::store::{
    BucketRecord, CommandResult, CountResult, CreateDirectory, CreateFile, DeletePath,
    DeletedDirRecord, DirectoryRecord, FileStatusResult, OpenKeyRecord, OpenKeyResult,
    PurgeDeletedDirs, RenamePath, SubtreeBounds, command_result,
};
use om_raft_store::EntryWrites;

use super::limits;
use super::limits::MAX_PURGE_BATCH;
use super::ops::Operation;
use super::quota::Usage;
use super::write::lay_out_unwritten;
use super::{Ctx, ok};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::fs::{self, Chain, Entry, Walk};
use crate::store::keys;
use crate::store::table::{
    self, BucketTable, DeletedDirTable, DirectoryTable, FileTable, OpenFileTable,
};
use crate::store::view::StateRead;

impl Operation for om_proto::store::CreateDirectory {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.path)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::bucket(&self.volume, &self.bucket)?;
        limits::path("path", &self.path)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.create_directory(b, self)
    }
}

impl Operation for om_proto::store::CreateFile {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.path)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::bucket(&self.volume, &self.bucket)?;
        limits::path("path", &self.path)?;
        crate::validate::content_type("content_type", &self.content_type)?;
        limits::metadata(&self.metadata)?;
        limits::blocks_per_call("blocks", self.blocks)?;
        limits::block_size(self.block_size)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.create_file(b, self)
    }
}

impl Operation for om_proto::store::DeletePath {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::DELETE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.path)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::bucket(&self.volume, &self.bucket)?;
        limits::path("path", &self.path)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.delete_path(b, self)
    }
}

impl Operation for om_proto::store::RenamePath {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(
            Resource::Bucket(&self.volume, &self.bucket),
            authz::WRITE | authz::DELETE,
        )]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.from)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::bucket(&self.volume, &self.bucket)?;
        limits::path("from", &self.from)?;
        limits::path("to", &self.to)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.rename_path(b, self)
    }
}

impl Operation for om_proto::store::PurgeDeletedDirs {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
    }

    fn target(&self) -> String {
        Resource::Cluster.to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        // Batch sizes: capped by the handlers, never refused.
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.purge_deleted_dirs(b, self)
    }
}

/// The per-entry object-id counter reserved for a file session, above any
/// directory a command creates (paths are at most `MAX_PATH_DEPTH` deep).
const SESSION_ID_SLOT: u8 = 255;

/// What lies below a file, or a new directory: nothing.
const NOTHING_BELOW: SubtreeBounds = SubtreeBounds { depth: 0, bytes: 0 };

/// The bounds, relative to the directory at `comps[..i]` (the bucket root
/// for 0), of the entry at `comps` with `below` under it: for "a/b/f" and
/// i = 1, the path "b/f" (2 components, 3 bytes).
fn bounds_at(comps: &[&str], i: usize, below: &SubtreeBounds) -> SubtreeBounds {
    let rel = &comps[i.min(comps.len())..];
    if rel.is_empty() {
        return *below;
    }
    let rel_bytes = rel.iter().map(|c| c.len()).sum::<usize>() + rel.len() - 1;
    let under = if below.depth > 0 {
        below.bytes.saturating_add(1)
    } else {
        0
    };
    SubtreeBounds {
        depth: (rel.len() as u32).saturating_add(below.depth),
        bytes: u32::try_from(rel_bytes)
            .unwrap_or(u32::MAX)
            .saturating_add(under),
    }
}

fn dir_status(path: &str, rec: DirectoryRecord) -> CommandResult {
    CommandResult {
        result: Some(command_result::Result::FileStatus(FileStatusResult {
            path: path.to_string(),
            is_directory: true,
            file: None,
            directory: Some(rec),
        })),
        ..Default::default()
    }
}

impl Ctx<'_> {
    /// Stages directories for `comps[from..]` under `parent`; returns the last.
    /// `leaf` is the whole path of the deepest entry the command creates
    /// (`comps` itself, or a file under it), whose bounds the new directories
    /// start with (rules 1).
    fn make_dirs(
        &self,
        b: &mut EntryWrites<'_>,
        mut parent: u64,
        comps: &[&str],
        from: usize,
        leaf: &[&str],
    ) -> Result<DirectoryRecord, OmError> {
        let mut last = DirectoryRecord::default();
        for (n, name) in comps.iter().enumerate().skip(from) {
            // `limits` keeps paths within MAX_PATH_DEPTH (< 255) components.
            let mut rec = DirectoryRecord {
                format: 0,
                object_id: self.object_id(n as u8),
                parent_id: parent,
                creation_time_ms: self.now,
                modification_time_ms: self.now,
                update_id: self.index,
                below: crate::rules::SUBTREE_BOUNDS
                    .holds(self.rules)
                    .then(|| bounds_at(leaf, n + 1, &NOTHING_BELOW)),
            };
            table::put::<DirectoryTable>(self.db, b, &keys::fs_key(parent, name), &mut rec)?;
            parent = rec.object_id;
            last = rec;
        }
        Ok(last)
    }

    /// Raises the bounds of the existing directories `chain` on the way to
    /// the entry at `comps` that has `below` under it (rules 1). Unknown
    /// bounds stay unknown, and an entry of unknown bounds makes its new
    /// ancestors' unknown too.
    fn raise_bounds(
        &self,
        b: &mut EntryWrites<'_>,
        chain: Chain,
        comps: &[&str],
        below: Option<SubtreeBounds>,
    ) -> Result<(), OmError> {
        for (j, (parent, mut rec)) in chain.into_iter().enumerate() {
            let want = below.as_ref().map(|bl| bounds_at(comps, j + 1, bl));
            rec.below = match (rec.below, want) {
                (None, _) => continue,
                (Some(_), None) => None,
                (Some(cur), Some(w)) if w.depth <= cur.depth && w.bytes <= cur.bytes => continue,
                (Some(cur), Some(w)) => Some(SubtreeBounds {
                    depth: cur.depth.max(w.depth),
                    bytes: cur.bytes.max(w.bytes),
                }),
            };
            let key = keys::fs_key(parent, comps[j]);
            table::put::<DirectoryTable>(self.db, b, &key, &mut rec)?;
        }
        Ok(())
    }

    /// Creates a directory and any missing parents; an existing directory is
    /// returned as it is; a file anywhere on the path is refused.
    pub(super) fn create_directory(
        &self,
        b: &mut EntryWrites<'_>,
        c: &CreateDirectory,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.fso_bucket(&c.volume, &c.bucket)?;
        let comps = fs::components(&c.path);
        let Some((name, parents)) = comps.split_last() else {
            return Err(OmError::invalid(
                "INVALID_PATH",
                "path",
                "the root directory always exists",
            ));
        };
        let (walk, chain) = fs::walk_chain(self.db, bucket.object_id, parents, "path")?;
        let (parent, from) = match walk {
            Walk::Missing { depth, parent } => (parent, depth),
            Walk::Dir(parent) => {
                if fs::get_file(self.db, parent, name)?.is_some() {
                    return Err(OmError::exists(
                        "FILE_ALREADY_EXISTS",
                        "path",
                        format!("{} is a file", c.path),
                    ));
                }
                if let Some(rec) = fs::get_dir(self.db, parent, name)? {
                    return Ok(dir_status(&c.path, rec));
                }
                (parent, parents.len())
            }
        };
        let vol = self.charge(&mut bucket, Usage::dirs_added((comps.len() - from) as u64))?;
        // Checks are done; stage writes from here on.
        let rec = self.make_dirs(b, parent, &comps, from, &comps)?;
        if crate::rules::SUBTREE_BOUNDS.holds(self.rules) {
            self.raise_bounds(b, chain, &comps, Some(NOTHING_BELOW))?;
        }
        bucket.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        self.put_volume(b, vol)?;
        Ok(dir_status(&c.path, rec))
    }

    /// Opens a session for a new file (or, with `overwrite`, a replacement).
    pub(super) fn create_file(
        &self,
        b: &mut EntryWrites<'_>,
        c: &CreateFile,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.fso_bucket(&c.volume, &c.bucket)?;
        let comps = fs::components(&c.path);
        let Some((name, parents)) = comps.split_last() else {
            return Err(OmError::invalid(
                "INVALID_PATH",
                "path",
                "a file needs a name",
            ));
        };
        let (walk, chain) = fs::walk_chain(self.db, bucket.object_id, parents, "path")?;
        if let (Walk::Missing { depth, .. }, false) = (walk, c.recursive) {
            return Err(OmError::not_found(
                "DIRECTORY_NOT_FOUND",
                "path",
                format!(
                    "directory {} does not exist (create it, or pass recursive)",
                    parents[..=depth].join("/")
                ),
            ));
        }
        if let Walk::Dir(parent) = walk {
            if fs::get_dir(self.db, parent, name)?.is_some() {
                return Err(OmError::precondition(
                    "IS_A_DIRECTORY",
                    "path",
                    format!("{} is a directory", c.path),
                ));
            }
            if !c.overwrite && fs::get_file(self.db, parent, name)?.is_some() {
                return Err(OmError::exists(
                    "FILE_ALREADY_EXISTS",
                    "path",
                    format!("file {} exists (pass overwrite to replace it)", c.path),
                ));
            }
        }
        let new_dirs = match walk {
            Walk::Missing { depth, .. } => parents.len() - depth,
            Walk::Dir(_) => 0,
        };
        let vol = self.charge(&mut bucket, Usage::dirs_added(new_dirs as u64))?;
        bucket.open_key_count = self.grow(bucket.open_key_count, 1, "path", "open files")?;
        // Checks are done; stage writes from here on (allocation first: it
        // refuses an exhausted block counter before anything else is staged).
        let ids = self.allocate(b, u64::from(c.blocks))?;
        let parent = match walk {
            Walk::Dir(id) => id,
            Walk::Missing { depth, parent } => {
                self.make_dirs(b, parent, parents, depth, &comps)?.object_id
            }
        };
        if crate::rules::SUBTREE_BOUNDS.holds(self.rules) {
            self.raise_bounds(b, chain, &comps, Some(NOTHING_BELOW))?;
        }
        let session_id = self.object_id(SESSION_ID_SLOT);
        let mut rec = OpenKeyRecord {
            format: 0,
            session_id,
            opened_ms: self.now,
            allocated: ids.clone(),
            content_type: c.content_type.clone(),
            metadata: c.metadata.clone(),
            volume: c.volume.clone(),
            bucket: c.bucket.clone(),
            parent_id: parent,
            name: name.to_string(),
            no_overwrite: !c.overwrite,
            block_size: c.block_size,
            ..Default::default()
        };
        let key = keys::open_file_key(parent, name, session_id);
        table::put::<OpenFileTable>(self.db, b, &key, &mut rec)?;
        b.put_cf(
            table::cf(self.db.rocks(), keys::OPEN_FILES_CF)?,
            keys::open_file_expiry_key(self.now, &key),
            [],
        );
        bucket.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        self.put_volume(b, vol)?;
        ok(command_result::Result::OpenKey(OpenKeyResult {
            session_id,
            opened_ms: self.now,
            blocks: lay_out_unwritten(ids, c.block_size),
        }))
    }

    fn has_children(&self, dir: u64) -> Result<bool, OmError> {
        self.has_entries_under(dir, &[keys::DIRECTORIES_CF, keys::FILES_CF])
    }

    /// Whether any of `tables` holds an entry whose parent is `dir` (one seek each).
    fn has_entries_under(&self, dir: u64, tables: &[&'static str]) -> Result<bool, OmError> {
        for &cf in tables {
            let mut it = self.db.iter_prefix(cf, &keys::children_prefix(dir))?;
            let any = it.has_current();
            it.status()?;
            if any {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Deletes a file, an empty directory, or (recursive) a directory with
    /// everything under it: the directory moves to the deleted-directory
    /// table in O(1) and its contents are purged later in bounded batches.
    pub(super) fn delete_path(
        &self,
        b: &mut EntryWrites<'_>,
        c: &DeletePath,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.fso_bucket(&c.volume, &c.bucket)?;
        let comps = fs::components(&c.path);
        let entry = fs::stat(self.db, bucket.object_id, &comps, "path")?.ok_or_else(|| {
            OmError::not_found(
                "PATH_NOT_FOUND",
                "path",
                format!("{} does not exist", c.path),
            )
        })?;
        match entry {
            Entry::Root { .. } => Err(OmError::invalid(
                "INVALID_PATH",
                "path",
                "the root directory cannot be deleted",
            )),
            Entry::File { parent, name, rec } => {
                let vol = self.charge(&mut bucket, Usage::removal(rec.size))?;
                bucket.update_id = self.index;
                let origin = format!("delete {}/{}/{}", c.volume, c.bucket, c.path);
                self.release_blocks(b, 0, rec.blocks, origin)?;
                table::delete::<FileTable>(self.db, b, &keys::fs_key(parent, &name))?;
                self.put_bucket(b, &mut bucket)?;
                self.put_volume(b, vol)?;
                ok(command_result::Result::Count(CountResult { count: 1 }))
            }
            Entry::Dir { parent, name, rec } => {
                let non_empty = self.has_children(rec.object_id)?;
                if non_empty && !c.recursive {
                    return Err(OmError::precondition(
                        "DIRECTORY_NOT_EMPTY",
                        "path",
                        format!("directory {} is not empty (pass recursive)", c.path),
                    ));
                }
                // Files still being written in it can no longer commit: the
                // purge releases their sessions and blocks with the rest.
                let has_sessions = self.has_entries_under(rec.object_id, &[keys::OPEN_FILES_CF])?;
                // The directory leaves the namespace now, what is under it
                // as it is purged.
                let freed = Usage {
                    free_dirs: 1,
                    ..Usage::default()
                };
                let vol = self.charge(&mut bucket, freed)?;
                table::delete::<DirectoryTable>(self.db, b, &keys::fs_key(parent, &name))?;
                if non_empty || has_sessions {
                    let mut dd = DeletedDirRecord {
                        format: 0,
                        volume: c.volume.clone(),
                        bucket: c.bucket.clone(),
                        object_id: rec.object_id,
                        path: c.path.clone(),
                        deleted_ms: self.now,
                    };
                    table::put::<DeletedDirTable>(
                        self.db,
                        b,
                        &self.deleted_blocks_key(0),
                        &mut dd,
                    )?;
                }
                bucket.update_id = self.index;
                self.put_bucket(b, &mut bucket)?;
                self.put_volume(b, vol)?;
                ok(command_result::Result::Count(CountResult { count: 1 }))
            }
        }
    }

    /// Renames a file or directory: one entry rewritten, whatever is under it.
    pub(super) fn rename_path(
        &self,
        b: &mut EntryWrites<'_>,
        c: &RenamePath,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.fso_bucket(&c.volume, &c.bucket)?;
        let root = bucket.object_id;
        let from = fs::components(&c.from);
        let to = fs::components(&c.to);
        let entry = fs::stat(self.db, root, &from, "from")?.ok_or_else(|| {
            OmError::not_found(
                "PATH_NOT_FOUND",
                "from",
                format!("{} does not exist", c.from),
            )
        })?;
        if let Entry::Dir { rec, .. } = &entry {
            // A directory never moves under itself (the edge checks the
            // paths; this guards the replicated command on its own).
            let mut id = root;
            for name in &to[..to.len().saturating_sub(1)] {
                match fs::get_dir(self.db, id, name)? {
                    Some(d) if d.object_id == rec.object_id => {
                        return Err(OmError::invalid(
                            "RENAME_INTO_ITSELF",
                            "to",
                            format!("{} lies under {}", c.to, c.from),
                        ));
                    }
                    Some(d) => id = d.object_id,
                    None => break,
                }
            }
        }
        let (new_parent, chain) = fs::parent_chain(self.db, root, &to, "to")?;
        let new_name = to.last().copied().unwrap_or_default();
        if fs::get_dir(self.db, new_parent, new_name)?.is_some()
            || fs::get_file(self.db, new_parent, new_name)?.is_some()
        {
            return Err(OmError::exists(
                "PATH_ALREADY_EXISTS",
                "to",
                format!("{} exists", c.to),
            ));
        }
        // What lies below the moved entry must stay within the path limits
        // the leader stamped (a directory made before rules 1 has no bounds
        // and moves unchecked, as everything did before).
        let below = match &entry {
            Entry::Dir { rec, .. } => rec.below,
            _ => Some(NOTHING_BELOW),
        };
        if let Some(below) = &below
            && c.max_path_depth != 0
        {
            let deepest = bounds_at(&to, 0, below);
            if deepest.depth > c.max_path_depth {
                return Err(OmError::precondition(
                    "PATH_TOO_DEEP",
                    "to",
                    format!(
                        "moved there, a path under it would have {} components; at most {} are allowed",
                        deepest.depth, c.max_path_depth
                    ),
                ));
            }
            if c.max_path_bytes != 0 && deepest.bytes > c.max_path_bytes {
                return Err(OmError::precondition(
                    "PATH_TOO_LONG",
                    "to",
                    format!(
                        "moved there, a path under it would be {} bytes long; at most {} are allowed",
                        deepest.bytes, c.max_path_bytes
                    ),
                ));
            }
        }
        let new_key = keys::fs_key(new_parent, new_name);
        let status = match entry {
            Entry::Root { .. } => {
                return Err(OmError::invalid(
                    "INVALID_PATH",
                    "from",
                    "the root directory cannot be renamed",
                ));
            }
            Entry::File {
                parent,
                name,
                mut rec,
            } => {
                rec.modification_time_ms = self.now;
                rec.update_id = self.index;
                table::delete::<FileTable>(self.db, b, &keys::fs_key(parent, &name))?;
                table::put::<FileTable>(self.db, b, &new_key, &mut rec)?;
                FileStatusResult {
                    path: c.to.clone(),
                    is_directory: false,
                    file: Some(rec),
                    directory: None,
                }
            }
            Entry::Dir {
                parent,
                name,
                mut rec,
            } => {
                rec.parent_id = new_parent;
                rec.modification_time_ms = self.now;
                rec.update_id = self.index;
                table::delete::<DirectoryTable>(self.db, b, &keys::fs_key(parent, &name))?;
                table::put::<DirectoryTable>(self.db, b, &new_key, &mut rec)?;
                FileStatusResult {
                    path: c.to.clone(),
                    is_directory: true,
                    file: None,
                    directory: Some(rec),
                }
            }
        };
        if crate::rules::SUBTREE_BOUNDS.holds(self.rules) {
            self.raise_bounds(b, chain, &to, below)?;
        }
        bucket.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::FileStatus(status))
    }

    /// Purges up to `max_children` entries under the oldest deleted directory:
    /// files free their blocks, subdirectories become deleted directories
    /// themselves. When the rest fits in the batch, the directory's whole
    /// child range goes with one range deletion per table and its entry is
    /// removed. Progress is replicated state, so it survives restarts.
    pub(super) fn purge_deleted_dirs(
        &self,
        b: &mut EntryWrites<'_>,
        c: &PurgeDeletedDirs,
    ) -> Result<CommandResult, OmError> {
        let mut it = self.db.iter(keys::DELETED_DIRS_CF, None, None)?;
        it.seek_to_first();
        let Some((dd_key, dd_val)) = it.current() else {
            it.status()?;
            return ok(command_result::Result::Count(CountResult { count: 0 }));
        };
        let dd_key = dd_key.to_vec();
        let dd = table::decode::<DeletedDirTable>(dd_val)?;
        drop(it);
        let max = c.max_children.clamp(1, MAX_PURGE_BATCH) as usize;
        let prefix = keys::children_prefix(dd.object_id);
        let mut bucket: Option<BucketRecord> =
            table::get::<BucketTable>(self.db, &keys::bucket_key(&dd.volume, &dd.bucket))?;
        let mut purged = 0usize;
        let mut seq = 1u32;
        let mut freed = Usage::default();
        let mut point_deletes: Vec<(&'static str, Vec<u8>)> = Vec::new();
        for cf in [keys::DIRECTORIES_CF, keys::FILES_CF, keys::OPEN_FILES_CF] {
            let mut it = self.db.iter_prefix(cf, &prefix)?;
            while purged < max {
                let Some((k, v)) = it.current() else { break };
                let name = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
                if cf == keys::OPEN_FILES_CF {
                    // A file being written under the deleted directory: its
                    // session ends and its allocated blocks are freed.
                    let session = table::decode::<OpenFileTable>(v)?;
                    b.delete_cf(
                        table::cf(self.db.rocks(), cf)?,
                        keys::open_file_expiry_key(session.opened_ms, k),
                    );
                    if let Some(bk) = bucket.as_mut() {
                        bk.open_key_count = bk.open_key_count.saturating_sub(1);
                    }
                    let origin = format!(
                        "session {} under purged {}/{}/{}",
                        session.session_id, dd.volume, dd.bucket, dd.path
                    );
                    let unwritten = lay_out_unwritten(session.allocated, session.block_size);
                    self.release_blocks(b, seq, unwritten, origin)?;
                } else if cf == keys::DIRECTORIES_CF {
                    let sub = table::decode::<DirectoryTable>(v)?;
                    freed.free(Usage {
                        free_dirs: 1,
                        ..Usage::default()
                    });
                    let mut rec = DeletedDirRecord {
                        format: 0,
                        volume: dd.volume.clone(),
                        bucket: dd.bucket.clone(),
                        object_id: sub.object_id,
                        path: format!("{}/{name}", dd.path),
                        deleted_ms: self.now,
                    };
                    table::put::<DeletedDirTable>(
                        self.db,
                        b,
                        &self.deleted_blocks_key(seq),
                        &mut rec,
                    )?;
                } else {
                    let file = table::decode::<FileTable>(v)?;
                    freed.free(Usage::removal(file.size));
                    let origin = format!("purge {}/{}/{}/{name}", dd.volume, dd.bucket, dd.path);
                    self.release_blocks(b, seq, file.blocks, origin)?;
                }
                point_deletes.push((cf, k.to_vec()));
                seq += 1;
                purged += 1;
                it.advance();
            }
            it.status()?;
        }
        if purged < max {
            // Everything under the directory was read: drop both child ranges
            // with one range deletion each, and the directory itself.
            let end = keys::prefix_end(&prefix).unwrap_or_else(|| vec![0xff; 9]);
            for cf in [keys::DIRECTORIES_CF, keys::FILES_CF, keys::OPEN_FILES_CF] {
                b.delete_range_cf(table::cf(self.db.rocks(), cf)?, &prefix, &end);
            }
            table::delete::<DeletedDirTable>(self.db, b, &dd_key)?;
        } else {
            for (cf, k) in point_deletes {
                b.delete_cf(table::cf(self.db.rocks(), cf)?, k);
            }
        }
        if let Some(mut bk) = bucket {
            // Frees only: never refused, so it may follow the staged purge.
            let vol = self.charge(&mut bk, freed)?;
            bk.update_id = self.index;
            self.put_bucket(b, &mut bk)?;
            self.put_volume(b, vol)?;
        }
        ok(command_result::Result::Count(CountResult {
            count: purged as u64 + u64::from(purged < max),
        }))
    }
}
