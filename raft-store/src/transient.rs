//! Transient storage errors and how snapshot file work retries them.
//!
//! Running out of file descriptors (`EMFILE`, `ENFILE`) or disk space
//! (`ENOSPC`) while writing a snapshot file says nothing about the data: the
//! same operation succeeds once descriptors or space are free again. openraft
//! treats any error from the state machine as the end of the Raft core, so the
//! snapshot paths retry these errors themselves, with a capped exponential
//! backoff, logging once per episode (the first failure and the recovery) and
//! counting every retry in `om_raft_snapshot_retries_total{op}`. Every other
//! error is returned as before: a storage error never becomes a silent retry.

use std::time::Duration;

/// First wait after a transient failure.
pub const RETRY_BASE: Duration = Duration::from_millis(50);
/// Longest wait between two attempts.
pub const RETRY_CAP: Duration = Duration::from_secs(5);

/// `EMFILE`, `ENFILE` or `ENOSPC`.
pub fn is_transient_io(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOSPC)
    )
}

/// The same shortages reported by RocksDB, which carries the OS error only in
/// its message (the `strerror` text).
pub fn is_transient_db(e: &rocksdb::Error) -> bool {
    e.kind() == rocksdb::ErrorKind::IOError && {
        let s = e.to_string();
        s.contains("Too many open files") || s.contains("No space left on device")
    }
}

/// The wait before retry number `attempt` (1-based): `base · 2^(attempt-1)`,
/// at most `cap`.
pub fn backoff_delay(attempt: u32, base: Duration, cap: Duration) -> Duration {
    let shift = attempt.saturating_sub(1).min(30);
    base.saturating_mul(1u32 << shift).min(cap)
}

/// Runs `op` until it succeeds or fails with an error `transient` does not
/// accept, sleeping `backoff_delay` between attempts, while `go_on()` holds
/// (it stops the retries of a state machine that was shut down). `op_name`
/// labels the log lines and the retry counter.
pub async fn retry<T, E, F, Fut>(
    op_name: &'static str,
    retries: &std::sync::atomic::AtomicU64,
    mut op: F,
    transient: impl Fn(&E) -> bool,
    go_on: impl Fn() -> bool,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut failures = 0u32;
    loop {
        match op().await {
            Ok(v) => {
                if failures > 0 {
                    tracing::info!(
                        op = op_name,
                        retries = failures,
                        "snapshot file operation succeeded after transient errors"
                    );
                }
                return Ok(v);
            }
            Err(e) if transient(&e) && go_on() => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(
                        op = op_name,
                        error = %e,
                        "transient storage error in a snapshot file operation; retrying with backoff"
                    );
                }
                crate::metrics::snapshot_retry(op_name);
                retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(backoff_delay(failures, RETRY_BASE, RETRY_CAP)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap() {
        let base = Duration::from_millis(50);
        let cap = Duration::from_secs(5);
        let d: Vec<u128> = (1..=10)
            .map(|a| backoff_delay(a, base, cap).as_millis())
            .collect();
        assert_eq!(d, [50, 100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
        assert_eq!(backoff_delay(u32::MAX, base, cap), cap);
        assert_eq!(backoff_delay(0, base, cap), base);
    }

    #[test]
    fn only_resource_shortages_are_transient() {
        for errno in [libc::EMFILE, libc::ENFILE, libc::ENOSPC] {
            assert!(is_transient_io(&std::io::Error::from_raw_os_error(errno)));
        }
        for errno in [libc::EIO, libc::ENOENT, libc::EACCES] {
            assert!(!is_transient_io(&std::io::Error::from_raw_os_error(errno)));
        }
        assert!(!is_transient_io(&std::io::Error::other("x")));
    }

    #[tokio::test]
    async fn retry_retries_transient_errors_only_while_allowed() {
        let retries = std::sync::atomic::AtomicU64::new(0);
        let mut calls = 0;
        let r: Result<u32, std::io::Error> = retry(
            "test",
            &retries,
            || {
                calls += 1;
                let n = calls;
                async move {
                    if n < 3 {
                        Err(std::io::Error::from_raw_os_error(libc::EMFILE))
                    } else {
                        Ok(n)
                    }
                }
            },
            is_transient_io,
            || true,
        )
        .await;
        assert_eq!(r.unwrap(), 3);
        assert_eq!(retries.load(std::sync::atomic::Ordering::Relaxed), 2);

        let r: Result<(), std::io::Error> = retry(
            "test",
            &retries,
            || async { Err(std::io::Error::from_raw_os_error(libc::EIO)) },
            is_transient_io,
            || true,
        )
        .await;
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO));

        let r: Result<(), std::io::Error> = retry(
            "test",
            &retries,
            || async { Err(std::io::Error::from_raw_os_error(libc::ENOSPC)) },
            is_transient_io,
            || false,
        )
        .await;
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
    }
}
