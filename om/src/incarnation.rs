//! Cluster incarnations: what keeps a forced new cluster and the members it
//! left behind from both serving.
//!
//! `--force-new-cluster` makes a survivor the only voter of a new
//! membership. The lost members' disks may come back (a StatefulSet brings
//! pods back with their volumes): they still hold the old membership, and
//! two of them are a majority of it, so they could elect a leader and
//! acknowledge writes the forced cluster never sees. So forcing starts a
//! new **incarnation**: a random id, recorded in `INCARNATION` in the data
//! directory together with the incarnations it replaced. Every Raft RPC
//! carries the sender's incarnation (`om-incarnation`) and the ones it
//! replaced (`om-superseded`), and the receiver judges it (`judge`):
//!
//! - the same incarnation: admitted;
//! - one the receiver's replaced: refused with `INCARNATION_SUPERSEDED`,
//!   and the sender, told so, **fences** itself;
//! - one that replaced the receiver's: an empty receiver (a wiped member
//!   being added back) adopts it; a receiver holding history fences itself,
//!   since that history is the old incarnation's;
//! - any other: refused with `INCARNATION_MISMATCH`.
//!
//! A member that restarts with its data also asks the other members of its
//! membership before it votes (`tasks::rejoin`), and fences itself when one
//! of them answers from an incarnation that replaced its own; it votes only
//! once a majority confirmed its incarnation. Since a leader needs a
//! majority, a leader of the old membership can only be elected if a
//! majority of its members came back without ever reaching the forced one.
//!
//! A fenced member serves nothing: its Raft port refuses every RPC but
//! `PeerState`, it sends none, it never campaigns, its public port refuses
//! every request with `SUPERSEDED`, and an answer it computed before it was
//! fenced is replaced by that refusal. `/readyz` says why, and so do the log
//! and `om_cluster_superseded`. The fence is recorded in `SUPERSEDED` in the
//! data directory and stays until an operator wipes the directory and adds
//! the member back.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use om_proto::raft::{FenceRecord, IncarnationRecord};
use prost::Message;
use tonic::metadata::AsciiMetadataValue;

/// Where a member's incarnation is recorded, in its data directory.
pub const FILE: &str = "INCARNATION";
/// Where a fenced member records why, in its data directory.
pub const FENCE_FILE: &str = "SUPERSEDED";
/// Where `om restore` records the backup a store was restored from, in the
/// data directory.
pub const RESTORED_FILE: &str = "RESTORED";
/// The Raft RPC header carrying the sender's incarnation.
pub const HEADER: &str = "om-incarnation";
/// The Raft RPC header carrying the incarnations the sender's replaced.
pub const SUPERSEDED_HEADER: &str = "om-superseded";
/// Most replaced incarnations a record keeps (the newest).
pub const MAX_SUPERSEDED: usize = 16;

/// What a receiver makes of a sender's incarnation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Admit,
    /// Refused: `reason` (a stable code) and why.
    Refuse {
        reason: &'static str,
        message: String,
    },
}

/// A sender's identity as its headers give it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Theirs {
    pub id: u64,
    pub superseded: Vec<u64>,
}

impl Theirs {
    /// From the headers' values (absent: incarnation 0, as a member that
    /// predates incarnations sends). `None` when a value is malformed.
    pub fn parse(id: Option<&str>, superseded: Option<&str>) -> Option<Theirs> {
        let id = match id {
            Some(v) => v.parse().ok()?,
            None => 0,
        };
        let superseded = match superseded {
            Some(v) if !v.is_empty() => v
                .split(',')
                .take(MAX_SUPERSEDED)
                .map(|p| p.parse().ok())
                .collect::<Option<Vec<u64>>>()?,
            _ => Vec::new(),
        };
        Some(Theirs { id, superseded })
    }
}

struct State {
    rec: IncarnationRecord,
    fence: Option<FenceRecord>,
    headers: Arc<Vec<(&'static str, AsciiMetadataValue)>>,
}

/// This member's incarnation and fence, shared by the Raft port, the
/// network, the public port and the probes.
pub struct Incarnation {
    dir: PathBuf,
    /// The backup this member's store was restored from, if it was.
    restored_from: String,
    state: RwLock<State>,
    cluster_id: Arc<crate::cluster_id::ClusterId>,
    /// Whether this member holds any history (log entries or a snapshot).
    has_history: RwLock<Option<Arc<dyn Fn() -> bool + Send + Sync>>>,
}

fn read<M: Message + Default>(p: &Path) -> std::io::Result<Option<M>> {
    match std::fs::read(p) {
        Ok(b) => M::decode(b.as_slice())
            .map(Some)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", p.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `m` to `dir/name` durably (a temporary file renamed into place).
fn write<M: Message>(dir: &Path, name: &str, m: &M) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&m.encode_to_vec())?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Removes this member's incarnation and fence (a restore starts a new
/// cluster, which has neither).
pub fn forget(dir: &Path) -> std::io::Result<()> {
    for name in [FILE, FENCE_FILE] {
        match std::fs::remove_file(dir.join(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn superseded_list(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

impl Incarnation {
    /// Reads the member's incarnation and fence from `dir`.
    pub fn open(
        dir: &Path,
        cluster_id: Arc<crate::cluster_id::ClusterId>,
    ) -> std::io::Result<Arc<Incarnation>> {
        let rec = read::<IncarnationRecord>(&dir.join(FILE))?.unwrap_or_default();
        let fence = read::<FenceRecord>(&dir.join(FENCE_FILE))?;
        let restored_from = match std::fs::read_to_string(dir.join(RESTORED_FILE)) {
            Ok(s) => s.trim().to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let i = Arc::new(Incarnation {
            dir: dir.to_path_buf(),
            restored_from,
            state: RwLock::new(State {
                rec,
                fence,
                headers: Arc::default(),
            }),
            cluster_id,
            has_history: RwLock::new(None),
        });
        i.refresh_headers();
        if let Some(f) = i.fenced() {
            tracing::error!(reason = %f, "FENCED: {}", fence_advice());
        }
        i.gauges();
        Ok(i)
    }

    /// Tells the judge how to see whether this member holds history.
    pub fn set_history_probe(&self, f: Arc<dyn Fn() -> bool + Send + Sync>) {
        *self.has_history.write().unwrap_or_else(|e| e.into_inner()) = Some(f);
    }

    fn holds_history(&self) -> bool {
        self.has_history
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            // Unknown: assume it does (never adopt blindly).
            .is_none_or(|f| f())
    }

    fn state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The backup this member's store was restored from (empty: none).
    pub fn restored_from(&self) -> &str {
        &self.restored_from
    }

    /// This member's incarnation (0: the cluster's first).
    pub fn id(&self) -> u64 {
        self.state().rec.id
    }

    /// The incarnations this member's replaced, newest first.
    pub fn superseded(&self) -> Vec<u64> {
        self.state().rec.superseded.clone()
    }

    /// Why this member serves nothing, if it is fenced.
    pub fn fenced(&self) -> Option<String> {
        self.state().fence.as_ref().map(|f| f.reason.clone())
    }

    /// The cluster's id, once this member holds it.
    pub fn cluster_id(&self) -> Option<Arc<str>> {
        self.cluster_id.get()
    }

    /// `cluster_id/incarnation`, as the public port tells clients.
    pub fn label(&self) -> Option<String> {
        let id = self.cluster_id.get()?;
        Some(format!("{id}/{}", self.id()))
    }

    fn refresh_headers(&self) {
        let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
        let mut h = Vec::new();
        if let Some(id) = self.cluster_id.get()
            && let Ok(v) = id.parse()
        {
            h.push((om_raft_store::network::CLUSTER_ID_HEADER, v));
        }
        if let Ok(v) = s.rec.id.to_string().parse() {
            h.push((HEADER, v));
        }
        if !s.rec.superseded.is_empty()
            && let Ok(v) = superseded_list(&s.rec.superseded).parse()
        {
            h.push((SUPERSEDED_HEADER, v));
        }
        s.headers = Arc::new(h);
    }

    fn gauges(&self) {
        let s = self.state();
        metrics::gauge!("om_cluster_superseded").set(if s.fence.is_some() { 1.0 } else { 0.0 });
    }

    /// Starts a new incarnation replacing this one (`--force-new-cluster`),
    /// begun by the membership entry at `began_at_index`. Returns its id.
    pub fn start_new(&self, began_at_index: u64) -> std::io::Result<u64> {
        let old = self.state().rec.clone();
        let mut id = rand::random::<u64>();
        while id == 0 || id == old.id || old.superseded.contains(&id) {
            id = rand::random::<u64>();
        }
        let mut superseded = vec![old.id];
        superseded.extend(old.superseded.iter().copied());
        superseded.truncate(MAX_SUPERSEDED);
        let rec = IncarnationRecord {
            id,
            superseded,
            began_at_index,
        };
        write(&self.dir, FILE, &rec)?;
        self.state.write().unwrap_or_else(|e| e.into_inner()).rec = rec;
        self.refresh_headers();
        Ok(id)
    }

    /// Takes on the sender's incarnation: an empty member a leader of
    /// that incarnation replicates to.
    fn adopt(&self, theirs: &Theirs) -> std::io::Result<()> {
        let rec = IncarnationRecord {
            id: theirs.id,
            superseded: theirs.superseded.clone(),
            began_at_index: 0,
        };
        write(&self.dir, FILE, &rec)?;
        self.state.write().unwrap_or_else(|e| e.into_inner()).rec = rec;
        self.refresh_headers();
        tracing::info!(
            incarnation = theirs.id,
            "joined the cluster's current incarnation"
        );
        Ok(())
    }

    /// Stops this member for good: it holds the history of an incarnation
    /// that `by` replaced. Idempotent; the first reason stays.
    pub fn fence(&self, by: u64, reason: String) {
        {
            let mut s = self.state.write().unwrap_or_else(|e| e.into_inner());
            if s.fence.is_some() {
                return;
            }
            let f = FenceRecord {
                reason: reason.clone(),
                by_incarnation: by,
            };
            if let Err(e) = write(&self.dir, FENCE_FILE, &f) {
                // Fenced in memory all the same; the restart probe fences
                // it again.
                tracing::error!(error = %e, "cannot record the fence");
            }
            s.fence = Some(f);
        }
        self.gauges();
        tracing::error!(reason = %reason, "FENCED: {}", fence_advice());
    }

    /// Judges a Raft RPC from a sender of cluster `their_cluster` (its
    /// `om-cluster-id`; `None` when it holds none) and incarnation `theirs`.
    pub fn judge(&self, their_cluster: Option<&str>, theirs: &Theirs) -> Judgement {
        if let Some(why) = self.fenced() {
            return Judgement::Refuse {
                reason: "MEMBER_SUPERSEDED",
                message: format!("this member serves nothing: {why}"),
            };
        }
        // A sender that holds no cluster state yet (an empty member) has
        // no incarnation to judge.
        if their_cluster.is_none() {
            return Judgement::Admit;
        }
        let (ours, ours_superseded) = {
            let s = self.state();
            (s.rec.id, s.rec.superseded.clone())
        };
        if theirs.id == ours {
            return Judgement::Admit;
        }
        if ours_superseded.contains(&theirs.id) {
            return Judgement::Refuse {
                reason: "INCARNATION_SUPERSEDED",
                message: format!(
                    "the sender belongs to incarnation {} of this cluster, which a forced new \
                     cluster (incarnation {ours}) replaced: wipe its data directory and add it \
                     back",
                    theirs.id
                ),
            };
        }
        if theirs.superseded.contains(&ours) {
            if self.cluster_id.get().is_none() || !self.holds_history() {
                return match self.adopt(theirs) {
                    Ok(()) => Judgement::Admit,
                    Err(e) => Judgement::Refuse {
                        reason: "INCARNATION_UNRECORDED",
                        message: format!("cannot record the cluster's incarnation: {e}"),
                    },
                };
            }
            let why = replaced(ours, theirs.id);
            self.fence(theirs.id, why.clone());
            return Judgement::Refuse {
                reason: "MEMBER_SUPERSEDED",
                message: why,
            };
        }
        Judgement::Refuse {
            reason: "INCARNATION_MISMATCH",
            message: format!(
                "the sender belongs to incarnation {} of this cluster, this member to \
                 incarnation {ours}; neither replaced the other",
                theirs.id
            ),
        }
    }

    /// Fences this member when a peer's answer to its probe comes from an
    /// incarnation that replaced its own; true when it did.
    pub fn check_peer(&self, their_cluster: &str, their_id: u64, superseded: &[u64]) -> bool {
        let ours = self.id();
        let same_cluster = self
            .cluster_id
            .get()
            .is_none_or(|c| their_cluster.is_empty() || *c == *their_cluster);
        if same_cluster && their_id != ours && superseded.contains(&ours) {
            self.fence(their_id, replaced(ours, their_id));
            return true;
        }
        false
    }
}

/// Why a member of incarnation `ours` that `by` replaced is fenced.
fn replaced(ours: u64, by: u64) -> String {
    format!(
        "this member holds the history of incarnation {ours}, which a forced new cluster \
         (incarnation {by}) replaced"
    )
}

/// What an operator does with a fenced member.
pub fn fence_advice() -> &'static str {
    "this member holds a history the cluster's current members do not continue (of an \
     incarnation that --force-new-cluster replaced, or a store restored from a backup while the \
     cluster kept running) and serves nothing until wiped: empty its data directory (on \
     Kubernetes, delete its PersistentVolumeClaim) and start it empty; a member of the current \
     membership then catches up by itself, another is started with --join and added back with \
     `omctl cluster add-node`"
}

impl om_raft_store::network::PeerIdentity for Incarnation {
    fn headers(&self) -> Arc<Vec<(&'static str, AsciiMetadataValue)>> {
        let h = self.state().headers.clone();
        // The cluster id arrives after start (InitCluster): add it once known.
        if self.cluster_id.get().is_some()
            && !h
                .iter()
                .any(|(n, _)| *n == om_raft_store::network::CLUSTER_ID_HEADER)
        {
            self.refresh_headers();
            return self.state().headers.clone();
        }
        h
    }

    fn silenced(&self) -> Option<String> {
        self.fenced()
            .map(|why| format!("this member is fenced and sends nothing: {why}"))
    }

    fn refused(&self, status: &tonic::Status) {
        let reason = status
            .metadata()
            .get("om-reason")
            .and_then(|v| v.to_str().ok());
        if reason == Some("INCARNATION_SUPERSEDED") {
            self.fence(
                0,
                format!(
                    "a member of the cluster's current incarnation refused it: {}",
                    status.message()
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests;
