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
//! after, at its parent. Every file and directory the page's iterators yield
//! is compared with the stored cursor in walk order (`at_or_before`), so a
//! resumption that walked again what an earlier page walked shows in
//! `resume_before_cursor`, whatever stack it rebuilt.

use om_proto::store::{BucketRecord, LifecycleItem, LifecycleRecord, LifecycleScan};
use rocksdb::DB;

use super::{self as scan, PageLimits};
use crate::error::OmError;
use crate::fs;
use crate::lifecycle::eval::{self, Subject};
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

/// Where a cursor (`F` + a file's path, `F` + a directory's path + `/` for
/// a directory entered, `D` + a directory's path for one finished) falls in
/// the walk: per level of the path, (stage, name), files (0) before
/// subdirectories (1) and a finished directory's end (2) after everything
/// in it. Walk order is the order of these sequences (a directory entered
/// is a prefix of what is in it, so it comes first); names compare as the
/// tables order them, by bytes.
fn walk_position(cursor: &[u8]) -> Vec<(u8, &[u8])> {
    let Some((&kind, path)) = cursor.split_first() else {
        return Vec::new();
    };
    let mut comps: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    let last = comps.pop().unwrap_or_default();
    let mut out: Vec<(u8, &[u8])> = comps.into_iter().map(|c| (1, c)).collect();
    match kind {
        // A directory entered: its path is the position.
        b'F' if last.is_empty() => {}
        b'F' => out.push((0, last)),
        _ => {
            out.push((1, last));
            out.push((2, &[]));
        }
    }
    out
}

/// Whether the walk reaches `entry` (a cursor of the same form) at or
/// before `cursor`; nothing lies before an empty cursor (a phase's start).
fn at_or_before(entry: &[u8], cursor: &[u8]) -> bool {
    !cursor.is_empty() && walk_position(entry) <= walk_position(cursor)
}

/// The cursor naming a child of the directory at `dir`: a file evaluated,
/// or a subdirectory entered.
fn child_cursor(dir: &str, name: &[u8], is_dir: bool) -> Vec<u8> {
    let mut c = Vec::with_capacity(dir.len() + name.len() + 3);
    c.push(b'F');
    if !dir.is_empty() {
        c.extend_from_slice(dir.as_bytes());
        c.push(b'/');
    }
    c.extend_from_slice(name);
    if is_dir {
        c.push(b'/');
    }
    c
}

/// One page of the `files` phase from `from` (see `scan::page`).
pub fn page(
    db: &DB,
    bucket: &BucketRecord,
    config: &LifecycleRecord,
    page: LifecycleScan,
    now_ms: u64,
    limits: PageLimits,
) -> Result<LifecycleScan, OmError> {
    let stack = resume(db, bucket.object_id, &page.from)?;
    walk(db, config, page, stack, now_ms, limits)
}

/// Walks on from `stack` (`resume`'s, for the page's cursor).
fn walk(
    db: &DB,
    config: &LifecycleRecord,
    mut page: LifecycleScan,
    mut stack: Vec<Frame>,
    now_ms: u64,
    limits: PageLimits,
) -> Result<LifecycleScan, OmError> {
    let from = page.from.clone();
    let mut first = true;
    let mut cursor: Vec<u8> = Vec::new();
    'walk: while let Some(top) = stack.last().cloned() {
        let depth = stack.len() - 1;
        let (cf, after) = match &top.stage {
            Stage::Files(a) => (keys::FILES_CF, a.clone()),
            Stage::Dirs(a) => (keys::DIRECTORIES_CF, a.clone()),
        };
        let files = matches!(top.stage, Stage::Files(_));
        let prefix = keys::children_prefix(top.id);
        let lower = match &after {
            Some(name) => keys::key_successor(&keys::fs_key(top.id, name)),
            None => prefix.clone(),
        };
        let mut it = scan::ResumedIter::new(
            DeferredSeekIter::new(db, cf, Some(lower), keys::prefix_end(&prefix))?,
            |k: &[u8]| {
                let name = k.get(prefix.len()..).unwrap_or_default();
                at_or_before(&child_cursor(&top.path, name, !files), &from)
            },
        );
        it.has_current();
        if first {
            first = false;
            page.resume_seeks = it.stats().seeks;
        }
        if files {
            let mut spent = false;
            while let Some((k, v)) = it.current() {
                if page.evaluated > 0
                    && (page.evaluated as usize >= limits.evaluations
                        || page.items.len() >= limits.items)
                {
                    spent = true;
                    break;
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
                    eval::current_expiry(&config.rules, &s, eval::written_ms(&rec), limits.day_ms)
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
            page.resume_before_cursor += it.before_cursor();
            if spent {
                break 'walk;
            }
            stack[depth].stage = Stage::Dirs(None);
            continue;
        }
        let next = match it.current() {
            Some((k, v)) => {
                let name = String::from_utf8_lossy(&k[prefix.len()..]).into_owned();
                Some((name, table::decode::<DirectoryTable>(v)?.object_id))
            }
            None => None,
        };
        it.status()?;
        page.resume_before_cursor += it.before_cursor();
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

#[cfg(test)]
mod tests {
    use super::*;
    use om_proto::store::{DirectoryRecord, KeyRecord};
    use rocksdb::WriteBatch;

    #[test]
    fn walk_positions_follow_the_walk() {
        // The order a walk reaches entries: each directory's files, then
        // its subdirectories (entered, their contents, finished).
        let order: [&[u8]; 10] = [
            b"Fa.log",
            b"Fz.log",
            b"Fdir/",
            b"Fdir/b",
            b"Fdir/sub/",
            b"Fdir/sub/c",
            b"Ddir/sub",
            b"Ddir",
            b"Fdir-2/",
            b"Ddir-2",
        ];
        for (i, a) in order.iter().enumerate() {
            for (j, b) in order.iter().enumerate() {
                assert_eq!(
                    at_or_before(a, b),
                    i <= j,
                    "{} vs {}",
                    String::from_utf8_lossy(a),
                    String::from_utf8_lossy(b)
                );
            }
            assert!(!at_or_before(a, b""), "nothing lies before the start");
        }
        assert_eq!(child_cursor("", b"a.log", false), b"Fa.log");
        assert_eq!(child_cursor("dir", b"sub", true), b"Fdir/sub/");
    }

    /// A tree: a.log, z.log, dir/b, dir/sub/c, under root id 1.
    fn tree() -> (tempfile::TempDir, DB) {
        let dir = tempfile::tempdir().unwrap();
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        let db = DB::open_cf(&o, dir.path(), keys::TABLE_CFS).unwrap();
        let mut b = WriteBatch::default();
        let file = |b: &mut WriteBatch, parent: u64, name: &str| {
            let mut rec = KeyRecord {
                modification_time_ms: 1,
                ..Default::default()
            };
            table::put::<FileTable>(&db, b, &keys::fs_key(parent, name), &mut rec).unwrap();
        };
        file(&mut b, 1, "a.log");
        file(&mut b, 1, "z.log");
        file(&mut b, 2, "b");
        file(&mut b, 3, "c");
        for (parent, name, id) in [(1, "dir", 2), (2, "sub", 3)] {
            let mut rec = DirectoryRecord {
                object_id: id,
                parent_id: parent,
                ..Default::default()
            };
            table::put::<DirectoryTable>(&db, &mut b, &keys::fs_key(parent, name), &mut rec)
                .unwrap();
        }
        db.write(b).unwrap();
        (dir, db)
    }

    /// A resumption counts every entry its iterators yield at or before the
    /// stored cursor, compared in walk order, not against the stack it
    /// rebuilt: 0 for the stack `resume` builds, every entry walked again
    /// for a walk restarted at the root.
    #[test]
    fn entries_walked_again_are_counted() {
        let (_dir, db) = tree();
        let config = LifecycleRecord::default();
        let limits = PageLimits {
            evaluations: 1000,
            items: 1000,
            day_ms: 1000,
            interval_ms: 0,
        };
        let from = b"Fdir/b".to_vec();
        let page = || LifecycleScan {
            phase: scan::PHASE_FILES,
            from: from.clone(),
            ..Default::default()
        };
        let resumed = walk(
            &db,
            &config,
            page(),
            resume(&db, 1, &from).unwrap(),
            5,
            limits,
        )
        .unwrap();
        assert_eq!(resumed.resume_before_cursor, 0);
        // sub entered, c, and done.
        assert_eq!(resumed.evaluated, 2);
        assert!(resumed.phase_done);
        // Restarted at the root: a.log, z.log, dir (entered) and dir/b are
        // read again.
        let again = walk(
            &db,
            &config,
            page(),
            resume(&db, 1, b"").unwrap(),
            5,
            limits,
        )
        .unwrap();
        assert_eq!(again.resume_before_cursor, 4);
        // A phase's first page resumes from nothing.
        let first = walk(
            &db,
            &config,
            LifecycleScan {
                from: Vec::new(),
                ..page()
            },
            resume(&db, 1, b"").unwrap(),
            5,
            limits,
        )
        .unwrap();
        assert_eq!(first.resume_before_cursor, 0);
        assert_eq!(first.evaluated, 6);
    }
}
