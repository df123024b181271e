//! Leader tasks that expire or purge replicated state in bounded batches:
//! retry-cache entries past their TTL, open-key sessions past theirs, and
//! the children of recursively deleted directories. Each proposes through
//! Raft only while its node leads and only when one seek finds work, so an
//! idle leader proposes nothing.

use std::sync::Arc;
use std::time::Duration;

use om_proto::store::{ExpireRetryCache, command::Op};
use openraft::async_runtime::WatchReceiver;
use tokio::sync::watch;

use crate::service::{OmService, WriteId};
use crate::store::keys;

/// Retry-cache entries one `ExpireRetryCache` command removes by default. The
/// leader proposes batch after batch while they come back full, so expiry
/// keeps up with any write rate; the size only bounds one apply.
pub const RETRY_EXPIRY_BATCH: u32 = 4096;

/// The `before_ms` bound of a retry-cache expiry proposed by a leader that
/// has led for `led_for` (monotonic) since its wall clock read
/// `led_since_wall_ms`, or `None` while nothing may expire yet.
///
/// The rule: an entry is removed only once the TTL has passed on the clock of
/// the one leader that removes it. Entries are stamped with the wall clock of
/// the leader that proposed them, which may not agree with this one's, so a
/// leader expires nothing until it has itself led for a whole TTL: then every
/// entry created before its leadership began is older than the TTL in real
/// time, and every entry created since carries this leader's own stamps. A
/// stamp from a leader whose clock ran ahead only makes its entry live longer.
/// "Now" is also capped at the leadership's start plus the monotonic time
/// since, so this node's wall clock stepping forward cannot expire entries early.
pub fn retry_expiry_bound(
    led_for: Duration,
    led_since_wall_ms: u64,
    now_wall_ms: u64,
    ttl: Duration,
) -> Option<u64> {
    if led_for < ttl {
        return None;
    }
    let led_for_ms = u64::try_from(led_for.as_millis()).unwrap_or(u64::MAX);
    let now = now_wall_ms.min(led_since_wall_ms.saturating_add(led_for_ms));
    Some(now.saturating_sub(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)))
}

/// Whether any retry-cache entry stored the rules-10 way was created before
/// `before_ms` (one seek in its expiry index), so an idle leader proposes
/// nothing.
pub fn retry_entries_due(svc: &OmService, before_ms: u64) -> bool {
    let mut upper = keys::RETRY_EXPIRY_PREFIX.to_vec();
    upper.extend_from_slice(&before_ms.to_be_bytes());
    any_between(svc, keys::RETRY_EXPIRY_PREFIX, upper)
}

/// Whether any generation holds an entry (one seek): only then is there a
/// reason to start the next one.
fn generations_hold_entries(svc: &OmService) -> bool {
    any_between(svc, keys::RETRY_GENERATION_PREFIX, b"h".to_vec())
}

/// Whether the retry cache holds a key in `[from, to)` (one seek).
fn any_between(svc: &OmService, from: &[u8], to: Vec<u8>) -> bool {
    crate::store::iter::DeferredSeekIter::new(
        svc.db(),
        keys::RETRY_CACHE_CF,
        Some(from.to_vec()),
        Some(to),
    )
    .map(|mut it| it.has_current())
    .unwrap_or(true)
}

/// Whether entries stored the pre-11 way are known to be gone for the
/// rest of this leader's term: it has applied the term's first entry (so
/// every earlier entry), and its state holds none. Then its writes stop
/// asking apply to look for them (`OmService::stamp_retry`).
fn note_legacy_retry(svc: &OmService, m: &openraft::RaftMetrics<om_raft_store::TypeConfig>) {
    use openraft::vote::RaftLeaderId;
    let applied_term = m
        .last_applied
        .as_ref()
        .map(|l| l.committed_leader_id().term());
    if applied_term == Some(m.current_term)
        && !any_between(svc, keys::RETRY_EXPIRY_PREFIX, b"u".to_vec())
    {
        svc.note_legacy_retry_clear(m.current_term);
    }
}

/// On the leader, expires retry-cache entries older than `ttl`: starts the
/// next generation a TTL after this leader began or last started one (so an
/// entry lives at least one TTL and at most two; `apply::retry`), and
/// removes entries stored the rules-10 way a batch at a time until none is
/// due (see `retry_expiry_bound` for the clock rule).
pub async fn expire_retry_cache(
    svc: Arc<OmService>,
    ttl: Duration,
    batch: u32,
    mut stop: watch::Receiver<bool>,
) {
    let every = (ttl / 8).clamp(Duration::from_millis(100), Duration::from_secs(5));
    // (term, monotonic start, wall-clock start) of this node's leadership.
    let mut leading: Option<(u64, std::time::Instant, u64)> = None;
    // When this leader may start the next generation.
    let mut next_generation = std::time::Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let m = svc.raft().metrics().borrow_watched().clone();
        if m.state != openraft::ServerState::Leader {
            leading = None;
            continue;
        }
        if leading.is_none_or(|(term, _, _)| term != m.current_term) {
            let now = std::time::Instant::now();
            leading = Some((m.current_term, now, svc.now_ms()));
            // The generation a predecessor started may be younger than this
            // leadership: a whole TTL of it first.
            next_generation = now + ttl;
        }
        note_legacy_retry(&svc, &m);
        let Some((_, since, since_wall)) = leading else {
            continue;
        };
        if std::time::Instant::now() >= next_generation && generations_hold_entries(&svc) {
            match crate::apply::current_generation(svc.db()) {
                Ok(from) => {
                    let op = Op::ExpireRetryCache(ExpireRetryCache {
                        advance_generation: true,
                        from_generation: from,
                        ..Default::default()
                    });
                    match svc.propose_here(WriteId::default(), op).await {
                        // Counted from its commit: every entry the next
                        // advance removes was proposed before this one.
                        Ok(_) => next_generation = std::time::Instant::now() + ttl,
                        Err(e) => tracing::debug!(error = %e, "retry cache generation not started"),
                    }
                }
                Err(e) => tracing::warn!(error = %e, "retry cache generation unreadable"),
            }
        }
        let Some(before_ms) = retry_expiry_bound(since.elapsed(), since_wall, svc.now_ms(), ttl)
        else {
            continue;
        };
        while svc.raft().is_leader() && retry_entries_due(&svc, before_ms) {
            let op = Op::ExpireRetryCache(ExpireRetryCache {
                before_ms,
                max_entries: batch,
                ..Default::default()
            });
            match svc.propose_here(WriteId::default(), op).await {
                Ok(om_proto::store::command_result::Result::Count(c))
                    if c.count >= u64::from(batch) => {}
                Ok(_) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "retry cache expiry not proposed");
                    break;
                }
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}

/// On the leader, periodically proposes expiring open-key sessions older than
/// `ttl`; a full batch is followed at once by the next.
pub async fn expire_open_keys(svc: Arc<OmService>, ttl: Duration, mut stop: watch::Receiver<bool>) {
    let every = (ttl / 4).clamp(Duration::from_millis(500), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        while svc.raft().is_leader() {
            let before_ms = svc.now_ms().saturating_sub(ttl.as_millis() as u64);
            if !open_sessions_expired(&svc, before_ms) {
                break;
            }
            let op = Op::ExpireOpenKeys(om_proto::store::ExpireOpenKeys {
                before_ms,
                max_entries: crate::apply::OPEN_KEY_EXPIRY_BATCH,
            });
            match svc.propose_here(WriteId::default(), op).await {
                Ok(om_proto::store::command_result::Result::Count(c))
                    if c.count == u64::from(crate::apply::OPEN_KEY_EXPIRY_BATCH) => {}
                Ok(_) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "open-key expiry not proposed");
                    break;
                }
            }
        }
    }
}

/// Whether any session (key or file) was opened before `before_ms`: one seek
/// per table in the expiry indexes, so an idle leader proposes nothing.
pub fn open_sessions_expired(svc: &OmService, before_ms: u64) -> bool {
    [
        (keys::OPEN_KEYS_CF, keys::OPEN_EXPIRY_PREFIX),
        (keys::OPEN_FILES_CF, keys::OPEN_FILE_EXPIRY_PREFIX),
    ]
    .iter()
    .any(|(cf, prefix)| {
        let mut upper = prefix.to_vec();
        upper.extend_from_slice(&before_ms.to_be_bytes());
        crate::store::iter::DeferredSeekIter::new(svc.db(), cf, Some(prefix.to_vec()), Some(upper))
            .map(|mut it| it.has_current())
            .unwrap_or(true)
    })
}

/// Children purged per `PurgeDeletedDirs` command: bounds one apply.
pub const PURGE_BATCH: u32 = 1000;

/// Whether any recursively deleted directory awaits purging (one seek).
pub fn deleted_dirs_pending(svc: &OmService) -> bool {
    let Ok(mut it) =
        crate::store::iter::DeferredSeekIter::new(svc.db(), keys::DELETED_DIRS_CF, None, None)
    else {
        return false;
    };
    it.seek_to_first();
    it.has_current()
}

/// On the leader, purges recursively deleted directories in bounded batches
/// through Raft until none is left. Progress is replicated state: a new
/// leader (or a restarted one) continues where the last batch stopped.
pub async fn purge_deleted_dirs(svc: Arc<OmService>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        while svc.raft().is_leader() && deleted_dirs_pending(&svc) {
            let op = Op::PurgeDeletedDirs(om_proto::store::PurgeDeletedDirs {
                max_children: PURGE_BATCH,
            });
            match svc.propose_here(WriteId::default(), op).await {
                Ok(om_proto::store::command_result::Result::Count(c)) if c.count > 0 => {}
                Ok(_) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "deleted-directory purge not proposed");
                    break;
                }
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}

/// Retained versions one `ReclaimSnapshot` page examines.
pub const RECLAIM_PAGE: u32 = 1024;

/// The oldest deleted snapshot still being reclaimed (one seek).
pub fn deleted_snapshot_pending(svc: &OmService) -> Option<om_proto::store::SnapshotRecord> {
    let upper = keys::prefix_end(keys::DELETED_SNAPSHOT_PREFIX);
    let mut it = crate::store::iter::DeferredSeekIter::new(
        svc.db(),
        keys::SNAPSHOTS_CF,
        Some(keys::DELETED_SNAPSHOT_PREFIX.to_vec()),
        upper,
    )
    .ok()?;
    it.seek(keys::DELETED_SNAPSHOT_PREFIX);
    let (_, v) = it.current()?;
    crate::store::table::decode::<crate::store::table::SnapshotTable>(v).ok()
}

/// On the leader, reclaims deleted snapshots page by page through Raft:
/// each page drops the retained versions no live snapshot shows any more
/// and releases their blocks. The cursor is replicated state, so a new
/// leader continues where the last page stopped.
pub async fn reclaim_snapshots(svc: Arc<OmService>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        while svc.raft().is_leader() {
            let Some(s) = deleted_snapshot_pending(&svc) else {
                break;
            };
            let op = Op::ReclaimSnapshot(om_proto::store::ReclaimSnapshot {
                volume: s.volume,
                bucket: s.bucket,
                index: s.index,
                max: RECLAIM_PAGE,
            });
            if let Err(e) = svc.propose_here(WriteId::default(), op).await {
                tracing::debug!(error = %e, "snapshot reclaim not proposed");
                break;
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_expiry_waits_for_a_whole_ttl_of_leadership() {
        let ttl = Duration::from_secs(600);
        // Nothing expires before this leader has led for the TTL, whatever its
        // wall clock says (a clock ahead of the previous leader's included).
        assert_eq!(
            retry_expiry_bound(Duration::from_secs(599), 0, u64::MAX, ttl),
            None
        );
        // Then entries stamped more than a TTL ago on this clock go.
        let start = 1_000_000_000;
        assert_eq!(
            retry_expiry_bound(ttl, start, start + 600_000, ttl),
            Some(start)
        );
        assert_eq!(
            retry_expiry_bound(ttl * 2, start, start + 1_200_000, ttl),
            Some(start + 600_000)
        );
        // A wall clock that steps forward mid-leadership does not count.
        assert_eq!(
            retry_expiry_bound(ttl, start, start + 3_600_000, ttl),
            Some(start)
        );
        // One stepping back only delays expiry.
        assert_eq!(
            retry_expiry_bound(ttl, start, start + 300_000, ttl),
            Some(start - 300_000)
        );
    }
}
