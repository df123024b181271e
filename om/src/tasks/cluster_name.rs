//! Naming a new cluster: its first leader proposes the cluster id.

use std::sync::Arc;
use std::time::Duration;

use om_proto::store::command::Op;
use tokio::sync::watch;

use crate::service::{OmService, WriteId};

/// On the leader of a cluster that has no id yet (a new cluster, or one
/// created before ids existed): proposes one. Ends once this node holds it.
pub async fn name_cluster(
    svc: Arc<OmService>,
    id: Arc<crate::cluster_id::ClusterId>,
    mut stop: watch::Receiver<bool>,
) {
    while id.get().is_none() {
        if svc.raft().is_leader() {
            let op = Op::InitCluster(om_proto::store::InitCluster {
                cluster_id: crate::cluster_id::generate(),
            });
            match svc.propose_here(WriteId::default(), op).await {
                Ok(_) => continue,
                Err(e) => tracing::debug!(error = %e, "cluster id not proposed"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
    if let Some(id) = id.get() {
        tracing::info!(cluster_id = %id, "cluster id");
    }
}
