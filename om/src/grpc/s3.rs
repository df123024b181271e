//! Handlers of the S3 credential RPCs (CreateS3Secret, GetS3Secret,
//! ListS3Secrets, RevokeS3Secret). The leader draws the keys
//! (`service::s3::new_s3_keys`) before proposing; a retried create is
//! answered from the retry cache with the keys of the first attempt. The
//! secret is sealed before proposing and opened for the answer
//! (`service::s3`).

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::{consistency, unexpected, write_id};
use crate::apply::s3::{check_groups, check_user, valid_access_key};
use crate::error::OmError;
use crate::service::OmService;
use crate::service::s3::{MAX_S3_SECRETS_PAGE, new_s3_keys};

fn credential(r: st::S3SecretRecord) -> S3Credential {
    S3Credential {
        access_key: r.access_key,
        user: r.user,
        groups: r.groups,
        created_ms: r.created_ms,
    }
}

fn access_key(field: &str, k: &str) -> Result<(), OmError> {
    if valid_access_key(k) {
        Ok(())
    } else {
        Err(OmError::invalid(
            "INVALID_ACCESS_KEY",
            field,
            format!(
                "{} is not an access key (OM and 18 characters of [A-Z0-9])",
                crate::validate::quote_prefix(k)
            ),
        ))
    }
}

pub async fn create(
    svc: &OmService,
    r: CreateS3SecretRequest,
) -> Result<CreateS3SecretResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    check_user("user", &r.user)?;
    check_groups(&r.groups)?;
    let (access_key, secret_key) = new_s3_keys();
    let (secret_key, sealed) = svc.seal_new(&access_key, &r.user, secret_key)?;
    let op = Op::CreateS3Secret(st::CreateS3Secret {
        access_key,
        secret_key,
        user: r.user,
        groups: r.groups,
        sealed,
    });
    // The answer (a retry's too, from the retry cache) carries the secret
    // as stored: opened here.
    match svc.propose(id, op).await? {
        command_result::Result::S3Secret(rec) => Ok(CreateS3SecretResponse {
            secret_key: svc.secret_of(&rec)?,
            credential: Some(credential(rec)),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn get(svc: &OmService, r: GetS3SecretRequest) -> Result<GetS3SecretResponse, OmError> {
    access_key("access_key", &r.access_key)?;
    let rec = svc
        .get_s3_secret(consistency(&r.read), &r.access_key)
        .await?;
    Ok(GetS3SecretResponse {
        secret_key: svc.secret_of(&rec)?,
        credential: Some(credential(rec)),
    })
}

pub async fn list(
    svc: &OmService,
    r: ListS3SecretsRequest,
) -> Result<ListS3SecretsResponse, OmError> {
    if !r.user.is_empty() {
        check_user("user", &r.user)?;
    }
    if !r.start_after.is_empty() {
        access_key("start_after", &r.start_after)?;
    }
    if r.max_results as usize > MAX_S3_SECRETS_PAGE {
        return Err(OmError::invalid(
            "INVALID_MAX_RESULTS",
            "max_results",
            format!("at most {MAX_S3_SECRETS_PAGE} credentials per page"),
        ));
    }
    let max = match r.max_results {
        0 => MAX_S3_SECRETS_PAGE,
        n => n as usize,
    };
    let page = svc
        .list_s3_secrets(consistency(&r.read), &r.user, &r.start_after, max)
        .await?;
    Ok(ListS3SecretsResponse {
        credentials: page.credentials.into_iter().map(credential).collect(),
        truncated: page.truncated,
    })
}

/// Seals every stored secret under the current key (admins only). The
/// work is idempotent, so a retry does it again rather than replay.
pub async fn rotate_key(
    svc: &OmService,
    r: RotateS3SecretKeyRequest,
) -> Result<RotateS3SecretKeyResponse, OmError> {
    write_id(&r.header, &r)?;
    let done = svc.reseal_s3_secrets(false, false).await?;
    Ok(RotateS3SecretKeyResponse {
        key_id: done.key_id,
        resealed: done.resealed,
        unchanged: done.unchanged,
        unreadable: done.unreadable,
    })
}

pub async fn revoke(
    svc: &OmService,
    r: RevokeS3SecretRequest,
) -> Result<RevokeS3SecretResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    access_key("access_key", &r.access_key)?;
    let op = Op::RevokeS3Secret(st::RevokeS3Secret {
        access_key: r.access_key,
    });
    match svc.propose(id, op).await? {
        command_result::Result::S3Secret(rec) => Ok(RevokeS3SecretResponse {
            credential: Some(credential(rec)),
        }),
        other => Err(unexpected(other)),
    }
}
