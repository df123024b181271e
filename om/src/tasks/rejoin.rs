//! Admission of a configured member into Raft at start-up: when to
//! initialize a cluster, and how a member that lost its data directory
//! (a replaced disk) comes back without putting committed entries at risk.
//!
//! A member that restarts with its data is admitted at once. One started with
//! `--initial-cluster` on an empty data directory cannot tell a first boot
//! from a wiped disk by itself, and in Raft a wiped voter is dangerous: it
//! may have voted in a term and acknowledged entries it no longer remembers,
//! so its vote could count twice and a committed entry could end up on a
//! minority. So such a node first writes a marker file, then starts
//! **sealed**: its Raft port refuses Vote and TransferLeader RPCs and it does
//! not campaign (appends and snapshots are taken: they only ever add what a
//! leader holds). It asks the other members (`PeerState` on their Raft ports)
//! and `decide`s:
//!
//! - no member has a history (no entry past the initial membership) and every
//!   member answered: a first boot. The lowest id initializes the cluster,
//!   but only if no member holds any state at all; the others just open.
//! - some member has a history: the cluster exists and this node lost its
//!   part. It asks the leader to `Rejoin` it. If the leader recorded the node
//!   as holding entries it no longer has (its matched index) and still holds
//!   the entry at that index itself, openraft's replication to the node
//!   cannot resume (it keeps sending entries after the one the node lost; once
//!   the leader's log is purged past it, it sends a snapshot instead and needs
//!   no help). The node asks only after its log stayed empty for a few rounds
//!   (`STUCK_ROUNDS`), and the leader then hands leadership to the most
//!   up-to-date other voter, whose record of the node starts from scratch.
//!   The node then **catches up**,
//!   still refusing votes, until it has applied the leader's last log index as
//!   of the answer: it again holds every entry committed before it lost its
//!   data, and only then votes.
//! - otherwise (members missing, no leader yet) it waits and asks again.
//!
//! The marker records the catch-up target; a restart before admission finds
//! it and waits again, whatever entries arrived in between. If catching up
//! stalls, `/readyz` and the log say so and give the manual steps (remove
//! the member, add it back), which docs/operations.md lists ("A member lost its data directory").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use om_raft_store::{OmNode, Raft};
use openraft::async_runtime::WatchReceiver;
use prost::Message;
use tokio::sync::watch;

pub use crate::peers::PeerView;

/// Where this node stands; the Raft port's gate follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Does not vote until it knows whether the cluster exists.
    Sealed,
    /// Lost its data; does not vote until it has caught up.
    CatchingUp,
    /// A full member.
    Open,
    /// Restarted with its data; does not vote until a majority of its
    /// membership confirmed its incarnation (see `incarnation`).
    Verifying,
}

/// How this node was admitted, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It had data (or was told to `--join`): nothing to decide.
    Restarted,
    /// It initialized the cluster.
    Initialized,
    /// First boot of a cluster another member initializes.
    Fresh,
    /// It had lost its data and caught up to `target`; `reset` says whether
    /// the leader had to reset its replication to it.
    Rejoined { target: u64, reset: bool },
}

const PHASES: [Phase; 4] = [
    Phase::Sealed,
    Phase::CatchingUp,
    Phase::Open,
    Phase::Verifying,
];

/// Shared admission state: read by the Raft port's gate and by `/readyz`.
#[derive(Clone)]
pub struct Admission {
    phase: Arc<AtomicU8>,
    message: Arc<Mutex<String>>,
    outcome: watch::Sender<Option<Outcome>>,
}

impl Admission {
    fn new(phase: Phase, message: &str) -> Self {
        Admission {
            phase: Arc::new(AtomicU8::new(phase as u8)),
            message: Arc::new(Mutex::new(message.to_string())),
            outcome: watch::Sender::new(None),
        }
    }

    /// A node admitted from the start.
    pub fn open() -> Self {
        let a = Self::new(Phase::Open, "");
        a.outcome.send_replace(Some(Outcome::Restarted));
        a
    }

    pub fn phase(&self) -> Phase {
        PHASES[usize::from(self.phase.load(Ordering::Acquire)).min(PHASES.len() - 1)]
    }

    /// Why the node is not a full member yet (empty once it is).
    pub fn message(&self) -> String {
        self.message
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How the node was admitted, once it is.
    pub fn outcome(&self) -> watch::Receiver<Option<Outcome>> {
        self.outcome.subscribe()
    }

    fn set(&self, phase: Phase, message: String) {
        *self.message.lock().unwrap_or_else(|e| e.into_inner()) = message;
        self.phase.store(phase as u8, Ordering::Release);
    }

    fn say(&self, message: String) {
        let mut m = self.message.lock().unwrap_or_else(|e| e.into_inner());
        if *m != message {
            tracing::info!(%message, "admission");
            *m = message;
        }
    }

    /// Why an incoming Raft RPC `method` is refused in the current phase:
    /// until admitted, a node neither votes nor takes leadership.
    pub fn refuses(&self, method: &str) -> Option<String> {
        match self.phase() {
            Phase::Open => None,
            // Restarted with its data: nothing until it knows its history is
            // the cluster's (one round of questions), so a leader of another
            // history never sees its vote, and it never takes another's log.
            Phase::Verifying => Some(format!(
                "not taking part in Raft until admitted: {}",
                self.message()
            )),
            _ if !matches!(method, "Vote" | "TransferLeader") => None,
            _ => Some(format!("not voting until admitted: {}", self.message())),
        }
    }
}

/// A member of the static initial cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialMember {
    pub id: u64,
    pub raft_addr: String,
    pub grpc_addr: String,
}

/// The next step of a sealed node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Initialize,
    OpenFresh,
    Rejoin {
        leader_id: u64,
        leader_raft_addr: String,
    },
    Wait(String),
}

/// Decides what a sealed node `me` of `members` does, given the answers of
/// the other members that replied (see the module docs).
pub fn decide(me: u64, members: &[u64], answers: &[PeerView]) -> Decision {
    if answers.iter().any(|a| a.has_history) {
        // Prefer the leader's own word, then any member's.
        let leader = answers
            .iter()
            .find(|a| a.leader_id != 0 && a.leader_id == a.node_id)
            .or_else(|| answers.iter().find(|a| a.leader_id != 0));
        return match leader {
            Some(a) if !a.leader_raft_addr.is_empty() && a.leader_id != me => Decision::Rejoin {
                leader_id: a.leader_id,
                leader_raft_addr: a.leader_raft_addr.clone(),
            },
            _ => Decision::Wait(
                "the cluster exists but no member knows a leader; waiting for one to catch up from"
                    .to_string(),
            ),
        };
    }
    let missing: Vec<u64> = members
        .iter()
        .copied()
        .filter(|id| *id != me && !answers.iter().any(|a| a.node_id == *id))
        .collect();
    if !missing.is_empty() {
        return Decision::Wait(format!(
            "data directory is empty; waiting for members {missing:?} to answer before \
             initializing or joining the cluster"
        ));
    }
    if members.iter().min() != Some(&me) {
        return Decision::OpenFresh;
    }
    if answers.iter().any(|a| a.has_state) {
        // Someone else started something: never initialize over it.
        return Decision::OpenFresh;
    }
    let deciding: Vec<u64> = answers
        .iter()
        .filter(|a| !a.admitted)
        .map(|a| a.node_id)
        .collect();
    if deciding.is_empty() {
        Decision::Initialize
    } else {
        Decision::Wait(format!(
            "first boot: waiting for members {deciding:?} to be ready before initializing"
        ))
    }
}

/// What a sealed `--join` node `me` does: it never initializes nor opens on
/// its own; it catches up with the cluster's leader once some member knows
/// one (its empty store may be a voter's that lost its data).
pub fn decide_join(me: u64, answers: &[PeerView]) -> Decision {
    if answers.iter().any(|a| a.has_history) {
        return decide(me, &[], answers);
    }
    Decision::Wait(
        "joining with an empty data directory: not voting until it has caught up with the \
         cluster's leader; waiting to hear from a member of the cluster"
            .to_string(),
    )
}

/// Whether a leader must start replication to a follower that reports
/// `follower_last` as its last log index over: it recorded the follower as
/// holding more (`matched`), a log the follower will never confirm again,
/// and it still holds the entry at `matched` (its log is `purged` below it).
/// Once the leader has purged up to `matched`, openraft's replication falls
/// back to sending a snapshot by itself, and no handover is needed.
pub fn needs_reset(matched: Option<u64>, follower_last: Option<u64>, purged: Option<u64>) -> bool {
    matched.is_some() && matched > follower_last && purged < matched
}

/// The voter leader `me` hands leadership to so that replication to
/// `requester` starts from scratch: the other voter with the highest matched
/// index (the quickest to take over), or `None` when there is none.
pub fn handover_target(
    me: u64,
    requester: u64,
    voters: &[u64],
    matched: &BTreeMap<u64, Option<u64>>,
) -> Option<u64> {
    voters
        .iter()
        .copied()
        .filter(|v| *v != me && *v != requester)
        .max_by_key(|v| (matched.get(v).copied().flatten(), std::cmp::Reverse(*v)))
}

/// Name of the marker file kept while a node that lost its data catches up.
pub const MARKER: &str = "REJOINING";

fn marker_path(data_dir: &Path) -> PathBuf {
    data_dir.join(MARKER)
}

/// Runs a marker file operation off the async workers (it may fsync).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(std::io::Error::other)?
}

/// The catch-up target recorded in `data_dir` (0 while undecided), if the
/// node is not admitted yet.
pub fn read_marker(data_dir: &Path) -> std::io::Result<Option<u64>> {
    match std::fs::read(marker_path(data_dir)) {
        Ok(b) => om_proto::raft::RejoinMarker::decode(b.as_slice())
            .map(|m| Some(m.target_index))
            .map_err(std::io::Error::other),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Durably records that this node does not vote before it caught up to
/// `target` (0: before it knows whether the cluster exists).
fn write_marker(data_dir: &Path, target: u64) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(data_dir)?;
    let tmp = data_dir.join(format!("{MARKER}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(
        &om_proto::raft::RejoinMarker {
            target_index: target,
        }
        .encode_to_vec(),
    )?;
    f.sync_all()?;
    std::fs::rename(&tmp, marker_path(data_dir))?;
    sync_dir(data_dir)
}

fn remove_marker(data_dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(marker_path(data_dir)) {
        Ok(()) => sync_dir(data_dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The members (id, node) and voters of the membership this node's Raft
/// holds, asked of the Raft core itself: its metrics show an empty
/// membership until the core has loaded the store, and a restarted member
/// that read them then would take itself for a lone node and skip its
/// checks.
async fn membership_of(m: &Member) -> std::io::Result<(Vec<(u64, OmNode)>, Vec<u64>)> {
    m.raft
        .with_raft_state(|st| {
            let effective = st.membership_state.effective();
            let membership = effective.membership();
            (
                membership.nodes().map(|(id, n)| (*id, n.clone())).collect(),
                membership.voter_ids().collect(),
            )
        })
        .await
        .map_err(std::io::Error::other)
}

async fn members_of(m: &Member) -> std::io::Result<Vec<(u64, OmNode)>> {
    Ok(membership_of(m).await?.0)
}

/// Everything the admission task needs about this node.
pub struct Member {
    pub raft: Raft,
    pub node_id: u64,
    pub data_dir: PathBuf,
    pub members: Vec<InitialMember>,
    /// This node's own addresses, for an `--initial-cluster` entry without
    /// a gRPC address.
    pub grpc_addr: String,
    /// The client side of mutual TLS to the other members, when on.
    pub tls: Option<std::sync::Arc<om_tls::ClientTls>>,
    /// The store held nothing when opened (`OpenedStore::holds_nothing`).
    pub empty_store: bool,
    /// This member's incarnation: a restart with data checks it first.
    pub incarnation: std::sync::Arc<crate::incarnation::Incarnation>,
    /// Started with `--join`: it never initializes a cluster, and the members
    /// it asks are `members` (possibly none) and those of the membership it
    /// received. An empty joiner may be a voter that lost its data (a
    /// scaled-out member whose volume was replaced), so it seals like any
    /// member on an empty store.
    pub join: bool,
}

/// The admission state a configured member starts in, before its Raft port
/// serves anything.
pub async fn initial(m: &Member) -> std::io::Result<Admission> {
    let dir = m.data_dir.clone();
    let empty = m.empty_store;
    let marker = blocking(move || {
        Ok(match read_marker(&dir)? {
            Some(t) => Some(t),
            None if empty => {
                write_marker(&dir, 0)?;
                Some(0)
            }
            None => None,
        })
    })
    .await?;
    let others = members_of(m).await?.iter().any(|(id, _)| *id != m.node_id);
    match marker {
        None if m.incarnation.fenced().is_some() => {
            m.raft.runtime_config().elect(false);
            Ok(Admission::new(
                Phase::Verifying,
                &format!("superseded: {}", m.incarnation.fenced().unwrap_or_default()),
            ))
        }
        None if others => {
            m.raft.runtime_config().elect(false);
            Ok(Admission::new(
                Phase::Verifying,
                "restarted with its data; asking the other members which incarnation of the \
                 cluster is current before voting",
            ))
        }
        None => Ok(Admission::open()),
        Some(target) => {
            m.raft.runtime_config().elect(false);
            Ok(if target == 0 {
                Admission::new(
                    Phase::Sealed,
                    "data directory was empty; asking the other members whether the cluster exists",
                )
            } else {
                Admission::new(
                    Phase::CatchingUp,
                    &format!("rejoining after losing its data: catching up to index {target}"),
                )
            })
        }
    }
}

/// Steps of the wait between two rounds of questions.
const ROUND_MIN: Duration = Duration::from_millis(100);
const ROUND_MAX: Duration = Duration::from_secs(1);
/// How long catching up may make no progress before the manual steps are shown.
const STALL: Duration = Duration::from_secs(30);

/// Runs until the node is admitted (or `stop`).
pub async fn run(m: Member, admission: Admission, mut stop: watch::Receiver<bool>) {
    let mut wait = ROUND_MIN;
    let dir = m.data_dir.clone();
    let mut target = match blocking(move || read_marker(&dir)).await {
        Ok(t) => t.filter(|t| *t > 0),
        Err(e) => {
            tracing::error!(error = %e, "cannot read the rejoin marker");
            None
        }
    };
    let mut reset = false;
    let mut leader: Option<(u64, String)> = None;
    let mut progress = (0u64, tokio::time::Instant::now());
    let mut stalled_warned = false;
    let mut empty_rounds = 0u32;
    loop {
        if admission.phase() == Phase::Open || *stop.borrow() {
            return;
        }
        match admission.phase() {
            Phase::Verifying => {
                if m.incarnation.fenced().is_some() {
                    // Serves nothing until wiped: nothing more to ask.
                    return;
                }
                if verify::step(&m, &admission).await {
                    return;
                }
            }
            Phase::Sealed => match step_sealed(&m, &admission, &mut empty_rounds).await {
                Some(Step::Opened) => return,
                Some(Step::CatchUp {
                    to,
                    was_reset,
                    from,
                }) => {
                    target = Some(to);
                    reset = was_reset;
                    leader = Some(from);
                    progress = (0, tokio::time::Instant::now());
                    wait = ROUND_MIN;
                    continue;
                }
                None => {}
            },
            Phase::CatchingUp => {
                let to = target.unwrap_or(0);
                let applied = m
                    .raft
                    .metrics()
                    .borrow_watched()
                    .last_applied
                    .as_ref()
                    .map_or(0, |l| l.index);
                if applied >= to {
                    if open(&m, &admission, Outcome::Rejoined { target: to, reset }).await {
                        return;
                    }
                    sleep_or_stop(&mut stop, ROUND_MAX).await;
                    continue;
                }
                if applied > progress.0 {
                    progress = (applied, tokio::time::Instant::now());
                }
                let mut msg = format!(
                    "rejoining after losing its data: applied {applied} of {to}{}",
                    leader
                        .as_ref()
                        .map(|(id, _)| format!(" from leader {id}"))
                        .unwrap_or_default()
                );
                if progress.1.elapsed() >= STALL {
                    msg.push_str(&format!(
                        "; no progress for {}s. {}",
                        STALL.as_secs(),
                        runbook(&m)
                    ));
                    if !stalled_warned {
                        tracing::warn!(node_id = m.node_id, "{msg}");
                        stalled_warned = true;
                    }
                }
                admission.say(msg);
                wait = ROUND_MIN;
            }
            Phase::Open => return,
        }
        sleep_or_stop(&mut stop, wait).await;
        wait = (wait * 2).min(ROUND_MAX);
    }
}

async fn sleep_or_stop(stop: &mut watch::Receiver<bool>, d: Duration) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = stop.wait_for(|s| *s) => {}
    }
}

enum Step {
    Opened,
    CatchUp {
        to: u64,
        was_reset: bool,
        from: (u64, String),
    },
}

/// Rounds a node's log must stay empty, with a leader known, before it tells
/// the leader replication to it is stuck: a leader that can replicate to it
/// does so within one round, and a needless handover costs an election.
const STUCK_ROUNDS: u32 = 3;

/// One round of questions of a sealed node.
async fn step_sealed(m: &Member, admission: &Admission, empty_rounds: &mut u32) -> Option<Step> {
    let mut peers: Vec<InitialMember> = m
        .members
        .iter()
        .filter(|p| p.id != m.node_id)
        .cloned()
        .collect();
    if m.join {
        // A joiner also asks the members of the configuration it received.
        for (id, node) in members_of(m).await.unwrap_or_default() {
            if id != m.node_id && !peers.iter().any(|p| p.id == id) {
                peers.push(InitialMember {
                    id,
                    raft_addr: node.raft_addr.clone(),
                    grpc_addr: node.grpc_addr.clone(),
                });
            }
        }
    }
    let asked = futures::future::join_all(
        peers
            .iter()
            .map(|p| crate::peers::peer_state(&p.raft_addr, m.node_id, m.tls.as_ref())),
    )
    .await;
    let answers: Vec<PeerView> = asked.into_iter().filter_map(Result::ok).collect();
    let ids: Vec<u64> = m.members.iter().map(|p| p.id).collect();
    let decision = if m.join {
        decide_join(m.node_id, &answers)
    } else {
        decide(m.node_id, &ids, &answers)
    };
    match decision {
        Decision::Initialize => {
            let members: BTreeMap<u64, OmNode> = m
                .members
                .iter()
                .map(|p| {
                    let grpc = if p.id == m.node_id && p.grpc_addr.is_empty() {
                        m.grpc_addr.clone()
                    } else {
                        p.grpc_addr.clone()
                    };
                    (
                        p.id,
                        OmNode {
                            raft_addr: p.raft_addr.clone(),
                            grpc_addr: grpc,
                        },
                    )
                })
                .collect();
            tracing::info!(members = ?ids, "every member answered with no state: initializing the cluster");
            match m.raft.initialize(members).await {
                Ok(())
                | Err(openraft::errors::RaftError::APIError(
                    openraft::errors::InitializeError::NotAllowed(_),
                )) => {}
                Err(e) => {
                    admission.say(format!("initializing the cluster failed: {e}"));
                    return None;
                }
            }
            open(m, admission, Outcome::Initialized)
                .await
                .then_some(Step::Opened)
        }
        Decision::OpenFresh => open(m, admission, Outcome::Fresh)
            .await
            .then_some(Step::Opened),
        Decision::Wait(why) => {
            admission.say(why);
            None
        }
        Decision::Rejoin {
            leader_id,
            leader_raft_addr,
        } => {
            let last = m.raft.metrics().borrow_watched().last_log_index;
            if last.is_none() {
                *empty_rounds += 1;
                if *empty_rounds < STUCK_ROUNDS {
                    admission.say(format!(
                        "the cluster exists; waiting for leader {leader_id} to replicate to this node"
                    ));
                    return None;
                }
            }
            let stuck = last.is_none();
            let r = match crate::peers::rejoin(
                &leader_raft_addr,
                m.node_id,
                last,
                stuck,
                m.tls.as_ref(),
            )
            .await
            {
                Ok(r) => r,
                Err(e) => {
                    admission.say(format!(
                        "the cluster exists and this node lost its data; leader {leader_id} \
                         did not answer the rejoin request yet: {e}"
                    ));
                    return None;
                }
            };
            if !r.member {
                tracing::warn!(
                    node_id = m.node_id,
                    "this node is not a member of the cluster; it catches up once added. {}",
                    runbook(m)
                );
            }
            if r.reset {
                tracing::warn!(
                    node_id = m.node_id,
                    leader_id,
                    "the leader had recorded entries this node no longer holds; \
                     it handed leadership over so replication starts from scratch"
                );
            }
            // A crash while catching up still finds the node waiting.
            let (dir, to) = (m.data_dir.clone(), r.last_log_index);
            if let Err(e) = blocking(move || write_marker(&dir, to)).await {
                admission.say(format!("cannot write the rejoin marker: {e}"));
                return None;
            }
            admission.set(
                Phase::CatchingUp,
                format!(
                    "rejoining after losing its data: catching up to index {} from leader {}",
                    r.last_log_index, r.leader_id
                ),
            );
            tracing::info!(
                node_id = m.node_id,
                target = r.last_log_index,
                leader_id = r.leader_id,
                "the cluster exists: catching up with it before voting"
            );
            Some(Step::CatchUp {
                to: r.last_log_index,
                was_reset: r.reset,
                from: (r.leader_id, leader_raft_addr),
            })
        }
    }
}

/// Admits the node: the marker goes first, so the node never votes while a
/// marker says it must not. False when the marker cannot be removed.
async fn open(m: &Member, admission: &Admission, outcome: Outcome) -> bool {
    let dir = m.data_dir.clone();
    if let Err(e) = blocking(move || remove_marker(&dir)).await {
        admission.say(format!("cannot remove the rejoin marker: {e}"));
        return false;
    }
    m.raft.runtime_config().elect(true);
    admission.set(Phase::Open, String::new());
    tracing::info!(node_id = m.node_id, ?outcome, "admitted to the cluster");
    admission.outcome.send_replace(Some(outcome));
    true
}

/// The manual steps to bring this member back, as `omctl` commands.
pub fn runbook(m: &Member) -> String {
    let me = m.members.iter().find(|p| p.id == m.node_id);
    let raft = me.map_or("RAFT_ADDR", |p| p.raft_addr.as_str());
    let grpc = me
        .map(|p| p.grpc_addr.as_str())
        .filter(|g| !g.is_empty())
        .unwrap_or(m.grpc_addr.as_str());
    format!(
        "To bring it back by hand, while it keeps running: `omctl cluster remove-node {id}`, \
         then `omctl cluster add-node {id} --raft-addr {raft} --grpc-addr {grpc}`",
        id = m.node_id
    )
}

#[cfg(test)]
mod tests;
mod verify;
