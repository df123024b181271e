//! Members' data volumes short of space. Each member reads its own free
//! bytes (the application does, every second) and tells leaders in every
//! append answer whether it is short (`Space::Low`: below the application's
//! minimum); one so short that it must take no more entries (`Space::Full`:
//! below half that minimum) refuses appends that carry entries with
//! `RESOURCE_EXHAUSTED`, so it stays up, serves, and catches up once space is
//! freed instead of running RocksDB out of space. A leader keeps what each
//! follower last said, to refuse writes a majority could not take and to
//! hand leadership to a member with room when its own volume runs short.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::NodeId;

/// How long a follower's answer about its space is believed: it answers
/// every append and heartbeat, so an older one is from a peer that stopped
/// answering.
pub const REPORT_TTL: Duration = Duration::from_secs(10);

/// A data volume's state as to space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Space {
    Ok,
    /// Below the minimum: writes that add data are refused.
    Low,
    /// Below half the minimum: no more entries are taken.
    Full,
}

impl Space {
    /// As carried in an append answer (`disk_space`); an unknown code is
    /// taken for room.
    pub fn from_code(code: u32) -> Space {
        match code {
            1 => Space::Low,
            2 => Space::Full,
            _ => Space::Ok,
        }
    }

    pub fn code(self) -> u32 {
        self as u32
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Space::Ok => "ok",
            Space::Low => "low",
            Space::Full => "full",
        }
    }
}

/// This member's space and, on a leader, its followers'.
#[derive(Debug)]
pub struct DiskSpace {
    me: NodeId,
    /// Free bytes as last read; `u64::MAX` until read.
    free: AtomicU64,
    /// The minimum free bytes (`--min-free-bytes`).
    min_free: AtomicU64,
    /// What each follower last said, and when.
    peers: Mutex<HashMap<NodeId, (Space, Instant)>>,
}

impl Default for DiskSpace {
    fn default() -> Self {
        DiskSpace {
            me: 0,
            free: AtomicU64::new(u64::MAX),
            min_free: AtomicU64::new(0),
            peers: Mutex::default(),
        }
    }
}

impl DiskSpace {
    /// A volume is `Low` below `min_free` bytes and `Full` below half that.
    /// Node `me`'s.
    pub fn new(me: NodeId, min_free: u64) -> Self {
        let d = DiskSpace {
            me,
            ..DiskSpace::default()
        };
        d.min_free.store(min_free, Ordering::Relaxed);
        d
    }

    /// `Err(why)` when this member is `Full` and an append brings
    /// `entries` (a heartbeat, with none, always passes: refusing it would
    /// start an election).
    pub fn admit_entries(&self, entries: usize) -> Result<(), String> {
        if entries == 0 || self.space() != Space::Full {
            return Ok(());
        }
        crate::metrics::append_refused_disk_full();
        Err(refusal(self.me, self.free(), self.min_free()))
    }

    pub fn min_free(&self) -> u64 {
        self.min_free.load(Ordering::Relaxed)
    }

    /// Records this volume's free bytes as just read.
    pub fn set_free(&self, bytes: u64) {
        self.free.store(bytes, Ordering::Relaxed);
    }

    pub fn free(&self) -> u64 {
        self.free.load(Ordering::Relaxed)
    }

    /// This member's state.
    pub fn space(&self) -> Space {
        classify(self.free(), self.min_free())
    }

    /// A follower said what its volume's state is.
    pub fn reported(&self, peer: NodeId, space: Space) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let old = peers.insert(peer, (space, Instant::now()));
        if old.map(|o| o.0) != Some(space) {
            crate::metrics::peer_space(peer, space.code());
            if space != Space::Ok {
                tracing::warn!(
                    peer,
                    space = space.as_str(),
                    "a member's data volume is short of space"
                );
            } else if old.is_some() {
                tracing::info!(peer, "a member's data volume has room again");
            }
        }
    }

    /// The followers that said within `REPORT_TTL` that they are short.
    pub fn short_peers(&self) -> Vec<(NodeId, Space)> {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers
            .iter()
            .filter(|(_, (s, at))| *s != Space::Ok && at.elapsed() < REPORT_TTL)
            .map(|(id, (s, _))| (*id, *s))
            .collect()
    }

    /// What `peer` said within `REPORT_TTL`, as `Ok` if nothing.
    pub fn peer(&self, peer: NodeId) -> Space {
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        match peers.get(&peer) {
            Some((s, at)) if at.elapsed() < REPORT_TTL => *s,
            _ => Space::Ok,
        }
    }
}

/// `free` bytes against a minimum of `min_free`.
pub fn classify(free: u64, min_free: u64) -> Space {
    if free >= min_free {
        Space::Ok
    } else if free >= min_free / 2 {
        Space::Low
    } else {
        Space::Full
    }
}

/// The text a `Full` member refuses entries with; its leader's network
/// recognises the refusal by its status code (`RESOURCE_EXHAUSTED`).
fn refusal(me: NodeId, free: u64, min_free: u64) -> String {
    format!(
        "DISK_FULL: node {me}'s data volume has {free} bytes free, below half of \
         --min-free-bytes {min_free}: it takes no more entries until space is freed"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_is_low_below_the_minimum_and_full_below_half() {
        assert_eq!(classify(100, 100), Space::Ok);
        assert_eq!(classify(99, 100), Space::Low);
        assert_eq!(classify(50, 100), Space::Low);
        assert_eq!(classify(49, 100), Space::Full);
        assert_eq!(classify(u64::MAX, 0), Space::Ok);
        assert_eq!(DiskSpace::new(1, 100).space(), Space::Ok);
    }

    #[test]
    fn a_report_is_believed_for_a_while_only() {
        let d = DiskSpace::new(1, 100);
        assert_eq!(d.peer(2), Space::Ok);
        d.reported(2, Space::Full);
        assert_eq!(d.peer(2), Space::Full);
        d.peers.lock().unwrap().get_mut(&2).unwrap().1 =
            Instant::now().checked_sub(REPORT_TTL).unwrap();
        assert_eq!(d.peer(2), Space::Ok);
    }

    #[test]
    fn a_full_member_refuses_entries_but_not_heartbeats() {
        let d = DiskSpace::new(1, 100);
        d.set_free(49);
        assert_eq!(d.admit_entries(0), Ok(()));
        let why = d.admit_entries(3).unwrap_err();
        assert!(
            why.starts_with("DISK_FULL: node 1's data volume has 49 bytes free"),
            "{why}"
        );
        d.set_free(60);
        assert_eq!(d.admit_entries(3), Ok(()));
        assert_eq!(Space::from_code(Space::Full.code()), Space::Full);
        assert_eq!(Space::from_code(9), Space::Ok);
    }
}
