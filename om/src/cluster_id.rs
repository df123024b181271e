//! The cluster's id: chosen by its first leader (`InitCluster`), replicated
//! like any state, and never changed. Members send it with every Raft RPC
//! (`om-cluster-id`) and refuse one from another cluster; AddNode refuses a
//! node whose store holds another cluster's state; a restored or re-created
//! cluster gets a new one.

use std::sync::{Arc, OnceLock};

use rocksdb::DB;

use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, ClusterIdTable};

/// The Raft RPC header that carries the sender's cluster id.
pub const HEADER: &str = "om-cluster-id";

/// Longest cluster id.
pub const MAX_BYTES: usize = 64;

/// A cluster id: 1 to `MAX_BYTES` ASCII letters, digits or `-`.
pub fn check(id: &str) -> Result<(), OmError> {
    if id.is_empty()
        || id.len() > MAX_BYTES
        || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(OmError::invalid(
            "INVALID_CLUSTER_ID",
            "cluster_id",
            format!("a cluster id is 1 to {MAX_BYTES} ASCII letters, digits or '-'"),
        ));
    }
    Ok(())
}

/// A new id: 128 random bits in hex.
pub fn generate() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// This node's view of the cluster id: read from the store until it is
/// there, then kept (it never changes once applied).
pub struct ClusterId {
    db: Arc<DB>,
    known: OnceLock<Arc<str>>,
}

impl ClusterId {
    pub fn new(db: Arc<DB>) -> Arc<Self> {
        Arc::new(ClusterId {
            db,
            known: OnceLock::new(),
        })
    }

    /// A view that knows `id` from the start (tests).
    pub fn known(db: Arc<DB>, id: &str) -> Arc<Self> {
        let c = ClusterId {
            db,
            known: OnceLock::new(),
        };
        let _ = c.known.set(id.into());
        Arc::new(c)
    }

    /// The id, once this node holds it.
    pub fn get(&self) -> Option<Arc<str>> {
        if let Some(id) = self.known.get() {
            return Some(id.clone());
        }
        let rec = table::get::<ClusterIdTable>(&self.db, keys::CLUSTER_ID_KEY)
            .ok()
            .flatten()?;
        Some(self.known.get_or_init(|| rec.cluster_id.into()).clone())
    }
}
