//! InitCluster (rules 8): names the cluster once. The first id applied stays;
//! a later one (a second leader that proposed before it saw the first)
//! changes nothing.

use om_proto::store::{ClusterIdRecord, CommandResult, Empty, InitCluster, command_result};
use om_raft_store::EntryWrites;

use super::{Ctx, ok};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, ClusterIdTable};

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
