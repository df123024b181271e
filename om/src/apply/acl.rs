//! ACL changes (`SetAcl`) on the cluster, a volume or a bucket. Who may make
//! them is checked before the handler runs (`authz::check_rights`).

use om_proto::store::{AclResult, CommandResult, SetAcl, command_result};
use om_raft_store::EntryWrites;

use super::limits;
use super::ops::Operation;
use super::{Ctx, ok};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, BucketTable, SettingsTable, VolumeTable};

impl Operation for om_proto::store::SetAcl {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        match Resource::of(&self.volume, &self.bucket) {
            Resource::Cluster => vec![(Resource::Cluster, authz::ALL)],
            r => vec![(r, authz::WRITE_ACL)],
        }
    }

    fn target(&self) -> String {
        Resource::of(&self.volume, &self.bucket).to_string()
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        if !self.volume.is_empty() {
            limits::name("volume", &self.volume)?;
        }
        if !self.bucket.is_empty() {
            limits::name("bucket", &self.bucket)?;
        }
        if self.volume.is_empty() && !self.bucket.is_empty() {
            return Err(OmError::invalid(
                "MISSING_VOLUME",
                "volume",
                "a bucket's ACL names its volume",
            ));
        }
        crate::authz::check_grants(
            crate::authz::Resource::of(&self.volume, &self.bucket),
            &self.grants,
            rules,
        )?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.set_acl(b, self)
    }
}

impl Ctx<'_> {
    pub(super) fn set_acl(
        &self,
        b: &mut EntryWrites<'_>,
        c: &SetAcl,
    ) -> Result<CommandResult, OmError> {
        if c.mode > 2 {
            return Err(OmError::invalid(
                "INVALID_ACL_MODE",
                "mode",
                format!("unknown ACL mode {}", c.mode),
            ));
        }
        let r = Resource::of(&c.volume, &c.bucket);
        authz::check_grants(r, &c.grants, self.rules)?;
        let merged = |old: &[om_proto::store::AclGrant]| {
            let new = authz::merge(old, c.mode, &c.grants);
            authz::check_grants(r, &new, self.rules).map(|()| new)
        };
        let (owner, grants) = match r {
            Resource::Cluster => {
                let mut rec = table::get::<SettingsTable>(self.db, keys::CLUSTER_ACL_KEY)?
                    .unwrap_or_default();
                rec.grants = merged(&rec.grants)?;
                let grants = rec.grants.clone();
                table::put::<SettingsTable>(self.db, b, keys::CLUSTER_ACL_KEY, &mut rec)?;
                (String::new(), grants)
            }
            Resource::Volume(v) => {
                let mut vol = self.volume(v, "volume")?;
                vol.acl = merged(&vol.acl)?;
                vol.modification_time_ms = self.now;
                vol.update_id = self.index;
                table::put::<VolumeTable>(self.db, b, &keys::volume_key(v), &mut vol)?;
                (vol.owner, vol.acl)
            }
            Resource::Bucket(v, name) => {
                let mut bucket = self.bucket(v, name)?;
                bucket.acl = merged(&bucket.acl)?;
                bucket.modification_time_ms = self.now;
                bucket.update_id = self.index;
                table::put::<BucketTable>(self.db, b, &keys::bucket_key(v, name), &mut bucket)?;
                (bucket.owner, bucket.acl)
            }
        };
        ok(command_result::Result::Acl(AclResult { owner, grants }))
    }
}
