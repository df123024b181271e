//! The replicated retry cache: every command with a client id leaves its
//! result under (caller, client id, seq), so a retried request is answered
//! with the first answer instead of being applied twice.
//!
//! Rules 11 keep one record per write, stored under the retry cache's
//! current generation (a replicated counter, `keys::RETRY_GENERATION`); a
//! lookup tries the current generation and the one before. The leader
//! starts the next generation a TTL after it started this one
//! (`ExpireRetryCache.advance_generation`), and that command removes the
//! generations before the previous one with one range deletion. So an entry
//! lives from its write past one whole generation and at most two, no entry
//! needs an expiry index, and no clock decides what a lookup finds.
//!
//! Rules 10 and earlier kept two records per write (the entry by client and
//! seq, and an expiry index by creation time); entries of those rules stay
//! where they are until they expire, and a rules-11 lookup also tries there
//! while the leader says some may be left (`Command.retry_legacy`).

use om_proto::store::{Command, CommandResult, ExpireRetryCache, RetryCacheRecord, command_result};
use om_raft_store::{ApplyView, EntryWrites};

use super::ops::Operation;
use super::{Ctx, LEGACY_RETRY_EXPIRY_BATCH, MAX_RETRY_EXPIRY_BATCH, ok};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, RetryCacheTable};
use crate::store::view::StateRead;

impl Operation for om_proto::store::ExpireRetryCache {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
    }

    fn target(&self) -> String {
        Resource::Cluster.to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.expire_retry_cache(b, self)
    }
}

/// The retry cache's current generation.
pub fn current_generation(db: &(impl StateRead + ?Sized)) -> Result<u64, OmError> {
    table::get_counter(db, keys::RETRY_GENERATION, 0)
}

/// Where `cmd` keeps its entry: the current generation from rules 11, the
/// rules-10 place (`None`) before.
pub(super) fn generation_for(db: &ApplyView<'_>, cmd: &Command) -> Result<Option<u64>, OmError> {
    if !crate::rules::RETRY_GENERATIONS.holds(cmd.rules) {
        return Ok(None);
    }
    current_generation(db).map(Some)
}

/// The cached entry for `client`'s `cmd.seq`: in `generation` and the one
/// before, or where rules 10 kept it.
pub(super) fn lookup(
    db: &ApplyView<'_>,
    cmd: &Command,
    client: &str,
    generation: Option<u64>,
) -> Result<Option<RetryCacheRecord>, OmError> {
    let Some(now) = generation else {
        return table::get::<RetryCacheTable>(db, &keys::retry_key(client, cmd.seq));
    };
    for generation in [Some(now), now.checked_sub(1)].into_iter().flatten() {
        let k = keys::retry_generation_key(generation, client, cmd.seq);
        if let Some(rec) = table::get::<RetryCacheTable>(db, &k)? {
            return Ok(Some(rec));
        }
    }
    if cmd.retry_legacy {
        return table::get::<RetryCacheTable>(db, &keys::retry_key(client, cmd.seq));
    }
    Ok(None)
}

/// Stages `result` as `client`'s answer to `cmd.seq`.
pub(super) fn record(
    db: &ApplyView<'_>,
    batch: &mut EntryWrites<'_>,
    cmd: &Command,
    client: &str,
    generation: Option<u64>,
    result: &CommandResult,
) -> Result<(), OmError> {
    let mut rec = RetryCacheRecord {
        format: 0,
        created_ms: cmd.now_ms,
        result: Some(result.clone()),
        request_digest: cmd.request_digest.clone(),
    };
    if let Some(generation) = generation {
        let k = keys::retry_generation_key(generation, client, cmd.seq);
        return table::put::<RetryCacheTable>(db, batch, &k, &mut rec);
    }
    table::put::<RetryCacheTable>(db, batch, &keys::retry_key(client, cmd.seq), &mut rec)?;
    batch.put_cf(
        table::cf(db.rocks(), keys::RETRY_CACHE_CF)?,
        keys::retry_expiry_key(cmd.now_ms, client, cmd.seq),
        [],
    );
    Ok(())
}

impl Ctx<'_> {
    /// Removes at most a batch of the retry-cache entries stored the
    /// rules-10 way and created before `before_ms`, oldest first, and
    /// reports how many went, so the leader proposes the next batch at once
    /// when this one was full. From rules 11 it may first start the next
    /// generation (see the module's description).
    pub(super) fn expire_retry_cache(
        &self,
        b: &mut EntryWrites<'_>,
        c: &ExpireRetryCache,
    ) -> Result<CommandResult, OmError> {
        let max = match c.max_entries {
            0 => LEGACY_RETRY_EXPIRY_BATCH,
            n => n.min(MAX_RETRY_EXPIRY_BATCH),
        };
        let cf = table::cf(self.db.rocks(), keys::RETRY_CACHE_CF)?;
        if crate::rules::RETRY_GENERATIONS.holds(self.rules) && c.advance_generation {
            let now = current_generation(self.db)?;
            // A stale proposal (another advance came first) does nothing, so
            // two proposals in a row cannot cut a generation short.
            if now == c.from_generation {
                let next = now.checked_add(1).ok_or_else(|| {
                    OmError::precondition(
                        "RETRY_GENERATIONS_EXHAUSTED",
                        "from_generation",
                        "the retry cache has no next generation",
                    )
                })?;
                table::put_counter(self.db, b, keys::RETRY_GENERATION, next)?;
                b.delete_range_cf(
                    cf,
                    keys::RETRY_GENERATION_PREFIX,
                    keys::retry_generation_start(now),
                );
            }
        }
        let mut upper = keys::RETRY_EXPIRY_PREFIX.to_vec();
        upper.extend_from_slice(&c.before_ms.to_be_bytes());
        let mut it = self.db.iter(
            keys::RETRY_CACHE_CF,
            Some(keys::RETRY_EXPIRY_PREFIX.to_vec()),
            Some(upper),
        )?;
        let mut n = 0u32;
        while n < max {
            let Some((k, _)) = it.current() else { break };
            if let Some((_, main)) = keys::retry_key_from_expiry(k) {
                b.delete_cf(cf, main);
            }
            b.delete_cf(cf, k);
            n += 1;
            it.advance();
        }
        it.status()?;
        ok(command_result::Result::Count(
            om_proto::store::CountResult {
                count: u64::from(n),
            },
        ))
    }
}
