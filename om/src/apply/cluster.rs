//! InitCluster (rules 8): names the cluster once. The first id applied stays;
//! a later one (a second leader that proposed before it saw the first)
//! changes nothing.

use om_proto::store::{ClusterIdRecord, CommandResult, Empty, InitCluster, command_result};
use om_raft_store::EntryWrites;

use super::ops::Operation;
use super::{Ctx, ok};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, ClusterIdTable};

impl Operation for om_proto::store::InitCluster {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
    }

    fn target(&self) -> String {
        Resource::Cluster.to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        crate::cluster_id::check(&self.cluster_id)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.init_cluster(b, self)
    }
}

impl Operation for om_proto::store::VerifyMark {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
    }

    fn target(&self) -> String {
        Resource::Cluster.to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        Ok(())
    }

    fn apply(&self, _ctx: &Ctx<'_>, _b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        // Changes nothing; the store pins the state after it (`pins_state`).
        Ok(CommandResult::default())
    }
}

impl Ctx<'_> {
    pub(super) fn init_cluster(
        &self,
        b: &mut EntryWrites<'_>,
        c: &InitCluster,
    ) -> Result<CommandResult, OmError> {
        if !crate::rules::INIT_CLUSTER.holds(self.rules) {
            return Err(OmError::invalid(
                "UNSUPPORTED_COMMAND",
                "op",
                "cluster ids need apply rules 8",
            ));
        }
        if table::get::<ClusterIdTable>(self.db, keys::CLUSTER_ID_KEY)?.is_none() {
            let mut rec = ClusterIdRecord {
                format: 0,
                cluster_id: c.cluster_id.clone(),
                index: self.index,
            };
            table::put::<ClusterIdTable>(self.db, b, keys::CLUSTER_ID_KEY, &mut rec)?;
        }
        ok(command_result::Result::Empty(Empty {}))
    }
}
