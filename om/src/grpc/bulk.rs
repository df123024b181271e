//! PutKeys: many new keys in one Raft command (bulk loading). Each key is
//! checked as PutKey checks it, with fields named `keys[i].FIELD`: its ETag's
//! syntax here, its other fields and the key count by `PutKeys`' own limits
//! (`apply::ops`), which `OmService::propose` runs.

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::{unexpected, write_id};
use crate::error::OmError;
use crate::service::OmService;
use crate::validate;

fn new_key(k: NewKey) -> Result<st::NewKey, OmError> {
    let etag = validate::normalize_etag(&k.etag);
    validate::etag("etag", &etag)?;
    Ok(st::NewKey {
        key: k.key,
        size: k.size,
        etag,
        content_type: k.content_type,
        metadata: k.metadata,
        tags: k.tags,
    })
}

pub async fn put_keys(svc: &OmService, r: PutKeysRequest) -> Result<PutKeysResponse, OmError> {
    super::objects::bucket_names(&r.volume, &r.bucket)?;
    let id = write_id(&r.header, &r)?;
    let keys = r
        .keys
        .into_iter()
        .enumerate()
        .map(|(i, k)| new_key(k).map_err(|e| e.within(&format!("keys[{i}]"))))
        .collect::<Result<Vec<_>, _>>()?;
    let op = Op::PutKeys(st::PutKeys {
        volume: r.volume,
        bucket: r.bucket,
        keys,
        block_size: crate::apply::BLOCK_SIZE,
    });
    match svc.propose(id, op).await? {
        command_result::Result::Count(c) => Ok(PutKeysResponse { created: c.count }),
        other => Err(unexpected(other)),
    }
}
