//! A store this member can no longer trust: RocksDB found a block whose
//! checksum does not match what was written (`Corruption`), or the disk
//! failed a read (EIO). Serving, or replicating, from it could hand out
//! what was never written, so the member stops instead (fail-stop): the
//! first such error, wherever it surfaces (a read served, the scrub in
//! `tasks::scrub`), is latched here, and the node's run loop ends with it
//! (`om` exits with status 1, saying why). The Raft core's own storage
//! errors stop it the same way. Rebuild the member from a peer
//! (docs/operations.md, "A member's store is corrupt").
//!
//! One latch per process: a production process runs one node.

use std::sync::OnceLock;

use tokio::sync::watch;

fn latch() -> &'static watch::Sender<Option<String>> {
    static L: OnceLock<watch::Sender<Option<String>>> = OnceLock::new();
    L.get_or_init(|| watch::channel(None).0)
}

/// Whether `e` says the store cannot be trusted: a checksum mismatch or
/// a failed read.
pub fn untrusted(e: &rocksdb::Error) -> bool {
    e.kind() == rocksdb::ErrorKind::Corruption || e.to_string().contains("Input/output error")
}

/// Latches `e` if it says the store cannot be trusted; true if so.
pub fn check(e: &rocksdb::Error) -> bool {
    if !untrusted(e) {
        return false;
    }
    report(e.to_string());
    true
}

/// Latches `why` (the first report wins).
pub fn report(why: String) {
    latch().send_if_modified(|v| {
        if v.is_some() {
            return false;
        }
        tracing::error!(%why, "the store cannot be trusted: stopping this member");
        metrics::counter!("om_store_untrusted_total").increment(1);
        *v = Some(why);
        true
    });
}

/// What was latched, if anything.
pub fn latched() -> Option<String> {
    latch().borrow().clone()
}

/// Resolves once the store was found untrusted, with why.
pub async fn wait() -> String {
    let mut rx = latch().subscribe();
    loop {
        if let Some(why) = rx.borrow_and_update().clone() {
            return why;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
