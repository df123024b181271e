//! SetBucketLifecycle (rules 4): a bucket's lifecycle configuration, replaced
//! as a whole or removed. The rules were validated by `apply::limits` (they
//! depend on no state); here only the bucket must exist.

use om_proto::store::{CommandResult, Empty, LifecycleRecord, SetBucketLifecycle, command_result};
use rocksdb::WriteBatch;

use super::{Ctx, ok};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, LifecycleTable};

impl Ctx<'_> {
    pub(super) fn set_bucket_lifecycle(
        &self,
        b: &mut WriteBatch,
        c: &SetBucketLifecycle,
    ) -> Result<CommandResult, OmError> {
        if self.rules < 4 {
            return Err(OmError::invalid(
                "UNSUPPORTED_COMMAND",
                "op",
                "lifecycle configurations need apply rules 4",
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
            };
            table::put::<LifecycleTable>(self.db, b, &key, &mut rec)?;
        }
        ok(command_result::Result::Empty(Empty {}))
    }
}

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
