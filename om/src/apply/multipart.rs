//! Multipart uploads: initiate, commit parts, complete with S3's ETag rule,
//! abort. The parts of one upload are one contiguous range of the `parts`
//! table, removed with a single range deletion when the upload ends.

use md5::{Digest, Md5};
use om_proto::store::{
    AbortMultipart, BlockRecord, CommandResult, CommitPart, CompleteMultipart, Empty,
    InitiateMultipart, KeyRecord, PartRecord, PartResult, UploadRecord, UploadResult,
    command_result,
};
use om_raft_store::EntryWrites;

use super::limits::block_size_or_legacy;
use super::limits::{self, MAX_KEY_BLOCKS, MAX_PART_NUMBER, MAX_PART_SIZE};
use super::ops::Operation;
use super::{Ctx, lay_out, ok};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, PartTable, UploadTable};
use crate::store::view::StateRead;

impl Operation for om_proto::store::InitiateMultipart {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)?;
        crate::validate::content_type("content_type", &self.content_type)?;
        limits::metadata(&self.metadata)?;
        limits::tags(rules, &self.tags)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.initiate_multipart(b, self)
    }
}

impl Operation for om_proto::store::CommitPart {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)?;
        limits::part_number("part_number", self.part_number)?;
        if self.size > MAX_PART_SIZE {
            return Err(OmError::invalid(
                "ENTITY_TOO_LARGE",
                "size",
                format!("a part is at most {MAX_PART_SIZE} bytes, got {}", self.size),
            ));
        }
        limits::layout(self.size, self.block_size)?;
        limits::etag("etag", &self.etag)?;
        if self.blocks.len() > MAX_KEY_BLOCKS {
            return Err(OmError::invalid(
                "INVALID_BLOCKS",
                "blocks",
                format!(
                    "{} blocks listed; a part has at most {MAX_KEY_BLOCKS}",
                    self.blocks.len()
                ),
            ));
        }
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.commit_part(b, self)
    }
}

impl Operation for om_proto::store::CompleteMultipart {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)?;
        if self.parts.is_empty() || self.parts.len() > MAX_PART_NUMBER as usize {
            return Err(OmError::invalid(
                "INVALID_PARTS",
                "parts",
                format!(
                    "1..={MAX_PART_NUMBER} parts must be listed, got {}",
                    self.parts.len()
                ),
            ));
        }
        for p in &self.parts {
            limits::part_number("parts", p.part_number)?;
            limits::etag("parts", &p.etag)?;
        }
        limits::conditions(self.conditions.as_ref())?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.complete_multipart(b, self)
    }
}

impl Operation for om_proto::store::AbortMultipart {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.abort_multipart(b, self)
    }
}

/// S3's default smallest part (all but the last): 5 MiB.
pub const DEFAULT_MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

/// The ETag S3 gives a completed multipart upload: the hex MD5 of the
/// concatenated binary MD5s of the listed parts, then `-` and their count.
/// `None` if a part ETag is not a plain hex MD5.
pub fn multipart_etag<'a>(part_etags: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut h = Md5::new();
    let mut n = 0;
    for e in part_etags {
        h.update(decode_hex16(e)?);
        n += 1;
    }
    Some(format!("{}-{n}", hex(&h.finalize())))
}

fn decode_hex16(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Ctx<'_> {
    fn upload(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        upload_id: u64,
    ) -> Result<(Vec<u8>, UploadRecord), OmError> {
        let k = keys::upload_key(volume, bucket, key, upload_id);
        match table::get::<UploadTable>(self.db, &k)? {
            Some(u) => Ok((k, u)),
            None => Err(OmError::not_found(
                "UPLOAD_NOT_FOUND",
                "upload_id",
                format!("no upload {upload_id:016x} of key {volume}/{bucket}/{key}"),
            )),
        }
    }

    /// Every stored part of an upload, in part-number order.
    pub(super) fn parts(&self, upload_id: u64) -> Result<Vec<PartRecord>, OmError> {
        let mut it = self
            .db
            .iter_prefix(keys::PARTS_CF, &keys::parts_prefix(upload_id))?;
        let mut out = Vec::new();
        while let Some((_, v)) = it.current() {
            out.push(table::decode::<PartTable>(v)?);
            it.advance();
        }
        it.status()?;
        Ok(out)
    }

    /// Stages the removal of an upload and all its parts (one range deletion).
    pub(super) fn end_upload(
        &self,
        b: &mut EntryWrites<'_>,
        key: &[u8],
        upload_id: u64,
    ) -> Result<(), OmError> {
        table::delete::<UploadTable>(self.db, b, key)?;
        let start = keys::parts_prefix(upload_id);
        let end = keys::prefix_end(&start).unwrap_or_else(|| vec![0xff; 9]);
        b.delete_range_cf(table::cf(self.db.rocks(), keys::PARTS_CF)?, start, end);
        Ok(())
    }

    pub(super) fn initiate_multipart(
        &self,
        b: &mut EntryWrites<'_>,
        c: &InitiateMultipart,
    ) -> Result<CommandResult, OmError> {
        self.object_store_bucket(&c.volume, &c.bucket)?;
        let upload_id = self.object_id(0);
        let mut rec = UploadRecord {
            format: 0,
            upload_id,
            initiated_ms: self.now,
            content_type: c.content_type.clone(),
            metadata: c.metadata.clone(),
            tags: c.tags.clone(),
        };
        let k = keys::upload_key(&c.volume, &c.bucket, &c.key, upload_id);
        table::put::<UploadTable>(self.db, b, &k, &mut rec)?;
        ok(command_result::Result::Upload(UploadResult {
            volume: c.volume.clone(),
            bucket: c.bucket.clone(),
            key: c.key.clone(),
            upload: Some(rec),
        }))
    }

    /// Stores a part (allocating its blocks); a part number uploaded again
    /// replaces the earlier part, whose blocks are freed.
    pub(super) fn commit_part(
        &self,
        b: &mut EntryWrites<'_>,
        c: &CommitPart,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.object_store_bucket(&c.volume, &c.bucket)?;
        self.upload(&c.volume, &c.bucket, &c.key, c.upload_id)?;
        let pk = keys::part_key(c.upload_id, c.part_number);
        let replaced = table::get::<PartTable>(self.db, &pk)?;
        let blocks = if c.session_id != 0 {
            // The data is already in the session's blocks (rules 9).
            if !crate::rules::WRITE_SESSIONS.holds(self.rules) {
                return Err(OmError::invalid(
                    "UNSUPPORTED_COMMAND",
                    "session_id",
                    "parts from write sessions need apply rules 9",
                ));
            }
            let s = self.session(&bucket, &c.key, c.session_id)?;
            super::write::check_committed_blocks(
                &s.rec.allocated,
                block_size_or_legacy(s.rec.block_size),
                c.session_id,
                &c.blocks,
                c.size,
            )?;
            let origin = format!(
                "unused by part {} of upload {:016x}",
                c.part_number, c.upload_id
            );
            self.finish_session(b, &mut bucket, &s, &c.blocks, origin)?;
            self.put_bucket(b, &mut bucket)?;
            c.blocks.clone()
        } else {
            // `limits` bounded the block count; allocating is the first write.
            let block_size = block_size_or_legacy(c.block_size);
            let ids = self.allocate(b, c.size.div_ceil(block_size))?;
            lay_out(ids, c.size, block_size)
        };
        if let Some(old) = replaced {
            let origin = format!(
                "replaced part {} of upload {:016x}",
                c.part_number, c.upload_id
            );
            self.release_blocks(b, 0, old.blocks, origin)?;
        }
        let mut rec = PartRecord {
            format: 0,
            part_number: c.part_number,
            size: c.size,
            etag: c.etag.clone(),
            blocks,
            modification_time_ms: self.now,
        };
        table::put::<PartTable>(self.db, b, &pk, &mut rec)?;
        ok(command_result::Result::Part(PartResult { part: Some(rec) }))
    }

    /// Assembles the listed parts into the key. Unlisted parts are freed.
    pub(super) fn complete_multipart(
        &self,
        b: &mut EntryWrites<'_>,
        c: &CompleteMultipart,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.object_store_bucket(&c.volume, &c.bucket)?;
        let (uk, upload) = self.upload(&c.volume, &c.bucket, &c.key, c.upload_id)?;
        let stored = self.parts(c.upload_id)?;
        let by_number: std::collections::HashMap<u32, &PartRecord> =
            stored.iter().map(|p| (p.part_number, p)).collect();
        let mut listed = Vec::with_capacity(c.parts.len());
        let mut prev = 0;
        for (i, want) in c.parts.iter().enumerate() {
            if want.part_number <= prev {
                return Err(OmError::invalid(
                    "INVALID_PART_ORDER",
                    "parts",
                    format!(
                        "parts must be listed in ascending order; {} follows {prev}",
                        want.part_number
                    ),
                ));
            }
            prev = want.part_number;
            let Some(part) = by_number.get(&want.part_number) else {
                return Err(OmError::invalid(
                    "INVALID_PART",
                    "parts",
                    format!("part {} was not uploaded", want.part_number),
                ));
            };
            if part.etag != want.etag {
                return Err(OmError::invalid(
                    "INVALID_PART",
                    "parts",
                    format!(
                        "part {} has ETag {:?}, not {:?}",
                        want.part_number, part.etag, want.etag
                    ),
                ));
            }
            if i + 1 < c.parts.len() && part.size < c.min_part_size {
                return Err(OmError::invalid(
                    "ENTITY_TOO_SMALL",
                    "parts",
                    format!(
                        "part {} is {} bytes; every part but the last needs at least {}",
                        want.part_number, part.size, c.min_part_size
                    ),
                ));
            }
            listed.push(*part);
        }
        let etag = multipart_etag(listed.iter().map(|p| p.etag.as_str())).ok_or_else(|| {
            OmError::invalid(
                "INVALID_PART",
                "parts",
                format!(
                    "upload {:016x} holds a part without a hex MD5 ETag",
                    c.upload_id
                ),
            )
        })?;
        let old = self.replaced_key(&bucket, &c.key, c.conditions.as_ref())?;
        // At most 10,000 parts of at most 5 GiB each: the sums cannot
        // overflow; they saturate rather than wrap all the same.
        let mut blocks = Vec::new();
        let mut size = 0u64;
        for p in &listed {
            for blk in &p.blocks {
                blocks.push(BlockRecord {
                    block_id: blk.block_id,
                    offset: size.saturating_add(blk.offset),
                    length: blk.length,
                });
            }
            size = size.saturating_add(p.size);
        }
        if c.max_key_size != 0 && size > c.max_key_size {
            return Err(OmError::invalid(
                "KEY_TOO_LARGE",
                "parts",
                format!(
                    "the listed parts add up to {size} bytes; an object is at most {}",
                    c.max_key_size
                ),
            ));
        }
        let vol = self.charge(&mut bucket, old.usage(size, true))?;
        // Checks are done; stage writes from here on.
        let listed_numbers: std::collections::HashSet<u32> =
            c.parts.iter().map(|p| p.part_number).collect();
        let mut seq = 1;
        for p in &stored {
            if !listed_numbers.contains(&p.part_number) {
                let origin = format!(
                    "part {} of upload {:016x} not in the completed object",
                    p.part_number, c.upload_id
                );
                self.release_blocks(b, seq, p.blocks.clone(), origin)?;
                seq += 1;
            }
        }
        self.end_upload(b, &uk, c.upload_id)?;
        let part_sizes = if crate::rules::PART_SIZES.holds(self.rules) {
            listed.iter().map(|p| p.size).collect()
        } else {
            Vec::new()
        };
        let rec = KeyRecord {
            size,
            blocks,
            etag,
            metadata: upload.metadata,
            content_type: upload.content_type,
            tags: upload.tags,
            part_sizes,
            ..Default::default()
        };
        self.write_key(b, &mut bucket, &c.key, old, rec, vol)
    }

    /// Ends an upload without a key: every part's blocks are freed.
    pub(super) fn abort_multipart(
        &self,
        b: &mut EntryWrites<'_>,
        c: &AbortMultipart,
    ) -> Result<CommandResult, OmError> {
        self.object_store_bucket(&c.volume, &c.bucket)?;
        let (uk, _) = self.upload(&c.volume, &c.bucket, &c.key, c.upload_id)?;
        for (seq, p) in self.parts(c.upload_id)?.into_iter().enumerate() {
            let origin = format!(
                "part {} of aborted upload {:016x}",
                p.part_number, c.upload_id
            );
            self.release_blocks(b, seq as u32, p.blocks, origin)?;
        }
        self.end_upload(b, &uk, c.upload_id)?;
        ok(command_result::Result::Empty(Empty {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_etag_hashes_binary_digests() {
        // Two parts whose MD5s are those of "a" and "b".
        let a = hex(&Md5::digest(b"a"));
        let b = hex(&Md5::digest(b"b"));
        let mut cat = Vec::new();
        cat.extend_from_slice(&Md5::digest(b"a"));
        cat.extend_from_slice(&Md5::digest(b"b"));
        let want = format!("{}-2", hex(&Md5::digest(&cat)));
        assert_eq!(multipart_etag([a.as_str(), b.as_str()]), Some(want));
        // Not the hash of the hex strings (a common mistake).
        let wrong = format!("{}-2", hex(&Md5::digest(format!("{a}{b}").as_bytes())));
        assert_ne!(multipart_etag([a.as_str(), b.as_str()]), Some(wrong));
        assert_eq!(multipart_etag(["xyz"]), None);
    }

    #[test]
    fn known_aws_etag() {
        // One part of 5 MiB of zero bytes uploaded to S3 completes as
        // "<md5 of its binary md5>-1".
        let part = hex(&Md5::digest(vec![0u8; 5 * 1024 * 1024]));
        let inner = Md5::digest(Md5::digest(vec![0u8; 5 * 1024 * 1024]));
        assert_eq!(
            multipart_etag([part.as_str()]).unwrap(),
            format!("{}-1", hex(&inner))
        );
    }
}
