//! Handlers of keys written whole: put, look up, delete (one or many),
//! rename and list.

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::{
    Refused, consistency, key_info, objects, scan_stats, sized, unexpected, versions, write_id,
};
use crate::error::OmError;
use crate::service::{KeyListing, OmService};
use crate::validate;

pub async fn put_key(svc: &OmService, r: PutKeyRequest) -> Result<PutKeyResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    let etag = validate::normalize_etag(&r.etag);
    validate::etag("etag", &etag)?;
    let id = write_id(&r.header, &r)?;
    match svc
        .propose(
            id,
            Op::PutKey(st::PutKey {
                volume: r.volume,
                bucket: r.bucket,
                key: r.key,
                size: r.size,
                etag,
                content_type: r.content_type,
                metadata: r.metadata,
                conditions: objects::conditions(r.conditions)?,
                block_size: crate::apply::BLOCK_SIZE,
                tags: r.tags,
            }),
        )
        .await?
    {
        command_result::Result::Key(k) => Ok(PutKeyResponse {
            key: Some(key_info(
                &k.volume,
                &k.bucket,
                k.name,
                k.key.unwrap_or_default(),
            )),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn delete_key(
    svc: &OmService,
    r: DeleteKeyRequest,
) -> Result<DeleteKeyResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    versions::optional_version_id("version_id", &r.version_id)?;
    let conditions = r
        .conditions
        .clone()
        .map(super::objects::delete_conditions)
        .transpose()?;
    let id = write_id(&r.header, &r)?;
    let done = svc
        .propose(
            id,
            Op::DeleteKey(st::DeleteKey {
                volume: r.volume,
                bucket: r.bucket,
                key: r.key,
                version_id: r.version_id,
                conditions,
            }),
        )
        .await?;
    Ok(match done {
        command_result::Result::Deleted(d) => DeleteKeyResponse {
            version_id: d.version_id,
            delete_marker: d.delete_marker,
        },
        _ => DeleteKeyResponse::default(),
    })
}

pub async fn delete_keys(
    svc: &OmService,
    r: DeleteKeysRequest,
) -> Result<DeleteKeysResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    if r.keys.is_empty() || r.keys.len() > validate::MAX_DELETE_KEYS {
        return Err(OmError::invalid(
            "INVALID_KEY_COUNT",
            "keys",
            format!(
                "between 1 and {} keys per request, got {}",
                validate::MAX_DELETE_KEYS,
                r.keys.len()
            ),
        ));
    }
    for v in &r.version_ids {
        versions::optional_version_id("version_ids", v)?;
    }
    crate::apply::condition_count(r.keys.len(), r.conditions.len())?;
    let conditions = r
        .conditions
        .iter()
        .cloned()
        .map(super::objects::delete_conditions)
        .collect::<Result<Vec<_>, _>>()?;
    let id = write_id(&r.header, &r)?;
    match svc
        .propose(
            id,
            Op::DeleteKeys(st::DeleteKeys {
                volume: r.volume,
                bucket: r.bucket,
                keys: r.keys,
                version_ids: r.version_ids,
                conditions,
            }),
        )
        .await?
    {
        command_result::Result::DeleteKeys(d) => Ok(DeleteKeysResponse {
            results: d
                .outcomes
                .into_iter()
                .map(|o| KeyOutcome {
                    key: o.key,
                    reason: o.reason,
                    message: o.message,
                    version_id: o.version_id,
                    delete_marker: o.delete_marker,
                })
                .collect(),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn rename_key(
    svc: &OmService,
    r: RenameKeyRequest,
) -> Result<RenameKeyResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    if r.from == r.to {
        return Err(OmError::invalid(
            "SAME_NAME",
            "to",
            "the new name equals the old one",
        ));
    }
    let id = write_id(&r.header, &r)?;
    match svc
        .propose(
            id,
            Op::RenameKey(st::RenameKey {
                volume: r.volume,
                bucket: r.bucket,
                from: r.from,
                to: r.to,
            }),
        )
        .await?
    {
        command_result::Result::Key(k) => Ok(RenameKeyResponse {
            key: Some(key_info(
                &k.volume,
                &k.bucket,
                k.name,
                k.key.unwrap_or_default(),
            )),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn list_keys(svc: &OmService, r: ListKeysRequest) -> Result<ListKeysResponse, OmError> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    validate::optional_key("prefix", &r.prefix)?;
    validate::optional_key("start_after", &r.start_after)?;
    validate::delimiter("delimiter", &r.delimiter)?;
    crate::listing::check_token_len(&r.continuation_token)?;
    let omit_blocks = r.omit_blocks;
    let page = svc
        .list_keys(
            consistency(&r.read),
            KeyListing {
                volume: r.volume.clone(),
                bucket: r.bucket.clone(),
                prefix: r.prefix,
                delimiter: r.delimiter,
                start_after: r.start_after,
                continuation_token: r.continuation_token,
                max_keys: r.max_keys,
                snapshot: r.snapshot,
            },
            |name, mut k| {
                if omit_blocks {
                    k.blocks = Vec::new();
                    k.part_sizes = Vec::new();
                }
                sized(key_info(&r.volume, &r.bucket, name, k))
            },
        )
        .await?;
    Ok(ListKeysResponse {
        keys: page.keys,
        truncated: !page.next_continuation_token.is_empty(),
        next_start_after: page.next_start_after,
        common_prefixes: page.common_prefixes,
        next_continuation_token: page.next_continuation_token,
        scan: Some(scan_stats(page.stats)),
    })
}

pub async fn lookup_key(
    svc: &OmService,
    r: LookupKeyRequest,
) -> Result<LookupKeyResponse, Refused> {
    validate::resource_name("volume", &r.volume)?;
    validate::resource_name("bucket", &r.bucket)?;
    validate::key_name("key", &r.key)?;
    versions::optional_version_id("version_id", &r.version_id)?;
    if !r.snapshot.is_empty() {
        validate::snapshot_name("snapshot", &r.snapshot)?;
        if !r.version_id.is_empty() {
            return Err(OmError::invalid(
                "INVALID_ARGUMENT",
                "version_id",
                "a read of a snapshot takes no version id: it reads the version the snapshot shows",
            )
            .into());
        }
    }
    let (k, latest) = if r.version_id.is_empty() {
        let k = svc
            .lookup_key_in(
                consistency(&r.read),
                &r.volume,
                &r.bucket,
                &r.key,
                &r.snapshot,
            )
            .await?;
        if k.delete_marker {
            let e = OmError::not_found(
                "KEY_NOT_FOUND",
                "key",
                format!(
                    "the current version of {}/{}/{} is a delete marker",
                    r.volume, r.bucket, r.key
                ),
            );
            return Err(Refused::delete_marker(
                e,
                crate::apply::versions::version_id(&k),
            ));
        }
        (k, true)
    } else {
        svc.lookup_version(
            consistency(&r.read),
            &r.volume,
            &r.bucket,
            &r.key,
            &r.version_id,
        )
        .await?
    };
    let expiration = if latest && r.snapshot.is_empty() {
        svc.expiration_of(&r.volume, &r.bucket, &r.key, &k)?
    } else {
        None
    };
    let mut info = key_info(&r.volume, &r.bucket, r.key.clone(), k);
    info.is_latest = latest;
    if let Some((at_ms, rule_id)) = expiration {
        info.expiration_ms = at_ms;
        info.expiration_rule_id = rule_id;
    }
    Ok(LookupKeyResponse { key: Some(info) })
}
