//! The request layer between gRPC and Raft: stamps writes with the leader's
//! time and proposes them, makes reads linearizable, and runs the paginated
//! queries. Knows nothing of tonic.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use om_proto::store::{
    BucketRecord, Command, KeyRecord, VolumeRecord, command::Op, command_result,
};
use std::collections::BTreeSet;

use om_raft_store::{OmNode, Raft, TypeConfig};
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, LinearizableReadError, RaftError};
use openraft::{ChangeMembers, ReadPolicy};
use rocksdb::DB;

mod access;
mod backup;
mod files;
mod lifecycle;
mod tagging;
pub mod versions;

pub use access::Policy;
pub use files::{Status, StatusListing, StatusPage};

use crate::apply::into_outcome;
use crate::error::OmError;
use crate::listing::{
    ContinuationToken, Item, PAGE_OVERHEAD_BYTES, ScanSpec, Start, field_len, scan_page_within,
};
use crate::store::iter::IterStats;
use crate::store::keys;
use crate::store::table::{
    self, BucketTable, DeletedBlocksTable, KeyTable, OpenFileTable, OpenKeyTable, PartTable,
    TableSchema, UploadTable, VolumeTable,
};
use om_proto::store::{DeletedBlocksRecord, OpenKeyRecord, PartRecord, UploadRecord};

/// How a read is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consistency {
    /// Confirmed with a quorum (ReadIndex) before reading local state.
    Linearizable,
    /// Local state as it is; may lag the leader, by at most `max_ms` since
    /// this node last heard from a leader (0: `--max-staleness-ms`).
    Stale { max_ms: u64 },
    /// Linearizable under the leader's lease, without a quorum round trip.
    Lease,
}

/// The oldest state a stale read accepts unless it asks otherwise.
pub const DEFAULT_MAX_STALENESS_MS: u64 = 10_000;

/// Identifies a write for the retry cache.
#[derive(Debug, Clone, Default)]
pub struct WriteId {
    pub client_id: String,
    pub seq: u64,
    /// Digest of the client's request; a retry must carry the same one.
    pub request_digest: Vec<u8>,
}

/// A ListKeys request, validated.
#[derive(Debug, Clone, Default)]
pub struct KeyListing {
    pub volume: String,
    pub bucket: String,
    pub prefix: String,
    pub delimiter: String,
    pub start_after: String,
    pub continuation_token: String,
    pub max_keys: u32,
}

/// One page of ListKeys: keys as the caller converted them.
#[derive(Debug, Clone)]
pub struct KeyPage<T> {
    pub keys: Vec<T>,
    pub common_prefixes: Vec<String>,
    pub next_start_after: String,
    /// Empty when the listing is complete.
    pub next_continuation_token: String,
    pub stats: IterStats,
}

/// One page of a listing: each item's name and the item as the caller
/// converted it.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<(String, T)>,
    pub truncated: bool,
    /// The last name returned when truncated: pass it as `start_after`.
    pub next_start_after: String,
    pub stats: IterStats,
}

/// Longest a stopping leader waits for another voter to take over.
pub const HANDOVER_TIMEOUT: Duration = Duration::from_secs(5);

pub struct OmService {
    raft: Raft,
    db: Arc<DB>,
    node_id: u64,
    max_page: u32,
    request_timeout: Duration,
    seek_after: usize,
    min_part_size: u64,
    lifecycle_day_ms: u64,
    /// Most bytes one listing response may encode to (see `item_budget`).
    max_response_bytes: usize,
    /// Added to the wall clock this node stamps commands with (tests skew
    /// one node's clock with it; 0 in production).
    clock_offset_ms: i64,
    /// Authorization (on with authentication); `None`: every caller may do
    /// everything.
    policy: Option<Arc<Policy>>,
    audit: Option<Arc<crate::audit::AuditLog>>,
    /// Whether this replica diverged (then it serves nothing).
    divergence: Option<Arc<crate::divergence::Divergence>>,
    cluster_id: Option<Arc<crate::cluster_id::ClusterId>>,
    /// This node's client TLS towards other members' Raft ports.
    peer_tls: Option<Arc<om_tls::ClientTls>>,
    /// When appends from a leader last arrived (stale reads' age).
    leader_contact: Option<Arc<om_raft_store::network::LeaderContact>>,
    /// The oldest state a stale read accepts by default.
    max_staleness_ms: u64,
    /// Copies of the store taken for backups; `None`: backups refused.
    backups: Option<Arc<crate::backup::Backups>>,
}

/// Default response byte budget of listings: 3 MiB, a quarter under the
/// 4 MiB a tonic (and grpc-go, grpc-java) client decodes by default, which
/// leaves room for the largest single item (see `grpc::MAX_RECORD_BLOCKS`).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 3 * 1024 * 1024;
const _: () = assert!(DEFAULT_MAX_RESPONSE_BYTES + PAGE_OVERHEAD_BYTES < 4 * 1024 * 1024);

/// A size for a protobuf-encoded response item: what a repeated field of
/// the response spends on it.
pub fn item_len(encoded_len: usize) -> usize {
    field_len(encoded_len)
}

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

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

fn write_err(e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>) -> OmError {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => forward_err(&f),
        RaftError::APIError(ClientWriteError::LogEntryDiscarded(f)) => {
            OmError::Unavailable(format!(
                "leadership changed before the write committed; retry with the same client id and seq (leader: {:?})",
                f.leader_id
            ))
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => {
            OmError::precondition("MEMBERSHIP_CHANGE_REFUSED", "", e.to_string())
        }
        RaftError::APIError(e) => OmError::Unavailable(e.to_string()),
        RaftError::Fatal(f) => OmError::Unavailable(format!("raft stopped: {f}")),
    }
}

fn forward_err(f: &openraft::errors::ForwardToLeader<TypeConfig>) -> OmError {
    OmError::NotLeader {
        leader_id: f.leader_id,
        leader_addr: f.leader_node.as_ref().map(|n| n.grpc_addr.clone()),
    }
}

impl OmService {
    pub fn new(
        raft: Raft,
        db: Arc<DB>,
        node_id: u64,
        max_page: u32,
        request_timeout: Duration,
        seek_after: usize,
    ) -> Self {
        OmService {
            raft,
            db,
            node_id,
            max_page,
            request_timeout,
            seek_after,
            min_part_size: crate::apply::DEFAULT_MIN_PART_SIZE,
            lifecycle_day_ms: crate::lifecycle::DAY_MS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            clock_offset_ms: 0,
            policy: None,
            audit: None,
            divergence: None,
            cluster_id: None,
            peer_tls: None,
            leader_contact: None,
            max_staleness_ms: DEFAULT_MAX_STALENESS_MS,
            backups: None,
        }
    }

    /// Refuses every read and write once `d` says this replica diverged.
    pub fn with_divergence(mut self, d: Arc<crate::divergence::Divergence>) -> Self {
        self.divergence = Some(d);
        self
    }

    /// Tracks the cluster's id (status, AddNode's check).
    /// Serves backups from copies kept by `b`.
    pub fn with_backups(mut self, b: Arc<crate::backup::Backups>) -> Self {
        self.backups = Some(b);
        self
    }

    pub fn with_cluster_id(mut self, id: Arc<crate::cluster_id::ClusterId>) -> Self {
        self.cluster_id = Some(id);
        self
    }

    /// Measures stale reads' age by `contact`, accepting at most `max_ms`
    /// by default.
    pub fn with_staleness(
        mut self,
        contact: Arc<om_raft_store::network::LeaderContact>,
        max_ms: u64,
    ) -> Self {
        self.leader_contact = Some(contact);
        self.max_staleness_ms = max_ms;
        self
    }

    /// Asks other members' Raft ports over `tls` (AddNode's check).
    pub fn with_peer_tls(mut self, tls: Option<Arc<om_tls::ClientTls>>) -> Self {
        self.peer_tls = tls;
        self
    }

    /// The cluster's id, once this node holds it.
    pub fn cluster_id(&self) -> Option<Arc<str>> {
        self.cluster_id.as_ref().and_then(|c| c.get())
    }

    /// This replica's divergence state, if it is tracked.
    pub fn divergence(&self) -> Option<&Arc<crate::divergence::Divergence>> {
        self.divergence.as_ref()
    }

    fn check_not_diverged(&self) -> Result<(), OmError> {
        match &self.divergence {
            Some(d) => d.check_serving(),
            None => Ok(()),
        }
    }

    /// Skews this node's wall clock by `ms` (tests of clock disagreement).
    pub fn with_clock_offset(mut self, ms: i64) -> Self {
        self.clock_offset_ms = ms;
        self
    }

    /// This node's wall clock in milliseconds since the epoch: the time the
    /// leader stamps into commands.
    pub fn now_ms(&self) -> u64 {
        now_ms().saturating_add_signed(self.clock_offset_ms)
    }

    /// Smallest part (all but the last) a multipart upload may complete with.
    /// The lifecycle day length LookupKey's expiration uses (the scanner's).
    pub fn with_lifecycle_day_ms(mut self, ms: u64) -> Self {
        self.lifecycle_day_ms = ms.max(1);
        self
    }

    pub fn lifecycle_day_ms(&self) -> u64 {
        self.lifecycle_day_ms
    }

    pub fn with_min_part_size(mut self, bytes: u64) -> Self {
        self.min_part_size = bytes;
        self
    }

    pub fn min_part_size(&self) -> u64 {
        self.min_part_size
    }

    /// Most bytes one listing response may encode to.
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// Bytes a page's items may take: the response budget less the room
    /// kept for the token, markers and statistics. A page stops before its
    /// items would pass it, except that its first item is always taken.
    pub fn item_budget(&self) -> usize {
        self.max_response_bytes.saturating_sub(PAGE_OVERHEAD_BYTES)
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    pub fn db(&self) -> &Arc<DB> {
        &self.db
    }

    /// Proposes `op` stamped with this (leader) node's clock and waits for it
    /// to be applied. Request errors decided at apply come back as `Err`.
    ///
    /// Within a request, the command carries its caller (when authorization
    /// is on), whose rights the leader checks first and apply again; every
    /// outcome is audited.
    pub async fn propose(&self, id: WriteId, op: Op) -> Result<command_result::Result, OmError> {
        self.check_not_diverged()?;
        let caller = self.caller()?;
        self.precheck(caller.as_ref(), &op)?;
        let audited = self.audit.is_some().then(|| op.clone());
        let cmd = Command {
            client_id: id.client_id,
            seq: id.seq,
            now_ms: self.now_ms(),
            op: Some(op),
            request_digest: id.request_digest,
            rules: crate::apply::RULES,
            caller,
        };
        // Boxed: openraft's write future is large, and every future that
        // awaits it (this one, the gRPC handler's, tonic's) would otherwise
        // hold it inline and be copied whole each time it is moved (memcpy
        // was ~20 % of the leader's instructions per PutKey).
        let write = Box::pin(self.raft.client_write(cmd.into()));
        let outcome = match tokio::time::timeout(self.request_timeout, write).await {
            Ok(Ok(resp)) => into_outcome(resp.data),
            Ok(Err(e)) => Err(write_err(e)),
            Err(_) => Err(OmError::Unavailable(format!(
                "write not committed within {:?}; its outcome is unknown, retry with the same client id and seq",
                self.request_timeout
            ))),
        };
        if let Some(op) = &audited {
            self.audit_write(op, &outcome);
        }
        outcome
    }

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
    async fn check_joiner(&self, id: u64, node: &OmNode) -> Result<(), OmError> {
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
    async fn propose_verify_mark(&self) -> Result<u64, OmError> {
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
        self.raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader == Some(to), "leadership transfer")
            .await
            .map_err(|e| OmError::Unavailable(format!("leadership did not move to {to}: {e}")))?;
        Ok(())
    }

    /// When this node leads, hands leadership to the most caught-up other
    /// voter and waits (at most `timeout`) until it has taken over; what a
    /// stopping node does first, so writes pause for one transfer instead
    /// of an election timeout. Returns the new leader, if one took over.
    pub async fn step_down(&self, timeout: Duration) -> Option<u64> {
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
            .filter(|v| *v != self.node_id)
            .max_by_key(|v| (matched(v), std::cmp::Reverse(*v)))?;
        match self.transfer_leader(to, timeout).await {
            Ok(()) => Some(to),
            Err(e) => {
                tracing::warn!(to, error = %e, "leadership handover before stopping failed");
                None
            }
        }
    }

    /// Waits until local state reflects every write committed before this call.
    pub async fn read_barrier(&self, c: Consistency) -> Result<(), OmError> {
        self.check_not_diverged()?;
        let policy = match c {
            Consistency::Stale { max_ms } => return self.stale_state(max_ms),
            Consistency::Linearizable => ReadPolicy::ReadIndex,
            Consistency::Lease => ReadPolicy::LeaseRead,
        };
        let check =
            tokio::time::timeout(self.request_timeout, self.raft.ensure_linearizable(policy));
        let Ok(result) = check.await else {
            return Err(OmError::Unavailable(format!(
                "no quorum confirmed this node's leadership within {:?}",
                self.request_timeout
            )));
        };
        match result {
            Ok(_) => Ok(()),
            Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(f))) => {
                Err(forward_err(&f))
            }
            Err(RaftError::APIError(e)) => Err(OmError::Unavailable(e.to_string())),
            Err(RaftError::Fatal(f)) => Err(OmError::Unavailable(format!("raft stopped: {f}"))),
        }
    }

    /// A stale read's check: this node is a member of the cluster (a removed
    /// node's state, grants included, is frozen at its removal), and its
    /// state is at most `max_ms` old (0: the configured default), measured
    /// as the time since it last took an append from a leader (0 on the
    /// leader while a quorum acknowledges it). The age is returned to the
    /// client in `om-read-staleness-ms`.
    fn stale_state(&self, max_ms: u64) -> Result<(), OmError> {
        let m = self.raft.metrics().borrow_watched().clone();
        if m.membership_config
            .membership()
            .get_node(&self.node_id)
            .is_none()
        {
            return Err(OmError::precondition(
                "NOT_A_MEMBER",
                "read.consistency",
                format!(
                    "node {} is not a member of the cluster: its state is not the cluster's",
                    self.node_id
                ),
            ));
        }
        let age_ms = if m.state == openraft::ServerState::Leader {
            m.last_quorum_acked
                .map(|t| openraft::Instant::elapsed(&t.into_inner()).as_millis() as u64)
        } else {
            self.leader_contact
                .as_ref()
                .and_then(|c| c.since())
                .map(|d| d.as_millis() as u64)
        };
        let bound = if max_ms == 0 {
            self.max_staleness_ms
        } else {
            max_ms
        };
        match age_ms {
            Some(age) if age <= bound => {
                if let Some(ctx) = crate::authz::request() {
                    ctx.staleness_ms
                        .store(age, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(())
            }
            age => Err(OmError::Unavailable(format!(
                "STALE_STATE: node {} last heard from a leader {} ago, beyond the {bound} ms \
                 the read accepts; ask another node",
                self.node_id,
                age.map_or("never".to_string(), |a| format!("{a} ms"))
            ))),
        }
    }

    fn page_size(&self, requested: u32) -> usize {
        if requested == 0 {
            self.max_page as usize
        } else {
            requested.min(self.max_page) as usize
        }
    }

    /// A volume, its used bytes filled in even before a write kept them.
    pub async fn get_volume(&self, c: Consistency, name: &str) -> Result<VolumeRecord, OmError> {
        self.read_as(c, crate::authz::Resource::Volume(name), crate::authz::READ)
            .await?;
        let mut v =
            table::get::<VolumeTable>(&self.db, &keys::volume_key(name))?.ok_or_else(|| {
                OmError::not_found(
                    "VOLUME_NOT_FOUND",
                    "name",
                    format!("volume {name:?} does not exist"),
                )
            })?;
        v.used_bytes = Some(crate::apply::volume_used_bytes(&self.db, &v)?);
        Ok(v)
    }

    pub async fn get_bucket(
        &self,
        c: Consistency,
        volume: &str,
        name: &str,
    ) -> Result<BucketRecord, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, name),
            crate::authz::READ,
        )
        .await?;
        self.bucket_now(volume, name)
    }

    fn bucket_now(&self, volume: &str, name: &str) -> Result<BucketRecord, OmError> {
        if table::get::<VolumeTable>(&self.db, &keys::volume_key(volume))?.is_none() {
            return Err(OmError::not_found(
                "VOLUME_NOT_FOUND",
                "volume",
                format!("volume {volume:?} does not exist"),
            ));
        }
        table::get::<BucketTable>(&self.db, &keys::bucket_key(volume, name))?.ok_or_else(|| {
            OmError::not_found(
                "BUCKET_NOT_FOUND",
                "bucket",
                format!("bucket {volume}/{name} does not exist"),
            )
        })
    }

    pub async fn lookup_key(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        key: &str,
    ) -> Result<KeyRecord, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::READ,
        )
        .await?;
        let b = self.bucket_now(volume, bucket)?;
        if b.layout == crate::apply::LAYOUT_FSO {
            // A key of an FSO bucket is a file path.
            let path = crate::validate::fs_path_not_root("key", key)?;
            let comps = crate::fs::components(&path);
            if let Some(crate::fs::Entry::File { rec, .. }) =
                crate::fs::stat(&self.db, b.object_id, &comps, "key")?
            {
                return Ok(rec);
            }
        }
        // The current version; a delete marker is returned as such (the
        // edge answers NOT_FOUND for it, saying so).
        table::get::<KeyTable>(&self.db, &keys::object_key(volume, bucket, key))?.ok_or_else(|| {
            OmError::not_found(
                "KEY_NOT_FOUND",
                "key",
                format!("key {volume}/{bucket}/{key} does not exist"),
            )
        })
    }

    /// One page of volumes; `convert` turns each into what the response
    /// carries and says how many bytes it adds there. With authorization on,
    /// a caller sees the volumes it may READ (an admin all): the page is
    /// read as usual and the others left out, so it may hold fewer items
    /// (even none) and still continue after the last volume it read.
    pub async fn list_volumes<T>(
        &self,
        c: Consistency,
        prefix: &str,
        start_after: &str,
        max: u32,
        convert: impl FnMut(VolumeRecord) -> (T, usize),
    ) -> Result<Page<T>, OmError> {
        self.read_barrier(c).await?;
        let visible = self.volume_filter()?;
        filtered_page::<VolumeTable, T>(
            &self.db,
            &[],
            prefix,
            start_after,
            (self.page_size(max), self.item_budget()),
            |v| visible(v),
            convert,
        )
    }

    /// One page of a volume's buckets; `convert` as for `list_volumes`.
    pub async fn list_buckets<T>(
        &self,
        c: Consistency,
        volume: &str,
        prefix: &str,
        start_after: &str,
        max: u32,
        convert: impl FnMut(BucketRecord) -> (T, usize),
    ) -> Result<Page<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Volume(volume),
            crate::authz::LIST,
        )
        .await?;
        if table::get::<VolumeTable>(&self.db, &keys::volume_key(volume))?.is_none() {
            return Err(OmError::not_found(
                "VOLUME_NOT_FOUND",
                "volume",
                format!("volume {volume:?} does not exist"),
            ));
        }
        // Only the buckets the caller may read (a volume's owner or an admin
        // reads them all), so a listing shows nothing GetBucket refuses.
        let caller = self.caller()?;
        let vol_admin = match &caller {
            None => true,
            Some(c) => {
                crate::authz::rights_on(&self.db, c, crate::authz::Resource::Volume(volume))?
                    .is_some_and(|r| r == crate::authz::ALL)
            }
        };
        if vol_admin {
            return list_page::<BucketTable, T>(
                &self.db,
                &keys::bucket_prefix(volume),
                prefix,
                start_after,
                (self.page_size(max), self.item_budget()),
                convert,
            );
        }
        let caller = caller.unwrap_or_default();
        filtered_page::<BucketTable, T>(
            &self.db,
            &keys::bucket_prefix(volume),
            prefix,
            start_after,
            (self.page_size(max), self.item_budget()),
            |b| {
                b.owner == caller.user
                    || crate::authz::granted(&b.acl, &caller) & crate::authz::READ != 0
            },
            convert,
        )
    }

    /// One page of keys, with S3 delimiter roll-up and continuation tokens;
    /// `convert` turns each key (name, record) into what the response carries
    /// and says how many bytes it adds there.
    pub async fn list_keys<T>(
        &self,
        c: Consistency,
        q: KeyListing,
        mut convert: impl FnMut(String, KeyRecord) -> (T, usize),
    ) -> Result<KeyPage<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(&q.volume, &q.bucket),
            crate::authz::LIST,
        )
        .await?;
        let bucket = self.object_store_bucket_now(&q.volume, &q.bucket)?;
        let expect = ContinuationToken {
            version: 1,
            listing: "keys".to_string(),
            volume: q.volume.clone(),
            bucket: q.bucket.clone(),
            bucket_object_id: bucket.object_id,
            prefix: q.prefix.as_bytes().to_vec(),
            delimiter: q.delimiter.as_bytes().to_vec(),
            resume: Vec::new(),
        };
        let start = if !q.continuation_token.is_empty() {
            Start::At(ContinuationToken::decode_token(&q.continuation_token, &expect)?.resume)
        } else if q.start_after.is_empty() {
            Start::Beginning
        } else {
            Start::After(q.start_after.as_bytes().to_vec())
        };
        let parent = keys::object_prefix(&q.volume, &q.bucket);
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::KEYS_CF,
                parent: &parent,
                prefix: q.prefix.as_bytes(),
                delimiter: q.delimiter.as_bytes(),
                start,
                max: self.page_size(q.max_keys),
                seek_after: self.seek_after,
                terminator: None,
                current_only: (bucket.versioning != crate::apply::versions::UNVERSIONED).then_some(
                    crate::listing::CurrentOnly {
                        hidden: versions::is_delete_marker,
                    },
                ),
            },
            self.item_budget(),
            |item| match item {
                Item::Entry { name, value } => {
                    let name = utf8(name)?;
                    let (t, bytes) = convert(name.clone(), table::decode::<KeyTable>(&value)?);
                    Ok((Listed::Entry(name, t), bytes))
                }
                Item::CommonPrefix(p) => {
                    let p = utf8(p)?;
                    let bytes = item_len(p.len());
                    Ok((Listed::Prefix(p), bytes))
                }
            },
        )?;
        let mut out = KeyPage {
            keys: Vec::new(),
            common_prefixes: Vec::new(),
            next_start_after: String::new(),
            next_continuation_token: String::new(),
            stats: page.stats,
        };
        let mut last = String::new();
        for item in page.items {
            match item {
                Listed::Entry(name, t) => {
                    last = name;
                    out.keys.push(t);
                }
                Listed::Prefix(p) => {
                    last.clone_from(&p);
                    out.common_prefixes.push(p);
                }
            }
        }
        if let Some(resume) = page.resume {
            out.next_start_after = last;
            out.next_continuation_token = ContinuationToken { resume, ..expect }.encode_token();
        }
        Ok(out)
    }
}

/// An item of a page with roll-up: a converted entry with its name, or a
/// common prefix.
enum Listed<T> {
    Entry(String, T),
    Prefix(String),
}

/// One page of ListOpenKeys.
#[derive(Debug, Clone)]
pub struct OpenKeyPage<T> {
    pub keys: Vec<T>,
    pub next_continuation_token: String,
    /// Open keys in the whole bucket.
    pub total: u64,
    pub stats: IterStats,
}

/// One page of ListParts.
#[derive(Debug, Clone)]
pub struct PartPage<T> {
    pub parts: Vec<T>,
    pub truncated: bool,
    pub next_marker: u32,
    pub stats: IterStats,
}

/// A ListMultipartUploads request, validated.
#[derive(Debug, Clone, Default)]
pub struct UploadListing {
    pub volume: String,
    pub bucket: String,
    pub prefix: String,
    pub delimiter: String,
    pub key_marker: String,
    pub upload_id_marker: Option<u64>,
    pub max_uploads: u32,
}

/// One page of ListMultipartUploads.
#[derive(Debug, Clone)]
pub struct UploadPage<T> {
    pub uploads: Vec<T>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    pub next_key_marker: String,
    pub next_upload_id_marker: Option<u64>,
    pub stats: IterStats,
}

/// An entry id of the deleted-blocks table: the releasing log index and the
/// sequence within it.
pub type DeletedId = (u64, u32);

/// One page of ListDeletedBlocks.
#[derive(Debug, Clone)]
pub struct DeletedPage<T> {
    pub entries: Vec<T>,
    /// The last entry returned, when truncated.
    pub last: Option<DeletedId>,
    pub truncated: bool,
    pub stats: IterStats,
}

impl OmService {
    fn object_store_bucket_now(&self, volume: &str, bucket: &str) -> Result<BucketRecord, OmError> {
        crate::apply::require_layout(
            self.bucket_now(volume, bucket)?,
            crate::apply::LAYOUT_OBJECT_STORE,
        )
    }

    /// Sessions of keys under `prefix` being written, in key order; stops at
    /// the end of the prefix. `convert` turns each (name, session) into what
    /// the response carries and says how many bytes it adds there.
    #[allow(clippy::too_many_arguments)]
    pub async fn list_open_keys<T>(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        prefix: &str,
        max: u32,
        token: &str,
        mut convert: impl FnMut(String, OpenKeyRecord) -> (T, usize),
    ) -> Result<OpenKeyPage<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::LIST,
        )
        .await?;
        let b = self.bucket_now(volume, bucket)?;
        if b.layout == crate::apply::LAYOUT_FSO {
            return self.list_open_files(&b, prefix, max, token, convert);
        }
        let expect = ContinuationToken {
            version: 1,
            listing: "open_keys".to_string(),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            bucket_object_id: b.object_id,
            prefix: prefix.as_bytes().to_vec(),
            delimiter: Vec::new(),
            resume: Vec::new(),
        };
        let start = if token.is_empty() {
            Start::Beginning
        } else {
            Start::At(ContinuationToken::decode_token(token, &expect)?.resume)
        };
        let parent = keys::object_prefix(volume, bucket);
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::OPEN_KEYS_CF,
                parent: &parent,
                prefix: prefix.as_bytes(),
                delimiter: b"",
                start,
                max: self.page_size(max),
                seek_after: usize::MAX,
                terminator: None,
                current_only: None,
            },
            self.item_budget(),
            |item| {
                let (name, value) = entry(item)?;
                let (key, _) = keys::split_key_run(&name)
                    .ok_or_else(|| OmError::Internal("malformed open-key entry".to_string()))?;
                Ok(convert(
                    utf8(key.to_vec())?,
                    table::decode::<OpenKeyTable>(&value)?,
                ))
            },
        )?;
        let mut out = OpenKeyPage {
            keys: page.items,
            next_continuation_token: String::new(),
            total: b.open_key_count,
            stats: page.stats,
        };
        if let Some(resume) = page.resume {
            out.next_continuation_token = ContinuationToken { resume, ..expect }.encode_token();
        }
        Ok(out)
    }

    /// ListOpenKeys of an FSO bucket: the files being written in the
    /// directory named by `prefix` up to its last `/`, whose names start with
    /// the rest; one seek in `open_files`, bounded by that directory's range.
    fn list_open_files<T>(
        &self,
        b: &BucketRecord,
        prefix: &str,
        max: u32,
        token: &str,
        mut convert: impl FnMut(String, OpenKeyRecord) -> (T, usize),
    ) -> Result<OpenKeyPage<T>, OmError> {
        let (dir, name_prefix) = match prefix.rfind('/') {
            Some(i) => (&prefix[..i], &prefix[i + 1..]),
            None => ("", prefix),
        };
        let dir = crate::validate::fs_path("prefix", dir)?;
        let comps = crate::fs::components(&dir);
        let empty = OpenKeyPage::<T> {
            keys: Vec::new(),
            next_continuation_token: String::new(),
            total: b.open_key_count,
            stats: IterStats::default(),
        };
        let dir_id = match crate::fs::walk_dirs(&self.db, b.object_id, &comps, "prefix")? {
            crate::fs::Walk::Dir(id) => id,
            crate::fs::Walk::Missing { .. } => return Ok(empty),
        };
        let expect = ContinuationToken {
            version: 1,
            listing: "open_files".to_string(),
            volume: b.volume.clone(),
            bucket: b.name.clone(),
            bucket_object_id: b.object_id,
            prefix: prefix.as_bytes().to_vec(),
            delimiter: Vec::new(),
            resume: Vec::new(),
        };
        let start = if token.is_empty() {
            Start::Beginning
        } else {
            Start::At(ContinuationToken::decode_token(token, &expect)?.resume)
        };
        let parent = keys::children_prefix(dir_id);
        let base = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::OPEN_FILES_CF,
                parent: &parent,
                prefix: name_prefix.as_bytes(),
                delimiter: b"",
                start,
                max: self.page_size(max),
                seek_after: usize::MAX,
                terminator: None,
                current_only: None,
            },
            self.item_budget(),
            |item| {
                let (name, value) = entry(item)?;
                let (name, _) = keys::split_key_run(&name)
                    .ok_or_else(|| OmError::Internal("malformed open-file entry".to_string()))?;
                let name = utf8(name.to_vec())?;
                Ok(convert(
                    format!("{base}{name}"),
                    table::decode::<OpenFileTable>(&value)?,
                ))
            },
        )?;
        let mut out = OpenKeyPage {
            keys: page.items,
            stats: page.stats,
            ..empty
        };
        if let Some(resume) = page.resume {
            out.next_continuation_token = ContinuationToken { resume, ..expect }.encode_token();
        }
        Ok(out)
    }

    /// Parts of one upload after `marker`, in part-number order; `convert`
    /// turns each into what the response carries and says how many bytes it
    /// adds there.
    #[allow(clippy::too_many_arguments)]
    pub async fn list_parts<T>(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        key: &str,
        upload_id: u64,
        marker: u32,
        max: u32,
        mut convert: impl FnMut(PartRecord) -> (T, usize),
    ) -> Result<PartPage<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::LIST,
        )
        .await?;
        self.object_store_bucket_now(volume, bucket)?;
        if table::get::<UploadTable>(&self.db, &keys::upload_key(volume, bucket, key, upload_id))?
            .is_none()
        {
            return Err(OmError::not_found(
                "UPLOAD_NOT_FOUND",
                "upload_id",
                format!("no upload {upload_id:016x} of key {volume}/{bucket}/{key}"),
            ));
        }
        let parent = keys::parts_prefix(upload_id);
        let start = if marker == 0 {
            Start::Beginning
        } else {
            Start::At((marker + 1).to_be_bytes().to_vec())
        };
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::PARTS_CF,
                parent: &parent,
                prefix: b"",
                delimiter: b"",
                start,
                max: self.page_size(max),
                seek_after: usize::MAX,
                terminator: None,
                current_only: None,
            },
            self.item_budget(),
            |item| {
                let (_, value) = entry(item)?;
                let part = table::decode::<PartTable>(&value)?;
                let number = part.part_number;
                let (t, bytes) = convert(part);
                Ok(((number, t), bytes))
            },
        )?;
        let truncated = page.resume.is_some();
        let last = page.items.last().map_or(0, |(n, _)| *n);
        Ok(PartPage {
            next_marker: if truncated { last } else { 0 },
            parts: page.items.into_iter().map(|(_, t)| t).collect(),
            truncated,
            stats: page.stats,
        })
    }

    /// In-progress uploads in key order (uploads of one key by initiation),
    /// with S3's marker semantics and delimiter roll-up; `convert` turns each
    /// (key, upload) into what the response carries and says how many bytes
    /// it adds there.
    pub async fn list_uploads<T>(
        &self,
        c: Consistency,
        q: UploadListing,
        mut convert: impl FnMut(String, UploadRecord) -> (T, usize),
    ) -> Result<UploadPage<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(&q.volume, &q.bucket),
            crate::authz::LIST,
        )
        .await?;
        self.object_store_bucket_now(&q.volume, &q.bucket)?;
        let marker = q.key_marker.as_bytes();
        let rolled_up = crate::listing::marker_prefix(
            marker,
            q.prefix.as_bytes(),
            q.delimiter.as_bytes(),
            None,
        );
        let start = match (marker.is_empty(), rolled_up, q.upload_id_marker) {
            (true, _, _) => Start::Beginning,
            // A key marker inside a common prefix (or the prefix itself): S3
            // lists the prefix only when it sorts after the marker, so the
            // page starts after everything under it, upload-id marker or not.
            (false, Some(cp), _) => Start::After(cp.to_vec()),
            // After that upload of that key.
            (false, None, Some(id)) => {
                let mut name = marker.to_vec();
                name.push(0);
                name.extend_from_slice(&id.to_be_bytes());
                Start::After(name)
            }
            // After every upload of that key.
            (false, None, None) => {
                let mut at = marker.to_vec();
                at.push(1);
                Start::At(at)
            }
        };
        let parent = keys::object_prefix(&q.volume, &q.bucket);
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::UPLOADS_CF,
                parent: &parent,
                prefix: q.prefix.as_bytes(),
                delimiter: q.delimiter.as_bytes(),
                start,
                max: self.page_size(q.max_uploads),
                seek_after: self.seek_after,
                terminator: Some(0),
                current_only: None,
            },
            self.item_budget(),
            |item| match item {
                Item::Entry { name, value } => {
                    let (key, id) = keys::split_key_run(&name)
                        .ok_or_else(|| OmError::Internal("malformed upload entry".to_string()))?;
                    let key = utf8(key.to_vec())?;
                    let (t, bytes) = convert(key.clone(), table::decode::<UploadTable>(&value)?);
                    Ok((Listed::Entry(key, (id, t)), bytes))
                }
                Item::CommonPrefix(p) => {
                    let p = utf8(p)?;
                    let bytes = item_len(p.len());
                    Ok((Listed::Prefix(p), bytes))
                }
            },
        )?;
        let mut out = UploadPage {
            uploads: Vec::new(),
            common_prefixes: Vec::new(),
            truncated: page.resume.is_some(),
            next_key_marker: String::new(),
            next_upload_id_marker: None,
            stats: page.stats,
        };
        for item in page.items {
            match item {
                Listed::Entry(key, (id, t)) => {
                    out.next_key_marker = key;
                    out.next_upload_id_marker = Some(id);
                    out.uploads.push(t);
                }
                Listed::Prefix(p) => {
                    out.next_key_marker.clone_from(&p);
                    out.next_upload_id_marker = None;
                    out.common_prefixes.push(p);
                }
            }
        }
        if !out.truncated {
            out.next_key_marker.clear();
            out.next_upload_id_marker = None;
        }
        Ok(out)
    }

    /// Entries of the deleted-blocks table after `after`, oldest first. An
    /// entry stays (and is listed again) until acknowledged.
    /// `convert` turns each entry into what the response carries and says
    /// how many bytes it adds there.
    pub async fn list_deleted_blocks<T>(
        &self,
        c: Consistency,
        after: Option<DeletedId>,
        max: u32,
        mut convert: impl FnMut(DeletedId, DeletedBlocksRecord) -> (T, usize),
    ) -> Result<DeletedPage<T>, OmError> {
        self.read_as(c, crate::authz::Resource::Cluster, crate::authz::ALL)
            .await?;
        let start = match after {
            None => Start::Beginning,
            Some((index, seq)) => Start::After(keys::deleted_blocks_key(index, seq)),
        };
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::DELETED_BLOCKS_CF,
                parent: b"",
                prefix: b"",
                delimiter: b"",
                start,
                max: self.page_size(max),
                seek_after: usize::MAX,
                terminator: None,
                current_only: None,
            },
            self.item_budget(),
            |item| {
                let (name, value) = entry(item)?;
                if name.len() != 12 {
                    return Err(OmError::Internal(
                        "malformed deleted-blocks key".to_string(),
                    ));
                }
                let index = u64::from_be_bytes(name[..8].try_into().unwrap_or_default());
                let seq = u32::from_be_bytes(name[8..].try_into().unwrap_or_default());
                let (t, bytes) =
                    convert((index, seq), table::decode::<DeletedBlocksTable>(&value)?);
                Ok((((index, seq), t), bytes))
            },
        )?;
        let truncated = page.resume.is_some();
        Ok(DeletedPage {
            last: if truncated {
                page.items.last().map(|(id, _)| *id)
            } else {
                None
            },
            entries: page.items.into_iter().map(|(_, t)| t).collect(),
            truncated,
            stats: page.stats,
        })
    }
}

fn utf8(b: Vec<u8>) -> Result<String, OmError> {
    String::from_utf8(b).map_err(|_| OmError::Internal("non-UTF-8 name in a table".to_string()))
}

/// The name and value of a table entry; listings without a delimiter see
/// nothing else.
fn entry(item: Item) -> Result<(Vec<u8>, Vec<u8>), OmError> {
    match item {
        Item::Entry { name, value } => Ok((name, value)),
        Item::CommonPrefix(_) => Err(OmError::Internal(
            "a common prefix in a listing without a delimiter".to_string(),
        )),
    }
}

/// Reads one page of `S` under `parent` + `prefix`, after `start_after`, with
/// one native seek and at most `max` nexts (the last tells whether more
/// follow), converting each record with `convert`, which also says how many
/// bytes it adds to the response; the page stops before its items pass
/// `max_bytes` (its first item is always taken).
pub fn list_page<S: TableSchema, T>(
    db: &DB,
    parent: &[u8],
    prefix: &str,
    start_after: &str,
    (max, max_bytes): (usize, usize),
    mut convert: impl FnMut(S::Value) -> (T, usize),
) -> Result<Page<T>, OmError> {
    let start = if start_after.is_empty() {
        Start::Beginning
    } else {
        Start::After(start_after.as_bytes().to_vec())
    };
    let page = scan_page_within(
        db,
        &ScanSpec {
            table: S::CF,
            parent,
            prefix: prefix.as_bytes(),
            delimiter: b"",
            start,
            max,
            seek_after: usize::MAX,
            terminator: None,
            current_only: None,
        },
        max_bytes,
        |item| {
            let (name, value) = entry(item)?;
            let (t, bytes) = convert(table::decode::<S>(&value)?);
            Ok(((utf8(name)?, t), bytes))
        },
    )?;
    let truncated = page.resume.is_some();
    let next_start_after = if truncated {
        page.items
            .last()
            .map(|(n, _)| n.clone())
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok(Page {
        items: page.items,
        truncated,
        next_start_after,
        stats: page.stats,
    })
}

/// `list_page` of only the records `visible` admits: pages are read until
/// `max` visible records are found or the table ends, and a truncated page
/// resumes after its last visible record, so neither the records nor the
/// continuation name anything hidden.
pub fn filtered_page<S: TableSchema, T>(
    db: &DB,
    parent: &[u8],
    prefix: &str,
    start_after: &str,
    (max, max_bytes): (usize, usize),
    visible: impl Fn(&S::Value) -> bool,
    mut convert: impl FnMut(S::Value) -> (T, usize),
) -> Result<Page<T>, OmError> {
    let mut items = Vec::new();
    let mut bytes = 0;
    let mut after = start_after.to_string();
    let mut stats = IterStats::default();
    let truncated = loop {
        let room = (max - items.len(), max_bytes.saturating_sub(bytes));
        let page = list_page::<S, Option<T>>(db, parent, prefix, &after, room, |v| {
            if visible(&v) {
                let (t, n) = convert(v);
                bytes += n;
                (Some(t), n)
            } else {
                (None, 0)
            }
        })?;
        stats += page.stats;
        for (name, t) in page.items {
            if let Some(t) = t {
                items.push((name, t));
            }
        }
        if !page.truncated {
            break false;
        }
        if items.len() >= max || bytes >= max_bytes {
            break true;
        }
        after = page.next_start_after;
    };
    let next_start_after = match (truncated, items.last()) {
        (true, Some((n, _))) => n.clone(),
        _ => String::new(),
    };
    Ok(Page {
        truncated: truncated && !items.is_empty(),
        items,
        next_start_after,
        stats,
    })
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
