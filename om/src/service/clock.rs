//! The time a node stamps into commands (creation and modification times,
//! lifecycle ages, audit lines): the wall clock, kept from jumping.
//!
//! From the last stamp taken in step with the wall clock, the stamp
//! advances by at least half and at most twice the monotonic time elapsed
//! (plus `SLACK_MS`), never below a stamp already handed out or the newest
//! time this node has seen applied. So a wall clock stepped back by
//! hours does not hand out times that go backwards (the stamp runs on at
//! half speed until the wall clock catches up), and one stepped forward
//! does not age data early (the stamp catches up at twice real time). Small
//! corrections (NTP slewing, under `SLACK_MS`) pass through at once. The
//! difference between the stamp and the wall clock is the gauge
//! `om_clock_adjustment_seconds`; past `WARN_MS` it is logged.
//!
//! Lease reads and the retry cache's expiry do not use it: they pace
//! themselves on the monotonic clock (`std::time::Instant`).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A step the stamp follows at once.
pub const SLACK_MS: u64 = 1_000;
/// An adjustment worth a warning.
pub const WARN_MS: u64 = 10_000;

#[derive(Debug, Default)]
pub struct Clock {
    /// Added to the wall clock (tests skew or jump a node's clock with it).
    offset_ms: AtomicI64,
    /// The newest command time this node applied (`apply::OmApplier`).
    applied: Arc<AtomicU64>,
    state: Mutex<State>,
    /// When the last warning was logged.
    warned: Mutex<Option<Instant>>,
}

/// What the bounds count from.
#[derive(Debug, Default)]
struct State {
    /// A stamp taken in step with the wall clock (or raised to a floor),
    /// and when: the next stamp lies between half and twice the time
    /// elapsed since (plus `SLACK_MS`) after it.
    base: Option<(u64, Instant)>,
    /// The last stamp handed out.
    last: u64,
}

impl Clock {
    /// A clock that never stamps below the times in `applied`.
    pub fn new(applied: Arc<AtomicU64>) -> Clock {
        Clock {
            applied,
            ..Clock::default()
        }
    }

    /// Skews the wall clock this clock reads by `ms` from now on.
    pub fn set_offset(&self, ms: i64) {
        self.offset_ms.store(ms, Ordering::Relaxed);
    }

    /// The wall clock as read, skew included.
    pub fn wall_ms(&self) -> u64 {
        super::now_ms().saturating_add_signed(self.offset_ms.load(Ordering::Relaxed))
    }

    /// The time to stamp now.
    pub fn now_ms(&self) -> u64 {
        let wall = self.wall_ms();
        let floor = self.applied.load(Ordering::Relaxed);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let t = match st.base {
            None => wall.max(floor),
            Some((b, at)) => {
                let d = u64::try_from(now.duration_since(at).as_millis()).unwrap_or(u64::MAX);
                let bounded = wall.clamp(
                    b.saturating_add(d / 2),
                    b.saturating_add(d.saturating_mul(2))
                        .saturating_add(SLACK_MS),
                );
                let t = bounded.max(st.last).max(floor);
                if t == wall || t > bounded {
                    // In step with the wall clock, or raised to a time
                    // already handed out or applied: bounds count from here.
                    st.base = Some((t, now));
                }
                t
            }
        };
        if st.base.is_none() {
            st.base = Some((t, now));
        }
        st.last = t;
        drop(st);
        let adjustment = t as i64 - wall as i64;
        metrics::gauge!("om_clock_adjustment_seconds").set(adjustment as f64 / 1000.0);
        if adjustment.unsigned_abs() > WARN_MS {
            self.warn(adjustment);
        }
        t
    }

    fn warn(&self, adjustment: i64) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.is_some_and(|w| w.elapsed().as_secs() < 60) {
            return;
        }
        *warned = Some(Instant::now());
        tracing::warn!(
            adjustment_ms = adjustment,
            "the wall clock jumped: the times this node stamps follow it at between half and \
             twice real time until they meet"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stepped back an hour, the stamp keeps going forward; stepped forward
    /// a day, it gains at most twice the time elapsed; applied times are a
    /// floor; small steps pass through.
    #[test]
    fn stamps_neither_go_back_nor_leap() {
        let applied = Arc::new(AtomicU64::new(0));
        let c = Clock::new(applied.clone());
        let t0 = c.now_ms();
        c.set_offset(-3_600_000);
        let t1 = c.now_ms();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let t2 = c.now_ms();
        assert!(t1 >= t0 && t2 > t1, "{t0} {t1} {t2}");
        assert!(t2 - t1 <= 2 * 60 + SLACK_MS);
        c.set_offset(86_400_000);
        let t3 = c.now_ms();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let t4 = c.now_ms();
        assert!(t4 - t2 < 4 * 100 + 2 * SLACK_MS, "{t2} {t3} {t4}");
        applied.store(t4 + 7_200_000, Ordering::Relaxed);
        assert!(c.now_ms() >= t4 + 7_200_000);
        let fresh = Clock::new(Arc::default());
        let a = fresh.now_ms();
        fresh.set_offset(500);
        assert!(fresh.now_ms() >= a + 500);
    }
}
