//! Checkpoints: every table, read through om's listing APIs, against the
//! model; and acknowledging entries of the deleted-blocks table.

use om_client::v1::*;
use rand::Rng;

use crate::differential::model::{State, View, got_view, view};
use crate::differential::runner::Run;
use crate::differential::{BUCKETS, FS_BUCKET, KEYS, ids};

impl Run {
    /// The FSO bucket through ListStatus (recursive, small pages) and its
    /// counters, against the model.
    async fn check_fs(&self) {
        let ctx = self.ctx();
        let mut got = Vec::new();
        let mut token = String::new();
        loop {
            let r = self
                .c
                .list_status(ListStatusRequest {
                    volume: "vol1".into(),
                    bucket: FS_BUCKET.into(),
                    recursive: true,
                    max_entries: 3,
                    continuation_token: token.clone(),
                    ..Default::default()
                })
                .await
                .unwrap();
            got.extend(r.entries.iter().map(|e| {
                (
                    e.path.clone(),
                    e.is_directory,
                    e.size,
                    e.etag.clone(),
                    ids(&e.blocks),
                    if e.is_directory { 0 } else { e.update_id },
                )
            }));
            if !r.truncated {
                break;
            }
            token = r.next_continuation_token;
        }
        // Depth first, each directory before its contents, names in byte order:
        // sorting paths by their components gives exactly that order.
        let mut want: Vec<_> = self
            .m
            .dirs
            .iter()
            .map(|d| (d.clone(), true, 0, String::new(), Vec::new(), 0))
            .chain(self.m.files.iter().map(|(p, k)| {
                (
                    p.clone(),
                    false,
                    k.size,
                    k.etag.clone(),
                    k.blocks.clone(),
                    k.update_id,
                )
            }))
            .collect();
        want.sort_by(|a, b| a.0.split('/').cmp(b.0.split('/')));
        assert_eq!(got, want, "{ctx}: the FSO bucket");
        let info = self.c.get_bucket("vol1", FS_BUCKET).await.unwrap();
        let used: u64 = self.m.files.values().map(|k| k.size).sum();
        assert_eq!(
            (info.key_count, info.used_bytes, info.open_key_count),
            (
                self.m.files.len() as u64,
                used,
                self.m.fs_sessions.len() as u64
            ),
            "{ctx}: counters of {FS_BUCKET}"
        );
    }

    async fn deleted(&self) -> Vec<DeletedBlocksEntry> {
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let p = self
                .c
                .list_deleted_blocks(ListDeletedBlocksRequest {
                    after: after.clone(),
                    max_entries: 7,
                    ..Default::default()
                })
                .await
                .unwrap();
            out.extend(p.entries);
            if !p.truncated {
                return out;
            }
            after = p.next_after;
        }
    }

    pub(crate) async fn ack(&mut self) {
        let entries = self.deleted().await;
        let chosen: Vec<&DeletedBlocksEntry> = entries
            .iter()
            .filter(|_| self.rng.random_bool(0.5))
            .collect();
        if chosen.is_empty() {
            return;
        }
        let r = self
            .c
            .ack_deleted_blocks(AckDeletedBlocksRequest {
                ids: chosen.iter().map(|e| e.id.clone()).collect(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(r.acknowledged as usize, chosen.len(), "{}", self.ctx());
        for e in chosen {
            for b in &e.blocks {
                let pos = self.m.freed.iter().position(|x| *x == b.block_id);
                let pos = pos.unwrap_or_else(|| {
                    panic!(
                        "{}: om freed block {} the model holds",
                        self.ctx(),
                        b.block_id
                    )
                });
                self.m.freed.swap_remove(pos);
            }
        }
    }

    /// ListObjectVersions of `b`, in small pages followed by continuation
    /// token and by S3's markers, against the model's histories.
    async fn check_versions(&mut self, b: &'static str) {
        let ctx = self.ctx();
        let want: Vec<(String, View)> = KEYS
            .iter()
            .flat_map(|k| {
                self.m
                    .history(b, k)
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (k.to_string(), view(v, i == 0)))
            })
            .collect();
        for (by_token, max_keys) in [(true, 3), (false, 2)] {
            let mut got = Vec::new();
            let mut req = ListObjectVersionsRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                max_keys,
                ..Default::default()
            };
            loop {
                let r = self.c.list_object_versions(req.clone()).await.unwrap();
                assert!(r.common_prefixes.is_empty(), "{ctx}");
                for v in &r.versions {
                    assert_eq!(
                        v.noncurrent_since_ms != 0,
                        !v.is_latest,
                        "{ctx}: {b}/{} version {}: noncurrent since",
                        v.name,
                        v.version_id
                    );
                    got.push((v.name.clone(), got_view(v)));
                }
                if !r.truncated {
                    break;
                }
                let last = r.versions.last().unwrap();
                assert_eq!(
                    (&r.next_key_marker, &r.next_version_id_marker),
                    (&last.name, &last.version_id),
                    "{ctx}: next markers of a page of {b}"
                );
                if !by_token && !last.is_latest {
                    self.note(format!(
                        "a page by markers ends at a noncurrent {}",
                        match (last.delete_marker, last.version_id == "null") {
                            (true, _) => "delete marker",
                            (false, true) => "null version",
                            (false, false) => "version",
                        }
                    ));
                }
                if by_token {
                    req.continuation_token = r.next_continuation_token;
                } else {
                    req.key_marker = r.next_key_marker;
                    req.version_id_marker = r.next_version_id_marker;
                }
            }
            assert_eq!(got, want, "{ctx}: versions of {b} (by token: {by_token})");
        }
    }

    /// Compares every table, through the listing APIs, with the model.
    pub(crate) async fn check_all(&mut self) {
        self.check_fs().await;
        let ctx = self.ctx();
        for b in BUCKETS {
            let mut got = Vec::new();
            let mut token = String::new();
            loop {
                let r = self
                    .c
                    .list_keys(ListKeysRequest {
                        volume: "vol1".into(),
                        bucket: b.into(),
                        max_keys: 2,
                        continuation_token: token.clone(),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                got.extend(r.keys.iter().map(|k| {
                    (
                        k.name.clone(),
                        k.size,
                        k.etag.clone(),
                        ids(&k.blocks),
                        k.update_id,
                    )
                }));
                if !r.truncated {
                    break;
                }
                token = r.next_continuation_token;
            }
            let want: Vec<_> = KEYS
                .iter()
                .filter_map(|k| {
                    self.m.current(b, k).map(|v| {
                        (
                            k.to_string(),
                            v.size,
                            v.etag.clone(),
                            v.blocks.clone(),
                            v.update_id,
                        )
                    })
                })
                .collect();
            assert_eq!(got, want, "{ctx}: keys of {b}");
            self.check_versions(b).await;
            // Every version holding data counts; delete markers do not.
            let objects = || {
                KEYS.iter()
                    .flat_map(|k| self.m.history(b, k))
                    .filter(|v| !v.marker)
            };
            let info = self.c.get_bucket("vol1", b).await.unwrap();
            let open = self.m.sessions.values().filter(|s| s.bucket == b).count() as u64;
            assert_eq!(
                (
                    info.versioning(),
                    info.key_count,
                    info.used_bytes,
                    info.open_key_count
                ),
                (
                    match self.m.state(b) {
                        State::Unversioned => BucketVersioning::Unversioned,
                        State::Enabled => BucketVersioning::Enabled,
                        State::Suspended => BucketVersioning::Suspended,
                    },
                    objects().count() as u64,
                    objects().map(|v| v.k.size).sum::<u64>(),
                    open
                ),
                "{ctx}: versioning and counters of {b}"
            );
            let sessions = self
                .c
                .list_open_keys(ListOpenKeysRequest {
                    volume: "vol1".into(),
                    bucket: b.into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut got: Vec<_> = sessions
                .keys
                .iter()
                .map(|s| (s.name.clone(), s.session_id, s.allocated_blocks.clone()))
                .collect();
            got.sort();
            let mut want: Vec<_> = self
                .m
                .sessions
                .iter()
                .filter(|(_, s)| s.bucket == b)
                .map(|(id, s)| (s.key.to_string(), *id, s.allocated.clone()))
                .collect();
            want.sort();
            assert_eq!(got, want, "{ctx}: open keys of {b}");
            let ups = self
                .c
                .list_multipart_uploads(ListMultipartUploadsRequest {
                    volume: "vol1".into(),
                    bucket: b.into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut got: Vec<_> = ups
                .uploads
                .iter()
                .map(|u| {
                    (
                        u.key.clone(),
                        u64::from_str_radix(&u.upload_id, 16).unwrap(),
                    )
                })
                .collect();
            got.sort();
            let mut want: Vec<_> = self
                .m
                .uploads
                .iter()
                .filter(|(_, u)| u.bucket == b)
                .map(|(id, u)| (u.key.to_string(), *id))
                .collect();
            want.sort();
            assert_eq!(got, want, "{ctx}: uploads of {b}");
            for (key, id) in want {
                let parts = self
                    .c
                    .list_parts(ListPartsRequest {
                        volume: "vol1".into(),
                        bucket: b.into(),
                        key,
                        upload_id: format!("{id:016x}"),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                let got: Vec<_> = parts
                    .parts
                    .iter()
                    .map(|p| (p.part_number, p.size, p.etag.clone(), ids(&p.blocks)))
                    .collect();
                let want: Vec<_> = self.m.uploads[&id]
                    .parts
                    .iter()
                    .map(|(n, p)| (*n, p.size, p.etag.clone(), p.blocks.clone()))
                    .collect();
                assert_eq!(got, want, "{ctx}: parts of upload {id:016x}");
            }
        }
        let mut got: Vec<u64> = self
            .deleted()
            .await
            .iter()
            .flat_map(|e| e.blocks.iter().map(|b| b.block_id))
            .collect();
        got.sort();
        let mut want = self.m.freed.clone();
        want.sort();
        assert_eq!(got, want, "{ctx}: blocks awaiting reclamation");
    }
}
