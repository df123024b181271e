//! Authorization and auditing of the request being served.
//!
//! Reads are authorized on the node that serves them, after their read
//! barrier, against its replicated ACLs (`read_as`); writes are checked on
//! the leader before they are proposed, and again by apply against the
//! state as of their log entry (`authz::check_rights`), so a right revoked
//! in between refuses them on every replica.

use std::collections::BTreeSet;
use std::sync::Arc;

use om_proto::store::{AclGrant, Caller, VolumeRecord, command::Op};
use openraft::async_runtime::WatchReceiver;

use super::{Consistency, OmService};
use crate::audit::{AuditLog, Event};
use crate::authz::{self, IMPERSONATE, RequestCtx, Resource};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, VolumeTable};

/// Who may do what beyond the replicated ACLs.
#[derive(Debug, Default, Clone)]
pub struct Policy {
    /// Cluster admins by configuration (`--admins`), as Ozone's
    /// `ozone.administrators`; more can be granted ALL on the cluster.
    pub admins: BTreeSet<String>,
}

impl OmService {
    /// Turns authorization on: requests are checked against the ACLs.
    pub fn with_authorization(mut self, policy: Policy) -> Self {
        self.policy = Some(Arc::new(policy));
        self
    }

    /// Audits mutations and refusals to `log`.
    pub fn with_audit(mut self, log: Arc<AuditLog>) -> Self {
        self.audit = Some(log);
        self
    }

    pub fn authorization_on(&self) -> bool {
        self.policy.is_some()
    }

    /// The caller the current request is served for, impersonation checked;
    /// `None` when authorization is off or outside a request.
    pub fn caller(&self) -> Result<Option<Caller>, OmError> {
        let (Some(policy), Some(ctx)) = (&self.policy, authz::request()) else {
            return Ok(None);
        };
        let r = self.resolve(policy, &ctx);
        if let Err(e) = &r {
            self.audit_refusal(&ctx, &Resource::Cluster.to_string(), e);
        }
        r.map(Some)
    }

    pub(super) fn resolve(&self, policy: &Policy, ctx: &RequestCtx) -> Result<Caller, OmError> {
        let p = &ctx.principal;
        let me = Caller {
            user: p.name.clone(),
            groups: p.groups.clone(),
            admin: policy.admins.contains(&p.name),
            by: String::new(),
        };
        let Some(imp) = &ctx.impersonate else {
            return Ok(me);
        };
        // One read of the cluster's grants decides both checks below.
        let cluster = authz::cluster_acl(&self.db)?;
        let mine = authz::cluster_rights(&cluster, &me);
        if mine & IMPERSONATE == 0 {
            return Err(authz::denied(
                &me,
                Resource::Cluster,
                IMPERSONATE,
                crate::rules::CURRENT,
            ));
        }
        let target = Caller {
            user: imp.user.clone(),
            groups: imp.groups.clone(),
            admin: policy.admins.contains(&imp.user),
            by: p.name.clone(),
        };
        // Acting for an admin would make any impersonator one, and acting
        // for another impersonator would reach whoever that one may act for.
        if !authz::is_admin_under(&cluster, &me) && authz::is_delegate(&cluster, &target) {
            return Err(OmError::Denied {
                right: "ALL".to_string(),
                resource: "/".to_string(),
                message: format!(
                    "{} may not impersonate {}: a cluster admin or a holder of IMPERSONATE \
                     (only an admin may)",
                    crate::validate::quote_prefix(&p.name),
                    crate::validate::quote_prefix(&imp.user)
                ),
            });
        }
        Ok(target)
    }

    /// Refuses unless `caller` (when authorization is on) holds `right` on
    /// `r`; a refusal is audited.
    pub fn authorize(
        &self,
        caller: Option<&Caller>,
        r: Resource<'_>,
        right: u32,
    ) -> Result<(), OmError> {
        let Some(c) = caller else { return Ok(()) };
        let checked = authz::check_lookup(&self.db, c, r, right);
        if let (Err(e), Some(ctx)) = (&checked, authz::request()) {
            self.audit_refusal(&ctx, &r.to_string(), e);
        }
        checked
    }

    /// What every read does first: the read barrier for `c`, then the
    /// caller's `right` on `r` in the state the read will see.
    pub async fn read_as(
        &self,
        c: Consistency,
        r: Resource<'_>,
        right: u32,
    ) -> Result<(), OmError> {
        self.read_barrier(c).await?;
        let caller = self.caller()?;
        self.authorize(caller.as_ref(), r, right)
    }

    /// Refuses unless the caller is a cluster admin (membership changes,
    /// leader transfer).
    pub fn require_admin(&self) -> Result<(), OmError> {
        let caller = self.caller()?;
        self.authorize(caller.as_ref(), Resource::Cluster, authz::ALL)
    }

    /// The owner and grants of the cluster, a volume or a bucket; needs
    /// READ_ACL (the cluster's: an admin).
    pub async fn get_acl(
        &self,
        c: Consistency,
        r: Resource<'_>,
    ) -> Result<(String, Vec<AclGrant>), OmError> {
        let right = match r {
            Resource::Cluster => authz::ALL,
            _ => authz::READ_ACL,
        };
        self.read_as(c, r, right).await?;
        match r {
            Resource::Cluster => Ok((String::new(), authz::cluster_acl(&self.db)?)),
            Resource::Volume(v) => {
                let vol = table::get::<VolumeTable>(&self.db, &keys::volume_key(v))?.ok_or_else(
                    || {
                        OmError::not_found(
                            "VOLUME_NOT_FOUND",
                            "volume",
                            format!("volume {v:?} does not exist"),
                        )
                    },
                )?;
                Ok((vol.owner, vol.acl))
            }
            Resource::Bucket(v, b) => {
                let bucket = self.bucket_now(v, b)?;
                Ok((bucket.owner, bucket.acl))
            }
        }
    }

    /// Who the current request is served for: (principal, caller, admin).
    pub fn whoami(&self) -> Result<(Option<RequestCtx>, Option<Caller>, bool), OmError> {
        let caller = self.caller()?;
        let admin = match &caller {
            Some(c) => authz::is_admin(&self.db, c)?,
            None => !self.authorization_on(),
        };
        Ok((authz::request(), caller, admin))
    }

    /// A filter for listed volumes: those the caller may READ (all of them
    /// for an admin or with authorization off).
    pub(super) fn volume_filter(&self) -> Result<impl Fn(&VolumeRecord) -> bool + use<>, OmError> {
        let caller = self.caller()?;
        let admin = match &caller {
            None => true,
            Some(c) => authz::is_admin(&self.db, c)?,
        };
        Ok(move |v: &VolumeRecord| match &caller {
            None => true,
            Some(c) => authz::volume_rights(v, c, admin) & authz::READ != 0,
        })
    }

    /// Checks a write before it is proposed: on the leader only (a lagging
    /// follower would answer for a state the leader has moved past; apply
    /// checks again in any case).
    pub(super) fn precheck(&self, caller: Option<&Caller>, op: &Op) -> Result<(), OmError> {
        let Some(c) = caller else { return Ok(()) };
        if self.raft.metrics().borrow_watched().current_leader != Some(self.node_id) {
            return Ok(());
        }
        for (r, right) in crate::apply::ops::rights(op, crate::apply::RULES) {
            self.authorize(Some(c), r, right)?;
        }
        let checked = crate::apply::ops::check_caller(&self.db, Some(c), op);
        if let (Err(e), Some(ctx)) = (&checked, authz::request()) {
            self.audit_refusal(&ctx, &crate::apply::ops::target(op), e);
        }
        checked
    }

    /// Audits a proposed write's outcome (refusals by the leader's check
    /// were audited where they were decided; a write sent to a follower,
    /// which changed nothing and is retried on the leader, is not audited).
    pub(super) fn audit_write<T>(&self, op: &Op, outcome: &Result<T, OmError>) {
        let (Some(_), Some(ctx)) = (&self.audit, authz::request()) else {
            return;
        };
        if matches!(outcome, Err(OmError::NotLeader { .. })) {
            return;
        }
        self.audit_outcome(&ctx, crate::apply::ops::target(op), outcome);
    }

    /// Audits the outcome of an administrative request (membership changes,
    /// leader transfer) made in the current request.
    pub fn audit_admin<T>(&self, resource: String, outcome: &Result<T, OmError>) {
        // A refusal was audited where it was decided.
        if matches!(outcome, Err(OmError::Denied { .. })) {
            return;
        }
        if let (Some(_), Some(ctx)) = (&self.audit, authz::request()) {
            self.audit_outcome(&ctx, resource, outcome);
        }
    }

    fn audit_outcome<T>(&self, ctx: &RequestCtx, resource: String, outcome: &Result<T, OmError>) {
        let (result, right, refusal) = match outcome {
            Ok(_) => ("OK".to_string(), String::new(), false),
            Err(OmError::Denied { right, .. }) => {
                ("ACCESS_DENIED".to_string(), right.clone(), true)
            }
            Err(e) => (e.reason().to_string(), String::new(), false),
        };
        self.audit_event(ctx, resource, result, right, refusal);
    }

    pub(super) fn audit_refusal(&self, ctx: &RequestCtx, resource: &str, e: &OmError) {
        let right = match e {
            OmError::Denied { right, .. } => right.clone(),
            _ => String::new(),
        };
        self.audit_event(
            ctx,
            resource.to_string(),
            e.reason().to_string(),
            right,
            true,
        );
    }

    /// Audits what the lifecycle scanner did to `bucket` for the principal
    /// that configured its rules (`by`; none when authentication was off).
    pub fn audit_lifecycle(&self, bucket: String, by: Option<&Caller>, detail: String) {
        let Some(log) = &self.audit else { return };
        log.record(Event {
            time_ms: self.now_ms(),
            request_id: String::new(),
            principal: by.map(|c| c.user.clone()).unwrap_or_default(),
            via: "lifecycle",
            impersonated_user: String::new(),
            operation: "LifecycleExpiration".to_string(),
            resource: bucket,
            result: "OK".to_string(),
            right: String::new(),
            detail,
            refusal: false,
        });
    }

    /// Whether `--admins` names `user` (as the leader decides for commands
    /// it proposes on someone's behalf).
    pub fn configured_admin(&self, user: &str) -> bool {
        self.policy
            .as_ref()
            .is_some_and(|p| p.admins.contains(user))
    }

    fn audit_event(
        &self,
        ctx: &RequestCtx,
        resource: String,
        result: String,
        right: String,
        refusal: bool,
    ) {
        let Some(log) = &self.audit else { return };
        log.record(Event {
            time_ms: self.now_ms(),
            request_id: ctx.request_id.clone(),
            principal: ctx.principal.name.clone(),
            via: ctx.principal.via,
            impersonated_user: ctx
                .impersonate
                .as_ref()
                .map(|i| i.user.clone())
                .unwrap_or_default(),
            operation: ctx.operation.clone(),
            resource,
            result,
            right,
            detail: String::new(),
            refusal,
        });
    }
}
