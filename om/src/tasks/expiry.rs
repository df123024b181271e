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

/// Whether any retry-cache entry was created before `before_ms` (one seek in
/// the expiry index), so an idle leader proposes nothing.
pub fn retry_entries_due(svc: &OmService, before_ms: u64) -> bool {
    let mut upper = keys::RETRY_EXPIRY_PREFIX.to_vec();
    upper.extend_from_slice(&before_ms.to_be_bytes());
    crate::store::iter::DeferredSeekIter::new(
        svc.db(),
        keys::RETRY_CACHE_CF,
        Some(keys::RETRY_EXPIRY_PREFIX.to_vec()),
        Some(upper),
    )
    .map(|mut it| it.has_current())
    .unwrap_or(true)
}

/// On the leader, expires retry-cache entries older than `ttl` (see
/// `retry_expiry_bound` for the clock rule), a batch at a time until none is due.
pub async fn expire_retry_cache(
    svc: Arc<OmService>,
    ttl: Duration,
    batch: u32,
    mut stop: watch::Receiver<bool>,
) {
    let every = (ttl / 8).clamp(Duration::from_millis(100), Duration::from_secs(5));
    // (term, monotonic start, wall-clock start) of this node's leadership.
    let mut leading: Option<(u64, std::time::Instant, u64)> = None;
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
            leading = Some((m.current_term, std::time::Instant::now(), svc.now_ms()));
        }
        let Some((_, since, since_wall)) = leading else {
            continue;
        };
        let Some(before_ms) = retry_expiry_bound(since.elapsed(), since_wall, svc.now_ms(), ttl)
        else {
            continue;
        };
        while svc.raft().is_leader() && retry_entries_due(&svc, before_ms) {
            let op = Op::ExpireRetryCache(ExpireRetryCache {
                before_ms,
                max_entries: batch,
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
