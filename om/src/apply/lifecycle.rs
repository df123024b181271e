//! SetBucketLifecycle (rules 4): a bucket's lifecycle configuration, replaced
//! as a whole or removed. The rules were validated by `apply::limits` (they
//! depend on no state); here only the bucket must exist.
//!
//! From rules 8 the configuration records who set it (`configured_by`), and
//! a scan page applies only while that principal holds DELETE on the bucket.
//!
//! LifecycleScan (rules 5): one page of a bucket's scan. The page must
//! continue the stored scan exactly (same bucket, same configuration, same
//! phase and cursor), else it is refused and changes nothing, so a page
//! proposed by a deposed leader or twice never applies twice. Each item is
//! checked again against the entry as it is now, the rules and the page's
//! `now_ms` and day length: an entry overwritten, retagged or no longer
//! eligible since the scanner read it is left alone. From rules 7 on, `Days`
//! count from when the entry was written (`eval::written_ms`); before, from
//! its creation time, which an overwrite keeps (entries of those rules
//! replay as they applied).

use om_proto::store::{
    BucketRecord, CommandResult, Empty, KeyRecord, LifecycleItem, LifecycleRecord, LifecycleScan,
    LifecycleScanRecord, LifecycleScanResult, SetBucketLifecycle, command_result,
};
use om_raft_store::EntryWrites;

use super::limits;
use super::ops::Operation;
use super::quota::Usage;
use super::{Ctx, LAYOUT_FSO, ok, versions};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::lifecycle::eval::{self, Subject};
use crate::lifecycle::scan::{self, PHASE_FILES, PHASE_IDLE};
use crate::store::keys;
use crate::store::table::{self, FileTable, LifecycleScanTable, LifecycleTable, UploadTable};
use crate::store::view::StateRead;

impl Operation for om_proto::store::SetBucketLifecycle {
    fn rights(&self, rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(
            Resource::Bucket(&self.volume, &self.bucket),
            authz::configure_rights(rules),
        )]
    }

    fn target(&self) -> String {
        Resource::Bucket(&self.volume, &self.bucket).to_string()
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::name("volume", &self.volume)?;
        limits::name("bucket", &self.bucket)?;
        if !self.delete {
            crate::lifecycle::validate(&self.rules, rules)?;
        }
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.set_bucket_lifecycle(b, self)
    }
}

impl Operation for om_proto::store::LifecycleScan {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
    }

    fn target(&self) -> String {
        Resource::Bucket(&self.volume, &self.bucket).to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::name("volume", &self.volume)?;
        limits::name("bucket", &self.bucket)?;
        crate::lifecycle::scan::check_page(self)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.lifecycle_scan(b, self)
    }
}

fn stale(message: String) -> OmError {
    OmError::precondition("STALE_LIFECYCLE_PAGE", "from", message)
}

impl Ctx<'_> {
    pub(super) fn set_bucket_lifecycle(
        &self,
        b: &mut EntryWrites<'_>,
        c: &SetBucketLifecycle,
    ) -> Result<CommandResult, OmError> {
        if !crate::rules::BUCKET_LIFECYCLE.holds(self.rules) {
            return Err(OmError::invalid(
                "UNSUPPORTED_COMMAND",
                "op",
                "lifecycle configurations need apply rules 4",
            ));
        }
        if !crate::rules::LEGACY_PREFIX_RULES.holds(self.rules)
            && c.rules.iter().any(|r| r.legacy_prefix)
        {
            return Err(OmError::invalid(
                "UNSUPPORTED_COMMAND",
                "rules.legacy_prefix",
                "rules in the legacy Prefix form need apply rules 10",
            ));
        }
        let bucket = self.bucket(&c.volume, &c.bucket)?;
        let key = keys::bucket_key(&c.volume, &c.bucket);
        if c.delete {
            table::delete::<LifecycleTable>(self.db, b, &key)?;
        } else {
            let mut rec = LifecycleRecord {
                format: 0,
                bucket_object_id: bucket.object_id,
                rules: c.rules.clone(),
                modification_time_ms: self.now,
                update_id: self.index,
                configured_by: if crate::rules::CONFIGURED_BY.holds(self.rules) {
                    self.caller.cloned()
                } else {
                    None
                },
            };
            table::put::<LifecycleTable>(self.db, b, &key, &mut rec)?;
        }
        ok(command_result::Result::Empty(Empty {}))
    }

    pub(super) fn lifecycle_scan(
        &self,
        b: &mut EntryWrites<'_>,
        c: &LifecycleScan,
    ) -> Result<CommandResult, OmError> {
        if !crate::rules::LIFECYCLE_SCAN.holds(self.rules) {
            return Err(OmError::invalid(
                "UNSUPPORTED_COMMAND",
                "op",
                "lifecycle scans need apply rules 5",
            ));
        }
        let mut bucket = self.bucket(&c.volume, &c.bucket)?;
        let bkey = keys::bucket_key(&c.volume, &c.bucket);
        let config = table::get::<LifecycleTable>(self.db, &bkey)?
            .filter(|cfg| cfg.bucket_object_id == bucket.object_id)
            .ok_or_else(|| {
                OmError::not_found(
                    "NO_SUCH_LIFECYCLE_CONFIGURATION",
                    "bucket",
                    format!(
                        "bucket {}/{} has no lifecycle configuration",
                        c.volume, c.bucket
                    ),
                )
            })?;
        if c.bucket_object_id != bucket.object_id || c.config_update_id != config.update_id {
            return Err(stale(format!(
                "the page was read under another configuration of {}/{}",
                c.volume, c.bucket
            )));
        }
        if crate::rules::CONFIGURED_BY.holds(self.rules)
            && let Some(by) = &config.configured_by
        {
            // The rules delete with the rights of whoever set them, as
            // they are now (the leader says whether `--admins` names them).
            let acting = om_proto::store::Caller {
                admin: c.configurer_admin,
                ..by.clone()
            };
            crate::authz::check(
                self.db,
                &acting,
                crate::authz::Resource::Bucket(&c.volume, &c.bucket),
                crate::authz::DELETE,
                self.rules,
            )?;
        }
        let fso = bucket.layout == LAYOUT_FSO;
        if fso != (c.phase == PHASE_FILES) {
            return Err(OmError::precondition(
                "LIFECYCLE_PHASE_MISMATCH",
                "phase",
                format!(
                    "phase {} does not walk a bucket of layout {}",
                    scan::phase_name(c.phase),
                    bucket.layout
                ),
            ));
        }
        let stored = table::get::<LifecycleScanTable>(self.db, &bkey)?;
        let current = stored
            .as_ref()
            .filter(|s| scan::is_current(s, &bucket, &config));
        let mut rec = if c.start_pass {
            if current.is_some_and(|s| s.phase != PHASE_IDLE) {
                return Err(stale(format!(
                    "a pass over {}/{} is under way",
                    c.volume, c.bucket
                )));
            }
            let old = stored.unwrap_or_default();
            LifecycleScanRecord {
                bucket_object_id: bucket.object_id,
                config_update_id: config.update_id,
                pass: old.pass + 1,
                phase: c.phase,
                pass_started_ms: self.now,
                ..carry_over(old)
            }
        } else {
            match current {
                Some(s) if s.phase == c.phase && s.cursor == c.from => s.clone(),
                _ => {
                    return Err(stale(format!(
                        "the page does not continue the scan of {}/{}",
                        c.volume, c.bucket
                    )));
                }
            }
        };
        // Checked; now act. Nothing below refuses.
        let mut freed = Usage::default();
        let mut seq = 0u32;
        let mut taken = LifecycleScanResult::default();
        for item in &c.items {
            if let Some(rule_id) =
                self.lifecycle_item(b, &bucket, &config, c, item, &mut seq, &mut freed)?
            {
                let name = eval::action_name(item.action).to_string();
                *taken.actions.entry(name.clone()).or_default() += 1;
                *rec.actions.entry(name.clone()).or_default() += 1;
                *rec.total_actions.entry(name).or_default() += 1;
                *rec.rule_actions.entry(rule_id).or_default() += 1;
            }
        }
        rec.evaluated += c.evaluated;
        rec.total_evaluated += c.evaluated;
        rec.cursor_ms = self.now;
        rec.last_resume_seeks = c.resume_seeks;
        rec.last_resume_before_cursor = c.resume_before_cursor;
        rec.cursor_newer_noncurrent = c.to_newer_noncurrent;
        if !c.phase_done {
            rec.cursor = c.to.clone();
            rec.cursor_null_version =
                crate::rules::SCAN_BY_MODIFICATION.holds(self.rules) && c.to_null_version;
        } else if scan::next_phase(c.phase) != PHASE_IDLE {
            rec.phase = scan::next_phase(c.phase);
            rec.cursor.clear();
            rec.cursor_newer_noncurrent = 0;
            rec.cursor_null_version = false;
        } else {
            rec.phase = PHASE_IDLE;
            rec.cursor.clear();
            rec.cursor_newer_noncurrent = 0;
            rec.cursor_null_version = false;
            rec.last_pass_started_ms = rec.pass_started_ms;
            rec.last_pass_completed_ms = self.now;
            rec.last_pass_evaluated = rec.evaluated;
            rec.last_pass_actions = rec.actions.clone();
        }
        if !taken.actions.is_empty() {
            // Frees only: never refused.
            let vol = self.charge(&mut bucket, freed)?;
            bucket.update_id = self.index;
            self.put_bucket(b, &mut bucket)?;
            self.put_volume(b, vol)?;
        }
        table::put::<LifecycleScanTable>(self.db, b, &bkey, &mut rec)?;
        ok(command_result::Result::LifecycleScan(taken))
    }

    /// Acts on one item if it is still eligible; returns the rule that
    /// decided it, or None when the entry is left alone.
    #[allow(clippy::too_many_arguments)]
    fn lifecycle_item(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        config: &LifecycleRecord,
        c: &LifecycleScan,
        item: &LifecycleItem,
        seq: &mut u32,
        freed: &mut Usage,
    ) -> Result<Option<String>, OmError> {
        let rules = &config.rules;
        if item.action == eval::ACTION_EXPIRE_FILE {
            return self.expire_file(b, bucket, rules, c, item, seq, freed);
        }
        let prefix = keys::object_prefix(&bucket.volume, &bucket.name);
        let Some(rel) = item.entry.strip_prefix(prefix.as_slice()) else {
            return Ok(None);
        };
        if item.action == eval::ACTION_ABORT_UPLOAD {
            let Some((key, upload_id)) = keys::split_key_run(rel) else {
                return Ok(None);
            };
            let key = String::from_utf8_lossy(key);
            let Some(up) = table::get::<UploadTable>(self.db, &item.entry)? else {
                return Ok(None);
            };
            let Some(due) = eval::upload_expiry(rules, &key, up.initiated_ms, c.day_ms)
                .filter(|d| d.is_due(self.now) && up.upload_id == item.update_id)
            else {
                return Ok(None);
            };
            for p in self.parts(upload_id)? {
                let origin = format!(
                    "part {} of upload {upload_id:016x} aborted by lifecycle rule {:?}",
                    p.part_number, due.rule_id
                );
                self.release_blocks(b, *seq, p.blocks, origin)?;
                *seq += 1;
            }
            self.end_upload(b, &item.entry, upload_id)?;
            return Ok(Some(due.rule_id.to_string()));
        }
        let (key, version) = keys::split_version(rel);
        let Ok(key) = std::str::from_utf8(key) else {
            return Ok(None);
        };
        let Some(rec) = self.key_get(&item.entry)? else {
            return Ok(None);
        };
        if rec.update_id != item.update_id {
            return Ok(None);
        }
        let subject = Subject {
            key,
            size: rec.size,
            tags: &rec.tags,
            sized: true,
        };
        let rule = match (item.action, version) {
            (eval::ACTION_EXPIRE, None) if !rec.delete_marker => {
                eval::current_expiry(rules, &subject, self.written_ms(&rec), c.day_ms)
                    .filter(|d| d.is_due(self.now))
                    .map(|d| d.rule_id)
            }
            (eval::ACTION_EXPIRE_NONCURRENT, Some(_)) => {
                let newer = self.newer_noncurrent(
                    &keys::key_run_prefix(&bucket.volume, &bucket.name, key),
                    &item.entry,
                    eval::newer_needed(rules),
                )?;
                eval::noncurrent_expiry(rules, &subject, rec.noncurrent_since_ms, newer, c.day_ms)
                    .filter(|d| d.is_due(self.now))
                    .map(|d| d.rule_id)
            }
            (eval::ACTION_REMOVE_DELETE_MARKER, None) if rec.delete_marker => {
                let run = keys::key_run_prefix(&bucket.volume, &bucket.name, key);
                if self.newest_noncurrent(&run)?.is_some() {
                    None
                } else {
                    eval::expired_marker_rule(rules, key, self.written_ms(&rec), c.day_ms, self.now)
                }
            }
            _ => None,
        };
        let Some(rule) = rule.map(str::to_string) else {
            return Ok(None);
        };
        if item.action == eval::ACTION_EXPIRE && bucket.versioning != versions::UNVERSIONED {
            self.add_delete_marker(b, bucket, key, *seq, freed)?;
        } else {
            self.remove_version(b, bucket, key, &versions::version_id(&rec), *seq, freed)?;
        }
        *seq += 1;
        Ok(Some(rule))
    }

    /// Expires the file of an FSO bucket at the item's path, if it is still
    /// there (the path resolved again: a file moved away is left alone), has
    /// the update id the scanner read and is still due.
    #[allow(clippy::too_many_arguments)]
    fn expire_file(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        rules: &[om_proto::v1::LifecycleRule],
        c: &LifecycleScan,
        item: &LifecycleItem,
        seq: &mut u32,
        freed: &mut Usage,
    ) -> Result<Option<String>, OmError> {
        let Ok(path) = std::str::from_utf8(&item.entry) else {
            return Ok(None);
        };
        let comps = crate::fs::components(path);
        let (parent, name, rec) = match crate::fs::stat(self.db, bucket.object_id, &comps, "path") {
            Ok(Some(crate::fs::Entry::File { parent, name, rec })) => (parent, name, rec),
            Ok(_) | Err(OmError::Request { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        if rec.update_id != item.update_id {
            return Ok(None);
        }
        let subject = Subject {
            key: path,
            size: rec.size,
            tags: &rec.tags,
            sized: true,
        };
        let Some(rule) = eval::current_expiry(rules, &subject, self.written_ms(&rec), c.day_ms)
            .filter(|d| d.is_due(self.now))
            .map(|d| d.rule_id.to_string())
        else {
            return Ok(None);
        };
        freed.free(Usage::removal(rec.size));
        let origin = format!(
            "{}/{}/{path} expired by lifecycle rule {rule:?}",
            bucket.volume, bucket.name
        );
        self.release_blocks(b, *seq, rec.blocks, origin)?;
        *seq += 1;
        table::delete::<FileTable>(self.db, b, &keys::fs_key(parent, &name))?;
        Ok(Some(rule))
    }

    /// The instant an entry's `Days` count from: when it was written (rules
    /// 7), or its creation time, as rules 5 and 6 applied it.
    fn written_ms(&self, rec: &KeyRecord) -> u64 {
        if crate::rules::SCAN_BY_MODIFICATION.holds(self.rules) {
            eval::written_ms(rec)
        } else {
            rec.creation_time_ms
        }
    }

    /// How many noncurrent versions of a key sort before `entry` in its
    /// run (are newer than it), as this command left them, counting at most
    /// `limit`: one seek and at most `limit` entries.
    fn newer_noncurrent(&self, run: &[u8], entry: &[u8], limit: u32) -> Result<u32, OmError> {
        if limit == 0 {
            return Ok(0);
        }
        let staged = self.staged_keys.borrow();
        let mut n = staged
            .range(run.to_vec()..entry.to_vec())
            .filter(|(_, v)| v.is_some())
            .count() as u32;
        let mut it = self
            .db
            .iter(keys::KEYS_CF, Some(run.to_vec()), Some(entry.to_vec()))?;
        while n < limit {
            let Some((k, _)) = it.current() else { break };
            if !staged.contains_key(k) {
                n += 1;
            }
            it.advance();
        }
        it.status()?;
        Ok(n.min(limit))
    }
}

/// A new pass's record: the totals and the last completed pass stay.
fn carry_over(old: LifecycleScanRecord) -> LifecycleScanRecord {
    LifecycleScanRecord {
        last_pass_started_ms: old.last_pass_started_ms,
        last_pass_completed_ms: old.last_pass_completed_ms,
        last_pass_evaluated: old.last_pass_evaluated,
        last_pass_actions: old.last_pass_actions,
        total_evaluated: old.total_evaluated,
        total_actions: old.total_actions,
        ..Default::default()
    }
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod scan_tests;

#[cfg(test)]
#[path = "lifecycle_fso_tests.rs"]
mod fso_tests;

#[cfg(test)]
#[path = "lifecycle_rewrite_tests.rs"]
mod rewrite_tests;

#[cfg(test)]
#[path = "lifecycle_model_tests.rs"]
mod model_tests;

#[cfg(test)]
mod tests {
    use crate::apply::LAYOUT_OBJECT_STORE;
    use crate::apply::tests::{Sm, setup};
    use crate::store::keys;
    use crate::store::table::{self, LifecycleTable};
    use om_proto::store::{self as st, command::Op};
    use om_proto::v1::{LifecycleExpiration, LifecycleRule};

    fn set(rules: Vec<LifecycleRule>, delete: bool) -> Op {
        Op::SetBucketLifecycle(st::SetBucketLifecycle {
            volume: "vol".into(),
            bucket: "bkt".into(),
            rules,
            delete,
        })
    }

    fn rule(days: u32) -> LifecycleRule {
        LifecycleRule {
            id: "r".into(),
            enabled: true,
            expiration: Some(LifecycleExpiration {
                days: Some(days),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn apply_checks_the_rules_and_ties_them_to_the_bucket() {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        // A command that never went through an edge is checked again.
        assert_eq!(sm.rejected(set(vec![rule(0)], false)), "INVALID_DAYS");
        assert_eq!(sm.rejected(set(vec![], false)), "INVALID_RULE_COUNT");
        assert_eq!(
            sm.rejected_rules(set(vec![rule(1)], false), 3),
            "UNSUPPORTED_COMMAND"
        );
        sm.ok(set(vec![rule(1)], false));
        let key = keys::bucket_key("vol", "bkt");
        let rec = table::get::<LifecycleTable>(&sm.db, &key).unwrap().unwrap();
        assert_eq!(rec.rules, vec![rule(1)]);
        let bucket = table::get::<table::BucketTable>(&sm.db, &key)
            .unwrap()
            .unwrap();
        assert_eq!(rec.bucket_object_id, bucket.object_id);
        sm.ok(set(vec![], true));
        assert!(
            table::get::<LifecycleTable>(&sm.db, &key)
                .unwrap()
                .is_none()
        );
    }
}
