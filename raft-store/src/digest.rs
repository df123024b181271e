//! The replica's state digest: a hash chain over every applied entry.
//!
//! `digest(i) = SHA-256(digest(i-1) ‖ term ‖ leader node ‖ index ‖ kind ‖
//! writes)`, where the writes are the bytes of the entry's write batch as the
//! application staged them (the batch's records, after its 12-byte header of
//! sequence number and count), or the membership's encoding for a membership
//! entry. Replicas that applied the same entries to the same state stage the
//! same records, so they hold the same digest at every index; one different
//! command, one nondeterministic write, changes every digest from then on.
//! (The records name column families by RocksDB's id, which follows the
//! order the store creates them in; new column families go at the end of
//! the list, so a store created by an older version numbers them alike.)
//!
//! The digest is stored in the applied state, in the same batch as the entry,
//! and travels in a snapshot file's header, so an installing node continues
//! the chain. Every `CHECKPOINT_EVERY` indexes the digest is also kept under
//! `digest/<index>` in `sm_meta` (node-local, the newest `CHECKPOINTS_KEPT`),
//! and the newest `RECENT_KEPT` digests are kept in memory: members compare
//! them at an index all of them applied, and narrow a mismatch down to the
//! first index that differs.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rocksdb::DB;

use crate::{LogId, io_err, keys};

/// A digest of the applied state (SHA-256).
pub type Digest = [u8; 32];

/// Indexes between two stored checkpoints.
pub const CHECKPOINT_EVERY: u64 = 1024;
/// Checkpoints kept in `sm_meta` (older ones are deleted as new ones land).
pub const CHECKPOINTS_KEPT: u64 = 256;
/// Per-index digests kept in memory.
pub const RECENT_KEPT: usize = 4096;

/// What an entry contributes to the chain besides its log id.
pub enum Contribution<'a> {
    Blank,
    /// The application's write batch (`WriteBatch::data`).
    Writes(&'a [u8]),
    /// The membership's encoding.
    Membership(&'a [u8]),
}

/// The chain's hash of `prev` and `log_id`, before the entry's contribution.
fn start(prev: &Digest, log_id: &LogId) -> ring::digest::Context {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(prev);
    ctx.update(&log_id.leader_id.term.to_be_bytes());
    ctx.update(&log_id.leader_id.node_id.to_be_bytes());
    ctx.update(&log_id.index.to_be_bytes());
    ctx
}

fn finish(ctx: ring::digest::Context) -> Digest {
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// The digest of a batch entry (`Command.batch`), fed one write's batch at
/// a time as each is applied: one hash per entry, over each write's records
/// with their length in front, so no two batches of writes hash alike.
pub struct BatchDigest(ring::digest::Context);

impl BatchDigest {
    pub fn new(prev: &Digest, log_id: &LogId) -> BatchDigest {
        let mut ctx = start(prev, log_id);
        ctx.update(&[3]);
        BatchDigest(ctx)
    }

    /// Adds one write's batch (`WriteBatch::data`, header skipped as in
    /// `next`).
    pub fn write(&mut self, batch: &[u8]) {
        let records = batch.get(12..).unwrap_or_default();
        self.0.update(&(records.len() as u64).to_be_bytes());
        self.0.update(records);
    }

    pub fn finish(self) -> Digest {
        finish(self.0)
    }
}

/// The digest after applying `log_id` with `what` onto `prev`.
pub fn next(prev: &Digest, log_id: &LogId, what: Contribution<'_>) -> Digest {
    let mut ctx = start(prev, log_id);
    match what {
        Contribution::Blank => ctx.update(&[0]),
        Contribution::Writes(batch) => {
            ctx.update(&[1]);
            // The header holds the sequence number RocksDB assigns at write
            // time (node-local) and the record count (implied by the records).
            ctx.update(batch.get(12..).unwrap_or_default());
        }
        Contribution::Membership(m) => {
            ctx.update(&[2]);
            ctx.update(m);
        }
    }
    finish(ctx)
}

/// A digest from stored bytes: empty (before the first entry, or a store
/// written before digests existed) is all zeroes.
pub fn from_bytes(b: &[u8]) -> std::io::Result<Digest> {
    if b.is_empty() {
        return Ok([0; 32]);
    }
    b.try_into()
        .map_err(|_| io_err(format!("state digest of {} bytes", b.len())))
}

/// The `sm_meta` key of the checkpoint at `index`.
pub fn checkpoint_key(index: u64) -> Vec<u8> {
    let mut k = keys::DIGEST_PREFIX.to_vec();
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// Digests a member can answer for: the newest in memory, the checkpoints
/// in its store. Shared between the state machine, which adds to it, and the
/// application, which answers its peers.
#[derive(Clone)]
pub struct Digests {
    db: Arc<DB>,
    recent: Arc<Mutex<VecDeque<(u64, Digest)>>>,
}

impl Digests {
    pub(crate) fn new(db: Arc<DB>) -> Digests {
        Digests {
            db,
            recent: Arc::default(),
        }
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Digest)>> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the digest at `index`, just applied.
    pub(crate) fn push(&self, index: u64, d: Digest) {
        let mut r = self.recent();
        if r.back()
            .is_some_and(|(i, _)| i.checked_add(1) != Some(index))
        {
            r.clear();
        }
        r.push_back((index, d));
        while r.len() > RECENT_KEPT {
            r.pop_front();
        }
    }

    /// Forgets the digests in memory (an installed snapshot replaced the
    /// history they describe).
    pub(crate) fn clear(&self) {
        self.recent().clear();
    }

    /// The applied index and digest, as stored.
    pub fn applied(&self) -> std::io::Result<Option<(u64, Digest)>> {
        let a = crate::applied::read_record(&self.db, None)?;
        let Some(last) = a.last_applied else {
            return Ok(None);
        };
        Ok(Some((last.index, from_bytes(&a.state_digest)?)))
    }

    /// The digest at `index`, if this node still knows it: in memory, or a
    /// stored checkpoint.
    pub fn at(&self, index: u64) -> std::io::Result<Option<Digest>> {
        if let Some(d) = self.recent().iter().find(|(i, _)| *i == index) {
            return Ok(Some(d.1));
        }
        if let Some((i, d)) = self.applied()?
            && i == index
        {
            return Ok(Some(d));
        }
        if !index.is_multiple_of(CHECKPOINT_EVERY) {
            return Ok(None);
        }
        let c = self
            .db
            .cf_handle(keys::SM_META_CF)
            .ok_or_else(|| io_err("sm_meta missing"))?;
        match self
            .db
            .get_pinned_cf(c, checkpoint_key(index))
            .map_err(io_err)?
        {
            Some(b) => Ok(Some(from_bytes(&b)?)),
            None => Ok(None),
        }
    }

    /// Every digest this node knows, ascending by index: the stored
    /// checkpoints, then the per-index ones in memory.
    pub fn known(&self) -> std::io::Result<Vec<(u64, Digest)>> {
        let c = self
            .db
            .cf_handle(keys::SM_META_CF)
            .ok_or_else(|| io_err("sm_meta missing"))?;
        let mut out = Vec::new();
        let mut ro = rocksdb::ReadOptions::default();
        ro.set_iterate_upper_bound(keys::DIGEST_END.to_vec());
        let mut it = self.db.raw_iterator_cf_opt(c, ro);
        it.seek(keys::DIGEST_PREFIX);
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            let Some(index) = k
                .strip_prefix(keys::DIGEST_PREFIX)
                .and_then(|i| i.try_into().ok())
                .map(u64::from_be_bytes)
            else {
                break;
            };
            out.push((index, from_bytes(v)?));
            it.next();
        }
        it.status().map_err(io_err)?;
        let recent = self.recent().clone();
        let first_recent = recent.front().map_or(u64::MAX, |(i, _)| *i);
        out.retain(|(i, _)| *i < first_recent);
        out.extend(recent);
        Ok(out)
    }
}

/// Test-only fault: makes this replica stage one write the others do not,
/// as a nondeterministic apply or a different entry under the same log id
/// would. Used to prove that divergence is detected.
#[derive(Default)]
pub struct ApplyFaults {
    /// Entries still to perturb (each gets an extra record in its batch).
    pub perturb: std::sync::atomic::AtomicU64,
}

#[cfg(test)]
mod tests {
    use openraft::vote::leader_id_adv::LeaderId;

    use super::*;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(LeaderId { term, node_id: 1 }, index)
    }

    #[test]
    fn the_chain_depends_on_every_input() {
        let z = [0u8; 32];
        let base = next(&z, &log_id(1, 5), Contribution::Writes(&[0; 20]));
        assert_eq!(
            base,
            next(&z, &log_id(1, 5), Contribution::Writes(&[0; 20])),
            "deterministic"
        );
        // The batch header (sequence number, count) is not hashed.
        let mut other_seq = [0u8; 20];
        other_seq[0] = 9;
        assert_eq!(
            base,
            next(&z, &log_id(1, 5), Contribution::Writes(&other_seq))
        );
        let mut other_record = [0u8; 20];
        other_record[15] = 1;
        for different in [
            next(&[1; 32], &log_id(1, 5), Contribution::Writes(&[0; 20])),
            next(&z, &log_id(2, 5), Contribution::Writes(&[0; 20])),
            next(&z, &log_id(1, 6), Contribution::Writes(&[0; 20])),
            next(&z, &log_id(1, 5), Contribution::Writes(&other_record)),
            next(&z, &log_id(1, 5), Contribution::Blank),
            next(&z, &log_id(1, 5), Contribution::Membership(&[])),
        ] {
            assert_ne!(base, different);
        }
    }

    #[test]
    fn stored_digests_are_32_bytes_or_empty() {
        assert_eq!(from_bytes(&[]).unwrap(), [0; 32]);
        assert_eq!(from_bytes(&[7; 32]).unwrap(), [7; 32]);
        assert!(from_bytes(&[7; 31]).is_err());
    }
}
