//! Reachability of one peer, and the connector that counts every connection
//! attempt to it.
//!
//! openraft retries replication to an unreachable peer on its own, but its
//! backoff only delays the requests of an open stream: when opening the
//! stream fails (connection refused), the next attempt followed at once, and
//! heartbeats tried a new connection every heartbeat interval. A leader with
//! one follower down spent most of a core reconnecting and logging. So the
//! network keeps a [`LinkState`] per peer:
//!
//! - the first connection failure marks the peer down (one WARN line) and
//!   schedules the next attempt after `PEER_RETRY_BASE`; each further failure
//!   doubles the wait up to `PEER_RETRY_CAP`;
//! - while a peer is down, an RPC before the scheduled time makes no
//!   connection attempt: replication streams wait for the time, other RPCs
//!   fail at once as unreachable; the first RPC at or after it is the probe
//!   (and moves the time on, so concurrent callers do not probe too);
//! - the first successful exchange marks the peer up again (one INFO line).
//!
//! Every TCP connection attempt goes through [`PeerConnector`], which counts
//! it in `om_raft_peer_connect_attempts_total{peer,addr}`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tonic::codegen::http::Uri;

use crate::NodeId;

/// First wait after a peer became unreachable.
pub const PEER_RETRY_BASE: Duration = Duration::from_millis(100);
/// Longest wait between two connection attempts to an unreachable peer.
pub const PEER_RETRY_CAP: Duration = Duration::from_secs(1);

/// The wait after the `failures`-th consecutive failure.
pub fn retry_delay(failures: u32) -> Duration {
    crate::transient::backoff_delay(failures, PEER_RETRY_BASE, PEER_RETRY_CAP)
}

/// The reachability of one peer: a pure state machine over instants, so its
/// decisions are tested without a network or a clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkState {
    down: Option<Down>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Down {
    since: Instant,
    failures: u32,
    retry_at: Instant,
}

/// Whether an RPC may go out now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Up, or the scheduled attempt is due (this caller is the probe).
    Now,
    /// Down; the next attempt is due at this instant.
    At(Instant),
}

/// A change worth one log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    WentDown,
    CameUp { down_for: Duration, failures: u32 },
}

impl LinkState {
    pub fn is_down(&self) -> bool {
        self.down.is_some()
    }

    pub fn admit(&mut self, now: Instant) -> Admit {
        match &mut self.down {
            None => Admit::Now,
            Some(d) if now >= d.retry_at => {
                // Reserve this slot: until the probe's outcome is known (or
                // if it never is), others wait for the following one.
                d.retry_at = now + retry_delay(d.failures);
                Admit::Now
            }
            Some(d) => Admit::At(d.retry_at),
        }
    }

    pub fn failed(&mut self, now: Instant) -> Option<Transition> {
        match &mut self.down {
            None => {
                self.down = Some(Down {
                    since: now,
                    failures: 1,
                    retry_at: now + retry_delay(1),
                });
                Some(Transition::WentDown)
            }
            Some(d) => {
                d.failures = d.failures.saturating_add(1);
                d.retry_at = now + retry_delay(d.failures);
                None
            }
        }
    }

    pub fn succeeded(&mut self, now: Instant) -> Option<Transition> {
        self.down.take().map(|d| Transition::CameUp {
            down_for: now.saturating_duration_since(d.since),
            failures: d.failures,
        })
    }
}

/// One peer as seen from this node, shared by every client to it.
#[derive(Debug)]
pub struct PeerHealth {
    target: NodeId,
    addr: String,
    state: Mutex<LinkState>,
    /// Mirrors `state.is_down()`, so the common case (up) takes no lock.
    down: AtomicBool,
}

impl PeerHealth {
    pub fn new(target: NodeId, addr: String) -> Self {
        crate::metrics::peer_up(target, &addr, true);
        PeerHealth {
            target,
            addr,
            state: Mutex::default(),
            down: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn admit(&self) -> Admit {
        if !self.down.load(Ordering::Acquire) {
            return Admit::Now;
        }
        self.lock().admit(Instant::now())
    }

    /// A connection attempt or an exchange failed for a reason that makes the
    /// peer unreachable.
    pub fn failed(&self, error: &dyn std::fmt::Display) {
        let t = {
            let mut s = self.lock();
            let t = s.failed(Instant::now());
            self.down.store(true, Ordering::Release);
            t
        };
        if t == Some(Transition::WentDown) {
            crate::metrics::peer_up(self.target, &self.addr, false);
            tracing::warn!(
                peer = self.target,
                addr = %self.addr,
                error = %error,
                "raft peer unreachable; reconnecting with backoff (up to {:?} apart)",
                PEER_RETRY_CAP
            );
        }
    }

    /// The peer answered.
    pub fn succeeded(&self) {
        if !self.down.load(Ordering::Acquire) {
            return;
        }
        let t = {
            let mut s = self.lock();
            let t = s.succeeded(Instant::now());
            self.down.store(false, Ordering::Release);
            t
        };
        if let Some(Transition::CameUp { down_for, failures }) = t {
            crate::metrics::peer_up(self.target, &self.addr, true);
            tracing::info!(
                peer = self.target,
                addr = %self.addr,
                ?down_for,
                failures,
                "raft peer reachable again"
            );
        }
    }
}

/// Opens the TCP connections of one peer's channel: counts every attempt and
/// reports failures to the peer's health.
#[derive(Clone)]
pub struct PeerConnector {
    pub(crate) health: Arc<PeerHealth>,
    /// Mutual TLS to the peer, when on.
    pub(crate) tls: Option<Arc<om_tls::ClientTls>>,
}

impl tower_service::Service<Uri> for PeerConnector {
    type Response = TokioIo<om_tls::ClientStream>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let health = self.health.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            crate::metrics::peer_connect_attempt(health.target, &health.addr);
            match om_tls::connect(health.addr.as_str(), tls.as_deref()).await {
                Ok(s) => Ok(TokioIo::new(s)),
                Err(e) => {
                    health.failed(&e);
                    Err(e)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_down_peer_is_probed_on_a_capped_exponential_schedule() {
        let t0 = Instant::now();
        let mut s = LinkState::default();
        assert_eq!(s.admit(t0), Admit::Now);
        assert_eq!(s.failed(t0), Some(Transition::WentDown));
        // Further failures are not transitions: one log line per episode.
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..8 {
            let Admit::At(at) = s.admit(now) else {
                panic!("admitted before the scheduled attempt")
            };
            waits.push((at - now).as_millis());
            now = at;
            assert_eq!(s.admit(now), Admit::Now, "the probe is admitted when due");
            assert_eq!(s.failed(now), None);
        }
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000, 1000, 1000]);
        assert!(s.is_down());
        let up = s.succeeded(now + Duration::from_millis(5));
        assert_eq!(
            up,
            Some(Transition::CameUp {
                down_for: now + Duration::from_millis(5) - t0,
                failures: 9
            })
        );
        assert_eq!(
            s.succeeded(now),
            None,
            "only the first success is a transition"
        );
        assert_eq!(s.admit(now), Admit::Now);
    }

    #[test]
    fn a_probe_reserves_its_slot_even_without_an_outcome() {
        let t0 = Instant::now();
        let mut s = LinkState::default();
        s.failed(t0);
        let due = t0 + retry_delay(1);
        assert_eq!(s.admit(due), Admit::Now);
        // A second caller at the same instant waits for the next slot, and
        // a probe that never reports leaves the peer probed again later.
        assert_eq!(s.admit(due), Admit::At(due + retry_delay(1)));
        assert_eq!(s.admit(due + retry_delay(1)), Admit::Now);
    }
}
