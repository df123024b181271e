//! Membership changes, leadership transfer and replica verification.

use std::collections::BTreeSet;
use std::time::Duration;

use om_proto::store::{Command, command::Op};
use om_raft_store::OmNode;
use openraft::ChangeMembers;
use openraft::async_runtime::WatchReceiver;

use super::{OmService, write_err};
use crate::error::OmError;

/// Most members (voters and learners) a cluster takes. Raft wants a handful
/// of voters; the cap bounds the membership every log entry and snapshot
/// carries and the cluster status every client reads (with addresses of at
/// most `validate::MAX_ADDRESS_BYTES`, a few tens of KiB).
pub const MAX_MEMBERS: usize = 64;

/// Whether a cluster of `members` nodes can take one more; a node already a
/// member is always welcome (it is being promoted or re-added).
pub fn member_room(members: usize, already: bool) -> Result<(), OmError> {
    if !already && members >= MAX_MEMBERS {
        return Err(OmError::precondition(
            "TOO_MANY_MEMBERS",
            "node_id",
            format!("the cluster has {members} members; at most {MAX_MEMBERS} are allowed"),
        ));
    }
    Ok(())
}

/// Longest a stopping leader waits for another voter to take over.
pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(5);

impl OmService {
    /// Adds `id` as a learner, waits until it has caught up, then promotes it
    /// to voter unless `learner_only`.
    pub async fn add_node(&self, id: u64, node: OmNode, learner_only: bool) -> Result<(), OmError> {
        self.require_admin()?;
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        if membership.voter_ids().any(|v| v == id) {
            return Err(OmError::exists(
                "NODE_ALREADY_MEMBER",
                "node_id",
                format!("node {id} is already a voter"),
            ));
        }
        member_room(
            membership.nodes().count(),
            membership.get_node(&id).is_some(),
        )?;
        if let Some(existing) = membership.get_node(&id)
            && *existing != node
        {
            return Err(OmError::exists(
                "NODE_ADDRESS_CONFLICT",
                "node_id",
                format!("node {id} is already a learner at {existing}"),
            ));
        }
        self.check_joiner(id, &node).await?;
        self.raft
            .add_learner(id, node, true)
            .await
            .map_err(write_err)?;
        if !learner_only {
            self.raft
                .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
                .await
                .map_err(write_err)?;
        }
        Ok(())
    }

    /// Refuses to add a node whose store holds another cluster's state (or
    /// state of no known cluster): replicating to it would mix two histories.
    /// The node must be running, to be asked.
    pub(super) async fn check_joiner(&self, id: u64, node: &OmNode) -> Result<(), OmError> {
        let ours = self.cluster_id();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let view = loop {
            match crate::peers::peer_state(&node.raft_addr, self.node_id, self.peer_tls.as_ref())
                .await
            {
                Ok(v) => break v,
                Err(e) if std::time::Instant::now() >= deadline => {
                    return Err(OmError::Unavailable(format!(
                        "node {id} at {} did not say what its store holds ({e}); start it \
                         (with --join) before adding it",
                        node.raft_addr
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        if view.node_id != id {
            return Err(OmError::precondition(
                "NODE_ID_MISMATCH",
                "node_id",
                format!(
                    "the node at {} is node {}, not {id}",
                    node.raft_addr, view.node_id
                ),
            ));
        }
        let foreign = match (&ours, view.cluster_id.is_empty()) {
            (Some(ours), false) => view.cluster_id != **ours,
            // A store with history but no cluster id: of a cluster that
            // never named itself, so not provably this one.
            (_, true) => view.has_history,
            (None, false) => true,
        };
        if foreign {
            return Err(OmError::precondition(
                "NODE_OF_ANOTHER_CLUSTER",
                "node_id",
                format!(
                    "node {id} holds state of cluster {:?}, not of this cluster ({}); wipe its \
                     data directory before adding it",
                    view.cluster_id,
                    ours.as_deref().unwrap_or("unnamed")
                ),
            ));
        }
        let incarnation = self.incarnation().map_or(0, |i| i.id());
        if view.fenced || (view.has_history && view.incarnation != incarnation) {
            return Err(OmError::precondition(
                "NODE_OF_ANOTHER_INCARNATION",
                "node_id",
                format!(
                    "node {id} holds the history of incarnation {} of this cluster{}, not of \
                     the current incarnation {incarnation}: wipe its data directory, start it \
                     empty with --join, and add it again",
                    view.incarnation,
                    if view.fenced {
                        " and serves nothing"
                    } else {
                        ""
                    }
                ),
            ));
        }
        Ok(())
    }

    /// Removes `id` from the cluster, voter or learner.
    pub async fn remove_node(&self, id: u64) -> Result<(), OmError> {
        self.require_admin()?;
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        if membership.get_node(&id).is_none() {
            return Err(OmError::not_found(
                "NODE_NOT_FOUND",
                "node_id",
                format!("node {id} is not a member"),
            ));
        }
        let change = if membership.voter_ids().any(|v| v == id) {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        self.raft
            .change_membership(change, false)
            .await
            .map_err(write_err)?;
        Ok(())
    }

    /// Hands leadership to voter `to` and waits until it leads.
    /// Compares this replica's state digest with every other voter's now
    /// (`divergence::Divergence::check_once`). Admins only.
    /// Compares the voters' state digests; with `tables`, also every table
    /// record by record at the index of a verification entry it proposes.
    pub async fn verify_replicas(
        &self,
        tables: bool,
    ) -> Result<
        (
            crate::divergence::Report,
            Option<om_proto::v1::TableVerification>,
        ),
        OmError,
    > {
        self.require_admin()?;
        let d = self
            .divergence
            .as_ref()
            .ok_or_else(|| OmError::Unavailable("replica digests are not tracked".into()))?;
        let report = d.check_once(&self.raft).await?;
        if !tables {
            return Ok((report, None));
        }
        let index = self.propose_verify_mark().await?;
        Ok((
            report,
            Some(crate::verify::compare(d, &self.raft, index).await),
        ))
    }

    /// Proposes a verification entry (`VerifyMark`) and returns its log index.
    pub(super) async fn propose_verify_mark(&self) -> Result<u64, OmError> {
        self.check_not_diverged()?;
        let cmd = Command {
            now_ms: self.now_ms(),
            op: Some(Op::VerifyMark(om_proto::store::VerifyMark {})),
            rules: crate::apply::RULES,
            caller: self.caller()?,
            ..Default::default()
        };
        let write = Box::pin(self.raft.client_write(cmd.into()));
        match tokio::time::timeout(self.request_timeout, write).await {
            Ok(Ok(resp)) => Ok(resp.log_id.index),
            Ok(Err(e)) => Err(write_err(e)),
            Err(_) => Err(OmError::Unavailable(format!(
                "the verification entry was not committed within {:?}",
                self.request_timeout
            ))),
        }
    }

    pub async fn transfer_leader(&self, to: u64, timeout: Duration) -> Result<(), OmError> {
        self.require_admin()?;
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        if !membership.voter_ids().any(|v| v == to) {
            return Err(OmError::not_found(
                "NODE_NOT_FOUND",
                "to",
                format!("node {to} is not a voter"),
            ));
        }
        if m.current_leader == Some(to) {
            return Ok(());
        }
        if m.state != openraft::ServerState::Leader {
            return Err(OmError::NotLeader {
                leader_id: m.current_leader,
                leader_addr: m
                    .current_leader
                    .and_then(|l| membership.get_node(&l).map(|n| n.grpc_addr.clone())),
            });
        }
        self.raft
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(|e| OmError::Unavailable(format!("raft stopped: {e}")))?;
        let deadline = tokio::time::Instant::now() + timeout;
        self.raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader == Some(to), "leadership transfer")
            .await
            .map_err(|e| OmError::Unavailable(format!("leadership did not move to {to}: {e}")))?;
        // The vote that names `to` arrives with its first append, a moment
        // before this node counts it as contact from a leader: until then
        // its status would say it knows no leader. Wait for that too (a
        // heartbeat at most), so the answer names the leader it reached.
        while self.heard_leader(&self.raft.metrics().borrow_watched().clone()) != Some(to) {
            if tokio::time::Instant::now() >= deadline {
                return Err(OmError::Unavailable(format!(
                    "leadership moved to {to}, and no append from it arrived since"
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    }

    /// When this node leads, hands leadership to the most caught-up other
    /// voter and waits (at most `timeout`) until it has taken over; what a
    /// stopping node does first, so writes pause for one transfer instead
    /// of an election timeout. Returns the new leader, if one took over.
    pub async fn step_down(&self, timeout: Duration) -> Option<u64> {
        self.step_down_to(timeout, |_| true).await
    }

    /// `step_down` to the most caught-up voter `eligible` admits.
    pub async fn step_down_to(
        &self,
        timeout: Duration,
        eligible: impl Fn(u64) -> bool,
    ) -> Option<u64> {
        let m = self.raft.metrics().borrow_watched().clone();
        if m.state != openraft::ServerState::Leader {
            return None;
        }
        let matched = |id: &u64| {
            m.replication
                .as_ref()
                .and_then(|r| r.get(id).cloned().flatten())
                .map_or(0, |l| l.index)
        };
        let to = m
            .membership_config
            .membership()
            .voter_ids()
            .filter(|v| *v != self.node_id && eligible(*v))
            .max_by_key(|v| (matched(v), std::cmp::Reverse(*v)))?;
        match self.transfer_leader(to, timeout).await {
            Ok(()) => Some(to),
            Err(e) => {
                tracing::warn!(to, error = %e, "leadership handover before stopping failed");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_is_capped_for_newcomers_only() {
        assert!(member_room(MAX_MEMBERS - 1, false).is_ok());
        assert!(member_room(MAX_MEMBERS, false).is_err());
        assert!(member_room(MAX_MEMBERS, true).is_ok());
    }
}
