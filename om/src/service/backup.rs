//! Backups: a copy of this node's store at one applied index, read file by
//! file (see `crate::backup`).

use om_proto::v1::{
    BackupFile, BackupFileChunk, BackupMember, StartBackupResponse, TableDigestSummary,
};
use tokio::sync::mpsc;

use super::{Consistency, OmService};
use crate::error::OmError;

impl OmService {
    fn backups(&self) -> Result<&std::sync::Arc<crate::backup::Backups>, OmError> {
        self.backups
            .as_ref()
            .ok_or_else(|| OmError::Unavailable("this node takes no backups".into()))
    }

    /// Takes a copy of the store and describes it. On the leader the copy
    /// holds every write acknowledged before the call (a ReadIndex barrier
    /// first); on a follower, what it applied, which its stale-read check
    /// bounds (at most `--max-staleness-ms` since it heard from a leader).
    /// Admins only.
    pub async fn start_backup(&self) -> Result<StartBackupResponse, OmError> {
        self.require_admin()?;
        let backups = self.backups()?.clone();
        let barrier = if self.raft.is_leader() {
            Consistency::Linearizable
        } else {
            Consistency::Stale { max_ms: 0 }
        };
        self.read_barrier(barrier).await?;
        let time_ms = self.now_ms();
        let db = self.db.clone();
        let (session, d) =
            crate::backup::in_background("om-backup-copy", move || backups.start(&db)).await??;
        let (applied_index, applied_term, applied_leader) = d.applied.map_or((0, 0, 0), |a| {
            (a.index, a.leader_id.term, a.leader_id.node_id)
        });
        let membership = d.membership.membership();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        Ok(StartBackupResponse {
            session,
            cluster_id: self.cluster_id().map(|c| c.to_string()).unwrap_or_default(),
            node_id: self.node_id,
            applied_index,
            applied_term,
            applied_leader,
            members: membership
                .nodes()
                .map(|(id, n)| BackupMember {
                    node_id: *id,
                    raft_addr: n.raft_addr.clone(),
                    grpc_addr: n.grpc_addr.clone(),
                    voter: voters.contains(id),
                })
                .collect(),
            tables: d
                .tables
                .iter()
                .map(|t| TableDigestSummary {
                    table: t.name.clone(),
                    entries: t.entries,
                    digest: hex::encode(t.digest),
                })
                .collect(),
            files: d
                .files
                .iter()
                .map(|(name, bytes)| BackupFile {
                    name: name.clone(),
                    bytes: *bytes,
                })
                .collect(),
            store_identity: d.identity,
            time_ms,
        })
    }

    /// Streams one file of a copy. Admins only.
    pub fn read_backup_file(
        &self,
        session: &str,
        name: &str,
        bytes_per_second: u64,
    ) -> Result<mpsc::Receiver<Result<BackupFileChunk, OmError>>, OmError> {
        self.require_admin()?;
        self.backups()?.stream(session, name, bytes_per_second)
    }

    /// Releases a copy. Admins only.
    pub async fn finish_backup(&self, session: &str) -> Result<(), OmError> {
        self.require_admin()?;
        let backups = self.backups()?.clone();
        let session = session.to_string();
        tokio::task::spawn_blocking(move || backups.finish(&session))
            .await
            .map_err(|e| OmError::Internal(format!("backup task: {e}")))?
    }
}
