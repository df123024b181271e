//! Uploads into the object-store buckets: key sessions (open, allocate,
//! commit) and multipart uploads (initiate, part, complete, abort).

use std::collections::{BTreeMap, HashSet};

use md5::{Digest, Md5};
use om_client::v1::*;
use rand::Rng;
use rand::seq::IndexedRandom;

use crate::differential::model::{MKey, MPart, MSession, MUpload};
use crate::differential::runner::Run;
use crate::differential::{BLOCK, MIN_PART, ids, md5_hex, reason};

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

impl Run {
    pub(crate) async fn open(&mut self) {
        let (b, k) = self.pick_key();
        let n = self.rng.random_range(0..3);
        let r = self
            .c
            .open_key(OpenKeyRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                blocks: n,
                ..Default::default()
            })
            .await
            .unwrap();
        let allocated = self.m.alloc(u64::from(n));
        assert_eq!(ids(&r.blocks), allocated, "{}: open", self.ctx());
        self.m.sessions.insert(
            r.session_id,
            MSession {
                bucket: b,
                key: k,
                allocated,
            },
        );
    }

    /// An existing session (usually) or a made-up one.
    fn pick_session(&mut self) -> (u64, &'static str, &'static str) {
        let live: Vec<(u64, MSession)> = self
            .m
            .sessions
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        if live.is_empty() || self.rng.random_bool(0.1) {
            let (b, k) = self.pick_key();
            return (self.rng.random_range(1..1000), b, k);
        }
        let (id, s) = live.choose(&mut self.rng).unwrap().clone();
        (id, s.bucket, s.key)
    }

    pub(crate) async fn allocate(&mut self) {
        let (id, b, k) = self.pick_session();
        let n = self.rng.random_range(1..3);
        let r = self
            .c
            .allocate_block(AllocateBlockRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                session_id: id,
                count: n,
                ..Default::default()
            })
            .await;
        let want = self
            .m
            .sessions
            .contains_key(&id)
            .then_some(())
            .ok_or("SESSION_NOT_FOUND");
        self.expect_same("allocate", reason(&r), want);
        if let Ok(r) = r {
            let more = self.m.alloc(u64::from(n));
            assert_eq!(ids(&r.blocks), more, "{}: allocate", self.ctx());
            self.m.sessions.get_mut(&id).unwrap().allocated.extend(more);
        }
    }

    pub(crate) async fn commit(&mut self) {
        let (id, b, k) = self.pick_session();
        let allocated = self
            .m
            .sessions
            .get(&id)
            .map(|s| s.allocated.clone())
            .unwrap_or_default();
        let used = self.rng.random_range(0..=allocated.len());
        let mut size = match used {
            0 => 0,
            n => (n as u64 - 1) * BLOCK + self.rng.random_range(1..=BLOCK),
        };
        let bad_size = self.rng.random_bool(0.1);
        if bad_size {
            size += 1;
        }
        let mut blocks = Vec::new();
        let mut off = 0;
        for &bid in &allocated[..used] {
            let len = BLOCK.min(size - off);
            blocks.push(BlockInfo {
                block_id: bid,
                offset: off,
                length: len,
            });
            off += len;
        }
        let etag = self.etag();
        let cur = self.m.current(b, k).cloned();
        let cond = self.conditions(cur.as_ref());
        let want = if !self.m.sessions.contains_key(&id) {
            Err("SESSION_NOT_FOUND")
        } else if off != size {
            // The extra byte did not fit: the last block was full.
            Err("SIZE_MISMATCH")
        } else {
            self.m.check_cond(cur.as_ref(), &cond)
        };
        let r = self
            .c
            .commit_key(CommitKeyRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                session_id: id,
                size,
                blocks: blocks.clone(),
                etag: etag.clone(),
                conditions: cond,
                ..Default::default()
            })
            .await;
        self.expect_same("commit", reason(&r), want);
        if let Ok(r) = r {
            let s = self.m.sessions.remove(&id).unwrap();
            self.m.release(&s.allocated[used..]);
            let new = MKey {
                size,
                etag,
                blocks: ids(&blocks),
                update_id: 0,
            };
            self.learn_write("commit", b, k, &r.key.unwrap(), new, false);
        }
    }

    pub(crate) async fn initiate(&mut self) {
        let (b, k) = self.pick_key();
        let r = self
            .c
            .initiate_multipart_upload(InitiateMultipartUploadRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let id = u64::from_str_radix(&r.upload.unwrap().upload_id, 16).unwrap();
        self.m.uploads.insert(
            id,
            MUpload {
                bucket: b,
                key: k,
                parts: BTreeMap::new(),
            },
        );
    }

    fn pick_upload(&mut self) -> (u64, &'static str, &'static str) {
        let live: Vec<(u64, &'static str, &'static str)> = self
            .m
            .uploads
            .iter()
            .map(|(id, u)| (*id, u.bucket, u.key))
            .collect();
        if live.is_empty() || self.rng.random_bool(0.1) {
            let (b, k) = self.pick_key();
            return (self.rng.random_range(1..1000), b, k);
        }
        *live.choose(&mut self.rng).unwrap()
    }

    pub(crate) async fn part(&mut self) {
        let (id, b, k) = self.pick_upload();
        let n = self.rng.random_range(1..5);
        let size = *[1, MIN_PART, 2 * MIN_PART, BLOCK + 1]
            .choose(&mut self.rng)
            .unwrap();
        let etag = md5_hex(&format!("part{}", self.rng.random_range(0..3)));
        let r = self
            .c
            .commit_part(CommitPartRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                upload_id: format!("{id:016x}"),
                part_number: n,
                size,
                etag: etag.clone(),
                ..Default::default()
            })
            .await;
        let want = self
            .m
            .uploads
            .contains_key(&id)
            .then_some(())
            .ok_or("UPLOAD_NOT_FOUND");
        self.expect_same("commit part", reason(&r), want);
        if let Ok(r) = r {
            let blocks = self.m.alloc(size.div_ceil(BLOCK));
            assert_eq!(ids(&r.part.unwrap().blocks), blocks, "{}", self.ctx());
            let old = self
                .m
                .uploads
                .get_mut(&id)
                .unwrap()
                .parts
                .insert(n, MPart { size, etag, blocks });
            if let Some(old) = old {
                self.m.release(&old.blocks);
            }
        }
    }

    pub(crate) async fn complete(&mut self) {
        let (id, b, k) = self.pick_upload();
        let stored = self
            .m
            .uploads
            .get(&id)
            .map(|u| u.parts.clone())
            .unwrap_or_default();
        // An ascending selection of part numbers, sometimes with a wrong ETag
        // or a part that was never uploaded.
        let mut listed: Vec<(u32, String)> = Vec::new();
        for n in 1..=5u32 {
            let take = match stored.get(&n) {
                Some(_) => self.rng.random_bool(0.8),
                None => self.rng.random_bool(0.05),
            };
            if take {
                let etag = match stored.get(&n) {
                    Some(p) if self.rng.random_bool(0.95) => p.etag.clone(),
                    _ => md5_hex("wrong"),
                };
                listed.push((n, etag));
            }
        }
        if listed.is_empty() {
            return;
        }
        let cur = self.m.current(b, k).cloned();
        let cond = self.conditions(cur.as_ref());
        let want = if !self.m.uploads.contains_key(&id) {
            Err("UPLOAD_NOT_FOUND")
        } else {
            let mut w = Ok(());
            for (i, (n, etag)) in listed.iter().enumerate() {
                match stored.get(n) {
                    Some(p) if &p.etag == etag => {
                        if i + 1 < listed.len() && p.size < MIN_PART {
                            w = Err("ENTITY_TOO_SMALL");
                            break;
                        }
                    }
                    _ => {
                        w = Err("INVALID_PART");
                        break;
                    }
                }
            }
            w.and_then(|_| self.m.check_cond(cur.as_ref(), &cond))
        };
        let r = self
            .c
            .complete_multipart_upload(CompleteMultipartUploadRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                upload_id: format!("{id:016x}"),
                parts: listed
                    .iter()
                    .map(|(n, e)| CompletedPart {
                        part_number: *n,
                        etag: e.clone(),
                    })
                    .collect(),
                conditions: cond,
                ..Default::default()
            })
            .await;
        self.expect_same("complete", reason(&r), want);
        if let Ok(r) = r {
            let u = self.m.uploads.remove(&id).unwrap();
            let numbers: HashSet<u32> = listed.iter().map(|(n, _)| *n).collect();
            let mut h = Md5::new();
            let mut blocks = Vec::new();
            let mut size = 0;
            for (n, p) in &u.parts {
                if numbers.contains(n) {
                    h.update(hex_decode(&p.etag));
                    blocks.extend(p.blocks.clone());
                    size += p.size;
                } else {
                    self.m.release(&p.blocks);
                }
            }
            let etag = format!(
                "{}-{}",
                h.finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
                listed.len()
            );
            let new = MKey {
                size,
                etag,
                blocks,
                update_id: 0,
            };
            self.learn_write("complete", b, k, &r.key.unwrap(), new, false);
        }
    }

    pub(crate) async fn abort(&mut self) {
        let (id, b, k) = self.pick_upload();
        let r = self
            .c
            .abort_multipart_upload(AbortMultipartUploadRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                upload_id: format!("{id:016x}"),
                ..Default::default()
            })
            .await;
        let want = self
            .m
            .uploads
            .contains_key(&id)
            .then_some(())
            .ok_or("UPLOAD_NOT_FOUND");
        self.expect_same("abort", reason(&r), want);
        if let Some(u) = self.m.uploads.remove(&id) {
            for p in u.parts.values() {
                self.m.release(&p.blocks);
            }
        }
    }
}
