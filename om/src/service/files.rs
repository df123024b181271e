//! Reads of FILE_SYSTEM_OPTIMIZED buckets: GetFileStatus and ListStatus.
//!
//! ListStatus merges a directory's subdirectories and files (two tables, both
//! keyed by parent id + name) in name order: each table is positioned with one
//! native seek per page. A recursive listing walks depth first with one pair
//! of iterators per open directory; its continuation token holds the stack of
//! directories being walked (each as its id and one name, so the token grows
//! linearly with depth), and a continuation page seeks only the innermost
//! one until the page moves to another directory.

use om_proto::store::{BucketRecord, DirectoryRecord, KeyRecord};
use prost::Message;

use super::{Consistency, OmService};
use crate::error::OmError;
use crate::fs::{self, Entry};
use crate::listing::{ContinuationToken, MAX_TOKEN_CHARS, StatusFrame, StatusResume, fits};
use crate::store::iter::{DeferredSeekIter, IterStats};
use crate::store::keys;
use crate::store::table::{self, DirectoryTable, FileTable};

/// One entry of a listing or a status: a directory or a file at `path`.
#[derive(Debug, Clone)]
pub enum Status {
    Dir { path: String, rec: DirectoryRecord },
    File { path: String, rec: KeyRecord },
}

/// One page of ListStatus: entries as the caller converted them.
#[derive(Debug, Clone)]
pub struct StatusPage<T> {
    pub entries: Vec<T>,
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

/// A token's resume position: each frame's id and last name. The paths are
/// left out: each is the names of the frames above it.
fn encode_frames(frames: &[Frame]) -> Vec<u8> {
    StatusResume {
        frames: frames
            .iter()
            .map(|f| StatusFrame {
                dir: f.dir,
                after: f.after.clone(),
            })
            .collect(),
    }
    .encode_to_vec()
}

/// The frames of a resume position under `base`, the listed directory's
/// path: every frame but the innermost must name the child directory being
/// walked, and a name must be one path component. Whether the directories
/// are still there is `check_frames`' business.
fn decode_frames(b: &[u8], base: &str) -> Option<Vec<Frame>> {
    let resume = StatusResume::decode(b).ok()?;
    let n = resume.frames.len();
    let mut frames: Vec<Frame> = Vec::with_capacity(n);
    let mut path = base.to_string();
    for (i, f) in resume.frames.into_iter().enumerate() {
        if let Some(a) = &f.after
            && (a.is_empty() || a.contains('/'))
        {
            return None;
        }
        let frame = Frame {
            dir: f.dir,
            path: path.clone(),
            after: f.after,
        };
        if i + 1 < n {
            path = format!("{}{}/", path, frame.after.as_deref()?);
        }
        frames.push(frame);
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
    /// directory of this bucket: the top frame must be the listed directory
    /// (`top`, resolved from the request's path), and each deeper frame the
    /// child directory the frame above names. So a token reaches only what
    /// the same request could list, and a listing whose directories were
    /// renamed or deleted since the last page is refused rather than resumed
    /// somewhere else. One point read per level.
    fn check_frames(&self, top: u64, frames: &[Frame]) -> Result<(), OmError> {
        let changed = || {
            OmError::invalid(
                "INVALID_CONTINUATION_TOKEN",
                "continuation_token",
                "a directory of this listing was renamed or deleted since the token was issued, or the token is not from this listing; start the listing again",
            )
        };
        if frames.first().map(|f| f.dir) != Some(top) {
            return Err(changed());
        }
        for pair in frames.windows(2) {
            let name = pair[0].after.as_deref().ok_or_else(changed)?;
            match fs::get_dir(&self.db, pair[0].dir, name)? {
                Some(d) if d.object_id == pair[1].dir => {}
                _ => return Err(changed()),
            }
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
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::READ,
        )
        .await?;
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

    /// One page of a directory's entries (or its subtree's, recursively);
    /// `convert` turns each into what the response carries and says how many
    /// bytes it adds there. The page stops at its count or before its items
    /// pass the byte budget (its first item is always taken).
    pub async fn list_status<T>(
        &self,
        c: Consistency,
        q: StatusListing,
        mut convert: impl FnMut(Status) -> (T, usize),
    ) -> Result<StatusPage<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(&q.volume, &q.bucket),
            crate::authz::LIST,
        )
        .await?;
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
                let (t, _) = convert(Status::File { path: q.path, rec });
                return Ok(StatusPage {
                    entries: vec![t],
                    next_continuation_token: String::new(),
                    stats: IterStats::default(),
                });
            }
            other => other.dir_id().unwrap_or_default(),
        };
        let expect =
            ContinuationToken::expected("status", &b, q.path.as_bytes(), &[u8::from(q.recursive)]);
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
            let frames = decode_frames(&t.resume, &base).ok_or_else(|| {
                OmError::invalid(
                    "INVALID_CONTINUATION_TOKEN",
                    "continuation_token",
                    "continuation token is malformed",
                )
            })?;
            self.check_frames(top, &frames)?;
            frames
        };
        let max = self.page_size(q.max);
        let max_bytes = self.item_budget();
        let mut used = 0usize;
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
            // Converted before it is taken: an entry that does not fit the
            // byte budget stays where the iterators are, and the token
            // resumes at it.
            let (status, child) = if is_dir {
                let (_, v) = it.dirs.current().expect("peeked");
                let rec = table::decode::<DirectoryTable>(v)?;
                let child = Frame {
                    dir: rec.object_id,
                    path: format!("{path}/"),
                    after: None,
                };
                (Status::Dir { path, rec }, Some(child))
            } else {
                let (_, v) = it.files.current().expect("peeked");
                let rec = table::decode::<FileTable>(v)?;
                (Status::File { path, rec }, None)
            };
            let (t, bytes) = convert(status);
            if !fits(entries.len(), used, bytes, max_bytes) {
                truncated = true;
                break;
            }
            used += bytes;
            entries.push(t);
            frame.after = Some(name);
            if let Some(child) = child {
                it.dirs.advance();
                if q.recursive {
                    frames.push(child);
                    open.push(None);
                }
            } else {
                it.files.advance();
            }
        }
        for it in open.iter().flatten() {
            it.status()?;
            add(&mut stats, it.stats());
        }
        let next_continuation_token = if truncated {
            let token = ContinuationToken {
                resume: encode_frames(&frames),
                ..expect
            }
            .encode_token();
            // Within the path limits a token never passes MAX_TOKEN_CHARS
            // (see its derivation); only a tree nested deeper than they allow
            // (by renaming a deep directory under another) can need more, and
            // a token the next page would refuse is no use to anyone.
            if token.len() > MAX_TOKEN_CHARS {
                return Err(OmError::precondition(
                    "LISTING_TOO_DEEP",
                    "path",
                    format!(
                        "this page ends {} directories below {:?}, deeper or with longer names than the path limits allow; list a deeper directory, or ask for larger pages",
                        frames.len() - 1,
                        q.path
                    ),
                ));
            }
            token
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
    fn frames_round_trip_without_their_paths() {
        let f = vec![
            Frame {
                dir: 7,
                path: "top/".into(),
                after: Some("a".into()),
            },
            Frame {
                dir: 9,
                path: "top/a/".into(),
                after: Some("b".into()),
            },
            Frame {
                dir: 11,
                path: "top/a/b/".into(),
                after: None,
            },
        ];
        let encoded = encode_frames(&f);
        assert_eq!(decode_frames(&encoded, "top/"), Some(f));
        // Ids and names only: no frame repeats the path above it.
        assert!(!encoded.windows(3).any(|w| w == b"top"), "{encoded:?}");
        assert_eq!(decode_frames(&[1, 2, 3], ""), None);
        assert_eq!(decode_frames(&[], ""), None);
    }

    #[test]
    fn frames_refuse_names_that_are_not_one_component() {
        let frames = |names: [Option<&str>; 2]| {
            encode_frames(
                &names
                    .iter()
                    .enumerate()
                    .map(|(i, a)| Frame {
                        dir: i as u64,
                        path: String::new(),
                        after: a.map(str::to_string),
                    })
                    .collect::<Vec<_>>(),
            )
        };
        assert!(decode_frames(&frames([Some("a"), None]), "").is_some());
        // An outer frame must name the directory being walked.
        assert_eq!(decode_frames(&frames([None, None]), ""), None);
        assert_eq!(decode_frames(&frames([Some("a/b"), None]), ""), None);
        assert_eq!(decode_frames(&frames([Some("a"), Some("")]), ""), None);
    }
}
