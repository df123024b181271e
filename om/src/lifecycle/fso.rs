//! The `files` phase of a lifecycle pass over a FILE_SYSTEM_OPTIMIZED
//! bucket: a depth-first walk of its directory tree in name order (each
//! directory's files, then its subdirectories), evaluating every file by its
//! path. Directories are walked, never expired (S3's rules name objects).
//!
//! The cursor is the path of the last file evaluated (`F` + path) or of the
//! last directory finished (`D` + path). Resuming resolves the cursor's
//! directories with point reads (one per level: they are keyed by parent id
//! and name) and positions one iterator, in the deepest directory, right
//! after the cursor: one native seek, no entry at or before it read again.
//! A directory renamed or removed since the cursor was stored is resumed
//! after, at its parent.

use om_proto::store::{BucketRecord, LifecycleItem, LifecycleRecord, LifecycleScan};
use rocksdb::DB;

use super::eval::{self, Subject};
use super::scan::PageLimits;
use crate::error::OmError;
use crate::fs;
use crate::store::iter::DeferredSeekIter;
use crate::store::keys;
use crate::store::table::{self, DirectoryTable, FileTable};

/// Where a directory of the walk stands.
#[derive(Debug, Clone)]
enum Stage {
    /// Its files, after this name (None: from the first).
    Files(Option<String>),
    /// Its subdirectories, after this name.
    Dirs(Option<String>),
}

#[derive(Debug, Clone)]
struct Frame {
    id: u64,
    /// The directory's path ("" for the root).
    path: String,
    stage: Stage,
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// The walk's stack for `cursor` (see the module's comment).
fn resume(db: &DB, root: u64, cursor: &[u8]) -> Result<Vec<Frame>, OmError> {
    let mut stack = vec![Frame {
        id: root,
        path: String::new(),
        stage: Stage::Files(None),
    }];
    let Some((&kind, path)) = cursor.split_first() else {
        return Ok(stack);
    };
    let path = String::from_utf8_lossy(path).into_owned();
    let comps = fs::components(&path);
    let Some((last, dirs)) = comps.split_last() else {
        return Ok(stack);
    };
    for name in dirs {
        let top = stack.last_mut().expect("the root");
        match fs::get_dir(db, top.id, name)? {
            Some(d) => {
                top.stage = Stage::Dirs(Some(name.to_string()));
                let path = join(&top.path, name);
                stack.push(Frame {
                    id: d.object_id,
                    path,
                    stage: Stage::Files(None),
                });
            }
            None => {
                // Gone since: continue after it, in its parent.
                top.stage = Stage::Dirs(Some(name.to_string()));
                return Ok(stack);
            }
        }
    }
    let top = stack.last_mut().expect("the root");
    top.stage = if kind == b'F' {
        Stage::Files(Some(last.to_string()))
    } else {
        Stage::Dirs(Some(last.to_string()))
    };
    Ok(stack)
}

/// One page of the `files` phase from `from` (see `scan::page`).
pub fn page(
    db: &DB,
    bucket: &BucketRecord,
    config: &LifecycleRecord,
    mut page: LifecycleScan,
    now_ms: u64,
    limits: PageLimits,
) -> Result<LifecycleScan, OmError> {
    let mut stack = resume(db, bucket.object_id, &page.from)?;
    let mut first = true;
    let mut cursor: Vec<u8> = Vec::new();
    'walk: while let Some(top) = stack.last().cloned() {
        let depth = stack.len() - 1;
        let (cf, after) = match &top.stage {
            Stage::Files(a) => (keys::FILES_CF, a.clone()),
            Stage::Dirs(a) => (keys::DIRECTORIES_CF, a.clone()),
        };
        let prefix = keys::children_prefix(top.id);
        let lower = match &after {
            Some(name) => keys::key_successor(&keys::fs_key(top.id, name)),
            None => prefix.clone(),
        };
        let from_key = after.as_ref().map(|n| keys::fs_key(top.id, n));
        let mut it = DeferredSeekIter::new(db, cf, Some(lower), keys::prefix_end(&prefix))?;
        it.has_current();
        if first {
            first = false;
            page.resume_seeks = it.stats().seeks;
        }
        if let Stage::Files(_) = top.stage {
            while let Some((k, v)) = it.current() {
                if from_key.as_deref().is_some_and(|f| k <= f) {
                    page.resume_before_cursor += 1;
                }
                if page.evaluated > 0
                    && (page.evaluated as usize >= limits.evaluations
                        || page.items.len() >= limits.items)
                {
                    break 'walk;
                }
                page.evaluated += 1;
                let name = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
                let path = join(&top.path, &name);
                let rec = table::decode::<FileTable>(v)?;
                let s = Subject {
                    key: &path,
                    size: rec.size,
                    tags: &rec.tags,
                    sized: true,
                };
                if let Some(due) =
                    eval::current_expiry(&config.rules, &s, rec.creation_time_ms, limits.day_ms)
                    && due.is_due(now_ms)
                {
                    page.items.push(LifecycleItem {
                        entry: path.clone().into_bytes(),
                        update_id: rec.update_id,
                        action: eval::ACTION_EXPIRE_FILE,
                        rule_id: due.rule_id.to_string(),
                    });
                }
                cursor = [b"F".as_slice(), path.as_bytes()].concat();
                stack[depth].stage = Stage::Files(Some(name));
                it.advance();
            }
            it.status()?;
            stack[depth].stage = Stage::Dirs(None);
            continue;
        }
        let next = match it.current() {
            Some((k, v)) => {
                if from_key.as_deref().is_some_and(|f| k <= f) {
                    page.resume_before_cursor += 1;
                }
                let name = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
                Some((name, table::decode::<DirectoryTable>(v)?.object_id))
            }
            None => None,
        };
        it.status()?;
        match next {
            Some((name, id)) => {
                if page.evaluated > 0 && page.evaluated as usize >= limits.evaluations {
                    break 'walk;
                }
                page.evaluated += 1;
                let path = join(&top.path, &name);
                stack[depth].stage = Stage::Dirs(Some(name));
                // Entered, nothing in it evaluated yet: `F` + "dir/" (no
                // file has an empty name).
                cursor = [b"F".as_slice(), path.as_bytes(), b"/".as_slice()].concat();
                stack.push(Frame {
                    id,
                    path,
                    stage: Stage::Files(None),
                });
            }
            None => {
                stack.pop();
                if top.path.is_empty() {
                    // The root is finished: so is the phase.
                    page.phase_done = true;
                    page.to.clear();
                    return Ok(page);
                }
                cursor = [b"D".as_slice(), top.path.as_bytes()].concat();
            }
        }
    }
    page.to = cursor;
    if page.to.is_empty() || page.to == page.from {
        // Nothing moved (cannot happen with a budget of at least one entry):
        // end the phase rather than propose a page that stands still.
        page.phase_done = true;
        page.to.clear();
    }
    Ok(page)
}
