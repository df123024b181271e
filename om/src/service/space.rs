//! Writes a data volume short of space cannot take. A write that adds data
//! is refused (`RESOURCE_EXHAUSTED`, `DISK_FULL`) when the leader's volume
//! is below `--min-free-bytes` or fewer than a majority of the voters have
//! that much free, as they last said (`om_raft_store::disk`); any write is
//! refused when the leader's volume, or a majority's, is full (below half
//! the minimum), since a full member takes no entries. So RocksDB never runs
//! out in the middle of a write, and a write that could not commit is
//! refused at once instead of waiting out its deadline. A leader whose own
//! volume runs short hands leadership to a voter with room
//! (`hand_over_for_space`).

use om_proto::store::command::Op;
use om_raft_store::disk::Space;
use openraft::async_runtime::WatchReceiver;

use super::OmService;
use crate::error::OmError;

impl OmService {
    /// Refuses `op` if this cluster lacks the room to take it (see above).
    pub fn check_space(&self, op: &Op) -> Result<(), OmError> {
        let adds = crate::apply::ops::adds_data(op);
        let short = |s: Space| {
            if adds {
                s != Space::Ok
            } else {
                s == Space::Full
            }
        };
        let disk = self.disk();
        let (free, min) = (disk.free(), disk.min_free());
        if short(disk.space()) {
            crate::metrics::proposal_failed("disk_full");
            let message = if adds {
                format!(
                    "node {}'s data volume has {free} bytes free, below --min-free-bytes {min}: \
                     writes that add data are refused until space is freed (deletes go on); \
                     retry later",
                    self.node_id
                )
            } else {
                format!(
                    "node {}'s data volume has {free} bytes free, below half of \
                     --min-free-bytes {min}: no write is taken until space is freed; retry later",
                    self.node_id
                )
            };
            return Err(OmError::exhausted("DISK_FULL", "", message));
        }
        let shorts = disk.short_peers();
        if !shorts.iter().any(|(_, s)| short(*s)) {
            return Ok(());
        }
        let (voters, short_voters): (usize, Vec<String>) = {
            let metrics = self.raft.metrics();
            let m = metrics.borrow_watched();
            let membership = m.membership_config.membership();
            let voters: Vec<u64> = membership.voter_ids().collect();
            let short_voters = shorts
                .iter()
                .filter(|(id, s)| short(*s) && voters.contains(id))
                .map(|(id, s)| format!("node {id} ({})", s.as_str()))
                .collect();
            (voters.len(), short_voters)
        };
        if voters - short_voters.len() > voters / 2 {
            return Ok(());
        }
        crate::metrics::proposal_failed("disk_full");
        Err(OmError::exhausted(
            "DISK_FULL",
            "",
            format!(
                "{} of {voters} voters lack room for this write ({}): a majority could not take \
                 it until space is freed{}; retry later",
                short_voters.len(),
                short_voters.join(", "),
                if adds { " (deletes go on)" } else { "" }
            ),
        ))
    }

    /// When this node leads with its volume short of space, hands
    /// leadership to the most caught-up voter that said it has room, so
    /// writes go on there. Returns the new leader, if one took over.
    pub async fn hand_over_for_space(&self) -> Option<u64> {
        let disk = self.disk();
        let leads = self.raft.metrics().borrow_watched().state == openraft::ServerState::Leader;
        if disk.space() == Space::Ok || !leads {
            return None;
        }
        let to = self
            .step_down_to(super::HANDOVER_TIMEOUT, |v| disk.peer(v) == Space::Ok)
            .await;
        if let Some(to) = to {
            crate::metrics::leadership_handed_over("disk_space");
            tracing::warn!(
                to,
                free = disk.free(),
                min_free = disk.min_free(),
                "leadership handed over: this member's data volume is short of space"
            );
        }
        to
    }
}
