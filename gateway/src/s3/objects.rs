//! PutObject, GetObject and HeadObject.
//!
//! A PUT opens a write session in om (`open_key`, which allocates the first
//! blocks), streams the body into those blocks (asking `allocate_block` for
//! more as they fill), hashing MD5 on the way, and commits the key
//! (`commit_key`) with its size, block layout, ETag and conditions. Until
//! the commit nothing is visible; a PUT that fails before it deletes what it
//! wrote, and om frees the session's blocks when the session expires.
//!
//! A GET looks the key (or version) up (`lookup_key_version`), evaluates the
//! request's conditions, and streams the selected byte range of its blocks.

use std::collections::VecDeque;
use std::sync::Arc;

use om_client::OmClient;
use om_client::v1::{
    AbortKeyRequest, AllocateBlockRequest, BlockInfo, CommitKeyRequest, KeyConditions, KeyInfo,
    OpenKeyRequest, OpenKeyResponse,
};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};

use super::OmS3;
use super::codec::{self, etag, header_version, ts};
use super::conditions::{self, Conditions};
use super::data::{self, Body, MAX_PUT_SIZE, PART_CHUNK};
use super::stored::Stored;
use crate::blocks::BlockStore;
use crate::errors::{delete_marker_headers, from_om};

/// Most blocks asked of om in one call (om's cap).
const MAX_BLOCKS_PER_CALL: u64 = 64;

/// Refuses server-side encryption: the gateway does not encrypt, and
/// storing data unencrypted that a client asked to encrypt would be a lie.
pub(super) fn refuse_encryption(
    sse: Option<&ServerSideEncryption>,
    sse_c: Option<&SSECustomerAlgorithm>,
) -> S3Result<()> {
    if sse.is_some() || sse_c.is_some() {
        return Err(s3_error!(
            NotImplemented,
            "server-side encryption is not supported"
        ));
    }
    Ok(())
}

/// S3's conditional-write headers as om's commit conditions.
pub(super) fn write_conditions(
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
) -> S3Result<Option<KeyConditions>> {
    let mut c = KeyConditions::default();
    match if_none_match {
        None => {}
        Some(ETagCondition::Any) => c.if_none_match_any = true,
        Some(ETagCondition::ETag(e)) => c.if_none_match = e.value().to_string(),
    }
    match if_match {
        None => {}
        Some(ETagCondition::ETag(e)) => c.if_match = e.value().to_string(),
        Some(ETagCondition::Any) => c.if_match_any = true,
    }
    Ok((c != KeyConditions::default()).then_some(c))
}

/// The write conditions against the current key's ETag, as om's apply
/// checks them (`apply::conditions`), so a PUT that will be refused fails
/// before its body moves: If-None-Match (`*`, or the current ETag) is 412;
/// If-Match on a missing key is 404 NoSuchKey, on another ETag 412.
pub(super) fn precheck(c: &KeyConditions, current: Option<&str>) -> S3Result<()> {
    let norm = |e: &str| e.trim().trim_matches('"').to_ascii_lowercase();
    let current = current.map(norm);
    if c.if_none_match_any && current.is_some() {
        return Err(s3_error!(PreconditionFailed));
    }
    if !c.if_none_match.is_empty() && current.as_deref() == Some(norm(&c.if_none_match).as_str()) {
        return Err(s3_error!(PreconditionFailed));
    }
    if (c.if_match_any || !c.if_match.is_empty()) && current.is_none() {
        return Err(s3_error!(NoSuchKey));
    }
    if !c.if_match.is_empty() && current != Some(norm(&c.if_match)) {
        return Err(s3_error!(PreconditionFailed));
    }
    Ok(())
}

/// A key or version; a delete marker named by version id is S3's 405 with
/// `x-amz-delete-marker`.
pub(super) async fn lookup(
    om: &OmClient,
    volume: &str,
    bucket: &str,
    key: &str,
    version: Option<&str>,
) -> S3Result<KeyInfo> {
    if let Some((snapshot, inner)) = super::snapshots::split(key) {
        if version.is_some() {
            return Err(s3_error!(
                InvalidArgument,
                "a key under .snapshot/ is read as the snapshot shows it, without a version id"
            ));
        }
        let mut k = om
            .lookup_key_in(volume, bucket, inner, snapshot)
            .await
            .map_err(from_om)?;
        k.name = key.to_string();
        return Ok(k);
    }
    let k = om
        .lookup_key_version(volume, bucket, key, &codec::request_version(version))
        .await
        .map_err(from_om)?;
    if k.delete_marker {
        let mut e = S3Error::with_message(
            S3ErrorCode::MethodNotAllowed,
            "the specified method is not allowed against a delete marker",
        );
        e.set_headers(delete_marker_headers(&k.version_id, true));
        return Err(e);
    }
    Ok(k)
}

/// S3's `x-amz-expiration` for a key om says a lifecycle rule expires.
pub(super) fn expiration(k: &KeyInfo) -> Option<String> {
    if k.expiration_ms == 0 {
        return None;
    }
    let when = chrono::DateTime::from_timestamp_millis(i64::try_from(k.expiration_ms).ok()?)?;
    Some(format!(
        "expiry-date=\"{}\", rule-id=\"{}\"",
        when.format("%a, %d %b %Y %H:%M:%S GMT"),
        k.expiration_rule_id
    ))
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// How many blocks a write session asks for at open: enough for the
/// declared length (1 when unknown), at most what one call hands out.
pub(super) fn first_blocks(expected: Option<u64>) -> u32 {
    expected.map_or(1, |n| n.div_ceil(PART_CHUNK).min(MAX_BLOCKS_PER_CALL)) as u32
}

/// Streams `body` into the session's blocks: `avail` are allocated and
/// unwritten; more are allocated as needed. Answers the written layout. On
/// error, the blocks written are deleted (none is committed yet).
pub(super) async fn write_blocks(
    om: &OmClient,
    store: &Arc<dyn BlockStore>,
    names: (&str, &str, &str),
    session_id: u64,
    mut avail: VecDeque<BlockInfo>,
    body: &mut Body,
    expected: Option<u64>,
) -> S3Result<Vec<BlockInfo>> {
    let (volume, bucket, key) = names;
    let mut written: Vec<BlockInfo> = Vec::new();
    let mut offset = 0u64;
    let result = async {
        while body.has_more().await? {
            let blk = match avail.pop_front() {
                Some(b) => b,
                None => {
                    let cap = written.last().map_or(PART_CHUNK, |b| b.length).max(1);
                    let left = expected.map_or(1, |e| e.saturating_sub(offset).div_ceil(cap));
                    let r = om
                        .allocate_block(AllocateBlockRequest {
                            header: None,
                            volume: volume.to_string(),
                            bucket: bucket.to_string(),
                            key: key.to_string(),
                            session_id,
                            count: left.clamp(1, MAX_BLOCKS_PER_CALL) as u32,
                        })
                        .await
                        .map_err(from_om)?;
                    avail.extend(r.blocks);
                    avail.pop_front().ok_or_else(|| {
                        S3Error::with_message(S3ErrorCode::InternalError, "om allocated no block")
                    })?
                }
            };
            // An allocated block's length is its capacity.
            if blk.length == 0 {
                return Err(S3Error::with_message(
                    S3ErrorCode::InternalError,
                    "om allocated a block without capacity",
                ));
            }
            let n = store
                .put(blk.block_id, body.take(blk.length))
                .await
                .map_err(|e| body.write_error(&e))?;
            written.push(BlockInfo {
                block_id: blk.block_id,
                offset,
                length: n,
            });
            offset += n;
        }
        Ok(())
    }
    .await;
    match result {
        Ok(()) => Ok(written),
        Err(e) => {
            delete_blocks(store, &written).await;
            Err(e)
        }
    }
}

/// A body written into a write session's blocks, not committed yet.
pub(super) struct Written {
    pub session_id: u64,
    pub blocks: Vec<BlockInfo>,
    pub size: u64,
    pub md5: [u8; 16],
}

/// Streams `body` into the blocks of the session `open` (more are
/// allocated as needed) and checks it against the length and Content-MD5
/// the client declared. On any failure the written blocks are deleted and
/// the session aborted: nothing is left for the commit the caller makes.
pub(super) async fn write_session(
    om: &OmClient,
    store: &Arc<dyn BlockStore>,
    names: (&str, &str, &str),
    open: OpenKeyResponse,
    mut body: Body,
    declared_len: Option<i64>,
    declared_md5: Option<[u8; 16]>,
) -> S3Result<Written> {
    let expected = declared_len.and_then(|n| u64::try_from(n).ok());
    let written = write_blocks(
        om,
        store,
        names,
        open.session_id,
        open.blocks.into(),
        &mut body,
        expected,
    )
    .await;
    let blocks = match written {
        Ok(b) => b,
        Err(e) => {
            abandon(om, names, open.session_id).await;
            return Err(e);
        }
    };
    let (size, md5) = body.finish();
    if let Err(e) = data::check_body(size, &md5, declared_len, declared_md5) {
        delete_blocks(store, &blocks).await;
        abandon(om, names, open.session_id).await;
        return Err(e);
    }
    Ok(Written {
        session_id: open.session_id,
        blocks,
        size,
        md5,
    })
}

/// The answer to a commit of `w` that failed with `e`. A refusal committed
/// nothing: the blocks are deleted and the session aborted. Unavailability
/// may hide a commit that applied, so then they are left to om.
pub(super) async fn commit_failed(
    om: &OmClient,
    store: &Arc<dyn BlockStore>,
    names: (&str, &str, &str),
    w: &Written,
    e: om_client::ClientError,
) -> S3Error {
    if matches!(e, om_client::ClientError::Api { .. }) {
        delete_blocks(store, &w.blocks).await;
        abandon(om, names, w.session_id).await;
    }
    from_om(e)
}

/// Closes a write session that will not commit (the body failed, its
/// Content-MD5 did not match, om refused the commit), so it neither holds
/// its blocks nor keeps its bucket from being deleted until om expires it.
/// A failure is only logged: om expires the session in the end.
pub(super) async fn abandon(om: &OmClient, names: (&str, &str, &str), session_id: u64) {
    let (volume, bucket, key) = names;
    let r = om
        .abort_key(AbortKeyRequest {
            header: None,
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            session_id,
        })
        .await;
    if let Err(e) = r {
        tracing::warn!(error = %e, session_id, "cannot abort a write session; om expires it");
    }
}

/// Deletes uncommitted blocks (failures are logged: om frees the session's
/// blocks when it expires, and the reclaimer deletes them then).
pub(super) async fn delete_blocks(store: &Arc<dyn BlockStore>, blocks: &[BlockInfo]) {
    for b in blocks {
        if let Err(e) = store.delete(b.block_id).await {
            tracing::warn!(error = %e, block = b.block_id, "cannot delete an uncommitted block");
        }
    }
}

pub async fn put(
    s: &OmS3,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    super::snapshots::writable(&req.input.key)?;
    let om = s.om(&req).await?;
    let input = req.input;
    refuse_encryption(
        input.server_side_encryption.as_ref(),
        input.sse_customer_algorithm.as_ref(),
    )?;
    if input.write_offset_bytes.is_some() {
        return Err(s3_error!(
            NotImplemented,
            "appending writes are not supported"
        ));
    }
    if input
        .content_length
        .is_some_and(|n| u64::try_from(n).unwrap_or(0) > MAX_PUT_SIZE)
    {
        return Err(s3_error!(
            EntityTooLarge,
            "a single PUT is at most 5 GiB; use a multipart upload"
        ));
    }
    let declared_md5 = codec::content_md5(input.content_md5.as_deref())?;
    let tags = codec::parse_tagging(input.tagging.as_deref())?;
    let conds = write_conditions(input.if_match.as_ref(), input.if_none_match.as_ref())?;
    let (volume, bucket, key) = (s.volume.as_str(), input.bucket.as_str(), input.key.as_str());
    // Fail a conditional PUT before its data moves; the commit checks again.
    if let Some(c) = &conds {
        let current = match om.lookup_key(volume, bucket, key).await {
            Ok(k) => Some(k),
            Err(e) if e.reason() == "KEY_NOT_FOUND" => None,
            Err(e) => return Err(from_om(e)),
        };
        precheck(c, current.as_ref().map(|k| k.etag.as_str()))?;
    }
    let expected = input.content_length.and_then(|n| u64::try_from(n).ok());
    let open = om
        .open_key(OpenKeyRequest {
            header: None,
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            content_type: input.content_type.clone().unwrap_or_default(),
            metadata: Stored::from_request(
                input.cache_control.as_ref(),
                input.content_disposition.as_ref(),
                input.content_encoding.as_ref(),
                input.content_language.as_ref(),
                input.expires.as_ref(),
            )
            .with_user(input.metadata.as_ref()),
            blocks: first_blocks(expected),
            tags,
        })
        .await
        .map_err(from_om)?;
    let body = match input.body {
        Some(b) => Body::request(b, MAX_PUT_SIZE),
        None => Body::source(Box::pin(futures::stream::empty()), MAX_PUT_SIZE),
    };
    let names = (volume, bucket, key);
    let w = write_session(
        &om,
        &s.store,
        names,
        open,
        body,
        input.content_length,
        declared_md5,
    )
    .await?;
    let size = w.size;
    let commit = om
        .commit_key(CommitKeyRequest {
            header: None,
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            session_id: w.session_id,
            size,
            blocks: w.blocks.clone(),
            etag: hex::encode(w.md5),
            conditions: conds,
            ..Default::default()
        })
        .await;
    let k = match commit {
        Ok(r) => r.key.unwrap_or_default(),
        Err(e) => return Err(commit_failed(&om, &s.store, names, &w, e).await),
    };
    Ok(S3Response::new(PutObjectOutput {
        e_tag: etag(&k.etag),
        version_id: header_version(&k.version_id),
        expiration: expiration(&k),
        size: i64::try_from(size).ok(),
        ..Default::default()
    }))
}

/// What a GET or HEAD reads of key `k`: a byte range, or a part (S3's
/// `partNumber`: part N of a multipart object, with its part count; part 1
/// of an object written whole is all of it), else the whole object; and
/// whether that is part of the object (206). Not both a range and a part.
fn read_span(
    range: Option<&Range>,
    part: Option<i32>,
    k: &KeyInfo,
) -> S3Result<(std::ops::Range<u64>, bool, Option<i32>)> {
    let Some(n) = part else {
        let (span, partial) = conditions::select(range, k.size)?;
        return Ok((span, partial, None));
    };
    if range.is_some() {
        return Err(s3_error!(
            InvalidRequest,
            "a Range and a partNumber cannot be given together"
        ));
    }
    let n = usize::try_from(n)
        .ok()
        .filter(|n| (1..=10_000).contains(n))
        .ok_or_else(|| s3_error!(InvalidArgument, "partNumber is 1 to 10000"))?;
    if k.part_sizes.is_empty() {
        if k.etag.contains('-') {
            return Err(s3_error!(
                NotImplemented,
                "this object was completed before om recorded its part sizes: read it by range"
            ));
        }
        if n != 1 {
            return Err(s3_error!(
                InvalidPart,
                "the object was written whole: it has one part"
            ));
        }
        return Ok((0..k.size, false, None));
    }
    let count = k.part_sizes.len();
    let Some(&size) = k.part_sizes.get(n - 1) else {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidPart,
            format!("the object has {count} parts"),
        ));
    };
    let start: u64 = k.part_sizes[..n - 1].iter().sum();
    let span = start..start + size;
    let partial = span != (0..k.size);
    Ok((span, partial, i32::try_from(count).ok()))
}

pub async fn get(
    s: &OmS3,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let om = s.om(&req).await?;
    let i = &req.input;
    let k = lookup(&om, &s.volume, &i.bucket, &i.key, i.version_id.as_deref()).await?;
    Conditions {
        if_match: i.if_match.as_ref(),
        if_none_match: i.if_none_match.as_ref(),
        if_modified_since: i.if_modified_since.as_ref(),
        if_unmodified_since: i.if_unmodified_since.as_ref(),
    }
    .for_read(&k.etag, k.modification_time_ms)?;
    let (span, partial, parts_count) = read_span(i.range.as_ref(), i.part_number, &k)?;
    let len = span.end - span.start;
    let content_range = partial.then(|| conditions::content_range(&span, k.size));
    let body = data::read(&s.store, &k.blocks, span).await?;
    let (stored, metadata) = Stored::split(&k.metadata);
    // `response-*` parameters override what is stored.
    let or = |over: &Option<String>, kept: Option<String>| over.clone().or(kept);
    Ok(S3Response::new(GetObjectOutput {
        body: Some(data::blob(body)),
        content_length: i64::try_from(len).ok(),
        content_range,
        accept_ranges: Some("bytes".to_string()),
        e_tag: etag(&k.etag),
        last_modified: Some(ts(k.modification_time_ms)),
        content_type: or(&i.response_content_type, non_empty(&k.content_type)),
        cache_control: or(&i.response_cache_control, stored.cache_control),
        content_disposition: or(&i.response_content_disposition, stored.content_disposition),
        content_encoding: or(&i.response_content_encoding, stored.content_encoding),
        content_language: or(&i.response_content_language, stored.content_language),
        expires: i.response_expires.clone().or(stored.expires),
        metadata,
        version_id: header_version(&k.version_id),
        tag_count: (k.tag_count > 0).then(|| i32::try_from(k.tag_count).unwrap_or(i32::MAX)),
        expiration: expiration(&k),
        parts_count,
        ..Default::default()
    }))
}

pub async fn head(
    s: &OmS3,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let om = s.om(&req).await?;
    let i = &req.input;
    let k = lookup(&om, &s.volume, &i.bucket, &i.key, i.version_id.as_deref()).await?;
    Conditions {
        if_match: i.if_match.as_ref(),
        if_none_match: i.if_none_match.as_ref(),
        if_modified_since: i.if_modified_since.as_ref(),
        if_unmodified_since: i.if_unmodified_since.as_ref(),
    }
    .for_read(&k.etag, k.modification_time_ms)?;
    let (span, partial, parts_count) = read_span(i.range.as_ref(), i.part_number, &k)?;
    let (stored, metadata) = Stored::split(&k.metadata);
    let out = HeadObjectOutput {
        parts_count,
        content_length: i64::try_from(span.end - span.start).ok(),
        content_range: partial.then(|| conditions::content_range(&span, k.size)),
        accept_ranges: Some("bytes".to_string()),
        e_tag: etag(&k.etag),
        last_modified: Some(ts(k.modification_time_ms)),
        content_type: non_empty(&k.content_type),
        cache_control: stored.cache_control,
        content_disposition: stored.content_disposition,
        content_encoding: stored.content_encoding,
        content_language: stored.content_language,
        expires: stored.expires,
        metadata,
        version_id: header_version(&k.version_id),
        expiration: expiration(&k),
        ..Default::default()
    };
    let mut resp = if partial {
        S3Response::with_status(out, http::StatusCode::PARTIAL_CONTENT)
    } else {
        S3Response::new(out)
    };
    // As GET sends it (s3s's HeadObjectOutput has no field for it).
    if k.tag_count > 0 {
        resp.headers
            .insert("x-amz-tagging-count", http::HeaderValue::from(k.tag_count));
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditional_writes() {
        assert_eq!(write_conditions(None, None).unwrap(), None);
        let c = write_conditions(None, Some(&ETagCondition::Any))
            .unwrap()
            .unwrap();
        assert!(c.if_none_match_any);
        let m = ETagCondition::ETag(ETag::Strong("abc".into()));
        let c = write_conditions(Some(&m), None).unwrap().unwrap();
        assert_eq!(c.if_match, "abc");
        let c = write_conditions(Some(&ETagCondition::Any), None)
            .unwrap()
            .unwrap();
        assert!(c.if_match_any && c.if_match.is_empty());
        let c = write_conditions(None, Some(&m)).unwrap().unwrap();
        assert_eq!(
            (c.if_none_match.as_str(), c.if_none_match_any),
            ("abc", false)
        );
    }

    #[test]
    fn prechecks_follow_apply() {
        let code = |c: &KeyConditions, cur: Option<&str>| {
            precheck(c, cur)
                .err()
                .map(|e| e.code().as_str().to_string())
        };
        let etag = "0cc175b9c0f1b6a831c399e269772661";
        let any = KeyConditions {
            if_none_match_any: true,
            ..Default::default()
        };
        assert_eq!(code(&any, None), None);
        assert_eq!(
            code(&any, Some(etag)).as_deref(),
            Some("PreconditionFailed")
        );
        let none_match = KeyConditions {
            if_none_match: etag.to_uppercase(),
            ..Default::default()
        };
        assert_eq!(
            code(&none_match, Some(etag)).as_deref(),
            Some("PreconditionFailed")
        );
        assert_eq!(code(&none_match, Some("ab")), None);
        assert_eq!(code(&none_match, None), None);
        let must_exist = KeyConditions {
            if_match_any: true,
            ..Default::default()
        };
        assert_eq!(code(&must_exist, None).as_deref(), Some("NoSuchKey"));
        assert_eq!(code(&must_exist, Some(etag)), None);
        // Quotes and case do not matter, as in om.
        let m = KeyConditions {
            if_match: format!("\"{}\"", etag.to_uppercase()),
            ..Default::default()
        };
        assert_eq!(code(&m, Some(etag)), None);
        assert_eq!(code(&m, Some("ab")).as_deref(), Some("PreconditionFailed"));
        assert_eq!(code(&m, None).as_deref(), Some("NoSuchKey"));
    }

    #[test]
    fn expiration_header() {
        let k = KeyInfo {
            expiration_ms: 1_356_220_800_000,
            expiration_rule_id: "r1".into(),
            ..Default::default()
        };
        assert_eq!(
            expiration(&k).unwrap(),
            "expiry-date=\"Sun, 23 Dec 2012 00:00:00 GMT\", rule-id=\"r1\""
        );
        assert_eq!(expiration(&KeyInfo::default()), None);
    }

    #[test]
    fn encryption_is_refused() {
        let sse = ServerSideEncryption::from_static(ServerSideEncryption::AES256);
        assert!(refuse_encryption(Some(&sse), None).is_err());
        assert!(refuse_encryption(None, None).is_ok());
    }
}
