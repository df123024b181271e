//! Online detection of replicas that diverged.
//!
//! Every replica keeps a digest of its applied state at every applied index
//! (raft-store's `digest`: a SHA-256 chain over each entry's log id and the
//! writes it staged), stored with the applied state and carried by
//! snapshots. Replicas that applied the same entries to the same state hold
//! equal digests; a different entry under one log id, or a nondeterministic
//! apply, makes them differ from that index on, for good.
//!
//! Each node compares itself with the other voters (`check_once`):
//! periodically (`--divergence-check-interval-ms`) and on demand
//! (`VerifyReplicas`, `omctl cluster verify`). It learns their applied
//! indexes, picks the newest index all of them applied that it still knows a
//! digest for, and asks for their digests there. When a majority of the
//! voters holds one digest and this node another, this node is the one that
//! diverged: it finds the first index where it differs from a member of the
//! majority, writes the `DIVERGED` marker into its data directory (so a
//! restart does not forget), and from then on serves no read or write,
//! refuses votes and leadership, steps down if it leads, and reports
//! not-ready, until an operator rebuilds it (docs/operations.md, "A replica diverged":
//! an empty data directory, which the member's rejoin fills from a
//! snapshot). A node that agrees with the majority logs which members differ.
//! Without a majority (members lagging or unreachable, or a 2-2 split) it
//! logs the disagreement and decides nothing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use om_proto::raft::raft_peer_client::RaftPeerClient;
use om_proto::raft::{IndexDigest, StateDigestRequest, StateDigestResponse};
use om_raft_store::Raft;
use om_raft_store::digest::{ApplyFaults, CHECKPOINT_EVERY, Digest, Digests};
use om_raft_store::pins::Pins;
use openraft::async_runtime::WatchReceiver;

use crate::error::OmError;

/// The marker a diverged node leaves in its data directory.
pub const MARKER: &str = "DIVERGED";

/// Longest wait for one member's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// This node's view of its own divergence.
pub struct Divergence {
    node_id: u64,
    digests: Digests,
    marker: PathBuf,
    diverged: AtomicBool,
    why: Mutex<String>,
    faults: Arc<ApplyFaults>,
    tls: Option<Arc<om_tls::ClientTls>>,
    pins: Arc<Pins>,
}

/// What one member said in a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDigest {
    pub node_id: u64,
    pub applied_index: u64,
    /// At the compared index; `None` if it did not answer or no longer knows it.
    pub digest: Option<Digest>,
    /// The member holds the majority's digest (false when there is none).
    pub agrees: bool,
    pub diverged: bool,
    /// Why it could not be asked, if it could not.
    pub error: Option<String>,
}

/// The outcome of one comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The index compared (0: nothing to compare yet).
    pub index: u64,
    /// Every voter, this node included.
    pub members: Vec<MemberDigest>,
    /// A majority of the voters holds the same digest at `index`.
    pub majority: bool,
    /// Every voter answered with the same digest.
    pub all_agree: bool,
    /// How many different digests the members answered with.
    pub distinct: usize,
}

impl Divergence {
    /// Reads the marker a previous run may have left in `data_dir`.
    pub fn open(
        node_id: u64,
        data_dir: &Path,
        digests: Digests,
        pins: Arc<Pins>,
        faults: Arc<ApplyFaults>,
        tls: Option<Arc<om_tls::ClientTls>>,
    ) -> std::io::Result<Arc<Divergence>> {
        let marker = data_dir.join(MARKER);
        let why = match std::fs::read_to_string(&marker) {
            Ok(s) => Some(s.trim().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if let Some(w) = &why {
            tracing::error!(
                marker = %marker.display(),
                why = %w,
                "this replica diverged before it stopped: it serves nothing until it is \
                 rebuilt (docs/operations.md, \"A replica diverged\")"
            );
        }
        crate::metrics::replica_diverged(why.is_some());
        Ok(Arc::new(Divergence {
            node_id,
            digests,
            marker,
            diverged: AtomicBool::new(why.is_some()),
            why: Mutex::new(why.unwrap_or_default()),
            faults,
            tls,
            pins,
        }))
    }

    /// Why this node diverged, if it did.
    pub fn diverged(&self) -> Option<String> {
        self.diverged
            .load(Ordering::Acquire)
            .then(|| self.why.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    /// Refuses to serve once diverged.
    pub fn check_serving(&self) -> Result<(), OmError> {
        match self.diverged() {
            None => Ok(()),
            Some(why) => Err(OmError::Diverged(format!(
                "node {} diverged from the other members ({why}); it serves nothing until \
                 it is rebuilt",
                self.node_id
            ))),
        }
    }

    /// Test-only: makes this replica apply the next `n` commands differently.
    pub fn inject(&self, n: u64) {
        self.faults.perturb.fetch_add(n, Ordering::Relaxed);
    }

    pub fn digests(&self) -> &Digests {
        &self.digests
    }

    /// Records that this node diverged: the marker first (synced), so a
    /// crash right after still remembers it.
    fn mark(&self, why: String) {
        tracing::error!(
            why = %why,
            "this replica's state differs from the majority's: it stops serving, refuses \
             leadership and reports not-ready until it is rebuilt (docs/operations.md, \"A replica diverged\")"
        );
        if let Err(e) = write_marker(&self.marker, &why) {
            tracing::error!(error = %e, "could not write the divergence marker");
        }
        *self.why.lock().unwrap_or_else(|e| e.into_inner()) = why;
        self.diverged.store(true, Ordering::Release);
        crate::metrics::replica_diverged(true);
    }

    /// Answers a member's question (the `StateDigest` RPC).
    pub fn answer(&self, req: &StateDigestRequest) -> Result<StateDigestResponse, String> {
        let applied = self.digests.applied().map_err(|e| e.to_string())?;
        let digest = if req.index == 0 {
            None
        } else {
            self.digests.at(req.index).map_err(|e| e.to_string())?
        };
        let known = if req.with_known {
            self.digests
                .known()
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|(index, d)| IndexDigest {
                    index,
                    digest: d.to_vec(),
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(StateDigestResponse {
            node_id: self.node_id,
            applied_index: applied.map_or(0, |a| a.0),
            digest: digest.map(|d| d.to_vec()).unwrap_or_default(),
            diverged: self.diverged.load(Ordering::Acquire),
            known,
        })
    }

    /// This replica's pinned states (`VerifyReplicas` with tables).
    pub fn pins(&self) -> &Arc<Pins> {
        &self.pins
    }

    /// This node's id.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// A client of the member whose Raft port is `addr`; each call is
    /// bounded by `timeout`.
    pub async fn peer(
        &self,
        addr: &str,
        timeout: Duration,
    ) -> Result<RaftPeerClient<tonic::transport::Channel>, String> {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(ASK_TIMEOUT)
            .timeout(timeout)
            .connect_with_connector(om_tls::Connector::new(self.tls.clone()))
            .await
            .map_err(|e| format!("{addr}: {e}"))?;
        Ok(RaftPeerClient::new(ch).max_decoding_message_size(16 << 20))
    }

    async fn ask(
        &self,
        addr: &str,
        req: StateDigestRequest,
    ) -> Result<StateDigestResponse, String> {
        let mut c = self.peer(addr, ASK_TIMEOUT).await?;
        Ok(c.state_digest(req)
            .await
            .map_err(|s| format!("{addr}: {}", s.message()))?
            .into_inner())
    }

    /// Compares this node's digest with every other voter's at the newest
    /// index all of them applied; marks this node diverged when a majority
    /// holds another digest.
    pub async fn check_once(&self, raft: &Raft) -> Result<Report, OmError> {
        let m = raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership().clone();
        let peers: Vec<(u64, String)> = membership
            .voter_ids()
            .filter(|id| *id != self.node_id)
            .filter_map(|id| membership.get_node(&id).map(|n| (id, n.raft_addr.clone())))
            .collect();
        let voters = peers.len() + usize::from(membership.voter_ids().any(|v| v == self.node_id));
        let mine = self
            .digests
            .applied()
            .map_err(|e| OmError::Internal(format!("state digest: {e}")))?;
        let my_applied = mine.map_or(0, |a| a.0);

        // Round 1: how far every member applied.
        let ask_all = |index: u64, with_known: bool| {
            let peers = peers.clone();
            async move {
                futures::future::join_all(peers.iter().map(|(id, addr)| async move {
                    let req = StateDigestRequest {
                        node_id: self.node_id,
                        index,
                        with_known,
                    };
                    (*id, self.ask(addr, req).await)
                }))
                .await
            }
        };
        let first = ask_all(0, false).await;
        let lowest = first
            .iter()
            .filter_map(|(_, r)| r.as_ref().ok().map(|r| r.applied_index))
            .chain([my_applied])
            .min()
            .unwrap_or(0);
        let index = self.comparable_index(lowest)?;
        let mut members = vec![MemberDigest {
            node_id: self.node_id,
            applied_index: my_applied,
            digest: self.digests.at(index).ok().flatten(),
            agrees: false,
            diverged: self.diverged.load(Ordering::Acquire),
            error: None,
        }];
        // Round 2: their digests at that index.
        let second = if index == 0 {
            first
        } else {
            ask_all(index, false).await
        };
        for (id, r) in second {
            members.push(match r {
                Ok(r) => MemberDigest {
                    node_id: id,
                    applied_index: r.applied_index,
                    digest: (index > 0)
                        .then(|| om_raft_store::digest::from_bytes(&r.digest).ok())
                        .flatten()
                        .filter(|_| !r.digest.is_empty()),
                    agrees: false,
                    diverged: r.diverged,
                    error: None,
                },
                Err(e) => MemberDigest {
                    node_id: id,
                    applied_index: 0,
                    digest: None,
                    agrees: false,
                    diverged: false,
                    error: Some(e),
                },
            });
        }
        let mut report = decide(index, voters, members);
        record(&report);
        if index == 0 || report.all_agree {
            return Ok(report);
        }
        let me = &report.members[0];
        let differing: Vec<u64> = report
            .members
            .iter()
            .filter(|m| m.digest.is_some() && !m.agrees)
            .map(|m| m.node_id)
            .collect();
        if !report.majority {
            if report.distinct > 1 {
                tracing::error!(
                    index,
                    members = ?report
                        .members
                        .iter()
                        .map(|m| (m.node_id, m.digest.map(hex::encode)))
                        .collect::<Vec<_>>(),
                    "replica digests differ with no majority: nothing decided"
                );
            }
            return Ok(report);
        }
        if me.agrees {
            if !differing.is_empty() {
                tracing::error!(
                    index,
                    nodes = ?differing,
                    "members' state differs from the majority's (they stop serving once they find out)"
                );
            }
            return Ok(report);
        }
        if me.digest.is_none() {
            return Ok(report);
        }
        // This node differs from the majority: find where.
        let witness = report
            .members
            .iter()
            .find(|m| m.agrees)
            .map(|m| m.node_id)
            .expect("a majority holds another digest");
        let first_diff = match peers.iter().find(|(id, _)| *id == witness) {
            Some((_, addr)) => {
                let req = StateDigestRequest {
                    node_id: self.node_id,
                    index: 0,
                    with_known: true,
                };
                match self.ask(addr, req).await {
                    Ok(r) => {
                        let theirs: Vec<(u64, Vec<u8>)> =
                            r.known.into_iter().map(|k| (k.index, k.digest)).collect();
                        let ours = self.digests.known().unwrap_or_default();
                        first_difference(&ours, &theirs)
                    }
                    Err(_) => None,
                }
            }
            None => None,
        };
        let at = match first_diff {
            Some((Some(agreed), diff)) if agreed + 1 == diff => {
                format!("first differing index {diff}")
            }
            Some((Some(agreed), diff)) => {
                format!("first differing index between {} and {diff}", agreed + 1)
            }
            Some((None, diff)) => format!("first differing index at or before {diff}"),
            None => format!("differs at index {index}"),
        };
        let why = format!(
            "state digest at index {index} differs from node {witness} and the majority; {at}"
        );
        self.mark(why);
        report.members[0].diverged = true;
        Ok(report)
    }

    /// The newest index at or below `lowest` this node knows a digest for
    /// that members further ahead can still answer for: `lowest` itself
    /// while it is recent, else its checkpoint.
    fn comparable_index(&self, lowest: u64) -> Result<u64, OmError> {
        if lowest == 0 {
            return Ok(0);
        }
        let known = self
            .digests
            .known()
            .map_err(|e| OmError::Internal(format!("state digests: {e}")))?;
        if known.iter().any(|(i, _)| *i == lowest) {
            return Ok(lowest);
        }
        let checkpoint = lowest - lowest % CHECKPOINT_EVERY;
        Ok(if known.iter().any(|(i, _)| *i == checkpoint) {
            checkpoint
        } else {
            0
        })
    }
}

/// The outcome of one replica digest comparison: `om_replica_divergence` is
/// the number of members whose digest differed from the others' at the last
/// compared index (0: all that answered agree; with no majority, every
/// member's digest counts as differing), alerted on when above 0.
fn record(r: &Report) {
    if r.index == 0 {
        return;
    }
    let differing = if r.distinct <= 1 {
        0
    } else if r.majority {
        r.members
            .iter()
            .filter(|m| m.digest.is_some() && !m.agrees)
            .count()
    } else {
        r.members.iter().filter(|m| m.digest.is_some()).count()
    };
    metrics::gauge!("om_replica_divergence").set(differing as f64);
    metrics::gauge!("om_replica_digest_compared_index").set(r.index as f64);
    let result = match (r.distinct, r.majority) {
        (0 | 1, _) => "match",
        (_, true) => "mismatch",
        (_, false) => "undecided",
    };
    metrics::counter!("om_replica_digest_checks_total", "result" => result).increment(1);
}

/// Groups the members by digest and finds the majority's, if any.
fn decide(index: u64, voters: usize, mut members: Vec<MemberDigest>) -> Report {
    let mut counts: Vec<(Digest, usize)> = Vec::new();
    for d in members.iter().filter_map(|m| m.digest) {
        match counts.iter_mut().find(|(x, _)| *x == d) {
            Some((_, n)) => *n += 1,
            None => counts.push((d, 1)),
        }
    }
    let need = voters / 2 + 1;
    let majority = counts.iter().find(|(_, n)| *n >= need).map(|(d, _)| *d);
    for m in &mut members {
        m.agrees = majority.is_some() && m.digest == majority;
    }
    let all_agree = index > 0 && counts.len() == 1 && members.iter().all(|m| m.digest.is_some());
    Report {
        index,
        members,
        majority: majority.is_some(),
        all_agree,
        distinct: counts.len(),
    }
}

/// The last index at which both lists agree before the first where they
/// differ, and that first index (only indexes both know are compared).
fn first_difference(
    ours: &[(u64, Digest)],
    theirs: &[(u64, Vec<u8>)],
) -> Option<(Option<u64>, u64)> {
    let mut agreed = None;
    let mut j = 0;
    for (i, d) in ours {
        while j < theirs.len() && theirs[j].0 < *i {
            j += 1;
        }
        if j < theirs.len() && theirs[j].0 == *i {
            if theirs[j].1.as_slice() == d.as_slice() {
                agreed = Some(*i);
            } else {
                return Some((agreed, *i));
            }
        }
    }
    None
}

fn write_marker(path: &Path, why: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(why.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, d: Option<u8>) -> MemberDigest {
        MemberDigest {
            node_id: id,
            applied_index: 10,
            digest: d.map(|b| [b; 32]),
            agrees: false,
            diverged: false,
            error: None,
        }
    }

    #[test]
    fn the_majority_decides_who_diverged() {
        let r = decide(
            10,
            3,
            vec![member(1, Some(1)), member(2, Some(2)), member(3, Some(2))],
        );
        assert!(r.majority && !r.all_agree);
        assert_eq!(
            r.members.iter().map(|m| m.agrees).collect::<Vec<_>>(),
            [false, true, true]
        );
        let r = decide(
            10,
            3,
            vec![member(1, Some(1)), member(2, Some(1)), member(3, Some(1))],
        );
        assert!(r.majority && r.all_agree);
        // Two of three answered and differ: nobody is decided.
        let r = decide(
            10,
            3,
            vec![member(1, Some(1)), member(2, Some(2)), member(3, None)],
        );
        assert!(!r.majority && !r.all_agree);
        assert!(r.members.iter().all(|m| !m.agrees));
        // A 2-2 split of four voters: no majority.
        let r = decide(
            10,
            4,
            vec![
                member(1, Some(1)),
                member(2, Some(1)),
                member(3, Some(2)),
                member(4, Some(2)),
            ],
        );
        assert!(!r.majority);
        // Agreement of those who answered is not all voters agreeing.
        let r = decide(
            10,
            3,
            vec![member(1, Some(1)), member(2, Some(1)), member(3, None)],
        );
        assert!(r.majority && !r.all_agree);
    }

    #[test]
    fn the_first_difference_is_found_on_common_indexes() {
        let ours: Vec<(u64, Digest)> = vec![
            (1024, [1; 32]),
            (2048, [2; 32]),
            (2049, [3; 32]),
            (2050, [9; 32]),
        ];
        let theirs: Vec<(u64, Vec<u8>)> = vec![
            (1024, vec![1; 32]),
            (2048, vec![2; 32]),
            (2049, vec![3; 32]),
            (2050, vec![4; 32]),
            (2051, vec![5; 32]),
        ];
        assert_eq!(first_difference(&ours, &theirs), Some((Some(2049), 2050)));
        let theirs_gap: Vec<(u64, Vec<u8>)> = vec![(1024, vec![1; 32]), (2050, vec![4; 32])];
        assert_eq!(
            first_difference(&ours, &theirs_gap),
            Some((Some(1024), 2050))
        );
        assert_eq!(first_difference(&ours, &theirs[..3]), None);
        let differ_first: Vec<(u64, Vec<u8>)> = vec![(1024, vec![7; 32])];
        assert_eq!(first_difference(&ours, &differ_first), Some((None, 1024)));
    }

    #[test]
    fn the_marker_survives_and_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(MARKER);
        write_marker(&p, "state digest at index 7 differs").unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap().trim(),
            "state digest at index 7 differs"
        );
    }
}
