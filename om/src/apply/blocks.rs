//! Block ids: allocating them from the replicated counter, laying them out
//! over a key, and counting the keys that share a block (copies) so a block
//! is reclaimed only when its last holder lets go.

use om_proto::store::{BlockRecord, DeletedBlocksRecord};
use om_raft_store::EntryWrites;

use super::Ctx;
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, DeletedBlocksTable};
use crate::store::view::StateRead;

impl Ctx<'_> {
    /// How many keys hold block `id`: 1 unless `block_refs` says otherwise.
    pub(super) fn block_holders(&self, id: u64) -> Result<u32, OmError> {
        if let Some(n) = self.holders.borrow().get(&id) {
            return Ok(*n);
        }
        match table::get_raw(self.db, keys::BLOCK_REFS_CF, &keys::block_ref_key(id))? {
            Some(v) => Ok(u32::from_be_bytes(v.as_ref().try_into().map_err(|_| {
                OmError::Internal(format!("corrupt holder count of block {id}"))
            })?)),
            None => Ok(1),
        }
    }

    pub(super) fn set_block_holders(
        &self,
        b: &mut EntryWrites<'_>,
        id: u64,
        n: u32,
    ) -> Result<(), OmError> {
        let cf = table::cf(self.db.rocks(), keys::BLOCK_REFS_CF)?;
        if n <= 1 {
            b.delete_cf(cf, keys::block_ref_key(id));
        } else {
            b.put_cf(cf, keys::block_ref_key(id), n.to_be_bytes());
        }
        self.holders.borrow_mut().insert(id, n);
        Ok(())
    }

    /// Adds one holder to each block (a copy now shares them). Every count
    /// is checked before the first is staged: from rules 1 a block already
    /// held `u32::MAX` times refuses the copy (rules-0 entries wrap, as the
    /// build that applied them did).
    pub(super) fn share_blocks(
        &self,
        b: &mut EntryWrites<'_>,
        blocks: &[BlockRecord],
    ) -> Result<(), OmError> {
        let mut counts = Vec::with_capacity(blocks.len());
        for blk in blocks {
            let n = self.block_holders(blk.block_id)?;
            let more = if !crate::rules::COUNTER_OVERFLOW.holds(self.rules) {
                n.wrapping_add(1)
            } else {
                n.checked_add(1).ok_or_else(|| {
                    OmError::precondition(
                        "COUNTER_OVERFLOW",
                        "src_key",
                        format!("block {} is shared by too many keys", blk.block_id),
                    )
                })?
            };
            counts.push((blk.block_id, more));
        }
        for (id, n) in counts {
            self.set_block_holders(b, id, n)?;
        }
        Ok(())
    }

    /// Drops one holder of each block; blocks whose last holder this was go
    /// to the deleted-blocks table under this entry's index and `seq`.
    pub(super) fn release_blocks(
        &self,
        b: &mut EntryWrites<'_>,
        seq: u32,
        blocks: Vec<BlockRecord>,
        origin: String,
    ) -> Result<(), OmError> {
        let mut freed = Vec::with_capacity(blocks.len());
        for blk in blocks {
            let n = self.block_holders(blk.block_id)?;
            if n > 1 {
                self.set_block_holders(b, blk.block_id, n - 1)?;
            } else if n == 1 {
                // Freed: a second release of it in this command is a bug.
                self.holders.borrow_mut().insert(blk.block_id, 0);
                freed.push(blk);
            } else {
                return Err(OmError::Internal(format!(
                    "block {} released twice in one command",
                    blk.block_id
                )));
            }
        }
        if freed.is_empty() {
            return Ok(());
        }
        let mut rec = DeletedBlocksRecord {
            format: 0,
            blocks: freed,
            origin,
        };
        table::put::<DeletedBlocksTable>(self.db, b, &self.deleted_blocks_key(seq), &mut rec)
    }

    /// Takes `n` fresh block ids from the replicated counter; its first
    /// write, so an exhausted counter is refused before anything is staged.
    pub(super) fn allocate(&self, b: &mut EntryWrites<'_>, n: u64) -> Result<Vec<u64>, OmError> {
        let first = table::get_counter(self.db, keys::NEXT_BLOCK_ID, 1)?;
        let end = first.checked_add(n).ok_or_else(|| {
            OmError::precondition("COUNTER_OVERFLOW", "", "the block id counter is exhausted")
        })?;
        if n > 0 {
            table::put_counter(self.db, b, keys::NEXT_BLOCK_ID, end)?;
        }
        Ok((first..end).collect())
    }
}

/// Block records for `ids` filled in order, each up to `block_size`,
/// covering `size` bytes (`ids` holds `size.div_ceil(block_size)` ids).
pub(super) fn lay_out(ids: Vec<u64>, size: u64, block_size: u64) -> Vec<BlockRecord> {
    let mut offset = 0;
    ids.into_iter()
        .map(|block_id| {
            let length = block_size.min(size.saturating_sub(offset));
            let blk = BlockRecord {
                block_id,
                offset,
                length,
            };
            offset += length;
            blk
        })
        .collect()
}
