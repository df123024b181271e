//! Handlers of the ACL RPCs (GetAcl, SetAcl) and WhoAmI, and the conversion
//! between the API's grants (rights as a list) and the stored ones (a bit
//! set, `authz`).

use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::*;

use super::{consistency, unexpected, write_id};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::service::OmService;
use crate::validate;

const RIGHTS: [(AclRight, u32); 10] = [
    (AclRight::Read, authz::READ),
    (AclRight::Write, authz::WRITE),
    (AclRight::Create, authz::CREATE),
    (AclRight::List, authz::LIST),
    (AclRight::Delete, authz::DELETE),
    (AclRight::ReadAcl, authz::READ_ACL),
    (AclRight::WriteAcl, authz::WRITE_ACL),
    (AclRight::All, authz::ALL),
    (AclRight::Impersonate, authz::IMPERSONATE),
    (AclRight::Reclaim, authz::RECLAIM),
];

/// The API's grants in stored form; `authz::check_grants` then checks
/// their count, names and rights for the resource.
fn stored_grants(grants: Vec<AclGrant>) -> Result<Vec<st::AclGrant>, OmError> {
    grants
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let kind = match GranteeKind::try_from(g.kind) {
                Ok(GranteeKind::User) => authz::KIND_USER,
                Ok(GranteeKind::Group) => authz::KIND_GROUP,
                Ok(GranteeKind::World) => authz::KIND_WORLD,
                _ => {
                    return Err(OmError::invalid(
                        "INVALID_GRANTEE",
                        format!("grants[{i}].kind"),
                        format!("grantee kind {} is not USER, GROUP or WORLD", g.kind),
                    ));
                }
            };
            let mut rights = 0;
            for r in &g.rights {
                let bit = RIGHTS
                    .iter()
                    .find(|(right, _)| *right as i32 == *r)
                    .map(|(_, bit)| *bit)
                    .ok_or_else(|| {
                        OmError::invalid(
                            "INVALID_RIGHTS",
                            format!("grants[{i}].rights"),
                            format!("unknown right {r}"),
                        )
                    })?;
                rights |= bit;
            }
            Ok(st::AclGrant {
                kind,
                name: g.name,
                rights,
            })
        })
        .collect()
}

/// Stored grants as the API shows them (ALL instead of its seven rights).
pub fn api_grants(grants: Vec<st::AclGrant>) -> Vec<AclGrant> {
    grants
        .into_iter()
        .map(|g| {
            let kind = match g.kind {
                authz::KIND_USER => GranteeKind::User,
                authz::KIND_GROUP => GranteeKind::Group,
                authz::KIND_WORLD => GranteeKind::World,
                _ => GranteeKind::Unspecified,
            };
            let mut rights = Vec::new();
            if g.rights & authz::ALL == authz::ALL {
                rights.push(AclRight::All as i32);
            }
            for (right, bit) in RIGHTS {
                let shown = match right {
                    AclRight::All => false,
                    AclRight::Impersonate | AclRight::Reclaim => true,
                    _ => g.rights & authz::ALL != authz::ALL,
                };
                if shown && g.rights & bit == bit {
                    rights.push(right as i32);
                }
            }
            AclGrant {
                kind: kind as i32,
                name: g.name,
                rights,
            }
        })
        .collect()
}

fn resource_names<'a>(volume: &'a str, bucket: &'a str) -> Result<Resource<'a>, OmError> {
    if !volume.is_empty() {
        validate::resource_name("volume", volume)?;
    }
    if !bucket.is_empty() {
        if volume.is_empty() {
            return Err(OmError::invalid(
                "MISSING_VOLUME",
                "volume",
                "a bucket's ACL names its volume",
            ));
        }
        validate::resource_name("bucket", bucket)?;
    }
    Ok(Resource::of(volume, bucket))
}

pub async fn get_acl(svc: &OmService, r: GetAclRequest) -> Result<GetAclResponse, OmError> {
    let resource = resource_names(&r.volume, &r.bucket)?;
    let (owner, grants) = svc.get_acl(consistency(&r.read), resource).await?;
    Ok(GetAclResponse {
        owner,
        grants: api_grants(grants),
    })
}

pub async fn set_acl(svc: &OmService, r: SetAclRequest) -> Result<SetAclResponse, OmError> {
    let id = write_id(&r.header, &r)?;
    let resource = resource_names(&r.volume, &r.bucket)?;
    let mode = match AclMode::try_from(r.mode) {
        Ok(AclMode::Set) => 0,
        Ok(AclMode::Add) => 1,
        Ok(AclMode::Remove) => 2,
        Err(_) => {
            return Err(OmError::invalid(
                "INVALID_ACL_MODE",
                "mode",
                format!("unknown ACL mode {}", r.mode),
            ));
        }
    };
    let grants = stored_grants(r.grants)?;
    authz::check_grants(resource, &grants, crate::rules::CURRENT)?;
    let op = Op::SetAcl(st::SetAcl {
        volume: r.volume,
        bucket: r.bucket,
        mode,
        grants,
    });
    match svc.propose(id, op).await? {
        command_result::Result::Acl(a) => Ok(SetAclResponse {
            owner: a.owner,
            grants: api_grants(a.grants),
        }),
        other => Err(unexpected(other)),
    }
}

pub async fn who_am_i(svc: &OmService, _r: WhoAmIRequest) -> Result<WhoAmIResponse, OmError> {
    let (ctx, caller, admin) = svc.whoami()?;
    let via = ctx.as_ref().map_or("none", |c| c.principal.via).to_string();
    Ok(match caller {
        Some(c) => WhoAmIResponse {
            user: c.user,
            groups: c.groups,
            impersonated_by: c.by,
            via,
            admin,
        },
        None => {
            let p = ctx.map(|c| c.principal);
            WhoAmIResponse {
                user: p
                    .as_ref()
                    .map_or("anonymous".to_string(), |p| p.name.clone()),
                groups: p.map(|p| p.groups).unwrap_or_default(),
                impersonated_by: String::new(),
                via,
                admin,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_round_trip_with_all_collapsed() {
        let api = vec![AclGrant {
            kind: GranteeKind::User as i32,
            name: "alice".into(),
            rights: vec![AclRight::Read as i32, AclRight::List as i32],
        }];
        let stored = stored_grants(api.clone()).unwrap();
        assert_eq!(stored[0].rights, authz::READ | authz::LIST);
        assert_eq!(api_grants(stored), api);
        let all = st::AclGrant {
            kind: authz::KIND_GROUP,
            name: "ops".into(),
            rights: authz::ALL | authz::IMPERSONATE,
        };
        let shown = api_grants(vec![all]);
        assert_eq!(
            shown[0].rights,
            vec![AclRight::All as i32, AclRight::Impersonate as i32]
        );
        let bad = AclGrant {
            kind: 7,
            ..api[0].clone()
        };
        assert!(stored_grants(vec![bad]).is_err());
    }
}
