//! Multipart uploads through om's multipart RPCs.
//!
//! UploadPart writes as PutObject does: a write session on the upload's
//! key (`open_key`) hands out blocks, the body streams into them, and
//! `commit_part` names those blocks as the part (with its size and MD5,
//! known once the data is in). A part committed again replaces the earlier
//! one (om frees its blocks). om has no part copy: UploadPartCopy streams
//! the source range through the same path.

use om_client::v1::{
    AbortMultipartUploadRequest, CommitPartRequest, CompleteMultipartUploadRequest,
    CompletedPart as OmPart, InitiateMultipartUploadRequest, ListMultipartUploadsRequest,
    ListPartsRequest, OpenKeyRequest, PartInfo,
};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::OmS3;
use super::codec::{self, etag, header_version, maybe_encode, ts};
use super::conditions::{self, Conditions};
use super::copy;
use super::data::{self, Body, MAX_PUT_SIZE};
use super::listing::{page_size, url_encoded};
use super::objects::{self, expiration, refuse_encryption, write_conditions};
use super::stored::Stored;
use crate::errors::from_om;

/// S3's part numbers.
const PART_NUMBERS: std::ops::RangeInclusive<i32> = 1..=10_000;

pub async fn create(
    s: &OmS3,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    super::snapshots::writable(&req.input.key)?;
    let om = s.om(&req).await?;
    let i = req.input;
    refuse_encryption(
        i.server_side_encryption.as_ref(),
        i.sse_customer_algorithm.as_ref(),
    )?;
    let r = om
        .initiate_multipart_upload(InitiateMultipartUploadRequest {
            header: None,
            volume: s.volume.clone(),
            bucket: i.bucket.clone(),
            key: i.key.clone(),
            content_type: i.content_type.unwrap_or_default(),
            metadata: Stored::from_request(
                i.cache_control.as_ref(),
                i.content_disposition.as_ref(),
                i.content_encoding.as_ref(),
                i.content_language.as_ref(),
                i.expires.as_ref(),
            )
            .with_user(i.metadata.as_ref()),
            tags: codec::parse_tagging(i.tagging.as_deref())?,
        })
        .await
        .map_err(from_om)?;
    let upload = r.upload.unwrap_or_default();
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(i.bucket),
        key: Some(i.key),
        upload_id: Some(upload.upload_id),
        ..Default::default()
    }))
}

/// Writes `body` into the blocks of a write session om opens on the
/// upload's key, then commits those blocks as part `number` of the upload
/// (the session closes; its unused blocks are freed). Answers the
/// committed part. Until the commit, the data is only an open session's:
/// a crash leaves nothing committed, and om frees the blocks when the
/// session expires.
async fn store_part(
    s: &OmS3,
    om: &om_client::OmClient,
    names: (&str, &str, &str),
    number: i32,
    body: Body,
    declared_len: Option<i64>,
    declared_md5: Option<[u8; 16]>,
) -> S3Result<PartInfo> {
    let (bucket, key, upload_id) = names;
    if !PART_NUMBERS.contains(&number) {
        return Err(s3_error!(InvalidArgument, "part numbers are 1 to 10000"));
    }
    let expected = declared_len.and_then(|n| u64::try_from(n).ok());
    let open = om
        .open_key(OpenKeyRequest {
            volume: s.volume.clone(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            blocks: objects::first_blocks(expected),
            ..Default::default()
        })
        .await
        .map_err(from_om)?;
    let names = (s.volume.as_str(), bucket, key);
    let w =
        objects::write_session(om, &s.store, names, open, body, declared_len, declared_md5).await?;
    let committed = om
        .commit_part(CommitPartRequest {
            header: None,
            volume: s.volume.clone(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            upload_id: upload_id.to_string(),
            part_number: number as u32,
            size: w.size,
            etag: hex::encode(w.md5),
            session_id: w.session_id,
            blocks: w.blocks.clone(),
        })
        .await;
    match committed {
        Ok(r) => Ok(r.part.unwrap_or_default()),
        Err(e) => Err(objects::commit_failed(om, &s.store, names, &w, e).await),
    }
}

pub async fn upload_part(
    s: &OmS3,
    req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    refuse_encryption(None, i.sse_customer_algorithm.as_ref())?;
    if i.content_length
        .is_some_and(|n| u64::try_from(n).unwrap_or(0) > MAX_PUT_SIZE)
    {
        return Err(s3_error!(EntityTooLarge, "a part is at most 5 GiB"));
    }
    let declared_md5 = codec::content_md5(i.content_md5.as_deref())?;
    let body = match i.body {
        Some(b) => Body::request(b, MAX_PUT_SIZE),
        None => Body::source(Box::pin(futures::stream::empty()), MAX_PUT_SIZE),
    };
    let part = store_part(
        s,
        &om,
        (&i.bucket, &i.key, &i.upload_id),
        i.part_number,
        body,
        i.content_length,
        declared_md5,
    )
    .await?;
    Ok(S3Response::new(UploadPartOutput {
        e_tag: etag(&part.etag),
        ..Default::default()
    }))
}

pub async fn upload_part_copy(
    s: &OmS3,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let (src_bucket, src_key, src_version) = copy::source(&i.copy_source)?;
    let src = objects::lookup(
        &om,
        &s.volume,
        &src_bucket,
        &src_key,
        src_version.as_deref(),
    )
    .await?;
    Conditions {
        if_match: i.copy_source_if_match.as_ref(),
        if_none_match: i.copy_source_if_none_match.as_ref(),
        if_modified_since: i.copy_source_if_modified_since.as_ref(),
        if_unmodified_since: i.copy_source_if_unmodified_since.as_ref(),
    }
    .for_copy_source(&src.etag, src.modification_time_ms)?;
    let span = conditions::copy_source_range(i.copy_source_range.as_deref(), src.size)?;
    if span.end - span.start > MAX_PUT_SIZE {
        return Err(s3_error!(EntityTooLarge, "a part is at most 5 GiB"));
    }
    let data = data::read(&s.store, &src.blocks, span).await?;
    let part = store_part(
        s,
        &om,
        (&i.bucket, &i.key, &i.upload_id),
        i.part_number,
        Body::source(data, MAX_PUT_SIZE),
        None,
        None,
    )
    .await?;
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: etag(&part.etag),
            last_modified: Some(ts(part.modification_time_ms)),
            ..Default::default()
        }),
        copy_source_version_id: src_version,
        ..Default::default()
    }))
}

/// The ETag S3 gives the object a multipart upload of `parts` makes: the
/// MD5 of the parts' MD5s, then `-` and the number of parts.
fn multipart_etag(parts: &[OmPart]) -> String {
    use md5::{Digest, Md5};
    let mut h = Md5::new();
    for p in parts {
        match hex::decode(&p.etag) {
            Ok(b) => h.update(&b),
            Err(_) => return String::new(),
        }
    }
    format!("{}-{}", hex::encode(h.finalize()), parts.len())
}

/// The parts a CompleteMultipartUpload lists, as om takes them.
fn completed_parts(m: Option<CompletedMultipartUpload>) -> S3Result<Vec<OmPart>> {
    let parts = m.and_then(|m| m.parts).unwrap_or_default();
    if parts.is_empty() {
        return Err(s3_error!(MalformedXML, "the upload lists no parts"));
    }
    parts
        .into_iter()
        .map(|p| {
            let (Some(n), Some(e)) = (p.part_number, p.e_tag) else {
                return Err(s3_error!(
                    InvalidPart,
                    "each part needs a PartNumber and an ETag"
                ));
            };
            let part_number = u32::try_from(n)
                .map_err(|_| s3_error!(InvalidPart, "part numbers are 1 to 10000"))?;
            Ok(OmPart {
                part_number,
                etag: e.value().trim_matches('"').to_string(),
            })
        })
        .collect()
}

/// A part number listed more than once in a row (a part uploaded twice at
/// once, both answers listed): the entry whose ETag is the part om holds,
/// the upload that finished last, stands for it; with none, the last
/// entry, which om then refuses as the wrong part. One ListParts read per
/// repeated number, none for a list without repeats.
async fn one_entry_per_part(
    om: &om_client::OmClient,
    upload: ListPartsRequest,
    parts: Vec<OmPart>,
) -> S3Result<Vec<OmPart>> {
    let mut out: Vec<OmPart> = Vec::with_capacity(parts.len());
    let mut held: Option<(u32, String)> = None;
    for p in parts {
        let Some(last) = out.last_mut().filter(|l| l.part_number == p.part_number) else {
            out.push(p);
            continue;
        };
        if held.as_ref().is_none_or(|(n, _)| *n != p.part_number) {
            let r = om
                .list_parts(ListPartsRequest {
                    part_number_marker: p.part_number.saturating_sub(1),
                    max_parts: 1,
                    ..upload.clone()
                })
                .await
                .map_err(from_om)?;
            let etag = r
                .parts
                .into_iter()
                .find(|q| q.part_number == p.part_number)
                .map(|q| q.etag.trim_matches('"').to_string())
                .unwrap_or_default();
            held = Some((p.part_number, etag));
        }
        let stored = held.as_ref().map(|(_, e)| e.as_str());
        if stored != Some(last.etag.as_str()) {
            *last = p;
        }
    }
    Ok(out)
}

pub async fn complete(
    s: &OmS3,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let parts = completed_parts(i.multipart_upload)?;
    let upload = ListPartsRequest {
        read: None,
        volume: s.volume.clone(),
        bucket: i.bucket.clone(),
        key: i.key.clone(),
        upload_id: i.upload_id.clone(),
        part_number_marker: 0,
        max_parts: 1,
    };
    let parts = one_entry_per_part(&om, upload, parts).await?;
    let conds = write_conditions(i.if_match.as_ref(), i.if_none_match.as_ref())?;
    let done = om
        .complete_multipart_upload(CompleteMultipartUploadRequest {
            header: None,
            volume: s.volume.clone(),
            bucket: i.bucket.clone(),
            key: i.key.clone(),
            upload_id: i.upload_id.clone(),
            parts: parts.clone(),
            conditions: conds,
        })
        .await;
    let k = match done {
        Ok(r) => r.key.unwrap_or_default(),
        // S3 answers a completion repeated (a client retrying a lost answer)
        // with the object it made: the key still holds what those parts make.
        Err(e) if e.reason() == "UPLOAD_NOT_FOUND" => {
            match om.lookup_key(&s.volume, &i.bucket, &i.key).await {
                Ok(k) if k.etag.trim_matches('"') == multipart_etag(&parts) => k,
                _ => return Err(from_om(e)),
            }
        }
        Err(e) => return Err(from_om(e)),
    };
    Ok(S3Response::new(CompleteMultipartUploadOutput {
        bucket: Some(i.bucket.clone()),
        key: Some(i.key.clone()),
        e_tag: etag(&k.etag),
        version_id: header_version(&k.version_id),
        expiration: expiration(&k),
        location: Some(format!("/{}/{}", i.bucket, i.key)),
        ..Default::default()
    }))
}

pub async fn abort(
    s: &OmS3,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    if i.if_match_initiated_time.is_some() {
        return Err(s3_error!(
            NotImplemented,
            "conditional aborts are not supported"
        ));
    }
    om.abort_multipart_upload(AbortMultipartUploadRequest {
        header: None,
        volume: s.volume.clone(),
        bucket: i.bucket,
        key: i.key,
        upload_id: i.upload_id,
    })
    .await
    .map_err(from_om)?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub async fn list_parts(
    s: &OmS3,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let max = page_size(i.max_parts)?;
    let marker = match i.part_number_marker {
        None => 0,
        Some(n) => u32::try_from(n)
            .map_err(|_| s3_error!(InvalidArgument, "part-number-marker must not be negative"))?,
    };
    let r = om
        .list_parts(ListPartsRequest {
            read: None,
            volume: s.volume.clone(),
            bucket: i.bucket.clone(),
            key: i.key.clone(),
            upload_id: i.upload_id.clone(),
            part_number_marker: marker,
            max_parts: max,
        })
        .await
        .map_err(from_om)?;
    let parts: Vec<Part> = r
        .parts
        .into_iter()
        .map(|p| Part {
            e_tag: etag(&p.etag),
            last_modified: Some(ts(p.modification_time_ms)),
            part_number: i32::try_from(p.part_number).ok(),
            size: i64::try_from(p.size).ok(),
            ..Default::default()
        })
        .collect();
    Ok(S3Response::new(ListPartsOutput {
        bucket: Some(i.bucket),
        key: Some(i.key),
        upload_id: Some(i.upload_id),
        is_truncated: Some(r.truncated),
        max_parts: Some(max as i32),
        part_number_marker: i.part_number_marker,
        next_part_number_marker: r
            .truncated
            .then(|| i32::try_from(r.next_part_number_marker).unwrap_or(0)),
        parts: (!parts.is_empty()).then_some(parts),
        storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
        ..Default::default()
    }))
}

pub async fn list_uploads(
    s: &OmS3,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let max = page_size(i.max_uploads)?;
    let encode = url_encoded(i.encoding_type.as_ref())?;
    if max == 0 {
        om.get_bucket(&s.volume, &i.bucket).await.map_err(from_om)?;
    }
    let r = if max == 0 {
        Default::default()
    } else {
        om.list_multipart_uploads(ListMultipartUploadsRequest {
            read: None,
            volume: s.volume.clone(),
            bucket: i.bucket.clone(),
            prefix: i.prefix.clone().unwrap_or_default(),
            delimiter: i.delimiter.clone().unwrap_or_default(),
            key_marker: i.key_marker.clone().unwrap_or_default(),
            upload_id_marker: i.upload_id_marker.clone().unwrap_or_default(),
            max_uploads: max,
        })
        .await
        .map_err(from_om)?
    };
    let uploads: Vec<MultipartUpload> = r
        .uploads
        .into_iter()
        .map(|u| MultipartUpload {
            initiated: Some(ts(u.initiated_ms)),
            key: Some(maybe_encode(u.key, encode)),
            upload_id: Some(u.upload_id),
            storage_class: Some(StorageClass::from_static(StorageClass::STANDARD)),
            ..Default::default()
        })
        .collect();
    let common: Vec<CommonPrefix> = r
        .common_prefixes
        .into_iter()
        .map(|p| CommonPrefix {
            prefix: Some(maybe_encode(p, encode)),
        })
        .collect();
    Ok(S3Response::new(ListMultipartUploadsOutput {
        bucket: Some(i.bucket),
        common_prefixes: (!common.is_empty()).then_some(common),
        delimiter: i.delimiter.map(|d| maybe_encode(d, encode)),
        encoding_type: i.encoding_type,
        is_truncated: Some(r.truncated),
        key_marker: Some(maybe_encode(i.key_marker.unwrap_or_default(), encode)),
        max_uploads: Some(max as i32),
        next_key_marker: r.truncated.then(|| maybe_encode(r.next_key_marker, encode)),
        next_upload_id_marker: r.truncated.then_some(r.next_upload_id_marker),
        prefix: Some(maybe_encode(i.prefix.unwrap_or_default(), encode)),
        upload_id_marker: i.upload_id_marker,
        uploads: (!uploads.is_empty()).then_some(uploads),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;

    #[test]
    fn completed_part_lists() {
        let m = CompletedMultipartUpload {
            parts: Some(vec![CompletedPart {
                e_tag: Some(ETag::Strong("abc".into())),
                part_number: Some(1),
                ..Default::default()
            }]),
        };
        let p = completed_parts(Some(m)).unwrap();
        assert_eq!(p[0].part_number, 1);
        assert_eq!(p[0].etag, "abc");
        assert!(completed_parts(None).is_err());
        let missing = CompletedMultipartUpload {
            parts: Some(vec![CompletedPart::default()]),
        };
        assert_eq!(
            completed_parts(Some(missing)).unwrap_err().code(),
            &S3ErrorCode::InvalidPart
        );
    }
}
