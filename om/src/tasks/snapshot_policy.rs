//! When a node builds a snapshot.
//!
//! A snapshot is built from the whole state, so its cost grows with the state
//! while the log it lets the node purge grows with the writes. Building one
//! every fixed number of entries (openraft's `LogsSinceLast`) is fine for
//! small states and ruinous for large ones: at 10M keys a 737 MB snapshot took
//! longer to build than 10,000 writes took to arrive, so builds ran back to
//! back. A node here builds one once `--snapshot-every` entries were applied
//! since the last, and, when the last snapshot is larger than
//! `SMALL_SNAPSHOT_BYTES`, once at least as many log bytes were appended since
//! as that snapshot holds: building then costs at most about as much I/O as
//! the log it replaces, whatever the state size, and the log kept on disk is
//! bounded by about the snapshot's size.

use std::time::{Duration, Instant};

use om_raft_store::{LogStore, Raft, StateMachine};
use openraft::async_runtime::WatchReceiver;
use tokio::sync::watch;

/// Snapshots up to this size are built every `--snapshot-every` entries.
pub const SMALL_SNAPSHOT_BYTES: u64 = 64 << 20;

/// How often the policy looks at the node's progress.
pub const CHECK_EVERY: Duration = Duration::from_millis(100);

/// A trigger that produced no new snapshot (a build that failed, or one
/// openraft declined) is repeated after this long.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

/// Whether a snapshot is due: `entries_since` applied and `log_bytes_since`
/// appended since the last snapshot, which holds `snapshot_bytes` (0: none).
pub fn due(entries_since: u64, every: u64, log_bytes_since: u64, snapshot_bytes: u64) -> bool {
    entries_since >= every.max(1)
        && (snapshot_bytes <= SMALL_SNAPSHOT_BYTES || log_bytes_since >= snapshot_bytes)
}

/// Triggers snapshot builds by `due` until `stop`.
pub async fn run(
    raft: Raft,
    log: LogStore,
    state_machine: StateMachine,
    every: u64,
    mut stop: watch::Receiver<bool>,
) {
    // The snapshot index last seen and the log bytes appended at that time.
    let mut base: Option<(Option<u64>, u64)> = None;
    let mut triggered: Option<(Option<u64>, Instant)> = None;
    let metrics = raft.metrics();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(CHECK_EVERY) => {}
        }
        let (applied, snapshot) = {
            let m = metrics.borrow_watched();
            (
                m.last_applied.as_ref().map_or(0, |l| l.index),
                m.snapshot.as_ref().map(|l| l.index),
            )
        };
        let appended = log.appended_bytes();
        let (snap_seen, bytes_then) = *base.get_or_insert((snapshot, appended));
        let bytes_then = if snap_seen == snapshot {
            bytes_then
        } else {
            base = Some((snapshot, appended));
            appended
        };
        if triggered.is_some_and(|(at, when)| at == snapshot && when.elapsed() < RETRY_AFTER) {
            continue;
        }
        let entries_since = applied.saturating_sub(snapshot.unwrap_or(0));
        let snapshot_bytes = state_machine.snapshot_bytes().unwrap_or(0);
        if due(
            entries_since,
            every,
            appended.saturating_sub(bytes_then),
            snapshot_bytes,
        ) {
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
            triggered = Some((snapshot, Instant::now()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_snapshots_follow_the_entry_count_alone() {
        assert!(!due(9_999, 10_000, 0, 0));
        assert!(due(10_000, 10_000, 0, 0));
        assert!(due(10_000, 10_000, 0, SMALL_SNAPSHOT_BYTES));
        // `every` 0 would build on every poll; it means 1.
        assert!(!due(0, 0, 0, 0));
        assert!(due(1, 0, 0, 0));
    }

    #[test]
    fn large_snapshots_wait_for_as_many_log_bytes() {
        let big = 737_000_000;
        assert!(!due(1_000_000, 10_000, big - 1, big));
        assert!(due(1_000_000, 10_000, big, big));
        // The entry count still applies.
        assert!(!due(9_999, 10_000, 2 * big, big));
    }
}
