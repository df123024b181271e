//! Path resolution in FILE_SYSTEM_OPTIMIZED buckets: pure reads over the
//! `directories` and `files` tables, shared by apply and the read paths.
//!
//! A path is a list of normalized components (see `validate::fs_path`); the
//! root directory's id is the bucket's object id. Resolving a path of depth d
//! costs d point reads, never a scan.

use om_proto::store::{DirectoryRecord, KeyRecord};

use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, DirectoryTable, FileTable};
use crate::store::view::StateRead;

pub use crate::validate::MAX_PATH_DEPTH;

/// What a path names.
#[derive(Debug, Clone)]
pub enum Entry {
    /// The bucket's root directory.
    Root { id: u64 },
    Dir {
        parent: u64,
        name: String,
        rec: DirectoryRecord,
    },
    File {
        parent: u64,
        name: String,
        rec: KeyRecord,
    },
}

impl Entry {
    /// The directory id children of this entry hang off, if it is a directory.
    pub fn dir_id(&self) -> Option<u64> {
        match self {
            Entry::Root { id } => Some(*id),
            Entry::Dir { rec, .. } => Some(rec.object_id),
            Entry::File { .. } => None,
        }
    }
}

/// How far a chain of directories exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// Every component is a directory; this is the last one's id.
    Dir(u64),
    /// Components from `depth` on do not exist; `parent` is the id of the
    /// last one that does.
    Missing { depth: usize, parent: u64 },
}

pub fn components(path: &str) -> Vec<&str> {
    if path.is_empty() {
        Vec::new()
    } else {
        path.split('/').collect()
    }
}

pub fn get_dir(
    db: &(impl StateRead + ?Sized),
    parent: u64,
    name: &str,
) -> Result<Option<DirectoryRecord>, OmError> {
    table::get::<DirectoryTable>(db, &keys::fs_key(parent, name))
}

pub fn get_file(
    db: &(impl StateRead + ?Sized),
    parent: u64,
    name: &str,
) -> Result<Option<KeyRecord>, OmError> {
    table::get::<FileTable>(db, &keys::fs_key(parent, name))
}

/// The existing directories along a path, root excluded: each one's parent
/// id and record (its name is the path's component at the same position).
pub type Chain = Vec<(u64, DirectoryRecord)>;

/// Follows `comps` as directories from `root`. A file in the way is
/// FAILED_PRECONDITION `NOT_A_DIRECTORY` on `field`.
pub fn walk_dirs(
    db: &(impl StateRead + ?Sized),
    root: u64,
    comps: &[&str],
    field: &str,
) -> Result<Walk, OmError> {
    walk_chain(db, root, comps, field).map(|(walk, _)| walk)
}

/// `walk_dirs`, also handing back the directories it passed (for writes
/// that update their ancestors, at no extra read).
pub fn walk_chain(
    db: &(impl StateRead + ?Sized),
    root: u64,
    comps: &[&str],
    field: &str,
) -> Result<(Walk, Chain), OmError> {
    let mut id = root;
    let mut chain = Vec::with_capacity(comps.len());
    for (depth, name) in comps.iter().enumerate() {
        match get_dir(db, id, name)? {
            Some(d) => {
                let next = d.object_id;
                chain.push((id, d));
                id = next;
            }
            None => {
                if get_file(db, id, name)?.is_some() {
                    return Err(OmError::precondition(
                        "NOT_A_DIRECTORY",
                        field,
                        format!("{} is a file", comps[..=depth].join("/")),
                    ));
                }
                return Ok((Walk::Missing { depth, parent: id }, chain));
            }
        }
    }
    Ok((Walk::Dir(id), chain))
}

/// The id of the directory holding the last component of `comps`; missing
/// parents are NOT_FOUND `DIRECTORY_NOT_FOUND` on `field`.
pub fn parent_dir(
    db: &(impl StateRead + ?Sized),
    root: u64,
    comps: &[&str],
    field: &str,
) -> Result<u64, OmError> {
    parent_chain(db, root, comps, field).map(|(id, _)| id)
}

/// `parent_dir`, also handing back the directories on the way to it.
pub fn parent_chain(
    db: &(impl StateRead + ?Sized),
    root: u64,
    comps: &[&str],
    field: &str,
) -> Result<(u64, Chain), OmError> {
    let parents = &comps[..comps.len().saturating_sub(1)];
    match walk_chain(db, root, parents, field)? {
        (Walk::Dir(id), chain) => Ok((id, chain)),
        (Walk::Missing { depth, .. }, _) => Err(OmError::not_found(
            "DIRECTORY_NOT_FOUND",
            field,
            format!("directory {} does not exist", parents[..=depth].join("/")),
        )),
    }
}

/// What `comps` names, or `None` if nothing (a missing parent included).
pub fn stat(
    db: &(impl StateRead + ?Sized),
    root: u64,
    comps: &[&str],
    field: &str,
) -> Result<Option<Entry>, OmError> {
    let Some((last, parents)) = comps.split_last() else {
        return Ok(Some(Entry::Root { id: root }));
    };
    let parent = match walk_dirs(db, root, parents, field)? {
        Walk::Dir(id) => id,
        Walk::Missing { .. } => return Ok(None),
    };
    if let Some(rec) = get_dir(db, parent, last)? {
        return Ok(Some(Entry::Dir {
            parent,
            name: last.to_string(),
            rec,
        }));
    }
    Ok(get_file(db, parent, last)?.map(|rec| Entry::File {
        parent,
        name: last.to_string(),
        rec,
    }))
}
