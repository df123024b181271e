//! The retry cache by generation (rules 11) and beside entries of rules 10.

use super::tests::{Sm, setup};
use super::*;
use om_proto::store as st;

/// Applies commands with client ids, as a leader stamps them.
struct Writer {
    sm: Sm,
    index: u64,
}

impl Writer {
    fn new() -> Writer {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        // Past the entries `setup` applied.
        Writer { sm, index: 100 }
    }

    fn apply(&mut self, cmd: Command) -> CommandResult {
        self.index += 1;
        let cmd = Command {
            now_ms: 1_000_000 + self.index,
            ..cmd
        };
        apply_alone(&self.sm.db, self.index, &cmd).unwrap().0
    }

    /// A PutKey of `key` from client "cli" with `seq`, under `rules`.
    fn put(&mut self, key: &str, seq: u64, rules: u32, legacy: bool) -> CommandResult {
        self.apply(Command {
            client_id: "cli".into(),
            seq,
            request_digest: format!("put {key}").into_bytes(),
            rules,
            retry_legacy: legacy,
            op: Some(Op::PutKey(st::PutKey {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: key.into(),
                size: 1,
                ..Default::default()
            })),
            ..Default::default()
        })
    }

    fn expire(&mut self, c: st::ExpireRetryCache) -> CommandResult {
        self.apply(Command {
            rules: RULES,
            op: Some(Op::ExpireRetryCache(c)),
            ..Default::default()
        })
    }

    fn advance(&mut self, from: u64) -> CommandResult {
        self.expire(st::ExpireRetryCache {
            advance_generation: true,
            from_generation: from,
            ..Default::default()
        })
    }

    fn generation(&self) -> u64 {
        current_generation(&self.sm.db).unwrap()
    }

    /// Every retry-cache key.
    fn cache_keys(&self) -> Vec<Vec<u8>> {
        crate::store::dump_table(&self.sm.db, keys::RETRY_CACHE_CF)
            .unwrap()
            .into_keys()
            .map(|(_, k)| k)
            .collect()
    }
}

fn update_id(r: &CommandResult) -> u64 {
    match into_outcome(r.clone()).unwrap() {
        command_result::Result::Key(k) => k.key.unwrap().update_id,
        other => panic!("not a key: {other:?}"),
    }
}

#[test]
fn a_write_keeps_one_record_and_is_answered_for_one_generation_more() {
    let mut w = Writer::new();
    let first = w.put("a", 1, RULES, false);
    let keys = w.cache_keys();
    assert_eq!(keys.len(), 1, "one record per write, no expiry index");
    assert_eq!(keys[0], keys::retry_generation_key(0, "cli", 1));
    assert_eq!(w.put("a", 1, RULES, false), first, "same generation");
    w.advance(0);
    assert_eq!(w.generation(), 1);
    let before = crate::store::dump_tables(&w.sm.db).unwrap();
    assert_eq!(w.put("a", 1, RULES, false), first, "the generation before");
    assert_eq!(before, crate::store::dump_tables(&w.sm.db).unwrap());
    // Another request under the same seq is still refused there.
    let other = w.put("b", 1, RULES, false);
    assert!(matches!(
        into_outcome(other),
        Err(OmError::Request { reason, .. }) if reason == "RETRY_MISMATCH"
    ));
    // The next generation removes the one the write was in: the same
    // request is now a new write.
    w.advance(1);
    assert!(w.cache_keys().is_empty(), "{:?}", w.cache_keys());
    let again = w.put("a", 1, RULES, false);
    assert!(update_id(&again) > update_id(&first));
    assert_eq!(
        w.cache_keys(),
        vec![keys::retry_generation_key(2, "cli", 1)]
    );
}

#[test]
fn a_stale_advance_changes_nothing() {
    let mut w = Writer::new();
    w.put("a", 1, RULES, false);
    w.advance(0);
    let before = crate::store::dump_tables(&w.sm.db).unwrap();
    let cache = w.cache_keys();
    // A second proposal made from the same view of the generation.
    w.advance(0);
    w.advance(7);
    assert_eq!(w.generation(), 1);
    assert_eq!(before, crate::store::dump_tables(&w.sm.db).unwrap());
    assert_eq!(cache, w.cache_keys());
}

/// An advance under rules 10 is the old command: it only expires entries
/// stored the old way, so old log entries apply as they did.
#[test]
fn rules_10_expiry_ignores_generations() {
    let mut w = Writer::new();
    w.put("a", 1, RULES, false);
    w.apply(Command {
        rules: 10,
        op: Some(Op::ExpireRetryCache(st::ExpireRetryCache {
            advance_generation: true,
            from_generation: 0,
            before_ms: u64::MAX,
            max_entries: 10,
        })),
        ..Default::default()
    });
    assert_eq!(w.generation(), 0);
    assert_eq!(w.cache_keys().len(), 1);
}

#[test]
fn entries_of_rules_10_are_found_while_the_leader_says_some_are_left() {
    let mut w = Writer::new();
    let one = w.put("a", 1, 10, false);
    let two = w.put("b", 2, 10, false);
    assert_eq!(w.cache_keys().len(), 4, "rules 10: entry and index each");
    // Rules 11 asked to look there: the cached answer, nothing changes.
    let before = crate::store::dump_tables(&w.sm.db).unwrap();
    assert_eq!(w.put("a", 1, RULES, true), one);
    assert_eq!(before, crate::store::dump_tables(&w.sm.db).unwrap());
    // Not asked: the generations alone decide (a leader asks until it has
    // seen none left, so this only happens once there are none).
    let again = w.put("b", 2, RULES, false);
    assert!(update_id(&again) > update_id(&two));
    // Expiry under rules 11 removes them a batch at a time, entry and index.
    let r = w.expire(st::ExpireRetryCache {
        before_ms: u64::MAX,
        max_entries: 1,
        ..Default::default()
    });
    assert!(matches!(
        into_outcome(r),
        Ok(command_result::Result::Count(st::CountResult { count: 1 }))
    ));
    w.expire(st::ExpireRetryCache {
        before_ms: u64::MAX,
        max_entries: 10,
        ..Default::default()
    });
    let left = w.cache_keys();
    assert_eq!(left, vec![keys::retry_generation_key(0, "cli", 2)]);
}
