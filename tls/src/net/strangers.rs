//! What keeps strangers from holding a port (see the module's
//! "Strangers"): connections counted per source address, the pool of
//! unproven connections, and the addresses trusted for proving membership.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::Closer;

/// Source addresses trusted at once; the oldest goes first.
const MAX_TRUSTED: usize = 256;
/// How long an address stays trusted after its last member connection.
const TRUST_FOR: Duration = Duration::from_secs(3600);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Open connections by source address, and the addresses trusted.
#[derive(Default)]
pub(super) struct Sources {
    open: Mutex<HashMap<IpAddr, usize>>,
    trusted: Mutex<HashMap<IpAddr, Instant>>,
}

impl Sources {
    pub(super) fn is_trusted(&self, ip: IpAddr) -> bool {
        lock(&self.trusted)
            .get(&ip)
            .is_some_and(|t| t.elapsed() < TRUST_FOR)
    }

    /// Trusts `ip` for `TRUST_FOR` from now.
    pub(super) fn trust(&self, ip: IpAddr) {
        let mut trusted = lock(&self.trusted);
        if !trusted.contains_key(&ip)
            && trusted.len() >= MAX_TRUSTED
            && let Some(oldest) = trusted.iter().min_by_key(|(_, t)| **t).map(|(ip, _)| *ip)
        {
            trusted.remove(&oldest);
        }
        trusted.insert(ip, Instant::now());
    }

    /// Connections `ip` holds.
    pub(super) fn count(&self, ip: IpAddr) -> usize {
        lock(&self.open).get(&ip).copied().unwrap_or(0)
    }

    /// Counts a connection of `ip` unless it holds `cap` already.
    pub(super) fn take(&self, ip: IpAddr, cap: usize) -> bool {
        let mut open = lock(&self.open);
        let n = open.get(&ip).copied().unwrap_or(0);
        if n >= cap {
            return false;
        }
        open.insert(ip, n + 1);
        true
    }

    pub(super) fn release(&self, ip: IpAddr) {
        let mut open = lock(&self.open);
        if let Some(n) = open.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&ip);
            }
        }
    }
}

/// Releases a connection's count against its source address; a trusted
/// member's connection renews its address's trust when it ends, so a member
/// that reconnects after a blip is still known.
pub(super) struct SourceGuard {
    pub(super) ip: IpAddr,
    pub(super) sources: Arc<Sources>,
    pub(super) member: std::sync::atomic::AtomicBool,
}

impl Drop for SourceGuard {
    fn drop(&mut self) {
        self.sources.release(self.ip);
        if self.member.load(std::sync::atomic::Ordering::Relaxed) {
            self.sources.trust(self.ip);
        }
    }
}

/// An unproven connection's place in its port's pool.
pub(super) struct Unproven {
    permit: Mutex<Option<OwnedSemaphorePermit>>,
    closer: Closer,
    ip: IpAddr,
}

/// The unproven connections of a port, oldest first. When the pool is full
/// the oldest one is closed to make room: a client that proves itself
/// quickly (a handshake, a request) always gets in, and holding the pool
/// takes a stranger a steady stream of new connections.
pub(super) struct Pool {
    permits: Arc<Semaphore>,
    queue: Mutex<VecDeque<Arc<Unproven>>>,
    /// Most unproven connections of one address.
    per_source: usize,
    /// When an address holds its share: close its own oldest (members'
    /// pool) rather than refuse.
    evict_own: bool,
}

/// What `Pool::admit` decided.
pub(super) enum Admitted {
    In(Arc<Unproven>),
    /// In, after closing the oldest unproven connection.
    Evicted(Arc<Unproven>),
    /// Refused: the address holds its share of the pool already.
    Refused,
}

impl Pool {
    pub(super) fn new(size: usize, per_source: usize) -> Self {
        Pool {
            permits: Arc::new(Semaphore::new(size.max(1))),
            queue: Mutex::default(),
            per_source: per_source.max(1),
            evict_own: false,
        }
    }

    /// Trusted addresses' pool: each address up to `size` unproven
    /// connections, a new one closing that address's oldest when full.
    pub(super) fn for_members(size: usize) -> Self {
        Pool {
            evict_own: true,
            ..Pool::new(size, size)
        }
    }

    /// A place for a new unproven connection of `ip`, which `closer` closes.
    pub(super) fn admit(&self, ip: IpAddr, closer: Closer) -> Admitted {
        let mut queue = lock(&self.queue);
        queue.retain(|u| lock(&u.permit).is_some());
        let own_full = queue.iter().filter(|u| u.ip == ip).count() >= self.per_source;
        if own_full && !self.evict_own {
            return Admitted::Refused;
        }
        let acquired = match own_full {
            true => Err(()),
            false => self.permits.clone().try_acquire_owned().map_err(|_| ()),
        };
        let (permit, evicted) = match acquired {
            Ok(p) => (p, false),
            Err(()) => loop {
                // The oldest of this address when it holds its share, else
                // the oldest of all.
                let at = match own_full {
                    true => queue.iter().position(|u| u.ip == ip),
                    false => (!queue.is_empty()).then_some(0),
                };
                let Some(oldest) = at.and_then(|i| queue.remove(i)) else {
                    // Every place is held by connections proven since the
                    // sweep above, which give theirs back at once.
                    match self.permits.clone().try_acquire_owned() {
                        Ok(p) => break (p, false),
                        Err(_) => return Admitted::Refused,
                    }
                };
                let taken = lock(&oldest.permit).take();
                if let Some(p) = taken {
                    oldest.closer.close();
                    break (p, true);
                }
            },
        };
        let u = Arc::new(Unproven {
            permit: Mutex::new(Some(permit)),
            closer,
            ip,
        });
        queue.push_back(u.clone());
        if evicted {
            Admitted::Evicted(u)
        } else {
            Admitted::In(u)
        }
    }

    /// `u` proved itself or ended: its place goes back.
    pub(super) fn release(&self, u: &Arc<Unproven>) {
        if lock(&u.permit).take().is_some() {
            lock(&self.queue).retain(|x| !Arc::ptr_eq(x, u));
        }
    }
}
