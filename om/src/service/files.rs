//! Reads of FILE_SYSTEM_OPTIMIZED buckets: GetFileStatus and ListStatus.
//!
//! ListStatus merges a directory's subdirectories and files (two tables, both
//! keyed by parent id + name) in name order: each table is positioned with one
//! native seek per page. A recursive listing walks depth first with one pair
//! of iterators per open directory; its continuation token holds the stack of
//! directories being walked, and a continuation page seeks only the innermost
//! one until the page moves to another directory.

use om_proto::store::{BucketRecord, DirectoryRecord, KeyRecord};

use super::{Consistency, OmService};
use crate::error::OmError;
use crate::fs::{self, Entry};
use crate::listing::ContinuationToken;
use crate::store::iter::{DeferredSeekIter, IterStats};
use crate::store::keys;
use crate::store::table::{self, DirectoryTable, FileTable};

/// One entry of a listing or a status: a directory or a file at `path`.
#[derive(Debug, Clone)]
pub enum Status {
    Dir { path: String, rec: DirectoryRecord },
    File { path: String, rec: KeyRecord },
}

/// One page of ListStatus.
#[derive(Debug, Clone)]
pub struct StatusPage {
    pub entries: Vec<Status>,
    pub next_continuation_token: String,
    pub stats: IterStats,
}

/// A ListStatus request, validated (path normalized).
#[derive(Debug, Clone, Default)]
pub struct StatusListing {
    pub volume: String,
    pub bucket: String,
    pub path: String,
    pub start_after: String,
    pub max: u32,
    pub recursive: bool,
    pub continuation_token: String,
}

/// A directory being walked: its id, its path (with a trailing `/`, or empty
/// at the listing's top), and the last name returned from it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Frame {
    dir: u64,
    path: String,
    after: Option<String>,
}

fn encode_frames(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(&f.dir.to_be_bytes());
        for s in [Some(&f.path), f.after.as_ref()] {
            match s {
                Some(s) => {
                    out.push(1);
                    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
                    out.extend_from_slice(s.as_bytes());
                }
                None => out.push(0),
            }
        }
    }
    out
}

fn decode_frames(mut b: &[u8]) -> Option<Vec<Frame>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (h, t) = b.split_at(n);
        *b = t;
        Some(h)
    }
    fn string(b: &mut &[u8]) -> Option<Option<String>> {
        match take(b, 1)?[0] {
            0 => Some(None),
            1 => {
                let n = u32::from_be_bytes(take(b, 4)?.try_into().ok()?) as usize;
                Some(Some(String::from_utf8(take(b, n)?.to_vec()).ok()?))
            }
            _ => None,
        }
    }
    let mut frames = Vec::new();
    while !b.is_empty() {
        let dir = u64::from_be_bytes(take(&mut b, 8)?.try_into().ok()?);
        let path = string(&mut b)??;
        let after = string(&mut b)?;
        frames.push(Frame { dir, path, after });
    }
    (!frames.is_empty()).then_some(frames)
}

/// The two positioned iterators of one directory.
struct Open<'a> {
    dirs: DeferredSeekIter<'a>,
    files: DeferredSeekIter<'a>,
}

impl<'a> Open<'a> {
    fn new(db: &'a rocksdb::DB, f: &Frame) -> Result<Open<'a>, OmError> {
        let prefix = keys::children_prefix(f.dir);
        let mut dirs = DeferredSeekIter::with_prefix(db, keys::DIRECTORIES_CF, &prefix)?;
        let mut files = DeferredSeekIter::with_prefix(db, keys::FILES_CF, &prefix)?;
        let start = match &f.after {
            Some(a) => keys::key_successor(&keys::fs_key(f.dir, a)),
            None => prefix,
        };
        dirs.seek(&start);
        files.seek(&start);
        Ok(Open { dirs, files })
    }

    /// The next entry in name order (`true` = directory), without moving.
    fn peek(&mut self) -> Option<(Vec<u8>, bool)> {
        let d = self.dirs.current().map(|(k, _)| k[8..].to_vec());
        let f = self.files.current().map(|(k, _)| k[8..].to_vec());
        match (d, f) {
            (Some(d), Some(f)) if f < d => Some((f, false)),
            (Some(d), _) => Some((d, true)),
            (None, Some(f)) => Some((f, false)),
            (None, None) => None,
        }
    }

    fn stats(&self) -> IterStats {
        let (a, b) = (self.dirs.stats(), self.files.stats());
        IterStats {
            seeks: a.seeks + b.seeks,
            nexts: a.nexts + b.nexts,
            tombstones: a.tombstones + b.tombstones,
        }
    }

    fn status(&self) -> Result<(), OmError> {
        self.dirs.status()?;
        self.files.status()
    }
}

fn add(total: &mut IterStats, s: IterStats) {
    total.seeks += s.seeks;
    total.nexts += s.nexts;
    total.tombstones += s.tombstones;
}

impl OmService {
    fn fso_bucket_now(&self, volume: &str, bucket: &str) -> Result<BucketRecord, OmError> {
        crate::apply::require_layout(self.bucket_now(volume, bucket)?, crate::apply::LAYOUT_FSO)
    }

    /// A token's directories must still be where it says, under the listed
    /// directory of this bucket: each frame's path is resolved again from the
    /// root and must name the frame's directory id. So a token reaches only
    /// what the same request could list, and a listing whose directories were
    /// renamed or deleted since the last page is refused rather than resumed
    /// somewhere else.
    fn check_frames(&self, root: u64, base: &str, frames: &[Frame]) -> Result<(), OmError> {
        let changed = || {
            OmError::invalid(
                "INVALID_CONTINUATION_TOKEN",
                "continuation_token",
                "a directory of this listing was renamed or deleted since the token was issued, or the token is not from this listing; start the listing again",
            )
        };
        if frames.first().map(|f| f.path.as_str()) != Some(base) {
            return Err(changed());
        }
        let (mut id, mut at) = (root, "");
        for (i, f) in frames.iter().enumerate() {
            let rel = f.path.strip_prefix(at).ok_or_else(changed)?;
            // The top frame is the listed directory itself; each deeper one
            // is a child directory of the frame above it.
            let shape_ok = if i == 0 {
                rel.is_empty() || rel.ends_with('/')
            } else {
                rel.len() > 1 && rel.ends_with('/') && !rel[..rel.len() - 1].contains('/')
            };
            if !shape_ok {
                return Err(changed());
            }
            let comps = fs::components(rel.trim_end_matches('/'));
            match fs::walk_dirs(&self.db, id, &comps, "continuation_token")? {
                fs::Walk::Dir(d) if d == f.dir => id = d,
                _ => return Err(changed()),
            }
            at = &f.path;
        }
        Ok(())
    }

    /// What `path` (normalized) names in an FSO bucket.
    pub async fn file_status(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        path: &str,
    ) -> Result<Status, OmError> {
        self.read_barrier(c).await?;
        let b = self.fso_bucket_now(volume, bucket)?;
        let comps = fs::components(path);
        let not_found = || {
            OmError::not_found(
                "PATH_NOT_FOUND",
                "path",
                format!("{path} does not exist in {volume}/{bucket}"),
            )
        };
        match fs::stat(&self.db, b.object_id, &comps, "path")?.ok_or_else(not_found)? {
            Entry::Root { id } => Ok(Status::Dir {
                path: String::new(),
                rec: DirectoryRecord {
                    object_id: id,
                    creation_time_ms: b.creation_time_ms,
                    modification_time_ms: b.modification_time_ms,
                    update_id: b.update_id,
                    ..Default::default()
                },
            }),
            Entry::Dir { rec, .. } => Ok(Status::Dir {
                path: path.to_string(),
                rec,
            }),
            Entry::File { rec, .. } => Ok(Status::File {
                path: path.to_string(),
                rec,
            }),
        }
    }

    /// One page of a directory's entries (or its subtree's, recursively).
    pub async fn list_status(
        &self,
        c: Consistency,
        q: StatusListing,
    ) -> Result<StatusPage, OmError> {
        self.read_barrier(c).await?;
        let b = self.fso_bucket_now(&q.volume, &q.bucket)?;
        let comps = fs::components(&q.path);
        let entry = fs::stat(&self.db, b.object_id, &comps, "path")?.ok_or_else(|| {
            OmError::not_found(
                "PATH_NOT_FOUND",
                "path",
                format!("{} does not exist in {}/{}", q.path, q.volume, q.bucket),
            )
        })?;
        let top = match entry {
            Entry::File { rec, .. } => {
                // Listing a file lists the file itself.
                return Ok(StatusPage {
                    entries: vec![Status::File { path: q.path, rec }],
                    next_continuation_token: String::new(),
                    stats: IterStats::default(),
                });
            }
            other => other.dir_id().unwrap_or_default(),
        };
        let expect = ContinuationToken {
            version: 1,
            listing: "status".to_string(),
            volume: q.volume.clone(),
            bucket: q.bucket.clone(),
            bucket_object_id: b.object_id,
            prefix: q.path.as_bytes().to_vec(),
            delimiter: vec![u8::from(q.recursive)],
            resume: Vec::new(),
        };
        let base = if q.path.is_empty() {
            String::new()
        } else {
            format!("{}/", q.path)
        };
        let mut frames = if q.continuation_token.is_empty() {
            vec![Frame {
                dir: top,
                path: base,
                after: (!q.start_after.is_empty()).then(|| q.start_after.clone()),
            }]
        } else {
            let t = ContinuationToken::decode_token(&q.continuation_token, &expect)?;
            let frames = decode_frames(&t.resume).ok_or_else(|| {
                OmError::invalid(
                    "INVALID_CONTINUATION_TOKEN",
                    "continuation_token",
                    "continuation token is malformed",
                )
            })?;
            self.check_frames(b.object_id, &base, &frames)?;
            frames
        };
        let max = self.page_size(q.max);
        let mut entries = Vec::new();
        let mut stats = IterStats::default();
        // Iterators of the frames entered on this page, innermost last; the
        // frames below them are positioned lazily when the walk returns.
        let mut open: Vec<Option<Open<'_>>> = frames.iter().map(|_| None).collect();
        let mut truncated = false;
        while let Some(frame) = frames.last_mut() {
            let slot = open.last_mut().expect("one slot per frame");
            if slot.is_none() {
                *slot = Some(Open::new(&self.db, frame)?);
            }
            let it = slot.as_mut().expect("just opened");
            let Some((name, is_dir)) = it.peek() else {
                it.status()?;
                add(&mut stats, it.stats());
                frames.pop();
                open.pop();
                continue;
            };
            if entries.len() == max {
                truncated = true;
                break;
            }
            let name = String::from_utf8(name)
                .map_err(|_| OmError::Internal("non-UTF-8 name in a table".to_string()))?;
            let path = format!("{}{name}", frame.path);
            frame.after = Some(name);
            if is_dir {
                let (_, v) = it.dirs.current().expect("peeked");
                let rec = table::decode::<DirectoryTable>(v)?;
                it.dirs.advance();
                let child = rec.object_id;
                entries.push(Status::Dir {
                    path: path.clone(),
                    rec,
                });
                if q.recursive {
                    frames.push(Frame {
                        dir: child,
                        path: format!("{path}/"),
                        after: None,
                    });
                    open.push(None);
                }
            } else {
                let (_, v) = it.files.current().expect("peeked");
                let rec = table::decode::<FileTable>(v)?;
                it.files.advance();
                entries.push(Status::File { path, rec });
            }
        }
        for it in open.iter().flatten() {
            it.status()?;
            add(&mut stats, it.stats());
        }
        let next_continuation_token = if truncated {
            ContinuationToken {
                resume: encode_frames(&frames),
                ..expect
            }
            .encode_token()
        } else {
            String::new()
        };
        Ok(StatusPage {
            entries,
            next_continuation_token,
            stats,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let f = vec![
            Frame {
                dir: 7,
                path: String::new(),
                after: Some("a".into()),
            },
            Frame {
                dir: 9,
                path: "a/".into(),
                after: None,
            },
        ];
        assert_eq!(decode_frames(&encode_frames(&f)), Some(f));
        assert_eq!(decode_frames(&[1, 2, 3]), None);
        assert_eq!(decode_frames(&[]), None);
    }
}
