//! The request layer between gRPC and Raft: stamps writes with the leader's
//! time and proposes them, makes reads linearizable, and runs the paginated
//! queries. Knows nothing of tonic.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use om_proto::store::{Command, command::Op, command_result};

use om_raft_store::{Raft, TypeConfig};
use openraft::ReadPolicy;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::{ClientWriteError, LinearizableReadError, RaftError};
use rocksdb::DB;

mod access;
mod backup;
mod batch;
pub mod clock;
mod cluster;
mod files;
mod forward;
mod lifecycle;
mod multipart;
mod namespace;
mod objects;
mod pages;
pub mod s3;
mod snapshots;
mod space;
mod tagging;
pub mod versions;

pub use crate::peers::forward::{Forwarder, MAX_FORWARD_MESSAGE, MAX_FORWARD_WRITES};
pub use access::Policy;
pub use cluster::{HANDOVER_TIMEOUT, MAX_MEMBERS, member_room};
pub use files::{Status, StatusListing, StatusPage};
pub use multipart::{PartPage, UploadListing, UploadPage};
pub use objects::{DeletedId, DeletedPage, KeyListing, KeyPage, OpenKeyPage};
pub use pages::{Page, filtered_page, list_page};

use crate::apply::into_outcome;
use crate::error::OmError;
use crate::listing::{PAGE_OVERHEAD_BYTES, field_len};

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
    /// The time this node stamps commands with (`clock`).
    clock: clock::Clock,
    /// Authorization (on with authentication); `None`: every caller may do
    /// everything.
    policy: Option<Arc<Policy>>,
    audit: Option<Arc<crate::audit::AuditLog>>,
    /// Whether this replica diverged (then it serves nothing).
    divergence: Option<Arc<crate::divergence::Divergence>>,
    cluster_id: Option<Arc<crate::cluster_id::ClusterId>>,
    /// This member's incarnation; once fenced, it serves nothing.
    incarnation: Option<Arc<crate::incarnation::Incarnation>>,
    /// This node's client TLS towards other members' Raft ports.
    peer_tls: Option<Arc<om_tls::ClientTls>>,
    /// When appends from a leader last arrived (stale reads' age).
    leader_contact: Option<Arc<om_raft_store::network::LeaderContact>>,
    /// How long a leader may stay silent before this node reports none: the
    /// longest election timeout (see `heard_leader`).
    leader_window: Duration,
    /// The oldest state a stale read accepts by default.
    max_staleness_ms: u64,
    /// Copies of the store taken for backups; `None`: backups refused.
    backups: Option<Arc<crate::backup::Backups>>,
    /// The way to the leader for writes this node serves as a follower;
    /// `None`: a follower answers NOT_LEADER and the client goes there.
    forwarder: Option<Arc<Forwarder>>,
    /// The term in which this node, leading and with that term's first
    /// entry applied, found no retry-cache entry stored the pre-11 way
    /// (0: not yet). Until then its commands ask apply to look there too.
    legacy_retry_clear_term: std::sync::atomic::AtomicU64,
    /// Proposes writes, several per entry under load (`batch`).
    proposer: Arc<batch::Proposer>,
    /// This member's data volume space (`--min-free-bytes`, read by
    /// `tasks::health`) and, leading, its followers'.
    disk: Arc<om_raft_store::disk::DiskSpace>,
    /// The keys S3 secrets are sealed under (`--secrets-key-file`).
    keyring: Option<Arc<crate::secrets::Keyring>>,
    /// Whether S3 secrets may be stored in plain text without a keyring
    /// (`--insecure`).
    plaintext_secrets: bool,
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
            proposer: batch::Proposer::new(raft.clone()),
            raft,
            db,
            node_id,
            max_page,
            request_timeout,
            seek_after,
            min_part_size: crate::apply::DEFAULT_MIN_PART_SIZE,
            lifecycle_day_ms: crate::lifecycle::DAY_MS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            clock: clock::Clock::default(),
            policy: None,
            audit: None,
            divergence: None,
            cluster_id: None,
            incarnation: None,
            peer_tls: None,
            leader_contact: None,
            leader_window: Duration::from_secs(3),
            max_staleness_ms: DEFAULT_MAX_STALENESS_MS,
            backups: None,
            forwarder: None,
            legacy_retry_clear_term: std::sync::atomic::AtomicU64::new(0),
            keyring: None,
            plaintext_secrets: true,
            disk: Arc::default(),
        }
    }

    /// Seals S3 secrets under `keyring`; without one, stores them in plain
    /// text only if `plaintext` (else refuses to create them).
    pub fn with_secrets(
        mut self,
        keyring: Option<Arc<crate::secrets::Keyring>>,
        plaintext: bool,
    ) -> Self {
        self.keyring = keyring;
        self.plaintext_secrets = plaintext;
        self
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

    /// Reports no leader once one has been silent for `window` (the
    /// longest election timeout).
    pub fn with_leader_window(mut self, window: Duration) -> Self {
        self.leader_window = window;
        self
    }

    /// The leader this node has heard from within the leader window: as a
    /// follower, appends (heartbeats included) from it; as the leader, a
    /// quorum's acknowledgement (or it is the only voter). openraft keeps
    /// naming a leader that stopped answering until an election succeeds,
    /// which a member cut off from the majority never sees.
    pub fn heard_leader(
        &self,
        m: &openraft::RaftMetrics<om_raft_store::TypeConfig>,
    ) -> Option<u64> {
        let leader = m.current_leader?;
        if leader == m.id {
            let voters = m.membership_config.membership().voter_ids().count();
            if voters <= 1 {
                return Some(leader);
            }
            let acked = m.last_quorum_acked.as_ref()?;
            return (openraft::Instant::elapsed(&**acked) <= self.leader_window).then_some(leader);
        }
        let since = self.leader_contact.as_ref()?.since()?;
        (since <= self.leader_window).then_some(leader)
    }

    /// Refuses every read and write once `i` says this member is fenced.
    pub fn with_incarnation(mut self, i: Arc<crate::incarnation::Incarnation>) -> Self {
        self.incarnation = Some(i);
        self
    }

    /// This member's incarnation, when tracked.
    pub fn incarnation(&self) -> Option<&Arc<crate::incarnation::Incarnation>> {
        self.incarnation.as_ref()
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
        self.check_not_superseded()?;
        match &self.divergence {
            Some(d) => d.check_serving(),
            None => Ok(()),
        }
    }

    /// Refuses everything once this member is fenced (see `incarnation`).
    pub fn check_not_superseded(&self) -> Result<(), OmError> {
        match self.incarnation.as_ref().and_then(|i| i.fenced()) {
            None => Ok(()),
            Some(why) => Err(OmError::Superseded(format!(
                "node {}: {why}; it serves nothing: {}",
                self.node_id,
                crate::incarnation::fence_advice()
            ))),
        }
    }

    /// Stamps no time below the newest applied (`clock`), with this
    /// node's wall clock skewed by `offset_ms` (tests of clock
    /// disagreement; 0 in production).
    pub fn with_clock(
        mut self,
        applied: Arc<std::sync::atomic::AtomicU64>,
        offset_ms: i64,
    ) -> Self {
        self.clock = clock::Clock::new(applied);
        self.clock.set_offset(offset_ms);
        self
    }

    /// Refuses writes that add data while the data volume has fewer than
    /// `disk`'s minimum free, or a majority of the voters do (`check_space`).
    pub fn with_disk(mut self, disk: Arc<om_raft_store::disk::DiskSpace>) -> Self {
        self.disk = disk;
        self
    }

    pub fn disk(&self) -> &om_raft_store::disk::DiskSpace {
        &self.disk
    }

    /// This node's clock (tests jump it with `Clock::set_offset`).
    pub fn clock(&self) -> &clock::Clock {
        &self.clock
    }

    /// The time the leader stamps into commands, in milliseconds since the
    /// epoch: the wall clock, kept from jumping (`clock`).
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
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

    /// Notes that this node leads `term`, has applied that term's first
    /// entry, and found no retry-cache entry stored the pre-11 way: within
    /// the term none can appear, since only this node proposes.
    pub(crate) fn note_legacy_retry_clear(&self, term: u64) {
        self.legacy_retry_clear_term
            .store(term, std::sync::atomic::Ordering::Release);
    }

    /// Stamps whether apply should also look for `cmd`'s retry-cache entry
    /// where rules 10 kept it (rules 11).
    pub(crate) fn stamp_retry(&self, cmd: &mut Command) {
        let clear = self
            .legacy_retry_clear_term
            .load(std::sync::atomic::Ordering::Acquire);
        // The term is read only once some term was found clear.
        cmd.retry_legacy = clear == 0 || clear != self.raft.metrics().borrow_watched().current_term;
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
    ///
    /// On a follower with a forwarder, the write goes to the leader with the
    /// next forwarded batch (`forward`), which checks, stamps and proposes it.
    pub async fn propose(&self, id: WriteId, op: Op) -> Result<command_result::Result, OmError> {
        // The operation's field limits, the very checks apply runs: the
        // handlers check only the edge's own policy (S3 names, ETag syntax).
        crate::apply::ops::limits(&op, crate::apply::RULES)?;
        self.check_not_diverged()?;
        let caller = self.caller()?;
        let Some(forwarder) = self.forwarding() else {
            return self.propose_as(id, op, caller).await;
        };
        let audited = self.audit.is_some().then(|| op.clone());
        let write = self.forwarded_write(Command {
            client_id: id.client_id,
            seq: id.seq,
            op: Some(op),
            request_digest: id.request_digest,
            ..Command::default()
        });
        let outcome = forwarder.forward(write).await;
        if outcome.is_ok() {
            self.hint_leader();
        }
        let outcome = outcome.and_then(into_outcome);
        if let Some(op) = &audited {
            self.audit_write(op, &outcome);
        }
        outcome
    }

    /// Names the leader's client address in the current request's answer
    /// (`om-leader`), after its write was forwarded there.
    fn hint_leader(&self) {
        if let OmError::NotLeader {
            leader_addr: Some(a),
            ..
        } = self.not_leader()
        {
            crate::authz::hint_leader(a);
        }
    }

    /// NOT_LEADER naming the leader this node knows, with its client address
    /// when the membership holds it.
    fn not_leader(&self) -> OmError {
        let m = self.raft.metrics();
        let m = m.borrow_watched();
        OmError::NotLeader {
            leader_id: m.current_leader,
            leader_addr: m
                .current_leader
                .and_then(|l| m.membership_config.membership().get_node(&l))
                .map(|n| n.grpc_addr.clone()),
        }
    }

    /// `propose` on this node only, for the leader's own work (expiry,
    /// lifecycle scans): never forwarded, since what such a command decides
    /// (e.g. an expiry bound) holds only for the node that leads.
    pub async fn propose_here(
        &self,
        id: WriteId,
        op: Op,
    ) -> Result<command_result::Result, OmError> {
        self.check_not_diverged()?;
        self.propose_as(id, op, None).await
    }

    async fn propose_as(
        &self,
        id: WriteId,
        op: Op,
        caller: Option<om_proto::store::Caller>,
    ) -> Result<command_result::Result, OmError> {
        self.check_space(&op)?;
        self.precheck(caller.as_ref(), &op)?;
        let audited = self.audit.is_some().then(|| op.clone());
        let mut cmd = Command {
            client_id: id.client_id,
            seq: id.seq,
            now_ms: self.now_ms(),
            op: Some(op),
            request_digest: id.request_digest,
            rules: crate::apply::RULES,
            caller,
            ..Default::default()
        };
        if !cmd.client_id.is_empty() {
            self.stamp_retry(&mut cmd);
        }
        // Boxed, as the write future it awaits (`batch::Proposer::propose`).
        let write = Box::pin(self.proposer.write(cmd));
        let outcome = match tokio::time::timeout(self.request_timeout, write).await {
            Ok(Ok(result)) => into_outcome(result),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                crate::metrics::proposal_failed("timeout");
                Err(OmError::Unavailable(format!(
                    "write not committed within {:?}; its outcome is unknown, retry with the same client id and seq",
                    self.request_timeout
                )))
            }
        };
        // Fenced while the write was in flight: it may have been committed
        // by the replaced incarnation, which is no acknowledgement.
        self.check_not_superseded()?;
        if let Some(op) = &audited {
            self.audit_write(op, &outcome);
        }
        outcome
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
}

impl OmService {}
