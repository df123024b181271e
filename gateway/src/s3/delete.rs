//! DeleteObject and DeleteObjects. om deletes the key (in a versioned
//! bucket: adds a delete marker) or, with a version id, removes that
//! version; the blocks it releases are freed by the reclaimer. As in S3,
//! deleting what does not exist succeeds.

use om_client::v1::{DeleteConditions, KeyOutcome};
use s3s::dto::*;
use s3s::{S3Request, S3Response, S3Result, s3_error};

use super::OmS3;
use super::codec::{self, header_version};
use crate::errors::{from_om, s3_code};

/// Most keys one DeleteObjects names (S3's and om's limit).
const MAX_DELETE_KEYS: usize = 1000;

/// S3's conditions on a delete as om's: an ETag, or `*` (`Some(None)`),
/// the object's Last-Modified (whole seconds) and its size. A size below
/// zero matches nothing there is.
fn delete_conditions(
    etag: Option<Option<&str>>,
    modified: Option<&Timestamp>,
    size: Option<i64>,
) -> S3Result<Option<DeleteConditions>> {
    if etag.is_none() && modified.is_none() && size.is_none() {
        return Ok(None);
    }
    let if_size =
        match size {
            Some(n) => Some(u64::try_from(n).map_err(|_| {
                s3_error!(InvalidArgument, "x-amz-if-match-size must not be negative")
            })?),
            None => None,
        };
    Ok(Some(DeleteConditions {
        if_match: etag.flatten().unwrap_or_default().to_string(),
        if_match_any: matches!(etag, Some(None)),
        if_modified_s: modified.map(|t| codec::ms(t) / 1000),
        if_size,
    }))
}

/// Whether an om refusal to delete means "nothing there", a success in S3.
fn already_gone(reason: &str) -> bool {
    matches!(reason, "KEY_NOT_FOUND" | "VERSION_NOT_FOUND")
}

pub async fn one(
    s: &OmS3,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    super::snapshots::writable(&req.input.key)?;
    let om = s.om(&req).await?;
    let i = &req.input;
    let cond = delete_conditions(
        i.if_match.as_ref().map(|c| match c {
            ETagCondition::Any => None,
            ETagCondition::ETag(e) => Some(e.value()),
        }),
        i.if_match_last_modified_time.as_ref(),
        i.if_match_size,
    )?;
    let version = codec::request_version(i.version_id.as_deref());
    match om
        .delete_key_if(&s.volume, &i.bucket, &i.key, &version, cond)
        .await
    {
        Ok(r) => Ok(S3Response::new(DeleteObjectOutput {
            delete_marker: r.delete_marker.then_some(true),
            version_id: header_version(&r.version_id),
            ..Default::default()
        })),
        Err(e) if already_gone(e.reason()) => Ok(S3Response::new(DeleteObjectOutput {
            version_id: i.version_id.clone(),
            ..Default::default()
        })),
        Err(e) => Err(from_om(e)),
    }
}

/// One key's outcome as S3 reports it: deleted, or an error.
fn outcome(o: KeyOutcome, asked_version: Option<String>) -> Result<DeletedObject, Error> {
    if o.reason.is_empty() || already_gone(&o.reason) {
        let marker = o.reason.is_empty() && o.delete_marker;
        return Ok(DeletedObject {
            key: Some(o.key),
            version_id: asked_version,
            delete_marker: marker.then_some(true),
            delete_marker_version_id: marker.then_some(o.version_id),
        });
    }
    let code = s3_code(tonic::Code::Unknown, &o.reason, "");
    Err(Error {
        code: Some(code.as_str().to_string()),
        key: Some(o.key),
        message: Some(o.message),
        version_id: asked_version,
    })
}

pub async fn many(
    s: &OmS3,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let om = s.om(&req).await?;
    let i = req.input;
    let objects = i.delete.objects;
    for o in &objects {
        super::snapshots::writable(&o.key)?;
    }
    if objects.is_empty() || objects.len() > MAX_DELETE_KEYS {
        return Err(s3_error!(
            MalformedXML,
            "DeleteObjects names 1 to 1000 keys"
        ));
    }
    let quiet = i.delete.quiet.unwrap_or(false);
    let keys: Vec<String> = objects.iter().map(|o| o.key.clone()).collect();
    let asked: Vec<Option<String>> = objects.iter().map(|o| o.version_id.clone()).collect();
    let versions: Vec<String> = if asked.iter().any(Option::is_some) {
        asked
            .iter()
            .map(|v| codec::request_version(v.as_deref()))
            .collect()
    } else {
        Vec::new()
    };
    let mut conditions = Vec::with_capacity(objects.len());
    for o in &objects {
        let etag = o
            .e_tag
            .as_ref()
            .map(|e| Some(e.value()).filter(|v| *v != "*"));
        let c = delete_conditions(etag, o.last_modified_time.as_ref(), o.size)?;
        conditions.push(c.unwrap_or_default());
    }
    if conditions.iter().all(|c| *c == DeleteConditions::default()) {
        conditions.clear();
    }
    let results = om
        .delete_keys_if(&s.volume, &i.bucket, &keys, &versions, &conditions)
        .await
        .map_err(from_om)?;
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for (o, v) in results.into_iter().zip(asked) {
        match outcome(o, v) {
            Ok(d) if !quiet => deleted.push(d),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: (!deleted.is_empty()).then_some(deleted),
        errors: (!errors.is_empty()).then_some(errors),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(key: &str, reason: &str, version: &str, marker: bool) -> KeyOutcome {
        KeyOutcome {
            key: key.into(),
            reason: reason.into(),
            message: "msg".into(),
            version_id: version.into(),
            delete_marker: marker,
        }
    }

    #[test]
    fn outcomes() {
        let d = outcome(o("a", "", "v9", true), None).unwrap();
        assert_eq!(d.delete_marker, Some(true));
        assert_eq!(d.delete_marker_version_id.as_deref(), Some("v9"));
        let d = outcome(o("a", "", "v1", false), Some("v1".into())).unwrap();
        assert_eq!(d.version_id.as_deref(), Some("v1"));
        assert_eq!(d.delete_marker, None);
        let d = outcome(o("gone", "KEY_NOT_FOUND", "", false), None).unwrap();
        assert_eq!(d.key.as_deref(), Some("gone"));
        let e = outcome(o("x", "ACCESS_DENIED", "", false), None).unwrap_err();
        assert_eq!(e.code.as_deref(), Some("AccessDenied"));
        assert_eq!(e.key.as_deref(), Some("x"));
    }
}
