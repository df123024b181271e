//! Apply's rules versions, by name. `Command.rules` is the version of
//! apply's rules the leader ran; a handler branches on a named [`Rule`]
//! wherever an existing command now does something else, so older entries
//! keep applying as they did on every replica. A new behaviour change adds
//! a `Rule` here and a row to [`HISTORY`], and raises [`CURRENT`]; tidy
//! refuses a bare `rules >= N` anywhere else and a `Rule` missing from the
//! history.

/// A change to what apply does, in force from rules `since` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    pub since: u32,
}

impl Rule {
    /// Whether an entry of rules `rules` applies with this change.
    pub const fn holds(self, rules: u32) -> bool {
        rules >= self.since
    }
}

/// The version of apply's rules this binary proposes and the newest it
/// applies (see ARCHITECTURE.md, "What apply may read"). An entry of a
/// newer version stops the state machine rather than diverge.
pub const CURRENT: u32 = 16;

/// Usage counters (a volume's used bytes, a bucket's key and directory
/// counts) and the quotas enforced on them.
pub const USAGE_COUNTERS: Rule = Rule { since: 1 };
/// Counter overflow is refused (`COUNTER_OVERFLOW`); rules-0 entries wrap,
/// as the release build that applied them did.
pub const COUNTER_OVERFLOW: Rule = Rule { since: 1 };
/// A volume's owner is bounded (`INVALID_OWNER`).
pub const OWNER_BOUND: Rule = Rule { since: 1 };
/// Directories keep the bounds of their subtree (deepest path, longest).
pub const SUBTREE_BOUNDS: Rule = Rule { since: 1 };
/// The caller is checked against the ACLs before the handler runs (and a
/// bucket's creator is its owner).
pub const ACL_AT_APPLY: Rule = Rule { since: 2 };
/// SetBucketLifecycle exists; DeleteBucket removes the configuration.
pub const BUCKET_LIFECYCLE: Rule = Rule { since: 4 };
/// Object tags: PutKeyTagging, and tags on PutKey, OpenKey,
/// InitiateMultipart and CopyKey (a tagging directive).
pub const OBJECT_TAGS: Rule = Rule { since: 5 };
/// LifecycleScan pages; DeleteBucket removes the bucket's scan record.
pub const LIFECYCLE_SCAN: Rule = Rule { since: 5 };
/// PutKeys.
pub const PUT_KEYS: Rule = Rule { since: 6 };
/// A scan counts `Days` from an entry's modification time (S3's
/// Last-Modified), and records whether its cursor is a `null` version.
pub const SCAN_BY_MODIFICATION: Rule = Rule { since: 7 };
/// InitCluster.
pub const INIT_CLUSTER: Rule = Rule { since: 8 };
/// Who set a lifecycle configuration is recorded, and its deletions run
/// with that principal's rights.
pub const CONFIGURED_BY: Rule = Rule { since: 8 };
/// Configuring lifecycle or versioning needs DELETE besides WRITE.
pub const CONFIGURE_NEEDS_DELETE: Rule = Rule { since: 8 };
/// A retry-cache entry is keyed by the caller too, not only the client id.
pub const RETRY_BY_CALLER: Rule = Rule { since: 8 };
/// The S3 credential commands.
pub const S3_CREDENTIALS: Rule = Rule { since: 9 };
/// AbortKey, and CommitPart naming a write session's blocks.
pub const WRITE_SESSIONS: Rule = Rule { since: 9 };
/// Write conditions `if_match_any` and `if_none_match`.
pub const WRITE_CONDITIONS: Rule = Rule { since: 10 };
/// Lifecycle rules that remember the legacy Prefix form.
pub const LEGACY_PREFIX_RULES: Rule = Rule { since: 10 };
/// The retry cache kept by generation: one record per write.
pub const RETRY_GENERATIONS: Rule = Rule { since: 11 };
/// Batch entries (`Command.batch`): several writes in one entry, each
/// taking its ids below its slot.
pub const BATCHED_WRITES: Rule = Rule { since: 12 };
/// The cluster right RECLAIM: granted on `/`, and enough (without ALL) to
/// acknowledge deleted blocks.
pub const RECLAIM_RIGHT: Rule = Rule { since: 13 };
/// S3 secrets sealed at rest: CreateS3Secret may carry its secret sealed
/// (`sealed`), and ResealS3Secrets seals stored ones anew.
pub const SEALED_SECRETS: Rule = Rule { since: 14 };
/// Conditional deletes: DeleteKey and DeleteKeys may carry
/// `DeleteConditions` on what they remove.
pub const DELETE_CONDITIONS: Rule = Rule { since: 15 };
/// SetBucketTags, and a bucket's tags.
pub const BUCKET_TAGS: Rule = Rule { since: 15 };
/// CompleteMultipart records the object's part sizes.
pub const PART_SIZES: Rule = Rule { since: 15 };
/// Refusal messages quote a name once (`validate::quote_prefix`); entries
/// of older rules keep the message they were answered with, which quoted
/// names twice (`"\"alice\""`).
pub const QUOTE_ONCE: Rule = Rule { since: 15 };
/// Bucket snapshots: CreateSnapshot, DeleteSnapshot, RenameSnapshot and
/// ReclaimSnapshot; every write of a `keys` entry records its index
/// (`KeyRecord.written_index`), and an entry a snapshot shows is retained
/// when it leaves the table.
pub const BUCKET_SNAPSHOTS: Rule = Rule { since: 16 };

/// Every rule, by name: the history of apply's behaviour changes (rules 3,
/// versioned buckets, changed no existing command: a bucket is versioned
/// only through a rules-3 command).
pub const HISTORY: &[(&str, Rule)] = &[
    ("USAGE_COUNTERS", USAGE_COUNTERS),
    ("COUNTER_OVERFLOW", COUNTER_OVERFLOW),
    ("OWNER_BOUND", OWNER_BOUND),
    ("SUBTREE_BOUNDS", SUBTREE_BOUNDS),
    ("ACL_AT_APPLY", ACL_AT_APPLY),
    ("BUCKET_LIFECYCLE", BUCKET_LIFECYCLE),
    ("OBJECT_TAGS", OBJECT_TAGS),
    ("LIFECYCLE_SCAN", LIFECYCLE_SCAN),
    ("PUT_KEYS", PUT_KEYS),
    ("SCAN_BY_MODIFICATION", SCAN_BY_MODIFICATION),
    ("INIT_CLUSTER", INIT_CLUSTER),
    ("CONFIGURED_BY", CONFIGURED_BY),
    ("CONFIGURE_NEEDS_DELETE", CONFIGURE_NEEDS_DELETE),
    ("RETRY_BY_CALLER", RETRY_BY_CALLER),
    ("S3_CREDENTIALS", S3_CREDENTIALS),
    ("WRITE_SESSIONS", WRITE_SESSIONS),
    ("WRITE_CONDITIONS", WRITE_CONDITIONS),
    ("LEGACY_PREFIX_RULES", LEGACY_PREFIX_RULES),
    ("RETRY_GENERATIONS", RETRY_GENERATIONS),
    ("BATCHED_WRITES", BATCHED_WRITES),
    ("RECLAIM_RIGHT", RECLAIM_RIGHT),
    ("SEALED_SECRETS", SEALED_SECRETS),
    ("DELETE_CONDITIONS", DELETE_CONDITIONS),
    ("BUCKET_TAGS", BUCKET_TAGS),
    ("PART_SIZES", PART_SIZES),
    ("QUOTE_ONCE", QUOTE_ONCE),
    ("BUCKET_SNAPSHOTS", BUCKET_SNAPSHOTS),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_is_in_order_and_within_the_current_rules() {
        let mut last = 0;
        for (name, r) in HISTORY {
            assert!(r.since >= last, "{name} is out of order");
            assert!(r.since >= 1 && r.since <= CURRENT, "{name}: {}", r.since);
            last = r.since;
        }
        assert!(!USAGE_COUNTERS.holds(0) && USAGE_COUNTERS.holds(1));
        assert_eq!(HISTORY.last().unwrap().1.since, CURRENT);
    }
}
