//! Authorization: which rights a caller holds on the cluster, a volume or a
//! bucket, and which rights each operation needs.
//!
//! Rights are Ozone's native set (READ, WRITE, CREATE, LIST, DELETE, READ_ACL,
//! WRITE_ACL; ALL is all of them) plus IMPERSONATE, which only the cluster's
//! ACL grants. Who holds what:
//! - a cluster admin (named in `--admins`, or granted ALL on the cluster)
//!   holds every right everywhere;
//! - a volume's owner holds every right on the volume and its buckets; a
//!   bucket's owner (its creator) every right on the bucket;
//! - anyone else holds what the resource's own ACL grants to their user
//!   name, to one of their groups, or to the world (every authenticated
//!   principal). A volume's grants are not inherited by its buckets.
//!
//! Checks read only replicated state and the command's `Caller`, so apply
//! makes the same decision on every replica (`check_rights`). A resource that
//! does not exist passes: the operation then reports it missing.
//!
//! The request being served is known through a task-local `RequestCtx`,
//! scoped by `grpc::auth::Authenticate` around each public RPC; commands
//! proposed outside one (expiry, purges) have no caller.

use std::fmt;
use std::future::Future;

use om_proto::store::{AclGrant, Caller, VolumeRecord};

use crate::error::OmError;
pub use crate::limits::{MAX_GRANTS, MAX_GROUPS, MAX_PRINCIPAL_BYTES as MAX_NAME_BYTES};
use crate::store::keys;
use crate::store::table::{self, BucketTable, SettingsTable, VolumeTable};
use crate::store::view::StateRead;

pub const READ: u32 = 1;
pub const WRITE: u32 = 1 << 1;
pub const CREATE: u32 = 1 << 2;
pub const LIST: u32 = 1 << 3;
pub const DELETE: u32 = 1 << 4;
pub const READ_ACL: u32 = 1 << 5;
pub const WRITE_ACL: u32 = 1 << 6;
/// Every right on a volume or bucket; on the cluster, a cluster admin.
pub const ALL: u32 = (1 << 7) - 1;
/// Acting for another user (cluster ACL only).
pub const IMPERSONATE: u32 = 1 << 7;
/// Listing and acknowledging the deleted-blocks table (cluster ACL only,
/// from rules 13: `rules::RECLAIM_RIGHT`).
pub const RECLAIM: u32 = 1 << 8;
/// The rights outside ALL a cluster grant may hold.
pub const CLUSTER_EXTRAS: u32 = IMPERSONATE | RECLAIM;

pub const KIND_USER: u32 = 1;
pub const KIND_GROUP: u32 = 2;
pub const KIND_WORLD: u32 = 3;

const NAMES: [(u32, &str); 9] = [
    (READ, "READ"),
    (WRITE, "WRITE"),
    (CREATE, "CREATE"),
    (LIST, "LIST"),
    (DELETE, "DELETE"),
    (READ_ACL, "READ_ACL"),
    (WRITE_ACL, "WRITE_ACL"),
    (IMPERSONATE, "IMPERSONATE"),
    (RECLAIM, "RECLAIM"),
];

/// The names of the rights in `bits`: `ALL` for all seven, else each one.
pub fn right_names(bits: u32) -> Vec<&'static str> {
    let mut out = Vec::new();
    if bits & ALL == ALL {
        out.push("ALL");
    }
    for (bit, name) in NAMES {
        if bits & bit != 0 && (bit & CLUSTER_EXTRAS != 0 || bits & ALL != ALL) {
            out.push(name);
        }
    }
    out
}

/// What an ACL is attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource<'a> {
    Cluster,
    Volume(&'a str),
    Bucket(&'a str, &'a str),
}

impl<'a> Resource<'a> {
    /// The cluster when both are empty, a volume when `bucket` is.
    pub fn of(volume: &'a str, bucket: &'a str) -> Resource<'a> {
        match (volume.is_empty(), bucket.is_empty()) {
            (true, _) => Resource::Cluster,
            (false, true) => Resource::Volume(volume),
            (false, false) => Resource::Bucket(volume, bucket),
        }
    }
}

impl fmt::Display for Resource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Cluster => write!(f, "/"),
            Resource::Volume(v) => write!(f, "/{v}"),
            Resource::Bucket(v, b) => write!(f, "/{v}/{b}"),
        }
    }
}

/// Whether grant `g` applies to `c`.
fn applies(g: &AclGrant, c: &Caller) -> bool {
    match g.kind {
        KIND_USER => g.name == c.user,
        KIND_GROUP => c.groups.contains(&g.name),
        KIND_WORLD => true,
        _ => false,
    }
}

/// The rights `grants` give `c`.
pub fn granted(grants: &[AclGrant], c: &Caller) -> u32 {
    grants
        .iter()
        .filter(|g| applies(g, c))
        .fold(0, |acc, g| acc | g.rights)
}

pub fn cluster_acl(db: &(impl StateRead + ?Sized)) -> Result<Vec<AclGrant>, OmError> {
    Ok(table::get::<SettingsTable>(db, keys::CLUSTER_ACL_KEY)?
        .map(|r| r.grants)
        .unwrap_or_default())
}

/// Whether `c` is a cluster admin: by the leader's `--admins`, or granted ALL
/// on the cluster.
pub fn is_admin(db: &(impl StateRead + ?Sized), c: &Caller) -> Result<bool, OmError> {
    Ok(cluster_rights(&cluster_acl(db)?, c) & ALL == ALL)
}

/// The rights `c` holds on the cluster under its grants `cluster`: every
/// one for an admin (by `--admins` or granted ALL).
pub fn cluster_rights(cluster: &[AclGrant], c: &Caller) -> u32 {
    let rights = granted(cluster, c);
    if c.admin || rights & ALL == ALL {
        ALL | CLUSTER_EXTRAS
    } else {
        rights
    }
}

/// Whether `c` is a cluster admin under the cluster's grants `cluster`.
pub fn is_admin_under(cluster: &[AclGrant], c: &Caller) -> bool {
    cluster_rights(cluster, c) & ALL == ALL
}

/// Whether `c` holds a right no impersonator may borrow: an admin's, or
/// IMPERSONATE itself. Only an admin may act for (or read the S3 secrets
/// of) such a user.
pub fn is_delegate(cluster: &[AclGrant], c: &Caller) -> bool {
    let r = cluster_rights(cluster, c);
    r & ALL == ALL || r & IMPERSONATE != 0
}

/// The rights `c` holds on `r`; `None` when `r` does not exist.
pub fn rights_on(
    db: &(impl StateRead + ?Sized),
    c: &Caller,
    r: Resource<'_>,
) -> Result<Option<u32>, OmError> {
    let cluster = cluster_rights(&cluster_acl(db)?, c);
    let admin = cluster & ALL == ALL;
    match r {
        Resource::Cluster => Ok(Some(cluster)),
        Resource::Volume(v) => {
            let Some(vol) = table::get::<VolumeTable>(db, &keys::volume_key(v))? else {
                return Ok(None);
            };
            Ok(Some(volume_rights(&vol, c, admin)))
        }
        Resource::Bucket(v, b) => {
            let Some(vol) = table::get::<VolumeTable>(db, &keys::volume_key(v))? else {
                return Ok(None);
            };
            let Some(bucket) = table::get::<BucketTable>(db, &keys::bucket_key(v, b))? else {
                return Ok(None);
            };
            if admin || owns(&vol.owner, c) || owns(&bucket.owner, c) {
                return Ok(Some(ALL));
            }
            Ok(Some(granted(&bucket.acl, c)))
        }
    }
}

/// The rights `c` holds on volume `vol`, given whether it is an admin.
pub fn volume_rights(vol: &VolumeRecord, c: &Caller, admin: bool) -> u32 {
    if admin || owns(&vol.owner, c) {
        ALL
    } else {
        granted(&vol.acl, c)
    }
}

fn owns(owner: &str, c: &Caller) -> bool {
    !owner.is_empty() && owner == c.user
}

const CURRENT: u32 = crate::rules::CURRENT;

/// The refusal for `c` lacking `right` on `r`, worded as apply rules
/// `rules` word it (`validate::quote_in`; outside apply, `rules::CURRENT`).
pub fn denied(c: &Caller, r: Resource<'_>, right: u32, rules: u32) -> OmError {
    let right = right_names(right).join("+");
    let quote = |v: &str| crate::validate::quote_in(rules, v);
    let who = if c.by.is_empty() {
        quote(&c.user)
    } else {
        format!("{} (impersonated by {})", quote(&c.user), quote(&c.by))
    };
    let resource = r.to_string();
    OmError::Denied {
        message: format!("{who} lacks {right} on {resource}"),
        right,
        resource,
    }
}

/// `Ok` when `c` holds `right` on `r` (or `r` does not exist); a refusal
/// is worded as apply rules `rules` word it.
pub fn check(
    db: &(impl StateRead + ?Sized),
    c: &Caller,
    r: Resource<'_>,
    right: u32,
    rules: u32,
) -> Result<(), OmError> {
    match rights_on(db, c, r)? {
        Some(have) if have & right != right => Err(denied(c, r, right, rules)),
        _ => Ok(()),
    }
}

/// A read's check: as `check`, except that a name that does not exist is
/// refused as one the caller may not read unless the caller could see
/// that it is missing (a cluster admin for volumes; for buckets, a holder
/// of READ, LIST or CREATE on the volume, who could list or try to create
/// it), so a lookup's answer never tells a caller which names exist. Apply keeps `check` (its rejections are
/// replicated state).
pub fn check_lookup(
    db: &(impl StateRead + ?Sized),
    c: &Caller,
    r: Resource<'_>,
    right: u32,
) -> Result<(), OmError> {
    match rights_on(db, c, r)? {
        Some(have) if have & right != right => Err(denied(c, r, right, CURRENT)),
        Some(_) => Ok(()),
        None if sees_missing(db, c, r)? => Ok(()),
        None => Err(match denied(c, r, right, CURRENT) {
            OmError::Denied {
                right,
                resource,
                message,
            } => OmError::Denied {
                message: format!("{message}, or it does not exist"),
                right,
                resource,
            },
            other => other,
        }),
    }
}

/// Whether `c` may learn that `r`, which does not exist, is missing.
fn sees_missing(
    db: &(impl StateRead + ?Sized),
    c: &Caller,
    r: Resource<'_>,
) -> Result<bool, OmError> {
    let admin = cluster_rights(&cluster_acl(db)?, c) & ALL == ALL;
    Ok(match r {
        Resource::Cluster => true,
        Resource::Volume(_) => admin,
        Resource::Bucket(v, _) => match table::get::<VolumeTable>(db, &keys::volume_key(v))? {
            Some(vol) => volume_rights(&vol, c, admin) & (READ | LIST | CREATE) != 0,
            None => admin,
        },
    })
}

/// The rights configuring what deletes data needs under apply rules
/// `rules`: lifecycle deletes what its rules match, and versioning decides
/// whether overwrites destroy data, so from rules 8 both need DELETE besides
/// WRITE, as deleting does.
pub fn configure_rights(rules: u32) -> u32 {
    if crate::rules::CONFIGURE_NEEDS_DELETE.holds(rules) {
        WRITE | DELETE
    } else {
        WRITE
    }
}

/// An object's audit target: `/volume/bucket/key`.
pub fn object_target(volume: &str, bucket: &str, key: &str) -> String {
    format!("/{volume}/{bucket}/{key}")
}

/// Apply's check: the command's caller (if any) holds every right in
/// `rights` (its operation's, `apply::ops::rights`), in the replicated state
/// as of this entry.
pub fn check_rights(
    db: &(impl StateRead + ?Sized),
    caller: Option<&Caller>,
    rights: Vec<(Resource<'_>, u32)>,
    rules: u32,
) -> Result<(), OmError> {
    let Some(c) = caller else {
        return Ok(());
    };
    for (r, right) in rights {
        check(db, c, r, right, rules)?;
    }
    Ok(())
}

/// Whether `name` may name a user or group: 1 to `MAX_NAME_BYTES` bytes,
/// no whitespace, control characters, `,` or `:` (the separators of
/// `omctl acl` and of the impersonation metadata).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && !name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',' || c == ':')
}

/// Checks grants for resource `r`: known kinds, valid names (none for the
/// world), at least one right each, only ALL, IMPERSONATE and (from
/// `rules::RECLAIM_RIGHT`) RECLAIM on the cluster and neither elsewhere, at
/// most `MAX_GRANTS`; under apply rules `rules`.
pub fn check_grants(r: Resource<'_>, grants: &[AclGrant], rules: u32) -> Result<(), OmError> {
    let (extras, cluster_msg) = if crate::rules::RECLAIM_RIGHT.holds(rules) {
        (
            CLUSTER_EXTRAS,
            "the cluster takes ALL (admin), IMPERSONATE and RECLAIM only",
        )
    } else {
        (
            IMPERSONATE,
            "the cluster takes ALL (admin) and IMPERSONATE only",
        )
    };
    if grants.len() > MAX_GRANTS {
        return Err(OmError::invalid(
            "TOO_MANY_GRANTS",
            "grants",
            format!(
                "{} grants; a resource holds at most {MAX_GRANTS}",
                grants.len()
            ),
        ));
    }
    for (i, g) in grants.iter().enumerate() {
        let field = format!("grants[{i}]");
        match g.kind {
            KIND_USER | KIND_GROUP if !valid_name(&g.name) => {
                return Err(OmError::invalid(
                    "INVALID_GRANTEE",
                    format!("{field}.name"),
                    format!(
                        "grantee name {:?} must be 1 to {MAX_NAME_BYTES} bytes without                          whitespace, ',' or ':'",
                        crate::validate::quote_prefix(&g.name)
                    ),
                ));
            }
            KIND_USER | KIND_GROUP => {}
            KIND_WORLD if !g.name.is_empty() => {
                return Err(OmError::invalid(
                    "INVALID_GRANTEE",
                    format!("{field}.name"),
                    "a world grant has no name",
                ));
            }
            KIND_WORLD => {}
            other => {
                return Err(OmError::invalid(
                    "INVALID_GRANTEE",
                    format!("{field}.kind"),
                    format!("unknown grantee kind {other}"),
                ));
            }
        }
        let allowed = match r {
            Resource::Cluster => ALL | extras,
            _ => ALL,
        };
        if g.rights == 0 || g.rights & !allowed != 0 {
            let msg = match r {
                Resource::Cluster => cluster_msg,
                _ => {
                    "volumes and buckets take READ, WRITE, CREATE, LIST, DELETE, READ_ACL,                       WRITE_ACL or ALL"
                }
            };
            return Err(OmError::invalid(
                "INVALID_RIGHTS",
                format!("{field}.rights"),
                if g.rights == 0 {
                    "a grant needs at least one right".to_string()
                } else {
                    msg.to_string()
                },
            ));
        }
        if matches!(r, Resource::Cluster) && g.rights & ALL != 0 && g.rights & ALL != ALL {
            return Err(OmError::invalid(
                "INVALID_RIGHTS",
                format!("{field}.rights"),
                cluster_msg,
            ));
        }
    }
    Ok(())
}

/// `grants` changed by `mode` (0 set, 1 add, 2 remove) with `change`: one
/// grant per grantee, in the order grantees first appeared.
pub fn merge(grants: &[AclGrant], mode: u32, change: &[AclGrant]) -> Vec<AclGrant> {
    let mut out: Vec<AclGrant> = if mode == 0 {
        Vec::new()
    } else {
        grants.to_vec()
    };
    for g in change {
        let at = out
            .iter()
            .position(|o| o.kind == g.kind && o.name == g.name);
        match (mode, at) {
            (2, Some(i)) => out[i].rights &= !g.rights,
            (2, None) => {}
            (_, Some(i)) => out[i].rights |= g.rights,
            (_, None) => out.push(g.clone()),
        }
    }
    out.retain(|g| g.rights != 0);
    out
}

/// The identity a request is served for, as authentication established it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    /// Groups: a certificate's Organization attributes, or the token file's
    /// fourth column.
    pub groups: Vec<String>,
    /// How it was established: "certificate", "token" or "none"
    /// (authentication off).
    pub via: &'static str,
}

/// An end user a gateway asks to act for (`om-impersonate-user`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Impersonation {
    pub user: String,
    pub groups: Vec<String>,
}

/// What the service knows of the request it serves.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    pub principal: Principal,
    pub impersonate: Option<Impersonation>,
    /// The RPC's name, e.g. `PutKey`.
    pub operation: String,
    /// `x-request-id` when the client sent a usable one, else generated;
    /// returned in `om-request-id`.
    pub request_id: String,
    /// How old a stale read's state may be, in ms (`u64::MAX`: not a stale
    /// read); returned in `om-read-staleness-ms`.
    pub staleness_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The leader's client address, once this node forwarded the request's
    /// write to it; returned in `om-leader`, so a client that follows the
    /// leader goes there next.
    pub leader_hint: std::sync::Arc<std::sync::OnceLock<String>>,
}

tokio::task_local! {
    static REQUEST: RequestCtx;
}

/// Runs `f` as the handling of the request `ctx` describes.
pub fn scope<F: Future>(ctx: RequestCtx, f: F) -> impl Future<Output = F::Output> {
    REQUEST.scope(ctx, f)
}

/// The request being served, if any.
pub fn request() -> Option<RequestCtx> {
    REQUEST.try_with(Clone::clone).ok()
}

/// Names the leader the current request's write was forwarded to (see
/// `RequestCtx::leader_hint`); nothing outside a request.
pub fn hint_leader(grpc_addr: String) {
    let _ = REQUEST.try_with(|c| c.leader_hint.set(grpc_addr));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(kind: u32, name: &str, rights: u32) -> AclGrant {
        AclGrant {
            kind,
            name: name.to_string(),
            rights,
        }
    }

    fn caller(user: &str, groups: &[&str]) -> Caller {
        Caller {
            user: user.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Caller::default()
        }
    }

    #[test]
    fn grants_apply_by_user_group_and_world() {
        let acl = [
            grant(KIND_USER, "alice", READ | LIST),
            grant(KIND_GROUP, "eng", WRITE),
            grant(KIND_WORLD, "", LIST),
            grant(KIND_USER, "bob", DELETE),
        ];
        assert_eq!(granted(&acl, &caller("alice", &[])), READ | LIST);
        assert_eq!(granted(&acl, &caller("carol", &["eng"])), WRITE | LIST);
        assert_eq!(granted(&acl, &caller("dave", &[])), LIST);
        // A group grant does not apply to a user of that name, nor the reverse.
        assert_eq!(granted(&acl, &caller("eng", &["alice"])), LIST);
    }

    #[test]
    fn merging_adds_removes_and_replaces_per_grantee() {
        let acl = vec![
            grant(KIND_USER, "alice", READ),
            grant(KIND_GROUP, "eng", LIST),
        ];
        let add = merge(&acl, 1, &[grant(KIND_USER, "alice", WRITE)]);
        assert_eq!(add[0].rights, READ | WRITE);
        assert_eq!(add.len(), 2);
        let removed = merge(&add, 2, &[grant(KIND_USER, "alice", READ | WRITE)]);
        assert_eq!(removed, vec![grant(KIND_GROUP, "eng", LIST)]);
        let set = merge(&add, 0, &[grant(KIND_WORLD, "", READ)]);
        assert_eq!(set, vec![grant(KIND_WORLD, "", READ)]);
        // A user and a group of the same name are different grantees.
        let both = merge(&acl, 1, &[grant(KIND_GROUP, "alice", DELETE)]);
        assert_eq!(both.len(), 3);
    }

    #[test]
    fn grants_are_checked_for_their_resource() {
        let cur = crate::rules::CURRENT;
        let ok = |r, g: AclGrant| check_grants(r, &[g], cur).is_ok();
        assert!(ok(Resource::Cluster, grant(KIND_USER, "ops", ALL)));
        assert!(ok(Resource::Cluster, grant(KIND_USER, "gw", IMPERSONATE)));
        // RECLAIM from rules 13, on the cluster only.
        let reclaim = grant(KIND_USER, "gw", IMPERSONATE | RECLAIM);
        assert!(ok(Resource::Cluster, reclaim.clone()));
        assert!(check_grants(Resource::Cluster, std::slice::from_ref(&reclaim), 12).is_err());
        assert!(!ok(Resource::Volume("v"), grant(KIND_USER, "gw", RECLAIM)));
        assert!(!ok(Resource::Cluster, grant(KIND_USER, "ops", READ)));
        assert!(!ok(
            Resource::Volume("v"),
            grant(KIND_USER, "gw", IMPERSONATE)
        ));
        assert!(!ok(Resource::Volume("v"), grant(KIND_USER, "a", 0)));
        assert!(!ok(Resource::Volume("v"), grant(KIND_USER, "", READ)));
        assert!(!ok(Resource::Volume("v"), grant(KIND_USER, "a b", READ)));
        assert!(!ok(Resource::Volume("v"), grant(KIND_WORLD, "x", READ)));
        assert!(!ok(Resource::Volume("v"), grant(9, "x", READ)));
        assert!(ok(
            Resource::Bucket("v", "b"),
            grant(KIND_WORLD, "", READ | LIST)
        ));
        let many: Vec<_> = (0..=MAX_GRANTS)
            .map(|i| grant(KIND_USER, &format!("u{i}"), READ))
            .collect();
        assert!(check_grants(Resource::Volume("v"), &many, cur).is_err());
    }

    #[test]
    fn right_names_spell_all_once() {
        assert_eq!(right_names(ALL), vec!["ALL"]);
        assert_eq!(right_names(ALL | IMPERSONATE), vec!["ALL", "IMPERSONATE"]);
        assert_eq!(
            right_names(IMPERSONATE | RECLAIM),
            vec!["IMPERSONATE", "RECLAIM"]
        );
        assert_eq!(right_names(READ | DELETE), vec!["READ", "DELETE"]);
        assert_eq!(right_names(0), Vec::<&str>::new());
    }

    #[test]
    fn resources_print_as_paths() {
        assert_eq!(Resource::of("", "").to_string(), "/");
        assert_eq!(Resource::of("v", "").to_string(), "/v");
        assert_eq!(Resource::of("v", "b").to_string(), "/v/b");
    }

    /// From rules 15 a refusal quotes each name once; an older entry keeps
    /// the wording its replicas answered with.
    #[test]
    fn refusals_quote_names_once_from_rules_15() {
        let c = Caller {
            user: "alice".into(),
            by: "gw".into(),
            ..Default::default()
        };
        let m = |rules| denied(&c, Resource::Cluster, ALL, rules).to_string();
        assert!(
            m(15).contains("\"alice\" (impersonated by \"gw\") lacks ALL on /"),
            "{}",
            m(15)
        );
        assert!(
            m(14).contains(r#""\"alice\"" (impersonated by "\"gw\"")"#),
            "{}",
            m(14)
        );
    }
}
