//! The in-memory model of om's semantics: object-store keys with their
//! versions, key sessions, multipart uploads, the FSO bucket, and the
//! blocks each holds or frees.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use om_client::v1::{KeyConditions, KeyInfo};

use crate::differential::ids;

/// Proper ancestors of a path, outermost first.
pub(crate) fn ancestors(path: &str) -> Vec<String> {
    let comps: Vec<&str> = path.split('/').collect();
    (1..comps.len()).map(|n| comps[..n].join("/")).collect()
}

pub(crate) fn under(path: &str, dir: &str) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MKey {
    pub(crate) size: u64,
    pub(crate) etag: String,
    pub(crate) blocks: Vec<u64>,
    pub(crate) update_id: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MPart {
    pub(crate) size: u64,
    pub(crate) etag: String,
    pub(crate) blocks: Vec<u64>,
}

#[derive(Debug, Clone)]
pub(crate) struct MUpload {
    pub(crate) bucket: &'static str,
    pub(crate) key: &'static str,
    pub(crate) parts: BTreeMap<u32, MPart>,
}

#[derive(Debug, Clone)]
pub(crate) struct MSession {
    pub(crate) bucket: &'static str,
    pub(crate) key: &'static str,
    pub(crate) allocated: Vec<u64>,
}

/// A bucket's versioning state (S3's; never back to unversioned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum State {
    #[default]
    Unversioned,
    Enabled,
    Suspended,
}

/// One version of a key: an object or a delete marker (no data).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MVersion {
    pub(crate) id: String,
    pub(crate) marker: bool,
    /// A marker's is empty; its update id is not tracked (0).
    pub(crate) k: MKey,
}

/// What a response shows of one version: (version id, delete marker, is
/// latest, size, ETag, blocks, update id (0 for markers)).
pub(crate) type View = (String, bool, bool, u64, String, Vec<u64>, u64);

pub(crate) fn view(v: &MVersion, latest: bool) -> View {
    (
        v.id.clone(),
        v.marker,
        latest,
        v.k.size,
        v.k.etag.clone(),
        v.k.blocks.clone(),
        if v.marker { 0 } else { v.k.update_id },
    )
}

pub(crate) fn got_view(k: &KeyInfo) -> View {
    (
        k.version_id.clone(),
        k.delete_marker,
        k.is_latest,
        k.size,
        k.etag.clone(),
        ids(&k.blocks),
        if k.delete_marker { 0 } else { k.update_id },
    )
}

/// Version ids om refuses to parse (INVALID_VERSION_ID).
pub(crate) const MALFORMED_IDS: [&str; 4] = ["xyz", "NULL", "0000000000000000", "00000000000000FF"];
/// A well-formed version id no version ever gets (stamp of log index 0).
pub(crate) const UNKNOWN_ID: &str = "00000000000000ff";

/// Whether om parses `id` (the test names no other malformed ids).
pub(crate) fn well_formed(id: &str) -> bool {
    !MALFORMED_IDS.contains(&id)
}

#[derive(Default)]
pub(crate) struct Model {
    /// Object-store keys: each key's versions, newest (the current one)
    /// first; a key without versions has no entry.
    pub(crate) hist: BTreeMap<(&'static str, &'static str), Vec<MVersion>>,
    pub(crate) versioning: HashMap<&'static str, State>,
    /// Every version id (other than "null") om returned, in order.
    pub(crate) version_ids: Vec<String>,
    pub(crate) sessions: BTreeMap<u64, MSession>,
    pub(crate) uploads: BTreeMap<u64, MUpload>,
    holders: HashMap<u64, u32>,
    /// Blocks in the deleted-blocks table (a block appears once).
    pub(crate) freed: Vec<u64>,
    next_block: u64,
    /// The FILE_SYSTEM_OPTIMIZED bucket `FS_BUCKET`.
    pub(crate) dirs: BTreeSet<String>,
    pub(crate) files: BTreeMap<String, MKey>,
    pub(crate) fs_sessions: BTreeMap<u64, MFsSession>,
}

#[derive(Debug, Clone)]
pub(crate) struct MFsSession {
    /// Where the file will land; `None` once its directory was deleted (the
    /// session can then only expire).
    pub(crate) path: Option<String>,
    pub(crate) allocated: Vec<u64>,
    pub(crate) no_overwrite: bool,
}

/// What a request should do, per the model.
pub(crate) type Expect = Result<(), &'static str>;

impl Model {
    pub(crate) fn new() -> Model {
        Model {
            next_block: 1,
            ..Default::default()
        }
    }

    pub(crate) fn alloc(&mut self, n: u64) -> Vec<u64> {
        let ids = (self.next_block..self.next_block + n).collect();
        self.next_block += n;
        ids
    }

    pub(crate) fn release(&mut self, blocks: &[u64]) {
        for b in blocks {
            let h = self.holders.get(b).copied().unwrap_or(1);
            if h > 1 {
                if h == 2 {
                    self.holders.remove(b);
                } else {
                    self.holders.insert(*b, h - 1);
                }
            } else {
                self.freed.push(*b);
            }
        }
    }

    pub(crate) fn share(&mut self, blocks: &[u64]) {
        for b in blocks {
            *self.holders.entry(*b).or_insert(1) += 1;
        }
    }

    pub(crate) fn check_cond(&self, cur: Option<&MKey>, c: &Option<KeyConditions>) -> Expect {
        let Some(c) = c else { return Ok(()) };
        if c.if_none_match_any && cur.is_some() {
            return Err("IF_NONE_MATCH_FAILED");
        }
        if !c.if_match.is_empty() {
            match cur {
                None => return Err("KEY_NOT_FOUND"),
                Some(k) if k.etag != c.if_match => return Err("IF_MATCH_FAILED"),
                _ => {}
            }
        }
        if c.expected_update_id != 0 {
            match cur {
                None => return Err("KEY_NOT_FOUND"),
                Some(k) if k.update_id != c.expected_update_id => {
                    return Err("UPDATE_ID_MISMATCH");
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The first ancestor of `path` that is not a directory: `Err` when it
    /// is a file (NOT_A_DIRECTORY), `Ok(false)` when missing, `Ok(true)` when
    /// every ancestor is a directory.
    pub(crate) fn parents_exist(&self, path: &str) -> Result<bool, &'static str> {
        for a in ancestors(path) {
            if self.files.contains_key(&a) {
                return Err("NOT_A_DIRECTORY");
            }
            if !self.dirs.contains(&a) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    pub(crate) fn mkdirs(&mut self, path: &str) {
        for a in ancestors(path) {
            self.dirs.insert(a);
        }
        self.dirs.insert(path.to_string());
    }

    /// Removes a directory and everything under it: files free their blocks,
    /// and so do sessions of files being written below it (the purge ends them).
    pub(crate) fn remove_tree(&mut self, dir: &str) {
        self.dirs.retain(|d| d != dir && !under(d, dir));
        let gone: Vec<String> = self
            .files
            .keys()
            .filter(|f| under(f, dir))
            .cloned()
            .collect();
        for f in gone {
            let k = self.files.remove(&f).unwrap();
            self.release(&k.blocks);
        }
        let ended: Vec<u64> = self
            .fs_sessions
            .iter()
            .filter(|(_, s)| s.path.as_deref().is_some_and(|p| under(p, dir)))
            .map(|(id, _)| *id)
            .collect();
        for id in ended {
            let s = self.fs_sessions.remove(&id).unwrap();
            self.release(&s.allocated);
        }
    }

    pub(crate) fn state(&self, bucket: &str) -> State {
        self.versioning.get(bucket).copied().unwrap_or_default()
    }

    pub(crate) fn history(&self, bucket: &'static str, key: &'static str) -> &[MVersion] {
        self.hist.get(&(bucket, key)).map_or(&[], Vec::as_slice)
    }

    /// The current version when it is an object (not a delete marker): what
    /// reads, ListKeys and a write's conditions see.
    pub(crate) fn current(&self, bucket: &'static str, key: &'static str) -> Option<&MKey> {
        self.history(bucket, key)
            .first()
            .filter(|v| !v.marker)
            .map(|v| &v.k)
    }

    pub(crate) fn version(
        &self,
        bucket: &'static str,
        key: &'static str,
        id: &str,
    ) -> Option<&MVersion> {
        self.history(bucket, key).iter().find(|v| v.id == id)
    }

    /// The position of the version a new current version of the key removes:
    /// unversioned, the current one; suspended, the "null" one wherever it
    /// is; enabled, none.
    pub(crate) fn replaced(&self, bucket: &'static str, key: &'static str) -> Option<usize> {
        let h = self.history(bucket, key);
        match self.state(bucket) {
            State::Unversioned => (!h.is_empty()).then_some(0),
            State::Suspended => h.iter().position(|v| v.id == "null"),
            State::Enabled => None,
        }
    }

    /// Makes `new` the current version of (bucket, key): the version it
    /// replaces goes (its blocks released unless `keep`: a copy of that
    /// very version took them over), the previous current one, if it stays,
    /// becomes noncurrent with its blocks.
    pub(crate) fn write(
        &mut self,
        bucket: &'static str,
        key: &'static str,
        new: MVersion,
        keep: bool,
    ) {
        let replaced = self.replaced(bucket, key);
        let h = self.hist.entry((bucket, key)).or_default();
        let old = replaced.map(|i| h.remove(i));
        h.insert(0, new);
        assert!(
            self.state(bucket) != State::Unversioned || self.history(bucket, key).len() == 1,
            "an unversioned key has one version"
        );
        if let Some(old) = old
            && !keep
        {
            self.release(&old.k.blocks);
        }
    }

    /// Removes version `id` of the key permanently, releasing its blocks;
    /// the next newest, if any, becomes current.
    pub(crate) fn remove_version(
        &mut self,
        bucket: &'static str,
        key: &'static str,
        id: &str,
    ) -> Option<MVersion> {
        let h = self.hist.get_mut(&(bucket, key))?;
        let old = h.remove(h.iter().position(|v| v.id == id)?);
        if h.is_empty() {
            self.hist.remove(&(bucket, key));
        }
        self.release(&old.k.blocks);
        Some(old)
    }
}
