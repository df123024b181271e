//! Resumable positions of background scans.

use prost::Message;

use crate::store::iter::DeferredSeekIter;
use crate::store::keys;

/// Where a background scan (the lifecycle scanner, purges) stopped: the table
/// and the next key to visit. Saved in replicated state between runs, it lets
/// a scan resume after suspension, restart or leader change with one seek.
#[derive(Clone, PartialEq, Eq, Message)]
pub struct ScanCursor {
    #[prost(string, tag = "1")]
    pub table: String,
    /// The next key to visit (inclusive).
    #[prost(bytes = "vec", tag = "2")]
    pub next: Vec<u8>,
}

impl ScanCursor {
    /// Positions `it` at the cursor: exactly one native seek, however many
    /// deletions lie between the table's start and the cursor.
    pub fn resume(&self, it: &mut DeferredSeekIter<'_>) {
        it.seek(&self.next);
    }

    /// The cursor that continues after `key`.
    pub fn after(table: &str, key: &[u8]) -> ScanCursor {
        ScanCursor {
            table: table.to_string(),
            next: keys::key_successor(key),
        }
    }
}
